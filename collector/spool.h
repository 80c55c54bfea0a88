/*
 * collector/spool.h: batches kept on disk while the database is away.
 *
 * An append-only file of records, each
 *
 *     magic "MSP1" | u32 length | u64 sequence | u32 CRC-32 | u32 header CRC | payload
 *
 * (little-endian; zlib's CRC-32: the first covers the sequence and the
 * payload, the header CRC the 20 bytes before it, so a length is trusted only
 * when its header is whole).
 * Every append is fsync'd before it counts. The file is bounded: an append
 * that would pass the bound is refused (SPOOL_FULL) and old records are
 * never overwritten. Replay sends the records in order and empties the file
 * only after every one of them was committed; a replay cut short sends them
 * again next time, which the idempotent write makes harmless. When the file
 * cannot be emptied (its disk turned read-only) the sent records are
 * forgotten by this process and stay in the file.
 *
 * Opening checks every record, one at a time. A torn last record (a crash in
 * mid-append: a header cut short, a whole header whose payload runs past the
 * end, a last payload with a bad CRC, or zeros to the end) is cut off with a
 * log line and the records before it are kept. Any other damage moves the
 * whole file aside to PATH.damaged-<time>-<pid>-<n> (never deleted) and starts
 * a new one. Replay, too, holds one record in memory at a time.
 */
#ifndef COLLECTOR_SPOOL_H
#define COLLECTOR_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPOOL_HEADER  24
#define SPOOL_REC_MAX (64 * 1024 * 1024)

struct spool {
	int fd;
	char path[1024];
	int64_t size; /* bytes in the file */
	int64_t max;  /* the bound */
	uint64_t next_seq;
	size_t records;
};

/* Opens (creating it and its folder) and checks the spool. */
bool spool_open(struct spool *s, const char *path, int64_t max, char *err, size_t errlen);
void spool_close(struct spool *s);

enum spool_result { SPOOL_OK, SPOOL_FULL, SPOOL_ERROR };

/* Appends one record and fsyncs it. On anything but SPOOL_OK the file is as it was. */
enum spool_result spool_append(struct spool *s, const char *data, size_t len, char *err,
                               size_t errlen);

/* Sends one record; false with err to stop the replay. */
typedef bool (*spool_send_fn)(void *ctx, const char *data, size_t len, char *err, size_t errlen);

/*
 * Sends every record in order; when all were sent, empties the file. False
 * (with err) when a send or the file failed: the records stay.
 */
bool spool_replay(struct spool *s, spool_send_fn send, void *ctx, char *err, size_t errlen);

/* ---- for tests and fuzzing ---- */

/*
 * Checks the records in buf (a whole spool file). Returns the length of the
 * good records at its start; *records and *last_seq describe them; *torn is
 * true when what follows them is a torn last record (cut it), false when it
 * is damage further in (or there is nothing after them).
 */
size_t spool_scan(const unsigned char *buf, size_t len, size_t *records, uint64_t *last_seq,
                  bool *torn);

#endif
