#include "tests/support/run.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void drain(int fd, char *buf, size_t *used, bool *open_)
{
	char tmp[4096];
	ssize_t n = read(fd, tmp, sizeof tmp);
	if (n <= 0) {
		if (n == 0 || errno != EINTR)
			*open_ = false;
		return;
	}
	size_t room = RUN_OUT_MAX - 1 - *used;
	size_t take = (size_t)n < room ? (size_t)n : room;
	memcpy(buf + *used, tmp, take);
	*used += take;
	buf[*used] = '\0';
}

void run_program(const char *const argv[], const char *database_url, struct run_result *res)
{
	int po[2], pe[2];
	res->status = -1;
	res->out[0] = res->err[0] = '\0';
	if (pipe2(po, O_CLOEXEC) != 0)
		return;
	if (pipe2(pe, O_CLOEXEC) != 0) {
		close(po[0]);
		close(po[1]);
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_RDONLY);
		dup2(nul, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		if (database_url)
			setenv("DATABASE_URL", database_url, 1);
		else
			unsetenv("DATABASE_URL");
		execv(argv[0], (char *const *)argv);
		fprintf(stderr, "could not run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	size_t no = 0, ne = 0;
	bool oo = true, oe = true;
	while (pid > 0 && (oo || oe)) {
		struct pollfd p[2] = {{oo ? po[0] : -1, POLLIN, 0}, {oe ? pe[0] : -1, POLLIN, 0}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			drain(po[0], res->out, &no, &oo);
		if (p[1].revents)
			drain(pe[0], res->err, &ne, &oe);
	}
	close(po[0]);
	close(pe[0]);
	int st;
	if (pid > 0 && waitpid(pid, &st, 0) == pid)
		res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int run_lines(const char *s)
{
	int n = 0;
	for (const char *p = s; *p; p++)
		if (*p == '\n')
			n++;
	if (*s && s[strlen(s) - 1] != '\n')
		n++;
	return n;
}
