/*
 * common/sessions.h: dashboard sessions and one-time login links.
 *
 * Tokens are 64 random hex digits; the database keeps their SHA-256 only
 * (migration 0007). A session lasts SESSION_TTL_S; a link lasts LINK_TTL_S
 * and opens one session, once.
 */
#ifndef COMMON_SESSIONS_H
#define COMMON_SESSIONS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SESSION_TTL_S 43200 /* 12 hours */
#define LINK_TTL_S    600   /* 10 minutes */
#define TOKEN_LEN     64

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

#endif
