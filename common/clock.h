/*
 * common/clock.h: the time now, for the programs (meter/ takes times as
 * values and reads no clock).
 */
#ifndef COMMON_CLOCK_H
#define COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* The clock id in µs (CLOCK_MONOTONIC for intervals, CLOCK_BOOTTIME for
 * /proc/uptime's). */
static inline int64_t clock_us(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The same in ns (CLOCK_MONOTONIC: the server's watchdog and deadlines). */
static inline int64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The wall clock (CLOCK_REALTIME) in µs since the Unix epoch: what samples,
 * stops and months are stamped and reckoned by. */
static inline int64_t clock_now_us(void)
{
	return clock_us(CLOCK_REALTIME);
}

#endif
