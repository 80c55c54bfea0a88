/*
 * common/keys.h: API keys.
 *
 * A key is "mk_" followed by 64 hex digits from the kernel's random source
 * (256 bits). The database keeps only its SHA-256 (computed by PostgreSQL's
 * built-in sha256()) and the key's first 11 characters, enough for an
 * operator to tell keys apart and far too few to use one. The key itself is
 * shown once, when it is made.
 */
#ifndef COMMON_KEYS_H
#define COMMON_KEYS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KEY_PREFIX      "mk_"
#define KEY_LEN         67 /* "mk_" + 64 hex digits */
#define KEY_SHOWN_CHARS 11

/*
 * Makes a key of role "admin" (account_id NULL), "account" (for account_id)
 * or "hook" (quota checks, sandbox registrations and stops; of account_id
 * alone when not NULL). Writes the key (KEY_LEN + 1 bytes) and its row id. On
 * failure (no such account, database error) writes err and stores nothing.
 */
bool key_create(PGconn *c, const char *role, const char *account_id, char key[KEY_LEN + 1],
                int64_t *id, char *err, size_t errlen);

/* A key as listed: never the key itself. Times in µs since the epoch, -1 for none. */
struct key_info {
	int64_t id;
	char shown[KEY_SHOWN_CHARS + 1];
	char role[8];      /* "admin", "account" or "hook" */
	char account[160]; /* "" for an admin key, and a hook key of every account */
	int64_t created_us, last_used_us, revoked_us;
};

/* A key as JSON: id, shown, role, account_id, created_at, last_used_at, revoked_at (null when
 * none). */
struct cJSON *key_info_json(const struct key_info *k);

/* Every key, oldest first, into *out (malloc'd, n of them); false with err. */
bool key_list(PGconn *c, struct key_info **out, size_t *n, char *err, size_t errlen);

/*
 * Revokes key id and ends the dashboard sessions it opened, in one
 * transaction. *found is false when there is no such key; a key revoked
 * already stays as it was (its first revocation time).
 */
bool key_revoke(PGconn *c, int64_t id, bool *found, char *err, size_t errlen);

/* 64 hex digits of 256 random bits from the kernel (and a NUL); false with err. */
bool key_random_hex(char out[65], char *err, size_t errlen);

/* len bytes from the kernel's random source (getrandom) into buf; false with err. */
bool key_random_bytes(void *buf, size_t len, char *err, size_t errlen);

#endif
