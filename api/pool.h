/*
 * api/pool.h: a fixed pool of PostgreSQL connections for request threads.
 *
 * A request takes a connection for its whole life and gives it back when it
 * completes. A connection found broken is reconnected when next taken; when
 * the database is away, taking one fails at once (the request answers 503)
 * and the pool tries again on the next request. Every connection has the
 * API's statements prepared (api/queries.h).
 */
#ifndef API_POOL_H
#define API_POOL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct pool;

/* A pool of size connections to url (NULL: common/db.h's choice); none opened yet. */
struct pool *pool_new(const char *url, size_t size);
void pool_free(struct pool *p);

/*
 * Keeps n of the connections for hot requests (pool_take_ex): the others never
 * take the last n, so that requests which hold a connection long (an export
 * read slowly) cannot starve the quota check. At most size - 1.
 */
void pool_reserve(struct pool *p, size_t n);

/*
 * Takes a connection, waiting up to wait_ms for a free one (one not kept for
 * hot requests). NULL with err when none is free in time or the database
 * cannot be reached.
 */
PGconn *pool_take(struct pool *p, int wait_ms, char *err, size_t errlen);

/* pool_take for a hot request or not, telling a database that cannot be reached
 * (*unreachable) from a full pool. */
PGconn *pool_take_ex(struct pool *p, int wait_ms, bool hot, bool *unreachable, char *err,
                     size_t errlen);

/* Gives a connection back; broken ones are closed and reopened later. */
void pool_give(struct pool *p, PGconn *c);

/* The longest wait for a lock of any statement of a request (lock_timeout), in ms. */
#define POOL_LOCK_TIMEOUT_MS 5000

/*
 * Sets how long each statement of c may run (statement_timeout, ms) and wait
 * for a lock (lock_timeout: the same, at most POOL_LOCK_TIMEOUT_MS), unless
 * c has them already: a SET only when a request of another kind had c last.
 */
bool pool_set_timeout(struct pool *p, PGconn *c, unsigned ms, char *err, size_t errlen);

/* Counts database errors for /metrics. */
void pool_count_error(struct pool *p);
unsigned long pool_errors(struct pool *p);

#endif
