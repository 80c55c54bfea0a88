-- 0007_sessions: people's sessions in the dashboard.
--
-- A person logs in once with an API key (a form, never a URL) and gets a
-- session cookie; or an operator hands out a one-time login link (meter
-- login-link), good for ten minutes and for one use. Only SHA-256 hashes of
-- session and link tokens are kept, as for keys.
CREATE TABLE sessions (
	token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
	kind text NOT NULL CHECK (kind IN ('session', 'link')),
	role text NOT NULL CHECK (role IN ('admin', 'account')),
	account_id meter_id REFERENCES accounts (id),
	created_at timestamptz NOT NULL DEFAULT now(),
	expires_at timestamptz NOT NULL,
	used_at timestamptz,
	CHECK ((role = 'admin') = (account_id IS NULL))
);
CREATE INDEX sessions_expiry ON sessions (expires_at);
GRANT SELECT, INSERT, UPDATE, DELETE ON sessions TO meter_api;
