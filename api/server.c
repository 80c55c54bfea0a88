#include "api/server.h"

#include <microhttpd.h>
#include <pthread.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api/auth.h"
#include "api/metrics.h"
#include "api/pool.h"
#include "api/replica.h"
#include "api/reply.h"
#include "api/request.h"
#include "api/routes.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/log.h"

/*
 * A connection, watched for slow senders. libmicrohttpd's timeout counts
 * only silence, so a client that sends one byte a second would hold a
 * connection for ever: a watchdog thread cuts (shutdown) any connection that
 * has not sent a whole request within request_timeout_s of its opening or of
 * its previous answer, unless bytes it sent wait unread (every thread busy:
 * the delay is the server's; it is cut later if they were not a whole
 * request). Once a request is whole, the time its answer takes
 * (the database, a slow reader) is the idle timeout's business: the
 * connection has libmicrohttpd's timeout (--idle-timeout) only while it is
 * being answered, and none while the watchdog keeps it (the daemon's timeout
 * is 0, so the connections waiting for a request stay on libmicrohttpd's
 * sorted list, which it does not walk; only those being answered are on
 * the list it walks at every pass). Without a watchdog, libmicrohttpd's
 * timeout applies throughout, as the only bound. libmicrohttpd counts
 * a connection's time from its last read or write, also while the thread
 * that serves it is busy answering another (a registration waiting on its
 * account's row): a request that came whole meanwhile was closed unanswered
 * when the thread came back, as if its client had been idle.
 *
 * The connections are also kept below --max-connections, so that a quota
 * check always finds one: past the soft limit (a sixteenth short of it), a
 * new connection makes the address that holds the most connections give one
 * up, its oldest that is not being answered (waiting for its headers, or
 * idle between requests). When the newcomer's own address is that one, the
 * newcomer is closed instead. Many addresses of a few slow connections each
 * thus cannot crowd out a hook that opens one: the per-address limit alone
 * cannot promise that, whatever its value.
 */
struct watched {
	int fd;
	int64_t since_ns;
	bool answering, cut;
	unsigned char addr[17]; /* family, then the address's bytes */
	struct watched *prev, *next;
};

/* Connections per address, counted afresh (by generation) when shedding. */
struct addr_slot {
	unsigned char addr[17];
	unsigned gen, n;
};

struct server {
	struct MHD_Daemon *daemon;
	struct pool *pool;
	struct replica *replica; /* NULL: reads go to the primary too */
	struct server_config cfg;
	pthread_mutex_t watch_mu;
	pthread_cond_t watch_cv;
	struct watched *watched; /* open connections */
	unsigned nopen;          /* of them, not cut */
	unsigned soft_limit;     /* past it, one is shed */
	struct addr_slot *slots; /* 2^slot_bits, for shedding */
	unsigned slot_bits, slot_gen;
	bool stopping, have_watchdog;
	pthread_t watchdog;
	/* the slow lane: requests of slow routes, in order, and the threads that run them */
	pthread_mutex_t lane_mu;
	pthread_cond_t lane_cv;
	struct req *lane_head, *lane_tail;
	bool lane_stopping;
	pthread_t *lane;
	unsigned nlane;
	char *tls_cert, *tls_key; /* PEM text, when serving HTTPS */
};

struct pool *server_pool(struct server *s)
{
	return s->pool;
}

struct replica *server_replica(struct server *s)
{
	return s->replica;
}

int64_t server_invoice_grace(struct server *s)
{
	return s->cfg.invoice_grace_us;
}

bool server_secure_cookies(struct server *s)
{
	return s->cfg.secure_cookies;
}

static enum MHD_Result on_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                              const char *value)
{
	(void)kind;
	struct req *r = cls;
	if (r->nargs == REQ_ARGS_MAX) {
		r->too_many_args = true;
		return MHD_NO;
	}
	r->args[r->nargs].name = key;
	r->args[r->nargs].value = value;
	r->nargs++;
	return MHD_YES;
}

/* Runs the request's handler and gives its connections back once its answer is made. */
static void run(struct req *r)
{
	r->route->handler(r);
	if (!r->answered)
		reply_problemf(r, 500, "internal", "Internal error", "the request got no answer");
	/* The answer is made (copied, or a file): give the connections back before it is sent. */
	req_release(r);
}

/*
 * The slow lane. A slow route's request is handed to one of the lane's
 * threads and its connection suspended, so the request thread goes back to
 * its other connections at once; the lane's thread runs the handler, keeps
 * the answer in the request (answer()) and resumes the connection, whose
 * request thread then queues it (on_request). The lane's threads also bound
 * how many slow requests run at once, and so the database connections they
 * hold: the others wait their turn, in order.
 */
static void *lane_run(void *arg)
{
	struct server *s = arg;
	pthread_mutex_lock(&s->lane_mu);
	for (;;) {
		while (s->lane_head == NULL && !s->lane_stopping)
			pthread_cond_wait(&s->lane_cv, &s->lane_mu);
		struct req *r = s->lane_head;
		if (r == NULL)
			break; /* stopping, and nothing waits */
		s->lane_head = r->lane_next;
		if (s->lane_head == NULL)
			s->lane_tail = NULL;
		pthread_mutex_unlock(&s->lane_mu);
		run(r);
		MHD_resume_connection(r->mhd_conn);
		pthread_mutex_lock(&s->lane_mu);
	}
	pthread_mutex_unlock(&s->lane_mu);
	return NULL;
}

/* Suspends the request's connection and queues it on the lane; false when the lane is gone. */
static bool lane_push(struct server *s, struct req *r)
{
	pthread_mutex_lock(&s->lane_mu);
	bool ok = s->nlane > 0 && !s->lane_stopping;
	if (ok) {
		/* nothing held while it waits: authentication's connection goes back to the
		 * pool (the lane takes one when the handler asks), or queued requests would
		 * starve the request threads of connections */
		req_release(r);
		/* suspended before a lane thread can see it, so its resume comes after */
		MHD_suspend_connection(r->mhd_conn);
		r->in_lane = true;
		r->lane_next = NULL;
		if (s->lane_tail)
			s->lane_tail->lane_next = r;
		else
			s->lane_head = r;
		s->lane_tail = r;
		pthread_cond_signal(&s->lane_cv);
	}
	pthread_mutex_unlock(&s->lane_mu);
	return ok;
}

static void dispatch(struct req *r)
{
	char allowed[64];
	if (!route_split(r->path, &r->parts)) {
		reply_problemf(r, 404, "not-found", "Not found", "no such resource");
		return;
	}
	int i = route_find(routes, routes_count, r->method, &r->parts, r->param, allowed,
	                   sizeof allowed);
	if (i == ROUTE_BAD_ID) {
		reply_problemf(r, 400, "invalid-id", "Invalid id", "the id in the path must be %s",
		               ID_RULE);
		return;
	}
	if (i < 0 && allowed[0]) {
		reply_problemf(r, 405, "method-not-allowed", "Method not allowed",
		               "%s is not allowed here; allowed: %s", r->method, allowed);
		return;
	}
	if (i < 0) {
		reply_problemf(r, 404, "not-found", "Not found", "no such resource: %s", r->path);
		return;
	}
	r->route = &routes[i];
	r->route_index = i;
	if (r->too_large) {
		reply_problemf(r, 413, "too-large", "Request body too large",
		               "the body may be at most %d bytes", REQ_BODY_MAX);
		return;
	}
	if (r->too_many_args) {
		reply_problemf(r, 400, "unknown-parameter", "Too many query parameters",
		               "at most %d query parameters", REQ_ARGS_MAX);
		return;
	}
	if (r->route->auth != AUTH_PUBLIC && !auth_route(r))
		return;
	if (r->route->auth == AUTH_ADMIN && !r->admin) {
		reply_problemf(r, 403, "forbidden", "Forbidden", "this request needs an admin key");
		return;
	}
	if (r->route->auth == AUTH_HOOK && !r->admin && !r->hook) {
		reply_problemf(r, 403, "forbidden", "Forbidden",
		               "this request needs an admin key or a hook key");
		return;
	}
	if (r->hook && r->route->auth != AUTH_HOOK) {
		reply_problemf(r, 403, "forbidden", "Forbidden",
		               "a hook key may only check quotas and register and stop sandboxes");
		return;
	}
	if (r->route->slow && lane_push(r->srv, r))
		return;
	run(r);
}

static void addr_key(struct MHD_Connection *mc, unsigned char key[17])
{
	memset(key, 0, 17);
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	/* copied out: libmicrohttpd's sockaddr need not be aligned for its family's */
	if (sa && sa->sa_family == AF_INET) {
		struct sockaddr_in in;
		memcpy(&in, sa, sizeof in);
		key[0] = 4;
		memcpy(key + 1, &in.sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		struct sockaddr_in6 in6;
		memcpy(&in6, sa, sizeof in6);
		key[0] = 6;
		memcpy(key + 1, &in6.sin6_addr, 16);
	}
}

/* The slot of addr in this generation's count (FNV-1a, linear probing). */
static struct addr_slot *addr_slot(struct server *s, const unsigned char addr[17])
{
	uint32_t h = 2166136261u;
	for (int i = 0; i < 17; i++)
		h = (h ^ addr[i]) * 16777619u;
	unsigned mask = (1u << s->slot_bits) - 1;
	for (unsigned i = h & mask;; i = (i + 1) & mask) {
		struct addr_slot *sl = &s->slots[i];
		if (sl->gen != s->slot_gen) {
			sl->gen = s->slot_gen;
			sl->n = 0;
			memcpy(sl->addr, addr, 17);
			return sl;
		}
		if (memcmp(sl->addr, addr, 17) == 0)
			return sl;
	}
}

static void cut(struct server *s, struct watched *w)
{
	shutdown(w->fd, SHUT_RDWR); /* libmicrohttpd then reads the end and closes it */
	w->cut = true;
	s->nopen--;
}

/* Past the soft limit: the busiest address gives up a connection (see struct watched). */
static void shed(struct server *s, struct watched *newcomer)
{
	if (++s->slot_gen == 0) { /* wrapped: no slot may pass for this generation's */
		memset(s->slots, 0, sizeof *s->slots << s->slot_bits);
		s->slot_gen = 1;
	}
	struct addr_slot *busiest = NULL;
	for (struct watched *w = s->watched; w; w = w->next) {
		if (w->cut)
			continue;
		struct addr_slot *sl = addr_slot(s, w->addr);
		sl->n++;
		if (busiest == NULL || sl->n > busiest->n)
			busiest = sl;
	}
	struct watched *victim = newcomer;
	if (busiest && addr_slot(s, newcomer->addr)->n < busiest->n) {
		for (struct watched *w = s->watched; w; w = w->next)
			if (!w->cut && !w->answering && memcmp(w->addr, busiest->addr, 17) == 0 &&
			    (victim == newcomer || w->since_ns < victim->since_ns))
				victim = w;
	}
	cut(s, victim);
	metrics_connection_cut(CUT_SHED, 1);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	struct server *s = cls;
	struct watched *w = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
		        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		w = calloc(1, sizeof *w);
		if (w == NULL || ci == NULL) {
			free(w);
			return; /* not watched: the idle timeout still applies */
		}
		w->fd = ci->connect_fd;
		w->since_ns = clock_ns(CLOCK_MONOTONIC);
		addr_key(mc, w->addr);
		pthread_mutex_lock(&s->watch_mu);
		w->next = s->watched;
		if (s->watched)
			s->watched->prev = w;
		s->watched = w;
		s->nopen++;
		if (s->slots && s->nopen > s->soft_limit)
			shed(s, w);
		pthread_mutex_unlock(&s->watch_mu);
		*socket_context = w;
	} else if (w != NULL) {
		pthread_mutex_lock(&s->watch_mu);
		if (w->prev)
			w->prev->next = w->next;
		else
			s->watched = w->next;
		if (w->next)
			w->next->prev = w->prev;
		if (!w->cut)
			s->nopen--;
		pthread_mutex_unlock(&s->watch_mu);
		free(w);
		*socket_context = NULL;
	}
}

/* An answer is on its way (answering), or done and the next request's clock starts. */
static void watch_mark(struct server *s, struct MHD_Connection *mc, bool answering)
{
	const union MHD_ConnectionInfo *ci =
	        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct watched *w = ci ? ci->socket_context : NULL;
	if (w == NULL)
		return;
	pthread_mutex_lock(&s->watch_mu);
	w->answering = answering;
	w->since_ns = clock_ns(CLOCK_MONOTONIC);
	pthread_mutex_unlock(&s->watch_mu);
	/* (from 0 it also restarts libmicrohttpd's clock: the answer's time counts from now) */
	if (s->have_watchdog)
		MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT,
		                          answering ? s->cfg.timeout_s : 0u);
}

static void *watchdog(void *arg)
{
	struct server *s = arg;
	int64_t limit = (int64_t)s->cfg.request_timeout_s * 1000000000;
	pthread_mutex_lock(&s->watch_mu);
	while (!s->stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += 250000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&s->watch_cv, &s->watch_mu, &until);
		int64_t now = clock_ns(CLOCK_MONOTONIC);
		int ncut = 0;
		for (struct watched *w = s->watched; w; w = w->next) {
			if (w->answering || w->cut || now - w->since_ns <= limit)
				continue;
			/* Bytes the client sent that no thread has read yet: the delay is
			 * ours (every thread busy), not a slow sender's. Nor is a client
			 * that has closed (0: its end, read when its thread comes) slow. */
			char peek;
			if (recv(w->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) >= 0)
				continue;
			cut(s, w);
			ncut++;
		}
		if (ncut) {
			metrics_connection_cut(CUT_SLOW, (unsigned)ncut);
			log_info("closed %d connection(s) that sent no whole request in %u s", ncut,
			         s->cfg.request_timeout_s);
		}
	}
	pthread_mutex_unlock(&s->watch_mu);
	return NULL;
}

static void watchdog_stop(struct server *s)
{
	if (!s->have_watchdog)
		return;
	pthread_mutex_lock(&s->watch_mu);
	s->stopping = true;
	pthread_cond_signal(&s->watch_cv);
	pthread_mutex_unlock(&s->watch_mu);
	pthread_join(s->watchdog, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	(void)version;
	struct req *r = *con_cls;
	if (r != NULL && r->in_lane) {
		/* back from the slow lane (lane_run): its answer is made */
		struct MHD_Response *resp = r->pending;
		r->pending = NULL;
		if (resp == NULL)
			return MHD_NO;
		enum MHD_Result ok = MHD_queue_response(mc, r->pending_status, resp);
		MHD_destroy_response(resp);
		return ok;
	}
	if (r == NULL) {
		r = calloc(1, sizeof *r);
		if (r == NULL)
			return MHD_NO;
		r->srv = cls;
		r->start_ns = clock_ns(CLOCK_MONOTONIC);
		r->route_index = -1;
		r->mhd_conn = mc;
		snprintf(r->method, sizeof r->method, "%s", method);
		snprintf(r->path, sizeof r->path, "%s", url);
		const char *auth = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
		                                               MHD_HTTP_HEADER_AUTHORIZATION);
		if (auth && strlen(auth) < sizeof r->auth_header)
			snprintf(r->auth_header, sizeof r->auth_header, "%s", auth);
		else if (auth)
			snprintf(r->auth_header, sizeof r->auth_header, "%s", "too long");
		const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
		const char *host =
		        MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
		snprintf(r->origin, sizeof r->origin, "%s",
		         origin == NULL                      ? ""
		         : strlen(origin) < sizeof r->origin ? origin
		                                             : "-");
		snprintf(r->host, sizeof r->host, "%s",
		         host && strlen(host) < sizeof r->host ? host : "");
		const char *sess =
		        MHD_lookup_connection_value(mc, MHD_COOKIE_KIND, "meter_session");
		if (sess && strlen(sess) < sizeof r->session)
			snprintf(r->session, sizeof r->session, "%s", sess);
		*con_cls = r;
		/* A body announced too large is refused before it is sent: answering now, in
		 * the first call, keeps libmicrohttpd from saying "100 Continue". */
		const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > REQ_BODY_MAX) {
			r->too_large = true;
			watch_mark(r->srv, mc, true);
			reply_problemf(r, 413, "too-large", "Request body too large",
			               "the body may be at most %d bytes", REQ_BODY_MAX);
			return MHD_YES;
		}
		return MHD_YES;
	}
	if (r->answered && !r->in_lane) {
		*upload_size = 0; /* refused in the first call: what comes is dropped */
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		if (!r->too_large && r->body_len + n <= REQ_BODY_MAX) {
			char *nb = realloc(r->body, r->body_len + n + 1);
			if (nb == NULL)
				return MHD_NO;
			r->body = nb;
			memcpy(r->body + r->body_len, upload, n);
			r->body_len += n;
			r->body[r->body_len] = '\0';
		} else {
			/* Read and drop the rest so the client gets its 413; a body that goes on
			 * past sixteen times the limit gets the connection closed instead. */
			r->too_large = true;
		}
		r->seen += n;
		*upload_size = 0;
		return r->seen > (size_t)REQ_BODY_MAX * 16 ? MHD_NO : MHD_YES;
	}
	watch_mark(r->srv, mc, true); /* the request is whole: no longer a slow sender */
	if (strlen(url) >= sizeof r->path) {
		reply_problemf(r, 414, "too-long", "URI too long", "the path is too long");
		return MHD_YES;
	}
	MHD_get_connection_values(mc, MHD_GET_ARGUMENT_KIND, on_arg, r);
	dispatch(r);
	return r->answered || r->in_lane ? MHD_YES : MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	(void)toe;
	struct server *s = cls;
	struct req *r = *con_cls;
	watch_mark(s, mc, false);
	if (r == NULL)
		return;
	req_release(r);
	if (r->answered)
		metrics_request(r->route_index, r->status, clock_ns(CLOCK_MONOTONIC) - r->start_ns);
	if (r->pending) /* made on the lane, never sent */
		MHD_destroy_response(r->pending);
	free(r->body);
	free(r);
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_debug("http: %s", line);
}

/* What server_start made, before its threads. */
static void server_free(struct server *s)
{
	pool_free(s->pool);
	replica_free(s->replica);
	free(s->tls_cert);
	free(s->tls_key);
	free(s->slots);
	free(s);
}

/* The whole PEM file at path (what: its option, for the error). */
static bool read_pem(const char *path, const char *what, char **out, char *err, size_t errlen)
{
	FILE *f = path && path[0] ? fopen(path, "r") : NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	if (f == NULL) {
		snprintf(err, errlen, "%s: cannot open \"%s\"", what, path ? path : "");
		return false;
	}
	for (;;) {
		if (len + 4096 + 1 > cap) {
			char *nb =
			        cap < 1024 * 1024 ? realloc(buf, cap = cap ? 2 * cap : 8192) : NULL;
			if (nb == NULL)
				break;
			buf = nb;
		}
		size_t n = fread(buf + len, 1, 4096, f);
		len += n;
		if (n == 0)
			break;
	}
	bool ok = !ferror(f) && feof(f) && buf != NULL && len > 0;
	fclose(f);
	if (!ok) {
		free(buf);
		snprintf(err, errlen, "%s: cannot read \"%s\" (empty, unreadable or over 1 MiB)",
		         what, path);
		return false;
	}
	buf[len] = '\0';
	*out = buf;
	return true;
}

struct server *server_start(const struct server_config *cfg, char *err, size_t errlen)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	char host[64];
	const char *colon = strrchr(cfg->listen, ':');
	long port = colon ? strtol(colon + 1, NULL, 10) : -1;
	if (colon == NULL || (size_t)(colon - cfg->listen) >= sizeof host || port < 0 ||
	    port > 65535) {
		snprintf(err, errlen, "--listen: \"%s\" is not HOST:PORT (an IPv4 address)",
		         cfg->listen);
		return NULL;
	}
	memcpy(host, cfg->listen, (size_t)(colon - cfg->listen));
	host[colon - cfg->listen] = '\0';
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
		snprintf(err, errlen, "--listen: \"%s\" is not an IPv4 address", host);
		return NULL;
	}
	addr.sin_port = htons((uint16_t)port);
	struct server *s = calloc(1, sizeof *s);
	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->cfg = *cfg;
	pthread_mutex_init(&s->watch_mu, NULL);
	pthread_cond_init(&s->watch_cv, NULL);
	pthread_mutex_init(&s->lane_mu, NULL);
	pthread_cond_init(&s->lane_cv, NULL);
	s->soft_limit =
	        cfg->conn_limit - cfg->conn_limit / 16; /* (under 16: libmicrohttpd's bound) */
	while ((1u << s->slot_bits) < 2 * cfg->conn_limit + 2)
		s->slot_bits++;
	s->slots = calloc((size_t)1 << s->slot_bits, sizeof *s->slots);
	s->pool = pool_new(cfg->db_url, cfg->pool_size);
	/* a quarter of the connections, one at least, kept for quota checks and
	 * admissions (api/routes.c's HOT) */
	if (s->pool)
		pool_reserve(s->pool, cfg->pool_size >= 8   ? cfg->pool_size / 4
		                      : cfg->pool_size >= 2 ? 1
		                                            : 0);
	if (cfg->read_db_url && cfg->read_db_url[0])
		s->replica = replica_new(cfg->read_db_url, cfg->pool_size, cfg->read_max_lag_us);
	if (s->pool == NULL || s->slots == NULL ||
	    (cfg->read_db_url && cfg->read_db_url[0] && s->replica == NULL)) {
		server_free(s);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	bool tls = cfg->tls_cert && cfg->tls_cert[0];
	if (tls) {
		s->cfg.secure_cookies = true;
		if (!read_pem(cfg->tls_cert, "--tls-cert", &s->tls_cert, err, errlen) ||
		    !read_pem(cfg->tls_key, "--tls-key", &s->tls_key, err, errlen)) {
			server_free(s);
			return NULL;
		}
	} else if (cfg->tls_key && cfg->tls_key[0]) {
		snprintf(err, errlen, "--tls-key needs --tls-cert");
		server_free(s);
		return NULL;
	}
	/* before the daemon: its connections are the watchdog's from the first */
	s->have_watchdog = pthread_create(&s->watchdog, NULL, watchdog, s) == 0;
	if (!s->have_watchdog)
		log_warn("could not start the slow-client watchdog; only the idle timeout applies");
	struct MHD_OptionItem tls_opts[] = {
	        {tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, s->tls_cert},
	        {MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
	        {MHD_OPTION_END, 0, NULL},
	};
	s->daemon = MHD_start_daemon(
	        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
	                (tls ? MHD_USE_TLS : 0),
	        0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->threads, MHD_OPTION_CONNECTION_LIMIT,
	        (unsigned)cfg->conn_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	        (unsigned)cfg->conn_limit_per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
	        s->have_watchdog ? 0u : (unsigned)cfg->timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
	        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
	        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_ARRAY, tls_opts,
	        MHD_OPTION_END);
	if (s->daemon == NULL) {
		snprintf(err, errlen, "could not listen on %s (%s)", cfg->listen,
		         tls ? "in use, not allowed, or the certificate and key do not make a pair?"
		             : "in use, or not allowed?");
		watchdog_stop(s);
		server_free(s);
		return NULL;
	}
	/* The lane leaves at least one database connection to the request threads. */
	unsigned want = cfg->slow_threads;
	if (cfg->pool_size > 1 && want > cfg->pool_size - 1)
		want = cfg->pool_size - 1;
	s->lane = calloc(want ? want : 1, sizeof *s->lane);
	while (s->lane && s->nlane < want &&
	       pthread_create(&s->lane[s->nlane], NULL, lane_run, s) == 0)
		s->nlane++;
	if (s->nlane < want)
		log_warn("the slow lane has %u of its %u threads; %s", s->nlane, want,
		         s->nlane ? "slow requests wait longer"
		                  : "slow requests run on request threads");
	return s;
}

void server_stop(struct server *s)
{
	if (s == NULL)
		return;
	/* The lane runs what waits and resumes each before the daemon may stop; the
	 * watchdog still cuts slow senders meanwhile, and stops before the daemon
	 * closes their sockets. */
	pthread_mutex_lock(&s->lane_mu);
	s->lane_stopping = true;
	pthread_cond_broadcast(&s->lane_cv);
	pthread_mutex_unlock(&s->lane_mu);
	for (unsigned i = 0; i < s->nlane; i++)
		pthread_join(s->lane[i], NULL);
	free(s->lane);
	watchdog_stop(s);
	MHD_stop_daemon(s->daemon);
	server_free(s);
}
