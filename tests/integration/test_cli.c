/* The meter CLI against a real, migrated database. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/run.h"
#include "tests/support/testdb.h"

static struct run_result res;

static int setup(void **state)
{
	struct testdb *t = calloc(1, sizeof *t);
	if (t == NULL || !testdb_create_migrated(t, "cli")) {
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

#define MAXARGS 16
static void meter(struct testdb *t, const char *args)
{
	/* Splits args on spaces: enough for these tests. */
	static char buf[1024];
	const char *argv[MAXARGS] = {METER_BIN};
	int n = 1;
	snprintf(buf, sizeof buf, "%s", args);
	for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < MAXARGS - 1;
	     w = strtok_r(NULL, " ", &save))
		argv[n++] = w;
	argv[n] = NULL;
	run_program(argv, t->url, &res);
}

static const char *json_str(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	assert_true(cJSON_IsString(v));
	return v->valuestring;
}

static void rates_show_0_08_busy_and_0_03125_idle(void **state)
{
	meter(*state, "rates --vcpus 2 --memory-gib 4");
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "busy: $0.08 an hour"));
	assert_non_null(strstr(res.out, "idle: $0.03125 an hour"));

	meter(*state, "rates --vcpus 2 --memory-gib 4 --json");
	assert_int_equal(res.status, 0);
	cJSON *o = cJSON_Parse(res.out);
	assert_non_null(o);
	assert_string_equal(json_str(o, "busy_per_hour"), "0.08");
	assert_string_equal(json_str(o, "idle_per_hour"), "0.03125");
	cJSON_Delete(o);
}

static void estimate_prints_the_worked_example_with_1_28(void **state)
{
	meter(*state, "estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 0.5");
	assert_int_equal(res.status, 0);
	assert_int_equal(run_lines(res.out), 3);
	assert_non_null(strstr(res.out, "CPU:    300 × 6 min / 60 × 0.5 vCPU × $0.025   = $0.38"));
	assert_non_null(strstr(res.out, "Memory: 300 × 6 min / 60 × 4 GiB × $0.0075     = $0.90"));
	assert_non_null(strstr(res.out, "Total:                                           $1.28"));
	assert_non_null(strstr(res.out, "(exact 1.275)"));
	assert_null(strstr(res.out, "1.27 "));

	meter(*state,
	      "estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 0.5 --json");
	assert_int_equal(res.status, 0);
	cJSON *o = cJSON_Parse(res.out);
	assert_non_null(o);
	assert_string_equal(json_str(o, "total"), "1.28");
	assert_string_equal(json_str(o, "total_exact"), "1.275");
	cJSON *lines = cJSON_GetObjectItemCaseSensitive(o, "lines");
	assert_int_equal(cJSON_GetArraySize(lines), 2);
	cJSON *cpu = cJSON_GetArrayItem(lines, 0), *mem = cJSON_GetArrayItem(lines, 1);
	assert_string_equal(json_str(cpu, "item"), "cpu");
	assert_string_equal(json_str(cpu, "amount"), "0.38");
	assert_string_equal(json_str(cpu, "amount_exact"), "0.375");
	assert_string_equal(json_str(mem, "item"), "memory");
	assert_string_equal(json_str(mem, "amount"), "0.90");
	cJSON_Delete(o);
}

static void bad_flags_get_one_line_and_exit_status_2(void **state)
{
	const char *cases[] = {
	        "rates --vcpus 2",
	        "rates --vcpus -2 --memory-gib 4",
	        "rates --vcpus two --memory-gib 4",
	        "rates --vcpus 100000 --memory-gib 4",
	        "rates --vcpus 2 --memory-gib 4 --colour",
	        "rates --vcpus 2 --memory-gib nan",
	        "rates --vcpus 2 --memory-gib 1e3",
	        "estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 3",
	        "estimate --runs 0 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 1",
	        "estimate --runs 1.5 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 1",
	        "estimate --runs 300 --minutes 0 --vcpus 2 --memory-gib 4 --busy-vcpus 1",
	        "estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus",
	        "key create",
	        "key create --admin --account acme",
	        "key create --admin --hook",
	        "key delete",
	        "migrate --dir",
	        "frobnicate",
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		meter(*state, cases[i]);
		if (res.status != 2 || run_lines(res.err) != 1 || res.out[0] != '\0')
			fail_msg("\"meter %s\": status %d, stdout \"%s\", stderr \"%s\"", cases[i],
			         res.status, res.out, res.err);
	}
}

static void a_created_key_is_printed_once_and_stored_only_as_a_hash(void **state)
{
	struct testdb *t = *state;
	char v[256], sql[512], st[16];
	assert_string_equal(testdb_sqlstate(t,
	                                    "INSERT INTO accounts (id, name, plan) "
	                                    "VALUES ('acme', 'Acme', 'paid')",
	                                    st, sizeof st),
	                    "");
	meter(t, "key create --account acme");
	assert_int_equal(res.status, 0);
	assert_int_equal(strlen(res.out), 68);
	assert_memory_equal(res.out, "mk_", 3);
	for (int i = 3; i < 67; i++)
		assert_non_null(strchr("0123456789abcdef", res.out[i]));
	char key[68];
	memcpy(key, res.out, 67);
	key[67] = '\0';

	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM api_keys WHERE key_hash = sha256('%s') "
	         "AND role = 'account' AND account_id = 'acme'",
	         key);
	assert_string_equal(testdb_value(t, sql, v, sizeof v), "1");
	/* The key is in no column: only 11 characters of it are kept. */
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM api_keys WHERE row_to_json(api_keys)::text LIKE '%%%.20s%%' "
	         "OR encode(key_hash, 'escape') LIKE '%%%.20s%%'",
	         key, key);
	assert_string_equal(testdb_value(t, sql, v, sizeof v), "0");

	meter(t, "key create --admin");
	assert_int_equal(res.status, 0);
	assert_memory_not_equal(res.out, key, 67);
	assert_string_equal(
	        testdb_value(t, "SELECT count(*) FROM api_keys WHERE role = 'admin'", v, sizeof v),
	        "1");

	/* hook keys: of every account, or of one */
	meter(t, "key create --hook");
	assert_int_equal(res.status, 0);
	meter(t, "key create --hook --account acme");
	assert_int_equal(res.status, 0);
	assert_string_equal(
	        testdb_value(t,
	                     "SELECT string_agg(coalesce(account_id, '-'), ',' ORDER BY "
	                     "id) FROM api_keys WHERE role = 'hook'",
	                     v, sizeof v),
	        "-,acme");

	meter(t, "key create --account nobody");
	assert_int_equal(res.status, 1);
	assert_non_null(strstr(res.err, "account \"nobody\" does not exist"));
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM api_keys", v, sizeof v), "4");
	/* a link for it neither: the account is looked up, not left to a foreign key
	 * (which Citus does not keep, docs/scaling.md) */
	meter(t, "login-link --account nobody");
	assert_int_equal(res.status, 1);
	assert_non_null(strstr(res.err, "account \"nobody\" does not exist"));
	assert_string_equal(testdb_value(t, "SELECT count(*) FROM sessions", v, sizeof v), "0");
}

/* meter host bind, list and unbind: collector_hosts, each change checked where it lands. */
static void hosts_are_bound_listed_and_unbound(void **state)
{
	struct testdb *t = *state;
	char v[256], role[64], args[160];
	snprintf(role, sizeof role, "meter_test_cli_%d", (int)getpid());
	snprintf(args, sizeof args, "CREATE ROLE %s LOGIN IN ROLE meter_collector", role);
	assert_true(testdb_exec(t, args));
	snprintf(args, sizeof args, "host bind --role %s --host host-1", role);
	meter(t, args);
	int bound = res.status;
	meter(t, args); /* twice: once */
	int again = res.status;
	meter(t, "host list --json");
	cJSON *o = cJSON_Parse(res.out);
	meter(t, "host bind --role nobody_there --host host-1");
	int nobody = res.status;
	char nobody_err[256];
	snprintf(nobody_err, sizeof nobody_err, "%.200s", res.err);
	snprintf(args, sizeof args, "host unbind --role %s --host host-1", role);
	meter(t, args);
	int unbound = res.status;
	meter(t, args);
	int unbound_again = res.status;
	testdb_value(t, "SELECT count(*) FROM collector_hosts", v, sizeof v);
	snprintf(args, sizeof args, "DROP ROLE %s", role);
	assert_true(testdb_exec(t, args));
	assert_int_equal(bound, 0);
	assert_int_equal(again, 0);
	assert_non_null(o);
	cJSON *hosts = cJSON_GetObjectItemCaseSensitive(o, "hosts");
	assert_int_equal(cJSON_GetArraySize(hosts), 1);
	assert_string_equal(json_str(cJSON_GetArrayItem(hosts, 0), "role"), role);
	assert_string_equal(json_str(cJSON_GetArrayItem(hosts, 0), "host"), "host-1");
	cJSON_Delete(o);
	assert_int_equal(nobody, 1);
	assert_non_null(strstr(nobody_err, "there is no role \"nobody_there\""));
	assert_int_equal(unbound, 0);
	assert_int_equal(unbound_again, 1);
	assert_string_equal(v, "0");
	meter(t, "host bind --role x");
	assert_int_equal(res.status, 2);
}

static void prices_come_from_the_price_plans_table(void **state)
{
	struct testdb *t = *state;
	char st[16];
	assert_string_equal(testdb_sqlstate(t,
	                                    "INSERT INTO price_plans (name, effective_from, "
	                                    "cpu_vcpu_hour, memory_gib_hour, cpu_floor) VALUES "
	                                    "('dearer', now() - interval '1 day', 0.05, 0.0075, 0)",
	                                    st, sizeof st),
	                    "");
	meter(t, "rates --vcpus 2 --memory-gib 4");
	assert_int_equal(res.status, 0);
	assert_non_null(strstr(res.out, "busy: $0.13 an hour"));
	assert_non_null(strstr(res.out, "idle: $0.03 an hour")); /* floor 0: memory only */
	assert_non_null(strstr(res.out, "\"dearer\""));
}

/* Runs meter with args (NULL-terminated) and no database; fails unless it printed a usage
 * naming want on stdout, nothing on stderr, and exited 0. */
static void help_of(const char *const *args, const char *want)
{
	const char *argv[MAXARGS] = {METER_BIN};
	char line[256] = "meter";
	int n = 1;
	for (; args[n - 1] && n < MAXARGS - 1; n++) {
		argv[n] = args[n - 1];
		snprintf(line + strlen(line), sizeof line - strlen(line), " %s", argv[n]);
	}
	argv[n] = NULL;
	run_program(argv, NULL, &res);
	if (res.status != 0 || res.err[0] != '\0' || strncmp(res.out, "usage: ", 7) != 0 ||
	    strstr(res.out, want) == NULL)
		fail_msg("\"%s\": status %d, stdout \"%s\", stderr \"%s\" (want a usage naming "
		         "\"%s\")",
		         line, res.status, res.out, res.err, want);
}

/*
 * Every verb meter --help lists, and every action its usage names ("meter key
 * list", "meter host bind"), answers --help and -h with its usage on stdout and
 * status 0, without a database.
 */
static void every_verb_and_action_prints_its_usage_for_help(void **state)
{
	(void)state;
	static char verbs[RUN_OUT_MAX];
	const char *top[] = {METER_BIN, "--help", NULL};
	run_program(top, NULL, &res);
	assert_int_equal(res.status, 0);
	char *list = strstr(res.out, "\nverbs:\n");
	assert_non_null(list);
	snprintf(verbs, sizeof verbs, "%s", list + 8);
	int nverbs = 0, nactions = 0;
	for (char *save = NULL, *l = strtok_r(verbs, "\n", &save); l && strncmp(l, "  ", 2) == 0;
	     l = strtok_r(NULL, "\n", &save)) {
		char verb[32], want[96], usage[1024];
		assert_int_equal(sscanf(l, " %31s", verb), 1);
		nverbs++;
		snprintf(want, sizeof want, "usage: meter %s", verb);
		for (int h = 0; h < 2; h++) {
			const char *args[] = {verb, h ? "-h" : "--help", NULL};
			help_of(args, want);
		}
		/* its actions: the words after "meter VERB " in its usage line */
		snprintf(usage, sizeof usage, "%.*s", (int)strcspn(res.out, "\n"), res.out);
		char seen[512] = " ", at[64];
		snprintf(at, sizeof at, "meter %s ", verb);
		for (const char *p = strstr(usage, at); p; p = strstr(p + 1, at)) {
			char action[32], key[40];
			size_t len = strspn(p + strlen(at), "abcdefghijklmnopqrstuvwxyz");
			if (len == 0 || len >= sizeof action)
				continue;
			snprintf(action, sizeof action, "%.*s", (int)len, p + strlen(at));
			snprintf(key, sizeof key, " %s ", action);
			if (strstr(seen, key))
				continue;
			snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s ", action);
			nactions++;
			snprintf(want, sizeof want, "meter %s %s", verb, action);
			for (int h = 0; h < 2; h++) {
				const char *args[] = {verb, action, h ? "-h" : "--help", NULL};
				help_of(args, want);
			}
		}
	}
	/* migrate, key, plan, rates, export, login-link, invoice, session, parked, host,
	 * estimate; key create, list and revoke, plan list and add, session list and revoke,
	 * parked retry, host list, bind and unbind */
	assert_true(nverbs >= 11);
	assert_true(nactions >= 11);
	/* an action's arguments before --help do not hide it */
	const char *revoke[] = {"key", "revoke", "7", "--help", NULL};
	help_of(revoke, "meter key revoke ID");
}

static void no_database_is_one_clear_line_and_status_1(void **state)
{
	(void)state;
	const char *argv[] = {METER_BIN, "rates", "--vcpus", "2", "--memory-gib", "4", NULL};
	run_program(argv, "postgresql:///meter?host=/nonexistent&user=meter", &res);
	assert_int_equal(res.status, 1);
	assert_int_equal(run_lines(res.err), 1);
	assert_non_null(strstr(res.err, "could not connect to the database"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(rates_show_0_08_busy_and_0_03125_idle, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(estimate_prints_the_worked_example_with_1_28, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(bad_flags_get_one_line_and_exit_status_2, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                a_created_key_is_printed_once_and_stored_only_as_a_hash, setup, teardown),
	        cmocka_unit_test_setup_teardown(hosts_are_bound_listed_and_unbound, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(prices_come_from_the_price_plans_table, setup,
	                                        teardown),
	        cmocka_unit_test(every_verb_and_action_prints_its_usage_for_help),
	        cmocka_unit_test(no_database_is_one_clear_line_and_status_1),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
