/*
 * meter/plan.h: price plans and the units every quantity is kept in.
 *
 * Prices are data: plans come from the price_plans table and are handed to
 * this library as values. A plan is in force from its effective_from (exclusive)
 * until the next plan's: an interval is rated by the plan in force at its end,
 * and an interval that ends exactly at effective_from was used wholly before
 * the change, so the older plan rates it.
 *
 * Units (all integers):
 *   time          µs since the Unix epoch, UTC
 *   CPU           µs of CPU time
 *   vCPUs         milli-vCPUs (2 vCPUs = 2000)
 *   memory        milli-GiB (4 GiB = 4000)
 *   memory-time   milli-GiB × µs
 *   CPU floor     parts per million of the vCPUs (2.5 % = 25000)
 *   prices        nano-dollars per vCPU-hour and per GiB-hour
 */
#ifndef METER_PLAN_H
#define METER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "meter/money.h"
#include "meter/status.h"

#define METER_US_PER_SECOND INT64_C(1000000)
#define METER_US_PER_HOUR   INT64_C(3600000000)
#define METER_MILLI         INT64_C(1000)
#define METER_PPM           INT64_C(1000000)

/* Bounds of a sandbox size: anything past them is refused as absurd. */
#define METER_VCPU_MILLI_MAX INT64_C(256000)        /* 256 vCPUs */
#define METER_MEM_MGIB_MAX   INT64_C(1024000)       /* 1 TiB: 1,024 GiB */
#define METER_PRICE_MAX      INT64_C(1000000000000) /* $1,000 per unit-hour */

#define METER_PLAN_NAME_MAX 64

struct meter_plan {
	int64_t id;
	char name[METER_PLAN_NAME_MAX];
	int64_t effective_from_us;
	meter_money cpu_vcpu_hour;   /* per vCPU-hour of billed CPU */
	meter_money memory_gib_hour; /* per GiB-hour of provisioned memory */
	int64_t cpu_floor_ppm;       /* billed CPU floor, share of the vCPUs */
};

/* The provisioned size of a sandbox. */
struct meter_size {
	int64_t vcpu_milli;
	int64_t mem_mgib;
};

/* METER_ERANGE when a price is negative or absurd or the floor is past 100 %. */
enum meter_status meter_plan_check(const struct meter_plan *p);

/* METER_ERANGE unless 0 < vcpus <= 256 and 0 < memory <= 1 TiB. */
enum meter_status meter_size_check(const struct meter_size *s);

/*
 * A size from a cgroup's or a runtime's limits, never below what they let the
 * sandbox use: a CPU quota of quota_us per period_us as vCPUs, and a memory
 * limit in bytes as GiB, each rounded up to the thousandth (cpu.max
 * "33334 100000" is 0.334 vCPU, not 0.333). METER_EINVAL for a quota, period
 * or limit below 1, METER_EOVERFLOW when the result does not fit. The
 * collector (registration from a cgroup's limits) and meter-hook (an OCI
 * bundle's resources) both size sandboxes with these.
 */
enum meter_status meter_vcpus_of_quota(int64_t quota_us, int64_t period_us, int64_t *vcpu_milli);
enum meter_status meter_mgib_of_bytes(int64_t bytes, int64_t *mem_mgib);

/*
 * The plan in force for an interval that ends at end_us: the one with the
 * latest effective_from before end_us. plans must be sorted by effective_from,
 * ascending. NULL when no plan was in force yet.
 */
const struct meter_plan *meter_plan_at(const struct meter_plan *plans, size_t n, int64_t end_us);

/*
 * The plan that takes over after the one in force at t: the first with an
 * effective_from at or after t (sorted as for meter_plan_at). NULL when none
 * is scheduled.
 */
const struct meter_plan *meter_plan_next(const struct meter_plan *plans, size_t n, int64_t t);

#endif
