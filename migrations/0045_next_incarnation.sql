-- 0045_next_incarnation: a new incarnation of a sandbox from another host
-- than the running one's waits (meter_samples_arrived). It takes the sandbox
-- over once the running incarnation has ended or its host has sent nothing of
-- it for five minutes (a host gone): before, any bound host could start an
-- incarnation of another host's sandbox and end it, which stopped the
-- sandbox. The one waiting, the newest, and its first sample's time:
ALTER TABLE sandboxes ADD COLUMN next_incarnation bigint,
	ADD COLUMN next_incarnation_from timestamptz;
COMMENT ON COLUMN sandboxes.next_incarnation IS
	'an incarnation from another host that waits for the running one to end (or its host to go silent)';
COMMENT ON COLUMN sandboxes.next_incarnation_from IS
	'the first sample of next_incarnation';
