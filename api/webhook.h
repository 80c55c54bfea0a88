/*
 * api/webhook.h: the webhook delivery worker (common/webhooks.h has the
 * endpoints and the signature; migrations/0026_webhooks.sql the outbox).
 *
 * Each meter-api process runs one worker thread with a database connection
 * of its own, LISTENing on "meter_webhooks" (sent when an event writes
 * deliveries) and looking for due deliveries at least once a second. It
 * takes up to max_inflight due deliveries at a time (FOR UPDATE SKIP LOCKED:
 * processes never take the same one), leases each for twice the attempt's
 * timeout and 5 s more by moving its next_at, and sends them at once with libcurl,
 * each signed as it is sent. Every attempt is recorded. A 2xx answer
 * delivers; anything else (no connection, a timeout, a redirect, another
 * status) is tried again after a back-off that grows from first_retry: with
 * the default 5 s the twelve attempts span 31.7 hours; after the twelfth the
 * delivery is failed (and can be sent again with the redelivery verb).
 * Delivery is at least once: a process that dies mid-send leaves the
 * delivery to be taken again when its lease ends, and a receiver that
 * answered but whose answer could not be recorded hears it again.
 */
#ifndef API_WEBHOOK_H
#define API_WEBHOOK_H

#include <stdint.h>

struct webhook_config {
	const char *db_url;     /* NULL: common/db.h's choice */
	int64_t timeout_us;     /* one attempt's longest wait */
	int64_t first_retry_us; /* the first back-off; the later ones are multiples of it */
	unsigned max_inflight;  /* attempts under way at once */
};

/* The back-off before attempt step + 1 after step failed ones; -1 after the last. */
int64_t webhook_backoff_us(const struct webhook_config *cfg, int step);

struct webhooks;

/* Starts the worker thread; NULL when it cannot. */
struct webhooks *webhooks_start(const struct webhook_config *cfg);

/*
 * Stops it: the attempts under way are abandoned, recorded as such and made
 * due again at once, without counting against their back-off. NULL-safe.
 */
void webhooks_stop(struct webhooks *w);

#endif
