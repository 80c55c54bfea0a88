/*
 * rollup/register.c: a sandbox marked before anyone registered it.
 *
 * The platform registers sandboxes (POST /v1/sandboxes), and the samples'
 * trigger one whose cgroup path names an account at its first sample
 * (migrations/0017). One still not registered when its mark is taken (its
 * account came later) is registered here from its cgroup's limits when the
 * path named its account, that account lets the collector register
 * (collector_registration, migration 0044) and the limits are in range, and
 * rated at once.
 * Otherwise its mark waits with the reason (kind 'unregistered',
 * meter_samples_unattributed) until it is registered, or, for limits out of
 * all range or an INSERT the database refused, it is parked (rule 10: no
 * sandbox holds up another).
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "rollup/internal.h"

/* Sets a job aside until the sandbox is registered, saying why. */
static void not_registered(struct job *j, const char *why)
{
	j->fate = NOT_REGISTERED;
	snprintf(j->why, sizeof j->why, "not registered: %s", why);
}

/*
 * Registers a sandbox from its cgroup's limits (its latest sample that names
 * an account and both limits): *done when it did. When it cannot, the job
 * says why: NOT_REGISTERED while the platform may still register it (no
 * account named, an account that does not exist), CANNOT_RATE for limits out
 * of all range (a memory limit of 0) or an INSERT the database refused. The
 * INSERT runs under a savepoint, so its failure is this sandbox's alone;
 * false (the whole batch fails) only when the database failed for a passing
 * reason or the connection is gone.
 */
bool ru_auto_register(PGconn *c, struct job *j, bool *done, char *err, size_t errlen)
{
	const char *p[] = {j->sandbox};
	*done = false;
	PGresult *r =
	        ru_query(c,
	                 "SELECT s.account_id, s.cpu_limit_millicores, s.memory_limit_bytes "
	                 "FROM samples s WHERE s.sandbox_id = $1 AND s.account_id IS NOT NULL "
	                 "AND s.cpu_limit_millicores IS NOT NULL "
	                 "AND s.memory_limit_bytes IS NOT NULL ORDER BY s.ts DESC LIMIT 1",
	                 1, p, PGRES_TUPLES_OK, "could not read its cgroup's limits", err, errlen);
	if (r == NULL)
		return false;
	if (PQntuples(r) == 0) {
		not_registered(j, "no sample names its account with CPU and memory limits");
		PQclear(r);
		return true;
	}
	char account[160], why[400];
	int64_t millicores, bytes;
	snprintf(account, sizeof account, "%s", PQgetvalue(r, 0, 0));
	bool good = ru_get_int(r, 0, 1, &millicores) && ru_get_int(r, 0, 2, &bytes);
	PQclear(r);
	/* The account apart: on Citus samples and accounts are spread by different keys. */
	const char *ap[] = {account};
	r = ru_query(c, "SELECT collector_registration FROM accounts WHERE id = $1", 1, ap,
	             PGRES_TUPLES_OK, "could not look its account up", err, errlen);
	if (r == NULL)
		return false;
	bool exists = PQntuples(r) == 1;
	bool allowed = exists && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!allowed) {
		snprintf(why, sizeof why,
		         exists ? "its cgroup names account \"%s\", which leaves registration to "
		                  "the platform (collector_registration is off)"
		                : "its cgroup names account \"%s\", which does not exist",
		         account);
		not_registered(j, why);
		return true;
	}
	/* vCPUs: the millicores (rounded up from the quota by the collector); memory: bytes
	 * to milli-GiB, rounded up (meter/plan.h). */
	struct meter_size size = {.vcpu_milli = millicores, .mem_mgib = -1};
	if (!good || meter_mgib_of_bytes(bytes, &size.mem_mgib) != METER_OK ||
	    meter_size_check(&size) != METER_OK) {
		snprintf(
		        why, sizeof why,
		        "cannot register from its cgroup's limits: %lld millicores of CPU and %lld "
		        "bytes of memory are out of range (a sandbox has 0.001 to 256 vCPUs and "
		        "up to 1 TiB)",
		        (long long)millicores, (long long)bytes);
		j->fate = CANNOT_RATE;
		snprintf(j->why, sizeof j->why, "%s", why);
		log_warn("rollup: sandbox %s %s", j->sandbox, why);
		return true;
	}
	char vcpus[METER_DECIMAL_BUF], mem[METER_DECIMAL_BUF];
	meter_decimal_format(size.vcpu_milli, 3, 0, vcpus, sizeof vcpus);
	meter_decimal_format(size.mem_mgib, 3, 0, mem, sizeof mem);
	const char *ip[] = {j->sandbox, account, vcpus, mem};
	r = ru_query(c, "SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK,
	             "could not set a savepoint", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	r = ru_query(c,
	             "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	             "VALUES ($1, $2, $3::numeric, $4::numeric) ON CONFLICT DO NOTHING",
	             4, ip, PGRES_COMMAND_OK, "could not register it from its cgroup's limits", err,
	             errlen);
	if (r == NULL) {
		if (PQstatus(c) != CONNECTION_OK || ru_passing_failure(err))
			return false;
		PGresult *back =
		        ru_query(c, "ROLLBACK TO SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK,
		                 "could not roll back to a savepoint", why, sizeof why);
		if (back == NULL)
			return false;
		PQclear(back);
		j->fate = CANNOT_RATE;
		snprintf(j->why, sizeof j->why, "%s", err);
		log_warn("rollup: sandbox %s: %s", j->sandbox, err);
		err[0] = '\0';
		return true;
	}
	*done = strcmp(PQcmdTuples(r), "1") == 0;
	PQclear(r);
	r = ru_query(c, "RELEASE SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK,
	             "could not release a savepoint", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	if (*done)
		log_info("sandbox %s registered from its cgroup's limits (account %s, %s vCPUs, "
		         "%s GiB)",
		         j->sandbox, account, vcpus, mem);
	return true;
}
