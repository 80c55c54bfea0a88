/*
 * meter-collector: samples every sandbox's cgroup counters into PostgreSQL.
 *
 * One thread, one poll() loop over three descriptors: a timerfd on
 * CLOCK_MONOTONIC for the rounds, inotify for new and emptied cgroups, and a
 * signalfd for SIGTERM and SIGINT (one last round, flush or spool, exit 0).
 * Exit status 2 for a configuration that cannot work, with one line saying
 * why.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "collector/collector.h"
#include "common/clock.h"
#include "collector/enforce.h"
#include "common/log.h"
#include "common/opts.h"

#define NOPTS(t) (sizeof(t) / sizeof((t)[0]))

enum {
	O_ROOT,
	O_MATCH,
	O_INTERVAL,
	O_SPOOL,
	O_SPOOL_MAX,
	O_SPOOL_KEY,
	O_HOST,
	O_LAYOUT,
	O_RESCAN,
	O_ROLE,
	O_ENFORCE,
	O_ONCE,
	O_TWICE,
	O_LOG,
	O_HELP,
	O_N
};

static const struct opt_def opts[O_N] = {
        [O_ROOT] = {"root", OPT_STRING, 0, 0, 0, "/sys/fs/cgroup", "METER_CGROUP_ROOT", false,
                    "where the cgroup hierarchies are mounted"},
        [O_MATCH] = {"match", OPT_STRING, 0, 0, 0, "sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)",
                     "METER_MATCH", false,
                     "PCRE2 pattern over a cgroup's path below the root; named groups "
                     "\"sandbox\" (required) and \"account\""},
        [O_INTERVAL] = {"interval", OPT_DURATION, 0, 100000, INT64_C(3600000000), "10s",
                        "METER_INTERVAL", false, "time between sampling rounds"},
        [O_SPOOL] = {"spool", OPT_STRING, 0, 0, 0, "/var/lib/meter/collector.spool", "METER_SPOOL",
                     false, "file that keeps batches while the database is away"},
        [O_SPOOL_MAX] = {"spool-max-mib", OPT_DECIMAL, 3, 1, 1048576000, "256",
                         "METER_SPOOL_MAX_MIB", false,
                         "bound of the spool file, in MiB (to a thousandth)"},
        [O_SPOOL_KEY] = {"spool-key", OPT_STRING, 0, 0, 0, NULL, "METER_SPOOL_KEY_FILE", false,
                         "file holding this host's key (32 to 1024 bytes, mode 600): spool "
                         "records are signed with it (HMAC-SHA256) and only those that verify "
                         "are sent (default: unsigned, CRC-checked records)"},
        [O_HOST] = {"host-id", OPT_STRING, 0, 0, 0, NULL, "METER_HOST_ID", false,
                    "host id written with every sample (default: the host name)"},
        [O_LAYOUT] = {"layout", OPT_STRING, 0, 0, 0, "auto", "METER_CGROUP_LAYOUT", false,
                      "auto (from /proc/self/mountinfo), or v2, v1, hybrid for a tree that is "
                      "not mounted"},
        [O_RESCAN] = {"rescan", OPT_DURATION, 0, 1000000, INT64_C(86400000000), "60s",
                      "METER_RESCAN", false, "time between full rescans (the safety net)"},
        [O_ROLE] = {"db-role", OPT_STRING, 0, 0, 0, "meter_collector", "METER_DB_ROLE", false,
                    "role samples are written as (\"\" for the login role itself)"},
        [O_ENFORCE] = {"enforce", OPT_STRING, 0, 0, 0, "off", "METER_ENFORCE", false,
                       "off, freeze or kill: the sandboxes on this host of an account over its "
                       "trial or spend cap (freeze thaws them when the limit lifts)"},
        [O_ONCE] = {"once", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "one round, then exit"},
        [O_TWICE] = {"send-twice", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                     "fault injection for tests: write every batch twice"},
        [O_LOG] = {"log-level", OPT_STRING, 0, 0, 0, "info", "METER_LOG_LEVEL", false,
                   "error, warn, info or debug"},
        [O_HELP] = {"help", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "this text"},
};

static const char usage[] =
        "usage: meter-collector [--root DIR] [--match REGEX] [--interval DURATION] "
        "[--spool PATH] [options]\n"
        "samples sandbox cgroups into PostgreSQL (DATABASE_URL)";

/* A thousand sandboxes keep about eight thousand files open. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			log_warn("could not raise the open file limit: %s", strerror(errno));
	}
}

static void summary(const struct collector *c)
{
	const struct collector_stats *s = &c->stats;
	char waiting[96] = "";
	if (s->unsampled)
		snprintf(waiting, sizeof waiting,
		         " (and %zu at the last scan not sampled: the open file limit)",
		         s->unsampled);
	log_info("stopping: %llu rounds, %llu samples (%llu written, %llu already there, %llu "
	         "final, %llu ends: %llu read, %llu from the parent, %llu estimated, %llu the "
	         "last reading), %llu batches spooled, %llu thinned, %llu refused, %zu "
	         "sandboxes%s",
	         (unsigned long long)s->rounds, (unsigned long long)s->samples,
	         (unsigned long long)s->written, (unsigned long long)s->duplicates,
	         (unsigned long long)s->final_samples, (unsigned long long)s->ends,
	         (unsigned long long)s->ends_by[END_READ],
	         (unsigned long long)s->ends_by[END_PARENT],
	         (unsigned long long)s->ends_by[END_ESTIMATED],
	         (unsigned long long)s->ends_by[END_LAST], (unsigned long long)s->spooled_batches,
	         (unsigned long long)s->thinned_batches, (unsigned long long)s->refused_batches,
	         c->nsandboxes, waiting);
}

/*
 * libpq needs libldap (service lookups), which needs GnuTLS, whose constructor
 * sets GnuTLS up in every process that loads it: its random generator, its
 * priority file, p11-kit's modules. The collector never uses it (libldap calls
 * gnutls_global_init() itself before any LDAP over TLS), and it was 0.7 MiB of
 * the collector's 8 MiB of peak RSS on 1,000 sandboxes (bench/collector_real.sh).
 * GnuTLS skips it when GNUTLS_NO_IMPLICIT_INIT is set as it loads, so the
 * collector sets it and starts itself again, once, before anything else; when
 * that cannot be done it goes on as it is.
 */
static void without_gnutls_setup(char **argv)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (getenv("GNUTLS_NO_IMPLICIT_INIT") != NULL || n <= 0 || (size_t)n >= sizeof self - 1)
		return;
	self[n] = '\0';
	/* by its own path, so that ps and pgrep show meter-collector, not "exe" */
	if (setenv("GNUTLS_NO_IMPLICIT_INIT", "1", 1) == 0)
		execv(self, argv);
}

int main(int argc, char **argv)
{
	without_gnutls_setup(argv);
	struct opt_val v[O_N];
	char err[1024], host[256];
	struct collector c;

	/* Blocked first: a SIGTERM while starting up (a slow start on a busy host, a
	 * stop right after a start) waits for the signalfd below and ends the
	 * collector cleanly after one round, instead of killing it half set up. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	int rc = opts_daemon("meter-collector", usage, opts, O_N, O_LOG, argc, argv, v);
	if (rc)
		return rc;
	if (v[O_HOST].set) {
		snprintf(host, sizeof host, "%s", v[O_HOST].str);
	} else if (gethostname(host, sizeof host) != 0) {
		log_error("could not read the host name: %s; give --host-id", strerror(errno));
		return 2;
	}
	enum enforce_mode enforce;
	if (!enforce_mode_parse(v[O_ENFORCE].str, &enforce)) {
		log_error("--enforce: \"%s\" is not one of off, freeze, kill", v[O_ENFORCE].str);
		return 2;
	}
	if (enforce != ENFORCE_OFF && !v[O_SPOOL].str[0])
		log_warn("--enforce without a spool: what is frozen is remembered in memory only, "
		         "so a restart would not thaw it");
	char frozen_file[CG_PATH_MAX + 16] = "";
	if (v[O_SPOOL].str[0])
		snprintf(frozen_file, sizeof frozen_file, "%s.frozen", v[O_SPOOL].str);
	/* Read before anything else can fail: a key that cannot be used stops the start. */
	struct spool_key key;
	bool keyed = v[O_SPOOL_KEY].set && v[O_SPOOL_KEY].str[0];
	if (keyed && !spool_key_load(v[O_SPOOL_KEY].str, &key, err, sizeof err)) {
		log_error("--spool-key: %s", err);
		return 2;
	}
	if (keyed)
		log_info("spool \"%s\": records signed with the key in \"%s\"", v[O_SPOOL].str,
		         v[O_SPOOL_KEY].str);
	/* A database that does not answer must not stall sampling for long. */
	setenv("PGCONNECT_TIMEOUT", "5", 0);
	raise_nofile();

	struct collector_config cfg = {
	        .root = v[O_ROOT].str,
	        .layout = v[O_LAYOUT].str,
	        .match = v[O_MATCH].str,
	        .host = host,
	        .spool_path = v[O_SPOOL].str,
	        .spool_max = v[O_SPOOL_MAX].num * 1024 * 1024 / 1000,
	        .spool_key = keyed ? &key : NULL,
	        .send_twice = v[O_TWICE].set,
	        .db_url = NULL,
	        .db_role = v[O_ROLE].str,
	};
	bool started = collector_init(&c, &cfg, err, sizeof err);
	if (keyed)
		spool_key_clear(&key); /* the spool keeps its own copy */
	if (!started) {
		log_error("%s", err);
		return 2;
	}

	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (sfd < 0 || tfd < 0) {
		log_error("could not set up signals or timer: %s", strerror(errno));
		collector_free(&c);
		return 1;
	}

	collector_scan(&c); /* which samples every sandbox it finds: the first round */
	bool ok = collector_flush(&c);
	if (v[O_ONCE].set) {
		summary(&c);
		collector_free(&c);
		return ok ? 0 : 1;
	}

	int64_t interval = v[O_INTERVAL].num, rescan = v[O_RESCAN].num;
	struct itimerspec its = {
	        .it_interval = {(time_t)(interval / 1000000), (long)(interval % 1000000) * 1000},
	        .it_value = {(time_t)(interval / 1000000), (long)(interval % 1000000) * 1000},
	};
	timerfd_settime(tfd, 0, &its, NULL);
	int64_t next_rescan = clock_us(CLOCK_MONOTONIC) + rescan;

	for (;;) {
		struct pollfd p[3] = {
		        {sfd, POLLIN, 0}, {c.inotify_fd, POLLIN, 0}, {tfd, POLLIN, 0}};
		int ready = poll(p, 3, c.flush_wanted ? COLLECTOR_QUIET_MS : -1);
		if (ready < 0) {
			if (errno == EINTR)
				continue;
			log_error("poll failed: %s", strerror(errno));
			break;
		}
		if (ready == 0) { /* quiet since ends were taken: write them */
			collector_flush(&c);
			continue;
		}
		if (p[0].revents) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) == sizeof si)
				log_info("signal %u: taking one last round", si.ssi_signo);
			collector_round(&c);
			ok = collector_flush(&c);
			break;
		}
		if (p[1].revents)
			collector_events(&c);
		if (p[2].revents) {
			uint64_t expirations;
			if (read(tfd, &expirations, sizeof expirations) > 0 && expirations > 1)
				log_warn("%llu rounds late: sampling took longer than --interval",
				         (unsigned long long)(expirations - 1));
			if (clock_us(CLOCK_MONOTONIC) >= next_rescan || c.rescan_wanted) {
				collector_scan(&c);
				next_rescan = clock_us(CLOCK_MONOTONIC) + rescan;
			}
			collector_round(&c);
			collector_flush(&c);
			enforce_pass(&c, enforce, frozen_file);
		}
	}
	summary(&c);
	collector_free(&c);
	close(sfd);
	close(tfd);
	return ok ? 0 : 1;
}
