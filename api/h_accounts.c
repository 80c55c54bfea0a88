/* Accounts, sandboxes and the quota check. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/account.h"
#include "api/auth.h"
#include "api/cursor.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/limits.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

/* Starts of sandboxes may be told late, but not from the future. */
#define FUTURE_SLACK_US INT64_C(300000000)

static cJSON *body_fields(struct req *r, const struct in_field *f, size_t n, struct in_value *v,
                          bool optional)
{
	struct problem p;
	if (optional && r->body_len == 0) {
		for (size_t i = 0; i < n; i++)
			v[i] = (struct in_value){0};
		return cJSON_CreateObject();
	}
	cJSON *o = in_parse_object(r->body, r->body_len, &p);
	if (o && !in_fields(o, f, n, v, &p)) {
		cJSON_Delete(o);
		o = NULL;
	}
	if (o == NULL)
		reply_problem(r, &p);
	return o;
}

static bool begin(struct req *r, PGconn *c)
{
	PGresult *res = PQexec(c, "BEGIN");
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		reply_db_error(r, "could not begin", res);
	PQclear(res);
	return ok;
}

static bool commit(struct req *r, PGconn *c)
{
	PGresult *res = PQexec(c, "COMMIT");
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		reply_db_error(r, "could not commit", res);
	PQclear(res);
	return ok;
}

static void rollback(PGconn *c)
{
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
}

/* ---- accounts ---- */

void h_account_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"name", IN_TEXT, 0, 0, 200, true, NULL},
	        {"plan", IN_ENUM, 0, 0, 0, true, "trial|paid"},
	        {"id", IN_ID, 0, 0, 0, false, NULL},
	        {"monthly_spend_cap", IN_DECIMAL, 9, 0, INT64_C(1000000000000000000), false, NULL},
	};
	struct in_value v[4];
	cJSON *o = body_fields(r, f, 4, v, false);
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
	const char *params[] = {id, v[0].text, v[1].text, v[3].set ? cap : NULL};
	PGresult *res = q_exec(c, Q_ACCOUNT_NEW, 4, params);
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
	struct account_state s;
	const char *id = r->param[0];
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_db(r);
	if (c == NULL || !account_state_load(r, c, id, false, &s))
		return;
	cJSON *o = account_json(&s.a);
	char left[METER_DECIMAL_BUF], cost[METER_MONEY_BUF], exact[METER_MONEY_BUF];
	fmt_hours(s.trial_left_us, left, sizeof left);
	meter_money_format_cents(s.month_cost, cost, sizeof cost);
	meter_money_format_exact(s.month_cost, exact, sizeof exact);
	if (o && cJSON_AddNumberToObject(o, "running", (double)s.running) &&
	    cJSON_AddStringToObject(o, "trial_remaining_hours", left) &&
	    cJSON_AddStringToObject(o, "month_to_date", cost) &&
	    cJSON_AddStringToObject(o, "month_to_date_exact", exact))
		reply_json(r, 200, o);
	else {
		cJSON_Delete(o);
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
	}
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
	};
	struct in_value v[3];
	cJSON *o = body_fields(r, f, 3, v, false);
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
	const char *params[] = {r->param[0], v[0].set || clear_cap ? "t" : "f",
	                        v[0].set ? cap : NULL, v[1].set ? maxc : NULL,
	                        v[2].set ? v[2].text : NULL};
	/* The change and what it makes of the account's limits, in one transaction. */
	if (!begin(r, c))
		return;
	PGresult *res = PQexecParams(
	        c,
	        "UPDATE accounts SET monthly_spend_cap = CASE WHEN $2 THEN $3::numeric "
	        "ELSE monthly_spend_cap END, max_concurrent = coalesce($4::integer, "
	        "max_concurrent), plan = coalesce($5, plan) "
	        "WHERE id = $1 RETURNING id, name, plan, trial_grant_seconds, max_concurrent, "
	        "monthly_spend_cap::text, meter_us(created_at)",
	        5, NULL, params, NULL, NULL, 0);
	struct account a;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not change the account", res);
	else if (PQntuples(res) != 1)
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found",
		               r->param[0]);
	else if (!account_from_row(res, 0, &a))
		reply_problemf(r, 500, "internal", "Internal error", "account row is malformed");
	else if (announce_new_limits(r, c, &a) && commit(r, c))
		reply_json(r, 200, account_json(&a));
	PQclear(res);
	rollback(c);
}

/* ---- sandboxes ---- */

static cJSON *sandbox_json(const PGresult *res, int row)
{
	char v[METER_DECIMAL_BUF], m[METER_DECIMAL_BUF], t[METER_TIME_BUF];
	int64_t x;
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "id", PQgetvalue(res, row, 0));
	cJSON_AddStringToObject(o, "account_id", PQgetvalue(res, row, 1));
	meter_decimal_parse(PQgetvalue(res, row, 2), 3, false, &x);
	meter_decimal_format(x, 3, 0, v, sizeof v);
	meter_decimal_parse(PQgetvalue(res, row, 3), 3, false, &x);
	meter_decimal_format(x, 3, 0, m, sizeof m);
	cJSON_AddStringToObject(o, "vcpus", v);
	cJSON_AddStringToObject(o, "memory_gib", m);
	const char *names[] = {"started_at", "stopped_at", "registered_at"};
	for (int k = 0; k < 3; k++) {
		if (PQgetisnull(res, row, 4 + k) || !col_int(res, row, 4 + k, &x)) {
			cJSON_AddNullToObject(o, names[k]);
			continue;
		}
		meter_time_format(x, t, sizeof t);
		cJSON_AddStringToObject(o, names[k], t);
	}
	cJSON_AddStringToObject(o, "status", PQgetisnull(res, row, 5) ? "running" : "stopped");
	/* who ended it: the platform's stop or the collector's end, whichever came first */
	if (PQgetisnull(res, row, 7))
		cJSON_AddNullToObject(o, "ended_by");
	else
		cJSON_AddStringToObject(o, "ended_by", PQgetvalue(res, row, 7));
	return o;
}

/* The registration that fills the account up announces it (common/limits.h). */
static bool announce_full(struct req *r, PGconn *c, const struct account_state *s,
                          const char *sandbox)
{
	char payload[1024], err[256];
	if (s->running + 1 < s->a.max_concurrent)
		return true;
	snprintf(payload, sizeof payload,
	         "{\"account_id\": \"%s\", \"limit\": \"concurrency_limit\", \"running\": %lld, "
	         "\"max_concurrent\": %lld, \"sandbox_id\": \"%s\"}",
	         s->a.id, (long long)(s->running + 1), (long long)s->a.max_concurrent, sandbox);
	if (limits_notify(c, s->a.id, "concurrency_limit", sandbox, payload, err, sizeof err))
		return true;
	reply_db_error(r, err, NULL);
	return false;
}

static void answer_refusal(struct req *r, const struct quota_answer *q)
{
	reply_problemf(r, 409, q->reason, "Sandbox not allowed", "%s", q->detail);
}

/* The ports a trial account's sandboxes may reach (80 and 443); null: no restriction. */
static void add_egress_ports(cJSON *o, const struct account *a)
{
	if (strcmp(a->plan, "trial") != 0) {
		cJSON_AddNullToObject(o, "egress_ports");
		return;
	}
	cJSON *ports = cJSON_AddArrayToObject(o, "egress_ports");
	cJSON_AddItemToArray(ports, cJSON_CreateNumber(80));
	cJSON_AddItemToArray(ports, cJSON_CreateNumber(443));
}

/*
 * A registration's answer: the sandbox, and under "admission" what the
 * platform enforces from here (running counts this sandbox).
 */
static cJSON *admitted_json(const PGresult *res, const struct account_state *s, bool added)
{
	cJSON *o = sandbox_json(res, 0), *a = cJSON_AddObjectToObject(o, "admission");
	cJSON_AddStringToObject(a, "plan", s->a.plan);
	cJSON_AddNumberToObject(a, "running", (double)(s->running + (added ? 1 : 0)));
	cJSON_AddNumberToObject(a, "max_concurrent", (double)s->a.max_concurrent);
	cJSON_AddNumberToObject(a, "trial_seconds_remaining", (double)(s->trial_left_us / 1000000));
	add_egress_ports(a, &s->a);
	return o;
}

void h_sandbox_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"id", IN_ID, 0, 0, 0, true, NULL},
	        {"account_id", IN_ID, 0, 0, 0, true, NULL},
	        {"vcpus", IN_DECIMAL, 3, 1, 256000, true, NULL},
	        {"memory_gib", IN_DECIMAL, 3, 1, 1024000, true, NULL},
	        {"started_at", IN_TIME, 0, 0, 0, false, NULL},
	        {"admit", IN_BOOL, 0, 0, 0, false, NULL},
	};
	struct in_value v[6];
	struct account_state s;
	struct quota_answer q;
	cJSON *o = body_fields(r, f, 6, v, false);
	if (o == NULL)
		return;
	cJSON_Delete(o);
	int64_t now = clock_now_us(), started = v[4].set ? v[4].num : now;
	if (started > now + FUTURE_SLACK_US) {
		reply_problemf(r, 422, "invalid-field", "Invalid field",
		               "field \"started_at\" is in the future");
		return;
	}
	PGconn *c = req_db(r);
	bool retried = false;
again:
	if (c == NULL || !begin(r, c))
		return;
	/* The account row lock serialises registrations of one account. It is FOR NO KEY
	 * UPDATE: a transaction keying a row to the account (the collector registering a
	 * sandbox it found, the rollup queueing a trial or a notice) holds KEY SHARE on it
	 * until it commits, and registration does not wait for that. */
	if (!account_state_load(r, c, v[1].text, true, &s)) {
		rollback(c);
		return;
	}
	/* The collector may have found it first (its cgroup path named the account) and
	 * registered it from the cgroup's limits: it runs already, so it is not refused;
	 * what the platform ordered replaces those limits, and it is rated anew. */
	char vc[METER_DECIMAL_BUF], mem[METER_DECIMAL_BUF], st[24];
	meter_decimal_format(v[2].num, 3, 0, vc, sizeof vc);
	meter_decimal_format(v[3].num, 3, 0, mem, sizeof mem);
	snprintf(st, sizeof st, "%lld", (long long)started);
	const char *params[] = {v[0].text, v[1].text, vc, mem, st};
	PGresult *a = q_exec(c, Q_SANDBOX_ADOPT, 5, params);
	if (PQresultStatus(a) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not register the sandbox", a);
		PQclear(a);
		rollback(c);
		return;
	}
	if (PQntuples(a) == 1 && v[5].set && v[5].num) {
		/* Admitting (meter-hook): the sandbox has not started, the collector only saw
		 * its cgroup being made, so the limits are decided as if it had not, on the
		 * account's other running sandboxes. They are counted again here, after the
		 * adoption: Q_STATE's count was taken before it, and the collector's
		 * registration may have committed in between (the account lock does not hold
		 * it back), so that count may not hold the row adopted. */
		const char *who[] = {v[1].text, v[0].text};
		PGresult *n = q_exec(c, Q_RUNNING_OTHERS, 2, who);
		struct account_state others = s;
		if (PQresultStatus(n) != PGRES_TUPLES_OK || PQntuples(n) != 1 ||
		    !col_int(n, 0, 0, &others.running)) {
			reply_db_error(r, "could not count the account's running sandboxes", n);
			PQclear(n);
			PQclear(a);
			rollback(c);
			return;
		}
		PQclear(n);
		quota_decide(&others, &q);
		if (!q.allowed) {
			PQclear(a);
			rollback(c);
			answer_refusal(r, &q);
			return;
		}
	}
	if (PQntuples(a) == 1) {
		const char *mark[] = {v[0].text, NULL};
		PGresult *m = q_exec(c, Q_MARK, 2, mark);
		if (PQresultStatus(m) != PGRES_COMMAND_OK)
			reply_db_error(r, "could not queue the sandbox for rating", m);
		else if (commit(r, c))
			reply_json(r, 200, admitted_json(a, &s, false));
		PQclear(m);
		PQclear(a);
		rollback(c);
		return;
	}
	PQclear(a);
	quota_decide(&s, &q);
	if (!q.allowed) {
		rollback(c);
		answer_refusal(r, &q);
		return;
	}
	/* The mark first: the rollup worker, too, takes the queue row before sandboxes. */
	const char *mark[] = {v[0].text, NULL};
	PGresult *m = q_exec(c, Q_MARK, 2, mark);
	if (PQresultStatus(m) != PGRES_COMMAND_OK) {
		reply_db_error(r, "could not queue the sandbox for rating", m);
		PQclear(m);
		rollback(c);
		return;
	}
	PQclear(m);
	PGresult *res = q_exec(c, Q_SANDBOX_NEW, 5, params);
	if (strcmp(db_sqlstate(res), "23505") == 0 && !retried) {
		/* The collector registered it meanwhile (its insert committed while ours
		 * waited on the id): once more, to adopt it. */
		PQclear(res);
		rollback(c);
		retried = true;
		goto again;
	}
	if (strcmp(db_sqlstate(res), "23505") == 0)
		reply_problemf(r, 409, "conflict", "Already exists",
		               "sandbox \"%s\" already exists", v[0].text);
	else if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not register the sandbox", res);
	else if (announce_full(r, c, &s, v[0].text) && commit(r, c))
		reply_json(r, 201, admitted_json(res, &s, true));
	PQclear(res);
	rollback(c);
}

void h_sandbox_get(struct req *r)
{
	PGconn *c = req_db(r);
	PGresult *res = c ? sandbox_visible(r, c, r->param[0]) : NULL;
	if (res)
		reply_json(r, 200, sandbox_json(res, 0));
	PQclear(res);
}

/*
 * GET /v1/accounts/{id}/sandboxes: the account's sandboxes by id (byte order),
 * a page at a time: running or stopped ones (status), those whose life meets
 * [from, to) (either may be left out). A sandbox's id never changes, so the
 * cursor (the last id of the page) is stable whatever happens meanwhile.
 */
void h_sandbox_list(struct req *r)
{
	static const struct in_field f[] = {
	        {"status", IN_ENUM, 0, 0, 0, false, "running|stopped"},
	        {"from", IN_TIME, 0, 0, 0, false, NULL},
	        {"to", IN_TIME, 0, 0, 0, false, NULL},
	        {"limit", IN_DECIMAL, 0, 1, 1000, false, NULL},
	        {"cursor", IN_TEXT, 0, 0, CURSOR_BUF - 1, false, NULL},
	};
	struct in_value v[5];
	struct problem p;
	const char *id = r->param[0];
	char after[160] = "";
	if (!in_query(r->args, r->nargs, f, 5, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	if (v[1].set && v[2].set && v[2].num <= v[1].num) {
		reply_problemf(r, 422, "invalid-range", "Invalid range",
		               "\"to\" must be after \"from\"");
		return;
	}
	if (v[4].set && !cursor_after_read(v[4].text, after, sizeof after)) {
		reply_problemf(r, 422, "invalid-cursor", "Invalid cursor",
		               "not a cursor this API gave: pass next_cursor as it came");
		return;
	}
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_read_db(r);
	if (c == NULL)
		return;
	int64_t limit = v[3].set ? v[3].num : 100;
	char ns[24], fs[24], ts[24];
	snprintf(ns, sizeof ns, "%lld", (long long)(limit + 1));
	snprintf(fs, sizeof fs, "%lld", (long long)v[1].num);
	snprintf(ts, sizeof ts, "%lld", (long long)v[2].num);
	const char *pa[] = {id};
	PGresult *acc = q_exec(c, Q_ACCOUNT, 1, pa), *res = NULL;
	if (PQresultStatus(acc) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the account", acc);
		goto out;
	}
	if (PQntuples(acc) != 1) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		goto out;
	}
	const char *params[] = {id,
	                        after,
	                        ns,
	                        v[0].set ? v[0].text : NULL,
	                        v[1].set ? fs : NULL,
	                        v[2].set ? ts : NULL};
	res = q_exec_planned(c, Q_SANDBOX_LIST, 6, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not list the sandboxes", res);
		goto out;
	}
	int n = PQntuples(res), shown = n > limit ? (int)limit : n;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "account_id", id);
	cJSON *arr = cJSON_AddArrayToObject(o, "sandboxes");
	for (int i = 0; i < shown; i++)
		cJSON_AddItemToArray(arr, sandbox_json(res, i));
	char next[CURSOR_BUF];
	if (n > limit && cursor_after(PQgetvalue(res, shown - 1, 0), next, sizeof next))
		cJSON_AddStringToObject(o, "next_cursor", next);
	else
		cJSON_AddNullToObject(o, "next_cursor");
	reply_json(r, 200, o);
out:
	PQclear(acc);
	PQclear(res);
}

void h_sandbox_stop(struct req *r)
{
	static const struct in_field f[] = {{"stopped_at", IN_TIME, 0, 0, 0, false, NULL}};
	struct in_value v[1];
	cJSON *o = body_fields(r, f, 1, v, true);
	if (o == NULL)
		return;
	cJSON_Delete(o);
	int64_t now = clock_now_us(), stopped = v[0].set ? v[0].num : now;
	if (stopped > now + FUTURE_SLACK_US) {
		reply_problemf(r, 422, "invalid-field", "Invalid field",
		               "field \"stopped_at\" is in the future");
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL || !begin(r, c))
		return;
	char st[24];
	snprintf(st, sizeof st, "%lld", (long long)stopped);
	const char *params[] = {r->param[0], st};
	PGresult *res = q_exec(c, Q_SANDBOX_STOP, 2, params), *g = NULL, *m = NULL;
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not stop the sandbox", res);
		goto out;
	}
	bool moved = PQntuples(res) == 1;
	PQclear(res);
	/* stopped_at: the earlier of this stop and the collector's end (rule 3) */
	res = moved ? q_exec(c, Q_SANDBOX_ENDS, 1, params) : NULL;
	if (moved && PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not stop the sandbox", res);
		goto out;
	}
	g = q_exec(c, Q_SANDBOX, 1, params);
	int64_t started = 0;
	if (PQresultStatus(g) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the sandbox", g);
	} else if (PQntuples(g) != 1) {
		reply_problemf(r, 404, "not-found", "Not found", "sandbox \"%s\" not found",
		               r->param[0]);
	} else if (!moved && !PQgetisnull(g, 0, 4) && col_int(g, 0, 4, &started) &&
	           started > stopped) {
		reply_problemf(r, 422, "invalid-field", "Invalid field",
		               "field \"stopped_at\" is before the sandbox started");
	} else if (!moved) {
		/* A stop at or after one already given changes nothing: the earlier stands. */
		reply_problemf(r, 409, "already-stopped", "Already stopped",
		               "sandbox \"%s\" was already stopped by the platform at that time or "
		               "earlier; the earlier stop stands",
		               r->param[0]);
	} else {
		const char *mark[] = {r->param[0], st};
		m = q_exec(c, Q_MARK, 2, mark);
		if (PQresultStatus(m) != PGRES_COMMAND_OK)
			reply_db_error(r, "could not queue the sandbox for rating", m);
		else if (commit(r, c))
			reply_json(r, 200, sandbox_json(g, 0));
	}
out:
	PQclear(m);
	PQclear(g);
	PQclear(res);
	rollback(c);
}

/* ---- quota ---- */

void h_quota_check(struct req *r)
{
	static const struct in_field f[] = {
	        {"account_id", IN_ID, 0, 0, 0, true, NULL},
	        {"vcpus", IN_DECIMAL, 3, 1, 256000, true, NULL},
	        {"memory_gib", IN_DECIMAL, 3, 1, 1024000, true, NULL},
	};
	struct in_value v[3];
	struct account_state s;
	struct quota_answer q;
	/* The hot path: the key (AUTH_ANY_IN_HANDLER) is looked up with the state, in one
	 * round trip; a malformed body is answered after the key, as on every route. */
	struct problem p;
	cJSON *o = in_parse_object(r->body, r->body_len, &p);
	bool fields = o && in_fields(o, f, 3, v, &p);
	cJSON_Delete(o);
	if (!fields) {
		if (req_authenticate(r))
			reply_problem(r, &p);
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL || !account_state_load_keyed(r, c, v[0].text, &s))
		return;
	quota_decide(&s, &q);
	char cost[METER_MONEY_BUF], exact[METER_MONEY_BUF], cap[METER_MONEY_BUF];
	meter_money_format_cents(s.month_cost, cost, sizeof cost);
	meter_money_format_exact(s.month_cost, exact, sizeof exact);
	cJSON *a = cJSON_CreateObject();
	if (a == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return;
	}
	cJSON_AddBoolToObject(a, "allowed", q.allowed);
	cJSON_AddStringToObject(a, "reason", q.reason);
	if (q.detail[0])
		cJSON_AddStringToObject(a, "detail", q.detail);
	cJSON_AddNumberToObject(a, "running", (double)s.running);
	cJSON_AddNumberToObject(a, "max_concurrent", (double)s.a.max_concurrent);
	cJSON_AddNumberToObject(a, "trial_seconds_remaining", (double)(s.trial_left_us / 1000000));
	add_egress_ports(a, &s.a);
	cJSON_AddStringToObject(a, "plan", s.a.plan);
	cJSON_AddStringToObject(a, "month_to_date", cost);
	cJSON_AddStringToObject(a, "month_to_date_exact", exact);
	if (s.a.has_cap) {
		meter_money_format_exact(s.a.cap, cap, sizeof cap);
		cJSON_AddStringToObject(a, "monthly_spend_cap", cap);
	} else {
		cJSON_AddNullToObject(a, "monthly_spend_cap");
	}
	reply_json(r, 200, a);
}
