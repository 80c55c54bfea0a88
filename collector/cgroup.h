/*
 * collector/cgroup.h: reading one sandbox's cgroup counters.
 *
 * A sandbox's files are opened once, when it is found, and re-read with
 * pread() into a fixed buffer every round; parsing scans only the keys it
 * needs. Nothing is allocated per sample. Which file gives which figure
 * depends on the host (struct cg_layout): cgroup v2, v1, or a hybrid of both
 * (CPU in the v2 hierarchy, memory in v1). A file the host lacks is absent,
 * and its figure is reported as CG_ABSENT (NULL in the database), never 0.
 */
#ifndef COLLECTOR_CGROUP_H
#define COLLECTOR_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CG_ABSENT   INT64_C(-1)
#define CG_PATH_MAX 1024
#define CG_ID_MAX   129 /* 128 characters and the NUL */

/* Where a host keeps its hierarchies; "" for one it does not have. */
struct cg_layout {
	char v2[CG_PATH_MAX];      /* the cgroup2 (unified) mount */
	char cpuacct[CG_PATH_MAX]; /* v1 hierarchy with cpuacct */
	char cpu[CG_PATH_MAX];     /* v1 hierarchy with cpu (CFS quota) */
	char memory[CG_PATH_MAX];  /* v1 hierarchy with memory */
	char freezer[CG_PATH_MAX]; /* v1 hierarchy with freezer (collector/enforce.h) */
};

/* The folder sandboxes are found in: v2 when there is one, else v1 cpuacct. */
const char *cg_layout_primary(const struct cg_layout *l);

/* One reading of a sandbox. Figures are CG_ABSENT when the host lacks them. */
struct cg_reading {
	int64_t cpu_usage_us;         /* cumulative, never absent */
	int64_t mem_current;          /* bytes */
	int64_t mem_peak;             /* bytes */
	int64_t mem_anon_kernel;      /* bytes: anon + kernel (v2), total_rss + kmem (v1) */
	int64_t mem_limit;            /* bytes; absent also when unlimited */
	int64_t cpu_limit_millicores; /* absent also when unlimited */
};

enum cg_file {
	CG_CPU,        /* cpu.stat (v2) or cpuacct.usage (v1) */
	CG_MEM_CUR,    /* memory.current / memory.usage_in_bytes */
	CG_MEM_PEAK,   /* memory.peak / memory.max_usage_in_bytes */
	CG_MEM_STAT,   /* memory.stat */
	CG_MEM_MAX,    /* memory.max / memory.limit_in_bytes */
	CG_MEM_KMEM,   /* memory.kmem.usage_in_bytes (v1 only) */
	CG_CPU_MAX,    /* cpu.max (v2) or cpu.cfs_quota_us (v1) */
	CG_CPU_PERIOD, /* cpu.cfs_period_us (v1 only) */
	CG_NFILES
};

/*
 * Billing needs CPU usage at every reading. Limits change seldom, and nothing
 * is billed on memory in use, its peak (memory is billed on the size ordered)
 * or its breakdown (memory.stat, which the kernel builds anew at every read,
 * and v1's kernel memory), so these are re-read every CG_LIMIT_EVERY readings
 * (and at the first, and at a reading cg_read_all_next asked for: a sandbox's
 * last); in between the last values are reported. A round then reads one file
 * instead of six to eight; each read is a system call, and those were nearly
 * all of the collector's CPU (bench/collector_real.sh). The peak, a high-water
 * mark, loses nothing by it: at most CG_LIMIT_EVERY readings late, and exact
 * at the end. A host without a peak file (cgroup v2 before Linux 5.19) has
 * memory in use read at every reading instead, the most of which stands in
 * for the peak. Over a young sandbox's first CG_LIMIT_EVERY readings
 * a limit not there yet is looked for at every one: a platform writes the
 * limits just after it makes the cgroup, which the collector may find in
 * between, and a sandbox is registered from them (and counts as running) at
 * its first sample that has them.
 */
#define CG_LIMIT_EVERY 10

/* The open files of one sandbox's cgroup; -1 for a file the host lacks. */
struct cg_handle {
	int fd[CG_NFILES];
	bool cpu_v2, mem_v2, cpumax_v2;
	bool has_events; /* cgroup.events is there (v2); opened only when inotify says it changed */
	const char *refused; /* an optional file there that could not be opened (EACCES), or NULL */
	int refused_errno;
	int64_t inode; /* of the folder in the primary hierarchy: the incarnation */
	int limit_age; /* readings until the limits are read again; 0: now */
	int readings;  /* taken so far, up to CG_LIMIT_EVERY */
	int64_t mem_limit, cpu_limit_millicores; /* the last limits read */
	int64_t mem_current, mem_peak;           /* the last memory figures read */
	int64_t mem_anon_kernel;                 /* the last memory breakdown read */
};

enum cg_status {
	CG_OK = 0,
	CG_GONE,    /* the cgroup vanished (ENOENT, ENODEV): retire the sandbox */
	CG_ERROR,   /* another error: errno says which */
	CG_BADDATA, /* a file did not hold what it should */
};

/*
 * Opens the files of the cgroup at rel (relative to each hierarchy). CPU
 * usage is required: CG_GONE when the cgroup is not there (any more). A file
 * that does not exist is absent; so is an optional one the host refuses
 * (EACCES: h->refused names it). Running out of descriptors or memory
 * (EMFILE, ENFILE, ENOMEM) is CG_ERROR with errno, never "absent". On
 * failure nothing stays open and errno says why.
 */
enum cg_status cg_open(struct cg_handle *h, const struct cg_layout *l, const char *rel);

/*
 * The v1 memory and CPU limit files of rel that were not there at cg_open,
 * opened now if they are, at a reading that reads the limits (the next
 * cg_read's): on a v1 or hybrid host runc and systemd make a sandbox's folder
 * in one hierarchy after another, so the collector may find it in the first
 * before the others have it, and its limits (which register it) would
 * otherwise never be read. True when it opened one. While a hierarchy lacks
 * the folder it costs one failed open at such a reading; with nothing
 * missing, no system call.
 */
bool cg_open_late(struct cg_handle *h, const struct cg_layout *l, const char *rel);

/* True for the errno of a cgroup (or a file of it) that is not there any more. */
bool cg_gone_errno(int e);

/* How many files the handle keeps open (at most CG_NFILES). */
int cg_files_open(const struct cg_handle *h);

/* Closes every open file; safe on a closed or zeroed-then-cg_init'ed handle. */
void cg_close(struct cg_handle *h);

/* Marks every file closed. */
void cg_init(struct cg_handle *h);

/*
 * Reads every figure (all but CPU usage as CG_LIMIT_EVERY says). On anything but
 * CG_OK *r and the handle are unchanged; which_file names the file that
 * failed when not NULL.
 */
enum cg_status cg_read(struct cg_handle *h, struct cg_reading *r, const char **which_file);

/*
 * CPU usage alone, one pread: what a sandbox that just emptied needs first,
 * before its runtime removes the cgroup (collector.c, on_emptied).
 */
enum cg_status cg_read_cpu(const struct cg_handle *h, int64_t *us);

/*
 * The CPU file of the cgroup at rel ("" for the hierarchy's root): cpu.stat
 * when v2, else cpuacct.usage; an open descriptor, or -1 with errno. A
 * sandbox's parent keeps the CPU of the children removed from it, and the
 * collector reads it to learn a removed sandbox's last interval
 * (docs/collector.md, "The end").
 */
int cg_open_cpu(const struct cg_layout *l, const char *rel, bool v2);

/* Reads such a file (v2: cpu.stat, else cpuacct.usage) into µs. */
enum cg_status cg_read_cpu_fd(int fd, bool v2, int64_t *us);

/* The next cg_read reads every file: a sandbox's last reading, when it emptied. */
void cg_read_all_next(struct cg_handle *h);

/*
 * Reads the cgroup.events of the cgroup at rel: *populated 1 or 0. CG_ERROR
 * when the host has no such file (h->has_events false), CG_GONE when the
 * cgroup went away. It is read only when inotify says it changed (a sandbox
 * emptying), so it is opened for that read instead of held open: one
 * descriptor fewer per sandbox.
 */
enum cg_status cg_read_populated(const struct cg_handle *h, const struct cg_layout *l,
                                 const char *rel, int *populated);

/* ---- parsers, exposed for tests and fuzzing; none reads past len ---- */

/* The value of "key N" lines (cpu.stat, memory.stat, cgroup.events). */
bool cg_parse_keyed(const char *buf, size_t len, const char *key, int64_t *out);

/* A file holding one non-negative integer ("12345\n"). */
bool cg_parse_int(const char *buf, size_t len, int64_t *out);

/* "max" (no limit: *out = CG_ABSENT) or an integer (memory.max). */
bool cg_parse_max(const char *buf, size_t len, int64_t *out);

/* cpu.max: "max 100000" -> CG_ABSENT, "200000 100000" -> 2000 millicores. */
bool cg_parse_cpu_max(const char *buf, size_t len, int64_t *out);

/* v1 quota and period (µs) -> millicores; quota -1 -> CG_ABSENT. */
bool cg_v1_quota_millicores(int64_t quota, int64_t period, int64_t *out);

#endif
