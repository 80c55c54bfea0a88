/*
 * rollup/rollup.h: the rollup worker, turning samples into hourly usage.
 *
 * Each meter-api process runs one worker thread with a connection of its
 * own. It takes up to 64 marked sandboxes at a time from rollup_queue (FOR
 * UPDATE SKIP LOCKED, so several processes share the work without overlap),
 * re-rates with the meter/ library every interval of each that ends after
 * the hour holding its mark's from_ts, replaces those sandboxes' usage_hourly
 * rows from that hour on, keeps account_month in step, and removes the
 * marks: one transaction, whose statements each serve the whole batch.
 *
 * No sandbox holds up another (rule 10). A sandbox that cannot be rated is
 * set aside with the reason in the same transaction, the others' work kept;
 * a batch whose statement fails is rolled back and taken again one sandbox
 * per transaction, where what fails a lone sandbox parks it (kind 'parked',
 * meter_rollup_parked in /metrics, `meter parked`), or, for a passing
 * failure (a deadlock, a cancel), lets it wait 2 s while the queue goes on.
 * A sandbox that is not registered is registered from its cgroup's limits
 * when the path named its account and the limits are in range; otherwise its
 * mark waits with the reason (kind 'unregistered',
 * meter_samples_unattributed) until it is registered. New samples, a
 * registration or `meter parked retry` wake a mark set aside.
 *
 * The trial (rule 8): a batch that changes an account's usage at or before
 * the hour its grant ran out in (or that may have used the grant up) queues
 * the account in trial_queue; the end of each pass finds that hour again and
 * rates it from its samples, interval by interval, into trial_crossing and
 * trial_cover (migrations/0016).
 *
 * Which file of rollup/ does what: rollup/internal.h.
 */
#ifndef ROLLUP_ROLLUP_H
#define ROLLUP_ROLLUP_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rollup;

/*
 * Starts the worker thread (url NULL: common/db.h's choice). At its start
 * and every hour it also keeps the partitions of samples (rollup_upkeep)
 * with raw_retention_us (0: raw samples are never dropped), and makes final
 * the invoices due with invoice_grace_us.
 */
struct rollup *rollup_start(const char *url, int idle_ms, int64_t raw_retention_us,
                            int64_t invoice_grace_us);
void rollup_stop(struct rollup *w);

/*
 * One pass: rates every marked sandbox it can take, in batches. Returns how
 * many marks it took (rated or parked), or -1 with err when the database
 * failed. For tests and the worker.
 */
int rollup_pass(PGconn *c, char *err, size_t errlen);

/*
 * Upkeep: makes final the invoices due after grace_us (grace_us < 0: none;
 * common/invoicedb.h invoices_finalize_due, which announces each by webhook),
 * deletes webhook deliveries delivered or failed more than 30 days ago,
 * expired sessions and day-old usage listings, makes the monthly partitions
 * of samples through three months ahead, then (retention_us > 0) drops the
 * raw partitions that ended at least retention_us ago, are rolled up and
 * whose month is invoiced as final (migrations/functions/meter_drop_sample_partitions.sql). Logs
 * what it made and the partitions it dropped that held samples (empty ones go silently). False with
 * err when the database failed; a lock not had at once is tried next time.
 */
bool rollup_upkeep(PGconn *c, int64_t retention_us, int64_t grace_us, char *err, size_t errlen);

#endif
