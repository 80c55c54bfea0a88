/*
 * api/page.h: a page for people being written (the dashboard, the login
 * pages).
 *
 * HTML with inline CSS: no script and no file from outside the service. A
 * page grows as it is written; page_finish answers it, or 500 when memory ran
 * out on the way. Text from outside (names, ids) goes through page_esc.
 */
#ifndef API_PAGE_H
#define API_PAGE_H

#include <stdbool.h>
#include <stddef.h>

#include "api/request.h"
#include "meter/money.h"

/* Starts as {0}; buf is the page's, freed by page_finish (or by the caller if never finished). */
struct page {
	char *buf;
	size_t len, cap;
	bool oom;
};

void page_put(struct page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Text from outside (names, ids): escaped. */
void page_esc(struct page *p, const char *s);

/* The document's head (title, style) and the opening of its main part. */
void page_head(struct page *p, const char *title);

/* Closes the page and answers it with status (500 when memory ran out); frees its buffer. */
void page_finish(struct req *r, struct page *p, unsigned status);

/* An amount in dollars and cents, the exact amount on hover. */
void page_money(struct page *p, meter_money m);

#endif
