/*
 * libFuzzer: a bundle's config.json as meter-hook oci reads it (hook/oci.c).
 * Oracle: what it admits names valid ids, and its size is the least
 * thousandth at or above the limits (vCPUs x period >= quota, one thousandth
 * less falls short; the same for GiB), read again here from the JSON.
 */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collector/match.h"
#include "common/ids.h"
#include "hook/oci.h"

/* The number at linux.resources.<a>.<b>, or 0 when absent or not above 0. */
static double limit(const cJSON *c, const char *a, const char *b)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(
	        cJSON_GetObjectItemCaseSensitive(
	                cJSON_GetObjectItemCaseSensitive(
	                        cJSON_GetObjectItemCaseSensitive(c, "linux"), "resources"),
	                a),
	        b);
	return cJSON_IsNumber(v) && v->valuedouble > 0 ? v->valuedouble : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct matcher *m;
	char err[512];
	if (m == NULL)
		m = matcher_new("sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)", err, sizeof err);
	char *t = malloc(size + 1);
	if (t == NULL || m == NULL) {
		free(t);
		return 0;
	}
	memcpy(t, data, size);
	t[size] = '\0';
	struct oci_target g;
	memset(&g, 0, sizeof g);
	if (oci_config_target(t, NULL, m, &g, err, sizeof err)) {
		if (!id_valid(g.sandbox) || (g.account[0] && !id_valid(g.account)))
			abort();
		cJSON *c = cJSON_Parse(t);
		double quota = limit(c, "cpu", "quota"), period = limit(c, "cpu", "period");
		double mem = limit(c, "memory", "limit"), gib = 1073741824.0;
		if (period == 0)
			period = 100000;
		if (quota == 0 ? g.vcpus_milli != 0
		               : (g.vcpus_milli * period < quota * 1000 ||
		                  (g.vcpus_milli - 1) * period >= quota * 1000))
			abort();
		if (mem == 0 ? g.memory_milli != 0
		             : (g.memory_milli * gib < mem * 1000 ||
		                (g.memory_milli - 1) * gib >= mem * 1000))
			abort();
		cJSON_Delete(c);
	}
	free(t);
	return 0;
}
