#include "api/auth.h"

#include <stdio.h>
#include <string.h>

#include "api/input.h"
#include "api/queries.h"
#include "api/reply.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/sessions.h"

/* A page's request with no key: the session cookie, or off to the login form. */
static bool authenticate_session(struct req *r)
{
	char err[256];
	bool found = false;
	PGconn *c = r->session[0] ? req_db(r) : NULL;
	if (r->session[0] && c == NULL)
		return false;
	if (c && !session_lookup(c, r->session, &found, &r->admin, r->account, sizeof r->account,
	                         err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return false;
	}
	if (!found)
		reply_redirect(r, "/login", NULL);
	return found;
}

/*
 * Looks a key up (Q_AUTH): 1 when it is live (r->admin and r->account set),
 * 0 when unknown or revoked, -1 when the database failed (*failed holds the
 * result, for the caller's answer).
 */
static int key_found(struct req *r, PGconn *c, PGresult *res, PGresult **failed)
{
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		*failed = res;
		return -1;
	}
	int found = PQntuples(res) == 1;
	if (found) {
		r->admin = strcmp(PQgetvalue(res, 0, 0), "admin") == 0;
		r->hook = strcmp(PQgetvalue(res, 0, 0), "hook") == 0;
		snprintf(r->account, sizeof r->account, "%s", PQgetvalue(res, 0, 1));
		req_key_note_use(c, res);
	}
	PQclear(res);
	return found;
}

void req_key_note_use(PGconn *c, const PGresult *res)
{
	if (PQntuples(res) != 1 || PQnfields(res) < 4 || strcmp(PQgetvalue(res, 0, 3), "t") != 0 ||
	    PQtransactionStatus(c) != PQTRANS_IDLE)
		return;
	const char *params[] = {PQgetvalue(res, 0, 2)};
	PGresult *u = q_exec(c, Q_KEY_USED, 1, params);
	if (PQresultStatus(u) != PGRES_COMMAND_OK)
		log_debug("could not note the use of key %s: %s", params[0], PQerrorMessage(c));
	PQclear(u);
}

static int key_lookup(struct req *r, PGconn *c, const char *key, PGresult **failed)
{
	const char *params[] = {key};
	return key_found(r, c, q_exec(c, Q_AUTH, 1, params), failed);
}

/* 1 when the lookup found a live key; otherwise answers (401, or the database's error). */
static bool key_answer(struct req *r, int found, PGresult *failed)
{
	if (found < 0)
		reply_db_error(r, "could not check the API key", failed);
	else if (found == 0)
		reply_problemf(r, 401, "unauthorized", "Unauthorized",
		               "the API key is not valid (unknown or revoked)");
	PQclear(failed);
	return found == 1;
}

const char *req_key(struct req *r)
{
	return r->key;
}

bool req_key_checked(struct req *r, PGconn *c, PGresult *res)
{
	PGresult *failed = NULL;
	int found = key_found(r, c, res, &failed);
	return key_answer(r, found, failed);
}

bool req_authenticate(struct req *r)
{
	PGconn *c = req_db(r);
	if (c == NULL)
		return false;
	PGresult *failed = NULL;
	int found = key_lookup(r, c, r->key, &failed);
	return key_answer(r, found, failed);
}

bool auth_route(struct req *r)
{
	const char *h = r->auth_header;
	if (h[0] == '\0' && r->route->page)
		return authenticate_session(r);
	if (h[0] == '\0') {
		reply_problemf(r, 401, "unauthorized", "Unauthorized",
		               "this request needs an API key: Authorization: Bearer KEY");
		return false;
	}
	if (!in_bearer_key(h, r->key, sizeof r->key)) {
		reply_problemf(r, 401, "unauthorized", "Unauthorized",
		               "the Authorization header must be \"Bearer \" and an API key");
		return false;
	}
	/* The handler looks the key up with its own statement (req_key_checked). */
	if (r->route->auth == AUTH_ANY_IN_HANDLER)
		return true;
	/* Every request asks the database (no cache): a revoked key is refused at once by
	 * every meter-api process. */
	return req_authenticate(r);
}

bool req_is_admin(struct req *r)
{
	char key[KEY_LEN + 1];
	if (r->route->auth != AUTH_PUBLIC)
		return r->admin;
	if (r->auth_header[0] == '\0' || !in_bearer_key(r->auth_header, key, sizeof key))
		return false;
	PGconn *c = r->db; /* the handler's connection: none, no answer */
	PGresult *failed = NULL;
	bool admin = c && key_lookup(r, c, key, &failed) == 1 && r->admin;
	PQclear(failed);
	return admin;
}

bool req_may_see(struct req *r, const char *account_id)
{
	if (r->admin || (r->hook && r->account[0] == '\0') || strcmp(r->account, account_id) == 0)
		return true;
	/* 404, not 403: a key never learns whether another account exists. */
	reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", account_id);
	return false;
}
