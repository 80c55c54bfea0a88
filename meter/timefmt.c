#include "meter/timefmt.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "meter/plan.h"

/* Howard Hinnant's days_from_civil / civil_from_days. */
int64_t meter_days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static bool digits(const char *s, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

static int days_in_month(int y, int m)
{
	static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : dm[m - 1];
}

enum meter_status meter_time_parse(const char *s, int64_t *us)
{
	int y, mo, d, h, mi, se;
	if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
	    !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
	    !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
	    !digits(s + 17, 2, &se))
		return METER_EINVAL;
	if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
	    mi > 59 || se > 59)
		return METER_EINVAL;
	const char *p = s + 19;
	int64_t frac = 0;
	if (*p == '.') {
		int n = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, n++) {
			if (n >= 6)
				return METER_EINVAL;
			frac = frac * 10 + (*p - '0');
		}
		if (n == 0)
			return METER_EINVAL;
		for (; n < 6; n++)
			frac *= 10;
	}
	int64_t offset = 0;
	if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
		offset = 0;
	} else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
		int oh, om;
		if (!digits(p + 1, 2, &oh) || !digits(p + 4, 2, &om) || oh > 23 || om > 59)
			return METER_EINVAL;
		offset = (oh * 60 + om) * 60;
		if (*p == '-')
			offset = -offset;
	} else {
		return METER_EINVAL;
	}
	int64_t secs = meter_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - offset;
	*us = secs * METER_US_PER_SECOND + frac;
	return METER_OK;
}

void meter_time_format(int64_t us, char *buf, size_t len)
{
	int64_t secs = us / METER_US_PER_SECOND, frac = us % METER_US_PER_SECOND;
	if (frac < 0) {
		frac += METER_US_PER_SECOND;
		secs--;
	}
	int64_t days = secs / 86400, rem = secs % 86400;
	if (rem < 0) {
		rem += 86400;
		days--;
	}
	int64_t y;
	int m, d;
	civil_from_days(days, &y, &m, &d);
	if (frac)
		snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d.%06lldZ", (long long)y, m, d,
		         (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), (long long)frac);
	else
		snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)y, m, d,
		         (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60));
}

int64_t meter_month_start(int64_t us)
{
	int64_t days = us / (86400 * METER_US_PER_SECOND);
	if (us % (86400 * METER_US_PER_SECOND) < 0)
		days--;
	int64_t y;
	int m, d;
	civil_from_days(days, &y, &m, &d);
	return meter_days_from_civil(y, m, 1) * 86400 * METER_US_PER_SECOND;
}

int64_t meter_month_next(int64_t month_start_us)
{
	int64_t y;
	int m, d;
	civil_from_days(month_start_us / (86400 * METER_US_PER_SECOND), &y, &m, &d);
	if (++m > 12) {
		m = 1;
		y++;
	}
	return meter_days_from_civil(y, m, 1) * 86400 * METER_US_PER_SECOND;
}
