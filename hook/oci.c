#include "hook/oci.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/match.h"
#include "common/ids.h"
#include "meter/plan.h"

/* The string member name of o, or NULL. */
static const char *str(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/*
 * A whole number member of o, at most max; 0 when absent or not above 0 (the
 * runtimes read 0 and -1 as "no limit"), -1 when it is not a whole number or
 * is above max.
 */
static int64_t whole(const cJSON *o, const char *name, int64_t max)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (v == NULL || cJSON_IsNull(v))
		return 0;
	/* the range first: a double far outside int64_t cannot be converted */
	if (!cJSON_IsNumber(v) || v->valuedouble > (double)max || v->valuedouble < -(double)max)
		return -1;
	if (v->valuedouble != (double)(int64_t)v->valuedouble)
		return -1;
	return v->valuedouble < 1 ? 0 : (int64_t)v->valuedouble;
}

static char *read_file(const char *path, size_t max, char *err, size_t errlen)
{
	FILE *in = fopen(path, "r");
	if (in == NULL) {
		snprintf(err, errlen, "could not open \"%s\": %s", path, strerror(errno));
		return NULL;
	}
	char *buf = malloc(max + 1);
	size_t n = buf ? fread(buf, 1, max + 1, in) : 0;
	bool bad = buf == NULL || ferror(in) || n > max;
	fclose(in);
	if (bad) {
		snprintf(err, errlen, "could not read \"%s\": %s", path,
		         buf == NULL ? "out of memory"
		         : n > max   ? "larger than 4 MiB"
		                     : "read error");
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	return buf;
}

/* value of annotation name, from the state's annotations or else the config's. */
static const char *annotation(const cJSON *state_ann, const cJSON *config, const char *name)
{
	const char *v = state_ann ? str(state_ann, name) : NULL;
	return v ? v : str(cJSON_GetObjectItemCaseSensitive(config, "annotations"), name);
}

bool oci_config_target(const char *config, const cJSON *state_ann, struct matcher *m,
                       struct oci_target *t, char *err, size_t errlen)
{
	cJSON *c = cJSON_Parse(config);
	bool ok = false;
	if (c == NULL || !cJSON_IsObject(c)) {
		snprintf(err, errlen, "the bundle's config.json is not a JSON object");
		goto out;
	}
	const cJSON *lx = cJSON_GetObjectItemCaseSensitive(c, "linux");
	const cJSON *res = cJSON_GetObjectItemCaseSensitive(lx, "resources");
	const char *acct = annotation(state_ann, c, "meter.account");
	const char *sb = annotation(state_ann, c, "meter.sandbox");
	const char *path = str(lx, "cgroupsPath");
	char id[CG_ID_MAX] = "", account[CG_ID_MAX] = "";
	if (path && m) {
		while (*path == '/')
			path++;
		if (matcher_classify(m, path, id, account) != MATCH_SANDBOX)
			id[0] = account[0] = '\0';
	}
	/* The path the collector meters decides: annotations may only say the same
	 * (or name an account the pattern does not). Whoever sets annotations
	 * (docker run --annotation, a pod's) must not admit, bill or release in
	 * another account's name. */
	const char *differs = id[0] && sb && strcmp(sb, id) != 0                 ? "sandbox"
	                      : account[0] && acct && strcmp(acct, account) != 0 ? "account"
	                                                                         : NULL;
	if (differs) {
		t->conflict = true;
		snprintf(err, errlen,
		         "container %s: the annotation meter.%s \"%s\" is not the %s of its cgroup "
		         "path \"%s\" (\"%s\"), which the collector meters: refused, nothing done",
		         t->container[0] ? t->container : "?", differs,
		         strcmp(differs, "sandbox") == 0 ? sb : acct, differs, path,
		         strcmp(differs, "sandbox") == 0 ? id : account);
		goto out;
	}
	snprintf(t->account, sizeof t->account, "%s", acct ? acct : account);
	snprintf(t->sandbox, sizeof t->sandbox, "%s", sb ? sb : id);
	if (!t->sandbox[0]) {
		snprintf(err, errlen,
		         "no sandbox named: set the annotation meter.sandbox (and meter.account), "
		         "or a "
		         "linux.cgroupsPath the collector's pattern matches (it is %s%s%s)",
		         path ? "\"" : "", path ? path : "not set", path ? "\"" : "");
		goto out;
	}
	if (!id_valid(t->sandbox) || (t->account[0] && !id_valid(t->account))) {
		snprintf(err, errlen, "sandbox \"%s\" or account \"%s\" is not a valid id (%s)",
		         t->sandbox, t->account, ID_RULE);
		goto out;
	}
	const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(res, "cpu");
	const cJSON *mem = cJSON_GetObjectItemCaseSensitive(res, "memory");
	int64_t quota = whole(cpu, "quota", INT64_C(1) << 40);
	int64_t period = whole(cpu, "period", 1000000);
	int64_t limit = whole(mem, "limit", INT64_C(1) << 50);
	if (quota < 0 || period < 0 || limit < 0) {
		snprintf(err, errlen,
		         "linux.resources of the bundle's config.json holds a CPU quota, "
		         "period or memory limit that is not a whole number in range");
		goto out;
	}
	if (period == 0)
		period = 100000; /* the kernel's default period */
	/* rounded up (meter/plan.h): a sandbox is never sized below what it may use */
	t->vcpus_milli = t->memory_milli = 0;
	if ((quota && meter_vcpus_of_quota(quota, period, &t->vcpus_milli) != METER_OK) ||
	    (limit && meter_mgib_of_bytes(limit, &t->memory_milli) != METER_OK)) {
		snprintf(err, errlen,
		         "linux.resources of the bundle's config.json holds a CPU "
		         "quota or memory limit that does not fit");
		goto out;
	}
	ok = true;
out:
	cJSON_Delete(c);
	return ok;
}

bool oci_read(const char *state, size_t len, struct matcher *m, struct oci_target *t, char *err,
              size_t errlen)
{
	memset(t, 0, sizeof *t);
	cJSON *s = cJSON_ParseWithLength(state, len);
	char *config = NULL, path[4200];
	bool ok = false;
	const char *status = s ? str(s, "status") : NULL, *bundle = s ? str(s, "bundle") : NULL;
	const char *id = s ? str(s, "id") : NULL;
	if (status == NULL || bundle == NULL || id == NULL) {
		snprintf(err, errlen,
		         "standard input is not an OCI container state (JSON with id, "
		         "status and bundle): run meter-hook oci as a runtime hook");
		goto out;
	}
	snprintf(t->container, sizeof t->container, "%s", id);
	if (strcmp(status, "creating") == 0) {
		t->phase = OCI_ADMIT;
	} else if (strcmp(status, "stopped") == 0) {
		t->phase = OCI_RELEASE;
	} else {
		snprintf(err, errlen,
		         "container %s is \"%s\": run meter-hook oci as the createRuntime hook (it "
		         "admits) and the poststop hook (it releases)",
		         t->container, status);
		goto out;
	}
	snprintf(path, sizeof path, "%s/config.json", bundle);
	config = read_file(path, OCI_CONFIG_MAX, err, errlen);
	ok = config && oci_config_target(config, cJSON_GetObjectItemCaseSensitive(s, "annotations"),
	                                 m, t, err, errlen);
out:
	free(config);
	cJSON_Delete(s);
	return ok;
}
