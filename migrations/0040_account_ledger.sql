-- 0040_account_ledger: the month to date of each account's current month, as
-- its invoice gives it, kept where the quota check reads it.
--
-- common/ledger.c computes a month's money in one place (its invoice's lines:
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
-- rounded.
CREATE TABLE account_ledger (
	account_id meter_id PRIMARY KEY REFERENCES accounts (id),
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	month_to_date numeric NOT NULL CHECK (scale(month_to_date) <= 9),
	updated_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE ON account_ledger TO meter_api;

-- On a cluster placed already (migrations/citus/place.sql), the new table
-- joins the account group, its key as plain text like the others'.
DO $$
BEGIN
	IF meter_distributed('accounts') THEN
		ALTER TABLE account_ledger ALTER COLUMN account_id TYPE text;
		PERFORM create_distributed_table('account_ledger', 'account_id',
		                                 colocate_with => 'accounts');
	END IF;
END
$$;
