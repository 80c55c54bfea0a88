-- 0004_invoices: final invoices, stored once and never changed.
--
-- A month's invoice is a draft, recomputed from the rollups, until a grace
-- period after the month ends; the first time it is asked for after that it is
-- finalised: its rendered JSON and CSV are stored byte for byte, with the
-- quantities it billed. Usage of a month that arrives after its invoice is final
-- is billed as adjustment lines on a later invoice: the quantities a month has
-- now, less what final invoices have billed for it so far.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_refuse_change.sql, as all functions are since
-- 0040.

CREATE TABLE invoices (
	account_id meter_id NOT NULL REFERENCES accounts (id),
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	finalized_at timestamptz NOT NULL DEFAULT now(),
	total numeric(20, 9) NOT NULL,
	body_json text NOT NULL,
	body_csv text NOT NULL,
	PRIMARY KEY (account_id, month)
);

-- What each final invoice billed, by the month the usage belongs to (its own
-- month, or an earlier one for adjustments) and price plan.
CREATE TABLE invoice_quantities (
	account_id meter_id NOT NULL,
	month date NOT NULL,            -- the invoice
	for_month date NOT NULL,        -- the month the usage belongs to
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_billed_us bigint NOT NULL,
	memory_mgib_us bigint NOT NULL,
	wall_us bigint NOT NULL,
	covered_cpu_billed_us bigint NOT NULL,
	covered_memory_mgib_us bigint NOT NULL,
	covered_wall_us bigint NOT NULL,
	PRIMARY KEY (account_id, month, for_month, price_plan_id),
	FOREIGN KEY (account_id, month) REFERENCES invoices (account_id, month)
);

CREATE TRIGGER invoices_final BEFORE UPDATE OR DELETE ON invoices
	FOR EACH ROW EXECUTE FUNCTION meter_refuse_change();
CREATE TRIGGER invoice_quantities_final BEFORE UPDATE OR DELETE ON invoice_quantities
	FOR EACH ROW EXECUTE FUNCTION meter_refuse_change();
CREATE TRIGGER invoices_no_truncate BEFORE TRUNCATE ON invoices
	FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();

GRANT SELECT, INSERT ON invoices, invoice_quantities TO meter_api;
