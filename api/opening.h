/*
 * api/opening.h: the opening the handlers of an account's routes share.
 *
 * Such a handler reads its query (api/input.h), checks that the request may
 * see the account (req_may_see), takes a connection (the read replica's or
 * the primary's) and reads what it answers from: the account's state or
 * only that it exists, how fresh the figures are, the price plans. req_open
 * does these steps in this order and answers at the first that fails; the
 * handler is left with its own work. A handler that must check more before
 * req_may_see (a range, a cursor) reads its query itself and gives no
 * fields.
 */
#ifndef API_OPENING_H
#define API_OPENING_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/account.h"
#include "api/input.h"
#include "api/request.h"
#include "meter/plan.h"
#include "meter/timefmt.h"

/* What req_open does after req_may_see and the connection, in this order. */
enum req_open_flags {
	REQ_OPEN_PRIMARY = 1 << 0, /* the connection is req_db's (the primary), not req_read_db's */
	REQ_OPEN_STATE = 1 << 1,   /* the account's state (account_state_load, no lock) */
	REQ_OPEN_ACCOUNT = 1 << 2, /* the account must exist (account_exists) */
	REQ_OPEN_AS_OF = 1 << 3,   /* how fresh the figures are (data_as_of) */
	REQ_OPEN_PLANS = 1 << 4,   /* the price plans (load_plans) */
};

struct req_open {
	PGconn *c;                  /* the request's connection (the request gives it back) */
	struct account_state state; /* REQ_OPEN_STATE */
	char asof[METER_TIME_BUF];  /* REQ_OPEN_AS_OF: RFC 3339 */
	struct meter_plan *plans;   /* REQ_OPEN_PLANS: owned, freed by req_open_done */
	size_t nplans;
};

/*
 * Opens a request about account_id into o: the query read into values with
 * fields (nfields of them; fields NULL: the query is not read here), then
 * req_may_see, the connection, and the steps flags name. False when it has
 * answered (400 for the query, 404 for an account the request may not see
 * or that does not exist, 503 for the database); o then holds nothing to
 * free. On success the caller ends with req_open_done(o).
 */
bool req_open(struct req *r, const char *account_id, const struct in_field *fields, size_t nfields,
              struct in_value *values, unsigned flags, struct req_open *o);

/* Frees what req_open loaded (the plans); safe to call twice. */
void req_open_done(struct req_open *o);

/*
 * The body as one JSON object, its fields read into v (n fields of f), for
 * the caller to look at further and free (cJSON_Delete). When optional, an
 * empty body is an empty object, every value unset. NULL when it has
 * answered (400, 422).
 */
cJSON *req_body_fields(struct req *r, const struct in_field *f, size_t n, struct in_value *v,
                       bool optional);

#endif
