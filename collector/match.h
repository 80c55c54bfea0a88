/*
 * collector/match.h: which cgroups are sandboxes.
 *
 * A PCRE2 pattern over a cgroup's path relative to the hierarchy root
 * ("sandboxes/acme/sb-1"), matched against the whole path (anchored at both
 * ends), with a named group "sandbox" (required) and "account" (optional).
 * Partial matching tells which folders can hold sandboxes further down, so
 * discovery walks and watches only those.
 */
#ifndef COLLECTOR_MATCH_H
#define COLLECTOR_MATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "collector/cgroup.h"

struct matcher;

/* Compiles pattern; NULL with one line in err ("... at offset 3: ..."). */
struct matcher *matcher_new(const char *pattern, char *err, size_t errlen);
void matcher_free(struct matcher *m);

enum match_kind {
	MATCH_NONE,    /* neither a sandbox nor on the way to one */
	MATCH_HOLDER,  /* a folder that may hold sandboxes below it */
	MATCH_SANDBOX, /* a sandbox: id (and account when the pattern names it) filled */
};

/*
 * Classifies the folder at rel ("" for the root). For a sandbox, id and
 * account (CG_ID_MAX bytes each) receive the captured groups; account is ""
 * when the pattern has no account group or it did not take part.
 */
enum match_kind matcher_classify(struct matcher *m, const char *rel, char *id, char *account);

#endif
