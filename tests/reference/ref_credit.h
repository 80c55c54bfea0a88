/*
 * ref_credit.h: rule 11 (credit grants), a second time.
 *
 * A deliberately plain implementation of how a month's invoice applies
 * credit grants, written apart from meter/ and sharing none of its code.
 * Money in nano-dollars, times in µs since the epoch, sums in 128-bit
 * integers.
 */
#ifndef REF_CREDIT_H
#define REF_CREDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef REF_NONE
#define REF_NONE INT64_MIN /* no expiry */
#endif

/* A grant: amount > 0; expires_us REF_NONE or after effective_us; lower priority first. */
struct ref_credit {
	int64_t id, amount, effective_us, expires_us, priority;
	bool voided;
};

/* A month [start_us, end_us), with what remains of its total after trial credit and adjustments. */
struct ref_credit_month {
	int64_t start_us, end_us, remaining;
	bool final;
	const int64_t *recorded; /* final: n takes by grant index */
};

/*
 * takes[i*n+j]: what month i takes of grant j. Returns false (and writes
 * nothing) on invalid input: amount <= 0, expires_us != REF_NONE &&
 * expires_us <= effective_us, end < start, a recorded take < 0, or finals
 * recording more of a grant than its amount.
 */
bool ref_credits(const struct ref_credit *g, size_t n, const struct ref_credit_month *m, size_t nm,
                 int64_t *takes);

#endif
