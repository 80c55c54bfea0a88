/*
 * libFuzzer: request bodies through the API's strict JSON reading
 * (api/input.c). Oracle: what it accepts, written back as JSON in the
 * plainest form of each value (ids and texts as strings, decimals and times
 * as their canonical text), is accepted again with the same values; and what
 * it refuses, it refuses with a status and a reason.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/input.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

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
#define N 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct problem p;
	struct in_value v[N], w[N];
	cJSON *o = in_parse_object((const char *)data, size, &p);
	if (o == NULL) {
		if (p.status < 400 || p.detail[0] == '\0')
			abort();
		return 0;
	}
	bool ok = in_fields(o, fields, N, v, &p);
	cJSON_Delete(o);
	if (!ok) {
		if (p.status < 400 || p.detail[0] == '\0')
			abort();
		return 0;
	}
	cJSON *back = cJSON_CreateObject();
	for (int i = 0; i < N; i++) {
		if (!v[i].set)
			continue;
		char t[METER_TIME_BUF > METER_DECIMAL_BUF ? METER_TIME_BUF : METER_DECIMAL_BUF];
		const char *text = v[i].text;
		if (fields[i].type == IN_DECIMAL) {
			meter_decimal_format(v[i].num, fields[i].scale, 0, t, sizeof t);
			text = t;
		} else if (fields[i].type == IN_TIME) {
			meter_time_format(v[i].num, t, sizeof t);
			text = t;
		}
		cJSON_AddStringToObject(back, fields[i].name, text);
	}
	char *s = cJSON_PrintUnformatted(back);
	cJSON_Delete(back);
	if (s == NULL)
		return 0;
	cJSON *o2 = in_parse_object(s, strlen(s), &p);
	if (o2 == NULL || !in_fields(o2, fields, N, w, &p))
		abort();
	cJSON_Delete(o2);
	free(s);
	for (int i = 0; i < N; i++) {
		bool texts = fields[i].type == IN_ID || fields[i].type == IN_TEXT ||
		             fields[i].type == IN_ENUM;
		if (w[i].set != v[i].set || w[i].num != v[i].num ||
		    (texts && strcmp(w[i].text, v[i].text) != 0))
			abort();
	}
	return 0;
}
