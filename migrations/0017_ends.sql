-- 0017_ends: the end the collector sees closes the sandbox (rule 9).
--
-- A cgroup that empties (cgroup.events "populated 0": its final sample) or
-- goes away (the collector then adds a sample at the moment it saw it go,
-- with the last counter it read) ends its incarnation: that sample carries
-- ended = true, written with the others in the same COPY and transaction, so
-- a spool replayed twice records it once. The trigger on samples keeps, per
-- sandbox:
--   - incarnation, incarnation_from: its newest incarnation and when it began
--     (its first sample); a newer one that begins runs again;
--   - incarnation_ends: the earliest end of each incarnation;
--   - stopped_at, ended_by: when the sandbox stopped, the earlier of the
--     platform's stop (platform_stopped_at, POST /v1/sandboxes/{id}/stop)
--     when it came after the newest incarnation began, and that
--     incarnation's end; NULL while it runs. The quota counts running
--     sandboxes by stopped_at IS NULL, as before.
-- It also registers a sandbox the collector found when its cgroup path names
-- an account that exists and its limits are in range, so it counts as
-- running from its first sample, not from the next rollup pass.
--
-- The functions it defined or changed are now defined in migrations/functions/, one file
-- each (meter_mark_samples.sql, meter_sandbox_ends.sql,
-- meter_sandbox_stop_written.sql), as all functions are since 0040.
ALTER TABLE samples ADD COLUMN ended boolean;
COMMENT ON COLUMN samples.ended IS 'true on the sample that ends its incarnation (the cgroup emptied or went away)';

CREATE TABLE incarnation_ends (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	ended_at timestamptz NOT NULL,
	PRIMARY KEY (sandbox_id, incarnation)
);
COMMENT ON TABLE incarnation_ends IS 'the earliest end the collector saw of each sandbox incarnation';

ALTER TABLE sandboxes
	ADD COLUMN platform_stopped_at timestamptz,
	ADD COLUMN ended_by text CHECK (ended_by IN ('platform', 'collector')),
	ADD COLUMN incarnation bigint,
	ADD COLUMN incarnation_from timestamptz;
UPDATE sandboxes SET platform_stopped_at = stopped_at, ended_by = 'platform'
WHERE stopped_at IS NOT NULL;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_ended_by CHECK ((stopped_at IS NULL) = (ended_by IS NULL));

CREATE TRIGGER sandboxes_stop_written BEFORE INSERT OR UPDATE ON sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_sandbox_stop_written();

GRANT SELECT ON incarnation_ends TO meter_api;
