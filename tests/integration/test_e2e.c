/*
 * End to end on real cgroups: PostgreSQL (a private cluster of the test's
 * own), meter-api and meter-collector run as separate processes; real
 * workloads run in real cgroups of this machine (a busy loop, a half-busy
 * loop, an idle process, a sandbox that ends and is removed while it is
 * being sampled, one removed and made again under the same id); at the end
 * the CPU the API bills is compared with what the kernel counted, read by
 * the test from the cgroups' own files.
 *
 * Each fault runs the same workload with one thing going wrong in the
 * middle, and ends with the same comparison: PostgreSQL stopped with
 * "-m immediate" and started, the collector killed and restarted, the API
 * killed and restarted, every batch written twice, the spool full, the
 * spool's disk read-only, and the collector's clock behind by a minute or
 * more, into the hour before the sandboxes started (samples late, out of
 * order, and stamped before started_at across an hour boundary). Each run prints one line with the
 * CPU burned and billed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collector/layout.h"
#include "common/db.h"
#include "common/keys.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"
#include "tests/reference/ref.h"
#include "tests/support/cluster.h"
#include "tests/support/fakecg.h"
#include "tests/support/http.h"
#include "tests/support/run.h"

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

enum { BUSY, HALF, IDLE, ENDS, AGAIN, NSB };
static const char *const sb_name[NSB] = {"sb-busy", "sb-half", "sb-idle", "sb-ends", "sb-again"};

enum fault { F_NONE, F_PG, F_COLLECTOR, F_API, F_TWICE, F_SPOOL_FULL, F_READONLY, F_SKEW };
static const char *const fault_name[] = {
        "no fault",          "PostgreSQL stopped -m immediate and started",
        "collector SIGKILL", "API SIGKILL and restart",
        "batches twice",     "spool full",
        "spool read-only",   "collector clock behind"};

struct fx {
	enum fault fault;
	char tmp[64], pgdir[96], url[256], spooldir[128], spool[160], log[160];
	bool mounted;
	struct api_proc api;
	pid_t collector;
	int starts;       /* collectors started: each logs one "watching ..." line */
	const char *skew; /* FAKETIME for the next collector started, or NULL */
	char skewbuf[16];
	char admin[KEY_LEN + 1];
	struct cg_layout l;
	char holder[64], pattern[128];
	char made[32][2 * CG_PATH_MAX]; /* cgroup folders, removed in reverse */
	int nmade;
	pid_t kid[NSB];
	int again_round; /* AGAIN: 0 first incarnation running, 1 second, 2 done */
	bool ends_done;
	int64_t kernel[NSB]; /* CPU µs the kernel counted, all incarnations */
};

static int64_t cpu_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void pg(struct fx *f, const char *cmd)
{
	if (!cluster_pg(f->pgdir, cmd))
		fail_msg("scripts/pg.sh %s failed", cmd);
}

/* ---- cgroups ---- */

static const char *memory_dir(struct fx *f)
{
	const char *p = cg_layout_primary(&f->l);
	return f->l.memory[0] && strcmp(f->l.memory, p) != 0 ? f->l.memory : NULL;
}

static void mkcg(struct fx *f, const char *rel)
{
	const char *dirs[] = {cg_layout_primary(&f->l), memory_dir(f)};
	for (int i = 0; i < 2 && dirs[i]; i++) {
		char path[2 * CG_PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dirs[i], rel);
		if (mkdir(path, 0755) != 0)
			fail_msg("cannot make cgroup \"%s\": %s (this test needs root and a "
			         "writable cgroup hierarchy)",
			         path, strerror(errno));
		int k = 0;
		while (k < f->nmade && strcmp(f->made[k], path) != 0)
			k++;
		if (k == f->nmade && f->nmade < 32)
			snprintf(f->made[f->nmade++], sizeof f->made[0], "%s", path);
	}
}

static void rmcg(struct fx *f, const char *rel)
{
	const char *dirs[] = {memory_dir(f), cg_layout_primary(&f->l)};
	for (int i = 0; i < 2; i++) {
		if (dirs[i] == NULL)
			continue;
		char path[2 * CG_PATH_MAX];
		snprintf(path, sizeof path, "%s/%s", dirs[i], rel);
		/* the kernel may still be tearing the last task down */
		for (int t = 0; rmdir(path) != 0; t++) {
			if (errno != EBUSY || t > 100)
				fail_msg("cannot remove cgroup %s: %s", path, strerror(errno));
			sleep_ms(10);
		}
	}
}

/* CPU the kernel counted in cgroup rel, from its own file: cpu.stat on v2, cpuacct.usage on v1. */
static int64_t kernel_cpu(struct fx *f, const char *rel)
{
	char path[2 * CG_PATH_MAX], buf[4096];
	int64_t v = -1;
	if (f->l.v2[0]) {
		snprintf(path, sizeof path, "%s/%s/cpu.stat", f->l.v2, rel);
		FILE *fp = fopen(path, "r");
		if (fp == NULL)
			fail_msg("%s: %s", path, strerror(errno));
		while (fgets(buf, sizeof buf, fp))
			if (sscanf(buf, "usage_usec %" SCNd64, &v) == 1)
				break;
		fclose(fp);
	} else {
		snprintf(path, sizeof path, "%s/%s/cpuacct.usage", f->l.cpuacct, rel);
		FILE *fp = fopen(path, "r");
		if (fp == NULL || fscanf(fp, "%" SCNd64, &v) != 1)
			fail_msg("%s: cannot read", path);
		fclose(fp);
		v /= 1000;
	}
	if (v < 0)
		fail_msg("no CPU usage in %s", path);
	return v;
}

/* ---- workloads ---- */

static void join(struct fx *f, const char *rel)
{
	const char *dirs[] = {cg_layout_primary(&f->l), memory_dir(f)};
	for (int i = 0; i < 2 && dirs[i]; i++) {
		char path[2 * CG_PATH_MAX], pid[32];
		snprintf(path, sizeof path, "%s/%s/cgroup.procs", dirs[i], rel);
		snprintf(pid, sizeof pid, "%d\n", (int)getpid());
		int fd = open(path, O_WRONLY);
		if (fd < 0 || write(fd, pid, strlen(pid)) < 0)
			_exit(3);
		close(fd);
	}
}

static void spin_us(int64_t us)
{
	volatile uint64_t x = 0;
	int64_t until = cpu_now_us() + us;
	while (cpu_now_us() < until)
		for (int k = 0; k < 20000; k++)
			x++;
}

/* A child in sandbox i's cgroup; busy_ms/idle_ms < 0: spin for -busy_ms of CPU and exit. */
static pid_t workload(struct fx *f, int i, int busy_ms, int idle_ms)
{
	char rel[128];
	snprintf(rel, sizeof rel, "%s/%s", f->holder, sb_name[i]);
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	join(f, rel);
	if (busy_ms < 0) {
		spin_us((int64_t)-busy_ms * 1000);
		_exit(0);
	}
	for (;;) {
		if (busy_ms > 0)
			spin_us((int64_t)busy_ms * 1000);
		if (idle_ms > 0)
			sleep_ms(idle_ms);
	}
}

/* ---- processes ---- */

static char *slurp(const char *path);

static void start_collector(struct fx *f)
{
	char extra[64] = "";
	if (f->fault == F_SPOOL_FULL)
		snprintf(extra, sizeof extra, "--spool-max-mib=0.002");
	else if (f->fault == F_TWICE)
		snprintf(extra, sizeof extra, "--send-twice");
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(f->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		setenv("DATABASE_URL", f->url, 1);
		if (f->skew) {
			setenv("FAKETIME", f->skew, 1);
			setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
			setenv("FAKETIME_NO_CACHE", "1", 1);
			setenv("LD_PRELOAD", FAKETIME_LIB, 1);
			/* the sanitizers' runtime wants to come first; it may come second here */
			setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 1);
		}
		execl(METER_COLLECTOR_BIN, METER_COLLECTOR_BIN, "--root", "/sys/fs/cgroup",
		      "--match", f->pattern, "--interval", "500ms", "--spool", f->spool,
		      "--host-id", "e2e", "--rescan", "2s", extra[0] ? extra : NULL, (char *)NULL);
		_exit(127);
	}
	f->collector = pid;
	/* Until it has set up ("watching ..."): a stop before that, on a host busy with
	 * other tests, would find a process not yet able to end cleanly. */
	f->starts++;
	for (int i = 0; i < 300; i++) {
		char *log = slurp(f->log);
		int n = 0;
		for (const char *p = log; (p = strstr(p, "watching ")) != NULL; p++)
			n++;
		free(log);
		if (n >= f->starts)
			return;
		sleep_ms(100);
	}
	fail_msg("the collector did not start watching in 30 s");
}

static int stop_collector(struct fx *f, int sig)
{
	int st = 0;
	kill(f->collector, sig);
	waitpid(f->collector, &st, 0);
	f->collector = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* SIGTERM, and an exit status of 0; else the failure, with the collector's log. */
static void stop_cleanly(struct fx *f)
{
	int st = stop_collector(f, SIGTERM);
	if (st != 0) {
		char *log = slurp(f->log);
		fprintf(stderr, "collector log:\n%s\n", log);
		free(log);
		fail_msg("the collector did not stop cleanly: exit status %d", st);
	}
}

static void kill_api(struct fx *f)
{
	kill(f->api.pid, SIGKILL);
	waitpid(f->api.pid, NULL, 0);
	f->api.pid = 0; /* its log goes at the exit, after a pass (tests/support/http.h) */
}

static cJSON *api_json(struct fx *f, const char *method, const char *path, const char *body,
                       int want)
{
	struct http_res r;
	/* like any client: 503 (the database coming back) is tried again, for up to 10 s */
	for (int t = 0;; t++) {
		http_do(f->api.port, method, path, f->admin, body, body ? strlen(body) : 0, &r);
		if (r.status != 503 || t == 50)
			break;
		http_free(&r);
		sleep_ms(200);
	}
	if (r.status != want)
		fail_msg("%s %s: %d %s", method, path, r.status, r.body ? r.body : "");
	cJSON *j = http_json(&r);
	http_free(&r);
	if (j == NULL)
		fail_msg("%s %s: not JSON", method, path);
	return j;
}

/* A decimal string field (a credit may be negative), at scale decimals, as an integer. */
static int64_t dec(cJSON *o, const char *name, int scale)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	int64_t out = 0;
	if (!cJSON_IsString(v) ||
	    meter_decimal_parse(v->valuestring, scale, true, &out) != METER_OK)
		fail_msg("field %s is not a decimal string", name);
	return out;
}

/* ---- fixture ---- */

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL)
		return -1;
	if (!test_tmpdir(f->tmp, sizeof f->tmp, "e2e")) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	for (int i = 0; i < NSB; i++)
		if (f->kid[i] > 0) {
			kill(f->kid[i], SIGKILL);
			waitpid(f->kid[i], NULL, 0);
		}
	if (f->collector > 0)
		stop_collector(f, SIGKILL);
	if (f->api.pid > 0)
		kill_api(f);
	for (int i = f->nmade - 1; i >= 0; i--)
		for (int t = 0; rmdir(f->made[i]) != 0 && errno != ENOENT; t++) {
			if (t > 100) {
				fprintf(stderr, "could not remove cgroup %s: %s\n", f->made[i],
				        strerror(errno));
				break;
			}
			sleep_ms(10);
		}
	if (f->mounted && umount2(f->spooldir, 0) != 0) /* its loop device goes with it */
		fprintf(stderr, "could not unmount %s: %s\n", f->spooldir, strerror(errno));
	cluster_destroy(f->pgdir);
	if (getenv("METER_E2E_KEEP") == NULL)
		fakecg_remove(f->tmp);
	free(f);
	return 0;
}

/* Our own cluster, migrated; the API with an admin key; the account and its sandboxes. */
static void bring_up(struct fx *f)
{
	char err[512];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &f->l, err, sizeof err))
		fail_msg("this machine's cgroups cannot be found: %s", err);
	snprintf(f->pgdir, sizeof f->pgdir, "%s/pg", f->tmp);
	if (!cluster_start_migrated(f->pgdir, METER_BIN, f->url, sizeof f->url))
		fail_msg("the test's own cluster did not start");
	PGconn *c = db_connect(f->url, err, sizeof err);
	if (c == NULL)
		fail_msg("%s", err);
	int64_t id;
	if (!key_create(c, "admin", NULL, f->admin, &id, err, sizeof err))
		fail_msg("%s", err);
	PQfinish(c);
	if (!api_start(&f->api, METER_API_BIN, f->url, "--log-level=info"))
		fail_msg("meter-api did not start");

	snprintf(f->spooldir, sizeof f->spooldir, "%s/spool", f->tmp);
	if (mkdir(f->spooldir, 0755) != 0)
		fail_msg("mkdir %s: %s", f->spooldir, strerror(errno));
	if (f->fault == F_READONLY) {
		/* A small ext4 disk of its own: its errors=remount-ro can be triggered
		 * under open files, as a failing disk does. */
		char line[1024];
		snprintf(line, sizeof line,
		         "truncate -s 16M '%s/disk.img' && mkfs.ext4 -q -F '%s/disk.img' && "
		         "mount -o loop,errors=remount-ro '%s/disk.img' '%s'",
		         f->tmp, f->tmp, f->tmp, f->spooldir);
		if (system(line) != 0)
			fail_msg("cannot make an ext4 disk on a loop device for the spool (needs "
			         "root, e2fsprogs and loop devices)");
		f->mounted = true;
	}
	snprintf(f->spool, sizeof f->spool, "%s/collector.spool", f->spooldir);
	snprintf(f->log, sizeof f->log, "%s/collector.log", f->tmp);

	cJSON_Delete(api_json(f, "POST", "/v1/accounts",
	                      "{\"id\": \"e2e\", \"name\": \"End to end\", \"plan\": \"paid\"}",
	                      201));
	for (int i = 0; i < NSB; i++) {
		char body[256];
		snprintf(body, sizeof body,
		         "{\"id\": \"%s\", \"account_id\": \"e2e\", \"vcpus\": 1, \"memory_gib\": "
		         "1}",
		         sb_name[i]);
		cJSON_Delete(api_json(f, "POST", "/v1/sandboxes", body, 201));
	}
	snprintf(f->holder, sizeof f->holder, "meter-e2e-%d", (int)getpid());
	snprintf(f->pattern, sizeof f->pattern, "%s/(?<sandbox>[^/]+)", f->holder);
	mkcg(f, f->holder);
	start_collector(f);
	sleep_ms(300);
	for (int i = 0; i < NSB; i++) {
		char rel[128];
		snprintf(rel, sizeof rel, "%s/%s", f->holder, sb_name[i]);
		mkcg(f, rel);
	}
	sleep_ms(300); /* the collector found them by inotify */
}

/* Sandboxes that end on their own: read their counter, then remove or remake the cgroup. */
static void tick(struct fx *f)
{
	char rel[128];
	if (!f->ends_done && waitpid(f->kid[ENDS], NULL, WNOHANG) == f->kid[ENDS]) {
		f->kid[ENDS] = 0;
		snprintf(rel, sizeof rel, "%s/%s", f->holder, sb_name[ENDS]);
		f->kernel[ENDS] = kernel_cpu(f, rel);
		/* Removed once the collector took its final sample (it samples as the cgroup
		 * empties, by inotify; up to 3 s on a loaded machine), while it runs on: a
		 * removal before that sample would take the last CPU with it, which no one
		 * can bill. 10 s: a collector killed as it emptied is started again (under
		 * the sanitizers that took more than 3 s once) and must have found it
		 * first; a cgroup removed while no collector runs is the limit
		 * docs/collector.md states. */
		for (int i = 0; i < 100; i++) {
			char *log = slurp(f->log);
			bool taken = log && strstr(log, "sandbox sb-ends emptied") != NULL;
			free(log);
			if (taken)
				break;
			sleep_ms(100);
		}
		rmcg(f, rel);
		f->ends_done = true;
	}
	if (f->again_round < 2 && waitpid(f->kid[AGAIN], NULL, WNOHANG) == f->kid[AGAIN]) {
		f->kid[AGAIN] = 0;
		snprintf(rel, sizeof rel, "%s/%s", f->holder, sb_name[AGAIN]);
		f->kernel[AGAIN] += kernel_cpu(f, rel);
		if (f->again_round++ == 0) {
			sleep_ms(600); /* sampled once empty */
			rmcg(f, rel);
			mkcg(f, rel); /* a new incarnation under the same id */
			sleep_ms(100);
			f->kid[AGAIN] = workload(f, AGAIN, -400, 0);
		}
	}
}

/* The spool's disk fails: ext4 turns itself read-only, open files and all. */
static void disk_error(struct fx *f)
{
	char line[512], dev[128] = "";
	snprintf(line, sizeof line, "findmnt -n -o SOURCE '%s'", f->spooldir);
	FILE *p = popen(line, "r");
	if (p == NULL || fgets(dev, sizeof dev, p) == NULL)
		fail_msg("no device under %s", f->spooldir);
	pclose(p);
	dev[strcspn(dev, "\n")] = '\0';
	const char *name = strrchr(dev, '/') ? strrchr(dev, '/') + 1 : dev;
	snprintf(line, sizeof line, "/sys/fs/ext4/%s/trigger_fs_error", name);
	int fd = open(line, O_WRONLY);
	if (fd < 0 || write(fd, "1", 1) != 1)
		fail_msg("cannot write %s: %s", line, strerror(errno));
	close(fd);
	snprintf(line, sizeof line, "%s/probe", f->spooldir);
	if (mkdir(line, 0755) == 0 || errno != EROFS)
		fail_msg("%s is still writable", f->spooldir);
}

static void fault_begin(struct fx *f)
{
	switch (f->fault) {
	case F_PG:
	case F_SPOOL_FULL:
		pg(f, "stop --immediate");
		break;
	case F_READONLY:
		pg(f, "stop --immediate");
		sleep_ms(700); /* a batch or two go to the spool */
		disk_error(f);
		break;
	case F_COLLECTOR:
		stop_collector(f, SIGKILL);
		start_collector(f);
		break;
	case F_API:
		kill_api(f);
		break;
	case F_SKEW:
		stop_cleanly(f);
		/* Far enough behind that its samples are stamped in the hour before the
		 * sandboxes started: they count at started_at, inside the hour that later
		 * samples re-rate (a rollup once took them as seeds and lost their CPU;
		 * a fixed 2 min found it only when run in the first minutes of an hour). */
		snprintf(f->skewbuf, sizeof f->skewbuf, "-%lld",
		         (long long)(time(NULL) % 3600 + 60));
		f->skew = f->skewbuf;
		start_collector(f);
		break;
	case F_NONE:
	case F_TWICE:
		break;
	}
}

static void fault_end(struct fx *f)
{
	switch (f->fault) {
	case F_PG:
	case F_SPOOL_FULL:
		pg(f, "start");
		break;
	case F_READONLY:
		pg(f, "start");
		break;
	case F_COLLECTOR:
		stop_collector(f, SIGKILL); /* again, mid-run */
		start_collector(f);
		break;
	case F_API:
		if (!api_start(&f->api, METER_API_BIN, f->url, "--log-level=info"))
			fail_msg("meter-api did not start again");
		break;
	case F_SKEW:
		stop_cleanly(f);
		f->skew = NULL;
		start_collector(f);
		break;
	case F_NONE:
	case F_TWICE:
		break;
	}
}

static char *slurp(const char *path)
{
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return strdup("");
	char *buf = malloc(1 << 20);
	size_t n = fread(buf, 1, (1 << 20) - 1, fp);
	buf[n] = '\0';
	fclose(fp);
	return buf;
}

static void wait_rollups(struct fx *f)
{
	char err[512];
	PGconn *c = db_connect(f->url, err, sizeof err);
	if (c == NULL)
		fail_msg("%s", err);
	for (int i = 0; i < 600; i++) {
		PGresult *r = PQexec(c, "SELECT count(*) FROM rollup_queue");
		bool done = PQresultStatus(r) == PGRES_TUPLES_OK && atoi(PQgetvalue(r, 0, 0)) == 0;
		PQclear(r);
		if (done) {
			PQfinish(c);
			return;
		}
		sleep_ms(50);
	}
	PQfinish(c);
	fail_msg("rollups did not finish in 30 s");
}

static void run(struct fx *f)
{
	bring_up(f);
	f->kid[BUSY] = workload(f, BUSY, 1000, 0);
	f->kid[HALF] = workload(f, HALF, 20, 20);
	f->kid[IDLE] = workload(f, IDLE, 0, 1000);
	f->kid[ENDS] = workload(f, ENDS, -700, 0);
	f->kid[AGAIN] = workload(f, AGAIN, -400, 0);
	for (int step = 0; step < 300; step++) {
		tick(f);
		if (step == 10)
			fault_begin(f);
		if (step == 40)
			fault_end(f);
		if (step >= 60 && f->ends_done && f->again_round == 2)
			break;
		sleep_ms(100);
	}
	if (!f->ends_done || f->again_round != 2)
		fail_msg("the sandboxes that end did not end in 30 s");
	const int running[] = {BUSY, HALF, IDLE};
	for (int k = 0; k < 3; k++) {
		kill(f->kid[running[k]], SIGKILL);
		waitpid(f->kid[running[k]], NULL, 0);
		f->kid[running[k]] = 0;
	}
	sleep_ms(1200); /* their cgroups emptied: final samples */
	for (int k = 0; k < 3; k++) {
		char rel[128];
		snprintf(rel, sizeof rel, "%s/%s", f->holder, sb_name[running[k]]);
		f->kernel[running[k]] = kernel_cpu(f, rel);
	}
	int st = stop_collector(f, SIGTERM);
	char *log = slurp(f->log);
	if (st != 0)
		fail_msg("the collector exited %d:\n%s", st, log);
	free(log);
	for (int i = 0; i < NSB; i++) {
		char path[128];
		snprintf(path, sizeof path, "/v1/sandboxes/%s/stop", sb_name[i]);
		cJSON_Delete(api_json(f, "POST", path, "{}", 200));
	}
	wait_rollups(f);
}

/* The month of now and the hours around it, for the usage queries. */
static void window(char *month, size_t mlen, char *from, char *to, size_t len)
{
	time_t now = time(NULL);
	time_t a = now - now % 3600 - 3600, b = now - now % 3600 + 7200;
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(month, mlen, "%Y-%m", &tm);
	gmtime_r(&a, &tm);
	strftime(from, len, "%Y-%m-%dT%H:00:00Z", &tm);
	gmtime_r(&b, &tm);
	strftime(to, len, "%Y-%m-%dT%H:00:00Z", &tm);
}

/* A query's rows, or the test fails. */
static PGresult *rows(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	return r;
}

static int64_t num_at(PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? REF_NONE : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Everything the rules need of account e2e, read back from the database: the
 * plans, the grant, the registered sandboxes and every sample they wrote. */
static void reference_input(struct fx *f, struct ref_input *in)
{
	PGconn *c = PQconnectdb(f->url);
	assert_int_equal(PQstatus(c), CONNECTION_OK);
	memset(in, 0, sizeof *in);
	PGresult *r =
	        rows(c, "SELECT id, name, (extract(epoch FROM effective_from) * 1e6)::bigint, "
	                "(cpu_vcpu_hour * 1e9)::bigint, (memory_gib_hour * 1e9)::bigint, "
	                "(cpu_floor * 1e6)::bigint FROM price_plans ORDER BY effective_from");
	for (int i = 0; i < PQntuples(r) && i < REF_PLANS; i++) {
		struct ref_plan *p = &in->plans[in->nplans++];
		p->id = num_at(r, i, 0);
		snprintf(p->name, sizeof p->name, "%s", PQgetvalue(r, i, 1));
		p->from_us = num_at(r, i, 2);
		p->cpu_nano = num_at(r, i, 3);
		p->mem_nano = num_at(r, i, 4);
		p->floor_ppm = num_at(r, i, 5);
	}
	PQclear(r);
	r = rows(c, "SELECT trial_grant_seconds * 1000000 FROM accounts WHERE id = 'e2e'");
	in->accounts[in->naccounts++] =
	        (struct ref_account){.id = "e2e", .grant_us = num_at(r, 0, 0)};
	PQclear(r);
	r = rows(c, "SELECT id, (vcpus * 1000)::bigint, (memory_gib * 1000)::bigint, "
	            "(extract(epoch FROM started_at) * 1e6)::bigint, "
	            /* the platform's stop; the collector's ends are on the samples */
	            "(extract(epoch FROM platform_stopped_at) * 1e6)::bigint FROM sandboxes "
	            "WHERE account_id = 'e2e' ORDER BY id");
	for (int i = 0; i < PQntuples(r) && i < REF_SANDBOXES; i++) {
		struct ref_sandbox *x = &in->sandboxes[in->nsandboxes++];
		snprintf(x->id, sizeof x->id, "%s", PQgetvalue(r, i, 0));
		x->vcpu_milli = num_at(r, i, 1);
		x->mem_milli = num_at(r, i, 2);
		x->started_us = num_at(r, i, 3);
		x->stopped_us = num_at(r, i, 4);
	}
	PQclear(r);
	r = rows(c, "SELECT s.sandbox_id, s.incarnation, (extract(epoch FROM s.ts) * 1e6)::bigint, "
	            "s.cpu_usage_us, coalesce(s.ended, false) FROM samples s "
	            "JOIN sandboxes b ON b.id = s.sandbox_id "
	            "WHERE b.account_id = 'e2e' ORDER BY s.received_at, s.ts");
	for (int i = 0; i < PQntuples(r) && in->nsamples < REF_SAMPLES; i++) {
		int sb = 0;
		while (sb < in->nsandboxes &&
		       strcmp(in->sandboxes[sb].id, PQgetvalue(r, i, 0)) != 0)
			sb++;
		in->samples[in->nsamples++] =
		        (struct ref_sample){.sandbox = sb,
		                            .incarnation = num_at(r, i, 1),
		                            .ts_us = num_at(r, i, 2),
		                            .cpu_us = num_at(r, i, 3),
		                            .ended = PQgetvalue(r, i, 4)[0] == 't'};
	}
	if (PQntuples(r) > REF_SAMPLES)
		fail_msg("more samples than the reference holds");
	PQclear(r);
	PQfinish(c);
}

/* When a figure is off: the sandbox's samples as stored, and the collector's warnings and
 * errors (what it could not write). */
static void print_trouble(struct fx *f, const char *sb)
{
	char err[512], q[256];
	PGconn *c = db_connect(f->url, err, sizeof err);
	snprintf(q, sizeof q,
	         "SELECT count(*) || ' samples, the last counter ' || coalesce(max(cpu_usage_us), "
	         "-1) || ', marks ' || (SELECT count(*) FROM rollup_queue) FROM samples "
	         "WHERE sandbox_id = '%s'",
	         sb);
	PGresult *r = c ? PQexec(c, q) : NULL;
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		printf("  %s: %s\n", sb, PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(c);
	char *log = slurp(f->log);
	for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n"))
		if (strstr(line, "warning") || strstr(line, "error"))
			printf("  collector: %s\n", line);
	free(log);
}

static void compare(struct fx *f)
{
	char month[16], from[32], to[32], path[256];
	window(month, sizeof month, from, to, sizeof to);
	int64_t kernel_total = 0, measured_total = 0, billed_total = 0;
	for (int i = 0; i < NSB; i++) {
		snprintf(path, sizeof path, "/v1/sandboxes/%s/usage?from=%s&to=%s", sb_name[i],
		         from, to);
		cJSON *u = api_json(f, "GET", path, NULL, 200);
		int64_t measured = dec(u, "cpu_seconds", 6);
		int64_t billed = dec(u, "vcpu_hours", 6) * 3600; /* 10^-6 h to µs */
		cJSON_Delete(u);
		int64_t k = f->kernel[i], diff = measured - k;
		printf("  %-9s kernel %9" PRId64 " us  measured %9" PRId64 " us  billed %9" PRId64
		       " us\n",
		       sb_name[i], k, measured, billed);
		/* within 1 % (and 5 ms for the idle one, which burns next to nothing) */
		if (llabs(diff) * 100 > k && llabs(diff) > 5000) {
			print_trouble(f, sb_name[i]);
			fail_msg("%s: measured %" PRId64 " us, the kernel counted %" PRId64 " us",
			         sb_name[i], measured, k);
		}
		kernel_total += k;
		measured_total += measured;
		billed_total += billed;
	}
	/* The account's usage and the draft invoice say the same. */
	snprintf(path, sizeof path, "/v1/accounts/e2e/usage?from=%s&to=%s", from, to);
	cJSON *u = api_json(f, "GET", path, NULL, 200);
	assert_int_equal(dec(u, "cpu_seconds", 6), measured_total);
	int64_t cost = dec(u, "cost_exact", 9);
	int64_t wall_us = dec(u, "sandbox_hours", 6) * 3600;
	int64_t billed_all = dec(u, "vcpu_hours", 6) * 3600;
	cJSON_Delete(u);
	snprintf(path, sizeof path, "/v1/accounts/e2e/invoices/%s", month);
	cJSON *inv = api_json(f, "GET", path, NULL, 200);
	/* The rules applied by the independent reference to the samples as stored: every
	 * line (the floor where idle, the trial's credit of the 50 h grant) and the total,
	 * to the nano-dollar. */
	static struct ref_input in;
	struct ref_invoice want;
	char first[40];
	int64_t month_us;
	snprintf(first, sizeof first, "%s-01T00:00:00Z", month);
	assert_int_equal(meter_time_parse(first, &month_us), METER_OK);
	reference_input(f, &in);
	assert_true(ref_invoice(&in, 0, month_us, &want));
	int64_t inv_cpu = -1, charged = 0, nlines = 0;
	cJSON *line;
	cJSON_ArrayForEach(line, cJSON_GetObjectItemCaseSensitive(inv, "lines"))
	{
		cJSON *item = cJSON_GetObjectItemCaseSensitive(line, "item");
		if (!cJSON_IsString(item))
			fail_msg("an invoice line without an item");
		if (strcmp(item->valuestring, "cpu") == 0)
			inv_cpu = dec(line, "quantity", 9) * 36 / 10;
		if (strcmp(item->valuestring, "cpu") == 0 ||
		    strcmp(item->valuestring, "memory") == 0)
			charged += dec(line, "amount_exact", 9);
		if (nlines >= want.nlines ||
		    strcmp(item->valuestring, want.lines[nlines].item) != 0 ||
		    dec(line, "amount_exact", 9) != want.lines[nlines].amount_nano)
			fail_msg(
			        "invoice line %lld: %s %s, the reference %s %lld nano-dollars",
			        (long long)nlines, item->valuestring,
			        cJSON_GetObjectItemCaseSensitive(line, "amount_exact")->valuestring,
			        nlines < want.nlines ? want.lines[nlines].item : "(none)",
			        nlines < want.nlines ? (long long)want.lines[nlines].amount_nano
			                             : 0LL);
		nlines++;
	}
	assert_int_equal(nlines, want.nlines);
	assert_int_equal(dec(inv, "total_exact", 9), want.total_nano);
	assert_string_equal(want.lines[want.nlines - 1].item, "trial_credit");
	cJSON_Delete(inv);
	/* The invoice charges the usage at list prices (the trial credit comes after). */
	assert_int_equal(charged, cost);
	/* both to the millionth of an hour: 3.6 ms */
	if (llabs(inv_cpu - billed_all) > 3600 || llabs(billed_all - billed_total) > 3600 * NSB)
		fail_msg("the invoice bills %" PRId64 " us of CPU, the account's usage %" PRId64
		         ", its sandboxes' %" PRId64,
		         inv_cpu, billed_all, billed_total);
	/* Billed CPU is the measured CPU raised to the floor (2.5 % of a vCPU) where idle. */
	int64_t floor_all = wall_us / 40;
	printf("%s: CPU burned %" PRId64 " us (kernel), billed as measured %" PRId64
	       " us (%+.3f %%), invoiced %" PRId64 " us with the idle floor\n",
	       fault_name[f->fault], kernel_total, measured_total,
	       100.0 * (double)(measured_total - kernel_total) / (double)kernel_total, inv_cpu);
	if (llabs(measured_total - kernel_total) * 100 > kernel_total)
		fail_msg("measured %" PRId64 " us in all, the kernel %" PRId64, measured_total,
		         kernel_total);
	if (inv_cpu < kernel_total * 99 / 100 || inv_cpu > kernel_total * 101 / 100 + floor_all)
		fail_msg("invoiced %" PRId64 " us, outside the kernel's %" PRId64
		         " us plus at most the floor %" PRId64,
		         inv_cpu, kernel_total, floor_all);
	printf("%s: the invoice equals the reference's to the nano-dollar (%lld lines, total "
	       "%lld nano-dollars after the trial's credit)\n",
	       fault_name[f->fault], (long long)want.nlines, (long long)want.total_nano);
}

static void expect_log(struct fx *f, const char *text)
{
	char *log = slurp(f->log);
	bool found = strstr(log, text) != NULL;
	if (!found)
		fprintf(stderr, "collector log:\n%s\n", log);
	free(log);
	if (!found)
		fail_msg("the collector's log does not say \"%s\"", text);
}

/* ---- the end the collector sees closes the sandbox (rule 9) ---- */

/* Makes the folder dir/rel (kept for the teardown) and writes file there when given. */
static void mkdir_kept(struct fx *f, const char *dir, const char *rel, const char *file,
                       const char *text)
{
	char path[2 * CG_PATH_MAX], fpath[2 * CG_PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		fail_msg("cannot make cgroup \"%s\": %s", path, strerror(errno));
	int k = 0;
	while (k < f->nmade && strcmp(f->made[k], path) != 0)
		k++;
	if (k == f->nmade && f->nmade < 32)
		snprintf(f->made[f->nmade++], sizeof f->made[0], "%s", path);
	if (file == NULL)
		return;
	snprintf(fpath, sizeof fpath, "%s/%s", path, file);
	int fd = open(fpath, O_WRONLY);
	if (fd < 0 || write(fd, text, strlen(text)) <= 0)
		fail_msg("cannot write %s: %s", fpath, strerror(errno));
	close(fd);
}

/*
 * A cgroup for a collector-found sandbox, with limits of 1 vCPU and 1 GiB:
 * its folders in the other hierarchies first, limits written, and the one the
 * collector watches last, as a platform that makes a sandbox whole does (the
 * collector opens a sandbox's files when it sees that folder).
 */
static void mkcg_limited(struct fx *f, const char *rel)
{
	const char *primary = cg_layout_primary(&f->l), *mem = memory_dir(f);
	const char *cpu = f->l.cpu[0] && strcmp(f->l.cpu, primary) != 0 ? f->l.cpu : NULL;
	if (cpu)
		mkdir_kept(f, cpu, rel, "cpu.cfs_quota_us", "100000\n");
	if (mem)
		mkdir_kept(f, mem, rel, "memory.limit_in_bytes", "1073741824\n");
	mkdir_kept(f, primary, rel, cpu ? NULL : "cpu.max", "100000 100000\n");
	if (mem == NULL)
		mkdir_kept(f, primary, rel, "memory.max", "1073741824\n");
}

/* A process that sleeps in cgroup rel until killed. */
static pid_t sleeper(struct fx *f, const char *rel)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	join(f, rel);
	for (;;)
		sleep_ms(1000);
}

/* A field as text ("(none)" when it is not a string, "null" for null). */
static const char *text_of(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : cJSON_IsNull(v) ? "null" : "(none)";
}

static int int_of(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsNumber(v))
		fail_msg("no number %s in the answer", name);
	return v->valueint;
}

static cJSON *quota(struct fx *f)
{
	return api_json(f, "POST", "/v1/quota/check",
	                "{\"account_id\": \"q\", \"vcpus\": 1, \"memory_gib\": 1}", 200);
}

/* The quota check's answer once it counts n running (or after 10 s); the caller frees it. */
static cJSON *quota_when_running(struct fx *f, int n)
{
	cJSON *o = NULL;
	for (int t = 0; t < 100; t++) {
		cJSON_Delete(o);
		o = quota(f);
		if (int_of(o, "running") == n)
			break;
		sleep_ms(100);
	}
	return o;
}

/*
 * An account of at most 2 sandboxes at once; the collector finds two in
 * cgroups whose path names the account, and registers them from their limits
 * at their first sample. They run and exit, their cgroups are removed: within
 * a few seconds the quota check counts none running and a third sandbox is
 * admitted. The same id made again is a new incarnation that runs again.
 */
/*
 * Our own cluster, migrated; the API with an admin key; a paid account q of at
 * most max sandboxes at once; the collector's files and its pattern, whose
 * path names the account: holder/q/<sandbox>, both folders made.
 */
static void bring_up_q(struct fx *f, int max)
{
	char err[512], rel[128], body[64];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &f->l, err, sizeof err))
		fail_msg("this machine's cgroups cannot be found: %s", err);
	snprintf(f->pgdir, sizeof f->pgdir, "%s/pg", f->tmp);
	if (!cluster_start_migrated(f->pgdir, METER_BIN, f->url, sizeof f->url))
		fail_msg("the test's own cluster did not start");
	PGconn *c = db_connect(f->url, err, sizeof err);
	int64_t id;
	if (c == NULL || !key_create(c, "admin", NULL, f->admin, &id, err, sizeof err))
		fail_msg("%s", err);
	PQfinish(c);
	if (!api_start(&f->api, METER_API_BIN, f->url, "--log-level=info"))
		fail_msg("meter-api did not start");
	cJSON_Delete(api_json(f, "POST", "/v1/accounts",
	                      "{\"id\": \"q\", \"name\": \"Quota\", \"plan\": \"paid\", "
	                      "\"collector_registration\": true}",
	                      201));
	snprintf(body, sizeof body, "{\"max_concurrent\": %d}", max);
	cJSON_Delete(api_json(f, "PATCH", "/v1/accounts/q", body, 200));
	snprintf(f->spool, sizeof f->spool, "%s/collector.spool", f->tmp);
	snprintf(f->log, sizeof f->log, "%s/collector.log", f->tmp);
	snprintf(f->holder, sizeof f->holder, "meter-q-%d", (int)getpid());
	snprintf(f->pattern, sizeof f->pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)",
	         f->holder);
	mkcg_limited(f, f->holder);
	snprintf(rel, sizeof rel, "%s/q", f->holder);
	mkcg_limited(f, rel);
}

static void the_ends_the_collector_sees_free_the_account_for_more(void **state)
{
	struct fx *f = *state;
	char rel[3][128];
	bring_up_q(f, 2);
	snprintf(rel[0], sizeof rel[0], "%s/q", f->holder);
	start_collector(f);
	for (int i = 0; i < 2; i++) {
		snprintf(rel[i + 1], sizeof rel[i + 1], "%s/q/sb-q%d", f->holder, i + 1);
		mkcg_limited(f, rel[i + 1]);
		f->kid[i] = sleeper(f, rel[i + 1]);
	}
	/* both running from their first sample: the quota is full */
	cJSON *o = quota_when_running(f, 2);
	assert_int_equal(int_of(o, "running"), 2);
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	cJSON_Delete(o);
	/* they exit, and their cgroups are removed */
	for (int i = 0; i < 2; i++) {
		kill(f->kid[i], SIGKILL);
		waitpid(f->kid[i], NULL, 0);
		f->kid[i] = 0;
	}
	sleep_ms(300);
	for (int i = 0; i < 2; i++)
		rmcg(f, rel[i + 1]);
	o = quota_when_running(f, 0);
	assert_int_equal(int_of(o, "running"), 0);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "allowed")));
	cJSON_Delete(o);
	cJSON *sb = api_json(f, "GET", "/v1/sandboxes/sb-q1", NULL, 200);
	assert_string_equal(text_of(sb, "ended_by"), "collector");
	assert_string_equal(text_of(sb, "status"), "stopped");
	assert_true(cJSON_IsString(cJSON_GetObjectItem(sb, "stopped_at")));
	assert_string_equal(text_of(sb, "vcpus"), "1");
	assert_string_equal(text_of(sb, "memory_gib"), "1");
	cJSON_Delete(sb);
	/* a third sandbox is admitted */
	cJSON_Delete(api_json(f, "POST", "/v1/sandboxes",
	                      "{\"id\": \"sb-q3\", \"account_id\": \"q\", \"vcpus\": 1, "
	                      "\"memory_gib\": 1}",
	                      201));
	/* the same id again: a new cgroup, a new incarnation, running again */
	mkcg_limited(f, rel[1]);
	f->kid[0] = sleeper(f, rel[1]);
	for (int t = 0; t < 100; t++) {
		sb = api_json(f, "GET", "/v1/sandboxes/sb-q1", NULL, 200);
		bool running = strcmp(text_of(sb, "status"), "running") == 0;
		cJSON_Delete(sb);
		if (running)
			break;
		sleep_ms(100);
	}
	sb = api_json(f, "GET", "/v1/sandboxes/sb-q1", NULL, 200);
	assert_string_equal(text_of(sb, "status"), "running");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(sb, "ended_by")));
	cJSON_Delete(sb);
	o = quota(f);
	assert_int_equal(int_of(o, "running"), 2); /* sb-q1 and sb-q3 */
	cJSON_Delete(o);
	kill(f->kid[0], SIGKILL);
	waitpid(f->kid[0], NULL, 0);
	f->kid[0] = 0;
	assert_int_equal(stop_collector(f, SIGTERM), 0);
}

/* One number from the test's own cluster, or the test fails. */
static int64_t sql_num(struct fx *f, const char *sql)
{
	char err[512];
	PGconn *c = db_connect(f->url, err, sizeof err);
	if (c == NULL)
		fail_msg("%s", err);
	PGresult *r = rows(c, sql);
	int64_t v = PQntuples(r) == 1 ? num_at(r, 0, 0) : REF_NONE;
	PQclear(r);
	PQfinish(c);
	if (v == REF_NONE)
		fail_msg("%s: no value", sql);
	return v;
}

/* The CPU sb-l's samples counted after its platform stop, µs. */
#define AFTER_THE_STOP                                                                             \
	"SELECT max(s.cpu_usage_us) - (SELECT max(cpu_usage_us) FROM samples x "                   \
	"WHERE x.sandbox_id = 'sb-l' AND x.ts <= b.platform_stopped_at) "                          \
	"FROM samples s JOIN sandboxes b ON b.id = s.sandbox_id WHERE b.id = 'sb-l' "              \
	"GROUP BY b.id, b.platform_stopped_at"

/*
 * Rule 3 on real cgroups: the platform stops a sandbox while it still burns
 * CPU; its process exits after, and its cgroup lingers empty for seconds,
 * sampled all the while, before it is removed. Wall time and memory are
 * billed up to the platform's stop to the microsecond; every microsecond of
 * CPU the kernel counted is billed, the part after the stop as measured.
 */
static void a_cgroup_lingering_after_the_stop_is_billed_to_the_stop(void **state)
{
	struct fx *f = *state;
	char rel[128];
	bring_up_q(f, 10);
	cJSON_Delete(api_json(f, "POST", "/v1/sandboxes",
	                      "{\"id\": \"sb-l\", \"account_id\": \"q\", \"vcpus\": 1, "
	                      "\"memory_gib\": 1}",
	                      201));
	snprintf(rel, sizeof rel, "%s/q/sb-l", f->holder);
	mkcg_limited(f, rel);
	start_collector(f);
	/* It burns until killed: how much CPU it gets before and after the stop
	 * depends on the machine's load, so the test waits to see both. */
	f->kid[0] = fork();
	if (f->kid[0] == 0) {
		join(f, rel);
		for (;;)
			spin_us(1000000);
	}
	/* stopped once the collector has seen it run */
	for (int t = 0; t < 100 && sql_num(f, "SELECT count(*) FROM samples WHERE sandbox_id = "
	                                      "'sb-l' AND cpu_usage_us > 0") == 0;
	     t++)
		sleep_ms(100);
	cJSON_Delete(api_json(f, "POST", "/v1/sandboxes/sb-l/stop", "{}", 200));
	/* it exits once the collector has seen it burn on after the stop */
	int t = 0;
	while (t++ < 200 && sql_num(f, AFTER_THE_STOP) <= 0)
		sleep_ms(50);
	kill(f->kid[0], SIGKILL);
	waitpid(f->kid[0], NULL, 0);
	f->kid[0] = 0;
	sleep_ms(2500); /* empty, left in place: the collector samples it on */
	int64_t kernel = kernel_cpu(f, rel);
	rmcg(f, rel);
	sleep_ms(1200);
	stop_cleanly(f);
	wait_rollups(f);

	int64_t stop_wall =
	        sql_num(f, "SELECT (extract(epoch FROM platform_stopped_at - "
	                   "started_at) * 1e6)::bigint FROM sandboxes WHERE id = 'sb-l'");
	int64_t wall =
	        sql_num(f, "SELECT sum(wall_us) FROM usage_hourly WHERE sandbox_id = 'sb-l'");
	int64_t mem = sql_num(
	        f, "SELECT sum(memory_mgib_us) FROM usage_hourly WHERE sandbox_id = 'sb-l'");
	int64_t measured = sql_num(
	        f, "SELECT sum(cpu_measured_us) FROM usage_hourly WHERE sandbox_id = 'sb-l'");
	int64_t lingering = sql_num(f, "SELECT count(*) FROM samples s JOIN sandboxes b ON b.id = "
	                               "s.sandbox_id WHERE b.id = 'sb-l' "
	                               "AND s.ts > b.platform_stopped_at");
	int64_t after = sql_num(f, AFTER_THE_STOP);
	printf("  sb-l: stopped after %" PRId64 " us; billed wall %" PRId64 " us; %" PRId64
	       " samples after the stop with %" PRId64 " us of CPU; measured %" PRId64
	       " us, the kernel %" PRId64 " us\n",
	       stop_wall, wall, lingering, after, measured, kernel);
	assert_true(lingering >= 4); /* it did linger, sampled */
	assert_true(after > 0);      /* and burned CPU after the stop */
	assert_int_equal(wall, stop_wall);
	assert_int_equal(mem, 1000 * stop_wall);
	if (llabs(measured - kernel) * 100 > kernel)
		fail_msg("measured %" PRId64 " us, the kernel counted %" PRId64 " us", measured,
		         kernel);
	cJSON *sb = api_json(f, "GET", "/v1/sandboxes/sb-l", NULL, 200);
	assert_string_equal(text_of(sb, "ended_by"), "platform");
	cJSON_Delete(sb);
}

static void no_fault(void **state)
{
	struct fx *f = *state;
	f->fault = F_NONE;
	run(f);
	compare(f);
	expect_log(f, "sandbox sb-ends emptied: final sample taken");
}

static void postgres_stopped_immediate_and_started(void **state)
{
	struct fx *f = *state;
	f->fault = F_PG;
	run(f);
	compare(f);
	expect_log(f, "database away: spooled");
	expect_log(f, "replayed");
}

static void collector_killed_and_restarted(void **state)
{
	struct fx *f = *state;
	f->fault = F_COLLECTOR;
	run(f);
	compare(f);
}

static void api_killed_and_restarted(void **state)
{
	struct fx *f = *state;
	f->fault = F_API;
	run(f);
	compare(f);
}

static void every_batch_delivered_twice(void **state)
{
	struct fx *f = *state;
	f->fault = F_TWICE;
	run(f);
	compare(f);
}

static void spool_filled_to_its_bound(void **state)
{
	struct fx *f = *state;
	f->fault = F_SPOOL_FULL;
	run(f);
	compare(f);
	expect_log(f, "thinned to the newest of each sandbox");
}

static void spool_disk_read_only(void **state)
{
	struct fx *f = *state;
	f->fault = F_READONLY;
	run(f);
	compare(f);
	expect_log(f, "kept in memory for the next try");
}

static void collector_clock_behind_into_the_hour_before(void **state)
{
	struct fx *f = *state;
	f->fault = F_SKEW;
	if (access(FAKETIME_LIB, R_OK) != 0)
		fail_msg("%s is missing: install Debian's faketime (scripts/deps.sh does)",
		         FAKETIME_LIB);
	run(f);
	compare(f);
}

int main(void)
{
	if (getenv("METER_E2E_ONLY"))
		cmocka_set_test_filter(getenv("METER_E2E_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(
	                the_ends_the_collector_sees_free_the_account_for_more, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_cgroup_lingering_after_the_stop_is_billed_to_the_stop, setup, teardown),
	        cmocka_unit_test_setup_teardown(no_fault, setup, teardown),
	        cmocka_unit_test_setup_teardown(postgres_stopped_immediate_and_started, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(collector_killed_and_restarted, setup, teardown),
	        cmocka_unit_test_setup_teardown(api_killed_and_restarted, setup, teardown),
	        cmocka_unit_test_setup_teardown(every_batch_delivered_twice, setup, teardown),
	        cmocka_unit_test_setup_teardown(spool_filled_to_its_bound, setup, teardown),
	        cmocka_unit_test_setup_teardown(spool_disk_read_only, setup, teardown),
	        cmocka_unit_test_setup_teardown(collector_clock_behind_into_the_hour_before, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
