#include "api/request.h"

#include <stdio.h>

#include "api/pool.h"
#include "api/replica.h"
#include "api/reply.h"
#include "api/server.h"
#include "common/log.h"

/* Each statement of the request's route runs at most this long (route.h). */
unsigned req_timeout_ms(const struct req *r)
{
	return r->route && r->route->timeout_ms ? r->route->timeout_ms : ROUTE_TIMEOUT_MS;
}

PGconn *req_db(struct req *r)
{
	char err[512];
	struct pool *pool = server_pool(r->srv);
	if (r->db)
		return r->db;
	bool unreachable;
	r->db = pool_take_ex(pool, 2000, r->route && r->route->hot, &unreachable, err, sizeof err);
	if (r->db && !pool_set_timeout(pool, r->db, req_timeout_ms(r), err, sizeof err)) {
		pool_give(pool, r->db);
		r->db = NULL;
	}
	if (r->db == NULL) {
		log_warn("%s %s: %s", r->method, r->path, err);
		reply_problemf(r, 503, "database-unavailable", "Database unavailable",
		               "the database cannot be reached; try again shortly");
	}
	return r->db;
}

PGconn *req_read_db(struct req *r)
{
	char err[512];
	struct replica *replica = server_replica(r->srv);
	if (r->rdb == NULL && replica) {
		r->rdb = replica_take(replica);
		if (r->rdb &&
		    !replica_set_timeout(replica, r->rdb, req_timeout_ms(r), err, sizeof err)) {
			log_warn("%s %s: replica: %s", r->method, r->path, err);
			replica_give(replica, r->rdb);
			r->rdb = NULL;
		}
	}
	return r->rdb ? r->rdb : req_db(r);
}

void req_release(struct req *r)
{
	if (r->db) {
		pool_give(server_pool(r->srv), r->db);
		r->db = NULL;
	}
	if (r->rdb) {
		replica_give(server_replica(r->srv), r->rdb);
		r->rdb = NULL;
	}
}

bool req_no_query(struct req *r)
{
	if (r->nargs == 0)
		return true;
	reply_problemf(r, 400, "unknown-parameter", "Unknown query parameter",
	               "this request takes no query parameters");
	return false;
}

bool req_begin(struct req *r, PGconn *c)
{
	PGresult *res = PQexec(c, "BEGIN");
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		reply_db_error(r, "could not begin", res);
	PQclear(res);
	return ok;
}

bool req_commit(struct req *r, PGconn *c)
{
	PGresult *res = PQexec(c, "COMMIT");
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		reply_db_error(r, "could not commit", res);
	PQclear(res);
	return ok;
}

void req_rollback(PGconn *c)
{
	if (PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
}
