/*
 * meter/money.h: amounts of money as exact integers.
 *
 * An amount is an int64_t count of nano-dollars (10^-9 USD): $0.025 is
 * 25,000,000. The amount of an invoice line is computed once, from an exact
 * integer quantity times a unit price, and rounded half away from zero to the
 * nano-dollar: that is the "exact" amount shown beside the rounded one. Cents
 * are rounded from it only for display. No double ever holds an amount.
 */
#ifndef METER_MONEY_H
#define METER_MONEY_H

#include <stddef.h>
#include <stdint.h>

#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/status.h"

typedef int64_t meter_money;

#define METER_MONEY_SCALE     9
#define METER_NANO_PER_DOLLAR INT64_C(1000000000)
#define METER_NANO_PER_CENT   INT64_C(10000000)
#define METER_MONEY_BUF       METER_DECIMAL_BUF

/*
 * Parses "1.28" (at most 9 decimals) into nano-dollars. Negative amounts only
 * with allow_negative. Errors as meter_decimal_parse.
 */
enum meter_status meter_money_parse(const char *s, bool allow_negative, meter_money *out);

/* The exact amount with at least 2 decimals: "0.375", "0.90", "-1.275". */
void meter_money_format_exact(meter_money m, char *buf, size_t len);

/* The amount rounded half away from zero to cents: "0.38", "0.90", "-1.28". */
void meter_money_format_cents(meter_money m, char *buf, size_t len);

/* m rounded half away from zero to a whole number of cents, in nano-dollars. */
meter_money meter_money_round_cents(meter_money m);

/* *out = a + b; METER_EOVERFLOW leaves *out as it was. */
enum meter_status meter_money_add(meter_money a, meter_money b, meter_money *out);

/*
 * The amount of qty units at unit_price per per units, rounded half away
 * from zero to the nano-dollar: round(qty * unit_price / per). For example
 * billed CPU in µs at a price per vCPU-hour is meter_money_of(us, price,
 * 3600000000). per must be > 0.
 */
enum meter_status meter_money_of(meter_i128 qty, meter_money unit_price, int64_t per,
                                 meter_money *out);

#endif
