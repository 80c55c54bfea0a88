#include "common/db.h"

#include "common/paths.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percent-encodes a path for the host= parameter of a URL. */
static void encode_path(const char *s, char *out, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	for (; *s && o + 4 < len; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || strchr("/-._~", ch)) {
			out[o++] = (char)ch;
		} else {
			out[o++] = '%';
			out[o++] = hex[ch >> 4];
			out[o++] = hex[ch & 15];
		}
	}
	out[o] = '\0';
}

const char *db_url(char *buf, size_t len)
{
	const char *env = getenv("DATABASE_URL");
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return buf;
	}
	const char *dir = getenv("METER_PG_DIR");
	if (!(dir && *dir))
		dir = paths_private_pg_dir();
	if (dir == NULL) {
		/* An installed program has no checkout: libpq's defaults (PGHOST...). */
		if (len > 0)
			buf[0] = '\0';
		return buf;
	}
	char enc[1024];
	encode_path(dir, enc, sizeof enc);
	snprintf(buf, len, "postgresql:///meter?host=%s/run&user=meter", enc);
	return buf;
}

PGconn *db_connect(const char *url, char *err, size_t errlen)
{
	char buf[2048];
	if (url == NULL)
		url = db_url(buf, sizeof buf);
	PGconn *c = PQconnectdb(url);
	if (c == NULL) {
		snprintf(err, errlen, "could not connect to the database: out of memory");
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		char msg[1024];
		snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
		msg[strcspn(msg, "\n")] = '\0';
		snprintf(err, errlen, "could not connect to the database: %s%s", msg,
		         getenv("DATABASE_URL") ? ""
		         : url[0] == '\0'       ? " (DATABASE_URL is not set, so libpq's defaults "
		                                  "were tried: PGHOST, PGUSER, PGDATABASE)"
		                          : " (DATABASE_URL is not set, so the private cluster "
		                            "was tried: start it with scripts/pg.sh start)");
		PQfinish(c);
		return NULL;
	}
	/* Everything meter writes and reads is in UTC. */
	PGresult *r = PQexec(c, "SET TIME ZONE 'UTC'; SET client_min_messages TO warning");
	bool ok = db_check(r, PGRES_COMMAND_OK, "could not set the time zone", err, errlen);
	PQclear(r);
	if (!ok) {
		PQfinish(c);
		return NULL;
	}
	return c;
}

bool db_check(const PGresult *r, ExecStatusType want, const char *what, char *err, size_t errlen)
{
	if (r && PQresultStatus(r) == want)
		return true;
	const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *detail = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL) : NULL;
	if (msg == NULL)
		msg = r ? PQresStatus(PQresultStatus(r)) : "no result (connection lost?)";
	if (detail)
		snprintf(err, errlen, "%s: %s (%s)", what, msg, detail);
	else
		snprintf(err, errlen, "%s: %s", what, msg);
	return false;
}

bool db_exec(PGconn *c, const char *sql, char *err, size_t errlen)
{
	PGresult *r = PQexec(c, sql);
	bool ok = db_check(r, PGRES_COMMAND_OK, sql, err, errlen);
	PQclear(r);
	return ok;
}

const char *db_sqlstate(const PGresult *r)
{
	const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	return s ? s : "";
}

int db_account_exists(PGconn *c, const char *id, char *err, size_t errlen)
{
	const char *p[] = {id};
	PGresult *r = db_query(c, "SELECT 1 FROM accounts WHERE id = $1", 1, p, PGRES_TUPLES_OK,
	                       "could not look the account up", err, errlen);
	if (r == NULL)
		return -1;
	int n = PQntuples(r);
	PQclear(r);
	if (n == 0)
		snprintf(err, errlen, "account \"%s\" does not exist", id);
	return n > 0;
}

PGresult *db_query(PGconn *c, const char *sql, int n, const char *const *params,
                   ExecStatusType want, const char *what, char *err, size_t errlen)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	if (!db_check(r, want, what, err, errlen)) {
		PQclear(r);
		return NULL;
	}
	return r;
}

bool db_col_q(const PGresult *r, int row, int col, meter_i128 *out)
{
	if (PQgetisnull(r, row, col)) {
		*out = 0;
		return true;
	}
	return meter_qty_parse(PQgetvalue(r, row, col), true, out) == METER_OK;
}

bool db_col_usage(const PGresult *r, int row, int col, struct meter_usage *u)
{
	return db_col_q(r, row, col, &u->cpu_measured_us) &&
	       db_col_q(r, row, col + 1, &u->cpu_billed_us) &&
	       db_col_q(r, row, col + 2, &u->busy_us) && db_col_q(r, row, col + 3, &u->idle_us) &&
	       db_col_q(r, row, col + 4, &u->wall_us) && db_col_q(r, row, col + 5, &u->mem_mgib_us);
}

const char *db_q_text(meter_i128 v, char *buf, size_t len)
{
	meter_qty_format(v, 0, 0, buf, len);
	return buf;
}

void db_json_time(cJSON *o, const char *name, int64_t us)
{
	char t[METER_TIME_BUF];
	if (us < 0) {
		cJSON_AddNullToObject(o, name);
		return;
	}
	meter_time_format(us, t, sizeof t);
	cJSON_AddStringToObject(o, name, t);
}
