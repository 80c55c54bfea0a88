/*
 * bench_collector: the collector's cost per sampling round, beside a naive
 * reader that opens, reads and closes every file every time, in one run.
 *
 *   build/bench_collector [--sandboxes N] [--real N] [--rounds N]
 *
 * Prints the CPU time (user + system, CLOCK_PROCESS_CPUTIME_ID) of a round
 * per sandbox: the mean over CG_LIMIT_EVERY rounds, which hold one re-read
 * of the limits and memory.stat, and the median of such windows. Then what
 * that is in share of one core when every sandbox is sampled once a second,
 * and the peak RSS of a process that does only that. Each variant runs in a
 * child process of its own so RSS is its own.
 *   fake  a v2 tree of N sandboxes on tmpfs (/dev/shm)
 *   real  N empty cgroups made under this host's hierarchies (needs root)
 *   copy  the fake tree again, each round also written to PostgreSQL with COPY
 *         (DATABASE_URL or the private cluster; a database of its own)
 * Never a test: it prints figures and exits 0 unless it could not run. After
 * the table, "RESULT collector_TAG_us=... collector_TAG_rss_mib=..." lines
 * (TAG fake_meter, fake_naive, copy_meter, real_meter, real_naive) for
 * bench/table.sh.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "common/log.h"
#include "tests/support/fakecg.h"
#include "tests/support/testdb.h"

/* RESULT lines, printed after the table */
static FILE *results;

struct result {
	double us_per_sandbox; /* CPU µs of a round, per sandbox (windows' median) */
	long maxrss_kib;
	int ok;
};

static int64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* ---- the naive reader: open, read, close, parse, every file, every time ---- */

static const char *const v2_files[] = {"cpu.stat",    "memory.current", "memory.peak",
                                       "memory.stat", "memory.max",     "cpu.max"};

static long long naive_value(const char *text, const char *key)
{
	const char *p = key ? strstr(text, key) : text;
	return p ? strtoll(p + (key ? strlen(key) : 0), NULL, 10) : -1;
}

static long long naive_read(const char *dir, const char *file, const char *key)
{
	char path[2048], buf[8192];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return naive_value(buf, key);
}

/* ---- one variant in a child ---- */

struct job {
	const char *name;
	struct collector_config cfg;
	size_t expect;
	int rounds;
	bool naive;
	bool write;
	char (*dirs)[2048]; /* naive: the sandboxes' folders */
};

static void run_child(const struct job *j, int out)
{
	struct result r = {0};
	int64_t *t = calloc((size_t)j->rounds, sizeof *t);
	volatile long long sink = 0;
	if (j->naive) {
		for (int k = 0; k < j->rounds; k++) {
			int64_t a = cpu_ns();
			for (size_t s = 0; s < j->expect; s++)
				for (size_t f = 0; f < 6; f++)
					sink += naive_read(j->dirs[s], v2_files[f],
					                   f == 0   ? "usage_usec "
					                   : f == 3 ? "anon "
					                            : NULL);
			t[k] = cpu_ns() - a;
		}
	} else {
		struct collector c;
		char err[512];
		if (!collector_init(&c, &j->cfg, err, sizeof err)) {
			fprintf(stderr, "%s: %s\n", j->name, err);
			_exit(1);
		}
		collector_scan(&c);
		if (c.nsandboxes != j->expect) {
			fprintf(stderr, "%s: found %zu sandboxes, expected %zu\n", j->name,
			        c.nsandboxes, j->expect);
			_exit(1);
		}
		for (int k = 0; k < j->rounds; k++) {
			int64_t a = cpu_ns();
			collector_round(&c);
			if (j->write) {
				if (!collector_flush(&c) || c.stats.spooled_batches) {
					fprintf(stderr, "%s: the write failed\n", j->name);
					_exit(1);
				}
			} else {
				batch_clear(&c.batch);
			}
			t[k] = cpu_ns() - a;
		}
		collector_free(&c);
	}
	(void)sink;
	/* A window of CG_LIMIT_EVERY rounds holds one re-read of the slow files
	 * (limits, memory.stat): its mean is what the collector costs; the median
	 * window keeps a round a noisy neighbour slowed from counting. */
	int nw = j->rounds / CG_LIMIT_EVERY;
	for (int w = 0; w < nw; w++) {
		int64_t sum = 0;
		for (int k = 0; k < CG_LIMIT_EVERY; k++)
			sum += t[w * CG_LIMIT_EVERY + k];
		t[w] = sum / CG_LIMIT_EVERY;
	}
	qsort(t, (size_t)nw, sizeof *t, cmp_i64);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	r.us_per_sandbox = (double)t[(nw - 1) / 2] / 1000.0 / (double)j->expect;
	r.maxrss_kib = ru.ru_maxrss;
	r.ok = 1;
	if (write(out, &r, sizeof r) != sizeof r)
		_exit(1);
	_exit(0);
}

static struct result run(const struct job *j)
{
	struct result r = {0};
	int p[2];
	if (pipe(p) != 0)
		return r;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		run_child(j, p[1]);
	}
	close(p[1]);
	if (read(p[0], &r, sizeof r) != sizeof r)
		r.ok = 0;
	close(p[0]);
	waitpid(pid, NULL, 0);
	return r;
}

/* One row of the table, and a RESULT line (collector_TAG_us, collector_TAG_rss_mib) for
 * bench/table.sh. */
static void row(const char *tree, size_t n, const char *reader, const char *tag, struct result r)
{
	if (!r.ok) {
		printf("| %-22s | %6zu | %-13s | %10s | %10s | %9s |\n", tree, n, reader, "failed",
		       "", "");
		return;
	}
	/* share of one core with every sandbox sampled once a second */
	double core = r.us_per_sandbox * (double)n / 1e6 * 100.0;
	printf("| %-22s | %6zu | %-13s | %10.2f | %9.3f%% | %6.1f MiB |\n", tree, n, reader,
	       r.us_per_sandbox, core, (double)r.maxrss_kib / 1024.0);
	fprintf(results,
	        "RESULT collector_%s_us=%.2f collector_%s_rss_mib=%.1f collector_%s_n=%zu\n", tag,
	        r.us_per_sandbox, tag, (double)r.maxrss_kib / 1024.0, tag, n);
}

static long arg(int argc, char **argv, const char *name, long def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0) {
			char *end;
			long v = strtol(argv[i + 1], &end, 10);
			if (*end == '\0' && v > 0 && v <= 100000)
				return v;
			fprintf(stderr, "bench_collector: %s needs a whole number 1..100000\n",
			        name);
			exit(2);
		}
	return def;
}

/* Prints the RESULT lines after the table; returns rc. */
static int finish(int rc, char **buf)
{
	if (results != NULL && fclose(results) == 0 && *buf != NULL)
		printf("\n%s", *buf);
	results = NULL;
	free(*buf);
	return rc;
}

int main(int argc, char **argv)
{
	long nfake = arg(argc, argv, "--sandboxes", 1000), nreal = arg(argc, argv, "--real", 100);
	int rounds = (int)arg(argc, argv, "--rounds", 100);
	/* whole windows of CG_LIMIT_EVERY rounds, at least one */
	rounds =
	        rounds < CG_LIMIT_EVERY ? CG_LIMIT_EVERY : rounds / CG_LIMIT_EVERY * CG_LIMIT_EVERY;
	char root[256], host[64];
	log_init("bench", LOG_ERROR, false);
	char *rbuf = NULL;
	size_t rlen = 0;
	results = open_memstream(&rbuf, &rlen);
	if (results == NULL)
		return 1;
	gethostname(host, sizeof host);
	time_t now = time(NULL);
	char day[32];
	strftime(day, sizeof day, "%Y-%m-%d", gmtime(&now));
	printf("collector: CPU per sampling round, the median of %d windows of %d rounds' mean "
	       "(%s, "
	       "%s, %ld cores)\n\n",
	       rounds / CG_LIMIT_EVERY, CG_LIMIT_EVERY, day, host, sysconf(_SC_NPROCESSORS_ONLN));
	printf("| %-22s | %6s | %-13s | %10s | %10s | %9s |\n", "tree", "boxes", "reader",
	       "µs/sandbox", "core @1 s", "peak RSS");
	printf("|%s|%s|%s|%s|%s|%s|\n", "------------------------", "--------", "---------------",
	       "------------", "------------", "-----------");

	/* fake v2 tree on tmpfs */
	if (!fakecg_tree("/dev/shm", FAKE_V2, root, sizeof root)) {
		fprintf(stderr, "bench_collector: could not make a tree in /dev/shm\n");
		return 1;
	}
	char(*dirs)[2048] = calloc((size_t)(nfake > nreal ? nfake : nreal), sizeof *dirs);
	for (long i = 0; i < nfake; i++) {
		char rel[64];
		snprintf(rel, sizeof rel, "sandboxes/acct-%ld/sb-%ld", i % 50, i);
		if (!fakecg_sandbox(root, FAKE_V2, rel, i * 1000)) {
			fakecg_remove(root);
			return 1;
		}
		snprintf(dirs[i], sizeof dirs[i], "%s/%s", root, rel);
	}
	struct job j = {
	        .name = "fake",
	        .cfg = {.root = root,
	                .layout = "v2",
	                .match = "sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)",
	                .host = "bench",
	                .spool_path = NULL,
	                .db_role = ""},
	        .expect = (size_t)nfake,
	        .rounds = rounds,
	        .dirs = dirs,
	};
	row("fake v2 tree, tmpfs", (size_t)nfake, "meter", "fake_meter", run(&j));
	j.naive = true;
	row("fake v2 tree, tmpfs", (size_t)nfake, "naive", "fake_naive", run(&j));

	/* the same, with each round written to PostgreSQL */
	struct testdb db;
	if (testdb_create_migrated(&db, "bench")) {
		j.naive = false;
		j.write = true;
		j.cfg.db_url = db.url;
		j.rounds = rounds < 20 ? rounds : 20;
		row("fake v2, + COPY to PG", (size_t)nfake, "meter", "copy_meter", run(&j));
		testdb_drop(&db);
	} else {
		printf("| %-22s | %6ld | %-13s | no database: start scripts/pg.sh or set "
		       "DATABASE_URL |\n",
		       "fake v2, + COPY to PG", nfake, "meter");
	}
	fakecg_remove(root);

	/* real cgroups */
	struct cg_layout l;
	char err[512], holder[64];
	if (!layout_find("/sys/fs/cgroup", "auto", NULL, &l, err, sizeof err)) {
		printf("\nreal cgroups: not measured: %s\n", err);
		return finish(0, &rbuf);
	}
	const char *prim = cg_layout_primary(&l);
	bool mem1 = l.memory[0] && strcmp(l.memory, prim) != 0;
	snprintf(holder, sizeof holder, "meter-bench-%d", (int)getpid());
	char path[2048];
	long made = 0;
	snprintf(path, sizeof path, "%s/%s", prim, holder);
	bool ok = mkdir(path, 0755) == 0;
	if (ok && mem1) {
		snprintf(path, sizeof path, "%s/%s", l.memory, holder);
		ok = mkdir(path, 0755) == 0;
	}
	for (; ok && made < nreal; made++) {
		snprintf(path, sizeof path, "%s/%s/sb-%ld", prim, holder, made);
		if (mkdir(path, 0755) != 0)
			break;
		snprintf(dirs[made], sizeof dirs[made], "%s", path);
		if (mem1) {
			snprintf(path, sizeof path, "%s/%s/sb-%ld", l.memory, holder, made);
			if (mkdir(path, 0755) != 0)
				break;
		}
	}
	if (made == nreal) {
		char pattern[128];
		snprintf(pattern, sizeof pattern, "%s/(?<sandbox>[^/]+)", holder);
		struct job r = {.name = "real",
		                .cfg = {.root = "/sys/fs/cgroup",
		                        .layout = "auto",
		                        .match = pattern,
		                        .host = "bench",
		                        .db_role = ""},
		                .expect = (size_t)nreal,
		                .rounds = rounds,
		                .dirs = dirs};
		char label[64];
		snprintf(label, sizeof label, "real cgroups, %s", layout_name(&l));
		row(label, (size_t)nreal, "meter", "real_meter", run(&r));
		/* the naive reader on a hybrid host reads memory from v1 too; close enough:
		   it reads the same six names where they exist */
		r.naive = true;
		row(label, (size_t)nreal, "naive", "real_naive", run(&r));
	} else {
		printf("\nreal cgroups: not measured: could not make cgroups under %s: %s\n", prim,
		       strerror(errno));
	}
	for (long i = made; i-- > 0;) {
		snprintf(path, sizeof path, "%s/%s/sb-%ld", prim, holder, i);
		rmdir(path);
		if (mem1) {
			snprintf(path, sizeof path, "%s/%s/sb-%ld", l.memory, holder, i);
			rmdir(path);
		}
	}
	snprintf(path, sizeof path, "%s/%s", prim, holder);
	rmdir(path);
	if (mem1) {
		snprintf(path, sizeof path, "%s/%s", l.memory, holder);
		rmdir(path);
	}
	free(dirs);
	return finish(0, &rbuf);
}
