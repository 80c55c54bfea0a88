-- meter_part_nano: The cost of one plan's part of a sandbox's usage, in nano-
-- dollars: billed CPU (µs) and memory (milli-GiB x µs) at the plan's prices
-- per vCPU-hour and GiB-hour, each rounded half up in integers, as
-- meter_usage_cost (meter/rating.c) prices them. For the pages that rank many
-- sandboxes by cost in SQL (sandbox_month_cost, a range's costs); test_ledger
-- pricing_in_sql_is_meter_s_to_the_nano_dollar holds it equal to meter/.
CREATE OR REPLACE FUNCTION meter_part_nano(cpu_billed_us numeric, memory_mgib_us numeric,
                                cpu_vcpu_hour numeric, memory_gib_hour numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT div(2 * cpu_billed_us * (cpu_vcpu_hour * 1000000000) + 3600000000, 7200000000)
	     + div(2 * memory_mgib_us * (memory_gib_hour * 1000000000) + 3600000000000,
	           7200000000000)
$$;
