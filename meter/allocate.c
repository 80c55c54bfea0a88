#include "meter/allocate.h"

#include <stdlib.h>

#include "meter/checked.h"

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
	meter_i128 *rem = malloc(n * sizeof *rem);
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
		rem[i] = num % sum;
		given += part[i];
	}
	/* The rest, one nano-dollar at a time, to the largest remainders. */
	for (meter_i128 left = mag - given; left > 0; left--) {
		size_t best = 0;
		for (size_t i = 1; i < n; i++)
			if (rem[i] > rem[best])
				best = i;
		part[best]++;
		rem[best] = -1;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = amount < 0 ? -part[i] : part[i];
	free(rem);
	free(part);
	return METER_OK;
}
