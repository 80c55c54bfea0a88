/* Prices: the rates of a size, a monthly estimate, the price plans and a new one. */
#include <stdio.h>
#include <stdlib.h>

#include "api/opening.h"
#include "api/plancache.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/plans.h"
#include "meter/estimate.h"
#include "meter/timefmt.h"
#include "reports/estimate_doc.h"

/* The plan in force now and the next one (next->id 0: none), or an answer already given. */
static bool plan_now(struct req *r, struct meter_plan *out, struct meter_plan *next)
{
	PGconn *c = req_db(r);
	if (c == NULL)
		return false;
	struct meter_plan *plans = NULL;
	size_t n = 0;
	char err[256];
	bool ok = false;
	if (!plancache_get(c, &plans, &n, err, sizeof err)) {
		reply_db_error(r, "could not read price plans", NULL);
	} else {
		const struct meter_plan *p = meter_plan_at(plans, n, clock_now_us());
		const struct meter_plan *q = meter_plan_next(plans, n, clock_now_us());
		*next = q ? *q : (struct meter_plan){0};
		if (p) {
			*out = *p;
			ok = true;
		} else {
			reply_problemf(r, 503, "no-price-plan", "No price plan",
			               "no price plan is in force now");
		}
	}
	free(plans);
	return ok;
}

/* Adds "next_plan": the plan scheduled to take over, or null. */
static cJSON *with_next(cJSON *o, const struct meter_plan *next)
{
	if (o)
		cJSON_AddItemToObject(o, "next_plan",
		                      next->id ? report_plan_json(next) : cJSON_CreateNull());
	return o;
}

#define SIZE_FIELDS                                                                                \
	{"vcpus", IN_DECIMAL, 3, 1, 256000, true, NULL},                                           \
	{                                                                                          \
		"memory_gib", IN_DECIMAL, 3, 1, 1024000, true, NULL                                \
	}

void h_rates(struct req *r)
{
	static const struct in_field f[] = {SIZE_FIELDS};
	struct in_value v[2];
	struct problem p;
	struct meter_plan plan, next;
	struct meter_rates rates;
	if (!in_query(r->args, r->nargs, f, 2, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	struct meter_size size = {.vcpu_milli = v[0].num, .mem_mgib = v[1].num};
	if (!plan_now(r, &plan, &next))
		return;
	if (meter_rates_of(&plan, &size, &rates) != METER_OK) {
		reply_problemf(r, 422, "out-of-range", "Value out of range",
		               "the rates of that size cannot be computed");
		return;
	}
	reply_json(r, 200, with_next(report_rates_json(&plan, &size, &rates), &next));
}

void h_estimates(struct req *r)
{
	static const struct in_field f[] = {
	        {"runs_per_month", IN_DECIMAL, 0, 1, METER_EST_RUNS_MAX, true, NULL},
	        {"minutes_per_run", IN_DECIMAL, 3, 1, METER_EST_MINUTES_MILLI_MAX, true, NULL},
	        SIZE_FIELDS,
	        {"avg_busy_vcpus", IN_DECIMAL, 3, 0, 256000, true, NULL},
	};
	struct in_value v[5];
	struct meter_plan plan, next;
	struct meter_estimate e;
	cJSON *body = req_body_fields(r, f, 5, v, false);
	if (body == NULL)
		return;
	cJSON_Delete(body);
	struct meter_estimate_input in = {
	        .runs = v[0].num,
	        .minutes_milli = v[1].num,
	        .size = {.vcpu_milli = v[2].num, .mem_mgib = v[3].num},
	        .busy_vcpu_milli = v[4].num,
	};
	if (in.busy_vcpu_milli > in.size.vcpu_milli) {
		reply_problemf(r, 422, "out-of-range", "Value out of range",
		               "field \"avg_busy_vcpus\" (%s) must not exceed \"vcpus\" (%s)",
		               v[4].text, v[2].text);
		return;
	}
	if (!plan_now(r, &plan, &next))
		return;
	if (meter_estimate_month(&plan, &in, &e) != METER_OK) {
		reply_problemf(r, 422, "out-of-range", "Value out of range",
		               "the estimate of these figures cannot be computed");
		return;
	}
	reply_json(r, 200, with_next(report_estimate_json(&plan, &e), &next));
}

/* GET /v1/price-plans: every plan, oldest first, read now (not from the plan cache). */
void h_plan_list(struct req *r)
{
	if (!req_no_query(r))
		return;
	PGconn *c = req_db(r);
	struct meter_plan *plans = NULL;
	size_t n = 0;
	char err[256];
	if (c == NULL)
		return;
	if (!plans_load(c, &plans, &n, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	reply_json(r, 200, report_plans_json(plans, n, clock_now_us()));
	free(plans);
}

/*
 * POST /v1/price-plans (admin): publishes a plan from an hour ahead or more
 * (common/plans.h: rule 6 whatever the order of samples and plans). One
 * dated earlier would re-price hours as they are re-rated, so it is refused;
 * so is a second plan at the same instant.
 */
void h_plan_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"name", IN_TEXT, 0, 0, METER_PLAN_NAME_MAX - 1, true, NULL},
	        {"effective_from", IN_TIME, 0, 0, 0, true, NULL},
	        {"cpu_per_vcpu_hour", IN_DECIMAL, 9, 0, METER_PRICE_MAX, true, NULL},
	        {"memory_per_gib_hour", IN_DECIMAL, 9, 0, METER_PRICE_MAX, true, NULL},
	        {"cpu_floor", IN_DECIMAL, 6, 0, 1000000, false, NULL},
	};
	struct in_value v[5];
	cJSON *body = req_body_fields(r, f, 5, v, false);
	if (body == NULL)
		return;
	cJSON_Delete(body);
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char err[256], when[METER_TIME_BUF];
	int64_t id = 0;
	meter_time_format(v[1].num, when, sizeof when);
	switch (plan_add(c, v[0].text, v[1].num, v[2].num, v[3].num, v[4].set ? v[4].num : -1, &id,
	                 err, sizeof err)) {
	case PLAN_PAST:
		reply_problemf(
		        r, 422, "plan-in-the-past", "Price plan in the past",
		        "effective_from %s is not an hour in the future or more: samples are "
		        "rated up to an hour ahead of now, and a plan takes effect after "
		        "every interval rated before it was known",
		        when);
		return;
	case PLAN_TAKEN:
		reply_problemf(r, 409, "conflict", "Already exists",
		               "a price plan takes effect at %s already", when);
		return;
	case PLAN_DB_ERROR:
		reply_db_error(r, err, NULL);
		return;
	case PLAN_ADDED:
		break;
	}
	struct meter_plan *plans = NULL;
	size_t n = 0;
	if (!plans_load(c, &plans, &n, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (plans[i].id == id) {
			cJSON *o = report_plan_json(&plans[i]);
			cJSON_AddStringToObject(o, "state", "scheduled");
			reply_json(r, 201, o);
		}
	free(plans);
	if (!r->answered)
		reply_problemf(r, 500, "internal", "Internal error", "the new plan was not found");
}
