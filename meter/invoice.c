#include "meter/invoice.h"

#include <string.h>

#include "meter/checked.h"

static enum meter_status add(struct meter_invoice *inv, const struct meter_invoice_line *l)
{
	if (inv->n == METER_INVOICE_LINES_MAX)
		return METER_ERANGE;
	if (!ck_add(inv->total, l->amount, &inv->total))
		return METER_EOVERFLOW;
	inv->lines[inv->n++] = *l;
	return METER_OK;
}

enum meter_status meter_invoice_build(const struct meter_plan_usage *u, size_t n,
                                      struct meter_invoice *out)
{
	struct meter_invoice inv;
	meter_money credit = 0;
	meter_i128 covered_wall = 0;
	enum meter_status st;
	memset(&inv, 0, sizeof inv);
	for (size_t i = 0; i < n; i++) {
		const struct meter_usage *used = &u[i].used, *cov = &u[i].covered;
		if (cov->cpu_billed_us > used->cpu_billed_us ||
		    cov->mem_mgib_us > used->mem_mgib_us || cov->wall_us > used->wall_us ||
		    cov->cpu_billed_us < 0 || cov->mem_mgib_us < 0 || cov->wall_us < 0)
			return METER_EINVAL;
		if (used->cpu_billed_us == 0 && used->mem_mgib_us == 0 && used->wall_us == 0)
			continue;
		struct meter_invoice_line cpu = {
		        .kind = METER_LINE_CPU,
		        .plan = u[i].plan,
		        .quantity = used->cpu_billed_us,
		        .per_unit = METER_US_PER_HOUR,
		        .unit_price = u[i].plan->cpu_vcpu_hour,
		};
		struct meter_invoice_line mem = {
		        .kind = METER_LINE_MEMORY,
		        .plan = u[i].plan,
		        .quantity = used->mem_mgib_us,
		        .per_unit = METER_US_PER_HOUR * METER_MILLI,
		        .unit_price = u[i].plan->memory_gib_hour,
		};
		if ((st = meter_money_of(cpu.quantity, cpu.unit_price, cpu.per_unit,
		                         &cpu.amount)) ||
		    (st = meter_money_of(mem.quantity, mem.unit_price, mem.per_unit,
		                         &mem.amount)) ||
		    (st = add(&inv, &cpu)) || (st = add(&inv, &mem)))
			return st;
		/* What the trial covered, at the same prices: credited below. */
		struct meter_cost c;
		if ((st = meter_usage_cost(cov, u[i].plan, &c)))
			return st;
		if (!ck_add(credit, c.total, &credit) ||
		    !ck_add_q(covered_wall, cov->wall_us, &covered_wall))
			return METER_EOVERFLOW;
	}
	if (covered_wall > 0 || credit > 0) {
		struct meter_invoice_line trial = {
		        .kind = METER_LINE_TRIAL,
		        .quantity = covered_wall,
		        .per_unit = METER_US_PER_HOUR,
		        .amount = -credit,
		};
		if ((st = add(&inv, &trial)))
			return st;
	}
	*out = inv;
	return METER_OK;
}

enum meter_status meter_invoice_adjust(struct meter_invoice *inv, int64_t for_month_us,
                                       const struct meter_plan_usage *delta, size_t n)
{
	struct meter_invoice t = *inv;
	enum meter_status st;
	meter_money credit = 0;
	meter_i128 covered_wall = 0;
	for (size_t i = 0; i < n; i++) {
		const struct meter_plan *p = delta[i].plan;
		struct meter_invoice_line cpu = {.kind = METER_LINE_CPU,
		                                 .plan = p,
		                                 .quantity = delta[i].used.cpu_billed_us,
		                                 .per_unit = METER_US_PER_HOUR,
		                                 .unit_price = p->cpu_vcpu_hour,
		                                 .for_month_us = for_month_us};
		struct meter_invoice_line mem = {.kind = METER_LINE_MEMORY,
		                                 .plan = p,
		                                 .quantity = delta[i].used.mem_mgib_us,
		                                 .per_unit = METER_US_PER_HOUR * METER_MILLI,
		                                 .unit_price = p->memory_gib_hour,
		                                 .for_month_us = for_month_us};
		if ((st = meter_money_of(cpu.quantity, cpu.unit_price, cpu.per_unit,
		                         &cpu.amount)) ||
		    (st = meter_money_of(mem.quantity, mem.unit_price, mem.per_unit, &mem.amount)))
			return st;
		if (cpu.quantity && (st = add(&t, &cpu)))
			return st;
		if (mem.quantity && (st = add(&t, &mem)))
			return st;
		struct meter_cost c;
		if ((st = meter_usage_cost(&delta[i].covered, p, &c)))
			return st;
		if (!ck_add(credit, c.total, &credit) ||
		    !ck_add_q(covered_wall, delta[i].covered.wall_us, &covered_wall))
			return METER_EOVERFLOW;
	}
	if (credit != 0 || covered_wall != 0) {
		struct meter_invoice_line trial = {.kind = METER_LINE_TRIAL,
		                                   .quantity = covered_wall,
		                                   .per_unit = METER_US_PER_HOUR,
		                                   .amount = -credit,
		                                   .for_month_us = for_month_us};
		if ((st = add(&t, &trial)))
			return st;
	}
	*inv = t;
	return METER_OK;
}
