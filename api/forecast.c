#include "api/forecast.h"

#include <stdio.h>
#include <stdlib.h>

#include "api/account.h"
#include "api/queries.h"
#include "api/reply.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/ledgerdb.h"
#include "meter/rating.h"
#include "meter/timefmt.h"

#define DAY_US (INT64_C(86400) * 1000000)

bool forecast_compute(struct req *r, PGconn *c, const char *id, int64_t month, int64_t at,
                      bool asked, const struct meter_plan *plans, size_t nplans,
                      struct forecast *out)
{
	char err[256], from[24], to[24];
	PGresult *res = NULL;
	int64_t end = meter_month_next(month);
	struct ledger *l = malloc(sizeof *l);
	if (l == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return false;
	}
	bool found = false;
	if (!ledger_month(c, id, month, asked && at < clock_now_us() ? at : 0, plans, nplans, l,
	                  err, sizeof err)) {
		free(l);
		reply_db_error(r, err, NULL);
		return false;
	}
	found = l->found;
	meter_money to_date = l->inv.total;
	free(l);
	if (!found) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		return false;
	}
	/* The last FORECAST_BASIS_DAYS full days before at, day by day. */
	int64_t today = at - ((at % DAY_US) + DAY_US) % DAY_US;
	snprintf(from, sizeof from, "%lld", (long long)(today - FORECAST_BASIS_DAYS * DAY_US));
	snprintf(to, sizeof to, "%lld", (long long)today);
	const char *params[] = {id, from, to};
	res = q_exec(c, Q_DAILY, 3, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read daily usage", res);
		PQclear(res);
		return false;
	}
	meter_money day_cost[FORECAST_BASIS_DAYS] = {0}, sum = 0, lo, hi;
	for (int i = 0; i < PQntuples(res); i++) {
		int64_t d, plan;
		struct meter_usage u;
		struct meter_cost cost;
		const struct meter_plan *pl = NULL;
		if (!col_int(res, i, 0, &d) || !col_int(res, i, 1, &plan) ||
		    !db_col_usage(res, i, 2, &u))
			goto bad;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == plan)
				pl = &plans[k];
		int64_t k = (d - (today - FORECAST_BASIS_DAYS * DAY_US)) / DAY_US;
		if (pl == NULL || k < 0 || k >= FORECAST_BASIS_DAYS ||
		    meter_usage_cost(&u, pl, &cost) ||
		    meter_money_add(day_cost[k], cost.total, &day_cost[k]))
			goto bad;
	}
	PQclear(res);
	res = NULL;
	lo = hi = day_cost[0];
	for (int k = 0; k < FORECAST_BASIS_DAYS; k++) {
		if (meter_money_add(sum, day_cost[k], &sum))
			goto bad;
		lo = day_cost[k] < lo ? day_cost[k] : lo;
		hi = day_cost[k] > hi ? day_cost[k] : hi;
	}
	/* The time left in the month: none for a month past, all of a month to come. */
	int64_t left = at >= end ? 0 : end - (at > month ? at : month);
	meter_money rest, rest_lo, rest_hi;
	out->month_to_date = to_date;
	if (meter_money_of(left, sum, FORECAST_BASIS_DAYS * DAY_US, &rest) ||
	    meter_money_of(left, lo, DAY_US, &rest_lo) ||
	    meter_money_of(left, hi, DAY_US, &rest_hi) ||
	    meter_money_of(sum, 1, FORECAST_BASIS_DAYS, &out->per_day) ||
	    meter_money_add(to_date, rest, &out->projected) ||
	    meter_money_add(to_date, rest_lo, &out->low) ||
	    meter_money_add(to_date, rest_hi, &out->high))
		goto bad;
	return true;
bad:
	PQclear(res);
	reply_problemf(r, 500, "internal", "Internal error", "the forecast cannot be computed");
	return false;
}
