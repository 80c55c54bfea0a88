/*
 * meter-api over real HTTP on loopback, against a real PostgreSQL: every
 * route, keys and their limits, 259 malformed requests from a data file,
 * concurrent registrations, usage from the rollups against rating the raw
 * samples, trial and spend-cap refusals, and PostgreSQL stopped under it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "api/routes.h"
#include "common/db.h"
#include "common/keys.h"
#include "meter/allocate.h"
#include "meter/decimal.h"
#include "meter/invoice.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "tests/reference/ref.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"
#include "tests/support/run.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api, api2; /* api2: a second process sharing the rollup work */
	char admin[KEY_LEN + 1], acct[KEY_LEN + 1], other[KEY_LEN + 1], revoked[KEY_LEN + 1];
	char pgdir[96], tmp[64];
};

static void sql(struct fx *f, const char *q)
{
	if (!testdb_exec(&f->db, q))
		fail_msg("SQL failed");
}

static long num(struct fx *f, const char *q)
{
	PGresult *r = PQexec(f->db.conn, q);
	long v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	else
		fprintf(stderr, "%s: %s", q, PQerrorMessage(f->db.conn));
	PQclear(r);
	return v;
}

static void key(struct fx *f, const char *account, char *out)
{
	if (!testdb_key(&f->db, account, out))
		fail_msg("no key");
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !testdb_create_migrated(&f->db, "api")) {
		free(f);
		return -1;
	}
	*state = f;
	if (!api_start(&f->api, METER_API_BIN, f->db.url, "--log-level=info"))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (f->api.pid)
		api_stop(&f->api);
	if (f->api2.pid)
		api_stop(&f->api2);
	testdb_drop(&f->db);
	if (f->pgdir[0]) {
		cluster_destroy(f->pgdir);
		rmdir(f->tmp);
	}
	free(f);
	return 0;
}

/* Accounts acme (paid) and other (trial), their keys, and two sandboxes of acme. */
static void seed(struct fx *f)
{
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', 'paid'), "
	       "('other', 'Other', 'trial')");
	sql(f,
	    "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	    "VALUES ('sb-1', 'acme', 2, 4, now() - interval '1 hour', NULL), "
	    "('sb-stopped', 'acme', 2, 4, now() - interval '2 hours', now() - interval '1 hour')");
	key(f, NULL, f->admin);
	key(f, "acme", f->acct);
	key(f, "other", f->other);
	key(f, NULL, f->revoked);
	char q[256];
	snprintf(q, sizeof q,
	         "UPDATE api_keys SET revoked_at = now() WHERE key_hash = sha256('%s')",
	         f->revoked);
	sql(f, q);
}

static struct http_res call(struct fx *f, const char *method, const char *path, const char *k,
                            const char *body)
{
	struct http_res r;
	http_do(f->api.port, method, path, k, body, body ? strlen(body) : 0, &r);
	return r;
}

static const char *str(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsString(v))
		fail_msg("field %s is not a string", name);
	return v->valuestring;
}

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

static void accounts_sandboxes_and_the_quota_check(void **state)
{
	struct fx *f = *state;
	seed(f);
	struct http_res r =
	        call(f, "POST", "/v1/accounts", f->admin,
	             "{\"name\": \"Initech\", \"plan\": \"trial\", \"id\": \"initech\", "
	             "\"monthly_spend_cap\": \"25.5\"}");
	assert_int_equal(r.status, 201);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "id"), "initech");
	assert_string_equal(str(o, "plan"), "trial");
	assert_string_equal(str(o, "trial_grant_hours"), "50");
	assert_string_equal(str(o, "monthly_spend_cap"), "25.50");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "POST", "/v1/accounts", f->admin, "{\"name\": \"No id\", \"plan\": \"paid\"}");
	assert_int_equal(r.status, 201);
	o = http_json(&r);
	assert_memory_equal(str(o, "id"), "acct_", 5);
	cJSON_Delete(o);
	http_free(&r);

	r = call(f, "POST", "/v1/sandboxes", f->admin,
	         "{\"id\": \"sb-i1\", \"account_id\": \"initech\", \"vcpus\": 0.5, "
	         "\"memory_gib\": 1.25, \"started_at\": \"2026-11-01T00:00:00Z\"}");
	assert_int_equal(r.status, 201);
	o = http_json(&r);
	assert_string_equal(str(o, "vcpus"), "0.5");
	assert_string_equal(str(o, "memory_gib"), "1.25");
	assert_string_equal(str(o, "started_at"), "2026-11-01T00:00:00Z");
	assert_string_equal(str(o, "status"), "running");
	cJSON_Delete(o);
	http_free(&r);

	r = call(f, "POST", "/v1/quota/check", f->admin,
	         "{\"account_id\": \"initech\", \"vcpus\": 2, \"memory_gib\": 4}");
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	assert_string_equal(str(o, "reason"), "ok");
	assert_int_equal(cJSON_GetObjectItem(o, "running")->valueint, 1);
	assert_int_equal(cJSON_GetObjectItem(o, "max_concurrent")->valueint, 100);
	assert_int_equal(cJSON_GetObjectItem(o, "trial_seconds_remaining")->valueint, 180000);
	cJSON *ports = cJSON_GetObjectItem(o, "egress_ports");
	assert_int_equal(cJSON_GetArraySize(ports), 2);
	assert_int_equal(cJSON_GetArrayItem(ports, 0)->valueint, 80);
	assert_int_equal(cJSON_GetArrayItem(ports, 1)->valueint, 443);
	cJSON_Delete(o);
	http_free(&r);
	/* a paid account has no egress restriction */
	r = call(f, "POST", "/v1/quota/check", f->acct,
	         "{\"account_id\": \"acme\", \"vcpus\": 2, \"memory_gib\": 4}");
	o = http_json(&r);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "egress_ports")));
	cJSON_Delete(o);
	http_free(&r);

	r = call(f, "POST", "/v1/sandboxes/sb-i1/stop", f->admin,
	         "{\"stopped_at\": \"2026-11-01T01:00:00Z\"}");
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_string_equal(str(o, "status"), "stopped");
	assert_string_equal(str(o, "stopped_at"), "2026-11-01T01:00:00Z");
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/sandboxes/sb-i1", f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme", f->acct, NULL);
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_int_equal(cJSON_GetObjectItem(o, "running")->valueint, 1);
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme/trial", f->acct, NULL);
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_string_equal(str(o, "grant_hours"), "50");
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "exhausted")));
	cJSON_Delete(o);
	http_free(&r);
}

static void a_key_sees_its_own_account_only(void **state)
{
	struct fx *f = *state;
	seed(f);
	const char *theirs[] = {"/v1/accounts/other", "/v1/accounts/other/trial",
	                        ("/v1/accounts/other/usage?from=2026-10-01T00:00:00Z&"
	                         "to=2026-10-02T00:00:00Z"),
	                        "/v1/accounts/nobody"};
	for (size_t i = 0; i < 4; i++) {
		struct http_res r = call(f, "GET", theirs[i], f->acct, NULL);
		if (r.status != 404)
			fail_msg("GET %s with acme's key: %d", theirs[i], r.status);
		assert_string_equal(r.type, "application/problem+json");
		http_free(&r);
	}
	struct http_res r = call(f, "GET", "/v1/sandboxes/sb-1", f->other, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/v1/sandboxes/sb-1", f->acct, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	const char *keys[] = {
	        NULL, f->revoked,
	        "mk_0000000000000000000000000000000000000000000000000000000000000000"};
	for (size_t i = 0; i < 3; i++) {
		r = call(f, "GET", "/v1/accounts/acme/trial", keys[i], NULL);
		assert_int_equal(r.status, 401);
		http_free(&r);
	}
	r = call(f, "POST", "/v1/accounts", f->acct, "{\"name\": \"x\", \"plan\": \"paid\"}");
	assert_int_equal(r.status, 403);
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

struct reg {
	struct fx *f;
	int i, status;
	char body[300]; /* the start of an answer other than 201 and 409 */
};

static void *register_one(void *arg)
{
	struct reg *g = arg;
	char body[256];
	snprintf(body, sizeof body,
	         "{\"id\": \"race-%d\", \"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}",
	         g->i);
	struct http_res r;
	/* A 503 is the route's time bound (its transaction rolled back): a scheduler
	 * asks again, and so does this one. On Citus, 200 registrations serialised on
	 * one account row can pass the bound on a loaded machine. */
	for (int attempt = 0;; attempt++) {
		http_do(g->f->api.port, "POST", "/v1/sandboxes", g->f->admin, body, strlen(body),
		        &r);
		if (r.status != 503 || attempt == 20)
			break;
		http_free(&r);
		usleep(100 * 1000);
	}
	g->status = r.status;
	if (r.status != 201 && r.status != 409)
		snprintf(g->body, sizeof g->body, "%.*s", (int)(r.body ? r.len : 0),
		         r.body ? r.body : "");
	http_free(&r);
	return NULL;
}

static void concurrent_registrations_admit_exactly_the_limit(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE sandboxes SET stopped_at = now() WHERE stopped_at IS NULL");
	enum { N = 150 };
	/* On a Citus cluster on this machine's two cores the 150 queue behind one
	 * account row for tens of seconds: they wait for their answer (and the
	 * ctest entry gives meter-api the same --request-timeout, so it does not cut
	 * the connections its busy threads have not read yet). */
	http_wait_s = 150;
	pthread_t t[N];
	struct reg g[N];
	for (int i = 0; i < N; i++) {
		g[i] = (struct reg){.f = f, .i = i};
		assert_int_equal(pthread_create(&t[i], NULL, register_one, &g[i]), 0);
	}
	int ok = 0, refused = 0;
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ok += g[i].status == 201;
		refused += g[i].status == 409;
		if (g[i].status != 201 && g[i].status != 409)
			printf("race-%d: %d %s\n", i, g[i].status, g[i].body);
	}
	http_wait_s = 20;
	assert_int_equal(ok, 100);
	assert_int_equal(refused, N - 100);
	assert_int_equal(num(f, "SELECT count(*) FROM sandboxes WHERE account_id = 'acme' AND "
	                        "stopped_at IS NULL"),
	                 100);
	struct http_res r = call(f, "POST", "/v1/quota/check", f->acct,
	                         "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	cJSON *o = http_json(&r);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	assert_string_equal(str(o, "reason"), "concurrency_limit");
	cJSON_Delete(o);
	http_free(&r);
	/* A transaction that keys a row to the account (a rollup queueing its trial, a
	 * notice, the collector registering a sandbox it found) holds the account row
	 * KEY SHARE until it commits; registration's lock does not wait for it. */
	sql(f, "UPDATE accounts SET max_concurrent = 1000 WHERE id = 'acme'");
	PGresult *k = PQexec(f->db.conn, "BEGIN; INSERT INTO trial_queue (account_id) VALUES "
	                                 "('acme') ON CONFLICT DO NOTHING");
	assert_int_equal(PQresultStatus(k), PGRES_COMMAND_OK);
	PQclear(k);
	r = call(f, "POST", "/v1/sandboxes", f->admin,
	         "{\"id\": \"sb-keyed\", \"account_id\": \"acme\", \"vcpus\": 1, "
	         "\"memory_gib\": 1}");
	int status = r.status;
	http_free(&r);
	k = PQexec(f->db.conn, "ROLLBACK");
	PQclear(k);
	assert_int_equal(status, 201);
	/* The collector registers race-7000 from its cgroup (its write's transaction, as
	 * collector/writer.c makes it, still open) while the platform registers it: the
	 * platform's waits on the id, then adopts the collector's row (200), instead of
	 * "already exists". */
	k = PQexec(f->db.conn,
	           "BEGIN; SELECT meter_samples_ingest(ARRAY[ROW('race-7000', 1, now(), 'acme', "
	           "'h', 0, NULL, NULL, NULL, 1073741824, 1000, false)::meter_sample_row])");
	assert_int_equal(PQresultStatus(k), PGRES_TUPLES_OK);
	PQclear(k);
	struct reg late = {.f = f, .i = 7000};
	pthread_t lt;
	assert_int_equal(pthread_create(&lt, NULL, register_one, &late), 0);
	usleep(300000);
	k = PQexec(f->db.conn, "COMMIT");
	PQclear(k);
	pthread_join(lt, NULL);
	assert_int_equal(late.status, 200);
}

static void wait_rollups(struct fx *f)
{
	/* The trial queue too: a batch hands its account to it (and a change of
	 * grant queues it), and a month stays draft while it is pending. */
	for (int i = 0; i < 200; i++) {
		if (num(f, "SELECT (SELECT count(*) FROM rollup_queue WHERE waiting IS NULL) + "
		           "(SELECT count(*) FROM trial_queue)") == 0)
			return;
		usleep(50000);
	}
	fail_msg("the rollup worker did not catch up in 10 s");
}

/* ---- usage from rollups equals rating the raw samples ---- */

#define NSB    5
#define S10(x) ((int64_t)(x)*10000000) /* tens of seconds of CPU, in µs */
struct gen {
	struct meter_sample s[2000];
	size_t n;
};

static unsigned int seed_state = 12345;
static int rnd(int n)
{
	return (int)(rand_r(&seed_state) % (unsigned)n);
}

static void generate(struct gen *g, int64_t start)
{
	int64_t t = start + 5000000, cpu = 0, inc = 1000 + rnd(1000);
	g->n = 0;
	for (int k = 0; k < 400; k++) {
		t += 10000000 + rnd(3000000); /* about every 10 s, jittered */
		if (rnd(10) == 0)
			t += 300000000; /* a gap of 5 minutes */
		cpu += rnd(25000000);   /* up to 2.5 vCPUs worth: clamped */
		if (rnd(60) == 0)
			cpu = rnd(1000000); /* the counter restarted */
		if (rnd(150) == 0) {
			inc += 7; /* a new cgroup under the same id */
			cpu = rnd(2000000);
		}
		g->s[g->n++] = (struct meter_sample){.incarnation = inc, .t_us = t, .cpu_us = cpu};
	}
}

static void insert(struct fx *f, const char *sb, const struct meter_sample *s)
{
	char q[512], ts[METER_TIME_BUF];
	meter_time_format(s->t_us, ts, sizeof ts);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	         "VALUES ('%s', %lld, '%s', 'gen', %lld) ON CONFLICT DO NOTHING",
	         sb, (long long)s->incarnation, ts, (long long)s->cpu_us);
	sql(f, q);
}

/*
 * The reference's view (tests/reference/ref.c, written apart from meter/) of
 * sandboxes of acme: 2 vCPU, 4 GiB, the default plan, no trial grant. Each
 * call adds one sandbox and its samples, in any order; returns its index.
 */
static int ref_add(struct ref_input *in, const char *sb, int64_t started, int64_t stopped,
                   const struct meter_sample *s, size_t n)
{
	if (in->nplans == 0) {
		in->plans[in->nplans++] = (struct ref_plan){.id = 1,
		                                            .name = "default",
		                                            .cpu_nano = 25000000,
		                                            .mem_nano = 7500000,
		                                            .floor_ppm = 25000};
		meter_time_parse("2026-09-25T00:00:00Z", &in->plans[0].from_us);
		in->accounts[in->naccounts++] = (struct ref_account){.id = "acme"};
	}
	int k = in->nsandboxes++;
	in->sandboxes[k] =
	        (struct ref_sandbox){.account = 0,
	                             .vcpu_milli = 2000,
	                             .mem_milli = 4000,
	                             .started_us = started == METER_TIME_NONE ? REF_NONE : started,
	                             .stopped_us = stopped == METER_TIME_NONE ? REF_NONE : stopped};
	snprintf(in->sandboxes[k].id, REF_ID, "%s", sb);
	for (size_t i = 0; i < n; i++)
		in->samples[in->nsamples++] = (struct ref_sample){.sandbox = k,
		                                                  .incarnation = s[i].incarnation,
		                                                  .ts_us = s[i].t_us,
		                                                  .cpu_us = s[i].cpu_us};
	return k;
}

static void usage_from_two_processes_rollups_equals_rating_the_raw_samples(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* The last month by the clock, its 5th at 22:00: within the second meter-api's
	 * grace below on any day, so the samples land in its draft, not in adjustments. */
	int64_t now = (int64_t)time(NULL) * 1000000;
	int64_t month = meter_month_start(meter_month_start(now) - 1);
	int64_t start = month + INT64_C(4) * 86400000000 + INT64_C(22) * 3600000000;
	char usage_path[128], from[METER_TIME_BUF], to[METER_TIME_BUF];
	meter_time_format(month + INT64_C(4) * 86400000000, from, sizeof from);
	meter_time_format(month + INT64_C(7) * 86400000000, to, sizeof to);
	snprintf(usage_path, sizeof usage_path, "/v1/accounts/acme/usage?from=%s&to=%s", from, to);
	static struct gen g[NSB];
	for (int i = 0; i < NSB; i++) {
		char q[512], st[METER_TIME_BUF], sp[METER_TIME_BUF];
		generate(&g[i], start);
		meter_time_format(start, st, sizeof st);
		meter_time_format(g[i].s[g[i].n - 1].t_us + 7000000, sp, sizeof sp);
		snprintf(q, sizeof q,
		         "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, "
		         "stopped_at) VALUES ('gen-%d', 'acme', 2, 4, '%s', %s%s%s)",
		         i, st, i % 2 ? "'" : "", i % 2 ? sp : "NULL", i % 2 ? "'" : "");
		sql(f, q);
		snprintf(q, sizeof q,
		         "INSERT INTO rollup_queue VALUES ('gen-%d', '-infinity', now())", i);
		sql(f, q);
	}
	/* Two meter-api processes, two rollup workers taking marks from one queue. The
	 * second's grace is long (90 days): its upkeep, as it starts, would otherwise make
	 * the last month (past the default grace after its 3rd day) final before the
	 * samples below arrive, and they would go to this month's adjustments. */
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.url, "--invoice-grace=2160h"));
	/* Three waves: every other sample, then the rest late and shuffled, then duplicates. */
	for (int wave = 0; wave < 3; wave++) {
		for (int i = 0; i < NSB; i++) {
			char sb[16];
			snprintf(sb, sizeof sb, "gen-%d", i);
			size_t n = g[i].n;
			for (size_t k = 0; k < n; k++) {
				size_t j = wave == 1 ? n - 1 - k : k;
				if ((wave == 0 && j % 2 == 0) || (wave == 1 && j % 2 == 1) ||
				    (wave == 2 && rnd(4) == 0))
					insert(f, sb, &g[i].s[j]);
			}
		}
		wait_rollups(f);
	}
	/* Per sandbox and hour, the rollups hold what the reference gives from all the
	 * samples, in the order they were generated (it sorts them itself). */
	static struct ref_input in;
	memset(&in, 0, sizeof in);
	for (int i = 0; i < NSB; i++) {
		char sb[16];
		snprintf(sb, sizeof sb, "gen-%d", i);
		int64_t stopped = i % 2 ? g[i].s[g[i].n - 1].t_us + 7000000 : METER_TIME_NONE;
		int k = ref_add(&in, sb, start, stopped, g[i].s, g[i].n);
		struct ref_hour hours[64];
		int nh = ref_sandbox_hours(&in, k, hours, 64);
		assert_true(nh >= 2);
		ref_int measured = 0;
		for (int h = 0; h < nh; h++) {
			char q[512];
			snprintf(q, sizeof q,
			         "SELECT concat_ws(' ', cpu_measured_us, cpu_billed_us, busy_us, "
			         "idle_us, wall_us, memory_mgib_us) FROM usage_hourly WHERE "
			         "sandbox_id = '%s' AND hour = 'epoch'::timestamptz + %lld * "
			         "interval '1 microsecond'",
			         sb, (long long)hours[h].hour_us);
			PGresult *r = PQexec(f->db.conn, q);
			char want[256];
			const struct ref_hour *u = &hours[h];
			snprintf(want, sizeof want, "%lld %lld %lld %lld %lld %lld",
			         (long long)u->cpu_measured, (long long)u->cpu_billed,
			         (long long)u->busy, (long long)u->idle, (long long)u->wall,
			         (long long)u->mem);
			const char *got = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "(no row)";
			if (strcmp(got, want) != 0)
				fail_msg("%s hour %d: rollup %s, reference %s", sb, h, got, want);
			PQclear(r);
			measured += u->cpu_measured;
		}
		assert_true(measured > 0);
		char q[256];
		snprintf(q, sizeof q, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = '%s'",
		         sb);
		assert_int_equal(num(f, q), nh);
		/* and the API says the same */
		struct http_res r = call(f, "GET", usage_path, f->acct, NULL);
		assert_int_equal(r.status, 200);
		cJSON *o = http_json(&r), *x;
		char want[32];
		cJSON_ArrayForEach(x,
		                   cJSON_GetObjectItem(o, "sandboxes")) if (strcmp(str(x, "id"),
		                                                                   sb) == 0) break;
		assert_non_null(x);
		snprintf(want, sizeof want, "%lld.%06lld", (long long)(measured / 1000000),
		         (long long)(measured % 1000000));
		/* the API trims trailing zeros */
		char *z = want + strlen(want) - 1;
		while (*z == '0')
			*z-- = '\0';
		if (*z == '.')
			*z = '\0';
		assert_string_equal(str(x, "cpu_seconds"), want);
		assert_non_null(cJSON_GetObjectItem(o, "data_as_of"));
		cJSON_Delete(o);
		http_free(&r);
	}
	/* The month's invoice is the reference's (no trial here). */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	wait_rollups(f); /* the grant's change re-covers the trial (trial_queue) */
	struct ref_invoice want;
	assert_true(ref_invoice(&in, 0, month, &want));
	snprintf(usage_path, sizeof usage_path, "/v1/accounts/acme/invoices/%.7s", from);
	struct http_res ir = call(f, "GET", usage_path, f->acct, NULL);
	cJSON *io = http_json(&ir);
	int64_t got_total;
	assert_int_equal(meter_money_parse(str(io, "total_exact"), false, &got_total), METER_OK);
	assert_int_equal(got_total, want.total_nano);
	cJSON_Delete(io);
	http_free(&ir);
	/* account_month agrees with the hours it sums */
	assert_int_equal(
	        num(f, "SELECT count(*) FROM (SELECT account_id, date_trunc('month', hour) m, "
	               "price_plan_id, sum(wall_us) w, sum(cpu_billed_us) b FROM usage_hourly "
	               "GROUP BY 1, 2, 3) h FULL JOIN account_month a ON a.account_id = "
	               "h.account_id AND a.month = h.m::date AND a.price_plan_id = "
	               "h.price_plan_id WHERE h.w IS DISTINCT FROM a.wall_us OR h.b IS "
	               "DISTINCT FROM a.cpu_billed_us"),
	        0);
}

/* Inserts one sample of sandbox sb at "HH:MM:SS" on 2026-10-05, then lets the worker run. */
static void at(struct fx *f, const char *sb, int64_t inc, const char *hms, int64_t cpu_s)
{
	char q[512];
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	         "('%s', %lld, '2026-10-05T%sZ', 'h', %lld) ON CONFLICT DO NOTHING",
	         sb, (long long)inc, hms, (long long)cpu_s * 10000000);
	sql(f, q);
	wait_rollups(f);
}

/* The rollups of sb against what the reference gives from these samples at once. */
static void same_as_raw(struct fx *f, const char *sb, const char *started, const char *stopped,
                        const struct meter_sample *s, size_t n)
{
	static struct ref_input in;
	memset(&in, 0, sizeof in);
	int64_t st = METER_TIME_NONE, sp = METER_TIME_NONE;
	if (started)
		meter_time_parse(started, &st);
	if (stopped)
		meter_time_parse(stopped, &sp);
	int k = ref_add(&in, sb, st, sp, s, n);
	struct ref_hour hours[256];
	int nh = ref_sandbox_hours(&in, k, hours, 256);
	assert_true(nh >= 0);
	ref_int u[4] = {0};
	for (int h = 0; h < nh; h++) {
		u[0] += hours[h].cpu_measured;
		u[1] += hours[h].cpu_billed;
		u[2] += hours[h].wall;
		u[3] += hours[h].mem;
	}
	char q[512], want[160];
	snprintf(q, sizeof q,
	         "SELECT concat_ws(' ', sum(cpu_measured_us), sum(cpu_billed_us), sum(wall_us), "
	         "sum(memory_mgib_us)) FROM usage_hourly WHERE sandbox_id = '%s'",
	         sb);
	snprintf(want, sizeof want, "%lld %lld %lld %lld", (long long)u[0], (long long)u[1],
	         (long long)u[2], (long long)u[3]);
	PGresult *r = PQexec(f->db.conn, q);
	if (strcmp(PQgetvalue(r, 0, 0), want) != 0)
		fail_msg("%s: rollups %s, reference %s", sb, PQgetvalue(r, 0, 0), want);
	PQclear(r);
}

static int64_t hms(const char *t)
{
	char full[40];
	int64_t us;
	snprintf(full, sizeof full, "2026-10-05T%sZ", t);
	meter_time_parse(full, &us);
	return us;
}

static void rollups_match_the_raw_rating_around_stops_and_overlaps(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* A stop rated first, then a sample just after it, in the next hour. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('st', 'acme', 2, 4, '2026-10-05T04:00:00Z', '2026-10-05T04:55:00Z')");
	at(f, "st", 1, "04:50:00", 10);
	at(f, "st", 1, "05:00:10", 12);
	const struct meter_sample st[] = {{1, hms("04:50:00"), S10(10)},
	                                  {1, hms("05:00:10"), S10(12)}};
	same_as_raw(f, "st", "2026-10-05T04:00:00Z", "2026-10-05T04:55:00Z", st, 2);

	/* Incarnations that overlap in time, and samples arriving in a mixed order. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('ov', 'acme', 2, 4, '2026-10-05T04:40:00Z', '2026-10-05T06:00:00Z')");
	at(f, "ov", 7, "05:10:00", 3);
	at(f, "ov", 5, "04:50:00", 1);
	at(f, "ov", 7, "05:20:00", 4);
	at(f, "ov", 5, "05:40:00", 2);
	const struct meter_sample ov[] = {{5, hms("04:50:00"), S10(1)},
	                                  {5, hms("05:40:00"), S10(2)},
	                                  {7, hms("05:10:00"), S10(3)},
	                                  {7, hms("05:20:00"), S10(4)}};
	same_as_raw(f, "ov", "2026-10-05T04:40:00Z", "2026-10-05T06:00:00Z", ov, 4);

	/* A clock two minutes behind: samples stamped in the hour before the sandbox
	 * started count at started_at, also once the right clock's samples come after. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('sk', 'acme', 2, 4, '2026-10-05T06:00:30Z', '2026-10-05T06:10:00Z')");
	at(f, "sk", 1, "06:00:31", 1);
	at(f, "sk", 1, "05:58:32", 2);
	at(f, "sk", 1, "05:58:34", 3);
	at(f, "sk", 1, "06:00:40", 4);
	const struct meter_sample sk[] = {{1, hms("05:58:32"), S10(2)},
	                                  {1, hms("05:58:34"), S10(3)},
	                                  {1, hms("06:00:31"), S10(1)},
	                                  {1, hms("06:00:40"), S10(4)}};
	same_as_raw(f, "sk", "2026-10-05T06:00:30Z", "2026-10-05T06:10:00Z", sk, 4);

	/* A sandbox that lived before any price plan is rated as unpriced (rule 6), never
	 * parked, and holds up no other. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('old', 'acme', 2, 4, '2020-01-01T00:00:00Z', '2020-01-02T00:00:00Z')");
	sql(f, "INSERT INTO rollup_queue VALUES ('old', '-infinity', now() - interval '1 day')");
	at(f, "st", 1, "05:30:00", 20);
	assert_true(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'old'") == 0);
	assert_true(num(f, "SELECT count(*) FROM usage_unpriced WHERE sandbox_id = 'old' AND "
	                   "wall_us = 86400000000") == 1);
	assert_true(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'old'") == 0);
	const struct meter_sample st2[] = {{1, hms("04:50:00"), S10(10)},
	                                   {1, hms("05:00:10"), S10(12)},
	                                   {1, hms("05:30:00"), S10(20)}};
	same_as_raw(f, "st", "2026-10-05T04:00:00Z", "2026-10-05T04:55:00Z", st2, 3);
}

/*
 * A rating that fails for a reason that is not the sandbox's (here a cancel
 * while it waits for a lock, as a deadlock or an operator would) is tried
 * again, never parked: a parked mark waits for the next sample, and a stopped
 * sandbox has none, so its last usage would never be billed.
 */
static void a_cancelled_rating_is_tried_again_never_parked(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('cx', 'acme', 2, 4, '2026-10-05T07:00:00Z', '2026-10-05T07:30:00Z')");
	PGconn *b = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(b), CONNECTION_OK);
	PGresult *r = PQexec(b, "BEGIN; LOCK TABLE usage_hourly IN SHARE MODE");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('cx', 1, '2026-10-05T07:10:00Z', 'h', 30000000)");
	long pid = -1;
	for (int i = 0; i < 200 && pid < 0; i++) {
		pid = num(f, "SELECT coalesce(max(pid), -1) FROM pg_stat_activity WHERE datname = "
		             "current_database() AND wait_event_type = 'Lock' AND query LIKE "
		             "'%usage_hourly%'");
		if (pid < 0)
			usleep(50000);
	}
	if (pid < 0)
		fail_msg("the rollup worker never waited for the lock on usage_hourly");
	char q[128];
	snprintf(q, sizeof q, "SELECT pg_cancel_backend(%ld)::int", pid);
	assert_int_equal(num(f, q), 1);
	/* the cancel lands (the worker logs it and waits for its next pass) */
	for (int i = 0; i < 100; i++) {
		snprintf(q, sizeof q,
		         "SELECT count(*) FROM pg_stat_activity WHERE pid = %ld AND "
		         "wait_event_type = 'Lock'",
		         pid);
		if (num(f, q) == 0)
			break;
		usleep(20000);
	}
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS NOT NULL"), 0);
	r = PQexec(b, "COMMIT");
	PQclear(r);
	PQfinish(b);
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'cx'"), 0);
	const struct meter_sample cx[] = {{1, hms("07:10:00"), S10(3)}};
	same_as_raw(f, "cx", "2026-10-05T07:00:00Z", "2026-10-05T07:30:00Z", cx, 1);
}

/* Library order: incarnations by first appearance, then time. */
static int by_time(const void *a, const void *b)
{
	const struct meter_sample *x = a, *y = b;
	return x->t_us < y->t_us ? -1 : x->t_us > y->t_us;
}

static size_t library_order(const struct meter_sample *in, size_t n, struct meter_sample *out)
{
	struct meter_sample t[64];
	memcpy(t, in, n * sizeof *in);
	qsort(t, n, sizeof *t, by_time);
	size_t m = 0;
	for (size_t a = 0; a < n; a++) {
		bool seen = false;
		for (size_t b = 0; b < a; b++)
			seen |= t[b].incarnation == t[a].incarnation;
		for (size_t b = a; !seen && b < n; b++)
			if (t[b].incarnation == t[a].incarnation)
				out[m++] = t[b];
	}
	return m;
}

/*
 * A sandbox that lives for hours is rated from its checkpoint (its last read's
 * start), not its whole life, and the rollups still equal rating every raw
 * sample: in order, a counter that goes down, a new incarnation, a sample
 * late by hours (which the checkpoint cannot hold: it reads the history
 * again), a duplicate, and the stop.
 */
static void a_long_lived_sandbox_is_rated_from_its_checkpoint(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('lv', 'acme', 2, 4, '2026-10-05T00:00:00Z')");
	struct meter_sample all[64], sorted[64];
	size_t n = 0;
	int64_t cpu = 0;
	char q[256], ts[METER_TIME_BUF], want[METER_TIME_BUF + 8];
	for (int h = 0; h < 5; h++) {
		for (int k = 0; k < 6; k++) {
			char hms_[16];
			snprintf(hms_, sizeof hms_, "%02d:%02d:00", h, 5 + 10 * k);
			cpu += S10(1 + (h + k) % 3);
			all[n++] = (struct meter_sample){1, hms(hms_), cpu};
			insert(f, "lv", &all[n - 1]);
		}
		wait_rollups(f);
		size_t m = library_order(all, n, sorted);
		same_as_raw(f, "lv", "2026-10-05T00:00:00Z", NULL, sorted, m);
		if (h > 0) { /* rated from where the hour began: the checkpoint is there */
			snprintf(want, sizeof want, "2026-10-05T%02d:00:00Z", h);
			assert_int_equal(num(f, "SELECT count(*) FROM rollup_checkpoints WHERE "
			                        "sandbox_id = 'lv'"),
			                 1);
			PGresult *r =
			        PQexec(f->db.conn,
			               "SELECT to_char(upto AT TIME ZONE 'UTC', "
			               "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM rollup_checkpoints");
			assert_string_equal(PQgetvalue(r, 0, 0), want);
			PQclear(r);
		}
	}
	const struct {
		int64_t inc;
		const char *at;
		int64_t cpu;
	} steps[] = {
	        {1, "04:57:00", S10(2)},  /* below what the counter had: adds nothing */
	        {9, "05:10:00", S10(1)},  /* a new incarnation */
	        {9, "05:20:00", S10(4)},  /* and on */
	        {1, "01:33:00", S10(30)}, /* hours late: the checkpoint does not hold */
	        {9, "05:20:00", S10(4)},  /* a duplicate */
	        {9, "06:10:00", S10(6)},  /* the next hour, from a checkpoint again */
	};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		struct meter_sample x = {steps[i].inc, hms(steps[i].at), steps[i].cpu};
		insert(f, "lv", &x);
		bool dup = false;
		for (size_t k = 0; k < n; k++)
			dup |= all[k].incarnation == x.incarnation && all[k].t_us == x.t_us;
		if (!dup)
			all[n++] = x;
		wait_rollups(f);
		size_t m = library_order(all, n, sorted);
		same_as_raw(f, "lv", "2026-10-05T00:00:00Z", NULL, sorted, m);
	}
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_checkpoints WHERE sandbox_id = 'lv'"),
	                 2); /* both incarnations */
	/* the stop */
	meter_time_format(hms("06:30:00"), ts, sizeof ts);
	snprintf(q, sizeof q, "{\"stopped_at\": \"%s\"}", ts);
	struct http_res r = call(f, "POST", "/v1/sandboxes/lv/stop", f->admin, q);
	assert_int_equal(r.status, 200);
	http_free(&r);
	wait_rollups(f);
	size_t m = library_order(all, n, sorted);
	same_as_raw(f, "lv", "2026-10-05T00:00:00Z", "2026-10-05T06:30:00Z", sorted, m);
}

/* Splits one CSV line (RFC 4180, quotes) into at most max fields, in place. */
static int csv_split(char *line, char **fields, int max)
{
	int n = 0;
	char *p = line;
	while (n < max) {
		char *out = p;
		fields[n++] = p;
		if (*p == '"') {
			char *q = p + 1;
			for (;;) {
				if (*q == '"' && q[1] == '"') {
					*out++ = '"';
					q += 2;
				} else if (*q == '"') {
					q++;
					break;
				} else {
					*out++ = *q++;
				}
			}
			p = q;
		} else {
			while (*p && *p != ',')
				*out++ = *p++;
		}
		char sep = *p;
		*out = '\0';
		if (sep != ',')
			break;
		p++;
	}
	return n;
}

/* A FOCUS export: its columns, units, and BilledCost summing to total exactly. */
static void check_focus(const char *csv, const char *total, int usage_rows)
{
	char *copy = strdup(csv), *save = NULL;
	char *fields[32];
	meter_money sum = 0;
	int rows = 0, usage = 0;
	for (char *line = strtok_r(copy, "\r\n", &save); line;
	     line = strtok_r(NULL, "\r\n", &save)) {
		int n = csv_split(line, fields, 32);
		assert_int_equal(n, 19);
		if (rows++ == 0) {
			assert_string_equal(fields[16], "BilledCost");
			assert_string_equal(fields[17], "EffectiveCost");
			assert_string_equal(fields[3], "ChargePeriodStart");
			assert_string_equal(fields[7], "ResourceId");
			assert_string_equal(fields[9], "ServiceName");
			assert_string_equal(fields[11], "ConsumedQuantity");
			assert_string_equal(fields[12], "ConsumedUnit");
			assert_string_equal(fields[13], "PricingQuantity");
			assert_string_equal(fields[14], "PricingUnit");
			assert_string_equal(fields[15], "ListUnitPrice");
			continue;
		}
		meter_money m;
		assert_int_equal(meter_money_parse(fields[16], true, &m), METER_OK);
		assert_int_equal(meter_money_add(sum, m, &sum), METER_OK);
		assert_string_equal(fields[16], fields[17]);
		if (strcmp(fields[5], "Usage") == 0) {
			usage++;
			assert_true(strcmp(fields[12], "vCPU-Hours") == 0 ||
			            strcmp(fields[12], "GiB-Hours") == 0);
			assert_string_equal(fields[12], fields[14]);
			assert_string_equal(fields[8], "Sandbox");
		}
	}
	char got[METER_MONEY_BUF];
	meter_money_format_exact(sum, got, sizeof got);
	assert_string_equal(got, total);
	assert_int_equal(usage, usage_rows);
	free(copy);
}

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
	assert_true(api_start(&f->api, METER_API_BIN, f->db.url, grace));
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
	assert_true(api_start(&f->api, METER_API_BIN, f->db.url, "--log-level=info"));
}

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

/* Notifications on meter_limits that came to f->db.conn within ms, by limit name. */
static void drain_notices(struct fx *f, int ms, int *trial, int *cap, int *conc)
{
	for (int waited = 0; waited <= ms; waited += 50) {
		PQconsumeInput(f->db.conn);
		PGnotify *n;
		while ((n = PQnotifies(f->db.conn)) != NULL) {
			assert_string_equal(n->relname, "meter_limits");
			cJSON *o = cJSON_Parse(n->extra);
			assert_non_null(o);
			const char *lim = str(o, "limit");
			*trial += strcmp(lim, "trial_spent") == 0;
			*cap += strcmp(lim, "spend_cap_reached") == 0;
			*conc += strcmp(lim, "concurrency_limit") == 0;
			cJSON_Delete(o);
			PQfreemem(n);
		}
		usleep(50000);
	}
}

static void each_limit_crossed_is_announced_once(void **state)
{
	struct fx *f = *state;
	int trial = 0, cap = 0, conc = 0;
	seed(f);
	sql(f, "LISTEN meter_limits");
	/* other: a trial of 20 s, used up by a 40 s sandbox, then used more */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 20 WHERE id = 'other'");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('t-1', 'other', 2, 4, now() - interval '40 seconds')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('t-1', 1, now() - interval '10 seconds', 'h', 1000000)");
	wait_rollups(f);
	drain_notices(f, 300, &trial, &cap, &conc);
	assert_int_equal(trial, 1);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('t-1', 1, now() - interval '5 seconds', 'h', 2000000)");
	wait_rollups(f);
	drain_notices(f, 300, &trial, &cap, &conc);
	assert_int_equal(trial, 1);
	/* acme: a cap of a cent set by an admin, then a busy hour of 2 vCPUs */
	struct http_res r = call(f, "PATCH", "/v1/accounts/acme", f->admin,
	                         "{\"monthly_spend_cap\": \"0.01\", \"max_concurrent\": 3}");
	assert_int_equal(r.status, 200);
	cJSON *o = http_json(&r);
	assert_string_equal(str(o, "monthly_spend_cap"), "0.01");
	assert_int_equal(cJSON_GetObjectItem(o, "max_concurrent")->valueint, 3);
	cJSON_Delete(o);
	http_free(&r);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('sb-1', 1, now() - interval '2 seconds', 'h', 7200000000)");
	wait_rollups(f);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('sb-1', 1, now() - interval '1 second', 'h', 7300000000)");
	wait_rollups(f);
	drain_notices(f, 300, &trial, &cap, &conc);
	assert_int_equal(cap, 1);
	/* the cap taken away (null), acme runs 1 of 3: the registration that makes it 3
	 * announces it, once; the next is refused */
	r = call(f, "PATCH", "/v1/accounts/acme", f->admin, "{\"monthly_spend_cap\": null}");
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "monthly_spend_cap")));
	cJSON_Delete(o);
	http_free(&r);
	const int want[] = {201, 201, 409};
	for (int i = 0; i < 3; i++) {
		char body[160];
		snprintf(body, sizeof body,
		         "{\"id\": \"c-%d\", \"account_id\": \"acme\", \"vcpus\": 1, "
		         "\"memory_gib\": 1}",
		         i);
		r = call(f, "POST", "/v1/sandboxes", f->admin, body);
		assert_int_equal(r.status, want[i]);
		http_free(&r);
	}
	drain_notices(f, 300, &trial, &cap, &conc);
	assert_int_equal(trial, 1);
	assert_int_equal(cap, 1);
	assert_int_equal(conc, 1);
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices"), 3);
	/* an admin lowers the limit below what runs: that is a crossing too */
	r = call(f, "PATCH", "/v1/accounts/acme", f->admin, "{\"max_concurrent\": 2}");
	assert_int_equal(r.status, 200);
	http_free(&r);
	drain_notices(f, 300, &trial, &cap, &conc);
	assert_int_equal(conc, 2);
}

/* account_day from hours written by hand, as the rollup keeps it (migrations/0021) */
#define ACCOUNT_DAYS_FROM_HOURS                                                                    \
	"INSERT INTO account_day SELECT account_id, (hour AT TIME ZONE 'UTC')::date, "             \
	"price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), "    \
	"sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 2, 3"

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

/* A one-time login link from the CLI. */
static void login_link(struct fx *f, const char *account, char *out, size_t len)
{
	struct run_result *rr = malloc(sizeof *rr);
	const char *argv[] = {METER_BIN, "login-link", "--account", account, NULL};
	run_program(argv, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	rr->out[strcspn(rr->out, "\n")] = '\0';
	assert_memory_equal(rr->out, "/login/", 7);
	snprintf(out, len, "http://127.0.0.1:%d%.100s", f->api.port, rr->out);
	free(rr);
}

/*
 * Debian's chromium, headless, driven over its DevTools pipe
 * (--remote-debugging-pipe: JSON messages ending in a NUL, read on fd 3 and
 * written on fd 4). It opens pages and presses their buttons as a person
 * would, so a login link is spent by its own form.
 */
struct browser {
	pid_t pid;
	int to, from; /* we write to, read from */
	char *buf;
	size_t len, cap;
	int next_id;
	char session[128];
	char profile[96];
};

static void browser_send(struct browser *b, const char *method, cJSON *params, int id)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddNumberToObject(m, "id", id);
	cJSON_AddStringToObject(m, "method", method);
	if (params)
		cJSON_AddItemToObject(m, "params", params);
	if (b->session[0])
		cJSON_AddStringToObject(m, "sessionId", b->session);
	char *text = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	size_t n = strlen(text) + 1; /* the NUL ends the message */
	assert_int_equal(write(b->to, text, n), (ssize_t)n);
	cJSON_free(text);
}

/*
 * The answer to message id (its "result"; NULL for an error, when may_fail),
 * read within 30 s; the events between are dropped.
 */
static cJSON *browser_wait(struct browser *b, int id, bool may_fail)
{
	for (int rounds = 0; rounds < 3000; rounds++) {
		char *end = b->len ? memchr(b->buf, '\0', b->len) : NULL;
		if (end) {
			cJSON *m = cJSON_Parse(b->buf);
			size_t used = (size_t)(end - b->buf) + 1;
			memmove(b->buf, end + 1, b->len - used);
			b->len -= used;
			cJSON *mid = cJSON_GetObjectItem(m, "id");
			if (cJSON_IsNumber(mid) && mid->valueint == id) {
				cJSON *e = cJSON_GetObjectItem(m, "error");
				if (e && may_fail) {
					cJSON_Delete(m);
					return NULL;
				}
				if (e)
					fail_msg("chromium refused message %d: %s", id,
					         cJSON_GetStringValue(
					                 cJSON_GetObjectItem(e, "message")));
				cJSON *res = cJSON_DetachItemFromObject(m, "result");
				cJSON_Delete(m);
				return res;
			}
			cJSON_Delete(m);
			continue;
		}
		if (b->cap - b->len < 65536) {
			b->cap = b->cap * 2 + 65536;
			b->buf = realloc(b->buf, b->cap);
			assert_non_null(b->buf);
		}
		struct pollfd pfd = {.fd = b->from, .events = POLLIN};
		if (poll(&pfd, 1, 10) == 1) {
			ssize_t n = read(b->from, b->buf + b->len, b->cap - b->len);
			if (n <= 0)
				fail_msg("chromium closed its DevTools pipe");
			b->len += (size_t)n;
		}
	}
	fail_msg("chromium did not answer message %d in 30 s", id);
	return NULL;
}

static cJSON *browser_call(struct browser *b, const char *method, cJSON *params)
{
	int id = ++b->next_id;
	browser_send(b, method, params, id);
	return browser_wait(b, id, false);
}

static void browser_start(struct browser *b)
{
	if (access("/usr/bin/chromium", X_OK) != 0)
		fail_msg("chromium is not installed: scripts/deps.sh installs Debian's chromium");
	*b = (struct browser){0};
	snprintf(b->profile, sizeof b->profile, "--user-data-dir=/tmp/meter-chromium-%d",
	         (int)getpid());
	int to[2], from[2];
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	b->pid = fork();
	if (b->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		dup2(to[0], 3);
		dup2(from[1], 4);
		for (int fd = 5; fd < 1024; fd++)
			close(fd);
		execl("/usr/bin/chromium", "chromium", "--headless", "--no-sandbox",
		      "--disable-gpu", "--no-first-run", "--disable-background-networking",
		      "--disable-component-update", "--disable-sync", "--disable-quic", b->profile,
		      "--window-size=1000,1300", "--remote-debugging-pipe", "about:blank",
		      (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	b->to = to[1];
	b->from = from[0];
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "url", "about:blank");
	cJSON *t = browser_call(b, "Target.createTarget", p);
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "targetId",
	                        cJSON_GetStringValue(cJSON_GetObjectItem(t, "targetId")));
	cJSON_AddBoolToObject(p, "flatten", true);
	cJSON_Delete(t);
	t = browser_call(b, "Target.attachToTarget", p);
	snprintf(b->session, sizeof b->session, "%s",
	         cJSON_GetStringValue(cJSON_GetObjectItem(t, "sessionId")));
	cJSON_Delete(t);
	assert_true(b->session[0] != '\0');
}

/* What expr gives in the page, as text (malloc'd; "" while a page is replaced). */
static char *browser_eval(struct browser *b, const char *expr)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "expression", expr);
	cJSON_AddBoolToObject(p, "returnByValue", true);
	int id = ++b->next_id;
	browser_send(b, "Runtime.evaluate", p, id);
	cJSON *r = browser_wait(b, id, true);
	cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "value");
	char *out = strdup(cJSON_IsString(v) ? v->valuestring : "");
	cJSON_Delete(r);
	return out;
}

/* Waits until the page at path has loaded (30 s at most). */
static void browser_until(struct browser *b, const char *path)
{
	char want[256];
	snprintf(want, sizeof want, "%s complete", path);
	for (int i = 0; i < 300; i++) {
		char *at = browser_eval(b, "location.pathname + ' ' + document.readyState");
		bool there = strcmp(at, want) == 0;
		free(at);
		if (there)
			return;
		usleep(100000);
	}
	char *at = browser_eval(b, "location.href + ' ' + document.readyState + ' ' + "
	                           "document.body.innerText.slice(0, 300)");
	fail_msg("chromium did not get to %s: it is at %s", path, at);
}

static void browser_open(struct browser *b, const char *url, const char *path)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "url", url);
	cJSON_Delete(browser_call(b, "Page.navigate", p));
	browser_until(b, path);
}

/* A screenshot of the page: its PNG's size in bytes. */
static size_t browser_screenshot(struct browser *b)
{
	cJSON *r = browser_call(b, "Page.captureScreenshot", cJSON_CreateObject());
	const char *data = cJSON_GetStringValue(cJSON_GetObjectItem(r, "data"));
	size_t n = data ? strlen(data) / 4 * 3 : 0; /* base64 */
	cJSON_Delete(r);
	return n;
}

static void browser_stop(struct browser *b)
{
	b->session[0] = '\0';
	browser_send(b, "Browser.close", NULL, ++b->next_id);
	close(b->to);
	close(b->from);
	int st;
	for (int i = 0; i < 50 && waitpid(b->pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	kill(b->pid, SIGKILL);
	waitpid(b->pid, NULL, 0);
	free(b->buf);
	char rm[128];
	snprintf(rm, sizeof rm, "rm -rf /tmp/meter-chromium-%d", (int)getpid());
	assert_int_equal(system(rm), 0);
}

static void the_dashboard_in_headless_chromium(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	/* two days of this month with a busy hour each */
	sql(f, "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	       "cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	       "SELECT 'acme', 'sb-1', date_trunc('month', now()) + h * interval '1 hour', 1, "
	       "7200000000, 7200000000, 3600000000, 0, 3600000000, 14400000000000 "
	       "FROM unnest(ARRAY[1, 25]) h");
	sql(f,
	    "INSERT INTO account_month SELECT account_id, date_trunc('month', now())::date, "
	    "price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), "
	    "sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 3");
	sql(f, ACCOUNT_DAYS_FROM_HOURS);
	/* and the sandbox's month, as the rollup keeps it */
	sql(f,
	    "INSERT INTO sandbox_month SELECT account_id, date_trunc('month', now())::date, "
	    "sandbox_id, price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	    "sum(idle_us), sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 3, 4");
	sql(f, "SELECT meter_sandbox_month_costs(ARRAY['acme'], ARRAY['sb-1'], "
	       "ARRAY[date_trunc('month', now())::date])");
	time_t now = time(NULL);
	char month[16], path[96], url[160];
	strftime(month, sizeof month, "%Y-%m", gmtime(&now));
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", month);
	struct http_res r = call(f, "GET", path, f->acct, NULL);
	cJSON *o = http_json(&r);
	char want[64];
	snprintf(want, sizeof want, "id=\"mtd\" title=\"exact %s\">$%s<", str(o, "total_exact"),
	         str(o, "total"));
	assert_string_equal(str(o, "total"), "0.16");
	cJSON_Delete(o);
	http_free(&r);

	/* a person: a login link, its button pressed, then the page chromium ends up on */
	struct browser b;
	browser_start(&b);
	login_link(f, "acme", url, sizeof url);
	browser_open(&b, url, strstr(url, "/login/"));
	free(browser_eval(&b, "document.querySelector('form button').click(), ''"));
	browser_until(&b, "/dashboard");
	char *dom = browser_eval(&b, "document.documentElement.outerHTML");
	if (strstr(dom, want) == NULL)
		fail_msg("the dashboard's month to date is not the invoice draft's (%s): %.300s",
		         want, dom);
	int bars = 0;
	for (const char *p = dom; (p = strstr(p, "class=\"day\"")) != NULL; p++)
		bars++;
	assert_int_equal(bars, 2); /* one bar per day with usage */
	assert_non_null(strstr(dom, "id=\"asof\""));
	assert_non_null(strstr(dom, "href=\"/dashboard/sandboxes/sb-1\""));
	assert_null(strstr(dom, "<script"));
	free(dom);
	assert_true(browser_screenshot(&b) > 10000);
	browser_stop(&b);
	/* a used link does not work again */
	http_do_ex(f->api.port, "POST", strstr(url, "/login/"), NULL, NULL, 0, NULL, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);

	/* the form: a session cookie, HttpOnly and SameSite=Strict; logout ends it */
	char form[96], cookie[160];
	snprintf(form, sizeof form, "key=%s", f->acct);
	http_do_ex(f->api.port, "POST", "/login", NULL, form, strlen(form), NULL, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/dashboard");
	assert_non_null(strstr(r.cookie, "HttpOnly"));
	assert_non_null(strstr(r.cookie, "SameSite=Strict"));
	snprintf(cookie, sizeof cookie, "Cookie: %.*s", (int)strcspn(r.cookie, ";"), r.cookie);
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.type, "text/html; charset=utf-8");
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard/sandboxes/sb-1", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "id=\"cost\""));
	http_free(&r);
	char exp[96];
	snprintf(exp, sizeof exp, "/dashboard/exports/%s?format=focus", month);
	http_do_ex(f->api.port, "GET", exp, NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	check_focus(r.body, "0.16", 2); /* the download from the page: the draft's total */
	http_free(&r);
	http_do_ex(f->api.port, "POST", "/logout", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_non_null(strstr(r.cookie, "Max-Age=0"));
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login");
	http_free(&r);
	http_do_ex(f->api.port, "POST", "/login", NULL, "key=mk_nope", 11, NULL, &r);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);

	/* another account's dashboard or sandbox: 404 */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) VALUES ('o-1', 'other', "
	       "1, 1)");
	r = call(f, "GET", "/dashboard?account=other", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/dashboard/sandboxes/o-1", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/dashboard?account=other", f->admin, NULL);
	assert_int_equal(r.status, 200); /* an admin picks any */
	http_free(&r);
}

static void spent_trials_and_reached_caps_refuse_new_sandboxes(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* other: a trial of 20 s that a 30 s sandbox uses up */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 20 WHERE id = 'other'");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('t-1', 'other', 2, 4, now() - interval '40 seconds')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('t-1', 1, now() - interval '10 seconds', 'h', 1000000)");
	/* acme: a cap of a cent, no trial, a busy hour of 2 vCPUs ($0.08) */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0, monthly_spend_cap = 0.01 WHERE id = "
	       "'acme'");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('sb-1', 1, now() - interval '1 second', 'h', 7200000000)");
	wait_rollups(f);
	struct http_res r = call(f, "POST", "/v1/quota/check", f->other,
	                         "{\"account_id\": \"other\", \"vcpus\": 1, \"memory_gib\": 1}");
	cJSON *o = http_json(&r);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	assert_string_equal(str(o, "reason"), "trial_exhausted");
	assert_int_equal(cJSON_GetObjectItem(o, "trial_seconds_remaining")->valueint, 0);
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "POST", "/v1/sandboxes", f->admin,
	         "{\"id\": \"t-2\", \"account_id\": \"other\", \"vcpus\": 1, \"memory_gib\": 1}");
	assert_int_equal(r.status, 409);
	assert_non_null(strstr(r.body, "trial_exhausted"));
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/other/trial", f->other, NULL);
	o = http_json(&r);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "exhausted")));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "stop_running_sandboxes")));
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "POST", "/v1/quota/check", f->acct,
	         "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	o = http_json(&r);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	assert_string_equal(str(o, "reason"), "spend_cap_reached");
	cJSON_Delete(o);
	http_free(&r);
}

/* Polls q until it gives want (the limits are checked after the batch's commit). */
static void wait_num(struct fx *f, const char *q, long want)
{
	long v = -1;
	for (int i = 0; i < 200 && (v = num(f, q)) != want; i++)
		usleep(50000);
	if (v != want)
		fail_msg("%s: %ld, not %ld, after 10 s", q, v, want);
}

/* One batch of sandboxes of five accounts: each account's limits are checked as it
 * stands, from one read for the batch (three trials spent, one not, one cap reached),
 * each crossing announced once, and a later batch that changes nothing leaves the
 * stored limits as they were. */
static void a_batch_checks_the_limits_of_each_of_its_accounts(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0, monthly_spend_cap = 0.01 WHERE id = "
	       "'acme'");
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('t1', 'T1', 'trial', 20), ('t2', 'T2', 'trial', 20), ('t3', 'T3', 'trial', 20), "
	       "('t4', 'T4', 'trial', 3600)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) "
	       "SELECT 'l-' || a, a, 1, 1, now() - interval '40 seconds' "
	       "FROM unnest(ARRAY['t1', 't2', 't3', 't4']) a");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'l-' || a, 1, now() - interval '10 seconds', 'h', 1000000 "
	       "FROM unnest(ARRAY['t1', 't2', 't3', 't4']) a "
	       "UNION ALL SELECT 'sb-1', 1, now() - interval '1 second', 'h', 7200000000");
	wait_rollups(f);
	wait_num(f,
	         "SELECT count(*) FROM account_limits WHERE trial_exhausted AND account_id IN "
	         "('t1', 't2', 't3') AND NOT spend_cap_reached",
	         3);
	wait_num(f,
	         "SELECT count(*) FROM account_limits WHERE account_id = 't4' AND NOT "
	         "trial_exhausted AND NOT spend_cap_reached",
	         1);
	wait_num(f,
	         "SELECT count(*) FROM account_limits WHERE account_id = 'acme' AND "
	         "spend_cap_reached AND NOT trial_exhausted",
	         1);
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices WHERE limit_name = "
	                        "'trial_spent' AND account_id IN ('t1', 't2', 't3')"),
	                 3);
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices WHERE account_id = 't4'"), 0);
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices WHERE limit_name = "
	                        "'spend_cap_reached' AND account_id = 'acme'"),
	                 1);
	sql(f, "CREATE TABLE limits_before AS SELECT * FROM account_limits");
	/* A later batch of the same sandboxes, which changes none of their limits, with a
	 * sandbox of a new trial account that it spends: its row says the batch's limits
	 * were checked. */
	sql(f, "INSERT INTO accounts (id, name, plan, trial_grant_seconds) VALUES "
	       "('t5', 'T5', 'trial', 20)");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('l-t5', 't5', 1, 1, now() - interval '40 seconds')");
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	       "SELECT 'l-' || a, 1, now() - interval '5 seconds', 'h', 1000001 "
	       "FROM unnest(ARRAY['t1', 't2', 't3', 't4', 't5']) a");
	wait_rollups(f);
	wait_num(f,
	         "SELECT count(*) FROM account_limits WHERE account_id = 't5' AND trial_exhausted",
	         1);
	assert_int_equal(num(f, "SELECT count(*) FROM ((SELECT * FROM account_limits WHERE "
	                        "account_id <> 't5' EXCEPT TABLE limits_before) UNION ALL (TABLE "
	                        "limits_before EXCEPT SELECT * FROM account_limits)) d"),
	                 0);
	assert_int_equal(num(f, "SELECT count(*) FROM limit_notices WHERE account_id IN ('t1', "
	                        "'t2', 't3', 't4', 't5', 'acme')"),
	                 5);
	sql(f, "DROP TABLE limits_before");
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

/* ---- partition upkeep ---- */

static char *text(struct fx *f, const char *q, char *buf, size_t len)
{
	if (testdb_value(&f->db, q, buf, len) == NULL)
		fail_msg("%s gave nothing", q);
	return buf;
}

static char *invoice_body(struct fx *f, const char *month)
{
	char path[96];
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s?format=csv", month);
	struct http_res r = call(f, "GET", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	char *body = strdup(r.body);
	http_free(&r);
	return body;
}

static void dropping_old_raw_partitions_never_changes_an_invoice(void **state)
{
	struct fx *f = *state;
	char buf[512], before[512];
	seed(f);
	/* "edge" runs across the end of September (two incarnations), "sep" in it. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('edge', 'acme', 2, 4, '2026-09-30T23:00:00Z', '2026-10-01T01:00:00Z'), "
	       "('sep', 'acme', 2, 4, '2026-09-26T10:00:00Z', '2026-09-26T11:00:00Z')");
	/* In the library's order (by incarnation, then time); [4] comes late. */
	struct meter_sample edge[7] = {{3, 0, S10(1)}, {3, 0, S10(3)},  {3, 0, S10(8)},
	                               {3, 0, S10(9)}, {3, 0, S10(10)}, {9, 0, S10(1)},
	                               {9, 0, S10(5)}};
	const char *edge_ts[] = {"2026-09-30T23:10:00Z", "2026-09-30T23:40:00Z",
	                         "2026-10-01T00:20:00Z", "2026-10-01T00:50:00Z",
	                         "2026-10-01T00:55:00Z", "2026-09-30T23:55:00Z",
	                         "2026-10-01T00:30:00Z"};
	struct meter_sample sep[3] = {{1, 0, S10(2)}, {1, 0, S10(6)}, {1, 0, S10(7)}};
	const char *sep_ts[] = {"2026-09-26T10:20:00Z", "2026-09-26T10:50:00Z",
	                        "2026-09-26T10:55:00Z"};
	for (int i = 0; i < 7; i++)
		meter_time_parse(edge_ts[i], &edge[i].t_us);
	for (int i = 0; i < 3; i++)
		meter_time_parse(sep_ts[i], &sep[i].t_us);
	for (int i = 0; i < 7; i++)
		if (i != 4)
			insert(f, "edge", &edge[i]);
	for (int i = 0; i < 2; i++)
		insert(f, "sep", &sep[i]);
	wait_rollups(f);
	const char *drop = "SELECT array_to_string(meter_drop_sample_partitions('35 days'), ',')";
	/* Not while September and October are drafts. */
	assert_string_equal(text(f, drop, buf, sizeof buf), "");
	char *inv9 = invoice_body(f, "2026-09"), *inv10 = invoice_body(f, "2026-10");
	assert_non_null(strstr(inv9, "cpu"));
	assert_string_equal(text(f, "SELECT count(*) FROM invoices", buf, sizeof buf), "2");
	/* Not while a mark (here one parked for an unknown sandbox) reaches into it. */
	sql(f, "INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at, waiting, waiting_kind) "
	       "VALUES "
	       "('ghost', '2026-09-15T00:00:00Z', now(), 'not registered', 'unregistered')");
	assert_string_equal(text(f, drop, buf, sizeof buf), "");
	/* ... and the service says why it keeps the partition */
	unsetenv("METER_RAW_RETENTION");
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.url, "--log-level=info"));
	setenv("METER_RAW_RETENTION", "0", 1);
	static char log[1 << 16];
	const char *said = "partitions: 1 parked sandbox(es) keep raw samples past the "
	                   "retention (sandbox ghost: not registered)";
	bool found = false;
	for (int i = 0; i < 100 && !found; i++) {
		FILE *lf = fopen(f->api2.log, "r");
		size_t ln = lf ? fread(log, 1, sizeof log - 1, lf) : 0;
		if (lf)
			fclose(lf);
		log[ln] = '\0';
		found = strstr(log, said) != NULL;
		if (!found)
			usleep(50000);
	}
	if (!found)
		fail_msg("meter-api did not say why it keeps old samples; its log:\n%s", log);
	assert_int_equal(api_stop(&f->api2), 0);
	assert_string_equal(
	        text(f, "SELECT to_regclass('samples_202609') IS NOT NULL", buf, sizeof buf), "t");
	sql(f, "DELETE FROM rollup_queue WHERE sandbox_id = 'ghost'");
	const char *usage = "SELECT md5(string_agg(u::text, '|' ORDER BY u::text)) FROM "
	                    "usage_hourly u";
	text(f, usage, before, sizeof before);

	/* The service drops it itself: an API process whose retention reaches back to
	 * a day before October's end, whatever today is (the default, 35 days, kept
	 * October only until 2026-12-05), so September is past it and October not. */
	sql(f, "DROP TABLE samples_202701"); /* and makes the months ahead it finds missing */
	int64_t oct_end_us = 0;
	assert_int_equal(meter_time_parse("2026-11-01T00:00:00Z", &oct_end_us), METER_OK);
	char retention[32];
	snprintf(retention, sizeof retention, "%lldd",
	         (long long)((time(NULL) - oct_end_us / 1000000) / 86400 + 2));
	setenv("METER_RAW_RETENTION", retention, 1);
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.url, "--log-level=info"));
	setenv("METER_RAW_RETENTION", "0", 1);
	for (int i = 0; i < 100 && strcmp(text(f, "SELECT to_regclass('samples_202609') IS NULL",
	                                       buf, sizeof buf),
	                                  "f") == 0;
	     i++)
		usleep(50000);
	assert_string_equal(
	        text(f, "SELECT to_regclass('samples_202609') IS NULL", buf, sizeof buf), "t");
	/* October ended inside the retention: kept; the months ahead are there again. */
	assert_string_equal(text(f,
	                         "SELECT to_regclass('samples_202610') IS NOT NULL AND "
	                         "to_regclass('samples_202701') IS NOT NULL",
	                         buf, sizeof buf),
	                    "t");
	assert_string_equal(text(f, "SELECT raw_from FROM sample_horizon", buf, sizeof buf),
	                    "2026-10-01 00:00:00+00");
	assert_string_equal(text(f, "SELECT count(*) FROM sample_seeds", buf, sizeof buf), "3");
	assert_string_equal(text(f, usage, buf, sizeof buf), before);

	/* A late sample in October re-rates from 00:00, seeded by what September's
	 * partition knew: the whole history is rated as if nothing was dropped. */
	insert(f, "edge", &edge[4]);
	wait_rollups(f);
	same_as_raw(f, "edge", "2026-09-30T23:00:00Z", "2026-10-01T01:00:00Z", edge, 7);
	/* A late sample for the dropped month changes nothing there. */
	insert(f, "sep", &sep[2]);
	wait_rollups(f);
	same_as_raw(f, "sep", "2026-09-26T10:00:00Z", "2026-09-26T11:00:00Z", sep, 2);
	/* The final invoices are as they were, to the byte. */
	char *again9 = invoice_body(f, "2026-09"), *again10 = invoice_body(f, "2026-10");
	assert_string_equal(again9, inv9);
	assert_string_equal(again10, inv10);
	free(inv9);
	free(inv10);
	free(again9);
	free(again10);
}

/*
 * Samples in the default partition (a clock behind stamps them before the
 * first month) that a partition drop leaves below the horizon are seeded:
 * rating from the checkpoint and rating the whole history again give the
 * same, and both what rating every raw sample gives.
 */
static void the_horizon_passing_default_rows_keeps_both_reads_equal(void **state)
{
	struct fx *f = *state;
	char buf[128];
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('hz', 'acme', 2, 4, '2026-09-25T01:00:00Z')");
	const char *at_[] = {"2026-08-31T10:00:00Z", "2026-09-26T10:00:00Z", "2026-08-31T11:00:00Z",
	                     "2026-10-05T10:05:00Z", "2026-10-05T10:15:00Z"};
	const int64_t cpu[] = {S10(1), S10(2), S10(10), S10(11), S10(11) + 5000000};
	struct meter_sample all[5], sorted[5];
	for (int i = 0; i < 5; i++) {
		all[i] = (struct meter_sample){1, 0, cpu[i]};
		meter_time_parse(at_[i], &all[i].t_us);
	}
	for (int i = 0; i < 4; i++) {
		insert(f, "hz", &all[i]);
		wait_rollups(f);
	}
	assert_string_equal(text(f, "SELECT count(*) FROM samples_default", buf, sizeof buf), "2");
	/* September final, then dropped: the horizon moves to October */
	char *inv = invoice_body(f, "2026-09");
	free(inv);
	assert_non_null(strstr(
	        text(f, "SELECT array_to_string(meter_drop_sample_partitions('35 days'), ',')", buf,
	             sizeof buf),
	        "samples_202609"));
	assert_string_equal(text(f, "SELECT raw_from FROM sample_horizon", buf, sizeof buf),
	                    "2026-10-01 00:00:00+00");
	insert(f, "hz", &all[4]);
	wait_rollups(f);
	size_t m = library_order(all, 5, sorted);
	same_as_raw(f, "hz", "2026-09-25T01:00:00Z", NULL, sorted, m);
	/* the whole history read again (no checkpoint): the same */
	sql(f, "DELETE FROM rollup_checkpoints WHERE sandbox_id = 'hz'");
	sql(f, "INSERT INTO rollup_queue VALUES ('hz', '2026-10-05T10:00:00Z', now())");
	wait_rollups(f);
	same_as_raw(f, "hz", "2026-09-25T01:00:00Z", NULL, sorted, m);
}

/* ---- large accounts: pages ---- */

/* GET path as admin; the answer, which must be want. */
static cJSON *get_json(struct fx *f, const char *path, int want)
{
	struct http_res r = call(f, "GET", path, f->admin, NULL);
	if (r.status != want)
		fail_msg("GET %s: %d %s, wanted %d", path, r.status, r.body ? r.body : "", want);
	cJSON *o = http_json(&r);
	http_free(&r);
	if (o == NULL)
		fail_msg("GET %s: not JSON", path);
	return o;
}

static int64_t nano_of(cJSON *o, const char *name)
{
	int64_t v;
	if (meter_decimal_parse(str(o, name), 9, true, &v) != METER_OK)
		fail_msg("%s is not a decimal", name);
	return v;
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

/* ---- large accounts: streamed exports ---- */

static int tcp(int port);

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

/* ---- bounded requests ---- */

/* A TCP connection to the API on port, or -1. */
static int tcp(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		close(fd);
		fd = -1;
	}
	return fd;
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
	assert_true(api_start(&f->api, METER_API_BIN, f->db.url, "--max-connections-per-ip=4"));
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

/* ---- keys and hardening ---- */

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

static struct http_res form_post(struct fx *f, const char *path, const char *body,
                                 const char *header)
{
	struct http_res r;
	http_do_ex(f->api.port, "POST", path, NULL, body, body ? strlen(body) : 0, header, &r);
	return r;
}

/* The cookie header that sends the session r set. */
static void cookie_of(const struct http_res *r, char *out, size_t len)
{
	snprintf(out, len, "Cookie: %.*s", (int)strcspn(r->cookie, ";"), r->cookie);
}

/*
 * Keys are listed (never the key), note their last use, and are revoked at
 * once: the next request with a revoked key is refused by every meter-api
 * process (no cache outlives it), and the dashboard session it opened ends.
 * The CLI lists and revokes too. Bad requests are refused and change nothing.
 */
/* The newest key's last use, set a minute and more back, is noted again by a request. */
static void noted_after_a_minute(struct fx *f, const char *key, const char *method,
                                 const char *path, const char *body)
{
	sql(f, "UPDATE api_keys SET last_used_at = now() - interval '61 seconds' "
	       "WHERE id = (SELECT max(id) FROM api_keys)");
	struct http_res r = call(f, method, path, key, body);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys WHERE id = (SELECT max(id) FROM "
	                        "api_keys) AND last_used_at > now() - interval '30 seconds'"),
	                 1);
}

static void keys_are_listed_and_revoked_at_once(void **state)
{
	struct fx *f = *state;
	seed(f);
	struct http_res r = call(f, "POST", "/v1/keys", f->admin,
	                         "{\"role\": \"account\", \"account_id\": \"acme\"}");
	assert_int_equal(r.status, 201);
	cJSON *o = http_json(&r);
	char key[KEY_LEN + 1];
	snprintf(key, sizeof key, "%s", str(o, "key"));
	int id = cJSON_GetObjectItem(o, "id")->valueint;
	cJSON_Delete(o);
	http_free(&r);
	char path[64];
	snprintf(path, sizeof path, "/v1/keys/%d", id);
	/* listed, never used yet; the list holds no key */
	r = call(f, "GET", "/v1/keys", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_null(strstr(r.body, key));
	o = http_json(&r);
	http_free(&r);
	cJSON *k, *mine = NULL;
	cJSON_ArrayForEach(
	        k, cJSON_GetObjectItem(o, "keys")) if (cJSON_GetObjectItem(k, "id")->valueint == id)
	        mine = k;
	assert_non_null(mine);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(mine, "last_used_at")));
	char first[KEY_SHOWN_CHARS + 1];
	snprintf(first, sizeof first, "%.11s", key);
	assert_string_equal(str(mine, "shown"), first);
	cJSON_Delete(o);
	/* used on two processes, and for a dashboard session */
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.url, "--log-level=info"));
	r = call(f, "GET", "/v1/accounts/acme", key, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	struct http_res r2;
	http_do(f->api2.port, "GET", "/v1/accounts/acme", key, NULL, 0, &r2);
	assert_int_equal(r2.status, 200);
	http_free(&r2);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys WHERE last_used_at IS NOT NULL "
	                        "AND shown = left((SELECT shown FROM api_keys ORDER BY id DESC "
	                        "LIMIT 1), 11) AND id = (SELECT max(id) FROM api_keys)"),
	                 1);
	/* Noted at most once a minute: a use within the minute leaves the note as it is
	 * (on the quota check's pipelined read too), one after it notes again. */
	char noted[64], again[64], body[128];
	text(f, "SELECT last_used_at FROM api_keys WHERE id = (SELECT max(id) FROM api_keys)",
	     noted, sizeof noted);
	snprintf(body, sizeof body, "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	r = call(f, "POST", "/v1/quota/check", key, body);
	assert_int_equal(r.status, 200);
	http_free(&r);
	text(f, "SELECT last_used_at FROM api_keys WHERE id = (SELECT max(id) FROM api_keys)",
	     again, sizeof again);
	assert_string_equal(again, noted);
	noted_after_a_minute(f, key, "POST", "/v1/quota/check", body);
	noted_after_a_minute(f, key, "GET", "/v1/accounts/acme", NULL);
	char form[96], cookie[200];
	snprintf(form, sizeof form, "key=%s", key);
	r = form_post(f, "/login", form, NULL);
	assert_int_equal(r.status, 303);
	cookie_of(&r, cookie, sizeof cookie);
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	http_free(&r);
	/* an account key may not manage keys */
	r = call(f, "DELETE", path, key, NULL);
	assert_int_equal(r.status, 403);
	http_free(&r);
	/* revoked: refused at once by both processes; its session is over */
	r = call(f, "DELETE", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(o, "revoked_at")));
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme", key, NULL);
	assert_int_equal(r.status, 401);
	http_free(&r);
	http_do(f->api2.port, "GET", "/v1/accounts/acme", key, NULL, 0, &r2);
	assert_int_equal(r2.status, 401);
	http_free(&r2);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login");
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions WHERE key_id IS NOT NULL"), 0);
	/* again: the same revocation; unknown keys and bad bodies change nothing */
	r = call(f, "DELETE", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	r = call(f, "DELETE", "/v1/keys/999999", f->admin, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	long keys = num(f, "SELECT count(*) FROM api_keys");
	const char *bad[] = {"{\"role\": \"account\"}",
	                     "{\"role\": \"admin\", \"account_id\": \"acme\"}",
	                     "{\"role\": \"root\"}",
	                     "{\"role\": \"account\", \"account_id\": \"acme\", \"x\": 1}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		r = call(f, "POST", "/v1/keys", f->admin, bad[i]);
		assert_true(r.status == 422 || r.status == 400);
		http_free(&r);
	}
	r = call(f, "POST", "/v1/keys", f->admin,
	         "{\"role\": \"account\", \"account_id\": \"nope\"}");
	assert_int_equal(r.status, 404);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys"), keys);
	/* the CLI: the list shows the revoked key; revoking acme's own key ends it */
	struct run_result *rr = malloc(sizeof *rr);
	const char *list[] = {METER_BIN, "key", "list", NULL};
	run_program(list, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	char shown[16];
	snprintf(shown, sizeof shown, "%.11s", key);
	assert_non_null(strstr(rr->out, shown));
	long acct_id = num(f, "SELECT id FROM api_keys WHERE role = 'account' AND account_id = "
	                      "'acme' AND revoked_at IS NULL ORDER BY id LIMIT 1");
	char ids[24];
	snprintf(ids, sizeof ids, "%ld", acct_id);
	r = call(f, "GET", "/v1/accounts/acme", f->acct, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	const char *revoke[] = {METER_BIN, "key", "revoke", ids, NULL};
	run_program(revoke, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	r = call(f, "GET", "/v1/accounts/acme", f->acct, NULL);
	assert_int_equal(r.status, 401);
	http_free(&r);
	const char *nokey[] = {METER_BIN, "key", "revoke", "0", NULL};
	run_program(nokey, f->db.url, rr);
	assert_int_not_equal(rr->status, 0);
	free(rr);
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
	bool up = api_start(&f->api, METER_API_BIN, f->db.url, "--secure-cookies");
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
	bool started = api_start(&f->api, METER_API_BIN, f->db.url, "--log-level=info");
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

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	/* Raw partitions are dropped by the one test that means to (the test data is old). */
	setenv("METER_RAW_RETENTION", "0", 1);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(public_routes_give_the_published_figures, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(the_openapi_document_describes_every_served_route,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(accounts_sandboxes_and_the_quota_check, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(a_key_sees_its_own_account_only, setup, teardown),
	        cmocka_unit_test_setup_teardown(malformed_requests_get_problems_and_change_nothing,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(concurrent_registrations_admit_exactly_the_limit,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                usage_from_two_processes_rollups_equals_rating_the_raw_samples, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                rollups_match_the_raw_rating_around_stops_and_overlaps, setup, teardown),
	        cmocka_unit_test_setup_teardown(a_cancelled_rating_is_tried_again_never_parked,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_long_lived_sandbox_is_rated_from_its_checkpoint,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                the_horizon_passing_default_rows_keeps_both_reads_equal, setup, teardown),
	        cmocka_unit_test_setup_teardown(the_worked_example_as_real_usage_invoices_1_28,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                final_invoices_never_change_and_late_usage_is_adjusted_later, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sandbox_across_midnight_at_month_end_is_split_to_the_microsecond, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_price_change_in_mid_month_gives_two_lines, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(each_limit_crossed_is_announced_once, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                the_forecast_projects_the_last_seven_days_over_the_days_left, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                an_account_of_many_sandboxes_is_listed_a_page_at_a_time, setup, teardown),
	        cmocka_unit_test_setup_teardown(requests_are_bounded, setup, teardown),
	        cmocka_unit_test_setup_teardown(slow_requests_never_hold_a_request_thread, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(keys_are_listed_and_revoked_at_once, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(what_clients_see_is_hardened, setup, teardown),
	        cmocka_unit_test_setup_teardown(https_is_served_with_secure_cookies, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(price_plans_are_published_for_the_future_only,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(an_export_of_100000_sandboxes_streams_and_adds_up,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(the_dashboard_in_headless_chromium, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(spent_trials_and_reached_caps_refuse_new_sandboxes,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_batch_checks_the_limits_of_each_of_its_accounts,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                dropping_old_raw_partitions_never_changes_an_invoice, setup, teardown),
	        cmocka_unit_test_setup_teardown(postgres_stopped_and_started_under_the_api, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
