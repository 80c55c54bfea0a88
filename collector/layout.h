/*
 * collector/layout.h: finding a host's cgroup hierarchies under --root.
 *
 * "auto" reads /proc/self/mountinfo: the cgroup2 mount and the v1 mounts
 * with cpuacct, cpu and memory at or below the root. A unified host has one
 * cgroup2 mount at /sys/fs/cgroup; a v1 host has v1 mounts below it; a hybrid
 * host has both (CPU usage from v2, memory from v1).
 *
 * "v2", "v1" and "hybrid" name the layout instead and find it by its
 * folders, for trees that are not mounts (tests, benchmarks, bind mounts):
 *   v2      ROOT/cgroup.controllers
 *   v1      ROOT/cpuacct (or ROOT/cpu,cpuacct), ROOT/cpu, ROOT/memory
 *   hybrid  ROOT/unified/cgroup.controllers and ROOT/memory (ROOT/cpu too)
 */
#ifndef COLLECTOR_LAYOUT_H
#define COLLECTOR_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "collector/cgroup.h"

/*
 * Fills l for root. mountinfo is the path of the mountinfo file ("auto"
 * only; NULL for /proc/self/mountinfo). On failure writes one line into err
 * ("... is not a cgroup filesystem ...") and returns false.
 */
bool layout_find(const char *root, const char *kind, const char *mountinfo, struct cg_layout *l,
                 char *err, size_t errlen);

/*
 * The "auto" step on its own, exposed for tests and fuzzing: fills the empty
 * entries of l from the mount lines of f that are cgroup mounts at or below
 * root (a real path). Lines that do not parse, or are longer than 4 KiB, are
 * skipped; nothing is written past an entry's CG_PATH_MAX.
 */
void layout_from_mountinfo(const char *root, FILE *f, struct cg_layout *l);

/* "v2", "v1" or "hybrid", for logs. */
const char *layout_name(const struct cg_layout *l);

#endif
