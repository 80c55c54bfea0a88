#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "meter/timefmt.h"

static const char *log_prog = "meter";
static enum log_level log_max = LOG_INFO;
static bool log_stamps;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

void log_init(const char *prog, enum log_level level, bool timestamps)
{
	log_prog = prog;
	log_max = level;
	log_stamps = timestamps;
}

bool log_level_parse(const char *s, enum log_level *out)
{
	static const char *const names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (enum log_level)i;
			return true;
		}
	return false;
}

static void vlog(enum log_level level, const char *fmt, va_list ap)
        __attribute__((format(printf, 2, 0)));
static void vlog(enum log_level level, const char *fmt, va_list ap)
{
	char line[2048];
	int n = 0;
	if (log_stamps) {
		struct timespec ts;
		char when[METER_TIME_BUF];
		clock_gettime(CLOCK_REALTIME, &ts);
		/* Milliseconds are enough in a log line. */
		meter_time_format((int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000000 * 1000, when,
		                  sizeof when);
		n = snprintf(line, sizeof line, "%s %s[%d] %s: ", when, log_prog, (int)getpid(),
		             level_names[level]);
	} else {
		n = snprintf(line, sizeof line, "%s: %s", log_prog,
		             level == LOG_ERROR  ? ""
		             : level == LOG_WARN ? "warning: "
		                                 : "");
	}
	if (n < 0 || (size_t)n >= sizeof line)
		n = 0;
	char msg[2048], out[sizeof line];
	vsnprintf(msg, sizeof msg, fmt, ap);
	/* One line a message, whatever it quotes: a newline is written \n and any
	 * other control character \xHH (a newline in a cgroup's name, an escape
	 * sequence), so nothing a name holds can forge a line of its own or drive
	 * a terminal. */
	size_t at = (size_t)n, len = strlen(msg);
	while (len && (msg[len - 1] == '\n' || msg[len - 1] == '\r'))
		msg[--len] = '\0'; /* a libpq message ends in one */
	memcpy(out, line, at);
	for (const unsigned char *p = (const unsigned char *)msg; *p && at + 5 < sizeof out; p++) {
		if (*p == '\n') {
			out[at++] = '\\';
			out[at++] = 'n';
		} else if (*p < 0x20 || *p == 0x7f) {
			static const char hex[] = "0123456789abcdef";
			out[at++] = '\\';
			out[at++] = 'x';
			out[at++] = hex[*p >> 4];
			out[at++] = hex[*p & 15];
		} else {
			out[at++] = (char)*p;
		}
	}
	out[at] = '\0';
	fprintf(stderr, "%s\n", out);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > log_max)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void log_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(LOG_ERROR, fmt, ap);
	va_end(ap);
	exit(1);
}
