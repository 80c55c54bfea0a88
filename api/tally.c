#include "api/tally.h"

#include <stdio.h>

#include "api/reply.h"
#include "meter/decimal.h"
#include "meter/money.h"

#define RANGE_MAX_US (INT64_C(400) * 86400 * 1000000) /* a bit over a year */

bool tally_add(struct tally *t, int64_t plan, const struct meter_usage *u)
{
	int i = 0;
	while (i < t->nplans && t->plan[i] != plan)
		i++;
	if (i == t->nplans) {
		if (t->nplans == 8)
			return false;
		t->plan[i] = plan;
		t->by_plan[i] = (struct meter_usage){0};
		t->nplans++;
	}
	return meter_usage_add(&t->by_plan[i], u) == METER_OK &&
	       meter_usage_add(&t->total, u) == METER_OK;
}

static void put_us_as(cJSON *o, const char *name, meter_i128 us, int64_t per)
{
	char buf[METER_QTY_BUF];
	/* per µs a unit: seconds (1e6) exact to 6 decimals, hours to 6 decimals rounded */
	meter_qty_per(us, per, 6, buf, sizeof buf);
	cJSON_AddStringToObject(o, name, buf);
}

bool tally_fill(cJSON *o, const struct tally *t, const struct meter_plan *plans, size_t n)
{
	meter_money cost = 0;
	for (int i = 0; i < t->nplans; i++) {
		const struct meter_plan *p = NULL;
		struct meter_cost c;
		for (size_t k = 0; k < n; k++)
			if (plans[k].id == t->plan[i])
				p = &plans[k];
		if (p == NULL || meter_usage_cost(&t->by_plan[i], p, &c) != METER_OK ||
		    meter_money_add(cost, c.total, &cost) != METER_OK)
			return false;
	}
	const struct meter_usage *u = &t->total;
	put_us_as(o, "cpu_seconds", u->cpu_measured_us, 1000000);
	put_us_as(o, "vcpu_hours", u->cpu_billed_us, METER_US_PER_HOUR);
	put_us_as(o, "gib_hours", u->mem_mgib_us, (METER_US_PER_HOUR * METER_MILLI));
	put_us_as(o, "sandbox_hours", u->wall_us, METER_US_PER_HOUR);
	put_us_as(o, "busy_hours", u->busy_us, METER_US_PER_HOUR);
	put_us_as(o, "idle_hours", u->idle_us, METER_US_PER_HOUR);
	char c1[METER_MONEY_BUF], c2[METER_MONEY_BUF];
	meter_money_format_cents(cost, c1, sizeof c1);
	meter_money_format_exact(cost, c2, sizeof c2);
	cJSON_AddStringToObject(o, "cost", c1);
	cJSON_AddStringToObject(o, "cost_exact", c2);
	return true;
}

bool tally_range_read(struct req *r, const struct in_field *more, size_t nmore, struct in_value *v)
{
	struct in_field f[8] = {{"from", IN_TIME, 0, 0, 0, true, NULL},
	                        {"to", IN_TIME, 0, 0, 0, true, NULL}};
	struct problem p;
	for (size_t i = 0; i < nmore && i < 6; i++)
		f[2 + i] = more[i];
	if (!in_query(r->args, r->nargs, f, 2 + nmore, v, &p)) {
		reply_problem(r, &p);
		return false;
	}
	if (v[1].num <= v[0].num || v[1].num - v[0].num > RANGE_MAX_US) {
		reply_problemf(r, 422, "invalid-range", "Invalid range",
		               "\"to\" must be after \"from\" and at most 400 days later");
		return false;
	}
	return true;
}
