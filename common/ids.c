#include "common/ids.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <string.h>

static pcre2_code *id_re;
static pthread_once_t id_once = PTHREAD_ONCE_INIT;

static void compile(void)
{
	int code;
	PCRE2_SIZE off;
	/* DOLLAR_ENDONLY: $ is the end of the string, as in PostgreSQL, not also the
	 * place before a final newline ("a\n" is no id) */
	id_re = pcre2_compile((PCRE2_SPTR)ID_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_DOLLAR_ENDONLY,
	                      &code, &off, NULL);
	if (id_re)
		(void)pcre2_jit_compile(id_re, PCRE2_JIT_COMPLETE);
}

bool id_valid(const char *s)
{
	pthread_once(&id_once, compile);
	if (id_re == NULL)
		return false;
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	if (md == NULL)
		return false;
	int rc = pcre2_match(id_re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
	pcre2_match_data_free(md);
	return rc > 0;
}
