/* Log lines: one a message, whatever the names it quotes hold. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* What log_msg wrote to standard error for a message about name: a sandbox's
 * (or a connection's, when connect). */
static void logged_as(bool connect, const char *name, char *out, size_t len)
{
	fflush(stderr);
	int saved = dup(2);
	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	dup2(fileno(tmp), 2);
	log_init("meter-collector", LOG_INFO, false);
	if (connect)
		log_msg(LOG_WARN, "could not connect: %s", name);
	else
		log_msg(LOG_WARN, "sandbox %s: could not read", name);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	size_t n = fread(out, 1, len - 1, tmp);
	out[n] = '\0';
	fclose(tmp);
}

static void logged(const char *name, char *out, size_t len)
{
	logged_as(false, name, out, len);
}

static void a_name_cannot_forge_a_line_of_its_own(void **state)
{
	(void)state;
	char out[512];
	logged("sb-1\nmeter-collector: info: sandbox sb-2 emptied", out, sizeof out);
	assert_string_equal(out, "meter-collector: warning: sandbox sb-1\\nmeter-collector: info: "
	                         "sandbox sb-2 emptied: could not read\n");
	logged("a\x1b[2Jb\tc\x7f", out, sizeof out);
	assert_string_equal(out,
	                    "meter-collector: warning: sandbox a\\x1b[2Jb\\x09c\\x7f: could not "
	                    "read\n");
	logged("é ok", out, sizeof out); /* UTF-8 passes as it is */
	assert_string_equal(out, "meter-collector: warning: sandbox é ok: could not read\n");
}

static void a_message_s_final_newline_is_dropped(void **state)
{
	(void)state;
	char out[512];
	/* libpq's messages end in a newline, and some hold two lines */
	logged_as(true, "server closed the connection\nDETAIL: x\n", out, sizeof out);
	assert_string_equal(out, "meter-collector: warning: could not connect: server closed the "
	                         "connection\\nDETAIL: x\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(a_name_cannot_forge_a_line_of_its_own),
	        cmocka_unit_test(a_message_s_final_newline_is_dropped),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
