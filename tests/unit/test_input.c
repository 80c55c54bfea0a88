/* Strict input of the API that is not JSON: the login form's fields (api/input.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "api/input.h"

#define F(s) s, strlen(s)

static void a_form_field_is_found_and_decoded(void **state)
{
	(void)state;
	char out[32];
	assert_true(in_form_value(F("key=mk_abc"), "key", out, sizeof out));
	assert_string_equal(out, "mk_abc");
	assert_true(in_form_value(F("a=1&key=x%2By+z&b=2"), "key", out, sizeof out));
	assert_string_equal(out, "x+y z");
	assert_true(in_form_value(F("key=%e2%82%AC"), "key", out, sizeof out));
	assert_string_equal(out, "\xe2\x82\xac");
	assert_true(in_form_value(F("key="), "key", out, sizeof out));
	assert_string_equal(out, "");
	/* only the whole name: "monkey" and "key2" are other fields */
	assert_true(in_form_value(F("monkey=1&key2=2&key=3"), "key", out, sizeof out));
	assert_string_equal(out, "3");
	/* the body is len bytes, not up to a NUL */
	assert_true(in_form_value("key=abcdef", 7, "key", out, sizeof out));
	assert_string_equal(out, "abc");
}

static void a_malformed_or_doubled_field_is_refused(void **state)
{
	(void)state;
	char out[8];
	static const char *const bad[] = {
	        "",        "key",         "other=1",
	        "key=%",   "key=%4",      "key=%zz",
	        "key=%+1", "key=% 1",     "key=%00",
	        "key=a%0", "key=1&key=1", "key=12345678", /* 8 bytes do not fit with the NUL */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		strcpy(out, "junk");
		if (in_form_value(F(bad[i]), "key", out, sizeof out))
			fail_msg("\"%s\" was taken as \"%s\"", bad[i], out);
		assert_string_equal(out, "");
	}
	assert_false(in_form_value(NULL, 0, "key", out, sizeof out));
	assert_true(in_form_value(F("key=1234567"), "key", out, sizeof out)); /* 7 fit */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(a_form_field_is_found_and_decoded),
	        cmocka_unit_test(a_malformed_or_doubled_field_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
