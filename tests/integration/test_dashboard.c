/*
 * The dashboard as a person uses it: Debian's chromium, headless, spends a
 * login link by pressing its form's button and lands on the dashboard, whose
 * month to date is the invoice draft's, one bar a day, no script; then the
 * login form's session cookie (HttpOnly, SameSite=Strict), a sandbox's page,
 * the FOCUS download, logout, and another account's pages refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/apifx.h"
#include "tests/support/http.h"

/*
 * Debian's chromium, headless, driven over its DevTools pipe
 * (--remote-debugging-pipe: JSON messages ending in a NUL, read on fd 3 and
 * written on fd 4). It opens pages and presses their buttons as a person
 * would, so a login link is spent by its own form.
 */
struct browser {
	pid_t pid;
	int to, from; /* we write to, read from */
	char *buf;
	size_t len, cap;
	int next_id;
	char session[128];
	char profile[96];
};

static void browser_send(struct browser *b, const char *method, cJSON *params, int id)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddNumberToObject(m, "id", id);
	cJSON_AddStringToObject(m, "method", method);
	if (params)
		cJSON_AddItemToObject(m, "params", params);
	if (b->session[0])
		cJSON_AddStringToObject(m, "sessionId", b->session);
	char *text = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	size_t n = strlen(text) + 1; /* the NUL ends the message */
	assert_int_equal(write(b->to, text, n), (ssize_t)n);
	cJSON_free(text);
}

/*
 * The answer to message id (its "result"; NULL for an error, when may_fail),
 * read within 30 s; the events between are dropped.
 */
static cJSON *browser_wait(struct browser *b, int id, bool may_fail)
{
	for (int rounds = 0; rounds < 3000; rounds++) {
		char *end = b->len ? memchr(b->buf, '\0', b->len) : NULL;
		if (end) {
			cJSON *m = cJSON_Parse(b->buf);
			size_t used = (size_t)(end - b->buf) + 1;
			memmove(b->buf, end + 1, b->len - used);
			b->len -= used;
			cJSON *mid = cJSON_GetObjectItem(m, "id");
			if (cJSON_IsNumber(mid) && mid->valueint == id) {
				cJSON *e = cJSON_GetObjectItem(m, "error");
				if (e && may_fail) {
					cJSON_Delete(m);
					return NULL;
				}
				if (e)
					fail_msg("chromium refused message %d: %s", id,
					         cJSON_GetStringValue(
					                 cJSON_GetObjectItem(e, "message")));
				cJSON *res = cJSON_DetachItemFromObject(m, "result");
				cJSON_Delete(m);
				return res;
			}
			cJSON_Delete(m);
			continue;
		}
		if (b->cap - b->len < 65536) {
			b->cap = b->cap * 2 + 65536;
			b->buf = realloc(b->buf, b->cap);
			assert_non_null(b->buf);
		}
		struct pollfd pfd = {.fd = b->from, .events = POLLIN};
		if (poll(&pfd, 1, 10) == 1) {
			ssize_t n = read(b->from, b->buf + b->len, b->cap - b->len);
			if (n <= 0)
				fail_msg("chromium closed its DevTools pipe");
			b->len += (size_t)n;
		}
	}
	fail_msg("chromium did not answer message %d in 30 s", id);
	return NULL;
}

static cJSON *browser_call(struct browser *b, const char *method, cJSON *params)
{
	int id = ++b->next_id;
	browser_send(b, method, params, id);
	return browser_wait(b, id, false);
}

static void browser_start(struct browser *b)
{
	if (access("/usr/bin/chromium", X_OK) != 0)
		fail_msg("chromium is not installed: scripts/deps.sh installs Debian's chromium");
	*b = (struct browser){0};
	snprintf(b->profile, sizeof b->profile, "--user-data-dir=/tmp/meter-chromium-%d",
	         (int)getpid());
	int to[2], from[2];
	assert_int_equal(pipe(to), 0);
	assert_int_equal(pipe(from), 0);
	b->pid = fork();
	if (b->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
		dup2(to[0], 3);
		dup2(from[1], 4);
		for (int fd = 5; fd < 1024; fd++)
			close(fd);
		execl("/usr/bin/chromium", "chromium", "--headless", "--no-sandbox",
		      "--disable-gpu", "--no-first-run", "--disable-background-networking",
		      "--disable-component-update", "--disable-sync", "--disable-quic", b->profile,
		      "--window-size=1000,1300", "--remote-debugging-pipe", "about:blank",
		      (char *)NULL);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	b->to = to[1];
	b->from = from[0];
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "url", "about:blank");
	cJSON *t = browser_call(b, "Target.createTarget", p);
	p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "targetId",
	                        cJSON_GetStringValue(cJSON_GetObjectItem(t, "targetId")));
	cJSON_AddBoolToObject(p, "flatten", true);
	cJSON_Delete(t);
	t = browser_call(b, "Target.attachToTarget", p);
	snprintf(b->session, sizeof b->session, "%s",
	         cJSON_GetStringValue(cJSON_GetObjectItem(t, "sessionId")));
	cJSON_Delete(t);
	assert_true(b->session[0] != '\0');
}

/* What expr gives in the page, as text (malloc'd; "" while a page is replaced). */
static char *browser_eval(struct browser *b, const char *expr)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "expression", expr);
	cJSON_AddBoolToObject(p, "returnByValue", true);
	int id = ++b->next_id;
	browser_send(b, "Runtime.evaluate", p, id);
	cJSON *r = browser_wait(b, id, true);
	cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "result"), "value");
	char *out = strdup(cJSON_IsString(v) ? v->valuestring : "");
	cJSON_Delete(r);
	return out;
}

/* Waits until the page at path has loaded (30 s at most). */
static void browser_until(struct browser *b, const char *path)
{
	char want[256];
	snprintf(want, sizeof want, "%s complete", path);
	for (int i = 0; i < 300; i++) {
		char *at = browser_eval(b, "location.pathname + ' ' + document.readyState");
		bool there = strcmp(at, want) == 0;
		free(at);
		if (there)
			return;
		usleep(100000);
	}
	char *at = browser_eval(b, "location.href + ' ' + document.readyState + ' ' + "
	                           "document.body.innerText.slice(0, 300)");
	fail_msg("chromium did not get to %s: it is at %s", path, at);
}

static void browser_open(struct browser *b, const char *url, const char *path)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "url", url);
	cJSON_Delete(browser_call(b, "Page.navigate", p));
	browser_until(b, path);
}

/* A screenshot of the page: its PNG's size in bytes. */
static size_t browser_screenshot(struct browser *b)
{
	cJSON *r = browser_call(b, "Page.captureScreenshot", cJSON_CreateObject());
	const char *data = cJSON_GetStringValue(cJSON_GetObjectItem(r, "data"));
	size_t n = data ? strlen(data) / 4 * 3 : 0; /* base64 */
	cJSON_Delete(r);
	return n;
}

static void browser_stop(struct browser *b)
{
	b->session[0] = '\0';
	browser_send(b, "Browser.close", NULL, ++b->next_id);
	close(b->to);
	close(b->from);
	int st;
	for (int i = 0; i < 50 && waitpid(b->pid, &st, WNOHANG) == 0; i++)
		usleep(100000);
	kill(b->pid, SIGKILL);
	waitpid(b->pid, NULL, 0);
	free(b->buf);
	char rm[128];
	snprintf(rm, sizeof rm, "rm -rf /tmp/meter-chromium-%d", (int)getpid());
	assert_int_equal(system(rm), 0);
}

static void the_dashboard_in_headless_chromium(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	/* two days of this month with a busy hour each */
	sql(f, "INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	       "cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	       "SELECT 'acme', 'sb-1', date_trunc('month', now()) + h * interval '1 hour', 1, "
	       "7200000000, 7200000000, 3600000000, 0, 3600000000, 14400000000000 "
	       "FROM unnest(ARRAY[1, 25]) h");
	sql(f,
	    "INSERT INTO account_month SELECT account_id, date_trunc('month', now())::date, "
	    "price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us), "
	    "sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 3");
	sql(f, ACCOUNT_DAYS_FROM_HOURS);
	/* and the sandbox's month, as the rollup keeps it */
	sql(f,
	    "INSERT INTO sandbox_month SELECT account_id, date_trunc('month', now())::date, "
	    "sandbox_id, price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	    "sum(idle_us), sum(wall_us), sum(memory_mgib_us) FROM usage_hourly GROUP BY 1, 3, 4");
	sql(f, "SELECT meter_sandbox_month_costs(ARRAY['acme'], ARRAY['sb-1'], "
	       "ARRAY[date_trunc('month', now())::date])");
	time_t now = time(NULL);
	char month[16], path[96], url[160];
	strftime(month, sizeof month, "%Y-%m", gmtime(&now));
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s", month);
	struct http_res r = call(f, "GET", path, f->acct, NULL);
	cJSON *o = http_json(&r);
	char want[64];
	snprintf(want, sizeof want, "id=\"mtd\" title=\"exact %s\">$%s<", str(o, "total_exact"),
	         str(o, "total"));
	assert_string_equal(str(o, "total"), "0.16");
	cJSON_Delete(o);
	http_free(&r);

	/* a person: a login link, its button pressed, then the page chromium ends up on */
	struct browser b;
	browser_start(&b);
	login_link(f, "acme", url, sizeof url);
	browser_open(&b, url, strstr(url, "/login/"));
	free(browser_eval(&b, "document.querySelector('form button').click(), ''"));
	browser_until(&b, "/dashboard");
	char *dom = browser_eval(&b, "document.documentElement.outerHTML");
	if (strstr(dom, want) == NULL)
		fail_msg("the dashboard's month to date is not the invoice draft's (%s): %.300s",
		         want, dom);
	int bars = 0;
	for (const char *p = dom; (p = strstr(p, "class=\"day\"")) != NULL; p++)
		bars++;
	assert_int_equal(bars, 2); /* one bar per day with usage */
	assert_non_null(strstr(dom, "id=\"asof\""));
	assert_non_null(strstr(dom, "href=\"/dashboard/sandboxes/sb-1\""));
	assert_null(strstr(dom, "<script"));
	free(dom);
	assert_true(browser_screenshot(&b) > 10000);
	browser_stop(&b);
	/* a used link does not work again */
	http_do_ex(f->api.port, "POST", strstr(url, "/login/"), NULL, NULL, 0, NULL, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);

	/* the form: a session cookie, HttpOnly and SameSite=Strict; logout ends it */
	char form[96], cookie[160];
	snprintf(form, sizeof form, "key=%s", f->acct);
	http_do_ex(f->api.port, "POST", "/login", NULL, form, strlen(form), NULL, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/dashboard");
	assert_non_null(strstr(r.cookie, "HttpOnly"));
	assert_non_null(strstr(r.cookie, "SameSite=Strict"));
	snprintf(cookie, sizeof cookie, "Cookie: %.*s", (int)strcspn(r.cookie, ";"), r.cookie);
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.type, "text/html; charset=utf-8");
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard/sandboxes/sb-1", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "id=\"cost\""));
	http_free(&r);
	char exp[96];
	snprintf(exp, sizeof exp, "/dashboard/exports/%s?format=focus", month);
	http_do_ex(f->api.port, "GET", exp, NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 200);
	check_focus(r.body, "0.16", 2); /* the download from the page: the draft's total */
	http_free(&r);
	http_do_ex(f->api.port, "POST", "/logout", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_non_null(strstr(r.cookie, "Max-Age=0"));
	http_free(&r);
	http_do_ex(f->api.port, "GET", "/dashboard", NULL, NULL, 0, cookie, &r);
	assert_int_equal(r.status, 303);
	assert_string_equal(r.location, "/login");
	http_free(&r);
	http_do_ex(f->api.port, "POST", "/login", NULL, "key=mk_nope", 11, NULL, &r);
	assert_string_equal(r.location, "/login?failed=1");
	http_free(&r);

	/* another account's dashboard or sandbox: 404 */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) VALUES ('o-1', 'other', "
	       "1, 1)");
	r = call(f, "GET", "/dashboard?account=other", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/dashboard/sandboxes/o-1", f->acct, NULL);
	assert_int_equal(r.status, 404);
	http_free(&r);
	r = call(f, "GET", "/dashboard?account=other", f->admin, NULL);
	assert_int_equal(r.status, 200); /* an admin picks any */
	http_free(&r);
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(the_dashboard_in_headless_chromium, apifx_setup,
	                                        apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
