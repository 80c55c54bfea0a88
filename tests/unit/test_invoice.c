/* Invoice lines from exact quantities, and the JSON and CSV renderers (golden files). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/allocate.h"
#include "meter/invoice.h"
#include "meter/ledger.h"
#include "meter/timefmt.h"
#include "reports/csv.h"
#include "reports/invoice_doc.h"

#define H INT64_C(3600000000) /* an hour in µs */

static struct meter_plan plan(int64_t id, const char *name, meter_money cpu, meter_money mem)
{
	struct meter_plan p = {
	        .id = id, .cpu_vcpu_hour = cpu, .memory_gib_hour = mem, .cpu_floor_ppm = 25000};
	snprintf(p.name, sizeof p.name, "%s", name);
	meter_time_parse("2026-09-25T00:00:00Z", &p.effective_from_us);
	return p;
}

/* 300 runs of 6 minutes, 2 vCPU, 4 GiB, 0.5 vCPU busy: 15 vCPU-hours, 120 GiB-hours. */
static struct meter_usage worked_example(void)
{
	return (struct meter_usage){.cpu_measured_us = 15 * H,
	                            .cpu_billed_us = 15 * H,
	                            .busy_us = 30 * H,
	                            .wall_us = 30 * H,
	                            .mem_mgib_us = 4000 * 30 * H};
}

static char *slurp(const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/tests/data/%s", METER_SOURCE_DIR, name);
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		fail_msg("missing golden file %s", path);
	static char buf[65536];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void the_worked_example_invoice_is_1_28_never_1_27(void **state)
{
	(void)state;
	struct meter_plan p = plan(1, "default", 25000000, 7500000);
	struct meter_plan_usage u = {.plan = &p, .used = worked_example()};
	struct meter_invoice inv;
	assert_int_equal(meter_invoice_build(&u, 1, &inv), METER_OK);
	assert_int_equal(inv.n, 2);
	assert_int_equal(inv.lines[0].amount, INT64_C(375000000));
	assert_int_equal(inv.lines[1].amount, INT64_C(900000000));
	assert_int_equal(inv.total, INT64_C(1275000000));

	struct invoice_meta m = {
	        .account_id = "acme", .account_name = "Acme, \"the\" company", .status = "draft"};
	meter_time_parse("2026-10-01T00:00:00Z", &m.month_start_us);
	cJSON *j = report_invoice_json(&m, &inv);
	char *text = cJSON_Print(j);
	assert_string_equal(text, slurp("invoice_worked_example.json"));
	cJSON_free(text);
	cJSON_Delete(j);
	char *csv = report_invoice_csv(&m, &inv);
	assert_string_equal(csv, slurp("invoice_worked_example.csv"));
	free(csv);
	char *html = report_invoice_html(&m, &inv);
	assert_string_equal(html, slurp("invoice_worked_example.html"));
	free(html);
}

static void a_price_change_gives_a_line_per_price(void **state)
{
	(void)state;
	struct meter_plan a = plan(1, "default", 25000000, 7500000);
	struct meter_plan b = plan(2, "dearer, from the 16th", 50000000, 7500000);
	struct meter_plan_usage u[2] = {
	        {.plan = &a,
	         .used = {.cpu_billed_us = 10 * H,
	                  .wall_us = 10 * H,
	                  .mem_mgib_us = 1000 * 10 * H}},
	        {.plan = &b,
	         .used = {.cpu_billed_us = 4 * H, .wall_us = 4 * H, .mem_mgib_us = 1000 * 4 * H}},
	};
	struct meter_invoice inv;
	assert_int_equal(meter_invoice_build(u, 2, &inv), METER_OK);
	assert_int_equal(inv.n, 4);
	assert_ptr_equal(inv.lines[0].plan, &a);
	assert_int_equal(inv.lines[0].amount, INT64_C(250000000)); /* 10 h x 0.025 */
	assert_ptr_equal(inv.lines[2].plan, &b);
	assert_int_equal(inv.lines[2].amount, INT64_C(200000000)); /* 4 h x 0.05 */
	assert_int_equal(inv.total, INT64_C(250000000) + 75000000 + 200000000 + 30000000);
	/* a plan name with a comma and quotes stays one CSV field */
	struct invoice_meta m = {.account_id = "x", .account_name = "x", .status = "draft"};
	char *csv = report_invoice_csv(&m, &inv);
	assert_non_null(strstr(
	        csv, "\"Memory, provisioned (plan dearer, from the 16th, $0.0075 per GiB-hour)\""));
	free(csv);
}

static void the_trial_is_billed_then_credited_to_the_nano_dollar(void **state)
{
	(void)state;
	struct meter_plan p = plan(1, "default", 25000000, 7500000);
	struct meter_plan_usage u = {.plan = &p, .used = worked_example()};
	u.covered = u.used; /* all of it inside the grant */
	struct meter_invoice inv;
	assert_int_equal(meter_invoice_build(&u, 1, &inv), METER_OK);
	assert_int_equal(inv.n, 3);
	assert_int_equal(inv.lines[2].kind, METER_LINE_TRIAL);
	assert_int_equal(inv.lines[2].amount, -INT64_C(1275000000));
	assert_int_equal(inv.lines[2].quantity, 30 * H);
	assert_int_equal(inv.total, 0);
	/* half of it covered */
	u.covered = (struct meter_usage){
	        .cpu_billed_us = 15 * H / 2, .wall_us = 15 * H, .mem_mgib_us = 4000 * 15 * H};
	assert_int_equal(meter_invoice_build(&u, 1, &inv), METER_OK);
	assert_int_equal(inv.lines[2].amount, -INT64_C(637500000));
	assert_int_equal(inv.total, INT64_C(637500000));
	/* nothing used, nothing billed: no lines at all */
	struct meter_plan_usage none = {.plan = &p};
	assert_int_equal(meter_invoice_build(&none, 1, &inv), METER_OK);
	assert_int_equal(inv.n, 0);
	assert_int_equal(inv.total, 0);
}

static void covering_more_than_was_used_is_refused(void **state)
{
	(void)state;
	struct meter_plan p = plan(1, "default", 25000000, 7500000);
	struct meter_plan_usage u = {.plan = &p, .used = worked_example()};
	u.covered = u.used;
	u.covered.wall_us++;
	struct meter_invoice inv = {.total = 42};
	assert_int_equal(meter_invoice_build(&u, 1, &inv), METER_EINVAL);
	assert_int_equal(inv.total, 42);
}

/*
 * The share-out by the largest remainder, done the slow and obvious way: the
 * rest given one nano-dollar at a time to the largest remainder left (ties to
 * the earlier part). An oracle for meter_allocate, which sorts instead.
 */
static void allocate_slowly(meter_money amount, const int64_t *w, size_t n, meter_money *out)
{
	meter_i128 sum = 0, mag = amount < 0 ? -(meter_i128)amount : amount, given = 0;
	meter_i128 *rem = calloc(n, sizeof *rem);
	for (size_t i = 0; i < n; i++)
		sum += w[i];
	for (size_t i = 0; i < n; i++) {
		out[i] = (meter_money)(mag * w[i] / sum);
		rem[i] = mag * w[i] % sum;
		given += out[i];
	}
	for (meter_i128 left = mag - given; left > 0; left--) {
		size_t best = 0;
		for (size_t i = 1; i < n; i++)
			if (rem[i] > rem[best])
				best = i;
		out[best]++;
		rem[best] = -1;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = amount < 0 ? -out[i] : out[i];
	free(rem);
}

static void the_share_out_adds_up_and_matches_the_slow_way(void **state)
{
	(void)state;
	unsigned seed = 11;
	static int64_t w[100000];
	static meter_money got[100000], want[2000];
	/* small and odd cases, charges and credits, against the slow way */
	for (int round = 0; round < 300; round++) {
		size_t n = (size_t)(rand_r(&seed) % 2000) + 1;
		meter_money amount = (meter_money)rand_r(&seed) * rand_r(&seed) % 100000000000;
		if (round % 3 == 0)
			amount = -amount; /* the trial's credit line is negative */
		if (round % 7 == 0)
			amount = (meter_money)(rand_r(&seed) %
			                       7); /* fewer nano-dollars than parts */
		for (size_t i = 0; i < n; i++)
			w[i] = round % 5 == 0 ? 1000 : (int64_t)(rand_r(&seed) % 4) * rand_r(&seed);
		w[n - 1] += 1; /* a positive sum */
		assert_int_equal(meter_allocate(amount, w, n, got), METER_OK);
		allocate_slowly(amount, w, n, want);
		for (size_t i = 0; i < n; i++)
			if (got[i] != want[i])
				fail_msg("round %d, part %zu of %zu: %lld, the slow way %lld",
				         round, i, n, (long long)got[i], (long long)want[i]);
	}
	/* a hundred thousand rows (a large account's month): adds up, each within a
	 * nano-dollar of its exact share, in the weights' order */
	size_t n = 100000;
	meter_i128 sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += w[i] = (int64_t)(rand_r(&seed) % 1000000) * 1000003 + 1;
	meter_money amount = -INT64_C(123456789012345); /* a credit */
	assert_int_equal(meter_allocate(amount, w, n, got), METER_OK);
	meter_i128 total = 0;
	for (size_t i = 0; i < n; i++) {
		total += got[i];
		meter_i128 exact = (meter_i128)amount * w[i]; /* x sum */
		meter_i128 diff = (meter_i128)got[i] * sum - exact;
		assert_true(diff < sum && -diff < sum);
	}
	assert_true(total == amount);
	/* refused: no parts, too many, a negative weight, weights that sum to zero */
	int64_t zero[2] = {0, 0}, neg[2] = {5, -1};
	assert_int_equal(meter_allocate(10, w, 0, got), METER_ERANGE);
	assert_int_equal(meter_allocate(10, w, 100001, got), METER_ERANGE);
	assert_int_equal(meter_allocate(10, neg, 2, got), METER_EINVAL);
	assert_int_equal(meter_allocate(10, zero, 2, got), METER_EINVAL);
}

/* ---- meter/ledger.h ---- */

static uint64_t seed_state;

static int64_t rnd(int64_t lo, int64_t hi)
{
	uint64_t z = (seed_state += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	z ^= z >> 31;
	return lo + (int64_t)(z % (uint64_t)(hi - lo + 1));
}

static struct meter_usage some_usage(void)
{
	int64_t wall = rnd(0, 40) * H / 4;
	return (struct meter_usage){.cpu_measured_us = rnd(0, wall),
	                            .cpu_billed_us = rnd(0, wall + 1),
	                            .wall_us = wall,
	                            .busy_us = wall / 2,
	                            .idle_us = wall - wall / 2,
	                            .mem_mgib_us = rnd(0, 4000) * wall};
}

static bool has_final(const struct meter_ledger_row *rows, size_t n, int64_t month)
{
	for (size_t k = 0; k < n; k++)
		if (rows[k].month_us == month && rows[k].kind == METER_LEDGER_FINAL)
			return true;
	return false;
}

/*
 * What a final invoice records it billed gives back its lines, in the same
 * order, over random accounts: months of usage under two plans, final months
 * before the one asked for, some billed less than they have now (late usage),
 * a grant that ran out before, inside or after them.
 */
static void recorded_quantities_give_back_the_lines(void **state)
{
	(void)state;
	struct meter_plan plans[2] = {plan(1, "default", 25000000, 7500000),
	                              plan(2, "changed", 31000000, 6000000)};
	int64_t m[6];
	meter_time_parse("2026-06-01T00:00:00Z", &m[0]);
	for (int i = 1; i < 6; i++)
		m[i] = meter_month_next(m[i - 1]);
	int adjusted = 0; /* lines that adjust a final month: the case is there */
	for (uint64_t seed = 1; seed <= 2000; seed++) {
		seed_state = seed;
		struct meter_ledger_row rows[64];
		size_t n = 0;
		for (int i = 0; i < 6; i++) {
			for (int p = 1; p <= 2; p++)
				if (rnd(0, 3) > 0)
					rows[n++] =
					        (struct meter_ledger_row){.kind = METER_LEDGER_USED,
					                                  .month_us = m[i],
					                                  .plan_id = p,
					                                  .u = some_usage()};
			if (i < 5 && rnd(0, 2) > 0) { /* final, billed what it had or less */
				rows[n++] = (struct meter_ledger_row){.kind = METER_LEDGER_FINAL,
				                                      .month_us = m[i]};
				for (int p = 1; p <= 2 && rnd(0, 1); p++)
					rows[n++] = (struct meter_ledger_row){
					        .kind = METER_LEDGER_BILLED,
					        .month_us = m[i],
					        .plan_id = p,
					        .u = some_usage(),
					        .covered = {.wall_us = rnd(0, 3) * H}};
			}
		}
		int64_t crossing =
		        rnd(0, 2) == 0 ? METER_TIME_NONE : m[rnd(0, 5)] + rnd(0, 600) * H;
		if (crossing != METER_TIME_NONE) {
			int64_t cm = meter_month_start(crossing);
			rows[n++] = (struct meter_ledger_row){.kind = METER_LEDGER_BEFORE,
			                                      .month_us = cm,
			                                      .plan_id = 1,
			                                      .u = some_usage()};
			rows[n++] = (struct meter_ledger_row){.kind = METER_LEDGER_COVER,
			                                      .month_us = cm,
			                                      .plan_id = rnd(1, 2),
			                                      .u = some_usage()};
		}
		struct meter_ledger_account a = {.grant_us = rnd(0, 3) * 50 * H,
		                                 .crossing_hour_us = crossing,
		                                 .rows = rows,
		                                 .nrows = n};
		int64_t month = m[rnd(1, 5)], adjusting;
		struct meter_invoice lines, back;
		struct meter_billed_row billed[64];
		size_t nb = 0;
		assert_int_equal(meter_ledger_lines(&a, month, meter_month_next(month), plans, 2,
		                                    &lines, billed, &nb, 64, &adjusting),
		                 METER_OK);
		assert_int_equal(meter_ledger_recorded(billed, nb, month, plans, 2, &back),
		                 METER_OK);
		assert_int_equal(back.n, lines.n);
		assert_true(back.total == lines.total);
		for (size_t i = 0; i < lines.n; i++) {
			assert_int_equal(back.lines[i].kind, lines.lines[i].kind);
			assert_true(back.lines[i].amount == lines.lines[i].amount);
			assert_true(back.lines[i].quantity == lines.lines[i].quantity);
			assert_true(back.lines[i].for_month_us == lines.lines[i].for_month_us);
			assert_ptr_equal(back.lines[i].plan, lines.lines[i].plan);
		}
		/* an adjustment goes on the first month after its own that is not final: every
		 * month between them is final */
		for (size_t i = 0; i < lines.n; i++)
			adjusted += lines.lines[i].for_month_us != 0;
		for (size_t i = 0; i < lines.n; i++)
			for (int64_t x = lines.lines[i].for_month_us
			                         ? meter_month_next(lines.lines[i].for_month_us)
			                         : month;
			     x < month; x = meter_month_next(x))
				assert_true(has_final(rows, n, x));
	}
	assert_true(adjusted > 200);
}

/* A name a spreadsheet would run is written as text; numbers stay numbers. */
static void csv_cells_that_look_like_formulas_are_neutralised(void **state)
{
	(void)state;
	struct csv c = {0};
	const char *row[] = {"=HYPERLINK(\"http://x\",\"y\")",
	                     "+1",
	                     "-2+3",
	                     "@SUM(A1)",
	                     "\tx",
	                     "\rx",
	                     "-0.25",
	                     "12",
	                     "-7",
	                     "plan-1",
	                     "a=b",
	                     ""};
	csv_row(&c, row, sizeof row / sizeof row[0]);
	assert_false(c.oom);
	assert_string_equal(c.buf, "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",\"'+1\",\"'-2+3\","
	                           "\"'@SUM(A1)\",\"'\tx\",\"'\rx\",-0.25,12,-7,plan-1,a=b,\r\n");
	assert_true(csv_formula("-"));
	assert_true(csv_formula("-.5"));
	assert_false(csv_formula("-0.5"));
	assert_false(csv_formula(""));
	free(c.buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(csv_cells_that_look_like_formulas_are_neutralised),
	        cmocka_unit_test(the_worked_example_invoice_is_1_28_never_1_27),
	        cmocka_unit_test(a_price_change_gives_a_line_per_price),
	        cmocka_unit_test(the_trial_is_billed_then_credited_to_the_nano_dollar),
	        cmocka_unit_test(covering_more_than_was_used_is_refused),
	        cmocka_unit_test(the_share_out_adds_up_and_matches_the_slow_way),
	        cmocka_unit_test(recorded_quantities_give_back_the_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
