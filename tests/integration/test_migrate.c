/* Migrations and roles on a real PostgreSQL (DATABASE_URL or the private cluster). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector/batch.h"
#include "collector/writer.h"
#include "common/ids.h"
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

/* Copies the checkout's migrations (numbered, functions/, history.sums, citus/) into a fresh
 * temporary folder. */
static void copy_migrations(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/meter-migrations-XXXXXX");
	assert_non_null(mkdtemp(dir));
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "cp -r %s/. %s/", migrate_default_dir(), dir);
	assert_int_equal(system(cmd), 0);
}

/*
 * The last release: the commit whose migrations (0001 to 0039, each function
 * defined in them) databases were migrated with before the function definitions
 * moved to migrations/functions/ and the numbered files were rewritten.
 */
#define LAST_RELEASE "4a2f7f4368c943b8045375c3a820bdc2716cb057"

/* The last release's migrations before number first into a fresh temporary folder, from the
 * checkout's git history (a test that needs it says so when it is not there). */
static void release_migrations(char *dir, size_t len, const char *first)
{
	snprintf(dir, len, "/tmp/meter-release-XXXXXX");
	assert_non_null(mkdtemp(dir));
	char cmd[2048];
	snprintf(cmd, sizeof cmd,
	         "git -C %s archive %s migrations | tar -x -C %s --strip-components=1 && "
	         "for x in %s/[0-9]*.sql; do n=$(basename $x); [ ${n%%%%_*} \\< %s ] || rm $x; "
	         "done",
	         METER_SOURCE_DIR, LAST_RELEASE, dir, dir, first);
	if (system(cmd) != 0)
		fail_msg("the last release's migrations (commit %s) are not in the checkout's git "
		         "history: this test needs a clone of meter's repository with its history",
		         LAST_RELEASE);
}

/* How many numbered migrations the checkout has. */
static int count_migrations(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "ls %s/[0-9]*.sql | wc -l", migrate_default_dir());
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
	"4294967296, 2000, false)"

static void the_collector_role_may_ingest_samples_and_read_account_limits_only(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[64], st[16];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	assert_string_equal(testdb_sqlstate(t, "SET ROLE meter_collector", st, sizeof st), "");

	/* The write path: meter_samples_ingest, and nothing else; a batch sent twice counts once.
	 */
	for (int i = 0; i < 2; i++)
		assert_string_equal(
		        testdb_sqlstate(t,
		                        "SELECT meter_samples_ingest(ARRAY[ROW" SAMPLE_ROW
		                        "::meter_sample_row])",
		                        st, sizeof st),
		        "");

	/* what --enforce reads: whether an account is over a limit */
	assert_string_equal(testdb_sqlstate(t, "SELECT * FROM account_limits", st, sizeof st), "");
	const char *denied[] = {
	        "INSERT INTO samples (sandbox_id, incarnation, ts) VALUES ('x', 1, now())",
	        "INSERT INTO account_limits VALUES ('x', true, true, '2026-10-01')",
	        "UPDATE account_limits SET trial_exhausted = false",
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

/*
 * Ready for sharding (docs/scaling.md). Every table that grows with usage is
 * distributed by the sandbox or by the account, and carries that column in its
 * primary key and in every unique index, so Citus can distribute the schema as
 * it is. A table added without a decision here fails the test.
 */
enum group {
	BY_SANDBOX,  /* distributed by the sandbox id, co-located with sandboxes */
	BY_ACCOUNT,  /* distributed by the account id, co-located with accounts */
	REFERENCE,   /* small, copied to every node (create_reference_table) */
	COORDINATOR, /* stays a plain table on the coordinator */
};

static const struct placement {
	const char *table;
	enum group group;
	const char *key; /* the distribution column (BY_SANDBOX and BY_ACCOUNT only) */
} placements[] = {
        /* The raw ingest side: a collector knows only the sandbox. */
        {"sandboxes", BY_SANDBOX, "id"},
        {"samples", BY_SANDBOX, "sandbox_id"},
        {"sample_seeds", BY_SANDBOX, "sandbox_id"},
        {"rollup_checkpoints", BY_SANDBOX, "sandbox_id"},
        {"rollup_queue", BY_SANDBOX, "sandbox_id"},
        {"incarnation_ends", BY_SANDBOX, "sandbox_id"},
        /* The billing side: every read the API serves names the account. */
        {"accounts", BY_ACCOUNT, "id"},
        {"usage_hourly", BY_ACCOUNT, "account_id"},
        {"account_month", BY_ACCOUNT, "account_id"},
        {"account_day", BY_ACCOUNT, "account_id"},
        {"account_month_sandboxes", BY_ACCOUNT, "account_id"},
        {"invoices", BY_ACCOUNT, "account_id"},
        {"invoice_quantities", BY_ACCOUNT, "account_id"},
        {"limit_notices", BY_ACCOUNT, "account_id"},
        {"usage_unpriced", BY_ACCOUNT, "account_id"},
        {"trial_crossing", BY_ACCOUNT, "account_id"},
        {"trial_cover", BY_ACCOUNT, "account_id"},
        {"trial_queue", BY_ACCOUNT, "account_id"},
        {"sandbox_month", BY_ACCOUNT, "account_id"},
        {"sandbox_month_cost", BY_ACCOUNT, "account_id"},
        {"usage_listings", BY_ACCOUNT, "account_id"},
        {"account_limits", BY_ACCOUNT, "account_id"},
        {"account_ledger", BY_ACCOUNT, "account_id"},
        {"invoice_sandboxes", BY_ACCOUNT, "account_id"},
        {"webhook_deliveries", BY_ACCOUNT, "account_id"},
        {"webhook_attempts", BY_ACCOUNT, "account_id"},
        /* Small tables that do not grow with usage. */
        {"price_plans", REFERENCE, NULL},
        {"api_keys", REFERENCE, NULL},
        {"sessions", REFERENCE, NULL},
        {"sample_horizon", REFERENCE, NULL},
        {"webhook_endpoints", REFERENCE, NULL},
        {"collector_hosts", REFERENCE, NULL},
        {"meter_migrations", COORDINATOR, NULL},
        {"meter_functions", COORDINATOR, NULL},
};

/* Foreign keys Citus cannot keep: between the two groups, or from a reference
 * table to a distributed one. The Citus path drops them first (sorted). */
#define DROPPED_ON_CITUS                                                                           \
	"api_keys.api_keys_account_id_fkey, sandboxes.sandboxes_account_id_fkey, "                 \
	"sessions.sessions_account_id_fkey, webhook_endpoints.webhook_endpoints_account_id_fkey"

/* Statement-level triggers on tables Citus would manage, which it does not
 * propagate to shards: the Citus path replaces them first (sorted). */
#define STATEMENT_TRIGGERS_ON_CITUS                                                                \
	"invoice_quantities.invoice_quantities_no_truncate, "                                      \
	"invoice_sandboxes.invoice_sandboxes_no_truncate, invoices.invoices_no_truncate, "         \
	"limit_notices.limit_notices_no_truncate, samples.samples_mark"

static const struct placement *placement_of(const char *table)
{
	for (size_t i = 0; i < sizeof placements / sizeof placements[0]; i++)
		if (strcmp(placements[i].table, table) == 0)
			return &placements[i];
	return NULL;
}

static bool distributed(const struct placement *p)
{
	return p != NULL && (p->group == BY_SANDBOX || p->group == BY_ACCOUNT);
}

/* What is wrong with the schema for Citus, one line each. */
struct problems {
	char text[16384];
	size_t len;
};

static void note(struct problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(struct problems *p, const char *fmt, ...)
{
	if (p->len >= sizeof p->text - 1)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		p->len += (size_t)n;
	if (p->len >= sizeof p->text - 1) {
		p->len = sizeof p->text - 1;
		return;
	}
	p->text[p->len++] = '\n';
	p->text[p->len] = '\0';
}

/* Runs a catalog query with text parameters; fails the test when it fails. */
static PGresult *catalog(struct testdb *t, const char *sql, int n, const char *const *params)
{
	PGresult *r = PQexecParams(t->conn, sql, n, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("catalog query failed: %s", PQerrorMessage(t->conn));
	return r;
}

/* Whether a list "a, b, c" holds the name. */
static bool listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *s = list; *s;) {
		const char *end = strstr(s, ", ");
		size_t len = end ? (size_t)(end - s) : strlen(s);
		if (len == n && strncmp(s, name, n) == 0)
			return true;
		if (end == NULL)
			break;
		s = end + 2;
	}
	return false;
}

static void append(char *list, size_t len, const char *name)
{
	size_t used = strlen(list);
	snprintf(list + used, len - used, "%s%s", used ? ", " : "", name);
}

/* Every table of the schema is placed, and nothing placed is missing. */
static void check_tables(struct testdb *t, struct problems *p)
{
	PGresult *r = catalog(t,
	                      "SELECT c.relname, coalesce(parent.relname, '') "
	                      "FROM pg_class c "
	                      "LEFT JOIN pg_inherits i ON i.inhrelid = c.oid "
	                      "LEFT JOIN pg_class parent ON parent.oid = i.inhparent "
	                      "WHERE c.relnamespace = 'public'::regnamespace "
	                      "AND c.relkind IN ('r', 'p', 'f') ORDER BY 1",
	                      0, NULL);
	for (int i = 0; i < PQntuples(r); i++) {
		const char *table = PQgetvalue(r, i, 0), *parent = PQgetvalue(r, i, 1);
		if (parent[0]) {
			if (!distributed(placement_of(parent)))
				note(p,
				     "table \"%s\" inherits from \"%s\", which is not distributed",
				     table, parent);
			continue;
		}
		if (placement_of(table) == NULL)
			note(p,
			     "table \"%s\" has no place on the way to Citus: decide whether it is "
			     "distributed by the sandbox or by the account (with that column in "
			     "its "
			     "primary key), a reference table or a coordinator table, and say so "
			     "in "
			     "placements[] of tests/integration/test_migrate.c and in "
			     "docs/scaling.md",
			     table);
	}
	for (size_t k = 0; k < sizeof placements / sizeof placements[0]; k++) {
		bool found = false;
		for (int i = 0; i < PQntuples(r) && !found; i++)
			found = strcmp(PQgetvalue(r, i, 0), placements[k].table) == 0;
		if (!found)
			note(p,
			     "table \"%s\" is placed but does not exist: remove it from "
			     "placements[]",
			     placements[k].table);
	}
	PQclear(r);
}

/* A distributed table: its key is a meter_id in its primary key and in every
 * unique index; a partitioned one has its partition key in the primary key too. */
static void check_keys(struct testdb *t, const struct placement *d, struct problems *p)
{
	const char *params[] = {d->table, d->key};
	PGresult *r = catalog(
	        t,
	        "SELECT coalesce(format_type(a.atttypid, NULL), ''), "
	        "(SELECT string_agg(k.attname, ', ' ORDER BY u.i) "
	        "   FROM pg_constraint pk CROSS JOIN unnest(pk.conkey) WITH ORDINALITY u(n, i) "
	        "   JOIN pg_attribute k ON k.attrelid = pk.conrelid AND k.attnum = u.n "
	        "   WHERE pk.conrelid = c.oid AND pk.contype = 'p'), "
	        "(SELECT string_agg(k.attname, ', ' ORDER BY u.i) "
	        "   FROM pg_partitioned_table pt CROSS JOIN "
	        "        unnest(pt.partattrs::int2[]) WITH ORDINALITY u(n, i) "
	        "   JOIN pg_attribute k ON k.attrelid = pt.partrelid AND k.attnum = u.n "
	        "   WHERE pt.partrelid = c.oid) "
	        "FROM pg_class c "
	        "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 "
	        "  AND NOT a.attisdropped "
	        "WHERE c.relname = $1 AND c.relnamespace = 'public'::regnamespace",
	        2, params);
	if (PQntuples(r) != 1) {
		PQclear(r);
		return; /* missing: check_tables says so */
	}
	const char *type = PQgetvalue(r, 0, 0), *pk = PQgetvalue(r, 0, 1),
	           *part = PQgetvalue(r, 0, 2);
	if (strcmp(type, "meter_id") != 0)
		note(p,
		     "table \"%s\": its distribution column \"%s\" %s%s (co-located tables need "
		     "one type: meter_id)",
		     d->table, d->key, type[0] ? "is a " : "does not exist", type);
	if (PQgetisnull(r, 0, 1))
		note(p, "table \"%s\" has no primary key: it must have one that contains \"%s\"",
		     d->table, d->key);
	else if (!listed(pk, d->key))
		note(p, "table \"%s\": its primary key (%s) lacks its distribution column \"%s\"",
		     d->table, pk, d->key);
	if (!PQgetisnull(r, 0, 2) && !PQgetisnull(r, 0, 1)) {
		char copy[512];
		snprintf(copy, sizeof copy, "%s", part);
		for (char *s = copy, *end; s != NULL; s = end ? end + 2 : NULL) {
			end = strstr(s, ", ");
			if (end)
				*end = '\0';
			if (!listed(pk, s))
				note(p,
				     "table \"%s\": its primary key (%s) lacks its partition "
				     "column "
				     "\"%s\"",
				     d->table, pk, s);
		}
	}
	PQclear(r);

	r = catalog(t,
	            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) "
	            "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
	            "WHERE c.relname = $1 AND c.relnamespace = 'public'::regnamespace "
	            "AND (i.indisunique OR i.indisexclusion) "
	            "AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid "
	            "  AND a.attname = $2 AND a.attnum = ANY (i.indkey::int2[])) ORDER BY 1",
	            2, params);
	for (int i = 0; i < PQntuples(r); i++)
		note(p,
		     "table \"%s\": unique index \"%s\" lacks the distribution column \"%s\" "
		     "(Citus can enforce uniqueness only within a shard): %s",
		     d->table, PQgetvalue(r, i, 0), d->key, PQgetvalue(r, i, 1));
	PQclear(r);
}

/* Foreign keys Citus keeps: to a reference table, or between co-located tables
 * on their distribution columns. The others must be exactly DROPPED_ON_CITUS. */
static void check_foreign_keys(struct testdb *t, struct problems *p)
{
	PGresult *r = catalog(
	        t,
	        "SELECT k.conname, k.conrelid::regclass::text, k.confrelid::regclass::text, "
	        "(SELECT string_agg(a.attname || '=' || b.attname, ', ' ORDER BY u.i) "
	        "   FROM unnest(k.conkey, k.confkey) WITH ORDINALITY u(n, fn, i) "
	        "   JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n "
	        "   JOIN pg_attribute b ON b.attrelid = k.confrelid AND b.attnum = u.fn) "
	        "FROM pg_constraint k "
	        "WHERE k.contype = 'f' AND k.connamespace = 'public'::regnamespace "
	        "AND k.conparentid = 0 ORDER BY 2, 1",
	        0, NULL);
	char dropped[2048] = "";
	for (int i = 0; i < PQntuples(r); i++) {
		const char *name = PQgetvalue(r, i, 0), *from = PQgetvalue(r, i, 1),
		           *to = PQgetvalue(r, i, 2), *pairs = PQgetvalue(r, i, 3);
		const struct placement *f = placement_of(from), *g = placement_of(to);
		if (f == NULL || g == NULL)
			continue; /* check_tables says so */
		bool kept = false;
		if (g->group == REFERENCE)
			kept = true;
		else if (distributed(f) && f->group == g->group) {
			char pair[128];
			snprintf(pair, sizeof pair, "%s=%s", f->key, g->key);
			kept = listed(pairs, pair);
		}
		if (!kept) {
			char what[256];
			snprintf(what, sizeof what, "%s.%s", from, name);
			append(dropped, sizeof dropped, what);
		}
	}
	PQclear(r);
	if (strcmp(dropped, DROPPED_ON_CITUS) != 0)
		note(p,
		     "the foreign keys Citus cannot keep are (%s), expected (%s): a foreign key "
		     "between a sandbox-keyed and an account-keyed table, from a reference table "
		     "to a distributed one, or between co-located tables not on their distribution "
		     "columns must be dropped before distributing; avoid it, or add it to "
		     "DROPPED_ON_CITUS in tests/integration/test_migrate.c and to docs/scaling.md",
		     dropped, DROPPED_ON_CITUS);
}

/* Statement-level triggers on tables Citus would manage: exactly the known ones. */
static void check_statement_triggers(struct testdb *t, struct problems *p)
{
	PGresult *r =
	        catalog(t,
	                "SELECT c.relname, t.tgname FROM pg_trigger t "
	                "JOIN pg_class c ON c.oid = t.tgrelid "
	                "WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal "
	                "AND NOT c.relispartition AND (t.tgtype & 1) = 0 ORDER BY 1, 2",
	                0, NULL);
	char found[2048] = "";
	for (int i = 0; i < PQntuples(r); i++) {
		const struct placement *d = placement_of(PQgetvalue(r, i, 0));
		if (d == NULL || d->group == COORDINATOR)
			continue;
		char what[256];
		snprintf(what, sizeof what, "%s.%s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
		append(found, sizeof found, what);
	}
	PQclear(r);
	if (strcmp(found, STATEMENT_TRIGGERS_ON_CITUS) != 0)
		note(p,
		     "the statement-level triggers on tables Citus would manage are (%s), "
		     "expected (%s): Citus does not run them on shards; prefer a row trigger or "
		     "the writer's own statement, or add it to STATEMENT_TRIGGERS_ON_CITUS in "
		     "tests/integration/test_migrate.c and to docs/scaling.md",
		     found, STATEMENT_TRIGGERS_ON_CITUS);
}

static void shard_problems(struct testdb *t, struct problems *p)
{
	p->len = 0;
	p->text[0] = '\0';
	check_tables(t, p);
	for (size_t i = 0; i < sizeof placements / sizeof placements[0]; i++)
		if (distributed(&placements[i]))
			check_keys(t, &placements[i], p);
	check_foreign_keys(t, p);
	check_statement_triggers(t, p);
}

static void every_growing_table_carries_its_distribution_key(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[64];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	static struct problems p;
	shard_problems(t, &p);
	if (p.len > 0) {
		fprintf(stderr, "%s", p.text); /* whole: cmocka cuts long messages */
		fail_msg("the schema is not ready for Citus (see above)");
	}
	/* samples: partitioned by month of ts, keyed by the sandbox first */
	assert_string_equal(testdb_value(t,
	                                 "SELECT pg_get_partkeydef('samples'::regclass) || ' ' || "
	                                 "pg_get_constraintdef(oid) FROM pg_constraint "
	                                 "WHERE conrelid = 'samples'::regclass AND contype = 'p'",
	                                 v, sizeof v),
	                    "RANGE (ts) PRIMARY KEY (sandbox_id, ts, incarnation)");
}

static void a_table_without_its_key_fails_the_shard_check(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	const char *breakage[] = {
	        "CREATE TABLE scratch (a int)",
	        "ALTER TABLE sample_seeds DROP CONSTRAINT sample_seeds_pkey, "
	        "ADD PRIMARY KEY (incarnation, first_ts)",
	        "ALTER TABLE rollup_queue DROP CONSTRAINT rollup_queue_pkey, "
	        "ADD PRIMARY KEY (queued_at, sandbox_id)",
	        "CREATE UNIQUE INDEX seeds_by_time ON sample_seeds (incarnation, first_ts)",
	        "ALTER TABLE account_month DROP CONSTRAINT account_month_pkey",
	        "ALTER TABLE usage_hourly ADD CONSTRAINT usage_sandbox "
	        "FOREIGN KEY (sandbox_id) REFERENCES sandboxes (id)",
	        "CREATE TRIGGER usage_touch AFTER UPDATE ON usage_hourly "
	        "FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change()",
	};
	for (size_t i = 0; i < sizeof breakage / sizeof breakage[0]; i++)
		assert_true(testdb_exec(t, breakage[i]));
	static struct problems p;
	shard_problems(t, &p);
	const char *expected[] = {
	        "table \"scratch\" has no place on the way to Citus",
	        ("table \"sample_seeds\": its primary key (incarnation, first_ts) lacks its "
	         "distribution column \"sandbox_id\""),
	        "unique index \"seeds_by_time\" lacks the distribution column \"sandbox_id\"",
	        "table \"account_month\" has no primary key",
	        "usage_hourly.usage_sandbox",
	        "usage_hourly.usage_touch",
	};
	for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
		if (strstr(p.text, expected[i]) == NULL) {
			fprintf(stderr, "%s", p.text);
			fail_msg("the shard check missed \"%s\" (what it said is above)",
			         expected[i]);
		}
	/* a primary key that still holds the key, in another place, is fine */
	assert_null(strstr(p.text, "table \"rollup_queue\""));
}

/*
 * Migration 0033 (samples' one key) on a database filled under 0032, while a
 * writer keeps sending batches through the collector's write path, retrying a
 * batch that failed as the spool does: every sample there before is there
 * after, unchanged; every batch sent lands once; samples ends with one index
 * per partition, the key (sandbox_id, ts, incarnation).
 */
#define WRITER_ROWS 200

static void write_until_told(const char *url, int stop_fd, int result_fd)
{
	PGconn *c = PQconnectdb(url);
	long batches = 0, inserted = 0, failures = 0;
	struct batch b = {0};
	for (;;) {
		batch_clear(&b);
		for (int i = 0; i < WRITER_ROWS; i++) {
			char id[32];
			snprintf(id, sizeof id, "w-%ld", batches);
			struct cg_reading r = {.cpu_usage_us = 1000 * (i + 1),
			                       .mem_current = CG_ABSENT,
			                       .mem_peak = CG_ABSENT,
			                       .mem_anon_kernel = CG_ABSENT,
			                       .mem_limit = CG_ABSENT,
			                       .cpu_limit_millicores = CG_ABSENT};
			/* 2026-11-20T00:00:00Z, then every 10 s */
			if (!batch_add(&b, id, "", 7, 1795132800000000 + i * 10000000LL, "h", &r))
				_exit(3);
		}
		long n = 0;
		char err[512];
		if (!writer_write(c, "", b.buf, b.len, &n, err, sizeof err)) {
			failures++;
			fprintf(stderr, "writer: %s (sent again)\n", err);
			if (PQstatus(c) != CONNECTION_OK)
				PQreset(c);
			usleep(50000);
			continue;
		}
		batches++;
		inserted += n;
		char byte;
		if (read(stop_fd, &byte, 1) == 0) /* the parent closed it: stop */
			break;
		usleep(20000);
	}
	char line[128];
	int len = snprintf(line, sizeof line, "%ld %ld %ld\n", batches, inserted, failures);
	_exit(write(result_fd, line, (size_t)len) == len ? 0 : 4);
}

static long count_of(struct testdb *t, const char *sql)
{
	char v[64];
	return atol(testdb_value(t, sql, v, sizeof v));
}

/*
 * Migrates t with the checkout's migrations, which must apply name and leave
 * what digest (a query of one value, before the value it read first) reads.
 */
static void migrate_unchanged(struct testdb *t, const char *name, const char *digest,
                              const char *before)
{
	char after[512];
	migrate(t, NULL);
	if (res.status != 0)
		fail_msg("meter migrate failed: %s", res.err);
	char applied[128];
	snprintf(applied, sizeof applied, "applied %s", name);
	assert_non_null(strstr(res.out, applied));
	testdb_value(t, digest, after, sizeof after);
	assert_string_equal(after, before);
}

/*
 * The last release's migrations before number first (and on Citus its
 * placement, so that the ones from first on meet distributed tables), applied:
 * a database as that release left it, to be migrated on with the checkout's.
 */
static void migrate_before(struct fixture *f, const char *first)
{
	release_migrations(f->dir, sizeof f->dir, first);
	migrate(&f->t, f->dir);
	if (res.status != 0)
		fail_msg("meter migrate up to %s failed: %s", first, res.err);
}

static void the_sample_key_is_rebuilt_on_a_filled_database_while_samples_arrive(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[256], cmd[512];
	migrate_before(f, "0033");
	/* on Citus (citus_run.sh), 0033 meets samples distributed */
	if (getenv("METER_TEST_CITUS_WORKERS"))
		assert_string_equal(testdb_value(t,
		                                 "SELECT count(*) FROM pg_dist_partition "
		                                 "WHERE logicalrelid = 'samples'::regclass",
		                                 v, sizeof v),
		                    "1");
	/* 0032's two indexes on each partition */
	assert_string_equal(testdb_value(t,
	                                 "SELECT count(*) FROM pg_indexes "
	                                 "WHERE tablename = 'samples_202610'",
	                                 v, sizeof v),
	                    "2");

	/* three months of 300 sandboxes, two incarnations each, every 10 s */
	assert_true(testdb_exec(t, "INSERT INTO samples (sandbox_id, incarnation, ts, host, "
	                           "  cpu_usage_us, memory_current_bytes) "
	                           "SELECT 'sb-' || (g % 300), 1 + (g / 300) % 2, "
	                           "  '2026-09-15'::timestamptz + (g / 600) * interval '10 s', "
	                           "  'h', g, g % 7 * 1024 "
	                           "FROM generate_series(0, 899999) g"));
	static const char digest[] =
	        "SELECT count(*) || ' ' || sum(cpu_usage_us) || ' ' || "
	        "md5(string_agg(sandbox_id || '/' || incarnation || '/' || ts || '/' || "
	        "cpu_usage_us || '/' || coalesce(memory_current_bytes, -1), ',' "
	        "ORDER BY sandbox_id, incarnation, ts)) FROM samples WHERE sandbox_id LIKE 'sb-%'";
	char before[256], after[256];
	testdb_value(t, digest, before, sizeof before);
	assert_non_null(strstr(before, "900000 "));

	int stop[2], result[2];
	assert_int_equal(pipe(stop), 0);
	assert_int_equal(pipe(result), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(stop[1]);
		close(result[0]);
		fcntl(stop[0], F_SETFL, O_NONBLOCK);
		write_until_told(t->url, stop[0], result[1]);
	}
	close(stop[0]);
	close(result[1]);
	while (count_of(t, "SELECT count(*) FROM samples WHERE sandbox_id LIKE 'w-%'") <
	       2 * WRITER_ROWS)
		usleep(10000);
	migrate(t, NULL);
	long during = count_of(t, "SELECT count(*) FROM samples WHERE sandbox_id LIKE 'w-%'");
	while (count_of(t, "SELECT count(*) FROM samples WHERE sandbox_id LIKE 'w-%'") <
	       during + 2 * WRITER_ROWS)
		usleep(10000);
	close(stop[1]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	char line[128] = {0};
	assert_true(read(result[0], line, sizeof line - 1) > 0);
	close(result[0]);
	long batches = 0, inserted = 0, failures = 0;
	assert_int_equal(sscanf(line, "%ld %ld %ld", &batches, &inserted, &failures), 3);
	if (res.status != 0)
		fail_msg("meter migrate failed: %s", res.err);
	assert_non_null(strstr(res.out, "applied 0033_one_sample_key.sql"));

	/* the samples there before, unchanged; every batch once */
	testdb_value(t, digest, after, sizeof after);
	assert_string_equal(after, before);
	snprintf(cmd, sizeof cmd, "%ld", batches * WRITER_ROWS);
	assert_string_equal(testdb_value(t,
	                                 "SELECT count(*) FROM samples WHERE sandbox_id LIKE 'w-%'",
	                                 v, sizeof v),
	                    cmd);
	assert_int_equal(inserted, batches * WRITER_ROWS);
	assert_string_equal(testdb_value(t,
	                                 "SELECT count(DISTINCT sandbox_id) FROM samples "
	                                 "WHERE sandbox_id LIKE 'w-%'",
	                                 v, sizeof v),
	                    (snprintf(cmd, sizeof cmd, "%ld", batches), cmd));

	/* one index on samples and on each of its partitions: the key */
	assert_string_equal(
	        testdb_value(t,
	                     "SELECT count(*) FILTER (WHERE n <> 1) || ' ' || count(*) FROM "
	                     "(SELECT c.oid, count(i.indexrelid) n FROM pg_class c "
	                     " LEFT JOIN pg_index i ON i.indrelid = c.oid "
	                     " WHERE c.oid = 'samples'::regclass OR c.oid IN "
	                     "  (SELECT inhrelid FROM pg_inherits WHERE inhparent = "
	                     "   'samples'::regclass) GROUP BY c.oid) x",
	                     v, sizeof v),
	        (snprintf(cmd, sizeof cmd, "0 %ld",
	                  1 + count_of(t, "SELECT count(*) FROM pg_inherits "
	                                  "WHERE inhparent = 'samples'::regclass")),
	         cmd));
	assert_string_equal(
	        testdb_value(t, "SELECT pg_get_indexdef('samples_pkey'::regclass)", v, sizeof v),
	        "CREATE UNIQUE INDEX samples_pkey ON ONLY public.samples USING btree "
	        "(sandbox_id, ts, incarnation)");
	/* a partition made after it gets the key too */
	assert_true(testdb_exec(t, "SELECT meter_ensure_sample_partitions('2031-01-01', "
	                           "'2031-01-01')"));
	assert_string_equal(testdb_value(t,
	                                 "SELECT indexdef FROM pg_indexes "
	                                 "WHERE tablename = 'samples_203101'",
	                                 v, sizeof v),
	                    "CREATE UNIQUE INDEX samples_203101_pkey ON public.samples_203101 "
	                    "USING btree (sandbox_id, ts, incarnation)");
	print_message("%ld batches of %d samples during the migration, %ld sent again\n", batches,
	              WRITER_ROWS, failures);
}

/*
 * Migration 0035 (the month tables keyed by sandbox before month) on a
 * database filled under 0034: sandbox_month and sandbox_month_cost keep every
 * row, their keys put the sandbox before the month, and the rollup's lookup of
 * one sandbox from a month on reads that sandbox's rows, not the rest of its
 * account's months (the old key read on from the sandbox's place: a few
 * hundred blocks here). meter_sandbox_month_costs, run again, finds nothing
 * to change.
 */
static void the_month_keys_are_rebuilt_on_a_filled_database(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[256];
	migrate_before(f, "0035");
	/* 3 accounts of 4,000 sandboxes over two months, priced by the default plan,
	 * and their cost rows from the rollup's own function */
	assert_true(testdb_exec(t, "INSERT INTO sandbox_month (account_id, month, sandbox_id, "
	                           "  price_plan_id, cpu_measured_us, cpu_billed_us, busy_us, "
	                           "  idle_us, wall_us, memory_mgib_us) "
	                           "SELECT 'a-' || g % 3, m, 'sb-' || g, 1, g * 1000, g * 1000, "
	                           "  g * 600, g * 400, 3600000000, g * 7 "
	                           "FROM generate_series(0, 11999) g, "
	                           "  (VALUES ('2026-10-01'::date), ('2026-11-01')) x(m)"));
	assert_true(testdb_exec(t, "SELECT meter_sandbox_month_costs(array_agg(account_id), "
	                           "  array_agg(sandbox_id), array_agg('2026-10-01'::date)) "
	                           "FROM (SELECT DISTINCT account_id::text, sandbox_id::text "
	                           "  FROM sandbox_month) x"));
	static const char digest[] =
	        "SELECT (SELECT count(*) || ' ' || md5(string_agg(x::text, ',' ORDER BY "
	        "  x.sandbox_id, x.month)) FROM sandbox_month x) || ' ' || "
	        "(SELECT count(*) || ' ' || md5(string_agg(x::text, ',' ORDER BY "
	        "  x.sandbox_id, x.month)) FROM sandbox_month_cost x) || ' ' || "
	        "(SELECT string_agg(x::text, ',' ORDER BY x.account_id, x.month) "
	        "  FROM account_month_sandboxes x)";
	char before[512], after[512];
	testdb_value(t, digest, before, sizeof before);
	assert_non_null(strstr(before, "24000 "));
	assert_non_null(strstr(before, "(a-0,2026-10-01,4000)"));
	migrate_unchanged(t, "0035_sandbox_month_by_sandbox.sql", digest, before);
	assert_string_equal(
	        testdb_value(t, "SELECT pg_get_indexdef('sandbox_month_pkey'::regclass)", v,
	                     sizeof v),
	        "CREATE UNIQUE INDEX sandbox_month_pkey ON public.sandbox_month USING btree "
	        "(account_id, sandbox_id, month, price_plan_id)");
	assert_string_equal(
	        testdb_value(t, "SELECT pg_get_indexdef('sandbox_month_cost_pkey'::regclass)", v,
	                     sizeof v),
	        "CREATE UNIQUE INDEX sandbox_month_cost_pkey ON public.sandbox_month_cost USING "
	        "btree (account_id, sandbox_id, month)");

	/* the rollup's function again, over a tenth of the sandboxes: nothing changes */
	assert_true(testdb_exec(t, "SELECT meter_sandbox_month_costs(array_agg(account_id), "
	                           "  array_agg(sandbox_id), array_agg('2026-10-01'::date)) "
	                           "FROM (SELECT DISTINCT account_id::text, sandbox_id::text "
	                           "  FROM sandbox_month WHERE sandbox_id LIKE 'sb-1%') x"));
	testdb_value(t, digest, after, sizeof after);
	assert_string_equal(after, before);

	/* One sandbox from a month on, as meter_sandbox_month_costs looks it up: the
	 * blocks the scan touched. On Citus the plan that runs is a shard's, which
	 * the coordinator's EXPLAIN does not count; the key's definition above is
	 * what decides it there. */
	if (getenv("METER_TEST_CITUS_WORKERS"))
		return;
	static const char *const tables[] = {"sandbox_month", "sandbox_month_cost"};
	for (size_t i = 0; i < 2; i++) {
		char sql[512], plan[8192];
		snprintf(sql, sizeof sql,
		         "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM %s "
		         "WHERE account_id = 'a-1' AND sandbox_id = 'sb-1000' "
		         "AND month >= '2026-10-01'",
		         tables[i]);
		testdb_value(t, sql, plan, sizeof plan);
		const char *hit = strstr(plan, "\"Shared Hit Blocks\": ");
		const char *read = strstr(plan, "\"Shared Read Blocks\": ");
		assert_non_null(hit);
		assert_non_null(read);
		long blocks = atol(hit + strlen("\"Shared Hit Blocks\": ")) +
		              atol(read + strlen("\"Shared Read Blocks\": "));
		if (strstr(plan, "_pkey") == NULL || blocks > 8)
			fail_msg("%s: one sandbox's months read %ld blocks: %s", tables[i], blocks,
			         plan);
		print_message("%s: one sandbox's months, %ld blocks\n", tables[i], blocks);
	}
}

/*
 * meter_ts and meter_us (0034) against 0030's bodies, written out here as the
 * reference: the same value for 200,000 random instants and the edges, in time
 * zones with odd offsets and summer time; and PostgreSQL inlines them (no call
 * left in the plan), which is what 0034 is for.
 */
static void the_time_functions_keep_their_values_and_are_inlined(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[256];
	migrate(t, NULL);
	assert_int_equal(res.status, 0);
	static const char *const zones[] = {"UTC", "America/New_York", "Asia/Kolkata",
	                                    "Pacific/Chatham", "Australia/Lord_Howe"};
	for (size_t i = 0; i < sizeof zones / sizeof zones[0]; i++) {
		char sql[1024];
		snprintf(sql, sizeof sql, "SET TimeZone = '%s'", zones[i]);
		assert_true(testdb_exec(t, sql));
		assert_non_null(testdb_value(
		        t,
		        "WITH v(us) AS (SELECT (random() * 4e15 - 1e15)::bigint "
		        "  FROM generate_series(1, 200000) "
		        "  UNION ALL SELECT unnest(ARRAY[0, 1, -1, 999999, 1000000, -1000001, "
		        "  1764547200000000, 1764547199999999, 253402300799999999, "
		        "  -62135596800000000]::bigint[])), "
		        "r AS (SELECT us, 'epoch'::timestamptz + us * interval '1 microsecond' ts "
		        "  FROM v) "
		        "SELECT count(*) FILTER (WHERE meter_ts(us) IS DISTINCT FROM ts) || ' ' || "
		        "count(*) FILTER (WHERE meter_us(ts) IS DISTINCT FROM "
		        "  (extract(epoch FROM ts) * 1000000)::bigint) || ' ' || "
		        "count(*) FILTER (WHERE meter_us(ts + interval '90 minutes') IS DISTINCT "
		        "FROM "
		        "  (extract(epoch FROM ts + interval '90 minutes') * 1000000)::bigint) || "
		        "' ' || "
		        "count(*) FROM r",
		        v, sizeof v));
		if (strcmp(v, "0 0 0 200010") != 0)
			fail_msg("in %s: differing meter_ts, meter_us, meter_us later, of all: %s",
			         zones[i], v);
	}
	assert_non_null(testdb_value(t, "SELECT meter_ts(NULL) IS NULL AND meter_us(NULL) IS NULL",
	                             v, sizeof v));
	assert_string_equal(v, "t");
	/* a plan's output names what is left of a call: inlined, none is */
	assert_true(testdb_exec(t, "CREATE TEMP TABLE probe (us bigint, at timestamptz)"));
	PGresult *r = PQexec(t->conn, "EXPLAIN (VERBOSE, COSTS OFF) SELECT meter_ts(us), "
	                              "meter_us(at) FROM probe WHERE at >= meter_ts(us)");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	for (int i = 0; i < PQntuples(r); i++)
		if (strstr(PQgetvalue(r, i, 0), "meter_"))
			fail_msg("not inlined: %s", PQgetvalue(r, i, 0));
	PQclear(r);
}

/* s with what is not printable ASCII written as \xNN, for a failure's message. */
static const char *shown(const char *s, char *buf, size_t len)
{
	size_t n = 0;
	for (; *s && n + 5 < len; s++)
		n += (size_t)snprintf(buf + n, len - n, *s >= 0x20 && *s < 0x7f ? "%c" : "\\x%02x",
		                      (unsigned char)*s);
	buf[n] = '\0';
	return buf;
}

/* Whether the database's check (sql, $1 the id) accepts s as common/ids.c does. */
static void accepted_as_ids_accepts(struct testdb *t, const char *sql, const char *s)
{
	const char *params[] = {s};
	PGresult *r = PQexecParams(t->conn, sql, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(t->conn));
	bool db = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	char b[1024];
	if (db != id_valid(s))
		fail_msg("%s with \"%s\" (%zu bytes): the database %s it, common/ids.c %s it", sql,
		         shown(s, b, sizeof b), strlen(s), db ? "accepts" : "refuses",
		         id_valid(s) ? "accepts" : "refuses");
}

/*
 * Migration 0038 (the id's form without a bounded repetition) on a database
 * filled under 0037: every row stays, the old form is gone from the domain
 * (and on Citus from the distribution columns' CHECKs), and the database
 * accepts exactly the ids common/ids.c (PCRE2, the API's and the collector's
 * check) accepts: every single character, every character after and before a
 * valid one, the lengths around 128, and 20,000 random strings. The
 * accounts table's own check (on Citus, the CHECK on its distribution
 * column) is held to the same on the edges.
 */
static void the_id_form_is_rebuilt_on_a_filled_database_as_common_ids_checks_it(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[512];
	migrate_before(f, "0038");
	assert_true(testdb_exec(t,
	                        "INSERT INTO accounts (id, name, plan) "
	                        "SELECT 'a-' || g, 'A' || g, 'paid' FROM generate_series(0, 2) g"));
	assert_true(testdb_exec(t, "INSERT INTO samples (sandbox_id, incarnation, ts, account_id, "
	                           "  host, cpu_usage_us) "
	                           "SELECT 'sb-' || g % 50, 7, '2026-10-01'::timestamptz + "
	                           "  (g / 50) * interval '1 minute', 'a-' || g % 3, 'h', g "
	                           "FROM generate_series(0, 99999) g"));
	static const char digest[] =
	        "SELECT (SELECT count(*) || ' ' || md5(string_agg(x::text, ',' ORDER BY "
	        "  x.sandbox_id, x.ts)) FROM (SELECT sandbox_id, incarnation, ts, account_id, "
	        "  host, cpu_usage_us FROM samples) x) || ' ' || "
	        "(SELECT string_agg(id, ',' ORDER BY id) FROM accounts)";
	char before[256];
	testdb_value(t, digest, before, sizeof before);
	assert_non_null(strstr(before, "100000 "));
	migrate_unchanged(t, "0038_id_form_unbounded.sql", digest, before);
	/* the domain's, and on Citus the three tables' (each partition of samples has
	 * its own copy): how many, and how many in the old form */
	testdb_value(
	        t,
	        "SELECT count(*) FILTER (WHERE contypid <> 0 OR conrelid IN ('accounts'::regclass, "
	        "  'sandboxes'::regclass, 'samples'::regclass)) || ' ' || "
	        "  count(*) FILTER (WHERE pg_get_constraintdef(oid) LIKE '%{0,127}%') "
	        "FROM pg_constraint WHERE contypid = 'meter_id'::regtype "
	        "  OR conname LIKE '%\\_form'",
	        v, sizeof v);
	if (strcmp(v, getenv("METER_TEST_CITUS_WORKERS") ? "4 0" : "1 0") != 0)
		fail_msg("the id's form: %s", v);

	assert_true(testdb_exec(t, "CREATE FUNCTION pg_temp.is_id(x text) RETURNS boolean "
	                           "LANGUAGE plpgsql AS $$ BEGIN PERFORM x::meter_id; RETURN true; "
	                           "EXCEPTION WHEN check_violation THEN RETURN false; END $$"));
	assert_true(testdb_exec(t,
	                        "CREATE FUNCTION pg_temp.is_account(x text) RETURNS boolean "
	                        "LANGUAGE plpgsql AS $$ BEGIN "
	                        "  INSERT INTO accounts (id, name, plan) VALUES (x, 'x', 'paid'); "
	                        "  RAISE SQLSTATE 'MTR01'; "
	                        "EXCEPTION WHEN SQLSTATE 'MTR01' THEN RETURN true; "
	                        "  WHEN check_violation THEN RETURN false; END $$"));
	static const char is_id[] = "SELECT pg_temp.is_id($1)";
	static const char is_account[] = "SELECT pg_temp.is_account($1)";
	/* some characters beyond ASCII, as UTF-8 (the database's encoding) */
	static const char *const wide[] = {"\xc3\xa9", "\xc2\xa0", "\xe6\x97\xa5",
	                                   "\xf0\x9f\x98\x80"};
	char s[160];
	for (int c = 1; c < 0x80 + 4; c++) {
		char one[8];
		if (c < 0x80)
			snprintf(one, sizeof one, "%c", c);
		else
			snprintf(one, sizeof one, "%s", wide[c - 0x80]);
		for (size_t k = 0; k < 4; k++) {
			/* the character alone, after a valid one, before, and between two */
			snprintf(s, sizeof s, "%s%s%s", k % 2 ? "a" : "", one, k >= 2 ? "b" : "");
			accepted_as_ids_accepts(t, is_id, s);
			if (strchr("a. \n/", c) || c >= 0x80)
				accepted_as_ids_accepts(t, is_account, s);
		}
	}
	static const char tail[] = "a.b_c:d-E9";
	for (size_t n = 0; n <= 140; n++) {
		for (size_t i = 0; i < n; i++)
			s[i] = tail[i % (sizeof tail - 1)];
		s[n] = '\0';
		accepted_as_ids_accepts(t, is_id, s);
		if (n <= 1 || (n >= 127 && n <= 130))
			accepted_as_ids_accepts(t, is_account, s);
	}
	/* mostly the id's characters, now and then one that is not */
	static const char alphabet[] = "AZaz09._:-xQ7 /\n#";
	srand(20261206);
	for (int i = 0; i < 20000; i++) {
		size_t n = 1 + (size_t)rand() % 140;
		for (size_t k = 0; k < n; k++)
			s[k] = rand() % 50 ? alphabet[rand() % 14]
			                   : alphabet[rand() % (sizeof alphabet - 1)];
		s[n] = '\0';
		accepted_as_ids_accepts(t, is_id, s);
	}
}

/* ---- the schema as it is: functions in files of their own ---- */

static int line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Sorts each run of GRANT and REVOKE lines in place: pg_dump writes an
 * object's grants in the order of its ACL, which says nothing (on Citus,
 * placing a table writes its ACL again, in an order of its own).
 */
static void grants_sorted(char *text)
{
	size_t n = 0;
	for (const char *p = text; *p; p++)
		n += *p == '\n';
	char **lines = calloc(n + 1, sizeof *lines);
	assert_non_null(lines);
	size_t len = strlen(text);
	char *copy = malloc(len + 1), *out = text;
	assert_non_null(copy);
	memcpy(copy, text, len + 1);
	char *p = copy;
	while (*p) {
		size_t k = 0;
		while (*p && (strncmp(p, "GRANT ", 6) == 0 || strncmp(p, "REVOKE ", 7) == 0)) {
			lines[k++] = p;
			p += strcspn(p, "\n");
			if (*p)
				*p++ = '\0';
		}
		qsort(lines, k, sizeof *lines, line_cmp);
		for (size_t i = 0; i < k; i++)
			out += sprintf(out, "%s\n", lines[i]);
		if (k == 0) {
			size_t l = strcspn(p, "\n");
			memmove(out, p, l);
			out += l;
			p += l;
			if (*p)
				*out++ = *p++;
		}
	}
	*out = '\0';
	free(copy);
	free(lines);
}

/* The schema of t as pg_dump -s writes it, less the lines that differ from run to run
 * (\restrict's random key), into out (malloc'd). */
static char *schema_of(struct testdb *t)
{
	char path[64] = "/tmp/meter-schema-XXXXXX", cmd[8192];
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	snprintf(cmd, sizeof cmd, "pg_dump -s '%s' | grep -v '^\\\\\\(un\\)\\?restrict ' > %s",
	         t->url, path);
	if (system(cmd) != 0)
		fail_msg("pg_dump -s failed (Debian's postgresql-client has it): %s", cmd);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *text = malloc((size_t)n + 1);
	assert_non_null(text);
	assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
	text[n] = '\0';
	fclose(f);
	unlink(path);
	grants_sorted(text);
	return text;
}

/* The first line where a and b differ, for the failure's message. */
static void first_difference(const char *a, const char *b, char *out, size_t len)
{
	int line = 1;
	const char *p = a, *q = b;
	while (*p && *p == *q) {
		if (*p == '\n')
			line++;
		p++;
		q++;
	}
	snprintf(out, len, "line %d: upgraded \"%.*s\", fresh \"%.*s\"", line,
	         (int)strcspn(p, "\n"), p, (int)strcspn(q, "\n"), q);
}

/*
 * A database that the last release migrated (from its first migration to its
 * last, or only part of the way), with an account, a sandbox and samples in
 * it, migrated on with the checkout's migrations ends with exactly the schema
 * of a fresh database (pg_dump -s): every table, key, trigger and grant, and
 * every function as its file in migrations/functions/ defines it. On Citus
 * too (ctest citus_migrate_filled), where the release placed the tables.
 */
static void a_release_database_upgraded_on_a_filled_database_has_a_fresh_ones_schema(void **state)
{
	(void)state;
	struct testdb fresh = {0};
	assert_true(testdb_create(&fresh, "migfresh"));
	migrate(&fresh, NULL);
	if (res.status != 0)
		fail_msg("a fresh meter migrate failed: %s", res.err);
	char *want = schema_of(&fresh);
	testdb_drop(&fresh);
	/* up to the release's last migration; and from points part of the way */
	const char *firsts[] = {"0040", "0034", "0019", "0002"};
	bool citus = getenv("METER_TEST_CITUS_WORKERS") != NULL;
	for (size_t i = 0; i < (citus ? 1 : sizeof firsts / sizeof firsts[0]); i++) {
		struct testdb t = {0};
		assert_true(testdb_create(&t, "migup"));
		char dir[64];
		release_migrations(dir, sizeof dir, firsts[i]);
		migrate(&t, dir);
		if (res.status != 0)
			fail_msg("the release's meter migrate before %s failed: %s", firsts[i],
			         res.err);
		assert_true(testdb_exec(&t, "INSERT INTO accounts (id, name, plan) VALUES "
		                            "('up', 'Up', 'paid')"));
		assert_true(testdb_exec(&t, "INSERT INTO sandboxes (id, account_id, vcpus, "
		                            "memory_gib, started_at) VALUES ('up-1', 'up', 1, 1, "
		                            "'2026-10-05T00:00:00Z')"));
		assert_true(testdb_exec(&t,
		                        "INSERT INTO samples (sandbox_id, incarnation, ts, host, "
		                        "cpu_usage_us) VALUES ('up-1', 1, "
		                        "'2026-10-05T00:10:00Z', 'h', 600000000)"));
		migrate(&t, NULL);
		if (res.status != 0)
			fail_msg("meter migrate after the release's before %s failed: %s",
			         firsts[i], res.err);
		char *got = schema_of(&t);
		if (strcmp(got, want) != 0) {
			char where[1024];
			first_difference(got, want, where, sizeof where);
			fail_msg("upgraded from before %s, the schema is not a fresh one's: %s",
			         firsts[i], where);
		}
		free(got);
		testdb_drop(&t);
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		assert_int_equal(system(cmd), 0);
	}
	free(want);
}

/*
 * Every SQL function of the schema is defined in migrations/functions/ in a
 * file named after it, and nowhere else: no numbered migration creates one
 * (grep finds a function's one current definition). A function file is
 * applied when its text changes, and only then; one that fails leaves every
 * function as it was.
 */
static void each_function_has_one_file_applied_when_it_changes(void **state)
{
	struct fixture *f = *state;
	struct testdb *t = &f->t;
	char v[256], cmd[1024];
	copy_migrations(f->dir, sizeof f->dir);
	migrate(t, f->dir);
	assert_int_equal(res.status, 0);
	/* by name: a function's forms (meter_samples_ingest has two) share its file */
	PGresult *r = PQexec(t->conn, "SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace "
	                              "n ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
	                              "ORDER BY 1");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	assert_true(PQntuples(r) >= 25);
	for (int i = 0; i < PQntuples(r); i++) {
		char path[512];
		snprintf(path, sizeof path, "%s/functions/%s.sql", migrate_default_dir(),
		         PQgetvalue(r, i, 0));
		if (access(path, R_OK) != 0)
			fail_msg("function %s has no file of its own (%s)", PQgetvalue(r, i, 0),
			         path);
	}
	assert_int_equal(atoi(testdb_value(t, "SELECT count(*) FROM meter_functions", v, sizeof v)),
	                 PQntuples(r));
	PQclear(r);
	snprintf(cmd, sizeof cmd,
	         "grep -il 'create[[:space:]].*function' %s/[0-9]*.sql | grep -v '^$'",
	         migrate_default_dir());
	FILE *g = popen(cmd, "r");
	char line[512];
	if (g && fgets(line, sizeof line, g))
		fail_msg("a numbered migration defines a function: %s", line);
	if (g)
		pclose(g);
	/* unchanged: nothing applied */
	migrate(t, f->dir);
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "; 0 function(s) applied"));
	/* changed: that one */
	write_file(f->dir, "functions/meter_part_nano.sql", "-- read again\n", "a");
	migrate(t, f->dir);
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "applied functions/meter_part_nano.sql"));
	assert_non_null(strstr(res.out, "; 1 function(s) applied"));
	/* two changed, the second broken: neither applied, the failure named */
	write_file(f->dir, "functions/meter_part_nano.sql", "-- and again\n", "a");
	write_file(f->dir, "functions/meter_us.sql",
	           "CREATE OR REPLACE FUNCTION meter_us(t timestamptz) RETURNS bigint "
	           "LANGUAGE sql AS $$ SELECT no_such_column $$;\n",
	           "w");
	char sum[80];
	testdb_value(t, "SELECT checksum FROM meter_functions WHERE name = 'meter_part_nano'", sum,
	             sizeof sum);
	migrate(t, f->dir);
	assert_int_equal(res.status, 1);
	assert_non_null(strstr(res.err, "function meter_us (functions/meter_us.sql) failed"));
	assert_string_equal(testdb_value(t, "SELECT meter_us('2026-10-05T00:00:01Z')", v, sizeof v),
	                    "1791158401000000");
	assert_string_equal(
	        testdb_value(t,
	                     "SELECT checksum FROM meter_functions WHERE name = 'meter_part_nano'",
	                     v, sizeof v),
	        sum);
}

int main(void)
{
	/* ctest citus_migrate_filled runs the four on a filled database, on a Citus cluster */
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
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
	                the_collector_role_may_ingest_samples_and_read_account_limits_only, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                the_time_functions_keep_their_values_and_are_inlined, setup, teardown),
	        cmocka_unit_test_setup_teardown(the_schema_refuses_impossible_rows, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(every_growing_table_carries_its_distribution_key,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_table_without_its_key_fails_the_shard_check,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                the_sample_key_is_rebuilt_on_a_filled_database_while_samples_arrive, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(the_month_keys_are_rebuilt_on_a_filled_database,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                the_id_form_is_rebuilt_on_a_filled_database_as_common_ids_checks_it, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                a_release_database_upgraded_on_a_filled_database_has_a_fresh_ones_schema,
	                setup, teardown),
	        cmocka_unit_test_setup_teardown(each_function_has_one_file_applied_when_it_changes,
	                                        setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
