#include "collector/layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool exists(const char *dir, const char *name, bool want_dir)
{
	char p[CG_PATH_MAX + 64];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

static void set(char *dst, const char *dir, const char *name)
{
	if (name)
		snprintf(dst, CG_PATH_MAX, "%s/%s", dir, name);
	else
		snprintf(dst, CG_PATH_MAX, "%s", dir);
}

static bool by_folders(const char *root, const char *kind, struct cg_layout *l, char *err,
                       size_t errlen)
{
	if (strcmp(kind, "v2") == 0) {
		if (!exists(root, "cgroup.controllers", false))
			goto bad;
		set(l->v2, root, NULL);
		return true;
	}
	if (strcmp(kind, "hybrid") == 0) {
		if (!exists(root, "unified/cgroup.controllers", false) ||
		    !exists(root, "memory", true))
			goto bad;
		set(l->v2, root, "unified");
		set(l->memory, root, "memory");
		if (exists(root, "cpu", true))
			set(l->cpu, root, "cpu");
		if (exists(root, "freezer", true))
			set(l->freezer, root, "freezer");
		return true;
	}
	if (strcmp(kind, "v1") == 0) {
		if (exists(root, "cpuacct", true))
			set(l->cpuacct, root, "cpuacct");
		else if (exists(root, "cpu,cpuacct", true))
			set(l->cpuacct, root, "cpu,cpuacct");
		else
			goto bad;
		set(l->cpu, root, exists(root, "cpu", true) ? "cpu" : "cpu,cpuacct");
		if (exists(root, "memory", true))
			set(l->memory, root, "memory");
		if (exists(root, "freezer", true))
			set(l->freezer, root, "freezer");
		return true;
	}
	snprintf(err, errlen, "--layout: \"%s\" is not one of auto, v2, v1, hybrid", kind);
	return false;
bad:
	snprintf(err, errlen, "--root \"%s\" does not hold a %s cgroup tree (see --help)", root,
	         kind);
	return false;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (char *p = s; *p; p++) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			*o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

/* True when path is root or below it. */
static bool under(const char *path, const char *root)
{
	size_t n = strlen(root);
	while (n > 1 && root[n - 1] == '/')
		n--;
	return strncmp(path, root, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool has_option(const char *opts, const char *want)
{
	size_t n = strlen(want);
	for (const char *p = opts; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len == n && strncmp(p, want, n) == 0)
			return true;
		p = comma ? comma + 1 : NULL;
	}
	return false;
}

void layout_from_mountinfo(const char *root, FILE *f, struct cg_layout *l)
{
	char line[4096];
	bool whole = true; /* the last fgets() ended a line */
	while (fgets(line, sizeof line, f)) {
		/* A line longer than the buffer (an overlay mount's option list can
		 * be) is no cgroup mount of ours: skip it to its end, never parse
		 * its tail as a line of its own. */
		size_t n = strlen(line);
		bool started = whole;
		whole = (n > 0 && line[n - 1] == '\n') || feof(f);
		if (!started || !whole)
			continue;
		/* id parent major:minor root mountpoint options [optional...] - fstype source super
		 */
		char *save = NULL, *fields[6] = {0};
		int nf = 0;
		while (nf < 6) {
			char *w = strtok_r(nf ? NULL : line, " \n", &save);
			if (w == NULL)
				break;
			fields[nf++] = w;
		}
		if (nf < 6)
			continue;
		char *sep = save ? strstr(save, "- ") : NULL;
		if (sep == NULL)
			continue;
		char *rest = sep + 2, *s2 = NULL;
		char *fstype = strtok_r(rest, " \n", &s2);
		strtok_r(NULL, " \n", &s2); /* source */
		char *super = strtok_r(NULL, " \n", &s2);
		char *mnt = fields[4];
		unescape(mnt);
		if (fstype == NULL || !under(mnt, root) || strcmp(fields[3], "/") != 0 ||
		    strlen(mnt) >= CG_PATH_MAX - 32) /* a path we could not hold whole */
			continue;
		if (strcmp(fstype, "cgroup2") == 0 && l->v2[0] == '\0') {
			set(l->v2, mnt, NULL);
		} else if (strcmp(fstype, "cgroup") == 0) {
			if (has_option(super, "cpuacct") && l->cpuacct[0] == '\0')
				set(l->cpuacct, mnt, NULL);
			if (has_option(super, "cpu") && l->cpu[0] == '\0')
				set(l->cpu, mnt, NULL);
			if (has_option(super, "memory") && l->memory[0] == '\0')
				set(l->memory, mnt, NULL);
			if (has_option(super, "freezer") && l->freezer[0] == '\0')
				set(l->freezer, mnt, NULL);
		}
	}
}

static bool by_mounts(const char *root, const char *mountinfo, struct cg_layout *l, char *err,
                      size_t errlen)
{
	char *real = realpath(root, NULL);
	if (real == NULL) {
		snprintf(err, errlen, "--root \"%s\": %s", root, strerror(errno));
		return false;
	}
	FILE *f = fopen(mountinfo ? mountinfo : "/proc/self/mountinfo", "re");
	if (f == NULL) {
		snprintf(err, errlen, "could not read mountinfo: %s", strerror(errno));
		free(real);
		return false;
	}
	layout_from_mountinfo(real, f, l);
	fclose(f);
	free(real);
	if (l->v2[0] == '\0' && l->cpuacct[0] == '\0') {
		snprintf(err, errlen,
		         "--root \"%s\" is not a cgroup filesystem and holds no cgroup2 or v1 "
		         "cpuacct mount (see /proc/self/mountinfo, or --layout for a tree that "
		         "is not mounted)",
		         root);
		return false;
	}
	return true;
}

bool layout_find(const char *root, const char *kind, const char *mountinfo, struct cg_layout *l,
                 char *err, size_t errlen)
{
	memset(l, 0, sizeof *l);
	if (strlen(root) >= CG_PATH_MAX - 32) {
		snprintf(err, errlen, "--root \"%s\" is too long", root);
		return false;
	}
	if (strcmp(kind, "auto") == 0)
		return by_mounts(root, mountinfo, l, err, errlen);
	return by_folders(root, kind, l, err, errlen);
}

const char *layout_name(const struct cg_layout *l)
{
	if (l->v2[0] && l->memory[0])
		return "hybrid";
	return l->v2[0] ? "v2" : "v1";
}
