/*
 * meter-api as a service, over real HTTP on loopback against a real
 * PostgreSQL: the public routes (rates, estimates, health, readiness,
 * metrics); the OpenAPI document names every served route; 269 malformed
 * requests from tests/data/bad_requests.txt get problems and change nothing;
 * no request waits without bound, and one address holds only so many
 * connections; slow routes never hold a request thread; what clients and
 * browsers see is hardened; HTTPS is served with Secure cookies;
 * PostgreSQL stopped and started under it; and the logs of the meter-api
 * processes a test program started go when it passes, stay when it fails.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api/routes.h"
#include "tests/support/apifx.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"

static void public_routes_give_the_published_figures(void **state)
{
	struct fx *f = *state;
	struct http_res r = call(f, "GET", "/v1/rates?vcpus=2&memory_gib=4", NULL, NULL);
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "busy_per_hour"), "0.08");
	assert_string_equal(str(o, "idle_per_hour"), "0.03125");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "POST", "/v1/estimates", NULL,
	         "{\"runs_per_month\": 300, \"minutes_per_run\": 6, \"vcpus\": 2, "
	         "\"memory_gib\": 4, \"avg_busy_vcpus\": 0.5}");
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_string_equal(str(o, "total"), "1.28");
	assert_string_equal(str(o, "total_exact"), "1.275");
	cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "lines"), 0);
	assert_string_equal(str(l0, "item"), "cpu");
	assert_string_equal(str(l0, "amount"), "0.38");
	assert_string_equal(str(l0, "amount_exact"), "0.375");
	cJSON_Delete(o);
	http_free(&r);
	/* decimal strings are taken too, exactly */
	r = call(f, "POST", "/v1/estimates", NULL,
	         "{\"runs_per_month\": \"300\", \"minutes_per_run\": \"6\", \"vcpus\": \"2\", "
	         "\"memory_gib\": \"4\", \"avg_busy_vcpus\": \"0.5\"}");
	o = http_json(&r);
	assert_string_equal(str(o, "total"), "1.28");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/healthz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	r = call(f, "GET", "/readyz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	/* a route listed late and a path of none are each counted under their own name */
	r = call(f, "POST", "/logout", NULL, NULL);
	http_free(&r);
	r = call(f, "GET", "/no/such/route", NULL, NULL);
	http_free(&r);
	/* ends the collector could not read exactly, as its write sends them: one
	 * estimated, two at the last reading (one of them twice: one end each) */
	assert_true(testdb_exec(
	        &f->db, "SELECT meter_samples_ingest(ARRAY[ROW(s.id, s.inc, now() - s.ago, "
	                "NULL, 'h', 5, NULL, NULL, NULL, NULL, NULL, true)::"
	                "meter_sample_row], ARRAY[s.how]) FROM (VALUES ('e-1', 1, interval '1 s', "
	                "'estimated'), "
	                "('l-1', 1, interval '2 s', 'last'), ('l-1', 2, interval '3 s', 'last'), "
	                "('l-1', 2, interval '4 s', 'last'), ('r-1', 1, interval '5 s', "
	                "'read')) s(id, inc, ago, how)"));
	r = call(f, "GET", "/metrics", NULL, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(
	        r.body, "meter_http_requests_total{route=\"GET /v1/rates\",status=\"200\"} 1"));
	assert_non_null(strstr(r.body, "meter_http_requests_total{route=\"POST /logout\",status="));
	assert_non_null(strstr(r.body, "{route=\"unmatched\",status=\"404\"} 1"));
	for (const char *p = r.body; *p; p++)
		if ((unsigned char)*p >= 0x7f || ((unsigned char)*p < 0x20 && *p != '\n'))
			fail_msg("/metrics has a byte 0x%02x at %td", (unsigned char)*p,
			         p - r.body);
	assert_non_null(strstr(r.body, "meter_sandbox_ends_inexact{cpu=\"estimated\"} 1\n"));
	assert_non_null(strstr(r.body, "meter_sandbox_ends_inexact{cpu=\"last\"} 2\n"));
	assert_non_null(strstr(r.body, "meter_rollup_lag_seconds"));
	assert_non_null(strstr(r.body, "meter_database_errors_total"));
	assert_non_null(strstr(r.body, "meter_http_request_duration_seconds_bucket"));
	http_free(&r);
}

static void the_openapi_document_describes_every_served_route(void **state)
{
	struct fx *f = *state;
	struct http_res r = call(f, "GET", "/v1/openapi.json", NULL, NULL);
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_non_null(o);
	assert_string_equal(str(o, "openapi"), "3.1.0");
	cJSON *paths = cJSON_GetObjectItemCaseSensitive(o, "paths");
	for (int i = 0; i < routes_count; i++) {
		char method[16];
		size_t k = 0;
		for (; routes[i].method[k] && k < sizeof method - 1; k++)
			method[k] = (char)(routes[i].method[k] - 'A' + 'a');
		method[k] = '\0';
		cJSON *p = cJSON_GetObjectItemCaseSensitive(paths, routes[i].pattern);
		if (p == NULL || cJSON_GetObjectItemCaseSensitive(p, method) == NULL)
			fail_msg("%s %s is served but not in the OpenAPI document",
			         routes[i].method, routes[i].pattern);
	}
	cJSON_Delete(o);
	http_free(&r);
}

/* Every table's content, to prove a request changed nothing. */
static void fingerprint(struct fx *f, char *out, size_t len)
{
	PGresult *r = PQexec(
	        f->db.conn,
	        "SELECT concat_ws(',', "
	        "(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM "
	        "accounts t), "
	        "(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM "
	        "sandboxes t), "
	        "(SELECT md5(coalesce(string_agg((t.id, t.key_hash, t.role, t.account_id, "
	        "t.revoked_at)::text, '|' ORDER BY t.id), '')) FROM api_keys t), "
	        "(SELECT count(*) FROM samples), (SELECT count(*) FROM usage_hourly), "
	        "(SELECT count(*) FROM rollup_queue), (SELECT count(*) FROM account_month))");
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("could not take the tables' fingerprint: %s", PQerrorMessage(f->db.conn));
	snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
}

static void malformed_requests_get_problems_and_change_nothing(void **state)
{
	struct fx *f = *state;
	seed(f);
	char before[512], after[512], path[512];
	fingerprint(f, before, sizeof before);
	snprintf(path, sizeof path, "%s/tests/data/bad_requests.txt", METER_SOURCE_DIR);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	static char text[1 << 20];
	size_t n = fread(text, 1, sizeof text - 1, fp);
	fclose(fp);
	text[n] = '\0';
	/* Every case of the file, counted apart from the loop that runs them. */
	int listed = 0;
	for (const char *line = text; line;
	     line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		listed += strncmp(line, "### ", 4) == 0;
	int cases = 0;
	for (char *p = strstr(text, "\n### "); p; cases++) {
		char method[16], rpath[512], k[16];
		int status;
		if (sscanf(p + 5, "%15s %511s %15s %d", method, rpath, k, &status) != 4)
			fail_msg("bad case line near \"%.40s\"", p + 1);
		char *body = strchr(p + 1, '\n') + 1;
		char *next = strstr(body - 1, "\n### ");
		size_t blen = next ? (size_t)(next - body) + 1 : strlen(body);
		if (blen > 0 && body[blen - 1] == '\n')
			blen--;
		const char *key =
		        strcmp(k, "admin") == 0     ? f->admin
		        : strcmp(k, "acct") == 0    ? f->acct
		        : strcmp(k, "other") == 0   ? f->other
		        : strcmp(k, "revoked") == 0 ? f->revoked
		        : strcmp(k, "bogus") == 0
		                ? "mk_"
		                  "1111111111111111111111111111111111111111111111111111111111111111"
		                : NULL;
		struct http_res r;
		http_do(f->api.port, method, rpath, key, blen ? body : NULL, blen, &r);
		if (r.status != status || strcmp(r.type, "application/problem+json") != 0)
			fail_msg("case %d: %s %s (%s) body %.*s: got %d %s, expected %d", cases + 1,
			         method, rpath, k, (int)blen, body, r.status, r.body, status);
		cJSON *o = http_json(&r);
		if (o == NULL || !cJSON_IsString(cJSON_GetObjectItem(o, "type")) ||
		    !cJSON_IsString(cJSON_GetObjectItem(o, "title")) ||
		    cJSON_GetObjectItem(o, "status")->valueint != status ||
		    strlen(cJSON_GetObjectItem(o, "detail")->valuestring) < 10)
			fail_msg("case %d: not a full problem: %s", cases + 1, r.body);
		cJSON_Delete(o);
		http_free(&r);
		p = next;
	}
	assert_int_equal(cases, listed);
	assert_int_equal(cases, 269);
	/* a body over the limit */
	char *big = malloc(70000);
	memset(big, ' ', 70000);
	big[0] = '{';
	big[69999] = '}';
	struct http_res r;
	http_do(f->api.port, "POST", "/v1/accounts", f->admin, big, 70000, &r);
	free(big);
	assert_int_equal(r.status, 413);
	http_free(&r);
	fingerprint(f, after, sizeof after);
	assert_string_equal(before, after);
	/* and the server is still there */
	r = call(f, "GET", "/healthz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/*
 * No request waits without bound. A quota check that finds what it reads
 * locked is answered 503 within its route's bound (1 s), as is a
 * registration that waits on its account's row (2 s); neither changes
 * anything, and both go through once the lock is gone. One address may hold
 * only so many connections (--max-connections-per-ip): one more is closed
 * unanswered, and a place freed serves again.
 */
static void requests_are_bounded(void **state)
{
	struct fx *f = *state;
	seed(f);
	const char *q = "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}";
	/* a connection opened first: a new one waits on the lock while it prepares (5 s) */
	struct http_res w = call(f, "POST", "/v1/quota/check", f->acct, q);
	assert_int_equal(w.status, 200);
	http_free(&w);
	sql(f, "BEGIN");
	sql(f, "LOCK TABLE sandboxes IN ACCESS EXCLUSIVE MODE");
	double t = mono_s();
	struct http_res r = call(f, "POST", "/v1/quota/check", f->acct, q);
	double took = mono_s() - t;
	assert_int_equal(r.status, 503);
	cJSON *o = http_json(&r);
	const char *type = str(o, "type");
	assert_true(strstr(type, "timeout") || strstr(type, "busy"));
	cJSON_Delete(o);
	http_free(&r);
	assert_true(took < 4.0);
	sql(f, "ROLLBACK");
	sql(f, "BEGIN");
	sql(f, "SELECT 1 FROM accounts WHERE id = 'acme' FOR UPDATE");
	t = mono_s();
	r = call(
	        f, "POST", "/v1/sandboxes", f->admin,
	        "{\"id\": \"sb-wait\", \"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	took = mono_s() - t;
	assert_int_equal(r.status, 503);
	http_free(&r);
	assert_true(took >= 1.5 && took < 5.0);
	sql(f, "ROLLBACK");
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE id = 'sb-wait'"), 0);
	r = call(f, "POST", "/v1/quota/check", f->acct, q);
	assert_int_equal(r.status, 200);
	http_free(&r);
	r = call(
	        f, "POST", "/v1/sandboxes", f->admin,
	        "{\"id\": \"sb-wait\", \"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	assert_int_equal(r.status, 201);
	http_free(&r);

	/* four connections from this address at most: of six opened at once, each asking
	 * with keep-alive (an answered one stays open), four are answered and two are closed
	 * unanswered, whichever the server took first; a place freed serves again */
	api_stop(&f->api);
	assert_true(api_start(&f->api, METER_API_BIN, f->db.api_url, "--max-connections-per-ip=4"));
	usleep(500000); /* the start's own /healthz connections are gone */
	int fds[6], answered = 0;
	const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	for (int i = 0; i < 6; i++) {
		fds[i] = tcp(f->api.port);
		assert_true(fds[i] >= 0);
		/* refused already and closed, the write may fail: that is fine */
		(void)!write(fds[i], req, strlen(req));
	}
	for (int i = 0; i < 6; i++) {
		char buf[256];
		struct timeval tv = {.tv_sec = 5};
		setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		ssize_t got = read(fds[i], buf, sizeof buf - 1);
		if (got > 0) {
			buf[got] = '\0';
			assert_non_null(strstr(buf, " 200 "));
			answered++;
		}
	}
	assert_int_equal(answered, 4);
	for (int i = 0; i < 6; i++)
		close(fds[i]);
	usleep(300000);
	r = call(f, "GET", "/healthz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
}

struct slow_call {
	struct fx *f;
	int status;
	atomic_bool done;
};

static void *invoice_call(void *arg)
{
	struct slow_call *g = arg;
	struct http_res r;
	http_do(g->f->api.port, "GET", "/v1/accounts/acme/invoices/2026-10", g->f->acct, NULL, 0,
	        &r);
	g->status = r.status;
	http_free(&r);
	atomic_store(&g->done, true);
	return NULL;
}

/*
 * Slow routes (pages, invoices, exports, the dashboard) run on the slow lane,
 * never on a request thread. With one request thread and a lane of two,
 * three invoice requests wait on their account's invoice lock (held here),
 * two on the lane and one queued for it; quota checks are answered all the
 * while, before any invoice is; once the lock is gone all three are answered.
 */
static void slow_requests_never_hold_a_request_thread(void **state)
{
	struct fx *f = *state;
	seed(f);
	api_stop(&f->api);
	setenv("METER_THREADS", "1", 1);
	setenv("METER_SLOW_THREADS", "2", 1);
	bool started = api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info");
	unsetenv("METER_THREADS");
	unsetenv("METER_SLOW_THREADS");
	assert_true(started);
	sql(f, "SELECT pg_advisory_lock(hashtext('meter.invoice:' || 'acme'))");
	enum { N = 3 };
	pthread_t t[N];
	struct slow_call g[N];
	for (int i = 0; i < N; i++) {
		g[i] = (struct slow_call){.f = f};
		assert_int_equal(pthread_create(&t[i], NULL, invoice_call, &g[i]), 0);
	}
	usleep(300000); /* the three are asked */
	const char *q = "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}";
	for (int i = 0; i < 20; i++) {
		struct http_res r = call(f, "POST", "/v1/quota/check", f->acct, q);
		assert_int_equal(r.status, 200);
		http_free(&r);
	}
	for (int i = 0; i < N; i++)
		assert_false(atomic_load(&g[i].done)); /* still waiting on the lock */
	sql(f, "SELECT pg_advisory_unlock(hashtext('meter.invoice:' || 'acme'))");
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(g[i].status, 200);
	}
}

/*
 * A route that holds its database connection long (an invoice waiting on its
 * lock here; an export read slowly in the field) never takes the connections
 * kept for quota checks and admissions (issue 39, finding 3). With 4
 * connections (1 kept) and a slow lane of 4, four invoice requests wait: three
 * hold the connections open to them, the fourth waits for one and gives up
 * (503); quota checks, registrations and stops are answered all the while.
 */
static void slow_routes_never_take_the_connections_kept_for_admissions(void **state)
{
	struct fx *f = *state;
	seed(f);
	api_stop(&f->api);
	setenv("METER_DB_POOL", "4", 1);
	setenv("METER_SLOW_THREADS", "4", 1);
	bool started = api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info");
	unsetenv("METER_DB_POOL");
	unsetenv("METER_SLOW_THREADS");
	assert_true(started);
	sql(f, "SELECT pg_advisory_lock(hashtext('meter.invoice:' || 'acme'))");
	enum { N = 4 };
	pthread_t t[N];
	struct slow_call g[N];
	for (int i = 0; i < N; i++) {
		g[i] = (struct slow_call){.f = f};
		assert_int_equal(pthread_create(&t[i], NULL, invoice_call, &g[i]), 0);
	}
	usleep(500000); /* the four are asked, three hold a connection */
	const char *q = "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}";
	for (int i = 0; i < 20; i++) {
		struct http_res r = call(f, "POST", "/v1/quota/check", f->acct, q);
		assert_int_equal(r.status, 200);
		http_free(&r);
	}
	struct http_res r = call(f, "POST", "/v1/sandboxes", f->admin,
	                         "{\"id\": \"sb-kept\", \"account_id\": \"other\", "
	                         "\"vcpus\": 1, \"memory_gib\": 1}");
	assert_int_equal(r.status, 201);
	http_free(&r);
	r = call(f, "POST", "/v1/sandboxes/sb-kept/stop", f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	sql(f, "SELECT pg_advisory_unlock(hashtext('meter.invoice:' || 'acme'))");
	int ok = 0, busy = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ok += g[i].status == 200;
		busy += g[i].status == 503;
	}
	assert_int_equal(ok + busy, N);
	assert_true(ok >= 3);
}

/* Sends request (whole, as text) to the API and reads the answer until it closes (5 s). */
static void raw(int port, const char *request, char *out, size_t len)
{
	int fd = tcp(port);
	assert_true(fd >= 0);
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
	size_t got = 0;
	ssize_t n;
	while (got + 1 < len && (n = read(fd, out + got, len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fd);
}

/*
 * The hardening of what clients and browsers see:
 * - a body announced over the limit gets 413 before "100 Continue";
 * - every answer carries the security headers;
 * - a form posted from another origin is refused (login, logout, links);
 * - a problem never carries the database's text (here a trigger's, naming SQL);
 * - /readyz shows a replica's connection error to admins only;
 * - --secure-cookies marks the session cookie Secure;
 * - a login link survives previews (GET twice) and is spent by its POST once;
 * - expired sessions and used links are purged.
 */
static void what_clients_see_is_hardened(void **state)
{
	struct fx *f = *state;
	seed(f);
	char buf[8192], req[512];
	snprintf(req, sizeof req,
	         "POST /v1/accounts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
	         "Content-Type: application/json\r\nContent-Length: 3000000\r\n"
	         "Expect: 100-continue\r\n\r\n",
	         f->admin);
	raw(f->api.port, req, buf, sizeof buf);
	if (strncmp(buf, "HTTP/1.1 413", 12) != 0)
		fail_msg("a 3 MB body announced: %.200s", buf);
	assert_null(strstr(buf, "100 Continue"));
	/* headers, on a page and on JSON */
	const char *paths[] = {"/login", "/v1/rates?vcpus=1&memory_gib=1"};
	for (int i = 0; i < 2; i++) {
		snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		         paths[i]);
		raw(f->api.port, req, buf, sizeof buf);
		assert_non_null(strstr(buf, "Content-Security-Policy: default-src 'none'"));
		assert_non_null(strstr(buf, "frame-ancestors 'none'"));
		assert_non_null(strstr(buf, "X-Content-Type-Options: nosniff"));
		assert_non_null(strstr(buf, "X-Frame-Options: DENY"));
		assert_non_null(strstr(buf, "Referrer-Policy: same-origin"));
	}
	/* forms from another origin */
	char form[96], origin[96], cookie[200];
	snprintf(form, sizeof form, "key=%s", f->acct);
	long sessions = num(f, "SELECT count(*) FROM sessions");
	struct http_res r = form_post(f, "/login", form, "Origin: http://evil.example");
	assert_int_equal(r.status, 403);
	http_free(&r);
	r = form_post(f, "/login", form, "Origin: null");
	assert_int_equal(r.status, 403);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions"), sessions);
	snprintf(origin, sizeof origin, "Origin: http://127.0.0.1:%d", f->api.port);
	/* a hook key opens no pages */
	char hook[KEY_LEN + 1], err[256], hookform[96];
	int64_t hook_id;
	if (!key_create(f->db.conn, "hook", NULL, hook, &hook_id, err, sizeof err))
		fail_msg("%s", err);
	snprintf(hookform, sizeof hookform, "key=%s", hook);
	r = form_post(f, "/login", hookform, origin);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions"), sessions);
	r = form_post(f, "/login", form, origin);
	assert_int_equal(r.status, 303);
	assert_null(strstr(r.cookie, "Secure"));
	cookie_of(&r, cookie, sizeof cookie);
	http_free(&r);
	char both[400];
	snprintf(both, sizeof both, "%s\r\nOrigin: http://evil.example", cookie);
	r = form_post(f, "/logout", NULL, both);
	assert_int_equal(r.status, 403);
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200); /* the session lives on */
	http_free(&r);
	/* the database's own words never reach a client */
	sql(f, "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
	       "RAISE EXCEPTION 'SELECT secret_column FROM hidden_table' USING ERRCODE = "
	       "TG_ARGV[0]; END $$");
	const char *codes[] = {"23514", "XX000"};
	for (int i = 0; i < 2; i++) {
		char q[200];
		snprintf(q, sizeof q,
		         "CREATE TRIGGER boom BEFORE INSERT ON accounts FOR EACH ROW EXECUTE "
		         "FUNCTION boom('%s')",
		         codes[i]);
		sql(f, q);
		r = call(f, "POST", "/v1/accounts", f->admin,
		         "{\"id\": \"leaky\", \"name\": \"Leaky\", \"plan\": \"paid\"}");
		assert_int_equal(r.status, i == 0 ? 422 : 503);
		if (strstr(r.body, "secret_column") || strstr(r.body, "hidden_table"))
			fail_msg("the database's text reached the client: %s", r.body);
		http_free(&r);
		sql(f, "DROP TRIGGER boom ON accounts");
	}
	/* a one-time link: previews (GET) leave it; its POST spends it, once */
	char url[256];
	login_link(f, "acme", url, sizeof url);
	const char *lpath = strstr(url, "/login/");
	for (int i = 0; i < 2; i++) {
		http_do_ex(f->api.port, "GET", lpath, NULL, NULL, 0, NULL, &r);
		assert_int_equal(r.status, 200);
		assert_non_null(strstr(r.body, "method=\"post\""));
		http_free(&r);
	}
	r = form_post(f, lpath, NULL, NULL);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/dashboard");
	http_free(&r);
	r = form_post(f, lpath, NULL, NULL);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);
	/* expired sessions and used links go at the upkeep (it runs as meter-api starts) */
	sql(f, "INSERT INTO sessions (token_hash, kind, role, expires_at) VALUES "
	       "(sha256('old'), 'session', 'admin', now() - interval '1 hour'), "
	       "(sha256('live'), 'session', 'admin', now() + interval '1 hour')");
	api_stop(&f->api);
	/* with a replica that cannot be reached, and Secure cookies */
	setenv("METER_READ_DATABASE_URL", "postgresql:///meter?host=/nonexistent-meter-dir", 1);
	bool up = api_start(&f->api, METER_API_BIN, f->db.api_url, "--secure-cookies");
	unsetenv("METER_READ_DATABASE_URL");
	assert_true(up);
	for (int i = 0; i < 100 && num(f, "SELECT count(*) FROM sessions WHERE expires_at < now() "
	                                  "OR used_at IS NOT NULL") > 0;
	     i++)
		usleep(50000);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions WHERE expires_at < now() OR used_at "
	                        "IS NOT NULL"),
	                 0);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions WHERE token_hash = sha256('live')"),
	                 1);
	r = call(f, "GET", "/readyz", NULL, NULL);
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "status"), "degraded");
	assert_null(cJSON_GetObjectItem(o, "read_database_detail"));
	assert_null(strstr(r.body, "nonexistent"));
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/readyz", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "read_database_detail"));
	http_free(&r);
	r = form_post(f, "/login", form, NULL);
	assert_int_equal(r.status, 303);
	assert_non_null(strstr(r.cookie, "; Secure"));
	http_free(&r);
}

/* What a shell command prints (its first 8 KiB). */
static void shell_out(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	pclose(p);
}

/*
 * meter-api serves HTTPS itself with --tls-cert and --tls-key (a certificate
 * made here with openssl): curl checks it against that certificate, the
 * session cookie is Secure without --secure-cookies, and plain HTTP on that
 * port gets no answer.
 */
static void https_is_served_with_secure_cookies(void **state)
{
	struct fx *f = *state;
	seed(f);
	char dir[64], cmd[1024], out[8192];
	snprintf(dir, sizeof dir, "/tmp/meter-tls-%d", (int)getpid());
	snprintf(cmd, sizeof cmd,
	         "rm -rf %s && mkdir -p %s && openssl req -x509 -newkey rsa:2048 -nodes -days 1 "
	         "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout %s/key.pem "
	         "-out %s/cert.pem 2>/dev/null && echo made",
	         dir, dir, dir, dir);
	shell_out(cmd, out, sizeof out);
	if (strstr(out, "made") == NULL)
		fail_msg("openssl could not make a certificate (scripts/deps.sh installs openssl)");
	api_stop(&f->api);
	int port = 20000 + (getpid() * 13) % 30000;
	pid_t pid = fork();
	if (pid == 0) {
		char listen[32], cert[96], key[96];
		snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
		snprintf(cert, sizeof cert, "%s/cert.pem", dir);
		snprintf(key, sizeof key, "%s/key.pem", dir);
		setenv("DATABASE_URL", f->db.url, 1);
		setenv("METER_TLS_CERT", cert, 1);
		setenv("METER_TLS_KEY", key, 1);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execl(METER_API_BIN, METER_API_BIN, "--listen", listen, "--no-rollup",
		      (char *)NULL);
		_exit(127);
	}
	char base[64];
	snprintf(base, sizeof base, "https://127.0.0.1:%d", port);
	bool up = false;
	for (int i = 0; i < 100 && !up; i++) {
		snprintf(cmd, sizeof cmd,
		         "curl -s -o /dev/null -w '%%{http_code}' --cacert %s/cert.pem %s/healthz",
		         dir, base);
		shell_out(cmd, out, sizeof out);
		up = strcmp(out, "200") == 0;
		if (!up)
			usleep(50000);
	}
	if (up) {
		snprintf(cmd, sizeof cmd,
		         "curl -s -i --cacert %s/cert.pem -H 'Origin: %s' --data 'key=%s' %s/login",
		         dir, base, f->acct, base);
		shell_out(cmd, out, sizeof out);
	}
	struct http_res r;
	http_do(port, "GET", "/healthz", NULL, NULL, 0, &r); /* plain HTTP: no answer */
	int plain = r.status;
	http_free(&r);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
	if (!up)
		fail_msg("meter-api did not answer over HTTPS");
	if (strncmp(out, "HTTP/1.1 303", 12) != 0 || strstr(out, "; Secure") == NULL)
		fail_msg("the login over HTTPS: %.400s", out);
	assert_true(plain != 200);
}

static void postgres_stopped_and_started_under_the_api(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api);
	assert_true(test_tmpdir(f->tmp, sizeof f->tmp, "apipg"));
	snprintf(f->pgdir, sizeof f->pgdir, "%s/pg", f->tmp);
	char url[256];
	assert_true(cluster_start_migrated(f->pgdir, METER_BIN, url, sizeof url));
	assert_true(api_start(&f->api, METER_API_BIN, url, "--log-level=error"));
	struct http_res r = call(f, "GET", "/readyz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_true(cluster_pg(f->pgdir, "stop --immediate"));
	for (int i = 0; i < 3; i++) {
		r = call(f, "GET", "/readyz", NULL, NULL);
		assert_int_equal(r.status, 503);
		assert_string_equal(r.type, "application/problem+json");
		http_free(&r);
		r = call(f, "GET", "/v1/rates?vcpus=2&memory_gib=4", NULL, NULL);
		assert_int_equal(r.status, 503);
		http_free(&r);
	}
	r = call(f, "GET", "/healthz", NULL, NULL);
	assert_int_equal(r.status, 200); /* the process is up all along */
	http_free(&r);
	assert_true(cluster_pg(f->pgdir, "start"));
	int status = 0;
	for (int i = 0; i < 100 && status != 200; i++) {
		r = call(f, "GET", "/v1/rates?vcpus=2&memory_gib=4", NULL, NULL);
		status = r.status;
		http_free(&r);
		if (status != 200)
			usleep(100000);
	}
	assert_int_equal(status, 200);
	r = call(f, "GET", "/readyz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_int_equal(api_stop(&f->api), 0);
}

/*
 * The logs of the meter-api processes a test program started
 * (tests/support/http.h): none left in /tmp when the program passes, also of
 * one it killed; kept, and named on its stderr, when it fails. A child
 * process stands for the program: it starts two, kills one, stops the other
 * and exits 0, then 1, as a cmocka main returns its failures.
 */
static void a_test_program_s_api_logs_go_after_a_pass_and_stay_after_a_failure(void **state)
{
	struct fx *f = *state;
	for (int failed = 0; failed < 2; failed++) {
		char errpath[] = "/tmp/meter-apilogs-XXXXXX", pattern[64], said[4096];
		int fd = mkstemp(errpath);
		assert_true(fd >= 0);
		fflush(NULL);
		pid_t kid = fork();
		assert_true(kid >= 0);
		if (kid == 0) {
			dup2(fd, 2);
			unsetenv("METER_TEST_KEEP_LOGS");
			struct api_proc a = {0}, b = {0};
			if (!api_start(&a, METER_API_BIN, f->db.api_url, "--no-rollup") ||
			    !api_start(&b, METER_API_BIN, f->db.api_url, "--no-rollup"))
				_exit(3);
			kill(b.pid, SIGKILL); /* killed by the test, never through api_stop */
			waitpid(b.pid, NULL, 0);
			api_stop(&a);
			exit(failed);
		}
		int st = 0;
		waitpid(kid, &st, 0);
		ssize_t n = pread(fd, said, sizeof said - 1, 0);
		said[n > 0 ? n : 0] = '\0';
		close(fd);
		unlink(errpath);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != failed)
			fail_msg("the program's stand-in: status %d, stderr \"%s\"", st, said);
		glob_t g = {0};
		snprintf(pattern, sizeof pattern, "/tmp/meter-api-%d-*.log", (int)kid);
		int found = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
		bool named = true;
		for (int i = 0; i < found; i++) {
			char line[160];
			snprintf(line, sizeof line, "meter-api log kept: %s\n", g.gl_pathv[i]);
			named = named && strstr(said, line) != NULL;
			unlink(g.gl_pathv[i]);
		}
		globfree(&g);
		if (found != (failed ? 2 : 0) || !named)
			fail_msg("a program that %s left %d meter-api log(s) (want %d), its stderr "
			         "\"%s\"",
			         failed ? "failed" : "passed", found, failed ? 2 : 0, said);
	}
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(public_routes_give_the_published_figures,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(the_openapi_document_describes_every_served_route,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(malformed_requests_get_problems_and_change_nothing,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(requests_are_bounded, apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(slow_requests_never_hold_a_request_thread,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                slow_routes_never_take_the_connections_kept_for_admissions, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(what_clients_see_is_hardened, apifx_setup,
	                                        apifx_teardown),
	        cmocka_unit_test_setup_teardown(https_is_served_with_secure_cookies, apifx_setup,
	                                        apifx_teardown),
	        cmocka_unit_test_setup_teardown(postgres_stopped_and_started_under_the_api,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                a_test_program_s_api_logs_go_after_a_pass_and_stay_after_a_failure,
	                apifx_setup, apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
