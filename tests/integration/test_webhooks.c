/*
 * Webhooks end to end: endpoints managed over the API, events written by the
 * real paths (a registration that fills an account, a trial used up and a
 * spend cap reached announced by PATCH, invoices made final by reading
 * them), delivered by meter-api to a real receiver (tests/support/
 * webhook_receiver.py) that is down, then slow, then answers 500, then
 * recovers, with meter-api restarted and killed in between. The receiver
 * checks every signature with Python's hmac.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/keys.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"
#include "tests/support/run.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api;
	char admin[KEY_LEN + 1], acct[KEY_LEN + 1];
	char dir[64];
	pid_t recv;
	int recv_port;
};

/* Short timeouts and back-offs, so a whole schedule fits in a test. */
static const char *const api_args[] = {"--log-level=info", "--webhook-timeout=500ms",
                                       "--webhook-first-retry=50ms",
                                       /* the test's receiver listens on loopback */
                                       "--webhook-allow=127.0.0.1/32", NULL};
/* The same, with no address allowed beyond the public ones (the default). */
static const char *const api_args_strict[] = {"--log-level=info", "--webhook-timeout=500ms",
                                              "--webhook-first-retry=50ms", NULL};

static void path_in(const struct fx *f, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", f->dir, name);
}

static void write_file(const struct fx *f, const char *name, const char *text)
{
	char p[128], tmp[160];
	path_in(f, name, p, sizeof p);
	snprintf(tmp, sizeof tmp, "%s.tmp", p);
	FILE *o = fopen(tmp, "w");
	assert_non_null(o);
	fputs(text, o);
	fclose(o);
	assert_int_equal(rename(tmp, p), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !test_tmpdir(f->dir, sizeof f->dir, "webhooks") ||
	    !testdb_create_migrated(&f->db, "webhooks")) {
		free(f);
		return -1;
	}
	*state = f;
	char secrets[128];
	path_in(f, "secrets", secrets, sizeof secrets);
	mkdir(secrets, 0700);
	if (!testdb_exec(&f->db, "INSERT INTO accounts (id, name, plan, trial_grant_seconds, "
	                         "max_concurrent) VALUES ('acme', 'Acme', 'trial', 1, 1), "
	                         "('other', 'Other', 'paid', 180000, 100)") ||
	    !testdb_key(&f->db, NULL, f->admin) || !testdb_key(&f->db, "acme", f->acct))
		return -1;
	return api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args) ? 0 : -1;
}

static void receiver_stop(struct fx *f)
{
	if (f->recv > 0) {
		kill(f->recv, SIGTERM);
		waitpid(f->recv, NULL, 0);
	}
	f->recv = 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (f->api.pid)
		api_stop(&f->api);
	receiver_stop(f);
	testdb_drop(&f->db);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", f->dir);
	free(f);
	return 0;
}

/* Starts the receiver on port (0: a free one, remembered in f->recv_port). */
static void receiver_start(struct fx *f, int port)
{
	char portfile[128], log[128], secrets[128], script[128], ports[16];
	path_in(f, "port", portfile, sizeof portfile);
	path_in(f, "received.jsonl", log, sizeof log);
	path_in(f, "secrets", secrets, sizeof secrets);
	path_in(f, "script", script, sizeof script);
	snprintf(ports, sizeof ports, "%d", port);
	unlink(portfile);
	f->recv = fork();
	if (f->recv == 0) {
		execlp("python3", "python3", METER_SOURCE_DIR "/tests/support/webhook_receiver.py",
		       "--port", ports, "--port-file", portfile, "--log", log, "--secret-dir",
		       secrets, "--script-file", script, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		FILE *p = fopen(portfile, "r");
		if (p) {
			int got = fscanf(p, "%d", &f->recv_port);
			fclose(p);
			if (got == 1)
				return;
		}
		sleep_ms(25);
	}
	fail_msg("the webhook receiver did not start (is python3 installed?)");
}

static cJSON *call(struct fx *f, const char *method, const char *path, const char *key,
                   const char *body, int want)
{
	struct http_res r;
	http_do(f->api.port, method, path, key, body, body ? strlen(body) : 0, &r);
	if (r.status != want)
		fail_msg("%s %s: %d, not %d: %s", method, path, r.status, want, r.body);
	cJSON *j = http_json(&r);
	http_free(&r);
	return j;
}

/* Makes an endpoint for events (a JSON array) and account (NULL: all) at /hook/name. */
static long endpoint(struct fx *f, const char *name, const char *events, const char *account)
{
	char body[512], acct[80] = "";
	if (account)
		snprintf(acct, sizeof acct, ", \"account_id\": \"%s\"", account);
	snprintf(body, sizeof body, "{\"url\": \"http://127.0.0.1:%d/hook/%s\", \"events\": %s%s}",
	         f->recv_port, name, events, acct);
	cJSON *j = call(f, "POST", "/v1/webhooks", f->admin, body, 201);
	const cJSON *secret = cJSON_GetObjectItem(j, "secret");
	assert_true(cJSON_IsString(secret));
	assert_int_equal(strlen(secret->valuestring), 50);
	assert_memory_equal(secret->valuestring, "whsec_", 6);
	char file[80];
	snprintf(file, sizeof file, "secrets/%s", name);
	write_file(f, file, secret->valuestring);
	long id = (long)cJSON_GetObjectItem(j, "id")->valuedouble;
	cJSON_Delete(j);
	return id;
}

static cJSON *deliveries(struct fx *f, long id)
{
	char path[96];
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries?limit=500", id);
	cJSON *j = call(f, "GET", path, f->admin, NULL, 200);
	cJSON *d = cJSON_DetachItemFromObject(j, "deliveries");
	cJSON_Delete(j);
	assert_true(cJSON_IsArray(d));
	return d;
}

/* Waits until every delivery of endpoint id (want of them) passes ok(); false after 60 s. */
static bool wait_deliveries(struct fx *f, long id, int want, bool (*ok)(const cJSON *d))
{
	for (int i = 0; i < 600; i++) {
		cJSON *arr = deliveries(f, id);
		int n = 0, good = 0;
		const cJSON *d;
		cJSON_ArrayForEach(d, arr)
		{
			n++;
			good += ok(d);
		}
		cJSON_Delete(arr);
		if (n == want && good == want)
			return true;
		sleep_ms(100);
	}
	return false;
}

static bool was_refused(const cJSON *d)
{
	const cJSON *a;
	cJSON_ArrayForEach(a, cJSON_GetObjectItem(d, "attempts"))
	{
		if (cJSON_IsNull(cJSON_GetObjectItem(a, "status")) &&
		    cJSON_IsString(cJSON_GetObjectItem(a, "error")))
			return true;
	}
	return false;
}

static bool is_delivered(const cJSON *d)
{
	return strcmp(cJSON_GetObjectItem(d, "state")->valuestring, "delivered") == 0;
}

/*
 * What the receiver logged: the arrivals of id, its answers of 200 in time
 * (not after a wait meter-api gave up on), and whether all verified.
 */
static void received(struct fx *f, const char *id, int *arrived, int *answered, bool *verified)
{
	char p[128], line[8192];
	path_in(f, "received.jsonl", p, sizeof p);
	*arrived = *answered = 0;
	*verified = true;
	FILE *in = fopen(p, "r");
	while (in && fgets(line, sizeof line, in)) {
		cJSON *j = cJSON_Parse(line);
		assert_non_null(j);
		if (strcmp(cJSON_GetObjectItem(j, "id")->valuestring, id) == 0) {
			*verified = *verified && cJSON_IsTrue(cJSON_GetObjectItem(j, "verified"));
			if (strcmp(cJSON_GetObjectItem(j, "phase")->valuestring, "arrived") == 0)
				(*arrived)++;
			else if (strcmp(cJSON_GetObjectItem(j, "mode")->valuestring, "ok") == 0)
				(*answered)++;
		}
		cJSON_Delete(j);
	}
	if (in)
		fclose(in);
}

/*
 * The bodies the receiver got, added to the exchanges this test records
 * (METER_HTTP_RECORD): tests/openapi/validate.mjs checks each against the
 * document's webhooks.
 */
static void record_bodies(struct fx *f)
{
	const char *out = getenv("METER_HTTP_RECORD");
	char p[128], line[8192];
	if (out == NULL || *out == '\0')
		return;
	path_in(f, "received.jsonl", p, sizeof p);
	FILE *in = fopen(p, "r"), *rec = fopen(out, "a");
	assert_non_null(in);
	assert_non_null(rec);
	while (fgets(line, sizeof line, in)) {
		cJSON *j = cJSON_Parse(line);
		if (strcmp(cJSON_GetObjectItem(j, "phase")->valuestring, "arrived") == 0) {
			cJSON *body = cJSON_Parse(cJSON_GetObjectItem(j, "body")->valuestring);
			assert_non_null(body);
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "webhook",
			                        cJSON_GetObjectItem(body, "type")->valuestring);
			cJSON_AddStringToObject(o, "body",
			                        cJSON_GetObjectItem(j, "body")->valuestring);
			char *text = cJSON_PrintUnformatted(o);
			fprintf(rec, "%s\n", text);
			cJSON_free(text);
			cJSON_Delete(o);
			cJSON_Delete(body);
		}
		cJSON_Delete(j);
	}
	fclose(in);
	fclose(rec);
}

static void endpoints_are_managed_and_checked(void **state)
{
	struct fx *f = *state;
	f->recv_port = 9;
	struct {
		const char *body;
		int status;
	} bad[] = {
	        {"{\"events\": [\"invoice.finalized\"]}", 400},
	        {"{\"url\": 5, \"events\": [\"invoice.finalized\"]}", 400},
	        {"{\"url\": \"ftp://x/\", \"events\": [\"invoice.finalized\"]}", 422},
	        {"{\"url\": \"http://x/#a\", \"events\": [\"invoice.finalized\"]}", 422},
	        {"{\"url\": \"http://x/\"}", 400},
	        {"{\"url\": \"http://x/\", \"events\": []}", 400},
	        {"{\"url\": \"http://x/\", \"events\": \"invoice.finalized\"}", 400},
	        {"{\"url\": \"http://x/\", \"events\": [\"invoice.paid\"]}", 422},
	        {"{\"url\": \"http://x/\", \"events\": [1]}", 422},
	        {"{\"url\": \"http://x/\", \"events\": [\"invoice.finalized\", "
	         "\"invoice.finalized\"]}",
	         422},
	        {"{\"url\": \"http://x/\", \"events\": [\"invoice.finalized\"], \"secret\": \"s\"}",
	         400},
	        {"{\"url\": \"http://x/\", \"events\": [\"invoice.finalized\"], \"account_id\": "
	         "\"nobody\"}",
	         404},
	        {"{\"url\": \"http://x/\", \"events\": [\"invoice.finalized\"], \"account_id\": "
	         "\"bad id!\"}",
	         400},
	        {"[1]", 400},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cJSON_Delete(call(f, "POST", "/v1/webhooks", f->admin, bad[i].body, bad[i].status));
	assert_int_equal(atoi(testdb_value(&f->db, "SELECT count(*) FROM webhook_endpoints",
	                                   (char[32]){0}, 32)),
	                 0);
	/* admins only */
	cJSON_Delete(call(f, "GET", "/v1/webhooks", f->acct, NULL, 403));
	cJSON_Delete(call(f, "POST", "/v1/webhooks", f->acct,
	                  "{\"url\": \"http://x/\", \"events\": [\"invoice.finalized\"]}", 403));
	cJSON_Delete(call(f, "GET", "/v1/webhooks", NULL, NULL, 401));

	long a = endpoint(f, "a", "[\"limit.spend_cap_reached\", \"invoice.finalized\"]", NULL);
	long b = endpoint(f, "b", "[\"invoice.finalized\"]", "acme");
	cJSON *j = call(f, "GET", "/v1/webhooks", f->admin, NULL, 200);
	cJSON *list = cJSON_GetObjectItem(j, "webhooks");
	assert_int_equal(cJSON_GetArraySize(list), 2);
	const cJSON *e = cJSON_GetArrayItem(list, 0);
	assert_int_equal((long)cJSON_GetObjectItem(e, "id")->valuedouble, a);
	assert_null(cJSON_GetObjectItem(e, "secret"));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(e, "account_id")));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e, "events")), 2);
	assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "events"), 1)->valuestring,
	                    "invoice.finalized");
	e = cJSON_GetArrayItem(list, 1);
	assert_string_equal(cJSON_GetObjectItem(e, "account_id")->valuestring, "acme");
	cJSON_Delete(j);

	char path[96];
	snprintf(path, sizeof path, "/v1/webhooks/%ld", b);
	cJSON_Delete(call(f, "DELETE", path, f->admin, NULL, 200));
	cJSON_Delete(call(f, "DELETE", path, f->admin, NULL, 404));
	cJSON_Delete(call(f, "GET", "/v1/webhooks/999/deliveries", f->admin, NULL, 404));
	cJSON_Delete(call(f, "DELETE", "/v1/webhooks/x", f->admin, NULL, 404));
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries?limit=0", a);
	cJSON_Delete(call(f, "GET", path, f->admin, NULL, 422));
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries/msg_nope/redeliver", a);
	cJSON_Delete(call(f, "POST", path, f->admin, NULL, 404));
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries", a);
	j = call(f, "GET", path, f->admin, NULL, 200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "deliveries")), 0);
	cJSON_Delete(j);
}

/* The four events of acme through the real paths, and other's October invoice. */
static void make_events(struct fx *f)
{
	/* the registration that fills acme (max_concurrent 1) */
	cJSON_Delete(call(f, "POST", "/v1/sandboxes", f->admin,
	                  "{\"id\": \"sb-1\", \"account_id\": \"acme\", \"vcpus\": 1, "
	                  "\"memory_gib\": 1}",
	                  201));
	sleep_ms(1200);
	cJSON_Delete(call(f, "POST", "/v1/sandboxes/sb-1/stop", f->admin, NULL, 200));
	/* the rollup rates the 1.2 s it ran: more than acme's 1 s of trial */
	char v[32];
	for (int i = 0; i < 200; i++) {
		testdb_value(&f->db, "SELECT coalesce(sum(wall_us), 0) FROM account_month", v,
		             sizeof v);
		if (atol(v) >= 1000000)
			break;
		sleep_ms(50);
	}
	assert_true(atol(v) >= 1000000);
	/* a cap of 0: reached at once; the same PATCH finds the trial used up */
	cJSON_Delete(
	        call(f, "PATCH", "/v1/accounts/acme", f->admin, "{\"monthly_spend_cap\": 0}", 200));
	/* an invoice is made final only once the trial's crossing hour is found again */
	for (int i = 0; i < 200; i++) {
		testdb_value(&f->db, "SELECT count(*) FROM trial_queue", v, sizeof v);
		if (strcmp(v, "0") == 0)
			break;
		sleep_ms(50);
	}
	cJSON_Delete(call(f, "GET", "/v1/accounts/acme/invoices/2026-10", f->admin, NULL, 200));
	cJSON_Delete(call(f, "GET", "/v1/accounts/other/invoices/2026-10", f->admin, NULL, 200));
}

static void every_event_arrives_signed_through_failures_and_restarts(void **state)
{
	struct fx *f = *state;
	/* a port nobody listens on yet: the receiver is down */
	receiver_start(f, 0);
	int port = f->recv_port;
	receiver_stop(f);
	write_file(f, "script", "slow:2,500,ok");
	long all = endpoint(f, "all",
	                    "[\"limit.trial_exhausted\", \"limit.concurrency_reached\", "
	                    "\"limit.spend_cap_reached\", \"invoice.finalized\"]",
	                    NULL);
	long other = endpoint(f, "other", "[\"invoice.finalized\"]", "other");
	make_events(f);

	/* down: every delivery is refused at least once, and waits */
	assert_true(wait_deliveries(f, all, 5, was_refused));
	assert_true(wait_deliveries(f, other, 1, was_refused));
	/* meter-api stops with deliveries pending; the receiver comes up; meter-api again */
	assert_int_equal(api_stop(&f->api), 0);
	receiver_start(f, port);
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args));
	assert_true(wait_deliveries(f, all, 5, is_delivered));
	assert_true(wait_deliveries(f, other, 1, is_delivered));

	/* each went through the same history: refused, timed out, 500, 200 */
	const char *want[] = {"limit.concurrency_reached", "limit.trial_exhausted",
	                      "limit.spend_cap_reached", "invoice.finalized"};
	int seen[4] = {0};
	cJSON *arr = deliveries(f, all);
	const cJSON *d;
	cJSON_ArrayForEach(d, arr)
	{
		const char *id = cJSON_GetObjectItem(d, "id")->valuestring;
		const char *type = cJSON_GetObjectItem(d, "type")->valuestring;
		const cJSON *payload = cJSON_GetObjectItem(d, "payload");
		assert_string_equal(cJSON_GetObjectItem(payload, "type")->valuestring, type);
		const cJSON *data = cJSON_GetObjectItem(payload, "data");
		const char *acct = cJSON_GetObjectItem(data, "account_id")->valuestring;
		for (int k = 0; k < 4; k++)
			seen[k] += strcmp(type, want[k]) == 0 && strcmp(acct, "acme") == 0;
		if (strcmp(type, "invoice.finalized") == 0) {
			assert_string_equal(cJSON_GetObjectItem(data, "month")->valuestring,
			                    "2026-10");
			assert_true(cJSON_IsString(cJSON_GetObjectItem(data, "total")));
		}
		int refused = 0, timed_out = 0, failed500 = 0, ok = 0, n = 0;
		const cJSON *a;
		cJSON_ArrayForEach(a, cJSON_GetObjectItem(d, "attempts"))
		{
			const cJSON *st = cJSON_GetObjectItem(a, "status");
			const cJSON *err = cJSON_GetObjectItem(a, "error");
			n++;
			if (cJSON_IsNull(st) && strncmp(err->valuestring, "timeout: ", 9) == 0)
				timed_out++;
			else if (cJSON_IsNull(st) && strstr(err->valuestring, "stopped"))
				; /* abandoned when meter-api stopped: possible, not required */
			else if (cJSON_IsNull(st))
				refused++;
			else if (st->valueint == 500)
				failed500++;
			else if (st->valueint == 200 && cJSON_IsNull(err))
				ok++;
		}
		if (refused < 1 || timed_out != 1 || failed500 != 1 || ok != 1)
			fail_msg("delivery %s (%s): %d refused, %d timed out, %d 500, %d 200", id,
			         type, refused, timed_out, failed500, ok);
		int arrived, answered;
		bool verified;
		received(f, id, &arrived, &answered, &verified);
		assert_true(verified);
		assert_int_equal(arrived, 3);
		assert_int_equal(answered, 1);
	}
	for (int k = 0; k < 4; k++)
		if (seen[k] != 1)
			fail_msg("%s of acme delivered %d times, not once", want[k], seen[k]);
	/* the fifth: other's invoice, to the endpoint for all accounts too */
	cJSON_Delete(arr);

	/* the account's endpoint had other's invoice only */
	arr = deliveries(f, other);
	d = cJSON_GetArrayItem(arr, 0);
	assert_string_equal(cJSON_GetObjectItem(d, "account_id")->valuestring, "other");
	assert_string_equal(cJSON_GetObjectItem(d, "type")->valuestring, "invoice.finalized");
	char id[64], path[160];
	snprintf(id, sizeof id, "%s", cJSON_GetObjectItem(d, "id")->valuestring);
	cJSON_Delete(arr);

	/* redelivery: the same message again, signed anew */
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries/%s/redeliver", other, id);
	cJSON *j = call(f, "POST", path, f->admin, NULL, 202);
	assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, id);
	cJSON_Delete(j);
	assert_true(wait_deliveries(f, other, 1, is_delivered));
	int arrived = 0, answered = 0;
	bool verified = false;
	for (int i = 0; i < 100 && answered < 2; i++) {
		received(f, id, &arrived, &answered, &verified);
		sleep_ms(50);
	}
	assert_int_equal(answered, 2);
	assert_true(verified);

	/* a removed endpoint hears nothing more; the others do */
	snprintf(path, sizeof path, "/v1/webhooks/%ld", all);
	cJSON_Delete(call(f, "DELETE", path, f->admin, NULL, 200));
	cJSON_Delete(call(f, "GET", "/v1/accounts/other/invoices/2026-09", f->admin, NULL, 200));
	assert_true(wait_deliveries(f, other, 2, is_delivered));
	char v[32];
	record_bodies(f);
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM webhook_deliveries d "
	                                 "WHERE NOT EXISTS (SELECT 1 FROM "
	                                 "webhook_endpoints e WHERE e.id = d.endpoint_id)",
	                                 v, sizeof v),
	                    "0");
}

/* meter-api killed while the receiver holds a request: the delivery is sent again. */
/*
 * Webhooks reach only what they should (issue 39, finding 8): an endpoint on
 * a loopback, private, link-local or unique-local address, in any spelling,
 * or with credentials, is refused when made; one that reaches such an
 * address only after DNS, or was made while it was allowed, is blocked when
 * connected to; and a failure is recorded as a short class, never the
 * transport's words.
 */
static void webhooks_reach_only_what_they_should(void **state)
{
	struct fx *f = *state;
	const char *refused[][2] = {
	        {"http://10.1.2.3/", "private"},
	        {"http://0x7f000002:5432/", "loopback"},
	        {"http://127.2:5432/", "loopback"}, /* 127.0.0.2 */
	        {"http://2130706433/", "loopback"}, /* 127.0.0.1 is allowed here, but */
	        {"http://[::1]:5432/", "loopback"},
	        {"http://[::ffff:10.0.0.1]/", "private"},
	        {"http://169.254.169.254/latest/meta-data/", "link-local"},
	        {"http://[fd00::1]/", "unique-local"},
	        {"http://localhost:5432/", "loopback"},
	        {"http://db.localhost/", "loopback"},
	        {"http://user:pass@example.com/", "credentials"},
	};
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		char body[256];
		snprintf(body, sizeof body,
		         "{\"url\": \"%s\", \"events\": [\"invoice.finalized\"]}", refused[i][0]);
		cJSON *j = call(f, "POST", "/v1/webhooks", f->admin, body,
		                i == 3 ? 201 : 422); /* 2130706433 is 127.0.0.1, allowed */
		if (i != 3 &&
		    strstr(cJSON_GetObjectItem(j, "detail")->valuestring, refused[i][1]) == NULL)
			fail_msg("%s: %s", refused[i][0],
			         cJSON_GetObjectItem(j, "detail")->valuestring);
		cJSON_Delete(j);
	}
	char v[32];
	assert_string_equal(
	        testdb_value(&f->db, "SELECT count(*) FROM webhook_endpoints", v, sizeof v), "1");
	/* made while loopback was allowed; then meter-api runs with nothing allowed: each
	 * attempt is blocked at the connection, and the receiver hears nothing */
	receiver_start(f, 0);
	long id = endpoint(f, "blocked", "[\"limit.trial_exhausted\"]", NULL);
	assert_int_equal(api_stop(&f->api), 0);
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args_strict));
	make_events(f);
	assert_true(wait_deliveries(f, id, 1, was_refused));
	cJSON *d = deliveries(f, id);
	const cJSON *a =
	        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(d, 0), "attempts"), 0);
	assert_string_equal(cJSON_GetObjectItem(a, "error")->valuestring,
	                    "blocked: its address is loopback, which webhooks may not reach "
	                    "(--webhook-allow)");
	cJSON_Delete(d);
	char p[128];
	struct stat st;
	path_in(f, "received.jsonl", p, sizeof p);
	assert_true(stat(p, &st) != 0 || st.st_size == 0); /* nothing reached the receiver */
}

static void a_delivery_cut_off_by_a_crash_is_sent_again(void **state)
{
	struct fx *f = *state;
	write_file(f, "script", "slow:5,ok");
	receiver_start(f, 0);
	long id = endpoint(f, "crash", "[\"invoice.finalized\"]", NULL);
	cJSON_Delete(call(f, "GET", "/v1/accounts/other/invoices/2026-10", f->admin, NULL, 200));
	char msg[64] = "", log[128], line[8192];
	path_in(f, "received.jsonl", log, sizeof log);
	for (int i = 0; i < 400 && !msg[0]; i++) {
		FILE *in = fopen(log, "r");
		while (in && fgets(line, sizeof line, in))
			if (strstr(line, "\"arrived\"")) {
				cJSON *j = cJSON_Parse(line);
				snprintf(msg, sizeof msg, "%s",
				         cJSON_GetObjectItem(j, "id")->valuestring);
				cJSON_Delete(j);
			}
		if (in)
			fclose(in);
		if (!msg[0])
			sleep_ms(10);
	}
	assert_true(msg[0]);
	/* the request is in the receiver's hands: meter-api dies without a word */
	kill(f->api.pid, SIGKILL);
	waitpid(f->api.pid, NULL, 0);
	f->api.pid = 0;
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args));
	/* the lease (2 x 500 ms + 5 s) ends; the delivery is taken again */
	assert_true(wait_deliveries(f, id, 1, is_delivered));
	int arrived, answered;
	bool verified;
	received(f, msg, &arrived, &answered, &verified);
	assert_int_equal(arrived, 2);
	assert_true(answered >= 1);
	assert_true(verified);
	cJSON *arr = deliveries(f, id);
	const cJSON *attempts = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 0), "attempts");
	/* the first attempt died with the process: only the second is on record */
	assert_int_equal(cJSON_GetArraySize(attempts), 1);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(attempts, 0), "n")->valueint, 2);
	assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(attempts, 0), "status")->valueint,
	                 200);
	cJSON_Delete(arr);
}

/* A month past its grace is made final by meter-api's upkeep, with no one asking. */
static void a_month_past_its_grace_is_made_final_unasked(void **state)
{
	struct fx *f = *state;
	write_file(f, "script", "ok");
	receiver_start(f, 0);
	long id = endpoint(f, "unasked", "[\"invoice.finalized\"]", "other");
	/* an hour of other's in October (past its trial), written as a collector would */
	if (!testdb_exec(&f->db,
	                 "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'other'") ||
	    !testdb_exec(&f->db,
	                 "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, "
	                 "stopped_at) VALUES ('sb-oct', 'other', 2, 4, '2026-10-05T10:00:00Z', "
	                 "'2026-10-05T11:00:00Z')") ||
	    !testdb_exec(&f->db, "INSERT INTO samples (sandbox_id, incarnation, ts, host, "
	                         "cpu_usage_us) SELECT 'sb-oct', 1, '2026-10-05T10:00:00Z'::"
	                         "timestamptz + n * interval '1 minute', 'h', n * 30000000 "
	                         "FROM generate_series(0, 60) n"))
		fail_msg("could not write October's usage");
	char v[32];
	for (int i = 0; i < 200; i++) {
		testdb_value(&f->db, "SELECT count(*) FROM rollup_queue", v, sizeof v);
		if (strcmp(v, "0") == 0)
			break;
		sleep_ms(50);
	}
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM account_month WHERE account_id = "
	                                 "'other' AND month = '2026-10-01' AND wall_us > 0",
	                                 v, sizeof v),
	                    "1");
	assert_string_equal(testdb_value(&f->db, "SELECT count(*) FROM invoices", v, sizeof v),
	                    "0");
	/* the upkeep runs when meter-api starts (and every hour) */
	assert_int_equal(api_stop(&f->api), 0);
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args));
	assert_true(wait_deliveries(f, id, 1, is_delivered));
	cJSON *arr = deliveries(f, id);
	const cJSON *data = cJSON_GetObjectItem(
	        cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 0), "payload"), "data");
	assert_string_equal(cJSON_GetObjectItem(data, "month")->valuestring, "2026-10");
	/* the total announced is the final invoice's */
	struct http_res r;
	http_do(f->api.port, "GET", "/v1/accounts/other/invoices/2026-10", f->admin, NULL, 0, &r);
	cJSON *inv = http_json(&r);
	assert_string_equal(cJSON_GetObjectItem(inv, "status")->valuestring, "final");
	assert_string_equal(cJSON_GetObjectItem(inv, "total")->valuestring,
	                    cJSON_GetObjectItem(data, "total")->valuestring);
	assert_string_not_equal(cJSON_GetObjectItem(inv, "total")->valuestring, "0.00");
	cJSON_Delete(inv);
	http_free(&r);
	cJSON_Delete(arr);
	record_bodies(f);
}

/* The metric line of meter_webhook_deliveries for state, as text ("" when absent). */
static void metric(struct fx *f, const char *state, char *out, size_t len)
{
	struct http_res r;
	char name[96];
	http_do(f->api.port, "GET", "/metrics", NULL, NULL, 0, &r);
	snprintf(name, sizeof name, "meter_webhook_deliveries{state=\"%s\"} ", state);
	const char *at = r.body ? strstr(r.body, name) : NULL;
	snprintf(out, len, "%.*s", at ? (int)strcspn(at + strlen(name), "\n") : 0,
	         at ? at + strlen(name) : "");
	http_free(&r);
}

static bool is_failed(const cJSON *d)
{
	return strcmp(cJSON_GetObjectItem(d, "state")->valuestring, "failed") == 0;
}

/*
 * An event written by another process (the meter CLI) while meter-api is
 * down; its last attempt fails, so the delivery is failed, counted in
 * /metrics, and sent again by the redelivery verb.
 */
static void the_last_failure_fails_a_delivery_and_redelivery_revives_it(void **state)
{
	struct fx *f = *state;
	write_file(f, "script", "500,ok");
	receiver_start(f, 0);
	long id = endpoint(f, "last", "[\"invoice.finalized\"]", NULL);
	assert_int_equal(api_stop(&f->api), 0);
	const char *argv[] = {METER_BIN, "invoice", "--account", "other",
	                      "--month", "2026-10", NULL};
	struct run_result res;
	run_program(argv, f->db.url, &res);
	assert_int_equal(res.status, 0);
	char v[64];
	assert_string_equal(
	        testdb_value(&f->db, "SELECT count(*) FROM webhook_deliveries", v, sizeof v), "1");
	/* eleven attempts made already: the next is the last of the schedule */
	if (!testdb_exec(&f->db, "UPDATE webhook_deliveries SET step = 11, attempts = 11"))
		fail_msg("could not set the attempts");
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, api_args));
	assert_true(wait_deliveries(f, id, 1, is_failed));
	metric(f, "failed", v, sizeof v);
	assert_string_equal(v, "1");
	cJSON *j = call(f, "GET", "/v1/webhooks", f->admin, NULL, 200);
	const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "webhooks"), 0);
	assert_int_equal(cJSON_GetObjectItem(e, "failed")->valueint, 1);
	assert_int_equal(cJSON_GetObjectItem(e, "pending")->valueint, 0);
	cJSON_Delete(j);
	cJSON *arr = deliveries(f, id);
	const cJSON *d = cJSON_GetArrayItem(arr, 0);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(d, "next_attempt_at")));
	const cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "attempts"), 0);
	assert_int_equal(cJSON_GetObjectItem(a, "n")->valueint, 12);
	assert_int_equal(cJSON_GetObjectItem(a, "status")->valueint, 500);
	char path[160];
	snprintf(path, sizeof path, "/v1/webhooks/%ld/deliveries/%s/redeliver", id,
	         cJSON_GetObjectItem(d, "id")->valuestring);
	cJSON_Delete(arr);
	cJSON_Delete(call(f, "POST", path, f->admin, NULL, 202));
	assert_true(wait_deliveries(f, id, 1, is_delivered));
	metric(f, "failed", v, sizeof v);
	assert_string_equal(v, "0");
	metric(f, "pending", v, sizeof v);
	assert_string_equal(v, "0");
	record_bodies(f);
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(endpoints_are_managed_and_checked, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                every_event_arrives_signed_through_failures_and_restarts, setup, teardown),
	        cmocka_unit_test_setup_teardown(webhooks_reach_only_what_they_should, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(a_delivery_cut_off_by_a_crash_is_sent_again, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(a_month_past_its_grace_is_made_final_unasked, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                the_last_failure_fails_a_delivery_and_redelivery_revives_it, setup,
	                teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
