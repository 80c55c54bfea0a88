/* The last interval of sandboxes removed unread: collector/ends.c's arithmetic. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "collector/ends.h"

static void one_gone_is_exactly_what_its_parent_gained(void **state)
{
	(void)state;
	struct end_share e = {.base = 5000000, .rate = 900000, .elapsed_us = 700000};
	ends_share(&e, 1, 612345, false, 2);
	assert_int_equal(e.cpu, 5612345);
	assert_int_equal(e.how, END_PARENT);
	assert_string_equal(end_cpu_name(e.how), "parent");
}

static void more_than_it_could_have_used_is_an_estimate_at_that_most(void **state)
{
	(void)state;
	/* 0.7 s on 2 CPUs is at most 1.42 s with the 10 ms slack */
	struct end_share e = {.base = 100, .rate = -1, .elapsed_us = 700000};
	ends_share(&e, 1, 5000000, false, 2);
	assert_int_equal(e.how, END_ESTIMATED);
	assert_int_equal(e.cpu, 100 + 1420000);
}

static void several_gone_share_the_exact_sum_by_their_rates(void **state)
{
	(void)state;
	struct end_share e[3] = {
	        {.base = 10, .rate = 1000000, .elapsed_us = 500000}, /* guessed 500,000 */
	        {.base = 20, .rate = 500000, .elapsed_us = 500000},  /* 250,000 */
	        {.base = 30, .rate = 0, .elapsed_us = 500000},       /* 0 */
	};
	ends_share(e, 3, 600001, false, 2);
	int64_t sum = 0;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(e[i].how, END_ESTIMATED);
		assert_true(e[i].cpu >= e[i].base);
		sum += e[i].cpu - e[i].base;
	}
	assert_int_equal(sum, 600001); /* the sum is the parent's, to the microsecond */
	assert_int_equal(e[0].cpu - e[0].base, 400001);
	assert_int_equal(e[1].cpu - e[1].base, 200000);
	assert_int_equal(e[2].cpu, 30);
}

static void without_rates_the_sum_goes_by_time(void **state)
{
	(void)state;
	struct end_share e[2] = {
	        {.base = 0, .rate = -1, .elapsed_us = 300000},
	        {.base = 0, .rate = -1, .elapsed_us = 100000},
	};
	ends_share(e, 2, 400000, false, 4);
	assert_int_equal(e[0].cpu, 300000);
	assert_int_equal(e[1].cpu, 100000);
}

static void a_busy_parent_gives_each_its_rate_never_more_than_it_gained(void **state)
{
	(void)state;
	struct end_share e = {.base = 1000, .rate = 250000, .elapsed_us = 400000};
	ends_share(&e, 1, 900000, true, 2); /* the parent ran 800 ms of its own */
	assert_int_equal(e.how, END_ESTIMATED);
	assert_int_equal(e.cpu, 1000 + 100000);
	e = (struct end_share){.base = 1000, .rate = 250000, .elapsed_us = 400000};
	ends_share(&e, 1, 40000, true, 2);
	assert_int_equal(e.cpu, 1000 + 40000);
	e = (struct end_share){.base = 1000, .rate = -1, .elapsed_us = 400000};
	ends_share(&e, 1, 40000, true, 2); /* nothing known: nothing added */
	assert_int_equal(e.cpu, 1000);
	assert_int_equal(e.how, END_ESTIMATED);
}

static void an_unread_parent_leaves_the_last_reading(void **state)
{
	(void)state;
	struct end_share e[2] = {{.base = 7, .rate = 5, .elapsed_us = 9},
	                         {.base = 8, .rate = 5, .elapsed_us = 9}};
	ends_share(e, 2, -1, false, 2);
	assert_int_equal(e[0].cpu, 7);
	assert_int_equal(e[1].cpu, 8);
	assert_int_equal(e[0].how, END_LAST);
	assert_string_equal(end_cpu_name(END_LAST), "last");
	assert_string_equal(end_cpu_name(END_READ), "read");
	assert_string_equal(end_cpu_name(END_ESTIMATED), "estimated");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(one_gone_is_exactly_what_its_parent_gained),
	        cmocka_unit_test(more_than_it_could_have_used_is_an_estimate_at_that_most),
	        cmocka_unit_test(several_gone_share_the_exact_sum_by_their_rates),
	        cmocka_unit_test(without_rates_the_sum_goes_by_time),
	        cmocka_unit_test(a_busy_parent_gives_each_its_rate_never_more_than_it_gained),
	        cmocka_unit_test(an_unread_parent_leaves_the_last_reading),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
