/*
 * The Standard Webhooks signature and the endpoint rules (common/webhooks.h,
 * api/webhook.h): the specification's published test vector, 200 random
 * messages against Python's hmac module (an implementation nobody here
 * wrote), secrets that do not decode, URLs refused, and a back-off that
 * spans more than a day.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/webhook.h"
#include "common/netallow.h"
#include "common/webhooks.h"

static void the_published_test_vector_signs_the_same(void **state)
{
	(void)state;
	const char *body = "{\"test\": 2432232314}";
	char sig[WEBHOOK_SIG_BUF];
	assert_true(webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	                         "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
	                         sig));
	assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	/* the prefix is optional */
	assert_true(webhook_sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
	                         1614265330, body, strlen(body), sig));
	assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
	/* one byte more of body, another signature */
	assert_true(webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	                         "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
	                         "{\"test\": 24322323140}", strlen(body) + 1, sig));
	assert_string_not_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

static void secrets_that_do_not_decode_are_refused(void **state)
{
	(void)state;
	char sig[WEBHOOK_SIG_BUF];
	const char *bad[] = {"", "whsec_", "whsec_abc", "whsec_!!!!", "whsec_MfKQ9r8G KYqrTwjU"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_false(webhook_sign(bad[i], "msg_1", 1, "{}", 2, sig));
}

static unsigned rnd(unsigned *s)
{
	*s = *s * 1103515245u + 12345u;
	return (*s >> 16) & 0x7fff;
}

/* 200 random secrets, ids, times and bodies (with padding of every kind) against Python. */
static void random_messages_match_python_hmac(void **state)
{
	(void)state;
	static const char b64[] =
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char path[] = "/tmp/meter-whsign-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *in = fdopen(fd, "w");
	char ours[200][WEBHOOK_SIG_BUF];
	unsigned s = 7;
	for (int i = 0; i < 200; i++) {
		/* a key of 1..64 bytes as base64, with its padding */
		unsigned char key[64];
		int klen = 1 + (int)(rnd(&s) % 64);
		for (int k = 0; k < klen; k++)
			key[k] = (unsigned char)rnd(&s);
		char secret[128] = "whsec_";
		size_t o = 6;
		for (int k = 0; k < klen; k += 3) {
			unsigned v = (unsigned)key[k] << 16 |
			             (k + 1 < klen ? (unsigned)key[k + 1] << 8 : 0) |
			             (k + 2 < klen ? key[k + 2] : 0);
			secret[o++] = b64[v >> 18 & 63];
			secret[o++] = b64[v >> 12 & 63];
			secret[o++] = k + 1 < klen ? b64[v >> 6 & 63] : '=';
			secret[o++] = k + 2 < klen ? b64[v & 63] : '=';
		}
		secret[o] = '\0';
		char id[40], body[300];
		snprintf(id, sizeof id, "msg_%08x%04x", rnd(&s), i);
		long long ts = 1600000000LL + rnd(&s) * 1000LL;
		int blen = (int)(rnd(&s) % 280);
		for (int k = 0; k < blen; k++)
			body[k] = (char)(32 + rnd(&s) % 95);
		body[blen] = '\0';
		assert_true(webhook_sign(secret, id, ts, body, (size_t)blen, ours[i]));
		fprintf(in, "%s\t%s\t%lld\t", secret, id, ts);
		for (int k = 0; k < blen; k++)
			fprintf(in, "%02x", (unsigned char)body[k]);
		fputc('\n', in);
	}
	fclose(in);
	char cmd[512];
	snprintf(
	        cmd, sizeof cmd,
	        "python3 -c 'import sys,hmac,hashlib,base64\n"
	        "for l in open(sys.argv[1]):\n"
	        " s,i,t,b=l.rstrip(\"\\n\").split(\"\\t\")\n"
	        " k=base64.b64decode(s[6:],validate=True)\n"
	        " m=(i+\".\"+t+\".\").encode()+bytes.fromhex(b)\n"
	        " print(\"v1,\"+base64.b64encode(hmac.new(k,m,hashlib.sha256).digest()).decode())' "
	        "%s",
	        path);
	FILE *py = popen(cmd, "r");
	assert_non_null(py);
	char line[128];
	int n = 0;
	while (fgets(line, sizeof line, py)) {
		line[strcspn(line, "\n")] = '\0';
		assert_true(n < 200);
		assert_string_equal(line, ours[n]);
		n++;
	}
	assert_int_equal(pclose(py), 0);
	unlink(path);
	assert_int_equal(n, 200);
}

static void urls_and_events_are_checked(void **state)
{
	(void)state;
	assert_string_equal(webhook_url_problem("https://hooks.example.com/meter?x=1"), "");
	/* loopback only once the allow list holds it */
	assert_string_not_equal(webhook_url_problem("http://127.0.0.1:9000/hook"), "");
	struct net_allow allow;
	char err[128];
	assert_true(net_allow_parse("127.0.0.1/32", &allow, err, sizeof err));
	webhook_allow_set(&allow);
	assert_string_equal(webhook_url_problem("http://127.0.0.1:9000/hook"), "");
	assert_string_not_equal(webhook_url_problem("http://127.0.0.2:9000/hook"), "");
	struct net_allow none = {0};
	webhook_allow_set(&none);
	const char *bad[] = {"",
	                     "ftp://example.com/",
	                     "http://",
	                     "https:///path",
	                     "http://exa mple.com/",
	                     "http://example.com/\n",
	                     "http://example.com/#frag",
	                     "javascript:alert(1)"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_string_not_equal(webhook_url_problem(bad[i]), "");
	char longer[WEBHOOK_URL_MAX + 2];
	memset(longer, 'a', sizeof longer - 1);
	memcpy(longer, "http://", 7);
	longer[sizeof longer - 1] = '\0';
	assert_string_not_equal(webhook_url_problem(longer), "");
	assert_int_equal(webhook_event_bit("invoice.finalized"), WEBHOOK_INVOICE_FINALIZED);
	assert_int_equal(webhook_event_bit("limit.trial_exhausted"), WEBHOOK_TRIAL_EXHAUSTED);
	assert_int_equal(webhook_event_bit("limit.*"), 0);
	assert_int_equal(webhook_event_bit("Invoice.Finalized"), 0);
}

/* Retries go on for more than a day at the default first back-off, and then stop. */
static void the_back_off_spans_more_than_a_day(void **state)
{
	(void)state;
	struct webhook_config cfg = {.first_retry_us = 5000000};
	int64_t total = 0, prev = 0;
	int step;
	for (step = 1; webhook_backoff_us(&cfg, step) >= 0; step++) {
		assert_true(webhook_backoff_us(&cfg, step) >= prev);
		prev = webhook_backoff_us(&cfg, step);
		total += prev;
	}
	assert_true(total > 24 * 3600 * INT64_C(1000000));
	assert_int_equal(total, INT64_C(114155000000)); /* 31.7 hours, as api/webhook.h says */
	assert_int_equal(step, 12);                     /* twelve attempts in all */
	assert_int_equal(webhook_backoff_us(&cfg, 0), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(the_published_test_vector_signs_the_same),
	        cmocka_unit_test(secrets_that_do_not_decode_are_refused),
	        cmocka_unit_test(random_messages_match_python_hmac),
	        cmocka_unit_test(urls_and_events_are_checked),
	        cmocka_unit_test(the_back_off_spans_more_than_a_day),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
