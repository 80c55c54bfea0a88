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
 * Makes a key: an admin key when account_id is NULL, else a key for that
 * account. Writes the key (KEY_LEN + 1 bytes) and its row id. On failure
 * (no such account, database error) writes err and stores nothing.
 */
bool key_create(PGconn *c, const char *account_id, char key[KEY_LEN + 1], int64_t *id, char *err,
                size_t errlen);

/* 64 hex digits of 256 random bits from the kernel (and a NUL); false with err. */
bool key_random_hex(char out[65], char *err, size_t errlen);

#endif
