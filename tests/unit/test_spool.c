/*
 * The spool: records in order, bounded, torn tails cut, damage moved aside;
 * with a key, signed records, and none sent that does not verify.
 */
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
#include <zlib.h>

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
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	append3(&s);
	spool_close(&s);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err)); /* a restart */
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
	assert_true(spool_open(&s, path, 2 * SPOOL_HEADER + 6, NULL, err, sizeof err));
	assert_int_equal(spool_append(&s, "one", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "two", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "x", 1, err, sizeof err), SPOOL_FULL);
	assert_non_null(strstr(err, "is full"));
	assert_int_equal(s.records, 2);
	spool_close(&s);
	struct got g = {0};
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|");
	spool_close(&s);
}

static void a_torn_last_record_is_dropped_and_the_rest_kept(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	append3(&s);
	spool_close(&s);
	/* a crash in mid-append: the last record lost its final bytes */
	assert_int_equal(truncate(path, file_size() - 2), 0);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	assert_int_equal(s.records, 2);
	assert_int_equal(file_size(), 2 * SPOOL_HEADER + 6);
	/* new records continue the sequence after the kept ones */
	assert_int_equal(spool_append(&s, "four", 4, err, sizeof err), SPOOL_OK);
	struct got g = {0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|four|");
	spool_close(&s);

	/* only part of a header made it */
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	append3(&s);
	spool_close(&s);
	int fd = open(path, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "MSP1\x05", 5), 5);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	assert_int_equal(s.records, 3);
	spool_close(&s);

	/* the whole last record written but its bytes not (a bad CRC) */
	fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, "X", 1, file_size() - 1), 1);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	assert_int_equal(s.records, 2);
	spool_close(&s);
}

static void damage_before_the_end_moves_the_file_aside_not_away(void **state)
{
	(void)state;
	struct spool s;
	char err[256], pattern[160];
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	append3(&s);
	spool_close(&s);
	int fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, "Z", 1, SPOOL_HEADER + 1), 1); /* inside record one */
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
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
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	append3(&s);
	spool_close(&s);
	/* zeros after the records, as when a crash extended the file */
	int fd = open(path, O_WRONLY | O_APPEND);
	static const char zeros[100];
	assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
	close(fd);
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
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
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
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
		size_t good = spool_scan(copy, len, NULL, &n, &last, &torn);
		free(copy);
		assert_true(good <= len);
	}
}

/* ---- signed records (a key) ---- */

#define SH SPOOL_SIGNED_HEADER

static void make_key(struct spool_key *k, unsigned char fill)
{
	memset(k, 0, sizeof *k);
	k->len = SPOOL_KEY_MIN;
	for (size_t i = 0; i < k->len; i++)
		k->bytes[i] = (unsigned char)(fill + i);
}

static size_t read_all(const char *p, unsigned char *buf, size_t len)
{
	int fd = open(p, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t n = read(fd, buf, len);
	close(fd);
	assert_true(n >= 0 && (size_t)n < len);
	return (size_t)n;
}

static void write_all(const char *p, const unsigned char *buf, size_t len)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void put32le(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32le(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * What anyone who can write the file can do: set both CRCs of the signed record
 * at off right again after changing it, so that only its HMAC can tell.
 */
static void reseal(unsigned char *buf, size_t off)
{
	unsigned char *h = buf + off;
	uint32_t len = get32le(h + 4);
	uLong c = crc32(0L, Z_NULL, 0);
	c = crc32(c, h + 8, 8);
	c = crc32(c, h + SH, (uInt)len);
	put32le(h + 32, (uint32_t)c);
	put32le(h + 68, (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, 68));
}

/* How many files were moved aside. */
static size_t moved_aside(void)
{
	char pattern[160];
	glob_t gl;
	snprintf(pattern, sizeof pattern, "%s.damaged-*", path);
	if (glob(pattern, 0, NULL, &gl) != 0)
		return 0;
	size_t n = gl.gl_pathc;
	globfree(&gl);
	return n;
}

/* Opens path with key and replays it: what was sent, into g. */
static void open_and_replay(const struct spool_key *key, struct got *g)
{
	struct spool s;
	char err[256];
	*g = (struct got){0};
	assert_true(spool_open(&s, path, 1 << 20, key, err, sizeof err));
	assert_true(spool_replay(&s, collect, g, err, sizeof err));
	assert_int_equal(s.records, 0);
	spool_close(&s);
}

/* A signed spool of "one", "two", "three" at path; its bytes into buf. */
static size_t signed3(const struct spool_key *key, unsigned char *buf, size_t len)
{
	struct spool s;
	char err[256];
	assert_true(spool_open(&s, path, 1 << 20, key, err, sizeof err));
	append3(&s);
	spool_close(&s);
	return read_all(path, buf, len);
}

static void signed_records_round_trip_and_survive_a_restart(void **state)
{
	(void)state;
	struct spool_key key;
	struct spool s;
	char err[256];
	unsigned char buf[1024];
	make_key(&key, 1);
	assert_true(spool_open(&s, path, 1 << 20, &key, err, sizeof err));
	append3(&s);
	spool_close(&s);
	assert_int_equal(s.key.len, 0); /* closing wiped the spool's copy */
	size_t n = read_all(path, buf, sizeof buf);
	assert_int_equal(n, 3 * SH + 11);
	assert_memory_equal(buf, "MSP2", 4);
	assert_memory_equal(buf + SH + 3, "MSP2", 4);
	/* one spool id for the file's records */
	assert_memory_equal(buf + 16, buf + SH + 3 + 16, SPOOL_ID_LEN);
	unsigned char id[SPOOL_ID_LEN];
	memcpy(id, buf + 16, sizeof id);

	struct got g = {.fail_at = 2};
	assert_true(spool_open(&s, path, 1 << 20, &key, err, sizeof err)); /* a restart */
	assert_int_equal(s.records, 3);
	assert_int_equal(s.next_seq, 4);
	assert_false(spool_replay(&s, collect, &g, err, sizeof err)); /* cut short: all kept */
	assert_int_equal(s.records, 3);
	g = (struct got){0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|two|three|");
	assert_int_equal(file_size(), 0);
	/* the next filling has a spool id of its own, its sequence from 1 */
	assert_int_equal(spool_append(&s, "four", 4, err, sizeof err), SPOOL_OK);
	spool_close(&s);
	n = read_all(path, buf, sizeof buf);
	assert_int_equal(n, SH + 4);
	assert_memory_not_equal(buf + 16, id, SPOOL_ID_LEN);
	assert_int_equal(get32le(buf + 8), 1);
	open_and_replay(&key, &g);
	assert_string_equal(g.text, "four|");
	assert_int_equal(moved_aside(), 0);
}

static void a_signed_spool_is_bounded_with_its_header(void **state)
{
	(void)state;
	struct spool_key key;
	struct spool s;
	char err[256];
	make_key(&key, 1);
	assert_true(spool_open(&s, path, 2 * SH + 6, &key, err, sizeof err));
	assert_int_equal(spool_append(&s, "one", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "two", 3, err, sizeof err), SPOOL_OK);
	assert_int_equal(spool_append(&s, "x", 1, err, sizeof err), SPOOL_FULL);
	assert_int_equal(s.records, 2);
	spool_close(&s);
}

/* Each case changes the file of "one", "two", "three" as an attacker could. */
static void a_changed_signed_record_is_never_sent_and_the_file_moved_aside(void **state)
{
	(void)state;
	struct spool_key key;
	unsigned char buf[1024], copy[1024];
	make_key(&key, 1);
	for (int c = 0; c < 4; c++) {
		size_t n = signed3(&key, buf, sizeof buf);
		memcpy(copy, buf, n);
		size_t second = SH + 3, third = 2 * SH + 6;
		if (c == 0) { /* a payload byte of the second, CRCs made right */
			buf[second + SH] ^= 1;
			reseal(buf, second);
		} else if (c == 1) { /* the same in the last record: not a torn one */
			buf[third + SH + 4] ^= 1;
			reseal(buf, third);
		} else if (c == 2) { /* "one" taken out, the others numbered 1 and 2 again */
			memmove(buf, buf + second, n - second);
			n -= second;
			put32le(buf + 8, 1);
			put32le(buf + (third - second) + 8, 2);
			reseal(buf, 0);
			reseal(buf, third - second);
		} else { /* the second's length grown over the third, as if one payload */
			put32le(buf + second + 4, 3 + SH + 5);
			reseal(buf, second);
		}
		write_all(path, buf, n);
		struct got g;
		open_and_replay(&key, &g);
		if (g.calls != 0)
			fail_msg("case %d: sent \"%s\"", c, g.text);
		assert_int_equal(moved_aside(), (size_t)c + 1);
		assert_int_equal(file_size(), 0); /* a new spool */
	}
}

static void a_flipped_sequence_is_refused(void **state)
{
	(void)state;
	struct spool_key key;
	unsigned char buf[1024];
	make_key(&key, 1);
	size_t n = signed3(&key, buf, sizeof buf);
	buf[SH + 3 + 8] ^= 0x10; /* the second record's sequence: 2 becomes 18 */
	reseal(buf, SH + 3);
	write_all(path, buf, n);
	struct got g;
	open_and_replay(&key, &g);
	/* the first record is good, but the file is moved aside whole, none sent */
	assert_int_equal(g.calls, 0);
	assert_int_equal(moved_aside(), 1);
	/* and as a scan sees it: damage after the first record, not a tear */
	size_t records;
	uint64_t last;
	bool torn;
	assert_int_equal(spool_scan(buf, n, &key, &records, &last, &torn), SH + 3);
	assert_int_equal(records, 1);
	assert_false(torn);
}

static void a_record_copied_from_another_spool_file_is_refused(void **state)
{
	(void)state;
	struct spool_key key;
	unsigned char old[1024], buf[1024];
	make_key(&key, 1);
	/* an earlier filling of the same file, kept by whoever copied it */
	size_t oldn = signed3(&key, old, sizeof old);
	struct got g;
	open_and_replay(&key, &g);
	assert_string_equal(g.text, "one|two|three|");
	size_t cases[][2] = {
	        {SH + 3, SH + 3},         /* its second record over the new second */
	        {2 * SH + 6, 2 * SH + 6}, /* its third over the new third, the last */
	};
	for (size_t c = 0; c < 2; c++) {
		size_t n = signed3(&key, buf, sizeof buf); /* a new filling: another spool id */
		size_t at = cases[c][0], from = cases[c][1];
		size_t rec = c == 0 ? SH + 3 : SH + 5;
		memcpy(buf + at, old + from, rec); /* the same sequence, the same length */
		assert_true(at + rec <= n && from + rec <= oldn);
		write_all(path, buf, n);
		open_and_replay(&key, &g);
		if (g.calls != 0)
			fail_msg("case %zu: sent \"%s\"", c, g.text);
		assert_int_equal(moved_aside(), c + 1);
	}
	/* Not told apart: the whole earlier file put back (sent again, and harmless:
	 * the database stores a batch once) */
	write_all(path, old, oldn);
	open_and_replay(&key, &g);
	assert_string_equal(g.text, "one|two|three|");
}

static void a_record_signed_with_another_key_is_refused(void **state)
{
	(void)state;
	struct spool_key key, other;
	unsigned char buf[1024];
	make_key(&key, 1);
	make_key(&other, 2);
	signed3(&other, buf, sizeof buf);
	struct got g;
	open_and_replay(&key, &g);
	assert_int_equal(g.calls, 0);
	assert_int_equal(moved_aside(), 1);
	/* and a longer key that starts with the same bytes is another key (but for
	 * zero bytes: HMAC pads a short key with zeros) */
	signed3(&key, buf, sizeof buf);
	other = key;
	other.bytes[other.len++] = 0x55;
	open_and_replay(&other, &g);
	assert_int_equal(g.calls, 0);
	assert_int_equal(moved_aside(), 2);
}

static void unsigned_and_signed_files_are_refused_by_the_other_kind(void **state)
{
	(void)state;
	struct spool_key key;
	struct spool s;
	char err[256];
	make_key(&key, 1);
	/* an MSP1 file under a collector with a key: three records, then one record
	 * shorter than a signed header (not to be taken for a torn one) */
	for (int c = 0; c < 2; c++) {
		assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
		if (c == 0)
			append3(&s);
		else
			assert_int_equal(spool_append(&s, "one", 3, err, sizeof err), SPOOL_OK);
		spool_close(&s);
		struct got g;
		open_and_replay(&key, &g);
		assert_int_equal(g.calls, 0);
		assert_int_equal(moved_aside(), (size_t)c + 1);
	}
	/* an MSP2 file under a collector without one */
	unsigned char buf[1024];
	signed3(&key, buf, sizeof buf);
	struct got g;
	open_and_replay(NULL, &g);
	assert_int_equal(g.calls, 0);
	assert_int_equal(moved_aside(), 3);
}

static void a_torn_last_signed_record_is_still_cut(void **state)
{
	(void)state;
	struct spool_key key;
	struct spool s;
	char err[256];
	unsigned char buf[1024];
	make_key(&key, 1);
	/* its payload cut short */
	size_t n = signed3(&key, buf, sizeof buf);
	assert_int_equal(truncate(path, (off_t)n - 2), 0);
	assert_true(spool_open(&s, path, 1 << 20, &key, err, sizeof err));
	assert_int_equal(s.records, 2);
	assert_int_equal(file_size(), 2 * SH + 6);
	/* new records continue the sequence and the spool id */
	assert_int_equal(spool_append(&s, "four", 4, err, sizeof err), SPOOL_OK);
	spool_close(&s);
	struct got g;
	open_and_replay(&key, &g);
	assert_string_equal(g.text, "one|two|four|");
	/* its header cut short; its payload garbled (a bad CRC); zeros after the
	 * last (a crash extended the file, and every record is kept) */
	for (int c = 0; c < 3; c++) {
		n = signed3(&key, buf, sizeof buf);
		if (c == 0)
			n = 2 * SH + 6 + 40;
		else if (c == 1)
			buf[n - 1] ^= 0x20;
		else {
			memset(buf + n, 0, 100);
			n += 100;
		}
		write_all(path, buf, n);
		open_and_replay(&key, &g);
		if (strcmp(g.text, c == 2 ? "one|two|three|" : "one|two|") != 0)
			fail_msg("case %d: sent \"%s\"", c, g.text);
	}
	assert_int_equal(moved_aside(), 0);
}

static void a_record_changed_after_the_open_is_not_sent(void **state)
{
	(void)state;
	struct spool_key key;
	struct spool s;
	char err[256];
	unsigned char buf[1024];
	make_key(&key, 1);
	size_t n = signed3(&key, buf, sizeof buf);
	assert_true(spool_open(&s, path, 1 << 20, &key, err, sizeof err));
	assert_int_equal(s.records, 3);
	/* written to while the collector runs, with the CRCs right */
	memcpy(buf + SH + 3 + SH, "TWO", 3);
	reseal(buf, SH + 3);
	int fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, buf, n, 0), (ssize_t)n);
	close(fd);
	struct got g = {0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "one|"); /* what came before it was sent; nothing after */
	assert_int_equal(s.records, 0);
	assert_int_equal(moved_aside(), 1);
	/* the spool goes on, in a new file */
	assert_int_equal(spool_append(&s, "four", 4, err, sizeof err), SPOOL_OK);
	g = (struct got){0};
	assert_true(spool_replay(&s, collect, &g, err, sizeof err));
	assert_string_equal(g.text, "four|");
	spool_close(&s);
}

/* Unchanged without a key: the file is MSP1, byte for byte. */
static void unsigned_records_keep_their_format_byte_for_byte(void **state)
{
	(void)state;
	struct spool s;
	char err[256];
	unsigned char buf[256], want[SPOOL_HEADER + 3] = "MSP1\x03\0\0\0\x01\0\0\0\0\0\0\0";
	assert_true(spool_open(&s, path, 1 << 20, NULL, err, sizeof err));
	assert_int_equal(spool_append(&s, "one", 3, err, sizeof err), SPOOL_OK);
	spool_close(&s);
	uLong c = crc32(0L, Z_NULL, 0);
	c = crc32(c, want + 8, 8);
	c = crc32(c, (const unsigned char *)"one", 3);
	put32le(want + 16, (uint32_t)c);
	put32le(want + 20, (uint32_t)crc32(crc32(0L, Z_NULL, 0), want, 20));
	memcpy(want + SPOOL_HEADER, "one", 3);
	assert_int_equal(read_all(path, buf, sizeof buf), sizeof want);
	assert_memory_equal(buf, want, sizeof want);
}

/* ---- the key file ---- */

static void key_file(const char *name, size_t len, mode_t mode, char *out, size_t outlen)
{
	unsigned char bytes[SPOOL_KEY_MAX + 8];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (unsigned char)(i * 7 + 3);
	snprintf(out, outlen, "%s/%s", dir, name);
	write_all(out, bytes, len);
	assert_int_equal(chmod(out, mode), 0);
}

static void a_key_file_must_be_long_enough_and_private(void **state)
{
	(void)state;
	struct spool_key key;
	char err[512], p[160];
	key_file("good", 32, 0600, p, sizeof p);
	assert_true(spool_key_load(p, &key, err, sizeof err));
	assert_int_equal(key.len, 32);
	key_file("readonly", SPOOL_KEY_MAX, 0400, p, sizeof p);
	assert_true(spool_key_load(p, &key, err, sizeof err));
	assert_int_equal(key.len, SPOOL_KEY_MAX);
	struct {
		const char *name;
		size_t len;
		mode_t mode;
		const char *msg;
	} cases[] = {
	        {"short", 31, 0600, "holds 31 bytes, fewer than the 32 a key needs"},
	        {"empty", 0, 0600, "holds 0 bytes"},
	        {"long", SPOOL_KEY_MAX + 1, 0600, "holds more than 1024 bytes"},
	        {"group", 32, 0640, "is open to group or others (mode 0640)"},
	        {"others", 32, 0604, "is open to group or others (mode 0604)"},
	        {"writable", 32, 0620, "is open to group or others (mode 0620)"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		key_file(cases[i].name, cases[i].len, cases[i].mode, p, sizeof p);
		key.len = 99;
		err[0] = '\0';
		if (spool_key_load(p, &key, err, sizeof err) || !strstr(err, cases[i].msg))
			fail_msg("case %s: \"%s\"", cases[i].name, err);
		assert_int_equal(key.len, 0); /* nothing of it kept */
	}
	snprintf(p, sizeof p, "%s/missing", dir);
	assert_false(spool_key_load(p, &key, err, sizeof err));
	assert_non_null(strstr(err, "could not open key file"));
	assert_non_null(strstr(err, "No such file"));
	assert_false(spool_key_load(dir, &key, err, sizeof err));
	assert_non_null(strstr(err, "is not a regular file"));
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
			batch_mark_end(&e, END_READ);
	}
	assert_true(batch_thin(&e));
	assert_int_equal(e.rows, 2);
	memcpy(text, e.buf, e.len);
	text[e.len] = '\0';
	assert_non_null(strstr(text, "\t102\t"));
	assert_non_null(strstr(text, "\tt\tread\nsb-1\t7\t")); /* the end, then the last row */
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
	        cmocka_unit_test_setup_teardown(signed_records_round_trip_and_survive_a_restart,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_signed_spool_is_bounded_with_its_header, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                a_changed_signed_record_is_never_sent_and_the_file_moved_aside, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_flipped_sequence_is_refused, setup, teardown),
	        cmocka_unit_test_setup_teardown(a_record_copied_from_another_spool_file_is_refused,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_record_signed_with_another_key_is_refused, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                unsigned_and_signed_files_are_refused_by_the_other_kind, setup, teardown),
	        cmocka_unit_test_setup_teardown(a_torn_last_signed_record_is_still_cut, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(a_record_changed_after_the_open_is_not_sent, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(unsigned_records_keep_their_format_byte_for_byte,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(a_key_file_must_be_long_enough_and_private, setup,
	                                        teardown),
	        cmocka_unit_test(thinning_keeps_the_newest_row_of_each_incarnation_in_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
