#include "common/limits.h"

#include <stdio.h>
#include <string.h>

#include "common/db.h"
#include "common/ledgerdb.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/quota.h"
#include "meter/money.h"
#include "meter/timefmt.h"
#include "reports/invoice_doc.h"

bool limits_notify(PGconn *c, const char *account, const char *limit, const char *period,
                   const char *payload, char *err, size_t errlen)
{
	const char *p[] = {account, limit, period, payload};
	PGresult *r = PQexecParams(c, "SELECT meter_notify_limit($1, $2, $3, $4::jsonb)", 4, NULL,
	                           p, NULL, NULL, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not announce a limit", err, errlen);
	PQclear(r);
	return ok;
}

/* Stores what limits_check_usage found, when it differs from what is stored. The
 * time of a change is the proposed row's (its default, now()): Citus refuses a
 * function in DO UPDATE SET that is not immutable. */
static bool limits_keep(PGconn *c, const char *account, bool trial_exhausted, bool cap_reached,
                        int64_t month_us, char *err, size_t errlen)
{
	char m[24];
	snprintf(m, sizeof m, "%lld", (long long)month_us);
	const char *p[] = {account, trial_exhausted ? "t" : "f", cap_reached ? "t" : "f", m};
	PGresult *r = db_query(
	        c,
	        "INSERT INTO account_limits AS l (account_id, trial_exhausted, spend_cap_reached, "
	        "month) VALUES ($1, $2, $3, (('epoch'::timestamptz + $4::bigint * interval "
	        "'1 microsecond') AT TIME ZONE 'UTC')::date) "
	        "ON CONFLICT (account_id) DO UPDATE SET trial_exhausted = "
	        "EXCLUDED.trial_exhausted, "
	        "spend_cap_reached = EXCLUDED.spend_cap_reached, month = EXCLUDED.month, "
	        "updated_at = EXCLUDED.updated_at WHERE (l.trial_exhausted, l.spend_cap_reached, "
	        "l.month) IS "
	        "DISTINCT FROM (EXCLUDED.trial_exhausted, EXCLUDED.spend_cap_reached, "
	        "EXCLUDED.month)",
	        4, p, PGRES_COMMAND_OK, "could not keep the account's limits", err, errlen);
	PQclear(r);
	return r != NULL;
}

/* What check_row needs of accounts ACCOUNTS (an SQL text[] expression), a row
 * per account that exists: its id, trial grant (µs), spend cap, wall time used over
 * every month (µs), whether its trial's end was announced, whether it is on the trial
 * plan, the account_limits row kept for it and its account_ledger row (NULLs when there
 * is none). Each table
 * is named by = ANY (ACCOUNTS), which Citus sends to those accounts' shards only. */
#define LIMITS_READ_SQL(ACCOUNTS)                                                                  \
	"SELECT a.id, a.trial_grant_seconds * 1000000, a.monthly_spend_cap::text, "                \
	"coalesce(m.wall_us, 0), n.account_id IS NOT NULL, a.plan = 'trial', "                     \
	"l.trial_exhausted, l.spend_cap_reached, "                                                 \
	"(extract(epoch FROM l.month) * 1000000)::bigint, "                                        \
	"(extract(epoch FROM g.month) * 1000000)::bigint, g.month_to_date::text, "                 \
	"(extract(epoch FROM g.adjusting_month) * 1000000)::bigint "                               \
	"FROM accounts a "                                                                         \
	"LEFT JOIN (SELECT account_id, sum(wall_us) wall_us FROM account_month "                   \
	"  WHERE account_id = ANY (" ACCOUNTS ") GROUP BY account_id) m "                          \
	"  ON m.account_id = a.id "                                                                \
	"LEFT JOIN (SELECT DISTINCT account_id FROM limit_notices "                                \
	"  WHERE account_id = ANY (" ACCOUNTS ") AND limit_name = 'trial_spent') n "               \
	"  ON n.account_id = a.id "                                                                \
	"LEFT JOIN account_limits l ON l.account_id = a.id "                                       \
	"  AND l.account_id = ANY (" ACCOUNTS ") "                                                 \
	"LEFT JOIN account_ledger g ON g.account_id = a.id "                                       \
	"  AND g.account_id = ANY (" ACCOUNTS ") "                                                 \
	"WHERE a.id = ANY (" ACCOUNTS ")"

/* Checks the account of row of LIMITS_READ_SQL's result r, its month's money in s. */
static bool check_row(PGconn *c, const PGresult *r, int row, int64_t now_us,
                      const struct ledger_set *s, const struct meter_plan *plans, size_t nplans,
                      char *err, size_t errlen)
{
	const char *account = PQgetvalue(r, row, 0);
	int64_t grant = 0, used = 0, kept_month = 0;
	meter_money cap = 0;
	struct ledger_kept was = {.adjusting_us = METER_TIME_NONE};
	bool has_cap = !PQgetisnull(r, row, 2), told = strcmp(PQgetvalue(r, row, 4), "t") == 0;
	bool trial = strcmp(PQgetvalue(r, row, 5), "t") == 0;
	bool kept = !PQgetisnull(r, row, 6), has_ledger = !PQgetisnull(r, row, 9);
	bool ok =
	        meter_decimal_parse(PQgetvalue(r, row, 1), 0, false, &grant) == METER_OK &&
	        meter_decimal_parse(PQgetvalue(r, row, 3), 0, false, &used) == METER_OK &&
	        (!has_cap || meter_money_parse(PQgetvalue(r, row, 2), false, &cap) == METER_OK) &&
	        (!kept ||
	         meter_decimal_parse(PQgetvalue(r, row, 8), 0, false, &kept_month) == METER_OK) &&
	        (!has_ledger ||
	         (meter_decimal_parse(PQgetvalue(r, row, 9), 0, false, &was.month_us) == METER_OK &&
	          meter_money_parse(PQgetvalue(r, row, 10), true, &was.month_to_date) == METER_OK &&
	          (PQgetisnull(r, row, 11) || meter_decimal_parse(PQgetvalue(r, row, 11), 0, true,
	                                                          &was.adjusting_us) == METER_OK)));
	if (!ok) {
		snprintf(err, errlen, "account %s has malformed limits", account);
		return false;
	}
	char payload[512];
	if (grant > 0 && used >= grant && !told) {
		snprintf(payload, sizeof payload,
		         "{\"account_id\": \"%s\", \"limit\": \"trial_spent\", "
		         "\"grant_seconds\": %lld, \"used_seconds\": %lld}",
		         account, (long long)(grant / 1000000), (long long)(used / 1000000));
		if (!limits_notify(c, account, "trial_spent", "", payload, err, errlen))
			return false;
	}
	/* Month to date: this month's money (common/ledgerdb.h), kept for the quota check. */
	int64_t month = meter_month_start(now_us);
	struct ledger l;
	if (!ledger_of(s, account, plans, nplans, &l, err, errlen))
		return false;
	struct ledger_kept now = {
	        .month_us = month, .month_to_date = l.inv.total, .adjusting_us = l.adjusting_us};
	if (!ledger_keep(c, account, &now, has_ledger ? &was : NULL, err, errlen))
		return false;
	bool cap_reached = has_cap && meter_cap_reached(l.inv.total, cap);
	/* Written only when it changes: the rollup checks an account after each batch that
	 * rated one of its sandboxes, and an unchanged row written is a commit for nothing. */
	bool exhausted = meter_trial_exhausted(trial, grant, used);
	bool same = kept && (strcmp(PQgetvalue(r, row, 6), "t") == 0) == exhausted &&
	            (strcmp(PQgetvalue(r, row, 7), "t") == 0) == cap_reached && kept_month == month;
	if (!same && !limits_keep(c, account, exhausted, cap_reached, month, err, errlen))
		return false;
	if (!cap_reached)
		return true;
	char m[16], spent[METER_MONEY_BUF], capt[METER_MONEY_BUF];
	report_month(month, m, sizeof m);
	meter_money_format_exact(l.inv.total, spent, sizeof spent);
	meter_money_format_exact(cap, capt, sizeof capt);
	snprintf(payload, sizeof payload,
	         "{\"account_id\": \"%s\", \"limit\": \"spend_cap_reached\", \"month\": \"%s\", "
	         "\"month_to_date\": \"%s\", \"monthly_spend_cap\": \"%s\"}",
	         account, m, spent, capt);
	return limits_notify(c, account, "spend_cap_reached", m, payload, err, errlen);
}

bool limits_check(PGconn *c, const char *accounts, int64_t now_us, const struct meter_plan *plans,
                  size_t nplans, char *err, size_t errlen)
{
	const char *p[] = {accounts};
	struct ledger_set *s = NULL;
	PGresult *r = NULL;
	bool ok = ledger_lock(c, accounts, err, errlen) &&
	          (r = db_query(c, LIMITS_READ_SQL("$1::text[]"), 1, p, PGRES_TUPLES_OK,
	                        "could not read the accounts' limits", err, errlen)) != NULL &&
	          ledger_load(c, accounts, meter_month_start(now_us), 0, &s, err, errlen);
	for (int i = 0; ok && i < PQntuples(r); i++) {
		char why[512];
		ok = check_row(c, r, i, now_us, s, plans, nplans, why, sizeof why);
		if (!ok)
			snprintf(err, errlen, "account %s: %s", PQgetvalue(r, i, 0), why);
	}
	ledger_set_free(s);
	PQclear(r);
	return ok;
}

bool limits_check_usage(PGconn *c, const char *account, int64_t now_us,
                        const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	char lit[400];
	if (!ledger_accounts(&account, 1, lit, sizeof lit)) {
		snprintf(err, errlen, "account id \"%s\" is too long", account);
		return false;
	}
	return limits_check(c, lit, now_us, plans, nplans, err, errlen);
}
