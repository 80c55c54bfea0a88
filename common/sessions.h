/*
 * common/sessions.h: dashboard sessions and one-time login links.
 *
 * Tokens are 64 random hex digits; the database keeps their SHA-256 only
 * (migration 0007). A session opened with an API key lasts SESSION_TTL_S and
 * ends when the key is revoked; a link lasts LINK_TTL_S and opens one
 * session, once, which lasts LINK_SESSION_TTL_S and ends when its account
 * (or, for an admin's, the admins) has no key left unrevoked: revoking an
 * account's keys ends every way into its dashboard. `meter session list`
 * and `meter session revoke` show and end them.
 */
#ifndef COMMON_SESSIONS_H
#define COMMON_SESSIONS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_TTL_S      43200 /* 12 hours */
#define LINK_TTL_S         600   /* 10 minutes */
#define LINK_SESSION_TTL_S 3600  /* an hour: no key stands behind it */
#define TOKEN_LEN          64

/*
 * Makes a session or a link (kind "session" or "link") for an admin (account
 * NULL) or an account; key_id names the API key a session was opened with
 * (0: none, a link's): revoking the key ends the session.
 */
bool session_create(PGconn *c, const char *kind, const char *account, int64_t key_id,
                    char token[TOKEN_LEN + 1], char *err, size_t errlen);

/*
 * Who a live session is: *found false when the token is unknown or expired.
 * account receives "" for an admin.
 */
bool session_lookup(PGconn *c, const char *token, bool *found, bool *admin, char *account,
                    size_t alen, char *err, size_t errlen);

/* Uses a link up (once): *found false when unknown, used or expired. */
bool link_redeem(PGconn *c, const char *token, bool *found, bool *admin, char *account, size_t alen,
                 char *err, size_t errlen);

/* Ends a session (logout); an unknown token is no error. */
bool session_delete(PGconn *c, const char *token, char *err, size_t errlen);

/* The time a session opened with key_id (0: from a link) lasts, in seconds. */
int session_ttl(int64_t key_id);

/*
 * Ends every session and link of an account (NULL: of the admins): *ended how
 * many of them were live. For an operator cutting access off at once.
 */
bool sessions_revoke(PGconn *c, const char *account, long *ended, char *err, size_t errlen);

/* One live session or unused link, as meter session list shows it. */
struct session_info {
	char kind[16];     /* "session" or "link" */
	char account[160]; /* "" for an admin's */
	int64_t key_id;    /* the key it was opened with; 0 for a link's */
	int64_t created_us, expires_us;
};

/* The live sessions and unused links (of account only, when not NULL), newest first. */
bool sessions_list(PGconn *c, const char *account, struct session_info **out, size_t *n, char *err,
                   size_t errlen);

#endif
