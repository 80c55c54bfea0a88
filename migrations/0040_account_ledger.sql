-- 0040_account_ledger: the month to date of each account's current month, as
-- its invoice gives it, kept where the quota check reads it.
--
-- common/ledgerdb.c computes a month's money in one place (its invoice's lines:
-- usage per plan, adjustments of earlier final months, the trial's credit);
-- the invoice, the account, the forecast, the dashboard, the spend cap and
-- the exports all read it there. The quota check cannot compute it on its
-- hot path, so common/limits.c keeps the figure of the current month here,
-- in the transaction that changed what it is computed from (a rollup batch,
-- the trial's pass, an invoice made final, a change of the account), under
-- the account's lock 'meter.ledger:' || id. A row of an earlier month is
-- stale: the quota check then computes the month itself.
--
-- month_to_date is exact (nano-dollars as numeric, 9 decimals), never
-- rounded. adjusting_month: the earliest month that bills usage of a final
-- month which came after its invoice (an adjustment goes on the first
-- invoice after that month not yet final, meter/ledger.h), NULL when none
-- waits: a month with no usage of its own is made final for it too
-- (common/invoicedb.c invoices_finalize_due), so no adjustment waits for
-- ever.
CREATE TABLE account_ledger (
	account_id meter_id PRIMARY KEY,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	month_to_date numeric NOT NULL CHECK (scale(month_to_date) <= 9),
	adjusting_month date CHECK (extract(day FROM adjusting_month) = 1),
	updated_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE ON account_ledger TO meter_api;

-- Its key to accounts comes once it is where it goes: on a cluster placed
-- already (migrations/citus/place.sql) it joins the account group first, its
-- key as plain text like the others'.
DO $$
BEGIN
	IF meter_distributed('accounts') THEN
		ALTER TABLE account_ledger ALTER COLUMN account_id TYPE text;
		PERFORM create_distributed_table('account_ledger', 'account_id',
		                                 colocate_with => 'accounts');
	END IF;
	ALTER TABLE account_ledger ADD CONSTRAINT account_ledger_account_id_fkey
		FOREIGN KEY (account_id) REFERENCES accounts (id);
END
$$;
