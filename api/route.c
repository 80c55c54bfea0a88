#include "api/route.h"

#include <stdio.h>
#include <string.h>

#include "common/ids.h"

bool route_split(const char *path, struct route_path *out)
{
	size_t len = strlen(path);
	out->n = 0;
	if (len >= sizeof out->buf)
		return false;
	memcpy(out->buf, path, len + 1);
	for (char *save = NULL, *p = strtok_r(out->buf, "/", &save); p;
	     p = strtok_r(NULL, "/", &save)) {
		if (out->n == ROUTE_PARTS)
			return false;
		out->part[out->n++] = p;
	}
	return true;
}

int route_find(const struct route *table, int n, const char *method, const struct route_path *p,
               const char *param[2], char *allowed, size_t alen)
{
	allowed[0] = '\0';
	for (int i = 0; i < n; i++) {
		struct route_path pat;
		if (!route_split(table[i].pattern, &pat) || pat.n != p->n)
			continue;
		int k = 0;
		while (k < pat.n && (pat.part[k][0] == '{' || strcmp(pat.part[k], p->part[k]) == 0))
			k++;
		if (k < pat.n)
			continue;
		if (strcmp(table[i].method, method) != 0) {
			size_t used = strlen(allowed);
			snprintf(allowed + used, alen - used, "%s%s", used ? ", " : "",
			         table[i].method);
			continue;
		}
		int nparam = 0;
		for (k = 0; k < pat.n && nparam < 2; k++)
			if (pat.part[k][0] == '{') {
				param[nparam++] = p->part[k];
				/* {id}: an account or sandbox id, checked here for every route */
				if (strcmp(pat.part[k], "{id}") == 0 && !id_valid(p->part[k]))
					return ROUTE_BAD_ID;
			}
		return i;
	}
	return ROUTE_NONE;
}
