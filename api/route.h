/*
 * api/route.h: a request's method and path matched to the route table.
 *
 * Pure: no I/O, no globals. api/server.c calls it for every request and
 * tests/fuzz/fuzz_route.c fuzzes it against a rebuilt path.
 */
#ifndef API_ROUTE_H
#define API_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#define ROUTE_PARTS 8 /* the most parts a path of ours has */

/*
 * AUTH_HOOK: an admin key or a hook key (what meter-hook calls). A hook key
 * gets 403 on every route but these and the quota check.
 * AUTH_ANY_IN_HANDLER: any live key, as AUTH_ANY, but the server checks only that
 * there is one; the handler looks it up in the same round trip as its own
 * statement (req_key, req_key_checked) and must before it answers anything else.
 */
enum auth_need { AUTH_PUBLIC, AUTH_ANY, AUTH_ADMIN, AUTH_HOOK, AUTH_ANY_IN_HANDLER };

struct req;
typedef void (*handler_fn)(struct req *r);

struct route {
	const char *method;
	const char *pattern; /* "/v1/accounts/{id}/usage": {x} matches one path part */
	enum auth_need auth;
	handler_fn handler;
	bool page; /* a page for people: the session cookie counts, and no login sends to /login */
	unsigned timeout_ms; /* each statement's longest run (0: ROUTE_TIMEOUT_MS) */
	bool slow;           /* runs on the slow lane (api/server.c), never on a request thread */
	bool hot; /* may take the database connections kept for it (api/pool.h): admissions */
};

/* How long a statement of a route that says nothing may run. */
#define ROUTE_TIMEOUT_MS 10000

/* A path cut at its slashes (empty parts dropped), the parts pointing into buf. */
struct route_path {
	char buf[512];
	char *part[ROUTE_PARTS];
	int n;
};

/* Splits path; false when it is too long to hold or has more than ROUTE_PARTS parts. */
bool route_split(const char *path, struct route_path *out);

#define ROUTE_NONE   (-1) /* no route has this path (or none with this method) */
#define ROUTE_BAD_ID (-2) /* a route's {id} part is not an id (common/ids.h) */

/*
 * The index into table (n routes) of the route that method and p match, its
 * {x} parts in param (in order, at most two), or ROUTE_NONE with allowed
 * listing the methods the path has ("" when it has none), or ROUTE_BAD_ID.
 */
int route_find(const struct route *table, int n, const char *method, const struct route_path *p,
               const char *param[2], char *allowed, size_t alen);

#endif
