/*
 * meter: the operator's command-line tool.
 *
 *   meter migrate [--dir DIR]
 *   meter key create --admin | --account ID | --hook [--account ID]
 *   meter rates --vcpus N --memory-gib N [--json]
 *   meter estimate --runs N --minutes N --vcpus N --memory-gib N --busy-vcpus N [--json]
 *   meter session list [--account ID] [--json] | session revoke --account ID | --admin
 *   meter parked [retry ID | retry --all]
 *
 * Each verb reads DATABASE_URL (see common/db.h). Exit status: 0 done, 1 the
 * work failed (database, files), 2 the command line is wrong.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/db.h"
#include "common/keys.h"
#include "common/log.h"
#include "common/export.h"
#include "common/invoicedb.h"
#include "common/sessions.h"
#include "common/opts.h"
#include "common/parked.h"
#include "common/plans.h"
#include "meter/estimate.h"
#include "meter/plan.h"
#include "migrations/migrate.h"
#include "reports/estimate_doc.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

#define EXIT_USAGE 2
#define ERRLEN     1024
#define NOPTS(t)   (sizeof(t) / sizeof((t)[0]))

struct verb {
	const char *name;
	const char *usage;
	const struct opt_def *opts;
	size_t nopts;
	int (*run)(const struct opt_val *v);
};

static bool is_help(const char *arg)
{
	return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

/* Parses a verb's options; prints help and exits 0 for --help. */
static bool verb_opts(const struct verb *vb, int argc, char **argv, struct opt_val *vals)
{
	char err[ERRLEN];
	for (int i = 0; i < argc; i++)
		if (is_help(argv[i])) {
			opts_help(stdout, vb->usage, vb->opts, vb->nopts);
			exit(0);
		}
	if (!opts_parse(vb->opts, vb->nopts, argc, argv, vals, err, sizeof err)) {
		log_error("%s: %s (see meter %s --help)", vb->name, err, vb->name);
		return false;
	}
	return true;
}

static PGconn *connect_or_log(void)
{
	char err[ERRLEN];
	PGconn *c = db_connect(NULL, err, sizeof err);
	if (c == NULL)
		log_error("%s", err);
	return c;
}

/* The plan in force now, from the database. */
static bool plan_now(struct meter_plan *out)
{
	char err[ERRLEN];
	struct meter_plan *plans = NULL;
	size_t n = 0;
	PGconn *c = connect_or_log();
	if (c == NULL)
		return false;
	bool ok = plans_load(c, &plans, &n, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return false;
	}
	const struct meter_plan *p = meter_plan_at(plans, n, clock_now_us());
	if (p)
		*out = *p;
	else
		log_error("no price plan is in force now (table price_plans; run meter migrate)");
	free(plans);
	return p != NULL;
}

static int print_json(cJSON *o)
{
	char *s = o ? cJSON_Print(o) : NULL;
	cJSON_Delete(o);
	if (s == NULL) {
		log_error("could not render JSON: out of memory");
		return 1;
	}
	printf("%s\n", s);
	cJSON_free(s);
	return 0;
}

/* ---- migrate ---- */

static const struct opt_def migrate_opts[] = {
        {"dir", OPT_STRING, 0, 0, 0, NULL, "METER_MIGRATIONS_DIR", false,
         "folder of the NNNN_name.sql files (default: the installed share/meter/migrations; "
         "run from a build folder, the checkout's migrations/)"},
};

static int run_migrate(const struct opt_val *v)
{
	char err[ERRLEN];
	struct migrate_result res;
	const char *dir = v[0].set ? v[0].str : migrate_default_dir();
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool ok = migrate_run(c, dir, stdout, &res, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return 1;
	}
	printf("migrations: %d applied now, %d already applied; %d function(s) applied\n",
	       res.applied, res.current, res.functions);
	return 0;
}

#define JSON_OPT_DEF                                                                               \
	{                                                                                          \
		"json", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "print JSON"                         \
	}

/* ---- key create ---- */

static const struct opt_def key_opts[] = {
        {"admin", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "a key that may do everything"},
        {"account", OPT_STRING, 0, 0, 0, NULL, NULL, false, "a key for this account only"},
        {"hook", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
         "a key for meter-hook: quota checks, sandbox registrations and stops (of the "
         "--account only, when given)"},
};

static int run_key_create(const struct opt_val *v)
{
	char err[ERRLEN], key[KEY_LEN + 1];
	int64_t id = 0;
	if (v[2].set ? v[0].set : v[0].set == v[1].set) {
		log_error("key create: give --admin, --account ID, or --hook (with --account ID "
		          "for one account's)");
		return EXIT_USAGE;
	}
	const char *role = v[2].set ? "hook" : v[0].set ? "admin" : "account";
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool ok = key_create(c, role, v[1].set ? v[1].str : NULL, key, &id, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return 1;
	}
	/* The key on stdout alone, so scripts can take it; the rest on stderr. */
	printf("%s\n", key);
	fprintf(stderr, "meter: created %s key %lld; it is shown only this once\n", role,
	        (long long)id);
	return 0;
}

/* ---- key list and key revoke ---- */

static const struct opt_def key_list_opts[] = {JSON_OPT_DEF};

static void time_or_dash(int64_t us, char *out, size_t len)
{
	if (us < 0)
		snprintf(out, len, "-");
	else
		meter_time_format(us, out, len);
}

static int run_key_list(const struct opt_val *v)
{
	char err[ERRLEN];
	struct key_info *keys = NULL;
	size_t n = 0;
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool ok = key_list(c, &keys, &n, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return 1;
	}
	if (v[0].set) {
		cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "keys");
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(arr, key_info_json(&keys[i]));
		free(keys);
		return print_json(o);
	}
	printf("%-6s %-12s %-8s %-20s %-21s %-21s %s\n", "ID", "KEY", "ROLE", "ACCOUNT", "CREATED",
	       "LAST USED", "REVOKED");
	for (size_t i = 0; i < n; i++) {
		char t[3][METER_TIME_BUF];
		time_or_dash(keys[i].created_us, t[0], sizeof t[0]);
		time_or_dash(keys[i].last_used_us, t[1], sizeof t[1]);
		time_or_dash(keys[i].revoked_us, t[2], sizeof t[2]);
		printf("%-6lld %-12s %-8s %-20s %-21s %-21s %s\n", (long long)keys[i].id,
		       keys[i].shown, keys[i].role, keys[i].account[0] ? keys[i].account : "-",
		       t[0], t[1], t[2]);
	}
	free(keys);
	return 0;
}

static const char *key_revoke_id;

static int run_key_revoke(const struct opt_val *v)
{
	(void)v;
	char err[ERRLEN];
	int64_t id = 0;
	if (key_revoke_id == NULL ||
	    meter_decimal_parse(key_revoke_id, 0, false, &id) != METER_OK || id <= 0) {
		log_error("key revoke: give the key's id (a positive integer, as meter key list "
		          "shows it)");
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool found = false;
	bool ok = key_revoke(c, id, &found, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return 1;
	}
	if (!found) {
		log_error("key revoke: no key %lld", (long long)id);
		return 1;
	}
	fprintf(stderr,
	        "meter: key %lld is revoked; its dashboard sessions are ended (and, if it was "
	        "its account's last key, the sessions login links opened there)\n",
	        (long long)id);
	return 0;
}

/* ---- plan list and plan add ---- */

static const struct opt_def plan_list_opts[] = {JSON_OPT_DEF};

static int run_plan_list(const struct opt_val *v)
{
	char err[ERRLEN];
	struct meter_plan *plans = NULL;
	size_t n = 0;
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool ok = plans_load(c, &plans, &n, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("%s", err);
		return 1;
	}
	int64_t now = clock_now_us();
	if (v[0].set) {
		cJSON *o = report_plans_json(plans, n, now);
		free(plans);
		return print_json(o);
	}
	printf("%-4s %-20s %-21s %-18s %-18s %-9s %s\n", "ID", "NAME", "EFFECTIVE FROM",
	       "CPU/VCPU-HOUR", "MEMORY/GIB-HOUR", "CPU FLOOR", "STATE");
	for (size_t i = 0; i < n; i++) {
		char when[METER_TIME_BUF], cpu[METER_MONEY_BUF], mem[METER_MONEY_BUF],
		        floor[METER_DECIMAL_BUF];
		meter_time_format(plans[i].effective_from_us, when, sizeof when);
		meter_money_format_exact(plans[i].cpu_vcpu_hour, cpu, sizeof cpu);
		meter_money_format_exact(plans[i].memory_gib_hour, mem, sizeof mem);
		meter_decimal_format(plans[i].cpu_floor_ppm, 6, 0, floor, sizeof floor);
		printf("%-4lld %-20s %-21s %-18s %-18s %-9s %s\n", (long long)plans[i].id,
		       plans[i].name, when, cpu, mem, floor, report_plan_state(plans, n, i, now));
	}
	free(plans);
	return 0;
}

static const struct opt_def plan_add_opts[] = {
        {"name", OPT_STRING, 0, 0, 0, NULL, NULL, true, "the plan's name (1 to 63 bytes)"},
        {"effective-from", OPT_STRING, 0, 0, 0, NULL, NULL, true,
         "when it takes effect (RFC 3339, in the future)"},
        {"cpu-per-vcpu-hour", OPT_DECIMAL, 9, 0, METER_PRICE_MAX, NULL, NULL, true,
         "dollars per billed vCPU-hour"},
        {"memory-per-gib-hour", OPT_DECIMAL, 9, 0, METER_PRICE_MAX, NULL, NULL, true,
         "dollars per provisioned GiB-hour"},
        {"cpu-floor", OPT_DECIMAL, 6, 0, 1000000, NULL, NULL, false,
         "billed CPU floor, a share of the vCPUs (default: the plan in force then)"},
};

static int run_plan_add(const struct opt_val *v)
{
	char err[ERRLEN];
	int64_t from = 0, id = 0;
	size_t len = strlen(v[0].str);
	if (len == 0 || len >= METER_PLAN_NAME_MAX) {
		log_error("plan add: --name must be 1 to %d bytes", METER_PLAN_NAME_MAX - 1);
		return EXIT_USAGE;
	}
	if (meter_time_parse(v[1].str, &from) != METER_OK) {
		log_error("plan add: --effective-from \"%s\" is not an RFC 3339 time "
		          "(2026-12-01T00:00:00Z)",
		          v[1].str);
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	enum plan_refusal why = plan_add(c, v[0].str, from, v[2].num, v[3].num,
	                                 v[4].set ? v[4].num : -1, &id, err, sizeof err);
	PQfinish(c);
	switch (why) {
	case PLAN_ADDED:
		fprintf(stderr, "meter: price plan %lld \"%s\" takes effect at %s\n", (long long)id,
		        v[0].str, v[1].str);
		return 0;
	case PLAN_PAST:
		log_error(
		        "plan add: %s is not an hour in the future or more: samples are rated "
		        "up to an hour ahead of now, and a plan takes effect after every interval "
		        "rated before it was known",
		        v[1].str);
		return 1;
	case PLAN_TAKEN:
		log_error("plan add: a price plan takes effect at %s already", v[1].str);
		return 1;
	case PLAN_DB_ERROR:
		break;
	}
	log_error("%s", err);
	return 1;
}

/* ---- rates and estimate ---- */

#define VCPUS_OPT                                                                                  \
	{                                                                                          \
		"vcpus", OPT_DECIMAL, 3, 1, METER_VCPU_MILLI_MAX, NULL, NULL, true,                \
		        "vCPUs of the sandbox (0.001 to 256)"                                      \
	}
#define MEMORY_OPT                                                                                 \
	{                                                                                          \
		"memory-gib", OPT_DECIMAL, 3, 1, METER_MEM_MGIB_MAX, NULL, NULL, true,             \
		        "memory of the sandbox in GiB (0.001 to 1024)"                             \
	}
#define JSON_OPT                                                                                   \
	{                                                                                          \
		"json", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "print JSON"                         \
	}

static const struct opt_def rates_opts[] = {VCPUS_OPT, MEMORY_OPT, JSON_OPT};

static int run_rates(const struct opt_val *v)
{
	struct meter_plan plan;
	struct meter_size size = {.vcpu_milli = v[0].num, .mem_mgib = v[1].num};
	struct meter_rates r;
	if (!plan_now(&plan))
		return 1;
	enum meter_status st = meter_rates_of(&plan, &size, &r);
	if (st) {
		log_error("rates: could not compute: %s", meter_strerror(st));
		return 1;
	}
	if (v[2].set)
		return print_json(report_rates_json(&plan, &size, &r));
	report_rates_text(stdout, &plan, &size, &r);
	return 0;
}

static const struct opt_def estimate_opts[] = {
        {"runs", OPT_DECIMAL, 0, 1, METER_EST_RUNS_MAX, NULL, NULL, true,
         "runs a month (1 to 10000000)"},
        {"minutes", OPT_DECIMAL, 3, 1, METER_EST_MINUTES_MILLI_MAX, NULL, NULL, true,
         "minutes a run (0.001 to 44640)"},
        VCPUS_OPT,
        MEMORY_OPT,
        {"busy-vcpus", OPT_DECIMAL, 3, 0, METER_VCPU_MILLI_MAX, NULL, NULL, true,
         "vCPUs busy on average (0 to --vcpus)"},
        JSON_OPT,
};

static int run_estimate(const struct opt_val *v)
{
	struct meter_plan plan;
	struct meter_estimate_input in = {
	        .runs = v[0].num,
	        .minutes_milli = v[1].num,
	        .size = {.vcpu_milli = v[2].num, .mem_mgib = v[3].num},
	        .busy_vcpu_milli = v[4].num,
	};
	struct meter_estimate e;
	if (in.busy_vcpu_milli > in.size.vcpu_milli) {
		log_error("estimate: --busy-vcpus %s is more than --vcpus %s", v[4].str, v[2].str);
		return EXIT_USAGE;
	}
	if (!plan_now(&plan))
		return 1;
	enum meter_status st = meter_estimate_month(&plan, &in, &e);
	if (st) {
		log_error("estimate: could not compute: %s", meter_strerror(st));
		return 1;
	}
	if (v[5].set)
		return print_json(report_estimate_json(&plan, &e));
	report_estimate_text(stdout, &e);
	return 0;
}

/* ---- invoice ---- */

static const struct opt_def invoice_opts[] = {
        {"account", OPT_STRING, 0, 0, 0, NULL, NULL, true, "the account"},
        {"month", OPT_STRING, 0, 0, 0, NULL, NULL, true, "the month, YYYY-MM (UTC)"},
        {"format", OPT_STRING, 0, 0, 0, "json", NULL, false, "json, csv or html"},
        {"grace", OPT_DURATION, 0, 0, INT64_C(7776000000000), INVOICE_GRACE_DEFAULT,
         "METER_INVOICE_GRACE", false, "time after a month ends before its invoice is final"},
};

static int run_invoice(const struct opt_val *v)
{
	char err[ERRLEN], full[32];
	int64_t month;
	const char *fmt = v[2].str;
	if (strlen(v[1].str) != 7 || v[1].str[4] != '-' ||
	    (snprintf(full, sizeof full, "%s-01T00:00:00Z", v[1].str),
	     meter_time_parse(full, &month) != METER_OK)) {
		log_error("invoice: --month: \"%s\" is not a month as YYYY-MM", v[1].str);
		return EXIT_USAGE;
	}
	if (strcmp(fmt, "json") != 0 && strcmp(fmt, "csv") != 0 && strcmp(fmt, "html") != 0) {
		log_error("invoice: --format: \"%s\" is not json, csv or html", fmt);
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	struct invoice_doc doc = {0};
	int rc = 1;
	if (!plans_load(c, &plans, &nplans, err, sizeof err) ||
	    !invoice_get(c, v[0].str, month, clock_now_us(), v[3].num, plans, nplans, &doc, err,
	                 sizeof err)) {
		log_error("%s", err);
	} else if (!doc.found) {
		log_error("invoice: account \"%s\" does not exist", v[0].str);
	} else if (strcmp(fmt, "html") == 0 && doc.html == NULL) {
		log_error("invoice: this invoice was made final before pages were kept");
	} else {
		const char *text = strcmp(fmt, "csv") == 0    ? doc.csv
		                   : strcmp(fmt, "html") == 0 ? doc.html
		                                              : doc.json;
		printf("%s%s", text, strcmp(fmt, "json") == 0 ? "\n" : "");
		rc = 0;
	}
	invoice_doc_free(&doc);
	free(plans);
	PQfinish(c);
	return rc;
}

/* ---- login-link ---- */

static const struct opt_def link_opts[] = {
        {"admin", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "a link for an admin"},
        {"account", OPT_STRING, 0, 0, 0, NULL, NULL, false, "a link for this account"},
};

static int run_login_link(const struct opt_val *v)
{
	char err[ERRLEN], token[TOKEN_LEN + 1];
	if (v[0].set == v[1].set) {
		log_error("login-link: give exactly one of --admin and --account ID");
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	bool ok = session_create(c, "link", v[1].set ? v[1].str : NULL, 0, token, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("login-link: %s", err);
		return 1;
	}
	printf("/login/%s\n", token);
	fprintf(stderr, "meter: open it on the API's address within %d minutes; it works once\n",
	        LINK_TTL_S / 60);
	return 0;
}

/* ---- session list and session revoke ---- */

static const struct opt_def session_opts[] = {
        {"account", OPT_STRING, 0, 0, 0, NULL, NULL, false, "the account's only"},
        {"admin", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "the admins' (revoke)"},
        JSON_OPT_DEF,
};

/* "meter session revoke" rather than "meter session list". */
static bool session_revoking;

static int run_session(const struct opt_val *v)
{
	char err[ERRLEN];
	if (session_revoking ? v[0].set == v[1].set : v[1].set) {
		log_error(session_revoking
		                  ? "session revoke: give exactly one of --account ID and --admin"
		                  : "session list: --admin goes with revoke (meter session list "
		                    "shows the admins' with the others)");
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	if (session_revoking) {
		long ended = 0;
		bool ok = sessions_revoke(c, v[0].set ? v[0].str : NULL, &ended, err, sizeof err);
		PQfinish(c);
		if (!ok) {
			log_error("session revoke: %s", err);
			return 1;
		}
		fprintf(stderr, "meter: %ld session(s) and link(s) of %s%s ended\n", ended,
		        v[0].set ? "account " : "the admins", v[0].set ? v[0].str : "");
		return 0;
	}
	struct session_info *ss = NULL;
	size_t n = 0;
	bool ok = sessions_list(c, v[0].set ? v[0].str : NULL, &ss, &n, err, sizeof err);
	PQfinish(c);
	if (!ok) {
		log_error("session list: %s", err);
		return 1;
	}
	if (v[2].set) {
		cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "sessions");
		for (size_t i = 0; i < n; i++) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "kind", ss[i].kind);
			if (ss[i].account[0])
				cJSON_AddStringToObject(e, "account_id", ss[i].account);
			else
				cJSON_AddNullToObject(e, "account_id");
			if (ss[i].key_id)
				cJSON_AddNumberToObject(e, "key_id", (double)ss[i].key_id);
			else
				cJSON_AddNullToObject(e, "key_id");
			db_json_time(e, "created_at", ss[i].created_us);
			db_json_time(e, "expires_at", ss[i].expires_us);
			cJSON_AddItemToArray(arr, e);
		}
		free(ss);
		return print_json(o);
	}
	printf("%-8s %-20s %-8s %-21s %s\n", "KIND", "ACCOUNT", "KEY", "CREATED", "EXPIRES");
	for (size_t i = 0; i < n; i++) {
		char t[2][METER_TIME_BUF], key[24] = "-";
		time_or_dash(ss[i].created_us, t[0], sizeof t[0]);
		time_or_dash(ss[i].expires_us, t[1], sizeof t[1]);
		if (ss[i].key_id)
			snprintf(key, sizeof key, "%lld", (long long)ss[i].key_id);
		printf("%-8s %-20s %-8s %-21s %s\n", ss[i].kind,
		       ss[i].account[0] ? ss[i].account : "(admin)", key, t[0], t[1]);
	}
	free(ss);
	return 0;
}

/* ---- export ---- */

static const struct opt_def export_opts[] = {
        {"account", OPT_STRING, 0, 0, 0, NULL, NULL, true, "the account"},
        {"month", OPT_STRING, 0, 0, 0, NULL, NULL, true, "the month, YYYY-MM (UTC)"},
        {"format", OPT_STRING, 0, 0, 0, "focus", NULL, false,
         "focus (FOCUS-shaped CSV) or usage (per sandbox CSV)"},
};

static int run_export(const struct opt_val *v)
{
	char err[ERRLEN], full[32];
	int64_t month;
	if (strlen(v[1].str) != 7 || v[1].str[4] != '-' ||
	    (snprintf(full, sizeof full, "%s-01T00:00:00Z", v[1].str),
	     meter_time_parse(full, &month) != METER_OK)) {
		log_error("export: --month: \"%s\" is not a month as YYYY-MM", v[1].str);
		return EXIT_USAGE;
	}
	bool focus = strcmp(v[2].str, "focus") == 0;
	if (!focus && strcmp(v[2].str, "usage") != 0) {
		log_error("export: --format: \"%s\" is not focus or usage", v[2].str);
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	bool ok = plans_load(c, &plans, &nplans, err, sizeof err) &&
	          export_write(c, v[0].str, month, focus, plans, nplans, stdout, err, sizeof err);
	if (!ok)
		log_error("export: %s", err);
	free(plans);
	PQfinish(c);
	return ok ? 0 : 1;
}

/* ---- parked ---- */

static const struct opt_def parked_opts[] = {
        {"all", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "with retry: every mark set aside"},
};

/* The sandbox "meter parked retry ID" names; NULL for the list or --all. */
static const char *parked_id;
static bool parked_retrying;

static int run_parked(const struct opt_val *v)
{
	char err[ERRLEN];
	if (parked_retrying && v[0].set == (parked_id != NULL)) {
		log_error("parked retry: give exactly one of a sandbox id and --all");
		return EXIT_USAGE;
	}
	if (!parked_retrying && v[0].set) {
		log_error("parked: --all goes with retry (meter parked retry --all)");
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	int status = 1;
	if (parked_retrying) {
		int64_t woken = 0;
		if (!parked_retry(c, parked_id, &woken, err, sizeof err)) {
			log_error("parked retry: %s", err);
		} else if (parked_id && woken == 0) {
			log_error(
			        "parked retry: sandbox \"%s\" has no mark set aside (meter parked "
			        "lists them)",
			        parked_id);
		} else {
			printf("woke %lld mark(s); the rollup rates them at its next pass\n",
			       (long long)woken);
			status = 0;
		}
		PQfinish(c);
		return status;
	}
	struct parked_row *rows = NULL;
	size_t n = 0;
	if (!parked_list(c, &rows, &n, err, sizeof err)) {
		log_error("parked: %s", err);
		PQfinish(c);
		return 1;
	}
	PQfinish(c);
	printf("%-24s %-16s %-12s %-20s %9s  %s\n", "SANDBOX", "ACCOUNT", "KIND", "SINCE",
	       "SAMPLES", "REASON");
	for (size_t i = 0; i < n; i++) {
		char since[METER_TIME_BUF];
		meter_time_format(rows[i].since_us, since, sizeof since);
		printf("%-24s %-16s %-12s %-20s %9lld  %s\n", rows[i].sandbox,
		       rows[i].account[0] ? rows[i].account : "-", rows[i].kind, since,
		       (long long)rows[i].samples, rows[i].reason);
	}
	fprintf(stderr, "meter: %zu mark(s) set aside\n", n);
	free(rows);
	return 0;
}

/* ---- host list, bind and unbind: collector_hosts (migration 0044) ---- */

static const struct opt_def host_opts[] = {
        {"role", OPT_STRING, 0, 0, 0, NULL, NULL, false, "a collector's login role (bind, unbind)"},
        {"host", OPT_STRING, 0, 0, 0, NULL, NULL, false,
         "the host id its samples carry: meter-collector --host-id (bind, unbind)"},
        JSON_OPT_DEF,
};

/* "list", "bind" or "unbind" */
static const char *host_action = "list";

static int run_host(const struct opt_val *v)
{
	bool listing = strcmp(host_action, "list") == 0;
	if (listing ? v[0].set || v[1].set : !v[0].set || !v[1].set || v[2].set) {
		log_error(listing ? "host list: --role and --host go with bind and unbind"
		                  : "host %s: give --role ROLE and --host HOST",
		          host_action);
		return EXIT_USAGE;
	}
	PGconn *c = connect_or_log();
	if (c == NULL)
		return 1;
	PGresult *res;
	if (listing) {
		res = PQexec(c, "SELECT role, host FROM collector_hosts ORDER BY role, host");
	} else {
		const char *params[] = {v[0].str, v[1].str};
		res = PQexecParams(
		        c,
		        strcmp(host_action, "bind") == 0
		                ? "INSERT INTO collector_hosts (role, host) "
		                  "SELECT $1::text, $2::text WHERE EXISTS (SELECT FROM pg_roles "
		                  "WHERE rolname = $1::text) ON CONFLICT DO NOTHING RETURNING 1"
		                : "DELETE FROM collector_hosts WHERE role = $1 AND host = "
		                  "$2 RETURNING 1",
		        2, NULL, params, NULL, NULL, 0);
	}
	int rc = 0;
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
		log_error("host %s: %s", host_action, msg ? msg : PQerrorMessage(c));
		rc = 1;
	} else if (strcmp(host_action, "bind") == 0) {
		if (PQntuples(res) == 0) {
			/* a role that is not there, or the pair bound already */
			PQclear(res);
			const char *params[] = {v[0].str};
			res = PQexecParams(c, "SELECT 1 FROM pg_roles WHERE rolname = $1", 1, NULL,
			                   params, NULL, NULL, 0);
			if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 0) {
				log_error("host bind: there is no role \"%s\"", v[0].str);
				rc = 1;
			}
		}
		if (rc == 0)
			fprintf(stderr,
			        "meter: role %s sends samples of host %s, and of its other bound "
			        "hosts "
			        "only\n",
			        v[0].str, v[1].str);
	} else if (strcmp(host_action, "unbind") == 0) {
		if (PQntuples(res) == 0) {
			log_error("host unbind: role \"%s\" is not bound to host \"%s\"", v[0].str,
			          v[1].str);
			rc = 1;
		}
	} else if (v[2].set) {
		cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "hosts");
		for (int i = 0; i < PQntuples(res); i++) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "role", PQgetvalue(res, i, 0));
			cJSON_AddStringToObject(e, "host", PQgetvalue(res, i, 1));
			cJSON_AddItemToArray(arr, e);
		}
		char *text = cJSON_PrintUnformatted(o);
		if (text)
			printf("%s\n", text);
		free(text);
		cJSON_Delete(o);
	} else {
		printf("%-32s %s\n", "ROLE", "HOST");
		for (int i = 0; i < PQntuples(res); i++)
			printf("%-32s %s\n", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
		fprintf(stderr,
		        "meter: %d binding(s); a role without one may send any host's samples\n",
		        PQntuples(res));
	}
	PQclear(res);
	PQfinish(c);
	return rc;
}

static const struct verb verbs[] = {
        {"migrate", "usage: meter migrate [--dir DIR]\napplies the migrations not yet applied",
         migrate_opts, NOPTS(migrate_opts), run_migrate},
        {"key",
         "usage: meter key create --admin | --account ID | --hook [--account ID] | meter key "
         "list [--json] | meter key revoke ID\nprints a new API key, once; lists the keys; revokes "
         "one",
         key_opts, NOPTS(key_opts), run_key_create},
        {"plan",
         "usage: meter plan list [--json] | meter plan add --name N --effective-from TIME "
         "--cpu-per-vcpu-hour D --memory-per-gib-hour D [--cpu-floor D]\nthe price plans; "
         "publishes one from a future time on",
         plan_add_opts, NOPTS(plan_add_opts), run_plan_add},
        {"rates",
         "usage: meter rates --vcpus N --memory-gib N [--json]\n"
         "the busy and idle price of one hour of a sandbox",
         rates_opts, NOPTS(rates_opts), run_rates},
        {"export",
         "usage: meter export --account ID --month YYYY-MM [--format focus|usage]\n"
         "a month as CSV for finance tools",
         export_opts, NOPTS(export_opts), run_export},
        {"login-link",
         "usage: meter login-link --admin | --account ID\n"
         "prints a one-time dashboard login link (path), good for 10 minutes",
         link_opts, NOPTS(link_opts), run_login_link},
        {"invoice",
         "usage: meter invoice --account ID --month YYYY-MM [--format json|csv|html]\n"
         "the invoice of a month (a draft, from the rollups)",
         invoice_opts, NOPTS(invoice_opts), run_invoice},
        {"session",
         "usage: meter session list [--account ID] [--json] | meter session revoke "
         "--account ID | --admin\nthe live dashboard sessions and unused login links; "
         "ends an account's (or the admins') at once",
         session_opts, NOPTS(session_opts), run_session},
        {"parked",
         "usage: meter parked | meter parked retry ID | meter parked retry --all\n"
         "the sandboxes the rollup set aside, with why; retry wakes them after a fix",
         parked_opts, NOPTS(parked_opts), run_parked},
        {"host",
         "usage: meter host list [--json] | meter host bind --role ROLE --host HOST | meter "
         "host unbind --role ROLE --host HOST\nthe hosts each collector login role may send "
         "samples of; a role bound to none may send any host's",
         host_opts, NOPTS(host_opts), run_host},
        {"estimate",
         "usage: meter estimate --runs N --minutes N --vcpus N --memory-gib N --busy-vcpus N "
         "[--json]\nthe monthly cost of runs of a sandbox, line by line",
         estimate_opts, NOPTS(estimate_opts), run_estimate},
};

static void usage(FILE *out)
{
	fprintf(out, "usage: meter VERB [options]   (meter VERB --help for its options)\n\n"
	             "verbs:\n");
	for (size_t i = 0; i < NOPTS(verbs); i++) {
		const char *nl = strchr(verbs[i].usage, '\n');
		fprintf(out, "  %-10s %s\n", verbs[i].name, nl ? nl + 1 : "");
	}
	fprintf(out,
	        "\nThe database is DATABASE_URL; without it, libpq's defaults (PGHOST...), or\n"
	        "run from a build folder, the private cluster of scripts/pg.sh.\n");
}

int main(int argc, char **argv)
{
	log_init("meter", LOG_INFO, false);
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < NOPTS(verbs); i++) {
		const struct verb *vb = &verbs[i];
		if (strcmp(argv[1], vb->name) != 0)
			continue;
		/* "meter VERB --help": the verb's usage, whether it takes an action or not
		 * ("meter VERB ACTION --help" is the action's, from verb_opts). */
		if (argc >= 3 && is_help(argv[2])) {
			opts_help(stdout, vb->usage, vb->opts, vb->nopts);
			return 0;
		}
		int first = 2;
		static const struct verb key_list_verb = {
		        "key list",
		        "usage: meter key list [--json]\nthe API keys (never a key itself)",
		        key_list_opts, NOPTS(key_list_opts), run_key_list};
		static const struct verb key_revoke_verb = {
		        "key revoke",
		        "usage: meter key revoke ID\nrevokes a key: it is refused at once, and its "
		        "dashboard sessions end",
		        NULL, 0, run_key_revoke};
		if (strcmp(vb->name, "key") == 0) {
			const char *action = argc < 3 ? "" : argv[2];
			if (strcmp(action, "list") == 0) {
				vb = &key_list_verb;
			} else if (strcmp(action, "revoke") == 0) {
				vb = &key_revoke_verb;
				if (argc >= 4 && argv[3][0] != '-') {
					key_revoke_id = argv[3];
					first = 4;
				}
			} else if (strcmp(action, "create") != 0) {
				log_error("key: unknown action%s%s (expected: key create, key list "
				          "or "
				          "key revoke ID)",
				          argc < 3 ? "" : " ", action);
				return EXIT_USAGE;
			}
			if (first == 2)
				first = 3;
		}
		static const struct verb plan_list_verb = {
		        "plan list",
		        "usage: meter plan list [--json]\nthe price plans, and which is "
		        "in force",
		        plan_list_opts, NOPTS(plan_list_opts), run_plan_list};
		if (strcmp(vb->name, "plan") == 0) {
			const char *action = argc < 3 ? "" : argv[2];
			if (strcmp(action, "list") == 0) {
				vb = &plan_list_verb;
			} else if (strcmp(action, "add") != 0) {
				log_error("plan: unknown action%s%s (expected: plan list or plan "
				          "add)",
				          argc < 3 ? "" : " ", action);
				return EXIT_USAGE;
			}
			first = 3;
		}
		if (strcmp(vb->name, "session") == 0) {
			const char *action = argc < 3 ? "" : argv[2];
			if (strcmp(action, "list") != 0 && strcmp(action, "revoke") != 0) {
				log_error("session: unknown action%s%s (expected: session list or "
				          "session revoke)",
				          argc < 3 ? "" : " ", action);
				return EXIT_USAGE;
			}
			session_revoking = strcmp(action, "revoke") == 0;
			first = 3;
		}
		if (strcmp(vb->name, "parked") == 0 && argc >= 3 && argv[2][0] != '-') {
			if (strcmp(argv[2], "retry") != 0) {
				log_error("parked: unknown action %s (expected: parked retry)",
				          argv[2]);
				return EXIT_USAGE;
			}
			parked_retrying = true;
			first = 3;
			if (argc >= 4 && argv[3][0] != '-') {
				parked_id = argv[3];
				first = 4;
			}
		}
		if (strcmp(vb->name, "host") == 0 && argc >= 3 && argv[2][0] != '-') {
			if (strcmp(argv[2], "list") != 0 && strcmp(argv[2], "bind") != 0 &&
			    strcmp(argv[2], "unbind") != 0) {
				log_error("host: unknown action %s (expected: host list, host bind "
				          "or "
				          "host unbind)",
				          argv[2]);
				return EXIT_USAGE;
			}
			host_action = argv[2];
			first = 3;
		}
		struct opt_val vals[8];
		if (!verb_opts(vb, argc - first, argv + first, vals))
			return EXIT_USAGE;
		return vb->run(vals);
	}
	log_error("unknown verb \"%s\" (see meter --help)", argv[1]);
	return EXIT_USAGE;
}
