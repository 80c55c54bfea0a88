/*
 * meter-collector end to end: real cgroups on this machine, PostgreSQL
 * stopped under it, SIGKILL and restart with the same spool, and
 * configuration errors. The fault tests run their own PostgreSQL cluster
 * (scripts/pg.sh with METER_PG_DIR in /tmp), so stopping it disturbs no
 * other test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collector/collector.h"
#include "collector/layout.h"
#include "collector/spool.h"
#include "common/db.h"
#include "tests/support/cluster.h"
#include "tests/support/fakecg.h"
#include "tests/support/run.h"
#include "tests/support/testdb.h"

/* Everything a test makes, undone by teardown even when it fails. */
struct fx {
	struct testdb db; /* a database in the shared cluster */
	char tmp[64];     /* a folder for logs, spools and fake trees */
	char pgdir[80];   /* our own cluster, when a test needs one */
	char url[256];    /* its DATABASE_URL */
	pid_t collector, child;
	char cg[12][2 * CG_PATH_MAX]; /* real cgroups made (removed in reverse) */
	int ncg;
	unsigned nofile; /* when set, the collector's open file limit (soft and hard) */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL)
		return -1;
	if (!test_tmpdir(f->tmp, sizeof f->tmp, "coll")) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static void pg(struct fx *f, const char *cmd)
{
	if (!cluster_pg(f->pgdir, cmd))
		fail_msg("scripts/pg.sh %s failed", cmd);
}

static int teardown(void **state)
{
	struct fx *f = *state;
	int st;
	if (f->child > 0) {
		kill(f->child, SIGKILL);
		waitpid(f->child, &st, 0);
	}
	if (f->collector > 0) {
		kill(f->collector, SIGKILL);
		waitpid(f->collector, &st, 0);
	}
	for (int i = f->ncg - 1; i >= 0; i--)
		if (rmdir(f->cg[i]) != 0 && errno != ENOENT)
			fprintf(stderr, "could not remove cgroup %s: %s\n", f->cg[i],
			        strerror(errno));
	testdb_drop(&f->db);
	cluster_destroy(f->pgdir);
	fakecg_remove(f->tmp);
	free(f);
	return 0;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Starts meter-collector with args (NULL-terminated), output to tmp/collector.log. */
static pid_t collector(struct fx *f, const char *url, const char *const *args)
{
	char log[128];
	const char *argv[32] = {METER_COLLECTOR_BIN};
	int n = 1;
	for (; args[n - 1] && n < 31; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	snprintf(log, sizeof log, "%s/collector.log", f->tmp);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
		if (f->nofile) {
			struct rlimit rl = {f->nofile, f->nofile};
			if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
				_exit(126);
		}
		setenv("DATABASE_URL", url, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* SIGTERM, then its exit status. */
static int stop(pid_t *pid)
{
	int st = 0;
	kill(*pid, SIGTERM);
	if (waitpid(*pid, &st, 0) != *pid)
		return -1;
	*pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *read_log(struct fx *f, char *buf, size_t len)
{
	char path[128];
	snprintf(path, sizeof path, "%s/collector.log", f->tmp);
	FILE *fp = fopen(path, "r");
	size_t n = fp ? fread(buf, 1, len - 1, fp) : 0;
	if (fp)
		fclose(fp);
	buf[n] = '\0';
	return buf;
}

/* The sample count of the last "stopping: R rounds, S samples" line of the log. */
static long samples_taken(struct fx *f)
{
	static char buf[1 << 20];
	read_log(f, buf, sizeof buf);
	long total = -1;
	for (char *p = buf; (p = strstr(p, " rounds, ")) != NULL; p++)
		total = strtol(p + 9, NULL, 10);
	return total;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static long count(PGconn *c, const char *sql);

/*
 * What the table holds against a truth that is not the collector's own word:
 * every sandbox sampled in every round (each has as many rows as the others,
 * NSB of them), and at least three quarters of the rounds the test's own clock
 * allows for the time the collector ran (ran_ms at interval_ms: a run here
 * takes a round more than the clock allows, a collector that skips every other
 * round half of them).
 */
static void rounds_are_whole(PGconn *c, int nsb, int64_t ran_ms, int64_t interval_ms)
{
	long per = count(c, "SELECT min(n) FROM (SELECT count(*) n FROM samples "
	                    "GROUP BY sandbox_id) x");
	long most = count(c, "SELECT max(n) FROM (SELECT count(*) n FROM samples "
	                     "GROUP BY sandbox_id) x");
	long sandboxes = count(c, "SELECT count(DISTINCT sandbox_id) FROM samples");
	long stored = count(c, "SELECT count(*) FROM samples");
	if (sandboxes != nsb || per != most || stored != per * nsb ||
	    per * interval_ms * 4 < ran_ms * 3)
		fail_msg(
		        "%ld sandboxes of %d sampled, %ld to %ld rows each (%ld in all) in %lld ms "
		        "at %lld ms a round",
		        sandboxes, nsb, per, most, stored, (long long)ran_ms,
		        (long long)interval_ms);
}

static long count(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	long v = -1;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
		v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	else
		fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	return v;
}

/* ---- configuration errors ---- */

static void configuration_errors_exit_2_with_one_line(void **state)
{
	(void)state;
	struct run_result *res = malloc(sizeof *res);
	/* key files the collector must refuse: too short, open to the group */
	char keys[64], short_key[96], group_key[96], missing_key[96];
	snprintf(keys, sizeof keys, "/tmp/meter-coll-keys-XXXXXX");
	assert_non_null(mkdtemp(keys));
	snprintf(short_key, sizeof short_key, "%s/short", keys);
	snprintf(group_key, sizeof group_key, "%s/group", keys);
	snprintf(missing_key, sizeof missing_key, "%s/missing", keys);
	const char *bytes = "0123456789abcdef0123456789abcdef";
	int fd = open(short_key, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_int_equal(write(fd, bytes, 31), 31);
	close(fd);
	fd = open(group_key, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_int_equal(write(fd, bytes, 32), 32);
	close(fd);
	assert_int_equal(chmod(group_key, 0640), 0);
	struct {
		const char *args[8];
		const char *msg;
	} cases[] = {
	        {{"--spool-key", short_key, "--once"}, "fewer than the 32 a key needs"},
	        {{"--spool-key", group_key, "--once"}, "is open to group or others (mode 0640)"},
	        {{"--spool-key", missing_key, "--once"}, "could not open key file"},
	        {{"--match", "(?<sandbox>[a-", "--once"}, "pattern does not compile at offset"},
	        {{"--match", "sandboxes/[^/]+", "--once"}, "no named group \"sandbox\""},
	        {{"--root", "/tmp", "--once"}, "is not a cgroup filesystem"},
	        {{"--root", "/tmp", "--layout", "v2", "--once"}, "does not hold a v2 cgroup tree"},
	        {{"--interval", "10 s"}, "--interval: \"10 s\" is not a duration"},
	        {{"--interval", "1ms"}, "--interval: 1ms is out of range"},
	        {{"--log-level", "loud"}, "--log-level"},
	        {{"--spool-max-mib", "0"}, "--spool-max-mib: 0 is out of range"},
	        {{"--host-id", "a host"}, "--host-id"},
	        {{"--bogus"}, "unknown option \"--bogus\""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *argv[12] = {METER_COLLECTOR_BIN};
		int n = 1;
		for (int k = 0; cases[i].args[k]; k++)
			argv[n++] = cases[i].args[k];
		argv[n] = NULL;
		run_program(argv, "postgresql:///none?host=/nonexistent", res);
		if (res->status != 2 || run_lines(res->err) != 1 || !strstr(res->err, cases[i].msg))
			fail_msg("case %zu: status %d, stderr \"%s\"", i, res->status, res->err);
		/* the key file's path is said; its bytes never are */
		if (strstr(res->err, "0123456789abcde") != NULL)
			fail_msg("case %zu: the key is in the log: \"%s\"", i, res->err);
	}
	unlink(short_key);
	unlink(group_key);
	rmdir(keys);
	free(res);
}

/* ---- real cgroups ---- */

static void make_cgroup(struct fx *f, const char *dir, const char *rel)
{
	char path[CG_PATH_MAX * 2];
	if (dir[0] == '\0')
		return;
	snprintf(path, sizeof path, "%s/%s", dir, rel);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		fail_msg("cannot make cgroup \"%s\": %s (this test needs root and a writable "
		         "cgroup hierarchy)",
		         path, strerror(errno));
	snprintf(f->cg[f->ncg++], sizeof f->cg[0], "%s", path);
}

static void join_cgroup(const char *dir, const char *rel)
{
	char path[CG_PATH_MAX * 2], pid[32];
	if (dir[0] == '\0')
		return;
	snprintf(path, sizeof path, "%s/%s/cgroup.procs", dir, rel);
	snprintf(pid, sizeof pid, "%d\n", (int)getpid());
	int fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, pid, strlen(pid)) < 0)
		_exit(3);
	close(fd);
}

/* A small file whole into buf, NUL-terminated; its length, or -1 with errno. */
static ssize_t read_whole(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	int e = errno;
	close(fd);
	errno = e;
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

static int64_t cgroup_cpu(const struct cg_layout *l, const char *rel)
{
	struct cg_handle h;
	struct cg_reading r;
	assert_int_equal(cg_open(&h, l, rel), CG_OK);
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	cg_close(&h);
	return r.cpu_usage_us;
}

static void real_cgroup_cpu_in_postgres_equals_the_kernel_counter(void **state)
{
	struct fx *f = *state;
	struct cg_layout l;
	char err[512], holder[64], rel[128], pattern[128], spool[128], sql[512];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &l, err, sizeof err))
		fail_msg("this machine's cgroups cannot be found: %s", err);
	assert_true(testdb_create_migrated(&f->db, "realcg"));
	snprintf(holder, sizeof holder, "meter-test-%d", (int)getpid());
	snprintf(rel, sizeof rel, "%s/sb-real", holder);
	const char *primary = cg_layout_primary(&l);
	make_cgroup(f, primary, holder);
	make_cgroup(f, primary, rel);
	if (l.memory[0] && strcmp(l.memory, primary) != 0) {
		make_cgroup(f, l.memory, holder);
		make_cgroup(f, l.memory, rel);
	}
	snprintf(pattern, sizeof pattern, "%s/(?<sandbox>[^/]+)", holder);
	snprintf(spool, sizeof spool, "%s/spool", f->tmp);
	const char *args[] = {"--root", "/sys/fs/cgroup", "--match", pattern,     "--interval",
	                      "5s",     "--spool",        spool,     "--host-id", "test",
	                      NULL};
	f->collector = collector(f, f->db.url, args);
	sleep_ms(500); /* found, first sample taken */
	/* It started itself again without GnuTLS's set-up (collector/meter_collector.c): the
	 * same process, under its own name. */
	char proc[64], text[4096];
	snprintf(proc, sizeof proc, "/proc/%d/comm", (int)f->collector);
	assert_true(read_whole(proc, text, sizeof text) > 0);
	assert_string_equal(text, "meter-collector\n");
	snprintf(proc, sizeof proc, "/proc/%d/environ", (int)f->collector);
	ssize_t env_len = read_whole(proc, text, sizeof text);
	assert_true(env_len > 0);
	assert_true(memmem(text, (size_t)env_len, "\0GNUTLS_NO_IMPLICIT_INIT=1", 27) != NULL ||
	            strncmp(text, "GNUTLS_NO_IMPLICIT_INIT=1", 25) == 0);

	/* A child that moves itself into the cgroup and spins for 1.5 s of CPU. */
	f->child = fork();
	if (f->child == 0) {
		join_cgroup(primary, rel);
		if (l.memory[0] && strcmp(l.memory, primary) != 0)
			join_cgroup(l.memory, rel);
		/* 1.5 s of CPU, however busy the machine is (at most a minute of waiting) */
		int64_t give_up = now_us() + 60000000;
		volatile uint64_t x = 0;
		struct timespec cpu;
		do {
			for (int k = 0; k < 100000; k++)
				x++;
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
		} while ((int64_t)cpu.tv_sec * 1000000 + cpu.tv_nsec / 1000 < 1500000 &&
		         now_us() < give_up);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(f->child, &st, 0), f->child);
	f->child = 0;
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	sleep_ms(700);
	int64_t term_at = now_us();
	assert_int_equal(stop(&f->collector), 0);

	int64_t kernel = cgroup_cpu(&l, rel);
	assert_true(kernel > 1000000); /* it did spin */
	/* The end's sample read the peak afresh: the kernel's file says the same. */
	char peak_path[CG_PATH_MAX * 2 + 160];
	bool v1_memory = l.memory[0] && strcmp(l.memory, primary) != 0;
	snprintf(peak_path, sizeof peak_path, "%s/%s/%s", v1_memory ? l.memory : primary, rel,
	         v1_memory ? "memory.max_usage_in_bytes" : "memory.peak");
	char peak[64] = "";
	if (read_whole(peak_path, peak, sizeof peak) > 0)
		peak[strcspn(peak, "\n")] = '\0';
	else
		assert_int_equal(errno, ENOENT); /* a v2 kernel before 5.19: the peak is NULL */
	assert_true(testdb_value(&f->db,
	                         "SELECT coalesce(s.memory_peak_bytes::text, '') FROM samples s "
	                         "JOIN incarnation_ends e USING (sandbox_id, incarnation) "
	                         "WHERE s.sandbox_id = 'sb-real' AND s.ts = e.ended_at",
	                         text, sizeof text) != NULL);
	assert_string_equal(text, peak);
	long in_db = count(f->db.conn, "SELECT max(cpu_usage_us) FROM samples WHERE sandbox_id = "
	                               "'sb-real'");
	double off = (double)(kernel - in_db) / (double)kernel;
	if (off > 0.01 || off < -0.01)
		fail_msg("samples say %ld µs of CPU, the cgroup %lld µs", in_db, (long long)kernel);

	/* The sample that saw all of it was taken when the cgroup emptied, before SIGTERM. */
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-real' AND cpu_usage_us = %ld "
	         "AND ts < to_timestamp(%lld / 1e6)",
	         in_db, (long long)term_at);
	assert_true(count(f->db.conn, sql) >= 1);
	char *buf = malloc(1 << 16);
	assert_non_null(
	        strstr(read_log(f, buf, 1 << 16), "sandbox sb-real emptied: final sample taken"));
	free(buf);
	/* Every sample carries the cgroup's inode as its incarnation. */
	snprintf(sql, sizeof sql, "%s/%s", primary, rel);
	struct stat sb;
	assert_int_equal(stat(sql, &sb), 0);
	snprintf(sql, sizeof sql + 0, "SELECT count(*) FROM samples WHERE incarnation <> %lld",
	         (long long)sb.st_ino);
	assert_int_equal(count(f->db.conn, sql), 0);
}

/* Writes text into the real cgroup file dir/rel/name. */
static void write_cgroup(const char *dir, const char *rel, const char *name, const char *text)
{
	char path[CG_PATH_MAX * 2 + 64];
	snprintf(path, sizeof path, "%s/%s/%s", dir, rel, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		fail_msg("cannot write \"%s\" into %s: %s", text, path, strerror(errno));
	close(fd);
}

/*
 * A sandbox found before its limits are there, with the collector already
 * running: on a v1 or hybrid host (this machine) its folder appears in the
 * primary hierarchy first and in the v1 cpu and memory hierarchies a moment
 * later, as runc and systemd make them; on a v2 host its limits are written
 * a moment after the folder is made. Either way its limits are read once they
 * are there, and it is registered from them into its account (which lets the
 * collector register), so it is billed and counted by the quota.
 */
static void a_sandbox_whose_limits_come_after_its_folder_is_registered_from_them(void **state)
{
	struct fx *f = *state;
	struct cg_layout l;
	char err[512], holder[64], acct[96], rel[128], pattern[128], spool[128], v[64];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &l, err, sizeof err))
		fail_msg("this machine's cgroups cannot be found: %s", err);
	assert_true(testdb_create_migrated(&f->db, "latecg"));
	assert_true(testdb_exec(&f->db, "INSERT INTO accounts (id, name, plan, "
	                                "collector_registration) VALUES ('acme', 'Acme', 'paid', "
	                                "true)"));
	const char *primary = cg_layout_primary(&l);
	const char *mem = l.memory[0] && strcmp(l.memory, primary) != 0 ? l.memory : NULL;
	const char *cpu = l.cpu[0] && strcmp(l.cpu, primary) != 0 ? l.cpu : NULL;
	snprintf(holder, sizeof holder, "meter-test-%d", (int)getpid());
	snprintf(acct, sizeof acct, "%s/acme", holder);
	snprintf(rel, sizeof rel, "%s/sb-late", acct);
	if (cpu != NULL && mem != NULL && strcmp(cpu, mem) == 0)
		cpu = NULL; /* one v1 hierarchy for both (cpu,memory): made as mem */
	const char *dirs[] = {primary, mem, cpu};
	for (int i = 0; i < 3; i++)
		if (dirs[i] != NULL) {
			make_cgroup(f, dirs[i], holder);
			make_cgroup(f, dirs[i], acct);
		}
	snprintf(pattern, sizeof pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)", holder);
	snprintf(spool, sizeof spool, "%s/spool", f->tmp);
	const char *args[] = {"--root", "/sys/fs/cgroup", "--match", pattern,     "--interval",
	                      "1s",     "--spool",        spool,     "--host-id", "test",
	                      NULL};
	f->collector = collector(f, f->db.url, args);
	sleep_ms(500);
	/* the folder the collector finds the sandbox by, alone */
	make_cgroup(f, primary, rel);
	sleep_ms(2500); /* found, sampled without its limits */
	assert_true(count(f->db.conn, "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-late' "
	                              "AND memory_limit_bytes IS NULL") >= 1);
	assert_int_equal(count(f->db.conn, "SELECT count(*) FROM sandboxes WHERE id = 'sb-late'"),
	                 0);
	/* then its limits: 1.5 vCPU and 2 GiB */
	if (mem != NULL) {
		make_cgroup(f, mem, rel);
		write_cgroup(mem, rel, "memory.limit_in_bytes", "2147483648");
	} else {
		write_cgroup(primary, rel, "memory.max", "2147483648");
	}
	if (cpu != NULL || (mem != NULL && l.cpu[0] && strcmp(l.cpu, mem) == 0)) {
		const char *c = cpu != NULL ? cpu : mem;
		if (cpu != NULL)
			make_cgroup(f, cpu, rel);
		write_cgroup(c, rel, "cpu.cfs_period_us", "100000");
		write_cgroup(c, rel, "cpu.cfs_quota_us", "150000");
	} else {
		write_cgroup(primary, rel, "cpu.max", "150000 100000");
	}
	for (int i = 0; i < 200 && strcmp(testdb_value(&f->db,
	                                               "SELECT coalesce((SELECT account_id || ' "
	                                               "' || vcpus || ' ' || memory_gib FROM "
	                                               "sandboxes WHERE id = 'sb-late' AND "
	                                               "stopped_at IS NULL), 'none')",
	                                               v, sizeof v),
	                                  "none") == 0;
	     i++)
		sleep_ms(100);
	if (strcmp(v, "acme 1.500 2.000") != 0) {
		char *buf = malloc(1 << 16);
		fprintf(stderr, "%s\n", read_log(f, buf, 1 << 16));
		free(buf);
		fail_msg("sb-late, its limits there for 20 s: %s (want \"acme 1.500 2.000\")", v);
	}
	assert_int_equal(stop(&f->collector), 0);
}

static void a_real_cgroup_that_vanishes_reads_as_gone(void **state)
{
	struct fx *f = *state;
	struct cg_layout l;
	struct cg_handle h;
	struct cg_reading r;
	char err[512], rel[64];
	assert_true(layout_find("/sys/fs/cgroup", "auto", NULL, &l, err, sizeof err));
	snprintf(rel, sizeof rel, "meter-vanish-%d", (int)getpid());
	make_cgroup(f, cg_layout_primary(&l), rel);
	assert_int_equal(cg_open(&h, &l, rel), CG_OK);
	assert_int_equal(cg_read(&h, &r, NULL), CG_OK);
	assert_int_equal(rmdir(f->cg[0]), 0);
	assert_int_equal(cg_read(&h, &r, NULL), CG_GONE);
	cg_close(&h);
}

/* A child in the real cgroup dir/rel burning about ms of CPU; waited for. */
static void burn_in(const char *dir, const char *rel, int ms)
{
	pid_t pid = fork();
	if (pid == 0) {
		join_cgroup(dir, rel);
		struct timespec t0, t;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
		do
			clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
		while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The CPU of the end row of sandbox id in c's batch, and how it is known; -1: none. */
static int64_t end_in_batch(const struct collector *c, const char *id, char *how, size_t len)
{
	char key[64];
	snprintf(key, sizeof key, "%s\t", id);
	for (const char *row = c->batch.buf; row < c->batch.buf + c->batch.len;) {
		const char *nl = memchr(row, '\n', (size_t)(c->batch.buf + c->batch.len - row));
		if (nl == NULL)
			break;
		char line[1024];
		size_t n =
		        (size_t)(nl - row) < sizeof line - 1 ? (size_t)(nl - row) : sizeof line - 1;
		memcpy(line, row, n);
		line[n] = '\0';
		row = nl + 1;
		if (strncmp(line, key, strlen(key)) != 0)
			continue;
		char *field[13];
		int k = 0;
		for (char *p = line, *save; k < 13 && (field[k] = strtok_r(p, "\t", &save));
		     p = NULL)
			k++;
		if (k == 13 && strcmp(field[11], "t") == 0) {
			snprintf(how, len, "%s", field[12]);
			return strtoll(field[5], NULL, 10);
		}
	}
	return -1;
}

/*
 * Cgroups removed before the collector read their end, as a runtime removes
 * them: the last interval comes from the parent, exact when one went, and an
 * exact sum shared (estimated) when two went at once.
 */
static void removed_unread_cgroups_are_ended_from_their_parent(void **state)
{
	struct fx *f = *state;
	struct cg_layout l;
	struct collector c;
	char err[512], holder[64], rel[160], pattern[160], how[16];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &l, err, sizeof err))
		fail_msg("this machine's cgroups cannot be found: %s", err);
	const char *dir = cg_layout_primary(&l);
	snprintf(holder, sizeof holder, "meter-parent-%d", (int)getpid());
	make_cgroup(f, dir, holder);
	snprintf(rel, sizeof rel, "%s/acme", holder);
	make_cgroup(f, dir, rel);
	const char *ids[] = {"sb-one", "sb-two", "sb-three"};
	for (int i = 0; i < 3; i++) {
		snprintf(rel, sizeof rel, "%s/acme/%s", holder, ids[i]);
		make_cgroup(f, dir, rel);
	}
	snprintf(pattern, sizeof pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)", holder);
	struct collector_config cfg = {.root = "/sys/fs/cgroup",
	                               .layout = "auto",
	                               .match = pattern,
	                               .host = "h",
	                               .db_url = "postgresql:///none?host=/nonexistent",
	                               .db_role = ""};
	if (!collector_init(&c, &cfg, err, sizeof err))
		fail_msg("%s", err);
	collector_scan(&c);
	assert_int_equal(c.nsandboxes, 3);
	collector_round(&c);
	/* one burns and goes: its cgroup removed before the collector looks */
	snprintf(rel, sizeof rel, "%s/acme/sb-one", holder);
	burn_in(dir, rel, 150);
	int64_t one = cgroup_cpu(&l, rel); /* empty: its final count */
	assert_true(one >= 140000);
	assert_int_equal(rmdir(f->cg[2]), 0);
	sleep_ms(50);
	collector_events(&c);
	collector_round(&c);
	/* to the microsecond: each counter is its nanoseconds rounded down, so a
	 * parent's is at most a microsecond a child more than theirs */
	int64_t got = end_in_batch(&c, "sb-one", how, sizeof how);
	if (got < one || got > one + 3)
		fail_msg("sb-one used %lld µs, its end says %lld", (long long)one, (long long)got);
	assert_string_equal(how, "parent");
	/* two go between two readings of their parent: their sum is exact */
	int64_t two_three = 0;
	for (int i = 1; i < 3; i++) {
		snprintf(rel, sizeof rel, "%s/acme/%s", holder, ids[i]);
		burn_in(dir, rel, 60 * i);
		two_three += cgroup_cpu(&l, rel);
	}
	assert_int_equal(rmdir(f->cg[3]), 0);
	assert_int_equal(rmdir(f->cg[4]), 0);
	sleep_ms(50);
	collector_events(&c);
	collector_round(&c);
	int64_t two = end_in_batch(&c, "sb-two", how, sizeof how);
	assert_string_equal(how, "estimated");
	int64_t three = end_in_batch(&c, "sb-three", how, sizeof how);
	assert_string_equal(how, "estimated");
	if (two + three < two_three || two + three > two_three + 3)
		fail_msg("sb-two and sb-three used %lld µs, their ends say %lld",
		         (long long)two_three, (long long)(two + three));
	assert_int_equal(c.stats.ends_by[END_PARENT], 1);
	assert_int_equal(c.stats.ends_by[END_ESTIMATED], 2);
	assert_int_equal(c.nsandboxes, 0);
	collector_free(&c);
}

/* ---- faults, on a fake tree and a cluster of our own ---- */

#define NSB 3

static void own_cluster(struct fx *f)
{
	snprintf(f->pgdir, sizeof f->pgdir, "%s/pg", f->tmp);
	if (!cluster_start_migrated(f->pgdir, METER_BIN, f->url, sizeof f->url))
		fail_msg("the test's own cluster did not start");
}

static void fake_sandboxes(struct fx *f, char *root, size_t len)
{
	assert_true(fakecg_tree(f->tmp, FAKE_V2, root, len));
	for (int i = 0; i < NSB; i++) {
		char rel[32];
		snprintf(rel, sizeof rel, "sb-%d", i);
		assert_true(fakecg_sandbox(root, FAKE_V2, rel, 0));
	}
}

static void spin(const char *root, int64_t *cpu, int steps)
{
	for (int s = 0; s < steps; s++) {
		for (int i = 0; i < NSB; i++) {
			char rel[32];
			snprintf(rel, sizeof rel, "sb-%d", i);
			cpu[i] += 1000 * (i + 1);
			assert_true(fakecg_set_cpu(root, FAKE_V2, rel, cpu[i]));
		}
		sleep_ms(50);
	}
}

static PGconn *connect_to(const char *url)
{
	char err[512];
	PGconn *c = db_connect(url, err, sizeof err);
	if (c == NULL)
		fail_msg("%s", err);
	return c;
}

static void check_last_counters(PGconn *c, const int64_t *cpu)
{
	for (int i = 0; i < NSB; i++) {
		char sql[256];
		snprintf(sql, sizeof sql,
		         "SELECT max(cpu_usage_us) FROM samples WHERE sandbox_id = 'sb-%d'", i);
		assert_int_equal(count(c, sql), cpu[i]);
	}
}

/* Our own cluster, NSB fake sandboxes and a collector sampling them. */
struct faults {
	char root[128], spool[128];
	char key[128]; /* the spool key's file, "" for none */
	int64_t cpu[NSB];
	const char *args[16];
};

/* A key for the spool in tmp/spool.key, its path into x->key. */
static void spool_key_file(struct fx *f, struct faults *x)
{
	unsigned char k[48];
	for (size_t i = 0; i < sizeof k; i++)
		k[i] = (unsigned char)(i * 37 + 11);
	snprintf(x->key, sizeof x->key, "%s/spool.key", f->tmp);
	int fd = open(x->key, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(write(fd, k, sizeof k), (ssize_t)sizeof k);
	close(fd);
}

static void start_faults(struct fx *f, struct faults *x, const char *interval)
{
	own_cluster(f);
	fake_sandboxes(f, x->root, sizeof x->root);
	snprintf(x->spool, sizeof x->spool, "%s/spool", f->tmp);
	const char *args[] = {
	        "--root",     x->root,  "--layout", "v2",     "--match",   "(?<sandbox>sb-[0-9]+)",
	        "--interval", interval, "--spool",  x->spool, "--host-id", "t",
	        NULL,         NULL,     NULL};
	if (x->key[0]) {
		args[12] = "--spool-key";
		args[13] = x->key;
	}
	memcpy(x->args, args, sizeof args);
	f->collector = collector(f, f->url, x->args);
}

static void postgres_stopped_and_started_loses_and_doubles_nothing(void **state)
{
	struct fx *f = *state;
	struct faults x = {0};
	int64_t *cpu = x.cpu;
	char *root = x.root, *spool = x.spool;
	start_faults(f, &x, "200ms");
	int64_t began = mono_ms();
	spin(root, cpu, 20);
	pg(f, "stop --immediate");
	spin(root, cpu, 30); /* about 1.5 s of rounds go to the spool */
	pg(f, "start");
	spin(root, cpu, 30);
	assert_int_equal(stop(&f->collector), 0);
	int64_t ran = mono_ms() - began;

	long taken = samples_taken(f);
	PGconn *c = connect_to(f->url);
	long stored = count(c, "SELECT count(*) FROM samples");
	long distinct =
	        count(c, "SELECT count(DISTINCT (sandbox_id, incarnation, ts)) FROM samples");
	check_last_counters(c, cpu);
	rounds_are_whole(c, NSB, ran, 200);
	PQfinish(c);
	char *buf = malloc(1 << 20);
	read_log(f, buf, 1 << 20);
	assert_non_null(strstr(buf, "database away: spooled"));
	assert_non_null(strstr(buf, "replayed"));
	free(buf);
	assert_true(taken > 3 * NSB);
	assert_int_equal(stored, taken);
	assert_int_equal(distinct, stored);
	struct stat st;
	assert_int_equal(stat(spool, &st), 0);
	assert_int_equal(st.st_size, 0); /* all replayed, then emptied */
}

/*
 * The keys (sandbox, incarnation, time) of the rows in the good records of a
 * spool file (signed with the key in key_file, unless it is ""), as a VALUES
 * list for SQL, into keys; returns how many.
 */
static long spool_keys(const char *path, const char *key_file, char *keys, size_t len)
{
	struct spool_key key;
	char err[256];
	if (key_file[0] && !spool_key_load(key_file, &key, err, sizeof err))
		fail_msg("%s", err);
	size_t hlen = key_file[0] ? SPOOL_SIGNED_HEADER : SPOOL_HEADER;
	static unsigned char buf[1 << 22];
	int fd = open(path, O_RDONLY);
	keys[0] = '\0';
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf);
	close(fd);
	size_t records, used = 0;
	uint64_t last;
	bool torn;
	size_t good = spool_scan(buf, n > 0 ? (size_t)n : 0, key_file[0] ? &key : NULL, &records,
	                         &last, &torn);
	long rows = 0;
	for (size_t off = 0; off < good;) {
		uint32_t rlen = (uint32_t)buf[off + 4] | (uint32_t)buf[off + 5] << 8 |
		                (uint32_t)buf[off + 6] << 16 | (uint32_t)buf[off + 7] << 24;
		const char *p = (const char *)buf + off + hlen, *end = p + rlen;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			char sb[64], ts[64];
			long long inc;
			if (sscanf(p, "%63[^\t]\t%lld\t%63[^\t]", sb, &inc, ts) != 3)
				fail_msg("a spooled row without a key: %.60s", p);
			used += (size_t)snprintf(keys + used, len - used, "%s('%s', %lld, '%s')",
			                         rows ? ", " : "", sb, inc, ts);
			if (used >= len)
				fail_msg("too many spooled rows for the test's buffer");
			rows++;
			p = nl ? nl + 1 : end;
		}
		off += hlen + rlen;
	}
	return rows;
}

/* How many of the keys (a VALUES list) the table has. */
static long keys_in(PGconn *c, const char *keys)
{
	static char sql[1 << 21];
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM (VALUES %s) k(s, i, t) WHERE EXISTS (SELECT 1 FROM "
	         "samples WHERE sandbox_id = k.s AND incarnation = k.i AND ts = k.t::timestamptz)",
	         keys);
	return count(c, sql);
}

static void sigkill_and_restart(struct fx *f, bool keyed)
{
	struct faults x = {0};
	if (keyed)
		spool_key_file(f, &x);
	int64_t *cpu = x.cpu;
	char *root = x.root, *spool = x.spool;
	const char *const *args = x.args;
	start_faults(f, &x, "100ms");
	spin(root, cpu, 10);
	kill(f->collector, SIGKILL); /* with the database up */
	waitpid(f->collector, NULL, 0);
	f->collector = collector(f, f->url, args);
	spin(root, cpu, 10);
	pg(f, "stop --immediate");
	spin(root, cpu, 20);
	kill(f->collector, SIGKILL); /* mid-run, spooling, maybe in mid-append */
	waitpid(f->collector, NULL, 0);
	f->collector = 0;
	static char keys[1 << 20];
	long spooled = spool_keys(spool, x.key, keys, sizeof keys);
	assert_true(spooled > 0);
	pg(f, "start");
	PGconn *c = connect_to(f->url);
	long before = count(c, "SELECT count(*) FROM samples");
	/* a batch whose COMMIT went through as PostgreSQL stopped (its answer lost) was
	 * spooled too: its rows are in already, and its replay adds none */
	long already = keys_in(c, keys);

	const char *once[] = {
	        "--root",  root,  "--layout",  "v2", "--match", "(?<sandbox>sb-[0-9]+)",
	        "--spool", spool, "--host-id", "t",  "--once",  NULL,
	        NULL,      NULL};
	if (keyed) {
		once[11] = "--spool-key";
		once[12] = x.key;
	}
	pid_t p = collector(f, f->url, once);
	int st;
	assert_int_equal(waitpid(p, &st, 0), p);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	long again = samples_taken(f);
	assert_int_equal(again, NSB);
	long after = count(c, "SELECT count(*) FROM samples");
	/* Every spooled row is in, each once, and nothing else came but the last round. */
	assert_int_equal(keys_in(c, keys), spooled);
	assert_int_equal(after, before + (spooled - already) + again);
	assert_int_equal(
	        count(c, "SELECT count(DISTINCT (sandbox_id, incarnation, ts)) FROM samples"),
	        after);
	check_last_counters(c, cpu); /* every µs of CPU is in */
	PQfinish(c);
	/* signed or not, no record was taken for damage, a torn one at most was cut */
	char *log = malloc(1 << 20);
	read_log(f, log, 1 << 20);
	assert_null(strstr(log, "is damaged"));
	if (keyed)
		assert_non_null(strstr(log, "records signed with the key in"));
	free(log);
}

static void sigkill_and_restart_with_the_same_spool_loses_and_doubles_nothing(void **state)
{
	sigkill_and_restart(*state, false);
}

/* The same with a key: signed records, cut, kept and replayed as unsigned ones are. */
static void sigkill_and_restart_with_a_signed_spool_loses_and_doubles_nothing(void **state)
{
	sigkill_and_restart(*state, true);
}

/*
 * More sandboxes than the open file limit has room for: the collector samples
 * those whose files fit, says how many wait, keeps descriptors for itself, so
 * it reconnects after PostgreSQL restarts and its rescans retire nothing that
 * is there. (Before, the limit hid as "absent" files, the sandboxes past it
 * were skipped without a word, and the first rescan, unable to open a folder,
 * retired every sandbox.)
 */
static void at_the_open_file_limit_it_samples_what_fits_and_keeps_writing(void **state)
{
	struct fx *f = *state;
	char root[128], spool[128], rel[32];
	enum { ALL = 30, FIT = 10 };
	own_cluster(f);
	assert_true(fakecg_tree(f->tmp, FAKE_V2, root, sizeof root));
	for (int i = 0; i < ALL; i++) {
		snprintf(rel, sizeof rel, "sb-%d", i);
		assert_true(fakecg_sandbox(root, FAKE_V2, rel, 1000 * (i + 1)));
	}
	snprintf(spool, sizeof spool, "%s/spool", f->tmp);
	/* a v2 sandbox holds 6 files; the last one needs COLLECTOR_FILES_MOST */
	f->nofile = COLLECTOR_FD_RESERVE + (FIT - 1) * 6 + COLLECTOR_FILES_MOST;
	const char *args[] = {
	        "--root",     root,    "--layout", "v2", "--match", "(?<sandbox>sb-[0-9]+)",
	        "--interval", "200ms", "--rescan", "1s", "--spool", spool,
	        "--host-id",  "t",     NULL};
	int64_t began = mono_ms();
	f->collector = collector(f, f->url, args);
	sleep_ms(1500); /* a rescan or more */
	pg(f, "stop --immediate");
	sleep_ms(1200); /* rounds go to the spool, a rescan meanwhile */
	pg(f, "start");
	sleep_ms(1500);
	assert_int_equal(stop(&f->collector), 0);
	int64_t ran = mono_ms() - began;

	long taken = samples_taken(f);
	PGconn *c = connect_to(f->url);
	long stored = count(c, "SELECT count(*) FROM samples");
	long sandboxes = count(c, "SELECT count(DISTINCT sandbox_id) FROM samples");
	long least = count(c, "SELECT min(n) FROM (SELECT count(*) n FROM samples "
	                      "GROUP BY sandbox_id) s");
	PQfinish(c);
	char *buf = malloc(1 << 20);
	read_log(f, buf, 1 << 20);
	bool said = strstr(buf, "20 sandboxes not sampled: the open file limit") != NULL;
	bool retired = strstr(buf, "retired: its cgroup is gone") != NULL;
	bool replayed = strstr(buf, "replayed") != NULL;
	if (!said || retired || !replayed || stored != taken)
		fprintf(stderr, "collector log:\n%s\n", buf);
	free(buf);
	assert_true(said);
	assert_false(retired);
	assert_true(replayed); /* it reconnected at the limit */
	assert_int_equal(sandboxes, FIT);
	assert_int_equal(stored, taken);         /* nothing lost on the way */
	assert_true(least * FIT >= taken - FIT); /* each was sampled every round */
	assert_true(least * 200 * 4 >= ran * 3); /* and rounds came, by the test's own clock */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(configuration_errors_exit_2_with_one_line),
	        cmocka_unit_test_setup_teardown(
	                real_cgroup_cpu_in_postgres_equals_the_kernel_counter, setup, teardown),
	        cmocka_unit_test_setup_teardown(removed_unread_cgroups_are_ended_from_their_parent,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sandbox_whose_limits_come_after_its_folder_is_registered_from_them, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(a_real_cgroup_that_vanishes_reads_as_gone, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(
	                postgres_stopped_and_started_loses_and_doubles_nothing, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                sigkill_and_restart_with_the_same_spool_loses_and_doubles_nothing, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                sigkill_and_restart_with_a_signed_spool_loses_and_doubles_nothing, setup,
	                teardown),
	        cmocka_unit_test_setup_teardown(
	                at_the_open_file_limit_it_samples_what_fits_and_keeps_writing, setup,
	                teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
