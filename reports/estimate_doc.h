/*
 * reports/estimate_doc.h: the hourly rates and the monthly estimate, as JSON
 * (the shape of GET /v1/rates and POST /v1/estimates) and as text (the
 * worked example's three lines). Amounts are decimal strings: the rounded
 * one and the exact one beside it.
 */
#ifndef REPORTS_ESTIMATE_H
#define REPORTS_ESTIMATE_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "meter/estimate.h"

/* New JSON objects, owned by the caller (cJSON_Delete); NULL when out of memory. */
/* A price plan as JSON: id, name, effective_from, its prices (exact) and CPU floor. */
cJSON *report_plan_json(const struct meter_plan *p);
/* Where plans[i] stands at now: "past", "in_force" or "scheduled". */
const char *report_plan_state(const struct meter_plan *plans, size_t n, size_t i, int64_t now);
/* Every plan with its state, then the one in force and the next (or nulls). */
cJSON *report_plans_json(const struct meter_plan *plans, size_t n, int64_t now);
cJSON *report_rates_json(const struct meter_plan *p, const struct meter_size *size,
                         const struct meter_rates *r);
cJSON *report_estimate_json(const struct meter_plan *p, const struct meter_estimate *e);

/*
 *   CPU:    300 × 6 min / 60 × 0.5 vCPU × $0.025   = $0.38  (exact 0.375)
 *   Memory: 300 × 6 min / 60 × 4 GiB × $0.0075     = $0.90  (exact 0.90)
 *   Total:                                           $1.28  (exact 1.275)
 */
void report_estimate_text(FILE *out, const struct meter_estimate *e);

void report_rates_text(FILE *out, const struct meter_plan *p, const struct meter_size *size,
                       const struct meter_rates *r);

#endif
