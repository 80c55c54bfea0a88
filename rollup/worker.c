/*
 * rollup/worker.c: the worker thread and its passes.
 *
 * Each meter-api process runs one thread with a connection of its own
 * (connected again when lost): at its start and every hour the upkeep
 * (upkeep.c), and round after round a pass, then a pause of idle_ms. A pass
 * finds the trial crossings queued without new usage (crossing.c), takes
 * batches of marks until the queue is empty (take.c; a failed batch's marks
 * one at a time), then finds the crossings those batches moved.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"
#include "common/plans.h"
#include "rollup/internal.h"
#include "rollup/rollup.h"

/*
 * Marks taken in one transaction. Every statement of a batch serves all of
 * its sandboxes, so a sandbox costs a fraction of a round trip; a batch
 * whose statement fails is taken again one sandbox per transaction, where a
 * sandbox that cannot be stored is parked alone as before. 64, not 32: the
 * rollup of a tenth of a fleet's month rated 6 to 8 % more samples a second
 * (docs/benchmarks.md), and a batch still commits in about 35 ms.
 */
#define BATCH 64

int rollup_pass(PGconn *c, char *err, size_t errlen)
{
	int done = 0, rc, alone = 0;
	bool sharded;
	if (!ru_sharded(c, &sharded, err, errlen))
		return -1;
	/* Accounts whose crossing must be found again without new usage go first. Each
	 * transaction reads the price plans itself (ru_plans). */
	if (ru_trial_queue_pass(c, err, errlen) < 0)
		return -1;
	do {
		rc = ru_take(c, sharded, alone > 0 ? 1 : BATCH, err, errlen);
		if (rc == -2)
			alone = BATCH; /* the failed batch's marks, one per transaction */
		else if (rc > 0) {
			done += rc;
			alone -= alone > 0;
		}
	} while (rc > 0 || rc == -2);
	/* The crossings the batches moved, once per account. */
	if (rc == 0 && ru_trial_queue_pass(c, err, errlen) < 0)
		rc = -1;
	return rc < 0 ? -1 : done;
}

struct rollup {
	pthread_t thread;
	atomic_bool stop;
	char *url;
	int idle_ms;
	int64_t retention_us, grace_us;
};

static void *worker(void *arg)
{
	struct rollup *w = arg;
	PGconn *c = NULL;
	char err[512];
	bool warned = false;
	int64_t next_upkeep = 0; /* at the start, then every hour */
	while (!atomic_load(&w->stop)) {
		if (c == NULL || PQstatus(c) != CONNECTION_OK) {
			if (c)
				PQfinish(c);
			c = db_connect(w->url, err, sizeof err);
			if (c == NULL && !warned)
				log_warn("rollup: %s; retrying", err);
			warned = c == NULL;
		}
		if (c && clock_us(CLOCK_MONOTONIC) / 1000000 >= next_upkeep) {
			next_upkeep = clock_us(CLOCK_MONOTONIC) / 1000000 + 3600;
			if (!rollup_upkeep(c, w->retention_us, w->grace_us, err, sizeof err)) {
				log_warn("%s; tried again in a minute", err);
				next_upkeep = clock_us(CLOCK_MONOTONIC) / 1000000 + 60;
			}
		}
		if (c) {
			int n = rollup_pass(c, err, sizeof err);
			if (n < 0)
				log_warn("rollup: %s", err);
			else if (n > 0)
				log_debug("rollup: rated %d sandboxes", n);
		}
		struct timespec ts = {w->idle_ms / 1000, (long)(w->idle_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	if (c)
		PQfinish(c);
	return NULL;
}

struct rollup *rollup_start(const char *url, int idle_ms, int64_t raw_retention_us,
                            int64_t invoice_grace_us)
{
	struct rollup *w = calloc(1, sizeof *w);
	if (w == NULL)
		return NULL;
	w->url = url ? strdup(url) : NULL;
	w->idle_ms = idle_ms;
	w->retention_us = raw_retention_us;
	w->grace_us = invoice_grace_us;
	if (pthread_create(&w->thread, NULL, worker, w) != 0) {
		free(w->url);
		free(w);
		return NULL;
	}
	return w;
}

void rollup_stop(struct rollup *w)
{
	if (w == NULL)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	free(w->url);
	free(w);
}
