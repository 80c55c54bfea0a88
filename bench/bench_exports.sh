#!/usr/bin/env bash
# bench_exports: the quota check while 12 clients read a large usage export
# slowly (64 KB every 5 s), each holding a database connection for as long.
#
#   bash bench/bench_exports.sh [CHECKS [READERS [SANDBOXES]]]
#                               (default 300 checks, 12 readers, 40,000 sandboxes)
#
# METER_BUILD names the build to measure (default: scripts/build.sh's), so
# two builds compare in one sitting. Uses DATABASE_URL's server or the
# private cluster, in a database of its own dropped at the end. Prints the
# export's size, the quota checks' p50, p90, p99 and max (ms) and their
# statuses, then a "RESULT ..." line. Never a test: figures only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
checks=${1:-300}
readers=${2:-12}
sandboxes=${3:-40000}
for n in "$checks" "$readers" "$sandboxes"; do
	[[ $n =~ ^[0-9]+$ ]] || { echo "bench_exports: arguments are whole numbers" >&2; exit 2; }
done
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}

. "$here/bench/pgdb.sh"
bench_pg_up
db=meter_bench_exports
work=$(mktemp -d /tmp/meter-bench-exports-XXXXXX)
api_pid=
load=()
cleanup() {
	for p in "${load[@]}"; do kill "$p" 2>/dev/null || true; done
	# and the readers' curls, which outlive their loops (and hold a caller's pipe open)
	[[ -n ${key:-} ]] && pkill -f -- "--limit-rate 13k -H Authorization: Bearer $key" || true
	[[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
	rm -rf "$work"
	bench_pg_down "$db"
}
trap cleanup EXIT

bench_db_make "$db"
# SANDBOXES sandboxes, each with an hour of usage this month.
psql -X -q -d "$url" -v n="$sandboxes" >/dev/null <<'SQL'
INSERT INTO accounts (id, name, plan) VALUES ('bench', 'Bench', 'paid');
INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at)
SELECT 'sb-' || i, 'bench', 2, 4, date_trunc('month', now()), date_trunc('month', now()) + interval '1 hour'
FROM generate_series(1, :n) i;
INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, cpu_measured_us,
       cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
SELECT 'bench', 'sb-' || i, date_trunc('month', now()), 1,
       1800000000, 1800000000, 1800000000, 1800000000, 3600000000, 4000 * 3600000000::bigint
FROM generate_series(1, :n) i;
ANALYZE;
SQL
key=$(DATABASE_URL=$url "$build/meter" key create --account bench 2>/dev/null)
bench_api_up
export_path="/v1/accounts/bench/exports/$(date -u +%Y-%m)?format=usage"
size=$(curl -s -H "Authorization: Bearer $key" "$api$export_path" | wc -c)

# The readers: each its export at 64 KB every 5 s (13 KB/s), again a second
# after it ends (or is refused).
touch "$work/reads"
for i in $(seq "$readers"); do
	(while :; do curl -s -o /dev/null -w '%{http_code}\n' --limit-rate 13k \
		-H "Authorization: Bearer $key" "$api$export_path" >>"$work/reads"; sleep 1; done) &
	load+=($!)
done
sleep 10 # every reader has its connection and the socket buffers are full
# The checks: a C client of bench_slowloris's, no slow connections of its
# own (so curl's start-up is not in the figures).
loris=$build/bench_slowloris
[[ -x $loris ]] || loris=$(bash "$here/scripts/build.sh" | tail -n 1)/bench_slowloris
"$loris" "$port" "$key" bench 0 0 "$checks" >"$work/checks"
# an export asked for meanwhile: its status (503 when every connection it may take is busy)
other=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $key" "$api$export_path" || true)
reads=$(sort "$work/reads" | uniq -c | awk '{printf "%s x %s ", $2, $1}')
echo "quota checks under $readers slow readers of a $(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1e6 }') MB usage export:"
sed -n 's/^  p50/  p50/p' "$work/checks"
echo "  exports finished meanwhile: ${reads:-none}; one more asked meanwhile: $other"
sed -n 's/slowloris_/exports_/gp' "$work/checks"
