/*
 * The distributed plans of meter's hot statements on a Citus cluster (run by
 * tests/citus_run.sh, label citus): each statement of api/queries.c that
 * names an account or a sandbox goes to one shard, and the known fan-outs
 * (docs/scaling.md, "The hot queries that do not filter by their table's
 * key") are the only ones that do not. The statements are the ones meter-api
 * prepares (queries_prepare), read with EXPLAIN EXECUTE, so a statement that
 * changes is read as it is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/queries.h"
#include "tests/support/testdb.h"

static int setup(void **state)
{
	struct testdb *t = calloc(1, sizeof *t);
	char err[512];
	if (t == NULL || !testdb_create_migrated(t, "plans")) {
		free(t);
		return -1;
	}
	if (!testdb_exec(t, "INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', "
	                    "'paid')") ||
	    !testdb_exec(t, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) VALUES "
	                    "('sb-1', 'acme', 2, 4)") ||
	    !queries_prepare(t->conn, err, sizeof err)) {
		fprintf(stderr, "plans: could not set up: %s\n", err);
		testdb_drop(t);
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	testdb_drop(*state);
	free(*state);
	return 0;
}

/* How many times "Task Count: N" appears in plan, for each N: ones and others. */
static void tasks(const char *plan, int *ones, int *others)
{
	*ones = *others = 0;
	for (const char *p = plan; (p = strstr(p, "Task Count: ")) != NULL; p++) {
		long n = strtol(p + strlen("Task Count: "), NULL, 10);
		n == 1 ? (*ones)++ : (*others)++;
	}
}

/* EXPLAIN EXECUTE of the prepared statement q with SQL arguments args. */
static char *explain(struct testdb *t, enum query q, const char *args)
{
	char sql[512];
	snprintf(sql, sizeof sql, "EXPLAIN (COSTS OFF) EXECUTE q%d(%s)", (int)q, args);
	PGresult *r = PQexec(t->conn, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(t->conn));
	size_t len = 1;
	for (int i = 0; i < PQntuples(r); i++)
		len += strlen(PQgetvalue(r, i, 0)) + 1;
	char *plan = calloc(1, len);
	assert_non_null(plan);
	for (int i = 0; i < PQntuples(r); i++) {
		strcat(plan, PQgetvalue(r, i, 0));
		strcat(plan, "\n");
	}
	PQclear(r);
	return plan;
}

#define DEC "1796083200000000" /* 2026-12-01 */
#define JAN "1798761600000000" /* 2027-01-01 */

static const struct hot {
	enum query q;
	const char *name, *args;
	int fanouts; /* Distributed subplans that go to every shard (docs/scaling.md) */
} hot[] = {
        {Q_ACCOUNT, "Q_ACCOUNT", "'acme'", 0},
        {Q_ACCOUNT_LOCK, "Q_ACCOUNT_LOCK", "'acme'", 0},
        /* the running count: a query of its own over the sandbox shards */
        {Q_STATE, "Q_STATE (quota check, account, trial)", "'acme', " DEC, 1},
        {Q_SANDBOX, "Q_SANDBOX", "'sb-1'", 0},
        {Q_USAGE_TOTALS, "Q_USAGE_TOTALS (an account's usage)", "'acme', " DEC ", " JAN, 0},
        {Q_USAGE_MONTH_TOTALS, "Q_USAGE_MONTH_TOTALS", "'acme', '2026-12-01'", 0},
        {Q_RANK_MONTH, "Q_RANK_MONTH (the usage page's order)", "'acme', '2026-12-01', 50", 0},
        {Q_COUNT_MONTH, "Q_COUNT_MONTH", "'acme', '2026-12-01'", 0},
        {Q_TOP_MONTH, "Q_TOP_MONTH (the dashboard)", "'acme', '2026-12-01', 10", 0},
        {Q_SANDBOX_HOURS, "Q_SANDBOX_HOURS (a sandbox's usage)", "'acme', 'sb-1', " DEC ", " JAN,
         0},
        {Q_SANDBOX_PEAK, "Q_SANDBOX_PEAK", "'sb-1', " DEC ", " JAN, 0},
        {Q_DAILY, "Q_DAILY", "'acme', " DEC ", " JAN, 0},
        /* known fan-outs: by account over tables kept by sandbox */
        {Q_RUNNING_COUNT, "Q_RUNNING_COUNT", "'acme'", -1},
        {Q_DATA_AS_OF, "Q_DATA_AS_OF", "'acme'", -1},
        {Q_RUNNING_OTHERS, "Q_RUNNING_OTHERS (an admission adopting)", "'acme', 'sb-1'", -1},
};

static void hot_statements_go_to_one_shard(void **state)
{
	struct testdb *t = *state;
	int bad = 0;
	for (size_t i = 0; i < sizeof hot / sizeof hot[0]; i++) {
		char *plan = explain(t, hot[i].q, hot[i].args);
		int ones, others;
		tasks(plan, &ones, &others);
		bool ok = hot[i].fanouts < 0 ? others >= 1 : ones >= 1 && others == hot[i].fanouts;
		printf("%-45s %d one-shard task(s), %d fan-out(s)%s\n", hot[i].name, ones, others,
		       ok ? "" : "  <- not as expected");
		if (!ok) {
			printf("%s\n", plan);
			bad++;
		}
		free(plan);
	}
	assert_int_equal(bad, 0);
}

int main(void)
{
	if (getenv("METER_TEST_CITUS_WORKERS") == NULL) {
		fprintf(stderr, "test_citus_plans: runs on a Citus cluster only "
		                "(tests/citus_run.sh sets METER_TEST_CITUS_WORKERS)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(hot_statements_go_to_one_shard, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
