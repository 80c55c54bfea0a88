#include "common/invoicedb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/log.h"
#include "common/month.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/timefmt.h"
#include "reports/invoice.h"

#define TS(n)       "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"
#define MONTH_OF(n) "(" TS(n) " AT TIME ZONE 'UTC')::date"

/* What final invoices billed for one month, per plan. */
struct billed {
	int64_t plan_id;
	struct meter_usage used, covered;
};

void invoice_doc_free(struct invoice_doc *d)
{
	free(d->json);
	free(d->csv);
	free(d->html);
	d->json = d->csv = d->html = NULL;
}

static bool col(const PGresult *r, int row, int c, int64_t *out)
{
	return meter_decimal_parse(PQgetvalue(r, row, c), 0, true, out) == METER_OK;
}

static bool sub(struct meter_usage *a, const struct meter_usage *b)
{
	return ck_sub_q(a->cpu_billed_us, b->cpu_billed_us, &a->cpu_billed_us) &&
	       ck_sub_q(a->mem_mgib_us, b->mem_mgib_us, &a->mem_mgib_us) &&
	       ck_sub_q(a->wall_us, b->wall_us, &a->wall_us);
}

static bool nonzero(const struct meter_usage *u)
{
	return u->cpu_billed_us || u->mem_mgib_us || u->wall_us;
}

/* A row of invoice_quantities to store, when finalising. */
struct qrow {
	int64_t for_month, plan_id;
	struct meter_usage used, covered;
};

static const struct meter_plan *plan_by_id(const struct meter_plan *plans, size_t n, int64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (plans[i].id == id)
			return &plans[i];
	return NULL;
}

/* Adds the adjustment lines of every earlier final month to inv. */
static bool adjustments(PGconn *c, const char *account, int64_t month_us,
                        const struct meter_plan *plans, size_t nplans, struct meter_invoice *inv,
                        struct qrow *rows, size_t *nrows, size_t cap, char *err, size_t errlen)
{
	char m[24];
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	const char *p[] = {account, m};
	PGresult *months = db_query(
	        c,
	        "SELECT DISTINCT (extract(epoch FROM for_month::timestamp) * 1000000)::bigint "
	        "FROM invoice_quantities WHERE account_id = $1 AND for_month < " MONTH_OF(
	                "$2") " "
	                      "UNION SELECT (extract(epoch FROM month::timestamp) * "
	                      "1000000)::bigint "
	                      "FROM invoices WHERE account_id = $1 AND month < " MONTH_OF(
	                              "$2") " ORDER BY 1",
	        2, p, PGRES_TUPLES_OK, "could not read final invoices", err, errlen);
	if (months == NULL)
		return false;
	bool ok = true;
	for (int i = 0; ok && i < PQntuples(months); i++) {
		int64_t f;
		struct month_usage now;
		ok = col(months, i, 0, &f) &&
		     month_usage_load(c, account, f, 0, plans, nplans, &now, err, errlen);
		if (!ok)
			break;
		char fs[24];
		snprintf(fs, sizeof fs, "%lld", (long long)f);
		const char *bp[] = {account, fs};
		PGresult *b = db_query(
		        c,
		        "SELECT price_plan_id, sum(cpu_billed_us), sum(memory_mgib_us), "
		        "sum(wall_us), sum(covered_cpu_billed_us), sum(covered_memory_mgib_us), "
		        "sum(covered_wall_us) FROM invoice_quantities WHERE account_id = $1 "
		        "AND for_month = " MONTH_OF("$2") " GROUP BY price_plan_id",
		        2, bp, PGRES_TUPLES_OK, "could not read final invoices", err, errlen);
		if (b == NULL) {
			PQclear(months);
			return false;
		}
		/* delta = now - billed, per plan */
		struct meter_plan_usage delta[MONTH_PLANS_MAX];
		size_t nd = 0;
		for (size_t k = 0; k < now.n; k++)
			delta[nd++] = now.plans[k];
		for (int r = 0; ok && r < PQntuples(b); r++) {
			int64_t plan;
			struct meter_usage used = {0}, cov = {0};
			ok = col(b, r, 0, &plan) && db_col_q(b, r, 1, &used.cpu_billed_us) &&
			     db_col_q(b, r, 2, &used.mem_mgib_us) &&
			     db_col_q(b, r, 3, &used.wall_us) &&
			     db_col_q(b, r, 4, &cov.cpu_billed_us) &&
			     db_col_q(b, r, 5, &cov.mem_mgib_us) && db_col_q(b, r, 6, &cov.wall_us);
			size_t k = 0;
			while (ok && k < nd && delta[k].plan->id != plan)
				k++;
			if (ok && k == nd) {
				const struct meter_plan *pl = plan_by_id(plans, nplans, plan);
				if (pl == NULL || nd == MONTH_PLANS_MAX) {
					ok = false;
					break;
				}
				delta[nd++] = (struct meter_plan_usage){.plan = pl};
			}
			ok = ok && sub(&delta[k].used, &used) && sub(&delta[k].covered, &cov);
		}
		PQclear(b);
		if (!ok) {
			snprintf(err, errlen,
			         "the adjustments of a final month cannot be computed");
			break;
		}
		struct meter_plan_usage changed[MONTH_PLANS_MAX];
		size_t nc = 0;
		for (size_t k = 0; k < nd; k++)
			if (nonzero(&delta[k].used) || nonzero(&delta[k].covered)) {
				changed[nc++] = delta[k];
				if (*nrows == cap) {
					snprintf(err, errlen,
					         "too many adjustments for one invoice");
					PQclear(months);
					return false;
				}
				rows[(*nrows)++] = (struct qrow){.for_month = f,
				                                 .plan_id = delta[k].plan->id,
				                                 .used = delta[k].used,
				                                 .covered = delta[k].covered};
			}
		if (nc && meter_invoice_adjust(inv, f, changed, nc) != METER_OK) {
			snprintf(err, errlen,
			         "the adjustments of a final month cannot be computed");
			ok = false;
		}
	}
	PQclear(months);
	return ok;
}

static bool store(PGconn *c, const char *account, int64_t month_us, meter_money total,
                  const struct invoice_doc *d, const struct qrow *rows, size_t n, char *err,
                  size_t errlen)
{
	char m[24], t[METER_MONEY_BUF];
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	meter_money_format_exact(total, t, sizeof t);
	const char *p[] = {account, m, t, d->json, d->csv, d->html};
	PGresult *r =
	        db_query(c,
	                 "INSERT INTO invoices (account_id, month, total, body_json, body_csv, "
	                 "body_html) VALUES ($1, " MONTH_OF("$2") ", $3, $4, $5, $6)",
	                 6, p, PGRES_COMMAND_OK, "could not store the final invoice", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	for (size_t i = 0; i < n; i++) {
		char v[8][METER_QTY_BUF];
		snprintf(v[0], sizeof v[0], "%lld", (long long)rows[i].for_month);
		snprintf(v[1], sizeof v[1], "%lld", (long long)rows[i].plan_id);
		db_q_text(rows[i].used.cpu_billed_us, v[2], sizeof v[2]);
		db_q_text(rows[i].used.mem_mgib_us, v[3], sizeof v[3]);
		db_q_text(rows[i].used.wall_us, v[4], sizeof v[4]);
		db_q_text(rows[i].covered.cpu_billed_us, v[5], sizeof v[5]);
		db_q_text(rows[i].covered.mem_mgib_us, v[6], sizeof v[6]);
		db_q_text(rows[i].covered.wall_us, v[7], sizeof v[7]);
		const char *qp[] = {account, m, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
		r = db_query(c,
		             "INSERT INTO invoice_quantities VALUES ($1, " MONTH_OF(
		                     "$2") ", " MONTH_OF("$3") ", $4, $5, $6, $7, $8, $9, $10)",
		             10, qp, PGRES_COMMAND_OK, "could not store what the invoice billed",
		             err, errlen);
		if (r == NULL)
			return false;
		PQclear(r);
	}
	return true;
}

/*
 * Whether a month's figures are settled: no sample up to its end waits for
 * the rollup (marks set aside are not waited for: they may wait for an
 * operator), and the account's trial crossing is not being found again.
 */
static bool month_settled(PGconn *c, const char *account, int64_t month_us, bool *settled,
                          char *err, size_t errlen)
{
	char end[24];
	snprintf(end, sizeof end, "%lld", (long long)meter_month_next(month_us));
	const char *p[] = {account, end};
	PGresult *r = db_query(
	        c,
	        "SELECT NOT EXISTS (SELECT 1 FROM trial_queue WHERE account_id = $1) "
	        "AND NOT EXISTS (SELECT 1 FROM rollup_queue q JOIN sandboxes s "
	        "  ON s.id = q.sandbox_id WHERE s.account_id = $1 "
	        "  AND q.waiting IS NULL AND q.from_ts < " TS("$2") ")",
	        2, p, PGRES_TUPLES_OK, "could not read what is still being rated", err, errlen);
	if (r == NULL)
		return false;
	*settled = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return true;
}

/* The lines of a month now: its own usage, then adjustments of earlier final months. */
static bool lines(PGconn *c, const char *account, int64_t month_us, const struct meter_plan *plans,
                  size_t nplans, struct meter_invoice *inv, struct qrow *rows, size_t *nrows,
                  char *err, size_t errlen)
{
	struct month_usage mu;
	if (!month_usage_load(c, account, month_us, 0, plans, nplans, &mu, err, errlen))
		return false;
	if (meter_invoice_build(mu.plans, mu.n, inv) != METER_OK) {
		snprintf(err, errlen, "the invoice cannot be computed");
		return false;
	}
	for (size_t i = 0; i < mu.n; i++)
		rows[(*nrows)++] = (struct qrow){.for_month = month_us,
		                                 .plan_id = mu.plans[i].plan->id,
		                                 .used = mu.plans[i].used,
		                                 .covered = mu.plans[i].covered};
	return adjustments(c, account, month_us, plans, nplans, inv, rows, nrows,
	                   4 * MONTH_PLANS_MAX, err, errlen);
}

bool invoice_lines(PGconn *c, const char *account, int64_t month_us, const struct meter_plan *plans,
                   size_t nplans, struct meter_invoice *inv, char *err, size_t errlen)
{
	struct qrow rows[4 * MONTH_PLANS_MAX];
	size_t nrows = 0;
	return lines(c, account, month_us, plans, nplans, inv, rows, &nrows, err, errlen);
}

bool invoice_get(PGconn *c, const char *account, int64_t month_us, int64_t now_us, int64_t grace_us,
                 const struct meter_plan *plans, size_t nplans, struct invoice_doc *out, char *err,
                 size_t errlen)
{
	char m[24];
	PGresult *r = NULL;
	struct meter_invoice inv;
	struct qrow rows[4 * MONTH_PLANS_MAX];
	size_t nrows = 0;
	bool ok = false, locked = false;
	memset(out, 0, sizeof *out);
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	const char *p[] = {account, m};
	/* The account's lock first, then one snapshot for every read (REPEATABLE READ
	 * takes its snapshot at the first statement, after the lock is granted). */
	r = db_query(c, "SELECT pg_advisory_lock(hashtext('meter.invoice:' || $1))", 1, p,
	             PGRES_TUPLES_OK, "could not lock the account's invoices", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	locked = true;
	r = db_query(c, "BEGIN ISOLATION LEVEL REPEATABLE READ", 0, NULL, PGRES_COMMAND_OK,
	             "could not begin", err, errlen);
	if (r == NULL)
		goto out;
	PQclear(r);
	r = db_query(c,
	             "SELECT body_json, body_csv, body_html FROM invoices WHERE account_id = $1 "
	             "AND month = " MONTH_OF("$2"),
	             2, p, PGRES_TUPLES_OK, "could not read the invoice", err, errlen);
	if (r == NULL)
		goto out;
	if (PQntuples(r) == 1) { /* final: the stored bytes */
		out->json = strdup(PQgetvalue(r, 0, 0));
		out->csv = strdup(PQgetvalue(r, 0, 1));
		out->html = PQgetisnull(r, 0, 2) ? NULL : strdup(PQgetvalue(r, 0, 2));
		out->final = out->found = true;
		ok = out->json && out->csv && (out->html || PQgetisnull(r, 0, 2));
		goto out;
	}
	PQclear(r);
	r = db_query(c, "SELECT name FROM accounts WHERE id = $1", 1, p, PGRES_TUPLES_OK,
	             "could not read the account", err, errlen);
	if (r == NULL)
		goto out;
	if (PQntuples(r) != 1) {
		ok = true; /* no such account: found stays false */
		goto out;
	}
	out->found = true;
	if (!lines(c, account, month_us, plans, nplans, &inv, rows, &nrows, err, errlen))
		goto out;
	int64_t due = meter_month_next(month_us) + grace_us;
	out->final = now_us >= due;
	if (out->final) {
		bool settled;
		if (!month_settled(c, account, month_us, &settled, err, errlen))
			goto out;
		out->final = settled; /* a draft a little longer, never final and wrong */
	}
	struct invoice_meta meta = {.account_id = account,
	                            .account_name = PQgetvalue(r, 0, 0),
	                            .month_start_us = month_us,
	                            .status = out->final ? "final" : "draft"};
	cJSON *j = report_invoice_json(&meta, &inv);
	out->json = j ? cJSON_PrintUnformatted(j) : NULL;
	cJSON_Delete(j);
	out->csv = report_invoice_csv(&meta, &inv);
	out->html = report_invoice_html(&meta, &inv);
	if (out->json == NULL || out->csv == NULL || out->html == NULL) {
		snprintf(err, errlen, "could not render the invoice: out of memory");
		goto out;
	}
	if (out->final && !store(c, account, month_us, inv.total, out, rows, nrows, err, errlen))
		goto out;
	PQclear(r);
	r = db_query(c, out->final ? "COMMIT" : "ROLLBACK", 0, NULL, PGRES_COMMAND_OK,
	             "could not commit the invoice", err, errlen);
	ok = r != NULL;
out:
	PQclear(r);
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	if (locked)
		PQclear(PQexecParams(c,
		                     "SELECT pg_advisory_unlock(hashtext('meter.invoice:' || $1))",
		                     1, NULL, p, NULL, NULL, 0));
	if (!ok)
		invoice_doc_free(out);
	return ok;
}

bool invoices_finalize_due(PGconn *c, int64_t now_us, int64_t grace_us, int limit, int *made,
                           char *err, size_t errlen)
{
	char before[24], lim[16];
	*made = 0;
	/* a month is due when its end is at or before now - grace */
	snprintf(before, sizeof before, "%lld", (long long)(now_us - grace_us));
	snprintf(lim, sizeof lim, "%d", limit);
	const char *p[] = {before, lim};
	PGresult *r = db_query(
	        c,
	        "SELECT DISTINCT m.account_id, (extract(epoch FROM m.month::timestamp) * 1000000)"
	        "::bigint AS month FROM account_month m "
	        "WHERE (m.month + interval '1 month')::timestamp AT TIME ZONE 'UTC' <= " TS(
	                "$1") " "
	                      "AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.account_id = "
	                      "m.account_id "
	                      "AND i.month = m.month) ORDER BY month, m.account_id LIMIT $2",
	        2, p, PGRES_TUPLES_OK, "could not read the invoices due", err, errlen);
	if (r == NULL)
		return false;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	bool ok = PQntuples(r) == 0 || plans_load(c, &plans, &nplans, err, errlen);
	for (int i = 0; ok && i < PQntuples(r); i++) {
		int64_t month = 0;
		struct invoice_doc d;
		ok = meter_decimal_parse(PQgetvalue(r, i, 1), 0, false, &month) == METER_OK;
		if (!ok) {
			snprintf(err, errlen,
			         "could not read the invoices due: a month does not parse");
			break;
		}
		/* one account's failure is its own: it is logged, and tried again next time */
		char why[512];
		if (!invoice_get(c, PQgetvalue(r, i, 0), month, now_us, grace_us, plans, nplans, &d,
		                 why, sizeof why)) {
			log_warn("invoices: account %s: %s", PQgetvalue(r, i, 0), why);
			continue;
		}
		if (d.final)
			(*made)++;
		invoice_doc_free(&d);
	}
	free(plans);
	PQclear(r);
	return ok;
}
