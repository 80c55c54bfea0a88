/*
 * libFuzzer: the route matcher (api/route.c) over the real route table.
 * Oracle: a path it matches is the route's pattern with its {x} parts filled
 * in by the parameters it returns (slashes aside); and a path built from a
 * pattern with any non-empty parts in its {x} places is matched to that route
 * (or to an earlier one of the same shape), with exactly those parts.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/route.h"
#include "api/routes.h"
#include "common/ids.h"

/* The handlers the table names: never called here. */
#define STUB(h)                                                                                    \
	void h(struct req *r)                                                                      \
	{                                                                                          \
		(void)r;                                                                           \
	}
STUB(h_healthz)
STUB(h_readyz)
STUB(h_metrics)
STUB(h_openapi)
STUB(h_rates)
STUB(h_estimates)
STUB(h_plan_list)
STUB(h_plan_new)
STUB(h_account_new)
STUB(h_account_get)
STUB(h_account_patch)
STUB(h_sandbox_new)
STUB(h_sandbox_get)
STUB(h_sandbox_list)
STUB(h_sandbox_stop)
STUB(h_quota_check)
STUB(h_key_list)
STUB(h_key_new)
STUB(h_key_revoke)
STUB(h_webhook_list)
STUB(h_webhook_new)
STUB(h_webhook_delete)
STUB(h_webhook_deliveries)
STUB(h_webhook_redeliver)
STUB(h_usage)
STUB(h_trial)
STUB(h_invoice)
STUB(h_forecast)
STUB(h_sandbox_usage)
STUB(h_export)
STUB(h_dashboard_export)
STUB(h_login_page)
STUB(h_login)
STUB(h_login_link_page)
STUB(h_login_link)
STUB(h_logout)
STUB(h_dashboard)
STUB(h_dashboard_sandbox)

/* The path's parts without empty ones, joined by single slashes. */
static void normal(const char *path, char *out, size_t len)
{
	size_t o = 0;
	for (const char *p = path; *p && o + 2 < len;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		out[o++] = '/';
		while (*p && *p != '/' && o + 1 < len)
			out[o++] = *p++;
	}
	out[o] = '\0';
}

/* The pattern with its {x} parts replaced by param, in order. */
static void fill(const char *pattern, const char *const *param, char *out, size_t len)
{
	size_t o = 0;
	int k = 0;
	for (const char *p = pattern; *p && o + 1 < len;) {
		if (*p == '{') {
			const char *v = param[k++];
			while (*v && o + 1 < len)
				out[o++] = *v++;
			p = strchr(p, '}') + 1;
		} else {
			out[o++] = *p++;
		}
	}
	out[o] = '\0';
}

static void check(const char *method, const char *path)
{
	struct route_path p;
	const char *param[2] = {NULL, NULL};
	char allowed[256], want[1024], got[1024];
	if (!route_split(path, &p))
		return;
	int i = route_find(routes, routes_count, method, &p, param, allowed, sizeof allowed);
	if (i >= 0) {
		if (strcmp(routes[i].method, method) != 0)
			abort();
		normal(path, want, sizeof want);
		fill(routes[i].pattern, param, got, sizeof got);
		if (strcmp(want, got) != 0)
			abort();
	} else if (i == ROUTE_BAD_ID) {
		/* only a route with {id} refuses, and only for a part that is not an id */
		bool bad = false;
		for (int k = 0; k < p.n; k++)
			bad = bad || !id_valid(p.part[k]);
		if (!bad)
			abort();
	} else if (i != ROUTE_NONE) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	static const char *const methods[] = {"GET", "POST", "PATCH", "DELETE"};
	const char *method = methods[data[0] % 4];
	/* the rest as a path */
	char path[600];
	size_t n = size - 2 < sizeof path - 1 ? size - 2 : sizeof path - 1;
	memcpy(path, data + 2, n);
	path[n] = '\0';
	check(method, path);
	/* a path built from a pattern: {x} parts from the data, cut at slashes and NULs */
	const struct route *rt = &routes[data[1] % routes_count];
	char a[64] = "", b[64] = "";
	size_t half = n / 2;
	snprintf(a, sizeof a, "%.*s", (int)half, path);
	snprintf(b, sizeof b, "%s", path + half);
	a[strcspn(a, "/")] = b[strcspn(b, "/")] = '\0';
	if (a[0] == '\0' || b[0] == '\0')
		return 0;
	const char *param[2] = {a, b}, *got[2] = {NULL, NULL};
	char built[1024], allowed[256];
	fill(rt->pattern, param, built, sizeof built);
	struct route_path p;
	if (!route_split(built, &p))
		abort(); /* our own patterns always fit */
	int i = route_find(routes, routes_count, rt->method, &p, got, allowed, sizeof allowed);
	int want = (int)(rt - routes);
	if (i == ROUTE_BAD_ID && (!id_valid(a) || !id_valid(b)))
		return 0;
	if (i < 0 || i > want)
		abort();
	/* an earlier route of the same shape may take it (a fixed part equal to ours) */
	char again[1024];
	fill(routes[i].pattern, got, again, sizeof again);
	if (strcmp(again, built) != 0)
		abort();
	return 0;
}
