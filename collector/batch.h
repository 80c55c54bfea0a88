/*
 * collector/batch.h: samples as the text COPY reads.
 *
 * A batch is the rows of one or more rounds in PostgreSQL's COPY text format,
 * in the column order of BATCH_COLUMNS. The same bytes go to the database
 * and, when it is away, into the spool, so replaying a spool record is
 * sending it again. Ids and the host are validated before they get here, so
 * no field needs escaping. The buffer grows to the largest round and is then
 * reused: no allocation per sample in steady state.
 */
#ifndef COLLECTOR_BATCH_H
#define COLLECTOR_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collector/cgroup.h"
#include "collector/ends.h"

#define BATCH_COLUMNS                                                                              \
	"sandbox_id, incarnation, ts, account_id, host, cpu_usage_us, memory_current_bytes, "      \
	"memory_peak_bytes, memory_anon_kernel_bytes, memory_limit_bytes, cpu_limit_millicores, "  \
	"ended, end_cpu"

/* The columns of meter_sample_row, and of batches written before end_cpu was
 * one (spool records of an older collector). */
#define BATCH_COLUMNS_12                                                                           \
	"sandbox_id, incarnation, ts, account_id, host, cpu_usage_us, memory_current_bytes, "      \
	"memory_peak_bytes, memory_anon_kernel_bytes, memory_limit_bytes, cpu_limit_millicores, "  \
	"ended"

/* And before ended was one. */
#define BATCH_COLUMNS_OLD                                                                          \
	"sandbox_id, incarnation, ts, account_id, host, cpu_usage_us, memory_current_bytes, "      \
	"memory_peak_bytes, memory_anon_kernel_bytes, memory_limit_bytes, cpu_limit_millicores"

struct batch {
	char *buf;
	size_t len, cap;
	size_t rows;
	int64_t stamp_sec; /* the second whose text is in stamp */
	char stamp[24];    /* "YYYY-MM-DDTHH:MM:SS" of stamp_sec */
};

/* Appends one row. account may be "" (NULL). False when out of memory (batch unchanged). */
bool batch_add(struct batch *b, const char *sandbox, const char *account, int64_t incarnation,
               int64_t ts_us, const char *host, const struct cg_reading *r);

/*
 * Marks the last row added as the end of its incarnation (ended = true: its
 * cgroup emptied, or went away), with how its CPU counter is known (end_cpu,
 * collector/ends.h). Nothing when the batch is empty.
 */
void batch_mark_end(struct batch *b, enum end_cpu how);

/*
 * Keeps only the last row of each sandbox incarnation (the first two
 * columns), and every row that ends one, in their order. Counters are
 * cumulative, so those rows carry all the CPU the dropped ones did: what is
 * lost is resolution, never a microsecond or an end. False when out of
 * memory (the batch unchanged).
 */
bool batch_thin(struct batch *b);

/* Forgets the rows, keeps the buffer. */
void batch_clear(struct batch *b);

void batch_free(struct batch *b);

#endif
