/*
 * Security checks of meter-api over real HTTP: every route of the route
 * table refuses another account's key, SQL metacharacters in every field
 * are data and never SQL, keys never reach the log, oversized headers,
 * paths and bodies are refused with the server still up, and a client that
 * sends one byte at a time is cut off.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/routes.h"
#include "common/keys.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api;
	char admin[KEY_LEN + 1], mine[KEY_LEN + 1], theirs[KEY_LEN + 1];
	char month[8];
	char roles[2][40]; /* login roles a test made, dropped by teardown */
};

static void sql(struct fx *f, const char *q)
{
	if (!testdb_exec(&f->db, q))
		fail_msg("SQL failed");
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !testdb_create_migrated(&f->db, "security")) {
		free(f);
		return -1;
	}
	*state = f;
	/* Two accounts with a sandbox and an hour of usage each. */
	sql(f, "INSERT INTO accounts (id, name, plan) VALUES ('mine', 'Mine Ltd', 'paid'), "
	       "('victim', 'Victim Secret Corp', 'paid')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('sb-mine', 'mine', 1, 1, now() - interval '1 hour'), "
	       "('sb-victim', 'victim', 1, 1, now() - interval '1 hour')");
	sql(f, "INSERT INTO webhook_endpoints (url, events, account_id, secret) VALUES "
	       "('http://127.0.0.1:9/hook', '{invoice.finalized}', 'victim', "
	       "'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')");
	if (!testdb_key(&f->db, NULL, f->admin) || !testdb_key(&f->db, "mine", f->mine) ||
	    !testdb_key(&f->db, "victim", f->theirs))
		return -1;
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(f->month, sizeof f->month, "%Y-%m", &tm);
	/* debug logging, so that "never logged" covers the most talkative level */
	setenv("METER_LOG_LEVEL", "debug", 1);
	if (!api_start(&f->api, METER_API_BIN, f->db.api_url, "--request-timeout=2"))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	if (f->api.pid)
		api_stop(&f->api);
	for (int i = 0; i < 2; i++)
		if (f->roles[i][0]) {
			char q[96];
			snprintf(q, sizeof q, "DROP ROLE IF EXISTS %s", f->roles[i]);
			testdb_exec(&f->db, q);
		}
	testdb_drop(&f->db);
	free(f);
	return 0;
}

static struct http_res call(struct fx *f, const char *method, const char *path, const char *k,
                            const char *body)
{
	struct http_res r;
	http_do(f->api.port, method, path, k, body, body ? strlen(body) : 0, &r);
	return r;
}

/* The path of a route with the victim's ids (or mine), its query and body. */
static void route_request(struct fx *f, const struct route *rt, const char *acct, const char *sb,
                          char *path, size_t plen, const char **body)
{
	char from[32], to[32];
	time_t now = time(NULL);
	time_t a = now - now % 3600 - 7200, b = now - now % 3600 + 3600;
	strftime(from, sizeof from, "%Y-%m-%dT%H:00:00Z", gmtime(&a));
	strftime(to, sizeof to, "%Y-%m-%dT%H:00:00Z", gmtime(&b));
	static char qbody[256];
	*body = NULL;
	size_t n = 0;
	path[0] = '\0';
	for (const char *p = rt->pattern; *p && n + 64 < plen;) {
		if (strncmp(p, "{id}", 4) == 0) {
			/* webhook endpoint 1 is made in setup */
			n += (size_t)snprintf(path + n, plen - n, "%s",
			                      strncmp(rt->pattern, "/v1/accounts", 12) == 0   ? acct
			                      : strncmp(rt->pattern, "/v1/webhooks", 12) == 0 ? "1"
			                                                                      : sb);
			p += 4;
		} else if (strncmp(p, "{delivery}", 10) == 0) {
			n += (size_t)snprintf(path + n, plen - n, "msg_none");
			p += 10;
		} else if (strncmp(p, "{month}", 7) == 0) {
			n += (size_t)snprintf(path + n, plen - n, "%s", f->month);
			p += 7;
		} else {
			path[n++] = *p++;
			path[n] = '\0';
		}
	}
	if (strstr(rt->pattern, "/usage"))
		snprintf(path + n, plen - n, "?from=%s&to=%s", from, to);
	else if (strstr(rt->pattern, "/forecast"))
		snprintf(path + n, plen - n, "?month=%s", f->month);
	else if (strncmp(rt->pattern, "/dashboard/exports/", 19) == 0)
		snprintf(path + n, plen - n, "?format=focus&account=%s", acct);
	else if (strstr(rt->pattern, "/exports/"))
		snprintf(path + n, plen - n, "?format=focus");
	else if (strcmp(rt->pattern, "/dashboard") == 0)
		snprintf(path + n, plen - n, "?account=%s", acct);
	if (strcmp(rt->method, "POST") == 0 || strcmp(rt->method, "PATCH") == 0) {
		if (strcmp(rt->pattern, "/v1/quota/check") == 0)
			snprintf(qbody, sizeof qbody,
			         "{\"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}", acct);
		else if (strcmp(rt->pattern, "/v1/sandboxes") == 0)
			snprintf(qbody, sizeof qbody,
			         "{\"id\": \"sb-new\", \"account_id\": \"%s\", \"vcpus\": 1, "
			         "\"memory_gib\": 1}",
			         acct);
		else if (strcmp(rt->pattern, "/v1/accounts") == 0)
			snprintf(qbody, sizeof qbody, "{\"name\": \"x\", \"plan\": \"paid\"}");
		else if (strcmp(rt->method, "PATCH") == 0)
			snprintf(qbody, sizeof qbody, "{\"max_concurrent\": 5}");
		else
			snprintf(qbody, sizeof qbody, "{}");
		*body = qbody;
	}
}

static void every_route_refuses_another_accounts_key(void **state)
{
	struct fx *f = *state;
	int checked = 0;
	for (int i = 0; i < routes_count; i++) {
		const struct route *rt = &routes[i];
		if (rt->auth == AUTH_PUBLIC)
			continue;
		char path[512];
		const char *body;
		route_request(f, rt, "victim", "sb-victim", path, sizeof path, &body);
		struct http_res r = call(f, rt->method, path, f->mine, body);
		int want = rt->auth == AUTH_ADMIN || rt->auth == AUTH_HOOK ? 403 : 404;
		/* The dashboard's own page ignores ?account= for an account key: it shows
		 * the key's own account, which must not be the victim's. */
		bool own_page = strcmp(rt->pattern, "/dashboard") == 0 && r.status == 200;
		if (r.status != want && !own_page)
			fail_msg("%s %s with another account's key: %d, not %d", rt->method, path,
			         r.status, want);
		/* (the path the attacker sent may come back; the victim's name must not) */
		if (r.body && strstr(r.body, "Victim Secret"))
			fail_msg("%s %s with another account's key shows the victim's data",
			         rt->method, path);
		http_free(&r);
		/* The same request with the victim's own key or the admin's is served:
		 * the refusal above is about the key, not a malformed request. */
		if (strcmp(rt->method, "GET") == 0) {
			r = call(f, rt->method, path, rt->auth == AUTH_ADMIN ? f->admin : f->theirs,
			         body);
			if (r.status != 200)
				fail_msg("%s %s with the owner's key: %d", rt->method, path,
				         r.status);
			http_free(&r);
		}
		checked++;
	}
	assert_true(checked >= 16); /* every route that takes a key */
}

/* A hook key (what meter-hook holds on a host) checks quotas and registers and stops
 * sandboxes; every other route refuses it, and one limited to an account does so for that
 * account alone, with the same 404 an account key gets for another account. */
static void hook_keys_check_quotas_and_register_and_stop_sandboxes_only(void **state)
{
	struct fx *f = *state;
	char any[KEY_LEN + 1], mine[KEY_LEN + 1], err[256];
	int64_t id;
	if (!key_create(f->db.conn, "hook", NULL, any, &id, err, sizeof err) ||
	    !key_create(f->db.conn, "hook", "mine", mine, &id, err, sizeof err))
		fail_msg("%s", err);
	int refused = 0;
	for (int i = 0; i < routes_count; i++) {
		const struct route *rt = &routes[i];
		if (rt->auth == AUTH_PUBLIC || rt->auth == AUTH_HOOK ||
		    strcmp(rt->pattern, "/v1/quota/check") == 0)
			continue;
		char path[512];
		const char *body;
		route_request(f, rt, "mine", "sb-mine", path, sizeof path, &body);
		const char *keys[] = {any, mine};
		for (int k = 0; k < 2; k++) {
			struct http_res r = call(f, rt->method, path, keys[k], body);
			if (r.status != 403 || !r.body || !strstr(r.body, "key"))
				fail_msg("%s %s with a hook key: %d %s", rt->method, path, r.status,
				         r.body ? r.body : "");
			http_free(&r);
		}
		refused++;
	}
	assert_true(refused >= 16);

#define CHECK(acct) "{\"account_id\": \"" acct "\", \"vcpus\": 1, \"memory_gib\": 1}"
#define REG(id, acct)                                                                              \
	"{\"id\": \"" id "\", \"account_id\": \"" acct "\", \"vcpus\": 1, \"memory_gib\": 1}"
	struct {
		const char *key, *method, *path, *body;
		int want;
	} steps[] = {
	        {mine, "POST", "/v1/quota/check", CHECK("mine"), 200},
	        {any, "POST", "/v1/quota/check", CHECK("victim"), 200},
	        {mine, "POST", "/v1/quota/check", CHECK("victim"), 404},
	        {mine, "POST", "/v1/sandboxes", REG("sb-hook-1", "mine"), 201},
	        {mine, "POST", "/v1/sandboxes", REG("sb-hook-2", "victim"), 404},
	        {any, "POST", "/v1/sandboxes", REG("sb-hook-3", "victim"), 201},
	        {mine, "POST", "/v1/sandboxes/sb-victim/stop", "{}", 404},
	        {mine, "POST", "/v1/sandboxes/sb-hook-1/stop", "{}", 200},
	        {any, "POST", "/v1/sandboxes/sb-hook-3/stop", "{}", 200},
	};
#undef CHECK
#undef REG
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		struct http_res r =
		        call(f, steps[i].method, steps[i].path, steps[i].key, steps[i].body);
		if (r.status != steps[i].want)
			fail_msg("step %zu: %s %s %s: %d, not %d: %s", i, steps[i].method,
			         steps[i].path, steps[i].body, r.status, steps[i].want,
			         r.body ? r.body : "");
		if (r.body && strstr(r.body, "Victim Secret"))
			fail_msg("step %zu shows the victim's data", i);
		http_free(&r);
	}
	char v[64];
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM sandboxes WHERE id = 'sb-hook-2' "
	                                 "OR (id = 'sb-victim' AND stopped_at IS NOT NULL)",
	                                 v, sizeof v),
	                    "0");
	assert_string_equal(
	        testdb_value(&f->db,
	                     "SELECT string_agg(account_id, ',' ORDER BY id) FROM "
	                     "sandboxes WHERE id LIKE 'sb-hook-%' AND stopped_at IS NOT "
	                     "NULL",
	                     v, sizeof v),
	        "mine,victim");
}

static const char *const hostile[] = {
        "x'); DROP TABLE samples; --",
        "' OR '1'='1",
        "victim' --",
        "1; SELECT pg_sleep(10)",
        "$1",
        "%s%s%n",
        "\\\\x00",
        "mine\\u0000victim",
        "'||(SELECT key_hash FROM api_keys LIMIT 1)||'",
};

static long count(struct fx *f, const char *q)
{
	char buf[64];
	return testdb_value(&f->db, q, buf, sizeof buf) ? strtol(buf, NULL, 10) : -1;
}

static void sql_metacharacters_in_every_field_are_data(void **state)
{
	struct fx *f = *state;
	/* Each field of each body and each query parameter, one at a time. */
	static const char *const bodies[][2] = {
	        {"/v1/accounts", "{\"id\": \"@\", \"name\": \"n\", \"plan\": \"paid\"}"},
	        {"/v1/accounts", "{\"name\": \"n\", \"plan\": \"@\"}"},
	        {"/v1/accounts",
	         "{\"name\": \"n\", \"plan\": \"paid\", \"monthly_spend_cap\": \"@\"}"},
	        {"/v1/sandboxes",
	         "{\"id\": \"@\", \"account_id\": \"mine\", \"vcpus\": 1, \"memory_gib\": 1}"},
	        {"/v1/sandboxes",
	         "{\"id\": \"sb-x\", \"account_id\": \"@\", \"vcpus\": 1, \"memory_gib\": 1}"},
	        {"/v1/sandboxes", "{\"id\": \"sb-x\", \"account_id\": \"mine\", \"vcpus\": \"@\", "
	                          "\"memory_gib\": 1}"},
	        {"/v1/sandboxes", "{\"id\": \"sb-x\", \"account_id\": \"mine\", \"vcpus\": 1, "
	                          "\"memory_gib\": \"@\"}"},
	        {"/v1/sandboxes", "{\"id\": \"sb-x\", \"account_id\": \"mine\", \"vcpus\": 1, "
	                          "\"memory_gib\": 1, \"started_at\": \"@\"}"},
	        {"/v1/sandboxes/sb-mine/stop", "{\"stopped_at\": \"@\"}"},
	        {"/v1/quota/check", "{\"account_id\": \"@\", \"vcpus\": 1, \"memory_gib\": 1}"},
	        {"/v1/quota/check",
	         "{\"account_id\": \"mine\", \"vcpus\": \"@\", \"memory_gib\": 1}"},
	        {"/v1/estimates", "{\"runs_per_month\": \"@\", \"minutes_per_run\": 1, \"vcpus\": "
	                          "1, \"memory_gib\": 1, \"avg_busy_vcpus\": 1}"},
	        {"PATCH /v1/accounts/mine", "{\"monthly_spend_cap\": \"@\"}"},
	        {"PATCH /v1/accounts/mine", "{\"max_concurrent\": \"@\"}"},
	};
	static const char *const gets[] = {
	        "/v1/accounts/@",
	        "/v1/accounts/mine/usage?from=@&to=2026-01-01T00:00:00Z",
	        "/v1/accounts/mine/usage?from=2026-01-01T00:00:00Z&to=@",
	        "/v1/accounts/mine/invoices/@",
	        "/v1/accounts/mine/invoices/2026-11?format=@",
	        "/v1/accounts/mine/forecast?month=@",
	        "/v1/accounts/mine/forecast?month=2026-11&at=@",
	        "/v1/accounts/mine/exports/2026-11?format=@",
	        "/v1/sandboxes/@",
	        "/v1/sandboxes/@/usage?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z",
	        "/v1/rates?vcpus=@&memory_gib=1",
	        "/dashboard?account=@",
	        "/dashboard/sandboxes/@",
	        "/login/@",
	};
	long accounts = count(f, "SELECT count(*) FROM accounts");
	long sandboxes = count(f, "SELECT count(*) FROM sandboxes");
	int sent = 0;
	for (size_t h = 0; h < sizeof hostile / sizeof hostile[0]; h++) {
		char json_str[256], url_str[256];
		/* as a JSON string, and percent-encoded for a URL */
		snprintf(json_str, sizeof json_str, "%s", hostile[h]);
		size_t n = 0;
		for (const unsigned char *p = (const unsigned char *)hostile[h]; *p && n < 240; p++)
			n += (size_t)snprintf(url_str + n, sizeof url_str - n,
			                      (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')
			                              ? "%c"
			                              : "%%%02X",
			                      *p);
		for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
			char body[1024], *at = strchr(bodies[b][1], '@');
			snprintf(body, sizeof body, "%.*s%s%s", (int)(at - bodies[b][1]),
			         bodies[b][1], json_str, at + 1);
			bool patch = strncmp(bodies[b][0], "PATCH ", 6) == 0;
			struct http_res r =
			        call(f, patch ? "PATCH" : "POST",
			             patch ? bodies[b][0] + 6 : bodies[b][0], f->admin, body);
			if (r.status < 400 || r.status >= 500)
				fail_msg("POST %s %s: %d %s", bodies[b][0], body, r.status,
				         r.body ? r.body : "");
			http_free(&r);
			sent++;
		}
		for (size_t g = 0; g < sizeof gets / sizeof gets[0]; g++) {
			char path[1024], *at = strchr(gets[g], '@');
			snprintf(path, sizeof path, "%.*s%s%s", (int)(at - gets[g]), gets[g],
			         url_str, at + 1);
			struct http_res r = call(f, "GET", path, f->admin, NULL);
			/* a login link that is no link sends back to the login page */
			bool to_login = r.status == 303 && strncmp(r.location, "/login", 6) == 0;
			if ((r.status < 400 || r.status >= 500) && !to_login)
				fail_msg("GET %s: %d %s", path, r.status, r.body ? r.body : "");
			http_free(&r);
			sent++;
		}
		/* A free-text field takes it as it is, and gives it back as it is. */
		char body[512];
		cJSON *o = cJSON_CreateObject();
		char id[32];
		snprintf(id, sizeof id, "named-%zu", h);
		cJSON_AddStringToObject(o, "id", id);
		cJSON_AddStringToObject(o, "name", hostile[h]);
		cJSON_AddStringToObject(o, "plan", "paid");
		char *text = cJSON_PrintUnformatted(o);
		snprintf(body, sizeof body, "%s", text);
		free(text);
		cJSON_Delete(o);
		struct http_res r = call(f, "POST", "/v1/accounts", f->admin, body);
		if (r.status != 201) {
			fail_msg("an account named \"%s\": %d %s", hostile[h], r.status,
			         r.body ? r.body : "");
		}
		bool made = r.status == 201;
		http_free(&r);
		if (made) {
			char path[64];
			snprintf(path, sizeof path, "/v1/accounts/%s", id);
			r = call(f, "GET", path, f->admin, NULL);
			cJSON *got = http_json(&r);
			cJSON *name = cJSON_GetObjectItemCaseSensitive(got, "name");
			assert_true(cJSON_IsString(name));
			assert_string_equal(name->valuestring, hostile[h]);
			cJSON_Delete(got);
			http_free(&r);
			accounts++;
		}
	}
	assert_true(sent > 200);
	/* Nothing was dropped, added or changed behind the API's back. */
	assert_int_equal(count(f, "SELECT count(*) FROM accounts"), accounts);
	assert_int_equal(count(f, "SELECT count(*) FROM sandboxes"), sandboxes);
	assert_int_equal(count(f, "SELECT count(*) FROM samples"), 0);
	assert_int_equal(count(f, "SELECT count(*) FROM api_keys"), 3);
}

static void read_api_log(struct fx *f, char *buf, size_t len)
{
	FILE *fp = fopen(f->api.log, "r");
	size_t n = fp ? fread(buf, 1, len - 1, fp) : 0;
	if (fp)
		fclose(fp);
	buf[n] = '\0';
}

static void keys_never_reach_the_log_checked(void **state)
{
	struct fx *f = *state;
	const char *keys[] = {f->admin, f->mine, f->theirs};
	for (int i = 0; i < 3; i++) {
		struct http_res r = call(f, "GET", "/v1/accounts/mine", keys[i], NULL);
		http_free(&r);
		char path[160];
		snprintf(path, sizeof path, "/v1/accounts/%s", keys[i]);
		r = call(f, "GET", path, f->admin, NULL);
		http_free(&r);
	}
	char wrong[KEY_LEN + 1];
	snprintf(wrong, sizeof wrong, "%s", f->mine);
	wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
	struct http_res r = call(f, "GET", "/v1/accounts/mine", wrong, NULL);
	assert_int_equal(r.status, 401);
	http_free(&r);
	char body[256];
	snprintf(body, sizeof body, "key=%s", f->mine);
	http_do_ex(f->api.port, "POST", "/login", NULL, body, strlen(body),
	           "Content-Type: application/x-www-form-urlencoded", &r);
	assert_int_equal(r.status, 303);
	http_free(&r);
	char *log = malloc(1 << 20);
	read_api_log(f, log, 1 << 20);
	assert_non_null(strstr(log, "debug")); /* the log is there and talkative */
	const char *all[] = {f->admin, f->mine, f->theirs, wrong};
	for (int i = 0; i < 4; i++)
		if (strstr(log, all[i] + 3)) /* the secret part, with or without "mk_" */
			fail_msg("key %d is in the API's log", i);
	free(log);
}

/* A raw connection to the API. */
static int raw(struct fx *f)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->api.port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		fail_msg("cannot connect: %s", strerror(errno));
	return fd;
}

/* The status of the answer on fd, 0 when the connection closed without one. */
static int answer_status(int fd, int timeout_ms)
{
	char buf[512];
	struct pollfd p = {fd, POLLIN, 0};
	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	int st = 0;
	return sscanf(buf, "HTTP/1.%*d %d", &st) == 1 ? st : 0;
}

static void healthy(struct fx *f)
{
	struct http_res r = call(f, "GET", "/healthz", NULL, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
}

static void oversized_headers_paths_and_bodies_are_refused(void **state)
{
	struct fx *f = *state;
	size_t big = 128 * 1024;
	char *req = malloc(big + 256);
	/* one header of 128 KiB */
	int n = snprintf(req, 256, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	memcpy(req + n + big, "\r\n\r\n", 4);
	int fd = raw(f);
	ssize_t sent = send(fd, req, (size_t)n + big + 4, MSG_NOSIGNAL);
	int st = answer_status(fd, 5000);
	close(fd);
	if (st != 431 && st != 413 && st != 400 && !(st == 0 && sent >= 0))
		fail_msg("a 128 KiB header: %d", st);
	healthy(f);
	/* a path of 8 KiB */
	memcpy(req, "GET /", 5);
	memset(req + 5, 'p', 8192);
	n = snprintf(req + 5 + 8192, 64, " HTTP/1.1\r\nHost: x\r\n\r\n");
	fd = raw(f);
	send(fd, req, (size_t)(5 + 8192 + n), MSG_NOSIGNAL);
	st = answer_status(fd, 5000);
	close(fd);
	if (st != 414 && st != 431 && st != 400 && st != 0)
		fail_msg("an 8 KiB path: %d", st);
	healthy(f);
	/* a body that says it is 1 GiB */
	fd = raw(f);
	n = snprintf(req, 256,
	             "POST /v1/estimates HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n"
	             "Content-Type: application/json\r\n\r\n{");
	send(fd, req, (size_t)n, MSG_NOSIGNAL);
	memset(req, ' ', 65536);
	for (int i = 0; i < 8; i++)
		if (send(fd, req, 65536, MSG_NOSIGNAL) < 0)
			break;
	st = answer_status(fd, 5000);
	close(fd);
	if (st != 413 && st != 0)
		fail_msg("a 1 GiB body: %d", st);
	healthy(f);
	free(req);
}

/* Sends text one byte every 400 ms; the number of bytes the server took before it cut us off. */
static int dribble(int fd, const char *text, int max_ms)
{
	int sent = 0;
	for (int t = 0; text[sent] && t < max_ms; t += 400) {
		if (send(fd, text + sent, 1, MSG_NOSIGNAL) != 1)
			return sent;
		sent++;
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, 400) == 1) {
			char c;
			if (recv(fd, &c, 1, MSG_DONTWAIT) <= 0)
				return sent; /* closed */
		}
	}
	return -1;
}

static void a_client_sending_a_byte_at_a_time_is_cut_off(void **state)
{
	struct fx *f = *state;
	/* headers, a byte at a time (the API runs with --request-timeout=2) */
	static const char head[] = "GET /v1/accounts/mine HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	                           "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
	int fd = raw(f);
	int took = dribble(fd, head, 15000);
	close(fd);
	if (took < 0)
		fail_msg("a client sending one byte at a time was not cut off in 15 s");
	assert_true(took < (int)strlen(head));
	/* a body, a byte at a time, after whole headers */
	static const char post[] = "POST /v1/estimates HTTP/1.1\r\nHost: x\r\nContent-Type: "
	                           "application/json\r\nContent-Length: 60\r\n\r\n";
	fd = raw(f);
	assert_int_equal(send(fd, post, strlen(post), MSG_NOSIGNAL), (ssize_t)strlen(post));
	took = dribble(fd, "{\"runs_per_month\": 1, \"minutes_per_run\": 1, \"vcpus\": 1,     ",
	               15000);
	close(fd);
	if (took < 0)
		fail_msg("a body sent one byte at a time was not cut off in 15 s");
	/* while a prompt client on a kept-alive connection is served */
	healthy(f);
	sleep_ms(100);
	char *log = malloc(1 << 20);
	read_api_log(f, log, 1 << 20);
	assert_non_null(strstr(log, "sent no whole request in 2 s"));
	free(log);
}

struct register_call {
	struct fx *f;
	int status;
};

static void *register_waiting(void *arg)
{
	struct register_call *g = arg;
	static const char body[] = "{\"id\": \"sb-wait\", \"account_id\": \"mine\", \"vcpus\": 1, "
	                           "\"memory_gib\": 1}";
	struct http_res r;
	http_do(g->f->api.port, "POST", "/v1/sandboxes", g->f->admin, body, strlen(body), &r);
	g->status = r.status;
	http_free(&r);
	return NULL;
}

/*
 * A whole request that meter-api has not read yet, because its request
 * threads are busy, is the server's delay, not a slow client's: the watchdog
 * leaves it, and it is answered once a thread is free. One request thread,
 * --request-timeout=1, and a registration holding that thread for 2 s on its
 * account's row (locked here) while the other request waits unread.
 */
static void a_whole_request_left_unread_while_threads_are_busy_is_answered(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api);
	setenv("METER_THREADS", "1", 1);
	bool started = api_start(&f->api, METER_API_BIN, f->db.api_url, "--request-timeout=1");
	unsetenv("METER_THREADS");
	assert_true(started);
	int fd = raw(f); /* accepted while the thread is free */
	sleep_ms(200);
	sql(f, "BEGIN");
	sql(f, "SELECT 1 FROM accounts WHERE id = 'mine' FOR UPDATE");
	struct register_call g = {.f = f};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, register_waiting, &g), 0);
	sleep_ms(300); /* the registration holds the one thread */
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
	sleep_ms(2500); /* past --request-timeout, unread all the while */
	sql(f, "COMMIT");
	pthread_join(t, NULL);
	int st = answer_status(fd, 10000);
	close(fd);
	if (st != 200)
		fail_msg("the request left unread was %s (registration: %d)",
		         st == 0 ? "cut off without an answer" : "not answered", g.status);
	char *log = malloc(1 << 20);
	read_api_log(f, log, 1 << 20);
	assert_null(strstr(log, "sent no whole request"));
	free(log);
}

/* A connection to the test's database as role (the private cluster trusts its socket). */
static PGconn *connect_as(struct fx *f, const char *role)
{
	char url[4200];
	snprintf(url, sizeof url, "%s user=%s", f->db.url, role);
	PGconn *c = PQconnectdb(url);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("cannot connect as %s: %s", role, PQerrorMessage(c));
	return c;
}

/* The SQLSTATE of a sample sent through meter_samples_ingest on c ("" when it went in). */
static const char *ingest(PGconn *c, const char *row, char *st, size_t len)
{
	char q[1024];
	snprintf(q, sizeof q, "SELECT meter_samples_ingest(ARRAY[ROW(%s)::meter_sample_row])", row);
	PGresult *res = PQexec(c, q);
	const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	snprintf(st, len, "%s", PQresultStatus(res) == PGRES_TUPLES_OK ? "" : code ? code : "?");
	PQclear(res);
	return st;
}

/* Who ended sb-victim ("running" while nobody has). */
static const char *victim_ended_by(struct fx *f, char *v, size_t len)
{
	return testdb_value(&f->db,
	                    "SELECT coalesce(ended_by, 'running') FROM sandboxes WHERE id = "
	                    "'sb-victim'",
	                    v, len);
}

/*
 * A collector's role forges nothing beyond its host's samples. Two login
 * roles of meter_collector, bound to host-1 and host-2 (collector_hosts):
 * host-1's cannot send host-2's samples, cannot register a sandbox into an
 * account that does not allow the collector to (victim), and its end of an
 * incarnation host-2 began is ignored; host-2's own end counts, and host-1
 * registers and ends a sandbox in an account that allows it (mine).
 */
/* Two login roles of meter_collector, bound to host-1 and host-2. */
static void bind_two_hosts(struct fx *f)
{
	char q[512];
	for (int i = 0; i < 2; i++) {
		snprintf(f->roles[i], sizeof f->roles[i], "meter_test_h%d_%d", i + 1,
		         (int)getpid());
		snprintf(
		        q, sizeof q,
		        "CREATE ROLE %s LOGIN IN ROLE meter_collector; INSERT INTO collector_hosts "
		        "VALUES ('%s', 'host-%d')",
		        f->roles[i], f->roles[i], i + 1);
		sql(f, q);
	}
}

#define ROW_AT(sb, inc, ago, acct, host, vcpus, gib, ended)                                        \
	"'" sb "', " #inc ", now() - interval '" ago "', '" acct "', '" host "', 60000000, 1024, " \
	"2048, 512, " #gib "::bigint * 1073741824, " #vcpus " * 1000, " #ended

static void a_collectors_role_registers_and_ends_only_what_its_host_may(void **state)
{
	struct fx *f = *state;
	char v[64], st[16];
	bind_two_hosts(f);
	sql(f, "UPDATE accounts SET collector_registration = (id = 'mine')");
	PGconn *h1 = connect_as(f, f->roles[0]), *h2 = connect_as(f, f->roles[1]);
	/* host-2 begins victim's incarnation 7 */
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-victim", 7, "40 minutes", "victim", "host-2", 1, 1, false),
	               st, sizeof st),
	        "");
	/* host-1 may not send host-2's samples: the batch is refused whole */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-victim", 7, "30 minutes", "victim", "host-2", 1, 1, true), st,
	               sizeof st),
	        "42501");
	/* a sandbox of 64 vCPU and 1 TiB into victim's account: kept as samples, not registered */
	assert_string_equal(
	        ingest(h1, ROW_AT("forged-1", 1, "30 minutes", "victim", "host-1", 64, 1024, false),
	               st, sizeof st),
	        "");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM sandboxes WHERE id = 'forged-1'", v,
	                                 sizeof v),
	                    "0");
	/* an end of victim's incarnation 7 from host-1: stored, not counted */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-victim", 7, "20 minutes", "victim", "host-1", 1, 1, true), st,
	               sizeof st),
	        "");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM incarnation_ends WHERE sandbox_id = "
	                                 "'sb-victim'",
	                                 v, sizeof v),
	                    "0");
	assert_string_equal(victim_ended_by(f, v, sizeof v), "running");
	/* mine allows the collector: host-1 registers own-1 and ends it */
	assert_string_equal(ingest(h1,
	                           ROW_AT("own-1", 1, "30 minutes", "mine", "host-1", 2, 4, false),
	                           st, sizeof st),
	                    "");
	assert_string_equal(ingest(h1,
	                           ROW_AT("own-1", 1, "25 minutes", "mine", "host-1", 2, 4, true),
	                           st, sizeof st),
	                    "");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT account_id || ' ' || vcpus || ' ' || "
	                                 "coalesce(ended_by, 'running') FROM sandboxes "
	                                 "WHERE id = 'own-1'",
	                                 v, sizeof v),
	                    "mine 2.000 collector");
	/* host-2's own end of victim's incarnation counts */
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-victim", 7, "10 minutes", "victim", "host-2", 1, 1, true), st,
	               sizeof st),
	        "");
	assert_string_equal(victim_ended_by(f, v, sizeof v), "collector");
	/* nor does the rollup (meter-api's) register forged-1 when it takes its mark: it waits */
	for (int i = 0; i < 200 && strcmp(testdb_value(&f->db,
	                                               "SELECT coalesce(max(waiting_kind), '') "
	                                               "FROM rollup_queue WHERE sandbox_id = "
	                                               "'forged-1'",
	                                               v, sizeof v),
	                                  "unregistered") != 0;
	     i++)
		sleep_ms(50);
	assert_string_equal(v, "unregistered");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM sandboxes WHERE id = 'forged-1'", v,
	                                 sizeof v),
	                    "0");
	PQfinish(h1);
	PQfinish(h2);
}

/* A sandbox's incarnation, the one waiting, and who ended it ("running"). */
static const char *incarnations(struct fx *f, const char *sb, char *v, size_t len)
{
	char q[256];
	snprintf(q, sizeof q,
	         "SELECT concat_ws(' ', incarnation, coalesce(next_incarnation::text, '-'), "
	         "coalesce(ended_by, 'running')) FROM sandboxes WHERE id = '%s'",
	         sb);
	return testdb_value(&f->db, q, v, len);
}

/*
 * A host cannot stop another host's sandbox by starting an incarnation of it
 * and ending that: a new incarnation from another host waits while the
 * running one's host still sends it. It takes over once the running one has
 * ended (a sandbox moved, the old host's end coming after the new host's
 * first samples), or its host has sent nothing of it for five minutes (a
 * host gone), from its own first sample.
 */
static void another_hosts_incarnation_takes_over_only_an_ended_or_silent_one(void **state)
{
	struct fx *f = *state;
	char v[96], st[16];
	bind_two_hosts(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('sb-moved', 'victim', 1, 1, now() - interval '1 hour'), "
	       "('sb-gone', 'victim', 1, 1, now() - interval '1 hour')");
	PGconn *h1 = connect_as(f, f->roles[0]), *h2 = connect_as(f, f->roles[1]);
	/* host-1 runs victim's incarnation 7, and sends it still */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-victim", 7, "40 minutes", "victim", "host-1", 1, 1, false),
	               st, sizeof st),
	        "");
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-victim", 7, "1 minute", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	/* host-2 starts incarnation 8 of it and ends it: 8 waits, 7 runs */
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-victim", 8, "50 seconds", "victim", "host-2", 1, 1, false),
	               st, sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-victim", v, sizeof v), "7 8 running");
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-victim", 8, "40 seconds", "victim", "host-2", 1, 1, true), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-victim", v, sizeof v), "7 8 running");
	/* host-1's own end of 7 ends it; 8, ended too, does not take over */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-victim", 7, "30 seconds", "victim", "host-1", 1, 1, true), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-victim", v, sizeof v), "7 - collector");

	/* a sandbox moved: host-2's incarnation 3 begins before host-1's end of 2 */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-moved", 2, "30 minutes", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-moved", 2, "1 minute", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-moved", 3, "50 seconds", "victim", "host-2", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-moved", v, sizeof v), "2 3 running");
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-moved", 2, "45 seconds", "victim", "host-1", 1, 1, true), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-moved", v, sizeof v), "3 - running");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT incarnation_from = (SELECT min(ts) FROM samples "
	                                 "WHERE sandbox_id = 'sb-moved' AND incarnation = 3) "
	                                 "FROM sandboxes WHERE id = 'sb-moved'",
	                                 v, sizeof v),
	                    "t");

	/* a host gone: host-1 last sent incarnation 4 twenty minutes ago; host-2's 5,
	 * begun 17 minutes ago, waits, and takes over at its sample of 10 minutes
	 * ago (host-1 silent for more than five minutes before it), from its first */
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-gone", 4, "30 minutes", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-gone", 4, "20 minutes", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-gone", 5, "17 minutes", "victim", "host-2", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-gone", v, sizeof v), "4 5 running");
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-gone", 5, "10 minutes", "victim", "host-2", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-gone", v, sizeof v), "5 - running");
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT incarnation_from = (SELECT min(ts) FROM samples "
	                                 "WHERE sandbox_id = 'sb-gone' AND incarnation = 5) "
	                                 "FROM sandboxes WHERE id = 'sb-gone'",
	                                 v, sizeof v),
	                    "t");
	/* and host-1, back, cannot take it back while host-2 sends it */
	assert_string_equal(
	        ingest(h2, ROW_AT("sb-gone", 5, "1 minute", "victim", "host-2", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(
	        ingest(h1, ROW_AT("sb-gone", 6, "30 seconds", "victim", "host-1", 1, 1, false), st,
	               sizeof st),
	        "");
	assert_string_equal(incarnations(f, "sb-gone", v, sizeof v), "5 6 running");
	PQfinish(h1);
	PQfinish(h2);
}
#undef ROW_AT

/* GET path with key, sent whole on a connection of its own; its answer is read later. */
/* The same with a receive buffer of rcvbuf bytes when not 0 (a small window: a slow reader). */
static int request_sent_ex(struct fx *f, const char *path, const char *key, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->api.port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 ||
	    (rcvbuf && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) != 0) ||
	    connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		fail_msg("cannot connect: %s", strerror(errno));
	char req[512];
	int n = snprintf(req, sizeof req,
	                 "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
	                 "Connection: close\r\n\r\n",
	                 path, key);
	if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		fail_msg("cannot send %s: %s", path, strerror(errno));
	return fd;
}

static int request_sent(struct fx *f, const char *path, const char *key)
{
	return request_sent_ex(f, path, key, 0);
}

/*
 * Expensive reads wait on their lane, not in the quota check's way: 24 reads
 * of a sandbox's usage over 400 days, each held in the database (this
 * month's samples locked), more than the request threads (8) and the
 * database connections (8); quota checks are answered all the while, and
 * the reads once the lock goes. With --slow-threads=0 (slow routes on the
 * request threads, as before the lane) the checks wait behind them.
 */
static void expensive_reads_wait_on_their_lane_not_the_quota_checks(void **state)
{
	struct fx *f = *state;
	enum { READS = 24 };
	api_stop(&f->api);
	const char *args[] = {"--no-rollup", "--slow-threads=2", NULL};
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, args));
	char part[64], lock[128], from[32], to[32], path[160];
	testdb_value(&f->db, "SELECT 'samples_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMM')",
	             part, sizeof part);
	testdb_value(&f->db,
	             "SELECT to_char((now() - interval '399 days') AT TIME ZONE 'UTC', "
	             "'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')",
	             from, sizeof from);
	testdb_value(&f->db,
	             "SELECT to_char((now() + interval '1 hour') AT TIME ZONE 'UTC', "
	             "'YYYY-MM-DD\"T\"HH24:00:00\"Z\"')",
	             to, sizeof to);
	snprintf(lock, sizeof lock, "BEGIN; LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", part);
	sql(f, lock);
	snprintf(path, sizeof path, "/v1/sandboxes/sb-mine/usage?from=%s&to=%s", from, to);
	int reads[READS];
	for (int i = 0; i < READS; i++)
		reads[i] = request_sent(f, path, f->mine);
	sleep_ms(500); /* the lane's reads are in the database, waiting for the lock */
	int saved = http_wait_s;
	http_wait_s = 5;
	static const char q[] = "{\"account_id\": \"mine\", \"vcpus\": 1, \"memory_gib\": 1}";
	for (int i = 0; i < 5; i++) {
		struct http_res r = call(f, "POST", "/v1/quota/check", f->mine, q);
		if (r.status != 200) {
			sql(f, "ROLLBACK");
			fail_msg("quota check %d beside %d held reads: %s", i + 1, READS,
			         r.status ? "not 200" : "no answer in 5 s");
		}
		http_free(&r);
	}
	http_wait_s = saved;
	int st;
	for (int i = 0; i < READS; i++)
		if ((st = answer_status(reads[i], 0)) != -1) {
			sql(f, "ROLLBACK");
			fail_msg("read %d was answered while the lock was held: %d", i + 1, st);
		}
	sql(f, "ROLLBACK");
	for (int i = 0; i < READS; i++) {
		st = answer_status(reads[i], 30000);
		if (st != 200)
			fail_msg("read %d, once the lock went: %d", i + 1, st);
		close(reads[i]);
	}
}

/*
 * Slow export readers hold no database connection: eight clients ask for a
 * large export (160,000 sandboxes, about 7 MB) and never read it, more than
 * the connections left beside the quarter kept for quota checks (6 of 8).
 * Another export, a usage page and quota checks are all answered 200 while
 * they hang. A streamed export held its connection to its last byte: the
 * seventh reader on was answered 503, and so was the export after them.
 */
/* Whether the server closed fd (it reads as the end of the stream). */
static bool closed_by_server(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	char c;
	return poll(&p, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* mine gets 160,000 sandboxes of an hour this month (a usage export of about 7 MB);
 * path gets that export's, month this month. */
static void big_account(struct fx *f, char *path, size_t len, char month[8])
{
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "SELECT 'big-' || i, 'mine', 2, 4, date_trunc('month', now()), "
	       "date_trunc('month', now()) + interval '1 hour' FROM generate_series(1, 160000) i");
	sql(f, "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	       "cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	       "SELECT 'mine', 'big-' || i, date_trunc('month', now()), 1, 1800000000, 1800000000, "
	       "1800000000, 1800000000, 3600000000, 4000 * 3600000000::bigint "
	       "FROM generate_series(1, 160000) i");
	testdb_value(&f->db, "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM')", month, 8);
	snprintf(path, len, "/v1/accounts/mine/exports/%s?format=usage", month);
}

/*
 * Connections that wait on their client are closed in time: one kept alive
 * after its answer, by the watchdog (--request-timeout 2), and one whose
 * client reads nothing of a 7 MB answer, by the idle timeout (--idle-timeout
 * 2), which holds only while an answer is under way. The reader, drained
 * after 10 s, gets less than the whole export: what the kernel had taken
 * before the connection was closed.
 */
static void kept_alive_and_unread_connections_are_closed_in_time(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api);
	const char *args[] = {"--no-rollup", "--request-timeout=2", "--idle-timeout=2", NULL};
	assert_true(api_start_args(&f->api, METER_API_BIN, f->db.api_url, args));
	char month[8], path[96];
	big_account(f, path, sizeof path, month);
	int kept = raw(f);
	static const char get[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	assert_int_equal(send(kept, get, strlen(get), MSG_NOSIGNAL), (ssize_t)strlen(get));
	assert_int_equal(answer_status(kept, 5000), 200);
	int reader = request_sent_ex(f, path, f->mine, 4096);
	assert_int_equal(answer_status(reader, 30000), 200);
	sleep_ms(10000);
	if (!closed_by_server(kept))
		fail_msg("a kept-alive connection idle for 10 s is still open (--request-timeout "
		         "2)");
	close(kept);
	long got = 0;
	for (;;) {
		char buf[65536];
		struct pollfd q = {reader, POLLIN, 0};
		if (poll(&q, 1, 2000) != 1)
			fail_msg(
			        "an answer unread for 10 s is still being sent (--idle-timeout 2)");
		ssize_t n = recv(reader, buf, sizeof buf, 0);
		if (n <= 0)
			break;
		got += n;
	}
	close(reader);
	struct http_res e = call(f, "GET", path, f->mine, NULL);
	assert_int_equal(e.status, 200);
	if (got >= (long)e.len)
		fail_msg("the unread answer was sent whole (%ld bytes) after 10 s", got);
	http_free(&e);
}

static void slow_export_readers_hold_no_database_connection(void **state)
{
	struct fx *f = *state;
	enum { READERS = 8 };
	char month[8], path[96];
	big_account(f, path, sizeof path, month);
	int readers[READERS];
	for (int i = 0; i < READERS; i++) {
		readers[i] = request_sent_ex(f, path, f->mine, 4096);
		int st = answer_status(readers[i], 30000); /* its first bytes, then nothing read */
		if (st != 200)
			fail_msg("slow reader %d of the export: %d", i + 1, st);
	}
	struct http_res e = call(f, "GET", path, f->mine, NULL);
	if (e.status != 200)
		fail_msg("an export beside %d slow readers: %d", READERS, e.status);
	assert_true(e.len > 1000000);
	http_free(&e);
	snprintf(path, sizeof path,
	         "/v1/accounts/mine/usage?from=%s-01T00:00:00Z&to=%s-02T00:00:00Z", month, month);
	struct http_res u = call(f, "GET", path, f->mine, NULL);
	assert_int_equal(u.status, 200);
	http_free(&u);
	static const char q[] = "{\"account_id\": \"mine\", \"vcpus\": 1, \"memory_gib\": 1}";
	for (int i = 0; i < 5; i++) {
		struct http_res r = call(f, "POST", "/v1/quota/check", f->mine, q);
		assert_int_equal(r.status, 200);
		http_free(&r);
	}
	for (int i = 0; i < READERS; i++)
		close(readers[i]);
}

/* A connection from 127.0.0.(2 + a), its headers begun and never ended. */
static int loris_from(struct fx *f, int a)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in src = {.sin_family = AF_INET};
	src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)a);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->api.port)};
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
	    connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0)
		fail_msg("cannot connect from 127.0.0.%d: %s", 2 + a, strerror(errno));
	static const char head[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ";
	send(fd, head, strlen(head), MSG_NOSIGNAL);
	return fd;
}

/*
 * Slowloris from several addresses: more connections of endless headers
 * than --max-connections (64 here; 8 addresses, one of them holding most),
 * each address under the per-address limit, and a request timeout (60 s)
 * too long to help. Quota checks are still answered at once: past the soft
 * limit the busiest address gives up its oldest connection, and the other
 * addresses keep theirs.
 */
static void slow_headers_from_many_addresses_leave_room_for_quota_checks(void **state)
{
	struct fx *f = *state;
	api_stop(&f->api);
	setenv("METER_MAX_CONNECTIONS", "64", 1);
	bool started = api_start(&f->api, METER_API_BIN, f->db.api_url, "--request-timeout=60");
	unsetenv("METER_MAX_CONNECTIONS");
	assert_true(started);
	enum { BUSY = 72, FEW = 4, OTHERS = 7 };
	int busy[BUSY], few[OTHERS][FEW];
	for (int i = 0; i < BUSY; i++)
		busy[i] = loris_from(f, 0);
	for (int a = 0; a < OTHERS; a++)
		for (int i = 0; i < FEW; i++)
			few[a][i] = loris_from(f, 1 + a);
	sleep_ms(300);
	int saved = http_wait_s;
	http_wait_s = 5;
	static const char q[] = "{\"account_id\": \"mine\", \"vcpus\": 1, \"memory_gib\": 1}";
	for (int i = 0; i < 5; i++) {
		struct http_res r = call(f, "POST", "/v1/quota/check", f->mine, q);
		if (r.status != 200)
			fail_msg("quota check %d under slow headers: %s", i + 1,
			         r.status ? "not 200" : "no answer in 5 s");
		http_free(&r);
	}
	http_wait_s = saved;
	sleep_ms(300);
	int busy_cut = 0;
	for (int i = 0; i < BUSY; i++)
		busy_cut += closed_by_server(busy[i]);
	for (int a = 0; a < OTHERS; a++)
		for (int i = 0; i < FEW; i++)
			if (closed_by_server(few[a][i]))
				fail_msg("127.0.0.%d, holding %d connections, lost one while "
				         "127.0.0.2 "
				         "held more",
				         3 + a, FEW);
	/* 72 + 28 + the checks into 60: the busiest address gave up the rest */
	assert_true(busy_cut >= BUSY + OTHERS * FEW - 60);
	struct http_res m = call(f, "GET", "/metrics", f->admin, NULL);
	assert_int_equal(m.status, 200);
	const char *shed = strstr(m.body, "meter_http_connections_cut_total{reason=\"shed\"} ");
	assert_non_null(shed);
	assert_true(atoi(shed + strlen("meter_http_connections_cut_total{reason=\"shed\"} ")) >=
	            busy_cut);
	http_free(&m);
	for (int i = 0; i < BUSY; i++)
		close(busy[i]);
	for (int a = 0; a < OTHERS; a++)
		for (int i = 0; i < FEW; i++)
			close(few[a][i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(every_route_refuses_another_accounts_key, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                hook_keys_check_quotas_and_register_and_stop_sandboxes_only, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(sql_metacharacters_in_every_field_are_data, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(keys_never_reach_the_log_checked, setup, teardown),
	        cmocka_unit_test_setup_teardown(oversized_headers_paths_and_bodies_are_refused,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_whole_request_left_unread_while_threads_are_busy_is_answered, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_client_sending_a_byte_at_a_time_is_cut_off, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                slow_headers_from_many_addresses_leave_room_for_quota_checks, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                a_collectors_role_registers_and_ends_only_what_its_host_may, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                another_hosts_incarnation_takes_over_only_an_ended_or_silent_one, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                expensive_reads_wait_on_their_lane_not_the_quota_checks, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                kept_alive_and_unread_connections_are_closed_in_time, setup, teardown),
	        cmocka_unit_test_setup_teardown(slow_export_readers_hold_no_database_connection,
	                                        setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
