#include "collector/collector.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collector/layout.h"
#include "collector/writer.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/ids.h"
#include "common/log.h"
#include "meter/checked.h"

#define HOLDER_EVENTS (IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ONLYDIR)

static const char *primary(const struct collector *c)
{
	return cg_layout_primary(&c->layout);
}

/* rel/name into out; false when it does not fit. */
static bool join(char *out, size_t len, const char *rel, const char *name)
{
	int n = rel[0] ? snprintf(out, len, "%s/%s", rel, name) : snprintf(out, len, "%s", name);
	return n >= 0 && (size_t)n < len;
}

bool collector_init(struct collector *c, const struct collector_config *cfg, char *err,
                    size_t errlen)
{
	memset(c, 0, sizeof *c);
	c->cfg = *cfg;
	c->inotify_fd = -1;
	if (!id_valid(cfg->host)) {
		snprintf(err, errlen, "--host-id: \"%s\" is not a valid host id (%s)", cfg->host,
		         ID_RULE);
		return false;
	}
	c->matcher = matcher_new(cfg->match, err, errlen);
	if (c->matcher == NULL)
		goto fail;
	if (!layout_find(cfg->root, cfg->layout, NULL, &c->layout, err, errlen))
		goto fail;
	c->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (c->inotify_fd < 0)
		/* Sampling goes on without it: new sandboxes wait for a rescan, emptied
		 * ones for the next round. (Raise fs.inotify.max_user_instances.) */
		log_error("could not start inotify: %s; new sandboxes are found only by the "
		          "rescan every --rescan, and emptied ones sampled at the next round",
		          strerror(errno));
	if (cfg->spool_path) {
		if (!spool_open(&c->spool, cfg->spool_path, cfg->spool_max, cfg->spool_key, err,
		                errlen))
			goto fail;
		c->have_spool = true;
		c->cfg.spool_key = NULL; /* the spool has its copy; the caller's may go */
		if (c->spool.records)
			log_info("spool \"%s\" holds %zu batches from before; they go first",
			         cfg->spool_path, c->spool.records);
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	c->ncpu = ncpu > 0 && ncpu < 65536 ? (int)ncpu : 1;
	struct rlimit rl;
	c->files_max = SIZE_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		c->files_max = rl.rlim_cur > COLLECTOR_FD_RESERVE
		                       ? (size_t)(rl.rlim_cur - COLLECTOR_FD_RESERVE)
		                       : 0;
	char room[160] = "no open file limit";
	if (c->files_max != SIZE_MAX) {
		/* a v2 sandbox keeps 6 files open, a v1 or hybrid one 8; the last
		 * one taken needs COLLECTOR_FILES_MOST */
		size_t per = strcmp(layout_name(&c->layout), "v2") == 0 ? 6 : 8;
		size_t fit = c->files_max >= COLLECTOR_FILES_MOST
		                     ? (c->files_max - COLLECTOR_FILES_MOST) / per + 1
		                     : 0;
		snprintf(room, sizeof room, "the open file limit, %llu, has room for %zu",
		         (unsigned long long)rl.rlim_cur, fit);
	}
	log_info("watching %s cgroups under \"%s\" (sandboxes found in \"%s\"; %s)",
	         layout_name(&c->layout), cfg->root, primary(c), room);
	return true;
fail:
	collector_free(c);
	return false;
}

/* The parent folder of rel: all of it up to its last '/', or "" (the root). */
static size_t parent_len(const char *rel)
{
	const char *slash = strrchr(rel, '/');
	return slash ? (size_t)(slash - rel) : 0;
}

/*
 * Puts sb in the list of its parent folder's sandboxes, the parent opened
 * first when it is new (add_sandbox then reads them).
 */
static void join_parent(struct collector *c, struct sandbox *sb)
{
	size_t n = parent_len(sb->rel);
	struct parent *p = NULL;
	for (size_t i = 0; i < c->nparents && !p; i++)
		if (c->parents[i]->v2 == sb->h.cpu_v2 && strlen(c->parents[i]->rel) == n &&
		    memcmp(c->parents[i]->rel, sb->rel, n) == 0)
			p = c->parents[i];
	if (p == NULL) {
		if (c->nparents == c->capparents) {
			size_t cap = c->capparents ? c->capparents * 2 : 16;
			struct parent **np = realloc(c->parents, cap * sizeof *np);
			if (np == NULL)
				goto no_parent;
			c->parents = np;
			c->capparents = cap;
		}
		p = calloc(1, sizeof *p + n + 1);
		if (p == NULL)
			goto no_parent;
		memcpy(p->rel, sb->rel, n);
		p->v2 = sb->h.cpu_v2;
		p->fd = cg_open_cpu(&c->layout, p->rel, p->v2);
		if (p->fd >= 0)
			c->files_open++;
		else if (errno != ENOENT)
			log_warn("could not open the CPU counter of \"%s\": %s; the last interval "
			         "of a sandbox removed before its final sample is then its last "
			         "reading",
			         p->rel[0] ? p->rel : "/", strerror(errno));
		c->parents[c->nparents++] = p;
	}
	sb->parent = p;
	sb->sibling = p->first;
	p->first = sb;
	return;
no_parent:
	log_error("sandbox %s: out of memory for its parent folder; not sampled", sb->id);
}

/* Takes sb out of its parent's list; the parent goes with its last sandbox. */
static void leave_parent(struct collector *c, struct sandbox *sb)
{
	struct parent *p = sb->parent;
	if (p == NULL)
		return;
	for (struct sandbox **at = &p->first; *at; at = &(*at)->sibling)
		if (*at == sb) {
			*at = sb->sibling;
			break;
		}
	sb->parent = NULL;
	if (p->first)
		return;
	if (p->fd >= 0) {
		close(p->fd);
		c->files_open--;
	}
	for (size_t i = 0; i < c->nparents; i++)
		if (c->parents[i] == p) {
			c->parents[i] = c->parents[--c->nparents];
			break;
		}
	free(p);
}

/* Closes the files of a sandbox that is gone (the struct stays until retired). */
static void close_files(struct collector *c, struct sandbox *sb)
{
	if (sb->events_wd >= 0)
		inotify_rm_watch(c->inotify_fd, sb->events_wd);
	sb->events_wd = -1;
	c->files_open -= (size_t)cg_files_open(&sb->h);
	cg_close(&sb->h);
}

/*
 * Lets go of a sandbox whose cgroup went away (or was moved) and whose last
 * counter is known. Unless its final sample (taken when it emptied) ended it
 * already, its end is now: one more row with the last counter read, marked as
 * the end (rule 9). Its parent then counts that counter as its own: the
 * sandbox's CPU stays in the parent's counter.
 */
static void retire(struct collector *c, size_t i)
{
	struct sandbox *sb = c->sandboxes[i];
	log_info("sandbox %s (account %s, incarnation %lld) retired: its cgroup is gone", sb->id,
	         sb->account[0] ? sb->account : "unknown", (long long)sb->h.inode);
	if (!sb->final_taken && sb->has_last) {
		/* lost without a parent to ask: the last reading, which may be short */
		enum end_cpu how = sb->lost ? END_LAST : END_READ;
		if (batch_add(&c->batch, sb->id, sb->account, sb->h.inode,
		              sb->lost ? sb->gone_at : clock_now_us(), c->cfg.host, &sb->last)) {
			batch_mark_end(&c->batch, how);
			c->stats.ends++;
			c->stats.ends_by[how]++;
			c->stats.samples++; /* a row like the others */
		} else {
			log_error("sandbox %s: its end is lost: out of memory", sb->id);
		}
	}
	if (sb->parent && sb->parent->settled) {
		if (sb->based && sb->has_last)
			sb->parent->low += sb->last.cpu_usage_us;
		else
			sb->parent->settled = false;
	}
	close_files(c, sb);
	leave_parent(c, sb);
	free(sb);
	c->sandboxes[i] = c->sandboxes[--c->nsandboxes];
	c->stats.retired++;
}

void collector_free(struct collector *c)
{
	while (c->nsandboxes) {
		struct sandbox *sb = c->sandboxes[--c->nsandboxes];
		cg_close(&sb->h);
		free(sb);
	}
	free(c->sandboxes);
	while (c->nparents) {
		struct parent *p = c->parents[--c->nparents];
		if (p->fd >= 0)
			close(p->fd);
		free(p);
	}
	free(c->parents);
	free(c->holders);
	matcher_free(c->matcher);
	if (c->inotify_fd >= 0)
		close(c->inotify_fd);
	if (c->have_spool)
		spool_close(&c->spool);
	batch_free(&c->batch);
	if (c->db)
		PQfinish(c->db);
	memset(c, 0, sizeof *c);
	c->inotify_fd = -1;
}

struct sandbox *collector_find(struct collector *c, const char *rel)
{
	for (size_t i = 0; i < c->nsandboxes; i++)
		if (strcmp(c->sandboxes[i]->rel, rel) == 0)
			return c->sandboxes[i];
	return NULL;
}

static size_t index_of(struct collector *c, const struct sandbox *sb)
{
	size_t i = 0;
	while (i < c->nsandboxes && c->sandboxes[i] != sb)
		i++;
	return i;
}

/* Its cgroup went before its last counter was read: its end waits for its
 * parent's next settle, which the caller makes before it returns. */
static void lose(struct collector *c, struct sandbox *sb, int64_t when)
{
	if (!sb->lost) {
		sb->lost = true;
		sb->gone_at = when;
	} else if (when < sb->gone_at) {
		sb->gone_at = when;
	}
	close_files(c, sb);
}

/*
 * Takes one sample into the batch: CG_OK, CG_GONE when its cgroup went (the
 * sandbox is then lost), or the error (logged, its last reading kept).
 */
static enum cg_status sample(struct collector *c, struct sandbox *sb)
{
	struct cg_reading r;
	const char *file = NULL;
	if (sb->lost)
		return CG_GONE;
	size_t had = (size_t)cg_files_open(&sb->h);
	if (cg_open_late(&sb->h, &c->layout, sb->rel)) {
		c->files_open = c->files_open - had + (size_t)cg_files_open(&sb->h);
		log_info("sandbox %s: its folders in the v1 hierarchies came after it was found; "
		         "its limits are read from them now",
		         sb->id);
	}
	enum cg_status st = cg_read(&sb->h, &r, &file);
	int64_t ts = clock_now_us();
	if (st == CG_GONE) {
		lose(c, sb, ts);
		return st;
	}
	if (st != CG_OK) {
		c->stats.read_errors++;
		log_warn("sandbox %s: could not read %s of \"%s\": %s", sb->id, file ? file : "?",
		         sb->rel, st == CG_BADDATA ? "unexpected contents" : strerror(errno));
		return st;
	}
	if (!batch_add(&c->batch, sb->id, sb->account, sb->h.inode, ts, c->cfg.host, &r)) {
		log_error("sandbox %s: sample dropped: out of memory", sb->id);
		return CG_OK;
	}
	sb->rate = -1;
	if (sb->has_last && ts > sb->last_ts && r.cpu_usage_us >= sb->last.cpu_usage_us)
		sb->rate = (int64_t)((meter_i128)(r.cpu_usage_us - sb->last.cpu_usage_us) *
		                     1000000 / (ts - sb->last_ts));
	sb->last = r;
	sb->last_ts = ts;
	sb->has_last = true;
	c->stats.samples++;
	return CG_OK;
}

/*
 * The ends of p's sandboxes that went unread, from what p's counter gained
 * (collector/ends.h): each gets one more row, at when it was seen to empty
 * or go, marked as the end with how its counter is known, and is retired.
 */
static void end_lost(struct collector *c, struct parent *p, int64_t unclaimed)
{
	size_t n = 0;
	for (struct sandbox *sb = p->first; sb; sb = sb->sibling)
		n += sb->lost && !sb->final_taken;
	struct end_share *e = n ? calloc(n, sizeof *e) : NULL;
	if (n && e == NULL)
		unclaimed = -1; /* out of memory: the last readings, one at a time below */
	size_t k = 0;
	for (struct sandbox *sb = p->first; sb && e; sb = sb->sibling)
		if (sb->lost && !sb->final_taken) {
			e[k].base = sb->based ? sb->base : sb->last.cpu_usage_us;
			e[k].rate = sb->rate;
			e[k].elapsed_us = sb->gone_at - (sb->based ? sb->base_ts : sb->last_ts);
			k++;
		}
	if (e)
		ends_share(e, n, unclaimed, p->busy, c->ncpu);
	k = 0;
	for (struct sandbox *sb = p->first, *next; sb; sb = next) {
		next = sb->sibling;
		if (!sb->lost)
			continue;
		if (!sb->final_taken && sb->has_last) {
			struct cg_reading r = sb->last;
			enum end_cpu how = e ? e[k].how : END_LAST;
			if (e && e[k].cpu > r.cpu_usage_us)
				r.cpu_usage_us = e[k].cpu;
			k++;
			if (batch_add(&c->batch, sb->id, sb->account, sb->h.inode, sb->gone_at,
			              c->cfg.host, &r)) {
				batch_mark_end(&c->batch, how);
				c->stats.ends++;
				c->stats.ends_by[how]++;
				c->stats.samples++;
			} else {
				log_error("sandbox %s: its end is lost: out of memory", sb->id);
			}
			log_msg(how == END_PARENT ? LOG_INFO : LOG_WARN,
			        "sandbox %s (account %s, incarnation %lld) went before its final "
			        "sample: its last interval, %lld µs of CPU, %s",
			        sb->id, sb->account[0] ? sb->account : "unknown",
			        (long long)sb->h.inode,
			        (long long)(r.cpu_usage_us - sb->last.cpu_usage_us),
			        how == END_PARENT ? "from its parent's counter (exact)"
			        : how == END_ESTIMATED
			                ? "estimated: a share of its parent's counter, with others "
			                  "that went at once, or its parent ran CPU of its own"
			                : "not known: its parent's counter could not be read; "
			                  "billed "
			                  "to its last reading");
		} else if (!sb->final_taken) {
			k += e != NULL;
		}
		sb->final_taken = true; /* its end is written: retire adds none */
		sb->has_last = false;   /* and its parent forgets it (settle starts anew) */
		retire(c, index_of(c, sb));
	}
	free(e);
}

/*
 * Reads p and its sandboxes: p's CPU counter before and after them, and each
 * sandbox's: a sample in a round, the counter alone (no row) when one went in
 * between. What p's counter gained since the last settle that no sandbox
 * still there accounts for is the CPU of those that went unread in between
 * (end_lost); that aside, low and width are set anew.
 */
static void settle(struct collector *c, struct parent *p, bool round)
{
	int64_t p1 = 0, p2 = 0;
	bool have = p->fd >= 0 && cg_read_cpu_fd(p->fd, p->v2, &p1) == CG_OK;
	bool sure = have;
	for (struct sandbox *sb = p->first; sb; sb = sb->sibling) {
		enum cg_status st;
		if (round || !sb->has_last) {
			st = sample(c, sb);
			sb->now_cpu = sb->last.cpu_usage_us;
			sb->now_ts = sb->last_ts;
		} else {
			/* between rounds (one went): the counter alone, no row */
			st = sb->lost ? CG_GONE : cg_read_cpu(&sb->h, &sb->now_cpu);
			sb->now_ts = clock_now_us();
			if (st == CG_GONE)
				lose(c, sb, sb->now_ts);
		}
		if (st != CG_OK && st != CG_GONE)
			sure = false; /* its counter now is not known */
	}
	have = have && cg_read_cpu_fd(p->fd, p->v2, &p2) == CG_OK;
	int64_t alive = 0, claimed = 0, children = 0;
	size_t lost = 0;
	for (struct sandbox *sb = p->first; sb; sb = sb->sibling) {
		children++;
		if (!sb->lost) {
			alive += sb->now_cpu;
			sure = sure && sb->has_last;
		} else if (sb->final_taken) {
			claimed += sb->last.cpu_usage_us; /* read after it emptied */
		} else {
			claimed += sb->base;
			lost++;
		}
		if (sb->lost && !sb->based)
			sure = false; /* not in the last settle: its CPU was nobody's */
	}
	bool known = have && sure && p->settled;
	int64_t unclaimed = known ? p2 - alive - claimed - p->low : -1;
	if (known && unclaimed < 0)
		unclaimed = 0; /* the counters' rounding to the microsecond */
	if (known && lost == 0) {
		/* Nothing went: what p gained beyond its sandboxes' CPU during the two
		 * readings is its own (processes in it, cgroups not followed), and it
		 * would be shared with the next to go. Each counter's rounding to the
		 * microsecond, and what ran after a final sample, are far below a
		 * millisecond. */
		p->busy = unclaimed - p->width - (p2 - p1) > 1000 + children;
	}
	if (lost)
		end_lost(c, p, unclaimed);
	else
		for (struct sandbox *sb = p->first, *next; sb; sb = next) {
			next = sb->sibling;
			if (sb->lost) /* final sample taken already */
				retire(c, index_of(c, sb));
		}
	/* p may be gone with its last sandbox */
	for (size_t i = 0; i < c->nparents; i++)
		if (c->parents[i] == p)
			goto there;
	return;
there:
	p->settled = have && sure;
	if (!p->settled)
		return;
	p->low = p1 - alive;
	p->width = p2 - p1;
	for (struct sandbox *sb = p->first; sb; sb = sb->sibling) {
		sb->base = sb->now_cpu;
		sb->base_ts = sb->now_ts;
		sb->based = true;
	}
}

/* Settles every parent with a sandbox lost: none outlives the step that lost it. */
static void settle_lost(struct collector *c)
{
	for (size_t i = c->nparents; i-- > 0;) {
		if (i >= c->nparents)
			continue;
		struct parent *p = c->parents[i];
		for (struct sandbox *sb = p->first; sb; sb = sb->sibling)
			if (sb->lost) {
				settle(c, p, false);
				break;
			}
	}
}

/*
 * Room for one more sandbox's files below the open file limit? When not, the
 * sandbox is counted in stats.unsampled and waits for a rescan (a scan says so
 * in one line at its end; a sandbox found by inotify, in a line of its own).
 */
static bool room_for_one(struct collector *c, const char *id)
{
	if (c->files_open + COLLECTOR_FILES_MOST <= c->files_max)
		return true;
	c->stats.unsampled++;
	log_msg(c->in_scan ? LOG_DEBUG : LOG_ERROR,
	        "sandbox %s not sampled: the open file limit is reached (%zu cgroup files open "
	        "for %zu sandboxes); raise it (LimitNOFILE=, ulimit -n) and the next rescan "
	        "takes it",
	        id, c->files_open, c->nsandboxes);
	return false;
}

/* The scan could not read rel: sandboxes at or below it are not retired by it. */
static void unreadable(struct collector *c, const char *rel)
{
	if (c->nunread < COLLECTOR_UNREAD_MAX)
		snprintf(c->unread[c->nunread], sizeof c->unread[0], "%s", rel);
	c->nunread++;
}

static bool below_unreadable(const struct collector *c, const char *rel)
{
	if (c->nunread > COLLECTOR_UNREAD_MAX)
		return true;
	for (size_t i = 0; i < c->nunread; i++) {
		size_t n = strlen(c->unread[i]);
		if (n == 0 ||
		    (strncmp(rel, c->unread[i], n) == 0 && (rel[n] == '\0' || rel[n] == '/')))
			return true;
	}
	return false;
}

/* Takes in the sandbox at rel (what could not be looked at goes to c->unread). */
static void add_sandbox(struct collector *c, const char *rel, const char *id, const char *account,
                        bool loud)
{
	if (!id_valid(id) || (account[0] && !id_valid(account))) {
		log_msg(loud ? LOG_WARN : LOG_DEBUG,
		        "cgroup \"%s\" matches --match but its %s \"%s\" is not a valid id (%s); "
		        "not sampled",
		        rel, id_valid(id) ? "account" : "sandbox", id_valid(id) ? account : id,
		        ID_RULE);
		return;
	}
	struct sandbox *old = collector_find(c, rel);
	char path[CG_PATH_MAX * 2];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", primary(c), rel);
	if (stat(path, &st) != 0) {
		if (errno == ENOTDIR || cg_gone_errno(errno))
			return; /* gone: a known sandbox there is retired by the scan */
		log_warn("sandbox %s: could not look at \"%s\": %s", id, path, strerror(errno));
		unreadable(c, rel);
		return;
	}
	if (old && !old->lost && old->h.inode == (int64_t)st.st_ino) {
		old->seen = true;
		return;
	}
	if (old) { /* made again under the same name while we did not look */
		struct parent *p = old->parent;
		lose(c, old, clock_now_us());
		if (p)
			settle(c, p, false);
		else
			retire(c, index_of(c, old));
	}
	if (!room_for_one(c, id))
		return;
	if (c->nsandboxes == c->capsandboxes) {
		size_t cap = c->capsandboxes ? c->capsandboxes * 2 : 64;
		struct sandbox **n = realloc(c->sandboxes, cap * sizeof *n);
		if (n == NULL) {
			log_error("sandbox %s not sampled: out of memory", id);
			return;
		}
		c->sandboxes = n;
		c->capsandboxes = cap;
	}
	size_t rel_len = strlen(rel) + 1, id_len = strlen(id) + 1;
	struct sandbox *sb = calloc(1, sizeof *sb + rel_len + id_len + strlen(account) + 1);
	if (sb == NULL) {
		log_error("sandbox %s not sampled: out of memory", id);
		return;
	}
	memcpy(sb->rel, rel, rel_len);
	sb->id = memcpy(sb->rel + rel_len, id, id_len);
	sb->account = strcpy(sb->rel + rel_len + id_len, account);
	sb->seen = true;
	sb->events_wd = -1;
	enum cg_status s = cg_open(&sb->h, &c->layout, rel);
	if (s != CG_OK) {
		if (s != CG_GONE) {
			int e = errno;
			c->stats.unsampled += e == EMFILE;
			log_error(
			        "sandbox %s: could not open the files of \"%s\": %s%s; not sampled "
			        "until the next rescan",
			        id, rel, strerror(e),
			        e == EMFILE
			                ? " (raise the open file limit: LimitNOFILE=, ulimit -n)"
			        : e == ENFILE ? " (the system's open file limit: fs.file-max)"
			                      : "");
		}
		free(sb);
		return;
	}
	if (sb->h.refused)
		log_warn("sandbox %s: could not open %s of \"%s\": %s; its figure is reported "
		         "absent",
		         id, sb->h.refused, rel, strerror(sb->h.refused_errno));
	c->files_open += (size_t)cg_files_open(&sb->h);
	if (sb->h.has_events && c->inotify_fd >= 0) {
		snprintf(path, sizeof path, "%s/%s/cgroup.events", c->layout.v2, rel);
		sb->events_wd = inotify_add_watch(c->inotify_fd, path, IN_MODIFY);
		if (sb->events_wd < 0)
			log_warn("sandbox %s: could not watch \"%s\": %s; its last interval "
			         "waits for the next round",
			         id, path, strerror(errno));
	}
	c->sandboxes[c->nsandboxes++] = sb;
	sb->rate = -1;
	log_info("sandbox %s (account %s, incarnation %lld) found at \"%s\"", id,
	         account[0] ? account : "unknown", (long long)sb->h.inode, rel);
	/* Its first sample now: a sandbox that ends before the next round is still
	 * billed (its end follows a reading), and its parent counts its CPU as its
	 * from here; a parent new (or unsure) is read around it (settle). */
	join_parent(c, sb);
	struct parent *p = sb->parent;
	if (p && p->settled && sample(c, sb) == CG_OK && sb->has_last) {
		sb->base = sb->last.cpu_usage_us;
		sb->base_ts = sb->last_ts;
		sb->based = true;
		p->low -= sb->base;
	} else if (p && p->fd >= 0 && !p->settled) {
		settle(c, p, false); /* may retire sb: lost at once */
	} else if (p && !p->settled) {
		if (sample(c, sb) == CG_GONE)
			settle(c, p,
			       false); /* its end: the last reading (its parent has no counter) */
	} else if (p) {
		settle(c, p, false); /* it could not be read: lost, or its parent is unsure now */
	} else if (sample(c, sb) == CG_GONE) {
		retire(c, index_of(c, sb));
	}
}

static void add_holder(struct collector *c, const char *rel)
{
	char path[CG_PATH_MAX * 2];
	if (c->inotify_fd < 0)
		return;
	snprintf(path, sizeof path, "%s%s%s", primary(c), rel[0] ? "/" : "", rel);
	int wd = inotify_add_watch(c->inotify_fd, path, HOLDER_EVENTS);
	if (wd < 0) {
		if (errno != ENOENT)
			log_warn("could not watch \"%s\": %s", path, strerror(errno));
		return;
	}
	for (size_t i = 0; i < c->nholders; i++)
		if (c->holders[i].wd == wd) {
			snprintf(c->holders[i].rel, sizeof c->holders[i].rel, "%s", rel);
			return;
		}
	if (c->nholders == c->capholders) {
		size_t cap = c->capholders ? c->capholders * 2 : 16;
		struct holder *n = realloc(c->holders, cap * sizeof *n);
		if (n == NULL) {
			log_error("could not watch \"%s\": out of memory", path);
			return;
		}
		c->holders = n;
		c->capholders = cap;
	}
	c->holders[c->nholders].wd = wd;
	snprintf(c->holders[c->nholders].rel, sizeof c->holders[0].rel, "%s", rel);
	c->nholders++;
}

/* Classifies the folder rel and takes it in: a sandbox, or a holder to walk. */
static void visit(struct collector *c, const char *rel, bool loud, int depth);

/* Walks the folder rel; one it cannot read goes to c->unread. */
static void walk(struct collector *c, const char *rel, bool loud, int depth)
{
	char path[CG_PATH_MAX * 2];
	snprintf(path, sizeof path, "%s%s%s", primary(c), rel[0] ? "/" : "", rel);
	add_holder(c, rel);
	DIR *d = opendir(path);
	if (d == NULL) {
		if (errno == ENOTDIR || cg_gone_errno(errno))
			return; /* gone while we looked */
		log_warn("could not read folder \"%s\": %s; no sandbox below it is retired by "
		         "this scan",
		         path, strerror(errno));
		unreadable(c, rel);
		return;
	}
	for (;;) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (e == NULL) {
			if (errno != 0) {
				log_warn("could not read folder \"%s\": %s; no sandbox below it is "
				         "retired by this scan",
				         path, strerror(errno));
				unreadable(c, rel);
			}
			break;
		}
		if (e->d_name[0] == '.' || (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN))
			continue;
		char child[CG_PATH_MAX];
		if (join(child, sizeof child, rel, e->d_name))
			visit(c, child, loud, depth + 1);
	}
	closedir(d);
}

static void visit(struct collector *c, const char *rel, bool loud, int depth)
{
	char id[CG_ID_MAX], account[CG_ID_MAX];
	if (depth > 32)
		return;
	switch (matcher_classify(c->matcher, rel, id, account)) {
	case MATCH_SANDBOX:
		add_sandbox(c, rel, id, account, loud);
		break;
	case MATCH_HOLDER:
		walk(c, rel, loud, depth);
		break;
	case MATCH_NONE:
		break;
	}
}

void collector_scan(struct collector *c)
{
	bool first = c->stats.rounds == 0 && c->nsandboxes == 0;
	for (size_t i = 0; i < c->nsandboxes; i++)
		c->sandboxes[i]->seen = false;
	c->stats.unsampled = 0;
	c->nunread = 0;
	c->in_scan = true;
	walk(c, "", first, 0); /* what it could not read is in c->unread */
	c->in_scan = false;
	if (c->stats.unsampled)
		log_error("%zu sandboxes not sampled: the open file limit (less %d kept for the "
		          "database, the spool and scans) has room for the cgroup files of %zu; "
		          "raise it (LimitNOFILE=, ulimit -n) and the next rescan takes them",
		          c->stats.unsampled, COLLECTOR_FD_RESERVE, c->nsandboxes);
	/* Not seen below an unreadable folder is not gone: inotify still retires
	 * what is removed there, and the next scan that reads it. */
	for (size_t i = c->nsandboxes; i-- > 0;)
		if (!c->sandboxes[i]->seen && !c->sandboxes[i]->lost &&
		    !below_unreadable(c, c->sandboxes[i]->rel)) {
			/* One last look before letting go: the files may still answer. */
			struct sandbox *sb = c->sandboxes[i];
			if (sample(c, sb) == CG_OK)
				retire(c, index_of(c, sb));
		}
	settle_lost(c); /* those whose files did not */
	c->rescan_wanted = false;
}

/*
 * cgroup.events of sb changed: when it says populated 0, the last processes
 * left, and its final sample ends the incarnation (rule 9). A runtime removes
 * the cgroup right then, so its CPU counter, the figure billed, is read first,
 * before anything else (one pread); when the cgroup is gone before even that,
 * its parent tells its last interval (settle).
 */
static void on_emptied(struct collector *c, struct sandbox *sb, bool *flush)
{
	int64_t cpu = -1;
	int64_t when = clock_now_us();
	enum cg_status st = CG_OK;
	if (sb->lost)
		st = CG_GONE;
	else if (sb->has_emptied_cpu) /* read as the event came in (collector_events) */
		cpu = sb->emptied_cpu, when = sb->emptied_at;
	else if (!sb->final_taken)
		st = cg_read_cpu(&sb->h, &cpu);
	sb->has_emptied_cpu = false;
	int populated = 1;
	if (st == CG_OK)
		st = cg_read_populated(&sb->h, &c->layout, sb->rel, &populated);
	if (st == CG_GONE) {
		struct parent *p = sb->parent;
		lose(c, sb, when);
		*flush = true;
		if (p)
			settle(c, p, false);
		else
			retire(c, index_of(c, sb));
		return;
	}
	if (st != CG_OK) {
		c->stats.read_errors++;
		log_warn("sandbox %s: could not read cgroup.events of \"%s\": %s; its last "
		         "interval waits for the next round",
		         sb->id, sb->rel,
		         st == CG_BADDATA ? "unexpected contents" : strerror(errno));
		return;
	}
	if (populated) {
		sb->final_taken = false;
		return;
	}
	if (sb->final_taken)
		return;
	/* The last processes left: the rest of its figures, fresh; gone by now, the
	 * counter read first is its last (it was read after the event). */
	size_t rows = c->batch.rows;
	cg_read_all_next(&sb->h);
	st = sample(c, sb);
	if (st == CG_GONE && sb->has_last && cpu >= sb->last.cpu_usage_us) {
		struct cg_reading r = sb->last;
		r.cpu_usage_us = cpu;
		if (batch_add(&c->batch, sb->id, sb->account, sb->h.inode, when, c->cfg.host, &r)) {
			sb->last = r;
			st = CG_OK;
		}
	}
	if (st == CG_OK) {
		if (c->batch.rows > rows) {
			batch_mark_end(&c->batch, END_READ);
			c->stats.ends_by[END_READ]++;
		}
		sb->final_taken = true;
		c->stats.final_samples++;
		c->stats.ends++;
		log_info("sandbox %s emptied: final sample taken, its end", sb->id);
		*flush = true;
	}
	if (sb->lost) {
		struct parent *p = sb->parent;
		if (!sb->final_taken)
			sb->gone_at = when;
		if (p)
			settle(c, p, false);
		else
			retire(c, index_of(c, sb));
	}
}

/* The sandbox whose cgroup.events the watch wd is on, or NULL. */
static struct sandbox *of_events(struct collector *c, int wd)
{
	for (size_t i = 0; i < c->nsandboxes; i++)
		if (c->sandboxes[i]->events_wd == wd)
			return c->sandboxes[i];
	return NULL;
}

/*
 * Before anything else, the CPU counter of every sandbox whose cgroup.events
 * changed in these events: each may have emptied, and its runtime is removing
 * its cgroup. When many end at once, reading them one pread each first wins
 * more of those races than handling them one by one (on_emptied then uses
 * these readings).
 */
static void read_emptied_first(struct collector *c, const char *buf, ssize_t n)
{
	for (const char *p = buf; p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(const void *)p;
		p += sizeof *ev + ev->len;
		if (!(ev->mask & IN_MODIFY))
			continue;
		struct sandbox *sb = of_events(c, ev->wd);
		if (sb == NULL || sb->lost || sb->final_taken || sb->has_emptied_cpu)
			continue;
		int64_t cpu;
		enum cg_status st = cg_read_cpu(&sb->h, &cpu);
		if (st == CG_OK) {
			sb->emptied_cpu = cpu;
			sb->emptied_at = clock_now_us();
			sb->has_emptied_cpu = true;
		} else if (st == CG_GONE) {
			lose(c, sb, clock_now_us());
		}
	}
}

void collector_events(struct collector *c)
{
	char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool flush = false;
	for (;;) {
		ssize_t n = read(c->inotify_fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		read_emptied_first(c, buf, n);
		for (char *p = buf; p < buf + n;) {
			/* the buffer is aligned for it; the cast goes through void * so that
			 * -Wcast-align, which sees only char *, has nothing to say */
			const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
			p += sizeof *ev + ev->len;
			if (ev->mask & IN_Q_OVERFLOW) {
				log_warn("inotify queue overflowed: rescanning");
				c->rescan_wanted = true;
				continue;
			}
			/* cgroup.events of a sandbox (one lost by read_emptied_first has no
			 * watch left: its end is settled below, with its parent's) */
			struct sandbox *sb = of_events(c, ev->wd);
			if (sb) {
				if (ev->mask & IN_IGNORED)
					sb->events_wd = -1;
				else if (ev->mask & IN_MODIFY)
					on_emptied(c, sb, &flush);
				continue;
			}
			size_t h = 0;
			while (h < c->nholders && c->holders[h].wd != ev->wd)
				h++;
			if (h == c->nholders)
				continue;
			if (ev->mask & IN_IGNORED) { /* the folder went away */
				c->holders[h] = c->holders[--c->nholders];
				continue;
			}
			if (ev->len == 0 || !(ev->mask & IN_ISDIR))
				continue;
			char child[CG_PATH_MAX];
			if (!join(child, sizeof child, c->holders[h].rel, ev->name))
				continue;
			if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
				visit(c, child, true, 1);
			} else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
				struct sandbox *gone = collector_find(c, child);
				if (gone && sample(c, gone) == CG_OK)
					retire(c, index_of(c, gone));
				else if (gone && gone->lost && gone->parent) {
					settle(c, gone->parent, false);
					flush = true;
				} else if (gone && gone->lost) {
					retire(c, index_of(c, gone));
				}
			}
		}
	}
	settle_lost(c);
	if (c->rescan_wanted)
		collector_scan(c);
	if (flush)
		c->flush_wanted = true;
}

void collector_round(struct collector *c)
{
	c->stats.rounds++;
	/* settle may free a parent (and move the last into its place: one done) */
	for (size_t i = c->nparents; i-- > 0;)
		if (i < c->nparents)
			settle(c, c->parents[i], true);
	/* a sandbox without a parent (out of memory when it was found) */
	for (size_t i = c->nsandboxes; i-- > 0;)
		if (i < c->nsandboxes && c->sandboxes[i]->parent == NULL &&
		    sample(c, c->sandboxes[i]) == CG_GONE)
			retire(c, i);
}

static bool send_batch(void *ctx, const char *data, size_t len, char *err, size_t errlen)
{
	struct collector *c = ctx;
	long inserted = 0;
	if (!writer_write(c->db, c->cfg.db_role, data, len, &inserted, err, errlen))
		return false;
	c->stats.written += (uint64_t)inserted;
	/* A fault for tests: the same batch again, in a transaction of its own. */
	if (c->cfg.send_twice) {
		if (!writer_write(c->db, c->cfg.db_role, data, len, &inserted, err, errlen))
			return false;
		c->stats.written += (uint64_t)inserted;
	}
	return true;
}

static bool connected(struct collector *c)
{
	char err[1024];
	if (c->db && PQstatus(c->db) == CONNECTION_OK)
		return true;
	if (c->db)
		PQfinish(c->db);
	c->db = db_connect(c->cfg.db_url, err, sizeof err);
	if (c->db == NULL)
		log_warn("%s", err);
	return c->db != NULL;
}

static void disconnect(struct collector *c)
{
	if (c->db)
		PQfinish(c->db);
	c->db = NULL;
}

/*
 * The batch could not go anywhere: thin it to the newest sample of each
 * sandbox incarnation and keep that for the next flush. Only when even that
 * is past the in-memory bound (or memory ran out) are samples dropped.
 */
static void keep_thinned(struct collector *c, size_t rows, const char *why)
{
	if (batch_thin(&c->batch) && c->batch.len <= SPOOL_REC_MAX / 2) {
		c->stats.thinned_batches++;
		log_error("%s: %zu samples thinned to the newest of each sandbox (%zu) and kept in "
		          "memory; CPU totals stay exact, resolution is lost; give the spool more "
		          "room (--spool-max-mib) or bring the database back",
		          why, rows, c->batch.rows);
		return;
	}
	c->stats.refused_batches++;
	log_error("SAMPLES REFUSED: %s; %zu samples dropped", why, c->batch.rows);
	batch_clear(&c->batch);
}

bool collector_flush(struct collector *c)
{
	c->flush_wanted = false;
	char err[1024];
	size_t rows = c->batch.rows;
	bool spool_waiting = c->have_spool && c->spool.records > 0;
	if (rows == 0 && !spool_waiting)
		return true;
	if (connected(c)) {
		if (spool_waiting && !spool_replay(&c->spool, send_batch, c, err, sizeof err)) {
			log_warn("spool replay stopped: %s", err);
			disconnect(c);
			goto spool_it;
		}
		if (rows == 0)
			return true;
		uint64_t before = c->stats.written;
		if (!send_batch(c, c->batch.buf, c->batch.len, err, sizeof err)) {
			if (PQstatus(c->db) == CONNECTION_OK)
				/* The database is there and refused them: a grant, a constraint. */
				log_error("the database refused %zu samples: %s; they go to the "
				          "spool and are tried again on every flush",
				          rows, err);
			else
				log_warn("could not write %zu samples: %s", rows, err);
			disconnect(c);
			goto spool_it;
		}
		c->stats.duplicates += rows - (c->stats.written - before);
		log_debug("wrote %zu samples (%llu new)", rows,
		          (unsigned long long)(c->stats.written - before));
		batch_clear(&c->batch);
		return true;
	}
spool_it:
	if (rows == 0)
		return true;
	if (!c->have_spool) {
		log_error("%zu samples kept in memory: no database and no spool", rows);
		return false;
	}
	switch (spool_append(&c->spool, c->batch.buf, c->batch.len, err, sizeof err)) {
	case SPOOL_OK:
		c->stats.spooled_batches++;
		log_info("database away: spooled %zu samples (%zu batches waiting)", rows,
		         c->spool.records);
		batch_clear(&c->batch);
		return true;
	case SPOOL_FULL:
		/* Keep the newest sample of each incarnation in memory: with cumulative
		 * counters that is all the CPU; only resolution is given up. */
		keep_thinned(c, rows, err);
		return false;
	case SPOOL_ERROR:
		break;
	}
	log_error("%s; %zu samples kept in memory for the next try", err, rows);
	if (c->batch.len > SPOOL_REC_MAX / 2)
		keep_thinned(c, rows, "the samples held in memory passed their bound");
	return false;
}
