#include "api/reply.h"

#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/pool.h"
#include "api/server.h"
#include "common/log.h"

/*
 * Headers on every answer. The pages are plain HTML and CSS with inline SVG:
 * no script, no frame, nothing from elsewhere; forms post to meter only. No
 * referrer leaves for another site (a login link's path is a secret); within
 * meter it stays, for browsers then name the origin of a form they post (with
 * no-referrer they send "null", which the login forms refuse). No type is
 * guessed.
 */
#define PAGE_CSP                                                                                   \
	"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action "        \
	"'self'; "                                                                                 \
	"frame-ancestors 'none'; base-uri 'none'"

/* Gives the request its answer: queued now, or kept until a slow lane's request resumes. */
static void answer(struct req *r, unsigned status, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "Content-Security-Policy", PAGE_CSP);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(resp, "Referrer-Policy", "same-origin");
	if (r->in_lane) {
		r->pending = resp;
		r->pending_status = status;
	} else {
		MHD_queue_response(r->mhd_conn, status, resp);
		MHD_destroy_response(resp);
	}
	r->status = status;
	r->answered = true;
}

static void queue(struct req *r, unsigned status, const char *type, const char *body, size_t len)
{
	if (r->answered)
		return;
	struct MHD_Response *resp =
	        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (resp == NULL)
		return;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (status == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	answer(r, status, resp);
}

void reply_file(struct req *r, unsigned status, const char *content_type, int fd)
{
	struct stat st;
	struct MHD_Response *resp = NULL;
	if (!r->answered && fstat(fd, &st) == 0)
		resp = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
	if (resp == NULL) {
		close(fd);
		if (!r->answered)
			reply_problemf(r, 500, "internal", "Internal error",
			               "the answer cannot be sent");
		return;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	answer(r, status, resp);
}

void reply_text(struct req *r, unsigned status, const char *content_type, const char *text,
                size_t len)
{
	queue(r, status, content_type, text, len);
}

void reply_json(struct req *r, unsigned status, cJSON *body)
{
	char *s = body ? cJSON_PrintUnformatted(body) : NULL;
	cJSON_Delete(body);
	if (s == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "could not render the answer");
		return;
	}
	queue(r, status, "application/json", s, strlen(s));
	cJSON_free(s);
}

void reply_problem(struct req *r, const struct problem *p)
{
	cJSON *o = cJSON_CreateObject();
	char type[96];
	snprintf(type, sizeof type, "urn:meter:problem:%s", p->type);
	if (o && cJSON_AddStringToObject(o, "type", type) &&
	    cJSON_AddStringToObject(o, "title", p->title) &&
	    cJSON_AddNumberToObject(o, "status", p->status) &&
	    cJSON_AddStringToObject(o, "detail", p->detail) &&
	    cJSON_AddStringToObject(o, "instance", r->path)) {
		char *s = cJSON_PrintUnformatted(o);
		if (s) {
			queue(r, p->status, "application/problem+json", s, strlen(s));
			cJSON_free(s);
		}
	}
	cJSON_Delete(o);
	if (p->status >= 500)
		log_warn("%s %s: %u %s", r->method, r->path, p->status, p->detail);
}

void reply_redirect(struct req *r, const char *location, const char *set_cookie)
{
	if (r->answered)
		return;
	static const char body[] = "see other";
	struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof body - 1, (void *)body,
	                                                            MHD_RESPMEM_PERSISTENT);
	if (resp == NULL)
		return;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, location);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (set_cookie)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_SET_COOKIE, set_cookie);
	answer(r, 303, resp);
}

void reply_problemf(struct req *r, unsigned status, const char *type, const char *title,
                    const char *fmt, ...)
{
	struct problem p = {.status = status, .type = type, .title = title};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p.detail, sizeof p.detail, fmt, ap);
	va_end(ap);
	reply_problem(r, &p);
}

/*
 * What a client is told of a database failure: the caller's own words, up to
 * the first ": " (after which an error from common/db.c carries the server's
 * text), never SQL nor the server's message. The log has them whole.
 */
static void client_words(const char *what, char *out, size_t len)
{
	const char *cut = strstr(what, ": ");
	snprintf(out, len, "%.*s", cut ? (int)(cut - what) : (int)strlen(what), what);
}

void reply_db_error(struct req *r, const char *what, const PGresult *res)
{
	const char *msg = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	const char *code = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	char words[256];
	client_words(what, words, sizeof words);
	if (code && (strncmp(code, "22", 2) == 0 || strncmp(code, "23", 2) == 0)) {
		/* The database refused a value (data exception, constraint): the request's fault.
		 */
		log_info("%s %s: %s: %s (SQLSTATE %s)", r->method, r->path, what,
		         msg ? msg : "a value was refused", code);
		reply_problemf(r, 422, "invalid-value", "Invalid value", "%s: %s", words,
		               code[1] == '2' ? "a value is malformed or out of range"
		                              : "a value conflicts with what is stored");
		return;
	}
	if (code && strcmp(code, "57014") == 0) {
		/* statement_timeout: the route's bound (api/routes.c) */
		log_warn("%s %s: %s: a statement ran past %u ms and was cancelled", r->method,
		         r->path, what, req_timeout_ms(r));
		reply_problemf(r, 503, "timeout", "Timed out",
		               "%s: it took longer than this request may (%u ms); try again later "
		               "or ask for less",
		               words, req_timeout_ms(r));
		return;
	}
	if (code && strcmp(code, "55P03") == 0) {
		/* lock_timeout: another request holds what this one needs */
		log_warn("%s %s: %s: a lock was not granted in time", r->method, r->path, what);
		reply_problemf(r, 503, "busy", "Busy",
		               "%s: another request holds what this one needs; try again shortly",
		               words);
		return;
	}
	pool_count_error(server_pool(r->srv));
	log_warn("%s %s: %s: %s", r->method, r->path, what,
	         msg                                           ? msg
	         : r->rdb && PQstatus(r->rdb) != CONNECTION_OK ? PQerrorMessage(r->rdb)
	         : r->db                                       ? PQerrorMessage(r->db)
	                                                       : "no connection");
	reply_problemf(r, 503, "database-unavailable", "Database unavailable",
	               "%s: the database did not answer; try again shortly", words);
}
