/*
 * tests/support/apifx.h: the fixture of meter-api's tests over real HTTP
 * (tests/integration/test_accounts.c, test_sandboxes.c, test_rollups.c,
 * test_usage.c, test_invoices.c, test_plans.c, test_service.c and
 * test_dashboard.c), and the helpers more than one of them calls.
 *
 * Each test runs between apifx_setup and apifx_teardown: a database of its
 * own, migrated and empty, and one meter-api on it, on a free port. seed()
 * adds the accounts and keys most tests start from. A test may restart
 * f->api with other options, start a second process in f->api2, or move to
 * a PostgreSQL cluster of its own in f->pgdir; the teardown stops and removes
 * whatever of these is left, also after a failed test.
 *
 * The helpers fail the running test (cmocka's fail_msg) instead of returning
 * an error, so a test reads as the steps it takes; they carry the short
 * names the tests are written with.
 */
#ifndef TESTS_SUPPORT_APIFX_H
#define TESTS_SUPPORT_APIFX_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "common/keys.h"
#include "tests/support/csvread.h"
#include "tests/support/http.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api, api2; /* api2: a second process sharing the rollup work */
	/* seed()'s keys: an admin, acme's, other's, and a revoked admin key */
	char admin[KEY_LEN + 1], acct[KEY_LEN + 1], other[KEY_LEN + 1], revoked[KEY_LEN + 1];
	/* a cluster of the test's own (cluster.h) in pgdir, under tmp; "" when none */
	char pgdir[96], tmp[64];
};

/*
 * A struct fx in *state: the database (tag "api") migrated, meter-api started
 * on it (--log-level=info). meter-api processes keep every raw partition
 * (METER_RAW_RETENTION=0: the tests' data is old); a test that means to drop
 * them sets its own. -1 when the database or the process cannot be had.
 */
int apifx_setup(void **state);
/* Stops f->api and f->api2 if running, drops the database, removes the own cluster, frees f. */
int apifx_teardown(void **state);

/* Accounts acme (paid) and other (trial), their keys, and two sandboxes of acme (sb-1
 * running, sb-stopped); an admin key and a revoked one. */
void seed(struct fx *f);

/* Runs SQL on the test's database; fails the test when it fails. */
void sql(struct fx *f, const char *q);
/* The one integer q gives (one row, one column), or -1 with the error on stderr. */
long num(struct fx *f, const char *q);
/* The text of q's first value, in buf; fails the test when there is none. */
char *text(struct fx *f, const char *q, char *buf, size_t len);

/*
 * Waits (10 s at most, then fails) until the rollup worker has taken every
 * mark of rollup_queue but those parked, and the trial queue is empty: a
 * month stays a draft while its trial is pending.
 */
void wait_rollups(struct fx *f);

/* One request to f->api with key k (NULL: none) and body (NULL: none). The caller frees
 * the answer with http_free. */
struct http_res call(struct fx *f, const char *method, const char *path, const char *k,
                     const char *body);
/* GET path with the admin key: its JSON, which must come with status want. Caller frees. */
cJSON *get_json(struct fx *f, const char *path, int want);
/* A POST of a form (body may be NULL) with one more header line (NULL: none), no key.
 * The caller frees the answer. */
struct http_res form_post(struct fx *f, const char *path, const char *body, const char *header);
/* The "Cookie: ..." header line that sends back the session r set. */
void cookie_of(const struct http_res *r, char *out, size_t len);
/* A TCP connection to the API on port on loopback, or -1. The caller closes it. */
int tcp(int port);

/* o's string field name (owned by o); fails the test when it is not a string. */
const char *str(cJSON *o, const char *name);
/* o's decimal string field name, in billionths; fails the test when it is not one. */
int64_t nano_of(cJSON *o, const char *name);

/* One CSV row split in place into at most max fields: csv_fields (csv.h). */
static inline int csv_split(char *line, char **fields, int max)
{
	return csv_fields(line, fields, max);
}
/*
 * Checks a FOCUS export: 19 columns named as FOCUS names them, BilledCost
 * equal to EffectiveCost on each row and summing exactly to total (a decimal,
 * as meter_money_format_exact writes it), usage_rows rows of usage, each in
 * vCPU-Hours or GiB-Hours of a sandbox. csv is not changed.
 */
void check_focus(const char *csv, const char *total, int usage_rows);

/* A one-time login link of account from the CLI (meter login-link), as a URL of f->api. */
void login_link(struct fx *f, const char *account, char *out, size_t len);

/* account_day from hours written by hand, as the rollup keeps it (migrations/0021) */
#define ACCOUNT_DAYS_FROM_HOURS                                                                    \
	"INSERT INTO account_day SELECT account_id, (hour AT TIME ZONE 'UTC')::date, "             \
	"price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), "    \
	"sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 2, 3"

#endif
