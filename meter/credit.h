/*
 * meter/credit.h: what credit grants give each month (rule 11).
 *
 * A grant is money the platform gives an account: an exact amount, usable
 * from effective_at, until expires_at if it has one. A month's invoice
 * applies grants after its trial credit and adjustment lines, to what those
 * leave: each usable grant (effective before the month ends, not expired
 * before it starts, not voided) in order of priority (lower first), then
 * soonest expiry (none last), then effective_at, then id, takes the least of
 * its balance and what is left. A total never goes below zero.
 *
 * Months take in order. A grant's balance for a month is its amount less
 * what final invoices took of it and what earlier months' drafts take. A
 * final month took what it recorded, and that never changes: a void or an
 * expiry afterwards leaves it as it was. Here it is computed from plain
 * values; common/ reads the grants and what finals recorded. No I/O.
 */
#ifndef METER_CREDIT_H
#define METER_CREDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/money.h"
#include "meter/status.h"

#define METER_CREDITS_MAX 10000 /* grants of one account */

struct meter_credit {
	int64_t id;
	meter_money amount;   /* > 0 */
	int64_t effective_us; /* from when it may be used */
	int64_t expires_us;   /* METER_TIME_NONE: never */
	int64_t priority;     /* lower applies first */
	bool voided;          /* applies to no month that is not final */
};

/* One month of the account, oldest first. */
struct meter_credit_month {
	int64_t start_us, end_us; /* [start, end) */
	meter_money remaining;    /* what its lines leave after trial and adjustments */
	bool final;
	const meter_money *recorded; /* final: what it took of each grant (n, as g); else unused */
};

/*
 * takes[i * n + j] = what month i takes of grant j. A final month's row is
 * what it recorded; the drafts, oldest first, take in rule 11's order from
 * each grant's amount less what every final month took and what earlier
 * drafts took. A draft whose remaining is not positive takes nothing.
 * METER_EINVAL when a grant's amount is not positive, its expiry is not after
 * it is effective, a month ends before it starts, or what final months
 * recorded is negative or more than a grant's amount; METER_ERANGE for more
 * than METER_CREDITS_MAX grants (or no memory for them).
 * Nothing is written then.
 */
enum meter_status meter_credits_apply(const struct meter_credit *g, size_t n,
                                      const struct meter_credit_month *m, size_t nm,
                                      meter_money *takes);

/* Whether grant g may be used in [start_us, end_us): effective before its end, not
 * expired by its start (voids aside). */
bool meter_credit_usable(const struct meter_credit *g, int64_t start_us, int64_t end_us);

#endif
