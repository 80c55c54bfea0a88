/* libFuzzer: spool files (collector/spool.c): any bytes are scanned without reading past them. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collector/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned char *b = malloc(size ? size : 1);
	if (b == NULL)
		return 0;
	memcpy(b, data, size);
	size_t records;
	uint64_t last;
	bool torn;
	size_t good = spool_scan(b, size, &records, &last, &torn);
	if (good > size)
		abort();
	free(b);
	return 0;
}
