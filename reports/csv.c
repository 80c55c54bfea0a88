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

/* A decimal number ("-0.25", "12"): written as it is, whatever its sign. */
static bool number(const char *s)
{
	if (*s == '-')
		s++;
	size_t digits = strspn(s, "0123456789");
	if (digits == 0)
		return false;
	s += digits;
	if (*s == '.')
		s += 1 + strspn(s + 1, "0123456789");
	return *s == '\0';
}

bool csv_formula(const char *s)
{
	return strchr("=+-@\t\r", s[0]) != NULL && s[0] != '\0' && !number(s);
}

void csv_field(struct csv *c, const char *s, bool last)
{
	/* at most every character doubled, the quote mark, two quotes and the end */
	if (!room(c, 2 * strlen(s) + 5))
		return;
	char *p = c->buf + c->len;
	bool formula = csv_formula(s);
	bool quote = formula || strpbrk(s, ",\"\r\n") != NULL;
	if (quote)
		*p++ = '"';
	if (formula)
		*p++ = '\'';
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
