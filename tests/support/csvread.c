#include "tests/support/csvread.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int csv_fields(char *line, char **f, int max)
{
	int n = 0;
	char *w = line;
	for (char *p = line; n < max;) {
		f[n++] = w;
		bool quoted = *p == '"';
		if (quoted)
			p++;
		for (; *p; p++) {
			if (quoted && *p == '"' && p[1] == '"')
				*w++ = *p++;
			else if (quoted && *p == '"')
				quoted = false;
			else if (!quoted && *p == ',')
				break;
			else
				*w++ = *p;
		}
		bool more = *p == ',';
		*w++ = '\0';
		if (!more)
			break;
		p++;
		w = p;
	}
	return n;
}

int csv_nano(const char *s, int64_t *out)
{
	int64_t v = 0, sign = 1;
	int frac = -1;
	if (*s == '-') {
		sign = -1;
		s++;
	}
	if (*s < '0' || *s > '9')
		return 0;
	for (; *s; s++) {
		if (*s == '.' && frac < 0) {
			frac = 0;
			continue;
		}
		if (*s < '0' || *s > '9' || frac >= 9)
			return 0;
		v = v * 10 + (*s - '0');
		if (frac >= 0)
			frac++;
	}
	for (frac = frac < 0 ? 0 : frac; frac < 9; frac++)
		v *= 10;
	*out = sign * v;
	return 1;
}

int csv_focus_billed(const char *csv, const char *period, int64_t *total)
{
	char *copy = strdup(csv);
	int rows = 0, n = 0;
	*total = 0;
	if (copy == NULL)
		return -1;
	for (char *save = NULL, *ln = strtok_r(copy, "\r\n", &save); ln;
	     ln = strtok_r(NULL, "\r\n", &save)) {
		char *f[20];
		if (n++ == 0)
			continue; /* the heading */
		int64_t cost;
		if (csv_fields(ln, f, 20) != 19 || !csv_nano(f[16], &cost)) {
			rows = -1;
			break;
		}
		if (period && strncmp(f[3], period, strlen(period)) != 0)
			continue;
		*total += cost;
		rows++;
	}
	free(copy);
	return rows;
}
