/*
 * api/rollup.h: the rollup worker, turning samples into hourly usage.
 *
 * Each meter-api process runs one worker thread with a connection of its
 * own. It takes one marked sandbox at a time from rollup_queue (FOR UPDATE
 * SKIP LOCKED, so several processes share the work without overlap),
 * re-rates with the meter/ library every interval that ends after the hour
 * holding the mark's from_ts, replaces that sandbox's usage_hourly rows from
 * that hour on, keeps account_month in step, and removes the mark: one
 * transaction. A sandbox that is not registered is registered from its
 * cgroup's limits when the path named its account; otherwise its mark waits
 * (meter_samples_unattributed in /metrics) until it is registered.
 */
#ifndef API_ROLLUP_H
#define API_ROLLUP_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct rollup;

/* Starts the worker thread (url NULL: common/db.h's choice). */
struct rollup *rollup_start(const char *url, int idle_ms);
void rollup_stop(struct rollup *w);

/*
 * One pass: rates every marked sandbox it can take. Returns how many it
 * rated, or -1 with err when the database failed. For tests and the worker.
 */
int rollup_pass(PGconn *c, char *err, size_t errlen);

#endif
