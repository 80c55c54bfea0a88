#include "common/invoicedb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/ledgerdb.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/timefmt.h"
#include "reports/invoice_doc.h"

#define TS(n)       "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"
#define MONTH_OF(n) "(" TS(n) " AT TIME ZONE 'UTC')::date"

void invoice_doc_free(struct invoice_doc *d)
{
	free(d->json);
	free(d->csv);
	free(d->html);
	d->json = d->csv = d->html = NULL;
}

static bool store(PGconn *c, const char *account, int64_t month_us, meter_money total,
                  const struct invoice_doc *d, const struct meter_billed_row *rows, size_t n,
                  char *err, size_t errlen)
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
		snprintf(v[0], sizeof v[0], "%lld", (long long)rows[i].for_month_us);
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
	/* and what each sandbox used of the month, for its export (migrations/0041) */
	r = db_query(
	        c,
	        "INSERT INTO invoice_sandboxes (account_id, month, sandbox_id, price_plan_id, "
	        "cpu_measured_us, cpu_billed_us, memory_mgib_us) SELECT account_id, month, "
	        "sandbox_id, price_plan_id, cpu_measured_us, cpu_billed_us, memory_mgib_us "
	        "FROM sandbox_month WHERE account_id = $1 AND month = " MONTH_OF(
	                "$2") " "
	                      "AND (cpu_measured_us, cpu_billed_us, memory_mgib_us) <> (0, 0, 0)",
	        2, p, PGRES_COMMAND_OK, "could not store what the sandboxes used", err, errlen);
	PQclear(r);
	return r != NULL;
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

bool invoice_get(PGconn *c, const char *account, int64_t month_us, int64_t now_us, int64_t grace_us,
                 const struct meter_plan *plans, size_t nplans, struct invoice_doc *out, char *err,
                 size_t errlen)
{
	char m[24];
	PGresult *r = NULL;
	struct ledger l;
	bool ok = false, locked = false, ledger_locked = false;
	memset(out, 0, sizeof *out);
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	const char *p[] = {account, m};
	int64_t due = meter_month_next(month_us) + grace_us;
	/* The account's lock first, then one snapshot for every read (REPEATABLE READ
	 * takes its snapshot at the first statement, after the lock is granted). A month
	 * that may be made final takes the account's ledger lock too: making it final
	 * changes the adjustments of the months after it, and the month to date kept is
	 * computed again in the same transaction (common/ledgerdb.h). */
	r = db_query(c, "SELECT pg_advisory_lock(hashtext('meter.invoice:' || $1))", 1, p,
	             PGRES_TUPLES_OK, "could not lock the account's invoices", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	locked = true;
	if (now_us >= due) {
		r = db_query(c, "SELECT pg_advisory_lock(hashtext('meter.ledger:' || $1))", 1, p,
		             PGRES_TUPLES_OK, "could not lock the account's ledger", err, errlen);
		if (r == NULL)
			goto out;
		PQclear(r);
		ledger_locked = true;
	}
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
	if (!ledger_month(c, account, month_us, 0, plans, nplans, &l, err, errlen))
		goto out;
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
	cJSON *j = report_invoice_json(&meta, &l.inv);
	out->json = j ? cJSON_PrintUnformatted(j) : NULL;
	cJSON_Delete(j);
	out->csv = report_invoice_csv(&meta, &l.inv);
	out->html = report_invoice_html(&meta, &l.inv);
	if (out->json == NULL || out->csv == NULL || out->html == NULL) {
		snprintf(err, errlen, "could not render the invoice: out of memory");
		goto out;
	}
	if (out->final &&
	    (!store(c, account, month_us, l.inv.total, out, l.rows, l.nrows, err, errlen) ||
	     !limits_check_usage(c, account, now_us, plans, nplans, err, errlen)))
		goto out;
	PQclear(r);
	r = db_query(c, out->final ? "COMMIT" : "ROLLBACK", 0, NULL, PGRES_COMMAND_OK,
	             "could not commit the invoice", err, errlen);
	ok = r != NULL;
out:
	PQclear(r);
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	if (ledger_locked)
		PQclear(PQexecParams(c,
		                     "SELECT pg_advisory_unlock(hashtext('meter.ledger:' || $1))",
		                     1, NULL, p, NULL, NULL, 0));
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
	        "SELECT account_id, (extract(epoch FROM m::timestamp) * 1000000)::bigint AS month "
	        "FROM (SELECT DISTINCT m.account_id, m.month m FROM account_month m "
	        "WHERE (m.month + interval '1 month')::timestamp AT TIME ZONE 'UTC' <= " TS(
	                "$1") " "
	                      "AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.account_id = "
	                      "m.account_id "
	                      "AND i.month = m.month) "
	                      /* a month with no usage of its own that an adjustment goes on
	                         (common/ledgerdb.h) */
	                      "UNION SELECT g.account_id, g.adjusting_month FROM account_ledger g "
	                      "WHERE (g.adjusting_month + interval '1 month')::timestamp AT TIME "
	                      "ZONE 'UTC' <= " TS("$1") " "
	                                                "AND NOT EXISTS (SELECT 1 FROM invoices i "
	                                                "WHERE i.account_id = g.account_id "
	                                                "AND i.month = g.adjusting_month)) due "
	                                                "ORDER BY month, account_id LIMIT $2",
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
