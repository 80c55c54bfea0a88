/* An account's usage from the hourly rollups, a page of sandboxes at a time, and its trial
 * balance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/account.h"
#include "api/cursor.h"
#include "api/opening.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/tally.h"
#include "common/db.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"

/* The listings an account keeps at most (each first page of a long list
 * stores one; a day's upkeep deletes the old). */
#define USAGE_LISTINGS_KEPT      100
#define USAGE_LISTINGS_KEPT_TEXT "100"

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
			                    "are kept a day, the newest " USAGE_LISTINGS_KEPT_TEXT
			                    " of an account): start again without one");
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
	if (!ok)
		return false;
	/* and no more than USAGE_LISTINGS_KEPT of them: a client paging many lists at
	 * once starts the oldest again (its cursor says so) */
	char keep[16];
	snprintf(keep, sizeof keep, "%d", USAGE_LISTINGS_KEPT);
	const char *pt[] = {id, keep};
	res = q_exec(w, Q_LISTING_TRIM, 2, pt);
	ok = PQresultStatus(res) == PGRES_COMMAND_OK;
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
	if (!tally_range_read(r, more, 2, v))
		return;
	int64_t limit = v[2].set ? v[2].num : PAGE_DEFAULT;
	struct page pg = {0};
	if (v[3].set && !cursor_listing_read(v[3].text, &pg.listing, &pg.offset)) {
		reply_bad_cursor(r, "not a cursor this API gave: pass next_cursor as it came");
		return;
	}
	/* data_as_of before the figures: every sample that arrived before it is in them. */
	struct req_open op;
	if (!req_open(r, id, NULL, 0, NULL, REQ_OPEN_ACCOUNT | REQ_OPEN_AS_OF | REQ_OPEN_PLANS,
	              &op))
		return;
	PGconn *c = op.c;
	const struct meter_plan *plans = op.plans;
	size_t nplans = op.nplans;
	struct tally *per = NULL, all = {0};
	/* Whole hours: from rounded down, to rounded up. */
	int64_t from = meter_hour_of(v[0].num + 1),
	        to = meter_hour_of(v[1].num) + METER_US_PER_HOUR;
	char fs[24], ts[24], when[METER_TIME_BUF], month[16];
	snprintf(fs, sizeof fs, "%lld", (long long)from);
	snprintf(ts, sizeof ts, "%lld", (long long)to);
	bool one_month = is_month(from, to);
	if (one_month) {
		meter_time_format(from, when, sizeof when);
		snprintf(month, sizeof month, "%.7s-01", when);
	}
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
	bool ok = tally_fill(o, &all, plans, nplans);
	cJSON_AddStringToObject(o, "data_as_of", op.asof);
	cJSON_AddNumberToObject(o, "sandbox_count", (double)pg.count);
	cJSON *arr = cJSON_AddArrayToObject(o, "sandboxes");
	for (int i = 0; ok && i < pg.n; i++) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddItemToArray(arr, s);
		cJSON_AddStringToObject(s, "id", per[i].id);
		ok = tally_fill(s, &per[i], plans, nplans);
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
	req_open_done(&op);
}

void h_trial(struct req *r)
{
	struct req_open op;
	const char *id = r->param[0];
	if (!req_no_query(r) ||
	    !req_open(r, id, NULL, 0, NULL, REQ_OPEN_PRIMARY | REQ_OPEN_STATE, &op))
		return;
	const struct account_state *s = &op.state;
	char g[METER_DECIMAL_BUF], u[METER_DECIMAL_BUF], l[METER_DECIMAL_BUF];
	fmt_hours(s->a.grant_us, g, sizeof g);
	fmt_hours(s->trial_used_us, u, sizeof u);
	fmt_hours(s->trial_left_us, l, sizeof l);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "account_id", id);
	cJSON_AddStringToObject(o, "plan", s->a.plan);
	cJSON_AddStringToObject(o, "grant_hours", g);
	cJSON_AddStringToObject(o, "used_hours", u);
	cJSON_AddStringToObject(o, "remaining_hours", l);
	cJSON_AddNumberToObject(o, "remaining_seconds", (double)(s->trial_left_us / 1000000));
	cJSON_AddBoolToObject(o, "exhausted", s->trial_left_us <= 0);
	/* A trial account whose grant is spent should have its sandboxes stopped. */
	cJSON_AddBoolToObject(o, "stop_running_sandboxes",
	                      s->trial_left_us <= 0 && strcmp(s->a.plan, "trial") == 0 &&
	                              s->running > 0);
	cJSON_AddNumberToObject(o, "running", (double)s->running);
	reply_json(r, 200, o);
	req_open_done(&op);
}
