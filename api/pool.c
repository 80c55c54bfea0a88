#include "api/pool.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/queries.h"
#include "common/db.h"
#include "common/log.h"

struct slot {
	PGconn *conn;
	bool busy;
	unsigned timeout_ms; /* the statement_timeout set on conn; 0: the server's */
};

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t freed;
	char *url;
	size_t size;
	size_t reserved; /* kept for hot requests */
	size_t busy;
	struct slot *slots;
	atomic_ulong errors;
};

struct pool *pool_new(const char *url, size_t size)
{
	struct pool *p = calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	p->slots = calloc(size, sizeof *p->slots);
	p->url = url ? strdup(url) : NULL;
	if (p->slots == NULL || (url && p->url == NULL)) {
		free(p->slots);
		free(p->url);
		free(p);
		return NULL;
	}
	p->size = size;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->freed, NULL);
	return p;
}

void pool_free(struct pool *p)
{
	if (p == NULL)
		return;
	for (size_t i = 0; i < p->size; i++)
		if (p->slots[i].conn)
			PQfinish(p->slots[i].conn);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->freed);
	free(p->slots);
	free(p->url);
	free(p);
}

static PGconn *open_conn(struct pool *p, char *err, size_t errlen)
{
	PGconn *c = db_connect(p->url, err, errlen);
	/* bounded from the start: preparing the statements may wait on a lock too */
	char sql[128];
	snprintf(sql, sizeof sql, "SET statement_timeout = %d; SET lock_timeout = %d",
	         POOL_LOCK_TIMEOUT_MS, POOL_LOCK_TIMEOUT_MS);
	PGresult *r = c ? PQexec(c, sql) : NULL;
	if (c && PQresultStatus(r) != PGRES_COMMAND_OK) {
		snprintf(err, errlen, "could not set the statement timeout: %s", PQerrorMessage(c));
		PQfinish(c);
		c = NULL;
	}
	PQclear(r);
	if (c && !queries_prepare(c, err, errlen)) {
		PQfinish(c);
		c = NULL;
	}
	return c;
}

/*
 * A server that ended the connection while it sat idle (a restart, a fast
 * shutdown) has left its last words and an EOF on the socket: reading them
 * now (non-blocking: libpq's sockets are) marks the connection bad, and a new
 * one is opened instead of failing the request's first query. The first read
 * takes the message, the next finds the EOF.
 */
static bool still_open(PGconn *c)
{
	/* Nothing to read, the usual case: one poll, no read. */
	struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
	if (PQstatus(c) == CONNECTION_OK && poll(&p, 1, 0) == 0)
		return true;
	for (int i = 0; i < 3; i++)
		if (PQconsumeInput(c) == 0)
			return false;
	return PQstatus(c) == CONNECTION_OK;
}

void pool_reserve(struct pool *p, size_t n)
{
	pthread_mutex_lock(&p->mu);
	p->reserved = n < p->size ? n : (p->size ? p->size - 1 : 0);
	pthread_mutex_unlock(&p->mu);
}

PGconn *pool_take(struct pool *p, int wait_ms, char *err, size_t errlen)
{
	bool unreachable;
	return pool_take_ex(p, wait_ms, false, &unreachable, err, errlen);
}

PGconn *pool_take_ex(struct pool *p, int wait_ms, bool hot, bool *unreachable, char *err,
                     size_t errlen)
{
	*unreachable = false;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&p->mu);
	struct slot *s = NULL;
	for (;;) {
		for (size_t i = 0; i < p->size && !s && (hot || p->busy + p->reserved < p->size);
		     i++)
			if (!p->slots[i].busy)
				s = &p->slots[i];
		/* a broadcast wakes the hot one among those waiting too */
		if (s || pthread_cond_timedwait(&p->freed, &p->mu, &until) != 0)
			break;
	}
	if (s) {
		s->busy = true;
		p->busy++;
	}
	pthread_mutex_unlock(&p->mu);
	if (s == NULL) {
		if (hot || p->reserved == 0)
			snprintf(err, errlen, "all %zu database connections are busy", p->size);
		else
			snprintf(err, errlen,
			         "all %zu database connections open to this request are busy (%zu "
			         "more are kept for quota checks and admissions)",
			         p->size - p->reserved, p->reserved);
		return NULL;
	}
	if (s->conn && !still_open(s->conn)) {
		PQfinish(s->conn);
		s->conn = NULL;
	}
	if (s->conn == NULL) {
		s->conn = open_conn(p, err, errlen);
		s->timeout_ms = 0;
	}
	if (s->conn == NULL) {
		*unreachable = true;
		atomic_fetch_add(&p->errors, 1);
		pthread_mutex_lock(&p->mu);
		s->busy = false;
		p->busy--;
		pthread_cond_broadcast(&p->freed);
		pthread_mutex_unlock(&p->mu);
		return NULL;
	}
	return s->conn;
}

void pool_give(struct pool *p, PGconn *c)
{
	if (c == NULL)
		return;
	/* A streamed read left in mid-way (a client gone): cancelled, its rows drained. */
	if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_ACTIVE) {
		PGcancel *cancel = PQgetCancel(c);
		char why[256];
		if (cancel) {
			PQcancel(cancel, why, sizeof why);
			PQfreeCancel(cancel);
		}
		for (PGresult *r; (r = PQgetResult(c)) != NULL;)
			PQclear(r);
	}
	/* A request that failed in mid-transaction leaves nothing open behind it. */
	if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < p->size; i++)
		if (p->slots[i].conn == c) {
			p->slots[i].busy = false;
			p->busy--;
			break;
		}
	/* all of them: the one a freed place suits may not be the first waiting (a
	 * request that may not take the kept ones waits on while a hot one could go) */
	pthread_cond_broadcast(&p->freed);
	pthread_mutex_unlock(&p->mu);
}

bool pool_set_timeout(struct pool *p, PGconn *c, unsigned ms, char *err, size_t errlen)
{
	struct slot *s = NULL;
	/* the caller holds c: its slot is not touched by another thread meanwhile */
	for (size_t i = 0; i < p->size && !s; i++)
		if (p->slots[i].conn == c)
			s = &p->slots[i];
	if (s == NULL || s->timeout_ms == ms)
		return true;
	char sql[128];
	snprintf(sql, sizeof sql, "SET statement_timeout = %u; SET lock_timeout = %u", ms,
	         ms < POOL_LOCK_TIMEOUT_MS ? ms : POOL_LOCK_TIMEOUT_MS);
	PGresult *r = PQexec(c, sql);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (ok)
		s->timeout_ms = ms;
	else
		snprintf(err, errlen, "could not set the statement timeout: %s", PQerrorMessage(c));
	PQclear(r);
	return ok;
}

void pool_count_error(struct pool *p)
{
	atomic_fetch_add(&p->errors, 1);
}

unsigned long pool_errors(struct pool *p)
{
	return atomic_load(&p->errors);
}
