#include "api/account.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/auth.h"
#include "api/plancache.h"
#include "api/reply.h"
#include "common/clock.h"
#include "common/ledgerdb.h"
#include "api/queries.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "meter/quota.h"

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
	a->collector_registration = strcmp(PQgetvalue(res, row, 7), "t") == 0;
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
	    cJSON_AddStringToObject(o, "created_at", when) &&
	    cJSON_AddBoolToObject(o, "collector_registration", a->collector_registration))
		return o;
	cJSON_Delete(o);
	return NULL;
}

bool account_exists(struct req *r, PGconn *c, const char *id)
{
	const char *params[] = {id};
	PGresult *res = q_exec(c, Q_ACCOUNT, 1, params);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not read the account", res);
	else if (!ok)
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
	PQclear(res);
	return ok;
}

void account_add_egress_ports(cJSON *o, const struct account *a)
{
	if (strcmp(a->plan, "trial") != 0) {
		cJSON_AddNullToObject(o, "egress_ports");
		return;
	}
	cJSON *ports = cJSON_AddArrayToObject(o, "egress_ports");
	cJSON_AddItemToArray(ports, cJSON_CreateNumber(80));
	cJSON_AddItemToArray(ports, cJSON_CreateNumber(443));
}

/* The state from Q_STATE's answer res (taken: cleared here), s->month_start_us set. The
 * month to date is the ledger's (common/ledgerdb.h): as it keeps it for this month, or,
 * when it keeps none yet (a month just begun, an account never rated), computed. */
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
	bool kept = !PQgetisnull(res, 0, 10);
	if (!account_from_row(res, 0, &s->a) || !col_int(res, 0, 8, &s->running) ||
	    !col_int(res, 0, 9, &s->trial_used_us) ||
	    (kept && meter_money_parse(PQgetvalue(res, 0, 10), true, &s->month_cost) != METER_OK)) {
		reply_problemf(r, 500, "internal", "Internal error", "account row is malformed");
		goto out;
	}
	s->trial_left_us = s->a.grant_us - s->trial_used_us;
	if (kept) {
		ok = true;
		goto out;
	}
	struct ledger *l = malloc(sizeof *l);
	if (l == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		goto out;
	}
	if (!plancache_get(c, &plans, &nplans, err, sizeof err))
		reply_db_error(r, "could not read price plans", NULL);
	else if (!ledger_month(c, id, s->month_start_us, 0, plans, nplans, l, err, sizeof err))
		reply_db_error(r, err, NULL);
	else
		ok = true;
	s->month_cost = l->inv.total;
	free(l);
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
	s->month_start_us = meter_month_start(clock_now_us());
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
	char month[24], *params[3] = {(char *)id, month, (char *)req_key(r)};
	const char *key[] = {req_key(r)};
	memset(s, 0, sizeof *s);
	s->month_start_us = meter_month_start(clock_now_us());
	snprintf(month, sizeof month, "%lld", (long long)s->month_start_us);
	PGresult *auth = NULL, *state = NULL;
	bool sent = PQenterPipelineMode(c) == 1 && q_send(c, Q_AUTH, 1, key) == 1 &&
	            q_send(c, Q_STATE_KEYED, 3, (const char *const *)params) == 1 &&
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
	struct meter_quota_state qs = {.trial_plan = strcmp(s->a.plan, "trial") == 0,
	                               .grant_us = s->a.grant_us,
	                               .trial_used_us = s->trial_used_us,
	                               .has_cap = s->a.has_cap,
	                               .cap = s->a.cap,
	                               .month_to_date = s->month_cost,
	                               .running = s->running,
	                               .max_concurrent = s->a.max_concurrent};
	enum meter_quota_reason why = meter_quota_decide(&qs);
	q->allowed = why == METER_QUOTA_OK;
	q->reason = meter_quota_reason_name(why);
	q->detail[0] = '\0';
	switch (why) {
	case METER_QUOTA_TRIAL_EXHAUSTED:
		snprintf(q->detail, sizeof q->detail,
		         "the free trial of account \"%s\" is used up; add a card to go on",
		         s->a.id);
		break;
	case METER_QUOTA_SPEND_CAP_REACHED:
		meter_money_format_exact(s->month_cost, a, sizeof a);
		meter_money_format_exact(s->a.cap, b, sizeof b);
		snprintf(q->detail, sizeof q->detail,
		         "account \"%s\" has spent $%s this month, its cap is $%s", s->a.id, a, b);
		break;
	case METER_QUOTA_CONCURRENCY_LIMIT:
		snprintf(q->detail, sizeof q->detail,
		         "account \"%s\" runs %lld sandboxes, its limit is %lld", s->a.id,
		         (long long)s->running, (long long)s->a.max_concurrent);
		break;
	case METER_QUOTA_OK:
		break;
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

bool data_as_of(struct req *r, PGconn *c, const char *id, char *out, size_t len)
{
	const char *params[] = {id};
	/* Planned for its account: a generic plan (after five runs on a connection) joined
	 * the account's whole list of sandboxes, 150 ms for the largest account of
	 * bench_fleet's month, against 0.1 ms. */
	PGresult *res = q_exec_planned(c, Q_DATA_AS_OF, 1, params);
	int64_t t;
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK && col_int(res, 0, 0, &t);
	if (ok)
		meter_time_format(t, out, len);
	else
		reply_db_error(r, "could not read how fresh the figures are", res);
	PQclear(res);
	return ok;
}

bool load_plans(struct req *r, PGconn *c, struct meter_plan **plans, size_t *n)
{
	char err[256];
	bool ok = plancache_get(c, plans, n, err, sizeof err);
	if (!ok)
		reply_db_error(r, "could not read price plans", NULL);
	return ok;
}
