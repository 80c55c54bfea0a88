/*
 * common/month.h: an account's usage of one calendar month (UTC), per price
 * plan, and the part of it the free-trial grant covers, from the rollups.
 *
 * The grant covers the account's intervals in the order of their ends (rule
 * 8): every hour before the one in which it runs out whole, that hour's part
 * as the rollup found it interval by interval (trial_cover), nothing after.
 * The same rule serves the quota check (month to date) and the invoice.
 */
#ifndef COMMON_MONTH_H
#define COMMON_MONTH_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/invoice.h"
#include "meter/plan.h"
#include "meter/rating.h"

#define MONTH_PLANS_MAX 16

/* Usage under one plan, by the plan's id. */
struct plan_sum {
	int64_t plan_id;
	struct meter_usage u;
};

/* Adds u to the sum of plan in sums (at most cap); false when full or on overflow. */
bool plan_sum_add(struct plan_sum *sums, size_t *n, size_t cap, int64_t plan,
                  const struct meter_usage *u);

/*
 * What the trial grant covers of account's month (from month_start_us,
 * counting only hours whose intervals all end by until_us when it is not 0),
 * per plan, given the month's usage per plan (used), the grant and the hour
 * in which the grant runs out (METER_TIME_NONE: not yet, see
 * migrations/0016): the hours before it whole, the part of it the rollup
 * kept (trial_cover), nothing after; never more than used.
 */
bool month_trial_covered(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                         int64_t grant_us, int64_t crossing_hour, const struct plan_sum *used,
                         size_t nused, struct plan_sum *covered, size_t *ncovered, char *err,
                         size_t errlen);

struct month_usage {
	struct meter_plan_usage plans[MONTH_PLANS_MAX]; /* plan points into the plans given */
	size_t n;
	int64_t grant_us, wall_before_us; /* wall_before_us: up to the grant, no more */
	int64_t crossing_hour;            /* where the grant runs out, or METER_TIME_NONE */
	meter_i128 wall_us;
	bool found; /* the account exists */
};

/*
 * The month's usage per plan, with the trial's part, for account, counting
 * only intervals that end by until_us when it is not 0 (and earlier than the
 * month's end): the month to date as it stood then. plans are
 * all price plans (pointers into them are kept). false with err on a database
 * failure; out->found false when there is no such account.
 */
bool month_usage_load(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                      const struct meter_plan *plans, size_t nplans, struct month_usage *out,
                      char *err, size_t errlen);

#endif
