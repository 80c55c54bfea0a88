/*
 * meter/rating.h: turning cumulative CPU samples into billed usage.
 *
 * These are the rating rules of the design, in one place; SQL stores and sums
 * what they produce and never re-derives them.
 *
 * A sandbox's samples form one series per incarnation (the cgroup's inode).
 * Each sample closes an interval:
 *   - the first sample of the sandbox's first incarnation opens it: all the
 *     CPU since the cgroup was made, over [started_at, t] when started_at is
 *     known and earlier, else over a zero-length interval;
 *   - the first sample of a later incarnation: all its CPU, zero length;
 *   - any other sample: [previous t, t] with what the counter gained over
 *     the highest value it had so far. A counter never goes down within one
 *     incarnation, so a lower value means samples stamped out of order (a
 *     collector whose clock was behind): it adds no CPU, and every
 *     microsecond is counted once, when the counter first passes it;
 *   - a sample stamped before started_at counts as taken at started_at;
 *   - each incarnation's billing ends at its end (meter_incarnation_end):
 *     an end after its last sample adds [last t, end] with no CPU, and a
 *     span past the end loses its wall time (meter_span_clip).
 * Billed CPU of an interval of length dt > 0 is the measured CPU clamped to
 * [floor x vCPUs x dt, vCPUs x dt], both bounds rounded half up to the µs;
 * with dt = 0 it is the measured CPU. The interval is busy when its CPU is
 * above the exact floor, idle otherwise.
 */
#ifndef METER_RATING_H
#define METER_RATING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/checked.h"
#include "meter/plan.h"
#include "meter/status.h"

/* "Not known" for a time such as started_at or stopped_at. */
#define METER_TIME_NONE INT64_MIN

struct meter_sample {
	int64_t incarnation; /* the cgroup's inode */
	int64_t t_us;        /* realtime of the sample */
	int64_t cpu_us;      /* cumulative CPU of the cgroup */
};

/* An interval before rating: its bounds and the CPU measured in it. */
struct meter_span {
	int64_t start_us, end_us;
	int64_t cpu_us;
};

struct meter_interval {
	int64_t start_us, end_us; /* end_us - start_us >= 0 */
	int64_t cpu_us;           /* measured, unclamped */
	int64_t billed_us;        /* billed CPU after the clamp */
	bool busy;
};

/*
 * Rates CPU over one span. METER_EINVAL when cpu_us < 0 or end < start;
 * METER_ERANGE for a bad size or floor.
 */
enum meter_status meter_interval_rate(const struct meter_size *size, int64_t floor_ppm,
                                      const struct meter_span *span, struct meter_interval *out);

/* The state of one sandbox's series; plain values, so it can be saved. */
struct meter_series {
	bool opened;              /* any sample seen yet */
	struct meter_sample last; /* its time (at least started_at) and the highest counter */
};

void meter_series_init(struct meter_series *s);

/*
 * Resumes a series before a window: last holds the time of the incarnation's
 * last sample before it (raised to started_at) and its highest counter up to
 * there.
 */
void meter_series_resume(struct meter_series *s, const struct meter_sample *last);

/*
 * Marks that an earlier incarnation was seen, without its samples: the next
 * sample then opens a later incarnation (zero length, all its CPU) rather
 * than the sandbox's first one.
 */
void meter_series_after_other(struct meter_series *s);

/*
 * Feeds the next sample and produces the span it closes. Samples come grouped
 * by incarnation (each incarnation in one run, runs in the order the
 * incarnations began) and by time within one. started_at_us is the sandbox's
 * start or METER_TIME_NONE. METER_SKIP for a repeated timestamp (it counts
 * once); METER_EORDER for a time before the last one of the same incarnation;
 * METER_EINVAL for a negative counter. The series is unchanged on anything but
 * METER_OK.
 */
enum meter_status meter_series_next(struct meter_series *s, const struct meter_sample *smp,
                                    int64_t started_at_us, struct meter_span *out);

/*
 * The span a stop adds: [last t, stopped_at] with no CPU, or, for a sandbox
 * stopped before any sample arrived, [started_at, stopped_at]. METER_SKIP when
 * there is nothing to add (no stop, a stop not after the last sample, or no
 * sample and no start).
 */
enum meter_status meter_series_close(const struct meter_series *s, int64_t started_at_us,
                                     int64_t stopped_at_us, struct meter_span *out);

/*
 * Rule 3: where the billing of one incarnation ends, METER_TIME_NONE while it
 * runs. The platform's stop (stop_us) applies to the newest incarnation begun
 * at or before it: begin_us is the incarnation's first sample, next_begin_us
 * the next incarnation's (METER_TIME_NONE: none); one begun after the stop
 * runs again. The end is the earlier of that stop and the collector's end of
 * the incarnation (collector_end_us). Every time counts at started_at at the
 * earliest, as samples do.
 */
int64_t meter_incarnation_end(int64_t started_at_us, int64_t stop_us, int64_t begin_us,
                              int64_t next_begin_us, int64_t collector_end_us);

/*
 * Clips a span at its incarnation's end (rule 3) into out, returning how many
 * parts it has (0, 1 or 2). Up to the end it keeps its wall time, with a share
 * of the CPU in proportion to the time (rounded half up to the µs); after the
 * end it has none: what is left of the CPU is a zero-length span at the
 * span's own end, billed as measured, and a part with neither time nor CPU is
 * dropped. end_us METER_TIME_NONE: the span as it is.
 */
size_t meter_span_clip(const struct meter_span *sp, int64_t end_us, struct meter_span out[2]);

/*
 * Exact sums of rated intervals, 128-bit: one sandbox of 1 TiB for a month
 * is 2.7e18 milli-GiB x µs, and 10,000 of them in one account's month pass
 * 64 bits nearly 3,000 times over (2.7e22); 128 bits hold 6e15 such months.
 */
struct meter_usage {
	meter_i128 cpu_measured_us;
	meter_i128 cpu_billed_us;
	meter_i128 busy_us; /* wall time of busy intervals */
	meter_i128 idle_us; /* wall time of idle intervals */
	meter_i128 wall_us; /* sandbox time: the trial's unit */
	meter_i128 mem_mgib_us;
};

/* Usage under one plan, by the plan's id. */
struct meter_plan_sum {
	int64_t plan_id;
	struct meter_usage u;
};

/* Adds u to the sum of plan in sums (room for cap); METER_ERANGE when full,
 * METER_EOVERFLOW when a sum does not fit. */
enum meter_status meter_plan_sum_add(struct meter_plan_sum *sums, size_t *n, size_t cap,
                                     int64_t plan, const struct meter_usage *u);

/* Adds one interval of a sandbox of that size. METER_EOVERFLOW leaves u as it was. */
enum meter_status meter_usage_add_interval(struct meter_usage *u, const struct meter_size *size,
                                           const struct meter_interval *iv);

/* u += v, all or nothing. */
enum meter_status meter_usage_add(struct meter_usage *u, const struct meter_usage *v);

/* u -= v, all or nothing. */
enum meter_status meter_usage_sub(struct meter_usage *u, const struct meter_usage *v);

struct meter_cost {
	meter_money cpu;
	meter_money memory;
	meter_money total;
};

/* The cost of usage at one plan's prices, each part rounded to the nano-dollar once. */
enum meter_status meter_usage_cost(const struct meter_usage *u, const struct meter_plan *p,
                                   struct meter_cost *out);

/*
 * Rates one span by the plan in force at its end (rule 6): *plan is that plan.
 * An interval that ends before any plan is in force is unpriced: *plan is
 * NULL and out holds its measured CPU, unclamped (no plan, no floor); it is
 * counted, never billed, and the sandbox's other intervals are rated as
 * usual. Errors as meter_interval_rate.
 */
enum meter_status meter_span_rate(const struct meter_plan *plans, size_t nplans,
                                  const struct meter_size *size, const struct meter_span *sp,
                                  struct meter_interval *out, const struct meter_plan **plan);

/* Called for each rated interval, with the plan in force at its end (NULL: unpriced). */
typedef enum meter_status (*meter_emit_fn)(void *ctx, const struct meter_interval *iv,
                                           const struct meter_plan *plan);

/* The collector's end of one incarnation (rule 9): its earliest sample marked ended. */
struct meter_end {
	int64_t incarnation, t_us;
};

/*
 * Rates all of one sandbox: its samples in the order meter_series_next wants,
 * each incarnation ended by meter_incarnation_end (stop_us is the platform's
 * stop, ends the collector's, nends of them). Calls emit for each interval in
 * order (an incarnation's samples, then its end's interval), with plan NULL
 * for an unpriced one (meter_span_rate); stops at the first error (emit's
 * own, or a rule's). An incarnation that comes back after another began is
 * METER_EORDER.
 */
enum meter_status meter_rate_sandbox(const struct meter_plan *plans, size_t nplans,
                                     const struct meter_size *size, int64_t started_at_us,
                                     int64_t stop_us, const struct meter_end *ends, size_t nends,
                                     const struct meter_sample *samples, size_t n,
                                     meter_emit_fn emit, void *ctx);

/* The hour an interval ending at end_us belongs to: its start, in µs. */
int64_t meter_hour_of(int64_t end_us);

#endif
