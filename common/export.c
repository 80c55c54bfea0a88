#include "common/export.h"

#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/ledgerdb.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/ledger.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "reports/csv.h"

#define TS(n) "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"

/* A month's hours of the account ($1, from $2 to $3 µs). */
#define MONTH_HOURS                                                                                \
	"usage_hourly WHERE account_id = $1 AND hour >= " TS("$2") " AND hour < " TS("$3")

/* The usage export's rows: per sandbox and plan, in the order of the ids. */
static const char usage_sql[] =
        "SELECT sandbox_id, price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), "
        "sum(busy_us), sum(idle_us), sum(wall_us), sum(memory_mgib_us) FROM " MONTH_HOURS " "
        "GROUP BY 1, 2 ORDER BY 1, 2";

/*
 * One FOCUS usage line ($4 its plan, $5 its amount in nano-dollars, >= 0)
 * shared out among the plan's sandboxes in proportion to their pricing
 * quantity w: each gets amount x w / sum(w) rounded down, and the nano-dollars
 * left go one each to the largest remainders, ties to the earlier sandbox (in
 * the order of their ids). Rows: id, consumed quantity, w, its part. None
 * when no sandbox has any w.
 */
#define SHARE_SQL(consumed, weight, from)                                                          \
	"WITH s AS (SELECT sandbox_id, sum(" consumed ") m, sum(" weight ") w FROM " from          \
	"  AND price_plan_id = $4 GROUP BY 1), "                                                   \
	"q AS (SELECT s.*, row_number() OVER (ORDER BY sandbox_id) idx, "                          \
	"  div($5::numeric * w, sum(w) OVER ()) part, mod($5::numeric * w, sum(w) OVER ()) rem "   \
	"  FROM s WHERE (SELECT sum(w) FROM s) > 0), "                                             \
	"r AS (SELECT q.*, row_number() OVER (ORDER BY rem DESC, idx) rk, "                        \
	"  $5::numeric - sum(part) OVER () rest FROM q) "                                          \
	"SELECT sandbox_id, m, w, part + CASE WHEN rk <= rest THEN 1 ELSE 0 END FROM r "           \
	"ORDER BY idx"

static const char share_cpu_sql[] = SHARE_SQL("cpu_measured_us", "cpu_billed_us", MONTH_HOURS);
static const char share_mem_sql[] = SHARE_SQL("memory_mgib_us", "memory_mgib_us", MONTH_HOURS);

/* A final month's sandboxes as its invoice recorded them ($1, the month from $2 to $3 µs;
 * migrations/0041): its export shares the recorded lines over them, so it never changes. */
#define FINAL_SANDBOXES                                                                            \
	"invoice_sandboxes WHERE account_id = $1 AND month >= (" TS(                               \
	        "$2") " AT TIME ZONE "                                                             \
	              "'UTC')::date AND month < (" TS("$3") " AT TIME ZONE 'UTC')::date"
static const char final_cpu_sql[] = SHARE_SQL("cpu_measured_us", "cpu_billed_us", FINAL_SANDBOXES);
static const char final_mem_sql[] = SHARE_SQL("memory_mgib_us", "memory_mgib_us", FINAL_SANDBOXES);

/* What a final invoice recorded it billed, per month and plan ($1, its month $2 µs). */
static const char recorded_sql[] =
        "SELECT (extract(epoch FROM for_month::timestamp) * 1000000)::bigint, price_plan_id, "
        "cpu_billed_us, memory_mgib_us, wall_us, covered_cpu_billed_us, covered_memory_mgib_us, "
        "covered_wall_us, EXISTS (SELECT 1 FROM invoice_sandboxes s WHERE s.account_id = $1 "
        "AND s.month = q.month) FROM invoice_quantities q WHERE account_id = $1 "
        "AND month = (" TS("$2") " AT TIME ZONE 'UTC')::date";

struct export
{
	PGconn *c;
	char account[160];
	int64_t month;
	bool focus;
	struct meter_plan *plans;
	size_t nplans;
	struct ledger led; /* FOCUS: the month's lines (common/ledgerdb.h) */
	bool recorded;     /* FOCUS: the lines its final invoice recorded, over its sandboxes */
	size_t line;       /* FOCUS: the next invoice line */
	size_t current;    /* FOCUS: the line being shared out */
	bool started, reading, done;
	char ps[METER_TIME_BUF], pe[METER_TIME_BUF], from[24], to[24];
	struct csv out;
	size_t sent; /* of out, already read */
};

/* quantity / per, to nine decimals */
static void qty(meter_i128 q, int64_t per, char *buf, size_t len)
{
	meter_qty_per(q, per, 9, buf, len);
}

static const char *unit_of(const struct meter_invoice_line *li)
{
	return li->kind == METER_LINE_CPU      ? "vCPU-Hours"
	       : li->kind == METER_LINE_MEMORY ? "GiB-Hours"
	                                       : "Hours";
}

/*
 * A final month's lines, as its invoice recorded what it billed (*final true),
 * in e->led.inv: the same lines in the same order (meter_ledger_recorded), so
 * late usage of the month, billed on a later invoice, changes nothing here.
 * An invoice made final before its sandboxes were recorded shares its lines
 * over the month's hours instead.
 */
static bool final_lines(struct export *e, bool *final, char *err, size_t errlen)
{
	const char *p[] = {e->account, e->from};
	PGresult *r = db_query(e->c,
	                       "SELECT 1 FROM invoices WHERE account_id = $1 AND month = (" TS(
	                               "$2") " AT TIME ZONE 'UTC')::date",
	                       2, p, PGRES_TUPLES_OK, "could not read the invoice", err, errlen);
	if (r == NULL)
		return false;
	*final = PQntuples(r) == 1;
	PQclear(r);
	if (!*final)
		return true;
	r = db_query(e->c, recorded_sql, 2, p, PGRES_TUPLES_OK,
	             "could not read what the invoice billed", err, errlen);
	if (r == NULL)
		return false;
	struct meter_billed_row rows[LEDGER_ROWS_MAX];
	size_t n = (size_t)PQntuples(r);
	bool ok = n <= LEDGER_ROWS_MAX;
	for (size_t i = 0; ok && i < n; i++) {
		struct meter_billed_row *b = &rows[i];
		*b = (struct meter_billed_row){0};
		ok = meter_decimal_parse(PQgetvalue(r, (int)i, 0), 0, true, &b->for_month_us) ==
		             METER_OK &&
		     meter_decimal_parse(PQgetvalue(r, (int)i, 1), 0, false, &b->plan_id) ==
		             METER_OK &&
		     db_col_q(r, (int)i, 2, &b->used.cpu_billed_us) &&
		     db_col_q(r, (int)i, 3, &b->used.mem_mgib_us) &&
		     db_col_q(r, (int)i, 4, &b->used.wall_us) &&
		     db_col_q(r, (int)i, 5, &b->covered.cpu_billed_us) &&
		     db_col_q(r, (int)i, 6, &b->covered.mem_mgib_us) &&
		     db_col_q(r, (int)i, 7, &b->covered.wall_us);
		e->recorded = strcmp(PQgetvalue(r, (int)i, 8), "t") == 0;
	}
	PQclear(r);
	if (!ok || meter_ledger_recorded(rows, n, e->month, e->plans, e->nplans, &e->led.inv) !=
	                   METER_OK) {
		snprintf(err, errlen,
		         "the export cannot be made: what the final invoice of account "
		         "%s billed cannot be read back",
		         e->account);
		return false;
	}
	e->led.found = true;
	return true;
}

struct export *export_open(PGconn *c, const char *account, int64_t month_us, bool focus,
                           const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	struct export *e = calloc(1, sizeof *e);
	if (e == NULL || (e->plans = calloc(nplans + 1, sizeof *plans)) == NULL) {
		free(e);
		snprintf(err, errlen, "the export cannot be made: out of memory");
		return NULL;
	}
	memcpy(e->plans, plans, nplans * sizeof *plans);
	e->nplans = nplans;
	e->c = c;
	e->focus = focus;
	e->month = month_us;
	snprintf(e->account, sizeof e->account, "%s", account);
	meter_time_format(month_us, e->ps, sizeof e->ps);
	meter_time_format(meter_month_next(month_us), e->pe, sizeof e->pe);
	snprintf(e->from, sizeof e->from, "%lld", (long long)month_us);
	snprintf(e->to, sizeof e->to, "%lld", (long long)meter_month_next(month_us));
	bool final = false;
	if (focus && (!final_lines(e, &final, err, errlen) ||
	              (!final && !ledger_month(c, account, month_us, 0, e->plans, nplans, &e->led,
	                                       err, errlen)))) {
		export_close(e);
		return NULL;
	}
	return e;
}

void export_close(struct export *e)
{
	if (e == NULL)
		return;
	free(e->plans);
	free(e->out.buf);
	free(e);
}

/* Sends sql (with the plan and amount for a FOCUS line) to be read a row at a time. */
static bool start_query(struct export *e, const char *sql, int64_t plan, int64_t amount, char *err,
                        size_t errlen)
{
	char ps[24], as[24];
	snprintf(ps, sizeof ps, "%lld", (long long)plan);
	snprintf(as, sizeof as, "%lld", (long long)amount);
	const char *p[] = {e->account, e->from, e->to, ps, as};
	if (!PQsendQueryParams(e->c, sql, sql == usage_sql ? 3 : 5, NULL, p, NULL, NULL, 0) ||
	    !PQsetSingleRowMode(e->c)) {
		snprintf(err, errlen, "could not read the month's usage: %s", PQerrorMessage(e->c));
		return false;
	}
	e->reading = true;
	return true;
}

/* One row of the usage export. */
static bool usage_row(struct export *e, const PGresult *r)
{
	int64_t plan;
	struct meter_usage u;
	if (meter_decimal_parse(PQgetvalue(r, 0, 1), 0, false, &plan) != METER_OK ||
	    !db_col_usage(r, 0, 2, &u))
		return false;
	const struct meter_plan *pl = NULL;
	for (size_t k = 0; k < e->nplans; k++)
		if (e->plans[k].id == plan)
			pl = &e->plans[k];
	struct meter_cost cost = {0};
	char f[6][METER_QTY_BUF], money[METER_MONEY_BUF];
	if (pl == NULL || meter_usage_cost(&u, pl, &cost) != METER_OK)
		return true; /* a plan gone, or a figure out of range: no row, as ever */
	qty(u.cpu_measured_us, 1000000, f[0], sizeof f[0]);
	qty(u.cpu_billed_us, METER_US_PER_HOUR, f[1], sizeof f[1]);
	qty(u.mem_mgib_us, (METER_US_PER_HOUR * METER_MILLI), f[2], sizeof f[2]);
	qty(u.wall_us, METER_US_PER_HOUR, f[3], sizeof f[3]);
	qty(u.busy_us, METER_US_PER_HOUR, f[4], sizeof f[4]);
	qty(u.idle_us, METER_US_PER_HOUR, f[5], sizeof f[5]);
	meter_money_format_exact(cost.total, money, sizeof money);
	const char *row[] = {
	        PQgetvalue(r, 0, 0), pl->name, f[0], f[1], f[2], f[3], f[4], f[5], money};
	csv_row(&e->out, row, 9);
	return true;
}

/* One sandbox's row of the FOCUS line being shared out. */
static bool focus_row(struct export *e, const PGresult *r)
{
	const struct meter_invoice_line *li = &e->led.inv.lines[e->current];
	bool cpu = li->kind == METER_LINE_CPU;
	int64_t part;
	meter_i128 consumed, weight;
	if (!db_col_q(r, 0, 1, &consumed) || !db_col_q(r, 0, 2, &weight) ||
	    meter_decimal_parse(PQgetvalue(r, 0, 3), 0, false, &part) != METER_OK)
		return false;
	char cost[METER_MONEY_BUF], price[METER_MONEY_BUF], cq[METER_QTY_BUF], pq[METER_QTY_BUF],
	        desc[160];
	meter_decimal_format(li->unit_price, METER_MONEY_SCALE, 0, price, sizeof price);
	meter_money_format_exact(part, cost, sizeof cost);
	qty(consumed, li->per_unit, cq, sizeof cq);
	qty(weight, li->per_unit, pq, sizeof pq);
	snprintf(desc, sizeof desc, "%s (plan %s)",
	         cpu ? "CPU, billed on measured use" : "Memory, provisioned", li->plan->name);
	const char *row[] = {
	        e->account,          e->ps,     e->pe,   e->ps,     e->pe, "Usage",     desc,
	        PQgetvalue(r, 0, 0), "Sandbox", "meter", "Compute", cq,    unit_of(li), pq,
	        unit_of(li),         price,     cost,    cost,      "USD"};
	csv_row(&e->out, row, 19);
	return true;
}

/* The next invoice line of a FOCUS export: one row, or a query to share it out. */
static bool next_line(struct export *e, char *err, size_t errlen)
{
	const struct meter_invoice_line *li = &e->led.inv.lines[e->line];
	e->current = e->line++;
	if (li->plan != NULL && li->for_month_us == 0) {
		if (li->amount < 0) {
			snprintf(err, errlen, "the export cannot be made: a negative usage line");
			return false;
		}
		bool cpu = li->kind == METER_LINE_CPU;
		return start_query(e,
		                   e->recorded ? (cpu ? final_cpu_sql : final_mem_sql)
		                               : (cpu ? share_cpu_sql : share_mem_sql),
		                   li->plan->id, li->amount, err, errlen);
	}
	/* the trial credit, or an adjustment: one row, no resource */
	char cost[METER_MONEY_BUF], price[METER_MONEY_BUF] = "", pq[METER_QTY_BUF],
	                            cs[METER_TIME_BUF], ce[METER_TIME_BUF];
	bool cpu = li->kind == METER_LINE_CPU;
	int64_t fm = li->for_month_us ? li->for_month_us : e->month;
	if (li->plan)
		meter_decimal_format(li->unit_price, METER_MONEY_SCALE, 0, price, sizeof price);
	meter_time_format(fm, cs, sizeof cs);
	meter_time_format(meter_month_next(fm), ce, sizeof ce);
	meter_money_format_exact(li->amount, cost, sizeof cost);
	qty(li->quantity, li->per_unit, pq, sizeof pq);
	const char *cat = li->for_month_us ? "Adjustment" : "Credit";
	const char *desc = li->kind == METER_LINE_TRIAL
	                           ? "Free trial: the usage of its sandbox-hours, credited"
	                   : cpu ? "CPU, usage of a final month that came late"
	                         : "Memory, usage of a final month that came late";
	const char *row[] = {e->account,  e->ps, e->pe,   cs,        ce,   cat,         desc,
	                     "",          "",    "meter", "Compute", pq,   unit_of(li), pq,
	                     unit_of(li), price, cost,    cost,      "USD"};
	csv_row(&e->out, row, 19);
	return true;
}

/* Writes what comes next (a row or a few) into e->out; false with err. */
static bool produce(struct export *e, char *err, size_t errlen)
{
	if (!e->started) {
		e->started = true;
		if (!e->focus) {
			static const char *const head[] = {
			        "sandbox_id", "plan",       "cpu_seconds",
			        "vcpu_hours", "gib_hours",  "sandbox_hours",
			        "busy_hours", "idle_hours", "cost_exact"};
			csv_row(&e->out, head, 9);
			return start_query(e, usage_sql, 0, 0, err, errlen);
		}
		static const char *const head[] = {
		        "BillingAccountId",  "BillingPeriodStart", "BillingPeriodEnd",
		        "ChargePeriodStart", "ChargePeriodEnd",    "ChargeCategory",
		        "ChargeDescription", "ResourceId",         "ResourceType",
		        "ServiceName",       "ServiceCategory",    "ConsumedQuantity",
		        "ConsumedUnit",      "PricingQuantity",    "PricingUnit",
		        "ListUnitPrice",     "BilledCost",         "EffectiveCost",
		        "BillingCurrency"};
		csv_row(&e->out, head, 19);
		return true;
	}
	if (e->reading) {
		PGresult *r = PQgetResult(e->c);
		ExecStatusType st = PQresultStatus(r);
		bool ok = st == PGRES_SINGLE_TUPLE || st == PGRES_TUPLES_OK;
		if (st == PGRES_SINGLE_TUPLE)
			ok = e->focus ? focus_row(e, r) : usage_row(e, r);
		else if (!ok)
			snprintf(err, errlen, "could not read the month's usage: %s",
			         PQresultErrorMessage(r));
		if (st == PGRES_SINGLE_TUPLE && !ok)
			snprintf(err, errlen, "could not read the month's usage: a malformed row");
		PQclear(r);
		if (st == PGRES_TUPLES_OK) { /* the end of this query's rows */
			while ((r = PQgetResult(e->c)) != NULL)
				PQclear(r);
			e->reading = false;
			e->done = !e->focus;
		}
		return ok;
	}
	if (e->focus && e->line < e->led.inv.n)
		return next_line(e, err, errlen);
	e->done = true;
	return true;
}

ssize_t export_read(struct export *e, char *buf, size_t max, char *err, size_t errlen)
{
	/* what is left of the last piece (less than a row, or than max) to the front: the
	 * buffer holds a piece at a time, never the export */
	if (e->sent > 0) {
		memmove(e->out.buf, e->out.buf + e->sent, e->out.len - e->sent + 1);
		e->out.len -= e->sent;
		e->sent = 0;
	}
	while (e->out.len - e->sent < max && !e->done) {
		if (!produce(e, err, errlen))
			return -1;
		if (e->out.oom) {
			snprintf(err, errlen, "the export cannot be made: out of memory");
			return -1;
		}
	}
	size_t n = e->out.len - e->sent < max ? e->out.len - e->sent : max;
	memcpy(buf, e->out.buf + e->sent, n);
	e->sent += n;
	return (ssize_t)n;
}

bool export_write(PGconn *c, const char *account, int64_t month_us, bool focus,
                  const struct meter_plan *plans, size_t nplans, FILE *f, char *err, size_t errlen)
{
	struct export *e = export_open(c, account, month_us, focus, plans, nplans, err, errlen);
	if (e == NULL)
		return false;
	char buf[65536];
	ssize_t n;
	bool ok = true;
	while (ok && (n = export_read(e, buf, sizeof buf, err, errlen)) > 0)
		ok = fwrite(buf, 1, (size_t)n, f) == (size_t)n;
	if (ok && n < 0)
		ok = false;
	else if (!ok)
		snprintf(err, errlen, "could not write the export");
	if (!ok)
		for (PGresult *r; (r = PQgetResult(c)) != NULL;)
			PQclear(r);
	export_close(e);
	return ok;
}
