/*
 * meter-api: the HTTP API, the rollup worker and the webhook deliveries.
 *
 * Reads DATABASE_URL, and METER_READ_DATABASE_URL for a read replica
 * (api/replica.h). Requests are served by libmicrohttpd's thread pool
 * (epoll); each request takes a pooled database connection. A worker thread
 * rolls samples up into hourly usage; another sends webhooks
 * (api/webhook.h). SIGTERM or SIGINT stops them all cleanly.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/server.h"
#include "rollup/rollup.h"
#include "api/webhook.h"
#include "common/netallow.h"
#include "common/webhooks.h"
#include "common/invoicedb.h"
#include "common/log.h"
#include "common/opts.h"

enum {
	O_LISTEN,
	O_READ_URL,
	O_READ_LAG,
	O_GRACE,
	O_THREADS,
	O_SLOW_THREADS,
	O_POOL,
	O_CONNS,
	O_CONNS_IP,
	O_TIMEOUT,
	O_REQ_TIMEOUT,
	O_TLS_CERT,
	O_TLS_KEY,
	O_SECURE_COOKIES,
	O_ROLLUP,
	O_ROLLUP_MS,
	O_RETENTION,
	O_WEBHOOKS,
	O_WH_TIMEOUT,
	O_WH_RETRY,
	O_WH_INFLIGHT,
	O_WH_ALLOW,
	O_LOG,
	O_HELP,
	O_N
};

static const struct opt_def opts[O_N] = {
        [O_LISTEN] = {"listen", OPT_STRING, 0, 0, 0, "127.0.0.1:8080", "METER_LISTEN", false,
                      "HOST:PORT to serve HTTP on (IPv4)"},
        [O_READ_URL] = {"read-database-url", OPT_STRING, 0, 0, 0, "", "METER_READ_DATABASE_URL",
                        false,
                        "a streaming replica for usage, draft invoices, pages, forecasts and "
                        "exports (empty: the primary serves them)"},
        [O_READ_LAG] = {"read-max-lag", OPT_DURATION, 0, 0, INT64_C(86400000000), "10s",
                        "METER_READ_MAX_LAG", false,
                        "reads go to the primary while the replica is further behind"},
        [O_GRACE] = {"invoice-grace", OPT_DURATION, 0, 0, INT64_C(7776000000000),
                     INVOICE_GRACE_DEFAULT, "METER_INVOICE_GRACE", false,
                     "time after a month ends before its invoice is final"},
        [O_THREADS] = {"threads", OPT_DECIMAL, 0, 1, 256, "8", "METER_THREADS", false,
                       "request threads"},
        [O_SLOW_THREADS] = {"slow-threads", OPT_DECIMAL, 0, 0, 256, NULL, "METER_SLOW_THREADS",
                            false,
                            "threads for pages, invoices and exports (default: half the "
                            "cores, at least 1; at most db-pool - 1; 0: they run on request "
                            "threads)"},
        [O_POOL] = {"db-pool", OPT_DECIMAL, 0, 1, 256, "8", "METER_DB_POOL", false,
                    "database connections for requests"},
        [O_CONNS] = {"max-connections", OPT_DECIMAL, 0, 1, 100000, "1024", "METER_MAX_CONNECTIONS",
                     false, "open HTTP connections at most"},
        [O_CONNS_IP] = {"max-connections-per-ip", OPT_DECIMAL, 0, 0, 100000, "256",
                        "METER_MAX_CONNECTIONS_PER_IP", false,
                        "open HTTP connections from one address at most (0: no bound)"},
        [O_TIMEOUT] = {"idle-timeout", OPT_DECIMAL, 0, 1, 3600, "30", "METER_IDLE_TIMEOUT", false,
                       "seconds an answer under way may wait for its client to read any of it"},
        [O_REQ_TIMEOUT] = {"request-timeout", OPT_DECIMAL, 0, 1, 3600, "10",
                           "METER_REQUEST_TIMEOUT", false,
                           "seconds a client has to send a whole request (from connecting or "
                           "its previous answer); slower clients are cut off"},
        [O_TLS_CERT] = {"tls-cert", OPT_STRING, 0, 0, 0, "", "METER_TLS_CERT", false,
                        "serve HTTPS with this certificate (PEM; with --tls-key)"},
        [O_TLS_KEY] = {"tls-key", OPT_STRING, 0, 0, 0, "", "METER_TLS_KEY", false,
                       "the certificate's private key (PEM)"},
        [O_SECURE_COOKIES] = {"secure-cookies", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                              "mark the session cookie Secure (behind a proxy that serves "
                              "HTTPS; always so with --tls-cert)"},
        [O_ROLLUP] = {"no-rollup", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                      "do not run the rollup worker in this process"},
        [O_ROLLUP_MS] = {"rollup-idle", OPT_DURATION, 0, 10000, 60000000, "250ms",
                         "METER_ROLLUP_IDLE", false,
                         "pause of the rollup worker when nothing is queued"},
        [O_RETENTION] = {"raw-retention", OPT_DURATION, 0, 0, INT64_C(315360000000000), "35d",
                         "METER_RAW_RETENTION", false,
                         "raw sample partitions older than this are dropped once rolled up and "
                         "invoiced as final (0: never)"},
        [O_WEBHOOKS] = {"no-webhooks", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                        "do not send webhooks from this process"},
        [O_WH_TIMEOUT] = {"webhook-timeout", OPT_DURATION, 0, 100000, 300000000, "10s",
                          "METER_WEBHOOK_TIMEOUT", false,
                          "an endpoint that has not answered by then has failed this attempt"},
        [O_WH_RETRY] = {"webhook-first-retry", OPT_DURATION, 0, 10000, 3600000000, "5s",
                        "METER_WEBHOOK_FIRST_RETRY", false,
                        "the first back-off after a failed attempt; later ones grow from it "
                        "(5s: twelve attempts over 31.7 hours)"},
        [O_WH_INFLIGHT] = {"webhook-concurrency", OPT_DECIMAL, 0, 1, 64, "16",
                           "METER_WEBHOOK_CONCURRENCY", false,
                           "webhook attempts under way at once in this process"},
        [O_WH_ALLOW] = {"webhook-allow", OPT_STRING, 0, 0, 0, "", "METER_WEBHOOK_ALLOW", false,
                        "CIDRs (comma-separated) of loopback, private or link-local addresses "
                        "webhooks may reach; none by default"},
        [O_LOG] = {"log-level", OPT_STRING, 0, 0, 0, "info", "METER_LOG_LEVEL", false,
                   "error, warn, info or debug"},
        [O_HELP] = {"help", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "this text"},
};

/*
 * Half the cores the process may run on, at least one: the slow lane's work
 * (and the database's for it) then leaves cores to the quota checks however
 * many dashboards load at once.
 */
static unsigned slow_threads_default(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n >= 4 ? (unsigned)(n / 2) : 1;
}

int main(int argc, char **argv)
{
	struct opt_val v[O_N];
	char err[1024];
	int rc = opts_daemon("meter-api",
	                     "usage: meter-api [--listen HOST:PORT] [options]\n"
	                     "the meter HTTP API and rollup worker (DATABASE_URL)",
	                     opts, O_N, O_LOG, argc, argv, v);
	if (rc)
		return rc;
	/* A database that does not answer must not hold request threads for long. */
	setenv("PGCONNECT_TIMEOUT", "3", 0);

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	/* Blocked before any thread starts, so every thread inherits it. */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct net_allow allow;
	if (!net_allow_parse(v[O_WH_ALLOW].str, &allow, err, sizeof err)) {
		log_error("%s", err);
		return 2;
	}
	webhook_allow_set(&allow); /* before any thread checks or sends a webhook */
	struct server_config cfg = {
	        .listen = v[O_LISTEN].str,
	        .db_url = NULL,
	        .read_db_url = v[O_READ_URL].str,
	        .read_max_lag_us = v[O_READ_LAG].num,
	        .threads = (unsigned)v[O_THREADS].num,
	        .slow_threads = v[O_SLOW_THREADS].set ? (unsigned)v[O_SLOW_THREADS].num
	                                              : slow_threads_default(),
	        .pool_size = (unsigned)v[O_POOL].num,
	        .conn_limit = (unsigned)v[O_CONNS].num,
	        .conn_limit_per_ip = (unsigned)v[O_CONNS_IP].num,
	        .timeout_s = (unsigned)v[O_TIMEOUT].num,
	        .request_timeout_s = (unsigned)v[O_REQ_TIMEOUT].num,
	        .invoice_grace_us = v[O_GRACE].num,
	        .tls_cert = v[O_TLS_CERT].str,
	        .tls_key = v[O_TLS_KEY].str,
	        .secure_cookies = v[O_SECURE_COOKIES].set,
	};
	struct server *s = server_start(&cfg, err, sizeof err);
	if (s == NULL) {
		log_error("%s", err);
		return 2;
	}
	struct rollup *w = NULL;
	if (!v[O_ROLLUP].set) {
		w = rollup_start(NULL, (int)(v[O_ROLLUP_MS].num / 1000), v[O_RETENTION].num,
		                 v[O_GRACE].num);
		if (w == NULL) {
			log_error("could not start the rollup worker");
			server_stop(s);
			return 1;
		}
	}
	struct webhooks *hooks = NULL;
	if (!v[O_WEBHOOKS].set) {
		struct webhook_config wc = {.timeout_us = v[O_WH_TIMEOUT].num,
		                            .first_retry_us = v[O_WH_RETRY].num,
		                            .max_inflight = (unsigned)v[O_WH_INFLIGHT].num};
		hooks = webhooks_start(&wc);
		if (hooks == NULL) {
			log_error("could not start the webhook worker");
			rollup_stop(w);
			server_stop(s);
			return 1;
		}
	}
	log_info("listening on http://%s (%u threads, %u database connections%s%s%s)", cfg.listen,
	         cfg.threads, cfg.pool_size, cfg.read_db_url[0] ? ", reads from a replica" : "",
	         w ? ", rollup worker on" : "", hooks ? ", webhooks on" : "");
	int sig = 0;
	sigwait(&mask, &sig);
	log_info("signal %d: stopping", sig);
	server_stop(s);
	webhooks_stop(hooks);
	rollup_stop(w);
	return 0;
}
