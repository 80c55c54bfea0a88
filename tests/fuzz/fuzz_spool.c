/*
 * libFuzzer: spool files (collector/spool.c). Any bytes are scanned without
 * reading past them; then, as a file on disk (in /dev/shm, where fsync is
 * cheap), opened as the collector opens its spool after a crash: good records
 * kept, a torn tail cut, other damage moved aside whole. Oracle: after one
 * more record is appended, a replay sends exactly the good records' payloads
 * (read here from the framing, apart from spool.c) and that record, in order,
 * and leaves the file empty; a file moved aside holds the bytes as they were.
 * Input that starts with "MSP2" is a signed spool, opened with the key below
 * (the seeds signed_* are signed with it): the same oracle, and every record
 * kept must verify by OpenSSL's one-shot HMAC(), number 1, 2, 3... and share
 * the first one's spool id.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include "collector/spool.h"
#include "common/log.h"

struct seen {
	const unsigned char *want[64];
	size_t wlen[64], n, got;
	bool bad;
};

static bool collect(void *ctx, const char *data, size_t len, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	struct seen *s = ctx;
	if (s->got >= s->n || len != s->wlen[s->got] || memcmp(data, s->want[s->got], len) != 0)
		s->bad = true;
	s->got++;
	return true;
}

static char dir[64];

static void clean(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[256];
	while (d && (e = readdir(d)) != NULL)
		if (e->d_name[0] != '.') {
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
}

static void gone(void)
{
	clean();
	rmdir(dir);
}

/* The file moved aside, if one is: its bytes must be the data's. */
static bool aside_holds(const uint8_t *data, size_t size)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false, same = false;
	while (d && (e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "spool.damaged-", 14) == 0) {
			char p[256];
			static unsigned char buf[1 << 20];
			snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
			int fd = open(p, O_RDONLY);
			ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf) : -1;
			if (fd >= 0)
				close(fd);
			found = true;
			same = n == (ssize_t)size && memcmp(buf, data, size) == 0;
		}
	if (d)
		closedir(d);
	return found && same;
}

/* The seeds' key: the 32 bytes "meter fuzz_spool key, not secret". */
static const char fuzz_key[] = "meter fuzz_spool key, not secret";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (dir[0] == '\0') {
		snprintf(dir, sizeof dir, "/dev/shm/meter-fuzz-spool-XXXXXX");
		if (mkdtemp(dir) == NULL)
			abort();
		log_init("fuzz_spool", LOG_ERROR, false); /* the damage said once, no warnings */
		atexit(gone);
	}
	if (size > (1 << 20))
		return 0;
	unsigned char *b = malloc(size ? size : 1);
	if (b == NULL)
		return 0;
	memcpy(b, data, size);
	struct spool_key key = {.len = sizeof fuzz_key - 1};
	memcpy(key.bytes, fuzz_key, key.len);
	bool keyed = size >= 4 && memcmp(data, "MSP2", 4) == 0;
	const struct spool_key *k = keyed ? &key : NULL;
	size_t hlen = keyed ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	size_t records;
	uint64_t last;
	bool torn;
	size_t good = spool_scan(b, size, k, &records, &last, &torn);
	if (good > size)
		abort();
	/* the good records' payloads, from the framing: magic, length, sequence, CRCs */
	struct seen s = {0};
	for (size_t off = 0; off < good && s.n < 64;) {
		uint32_t len = (uint32_t)b[off + 4] | (uint32_t)b[off + 5] << 8 |
		               (uint32_t)b[off + 6] << 16 | (uint32_t)b[off + 7] << 24;
		if (keyed) {
			/* signed: the HMAC of the header's first 32 bytes and the payload */
			unsigned char msg[32 + 4096], mac[EVP_MAX_MD_SIZE];
			unsigned maclen = 0;
			uint64_t seq = 0;
			for (int i = 7; i >= 0; i--)
				seq = seq << 8 | b[off + 8 + i];
			if (len > 4096 || seq != s.n + 1 || memcmp(b + off + 16, b + 16, 16) != 0)
				abort();
			memcpy(msg, b + off, 32);
			memcpy(msg + 32, b + off + hlen, len);
			if (HMAC(EVP_sha256(), key.bytes, (int)key.len, msg, 32 + len, mac,
			         &maclen) == NULL ||
			    maclen != 32 || memcmp(mac, b + off + 36, 32) != 0)
				abort();
		}
		s.want[s.n] = b + off + hlen;
		s.wlen[s.n++] = len;
		off += hlen + len;
	}
	if (s.n != records || records > 63)
		goto out;
	char path[128], err[512];
	snprintf(path, sizeof path, "%s/spool", dir);
	clean();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	struct spool sp;
	if (!spool_open(&sp, path, 4 << 20, k, err, sizeof err))
		abort();
	bool damaged = good < size && !torn;
	if (damaged) {
		/* moved aside whole, and a new, empty spool */
		if (!aside_holds(data, size) || sp.size != 0 || sp.records != 0)
			abort();
		s.n = 0;
	} else if (sp.size != (int64_t)good || sp.records != records) {
		abort(); /* kept, a torn tail cut */
	}
	static const char more[] = "one more batch";
	s.want[s.n] = (const unsigned char *)more;
	s.wlen[s.n++] = sizeof more - 1;
	if (spool_append(&sp, more, sizeof more - 1, err, sizeof err) != SPOOL_OK ||
	    !spool_replay(&sp, collect, &s, err, sizeof err) || s.bad || s.got != s.n)
		abort();
	struct stat st;
	if (stat(path, &st) != 0 || st.st_size != 0)
		abort(); /* emptied once all was sent */
	spool_close(&sp);
out:
	free(b);
	return 0;
}
