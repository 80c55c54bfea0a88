/* Public routes: health, readiness, metrics, the OpenAPI document, rates, estimates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/auth.h"
#include "api/plancache.h"
#include "api/pool.h"
#include "api/queries.h"
#include "api/replica.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/clock.h"
#include "common/plans.h"
#include "meter/estimate.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"
#include "api/metrics.h"
#include "reports/estimate.h"

void h_healthz(struct req *r)
{
	static const char ok[] = "{\"status\":\"ok\"}";
	reply_text(r, 200, "application/json", ok, sizeof ok - 1);
}

/*
 * Ready when the primary answers. With a read replica it also says where reads
 * go and why: "read_database" is ok, behind or unavailable (reads on the
 * primary then), and the replica is checked now when its check is due.
 */
/*
 * GET /readyz: "ready" while the primary answers, "degraded" while a
 * configured replica is not serving reads (the primary serves them), 503
 * when the primary does not answer. Why a replica is away (its error, which
 * names hosts, ports and users) is shown to an admin key only.
 */
void h_readyz(struct req *r)
{
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	PGresult *res = PQexec(c, "SELECT 1");
	bool up = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!up)
		reply_db_error(r, "readiness check", res);
	PQclear(res);
	if (!up)
		return;
	cJSON *o = cJSON_CreateObject();
	cJSON *status = cJSON_AddStringToObject(o, "status", "ready");
	cJSON_AddStringToObject(o, "database", "ok");
	struct replica *rp = server_replica(r->srv);
	if (rp == NULL) {
		cJSON_AddStringToObject(o, "read_database", "none");
		cJSON_AddStringToObject(o, "reads", "primary");
	} else {
		req_read_db(r); /* checks the replica when due */
		struct replica_status st;
		replica_status(rp, &st);
		if (st.state != REPLICA_OK)
			cJSON_SetValuestring(status, "degraded");
		cJSON_AddStringToObject(o, "read_database", replica_state_name(st.state));
		cJSON_AddStringToObject(o, "reads", r->rdb ? "replica" : "primary");
		if (req_is_admin(r))
			cJSON_AddStringToObject(o, "read_database_detail", st.detail);
		if (st.lag_us >= 0)
			cJSON_AddNumberToObject(o, "read_database_lag_seconds",
			                        (double)st.lag_us / 1e6);
	}
	reply_json(r, 200, o);
}

void h_metrics(struct req *r)
{
	size_t cap = 256 * 1024, used;
	char *buf = malloc(cap);
	const char *names[METRICS_ROUTES];
	char(*store)[96] = calloc((size_t)routes_count, sizeof *store);
	if (buf == NULL || store == NULL) {
		free(buf);
		free(store);
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return;
	}
	int named = 0;
	for (; named < routes_count && named < METRICS_ROUTES - 1; named++) {
		snprintf(store[named], sizeof store[named], "%s %s", routes[named].method,
		         routes[named].pattern);
		names[named] = store[named];
	}
	used = metrics_render(buf, cap, names, named);
	used += (size_t)snprintf(buf + used, cap - used,
	                         "# HELP meter_database_errors_total Database failures seen by "
	                         "requests.\n# TYPE meter_database_errors_total counter\n"
	                         "meter_database_errors_total %lu\n",
	                         pool_errors(server_pool(r->srv)));
	/* The rollup backlog, read now; absent when the database is away. */
	struct pool *p = server_pool(r->srv);
	char err[256];
	PGconn *c = pool_take(p, 500, err, sizeof err);
	int up = 0;
	if (c) {
		PGresult *res = q_exec(c, Q_ROLLUP_STATS, 0, NULL);
		if (PQresultStatus(res) == PGRES_TUPLES_OK) {
			up = 1;
			used += (size_t)snprintf(
			        buf + used, cap - used,
			        "# HELP meter_rollup_pending Sandboxes with samples not yet rolled "
			        "up.\n"
			        "# TYPE meter_rollup_pending gauge\nmeter_rollup_pending %s\n"
			        "# HELP meter_samples_unattributed Sandboxes whose samples wait "
			        "for "
			        "registration.\n# TYPE meter_samples_unattributed gauge\n"
			        "meter_samples_unattributed %s\n"
			        "# HELP meter_rollup_lag_seconds Age of the oldest sample not yet "
			        "rolled up.\n# TYPE meter_rollup_lag_seconds gauge\n"
			        "meter_rollup_lag_seconds %.6f\n"
			        "# HELP meter_rollup_parked Sandboxes set aside because they "
			        "cannot "
			        "be rated (meter parked lists them with the reason).\n"
			        "# TYPE meter_rollup_parked gauge\nmeter_rollup_parked %s\n"
			        "# HELP meter_unpriced_intervals_total Intervals that end before "
			        "any "
			        "price plan is in force: counted, not billed.\n"
			        "# TYPE meter_unpriced_intervals_total counter\n"
			        "meter_unpriced_intervals_total %s\n"
			        "# HELP meter_webhook_deliveries Webhook deliveries by state: "
			        "pending (being retried) and failed (every attempt failed; "
			        "redeliver sends one again).\n"
			        "# TYPE meter_webhook_deliveries gauge\n"
			        "meter_webhook_deliveries{state=\"pending\"} %s\n"
			        "meter_webhook_deliveries{state=\"failed\"} %s\n",
			        PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
			        strtod(PQgetvalue(res, 0, 2), NULL) / 1e6, PQgetvalue(res, 0, 3),
			        PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 5),
			        PQgetvalue(res, 0, 6));
		}
		PQclear(res);
		pool_give(p, c);
	}
	struct replica *rp = server_replica(r->srv);
	if (rp) {
		struct replica_status st;
		replica_status(rp, &st);
		used += (size_t)snprintf(
		        buf + used, cap - used,
		        "# HELP meter_read_replica_used Whether reads go to the read replica "
		        "(0: to the primary, the replica being down or behind).\n"
		        "# TYPE meter_read_replica_used gauge\nmeter_read_replica_used %d\n"
		        "# HELP meter_read_replica_lag_seconds The replica's delay at its last "
		        "check (-1: not known).\n"
		        "# TYPE meter_read_replica_lag_seconds gauge\n"
		        "meter_read_replica_lag_seconds %.6f\n",
		        st.state == REPLICA_OK, st.lag_us < 0 ? -1.0 : (double)st.lag_us / 1e6);
	}
	used += (size_t)snprintf(buf + used, cap - used,
	                         "# HELP meter_database_up Whether the database answered.\n"
	                         "# TYPE meter_database_up gauge\nmeter_database_up %d\n",
	                         up);
	if (used > cap)
		used = cap;
	reply_text(r, 200, "text/plain; version=0.0.4", buf, used);
	free(buf);
	free(store);
}

void h_openapi(struct req *r)
{
	reply_text(r, 200, "application/json", openapi_json, openapi_json_len);
}

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
	struct problem p;
	struct meter_plan plan, next;
	struct meter_estimate e;
	cJSON *body = in_parse_object(r->body, r->body_len, &p);
	bool ok = body && in_fields(body, f, 5, v, &p);
	cJSON_Delete(body);
	if (!ok) {
		reply_problem(r, &p);
		return;
	}
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
	if (r->nargs) {
		reply_problemf(r, 400, "unknown-parameter", "Unknown query parameter",
		               "this request takes no query parameters");
		return;
	}
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
	struct problem p;
	cJSON *body = in_parse_object(r->body, r->body_len, &p);
	if (body == NULL || !in_fields(body, f, 5, v, &p)) {
		cJSON_Delete(body);
		reply_problem(r, &p);
		return;
	}
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
