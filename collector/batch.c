#include "collector/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/timefmt.h"

/* Longest row: two ids, a host, a time and seven numbers. */
#define ROW_MAX (2 * CG_ID_MAX + 256 + METER_TIME_BUF + 7 * 21 + 16)

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
	*p++ = '\n';
	b->len += (size_t)(p - start);
	b->rows++;
	return true;
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
