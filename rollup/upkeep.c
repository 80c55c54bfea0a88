/*
 * rollup/upkeep.c: what the worker keeps at its start and every hour.
 *
 * The invoices due made final (common/invoicedb.h, which announces each by
 * webhook; at most 1,000 at a time), day-old usage listings, webhook
 * deliveries done with for 30 days and expired sessions deleted, the
 * monthly partitions of samples made three months ahead, and the raw
 * partitions past the retention dropped once rolled up and invoiced as
 * final (migrations/functions/meter_drop_sample_partitions.sql), with a warning for parked marks
 * that keep raw samples past it. Each step that takes locks is a transaction of its own that waits
 * at most 2 s for them; a failure is tried again in a minute (worker.c).
 */
#include <stdio.h>
#include <string.h>

#include "common/db.h"
#include "common/invoicedb.h"
#include "common/log.h"
#include "rollup/internal.h"
#include "rollup/rollup.h"

/* One statement in a transaction of its own that waits at most 2 s for locks. */
static PGresult *upkeep_step(PGconn *c, const char *sql, int n, const char *const *p, char *err,
                             size_t errlen)
{
	PGresult *r =
	        db_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
	if (r == NULL)
		return NULL;
	PQclear(r);
	r = db_query(c, "SET LOCAL lock_timeout = '2s'", 0, NULL, PGRES_COMMAND_OK,
	             "could not set a lock timeout", err, errlen);
	if (r)
		PQclear(r);
	r = r ? db_query(c, sql, n, p, PGRES_TUPLES_OK, "partition upkeep failed", err, errlen)
	      : NULL;
	PGresult *done = r ? db_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit",
	                              err, errlen)
	                   : NULL;
	if (done == NULL) {
		PQclear(r);
		PQclear(PQexec(c, "ROLLBACK"));
		return NULL;
	}
	PQclear(done);
	return r;
}

bool rollup_upkeep(PGconn *c, int64_t retention_us, int64_t grace_us, char *err, size_t errlen)
{
	/* Invoices due are made final even when nobody asks for them: invoice.finalized is
	 * announced, and the raw partitions of their month may go. At most 1,000 at a time:
	 * the rest wait for the next hour, so a backlog never holds the queue up for long. */
	int made = 0;
	if (grace_us >= 0 &&
	    !invoices_finalize_due(c, clock_now_us(), grace_us, 1000, &made, err, errlen))
		return false;
	if (made > 0)
		log_info("invoices: made %d invoice(s) final", made);
	PGresult *r = upkeep_step(
	        c, "SELECT meter_ensure_sample_partitions(now(), now() + interval '3 months')", 0,
	        NULL, err, errlen);
	if (r == NULL)
		return false;
	if (strcmp(PQgetvalue(r, 0, 0), "0") != 0)
		log_info("partitions: made %s monthly partition(s) of samples ahead",
		         PQgetvalue(r, 0, 0));
	PQclear(r);
	/* Rows kept for a time, then deleted: usage listings (GET /v1/accounts/{id}/usage
	 * pages) a day; webhook deliveries done with 30 days, for GET .../deliveries;
	 * sessions and login links past their time, and links used. */
	static const char listings[] = "WITH gone AS (DELETE FROM usage_listings "
	                               "WHERE created_at < now() - interval '1 day' RETURNING 1) "
	                               "SELECT count(*) FROM gone";
	static const char deliveries[] =
	        "WITH gone AS (DELETE FROM webhook_deliveries WHERE state <> 'pending' "
	        "AND created_at < now() - interval '30 days' RETURNING 1) "
	        "SELECT count(*) FROM gone";
	static const char sessions[] =
	        "WITH gone AS (DELETE FROM sessions WHERE expires_at < now() "
	        "OR used_at IS NOT NULL RETURNING 1) SELECT count(*) FROM gone";
	const char *const expired[] = {listings, deliveries, sessions};
	for (size_t i = 0; i < sizeof expired / sizeof expired[0]; i++) {
		r = upkeep_step(c, expired[i], 0, NULL, err, errlen);
		if (r == NULL)
			return false;
		PQclear(r);
	}
	if (retention_us <= 0)
		return true;
	char keep[48];
	snprintf(keep, sizeof keep, "%lld microseconds", (long long)retention_us);
	const char *p[] = {keep};
	r = upkeep_step(c,
	                "SELECT array_to_string(meter_drop_sample_partitions($1::interval), ', ')",
	                1, p, err, errlen);
	if (r == NULL)
		return false;
	if (PQgetvalue(r, 0, 0)[0])
		log_info(
		        "partitions: dropped %s (rolled up, invoiced as final, past the retention)",
		        PQgetvalue(r, 0, 0));
	PQclear(r);
	/* Parked marks keep their samples: say so, or the disk fills without a word. */
	r = db_query(c,
	             "SELECT count(*), min(sandbox_id), min(waiting) FROM rollup_queue "
	             "WHERE waiting IS NOT NULL AND from_ts < now() - $1::interval",
	             1, p, PGRES_TUPLES_OK, "could not read the parked marks", err, errlen);
	if (r == NULL)
		return false;
	if (strcmp(PQgetvalue(r, 0, 0), "0") != 0)
		log_warn("partitions: %s parked sandbox(es) keep raw samples past the retention "
		         "(sandbox %s: %s); register the sandbox, or fix what keeps it from "
		         "being rated, and its next sample rates it",
		         PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2));
	PQclear(r);
	return true;
}
