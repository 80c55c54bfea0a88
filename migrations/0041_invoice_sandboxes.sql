-- 0041_invoice_sandboxes: what each sandbox used of a final invoice's month,
-- as it stood when the invoice was made final.
--
-- A month's FOCUS export shares each usage line of its invoice out among the
-- sandboxes, in proportion to their quantities (common/export.c). Usage of a
-- final month that comes late is billed on a later invoice, but it changes
-- the month's hours; shared out over them, a final month's export would
-- change. So the invoice keeps its sandboxes' quantities (from sandbox_month)
-- beside the quantities it billed (invoice_quantities), in the transaction
-- that makes it final, and a final month's export is made from both: it
-- never changes and adds up to the invoice.
CREATE TABLE invoice_sandboxes (
	account_id meter_id NOT NULL,
	month date NOT NULL,
	sandbox_id meter_id NOT NULL,
	price_plan_id integer NOT NULL,
	cpu_measured_us numeric NOT NULL,
	cpu_billed_us numeric NOT NULL,
	memory_mgib_us numeric NOT NULL,
	PRIMARY KEY (account_id, month, sandbox_id, price_plan_id)
);

-- As invoice_quantities: no change once written, rows only in the transaction
-- that made their invoice final (migrations 0004 and 0008).
CREATE TRIGGER invoice_sandboxes_final BEFORE UPDATE OR DELETE ON invoice_sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_refuse_change();
CREATE TRIGGER invoice_sandboxes_sealed BEFORE INSERT ON invoice_sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_quantities_with_invoice();

GRANT SELECT, INSERT ON invoice_sandboxes TO meter_api;

-- Its keys to invoices and price_plans come once it is where it goes: on a
-- cluster placed already (migrations/citus/place.sql) it joins the account
-- group first, its key as plain text like the others', and has no
-- statement-level trigger (Citus does not keep them on shards); elsewhere it
-- refuses TRUNCATE too.
DO $$
BEGIN
	IF meter_distributed('accounts') THEN
		-- one connection per node: its key to a reference table wants it so
		SET LOCAL citus.multi_shard_modify_mode = 'sequential';
		ALTER TABLE invoice_sandboxes ALTER COLUMN account_id TYPE text;
		SET LOCAL citus.enable_unsafe_triggers = on;
		PERFORM create_distributed_table('invoice_sandboxes', 'account_id',
		                                 colocate_with => 'accounts');
	ELSE
		CREATE TRIGGER invoice_sandboxes_no_truncate BEFORE TRUNCATE ON invoice_sandboxes
			FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();
	END IF;
	ALTER TABLE invoice_sandboxes ADD CONSTRAINT invoice_sandboxes_price_plan_id_fkey
		FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
	ALTER TABLE invoice_sandboxes ADD CONSTRAINT invoice_sandboxes_account_id_month_fkey
		FOREIGN KEY (account_id, month) REFERENCES invoices (account_id, month);
END
$$;
