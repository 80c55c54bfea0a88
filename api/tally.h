/*
 * api/tally.h: usage summed for an answer, and the range of hours it covers.
 *
 * Usage is kept per price plan, so that its cost is computed once per plan
 * (meter/rating.h) however many rows it came from. The usage answers (an
 * account's, api/h_usage.c; a sandbox's, api/h_sandboxes.c) read their range
 * with tally_range_read and write each tally with tally_fill.
 */
#ifndef API_TALLY_H
#define API_TALLY_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/input.h"
#include "api/request.h"
#include "meter/plan.h"
#include "meter/rating.h"

/* Usage of one sandbox (or of all), kept per plan so cost is computed once per plan. */
struct tally {
	char id[160];
	struct meter_usage total;
	int64_t plan[8];
	struct meter_usage by_plan[8];
	int nplans;
};

/* Adds u, of plan, to t; false when t holds 8 plans already or a sum overflows. */
bool tally_add(struct tally *t, int64_t plan, const struct meter_usage *u);

/*
 * Adds t's figures to o (cpu_seconds, vcpu_hours, gib_hours, sandbox_hours,
 * busy_hours, idle_hours) and its cost at plans (n of them; cost and
 * cost_exact); false when a plan of t is not among them or the cost overflows.
 */
bool tally_fill(cJSON *o, const struct tally *t, const struct meter_plan *plans, size_t n);

/*
 * The from and to query parameters of a usage range into v[0] and v[1], then
 * the fields more (nmore of them, at most 6) into v[2...]; "to" must come
 * after "from", at most 400 days later. False when it has answered (400, 422).
 */
bool tally_range_read(struct req *r, const struct in_field *more, size_t nmore, struct in_value *v);

#endif
