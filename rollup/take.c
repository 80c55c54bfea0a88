/*
 * rollup/take.c: one batch of marks, in one transaction.
 *
 * Up to max marked sandboxes are taken from rollup_queue (FOR UPDATE SKIP
 * LOCKED, so several meter-api processes share the work without overlap)
 * under the horizon's lock, read (read.c), rated (rate.c) and stored
 * (store.c), and the accounts whose trial crossing may have moved are queued
 * (crossing.c), and the accounts' limits checked and their month to date kept
 * (common/limits.h). A batch whose statement fails is rolled back, and the
 * pass takes its marks again one per transaction, where what fails a lone
 * sandbox parks it, or, for a passing failure, lets it wait 2 s (rule 10).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/limits.h"
#include "common/log.h"
#include "rollup/internal.h"

/* clang-format off */

/* The marks, oldest first; taken ones are skipped (another worker has them). Two steps,
 * a read then a lock by key, in migrations/functions/meter_rollup_take.sql, as Citus needs. */
static const char take_sql[] =
	"SELECT sandbox_id, CASE WHEN from_ts = '-infinity' THEN NULL ELSE " US("from_ts") " END "
	"FROM meter_rollup_take($1)";

/* clang-format on */

/* Checks the limits of the accounts of the rated sandboxes (common/limits.h), each
 * once, in the batch's transaction: their month to date is kept with the usage that
 * changed it. False with err when one cannot be (the batch then fails, rule 10). */
static bool check_limits(PGconn *c, const struct job *jobs, size_t n,
                         const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	struct arr accounts = {0};
	for (size_t i = 0; i < n; i++) {
		bool seen = !jobs[i].found;
		for (size_t k = 0; k < i && !seen; k++)
			seen = jobs[k].found && strcmp(jobs[k].account, jobs[i].account) == 0;
		if (!seen)
			ru_arr_str(&accounts, jobs[i].account);
	}
	const char *lit = ru_arr_end(&accounts);
	bool ok = accounts.n == 0;
	if (ok)
		goto out;
	if (lit == NULL)
		snprintf(err, errlen, "could not check the accounts' limits: out of memory");
	else
		ok = limits_check(c, lit, clock_now_us(), plans, nplans, err, errlen);
out:
	ru_arr_free(&accounts);
	return ok;
}

/*
 * Takes up to max marked sandboxes and rates them in one transaction.
 * Returns how many marks it took (rated or parked), 0 when there was none,
 * -1 with err when the database failed, -2 when a batch of more than one
 * failed on a statement (rolled back: take them one at a time).
 */
int ru_take(PGconn *c, bool sharded, int max, char *err, size_t errlen)
{
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	struct job *jobs = NULL;
	size_t n = 0;
	int result = -1;
	bool may_park = false; /* a failure from here on parks a lone sandbox */
	PGresult *r =
	        db_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
	if (r == NULL)
		return -1;
	PQclear(r);
	/* after BEGIN: the plans known to this transaction's start (ru_plans) */
	if (!ru_plans(c, &plans, &nplans, err, errlen))
		goto out;
	char lim[16];
	snprintf(lim, sizeof lim, "%d", max);
	const char *lp[] = {lim};
	r = ru_query(c, take_sql, 1, lp, PGRES_TUPLES_OK, "could not read the queue", err, errlen);
	if (r == NULL)
		goto out;
	n = (size_t)PQntuples(r);
	if (n == 0) {
		result = 0;
		goto out;
	}
	jobs = calloc(n, sizeof *jobs);
	if (jobs == NULL) {
		snprintf(err, errlen, "could not take marks: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		*j = (struct job){.plans = plans,
		                  .nplans = nplans,
		                  .sharded = sharded,
		                  .upto = METER_TIME_NONE};
		snprintf(j->sandbox, sizeof j->sandbox, "%s", PQgetvalue(r, (int)i, 0));
		if (!ru_get_int(r, (int)i, 1, &j->mark)) {
			snprintf(err, errlen, "malformed queue row");
			goto out;
		}
	}
	PQclear(r);
	r = ru_query(c, HORIZON_LOCK_SQL, 0, NULL, PGRES_TUPLES_OK, "could not lock the horizon",
	             err, errlen);
	if (r == NULL)
		goto failed;
	may_park = true; /* from here, what fails a lone sandbox is its own */
	PQclear(r);
	r = NULL;
	int64_t horizon;
	if (!ru_load(c, jobs, n, &horizon, err, errlen))
		goto failed;
	ru_windows(jobs, n, horizon);
	if (!ru_read_samples(c, jobs, n, err, errlen))
		goto failed;
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE)
			ru_rate(&jobs[i]);
	if (!ru_store(c, jobs, n, err, errlen) || !ru_trial_enqueue(c, jobs, n, err, errlen) ||
	    !check_limits(c, jobs, n, plans, nplans, err, errlen))
		goto failed;
	r = db_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit", err, errlen);
	if (r == NULL)
		goto out;
	result = (int)n;
	goto out;
failed:
	if (PQstatus(c) != CONNECTION_OK)
		goto out;
	PQclear(PQexec(c, "ROLLBACK"));
	if (n > 1) {
		log_warn("rollup: a batch of %zu sandboxes failed (%s); taking them one at a time",
		         n, err);
		result = -2;
	} else if (may_park && ru_passing_failure(err)) {
		/* Nothing wrong with this sandbox: its mark waits a moment, never parked (a
		 * stopped sandbox sends no sample to wake it), and the queue goes on. */
		log_warn("rollup: sandbox %s: %s; tried again in 2 s, not parked", jobs[0].sandbox,
		         err);
		const char *q[] = {jobs[0].sandbox};
		r = db_query(c,
		             "UPDATE rollup_queue SET retry_after = clock_timestamp() + "
		             "interval '2 seconds' WHERE sandbox_id = $1",
		             1, q, PGRES_COMMAND_OK, "could not defer a mark", err, errlen);
		if (r)
			result = 1;
	} else if (may_park) {
		/* This sandbox cannot be rated or stored: park its mark with the reason, so the
		 * others go on; new samples, its registration or "meter parked retry" wake it. */
		char why[600];
		snprintf(why, sizeof why, "cannot rate: %s", err);
		log_warn("rollup: sandbox %s %s", jobs[0].sandbox, err);
		const char *q[] = {jobs[0].sandbox, why};
		r = db_query(
		        c,
		        "WITH first AS (UPDATE rollup_queue SET waiting = $2, "
		        "waiting_kind = 'parked', waiting_since = now(), retry_after = NULL "
		        "WHERE sandbox_id = $1 AND waiting_since IS NULL) "
		        "UPDATE rollup_queue SET waiting = $2, waiting_kind = 'parked', "
		        "retry_after = NULL WHERE sandbox_id = $1 AND waiting_since IS NOT NULL",
		        2, q, PGRES_COMMAND_OK, "could not park a mark", err, errlen);
		if (r)
			result = 1;
	}
out:
	PQclear(r);
	for (size_t i = 0; jobs && i < n; i++)
		ru_job_free(&jobs[i]);
	free(jobs);
	free(plans);
	if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return result;
}
