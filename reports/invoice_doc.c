#include "reports/invoice_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"
#include "reports/csv.h"

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
	meter_qty_per(l->quantity, l->per_unit, 9, buf, len);
}

/* The texts of one line, shared by the JSON, CSV and HTML forms. */
struct line_text {
	char item[48], desc[400], q[METER_QTY_BUF], amount[METER_MONEY_BUF], exact[METER_MONEY_BUF],
	        price[METER_MONEY_BUF];
	const char *unit;
};

static void line_text(const struct meter_invoice_line *l, struct line_text *t)
{
	describe(l, t->item, sizeof t->item, t->desc, sizeof t->desc, &t->unit);
	quantity(l, t->q, sizeof t->q);
	meter_money_format_cents(l->amount, t->amount, sizeof t->amount);
	meter_money_format_exact(l->amount, t->exact, sizeof t->exact);
	meter_decimal_format(l->unit_price, METER_MONEY_SCALE, 0, t->price, sizeof t->price);
}

cJSON *report_invoice_json(const struct invoice_meta *m, const struct meter_invoice *inv)
{
	char month[16], a[METER_MONEY_BUF], e[METER_MONEY_BUF];
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
		struct line_text t;
		line_text(l, &t);
		cJSON_AddStringToObject(x, "item", t.item);
		cJSON_AddStringToObject(x, "description", t.desc);
		cJSON_AddStringToObject(x, "quantity", t.q);
		cJSON_AddStringToObject(x, "unit", t.unit);
		if (l->plan) {
			cJSON_AddStringToObject(x, "unit_price", t.price);
			cJSON_AddStringToObject(x, "plan", l->plan->name);
		}
		if (l->for_month_us) {
			char fm[16];
			report_month(l->for_month_us, fm, sizeof fm);
			cJSON_AddStringToObject(x, "for_month", fm);
		}
		cJSON_AddStringToObject(x, "amount", t.amount);
		cJSON_AddStringToObject(x, "amount_exact", t.exact);
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

char *report_invoice_csv(const struct invoice_meta *m, const struct meter_invoice *inv)
{
	(void)m;
	struct csv out = {0};
	char a[METER_MONEY_BUF], e[METER_MONEY_BUF];
	static const char *const head[] = {"item",       "description", "quantity",    "unit",
	                                   "unit_price", "amount",      "amount_exact"};
	csv_row(&out, head, 7);
	for (size_t i = 0; i < inv->n; i++) {
		const struct meter_invoice_line *l = &inv->lines[i];
		struct line_text t;
		line_text(l, &t);
		const char *row[] = {t.item,   t.desc, t.q, t.unit, l->plan ? t.price : "",
		                     t.amount, t.exact};
		csv_row(&out, row, 7);
	}
	meter_money_format_cents(inv->total, a, sizeof a);
	meter_money_format_exact(inv->total, e, sizeof e);
	const char *total[] = {"total", "", "", "", "", a, e};
	csv_row(&out, total, 7);
	return out.buf;
}

/* Appends s with HTML's five special characters escaped. */
static void html(char **p, const char *s)
{
	for (; *s; s++) {
		const char *e = *s == '&'    ? "&amp;"
		                : *s == '<'  ? "&lt;"
		                : *s == '>'  ? "&gt;"
		                : *s == '"'  ? "&quot;"
		                : *s == '\'' ? "&#39;"
		                             : NULL;
		if (e) {
			size_t n = strlen(e);
			memcpy(*p, e, n);
			*p += n;
		} else {
			*(*p)++ = *s;
		}
	}
}

static void raw(char **p, const char *s)
{
	size_t n = strlen(s);
	memcpy(*p, s, n);
	*p += n;
}

char *report_invoice_html(const struct invoice_meta *m, const struct meter_invoice *inv)
{
	/* Every character escapes to at most 6: a generous bound per line. */
	char *buf = malloc((inv->n + 4) * 4096 + 8192), *p = buf;
	char month[16], a[METER_MONEY_BUF], e[METER_MONEY_BUF];
	if (buf == NULL)
		return NULL;
	report_month(m->month_start_us, month, sizeof month);
	raw(&p, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
	        "charset=\"utf-8\">\n<title>Invoice ");
	html(&p, month);
	raw(&p, " &middot; ");
	html(&p, m->account_name);
	raw(&p,
	    "</title>\n<style>\n"
	    "body{font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;"
	    "color:#1d2430;margin:40px auto;max-width:860px;padding:0 24px}\n"
	    "h1{font-size:26px;margin:0 0 4px}\n.meta{color:#5b6574;margin:0 0 28px}\n"
	    ".status{display:inline-block;padding:2px 10px;border-radius:10px;font-size:12px;"
	    "font-weight:600;text-transform:uppercase;letter-spacing:.04em;"
	    "background:#eef2f7;color:#42536b}\n.status.final{background:#e6f4ea;color:#1e6b35}\n"
	    "table{width:100%;border-collapse:collapse}\nth{text-align:left;font-size:12px;"
	    "text-transform:uppercase;letter-spacing:.05em;color:#5b6574;border-bottom:2px solid "
	    "#d8dee6;padding:8px 6px}\ntd{border-bottom:1px solid #eceff3;padding:9px 6px;"
	    "vertical-align:top}\n.num{text-align:right;font-variant-numeric:tabular-nums;"
	    "white-space:nowrap}\n.exact{color:#8a94a3;font-size:12px}\n"
	    "tr.total td{border-top:2px solid #1d2430;border-bottom:none;font-weight:700;"
	    "font-size:16px}\n.credit{color:#1e6b35}\nfooter{margin-top:28px;color:#8a94a3;"
	    "font-size:12px}\n@media print{body{margin:0;max-width:none}}\n</style>\n</head>\n"
	    "<body>\n<h1>Invoice ");
	html(&p, month);
	raw(&p, " <span class=\"status ");
	html(&p, m->status);
	raw(&p, "\">");
	html(&p, m->status);
	raw(&p, "</span></h1>\n<p class=\"meta\">");
	html(&p, m->account_name);
	raw(&p, " &middot; account <code>");
	html(&p, m->account_id);
	raw(&p, "</code> &middot; amounts in USD</p>\n<table>\n<thead><tr><th>Item</th>"
	        "<th class=\"num\">Quantity</th><th class=\"num\">Unit price</th>"
	        "<th class=\"num\">Amount</th></tr></thead>\n<tbody>\n");
	for (size_t i = 0; i < inv->n; i++) {
		const struct meter_invoice_line *l = &inv->lines[i];
		struct line_text t;
		line_text(l, &t);
		raw(&p, l->amount < 0 ? "<tr class=\"credit\"><td>" : "<tr><td>");
		html(&p, t.desc);
		raw(&p, "</td><td class=\"num\">");
		html(&p, t.q);
		raw(&p, " ");
		html(&p, t.unit);
		raw(&p, "</td><td class=\"num\">");
		if (l->plan) {
			raw(&p, "$");
			html(&p, t.price);
		}
		/* -$0.09, not $-0.09 */
		raw(&p, l->amount < 0 ? "</td><td class=\"num\">-$" : "</td><td class=\"num\">$");
		html(&p, t.amount[0] == '-' ? t.amount + 1 : t.amount);
		raw(&p, "<br><span class=\"exact\">exact ");
		html(&p, t.exact);
		raw(&p, "</span></td></tr>\n");
	}
	meter_money_format_cents(inv->total, a, sizeof a);
	meter_money_format_exact(inv->total, e, sizeof e);
	raw(&p, "<tr class=\"total\"><td>Total</td><td></td><td></td><td class=\"num\" "
	        "id=\"total\">");
	raw(&p, inv->total < 0 ? "-$" : "$");
	html(&p, a[0] == '-' ? a + 1 : a);
	raw(&p, "<br><span class=\"exact\">exact ");
	html(&p, e);
	raw(&p, "</span></td></tr>\n</tbody>\n</table>\n<footer>Amounts are computed once per "
	        "line from exact quantities and rounded half up to the cent; the exact amount "
	        "is shown beside each. CPU is billed on measured use, at least the floor of the "
	        "plan and at most the provisioned vCPUs.</footer>\n</body>\n</html>\n");
	*p = '\0';
	return buf;
}
