/* The service's own routes, public: health, readiness, metrics, the OpenAPI document. */
#include <stdio.h>
#include <stdlib.h>

#include "api/auth.h"
#include "api/metrics.h"
#include "api/pool.h"
#include "api/queries.h"
#include "api/replica.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"

void h_healthz(struct req *r)
{
	static const char ok[] = "{\"status\":\"ok\"}";
	reply_text(r, 200, "application/json", ok, sizeof ok - 1);
}

/*
 * Ready when the primary answers. With a read replica it also says where reads
 * go and why: "read_database" is ok, behind or unavailable (reads on the
 * primary then), and the replica is checked now when its check is due.
 */
/*
 * GET /readyz: "ready" while the primary answers, "degraded" while a
 * configured replica is not serving reads (the primary serves them), 503
 * when the primary does not answer. Why a replica is away (its error, which
 * names hosts, ports and users) is shown to an admin key only.
 */
void h_readyz(struct req *r)
{
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	PGresult *res = PQexec(c, "SELECT 1");
	bool up = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!up)
		reply_db_error(r, "readiness check", res);
	PQclear(res);
	if (!up)
		return;
	cJSON *o = cJSON_CreateObject();
	cJSON *status = cJSON_AddStringToObject(o, "status", "ready");
	cJSON_AddStringToObject(o, "database", "ok");
	struct replica *rp = server_replica(r->srv);
	if (rp == NULL) {
		cJSON_AddStringToObject(o, "read_database", "none");
		cJSON_AddStringToObject(o, "reads", "primary");
	} else {
		req_read_db(r); /* checks the replica when due */
		struct replica_status st;
		replica_status(rp, &st);
		if (st.state != REPLICA_OK)
			cJSON_SetValuestring(status, "degraded");
		cJSON_AddStringToObject(o, "read_database", replica_state_name(st.state));
		cJSON_AddStringToObject(o, "reads", r->rdb ? "replica" : "primary");
		if (req_is_admin(r))
			cJSON_AddStringToObject(o, "read_database_detail", st.detail);
		if (st.lag_us >= 0)
			cJSON_AddNumberToObject(o, "read_database_lag_seconds",
			                        (double)st.lag_us / 1e6);
	}
	reply_json(r, 200, o);
}

void h_metrics(struct req *r)
{
	size_t cap = 256 * 1024, used;
	char *buf = malloc(cap);
	const char *names[METRICS_ROUTES];
	char(*store)[96] = calloc((size_t)routes_count, sizeof *store);
	if (buf == NULL || store == NULL) {
		free(buf);
		free(store);
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return;
	}
	int named = 0;
	for (; named < routes_count && named < METRICS_ROUTES - 1; named++) {
		snprintf(store[named], sizeof store[named], "%s %s", routes[named].method,
		         routes[named].pattern);
		names[named] = store[named];
	}
	used = metrics_render(buf, cap, names, named);
	used += (size_t)snprintf(buf + used, cap - used,
	                         "# HELP meter_database_errors_total Database failures seen by "
	                         "requests.\n# TYPE meter_database_errors_total counter\n"
	                         "meter_database_errors_total %lu\n",
	                         pool_errors(server_pool(r->srv)));
	/* The rollup backlog, read now; absent when the database is away. */
	struct pool *p = server_pool(r->srv);
	char err[256];
	PGconn *c = pool_take(p, 500, err, sizeof err);
	int up = 0;
	if (c) {
		PGresult *res = q_exec(c, Q_ROLLUP_STATS, 0, NULL);
		if (PQresultStatus(res) == PGRES_TUPLES_OK) {
			up = 1;
			used += (size_t)snprintf(
			        buf + used, cap - used,
			        "# HELP meter_rollup_pending Sandboxes with samples not yet rolled "
			        "up.\n"
			        "# TYPE meter_rollup_pending gauge\nmeter_rollup_pending %s\n"
			        "# HELP meter_samples_unattributed Sandboxes whose samples wait "
			        "for "
			        "registration.\n# TYPE meter_samples_unattributed gauge\n"
			        "meter_samples_unattributed %s\n"
			        "# HELP meter_rollup_lag_seconds Age of the oldest sample not yet "
			        "rolled up.\n# TYPE meter_rollup_lag_seconds gauge\n"
			        "meter_rollup_lag_seconds %.6f\n"
			        "# HELP meter_rollup_parked Sandboxes set aside because they "
			        "cannot "
			        "be rated (meter parked lists them with the reason).\n"
			        "# TYPE meter_rollup_parked gauge\nmeter_rollup_parked %s\n"
			        "# HELP meter_unpriced_intervals_total Intervals that end before "
			        "any "
			        "price plan is in force: counted, not billed.\n"
			        "# TYPE meter_unpriced_intervals_total counter\n"
			        "meter_unpriced_intervals_total %s\n"
			        "# HELP meter_webhook_deliveries Webhook deliveries by state: "
			        "pending (being retried) and failed (every attempt failed; "
			        "redeliver sends one again).\n"
			        "# TYPE meter_webhook_deliveries gauge\n"
			        "meter_webhook_deliveries{state=\"pending\"} %s\n"
			        "meter_webhook_deliveries{state=\"failed\"} %s\n"
			        "# HELP meter_sandbox_ends_inexact Sandbox ends whose last "
			        "interval's "
			        "CPU is not known exactly: estimated (a share of what their parent "
			        "cgroup gained, with others removed at once) or last (the last "
			        "reading, which may be short).\n"
			        "# TYPE meter_sandbox_ends_inexact gauge\n"
			        "meter_sandbox_ends_inexact{cpu=\"estimated\"} %s\n"
			        "meter_sandbox_ends_inexact{cpu=\"last\"} %s\n",
			        PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1),
			        strtod(PQgetvalue(res, 0, 2), NULL) / 1e6, PQgetvalue(res, 0, 3),
			        PQgetvalue(res, 0, 4), PQgetvalue(res, 0, 5), PQgetvalue(res, 0, 6),
			        PQgetvalue(res, 0, 7), PQgetvalue(res, 0, 8));
		}
		PQclear(res);
		pool_give(p, c);
	}
	struct replica *rp = server_replica(r->srv);
	if (rp) {
		struct replica_status st;
		replica_status(rp, &st);
		used += (size_t)snprintf(
		        buf + used, cap - used,
		        "# HELP meter_read_replica_used Whether reads go to the read replica "
		        "(0: to the primary, the replica being down or behind).\n"
		        "# TYPE meter_read_replica_used gauge\nmeter_read_replica_used %d\n"
		        "# HELP meter_read_replica_lag_seconds The replica's delay at its last "
		        "check (-1: not known).\n"
		        "# TYPE meter_read_replica_lag_seconds gauge\n"
		        "meter_read_replica_lag_seconds %.6f\n",
		        st.state == REPLICA_OK, st.lag_us < 0 ? -1.0 : (double)st.lag_us / 1e6);
	}
	used += (size_t)snprintf(buf + used, cap - used,
	                         "# HELP meter_database_up Whether the database answered.\n"
	                         "# TYPE meter_database_up gauge\nmeter_database_up %d\n",
	                         up);
	if (used > cap)
		used = cap;
	reply_text(r, 200, "text/plain; version=0.0.4", buf, used);
	free(buf);
	free(store);
}

void h_openapi(struct req *r)
{
	reply_text(r, 200, "application/json", openapi_json, openapi_json_len);
}
