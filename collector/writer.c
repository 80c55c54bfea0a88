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
	"cpu_limit_millicores bigint, ended boolean, end_cpu text) ON COMMIT DROP"

/*
 * On Citus, the connections to the workers this session keeps between its
 * transactions: as many as there are shards (citus.shard_count; Citus opens at most
 * a worker's shards' worth). A batch reaches every shard of samples, each over a
 * connection of its own, and with Citus's default of one kept per worker every batch
 * opened the others again: 1.5 s instead of 0.3 s for 5,000 samples on the test
 * cluster (docs/scaling.md). Outside a transaction, so a batch rolled back keeps it;
 * nothing on PostgreSQL without Citus, which has no citus.shard_count.
 */
#define CACHED_CONNECTIONS                                                                         \
	"SELECT set_config('citus.max_cached_conns_per_worker', "                                  \
	"current_setting('citus.shard_count'), false) "                                            \
	"WHERE current_setting('citus.shard_count', true) IS NOT NULL; "

/*
 * How long the write waits for a lock (on samples, a partition, a queue row)
 * before it gives up: a migration that rebuilds samples' key (0033) or
 * partition upkeep holds the table longer than a round, and a collector stuck
 * in its write stops sampling. Past it the batch fails like a database away:
 * it goes to the spool and is sent again at the next flush, the rounds go on.
 * Ordinary waits (a rollup batch holding a queue row) take well under it.
 */
#define LOCK_WAIT "5s"

#define WITH_END_CPU                                                                               \
	"SELECT to_regprocedure('meter_samples_ingest(meter_sample_row[], text[])') IS NOT NULL"

#define COPY_PIECE ((size_t)8192)

bool writer_write(PGconn *c, const char *role, const char *data, size_t len, long *inserted,
                  char *err, size_t errlen)
{
	PGresult *r = NULL;
	bool ok = false;
	char sql[1024];
	/* Three round trips: set up, COPY, insert and commit. */
	char *q = role[0] ? PQescapeIdentifier(c, role, strlen(role)) : NULL;
	if (role[0] && q == NULL) {
		snprintf(err, errlen, "could not quote role \"%s\": %s", role, PQerrorMessage(c));
		err[strcspn(err, "\n")] = '\0';
		return false;
	}
	/* and whether the database takes each end's end_cpu (migration 0042): a
	 * database not yet migrated gets the rows alone */
	snprintf(sql, sizeof sql,
	         CACHED_CONNECTIONS "BEGIN; SET LOCAL lock_timeout = '" LOCK_WAIT
	                            "'; %s%s%s" STAGING "; " WITH_END_CPU,
	         q ? "SET LOCAL ROLE " : "", q ? q : "", q ? "; " : "");
	PQfreemem(q);
	r = PQexec(c, sql);
	if (!db_check(r, PGRES_TUPLES_OK, "could not prepare to write samples", err, errlen))
		goto out;
	bool with_end_cpu = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	r = NULL;
	/* A spool record of an older collector has no end_cpu field (12, not 13),
	 * or neither it nor ended (11). */
	const char *nl = memchr(data, '\n', len);
	size_t tabs = 0;
	for (const char *p = data; p < (nl ? nl : data + len); p++)
		tabs += *p == '\t';
	r = PQexec(c, tabs == 10   ? "COPY meter_staging (" BATCH_COLUMNS_OLD ") FROM STDIN"
	              : tabs == 11 ? "COPY meter_staging (" BATCH_COLUMNS_12 ") FROM STDIN"
	                           : "COPY meter_staging (" BATCH_COLUMNS ") FROM STDIN");
	if (!db_check(r, PGRES_COPY_IN, "could not start COPY", err, errlen))
		goto out;
	PQclear(r);
	r = NULL;
	/* In pieces that fit libpq's output buffer as it is (16 KiB): handed the whole
	 * batch at once, it grows the buffer to hold it and keeps it, 80 KiB more
	 * peak RSS for a thousand sandboxes (bench/collector_real.sh). A piece that
	 * fills the buffer is sent then: a few more send()s a round. */
	bool sent = true;
	for (size_t at = 0; sent && at < len; at += COPY_PIECE)
		sent = PQputCopyData(c, data + at,
		                     (int)(len - at < COPY_PIECE ? len - at : COPY_PIECE)) == 1;
	if (!sent || PQputCopyEnd(c, NULL) != 1) {
		snprintf(err, errlen, "could not send samples: %s", PQerrorMessage(c));
		err[strcspn(err, "\n")] = '\0';
		/* Leave COPY state, or libpq answers COPY_IN for ever. */
		(void)PQputCopyEnd(c, "the collector could not send its batch");
		goto out;
	}
	r = PQgetResult(c);
	if (!db_check(r, PGRES_COMMAND_OK, "COPY of samples failed", err, errlen))
		goto out;
	PQclear(r);
	while ((r = PQgetResult(c)) != NULL) /* the end of the COPY command */
		PQclear(r);
	/* meter_samples_ingest (migrations/functions/) inserts the batch, leaving out samples
	 * already there (a batch sent twice), and marks the rollup queue in the same
	 * statement; the count it inserted comes back with the COMMIT's result. */
	if (!PQsendQuery(c, with_end_cpu
	                            ? "SELECT meter_samples_ingest(array_agg(ROW(" BATCH_COLUMNS_12
	                              ")::meter_sample_row), array_agg(end_cpu)) FROM "
	                              "meter_staging; COMMIT"
	                            : "SELECT meter_samples_ingest(array_agg(ROW(" BATCH_COLUMNS_12
	                              ")::meter_sample_row)) FROM meter_staging; COMMIT")) {
		snprintf(err, errlen, "could not insert samples: %s", PQerrorMessage(c));
		err[strcspn(err, "\n")] = '\0';
		goto out;
	}
	int64_t n = -1;
	bool committed = false, failed = false;
	while ((r = PQgetResult(c)) != NULL) {
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_TUPLES_OK && PQntuples(r) == 1) {
			if (meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, &n) != METER_OK)
				n = -1;
		} else if (st == PGRES_COMMAND_OK && strcmp(PQcmdStatus(r), "COMMIT") == 0) {
			committed = true;
		} else {
			if (!failed)
				db_check(r, PGRES_TUPLES_OK, "could not insert samples", err,
				         errlen);
			failed = true;
		}
		PQclear(r);
	}
	r = NULL;
	if (failed)
		goto out;
	if (!committed) {
		snprintf(err, errlen, "could not commit samples: the server did not say COMMIT");
		goto out;
	}
	*inserted = (long)n;
	ok = true;
out:
	PQclear(r);
	/* Drain what a failed COPY may have left (never looping on a COPY state), then roll back.
	 */
	while ((r = PQgetResult(c)) != NULL) {
		ExecStatusType st = PQresultStatus(r);
		PQclear(r);
		if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH)
			break; /* stuck in COPY: the caller drops the connection */
	}
	if (!ok && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return ok;
}
