/*
 * libFuzzer: the cgroup file parsers (collector/cgroup.c), on exactly size
 * bytes, against parsers of their formats written here: a number is one or
 * more digits that fit in 63 bits, followed by the end or a space, tab or
 * newline; cg_parse_int skips blanks before it; a keyed file's first line
 * that starts with "key " holds the value after it.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collector/cgroup.h"

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

static bool number(const char *p, size_t len, int64_t *out)
{
	unsigned __int128 v = 0;
	size_t i = 0;
	while (i < len && p[i] >= '0' && p[i] <= '9') {
		v = v * 10 + (unsigned)(p[i] - '0');
		if (v > INT64_MAX)
			return false;
		i++;
	}
	if (i == 0 || (i < len && !blank(p[i])))
		return false;
	*out = (int64_t)v;
	return true;
}

static bool keyed(const char *b, size_t len, const char *key, int64_t *out)
{
	size_t k = strlen(key);
	for (size_t i = 0; i < len;) {
		size_t end = i;
		while (end < len && b[end] != '\n')
			end++;
		if (end - i > k && memcmp(b + i, key, k) == 0 && b[i + k] == ' ')
			return number(b + i + k + 1, end - i - k - 1, out);
		i = end + 1;
	}
	return false;
}

static void same(bool got, int64_t gv, bool want, int64_t wv)
{
	if (got != want || (got && gv != wv))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy of exactly size bytes, so any read past the end is caught */
	char *b = malloc(size ? size : 1);
	if (b == NULL)
		return 0;
	memcpy(b, data, size);
	int64_t v = 0, w = 0;
	static const char *const keys[] = {"usage_usec", "anon", "populated"};
	for (int k = 0; k < 3; k++) {
		bool got = cg_parse_keyed(b, size, keys[k], &v);
		same(got, v, keyed(b, size, keys[k], &w), w);
	}
	size_t i = 0;
	while (i < size && blank(b[i]))
		i++;
	bool got = cg_parse_int(b, size, &v);
	same(got, v, number(b + i, size - i, &w), w);
	/* memory.max: "max" alone or before a blank means no limit */
	got = cg_parse_max(b, size, &v);
	bool max = size >= 3 && memcmp(b, "max", 3) == 0 && (size == 3 || blank(b[3]));
	if (max)
		same(got, v, true, CG_ABSENT);
	else
		same(got, v, number(b + i, size - i, &w), w);
	(void)cg_parse_cpu_max(b, size, &v);
	free(b);
	return 0;
}
