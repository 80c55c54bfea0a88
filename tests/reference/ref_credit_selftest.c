/*
 * ref_credit_selftest.c: hand-worked cases for ref_credits (rule 11). Every expected
 * figure is reasoned from the rule in the comment above it, not computed.
 * Money in nano-dollars (D is one dollar); months are small µs ranges:
 * M1 = [1000, 2000), M2 = [2000, 3000), M3 = [3000, 4000).
 */
#include "tests/reference/ref_credit.h"

#include <stdio.h>
#include <string.h>

#define D      ((int64_t)1000000000)
#define NONE   REF_NONE
#define MAXT   64
#define POISON ((int64_t)0x5a5a5a5a5a5a5a5a)

static int failures, cases;

/* A grant: id, amount, effective, expires, priority, voided. */
#define G(id, amt, eff, exp, prio, v)                                                              \
	{                                                                                          \
		(id), (amt), (eff), (exp), (prio), (v)                                             \
	}
/* A draft month and a final one. */
#define DRAFT(s, e, rem)                                                                           \
	{                                                                                          \
		(s), (e), (rem), false, NULL                                                       \
	}
#define FINAL(s, e, rec)                                                                           \
	{                                                                                          \
		(s), (e), 0, true, (rec)                                                           \
	}

static void expect(const char *name, const struct ref_credit *g, size_t n,
                   const struct ref_credit_month *m, size_t nm, const int64_t *want)
{
	int64_t got[MAXT];
	cases++;
	for (size_t k = 0; k < MAXT; k++)
		got[k] = POISON;
	if (!ref_credits(g, n, m, nm, got)) {
		printf("FAIL %s: rejected\n", name);
		failures++;
		return;
	}
	for (size_t k = 0; k < n * nm; k++) {
		if (got[k] != want[k]) {
			printf("FAIL %s: month %zu grant %zu: got %lld, want %lld\n", name, k / n,
			       k % n, (long long)got[k], (long long)want[k]);
			failures++;
			return;
		}
	}
	printf("ok   %s\n", name);
}

static void reject(const char *name, const struct ref_credit *g, size_t n,
                   const struct ref_credit_month *m, size_t nm)
{
	int64_t got[MAXT];
	cases++;
	for (size_t k = 0; k < MAXT; k++)
		got[k] = POISON;
	bool r = ref_credits(g, n, m, nm, got);
	bool untouched = true;
	for (size_t k = 0; k < MAXT; k++)
		untouched = untouched && got[k] == POISON;
	if (r || !untouched) {
		printf("FAIL %s: %s\n", name, r ? "accepted" : "wrote to takes");
		failures++;
		return;
	}
	printf("ok   %s\n", name);
}

int main(void)
{
	/*
	 * 1. Priority, lower first. A (prio 200, $5), B (prio 50, $3), month
	 * remaining $4. B first: min(3, 4) = 3, remains 1; A: min(5, 1) = 1.
	 * Takes [A, B] = [1, 3].
	 */
	{
		struct ref_credit g[] = {G(1, 5 * D, 0, NONE, 200, false),
		                         G(2, 3 * D, 0, NONE, 50, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 4 * D)};
		int64_t want[] = {1 * D, 3 * D};
		expect("priority", g, 2, m, 1, want);
	}
	/*
	 * 2. Expiry, soonest first, none last. Same priority and effective_at.
	 * A (no expiry), B (expires 5000), C (expires 2500), $5 each; remaining
	 * $7. C: 5, remains 2; B: 2, remains 0; A: 0. Takes [0, 2, 5].
	 */
	{
		struct ref_credit g[] = {G(1, 5 * D, 0, NONE, 100, false),
		                         G(2, 5 * D, 0, 5000, 100, false),
		                         G(3, 5 * D, 0, 2500, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 7 * D)};
		int64_t want[] = {0, 2 * D, 5 * D};
		expect("expiry order, none last", g, 3, m, 1, want);
	}
	/*
	 * 2b. None last, whatever the input order: B (expires 5000, id 2) given
	 * first, A (no expiry, id 1) second, $5 each, same priority and
	 * effective_at; remaining $7. B: 5, remains 2; A: 2 (its lower id does
	 * not matter: expiry decides first). Takes [B, A] = [5, 2].
	 */
	{
		struct ref_credit g[] = {G(2, 5 * D, 0, 5000, 100, false),
		                         G(1, 5 * D, 0, NONE, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 7 * D)};
		int64_t want[] = {5 * D, 2 * D};
		expect("none last, listed after", g, 2, m, 1, want);
	}
	/*
	 * 3. effective_at breaks a tie of priority and expiry. A (eff 500), B
	 * (eff 100), $4 each, no expiry; remaining $5. B: 4, A: 1. Takes [1, 4].
	 */
	{
		struct ref_credit g[] = {G(1, 4 * D, 500, NONE, 100, false),
		                         G(2, 4 * D, 100, NONE, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 5 * D)};
		int64_t want[] = {1 * D, 4 * D};
		expect("effective_at tie-break", g, 2, m, 1, want);
	}
	/*
	 * 4. id breaks a full tie. A (id 9) before B (id 3) in the input, all
	 * else equal, expiring 9000; $4 each, remaining $5. id 3 first: B 4, A 1.
	 * Takes [1, 4].
	 */
	{
		struct ref_credit g[] = {G(9, 4 * D, 100, 9000, 100, false),
		                         G(3, 4 * D, 100, 9000, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 5 * D)};
		int64_t want[] = {1 * D, 4 * D};
		expect("id tie-break", g, 2, m, 1, want);
	}
	/*
	 * 5. Priority beats expiry, expiry beats effective_at. A (prio 100,
	 * expires 2500, eff 0), B (prio 50, no expiry, eff 900), C (prio 50,
	 * expires 8000, eff 999); $2 each; remaining $5. Prio 50 first: C
	 * (expires) before B (none): C 2, B 2, then A 1. Takes [1, 2, 2].
	 */
	{
		struct ref_credit g[] = {G(1, 2 * D, 0, 2500, 100, false),
		                         G(2, 2 * D, 900, NONE, 50, false),
		                         G(3, 2 * D, 999, 8000, 50, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 5 * D)};
		int64_t want[] = {1 * D, 2 * D, 2 * D};
		expect("keys in order", g, 3, m, 1, want);
	}
	/*
	 * 6. A grant larger than a month carries into the next draft; months
	 * given newest first to show drafts go oldest first. One grant $10;
	 * m[0] = M2 remaining $6, m[1] = M1 remaining $6. M1 first: 6, balance
	 * 4; M2: min(4, 6) = 4. Takes [M2] = 4, [M1] = 6.
	 */
	{
		struct ref_credit g[] = {G(1, 10 * D, 0, NONE, 100, false)};
		struct ref_credit_month m[] = {DRAFT(2000, 3000, 6 * D), DRAFT(1000, 2000, 6 * D)};
		int64_t want[] = {4 * D, 6 * D};
		expect("carry into next draft, oldest first", g, 1, m, 2, want);
	}
	/*
	 * 7. Expired before the month starts: skipped. A (prio 1) expires 1000,
	 * exactly M1's start, so not > start: skipped. C (prio 1) expires 900:
	 * skipped. B (prio 2) expires 1001: usable. $5 each, remaining $3.
	 * Takes [0, 3, 0].
	 */
	{
		struct ref_credit g[] = {G(1, 5 * D, 0, 1000, 1, false),
		                         G(2, 5 * D, 0, 1001, 2, false),
		                         G(3, 5 * D, 0, 900, 1, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 3 * D)};
		int64_t want[] = {0, 3 * D, 0};
		expect("expired before month skipped", g, 3, m, 1, want);
	}
	/*
	 * 8. Effective after the month ends: skipped there, used later. A (prio
	 * 1) eff 2000 (= M1's end, not < end), B (prio 2) eff 1999; $5 each, no
	 * expiry. M1 remaining $3: A not usable although first; B 3 (balance 2).
	 * M2 remaining $8: both usable, A first: 5; B: 2; 1 left over.
	 * Takes M1 [0, 3], M2 [5, 2].
	 */
	{
		struct ref_credit g[] = {G(1, 5 * D, 2000, NONE, 1, false),
		                         G(2, 5 * D, 1999, NONE, 2, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 3 * D), DRAFT(2000, 3000, 8 * D)};
		int64_t want[] = {0, 3 * D, 5 * D, 2 * D};
		expect("effective after month skipped", g, 2, m, 2, want);
	}
	/*
	 * 9. A void. A (prio 1, $5) voided; B (prio 2, $5). M1 final recorded
	 * A 2, B 0: kept as recorded. M2 draft remaining $4: A voided, none;
	 * B 4. Takes M1 [2, 0], M2 [0, 4].
	 */
	{
		static const int64_t rec[] = {2 * D, 0};
		struct ref_credit g[] = {G(1, 5 * D, 0, NONE, 1, true),
		                         G(2, 5 * D, 0, NONE, 2, false)};
		struct ref_credit_month m[] = {FINAL(1000, 2000, rec), DRAFT(2000, 3000, 4 * D)};
		int64_t want[] = {2 * D, 0, 0, 4 * D};
		expect("void", g, 2, m, 2, want);
	}
	/*
	 * 10. Finals' records reduce a draft's balance, whichever month they
	 * are. One grant $10. M1 draft remaining $8; M2 final recorded 7; M3
	 * final recorded 0. Balance for M1 = 10 - 7 - 0 = 3: takes 3.
	 * Takes M1 [3], M2 [7], M3 [0].
	 */
	{
		static const int64_t rec7[] = {7 * D}, rec0[] = {0};
		struct ref_credit g[] = {G(1, 10 * D, 0, NONE, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 8 * D), FINAL(2000, 3000, rec7),
		                               FINAL(3000, 4000, rec0)};
		int64_t want[] = {3 * D, 7 * D, 0};
		expect("finals reduce later and earlier drafts", g, 1, m, 3, want);
	}
	/*
	 * 11. Finals used a grant up exactly: the next one takes over. A (prio 1,
	 * $4), B (prio 2, $4). M1 final recorded A 4, B 1. M2 draft remaining $5:
	 * A balance 0, skipped; B balance 3: takes 3. Takes M1 [4, 1], M2 [0, 3].
	 */
	{
		static const int64_t rec[] = {4 * D, 1 * D};
		struct ref_credit g[] = {G(1, 4 * D, 0, NONE, 1, false),
		                         G(2, 4 * D, 0, NONE, 2, false)};
		struct ref_credit_month m[] = {FINAL(1000, 2000, rec), DRAFT(2000, 3000, 5 * D)};
		int64_t want[] = {4 * D, 1 * D, 0, 3 * D};
		expect("final used a grant up", g, 2, m, 2, want);
	}
	/*
	 * 12. Remaining <= 0 takes nothing. One grant $4. M1 remaining 0, M2
	 * remaining -$5: nothing. M3 remaining $10: the whole 4.
	 * Takes [0], [0], [4].
	 */
	{
		struct ref_credit g[] = {G(1, 4 * D, 0, NONE, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 0), DRAFT(2000, 3000, -5 * D),
		                               DRAFT(3000, 4000, 10 * D)};
		int64_t want[] = {0, 0, 4 * D};
		expect("remaining <= 0", g, 1, m, 3, want);
	}
	/*
	 * 13. Exact to the nano-dollar. A (prio 1) $1.000000001, B (prio 2)
	 * $0.5; remaining $1.5 = 1500000000. A: 1000000001, remains 499999999;
	 * B: min(500000000, 499999999) = 499999999. Takes [1000000001, 499999999].
	 */
	{
		struct ref_credit g[] = {G(1, 1000000001, 0, NONE, 1, false),
		                         G(2, 500000000, 0, NONE, 2, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 1500000000)};
		int64_t want[] = {1000000001, 499999999};
		expect("exact nano-dollars", g, 2, m, 1, want);
	}
	/*
	 * 14. Large figures. A, B $INT64_MAX each, prio 1 and 2; M1 remaining
	 * INT64_MAX: A all of it, B 0. M2 remaining 7: A balance 0, B 7.
	 * Takes M1 [MAX, 0], M2 [0, 7].
	 */
	{
		struct ref_credit g[] = {G(1, INT64_MAX, 0, NONE, 1, false),
		                         G(2, INT64_MAX, 0, NONE, 2, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 2000, INT64_MAX), DRAFT(2000, 3000, 7)};
		int64_t want[] = {INT64_MAX, 0, 0, 7};
		expect("large figures", g, 2, m, 2, want);
	}
	/*
	 * 15. Usable bounds and an empty month. A expires 1001 (> M1 start 1000),
	 * eff 999 (< end); the month [1000, 1000) has start == end, still valid:
	 * eff 999 < 1000, expires 1001 > 1000: usable, remaining $2, A $3: 2.
	 * Takes [2].
	 */
	{
		struct ref_credit g[] = {G(1, 3 * D, 999, 1001, 100, false)};
		struct ref_credit_month m[] = {DRAFT(1000, 1000, 2 * D)};
		int64_t want[] = {2 * D};
		expect("bounds, empty month", g, 1, m, 1, want);
	}
	/* 16. No grants, no months: nothing to take, accepted. */
	{
		struct ref_credit_month m[] = {DRAFT(1000, 2000, 2 * D)};
		expect("no grants", NULL, 0, m, 1, NULL);
	}

	/* Invalid inputs: each rejected, takes untouched. */
	{
		struct ref_credit_month m1[] = {DRAFT(1000, 2000, D)};
		struct ref_credit zero[] = {G(1, 0, 0, NONE, 100, false)};
		reject("amount 0", zero, 1, m1, 1);
		struct ref_credit neg[] = {G(1, -1, 0, NONE, 100, false)};
		reject("amount < 0", neg, 1, m1, 1);
		struct ref_credit same[] = {G(1, D, 500, 500, 100, false)};
		reject("expires == effective", same, 1, m1, 1);
		struct ref_credit before[] = {G(1, D, 500, 400, 100, false)};
		reject("expires < effective", before, 1, m1, 1);
		struct ref_credit ok[] = {G(1, 10 * D, 0, NONE, 100, false)};
		struct ref_credit_month back[] = {DRAFT(2000, 1999, D)};
		reject("end < start", ok, 1, back, 1);
		static const int64_t negrec[] = {-1};
		struct ref_credit_month fneg[] = {FINAL(1000, 2000, negrec)};
		reject("recorded < 0", ok, 1, fneg, 1);
		static const int64_t six[] = {6 * D};
		struct ref_credit_month over[] = {FINAL(1000, 2000, six), FINAL(2000, 3000, six),
		                                  DRAFT(3000, 4000, D)};
		reject("finals over amount (6 + 6 > 10)", ok, 1, over, 3);
		struct ref_credit big[] = {G(1, INT64_MAX, 0, NONE, 100, false)};
		static const int64_t rmax[] = {INT64_MAX}, r1[] = {1};
		struct ref_credit_month wrap[] = {FINAL(1000, 2000, rmax), FINAL(2000, 3000, r1)};
		reject("finals over INT64_MAX amount, no wrap", big, 1, wrap, 2);
	}

	printf("%d cases, %d failed\n", cases, failures);
	return failures != 0;
}
