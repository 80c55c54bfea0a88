#include "meter/trial.h"

#include <stdlib.h>

#include "meter/checked.h"

enum meter_status meter_trial_cover(int64_t *remaining_us, const struct meter_size *size,
                                    const struct meter_interval *iv, struct meter_usage *covered)
{
	struct meter_usage u = {0};
	struct meter_interval part = *iv;
	int64_t dt, left = *remaining_us;
	if (left < 0 || !ck_sub(iv->end_us, iv->start_us, &dt) || dt < 0)
		return METER_EINVAL;
	if (left > 0) {
		int64_t c = dt < left ? dt : left;
		if (c < dt) {
			/* The crossing interval: the grant pays for its first c µs. */
			part.end_us = iv->start_us + c;
			if (!ck_div_round((meter_i128)iv->cpu_us * c, dt, &part.cpu_us) ||
			    !ck_div_round((meter_i128)iv->billed_us * c, dt, &part.billed_us))
				return METER_EOVERFLOW;
		}
		enum meter_status st = meter_usage_add_interval(&u, size, &part);
		if (st)
			return st;
		left -= c;
	}
	*remaining_us = left;
	*covered = u;
	return METER_OK;
}

/* round(v x c / w), for 0 <= c <= w. */
static bool share(meter_i128 v, meter_i128 c, meter_i128 w, meter_i128 *out)
{
	meter_i128 num;
	return !__builtin_mul_overflow(v, c, &num) && ck_div_round_q(num, w, out);
}

enum meter_status meter_trial_cover_usage(int64_t *remaining_us, const struct meter_usage *u,
                                          struct meter_usage *covered)
{
	struct meter_usage c = {0};
	int64_t left = *remaining_us;
	meter_i128 w = u->wall_us;
	if (left < 0 || w < 0)
		return METER_EINVAL;
	if (left > 0 && w <= left) {
		c = *u;
		left -= (int64_t)w;
	} else if (left > 0) {
		/* The crossing usage: the grant pays for left of its w µs. */
		if (!share(u->cpu_measured_us, left, w, &c.cpu_measured_us) ||
		    !share(u->cpu_billed_us, left, w, &c.cpu_billed_us) ||
		    !share(u->busy_us, left, w, &c.busy_us) ||
		    !share(u->mem_mgib_us, left, w, &c.mem_mgib_us))
			return METER_EOVERFLOW;
		c.wall_us = left;
		c.idle_us = left - c.busy_us;
		left = 0;
	}
	*remaining_us = left;
	*covered = c;
	return METER_OK;
}

/* Rule 8's order: by end; at one end by sandbox id (byte order), then the series' order. */
static int trial_order(const void *a, const void *b)
{
	const struct meter_trial_interval *x = a, *y = b;
	if (x->iv.end_us != y->iv.end_us)
		return x->iv.end_us < y->iv.end_us ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

enum meter_status meter_trial_cover_hour(int64_t left_us, struct meter_trial_interval *ivs,
                                         size_t n, struct meter_plan_sum *covered, size_t *ncovered,
                                         size_t cap)
{
	enum meter_status st;
	size_t nc = 0;
	qsort(ivs, n, sizeof *ivs, trial_order);
	for (size_t i = 0; i < n; i++) {
		struct meter_usage part;
		if ((st = meter_trial_cover(&left_us, &ivs[i].size, &ivs[i].iv, &part)) ||
		    (st = meter_plan_sum_add(covered, &nc, cap, ivs[i].plan_id, &part)))
			return st;
	}
	*ncovered = nc;
	return METER_OK;
}

long meter_trial_crossing(int64_t grant_us, int64_t before_us, const meter_i128 *walls, size_t n,
                          int64_t *before_out)
{
	meter_i128 used = before_us;
	for (size_t i = 0; i < n; i++) {
		if (used + walls[i] >= grant_us) {
			*before_out = (int64_t)used; /* less than the grant */
			return (long)i;
		}
		used += walls[i];
	}
	return -1;
}
