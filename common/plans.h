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

/* Why plan_add refused a plan. */
enum plan_refusal {
	PLAN_ADDED,
	PLAN_PAST,     /* effective_from is less than an hour after now (the database's clock) */
	PLAN_TAKEN,    /* a plan starts at that very time already */
	PLAN_DB_ERROR, /* err says what */
};

/*
 * Publishes a plan from effective_from_us on, which must be at least an hour
 * ahead (meter_rated_until, migrations/functions/): samples are rated up to
 * an hour ahead of now (meter_rollup_read), so
 * no interval rated before the plan was known ends after it, and every
 * interval is priced by the plan in force at its end whatever the order
 * samples and plans arrive in (rule 6; the rollup reads the plans in each
 * rating's transaction, rollup/internal.h ru_plans). cpu_floor_ppm < 0 takes
 * the floor of the plan in force at that time (2.5 % when there is none).
 * Checked in the insert itself, against the database's clock.
 */
enum plan_refusal plan_add(PGconn *c, const char *name, int64_t effective_from_us,
                           meter_money cpu_vcpu_hour, meter_money memory_gib_hour,
                           int64_t cpu_floor_ppm, int64_t *id, char *err, size_t errlen);

#endif
