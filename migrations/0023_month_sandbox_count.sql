-- 0023_month_sandbox_count: how many sandboxes an account's month ranks, kept
-- beside the ranking.
--
-- The first page of an account's usage tells how many sandboxes the month has
-- (sandbox_count). Counting sandbox_month_cost's rows took 10 to 65 ms for a
-- month of 100,000 sandboxes, on every first page. meter_sandbox_month_costs,
-- the rollup's step that keeps sandbox_month_cost, now also adds the rows it
-- makes and takes away the rows it deletes in account_month_sandboxes, in the
-- same statement.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_sandbox_month_costs.sql, as all functions are
-- since 0040.
CREATE TABLE account_month_sandboxes (
	account_id meter_id NOT NULL,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	sandboxes bigint NOT NULL CHECK (sandboxes >= 0),
	PRIMARY KEY (account_id, month)
);

-- What is there already. SHARE mode: a rollup running meanwhile waits.
LOCK TABLE sandbox_month_cost IN SHARE MODE;
INSERT INTO account_month_sandboxes (account_id, month, sandboxes)
SELECT account_id, month, count(*) FROM sandbox_month_cost GROUP BY 1, 2;

GRANT SELECT, INSERT, UPDATE, DELETE ON account_month_sandboxes TO meter_api;
