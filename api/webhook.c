#include "api/webhook.h"

#include <curl/curl.h>
#include <sys/socket.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/db.h"
#include "common/log.h"
#include "common/netallow.h"
#include "common/webhooks.h"
#include "meter/decimal.h"

/* Back-offs as multiples of the first: 5 s, 30 s, 2 min, 10 min, 30 min, 1 h, 2 h, 4 h, 8 h x 3. */
static const int64_t backoff_steps[] = {1, 6, 24, 120, 360, 720, 1440, 2880, 5760, 5760, 5760};
#define STEPS ((int)(sizeof backoff_steps / sizeof backoff_steps[0]))

#define INFLIGHT_MAX 64

int64_t webhook_backoff_us(const struct webhook_config *cfg, int step)
{
	if (step < 1 || step > STEPS)
		return -1;
	return backoff_steps[step - 1] * cfg->first_retry_us;
}

/* One attempt under way. */
struct flight {
	CURL *h;
	struct curl_slist *headers;
	char account[160], id[64];
	char attempt[16]; /* its number, as text */
	int step;
	int64_t start_ns;
	char error[CURL_ERROR_SIZE];
	const char *blocked; /* the kind of address the connection was refused for, or NULL */
};

struct webhooks {
	struct webhook_config cfg;
	char *url;
	pthread_t thread;
	atomic_bool stop;
	CURLM *multi;
	PGconn *c;
	struct flight *fl[INFLIGHT_MAX]; /* each its own allocation: curl keeps pointers into it */
	unsigned n;
};

/*
 * Opens the socket of a connection curl is about to make, to an address DNS
 * gave: refused (and said) when webhooks may not reach it (common/netallow.h),
 * whatever the URL spelled.
 */
static curl_socket_t open_socket(void *cls, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct flight *f = cls;
	(void)purpose;
	f->blocked = net_forbidden_sa(&a->addr, webhook_allow());
	if (f->blocked)
		return CURL_SOCKET_BAD;
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/*
 * A failed attempt's error as a short class: what the operator and the
 * account need, never the transport's own text (which told a closed port from
 * a database from a TLS server: a scanner's answer).
 */
static const char *error_class(const struct flight *f, CURLcode rc)
{
	if (f->blocked)
		return NULL; /* said with its kind by the caller */
	switch (rc) {
	case CURLE_OPERATION_TIMEDOUT:
		return "timeout: no answer within --webhook-timeout";
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return "dns: the host's name did not resolve";
	case CURLE_COULDNT_CONNECT:
		return "refused: no connection could be made";
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_USE_SSL_FAILED:
		return "tls: the TLS handshake or the certificate failed";
	default:
		return "connection: it broke before an HTTP answer";
	}
}

static size_t discard(char *p, size_t size, size_t n, void *cls)
{
	(void)p;
	(void)cls;
	return size * n;
}

/* Connects and listens; false (the connection closed) when it cannot. */
static bool connect_db(struct webhooks *w, bool *warned)
{
	char err[512];
	if (w->c && PQstatus(w->c) == CONNECTION_OK)
		return true;
	PQfinish(w->c);
	w->c = db_connect(w->url, err, sizeof err);
	if (w->c && !db_exec(w->c, "LISTEN meter_webhooks", err, sizeof err)) {
		PQfinish(w->c);
		w->c = NULL;
	}
	if (w->c == NULL && !*warned)
		log_warn("webhooks: %s; retrying", err);
	*warned = w->c == NULL;
	return w->c != NULL;
}

/*
 * Records how attempt f ended: state ("delivered", "pending" or "failed"),
 * due again after delay_us, step_back 1 when the attempt is not to count
 * against the back-off. A delivery taken again meanwhile (its lease ended)
 * keeps what the newer attempt makes of it, unless this one delivered.
 */
static void record(struct webhooks *w, struct flight *f, long status, const char *error,
                   const char *state, int64_t delay_us, int step_back)
{
	char st[16], ms[24], delay[24], back[8], err[512];
	snprintf(st, sizeof st, "%ld", status);
	snprintf(ms, sizeof ms, "%lld",
	         (long long)((clock_ns(CLOCK_MONOTONIC) - f->start_ns) / 1000000));
	snprintf(delay, sizeof delay, "%lld", (long long)delay_us);
	snprintf(back, sizeof back, "%d", step_back);
	const char *p[] = {f->id, f->attempt, status ? st : NULL, error, ms, state,
	                   delay, back,       f->account};
	PGresult *r =
	        w->c ? db_query(w->c,
	                        "WITH a AS (INSERT INTO webhook_attempts (account_id, "
	                        "delivery_id, n, status, error, duration_ms) "
	                        "SELECT $9::text, $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM "
	                        "webhook_deliveries WHERE account_id = $9::text AND id = $1) "
	                        "ON CONFLICT DO NOTHING) "
	                        "UPDATE webhook_deliveries SET state = $6, next_at = now() + "
	                        "$7 * interval '1 microsecond', step = step - $8 "
	                        "WHERE account_id = $9::text AND id = $1 "
	                        "AND (attempts = $2 OR $6 = 'delivered')",
	                        9, p, PGRES_COMMAND_OK, "could not record the attempt", err,
	                        sizeof err)
	             : NULL;
	if (r == NULL)
		log_warn("webhooks: delivery %s, attempt %s: %s; it is sent again when its lease "
		         "ends",
		         f->id, f->attempt, w->c ? err : "no database connection");
	PQclear(r);
}

/* Ends flight f: out of the multi handle, freed. */
static void drop(struct webhooks *w, unsigned i)
{
	struct flight *f = w->fl[i];
	curl_multi_remove_handle(w->multi, f->h);
	curl_easy_cleanup(f->h);
	curl_slist_free_all(f->headers);
	free(f);
	w->fl[i] = w->fl[--w->n];
}

static void finish(struct webhooks *w, unsigned i, CURLcode rc)
{
	struct flight *f = w->fl[i];
	long status = 0;
	char why[CURL_ERROR_SIZE + 64];
	if (rc == CURLE_OK)
		curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &status);
	bool ok = rc == CURLE_OK && status >= 200 && status <= 299;
	if (ok) {
		record(w, f, status, NULL, "delivered", 0, 0);
		log_debug("webhooks: delivered %s (attempt %s, HTTP %ld)", f->id, f->attempt,
		          status);
	} else {
		if (rc != CURLE_OK && f->blocked)
			snprintf(why, sizeof why,
			         "blocked: its address is %s, which webhooks may not reach "
			         "(--webhook-allow)",
			         f->blocked);
		else if (rc != CURLE_OK)
			snprintf(why, sizeof why, "%s", error_class(f, rc));
		else if (status >= 300 && status <= 399)
			snprintf(why, sizeof why, "HTTP %ld: redirects are not followed", status);
		else
			snprintf(why, sizeof why, "HTTP %ld", status);
		int64_t delay = webhook_backoff_us(&w->cfg, f->step);
		record(w, f, status, why, delay < 0 ? "failed" : "pending", delay < 0 ? 0 : delay,
		       0);
		/* the operator's log has the transport's own words too */
		const char *detail = rc != CURLE_OK && !f->blocked
		                             ? (f->error[0] ? f->error : curl_easy_strerror(rc))
		                             : "";
		if (delay < 0)
			log_warn("webhooks: delivery %s failed after attempt %s: %s%s%s%s", f->id,
			         f->attempt, why, detail[0] ? " (" : "", detail,
			         detail[0] ? ")" : "");
		else
			log_info("webhooks: delivery %s, attempt %s: %s%s%s%s; next in %lld s",
			         f->id, f->attempt, why, detail[0] ? " (" : "", detail,
			         detail[0] ? ")" : "", (long long)(delay / 1000000));
	}
	drop(w, i);
}

/* Starts the attempt of row i of r (id, attempts, step, body, url, secret, account). */
static bool launch(struct webhooks *w, const PGresult *r, int i)
{
	struct flight *f = calloc(1, sizeof *f);
	if (f == NULL)
		return false;
	snprintf(f->id, sizeof f->id, "%s", PQgetvalue(r, i, 0));
	snprintf(f->account, sizeof f->account, "%s", PQgetvalue(r, i, 6));
	snprintf(f->attempt, sizeof f->attempt, "%s", PQgetvalue(r, i, 1));
	int64_t step = 0;
	(void)meter_decimal_parse(PQgetvalue(r, i, 2), 0, false, &step);
	f->step = (int)step;
	const char *body = PQgetvalue(r, i, 3);
	size_t blen = (size_t)PQgetlength(r, i, 3);
	int64_t now = (int64_t)time(NULL);
	char sig[WEBHOOK_SIG_BUF], h[3][128];
	if (!webhook_sign(PQgetvalue(r, i, 5), f->id, now, body, blen, sig)) {
		log_error("webhooks: delivery %s: its endpoint's secret does not decode", f->id);
		free(f);
		return false;
	}
	snprintf(h[0], sizeof h[0], "webhook-id: %s", f->id);
	snprintf(h[1], sizeof h[1], "webhook-timestamp: %lld", (long long)now);
	snprintf(h[2], sizeof h[2], "webhook-signature: %s", sig);
	const char *all[] = {"content-type: application/json", h[0], h[1], h[2], "Expect:"};
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
		struct curl_slist *n = curl_slist_append(f->headers, all[k]);
		if (n == NULL)
			goto fail;
		f->headers = n;
	}
	f->h = curl_easy_init();
	if (f->h == NULL)
		goto fail;
	curl_easy_setopt(f->h, CURLOPT_URL, PQgetvalue(r, i, 4));
	curl_easy_setopt(f->h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(f->h, CURLOPT_HTTPHEADER, f->headers);
	curl_easy_setopt(f->h, CURLOPT_POSTFIELDSIZE, (long)blen);
	curl_easy_setopt(f->h, CURLOPT_COPYPOSTFIELDS, body);
	curl_easy_setopt(f->h, CURLOPT_USERAGENT, "meter-webhooks/1");
	curl_easy_setopt(f->h, CURLOPT_TIMEOUT_MS, (long)(w->cfg.timeout_us / 1000));
	curl_easy_setopt(f->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(f->h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(f->h, CURLOPT_ERRORBUFFER, f->error);
	curl_easy_setopt(f->h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	curl_easy_setopt(f->h, CURLOPT_OPENSOCKETDATA, f);
	f->start_ns = clock_ns(CLOCK_MONOTONIC);
	if (curl_multi_add_handle(w->multi, f->h) != CURLM_OK)
		goto fail;
	w->fl[w->n++] = f;
	return true;
fail:
	curl_easy_cleanup(f->h);
	curl_slist_free_all(f->headers);
	free(f);
	return false;
}

/* Takes up to room due deliveries and starts them; how many were due (-1: failure). */
static int claim(struct webhooks *w, unsigned room)
{
	char lim[16], lease[24], err[512];
	snprintf(lim, sizeof lim, "%u", room);
	snprintf(lease, sizeof lease, "%lld", (long long)(2 * w->cfg.timeout_us + 5000000));
	const char *p[] = {lim, lease};
	PGresult *r =
	        db_query(w->c,
	                 /* a read, then each leased by its key
	                    (migrations/functions/meter_webhook_claim.sql), as Citus needs */
	                 "SELECT id, attempts, step, body, url, secret, account_id "
	                 "FROM meter_webhook_claim($1, $2 * interval '1 microsecond')",
	                 2, p, PGRES_TUPLES_OK, "could not take due deliveries", err, sizeof err);
	if (r == NULL) {
		log_warn("webhooks: %s", err);
		return -1;
	}
	int n = PQntuples(r);
	for (int i = 0; i < n; i++)
		if (!launch(w, r, i))
			log_warn("webhooks: could not start delivery %s; it is sent again when its "
			         "lease ends",
			         PQgetvalue(r, i, 0));
	PQclear(r);
	return n;
}

static void *worker(void *arg)
{
	struct webhooks *w = arg;
	bool warned = false, wanted = true;
	int64_t next_look = 0;
	while (!atomic_load(&w->stop)) {
		bool up = connect_db(w, &warned);
		unsigned room = w->cfg.max_inflight - w->n;
		if (up && room > 0 && (wanted || clock_ns(CLOCK_MONOTONIC) >= next_look)) {
			int got = claim(w, room);
			wanted = got == (int)room; /* more may be due */
			next_look = clock_ns(CLOCK_MONOTONIC) + 1000000000;
		}
		int running = 0;
		curl_multi_perform(w->multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(w->multi, &left)) != NULL) {
			if (m->msg != CURLMSG_DONE)
				continue;
			for (unsigned i = 0; i < w->n; i++)
				if (w->fl[i]->h == m->easy_handle) {
					finish(w, i, m->data.result);
					wanted = true; /* room again */
					break;
				}
		}
		struct curl_waitfd db = {.fd = up ? PQsocket(w->c) : -1,
		                         .events = CURL_WAIT_POLLIN};
		int fds = 0;
		bool now = up && wanted && w->n < w->cfg.max_inflight;
		curl_multi_poll(w->multi, db.fd >= 0 ? &db : NULL, db.fd >= 0 ? 1 : 0,
		                now ? 0 : 1000, &fds);
		if (up) {
			if (!PQconsumeInput(w->c))
				continue; /* the connection is gone: connect_db makes a new one */
			PGnotify *note;
			while ((note = PQnotifies(w->c)) != NULL) {
				wanted = true;
				PQfreemem(note);
			}
		}
	}
	/* Abandoned attempts are due again at once and do not count. */
	while (w->n > 0) {
		record(w, w->fl[w->n - 1], 0, "meter-api stopped before the answer came", "pending",
		       0, 1);
		drop(w, w->n - 1);
	}
	PQfinish(w->c);
	w->c = NULL;
	return NULL;
}

struct webhooks *webhooks_start(const struct webhook_config *cfg)
{
	struct webhooks *w = calloc(1, sizeof *w);
	if (w == NULL || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		free(w);
		return NULL;
	}
	w->cfg = *cfg;
	if (w->cfg.max_inflight < 1 || w->cfg.max_inflight > INFLIGHT_MAX)
		w->cfg.max_inflight = w->cfg.max_inflight < 1 ? 1 : INFLIGHT_MAX;
	w->url = cfg->db_url ? strdup(cfg->db_url) : NULL;
	w->multi = curl_multi_init();
	if (w->multi == NULL || (cfg->db_url && w->url == NULL) ||
	    pthread_create(&w->thread, NULL, worker, w) != 0) {
		curl_multi_cleanup(w->multi);
		free(w->url);
		free(w);
		return NULL;
	}
	return w;
}

void webhooks_stop(struct webhooks *w)
{
	if (w == NULL)
		return;
	atomic_store(&w->stop, true);
	curl_multi_wakeup(w->multi);
	pthread_join(w->thread, NULL);
	curl_multi_cleanup(w->multi);
	curl_global_cleanup();
	free(w->url);
	free(w);
}
