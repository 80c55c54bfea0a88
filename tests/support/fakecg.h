/*
 * tests/support/fakecg.h: fake cgroup trees in a temporary folder.
 *
 * A sandbox is made in a staging folder and renamed into place, so a watcher
 * sees it appear whole, as a real cgroup does. Counters are rewritten in
 * place at a fixed width, so an open descriptor sees the new value and a
 * reader never sees a half-written file.
 */
#ifndef TESTS_SUPPORT_FAKECG_H
#define TESTS_SUPPORT_FAKECG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fakecg_kind { FAKE_V2, FAKE_V1, FAKE_HYBRID };

/* Makes an empty tree of that kind under a new folder of base ("/tmp"); path out. */
bool fakecg_tree(const char *base, enum fakecg_kind kind, char *root, size_t len);

/* Adds a sandbox cgroup at rel with its files; false with a message on stderr. */
bool fakecg_sandbox(const char *root, enum fakecg_kind kind, const char *rel, int64_t cpu_us);

/* Sets the cumulative CPU of the sandbox at rel (in place). */
bool fakecg_set_cpu(const char *root, enum fakecg_kind kind, const char *rel, int64_t cpu_us);

/* Writes "populated N" into its cgroup.events (v2 and hybrid). */
bool fakecg_set_populated(const char *root, enum fakecg_kind kind, const char *rel, int populated);

/* Writes one file of a sandbox in place (hierarchy "" for v2, or "memory", ...). */
bool fakecg_write(const char *root, const char *hierarchy, const char *rel, const char *file,
                  const char *text);

/* Removes a path and all below it; true when it is gone. */
bool fakecg_remove(const char *path);

#endif
