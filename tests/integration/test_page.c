/*
 * The invoice page in a real browser: Debian's chromium, headless, renders
 * the worked example's HTML, takes a screenshot, and its DOM shows the total.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meter/invoice.h"
#include "meter/timefmt.h"
#include "reports/invoice_doc.h"
#include "tests/support/fakecg.h"
#include "tests/support/run.h"

#define H INT64_C(3600000000)

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/meter-page-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	fakecg_remove(dir);
	return 0;
}

static const char *chromium(void)
{
	static const char *const where[] = {"/usr/bin/chromium", "/usr/bin/chromium-browser"};
	for (size_t i = 0; i < 2; i++)
		if (access(where[i], X_OK) == 0)
			return where[i];
	fail_msg("chromium is not installed: scripts/deps.sh installs Debian's chromium");
	return NULL;
}

static void the_invoice_page_renders_in_headless_chromium(void **state)
{
	(void)state;
	struct meter_plan p = {.id = 1,
	                       .cpu_vcpu_hour = 25000000,
	                       .memory_gib_hour = 7500000,
	                       .cpu_floor_ppm = 25000};
	snprintf(p.name, sizeof p.name, "default");
	struct meter_plan_usage u = {
	        .plan = &p,
	        .used = {.cpu_billed_us = 15 * H, .wall_us = 30 * H, .mem_mgib_us = 4000 * 30 * H}};
	struct meter_invoice inv;
	assert_int_equal(meter_invoice_build(&u, 1, &inv), METER_OK);
	struct invoice_meta m = {
	        .account_id = "acme", .account_name = "Acme <Sandboxes> & Co", .status = "final"};
	meter_time_parse("2026-10-01T00:00:00Z", &m.month_start_us);
	char *html = report_invoice_html(&m, &inv);
	assert_non_null(html);
	assert_null(strstr(html, "<script")); /* self-contained, nothing to fetch */
	assert_null(strstr(html, "http://"));
	assert_null(strstr(html, "https://"));
	char page[128], png[128], profile[128], url[160], size[32];
	snprintf(page, sizeof page, "%s/invoice.html", dir);
	snprintf(png, sizeof png, "%s/invoice.png", dir);
	snprintf(profile, sizeof profile, "%s/profile", dir);
	snprintf(url, sizeof url, "file://%s", page);
	FILE *f = fopen(page, "w");
	assert_non_null(f);
	fputs(html, f);
	fclose(f);
	free(html);
	char shot[160], dataarg[160];
	snprintf(shot, sizeof shot, "--screenshot=%s", png);
	snprintf(dataarg, sizeof dataarg, "--user-data-dir=%s", profile);
	snprintf(size, sizeof size, "--window-size=%d,%d", 900, 1000);
	const char *base[] = {"--headless",
	                      "--no-sandbox",
	                      "--disable-gpu",
	                      "--no-first-run",
	                      "--disable-background-networking",
	                      "--disable-component-update",
	                      "--disable-sync",
	                      "--disable-quic",
	                      dataarg};
	struct run_result *res = malloc(sizeof *res);
	const char *argv[16];
	int n = 0;
	argv[n++] = chromium();
	for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
		argv[n++] = base[i];
	argv[n++] = shot;
	argv[n++] = size;
	argv[n++] = url;
	argv[n] = NULL;
	run_program(argv, NULL, res);
	struct stat st;
	if (stat(png, &st) != 0 || st.st_size < 10000)
		fail_msg("no screenshot from chromium (status %d): %s", res->status, res->err);
	unsigned char sig[8];
	f = fopen(png, "rb");
	assert_int_equal(fread(sig, 1, 8, f), 8);
	fclose(f);
	assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
	/* the DOM chromium built holds the total, and the name escaped, not as markup */
	argv[n - 3] = "--dump-dom";
	argv[n - 2] = url;
	argv[n - 1] = NULL;
	run_program(argv, NULL, res);
	assert_int_equal(res->status, 0);
	assert_non_null(strstr(res->out, "id=\"total\">$1.28"));
	assert_non_null(strstr(res->out, "exact 1.275"));
	assert_non_null(strstr(res->out, "Acme &lt;Sandboxes&gt; &amp; Co"));
	free(res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(the_invoice_page_renders_in_headless_chromium,
	                                        setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
