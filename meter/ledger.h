/*
 * meter/ledger.h: the lines of an account's month, from the sums the
 * database keeps.
 *
 * The money of a month is the lines its invoice has now: the month's usage
 * per price plan, the part of it the trial grant covered (rule 8), and then,
 * for each earlier month whose invoice is final, what that month has now
 * less what final invoices billed for it (an adjustment). Here it is
 * computed from plain values: the rows common/ledgerdb.c reads (per month and
 * plan), the grant, and the hour the grant ran out in (the trial's crossing,
 * found by the rollup). No I/O.
 *
 * The grant covers an account's intervals in the order of their ends, so a
 * month is covered whole when the grant runs out after it, not at all when
 * it ran out before, and when it runs out inside: every hour before the
 * crossing hour whole, and of that hour the part the rollup rated interval
 * by interval (trial_cover). Never more than the month used.
 */
#ifndef METER_LEDGER_H
#define METER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/invoice.h"
#include "meter/plan.h"
#include "meter/rating.h"
#include "meter/status.h"

#define METER_LEDGER_PLANS 16 /* price plans in one month */

enum meter_ledger_kind {
	METER_LEDGER_USED,   /* the month's usage under the plan */
	METER_LEDGER_BEFORE, /* usage of the crossing's month in the hours before the crossing */
	METER_LEDGER_COVER,  /* the part of the crossing hour the grant covered (trial_cover) */
	METER_LEDGER_BILLED, /* what final invoices billed for the month: u, and covered */
	METER_LEDGER_FINAL,  /* the month has a final invoice (plan_id unused) */
};

/* One row of what the database keeps of an account. */
struct meter_ledger_row {
	enum meter_ledger_kind kind;
	int64_t month_us; /* the UTC month it is of (COVER: the crossing's month) */
	int64_t plan_id;
	struct meter_usage u;
	struct meter_usage covered; /* BILLED only */
};

/* An account's rows, in any order, with its grant and where the grant ran out. */
struct meter_ledger_account {
	int64_t grant_us;
	int64_t crossing_hour_us; /* the hour the grant ran out in, or METER_TIME_NONE */
	const struct meter_ledger_row *rows;
	size_t nrows;
};

/* What a month's lines bill of one plan: what a final invoice records, for its own
 * month or for an earlier one it adjusts. */
struct meter_billed_row {
	int64_t for_month_us, plan_id;
	struct meter_usage used, covered;
};

/*
 * The lines of the invoice of month_us: the month's USED rows (whose hours end
 * before hours_end_us: the month's end, or less for a month to date as it
 * stood; the rows given must be those hours'), priced by plan id in plans, with
 * what the grant covered of them; then, oldest first, the adjustment of each
 * month before it with a final invoice (a FINAL row, or a BILLED one) whose
 * usage now differs from what final invoices billed for it, when month_us is
 * the first month after it whose invoice is not final: an adjustment is billed
 * once, on the next invoice to be made final. billed (room for cap) gets what
 * the lines bill, per month and plan, *nbilled how many. *adjusting_us (when
 * not NULL) gets the earliest month any adjustment goes on, or
 * METER_TIME_NONE. METER_ENOPLAN when a plan is not in plans, METER_ERANGE
 * when more plans or lines than fit, METER_EOVERFLOW when a figure does not
 * fit; nothing is written then.
 */
enum meter_status meter_ledger_lines(const struct meter_ledger_account *a, int64_t month_us,
                                     int64_t hours_end_us, const struct meter_plan *plans,
                                     size_t nplans, struct meter_invoice *out,
                                     struct meter_billed_row *billed, size_t *nbilled, size_t cap,
                                     int64_t *adjusting_us);

/*
 * The lines of a final invoice of month_us from what it recorded it billed
 * (rows: its own month's and the months it adjusted, as meter_ledger_lines
 * gave them): the same lines, in the same order. Errors as above.
 */
enum meter_status meter_ledger_recorded(const struct meter_billed_row *rows, size_t n,
                                        int64_t month_us, const struct meter_plan *plans,
                                        size_t nplans, struct meter_invoice *out);

#endif
