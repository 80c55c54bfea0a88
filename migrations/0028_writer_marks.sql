-- 0028_writer_marks: the collector's write sets going what its samples start
-- (the rollup mark, a sandbox the collector found, incarnations and their
-- ends, the concurrency notice) itself, in the statement that inserts them:
-- meter_samples_ingest inserts a batch (duplicates left out) and hands the
-- rows it inserted to meter_samples_arrived.
--
-- The statement trigger samples_mark stays for every other writer (psql, a
-- backfill, the tests) and calls the same meter_samples_arrived; it stands
-- aside while meter_samples_ingest runs (meter.samples_marked = 'on', for the
-- function's own run only). On Citus, which runs no statement trigger on a
-- distributed table, the ingest function is what marks (docs/scaling.md). The
-- insert is the function's too, as its owner: Citus refuses, in one
-- transaction, rows of co-located shards written by two roles (the
-- collector's samples, the owner's marks).
--
-- The functions it defined or changed are now defined in migrations/functions/, one file
-- each (meter_mark_samples.sql, meter_samples_arrived.sql,
-- meter_samples_ingest.sql, meter_sandbox_ends.sql), as all functions are
-- since 0040.

CREATE TYPE meter_sample_arrival AS (
	sandbox_id text,
	incarnation bigint,
	ts timestamptz,
	account_id text,
	cpu_limit_millicores bigint,
	memory_limit_bytes bigint,
	ended boolean
);

-- A sample as the collector sends it (collector/batch.h, BATCH_COLUMNS).
CREATE TYPE meter_sample_row AS (
	sandbox_id text,
	incarnation bigint,
	ts timestamptz,
	account_id text,
	host text,
	cpu_usage_us bigint,
	memory_current_bytes bigint,
	memory_peak_bytes bigint,
	memory_anon_kernel_bytes bigint,
	memory_limit_bytes bigint,
	cpu_limit_millicores bigint,
	ended boolean
);
