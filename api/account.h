/*
 * api/account.h: an account's limits and where it stands against them.
 *
 * The state is read from committed rows: the account, its running
 * sandboxes, the trial's wall time used (account_month, kept by the rollup
 * worker) and the month to date, the month's money as common/ledgerdb.h
 * computes it and keeps it for the quota check (account_ledger). The
 * decision is meter/quota.h's. Beside it, what the account routes read
 * before they answer (most through api/opening.h): whether the account
 * exists, how fresh its figures are, the price plans, a sandbox the request
 * may see.
 */
#ifndef API_ACCOUNT_H
#define API_ACCOUNT_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/request.h"
#include "meter/money.h"
#include "meter/plan.h"

struct account {
	char id[160], name[256], plan[8];
	int64_t grant_us;
	int64_t max_concurrent;
	bool has_cap;
	meter_money cap;
	int64_t created_us;
	bool collector_registration; /* the collector registers sandboxes it finds */
};

struct account_state {
	struct account a;
	int64_t running;
	int64_t trial_used_us;
	int64_t trial_left_us;
	int64_t month_start_us;
	meter_money month_cost; /* month to date: the month's invoice total so far */
};

struct quota_answer {
	bool allowed;
	const char *reason; /* ok, trial_exhausted, spend_cap_reached, concurrency_limit */
	char detail[400];
};

/* Reads an account row of ACCOUNT_COLS; false when malformed. */
bool account_from_row(const PGresult *res, int row, struct account *a);
cJSON *account_json(const struct account *a);

/*
 * Whether account id exists (Q_ACCOUNT); when it does not, or the database
 * fails, it has answered (404, 503) and returns false.
 */
bool account_exists(struct req *r, PGconn *c, const char *id);

/*
 * Adds "egress_ports" to o: the ports a sandbox of a trial account may reach
 * (80 and 443), or null (no restriction).
 */
void account_add_egress_ports(cJSON *o, const struct account *a);

/*
 * Loads the state of account id (locking the account row when lock, inside
 * the caller's transaction). On failure it has answered: 404 for no such
 * account (or one the key may not see), 503 for the database.
 */
bool account_state_load(struct req *r, PGconn *c, const char *id, bool lock,
                        struct account_state *s);

/*
 * The same for an AUTH_ANY_IN_HANDLER route: the request's key is looked up
 * (Q_AUTH) and the state read (Q_STATE) in one round trip (a libpq pipeline).
 * On failure it has answered: 401 for a key not live, then as above.
 */
bool account_state_load_keyed(struct req *r, PGconn *c, const char *id, struct account_state *s);

/* Whether one more sandbox may start now, and why not. */
void quota_decide(const struct account_state *s, struct quota_answer *q);

/* "50" for 180000000000 µs: hours with up to 6 decimals, rounded half up. */
void fmt_hours(int64_t us, char *buf, size_t len);
/* A numeric text column as an integer; false when it is not one or too large. */
bool col_int(const PGresult *res, int row, int col, int64_t *out);

/*
 * The sandbox id (SANDBOX_COLS of api/queries.c) when the request may see it;
 * NULL when it has answered (404 for no such sandbox or another account's,
 * 503 for the database). The caller clears the result.
 */
PGresult *sandbox_visible(struct req *r, PGconn *c, const char *id);

/* The oldest pending mark of the account's sandboxes, or now (RFC 3339); on failure it has
 * answered. */
bool data_as_of(struct req *r, PGconn *c, const char *id, char *out, size_t len);

/* The price plans (cached), a copy the caller frees; on failure it has answered. */
bool load_plans(struct req *r, PGconn *c, struct meter_plan **plans, size_t *n);

#endif
