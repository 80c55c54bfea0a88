-- 0022_keys_and_sessions: keys that can be listed and revoked, and sessions
-- that end with the key that opened them.
--
-- last_used_at is when a key last authenticated a request, noted at most once
-- a minute (api/queries.c Q_AUTH). A dashboard session opened by logging in
-- with a key names it (key_id): revoking the key (meter key revoke, DELETE
-- /v1/keys/{id}) deletes its sessions in the same transaction, and a session
-- whose key was revoked by hand is refused all the same. Sessions opened with
-- a one-time link name no key.
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
ALTER TABLE sessions ADD COLUMN key_id bigint REFERENCES api_keys (id) ON DELETE CASCADE;
CREATE INDEX sessions_key ON sessions (key_id) WHERE key_id IS NOT NULL;
