/* libFuzzer: times, decimals and money from text (meter/timefmt.c, meter/decimal.c). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meter/decimal.h"
#include "meter/money.h"
#include "meter/timefmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	int64_t t, d;
	char buf[METER_TIME_BUF];
	if (meter_time_parse(s, &t) == METER_OK) {
		/* what parses formats and parses back to the same instant */
		meter_time_format(t, buf, sizeof buf);
		int64_t again;
		if (meter_time_parse(buf, &again) != METER_OK || again != t)
			abort();
	}
	for (int scale = 0; scale <= 9; scale += 3)
		if (meter_decimal_parse(s, scale, true, &d) == METER_OK) {
			char out[METER_DECIMAL_BUF];
			int64_t back;
			meter_decimal_format(d, scale, 0, out, sizeof out);
			if (meter_decimal_parse(out, scale, true, &back) != METER_OK || back != d)
				abort();
		}
	meter_money m;
	if (meter_money_parse(s, true, &m) == METER_OK) {
		char c[METER_MONEY_BUF];
		meter_money_format_cents(m, c, sizeof c);
		meter_money_format_exact(m, c, sizeof c);
	}
	free(s);
	return 0;
}
