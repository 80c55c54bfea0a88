#include "meter/estimate.h"

#include <stdio.h>

#include "meter/checked.h"
#include "meter/decimal.h"

enum meter_status meter_rates_of(const struct meter_plan *p, const struct meter_size *size,
                                 struct meter_rates *out)
{
	struct meter_rates r;
	enum meter_status st;
	if ((st = meter_plan_check(p)) || (st = meter_size_check(size)))
		return st;
	if ((st = meter_money_of(size->vcpu_milli, p->cpu_vcpu_hour, METER_MILLI, &r.cpu_busy)) ||
	    (st = meter_money_of(size->vcpu_milli * p->cpu_floor_ppm, p->cpu_vcpu_hour,
	                         METER_MILLI * METER_PPM, &r.cpu_idle)) ||
	    (st = meter_money_of(size->mem_mgib, p->memory_gib_hour, METER_MILLI, &r.memory)) ||
	    (st = meter_money_add(r.cpu_busy, r.memory, &r.busy_per_hour)) ||
	    (st = meter_money_add(r.cpu_idle, r.memory, &r.idle_per_hour)))
		return st;
	*out = r;
	return METER_OK;
}

/* round(a x b x c x price / den) to the nano-dollar, in 128 bits. */
static enum meter_status line_amount(int64_t a, int64_t b, int64_t c, meter_money price,
                                     meter_i128 den, meter_money *out)
{
	meter_i128 num = (meter_i128)a * b; /* both bounded well below 2^40 */
	if (!ck_mul128(num, c, &num) || !ck_mul128(num, price, &num))
		return METER_EOVERFLOW;
	return ck_div_round(num, den, out) ? METER_OK : METER_EOVERFLOW;
}

enum meter_status meter_estimate_month(const struct meter_plan *p,
                                       const struct meter_estimate_input *in,
                                       struct meter_estimate *out)
{
	struct meter_estimate e = {.cpu.item = "cpu", .memory.item = "memory"};
	enum meter_status st;
	if ((st = meter_plan_check(p)) || (st = meter_size_check(&in->size)))
		return st;
	if (in->runs <= 0 || in->runs > METER_EST_RUNS_MAX || in->minutes_milli <= 0 ||
	    in->minutes_milli > METER_EST_MINUTES_MILLI_MAX || in->busy_vcpu_milli < 0 ||
	    in->busy_vcpu_milli > in->size.vcpu_milli)
		return METER_ERANGE;

	/* vCPUs billed, x 10^9: the busy ones, raised to the floor. */
	int64_t busy_nano = in->busy_vcpu_milli * METER_PPM;
	int64_t floor_nano = in->size.vcpu_milli * p->cpu_floor_ppm;
	e.billed_vcpu_nano = busy_nano > floor_nano ? busy_nano : floor_nano;

	/* hours = runs x minutes_milli / (60 x 1000) */
	const meter_i128 per_hour = 60 * METER_MILLI;
	if ((st = line_amount(in->runs, in->minutes_milli, e.billed_vcpu_nano, p->cpu_vcpu_hour,
	                      per_hour * METER_NANO_PER_DOLLAR, &e.cpu.amount)) ||
	    (st = line_amount(in->runs, in->minutes_milli, in->size.mem_mgib, p->memory_gib_hour,
	                      per_hour * METER_MILLI, &e.memory.amount)) ||
	    (st = meter_money_add(e.cpu.amount, e.memory.amount, &e.total)))
		return st;

	char minutes[METER_DECIMAL_BUF], vcpus[METER_DECIMAL_BUF], gib[METER_DECIMAL_BUF];
	char cpu_price[METER_DECIMAL_BUF], mem_price[METER_DECIMAL_BUF];
	meter_decimal_format(in->minutes_milli, 3, 0, minutes, sizeof minutes);
	meter_decimal_format(e.billed_vcpu_nano, 9, 0, vcpus, sizeof vcpus);
	meter_decimal_format(in->size.mem_mgib, 3, 0, gib, sizeof gib);
	meter_decimal_format(p->cpu_vcpu_hour, METER_MONEY_SCALE, 0, cpu_price, sizeof cpu_price);
	meter_decimal_format(p->memory_gib_hour, METER_MONEY_SCALE, 0, mem_price, sizeof mem_price);
	snprintf(e.cpu.formula, sizeof e.cpu.formula, "%lld × %s min / 60 × %s vCPU × $%s",
	         (long long)in->runs, minutes, vcpus, cpu_price);
	snprintf(e.memory.formula, sizeof e.memory.formula, "%lld × %s min / 60 × %s GiB × $%s",
	         (long long)in->runs, minutes, gib, mem_price);
	*out = e;
	return METER_OK;
}
