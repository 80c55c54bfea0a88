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

bool month_trial_cover(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                       int64_t *left_us, struct plan_sum *covered, size_t *ncovered, char *err,
                       size_t errlen)
{
	char from[24], to[24], limit[24];
	int64_t cursor = month_start_us, page = 8, left = *left_us;
	snprintf(to, sizeof to, "%lld", (long long)hours_end(month_start_us, until_us));
	while (left > 0) {
		snprintf(from, sizeof from, "%lld", (long long)cursor);
		snprintf(limit, sizeof limit, "%lld", (long long)page);
		const char *params[] = {account, from, to, limit};
		PGresult *res = PQexecParams(
		        c,
		        "SELECT " US("hour") ", price_plan_id, " SUMS " FROM usage_hourly "
		                             "WHERE account_id = $1 AND hour >= " TS(
		                                     "$2") " AND hour < " TS("$3") " "
		                                                                   "GROUP BY hour, "
		                                                                   "price_plan_id "
		                                                                   "ORDER BY hour, "
		                                                                   "price_plan_id "
		                                                                   "LIMIT $4",
		        4, NULL, params, NULL, NULL, 0);
		if (!db_check(res, PGRES_TUPLES_OK, "could not read hourly usage", err, errlen)) {
			PQclear(res);
			return false;
		}
		/* A full page may end inside an hour: take its whole hours only. */
		int n = PQntuples(res), take = n;
		if (n == page) {
			int64_t last, h;
			col(res, n - 1, 0, &last);
			while (take > 0 && col(res, take - 1, 0, &h) && h == last)
				take--;
			if (take == 0)
				take = n; /* one hour fills the page: take it whole */
		}
		for (int i = 0; i < take && left > 0; i++) {
			struct meter_usage u = {0}, part = {0};
			int64_t plan, hour;
			if (!col(res, i, 0, &hour) || !col(res, i, 1, &plan) ||
			    !sums(res, i, 2, &u) ||
			    meter_trial_cover_usage(&left, &u, &part) != METER_OK ||
			    !plan_sum_add(covered, ncovered, MONTH_PLANS_MAX, plan, &part)) {
				PQclear(res);
				snprintf(err, errlen,
				         "the trial's share of the month cannot be summed");
				return false;
			}
			cursor = hour + 1;
		}
		PQclear(res);
		if (n < page)
			break; /* no more hours */
		page *= 4;
	}
	*left_us = left;
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
	        "  FROM account_month m WHERE m.account_id = a.id "
	        "  AND m.month < (" TS("$2") " AT TIME ZONE 'UTC')::date)) "
	                                     "FROM accounts a WHERE a.id = $1",
	        2, NULL, params, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not read the account", err, errlen);
	if (ok && PQntuples(r) == 1) {
		out->found = true;
		ok = col(r, 0, 0, &out->grant_us) && col(r, 0, 1, &out->wall_before_us);
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
	int64_t left =
	        out->grant_us > out->wall_before_us ? out->grant_us - out->wall_before_us : 0;
	if (left >= out->wall_us) {
		memcpy(cov, used, sizeof used[0] * nused);
		ncov = nused;
	} else if (left > 0 && !month_trial_cover(c, account, month_start_us, until_us, &left, cov,
	                                          &ncov, err, errlen)) {
		return false;
	}
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
