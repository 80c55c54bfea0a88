/*
 * What credit grants give each month (rule 11, meter/credit.c): worked cases,
 * then random accounts against the second implementation in
 * tests/reference/ref_credit.c, written apart from meter/ from the rule's text.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/credit.h"
#include "meter/money.h"
#include "meter/rating.h"
#include "tests/reference/ref_credit.h"

#define D    METER_NANO_PER_DOLLAR
#define DAY  INT64_C(86400000000)
#define NONE METER_TIME_NONE

/* Months of 30 days from day 0: month i is [30i, 30(i+1)) days. */
static struct meter_credit_month draft(int i, meter_money remaining)
{
	return (struct meter_credit_month){
	        .start_us = 30 * i * DAY, .end_us = 30 * (i + 1) * DAY, .remaining = remaining};
}

static struct meter_credit grant(int64_t id, meter_money amount, int64_t priority)
{
	return (struct meter_credit){.id = id,
	                             .amount = amount,
	                             .effective_us = 0,
	                             .expires_us = NONE,
	                             .priority = priority};
}

/* A sign-up credit of $100 and a goodwill one of $5 at priority 10: the goodwill one
 * goes first; $30 of usage takes $5 of it and $25 of the other; next month's $90 takes
 * the $75 left, and $15 stays to pay. */
static void grants_go_in_priority_order_and_carry_into_later_drafts(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, 100 * D, 100), grant(2, 5 * D, 10)};
	struct meter_credit_month m[] = {draft(0, 30 * D), draft(1, 90 * D)};
	meter_money t[4];
	assert_int_equal(meter_credits_apply(g, 2, m, 2, t), METER_OK);
	assert_true(t[0] == 25 * D && t[1] == 5 * D);
	assert_true(t[2] == 75 * D && t[3] == 0);
}

/* At one priority the sooner expiry goes first, a grant that never expires last, then
 * effective_at, then id. */
static void ties_go_to_the_soonest_expiry_then_effective_at_then_id(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, D, 100), grant(2, D, 100), grant(3, D, 100),
	                           grant(4, D, 100), grant(5, D, 100)};
	g[1].expires_us = 90 * DAY; /* soonest */
	g[2].expires_us = 120 * DAY;
	g[3].effective_us = 2 * DAY; /* after 5 (effective 1 day) */
	g[4].effective_us = DAY;
	/* order: 2, 3, 1 (no expiry, effective 0), 5, 4 */
	meter_money want_order[] = {2, 3, 1, 5, 4};
	for (int k = 1; k <= 5; k++) {
		struct meter_credit_month m = draft(0, k * D);
		meter_money t[5];
		assert_int_equal(meter_credits_apply(g, 5, &m, 1, t), METER_OK);
		for (int j = 0; j < 5; j++) {
			bool in_first_k = false;
			for (int q = 0; q < k; q++)
				in_first_k |= want_order[q] == g[j].id;
			assert_int_equal(t[j], in_first_k ? D : 0);
		}
	}
}

/* A grant that expired before a month starts, or becomes effective after it ends, gives
 * it nothing; one expiring inside a month, or effective on its last day, is used whole. */
static void a_month_uses_grants_effective_before_its_end_and_not_expired_by_its_start(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, D, 1), grant(2, D, 1), grant(3, D, 1), grant(4, D, 1)};
	g[0].expires_us = 30 * DAY;       /* at month 1's start: expired */
	g[1].effective_us = 60 * DAY;     /* at its end: not yet */
	g[2].expires_us = 45 * DAY;       /* inside: usable */
	g[3].effective_us = 60 * DAY - 1; /* the last µs: usable */
	struct meter_credit_month m = draft(1, 10 * D);
	meter_money t[4];
	assert_int_equal(meter_credits_apply(g, 4, &m, 1, t), METER_OK);
	assert_true(t[0] == 0 && t[1] == 0 && t[2] == D && t[3] == D);
}

/* A final month took what it recorded, even of a grant voided or expired since; the
 * drafts after it take from what is left, nothing of a voided grant. */
static void finals_keep_what_they_recorded_and_voids_stop_the_rest(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, 10 * D, 1), grant(2, 10 * D, 2)};
	g[0].voided = true;
	meter_money rec[] = {4 * D, 1 * D};
	struct meter_credit_month m[] = {draft(0, 0), draft(1, 20 * D), draft(2, 20 * D)};
	m[0].final = true;
	m[0].recorded = rec;
	meter_money t[6];
	assert_int_equal(meter_credits_apply(g, 2, m, 3, t), METER_OK);
	assert_true(t[0] == 4 * D && t[1] == D); /* as recorded */
	assert_true(t[2] == 0 && t[3] == 9 * D); /* the void: nothing of grant 1 */
	assert_true(t[4] == 0 && t[5] == 0);     /* grant 2 used up */
}

/* Nothing to pay (a trial month, or adjustments that lower it below zero): no credit. */
static void a_month_with_nothing_to_pay_takes_nothing(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, D, 1)};
	struct meter_credit_month m[] = {draft(0, 0), draft(1, -3), draft(2, 7)};
	meter_money t[3];
	assert_int_equal(meter_credits_apply(g, 1, m, 3, t), METER_OK);
	assert_true(t[0] == 0 && t[1] == 0 && t[2] == 7);
}

static void bad_grants_and_records_are_refused_and_nothing_written(void **state)
{
	(void)state;
	struct meter_credit g[] = {grant(1, D, 1)};
	struct meter_credit_month m = draft(0, D);
	meter_money t[1] = {-42};
	g[0].amount = 0;
	assert_int_equal(meter_credits_apply(g, 1, &m, 1, t), METER_EINVAL);
	g[0].amount = D;
	g[0].expires_us = g[0].effective_us;
	assert_int_equal(meter_credits_apply(g, 1, &m, 1, t), METER_EINVAL);
	g[0].expires_us = NONE;
	meter_money rec[] = {D + 1}; /* more than the grant */
	m.final = true;
	m.recorded = rec;
	assert_int_equal(meter_credits_apply(g, 1, &m, 1, t), METER_EINVAL);
	rec[0] = -1;
	assert_int_equal(meter_credits_apply(g, 1, &m, 1, t), METER_EINVAL);
	assert_int_equal(t[0], -42);
}

/* xorshift64*, seeded per case: the same seed gives the same account. */
static uint64_t rnd_state;
static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * UINT64_C(2685821657736338717);
}
static int64_t pick(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

enum { CASES = 20000, GMAX = 12, MMAX = 8 };

/* Random accounts: up to 12 grants (amounts from a nano-dollar to $500, priorities with
 * many ties, expiries and effective times on and off month bounds, voids) over up to 8
 * months, the first ones final with what they recorded (a prefix of the drafts the
 * rule gave them, taken from a run of the reference), the rest drafts. */
static void random_accounts_agree_with_the_reference(void **state)
{
	(void)state;
	int compared = 0;
	for (int c = 0; c < CASES; c++) {
		rnd_state = UINT64_C(0x9E3779B97F4A7C15) * (uint64_t)(c + 1);
		size_t n = (size_t)pick(0, GMAX), nm = (size_t)pick(1, MMAX);
		struct meter_credit g[GMAX];
		struct ref_credit rg[GMAX];
		for (size_t j = 0; j < n; j++) {
			int64_t eff = pick(0, 4) == 0 ? 30 * pick(0, 8) * DAY
			                              : pick(0, 240) * DAY + pick(-1, 1);
			if (eff < 0)
				eff = 0;
			int64_t exp = pick(0, 2) == 0   ? NONE
			              : pick(0, 3) == 0 ? eff + 30 * pick(1, 8) * DAY
			                                : eff + pick(1, 200) * DAY + pick(0, 1);
			g[j] = (struct meter_credit){.id = (int64_t)((j * 5 + (size_t)c) % 13) + 1,
			                             .amount = pick(0, 3) == 0 ? pick(1, 1000)
			                                                       : pick(1, 500) * D /
			                                                                 pick(1, 8),
			                             .effective_us = eff,
			                             .expires_us = exp,
			                             .priority = pick(0, 3) * 50,
			                             .voided = pick(0, 5) == 0};
			rg[j] = (struct ref_credit){.id = g[j].id,
			                            .amount = g[j].amount,
			                            .effective_us = eff,
			                            .expires_us = exp == NONE ? REF_NONE : exp,
			                            .priority = g[j].priority,
			                            .voided = g[j].voided};
		}
		struct meter_credit_month m[MMAX];
		struct ref_credit_month rm[MMAX];
		meter_money rec[MMAX][GMAX];
		size_t nfinal = (size_t)pick(0, (int64_t)nm);
		for (size_t i = 0; i < nm; i++) {
			meter_money rem =
			        pick(0, 4) == 0 ? -pick(0, 1000) : pick(0, 300) * D + pick(0, 999);
			m[i] = (struct meter_credit_month){.start_us = 30 * (int64_t)i * DAY,
			                                   .end_us = 30 * (int64_t)(i + 1) * DAY,
			                                   .remaining = rem};
			rm[i] = (struct ref_credit_month){
			        .start_us = m[i].start_us, .end_us = m[i].end_us, .remaining = rem};
		}
		/* the finals recorded what the rule gave them as drafts, before any void */
		if (nfinal && n) {
			struct ref_credit unvoided[GMAX];
			memcpy(unvoided, rg, n * sizeof *rg);
			for (size_t j = 0; j < n; j++)
				unvoided[j].voided = false;
			int64_t first[MMAX * GMAX];
			assert_true(ref_credits(unvoided, n, rm, nfinal, first));
			for (size_t i = 0; i < nfinal; i++)
				for (size_t j = 0; j < n; j++)
					rec[i][j] = first[i * n + j];
		}
		for (size_t i = 0; i < nfinal; i++) {
			m[i].final = rm[i].final = true;
			m[i].recorded = rec[i];
			rm[i].recorded = rec[i];
		}
		if (n && pick(0, 49) == 0) /* now and then an invalid grant: both must refuse */
			g[0].amount = rg[0].amount = -pick(0, 1);
		meter_money t[MMAX * GMAX];
		int64_t rt[MMAX * GMAX];
		enum meter_status st = meter_credits_apply(g, n, m, nm, t);
		bool rok = ref_credits(rg, n, rm, nm, rt);
		if ((st == METER_OK) != rok)
			fail_msg("case %d: meter says %s, the reference %s", c, meter_strerror(st),
			         rok ? "valid" : "invalid");
		if (!rok)
			continue;
		for (size_t i = 0; i < nm * n; i++)
			if (t[i] != rt[i])
				fail_msg("case %d: month %zu grant %zu: meter %lld, the reference "
				         "%lld",
				         c, i / n, i % n, (long long)t[i], (long long)rt[i]);
		compared++;
	}
	printf("credits: %d random accounts, %d compared with the reference, 0 differ\n", CASES,
	       compared);
	assert_true(compared > CASES / 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(grants_go_in_priority_order_and_carry_into_later_drafts),
	        cmocka_unit_test(ties_go_to_the_soonest_expiry_then_effective_at_then_id),
	        cmocka_unit_test(
	                a_month_uses_grants_effective_before_its_end_and_not_expired_by_its_start),
	        cmocka_unit_test(finals_keep_what_they_recorded_and_voids_stop_the_rest),
	        cmocka_unit_test(a_month_with_nothing_to_pay_takes_nothing),
	        cmocka_unit_test(bad_grants_and_records_are_refused_and_nothing_written),
	        cmocka_unit_test(random_accounts_agree_with_the_reference),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
