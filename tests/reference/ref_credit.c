/*
 * Rule 11, the plain way (see ref_credit.h). No sorting: each draft month,
 * oldest first, repeatedly picks the best usable grant with something left
 * by a pairwise "comes before", and takes what it can of it. A grant's
 * balance is read straight off takes: its amount less everything any month
 * has taken of it so far (finals' records, and the drafts already done).
 */
#include "tests/reference/ref_credit.h"

__extension__ typedef __int128 ref_int;

/* Whether grant a comes before grant b: priority, expiry (none last), effective_at, id. */
static bool comes_before(const struct ref_credit *a, size_t ia, const struct ref_credit *b,
                         size_t ib)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	if (a->expires_us != b->expires_us) {
		if (a->expires_us == REF_NONE)
			return false;
		if (b->expires_us == REF_NONE)
			return true;
		return a->expires_us < b->expires_us;
	}
	if (a->effective_us != b->effective_us)
		return a->effective_us < b->effective_us;
	if (a->id != b->id)
		return a->id < b->id;
	return ia < ib; /* the same grant twice: keep it deterministic */
}

/* Whether month a is older than month b: start, then end, then place in the input. */
static bool older(const struct ref_credit_month *m, size_t a, size_t b)
{
	if (m[a].start_us != m[b].start_us)
		return m[a].start_us < m[b].start_us;
	if (m[a].end_us != m[b].end_us)
		return m[a].end_us < m[b].end_us;
	return a < b;
}

/* Whether grant g may apply to draft month mo. */
static bool usable(const struct ref_credit *g, const struct ref_credit_month *mo)
{
	if (g->voided)
		return false;
	if (!(g->effective_us < mo->end_us))
		return false;
	return g->expires_us == REF_NONE || g->expires_us > mo->start_us;
}

/* What is left of grant j: its amount less every take written so far. */
static ref_int balance(const struct ref_credit *g, size_t n, size_t nm, const int64_t *takes,
                       size_t j)
{
	ref_int left = g[j].amount;
	for (size_t k = 0; k < nm; k++)
		left -= takes[k * n + j];
	return left;
}

static bool valid(const struct ref_credit *g, size_t n, const struct ref_credit_month *m, size_t nm)
{
	for (size_t j = 0; j < n; j++) {
		if (g[j].amount <= 0)
			return false;
		if (g[j].expires_us != REF_NONE && g[j].expires_us <= g[j].effective_us)
			return false;
	}
	for (size_t i = 0; i < nm; i++) {
		if (m[i].end_us < m[i].start_us)
			return false;
		if (m[i].final && n > 0 && m[i].recorded == NULL)
			return false;
	}
	for (size_t j = 0; j < n; j++) {
		ref_int sum = 0;
		for (size_t i = 0; i < nm; i++) {
			if (!m[i].final)
				continue;
			if (m[i].recorded[j] < 0)
				return false;
			sum += m[i].recorded[j];
		}
		if (sum > g[j].amount)
			return false;
	}
	return true;
}

bool ref_credits(const struct ref_credit *g, size_t n, const struct ref_credit_month *m, size_t nm,
                 int64_t *takes)
{
	if (!valid(g, n, m, nm))
		return false;

	/* finals take what they recorded; drafts start with nothing */
	for (size_t i = 0; i < nm; i++)
		for (size_t j = 0; j < n; j++)
			takes[i * n + j] = m[i].final ? m[i].recorded[j] : 0;

	/* the drafts, oldest first: each time the oldest one after the last done */
	bool any_done = false;
	size_t done = 0;
	for (;;) {
		bool found = false;
		size_t i = 0;
		for (size_t k = 0; k < nm; k++) {
			if (m[k].final)
				continue;
			if (any_done && !older(m, done, k))
				continue;
			if (!found || older(m, k, i)) {
				i = k;
				found = true;
			}
		}
		if (!found)
			break;
		any_done = true;
		done = i;

		ref_int remaining = m[i].remaining;
		while (remaining > 0) {
			/* the best usable grant with a balance left */
			bool have = false;
			size_t best = 0;
			ref_int best_left = 0;
			for (size_t j = 0; j < n; j++) {
				if (!usable(&g[j], &m[i]))
					continue;
				ref_int left = balance(g, n, nm, takes, j);
				if (left <= 0)
					continue;
				if (!have || comes_before(&g[j], j, &g[best], best)) {
					best = j;
					best_left = left;
					have = true;
				}
			}
			if (!have)
				break;
			/* min(its balance, what remains): each grant is taken once a month,
			 * since after it either its balance or what remains is zero */
			ref_int take = best_left < remaining ? best_left : remaining;
			takes[i * n + best] += (int64_t)take;
			remaining -= take;
		}
	}
	return true;
}
