/*
 * api/auth.h: who a request comes from, and what it may see.
 *
 * A request shows an API key (Authorization: Bearer KEY) or, on a page for
 * people, the session cookie (common/sessions.h). Every key is looked up in
 * the database on every request (no cache): a revoked key is refused at once
 * by every meter-api process. Authentication sets r->admin and r->account.
 */
#ifndef API_AUTH_H
#define API_AUTH_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "api/request.h"

/*
 * The authentication of a request whose route is not AUTH_PUBLIC, before its
 * handler runs (api/server.c): the bearer key looked up, or, for a page sent
 * without a key, the session cookie. False when it has answered: 401, a
 * redirect to /login for a page, or 503 for the database. For an
 * AUTH_ANY_IN_HANDLER route it checks only that a key is there (the handler
 * looks it up: req_key_checked).
 */
bool auth_route(struct req *r);

/*
 * True when a public route's request carries a valid admin key, checked on the
 * database connection it holds already (false without one); never answers.
 */
bool req_is_admin(struct req *r);

/*
 * For AUTH_ANY_IN_HANDLER routes. req_key: the request's API key (its
 * Authorization header was checked to hold one before the handler ran).
 * req_key_checked: the result of the key's lookup (Q_AUTH, run by the handler
 * on req_db's connection): true when the key is live (the request then knows
 * its account, as after AUTH_ANY); otherwise answers 401 or the database's
 * error and returns false. req_authenticate: the lookup on its own, for a
 * handler that answers before its statement (a malformed body: the key's
 * answer comes first, as on every route).
 */
const char *req_key(struct req *r);
bool req_key_checked(struct req *r, PGconn *c, PGresult *res);

/*
 * Notes the use of the key a Q_AUTH result found (its row 0), when the result
 * says it is due: Q_KEY_USED on c, outside any transaction (on a connection
 * inside one, the note waits for a later request). A note that fails is
 * logged at debug level and changes nothing else: last_used_at is a hint for
 * an operator, never a reason to refuse a request.
 */
void req_key_note_use(PGconn *c, const PGresult *res);
bool req_authenticate(struct req *r);

/*
 * True when the request may see account id (an admin key, a hook key of no
 * account, or a key of that account); answers 404 (and returns false) when not.
 */
bool req_may_see(struct req *r, const char *account_id);

#endif
