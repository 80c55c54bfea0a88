/* Accounts: create one, read where it stands, change its limits or plan. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api/account.h"
#include "api/opening.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/limits.h"
#include "meter/decimal.h"

void h_account_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"name", IN_TEXT, 0, 0, 200, true, NULL},
	        {"plan", IN_ENUM, 0, 0, 0, true, "trial|paid"},
	        {"id", IN_ID, 0, 0, 0, false, NULL},
	        {"monthly_spend_cap", IN_DECIMAL, 9, 0, INT64_C(1000000000000000000), false, NULL},
	        {"collector_registration", IN_BOOL, 0, 0, 0, false, NULL},
	};
	struct in_value v[5];
	cJSON *o = req_body_fields(r, f, 5, v, false);
	if (o == NULL)
		return;
	cJSON_Delete(o);
	char id[256], cap[METER_MONEY_BUF];
	if (v[2].set) {
		snprintf(id, sizeof id, "%s", v[2].text);
	} else {
		unsigned char raw[8];
		if (getrandom(raw, sizeof raw, 0) != sizeof raw) {
			reply_problemf(r, 500, "internal", "Internal error", "no random bytes: %s",
			               strerror(errno));
			return;
		}
		snprintf(id, sizeof id, "acct_%02x%02x%02x%02x%02x%02x%02x%02x", raw[0], raw[1],
		         raw[2], raw[3], raw[4], raw[5], raw[6], raw[7]);
	}
	if (v[3].set)
		meter_decimal_format(v[3].num, 9, 2, cap, sizeof cap);
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	const char *params[] = {id, v[0].text, v[1].text, v[3].set ? cap : NULL,
	                        v[4].set ? (v[4].num ? "t" : "f") : NULL};
	PGresult *res = q_exec(c, Q_ACCOUNT_NEW, 5, params);
	struct account a;
	if (strcmp(db_sqlstate(res), "23505") == 0)
		reply_problemf(r, 409, "conflict", "Already exists",
		               "account \"%s\" already exists", id);
	else if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not create the account", res);
	else if (!account_from_row(res, 0, &a))
		reply_problemf(r, 500, "internal", "Internal error", "account row is malformed");
	else
		reply_json(r, 201, account_json(&a));
	PQclear(res);
}

void h_account_get(struct req *r)
{
	struct req_open op;
	const char *id = r->param[0];
	if (!req_open(r, id, NULL, 0, NULL, REQ_OPEN_PRIMARY | REQ_OPEN_STATE, &op))
		return;
	const struct account_state *s = &op.state;
	cJSON *o = account_json(&s->a);
	char left[METER_DECIMAL_BUF], cost[METER_MONEY_BUF], exact[METER_MONEY_BUF];
	fmt_hours(s->trial_left_us, left, sizeof left);
	meter_money_format_cents(s->month_cost, cost, sizeof cost);
	meter_money_format_exact(s->month_cost, exact, sizeof exact);
	if (o && cJSON_AddNumberToObject(o, "running", (double)s->running) &&
	    cJSON_AddStringToObject(o, "trial_remaining_hours", left) &&
	    cJSON_AddStringToObject(o, "month_to_date", cost) &&
	    cJSON_AddStringToObject(o, "month_to_date_exact", exact))
		reply_json(r, 200, o);
	else {
		cJSON_Delete(o);
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
	}
	req_open_done(&op);
}

/*
 * A limit lowered to where the account already stands is a crossing too: the
 * spend cap (common/limits.h, once a month) and the concurrency limit (once
 * per change that reached it).
 */
static bool announce_new_limits(struct req *r, PGconn *c, const struct account *a)
{
	char err[256], payload[512], period[40];
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	int64_t now = clock_now_us();
	if (!load_plans(r, c, &plans, &nplans))
		return false;
	bool ok = limits_check_usage(c, a->id, now, plans, nplans, err, sizeof err);
	free(plans);
	const char *p[] = {a->id};
	PGresult *res = ok ? q_exec(c, Q_RUNNING_COUNT, 1, p) : NULL;
	int64_t running = 0;
	if (ok && (PQresultStatus(res) != PGRES_TUPLES_OK || !col_int(res, 0, 0, &running))) {
		snprintf(err, sizeof err, "could not count running sandboxes");
		ok = false;
	}
	PQclear(res);
	if (ok && running >= a->max_concurrent) {
		snprintf(payload, sizeof payload,
		         "{\"account_id\": \"%s\", \"limit\": \"concurrency_limit\", "
		         "\"running\": %lld, \"max_concurrent\": %lld}",
		         a->id, (long long)running, (long long)a->max_concurrent);
		snprintf(period, sizeof period, "limit-changed-%lld", (long long)now);
		ok = limits_notify(c, a->id, "concurrency_limit", period, payload, err, sizeof err);
	}
	if (!ok)
		reply_db_error(r, err, NULL);
	return ok;
}

void h_account_patch(struct req *r)
{
	static const struct in_field f[] = {
	        {"monthly_spend_cap", IN_DECIMAL, 9, 0, INT64_C(1000000000000000000), false, NULL},
	        {"max_concurrent", IN_DECIMAL, 0, 1, 1000000, false, NULL},
	        {"plan", IN_ENUM, 0, 0, 0, false, "trial|paid"},
	        {"collector_registration", IN_BOOL, 0, 0, 0, false, NULL},
	};
	struct in_value v[4];
	cJSON *o = req_body_fields(r, f, 4, v, false);
	if (o == NULL)
		return;
	/* "monthly_spend_cap": null takes the cap away; leaving it out keeps it. */
	bool clear_cap = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "monthly_spend_cap"));
	cJSON_Delete(o);
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char cap[METER_MONEY_BUF], maxc[24];
	if (v[0].set)
		meter_decimal_format(v[0].num, 9, 2, cap, sizeof cap);
	snprintf(maxc, sizeof maxc, "%lld", (long long)v[1].num);
	const char *params[] = {r->param[0],
	                        v[0].set || clear_cap ? "t" : "f",
	                        v[0].set ? cap : NULL,
	                        v[1].set ? maxc : NULL,
	                        v[2].set ? v[2].text : NULL,
	                        v[3].set ? (v[3].num ? "t" : "f") : NULL};
	/* The change and what it makes of the account's limits, in one transaction. */
	if (!req_begin(r, c))
		return;
	PGresult *res = q_exec(c, Q_ACCOUNT_PATCH, 6, params);
	struct account a;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not change the account", res);
	else if (PQntuples(res) != 1)
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found",
		               r->param[0]);
	else if (!account_from_row(res, 0, &a))
		reply_problemf(r, 500, "internal", "Internal error", "account row is malformed");
	else if (announce_new_limits(r, c, &a) && req_commit(r, c))
		reply_json(r, 200, account_json(&a));
	PQclear(res);
	req_rollback(c);
}
