-- Where each sandbox incarnation stood at the start of its last rating, so
-- rating its next rounds reads only the samples after that point instead of
-- its whole life (a sandbox that has run for a day has 8,640 samples at 10 s;
-- before this, every round re-read all of them).
--
-- A row summarises the incarnation's samples with ts <= upto, as the rollup's
-- read sees them: its first time in the whole history, and the time of its
-- last sample and its highest counter after the horizon (NULL when it has no
-- sample there), with what sample_seeds knew folded in. The rollup replaces a
-- sandbox's rows each time it rates it (api/rollup.c), all with one upto:
-- the start of the read. It uses them only while no sample at or before upto
-- can have come since: upto before the oldest new sample (the mark's from_ts)
-- and not after the new read's start; otherwise it reads the whole history,
-- as before.
CREATE TABLE rollup_checkpoints (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	upto timestamptz NOT NULL,
	first_ts timestamptz NOT NULL,
	last_ts timestamptz,
	max_cpu_usage_us bigint CHECK (max_cpu_usage_us >= 0),
	PRIMARY KEY (sandbox_id, incarnation),
	CHECK ((last_ts IS NULL) = (max_cpu_usage_us IS NULL))
);
COMMENT ON TABLE rollup_checkpoints IS 'per sandbox incarnation: its samples up to upto, summarised for the next rating';

GRANT SELECT, INSERT, UPDATE, DELETE ON rollup_checkpoints TO meter_api;
