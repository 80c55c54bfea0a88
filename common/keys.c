#include "common/keys.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/db.h"
#include "meter/timefmt.h"
#include "meter/decimal.h"

bool key_random_bytes(void *buf, size_t len, char *err, size_t errlen)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = getrandom((unsigned char *)buf + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "could not read random bytes: %s", strerror(errno));
			return false;
		}
		got += (size_t)n;
	}
	return true;
}

bool key_random_hex(char out[65], char *err, size_t errlen)
{
	unsigned char raw[32];
	if (!key_random_bytes(raw, sizeof raw, err, errlen))
		return false;
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[64] = '\0';
	return true;
}

static bool random_key(char key[KEY_LEN + 1], char *err, size_t errlen)
{
	memcpy(key, KEY_PREFIX, 3);
	return key_random_hex(key + 3, err, errlen);
}

bool key_create(PGconn *c, const char *role, const char *account_id, char key[KEY_LEN + 1],
                int64_t *id, char *err, size_t errlen)
{
	char fresh[KEY_LEN + 1], shown[KEY_SHOWN_CHARS + 1];
	if (!random_key(fresh, err, errlen))
		return false;
	memcpy(shown, fresh, KEY_SHOWN_CHARS);
	shown[KEY_SHOWN_CHARS] = '\0';
	if (account_id && db_account_exists(c, account_id, err, errlen) <= 0)
		return false;
	const char *params[] = {fresh, shown, role, account_id};
	PGresult *r =
	        PQexecParams(c,
	                     "INSERT INTO api_keys (key_hash, shown, role, account_id) "
	                     "VALUES (sha256(convert_to($1, 'UTF8')), $2, $3, $4) RETURNING id",
	                     4, NULL, params, NULL, NULL, 0);
	bool ok = false;
	if (db_check(r, PGRES_TUPLES_OK, "could not create key", err, errlen)) {
		int64_t v = 0;
		(void)meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, &v);
		*id = v;
		memcpy(key, fresh, sizeof fresh);
		ok = true;
	}
	PQclear(r);
	return ok;
}

#define US(col) DB_US_OR_NONE(col)

bool key_list(PGconn *c, struct key_info **out, size_t *n, char *err, size_t errlen)
{
	*out = NULL;
	*n = 0;
	PGresult *r = PQexec(
	        c, "SELECT id, shown, role, coalesce(account_id, ''), " US("created_at") ", " US(
	                   "last_used_at") ", " US("revoked_at") " FROM api_keys ORDER BY id");
	if (!db_check(r, PGRES_TUPLES_OK, "could not list keys", err, errlen)) {
		PQclear(r);
		return false;
	}
	int rows = PQntuples(r);
	struct key_info *k = calloc((size_t)rows + 1, sizeof *k);
	bool ok = k != NULL;
	if (!ok)
		snprintf(err, errlen, "could not list keys: out of memory");
	for (int i = 0; ok && i < rows; i++) {
		ok = meter_decimal_parse(PQgetvalue(r, i, 0), 0, false, &k[i].id) == METER_OK &&
		     meter_decimal_parse(PQgetvalue(r, i, 4), 0, true, &k[i].created_us) ==
		             METER_OK &&
		     meter_decimal_parse(PQgetvalue(r, i, 5), 0, true, &k[i].last_used_us) ==
		             METER_OK &&
		     meter_decimal_parse(PQgetvalue(r, i, 6), 0, true, &k[i].revoked_us) ==
		             METER_OK;
		snprintf(k[i].shown, sizeof k[i].shown, "%s", PQgetvalue(r, i, 1));
		snprintf(k[i].role, sizeof k[i].role, "%s", PQgetvalue(r, i, 2));
		snprintf(k[i].account, sizeof k[i].account, "%s", PQgetvalue(r, i, 3));
		if (!ok)
			snprintf(err, errlen, "could not list keys: a row could not be read");
	}
	PQclear(r);
	if (!ok) {
		free(k);
		return false;
	}
	*out = k;
	*n = (size_t)rows;
	return true;
}

bool key_revoke(PGconn *c, int64_t id, bool *found, char *err, size_t errlen)
{
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *params[] = {ids};
	/* One statement, one transaction: the key and its sessions go together, and
	 * with the last key unrevoked of its account (or of the admins) the sessions
	 * links opened there, which no key stands behind (common/sessions.h). A key
	 * revoked before keeps its time (set only where there is none: Citus
	 * evaluates now() apart, never beside a column as coalesce(revoked_at, now())
	 * would). */
	PGresult *r = PQexecParams(
	        c,
	        "WITH k AS (SELECT id, account_id FROM api_keys WHERE id = $1), "
	        "u AS (UPDATE api_keys SET revoked_at = now() "
	        "WHERE id = $1 AND revoked_at IS NULL), "
	        "s AS (DELETE FROM sessions WHERE key_id = $1), "
	        "l AS (DELETE FROM sessions x USING k WHERE x.key_id IS NULL "
	        "AND x.account_id IS NOT DISTINCT FROM k.account_id "
	        "AND x.role = CASE WHEN k.account_id IS NULL THEN 'admin' ELSE 'account' END "
	        "AND NOT EXISTS (SELECT 1 FROM api_keys o WHERE o.id <> $1 AND o.revoked_at IS "
	        "NULL "
	        "AND o.account_id IS NOT DISTINCT FROM k.account_id "
	        "AND o.role = CASE WHEN k.account_id IS NULL THEN 'admin' ELSE 'account' END)) "
	        "SELECT count(*) FROM k",
	        1, NULL, params, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not revoke the key", err, errlen);
	if (ok)
		*found = strcmp(PQgetvalue(r, 0, 0), "1") == 0;
	PQclear(r);
	return ok;
}

cJSON *key_info_json(const struct key_info *k)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)k->id);
	cJSON_AddStringToObject(o, "shown", k->shown);
	cJSON_AddStringToObject(o, "role", k->role);
	if (k->account[0])
		cJSON_AddStringToObject(o, "account_id", k->account);
	else
		cJSON_AddNullToObject(o, "account_id");
	db_json_time(o, "created_at", k->created_us);
	db_json_time(o, "last_used_at", k->last_used_us);
	db_json_time(o, "revoked_at", k->revoked_us);
	return o;
}
