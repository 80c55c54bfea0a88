#include "common/ledgerdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

#define TS(n)       "('epoch'::timestamptz + (" n ")::bigint * interval '1 microsecond')"
#define MONTH_OF(n) "(" TS(n) " AT TIME ZONE 'UTC')::date"
#define EPOCH(d)    "(extract(epoch FROM (" d ")::timestamp) * 1000000)::bigint"
#define SUMS                                                                                       \
	"sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), sum(wall_us), "     \
	"sum(memory_mgib_us)"

/* clang-format off */

/* $1 accounts (text[]): id, grant (µs), the hour its grant ran out in (µs, NULL: not yet). */
static const char accounts_sql[] =
	"SELECT a.id, a.trial_grant_seconds * 1000000, " EPOCH("t.hour AT TIME ZONE 'UTC'") " "
	"FROM accounts a LEFT JOIN trial_crossing t ON t.account_id = a.id "
	"AND t.account_id = ANY ($1::text[]) WHERE a.id = ANY ($1::text[])";

/* Usage per month and plan: every month up to $2 (µs) whole, from account_month; with a
 * bound $3 (µs), $2's month from its hours before that bound instead. Rows: account,
 * month (µs), plan, six sums. */
static const char used_sql[] =
	"SELECT account_id, " EPOCH("month") ", price_plan_id, cpu_measured_us, cpu_billed_us, "
	"busy_us, idle_us, wall_us, memory_mgib_us FROM account_month "
	"WHERE account_id = ANY ($1::text[]) AND month <= " MONTH_OF("$2");
static const char used_until_sql[] =
	"SELECT account_id, " EPOCH("month") ", price_plan_id, cpu_measured_us, cpu_billed_us, "
	"busy_us, idle_us, wall_us, memory_mgib_us FROM account_month "
	"WHERE account_id = ANY ($1::text[]) AND month < " MONTH_OF("$2") " "
	"UNION ALL SELECT account_id, $2::bigint, price_plan_id, " SUMS " FROM usage_hourly "
	"WHERE account_id = ANY ($1::text[]) AND hour >= " TS("$2") " AND hour < " TS("$3") " "
	"GROUP BY account_id, price_plan_id";

/* The months before $2 with a final invoice, and what final invoices billed for each per
 * plan. Rows: account, month (µs), plan (NULL: a final invoice of that month), billed
 * CPU, memory and sandbox time, and the covered part of each. */
static const char billed_sql[] =
	"SELECT account_id, " EPOCH("for_month") ", price_plan_id, sum(cpu_billed_us), "
	"sum(memory_mgib_us), sum(wall_us), sum(covered_cpu_billed_us), "
	"sum(covered_memory_mgib_us), sum(covered_wall_us) FROM invoice_quantities "
	"WHERE account_id = ANY ($1::text[]) AND for_month < " MONTH_OF("$2") " "
	"GROUP BY account_id, for_month, price_plan_id "
	"UNION ALL SELECT account_id, " EPOCH("month") ", NULL, 0, 0, 0, 0, 0, 0 FROM invoices "
	"WHERE account_id = ANY ($1::text[]) AND month < " MONTH_OF("$2");

/* Where the grant ran out in a month up to $2's: that month's hours before the crossing
 * hour, and the crossing hour's covered part (trial_cover). Rows: kind ('b' or 'c'),
 * account, plan, six sums. The hours before the crossing hold at most the grant's time. */
static const char crossing_sql[] =
	"SELECT 'b', u.account_id, u.price_plan_id, " SUMS " FROM trial_crossing t "
	"JOIN usage_hourly u ON u.account_id = t.account_id "
	"WHERE t.account_id = ANY ($1::text[]) AND u.account_id = ANY ($1::text[]) "
	"AND t.hour < " TS("$2") " "
	"AND u.hour >= date_trunc('month', t.hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
	"AND u.hour < t.hour GROUP BY u.account_id, u.price_plan_id "
	"UNION ALL SELECT 'c', account_id, price_plan_id, cpu_measured_us, cpu_billed_us, "
	"busy_us, idle_us, wall_us, memory_mgib_us FROM trial_cover "
	"WHERE account_id = ANY ($1::text[])";

/* clang-format on */

struct ledger_account {
	char id[160];
	int64_t grant_us, crossing_us;
	size_t first, n; /* its rows in set->rows */
};

struct ledger_set {
	int64_t month_us, hours_end_us;
	struct ledger_account *accounts;
	size_t naccounts;
	struct meter_ledger_row *rows; /* grouped by account, in the order of accounts */
	size_t nrows;
};

void ledger_set_free(struct ledger_set *s)
{
	if (s == NULL)
		return;
	free(s->accounts);
	free(s->rows);
	free(s);
}

static bool col(const PGresult *r, int row, int c, int64_t *out)
{
	return meter_decimal_parse(PQgetvalue(r, row, c), 0, true, out) == METER_OK;
}

static struct ledger_account *account_of(struct ledger_set *s, const char *id)
{
	for (size_t i = 0; i < s->naccounts; i++)
		if (strcmp(s->accounts[i].id, id) == 0)
			return &s->accounts[i];
	return NULL;
}

/* The rows read, one per result row, with their account (by index) into *rows. */
struct pending {
	size_t account;
	struct meter_ledger_row row;
};

/* Reads the rows of one statement's result into p (grown), kind by kind. */
static bool take_rows(struct ledger_set *s, const PGresult *r, int which, struct pending **p,
                      size_t *n, size_t *cap)
{
	for (int i = 0; i < PQntuples(r); i++) {
		struct meter_ledger_row row = {0};
		int base = which == 3 ? 1 : 0; /* crossing rows lead with their kind */
		struct ledger_account *a = account_of(s, PQgetvalue(r, i, base));
		if (a == NULL)
			continue; /* an account that is not there any more */
		bool ok = true;
		if (which == 1) { /* used: account, month, plan, six sums */
			row.kind = METER_LEDGER_USED;
			ok = col(r, i, 1, &row.month_us) && col(r, i, 2, &row.plan_id) &&
			     db_col_usage(r, i, 3, &row.u);
		} else if (which == 2) { /* billed, or a final invoice */
			ok = col(r, i, 1, &row.month_us);
			if (PQgetisnull(r, i, 2)) {
				row.kind = METER_LEDGER_FINAL;
			} else {
				row.kind = METER_LEDGER_BILLED;
				ok = ok && col(r, i, 2, &row.plan_id) &&
				     db_col_q(r, i, 3, &row.u.cpu_billed_us) &&
				     db_col_q(r, i, 4, &row.u.mem_mgib_us) &&
				     db_col_q(r, i, 5, &row.u.wall_us) &&
				     db_col_q(r, i, 6, &row.covered.cpu_billed_us) &&
				     db_col_q(r, i, 7, &row.covered.mem_mgib_us) &&
				     db_col_q(r, i, 8, &row.covered.wall_us);
			}
		} else { /* before the crossing hour, or its cover: of the crossing's month */
			if (a->crossing_us == METER_TIME_NONE)
				continue;
			row.kind = PQgetvalue(r, i, 0)[0] == 'b' ? METER_LEDGER_BEFORE
			                                         : METER_LEDGER_COVER;
			row.month_us = meter_month_start(a->crossing_us);
			ok = col(r, i, 2, &row.plan_id) && db_col_usage(r, i, 3, &row.u);
		}
		if (!ok)
			return false;
		if (*n == *cap) {
			size_t more = *cap ? 2 * *cap : 64;
			struct pending *q = realloc(*p, more * sizeof *q);
			if (q == NULL)
				return false;
			*p = q;
			*cap = more;
		}
		(*p)[(*n)++] = (struct pending){.account = (size_t)(a - s->accounts), .row = row};
	}
	return true;
}

bool ledger_load(PGconn *c, const char *accounts, int64_t month_us, int64_t until_us,
                 struct ledger_set **out, char *err, size_t errlen)
{
	struct ledger_set *s = calloc(1, sizeof *s);
	struct pending *p = NULL;
	size_t np = 0, cap = 0;
	PGresult *r = NULL;
	bool ok = false;
	*out = NULL;
	if (s == NULL) {
		snprintf(err, errlen, "the month's money cannot be computed: out of memory");
		return false;
	}
	s->month_us = month_us;
	s->hours_end_us = meter_month_next(month_us);
	/* part of the month: the hour buckets whose intervals all end by until_us (a bucket h
	 * holds ends in (h, h + 1 h]) */
	bool part = until_us > 0 && until_us < s->hours_end_us;
	if (part)
		s->hours_end_us = until_us - METER_US_PER_HOUR + 1;
	char m[24], e[24];
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	snprintf(e, sizeof e, "%lld", (long long)s->hours_end_us);
	const char *pa[] = {accounts, m, e};
	r = db_query(c, accounts_sql, 1, pa, PGRES_TUPLES_OK, "could not read the accounts", err,
	             errlen);
	if (r == NULL)
		goto out;
	s->naccounts = (size_t)PQntuples(r);
	s->accounts = calloc(s->naccounts ? s->naccounts : 1, sizeof *s->accounts);
	if (s->accounts == NULL)
		goto oom;
	for (size_t i = 0; i < s->naccounts; i++) {
		struct ledger_account *a = &s->accounts[i];
		snprintf(a->id, sizeof a->id, "%s", PQgetvalue(r, (int)i, 0));
		a->crossing_us = METER_TIME_NONE;
		if (!col(r, (int)i, 1, &a->grant_us) ||
		    (!PQgetisnull(r, (int)i, 2) && !col(r, (int)i, 2, &a->crossing_us))) {
			snprintf(err, errlen, "account %s has a malformed grant or crossing",
			         a->id);
			goto out;
		}
	}
	PQclear(r);
	r = NULL;
	/* the months' usage, what final invoices billed, the crossing's month; the last up to
	 * the month's end, whatever the bound */
	char next[24];
	snprintf(next, sizeof next, "%lld", (long long)meter_month_next(month_us));
	const char *crossing_p[] = {accounts, next};
	const struct {
		const char *sql, *what;
		int n;
		const char *const *params;
	} reads[] = {{part ? used_until_sql : used_sql, "could not read the months' usage",
	              part ? 3 : 2, pa},
	             {billed_sql, "could not read final invoices", 2, pa},
	             {crossing_sql, "could not read the trial's crossing", 2, crossing_p}};
	for (int k = 0; k < 3 && s->naccounts > 0; k++) {
		r = db_query(c, reads[k].sql, reads[k].n, reads[k].params, PGRES_TUPLES_OK,
		             reads[k].what, err, errlen);
		if (r == NULL)
			goto out;
		if (!take_rows(s, r, k + 1, &p, &np, &cap)) {
			snprintf(err, errlen,
			         "the month's money cannot be computed: a malformed "
			         "row, or out of memory");
			goto out;
		}
		PQclear(r);
		r = NULL;
	}
	/* grouped by account */
	s->rows = calloc(np ? np : 1, sizeof *s->rows);
	if (s->rows == NULL)
		goto oom;
	for (size_t k = 0; k < s->naccounts; k++) {
		s->accounts[k].first = s->nrows;
		for (size_t i = 0; i < np; i++)
			if (p[i].account == k)
				s->rows[s->nrows++] = p[i].row;
		s->accounts[k].n = s->nrows - s->accounts[k].first;
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "the month's money cannot be computed: out of memory");
out:
	PQclear(r);
	free(p);
	if (ok)
		*out = s;
	else
		ledger_set_free(s);
	return ok;
}

bool ledger_of(const struct ledger_set *s, const char *account, const struct meter_plan *plans,
               size_t nplans, struct ledger *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	const struct ledger_account *a = account_of((struct ledger_set *)s, account);
	if (a == NULL)
		return true; /* no such account: found stays false */
	out->found = true;
	struct meter_ledger_account in = {.grant_us = a->grant_us,
	                                  .crossing_hour_us = a->crossing_us,
	                                  .rows = s->rows + a->first,
	                                  .nrows = a->n};
	enum meter_status st =
	        meter_ledger_lines(&in, s->month_us, s->hours_end_us, plans, nplans, &out->inv,
	                           out->rows, &out->nrows, LEDGER_ROWS_MAX, &out->adjusting_us);
	if (st == METER_OK)
		return true;
	snprintf(err, errlen, "the money of account %s's month cannot be computed: %s", account,
	         st == METER_ENOPLAN ? "a price plan it was billed under is gone"
	                             : meter_strerror(st));
	return false;
}

bool ledger_month(PGconn *c, const char *account, int64_t month_us, int64_t until_us,
                  const struct meter_plan *plans, size_t nplans, struct ledger *out, char *err,
                  size_t errlen)
{
	char lit[400];
	struct ledger_set *s;
	memset(out, 0, sizeof *out);
	if (!ledger_accounts(&account, 1, lit, sizeof lit)) {
		snprintf(err, errlen, "account id \"%s\" is too long", account);
		return false;
	}
	if (!ledger_load(c, lit, month_us, until_us, &s, err, errlen))
		return false;
	bool ok = ledger_of(s, account, plans, nplans, out, err, errlen);
	ledger_set_free(s);
	return ok;
}

bool ledger_accounts(const char *const *ids, size_t n, char *out, size_t len)
{
	/* ids are meter ids (letters, digits and ._:-): nothing in them needs quoting */
	size_t at = 0;
	int w = snprintf(out, len, "{");
	for (size_t i = 0; w >= 0 && (size_t)w < len - at && i < n; i++) {
		at += (size_t)w;
		w = snprintf(out + at, len - at, "%s\"%s\"", i ? "," : "", ids[i]);
	}
	if (w < 0 || (size_t)w >= len - at)
		return false;
	at += (size_t)w;
	return snprintf(out + at, len - at, "}") == 1;
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

bool ledger_keep(PGconn *c, const char *account, const struct ledger_kept *now,
                 const struct ledger_kept *was, char *err, size_t errlen)
{
	if (was && was->month_us == now->month_us && was->month_to_date == now->month_to_date &&
	    was->adjusting_us == now->adjusting_us)
		return true; /* an unchanged row written is a commit for nothing */
	char m[24], v[METER_MONEY_BUF], adj[24];
	snprintf(m, sizeof m, "%lld", (long long)now->month_us);
	snprintf(adj, sizeof adj, "%lld", (long long)now->adjusting_us);
	meter_money_format_exact(now->month_to_date, v, sizeof v);
	const char *p[] = {account, m, v, now->adjusting_us == METER_TIME_NONE ? NULL : adj};
	PGresult *r = db_query(
	        c,
	        "INSERT INTO account_ledger AS l (account_id, month, month_to_date, "
	        "adjusting_month) "
	        "VALUES ($1, " MONTH_OF("$2") ", $3::numeric, " MONTH_OF(
	                "$4") ") "
	                      "ON CONFLICT (account_id) DO UPDATE SET month = EXCLUDED.month, "
	                      "month_to_date = EXCLUDED.month_to_date, adjusting_month = "
	                      "EXCLUDED.adjusting_month, "
	                      "updated_at = EXCLUDED.updated_at",
	        4, p, PGRES_COMMAND_OK, "could not keep the account's month to date", err, errlen);
	PQclear(r);
	return r != NULL;
}
