#include "reports/estimate_doc.h"

#include <string.h>

#include "meter/timefmt.h"

static bool add_money(cJSON *o, const char *name, meter_money m, bool rounded)
{
	char buf[METER_MONEY_BUF];
	if (rounded)
		meter_money_format_cents(m, buf, sizeof buf);
	else
		meter_money_format_exact(m, buf, sizeof buf);
	return cJSON_AddStringToObject(o, name, buf) != NULL;
}

cJSON *report_plan_json(const struct meter_plan *p)
{
	char when[METER_TIME_BUF], floor[METER_DECIMAL_BUF];
	cJSON *plan = cJSON_CreateObject();
	meter_time_format(p->effective_from_us, when, sizeof when);
	meter_decimal_format(p->cpu_floor_ppm, 6, 0, floor, sizeof floor);
	if (plan && cJSON_AddNumberToObject(plan, "id", (double)p->id) &&
	    cJSON_AddStringToObject(plan, "name", p->name) &&
	    cJSON_AddStringToObject(plan, "effective_from", when) &&
	    add_money(plan, "cpu_per_vcpu_hour", p->cpu_vcpu_hour, false) &&
	    add_money(plan, "memory_per_gib_hour", p->memory_gib_hour, false) &&
	    cJSON_AddStringToObject(plan, "cpu_floor", floor))
		return plan;
	cJSON_Delete(plan);
	return NULL;
}

const char *report_plan_state(const struct meter_plan *plans, size_t n, size_t i, int64_t now)
{
	return &plans[i] == meter_plan_at(plans, n, now) ? "in_force"
	       : plans[i].effective_from_us >= now       ? "scheduled"
	                                                 : "past";
}

cJSON *report_plans_json(const struct meter_plan *plans, size_t n, int64_t now)
{
	const struct meter_plan *in = meter_plan_at(plans, n, now),
	                        *next = meter_plan_next(plans, n, now);
	cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "plans");
	for (size_t i = 0; i < n; i++) {
		cJSON *p = report_plan_json(&plans[i]);
		cJSON_AddStringToObject(p, "state", report_plan_state(plans, n, i, now));
		cJSON_AddItemToArray(arr, p);
	}
	cJSON_AddItemToObject(o, "in_force", in ? report_plan_json(in) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "next", next ? report_plan_json(next) : cJSON_CreateNull());
	return o;
}

static bool add_plan(cJSON *o, const struct meter_plan *p)
{
	cJSON *plan = report_plan_json(p);
	return plan && cJSON_AddItemToObject(o, "plan", plan);
}

cJSON *report_rates_json(const struct meter_plan *p, const struct meter_size *size,
                         const struct meter_rates *r)
{
	char v[METER_DECIMAL_BUF], m[METER_DECIMAL_BUF];
	cJSON *o = cJSON_CreateObject();
	meter_decimal_format(size->vcpu_milli, 3, 0, v, sizeof v);
	meter_decimal_format(size->mem_mgib, 3, 0, m, sizeof m);
	/* Prices are exact: a rate is not an amount to pay, so it is not rounded. */
	if (o && cJSON_AddStringToObject(o, "vcpus", v) &&
	    cJSON_AddStringToObject(o, "memory_gib", m) &&
	    add_money(o, "busy_per_hour", r->busy_per_hour, false) &&
	    add_money(o, "idle_per_hour", r->idle_per_hour, false) &&
	    add_money(o, "cpu_busy_per_hour", r->cpu_busy, false) &&
	    add_money(o, "cpu_idle_per_hour", r->cpu_idle, false) &&
	    add_money(o, "memory_per_hour", r->memory, false) && add_plan(o, p))
		return o;
	cJSON_Delete(o);
	return NULL;
}

static bool add_line(cJSON *lines, const struct meter_estimate_line *l)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return false;
	cJSON_AddItemToArray(lines, o);
	return cJSON_AddStringToObject(o, "item", l->item) &&
	       cJSON_AddStringToObject(o, "formula", l->formula) &&
	       add_money(o, "amount", l->amount, true) &&
	       add_money(o, "amount_exact", l->amount, false);
}

cJSON *report_estimate_json(const struct meter_plan *p, const struct meter_estimate *e)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *lines = o ? cJSON_AddArrayToObject(o, "lines") : NULL;
	if (lines && add_line(lines, &e->cpu) && add_line(lines, &e->memory) &&
	    add_money(o, "total", e->total, true) && add_money(o, "total_exact", e->total, false) &&
	    cJSON_AddStringToObject(o, "currency", "USD") && add_plan(o, p))
		return o;
	cJSON_Delete(o);
	return NULL;
}

/* Display width of UTF-8 text: one column per code point. */
static int columns(const char *s)
{
	int n = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xC0) != 0x80)
			n++;
	return n;
}

static void line(FILE *out, const char *label, const char *formula, int width, meter_money m)
{
	char cents[METER_MONEY_BUF], exact[METER_MONEY_BUF];
	meter_money_format_cents(m, cents, sizeof cents);
	meter_money_format_exact(m, exact, sizeof exact);
	fprintf(out, "%-8s%s%*s%s $%s  (exact %s)\n", label, formula, width - columns(formula), "",
	        *formula ? "=" : " ", cents, exact);
}

void report_estimate_text(FILE *out, const struct meter_estimate *e)
{
	int w = columns(e->cpu.formula);
	if (columns(e->memory.formula) > w)
		w = columns(e->memory.formula);
	w += 3;
	line(out, "CPU:", e->cpu.formula, w, e->cpu.amount);
	line(out, "Memory:", e->memory.formula, w, e->memory.amount);
	line(out, "Total:", "", w, e->total);
}

void report_rates_text(FILE *out, const struct meter_plan *p, const struct meter_size *size,
                       const struct meter_rates *r)
{
	char v[METER_DECIMAL_BUF], m[METER_DECIMAL_BUF], when[METER_TIME_BUF];
	char busy[METER_MONEY_BUF], idle[METER_MONEY_BUF], cb[METER_MONEY_BUF], ci[METER_MONEY_BUF],
	        mem[METER_MONEY_BUF];
	meter_decimal_format(size->vcpu_milli, 3, 0, v, sizeof v);
	meter_decimal_format(size->mem_mgib, 3, 0, m, sizeof m);
	meter_time_format(p->effective_from_us, when, sizeof when);
	meter_money_format_exact(r->busy_per_hour, busy, sizeof busy);
	meter_money_format_exact(r->idle_per_hour, idle, sizeof idle);
	meter_money_format_exact(r->cpu_busy, cb, sizeof cb);
	meter_money_format_exact(r->cpu_idle, ci, sizeof ci);
	meter_money_format_exact(r->memory, mem, sizeof mem);
	fprintf(out, "%s vCPU, %s GiB, price plan \"%s\" (effective %s)\n", v, m, p->name, when);
	fprintf(out, "busy: $%s an hour  (CPU %s + memory %s)\n", busy, cb, mem);
	fprintf(out, "idle: $%s an hour  (CPU floor %s + memory %s)\n", idle, ci, mem);
}
