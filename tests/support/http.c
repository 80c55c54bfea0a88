#include "tests/support/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void http_do(int port, const char *method, const char *path, const char *key, const char *body,
             size_t body_len, struct http_res *res)
{
	http_do_ex(port, method, path, key, body, body_len, NULL, res);
}

/* Decodes a chunked body in place; res->cut when it did not end with its last chunk. */
static void unchunk(struct http_res *res)
{
	const char *p = res->body, *end = res->body + res->len;
	size_t out = 0;
	res->cut = true;
	for (;;) {
		char *after;
		unsigned long size = strtoul(p, &after, 16);
		const char *line_end = strstr(after, "\r\n");
		if (after == p || line_end == NULL || line_end + 2 > end)
			break;
		p = line_end + 2;
		if (size == 0) {
			res->cut = false;
			break;
		}
		if ((size_t)(end - p) < size + 2)
			break;
		memmove(res->body + out, p, size);
		out += size;
		p += size + 2;
	}
	res->len = out;
	res->body[out] = '\0';
}

/*
 * With METER_HTTP_RECORD set to a file, every exchange of the process is
 * written to it (the first one empties it) as one JSON line (method, path, status, content type,
 * and a JSON body as text), for tests/openapi/validate.mjs to check against the OpenAPI document.
 */
static void record(const char *method, const char *path, const struct http_res *res)
{
	const char *file = getenv("METER_HTTP_RECORD");
	if (file == NULL || *file == '\0' || res->status == 0)
		return;
	bool json = strstr(res->type, "json") != NULL && res->len < (4u << 20);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "method", method);
	cJSON_AddStringToObject(o, "path", path);
	cJSON_AddNumberToObject(o, "status", res->status);
	cJSON_AddStringToObject(o, "type", res->type);
	if (json && res->body)
		cJSON_AddStringToObject(o, "body", res->body);
	char *line = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (line == NULL)
		return;
	size_t n = strlen(line);
	line[n] = '\n'; /* over the NUL: one write appends the whole line */
	/* the first exchange of this process starts the file afresh */
	static atomic_bool started;
	int fd = open(file,
	              O_WRONLY | O_CREAT | O_APPEND |
	                      (atomic_exchange(&started, true) ? 0 : O_TRUNC),
	              0644);
	if (fd >= 0) {
		(void)!write(fd, line, n + 1);
		close(fd);
	}
	line[n] = '\0';
	cJSON_free(line);
}

int http_wait_s = 20;

void http_do_ex(int port, const char *method, const char *path, const char *key, const char *body,
                size_t body_len, const char *header, struct http_res *res)
{
	memset(res, 0, sizeof *res);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct timeval tv = {http_wait_s, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	char head[2048];
	int n = snprintf(head, sizeof head,
	                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s%s%s%s%s"
	                 "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
	                 method, path, port, key ? "Authorization: Bearer " : "", key ? key : "",
	                 key ? "\r\n" : "", header ? header : "", header ? "\r\n" : "",
	                 body && strncmp(body, "key=", 4) == 0 ? "application/x-www-form-urlencoded"
	                                                       : "application/json",
	                 body ? body_len : 0);
	if (write(fd, head, (size_t)n) != n) {
		close(fd);
		return;
	}
	for (size_t off = 0; body && off < body_len;) {
		ssize_t w = write(fd, body + off, body_len - off);
		if (w <= 0)
			break; /* the server may answer 413 and close early */
		off += (size_t)w;
	}
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap + 1);
	for (;;) {
		if (len == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r <= 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	char *end = strstr(buf, "\r\n\r\n");
	if (end == NULL || sscanf(buf, "HTTP/1.%*d %d", &res->status) != 1) {
		free(buf);
		res->status = 0;
		return;
	}
	*end = '\0';
	char *ct = strcasestr(buf, "\r\nContent-Type: ");
	if (ct)
		sscanf(ct + 16, "%127[^\r]", res->type);
	char *loc = strcasestr(buf, "\r\nLocation: ");
	if (loc)
		sscanf(loc + 12, "%255[^\r]", res->location);
	char *sc = strcasestr(buf, "\r\nSet-Cookie: ");
	if (sc)
		sscanf(sc + 14, "%255[^\r]", res->cookie);
	res->len = len - (size_t)(end + 4 - buf);
	res->body = malloc(res->len + 1);
	memcpy(res->body, end + 4, res->len);
	res->body[res->len] = '\0';
	if (strcasestr(buf, "\r\nTransfer-Encoding: chunked"))
		unchunk(res);
	free(buf);
	record(method, path, res);
}

void http_free(struct http_res *res)
{
	free(res->body);
	res->body = NULL;
}

cJSON *http_json(const struct http_res *res)
{
	return res->body ? cJSON_Parse(res->body) : NULL;
}

bool api_start(struct api_proc *a, const char *bin, const char *url, const char *extra_arg)
{
	const char *extra[] = {extra_arg, NULL};
	return api_start_args(a, bin, url, extra);
}

/*
 * At the test program's exit, the logs of every meter-api it started, stopped
 * or killed (a test that killed its process by hand, a test that failed
 * before api_stop): removed when the program passed (exit status 0), so a run
 * leaves nothing in /tmp; kept when it failed, each named on stderr, to read.
 * METER_TEST_KEEP_LOGS keeps (and names) them after a pass too. A program
 * killed by a signal runs no handler: its logs stay, unnamed.
 */
static void logs_at_exit(int status, void *arg)
{
	(void)arg;
	char pattern[64];
	glob_t g;
	bool keep = status != 0 || getenv("METER_TEST_KEEP_LOGS");
	snprintf(pattern, sizeof pattern, "/tmp/meter-api-%d-*.log", (int)getpid());
	if (glob(pattern, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (keep)
			fprintf(stderr, "meter-api log kept: %s\n", g.gl_pathv[i]);
		else
			unlink(g.gl_pathv[i]);
	globfree(&g);
}

bool api_start_args(struct api_proc *a, const char *bin, const char *url, const char *const *extra)
{
	static int attempt;
	static bool registered;
	if (!registered)
		registered = on_exit(logs_at_exit, NULL) == 0;
	enum { TRIES = 20 };
	for (int tries = 0; tries < TRIES; tries++) {
		a->port = 20000 + (getpid() * 7 + attempt++ * 131) % 30000;
		snprintf(a->log, sizeof a->log, "/tmp/meter-api-%d-%d.log", (int)getpid(), a->port);
		char listen[32];
		snprintf(listen, sizeof listen, "127.0.0.1:%d", a->port);
		a->pid = fork();
		if (a->pid == 0) {
			int fd = open(a->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			dup2(fd, 1);
			dup2(fd, 2);
			setenv("DATABASE_URL", url, 1);
			const char *argv[16] = {bin, "--listen", listen, "--rollup-idle", "50ms"};
			for (int i = 0; extra[i] && i < 8; i++)
				argv[5 + i] = extra[i];
			execv(bin, (char *const *)argv);
			_exit(127);
		}
		for (int i = 0; i < 100; i++) {
			struct http_res r;
			http_do(a->port, "GET", "/healthz", NULL, NULL, 0, &r);
			http_free(&r);
			if (r.status == 200)
				return true;
			int st;
			if (waitpid(a->pid, &st, WNOHANG) == a->pid)
				break; /* port in use, most likely: try another */
			struct timespec ts = {0, 50000000};
			nanosleep(&ts, NULL);
		}
		kill(a->pid, SIGKILL);
		waitpid(a->pid, NULL, 0);
		/* this attempt's log: the next one has its own; the last one's says why
		 * none answered, for logs_at_exit */
		if (tries + 1 < TRIES)
			unlink(a->log);
	}
	a->pid = 0;
	return false;
}

int api_stop(struct api_proc *a)
{
	int st = 0;
	if (a->pid <= 0)
		return -1;
	kill(a->pid, SIGTERM);
	waitpid(a->pid, &st, 0);
	a->pid = 0; /* its log stays until the program's exit: logs_at_exit */
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
