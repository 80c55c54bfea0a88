-- Partition upkeep by the service: monthly partitions of samples made ahead
-- of time, and raw partitions past their retention dropped, but only when
-- dropping cannot change a bill.
--
-- A partition may go when (1) it ended at least the retention ago, (2) every
-- sample in it has been rolled up (no rollup mark, pending or parked, reaches
-- into it), and (3) every account with usage in its month has that month's
-- invoice final. Before it goes, what rating later samples needs of it is
-- kept in sample_seeds: per sandbox incarnation its first and last time and
-- its highest counter (the series' seed, and the order of incarnations).
-- Partitions are dropped oldest first, so the raw data starts at one time,
-- sample_horizon.raw_from (the end of the last dropped partition that held
-- samples): the rollup never re-rates an hour before it.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_drop_sample_partitions.sql, as all functions are
-- since 0040.

CREATE TABLE sample_seeds (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	first_ts timestamptz NOT NULL,
	last_ts timestamptz NOT NULL,
	max_cpu_usage_us bigint NOT NULL CHECK (max_cpu_usage_us >= 0),
	PRIMARY KEY (sandbox_id, incarnation)
);
COMMENT ON TABLE sample_seeds IS 'what dropped sample partitions knew of each sandbox incarnation';

CREATE TABLE sample_horizon (
	only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	raw_from timestamptz NOT NULL
);
INSERT INTO sample_horizon (raw_from) VALUES ('-infinity');

GRANT SELECT ON sample_seeds, sample_horizon TO meter_api;

-- The service makes partitions itself: as the owner of samples.
