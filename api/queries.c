#include "api/queries.h"

#include <stdio.h>

#include "common/db.h"

/* meter_us, meter_ts (migrations/functions/meter_us.sql, meter_ts.sql): immutable, as Citus needs
 * in RETURNING. US takes a timestamptz; EPOCH_US a timestamp (read as UTC) or an interval. */
#define US(col)     "meter_us(" col ")"
#define EPOCH_US(x) "(extract(epoch FROM " x ") * 1000000)::bigint"
#define TS(n)       "meter_ts((" n ")::bigint)"

#define ACCOUNT_COLS                                                                               \
	"id, name, plan, trial_grant_seconds, max_concurrent, monthly_spend_cap::text, " US(       \
	        "created_at") ", collector_registration"
#define SANDBOX_COLS                                                                               \
	"id, account_id, vcpus::text, memory_gib::text, " US("started_at") ", " US(                \
	        "stopped_at") ", " US("registered_at") ", ended_by"
#define RANGE_COSTS                                                                                \
	"SELECT u.sandbox_id, sum(meter_part_nano(u.cb, u.mem, p.cpu_vcpu_hour, "                  \
	"p.memory_gib_hour)) cost FROM (SELECT sandbox_id, price_plan_id, sum(cpu_billed_us) cb, " \
	"sum(memory_mgib_us) mem FROM usage_hourly WHERE account_id = $1 AND hour >= " TS(         \
	        "$2") " AND hour < " TS("$3") " GROUP BY 1, 2) u "                                 \
	                                      "JOIN price_plans p ON p.id = u.price_plan_id "      \
	                                      "GROUP BY 1"
#define SUMS                                                                                       \
	"sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), sum(wall_us), "     \
	"sum(memory_mgib_us)"

/* An account's state (Q_STATE): every subquery by $1, not a.id, so that Citus
 * sends the statement to the account's shard, the running count (sandboxes are
 * spread by sandbox) a query of its own over their shards (docs/scaling.md); the
 * trial used over every month, capped at the grant; this month's money as the
 * ledger keeps it (common/ledgerdb.h), NULL when it keeps an earlier month's. */
#define STATE_SQL                                                                                  \
	"SELECT " ACCOUNT_COLS ", "                                                                \
	"(SELECT count(*) FROM sandboxes s WHERE s.account_id = $1 AND s.stopped_at IS NULL), "    \
	"least(a.trial_grant_seconds * 1000000, (SELECT coalesce(sum(wall_us), 0) "                \
	"  FROM account_month m WHERE m.account_id = $1)), "                                       \
	"(SELECT month_to_date::text FROM account_ledger g WHERE g.account_id = $1 "               \
	"  AND g.month = (" TS("$2") " AT TIME ZONE 'UTC')::date) FROM accounts a WHERE id = $1"

static const char *const sql[Q_COUNT] = {
        /* The key's role, account and id, and whether its last use is due to be noted
         * (at most once a minute: req_key_note_use runs Q_KEY_USED then). A plain read:
         * the note inside it, as a WITH ... UPDATE, cost every request about 15 µs of
         * the database's time, also when it updated nothing. */
        [Q_AUTH] = "SELECT role, account_id, id, last_used_at IS NULL OR last_used_at < now() - "
                   "interval '1 minute' FROM api_keys "
                   "WHERE key_hash = sha256(convert_to($1, 'UTF8')) AND revoked_at IS NULL",
        /* A request that finds the row taken by another's note skips it. */
        [Q_KEY_USED] = "UPDATE api_keys a SET last_used_at = now() FROM (SELECT id FROM api_keys "
                       "WHERE id = $1 AND (last_used_at IS NULL OR last_used_at < now() - "
                       "interval '1 minute') FOR UPDATE SKIP LOCKED) l WHERE a.id = l.id",
        [Q_PLANS] = "SELECT id, name, " US(
                "effective_from") ", cpu_vcpu_hour::text, "
                                  "memory_gib_hour::text, cpu_floor::text FROM price_plans "
                                  "ORDER BY effective_from",
        [Q_ACCOUNT] = "SELECT " ACCOUNT_COLS " FROM accounts WHERE id = $1",
        [Q_ACCOUNT_LOCK] = "SELECT " ACCOUNT_COLS " FROM accounts WHERE id = $1 FOR NO KEY UPDATE",
        [Q_ACCOUNT_NEW] = "INSERT INTO accounts (id, name, plan, monthly_spend_cap, "
                          "collector_registration) VALUES ($1, $2, $3, $4::numeric, "
                          "coalesce($5::boolean, false)) RETURNING " ACCOUNT_COLS,
        [Q_ACCOUNT_PATCH] = "UPDATE accounts SET monthly_spend_cap = CASE WHEN $2::boolean "
                            "THEN $3::numeric ELSE monthly_spend_cap END, max_concurrent = "
                            "coalesce($4::integer, max_concurrent), plan = coalesce($5, plan), "
                            "collector_registration = coalesce($6::boolean, "
                            "collector_registration) WHERE id = $1 RETURNING " ACCOUNT_COLS,
        /* After Q_ACCOUNT_LOCK when locking: a statement of its own, so its snapshot is
         * taken once the lock is held and sees every registration before it. */
        [Q_STATE] = STATE_SQL,
        /* The quota check's: read only for a key that may see the account (in the same
         * round trip as Q_AUTH: an admin key or a hook key of no account, or a key of
         * the account), so a bad key or another account's costs one index
         * descent of api_keys and tells nothing by its time (the account's existence,
         * its size); the uncorrelated EXISTS is a one-time filter: the rest never runs */
        [Q_STATE_KEYED] =
                STATE_SQL " AND EXISTS (SELECT 1 FROM api_keys k WHERE "
                          "k.key_hash = sha256(convert_to($3, 'UTF8')) AND k.revoked_at IS NULL "
                          "AND (k.account_id IS NULL OR k.account_id = $1))",
        [Q_SANDBOX] = "SELECT " SANDBOX_COLS " FROM sandboxes WHERE id = $1",
        /* A sandbox the collector saw before it was registered (its path named no
         * account) takes its newest incarnation, and that incarnation's end when the
         * collector saw it end: one that ran and ended before is registered stopped
         * (at started_at at the earliest, as meter_sandbox_ends says), and its next
         * incarnation runs again. */
        [Q_SANDBOX_NEW] =
                "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, "
                "incarnation, incarnation_from, stopped_at, ended_by) "
                "SELECT $1, $2, $3::numeric, $4::numeric, " TS(
                        "$5") ", n.incarnation, n.f, "
                              "CASE WHEN e.ended_at IS NOT NULL THEN greatest(e.ended_at, " TS(
                                      "$5") ") END, "
                                            "CASE WHEN e.ended_at IS NOT NULL THEN 'collector' END "
                                            "FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT "
                                            "incarnation, min(ts) f "
                                            "FROM samples WHERE sandbox_id = $1 GROUP BY "
                                            "incarnation "
                                            "ORDER BY f DESC, incarnation DESC LIMIT 1) n ON true "
                                            "LEFT JOIN incarnation_ends e ON e.sandbox_id = $1 "
                                            "AND e.incarnation = n.incarnation "
                                            "RETURNING " SANDBOX_COLS,
        /* The platform's stop, the earliest one given; a stop before the start or
         * not before one already given changes nothing (api/h_accounts.c says why). */
        /* A sandbox the collector registered from its cgroup (no start known) takes the
         * size and start the platform ordered. */
        [Q_SANDBOX_ADOPT] =
                "UPDATE sandboxes SET vcpus = $3::numeric, memory_gib = $4::numeric, "
                "started_at = " TS(
                        "$5") " WHERE id = $1 AND account_id = $2 "
                              "AND started_at IS NULL AND (stopped_at IS NULL OR stopped_at >= " TS(
                                      "$5") ") "
                                            "RETURNING " SANDBOX_COLS,
        /* Citus: sandboxes are spread by sandbox, so a count over the account's shards,
         * as Q_STATE's running count is */
        [Q_RUNNING_OTHERS] = "SELECT count(*) FROM sandboxes WHERE account_id = $1 "
                             "AND stopped_at IS NULL AND id <> $2",
        [Q_SANDBOX_STOP] = "UPDATE sandboxes SET platform_stopped_at = " TS(
                "$2") " "
                      "WHERE id = $1 AND (platform_stopped_at IS NULL "
                      "OR platform_stopped_at > " TS(
                              "$2") ") "
                                    "AND (started_at IS NULL OR started_at <= " TS(
                                            "$2") ") RETURNING id",
        /* stopped_at and ended_by from the platform's stop and the collector's end */
        [Q_SANDBOX_ENDS] = "SELECT meter_sandbox_ends(ARRAY[$1]::text[])",
        [Q_MARK] = "INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at) "
                   "VALUES ($1, coalesce(" TS(
                           "$2") ", '-infinity'), clock_timestamp()) "
                                 "ON CONFLICT (sandbox_id) DO UPDATE SET "
                                 "from_ts = least(rollup_queue.from_ts, EXCLUDED.from_ts), "
                                 "queued_at = least(rollup_queue.queued_at, EXCLUDED.queued_at), "
                                 "waiting = NULL, waiting_kind = NULL, retry_after = NULL",
        [Q_USAGE_TOTALS] = "SELECT price_plan_id, " SUMS " FROM usage_hourly "
                           "WHERE account_id = $1 AND hour >= " TS("$2") " AND hour < " TS(
                                   "$3") " GROUP BY price_plan_id ORDER BY price_plan_id",
        [Q_USAGE_MONTH_TOTALS] = "SELECT price_plan_id, cpu_measured_us, cpu_billed_us, "
                                 "busy_us, idle_us, wall_us, memory_mgib_us FROM account_month "
                                 "WHERE account_id = $1 AND month = $2::date "
                                 "ORDER BY price_plan_id",
        [Q_USAGE_OF] = "SELECT sandbox_id, price_plan_id, " SUMS " FROM usage_hourly "
                       "WHERE account_id = $1 AND sandbox_id = ANY ($4::text[]) "
                       "AND hour >= " TS("$2") " AND hour < " TS(
                               "$3") " GROUP BY sandbox_id, price_plan_id",
        /* A sandbox's cost over a range: per plan, CPU and memory each priced once
         * (migrations/functions/meter_part_nano.sql), as the answer prices it. */
        [Q_RANK_RANGE] = "SELECT sandbox_id, count(*) OVER () FROM (" RANGE_COSTS ") x "
                         "ORDER BY cost DESC, sandbox_id COLLATE \"C\" LIMIT $4",
        [Q_RANK_MONTH] = "SELECT sandbox_id FROM sandbox_month_cost "
                         "WHERE account_id = $1 AND month = $2::date "
                         "ORDER BY cost_nano DESC, sandbox_id COLLATE \"C\" LIMIT $3",
        /* kept by the rollup (migrations/0023) */
        [Q_COUNT_MONTH] = "SELECT coalesce((SELECT sandboxes FROM account_month_sandboxes "
                          "WHERE account_id = $1 AND month = $2::date), 0)",
        [Q_TOP_MONTH] = "SELECT sandbox_id, cost_nano, cpu_measured_us, cpu_billed_us "
                        "FROM sandbox_month_cost WHERE account_id = $1 AND month = $2::date "
                        "ORDER BY cost_nano DESC, sandbox_id COLLATE \"C\" LIMIT $3",
        [Q_LISTING_NEW] = "INSERT INTO usage_listings (account_id, range_from, range_to, head) "
                          "VALUES ($1, " TS("$2") ", " TS("$3") ", $4::text[]) RETURNING id",
        /* An account keeps its newest listings only: each first page of a long
         * list stores one, and nothing else would bound them until the day's upkeep. */
        [Q_LISTING_TRIM] = "DELETE FROM usage_listings WHERE account_id = $1 AND id <= "
                           "(SELECT id FROM usage_listings WHERE account_id = $1 "
                           "ORDER BY id DESC OFFSET $2::int LIMIT 1)",
        /* The listing's order, made once: its head, then every other sandbox ranked as
         * it stands (NOT IN an uncorrelated subquery: a hashed lookup). A second
         * request waits for the first's row lock, then finds ids set and does nothing. */
        [Q_LISTING_FILL_RANGE] =
                "UPDATE usage_listings l SET ids = l.head || coalesce((SELECT array_agg("
                "sandbox_id::text ORDER BY cost DESC, sandbox_id COLLATE \"C\") FROM (" RANGE_COSTS
                ") x WHERE sandbox_id::text NOT IN (SELECT unnest(h.head) FROM usage_listings h "
                "WHERE h.account_id = $1 AND h.id = $4)), '{}') "
                "WHERE l.account_id = $1 AND l.id = $4 AND l.ids IS NULL",
        [Q_LISTING_FILL_MONTH] =
                "UPDATE usage_listings l SET ids = l.head || coalesce((SELECT array_agg("
                "c.sandbox_id::text ORDER BY c.cost_nano DESC, c.sandbox_id COLLATE \"C\") "
                "FROM sandbox_month_cost c WHERE c.account_id = $1 AND c.month = $3::date "
                "AND c.sandbox_id::text NOT IN (SELECT unnest(h.head) FROM usage_listings h "
                "WHERE h.account_id = $1 AND h.id = $2)), '{}') "
                "WHERE l.account_id = $1 AND l.id = $2 AND l.ids IS NULL",
        [Q_LISTING_PAGE] =
                "WITH l AS (SELECT * FROM usage_listings WHERE account_id = $1 AND id = $2) "
                "SELECT 0, " US("range_from") ", " US(
                        "range_to") ", cardinality(ids), NULL "
                                    "FROM l UNION ALL "
                                    "SELECT 1, x.k, NULL, NULL, x.id FROM l, "
                                    "unnest(l.ids[$3::int + 1 : $3::int + $4::int]) WITH "
                                    "ORDINALITY x(id, k) "
                                    "ORDER BY 1, 2",
        /* Sandboxes of an account by id (byte order) after $2, whose life meets
         * [$5, $6) (either may be NULL), running or stopped ($4, NULL: both). */
        [Q_SANDBOX_LIST] = "SELECT " SANDBOX_COLS " FROM sandboxes "
                           "WHERE account_id = $1 AND id COLLATE \"C\" > $2::text COLLATE \"C\" "
                           "AND ($4::text IS NULL OR ($4 = 'running') = (stopped_at IS NULL)) "
                           "AND ($6::bigint IS NULL OR coalesce(started_at, registered_at) < " TS(
                                   "$6") ") "
                                         "AND ($5::bigint IS NULL OR stopped_at IS NULL OR "
                                         "stopped_at >= " TS("$5") ") "
                                                                   "ORDER BY id COLLATE \"C\" "
                                                                   "LIMIT $3",
        [Q_DATA_AS_OF] = "SELECT " US(
                "coalesce((SELECT q.queued_at FROM rollup_queue q JOIN sandboxes s ON s.id = "
                "q.sandbox_id WHERE q.waiting IS NULL AND s.account_id = $1 ORDER BY "
                "q.queued_at LIMIT 1), now())"),
        [Q_SANDBOX_HOURS] = "SELECT " US(
                "hour") ", price_plan_id, " SUMS " FROM usage_hourly "
                        "WHERE account_id = $1 AND sandbox_id = $2 AND hour >= " TS(
                                "$3") " "
                                      "AND hour < " TS("$4") " GROUP BY hour, price_plan_id "
                                                             "ORDER BY hour, price_plan_id",
        [Q_SANDBOX_PEAK] = "SELECT max(coalesce(memory_peak_bytes, memory_current_bytes)), "
                           "(array_agg(memory_limit_bytes ORDER BY ts DESC))[1] FROM samples "
                           "WHERE sandbox_id = $1 AND ts > " TS("$2") " AND ts <= " TS("$3"),
        [Q_RUNNING_COUNT] = "SELECT count(*) FROM sandboxes WHERE account_id = $1 "
                            "AND stopped_at IS NULL",
        /* days by their UTC date, as the rollup keeps them (migrations/0021) */
        [Q_DAILY] = "SELECT " EPOCH_US(
                "day::timestamp") ", price_plan_id, cpu_measured_us, "
                                  "cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us FROM "
                                  "account_day "
                                  "WHERE account_id = $1 AND day >= (" TS(
                                          "$2") " AT TIME ZONE 'UTC')::date "
                                                "AND day < (" TS(
                                                        "$3") " AT TIME ZONE 'UTC')::date ORDER BY "
                                                              "day, price_plan_id",
        [Q_ROLLUP_STATS] =
                "SELECT count(*) FILTER (WHERE waiting IS NULL), "
                "count(*) FILTER (WHERE waiting_kind = 'unregistered'), "
                "coalesce(" EPOCH_US(
                        "clock_timestamp() - min(queued_at) FILTER (WHERE waiting "
                        "IS NULL)") ", 0) "
                                    ", count(*) FILTER (WHERE waiting_kind = 'parked'), "
                                    "(SELECT coalesce(sum(intervals), 0) FROM usage_unpriced), "
                                    "(SELECT count(*) FROM webhook_deliveries WHERE state = "
                                    "'pending'), (SELECT count(*) FROM webhook_deliveries "
                                    "WHERE state = 'failed'), "
                                    "(SELECT count(*) FROM incarnation_ends WHERE end_cpu = "
                                    "'estimated'), (SELECT count(*) FROM incarnation_ends "
                                    "WHERE end_cpu = 'last') "
                                    "FROM rollup_queue",
};

const char *q_sql(enum query q)
{
	return q >= 0 && q < Q_COUNT ? sql[q] : NULL;
}

bool queries_prepare(PGconn *c, char *err, size_t errlen)
{
	for (int i = 0; i < Q_COUNT; i++) {
		char name[16], what[64];
		snprintf(name, sizeof name, "q%d", i);
		snprintf(what, sizeof what, "could not prepare statement %d", i);
		PGresult *r = PQprepare(c, name, sql[i], 0, NULL);
		bool ok = db_check(r, PGRES_COMMAND_OK, what, err, errlen);
		PQclear(r);
		if (!ok)
			return false;
	}
	return true;
}

PGresult *q_exec(PGconn *c, enum query q, int nparams, const char *const *params)
{
	char name[16];
	snprintf(name, sizeof name, "q%d", (int)q);
	return PQexecPrepared(c, name, nparams, params, NULL, NULL, 0);
}

int q_send(PGconn *c, enum query q, int nparams, const char *const *params)
{
	char name[16];
	snprintf(name, sizeof name, "q%d", (int)q);
	return PQsendQueryPrepared(c, name, nparams, params, NULL, NULL, 0);
}

PGresult *q_exec_planned(PGconn *c, enum query q, int nparams, const char *const *params)
{
	return PQexecParams(c, sql[q], nparams, NULL, params, NULL, NULL, 0);
}
