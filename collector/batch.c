#include "collector/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/timefmt.h"

/* Longest row: two ids, a host, a time, seven numbers and the end flag. */
#define ROW_MAX (2 * CG_ID_MAX + 256 + METER_TIME_BUF + 7 * 21 + 40)

/* How a row ends: its ended field, not ended or ended. */
/* ended and end_cpu: NULL and NULL, or true and how its CPU is known */
#define NOT_ENDED "\t\\N\t\\N\n"
#define ENDED     "\tt\t"

/* Formatting by hand: a round formats thousands of rows. */
static char *put_str(char *p, const char *s)
{
	while (*s)
		*p++ = *s++;
	return p;
}

static char *put_uint(char *p, uint64_t v, int width)
{
	char tmp[24];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n < width)
		tmp[n++] = '0';
	while (n)
		*p++ = tmp[--n];
	return p;
}

static char *put_num(char *p, int64_t v)
{
	*p++ = '\t';
	if (v == CG_ABSENT)
		return put_str(p, "\\N");
	if (v < 0) {
		*p++ = '-';
		return put_uint(p, (uint64_t)0 - (uint64_t)v, 1);
	}
	return put_uint(p, (uint64_t)v, 1);
}

/* "YYYY-MM-DDTHH:MM:SS.ffffffZ", the date part cached per second. */
static char *put_time(struct batch *b, char *p, int64_t ts_us)
{
	int64_t sec = ts_us / 1000000, frac = ts_us % 1000000;
	if (frac < 0) {
		frac += 1000000;
		sec--;
	}
	if (sec != b->stamp_sec || b->stamp[0] == '\0') {
		char full[METER_TIME_BUF];
		meter_time_format(sec * 1000000, full, sizeof full);
		memcpy(b->stamp, full, 19);
		b->stamp[19] = '\0';
		b->stamp_sec = sec;
	}
	p = put_str(p, b->stamp);
	*p++ = '.';
	p = put_uint(p, (uint64_t)frac, 6);
	*p++ = 'Z';
	return p;
}

bool batch_add(struct batch *b, const char *sandbox, const char *account, int64_t incarnation,
               int64_t ts_us, const char *host, const struct cg_reading *r)
{
	if (b->cap - b->len < ROW_MAX) {
		size_t cap = b->cap ? b->cap * 2 : 64 * 1024;
		char *nb = realloc(b->buf, cap);
		if (nb == NULL)
			return false;
		b->buf = nb;
		b->cap = cap;
	}
	/* Ids and the host are at most CG_ID_MAX bytes each: ROW_MAX holds a row. */
	char *start = b->buf + b->len, *p = start;
	p = put_str(p, sandbox);
	p = put_num(p, incarnation);
	*p++ = '\t';
	p = put_time(b, p, ts_us);
	*p++ = '\t';
	p = put_str(p, account[0] ? account : "\\N");
	*p++ = '\t';
	p = put_str(p, host);
	p = put_num(p, r->cpu_usage_us);
	p = put_num(p, r->mem_current);
	p = put_num(p, r->mem_peak);
	p = put_num(p, r->mem_anon_kernel);
	p = put_num(p, r->mem_limit);
	p = put_num(p, r->cpu_limit_millicores);
	p = put_str(p, NOT_ENDED);
	b->len += (size_t)(p - start);
	b->rows++;
	return true;
}

void batch_mark_end(struct batch *b, enum end_cpu how)
{
	size_t n = sizeof NOT_ENDED - 1;
	if (b->len < n || memcmp(b->buf + b->len - n, NOT_ENDED, n) != 0)
		return;
	/* ROW_MAX left room for the longest name */
	char *p = put_str(b->buf + b->len - n, ENDED);
	p = put_str(p, end_cpu_name(how));
	*p++ = '\n';
	b->len = (size_t)(p - b->buf);
}

static bool row_ends(const char *row, const char *end)
{
	size_t n = sizeof NOT_ENDED - 1;
	return (size_t)(end - row) < n || memcmp(end - n, NOT_ENDED, n) != 0;
}

static size_t key_len(const char *row, const char *end)
{
	const char *t = memchr(row, '\t', (size_t)(end - row));
	t = t ? memchr(t + 1, '\t', (size_t)(end - t - 1)) : NULL;
	return t ? (size_t)(t - row) : (size_t)(end - row);
}

bool batch_thin(struct batch *b)
{
	if (b->rows < 2)
		return true;
	size_t n = b->rows, cap = 16, kept = 0, len = 0;
	while (cap < 2 * n)
		cap <<= 1;
	size_t *row = malloc((n + 1) * sizeof *row);
	size_t *slot = calloc(cap, sizeof *slot); /* row index + 1; 0 is empty */
	bool *keep = calloc(n, sizeof *keep);
	char *out = malloc(b->len);
	bool ok = row && slot && keep && out;
	if (ok) {
		size_t r = 0;
		for (size_t off = 0; off < b->len && r < n; r++) {
			row[r] = off;
			const char *nl = memchr(b->buf + off, '\n', b->len - off);
			off = nl ? (size_t)(nl - b->buf) + 1 : b->len;
		}
		row[r] = b->len;
		n = r;
		/* From the last row back: the first row met of each key is its last. */
		for (size_t i = n; i-- > 0;) {
			const char *s = b->buf + row[i];
			if (row_ends(s, b->buf + row[i + 1]))
				keep[i] = true; /* an end is never thinned away */
			size_t kl = key_len(s, b->buf + row[i + 1]);
			uint64_t h = 1469598103934665603u;
			for (size_t k = 0; k < kl; k++)
				h = (h ^ (unsigned char)s[k]) * 1099511628211u;
			size_t at = (size_t)h & (cap - 1);
			for (;; at = (at + 1) & (cap - 1)) {
				if (slot[at] == 0) {
					slot[at] = i + 1;
					keep[i] = true;
					break;
				}
				const char *o = b->buf + row[slot[at] - 1];
				if (key_len(o, b->buf + row[slot[at]]) == kl &&
				    memcmp(o, s, kl) == 0)
					break;
			}
		}
		for (size_t i = 0; i < n; i++)
			if (keep[i]) {
				memcpy(out + len, b->buf + row[i], row[i + 1] - row[i]);
				len += row[i + 1] - row[i];
				kept++;
			}
		memcpy(b->buf, out, len);
		b->len = len;
		b->rows = kept;
	}
	free(row);
	free(slot);
	free(keep);
	free(out);
	return ok;
}

void batch_clear(struct batch *b)
{
	b->len = 0;
	b->rows = 0;
}

void batch_free(struct batch *b)
{
	free(b->buf);
	memset(b, 0, sizeof *b);
}
