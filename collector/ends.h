/*
 * collector/ends.h: the last interval of sandboxes whose cgroup went before
 * the collector could read it.
 *
 * An OCI runtime removes a container's cgroup the moment its last process
 * exits, and the collector's read of the counter can lose that race. The
 * kernel keeps a removed cgroup's CPU in its parent's counter (v2 cpu.stat,
 * v1 cpuacct.usage count every descendant, removed ones too), so the
 * collector reads each parent before and after its children (collector.c,
 * settle): what the parent gained that no child still there accounts for is
 * the CPU of the children that went. One child gone between two readings of
 * its parent: that is its last interval, to the microsecond (and at most the
 * children's CPU during the two readings more). Several: their sum is exact
 * and is shared between them by their recent rates, and each is flagged.
 *
 * Pure arithmetic, no I/O: tests/unit/test_ends.c.
 */
#ifndef COLLECTOR_ENDS_H
#define COLLECTOR_ENDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How an end's CPU counter is known: the column end_cpu of its sample. */
enum end_cpu {
	END_READ,      /* read from the cgroup itself, after it emptied */
	END_PARENT,    /* from its parent: the only child gone, nothing else ran there */
	END_ESTIMATED, /* a share of its parent's, or an estimate: not exact */
	END_LAST,      /* the last counter read: nothing better was known (may be short) */
};

/* "read", "parent", "estimated", "last". */
const char *end_cpu_name(enum end_cpu how);

/* One child that went between two readings of its parent. */
struct end_share {
	int64_t base;       /* its counter in the parent's last reading */
	int64_t rate;       /* its CPU over its last readings, µs a second; -1 when unknown */
	int64_t elapsed_us; /* from that reading to when it went */
	int64_t cpu;        /* out: its last counter, never below base */
	enum end_cpu how;   /* out */
};

/*
 * Sets cpu and how of each of the n children that went. unclaimed is the
 * parent's CPU since its last reading that no child still there accounts
 * for (µs; negative when unknown: the parent could not be read); busy, that
 * the parent's earlier readings showed CPU of its own (processes in it, or
 * in cgroups the collector does not follow), so unclaimed is not theirs
 * alone. ncpu bounds what a child can have used: ncpu µs per µs of wall time.
 */
void ends_share(struct end_share *e, size_t n, int64_t unclaimed, bool busy, int ncpu);

#endif
