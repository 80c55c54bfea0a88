#include "common/limits.h"

#include <stdio.h>
#include <string.h>

#include "common/db.h"
#include "common/month.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/money.h"
#include "meter/timefmt.h"
#include "reports/invoice.h"

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

bool limits_check_usage(PGconn *c, const char *account, int64_t now_us,
                        const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	const char *p[] = {account};
	PGresult *r =
	        PQexecParams(c,
	                     "SELECT a.trial_grant_seconds * 1000000, a.monthly_spend_cap::text, "
	                     "(SELECT coalesce(sum(wall_us), 0) FROM account_month m WHERE "
	                     "m.account_id = $1), "
	                     "EXISTS (SELECT 1 FROM limit_notices n WHERE n.account_id = $1 "
	                     "  AND n.limit_name = 'trial_spent'), a.plan = 'trial' "
	                     "FROM accounts a WHERE a.id = $1",
	                     1, NULL, p, NULL, NULL, 0);
	if (!db_check(r, PGRES_TUPLES_OK, "could not read the account's limits", err, errlen)) {
		PQclear(r);
		return false;
	}
	if (PQntuples(r) != 1) {
		PQclear(r);
		return true;
	}
	int64_t grant = 0, used = 0;
	meter_money cap = 0;
	bool has_cap = !PQgetisnull(r, 0, 1), told = strcmp(PQgetvalue(r, 0, 3), "t") == 0;
	bool trial = strcmp(PQgetvalue(r, 0, 4), "t") == 0;
	bool ok = meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, &grant) == METER_OK &&
	          meter_decimal_parse(PQgetvalue(r, 0, 2), 0, false, &used) == METER_OK &&
	          (!has_cap || meter_money_parse(PQgetvalue(r, 0, 1), false, &cap) == METER_OK);
	PQclear(r);
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
	bool cap_reached = false;
	int64_t month = meter_month_start(now_us);
	meter_money total = 0;
	if (has_cap) {
		/* Month to date: this month's invoice lines, the trial's credit included. */
		struct month_usage mu;
		struct meter_invoice inv;
		if (!month_usage_load(c, account, month, 0, plans, nplans, &mu, err, errlen))
			return false;
		if (meter_invoice_build(mu.plans, mu.n, &inv) != METER_OK) {
			snprintf(err, errlen, "account %s: the month so far cannot be computed",
			         account);
			return false;
		}
		total = inv.total;
		cap_reached = inv.total >= cap;
	}
	if (!limits_keep(c, account, trial && grant > 0 && used >= grant, cap_reached, month, err,
	                 errlen))
		return false;
	if (!cap_reached)
		return true;
	char m[16], spent[METER_MONEY_BUF], capt[METER_MONEY_BUF];
	report_month(month, m, sizeof m);
	meter_money_format_exact(total, spent, sizeof spent);
	meter_money_format_exact(cap, capt, sizeof capt);
	snprintf(payload, sizeof payload,
	         "{\"account_id\": \"%s\", \"limit\": \"spend_cap_reached\", \"month\": \"%s\", "
	         "\"month_to_date\": \"%s\", \"monthly_spend_cap\": \"%s\"}",
	         account, m, spent, capt);
	return limits_notify(c, account, "spend_cap_reached", m, payload, err, errlen);
}
