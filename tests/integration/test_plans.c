/*
 * Price plans, over real HTTP against a real PostgreSQL: a plan is published
 * for the future only, by an admin or the CLI, and the rates, the estimate,
 * the forecast and the dashboard name the next one; a price change in mid
 * month gives an invoice two lines for each item, one per plan.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/apifx.h"
#include "tests/support/http.h"
#include "tests/support/run.h"

/*
 * Price plans: listed (publicly) with the one in force; a plan is published
 * from a future time only, by an admin (API) or the CLI; one dated in the past
 * or at a taken instant is refused and nothing is stored. The rates, the
 * estimate, the forecast and the dashboard show the next plan.
 */
static void price_plans_are_published_for_the_future_only(void **state)
{
	struct fx *f = *state;
	seed(f);
	cJSON *o = get_json(f, "/v1/price-plans", 200);
	int before = cJSON_GetArraySize(cJSON_GetObjectItem(o, "plans"));
	assert_true(cJSON_IsObject(cJSON_GetObjectItem(o, "in_force")));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "next")));
	cJSON_Delete(o);
	long plans = num(f, "SELECT count(*) FROM price_plans");
	const char *bad[][2] = {
	        /* in the past, a minute ago */
	        {"{\"name\": \"late\", \"effective_from\": \"2026-01-01T00:00:00Z\", "
	         "\"cpu_per_vcpu_hour\": \"0.03\", \"memory_per_gib_hour\": \"0.008\"}",
	         "422"},
	        {"{\"name\": \"neg\", \"effective_from\": \"2099-01-01T00:00:00Z\", "
	         "\"cpu_per_vcpu_hour\": \"-1\", \"memory_per_gib_hour\": \"0.008\"}",
	         "422"},
	        {"{\"name\": \"floor\", \"effective_from\": \"2099-01-01T00:00:00Z\", "
	         "\"cpu_per_vcpu_hour\": \"0.03\", \"memory_per_gib_hour\": \"0.008\", "
	         "\"cpu_floor\": \"1.5\"}",
	         "422"},
	        {"{\"name\": \"nofrom\", \"cpu_per_vcpu_hour\": \"0.03\", "
	         "\"memory_per_gib_hour\": \"0.008\"}",
	         "400"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct http_res r = call(f, "POST", "/v1/price-plans", f->admin, bad[i][0]);
		if (r.status != atoi(bad[i][1]))
			fail_msg("case %zu: %d %s", i, r.status, r.body);
		if (i == 0)
			assert_non_null(strstr(r.body, "future"));
		http_free(&r);
	}
	char now_past[160];
	snprintf(
	        now_past, sizeof now_past,
	        "{\"name\": \"just\", \"effective_from\": \"%s\", \"cpu_per_vcpu_hour\": \"0.03\", "
	        "\"memory_per_gib_hour\": \"0.008\"}",
	        "2026-12-03T00:00:00Z");
	struct http_res r = call(f, "POST", "/v1/price-plans", f->acct, now_past);
	assert_int_equal(r.status, 403);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM price_plans"), plans);
	/* a year ahead: scheduled; the floor kept from the plan in force then */
	char when[32], body[256];
	PGresult *t = PQexec(f->db.conn, "SELECT to_char(date_trunc('day', now() + interval '1 "
	                                 "year'), 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')");
	snprintf(when, sizeof when, "%s", PQgetvalue(t, 0, 0));
	PQclear(t);
	snprintf(
	        body, sizeof body,
	        "{\"name\": \"2027\", \"effective_from\": \"%s\", \"cpu_per_vcpu_hour\": \"0.03\", "
	        "\"memory_per_gib_hour\": \"0.008\"}",
	        when);
	r = call(f, "POST", "/v1/price-plans", f->admin, body);
	assert_int_equal(r.status, 201);
	o = http_json(&r);
	assert_string_equal(str(o, "state"), "scheduled");
	assert_string_equal(str(o, "cpu_floor"), "0.025");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "POST", "/v1/price-plans", f->admin, body);
	assert_int_equal(r.status, 409);
	http_free(&r);
	o = get_json(f, "/v1/price-plans", 200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "plans")), before + 1);
	assert_string_equal(str(cJSON_GetObjectItem(o, "next"), "name"), "2027");
	cJSON_Delete(o);
	/* the rates, the estimate, the forecast and the dashboard name it (the plan cache
	 * holds plans up to 5 s) */
	bool shown = false;
	for (int i = 0; i < 80 && !shown; i++) {
		o = get_json(f, "/v1/rates?vcpus=2&memory_gib=4", 200);
		cJSON *next = cJSON_GetObjectItem(o, "next_plan");
		shown = cJSON_IsObject(next) && strcmp(str(next, "name"), "2027") == 0;
		assert_string_equal(str(cJSON_GetObjectItem(o, "plan"), "name"), "default");
		cJSON_Delete(o);
		if (!shown)
			usleep(100000);
	}
	assert_true(shown);
	r = call(f, "POST", "/v1/estimates", NULL,
	         "{\"runs_per_month\": 300, \"minutes_per_run\": 6, \"vcpus\": 2, "
	         "\"memory_gib\": 4, \"avg_busy_vcpus\": 0.5}");
	o = http_json(&r);
	assert_string_equal(str(o, "total"), "1.28"); /* still today's prices */
	assert_string_equal(str(cJSON_GetObjectItem(o, "next_plan"), "name"), "2027");
	cJSON_Delete(o);
	http_free(&r);
	char fpath[96];
	PGresult *m = PQexec(f->db.conn, "SELECT to_char(now(), 'YYYY-MM')");
	snprintf(fpath, sizeof fpath, "/v1/accounts/acme/forecast?month=%s", PQgetvalue(m, 0, 0));
	PQclear(m);
	o = get_json(f, fpath, 200);
	assert_string_equal(str(cJSON_GetObjectItem(o, "next_plan"), "name"), "2027");
	cJSON_Delete(o);
	r = call(f, "GET", "/dashboard", f->acct, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "id=\"prices\""));
	assert_non_null(strstr(r.body, "next: <strong>2027</strong>"));
	http_free(&r);
	/* the CLI: a past plan refused, a future one added, the list shows all */
	struct run_result *rr = malloc(sizeof *rr);
	const char *past[] = {METER_BIN,
	                      "plan",
	                      "add",
	                      "--name",
	                      "old",
	                      "--effective-from",
	                      "2026-10-01T00:00:00Z",
	                      "--cpu-per-vcpu-hour",
	                      "0.02",
	                      "--memory-per-gib-hour",
	                      "0.007",
	                      NULL};
	run_program(past, f->db.url, rr);
	assert_int_equal(rr->status, 1);
	assert_non_null(strstr(rr->err, "not an hour in the future"));
	const char *later[] = {METER_BIN,
	                       "plan",
	                       "add",
	                       "--name",
	                       "2028",
	                       "--effective-from",
	                       "2099-01-01T00:00:00Z",
	                       "--cpu-per-vcpu-hour",
	                       "0.02",
	                       "--memory-per-gib-hour",
	                       "0.007",
	                       "--cpu-floor",
	                       "0",
	                       NULL};
	run_program(later, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	const char *list[] = {METER_BIN, "plan", "list", NULL};
	run_program(list, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	assert_non_null(strstr(rr->out, "in_force"));
	assert_non_null(strstr(rr->out, "2028"));
	assert_int_equal(run_lines(rr->out), before + 3); /* the heading, then each plan */
	free(rr);
	assert_int_equal(num(f, "SELECT count(*) FROM price_plans"), plans + 2);
}

static void a_price_change_in_mid_month_gives_two_lines(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	sql(f, "INSERT INTO price_plans (name, effective_from, cpu_vcpu_hour, memory_gib_hour, "
	       "cpu_floor) VALUES ('october-16', '2026-10-16T00:00:00Z', 0.05, 0.0075, 0.025)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('pc', 'acme', 2, 4, '2026-10-15T23:55:00Z', '2026-10-16T00:05:00Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'pc', 1, '2026-10-15T23:55:00Z'::timestamptz + k * interval '10 seconds', "
	       "'gen', k * 10000000 FROM generate_series(1, 60) k");
	wait_rollups(f);
	struct http_res r = call(f, "GET", "/v1/accounts/acme/invoices/2026-10", f->acct, NULL);
	cJSON *o = http_json(&r);
	cJSON *lines = cJSON_GetObjectItem(o, "lines");
	assert_int_equal(cJSON_GetArraySize(lines), 4);
	cJSON *a = cJSON_GetArrayItem(lines, 0), *b = cJSON_GetArrayItem(lines, 2);
	assert_string_equal(str(a, "plan"), "default");
	assert_string_equal(str(a, "quantity"), "0.083333333");
	assert_string_equal(str(a, "unit_price"), "0.025");
	assert_string_equal(str(b, "plan"), "october-16");
	assert_string_equal(str(b, "quantity"), "0.083333333");
	assert_string_equal(str(b, "unit_price"), "0.05");
	assert_string_equal(str(b, "amount_exact"), "0.004166667");
	cJSON_Delete(o);
	http_free(&r);
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(price_plans_are_published_for_the_future_only,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(a_price_change_in_mid_month_gives_two_lines,
	                                        apifx_setup, apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
