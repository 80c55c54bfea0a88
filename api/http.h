/*
 * api/http.h: the HTTP server (libmicrohttpd, epoll, a thread pool).
 *
 * One struct req per request holds everything the request allocates: its
 * body, its database connection, its answer; it is freed in one completion
 * callback. Handlers read r->args, r->path and r->body, take a database
 * connection with req_db(), and answer once with reply_json(),
 * reply_text() or reply_problem().
 */
#ifndef API_HTTP_H
#define API_HTTP_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/input.h"
#include "api/pool.h"
#include "api/route.h"
#include "common/keys.h"

#define REQ_BODY_MAX (64 * 1024)
#define REQ_ARGS_MAX 16

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

struct req {
	struct server *srv;
	const struct route *route;
	int route_index;
	char method[16];
	char path[512];
	struct route_path parts; /* the path's parts */
	const char *param[2];    /* the {x} parts of the route, in order */
	struct in_arg args[REQ_ARGS_MAX];
	size_t nargs;
	bool too_many_args;
	char *body;
	size_t body_len;
	bool too_large;
	size_t seen; /* body bytes received, kept or not */
	char auth_header[256];
	char key[KEY_LEN + 1]; /* the bearer key, once authentication read it */
	char session[80];      /* the meter_session cookie, when sent */
	char origin[256];      /* the Origin header ("" when not sent; "-" when too long) */
	char host[256];        /* the Host header */
	bool admin;            /* set by authentication */
	char account[160];     /* an account key's account */
	PGconn *db;
	PGconn *rdb; /* a replica connection (req_read_db), when one serves this request */
	int64_t start_ns;
	unsigned status;
	bool answered;
	void *mhd_conn; /* the struct MHD_Connection */
	bool streaming; /* reply_stream: its connections stay until the answer is over */
	/* on the slow lane: its answer waits in pending until its connection resumes */
	bool in_lane;
	void *pending; /* the struct MHD_Response */
	unsigned pending_status;
	struct req *lane_next;
};

/* Starts the server; NULL with err. Routes are api/routes.c's table. */
struct server *server_start(const struct server_config *cfg, char *err, size_t errlen);
void server_stop(struct server *s);
struct pool *server_pool(struct server *s);
struct replica *server_replica(struct server *s); /* NULL when there is none */
int64_t server_invoice_grace(struct server *s);
bool server_secure_cookies(struct server *s);

/* A database connection for this request (kept until it completes); NULL after answering 503. */
PGconn *req_db(struct req *r);

/*
 * A connection for reads that may lag a little (usage, draft invoices, pages,
 * forecasts, exports): the read replica's while it is usable, else req_db().
 * Never for writes, nor for what must see committed state (api/replica.h).
 */
PGconn *req_read_db(struct req *r);

/*
 * True when a public route's request carries a valid admin key, checked on the
 * database connection it holds already (false without one); never answers.
 */
bool req_is_admin(struct req *r);

/*
 * For AUTH_ANY_IN_HANDLER routes. req_key: the request's API key (its
 * Authorization header was checked to hold one before the handler ran).
 * req_key_checked: the result of the key's lookup (Q_AUTH, run by the handler
 * on req_db's connection): true when the key is live (the request then knows
 * its account, as after AUTH_ANY); otherwise answers 401 or the database's
 * error and returns false. req_authenticate: the lookup on its own, for a
 * handler that answers before its statement (a malformed body: the key's
 * answer comes first, as on every route).
 */
const char *req_key(struct req *r);
bool req_key_checked(struct req *r, PGconn *c, PGresult *res);

/*
 * Notes the use of the key a Q_AUTH result found (its row 0), when the result
 * says it is due: Q_KEY_USED on c, outside any transaction (on a connection
 * inside one, the note waits for a later request). A note that fails is
 * logged at debug level and changes nothing else: last_used_at is a hint for
 * an operator, never a reason to refuse a request.
 */
void req_key_note_use(PGconn *c, const PGresult *res);
bool req_authenticate(struct req *r);

/* True when the request may see account id; answers 404 (and returns false) when not. */
bool req_may_see(struct req *r, const char *account_id);

void reply_json(struct req *r, unsigned status, cJSON *body); /* takes body */
/*
 * Answers status with a body read a piece at a time (chunked):
 * read(cls, buf, max) gives how many bytes it wrote, 0 at the end, -1 on an
 * error (the answer is then cut short: its status is gone already). done(cls)
 * runs once the answer is over, sent or not. The request's database
 * connections stay its own until then.
 */
typedef ssize_t (*reply_reader)(void *cls, char *buf, size_t max);
void reply_stream(struct req *r, unsigned status, const char *content_type, reply_reader read,
                  void *cls, void (*done)(void *cls));

void reply_text(struct req *r, unsigned status, const char *content_type, const char *text,
                size_t len);
void reply_problem(struct req *r, const struct problem *p);
/* 303 See Other to location, setting a cookie when set_cookie is not NULL. */
void reply_redirect(struct req *r, const char *location, const char *set_cookie);
void reply_problemf(struct req *r, unsigned status, const char *type, const char *title,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Answers 503 for a database failure of what (and counts it). */
void reply_db_error(struct req *r, const char *what, const PGresult *res);

#endif
