/*
 * api/reply.h: a request's answer.
 *
 * A handler answers once; a second answer is dropped. Every answer carries
 * the security headers of the pages (Content-Security-Policy, nosniff, no
 * frames, same-origin referrers) and Cache-Control: no-store. Errors are RFC
 * 9457 problem details (application/problem+json) whose instance is the
 * request's path; a problem of status 500 or more is logged. On the slow lane
 * an answer is kept in the request until its connection resumes
 * (api/server.c).
 */
#ifndef API_REPLY_H
#define API_REPLY_H

#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stddef.h>
#include <sys/types.h>

#include "api/input.h"
#include "api/request.h"

void reply_json(struct req *r, unsigned status, cJSON *body); /* takes body */
/*
 * Answers status with a body read a piece at a time (chunked):
 * read(cls, buf, max) gives how many bytes it wrote, 0 at the end, -1 on an
 * error (the answer is then cut short: its status is gone already). done(cls)
 * runs once the answer is over, sent or not. The request's database
 * connections stay its own until then.
 */
typedef ssize_t (*reply_reader)(void *cls, char *buf, size_t max);
void reply_stream(struct req *r, unsigned status, const char *content_type, reply_reader read,
                  void *cls, void (*done)(void *cls));

void reply_text(struct req *r, unsigned status, const char *content_type, const char *text,
                size_t len);
void reply_problem(struct req *r, const struct problem *p);
/* 303 See Other to location, setting a cookie when set_cookie is not NULL. */
void reply_redirect(struct req *r, const char *location, const char *set_cookie);
void reply_problemf(struct req *r, unsigned status, const char *type, const char *title,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Answers 503 for a database failure of what (and counts it). */
void reply_db_error(struct req *r, const char *what, const PGresult *res);

#endif
