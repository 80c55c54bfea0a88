/*
 * meter/decimal.h: exact decimal numbers as scaled integers.
 *
 * A value v at scale s stands for v / 10^s: "0.5" at scale 3 is 500. Parsing
 * never goes through a double, so "1.275" is exactly 1275 at scale 3.
 */
#ifndef METER_DECIMAL_H
#define METER_DECIMAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/checked.h"
#include "meter/status.h"

/* Longest text meter_decimal_format writes, with its NUL. */
#define METER_DECIMAL_BUF 32

/*
 * Parses s, in the form [-]digits[.digits], into *out at the given scale
 * (0..18). No sign unless allow_negative, no exponent, no spaces, no "+",
 * no bare ".5" or "5.". Fraction digits beyond the scale must be zeros.
 * Errors: METER_EINVAL (shape), METER_EPRECISION (a non-zero digit beyond
 * the scale), METER_EOVERFLOW (does not fit), METER_ERANGE (negative when not
 * allowed). *out is untouched on error.
 */
enum meter_status meter_decimal_parse(const char *s, int scale, bool allow_negative, int64_t *out);

/*
 * Writes v / 10^scale into buf (at least METER_DECIMAL_BUF bytes) with at
 * least min_frac and at most scale fraction digits: trailing zeros past
 * min_frac are dropped. 1275 at scale 3 with min_frac 2 is "1.275", 900 is
 * "0.90", 5000 with min_frac 0 is "5".
 */
void meter_decimal_format(int64_t v, int scale, int min_frac, char *buf, size_t len);

/* Longest text meter_qty_format writes, with its NUL (a 128-bit value, sign and point). */
#define METER_QTY_BUF 48

/*
 * Parses a whole number, [-]digits, into a 128-bit integer: a sum of usage
 * as PostgreSQL's numeric gives it. Errors as meter_decimal_parse; *out is
 * untouched on error.
 */
enum meter_status meter_qty_parse(const char *s, bool allow_negative, meter_i128 *out);

/*
 * Writes v / 10^scale (scale 0..30) as meter_decimal_format does, for a
 * 128-bit v, into buf (at least METER_QTY_BUF bytes).
 */
void meter_qty_format(meter_i128 v, int scale, int min_frac, char *buf, size_t len);

/*
 * Writes q / per rounded half away from zero to `decimals` places (0..12),
 * trailing zeros dropped: 5400000000 µs per 3600000000 is "1.5" hours.
 * per must be > 0; "overflow" is written when the value does not fit.
 */
void meter_qty_per(meter_i128 q, int64_t per, int decimals, char *buf, size_t len);

/* 10^n for n in 0..18. */
int64_t meter_pow10(int n);

#endif
