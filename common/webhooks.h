/*
 * common/webhooks.h: webhook endpoints, their deliveries, and the Standard
 * Webhooks signature (migrations/0026_webhooks.sql).
 *
 * An endpoint is a URL with the events it wants, for one account or all. Its
 * secret is "whsec_" followed by the base64 of 32 bytes from the kernel's
 * random source; it is shown once, when the endpoint is made. Each message
 * is sent with the headers webhook-id (the delivery's id), webhook-timestamp
 * (seconds since the epoch, when sent) and webhook-signature ("v1," and the
 * base64 of HMAC-SHA256 of "id.timestamp.body", keyed with the secret's
 * decoded bytes). meter-api's worker (api/webhook.h) sends them.
 */
#ifndef COMMON_WEBHOOKS_H
#define COMMON_WEBHOOKS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define WEBHOOK_SECRET_PREFIX "whsec_"
#define WEBHOOK_SECRET_LEN    50 /* "whsec_" + base64 of 32 bytes (44) */
#define WEBHOOK_SIG_BUF       64 /* "v1," + base64 of 32 bytes + NUL */
#define WEBHOOK_URL_MAX       2048

/* The events, as bits of a set; webhook_event_names[i] names bit i. */
enum {
	WEBHOOK_TRIAL_EXHAUSTED = 1 << 0,
	WEBHOOK_CONCURRENCY_REACHED = 1 << 1,
	WEBHOOK_SPEND_CAP_REACHED = 1 << 2,
	WEBHOOK_INVOICE_FINALIZED = 1 << 3,
};
#define WEBHOOK_EVENTS 4
extern const char *const webhook_event_names[WEBHOOK_EVENTS];

/* The bit of the event called name, or 0 when there is no such event. */
unsigned webhook_event_bit(const char *name);

/*
 * Why url cannot be an endpoint's ("" when it can): http or https, a host,
 * at most WEBHOOK_URL_MAX bytes, no spaces, control bytes or fragment, no
 * credentials (user:pass@, which would be sent and shown), and no host
 * written as an address a webhook may not reach (common/netallow.h). The
 * text is static, or the calling thread's until its next call.
 */
const char *webhook_url_problem(const char *url);

/* The addresses webhooks may reach beyond the public ones (meter-api sets it
 * once, from --webhook-allow, before any thread sends or checks one). */
struct net_allow;
void webhook_allow_set(const struct net_allow *a);
const struct net_allow *webhook_allow(void);

/*
 * Writes "v1,<base64 HMAC-SHA256>" of id "." timestamp "." body into out
 * (WEBHOOK_SIG_BUF bytes), keyed with secret ("whsec_..." or its base64
 * part alone). False when the secret does not decode.
 */
bool webhook_sign(const char *secret, const char *id, int64_t timestamp, const char *body,
                  size_t body_len, char out[WEBHOOK_SIG_BUF]);

/*
 * Makes an endpoint for url and the events in the set events, for account
 * (NULL: all accounts). Writes its id and secret (WEBHOOK_SECRET_LEN + 1
 * bytes); *no_account when account does not exist (false is returned, err
 * says so). Nothing is stored on failure.
 */
bool webhook_create(PGconn *c, const char *url, unsigned events, const char *account, int64_t *id,
                    char secret[WEBHOOK_SECRET_LEN + 1], bool *no_account, char *err,
                    size_t errlen);

/*
 * The endpoints as JSON objects (id, url, events, account_id, created_at,
 * and the counts of pending and failed deliveries), oldest first; never a
 * secret. Only endpoint id when id > 0 (an empty array when there is none).
 * NULL with err on failure; the caller deletes the array.
 */
struct cJSON *webhook_list(PGconn *c, int64_t id, char *err, size_t errlen);

/* Removes endpoint id and its deliveries; *found is false when there is none. */
bool webhook_delete(PGconn *c, int64_t id, bool *found, char *err, size_t errlen);

/*
 * The newest limit deliveries of endpoint id, newest first, each with its
 * attempts, as a JSON array; *found is false when there is no such
 * endpoint. NULL with err on failure; the caller deletes the array.
 */
struct cJSON *webhook_deliveries(PGconn *c, int64_t id, int limit, const char *delivery,
                                 bool *found, char *err, size_t errlen);

/*
 * Sends delivery again: it is due now and its back-off starts over, whatever
 * its state. *found is false when endpoint id has no such delivery.
 */
bool webhook_redeliver(PGconn *c, int64_t id, const char *delivery, bool *found, char *err,
                       size_t errlen);

#endif
