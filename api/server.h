/*
 * api/server.h: the HTTP server (libmicrohttpd, epoll, a thread pool).
 *
 * Listens (HTTP, or HTTPS with a certificate and key), reads each request
 * into its struct req (api/request.h) within bounds, matches it to the route
 * table (api/routes.c), authenticates it (api/auth.h) and runs its handler:
 * on a request thread, or on the slow lane's threads for the routes marked
 * slow. A watchdog cuts connections that do not send a whole request in
 * time. Each request is freed in one completion callback, which gives its
 * database connections back.
 */
#ifndef API_SERVER_H
#define API_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server_config {
	const char *listen;         /* HOST:PORT */
	const char *db_url;         /* NULL: common/db.h's choice */
	const char *read_db_url;    /* a read replica (api/replica.h), or NULL */
	int64_t read_max_lag_us;    /* reads leave a replica further behind than this */
	unsigned threads;           /* request threads */
	unsigned slow_threads;      /* the slow lane's threads (route.h's slow routes) */
	unsigned pool_size;         /* database connections */
	unsigned conn_limit;        /* open HTTP connections */
	unsigned conn_limit_per_ip; /* of them from one address (0: no bound) */
	unsigned timeout_s;         /* idle connection timeout */
	unsigned request_timeout_s; /* a whole request must arrive within it */
	int64_t invoice_grace_us;   /* after a month ends, before its invoice is final */
	const char *tls_cert;       /* PEM files: HTTPS when both are set ("" or NULL: HTTP) */
	const char *tls_key;
	bool secure_cookies; /* the session cookie is Secure (always so over HTTPS) */
};

struct server;
struct pool;
struct replica;

/* Starts the server; NULL with err. Routes are api/routes.c's table. */
struct server *server_start(const struct server_config *cfg, char *err, size_t errlen);
void server_stop(struct server *s);
struct pool *server_pool(struct server *s);
struct replica *server_replica(struct server *s); /* NULL when there is none */
int64_t server_invoice_grace(struct server *s);
bool server_secure_cookies(struct server *s);

#endif
