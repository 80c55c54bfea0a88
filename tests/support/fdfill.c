#include "tests/support/fdfill.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#define FDFILL_MAX 8192

static int fds[FDFILL_MAX];
static int nfds;
static struct rlimit saved;
static bool limited;

bool fdfill_limit(unsigned limit)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return false;
	if (!limited)
		saved = rl;
	rl.rlim_cur = limit;
	if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
		return false;
	limited = true;
	return true;
}

int fdfill_exhaust(int spare)
{
	int opened = 0;
	while (nfds < FDFILL_MAX) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		fds[nfds++] = fd;
		opened++;
	}
	for (; spare > 0 && nfds > 0; spare--, opened--)
		close(fds[--nfds]);
	return opened;
}

void fdfill_restore(void)
{
	int e = errno;
	while (nfds > 0)
		close(fds[--nfds]);
	if (limited)
		(void)setrlimit(RLIMIT_NOFILE, &saved);
	limited = false;
	errno = e;
}
