/*
 * Accounts and their keys, over real HTTP against a real PostgreSQL: a key
 * sees its own account only (another's is 404, a revoked or unknown key
 * 401, an account key on an admin route 403); keys are listed without the
 * key, note their last use at most once a minute, and are revoked at once
 * on every meter-api process, ending the dashboard sessions they opened; the
 * CLI lists and revokes them too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/keys.h"
#include "tests/support/apifx.h"
#include "tests/support/http.h"
#include "tests/support/run.h"

static void a_key_sees_its_own_account_only(void **state)
{
	struct fx *f = *state;
	seed(f);
	const char *theirs[] = {"/v1/accounts/other", "/v1/accounts/other/trial",
	                        ("/v1/accounts/other/usage?from=2026-10-01T00:00:00Z&"
	                         "to=2026-10-02T00:00:00Z"),
	                        "/v1/accounts/nobody"};
	for (size_t i = 0; i < 4; i++) {
		struct http_res r = call(f, "GET", theirs[i], f->acct, NULL);
		if (r.status != 404)
			fail_msg("GET %s with acme's key: %d", theirs[i], r.status);
		assert_string_equal(r.type, "application/problem+json");
		http_free(&r);
	}
	struct http_res r = call(f, "GET", "/v1/sandboxes/sb-1", f->other, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/v1/sandboxes/sb-1", f->acct, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	const char *keys[] = {
	        NULL, f->revoked,
	        "mk_0000000000000000000000000000000000000000000000000000000000000000"};
	for (size_t i = 0; i < 3; i++) {
		r = call(f, "GET", "/v1/accounts/acme/trial", keys[i], NULL);
		assert_int_equal(r.status, 401);
		http_free(&r);
	}
	r = call(f, "POST", "/v1/accounts", f->acct, "{\"name\": \"x\", \"plan\": \"paid\"}");
	assert_int_equal(r.status, 403);
	http_free(&r);
}

/* The newest key's last use, set a minute and more back, is noted again by a request. */
static void noted_after_a_minute(struct fx *f, const char *key, const char *method,
                                 const char *path, const char *body)
{
	sql(f, "UPDATE api_keys SET last_used_at = now() - interval '61 seconds' "
	       "WHERE id = (SELECT max(id) FROM api_keys)");
	struct http_res r = call(f, method, path, key, body);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys WHERE id = (SELECT max(id) FROM "
	                        "api_keys) AND last_used_at > now() - interval '30 seconds'"),
	                 1);
}

/*
 * Keys are listed (never the key), note their last use, and are revoked at
 * once: the next request with a revoked key is refused by every meter-api
 * process (no cache outlives it), and the dashboard session it opened ends.
 * The CLI lists and revokes too. Bad requests are refused and change nothing.
 */
static void keys_are_listed_and_revoked_at_once(void **state)
{
	struct fx *f = *state;
	seed(f);
	struct http_res r = call(f, "POST", "/v1/keys", f->admin,
	                         "{\"role\": \"account\", \"account_id\": \"acme\"}");
	assert_int_equal(r.status, 201);
	cJSON *o = http_json(&r);
	char key[KEY_LEN + 1];
	snprintf(key, sizeof key, "%s", str(o, "key"));
	int id = cJSON_GetObjectItem(o, "id")->valueint;
	cJSON_Delete(o);
	http_free(&r);
	char path[64];
	snprintf(path, sizeof path, "/v1/keys/%d", id);
	/* listed, never used yet; the list holds no key */
	r = call(f, "GET", "/v1/keys", f->admin, NULL);
	assert_int_equal(r.status, 200);
	assert_null(strstr(r.body, key));
	o = http_json(&r);
	http_free(&r);
	cJSON *k, *mine = NULL;
	cJSON_ArrayForEach(
	        k, cJSON_GetObjectItem(o, "keys")) if (cJSON_GetObjectItem(k, "id")->valueint == id)
	        mine = k;
	assert_non_null(mine);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(mine, "last_used_at")));
	char first[KEY_SHOWN_CHARS + 1];
	snprintf(first, sizeof first, "%.11s", key);
	assert_string_equal(str(mine, "shown"), first);
	cJSON_Delete(o);
	/* used on two processes, and for a dashboard session */
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.api_url, "--log-level=info"));
	r = call(f, "GET", "/v1/accounts/acme", key, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	struct http_res r2;
	http_do(f->api2.port, "GET", "/v1/accounts/acme", key, NULL, 0, &r2);
	assert_int_equal(r2.status, 200);
	http_free(&r2);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys WHERE last_used_at IS NOT NULL "
	                        "AND shown = left((SELECT shown FROM api_keys ORDER BY id DESC "
	                        "LIMIT 1), 11) AND id = (SELECT max(id) FROM api_keys)"),
	                 1);
	/* Noted at most once a minute: a use within the minute leaves the note as it is
	 * (on the quota check's pipelined read too), one after it notes again. */
	char noted[64], again[64], body[128];
	text(f, "SELECT last_used_at FROM api_keys WHERE id = (SELECT max(id) FROM api_keys)",
	     noted, sizeof noted);
	snprintf(body, sizeof body, "{\"account_id\": \"acme\", \"vcpus\": 1, \"memory_gib\": 1}");
	r = call(f, "POST", "/v1/quota/check", key, body);
	assert_int_equal(r.status, 200);
	http_free(&r);
	text(f, "SELECT last_used_at FROM api_keys WHERE id = (SELECT max(id) FROM api_keys)",
	     again, sizeof again);
	assert_string_equal(again, noted);
	noted_after_a_minute(f, key, "POST", "/v1/quota/check", body);
	noted_after_a_minute(f, key, "GET", "/v1/accounts/acme", NULL);
	char form[96], cookie[200];
	snprintf(form, sizeof form, "key=%s", key);
	r = form_post(f, "/login", form, NULL);
	assert_int_equal(r.status, 303);
	cookie_of(&r, cookie, sizeof cookie);
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	http_free(&r);
	/* an account key may not manage keys */
	r = call(f, "DELETE", path, key, NULL);
	assert_int_equal(r.status, 403);
	http_free(&r);
	/* revoked: refused at once by both processes; its session is over */
	r = call(f, "DELETE", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	o = http_json(&r);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(o, "revoked_at")));
	cJSON_Delete(o);
	http_free(&r);
	r = call(f, "GET", "/v1/accounts/acme", key, NULL);
	assert_int_equal(r.status, 401);
	http_free(&r);
	http_do(f->api2.port, "GET", "/v1/accounts/acme", key, NULL, 0, &r2);
	assert_int_equal(r2.status, 401);
	http_free(&r2);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login");
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM sessions WHERE key_id IS NOT NULL"), 0);
	/* again: the same revocation; unknown keys and bad bodies change nothing */
	r = call(f, "DELETE", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	r = call(f, "DELETE", "/v1/keys/999999", f->admin, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	long keys = num(f, "SELECT count(*) FROM api_keys");
	const char *bad[] = {"{\"role\": \"account\"}",
	                     "{\"role\": \"admin\", \"account_id\": \"acme\"}",
	                     "{\"role\": \"root\"}",
	                     "{\"role\": \"account\", \"account_id\": \"acme\", \"x\": 1}"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		r = call(f, "POST", "/v1/keys", f->admin, bad[i]);
		assert_true(r.status == 422 || r.status == 400);
		http_free(&r);
	}
	r = call(f, "POST", "/v1/keys", f->admin,
	         "{\"role\": \"account\", \"account_id\": \"nope\"}");
	assert_int_equal(r.status, 404);
	http_free(&r);
	assert_int_equal(num(f, "SELECT count(*) FROM api_keys"), keys);
	/* the CLI: the list shows the revoked key; revoking acme's own key ends it */
	struct run_result *rr = malloc(sizeof *rr);
	const char *list[] = {METER_BIN, "key", "list", NULL};
	run_program(list, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	char shown[16];
	snprintf(shown, sizeof shown, "%.11s", key);
	assert_non_null(strstr(rr->out, shown));
	long acct_id = num(f, "SELECT id FROM api_keys WHERE role = 'account' AND account_id = "
	                      "'acme' AND revoked_at IS NULL ORDER BY id LIMIT 1");
	char ids[24];
	snprintf(ids, sizeof ids, "%ld", acct_id);
	r = call(f, "GET", "/v1/accounts/acme", f->acct, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	const char *revoke[] = {METER_BIN, "key", "revoke", ids, NULL};
	run_program(revoke, f->db.url, rr);
	assert_int_equal(rr->status, 0);
	r = call(f, "GET", "/v1/accounts/acme", f->acct, NULL);
	assert_int_equal(r.status, 401);
	http_free(&r);
	const char *nokey[] = {METER_BIN, "key", "revoke", "0", NULL};
	run_program(nokey, f->db.url, rr);
	assert_int_not_equal(rr->status, 0);
	free(rr);
}

/* A session a login link of account opened: its cookie (the test fails otherwise). */
static void link_session(struct fx *f, const char *account, char *cookie, size_t len)
{
	char url[256];
	struct http_res r;
	login_link(f, account, url, sizeof url);
	http_do_ex(f->api.port, "POST", strstr(url, "/login/"), NULL, NULL, 0, NULL, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/dashboard");
	/* an hour: no key stands behind it */
	assert_non_null(strstr(r.cookie, "Max-Age=3600"));
	cookie_of(&r, cookie, len);
	http_free(&r);
}

/* The dashboard's answer to a session cookie: 200, or 303 to /login once it is over. */
static int dashboard(struct fx *f, const char *cookie)
{
	struct http_res r;
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	int st = r.status == 303 && strcmp(r.location, "/login") == 0 ? 303 : r.status;
	http_free(&r);
	return st;
}

/* meter session ARGS...: its exit status, output in rr. */
static int session_cli(struct fx *f, struct run_result *rr, const char *a, const char *b,
                       const char *c)
{
	const char *argv[] = {METER_BIN, "session", a, b, c, NULL};
	run_program(argv, f->db.url, rr);
	return rr->status;
}

/*
 * Sessions end with their access (issue 39, finding 9): a login link's session
 * lasts an hour and ends when its account has no key left unrevoked; meter
 * session list shows the live ones, meter session revoke ends an account's
 * at once.
 */
static void revoking_an_account_s_keys_ends_every_way_into_its_dashboard(void **state)
{
	struct fx *f = *state;
	char cookie[200], path[64], more[64];
	seed(f);
	link_session(f, "acme", cookie, sizeof cookie);
	assert_int_equal(dashboard(f, cookie), 200);
	/* a second key of acme: revoking the first leaves a key, and the session */
	struct http_res r = call(f, "POST", "/v1/keys", f->admin,
	                         "{\"role\": \"account\", \"account_id\": \"acme\"}");
	assert_int_equal(r.status, 201);
	http_free(&r);
	snprintf(path, sizeof path, "/v1/keys/%ld",
	         num(f, "SELECT min(id) FROM api_keys WHERE account_id = 'acme' AND revoked_at IS "
	                "NULL"));
	snprintf(more, sizeof more, "/v1/keys/%ld",
	         num(f, "SELECT max(id) FROM api_keys WHERE account_id = 'acme'"));
	r = call(f, "DELETE", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_int_equal(dashboard(f, cookie), 200);
	/* the last one: no key stands behind the link's session any more */
	r = call(f, "DELETE", more, f->admin, NULL);
	assert_int_equal(r.status, 200);
	http_free(&r);
	assert_int_equal(dashboard(f, cookie), 303);
	/* listed, and ended at once by the operator; other's untouched */
	char other[200];
	link_session(f, "acme", cookie, sizeof cookie);
	link_session(f, "other", other, sizeof other);
	struct run_result *rr = malloc(sizeof *rr);
	assert_int_equal(session_cli(f, rr, "list", "--account", "acme"), 0);
	assert_int_equal(run_lines(rr->out), 2); /* the heading and the session */
	assert_non_null(strstr(rr->out, "session  acme"));
	assert_int_equal(session_cli(f, rr, "revoke", "--account", "acme"), 0);
	assert_non_null(strstr(rr->err, "1 session(s) and link(s) of account acme ended"));
	assert_int_equal(dashboard(f, cookie), 303);
	assert_int_equal(dashboard(f, other), 200);
	assert_int_equal(session_cli(f, rr, "revoke", "--account", "nobody"), 1);
	assert_non_null(strstr(rr->err, "nobody"));
	assert_int_equal(session_cli(f, rr, "revoke", NULL, NULL), 2);
	free(rr);
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(a_key_sees_its_own_account_only, apifx_setup,
	                                        apifx_teardown),
	        cmocka_unit_test_setup_teardown(keys_are_listed_and_revoked_at_once, apifx_setup,
	                                        apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                revoking_an_account_s_keys_ends_every_way_into_its_dashboard, apifx_setup,
	                apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
