#!/usr/bin/env bash
# bench_lanes: the quota check while 32 clients ask for expensive reads, a
# sandbox's usage over 400 days and the account's forecast, without pause.
#
#   bash bench/bench_lanes.sh [CHECKS]     (default 300 quota checks)
#
# METER_BUILD names the build to measure (default: scripts/build.sh's), so
# two builds compare in one sitting. Uses DATABASE_URL's server or the
# private cluster, in a database of its own dropped at the end. Prints the
# quota checks' p50, p90, p99 and max (ms) and their statuses, then a
# "RESULT ..." line. Never a test: figures only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
checks=${1:-300}
[[ $checks =~ ^[0-9]+$ ]] || { echo "bench_lanes: CHECKS must be a whole number" >&2; exit 2; }
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}

. "$here/bench/pgdb.sh"
bench_pg_up
db=meter_bench_lanes
work=$(mktemp -d /tmp/meter-bench-lanes-XXXXXX)
api_pid=
load=()
cleanup() {
	for p in "${load[@]}"; do kill "$p" 2>/dev/null || true; done
	[[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
	rm -rf "$work"
	bench_pg_down "$db"
}
trap cleanup EXIT

bench_db_make "$db"
# One sandbox with 400 days of hourly usage, and 50 more running this month.
psql -X -q -d "$url" >/dev/null <<'SQL'
INSERT INTO accounts (id, name, plan) VALUES ('bench', 'Bench', 'paid');
INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at)
SELECT 'sb-' || i, 'bench', 2, 4, now() - interval '400 days' FROM generate_series(1, 51) i;
INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, cpu_measured_us,
       cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
SELECT 'bench', 'sb-1', date_trunc('hour', now()) - (h || ' hours')::interval, 1,
       1800000000, 1800000000, 1800000000, 1800000000, 3600000000, 4000 * 3600000000::bigint
FROM generate_series(1, 9600) h;
ANALYZE;
SQL
key=$(DATABASE_URL=$url "$build/meter" key create --account bench 2>/dev/null)
bench_api_up
from=$(date -u -d '398 days ago' +%Y-%m-%dT00:00:00Z)
to=$(date -u -d tomorrow +%Y-%m-%dT00:00:00Z)
month=$(date -u +%Y-%m)

# 32 readers: 24 of the long usage, 8 of the forecast, each one request after another.
for i in $(seq 32); do
	if ((i <= 24)); then path="/v1/sandboxes/sb-1/usage?from=$from&to=$to"; else path="/v1/accounts/bench/forecast?month=$month"; fi
	(while :; do curl -s -o /dev/null -H "Authorization: Bearer $key" "$api$path"; done) &
	load+=($!)
done
sleep 2
for _ in $(seq "$checks"); do
	curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H "Authorization: Bearer $key" \
		-X POST "$api/v1/quota/check" -d '{"account_id":"bench","vcpus":1,"memory_gib":1}'
done >"$work/checks"
# what the readers got meanwhile
reads=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' -H "Authorization: Bearer $key" "$api/v1/sandboxes/sb-1/usage?from=$from&to=$to")
sort -k2 -g "$work/checks" | awk -v reads="$reads" '
	{ t[NR] = $2 * 1000; s[$1]++ }
	END {
		n = NR
		p50 = t[int(n * 0.50 + 0.5)]; p90 = t[int(n * 0.90 + 0.5)]; p99 = t[int(n * 0.99 + 0.5)]
		st = ""; for (k in s) st = st k ":" s[k] " "
		printf "quota checks under 32 readers of 400 days of usage and the forecast: %d checks\n", n
		printf "  p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms  statuses %s\n", p50, p90, p99, t[n], st
		printf "  one long usage read meanwhile: %s (status, s)\n", reads
		printf "RESULT lanes_quota_p50_ms=%.1f lanes_quota_p99_ms=%.1f lanes_quota_max_ms=%.1f\n", p50, p99, t[n]
	}'
