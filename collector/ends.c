#include "collector/ends.h"

#include "meter/checked.h"

const char *end_cpu_name(enum end_cpu how)
{
	switch (how) {
	case END_READ:
		return "read";
	case END_PARENT:
		return "parent";
	case END_ESTIMATED:
		return "estimated";
	case END_LAST:
		break;
	}
	return "last";
}

/* The most CPU a child could have used in elapsed µs: every CPU, 10 ms more
 * for the clocks' and the kernel's accounting's slack. */
static int64_t most(int64_t elapsed_us, int ncpu)
{
	int64_t e = elapsed_us > 0 ? elapsed_us : 0;
	return (e + 10000) * (ncpu > 0 ? ncpu : 1);
}

/* What its recent rate says it used: its weight in a share. */
static int64_t guess(const struct end_share *e)
{
	if (e->rate < 0 || e->elapsed_us <= 0)
		return 0;
	return (int64_t)((meter_i128)e->rate * e->elapsed_us / 1000000);
}

static int64_t weight(const struct end_share *e, bool by_time)
{
	if (by_time)
		return e->elapsed_us > 0 ? e->elapsed_us : 1;
	return guess(e);
}

void ends_share(struct end_share *e, size_t n, int64_t unclaimed, bool busy, int ncpu)
{
	if (n == 0)
		return;
	if (unclaimed < 0) { /* nothing to go by but the last reading */
		for (size_t i = 0; i < n; i++) {
			e[i].cpu = e[i].base;
			e[i].how = END_LAST;
		}
		return;
	}
	if (n == 1 && !busy && unclaimed <= most(e[0].elapsed_us, ncpu)) {
		e[0].cpu = e[0].base + unclaimed;
		e[0].how = END_PARENT;
		return;
	}
	/* Shared: by recent rates (by time when none is known), each at most what it
	 * could have used. The parent's own CPU (busy) is not theirs: then each gets
	 * what its rate says, the lot at most what the parent gained. */
	bool by_time = true;
	for (size_t i = 0; i < n; i++)
		if (guess(&e[i]) > 0)
			by_time = false;
	int64_t sum = 0, cap_sum = 0;
	for (size_t i = 0; i < n; i++) {
		sum += weight(&e[i], by_time);
		cap_sum += most(e[i].elapsed_us, ncpu);
	}
	int64_t pot = unclaimed < cap_sum ? unclaimed : cap_sum;
	if (busy)
		pot = by_time ? 0 : sum < pot ? sum : pot; /* no rate: nothing known */
	int64_t given = 0;
	for (size_t i = 0; i < n; i++) {
		int64_t d = sum > 0 ? (int64_t)((meter_i128)pot * weight(&e[i], by_time) / sum) : 0;
		int64_t cap = most(e[i].elapsed_us, ncpu);
		d = d < cap ? d : cap;
		e[i].cpu = e[i].base + d;
		e[i].how = END_ESTIMATED;
		given += d;
	}
	/* what rounding down left, to the first with room */
	for (size_t i = 0; i < n && given < pot; i++) {
		int64_t room = most(e[i].elapsed_us, ncpu) - (e[i].cpu - e[i].base);
		int64_t add = pot - given < room ? pot - given : room;
		if (add > 0) {
			e[i].cpu += add;
			given += add;
		}
	}
}
