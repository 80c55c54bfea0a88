#include "api/page.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/reply.h"

static void grow(struct page *p, size_t need)
{
	if (p->oom || p->len + need + 1 <= p->cap)
		return;
	size_t cap = p->cap ? p->cap : 16384;
	while (cap < p->len + need + 1)
		cap *= 2;
	char *nb = realloc(p->buf, cap);
	if (nb == NULL) {
		p->oom = true;
		return;
	}
	p->buf = nb;
	p->cap = cap;
}

void page_put(struct page *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	grow(p, (size_t)n);
	if (p->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
	va_end(ap);
	p->len += (size_t)n;
}

void page_esc(struct page *p, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&':
			page_put(p, "&amp;");
			break;
		case '<':
			page_put(p, "&lt;");
			break;
		case '>':
			page_put(p, "&gt;");
			break;
		case '"':
			page_put(p, "&quot;");
			break;
		case '\'':
			page_put(p, "&#39;");
			break;
		default:
			page_put(p, "%c", *s);
		}
	}
}

static const char style[] =
        "<style>body{font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;"
        "color:#1d2430;background:#f6f7f9;margin:0}main{max-width:1000px;margin:0 auto;"
        "padding:28px 24px}header{display:flex;justify-content:space-between;align-items:baseline}"
        "h1{font-size:24px;margin:0}h2{font-size:15px;margin:0 0 10px;color:#42536b}"
        ".asof{color:#5b6574;font-size:13px}.cards{display:grid;grid-template-columns:repeat(3,1fr)"
        ";"
        "gap:14px;margin:20px 0}.card{background:#fff;border:1px solid #e3e7ed;border-radius:10px;"
        "padding:16px}.big{font-size:28px;font-weight:700}.muted{color:#5b6574;font-size:12px}"
        ".gauge{height:10px;background:#e9edf2;border-radius:5px;overflow:hidden;margin-top:8px}"
        ".gauge div{height:100%;background:#3b82f6}.gauge.warn div{background:#e0892b}"
        "section{background:#fff;border:1px solid #e3e7ed;border-radius:10px;padding:16px;"
        "margin-bottom:14px}table{width:100%;border-collapse:collapse}td,th{padding:7px 6px;"
        "border-bottom:1px solid #eceff3;text-align:left}th{font-size:12px;color:#5b6574;"
        "text-transform:uppercase}.num{text-align:right;font-variant-numeric:tabular-nums}"
        "svg text{font-size:10px;fill:#5b6574}.cpu{fill:#3b82f6}.mem{fill:#a5b4fc}"
        ".busy{fill:#16a34a}.idle{fill:#cbd5e1}.key span{display:inline-block;width:10px;"
        "height:10px;margin:0 4px 0 12px;border-radius:2px}form.inline{display:inline}"
        "button{font:inherit;padding:6px 12px;border-radius:6px;border:1px solid #c8d0da;"
        "background:#fff;cursor:pointer}input{font:inherit;padding:7px;width:100%;"
        "box-sizing:border-box;border:1px solid #c8d0da;border-radius:6px;margin:6px 0 12px}"
        "a{color:#2563eb;text-decoration:none}</style>";

void page_head(struct page *p, const char *title)
{
	page_put(p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	            "<meta name=\"viewport\" content=\"width=device-width\"><title>");
	page_esc(p, title);
	page_put(p, " &middot; meter</title>%s</head><body><main>", style);
}

void page_finish(struct req *r, struct page *p, unsigned status)
{
	page_put(p, "</main></body></html>\n");
	if (p->oom)
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
	else
		reply_text(r, status, "text/html; charset=utf-8", p->buf, p->len);
	free(p->buf);
	p->buf = NULL;
}

void page_money(struct page *p, meter_money m)
{
	char c[METER_MONEY_BUF], e[METER_MONEY_BUF];
	meter_money_format_cents(m, c, sizeof c);
	meter_money_format_exact(m, e, sizeof e);
	page_put(p, "<span title=\"exact %s\">%s$%s</span>", e, m < 0 ? "-" : "",
	         c[0] == '-' ? c + 1 : c);
}
