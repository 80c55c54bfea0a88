#include "meter/quota.h"

bool meter_trial_exhausted(bool trial_plan, int64_t grant_us, int64_t used_us)
{
	return trial_plan && used_us >= grant_us;
}

bool meter_cap_reached(meter_money month_to_date, meter_money cap)
{
	return month_to_date >= cap;
}

enum meter_quota_reason meter_quota_decide(const struct meter_quota_state *s)
{
	if (meter_trial_exhausted(s->trial_plan, s->grant_us, s->trial_used_us))
		return METER_QUOTA_TRIAL_EXHAUSTED;
	if (s->has_cap && meter_cap_reached(s->month_to_date, s->cap))
		return METER_QUOTA_SPEND_CAP_REACHED;
	if (s->running >= s->max_concurrent)
		return METER_QUOTA_CONCURRENCY_LIMIT;
	return METER_QUOTA_OK;
}

const char *meter_quota_reason_name(enum meter_quota_reason r)
{
	switch (r) {
	case METER_QUOTA_TRIAL_EXHAUSTED:
		return "trial_exhausted";
	case METER_QUOTA_SPEND_CAP_REACHED:
		return "spend_cap_reached";
	case METER_QUOTA_CONCURRENCY_LIMIT:
		return "concurrency_limit";
	case METER_QUOTA_OK:
		break;
	}
	return "ok";
}
