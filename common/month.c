#include "common/month.h"

#include <stdio.h>
#include <string.h>

#include "common/db.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"
#include "meter/trial.h"

#define US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"
#define TS(n)   "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"
#define SUMS                                                                                       \
	"sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), sum(wall_us), "     \
	"sum(memory_mgib_us)"

static bool col(const PGresult *r, int row, int c, int64_t *out)
{
	if (PQgetisnull(r, row, c)) {
		*out = 0;
		return true;
	}
	return meter_decimal_parse(PQgetvalue(r, row, c), 0, true, out) == METER_OK;
}

static bool sums(const PGresult *r, int row, int c, struct meter_usage *u)
{
	return db_col_usage(r, row, c, u);
}

/* The exclusive upper bound of hour buckets counted: the month's end, or the last
 * bucket whose intervals all end by until_us (a bucket h holds ends in (h, h+1h]). */
static int64_t hours_end(int64_t month_start_us, int64_t until_us)
{
	int64_t end = meter_month_next(month_start_us);
	if (until_us <= 0 || until_us >= end)
		return end;
	return until_us - INT64_C(3600000000) + 1;
}

bool plan_sum_add(struct plan_sum *sums_, size_t *n, size_t cap, int64_t plan,
                  const struct meter_usage *u)
{
	size_t i = 0;
	while (i < *n && sums_[i].plan_id != plan)
		i++;
	if (i == *n) {
		if (*n == cap)
			return false;
		sums_[i] = (struct plan_sum){.plan_id = plan};
		(*n)++;
	}
	return meter_usage_add(&sums_[i].u, u) == METER_OK;
}

/* Clamps every quantity of c to at most u's. */
static void at_most(struct meter_usage *c, const struct meter_usage *u)
{
	meter_i128 *cv[] = {&c->cpu_measured_us, &c->cpu_billed_us, &c->busy_us,
	                    &c->idle_us,         &c->wall_us,       &c->mem_mgib_us};
	const meter_i128 uv[] = {u->cpu_measured_us, u->cpu_billed_us, u->busy_us,
	                         u->idle_us,         u->wall_us,       u->mem_mgib_us};
	for (int i = 0; i < 6; i++)
		if (*cv[i] > uv[i])
			*cv[i] = uv[i];
}

/* Adds the rows (plan, six sums) of r to sums; false when they cannot be. */
static bool add_rows(const PGresult *r, struct plan_sum *s, size_t *n)
{
	for (int i = 0; i < PQntuples(r); i++) {
		struct meter_usage u;
		int64_t plan;
		if (!col(r, i, 0, &plan) || !sums(r, i, 1, &u) ||
		    !plan_sum_add(s, n, MONTH_PLANS_MAX, plan, &u))
			return false;
	}
	return true;
}

bool month_trial_covered(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                         int64_t grant_us, int64_t crossing_hour, const struct plan_sum *used,
                         size_t nused, struct plan_sum *covered, size_t *ncovered, char *err,
                         size_t errlen)
{
	*ncovered = 0;
	int64_t end = hours_end(month_start_us, until_us);
	if (grant_us <= 0 || (crossing_hour != METER_TIME_NONE && crossing_hour < month_start_us))
		return true; /* no grant, or it ran out before the month */
	if (crossing_hour == METER_TIME_NONE || crossing_hour >= end) {
		memcpy(covered, used, nused * sizeof *used); /* it lasts beyond the month */
		*ncovered = nused;
		return true;
	}
	/* It runs out inside the month: the hours before whole, its part of that hour. */
	char from[24], to[24];
	snprintf(from, sizeof from, "%lld", (long long)month_start_us);
	snprintf(to, sizeof to, "%lld", (long long)crossing_hour);
	const char *p[] = {account, from, to};
	PGresult *r = db_query(c,
	                       "SELECT price_plan_id, " SUMS " FROM usage_hourly "
	                       "WHERE account_id = $1 AND hour >= " TS("$2") " AND hour < " TS(
	                               "$3") " GROUP BY price_plan_id",
	                       3, p, PGRES_TUPLES_OK, "could not read hourly usage", err, errlen);
	if (r == NULL)
		return false;
	bool ok = add_rows(r, covered, ncovered);
	PQclear(r);
	r = ok ? db_query(c,
	                  "SELECT price_plan_id, cpu_measured_us, cpu_billed_us, busy_us, idle_us, "
	                  "wall_us, memory_mgib_us FROM trial_cover WHERE account_id = $1",
	                  1, p, PGRES_TUPLES_OK, "could not read the trial's cover", err, errlen)
	       : NULL;
	if (ok && r == NULL)
		return false;
	ok = ok && add_rows(r, covered, ncovered);
	PQclear(r);
	if (!ok) {
		snprintf(err, errlen, "the trial's share of the month cannot be summed");
		return false;
	}
	/* Never more than was used: the crossing hour is rated from the samples as they are,
	 * and a sandbox whose new samples there wait for their mark shows more for a moment,
	 * until that mark's rating finds the crossing again. */
	for (size_t k = 0; k < *ncovered; k++) {
		struct meter_usage none = {0};
		const struct meter_usage *u = &none;
		for (size_t i = 0; i < nused; i++)
			if (used[i].plan_id == covered[k].plan_id)
				u = &used[i].u;
		at_most(&covered[k].u, u);
	}
	return true;
}

bool month_usage_load(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                      const struct meter_plan *plans, size_t nplans, struct month_usage *out,
                      char *err, size_t errlen)
{
	char month[24];
	snprintf(month, sizeof month, "%lld", (long long)month_start_us);
	const char *params[] = {account, month};
	memset(out, 0, sizeof *out);
	PGresult *r = PQexecParams(
	        c,
	        "SELECT a.trial_grant_seconds * 1000000, "
	        /* capped at the grant: the trial needs no more, and years of it are not summed
	         * into 64 bits */
	        "least(a.trial_grant_seconds * 1000000, (SELECT coalesce(sum(wall_us), 0) "
	        "  FROM account_month m WHERE m.account_id = $1 "
	        "  AND m.month < (" TS(
	                "$2") " AT TIME ZONE 'UTC')::date)), "
	                      "(SELECT " US(
	                              "hour") " FROM trial_crossing t WHERE t.account_id = $1) "
	                                      "FROM accounts a WHERE a.id = $1",
	        2, NULL, params, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not read the account", err, errlen);
	if (ok && PQntuples(r) == 1) {
		out->found = true;
		ok = col(r, 0, 0, &out->grant_us) && col(r, 0, 1, &out->wall_before_us) &&
		     col(r, 0, 2, &out->crossing_hour);
		if (PQgetisnull(r, 0, 2))
			out->crossing_hour = METER_TIME_NONE;
	}
	PQclear(r);
	if (!ok || !out->found)
		return ok;
	int64_t end = hours_end(month_start_us, until_us);
	char endtext[24];
	snprintf(endtext, sizeof endtext, "%lld", (long long)end);
	const char *hp[] = {account, month, endtext};
	if (end == meter_month_next(month_start_us))
		r = PQexecParams(
		        c,
		        "SELECT price_plan_id, " SUMS " FROM account_month WHERE account_id = $1 "
		        "AND month = (" TS("$2") " AT TIME ZONE 'UTC')::date "
		                                 "GROUP BY price_plan_id ORDER BY price_plan_id",
		        2, NULL, params, NULL, NULL, 0);
	else /* part of the month: from the hours */
		r = PQexecParams(c,
		                 "SELECT price_plan_id, " SUMS
		                 " FROM usage_hourly WHERE account_id = $1 "
		                 "AND hour >= " TS("$2") " AND hour < " TS(
		                         "$3") " "
		                               "GROUP BY price_plan_id ORDER BY price_plan_id",
		                 3, NULL, hp, NULL, NULL, 0);
	ok = db_check(r, PGRES_TUPLES_OK, "could not read the month's usage", err, errlen);
	struct plan_sum used[MONTH_PLANS_MAX], cov[MONTH_PLANS_MAX];
	size_t nused = 0, ncov = 0;
	for (int i = 0; ok && i < PQntuples(r); i++) {
		struct meter_usage u = {0};
		int64_t plan;
		ok = col(r, i, 0, &plan) && sums(r, i, 1, &u) &&
		     ck_add_q(out->wall_us, u.wall_us, &out->wall_us) &&
		     plan_sum_add(used, &nused, MONTH_PLANS_MAX, plan, &u);
		if (!ok)
			snprintf(err, errlen, "the month's usage cannot be summed");
	}
	PQclear(r);
	if (!ok)
		return false;
	if (!month_trial_covered(c, account, month_start_us, until_us, out->grant_us,
	                         out->crossing_hour, used, nused, cov, &ncov, err, errlen))
		return false;
	for (size_t i = 0; i < nused; i++) {
		const struct meter_plan *p = NULL;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == used[i].plan_id)
				p = &plans[k];
		if (p == NULL) {
			snprintf(err, errlen, "price plan %lld is gone",
			         (long long)used[i].plan_id);
			return false;
		}
		struct meter_plan_usage *pu = &out->plans[out->n++];
		pu->plan = p;
		pu->used = used[i].u;
		for (size_t k = 0; k < ncov; k++)
			if (cov[k].plan_id == used[i].plan_id)
				pu->covered = cov[k].u;
	}
	return true;
}
