/*
 * meter/timefmt.h: RFC 3339 timestamps in UTC <-> µs since the Unix epoch.
 *
 * Pure calendar arithmetic (proleptic Gregorian, no leap seconds), no time
 * zone database and no libc state.
 */
#ifndef METER_TIMEFMT_H
#define METER_TIMEFMT_H

#include <stddef.h>
#include <stdint.h>

#include "meter/status.h"

/* "2026-09-25T00:00:00Z" or with fractions "2026-09-25T00:00:00.123456Z", and NUL. */
#define METER_TIME_BUF 32

/*
 * Parses "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" (a lowercase t or z,
 * or a space for the T, are accepted; at most 6 fraction digits; years
 * 1970..9999). METER_EINVAL for anything else, including 2026-02-30.
 */
enum meter_status meter_time_parse(const char *s, int64_t *us);

/* Writes t as "YYYY-MM-DDTHH:MM:SSZ", with ".ffffff" when t has a fraction. */
void meter_time_format(int64_t us, char *buf, size_t len);

/* Days since 1970-01-01 of a civil date (month 1..12). */
int64_t meter_days_from_civil(int64_t y, int m, int d);

/* The first instant of the month (UTC) that holds t, and of the next month. */
int64_t meter_month_start(int64_t us);
int64_t meter_month_next(int64_t month_start_us);

#endif
