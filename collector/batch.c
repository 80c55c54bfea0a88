#include "collector/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/timefmt.h"

/* Longest row: two ids, a host, a time and seven numbers. */
#define ROW_MAX (2 * CG_ID_MAX + 256 + METER_TIME_BUF + 7 * 21 + 16)

static int put_num(char *p, size_t room, int64_t v)
{
	if (v == CG_ABSENT)
		return snprintf(p, room, "\t\\N");
	return snprintf(p, room, "\t%lld", (long long)v);
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
	char ts[METER_TIME_BUF];
	meter_time_format(ts_us, ts, sizeof ts);
	char *p = b->buf + b->len;
	size_t room = b->cap - b->len;
	int n = snprintf(p, room, "%s\t%lld\t%s\t%s\t%s", sandbox, (long long)incarnation, ts,
	                 account[0] ? account : "\\N", host);
	n += put_num(p + n, room - (size_t)n, r->cpu_usage_us);
	n += put_num(p + n, room - (size_t)n, r->mem_current);
	n += put_num(p + n, room - (size_t)n, r->mem_peak);
	n += put_num(p + n, room - (size_t)n, r->mem_anon_kernel);
	n += put_num(p + n, room - (size_t)n, r->mem_limit);
	n += put_num(p + n, room - (size_t)n, r->cpu_limit_millicores);
	n += snprintf(p + n, room - (size_t)n, "\n");
	b->len += (size_t)n;
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
