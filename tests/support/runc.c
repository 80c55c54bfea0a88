#include "tests/support/runc.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bool runc_have(void)
{
	return system("command -v runc >/dev/null 2>&1") == 0 && access("/bin/busybox", X_OK) == 0;
}

void runc_sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		fail_msg("failed: %s", cmd);
}

void runc_bundle(const char *dir, const char *name, const char *cgroups_path, const char *script,
                 cJSON *hooks, bool host_cgroups)
{
	char b[200], p[260];
	snprintf(b, sizeof b, "%s/%s", dir, name);
	runc_sh("mkdir -p %s/rootfs/bin %s/rootfs/host-cgroup && cp /bin/busybox %s/rootfs/bin/ && "
	        "ln -sf busybox %s/rootfs/bin/sh && cd %s && rm -f config.json && runc spec",
	        b, b, b, b, b);
	snprintf(p, sizeof p, "%s/config.json", b);
	FILE *in = fopen(p, "r");
	assert_non_null(in);
	static char text[65536];
	size_t n = fread(text, 1, sizeof text - 1, in);
	fclose(in);
	text[n] = '\0';
	cJSON *c = cJSON_Parse(text);
	assert_non_null(c);
	cJSON *proc = cJSON_GetObjectItem(c, "process");
	cJSON_ReplaceItemInObject(proc, "terminal", cJSON_CreateFalse());
	cJSON *args = cJSON_CreateArray();
	cJSON_AddItemToArray(args, cJSON_CreateString("/bin/busybox"));
	cJSON_AddItemToArray(args, cJSON_CreateString("sh"));
	cJSON_AddItemToArray(args, cJSON_CreateString("-c"));
	cJSON_AddItemToArray(args, cJSON_CreateString(script));
	cJSON_ReplaceItemInObject(proc, "args", args);
	cJSON *lx = cJSON_GetObjectItem(c, "linux");
	cJSON_DeleteItemFromObject(lx, "cgroupsPath");
	cJSON_AddStringToObject(lx, "cgroupsPath", cgroups_path);
	cJSON *res = cJSON_GetObjectItem(lx, "resources");
	cJSON *cpu = cJSON_AddObjectToObject(res, "cpu");
	cJSON_AddNumberToObject(cpu, "quota", 100000);
	cJSON_AddNumberToObject(cpu, "period", 100000);
	cJSON *mem = cJSON_AddObjectToObject(res, "memory");
	cJSON_AddNumberToObject(mem, "limit", 256 * 1024 * 1024);
	if (host_cgroups) {
		cJSON *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "destination", "/host-cgroup");
		cJSON_AddStringToObject(m, "type", "bind");
		cJSON_AddStringToObject(m, "source", "/sys/fs/cgroup");
		cJSON *o = cJSON_AddArrayToObject(m, "options");
		cJSON_AddItemToArray(o, cJSON_CreateString("rbind"));
		cJSON_AddItemToArray(o, cJSON_CreateString("ro"));
		cJSON_AddItemToArray(cJSON_GetObjectItem(c, "mounts"), m);
	}
	if (hooks)
		cJSON_AddItemToObject(c, "hooks", hooks);
	char *out = cJSON_Print(c);
	FILE *o = fopen(p, "w");
	assert_non_null(o);
	fputs(out, o);
	fclose(o);
	free(out);
	cJSON_Delete(c);
}

pid_t runc_start(const char *root, const char *dir, const char *name)
{
	char b[200], log[260];
	snprintf(b, sizeof b, "%s/%s", dir, name);
	snprintf(log, sizeof log, "%s/%s.log", dir, name);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execlp("runc", "runc", "--root", root, "run", "--bundle", b, name, (char *)NULL);
		_exit(127);
	}
	return pid;
}

int runc_wait(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void runc_read_log(const char *dir, const char *name, char *out, size_t len)
{
	char log[260];
	snprintf(log, sizeof log, "%s/%s.log", dir, name);
	FILE *in = fopen(log, "r");
	size_t n = in ? fread(out, 1, len - 1, in) : 0;
	out[n] = '\0';
	if (in)
		fclose(in);
}

void runc_remove_cgroups(const char *holder)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd,
	         "find /sys/fs/cgroup -depth -type d -path '*/%s*' -exec rmdir {} + 2>/dev/null",
	         holder);
	(void)!system(cmd);
}
