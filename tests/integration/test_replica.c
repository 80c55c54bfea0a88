/*
 * test_replica: meter-api's reads from a streaming replica.
 *
 * A private primary, migrated, and a streaming replica of it made with
 * pg_basebackup (scripts/pg.sh replica: a second data folder, its own port).
 * meter-api A reads from the replica (--read-database-url), meter-api P from
 * the primary only. The test checks that
 *   - once the replica has caught up, A's usage, sandbox usage, draft invoice,
 *     forecast and export are byte for byte P's;
 *   - A's reads come from the replica: with its replay paused, A still shows
 *     the usage from before, while its quota check (primary) and P show the
 *     new usage; a third meter-api allowing 1 s of delay reads the primary
 *     then, and its /readyz says the replica is behind;
 *   - with the replica stopped, A's reads go to the primary at once (no
 *     request fails) and /readyz and /metrics say so; started again, reads go
 *     back to it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/db.h"
#include "common/keys.h"
#include "tests/support/cluster.h"
#include "tests/support/fakecg.h"
#include "tests/support/http.h"

struct fx {
	char tmp[64], pgdir[128], repdir[128], url[256], rurl[256];
	PGconn *db;  /* the primary */
	PGconn *rdb; /* the replica */
	struct api_proc a, p, strict;
	char admin[KEY_LEN + 1];
	int rport; /* the replica's TCP port */
	char month[16], from[32], to[32];
};

static void sql(PGconn *c, const char *q)
{
	PGresult *r = PQexec(c, q);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		fail_msg("%s: %s", q, PQerrorMessage(c));
	PQclear(r);
}

static char *value(PGconn *c, const char *q, char *out, size_t len)
{
	PGresult *r = PQexec(c, q);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		fail_msg("%s: %s", q, PQerrorMessage(c));
	snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return out;
}

/* A request's answer: status want, the body returned (caller frees). */
static char *get(struct api_proc *a, const char *key, const char *method, const char *path,
                 const char *body, int want)
{
	struct http_res r;
	http_do(a->port, method, path, key, body, body ? strlen(body) : 0, &r);
	if ((int)r.status != want)
		fail_msg("%s %s: %d %s", method, path, r.status, r.body ? r.body : "");
	char *out = strdup(r.body ? r.body : "");
	http_free(&r);
	return out;
}

static cJSON *get_json(struct api_proc *a, const char *key, const char *method, const char *path,
                       const char *body)
{
	char *text = get(a, key, method, path, body, 200);
	cJSON *j = cJSON_Parse(text);
	if (j == NULL)
		fail_msg("%s %s: not JSON: %s", method, path, text);
	free(text);
	return j;
}

/* A body without the fields that say when it was made. */
static char *stable(const char *body)
{
	cJSON *j = cJSON_Parse(body);
	if (j == NULL)
		return strdup(body);
	cJSON_DeleteItemFromObjectCaseSensitive(j, "data_as_of");
	char *out = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return out;
}

static void wait_rollups(struct fx *f)
{
	char v[32];
	for (int i = 0; i < 600; i++) {
		if (strcmp(value(f->db, "SELECT count(*) FROM rollup_queue", v, sizeof v), "0") ==
		    0)
			return;
		sleep_ms(50);
	}
	fail_msg("rollups did not finish in 30 s");
}

/* Until the replica has replayed everything the primary has written. */
static void wait_caught_up(struct fx *f)
{
	char lsn[64], q[256], v[16];
	value(f->db, "SELECT pg_current_wal_lsn()", lsn, sizeof lsn);
	snprintf(q, sizeof q, "SELECT pg_last_wal_replay_lsn() >= '%s'::pg_lsn", lsn);
	for (int i = 0; i < 600; i++) {
		if (strcmp(value(f->rdb, q, v, sizeof v), "t") == 0)
			return;
		sleep_ms(50);
	}
	fail_msg("the replica did not catch up in 30 s");
}

static cJSON *readyz(struct api_proc *a)
{
	return get_json(a, NULL, "GET", "/readyz", NULL);
}

static const char *str(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : "";
}

/* /readyz of a until it says reads go to where (up to 10 s). */
static void wait_reads(struct api_proc *a, const char *state, const char *where)
{
	for (int i = 0; i < 100; i++) {
		cJSON *j = readyz(a);
		bool done = strcmp(str(j, "read_database"), state) == 0 &&
		            strcmp(str(j, "reads"), where) == 0;
		if (done || i == 99) {
			if (!done)
				fail_msg("/readyz: %s, %s (%s), not %s, %s",
				         str(j, "read_database"), str(j, "reads"),
				         str(j, "read_database_detail"), state, where);
			cJSON_Delete(j);
			return;
		}
		cJSON_Delete(j);
		sleep_ms(100);
	}
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !test_tmpdir(f->tmp, sizeof f->tmp, "replica"))
		return -1;
	*state = f;
	snprintf(f->pgdir, sizeof f->pgdir, "%s/pg", f->tmp);
	snprintf(f->repdir, sizeof f->repdir, "%s/replica", f->tmp);
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	api_stop(&f->a);
	api_stop(&f->p);
	api_stop(&f->strict);
	PQfinish(f->db);
	PQfinish(f->rdb);
	unsetenv("METER_READ_DATABASE_URL");
	cluster_destroy(f->repdir);
	cluster_destroy(f->pgdir);
	fakecg_remove(f->tmp);
	free(f);
	return 0;
}

static void start_api(struct fx *f, struct api_proc *a, bool replica, const char *arg)
{
	if (replica)
		setenv("METER_READ_DATABASE_URL", f->rurl, 1);
	bool ok = api_start(a, METER_API_BIN, f->url, arg);
	unsetenv("METER_READ_DATABASE_URL");
	if (!ok)
		fail_msg("meter-api did not start");
}

/* Primary, replica, the two APIs, an account with two sandboxes and an hour of samples. */
static void bring_up(struct fx *f)
{
	char err[512];
	if (!cluster_start_migrated(f->pgdir, METER_BIN, f->url, sizeof f->url))
		fail_msg("the primary did not start");
	/* The replica listens on a TCP port of its own (and a socket folder of its own). */
	bool made = false;
	for (int t = 0; t < 5 && !made; t++) {
		int port = 26000 + (getpid() * 13 + t * 977) % 20000;
		char cmd[512];
		snprintf(cmd, sizeof cmd, "replica '%s' --port %d", f->pgdir, port);
		made = cluster_pg(f->repdir, cmd);
		if (made) {
			f->rport = port;
			snprintf(f->rurl, sizeof f->rurl, "postgresql://meter@127.0.0.1:%d/meter",
			         port);
		} else
			cluster_destroy(f->repdir); /* the port was taken, most likely */
	}
	if (!made)
		fail_msg("no streaming replica: scripts/pg.sh replica failed (pg_basebackup)");
	f->db = db_connect(f->url, err, sizeof err);
	f->rdb = f->db ? db_connect(f->rurl, err, sizeof err) : NULL;
	if (f->rdb == NULL)
		fail_msg("%s", err);
	char v[8];
	if (strcmp(value(f->rdb, "SELECT pg_is_in_recovery()", v, sizeof v), "t") != 0)
		fail_msg("the replica is not in recovery");
	int64_t id;
	if (!key_create(f->db, "admin", NULL, f->admin, &id, err, sizeof err))
		fail_msg("%s", err);
	start_api(f, &f->a, true, "--read-max-lag=1h");
	start_api(f, &f->p, false, "--no-rollup");

	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(f->month, sizeof f->month, "%Y-%m", &tm);
	time_t a = now - now % 3600 - 7200, b = now - now % 3600 + 7200;
	gmtime_r(&a, &tm);
	strftime(f->from, sizeof f->from, "%Y-%m-%dT%H:00:00Z", &tm);
	gmtime_r(&b, &tm);
	strftime(f->to, sizeof f->to, "%Y-%m-%dT%H:00:00Z", &tm);

	free(get(&f->a, f->admin, "POST", "/v1/accounts",
	         "{\"id\": \"rep\", \"name\": \"Replicated\", \"plan\": \"paid\"}", 201));
	sql(f->db, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	           "('r1', 'rep', 2, 4, now() - interval '50 minutes'), "
	           "('r2', 'rep', 1, 2, now() - interval '40 minutes')");
	sql(f->db, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	           "SELECT s, 1, now() - interval '1 minute' * m, 'h', (45 - m) * 30000000::bigint "
	           "FROM unnest(ARRAY['r1', 'r2']) s, generate_series(1, 39) m");
	wait_rollups(f);
	wait_caught_up(f);
}

/* The reads A serves, each the same as P's. */
static void same_answers(struct fx *f)
{
	char paths[5][256];
	snprintf(paths[0], sizeof paths[0], "/v1/accounts/rep/usage?from=%s&to=%s", f->from, f->to);
	snprintf(paths[1], sizeof paths[1], "/v1/sandboxes/r1/usage?from=%s&to=%s", f->from, f->to);
	snprintf(paths[2], sizeof paths[2], "/v1/accounts/rep/invoices/%s", f->month);
	snprintf(paths[3], sizeof paths[3], "/v1/accounts/rep/forecast?month=%s&at=%s", f->month,
	         f->to);
	snprintf(paths[4], sizeof paths[4], "/v1/accounts/rep/exports/%s?format=focus", f->month);
	for (int i = 0; i < 5; i++) {
		char *x = get(&f->a, f->admin, "GET", paths[i], NULL, 200);
		char *y = get(&f->p, f->admin, "GET", paths[i], NULL, 200);
		char *sx = stable(x), *sy = stable(y);
		if (strcmp(sx, sy) != 0)
			fail_msg("GET %s: from the replica\n%s\nfrom the primary\n%s", paths[i], sx,
			         sy);
		free(x);
		free(y);
		free(sx);
		free(sy);
	}
}

static char *cpu_seconds(struct fx *f, struct api_proc *a, char *out, size_t len)
{
	char path[256];
	snprintf(path, sizeof path, "/v1/accounts/rep/usage?from=%s&to=%s", f->from, f->to);
	cJSON *j = get_json(a, f->admin, "GET", path, NULL);
	snprintf(out, len, "%s", str(j, "cpu_seconds"));
	cJSON_Delete(j);
	return out;
}

static char *quota_cost(struct fx *f, struct api_proc *a, char *out, size_t len)
{
	cJSON *j = get_json(a, f->admin, "POST", "/v1/quota/check",
	                    "{\"account_id\": \"rep\", \"vcpus\": 1, \"memory_gib\": 1}");
	snprintf(out, len, "%s", str(j, "month_to_date_exact"));
	cJSON_Delete(j);
	return out;
}

static void reads_come_from_the_replica_and_match_the_primary(void **state)
{
	struct fx *f = *state;
	bring_up(f);
	wait_reads(&f->a, "ok", "replica");
	same_answers(f);

	/* Replay paused: the replica keeps the old figures, the primary gets new ones. */
	char before[32], after[32], x[32], y[32];
	cpu_seconds(f, &f->p, before, sizeof before);
	sql(f->rdb, "SELECT pg_wal_replay_pause()");
	sql(f->db, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	           "('r1', 1, now(), 'h', 3600000000)");
	wait_rollups(f);
	cpu_seconds(f, &f->p, after, sizeof after);
	if (strcmp(before, after) == 0)
		fail_msg("the new sample changed nothing on the primary (%s)", before);
	assert_string_equal(cpu_seconds(f, &f->a, x, sizeof x), before);
	/* The quota check reads the primary. */
	assert_string_equal(quota_cost(f, &f->a, x, sizeof x), quota_cost(f, &f->p, y, sizeof y));
	/* An API that allows 1 s of delay reads the primary meanwhile, and says why. */
	sleep_ms(1500);
	start_api(f, &f->strict, true, "--read-max-lag=1s");
	wait_reads(&f->strict, "behind", "primary");
	assert_string_equal(cpu_seconds(f, &f->strict, x, sizeof x), after);

	/* Replay resumed: the same answers again, and the strict API back on the replica. */
	sql(f->rdb, "SELECT pg_wal_replay_resume()");
	wait_caught_up(f);
	assert_string_equal(cpu_seconds(f, &f->a, x, sizeof x), after);
	same_answers(f);
	wait_reads(&f->strict, "ok", "replica");
}

static void with_the_replica_down_reads_go_to_the_primary(void **state)
{
	struct fx *f = *state;
	bring_up(f);
	wait_reads(&f->a, "ok", "replica");
	char want[32], x[32];
	cpu_seconds(f, &f->p, want, sizeof want);
	PQfinish(f->rdb);
	f->rdb = NULL;
	if (!cluster_pg(f->repdir, "stop"))
		fail_msg("the replica did not stop");
	/* No request fails: the first one after the stop already reads the primary. */
	for (int i = 0; i < 20; i++)
		assert_string_equal(cpu_seconds(f, &f->a, x, sizeof x), want);
	cJSON *j = readyz(&f->a);
	assert_string_equal(str(j, "status"), "degraded"); /* the primary serves all */
	assert_string_equal(str(j, "read_database"), "unavailable");
	assert_string_equal(str(j, "reads"), "primary");
	cJSON_Delete(j);
	char *m = get(&f->a, NULL, "GET", "/metrics", NULL, 200);
	if (strstr(m, "\nmeter_read_replica_used 0\n") == NULL)
		fail_msg("/metrics does not say reads left the replica:\n%s", m);
	free(m);
	/* Writes go on. */
	free(get(&f->a, f->admin, "POST", "/v1/sandboxes",
	         "{\"id\": \"r3\", \"account_id\": \"rep\", \"vcpus\": 1, \"memory_gib\": 1}",
	         201));

	char cmd[64];
	snprintf(cmd, sizeof cmd, "start --port %d", f->rport);
	if (!cluster_pg(f->repdir, cmd))
		fail_msg("the replica did not start again");
	wait_reads(&f->a, "ok", "replica");
	m = get(&f->a, NULL, "GET", "/metrics", NULL, 200);
	if (strstr(m, "\nmeter_read_replica_used 1\n") == NULL)
		fail_msg("/metrics does not say reads are back on the replica:\n%s", m);
	free(m);
	assert_string_equal(cpu_seconds(f, &f->a, x, sizeof x), want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(reads_come_from_the_replica_and_match_the_primary,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(with_the_replica_down_reads_go_to_the_primary,
	                                        setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
