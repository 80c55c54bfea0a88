/*
 * libFuzzer: query strings ("a=1&b=2", already split by the server) through
 * api/input.c, and the same bytes as a login form body (in_form_value).
 */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a form body is len bytes, not NUL-terminated: data as it is */
	char key[128];
	if (in_form_value((const char *)data, size, "key", key, sizeof key) &&
	    strlen(key) >= sizeof key)
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
	(void)in_query(args, n, fields, 5, v, &p);
	free(s);
	return 0;
}
