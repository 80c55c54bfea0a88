/*
 * tests/support/apifx.c: the fixture of the API tests and their shared
 * helpers (apifx.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "tests/support/apifx.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "meter/decimal.h"
#include "meter/money.h"
#include "tests/support/cluster.h"
#include "tests/support/run.h"

void sql(struct fx *f, const char *q)
{
	if (!testdb_exec(&f->db, q))
		fail_msg("SQL failed");
}

long num(struct fx *f, const char *q)
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

char *text(struct fx *f, const char *q, char *buf, size_t len)
{
	if (testdb_value(&f->db, q, buf, len) == NULL)
		fail_msg("%s gave nothing", q);
	return buf;
}

static void key(struct fx *f, const char *account, char *out)
{
	if (!testdb_key(&f->db, account, out))
		fail_msg("no key");
}

int apifx_setup(void **state)
{
	/* Raw partitions are dropped by the one test that means to (the test data is old). */
	setenv("METER_RAW_RETENTION", "0", 1);
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !testdb_create_migrated(&f->db, "api")) {
		free(f);
		return -1;
	}
	*state = f;
	if (!api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info"))
		return -1;
	return 0;
}

int apifx_teardown(void **state)
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

void seed(struct fx *f)
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

void wait_rollups(struct fx *f)
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

struct http_res call(struct fx *f, const char *method, const char *path, const char *k,
                     const char *body)
{
	struct http_res r;
	http_do(f->api.port, method, path, k, body, body ? strlen(body) : 0, &r);
	return r;
}

cJSON *get_json(struct fx *f, const char *path, int want)
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

struct http_res form_post(struct fx *f, const char *path, const char *body, const char *header)
{
	struct http_res r;
	http_do_ex(f->api.port, "POST", path, NULL, body, body ? strlen(body) : 0, header, &r);
	return r;
}

void cookie_of(const struct http_res *r, char *out, size_t len)
{
	snprintf(out, len, "Cookie: %.*s", (int)strcspn(r->cookie, ";"), r->cookie);
}

int tcp(int port)
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

const char *str(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsString(v))
		fail_msg("field %s is not a string", name);
	return v->valuestring;
}

int64_t nano_of(cJSON *o, const char *name)
{
	int64_t v;
	if (meter_decimal_parse(str(o, name), 9, true, &v) != METER_OK)
		fail_msg("%s is not a decimal", name);
	return v;
}

void check_focus(const char *csv, const char *total, int usage_rows)
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

void login_link(struct fx *f, const char *account, char *out, size_t len)
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
