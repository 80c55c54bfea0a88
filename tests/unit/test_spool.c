/* The spool: records in order, bounded, torn tails cut, damage moved aside. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collector/batch.h"
#include "collector/spool.h"
#include "common/log.h"

static char dir[64];
static char path[128];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/meter-spool-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(path, sizeof path, "%s/sub/collector.spool", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

struct got {
	char text[4096];
	int calls, fail_at;
};

static bool collect(void *ctx, const char *data, size_t len, char *err, size_t errlen)
{
	struct got *g = ctx;
	if (++g->calls == g->fail_at) {
		snprintf(err, errlen, "database went away");
		return false;
	}
	strncat(g->text, data, len);
	strcat(g->text, "|");
	return true;
}

static void append3(struct spool *s)
{
	char err[256];
	assert_int_equal(spool_append(s, "one", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(s, "two", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(s, "three", 5, err, sizeof err), SPOOL_OK);
}

static off_t file_size(void)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

static void records_replay_in_order_and_survive_a_restart(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	struct got g = {.fail_at = 2};
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	append3(&s);
	spool_close(&s);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err)); /* a restart */
	assert_int_equal(s.records, 3);
	assert_int_equal(s.next_seq, 4);
	/* a replay cut short keeps every record */
	assert_false(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(err, "database went away");
	assert_int_equal(s.records, 3);
	assert_int_equal(file_size(), 3 * SPOOL_HEADER + 11);
	g = (struct got){0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|three|");
	assert_int_equal(s.records, 0);
	assert_int_equal(file_size(), 0);
	spool_close(&s);
}

static void a_full_spool_refuses_and_keeps_the_old_records(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	assert_true(spool_open(&s, path, 2 * SPOOL_HEADER + 6, err, sizeof err));
	assert_int_equal(spool_append(&s, "one", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "two", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "x", 1, err, sizeof err), SPOOL_FULL);
	assert_non_null(strstr(err, "is full"));
	assert_int_equal(s.records, 2);
	spool_close(&s);
	struct got g = {0};
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|");
	spool_close(&s);
}

static void a_torn_last_record_is_dropped_and_the_rest_kept(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	append3(&s);
	spool_close(&s);
	/* a crash in mid-append: the last record lost its final bytes */
	assert_int_equal(truncate(path, file_size() - 2), 0);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 2);
	assert_int_equal(file_size(), 2 * SPOOL_HEADER + 6);
	/* new records continue the sequence after the kept ones */
	assert_int_equal(spool_append(&s, "four", 4, err, sizeof err), SPOOL_OK);
	struct got g = {0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|four|");
	spool_close(&s);

	/* only part of a header made it */
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	append3(&s);
	spool_close(&s);
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "MSP1\x05", 5), 5);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 3);
	spool_close(&s);

	/* the whole last record written but its bytes not (a bad CRC) */
	fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, "X", 1, file_size() - 1), 1);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 2);
	spool_close(&s);
}

static void damage_before_the_end_moves_the_file_aside_not_away(void **state)
{
	(void)state;
	struct spool s;
	char err[256], pattern[160];
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	append3(&s);
	spool_close(&s);
	int fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, "Z", 1, SPOOL_HEADER + 1), 1); /* inside record one */
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 0);
	spool_close(&s);
	glob_t gl;
	snprintf(pattern, sizeof pattern, "%s.damaged-*", path);
	assert_int_equal(glob(pattern, 0, NULL, &gl), 0);
	assert_int_equal(gl.gl_pathc, 1);
	globfree(&gl);
}

static void a_flipped_length_is_damage_and_zeros_at_the_end_are_a_tear(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	append3(&s);
	spool_close(&s);
	/* zeros after the records, as when a crash extended the file */
	int fd = open(path, O_WRONLY | O_APPEND);
	static const char zeros[100];
	assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 3);
	assert_int_equal(file_size(), 3 * SPOOL_HEADER + 11);
	spool_close(&s);
	/* one bit of the second record's length: its header CRC catches it; nothing is
	 * cut off, the whole file is moved aside */
	fd = open(path, O_RDWR);
	unsigned char b;
	assert_int_equal(pread(fd, &b, 1, SPOOL_HEADER + 3 + 4), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, SPOOL_HEADER + 3 + 4), 1);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, err, sizeof err));
	assert_int_equal(s.records, 0);
	spool_close(&s);
	char pattern[160];
	glob_t gl;
	snprintf(pattern, sizeof pattern, "%s.damaged-*", path);
	assert_int_equal(glob(pattern, 0, NULL, &gl), 0);
	assert_int_equal(gl.gl_pathc, 1);
	struct stat st;
	assert_int_equal(stat(gl.gl_pathv[0], &st), 0);
	assert_int_equal(st.st_size, 3 * SPOOL_HEADER + 11); /* every byte kept */
	globfree(&gl);
}

static void scanning_random_bytes_never_reads_past_the_end(void **state)
{
	(void)state;
	unsigned char buf[512];
	unsigned int seed = 7;
	for (int round = 0; round < 2000; round++) {
		size_t len = (size_t)(rand_r(&seed) % sizeof buf);
		for (size_t i = 0; i < len; i++)
			buf[i] = (unsigned char)rand_r(&seed);
		if (len >= 4 && round % 2)
			memcpy(buf, "MSP1", 4);
		size_t n;
		uint64_t last;
		bool torn;
		unsigned char *copy = malloc(len ? len : 1);
		memcpy(copy, buf, len);
		size_t good = spool_scan(copy, len, &n, &last, &torn);
		free(copy);
		assert_true(good <= len);
	}
}

/* A full spool keeps the newest sample of each incarnation: all the CPU, less resolution. */
static void thinning_keeps_the_newest_row_of_each_incarnation_in_order(void **state)
{
	(void)state;
	struct batch b = {0};
	struct cg_reading r = {.cpu_usage_us = 0,
	                       .mem_current = CG_ABSENT,
	                       .mem_peak = CG_ABSENT,
	                       .mem_anon_kernel = CG_ABSENT,
	                       .mem_limit = CG_ABSENT,
	                       .cpu_limit_millicores = CG_ABSENT};
	struct {
		const char *sb;
		int64_t inc, cpu;
	} rows[] = {{"sb-1", 7, 10}, {"sb-2", 7, 20}, {"sb-1", 7, 30}, {"sb-1", 8, 5},
	            {"sb-2", 7, 40}, {"sb-10", 7, 1}, {"sb-1", 7, 31}};
	for (int round = 0; round < 300; round++) /* enough rows to need probing */
		for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
			r.cpu_usage_us = rows[i].cpu + round;
			assert_true(batch_add(&b, rows[i].sb, "", rows[i].inc,
			                      1700000000000000 + round * 1000000 + (int64_t)i, "h",
			                      &r));
		}
	assert_true(batch_thin(&b));
	assert_int_equal(b.rows, 4);
	char text[1024];
	assert_true(b.len < sizeof text);
	memcpy(text, b.buf, b.len);
	text[b.len] = '\0';
	/* In the order of their last rows: sb-1/8, sb-2/7, sb-10/7, sb-1/7 (cpu 31 + 299). */
	const char *want[] = {"sb-1\t8\t", "sb-2\t7\t", "sb-10\t7\t", "sb-1\t7\t"};
	char *line = text;
	for (size_t i = 0; i < 4; i++) {
		if (strncmp(line, want[i], strlen(want[i])) != 0)
			fail_msg("row %zu is \"%.40s\"", i, line);
		line = strchr(line, '\n') + 1;
	}
	assert_non_null(strstr(text, "\t330\t"));
	assert_null(strstr(text, "\t329\t"));
	assert_true(batch_thin(&b)); /* thinning again changes nothing */
	assert_int_equal(b.rows, 4);
	batch_free(&b);

	/* An end is never thinned away, even with later rows of its incarnation (an
	 * emptied cgroup sampled again). */
	struct batch e = {0};
	for (int k = 0; k < 5; k++) {
		r.cpu_usage_us = 100 + k;
		assert_true(batch_add(&e, "sb-1", "", 7, 1700000000000000 + k, "h", &r));
		if (k == 2)
			batch_mark_end(&e);
	}
	assert_true(batch_thin(&e));
	assert_int_equal(e.rows, 2);
	memcpy(text, e.buf, e.len);
	text[e.len] = '\0';
	assert_non_null(strstr(text, "\t102\t"));
	assert_non_null(strstr(text, "\tt\nsb-1\t7\t")); /* the end, then the last row */
	assert_non_null(strstr(text, "\t104\t"));
	batch_free(&e);
}

int main(void)
{
	log_init("test", LOG_ERROR, false);
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(records_replay_in_order_and_survive_a_restart,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_full_spool_refuses_and_keeps_the_old_records,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_torn_last_record_is_dropped_and_the_rest_kept,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(damage_before_the_end_moves_the_file_aside_not_away,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_flipped_length_is_damage_and_zeros_at_the_end_are_a_tear, setup,
	                teardown),
	        cmocka_unit_test(scanning_random_bytes_never_reads_past_the_end),
	        cmocka_unit_test(thinning_keeps_the_newest_row_of_each_incarnation_in_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
