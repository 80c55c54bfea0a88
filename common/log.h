/*
 * common/log.h: one line per event on standard error.
 *
 *   2026-12-02T10:40:00.123Z meter-collector[812] warning: spool is full ...
 *
 * Daemons set timestamps; the CLI prints "meter: message" only. log_fatal
 * never returns (exit status 1). Messages follow PostgreSQL's style:
 * lowercase, no final period, what failed, on what and why.
 */
#ifndef COMMON_LOG_H
#define COMMON_LOG_H

#include <stdbool.h>

enum log_level { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

void log_init(const char *prog, enum log_level level, bool timestamps);

/* "error", "warn", "info", "debug" -> level; false for anything else. */
bool log_level_parse(const char *s, enum log_level *out);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn void log_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
