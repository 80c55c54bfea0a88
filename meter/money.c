#include "meter/money.h"

#include "meter/checked.h"

enum meter_status meter_money_parse(const char *s, bool allow_negative, meter_money *out)
{
	return meter_decimal_parse(s, METER_MONEY_SCALE, allow_negative, out);
}

void meter_money_format_exact(meter_money m, char *buf, size_t len)
{
	meter_decimal_format(m, METER_MONEY_SCALE, 2, buf, len);
}

meter_money meter_money_round_cents(meter_money m)
{
	int64_t cents = 0;
	/* Cannot fail: the quotient is smaller than m. */
	(void)ck_div_round(m, METER_NANO_PER_CENT, &cents);
	return cents * METER_NANO_PER_CENT;
}

void meter_money_format_cents(meter_money m, char *buf, size_t len)
{
	int64_t cents = 0;
	(void)ck_div_round(m, METER_NANO_PER_CENT, &cents);
	meter_decimal_format(cents, 2, 2, buf, len);
}

enum meter_status meter_money_add(meter_money a, meter_money b, meter_money *out)
{
	return ck_add(a, b, out) ? METER_OK : METER_EOVERFLOW;
}

enum meter_status meter_money_of(meter_i128 qty, meter_money unit_price, int64_t per,
                                 meter_money *out)
{
	meter_i128 num;
	if (per <= 0)
		return METER_EINVAL;
	if (!ck_mul128(qty, unit_price, &num))
		return METER_EOVERFLOW;
	return ck_div_round(num, per, out) ? METER_OK : METER_EOVERFLOW;
}
