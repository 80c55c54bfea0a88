/*
 * common/export.h: a month's costs for finance tools, streamed.
 *
 * FOCUS: a CSV shaped after the FinOps FOCUS specification, one row per
 * sandbox and invoice line (its CPU and its memory under each price plan),
 * plus a row for the trial credit and one per adjustment line. Each invoice
 * line's amount is shared out among the sandboxes in proportion to their
 * pricing quantity by the largest-remainder method (ties to the earlier
 * sandbox, in the order of their ids), in SQL, so BilledCost adds up to the
 * invoice's total exactly whatever the number of sandboxes. Columns:
 * BillingAccountId, BillingPeriodStart, BillingPeriodEnd, ChargePeriodStart,
 * ChargePeriodEnd, ChargeCategory, ChargeDescription, ResourceId,
 * ResourceType, ServiceName, ServiceCategory, ConsumedQuantity, ConsumedUnit,
 * PricingQuantity, PricingUnit, ListUnitPrice, BilledCost, EffectiveCost,
 * BillingCurrency.
 *
 * By billing period: a month's export adds up to that month's invoice. A
 * draft's lines are the ledger's (common/ledgerdb.h), shared out over the
 * month's hours; a final month's are what its invoice recorded it billed,
 * shared out over its sandboxes as the invoice recorded them
 * (invoice_sandboxes), so it never changes. Usage of a final month that came
 * late is in the export of the month whose invoice bills it, once: its rows
 * have the old month as ChargePeriod and the billing month as
 * BillingPeriod.
 *
 * Usage: the month's usage per sandbox and plan as CSV (the usage route's
 * figures, one row a sandbox and plan).
 *
 * Both are read a piece at a time: rows come from PostgreSQL in single-row
 * mode and are written as they come, so memory stays flat whatever the size
 * of the account. While an export reads, its connection is busy; one left
 * in mid-read must be cancelled and drained before its next use (api/pool.c
 * does it).
 */
#ifndef COMMON_EXPORT_H
#define COMMON_EXPORT_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "meter/plan.h"

struct export;

/*
 * Starts an export (FOCUS when focus, else usage) of account's month on c.
 * NULL with err when it cannot (the invoice cannot be made, out of memory).
 */
struct export *export_open(PGconn *c, const char *account, int64_t month_us, bool focus,
                           const struct meter_plan *plans, size_t nplans, char *err, size_t errlen);

/* Up to max bytes of the CSV into buf: how many, 0 at its end, -1 with err. */
ssize_t export_read(struct export *e, char *buf, size_t max, char *err, size_t errlen);

/* Frees the export; never touches its connection. */
void export_close(struct export *e);

/* The whole export to f; false with err. */
bool export_write(PGconn *c, const char *account, int64_t month_us, bool focus,
                  const struct meter_plan *plans, size_t nplans, FILE *f, char *err, size_t errlen);

#endif
