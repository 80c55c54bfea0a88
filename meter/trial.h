/*
 * meter/trial.h: the free-trial grant.
 *
 * Every account has a grant of sandbox time (50 sandbox-hours by default). The
 * grant covers the account's intervals, all its sandboxes together, in the
 * order of their ends, until it is used up; the interval that crosses that
 * point is covered in proportion to the part of its wall time the grant still
 * had. Covered usage appears on the invoice at its price and is credited by a
 * trial line of the same amount.
 */
#ifndef METER_TRIAL_H
#define METER_TRIAL_H

#include <stdint.h>

#include "meter/rating.h"
#include "meter/status.h"

/*
 * Takes one interval from the grant. *remaining_us is the grant left; on
 * return it is reduced by the wall time covered, and *covered holds the
 * covered share of the interval's usage (CPU shares rounded half up to the
 * µs). A zero-length interval is covered whole while any grant is left.
 * With no grant left *covered is all zeros. On error nothing changes.
 */
enum meter_status meter_trial_cover(int64_t *remaining_us, const struct meter_size *size,
                                    const struct meter_interval *iv, struct meter_usage *covered);

/*
 * The same for a sum of usage (an hour of a sandbox, say): the grant pays for
 * min(remaining, wall) of its wall time and that share of each quantity
 * (rounded half up). Usage with no wall time is covered whole while any grant
 * is left. On error nothing changes.
 */
enum meter_status meter_trial_cover_usage(int64_t *remaining_us, const struct meter_usage *u,
                                          struct meter_usage *covered);

/* One interval of the hour the grant runs out in, with what rule 8 orders it by. */
struct meter_trial_interval {
	size_t rank; /* its sandbox's place in the order of the sandboxes' ids (bytes) */
	size_t seq;  /* its place in its sandbox's series */
	int64_t plan_id;
	struct meter_size size;
	struct meter_interval iv;
};

/*
 * Covers the intervals of the hour the grant runs out in, in rule 8's order
 * (by end; at one end by sandbox id, then the series' order), from left_us of
 * the grant, the crossing one in proportion: the covered usage per plan into
 * covered (room for cap), *ncovered how many plans. Sorts ivs into that
 * order. METER_ERANGE when more plans than cap, METER_EOVERFLOW when a sum
 * does not fit.
 */
enum meter_status meter_trial_cover_hour(int64_t left_us, struct meter_trial_interval *ivs,
                                         size_t n, struct meter_plan_sum *covered, size_t *ncovered,
                                         size_t cap);

/*
 * Where a grant of grant_us runs out, over periods in time order (months, or
 * a month's hours) with walls[i] of sandbox time each, after before_us used
 * before them: the index of the first period by whose end the time used
 * reaches the grant, *before_out the time used before it; -1 when it does
 * not run out in them.
 */
long meter_trial_crossing(int64_t grant_us, int64_t before_us, const meter_i128 *walls, size_t n,
                          int64_t *before_out);

#endif
