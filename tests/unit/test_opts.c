/* Options from one table: values, bounds, environment, defaults, errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "common/opts.h"

static const struct opt_def defs[] = {
        {"vcpus", OPT_DECIMAL, 3, 1, 256000, NULL, NULL, true, "vCPUs"},
        {"interval", OPT_DURATION, 0, 1000, 3600000000, "10s", "TEST_OPTS_INTERVAL", false,
         "how often"},
        {"json", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "JSON"},
        {"name", OPT_STRING, 0, 0, 0, NULL, NULL, false, "a name"},
};
#define N (sizeof defs / sizeof defs[0])

static bool parse(int argc, const char **argv, struct opt_val *v, char *err)
{
	return opts_parse(defs, N, argc, (char **)argv, v, err, 256);
}

static void values_defaults_and_environment(void **state)
{
	(void)state;
	struct opt_val v[N];
	char err[256];
	const char *a[] = {"--vcpus", "0.5", "--json", "--name=x y"};
	unsetenv("TEST_OPTS_INTERVAL");
	assert_true(parse(4, a, v, err));
	assert_int_equal(v[0].num, 500);
	assert_int_equal(v[1].num, 10000000); /* default 10s */
	assert_true(v[2].set);
	assert_string_equal(v[3].str, "x y");
	setenv("TEST_OPTS_INTERVAL", "250ms", 1);
	assert_true(parse(2, a, v, err));
	assert_int_equal(v[1].num, 250000);
	const char *b[] = {"--vcpus=2", "--interval", "2m"};
	assert_true(parse(3, b, v, err)); /* the command line wins */
	assert_int_equal(v[1].num, 120000000);
	unsetenv("TEST_OPTS_INTERVAL");
}

static void errors_name_the_option_and_the_reason(void **state)
{
	(void)state;
	struct opt_val v[N];
	char err[256];
	struct {
		int argc;
		const char *argv[3];
		const char *msg;
	} cases[] = {
	        {0, {NULL}, "missing --vcpus"},
	        {2, {"--vcpus", "-1"}, "--vcpus: -1 is out of range (0.001 to 256)"},
	        {2, {"--vcpus", "abc"}, "--vcpus: \"abc\" is not a decimal number"},
	        {2, {"--vcpus", "0.0001"}, "--vcpus: \"0.0001\" has more than 3 decimal places"},
	        {2, {"--vcpus", "1e3"}, "--vcpus: \"1e3\" is not a decimal number"},
	        {1, {"--vcpus"}, "--vcpus needs a value"},
	        {3, {"--vcpus", "1", "--cpus"}, "unknown option \"--cpus\""},
	        {3, {"--vcpus", "1", "extra"}, "unexpected argument \"extra\""},
	        {3, {"--vcpus", "1", "--json=1"}, "--json takes no value"},
	        {3,
	         {"--vcpus=1", "--interval", "5 s"},
	         "--interval: \"5 s\" is not a duration (a whole number with s, ms, m or h)"},
	        {3,
	         {"--vcpus=1", "--interval", "2h"},
	         "--interval: 2h is out of range (1 ms to 3600000 ms)"},
	        {2, {"--vcpus=1", "--vcpus=2"}, "--vcpus: given twice"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		err[0] = '\0';
		assert_false(parse(cases[i].argc, cases[i].argv, v, err));
		assert_string_equal(err, cases[i].msg);
	}
}

/* --help: one line per option; "(default X)" only for an option that has one. */
static void help_shows_a_default_only_when_there_is_one(void **state)
{
	(void)state;
	static const struct opt_def help_defs[] = {
	        {"interval", OPT_DURATION, 0, 1000, 3600000000, "10s", "TEST_OPTS_INTERVAL", false,
	         "how often"},
	        {"tls-cert", OPT_STRING, 0, 0, 0, "", "TEST_OPTS_CERT", false, "a certificate"},
	        {"name", OPT_STRING, 0, 0, 0, NULL, NULL, true, "a name"},
	};
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	assert_non_null(out);
	opts_help(out, "usage: test", help_defs, sizeof help_defs / sizeof help_defs[0]);
	assert_int_equal(fclose(out), 0);
	assert_string_equal(text,
	                    "usage: test\n"
	                    "\n"
	                    "options:\n"
	                    "  --interval DURATION        how often (default 10s) [env "
	                    "TEST_OPTS_INTERVAL]\n"
	                    "  --tls-cert TEXT            a certificate [env TEST_OPTS_CERT]\n"
	                    "  --name TEXT                a name (required)\n");
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(values_defaults_and_environment),
	        cmocka_unit_test(errors_name_the_option_and_the_reason),
	        cmocka_unit_test(help_shows_a_default_only_when_there_is_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
