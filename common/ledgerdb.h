/*
 * common/ledgerdb.h: the money of an account's month, computed in one place.
 *
 * A month's money is the lines its invoice has now: the month's usage per
 * price plan (rule 6), the adjustments of earlier months whose invoices are
 * final (the usage they have now less what final invoices billed for them),
 * and the trial's credit (rule 8), each line priced once (meter/invoice.h).
 * Every figure that shows a month's money comes from ledger_month: the
 * invoice (common/invoicedb.h), the month to date of the account, of the
 * quota check and of the dashboard, the spend cap's decision (limit notices
 * and account_limits, common/limits.h), the forecast's month to date and the
 * FOCUS export (common/export.h).
 *
 * The quota check cannot compute it on its hot path: the figure of the
 * current month is kept in account_ledger (migrations/0040) by ledger_keep,
 * which common/limits.c calls in every transaction that changes what the
 * figure is computed from (a rollup batch, the trial's pass, an invoice made
 * final, a change of the account), under ledger_lock.
 */
#ifndef COMMON_LEDGER_H
#define COMMON_LEDGER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/invoice.h"
#include "meter/ledger.h"
#include "meter/money.h"
#include "meter/plan.h"

#define LEDGER_ROWS_MAX (4 * METER_LEDGER_PLANS)

struct ledger {
	struct meter_invoice inv;                      /* the lines, and their exact total */
	struct meter_billed_row rows[LEDGER_ROWS_MAX]; /* what they bill, per month and plan */
	size_t nrows;
	int64_t adjusting_us; /* the earliest month an adjustment goes on, or METER_TIME_NONE */
	bool found;           /* false: no such account */
};

/*
 * The lines of account's month (starting at month_us, UTC) now: its usage,
 * counting only intervals that end by until_us when it is not 0 (the month
 * to date as it stood then), then the adjustments of every earlier final
 * month (meter/ledger.h). plans are all price plans (the lines point into
 * them). Reads in the caller's transaction, if any. False with err when the
 * database fails or a figure does not fit; out->found false when there is no
 * such account.
 */
bool ledger_month(PGconn *c, const char *account, int64_t month_us, int64_t until_us,
                  const struct meter_plan *plans, size_t nplans, struct ledger *out, char *err,
                  size_t errlen);

/*
 * The same for many accounts at the cost of four reads: ledger_load reads
 * what the months of the accounts in accounts (a text[] literal) are
 * computed from (NULL with err when it fails), ledger_of computes one
 * account's, and ledger_set_free (NULL-safe) frees what was read.
 */
struct ledger_set;
bool ledger_load(PGconn *c, const char *accounts, int64_t month_us, int64_t until_us,
                 struct ledger_set **out, char *err, size_t errlen);
bool ledger_of(const struct ledger_set *s, const char *account, const struct meter_plan *plans,
               size_t nplans, struct ledger *out, char *err, size_t errlen);
void ledger_set_free(struct ledger_set *s);

/* The accounts' ids as a text[] literal into out; false when it does not fit. */
bool ledger_accounts(const char *const *ids, size_t n, char *out, size_t len);

/*
 * Takes, in the caller's transaction, the ledger locks of the accounts in
 * accounts (an SQL text[] literal), in one order whoever takes them: a
 * figure kept under them was computed from everything committed before.
 */
bool ledger_lock(PGconn *c, const char *accounts, char *err, size_t errlen);

/* What account_ledger keeps of an account: this month's money so far, and the earliest
 * month an adjustment goes on (METER_TIME_NONE: none). */
struct ledger_kept {
	int64_t month_us;
	meter_money month_to_date;
	int64_t adjusting_us;
};

/*
 * Keeps now as account's row of account_ledger when it differs from was
 * (what the row says; was NULL when there is none). Call it under the
 * account's ledger lock, in the transaction that changed the figure.
 */
bool ledger_keep(PGconn *c, const char *account, const struct ledger_kept *now,
                 const struct ledger_kept *was, char *err, size_t errlen);

#endif
