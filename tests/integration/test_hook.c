/*
 * meter-hook against a real meter-api: admitted, refused (a limit, an unknown
 * account), misconfigured (no key, a key file others may read, a key without
 * rights), meter stopped and meter silent (fail-closed and fail-open, never
 * past the timeout), release twice; then Debian's runc running real
 * containers with meter-hook oci as their createRuntime and poststop hooks,
 * metered by the real collector.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/keys.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"
#include "tests/support/run.h"
#include "tests/support/runc.h"
#include "tests/support/testdb.h"

struct fx {
	struct testdb db;
	struct api_proc api;
	char admin[KEY_LEN + 1], acct[KEY_LEN + 1], hook[KEY_LEN + 1]; /* hook: what hosts hold */
	char dir[64], keyfile[128], url[64];
	/* the runc test */
	char holder[64], runc_root[128];
	pid_t collector, c1;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_key(const char *path, const char *key, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_true(write(fd, key, strlen(key)) == (ssize_t)strlen(key));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	if (f == NULL || !test_tmpdir(f->dir, sizeof f->dir, "hook") ||
	    !testdb_create_migrated(&f->db, "hook")) {
		free(f);
		return -1;
	}
	*state = f;
	if (!testdb_exec(&f->db,
	                 "INSERT INTO accounts (id, name, plan, max_concurrent, "
	                 "collector_registration) VALUES ('acme', 'Acme', 'trial', 1, true), "
	                 "('paidco', 'Paid Co', 'paid', 1, true)") ||
	    !testdb_key(&f->db, NULL, f->admin) || !testdb_key(&f->db, "acme", f->acct))
		return -1;
	char err[256];
	int64_t id;
	if (!key_create(f->db.conn, "hook", NULL, f->hook, &id, err, sizeof err))
		return -1;
	snprintf(f->keyfile, sizeof f->keyfile, "%s/hook.key", f->dir);
	write_key(f->keyfile, f->hook, 0600);
	if (!api_start(&f->api, METER_API_BIN, f->db.api_url, "--log-level=info"))
		return -1;
	snprintf(f->url, sizeof f->url, "http://127.0.0.1:%d", f->api.port);
	setenv("METER_API_URL", f->url, 1);
	setenv("METER_API_KEY_FILE", f->keyfile, 1);
	unsetenv("METER_API_KEY");
	return 0;
}

static void runc_cleanup(struct fx *f);

static int teardown(void **state)
{
	struct fx *f = *state;
	runc_cleanup(f);
	if (f->api.pid)
		api_stop(&f->api);
	testdb_drop(&f->db);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", f->dir);
	free(f);
	return 0;
}

/* meter-hook with args (NULL-terminated); its exit status, output in res. */
static int hook(struct run_result *res, ...)
{
	const char *argv[24] = {METER_HOOK_BIN};
	va_list ap;
	va_start(ap, res);
	for (int n = 1; n < 23 && (argv[n] = va_arg(ap, const char *)) != NULL; n++)
		;
	va_end(ap);
	run_program(argv, NULL, res);
	return res->status;
}

static void admitted_refused_and_released(void **state)
{
	struct fx *f = *state;
	struct run_result *r = malloc(sizeof *r);
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-1", "--vcpus", "2",
	                      "--memory-gib", "4", NULL),
	                 0);
	assert_non_null(strstr(r->out, "admitted sandbox sb-1 of account acme: 1 of 1 running; "
	                               "egress to ports 80, 443"));
	char v[64];
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT vcpus || ' ' || memory_gib || ' ' || "
	                                 "(stopped_at IS NULL) FROM sandboxes WHERE id = 'sb-1'",
	                                 v, sizeof v),
	                    "2.000 4.000 true");
	/* the account is full: refused, with meter's reason, and nothing registered */
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-2", "--vcpus", "1",
	                      "--memory-gib", "1", NULL),
	                 1);
	assert_non_null(strstr(r->err, "refused"));
	assert_non_null(strstr(r->err, "concurrency_limit"));
	assert_string_equal(testdb_value(&f->db, "SELECT count(*) FROM sandboxes WHERE id = 'sb-2'",
	                                 v, sizeof v),
	                    "0");
	/* an account meter does not know */
	assert_int_equal(hook(r, "admit", "--account", "nobody", "--sandbox", "sb-3", "--vcpus",
	                      "1", "--memory-gib", "1", NULL),
	                 1);
	assert_non_null(strstr(r->err, "nobody"));
	/* a paid account: no egress restriction; --json prints meter's answer */
	assert_int_equal(hook(r, "admit", "--account", "paidco", "--sandbox", "sb-p", "--vcpus",
	                      "0.5", "--memory-gib", "0.25", "--json", NULL),
	                 0);
	cJSON *j = cJSON_Parse(r->out);
	assert_non_null(j);
	assert_true(cJSON_IsNull(
	        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "admission"), "egress_ports")));
	cJSON_Delete(j);
	/* release, twice; then a place is free again */
	assert_int_equal(hook(r, "release", "--sandbox", "sb-1", NULL), 0);
	assert_non_null(strstr(r->out, "released sandbox sb-1"));
	assert_int_equal(hook(r, "release", "--sandbox", "sb-1", NULL), 0);
	assert_non_null(strstr(r->out, "stopped already"));
	assert_int_equal(hook(r, "release", "--sandbox", "sb-never", NULL), 1);
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-2", "--vcpus", "1",
	                      "--memory-gib", "1", NULL),
	                 0);
	/* The collector saw a new container's cgroup (made before the runtime's
	 * createRuntime hook runs) and registered it from its limits: the admission is
	 * still decided without it, so a full account refuses it. */
	testdb_value(&f->db,
	             "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, "
	             "account_id, cpu_limit_millicores, memory_limit_bytes) VALUES ('sb-c', 1, "
	             "now(), 'h', 0, 'acme', 1000, 1073741824) RETURNING 'ok'",
	             v, sizeof v);
	assert_string_equal(testdb_value(&f->db,
	                                 "SELECT count(*) FROM sandboxes WHERE id = 'sb-c' "
	                                 "AND stopped_at IS NULL",
	                                 v, sizeof v),
	                    "1");
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-c", "--vcpus", "1",
	                      "--memory-gib", "1", NULL),
	                 1);
	assert_non_null(strstr(r->err, "concurrency_limit"));
	free(r);
}

/*
 * The collector registers a container's cgroup while the admission runs:
 * after the admission counted the account's running sandboxes, before it
 * adopts the row. The admission still decides on the account's other
 * sandboxes, so a full account refuses it. A table lock on sandboxes holds
 * the admission at its adoption while the registration commits.
 */
static void a_registration_committing_during_the_admission_is_counted(void **state)
{
	struct fx *f = *state;
	struct run_result *r = malloc(sizeof *r);
	char v[64], errfile[160];
	assert_int_equal(hook(r, "admit", "--account", "paidco", "--sandbox", "sb-a", "--vcpus",
	                      "1", "--memory-gib", "1", NULL),
	                 0);
	PGconn *hold = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(hold), CONNECTION_OK);
	const char *steps[] = {
	        "BEGIN", "LOCK TABLE sandboxes IN SHARE ROW EXCLUSIVE MODE",
	        /* as the collector's write registers a sandbox its path names */
	        "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us, account_id, "
	        "cpu_limit_millicores, memory_limit_bytes) VALUES ('sb-r', 1, now(), 'h', 0, "
	        "'paidco', 1000, 1073741824)"};
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		PGresult *res = PQexec(hold, steps[i]);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			fail_msg("%s: %s", steps[i], PQerrorMessage(hold));
		PQclear(res);
	}
	snprintf(errfile, sizeof errfile, "%s/admit.err", f->dir);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int st = hook(r, "admit", "--account", "paidco", "--sandbox", "sb-r", "--vcpus",
		              "1", "--memory-gib", "1", "--timeout", "30s", NULL);
		FILE *out = fopen(errfile, "w");
		if (out) {
			fputs(r->err, out);
			fclose(out);
		}
		_exit(st);
	}
	/* the admission waits at its adoption */
	for (int i = 0; i < 800; i++) {
		testdb_value(&f->db,
		             "SELECT count(*) FROM pg_stat_activity WHERE datname = "
		             "current_database() AND wait_event_type = 'Lock' AND query LIKE "
		             "'UPDATE sandboxes SET vcpus%'",
		             v, sizeof v);
		if (strcmp(v, "1") == 0)
			break;
		sleep_ms(25);
	}
	assert_string_equal(v, "1");
	PGresult *res = PQexec(hold, "COMMIT");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	PQfinish(hold);
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	FILE *in = fopen(errfile, "r");
	size_t n = in ? fread(r->err, 1, sizeof r->err - 1, in) : 0;
	r->err[n] = '\0';
	if (in)
		fclose(in);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 1)
		fail_msg("admitted into a full account (status %d): %s", st, r->err);
	assert_non_null(strstr(r->err, "concurrency_limit"));
	assert_string_equal(
	        testdb_value(&f->db, "SELECT count(*) FROM sandboxes WHERE account_id = 'paidco'",
	                     v, sizeof v),
	        "2");
	free(r);
}

static void misconfigurations_exit_2_with_a_clear_line(void **state)
{
	struct fx *f = *state;
	struct run_result *r = malloc(sizeof *r);
	char loose[160], other[160];
	const char *admit[] = {"admit",   "--account", "acme",         "--sandbox", "sb-9",
	                       "--vcpus", "1",         "--memory-gib", "1"};
#define ADMIT(...)                                                                                 \
	hook(r, admit[0], admit[1], admit[2], admit[3], admit[4], admit[5], admit[6], admit[7],    \
	     admit[8], __VA_ARGS__)
	/* a key file others may read */
	snprintf(loose, sizeof loose, "%s/loose.key", f->dir);
	write_key(loose, f->hook, 0644);
	assert_int_equal(ADMIT("--key-file", loose, NULL), 2);
	assert_non_null(strstr(r->err, "chmod 600"));
	/* no key at all */
	unsetenv("METER_API_KEY_FILE");
	assert_int_equal(ADMIT(NULL), 2);
	assert_non_null(strstr(r->err, "no API key"));
	/* an account's key cannot register sandboxes, even failing open */
	snprintf(other, sizeof other, "%s/account.key", f->dir);
	write_key(other, f->acct, 0600);
	assert_int_equal(ADMIT("--key-file", other, "--fail-open", NULL), 2);
	assert_non_null(strstr(r->err, "not a hook or admin key"));
	setenv("METER_API_KEY", f->admin, 1); /* an admin key from the environment works too */
	assert_int_equal(hook(r, "release", "--sandbox", "sb-none", NULL), 1);
	unsetenv("METER_API_KEY");
	setenv("METER_API_KEY_FILE", f->keyfile, 1);
	/* bad command lines */
	assert_int_equal(hook(r, "admit", "--account", "acme", NULL), 2);
	assert_non_null(strstr(r->err, "--sandbox is required"));
	assert_int_equal(ADMIT("--vcpus", "-1", NULL), 2);
	assert_int_equal(ADMIT("--fail-open", "--fail-closed", NULL), 2);
	assert_int_equal(hook(r, "launch", NULL), 2);
	assert_int_equal(ADMIT("--api-url", "ftp://x", NULL), 2);
	/* oci without a runtime's state */
	assert_int_equal(hook(r, "oci", NULL), 2);
	assert_non_null(strstr(r->err, "not an OCI container state"));
#undef ADMIT
	free(r);
}

static void meter_away_fails_closed_or_open_within_the_timeout(void **state)
{
	struct fx *f = *state;
	struct run_result *r = malloc(sizeof *r);
	/* a port that accepts connections and never answers: meter hanging */
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t alen = sizeof a;
	assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(ls, 16), 0);
	assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
	char silent[64];
	snprintf(silent, sizeof silent, "http://127.0.0.1:%d", ntohs(a.sin_port));
	setenv("METER_API_URL", silent, 1);
	int64_t t0 = now_ms();
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-h", "--vcpus", "1",
	                      "--memory-gib", "1", "--timeout", "700ms", NULL),
	                 2);
	int64_t took = now_ms() - t0;
	assert_non_null(strstr(r->err, "refusing (--fail-closed)"));
	assert_true(took >= 600 && took < 3000);
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-h", "--vcpus", "1",
	                      "--memory-gib", "1", "--timeout", "700ms", "--fail-open", NULL),
	                 0);
	assert_non_null(strstr(r->err, "admitting without meter (--fail-open)"));
	close(ls);
	/* meter stopped: nothing listens */
	setenv("METER_API_URL", f->url, 1);
	assert_int_equal(api_stop(&f->api), 0);
	t0 = now_ms();
	assert_int_equal(hook(r, "admit", "--account", "acme", "--sandbox", "sb-h", "--vcpus", "1",
	                      "--memory-gib", "1", NULL),
	                 2);
	assert_true(now_ms() - t0 < 5000);
	assert_non_null(strstr(r->err, "meter unreachable"));
	assert_int_equal(hook(r, "release", "--sandbox", "sb-h", "--fail-open", NULL), 0);
	char v[32];
	assert_string_equal(testdb_value(&f->db, "SELECT count(*) FROM sandboxes WHERE id = 'sb-h'",
	                                 v, sizeof v),
	                    "0");
	free(r);
}

/* ---- real containers ---- */

static void runc_cleanup(struct fx *f)
{
	if (!f->holder[0])
		return;
	char cmd[1024];
	for (int i = 1; i <= 3; i++) {
		snprintf(cmd, sizeof cmd, "runc --root %s delete -f c%d >/dev/null 2>&1",
		         f->runc_root, i);
		(void)!system(cmd);
	}
	if (f->c1 > 0) {
		kill(f->c1, SIGKILL);
		waitpid(f->c1, NULL, 0);
		f->c1 = 0;
	}
	if (f->collector > 0) {
		kill(f->collector, SIGTERM);
		waitpid(f->collector, NULL, 0);
		f->collector = 0;
	}
	runc_remove_cgroups(f->holder); /* the cgroups runc made, in every hierarchy */
	f->holder[0] = '\0';
}

/*
 * A bundle for container name: busybox, sandbox sb of account acct, 1 vCPU
 * and 256 MiB, running script, with meter-hook oci as its createRuntime and
 * poststop hooks.
 */
static void make_bundle(struct fx *f, const char *name, const char *acct, const char *sb,
                        const char *script)
{
	char cg[160];
	snprintf(cg, sizeof cg, "/%s/%s/%s", f->holder, acct, sb);
	char env_url[128], env_key[200], env_match[160];
	snprintf(env_url, sizeof env_url, "METER_API_URL=%s", f->url);
	snprintf(env_key, sizeof env_key, "METER_API_KEY_FILE=%s", f->keyfile);
	snprintf(env_match, sizeof env_match, "METER_MATCH=%s/(?<account>[^/]+)/(?<sandbox>[^/]+)",
	         f->holder);
	cJSON *hooks = cJSON_CreateObject();
	const char *phases[] = {"createRuntime", "poststop"};
	for (int i = 0; i < 2; i++) {
		cJSON *h = cJSON_CreateObject();
		cJSON_AddStringToObject(h, "path", METER_HOOK_BIN);
		cJSON *ha = cJSON_AddArrayToObject(h, "args");
		cJSON_AddItemToArray(ha, cJSON_CreateString("meter-hook"));
		cJSON_AddItemToArray(ha, cJSON_CreateString("oci"));
		cJSON *he = cJSON_AddArrayToObject(h, "env");
		cJSON_AddItemToArray(he, cJSON_CreateString(env_url));
		cJSON_AddItemToArray(he, cJSON_CreateString(env_key));
		cJSON_AddItemToArray(he, cJSON_CreateString(env_match));
		/* a loaded CI host may take seconds to answer; these containers test
		 * admission and metering, meter_away_fails_closed… tests the timeout */
		cJSON_AddItemToArray(he, cJSON_CreateString("METER_HOOK_TIMEOUT=20s"));
		cJSON_AddNumberToObject(h, "timeout", 30);
		cJSON *list = cJSON_AddArrayToObject(hooks, phases[i]);
		cJSON_AddItemToArray(list, h);
	}
	runc_bundle(f->dir, name, cg, script, hooks, false);
}

static void read_log(struct fx *f, const char *name, char *out, size_t len)
{
	runc_read_log(f->dir, name, out, len);
}

/* The figure after "key " in the v2 cgroup rel's file (cgroup.events, cpu.stat); -1: none. */
static int64_t v2_key(const char *rel, const char *file, const char *key)
{
	char p[300], line[128];
	size_t klen = strlen(key);
	int64_t v = -1;
	snprintf(p, sizeof p, "/sys/fs/cgroup/unified/%s/%s", rel, file);
	FILE *in = fopen(p, "r");
	if (in == NULL) {
		snprintf(p, sizeof p, "/sys/fs/cgroup/%s/%s", rel, file);
		in = fopen(p, "r");
	}
	while (in && fgets(line, sizeof line, in))
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			v = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	if (in)
		fclose(in);
	return v;
}

static int64_t v2_cpu(const char *rel)
{
	return v2_key(rel, "cpu.stat", "usage_usec");
}

/* CPU µs the kernel counted for cgroup rel, from the file the collector reads:
 * cpu.stat (v2, also on a hybrid host's unified hierarchy), else cpuacct.usage (v1).
 * The two differ on a hybrid host by what ran before the task joined both. */
static int64_t kernel_cpu(const char *rel)
{
	int64_t v = v2_cpu(rel);
	if (v >= 0)
		return v;
	char p[300];
	snprintf(p, sizeof p, "/sys/fs/cgroup/cpuacct/%s/cpuacct.usage", rel);
	FILE *in = fopen(p, "r");
	if (in) {
		if (fscanf(in, "%" SCNd64, &v) == 1)
			v /= 1000;
		fclose(in);
	}
	return v;
}

/* The real collector on this host's cgroups, pattern over their paths, --enforce mode. */
static void start_collector(struct fx *f, const char *pattern, const char *mode)
{
	pid_t col = fork();
	if (col == 0) {
		char clog[160], spool[160];
		snprintf(clog, sizeof clog, "%s/collector.log", f->dir);
		snprintf(spool, sizeof spool, "%s/spool", f->dir);
		int fd = open(clog, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 1);
		dup2(fd, 2);
		setenv("DATABASE_URL", f->db.url, 1);
		execl(METER_COLLECTOR_BIN, METER_COLLECTOR_BIN, "--root", "/sys/fs/cgroup",
		      "--match", pattern, "--interval", "250ms", "--rescan", "1s", "--host-id",
		      "hook-test", "--spool", spool, "--enforce", mode, (char *)NULL);
		_exit(127);
	}
	f->collector = col;
}

static void stop_collector(struct fx *f)
{
	if (f->collector > 0) {
		kill(f->collector, SIGTERM);
		waitpid(f->collector, NULL, 0);
	}
	f->collector = 0;
}

static void runc_containers_are_admitted_metered_refused_and_released(void **state)
{
	struct fx *f = *state;
	if (!runc_have())
		fail_msg("this test needs Debian's runc and busybox-static (scripts/deps.sh "
		         "installs "
		         "them)");
	snprintf(f->holder, sizeof f->holder, "meter-hook-%d", (int)getpid());
	snprintf(f->runc_root, sizeof f->runc_root, "%s/runc", f->dir);
	char v[64], log[8192], rel[160], pattern[160];
	/* the collector on this host's real cgroups, under the same pattern */
	snprintf(pattern, sizeof pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)", f->holder);
	start_collector(f, pattern, "off");
	/* paidco holds one place (max_concurrent 1); c1 spins, then sleeps until the test
	 * kills it (long: on a loaded machine the checks below may take a minute, and its
	 * cgroup must outlast them) */
	make_bundle(
	        f, "c1", "paidco", "sbx-oci-1",
	        "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exec /bin/busybox sleep 600");
	f->c1 = runc_start(f->runc_root, f->dir, "c1");
	snprintf(rel, sizeof rel, "%s/paidco/sbx-oci-1", f->holder);
	/* admitted by the hook: registered with the bundle's size */
	bool up = false;
	for (int i = 0; i < 200 && !up; i++) {
		testdb_value(
		        &f->db,
		        "SELECT vcpus || ' ' || memory_gib FROM sandboxes WHERE id = 'sbx-oci-1' "
		        "AND stopped_at IS NULL",
		        v, sizeof v);
		up = strcmp(v, "1.000 0.250") == 0;
		if (!up)
			sleep_ms(50);
	}
	if (!up) {
		read_log(f, "c1", log, sizeof log);
		fail_msg("c1 was not admitted: %s", log);
	}
	/* the second is refused by the hook, with meter's reason in runc's error */
	make_bundle(f, "c2", "paidco", "sbx-oci-2", "exit 0");
	assert_int_not_equal(runc_wait(runc_start(f->runc_root, f->dir, "c2")), 0);
	read_log(f, "c2", log, sizeof log);
	if (strstr(log, "concurrency_limit") == NULL)
		fail_msg("c2's runc error does not carry meter's reason: %s", log);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "runc --root %s state c2 >/dev/null 2>&1", f->runc_root);
	assert_int_not_equal(system(cmd), 0); /* no such container: it never started */
	/* c1 metered: once it sleeps, its samples and its rated CPU equal the kernel's count */
	int64_t kernel = -1, sampled = -2, rated = -3;
	for (int i = 0; i < 600 && !(kernel > 0 && kernel == sampled && sampled == rated); i++) {
		sleep_ms(100);
		int64_t k1 = kernel_cpu(rel);
		testdb_value(
		        &f->db,
		        "SELECT coalesce(max(cpu_usage_us), -1) FROM samples WHERE sandbox_id = "
		        "'sbx-oci-1'",
		        v, sizeof v);
		sampled = strtoll(v, NULL, 10);
		testdb_value(&f->db,
		             "SELECT coalesce(sum(cpu_measured_us), -1) FROM usage_hourly WHERE "
		             "sandbox_id = 'sbx-oci-1'",
		             v, sizeof v);
		rated = strtoll(v, NULL, 10);
		kernel = kernel_cpu(rel) == k1 ? k1 : -1; /* settled: it sleeps */
		int st;
		if (waitpid(f->c1, &st, WNOHANG) == f->c1) { /* it must sleep on, not end */
			f->c1 = 0;
			read_log(f, "c1", log, sizeof log);
			char clog[4096];
			read_log(f, "collector", clog, sizeof clog);
			fail_msg("c1's runc ended (%s %d) after %" PRId64 " µs of CPU sampled; "
			         "its log: %s\nthe collector's: %s",
			         WIFEXITED(st) ? "status" : "signal",
			         WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), sampled, log,
			         clog);
		}
	}
	if (!(kernel > 100000 && kernel == sampled && sampled == rated)) {
		read_log(f, "collector", log, sizeof log);
		fail_msg("c1: kernel %" PRId64 " µs, sampled %" PRId64 ", rated %" PRId64
		         "; the collector's log: %s",
		         kernel, sampled, rated, log);
	}
	printf("c1: the kernel counted %" PRId64 " µs of CPU; sampled and rated the same\n",
	       kernel);
	/* c1 ends: poststop releases its place, and a third container starts */
	runc_sh("runc --root %s kill c1 KILL", f->runc_root);
	runc_wait(f->c1);
	f->c1 = 0;
	for (int i = 0; i < 100; i++) {
		testdb_value(
		        &f->db,
		        "SELECT count(*) FROM sandboxes WHERE id = 'sbx-oci-1' AND stopped_at IS "
		        "NOT NULL",
		        v, sizeof v);
		if (strcmp(v, "1") == 0)
			break;
		sleep_ms(50);
	}
	assert_string_equal(v, "1");
	make_bundle(f, "c3", "paidco", "sbx-oci-3", "exit 0");
	int rc = runc_wait(runc_start(f->runc_root, f->dir, "c3"));
	read_log(f, "c3", log, sizeof log);
	if (rc != 0)
		fail_msg("c3 did not run: %s", log);
	assert_string_equal(
	        testdb_value(&f->db,
	                     "SELECT count(*) FROM sandboxes WHERE id = 'sbx-oci-3' AND "
	                     "stopped_at IS NOT NULL",
	                     v, sizeof v),
	        "1");
}

static int v2_frozen(const char *rel)
{
	return (int)v2_key(rel, "cgroup.events", "frozen");
}

/* Waits up to ms for the sandbox to be frozen (want 1) or running (0). */
static bool wait_frozen(const char *rel, int want, int ms)
{
	for (int i = 0; i < ms / 50; i++) {
		if (v2_frozen(rel) == want)
			return true;
		sleep_ms(50);
	}
	return false;
}

static bool log_has(struct fx *f, const char *text)
{
	char p[160], line[1024];
	snprintf(p, sizeof p, "%s/collector.log", f->dir);
	FILE *in = fopen(p, "r");
	bool found = false;
	while (in && !found && fgets(line, sizeof line, in))
		found = strstr(line, text) != NULL;
	if (in)
		fclose(in);
	return found;
}

/*
 * A trial account with a grant of 1 s and a sandbox that spins: once the
 * rollup finds the grant spent, the collector (--enforce freeze) freezes the
 * sandbox's cgroup; made paid while the collector is down, the collector
 * thaws it when back; a trial again and a collector with --enforce kill,
 * its process is killed.
 */
static void an_account_past_its_trial_is_frozen_thawed_and_killed(void **state)
{
	struct fx *f = *state;
	if (access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) != 0 &&
	    access("/sys/fs/cgroup/cgroup.controllers", F_OK) != 0)
		fail_msg("this test needs a cgroup2 hierarchy (unified or hybrid host)");
	const char *v2 = access("/sys/fs/cgroup/unified/cgroup.controllers", F_OK) == 0
	                         ? "/sys/fs/cgroup/unified"
	                         : "/sys/fs/cgroup";
	snprintf(f->holder, sizeof f->holder, "meter-enf-%d", (int)getpid());
	snprintf(f->runc_root, sizeof f->runc_root, "%s/runc", f->dir);
	char rel[160], path[300], pattern[160], v[64];
	snprintf(rel, sizeof rel, "%s/tiny/sb-busy", f->holder);
	snprintf(path, sizeof path, "%s/%s", v2, f->holder);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/%s/tiny", v2, f->holder);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/%s", v2, rel);
	assert_int_equal(mkdir(path, 0755), 0);
	assert_true(testdb_exec(&f->db,
	                        "INSERT INTO accounts (id, name, plan, "
	                        "trial_grant_seconds) VALUES ('tiny', 'Tiny', 'trial', 1)"));
	struct http_res h;
	const char *reg = "{\"id\": \"sb-busy\", \"account_id\": \"tiny\", \"vcpus\": 1, "
	                  "\"memory_gib\": 1}";
	/* A 503 says "try again shortly", and a client does: this test is about what
	 * follows, on a machine the parallel sanitizer suite loads (meter-api's first
	 * upkeep runs as it starts). Each 503 is printed. */
	for (int i = 0;; i++) {
		http_do(f->api.port, "POST", "/v1/sandboxes", f->admin, reg, strlen(reg), &h);
		if (h.status != 503 || i == 5)
			break;
		printf("registration answered 503, tried again: %s\n", h.body ? h.body : "");
		http_free(&h);
		sleep_ms(500);
	}
	assert_int_equal(h.status, 201);
	http_free(&h);
	/* a process that spins in the sandbox's cgroup */
	f->c1 = fork();
	if (f->c1 == 0) {
		char procs[320], me[32];
		snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
		snprintf(me, sizeof me, "%d\n", (int)getpid());
		int fd = open(procs, O_WRONLY);
		if (fd < 0 || write(fd, me, strlen(me)) < 0)
			_exit(3);
		close(fd);
		for (volatile uint64_t x = 0;; x++)
			;
	}
	snprintf(pattern, sizeof pattern, "%s/(?<account>[^/]+)/(?<sandbox>[^/]+)", f->holder);
	start_collector(f, pattern, "freeze");
	/* the grant is spent once the rollup has rated a second of it */
	bool spent = false;
	for (int i = 0; i < 300 && !spent; i++) {
		testdb_value(&f->db,
		             "SELECT trial_exhausted FROM account_limits WHERE account_id = "
		             "'tiny'",
		             v, sizeof v);
		spent = strcmp(v, "t") == 0;
		if (!spent)
			sleep_ms(50);
	}
	assert_true(spent);
	int64_t t0 = now_ms();
	if (!wait_frozen(rel, 1, 3000))
		fail_msg("sandbox not frozen 3 s after its account's trial was spent");
	printf("frozen %lld ms after account_limits said the trial was spent\n",
	       (long long)(now_ms() - t0));
	assert_true(log_has(f, "froze sandbox sb-busy of account tiny (trial_exhausted)"));
	int64_t c0 = v2_cpu(rel);
	sleep_ms(500);
	assert_int_equal(v2_cpu(rel), c0); /* no CPU while frozen */
	/* made paid while the collector is down: the limit lifts, and the collector, back,
	 * thaws what it froze before (it kept the list beside its spool) */
	stop_collector(f);
	http_do(f->api.port, "PATCH", "/v1/accounts/tiny", f->admin, "{\"plan\": \"paid\"}", 16,
	        &h);
	assert_int_equal(h.status, 200);
	http_free(&h);
	assert_int_equal(v2_frozen(rel), 1);
	start_collector(f, pattern, "freeze");
	if (!wait_frozen(rel, 0, 3000))
		fail_msg("sandbox not thawed 3 s after its account was made paid");
	sleep_ms(300);
	assert_true(v2_cpu(rel) > c0);
	assert_true(log_has(f, "thawed sandbox sb-busy of account tiny"));
	/* a trial again, and a collector that kills */
	stop_collector(f);
	http_do(f->api.port, "PATCH", "/v1/accounts/tiny", f->admin, "{\"plan\": \"trial\"}", 17,
	        &h);
	assert_int_equal(h.status, 200);
	http_free(&h);
	start_collector(f, pattern, "kill");
	int st = 0;
	pid_t got = 0;
	for (int i = 0; i < 100 && got == 0; i++) {
		got = waitpid(f->c1, &st, WNOHANG);
		if (got == 0)
			sleep_ms(50);
	}
	assert_int_equal(got, f->c1);
	f->c1 = 0;
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	assert_true(log_has(f, "killed sandbox sb-busy of account tiny (trial_exhausted)"));
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(admitted_refused_and_released, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                a_registration_committing_during_the_admission_is_counted, setup, teardown),
	        cmocka_unit_test_setup_teardown(misconfigurations_exit_2_with_a_clear_line, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(meter_away_fails_closed_or_open_within_the_timeout,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                runc_containers_are_admitted_metered_refused_and_released, setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                an_account_past_its_trial_is_frozen_thawed_and_killed, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
