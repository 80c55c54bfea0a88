/*
 * Invoices and exports, over real HTTP against a real PostgreSQL: the worked
 * example from real samples gives $1.28 (JSON, CSV, HTML, the FOCUS and
 * usage exports, the CLI); a final invoice never changes, byte for byte, and
 * the database refuses to change it, while late usage lands on the next
 * draft as adjustments naming its month; and an export of 100,000 sandboxes
 * streams in bounded memory, its shares those meter_allocate gives, each
 * line adding up exactly, byte for byte what the CLI and the dashboard give.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "meter/allocate.h"
#include "meter/decimal.h"
#include "meter/money.h"
#include "meter/timefmt.h"
#include "tests/support/apifx.h"
#include "tests/support/http.h"
#include "tests/support/run.h"

static void the_worked_example_as_real_usage_invoices_1_28(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* acme, paid, trial spent: 300 runs of 6 minutes of 2 vCPU, 4 GiB at 0.5 vCPU busy,
	 * sampled every 10 s, in October 2026 */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "SELECT 'run-' || i, 'acme', 2, 4, t, t + interval '6 minutes' FROM ("
	       "  SELECT i, '2026-10-01T00:00:00Z'::timestamptz + i * interval '2 hours' t "
	       "  FROM generate_series(1, 300) i) x");
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	    "SELECT 'run-' || i, 1, '2026-10-01T00:00:00Z'::timestamptz + i * interval '2 hours' "
	    "  + k * interval '10 seconds', 'gen', k * 5000000 "
	    "FROM generate_series(1, 300) i, generate_series(1, 36) k");
	wait_rollups(f);
	struct http_res r = call(f, "GET", "/v1/accounts/acme/invoices/2026-10", f->acct, NULL);
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "total"), "1.28");
	assert_string_equal(str(o, "total_exact"), "1.275");
	assert_string_equal(str(o, "status"), "final"); /* October is past its grace period */
	cJSON *lines = cJSON_GetObjectItem(o, "lines");
	assert_int_equal(cJSON_GetArraySize(lines), 2);
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "quantity"), "15");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "amount"), "0.38");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "quantity"), "120");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "amount"), "0.90");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/invoices/2026-10?format=csv", f->acct, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.type, "text/csv; charset=utf-8");
	assert_non_null(strstr(r.body, "\r\ntotal,,,,,1.28,1.275\r\n"));
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/invoices/2026-10?format=html", f->acct, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.type, "text/html; charset=utf-8");
	assert_non_null(strstr(r.body, "id=\"total\">$1.28"));
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/other/invoices/2026-10", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/invoices/2026-13", f->acct, NULL);
	assert_int_equal(r.status, 400);
	http_free(&r);
	/* The FOCUS export: its BilledCost adds up to the invoice's total, exactly. */
	r = call(f, "GET", "/v1/accounts/acme/exports/2026-10?format=focus", f->acct, NULL);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.type, "text/csv; charset=utf-8");
	check_focus(r.body, "1.275", 600);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/exports/2026-10?format=usage", f->acct, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "sandbox_id,plan,cpu_seconds,vcpu_hours"));
	assert_non_null(strstr(r.body, "\r\nrun-1,default,180,0.05,0.4,0.1,"));
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/other/exports/2026-10?format=focus", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	/* the CLI says the same */
	struct run_result *rr = malloc(sizeof *rr);
	const char *argv[] = {METER_BIN, "invoice",  "--account", "acme", "--month",
	                      "2026-10", "--format", "csv",       NULL};
	run_program(argv, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	assert_non_null(strstr(rr->out, "total,,,,,1.28,1.275"));
	free(rr);
}

/* n runs of 6 minutes of 2 vCPU, 4 GiB at 0.5 vCPU, named prefix-i, from start every 2 hours. */
static void runs(struct fx *f, const char *account, const char *prefix, int n, const char *start)
{
	char q[1024];
	snprintf(
	        q, sizeof q,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	        "SELECT '%s' || i, '%s', 2, 4, t, t + interval '6 minutes' FROM ("
	        "  SELECT i, '%s'::timestamptz + i * interval '2 hours' t "
	        "  FROM generate_series(1, %d) i) x",
	        prefix, account, start, n);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	         "SELECT '%s' || i, 1, '%s'::timestamptz + i * interval '2 hours' "
	         "  + k * interval '10 seconds', 'gen', k * 5000000 "
	         "FROM generate_series(1, %d) i, generate_series(1, 36) k",
	         prefix, start, n);
	sql(f, q);
	wait_rollups(f);
}

static void final_invoices_never_change_and_late_usage_is_adjusted_later(void **state)
{
	struct fx *f = *state;
	/* Three months by the clock: "October" two months ago, its invoice final;
	 * "November" the last month, still a draft; "December" this one. A grace of
	 * the time since this month began plus an hour makes that so on any day. */
	int64_t now = (int64_t)time(NULL) * 1000000, dec = meter_month_start(now);
	int64_t nov = meter_month_start(dec - 1), oct = meter_month_start(nov - 1);
	char octm[8], novm[8], decm[8], oct_at[40], late_at[40], grace[48], path[64];
	meter_time_format(oct, oct_at, sizeof oct_at);
	meter_time_format(oct + INT64_C(19) * 86400000000, late_at, sizeof late_at);
	snprintf(octm, sizeof octm, "%.7s", oct_at);
	meter_time_format(nov, path, sizeof path);
	snprintf(novm, sizeof novm, "%.7s", path);
	meter_time_format(dec, path, sizeof path);
	snprintf(decm, sizeof decm, "%.7s", path);
	snprintf(grace, sizeof grace, "--invoice-grace=%llds",
	         (long long)((now - dec) / 1000000 + 3600));
	api_stop(&f->api);
	assert_true(api_start(&f->api, METER_API_BIN, f->db.api_url, grace));
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	runs(f, "acme", "oct-", 10, oct_at);
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", octm);
	struct http_res r = call(f, "GET", path, f->acct, NULL);
	assert_int_equal(r.status, 200);
	char *final_json = strdup(r.body);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "status"), "final");
	assert_string_equal(str(o, "total_exact"), "0.0425"); /* 10 runs: 0.0125 + 0.03 */
	cJSON_Delete(o);
	http_free(&r);
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s?format=csv", octm);
	r = call(f, "GET", path, f->acct, NULL);
	char *final_csv = strdup(r.body);
	http_free(&r);

	/* One more October run arrives late. */
	runs(f, "acme", "late-", 1, late_at);
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", octm);
	r = call(f, "GET", path, f->acct, NULL);
	assert_string_equal(r.body, final_json); /* byte for byte */
	http_free(&r);
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s?format=csv", octm);
	r = call(f, "GET", path, f->acct, NULL);
	assert_string_equal(r.body, final_csv);
	http_free(&r);
	free(final_json);
	free(final_csv);
	/* It lands on November's draft, naming October. */
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", novm);
	r = call(f, "GET", path, f->acct, NULL);
	o = http_json(&r);
	assert_string_equal(str(o, "status"), "draft");
	assert_string_equal(str(o, "total_exact"), "0.00425");
	cJSON *l, *lines = cJSON_GetObjectItem(o, "lines");
	assert_int_equal(cJSON_GetArraySize(lines), 2);
	cJSON_ArrayForEach(l, lines) assert_string_equal(str(l, "for_month"), octm);
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "item"), "cpu_adjustment");
	cJSON_Delete(o);
	http_free(&r);
	/* The database itself refuses to change a final invoice. */
	char st[16];
	const char *changes[] = {"UPDATE invoices SET total = 0",
	                         "DELETE FROM invoices",
	                         "TRUNCATE invoices CASCADE",
	                         "UPDATE invoice_quantities SET cpu_billed_us = 0",
	                         "DELETE FROM invoice_quantities",
	                         "TRUNCATE invoice_quantities",
	                         "TRUNCATE limit_notices",
	                         ("INSERT INTO invoice_quantities VALUES ('acme', '2026-10-01', "
	                          "'2026-10-01', 1, 0, 0, 0, 0, 0, 0)")};
	char refused_insert[160];
	snprintf(refused_insert, sizeof refused_insert,
	         "INSERT INTO invoice_quantities VALUES ('acme', '%s-01', '%s-01', 1, 0, 0, 0, 0, "
	         "0, 0)",
	         octm, octm);
	changes[7] = refused_insert;
	for (int i = 0; i < 8; i++) {
		PGresult *res = PQexec(f->db.conn, changes[i]);
		const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		if (code == NULL || strcmp(code, "23000") != 0)
			fail_msg("\"%s\" was not refused", changes[i]);
		PQclear(res);
	}
	(void)st;
	/* November finalised (a grace of 0 s): December then has nothing more to adjust. */
	struct run_result *rr = malloc(sizeof *rr);
	const char *argv[] = {METER_BIN, "invoice", "--account", "acme", "--month",
	                      novm,      "--grace", "0s",        NULL};
	run_program(argv, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	assert_non_null(strstr(rr->out, "\"status\":\"final\""));
	free(rr);
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", decm);
	r = call(f, "GET", path, f->acct, NULL);
	o = http_json(&r);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "lines")), 0);
	assert_string_equal(str(o, "total_exact"), "0.00");
	cJSON_Delete(o);
	http_free(&r);
	api_stop(&f->api);
	assert_true(api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info"));
}

/* A process's peak resident memory (VmHWM), KiB. */
static long peak_kib(pid_t pid)
{
	char path[64], line[256];
	long v = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *fp = fopen(path, "r");
	while (fp && fgets(line, sizeof line, fp))
		if (sscanf(line, "VmHWM: %ld kB", &v) == 1)
			break;
	if (fp)
		fclose(fp);
	if (v < 0)
		fail_msg("no VmHWM in %s", path);
	return v;
}

#define NBIG 100000

/*
 * An account of 100,000 sandboxes in a month (rows written straight into the
 * rollups). Its FOCUS export streams (chunked, whole) 200,000 usage rows; the
 * CPU line's shares are those meter_allocate gives in C for the same weights
 * (many equal: ties go to the earlier id), one by one, and each line's shares
 * add up to its amount exactly; its bytes are those `meter export` writes
 * whole and the dashboard's download gives. The usage CSV has a row a
 * sandbox.
 */
static void an_export_of_100000_sandboxes_streams_and_adds_up(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('big', 'Big', 'paid', 0)");
	sql(f, "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	       "cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	       "SELECT 'big', 'b-' || lpad(k::text, 6, '0'), "
	       "'2026-10-05T00:00:00Z'::timestamptz + (k % 24) * interval '1 hour', 1, "
	       "(k * 7919) % 1000003, (k % 997) * 1000 + 90000, 0, 3600000000, 3600000000, "
	       "(k % 13 + 1) * 3600000000000::bigint FROM generate_series(1, 100000) k");
	sql(f, "INSERT INTO account_month SELECT account_id, '2026-10-01', price_plan_id, "
	       "sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), "
	       "sum(wall_us), sum(memory_mgib_us) FROM usage_hourly WHERE account_id = 'big' "
	       "GROUP BY 1, 3");
	cJSON *inv = get_json(f, "/v1/accounts/big/invoices/2026-10", 200);
	int64_t line_cpu = -1, line_mem = -1;
	cJSON *l;
	cJSON_ArrayForEach(l, cJSON_GetObjectItem(inv, "lines"))
	{
		if (strcmp(str(l, "item"), "cpu") == 0)
			line_cpu = nano_of(l, "amount_exact");
		if (strcmp(str(l, "item"), "memory") == 0)
			line_mem = nano_of(l, "amount_exact");
	}
	cJSON_Delete(inv);
	assert_true(line_cpu > 0 && line_mem > 0);

	long peak_before = peak_kib(f->api.pid);
	struct http_res r =
	        call(f, "GET", "/v1/accounts/big/exports/2026-10?format=focus", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_false(r.cut);
	/* byte for byte what the CLI writes (no HTTP, no chunks) and the dashboard gives */
	char cmd[sizeof f->db.url + 512];
	snprintf(cmd, sizeof cmd,
	         "DATABASE_URL='%s' %s export --account big --month 2026-10 --format focus",
	         f->db.url, METER_BIN);
	FILE *cli = popen(cmd, "r");
	assert_non_null(cli);
	char *whole = malloc(r.len + 2);
	size_t got = fread(whole, 1, r.len + 1, cli);
	assert_int_equal(pclose(cli), 0);
	assert_int_equal(got, r.len);
	assert_memory_equal(whole, r.body, r.len);
	free(whole);
	struct http_res dl = call(f, "GET", "/dashboard/exports/2026-10?format=focus&account=big",
	                          f->admin, NULL);
	assert_int_equal(dl.status, 200);
	assert_int_equal(dl.len, r.len);
	assert_memory_equal(dl.body, r.body, r.len);
	http_free(&dl);
	/* streamed: meter-api's peak memory grew by far less than the answer's size */
	long grew = peak_kib(f->api.pid) - peak_before;
	printf("  FOCUS export of %zu bytes; meter-api's peak memory grew by %ld KiB\n", r.len,
	       grew);
	assert_true(r.len > (size_t)40 << 20);
#ifdef __SANITIZE_ADDRESS__
	/* AddressSanitizer keeps freed memory aside (its quarantine, 256 MiB) to catch a
	 * use after free: the peak says nothing of the export here, so it is only shown */
	printf("  (built with AddressSanitizer: the peak is not checked)\n");
#else
	assert_true(grew < 16 << 10);
#endif
	/* the shares meter_allocate gives, in the order of the ids */
	int64_t *w = calloc(NBIG, sizeof *w);
	meter_money *want = calloc(NBIG, sizeof *want);
	assert_non_null(w);
	assert_non_null(want);
	for (int k = 1; k <= NBIG; k++)
		w[k - 1] = (k % 997) * 1000 + 90000; /* equal weights: ties of the remainders */
	assert_int_equal(meter_allocate(line_cpu, w, NBIG, want), METER_OK);
	char *save = NULL, *fields[32];
	int rows = 0, cpu_rows = 0, mem_rows = 0;
	meter_money cpu_sum = 0, mem_sum = 0;
	for (char *line = strtok_r(r.body, "\r\n", &save); line;
	     line = strtok_r(NULL, "\r\n", &save)) {
		assert_int_equal(csv_split(line, fields, 32), 19);
		if (rows++ == 0)
			continue;
		int64_t cost;
		assert_int_equal(meter_decimal_parse(fields[16], 9, true, &cost), METER_OK);
		if (strncmp(fields[6], "CPU", 3) == 0) {
			char id[16];
			snprintf(id, sizeof id, "b-%06d", cpu_rows + 1);
			assert_string_equal(fields[7], id);
			if (cost != want[cpu_rows])
				fail_msg("%s: BilledCost %lld nano-dollars, meter_allocate %lld",
				         id, (long long)cost, (long long)want[cpu_rows]);
			cpu_sum += cost;
			cpu_rows++;
		} else {
			mem_sum += cost;
			mem_rows++;
		}
	}
	assert_int_equal(cpu_rows, NBIG);
	assert_int_equal(mem_rows, NBIG);
	assert_int_equal(cpu_sum, line_cpu);
	assert_int_equal(mem_sum, line_mem);
	http_free(&r);
	free(w);
	free(want);

	/* a client that leaves in mid-export: its connection serves the next requests */
	for (int i = 0; i < 3; i++) {
		int fd = tcp(f->api.port);
		char head[512], buf[65536];
		int n = snprintf(head, sizeof head,
		                 "GET /v1/accounts/big/exports/2026-10?format=focus HTTP/1.1\r\n"
		                 "Host: x\r\nAuthorization: Bearer %s\r\n\r\n",
		                 f->admin);
		assert_true(fd >= 0 && write(fd, head, (size_t)n) == n);
		assert_true(read(fd, buf, sizeof buf) > 0);
		close(fd);
	}
	usleep(300000);
	for (int i = 0; i < 20; i++) {
		r = call(f, "GET",
		         "/v1/accounts/big/usage?from=2026-10-01T00:00:00Z"
		         "&to=2026-11-01T00:00:00Z&limit=5",
		         f->admin, NULL);
		if (r.status != 200)
			fail_msg("after a client left mid-export: %d %s", r.status,
			         r.body ? r.body : "");
		http_free(&r);
	}
	r = call(f, "GET", "/v1/accounts/big/exports/2026-10?format=usage", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_false(r.cut);
	int lines = 0;
	for (const char *p = r.body; (p = strstr(p, "\r\n")) != NULL; p += 2)
		lines++;
	assert_int_equal(lines, NBIG + 1);
	http_free(&r);
}

/* A price plan named like a formula is text in every CSV (issue 39, finding
 * 10); ids cannot be (they start with a letter or a digit). */
static void a_plan_named_like_a_formula_is_text_in_every_csv(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE price_plans SET name = '=HYPERLINK(\"http://evil.example/\",\"open\")'");
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('sb-f', 'acme', 1, 1, '2026-10-05T10:00:00Z', '2026-10-05T10:01:00Z')");
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	    "SELECT 'sb-f', 1, '2026-10-05T10:00:00Z'::timestamptz + k * interval '10 s', 'gen', "
	    "k * 1000000 FROM generate_series(1, 6) k");
	wait_rollups(f);
	const char *paths[] = {"/v1/accounts/acme/exports/2026-10?format=usage",
	                       "/v1/accounts/acme/exports/2026-10?format=focus",
	                       "/v1/accounts/acme/invoices/2026-10?format=csv"};
	for (int i = 0; i < 3; i++) {
		struct http_res r = call(f, "GET", paths[i], f->acct, NULL);
		assert_int_equal(r.status, 200);
		if (strstr(r.body, "HYPERLINK") == NULL)
			fail_msg("%s does not name the plan: %s", paths[i], r.body);
		/* no cell starts with "=": each is "'=..." in quotes (or has its = inside) */
		for (const char *p = r.body; (p = strchr(p, '=')) != NULL; p++)
			if (p == r.body || p[-1] == ',' || p[-1] == '\n' ||
			    (p[-1] == '"' && (p - 1 == r.body || p[-2] == ',' || p[-2] == '\n')))
				fail_msg("%s has a cell that starts with '=': %.60s", paths[i], p);
		if (i == 0) {
			assert_non_null(
			        strstr(r.body, "\"'=HYPERLINK(\"\"http://evil.example/\"\""));
		}
		http_free(&r);
	}
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(the_worked_example_as_real_usage_invoices_1_28,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                final_invoices_never_change_and_late_usage_is_adjusted_later, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(an_export_of_100000_sandboxes_streams_and_adds_up,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(a_plan_named_like_a_formula_is_text_in_every_csv,
	                                        apifx_setup, apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
