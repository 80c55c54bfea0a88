/*
 * tests/support/http.h: a small HTTP/1.1 client for the API tests, and a
 * meter-api process started for a test.
 */
#ifndef TESTS_SUPPORT_HTTP_H
#define TESTS_SUPPORT_HTTP_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct http_res {
	int status;         /* 0 when the request could not be made */
	char type[128];     /* Content-Type */
	char *body;         /* malloc'd, NUL-terminated */
	char location[256]; /* Location */
	char cookie[256];   /* Set-Cookie */
	size_t len;
	bool cut; /* a chunked body that stopped before its last chunk */
};

/*
 * Sends one request to 127.0.0.1:port and reads the whole answer. key is the
 * bearer key or NULL; body may be NULL. Free with http_free. An answer that
 * does not come within http_wait_s seconds (20 unless a test sets it) leaves
 * status 0.
 */
extern int http_wait_s;
void http_do(int port, const char *method, const char *path, const char *key, const char *body,
             size_t body_len, struct http_res *res);
/* The same with one more header line ("Cookie: a=b"), and the Set-Cookie and Location answered. */
void http_do_ex(int port, const char *method, const char *path, const char *key, const char *body,
                size_t body_len, const char *header, struct http_res *res);
void http_free(struct http_res *res);

/* The body as JSON (NULL when it is not); caller frees. */
cJSON *http_json(const struct http_res *res);

/*
 * A meter-api for a test: started on a free port, stopped by api_stop (or
 * killed by the test). Its log, /tmp/meter-api-PID-PORT.log (PID the test
 * program's), is removed at the program's exit when it passed, and kept and
 * named on stderr when it failed (or METER_TEST_KEEP_LOGS is set).
 */
struct api_proc {
	pid_t pid;
	int port;
	char log[128];
};

/* Starts meter-api (binary path) on DATABASE_URL url; waits until /healthz answers. */
bool api_start(struct api_proc *a, const char *bin, const char *url, const char *extra_arg);
/* The same with the options in extra (NULL-terminated, at most 8). */
bool api_start_args(struct api_proc *a, const char *bin, const char *url, const char *const *extra);
/* SIGTERM and wait; returns its exit status. */
int api_stop(struct api_proc *a);

#endif
