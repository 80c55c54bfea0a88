/*
 * meter/invoice.h: the lines of a month's invoice, from exact quantities.
 *
 * The caller hands the month's usage per price plan (summed from rollups,
 * exact integers) and the part of it the trial grant covered. Each plan gives
 * a CPU line (billed vCPU-hours) and a memory line (provisioned GiB-hours);
 * the covered usage is billed on those lines like the rest and credited back
 * by one trial line of the same amount. Every line's amount is computed once,
 * quantity x unit price, rounded half away from zero to the nano-dollar; the
 * total is the exact sum of the lines, rounded to cents only when shown.
 */
#ifndef METER_INVOICE_H
#define METER_INVOICE_H

#include <stddef.h>
#include <stdint.h>

#include "meter/plan.h"
#include "meter/rating.h"
#include "meter/status.h"

#define METER_INVOICE_LINES_MAX 64

enum meter_line_kind {
	METER_LINE_CPU,    /* billed vCPU time, per vCPU-hour */
	METER_LINE_MEMORY, /* provisioned memory time, per GiB-hour */
	METER_LINE_TRIAL,  /* the credit of the free trial, negative */
};

struct meter_invoice_line {
	enum meter_line_kind kind;
	const struct meter_plan *plan; /* the prices; NULL for the trial line */
	meter_i128 quantity;           /* µs of vCPU, milli-GiB x µs, or µs of sandbox time */
	int64_t per_unit;       /* quantity in one unit: 3.6e9 for an hour, 3.6e12 for a GiB-hour */
	meter_money unit_price; /* per unit; 0 for the trial line */
	meter_money amount;     /* exact, to the nano-dollar */
	int64_t for_month_us;   /* 0, or the earlier month an adjustment line is for */
};

/* The month's usage under one plan, and the part the trial covered. */
struct meter_plan_usage {
	const struct meter_plan *plan;
	struct meter_usage used;
	struct meter_usage covered; /* within used */
};

struct meter_invoice {
	struct meter_invoice_line lines[METER_INVOICE_LINES_MAX];
	size_t n;
	meter_money total; /* exact */
};

/*
 * Builds the lines: for each plan with usage, in the order given, a CPU line
 * and a memory line; then a trial line when anything was covered. Plans with
 * no usage give no lines. METER_EINVAL when covered exceeds used, METER_ERANGE
 * for too many lines, METER_EOVERFLOW when an amount does not fit.
 */
enum meter_status meter_invoice_build(const struct meter_plan_usage *u, size_t n,
                                      struct meter_invoice *out);

/*
 * Appends the adjustment lines for usage of an earlier month (for_month_us)
 * that arrived after its invoice was final: delta is what that month has now
 * less what final invoices billed for it, per plan. Figures may be negative
 * (a late sample can lower a clamped figure); zero figures give no line.
 */
enum meter_status meter_invoice_adjust(struct meter_invoice *inv, int64_t for_month_us,
                                       const struct meter_plan_usage *delta, size_t n);

#endif
