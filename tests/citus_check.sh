#!/usr/bin/env bash
# The placement docs/scaling.md gives meter's tables, on a real Citus cluster
# (scripts/citus.sh: a coordinator and two workers on this machine): `meter
# migrate` on the coordinator applies the migrations, then places the tables
# (migrations/citus/place.sql). Fails when that fails, when a table of
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

# meter migrate on the coordinator: the numbered migrations, then the placement
# (migrations/citus/place.sql).
out=$(DATABASE_URL=$url "$build/meter" migrate 2>&1) || { echo "$out" >&2; fail "meter migrate failed on the cluster"; }
grep -q "placed the tables on Citus" <<<"$out" || fail "meter migrate did not place the tables: $out"

# Every table of the schema is placed, but the runner's own.
left=$(q "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
	WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname NOT IN ('meter_migrations', 'meter_functions')
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
q "INSERT INTO accounts (id, name, plan, collector_registration) VALUES ('acme', 'Acme', 'paid', true)" >/dev/null
q "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES ('sb-1', 'acme', 2, 4, now())" >/dev/null
q "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES ('sb-1', 1, now(), 'h', 5)" >/dev/null
# Read back by a literal and by a text parameter, as meter sends its ids: on a
# column of a domain type Citus routes these to no shard (step 0 of migrations/citus/place.sql).
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

# The collector's write on the cluster: meter_samples_ingest (migrations/0028)
# inserts and marks without the statement trigger the placement dropped. Citus
# opens its connections to the workers as the role meter switches to, so the
# placement lets meter's roles log in (step 7).
work=$(mktemp -d /tmp/meter-citus-XXXXXX)
col_pid=
cleanup() {
	set +e
	[[ -n $col_pid ]] && kill -9 "$col_pid" 2>/dev/null
	rm -rf "$work"
	citus destroy >/dev/null 2>&1
	return 0
}
trap cleanup EXIT
root=$work/cg
mkdir -p "$root/sandboxes/acme"/sb-{2,3,4} "$root/sandboxes/nobody/sb-5"
: >"$root/cgroup.controllers"
for d in "$root"/sandboxes/*/sb-*; do
	echo "usage_usec 1000" >"$d/cpu.stat"
	echo "150000 100000" >"$d/cpu.max"     # 1.5 vCPUs
	echo 2147483648 >"$d/memory.max"       # 2 GiB
	echo 1048576 >"$d/memory.current"
done
DATABASE_URL=$url "$build/meter-collector" --root "$root" --layout v2 --interval 250ms \
	--spool "$work/spool" --host-id citus-h --log-level info >"$work/collector.log" 2>&1 &
col_pid=$!
sleep 2
rm -rf "$root/sandboxes/acme/sb-4" # it ends
sleep 1.5
kill -TERM $col_pid
wait $col_pid || { cat "$work/collector.log" >&2; fail "the collector did not exit 0"; }
col_pid=
line=$(grep 'stopping:' "$work/collector.log" | tail -n 1)
written=$(sed -n 's/.*(\([0-9]*\) written.*/\1/p' <<<"$line")
[[ -n $written && $written -gt 8 ]] || { cat "$work/collector.log" >&2; fail "the collector wrote too little: $line"; }
grep -q ' 0 batches spooled' <<<"$line" || { cat "$work/collector.log" >&2; fail "the collector spooled: its write failed on the cluster"; }
[[ $(q "SELECT count(*) FROM samples WHERE host = 'citus-h'") == "$written" ]] ||
	fail "the collector wrote $written samples; the table has $(q "SELECT count(*) FROM samples WHERE host = 'citus-h'")"
[[ $(q "SELECT string_agg(sandbox_id, ',' ORDER BY sandbox_id) FROM rollup_queue WHERE sandbox_id <> 'sb-1'") == "sb-2,sb-3,sb-4,sb-5" ]] ||
	fail "the rollup queue is not marked for each sandbox: $(q "SELECT string_agg(sandbox_id, ',') FROM rollup_queue")"
[[ $(q "SELECT string_agg(id || ' ' || account_id || ' ' || vcpus || ' ' || memory_gib, ',' ORDER BY id) FROM sandboxes WHERE id <> 'sb-1'") == "sb-2 acme 1.500 2.000,sb-3 acme 1.500 2.000,sb-4 acme 1.500 2.000" ]] ||
	fail "the sandboxes found are not registered from their limits (sb-5's account does not exist): $(q "SELECT string_agg(id || ' ' || account_id, ',') FROM sandboxes")"
[[ $(q "SELECT string_agg(sandbox_id, ',') FROM incarnation_ends") == "sb-4" ]] ||
	fail "the end of the removed sandbox is not recorded: $(q "SELECT string_agg(sandbox_id, ',') FROM incarnation_ends")"
[[ $(q "SELECT count(*) FROM sandboxes WHERE id = 'sb-4' AND stopped_at IS NOT NULL AND ended_by = 'collector'") == 1 ]] ||
	fail "the removed sandbox is not stopped at its end"
echo "citus_check: the collector wrote $written samples through the coordinator; marked, registered and ended as on PostgreSQL"

# And the runner has nothing left to do.
out=$(DATABASE_URL=$url "$build/meter" migrate)
grep -q "0 applied now" <<<"$out" || fail "meter migrate after the placement: $out"
echo "citus_check: ok"
