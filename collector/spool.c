#include "collector/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"

static const unsigned char MAGIC[4] = {'M', 'S', 'P', '1'};

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint32_t record_crc(const unsigned char *seq8, const unsigned char *data, size_t len)
{
	uLong c = crc32(0L, Z_NULL, 0);
	c = crc32(c, seq8, 8);
	c = crc32(c, data, (uInt)len);
	return (uint32_t)c;
}

static uint32_t header_crc(const unsigned char *h)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, 20);
}

/* Where records are read from: a buffer (tests, fuzzing) or the file. */
struct source {
	const unsigned char *buf;
	int fd;
	size_t len;
};

static bool src_read(const struct source *s, size_t off, unsigned char *out, size_t n)
{
	if (off > s->len || n > s->len - off)
		return false;
	if (s->buf) {
		memcpy(out, s->buf + off, n);
		return true;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(s->fd, out + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		got += (size_t)r;
	}
	return true;
}

/* True when everything from off to the end is zero bytes (a file extended by a crash). */
static bool zeros_to_end(const struct source *s, size_t off)
{
	unsigned char chunk[4096];
	while (off < s->len) {
		size_t n = s->len - off < sizeof chunk ? s->len - off : sizeof chunk;
		if (!src_read(s, off, chunk, n))
			return false;
		for (size_t i = 0; i < n; i++)
			if (chunk[i])
				return false;
		off += n;
	}
	return true;
}

static size_t scan(const struct source *src, size_t *records, uint64_t *last_seq, bool *torn)
{
	size_t off = 0, n = 0;
	uint64_t last = 0;
	unsigned char *payload = NULL;
	*torn = false;
	while (off < src->len) {
		unsigned char h[SPOOL_HEADER];
		size_t left = src->len - off;
		if (left < SPOOL_HEADER) {
			*torn = true; /* a header cut short can only be the last record */
			break;
		}
		if (!src_read(src, off, h, SPOOL_HEADER))
			break;
		if (header_crc(h) != get32(h + 20) || memcmp(h, MAGIC, 4) != 0) {
			*torn = zeros_to_end(src, off); /* zeros: the crash extended the file */
			break;
		}
		uint32_t rlen = get32(h + 4);
		uint64_t seq = get64(h + 8);
		if (rlen > SPOOL_REC_MAX || (n > 0 && seq <= last))
			break; /* a good header saying impossible things: damage */
		if (left - SPOOL_HEADER < rlen) {
			*torn = true; /* a trusted length running past the end */
			break;
		}
		unsigned char *nb = realloc(payload, rlen ? rlen : 1);
		if (nb == NULL)
			break;
		payload = nb;
		if (!src_read(src, off + SPOOL_HEADER, payload, rlen))
			break;
		if (record_crc(h + 8, payload, rlen) != get32(h + 16)) {
			*torn = left - SPOOL_HEADER ==
			        rlen; /* bad payload in the last record: torn */
			break;
		}
		last = seq;
		n++;
		off += SPOOL_HEADER + rlen;
	}
	free(payload);
	*records = n;
	*last_seq = last;
	return off;
}

size_t spool_scan(const unsigned char *buf, size_t len, size_t *records, uint64_t *last_seq,
                  bool *torn)
{
	struct source src = {.buf = buf, .fd = -1, .len = len};
	return scan(&src, records, last_seq, torn);
}

static bool make_parent(const char *path, char *err, size_t errlen)
{
	char tmp[1024];
	snprintf(tmp, sizeof tmp, "%s", path);
	char *dir = dirname(tmp);
	char step[1024] = "";
	for (char *save = NULL, *p = strtok_r(dir, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
		size_t n = strlen(step);
		snprintf(step + n, sizeof step - n, "%s%s", dir[0] == '/' || n ? "/" : "", p);
		if (mkdir(step, 0700) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "could not create spool folder \"%s\": %s", step,
			         strerror(errno));
			return false;
		}
	}
	return true;
}

bool spool_open(struct spool *s, const char *path, int64_t max, char *err, size_t errlen)
{
	static unsigned aside_seq;
	struct stat st;
	memset(s, 0, sizeof *s);
	s->fd = -1;
	s->max = max;
	if (strlen(path) >= sizeof s->path - 64) {
		snprintf(err, errlen, "spool path \"%s\" is too long", path);
		return false;
	}
	snprintf(s->path, sizeof s->path, "%s", path);
	if (!make_parent(path, err, errlen))
		return false;
	s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->fd < 0 || fstat(s->fd, &st) != 0) {
		snprintf(err, errlen, "could not open spool \"%s\": %s", path, strerror(errno));
		goto fail;
	}
	size_t len = (size_t)st.st_size;
	struct source src = {.buf = NULL, .fd = s->fd, .len = len};
	bool torn;
	size_t good = scan(&src, &s->records, &s->next_seq, &torn);
	s->next_seq++;
	if (good < len && torn) {
		log_warn("spool \"%s\": dropping a torn last record (%zu bytes at offset %zu, "
		         "left by a crash in mid-write); %zu records before it are kept",
		         path, len - good, good, s->records);
		if (ftruncate(s->fd, (off_t)good) != 0 || fsync(s->fd) != 0) {
			snprintf(err, errlen, "could not cut the torn record off \"%s\": %s", path,
			         strerror(errno));
			goto fail;
		}
	} else if (good < len) {
		char aside[sizeof s->path + 64];
		snprintf(aside, sizeof aside, "%s.damaged-%lld-%d-%u", path, (long long)time(NULL),
		         (int)getpid(), aside_seq++);
		log_error(
		        "spool \"%s\" is damaged at offset %zu (of %zu bytes, %zu good records "
		        "before it); moved it to \"%s\" to be looked at, and starting a new spool",
		        path, good, len, s->records, aside);
		if (rename(path, aside) != 0) {
			snprintf(err, errlen, "could not move damaged spool \"%s\" aside: %s", path,
			         strerror(errno));
			goto fail;
		}
		close(s->fd);
		return spool_open(s, path, max, err, errlen);
	}
	s->size = (int64_t)good;
	return true;
fail:
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	return false;
}

void spool_close(struct spool *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

enum spool_result spool_append(struct spool *s, const char *data, size_t len, char *err,
                               size_t errlen)
{
	if (len > SPOOL_REC_MAX) {
		snprintf(err, errlen, "batch of %zu bytes is larger than a spool record may be",
		         len);
		return SPOOL_FULL;
	}
	if (s->size + SPOOL_HEADER + (int64_t)len > s->max) {
		snprintf(err, errlen,
		         "spool \"%s\" is full (%lld of %lld bytes, %zu batches waiting)", s->path,
		         (long long)s->size, (long long)s->max, s->records);
		return SPOOL_FULL;
	}
	unsigned char h[SPOOL_HEADER];
	memcpy(h, MAGIC, 4);
	put32(h + 4, (uint32_t)len);
	put64(h + 8, s->next_seq);
	put32(h + 16, record_crc(h + 8, (const unsigned char *)data, len));
	put32(h + 20, header_crc(h));
	struct part {
		const void *base;
		size_t len;
	} parts[2] = {{h, sizeof h}, {data, len}};
	off_t at = (off_t)s->size;
	for (int i = 0; i < 2; i++) {
		size_t done = 0;
		while (done < parts[i].len) {
			ssize_t n = pwrite(s->fd, (const char *)parts[i].base + done,
			                   parts[i].len - done, at);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto fail;
			done += (size_t)n;
			at += n;
		}
	}
	if (fdatasync(s->fd) != 0)
		goto fail;
	s->size = at;
	s->records++;
	s->next_seq++;
	return SPOOL_OK;
fail:
	snprintf(err, errlen, "could not write spool \"%s\": %s", s->path, strerror(errno));
	/* Take back what part of the record reached the file. */
	if (ftruncate(s->fd, (off_t)s->size) != 0)
		log_error("could not cut a half-written record off spool \"%s\": %s", s->path,
		          strerror(errno));
	return SPOOL_ERROR;
}

bool spool_replay(struct spool *s, spool_send_fn send, void *ctx, char *err, size_t errlen)
{
	if (s->records == 0)
		return true;
	struct source src = {.buf = NULL, .fd = s->fd, .len = (size_t)s->size};
	char *payload = NULL;
	bool ok = false;
	/* One record in memory at a time: the spool may be far larger than the memory. */
	for (size_t off = 0; off < (size_t)s->size;) {
		unsigned char h[SPOOL_HEADER];
		if (!src_read(&src, off, h, SPOOL_HEADER)) {
			snprintf(err, errlen, "could not read spool \"%s\": %s", s->path,
			         strerror(errno));
			goto out;
		}
		uint32_t rlen = get32(h + 4);
		char *nb = realloc(payload, rlen ? rlen : 1);
		if (nb == NULL) {
			snprintf(err, errlen, "could not read spool \"%s\": out of memory",
			         s->path);
			goto out;
		}
		payload = nb;
		if (!src_read(&src, off + SPOOL_HEADER, (unsigned char *)payload, rlen)) {
			snprintf(err, errlen, "could not read spool \"%s\": %s", s->path,
			         strerror(errno));
			goto out;
		}
		if (!send(ctx, payload, rlen, err, errlen))
			goto out;
		off += SPOOL_HEADER + rlen;
	}
	/* Every record is committed: only now may the file be emptied. */
	ok = true;
	if (ftruncate(s->fd, 0) != 0 || fsync(s->fd) != 0) {
		/* A disk gone read-only, say. They are in the database: not sent again by
		 * this process; a restart may send them again, which changes nothing. */
		log_error("spool \"%s\": replayed %zu batches but could not empty it: %s; they "
		          "stay in the file and are harmless to send again",
		          s->path, s->records, strerror(errno));
		s->records = 0;
		goto out;
	}
	log_info("spool \"%s\": replayed %zu batches", s->path, s->records);
	s->size = 0;
	s->records = 0;
out:
	free(payload);
	return ok;
}
