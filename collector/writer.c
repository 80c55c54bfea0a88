#include "collector/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/batch.h"
#include "common/db.h"
#include "meter/decimal.h"

#define STAGING                                                                                    \
	"CREATE TEMP TABLE meter_staging (sandbox_id text, incarnation bigint, "                   \
	"ts timestamptz, account_id text, host text, cpu_usage_us bigint, "                        \
	"memory_current_bytes bigint, memory_peak_bytes bigint, "                                  \
	"memory_anon_kernel_bytes bigint, memory_limit_bytes bigint, "                             \
	"cpu_limit_millicores bigint) ON COMMIT DROP"

static bool exec_ok(PGconn *c, const char *sql, ExecStatusType want, const char *what, char *err,
                    size_t errlen)
{
	PGresult *r = PQexec(c, sql);
	bool ok = db_check(r, want, what, err, errlen);
	PQclear(r);
	return ok;
}

bool writer_write(PGconn *c, const char *role, const char *data, size_t len, long *inserted,
                  char *err, size_t errlen)
{
	PGresult *r = NULL;
	bool ok = false;
	if (!exec_ok(c, "BEGIN", PGRES_COMMAND_OK, "could not begin", err, errlen))
		return false;
	if (role[0]) {
		char *q = PQescapeIdentifier(c, role, strlen(role));
		char sql[256];
		snprintf(sql, sizeof sql, "SET LOCAL ROLE %s", q ? q : "\"\"");
		PQfreemem(q);
		if (!exec_ok(c, sql, PGRES_COMMAND_OK, "could not take the collector role", err,
		             errlen))
			goto out;
	}
	if (!exec_ok(c, STAGING, PGRES_COMMAND_OK, "could not make the staging table", err, errlen))
		goto out;
	r = PQexec(c, "COPY meter_staging (" BATCH_COLUMNS ") FROM STDIN");
	if (!db_check(r, PGRES_COPY_IN, "could not start COPY", err, errlen))
		goto out;
	PQclear(r);
	r = NULL;
	if (PQputCopyData(c, data, (int)len) != 1 || PQputCopyEnd(c, NULL) != 1) {
		snprintf(err, errlen, "could not send samples: %s", PQerrorMessage(c));
		goto out;
	}
	r = PQgetResult(c);
	if (!db_check(r, PGRES_COMMAND_OK, "COPY of samples failed", err, errlen))
		goto out;
	PQclear(r);
	r = PQexec(c, "INSERT INTO samples (" BATCH_COLUMNS ") SELECT " BATCH_COLUMNS
	              " FROM meter_staging ON CONFLICT DO NOTHING");
	if (!db_check(r, PGRES_COMMAND_OK, "could not insert samples", err, errlen))
		goto out;
	int64_t n = 0;
	(void)meter_decimal_parse(PQcmdTuples(r), 0, false, &n);
	*inserted = (long)n;
	PQclear(r);
	r = NULL;
	ok = exec_ok(c, "COMMIT", PGRES_COMMAND_OK, "could not commit samples", err, errlen);
out:
	PQclear(r);
	/* Drain what a failed COPY may have left, then roll back. */
	while ((r = PQgetResult(c)) != NULL)
		PQclear(r);
	if (!ok && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return ok;
}
