#include "collector/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "meter/checked.h"
#include "meter/plan.h"

/* Large enough for memory.stat of a v2 cgroup (about 1.5 KB on Linux 6). */
#define CG_BUF 8192

/* A v1 limit at or above this is the kernel's "no limit" (PAGE_COUNTER_MAX). */
#define CG_V1_UNLIMITED (INT64_C(1) << 62)

const char *cg_layout_primary(const struct cg_layout *l)
{
	return l->v2[0] ? l->v2 : l->cpuacct;
}

void cg_init(struct cg_handle *h)
{
	memset(h, 0, sizeof *h);
	for (int i = 0; i < CG_NFILES; i++)
		h->fd[i] = -1;
}

void cg_close(struct cg_handle *h)
{
	for (int i = 0; i < CG_NFILES; i++) {
		if (h->fd[i] >= 0)
			close(h->fd[i]);
		h->fd[i] = -1;
	}
}

bool cg_gone_errno(int e)
{
	return e == ENOENT || e == ENODEV || e == ESTALE;
}

/* Opens dir/rel/name; -1 and errno when it cannot. */
static int open_in(const char *dir, const char *rel, const char *name)
{
	char path[CG_PATH_MAX * 2 + 64];
	if (dir[0] == '\0') {
		errno = ENOENT;
		return -1;
	}
	int n = snprintf(path, sizeof path, "%s/%s/%s", dir, rel, name);
	if (n < 0 || (size_t)n >= sizeof path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* Out of descriptors or memory: passing, and never a reason to call a file absent. */
static bool resource_errno(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOMEM;
}

/*
 * Opens an optional file into *fd: -1 when the host lacks it (ENOENT) or
 * refuses it (EACCES, EPERM: then h->refused names it, for one warning).
 * Running out of descriptors or memory is not "absent": false with errno
 * set, so the caller fails the whole open rather than report a figure the
 * host has as missing, and tries again later.
 */
static bool open_optional(struct cg_handle *h, int *fd, const char *dir, const char *rel,
                          const char *name)
{
	*fd = open_in(dir, rel, name);
	if (*fd >= 0 || errno == ENOENT)
		return true;
	if (resource_errno(errno))
		return false;
	if (h->refused == NULL) {
		h->refused = name;
		h->refused_errno = errno;
	}
	return true;
}

/* The v1 memory files of rel; false (errno) when out of descriptors or memory. */
static bool open_v1_memory(struct cg_handle *h, const struct cg_layout *l, const char *rel)
{
	return open_optional(h, &h->fd[CG_MEM_CUR], l->memory, rel, "memory.usage_in_bytes") &&
	       open_optional(h, &h->fd[CG_MEM_PEAK], l->memory, rel, "memory.max_usage_in_bytes") &&
	       open_optional(h, &h->fd[CG_MEM_STAT], l->memory, rel, "memory.stat") &&
	       open_optional(h, &h->fd[CG_MEM_MAX], l->memory, rel, "memory.limit_in_bytes") &&
	       open_optional(h, &h->fd[CG_MEM_KMEM], l->memory, rel, "memory.kmem.usage_in_bytes");
}

/* The v1 CFS quota and period of rel, both or neither; false as open_v1_memory. */
static bool open_v1_cpu_limit(struct cg_handle *h, const struct cg_layout *l, const char *rel)
{
	if (!open_optional(h, &h->fd[CG_CPU_MAX], l->cpu, rel, "cpu.cfs_quota_us") ||
	    !open_optional(h, &h->fd[CG_CPU_PERIOD], l->cpu, rel, "cpu.cfs_period_us"))
		return false;
	if (h->fd[CG_CPU_PERIOD] < 0 && h->fd[CG_CPU_MAX] >= 0) {
		close(h->fd[CG_CPU_MAX]);
		h->fd[CG_CPU_MAX] = -1;
	}
	return true;
}

enum cg_status cg_open(struct cg_handle *h, const struct cg_layout *l, const char *rel)
{
	char path[CG_PATH_MAX * 2 + 8];
	struct stat st;
	cg_init(h);
	snprintf(path, sizeof path, "%s/%s", cg_layout_primary(l), rel);
	if (stat(path, &st) != 0)
		return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
	h->inode = (int64_t)st.st_ino;

	/* CPU usage: v2 cpu.stat, else v1 cpuacct.usage. It must be there. */
	h->fd[CG_CPU] = open_in(l->v2, rel, "cpu.stat");
	h->cpu_v2 = h->fd[CG_CPU] >= 0;
	if (!h->cpu_v2 && errno == ENOENT)
		h->fd[CG_CPU] = open_in(l->cpuacct, rel, "cpuacct.usage");
	if (h->fd[CG_CPU] < 0)
		goto fail;

	/* Memory: v2 files when the v2 hierarchy has them, else v1. */
	if (!open_optional(h, &h->fd[CG_MEM_CUR], l->v2, rel, "memory.current"))
		goto fail;
	h->mem_v2 = h->fd[CG_MEM_CUR] >= 0;
	if (h->mem_v2) {
		if (!open_optional(h, &h->fd[CG_MEM_PEAK], l->v2, rel, "memory.peak") ||
		    !open_optional(h, &h->fd[CG_MEM_STAT], l->v2, rel, "memory.stat") ||
		    !open_optional(h, &h->fd[CG_MEM_MAX], l->v2, rel, "memory.max"))
			goto fail;
	} else if (!open_v1_memory(h, l, rel)) {
		goto fail;
	}

	/* CPU limit: v2 cpu.max, else v1 CFS quota and period. */
	if (!open_optional(h, &h->fd[CG_CPU_MAX], l->v2, rel, "cpu.max"))
		goto fail;
	h->cpumax_v2 = h->fd[CG_CPU_MAX] >= 0;
	if (!h->cpumax_v2 && !open_v1_cpu_limit(h, l, rel))
		goto fail;
	int events;
	if (!open_optional(h, &events, l->v2, rel, "cgroup.events"))
		goto fail;
	h->has_events = events >= 0;
	if (events >= 0)
		close(events);
	return CG_OK;
fail:;
	int e = errno;
	cg_close(h);
	errno = e;
	return cg_gone_errno(e) ? CG_GONE : CG_ERROR;
}

bool cg_open_late(struct cg_handle *h, const struct cg_layout *l, const char *rel)
{
	if (h->limit_age != 0)
		return false;
	bool opened = false;
	/* each hierarchy tried by its first file, one open while it is not there */
	if (!h->mem_v2 && h->fd[CG_MEM_CUR] < 0 && l->memory[0] != '\0') {
		int probe = open_in(l->memory, rel, "memory.usage_in_bytes");
		if (probe >= 0) {
			close(probe);
			for (int f = CG_MEM_CUR; f <= CG_MEM_KMEM; f++)
				if (h->fd[f] >= 0) {
					close(h->fd[f]);
					h->fd[f] = -1;
				}
			/* out of descriptors: what opened stays, the rest at a later reading */
			(void)open_v1_memory(h, l, rel);
			opened = h->fd[CG_MEM_CUR] >= 0;
		}
	}
	if (!h->cpumax_v2 && h->fd[CG_CPU_MAX] < 0 && l->cpu[0] != '\0') {
		int probe = open_in(l->cpu, rel, "cpu.cfs_quota_us");
		if (probe >= 0) {
			close(probe);
			if (h->fd[CG_CPU_PERIOD] >= 0) {
				close(h->fd[CG_CPU_PERIOD]);
				h->fd[CG_CPU_PERIOD] = -1;
			}
			(void)open_v1_cpu_limit(h, l, rel);
			opened |= h->fd[CG_CPU_MAX] >= 0;
		}
	}
	return opened;
}

int cg_files_open(const struct cg_handle *h)
{
	int n = 0;
	for (int i = 0; i < CG_NFILES; i++)
		n += h->fd[i] >= 0;
	return n;
}

/* pread of a whole small file into buf; the length, or -1 with errno. */
static ssize_t read_file(int fd, char *buf, size_t cap)
{
	ssize_t n;
	do
		n = pread(fd, buf, cap, 0);
	while (n < 0 && errno == EINTR);
	return n;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

/* Parses a non-negative decimal at p (len bytes), up to white space or the end. */
static bool parse_num(const char *p, size_t len, int64_t *out)
{
	int64_t v = 0;
	size_t i = 0;
	for (; i < len && p[i] >= '0' && p[i] <= '9'; i++)
		if (!ck_mul(v, 10, &v) || !ck_add(v, p[i] - '0', &v))
			return false;
	if (i == 0 || (i < len && !is_space(p[i])))
		return false;
	*out = v;
	return true;
}

bool cg_parse_int(const char *buf, size_t len, int64_t *out)
{
	size_t i = 0;
	while (i < len && is_space(buf[i]))
		i++;
	return parse_num(buf + i, len - i, out);
}

bool cg_parse_keyed(const char *buf, size_t len, const char *key, int64_t *out)
{
	size_t klen = strlen(key);
	size_t i = 0;
	while (i < len) {
		/* at the start of a line */
		size_t end = i;
		while (end < len && buf[end] != '\n')
			end++;
		if (end - i > klen && memcmp(buf + i, key, klen) == 0 && buf[i + klen] == ' ')
			return parse_num(buf + i + klen + 1, end - i - klen - 1, out);
		i = end + 1;
	}
	return false;
}

bool cg_parse_max(const char *buf, size_t len, int64_t *out)
{
	if (len >= 3 && memcmp(buf, "max", 3) == 0 && (len == 3 || is_space(buf[3]))) {
		*out = CG_ABSENT;
		return true;
	}
	return cg_parse_int(buf, len, out);
}

bool cg_v1_quota_millicores(int64_t quota, int64_t period, int64_t *out)
{
	if (quota < 0) {
		*out = CG_ABSENT;
		return true;
	}
	/* rounded up (meter/plan.h): a sandbox is never sized below what it may use */
	return meter_vcpus_of_quota(quota, period, out) == METER_OK;
}

bool cg_parse_cpu_max(const char *buf, size_t len, int64_t *out)
{
	size_t sp = 0;
	while (sp < len && buf[sp] != ' ')
		sp++;
	if (sp == len)
		return false;
	int64_t period;
	if (!parse_num(buf + sp + 1, len - sp - 1, &period) || period <= 0)
		return false;
	if (sp == 3 && memcmp(buf, "max", 3) == 0) {
		*out = CG_ABSENT;
		return true;
	}
	int64_t quota;
	if (!parse_num(buf, sp, &quota) || quota == 0)
		return false;
	return cg_v1_quota_millicores(quota, period, out);
}

/* Parses signed v1 quota ("-1\n") too. */
static bool parse_signed(const char *buf, size_t len, int64_t *out)
{
	if (len > 0 && buf[0] == '-') {
		int64_t v;
		if (!parse_num(buf + 1, len - 1, &v))
			return false;
		*out = -v;
		return true;
	}
	return cg_parse_int(buf, len, out);
}

/* CPU usage in µs from cpu.stat (v2) or cpuacct.usage (v1, ns). */
static bool parse_cpu(const char *buf, size_t len, bool v2, int64_t *us)
{
	if (v2)
		return cg_parse_keyed(buf, len, "usage_usec", us);
	int64_t ns;
	if (!cg_parse_int(buf, len, &ns))
		return false;
	*us = ns / 1000;
	return true;
}

enum cg_status cg_read_cpu_fd(int fd, bool v2, int64_t *us)
{
	char buf[512];
	ssize_t n = read_file(fd, buf, sizeof buf);
	if (n < 0)
		return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
	return parse_cpu(buf, (size_t)n, v2, us) ? CG_OK : CG_BADDATA;
}

enum cg_status cg_read_cpu(const struct cg_handle *h, int64_t *us)
{
	return cg_read_cpu_fd(h->fd[CG_CPU], h->cpu_v2, us);
}

int cg_open_cpu(const struct cg_layout *l, const char *rel, bool v2)
{
	return v2 ? open_in(l->v2, rel, "cpu.stat") : open_in(l->cpuacct, rel, "cpuacct.usage");
}

enum cg_status cg_read(struct cg_handle *h, struct cg_reading *r, const char **which_file)
{
	static const char *const names[CG_NFILES] = {
	        "cpu usage",    "memory current", "memory peak", "memory.stat",
	        "memory limit", "kernel memory",  "cpu limit",   "cpu period"};
	char buf[CG_BUF];
	struct cg_reading out = {.mem_current = CG_ABSENT,
	                         .mem_peak = CG_ABSENT,
	                         .mem_anon_kernel = CG_ABSENT,
	                         .mem_limit = CG_ABSENT,
	                         .cpu_limit_millicores = CG_ABSENT};
	int64_t period = 0, kmem = CG_ABSENT;
	bool limits = h->limit_age == 0;
	for (int f = 0; f < CG_NFILES; f++) {
		if (h->fd[f] < 0)
			continue;
		if (!limits && (f == CG_MEM_MAX || f == CG_CPU_MAX || f == CG_CPU_PERIOD ||
		                f == CG_MEM_STAT || f == CG_MEM_KMEM || f == CG_MEM_PEAK ||
		                (f == CG_MEM_CUR && h->fd[CG_MEM_PEAK] >= 0)))
			continue;
		ssize_t n = read_file(h->fd[f], buf, sizeof buf);
		if (n < 0 && f != CG_CPU) {
			/* Only CPU usage decides: another figure is then absent. */
			if (f == CG_CPU_PERIOD)
				period = -1;
			continue;
		}
		if (n < 0) {
			if (which_file)
				*which_file = names[f];
			return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
		}
		size_t len = (size_t)n;
		bool ok = true;
		switch (f) {
		case CG_CPU:
			ok = parse_cpu(buf, len, h->cpu_v2, &out.cpu_usage_us);
			break;
		case CG_MEM_CUR:
			ok = cg_parse_int(buf, len, &out.mem_current);
			break;
		case CG_MEM_PEAK:
			ok = cg_parse_int(buf, len, &out.mem_peak);
			break;
		case CG_MEM_STAT: {
			int64_t a, k;
			if (h->mem_v2 && cg_parse_keyed(buf, len, "anon", &a) &&
			    cg_parse_keyed(buf, len, "kernel", &k) && ck_add(a, k, &a))
				out.mem_anon_kernel = a;
			else if (!h->mem_v2 && cg_parse_keyed(buf, len, "total_rss", &a))
				out.mem_anon_kernel = a;
			break;
		}
		case CG_MEM_MAX:
			ok = cg_parse_max(buf, len, &out.mem_limit);
			if (ok && out.mem_limit >= CG_V1_UNLIMITED)
				out.mem_limit = CG_ABSENT;
			break;
		case CG_MEM_KMEM:
			ok = cg_parse_int(buf, len, &kmem);
			break;
		case CG_CPU_MAX:
			if (h->cpumax_v2)
				ok = cg_parse_cpu_max(buf, len, &out.cpu_limit_millicores);
			else
				ok = parse_signed(buf, len, &out.cpu_limit_millicores);
			break;
		case CG_CPU_PERIOD:
			ok = cg_parse_int(buf, len, &period);
			break;
		}
		if (!ok && f == CG_CPU) {
			if (which_file)
				*which_file = names[f];
			return CG_BADDATA;
		}
		if (!ok) { /* a figure its file did not hold is absent, never a guess */
			if (f == CG_MEM_CUR)
				out.mem_current = CG_ABSENT;
			else if (f == CG_MEM_PEAK)
				out.mem_peak = CG_ABSENT;
			else if (f == CG_MEM_MAX)
				out.mem_limit = CG_ABSENT;
			else if (f == CG_MEM_KMEM)
				kmem = CG_ABSENT;
			else if (f == CG_CPU_MAX)
				out.cpu_limit_millicores = CG_ABSENT;
			else if (f == CG_CPU_PERIOD)
				period = -1;
		}
	}
	if (limits && !h->cpumax_v2 && h->fd[CG_CPU_MAX] >= 0) {
		int64_t quota = out.cpu_limit_millicores;
		if (period <= 0 || quota == CG_ABSENT ||
		    !cg_v1_quota_millicores(quota, period, &out.cpu_limit_millicores))
			out.cpu_limit_millicores = CG_ABSENT;
	}
	if (!h->mem_v2 && out.mem_anon_kernel != CG_ABSENT && kmem != CG_ABSENT &&
	    !ck_add(out.mem_anon_kernel, kmem, &out.mem_anon_kernel))
		out.mem_anon_kernel = CG_ABSENT;
	if (limits) {
		h->mem_current = out.mem_current;
		h->mem_peak = out.mem_peak;
		h->mem_anon_kernel = out.mem_anon_kernel;
		h->mem_limit = out.mem_limit;
		h->cpu_limit_millicores = out.cpu_limit_millicores;
		h->limit_age = CG_LIMIT_EVERY;
		/* young and a limit still missing: look again at the next reading */
		if (h->readings < CG_LIMIT_EVERY &&
		    (out.mem_limit == CG_ABSENT || out.cpu_limit_millicores == CG_ABSENT))
			h->limit_age = 1;
	} else {
		if (h->fd[CG_MEM_PEAK] >= 0) /* else memory now was read: the peak's stand-in */
			out.mem_current = h->mem_current;
		out.mem_peak = h->mem_peak;
		out.mem_anon_kernel = h->mem_anon_kernel;
		out.mem_limit = h->mem_limit;
		out.cpu_limit_millicores = h->cpu_limit_millicores;
	}
	h->limit_age--;
	if (h->readings < CG_LIMIT_EVERY)
		h->readings++;
	*r = out;
	return CG_OK;
}

void cg_read_all_next(struct cg_handle *h)
{
	h->limit_age = 0;
}

enum cg_status cg_read_populated(const struct cg_handle *h, const struct cg_layout *l,
                                 const char *rel, int *populated)
{
	char buf[256];
	int64_t v;
	if (!h->has_events) {
		errno = ENOENT;
		return CG_ERROR;
	}
	/* By path, so first make sure the folder is still this incarnation's: one
	 * made again under the name starts empty, and its "populated 0" is not ours. */
	char dir[CG_PATH_MAX * 2 + 8];
	struct stat st;
	snprintf(dir, sizeof dir, "%s/%s", cg_layout_primary(l), rel);
	if (stat(dir, &st) != 0)
		return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
	if ((int64_t)st.st_ino != h->inode) {
		errno = ENOENT;
		return CG_GONE;
	}
	int fd = open_in(l->v2, rel, "cgroup.events");
	if (fd < 0)
		return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
	ssize_t n = read_file(fd, buf, sizeof buf);
	int e = errno;
	close(fd);
	errno = e;
	if (n < 0)
		return cg_gone_errno(errno) ? CG_GONE : CG_ERROR;
	if (!cg_parse_keyed(buf, (size_t)n, "populated", &v))
		return CG_BADDATA;
	*populated = v != 0;
	return CG_OK;
}
