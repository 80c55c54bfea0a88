/*
 * meter/allocate.h: sharing an amount out exactly.
 *
 * An invoice line's amount is computed once; to show it per sandbox (the
 * FOCUS export) it is shared out in proportion to each sandbox's quantity by
 * the largest-remainder method, so the parts add up to the line to the
 * nano-dollar.
 */
#ifndef METER_ALLOCATE_H
#define METER_ALLOCATE_H

#include <stddef.h>
#include <stdint.h>

#include "meter/money.h"
#include "meter/status.h"

/*
 * out[i] = amount x weights[i] / sum(weights), rounded so that the out[i]
 * add up to amount exactly (remainders go to the largest fractions, ties to
 * the earlier). Weights must be >= 0 with a positive sum; n at most 100000.
 */
enum meter_status meter_allocate(meter_money amount, const int64_t *weights, size_t n,
                                 meter_money *out);

#endif
