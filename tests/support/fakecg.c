#include "tests/support/fakecg.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool mkdirs(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
				return false;
			*p = '/';
		}
	return mkdir(tmp, 0755) == 0 || errno == EEXIST;
}

static bool put(const char *dir, const char *name, const char *text)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT, 0644);
	if (fd < 0) {
		fprintf(stderr, "fakecg: %s: %s\n", path, strerror(errno));
		return false;
	}
	size_t len = strlen(text);
	bool ok = pwrite(fd, text, len, 0) == (ssize_t)len && ftruncate(fd, (off_t)len) == 0;
	close(fd);
	return ok;
}

bool fakecg_tree(const char *base, enum fakecg_kind kind, char *root, size_t len)
{
	snprintf(root, len, "%s/meter-fakecg-XXXXXX", base);
	if (mkdtemp(root) == NULL)
		return false;
	char d[4096];
	switch (kind) {
	case FAKE_V2:
		return put(root, "cgroup.controllers", "cpu memory\n");
	case FAKE_HYBRID:
		snprintf(d, sizeof d, "%s/unified", root);
		if (!mkdirs(d) || !put(d, "cgroup.controllers", "\n"))
			return false;
		snprintf(d, sizeof d, "%s/memory", root);
		if (!mkdirs(d))
			return false;
		snprintf(d, sizeof d, "%s/cpu", root);
		return mkdirs(d);
	case FAKE_V1:
		for (const char *const *h = (const char *const[]){"cpuacct", "cpu", "memory", NULL};
		     *h; h++) {
			snprintf(d, sizeof d, "%s/%s", root, *h);
			if (!mkdirs(d))
				return false;
		}
		return true;
	}
	return false;
}

static const char *cpu_hier(enum fakecg_kind kind)
{
	return kind == FAKE_V2 ? "" : kind == FAKE_HYBRID ? "unified" : "cpuacct";
}

static void dir_of(char *out, size_t len, const char *root, const char *hier, const char *rel)
{
	snprintf(out, len, "%s%s%s/%s", root, hier[0] ? "/" : "", hier, rel);
}

static bool cpu_text(enum fakecg_kind kind, int64_t cpu_us, char *buf, size_t len)
{
	if (kind == FAKE_V1)
		snprintf(buf, len, "%020lld\n", (long long)cpu_us * 1000);
	else
		snprintf(buf, len, "usage_usec %020lld\nuser_usec 0\nsystem_usec 0\n",
		         (long long)cpu_us);
	return true;
}

bool fakecg_sandbox(const char *root, enum fakecg_kind kind, const char *rel, int64_t cpu_us)
{
	char stage[4096], final[4096], cpu[128];
	const char *name = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
	/* Memory first (v1 and hybrid keep it in another hierarchy). */
	if (kind != FAKE_V2) {
		dir_of(final, sizeof final, root, "memory", rel);
		if (!mkdirs(final) || !put(final, "memory.usage_in_bytes", "1048576\n") ||
		    !put(final, "memory.max_usage_in_bytes", "2097152\n") ||
		    !put(final, "memory.limit_in_bytes", "4294967296\n") ||
		    !put(final, "memory.kmem.usage_in_bytes", "4096\n") ||
		    !put(final, "memory.stat", "cache 0\nrss 512\ntotal_cache 0\ntotal_rss 8192\n"))
			return false;
		if (kind == FAKE_V1) {
			dir_of(final, sizeof final, root, "cpu", rel);
			if (!mkdirs(final) || !put(final, "cpu.cfs_quota_us", "200000\n") ||
			    !put(final, "cpu.cfs_period_us", "100000\n"))
				return false;
		} else {
			dir_of(final, sizeof final, root, "cpu", rel);
			if (!mkdirs(final) || !put(final, "cpu.cfs_quota_us", "-1\n") ||
			    !put(final, "cpu.cfs_period_us", "100000\n"))
				return false;
		}
	}
	/* The CPU folder appears whole, by a rename. */
	snprintf(stage, sizeof stage, "%s/.stage-%s", root, name);
	if (!mkdirs(stage))
		return false;
	cpu_text(kind, cpu_us, cpu, sizeof cpu);
	if (kind == FAKE_V1) {
		if (!put(stage, "cpuacct.usage", cpu))
			return false;
	} else {
		if (!put(stage, "cpu.stat", cpu) ||
		    !put(stage, "cgroup.events", "populated 1\nfrozen 0\n"))
			return false;
	}
	if (kind == FAKE_V2 &&
	    (!put(stage, "memory.current", "1048576\n") ||
	     !put(stage, "memory.peak", "2097152\n") || !put(stage, "memory.max", "max\n") ||
	     !put(stage, "cpu.max", "200000 100000\n") ||
	     !put(stage, "memory.stat", "anon 4096\nfile 100\nkernel 1024\nsock 0\n")))
		return false;
	dir_of(final, sizeof final, root, cpu_hier(kind), rel);
	char parent[4096];
	snprintf(parent, sizeof parent, "%s", final);
	*strrchr(parent, '/') = '\0';
	if (!mkdirs(parent) || rename(stage, final) != 0) {
		fprintf(stderr, "fakecg: rename to %s: %s\n", final, strerror(errno));
		return false;
	}
	return true;
}

bool fakecg_write(const char *root, const char *hierarchy, const char *rel, const char *file,
                  const char *text)
{
	char d[4096];
	dir_of(d, sizeof d, root, hierarchy, rel);
	return put(d, file, text);
}

bool fakecg_set_cpu(const char *root, enum fakecg_kind kind, const char *rel, int64_t cpu_us)
{
	char d[4096], cpu[128];
	dir_of(d, sizeof d, root, cpu_hier(kind), rel);
	cpu_text(kind, cpu_us, cpu, sizeof cpu);
	return put(d, kind == FAKE_V1 ? "cpuacct.usage" : "cpu.stat", cpu);
}

bool fakecg_set_populated(const char *root, enum fakecg_kind kind, const char *rel, int populated)
{
	char d[4096];
	dir_of(d, sizeof d, root, cpu_hier(kind), rel);
	return put(d, "cgroup.events",
	           populated ? "populated 1\nfrozen 0\n" : "populated 0\nfrozen 0\n");
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

bool fakecg_remove(const char *path)
{
	if (path == NULL || path[0] == '\0')
		return true;
	nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
	return access(path, F_OK) != 0;
}
