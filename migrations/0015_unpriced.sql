-- 0015_unpriced: intervals that end before any price plan (rule 6).
--
-- Such an interval is not billed, and the sandbox's other intervals are
-- billed as usual (before, the whole sandbox was parked for good: a host
-- booted with its clock behind lost all its later usage). The rollup keeps
-- them here per sandbox and hour, replaced with usage_hourly's rows, so the
-- operator can see them: meter_unpriced_intervals_total in /metrics, and a
-- log line with the sandbox when it is rated.
CREATE TABLE usage_unpriced (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	hour timestamptz NOT NULL,
	intervals bigint NOT NULL CHECK (intervals > 0),
	wall_us bigint NOT NULL CHECK (wall_us >= 0),
	cpu_measured_us bigint NOT NULL CHECK (cpu_measured_us >= 0),
	PRIMARY KEY (sandbox_id, hour)
);
COMMENT ON TABLE usage_unpriced IS 'intervals ending before any price plan: counted, never billed';

GRANT SELECT, INSERT, UPDATE, DELETE ON usage_unpriced TO meter_api;
