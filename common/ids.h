/*
 * common/ids.h: the one pattern account and sandbox ids must match, checked
 * with PCRE2 ($ is the string's end only). The database's meter_id domain
 * holds the same rule written without the bounded repetition (migration
 * 0038); test_migrate holds the two to each other.
 */
#ifndef COMMON_IDS_H
#define COMMON_IDS_H

#include <stdbool.h>

#define ID_PATTERN "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
#define ID_RULE    "1 to 128 of A-Z a-z 0-9 . _ : -, starting with a letter or digit"

/* True when s is a valid id. Thread-safe. */
bool id_valid(const char *s);

#endif
