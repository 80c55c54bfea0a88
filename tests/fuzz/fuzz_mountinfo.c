/* libFuzzer: /proc/self/mountinfo as collector/layout.c reads it ("auto"). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/layout.h"

static void check(const char *path)
{
	/* every entry is empty or a whole path at or below the root "/sys" */
	if (strlen(path) >= CG_PATH_MAX || (path[0] && strncmp(path, "/sys", 4) != 0))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *f = fmemopen((void *)data, size, "r");
	if (f == NULL)
		return 0;
	struct cg_layout l;
	memset(&l, 0, sizeof l);
	layout_from_mountinfo("/sys", f, &l);
	fclose(f);
	check(l.v2);
	check(l.cpuacct);
	check(l.cpu);
	check(l.memory);
	return 0;
}
