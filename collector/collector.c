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
		if (!spool_open(&c->spool, cfg->spool_path, cfg->spool_max, err, errlen))
			goto fail;
		c->have_spool = true;
		if (c->spool.records)
			log_info("spool \"%s\" holds %zu batches from before; they go first",
			         cfg->spool_path, c->spool.records);
	}
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

/*
 * Lets go of a sandbox whose cgroup went away. Unless its final sample (taken
 * when it emptied) ended it already, its end is now: one more row with the
 * last counter read, marked as the end (rule 9).
 */
static void retire(struct collector *c, size_t i)
{
	struct sandbox *sb = c->sandboxes[i];
	log_info("sandbox %s (account %s, incarnation %lld) retired: its cgroup is gone", sb->id,
	         sb->account[0] ? sb->account : "unknown", (long long)sb->h.inode);
	if (!sb->final_taken && sb->has_last) {
		if (batch_add(&c->batch, sb->id, sb->account, sb->h.inode, clock_now_us(),
		              c->cfg.host, &sb->last)) {
			batch_mark_end(&c->batch);
			c->stats.ends++;
			c->stats.samples++; /* a row like the others */
		} else {
			log_error("sandbox %s: its end is lost: out of memory", sb->id);
		}
	}
	if (sb->events_wd >= 0)
		inotify_rm_watch(c->inotify_fd, sb->events_wd);
	c->files_open -= (size_t)cg_files_open(&sb->h);
	cg_close(&sb->h);
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

/* Takes one sample into the batch. False when the sandbox was retired. */
static bool sample(struct collector *c, struct sandbox *sb)
{
	struct cg_reading r;
	const char *file = NULL;
	enum cg_status st = cg_read(&sb->h, &r, &file);
	int64_t ts = clock_now_us();
	if (st == CG_GONE) {
		retire(c, index_of(c, sb));
		return false;
	}
	if (st != CG_OK) {
		c->stats.read_errors++;
		log_warn("sandbox %s: could not read %s of \"%s\": %s", sb->id, file ? file : "?",
		         sb->rel, st == CG_BADDATA ? "unexpected contents" : strerror(errno));
		return true;
	}
	if (!batch_add(&c->batch, sb->id, sb->account, sb->h.inode, ts, c->cfg.host, &r)) {
		log_error("sandbox %s: sample dropped: out of memory", sb->id);
		return true;
	}
	sb->last = r;
	sb->has_last = true;
	c->stats.samples++;
	return true;
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
	if (old && old->h.inode == (int64_t)st.st_ino) {
		old->seen = true;
		return;
	}
	if (old) /* made again under the same name while we did not look */
		retire(c, index_of(c, old));
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
	log_info("sandbox %s (account %s, incarnation %lld) found at \"%s\"", id,
	         account[0] ? account : "unknown", (long long)sb->h.inode, rel);
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
		if (!c->sandboxes[i]->seen && !below_unreadable(c, c->sandboxes[i]->rel)) {
			/* One last look before letting go: the files may still answer. */
			struct sandbox *sb = c->sandboxes[i];
			if (sample(c, sb))
				retire(c, index_of(c, sb));
		}
	c->rescan_wanted = false;
}

static void on_emptied(struct collector *c, struct sandbox *sb, bool *flush)
{
	int populated = 1;
	enum cg_status st = cg_read_populated(&sb->h, &c->layout, sb->rel, &populated);
	if (st == CG_GONE) {
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
	/* The last processes left: sample now, before the cgroup can be removed; that
	 * sample ends the incarnation (rule 9). */
	size_t rows = c->batch.rows;
	cg_read_all_next(&sb->h); /* its last figures, fresh */
	if (sample(c, sb)) {
		if (c->batch.rows > rows)
			batch_mark_end(&c->batch);
		sb->final_taken = true;
		c->stats.final_samples++;
		c->stats.ends++;
		log_info("sandbox %s emptied: final sample taken, its end", sb->id);
		*flush = true;
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
			/* cgroup.events of a sandbox */
			struct sandbox *sb = NULL;
			for (size_t i = 0; i < c->nsandboxes && !sb; i++)
				if (c->sandboxes[i]->events_wd == ev->wd)
					sb = c->sandboxes[i];
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
				if (gone && sample(c, gone))
					retire(c, index_of(c, gone));
			}
		}
	}
	if (c->rescan_wanted)
		collector_scan(c);
	if (flush)
		collector_flush(c);
}

void collector_round(struct collector *c)
{
	c->stats.rounds++;
	for (size_t i = c->nsandboxes; i-- > 0;)
		sample(c, c->sandboxes[i]);
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
