#include "meter/allocate.h"

#include <stdlib.h>

#include "meter/checked.h"

/* A part's remainder before the rest is given out. */
struct share {
	meter_i128 rem;
	size_t index;
};

/* Largest remainder first; ties to the earlier part. */
static int by_remainder(const void *a, const void *b)
{
	const struct share *x = a, *y = b;
	if (x->rem != y->rem)
		return x->rem > y->rem ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

enum meter_status meter_allocate(meter_money amount, const int64_t *weights, size_t n,
                                 meter_money *out)
{
	meter_i128 sum = 0;
	if (n == 0 || n > 100000)
		return METER_ERANGE;
	for (size_t i = 0; i < n; i++) {
		if (weights[i] < 0)
			return METER_EINVAL;
		sum += weights[i];
	}
	if (sum <= 0)
		return METER_EINVAL;
	/* Work on the magnitude; the sign comes back at the end. */
	meter_i128 mag = amount < 0 ? -(meter_i128)amount : amount;
	struct share *rem = malloc(n * sizeof *rem);
	int64_t *part = malloc(n * sizeof *part);
	if (rem == NULL || part == NULL) {
		free(rem);
		free(part);
		return METER_EOVERFLOW;
	}
	meter_i128 given = 0;
	for (size_t i = 0; i < n; i++) {
		meter_i128 num = mag * weights[i];
		part[i] = (int64_t)(num / sum);
		rem[i] = (struct share){.rem = num % sum, .index = i};
		given += part[i];
	}
	/* The rest (fewer nano-dollars than parts), one each to the largest remainders:
	 * sorted once, so a hundred thousand rows cost n log n, not n x the rest. */
	qsort(rem, n, sizeof *rem, by_remainder);
	for (meter_i128 k = 0; k < mag - given; k++)
		part[rem[k].index]++;
	for (size_t i = 0; i < n; i++)
		out[i] = amount < 0 ? -part[i] : part[i];
	free(rem);
	free(part);
	return METER_OK;
}
