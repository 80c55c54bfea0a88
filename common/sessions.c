#include "common/sessions.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/keys.h"

static bool token_ok(const char *t)
{
	if (strlen(t) != TOKEN_LEN)
		return false;
	for (const char *p = t; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int session_ttl(int64_t key_id)
{
	return key_id > 0 ? SESSION_TTL_S : LINK_SESSION_TTL_S;
}

bool session_create(PGconn *c, const char *kind, const char *account, int64_t key_id,
                    char token[TOKEN_LEN + 1], char *err, size_t errlen)
{
	char t[TOKEN_LEN + 1], ttl[16], kid[24];
	if (!key_random_hex(t, err, errlen))
		return false;
	snprintf(ttl, sizeof ttl, "%d",
	         strcmp(kind, "link") == 0 ? LINK_TTL_S : session_ttl(key_id));
	snprintf(kid, sizeof kid, "%lld", (long long)key_id);
	if (account && db_account_exists(c, account, err, errlen) <= 0)
		return false;
	const char *p[] = {t,       kind, account ? "account" : "admin",
	                   account, ttl,  key_id > 0 ? kid : NULL};
	PGresult *r =
	        PQexecParams(c,
	                     "INSERT INTO sessions (token_hash, kind, role, account_id, "
	                     "expires_at, key_id) VALUES (sha256(convert_to($1, 'UTF8')), $2, $3, "
	                     "$4, now() + $5::integer * interval '1 second', $6)",
	                     6, NULL, p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_COMMAND_OK, "could not make a session", err, errlen);
	PQclear(r);
	if (ok)
		memcpy(token, t, sizeof t);
	return ok;
}

static bool who(PGconn *c, const char *sql, const char *token, bool *found, bool *admin,
                char *account, size_t alen, char *err, size_t errlen)
{
	*found = false;
	if (!token_ok(token))
		return true;
	const char *p[] = {token};
	PGresult *r = PQexecParams(c, sql, 1, NULL, p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not read the session", err, errlen);
	if (ok && PQntuples(r) == 1) {
		*found = true;
		*admin = strcmp(PQgetvalue(r, 0, 0), "admin") == 0;
		snprintf(account, alen, "%s", PQgetvalue(r, 0, 1));
	}
	PQclear(r);
	return ok;
}

bool session_lookup(PGconn *c, const char *token, bool *found, bool *admin, char *account,
                    size_t alen, char *err, size_t errlen)
{
	return who(c,
	           "SELECT s.role, coalesce(s.account_id, '') FROM sessions s "
	           "WHERE s.token_hash = sha256(convert_to($1, 'UTF8')) AND s.kind = 'session' "
	           "AND s.expires_at > now() AND (s.key_id IS NULL OR EXISTS (SELECT 1 FROM "
	           "api_keys k WHERE k.id = s.key_id AND k.revoked_at IS NULL))",
	           token, found, admin, account, alen, err, errlen);
}

bool link_redeem(PGconn *c, const char *token, bool *found, bool *admin, char *account, size_t alen,
                 char *err, size_t errlen)
{
	return who(c,
	           "UPDATE sessions SET used_at = now() "
	           "WHERE token_hash = sha256(convert_to($1, 'UTF8')) AND kind = 'link' "
	           "AND used_at IS NULL AND expires_at > now() "
	           "RETURNING role, coalesce(account_id, '')",
	           token, found, admin, account, alen, err, errlen);
}

bool session_delete(PGconn *c, const char *token, char *err, size_t errlen)
{
	if (!token_ok(token))
		return true;
	const char *p[] = {token};
	PGresult *r = PQexecParams(c,
	                           "DELETE FROM sessions WHERE token_hash = "
	                           "sha256(convert_to($1, 'UTF8')) AND kind = 'session'",
	                           1, NULL, p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_COMMAND_OK, "could not end the session", err, errlen);
	PQclear(r);
	return ok;
}

bool sessions_revoke(PGconn *c, const char *account, long *ended, char *err, size_t errlen)
{
	if (account && db_account_exists(c, account, err, errlen) <= 0)
		return false;
	const char *p[] = {account};
	PGresult *r =
	        PQexecParams(c,
	                     "WITH d AS (DELETE FROM sessions WHERE account_id IS NOT DISTINCT "
	                     "FROM $1::text AND role = CASE WHEN $1::text IS NULL THEN "
	                     "'admin' ELSE 'account' END RETURNING kind, used_at, expires_at) "
	                     "SELECT count(*) FILTER (WHERE expires_at > now() AND "
	                     "(kind = 'session' OR used_at IS NULL)) FROM d",
	                     1, NULL, p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not end the sessions", err, errlen);
	if (ok)
		*ended = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return ok;
}

bool sessions_list(PGconn *c, const char *account, struct session_info **out, size_t *n, char *err,
                   size_t errlen)
{
	*out = NULL;
	*n = 0;
	const char *p[] = {account};
	PGresult *r = PQexecParams(
	        c,
	        "SELECT kind, coalesce(account_id, ''), coalesce(key_id, 0), "
	        "(extract(epoch FROM created_at) * 1000000)::bigint, "
	        "(extract(epoch FROM expires_at) * 1000000)::bigint FROM sessions "
	        "WHERE expires_at > now() AND (kind = 'session' OR used_at IS NULL) "
	        "AND ($1::text IS NULL OR account_id = $1::text) ORDER BY created_at DESC, kind",
	        1, NULL, p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not list the sessions", err, errlen);
	int rows = ok ? PQntuples(r) : 0;
	struct session_info *s = ok ? calloc((size_t)rows + 1, sizeof *s) : NULL;
	if (ok && s == NULL) {
		snprintf(err, errlen, "could not list the sessions: out of memory");
		ok = false;
	}
	for (int i = 0; ok && i < rows; i++) {
		snprintf(s[i].kind, sizeof s[i].kind, "%s", PQgetvalue(r, i, 0));
		snprintf(s[i].account, sizeof s[i].account, "%s", PQgetvalue(r, i, 1));
		s[i].key_id = strtoll(PQgetvalue(r, i, 2), NULL, 10);
		s[i].created_us = strtoll(PQgetvalue(r, i, 3), NULL, 10);
		s[i].expires_us = strtoll(PQgetvalue(r, i, 4), NULL, 10);
	}
	PQclear(r);
	if (!ok) {
		free(s);
		return false;
	}
	*out = s;
	*n = (size_t)rows;
	return true;
}
