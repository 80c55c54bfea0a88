/*
 * common/limits.h: telling enforcement hooks that an account crossed a limit.
 *
 * meter_notify_limit() (migration 0005) records the crossing and sends one
 * NOTIFY on channel "meter_limits" with a JSON payload; a crossing already
 * recorded sends nothing. Call these inside the transaction that crossed.
 */
#ifndef COMMON_LIMITS_H
#define COMMON_LIMITS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/plan.h"

#define LIMITS_CHANNEL "meter_limits"

/* Records and announces one crossing; payload is a JSON object's text. */
bool limits_notify(PGconn *c, const char *account, const char *limit, const char *period,
                   const char *payload, char *err, size_t errlen);

/*
 * After an account's usage, plan or limits changed, in that transaction:
 * keeps the month to date of the month holding now_us (common/ledgerdb.h,
 * account_ledger, under the account's ledger lock), announces its trial
 * grant spent (when it had one) and its monthly spend cap reached (when it
 * has one), and keeps account_limits (migration 0027: whether it is a trial
 * account past its grant, whether its month reached the cap), which
 * collectors that enforce limits read.
 */
bool limits_check_usage(PGconn *c, const char *account, int64_t now_us,
                        const struct meter_plan *plans, size_t nplans, char *err, size_t errlen);

/*
 * The same for the accounts in accounts (a text[] literal) at the cost of a
 * few reads for all of them, in one order of their ledger locks. False with
 * err (naming the account) at the first that cannot be checked.
 */
bool limits_check(PGconn *c, const char *accounts, int64_t now_us, const struct meter_plan *plans,
                  size_t nplans, char *err, size_t errlen);

#endif
