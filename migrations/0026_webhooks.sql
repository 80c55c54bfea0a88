-- 0026_webhooks: events delivered to HTTP endpoints, signed the Standard
-- Webhooks way, at least once.
--
-- An endpoint (POST /v1/webhooks) names a URL, the events it wants and
-- optionally one account (NULL: every account). When an event happens, the
-- transaction that made it writes one delivery per matching endpoint (the
-- outbox): a limit crossing when its limit_notices row is inserted, an
-- invoice when its final row is inserted. Nothing is sent from inside a
-- transaction: meter-api's delivery worker (api/webhook.c) takes due
-- deliveries with FOR UPDATE SKIP LOCKED, so several processes share them,
-- and leases each by moving next_at past its timeout while it is in flight;
-- a process that dies mid-send leaves the delivery due again when the lease
-- ends. Every attempt is recorded in webhook_attempts.
--
-- The body is fixed when the event happens, so every attempt sends (and
-- signs) the same bytes under the same webhook-id (the delivery's id).
--
-- For Citus (docs/scaling.md): endpoints are a reference table; deliveries
-- and attempts are keyed by account first, to be co-located with the
-- limit_notices and invoices whose triggers write them.
--
-- The functions it defined or changed are now defined in migrations/functions/, one file
-- each (meter_webhook_event.sql, meter_webhook_invoice.sql,
-- meter_webhook_limit.sql), as all functions are since 0040.
CREATE TABLE webhook_endpoints (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	url text NOT NULL CHECK (length(url) <= 2048 AND url ~ '^https?://[^[:space:][:cntrl:]]+$'),
	events text[] NOT NULL CHECK (cardinality(events) > 0 AND events <@ ARRAY[
		'limit.trial_exhausted', 'limit.concurrency_reached', 'limit.spend_cap_reached',
		'invoice.finalized']),
	account_id meter_id REFERENCES accounts (id),
	-- the signing key: base64 of 32 random bytes, shown once as "whsec_" + it
	secret text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
	account_id meter_id NOT NULL,
	id text NOT NULL,    -- "msg_" + 32 hex digits: the webhook-id header
	endpoint_id bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
	type text NOT NULL,
	body text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
	next_at timestamptz NOT NULL DEFAULT now(), -- pending: due then (or leased until then)
	step integer NOT NULL DEFAULT 0,     -- attempts since the back-off schedule began
	attempts integer NOT NULL DEFAULT 0, -- attempts in all
	PRIMARY KEY (account_id, id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (endpoint_id) WHERE state = 'failed';

CREATE TABLE webhook_attempts (
	account_id meter_id NOT NULL,
	delivery_id text NOT NULL,
	n integer NOT NULL,
	at timestamptz NOT NULL DEFAULT now(),
	status integer,      -- the HTTP status; NULL when no answer came
	error text,          -- why it failed; NULL for a 2xx
	duration_ms integer NOT NULL,
	PRIMARY KEY (account_id, delivery_id, n),
	FOREIGN KEY (account_id, delivery_id) REFERENCES webhook_deliveries (account_id, id)
		ON DELETE CASCADE
);

CREATE TRIGGER limit_notices_webhooks AFTER INSERT ON limit_notices
	FOR EACH ROW EXECUTE FUNCTION meter_webhook_limit();

CREATE TRIGGER invoices_webhooks AFTER INSERT ON invoices
	FOR EACH ROW EXECUTE FUNCTION meter_webhook_invoice();

GRANT SELECT, INSERT, DELETE ON webhook_endpoints TO meter_api;
GRANT SELECT, INSERT, UPDATE ON webhook_deliveries TO meter_api;
GRANT SELECT, INSERT ON webhook_attempts TO meter_api;
