/*
 * The cost dashboard: pages for people, drawn by the server.
 *
 * HTML with inline CSS and SVG charts (api/page.h); no script and no file from
 * outside the service. People log in once (api/page_login.c) and keep a
 * session cookie; programs may send a bearer key instead. An account key sees
 * its own account; an admin picks one with ?account=ID.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/account.h"
#include "api/forecast.h"
#include "api/opening.h"
#include "api/page.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/invoicedb.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "reports/invoice_doc.h"

#define DAY_US (INT64_C(86400) * 1000000)

struct day {
	int64_t start;
	meter_money cpu, mem;
	int64_t busy_us, idle_us;
	bool used;
};

/* Stacked bars, one slot per day of the month; only days with usage get a bar. */
static void day_chart(struct page *p, const struct day *d, int ndays, bool money_chart,
                      const char *link)
{
	const int w = 940, h = 170, top = 10, base = 150;
	double max = 0;
	for (int i = 0; i < ndays; i++) {
		double v = money_chart ? (double)(d[i].cpu + d[i].mem)
		                       : (double)(d[i].busy_us + d[i].idle_us);
		max = v > max ? v : max;
	}
	double slot = (double)(w - 40) / ndays, bw = slot * 0.7;
	page_put(p, "<svg viewBox=\"0 0 %d %d\" width=\"100%%\" role=\"img\">", w, h);
	page_put(p, "<line x1=\"40\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d8dee6\"/>", base, w,
	         base);
	for (int i = 0; i < ndays; i++) {
		double x = 40 + i * slot + (slot - bw) / 2;
		if ((i + 1) % 5 == 1)
			page_put(p, "<text x=\"%.1f\" y=\"%d\">%d</text>", x, h - 4, i + 1);
		if (!d[i].used || max <= 0)
			continue;
		double a = money_chart ? (double)d[i].cpu : (double)d[i].busy_us;
		double b = money_chart ? (double)d[i].mem : (double)d[i].idle_us;
		double ha = a / max * (base - top), hb = b / max * (base - top);
		char day[METER_TIME_BUF];
		meter_time_format(d[i].start, day, sizeof day);
		if (link) /* the day's sandboxes */
			page_put(p, "<a href=\"%s&amp;day=%.10s\">", link, day);
		page_put(p, "<g class=\"%s\" data-day=\"%.10s\"><title>%.10s: ",
		         money_chart ? "day" : "bi", day, day);
		if (money_chart) {
			page_money(p, d[i].cpu);
			page_put(p, " CPU, ");
			page_money(p, d[i].mem);
			page_put(p, " memory");
		} else {
			page_put(p, "%.2f h busy, %.2f h idle", (double)d[i].busy_us / 3.6e9,
			         (double)d[i].idle_us / 3.6e9);
		}
		page_put(p,
		         "</title><rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
		         "height=\"%.1f\"/>"
		         "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
		         "height=\"%.1f\"/></g>",
		         money_chart ? "cpu" : "busy", x, base - ha, bw, ha,
		         money_chart ? "mem" : "idle", x, base - ha - hb, bw, hb);
		if (link)
			page_put(p, "</a>");
	}
	page_put(p,
	         "</svg><div class=\"key muted\"><span class=\"%s\" "
	         "style=\"background:%s\"></span>%s"
	         "<span style=\"background:%s\"></span>%s</div>",
	         money_chart ? "cpu" : "busy", money_chart ? "#3b82f6" : "#16a34a",
	         money_chart ? "CPU" : "busy", money_chart ? "#a5b4fc" : "#cbd5e1",
	         money_chart ? "memory" : "idle (at the CPU floor)");
}

static void gauge(struct page *p, const char *label, int64_t part, int64_t whole, const char *text)
{
	int pct = whole > 0 ? (int)((double)part / (double)whole * 100) : 100;
	pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
	page_put(p,
	         "<div class=\"card\"><h2>%s</h2><div class=\"big\">%s</div>"
	         "<div class=\"gauge%s\"><div style=\"width:%d%%\"></div></div>"
	         "<div class=\"muted\">%d%% used</div></div>",
	         label, text, pct >= 80 ? " warn" : "", pct, pct);
}

/* The account the request may see: its own, or the admin's ?account=ID. NULL when answered. */
static const char *which_account(struct req *r, struct page *p)
{
	const char *asked = NULL;
	for (size_t i = 0; i < r->nargs; i++) {
		if (strcmp(r->args[i].name, "month") == 0 || strcmp(r->args[i].name, "sort") == 0 ||
		    strcmp(r->args[i].name, "page") == 0 || strcmp(r->args[i].name, "day") == 0)
			continue; /* the dashboard's own (h_dashboard) */
		if (strcmp(r->args[i].name, "account") != 0) {
			reply_problemf(
			        r, 400, "unknown-parameter", "Unknown query parameter",
			        "the query has a parameter \"%.64s\" that this page does not take",
			        r->args[i].name);
			return NULL;
		}
		asked = r->args[i].value ? r->args[i].value : "";
	}
	if (!r->admin) {
		if (asked && strcmp(asked, r->account) != 0) {
			reply_problemf(r, 404, "not-found", "Not found", "account not found");
			return NULL;
		}
		return r->account;
	}
	if (asked && !id_valid(asked)) {
		reply_problemf(r, 400, "invalid-parameter", "Invalid query parameter",
		               "account must be %s", ID_RULE);
		return NULL;
	}
	if (asked)
		return asked;
	/* an admin without ?account: the accounts to pick from */
	PGconn *c = req_db(r);
	if (c == NULL)
		return NULL;
	PGresult *res = PQexec(c, "SELECT id, name FROM accounts ORDER BY id LIMIT 500");
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not list accounts", res);
		PQclear(res);
		return NULL;
	}
	page_head(p, "Accounts");
	page_put(p, "<h1>Accounts</h1><section><table><tr><th>Account</th><th>Name</th></tr>");
	for (int i = 0; i < PQntuples(res); i++) {
		page_put(p, "<tr><td><a href=\"/dashboard?account=");
		page_esc(p, PQgetvalue(res, i, 0));
		page_put(p, "\">");
		page_esc(p, PQgetvalue(res, i, 0));
		page_put(p, "</a></td><td>");
		page_esc(p, PQgetvalue(res, i, 1));
		page_put(p, "</td></tr>");
	}
	page_put(p, "</table></section>");
	PQclear(res);
	page_finish(r, p, 200);
	return NULL;
}

static void top_bar(struct page *p, const char *title, const char *asof)
{
	page_put(p, "<header><h1>");
	page_esc(p, title);
	page_put(
	        p,
	        "</h1><div><span class=\"asof\">data as of <time id=\"asof\">%s</time></span> "
	        "<form class=\"inline\" method=\"post\" action=\"/logout\"><button>Log out</button>"
	        "</form></div></header>",
	        asof);
}

/*
 * The month the dashboard shows: ?month=YYYY-MM, this month when left out;
 * false when it has answered (a month that is not one, or after this one).
 */
static bool which_month(struct req *r, int64_t now, int64_t *month)
{
	*month = meter_month_start(now);
	for (size_t i = 0; i < r->nargs; i++) {
		const char *v = r->args[i].value ? r->args[i].value : "";
		int y, m;
		char extra;
		if (strcmp(r->args[i].name, "month") != 0)
			continue;
		if (strlen(v) != 7 || sscanf(v, "%4d-%2d%c", &y, &m, &extra) != 2 || v[4] != '-' ||
		    y < 1970 || m < 1 || m > 12) {
			reply_problemf(r, 400, "invalid-parameter", "Invalid query parameter",
			               "month must be YYYY-MM");
			return false;
		}
		int64_t asked = meter_days_from_civil(y, m, 1) * DAY_US;
		if (asked > *month) {
			reply_problemf(r, 400, "invalid-parameter", "Invalid query parameter",
			               "month %s has not begun", v);
			return false;
		}
		*month = asked;
	}
	return true;
}

/* A link to the dashboard of another month (the admin's ?account kept). */
static void month_link(struct page *p, const struct req *r, const char *id, int64_t month,
                       const char *label)
{
	char name[16];
	report_month(month, name, sizeof name);
	page_put(p, "<a class=\"month\" href=\"/dashboard?month=%s", name);
	if (r->admin) {
		page_put(p, "&amp;account=");
		page_esc(p, id);
	}
	page_put(p, "\">%s</a>", label);
}

/* The full list's order: a column of sandbox_month_cost (or of a day's sums) and its heading. */
static const struct {
	const char *name, *column, *heading;
} sorts[] = {
        {"cost", "cost_nano", "Cost"},
        {"cpu_used", "cpu_measured_us", "CPU used"},
        {"cpu_billed", "cpu_billed_us", "CPU billed"},
        {"hours", "wall_us", "Sandbox-hours"},
};
#define NSORTS    (sizeof sorts / sizeof sorts[0])
#define LIST_PAGE 50

/* The full list's sort, page (from 1) and day (0: the whole month); false when answered. */
static bool which_list(struct req *r, int64_t month, size_t *sort, int64_t *page, int64_t *day)
{
	*sort = 0;
	*page = 1;
	*day = 0;
	for (size_t i = 0; i < r->nargs; i++) {
		const char *n = r->args[i].name, *v = r->args[i].value ? r->args[i].value : "";
		bool ok = true;
		if (strcmp(n, "sort") == 0) {
			ok = false;
			for (size_t k = 0; k < NSORTS && !ok; k++)
				if (strcmp(v, sorts[k].name) == 0) {
					*sort = k;
					ok = true;
				}
		} else if (strcmp(n, "page") == 0) {
			ok = meter_decimal_parse(v, 0, false, page) == METER_OK && *page >= 1 &&
			     *page <= 100000;
		} else if (strcmp(n, "day") == 0) {
			char t[40];
			snprintf(t, sizeof t, "%.10sT00:00:00Z", v);
			ok = strlen(v) == 10 && meter_time_parse(t, day) == METER_OK &&
			     meter_month_start(*day) == month;
		}
		if (!ok) {
			reply_problemf(
			        r, 400, "invalid-parameter", "Invalid query parameter",
			        "%s must be %s", n,
			        strcmp(n, "sort") == 0   ? "cost, cpu_used, cpu_billed or hours"
			        : strcmp(n, "page") == 0 ? "a page number from 1"
			                                 : "a day (YYYY-MM-DD) of the month");
			return false;
		}
	}
	return true;
}

/*
 * The account's sandboxes of the month (or of one day of it), a page of
 * LIST_PAGE at a time, in the order of a column, each a link to its page.
 * link: this page's address with its month (and account), for the links.
 */
static bool sandbox_list(struct req *r, struct page *p, PGconn *c, const char *id,
                         const char *mdate, const char *month_name, const char *link, size_t sort,
                         int64_t page, int64_t day)
{
	char sql[1400], off[24], lim[24], from[24], to[24], dayname[METER_TIME_BUF];
	snprintf(off, sizeof off, "%lld", (long long)((page - 1) * LIST_PAGE));
	snprintf(lim, sizeof lim, "%d", LIST_PAGE + 1);
	snprintf(from, sizeof from, "%lld", (long long)day);
	snprintf(to, sizeof to, "%lld", (long long)(day + DAY_US));
	const char *col = sorts[sort].column;
	if (day == 0)
		snprintf(sql, sizeof sql,
		         "SELECT sandbox_id, cost_nano, cpu_measured_us, cpu_billed_us, wall_us "
		         "FROM sandbox_month_cost WHERE account_id = $1 AND month = $2::date "
		         "ORDER BY %s DESC, sandbox_id COLLATE \"C\" LIMIT $3 OFFSET $4",
		         col);
	else /* the hours that end in the day, priced as the month's are */
		snprintf(
		        sql, sizeof sql,
		        "SELECT sandbox_id, sum(meter_part_nano(cb, me, p.cpu_vcpu_hour, "
		        "p.memory_gib_hour)) cost_nano, sum(cm) cpu_measured_us, "
		        "sum(cb) cpu_billed_us, sum(wa) wall_us FROM (SELECT sandbox_id, "
		        "price_plan_id, sum(cpu_measured_us) cm, sum(cpu_billed_us) cb, "
		        "sum(wall_us) wa, sum(memory_mgib_us) me FROM usage_hourly "
		        "WHERE account_id = $1 AND hour >= ('epoch'::timestamptz + $4::bigint * "
		        "interval '1 microsecond') AND hour < ('epoch'::timestamptz + $5::bigint * "
		        "interval '1 microsecond') GROUP BY 1, 2) u "
		        "JOIN price_plans p ON p.id = u.price_plan_id GROUP BY 1 "
		        "ORDER BY %s DESC, sandbox_id COLLATE \"C\" LIMIT $2 OFFSET $3",
		        col);
	const char *pm[] = {id, mdate, lim, off}, *pd[] = {id, lim, off, from, to};
	PGresult *res = day ? PQexecParams(c, sql, 5, NULL, pd, NULL, NULL, 0)
	                    : PQexecParams(c, sql, 4, NULL, pm, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not list the sandboxes", res);
		PQclear(res);
		return false;
	}
	int n = PQntuples(res);
	if (day)
		meter_time_format(day, dayname, sizeof dayname);
	page_put(p, "<section id=\"all\"><h2>Sandboxes of %.10s</h2><table><tr><th>Sandbox</th>",
	         day ? dayname : month_name);
	for (size_t k = 1; k < NSORTS; k++) {
		page_put(p, "<th class=\"num\">");
		if (k == sort) {
			page_put(p, "%s &darr;", sorts[k].heading);
		} else {
			page_put(p, "<a href=\"%s&amp;sort=%s", link, sorts[k].name);
			if (day)
				page_put(p, "&amp;day=%.10s", dayname);
			page_put(p, "#all\">%s</a>", sorts[k].heading);
		}
		page_put(p, "</th>");
	}
	page_put(p, "<th class=\"num\">");
	if (sort == 0) {
		page_put(p, "Cost &darr;");
	} else {
		page_put(p, "<a href=\"%s&amp;sort=cost", link);
		if (day)
			page_put(p, "&amp;day=%.10s", dayname);
		page_put(p, "#all\">Cost</a>");
	}
	page_put(p, "</th></tr>");
	for (int i = 0; i < n && i < LIST_PAGE; i++) {
		int64_t cost = 0, used = 0, billed = 0, wall = 0;
		if (meter_decimal_parse(PQgetvalue(res, i, 1), 0, false, &cost) != METER_OK ||
		    meter_decimal_parse(PQgetvalue(res, i, 2), 0, false, &used) != METER_OK ||
		    meter_decimal_parse(PQgetvalue(res, i, 3), 0, false, &billed) != METER_OK ||
		    meter_decimal_parse(PQgetvalue(res, i, 4), 0, false, &wall) != METER_OK)
			continue;
		page_put(p, "<tr class=\"listed\"><td><a href=\"/dashboard/sandboxes/");
		page_esc(p, PQgetvalue(res, i, 0));
		page_put(p, "\">");
		page_esc(p, PQgetvalue(res, i, 0));
		page_put(p,
		         "</a></td><td class=\"num\">%.1f s</td><td class=\"num\">%.1f s</td>"
		         "<td class=\"num\">%.2f h</td><td class=\"num\">",
		         (double)used / 1e6, (double)billed / 1e6, (double)wall / 3.6e9);
		page_money(p, cost);
		page_put(p, "</td></tr>");
	}
	if (n == 0)
		page_put(p, "<tr><td colspan=\"5\" class=\"muted\">no usage</td></tr>");
	page_put(p, "</table><nav class=\"pages\">");
	for (int k = 0; k < 2; k++) {
		bool there = k == 0 ? page > 1 : n > LIST_PAGE;
		if (!there)
			continue;
		page_put(p, "<a href=\"%s&amp;sort=%s&amp;page=%lld", link, sorts[sort].name,
		         (long long)(k == 0 ? page - 1 : page + 1));
		if (day)
			page_put(p, "&amp;day=%.10s", dayname);
		page_put(p, "#all\">%s</a> ", k == 0 ? "&larr; earlier page" : "next page &rarr;");
	}
	page_put(p, "</nav></section>");
	PQclear(res);
	return true;
}

/* One plan's prices, as the page shows them. */
static void plan_text(struct page *p, const struct meter_plan *pl)
{
	char cpu[METER_MONEY_BUF], mem[METER_MONEY_BUF], when[METER_TIME_BUF];
	meter_money_format_exact(pl->cpu_vcpu_hour, cpu, sizeof cpu);
	meter_money_format_exact(pl->memory_gib_hour, mem, sizeof mem);
	meter_time_format(pl->effective_from_us, when, sizeof when);
	page_put(p, "<strong>");
	page_esc(p, pl->name);
	page_put(p, "</strong> ($%s a vCPU-hour, $%s a GiB-hour, from %.10s)", cpu, mem, when);
}

/* The prices in force now and the plan scheduled next, if any. */
static void prices(struct page *p, const struct meter_plan *plans, size_t n, int64_t now)
{
	const struct meter_plan *in = meter_plan_at(plans, n, now),
	                        *next = meter_plan_next(plans, n, now);
	if (in == NULL)
		return;
	page_put(p, "<p class=\"muted\" id=\"prices\">Prices: ");
	plan_text(p, in);
	if (next) {
		page_put(p, "; next: ");
		plan_text(p, next);
	}
	page_put(p, "</p>");
}

void h_dashboard(struct req *r)
{
	struct page p = {0};
	const char *id = which_account(r, &p);
	if (id == NULL)
		return;
	int64_t now = clock_now_us(), month, page, day;
	size_t sort;
	if (!which_month(r, now, &month) || !which_list(r, month, &sort, &page, &day))
		return;
	struct req_open op;
	if (!req_open(r, id, NULL, 0, NULL, REQ_OPEN_STATE | REQ_OPEN_AS_OF | REQ_OPEN_PLANS, &op))
		return;
	PGconn *c = op.c;
	const struct meter_plan *plans = op.plans;
	size_t nplans = op.nplans;
	const struct account_state *st = &op.state;
	PGresult *daily = NULL, *usage = NULL;
	struct invoice_doc doc = {0};
	cJSON *inv = NULL;
	char err[256], fs[24], ts[24], month_name[16], mdate[16];
	int64_t next = meter_month_next(month);
	bool current = month == meter_month_start(now);
	struct forecast fc = {0};
	if (current && !forecast_compute(r, c, id, month, now, false, plans, nplans, &fc))
		goto out;
	/* Month to date: the total of this month's invoice draft, exactly. */
	if (!invoice_get(c, id, month, now, server_invoice_grace(r->srv), plans, nplans, &doc, err,
	                 sizeof err)) {
		reply_db_error(r, err, NULL);
		goto out;
	}
	inv = cJSON_Parse(doc.json);
	const cJSON *total = cJSON_GetObjectItem(inv, "total"),
	            *exact = cJSON_GetObjectItem(inv, "total_exact");
	snprintf(fs, sizeof fs, "%lld", (long long)month);
	snprintf(ts, sizeof ts, "%lld", (long long)next);
	report_month(month, month_name, sizeof month_name);
	snprintf(mdate, sizeof mdate, "%.7s-01", month_name);
	const char *dp[] = {id, fs, ts}, *tp[] = {id, mdate, "10"};
	daily = q_exec(c, Q_DAILY, 3, dp);
	/* the ten that cost most, ranked by sandbox_month_cost's index */
	usage = q_exec_planned(c, Q_TOP_MONTH, 3, tp);
	if (PQresultStatus(daily) != PGRES_TUPLES_OK || PQresultStatus(usage) != PGRES_TUPLES_OK ||
	    !cJSON_IsString(total) || !cJSON_IsString(exact)) {
		reply_db_error(r, "could not read the month's usage", NULL);
		goto out;
	}
	/* days of the month */
	struct day days[31] = {0};
	int ndays = (int)((next - month) / DAY_US);
	for (int i = 0; i < ndays; i++)
		days[i].start = month + i * DAY_US;
	for (int i = 0; i < PQntuples(daily); i++) {
		int64_t d, plan;
		struct meter_usage u;
		const struct meter_plan *pl = NULL;
		if (!col_int(daily, i, 0, &d) || !col_int(daily, i, 1, &plan) ||
		    !db_col_usage(daily, i, 2, &u))
			continue;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == plan)
				pl = &plans[k];
		int k = (int)((d - month) / DAY_US);
		meter_money cpu = 0, mem = 0;
		if (pl == NULL || k < 0 || k >= ndays ||
		    meter_money_of(u.cpu_billed_us, pl->cpu_vcpu_hour, METER_US_PER_HOUR, &cpu) ||
		    meter_money_of(u.mem_mgib_us, pl->memory_gib_hour,
		                   (METER_US_PER_HOUR * METER_MILLI), &mem))
			continue;
		days[k].cpu += cpu;
		days[k].mem += mem;
		days[k].busy_us += (int64_t)u.busy_us; /* a day of one account: far from 64 bits */
		days[k].idle_us += (int64_t)u.idle_us;
		days[k].used = true;
	}
	PGresult *acc = q_exec(c, Q_ACCOUNT, 1, &id);
	char title[300];
	snprintf(title, sizeof title, "%s", PQntuples(acc) == 1 ? PQgetvalue(acc, 0, 1) : id);
	PQclear(acc);

	page_head(&p, title);
	top_bar(&p, title, op.asof);
	page_put(&p, "<p class=\"muted\">account <code>");
	page_esc(&p, id);
	page_put(&p, "</code> &middot; %s plan &middot; %s</p><nav class=\"months\">", st->a.plan,
	         month_name);
	month_link(&p, r, id, meter_month_start(month - 1), "&larr; previous month");
	if (!current) {
		page_put(&p, " &middot; ");
		month_link(&p, r, id, next, "next month &rarr;");
	}
	page_put(&p, "</nav>");
	prices(&p, plans, nplans, now);
	const cJSON *status = cJSON_GetObjectItem(inv, "status");
	page_put(&p,
	         "<div class=\"cards\"><div class=\"card\"><h2>%s</h2>"
	         "<div class=\"big\" id=\"mtd\" title=\"exact %s\">$%s</div>"
	         "<div class=\"muted\">the %s invoice of %s</div></div>",
	         current ? "Month to date" : "Month", exact->valuestring, total->valuestring,
	         cJSON_IsString(status) ? status->valuestring : "draft", month_name);
	if (current) {
		page_put(&p,
		         "<div class=\"card\"><h2>Forecast for the month</h2><div class=\"big\" "
		         "id=\"forecast\">");
		page_money(&p, fc.projected);
		page_put(&p, "</div><div class=\"muted\">between ");
		page_money(&p, fc.low);
		page_put(&p, " and ");
		page_money(&p, fc.high);
		page_put(&p, " at the last 7 days' pace</div></div>");
	}
	char text[128];
	if (st->a.has_cap) {
		char a[METER_MONEY_BUF], b[METER_MONEY_BUF];
		meter_money_format_cents(st->month_cost, a, sizeof a);
		meter_money_format_cents(st->a.cap, b, sizeof b);
		snprintf(text, sizeof text, "$%s of $%s", a, b);
		gauge(&p, "Monthly spend cap", st->month_cost, st->a.cap, text);
	} else {
		int64_t used =
		        st->trial_used_us < st->a.grant_us ? st->trial_used_us : st->a.grant_us;
		snprintf(text, sizeof text, "%.2f of %.0f h", (double)used / 3.6e9,
		         (double)st->a.grant_us / 3.6e9);
		gauge(&p, "Free trial (sandbox-hours)", st->trial_used_us, st->a.grant_us, text);
	}
	page_put(&p, "</div><section><h2>Daily cost, %s</h2>", month_name);
	char link[400];
	snprintf(link, sizeof link, "/dashboard?month=%s", month_name);
	if (r->admin) { /* ids are letters, digits and ._:- only: nothing to escape */
		size_t used = strlen(link);
		snprintf(link + used, sizeof link - used, "&amp;account=%s", id);
	}
	day_chart(&p, days, ndays, true, link);
	page_put(&p, "</section><section><h2>Busy and idle sandbox-hours</h2>");
	day_chart(&p, days, ndays, false, NULL);
	page_put(&p, "</section>");

	/* the sandboxes that cost most this month */
	struct sb {
		char id[160];
		meter_money cost;
		int64_t measured, billed;
	} sbs[10];
	int n = 0;
	for (int i = 0; i < PQntuples(usage) && n < 10; i++) {
		struct sb *x = &sbs[n];
		snprintf(x->id, sizeof x->id, "%s", PQgetvalue(usage, i, 0));
		/* one sandbox's month: far from 64 bits */
		if (meter_decimal_parse(PQgetvalue(usage, i, 1), 0, false, &x->cost) == METER_OK &&
		    meter_decimal_parse(PQgetvalue(usage, i, 2), 0, false, &x->measured) ==
		            METER_OK &&
		    meter_decimal_parse(PQgetvalue(usage, i, 3), 0, false, &x->billed) == METER_OK)
			n++;
	}
	page_put(&p, "<section><h2>Sandboxes that cost most</h2><table><tr><th>Sandbox</th>"
	             "<th class=\"num\">CPU used</th><th class=\"num\">CPU billed</th>"
	             "<th class=\"num\">Cost</th></tr>");
	for (int i = 0; i < n && i < 10; i++) {
		page_put(&p, "<tr class=\"sandbox\"><td><a href=\"/dashboard/sandboxes/");
		page_esc(&p, sbs[i].id);
		page_put(&p, "\">");
		page_esc(&p, sbs[i].id);
		page_put(&p,
		         "</a></td><td class=\"num\">%.1f s</td><td class=\"num\">%.1f s</td>"
		         "<td class=\"num\">",
		         (double)sbs[i].measured / 1e6, (double)sbs[i].billed / 1e6);
		page_money(&p, sbs[i].cost);
		page_put(&p, "</td></tr>");
	}
	if (n == 0)
		page_put(&p, "<tr><td colspan=\"4\" class=\"muted\">no usage in %s</td></tr>",
		         month_name);
	page_put(&p, "</table></section>");
	if (!sandbox_list(r, &p, c, id, mdate, month_name, link, sort, page, day))
		goto out;
	page_put(&p, "<section><h2>Exports of %s</h2><p>", month_name);
	const char *kinds[][2] = {{"focus", "FOCUS CSV (for FinOps tools)"},
	                          {"usage", "usage per sandbox (CSV)"}};
	for (int k = 0; k < 2; k++) {
		page_put(&p, "<a class=\"export\" href=\"/dashboard/exports/%s?format=%s",
		         month_name, kinds[k][0]);
		if (r->admin) {
			page_put(&p, "&amp;account=");
			page_esc(&p, id);
		}
		page_put(&p, "\">%s</a>%s", kinds[k][1], k == 0 ? " &middot; " : "");
	}
	page_put(&p, "</p></section>");
	page_put(&p,
	         "<p class=\"muted\">Amounts: cents rounded half up, the exact "
	         "amount on hover. Daily figures are at list prices; the trial's credit is in the "
	         "month's total.</p>");
	page_finish(r, &p, 200);
out:
	cJSON_Delete(inv);
	invoice_doc_free(&doc);
	PQclear(daily);
	PQclear(usage);
	req_open_done(&op);
	free(p.buf); /* a page begun, then an error answered instead */
}

void h_dashboard_sandbox(struct req *r)
{
	const char *id = r->param[0];
	struct page p = {0};
	PGconn *c = req_read_db(r);
	if (c == NULL)
		return;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	PGresult *sb = sandbox_visible(r, c, id), *hours = NULL, *peak = NULL;
	char asof[METER_TIME_BUF], fs[24], ts[24];
	if (sb == NULL)
		goto out;
	const char *account = PQgetvalue(sb, 0, 1);
	int64_t now = clock_now_us(), month = meter_month_start(now),
	        next = meter_month_next(month);
	snprintf(fs, sizeof fs, "%lld", (long long)month);
	snprintf(ts, sizeof ts, "%lld", (long long)next);
	const char *hp[] = {account, id, fs, ts}, *pp[] = {id, fs, ts};
	if (!data_as_of(r, c, account, asof, sizeof asof) || !load_plans(r, c, &plans, &nplans))
		goto out;
	hours = q_exec_planned(c, Q_SANDBOX_HOURS, 4, hp);
	peak = q_exec(c, Q_SANDBOX_PEAK, 3, pp);
	if (PQresultStatus(hours) != PGRES_TUPLES_OK || PQresultStatus(peak) != PGRES_TUPLES_OK) {
		reply_db_error(r, "could not read the sandbox's usage", NULL);
		goto out;
	}
	int64_t vcpu_milli = 0;
	meter_decimal_parse(PQgetvalue(sb, 0, 2), 3, false, &vcpu_milli);
	page_head(&p, id);
	top_bar(&p, id, asof);
	page_put(&p, "<p class=\"muted\"><a href=\"/dashboard%s", r->admin ? "?account=" : "");
	if (r->admin)
		page_esc(&p, account);
	page_put(&p, "\">&larr; account</a> &middot; %s vCPU, %s GiB</p>", PQgetvalue(sb, 0, 2),
	         PQgetvalue(sb, 0, 3));
	/* CPU over the month, hour by hour: measured vCPUs on average in each hour */
	const int w = 940, h = 170, base = 150;
	int nh = (int)((next - month) / METER_US_PER_HOUR);
	meter_money cost = 0;
	page_put(&p,
	         "<section><h2>CPU, hour by hour (average vCPUs in use)</h2><svg viewBox=\"0 0 %d "
	         "%d\" "
	         "width=\"100%%\" role=\"img\"><line x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\" "
	         "stroke=\"#d8dee6\"/>",
	         w, h, base, w, base);
	double maxv = vcpu_milli > 0 ? (double)vcpu_milli / 1000.0 : 1;
	for (int i = 0; i < PQntuples(hours); i++) {
		int64_t hour, plan;
		struct meter_usage u = {0};
		struct meter_cost mc;
		const struct meter_plan *pl = NULL;
		if (!col_int(hours, i, 0, &hour) || !col_int(hours, i, 1, &plan) ||
		    !db_col_usage(hours, i, 2, &u))
			continue;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == plan)
				pl = &plans[k];
		if (pl && meter_usage_cost(&u, pl, &mc) == METER_OK)
			cost += mc.total;
		double vcpus = (double)u.cpu_measured_us / 3.6e9, bh = vcpus / maxv * (base - 10);
		bh = bh > base - 10 ? base - 10 : bh;
		int k = (int)((hour - month) / METER_US_PER_HOUR);
		double x = (double)w / nh * k;
		page_put(&p,
		         "<rect class=\"cpu hour\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
		         "height=\"%.1f\">"
		         "<title>%.3f vCPU</title></rect>",
		         x, base - bh, (double)w / nh * 0.9 + 0.3, bh, vcpus);
	}
	page_put(&p,
	         "</svg></section><div class=\"cards\"><div class=\"card\"><h2>Cost this month</h2>"
	         "<div class=\"big\" id=\"cost\">");
	page_money(&p, cost);
	page_put(&p, "</div></div>");
	char text[96];
	int64_t pk = 0, lim = 0;
	bool has_pk = !PQgetisnull(peak, 0, 0) && col_int(peak, 0, 0, &pk);
	bool has_lim = !PQgetisnull(peak, 0, 1) && col_int(peak, 0, 1, &lim);
	if (has_pk && has_lim) {
		snprintf(text, sizeof text, "%.0f of %.0f MiB", (double)pk / 1048576,
		         (double)lim / 1048576);
		gauge(&p, "Peak memory against the limit", pk, lim, text);
	} else {
		page_put(&p,
		         "<div class=\"card\"><h2>Peak memory</h2><div class=\"big\">%s</div>"
		         "<div class=\"muted\">the cgroup reports no %s</div></div>",
		         has_pk ? "" : "unknown", has_pk ? "limit" : "peak");
	}
	page_put(&p, "</div>");
	page_finish(r, &p, 200);
out:
	free(plans);
	PQclear(sb);
	PQclear(hours);
	PQclear(peak);
}
