/*
 * rollup/crossing.c: the trial's crossing hour (rule 8).
 *
 * A batch that changes an account's usage at or before the hour its grant
 * ran out in (or that may have used the grant up) queues the account in
 * trial_queue; the start and end of each pass find that hour again, once
 * per account, and rate it from its samples, interval by interval across
 * the account's sandboxes, into trial_crossing and trial_cover
 * (migrations/0016). An hour whose raw samples were dropped is shared out
 * from its sums instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/limits.h"
#include "common/log.h"
#include "meter/ledger.h"
#include "meter/timefmt.h"
#include "meter/trial.h"
#include "rollup/internal.h"

/* Sandboxes of the crossing hour read in one statement. */
#define HOUR_CHUNK 256

/*
 * Rates the crossing hour (hour, hour + 1 h] of every sandbox of account with
 * usage in it, from its samples, and covers the hour's intervals in rule 8's
 * order from left_us of the grant, the crossing one in proportion. covered:
 * per plan. A sandbox whose rating a rule refuses (it is parked) adds
 * nothing. False with err when the database failed.
 */
static bool trial_hour_rate(PGconn *c, const char *account, int64_t hour, int64_t horizon,
                            int64_t left_us, const struct meter_plan *plans, size_t nplans,
                            struct meter_plan_sum *cov, size_t *ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h};
	struct job *jobs = NULL;
	struct meter_trial_interval *all = NULL;
	size_t n = 0, total = 0;
	bool ok = false;
	PGresult *r = ru_query(c,
	                       "SELECT DISTINCT sandbox_id COLLATE \"C\" FROM usage_hourly "
	                       "WHERE account_id = $1 AND hour = " TS("$2") " ORDER BY 1",
	                       2, p, PGRES_TUPLES_OK,
	                       "could not read the crossing hour's sandboxes", err, errlen);
	if (r == NULL)
		return false;
	n = (size_t)PQntuples(r);
	jobs = calloc(n + 1, sizeof *jobs);
	if (jobs == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		*j = (struct job){.plans = plans,
		                  .nplans = nplans,
		                  .mark = METER_TIME_NONE,
		                  .upto = hour + METER_US_PER_HOUR};
		snprintf(j->sandbox, sizeof j->sandbox, "%s", PQgetvalue(r, (int)i, 0));
	}
	PQclear(r);
	r = NULL;
	for (size_t at = 0; at < n; at += HOUR_CHUNK) {
		size_t m = n - at < HOUR_CHUNK ? n - at : HOUR_CHUNK;
		struct job *chunk = jobs + at;
		int64_t unused;
		if (!ru_load_rows(c, chunk, m, false, &unused, err, errlen))
			goto out;
		for (size_t i = 0; i < m; i++) {
			struct job *j = &chunk[i];
			j->horizon = horizon;
			j->window = j->from = hour;
			if (j->started != METER_TIME_NONE && j->started > j->from)
				j->from = horizon != METER_TIME_NONE ? horizon
				                                     : 0; /* as ru_windows() */
		}
		if (!ru_read_samples(c, chunk, m, err, errlen) ||
		    !ru_read_after(c, chunk, m, err, errlen))
			goto out;
		for (size_t i = 0; i < m; i++) {
			struct job *j = &chunk[i];
			if (j->fate == RATE && !ru_rate(j))
				j->niv = 0; /* refused: parked on its own rating too */
			if (j->fate == RATE)
				total += j->niv;
		}
	}
	all = calloc(total + 1, sizeof *all);
	if (all == NULL)
		goto oom;
	total = 0;
	for (size_t i = 0; i < n; i++) /* jobs are in the order of their ids */
		for (size_t k = 0; jobs[i].fate == RATE && k < jobs[i].niv; k++)
			all[total++] =
			        (struct meter_trial_interval){.rank = i,
			                                      .seq = jobs[i].iv[k].seq,
			                                      .plan_id = jobs[i].iv[k].plan->id,
			                                      .size = jobs[i].size,
			                                      .iv = jobs[i].iv[k].iv};
	if (meter_trial_cover_hour(left_us, all, total, cov, ncov, METER_LEDGER_PLANS) !=
	    METER_OK) {
		snprintf(err, errlen, "the trial's share of hour %s cannot be summed", h);
		goto out;
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not rate the crossing hour: out of memory");
out:
	PQclear(r);
	for (size_t i = 0; jobs && i < n; i++)
		ru_job_free(&jobs[i]);
	free(jobs);
	free(all);
	return ok;
}

/*
 * The hour in which account's grant runs out: the first hour by whose end
 * its sandbox time reaches grant_us (months summed from account_month, then
 * the hours of that month), and *before_us the time before that hour.
 * *hour is METER_TIME_NONE when the grant is not used up.
 */
static bool trial_find_hour(PGconn *c, const char *account, int64_t grant_us, int64_t *hour,
                            int64_t *before_us, char *err, size_t errlen)
{
	const char *p[] = {account, NULL, NULL};
	meter_i128 *walls = NULL;
	int64_t before = 0;
	long at = -1;
	bool ok = false;
	*hour = METER_TIME_NONE;
	/* the month it runs out in, then the hour of that month (meter_trial_crossing) */
	PGresult *r = ru_query(c,
	                       "SELECT (extract(epoch FROM month::timestamp) * 1000000)::bigint, "
	                       "sum(wall_us) FROM account_month WHERE account_id = $1 "
	                       "GROUP BY month ORDER BY month",
	                       1, p, PGRES_TUPLES_OK, "could not find where the trial runs out",
	                       err, errlen);
	for (int level = 0; level < 2 && r != NULL; level++) {
		size_t n = (size_t)PQntuples(r);
		walls = calloc(n + 1, sizeof *walls);
		if (walls == NULL) {
			snprintf(err, errlen,
			         "could not find where the trial runs out: out of memory");
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			if (!db_col_q(r, (int)i, 1, &walls[i]) || walls[i] < 0) {
				snprintf(
				        err, errlen,
				        "could not find where the trial runs out: a malformed sum");
				goto out;
			}
		at = meter_trial_crossing(grant_us, before, walls, n, &before);
		free(walls);
		walls = NULL;
		int64_t start;
		if (at < 0 || !ru_get_int(r, (int)at, 0, &start)) {
			ok = at < 0; /* not used up */
			goto out;
		}
		if (level == 1) {
			*hour = start;
			*before_us = before;
			ok = true;
			goto out;
		}
		PQclear(r);
		char m[24], e[24];
		snprintf(m, sizeof m, "%lld", (long long)start);
		snprintf(e, sizeof e, "%lld", (long long)meter_month_next(start));
		p[1] = m;
		p[2] = e;
		r = ru_query(
		        c,
		        "SELECT " US("hour") ", sum(wall_us) FROM usage_hourly "
		                             "WHERE account_id = $1 AND hour >= " TS(
		                                     "$2") " AND hour < " TS("$3") " "
		                                                                   "GROUP BY hour "
		                                                                   "ORDER BY hour",
		        3, p, PGRES_TUPLES_OK, "could not find where the trial runs out", err,
		        errlen);
	}
out:
	free(walls);
	PQclear(r);
	return ok;
}

/*
 * What the grant covers of an hour whose raw samples were dropped: its sums
 * per plan, in the order of the plans, the crossing one in proportion (the
 * nearest to rule 8 the sums allow).
 */
static bool trial_hour_shared(PGconn *c, const char *account, int64_t hour, int64_t left_us,
                              struct meter_plan_sum *cov, size_t *ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h};
	PGresult *r =
	        ru_query(c,
	                 "SELECT price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), "
	                 "sum(busy_us), sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	                 "FROM usage_hourly WHERE account_id = $1 AND hour = " TS(
	                         "$2") " "
	                               "GROUP BY price_plan_id ORDER BY price_plan_id",
	                 2, p, PGRES_TUPLES_OK, "could not read the crossing hour", err, errlen);
	if (r == NULL)
		return false;
	bool ok = true;
	*ncov = 0;
	for (int i = 0; ok && i < PQntuples(r); i++) {
		struct meter_usage u, part;
		int64_t plan;
		ok = ru_get_int(r, i, 0, &plan) && db_col_usage(r, i, 1, &u) &&
		     meter_trial_cover_usage(&left_us, &u, &part) == METER_OK &&
		     meter_plan_sum_add(cov, ncov, METER_LEDGER_PLANS, plan, &part) == METER_OK;
	}
	PQclear(r);
	if (!ok)
		snprintf(err, errlen, "the trial's share of hour %s cannot be summed", h);
	return ok;
}

/* Replaces account's crossing: none (hour METER_TIME_NONE), or the hour and its cover. */
static bool trial_store(PGconn *c, const char *account, int64_t hour, bool exact,
                        const struct meter_plan_sum *cov, size_t ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h, exact ? "t" : "f"};
	PGresult *r =
	        ru_query(c, "DELETE FROM trial_crossing WHERE account_id = $1", 1, p,
	                 PGRES_COMMAND_OK, "could not replace the trial's crossing", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	if (hour == METER_TIME_NONE)
		return true;
	r = ru_query(c,
	             "INSERT INTO trial_crossing (account_id, hour, exact) VALUES ($1, " TS(
	                     "$2") ", $3)",
	             3, p, PGRES_COMMAND_OK, "could not store the trial's crossing", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	for (size_t i = 0; i < ncov; i++) {
		char v[7][METER_QTY_BUF];
		const struct meter_usage *u = &cov[i].u;
		snprintf(v[0], sizeof v[0], "%lld", (long long)cov[i].plan_id);
		db_q_text(u->cpu_measured_us, v[1], sizeof v[1]);
		db_q_text(u->cpu_billed_us, v[2], sizeof v[2]);
		db_q_text(u->busy_us, v[3], sizeof v[3]);
		db_q_text(u->idle_us, v[4], sizeof v[4]);
		db_q_text(u->wall_us, v[5], sizeof v[5]);
		db_q_text(u->mem_mgib_us, v[6], sizeof v[6]);
		const char *q[] = {account, v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
		r = ru_query(c,
		             "INSERT INTO trial_cover VALUES ($1, $2, $3::numeric, $4::numeric, "
		             "$5::numeric, "
		             "$6::numeric, $7::numeric, $8::numeric)",
		             8, q, PGRES_COMMAND_OK, "could not store the trial's cover", err,
		             errlen);
		if (r == NULL)
			return false;
		PQclear(r);
	}
	return true;
}

/*
 * Finds account's crossing again and stores it: none when its grant is not
 * used up (or it has none), else the hour it runs out in and what the grant
 * covers of it, rated from the hour's samples (or shared out from its sums
 * when they were dropped). Inside the caller's transaction, which holds the
 * account's row of trial_queue and the horizon's lock.
 */
static bool trial_update(PGconn *c, const char *account, int64_t horizon,
                         const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	const char *p[] = {account};
	PGresult *r = ru_query(c,
	                       "SELECT a.trial_grant_seconds * 1000000, "
	                       "  (SELECT coalesce(sum(wall_us), 0) FROM account_month m "
	                       "   WHERE m.account_id = $1) >= a.trial_grant_seconds * 1000000 "
	                       "FROM accounts a WHERE a.id = $1",
	                       1, p, PGRES_TUPLES_OK, "could not read the trial", err, errlen);
	if (r == NULL)
		return false;
	int64_t grant = 0, hour = METER_TIME_NONE, before = 0;
	bool spent = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 1), "t") == 0;
	bool ok = PQntuples(r) == 0 || ru_get_int(r, 0, 0, &grant);
	PQclear(r);
	if (!ok) {
		snprintf(err, errlen, "account %s has a malformed trial grant", account);
		return false;
	}
	struct meter_plan_sum cov[METER_LEDGER_PLANS];
	size_t ncov = 0;
	if (grant > 0 && spent && !trial_find_hour(c, account, grant, &hour, &before, err, errlen))
		return false;
	bool exact = horizon == METER_TIME_NONE || hour >= horizon;
	if (hour != METER_TIME_NONE &&
	    !(exact ? trial_hour_rate(c, account, hour, horizon, grant - before, plans, nplans, cov,
	                              &ncov, err, errlen)
	            : trial_hour_shared(c, account, hour, grant - before, cov, &ncov, err, errlen)))
		return false;
	if (hour != METER_TIME_NONE && !exact)
		log_warn(
		        "trial: account %s runs out of its grant in an hour whose raw samples were "
		        "dropped: its cover is shared out from the hour's sums",
		        account);
	return trial_store(c, account, hour, exact, cov, ncov, err, errlen);
}

/*
 * In a batch's transaction: queues the accounts whose crossing may have moved,
 * those with a grant whose usage changed at or before the hour it ran out in,
 * or that had not run out and now may have. The next ru_trial_queue_pass finds
 * them again, once per account however many batches changed it. An account
 * already queued and being found right now keeps the batch waiting until it
 * is done, then is queued again (ON CONFLICT DO UPDATE waits for the row).
 */
bool ru_trial_enqueue(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr ids = {0}, win = {0};
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE) {
			ru_arr_str(&ids, jobs[i].account);
			ru_arr_int(&win, jobs[i].window);
			m++;
		}
	const char *p[] = {ru_arr_end(&ids), ru_arr_end(&win)};
	PGresult *r = NULL;
	bool ok = m == 0;
	if (m > 0 && (p[0] == NULL || p[1] == NULL))
		snprintf(err, errlen, "could not queue the trials: out of memory");
	else if (m > 0)
		r = ru_query(
		        c,
		        "INSERT INTO trial_queue AS q (account_id) "
		        "SELECT a.id FROM (SELECT id, min(w) w FROM unnest($1::text[], "
		        "$2::bigint[]) "
		        "  x(id, w) GROUP BY id) x JOIN accounts a ON a.id = x.id "
		        "LEFT JOIN trial_crossing t ON t.account_id = a.id "
		        "WHERE a.id = ANY ($1::text[]) AND a.trial_grant_seconds > 0 AND (t.hour "
		        ">= " TS(
		                "x.w") " "
		                       "  OR (t.hour IS NULL AND (SELECT coalesce(sum(wall_us), 0) "
		                       "FROM account_month m "
		                       "      WHERE m.account_id = a.id) >= a.trial_grant_seconds "
		                       "* "
		                       "1000000)) "
		                       "ORDER BY 1 ON CONFLICT (account_id) DO UPDATE SET "
		                       "queued_at "
		                       "= q.queued_at",
		        2, p, PGRES_COMMAND_OK, "could not queue the trials", err, errlen);
	ok = ok || r != NULL;
	PQclear(r);
	ru_arr_free(&ids);
	ru_arr_free(&win);
	return ok;
}

/*
 * The accounts of trial_queue, one per transaction, oldest first: their
 * crossings found again after batches changed their usage, a grant changed,
 * or usage rated before the crossing was kept, and the account's limits and
 * month to date kept with them (common/limits.h). Returns how many it did, or -1
 * with err when the database failed; one that fails goes to the back of the
 * queue and waits for the next pass.
 */
int ru_trial_queue_pass(PGconn *c, char *err, size_t errlen)
{
	int done = 0;
	for (;;) {
		struct meter_plan *plans = NULL;
		size_t nplans = 0;
		PGresult *r = ru_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin",
		                       err, errlen);
		if (r == NULL)
			return -1;
		PQclear(r);
		/* after BEGIN: the plans known to this transaction's start (ru_plans) */
		if (!ru_plans(c, &plans, &nplans, err, errlen)) {
			PQclear(PQexec(c, "ROLLBACK"));
			return -1;
		}
		r = ru_query(c, "SELECT account_id FROM meter_trial_take()", 0, NULL,
		             PGRES_TUPLES_OK, "could not read the trial queue", err, errlen);
		if (r == NULL || PQntuples(r) == 0) {
			PQclear(r);
			PQclear(PQexec(c, "ROLLBACK"));
			free(plans);
			return r == NULL ? -1 : done;
		}
		char id[160];
		snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
		const char *p[] = {id};
		int64_t horizon = METER_TIME_NONE;
		/* The horizon's lock, then where raw samples begin (as a batch reads them). */
		bool ok = (r = ru_query(c, HORIZON_LOCK_SQL, 0, NULL, PGRES_TUPLES_OK,
		                        "could not lock the horizon", err, errlen)) != NULL;
		PQclear(r);
		r = ok ? ru_query(c,
		                  "SELECT CASE WHEN raw_from = '-infinity' THEN NULL ELSE " US(
		                          "raw_from") " "
		                                      "END FROM sample_horizon",
		                  0, NULL, PGRES_TUPLES_OK, "could not read the horizon", err,
		                  errlen)
		       : NULL;
		ok = r != NULL && (PQntuples(r) == 0 || ru_get_int(r, 0, 0, &horizon));
		PQclear(r);
		ok = ok && trial_update(c, id, horizon, plans, nplans, err, errlen) &&
		     limits_check_usage(c, id, clock_now_us(), plans, nplans, err, errlen);
		r = ok ? ru_query(c, "DELETE FROM trial_queue WHERE account_id = $1", 1, p,
		                  PGRES_COMMAND_OK, "could not take a trial off the queue", err,
		                  errlen)
		       : NULL;
		PQclear(r);
		r = r ? ru_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit", err,
		                 errlen)
		      : NULL;
		PQclear(r);
		free(plans);
		if (r == NULL) {
			if (PQstatus(c) != CONNECTION_OK)
				return -1;
			PQclear(PQexec(c, "ROLLBACK"));
			log_warn("trial: account %s: %s; tried again at the next pass", id, err);
			PQclear(PQexecParams(c,
			                     "UPDATE trial_queue SET queued_at = clock_timestamp() "
			                     "WHERE account_id = $1",
			                     1, NULL, p, NULL, NULL, 0));
			return done;
		}
		done++;
	}
}
