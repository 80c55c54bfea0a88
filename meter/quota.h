/*
 * meter/quota.h: whether an account may start one more sandbox, and the
 * limits it stands at.
 *
 * The one place of the decisions the quota check, the registration of a
 * sandbox, limit notices and account_limits (what enforcing collectors act
 * on) take: the trial used up (a trial account, no card, whose grant is
 * spent), the monthly spend cap reached (the month to date, net of the
 * trial, at or above the cap) and the concurrency limit. Plain values in,
 * a reason out; the figures themselves come from the ledger.
 */
#ifndef METER_QUOTA_H
#define METER_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "meter/money.h"

enum meter_quota_reason {
	METER_QUOTA_OK,
	METER_QUOTA_TRIAL_EXHAUSTED,
	METER_QUOTA_SPEND_CAP_REACHED,
	METER_QUOTA_CONCURRENCY_LIMIT,
};

/* Where an account stands. */
struct meter_quota_state {
	bool trial_plan;                 /* on the trial plan: no card */
	int64_t grant_us, trial_used_us; /* its trial grant, and what of it is used */
	bool has_cap;                    /* a monthly spend cap is set */
	meter_money cap, month_to_date;  /* the cap; the month's money so far, exact */
	int64_t running, max_concurrent; /* sandboxes running now; the limit */
};

/* A trial account whose grant is used up (a grant of 0 is used up at once). */
bool meter_trial_exhausted(bool trial_plan, int64_t grant_us, int64_t used_us);

/* The month to date has reached the cap: at it counts, to the nano-dollar. */
bool meter_cap_reached(meter_money month_to_date, meter_money cap);

/*
 * Whether one more sandbox may start: the first limit reached, in this
 * order: the trial, the spend cap, the concurrency limit; else OK.
 */
enum meter_quota_reason meter_quota_decide(const struct meter_quota_state *s);

/* "ok", "trial_exhausted", "spend_cap_reached", "concurrency_limit". Never NULL. */
const char *meter_quota_reason_name(enum meter_quota_reason r);

#endif
