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
#include <time.h>

#include "api/queries.h"
#include "rollup/rollup.h"
#include "common/invoicedb.h"
#include "common/plans.h"
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

/* The distributed statements the session ran so far in this database: router (one
 * shard) and multi-shard executions, from Citus's own counters (citus_stat_counters). */
static void executions(struct testdb *t, long *single, long *multi)
{
	PGresult *r = PQexec(t->conn, "SELECT query_execution_single_shard, "
	                              "query_execution_multi_shard FROM citus_stat_counters "
	                              "WHERE name = current_database()");
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		fail_msg("citus_stat_counters: %s", PQerrorMessage(t->conn));
	*single = atol(PQgetvalue(r, 0, 0));
	*multi = atol(PQgetvalue(r, 0, 1));
	PQclear(r);
}

/* The multi-shard statements Citus reported (citus.multi_task_query_log_level), one
 * line each, kept since the last step: the start of the statement a function ran, or
 * the notice itself for a statement meter's C code sent. */
static char fanned[16384];

static void keep_notice(void *arg, const char *message)
{
	(void)arg;
	const char *q = strstr(message, "SQL statement \"");
	q = q ? q + strlen("SQL statement \"") : message;
	char line[161];
	size_t n = 0;
	for (bool space = false; *q && *q != '"' && n < sizeof line - 1; q++) {
		bool ws = *q == ' ' || *q == '\t' || *q == '\n';
		if (!ws || !space)
			line[n++] = ws ? ' ' : *q;
		space = ws;
	}
	line[n] = '\0';
	n = strlen(fanned);
	snprintf(fanned + n, sizeof fanned - n, "    fan-out: %s\n", line);
}

/* A step's executions since *single, *multi (then moved on to now), printed. */
static long step(struct testdb *t, const char *what, long *single, long *multi, long fanouts)
{
	long s, m;
	executions(t, &s, &m);
	printf("%-45s %ld one-shard statement(s), %ld fan-out(s)%s\n", what, s - *single,
	       m - *multi, m - *multi == fanouts ? "" : "  <- not as expected");
	if (m - *multi != fanouts)
		printf("%s", fanned);
	fanned[0] = '\0';
	long more = m - *multi;
	*single = s;
	*multi = m;
	return more;
}

/*
 * What a PL/pgSQL function or meter's C code runs is not one prepared statement an
 * EXPLAIN shows, so these count what Citus executed (citus_stat_counters), and name
 * each statement it sent to more than one shard: the collector's write of one
 * sandbox's batch and the account's invoice go to one shard per statement; the
 * rollup of that sandbox has its known fan-outs (docs/scaling.md).
 */
static void the_write_the_rollup_and_the_invoice_go_to_their_shards(void **state)
{
	struct testdb *t = *state;
	char err[512];
	assert_true(testdb_exec(t, "SET citus.enable_stat_counters = on"));
	assert_true(testdb_exec(t, "SET citus.multi_task_query_log_level = notice; "
	                           "SET client_min_messages = notice"));
	PQsetNoticeProcessor(t->conn, keep_notice, NULL);
	PQsetErrorContextVisibility(t->conn, PQSHOW_CONTEXT_ALWAYS);
	long single, multi, bad = 0;
	executions(t, &single, &multi);
	/* two hours ago, three samples of sb-1 ten seconds apart (the collector's own write) */
	assert_true(testdb_exec(
	        t, "SELECT meter_samples_ingest(array_agg(ROW('sb-1', 1, "
	           "date_trunc('hour', now()) - interval '2 hours' + k * interval '10 s', 'acme', "
	           "'h', k * 5000000, 1073741824, 1073741824, 0, 4294967296, 2000, "
	           "false)::meter_sample_row)) FROM generate_series(0, 2) k"));
	bad += step(t, "meter_samples_ingest (one sandbox's batch)", &single, &multi, 0) != 0;
	int taken = rollup_pass(t->conn, err, sizeof err);
	if (taken != 1)
		fail_msg("rollup_pass: %d %s", taken, err);
	/* The known fan-outs of a rollup (docs/scaling.md): the picks of the oldest trial
	 * and rollup marks, which name no key (3: the rollup's in each of the pass's two
	 * looks), and 5 statements or subplans of the batch that Citus still sends to every
	 * shard (the batch's sandboxes read with a LEFT JOIN; the marks set aside, none
	 * here: an empty array). */
	bad += step(t, "rollup_pass (one sandbox)", &single, &multi, 8) != 8;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	assert_true(plans_load(t->conn, &plans, &nplans, err, sizeof err));
	executions(t, &single, &multi);
	struct invoice_doc doc = {0};
	char month[64];
	assert_non_null(testdb_value(t,
	                             "SELECT (extract(epoch FROM date_trunc('month', now() - "
	                             "interval '2 hours')) * 1000000)::bigint",
	                             month, sizeof month));
	int64_t now_us = (int64_t)time(NULL) * 1000000;
	if (!invoice_get(t->conn, "acme", atoll(month), now_us, 72LL * 3600 * 1000000, plans,
	                 nplans, &doc, err, sizeof err))
		fail_msg("invoice_get: %s", err);
	assert_true(doc.found);
	assert_non_null(doc.json);
	bad += step(t, "invoice_get (an account's month)", &single, &multi, 0) != 0;
	invoice_doc_free(&doc);
	free(plans);
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
	        cmocka_unit_test_setup_teardown(
	                the_write_the_rollup_and_the_invoice_go_to_their_shards, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
