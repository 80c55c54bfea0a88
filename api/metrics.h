/*
 * api/metrics.h: counters for /metrics (Prometheus text format).
 *
 * Requests by route and status, a latency histogram per route, database
 * errors (from the pool) and, read at scrape time, the rollup backlog.
 */
#ifndef API_METRICS_H
#define API_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_ROUTES 64 /* route indexes; the last one is "unmatched" */

void metrics_request(int route, unsigned status, int64_t ns);

/* Connections the server closed before they sent a whole request. */
enum metrics_cut {
	CUT_SLOW, /* no whole request within the request timeout */
	CUT_SHED, /* the connections were full: the busiest address gave one up */
	CUT_N
};
void metrics_connection_cut(enum metrics_cut why, unsigned n);

/* Appends the request metrics, in text format, to buf; returns the length used. */
size_t metrics_render(char *buf, size_t len, const char *const *route_names, int nroutes);

#endif
