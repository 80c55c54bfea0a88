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

enum meter_status meter_qty_parse(const char *s, bool allow_negative, meter_i128 *out)
{
	if (s == NULL)
		return METER_EINVAL;
	const char *p = s;
	bool neg = *p == '-';
	p += neg;
	if (!is_digit(*p))
		return METER_EINVAL;
	/* As a negative number, so the most negative value parses too. */
	meter_i128 acc = 0;
	for (; is_digit(*p); p++)
		if (__builtin_mul_overflow(acc, 10, &acc) ||
		    __builtin_sub_overflow(acc, *p - '0', &acc))
			return METER_EOVERFLOW;
	if (*p != '\0')
		return METER_EINVAL;
	if (neg && acc != 0 && !allow_negative)
		return METER_ERANGE;
	meter_i128 v = acc;
	if (!neg && __builtin_sub_overflow((meter_i128)0, acc, &v))
		return METER_EOVERFLOW;
	*out = v;
	return METER_OK;
}

void meter_qty_format(meter_i128 v, int scale, int min_frac, char *buf, size_t len)
{
	char digits[48];
	int n = 0;
	if (scale < 0 || scale > 30)
		scale = 0;
	if (min_frac > scale)
		min_frac = scale;
	/* Digits of the magnitude, least significant first, at least scale + 1 of them. */
	meter_u128 mag = v < 0 ? (meter_u128)0 - (meter_u128)v : (meter_u128)v;
	do {
		digits[n++] = (char)('0' + (int)(mag % 10));
		mag /= 10;
	} while (mag > 0 || n <= scale);
	int drop = 0; /* trailing fraction zeros past min_frac */
	while (drop < scale - min_frac && digits[drop] == '0')
		drop++;
	char text[METER_QTY_BUF];
	size_t k = 0;
	if (v < 0)
		text[k++] = '-';
	for (int i = n - 1; i >= scale; i--)
		text[k++] = digits[i];
	if (scale - drop > 0) {
		text[k++] = '.';
		for (int i = scale - 1; i >= drop; i--)
			text[k++] = digits[i];
	}
	text[k] = '\0';
	snprintf(buf, len, "%s", text);
}

void meter_qty_per(meter_i128 q, int64_t per, int decimals, char *buf, size_t len)
{
	meter_i128 scaled, v;
	if (decimals < 0 || decimals > 12 ||
	    __builtin_mul_overflow(q, (meter_i128)meter_pow10(decimals), &scaled) ||
	    !ck_div_round_q(scaled, per, &v)) {
		snprintf(buf, len, "overflow");
		return;
	}
	meter_qty_format(v, decimals, 0, buf, len);
}
