/*
 * api/cursor.h: the opaque cursors of paged lists.
 *
 * A cursor is text a client hands back unchanged to fetch the next page:
 * base64url (no padding) of "<kind>:<fields>". Clients must not read it; the
 * server checks every cursor it is given and refuses one it did not make
 * (a 422), so a changed format is a new kind.
 *   - kind 'l', a usage listing (usage_listings): its id and the offset of
 *     the next page;
 *   - kind 's', a list of sandboxes: the last id of the page before.
 */
#ifndef API_CURSOR_H
#define API_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Room for any cursor: an id of up to 128 bytes, base64url. */
#define CURSOR_BUF 200

/* The cursor of a usage listing at offset. */
void cursor_listing(int64_t listing, int64_t offset, char *out, size_t len);

/* Reads a listing cursor; false for anything else. */
bool cursor_listing_read(const char *text, int64_t *listing, int64_t *offset);

/* The cursor after sandbox id (at most 128 bytes). False when it does not fit. */
bool cursor_after(const char *id, char *out, size_t len);

/* Reads a cursor of cursor_after into id (room for len bytes); false for anything else. */
bool cursor_after_read(const char *text, char *id, size_t len);

#endif
