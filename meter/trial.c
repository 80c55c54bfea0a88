#include "meter/trial.h"

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
