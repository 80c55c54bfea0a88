#include "collector/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/log.h"

static const unsigned char MAGIC[4] = {'M', 'S', 'P', '1'};
static const unsigned char MAGIC_SIGNED[4] = {'M', 'S', 'P', '2'};

/* Where the fields of a signed (MSP2) header are; the HMAC covers the bytes before S_CRC. */
enum { S_LEN = 4, S_SEQ = 8, S_ID = 16, S_CRC = 32, S_MAC = 36, S_HCRC = 68 };
#define MAC_LEN 32
_Static_assert(S_MAC + MAC_LEN == S_HCRC && S_HCRC + 4 == SPOOL_SIGNED_HEADER,
               "the signed header's fields fill it");

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

static uint32_t header_crc(const unsigned char *h, size_t n)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), h, (uInt)n);
}

/* HMAC-SHA256 of a signed header's first S_CRC bytes and the payload, into out. */
static bool record_mac(const struct spool_key *k, const unsigned char *h, const unsigned char *data,
                       size_t len, unsigned char out[MAC_LEN])
{
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
	                       OSSL_PARAM_construct_end()};
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
	size_t n = 0;
	bool ok = ctx && EVP_MAC_init(ctx, k->bytes, k->len, params) == 1 &&
	          EVP_MAC_update(ctx, h, S_CRC) == 1 && EVP_MAC_update(ctx, data, len) == 1 &&
	          EVP_MAC_final(ctx, out, &n, MAC_LEN) == 1 && n == MAC_LEN;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return ok;
}

void spool_key_clear(struct spool_key *key)
{
	if (key)
		OPENSSL_cleanse(key, sizeof *key);
}

bool spool_key_load(const char *path, struct spool_key *key, char *err, size_t errlen)
{
	unsigned char buf[SPOOL_KEY_MAX + 1];
	size_t got = 0;
	struct stat st;
	bool ok = false;
	spool_key_clear(key);
	/* O_NONBLOCK: a FIFO in its place is refused below, not waited on */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(err, errlen, "could not open key file \"%s\": %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "key file \"%s\" is not a regular file", path);
		goto out;
	}
	/* as ssh does for its private keys: whoever else may change it could sign */
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(err, errlen,
		         "key file \"%s\" belongs to uid %u, neither this user (uid %u) nor root",
		         path, (unsigned)st.st_uid, (unsigned)geteuid());
		goto out;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
		         "key file \"%s\" is open to group or others (mode %04o); it must be "
		         "readable by its owner only (chmod 600)",
		         path, (unsigned)(st.st_mode & 07777));
		goto out;
	}
	while (got < sizeof buf) {
		ssize_t n = read(fd, buf + got, sizeof buf - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "could not read key file \"%s\": %s", path,
			         strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got > SPOOL_KEY_MAX) {
		snprintf(err, errlen, "key file \"%s\" holds more than %d bytes", path,
		         SPOOL_KEY_MAX);
		goto out;
	}
	if (got < SPOOL_KEY_MIN) {
		snprintf(err, errlen,
		         "key file \"%s\" holds %zu bytes, fewer than the %d a key needs (make one "
		         "with head -c 32 /dev/urandom)",
		         path, got, SPOOL_KEY_MIN);
		goto out;
	}
	memcpy(key->bytes, buf, got);
	key->len = got;
	ok = true;
out:
	OPENSSL_cleanse(buf, sizeof buf);
	if (fd >= 0)
		close(fd);
	return ok;
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

enum rec {
	REC_OK,
	REC_TORN,    /* a record cut short by a crash: the last one */
	REC_DAMAGED, /* anything else wrong with it: st->why says what */
	REC_ERROR,   /* it could not be read (st->why says why) */
};

/* What the records before the one being checked were. */
struct scan_state {
	size_t n;                       /* records that passed */
	uint64_t last;                  /* the sequence of the last one */
	unsigned char id[SPOOL_ID_LEN]; /* signed: the spool id of the first one */
	char why[200];                  /* REC_DAMAGED, REC_ERROR: for the log */
};

/*
 * Checks the record at off: unsigned (MSP1) when key is NULL, else signed
 * (MSP2) with key. On REC_OK, *payload (grown as needed, the caller frees it)
 * holds its *rlen bytes, and st counts it.
 */
static enum rec check_record(const struct source *src, size_t off, const struct spool_key *key,
                             struct scan_state *st, unsigned char **payload, uint32_t *rlen)
{
	size_t hlen = key ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	unsigned char h[SPOOL_SIGNED_HEADER];
	size_t left = src->len - off;
	if (left < hlen) {
		/* a header cut short can only be the last record; but not one of MSP1 in a
		 * signed spool, which is whole and 24 bytes long */
		if (key && left >= SPOOL_HEADER && src_read(src, off, h, SPOOL_HEADER) &&
		    memcmp(h, MAGIC, 4) == 0) {
			snprintf(st->why, sizeof st->why,
			         "an unsigned record (MSP1), and with a key only signed ones are "
			         "sent");
			return REC_DAMAGED;
		}
		return REC_TORN;
	}
	if (!src_read(src, off, h, hlen)) {
		snprintf(st->why, sizeof st->why, "could not read a record header");
		return REC_ERROR;
	}
	const unsigned char *magic = key ? MAGIC_SIGNED : MAGIC;
	size_t hcrc_at = key ? S_HCRC : 20;
	if (key && memcmp(h, MAGIC, 4) == 0) {
		snprintf(st->why, sizeof st->why,
		         "an unsigned record (MSP1), and with a key only signed ones are sent");
		return REC_DAMAGED;
	}
	if (header_crc(h, hcrc_at) != get32(h + hcrc_at) || memcmp(h, magic, 4) != 0) {
		if (zeros_to_end(src, off))
			return REC_TORN; /* zeros: the crash extended the file */
		snprintf(st->why, sizeof st->why, "%s",
		         !key && memcmp(h, MAGIC_SIGNED, 4) == 0
		                 ? "a signed record (MSP2), and no key to check it with"
		                 : "a record header that does not check");
		return REC_DAMAGED;
	}
	*rlen = get32(h + 4);
	uint64_t seq = get64(h + 8);
	/* a good header saying impossible things: damage */
	if (*rlen > SPOOL_REC_MAX) {
		snprintf(st->why, sizeof st->why, "a record of %lu bytes, past the bound",
		         (unsigned long)*rlen);
		return REC_DAMAGED;
	}
	if (!key && st->n > 0 && seq <= st->last) {
		snprintf(st->why, sizeof st->why, "sequence %llu after %llu (out of order)",
		         (unsigned long long)seq, (unsigned long long)st->last);
		return REC_DAMAGED;
	}
	/* Signed records of one file share a spool id, and count 1, 2, 3...: a record from
	 * another file, or one repeated, moved or with one before it removed, fails. */
	if (key && seq != st->last + 1) {
		snprintf(st->why, sizeof st->why,
		         "sequence %llu where %llu was due (a record removed, repeated or moved)",
		         (unsigned long long)seq, (unsigned long long)(st->last + 1));
		return REC_DAMAGED;
	}
	if (key && st->n > 0 && memcmp(h + S_ID, st->id, SPOOL_ID_LEN) != 0) {
		snprintf(st->why, sizeof st->why,
		         "a record of another spool file (its spool id is not the first record's)");
		return REC_DAMAGED;
	}
	if (left - hlen < *rlen)
		return REC_TORN; /* a trusted length running past the end */
	unsigned char *nb = realloc(*payload, *rlen ? *rlen : 1);
	if (nb == NULL) {
		snprintf(st->why, sizeof st->why, "out of memory for a record of %lu bytes",
		         (unsigned long)*rlen);
		return REC_ERROR;
	}
	*payload = nb;
	if (!src_read(src, off + hlen, *payload, *rlen)) {
		snprintf(st->why, sizeof st->why, "could not read a record");
		return REC_ERROR;
	}
	if (record_crc(h + 8, *payload, *rlen) != get32(h + (key ? S_CRC : 16))) {
		if (left - hlen == *rlen)
			return REC_TORN; /* bad payload in the last record: torn */
		snprintf(st->why, sizeof st->why, "a record whose payload does not check (CRC)");
		return REC_DAMAGED;
	}
	if (key) {
		unsigned char mac[MAC_LEN];
		if (!record_mac(key, h, *payload, *rlen, mac)) {
			snprintf(st->why, sizeof st->why, "could not compute a record's HMAC");
			return REC_ERROR;
		}
		/* the CRC checks: not a crash, so even the last record is not torn */
		if (CRYPTO_memcmp(mac, h + S_MAC, MAC_LEN) != 0) {
			snprintf(st->why, sizeof st->why,
			         "a record whose signature does not verify (forged, altered, or "
			         "signed with another key)");
			return REC_DAMAGED;
		}
		if (st->n == 0)
			memcpy(st->id, h + S_ID, SPOOL_ID_LEN);
	}
	st->last = seq;
	st->n++;
	return REC_OK;
}

/* Checks records from the start; returns the length of the good ones. */
static size_t scan(const struct source *src, const struct spool_key *key, struct scan_state *st,
                   bool *torn)
{
	size_t off = 0, hlen = key ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	unsigned char *payload = NULL;
	memset(st, 0, sizeof *st);
	*torn = false;
	while (off < src->len) {
		uint32_t rlen = 0;
		enum rec r = check_record(src, off, key, st, &payload, &rlen);
		if (r != REC_OK) {
			*torn = r == REC_TORN; /* what could not be read is moved aside whole */
			break;
		}
		off += hlen + rlen;
	}
	free(payload);
	return off;
}

size_t spool_scan(const unsigned char *buf, size_t len, const struct spool_key *key,
                  size_t *records, uint64_t *last_seq, bool *torn)
{
	struct source src = {.buf = buf, .fd = -1, .len = len};
	struct scan_state st;
	size_t good = scan(&src, key, &st, torn);
	*records = st.n;
	*last_seq = st.last;
	return good;
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

/*
 * Moves the file aside, never deleting it, and opens a new, empty spool in its
 * place. False with err when it could not be moved (s is as it was) or the new
 * one not opened (s is closed).
 */
static bool move_aside(struct spool *s, size_t at, size_t len, size_t good, const char *why,
                       char *err, size_t errlen)
{
	static unsigned aside_seq;
	char path[sizeof s->path], aside[sizeof s->path + 64];
	snprintf(path, sizeof path, "%s", s->path);
	snprintf(aside, sizeof aside, "%s.damaged-%lld-%d-%u", path, (long long)time(NULL),
	         (int)getpid(), aside_seq++);
	if (rename(path, aside) != 0) {
		snprintf(err, errlen, "could not move damaged spool \"%s\" aside (%s): %s", path,
		         why, strerror(errno));
		return false;
	}
	log_error("spool \"%s\" is damaged at offset %zu (of %zu bytes, %zu good records "
	          "before it): %s; moved it to \"%s\" to be looked at, and starting a new spool",
	          path, at, len, good, why, aside);
	struct spool_key key;
	bool keyed = s->keyed;
	int64_t max = s->max;
	if (keyed)
		key = s->key;
	spool_close(s);
	bool ok = spool_open(s, path, max, keyed ? &key : NULL, err, errlen);
	if (keyed)
		spool_key_clear(&key);
	return ok;
}

bool spool_open(struct spool *s, const char *path, int64_t max, const struct spool_key *key,
                char *err, size_t errlen)
{
	struct stat st;
	memset(s, 0, sizeof *s);
	s->fd = -1;
	s->max = max;
	if (key) {
		s->keyed = true;
		s->key = *key;
	}
	if (strlen(path) >= sizeof s->path - 64) {
		snprintf(err, errlen, "spool path \"%s\" is too long", path);
		goto fail;
	}
	snprintf(s->path, sizeof s->path, "%s", path);
	if (!make_parent(path, err, errlen))
		goto fail;
	s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->fd < 0 || fstat(s->fd, &st) != 0) {
		snprintf(err, errlen, "could not open spool \"%s\": %s", path, strerror(errno));
		goto fail;
	}
	size_t len = (size_t)st.st_size;
	struct source src = {.buf = NULL, .fd = s->fd, .len = len};
	struct scan_state ss;
	bool torn;
	size_t good = scan(&src, key ? &s->key : NULL, &ss, &torn);
	s->records = ss.n;
	s->next_seq = ss.last + 1;
	memcpy(s->id, ss.id, sizeof s->id);
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
		if (!move_aside(s, good, len, ss.n, ss.why, err, errlen))
			goto fail;
		return true;
	}
	s->size = (int64_t)good;
	return true;
fail:
	spool_close(s);
	return false;
}

void spool_close(struct spool *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	spool_key_clear(&s->key);
}

/* The header of the next record, into h; false with err when it could not be signed. */
static bool make_header(struct spool *s, const char *data, size_t len, unsigned char *h, char *err,
                        size_t errlen)
{
	const unsigned char *d = (const unsigned char *)data;
	if (!s->keyed) {
		memcpy(h, MAGIC, 4);
		put32(h + 4, (uint32_t)len);
		put64(h + 8, s->next_seq);
		put32(h + 16, record_crc(h + 8, d, len));
		put32(h + 20, header_crc(h, 20));
		return true;
	}
	/* The first record of an empty file: a new spool id, and the sequence from 1. */
	if (s->size == 0) {
		if (RAND_bytes(s->id, SPOOL_ID_LEN) != 1) {
			snprintf(err, errlen, "could not draw a spool id for \"%s\"", s->path);
			return false;
		}
		s->next_seq = 1;
	}
	memcpy(h, MAGIC_SIGNED, 4);
	put32(h + S_LEN, (uint32_t)len);
	put64(h + S_SEQ, s->next_seq);
	memcpy(h + S_ID, s->id, SPOOL_ID_LEN);
	put32(h + S_CRC, record_crc(h + S_SEQ, d, len));
	if (!record_mac(&s->key, h, d, len, h + S_MAC)) {
		snprintf(err, errlen,
		         "could not sign a record for spool \"%s\": HMAC-SHA256 failed", s->path);
		return false;
	}
	put32(h + S_HCRC, header_crc(h, S_HCRC));
	return true;
}

enum spool_result spool_append(struct spool *s, const char *data, size_t len, char *err,
                               size_t errlen)
{
	size_t hlen = s->keyed ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	if (len > SPOOL_REC_MAX) {
		snprintf(err, errlen, "batch of %zu bytes is larger than a spool record may be",
		         len);
		return SPOOL_FULL;
	}
	if (s->size + (int64_t)hlen + (int64_t)len > s->max) {
		snprintf(err, errlen,
		         "spool \"%s\" is full (%lld of %lld bytes, %zu batches waiting)", s->path,
		         (long long)s->size, (long long)s->max, s->records);
		return SPOOL_FULL;
	}
	unsigned char h[SPOOL_SIGNED_HEADER];
	if (!make_header(s, data, len, h, err, errlen))
		return SPOOL_ERROR;
	struct part {
		const void *base;
		size_t len;
	} parts[2] = {{h, hlen}, {data, len}};
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

/*
 * Reads the record at off as it was written, unchecked (MSP1: checked when the
 * spool was opened, as before signing came).
 */
static bool read_unchecked(const struct source *src, size_t off, unsigned char **payload,
                           uint32_t *rlen, char *why, size_t whylen)
{
	unsigned char h[SPOOL_HEADER];
	if (!src_read(src, off, h, SPOOL_HEADER)) {
		snprintf(why, whylen, "%s", strerror(errno));
		return false;
	}
	*rlen = get32(h + 4);
	unsigned char *nb = realloc(*payload, *rlen ? *rlen : 1);
	if (nb == NULL) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	*payload = nb;
	if (!src_read(src, off + SPOOL_HEADER, *payload, *rlen)) {
		snprintf(why, whylen, "%s", strerror(errno));
		return false;
	}
	return true;
}

bool spool_replay(struct spool *s, spool_send_fn send, void *ctx, char *err, size_t errlen)
{
	if (s->records == 0)
		return true;
	struct source src = {.buf = NULL, .fd = s->fd, .len = (size_t)s->size};
	size_t hlen = s->keyed ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	struct scan_state st = {0};
	unsigned char *payload = NULL;
	bool ok = false;
	/* One record in memory at a time: the spool may be far larger than the memory. */
	for (size_t off = 0; off < (size_t)s->size;) {
		uint32_t rlen = 0;
		if (!s->keyed) {
			if (!read_unchecked(&src, off, &payload, &rlen, st.why, sizeof st.why)) {
				snprintf(err, errlen, "could not read spool \"%s\": %s", s->path,
				         st.why);
				goto out;
			}
		} else {
			/* Checked again as it is read: what is sent is what was checked, whatever
			 * was written to the file since it was opened. */
			enum rec r = check_record(&src, off, &s->key, &st, &payload, &rlen);
			if (r == REC_ERROR) {
				snprintf(err, errlen, "could not read spool \"%s\": %s", s->path,
				         st.why);
				goto out;
			}
			if (r != REC_OK) {
				if (r ==
				    REC_TORN) /* cut short after it was checked: changed since */
					snprintf(st.why, sizeof st.why,
					         "a record changed since the spool was opened");
				/* not sent; the records before it were, and are harmless to send
				 * again */
				ok = move_aside(s, off, src.len, st.n, st.why, err, errlen);
				goto out;
			}
		}
		if (!send(ctx, (const char *)payload, rlen, err, errlen))
			goto out;
		off += hlen + rlen;
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
