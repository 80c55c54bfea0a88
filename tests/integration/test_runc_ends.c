/*
 * The last interval of real containers: Debian's runc removes a container's
 * cgroup the moment its last process exits, and the real collector must
 * still bill every microsecond the kernel counted. Each container burns CPU,
 * then prints its own cgroup's counter as its last act (read from the host's
 * cgroup tree, bound into it read-only); the collector's end of it must be at
 * least that, within 0.1 % (and the exit's few microseconds), and its time
 * the container's exit. 50 containers: one after another and 20 at once with
 * the collector at 1 s on this host's layout (v2, or the unified hierarchy of
 * a hybrid host), one after another at 10 s reading the v1 hierarchies
 * (--layout v1, where no cgroup.events tells the emptying). The test prints
 * how many would have been billed short by the last reading alone, as the
 * collector did before it asked the parent.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tests/support/cluster.h"
#include "tests/support/runc.h"
#include "tests/support/testdb.h"

#define SEQUENTIAL 15 /* one after another, in each of the two runs */
#define AT_ONCE    20

struct fx {
	struct testdb db;
	char dir[64], holder[64], runc_root[128];
	pid_t collector;
	pid_t running[AT_ONCE];
	int64_t realtime_less_uptime; /* µs: the host's clock at uptime 0 */
};

static struct fx *fx_of(void **state)
{
	return *state;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !test_tmpdir(f->dir, sizeof f->dir, "ends") ||
	    !testdb_create_migrated(&f->db, "ends")) {
		free(f);
		return -1;
	}
	*state = f;
	snprintf(f->holder, sizeof f->holder, "meter-ends-%d", (int)getpid());
	snprintf(f->runc_root, sizeof f->runc_root, "%s/runc", f->dir);
	f->realtime_less_uptime = clock_now_us() - clock_us(CLOCK_BOOTTIME);
	return testdb_exec(&f->db, "INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', "
	                           "'paid')")
	               ? 0
	               : -1;
}

static void stop_collector(struct fx *f)
{
	if (f->collector > 0) {
		kill(f->collector, SIGTERM);
		waitpid(f->collector, NULL, 0);
	}
	f->collector = 0;
}

static int teardown(void **state)
{
	struct fx *f = fx_of(state);
	char cmd[512];
	for (int i = 0; i < AT_ONCE; i++)
		if (f->running[i] > 0) {
			kill(f->running[i], SIGKILL);
			waitpid(f->running[i], NULL, 0);
		}
	snprintf(cmd, sizeof cmd,
	         "for c in $(runc --root %s list -q 2>/dev/null); do runc --root %s delete -f $c; "
	         "done >/dev/null 2>&1",
	         f->runc_root, f->runc_root);
	(void)!system(cmd);
	stop_collector(f);
	runc_remove_cgroups(f->holder);
	testdb_drop(&f->db);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	(void)!system(cmd);
	free(f);
	return 0;
}

static void start_collector(struct fx *f, const char *interval, const char *layout, int run)
{
	char pattern[160];
	snprintf(pattern, sizeof pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)", f->holder);
	pid_t pid = fork();
	if (pid == 0) {
		char clog[160], spool[160];
		snprintf(clog, sizeof clog, "%s/collector-%d.log", f->dir, run);
		snprintf(spool, sizeof spool, "%s/spool-%d", f->dir, run);
		FILE *o = freopen(clog, "w", stdout);
		(void)o;
		dup2(1, 2);
		setenv("DATABASE_URL", f->db.url, 1);
		if (getenv("ENDS_NICE"))
			(void)!setpriority(PRIO_PROCESS, 0, atoi(getenv("ENDS_NICE")));
		execl(METER_COLLECTOR_BIN, METER_COLLECTOR_BIN, "--root", "/sys/fs/cgroup",
		      "--layout", layout, "--match", pattern, "--interval", interval, "--rescan",
		      "30s", "--host-id", "ends-test", "--spool", spool, "--log-level", "info",
		      (char *)NULL);
		_exit(127);
	}
	f->collector = pid;
	/* its first scan: the holder's folder exists once runc made the first cgroup,
	 * so give it the account's folder now (runc makes the rest) */
	sleep_ms(300);
}

/*
 * A container's script: burn until the uptime reaches `until` (centiseconds,
 * or now + -until when negative), then print the counter of its own cgroup
 * (cpu.stat's usage_usec, or cpuacct.usage in ns) and the uptime. It sleeps
 * a moment first: the kernel adds a running task's time to its cgroup's
 * counter when it stops running (or at a tick), so a counter read by the
 * task that burned lags by up to a tick; read after waking, it lags by the
 * microseconds since.
 */
static void script_for(char *out, size_t len, const char *counter, int64_t until)
{
	char start[128];
	if (until < 0)
		snprintf(start, sizeof start,
		         "read up x < /proc/uptime; end=$((${up%%.*}${up#*.} + %" PRId64 ")); ",
		         -until);
	else
		snprintf(start, sizeof start, "end=%" PRId64 "; ", until);
	snprintf(out, len,
	         "%swhile :; do i=0; while [ $i -lt 2000 ]; do i=$((i+1)); done; "
	         "read up x < /proc/uptime; [ ${up%%.*}${up#*.} -ge $end ] && break; done; "
	         "/bin/busybox sleep 0.02; read a b x < %s; read up x < /proc/uptime; "
	         "echo \"counter $a ${b:-0} up $up\"",
	         start, counter);
}

/* What the collectors said, for a failure's message. */
static void show_logs(struct fx *f)
{
	char cmd[300];
	snprintf(cmd, sizeof cmd, "tail -n 60 %s/collector-*.log >&2", f->dir);
	(void)!system(cmd);
}

struct container {
	char id[48];
	int64_t printed_us;  /* the counter it printed as its last act */
	int64_t printed_at;  /* µs since the epoch, when it printed (10 ms resolution) */
	int64_t returned_at; /* when its runc returned */
};

static void prepare(struct fx *f, struct container *k, const char *id, bool v1, int64_t until)
{
	char cg[200], counter[300], script[1024];
	snprintf(k->id, sizeof k->id, "%s", id);
	snprintf(cg, sizeof cg, "/%s/acme/%s", f->holder, id);
	snprintf(counter, sizeof counter, "/host-cgroup/%s%s/%s",
	         v1                                            ? "cpuacct"
	         : access("/sys/fs/cgroup/unified", F_OK) == 0 ? "unified"
	                                                       : "",
	         cg, v1 ? "cpuacct.usage" : "cpu.stat");
	script_for(script, sizeof script, counter, until);
	runc_bundle(f->dir, id, cg, script, NULL, true);
}

/* Its runc has returned: what it printed. */
static void finished(struct fx *f, struct container *k, int rc, bool v1)
{
	char log[4096];
	k->returned_at = clock_now_us();
	runc_read_log(f->dir, k->id, log, sizeof log);
	const char *at = strstr(log, "counter ");
	char a[32] = "", b[32] = "", up[32] = "";
	if (rc != 0 || at == NULL || sscanf(at, "counter %31s %31s up %31s", a, b, up) != 3 ||
	    (!v1 && strcmp(a, "usage_usec") != 0))
		fail_msg("container %s: runc exited %d, printed: %s", k->id, rc, log);
	k->printed_us = v1 ? strtoll(a, NULL, 10) / 1000 : strtoll(b, NULL, 10);
	k->printed_at = (int64_t)(strtod(up, NULL) * 1e6) + f->realtime_less_uptime;
}

struct tally {
	int ends, read, parent, estimated, last, short_before, short_now, short_estimated;
	int64_t most_over_us;
	double most_over_share;
	int64_t estimated_kernel, estimated_billed; /* the sums over those estimated */
};

/* The collector's end of k, checked against what the kernel counted. */
static void check(struct fx *f, const struct container *k, struct tally *t, bool strict)
{
	char sql[512], v[256] = "";
	snprintf(sql, sizeof sql,
	         "SELECT concat_ws(' ', e.cpu_usage_us, coalesce(e.end_cpu, 'none'), "
	         "(extract(epoch FROM e.ts) * 1000000)::bigint, "
	         "coalesce((SELECT max(cpu_usage_us) FROM samples s WHERE s.sandbox_id = "
	         "e.sandbox_id AND s.ended IS NOT true), -1)) "
	         "FROM samples e WHERE e.sandbox_id = '%s' AND e.ended",
	         k->id);
	testdb_value(&f->db, sql, v, sizeof v);
	int64_t billed, end_ts, before;
	char how[16];
	if (sscanf(v, "%" SCNd64 " %15s %" SCNd64 " %" SCNd64, &billed, how, &end_ts, &before) !=
	    4) {
		show_logs(f);
		fail_msg("container %s: no end written (%s)", k->id, v);
	}
	t->ends++;
	t->read += strcmp(how, "read") == 0;
	t->parent += strcmp(how, "parent") == 0;
	t->estimated += strcmp(how, "estimated") == 0;
	t->last += strcmp(how, "last") == 0;
	/* before the parent was asked, a cgroup gone unread was billed its last reading */
	int64_t old = strcmp(how, "read") == 0 ? billed : before;
	bool estimated = strcmp(how, "estimated") == 0;
	t->short_before += old < k->printed_us;
	t->short_now += billed < k->printed_us && !estimated;
	t->short_estimated += billed < k->printed_us && estimated;
	if (estimated) {
		t->estimated_kernel += k->printed_us;
		t->estimated_billed += billed;
	}
	int64_t over = billed - k->printed_us;
	if (over > t->most_over_us)
		t->most_over_us = over;
	double share = k->printed_us > 0 ? (double)over / (double)k->printed_us : 0;
	if (share > t->most_over_share)
		t->most_over_share = share;
	printf("  %-12s kernel %9" PRId64 " µs, billed %9" PRId64 " (%+6" PRId64
	       ", %s; the last reading %9" PRId64 "), end %+5" PRId64
	       " ms from its print, %+5" PRId64 " ms from runc's return\n",
	       k->id, k->printed_us, billed, over, how, before, (end_ts - k->printed_at) / 1000,
	       (end_ts - k->returned_at) / 1000);
	if (!strict && estimated)
		return; /* a share: checked as a sum (below) */
	/* never short; at most 0.1 % over, and 2.5 ms: what ran after the print (the
	 * shell's and the sleep's exits, the container's pid namespace going away:
	 * 0.9 to 1.6 ms of CPU on this machine, the same whether the end was read
	 * from the cgroup or from its parent). Twenty exiting at the same instant on
	 * two cores contend in the kernel's exit paths, which the cgroup is charged
	 * for: 3.6 ms was seen with the fuzzer running beside, so 10 ms there. */
	int64_t after_print_us = strict ? 2500 : 10000;
	if (billed < k->printed_us || over > k->printed_us / 1000 + after_print_us)
		fail_msg("container %s: the kernel counted %" PRId64 " µs by its last act, the "
		         "collector's end says %" PRId64 " (%s)",
		         k->id, k->printed_us, billed, how);
	/* its wall time ends at its exit: after its print (10 ms resolution), and by
	 * the time runc returned (and the collector's round trip) */
	if (end_ts < k->printed_at - 20000 || end_ts > k->returned_at + 250000)
		fail_msg("container %s: its end is stamped %+" PRId64
		         " ms from its last print, %+" PRId64 " ms from runc's return",
		         k->id, (end_ts - k->printed_at) / 1000, (end_ts - k->returned_at) / 1000);
}

static void one_after_another(struct fx *f, const char *tag, bool v1, struct container *k, int n,
                              int64_t burn_cs)
{
	for (int i = 0; i < n; i++) {
		char id[48];
		snprintf(id, sizeof id, "%s-%d", tag, i);
		prepare(f, &k[i], id, v1, -burn_cs);
		pid_t pid = runc_start(f->runc_root, f->dir, id);
		finished(f, &k[i], runc_wait(pid), v1);
	}
}

static void report(const char *what, const struct tally *t)
{
	printf("%s: %d ends: %d read from the cgroup, %d from its parent, %d estimated (%d of "
	       "them short), %d last reading; short of the kernel's count: %d (by the last "
	       "reading alone, as before: %d); the most over: %" PRId64 " µs (%.4f %%)\n",
	       what, t->ends, t->read, t->parent, t->estimated, t->short_estimated, t->last,
	       t->short_now, t->short_before, t->most_over_us, t->most_over_share * 100);
}

static void fifty_runc_containers_are_billed_their_kernel_counter(void **state)
{
	struct fx *f = fx_of(state);
	if (!runc_have())
		fail_msg("this test needs Debian's runc and busybox-static (scripts/deps.sh "
		         "installs them)");
	static struct container seq1[SEQUENTIAL], once[AT_ONCE], seq2[SEQUENTIAL];
	struct tally all = {0};
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* 1 s, this host's own layout: one after another, 2 s of CPU each */
	start_collector(f, "1s", "auto", 1);
	one_after_another(f, "seq1", false, seq1, SEQUENTIAL, 200);
	/* 20 at once, all burning until the same instant */
	int64_t until =
	        clock_us(CLOCK_BOOTTIME) / 10000 + 1000; /* 10 s: time for all 20 to start */
	for (int i = 0; i < AT_ONCE; i++) {
		char id[48];
		snprintf(id, sizeof id, "once-%d", i);
		prepare(f, &once[i], id, false, until);
	}
	for (int i = 0; i < AT_ONCE; i++)
		f->running[i] = runc_start(f->runc_root, f->dir, once[i].id);
	for (int i = 0; i < AT_ONCE; i++) {
		int rc = runc_wait(f->running[i]);
		f->running[i] = 0;
		finished(f, &once[i], rc, false);
	}
	stop_collector(f); /* its last round, written */
	struct tally t1 = {0}, t2 = {0}, t3 = {0};
	printf("one after another, the collector at 1 s:\n");
	for (int i = 0; i < SEQUENTIAL; i++)
		check(f, &seq1[i], &t1, true);
	printf("20 at once, the collector at 1 s:\n");
	for (int i = 0; i < AT_ONCE; i++)
		check(f, &once[i], &t2, false);

	/* 10 s, the v1 hierarchies: the end is the folder's removal */
	start_collector(f, "10s", "v1", 2);
	one_after_another(f, "seq2", true, seq2, SEQUENTIAL, 200);
	stop_collector(f);
	printf("one after another, the collector at 10 s on the v1 hierarchies:\n");
	for (int i = 0; i < SEQUENTIAL; i++)
		check(f, &seq2[i], &t3, true);

	report("one after another at 1 s", &t1);
	report("20 at once at 1 s", &t2);
	report("one after another at 10 s, v1", &t3);
	struct tally *ts[] = {&t1, &t2, &t3};
	for (int i = 0; i < 3; i++) {
		all.ends += ts[i]->ends;
		all.short_now += ts[i]->short_now;
		all.short_before += ts[i]->short_before;
		all.estimated += ts[i]->estimated;
	}
	printf("RESULT runc_ends=%d runc_short=%d runc_short_before=%d runc_estimated=%d\n",
	       all.ends, all.short_now, all.short_before, all.estimated);
	assert_int_equal(all.ends, 2 * SEQUENTIAL + AT_ONCE);
	/* every end known exactly is at least the kernel's count; the estimated ones
	 * (several gone between two readings of their parent) share an exact sum,
	 * which is at least theirs, each shown in /metrics */
	assert_int_equal(all.short_now, 0);
	if (t2.estimated_billed < t2.estimated_kernel)
		fail_msg("the %d estimated ends add up to %" PRId64
		         " µs, short of the kernel's %" PRId64,
		         t2.estimated, t2.estimated_billed, t2.estimated_kernel);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(
	                fifty_runc_containers_are_billed_their_kernel_counter, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
