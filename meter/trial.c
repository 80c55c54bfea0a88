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
