/*
 * What the API says of usage, over real HTTP against a real PostgreSQL: a
 * sandbox across midnight at a month's end is split between the months to
 * the microsecond (its hours, the account's months, both invoices); the
 * forecast projects the last seven days over the days left; and an account
 * of 250 sandboxes is listed a page at a time (usage pages ranked by cost,
 * also while usage lands between them, the sandboxes by id, the dashboard's
 * pages), bad cursors and limits refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/apifx.h"
#include "tests/support/http.h"

static void a_sandbox_across_midnight_at_month_end_is_split_to_the_microsecond(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('mid', 'acme', 2, 4, '2026-10-31T23:55:00Z', '2026-11-01T00:05:00Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'mid', 1, '2026-10-31T23:55:00Z'::timestamptz + k * interval '10 seconds', "
	       "'gen', k * 10000000 FROM generate_series(1, 60) k");
	wait_rollups(f);
	/* 1 vCPU busy: 300 CPU-s and 300 sandbox-s on each side of midnight */
	assert_int_equal(num(f, "SELECT cpu_billed_us FROM account_month WHERE account_id = 'acme' "
	                        "AND month = '2026-10-01'"),
	                 300000000);
	assert_int_equal(num(f, "SELECT cpu_billed_us FROM account_month WHERE account_id = 'acme' "
	                        "AND month = '2026-11-01'"),
	                 300000000);
	assert_int_equal(
	        num(f, "SELECT sum(cpu_billed_us) FROM usage_hourly WHERE sandbox_id = 'mid'"),
	        600000000);
	/* the sandbox hour by hour: 23:00 and 00:00, 300 CPU-s each */
	struct http_res hr = call(f, "GET",
	                          "/v1/sandboxes/mid/usage?from=2026-10-31T00:00:00Z&"
	                          "to=2026-11-02T00:00:00Z",
	                          f->acct, NULL);
	assert_int_equal(hr.status, 200);
	cJSON *ho = http_json(&hr);
	cJSON *hours = cJSON_GetObjectItem(ho, "hours");
	assert_int_equal(cJSON_GetArraySize(hours), 2);
	assert_string_equal(str(cJSON_GetArrayItem(hours, 0), "hour"), "2026-10-31T23:00:00Z");
	assert_string_equal(str(cJSON_GetArrayItem(hours, 0), "cpu_seconds"), "300");
	assert_string_equal(str(cJSON_GetArrayItem(hours, 1), "hour"), "2026-11-01T00:00:00Z");
	assert_string_equal(str(ho, "cpu_seconds"), "600");
	cJSON_Delete(ho);
	http_free(&hr);
	hr = call(f, "GET",
	          "/v1/sandboxes/mid/usage?from=2026-10-31T00:00:00Z&to=2026-11-02T00:00:00Z",
	          f->other, NULL);
	assert_int_equal(hr.status, 404);
	http_free(&hr);
	const char *months[] = {"/v1/accounts/acme/invoices/2026-10",
	                        "/v1/accounts/acme/invoices/2026-11"};
	for (int i = 0; i < 2; i++) {
		struct http_res r = call(f, "GET", months[i], f->acct, NULL);
		cJSON *o = http_json(&r);
		cJSON *cpu = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "lines"), 0);
		assert_string_equal(str(cpu, "quantity"), "0.083333333"); /* 300 s */
		assert_string_equal(str(cpu, "amount_exact"), "0.002083333");
		cJSON_Delete(o);
		http_free(&r);
	}
}

static void the_forecast_projects_the_last_seven_days_over_the_days_left(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	/* October 8 to 14: a busy hour of 2 vCPU, 4 GiB a day ($0.08), two on the 14th */
	sql(f, "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	       "cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	       "SELECT 'acme', 'sb-1', h, 1, 7200000000, 7200000000, 3600000000, 0, 3600000000, "
	       "14400000000000 FROM (SELECT '2026-10-08T10:00:00Z'::timestamptz + d * interval "
	       "'1 day' h FROM generate_series(0, 6) d UNION ALL SELECT "
	       "'2026-10-14T11:00:00Z' UNION ALL SELECT '2026-10-20T11:00:00Z') x");
	sql(f,
	    "INSERT INTO account_month SELECT account_id, '2026-10-01', price_plan_id, "
	    "sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), sum(wall_us), "
	    "sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 3");
	sql(f, ACCOUNT_DAYS_FROM_HOURS);
	struct http_res r =
	        call(f, "GET", "/v1/accounts/acme/forecast?month=2026-10&at=2026-10-15T00:00:00Z",
	             f->acct, NULL);
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "month_to_date_exact"), "0.64");
	assert_string_equal(str(o, "run_rate_per_day_exact"), "0.091428571");
	/* 17 days left: 0.64 + 0.64 / 7 x 17, and 0.08 or 0.16 a day for the bounds */
	assert_string_equal(str(o, "projected_total_exact"), "2.194285714");
	assert_string_equal(str(o, "projected_total"), "2.19");
	assert_string_equal(str(o, "projected_low_exact"), "2.00");
	assert_string_equal(str(o, "projected_high_exact"), "3.36");
	assert_non_null(cJSON_GetObjectItem(o, "data_as_of"));
	cJSON_Delete(o);
	http_free(&r);
	/* (the hour of October 20 is after "at": not in that month to date) */
	/* a month gone by: nothing left to project, all of it counted */
	r = call(f, "GET", "/v1/accounts/acme/forecast?month=2026-10&at=2026-11-20T00:00:00Z",
	         f->acct, NULL);
	o = http_json(&r);
	assert_string_equal(str(o, "projected_total_exact"), "0.72");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/other/forecast?month=2026-10", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/forecast", f->acct, NULL);
	assert_int_equal(r.status, 400);
	http_free(&r);
}

#define NPAGED 250

/*
 * Walks every page of path (a query string ending in limit=...), noting each
 * sandbox seen in seen[] (by its number, p-001 ... p-250); after page land
 * (0: never), sandboxes the pages so far have not shown gain usage enough to
 * rank first. Checks each page is in order (cost down, then id) and
 * next_cursor ends it. Returns the pages walked.
 */
static int walk(struct fx *f, const char *path, int seen[NPAGED + 1], int land)
{
	char url[512], cursor[256] = "";
	int pages = 0;
	for (;;) {
		snprintf(url, sizeof url, "%s%s%s", path, cursor[0] ? "&cursor=" : "", cursor);
		cJSON *o = get_json(f, url, 200);
		assert_int_equal(cJSON_GetObjectItem(o, "sandbox_count")->valueint, NPAGED);
		cJSON *arr = cJSON_GetObjectItem(o, "sandboxes"), *s;
		int64_t last_cost = INT64_MAX;
		char last_id[64] = "";
		cJSON_ArrayForEach(s, arr)
		{
			const char *id = str(s, "id");
			int64_t cost = nano_of(s, "cost_exact");
			/* the first page is ranked as it stands: cost down, then id */
			if (pages == 0)
				assert_true(cost < last_cost ||
				            (cost == last_cost && strcmp(id, last_id) > 0));
			last_cost = cost;
			snprintf(last_id, sizeof last_id, "%s", id);
			int k = atoi(id + 2);
			assert_true(k >= 1 && k <= NPAGED);
			seen[k]++;
		}
		pages++;
		cJSON *next = cJSON_GetObjectItem(o, "next_cursor");
		if (cJSON_IsNull(next)) {
			cJSON_Delete(o);
			return pages;
		}
		snprintf(cursor, sizeof cursor, "%s", next->valuestring);
		cJSON_Delete(o);
		if (pages == land) {
			/* usage lands on the ones not shown yet: they jump to the top */
			for (int k = 1; k <= NPAGED; k += 7)
				if (seen[k] == 0) {
					/* a walk after another: later, and more */
					char q[320];
					snprintf(
					        q, sizeof q,
					        "INSERT INTO samples (sandbox_id, incarnation, ts, "
					        "host, cpu_usage_us) SELECT id, 1, started_at + "
					        "interval '20 minutes' + now_walk * interval "
					        "'1 minute', 'h', 900000000 * now_walk FROM "
					        "sandboxes, "
					        "(SELECT count(*) + 1 now_walk FROM samples WHERE "
					        "sandbox_id = 'p-%03d' AND host = 'h') w "
					        "WHERE id = 'p-%03d'",
					        k, k);
					sql(f, q);
				}
			wait_rollups(f);
		}
	}
}

/*
 * 250 sandboxes of an account in October 2026, costs with ties. Its usage,
 * 40 a page, lists every sandbox once, costliest first, whether the range is
 * the month (ranked from sandbox_month_cost) or any other (ranked from the
 * hours), also while usage lands between the pages; the totals are the
 * account's, whole. Bad cursors and limits are 422s. The sandboxes list
 * pages by id.
 */
static void an_account_of_many_sandboxes_is_listed_a_page_at_a_time(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('pg', 'Pages', 'paid', 0)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "SELECT 'p-' || lpad(k::text, 3, '0'), 'pg', 1, 1, "
	       "'2026-10-05T00:00:00Z'::timestamptz + k * interval '1 minute', "
	       "'2026-10-05T00:10:00Z'::timestamptz + k * interval '1 minute' "
	       "FROM generate_series(1, 250) k");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'p-' || lpad(k::text, 3, '0'), 1, "
	       "'2026-10-05T00:05:00Z'::timestamptz + k * interval '1 minute', 'h', "
	       "(k % 50) * 5000000::bigint FROM generate_series(1, 250) k");
	wait_rollups(f);
	const char *month = "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                    "&to=2026-11-01T00:00:00Z&limit=40",
	           *range = "/v1/accounts/pg/usage?from=2026-10-04T00:00:00Z"
	                    "&to=2026-10-06T00:00:00Z&limit=40";
	int seen[NPAGED + 1];
	/* the pages' CPU adds up to the totals' */
	memset(seen, 0, sizeof seen);
	assert_int_equal(walk(f, month, seen, 0), 7);
	for (int k = 1; k <= NPAGED; k++)
		assert_int_equal(seen[k], 1);
	memset(seen, 0, sizeof seen);
	assert_int_equal(walk(f, range, seen, 0), 7);
	for (int k = 1; k <= NPAGED; k++)
		assert_int_equal(seen[k], 1);
	/* the same ranking both ways, and the totals whole */
	cJSON *a = get_json(f,
	                    "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                    "&to=2026-11-01T00:00:00Z&limit=1000",
	                    200),
	      *b = get_json(f, range, 200);
	cJSON *sa = cJSON_GetObjectItem(a, "sandboxes"), *sb = cJSON_GetObjectItem(b, "sandboxes");
	int64_t cpu = 0;
	cJSON *x;
	cJSON_ArrayForEach(x, sa) cpu += nano_of(x, "cpu_seconds");
	assert_int_equal(cpu, nano_of(a, "cpu_seconds"));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(a, "next_cursor")));
	for (int i = 0; i < 40; i++)
		assert_string_equal(str(cJSON_GetArrayItem(sa, i), "id"),
		                    str(cJSON_GetArrayItem(sb, i), "id"));
	char bad[512];
	snprintf(bad, sizeof bad, "%s&cursor=%s", month,
	         cJSON_GetObjectItem(b, "next_cursor")->valuestring);
	cJSON_Delete(get_json(f, bad, 422)); /* another range's cursor */
	cJSON_Delete(a);
	cJSON_Delete(b);
	cJSON_Delete(get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&cursor=bm90LWEtY3Vyc29y",
	                      422));
	cJSON_Delete(get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&cursor=bDo5OTk5OTk6MA",
	                      422)); /* l:999999:0, no such listing */
	cJSON_Delete(get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&limit=0",
	                      422));
	cJSON_Delete(get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&limit=1001",
	                      422));
	/* acme's key cannot follow pg's cursor, nor see pg at all */
	struct http_res r = call(f, "GET", month, f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	/* while usage lands between pages: still every sandbox once, whether it lands
	 * before the listing is ordered (after the first page) or after (the second) */
	for (int land = 1; land <= 2; land++) {
		memset(seen, 0, sizeof seen);
		walk(f, month, seen, land);
		for (int k = 1; k <= NPAGED; k++)
			assert_int_equal(seen[k], 1);
	}
	memset(seen, 0, sizeof seen);
	walk(f, range, seen, 1);
	for (int k = 1; k <= NPAGED; k++)
		assert_int_equal(seen[k], 1);
	/* the new order is the next listing's: the ones that gained rank first */
	cJSON *top = get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&limit=1",
	                      200);
	const char *first = str(cJSON_GetArrayItem(cJSON_GetObjectItem(top, "sandboxes"), 0), "id");
	assert_int_equal((atoi(first + 2) - 1) % 7, 0);
	cJSON_Delete(top);

	/* the sandboxes by id, 100 a page; running ones; those alive in a window */
	char url[512], cursor[256] = "";
	int n = 0, pages = 0;
	for (;;) {
		snprintf(url, sizeof url, "/v1/accounts/pg/sandboxes?limit=100%s%s",
		         cursor[0] ? "&cursor=" : "", cursor);
		cJSON *o = get_json(f, url, 200);
		cJSON_ArrayForEach(x, cJSON_GetObjectItem(o, "sandboxes"))
		{
			char want[16];
			snprintf(want, sizeof want, "p-%03d", ++n);
			assert_string_equal(str(x, "id"), want);
		}
		pages++;
		cJSON *next = cJSON_GetObjectItem(o, "next_cursor");
		bool last = cJSON_IsNull(next);
		if (!last)
			snprintf(cursor, sizeof cursor, "%s", next->valuestring);
		cJSON_Delete(o);
		if (last)
			break;
	}
	assert_int_equal(n, NPAGED);
	assert_int_equal(pages, 3);
	cJSON *o = get_json(f, "/v1/accounts/pg/sandboxes?status=running", 200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "sandboxes")), 0);
	cJSON_Delete(o);
	/* alive between 00:30 and 00:40: started before 00:40 and stopped at 00:30 or later */
	o = get_json(f,
	             "/v1/accounts/pg/sandboxes?from=2026-10-05T00:30:00Z&to=2026-10-05T00:40:00Z",
	             200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "sandboxes")), 20);
	assert_string_equal(str(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "sandboxes"), 0), "id"),
	                    "p-020");
	cJSON_Delete(o);
	/* the dashboard of October: its ten costliest, in the usage's order, and the months
	 * around it; a month that is not one, or has not begun, is refused */
	cJSON *ten = get_json(f,
	                      "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                      "&to=2026-11-01T00:00:00Z&limit=10",
	                      200);
	r = call(f, "GET", "/dashboard?account=pg&month=2026-10", f->admin, NULL);
	assert_int_equal(r.status, 200);
	const char *at = r.body;
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(ten, "sandboxes"))
	{
		char link[96];
		snprintf(link, sizeof link, "href=\"/dashboard/sandboxes/%s\"", str(x, "id"));
		at = strstr(at, link);
		if (at == NULL)
			fail_msg("the dashboard does not list %s in the usage's order",
			         str(x, "id"));
	}
	assert_non_null(strstr(r.body, "/dashboard?month=2026-09&amp;account=pg"));
	assert_non_null(strstr(r.body, "/dashboard?month=2026-11&amp;account=pg"));
	http_free(&r);
	cJSON_Delete(ten);
	/* the full list, 50 a page: every sandbox once over its five pages, in any order;
	 * a day's sandboxes; bad sorts, pages and days are refused */
	const char *orders[] = {"cost", "cpu_used", "cpu_billed", "hours"};
	for (size_t oi = 0; oi < 4; oi++) {
		memset(seen, 0, sizeof seen);
		for (int pg = 1; pg <= 5; pg++) {
			char path[160];
			snprintf(path, sizeof path,
			         "/dashboard?account=pg&month=2026-10&sort=%s&page=%d", orders[oi],
			         pg);
			r = call(f, "GET", path, f->admin, NULL);
			assert_int_equal(r.status, 200);
			int rows = 0;
			for (const char *q = r.body;
			     (q = strstr(q, "<tr class=\"listed\"><td><a href=\""
			                    "/dashboard/sandboxes/p-")) != NULL;
			     q++) {
				seen[atoi(q +
				          strlen("<tr class=\"listed\"><td><a href=\"/dashboard/"
				                 "sandboxes/p-"))]++;
				rows++;
			}
			assert_int_equal(rows, 50);
			assert_true((strstr(r.body, "next page") != NULL) == (pg < 5));
			http_free(&r);
		}
		for (int k = 1; k <= NPAGED; k++)
			assert_int_equal(seen[k], 1);
	}
	r = call(f, "GET", "/dashboard?account=pg&month=2026-10&day=2026-10-05", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "Sandboxes of 2026-10-05"));
	assert_non_null(strstr(r.body, "href=\"/dashboard?month=2026-10&amp;account=pg&amp;day="
	                               "2026-10-05\""));
	http_free(&r);
	const char *bad_list[] = {"sort=price", "page=0", "page=x", "day=2026-11-01", "day=05"};
	for (size_t i = 0; i < sizeof bad_list / sizeof bad_list[0]; i++) {
		char path[128];
		snprintf(path, sizeof path, "/dashboard?account=pg&month=2026-10&%s", bad_list[i]);
		r = call(f, "GET", path, f->admin, NULL);
		assert_int_equal(r.status, 400);
		http_free(&r);
	}
	const char *bad_months[] = {"2026-13", "2026-1", "26-10", "2099-01", "2026-10x"};
	for (size_t i = 0; i < sizeof bad_months / sizeof bad_months[0]; i++) {
		char path[96];
		snprintf(path, sizeof path, "/dashboard?account=pg&month=%s", bad_months[i]);
		r = call(f, "GET", path, f->admin, NULL);
		assert_int_equal(r.status, 400);
		http_free(&r);
	}
	cJSON_Delete(get_json(f, "/v1/accounts/pg/sandboxes?cursor=bDoxOjA", 422));
	cJSON_Delete(get_json(f, "/v1/accounts/pg/sandboxes?status=gone", 422));
	cJSON_Delete(get_json(f, "/v1/accounts/nobody/sandboxes", 404));
	/* a sandbox whose month is left with no usage leaves the ranking and its count, as
	 * the rollup's step that keeps them finds it */
	sql(f, "UPDATE sandbox_month SET cpu_measured_us = 0, cpu_billed_us = 0, busy_us = 0, "
	       "idle_us = 0, wall_us = 0, memory_mgib_us = 0 WHERE sandbox_id = 'p-002'");
	sql(f, "SELECT meter_sandbox_month_costs(ARRAY['pg'], ARRAY['p-002'], "
	       "ARRAY['2026-10-01'::date])");
	cJSON *less = get_json(f,
	                       "/v1/accounts/pg/usage?from=2026-10-01T00:00:00Z"
	                       "&to=2026-11-01T00:00:00Z&limit=1",
	                       200);
	assert_int_equal(cJSON_GetObjectItem(less, "sandbox_count")->valueint, NPAGED - 1);
	cJSON_Delete(less);
}

/*
 * Each first page of a long list keeps a listing; an account keeps its newest
 * 100 only (issue 39, finding 12): the 101st first page drops the oldest,
 * whose cursor then says to start again, while the newest still pages.
 */
static void an_account_keeps_its_newest_listings_only(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "SELECT 'l-' || k, 'acme', 1, 1, '2026-10-05T00:00:00Z', '2026-10-05T00:10:00Z' "
	       "FROM generate_series(1, 3) k");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'l-' || k, 1, '2026-10-05T00:05:00Z', 'h', k * 1000000 "
	       "FROM generate_series(1, 3) k");
	wait_rollups(f);
	const char *first = "/v1/accounts/acme/usage?from=2026-10-01T00:00:00Z"
	                    "&to=2026-11-01T00:00:00Z&limit=1";
	char oldest[256] = "", newest[256] = "", url[512];
	for (int i = 0; i < 101; i++) {
		cJSON *o = get_json(f, first, 200);
		const char *c = cJSON_GetObjectItem(o, "next_cursor")->valuestring;
		snprintf(i == 0 ? oldest : newest, sizeof oldest, "%s", c);
		cJSON_Delete(o);
	}
	assert_int_equal(num(f, "SELECT count(*) FROM usage_listings WHERE account_id = 'acme'"),
	                 100);
	snprintf(url, sizeof url, "%s&cursor=%s", first, oldest);
	cJSON *o = get_json(f, url, 422);
	assert_non_null(strstr(str(o, "detail"), "the newest 100 of an account"));
	cJSON_Delete(o);
	snprintf(url, sizeof url, "%s&cursor=%s", first, newest);
	cJSON_Delete(get_json(f, url, 200));
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(
	                a_sandbox_across_midnight_at_month_end_is_split_to_the_microsecond,
	                apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                the_forecast_projects_the_last_seven_days_over_the_days_left, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                an_account_of_many_sandboxes_is_listed_a_page_at_a_time, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(an_account_keeps_its_newest_listings_only,
	                                        apifx_setup, apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
