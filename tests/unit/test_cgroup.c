/* cgroup files: parsers, layouts, and readings from fake v2, v1 and hybrid trees. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/cgroup.h"
#include "collector/layout.h"
#include "tests/support/fakecg.h"
#include "tests/support/fdfill.h"

#define P(s) s, strlen(s)

static void keyed_files_give_only_whole_keys(void **state)
{
	(void)state;
	int64_t v = -7;
	const char *stat = "usage_usec 123\nuser_usec 100\nsystem_usec 23\n";
	assert_true(cg_parse_keyed(P(stat), "usage_usec", &v));
	assert_int_equal(v, 123);
	assert_true(cg_parse_keyed(P(stat), "system_usec", &v));
	assert_int_equal(v, 23);
	assert_false(cg_parse_keyed(P(stat), "usage", &v)); /* a prefix of a key is no key */
	assert_false(cg_parse_keyed(P(stat), "nice_usec", &v));
	assert_true(cg_parse_keyed(P("anon 5\nanon_thp 9\n"), "anon_thp", &v));
	assert_int_equal(v, 9);
	assert_false(cg_parse_keyed(P("usage_usec -1\n"), "usage_usec", &v));
	assert_false(cg_parse_keyed(P("usage_usec 12x\n"), "usage_usec", &v));
	assert_false(cg_parse_keyed(P("usage_usec 99999999999999999999\n"), "usage_usec", &v));
	assert_false(cg_parse_keyed(P("usage_usec \n"), "usage_usec", &v));
	/* the buffer may end without a newline, and no byte past len is read */
	assert_true(cg_parse_keyed("usage_usec 42", 13, "usage_usec", &v));
	assert_int_equal(v, 42);
	assert_true(cg_parse_keyed("usage_usec 4299", 12, "usage_usec", &v));
	assert_int_equal(v, 4);
	assert_false(cg_parse_keyed("", 0, "usage_usec", &v));
}

static void single_numbers_limits_and_quotas(void **state)
{
	(void)state;
	int64_t v;
	assert_true(cg_parse_int(P("4096\n"), &v));
	assert_int_equal(v, 4096);
	assert_false(cg_parse_int(P("max\n"), &v));
	assert_false(cg_parse_int(P(""), &v));
	assert_true(cg_parse_max(P("max\n"), &v));
	assert_int_equal(v, CG_ABSENT);
	assert_true(cg_parse_max(P("4294967296\n"), &v));
	assert_int_equal(v, INT64_C(4294967296));
	assert_false(cg_parse_max(P("maximum\n"), &v));
	assert_true(cg_parse_cpu_max(P("max 100000\n"), &v));
	assert_int_equal(v, CG_ABSENT);
	assert_true(cg_parse_cpu_max(P("200000 100000\n"), &v));
	assert_int_equal(v, 2000);
	assert_true(cg_parse_cpu_max(P("50000 100000\n"), &v));
	assert_int_equal(v, 500);
	assert_false(cg_parse_cpu_max(P("200000\n"), &v));
	assert_false(cg_parse_cpu_max(P("200000 0\n"), &v));
	assert_false(cg_parse_cpu_max(P("x 100000\n"), &v));
	assert_true(cg_v1_quota_millicores(-1, 100000, &v));
	assert_int_equal(v, CG_ABSENT);
	assert_true(cg_v1_quota_millicores(150000, 100000, &v));
	assert_int_equal(v, 1500);
	assert_false(cg_v1_quota_millicores(1000, 0, &v));
	/* rounded up to the thousandth, never below what the quota lets it use: a sandbox
	 * at its full quota is not capped below its use (rule 4), as meter-hook sizes it */
	assert_true(cg_parse_cpu_max(P("33334 100000\n"), &v));
	assert_int_equal(v, 334);
	assert_true(cg_v1_quota_millicores(33333, 100000, &v));
	assert_int_equal(v, 334);
	assert_true(cg_v1_quota_millicores(1, 100000, &v)); /* below a thousandth */
	assert_int_equal(v, 1);
	assert_true(cg_v1_quota_millicores(INT64_MAX, 1, &v) == false);
}

/* A fake tree per test, removed by teardown even when the test fails. */
static char root[256];

static int teardown(void **state)
{
	(void)state;
	fdfill_restore();
	fakecg_remove(root);
	root[0] = '\0';
	return 0;
}

static struct cg_layout tree; /* of the tree read_sandbox() made */

static void read_sandbox(const char *kind, enum fakecg_kind fk, struct cg_reading *r,
                         struct cg_handle *h)
{
	char err[512];
	assert_true(fakecg_tree("/tmp", fk, root, sizeof root));
	assert_true(fakecg_sandbox(root, fk, "sandboxes/acme/sb-1", 1234567));
	if (!layout_find(root, kind, NULL, &tree, err, sizeof err))
		fail_msg("%s", err);
	assert_int_equal(cg_open(h, &tree, "sandboxes/acme/sb-1"), CG_OK);
	assert_true(h->inode > 0);
	assert_int_equal(cg_read(h, r, NULL), CG_OK);
}

static void v2_tree_gives_every_figure(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_sandbox("v2", FAKE_V2, &r, &h);
	assert_int_equal(r.cpu_usage_us, 1234567);
	assert_int_equal(r.mem_current, 1048576);
	assert_int_equal(r.mem_peak, 2097152);
	assert_int_equal(r.mem_anon_kernel, 4096 + 1024);
	assert_int_equal(r.mem_limit, CG_ABSENT); /* "max" */
	assert_int_equal(r.cpu_limit_millicores, 2000);
	int pop = -1;
	assert_int_equal(cg_read_populated(&h, &tree, "sandboxes/acme/sb-1", &pop), CG_OK);
	assert_int_equal(pop, 1);
	cg_close(&h);
}

/*
 * A limit a platform writes just after it made the cgroup is seen at the next
 * reading while the sandbox is young; after that, limits are re-read every
 * CG_LIMIT_EVERY readings.
 */
static void a_young_sandboxs_missing_limit_is_looked_for_at_every_reading(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_sandbox("v2", FAKE_V2, &r, &h); /* its first reading: memory.max is "max" */
	assert_int_equal(r.mem_limit, CG_ABSENT);
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.max", "1073741824\n"));
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(r.mem_limit, INT64_C(1073741824)); /* at once, not 10 readings later */
	/* once it has both, a change waits for the next re-read */
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.max", "2147483648\n"));
	int k = 0;
	for (; k < CG_LIMIT_EVERY + 1 && r.mem_limit == INT64_C(1073741824); k++)
		assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(r.mem_limit, INT64_C(2147483648));
	assert_true(k > 1);
	cg_close(&h);
}

/* A v2 sandbox read past its young readings, when the slow figures wait their turn. */
static void read_past_young(struct cg_reading *r, struct cg_handle *h)
{
	read_sandbox("v2", FAKE_V2, r, h);
	for (int i = 0; i < CG_LIMIT_EVERY; i++)
		assert_int_equal(cg_read(h, r, NULL), CG_OK);
}

/*
 * CPU usage, which billing needs, is read at every reading; memory.stat (the
 * kernel builds it at each read, and nothing is billed on it) only with the
 * limits, its last figure reported in between.
 */
static void memory_stat_is_read_with_the_limits(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_past_young(&r, &h);
	assert_int_equal(r.mem_anon_kernel, 4096 + 1024);
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.stat",
	                         "anon 8192\nfile 0\nkernel 2048\n"));
	assert_true(fakecg_set_cpu(root, FAKE_V2, "sandboxes/acme/sb-1", 3145728));
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	int k = 1;
	assert_int_equal(r.cpu_usage_us, 3145728); /* at once */
	for (; k <= CG_LIMIT_EVERY && r.mem_anon_kernel == 4096 + 1024; k++)
		assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(r.mem_anon_kernel, 8192 + 2048);
	assert_true(k > 1); /* not at the next reading: it waited for the re-read */
	cg_close(&h);
}

/*
 * Memory in use and its peak are read with the limits; in between, the last
 * ones read are reported, while CPU usage is read at every reading. A reading
 * asked for with cg_read_all_next (a sandbox's last, when it emptied) reads
 * them at once.
 */
static void memory_now_and_peak_are_read_with_the_limits(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_past_young(&r, &h);
	assert_int_equal(r.mem_current, 1048576);
	assert_int_equal(r.mem_peak, 2097152);
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.peak", "8388608\n"));
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.current", "3145728\n"));
	int k = 0;
	do {
		assert_true(fakecg_set_cpu(root, FAKE_V2, "sandboxes/acme/sb-1", 2000000 + k));
		assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
		assert_int_equal(r.cpu_usage_us, 2000000 + k); /* at every reading */
		k++;
		if (r.mem_peak != 8388608) { /* not re-read yet: both as they were */
			assert_int_equal(r.mem_peak, 2097152);
			assert_int_equal(r.mem_current, 1048576);
		}
	} while (r.mem_peak != 8388608 && k <= CG_LIMIT_EVERY);
	assert_int_equal(r.mem_peak, 8388608);
	assert_int_equal(r.mem_current, 3145728); /* re-read together */
	assert_true(k > 1);                       /* it waited for the re-read */
	/* asked for, the next reading has them at once */
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.peak", "9437184\n"));
	assert_true(fakecg_write(root, "", "sandboxes/acme/sb-1", "memory.current", "4194304\n"));
	cg_read_all_next(&h);
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(r.mem_peak, 9437184);
	assert_int_equal(r.mem_current, 4194304);
	cg_close(&h);
}

/* cgroup.events is read by path: a folder made again under the name is not ours. */
static void cgroup_events_of_a_new_incarnation_are_not_read_as_ours(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	char path[600];
	read_sandbox("v2", FAKE_V2, &r, &h);
	int pop = -1;
	assert_int_equal(cg_read_populated(&h, &tree, "sandboxes/acme/sb-1", &pop), CG_OK);
	snprintf(path, sizeof path, "%s/sandboxes/acme/sb-1", root);
	assert_true(fakecg_remove(path));
	assert_int_equal(cg_read_populated(&h, &tree, "sandboxes/acme/sb-1", &pop), CG_GONE);
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/sb-1", 5));
	assert_true(fakecg_set_populated(root, FAKE_V2, "sandboxes/acme/sb-1", 0));
	pop = -1;
	assert_int_equal(cg_read_populated(&h, &tree, "sandboxes/acme/sb-1", &pop), CG_GONE);
	assert_int_equal(pop, -1);
	cg_close(&h);
}

static void v1_tree_converts_nanoseconds_and_cfs_quota(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_sandbox("v1", FAKE_V1, &r, &h);
	assert_int_equal(r.cpu_usage_us, 1234567); /* cpuacct.usage is in ns */
	assert_int_equal(r.mem_current, 1048576);
	assert_int_equal(r.mem_peak, 2097152);
	assert_int_equal(r.mem_anon_kernel, 8192 + 4096); /* total_rss + kmem */
	assert_int_equal(r.mem_limit, INT64_C(4294967296));
	assert_int_equal(r.cpu_limit_millicores, 2000);
	int pop;
	assert_int_equal(cg_read_populated(&h, &tree, "sandboxes/acme/sb-1", &pop),
	                 CG_ERROR); /* v1 has no cgroup.events */
	cg_close(&h);
}

static void hybrid_tree_takes_cpu_from_v2_and_memory_from_v1(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	read_sandbox("hybrid", FAKE_HYBRID, &r, &h);
	assert_true(h.cpu_v2);
	assert_false(h.mem_v2);
	assert_int_equal(r.cpu_usage_us, 1234567);
	assert_int_equal(r.mem_current, 1048576);
	assert_int_equal(r.mem_limit, INT64_C(4294967296));
	assert_int_equal(r.cpu_limit_millicores, CG_ABSENT); /* quota -1 */
	cg_close(&h);
}

static void a_file_the_host_lacks_is_absent_never_zero(void **state)
{
	(void)state;
	struct cg_reading r;
	struct cg_handle h;
	struct cg_layout l;
	char err[512], path[512];
	assert_true(fakecg_tree("/tmp", FAKE_V2, root, sizeof root));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sb-1", 5));
	snprintf(path, sizeof path, "%s/sb-1/memory.peak", root);
	assert_int_equal(unlink(path), 0); /* kernels before 5.19 have no memory.peak */
	snprintf(path, sizeof path, "%s/sb-1/cpu.max", root);
	assert_int_equal(unlink(path), 0);
	assert_true(
	        fakecg_write(root, "", "sb-1", "memory.stat", "anon 10\nfile 3\n")); /* no kernel */
	assert_true(layout_find(root, "v2", NULL, &l, err, sizeof err));
	assert_int_equal(cg_open(&h, &l, "sb-1"), CG_OK);
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(r.cpu_usage_us, 5);
	assert_int_equal(r.mem_peak, CG_ABSENT);
	assert_int_equal(r.cpu_limit_millicores, CG_ABSENT);
	assert_int_equal(r.mem_anon_kernel, CG_ABSENT);
	assert_int_equal(r.mem_current, 1048576);
	/* without a peak, memory in use stands in for it: read at every reading */
	for (int i = 0; i < CG_LIMIT_EVERY; i++)
		assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	for (int i = 0; i < CG_LIMIT_EVERY; i++) {
		char now[32];
		snprintf(now, sizeof now, "%d\n", 2097152 + i);
		assert_true(fakecg_write(root, "", "sb-1", "memory.current", now));
		assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
		assert_int_equal(r.mem_current, 2097152 + i);
	}
	cg_close(&h);

	/* without CPU usage it is no sandbox at all */
	snprintf(path, sizeof path, "%s/sb-1/cpu.stat", root);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(cg_open(&h, &l, "sb-1"), CG_GONE);
	assert_int_equal(cg_open(&h, &l, "no-such"), CG_GONE);
}

/*
 * At the open file limit the optional files cannot be opened either: that is
 * an error of the whole open (EMFILE), never "the host lacks memory.current",
 * and nothing stays open.
 */
static void a_file_that_cannot_be_opened_is_an_error_not_absent(void **state)
{
	(void)state;
	struct cg_handle h;
	struct cg_layout l;
	char err[512];
	assert_true(fakecg_tree("/tmp", FAKE_V2, root, sizeof root));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sb-1", 5));
	assert_true(layout_find(root, "v2", NULL, &l, err, sizeof err));
	assert_true(fdfill_limit(256));
	for (int spare = 0; spare < 7; spare++) { /* room for cpu.stat and more, not all 6 + 1 */
		assert_true(fdfill_exhaust(spare) > 0);
		errno = 0;
		assert_int_equal(cg_open(&h, &l, "sb-1"), CG_ERROR);
		assert_int_equal(errno, EMFILE);
		assert_int_equal(cg_files_open(&h), 0);
		/* every descriptor it took is back: exactly spare can be opened */
		assert_int_equal(fdfill_exhaust(0), spare);
		fdfill_restore();
		assert_true(fdfill_limit(256));
	}
	fdfill_restore();
	assert_int_equal(cg_open(&h, &l, "sb-1"), CG_OK);
	assert_int_equal(cg_files_open(&h), 6); /* cgroup.events is not held open */
	cg_close(&h);
}

static void garbage_in_a_counter_is_bad_data_and_changes_nothing(void **state)
{
	(void)state;
	struct cg_reading r = {.cpu_usage_us = 77};
	struct cg_handle h;
	struct cg_layout l;
	char err[512];
	const char *which = NULL;
	assert_true(fakecg_tree("/tmp", FAKE_V2, root, sizeof root));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sb-1", 5));
	assert_true(layout_find(root, "v2", NULL, &l, err, sizeof err));
	assert_int_equal(cg_open(&h, &l, "sb-1"), CG_OK);
	assert_true(fakecg_write(root, "", "sb-1", "cpu.stat", "usage_usec banana\n"));
	assert_int_equal(cg_read(&h, &r, &which), CG_BADDATA);
	assert_string_equal(which, "cpu usage");
	assert_int_equal(r.cpu_usage_us, 77);
	cg_close(&h);
}

static void layouts_are_checked_and_a_plain_folder_is_refused(void **state)
{
	(void)state;
	struct cg_layout l;
	char err[512];
	assert_true(fakecg_tree("/tmp", FAKE_V1, root, sizeof root));
	assert_false(layout_find(root, "v2", NULL, &l, err, sizeof err));
	assert_non_null(strstr(err, "does not hold a v2 cgroup tree"));
	assert_true(layout_find(root, "v1", NULL, &l, err, sizeof err));
	assert_string_equal(layout_name(&l), "v1");
	assert_false(layout_find(root, "v3", NULL, &l, err, sizeof err));
	assert_non_null(strstr(err, "not one of auto, v2, v1, hybrid"));
	/* auto reads the mount table: a folder in /tmp is no cgroup filesystem */
	assert_false(layout_find(root, "auto", NULL, &l, err, sizeof err));
	assert_non_null(strstr(err, "is not a cgroup filesystem"));
}

static void mountinfo_of_a_hybrid_host_is_understood(void **state)
{
	(void)state;
	char path[] = "/tmp/meter-mountinfo-XXXXXX", err[512];
	struct cg_layout l;
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char *text =
	        "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
	        "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	        "32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
	        "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup "
	        "rw,memory\n"
	        "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	        "41 22 0:38 / /mnt/other\\040place rw - cgroup2 cgroup2 rw\n";
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	bool ok = layout_find("/sys/fs/cgroup", "auto", path, &l, err, sizeof err);
	unlink(path);
	assert_true(ok);
	assert_string_equal(l.v2, "/sys/fs/cgroup/unified");
	assert_string_equal(l.cpuacct, "/sys/fs/cgroup/cpuacct");
	assert_string_equal(l.cpu, "/sys/fs/cgroup/cpu");
	assert_string_equal(l.memory, "/sys/fs/cgroup/memory");
	assert_string_equal(layout_name(&l), "hybrid");
}

/*
 * An overlay mount's options can run past the 4 KiB line buffer: the tail of
 * such a line is skipped with it, never read as a mount of its own, and a last
 * line without its newline still counts.
 */
static void a_long_mountinfo_line_is_skipped_whole(void **state)
{
	(void)state;
	static char text[16384];
	struct cg_layout l;
	int n = snprintf(text, sizeof text, "%s",
	                 "60 22 0:60 / /var/lib/x rw - overlay overlay rw,lowerdir=");
	while (n < 6000)
		n += snprintf(text + n, sizeof text - (size_t)n, "/layer%04d:", n);
	/* what the tail would look like as a line of its own, at the 4 KiB cut */
	snprintf(text + 4095 - 1, sizeof text - 4094,
	         "70 30 0:70 / /sys/fs/cgroup/fake rw - cgroup2 cgroup2 rw\n"
	         "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
	         "31 30 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory");
	memset(&l, 0, sizeof l);
	FILE *f = fmemopen(text, strlen(text), "r");
	assert_non_null(f);
	layout_from_mountinfo("/sys/fs/cgroup", f, &l);
	fclose(f);
	assert_string_equal(l.v2, "/sys/fs/cgroup/unified");
	assert_string_equal(l.memory, "/sys/fs/cgroup/memory");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(keyed_files_give_only_whole_keys),
	        cmocka_unit_test(single_numbers_limits_and_quotas),
	        cmocka_unit_test_teardown(v2_tree_gives_every_figure, teardown),
	        cmocka_unit_test_teardown(memory_stat_is_read_with_the_limits, teardown),
	        cmocka_unit_test_teardown(memory_now_and_peak_are_read_with_the_limits, teardown),
	        cmocka_unit_test_teardown(
	                a_young_sandboxs_missing_limit_is_looked_for_at_every_reading, teardown),
	        cmocka_unit_test_teardown(cgroup_events_of_a_new_incarnation_are_not_read_as_ours,
	                                  teardown),
	        cmocka_unit_test_teardown(v1_tree_converts_nanoseconds_and_cfs_quota, teardown),
	        cmocka_unit_test_teardown(hybrid_tree_takes_cpu_from_v2_and_memory_from_v1,
	                                  teardown),
	        cmocka_unit_test_teardown(a_file_the_host_lacks_is_absent_never_zero, teardown),
	        cmocka_unit_test_teardown(a_file_that_cannot_be_opened_is_an_error_not_absent,
	                                  teardown),
	        cmocka_unit_test_teardown(garbage_in_a_counter_is_bad_data_and_changes_nothing,
	                                  teardown),
	        cmocka_unit_test_teardown(layouts_are_checked_and_a_plain_folder_is_refused,
	                                  teardown),
	        cmocka_unit_test(mountinfo_of_a_hybrid_host_is_understood),
	        cmocka_unit_test(a_long_mountinfo_line_is_skipped_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
