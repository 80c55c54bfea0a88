/*
 * The ledger at its edges, against a real PostgreSQL and a real meter-api
 * over HTTP, with the meter command beside it: sums at a large customer's
 * scale (rule 7), a sandbox that cannot be rated among good ones (rule 10),
 * intervals before any price plan (rule 6) and the trial's last hour split
 * interval by interval (rule 8). Samples go in as collectors write them (rows
 * of samples); figures come out of the API and the CLI, worked by hand.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rollup/rollup.h"
#include "collector/batch.h"
#include "collector/writer.h"
#include "common/keys.h"
#include "meter/decimal.h"
#include "meter/money.h"
#include "meter/plan.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "tests/support/csvread.h"
#include "tests/support/http.h"
#include "tests/support/run.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api;
	char admin[KEY_LEN + 1];
};

static void sql(struct fx *f, const char *q)
{
	if (!testdb_exec(&f->db, q))
		fail_msg("SQL failed: %s", q);
}

static long num(struct fx *f, const char *q)
{
	char buf[64];
	if (testdb_value(&f->db, q, buf, sizeof buf) == NULL)
		fail_msg("no value: %s", q);
	return strtol(buf, NULL, 10);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !testdb_create_migrated(&f->db, "ledger")) {
		free(f);
		return -1;
	}
	*state = f;
	if (!api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info") ||
	    !testdb_key(&f->db, NULL, f->admin))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	/* a clean exit: under the sanitizers, no leak and no error either */
	int st = f->api.pid ? api_stop(&f->api) : 0;
	if (st != 0)
		fprintf(stderr, "meter-api exited with status %d\n", st);
	testdb_drop(&f->db);
	free(f);
	return st == 0 ? 0 : -1;
}

static cJSON *get(struct fx *f, const char *path)
{
	struct http_res r;
	http_do(f->api.port, "GET", path, f->admin, NULL, 0, &r);
	if (r.status != 200)
		fail_msg("GET %s: %d %s", path, r.status, r.body ? r.body : "");
	cJSON *o = http_json(&r);
	http_free(&r);
	if (o == NULL)
		fail_msg("GET %s: not JSON", path);
	return o;
}

static const char *str(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsString(v))
		fail_msg("field %s is not a string", name);
	return v->valuestring;
}

/* Waits until every mark that can be rated is (the API's rollup worker does it). */
static void wait_rollups(struct fx *f)
{
	for (int i = 0; i < 1200; i++) {
		if (num(f, "SELECT (SELECT count(*) FROM rollup_queue WHERE waiting IS NULL) + "
		           "(SELECT count(*) FROM trial_queue)") == 0)
			return;
		usleep(50000);
	}
	fail_msg("the rollup worker did not catch up in 60 s");
}

/* The meter command's invoice total (CSV form) for an account and month. */
static void cli_invoice_total(struct fx *f, const char *account, const char *month,
                              const char *want)
{
	struct run_result *rr = malloc(sizeof *rr);
	const char *argv[] = {METER_BIN, "invoice",  "--account", account, "--month",
	                      month,     "--format", "csv",       NULL};
	run_program(argv, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	char line[128];
	snprintf(line, sizeof line, "\r\ntotal,,,,,%s\r\n", want);
	if (strstr(rr->out, line) == NULL)
		fail_msg("meter invoice: no line \"total,,,,,%s\" in:\n%s", want, rr->out);
	free(rr);
}

/* ---- rule 7: no sum overflows at a large customer's scale ---- */

/* An invoice of October 2026: its total shown and exact, over HTTP and from the CLI. */
static void invoice_total(struct fx *f, const char *account, const char *total, const char *exact)
{
	char path[128];
	snprintf(path, sizeof path, "/v1/accounts/%s/invoices/2026-10", account);
	cJSON *inv = get(f, path);
	assert_string_equal(str(inv, "total_exact"), exact);
	assert_string_equal(str(inv, "total"), total);
	cJSON_Delete(inv);
	char both[96];
	snprintf(both, sizeof both, "%s,%s", total, exact);
	cli_invoice_total(f, account, "2026-10", both);
}

/*
 * Ten sandboxes of 256 vCPUs and 1 TiB, all 256 vCPUs busy all of
 * October (744 hours), sampled every hour. By hand:
 *   CPU     10 x 256 vCPU x 744 h x $0.025   = $47,616
 *   memory  10 x 1,024 GiB x 744 h x $0.0075 = $57,139.20
 *   trial   the first 50 sandbox-hours (5 hours of all ten, every interval
 *           whole): 50 x (256 x $0.025 + 1,024 x $0.0075) = $704
 *   total   $104,051.20
 */
static void ten_sandboxes_of_256_vcpus_and_1_tib_busy_all_month_are_billed_in_full(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('huge', 'Huge', 'paid')");
	for (int i = 0; i < 10; i++) {
		char body[256];
		snprintf(body, sizeof body,
		         "{\"id\": \"big-%d\", \"account_id\": \"huge\", \"vcpus\": 256, "
		         "\"memory_gib\": 1024, \"started_at\": \"2026-10-01T00:00:00Z\"}",
		         i);
		struct http_res r;
		http_do(f->api.port, "POST", "/v1/sandboxes", f->admin, body, strlen(body), &r);
		assert_int_equal(r.status, 201);
		http_free(&r);
	}
	/* every hour, the counter at 256 vCPUs x the time since the start */
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	    "SELECT 'big-' || i, 77, '2026-10-01T00:00:00Z'::timestamptz + h * interval '1 hour', "
	    "  'host-a', h * 256::bigint * 3600000000 "
	    "FROM generate_series(0, 9) i, generate_series(1, 744) h");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 0); /* nothing parked */

	cJSON *u =
	        get(f, "/v1/accounts/huge/usage?from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z");
	assert_string_equal(str(u, "vcpu_hours"), "1904640");
	assert_string_equal(str(u, "cpu_seconds"), "6856704000");
	assert_string_equal(str(u, "gib_hours"), "7618560");
	assert_string_equal(str(u, "sandbox_hours"), "7440");
	assert_string_equal(str(u, "busy_hours"), "7440");
	assert_string_equal(str(u, "cost"), "104755.20");
	cJSON_Delete(u);

	cJSON *inv = get(f, "/v1/accounts/huge/invoices/2026-10");
	assert_string_equal(str(inv, "status"), "final");
	assert_string_equal(str(inv, "total"), "104051.20");
	cJSON *lines = cJSON_GetObjectItem(inv, "lines");
	assert_int_equal(cJSON_GetArraySize(lines), 3);
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "quantity"), "1904640");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "amount"), "47616.00");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "quantity"), "7618560");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "amount"), "57139.20");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 2), "quantity"), "50");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 2), "amount"), "-704.00");
	cJSON_Delete(inv);
	cli_invoice_total(f, "huge", "2026-10", "104051.20,104051.20");

	cJSON *t = get(f, "/v1/accounts/huge/trial");
	assert_string_equal(str(t, "used_hours"), "50");
	assert_string_equal(str(t, "remaining_hours"), "0");
	cJSON_Delete(t);
}

/*
 * 10,000 sandboxes of 256 vCPUs and 1 TiB in one account, each running all
 * of October busy: one interval of 744 hours each (started at the month's
 * start, one sample at its end), so the account's month sums 2.7e22
 * milli-GiB x µs, past 64 bits nearly 3,000 times. By hand:
 *   CPU     10,000 x 256 x 744 x $0.025   = $47,616,000
 *   memory  10,000 x 1,024 x 744 x $0.0075 = $57,139,200
 *   trial   every interval ends at the same instant; taken in the order of
 *           the sandboxes' ids, the first one's covers 50 of its 744 hours:
 *           50 x (256 x $0.025 + 1,024 x $0.0075) = $704
 *   total   $104,754,496
 */
static void ten_thousand_such_sandboxes_in_one_account_month_are_exact(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('fleet', 'Fleet', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "SELECT 'f-' || lpad(i::text, 5, '0'), 'fleet', 256, 1024, "
	       "  '2026-10-01T00:00:00Z', '2026-11-01T00:00:00Z' FROM generate_series(1, 10000) i");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'f-' || lpad(i::text, 5, '0'), 5, '2026-11-01T00:00:00Z', 'host-a', "
	       "  744 * 256::bigint * 3600000000 FROM generate_series(1, 10000) i");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 0);
	cJSON *inv = get(f, "/v1/accounts/fleet/invoices/2026-10");
	assert_string_equal(str(inv, "total"), "104754496.00");
	cJSON *lines = cJSON_GetObjectItem(inv, "lines");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 0), "amount"), "47616000.00");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "quantity"), "7618560000");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 1), "amount"), "57139200.00");
	assert_string_equal(str(cJSON_GetArrayItem(lines, 2), "amount"), "-704.00");
	cJSON_Delete(inv);
	cli_invoice_total(f, "fleet", "2026-10", "104754496.00,104754496.00");
	/* What the final invoice billed is kept as exactly (numeric, past 64 bits). */
	char v[64];
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT memory_mgib_us::text FROM invoice_quantities "
	                                 "WHERE account_id = 'fleet'",
	                                 v, sizeof v),
	                    "27426816000000000000000");
	cJSON *t = get(f, "/v1/accounts/fleet/trial");
	assert_string_equal(str(t, "used_hours"), "50");
	cJSON_Delete(t);
	struct http_res r;
	const char *q = "{\"account_id\": \"fleet\", \"vcpus\": 1, \"memory_gib\": 1}";
	http_do(f->api.port, "POST", "/v1/quota/check", f->admin, q, strlen(q), &r);
	assert_int_equal(r.status, 200);
	http_free(&r);
}

/* ---- rule 10: no sandbox holds up another ---- */

static char *meter_cli(struct fx *f, int want_status, const char *a1, const char *a2,
                       const char *a3)
{
	struct run_result *rr = malloc(sizeof *rr);
	const char *argv[] = {METER_BIN, a1, a2, a3, NULL};
	run_program(argv, f->db.url, rr);
	if (rr->status != want_status)
		fail_msg("meter %s %s: status %d, stderr: %s", a1, a2 ? a2 : "", rr->status,
		         rr->err);
	char *out = strdup(rr->out);
	free(rr);
	return out;
}

/* The line of `meter parked` about sandbox, or NULL. */
static const char *parked_line(const char *out, const char *sandbox, char *buf, size_t len)
{
	for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		size_t n = strcspn(p, "\n");
		if (strncmp(p, sandbox, strlen(sandbox)) == 0 && p[strlen(sandbox)] == ' ') {
			snprintf(buf, len, "%.*s", (int)n, p);
			return buf;
		}
	}
	return NULL;
}

/*
 * Four sandboxes that cannot be rated stand at the head of the queue, 1,000
 * good ones behind them: one pass of the rollup rates every good one and sets
 * the four aside with their reasons, which `meter parked` lists; a retry after
 * a fix rates what was fixed; registering one wakes it.
 */
static void a_poisoned_head_of_the_queue_holds_up_no_one(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api); /* this test runs the passes itself */
	f->api.pid = 0;
	sql(f, "INSERT INTO accounts (id, name, plan, max_concurrent, collector_registration) "
	       "VALUES ('acme', 'Acme', 'paid', 2000, true)");
	/* 1. a cgroup that names acme with a memory limit of 0: cannot be registered */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host, cpu_usage_us, "
	       "memory_limit_bytes, cpu_limit_millicores) VALUES "
	       "('zero-mem', 1, '2026-10-05T10:00:00Z', 'acme', 'h', 1000, 0, 1000)");
	/* 2. one that names an account that does not exist: waits for a registration */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host, cpu_usage_us, "
	       "memory_limit_bytes, cpu_limit_millicores) VALUES "
	       "('ghost', 1, '2026-10-05T10:00:00Z', 'nobody', 'h', 1000, 1073741824, 1000)");
	/* 3. counters past all reason: two incarnations of 6e18 µs in one hour */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	       "VALUES ('absurd', 'acme', 1, 1)");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('absurd', 1, '2026-10-05T10:00:05Z', 'h', 6000000000000000000), "
	       "('absurd', 2, '2026-10-05T10:00:10Z', 'h', 6000000000000000000)");
	/* 4. a sandbox whose hours the database refuses (a planted failure) */
	sql(f, "CREATE FUNCTION trap() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
	       "IF NEW.sandbox_id = 'trap' THEN RAISE EXCEPTION 'planted failure'; END IF; "
	       "RETURN NEW; END $$");
	sql(f, "CREATE TRIGGER trap BEFORE INSERT ON usage_hourly FOR EACH ROW "
	       "EXECUTE FUNCTION trap()");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	       "VALUES ('trap', 'acme', 1, 1)");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('trap', 1, '2026-10-05T10:00:00Z', 'h', 0), "
	       "('trap', 1, '2026-10-05T10:00:10Z', 'h', 5000000)");
	/* then 1,000 good ones, marked after the four */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	       "SELECT 'good-' || i, 'acme', 2, 4 FROM generate_series(1, 1000) i");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'good-' || i, 1, '2026-10-05T11:00:00Z'::timestamptz + k * interval '10 s', "
	       "  'h', k * 10000000 FROM generate_series(1, 1000) i, generate_series(0, 1) k");
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 1004);

	char err[512];
	int taken = rollup_pass(f->db.conn, err, sizeof err);
	if (taken < 0)
		fail_msg("rollup_pass: %s", err);
	assert_int_equal(num(f, "SELECT count(DISTINCT sandbox_id) FROM usage_hourly "
	                        "WHERE sandbox_id LIKE 'good-%'"),
	                 1000);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS NULL"), 0);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 4);

	char *out = meter_cli(f, 0, "parked", NULL, NULL), line[1024];
	assert_non_null(parked_line(out, "zero-mem", line, sizeof line));
	assert_non_null(strstr(line, " acme "));
	assert_non_null(strstr(line, " parked "));
	assert_non_null(
	        strstr(line, "1000 millicores of CPU and 0 bytes of memory are out of range"));
	assert_non_null(parked_line(out, "ghost", line, sizeof line));
	assert_non_null(strstr(line, " unregistered "));
	assert_non_null(strstr(line, "names account \"nobody\", which does not exist"));
	assert_non_null(parked_line(out, "absurd", line, sizeof line));
	assert_non_null(strstr(line, "out of range"));
	assert_non_null(strstr(line, "         2  ")); /* its two samples wait */
	assert_non_null(parked_line(out, "trap", line, sizeof line));
	assert_non_null(strstr(line, "planted failure"));
	free(out);

	/* The trap is fixed: a retry of it rates it; the others are left alone. */
	sql(f, "DROP TRIGGER trap ON usage_hourly");
	free(meter_cli(f, 0, "parked", "retry", "trap"));
	free(meter_cli(f, 1, "parked", "retry", "good-1")); /* nothing of it set aside */
	assert_true(rollup_pass(f->db.conn, err, sizeof err) >= 1);
	assert_int_equal(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'trap'"), 2);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 3);
	/* --all wakes the rest; still broken, they are set aside again, since unchanged */
	long since = num(f, "SELECT extract(epoch FROM min(waiting_since))::bigint "
	                    "FROM rollup_queue");
	free(meter_cli(f, 0, "parked", "retry", "--all"));
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS NULL"), 3);
	assert_int_equal(rollup_pass(f->db.conn, err, sizeof err), 3);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS NULL"), 0);
	assert_int_equal(num(f, "SELECT extract(epoch FROM min(waiting_since))::bigint "
	                        "FROM rollup_queue"),
	                 since);

	/* The platform registers zero-mem with its real size: that wakes and rates it. */
	assert_true(api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info"));
	const char *reg = "{\"id\": \"zero-mem\", \"account_id\": \"acme\", \"vcpus\": 1, "
	                  "\"memory_gib\": 2}";
	struct http_res r;
	http_do(f->api.port, "POST", "/v1/sandboxes", f->admin, reg, strlen(reg), &r);
	assert_int_equal(r.status, 201);
	http_free(&r);
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 2);
	http_do(f->api.port, "GET", "/metrics", NULL, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\nmeter_rollup_parked 1\n"));
	assert_non_null(strstr(r.body, "\nmeter_samples_unattributed 1\n"));
	http_free(&r);
}

/*
 * A sample stamped years ahead (a host whose clock jumped forward) would make
 * an interval of years. It is not rated: the sandbox's other samples are,
 * and its mark stays aside with the reason until the operator deletes the
 * sample and retries.
 */
static void a_sample_stamped_years_ahead_is_set_aside_and_the_rest_billed(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) "
	       "VALUES ('ahead', 'acme', 1, 1, '2026-10-05T10:00:00Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ahead', 4, '2026-10-05T10:00:10Z', 'h', 10000000), "
	       "('ahead', 4, '2026-10-05T10:00:20Z', 'h', 20000000), "
	       "('ahead', 4, '2030-01-01T00:00:00Z', 'h', 30000000)");
	for (int i = 0; i < 600 && num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS "
	                                  "NOT NULL") == 0;
	     i++)
		usleep(50000);
	cJSON *u = get(f, "/v1/accounts/acme/usage?from=2026-10-01T00:00:00Z"
	                  "&to=2026-11-01T00:00:00Z");
	assert_string_equal(str(u, "cpu_seconds"), "20");
	assert_string_equal(str(u, "sandbox_hours"), "0.005556");
	cJSON_Delete(u);
	char *out = meter_cli(f, 0, "parked", NULL, NULL), line[1024];
	assert_non_null(parked_line(out, "ahead", line, sizeof line));
	assert_non_null(strstr(line, "1 sample(s) stamped from 2030-01-01T00:00:00Z on, more than "
	                             "an hour ahead of now"));
	free(out);
	sql(f, "DELETE FROM samples WHERE sandbox_id = 'ahead' AND ts > '2029-01-01'");
	free(meter_cli(f, 0, "parked", "retry", "ahead"));
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 0);
}

/*
 * A spool record written by a collector from before samples had the ended
 * field (11 fields, not 12) is written as it was, with no end; a record of
 * today's collector carries its end, and the trigger keeps it.
 */
static void spool_records_of_an_older_collector_are_written_too(void **state)
{
	struct fx *f = *state;
	static const char old[] =
	        "sb-old\t5\t2026-10-05T10:00:00.000000Z\t\\N\th\t1000\t\\N\t\\N\t\\N\t\\N\t\\N\n"
	        "sb-old\t5\t2026-10-05T10:00:10.000000Z\t\\N\th\t2000\t\\N\t\\N\t\\N\t\\N\t\\N\n";
	long n = 0;
	char err[512];
	if (!writer_write(f->db.conn, "", old, sizeof old - 1, &n, err, sizeof err))
		fail_msg("%s", err);
	assert_int_equal(n, 2);
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-old' AND "
	                        "ended IS NULL"),
	                 2);
	struct batch b = {0};
	struct cg_reading r = {.cpu_usage_us = 3000,
	                       .mem_current = CG_ABSENT,
	                       .mem_peak = CG_ABSENT,
	                       .mem_anon_kernel = CG_ABSENT,
	                       .mem_limit = CG_ABSENT,
	                       .cpu_limit_millicores = CG_ABSENT};
	int64_t ts = 1791194420000000; /* 2026-10-05T10:00:20Z */
	assert_true(batch_add(&b, "sb-old", "", 5, ts, "h", &r));
	batch_mark_end(&b, END_READ);
	if (!writer_write(f->db.conn, "", b.buf, b.len, &n, err, sizeof err))
		fail_msg("%s", err);
	batch_free(&b);
	assert_int_equal(
	        num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-old' AND ended"), 1);
	assert_int_equal(num(f, "SELECT count(*) FROM incarnation_ends WHERE sandbox_id = 'sb-old' "
	                        "AND incarnation = 5 AND ended_at = '2026-10-05T10:00:20Z'"),
	                 1);
}

/*
 * The same batch from two connections at once (a collector's spool sending a
 * batch whose first send is still open, two collectors shown one cgroup): the
 * second write waits on the first's rows. When the first commits, the second
 * stores none of them and succeeds; when it rolls back, the second stores
 * them all. A batch that overlaps one stored before stores only its new
 * samples. The writer's insert is a plain INSERT that falls back to ON
 * CONFLICT DO NOTHING on a duplicate (migration 0039): every path of it.
 */
struct racing_write {
	PGconn *conn;
	const char *data;
	long inserted;
	bool ok;
	char err[512];
};

static void *racing_write_run(void *arg)
{
	struct racing_write *w = arg;
	w->ok = writer_write(w->conn, "", w->data, strlen(w->data), &w->inserted, w->err,
	                     sizeof w->err);
	return NULL;
}

/* COPY text of samples i..j (a minute apart, 1000 µs of CPU each) of sandbox id of account race. */
static void race_rows(char *out, size_t len, const char *id, int i, int j)
{
	size_t at = 0;
	for (int k = i; k <= j; k++)
		at += (size_t)snprintf(
		        out + at, len - at,
		        "%s\t1\t2026-10-05T10:%02d:00.000000Z\trace\th\t%d\t\\N\t\\N\t"
		        "\\N\t1073741824\t1000\t\\N\t\\N\n",
		        id, k, 1000 * k);
}

/* Writes rows on a connection of its own while f's open transaction on held has them too. */
static void race(struct fx *f, PGconn *held, const char *rows, const char *end, long want)
{
	struct racing_write w = {.conn = PQconnectdb(f->db.url), .data = rows};
	assert_int_equal(PQstatus(w.conn), CONNECTION_OK);
	PGresult *r = PQexec(held, "BEGIN");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	/* the rows as the writer hands them over, in held's transaction */
	r = PQexec(held,
	           "CREATE TEMP TABLE held_rows (LIKE samples INCLUDING DEFAULTS) ON COMMIT DROP");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	r = PQexec(held, "COPY held_rows (" BATCH_COLUMNS ") FROM STDIN");
	assert_int_equal(PQresultStatus(r), PGRES_COPY_IN);
	PQclear(r);
	assert_int_equal(PQputCopyData(held, rows, (int)strlen(rows)), 1);
	assert_int_equal(PQputCopyEnd(held, NULL), 1);
	while ((r = PQgetResult(held)) != NULL) {
		assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
		PQclear(r);
	}
	r = PQexec(held, "SELECT meter_samples_ingest(array_agg(ROW(" BATCH_COLUMNS_12
	                 ")::meter_sample_row), array_agg(end_cpu)) FROM held_rows");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	PQclear(r);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, racing_write_run, &w), 0);
	char q[160];
	snprintf(q, sizeof q,
	         "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND wait_event_type = "
	         "'Lock'",
	         PQbackendPID(w.conn));
	int i = 0;
	while (i++ < 400 && num(f, q) == 0)
		usleep(10000);
	r = PQexec(held, end);
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	pthread_join(t, NULL);
	PQfinish(w.conn);
	assert_true(i <= 400); /* the second write did wait on the first's rows */
	if (!w.ok)
		fail_msg("the second write failed: %s", w.err);
	assert_int_equal(w.inserted, want);
}

static void the_same_batch_written_at_once_is_stored_once(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan, collector_registration) "
	       "VALUES ('race', 'Race', 'paid', true)");
	PGconn *held = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(held), CONNECTION_OK);
	char rows[2048];
	race_rows(rows, sizeof rows, "sb-race", 1, 3);
	race(f, held, rows, "COMMIT", 0);
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-race'"), 3);
	race_rows(rows, sizeof rows, "sb-race-2", 1, 3);
	race(f, held, rows, "ROLLBACK", 3);
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-race-2'"), 3);
	PQfinish(held);

	/* overlapping a batch stored before: samples 2 and 3 are, 4 and 5 are new */
	long n = 0;
	char err[512];
	race_rows(rows, sizeof rows, "sb-race", 2, 5);
	if (!writer_write(f->db.conn, "", rows, strlen(rows), &n, err, sizeof err))
		fail_msg("%s", err);
	assert_int_equal(n, 2);
	/* 5 samples, 15,000 µs: each once */
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-race'"), 5);
	assert_int_equal(num(f, "SELECT sum(cpu_usage_us) FROM samples WHERE sandbox_id = "
	                        "'sb-race'"),
	                 15000);
	/* both sandboxes registered from their samples, and their marks rated */
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE id IN ('sb-race', "
	                        "'sb-race-2')"),
	                 2);
}

/* ---- rule 9: the end the collector sees, the platform's stop ---- */

static cJSON *post(struct fx *f, const char *path, const char *body, int want)
{
	struct http_res r;
	http_do(f->api.port, "POST", path, f->admin, body, strlen(body), &r);
	if (r.status != want)
		fail_msg("POST %s %s: %d %s, wanted %d", path, body, r.status, r.body ? r.body : "",
		         want);
	cJSON *o = http_json(&r);
	http_free(&r);
	return o;
}

/*
 * The earlier end wins, whoever says it: a collector's end (the sample that
 * ends the incarnation) stops the sandbox; a later platform stop keeps it; an
 * earlier one takes over. A stop at or after the platform's own is refused
 * (409) and changes nothing; a stop before the start is 422. A new
 * incarnation after the end runs again.
 */
static void the_earlier_end_wins_and_a_new_incarnation_runs_again(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('life', 'Life', 'paid')");
	cJSON_Delete(post(f, "/v1/sandboxes",
	                  "{\"id\": \"lc\", \"account_id\": \"life\", \"vcpus\": 1, "
	                  "\"memory_gib\": 1, \"started_at\": \"2026-10-05T10:00:00Z\"}",
	                  201));
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, ended) VALUES "
	    "('lc', 1, '2026-10-05T10:00:10Z', 'h', 1000000, NULL), "
	    "('lc', 1, '2026-10-05T10:00:20Z', 'h', 2000000, true)");
	cJSON *sb = get(f, "/v1/sandboxes/lc");
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T10:00:20Z");
	assert_string_equal(str(sb, "ended_by"), "collector");
	cJSON_Delete(sb);
	/* a later platform stop: the collector's end stands */
	sb = post(f, "/v1/sandboxes/lc/stop", "{\"stopped_at\": \"2026-10-05T10:05:00Z\"}", 200);
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T10:00:20Z");
	assert_string_equal(str(sb, "ended_by"), "collector");
	cJSON_Delete(sb);
	/* the same stop again, or a later one: refused, nothing changes */
	cJSON_Delete(post(f, "/v1/sandboxes/lc/stop", "{\"stopped_at\": \"2026-10-05T10:05:00Z\"}",
	                  409));
	cJSON_Delete(post(f, "/v1/sandboxes/lc/stop", "{\"stopped_at\": \"2026-10-05T09:00:00Z\"}",
	                  422));
	/* an earlier platform stop takes over */
	sb = post(f, "/v1/sandboxes/lc/stop", "{\"stopped_at\": \"2026-10-05T10:00:15Z\"}", 200);
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T10:00:15Z");
	assert_string_equal(str(sb, "ended_by"), "platform");
	cJSON_Delete(sb);
	/* a new incarnation after the end runs again */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('lc', 2, '2026-10-05T11:00:00Z', 'h', 500000)");
	sb = get(f, "/v1/sandboxes/lc");
	assert_string_equal(str(sb, "status"), "running");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(sb, "ended_by")));
	cJSON_Delete(sb);
	/* a late sample of the old incarnation changes nothing of that */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('lc', 1, '2026-10-05T10:00:30Z', 'h', 2000000)");
	sb = get(f, "/v1/sandboxes/lc");
	assert_string_equal(str(sb, "status"), "running");
	cJSON_Delete(sb);
	/* its end, then the stop of an unknown sandbox */
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, ended) VALUES "
	    "('lc', 2, '2026-10-05T11:00:30Z', 'h', 600000, true)");
	sb = get(f, "/v1/sandboxes/lc");
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T11:00:30Z");
	assert_string_equal(str(sb, "ended_by"), "collector");
	cJSON_Delete(sb);
	cJSON_Delete(post(f, "/v1/sandboxes/nobody/stop", "{}", 404));
}

/* ---- rule 3: billing ends at the end ---- */

/* A 2 vCPU / 4 GiB sandbox of account linger from 00:00, sampled each minute for two hours,
 * one vCPU busy the first hour; the sample at 01:00 ends it when ended. */
static void busy_then_lingering(struct fx *f, const char *id, const char *ended)
{
	char q[1024];
	snprintf(q, sizeof q,
	         "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) "
	         "VALUES ('%s', 'linger', 2, 4, '2026-10-05T00:00:00Z')",
	         id);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, ended) "
	         "SELECT '%s', 7, '2026-10-05T00:00:00Z'::timestamptz + k * interval '1 minute', "
	         "'h', least(k, 60) * 60000000::bigint, CASE WHEN k = 60 THEN %s::boolean END "
	         "FROM generate_series(1, 120) k",
	         id, ended);
	sql(f, q);
}

/*
 * The issue's figure: a 2 vCPU / 4 GiB sandbox stopped after one hour busy on
 * one vCPU, its empty cgroup sampled for another hour, costs $0.055
 * (0.025 + 4 x 0.0075), not $0.08625 (the idle hour's $0.03125 more). One
 * ended by the collector's end at 01:00 costs that from the start; one the
 * platform stops after its hours were rated (October is final) is re-rated,
 * and November's invoice takes the idle hour back: -$0.03125.
 */
static void a_lingering_cgroup_bills_the_issue_figure(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('linger', 'L', 'paid', 0)");
	busy_then_lingering(f, "lg-collector", "true");
	busy_then_lingering(f, "lg-platform", "NULL");
	wait_rollups(f);
	cJSON *sb = get(f, "/v1/sandboxes/lg-collector");
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T01:00:00Z");
	assert_string_equal(str(sb, "ended_by"), "collector");
	cJSON_Delete(sb);
	invoice_total(f, "linger", "0.14", "0.14125"); /* 0.055 + 0.08625 */
	cJSON_Delete(post(f, "/v1/sandboxes/lg-platform/stop",
	                  "{\"stopped_at\": \"2026-10-05T01:00:00Z\"}", 200));
	wait_rollups(f);
	assert_int_equal(
	        num(f, "SELECT sum(wall_us) FROM usage_hourly WHERE account_id = 'linger'"),
	        2 * INT64_C(3600000000));
	cJSON *nov = get(f, "/v1/accounts/linger/invoices/2026-11");
	assert_string_equal(str(nov, "total_exact"), "-0.03125");
	cJSON_Delete(nov);
}

/*
 * The collector saw a sandbox run and end before the platform registered it
 * (its cgroup path named no account): the registration comes back stopped at
 * that end, by the collector, and it does not count as running; its next
 * incarnation runs again. An end for an id nobody registered changes nothing
 * else.
 */
static void a_sandbox_registered_after_its_end_is_registered_stopped(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('late', 'L', 'paid')");
	sql(f,
	    "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, ended) VALUES "
	    "('late-1', 4, '2026-10-05T10:00:10Z', 'h', 1000000, NULL), "
	    "('late-1', 4, '2026-10-05T10:00:20Z', 'h', 2000000, true)");
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE id = 'late-1'"), 0);
	cJSON *sb = post(f, "/v1/sandboxes",
	                 "{\"id\": \"late-1\", \"account_id\": \"late\", \"vcpus\": 1, "
	                 "\"memory_gib\": 1, \"started_at\": \"2026-10-05T10:00:00Z\"}",
	                 201);
	assert_string_equal(str(sb, "status"), "stopped");
	assert_string_equal(str(sb, "stopped_at"), "2026-10-05T10:00:20Z");
	assert_string_equal(str(sb, "ended_by"), "collector");
	cJSON_Delete(sb);
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE account_id = 'late' "
	                        "AND stopped_at IS NULL"),
	                 0);
	/* billed to its end: 20 s */
	wait_rollups(f);
	assert_int_equal(
	        num(f, "SELECT sum(wall_us) FROM usage_hourly WHERE sandbox_id = 'late-1'"),
	        20000000);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('late-1', 5, '2026-10-05T11:00:00Z', 'h', 1000)");
	sb = get(f, "/v1/sandboxes/late-1");
	assert_string_equal(str(sb, "status"), "running");
	cJSON_Delete(sb);
}

/* Notices on meter_limits that came to the test's connection: their sandbox ids, by commas. */
static void notices(struct fx *f, char *ids, size_t len)
{
	ids[0] = '\0';
	PQconsumeInput(f->db.conn);
	for (PGnotify *n; (n = PQnotifies(f->db.conn)) != NULL; PQfreemem(n)) {
		cJSON *o = cJSON_Parse(n->extra);
		assert_non_null(o);
		assert_string_equal(str(o, "limit"), "concurrency_limit");
		size_t used = strlen(ids);
		snprintf(ids + used, len - used, "%s%s", used ? "," : "", str(o, "sandbox_id"));
		cJSON_Delete(o);
	}
}

/* A sample of sandbox id (inode inc) the collector found under account fill, s ago. */
static void found_sample(struct fx *f, const char *id, int inc, int s, bool ended)
{
	char q[512];
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, "
	         "account_id, cpu_limit_millicores, memory_limit_bytes, ended) VALUES "
	         "('%s', %d, now() - interval '%d seconds', 'h', 1000, 'fill', 1000, 1073741824, "
	         "%s)",
	         id, inc, s, ended ? "true" : "NULL");
	sql(f, q);
}

/*
 * An account of at most 2 fills up with sandboxes the collector finds, frees a
 * place when one ends and fills again when it comes back as a new
 * incarnation: each filling is announced once on meter_limits, as a
 * registration through the API is.
 */
static void an_account_that_fills_frees_and_fills_again_is_told_each_time(void **state)
{
	struct fx *f = *state;
	char ids[256];
	sql(f, "INSERT INTO accounts (id, name, plan, max_concurrent, collector_registration) "
	       "VALUES ('fill', 'F', 'paid', 2, true)");
	sql(f, "LISTEN meter_limits");
	found_sample(f, "f-1", 1, 60, false);
	notices(f, ids, sizeof ids);
	assert_string_equal(ids, ""); /* 1 of 2 */
	found_sample(f, "f-2", 1, 59, false);
	found_sample(f, "f-2", 1, 50, false);
	notices(f, ids, sizeof ids);
	assert_string_equal(ids, "f-2"); /* full, once */
	found_sample(f, "f-1", 1, 40, true);
	notices(f, ids, sizeof ids);
	assert_string_equal(ids, ""); /* a place freed */
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE account_id = 'fill' "
	                        "AND stopped_at IS NULL"),
	                 1);
	found_sample(f, "f-1", 2, 30, false);
	found_sample(f, "f-1", 2, 20, false);
	notices(f, ids, sizeof ids);
	assert_string_equal(ids, "f-1"); /* full again: the new incarnation */
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices WHERE account_id = 'fill' "
	                        "AND period IN ('f-2', 'f-1@2')"),
	                 2);
	sql(f, "UNLISTEN meter_limits");
}

/* ---- rule 6: intervals before any price plan ---- */

/*
 * A host whose clock was behind stamps a sandbox's first samples before the
 * default plan took effect (2026-09-25T00:00:00Z). Those intervals are counted
 * as unpriced and not billed; the interval that ends after the plan began and
 * every later one are billed as usual, and nothing is parked. By hand:
 *   23:59:00 (1 s), 23:59:30 (2 s): two unpriced intervals (0 s long, 30 s long)
 *   00:00:30 (62 s): 60 s busy, 60 CPU-s billed
 *   00:01:30 (62 s): 60 s idle, the floor 2.5 % x 1 vCPU x 60 s = 1.5 CPU-s
 *   billed 61.5 CPU-s, 120 sandbox-s, 120 GiB-s
 */
static void intervals_before_any_price_plan_are_counted_not_billed(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('early', 'Early', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	       "VALUES ('clock-behind', 'early', 1, 1)");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('clock-behind', 9, '2026-09-24T23:59:00Z', 'h', 1000000), "
	       "('clock-behind', 9, '2026-09-24T23:59:30Z', 'h', 2000000), "
	       "('clock-behind', 9, '2026-09-25T00:00:30Z', 'h', 62000000), "
	       "('clock-behind', 9, '2026-09-25T00:01:30Z', 'h', 62000000)");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue"), 0);
	cJSON *u = get(f, "/v1/accounts/early/usage?from=2026-09-01T00:00:00Z"
	                  "&to=2026-10-01T00:00:00Z");
	assert_string_equal(str(u, "cpu_seconds"), "60");
	assert_string_equal(str(u, "vcpu_hours"), "0.017083");
	assert_string_equal(str(u, "sandbox_hours"), "0.033333");
	assert_string_equal(str(u, "busy_hours"), "0.016667");
	assert_string_equal(str(u, "cost_exact"), "0.000677083");
	cJSON_Delete(u);
	struct http_res r;
	http_do(f->api.port, "GET", "/metrics", NULL, NULL, 0, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\nmeter_unpriced_intervals_total 2\n"));
	assert_non_null(strstr(r.body, "\nmeter_rollup_parked 0\n"));
	http_free(&r);
	/* Samples of the later hours come late, out of order: the unpriced ones stay two. */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('clock-behind', 9, '2026-09-25T00:02:30Z', 'h', 63000000)");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT sum(intervals) FROM usage_unpriced"), 2);
}

/* ---- rule 8: the trial exact to the interval ---- */

/* A sandbox of account, busy at all its vCPUs from start for 30 minutes, sampled every 10 s. */
static void busy_half_hour(struct fx *f, const char *account, const char *id, int vcpus, int gib,
                           const char *start)
{
	char q[1024];
	snprintf(
	        q, sizeof q,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	        "VALUES ('%s', '%s', %d, %d, '%s', '%s'::timestamptz + interval '30 minutes')",
	        id, account, vcpus, gib, start, start);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	         "SELECT '%s', 3, '%s'::timestamptz + k * interval '10 s', 'h', "
	         "  k * %d::bigint * 10000000 FROM generate_series(1, 180) k",
	         id, start, vcpus);
	sql(f, q);
}

/*
 * Half an hour of grant left; a 16 vCPU / 64 GiB sandbox runs busy 00:00-00:30,
 * then a 1 vCPU / 1 GiB one 00:30-01:00, in one hour. The grant covers the
 * intervals in the order of their ends: all of the large one's, none of the
 * small one's. By hand the invoice is the small one at list prices:
 *   0.5 h x 1 vCPU x $0.025 + 0.5 h x 1 GiB x $0.0075 = $0.01625
 * (sharing the hour's rest among both sandboxes said $0.228125). In the other
 * order the small one is covered and the large one paid for:
 *   0.5 h x (16 x $0.025 + 64 x $0.0075) = $0.44
 * And with 5 s more of grant, the small one's first interval (10 s) is the
 * crossing one, covered half: 5 s x (1 x $0.025 + 1 x $0.0075) / 3600 less.
 */
static void the_trials_last_hour_is_split_interval_by_interval(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('big-first', 'A', 'paid', 1800), ('small-first', 'B', 'paid', 1800), "
	       "('crossing', 'C', 'paid', 1805)");
	busy_half_hour(f, "big-first", "bf-big", 16, 64, "2026-10-05T00:00:00Z");
	busy_half_hour(f, "big-first", "bf-small", 1, 1, "2026-10-05T00:30:00Z");
	busy_half_hour(f, "small-first", "sf-small", 1, 1, "2026-10-05T00:00:00Z");
	busy_half_hour(f, "small-first", "sf-big", 16, 64, "2026-10-05T00:30:00Z");
	busy_half_hour(f, "crossing", "cr-big", 16, 64, "2026-10-05T00:00:00Z");
	busy_half_hour(f, "crossing", "cr-small", 1, 1, "2026-10-05T00:30:00Z");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM trial_crossing WHERE exact"), 3);
	invoice_total(f, "big-first", "0.02", "0.01625");
	invoice_total(f, "small-first", "0.44", "0.44");
	/* 0.01625 - 5 x 0.0325 / 3600 = 0.01625 - 0.0000451388(8) */
	invoice_total(f, "crossing", "0.02", "0.016204861");
	cJSON *t = get(f, "/v1/accounts/crossing/trial");
	assert_string_equal(str(t, "used_hours"), "0.501389");
	assert_string_equal(str(t, "remaining_hours"), "0");
	cJSON_Delete(t);

	/* A late sample of the small sandbox before the crossing moves it: the small
	 * one's second half (00:30-01:00) came with an earlier stamp of its first
	 * interval, split in two; nothing billed changes but the split. */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('cr-small', 3, '2026-10-05T00:30:04Z', 'h', 4000000)");
	wait_rollups(f);
	/* the grant's last 5 s: 4 s of the first part, 1 of the second (6 s long) */
	invoice_total(f, "crossing", "0.02", "0.016204861");
	/* A sandbox that ran 00:10:00-00:10:30 (1 vCPU, 1 GiB, busy) reports late: its
	 * intervals end before the crossing and take 30 s of the grant, so the crossing
	 * moves back into the large one's interval ending 00:29:40 (covered 5 s of 10).
	 * October is final, so November's invoice adjusts it, line by line:
	 *   CPU     +30 CPU-s x $0.025 / 3600                  = 0.000208333
	 *   memory  +30 GiB-s x $0.0075 / 3600                 = 0.000062500
	 *   trial   covered before: all of the large one and 5 s of the small one
	 *           (28805 CPU-s, 115205 GiB-s); now 1770 + 5 s of the large one and
	 *           the late one (28430, 113630): the credit shrinks by
	 *           375 CPU-s x $0.025 / 3600 + 1575 GiB-s x $0.0075 / 3600
	 *           = 0.002604167 + 0.003281250                = 0.005885417
	 *   total                                                0.00615625 */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('cr-late', 'crossing', 1, 1, '2026-10-05T00:10:00Z', "
	       "'2026-10-05T00:10:30Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'cr-late', 3, '2026-10-05T00:10:00Z'::timestamptz + k * interval '10 s', "
	       "'h', k * 10000000 FROM generate_series(1, 3) k");
	wait_rollups(f);
	cJSON *nov = get(f, "/v1/accounts/crossing/invoices/2026-11");
	assert_string_equal(str(nov, "total_exact"), "0.00615625");
	cJSON_Delete(nov);
}

/*
 * The trial's crossing hour re-rated from samples is clipped at the end as the
 * whole history is (rule 3 with rule 8). 1 vCPU / 1 GiB from 00:00, stopped
 * by the platform at 00:55; samples 00:10 (600 CPU-s), 00:50 (600), 01:10
 * (1800): the interval 00:50-01:10 passes both the stop and the hour's end.
 * Its part to the stop, 300 s, keeps 300 of its 1,200 CPU-s; the other 900
 * are billed at 01:10 with no time. A grant of 3,100 s covers 00:00-00:10
 * (600 CPU-s), 00:10-00:50 (the floor, 60) and 100 s of 00:50-00:55 (100 of
 * its 300 CPU-s). By hand, in nano-dollars:
 *   CPU     (600 + 60 + 300 + 900) CPU-s x 0.025 / 3600 = 12916667
 *   memory  3300 GiB-s x 0.0075 / 3600                  =  6875000
 *   credit  760 CPU-s -> 5277778, 3100 GiB-s -> 6458333   = -11736111
 *   total                                                  8055556
 */
static void the_trials_crossing_hour_is_clipped_at_the_end_too(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('tc', 'T', 'paid', 3100)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('tc-1', 'tc', 1, 1, '2026-10-05T00:00:00Z', '2026-10-05T00:55:00Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('tc-1', 1, '2026-10-05T00:10:00Z', 'h', 600000000), "
	       "('tc-1', 1, '2026-10-05T00:50:00Z', 'h', 600000000), "
	       "('tc-1', 1, '2026-10-05T01:10:00Z', 'h', 1800000000)");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM trial_crossing WHERE account_id = 'tc' "
	                        "AND exact"),
	                 1);
	invoice_total(f, "tc", "0.01", "0.008055556");
}

/*
 * A late sample for an old month, inserted while the upkeep drops that
 * month's raw partition, is not lost: the drop locks the partition before it
 * checks for marks, so it waits for the insert, sees its mark and keeps the
 * partition. (Checked before locking, the insert committed between the check
 * and the DROP, and the DROP took it along.)
 */
static void a_sample_inserted_while_its_partition_is_dropped_is_kept(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api); /* no rollup worker: the two sessions below race alone */
	f->api.pid = 0;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('late', 'Late', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) "
	       "VALUES ('late-1', 'late', 1, 1, '2026-09-10T00:00:00Z')");
	sql(f, "CREATE TABLE IF NOT EXISTS samples_202609 PARTITION OF samples "
	       "FOR VALUES FROM ('2026-09-01T00:00:00Z') TO ('2026-10-01T00:00:00Z')");
	PGconn *a = PQconnectdb(f->db.url), *b = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(a), CONNECTION_OK);
	assert_int_equal(PQstatus(b), CONNECTION_OK);
	PQclear(PQexec(a, "BEGIN"));
	PGresult *r = PQexec(a, "INSERT INTO samples (sandbox_id, incarnation, ts, host, "
	                        "cpu_usage_us) VALUES ('late-1', 1, '2026-09-10T00:10:00Z', 'h', "
	                        "5000000)");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	/* the upkeep's drop, while the insert is in flight: it must wait */
	assert_int_equal(PQsendQuery(b, "SELECT meter_drop_sample_partitions('35 days')::text"), 1);
	usleep(300000);
	assert_int_equal(PQconsumeInput(b), 1);
	assert_int_equal(PQisBusy(b), 1);
	PQclear(PQexec(a, "COMMIT"));
	r = PQgetResult(b);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	char dropped[256];
	snprintf(dropped, sizeof dropped, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	while ((r = PQgetResult(b)) != NULL)
		PQclear(r);
	PQfinish(a);
	PQfinish(b);
	if (strstr(dropped, "samples_202609"))
		fail_msg("the partition was dropped with a sample that had just come: %s", dropped);
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'late-1'"), 1);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'late-1'"),
	                 1);
}

/*
 * A writer whose transaction inserted into samples, then reaches into a raw
 * partition that the upkeep is dropping, does not deadlock with the drop: the
 * drop takes samples before the partition, so it waits for the writer, sees
 * the writer's late sample and its mark, and keeps the partition. (Holding the
 * partition while its DROP waited for samples, the two waited for each other
 * and one was rolled back.)
 */
static void a_writer_reaching_into_a_partition_being_dropped_does_not_deadlock(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api); /* no rollup worker: the two sessions below race alone */
	f->api.pid = 0;
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('late', 'Late', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) "
	       "VALUES ('late-1', 'late', 1, 1, '2026-09-10T00:00:00Z')");
	sql(f, "CREATE TABLE IF NOT EXISTS samples_202609 PARTITION OF samples "
	       "FOR VALUES FROM ('2026-09-01T00:00:00Z') TO ('2026-10-01T00:00:00Z')");
	PGconn *a = PQconnectdb(f->db.url), *b = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(a), CONNECTION_OK);
	assert_int_equal(PQstatus(b), CONNECTION_OK);
	/* a writer's transaction: samples of today first */
	PQclear(PQexec(a, "BEGIN"));
	PGresult *r = PQexec(a, "INSERT INTO samples (sandbox_id, incarnation, ts, host, "
	                        "cpu_usage_us) VALUES ('late-1', 1, now(), 'h', 9000000)");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	/* the upkeep's drop of September (empty, nothing marked in it) */
	assert_int_equal(PQsendQuery(b, "SELECT meter_drop_sample_partitions('35 days')::text"), 1);
	usleep(300000);
	assert_int_equal(PQconsumeInput(b), 1);
	assert_int_equal(PQisBusy(b), 1);
	/* the same transaction then writes a late sample of September */
	r = PQexec(a, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	              "VALUES ('late-1', 1, '2026-09-10T00:10:00Z', 'h', 5000000)");
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("the writer's late sample failed: %s", PQerrorMessage(a));
	PQclear(r);
	r = PQexec(a, "COMMIT");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	r = PQgetResult(b);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("the drop failed: %s", PQerrorMessage(b));
	char dropped[256];
	snprintf(dropped, sizeof dropped, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	while ((r = PQgetResult(b)) != NULL)
		PQclear(r);
	PQfinish(a);
	PQfinish(b);
	if (strstr(dropped, "samples_202609"))
		fail_msg("the partition was dropped with a sample that had just come: %s", dropped);
	assert_int_equal(num(f, "SELECT count(*) FROM samples WHERE sandbox_id = 'late-1'"), 2);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'late-1' "
	                        "AND from_ts <= '2026-09-10T00:10:00Z'"),
	                 1);
}

/* ---- one figure: the month's money ---- */

static struct http_res patch(struct fx *f, const char *path, const char *body)
{
	struct http_res r;
	http_do(f->api.port, "PATCH", path, f->admin, body, strlen(body), &r);
	return r;
}

/* A time of this month at least minutes before now (RFC 3339), as the month's start at the
 * earliest: a sandbox from there lies in this month, its last samples perhaps a little ahead
 * of now (they are rated up to an hour ahead). */
static void this_month(struct fx *f, int minutes, char *out, size_t len)
{
	char q[512];
	snprintf(q, sizeof q,
	         "SELECT to_char(greatest(date_trunc('month', now() AT TIME ZONE 'UTC'), "
	         "date_trunc('second', now() AT TIME ZONE 'UTC') - interval '%d minutes'), "
	         "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
	         minutes);
	if (testdb_value(&f->db, q, out, len) == NULL)
		fail_msg("no time");
}

/* The month to date of account as the invoice, the account, the forecast and the quota check
 * give it: each must say want. */
static void month_to_date_everywhere(struct fx *f, const char *account, const char *want)
{
	char path[160], month[16];
	if (testdb_value(&f->db, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM')", month,
	                 sizeof month) == NULL)
		fail_msg("no month");
	snprintf(path, sizeof path, "/v1/accounts/%s/invoices/%s", account, month);
	cJSON *o = get(f, path);
	assert_string_equal(str(o, "total_exact"), want);
	cJSON_Delete(o);
	snprintf(path, sizeof path, "/v1/accounts/%s", account);
	o = get(f, path);
	assert_string_equal(str(o, "month_to_date_exact"), want);
	cJSON_Delete(o);
	snprintf(path, sizeof path, "/v1/accounts/%s/forecast?month=%s", account, month);
	o = get(f, path);
	assert_string_equal(str(o, "month_to_date_exact"), want);
	cJSON_Delete(o);
	char body[256];
	snprintf(body, sizeof body, "{\"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}",
	         account);
	o = post(f, "/v1/quota/check", body, 200);
	assert_string_equal(str(o, "month_to_date_exact"), want);
	cJSON_Delete(o);
}

/* A cap of exactly cap refuses the account's next sandbox everywhere: the quota check, the
 * registration, and what enforcing collectors read (account_limits). */
static void a_cap_of_refuses(struct fx *f, const char *account, const char *cap)
{
	char path[160], body[256];
	snprintf(path, sizeof path, "/v1/accounts/%s", account);
	snprintf(body, sizeof body, "{\"monthly_spend_cap\": \"%s\"}", cap);
	struct http_res r = patch(f, path, body);
	assert_int_equal(r.status, 200);
	http_free(&r);
	snprintf(body, sizeof body, "{\"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}",
	         account);
	cJSON *o = post(f, "/v1/quota/check", body, 200);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	assert_string_equal(str(o, "reason"), "spend_cap_reached");
	cJSON_Delete(o);
	snprintf(body, sizeof body,
	         "{\"id\": \"%s-next\", \"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}",
	         account, account);
	cJSON_Delete(post(f, "/v1/sandboxes", body, 409));
	char q[256];
	snprintf(
	        q, sizeof q,
	        "SELECT count(*) FROM account_limits WHERE account_id = '%s' AND spend_cap_reached",
	        account);
	assert_int_equal(num(f, q), 1);
}

/*
 * The quota check's month to date is the invoice's, to the nano-dollar. A paid
 * account with a 600 s grant, a 1 vCPU / 1 GiB sandbox for 20 minutes with
 * 576,000,086 µs of CPU in one interval; the grant covers half of it (rule 8).
 * Each line is priced once (rule 7), in nano-dollars:
 *   CPU     576,000,086 µs x 0.025 / 3600 s    =  4000001 (4000000.597)
 *   memory  1200 GiB-s x 0.0075 / 3600         =  2500000
 *   credit  288,000,043 µs -> 2000000 (.298), 600 GiB-s -> 1250000 = -3250000
 *   total                                         3250001
 * Pricing what the grant left (288,000,043 µs and 600 GiB-s) once says 3250000,
 * and a cap at the invoice's total admitted another sandbox.
 */
static void a_cap_at_the_invoices_total_refuses_the_next_sandbox(void **state)
{
	struct fx *f = *state;
	char t[32], q[1024];
	this_month(f, 25, t, sizeof t);
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('nano', 'N', 'paid', 600)");
	snprintf(
	        q, sizeof q,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	        "VALUES ('nano-1', 'nano', 1, 1, '%s', '%s'::timestamptz + interval '20 minutes')",
	        t, t);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	         "('nano-1', 1, '%s'::timestamptz + interval '20 minutes', 'h', 576000086)",
	         t);
	sql(f, q);
	wait_rollups(f);
	month_to_date_everywhere(f, "nano", "0.003250001");
	a_cap_of_refuses(f, "nano", "0.003250001");
}

/*
 * CPU measured after the end is billed as measured (rule 3) and counts in the
 * month to date like the rest. Grant 600 s; a 1 vCPU / 1 GiB sandbox stopped
 * at +10 min, sampled at +5 min (60 CPU-s) and +30 min (600): 0-5 and 5-10 min
 * (60 and 108 CPU-s) use the grant up; the 432 CPU-s after the stop come once
 * it has run out: 432 x $0.025 / 3600 = $0.003. The month's wall time (600 s)
 * is no more than the grant left, which once made the month to date $0.00.
 */
static void cpu_measured_after_the_stop_counts_in_the_month_to_date(void **state)
{
	struct fx *f = *state;
	char t[32], q[1024];
	this_month(f, 40, t, sizeof t);
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('after', 'A', 'paid', 600)");
	snprintf(
	        q, sizeof q,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	        "VALUES ('after-1', 'after', 1, 1, '%s', '%s'::timestamptz + interval '10 "
	        "minutes')",
	        t, t);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	         "('after-1', 1, '%s'::timestamptz + interval '5 minutes', 'h', 60000000), "
	         "('after-1', 1, '%s'::timestamptz + interval '30 minutes', 'h', 600000000)",
	         t, t);
	sql(f, q);
	wait_rollups(f);
	month_to_date_everywhere(f, "after", "0.003");
	a_cap_of_refuses(f, "after", "0.001");
}

/* ---- rule 6: the plan in force at an interval's end, whatever the order ---- */

/* POST /v1/price-plans effective minutes from now (the database's clock): its status. */
static int plan_at(struct fx *f, const char *name, int minutes)
{
	char q[256], when[32], body[512];
	snprintf(q, sizeof q,
	         "SELECT to_char(date_trunc('second', now() AT TIME ZONE 'UTC') + interval '%d "
	         "minutes', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
	         minutes);
	if (testdb_value(&f->db, q, when, sizeof when) == NULL)
		fail_msg("no time");
	snprintf(body, sizeof body,
	         "{\"name\": \"%s\", \"effective_from\": \"%s\", \"cpu_per_vcpu_hour\": \"0.1\", "
	         "\"memory_per_gib_hour\": \"0.01\"}",
	         name, when);
	struct http_res r;
	http_do(f->api.port, "POST", "/v1/price-plans", f->admin, body, strlen(body), &r);
	int st = r.status;
	if (st == 422 && (r.body == NULL || strstr(r.body, "an hour in the future") == NULL))
		fail_msg("a plan refused for another reason: %s", r.body ? r.body : "");
	http_free(&r);
	return st;
}

/*
 * Samples are rated up to an hour ahead of now, so a plan takes effect an
 * hour after it is published at the earliest: no interval rated before it was
 * known ends after it. A sample stamped 30 minutes ahead is rated under the
 * plan in force; a plan from 10 minutes ahead, which would have left that
 * interval on the old plan until a late sample re-rated its hour, is refused
 * and changes nothing, and a late sample changes no plan. A plan an hour and
 * a minute ahead is published; a sample stamped after it is not rated until
 * its time comes within the hour (then under the new plan, as the rollup reads
 * the plans in its own transaction). And a plan in force before samples
 * arrive prices them, late ones too.
 */
static void a_plan_never_changes_an_interval_already_rated(void **state)
{
	struct fx *f = *state;
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('ahead', 'A', 'paid', 0)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('ah-1', 'ahead', 1, 1, now() - interval '10 minutes')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ah-1', 1, now() + interval '30 minutes', 'h', 60000000)");
	wait_rollups(f);
	long plans = num(f, "SELECT count(*) FROM price_plans");
	const char *rated = "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'ah-1' AND "
	                    "price_plan_id = (SELECT id FROM price_plans WHERE name = 'default')";
	assert_int_equal(num(f, rated), 1);
	/* samples first, then the plan: refused, nothing stored */
	assert_int_equal(plan_at(f, "soon", 10), 422);
	assert_int_equal(plan_at(f, "sooner", 59), 422);
	assert_int_equal(num(f, "SELECT count(*) FROM price_plans"), plans);
	/* a late sample re-rates the hour: still the plan in force at each interval's end */
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ah-1', 1, now() + interval '20 minutes', 'h', 30000000)");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'ah-1' "
	                        "AND price_plan_id <> (SELECT id FROM price_plans WHERE name = "
	                        "'default')"),
	                 0);
	/* an hour and a minute ahead: published; a sample after it waits for its time */
	assert_int_equal(plan_at(f, "later", 61), 201);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ah-1', 1, now() + interval '2 hours', 'h', 90000000)");
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'ah-1' "
	                        "AND hour > now() + interval '1 hour'"),
	                 0);
	/* plans first, then samples: a plan in force before them prices them, whatever order
	 * they come in (a plan of the past, as an operator's SQL would put it) */
	sql(f, "INSERT INTO price_plans (name, effective_from, cpu_vcpu_hour, memory_gib_hour, "
	       "cpu_floor) VALUES ('earlier', '2026-10-05T00:00:00Z', 0.05, 0.01, 0.025)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('ah-2', 'ahead', 1, 1, '2026-10-04T23:50:00Z')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ah-2', 1, '2026-10-05T00:10:00Z', 'h', 600000000)");
	wait_rollups(f);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('ah-2', 1, '2026-10-04T23:55:00Z', 'h', 300000000)");
	wait_rollups(f);
	/* 23:50-23:55 under the default plan (5 min, 300 CPU-s), 23:55-00:10 under "earlier"
	 * (15 min, 300 CPU-s):
	 *   default  300 x 0.025 / 3600 + 300 GiB-s x 0.0075 / 3600 = 0.002708333
	 *   earlier  300 x 0.05 / 3600 + 900 GiB-s x 0.01 / 3600    = 0.006666667
	 * in all 0.009375 */
	cJSON *oct = get(f, "/v1/accounts/ahead/invoices/2026-10");
	assert_string_equal(str(oct, "total_exact"), "0.009375");
	cJSON_Delete(oct);
}

/* ---- exports by billing period ---- */

/* A 1 vCPU / 1 GiB sandbox of account, busy for the hour from start ($0.0325). */
static void busy_hour(struct fx *f, const char *account, const char *id, const char *start)
{
	char q[1024];
	snprintf(
	        q, sizeof q,
	        "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	        "VALUES ('%s', '%s', 1, 1, '%s', '%s'::timestamptz + interval '1 hour')",
	        id, account, start, start);
	sql(f, q);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	         "('%s', 1, '%s'::timestamptz + interval '1 hour', 'h', 3600000000)",
	         id, start);
	sql(f, q);
}

/* The FOCUS export of account's month (YYYY-MM), malloc'd. */
static char *focus(struct fx *f, const char *account, const char *month)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/accounts/%s/exports/%s?format=focus", account, month);
	struct http_res r;
	http_do(f->api.port, "GET", path, f->admin, NULL, 0, &r);
	if (r.status != 200 || r.body == NULL)
		fail_msg("GET %s: %d %s", path, r.status, r.body ? r.body : "");
	char *csv = strdup(r.body);
	http_free(&r);
	return csv;
}

/* The exact total of account's invoice of month. */
static int64_t invoice_nano(struct fx *f, const char *account, const char *month,
                            const char *status)
{
	char path[160];
	snprintf(path, sizeof path, "/v1/accounts/%s/invoices/%s", account, month);
	cJSON *o = get(f, path);
	int64_t v = 0;
	assert_string_equal(str(o, "status"), status);
	assert_true(csv_nano(str(o, "total_exact"), &v));
	cJSON_Delete(o);
	return v;
}

/* Months back from this one: us[k] the start of the month k months ago, name[k] its
 * YYYY-MM, and at(k, day) a time on that day of it (day 1 its first). */
struct months_back {
	int64_t us[4];
	char name[4][8];
};

static void months_back(struct months_back *m)
{
	m->us[0] = meter_month_start((int64_t)time(NULL) * 1000000);
	for (int k = 1; k < 4; k++)
		m->us[k] = meter_month_start(m->us[k - 1] - 1);
	for (int k = 0; k < 4; k++) {
		char t[METER_TIME_BUF];
		meter_time_format(m->us[k], t, sizeof t);
		snprintf(m->name[k], sizeof m->name[k], "%.7s", t);
	}
}

static const char *day_of(const struct months_back *m, int k, int day, char *buf, size_t len)
{
	meter_time_format(m->us[k] + (int64_t)(day - 1) * 86400000000, buf, len);
	return buf;
}

/* meter-api again with a grace of 0 (a month's invoice is final once it ends) and a paid
 * account id with no trial. */
static void grace_of_zero(struct fx *f, const char *account)
{
	char q[256];
	api_stop(&f->api);
	assert_true(api_start(&f->api, METER_API_BIN, f->db.api_url, "--invoice-grace=0s"));
	snprintf(q, sizeof q,
	         "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	         "('%s', 'A', 'paid', 0)",
	         account);
	sql(f, q);
}

/*
 * A month's FOCUS export adds up to its invoice, final or draft, and a final
 * month's export never changes. "Two months ago" and "last month" are final
 * (a grace of 0), each with an hour of usage ($0.0325), "this month" has none.
 * Usage of two months ago that arrives late ($0.065) is billed once, on this
 * month's draft, as an adjustment: its rows there have the old month as
 * ChargePeriod and this one as BillingPeriod. Last month's export still adds up
 * to its final invoice ($0.0325, once $0.0975 with the late usage in it), and
 * the old month's export is byte for byte what it was.
 */
static void a_months_export_is_its_invoice_and_a_final_ones_never_changes(void **state)
{
	struct fx *f = *state;
	struct months_back m;
	char t[METER_TIME_BUF];
	months_back(&m);
	const char *mon0 = m.name[0], *mon1 = m.name[1], *mon2 = m.name[2];
	grace_of_zero(f, "focus");
	busy_hour(f, "focus", "fc-old", day_of(&m, 2, 4, t, sizeof t));
	busy_hour(f, "focus", "fc-last", day_of(&m, 1, 4, t, sizeof t));
	wait_rollups(f);
	assert_int_equal(invoice_nano(f, "focus", mon2, "final"), 32500000);
	assert_int_equal(invoice_nano(f, "focus", mon1, "final"), 32500000);
	char *old = focus(f, "focus", mon2), *last = focus(f, "focus", mon1);
	int64_t sum;
	assert_int_equal(csv_focus_billed(old, NULL, &sum), 2);
	assert_int_equal(sum, 32500000);

	/* two hours of two months ago, late */
	busy_hour(f, "focus", "fc-late-a", day_of(&m, 2, 10, t, sizeof t));
	busy_hour(f, "focus", "fc-late-b", day_of(&m, 2, 10, t, sizeof t));
	wait_rollups(f);
	char *old2 = focus(f, "focus", mon2), *last2 = focus(f, "focus", mon1);
	assert_string_equal(old2, old); /* a final month's export never changes */
	assert_string_equal(last2, last);
	assert_true(csv_focus_billed(last2, NULL, &sum) >= 0);
	assert_int_equal(sum, invoice_nano(f, "focus", mon1, "final"));
	/* billed once: on this month's draft, charged in two months ago */
	assert_int_equal(invoice_nano(f, "focus", mon0, "draft"), 65000000);
	char *now_csv = focus(f, "focus", mon0);
	assert_int_equal(csv_focus_billed(now_csv, NULL, &sum), 2);
	assert_int_equal(sum, 65000000);
	char period[16];
	snprintf(period, sizeof period, "%s-01", mon2);
	assert_int_equal(csv_focus_billed(now_csv, period, &sum), 2);
	assert_int_equal(sum, 65000000);
	/* its rows' billing period is this month */
	char billing[64];
	snprintf(billing, sizeof billing, ",%s-01T00:00:00Z,", mon0);
	assert_non_null(strstr(now_csv, billing));
	free(old);
	free(last);
	free(old2);
	free(last2);
	free(now_csv);
}

/*
 * Usage of a final month that comes late is billed once, on the first invoice
 * after it that is not final, even one of a month with no usage of its own:
 * that month is made final for it in turn. "Three months ago" has an hour of
 * usage ($0.0325) and is final (a grace of 0); the two months after it none.
 * (Its 27th and 28th days: after the default plan took effect, on any day.)
 * An hour of it that comes late goes on two months ago's invoice, not on this
 * month's (whose month to date stays $0.00); account_ledger says that month
 * waits, the upkeep makes it final with that line alone (nobody asked for
 * it), and then nothing waits and no invoice shows it again.
 */
static void a_late_hour_is_billed_once_on_the_next_invoice_even_of_an_empty_month(void **state)
{
	struct fx *f = *state;
	struct months_back m;
	char t[METER_TIME_BUF], q[256];
	months_back(&m);
	const char *mon0 = m.name[0], *mon1 = m.name[1], *mon2 = m.name[2], *mon3 = m.name[3];
	grace_of_zero(f, "empty");
	busy_hour(f, "empty", "em-1", day_of(&m, 3, 27, t, sizeof t));
	wait_rollups(f);
	assert_int_equal(invoice_nano(f, "empty", mon3, "final"), 32500000);
	busy_hour(f, "empty", "em-late", day_of(&m, 3, 28, t, sizeof t));
	wait_rollups(f);
	/* on the first invoice after it not final, and there alone: not this month's */
	assert_int_equal(invoice_nano(f, "empty", mon0, "draft"), 0);
	month_to_date_everywhere(f, "empty", "0.00");
	snprintf(q, sizeof q,
	         "SELECT count(*) FROM account_ledger WHERE account_id = 'empty' AND "
	         "adjusting_month = '%s-01'",
	         mon2);
	assert_int_equal(num(f, q), 1);
	/* the upkeep makes that month final for it, with nothing asked */
	char err[512];
	assert_true(rollup_upkeep(f->db.conn, 0, 0, err, sizeof err));
	snprintf(q, sizeof q,
	         "SELECT count(*) FROM invoices WHERE account_id = 'empty' AND month = '%s-01' "
	         "AND total = 0.0325",
	         mon2);
	assert_int_equal(num(f, q), 1);
	assert_int_equal(invoice_nano(f, "empty", mon2, "final"), 32500000);
	assert_int_equal(invoice_nano(f, "empty", mon1, "final"), 0);
	assert_int_equal(invoice_nano(f, "empty", mon0, "draft"), 0);
	assert_int_equal(num(f,
	                     "SELECT count(*) FROM account_ledger WHERE account_id = 'empty' AND "
	                     "adjusting_month IS NULL"),
	                 1);
	char *csv = focus(f, "empty", mon2);
	int64_t sum;
	char period[16];
	snprintf(period, sizeof period, "%s-01", mon3);
	assert_int_equal(csv_focus_billed(csv, period, &sum), 2); /* its CPU and memory rows */
	assert_int_equal(sum, 32500000);
	free(csv);
}

/* ---- pricing in SQL is meter/'s ---- */

static uint64_t prng;

static int64_t below(int64_t n)
{
	uint64_t z = (prng += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return (int64_t)((z ^ (z >> 31)) % (uint64_t)n);
}

/*
 * SQL prices a sandbox's month for the pages that rank many sandboxes
 * (meter_part_nano: sandbox_month_cost, a range's costs); it must give what
 * meter_usage_cost gives, to the nano-dollar. 20,000 random parts: quantities
 * up to the largest sandbox's month (256 vCPUs and 1 TiB for 31 days), prices
 * up to the largest a plan takes, and the halves and zeros where rounding
 * could differ.
 */
static void pricing_in_sql_is_meter_s_to_the_nano_dollar(void **state)
{
	struct fx *f = *state;
	enum { N = 20000 };
	static char cpu[N * 24], mem[N * 24], pc[N * 16], pm[N * 16];
	static meter_money want[N];
	size_t a = 0, b = 0, c = 0, d = 0;
	prng = 38;
	int64_t month_us = INT64_C(31) * 24 * 3600 * 1000000;
	for (int i = 0; i < N; i++) {
		struct meter_plan p = {.cpu_vcpu_hour = below(METER_PRICE_MAX + 1),
		                       .memory_gib_hour = below(METER_PRICE_MAX + 1)};
		struct meter_usage u = {.cpu_billed_us = below(256 * month_us + 1),
		                        .mem_mgib_us =
		                                (meter_i128)below(1024001) * below(month_us + 1)};
		switch (i % 7) {
		case 0: /* exactly half a nano-dollar of CPU: rounds up */
			p.cpu_vcpu_hour = 1;
			u.cpu_billed_us = METER_US_PER_HOUR / 2 + METER_US_PER_HOUR * below(1000);
			break;
		case 1:
			u.cpu_billed_us = 0;
			u.mem_mgib_us = 0;
			break;
		case 2:
			p.cpu_vcpu_hour = p.memory_gib_hour = 0;
			break;
		}
		struct meter_cost cost;
		assert_int_equal(meter_usage_cost(&u, &p, &cost), METER_OK);
		want[i] = cost.total;
		char q1[METER_QTY_BUF], q2[METER_QTY_BUF];
		meter_qty_format(u.cpu_billed_us, 0, 0, q1, sizeof q1);
		meter_qty_format(u.mem_mgib_us, 0, 0, q2, sizeof q2);
		a += (size_t)snprintf(cpu + a, sizeof cpu - a, "%s%s", i ? "," : "{", q1);
		b += (size_t)snprintf(mem + b, sizeof mem - b, "%s%s", i ? "," : "{", q2);
		c += (size_t)snprintf(pc + c, sizeof pc - c, "%s%lld", i ? "," : "{",
		                      (long long)p.cpu_vcpu_hour);
		d += (size_t)snprintf(pm + d, sizeof pm - d, "%s%lld", i ? "," : "{",
		                      (long long)p.memory_gib_hour);
	}
	snprintf(cpu + a, sizeof cpu - a, "}");
	snprintf(mem + b, sizeof mem - b, "}");
	snprintf(pc + c, sizeof pc - c, "}");
	snprintf(pm + d, sizeof pm - d, "}");
	const char *params[] = {cpu, mem, pc, pm};
	PGresult *r = PQexecParams(f->db.conn,
	                           "SELECT meter_part_nano(a, b, c / 1e9, d / 1e9) FROM "
	                           "unnest($1::numeric[], $2::numeric[], $3::numeric[], "
	                           "$4::numeric[]) WITH ORDINALITY x(a, b, c, d, n) ORDER BY n",
	                           4, NULL, params, NULL, NULL, 0);
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	assert_int_equal(PQntuples(r), N);
	for (int i = 0; i < N; i++) {
		char w[32];
		snprintf(w, sizeof w, "%lld", (long long)want[i]);
		if (strcmp(PQgetvalue(r, i, 0), w) != 0)
			fail_msg("part %d: SQL %s, meter/ %s", i, PQgetvalue(r, i, 0), w);
	}
	PQclear(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(pricing_in_sql_is_meter_s_to_the_nano_dollar, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                a_late_hour_is_billed_once_on_the_next_invoice_even_of_an_empty_month,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_months_export_is_its_invoice_and_a_final_ones_never_changes, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_plan_never_changes_an_interval_already_rated,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_cap_at_the_invoices_total_refuses_the_next_sandbox, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                cpu_measured_after_the_stop_counts_in_the_month_to_date, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sample_inserted_while_its_partition_is_dropped_is_kept, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_writer_reaching_into_a_partition_being_dropped_does_not_deadlock, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                ten_sandboxes_of_256_vcpus_and_1_tib_busy_all_month_are_billed_in_full,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                ten_thousand_such_sandboxes_in_one_account_month_are_exact, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_poisoned_head_of_the_queue_holds_up_no_one, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sample_stamped_years_ahead_is_set_aside_and_the_rest_billed, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                intervals_before_any_price_plan_are_counted_not_billed, setup, teardown),
	        cmocka_unit_test_setup_teardown(the_same_batch_written_at_once_is_stored_once,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(spool_records_of_an_older_collector_are_written_too,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                the_earlier_end_wins_and_a_new_incarnation_runs_again, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                an_account_that_fills_frees_and_fills_again_is_told_each_time, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sandbox_registered_after_its_end_is_registered_stopped, setup, teardown),
	        cmocka_unit_test_setup_teardown(a_lingering_cgroup_bills_the_issue_figure, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(the_trials_crossing_hour_is_clipped_at_the_end_too,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(the_trials_last_hour_is_split_interval_by_interval,
	                                        setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
