#include "api/rollup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/db.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"

#define US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"
#define TS(n)   "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"

static int64_t now_realtime_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Usage of one hour under one plan. */
struct bucket {
	int64_t hour, plan;
	struct meter_usage u;
};

struct job {
	char sandbox[160], account[160];
	struct meter_size size;
	int64_t started, stopped; /* METER_TIME_NONE when not known */
	int64_t window;           /* re-rate intervals ending after this (an hour start) */
	int64_t horizon;          /* raw samples before it were dropped (METER_TIME_NONE: none) */
	const struct meter_plan *plans;
	size_t nplans;
	struct bucket *b;
	size_t nb, capb;
};

static bool get_int(const PGresult *r, int row, int col, int64_t *out)
{
	if (PQgetisnull(r, row, col)) {
		*out = METER_TIME_NONE;
		return true;
	}
	return meter_decimal_parse(PQgetvalue(r, row, col), 0, true, out) == METER_OK;
}

static enum meter_status emit(void *ctx, const struct meter_interval *iv,
                              const struct meter_plan *plan)
{
	struct job *j = ctx;
	if (iv->end_us <= j->window)
		return METER_OK; /* before the window: its hour is not re-rated */
	int64_t hour = meter_hour_of(iv->end_us);
	size_t i = j->nb;
	while (i > 0 && !(j->b[i - 1].hour == hour && j->b[i - 1].plan == plan->id))
		i--;
	if (i == 0) {
		if (j->nb == j->capb) {
			size_t cap = j->capb ? j->capb * 2 : 16;
			struct bucket *nb = realloc(j->b, cap * sizeof *nb);
			if (nb == NULL)
				return METER_EOVERFLOW;
			j->b = nb;
			j->capb = cap;
		}
		j->b[j->nb] = (struct bucket){.hour = hour, .plan = plan->id};
		i = ++j->nb;
	}
	return meter_usage_add_interval(&j->b[i - 1].u, &j->size, iv);
}

/* Registers a sandbox from its cgroup's limits, when its path named an account. */
static bool auto_register(PGconn *c, const char *sb, bool *done, char *err, size_t errlen)
{
	const char *p[] = {sb};
	PGresult *r = db_query(
	        c,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	        "SELECT s.sandbox_id, s.account_id, round(s.cpu_limit_millicores / 1000.0, 3), "
	        "ceil(s.memory_limit_bytes * 1000.0 / 1073741824) / 1000 "
	        "FROM (SELECT * FROM samples WHERE sandbox_id = $1 "
	        "      AND account_id IS NOT NULL AND cpu_limit_millicores IS NOT NULL "
	        "      AND memory_limit_bytes IS NOT NULL ORDER BY ts DESC LIMIT 1) s "
	        "JOIN accounts a ON a.id = s.account_id "
	        "WHERE s.cpu_limit_millicores <= 256000 "
	        "AND s.memory_limit_bytes <= 1024::bigint * 1073741824 "
	        "ON CONFLICT DO NOTHING",
	        1, p, PGRES_COMMAND_OK, "could not register a sandbox", err, errlen);
	if (r == NULL)
		return false;
	*done = strcmp(PQcmdTuples(r), "1") == 0;
	PQclear(r);
	if (*done)
		log_info("sandbox %s registered from its cgroup's limits", sb);
	return true;
}

/* Loads the sandbox; *found false when it is not registered (and could not be). */
static bool load_sandbox(PGconn *c, struct job *j, bool *found, char *err, size_t errlen)
{
	const char *p[] = {j->sandbox};
	for (int attempt = 0; attempt < 2; attempt++) {
		PGresult *r = db_query(
		        c,
		        "SELECT account_id, vcpus::text, memory_gib::text, " US(
		                "started_at") ", " US("stopped_at") " FROM sandboxes WHERE id = $1",
		        1, p, PGRES_TUPLES_OK, "could not read a sandbox", err, errlen);
		if (r == NULL)
			return false;
		if (PQntuples(r) == 1) {
			snprintf(j->account, sizeof j->account, "%s", PQgetvalue(r, 0, 0));
			bool ok = meter_decimal_parse(PQgetvalue(r, 0, 1), 3, false,
			                              &j->size.vcpu_milli) == METER_OK &&
			          meter_decimal_parse(PQgetvalue(r, 0, 2), 3, false,
			                              &j->size.mem_mgib) == METER_OK &&
			          get_int(r, 0, 3, &j->started) && get_int(r, 0, 4, &j->stopped);
			PQclear(r);
			if (!ok)
				snprintf(err, errlen, "sandbox %s has a malformed row", j->sandbox);
			*found = ok;
			return ok;
		}
		PQclear(r);
		bool done = false;
		if (attempt == 0 && !auto_register(c, j->sandbox, &done, err, errlen))
			return false;
		if (!done)
			break;
	}
	*found = false;
	return true;
}

struct smp {
	int64_t inc, t, cpu;
	size_t order; /* rank of its incarnation's first appearance */
};

static int cmp_smp(const void *a, const void *b)
{
	const struct smp *x = a, *y = b;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

/* Rates one span with the plan in force at its end into j->b. */
static enum meter_status rate_span(struct job *j, const struct meter_span *sp)
{
	const struct meter_plan *plan = meter_plan_at(j->plans, j->nplans, sp->end_us);
	struct meter_interval iv;
	enum meter_status st;
	if (plan == NULL)
		return METER_ENOPLAN;
	if ((st = meter_interval_rate(&j->size, plan->cpu_floor_ppm, sp, &iv)))
		return st;
	return emit(j, &iv, plan);
}

/*
 * Where one incarnation stood at w (NULL: at its end): the time of its last
 * sample and its highest counter (meter_series_resume); *found false when it
 * has no sample there.
 */
static bool last_before(PGconn *c, struct job *j, int64_t inc, const char *w,
                        struct meter_sample *out, bool *found, char *err, size_t errlen)
{
	char incs[24], after[METER_TIME_BUF], upto[METER_TIME_BUF], sql[1024];
	snprintf(incs, sizeof incs, "%lld", (long long)inc);
	/* Raw samples after the horizon (late ones before it are never rated), and
	 * what dropped partitions knew (sample_seeds). Times go as timestamptz
	 * constants, so the planner prunes partitions (a computed time would make it
	 * plan for every partition). */
	const char *p[4] = {j->sandbox, incs};
	int n = 2;
	char cond[128] = "";
	if (j->horizon != METER_TIME_NONE) {
		meter_time_format(j->horizon, after, sizeof after);
		p[n++] = after;
		snprintf(cond, sizeof cond, " AND ts > $%d::timestamptz", n);
	}
	if (w) {
		int64_t wu = strtoll(w, NULL, 10);
		meter_time_format(wu, upto, sizeof upto);
		p[n++] = upto;
		size_t k = strlen(cond);
		snprintf(cond + k, sizeof cond - k, " AND ts <= $%d::timestamptz", n);
	}
	snprintf(sql, sizeof sql,
	         "SELECT " US("max(t)") ", max(cpu) FROM (SELECT max(ts) AS t, max(cpu_usage_us) "
	                                "AS cpu FROM samples WHERE sandbox_id = $1 AND "
	                                "incarnation = $2%s UNION ALL SELECT last_ts, "
	                                "max_cpu_usage_us FROM sample_seeds WHERE sandbox_id = $1 "
	                                "AND incarnation = $2) x",
	         cond);
	PGresult *r =
	        db_query(c, sql, n, p, PGRES_TUPLES_OK, "could not read samples", err, errlen);
	if (r == NULL)
		return false;
	*found = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0);
	bool ok = true;
	if (*found) {
		*out = (struct meter_sample){.incarnation = inc};
		ok = get_int(r, 0, 0, &out->t_us) && get_int(r, 0, 1, &out->cpu_us);
		if (!ok)
			snprintf(err, errlen, "sandbox %s: malformed samples", j->sandbox);
		if (j->started != METER_TIME_NONE && out->t_us < j->started)
			out->t_us = j->started;
	}
	PQclear(r);
	return ok;
}

/*
 * Rates the window of one sandbox into j->b, as meter_rate_sandbox would
 * rate all its samples: incarnations in the order they first appear in the
 * sandbox's whole history, each seeded with its last sample before the
 * window, then the stop after the last sample of the last incarnation.
 */
static bool rate(PGconn *c, struct job *j, char *err, size_t errlen)
{
	/* Samples are read after the window's start and the ones before it seed the
	 * series. But a sample stamped before started_at (a clock behind) counts at
	 * started_at: when the sandbox started inside the window, such a sample may be
	 * stamped before the window yet count in it, so it must be read, not seeded (a
	 * seed would swallow its CPU). Such a sandbox lives wholly after the window's
	 * start: all of its samples are read, from the horizon. */
	int64_t from = j->window;
	if (j->started != METER_TIME_NONE && j->started > from)
		from = j->horizon != METER_TIME_NONE ? j->horizon : 0;
	char w[24], wt[METER_TIME_BUF];
	snprintf(w, sizeof w, "%lld", (long long)from);
	meter_time_format(from, wt, sizeof wt);
	/* the window's start as a timestamptz constant: partitions before it are pruned */
	const char *p[] = {j->sandbox, wt};
	PGresult *order = NULL, *win = NULL;
	struct smp *s = NULL;
	int64_t *incs = NULL;
	enum meter_status st = METER_OK;
	bool ok = false;
	/* Incarnations in the order they first appear, dropped partitions included. */
	order = db_query(c,
	                 "SELECT incarnation FROM (SELECT incarnation, min(ts) AS f FROM samples "
	                 "WHERE sandbox_id = $1 GROUP BY incarnation UNION ALL SELECT "
	                 "incarnation, first_ts FROM sample_seeds WHERE sandbox_id = $1) x "
	                 "GROUP BY incarnation ORDER BY min(f), incarnation",
	                 1, p, PGRES_TUPLES_OK, "could not read samples", err, errlen);
	win = order ? db_query(c,
	                       "SELECT incarnation, " US(
	                               "ts") ", cpu_usage_us FROM samples "
	                                     "WHERE sandbox_id = $1 AND ts > $2::timestamptz "
	                                     "ORDER BY ts, incarnation",
	                       2, p, PGRES_TUPLES_OK, "could not read samples", err, errlen)
	            : NULL;
	if (win == NULL)
		goto out;
	size_t ninc = (size_t)PQntuples(order), n = (size_t)PQntuples(win);
	incs = calloc(ninc + 1, sizeof *incs);
	s = calloc(n + 1, sizeof *s);
	if (incs == NULL || s == NULL)
		goto bad;
	for (size_t k = 0; k < ninc; k++)
		if (!get_int(order, (int)k, 0, &incs[k]))
			goto bad;
	for (size_t i = 0; i < n; i++) {
		if (!get_int(win, (int)i, 0, &s[i].inc) || !get_int(win, (int)i, 1, &s[i].t) ||
		    !get_int(win, (int)i, 2, &s[i].cpu))
			goto bad;
		size_t k = 0;
		while (k < ninc && incs[k] != s[i].inc)
			k++;
		s[i].order = k;
	}
	qsort(s, n, sizeof *s, cmp_smp);

	struct meter_series ser;
	struct meter_span sp;
	meter_series_init(&ser);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || s[i].inc != s[i - 1].inc) {
			struct meter_sample seed;
			bool found;
			if (!last_before(c, j, s[i].inc, w, &seed, &found, err, errlen))
				goto out;
			if (found)
				meter_series_resume(&ser, &seed);
			else if (s[i].order > 0)
				meter_series_after_other(&ser);
			else
				meter_series_init(&ser); /* the sandbox's first incarnation opens */
		}
		struct meter_sample m = {
		        .incarnation = s[i].inc, .t_us = s[i].t, .cpu_us = s[i].cpu};
		st = meter_series_next(&ser, &m, j->started, &sp);
		if (st == METER_SKIP)
			continue;
		if (st != METER_OK || (st = rate_span(j, &sp)) != METER_OK)
			goto rule;
	}
	/* The stop follows the last sample of the last incarnation, wherever that is. */
	if (ninc > 0 && (n == 0 || s[n - 1].inc != incs[ninc - 1])) {
		struct meter_sample last;
		bool found;
		if (!last_before(c, j, incs[ninc - 1], NULL, &last, &found, err, errlen))
			goto out;
		if (found)
			meter_series_resume(&ser, &last);
	}
	st = meter_series_close(&ser, j->started, j->stopped, &sp);
	if (st == METER_OK && (st = rate_span(j, &sp)) != METER_OK)
		goto rule;
	ok = true;
	goto out;
rule:
	snprintf(err, errlen, "%s", meter_strerror(st));
	goto out;
bad:
	snprintf(err, errlen, "malformed samples or out of memory");
out:
	free(s);
	free(incs);
	PQclear(order);
	PQclear(win);
	return ok;
}

/* Replaces the sandbox's hours from the window on, keeping account_month in step. */
static bool store(PGconn *c, struct job *j, char *err, size_t errlen)
{
	char w[24];
	snprintf(w, sizeof w, "%lld", (long long)j->window);
	const char *p[] = {j->account, j->sandbox, w};
	PGresult *r = db_query(
	        c,
	        "WITH old AS (DELETE FROM usage_hourly WHERE account_id = $1 AND sandbox_id = $2 "
	        "  AND hour > " TS(
	                "$3") " - interval '1 hour' RETURNING *), "
	                      "agg AS (SELECT account_id, (date_trunc('month', hour AT TIME ZONE "
	                      "'UTC'))::date m, "
	                      "  price_plan_id, sum(cpu_measured_us) a, sum(cpu_billed_us) b, "
	                      "sum(busy_us) c, "
	                      "  sum(idle_us) d, sum(wall_us) e, sum(memory_mgib_us) f FROM old "
	                      "GROUP BY 1, 2, 3) "
	                      "UPDATE account_month t SET cpu_measured_us = t.cpu_measured_us - "
	                      "agg.a, "
	                      "  cpu_billed_us = t.cpu_billed_us - agg.b, busy_us = t.busy_us - "
	                      "agg.c, "
	                      "  idle_us = t.idle_us - agg.d, wall_us = t.wall_us - agg.e, "
	                      "  memory_mgib_us = t.memory_mgib_us - agg.f "
	                      "FROM agg WHERE t.account_id = agg.account_id AND t.month = agg.m "
	                      "  AND t.price_plan_id = agg.price_plan_id",
	        3, p, PGRES_COMMAND_OK, "could not replace hourly usage", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	for (size_t i = 0; i < j->nb; i++) {
		const struct bucket *b = &j->b[i];
		char v[8][24];
		snprintf(v[0], 24, "%lld", (long long)b->hour);
		snprintf(v[1], 24, "%lld", (long long)b->plan);
		snprintf(v[2], 24, "%lld", (long long)b->u.cpu_measured_us);
		snprintf(v[3], 24, "%lld", (long long)b->u.cpu_billed_us);
		snprintf(v[4], 24, "%lld", (long long)b->u.busy_us);
		snprintf(v[5], 24, "%lld", (long long)b->u.idle_us);
		snprintf(v[6], 24, "%lld", (long long)b->u.wall_us);
		snprintf(v[7], 24, "%lld", (long long)b->u.mem_mgib_us);
		const char *q[] = {j->account, j->sandbox, v[0], v[1], v[2],
		                   v[3],       v[4],       v[5], v[6], v[7]};
		r = db_query(
		        c,
		        "WITH ins AS (INSERT INTO usage_hourly (account_id, sandbox_id, hour, "
		        "  price_plan_id, cpu_measured_us, cpu_billed_us, busy_us, idle_us, "
		        "wall_us, "
		        "  memory_mgib_us, updated_at) VALUES ($1, $2, " TS(
		                "$3") ", $4, $5, $6, $7, "
		                      "  $8, $9, $10, now()) RETURNING *) "
		                      "INSERT INTO account_month AS t (account_id, month, "
		                      "price_plan_id, "
		                      "  cpu_measured_us, cpu_billed_us, busy_us, idle_us, "
		                      "wall_us, memory_mgib_us) "
		                      "SELECT account_id, (date_trunc('month', hour AT TIME ZONE "
		                      "'UTC'))::date, "
		                      "  price_plan_id, cpu_measured_us, cpu_billed_us, busy_us, "
		                      "idle_us, wall_us, "
		                      "  memory_mgib_us FROM ins "
		                      "ON CONFLICT (account_id, month, price_plan_id) DO UPDATE "
		                      "SET "
		                      "  cpu_measured_us = t.cpu_measured_us + "
		                      "EXCLUDED.cpu_measured_us, "
		                      "  cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
		                      "  busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = "
		                      "t.idle_us + EXCLUDED.idle_us, "
		                      "  wall_us = t.wall_us + EXCLUDED.wall_us, "
		                      "  memory_mgib_us = t.memory_mgib_us + "
		                      "EXCLUDED.memory_mgib_us",
		        10, q, PGRES_COMMAND_OK, "could not store hourly usage", err, errlen);
		if (r == NULL)
			return false;
		PQclear(r);
	}
	return true;
}

/* Takes one marked sandbox and rates it; 1 done, 0 nothing to take, -1 failed. */
/* Where raw samples begin (meter_drop_sample_partitions moves it). */
static bool read_horizon(PGconn *c, struct job *j, char *err, size_t errlen)
{
	/* Shared with other rollups, exclusive to meter_drop_sample_partitions
	 * (migrations/0010): the horizon cannot move until this job commits. Its own
	 * statement, so the read below has a snapshot taken after the lock. */
	PGresult *r =
	        db_query(c, "SELECT pg_advisory_xact_lock_shared(hashtext('meter_sample_horizon'))",
	                 0, NULL, PGRES_TUPLES_OK, "could not lock the horizon", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	r = db_query(c,
	             "SELECT CASE WHEN raw_from = '-infinity' THEN NULL ELSE " US(
	                     "raw_from") " END FROM sample_horizon",
	             0, NULL, PGRES_TUPLES_OK, "could not read the horizon", err, errlen);
	if (r == NULL)
		return false;
	j->horizon = METER_TIME_NONE;
	bool ok = true;
	if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		ok = get_int(r, 0, 0, &j->horizon);
	PQclear(r);
	if (!ok)
		snprintf(err, errlen, "malformed horizon");
	return ok;
}

static int one(PGconn *c, const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	struct job j = {.plans = plans, .nplans = nplans};
	int result = -1;
	PGresult *r =
	        db_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
	if (r == NULL)
		return -1;
	PQclear(r);
	r = db_query(
	        c,
	        "SELECT sandbox_id, CASE WHEN from_ts = '-infinity' THEN NULL ELSE " US(
	                "from_ts") " END "
	                           "FROM rollup_queue WHERE waiting IS NULL ORDER BY queued_at "
	                           "LIMIT 1 FOR UPDATE SKIP LOCKED",
	        0, NULL, PGRES_TUPLES_OK, "could not read the queue", err, errlen);
	if (r == NULL)
		goto out;
	if (PQntuples(r) == 0) {
		result = 0;
		goto out;
	}
	snprintf(j.sandbox, sizeof j.sandbox, "%s", PQgetvalue(r, 0, 0));
	int64_t from;
	if (!get_int(r, 0, 1, &from)) {
		snprintf(err, errlen, "malformed queue row");
		goto out;
	}
	PQclear(r);
	r = NULL;
	/* Intervals ending after the start of the hour that holds from_ts. */
	/* Everything (a new registration): from the epoch, before any sample can be. */
	j.window = from == METER_TIME_NONE || from <= 0 ? 0 : meter_hour_of(from);
	if (!read_horizon(c, &j, err, errlen))
		goto out;
	bool found = false;
	if (!load_sandbox(c, &j, &found, err, errlen))
		goto out;
	/* The stop interval ends at stopped_at: its hour is re-rated too (its start moves
	 * when samples come after it was rated). */
	if (found && j.stopped != METER_TIME_NONE && meter_hour_of(j.stopped) < j.window)
		j.window = meter_hour_of(j.stopped) > 0 ? meter_hour_of(j.stopped) : 0;
	/* Hours before the horizon lost their raw samples: they are final as they are. */
	if (j.horizon != METER_TIME_NONE && j.window < j.horizon) {
		char h[METER_TIME_BUF];
		meter_time_format(j.horizon, h, sizeof h);
		if (from != METER_TIME_NONE && from > 0 && from < j.horizon)
			log_warn(
			        "rollup: sandbox %s has samples from before %s, whose raw data was "
			        "dropped: they are not rated on their own (a later sample carries "
			        "their CPU)",
			        j.sandbox, h);
		j.window = j.horizon;
	}
	const char *p[] = {j.sandbox};
	if (!found) {
		r = db_query(
		        c,
		        "UPDATE rollup_queue SET waiting = 'not registered' WHERE sandbox_id = $1",
		        1, p, PGRES_COMMAND_OK, "could not park a mark", err, errlen);
	} else if (rate(c, &j, err, errlen) && store(c, &j, err, errlen)) {
		r = db_query(c, "DELETE FROM rollup_queue WHERE sandbox_id = $1", 1, p,
		             PGRES_COMMAND_OK, "could not clear a mark", err, errlen);
	} else if (PQstatus(c) == CONNECTION_OK) {
		/* This sandbox cannot be rated (samples before any price plan, say): park its
		 * mark with the reason, so the others go on; new samples wake it again. */
		char why[600];
		snprintf(why, sizeof why, "cannot rate: %s", err);
		log_warn("rollup: sandbox %s %s", j.sandbox, err);
		PQclear(PQexec(c, "ROLLBACK"));
		const char *q[] = {j.sandbox, why};
		r = db_query(c, "UPDATE rollup_queue SET waiting = $2 WHERE sandbox_id = $1", 2, q,
		             PGRES_COMMAND_OK, "could not park a mark", err, errlen);
	}
	if (r == NULL)
		goto out;
	PQclear(r);
	r = db_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit", err, errlen);
	if (r)
		result = 1;
	/* Limits after the commit, on their own: a failure here is logged and never holds
	 * the rating back (the next rating of the account checks again). */
	if (r && found) {
		char lerr[512];
		if (!limits_check_usage(c, j.account, now_realtime_us(), plans, nplans, lerr,
		                        sizeof lerr))
			log_warn("rollup: could not check the limits of account %s: %s", j.account,
			         lerr);
		if (PQtransactionStatus(c) != PQTRANS_IDLE)
			PQclear(PQexec(c, "ROLLBACK"));
	}
out:
	PQclear(r);
	free(j.b);
	if (result != 1 && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return result;
}

int rollup_pass(PGconn *c, char *err, size_t errlen)
{
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	int done = 0, rc;
	/* Plans are read again for every sandbox: a pass may be long, and a plan added
	 * meanwhile must be known before usage under it is priced. */
	do {
		free(plans);
		plans = NULL;
		if (!plans_load(c, &plans, &nplans, err, errlen))
			return -1;
		rc = one(c, plans, nplans, err, errlen);
		done += rc == 1;
	} while (rc == 1);
	free(plans);
	return rc < 0 ? -1 : done;
}

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

bool rollup_upkeep(PGconn *c, int64_t retention_us, char *err, size_t errlen)
{
	PGresult *r = upkeep_step(
	        c, "SELECT meter_ensure_sample_partitions(now(), now() + interval '3 months')", 0,
	        NULL, err, errlen);
	if (r == NULL)
		return false;
	if (strcmp(PQgetvalue(r, 0, 0), "0") != 0)
		log_info("partitions: made %s monthly partition(s) of samples ahead",
		         PQgetvalue(r, 0, 0));
	PQclear(r);
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
	return true;
}

struct rollup {
	pthread_t thread;
	atomic_bool stop;
	char *url;
	int idle_ms;
	int64_t retention_us;
};

static int64_t mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void *worker(void *arg)
{
	struct rollup *w = arg;
	PGconn *c = NULL;
	char err[512];
	bool warned = false;
	int64_t next_upkeep = 0; /* at the start, then every hour */
	while (!atomic_load(&w->stop)) {
		if (c == NULL || PQstatus(c) != CONNECTION_OK) {
			if (c)
				PQfinish(c);
			c = db_connect(w->url, err, sizeof err);
			if (c == NULL && !warned)
				log_warn("rollup: %s; retrying", err);
			warned = c == NULL;
		}
		if (c && mono_s() >= next_upkeep) {
			next_upkeep = mono_s() + 3600;
			if (!rollup_upkeep(c, w->retention_us, err, sizeof err)) {
				log_warn("%s; tried again in a minute", err);
				next_upkeep = mono_s() + 60;
			}
		}
		if (c) {
			int n = rollup_pass(c, err, sizeof err);
			if (n < 0)
				log_warn("rollup: %s", err);
			else if (n > 0)
				log_debug("rollup: rated %d sandboxes", n);
		}
		struct timespec ts = {w->idle_ms / 1000, (long)(w->idle_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	if (c)
		PQfinish(c);
	return NULL;
}

struct rollup *rollup_start(const char *url, int idle_ms, int64_t raw_retention_us)
{
	struct rollup *w = calloc(1, sizeof *w);
	if (w == NULL)
		return NULL;
	w->url = url ? strdup(url) : NULL;
	w->idle_ms = idle_ms;
	w->retention_us = raw_retention_us;
	if (pthread_create(&w->thread, NULL, worker, w) != 0) {
		free(w->url);
		free(w);
		return NULL;
	}
	return w;
}

void rollup_stop(struct rollup *w)
{
	if (w == NULL)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	free(w->url);
	free(w);
}
