/* The rating rules of the design, one test per rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "meter/decimal.h"
#include "meter/estimate.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "meter/trial.h"

#define S(x)  ((int64_t)(x)*INT64_C(1000000)) /* seconds -> µs */
#define MS(x) ((int64_t)(x)*INT64_C(1000))
#define H(x)  ((int64_t)(x)*INT64_C(3600000000))

static const struct meter_size size_2_4 = {.vcpu_milli = 2000, .mem_mgib = 4000};

static int64_t t0(void)
{
	int64_t t = 0;
	assert_int_equal(meter_time_parse("2026-10-01T00:00:00Z", &t), METER_OK);
	return t;
}

static struct meter_plan default_plan(void)
{
	struct meter_plan p = {.id = 1,
	                       .name = "default",
	                       .cpu_vcpu_hour = INT64_C(25000000),
	                       .memory_gib_hour = INT64_C(7500000),
	                       .cpu_floor_ppm = 25000};
	assert_int_equal(meter_time_parse("2026-09-25T00:00:00Z", &p.effective_from_us), METER_OK);
	return p;
}

static struct meter_interval rate(int64_t floor_ppm, int64_t start, int64_t end, int64_t cpu)
{
	struct meter_span sp = {start, end, cpu};
	struct meter_interval iv;
	assert_int_equal(meter_interval_rate(&size_2_4, floor_ppm, &sp, &iv), METER_OK);
	return iv;
}

/* Collects the intervals meter_rate_sandbox emits. */
struct collect {
	struct meter_usage usage;
	struct meter_interval iv[128];
	int64_t plan_id[128]; /* 0: unpriced */
	size_t n, unpriced;
};

static enum meter_status collect(void *ctx, const struct meter_interval *iv,
                                 const struct meter_plan *plan)
{
	struct collect *c = ctx;
	assert_true(c->n < 128);
	c->iv[c->n] = *iv;
	c->plan_id[c->n++] = plan ? plan->id : 0;
	if (plan == NULL) { /* unpriced: counted, never billed */
		c->unpriced++;
		return METER_OK;
	}
	return meter_usage_add_interval(&c->usage, &size_2_4, iv);
}

static void busy_hour_costs_0_08_and_idle_hour_0_03125(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	struct meter_usage busy = {0}, idle = {0};
	struct meter_cost cb, ci;
	struct meter_interval ib = rate(p.cpu_floor_ppm, t0(), t0() + H(1), H(2));
	struct meter_interval ii = rate(p.cpu_floor_ppm, t0(), t0() + H(1), 0);
	assert_int_equal(meter_usage_add_interval(&busy, &size_2_4, &ib), METER_OK);
	assert_int_equal(meter_usage_add_interval(&idle, &size_2_4, &ii), METER_OK);
	assert_int_equal(meter_usage_cost(&busy, &p, &cb), METER_OK);
	assert_int_equal(meter_usage_cost(&idle, &p, &ci), METER_OK);
	assert_int_equal(cb.total, INT64_C(80000000)); /* $0.08 */
	assert_int_equal(ci.total, INT64_C(31250000)); /* $0.03125 */
	assert_int_equal(ci.cpu, INT64_C(1250000));    /* the floor: 0.05 vCPU x $0.025 */
	assert_int_equal(idle.cpu_billed_us, S(180));  /* 2.5 % of 2 vCPUs for 3600 s */
	assert_true(ib.busy);
	assert_false(ii.busy);

	struct meter_rates r;
	assert_int_equal(meter_rates_of(&p, &size_2_4, &r), METER_OK);
	assert_int_equal(r.busy_per_hour, INT64_C(80000000));
	assert_int_equal(r.idle_per_hour, INT64_C(31250000));
}

static void a_floor_of_zero_bills_pure_measured_cpu(void **state)
{
	(void)state;
	struct meter_interval iv = rate(0, t0(), t0() + H(1), 0);
	assert_int_equal(iv.billed_us, 0);
	assert_false(iv.busy);
	iv = rate(0, t0(), t0() + S(10), 7);
	assert_int_equal(iv.billed_us, 7);
	assert_true(iv.busy);
}

static void design_example_bills_21_cpu_seconds_of_20_measured(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	int64_t t = t0();
	struct meter_sample smp[] = {
	        {1, t + S(10), 0}, {1, t + S(20), S(20)}, {1, t + S(30), S(20)}};
	struct collect c = {0};
	assert_int_equal(
	        meter_rate_sandbox(&p, 1, &size_2_4, t, t + S(30), NULL, 0, smp, 3, collect, &c),
	        METER_OK);
	assert_int_equal(c.n, 3); /* the stop at the last sample adds nothing */
	assert_int_equal(c.iv[0].billed_us, MS(500));
	assert_false(c.iv[0].busy);
	assert_int_equal(c.iv[1].billed_us, S(20));
	assert_true(c.iv[1].busy);
	assert_int_equal(c.usage.cpu_measured_us, S(20));
	assert_int_equal(c.usage.cpu_billed_us, S(21));
	assert_int_equal(c.usage.busy_us, S(10));
	assert_int_equal(c.usage.idle_us, S(20));
	assert_int_equal(c.usage.wall_us, S(30));
	assert_int_equal(c.usage.mem_mgib_us, 4000 * S(30)); /* 120 GiB-seconds */
	struct meter_cost cost;
	assert_int_equal(meter_usage_cost(&c.usage, &p, &cost), METER_OK);
	assert_int_equal(cost.cpu, 145833);    /* 21/3600 x $0.025 = 0.000145833... */
	assert_int_equal(cost.memory, 250000); /* 120/3600 x $0.0075 */
}

static void cpu_above_the_vcpus_is_clamped(void **state)
{
	(void)state;
	struct meter_interval iv = rate(25000, t0(), t0() + S(10), S(35));
	assert_int_equal(iv.cpu_us, S(35)); /* measured is kept, unclamped */
	assert_int_equal(iv.billed_us, S(20));
	assert_true(iv.busy);
}

static void cpu_just_at_the_floor_is_idle_just_above_is_busy(void **state)
{
	(void)state;
	struct meter_interval at = rate(25000, t0(), t0() + S(10), MS(500));
	struct meter_interval above = rate(25000, t0(), t0() + S(10), MS(500) + 1);
	assert_false(at.busy);
	assert_true(above.busy);
	assert_int_equal(above.billed_us, MS(500) + 1);
}

static void a_negative_interval_or_cpu_is_refused(void **state)
{
	(void)state;
	struct meter_span back = {t0(), t0() - 1, 0}, neg = {t0(), t0() + 1, -1};
	struct meter_interval iv = {.billed_us = 99};
	assert_int_equal(meter_interval_rate(&size_2_4, 25000, &back, &iv), METER_EINVAL);
	assert_int_equal(meter_interval_rate(&size_2_4, 25000, &neg, &iv), METER_EINVAL);
	struct meter_size none = {0, 4000};
	struct meter_span ok = {t0(), t0() + 1, 0};
	assert_int_equal(meter_interval_rate(&none, 25000, &ok, &iv), METER_ERANGE);
	assert_int_equal(meter_interval_rate(&size_2_4, 1000001, &ok, &iv), METER_ERANGE);
	assert_int_equal(iv.billed_us, 99);
}

static void a_repeated_timestamp_counts_once_and_going_back_is_refused(void **state)
{
	(void)state;
	struct meter_series s;
	struct meter_span sp;
	struct meter_sample a = {1, t0() + S(10), S(1)}, dup = {1, t0() + S(10), S(1)},
	                    back = {1, t0() + S(5), S(2)};
	meter_series_init(&s);
	assert_int_equal(meter_series_next(&s, &a, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(meter_series_next(&s, &dup, METER_TIME_NONE, &sp), METER_SKIP);
	assert_int_equal(meter_series_next(&s, &back, METER_TIME_NONE, &sp), METER_EORDER);
	assert_int_equal(s.last.t_us, a.t_us); /* unchanged by the refusals */
}

static void first_sample_counts_all_cpu_since_the_cgroup_began(void **state)
{
	(void)state;
	struct meter_series s;
	struct meter_span sp;
	struct meter_sample a = {7, t0() + S(10), S(3)};
	meter_series_init(&s);
	/* started_at unknown: a zero-length interval with all the CPU */
	assert_int_equal(meter_series_next(&s, &a, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(sp.end_us - sp.start_us, 0);
	assert_int_equal(sp.cpu_us, S(3));
	struct meter_interval iv;
	assert_int_equal(meter_interval_rate(&size_2_4, 25000, &sp, &iv), METER_OK);
	assert_int_equal(iv.billed_us, S(3)); /* no clamp without a length */
	/* started_at known and earlier: the interval starts there */
	meter_series_init(&s);
	assert_int_equal(meter_series_next(&s, &a, t0(), &sp), METER_OK);
	assert_int_equal(sp.start_us, t0());
	/* started_at after the sample (a collector's clock behind): taken at started_at */
	meter_series_init(&s);
	assert_int_equal(meter_series_next(&s, &a, t0() + S(20), &sp), METER_OK);
	assert_int_equal(sp.start_us, t0() + S(20));
	assert_int_equal(sp.end_us, t0() + S(20));
	assert_int_equal(sp.cpu_us, S(3));
}

static void a_counter_below_its_highest_adds_nothing_until_it_passes_it(void **state)
{
	(void)state;
	struct meter_series s;
	struct meter_span sp;
	/* A collector with a slow clock stamped later readings (9 s, 12 s) earlier. */
	struct meter_sample a = {1, t0() + S(10), S(9)}, b = {1, t0() + S(20), S(2)},
	                    c = {1, t0() + S(25), S(12)}, d = {1, t0() + S(25), S(13)};
	meter_series_init(&s);
	assert_int_equal(meter_series_next(&s, &a, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(meter_series_next(&s, &b, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(sp.cpu_us, 0);
	assert_int_equal(sp.end_us - sp.start_us, S(10));
	assert_int_equal(meter_series_next(&s, &c, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(sp.cpu_us, S(3)); /* over 9 s, the highest before */
	/* the same time with a higher counter (both raised to started_at, say) */
	assert_int_equal(meter_series_next(&s, &d, METER_TIME_NONE, &sp), METER_OK);
	assert_int_equal(sp.cpu_us, S(1));
	assert_int_equal(sp.end_us - sp.start_us, 0);
	assert_int_equal(meter_series_next(&s, &d, METER_TIME_NONE, &sp), METER_SKIP);
}

static void a_new_incarnation_starts_a_new_series(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	int64_t t = t0();
	/* The cgroup is removed and made again under the same id (inode 2). */
	struct meter_sample smp[] = {{1, t + S(10), S(4)},
	                             {1, t + S(20), S(14)},
	                             {2, t + S(25), S(1)},
	                             {2, t + S(35), S(6)}};
	struct collect c = {0};
	assert_int_equal(meter_rate_sandbox(&p, 1, &size_2_4, t, METER_TIME_NONE, NULL, 0, smp, 4,
	                                    collect, &c),
	                 METER_OK);
	assert_int_equal(c.n, 4);
	assert_int_equal(c.iv[0].start_us, t);         /* first incarnation from started_at */
	assert_int_equal(c.iv[2].start_us, t + S(25)); /* later one: zero length, all its CPU */
	assert_int_equal(c.iv[2].end_us, t + S(25));
	assert_int_equal(c.iv[2].cpu_us, S(1));
	assert_int_equal(c.usage.cpu_measured_us, S(4) + S(10) + S(1) + S(5));
	assert_int_equal(c.usage.wall_us, S(20) + S(10));

	/* An incarnation that comes back after another began is refused. */
	struct meter_sample bad[] = {{1, t + S(10), 0}, {2, t + S(20), 0}, {1, t + S(30), 0}};
	struct collect c2 = {0};
	assert_int_equal(meter_rate_sandbox(&p, 1, &size_2_4, t, METER_TIME_NONE, NULL, 0, bad, 3,
	                                    collect, &c2),
	                 METER_EORDER);
}

static void a_stop_after_the_last_sample_is_one_more_idle_interval(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	int64_t t = t0();
	struct meter_sample smp[] = {{1, t + S(10), S(10)}};
	struct collect c = {0};
	assert_int_equal(
	        meter_rate_sandbox(&p, 1, &size_2_4, t, t + S(14), NULL, 0, smp, 1, collect, &c),
	        METER_OK);
	assert_int_equal(c.n, 2);
	assert_int_equal(c.iv[1].cpu_us, 0);
	assert_int_equal(c.iv[1].billed_us, MS(200)); /* the floor over 4 s */
	assert_int_equal(c.usage.wall_us, S(14));

	/* Stopped before any sample: started_at to stopped_at, with no CPU. */
	struct collect c2 = {0};
	assert_int_equal(
	        meter_rate_sandbox(&p, 1, &size_2_4, t, t + S(5), NULL, 0, NULL, 0, collect, &c2),
	        METER_OK);
	assert_int_equal(c2.n, 1);
	assert_int_equal(c2.usage.wall_us, S(5));
	/* Neither start nor samples: nothing to bill. */
	struct collect c3 = {0};
	assert_int_equal(meter_rate_sandbox(&p, 1, &size_2_4, METER_TIME_NONE, t + S(5), NULL, 0,
	                                    NULL, 0, collect, &c3),
	                 METER_OK);
	assert_int_equal(c3.n, 0);
}

/* Rule 3, the figure: a 2 vCPU, 4 GiB sandbox busy on one vCPU for an hour and
 * stopped, its empty cgroup sampled for another hour, costs $0.055, not $0.08625. */
static void a_cgroup_lingering_after_the_stop_costs_nothing(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	int64_t t = t0();
	struct meter_sample smp[121];
	for (int i = 0; i <= 120; i++) /* a sample a minute; one vCPU busy the first hour */
		smp[i] = (struct meter_sample){1, t + S(60) * i, S(60) * (i < 60 ? i : 60)};
	struct collect c = {0};
	assert_int_equal(meter_rate_sandbox(&p, 1, &size_2_4, t, t + H(1), NULL, 0, smp + 1, 120,
	                                    collect, &c),
	                 METER_OK);
	assert_int_equal(c.n, 60); /* the lingering samples add no interval: no CPU, no time */
	assert_true(c.usage.wall_us == H(1));
	assert_true(c.usage.cpu_billed_us == H(1));
	struct meter_cost cost;
	assert_int_equal(meter_usage_cost(&c.usage, &p, &cost), METER_OK);
	assert_int_equal(cost.total, INT64_C(55000000));

	/* The stop inside an interval: the part up to it keeps its time and its share of the
	 * CPU; the CPU after it is billed as measured, with no time and no floor. */
	struct meter_sample mid[] = {{1, t + S(10), S(1)}, {1, t + S(20), S(1) + 7}};
	struct collect m = {0};
	assert_int_equal(
	        meter_rate_sandbox(&p, 1, &size_2_4, t, t + S(15), NULL, 0, mid, 2, collect, &m),
	        METER_OK);
	assert_int_equal(m.n, 3);
	assert_int_equal(m.iv[1].start_us, t + S(10));
	assert_int_equal(m.iv[1].end_us, t + S(15));
	assert_int_equal(m.iv[1].cpu_us, 4);          /* 7 x 5/10 = 3.5, half up */
	assert_int_equal(m.iv[1].billed_us, MS(250)); /* the floor over 5 s */
	assert_int_equal(m.iv[2].start_us, t + S(20));
	assert_int_equal(m.iv[2].end_us, t + S(20));
	assert_int_equal(m.iv[2].billed_us, 3);
	assert_true(m.usage.wall_us == S(15));
	assert_true(m.usage.cpu_measured_us == S(1) + 7);
}

/* Rules 3 and 9: the collector's end closes its incarnation; a later one runs again. */
static void the_collector_end_closes_its_incarnation_only(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	int64_t t = t0();
	struct meter_sample smp[] = {{1, t + S(10), S(2)},
	                             {1, t + S(20), S(4)}, /* its end */
	                             {1, t + S(30), S(5)}, /* used again after the end */
	                             {2, t + S(40), S(1)},
	                             {2, t + S(50), S(3)}};
	struct meter_end ends[] = {{1, t + S(25)}, {1, t + S(20)}}; /* the earliest counts */
	struct collect c = {0};
	assert_int_equal(
	        meter_rate_sandbox(&p, 1, &size_2_4, t, t + S(45), ends, 2, smp, 5, collect, &c),
	        METER_OK);
	assert_int_equal(c.n, 6);
	assert_int_equal(c.iv[2].start_us, t + S(30)); /* after the end: CPU, no time */
	assert_int_equal(c.iv[2].end_us, t + S(30));
	assert_int_equal(c.iv[2].billed_us, S(1));
	/* the stop at 45 s ends incarnation 2, begun before it, inside its interval */
	assert_int_equal(c.iv[4].end_us, t + S(45));
	assert_int_equal(c.iv[4].cpu_us, S(1));
	assert_int_equal(c.iv[5].end_us, t + S(50));
	assert_int_equal(c.iv[5].cpu_us, S(1));
	/* 0-20 s and 40-45 s; 20-40 s is the gap between the incarnations */
	assert_true(c.usage.wall_us == S(25));
	assert_true(c.usage.cpu_measured_us == S(8));
}

static void the_platform_stop_ends_the_newest_incarnation_begun_before_it(void **state)
{
	(void)state;
	int64_t N = METER_TIME_NONE, t = t0();
	/* started, stop, begin, next begin, collector end */
	assert_int_equal(meter_incarnation_end(t, N, t, N, N), N); /* running */
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 10, N, N), t + 50);
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 10, t + 50, N), N); /* next has it */
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 10, t + 60, N), t + 50);
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 60, N, N), N); /* begun after */
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 10, N, t + 40), t + 40);
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 10, N, t + 70), t + 50);
	assert_int_equal(meter_incarnation_end(t, t + 50, t + 60, N, t + 70), t + 70);
	/* times before the start count at it */
	assert_int_equal(meter_incarnation_end(t, N, t - 20, N, t - 10), t);
	assert_int_equal(meter_incarnation_end(N, t, t + 10, N, N), N);
	assert_int_equal(meter_incarnation_end(N, t, t - 10, N, N), t);

	struct meter_span out[2], sp = {t, t + 10, 10};
	assert_int_equal(meter_span_clip(&sp, N, out), 1);
	assert_int_equal(meter_span_clip(&sp, t + 10, out), 1);
	assert_int_equal(out[0].end_us, t + 10);
	assert_int_equal(meter_span_clip(&sp, t + 5, out), 2);
	assert_int_equal(out[0].cpu_us + out[1].cpu_us, 10);
	assert_int_equal(meter_span_clip(&sp, t, out), 1); /* wholly after: CPU alone */
	assert_int_equal(out[0].start_us, t + 10);
	assert_int_equal(out[0].cpu_us, 10);
	sp.cpu_us = 0;
	assert_int_equal(meter_span_clip(&sp, t, out), 0); /* nothing left */
	assert_int_equal(meter_span_clip(&sp, t + 5, out), 1);
	/* the share of a span as long as a year with a counter past 2^62: no overflow */
	struct meter_span big = {0, INT64_C(31536000000000), INT64_C(4611686018427387904)};
	assert_int_equal(meter_span_clip(&big, INT64_C(15768000000000), out), 2);
	assert_int_equal(out[0].cpu_us, INT64_C(2305843009213693952));
}

static void a_price_change_rates_by_the_plan_in_force_at_the_interval_end(void **state)
{
	(void)state;
	struct meter_plan plans[2] = {default_plan(), default_plan()};
	plans[1].id = 2;
	plans[1].cpu_vcpu_hour = INT64_C(50000000);
	plans[1].effective_from_us = t0() + S(20);
	assert_ptr_equal(meter_plan_at(plans, 2, t0() + S(20)), &plans[0]); /* ends on it: old */
	assert_ptr_equal(meter_plan_at(plans, 2, t0() + S(20) + 1), &plans[1]);
	assert_null(meter_plan_at(plans, 2, plans[0].effective_from_us));
	/* the next plan: scheduled until the moment it takes over, then none */
	assert_ptr_equal(meter_plan_next(plans, 2, t0() + S(10)), &plans[1]);
	assert_ptr_equal(meter_plan_next(plans, 2, t0() + S(20)), &plans[1]);
	assert_null(meter_plan_next(plans, 2, t0() + S(20) + 1));
	assert_ptr_equal(meter_plan_next(plans, 2, plans[0].effective_from_us), &plans[0]);

	struct meter_sample smp[] = {
	        {1, t0() + S(10), 0}, {1, t0() + S(20), S(10)}, {1, t0() + S(30), S(20)}};
	struct collect c = {0};
	assert_int_equal(meter_rate_sandbox(plans, 2, &size_2_4, t0(), METER_TIME_NONE, NULL, 0,
	                                    smp, 3, collect, &c),
	                 METER_OK);
	assert_int_equal(c.plan_id[0], 1);
	assert_int_equal(c.plan_id[1], 1); /* ends exactly at the change */
	assert_int_equal(c.plan_id[2], 2);

	/* Rule 6: an interval that ends before any plan is unpriced, not billed, and the
	 * sandbox's other intervals are billed as usual. */
	struct meter_sample early[] = {{1, plans[0].effective_from_us - S(20), S(1)},
	                               {1, plans[0].effective_from_us - S(10), S(6)},
	                               {1, plans[0].effective_from_us + S(10), S(7)}};
	struct collect e = {0};
	assert_int_equal(meter_rate_sandbox(plans, 2, &size_2_4, METER_TIME_NONE, METER_TIME_NONE,
	                                    NULL, 0, early, 3, collect, &e),
	                 METER_OK);
	assert_int_equal(e.n, 3);
	assert_int_equal(e.unpriced, 2);
	assert_int_equal(e.iv[1].billed_us, S(5)); /* measured, no floor */
	assert_int_equal(e.plan_id[2], 1);
	assert_true(e.usage.wall_us == S(20)); /* only the priced interval */
	assert_true(e.usage.cpu_billed_us == S(1));
	/* a stop before any plan: unpriced too */
	struct collect g = {0};
	assert_int_equal(meter_rate_sandbox(plans, 2, &size_2_4, plans[0].effective_from_us - S(60),
	                                    plans[0].effective_from_us - S(30), NULL, 0, NULL, 0,
	                                    collect, &g),
	                 METER_OK);
	assert_int_equal(g.unpriced, 1);
	assert_true(g.usage.wall_us == 0);
}

static void an_interval_belongs_to_the_hour_in_which_it_ends(void **state)
{
	(void)state;
	assert_int_equal(meter_hour_of(t0() + H(1)), t0()); /* ends on the hour */
	assert_int_equal(meter_hour_of(t0() + H(1) + 1), t0() + H(1));
	assert_int_equal(meter_hour_of(t0() + 1), t0());
	assert_int_equal(meter_hour_of(1), 0);
	assert_int_equal(meter_hour_of(0), -H(1));
}

static void usage_sums_refuse_overflow_and_stay_unchanged(void **state)
{
	(void)state;
	/* Past 64 bits is fine (an account's month of 1 TiB sandboxes goes there)... */
	struct meter_usage u = {.cpu_billed_us = INT64_MAX - 5};
	struct meter_interval iv = {.start_us = 0, .end_us = 10, .cpu_us = 10, .billed_us = 10};
	assert_int_equal(meter_usage_add_interval(&u, &size_2_4, &iv), METER_OK);
	assert_true(u.cpu_billed_us == (meter_i128)INT64_MAX + 5);
	/* ...past 128 bits is refused, and nothing changes. */
	meter_i128 top = METER_I128_MAX;
	u = (struct meter_usage){.cpu_billed_us = top - 5};
	assert_int_equal(meter_usage_add_interval(&u, &size_2_4, &iv), METER_EOVERFLOW);
	assert_true(u.cpu_billed_us == top - 5);
	assert_true(u.wall_us == 0);
	struct meter_usage v = {.wall_us = top}, w = {.wall_us = 1};
	assert_int_equal(meter_usage_add(&v, &w), METER_EOVERFLOW);
	assert_true(v.wall_us == top);
	assert_int_equal(meter_usage_sub(&w, &v), METER_OK);
	assert_true(w.wall_us == 1 - top);
}

/*
 * Rule 7 at the scale it names: 10,000 sandboxes of 256 vCPUs and 1 TiB busy
 * for all of October (744 hours), hour by hour, summed into one account's
 * month and priced once. The figures are worked by hand:
 *   CPU     10,000 x 256 vCPU x 744 h x $0.025   = $47,616,000
 *   memory  10,000 x 1,024 GiB x 744 h x $0.0075 = $57,139,200
 */
static void a_month_of_10000_sandboxes_of_256_vcpus_and_1_tib_is_exact(void **state)
{
	(void)state;
	const struct meter_size big = {.vcpu_milli = 256000, .mem_mgib = 1024000};
	struct meter_usage month = {0};
	for (int sb = 0; sb < 10000; sb++) {
		struct meter_usage one = {0};
		for (int h = 0; h < 744; h++) {
			struct meter_span sp = {
			        .start_us = H(h), .end_us = H(h + 1), .cpu_us = 256 * H(1)};
			struct meter_interval iv;
			assert_int_equal(meter_interval_rate(&big, 25000, &sp, &iv), METER_OK);
			assert_int_equal(meter_usage_add_interval(&one, &big, &iv), METER_OK);
		}
		assert_int_equal(meter_usage_add(&month, &one), METER_OK);
	}
	const meter_i128 sandboxes = 10000, hours = 744;
	assert_true(month.cpu_billed_us == sandboxes * 256 * hours * H(1));
	assert_true(month.cpu_measured_us == month.cpu_billed_us);
	assert_true(month.wall_us == sandboxes * hours * H(1));
	assert_true(month.busy_us == month.wall_us);
	assert_true(month.mem_mgib_us == sandboxes * 1024000 * hours * H(1));
	assert_true(month.mem_mgib_us > (meter_i128)INT64_MAX * 2900); /* far past 64 bits */
	struct meter_plan p = {.id = 1,
	                       .cpu_vcpu_hour = 25000000,
	                       .memory_gib_hour = 7500000,
	                       .cpu_floor_ppm = 25000};
	struct meter_cost c;
	assert_int_equal(meter_usage_cost(&month, &p, &c), METER_OK);
	assert_int_equal(c.cpu, INT64_C(47616000) * METER_NANO_PER_DOLLAR);
	assert_int_equal(c.memory, INT64_C(57139200) * METER_NANO_PER_DOLLAR);
	assert_int_equal(c.total, INT64_C(104755200) * METER_NANO_PER_DOLLAR);
	char q[METER_QTY_BUF];
	meter_qty_per(month.mem_mgib_us, INT64_C(3600000000000), 9, q, sizeof q);
	assert_string_equal(q, "7618560000"); /* GiB-hours: 10,000 x 1,024 x 744 */
}

static void trial_grant_covers_intervals_in_order_and_the_crossing_one_in_part(void **state)
{
	(void)state;
	int64_t left = S(15);
	struct meter_usage cov;
	struct meter_interval a = rate(25000, t0(), t0() + S(10), S(10));
	struct meter_interval b = rate(25000, t0() + S(10), t0() + S(20), S(8));
	struct meter_interval c = rate(25000, t0() + S(20), t0() + S(30), S(8));
	assert_int_equal(meter_trial_cover(&left, &size_2_4, &a, &cov), METER_OK);
	assert_int_equal(cov.wall_us, S(10));
	assert_int_equal(cov.cpu_billed_us, S(10));
	assert_int_equal(left, S(5));
	assert_int_equal(meter_trial_cover(&left, &size_2_4, &b, &cov), METER_OK);
	assert_int_equal(cov.wall_us, S(5)); /* half of b */
	assert_int_equal(cov.cpu_billed_us, S(4));
	assert_int_equal(cov.mem_mgib_us, 4000 * S(5));
	assert_int_equal(left, 0);
	assert_int_equal(meter_trial_cover(&left, &size_2_4, &c, &cov), METER_OK);
	assert_int_equal(cov.wall_us, 0);
	assert_int_equal(cov.cpu_billed_us, 0);
	int64_t bad = -1;
	assert_int_equal(meter_trial_cover(&bad, &size_2_4, &c, &cov), METER_EINVAL);
}

/*
 * Rule 8's order across sandboxes of one hour: by end, at one end by the
 * sandboxes' ids, then each series' order. A grant of 15 s left: a's 10 s
 * interval (sandbox rank 1) and b's (rank 0) both end at +10 s, so b is
 * covered first, whole, then a in part (5 of 10 s); c, ending earlier at +5 s
 * under plan 2, before both. Plans are summed apart.
 */
static void the_crossing_hour_is_covered_by_end_then_sandbox_then_series(void **state)
{
	(void)state;
	struct meter_trial_interval ivs[] = {
	        {.rank = 1,
	         .seq = 0,
	         .plan_id = 1,
	         .size = size_2_4,
	         .iv = rate(25000, t0(), t0() + S(10), S(10))},
	        {.rank = 0,
	         .seq = 1,
	         .plan_id = 1,
	         .size = size_2_4,
	         .iv = rate(25000, t0(), t0() + S(10), S(4))},
	        {.rank = 2,
	         .seq = 0,
	         .plan_id = 2,
	         .size = size_2_4,
	         .iv = rate(25000, t0(), t0() + S(5), S(2))},
	};
	struct meter_plan_sum cov[4];
	size_t n = 0;
	/* 15 s: c (5 s), then b (10 s), then nothing of a */
	assert_int_equal(meter_trial_cover_hour(S(15), ivs, 3, cov, &n, 4), METER_OK);
	assert_int_equal(n, 2);
	assert_int_equal(ivs[0].rank, 2);
	assert_int_equal(ivs[1].rank, 0);
	assert_int_equal(cov[0].plan_id, 2);
	assert_true(cov[0].u.wall_us == S(5));
	assert_true(cov[1].u.wall_us == S(10));
	assert_true(cov[1].u.cpu_measured_us == S(4)); /* b's, not a's */
	/* 20 s: and half of a, its CPU in proportion */
	assert_int_equal(meter_trial_cover_hour(S(20), ivs, 3, cov, &n, 4), METER_OK);
	assert_true(cov[1].u.wall_us == S(15));
	assert_true(cov[1].u.cpu_measured_us == S(4) + S(5));
	/* more plans than room */
	assert_int_equal(meter_trial_cover_hour(S(20), ivs, 3, cov, &n, 1), METER_ERANGE);
}

/* Where a grant runs out over periods in time order: the first by whose end the time used
 * reaches it (at it counts), and the time used before that period. */
static void the_grant_runs_out_in_the_first_period_that_reaches_it(void **state)
{
	(void)state;
	meter_i128 walls[] = {S(100), 0, S(50), S(50)};
	int64_t before = -1;
	assert_int_equal(meter_trial_crossing(S(150), 0, walls, 4, &before), 2);
	assert_int_equal(before, S(100));
	assert_int_equal(meter_trial_crossing(S(151), 0, walls, 4, &before), 3);
	assert_int_equal(before, S(150));
	assert_int_equal(meter_trial_crossing(S(100), 0, walls, 4, &before), 0);
	assert_int_equal(before, 0);
	assert_int_equal(meter_trial_crossing(S(250), 0, walls, 4, &before), -1);
	/* after time used before the periods */
	assert_int_equal(meter_trial_crossing(S(150), S(60), walls, 4, &before), 0);
	assert_int_equal(before, S(60));
}

static void worked_example_estimate_is_0_375_plus_0_90(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	struct meter_estimate_input in = {
	        .runs = 300, .minutes_milli = 6000, .size = size_2_4, .busy_vcpu_milli = 500};
	struct meter_estimate e;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_OK);
	assert_int_equal(e.cpu.amount, INT64_C(375000000));
	assert_int_equal(e.memory.amount, INT64_C(900000000));
	assert_int_equal(e.total, INT64_C(1275000000));
	assert_string_equal(e.cpu.formula, "300 × 6 min / 60 × 0.5 vCPU × $0.025");
	assert_string_equal(e.memory.formula, "300 × 6 min / 60 × 4 GiB × $0.0075");
}

static void estimate_raises_idle_cpu_to_the_floor_and_refuses_absurd_input(void **state)
{
	(void)state;
	struct meter_plan p = default_plan();
	struct meter_estimate_input in = {
	        .runs = 300, .minutes_milli = 6000, .size = size_2_4, .busy_vcpu_milli = 0};
	struct meter_estimate e;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_OK);
	assert_int_equal(e.billed_vcpu_nano, INT64_C(50000000)); /* 0.05 vCPU */
	assert_int_equal(e.cpu.amount, INT64_C(37500000));       /* 30 h x 0.05 x 0.025 */
	assert_string_equal(e.cpu.formula, "300 × 6 min / 60 × 0.05 vCPU × $0.025");
	in.busy_vcpu_milli = 2001;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_ERANGE);
	in.busy_vcpu_milli = 500;
	in.runs = 0;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_ERANGE);
	in.runs = METER_EST_RUNS_MAX + 1;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_ERANGE);
	in.runs = 1;
	in.size.mem_mgib = -1;
	assert_int_equal(meter_estimate_month(&p, &in, &e), METER_ERANGE);
}

static void a_resumed_series_rates_like_the_whole_one(void **state)
{
	(void)state;
	struct meter_series whole, part;
	struct meter_span a, b;
	struct meter_sample s1 = {4, t0() + S(10), S(3)}, s2 = {4, t0() + S(20), S(9)},
	                    other = {5, t0() + S(30), S(2)};
	meter_series_init(&whole);
	assert_int_equal(meter_series_next(&whole, &s1, t0(), &a), METER_OK);
	assert_int_equal(meter_series_next(&whole, &s2, t0(), &a), METER_OK);
	meter_series_resume(&part, &s1);
	assert_int_equal(meter_series_next(&part, &s2, t0(), &b), METER_OK);
	assert_memory_equal(&a, &b, sizeof a);
	/* after another incarnation: the next one opens with zero length, all its CPU */
	meter_series_after_other(&part);
	assert_int_equal(meter_series_next(&part, &other, t0(), &b), METER_OK);
	assert_int_equal(b.end_us - b.start_us, 0);
	assert_int_equal(b.cpu_us, S(2));
}

static void the_trial_covers_usage_sums_in_proportion(void **state)
{
	(void)state;
	struct meter_usage u = {.cpu_measured_us = S(30),
	                        .cpu_billed_us = S(40),
	                        .busy_us = S(60),
	                        .idle_us = S(40),
	                        .wall_us = S(100),
	                        .mem_mgib_us = 4000 * S(100)};
	struct meter_usage c;
	int64_t left = S(25);
	assert_int_equal(meter_trial_cover_usage(&left, &u, &c), METER_OK);
	assert_int_equal(left, 0);
	assert_int_equal(c.wall_us, S(25));
	assert_int_equal(c.cpu_billed_us, S(10));
	assert_int_equal(c.cpu_measured_us, MS(7500));
	assert_int_equal(c.busy_us + c.idle_us, S(25));
	assert_int_equal(c.mem_mgib_us, 4000 * S(25));
	left = S(500);
	assert_int_equal(meter_trial_cover_usage(&left, &u, &c), METER_OK);
	assert_memory_equal(&c, &u, sizeof u);
	assert_int_equal(left, S(400));
	left = 0;
	assert_int_equal(meter_trial_cover_usage(&left, &u, &c), METER_OK);
	assert_int_equal(c.cpu_billed_us, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(busy_hour_costs_0_08_and_idle_hour_0_03125),
	        cmocka_unit_test(a_floor_of_zero_bills_pure_measured_cpu),
	        cmocka_unit_test(design_example_bills_21_cpu_seconds_of_20_measured),
	        cmocka_unit_test(cpu_above_the_vcpus_is_clamped),
	        cmocka_unit_test(cpu_just_at_the_floor_is_idle_just_above_is_busy),
	        cmocka_unit_test(a_negative_interval_or_cpu_is_refused),
	        cmocka_unit_test(a_repeated_timestamp_counts_once_and_going_back_is_refused),
	        cmocka_unit_test(first_sample_counts_all_cpu_since_the_cgroup_began),
	        cmocka_unit_test(a_counter_below_its_highest_adds_nothing_until_it_passes_it),
	        cmocka_unit_test(a_new_incarnation_starts_a_new_series),
	        cmocka_unit_test(a_stop_after_the_last_sample_is_one_more_idle_interval),
	        cmocka_unit_test(a_cgroup_lingering_after_the_stop_costs_nothing),
	        cmocka_unit_test(the_collector_end_closes_its_incarnation_only),
	        cmocka_unit_test(the_platform_stop_ends_the_newest_incarnation_begun_before_it),
	        cmocka_unit_test(a_price_change_rates_by_the_plan_in_force_at_the_interval_end),
	        cmocka_unit_test(an_interval_belongs_to_the_hour_in_which_it_ends),
	        cmocka_unit_test(usage_sums_refuse_overflow_and_stay_unchanged),
	        cmocka_unit_test(a_month_of_10000_sandboxes_of_256_vcpus_and_1_tib_is_exact),
	        cmocka_unit_test(
	                trial_grant_covers_intervals_in_order_and_the_crossing_one_in_part),
	        cmocka_unit_test(worked_example_estimate_is_0_375_plus_0_90),
	        cmocka_unit_test(estimate_raises_idle_cpu_to_the_floor_and_refuses_absurd_input),
	        cmocka_unit_test(a_resumed_series_rates_like_the_whole_one),
	        cmocka_unit_test(the_trial_covers_usage_sums_in_proportion),
	        cmocka_unit_test(the_crossing_hour_is_covered_by_end_then_sandbox_then_series),
	        cmocka_unit_test(the_grant_runs_out_in_the_first_period_that_reaches_it),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
