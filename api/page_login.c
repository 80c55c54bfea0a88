/*
 * The login pages: a form for an API key (POST /login, never a URL), a
 * one-time link (meter login-link) whose page posts it back, and the logout.
 * A login opens a session: the cookie meter_session (HttpOnly,
 * SameSite=Strict, Secure over HTTPS; common/sessions.h). The forms refuse a
 * browser's post from another origin.
 */
#include <stdio.h>
#include <string.h>

#include "api/account.h"
#include "api/auth.h"
#include "api/page.h"
#include "api/queries.h"
#include "api/reply.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/keys.h"
#include "common/sessions.h"

void h_login_page(struct req *r)
{
	struct page p = {0};
	page_head(&p, "Log in");
	page_put(&p, "<section style=\"max-width:420px;margin:60px auto\"><h1>meter</h1>"
	             "<p class=\"muted\">Log in with an API key. It is sent once, in this form, "
	             "and never kept in the page or the address.</p>");
	for (size_t i = 0; i < r->nargs; i++)
		if (strcmp(r->args[i].name, "failed") == 0)
			page_put(&p, "<p style=\"color:#b42318\">That key is not valid.</p>");
	page_put(&p,
	         "<form method=\"post\" action=\"/login\"><label>API key<input type=\"password\" "
	         "name=\"key\" autocomplete=\"off\" required></label><button type=\"submit\">Log in"
	         "</button></form></section>");
	page_finish(r, &p, 200);
}

/* The session cookie (token "" and max_age 0: its removal); Secure over HTTPS. */
static void session_cookie(const struct req *r, const char *token, int max_age, char *out,
                           size_t len)
{
	snprintf(out, len, "meter_session=%s; Path=/; HttpOnly; SameSite=Strict; Max-Age=%d%s",
	         token, max_age, server_secure_cookies(r->srv) ? "; Secure" : "");
}

/*
 * True when a form post comes from meter's own pages: a browser names the
 * page's origin in Origin, which must be this server (http or https and the
 * Host asked for). A post with no Origin (not a browser: curl, a script) is
 * let through; "null" (a sandboxed or opaque page) is not. Answers 403 when
 * false.
 */
static bool same_origin(struct req *r)
{
	const char *o = r->origin;
	if (o[0] == '\0')
		return true;
	const char *rest = strncmp(o, "http://", 7) == 0    ? o + 7
	                   : strncmp(o, "https://", 8) == 0 ? o + 8
	                                                    : NULL;
	if (rest && r->host[0] && strcmp(rest, r->host) == 0)
		return true;
	reply_problemf(r, 403, "cross-origin", "Cross-origin form",
	               "this form may be sent from meter's own pages only");
	return false;
}

static void start_session(struct req *r, PGconn *c, bool admin, const char *account, int64_t key_id)
{
	char token[TOKEN_LEN + 1], err[256], cookie[256];
	if (!session_create(c, "session", admin ? NULL : account, key_id, token, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	session_cookie(r, token, session_ttl(key_id), cookie, sizeof cookie);
	reply_redirect(r, "/dashboard", cookie);
}

void h_login(struct req *r)
{
	char key[128];
	if (!same_origin(r))
		return;
	if (!in_form_value(r->body, r->body_len, "key", key, sizeof key) ||
	    strlen(key) != KEY_LEN || strncmp(key, KEY_PREFIX, 3) != 0) {
		reply_redirect(r, "/login?failed=1", NULL);
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	const char *params[] = {key};
	PGresult *res = q_exec(c, Q_AUTH, 1, params);
	int64_t key_id = 0;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		reply_db_error(r, "could not check the API key", res);
	else if (PQntuples(res) != 1 || !col_int(res, 0, 2, &key_id) ||
	         strcmp(PQgetvalue(res, 0, 0), "hook") == 0) /* a hook key opens no pages */
		reply_redirect(r, "/login?failed=1", NULL);
	else {
		req_key_note_use(c, res);
		start_session(r, c, strcmp(PQgetvalue(res, 0, 0), "admin") == 0,
		              PQgetvalue(res, 0, 1), key_id);
	}
	PQclear(res);
}

/*
 * GET /login/{token}: a page with one button that posts the link back. Mail
 * and chat scanners open links to preview them (GET, HEAD); only the post
 * spends it, so a preview never uses a person's link up.
 */
void h_login_link_page(struct req *r)
{
	const char *t = r->param[0];
	if (strlen(t) != TOKEN_LEN || strspn(t, "0123456789abcdef") != TOKEN_LEN) {
		reply_redirect(r, "/login?failed=1", NULL); /* no link of ours */
		return;
	}
	struct page p = {0};
	page_head(&p, "Log in");
	page_put(&p, "<section style=\"max-width:420px;margin:60px auto\"><h1>meter</h1>"
	             "<p class=\"muted\">This one-time link opens the dashboard once.</p>"
	             "<form method=\"post\" action=\"/login/");
	page_esc(&p, r->param[0]);
	page_put(&p, "\"><button type=\"submit\">Open the dashboard</button></form></section>");
	page_finish(r, &p, 200);
}

/* POST /login/{token}: spends the link and opens a session. */
void h_login_link(struct req *r)
{
	char err[256], account[160];
	bool found = false, admin = false;
	if (!same_origin(r))
		return;
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	if (!link_redeem(c, r->param[0], &found, &admin, account, sizeof account, err, sizeof err))
		reply_db_error(r, err, NULL);
	else if (!found)
		reply_redirect(r, "/login?failed=1", NULL);
	else
		start_session(r, c, admin, account, 0);
}

void h_logout(struct req *r)
{
	char err[256], cookie[256];
	if (!same_origin(r))
		return;
	PGconn *c = r->session[0] ? req_db(r) : NULL;
	if (r->session[0] && c == NULL)
		return;
	if (c && !session_delete(c, r->session, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	session_cookie(r, "", 0, cookie, sizeof cookie);
	reply_redirect(r, "/login", cookie);
}
