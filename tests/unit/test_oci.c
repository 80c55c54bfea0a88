/*
 * What meter-hook oci reads from a runtime (hook/oci.h): the state on stdin
 * and the bundle's config.json, in a temporary bundle.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/match.h"
#include "hook/oci.h"

#define PATTERN "sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)"

struct fx {
	char dir[64];
	struct matcher *m;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	char err[256];
	snprintf(f->dir, sizeof f->dir, "/tmp/meter-oci-XXXXXX");
	if (mkdtemp(f->dir) == NULL || (f->m = matcher_new(PATTERN, err, sizeof err)) == NULL)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char p[128];
	snprintf(p, sizeof p, "%s/config.json", f->dir);
	unlink(p);
	rmdir(f->dir);
	matcher_free(f->m);
	free(f);
	return 0;
}

static void bundle(struct fx *f, const char *config)
{
	char p[128];
	snprintf(p, sizeof p, "%s/config.json", f->dir);
	FILE *o = fopen(p, "w");
	assert_non_null(o);
	fputs(config, o);
	fclose(o);
}

/* oci_read of a state with status and annotations (JSON text or "") for the bundle. */
static bool read_state(struct fx *f, const char *status, const char *ann, struct oci_target *t,
                       char *err)
{
	char s[1024];
	snprintf(s, sizeof s,
	         "{\"ociVersion\": \"1.0.2\", \"id\": \"c1\", \"status\": \"%s\", \"pid\": 42, "
	         "\"bundle\": \"%s\"%s%s}",
	         status, f->dir, ann[0] ? ", \"annotations\": " : "", ann);
	return oci_read(s, strlen(s), f->m, t, err, 512);
}

static const char sized[] =
        "{\"linux\": {\"cgroupsPath\": \"/sandboxes/acme/sbx-1\", \"resources\": {"
        "\"cpu\": {\"quota\": 150000, \"period\": 100000}, "
        "\"memory\": {\"limit\": 2147483648}}}}";

static void the_path_names_the_sandbox_and_the_limits_size_it(void **state)
{
	struct fx *f = *state;
	struct oci_target t;
	char err[512];
	bundle(f, sized);
	assert_true(read_state(f, "creating", "", &t, err));
	assert_int_equal(t.phase, OCI_ADMIT);
	assert_string_equal(t.container, "c1");
	assert_string_equal(t.account, "acme");
	assert_string_equal(t.sandbox, "sbx-1");
	assert_int_equal(t.vcpus_milli, 1500);
	assert_int_equal(t.memory_milli, 2000);
	assert_true(read_state(f, "stopped", "", &t, err));
	assert_int_equal(t.phase, OCI_RELEASE);
}

static void annotations_win_over_the_path(void **state)
{
	struct fx *f = *state;
	struct oci_target t;
	char err[512];
	bundle(f,
	       "{\"annotations\": {\"meter.account\": \"from-config\"}, \"linux\": {"
	       "\"cgroupsPath\": \"system.slice:runc:abc\", \"resources\": {\"cpu\": {\"quota\": "
	       "50000}, \"memory\": {\"limit\": 1610612737}}}}");
	assert_true(read_state(f, "creating", "{\"meter.sandbox\": \"sb-ann\"}", &t, err));
	assert_string_equal(t.account, "from-config");
	assert_string_equal(t.sandbox, "sb-ann");
	assert_int_equal(t.vcpus_milli, 500);   /* the kernel's default period, 100 ms */
	assert_int_equal(t.memory_milli, 1501); /* 1.5 GiB and a byte: rounded up */
	/* the state's annotations win over the config's */
	assert_true(read_state(f, "creating",
	                       "{\"meter.account\": \"from-state\", \"meter.sandbox\": \"sb-s\"}",
	                       &t, err));
	assert_string_equal(t.account, "from-state");
}

/* The path the collector meters decides: annotations naming another sandbox
 * or account than it are refused (a container must not admit, bill or release
 * in another account's name), whatever the phase. */
static void annotations_that_disagree_with_the_path_are_refused(void **state)
{
	struct fx *f = *state;
	struct oci_target t;
	char err[512];
	bundle(f, sized); /* /sandboxes/acme/sbx-1 */
	const char *phases[] = {"creating", "stopped"};
	for (int i = 0; i < 2; i++) {
		assert_false(read_state(
		        f, phases[i],
		        "{\"meter.account\": \"victim\", \"meter.sandbox\": \"sbx-1\"}", &t, err));
		assert_true(t.conflict);
		assert_non_null(strstr(err,
		                       "container c1: the annotation meter.account \"victim\" is "
		                       "not the account of its cgroup path"));
		assert_non_null(strstr(err, "(\"acme\")"));
		assert_false(read_state(f, phases[i], "{\"meter.sandbox\": \"vsb-1\"}", &t, err));
		assert_true(t.conflict);
		assert_non_null(strstr(err, "meter.sandbox \"vsb-1\""));
	}
	/* annotations that say the same are fine */
	assert_true(read_state(f, "creating",
	                       "{\"meter.account\": \"acme\", \"meter.sandbox\": \"sbx-1\"}", &t,
	                       err));
	assert_false(t.conflict);
	assert_string_equal(t.account, "acme");
	/* and what is not read is no conflict */
	assert_false(read_state(f, "running", "", &t, err));
	assert_false(t.conflict);
}

static void unlimited_resources_read_as_none(void **state)
{
	struct fx *f = *state;
	struct oci_target t;
	char err[512];
	bundle(f, "{\"linux\": {\"cgroupsPath\": \"sandboxes/a/b\", \"resources\": {\"cpu\": "
	          "{\"quota\": -1}, \"memory\": {\"limit\": 0}}}}");
	assert_true(read_state(f, "creating", "", &t, err));
	assert_int_equal(t.vcpus_milli, 0);
	assert_int_equal(t.memory_milli, 0);
}

static void what_cannot_be_read_is_said(void **state)
{
	struct fx *f = *state;
	struct oci_target t;
	char err[512];
	bundle(f, sized);
	assert_false(read_state(f, "running", "", &t, err));
	assert_non_null(strstr(err, "createRuntime"));
	assert_false(oci_read("not json", 8, f->m, &t, err, sizeof err));
	assert_non_null(strstr(err, "not an OCI container state"));
	const char *nowhere = "{\"id\": \"x\", \"status\": \"creating\", \"bundle\": \"/nowhere\"}";
	assert_false(oci_read(nowhere, strlen(nowhere), f->m, &t, err, sizeof err));
	assert_non_null(strstr(err, "/nowhere/config.json"));
	/* a path the pattern does not match, no annotations */
	bundle(f, "{\"linux\": {\"cgroupsPath\": \"/other/x\"}}");
	assert_false(read_state(f, "creating", "", &t, err));
	assert_non_null(strstr(err, "meter.sandbox"));
	assert_non_null(strstr(err, "other/x"));
	/* an id the API would refuse */
	bundle(f, "{\"annotations\": {\"meter.sandbox\": \"bad id!\"}}");
	assert_false(read_state(f, "creating", "", &t, err));
	assert_non_null(strstr(err, "not a valid id"));
	/* limits that are not whole numbers */
	bundle(f, "{\"linux\": {\"cgroupsPath\": \"sandboxes/a/b\", \"resources\": {\"cpu\": "
	          "{\"quota\": 1.5}}}}");
	assert_false(read_state(f, "creating", "", &t, err));
	bundle(f, "{\"linux\": {\"cgroupsPath\": \"sandboxes/a/b\", \"resources\": {\"memory\": "
	          "{\"limit\": \"2G\"}}}}");
	assert_false(read_state(f, "creating", "", &t, err));
	bundle(f, "[1, 2]");
	assert_false(read_state(f, "creating", "", &t, err));
	assert_non_null(strstr(err, "not a JSON object"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(the_path_names_the_sandbox_and_the_limits_size_it,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(annotations_win_over_the_path, setup, teardown),
	        cmocka_unit_test_setup_teardown(annotations_that_disagree_with_the_path_are_refused,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(unlimited_resources_read_as_none, setup, teardown),
	        cmocka_unit_test_setup_teardown(what_cannot_be_read_is_said, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
