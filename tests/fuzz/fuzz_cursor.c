/*
 * libFuzzer: the paged lists' cursors (api/cursor.c). Oracle: a cursor is
 * read only when it is the one text that writing its fields gives back (no
 * second spelling of a cursor), and whatever is written reads back the same.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/cursor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *t = malloc(size + 1), again[CURSOR_BUF], id[200];
	if (t == NULL)
		return 0;
	memcpy(t, data, size);
	t[size] = '\0';
	int64_t listing, offset;
	if (cursor_listing_read(t, &listing, &offset)) {
		cursor_listing(listing, offset, again, sizeof again);
		if (listing <= 0 || offset < 0 || strcmp(again, t) != 0)
			abort();
	}
	if (cursor_after_read(t, id, sizeof id)) {
		if (id[0] == '\0' || !cursor_after(id, again, sizeof again) ||
		    strcmp(again, t) != 0)
			abort();
	}
	/* the other way: fields written, then read */
	if (size >= 16) {
		int64_t l, o;
		memcpy(&l, data, 8);
		memcpy(&o, data + 8, 8);
		l = l < 0 ? -(l + 1) : l;
		o = o < 0 ? -(o + 1) : o;
		l = l % INT64_C(999999999999999999) + 1;
		o %= INT64_C(999999999999999999);
		cursor_listing(l, o, again, sizeof again);
		if (!cursor_listing_read(again, &listing, &offset) || listing != l || offset != o)
			abort();
	}
	if (size > 0 && size <= 128 && strlen(t) == size) {
		if (!cursor_after(t, again, sizeof again) ||
		    !cursor_after_read(again, id, sizeof id) || strcmp(id, t) != 0)
			abort();
	}
	free(t);
	return 0;
}
