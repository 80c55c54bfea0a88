#include "meter/plan.h"

enum meter_status meter_plan_check(const struct meter_plan *p)
{
	if (p->cpu_vcpu_hour < 0 || p->cpu_vcpu_hour > METER_PRICE_MAX)
		return METER_ERANGE;
	if (p->memory_gib_hour < 0 || p->memory_gib_hour > METER_PRICE_MAX)
		return METER_ERANGE;
	if (p->cpu_floor_ppm < 0 || p->cpu_floor_ppm > METER_PPM)
		return METER_ERANGE;
	return METER_OK;
}

enum meter_status meter_size_check(const struct meter_size *s)
{
	if (s->vcpu_milli <= 0 || s->vcpu_milli > METER_VCPU_MILLI_MAX)
		return METER_ERANGE;
	if (s->mem_mgib <= 0 || s->mem_mgib > METER_MEM_MGIB_MAX)
		return METER_ERANGE;
	return METER_OK;
}

/* ceil(a x 1000 / b) for a, b >= 1, in 128 bits */
static enum meter_status thousandths_up(int64_t a, int64_t b, int64_t *out)
{
	if (a < 1 || b < 1)
		return METER_EINVAL;
	meter_i128 q = ((meter_i128)a * METER_MILLI + b - 1) / b;
	if (q > INT64_MAX)
		return METER_EOVERFLOW;
	*out = (int64_t)q;
	return METER_OK;
}

enum meter_status meter_vcpus_of_quota(int64_t quota_us, int64_t period_us, int64_t *vcpu_milli)
{
	return thousandths_up(quota_us, period_us, vcpu_milli);
}

enum meter_status meter_mgib_of_bytes(int64_t bytes, int64_t *mem_mgib)
{
	return thousandths_up(bytes, INT64_C(1) << 30, mem_mgib);
}

const struct meter_plan *meter_plan_at(const struct meter_plan *plans, size_t n, int64_t end_us)
{
	/* Binary search for the last plan with effective_from < end_us. */
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (plans[mid].effective_from_us < end_us)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == 0 ? NULL : &plans[lo - 1];
}

const struct meter_plan *meter_plan_next(const struct meter_plan *plans, size_t n, int64_t t)
{
	const struct meter_plan *now = meter_plan_at(plans, n, t);
	size_t i = now ? (size_t)(now - plans) + 1 : 0;
	return i < n ? &plans[i] : NULL;
}
