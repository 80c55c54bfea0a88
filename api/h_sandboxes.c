/* Sandboxes: registration (the admission), one sandbox, its stop, an account's list, a
 * sandbox's usage hour by hour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/account.h"
#include "api/auth.h"
#include "api/cursor.h"
#include "api/opening.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/tally.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/limits.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

/* Starts of sandboxes may be told late, but not from the future. */
#define FUTURE_SLACK_US INT64_C(300000000)

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
	account_add_egress_ports(a, &s->a);
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
	cJSON *o = req_body_fields(r, f, 6, v, false);
	if (o == NULL)
		return;
	cJSON_Delete(o);
	if (!req_may_see(r, v[1].text)) /* a hook key of another account */
		return;
	int64_t now = clock_now_us(), started = v[4].set ? v[4].num : now;
	if (started > now + FUTURE_SLACK_US) {
		reply_problemf(r, 422, "invalid-field", "Invalid field",
		               "field \"started_at\" is in the future");
		return;
	}
	PGconn *c = req_db(r);
	bool retried = false;
again:
	if (c == NULL || !req_begin(r, c))
		return;
	/* The account row lock serialises registrations of one account. It is FOR NO KEY
	 * UPDATE: a transaction keying a row to the account (the collector registering a
	 * sandbox it found, the rollup queueing a trial or a notice) holds KEY SHARE on it
	 * until it commits, and registration does not wait for that. */
	if (!account_state_load(r, c, v[1].text, true, &s)) {
		req_rollback(c);
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
		req_rollback(c);
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
			req_rollback(c);
			return;
		}
		PQclear(n);
		quota_decide(&others, &q);
		if (!q.allowed) {
			PQclear(a);
			req_rollback(c);
			answer_refusal(r, &q);
			return;
		}
	}
	if (PQntuples(a) == 1) {
		const char *mark[] = {v[0].text, NULL};
		PGresult *m = q_exec(c, Q_MARK, 2, mark);
		if (PQresultStatus(m) != PGRES_COMMAND_OK)
			reply_db_error(r, "could not queue the sandbox for rating", m);
		else if (req_commit(r, c))
			reply_json(r, 200, admitted_json(a, &s, false));
		PQclear(m);
		PQclear(a);
		req_rollback(c);
		return;
	}
	PQclear(a);
	quota_decide(&s, &q);
	if (!q.allowed) {
		req_rollback(c);
		answer_refusal(r, &q);
		return;
	}
	/* The mark first: the rollup worker, too, takes the queue row before sandboxes. */
	const char *mark[] = {v[0].text, NULL};
	PGresult *m = q_exec(c, Q_MARK, 2, mark);
	if (PQresultStatus(m) != PGRES_COMMAND_OK) {
		reply_db_error(r, "could not queue the sandbox for rating", m);
		PQclear(m);
		req_rollback(c);
		return;
	}
	PQclear(m);
	PGresult *res = q_exec(c, Q_SANDBOX_NEW, 5, params);
	if (strcmp(db_sqlstate(res), "23505") == 0 && !retried) {
		/* The collector registered it meanwhile (its insert committed while ours
		 * waited on the id): once more, to adopt it. */
		PQclear(res);
		req_rollback(c);
		retried = true;
		goto again;
	}
	if (strcmp(db_sqlstate(res), "23505") == 0)
		reply_problemf(r, 409, "conflict", "Already exists",
		               "sandbox \"%s\" already exists", v[0].text);
	else if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not register the sandbox", res);
	else if (announce_full(r, c, &s, v[0].text) && req_commit(r, c))
		reply_json(r, 201, admitted_json(res, &s, true));
	PQclear(res);
	req_rollback(c);
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
	struct req_open op;
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
	if (!req_open(r, id, NULL, 0, NULL, REQ_OPEN_ACCOUNT, &op))
		return;
	PGconn *c = op.c;
	int64_t limit = v[3].set ? v[3].num : 100;
	char ns[24], fs[24], ts[24];
	snprintf(ns, sizeof ns, "%lld", (long long)(limit + 1));
	snprintf(fs, sizeof fs, "%lld", (long long)v[1].num);
	snprintf(ts, sizeof ts, "%lld", (long long)v[2].num);
	const char *params[] = {id,
	                        after,
	                        ns,
	                        v[0].set ? v[0].text : NULL,
	                        v[1].set ? fs : NULL,
	                        v[2].set ? ts : NULL};
	PGresult *res = q_exec_planned(c, Q_SANDBOX_LIST, 6, params);
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
	PQclear(res);
	req_open_done(&op);
}

void h_sandbox_stop(struct req *r)
{
	static const struct in_field f[] = {{"stopped_at", IN_TIME, 0, 0, 0, false, NULL}};
	struct in_value v[1];
	cJSON *o = req_body_fields(r, f, 1, v, true);
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
	if (c == NULL)
		return;
	if (r->hook && r->account[0]) { /* a hook key stops its account's sandboxes alone */
		PGresult *seen = sandbox_visible(r, c, r->param[0]);
		if (seen == NULL)
			return;
		PQclear(seen);
	}
	if (!req_begin(r, c))
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
		else if (req_commit(r, c))
			reply_json(r, 200, sandbox_json(g, 0));
	}
out:
	PQclear(m);
	PQclear(g);
	PQclear(res);
	req_rollback(c);
}

void h_sandbox_usage(struct req *r)
{
	struct in_value v[2];
	const char *id = r->param[0];
	if (!tally_range_read(r, NULL, 0, v))
		return;
	PGconn *c = req_read_db(r);
	if (c == NULL)
		return;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	PGresult *sb = NULL, *res = NULL, *peak = NULL;
	char asof[METER_TIME_BUF], when[METER_TIME_BUF], fs[24], ts[24];
	if ((sb = sandbox_visible(r, c, id)) == NULL)
		goto out;
	const char *account = PQgetvalue(sb, 0, 1);
	int64_t from = meter_hour_of(v[0].num + 1),
	        to = meter_hour_of(v[1].num) + METER_US_PER_HOUR;
	snprintf(fs, sizeof fs, "%lld", (long long)from);
	snprintf(ts, sizeof ts, "%lld", (long long)to);
	if (!data_as_of(r, c, account, asof, sizeof asof) || !load_plans(r, c, &plans, &nplans))
		goto out;
	const char *hp[] = {account, id, fs, ts};
	res = q_exec_planned(c, Q_SANDBOX_HOURS, 4, hp);
	const char *pp[] = {id, fs, ts};
	peak = q_exec(c, Q_SANDBOX_PEAK, 3, pp);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQresultStatus(peak) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the sandbox's usage",
		               PQresultStatus(res) != PGRES_TUPLES_OK ? res : peak);
		goto out;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", id);
	cJSON_AddStringToObject(o, "account_id", account);
	cJSON_AddStringToObject(o, "vcpus", PQgetvalue(sb, 0, 2));
	cJSON_AddStringToObject(o, "memory_gib", PQgetvalue(sb, 0, 3));
	meter_time_format(from, when, sizeof when);
	cJSON_AddStringToObject(o, "from", when);
	meter_time_format(to, when, sizeof when);
	cJSON_AddStringToObject(o, "to", when);
	/* peak memory against the cgroup's limit, from the samples (null when unknown) */
	for (int k = 0; k < 2; k++) {
		const char *name = k ? "memory_limit_bytes" : "memory_peak_bytes";
		if (PQgetisnull(peak, 0, k))
			cJSON_AddNullToObject(o, name);
		else
			cJSON_AddStringToObject(o, name, PQgetvalue(peak, 0, k));
	}
	cJSON *points = cJSON_AddArrayToObject(o, "hours");
	struct tally all = {0};
	bool ok = true;
	for (int i = 0; ok && i < PQntuples(res);) {
		/* one point per hour, the plans of that hour together */
		struct tally t = {0};
		int64_t hour, h;
		ok = col_int(res, i, 0, &hour);
		for (; ok && i < PQntuples(res) && col_int(res, i, 0, &h) && h == hour; i++) {
			struct meter_usage u;
			int64_t plan;
			ok = col_int(res, i, 1, &plan) && db_col_usage(res, i, 2, &u) &&
			     tally_add(&t, plan, &u) && tally_add(&all, plan, &u);
		}
		cJSON *pt = cJSON_CreateObject();
		cJSON_AddItemToArray(points, pt);
		meter_time_format(hour, when, sizeof when);
		cJSON_AddStringToObject(pt, "hour", when);
		ok = ok && tally_fill(pt, &t, plans, nplans);
	}
	ok = ok && tally_fill(o, &all, plans, nplans);
	cJSON_AddStringToObject(o, "data_as_of", asof);
	if (ok) {
		reply_json(r, 200, o);
	} else {
		cJSON_Delete(o);
		reply_problemf(r, 500, "internal", "Internal error", "usage cannot be summed");
	}
out:
	free(plans);
	PQclear(sb);
	PQclear(res);
	PQclear(peak);
}
