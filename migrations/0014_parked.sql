-- 0014_parked: no sandbox holds up another (rule 10).
--
-- A mark the rollup cannot rate is set aside in the same pass, with why:
--   waiting_kind 'unregistered': its samples wait for the sandbox to be
--     registered (by the platform, or from its cgroup's limits when its path
--     named an account), meter_samples_unattributed in /metrics;
--   waiting_kind 'parked': a rule or the database refused it (limits out of
--     range, a row that cannot be stored, ...), meter_rollup_parked.
-- waiting_since says since when (kept while it is woken and set aside again).
-- New samples wake a mark, as does registering the sandbox or an operator's
-- "meter parked retry"; nothing set aside is ever dropped.
--
-- retry_after: a mark whose rating failed for a passing reason (a deadlock,
-- a cancel) waits that long before it is taken again, so the rest of the
-- queue goes first.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_mark_samples.sql, as all functions are since
-- 0040.
ALTER TABLE rollup_queue
	ADD COLUMN waiting_kind text CHECK (waiting_kind IN ('unregistered', 'parked')),
	ADD COLUMN waiting_since timestamptz,
	ADD COLUMN retry_after timestamptz,
	ADD CONSTRAINT rollup_queue_waiting_kind CHECK ((waiting IS NULL) = (waiting_kind IS NULL));

-- Marks set aside before this migration waited for registration or were parked
-- with "cannot rate: ...".
UPDATE rollup_queue SET waiting_kind = CASE WHEN waiting LIKE 'cannot rate%' THEN 'parked'
                                            ELSE 'unregistered' END,
                        waiting_since = queued_at
WHERE waiting IS NOT NULL;
