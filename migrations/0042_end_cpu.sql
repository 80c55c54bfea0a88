-- 0042_end_cpu: how the CPU counter of a collector's end is known.
--
-- A runtime may remove a sandbox's cgroup before the collector reads its last
-- counter; the collector then learns the last interval from the cgroup's
-- parent (collector/ends.h). The sample that ends an incarnation says which
-- way its counter came: 'read' from the cgroup after it emptied, 'parent'
-- exactly from its parent, 'estimated' a share of what its parent gained when
-- several went at once (their sum exact, each not), 'last' the last counter
-- read when nothing better was known (it may be short). NULL on every other
-- sample, and on ends written before. incarnation_ends keeps the way of each
-- incarnation's earliest end, and /metrics counts the inexact ones.
--
-- The collector sends it beside its rows, as a second argument of
-- meter_samples_ingest (migrations/functions/): meter_sample_row stays as it
-- is, so a collector of an earlier release goes on writing through the
-- one-argument form while its hosts are upgraded, and a collector of this one
-- writes to a database not yet migrated through the same (collector/writer.c
-- asks which there is).
ALTER TABLE samples ADD COLUMN end_cpu text
	CONSTRAINT samples_end_cpu CHECK (end_cpu IN ('read', 'parent', 'estimated', 'last'));
COMMENT ON COLUMN samples.end_cpu IS 'on the sample that ends its incarnation: how its CPU counter is known (read, parent, estimated, last)';

ALTER TABLE incarnation_ends ADD COLUMN end_cpu text;
COMMENT ON COLUMN incarnation_ends.end_cpu IS 'how the CPU counter of that end is known (samples.end_cpu)';
CREATE INDEX incarnation_ends_inexact ON incarnation_ends (end_cpu)
	WHERE end_cpu IN ('estimated', 'last');

ALTER TYPE meter_sample_arrival ADD ATTRIBUTE end_cpu text;
