#include "collector/enforce.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collector/collector.h"
#include "common/db.h"
#include "common/log.h"

bool enforce_mode_parse(const char *s, enum enforce_mode *mode)
{
	static const char *const names[] = {"off", "freeze", "kill"};
	for (int i = 0; i < 3; i++)
		if (strcmp(s, names[i]) == 0) {
			*mode = (enum enforce_mode)i;
			return true;
		}
	return false;
}

/* Writes text to dir/rel/file; false with err. */
static bool put(const char *dir, const char *rel, const char *file, const char *text, char *err,
                size_t errlen)
{
	char path[CG_PATH_MAX * 2 + 32];
	snprintf(path, sizeof path, "%s/%s/%s", dir, rel, file);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? write(fd, text, strlen(text)) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)strlen(text)) {
		snprintf(err, errlen, "could not write \"%s\" to %s: %s", text, path, strerror(e));
		return false;
	}
	return true;
}

static bool has(const char *dir, const char *rel, const char *file)
{
	char path[CG_PATH_MAX * 2 + 32];
	if (dir[0] == '\0')
		return false;
	snprintf(path, sizeof path, "%s/%s/%s", dir, rel, file);
	return access(path, F_OK) == 0;
}

bool enforce_freeze(const struct cg_layout *l, const char *rel, bool frozen, char *err,
                    size_t errlen)
{
	if (has(l->v2, rel, "cgroup.freeze"))
		return put(l->v2, rel, "cgroup.freeze", frozen ? "1" : "0", err, errlen);
	if (has(l->freezer, rel, "freezer.state"))
		return put(l->freezer, rel, "freezer.state", frozen ? "FROZEN" : "THAWED", err,
		           errlen);
	snprintf(err, errlen, "cgroup \"%s\" has neither cgroup.freeze (v2) nor freezer.state (v1)",
	         rel);
	return false;
}

bool enforce_kill(const struct cg_layout *l, const char *rel, char *err, size_t errlen)
{
	if (has(l->v2, rel, "cgroup.kill"))
		return put(l->v2, rel, "cgroup.kill", "1", err, errlen);
	/* v1: each process, until none is left (a fork meanwhile is caught next time) */
	char path[CG_PATH_MAX * 2 + 32];
	snprintf(path, sizeof path, "%s/%s/cgroup.procs", cg_layout_primary(l), rel);
	FILE *in = fopen(path, "r");
	if (in == NULL) {
		snprintf(err, errlen, "could not read %s: %s", path, strerror(errno));
		return false;
	}
	long pid;
	while (fscanf(in, "%ld", &pid) == 1)
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
	fclose(in);
	return true;
}

/* The sandboxes this collector froze, from the state file, marked on c's sandboxes. */
static void load_state(struct collector *c, const char *path)
{
	FILE *in = path[0] ? fopen(path, "r") : NULL;
	char line[CG_PATH_MAX + 2];
	while (in && fgets(line, sizeof line, in)) {
		line[strcspn(line, "\n")] = '\0';
		struct sandbox *sb = collector_find(c, line);
		if (sb)
			sb->frozen = true;
	}
	if (in)
		fclose(in);
}

/* Writes the sandboxes frozen now (a temporary file, renamed). */
static void save_state(const struct collector *c, const char *path)
{
	char tmp[CG_PATH_MAX + 16];
	if (!path[0])
		return;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *out = fopen(tmp, "w");
	bool ok = out != NULL;
	for (size_t i = 0; ok && i < c->nsandboxes; i++)
		if (c->sandboxes[i]->frozen)
			ok = fprintf(out, "%s\n", c->sandboxes[i]->rel) > 0;
	if (out && fclose(out) != 0)
		ok = false;
	if (!ok || rename(tmp, path) != 0)
		log_warn("enforce: could not write %s: %s; a restart would not thaw what is frozen",
		         path, strerror(errno));
}

/* Whether account (of the accounts over a limit in r) is over; its reason in *why. */
static bool over(const PGresult *r, const char *account, const char **why)
{
	for (int i = 0; i < PQntuples(r); i++)
		if (strcmp(PQgetvalue(r, i, 0), account) == 0) {
			*why = PQgetvalue(r, i, 1);
			return true;
		}
	return false;
}

void enforce_pass(struct collector *c, enum enforce_mode mode, const char *state_path)
{
	static bool loaded, warned;
	char err[512];
	if (mode == ENFORCE_OFF)
		return;
	if (!loaded) {
		load_state(c, state_path);
		loaded = true;
	}
	/* The accounts of this host's sandboxes, as an array literal (ids need no quoting). */
	size_t cap = 64, len = 1; /* "{", the accounts, "}" and the NUL */
	char *list = malloc(cap);
	if (list == NULL)
		return;
	list[0] = '{';
	for (size_t i = 0; i < c->nsandboxes; i++) {
		const char *a = c->sandboxes[i]->account;
		size_t n = strlen(a);
		if (n == 0)
			continue;
		if (len + n + 3 > cap) {
			cap = (len + n + 3) * 2;
			char *bigger = realloc(list, cap);
			if (bigger == NULL) {
				free(list);
				return;
			}
			list = bigger;
		}
		if (len > 1)
			list[len++] = ',';
		memcpy(list + len, a, n);
		len += n;
	}
	list[len++] = '}';
	list[len] = '\0';
	if (len == 2 || c->db == NULL || PQstatus(c->db) != CONNECTION_OK) {
		free(list);
		return; /* nothing to ask about, or no database: the next pass asks again */
	}
	const char *p[] = {list};
	PGresult *r = db_query(
	        c->db,
	        "SELECT account_id, CASE WHEN trial_exhausted THEN 'trial_exhausted' "
	        "ELSE 'spend_cap_reached' END FROM account_limits "
	        "WHERE account_id = ANY ($1::text[]) AND (trial_exhausted OR "
	        "(spend_cap_reached AND month = date_trunc('month', now() AT TIME "
	        "ZONE 'UTC')::date))",
	        1, p, PGRES_TUPLES_OK, "could not read the accounts' limits", err, sizeof err);
	free(list);
	if (r == NULL) {
		if (!warned)
			log_warn("enforce: %s; tried again each round", err);
		warned = true;
		return;
	}
	warned = false;
	bool changed = false;
	for (size_t i = 0; i < c->nsandboxes; i++) {
		struct sandbox *sb = c->sandboxes[i];
		const char *why = NULL;
		bool is_over = sb->account[0] && over(r, sb->account, &why);
		if (is_over && mode == ENFORCE_KILL) {
			if (!enforce_kill(&c->layout, sb->rel, err, sizeof err))
				log_warn("enforce: sandbox %s of account %s: %s", sb->id,
				         sb->account, err);
			else if (!sb->final_taken)
				log_info("enforce: killed sandbox %s of account %s (%s)", sb->id,
				         sb->account, why);
		} else if (is_over && !sb->frozen) {
			if (enforce_freeze(&c->layout, sb->rel, true, err, sizeof err)) {
				sb->frozen = changed = true;
				log_info("enforce: froze sandbox %s of account %s (%s)", sb->id,
				         sb->account, why);
			} else {
				log_warn("enforce: sandbox %s of account %s: %s", sb->id,
				         sb->account, err);
			}
		} else if (!is_over && sb->frozen) {
			if (enforce_freeze(&c->layout, sb->rel, false, err, sizeof err)) {
				sb->frozen = false;
				changed = true;
				log_info("enforce: thawed sandbox %s of account %s (its limit "
				         "lifted)",
				         sb->id, sb->account);
			} else {
				log_warn("enforce: sandbox %s of account %s: %s", sb->id,
				         sb->account, err);
			}
		}
	}
	PQclear(r);
	if (changed)
		save_state(c, state_path);
}
