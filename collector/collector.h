/*
 * collector/collector.h: the collector's state and its steps.
 *
 * One struct holds what the daemon knows: the host's layout, the pattern,
 * the folders it watches, the sandboxes it samples, the batch of samples not
 * yet written, the spool and the database connection. main.c drives it:
 * collector_scan() at start and every --rescan, collector_events() when
 * inotify has something, collector_round() every --interval, and
 * collector_flush() after each.
 */
#ifndef COLLECTOR_COLLECTOR_H
#define COLLECTOR_COLLECTOR_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector/batch.h"
#include "collector/cgroup.h"
#include "collector/ends.h"
#include "collector/match.h"
#include "collector/spool.h"

/*
 * Files kept back from the open file limit for everything but the sandboxes'
 * cgroup files: the database connection, the spool, inotify, the folders a
 * scan walks (one per level), logging. A sandbox is taken on only while its
 * files fit below the limit less this, so reaching the limit costs the
 * sandboxes that do not fit (loudly), never the database connection or a
 * rescan.
 */
#define COLLECTOR_FD_RESERVE 64
/* The most files taking in one sandbox holds at once: all it keeps, and
 * cgroup.events for a moment. A sandbox is taken only while these fit. */
#define COLLECTOR_FILES_MOST (CG_NFILES + 2) /* and its parent's CPU file */
#define COLLECTOR_UNREAD_MAX 8
/*
 * Ends are written at once, but not while more events come: sandboxes often
 * end many at once (a job's workers), and a write blocks the collector for
 * the database's round trips, while the runtimes remove the cgroups of those
 * still to be read. The write waits until inotify has been quiet this long.
 */
#define COLLECTOR_QUIET_MS 25

struct collector_config {
	const char *root;
	const char *layout;     /* auto, v2, v1, hybrid */
	const char *match;      /* PCRE2 pattern */
	const char *host;       /* host id written with every sample */
	const char *spool_path; /* NULL: no spool (tests of discovery only) */
	int64_t spool_max;      /* bytes */
	const char *db_url;     /* NULL: common/db.h's choice */
	const char *db_role;    /* role to write as; "" for the session's */
	bool send_twice;        /* a fault for tests: every batch is written twice */
	/* NULL: unsigned spool records (MSP1); else the key they are signed with
	 * (MSP2), copied by collector_init */
	const struct spool_key *spool_key;
};

struct parent;

struct sandbox {
	const char *id;      /* stored after rel */
	const char *account; /* stored after id; "" when its path names none */
	struct cg_handle h;
	int events_wd;          /* inotify watch on cgroup.events, or -1 */
	bool final_taken;       /* a sample was taken after it emptied: it ended there */
	bool frozen;            /* frozen by collector/enforce.c */
	bool seen;              /* found by the running rescan */
	bool has_last;          /* last holds a reading */
	bool lost;              /* its cgroup went before its last counter was read */
	bool based;             /* base holds its counter at its parent's last settle */
	struct cg_reading last; /* its last reading, for the end when it goes away */
	int64_t last_ts;        /* when last was read */
	int64_t rate;           /* CPU µs a second between its last two readings; -1: unknown */
	int64_t base, base_ts;  /* its counter in its parent's last settle, and when read */
	int64_t now_cpu, now_ts; /* scratch of a settle: its counter, and when read */
	int64_t gone_at;        /* lost: when it was seen to empty or go */
	bool has_emptied_cpu;   /* emptied_cpu holds its counter read as cgroup.events changed */
	int64_t emptied_cpu, emptied_at;
	struct parent *parent;   /* the folder it is in */
	struct sandbox *sibling; /* the next sandbox of that folder */
	/* Its path, then its id and account, each as long as it is: a thousand
	 * sandboxes with room for the longest of each held 1.2 MiB that nothing used. */
	char rel[];
};

/*
 * The folder sandboxes are in, whose CPU counter keeps what its removed
 * children used (collector/ends.h). Each round reads it before and after its
 * sandboxes (settle): low is then what of its counter no sandbox still there
 * accounts for, at the least (the children removed so far, and anything else
 * that ran in it); width, how much the counter moved during the reading.
 */
struct parent {
	int fd;       /* its CPU file, or -1: its sandboxes' ends are their last readings */
	bool v2;      /* cpu.stat rather than cpuacct.usage */
	bool settled; /* low and width hold a reading */
	bool busy;    /* its last reading showed CPU no sandbox of it accounts for */
	int64_t low, width;
	struct sandbox *first; /* its sandboxes */
	char rel[];
};

struct holder {
	int wd;
	char rel[CG_PATH_MAX];
};

struct collector_stats {
	uint64_t rounds, samples, written, duplicates, spooled_batches, thinned_batches,
	        refused_batches;
	uint64_t final_samples, retired, read_errors, ends;
	uint64_t ends_by[END_LAST + 1]; /* by how their CPU is known (collector/ends.h) */
	size_t unsampled; /* sandboxes the last scan found but had no files left for */
};

struct collector {
	struct collector_config cfg;
	struct cg_layout layout;
	struct matcher *matcher;
	int inotify_fd;
	struct holder *holders;
	size_t nholders, capholders;
	struct sandbox **sandboxes;
	size_t nsandboxes, capsandboxes;
	struct parent **parents;
	size_t nparents, capparents;
	int ncpu; /* online CPUs: the most CPU a sandbox can use in a second, in seconds */
	struct batch batch;
	bool have_spool;
	struct spool spool;
	PGconn *db;
	bool rescan_wanted; /* inotify overflowed */
	/* Ends are in the batch: flush once inotify is quiet for COLLECTOR_QUIET_MS. */
	bool flush_wanted;
	bool in_scan; /* collector_scan() is walking */
	/* Folders the running scan could not read: sandboxes below them are not
	 * retired by it (not seen is not gone). Past COLLECTOR_UNREAD_MAX, none is. */
	char unread[COLLECTOR_UNREAD_MAX][CG_PATH_MAX];
	size_t nunread;
	size_t files_open; /* the sandboxes' open cgroup files */
	size_t files_max;  /* what the open file limit leaves them (COLLECTOR_FD_RESERVE kept) */
	struct collector_stats stats;
};

/* Checks the configuration and sets up; false with one line in err (exit 2). */
bool collector_init(struct collector *c, const struct collector_config *cfg, char *err,
                    size_t errlen);

/* Closes everything; the batch not yet flushed is lost, so flush first. */
void collector_free(struct collector *c);

/*
 * Walks the tree: adds new sandboxes and folders, retires those that went
 * away. Below a folder that cannot be read (other than gone) nothing is
 * retired by this scan, since "not seen" would not mean "gone"; the rest of
 * the tree is tidied as usual.
 */
void collector_scan(struct collector *c);

/*
 * Handles what inotify has (call when its fd is readable; never blocks). When
 * it took ends, flush_wanted is set: the caller flushes once inotify has been
 * quiet for COLLECTOR_QUIET_MS.
 */
void collector_events(struct collector *c);

/* Samples every sandbox into the batch. */
void collector_round(struct collector *c);

/*
 * Writes the batch (and first the spool, in order) to the database, or
 * spools it when the database is away. False when the samples are neither in
 * the database nor in the spool.
 */
bool collector_flush(struct collector *c);

/* Looks up a sandbox by its path; NULL when not known. */
struct sandbox *collector_find(struct collector *c, const char *rel);

#endif
