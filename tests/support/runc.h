/*
 * tests/support/runc.h: real containers under Debian's runc, busybox as
 * their root file system, for the tests of the hook and of the collector.
 */
#ifndef TESTS_SUPPORT_RUNC_H
#define TESTS_SUPPORT_RUNC_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Runs a shell command (printf's format); the test fails when it does. */
void runc_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* runc and busybox-static are there (scripts/deps.sh installs them). */
bool runc_have(void);

/*
 * Makes the bundle dir/name: busybox sh -c script as its process, in the
 * cgroup cgroups_path ("/a/b/c"), 1 vCPU and 256 MiB; hooks (an object of
 * the OCI hooks, taken) when not NULL; this host's /sys/fs/cgroup at
 * /host-cgroup, read-only, when host_cgroups. Fails the test on an error.
 */
void runc_bundle(const char *dir, const char *name, const char *cgroups_path, const char *script,
                 cJSON *hooks, bool host_cgroups);

/* runc --root root run the bundle dir/name in the background, its output in
 * dir/name.log; its pid. */
pid_t runc_start(const char *root, const char *dir, const char *name);

/* Waits for it: its exit status, 128 + a signal, or -1. */
int runc_wait(pid_t pid);

/* dir/name.log into out (NUL-terminated; "" when there is none). */
void runc_read_log(const char *dir, const char *name, char *out, size_t len);

/* Removes the cgroups below /sys/fs/cgroup whose path holds holder, deepest first. */
void runc_remove_cgroups(const char *holder);

#endif
