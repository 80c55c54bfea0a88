#!/usr/bin/env bash
# citus: the fleet's ingest and rollup on a Citus cluster (a coordinator and
# two workers, scripts/citus.sh) beside the single PostgreSQL node, on this
# machine, in one run; then the fan-out of each hot statement on the cluster.
#
#   bash bench/bench_citus.sh [--quick]
#
# Runs build/bench_fleet (its ingest through the collector's write path, psql
# \copy of the same rows, the rollup of every sandbox by one worker) with the
# same sizes and seed twice: on the private PostgreSQL (or DATABASE_URL), then
# on a cluster of its own (METER_BENCH_CITUS_PORT, default 57670, and the next
# two ports; destroyed at the end), whose tables meter migrate places. Then
# build/tests/test_citus_plans prints, per hot statement, how many tasks its
# distributed plan has: one shard, or a fan-out over all of them.
#
# The three nodes share this machine's cores, so the ratio is what distribution
# costs (routing through the coordinator, every write a distributed
# transaction), not what it gains: on one machine Citus cannot be faster. On
# separate machines each worker brings its own cores and disk, and ingest and
# rollup, which each go to one sandbox's shard, grow with the workers.
#
# Default: 100 accounts, 10,000 sandboxes (about 360,000 samples), 3 runs each,
# medians; --quick: 20 accounts, 3,000 sandboxes, one run (a smoke test).
# Prints "RESULT name=value" lines and one Markdown table; logs in
# build/bench-logs/citus-TIME. Exit status 0 when both ran, 1 otherwise.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
--quick) fleet_args=(--accounts 20 --sandboxes 3000 --repeat 1) ;;
"") fleet_args=(--accounts 100 --sandboxes 10000 --repeat 3) ;;
*)
	echo "usage: bash bench/bench_citus.sh [--quick]" >&2
	exit 2
	;;
esac

build=$(bash "$here/scripts/build.sh" | tail -n 1)
logs=${METER_BENCH_LOGS:-$build/bench-logs}/citus-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$logs"
export METER_CITUS_DIR=$build/citus-bench METER_CITUS_PORT=${METER_BENCH_CITUS_PORT:-57670}
citus() { bash "$here/scripts/citus.sh" "$@"; }

started=0
cleanup() {
	citus destroy >/dev/null 2>&1 || true
	if [[ $started == 1 ]]; then
		bash "$here/scripts/pg.sh" stop >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -z ${DATABASE_URL:-} ]]; then
	if ! bash "$here/scripts/pg.sh" status >/dev/null 2>&1; then
		bash "$here/scripts/pg.sh" start >/dev/null
		started=1
	fi
	DATABASE_URL=$(bash "$here/scripts/pg.sh" url)
fi
single_url=$DATABASE_URL
citus destroy >/dev/null 2>&1 || true
echo "bench_citus: starting the cluster (log: $logs/citus-up.log)" >&2
citus up >"$logs/citus-up.log" 2>&1 || {
	tail -n 20 "$logs/citus-up.log" >&2
	exit 1
}
citus_url=$(citus url)
citus_workers=$(citus workers)

# fleet NAME URL WORKERS: bench_fleet on that database, its output in NAME.log
fleet() {
	echo "bench_citus: bench_fleet ${fleet_args[*]} on the $1 (log: $logs/$1.log)" >&2
	DATABASE_URL=$2 METER_TEST_CITUS_WORKERS=$3 "$build/bench_fleet" "${fleet_args[@]}" \
		>"$logs/$1.log" 2>&1 || {
		tail -n 20 "$logs/$1.log" >&2
		exit 1
	}
}
fleet single "$single_url" ""
fleet cluster "$citus_url" "$citus_workers"
echo "bench_citus: the hot statements' plans (log: $logs/plans.log)" >&2
DATABASE_URL=$citus_url METER_TEST_CITUS_WORKERS=$citus_workers \
	"$build/tests/test_citus_plans" >"$logs/plans.log" 2>&1 || {
	tail -n 20 "$logs/plans.log" >&2
	exit 1
}

# get LOG KEY: the last value of KEY in LOG's RESULT lines
get() {
	grep -h '^RESULT ' "$logs/$1.log" | cut -d' ' -f2- | tr ' ' '\n' |
		awk -F= -v k="$2" '$1 == k { v = $2 } END { print v }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b }'; }
n=$(get single fleet_samples)
echo "RESULT citus_samples=$n"
echo
echo "Citus beside one PostgreSQL, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, bench_fleet ${fleet_args[*]} ($n samples); logs: $logs"
echo
echo "| figure | one PostgreSQL | Citus, 3 nodes on this machine | Citus / one |"
echo "|---|---|---|---|"
for f in ingest_sps:"ingest, samples/s (the collector's write path)" \
	copy_sps:"psql \\copy into samples, samples/s" \
	rollup_sps:"rollup, samples/s (one worker)"; do
	key=${f%%:*} what=${f#*:}
	a=$(get single "fleet_$key") b=$(get cluster "fleet_$key")
	echo "RESULT citus_single_$key=$a citus_cluster_$key=$b"
	echo "| $what | $a | $b | $(ratio "$b" "$a") |"
done
echo
echo "Fan-out of the hot statements on the cluster (test_citus_plans: tasks of each distributed plan):"
echo
echo '```'
grep -E 'task\(s\)' "$logs/plans.log" || true
echo '```'
