#include "common/export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/invoicedb.h"
#include "meter/allocate.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "reports/csv.h"

#define TS(n) "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"

struct sbrow {
	char id[160];
	int64_t plan;
	struct meter_usage u;
};

/* The month's usage per sandbox and plan; *rows malloc'd. */
static bool per_sandbox(PGconn *c, const char *account, int64_t month, struct sbrow **rows,
                        size_t *n, char *err, size_t errlen)
{
	char from[24], to[24];
	snprintf(from, sizeof from, "%lld", (long long)month);
	snprintf(to, sizeof to, "%lld", (long long)meter_month_next(month));
	const char *p[] = {account, from, to};
	PGresult *r = PQexecParams(
	        c,
	        "SELECT sandbox_id, price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), "
	        "sum(busy_us), sum(idle_us), sum(wall_us), sum(memory_mgib_us) FROM usage_hourly "
	        "WHERE account_id = $1 AND hour >= " TS("$2") " AND hour < " TS(
	                "$3") " "
	                      "GROUP BY 1, 2 ORDER BY 1, 2",
	        3, NULL, p, NULL, NULL, 0);
	if (!db_check(r, PGRES_TUPLES_OK, "could not read the month's usage", err, errlen)) {
		PQclear(r);
		return false;
	}
	int nr = PQntuples(r);
	*rows = calloc((size_t)nr + 1, sizeof **rows);
	bool ok = *rows != NULL;
	for (int i = 0; ok && i < nr; i++) {
		struct sbrow *s = &(*rows)[i];
		snprintf(s->id, sizeof s->id, "%s", PQgetvalue(r, i, 0));
		ok = meter_decimal_parse(PQgetvalue(r, i, 1), 0, false, &s->plan) == METER_OK &&
		     db_col_usage(r, i, 2, &s->u) &&
		     /* one sandbox's month, the weight of its share: within 64 bits */
		     s->u.cpu_billed_us <= INT64_MAX && s->u.mem_mgib_us <= INT64_MAX;
	}
	PQclear(r);
	if (!ok) {
		free(*rows);
		snprintf(err, errlen, "malformed usage rows");
		return false;
	}
	*n = (size_t)nr;
	return true;
}

/* quantity / per, to nine decimals */
static void qty(meter_i128 q, int64_t per, char *buf, size_t len)
{
	meter_qty_per(q, per, 9, buf, len);
}

char *export_focus(PGconn *c, const char *account, int64_t month, const struct meter_plan *plans,
                   size_t nplans, char *err, size_t errlen)
{
	struct meter_invoice inv;
	struct sbrow *rows = NULL;
	size_t n = 0;
	struct csv out = {0};
	char ps[METER_TIME_BUF], pe[METER_TIME_BUF];
	if (!invoice_lines(c, account, month, plans, nplans, &inv, err, errlen) ||
	    !per_sandbox(c, account, month, &rows, &n, err, errlen))
		return NULL;
	meter_time_format(month, ps, sizeof ps);
	meter_time_format(meter_month_next(month), pe, sizeof pe);
	static const char *const head[] = {
	        "BillingAccountId", "BillingPeriodStart", "BillingPeriodEnd",  "ChargePeriodStart",
	        "ChargePeriodEnd",  "ChargeCategory",     "ChargeDescription", "ResourceId",
	        "ResourceType",     "ServiceName",        "ServiceCategory",   "ConsumedQuantity",
	        "ConsumedUnit",     "PricingQuantity",    "PricingUnit",       "ListUnitPrice",
	        "BilledCost",       "EffectiveCost",      "BillingCurrency"};
	csv_row(&out, head, 19);
	int64_t *w = calloc(n + 1, sizeof *w);
	meter_money *parts = calloc(n + 1, sizeof *parts);
	size_t *idx = calloc(n + 1, sizeof *idx);
	bool ok = w && parts && idx;
	for (size_t l = 0; ok && l < inv.n; l++) {
		const struct meter_invoice_line *li = &inv.lines[l];
		char cost[METER_MONEY_BUF], price[METER_MONEY_BUF], cq[METER_QTY_BUF],
		        pq[METER_QTY_BUF], cs[METER_TIME_BUF], ce[METER_TIME_BUF];
		bool cpu = li->kind == METER_LINE_CPU;
		const char *unit = cpu                             ? "vCPU-Hours"
		                   : li->kind == METER_LINE_MEMORY ? "GiB-Hours"
		                                                   : "Hours";
		if (li->plan)
			meter_decimal_format(li->unit_price, METER_MONEY_SCALE, 0, price,
			                     sizeof price);
		if (li->plan == NULL || li->for_month_us) {
			/* the trial credit, or an adjustment: one row, no resource */
			int64_t fm = li->for_month_us ? li->for_month_us : month;
			meter_time_format(fm, cs, sizeof cs);
			meter_time_format(meter_month_next(fm), ce, sizeof ce);
			meter_money_format_exact(li->amount, cost, sizeof cost);
			qty(li->quantity, li->per_unit, pq, sizeof pq);
			const char *cat = li->for_month_us ? "Adjustment" : "Credit";
			const char *desc =
			        li->kind == METER_LINE_TRIAL
			                ? "Free trial: the usage of its sandbox-hours, credited"
			        : cpu ? "CPU, usage of a final month that came late"
			              : "Memory, usage of a final month that came late";
			const char *row[] = {account, ps,      pe,        cs,
			                     ce,      cat,     desc,      "",
			                     "",      "meter", "Compute", pq,
			                     unit,    pq,      unit,      li->plan ? price : "",
			                     cost,    cost,    "USD"};
			csv_row(&out, row, 19);
			continue;
		}
		/* share the line out among the sandboxes priced under its plan */
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (rows[i].plan == li->plan->id) {
				w[k] = (int64_t)(cpu ? rows[i].u.cpu_billed_us
				                     : rows[i].u.mem_mgib_us); /* checked on reading
				                                                */
				idx[k++] = i;
			}
		if (k == 0)
			continue;
		bool any = false;
		for (size_t i = 0; i < k; i++)
			any = any || w[i] > 0;
		if (!any)
			continue;
		if (meter_allocate(li->amount, w, k, parts) != METER_OK) {
			ok = false;
			break;
		}
		for (size_t i = 0; i < k; i++) {
			const struct sbrow *sr = &rows[idx[i]];
			meter_money_format_exact(parts[i], cost, sizeof cost);
			qty(cpu ? sr->u.cpu_measured_us : sr->u.mem_mgib_us, li->per_unit, cq,
			    sizeof cq);
			qty(w[i], li->per_unit, pq, sizeof pq);
			char desc[160];
			snprintf(desc, sizeof desc, "%s (plan %s)",
			         cpu ? "CPU, billed on measured use" : "Memory, provisioned",
			         li->plan->name);
			const char *row[] = {account,   ps,   pe,     ps,        pe,
			                     "Usage",   desc, sr->id, "Sandbox", "meter",
			                     "Compute", cq,   unit,   pq,        unit,
			                     price,     cost, cost,   "USD"};
			csv_row(&out, row, 19);
		}
	}
	free(w);
	free(parts);
	free(idx);
	free(rows);
	if (!ok || out.oom) {
		snprintf(err, errlen, "the export cannot be made");
		free(out.buf);
		return NULL;
	}
	return out.buf;
}

char *export_usage(PGconn *c, const char *account, int64_t month, const struct meter_plan *plans,
                   size_t nplans, char *err, size_t errlen)
{
	struct sbrow *rows = NULL;
	size_t n = 0;
	struct csv out = {0};
	if (!per_sandbox(c, account, month, &rows, &n, err, errlen))
		return NULL;
	static const char *const head[] = {"sandbox_id", "plan",       "cpu_seconds",
	                                   "vcpu_hours", "gib_hours",  "sandbox_hours",
	                                   "busy_hours", "idle_hours", "cost_exact"};
	csv_row(&out, head, 9);
	for (size_t i = 0; i < n; i++) {
		const struct meter_plan *pl = NULL;
		for (size_t k = 0; k < nplans; k++)
			if (plans[k].id == rows[i].plan)
				pl = &plans[k];
		struct meter_cost cost = {0};
		char f[7][METER_QTY_BUF], money[METER_MONEY_BUF];
		if (pl == NULL || meter_usage_cost(&rows[i].u, pl, &cost) != METER_OK)
			continue;
		qty(rows[i].u.cpu_measured_us, 1000000, f[0], sizeof f[0]);
		qty(rows[i].u.cpu_billed_us, INT64_C(3600000000), f[1], sizeof f[1]);
		qty(rows[i].u.mem_mgib_us, INT64_C(3600000000000), f[2], sizeof f[2]);
		qty(rows[i].u.wall_us, INT64_C(3600000000), f[3], sizeof f[3]);
		qty(rows[i].u.busy_us, INT64_C(3600000000), f[4], sizeof f[4]);
		qty(rows[i].u.idle_us, INT64_C(3600000000), f[5], sizeof f[5]);
		meter_money_format_exact(cost.total, money, sizeof money);
		const char *row[] = {rows[i].id, pl->name, f[0], f[1], f[2],
		                     f[3],       f[4],     f[5], money};
		csv_row(&out, row, 9);
	}
	free(rows);
	if (out.oom) {
		snprintf(err, errlen, "the export cannot be made: out of memory");
		return NULL;
	}
	return out.buf;
}
