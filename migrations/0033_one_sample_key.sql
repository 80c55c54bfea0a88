-- 0033_one_sample_key: samples keeps one B-tree, its primary key
-- (sandbox_id, ts, incarnation), instead of two: the key (sandbox_id,
-- incarnation, ts) and samples_sandbox_ts (sandbox_id, ts). The new key serves
-- both what they served: a sample written twice counts once (ON CONFLICT DO
-- NOTHING infers it by its columns, in any order), and the rollup's reads of a
-- sandbox by time (migrations/0029's meter_rollup_read and meter_rollup_after,
-- the API's sandbox peak, registration's first sample) are a range of it.
-- Every insert then updates one index, not two.
--
-- Existing partitions keep their rows; none is written twice or left out:
-- the key is rebuilt in place, in this migration's one transaction.
--
-- On PostgreSQL, samples is locked in SHARE mode (readers go on, writers
-- wait), each partition gets its new unique index, then the old key and index go and the
-- new indexes become the partitions' keys and the table's (ALTER ... USING
-- INDEX and ADD PRIMARY KEY, which adopts the partitions' keys instead of
-- building them again): the rows are read once, under a lock that lets the
-- API and the rollup read. The collector's write waits at most its
-- lock_timeout (collector/writer.c) for the build; the batch then goes to its
-- spool and is sent again once the migration committed.
--
-- On Citus, when samples is already distributed (a cluster placed before this
-- migration), the old key and index are dropped and the new key added by
-- ALTER TABLE, which Citus sends to every shard (one subcommand each, as it
-- requires); the table is locked for the key's build.
DO $$
DECLARE
	part regclass;
	distributed boolean := false;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
		EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition '
		        'WHERE logicalrelid = ''samples''::regclass)' INTO distributed;
	END IF;
	IF distributed THEN
		ALTER TABLE samples DROP CONSTRAINT samples_pkey;
		DROP INDEX samples_sandbox_ts;
		ALTER TABLE samples ADD PRIMARY KEY (sandbox_id, ts, incarnation);
		RETURN;
	END IF;

	-- samples and its partitions at once, before any index (as writers and 0031's
	-- drop do): a writer never holds samples while it waits for a partition.
	LOCK TABLE samples IN SHARE MODE;
	FOR part IN SELECT inhrelid::regclass FROM pg_inherits
	            WHERE inhparent = 'samples'::regclass ORDER BY 1 LOOP
		EXECUTE format('CREATE UNIQUE INDEX %I ON %s (sandbox_id, ts, incarnation)',
		               part::text || '_key', part);
	END LOOP;
	ALTER TABLE samples DROP CONSTRAINT samples_pkey;
	DROP INDEX samples_sandbox_ts;
	FOR part IN SELECT inhrelid::regclass FROM pg_inherits
	            WHERE inhparent = 'samples'::regclass ORDER BY 1 LOOP
		EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY USING INDEX %I',
		               part, part::text || '_pkey', part::text || '_key');
	END LOOP;
	ALTER TABLE samples ADD PRIMARY KEY (sandbox_id, ts, incarnation);
END
$$;
