/*
 * common/db.h: reaching PostgreSQL, for every program and test.
 *
 * The database is DATABASE_URL when it is set. Otherwise it is the private
 * cluster of this checkout (scripts/pg.sh), found under METER_PG_DIR or the
 * checkout's .pg folder, as user "meter" on its Unix socket; an installed
 * program (common/paths.h) without METER_PG_DIR uses libpq's defaults (the
 * PGHOST, PGUSER, PGDATABASE... variables, else the local socket as the user
 * of the same name).
 */
#ifndef COMMON_DB_H
#define COMMON_DB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/checked.h"

/* The connection string to use, written into buf. */
const char *db_url(char *buf, size_t len);

/*
 * Connects with the given URL (or db_url() when NULL). On failure writes
 * "could not connect to the database: ..." into err and returns NULL. The
 * caller owns the connection (PQfinish).
 */
PGconn *db_connect(const char *url, char *err, size_t errlen);

/*
 * Checks a result: true when its status is want. Otherwise writes
 * "<what>: <server message> (<detail>)" into err. Never clears r.
 */
bool db_check(const PGresult *r, ExecStatusType want, const char *what, char *err, size_t errlen);

/* Runs one command with no parameters and no rows; false with err on failure. */
bool db_exec(PGconn *c, const char *sql, char *err, size_t errlen);

/*
 * Runs sql with text parameters; the result when its status is want, else
 * NULL with err ("<what>: <server message>"). The caller clears the result.
 */
PGresult *db_query(PGconn *c, const char *sql, int n, const char *const *params,
                   ExecStatusType want, const char *what, char *err, size_t errlen);

/*
 * A whole-number column (bigint, or numeric such as a sum) as a 128-bit
 * integer; NULL reads as 0. False when the text is not a whole number.
 */
bool db_col_q(const PGresult *r, int row, int col, meter_i128 *out);

/*
 * The six sums of usage (cpu measured, cpu billed, busy, idle, wall, memory)
 * in columns col..col+5, as db_col_q reads them.
 */
struct meter_usage;
bool db_col_usage(const PGresult *r, int row, int col, struct meter_usage *u);

/* A 128-bit integer as text for a parameter (buf at least METER_QTY_BUF bytes). */
const char *db_q_text(meter_i128 v, char *buf, size_t len);

/* A timestamptz column as µs since the epoch in SQL; -1 for NULL. */
#define DB_US_OR_NONE(col) "coalesce((extract(epoch FROM " col ") * 1000000)::bigint, -1)"

/* Adds name: the time us (µs since the epoch) in RFC 3339, or null when us < 0. */
struct cJSON;
void db_json_time(struct cJSON *o, const char *name, int64_t us);

/* The SQLSTATE of a failed result, or "" when there is none. */
const char *db_sqlstate(const PGresult *r);

/* Whether account id exists: 1 yes, 0 no, -1 the query failed; err says why
 * for 0 ("account \"ID\" does not exist") and -1.
 * What an account-scoped key, session or webhook endpoint checks before it is
 * written: on Citus those tables are reference tables and accounts is
 * distributed, so no foreign key checks it there (docs/scaling.md). Accounts
 * are never deleted, so the answer holds until the insert. */
int db_account_exists(PGconn *c, const char *id, char *err, size_t errlen);

#endif
