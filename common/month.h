/*
 * common/month.h: an account's usage of one calendar month (UTC), per price
 * plan, and the part of it the free-trial grant covers, from the rollups.
 *
 * The grant covers usage hour by hour in the order of the hours (the hour of
 * an interval is the hour in which it ends); within the hour in which it runs
 * out, all the account's sandboxes share the rest in proportion. The same
 * rule serves the quota check (month to date) and the invoice.
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
 * The part of the month's usage (from month_start_us) the grant covers,
 * (until until_us when not 0), given the grant left at the month's start in
 * *left_us; on return *left_us
 * is what is left after the month. Reads the hours in order, a few at first,
 * so an account whose grant runs out early reads only its first hours.
 */
bool month_trial_cover(PGconn *c, const char *account, int64_t month_start_us, int64_t until_us,
                       int64_t *left_us, struct plan_sum *covered, size_t *ncovered, char *err,
                       size_t errlen);

struct month_usage {
	struct meter_plan_usage plans[MONTH_PLANS_MAX]; /* plan points into the plans given */
	size_t n;
	int64_t grant_us, wall_before_us; /* wall_before_us: up to the grant, no more */
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
