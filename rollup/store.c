/*
 * rollup/store.c: a batch's ratings written, in the batch's transaction.
 *
 * The rated sandboxes' usage_hourly (and usage_unpriced, rule 6) rows are
 * replaced from their windows on, sandbox_month, account_day and
 * account_month kept in step by subtracting the old hours and adding the
 * new, their months' costs ranked (migrations/0019), their checkpoints
 * replaced (migrations/0011) and their marks removed; the marks that cannot
 * be rated are set aside with the reason (kind 'unregistered' or 'parked',
 * migrations/0014). One statement of each kind for the whole batch.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "meter/timefmt.h"
#include "rollup/internal.h"

/* clang-format off */

/*
 * The checkpoints of the rated sandboxes ($1), replaced: one row per
 * incarnation seen up to the read's start ($2..$7, one element per row).
 */
static const char checkpoint_sql[] =
	"WITH old AS (DELETE FROM rollup_checkpoints WHERE sandbox_id = ANY ($1::text[]) "
	"  AND (sandbox_id, incarnation) NOT IN "
	"    (SELECT * FROM unnest($2::text[], $3::bigint[]))) "
	"INSERT INTO rollup_checkpoints AS c (sandbox_id, incarnation, upto, first_ts, last_ts, "
	"  max_cpu_usage_us) "
	"SELECT s, i, " TS("u") ", " TS("f") ", " TS("l") ", m "
	"FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], "
	"  $7::bigint[]) v(s, i, u, f, l, m) "
	"ON CONFLICT (sandbox_id, incarnation) DO UPDATE SET upto = EXCLUDED.upto, "
	"  first_ts = EXCLUDED.first_ts, last_ts = EXCLUDED.last_ts, "
	"  max_cpu_usage_us = EXCLUDED.max_cpu_usage_us";

/*
 * Removes the rated sandboxes' marks ($4) and their hours from their window
 * on ($1 accounts, $2 sandboxes, $3 windows), taking those hours out of
 * sandbox_month, account_day and account_month, and sets aside the marks that
 * cannot be rated ($5, why $6, kind $7: 'unregistered' or 'parked'), keeping
 * when they first waited: two updates of disjoint rows, not coalesce(...,
 * now()), which Citus cannot send to a shard (it evaluates now() apart).
 * On Citus ($8: the batch's accounts) each table is also named by its key
 * = ANY ($8) beside the join: Citus sends a join with unnest alone to every
 * shard, and this to the batch's shards only. On one PostgreSQL $8 is NULL
 * and the filter folds away when the statement is planned: there the planner
 * prices an = ANY index condition as one descent of the key per element, so
 * it read every hour of the batch's accounts (a bitmap scan of
 * usage_hourly_account_hour, a third of a fleet's hours for its largest
 * account) instead of each sandbox's hours by the key.
 */
static const char clear_sql[] =
	"WITH gone AS (DELETE FROM rollup_queue WHERE sandbox_id = ANY ($4::text[])), "
	"parked AS (UPDATE rollup_queue q SET waiting = p.why, waiting_kind = p.kind, "
	"  waiting_since = now(), retry_after = NULL "
	"  FROM unnest($5::text[], $6::text[], $7::text[]) p(id, why, kind) "
	"  WHERE q.sandbox_id = p.id AND q.sandbox_id = ANY ($5::text[]) "
	"  AND q.waiting_since IS NULL), "
	"still AS (UPDATE rollup_queue q SET waiting = p.why, waiting_kind = p.kind, "
	"  retry_after = NULL FROM unnest($5::text[], $6::text[], $7::text[]) p(id, why, kind) "
	"  WHERE q.sandbox_id = p.id AND q.sandbox_id = ANY ($5::text[]) "
	"  AND q.waiting_since IS NOT NULL), "
	"old AS (DELETE FROM usage_hourly u "
	"  USING unnest($1::text[], $2::text[], $3::bigint[]) j(a, s, w) "
	"  WHERE u.account_id = j.a AND u.sandbox_id = j.s "
	"  AND ($8::text[] IS NULL OR u.account_id = ANY ($8::text[])) "
	"  AND u.hour > " TS("j.w - 3600000000") " RETURNING u.*), "
	"unpriced AS (DELETE FROM usage_unpriced u "
	"  USING unnest($1::text[], $2::text[], $3::bigint[]) j(a, s, w) "
	"  WHERE u.account_id = j.a AND u.sandbox_id = j.s "
	"  AND ($8::text[] IS NULL OR u.account_id = ANY ($8::text[])) "
	"  AND u.hour > " TS("j.w - 3600000000") "), "
	"sagg AS (SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date m, "
	"  sandbox_id, price_plan_id, sum(cpu_measured_us) a, sum(cpu_billed_us) b, "
	"  sum(busy_us) c, sum(idle_us) d, sum(wall_us) e, sum(memory_mgib_us) f "
	"  FROM old GROUP BY 1, 2, 3, 4), "
	"sm AS (UPDATE sandbox_month t SET cpu_measured_us = t.cpu_measured_us - x.a, "
	"  cpu_billed_us = t.cpu_billed_us - x.b, busy_us = t.busy_us - x.c, "
	"  idle_us = t.idle_us - x.d, wall_us = t.wall_us - x.e, "
	"  memory_mgib_us = t.memory_mgib_us - x.f FROM sagg x "
	"  WHERE t.account_id = x.account_id AND t.month = x.m AND t.sandbox_id = x.sandbox_id "
	"  AND t.price_plan_id = x.price_plan_id "
	"  AND ($8::text[] IS NULL OR t.account_id = ANY ($8::text[]))), "
	"dagg AS (SELECT account_id, (hour AT TIME ZONE 'UTC')::date dd, price_plan_id, "
	"  sum(cpu_measured_us) a, sum(cpu_billed_us) b, sum(busy_us) c, sum(idle_us) d, "
	"  sum(wall_us) e, sum(memory_mgib_us) f FROM old GROUP BY 1, 2, 3), "
	"ad AS (UPDATE account_day t SET cpu_measured_us = t.cpu_measured_us - x.a, "
	"  cpu_billed_us = t.cpu_billed_us - x.b, busy_us = t.busy_us - x.c, "
	"  idle_us = t.idle_us - x.d, wall_us = t.wall_us - x.e, "
	"  memory_mgib_us = t.memory_mgib_us - x.f FROM dagg x "
	"  WHERE t.account_id = x.account_id AND t.day = x.dd "
	"  AND t.price_plan_id = x.price_plan_id "
	"  AND ($8::text[] IS NULL OR t.account_id = ANY ($8::text[]))), "
	"agg AS (SELECT account_id, m, price_plan_id, sum(a) a, sum(b) b, sum(c) c, sum(d) d, "
	"  sum(e) e, sum(f) f FROM sagg GROUP BY 1, 2, 3) "
	"UPDATE account_month t SET cpu_measured_us = t.cpu_measured_us - agg.a, "
	"  cpu_billed_us = t.cpu_billed_us - agg.b, busy_us = t.busy_us - agg.c, "
	"  idle_us = t.idle_us - agg.d, wall_us = t.wall_us - agg.e, "
	"  memory_mgib_us = t.memory_mgib_us - agg.f "
	"FROM agg WHERE t.account_id = agg.account_id AND t.month = agg.m "
	"  AND t.price_plan_id = agg.price_plan_id "
	"  AND ($8::text[] IS NULL OR t.account_id = ANY ($8::text[]))";

/* The new hours' unpriced intervals (rule 6), one array per column. */
static const char unpriced_sql[] =
	"INSERT INTO usage_unpriced (account_id, sandbox_id, hour, intervals, wall_us, "
	"  cpu_measured_us) "
	"SELECT a, s, " TS("h") ", n, w, c FROM unnest($1::text[], $2::text[], $3::bigint[], "
	"  $4::bigint[], $5::bigint[], $6::bigint[]) v(a, s, h, n, w, c)";

/* Inserts the new hours (one array per column) and adds them to sandbox_month,
 * account_day and account_month. */
static const char insert_sql[] =
	"WITH ins AS (INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	"  cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us, updated_at) "
	"  SELECT a, s, " TS("h") ", p, c1, c2, c3, c4, c5, c6, now() "
	"  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::bigint[], "
	"    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) "
	"    v(a, s, h, p, c1, c2, c3, c4, c5, c6) RETURNING *), "
	"sm AS (INSERT INTO sandbox_month AS t (account_id, month, sandbox_id, price_plan_id, "
	"  cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"  SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, sandbox_id, "
	"    price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"    sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"  FROM ins GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 "
	"  ON CONFLICT (account_id, month, sandbox_id, price_plan_id) DO UPDATE SET "
	"    cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"    cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"    busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"    wall_us = t.wall_us + EXCLUDED.wall_us, "
	"    memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us), "
	"ad AS (INSERT INTO account_day AS t (account_id, day, price_plan_id, cpu_measured_us, "
	"  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"  SELECT account_id, (hour AT TIME ZONE 'UTC')::date, price_plan_id, "
	"    sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"    sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"  FROM ins GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 "
	"  ON CONFLICT (account_id, day, price_plan_id) DO UPDATE SET "
	"    cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"    cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"    busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"    wall_us = t.wall_us + EXCLUDED.wall_us, "
	"    memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us) "
	"INSERT INTO account_month AS t (account_id, month, price_plan_id, cpu_measured_us, "
	"  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, price_plan_id, "
	"  sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"  sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"FROM ins GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 "
	"ON CONFLICT (account_id, month, price_plan_id) DO UPDATE SET "
	"  cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"  cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"  busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"  wall_us = t.wall_us + EXCLUDED.wall_us, "
	"  memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us";

/*
 * The cost rows of the rated sandboxes ($1 accounts, $2 sandboxes) from the month
 * of their window ($3) on, from sandbox_month (migrations/functions/meter_sandbox_month_costs.sql).
 */
static const char month_costs_sql[] =
	"SELECT meter_sandbox_month_costs($1::text[], $2::text[], "
	"  ARRAY(SELECT (date_trunc('month', " TS("w") " AT TIME ZONE 'UTC'))::date "
	"    FROM unnest($3::bigint[]) WITH ORDINALITY x(w, k) ORDER BY k))";

/* clang-format on */

/*
 * Replaces the checkpoints of the rated sandboxes: where each incarnation
 * that has a sample (or seed) up to the read's start stood there, so the next
 * rating reads only what came after (read_sql says when it may).
 */
static bool store_checkpoints(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[7] = {{0}};
	size_t rated = 0;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		if (j->fate != RATE)
			continue;
		ru_arr_str(&a[0], j->sandbox);
		rated++;
		for (size_t k = 0; k < j->ninc; k++) {
			const struct inc *x = &j->incs[k];
			if (x->first > j->from)
				continue; /* nothing of it up to the read's start */
			ru_arr_str(&a[1], j->sandbox);
			ru_arr_int(&a[2], x->inc);
			ru_arr_int(&a[3], j->from);
			ru_arr_int(&a[4], x->first);
			ru_arr_opt(&a[5], x->ck_last);
			ru_arr_opt(&a[6],
			           x->ck_last == METER_TIME_NONE ? METER_TIME_NONE : x->ck_cpu);
		}
	}
	if (rated == 0) {
		for (int k = 0; k < 7; k++)
			ru_arr_free(&a[k]);
		return true;
	}
	return ru_arr_run(c, checkpoint_sql, PGRES_COMMAND_OK, a, 7, "could not store checkpoints",
	                  err, errlen);
}

/* Stores the rated sandboxes' unpriced intervals, hour by hour (usually none). */
static bool store_unpriced(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[6] = {{0}};
	size_t rows = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; jobs[i].fate == RATE && k < jobs[i].nb; k++) {
			const struct bucket *b = &jobs[i].b[k];
			if (b->plan != 0)
				continue;
			ru_arr_str(&a[0], jobs[i].account);
			ru_arr_str(&a[1], jobs[i].sandbox);
			ru_arr_int(&a[2], b->hour);
			ru_arr_int(&a[3], b->intervals);
			ru_arr_int(&a[4],
			           (int64_t)b->u.wall_us); /* within 64 bits: ru_rate() checked */
			ru_arr_int(&a[5], (int64_t)b->u.cpu_measured_us);
			rows++;
		}
	if (rows == 0) {
		for (int k = 0; k < 6; k++)
			ru_arr_free(&a[k]);
		return true;
	}
	return ru_arr_run(c, unpriced_sql, PGRES_COMMAND_OK, a, 6,
	                  "could not store unpriced intervals", err, errlen);
}

bool ru_sharded(PGconn *c, bool *sharded, char *err, size_t errlen)
{
	PGresult *r =
	        ru_query(c, "SELECT meter_distributed('usage_hourly')", 0, NULL, PGRES_TUPLES_OK,
	                 "could not tell whether Citus placed the tables", err, errlen);
	if (r == NULL)
		return false;
	*sharded = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return true;
}

/*
 * Stores the batch: the rated sandboxes' hours replaced from their windows
 * on, account_month kept in step, their marks removed; the others parked.
 */
bool ru_store(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[10] = {{0}}, gone = {0}, park = {0}, why = {0}, kind = {0};
	PGresult *r = NULL;
	bool ok = false;
	size_t rows = 0;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		if (j->fate != RATE) {
			ru_arr_str(&park, j->sandbox);
			ru_arr_str(&why, j->why[0] ? j->why : "not registered");
			ru_arr_str(&kind, j->fate == NOT_REGISTERED ? "unregistered" : "parked");
			continue;
		}
		if (j->ahead > 0) {
			/* rated without them; its mark stays aside until they are fixed */
			char first[METER_TIME_BUF], text[300];
			meter_time_format(j->ahead_first, first, sizeof first);
			snprintf(
			        text, sizeof text,
			        "%lld sample(s) stamped from %s on, more than an hour ahead of now "
			        "(a clock ahead?), are not rated; the rest is",
			        (long long)j->ahead, first);
			log_warn("rollup: sandbox %s (account %s): %s", j->sandbox, j->account,
			         text);
			ru_arr_str(&park, j->sandbox);
			ru_arr_str(&why, text);
			ru_arr_str(&kind, "parked");
		} else {
			ru_arr_str(&gone, j->sandbox);
		}
		ru_arr_str(&a[0], j->account);
		ru_arr_str(&a[1], j->sandbox);
		ru_arr_int(&a[2], j->window);
	}
	const char *p[10] = {ru_arr_end(&a[0]), ru_arr_end(&a[1]), ru_arr_end(&a[2]),
	                     ru_arr_end(&gone), ru_arr_end(&park), ru_arr_end(&why),
	                     ru_arr_end(&kind)};
	for (int k = 0; k < 7; k++)
		if (p[k] == NULL)
			goto oom;
	p[7] = n > 0 && jobs[0].sharded ? p[0] : NULL;
	r = ru_query(c, clear_sql, 8, p, PGRES_COMMAND_OK, "could not replace hourly usage", err,
	             errlen);
	if (r == NULL)
		goto out;
	PQclear(r);
	r = NULL;
	for (int k = 0; k < 3; k++)
		ru_arr_free(&a[k]);
	if (!store_unpriced(c, jobs, n, err, errlen))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		for (size_t k = 0; j->fate == RATE && k < j->nb; k++) {
			const struct bucket *b = &j->b[k];
			if (b->plan == 0)
				continue; /* unpriced: store_unpriced */
			ru_arr_str(&a[0], j->account);
			ru_arr_str(&a[1], j->sandbox);
			ru_arr_int(&a[2], b->hour);
			ru_arr_int(&a[3], b->plan);
			/* each within 64 bits: ru_rate() checked */
			ru_arr_int(&a[4], (int64_t)b->u.cpu_measured_us);
			ru_arr_int(&a[5], (int64_t)b->u.cpu_billed_us);
			ru_arr_int(&a[6], (int64_t)b->u.busy_us);
			ru_arr_int(&a[7], (int64_t)b->u.idle_us);
			ru_arr_int(&a[8], (int64_t)b->u.wall_us);
			ru_arr_int(&a[9], (int64_t)b->u.mem_mgib_us);
			rows++;
		}
	}
	if (rows > 0) {
		for (int k = 0; k < 10; k++)
			if ((p[k] = ru_arr_end(&a[k])) == NULL)
				goto oom;
		r = ru_query(c, insert_sql, 10, p, PGRES_COMMAND_OK, "could not store hourly usage",
		             err, errlen);
		if (r == NULL)
			goto out;
		PQclear(r);
		r = NULL;
	}
	for (int k = 0; k < 10; k++)
		ru_arr_free(&a[k]);
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE) {
			ru_arr_str(&a[0], jobs[i].account);
			ru_arr_str(&a[1], jobs[i].sandbox);
			ru_arr_int(&a[2], jobs[i].window);
		}
	if (a[0].n > 0 && !ru_arr_run(c, month_costs_sql, PGRES_TUPLES_OK, a, 3,
	                              "could not rank the sandboxes' months", err, errlen))
		goto out;
	if (!store_checkpoints(c, jobs, n, err, errlen))
		goto out;
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not store hourly usage: out of memory");
out:
	PQclear(r);
	for (int k = 0; k < 10; k++)
		ru_arr_free(&a[k]);
	ru_arr_free(&gone);
	ru_arr_free(&park);
	ru_arr_free(&why);
	ru_arr_free(&kind);
	return ok;
}
