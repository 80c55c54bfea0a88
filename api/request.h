/*
 * api/request.h: a request, as every handler sees it.
 *
 * One struct req per request holds everything the request allocates: its
 * body, its database connections, its answer; the server (api/server.h)
 * makes it when the request arrives and frees it in one completion callback.
 * Handlers read r->param, r->args and r->body, take a database connection
 * with req_db() or req_read_db(), and answer once (api/reply.h).
 */
#ifndef API_REQUEST_H
#define API_REQUEST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/input.h"
#include "api/route.h"
#include "common/keys.h"

#define REQ_BODY_MAX (64 * 1024)
#define REQ_ARGS_MAX 16

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
	bool hook;             /* a hook key (common/keys.h) */
	char account[160];     /* an account key's account, or a hook key's when it has one */
	PGconn *db;
	PGconn *rdb; /* a replica connection (req_read_db), when one serves this request */
	int64_t start_ns;
	unsigned status;
	bool answered;
	void *mhd_conn; /* the struct MHD_Connection */
	/* on the slow lane: its answer waits in pending until its connection resumes */
	bool in_lane;
	void *pending; /* the struct MHD_Response */
	unsigned pending_status;
	struct req *lane_next;
};

/* A database connection for this request (kept until it completes); NULL after answering 503. */
PGconn *req_db(struct req *r);

/*
 * A connection for reads that may lag a little (usage, draft invoices, pages,
 * forecasts, exports): the read replica's while it is usable, else req_db().
 * Never for writes, nor for what must see committed state (api/replica.h).
 */
PGconn *req_read_db(struct req *r);

/*
 * Gives the request's connections back to their pools. The server's
 * (api/server.c), once the answer is made or while the request waits for the
 * slow lane; a handler never calls it.
 */
void req_release(struct req *r);

/* How long each statement of the request's route may run (route.h), in ms. */
unsigned req_timeout_ms(const struct req *r);

/* True when the request has no query parameters; otherwise answers 400 and returns false. */
bool req_no_query(struct req *r);

/*
 * A transaction on c, the request's connection: req_begin and req_commit
 * answer 503 (reply_db_error) and return false when they fail; req_rollback
 * ends whatever transaction is still open (none: nothing happens).
 */
bool req_begin(struct req *r, PGconn *c);
bool req_commit(struct req *r, PGconn *c);
void req_rollback(PGconn *c);

#endif
