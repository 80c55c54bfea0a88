#include "collector/match.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct matcher {
	pcre2_code *re;     /* anchored at both ends: is this a sandbox */
	pcre2_code *prefix; /* "(?:re)\\z" anchored at the start: PCRE2 refuses partial
	                       matching with PCRE2_ENDANCHORED */
	pcre2_match_data *md;
	int sandbox_group, account_group;
};

struct matcher *matcher_new(const char *pattern, char *err, size_t errlen)
{
	int code;
	PCRE2_SIZE off;
	struct matcher *m = calloc(1, sizeof *m);
	if (m == NULL) {
		snprintf(err, errlen, "--match: out of memory");
		return NULL;
	}
	m->re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
	                      PCRE2_ANCHORED | PCRE2_ENDANCHORED, &code, &off, NULL);
	if (m->re == NULL) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(code, msg, sizeof msg);
		snprintf(err, errlen, "--match: pattern does not compile at offset %zu: %s",
		         (size_t)off, (const char *)msg);
		goto fail;
	}
	/* "(?:pattern)\\z": a subject that ends before the pattern does is a partial match. */
	size_t plen = strlen(pattern);
	char *wrapped = malloc(plen + 8);
	if (wrapped == NULL) {
		snprintf(err, errlen, "--match: out of memory");
		goto fail;
	}
	snprintf(wrapped, plen + 8, "(?:%s)\\z", pattern);
	m->prefix = pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED, &code,
	                          &off, NULL);
	free(wrapped);
	if (m->prefix == NULL) {
		snprintf(err, errlen, "--match: pattern cannot be used for discovery");
		goto fail;
	}
	m->sandbox_group = pcre2_substring_number_from_name(m->re, (PCRE2_SPTR) "sandbox");
	if (m->sandbox_group <= 0) {
		snprintf(err, errlen,
		         "--match: pattern has no named group \"sandbox\" (write "
		         "(?<sandbox>...) around the part that is the sandbox id)");
		goto fail;
	}
	m->account_group = pcre2_substring_number_from_name(m->re, (PCRE2_SPTR) "account");
	if (m->account_group <= 0)
		m->account_group = -1;
	m->md = pcre2_match_data_create_from_pattern(m->re, NULL);
	if (m->md == NULL) {
		snprintf(err, errlen, "--match: out of memory");
		goto fail;
	}
	return m;
fail:
	matcher_free(m);
	return NULL;
}

void matcher_free(struct matcher *m)
{
	if (m == NULL)
		return;
	pcre2_match_data_free(m->md);
	pcre2_code_free(m->re);
	pcre2_code_free(m->prefix);
	free(m);
}

static void copy_group(struct matcher *m, int group, char *out)
{
	PCRE2_SIZE len = CG_ID_MAX;
	out[0] = '\0';
	if (group <= 0)
		return;
	int rc = pcre2_substring_copy_bynumber(m->md, (uint32_t)group, (PCRE2_UCHAR *)out, &len);
	if (rc == PCRE2_ERROR_NOMEMORY) /* longer than any id: say so, it fails id_valid */
		snprintf(out, CG_ID_MAX, "(longer than %d characters)", CG_ID_MAX - 1);
	else if (rc != 0)
		out[0] = '\0';
}

enum match_kind matcher_classify(struct matcher *m, const char *rel, char *id, char *account)
{
	size_t len = strlen(rel);
	if (len > 0) {
		int rc = pcre2_match(m->re, (PCRE2_SPTR)rel, len, 0, 0, m->md, NULL);
		if (rc > 0) {
			copy_group(m, m->sandbox_group, id);
			copy_group(m, m->account_group, account);
			/* An empty or too long sandbox group is no sandbox. */
			if (id[0] != '\0')
				return MATCH_SANDBOX;
		}
	}
	/* The root holds everything. */
	if (len == 0)
		return MATCH_HOLDER;
	/* Could a path below this folder match? Ask with "rel/" as a partial subject. */
	char sub[CG_PATH_MAX + 2];
	if (len + 2 > sizeof sub)
		return MATCH_NONE;
	memcpy(sub, rel, len);
	sub[len++] = '/';
	int rc = pcre2_match(m->prefix, (PCRE2_SPTR)sub, len, 0, PCRE2_PARTIAL_HARD, m->md, NULL);
	return rc == PCRE2_ERROR_PARTIAL || rc > 0 ? MATCH_HOLDER : MATCH_NONE;
}
