/*
 * collector/spool.h: batches kept on disk while the database is away.
 *
 * An append-only file of records. Without a key (--spool-key), each is
 *
 *     magic "MSP1" | u32 length | u64 sequence | u32 CRC-32 | u32 header CRC | payload
 *
 * (little-endian; zlib's CRC-32: the first covers the sequence and the
 * payload, the header CRC the 20 bytes before it, so a length is trusted only
 * when its header is whole). With a key, each record is signed:
 *
 *     magic "MSP2" | u32 length | u64 sequence | 16-byte spool id | u32 CRC-32 |
 *     32-byte HMAC-SHA256 | u32 header CRC | payload
 *
 * The HMAC, keyed with the host's key, covers the first 32 bytes (magic,
 * length, sequence, spool id) and the payload; the CRC-32 covers the sequence
 * and the payload, as in MSP1, and tells a record torn by a crash (a bad CRC)
 * from one forged or signed with another key (a good CRC, a bad HMAC); the
 * header CRC covers the 68 bytes before it. The spool id is drawn at random
 * when a record goes into an empty file and is the same in every record of
 * it; sequences there start at 1 and go up by one. So a record whose HMAC
 * does not verify, from another file (or from an earlier filling of this
 * one), repeated, moved, or with a record before it removed, does not pass;
 * nor does an MSP1 record in a collector with a key (unsigned records would
 * get round the key), nor an MSP2 record in one without. What the key cannot
 * tell: a whole file replaced by an older signed one (or the start of one), and
 * records removed from the end; the first sends batches already written, which
 * the idempotent write makes harmless (writer.h), the second loses them, as
 * deleting the file would. Anyone who can read the key can sign.
 *
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
 * log line and the records before it are kept. Any other damage, and every
 * signed record that does not verify, even the last, moves the whole file
 * aside to PATH.damaged-<time>-<pid>-<n> (never deleted) with a log line
 * saying why, and starts a new one. With a key, replay checks each record
 * again as it reads it (the file may have been written to since it was opened)
 * and sends only what it checked; one that fails is not sent, and the file is
 * moved aside the same way. Replay, too, holds one record in memory at a time.
 */
#ifndef COLLECTOR_SPOOL_H
#define COLLECTOR_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPOOL_HEADER        24 /* MSP1 */
#define SPOOL_SIGNED_HEADER 72 /* MSP2 */
#define SPOOL_ID_LEN        16
#define SPOOL_REC_MAX       (64 * 1024 * 1024)

/* The bounds of a key, in bytes. */
#define SPOOL_KEY_MIN 32
#define SPOOL_KEY_MAX 1024

struct spool_key {
	size_t len;
	unsigned char bytes[SPOOL_KEY_MAX];
};

/*
 * Reads a key: every byte of the file at path, as it is (32 random bytes,
 * `head -c 32 /dev/urandom`, or any longer secret up to SPOOL_KEY_MAX). The
 * file must be a regular file that belongs to this process's user or to root,
 * with no permission for group or others (chmod 600 or 400), and hold
 * SPOOL_KEY_MIN to SPOOL_KEY_MAX bytes; otherwise false with err saying which
 * (never the key's bytes) and key cleared.
 */
bool spool_key_load(const char *path, struct spool_key *key, char *err, size_t errlen);

/* Wipes a key from memory. */
void spool_key_clear(struct spool_key *key);

struct spool {
	int fd;
	char path[1024];
	int64_t size; /* bytes in the file */
	int64_t max;  /* the bound */
	uint64_t next_seq;
	size_t records;
	bool keyed;                     /* records signed (MSP2), with key */
	struct spool_key key;           /* a copy, wiped by spool_close */
	unsigned char id[SPOOL_ID_LEN]; /* keyed: the spool id of the records in the file */
};

/*
 * Opens (creating it and its folder) and checks the spool. key: NULL for
 * unsigned records (MSP1), else the key to sign and check them with (MSP2),
 * copied.
 */
bool spool_open(struct spool *s, const char *path, int64_t max, const struct spool_key *key,
                char *err, size_t errlen);
/* Closes the file and wipes the key; the spool may be closed again. */
void spool_close(struct spool *s);

enum spool_result { SPOOL_OK, SPOOL_FULL, SPOOL_ERROR };

/* Appends one record and fsyncs it. On anything but SPOOL_OK the file is as it was. */
enum spool_result spool_append(struct spool *s, const char *data, size_t len, char *err,
                               size_t errlen);

/* Sends one record; false with err to stop the replay. */
typedef bool (*spool_send_fn)(void *ctx, const char *data, size_t len, char *err, size_t errlen);

/*
 * Sends every record in order; when all were sent, empties the file. False
 * (with err) when a send or the file failed: the records stay. With a key, a
 * record that does not verify is not sent: the file is moved aside (logged),
 * the spool starts empty, and the result is true (nothing is left to send)
 * unless the new file could not be opened.
 */
bool spool_replay(struct spool *s, spool_send_fn send, void *ctx, char *err, size_t errlen);

/* ---- for tests and fuzzing ---- */

/*
 * Checks the records in buf (a whole spool file), unsigned ones when key is
 * NULL, else signed ones with it. Returns the length of the good records at
 * its start; *records and *last_seq describe them; *torn is true when what
 * follows them is a torn last record (cut it), false when it is damage
 * further in, or a record that does not verify (or there is nothing after
 * them).
 */
size_t spool_scan(const unsigned char *buf, size_t len, const struct spool_key *key,
                  size_t *records, uint64_t *last_seq, bool *torn);

#endif
