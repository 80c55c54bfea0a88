#include "reports/csv.h"

#include <stdlib.h>
#include <string.h>

static bool room(struct csv *c, size_t need)
{
	if (c->oom)
		return false;
	if (c->len + need + 1 <= c->cap)
		return true;
	size_t cap = c->cap ? c->cap : 4096;
	while (cap < c->len + need + 1)
		cap *= 2;
	char *nb = realloc(c->buf, cap);
	if (nb == NULL) {
		free(c->buf);
		c->buf = NULL;
		c->oom = true;
		return false;
	}
	c->buf = nb;
	c->cap = cap;
	return true;
}

void csv_field(struct csv *c, const char *s, bool last)
{
	/* at most every character doubled, two quotes and the end of the row */
	if (!room(c, 2 * strlen(s) + 4))
		return;
	char *p = c->buf + c->len;
	bool quote = strpbrk(s, ",\"\r\n") != NULL;
	if (quote)
		*p++ = '"';
	for (; *s; s++) {
		if (*s == '"')
			*p++ = '"';
		*p++ = *s;
	}
	if (quote)
		*p++ = '"';
	if (last) {
		*p++ = '\r';
		*p++ = '\n';
	} else {
		*p++ = ',';
	}
	*p = '\0';
	c->len = (size_t)(p - c->buf);
}

void csv_row(struct csv *c, const char *const *fields, size_t n)
{
	for (size_t i = 0; i < n; i++)
		csv_field(c, fields[i], i + 1 == n);
}
