#include "reports/invoice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

void report_month(int64_t month_start_us, char *buf, size_t len)
{
	char t[METER_TIME_BUF];
	meter_time_format(month_start_us, t, sizeof t);
	snprintf(buf, len, "%.7s", t);
}

/* What a line is, in words and units. */
static void describe_plain(const struct meter_invoice_line *l, char *item, size_t ilen, char *desc,
                           size_t dlen, const char **unit);

/* Adjustment lines say which month their usage belongs to. */
static void describe(const struct meter_invoice_line *l, char *item, size_t ilen, char *desc,
                     size_t dlen, const char **unit)
{
	char plain[256], month[16];
	describe_plain(l, item, ilen, plain, sizeof plain, unit);
	if (l->for_month_us == 0) {
		snprintf(desc, dlen, "%s", plain);
		return;
	}
	report_month(l->for_month_us, month, sizeof month);
	size_t n = strlen(item);
	snprintf(item + n, ilen - n, "_adjustment");
	snprintf(desc, dlen,
	         "Adjustment for %s, usage that arrived after its invoice was final: %s", month,
	         plain);
}

static void describe_plain(const struct meter_invoice_line *l, char *item, size_t ilen, char *desc,
                           size_t dlen, const char **unit)
{
	char price[METER_MONEY_BUF];
	meter_decimal_format(l->unit_price, METER_MONEY_SCALE, 0, price, sizeof price);
	switch (l->kind) {
	case METER_LINE_CPU:
		snprintf(item, ilen, "cpu");
		snprintf(desc, dlen, "CPU, billed on measured use (plan %s, $%s per vCPU-hour)",
		         l->plan->name, price);
		*unit = "vCPU-hour";
		break;
	case METER_LINE_MEMORY:
		snprintf(item, ilen, "memory");
		snprintf(desc, dlen, "Memory, provisioned (plan %s, $%s per GiB-hour)",
		         l->plan->name, price);
		*unit = "GiB-hour";
		break;
	case METER_LINE_TRIAL:
		snprintf(item, ilen, "trial_credit");
		snprintf(desc, dlen, "Free trial: the usage of its sandbox-hours, credited");
		*unit = "sandbox-hour";
		break;
	}
}

static void quantity(const struct meter_invoice_line *l, char *buf, size_t len)
{
	int64_t nano = 0;
	(void)ck_div_round((meter_i128)l->quantity * 1000000000, l->per_unit, &nano);
	meter_decimal_format(nano, 9, 0, buf, len);
}

cJSON *report_invoice_json(const struct invoice_meta *m, const struct meter_invoice *inv)
{
	char month[16], item[48], desc[400], q[METER_DECIMAL_BUF], a[METER_MONEY_BUF],
	        e[METER_MONEY_BUF], p[METER_MONEY_BUF];
	const char *unit;
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	report_month(m->month_start_us, month, sizeof month);
	cJSON_AddStringToObject(o, "account_id", m->account_id);
	cJSON_AddStringToObject(o, "account_name", m->account_name);
	cJSON_AddStringToObject(o, "month", month);
	cJSON_AddStringToObject(o, "status", m->status);
	cJSON_AddStringToObject(o, "currency", "USD");
	cJSON *lines = cJSON_AddArrayToObject(o, "lines");
	for (size_t i = 0; lines && i < inv->n; i++) {
		const struct meter_invoice_line *l = &inv->lines[i];
		cJSON *x = cJSON_CreateObject();
		if (x == NULL)
			break;
		cJSON_AddItemToArray(lines, x);
		describe(l, item, sizeof item, desc, sizeof desc, &unit);
		quantity(l, q, sizeof q);
		meter_money_format_cents(l->amount, a, sizeof a);
		meter_money_format_exact(l->amount, e, sizeof e);
		meter_decimal_format(l->unit_price, METER_MONEY_SCALE, 0, p, sizeof p);
		cJSON_AddStringToObject(x, "item", item);
		cJSON_AddStringToObject(x, "description", desc);
		cJSON_AddStringToObject(x, "quantity", q);
		cJSON_AddStringToObject(x, "unit", unit);
		if (l->plan) {
			cJSON_AddStringToObject(x, "unit_price", p);
			cJSON_AddStringToObject(x, "plan", l->plan->name);
		}
		if (l->for_month_us) {
			char fm[16];
			report_month(l->for_month_us, fm, sizeof fm);
			cJSON_AddStringToObject(x, "for_month", fm);
		}
		cJSON_AddStringToObject(x, "amount", a);
		cJSON_AddStringToObject(x, "amount_exact", e);
	}
	meter_money_format_cents(inv->total, a, sizeof a);
	meter_money_format_exact(inv->total, e, sizeof e);
	cJSON_AddStringToObject(o, "total", a);
	if (cJSON_AddStringToObject(o, "total_exact", e) == NULL) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Appends one RFC 4180 field, quoted when it holds a comma, quote or line break. */
static void field(char **p, const char *s, bool last)
{
	bool quote = strpbrk(s, ",\"\r\n") != NULL;
	if (quote)
		*(*p)++ = '"';
	for (; *s; s++) {
		if (*s == '"')
			*(*p)++ = '"';
		*(*p)++ = *s;
	}
	if (quote)
		*(*p)++ = '"';
	if (last) {
		*(*p)++ = '\r';
		*(*p)++ = '\n';
	} else {
		*(*p)++ = ',';
	}
}

char *report_invoice_csv(const struct invoice_meta *m, const struct meter_invoice *inv)
{
	(void)m;
	/* Every field at most doubles when quoted: a generous bound per row. */
	char *buf = malloc((inv->n + 2) * 1600 + 1), *p = buf;
	char item[48], desc[400], q[METER_DECIMAL_BUF], a[METER_MONEY_BUF], e[METER_MONEY_BUF],
	        price[METER_MONEY_BUF];
	const char *unit;
	if (buf == NULL)
		return NULL;
	const char *head[] = {"item",       "description", "quantity",    "unit",
	                      "unit_price", "amount",      "amount_exact"};
	for (int k = 0; k < 7; k++)
		field(&p, head[k], k == 6);
	for (size_t i = 0; i < inv->n; i++) {
		const struct meter_invoice_line *l = &inv->lines[i];
		describe(l, item, sizeof item, desc, sizeof desc, &unit);
		quantity(l, q, sizeof q);
		meter_money_format_cents(l->amount, a, sizeof a);
		meter_money_format_exact(l->amount, e, sizeof e);
		meter_decimal_format(l->unit_price, METER_MONEY_SCALE, 0, price, sizeof price);
		const char *row[] = {item, desc, q, unit, l->plan ? price : "", a, e};
		for (int k = 0; k < 7; k++)
			field(&p, row[k], k == 6);
	}
	meter_money_format_cents(inv->total, a, sizeof a);
	meter_money_format_exact(inv->total, e, sizeof e);
	const char *total[] = {"total", "", "", "", "", a, e};
	for (int k = 0; k < 7; k++)
		field(&p, total[k], k == 6);
	*p = '\0';
	return buf;
}
