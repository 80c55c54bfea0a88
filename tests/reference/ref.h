/*
 * tests/reference/ref.h: the rating rules, a second time.
 *
 * A deliberately plain implementation of the rules of docs/billing-rules.md,
 * written apart from meter/ and sharing none of its code: the obvious
 * algorithm over all of an account's raw samples at once, in 128-bit
 * integers, with no windows, checkpoints, hourly buckets or seeds. The
 * differential test (tests/integration/test_reference.c) feeds the same
 * scenario to it and to the real write path, and compares every invoice.
 *
 * Units: times in µs since the epoch; CPU in µs; sizes in thousandths of a
 * vCPU and of a GiB; prices in nano-dollars per vCPU-hour and per GiB-hour;
 * the floor in parts per million.
 */
#ifndef TESTS_REFERENCE_REF_H
#define TESTS_REFERENCE_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REF_NONE      INT64_MIN /* a time not known */
#define REF_ID        64
#define REF_PLANS     8
#define REF_ACCOUNTS  8
#define REF_SANDBOXES 64
#define REF_SAMPLES   8192
#define REF_MONTHS    8
#define REF_LINES     (2 * REF_PLANS + 1)

__extension__ typedef __int128 ref_int;

struct ref_plan {
	int64_t id, from_us; /* in force for intervals ending after from_us */
	char name[REF_ID];
	int64_t cpu_nano, mem_nano, floor_ppm;
};

struct ref_account {
	char id[REF_ID];
	int64_t grant_us;
};

struct ref_sandbox {
	char id[REF_ID];
	int account;                    /* index into accounts */
	int64_t vcpu_milli, mem_milli;  /* the registered size */
	int64_t started_us, stopped_us; /* REF_NONE when not known; the platform's stop */
};

struct ref_sample {
	int sandbox; /* index into sandboxes */
	int64_t incarnation, ts_us, cpu_us;
	bool ended; /* the collector saw its incarnation end here (rule 9) */
};

struct ref_input {
	struct ref_plan plans[REF_PLANS]; /* in the order of from_us */
	int nplans;
	struct ref_account accounts[REF_ACCOUNTS];
	int naccounts;
	struct ref_sandbox sandboxes[REF_SANDBOXES];
	int nsandboxes;
	struct ref_sample samples[REF_SAMPLES]; /* in the order they were written */
	int nsamples;
};

/* One line of an invoice: its item ("cpu", "memory", "trial_credit"), plan, amount. */
struct ref_line {
	char item[16];
	char plan[REF_ID]; /* "" for the trial line */
	int64_t amount_nano;
};

struct ref_invoice {
	struct ref_line lines[REF_LINES];
	int nlines;
	int64_t total_nano;
};

/*
 * The invoice of an account for the month starting at month_us (UTC), as the
 * rules give it from all the input. False when a figure does not fit (the
 * test then fails: no scenario it makes goes there).
 */
bool ref_invoice(const struct ref_input *in, int account, int64_t month_us,
                 struct ref_invoice *out);

/* What a sandbox used in one hour (its priced intervals that end in it). */
struct ref_hour {
	int64_t hour_us; /* the hour's start */
	ref_int cpu_measured, cpu_billed, busy, idle, wall, mem;
};

/*
 * The hours of sandbox sb, in time order, into out (room for cap); returns
 * how many, or -1 when they do not fit.
 */
int ref_sandbox_hours(const struct ref_input *in, int sb, struct ref_hour *out, int cap);

/* The sandbox time the account's trial grant has used, up to the grant. */
int64_t ref_trial_used(const struct ref_input *in, int account);

#endif
