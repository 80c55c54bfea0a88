/*
 * libFuzzer: query strings ("a=1&b=2", already split by the server) through
 * api/input.c, and the same bytes as a login form body (in_form_value),
 * against a decoder of the form written here from its specification.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/input.h"

static const struct in_field fields[] = {
        {"from", IN_TIME, 0, 0, 0, true, NULL},
        {"to", IN_TIME, 0, 0, 0, true, NULL},
        {"vcpus", IN_DECIMAL, 3, 1, 256000, false, NULL},
        {"month", IN_MONTH, 0, 0, 0, false, NULL},
        {"format", IN_ENUM, 0, 0, 0, false, "json|csv|html"},
};

static int hex(uint8_t c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

/*
 * The field "key" of an x-www-form-urlencoded body: pairs between '&', the
 * one named key= taken once ('+' a space, %XX a byte); no NUL in the value,
 * as it is or encoded; the value and its NUL in olen bytes.
 */
static bool reference(const uint8_t *d, size_t n, char *out, size_t olen)
{
	bool found = false;
	size_t start = 0;
	while (start <= n) {
		size_t end = start;
		while (end < n && d[end] != '&')
			end++;
		if (end - start >= 4 && memcmp(d + start, "key=", 4) == 0) {
			if (found)
				return false;
			found = true;
			size_t o = 0;
			for (size_t i = start + 4; i < end; i++) {
				uint8_t c = d[i];
				if (c == '+') {
					c = ' ';
				} else if (c == '%') {
					if (i + 2 >= end || hex(d[i + 1]) < 0 || hex(d[i + 2]) < 0)
						return false;
					c = (uint8_t)(hex(d[i + 1]) * 16 + hex(d[i + 2]));
					i += 2;
				}
				if (c == 0 || o + 1 >= olen)
					return false;
				out[o++] = (char)c;
			}
			out[o] = '\0';
		}
		start = end + 1;
	}
	return found;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a form body is len bytes, not NUL-terminated: data as it is */
	char key[128], want[128];
	bool got = in_form_value((const char *)data, size, "key", key, sizeof key);
	bool ok = reference(data, size, want, sizeof want);
	if (got != ok || (got && strcmp(key, want) != 0) || (!got && key[0] != '\0'))
		abort();
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	struct in_arg args[16];
	size_t n = 0;
	for (char *save = NULL, *pair = strtok_r(s, "&", &save); pair && n < 16;
	     pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		if (eq)
			*eq = '\0';
		args[n].name = pair;
		args[n].value = eq ? eq + 1 : NULL;
		n++;
	}
	struct problem p;
	struct in_value v[5];
	if (in_query(args, n, fields, 5, v, &p)) {
		/* accepted: every required field is there, and nothing it does not know */
		if (!v[0].set || !v[1].set)
			abort();
		for (size_t i = 0; i < n; i++) {
			bool known = false;
			for (size_t k = 0; k < 5; k++)
				known = known || strcmp(args[i].name, fields[k].name) == 0;
			if (!known)
				abort();
		}
	} else if (p.status < 400 || p.detail[0] == '\0') {
		abort(); /* a refusal says what and why */
	}
	free(s);
	return 0;
}
