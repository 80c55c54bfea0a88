/* Usage from the hourly rollups, and the trial balance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/account.h"
#include "api/auth.h"
#include "api/cursor.h"
#include "api/plancache.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/export.h"
#include "common/log.h"
#include "common/invoicedb.h"
#include "common/ledger.h"
#include "common/plans.h"
#include "reports/estimate.h"
#include "reports/invoice.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"

#define RANGE_MAX_US (INT64_C(400) * 86400 * 1000000) /* a bit over a year */

/* Usage of one sandbox (or of all), kept per plan so cost is computed once per plan. */
struct tally {
	char id[160];
	struct meter_usage total;
	int64_t plan[8];
	struct meter_usage by_plan[8];
	int nplans;
};

static bool tally_add(struct tally *t, int64_t plan, const struct meter_usage *u)
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

static bool fill(cJSON *o, const struct tally *t, const struct meter_plan *plans, size_t n)
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

bool load_plans(struct req *r, PGconn *c, struct meter_plan **plans, size_t *n)
{
	char err[256];
	bool ok = plancache_get(c, plans, n, err, sizeof err);
	if (!ok)
		reply_db_error(r, "could not read price plans", NULL);
	return ok;
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

/*
 * The from and to query parameters of a usage range, then the fields more
 * (nmore of them, at most 6) into v[2...]; false when it has answered.
 */
static bool read_range_with(struct req *r, const struct in_field *more, size_t nmore,
                            struct in_value *v)
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

/* The from and to query parameters of a usage range; false when it has answered. */
static bool read_range(struct req *r, struct in_value v[2])
{
	return read_range_with(r, NULL, 0, v);
}

#define PAGE_DEFAULT 100
#define PAGE_MAX     1000

/* A page of an account's usage: its sandboxes' ids in order, and what comes after. */
struct page {
	char (*ids)[160];
	int n;
	int64_t listing, offset, count; /* listing 0: no listing (the page is everything) */
};

static void reply_bad_cursor(struct req *r, const char *why)
{
	reply_problemf(r, 422, "invalid-cursor", "Invalid cursor", "%s", why);
}

/* Adds the ids of res (column col, from row first) to the page. */
static bool page_take(struct page *pg, const PGresult *res, int first, int col)
{
	int rows = PQntuples(res);
	pg->ids = calloc((size_t)(rows > 0 ? rows : 1), sizeof *pg->ids);
	if (pg->ids == NULL)
		return false;
	for (int i = first; i < rows; i++)
		snprintf(pg->ids[pg->n++], sizeof pg->ids[0], "%s", PQgetvalue(res, i, col));
	return true;
}

/* True when [from, to) is one calendar month. */
static bool is_month(int64_t from, int64_t to)
{
	return from == meter_month_start(from) && to == meter_month_next(from);
}

/* The page's ids as a PostgreSQL array literal (malloc'd), or NULL. */
static char *ids_array(const struct page *pg)
{
	size_t len = 3;
	for (int i = 0; i < pg->n; i++)
		len += 2 * strlen(pg->ids[i]) + 3;
	char *s = malloc(len), *p = s;
	if (s == NULL)
		return NULL;
	*p++ = '{';
	for (int i = 0; i < pg->n; i++) {
		if (i > 0)
			*p++ = ',';
		*p++ = '"';
		for (const char *q = pg->ids[i]; *q; q++) {
			if (*q == '"' || *q == '\\')
				*p++ = '\\';
			*p++ = *q;
		}
		*p++ = '"';
	}
	*p++ = '}';
	*p = '\0';
	return s;
}

/* Orders the listing's sandboxes after its head, when no request has yet (on the primary). */
static bool listing_fill(struct req *r, PGconn *w, const char *id, int64_t from, int64_t to,
                         const struct page *pg)
{
	char ls[24], fs[24], ts[24], when[METER_TIME_BUF], month[16];
	snprintf(ls, sizeof ls, "%lld", (long long)pg->listing);
	snprintf(fs, sizeof fs, "%lld", (long long)from);
	snprintf(ts, sizeof ts, "%lld", (long long)to);
	meter_time_format(from, when, sizeof when);
	snprintf(month, sizeof month, "%.7s-01", when);
	const char *pr[] = {id, fs, ts, ls}, *pm[] = {id, ls, month};
	PGresult *res = is_month(from, to) ? q_exec(w, Q_LISTING_FILL_MONTH, 3, pm)
	                                   : q_exec(w, Q_LISTING_FILL_RANGE, 4, pr);
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		reply_db_error(r, "could not order the listing", res);
	PQclear(res);
	return ok;
}

/*
 * The page of listing at offset (the primary's: a replica may not have it
 * yet), ordering the listing first when this is the first page asked for
 * after its head.
 */
static bool page_of_listing(struct req *r, const char *id, int64_t from, int64_t to, int64_t limit,
                            struct page *pg)
{
	PGconn *c = req_db(r);
	if (c == NULL)
		return false;
	char ls[24], os[24], ns[24];
	snprintf(ls, sizeof ls, "%lld", (long long)pg->listing);
	snprintf(os, sizeof os, "%lld", (long long)pg->offset);
	snprintf(ns, sizeof ns, "%lld", (long long)limit);
	const char *params[] = {id, ls, os, ns};
	for (int round = 0;; round++) {
		PGresult *res = q_exec(c, Q_LISTING_PAGE, 4, params);
		bool ok = false, unordered = false;
		int64_t rf, rt;
		if (PQresultStatus(res) != PGRES_TUPLES_OK) {
			reply_db_error(r, "could not read the listing", res);
		} else if (PQntuples(res) == 0) {
			reply_bad_cursor(r, "the cursor names no listing of this account (listings "
			                    "are kept a day): start again without one");
		} else if (!col_int(res, 0, 1, &rf) || !col_int(res, 0, 2, &rt)) {
			reply_db_error(r, "could not read the listing", NULL);
		} else if (rf != from || rt != to) {
			reply_bad_cursor(r,
			                 "the cursor belongs to another range: give the from and "
			                 "to of its first page");
		} else if (PQgetisnull(res, 0, 3) && round == 0) {
			unordered = true;
		} else if (!col_int(res, 0, 3, &pg->count)) {
			reply_db_error(r, "could not read the listing", NULL);
		} else if (pg->offset > pg->count) {
			reply_bad_cursor(r, "the cursor is past the end of its listing");
		} else if (!page_take(pg, res, 1, 4)) {
			reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		} else {
			ok = true;
		}
		PQclear(res);
		if (!unordered)
			return ok;
		if (!listing_fill(r, c, id, from, to, pg))
			return false;
	}
}

/*
 * The first page: the limit costliest sandboxes of the range (then by id).
 * When there are more, a listing is kept (usage_listings) holding this page's
 * ids; the pages after it follow them in the order the second page's request
 * finds (listing_fill), so each sandbox is listed once.
 */
static bool first_page(struct req *r, PGconn *c, const char *id, const char *fs, const char *ts,
                       const char *month, int64_t limit, struct page *pg)
{
	char ns[24];
	snprintf(ns, sizeof ns, "%lld", (long long)(limit + 1));
	const char *pr[] = {id, fs, ts, ns}, *pm[] = {id, month, ns};
	PGresult *res = month ? q_exec_planned(c, Q_RANK_MONTH, 3, pm)
	                      : q_exec_planned(c, Q_RANK_RANGE, 4, pr);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not rank the sandboxes", res);
		PQclear(res);
		return false;
	}
	int rows = PQntuples(res);
	bool ok = page_take(pg, res, 0, 0);
	if (ok && rows > limit)
		pg->n = (int)limit;
	pg->count = pg->n;
	ok = ok && (rows <= limit || month || col_int(res, 0, 1, &pg->count));
	PQclear(res);
	if (!ok) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return false;
	}
	if (rows <= limit)
		return true;
	if (month) {
		const char *pc[] = {id, month};
		res = q_exec_planned(c, Q_COUNT_MONTH, 2, pc);
		ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		     col_int(res, 0, 0, &pg->count);
		if (!ok)
			reply_db_error(r, "could not count the sandboxes", res);
		PQclear(res);
		if (!ok)
			return false;
	}
	PGconn *w = req_db(r);
	char *head = w ? ids_array(pg) : NULL;
	if (w == NULL || head == NULL) {
		if (w != NULL)
			reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return false;
	}
	const char *pl[] = {id, fs, ts, head};
	res = q_exec(w, Q_LISTING_NEW, 4, pl);
	free(head);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	     col_int(res, 0, 0, &pg->listing);
	if (!ok)
		reply_db_error(r, "could not keep the listing", res);
	PQclear(res);
	return ok;
}

/* Usage of the page's sandboxes in the range, in the page's order, into per (n of them). */
static bool page_usage(struct req *r, PGconn *c, const char *id, const char *fs, const char *ts,
                       const struct page *pg, struct tally *per)
{
	for (int i = 0; i < pg->n; i++)
		snprintf(per[i].id, sizeof per[i].id, "%s", pg->ids[i]);
	if (pg->n == 0)
		return true;
	char *arr = ids_array(pg);
	if (arr == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return false;
	}
	const char *params[] = {id, fs, ts, arr};
	PGresult *res = q_exec_planned(c, Q_USAGE_OF, 4, params);
	free(arr);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
		reply_db_error(r, "could not read usage", res);
	for (int row = 0; ok && row < PQntuples(res); row++) {
		const char *sb = PQgetvalue(res, row, 0);
		int k = 0;
		while (k < pg->n && strcmp(per[k].id, sb) != 0)
			k++;
		struct meter_usage u;
		int64_t plan;
		ok = k < pg->n && col_int(res, row, 1, &plan) && db_col_usage(res, row, 2, &u) &&
		     tally_add(&per[k], plan, &u);
		if (!ok)
			reply_problemf(r, 500, "internal", "Internal error",
			               "usage cannot be summed");
	}
	PQclear(res);
	return ok;
}

/* The account's totals over the range, whole: account_month for a month. */
static bool totals(struct req *r, PGconn *c, const char *id, const char *fs, const char *ts,
                   const char *month, struct tally *all)
{
	const char *pr[] = {id, fs, ts}, *pm[] = {id, month};
	PGresult *res = month ? q_exec(c, Q_USAGE_MONTH_TOTALS, 2, pm)
	                      : q_exec_planned(c, Q_USAGE_TOTALS, 3, pr);
	bool ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
		reply_db_error(r, "could not read usage", res);
	for (int row = 0; ok && row < PQntuples(res); row++) {
		struct meter_usage u;
		int64_t plan;
		ok = col_int(res, row, 0, &plan) && db_col_usage(res, row, 1, &u) &&
		     tally_add(all, plan, &u);
		if (!ok)
			reply_problemf(r, 500, "internal", "Internal error",
			               "usage cannot be summed");
	}
	PQclear(res);
	return ok;
}

/*
 * GET /v1/accounts/{id}/usage: the account's usage over whole hours, its
 * totals whole, its sandboxes a page at a time, costliest first (then by
 * id). A range of one calendar month is ranked from sandbox_month_cost.
 */
void h_usage(struct req *r)
{
	static const struct in_field more[] = {
	        {"limit", IN_DECIMAL, 0, 1, PAGE_MAX, false, NULL},
	        {"cursor", IN_TEXT, 0, 0, CURSOR_BUF - 1, false, NULL},
	};
	struct in_value v[4];
	const char *id = r->param[0];
	if (!read_range_with(r, more, 2, v))
		return;
	int64_t limit = v[2].set ? v[2].num : PAGE_DEFAULT;
	struct page pg = {0};
	if (v[3].set && !cursor_listing_read(v[3].text, &pg.listing, &pg.offset)) {
		reply_bad_cursor(r, "not a cursor this API gave: pass next_cursor as it came");
		return;
	}
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_read_db(r);
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	struct tally *per = NULL, all = {0};
	if (c == NULL)
		return;
	/* Whole hours: from rounded down, to rounded up. */
	int64_t from = meter_hour_of(v[0].num + 1),
	        to = meter_hour_of(v[1].num) + METER_US_PER_HOUR;
	char fs[24], ts[24], asof[METER_TIME_BUF], when[METER_TIME_BUF], month[16];
	snprintf(fs, sizeof fs, "%lld", (long long)from);
	snprintf(ts, sizeof ts, "%lld", (long long)to);
	bool one_month = is_month(from, to);
	if (one_month) {
		meter_time_format(from, when, sizeof when);
		snprintf(month, sizeof month, "%.7s-01", when);
	}
	const char *params[] = {id};
	PGresult *acc = q_exec(c, Q_ACCOUNT, 1, params);
	if (PQresultStatus(acc) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the account", acc);
		goto out;
	}
	if (PQntuples(acc) != 1) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		goto out;
	}
	/* data_as_of first: every sample that arrived before it is in what follows. */
	if (!data_as_of(r, c, id, asof, sizeof asof) || !load_plans(r, c, &plans, &nplans))
		goto out;
	if (!(pg.listing ? page_of_listing(r, id, from, to, limit, &pg)
	                 : first_page(r, c, id, fs, ts, one_month ? month : NULL, limit, &pg)))
		goto out;
	per = calloc((size_t)pg.n + 1, sizeof *per);
	if (per == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		goto out;
	}
	if (!page_usage(r, c, id, fs, ts, &pg, per) ||
	    !totals(r, c, id, fs, ts, one_month ? month : NULL, &all))
		goto out;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "account_id", id);
	meter_time_format(from, when, sizeof when);
	cJSON_AddStringToObject(o, "from", when);
	meter_time_format(to, when, sizeof when);
	cJSON_AddStringToObject(o, "to", when);
	bool ok = fill(o, &all, plans, nplans);
	cJSON_AddStringToObject(o, "data_as_of", asof);
	cJSON_AddNumberToObject(o, "sandbox_count", (double)pg.count);
	cJSON *arr = cJSON_AddArrayToObject(o, "sandboxes");
	for (int i = 0; ok && i < pg.n; i++) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddItemToArray(arr, s);
		cJSON_AddStringToObject(s, "id", per[i].id);
		ok = fill(s, &per[i], plans, nplans);
	}
	if (pg.listing && pg.offset + limit < pg.count) {
		char next[CURSOR_BUF];
		cursor_listing(pg.listing, pg.offset + limit, next, sizeof next);
		cJSON_AddStringToObject(o, "next_cursor", next);
	} else {
		cJSON_AddNullToObject(o, "next_cursor");
	}
	if (ok) {
		reply_json(r, 200, o);
	} else {
		cJSON_Delete(o);
		reply_problemf(r, 500, "internal", "Internal error", "usage cannot be summed");
	}
out:
	free(pg.ids);
	free(per);
	free(plans);
	PQclear(acc);
}

void h_trial(struct req *r)
{
	struct account_state s;
	const char *id = r->param[0];
	if (r->nargs) {
		reply_problemf(r, 400, "unknown-parameter", "Unknown query parameter",
		               "this request takes no query parameters");
		return;
	}
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_db(r);
	if (c == NULL || !account_state_load(r, c, id, false, &s))
		return;
	char g[METER_DECIMAL_BUF], u[METER_DECIMAL_BUF], l[METER_DECIMAL_BUF];
	fmt_hours(s.a.grant_us, g, sizeof g);
	fmt_hours(s.trial_used_us, u, sizeof u);
	fmt_hours(s.trial_left_us, l, sizeof l);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "account_id", id);
	cJSON_AddStringToObject(o, "plan", s.a.plan);
	cJSON_AddStringToObject(o, "grant_hours", g);
	cJSON_AddStringToObject(o, "used_hours", u);
	cJSON_AddStringToObject(o, "remaining_hours", l);
	cJSON_AddNumberToObject(o, "remaining_seconds", (double)(s.trial_left_us / 1000000));
	cJSON_AddBoolToObject(o, "exhausted", s.trial_left_us <= 0);
	/* A trial account whose grant is spent should have its sandboxes stopped. */
	cJSON_AddBoolToObject(o, "stop_running_sandboxes",
	                      s.trial_left_us <= 0 && strcmp(s.a.plan, "trial") == 0 &&
	                              s.running > 0);
	cJSON_AddNumberToObject(o, "running", (double)s.running);
	reply_json(r, 200, o);
}

/* ---- invoices ---- */

void h_invoice(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, false, "json|csv|html"}};
	static const struct in_field mf[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL}};
	struct in_value v[1], mv[1];
	struct problem p;
	const char *id = r->param[0];
	const struct in_arg month_arg = {"month", r->param[1]};
	if (!in_query(&month_arg, 1, mf, 1, mv, &p) || !in_query(r->args, r->nargs, f, 1, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	if (!req_may_see(r, id))
		return;
	/* A draft may come from the replica; a month due to be final is read (and made
	 * final, the first time) on the primary. */
	int64_t now = clock_now_us();
	bool draft = meter_month_next(mv[0].num) + server_invoice_grace(r->srv) > now;
	PGconn *c = draft ? req_read_db(r) : req_db(r);
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	struct invoice_doc doc = {0};
	char err[256], asof[METER_TIME_BUF];
	if (c == NULL || !data_as_of(r, c, id, asof, sizeof asof) ||
	    !load_plans(r, c, &plans, &nplans))
		goto out;
	if (!invoice_get(c, id, mv[0].num, now, server_invoice_grace(r->srv), plans, nplans, &doc,
	                 err, sizeof err)) {
		reply_db_error(r, err, NULL);
		goto out;
	}
	if (!doc.found) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		goto out;
	}
	if (v[0].set && strcmp(v[0].text, "csv") == 0) {
		reply_text(r, 200, "text/csv; charset=utf-8", doc.csv, strlen(doc.csv));
	} else if (v[0].set && strcmp(v[0].text, "html") == 0) {
		if (doc.html)
			reply_text(r, 200, "text/html; charset=utf-8", doc.html, strlen(doc.html));
		else
			reply_problemf(
			        r, 404, "not-found", "Not found",
			        "this invoice was made final before pages were kept: ask for "
			        "json or csv");
	} else if (doc.final) {
		reply_text(r, 200, "application/json", doc.json, strlen(doc.json)); /* as stored */
	} else {
		/* A draft says how fresh its figures are. */
		cJSON *o = cJSON_Parse(doc.json);
		if (o)
			cJSON_AddStringToObject(o, "data_as_of", asof);
		reply_json(r, 200, o);
	}
out:
	invoice_doc_free(&doc);
	free(plans);
}

/* ---- forecast ---- */

#define DAY_US     (INT64_C(86400) * 1000000)
#define BASIS_DAYS 7

static void put_money(cJSON *o, const char *name, meter_money m)
{
	char a[METER_MONEY_BUF], e[METER_MONEY_BUF], n[64];
	meter_money_format_cents(m, a, sizeof a);
	meter_money_format_exact(m, e, sizeof e);
	snprintf(n, sizeof n, "%s_exact", name);
	cJSON_AddStringToObject(o, name, a);
	cJSON_AddStringToObject(o, n, e);
}

/*
 * GET /v1/accounts/{id}/forecast?month=YYYY-MM[&at=TIME]: the month to date
 * (its invoice lines so far) and where it is heading: the run rate of the
 * last 7 full days (UTC) over the time left in the month, with a low and a
 * high bound from the quietest and the busiest of those days. The run rate is
 * at list prices (a trial grant still left is not taken off). "at" (default
 * now) asks as if it were that time.
 */
bool forecast_compute(struct req *r, PGconn *c, const char *id, int64_t month, int64_t at,
                      bool asked, const struct meter_plan *plans, size_t nplans,
                      struct forecast *out)
{
	char err[256], from[24], to[24];
	PGresult *res = NULL;
	int64_t end = meter_month_next(month);
	struct ledger *l = malloc(sizeof *l);
	if (l == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return false;
	}
	bool found = false;
	if (!ledger_month(c, id, month, asked && at < clock_now_us() ? at : 0, plans, nplans, l,
	                  err, sizeof err)) {
		free(l);
		reply_db_error(r, err, NULL);
		return false;
	}
	found = l->found;
	meter_money to_date = l->inv.total;
	free(l);
	if (!found) {
		reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found", id);
		return false;
	}
	/* The last BASIS_DAYS full days before at, day by day. */
	int64_t today = at - ((at % DAY_US) + DAY_US) % DAY_US;
	snprintf(from, sizeof from, "%lld", (long long)(today - BASIS_DAYS * DAY_US));
	snprintf(to, sizeof to, "%lld", (long long)today);
	const char *params[] = {id, from, to};
	res = q_exec(c, Q_DAILY, 3, params);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read daily usage", res);
		PQclear(res);
		return false;
	}
	meter_money day_cost[BASIS_DAYS] = {0}, sum = 0, lo, hi;
	for (int i = 0; i < PQntuples(res); i++) {
		int64_t d, plan;
		struct meter_usage u;
		struct meter_cost cost;
		const struct meter_plan *pl = NULL;
		if (!col_int(res, i, 0, &d) || !col_int(res, i, 1, &plan) ||
		    !db_col_usage(res, i, 2, &u))
			goto bad;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == plan)
				pl = &plans[k];
		int64_t k = (d - (today - BASIS_DAYS * DAY_US)) / DAY_US;
		if (pl == NULL || k < 0 || k >= BASIS_DAYS || meter_usage_cost(&u, pl, &cost) ||
		    meter_money_add(day_cost[k], cost.total, &day_cost[k]))
			goto bad;
	}
	PQclear(res);
	res = NULL;
	lo = hi = day_cost[0];
	for (int k = 0; k < BASIS_DAYS; k++) {
		if (meter_money_add(sum, day_cost[k], &sum))
			goto bad;
		lo = day_cost[k] < lo ? day_cost[k] : lo;
		hi = day_cost[k] > hi ? day_cost[k] : hi;
	}
	/* The time left in the month: none for a month past, all of a month to come. */
	int64_t left = at >= end ? 0 : end - (at > month ? at : month);
	meter_money rest, rest_lo, rest_hi;
	out->month_to_date = to_date;
	if (meter_money_of(left, sum, BASIS_DAYS * DAY_US, &rest) ||
	    meter_money_of(left, lo, DAY_US, &rest_lo) ||
	    meter_money_of(left, hi, DAY_US, &rest_hi) ||
	    meter_money_of(sum, 1, BASIS_DAYS, &out->per_day) ||
	    meter_money_add(to_date, rest, &out->projected) ||
	    meter_money_add(to_date, rest_lo, &out->low) ||
	    meter_money_add(to_date, rest_hi, &out->high))
		goto bad;
	return true;
bad:
	PQclear(res);
	reply_problemf(r, 500, "internal", "Internal error", "the forecast cannot be computed");
	return false;
}

void h_forecast(struct req *r)
{
	static const struct in_field f[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL},
	                                    {"at", IN_TIME, 0, 0, 0, false, NULL}};
	struct in_value v[2];
	struct problem p;
	const char *id = r->param[0];
	if (!in_query(r->args, r->nargs, f, 2, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_read_db(r);
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	char asof[METER_TIME_BUF], m[16], when[METER_TIME_BUF];
	struct forecast fc;
	int64_t at = v[1].set ? v[1].num : clock_now_us();
	if (c == NULL || !data_as_of(r, c, id, asof, sizeof asof) ||
	    !load_plans(r, c, &plans, &nplans) ||
	    !forecast_compute(r, c, id, v[0].num, at, v[1].set, plans, nplans, &fc)) {
		free(plans);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	report_month(v[0].num, m, sizeof m);
	cJSON_AddStringToObject(o, "account_id", id);
	cJSON_AddStringToObject(o, "month", m);
	put_money(o, "month_to_date", fc.month_to_date);
	put_money(o, "projected_total", fc.projected);
	put_money(o, "projected_low", fc.low);
	put_money(o, "projected_high", fc.high);
	put_money(o, "run_rate_per_day", fc.per_day);
	cJSON_AddNumberToObject(o, "basis_days", BASIS_DAYS);
	meter_time_format(at, when, sizeof when);
	cJSON_AddStringToObject(o, "at", when);
	cJSON_AddStringToObject(o, "data_as_of", asof);
	/* the prices behind it: the plan in force at "at", and the one scheduled next */
	const struct meter_plan *in = meter_plan_at(plans, nplans, at),
	                        *next = meter_plan_next(plans, nplans, at);
	cJSON_AddItemToObject(o, "plan", in ? report_plan_json(in) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "next_plan", next ? report_plan_json(next) : cJSON_CreateNull());
	reply_json(r, 200, o);
	free(plans);
}

/* ---- one sandbox, hour by hour ---- */

void h_sandbox_usage(struct req *r)
{
	struct in_value v[2];
	const char *id = r->param[0];
	if (!read_range(r, v))
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
		ok = ok && fill(pt, &t, plans, nplans);
	}
	ok = ok && fill(o, &all, plans, nplans);
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

/* ---- exports ---- */

/*
 * GET /v1/accounts/{id}/exports/{YYYY-MM}?format=focus|usage, and the same for
 * the dashboard at /dashboard/exports/{YYYY-MM} (an admin adds ?account=ID):
 * CSV files for finance tools (common/export.h), as downloads.
 */
/* An export being sent (common/export.h), a piece at a time. */
struct export_answer {
	struct req *r;
	struct export *e;
};

static ssize_t export_piece(void *cls, char *buf, size_t max)
{
	struct export_answer *a = cls;
	char err[256];
	ssize_t n = export_read(a->e, buf, max, err, sizeof err);
	if (n < 0)
		log_warn("%s %s: the export stopped: %s", a->r->method, a->r->path, err);
	return n;
}

static void export_done(void *cls)
{
	struct export_answer *a = cls;
	export_close(a->e);
	free(a);
}

static void export_answer(struct req *r, const char *id, const char *month_text, const char *format)
{
	static const struct in_field mf[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL}};
	struct in_value mv[1];
	struct problem p;
	const struct in_arg month_arg = {"month", month_text};
	if (!in_query(&month_arg, 1, mf, 1, mv, &p)) {
		reply_problem(r, &p);
		return;
	}
	if (!req_may_see(r, id))
		return;
	PGconn *c = req_read_db(r);
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	char err[256];
	if (c == NULL || !load_plans(r, c, &plans, &nplans))
		return;
	const char *params[] = {id};
	PGresult *acc = q_exec(c, Q_ACCOUNT, 1, params);
	if (PQresultStatus(acc) != PGRES_TUPLES_OK || PQntuples(acc) != 1) {
		if (PQresultStatus(acc) != PGRES_TUPLES_OK)
			reply_db_error(r, "could not read the account", acc);
		else
			reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found",
			               id);
		PQclear(acc);
		free(plans);
		return;
	}
	PQclear(acc);
	bool focus = strcmp(format, "focus") == 0;
	struct export_answer *a = calloc(1, sizeof *a);
	if (a != NULL) {
		a->r = r;
		a->e = export_open(c, id, mv[0].num, focus, plans, nplans, err, sizeof err);
	}
	free(plans);
	if (a == NULL || a->e == NULL) {
		free(a);
		reply_db_error(r, a ? err : "the export cannot be made: out of memory", NULL);
		return;
	}
	reply_stream(r, 200, "text/csv; charset=utf-8", export_piece, a, export_done);
}

void h_export(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, true, "focus|usage"}};
	struct in_value v[1];
	struct problem p;
	if (!in_query(r->args, r->nargs, f, 1, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	export_answer(r, r->param[0], r->param[1], v[0].text);
}

void h_dashboard_export(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, true, "focus|usage"},
	                                    {"account", IN_ID, 0, 0, 0, false, NULL}};
	struct in_value v[2];
	struct problem p;
	if (!in_query(r->args, r->nargs, f, 2, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	export_answer(r, v[1].set ? v[1].text : r->account, r->param[0], v[0].text);
}
