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
 * Answers status with the whole of the open file fd as its body; the answer
 * takes fd (closed once sent, or at once on failure). The kernel sends it
 * (sendfile on plain HTTP): no database and no work on the request thread
 * while a slow client reads.
 */
void reply_file(struct req *r, unsigned status, const char *content_type, int fd);

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
