/*
 * bench_slowloris: the quota check while several addresses hold connections
 * open with headers that never end.
 *
 *   bench_slowloris PORT KEY ACCOUNT [ADDRESSES [PER_ADDRESS [CHECKS]]]
 *
 * ADDRESSES loopback addresses (127.0.0.2 and on, default 8) each keep
 * PER_ADDRESS connections (default 250) to 127.0.0.1:PORT, sending one more
 * header byte every second and, each second, opening a new connection for
 * every one the server closed, as a slowloris (slowhttptest) does. Meanwhile CHECKS quota checks
 * (default 200, one connection each, as meter-hook makes them, five a second) come from 127.0.0.1.
 * Prints their p50, p90, p99 and max in ms, how many were answered 200 and how many not at all,
 * then a "RESULT ..." line. Figures only; bench/bench_slowloris.sh sets up the database and the
 * API.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHECK_TIMEOUT_MS 20000

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int port;

/* A non-blocking connection from 127.0.0.(2 + a) to the API. */
static int open_from(int a)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in src = {.sin_family = AF_INET};
	src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)a);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
	    (connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0 && errno != EINPROGRESS)) {
		close(fd);
		return -1;
	}
	return fd;
}

struct loris {
	int fd;
	int addr;
	bool started; /* the request line went out */
};

/* One quota check on a connection of its own; its time in µs, status in *status (0: none). */
static int64_t check(const char *key, const char *account, int *status)
{
	*status = 0;
	int64_t t0 = now_us();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {CHECK_TIMEOUT_MS / 1000, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&dst, sizeof dst) != 0) {
		close(fd);
		return now_us() - t0;
	}
	char body[160], req[512];
	int blen = snprintf(body, sizeof body,
	                    "{\"account_id\":\"%s\",\"vcpus\":1,\"memory_gib\":1}", account);
	int n = snprintf(
	        req, sizeof req,
	        "POST /v1/quota/check HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
	        "%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: "
	        "close\r\n\r\n%s",
	        key, blen, body);
	if (write(fd, req, (size_t)n) == n) {
		char buf[4096];
		ssize_t got = read(fd, buf, sizeof buf - 1);
		if (got > 12) {
			buf[got] = '\0';
			*status = atoi(buf + 9);
		}
	}
	close(fd);
	return now_us() - t0;
}

struct checker {
	const char *key, *account;
	int checks, ok, other, none;
	int64_t *t;
	atomic_bool done;
};

/* The checks, five a second after the attack has settled for 2 s. */
static void *run_checks(void *arg)
{
	struct checker *c = arg;
	usleep(2000000);
	for (int i = 0; i < c->checks; i++) {
		int status;
		c->t[i] = check(c->key, c->account, &status);
		if (status == 200)
			c->ok++;
		else if (status == 0)
			c->none++;
		else
			c->other++;
		usleep(200000);
	}
	atomic_store(&c->done, true);
	return NULL;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: bench_slowloris PORT KEY ACCOUNT [ADDRESSES [PER_ADDRESS "
		                "[CHECKS]]]\n");
		return 2;
	}
	port = atoi(argv[1]);
	const char *key = argv[2], *account = argv[3];
	int naddr = argc > 4 ? atoi(argv[4]) : 8;
	int per = argc > 5 ? atoi(argv[5]) : 250;
	int checks = argc > 6 ? atoi(argv[6]) : 200;
	if (port <= 0 || naddr < 0 || naddr > 200 || per < 0 || checks <= 0) {
		fprintf(stderr, "bench_slowloris: bad arguments\n");
		return 2;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);

	int nl = naddr * per;
	struct loris *l = calloc((size_t)(nl ? nl : 1), sizeof *l);
	struct pollfd *pf = calloc((size_t)(nl ? nl : 1), sizeof *pf);
	int64_t *t = calloc((size_t)checks, sizeof *t);
	if (l == NULL || pf == NULL || t == NULL)
		return 1;
	for (int i = 0; i < nl; i++) {
		l[i].addr = i / per;
		l[i].fd = open_from(l[i].addr);
	}
	struct checker c = {.key = key, .account = account, .checks = checks, .t = t};
	pthread_t th;
	if (pthread_create(&th, NULL, run_checks, &c) != 0)
		return 1;
	int reopened = 0;
	int64_t next_byte = now_us();
	while (!atomic_load(&c.done)) {
		/* the lorises: closed ones reopened, a byte a second from each */
		int64_t now = now_us();
		if (now >= next_byte) {
			for (int i = 0; i < nl; i++) {
				if (l[i].fd < 0) {
					l[i].fd = open_from(l[i].addr);
					l[i].started = false;
					continue;
				}
				const char *line =
				        l[i].started ? "X"
				                     : "GET /healthz HTTP/1.1\r\nHost: x\r\nX-a: ";
				ssize_t w = send(l[i].fd, line, strlen(line), MSG_NOSIGNAL);
				if (w > 0)
					l[i].started = true;
				else if (w < 0 && errno != EAGAIN && errno != ENOTCONN) {
					close(l[i].fd);
					l[i].fd = -1;
					reopened++;
				}
			}
			next_byte = now + 1000000;
		}
		/* closed by the server */
		for (int i = 0; i < nl; i++) {
			pf[i].fd = l[i].fd;
			pf[i].events = POLLIN;
			pf[i].revents = 0;
		}
		if (nl == 0) { /* no attack: wait, not spin (a core is half this machine) */
			usleep(20000);
			continue;
		}
		if (poll(pf, (nfds_t)nl, 20) <= 0)
			continue;
		for (int i = 0; i < nl; i++) {
			if (l[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			char buf[512];
			if (read(l[i].fd, buf, sizeof buf) <= 0 ||
			    (pf[i].revents & (POLLHUP | POLLERR))) {
				close(l[i].fd);
				l[i].fd = -1; /* reopened at the next second's round */
				reopened++;
			}
		}
	}
	pthread_join(th, NULL);
	int ok = c.ok, other = c.other, none = c.none;
	int open = 0;
	for (int i = 0; i < nl; i++)
		open += l[i].fd >= 0;
	qsort(t, (size_t)checks, sizeof *t, cmp64);
	double p50 = t[checks * 50 / 100] / 1000.0, p90 = t[checks * 90 / 100] / 1000.0;
	double p99 = t[(checks * 99 + 99) / 100 - 1] / 1000.0, max = t[checks - 1] / 1000.0;
	printf("quota checks under %d addresses x %d slow-header connections: %d checks\n", naddr,
	       per, checks);
	printf("  p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms  200: %d  other status: %d  "
	       "unanswered: %d\n",
	       p50, p90, p99, max, ok, other, none);
	printf("  attacker connections open at the end %d of %d, closed by the server and reopened "
	       "%d\n",
	       open, nl, reopened);
	printf("RESULT slowloris_quota_p50_ms=%.1f slowloris_quota_p99_ms=%.1f "
	       "slowloris_quota_max_ms=%.1f slowloris_not_200=%d slowloris_unanswered=%d\n",
	       p50, p99, max, other, none);
	for (int i = 0; i < nl; i++)
		if (l[i].fd >= 0)
			close(l[i].fd);
	free(l);
	free(pf);
	free(t);
	return 0;
}
