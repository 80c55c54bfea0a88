/* libFuzzer: the Authorization header (in_bearer_key), against its specification. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *h = malloc(size + 1), key[80];
	if (h == NULL)
		return 0;
	memcpy(h, data, size);
	h[size] = '\0';
	/* "Bearer mk_" then 64 lowercase hex digits, and the string ends there */
	bool want = strlen(h) == 74 && memcmp(h, "Bearer mk_", 10) == 0;
	for (size_t i = 10; want && i < 74; i++)
		want = strchr("0123456789abcdef", h[i]) != NULL && h[i] != '\0';
	bool got = in_bearer_key(h, key, sizeof key);
	if (got != want || (got && strcmp(key, h + 7) != 0) || (!got && key[0] != '\0'))
		abort();
	/* too small a buffer never takes it */
	if (in_bearer_key(h, key, 67))
		abort();
	free(h);
	return 0;
}
