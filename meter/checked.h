/*
 * meter/checked.h: overflow-checked integer arithmetic, wrapped once.
 *
 * Each helper returns true and stores the result, or returns false and leaves
 * *r untouched when the exact result does not fit. Amounts and quantities in
 * meter/ never use a bare + or * on values that come from outside.
 */
#ifndef METER_CHECKED_H
#define METER_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

__extension__ typedef __int128 meter_i128;
__extension__ typedef unsigned __int128 meter_u128;

/* The largest and smallest 128-bit values. */
#define METER_I128_MAX ((meter_i128)(((meter_u128)1 << 127) - 1))
#define METER_I128_MIN (-METER_I128_MAX - 1)

static inline bool ck_add(int64_t a, int64_t b, int64_t *r)
{
	int64_t t;
	if (__builtin_add_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

static inline bool ck_sub(int64_t a, int64_t b, int64_t *r)
{
	int64_t t;
	if (__builtin_sub_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

static inline bool ck_mul(int64_t a, int64_t b, int64_t *r)
{
	int64_t t;
	if (__builtin_mul_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

static inline bool ck_mul128(meter_i128 a, meter_i128 b, meter_i128 *r)
{
	meter_i128 t;
	if (__builtin_mul_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

/*
 * num / den rounded half away from zero ("half up" on magnitudes, so a credit
 * rounds exactly like the charge it cancels). den must be > 0. False when
 * den <= 0 or the quotient does not fit in int64_t.
 */
static inline bool ck_div_round(meter_i128 num, meter_i128 den, int64_t *r)
{
	if (den <= 0)
		return false;
	meter_i128 q = num / den;
	meter_i128 rem = num % den;
	meter_i128 mag = rem < 0 ? -rem : rem;
	if (mag * 2 >= den)
		q += num < 0 ? -1 : 1;
	if (q > INT64_MAX || q < INT64_MIN)
		return false;
	*r = (int64_t)q;
	return true;
}

/* The same helpers for 128-bit quantities (sums of usage: see meter/rating.h). */
static inline bool ck_add_q(meter_i128 a, meter_i128 b, meter_i128 *r)
{
	meter_i128 t;
	if (__builtin_add_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

static inline bool ck_sub_q(meter_i128 a, meter_i128 b, meter_i128 *r)
{
	meter_i128 t;
	if (__builtin_sub_overflow(a, b, &t))
		return false;
	*r = t;
	return true;
}

/* num / den rounded half away from zero, as ck_div_round, with a 128-bit quotient. */
static inline bool ck_div_round_q(meter_i128 num, meter_i128 den, meter_i128 *r)
{
	if (den <= 0)
		return false;
	meter_i128 q = num / den;
	meter_i128 rem = num % den;
	meter_i128 mag = rem < 0 ? -rem : rem;
	if (mag >= den - mag) /* 2 x mag >= den, without overflow */
		q += num < 0 ? -1 : 1;
	*r = q;
	return true;
}

#endif
