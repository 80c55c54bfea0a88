/* libFuzzer: request bodies through the API's strict JSON reading (api/input.c). */
#include <stddef.h>
#include <stdint.h>

#include "api/input.h"

static const struct in_field fields[] = {
        {"id", IN_ID, 0, 0, 0, true, NULL},
        {"account_id", IN_ID, 0, 0, 0, true, NULL},
        {"vcpus", IN_DECIMAL, 3, 1, 256000, true, NULL},
        {"memory_gib", IN_DECIMAL, 3, 1, 1024000, true, NULL},
        {"started_at", IN_TIME, 0, 0, 0, false, NULL},
        {"plan", IN_ENUM, 0, 0, 0, false, "trial|paid"},
        {"name", IN_TEXT, 0, 0, 200, false, NULL},
        {"monthly_spend_cap", IN_DECIMAL, 9, 0, INT64_C(1000000000000000000), false, NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct problem p;
	struct in_value v[8];
	cJSON *o = in_parse_object((const char *)data, size, &p);
	if (o) {
		(void)in_fields(o, fields, 8, v, &p);
		cJSON_Delete(o);
	}
	return 0;
}
