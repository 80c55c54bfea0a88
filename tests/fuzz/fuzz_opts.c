/*
 * libFuzzer: command lines through opts_parse (common/opts.c). The data is
 * split at NUL bytes into arguments. Oracle: what it accepts, written back in
 * one canonical form (--name=value, decimals and durations in their plainest
 * text), parses to the same values; and every value it keeps is in its bounds.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/opts.h"
#include "meter/decimal.h"

static const struct opt_def defs[] = {
        {"flag", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "a flag"},
        {"name", OPT_STRING, 0, 0, 0, NULL, NULL, false, "text"},
        {"vcpus", OPT_DECIMAL, 3, 1, 256000, NULL, NULL, false, "a decimal"},
        {"count", OPT_DECIMAL, 0, -5, 1000000, "7", NULL, false, "a whole number"},
        {"interval", OPT_DURATION, 0, 1000, INT64_C(86400000000), "10s", NULL, false, "a time"},
        {"need", OPT_STRING, 0, 0, 0, NULL, NULL, true, "required"},
};
#define N (sizeof defs / sizeof defs[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	char *argv[16];
	int argc = 0;
	for (size_t i = 0; i <= size && argc < 16;) {
		argv[argc++] = buf + i;
		i += strlen(buf + i) + 1;
	}
	struct opt_val v[N], w[N];
	char err[512] = "";
	if (!opts_parse(defs, N, argc, argv, v, err, sizeof err)) {
		if (err[0] == '\0')
			abort(); /* a refusal says why */
		free(buf);
		return 0;
	}
	/* kept values are in their bounds */
	for (size_t i = 0; i < N; i++)
		if (v[i].set && (defs[i].type == OPT_DECIMAL || defs[i].type == OPT_DURATION) &&
		    (v[i].num < defs[i].min || v[i].num > defs[i].max))
			abort();
	if (!v[5].set)
		abort(); /* the required one */
	/* written back canonically, parsed again: the same values */
	static char texts[N][4200];
	char *back[N];
	int nb = 0;
	for (size_t i = 0; i < N; i++) {
		if (!v[i].set)
			continue;
		switch (defs[i].type) {
		case OPT_FLAG:
			snprintf(texts[nb], sizeof texts[nb], "--%s", defs[i].name);
			break;
		case OPT_STRING:
			snprintf(texts[nb], sizeof texts[nb], "--%s=%s", defs[i].name, v[i].str);
			break;
		case OPT_DECIMAL: {
			char d[METER_DECIMAL_BUF];
			meter_decimal_format(v[i].num, defs[i].scale, 0, d, sizeof d);
			snprintf(texts[nb], sizeof texts[nb], "--%s=%s", defs[i].name, d);
			break;
		}
		case OPT_DURATION:
			snprintf(texts[nb], sizeof texts[nb], "--%s=%lldus", defs[i].name,
			         (long long)v[i].num);
			break;
		}
		back[nb] = texts[nb];
		nb++;
	}
	if (!opts_parse(defs, N, nb, back, w, err, sizeof err))
		abort();
	for (size_t i = 0; i < N; i++)
		if (w[i].set != v[i].set || w[i].num != v[i].num ||
		    (defs[i].type == OPT_STRING && v[i].set && strcmp(w[i].str, v[i].str) != 0))
			abort();
	free(buf);
	return 0;
}
