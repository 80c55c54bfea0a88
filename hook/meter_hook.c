/*
 * meter-hook: admission for schedulers and OCI runtimes.
 *
 *   meter-hook admit --account A --sandbox S --vcpus N --memory-gib N
 *   meter-hook release --sandbox S
 *   meter-hook oci          (createRuntime admits, poststop releases)
 *
 * Admitting is one call, POST /v1/sandboxes: the registration decides and
 * records in one transaction (trial, spend cap, concurrency under the
 * account's row lock), so two hooks never both take the last place.
 * Releasing is POST /v1/sandboxes/{id}/stop.
 *
 * Exit status: 0 admitted (or released), 1 refused by meter (the reason on
 * stderr: a limit, an unknown account, a sandbox already registered), 2
 * meter unreachable (no connection, a timeout, a 5xx) or misconfigured (no
 * URL or key, a key file others may read, a key without rights, a bundle
 * without what it needs). --fail-open turns "unreachable" into 0 (admitted
 * without meter; the collector still registers a sandbox its cgroup path
 * names). It never turns a misconfiguration into 0: a hook that cannot ever
 * work must not quietly admit everything. No call outlives --timeout: libcurl
 * bounds each, and an alarm ends the process a second after it regardless.
 */
#include <curl/curl.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collector/match.h"
#include "common/ids.h"
#include "common/opts.h"
#include "hook/oci.h"
#include "meter/decimal.h"

#define EXIT_ADMITTED 0
#define EXIT_REFUSED  1
#define EXIT_NO_METER 2

#define REPLY_MAX (64 * 1024)

enum {
	O_URL,
	O_KEY_FILE,
	O_TIMEOUT,
	O_FAIL_OPEN,
	O_FAIL_CLOSED,
	O_MATCH,
	O_ACCOUNT,
	O_SANDBOX,
	O_VCPUS,
	O_MEMORY,
	O_JSON,
	O_HELP,
	O_N
};

static const struct opt_def opts[O_N] = {
        [O_URL] = {"api-url", OPT_STRING, 0, 0, 0, "http://127.0.0.1:8080", "METER_API_URL", false,
                   "meter-api's address"},
        [O_KEY_FILE] = {"key-file", OPT_STRING, 0, 0, 0, NULL, "METER_API_KEY_FILE", false,
                        "a file holding a hook key (meter key create --hook), readable by its "
                        "owner only (else the key "
                        "in METER_API_KEY)"},
        [O_TIMEOUT] = {"timeout", OPT_DURATION, 0, 100000, 60000000, "5s", "METER_HOOK_TIMEOUT",
                       false, "the longest the hook waits for meter"},
        [O_FAIL_OPEN] = {"fail-open", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                         "admit when meter cannot be reached (exit 0)"},
        [O_FAIL_CLOSED] = {"fail-closed", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                           "refuse when meter cannot be reached (exit 2; the default)"},
        [O_MATCH] = {"match", OPT_STRING, 0, 0, 0, "sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)",
                     "METER_MATCH", false,
                     "oci: the collector's pattern, matched against the bundle's cgroupsPath"},
        [O_ACCOUNT] = {"account", OPT_STRING, 0, 0, 0, NULL, NULL, false, "admit: the account"},
        [O_SANDBOX] = {"sandbox", OPT_STRING, 0, 0, 0, NULL, NULL, false,
                       "admit, release: the sandbox"},
        [O_VCPUS] = {"vcpus", OPT_DECIMAL, 3, 1, 256000, NULL, NULL, false, "admit: its vCPUs"},
        [O_MEMORY] = {"memory-gib", OPT_DECIMAL, 3, 1, 1024000, NULL, NULL, false,
                      "admit: its memory in GiB"},
        [O_JSON] = {"json", OPT_FLAG, 0, 0, 0, NULL, NULL, false,
                    "print meter's answer as JSON instead of a line"},
        [O_HELP] = {"help", OPT_FLAG, 0, 0, 0, NULL, NULL, false, "this text"},
};

static const char usage[] =
        "usage: meter-hook admit --account A --sandbox S --vcpus N --memory-gib N [options]\n"
        "       meter-hook release --sandbox S [options]\n"
        "       meter-hook oci [options]   (an OCI runtime hook: the state on standard input)\n"
        "exit: 0 admitted, 1 refused by meter, 2 meter unreachable or misconfigured";

static bool fail_open;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("meter-hook: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Meter could not be reached: fail open or closed, as asked. */
static int unreachable(const char *url, const char *why)
{
	say("meter unreachable at %s: %s; %s", url, why,
	    fail_open ? "admitting without meter (--fail-open)" : "refusing (--fail-closed)");
	return fail_open ? EXIT_ADMITTED : EXIT_NO_METER;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char closed[] = "meter-hook: meter did not answer within the timeout; "
	                             "refusing (--fail-closed)\n";
	static const char open[] = "meter-hook: meter did not answer within the timeout; "
	                           "admitting without meter (--fail-open)\n";
	if (fail_open)
		(void)!write(2, open, sizeof open - 1);
	else
		(void)!write(2, closed, sizeof closed - 1);
	_exit(fail_open ? EXIT_ADMITTED : EXIT_NO_METER);
}

struct api {
	const char *url;
	char auth[320];
	long timeout_ms;
};

struct reply {
	long status; /* 0: no answer */
	char body[REPLY_MAX + 1];
	size_t len;
};

static size_t keep(char *p, size_t size, size_t n, void *cls)
{
	struct reply *r = cls;
	size_t take = size * n;
	if (take > REPLY_MAX - r->len)
		take = REPLY_MAX - r->len;
	memcpy(r->body + r->len, p, take);
	r->len += take;
	r->body[r->len] = '\0';
	return size * n;
}

/* One request; false with err when no answer came. */
static bool call(const struct api *a, const char *path, const char *body, struct reply *out,
                 char *err)
{
	char url[2048];
	snprintf(url, sizeof url, "%s%s", a->url, path);
	memset(out, 0, sizeof *out);
	CURL *h = curl_easy_init();
	struct curl_slist *hd = NULL;
	hd = curl_slist_append(hd, a->auth);
	hd = curl_slist_append(hd, "content-type: application/json");
	if (h == NULL || hd == NULL) {
		snprintf(err, CURL_ERROR_SIZE, "out of memory");
		curl_slist_free_all(hd);
		curl_easy_cleanup(h);
		return false;
	}
	err[0] = '\0';
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, a->timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, keep);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "meter-hook/1");
	CURLcode rc = curl_easy_perform(h);
	if (rc == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
	else if (!err[0])
		snprintf(err, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
	curl_slist_free_all(hd);
	curl_easy_cleanup(h);
	return rc == CURLE_OK;
}

/* "detail (type)" of a problem answer, or the status alone. */
static void problem_text(const struct reply *r, char *out, size_t len)
{
	cJSON *j = cJSON_Parse(r->body);
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "detail");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "type");
	if (cJSON_IsString(d))
		snprintf(out, len, "%s (%s)", d->valuestring,
		         cJSON_IsString(t) ? t->valuestring : "no type");
	else
		snprintf(out, len, "HTTP %ld", r->status);
	cJSON_Delete(j);
}

/*
 * The exit status of an answer that is not a success: refused (409 and 404
 * are meter's decisions), unreachable (5xx), or misconfigured.
 */
static int not_done(const struct api *a, const char *what, const struct reply *r)
{
	char why[600];
	problem_text(r, why, sizeof why);
	if (r->status == 409 || r->status == 404) {
		say("%s refused: %s", what, why);
		return EXIT_REFUSED;
	}
	if (r->status >= 500)
		return unreachable(a->url, why);
	if (r->status == 401 || r->status == 403)
		say("%s: the key is not a hook or admin key meter accepts: %s", what, why);
	else
		say("%s: meter answered %ld: %s", what, r->status, why);
	return EXIT_NO_METER;
}

static int admit(const struct api *a, const char *account, const char *sandbox, int64_t vcpus,
                 int64_t memory, bool json)
{
	char body[600], v[METER_DECIMAL_BUF], m[METER_DECIMAL_BUF], err[CURL_ERROR_SIZE], what[400];
	struct reply *r = malloc(sizeof *r);
	if (r == NULL)
		return unreachable(a->url, "out of memory");
	meter_decimal_format(vcpus, 3, 0, v, sizeof v);
	meter_decimal_format(memory, 3, 0, m, sizeof m);
	snprintf(body, sizeof body,
	         "{\"id\": \"%s\", \"account_id\": \"%s\", \"vcpus\": \"%s\", \"memory_gib\": "
	         "\"%s\", \"admit\": true}",
	         sandbox, account, v, m);
	snprintf(what, sizeof what, "sandbox %s of account %s", sandbox, account);
	int code;
	if (!call(a, "/v1/sandboxes", body, r, err)) {
		code = unreachable(a->url, err);
	} else if (r->status != 201 && r->status != 200) {
		code = not_done(a, what, r);
	} else {
		code = EXIT_ADMITTED;
		cJSON *j = cJSON_Parse(r->body);
		const cJSON *ad = cJSON_GetObjectItemCaseSensitive(j, "admission");
		const cJSON *ports = cJSON_GetObjectItemCaseSensitive(ad, "egress_ports");
		char list[64] = "";
		const cJSON *p;
		cJSON_ArrayForEach(p, ports)
		{
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d",
			         list[0] ? ", " : "", p->valueint);
		}
		if (json)
			printf("%s\n", r->body);
		else
			printf("admitted %s: %d of %d running; egress %s%s\n", what,
			       cJSON_GetObjectItemCaseSensitive(ad, "running")
			               ? cJSON_GetObjectItemCaseSensitive(ad, "running")->valueint
			               : 0,
			       cJSON_GetObjectItemCaseSensitive(ad, "max_concurrent")
			               ? cJSON_GetObjectItemCaseSensitive(ad, "max_concurrent")
			                         ->valueint
			               : 0,
			       cJSON_IsArray(ports) ? "to ports " : "unrestricted",
			       cJSON_IsArray(ports) ? list : "");
		cJSON_Delete(j);
	}
	free(r);
	return code;
}

static int release(const struct api *a, const char *sandbox, bool json)
{
	char path[256], err[CURL_ERROR_SIZE], what[200];
	struct reply *r = malloc(sizeof *r);
	if (r == NULL)
		return unreachable(a->url, "out of memory");
	snprintf(path, sizeof path, "/v1/sandboxes/%s/stop", sandbox);
	snprintf(what, sizeof what, "release of sandbox %s", sandbox);
	int code;
	if (!call(a, path, "{}", r, err)) {
		/* a stop never made is not lost: the collector ends the sandbox when its cgroup
		 * goes, so release fails the same way admit does */
		code = unreachable(a->url, err);
	} else if (r->status == 200) {
		code = EXIT_ADMITTED;
		if (json)
			printf("%s\n", r->body);
		else
			printf("released sandbox %s\n", sandbox);
	} else if (r->status == 409 && strstr(r->body, "already-stopped")) {
		code = EXIT_ADMITTED; /* twice is once */
		printf("sandbox %s was stopped already\n", sandbox);
	} else {
		code = not_done(a, what, r);
	}
	free(r);
	return code;
}

/* The key: from --key-file (owner-only) or METER_API_KEY; false when misconfigured. */
static bool read_key(const char *file, char *auth, size_t len)
{
	char key[256] = "";
	if (file && *file) {
		struct stat st;
		FILE *in = fopen(file, "r");
		if (in == NULL || fstat(fileno(in), &st) != 0) {
			say("could not open key file \"%s\": %s", file, strerror(errno));
			if (in)
				fclose(in);
			return false;
		}
		if ((st.st_mode & 077) != 0 || st.st_uid != geteuid()) {
			say("key file \"%s\" must be readable by its owner only and owned by this "
			    "user "
			    "(it is mode %03o, owner %u): chmod 600 it",
			    file, (unsigned)(st.st_mode & 0777), (unsigned)st.st_uid);
			fclose(in);
			return false;
		}
		if (fgets(key, sizeof key, in) == NULL)
			key[0] = '\0';
		fclose(in);
		key[strcspn(key, "\r\n")] = '\0';
	} else if (getenv("METER_API_KEY")) {
		snprintf(key, sizeof key, "%s", getenv("METER_API_KEY"));
	}
	if (!key[0]) {
		say("no API key: set METER_API_KEY_FILE (or --key-file) to a file holding a hook "
		    "key (meter key create --hook), or METER_API_KEY");
		return false;
	}
	snprintf(auth, len, "Authorization: Bearer %s", key);
	return true;
}

static char *read_stdin(size_t *len)
{
	char *buf = malloc(OCI_STATE_MAX + 1);
	size_t n = 0;
	while (buf && n <= OCI_STATE_MAX) {
		size_t got = fread(buf + n, 1, OCI_STATE_MAX + 1 - n, stdin);
		if (got == 0)
			break;
		n += got;
	}
	if (buf == NULL || n > OCI_STATE_MAX || ferror(stdin)) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

static int oci(const struct api *a, const struct opt_val *v)
{
	char err[1024];
	size_t len = 0;
	char *state = read_stdin(&len);
	if (state == NULL) {
		say("oci: could not read the container's state from standard input (at most 1 "
		    "MiB)");
		return EXIT_NO_METER;
	}
	struct matcher *m = matcher_new(v[O_MATCH].str, err, sizeof err);
	if (m == NULL) {
		free(state);
		say("oci: --match: %s", err);
		return EXIT_NO_METER;
	}
	struct oci_target t;
	bool ok = oci_read(state, len, m, &t, err, sizeof err);
	matcher_free(m);
	free(state);
	if (!ok) {
		say("oci: %s", err);
		return t.conflict ? EXIT_REFUSED : EXIT_NO_METER;
	}
	if (t.phase == OCI_RELEASE)
		return release(a, t.sandbox, v[O_JSON].set);
	if (!t.account[0] || t.vcpus_milli == 0 || t.memory_milli == 0) {
		say("oci: container %s (sandbox %s) cannot be admitted: %s", t.container, t.sandbox,
		    !t.account[0]
		            ? "no account: set the annotation meter.account, or a cgroupsPath "
		              "whose account the collector's pattern names"
		    : t.vcpus_milli == 0
		            ? "no CPU limit: set linux.resources.cpu.quota (and period)"
		            : "no memory limit: set linux.resources.memory.limit");
		return EXIT_NO_METER;
	}
	return admit(a, t.account, t.sandbox, t.vcpus_milli, t.memory_milli, v[O_JSON].set);
}

int main(int argc, char **argv)
{
	struct opt_val v[O_N];
	char err[512];
	const char *verb = argc > 1 ? argv[1] : "";
	if (strcmp(verb, "--help") == 0 || strcmp(verb, "-h") == 0 || strcmp(verb, "help") == 0) {
		opts_help(stdout, usage, opts, O_N);
		return 0;
	}
	bool is_admit = strcmp(verb, "admit") == 0, is_release = strcmp(verb, "release") == 0,
	     is_oci = strcmp(verb, "oci") == 0;
	if (!is_admit && !is_release && !is_oci) {
		fprintf(stderr, "%s\n", usage);
		return EXIT_NO_METER;
	}
	for (int i = 2; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0) {
			opts_help(stdout, usage, opts, O_N);
			return 0;
		}
	if (!opts_parse(opts, O_N, argc - 2, argv + 2, v, err, sizeof err)) {
		say("%s (see meter-hook --help)", err);
		return EXIT_NO_METER;
	}
	if (v[O_FAIL_OPEN].set && v[O_FAIL_CLOSED].set) {
		say("--fail-open and --fail-closed cannot both be given");
		return EXIT_NO_METER;
	}
	fail_open = v[O_FAIL_OPEN].set;
	const char *need = NULL;
	if (is_admit)
		need = !v[O_ACCOUNT].set   ? "--account"
		       : !v[O_SANDBOX].set ? "--sandbox"
		       : !v[O_VCPUS].set   ? "--vcpus"
		       : !v[O_MEMORY].set  ? "--memory-gib"
		                           : NULL;
	else if (is_release)
		need = !v[O_SANDBOX].set ? "--sandbox" : NULL;
	if (need) {
		say("%s: %s is required (see meter-hook --help)", verb, need);
		return EXIT_NO_METER;
	}
	if ((v[O_ACCOUNT].set && !id_valid(v[O_ACCOUNT].str)) ||
	    (v[O_SANDBOX].set && !id_valid(v[O_SANDBOX].str))) {
		say("%s: --account and --sandbox must be ids (%s)", verb, ID_RULE);
		return EXIT_NO_METER;
	}
	struct api a = {.url = v[O_URL].str, .timeout_ms = (long)(v[O_TIMEOUT].num / 1000)};
	if (strncmp(a.url, "http://", 7) != 0 && strncmp(a.url, "https://", 8) != 0) {
		say("--api-url \"%s\" must start with http:// or https://", a.url);
		return EXIT_NO_METER;
	}
	if (!read_key(v[O_KEY_FILE].set ? v[O_KEY_FILE].str : NULL, a.auth, sizeof a.auth))
		return EXIT_NO_METER;
	/* the last resort: whatever blocks, the hook ends a second past its timeout */
	signal(SIGALRM, on_alarm);
	alarm((unsigned)(v[O_TIMEOUT].num / 1000000) + 1);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return unreachable(a.url, "libcurl could not start");
	int code = is_admit     ? admit(&a, v[O_ACCOUNT].str, v[O_SANDBOX].str, v[O_VCPUS].num,
	                                v[O_MEMORY].num, v[O_JSON].set)
	           : is_release ? release(&a, v[O_SANDBOX].str, v[O_JSON].set)
	                        : oci(&a, v);
	curl_global_cleanup();
	return code;
}
