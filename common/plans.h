/*
 * common/plans.h: price plans from the price_plans table.
 */
#ifndef COMMON_PLANS_H
#define COMMON_PLANS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "meter/plan.h"

/*
 * Loads every plan, sorted by effective_from, ready for meter_plan_at. *out
 * is malloc'd and owned by the caller (free). On failure writes err and
 * leaves *out and *n untouched.
 */
bool plans_load(PGconn *c, struct meter_plan **out, size_t *n, char *err, size_t errlen);

/*
 * The same from a result with the columns id, name, effective_from (µs),
 * cpu_vcpu_hour, memory_gib_hour, cpu_floor (all text).
 */
bool plans_from_result(const PGresult *r, struct meter_plan **out, size_t *n, char *err,
                       size_t errlen);

#endif
