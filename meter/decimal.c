#include "meter/decimal.h"

#include <stdio.h>
#include <string.h>

#include "meter/checked.h"

int64_t meter_pow10(int n)
{
	int64_t p = 1;
	for (int i = 0; i < n; i++)
		p *= 10;
	return p;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

enum meter_status meter_decimal_parse(const char *s, int scale, bool allow_negative, int64_t *out)
{
	if (s == NULL || scale < 0 || scale > 18)
		return METER_EINVAL;
	const char *p = s;
	bool neg = false;
	if (*p == '-') {
		neg = true;
		p++;
	}
	if (!is_digit(*p))
		return METER_EINVAL;

	/* Accumulate as a negative number so INT64_MIN parses too. */
	int64_t acc = 0;
	for (; is_digit(*p); p++)
		if (!ck_mul(acc, 10, &acc) || !ck_sub(acc, *p - '0', &acc))
			return METER_EOVERFLOW;
	int frac = 0;
	bool beyond = false;
	if (*p == '.') {
		p++;
		if (!is_digit(*p))
			return METER_EINVAL;
		for (; is_digit(*p); p++) {
			if (frac < scale) {
				if (!ck_mul(acc, 10, &acc) || !ck_sub(acc, *p - '0', &acc))
					return METER_EOVERFLOW;
				frac++;
			} else if (*p != '0') {
				beyond = true;
			}
		}
	}
	if (*p != '\0')
		return METER_EINVAL;
	if (beyond)
		return METER_EPRECISION;
	for (; frac < scale; frac++)
		if (!ck_mul(acc, 10, &acc))
			return METER_EOVERFLOW;
	if (neg && acc != 0 && !allow_negative)
		return METER_ERANGE;
	if (!neg && acc == INT64_MIN)
		return METER_EOVERFLOW;
	*out = neg ? acc : -acc;
	return METER_OK;
}

void meter_decimal_format(int64_t v, int scale, int min_frac, char *buf, size_t len)
{
	if (scale < 0 || scale > 18)
		scale = 0;
	if (min_frac > scale)
		min_frac = scale;
	/* Work on the magnitude as unsigned so INT64_MIN is fine. */
	uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	uint64_t p = (uint64_t)meter_pow10(scale);
	uint64_t ip = mag / p, fp = mag % p;
	char frac[20];
	int n = 0;
	for (int i = scale - 1; i >= 0; i--) {
		uint64_t d = (uint64_t)meter_pow10(i);
		frac[n++] = (char)('0' + (fp / d) % 10);
	}
	while (n > min_frac && frac[n - 1] == '0')
		n--;
	frac[n] = '\0';
	snprintf(buf, len, "%s%llu%s%s", v < 0 ? "-" : "", (unsigned long long)ip, n ? "." : "",
	         frac);
}
