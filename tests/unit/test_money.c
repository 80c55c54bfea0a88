/* Exact money: decimals, rounding half away from zero to cents, overflow. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/decimal.h"
#include "meter/money.h"

static const char *cents(meter_money m)
{
	static char buf[METER_MONEY_BUF];
	meter_money_format_cents(m, buf, sizeof buf);
	return buf;
}

static const char *exact(meter_money m)
{
	static char buf[METER_MONEY_BUF];
	meter_money_format_exact(m, buf, sizeof buf);
	return buf;
}

static meter_money money(const char *s)
{
	meter_money m = 0;
	assert_int_equal(meter_money_parse(s, true, &m), METER_OK);
	return m;
}

static void parse_keeps_every_digit(void **state)
{
	(void)state;
	assert_int_equal(money("1.275"), INT64_C(1275000000));
	assert_int_equal(money("0.000000001"), 1);
	assert_int_equal(money("0.025"), INT64_C(25000000));
	assert_int_equal(money("-0.5"), INT64_C(-500000000));
	assert_int_equal(money("9223372036.854775807"), INT64_MAX);
	assert_int_equal(money("-9223372036.854775808"), INT64_MIN);
	assert_int_equal(money("0.1000000000000"), INT64_C(100000000)); /* trailing zeros */
}

static void parse_refuses_what_is_not_a_plain_decimal(void **state)
{
	(void)state;
	meter_money m = 42;
	const char *bad[] = {"",     "-",   ".5",  "5.",  "1e3",   "+1",  " 1", "1 ",
	                     "0x10", "1,5", "nan", "inf", "1.2.3", "--1", "١"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(meter_money_parse(bad[i], true, &m), METER_EINVAL);
	assert_int_equal(meter_money_parse("0.0000000001", true, &m), METER_EPRECISION);
	assert_int_equal(meter_money_parse("9223372036.854775808", true, &m), METER_EOVERFLOW);
	assert_int_equal(meter_money_parse("99999999999999999999", true, &m), METER_EOVERFLOW);
	assert_int_equal(meter_money_parse("-1", false, &m), METER_ERANGE);
	assert_int_equal(m, 42); /* untouched by every failure */
	assert_int_equal(meter_money_parse("-0", false, &m), METER_OK);
	assert_int_equal(m, 0);
}

static void worked_example_rounds_to_1_28_not_1_27(void **state)
{
	(void)state;
	meter_money cpu = money("0.375"), mem = money("0.9"), total;
	assert_int_equal(meter_money_add(cpu, mem, &total), METER_OK);
	assert_string_equal(cents(cpu), "0.38");
	assert_string_equal(exact(cpu), "0.375");
	assert_string_equal(cents(mem), "0.90");
	assert_string_equal(exact(mem), "0.90");
	assert_string_equal(cents(total), "1.28");
	assert_string_equal(exact(total), "1.275");
}

static void half_cents_round_away_from_zero(void **state)
{
	(void)state;
	assert_string_equal(cents(money("0.005")), "0.01");
	assert_string_equal(cents(money("0.015")), "0.02");
	assert_string_equal(cents(money("0.025")), "0.03");
	assert_string_equal(cents(money("2.675")), "2.68"); /* 2.67 in binary floating point */
	assert_string_equal(cents(money("0.004999999")), "0.00");
	assert_string_equal(cents(money("0.005000001")), "0.01");
	assert_string_equal(cents(money("-0.005")), "-0.01"); /* a credit rounds like its charge */
	assert_string_equal(cents(money("-0.004999999")), "0.00");
	assert_string_equal(cents(0), "0.00");
	assert_int_equal(meter_money_round_cents(money("1.275")), money("1.28"));
	assert_int_equal(meter_money_round_cents(money("-1.275")), money("-1.28"));
}

static void exact_format_keeps_two_decimals_at_least(void **state)
{
	(void)state;
	assert_string_equal(exact(money("0.08")), "0.08");
	assert_string_equal(exact(money("0.03125")), "0.03125");
	assert_string_equal(exact(money("12")), "12.00");
	assert_string_equal(exact(money("0.000145833")), "0.000145833");
	assert_string_equal(exact(INT64_MIN), "-9223372036.854775808");
	char buf[METER_DECIMAL_BUF];
	meter_decimal_format(5000, 3, 0, buf, sizeof buf);
	assert_string_equal(buf, "5");
	meter_decimal_format(500, 3, 0, buf, sizeof buf);
	assert_string_equal(buf, "0.5");
}

static void overflow_is_an_error_never_a_wrap(void **state)
{
	(void)state;
	meter_money out = 7;
	assert_int_equal(meter_money_add(INT64_MAX, 1, &out), METER_EOVERFLOW);
	assert_int_equal(meter_money_add(INT64_MIN, -1, &out), METER_EOVERFLOW);
	assert_int_equal(out, 7);
	assert_int_equal(meter_money_of(INT64_MAX, INT64_MAX, 1, &out), METER_EOVERFLOW);
	assert_int_equal(meter_money_of(1, 1, 0, &out), METER_EINVAL);
	assert_int_equal(out, 7);
	/* A huge product that divides back into range is fine: 128-bit middle. */
	assert_int_equal(meter_money_of(INT64_C(3600000000000), INT64_C(25000000),
	                                INT64_C(3600000000), &out),
	                 METER_OK);
	assert_int_equal(out, INT64_C(25000000000)); /* 1,000 vCPU-hours at $0.025 = $25 */
}

static void amount_of_a_quantity_rounds_once_to_the_nano_dollar(void **state)
{
	(void)state;
	meter_money out;
	/* 21 CPU-seconds at $0.025 per vCPU-hour = $0.000145833... */
	assert_int_equal(meter_money_of(21000000, money("0.025"), INT64_C(3600000000), &out),
	                 METER_OK);
	assert_int_equal(out, 145833);
	/* 1 µs at $0.025/h is 6.9e-12 dollars: rounds to 0 nano-dollars */
	assert_int_equal(meter_money_of(1, money("0.025"), INT64_C(3600000000), &out), METER_OK);
	assert_int_equal(out, 0);
	/* half a nano-dollar rounds up */
	assert_int_equal(meter_money_of(1, 1, 2, &out), METER_OK);
	assert_int_equal(out, 1);
	assert_int_equal(meter_money_of(-1, 1, 2, &out), METER_OK);
	assert_int_equal(out, -1);
}

/* A 128-bit value as libc prints it: the high and low parts of 10^18 apart. */
static void libc_text(meter_i128 v, char *buf, size_t len)
{
	meter_u128 mag = v < 0 ? (meter_u128)0 - (meter_u128)v : (meter_u128)v;
	const meter_u128 e18 = 1000000000000000000ULL;
	unsigned long long top = (unsigned long long)(mag / e18 / e18),
	                   mid = (unsigned long long)(mag / e18 % e18),
	                   low = (unsigned long long)(mag % e18);
	const char *sign = v < 0 ? "-" : "";
	if (top)
		snprintf(buf, len, "%s%llu%018llu%018llu", sign, top, mid, low);
	else if (mid)
		snprintf(buf, len, "%s%llu%018llu", sign, mid, low);
	else
		snprintf(buf, len, "%s%llu", sign, low);
}

static void quantities_past_64_bits_print_and_parse_exactly(void **state)
{
	(void)state;
	char a[METER_QTY_BUF], b[METER_QTY_BUF];
	unsigned int seed = 7;
	meter_i128 top = METER_I128_MAX, bottom = METER_I128_MIN;
	meter_i128 cases[400] = {
	        0, 1, -1, INT64_MAX, INT64_MIN, (meter_i128)INT64_MAX + 1, top, bottom + 1, bottom};
	for (int i = 9; i < 400; i++) {
		meter_u128 v = 0;
		for (int k = 0; k < 4; k++)
			v = (v << 32) | (unsigned)rand_r(&seed);
		/* every magnitude, both signs */
		meter_u128 mag = v >> (rand_r(&seed) % 121 + 1);
		cases[i] = rand_r(&seed) % 2 ? -(meter_i128)mag : (meter_i128)mag;
	}
	for (int i = 0; i < 400; i++) {
		meter_qty_format(cases[i], 0, 0, a, sizeof a);
		libc_text(cases[i], b, sizeof b);
		assert_string_equal(a, b);
		meter_i128 back = 12345;
		assert_int_equal(meter_qty_parse(a, true, &back), METER_OK);
		assert_true(back == cases[i]);
	}
	meter_i128 v = 0;
	assert_int_equal(meter_qty_parse("170141183460469231731687303715884105728", true, &v),
	                 METER_EOVERFLOW); /* 2^127 */
	assert_int_equal(meter_qty_parse("-1", false, &v), METER_ERANGE);
	assert_int_equal(meter_qty_parse("1.5", true, &v), METER_EINVAL);
	assert_int_equal(meter_qty_parse("", true, &v), METER_EINVAL);
	assert_true(v == 0);
	/* scaled and per-unit forms */
	meter_qty_format(-1275, 3, 2, a, sizeof a);
	assert_string_equal(a, "-1.275");
	meter_qty_format(900, 3, 2, a, sizeof a);
	assert_string_equal(a, "0.90");
	meter_qty_format(5, 3, 0, a, sizeof a);
	assert_string_equal(a, "0.005");
	meter_qty_per(5400000000, 3600000000, 6, a, sizeof a);
	assert_string_equal(a, "1.5");
	meter_qty_per(1, 3600000000, 6, a, sizeof a); /* 2.8e-10 h rounds to 0 */
	assert_string_equal(a, "0");
	meter_qty_per(1800, 3600000000, 6, a, sizeof a); /* 5e-7 h: half up */
	assert_string_equal(a, "0.000001");
	meter_qty_per(top, 1, 9, a, sizeof a);
	assert_string_equal(a, "overflow");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(parse_keeps_every_digit),
	        cmocka_unit_test(parse_refuses_what_is_not_a_plain_decimal),
	        cmocka_unit_test(worked_example_rounds_to_1_28_not_1_27),
	        cmocka_unit_test(half_cents_round_away_from_zero),
	        cmocka_unit_test(exact_format_keeps_two_decimals_at_least),
	        cmocka_unit_test(overflow_is_an_error_never_a_wrap),
	        cmocka_unit_test(amount_of_a_quantity_rounds_once_to_the_nano_dollar),
	        cmocka_unit_test(quantities_past_64_bits_print_and_parse_exactly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
