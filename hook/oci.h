/*
 * hook/oci.h: what an OCI runtime tells a hook, read for meter-hook oci.
 *
 * The runtime writes the container's state to the hook's standard input
 * (ociVersion, id, status, pid, bundle, annotations). The bundle's
 * config.json says where the container's cgroup is (linux.cgroupsPath) and
 * its limits (linux.resources.cpu.quota / period, linux.resources.memory.
 * limit). The account and sandbox come from the cgroup path matched against
 * the collector's pattern (collector/match.h), so the sandbox the hook admits
 * is the one the collector meters; the annotations meter.account and
 * meter.sandbox name them when the path does not (a runtime's own cgroup
 * names), and must agree with it when it does: else the hook refuses. The size is the limits:
 * vCPUs = quota / period and GiB = limit / 2^30, each rounded up to the
 * thousandth meter keeps.
 */
#ifndef HOOK_OCI_H
#define HOOK_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct matcher;

#define OCI_STATE_MAX  (1 << 20) /* the most bytes of state read from stdin */
#define OCI_CONFIG_MAX (4 << 20) /* the most bytes of config.json read */

enum oci_phase {
	OCI_ADMIT,   /* status "creating": the createRuntime hook */
	OCI_RELEASE, /* status "stopped": the poststop hook */
};

struct oci_target {
	enum oci_phase phase;
	char container[256]; /* the runtime's id, for messages */
	char account[160];   /* "" when neither the annotations nor the path say */
	char sandbox[160];
	int64_t vcpus_milli;  /* 0 when the config sets no CPU quota */
	int64_t memory_milli; /* thousandths of a GiB; 0 when it sets no memory limit */
	bool conflict; /* refused: the annotations name another sandbox or account than the path */
};

/*
 * Reads state (the JSON on stdin, len bytes) and the bundle's config.json
 * it names into t. False with one line in err for state that is not the
 * runtime's, a status neither hook runs at, a config that cannot be read,
 * no sandbox named by annotation or path, or annotations that name another
 * sandbox or account than the path (t->conflict: a refusal, exit 1). The size is checked only by
 * the caller, and only to admit.
 */
bool oci_read(const char *state, size_t len, struct matcher *m, struct oci_target *t, char *err,
              size_t errlen);

/*
 * The target of config (the text of a config.json) and the annotations of
 * the state (a cJSON object or NULL), without the state's phase. For tests
 * and oci_read.
 */
struct cJSON;
bool oci_config_target(const char *config, const struct cJSON *state_annotations, struct matcher *m,
                       struct oci_target *t, char *err, size_t errlen);

#endif
