-- 0013_wide_sums: an account's month never overflows.
--
-- account_month sums every sandbox-hour of an account's month. In bigint its
-- memory overflowed past about 2.56 million GiB-hours (112 sandboxes of
-- 32 GiB for a month), and the next sandbox of that account and month could
-- not be stored. 10,000 sandboxes of 256 vCPUs and 1 TiB running all month
-- make 2.7e22 milli-GiB x µs: numeric holds that exactly, as the C side holds
-- it in 128 bits. What a final invoice billed is kept the same way.
-- usage_hourly stays bigint: one sandbox-hour of 1 TiB is 3.8e15.

ALTER TABLE account_month
	ALTER COLUMN cpu_measured_us TYPE numeric,
	ALTER COLUMN cpu_billed_us TYPE numeric,
	ALTER COLUMN busy_us TYPE numeric,
	ALTER COLUMN idle_us TYPE numeric,
	ALTER COLUMN wall_us TYPE numeric,
	ALTER COLUMN memory_mgib_us TYPE numeric;

ALTER TABLE invoice_quantities
	ALTER COLUMN cpu_billed_us TYPE numeric,
	ALTER COLUMN memory_mgib_us TYPE numeric,
	ALTER COLUMN wall_us TYPE numeric,
	ALTER COLUMN covered_cpu_billed_us TYPE numeric,
	ALTER COLUMN covered_memory_mgib_us TYPE numeric,
	ALTER COLUMN covered_wall_us TYPE numeric;
