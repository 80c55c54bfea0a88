/* A month's invoice (JSON, CSV or HTML), and the forecast of where the month is heading. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/forecast.h"
#include "api/opening.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/clock.h"
#include "common/invoicedb.h"
#include "meter/money.h"
#include "meter/timefmt.h"
#include "reports/estimate_doc.h"
#include "reports/invoice_doc.h"

void h_invoice(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, false, "json|csv|html"}};
	static const struct in_field mf[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL}};
	struct in_value v[1], mv[1];
	struct problem p;
	struct req_open op;
	const char *id = r->param[0];
	const struct in_arg month_arg = {"month", r->param[1]};
	if (!in_query(&month_arg, 1, mf, 1, mv, &p)) {
		reply_problem(r, &p);
		return;
	}
	/* A draft may come from the replica; a month due to be final is read (and made
	 * final, the first time) on the primary. */
	int64_t now = clock_now_us();
	bool draft = meter_month_next(mv[0].num) + server_invoice_grace(r->srv) > now;
	if (!req_open(r, id, f, 1, v,
	              (draft ? 0 : REQ_OPEN_PRIMARY) | REQ_OPEN_AS_OF | REQ_OPEN_PLANS, &op))
		return;
	PGconn *c = op.c;
	const struct meter_plan *plans = op.plans;
	size_t nplans = op.nplans;
	struct invoice_doc doc = {0};
	char err[256];
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
			cJSON_AddStringToObject(o, "data_as_of", op.asof);
		reply_json(r, 200, o);
	}
out:
	invoice_doc_free(&doc);
	req_open_done(&op);
}

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
void h_forecast(struct req *r)
{
	static const struct in_field f[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL},
	                                    {"at", IN_TIME, 0, 0, 0, false, NULL}};
	struct in_value v[2];
	struct req_open op;
	const char *id = r->param[0];
	int64_t now = clock_now_us(); /* "at" unless asked: taken before the figures */
	if (!req_open(r, id, f, 2, v, REQ_OPEN_AS_OF | REQ_OPEN_PLANS, &op))
		return;
	const struct meter_plan *plans = op.plans;
	size_t nplans = op.nplans;
	char m[16], when[METER_TIME_BUF];
	struct forecast fc;
	int64_t at = v[1].set ? v[1].num : now;
	if (!forecast_compute(r, op.c, id, v[0].num, at, v[1].set, plans, nplans, &fc)) {
		req_open_done(&op);
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
	cJSON_AddNumberToObject(o, "basis_days", FORECAST_BASIS_DAYS);
	meter_time_format(at, when, sizeof when);
	cJSON_AddStringToObject(o, "at", when);
	cJSON_AddStringToObject(o, "data_as_of", op.asof);
	/* the prices behind it: the plan in force at "at", and the one scheduled next */
	const struct meter_plan *in = meter_plan_at(plans, nplans, at),
	                        *next = meter_plan_next(plans, nplans, at);
	cJSON_AddItemToObject(o, "plan", in ? report_plan_json(in) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "next_plan", next ? report_plan_json(next) : cJSON_CreateNull());
	reply_json(r, 200, o);
	req_open_done(&op);
}
