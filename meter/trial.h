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

#endif
