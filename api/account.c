#include "api/account.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/plancache.h"
#include "common/month.h"
#include "api/queries.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "meter/trial.h"

bool col_int(const PGresult *res, int row, int col, int64_t *out)
{
	if (PQgetisnull(res, row, col)) {
		*out = 0;
		return true;
	}
	return meter_decimal_parse(PQgetvalue(res, row, col), 0, true, out) == METER_OK;
}

void fmt_hours(int64_t us, char *buf, size_t len)
{
	int64_t micro_hours = 0;
	(void)ck_div_round(us, 3600, &micro_hours);
	meter_decimal_format(micro_hours, 6, 0, buf, len);
}

bool account_from_row(const PGresult *res, int row, struct account *a)
{
	int64_t grant_s;
	memset(a, 0, sizeof *a);
	snprintf(a->id, sizeof a->id, "%s", PQgetvalue(res, row, 0));
	snprintf(a->name, sizeof a->name, "%s", PQgetvalue(res, row, 1));
	snprintf(a->plan, sizeof a->plan, "%s", PQgetvalue(res, row, 2));
	a->has_cap = !PQgetisnull(res, row, 5);
	return col_int(res, row, 3, &grant_s) && ck_mul(grant_s, 1000000, &a->grant_us) &&
	       col_int(res, row, 4, &a->max_concurrent) && col_int(res, row, 6, &a->created_us) &&
	       (!a->has_cap || meter_money_parse(PQgetvalue(res, row, 5), false, &a->cap) == 0);
}

cJSON *account_json(const struct account *a)
{
	char hours[METER_DECIMAL_BUF], cap[METER_MONEY_BUF], when[METER_TIME_BUF];
	cJSON *o = cJSON_CreateObject();
	fmt_hours(a->grant_us, hours, sizeof hours);
	meter_time_format(a->created_us, when, sizeof when);
	if (a->has_cap)
		meter_money_format_exact(a->cap, cap, sizeof cap);
	if (o && cJSON_AddStringToObject(o, "id", a->id) &&
	    cJSON_AddStringToObject(o, "name", a->name) &&
	    cJSON_AddStringToObject(o, "plan", a->plan) &&
	    cJSON_AddStringToObject(o, "trial_grant_hours", hours) &&
	    cJSON_AddNumberToObject(o, "max_concurrent", (double)a->max_concurrent) &&
	    (a->has_cap ? cJSON_AddStringToObject(o, "monthly_spend_cap", cap) != NULL
	                : cJSON_AddNullToObject(o, "monthly_spend_cap") != NULL) &&
	    cJSON_AddStringToObject(o, "created_at", when))
		return o;
	cJSON_Delete(o);
	return NULL;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The state from Q_STATE's answer res (taken: cleared here), s->month_start_us set. */
static bool state_from(struct req *r, PGconn *c, const char *id, PGresult *res,
                       struct account_state *s)
{
	char err[256];
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	bool ok = false;
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the account", res);
		goto out;
	}
	if (PQntuples(res) != 1) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		goto out;
	}
	int64_t before = 0, crossing = METER_TIME_NONE;
	if (!account_from_row(res, 0, &s->a) || !col_int(res, 0, 7, &s->running) ||
	    !col_int(res, 0, 8, &before) ||
	    (!PQgetisnull(res, 0, 10) && !col_int(res, 0, 10, &crossing))) {
		reply_problemf(r, 500, "internal", "Internal error", "account row is malformed");
		goto out;
	}
	if (!plancache_get(c, &plans, &nplans, err, sizeof err)) {
		reply_db_error(r, "could not read price plans", NULL);
		goto out;
	}
	struct plan_sum month_pp[MONTH_PLANS_MAX], cov[MONTH_PLANS_MAX];
	size_t nmonth = 0, ncov = 0;
	meter_i128 month_wall = 0;
	/* The month's sums came along as "plan a b c d e f;plan ..." (at most MONTH_PLANS_MAX
	 * plans of 7 numbers of at most 40 digits) */
	char rows[MONTH_PLANS_MAX * 7 * METER_QTY_BUF];
	if (strlen(PQgetvalue(res, 0, 9)) >= sizeof rows) {
		reply_problemf(r, 500, "internal", "Internal error",
		               "usage of the month has too many price plans");
		goto out;
	}
	snprintf(rows, sizeof rows, "%s", PQgetvalue(res, 0, 9));
	for (char *save = NULL, *row = strtok_r(rows, ";", &save); row;
	     row = strtok_r(NULL, ";", &save)) {
		meter_i128 v[7] = {0};
		int k = 0;
		for (char *s2 = NULL, *w = strtok_r(row, " ", &s2); w && k < 7;
		     w = strtok_r(NULL, " ", &s2))
			if (meter_qty_parse(w, false, &v[k++]) != METER_OK)
				k = 99;
		struct meter_usage u = {.cpu_measured_us = v[1],
		                        .cpu_billed_us = v[2],
		                        .busy_us = v[3],
		                        .idle_us = v[4],
		                        .wall_us = v[5],
		                        .mem_mgib_us = v[6]};
		if (k != 7 || v[0] > INT64_MAX || !ck_add_q(month_wall, u.wall_us, &month_wall) ||
		    !plan_sum_add(month_pp, &nmonth, MONTH_PLANS_MAX, (int64_t)v[0], &u)) {
			reply_problemf(r, 500, "internal", "Internal error",
			               "usage of the month cannot be summed");
			goto out;
		}
	}
	/* before is capped at the grant (Q_STATE); so is what the trial has used. */
	int64_t left = s->a.grant_us > before ? s->a.grant_us - before : 0;
	s->trial_used_us = month_wall >= left ? s->a.grant_us : before + (int64_t)month_wall;
	s->trial_left_us = s->a.grant_us - s->trial_used_us;
	if (left >= month_wall) {
		/* the grant covers all of the month: nothing to pay */
		for (size_t i = 0; i < nmonth; i++)
			cov[ncov++] = month_pp[i];
	} else if (left > 0 &&
	           !month_trial_covered(c, s->a.id, s->month_start_us, 0, s->a.grant_us, crossing,
	                                month_pp, nmonth, cov, &ncov, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		goto out;
	}
	for (size_t i = 0; i < nmonth; i++) {
		const struct meter_plan *plan = NULL;
		struct meter_usage due = month_pp[i].u;
		for (size_t k = 0; k < ncov; k++)
			if (cov[k].plan_id == month_pp[i].plan_id &&
			    meter_usage_sub(&due, &cov[k].u) != METER_OK)
				goto bad;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == month_pp[i].plan_id)
				plan = &plans[k];
		struct meter_cost cost;
		if (plan == NULL || meter_usage_cost(&due, plan, &cost) != METER_OK ||
		    meter_money_add(s->month_cost, cost.total, &s->month_cost) != METER_OK)
			goto bad;
	}
	ok = true;
	goto out;
bad:
	reply_problemf(r, 500, "internal", "Internal error",
	               "the cost of the month cannot be computed");
out:
	free(plans);
	PQclear(res);
	return ok;
}

bool account_state_load(struct req *r, PGconn *c, const char *id, bool lock,
                        struct account_state *s)
{
	char month[24], *params[2] = {(char *)id, month};
	memset(s, 0, sizeof *s);
	s->month_start_us = meter_month_start(now_us());
	snprintf(month, sizeof month, "%lld", (long long)s->month_start_us);
	if (lock) {
		/* The row lock first; the state then in a statement of its own. */
		PGresult *res = q_exec(c, Q_ACCOUNT_LOCK, 1, (const char *const *)params);
		bool locked = PQresultStatus(res) == PGRES_TUPLES_OK;
		if (!locked)
			reply_db_error(r, "could not lock the account", res);
		PQclear(res);
		if (!locked)
			return false;
	}
	return state_from(r, c, id, q_exec(c, Q_STATE, 2, (const char *const *)params), s);
}

/*
 * Q_AUTH and Q_STATE in one pipeline: one round trip, one implicit transaction.
 * The state is read before the key is known good, and thrown away unless it is
 * and the key may see the account. The connection leaves pipeline mode before
 * any answer; one that cannot (lost) is replaced by the pool.
 */
bool account_state_load_keyed(struct req *r, PGconn *c, const char *id, struct account_state *s)
{
	char month[24], *params[2] = {(char *)id, month};
	const char *key[] = {req_key(r)};
	memset(s, 0, sizeof *s);
	s->month_start_us = meter_month_start(now_us());
	snprintf(month, sizeof month, "%lld", (long long)s->month_start_us);
	PGresult *auth = NULL, *state = NULL;
	bool sent = PQenterPipelineMode(c) == 1 && q_send(c, Q_AUTH, 1, key) == 1 &&
	            q_send(c, Q_STATE, 2, (const char *const *)params) == 1 &&
	            PQpipelineSync(c) == 1;
	if (sent) {
		/* auth, NULL, state, NULL, the sync (or what a lost connection gives) */
		auth = PQgetResult(c);
		PQclear(PQgetResult(c));
		state = PQgetResult(c);
		PQclear(PQgetResult(c));
		for (PGresult *x; (x = PQgetResult(c)) != NULL;) {
			bool sync = PQresultStatus(x) == PGRES_PIPELINE_SYNC;
			PQclear(x);
			if (sync)
				break;
		}
	}
	if (PQexitPipelineMode(c) != 1 || !sent) {
		PQclear(auth);
		PQclear(state);
		reply_db_error(r, "could not read the account", NULL);
		return false;
	}
	if (!req_key_checked(r, c, auth) || !req_may_see(r, id)) {
		PQclear(state);
		return false;
	}
	return state_from(r, c, id, state, s);
}

void quota_decide(const struct account_state *s, struct quota_answer *q)
{
	char a[METER_MONEY_BUF], b[METER_MONEY_BUF];
	q->allowed = false;
	q->detail[0] = '\0';
	if (strcmp(s->a.plan, "trial") == 0 && s->trial_left_us <= 0) {
		q->reason = "trial_exhausted";
		snprintf(q->detail, sizeof q->detail,
		         "the free trial of account \"%s\" is used up; add a card to go on",
		         s->a.id);
	} else if (s->a.has_cap && s->month_cost >= s->a.cap) {
		q->reason = "spend_cap_reached";
		meter_money_format_cents(s->month_cost, a, sizeof a);
		meter_money_format_cents(s->a.cap, b, sizeof b);
		snprintf(q->detail, sizeof q->detail,
		         "account \"%s\" has spent $%s this month, its cap is $%s", s->a.id, a, b);
	} else if (s->running >= s->a.max_concurrent) {
		q->reason = "concurrency_limit";
		snprintf(q->detail, sizeof q->detail,
		         "account \"%s\" runs %lld sandboxes, its limit is %lld", s->a.id,
		         (long long)s->running, (long long)s->a.max_concurrent);
	} else {
		q->allowed = true;
		q->reason = "ok";
	}
}

PGresult *sandbox_visible(struct req *r, PGconn *c, const char *id)
{
	const char *params[] = {id};
	PGresult *res = q_exec(c, Q_SANDBOX, 1, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the sandbox", res);
	} else if (PQntuples(res) != 1 ||
	           (!r->admin && strcmp(r->account, PQgetvalue(res, 0, 1)) != 0)) {
		/* another account's sandbox is as unknown as one that does not exist */
		reply_problemf(r, 404, "not-found", "Not found", "sandbox \"%s\" not found", id);
	} else {
		return res;
	}
	PQclear(res);
	return NULL;
}
