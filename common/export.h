/*
 * common/export.h: a month's costs for finance tools.
 *
 * export_focus: a CSV shaped after the FinOps FOCUS specification, one row
 * per sandbox and invoice line (its CPU and its memory under each price
 * plan), plus a row for the trial credit and one per adjustment line. Each
 * invoice line's amount is shared out among the sandboxes in proportion to
 * their pricing quantity (meter/allocate.h), so BilledCost adds up to the
 * invoice's total exactly. Columns: BillingAccountId, BillingPeriodStart,
 * BillingPeriodEnd, ChargePeriodStart, ChargePeriodEnd, ChargeCategory,
 * ChargeDescription, ResourceId, ResourceType, ServiceName, ServiceCategory,
 * ConsumedQuantity, ConsumedUnit, PricingQuantity, PricingUnit,
 * ListUnitPrice, BilledCost, EffectiveCost, BillingCurrency.
 *
 * export_usage: the month's usage per sandbox as CSV (the usage route's
 * figures, one row a sandbox).
 */
#ifndef COMMON_EXPORT_H
#define COMMON_EXPORT_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/plan.h"

/* malloc'd CSV text (the caller frees), or NULL with err. */
char *export_focus(PGconn *c, const char *account, int64_t month_us, const struct meter_plan *plans,
                   size_t nplans, char *err, size_t errlen);
char *export_usage(PGconn *c, const char *account, int64_t month_us, const struct meter_plan *plans,
                   size_t nplans, char *err, size_t errlen);

#endif
