/* Migrations and roles on a real PostgreSQL (DATABASE_URL or the private cluster). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "migrations/migrate.h"
#include "tests/support/run.h"
#include "tests/support/testdb.h"

static struct run_result res;

/* What a test makes, undone by teardown even when the test fails. */
struct fixture {
	struct testdb t;
	char dir[64];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	if (f == NULL || !testdb_create(&f->t, "mig")) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	testdb_drop(&f->t);
	if (f->dir[0]) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
		if (system(cmd) != 0)
			return -1;
	}
	free(f);
	return 0;
}

static void migrate(struct testdb *t, const char *dir)
{
	const char *argv[] = {METER_BIN, "migrate", dir ? "--dir" : NULL, dir, NULL};
	run_program(argv, t->url, &res);
}

/* Copies the checkout's migrations into a fresh temporary folder. */
static void copy_migrations(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/meter-migrations-XXXXXX");
	assert_non_null(mkdtemp(dir));
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "cp %s/*.sql %s/", migrate_default_dir(), dir);
	assert_int_equal(system(cmd), 0);
}

/* How many migrations the checkout has. */
static int count_migrations(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "ls %s/*.sql | wc -l", migrate_default_dir());
	FILE *p = popen(cmd, "r");
	int n = 0;
	if (p == NULL || fscanf(p, "%d", &n) != 1)
		n = -1;
	if (p)
		pclose(p);
	return n;
}

static void write_file(const char *dir, const char *name, const char *text, const char *mode)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, mode);
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void migrating_an_empty_database_then_again_is_a_no_op(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[256];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "applied 0001_init.sql"));
	const char *tables[] = {"accounts", "api_keys",     "price_plans",     "sandboxes",
	                        "samples",  "usage_hourly", "meter_migrations"};
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		char sql[256];
		snprintf(sql, sizeof sql, "SELECT to_regclass('%s') IS NOT NULL", tables[i]);
		assert_string_equal(testdb_value(t, sql, v, sizeof v), "t");
	}
	assert_string_equal(
	        testdb_value(t,
	                     "SELECT name || ' ' || effective_from || ' ' || "
	                     "cpu_vcpu_hour || ' ' || memory_gib_hour || ' ' || cpu_floor "
	                     "FROM price_plans",
	                     v, sizeof v),
	        "default 2026-09-25 00:00:00+00 0.025000000 0.007500000 0.025000");
	/* samples is partitioned by month, with a default partition */
	assert_string_equal(testdb_value(t,
	                                 "SELECT count(*) >= 13 FROM pg_inherits "
	                                 "WHERE inhparent = 'samples'::regclass",
	                                 v, sizeof v),
	                    "t");
	char before[256];
	testdb_value(t, "SELECT max(applied_at) FROM meter_migrations", before, sizeof before);

	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	char expect[64], files[8];
	snprintf(files, sizeof files, "%d", count_migrations());
	snprintf(expect, sizeof expect, "0 applied now, %s already applied", files);
	assert_non_null(strstr(res.out, expect));
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM meter_migrations", v, sizeof v),
	                    files);
	assert_string_equal(
	        testdb_value(t, "SELECT max(applied_at) FROM meter_migrations", v, sizeof v),
	        before);
}

static void a_migration_changed_after_it_was_applied_is_refused_by_name(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char *dir = f->dir, v[64];
	copy_migrations(dir, sizeof f->dir);
	migrate(t, dir);
	assert_int_equal(res.status, 0);
	write_file(dir, "0001_init.sql", "-- an innocent-looking edit\n", "a");
	write_file(dir, "9001_more.sql", "CREATE TABLE more_stuff (a int);\n", "w");
	migrate(t, dir);
	assert_int_equal(res.status, 1);
	assert_non_null(
	        strstr(res.err, "migration 0001_init.sql was changed after it was applied"));
	assert_int_equal(run_lines(res.err), 1);
	/* and nothing after it was applied */
	assert_string_equal(
	        testdb_value(t, "SELECT to_regclass('more_stuff') IS NULL", v, sizeof v), "t");
}

static void a_failing_migration_leaves_nothing_behind(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char *dir = f->dir, v[64];
	copy_migrations(dir, sizeof f->dir);
	write_file(dir, "9002_bad.sql",
	           "CREATE TABLE half_done (a int);\n\nSELECT no_such_column FROM half_done;\n",
	           "w");
	migrate(t, dir);
	assert_int_equal(res.status, 1);
	assert_non_null(strstr(res.err, "migration 9002_bad.sql failed at line 3"));
	assert_non_null(strstr(res.err, "no_such_column"));
	assert_string_equal(testdb_value(t, "SELECT to_regclass('half_done') IS NULL", v, sizeof v),
	                    "t");
	assert_string_equal(
	        testdb_value(t, "SELECT count(*) FROM meter_migrations WHERE version = 9002", v,
	                     sizeof v),
	        "0");
	/* fixed, it applies */
	write_file(dir, "9002_bad.sql", "CREATE TABLE half_done (a int);\n", "w");
	migrate(t, dir);
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "applied 9002_bad.sql"));

	/* a file named out of pattern is refused, naming it */
	write_file(dir, "3_x.sql", "SELECT 1;\n", "w");
	migrate(t, dir);
	assert_int_equal(res.status, 1);
	assert_non_null(strstr(res.err, "\"3_x.sql\" is not named NNNN_name.sql"));
}

static void two_runners_at_once_apply_each_migration_once(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[64];
	pid_t pids[4];
	for (int i = 0; i < 4; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			struct run_result *r = malloc(sizeof *r);
			const char *argv[] = {METER_BIN, "migrate", NULL};
			run_program(argv, t->url, r);
			if (r->status != 0)
				fprintf(stderr, "runner %d: %s", i, r->err);
			_exit(r->status);
		}
	}
	for (int i = 0; i < 4; i++) {
		int st;
		assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
	}
	char files[8];
	snprintf(files, sizeof files, "%d", count_migrations());
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM meter_migrations", v, sizeof v),
	                    files);
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM price_plans", v, sizeof v), "1");
}

#define SAMPLE_ROW                                                                                 \
	"('sb-1', 11, '2026-10-01T00:00:10Z', 'acme', 'host-a', 5000000, 1024, 2048, 512, "        \
	"4294967296, 2000)"

static void the_collector_role_may_insert_samples_and_nothing_else(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[64], st[16];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	assert_string_equal(testdb_sqlstate(t, "SET ROLE meter_collector", st, sizeof st), "");

	/* The write path: COPY into a staging table, then insert what is new. */
	assert_string_equal(testdb_sqlstate(t,
	                                    "CREATE TEMP TABLE staging (sandbox_id text, "
	                                    "incarnation bigint, ts timestamptz, account_id text, "
	                                    "host text, cpu_usage_us bigint, m1 bigint, m2 bigint, "
	                                    "m3 bigint, m4 bigint, c1 bigint)",
	                                    st, sizeof st),
	                    "");
	assert_string_equal(
	        testdb_sqlstate(t, "INSERT INTO staging VALUES " SAMPLE_ROW, st, sizeof st), "");
	for (int i = 0; i < 2; i++) /* the same batch twice */
		assert_string_equal(testdb_sqlstate(t,
		                                    "INSERT INTO samples SELECT * FROM staging "
		                                    "ON CONFLICT DO NOTHING",
		                                    st, sizeof st),
		                    "");

	const char *denied[] = {
	        "SELECT * FROM samples",
	        "DELETE FROM samples",
	        "UPDATE samples SET cpu_usage_us = 0",
	        "TRUNCATE samples",
	        "SELECT * FROM accounts",
	        "SELECT * FROM api_keys",
	        "INSERT INTO accounts (id, name, plan) VALUES ('x', 'x', 'paid')",
	        "UPDATE price_plans SET cpu_vcpu_hour = 0",
	        "SELECT * FROM usage_hourly",
	        "DROP TABLE samples",
	};
	for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
		const char *code = testdb_sqlstate(t, denied[i], st, sizeof st);
		if (strcmp(code, "42501") != 0)
			fail_msg("collector could run \"%s\" (sqlstate \"%s\")", denied[i], code);
	}
	assert_string_equal(testdb_sqlstate(t, "RESET ROLE", st, sizeof st), "");
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM samples", v, sizeof v), "1");
	/* It went to its month's partition, not the default one. */
	assert_string_equal(testdb_value(t, "SELECT tableoid::regclass FROM samples", v, sizeof v),
	                    "samples_202610");
}

static void the_schema_refuses_impossible_rows(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char st[16];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	struct {
		const char *sql, *code;
	} cases[] = {
	        {"INSERT INTO accounts (id, name, plan) VALUES ('a b', 'x', 'paid')", "23514"},
	        {"INSERT INTO accounts (id, name, plan) VALUES ('a', 'x', 'gold')", "23514"},
	        {"INSERT INTO accounts (id, name, plan, monthly_spend_cap) "
	         "VALUES ('a', 'x', 'paid', -1)",
	         "23514"},
	        {"INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', 'trial')", ""},
	        {"INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	         "VALUES ('s', 'acme', 0, 4)",
	         "23514"},
	        {"INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	         "VALUES ('s', 'nobody', 2, 4)",
	         "23503"},
	        {"INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, "
	         "stopped_at) "
	         "VALUES ('s', 'acme', 2, 4, '2026-10-02', '2026-10-01')",
	         "23514"},
	        {"INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	         "VALUES ('s', 1, '2026-10-01', 'h', -5)",
	         "23514"},
	        {"INSERT INTO api_keys (key_hash, shown, role) "
	         "VALUES (sha256('x'), 'mk_', 'account')",
	         "23514"},
	        {"INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id) "
	         "VALUES ('acme', 's', '2026-10-01T00:30:00Z', 1)",
	         "23514"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *code = testdb_sqlstate(t, cases[i].sql, st, sizeof st);
		if (strcmp(code, cases[i].code) != 0)
			fail_msg("\"%s\": sqlstate \"%s\", expected \"%s\"", cases[i].sql, code,
			         cases[i].code);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(migrating_an_empty_database_then_again_is_a_no_op,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_migration_changed_after_it_was_applied_is_refused_by_name, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_failing_migration_leaves_nothing_behind, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(two_runners_at_once_apply_each_migration_once,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                the_collector_role_may_insert_samples_and_nothing_else, setup, teardown),
	        cmocka_unit_test_setup_teardown(the_schema_refuses_impossible_rows, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
