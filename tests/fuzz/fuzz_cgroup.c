/* libFuzzer: the cgroup file parsers (collector/cgroup.c), on exactly size bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collector/cgroup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy of exactly size bytes, so any read past the end is caught */
	char *b = malloc(size ? size : 1);
	if (b == NULL)
		return 0;
	memcpy(b, data, size);
	int64_t v;
	(void)cg_parse_keyed(b, size, "usage_usec", &v);
	(void)cg_parse_keyed(b, size, "anon", &v);
	(void)cg_parse_keyed(b, size, "populated", &v);
	(void)cg_parse_int(b, size, &v);
	(void)cg_parse_max(b, size, &v);
	(void)cg_parse_cpu_max(b, size, &v);
	free(b);
	return 0;
}
