#include "api/metrics.h"

#include <stdatomic.h>
#include <stdio.h>

static const double bounds_ms[] = {0.5, 1, 2, 5, 10, 25, 50, 100, 250, 1000, 5000};
#define NB (sizeof bounds_ms / sizeof bounds_ms[0])

static atomic_ulong counts[METRICS_ROUTES][600];
static atomic_ulong buckets[METRICS_ROUTES][NB + 1];
static atomic_ullong sum_ns[METRICS_ROUTES];
static atomic_ulong cuts[CUT_N];

void metrics_connection_cut(enum metrics_cut why, unsigned n)
{
	if (why >= 0 && why < CUT_N)
		atomic_fetch_add(&cuts[why], n);
}

void metrics_request(int route, unsigned status, int64_t ns)
{
	if (route < 0 || route >= METRICS_ROUTES)
		route = METRICS_ROUTES - 1;
	if (status >= 600)
		status = 599;
	atomic_fetch_add(&counts[route][status], 1);
	size_t b = 0;
	while (b < NB && (double)ns / 1e6 > bounds_ms[b])
		b++;
	atomic_fetch_add(&buckets[route][b], 1);
	atomic_fetch_add(&sum_ns[route], (unsigned long long)(ns > 0 ? ns : 0));
}

#define PUT(...)                                                                                   \
	do {                                                                                       \
		int n_ = snprintf(buf + used, len > used ? len - used : 0, __VA_ARGS__);           \
		if (n_ > 0)                                                                        \
			used += (size_t)n_;                                                        \
	} while (0)

size_t metrics_render(char *buf, size_t len, const char *const *names, int nroutes)
{
	size_t used = 0;
	PUT("# HELP meter_http_requests_total HTTP requests by route and status.\n"
	    "# TYPE meter_http_requests_total counter\n");
	for (int r = 0; r < METRICS_ROUTES; r++)
		for (unsigned s = 100; s < 600; s++) {
			unsigned long c = atomic_load(&counts[r][s]);
			if (c)
				PUT("meter_http_requests_total{route=\"%s\",status=\"%u\"} %lu\n",
				    r < nroutes ? names[r] : "unmatched", s, c);
		}
	PUT("# HELP meter_http_request_duration_seconds Time from request to answer.\n"
	    "# TYPE meter_http_request_duration_seconds histogram\n");
	for (int r = 0; r < METRICS_ROUTES; r++) {
		unsigned long total = 0;
		for (size_t b = 0; b <= NB; b++)
			total += atomic_load(&buckets[r][b]);
		if (total == 0)
			continue;
		const char *name = r < nroutes ? names[r] : "unmatched";
		unsigned long cum = 0;
		for (size_t b = 0; b < NB; b++) {
			cum += atomic_load(&buckets[r][b]);
			PUT("meter_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} "
			    "%lu\n",
			    name, bounds_ms[b] / 1000, cum);
		}
		PUT("meter_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lu\n",
		    name, total);
		PUT("meter_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", name,
		    (double)atomic_load(&sum_ns[r]) / 1e9);
		PUT("meter_http_request_duration_seconds_count{route=\"%s\"} %lu\n", name, total);
	}
	PUT("# HELP meter_http_connections_cut_total Connections closed before they sent a whole "
	    "request: slow (the request timeout), shed (the connections were full).\n"
	    "# TYPE meter_http_connections_cut_total counter\n"
	    "meter_http_connections_cut_total{reason=\"slow\"} %lu\n"
	    "meter_http_connections_cut_total{reason=\"shed\"} %lu\n",
	    atomic_load(&cuts[CUT_SLOW]), atomic_load(&cuts[CUT_SHED]));
	return used < len ? used : len;
}
