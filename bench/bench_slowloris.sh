#!/usr/bin/env bash
# bench_slowloris: the quota check while 8 loopback addresses hold 250
# connections each with headers that never end (a byte a second, reopened
# when closed), more than meter-api's 1,024 connections.
#
#   bash bench/bench_slowloris.sh [ADDRESSES [PER_ADDRESS [CHECKS]]]
#
# METER_BUILD names the build to measure (default: scripts/build.sh's), so
# two builds compare in one sitting. Uses DATABASE_URL's server or the
# private cluster, in a database of its own dropped at the end. Prints the
# checks' p50, p90, p99 and max (ms), then a "RESULT ..." line. Never a
# test: figures only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}
# (a build from before bench_slowloris existed is measured with this checkout's)
loris=$build/bench_slowloris
[[ -x $loris ]] || loris=$(bash "$here/scripts/build.sh" | tail -n 1)/bench_slowloris

. "$here/bench/pgdb.sh"
bench_pg_up
db=meter_bench_slowloris
api_pid=
cleanup() {
	[[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null || true
	bench_pg_down "$db"
}
trap cleanup EXIT

bench_db_make "$db"
psql -X -q -d "$url" -c "INSERT INTO accounts (id, name, plan) VALUES ('bench', 'Bench', 'paid')" >/dev/null
key=$(DATABASE_URL=$url "$build/meter" key create --account bench 2>/dev/null)
ulimit -n "$(ulimit -Hn)"
bench_api_up
"$loris" "$port" "$key" bench "${1:-8}" "${2:-250}" "${3:-200}"
