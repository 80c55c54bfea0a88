/* RFC 3339 timestamps, exactly, and month boundaries. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>

#include "meter/timefmt.h"

static int64_t parse(const char *s)
{
	int64_t t = 0;
	assert_int_equal(meter_time_parse(s, &t), METER_OK);
	return t;
}

static const char *fmt(int64_t t)
{
	static char buf[METER_TIME_BUF];
	meter_time_format(t, buf, sizeof buf);
	return buf;
}

static void known_instants_parse_to_their_epoch(void **state)
{
	(void)state;
	assert_int_equal(parse("1970-01-01T00:00:00Z"), 0);
	assert_int_equal(parse("2026-09-25T00:00:00Z"), INT64_C(1790294400) * 1000000);
	assert_int_equal(parse("2026-09-25T02:00:00+02:00"), parse("2026-09-25T00:00:00Z"));
	assert_int_equal(parse("2026-09-24T22:30:00-01:30"), parse("2026-09-25T00:00:00Z"));
	assert_int_equal(parse("2026-09-25T00:00:00.5Z"), parse("2026-09-25T00:00:00Z") + 500000);
	assert_int_equal(parse("2028-02-29T12:00:00z"), parse("2028-02-29 12:00:00Z"));
}

static void formatting_round_trips(void **state)
{
	(void)state;
	const char *s[] = {"2026-09-25T00:00:00Z", "2026-12-31T23:59:59.999999Z",
	                   "2028-02-29T00:00:00.000001Z", "1970-01-01T00:00:00Z"};
	for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
		assert_string_equal(fmt(parse(s[i])), s[i]);
}

static void malformed_or_impossible_times_are_refused(void **state)
{
	(void)state;
	const char *bad[] = {"",
	                     "2026-09-25",
	                     "2026-09-25T00:00:00",
	                     "2026-02-29T00:00:00Z",
	                     "2026-13-01T00:00:00Z",
	                     "2026-09-25T24:00:00Z",
	                     "2026-09-25T00:00:60Z",
	                     "2026-09-25T00:00:00.Z",
	                     "2026-09-25T00:00:00.1234567Z",
	                     "2026-09-25T00:00:00Zjunk",
	                     "2026-09-25T00:00:00+0200",
	                     "1969-12-31T23:59:59Z",
	                     "2026-9-25T00:00:00Z",
	                     "2026-10-01T00:00:00+",
	                     "2026-10-01T00:00:00+01",
	                     "2026-10-01T00:00:00+01:0"};
	int64_t t = 42;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(meter_time_parse(bad[i], &t), METER_EINVAL);
	assert_int_equal(t, 42);
}

static void month_boundaries(void **state)
{
	(void)state;
	int64_t t = parse("2026-12-31T23:59:59.999999Z");
	assert_int_equal(meter_month_start(t), parse("2026-12-01T00:00:00Z"));
	assert_int_equal(meter_month_next(meter_month_start(t)), parse("2027-01-01T00:00:00Z"));
	assert_int_equal(meter_month_start(parse("2027-01-01T00:00:00Z")),
	                 parse("2027-01-01T00:00:00Z"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(known_instants_parse_to_their_epoch),
	        cmocka_unit_test(formatting_round_trips),
	        cmocka_unit_test(malformed_or_impossible_times_are_refused),
	        cmocka_unit_test(month_boundaries),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
