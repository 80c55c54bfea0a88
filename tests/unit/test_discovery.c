/* Discovery on fake trees: the pattern, the account, inotify, rescans, emptying. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collector.h"
#include "common/log.h"
#include "tests/support/fakecg.h"
#include "tests/support/fdfill.h"

static char root[256], spool[300];
static struct collector c;
static bool inited;

static int teardown(void **state)
{
	(void)state;
	fdfill_restore();
	if (inited)
		collector_free(&c);
	inited = false;
	fakecg_remove(root);
	unlink(spool);
	root[0] = '\0';
	return 0;
}

static void start(enum fakecg_kind kind, const char *layout, const char *pattern)
{
	char err[512];
	assert_true(fakecg_tree("/tmp", kind, root, sizeof root));
	snprintf(spool, sizeof spool, "%s.spool", root);
	struct collector_config cfg = {
	        .root = root,
	        .layout = layout,
	        .match = pattern,
	        .host = "test-host",
	        .spool_path = spool,
	        .spool_max = 1 << 20,
	        .db_url = "postgresql:///none?host=/nonexistent&connect_timeout=1",
	        .db_role = "",
	};
	if (!collector_init(&c, &cfg, err, sizeof err))
		fail_msg("%s", err);
	inited = true;
}

/* Waits up to ms for inotify, then lets the collector handle what came, and
 * writes the ends it took once quiet, as meter-collector's loop does. */
static void wait_events(int ms)
{
	struct pollfd p = {c.inotify_fd, POLLIN, 0};
	if (poll(&p, 1, ms) > 0)
		collector_events(&c);
	while (c.flush_wanted) {
		if (poll(&p, 1, COLLECTOR_QUIET_MS) > 0)
			collector_events(&c);
		else
			collector_flush(&c);
	}
}

#define PATTERN "sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)"

static void the_pattern_finds_sandboxes_and_their_accounts(void **state)
{
	(void)state;
	start(FAKE_V2, "v2", PATTERN);
	/* an account-level cgroup with files of its own, made before the sandboxes below it
	 * (a folder appears whole by a rename, which an existing folder cannot take) */
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme", 0));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/sb-1", 10));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/globex/sb-2", 20));
	assert_true(fakecg_sandbox(root, FAKE_V2, "system.slice/cron.service", 30));
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/bad id!", 5)); /* not an id */
	char longest[160] = "sandboxes/acme/";
	memset(longest + strlen(longest), 'a', 128); /* the longest id there is */
	assert_true(fakecg_sandbox(root, FAKE_V2, longest, 7));
	char too_long[170] = "sandboxes/acme/";
	memset(too_long + strlen(too_long), 'b', 129);
	assert_true(fakecg_sandbox(root, FAKE_V2, too_long, 7));
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 3);
	assert_non_null(collector_find(&c, longest));
	struct sandbox *a = collector_find(&c, "sandboxes/acme/sb-1");
	struct sandbox *b = collector_find(&c, "sandboxes/globex/sb-2");
	assert_non_null(a);
	assert_non_null(b);
	assert_string_equal(a->id, "sb-1");
	assert_string_equal(a->account, "acme");
	assert_string_equal(b->account, "globex");
	/* only folders on the way to sandboxes are watched: not system.slice */
	for (size_t i = 0; i < c.nholders; i++)
		assert_null(strstr(c.holders[i].rel, "system.slice"));
	assert_int_equal(c.batch.rows, 3); /* each sandbox found is sampled at once */
	collector_round(&c);
	assert_int_equal(c.batch.rows, 6);
	assert_non_null(strstr(c.batch.buf, "sb-1\t"));
	assert_non_null(strstr(c.batch.buf, "\tacme\ttest-host\t10\t"));
}

static void a_pattern_without_account_leaves_it_null(void **state)
{
	(void)state;
	start(FAKE_V1, "v1", "machine\\.slice/(?<sandbox>vm-[0-9]+)\\.scope");
	assert_true(fakecg_sandbox(root, FAKE_V1, "machine.slice/vm-7.scope", 99));
	assert_true(fakecg_sandbox(root, FAKE_V1, "machine.slice/vm-x.scope", 99));
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 1);
	assert_string_equal(c.sandboxes[0]->id, "vm-7");
	assert_string_equal(c.sandboxes[0]->account, "");
	collector_round(&c);
	assert_non_null(strstr(c.batch.buf, "vm-7\t"));
	assert_non_null(strstr(c.batch.buf, "\t\\N\ttest-host\t99\t"));
}

static void a_new_cgroup_is_found_by_inotify_at_once(void **state)
{
	(void)state;
	start(FAKE_V2, "v2", PATTERN);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 0);
	/* a new account folder, then a sandbox in it: no rescan, only events */
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/initech/sb-3", 1));
	for (int i = 0; i < 20 && c.nsandboxes == 0; i++)
		wait_events(100);
	assert_int_equal(c.nsandboxes, 1);
	assert_string_equal(c.sandboxes[0]->account, "initech");
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/initech/sb-4", 1));
	for (int i = 0; i < 20 && c.nsandboxes == 1; i++)
		wait_events(100);
	assert_int_equal(c.nsandboxes, 2);
}

static void a_removed_cgroup_is_retired_and_a_new_incarnation_is_a_new_series(void **state)
{
	(void)state;
	char path[512];
	start(FAKE_V2, "v2", PATTERN);
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/sb-1", 10));
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 1);
	int64_t first = c.sandboxes[0]->h.inode;
	collector_round(&c); /* two readings, when found and in the round: 10 µs */
	assert_int_equal(c.batch.rows, 2);
	/* Moved out of the way rather than deleted, so that the file system cannot hand
	 * the same inode number straight back (ext4 would; cgroupfs never does). */
	char aside[512];
	snprintf(path, sizeof path, "%s/sandboxes/acme/sb-1", root);
	snprintf(aside, sizeof aside, "%s/old-sb-1", root);
	assert_int_equal(rename(path, aside), 0);
	for (int i = 0; i < 20 && c.nsandboxes == 1; i++)
		wait_events(100);
	assert_int_equal(c.nsandboxes, 0);
	assert_int_equal(c.stats.retired, 1);
	/* its end (rule 9): one more row, the last counter read, marked as the end */
	assert_int_equal(c.stats.ends, 1);
	assert_int_equal(c.batch.rows, 4); /* found, the round, one last look (the moved files
	                                    * still answer here; a removed cgroup's do not), the
	                                    * end */
	char end[64], text[4096];
	assert_true(c.batch.len < sizeof text);
	memcpy(text, c.batch.buf, c.batch.len); /* the batch is not NUL-terminated */
	text[c.batch.len] = '\0';
	snprintf(end, sizeof end, "sb-1\t%lld\t", (long long)first);
	const char *last = text + c.batch.len - 1;
	while (last > text && last[-1] != '\n')
		last--;
	assert_int_equal(strncmp(last, end, strlen(end)), 0);
	assert_non_null(strstr(last, "\t10\t"));
	assert_string_equal(text + c.batch.len - 8, "\tt\tread\n");
	assert_non_null(strstr(text, "\t\\N\t\\N\n")); /* the readings before: not the end */
	/* made again under the same id: a new inode, a new incarnation */
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/sb-1", 0));
	for (int i = 0; i < 20 && c.nsandboxes == 0; i++)
		wait_events(100);
	assert_int_equal(c.nsandboxes, 1);
	assert_true(c.sandboxes[0]->h.inode != first);
}

static void a_rescan_catches_what_events_missed(void **state)
{
	(void)state;
	char path[512];
	start(FAKE_HYBRID, "hybrid", PATTERN);
	collector_scan(&c);
	assert_true(fakecg_sandbox(root, FAKE_HYBRID, "sandboxes/acme/sb-1", 10));
	/* drop the events unread, as after a queue overflow */
	char buf[65536];
	while (read(c.inotify_fd, buf, sizeof buf) > 0)
		;
	assert_int_equal(c.nsandboxes, 0);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 1);
	snprintf(path, sizeof path, "%s/unified/sandboxes/acme/sb-1", root);
	assert_true(fakecg_remove(path));
	while (read(c.inotify_fd, buf, sizeof buf) > 0)
		;
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 0);
}

static void an_emptied_cgroup_gets_a_final_sample_at_once(void **state)
{
	(void)state;
	start(FAKE_V2, "v2", PATTERN);
	assert_true(fakecg_sandbox(root, FAKE_V2, "sandboxes/acme/sb-1", 10));
	collector_scan(&c);
	assert_true(fakecg_set_cpu(root, FAKE_V2, "sandboxes/acme/sb-1", 4242));
	assert_true(fakecg_set_populated(root, FAKE_V2, "sandboxes/acme/sb-1", 0));
	for (int i = 0; i < 20 && c.stats.final_samples == 0; i++)
		wait_events(100);
	assert_int_equal(c.stats.final_samples, 1);
	/* no database here: the final sample went straight to the spool */
	assert_int_equal(c.stats.spooled_batches, 1);
	assert_int_equal(c.spool.records, 1);
	assert_int_equal(c.batch.rows, 0);
	/* and it is the end of its incarnation: ended = true */
	char rec[4096];
	FILE *fp = fopen(c.spool.path, "rb");
	assert_non_null(fp);
	size_t n = fread(rec, 1, sizeof rec - 1, fp);
	fclose(fp);
	rec[n] = '\0';
	assert_true(n > SPOOL_HEADER);
	assert_non_null(strstr(rec + SPOOL_HEADER, "\t4242\t"));
	assert_int_equal(strcmp(rec + n - 8, "\tt\tread\n"), 0);
	assert_int_equal(c.stats.ends, 1);
	/* a second event while still empty takes no second final sample */
	assert_true(fakecg_set_populated(root, FAKE_V2, "sandboxes/acme/sb-1", 0));
	wait_events(300);
	assert_int_equal(c.stats.final_samples, 1);
}

/*
 * With more sandboxes than the open file limit has room for, those that fit
 * are sampled and the rest are counted and said, and the collector keeps
 * COLLECTOR_FD_RESERVE descriptors for itself: rescans go on, retire nothing
 * that is there, and take the others as room is freed.
 */
/* A v2 collector under an open file limit of limit, with n sandboxes, scanned once. */
static void start_limited(unsigned limit, int n)
{
	char rel[64];
	assert_true(fdfill_limit(limit));
	start(FAKE_V2, "v2", PATTERN);
	for (int i = 0; i < n; i++) {
		snprintf(rel, sizeof rel, "sandboxes/acme/sb-%d", i);
		assert_true(fakecg_sandbox(root, FAKE_V2, rel, 10 + i));
	}
	collector_scan(&c);
}

static void at_the_open_file_limit_what_fits_is_sampled_and_the_rest_waits(void **state)
{
	(void)state;
	char path[1536];
	/* room for 5: 6 files each, the last one needs COLLECTOR_FILES_MOST */
	start_limited(COLLECTOR_FD_RESERVE + 4 * 6 + COLLECTOR_FILES_MOST, 12);
	assert_int_equal(c.nsandboxes, 5);
	assert_int_equal(c.stats.unsampled, 7);
	assert_int_equal(c.files_open, 5 * 6);
	collector_round(&c);
	assert_int_equal(c.batch.rows, 10); /* each when found, and in the round */
	collector_scan(&c);                 /* the rescan can still read its folders */
	assert_int_equal(c.nsandboxes, 5);
	assert_int_equal(c.stats.retired, 0);
	assert_int_equal(c.stats.unsampled, 7);

	/* two sampled ones go away; the next rescan takes two of those waiting */
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof path, "%s/%s", root, c.sandboxes[k]->rel);
		assert_true(fakecg_remove(path));
	}
	for (int i = 0; i < 20 && c.stats.retired < 2; i++)
		wait_events(100);
	assert_int_equal(c.stats.retired, 2);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 5);
	assert_int_equal(c.stats.unsampled, 5);
	assert_int_equal(c.files_open, 5 * 6);
}

/* A scan that cannot open a folder (EMFILE here) does not take "not seen" for "gone". */
static void a_scan_that_cannot_read_a_folder_retires_no_sandbox(void **state)
{
	(void)state;
	start_limited(512, 3);
	assert_int_equal(c.nsandboxes, 3);
	assert_true(fdfill_exhaust(0) > 0);
	DIR *d = opendir(root);
	assert_null(d);
	assert_int_equal(errno, EMFILE);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 3);
	assert_int_equal(c.stats.retired, 0);
	fdfill_restore();
	collector_round(&c);
	assert_int_equal(c.batch.rows, 6); /* all still sampled (and once when found) */
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 3);

	/* one removed while a scan cannot read: kept; the next scan that can retires it */
	char path[1536], buf[65536];
	snprintf(path, sizeof path, "%s/sandboxes/acme/sb-1", root);
	assert_true(fakecg_remove(path));
	while (read(c.inotify_fd, buf, sizeof buf) > 0) /* as if inotify missed it */
		;
	assert_true(fdfill_limit(512));
	assert_true(fdfill_exhaust(0) > 0);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 3);
	fdfill_restore();
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 2);
	assert_null(collector_find(&c, "sandboxes/acme/sb-1"));
	assert_int_equal(c.files_open, 2 * 6);
}

static void configuration_errors_are_one_clear_line(void **state)
{
	(void)state;
	char err[512];
	struct collector_config cfg = {.root = "/tmp",
	                               .layout = "v2",
	                               .match = "(?<sandbox>[a-",
	                               .host = "h",
	                               .db_role = ""};
	assert_false(collector_init(&c, &cfg, err, sizeof err));
	assert_non_null(strstr(err, "--match: pattern does not compile at offset "));
	assert_non_null(strstr(err, "missing terminating ]"));
	cfg.match = "sandboxes/(?<id>[^/]+)";
	assert_false(collector_init(&c, &cfg, err, sizeof err));
	assert_non_null(strstr(err, "no named group \"sandbox\""));
	cfg.match = "(?<sandbox>x)";
	cfg.host = "bad host";
	assert_false(collector_init(&c, &cfg, err, sizeof err));
	assert_non_null(strstr(err, "--host-id"));
}

int main(void)
{
	log_init("test", LOG_ERROR, false);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_teardown(the_pattern_finds_sandboxes_and_their_accounts, teardown),
	        cmocka_unit_test_teardown(a_pattern_without_account_leaves_it_null, teardown),
	        cmocka_unit_test_teardown(a_new_cgroup_is_found_by_inotify_at_once, teardown),
	        cmocka_unit_test_teardown(
	                a_removed_cgroup_is_retired_and_a_new_incarnation_is_a_new_series,
	                teardown),
	        cmocka_unit_test_teardown(a_rescan_catches_what_events_missed, teardown),
	        cmocka_unit_test_teardown(an_emptied_cgroup_gets_a_final_sample_at_once, teardown),
	        cmocka_unit_test_teardown(
	                at_the_open_file_limit_what_fits_is_sampled_and_the_rest_waits, teardown),
	        cmocka_unit_test_teardown(a_scan_that_cannot_read_a_folder_retires_no_sandbox,
	                                  teardown),
	        cmocka_unit_test(configuration_errors_are_one_clear_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
