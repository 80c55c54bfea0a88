#include "common/ledger.h"

#include <stdio.h>
#include <string.h>

#include "common/db.h"
#include "meter/checked.h"
#include "meter/decimal.h"

#define TS(n)       "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"
#define MONTH_OF(n) "(" TS(n) " AT TIME ZONE 'UTC')::date"

static bool col(const PGresult *r, int row, int c, int64_t *out)
{
	return meter_decimal_parse(PQgetvalue(r, row, c), 0, true, out) == METER_OK;
}

/* a -= b, for the quantities an invoice bills (billed CPU, memory, sandbox time). */
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

static const struct meter_plan *plan_by_id(const struct meter_plan *plans, size_t n, int64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (plans[i].id == id)
			return &plans[i];
	return NULL;
}

static bool add_row(struct ledger *l, int64_t for_month, int64_t plan,
                    const struct meter_usage *used, const struct meter_usage *covered, char *err,
                    size_t errlen)
{
	if (l->nrows == LEDGER_ROWS_MAX) {
		snprintf(err, errlen, "too many adjustments for one invoice");
		return false;
	}
	l->rows[l->nrows++] = (struct ledger_row){
	        .for_month = for_month, .plan_id = plan, .used = *used, .covered = *covered};
	return true;
}

/* The usage final month f has now less what final invoices billed for it, per plan, into
 * delta (room for MONTH_PLANS_MAX); *nd how many. */
static bool month_delta(PGconn *c, const char *account, int64_t f, const struct meter_plan *plans,
                        size_t nplans, struct meter_plan_usage *delta, size_t *nd, char *err,
                        size_t errlen)
{
	struct month_usage now;
	if (!month_usage_load(c, account, f, 0, plans, nplans, &now, err, errlen))
		return false;
	char fs[24];
	snprintf(fs, sizeof fs, "%lld", (long long)f);
	const char *bp[] = {account, fs};
	PGresult *b =
	        db_query(c,
	                 "SELECT price_plan_id, sum(cpu_billed_us), sum(memory_mgib_us), "
	                 "sum(wall_us), sum(covered_cpu_billed_us), "
	                 "sum(covered_memory_mgib_us), sum(covered_wall_us) "
	                 "FROM invoice_quantities WHERE account_id = $1 "
	                 "AND for_month = " MONTH_OF("$2") " GROUP BY price_plan_id",
	                 2, bp, PGRES_TUPLES_OK, "could not read final invoices", err, errlen);
	if (b == NULL)
		return false;
	*nd = 0;
	for (size_t k = 0; k < now.n; k++)
		delta[(*nd)++] = now.plans[k];
	bool ok = true;
	for (int r = 0; ok && r < PQntuples(b); r++) {
		int64_t plan;
		struct meter_usage used = {0}, cov = {0};
		ok = col(b, r, 0, &plan) && db_col_q(b, r, 1, &used.cpu_billed_us) &&
		     db_col_q(b, r, 2, &used.mem_mgib_us) && db_col_q(b, r, 3, &used.wall_us) &&
		     db_col_q(b, r, 4, &cov.cpu_billed_us) && db_col_q(b, r, 5, &cov.mem_mgib_us) &&
		     db_col_q(b, r, 6, &cov.wall_us);
		size_t k = 0;
		while (ok && k < *nd && delta[k].plan->id != plan)
			k++;
		if (ok && k == *nd) {
			const struct meter_plan *pl = plan_by_id(plans, nplans, plan);
			if (pl == NULL || *nd == MONTH_PLANS_MAX) {
				ok = false;
				break;
			}
			delta[(*nd)++] = (struct meter_plan_usage){.plan = pl};
		}
		ok = ok && sub(&delta[k].used, &used) && sub(&delta[k].covered, &cov);
	}
	PQclear(b);
	if (!ok)
		snprintf(err, errlen, "the adjustments of a final month cannot be computed");
	return ok;
}

/* Adds the adjustment lines of every final month before month_us to l. */
static bool adjustments(PGconn *c, const char *account, int64_t month_us,
                        const struct meter_plan *plans, size_t nplans, struct ledger *l, char *err,
                        size_t errlen)
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
		struct meter_plan_usage delta[MONTH_PLANS_MAX], changed[MONTH_PLANS_MAX];
		size_t nd = 0, nc = 0;
		ok = col(months, i, 0, &f) &&
		     month_delta(c, account, f, plans, nplans, delta, &nd, err, errlen);
		for (size_t k = 0; ok && k < nd; k++)
			if (nonzero(&delta[k].used) || nonzero(&delta[k].covered)) {
				changed[nc++] = delta[k];
				ok = add_row(l, f, delta[k].plan->id, &delta[k].used,
				             &delta[k].covered, err, errlen);
			}
		if (ok && nc && meter_invoice_adjust(&l->inv, f, changed, nc) != METER_OK) {
			snprintf(err, errlen,
			         "the adjustments of a final month cannot be computed");
			ok = false;
		}
	}
	PQclear(months);
	return ok;
}

bool ledger_month(PGconn *c, const char *account, int64_t month_us, int64_t until_us,
                  const struct meter_plan *plans, size_t nplans, struct ledger *out, char *err,
                  size_t errlen)
{
	struct month_usage mu;
	memset(out, 0, sizeof *out);
	if (!month_usage_load(c, account, month_us, until_us, plans, nplans, &mu, err, errlen))
		return false;
	out->found = mu.found;
	if (!mu.found)
		return true;
	if (meter_invoice_build(mu.plans, mu.n, &out->inv) != METER_OK) {
		snprintf(err, errlen, "the month's lines cannot be computed");
		return false;
	}
	for (size_t i = 0; i < mu.n; i++)
		if (!add_row(out, month_us, mu.plans[i].plan->id, &mu.plans[i].used,
		             &mu.plans[i].covered, err, errlen))
			return false;
	return adjustments(c, account, month_us, plans, nplans, out, err, errlen);
}

bool ledger_lock(PGconn *c, const char *accounts, char *err, size_t errlen)
{
	/* by the lock's key: two accounts whose keys collide are one lock, taken at one place
	 * in every order */
	const char *p[] = {accounts};
	PGresult *r = db_query(c,
	                       "SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT "
	                       "hashtext('meter.ledger:' || a) k FROM unnest($1::text[]) a) x "
	                       "ORDER BY k",
	                       1, p, PGRES_TUPLES_OK, "could not lock the accounts' ledgers", err,
	                       errlen);
	PQclear(r);
	return r != NULL;
}

bool ledger_keep(PGconn *c, const char *account, int64_t month_us, meter_money month_to_date,
                 int64_t kept_month, meter_money kept, char *err, size_t errlen)
{
	if (kept_month == month_us && kept == month_to_date)
		return true; /* an unchanged row written is a commit for nothing */
	char m[24], v[METER_MONEY_BUF];
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	meter_money_format_exact(month_to_date, v, sizeof v);
	const char *p[] = {account, m, v};
	PGresult *r = db_query(
	        c,
	        "INSERT INTO account_ledger AS l (account_id, month, month_to_date) "
	        "VALUES ($1, " MONTH_OF(
	                "$2") ", $3::numeric) "
	                      "ON CONFLICT (account_id) DO UPDATE SET month = EXCLUDED.month, "
	                      "month_to_date = EXCLUDED.month_to_date, "
	                      "updated_at = EXCLUDED.updated_at",
	        3, p, PGRES_COMMAND_OK, "could not keep the account's month to date", err, errlen);
	PQclear(r);
	return r != NULL;
}
