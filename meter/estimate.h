/*
 * meter/estimate.h: what a sandbox size costs an hour, and a month's what-if.
 */
#ifndef METER_ESTIMATE_H
#define METER_ESTIMATE_H

#include <stdint.h>

#include "meter/plan.h"
#include "meter/status.h"

struct meter_rates {
	meter_money cpu_busy;      /* all vCPUs busy for an hour */
	meter_money cpu_idle;      /* the CPU floor for an hour */
	meter_money memory;        /* the provisioned memory for an hour */
	meter_money busy_per_hour; /* cpu_busy + memory */
	meter_money idle_per_hour; /* cpu_idle + memory */
};

/* The hourly prices of a sandbox size under a plan. */
enum meter_status meter_rates_of(const struct meter_plan *p, const struct meter_size *size,
                                 struct meter_rates *out);

/* Bounds of an estimate's inputs; past them an input is absurd. */
#define METER_EST_RUNS_MAX          INT64_C(10000000)
#define METER_EST_MINUTES_MILLI_MAX INT64_C(44640000) /* 31 days */

struct meter_estimate_input {
	int64_t runs;            /* runs a month, 1..10,000,000 */
	int64_t minutes_milli;   /* minutes a run, in thousandths, > 0 */
	struct meter_size size;  /* the sandbox */
	int64_t busy_vcpu_milli; /* average busy vCPUs, 0..size.vcpu_milli */
};

struct meter_estimate_line {
	const char *item;  /* "cpu" or "memory" */
	char formula[160]; /* "300 × 6 min / 60 × 0.5 vCPU × $0.025" */
	meter_money amount;
};

struct meter_estimate {
	struct meter_estimate_line cpu;
	struct meter_estimate_line memory;
	meter_money total;
	int64_t billed_vcpu_nano; /* vCPUs billed after the floor, x 10^9 */
};

/*
 * The monthly cost of runs x minutes of one sandbox size at an average busy
 * CPU, in the worked example's form: hours = runs x minutes / 60; CPU is
 * billed on the busy vCPUs raised to the plan's floor; memory on the
 * provisioned GiB. Each line is computed once, exactly, and rounded to the
 * nano-dollar; the total is their sum. METER_ERANGE for an input past its
 * bounds (busy vCPUs above the size among them).
 */
enum meter_status meter_estimate_month(const struct meter_plan *p,
                                       const struct meter_estimate_input *in,
                                       struct meter_estimate *out);

#endif
