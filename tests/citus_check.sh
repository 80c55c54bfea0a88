#!/usr/bin/env bash
# The placement docs/scaling.md gives meter's tables, applied to a real Citus
# cluster (scripts/citus.sh: a coordinator and two workers on this machine):
# `meter migrate` on the coordinator, then the calls of "The calls, in order"
# exactly as the document has them. Fails when a call fails, when a table of
# the schema is left out, when the two groups do not each share one
# co-location, when a sandbox's or an account's rows are not found on one
# shard, or when `meter migrate` is not a no-op afterwards.
#
#   tests/citus_check.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: citus_check.sh BUILD_DIR}" && pwd)
export METER_CITUS_DIR=$build/citus-check
export METER_CITUS_PORT=${METER_CITUS_PORT:-57630}
citus() { bash "$here/scripts/citus.sh" "$@"; }
fail() { echo "citus_check: $*" >&2; exit 1; }

citus destroy >/dev/null 2>&1 || true
trap 'citus destroy >/dev/null 2>&1 || true' EXIT
citus up
url=$(citus url)
q() { psql -X -q -v ON_ERROR_STOP=1 -d "$url" -tAc "$1"; }

DATABASE_URL=$url "$build/meter" migrate

# The calls, as the document gives them.
calls=$(awk '/^### The calls, in order/ { f = 1; next } f && /^```sql/ { c = 1; next } c && /^```/ { exit } c' \
	"$here/docs/scaling.md")
[[ -n $calls ]] || fail "no SQL block under \"The calls, in order\" in docs/scaling.md"
psql -X -q -v ON_ERROR_STOP=1 -d "$url" <<<"$calls" >/dev/null || fail "a call of docs/scaling.md failed (above)"

# Every table of the schema is placed, but the runner's own.
left=$(q "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
	WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname <> 'meter_migrations'
	AND NOT EXISTS (SELECT 1 FROM citus_tables t WHERE t.table_name = c.oid::regclass)")
[[ -z $left ]] || fail "tables the document does not place: $left"

# Two co-location groups: the ingest side by sandbox, the billing side by account.
groups() { q "SELECT string_agg(DISTINCT colocation_id::text, ',') FROM citus_tables WHERE citus_table_type = 'distributed' AND table_name::text IN ($1)"; }
sandbox_side=$(groups "'sandboxes', 'samples', 'rollup_queue', 'rollup_checkpoints', 'sample_seeds', 'incarnation_ends'")
account_side=$(groups "'accounts', 'usage_hourly', 'account_month', 'invoices', 'limit_notices', 'sandbox_month', 'webhook_deliveries', 'account_limits'")
[[ $sandbox_side =~ ^[0-9]+$ ]] || fail "the sandbox side is not one co-location group: $sandbox_side"
[[ $account_side =~ ^[0-9]+$ ]] || fail "the account side is not one co-location group: $account_side"
[[ $sandbox_side != "$account_side" ]] || fail "the two sides share a co-location group"
refs=$(q "SELECT count(*) FROM citus_tables WHERE citus_table_type = 'reference'")
echo "citus_check: $(q "SELECT count(*) FROM citus_tables WHERE citus_table_type = 'distributed'") distributed tables in groups $sandbox_side (sandbox) and $account_side (account), $refs reference tables"

# Rows land, and a sandbox's or an account's reads go to one shard.
q "INSERT INTO accounts (id, name, plan) VALUES ('acme', 'Acme', 'paid')" >/dev/null
q "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES ('sb-1', 'acme', 2, 4, now())" >/dev/null
q "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES ('sb-1', 1, now(), 'h', 5)" >/dev/null
# Read back by a literal and by a text parameter, as meter sends its ids: on a
# column of a domain type Citus routes these to no shard (step 0 of the calls).
[[ $(q "SELECT count(*) FROM samples WHERE sandbox_id = 'sb-1'") == 1 ]] || fail "the sample is not read back"
got=$(psql -X -q -v ON_ERROR_STOP=1 -d "$url" -tA <<'SQL'
PREPARE s(text) AS SELECT count(*) FROM sandboxes WHERE id = $1;
PREPARE a(text) AS SELECT count(*) FROM accounts WHERE id = $1;
EXECUTE s('sb-1');
EXECUTE a('acme');
SQL
)
[[ $got == $'1\n1' ]] || fail "the sandbox and the account are not read back by a text parameter: $got"
if q "INSERT INTO accounts (id, name, plan) VALUES ('not an id', 'x', 'paid')" 2>/dev/null; then
	fail "an account id of the wrong form was taken"
fi
for stmt in "SELECT * FROM samples WHERE sandbox_id = 'sb-1'" "SELECT * FROM account_month WHERE account_id = 'acme'"; do
	plan=$(q "EXPLAIN $stmt")
	grep -q "Task Count: 1$" <<<"$plan" || fail "not one shard: $stmt
$plan"
done

# And the runner has nothing left to do.
out=$(DATABASE_URL=$url "$build/meter" migrate)
grep -q "0 applied now" <<<"$out" || fail "meter migrate after the placement: $out"
echo "citus_check: ok"
