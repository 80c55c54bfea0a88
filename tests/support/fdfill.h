/*
 * tests/support/fdfill.h: running a test at the open file limit.
 *
 * fdfill_limit() lowers the soft RLIMIT_NOFILE of the test process (so
 * filling it is quick), fdfill_exhaust() opens /dev/null until only `spare`
 * descriptors are left, and fdfill_restore() closes those and puts the old
 * limit back. Call fdfill_restore() from a teardown so a failed test leaves
 * the process as it was; it is safe to call when nothing was changed.
 */
#ifndef TESTS_SUPPORT_FDFILL_H
#define TESTS_SUPPORT_FDFILL_H

#include <stdbool.h>

/* Sets the soft open file limit to limit; false (errno) when it cannot. */
bool fdfill_limit(unsigned limit);

/* Opens descriptors until spare are left below the limit; how many were opened. */
int fdfill_exhaust(int spare);

/* Closes the descriptors fdfill_exhaust() opened and restores the limit. */
void fdfill_restore(void);

#endif
