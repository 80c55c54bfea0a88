#!/usr/bin/env bash
# run: every benchmark of bench/, and one table of what they measured.
#
#   bash bench/table.sh [--quick | --full]
#
# Builds (scripts/build.sh), starts the private PostgreSQL when DATABASE_URL is
# not set and it is not running (and stops it again at the end), then runs in
# turn:
#   build/bench_collector   the collector's CPU per round beside a naive reader
#   bench/collector_real.sh the meter-collector binary on 1,000 real cgroups at
#                           a 1 s interval with the write, measured from /proc
#   bench/bench_api.sh      meter-api under wrk beside pgbench on the same SQL
#   build/bench_fleet       a month of a fleet: ingest beside psql \copy, the
#                           rollup, then (--queries) the latency of the largest
#                           account's requests and the plans of every hot statement
#   bench/bench_lag.sh      the rollup's lag, when that script exists (its line
#                           "LAG p50_ms=... p99_ms=... ingest_sps=... [interval_s=...]")
# Each writes its whole output to a log folder (build/bench-logs/TIME, or
# METER_BENCH_LOGS/TIME), and prints "RESULT name=value ..." lines that this
# script reads. It prints the date, the machine and ONE Markdown table:
#   | figure | meter | reference | ratio | goal | met |
# The default sizes take about 10 minutes on 2 cores (the fleet at a tenth:
# 200 accounts, 30,000 sandboxes, 1.08 million samples; 10 s per wrk and
# pgbench measurement); --quick takes a few minutes (3,000 sandboxes, 2 s per
# measurement, 300 fake cgroups) and its figures are only a smoke test; --full
# runs the whole fleet month (2,000 accounts, 300,000 sandboxes, 10.8 million
# samples; about 15 minutes). Exit status: 0 when every benchmark ran, 1 when one failed to run (or
# bench_fleet found a Seq Scan of samples), 2 for a wrong command line. A goal
# that is missed is a "no" in the table, not a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
quick=0
case "${1:-}" in
--quick) quick=1 ;;
--full) quick=2 ;;
"") ;;
*)
	echo "usage: bash bench/table.sh [--quick | --full]" >&2
	exit 2
	;;
esac

if ((quick == 2)); then
	collector_args=()
	bin_args=(1000 60)
	api_secs=10
	fleet_args=(--accounts 2000 --sandboxes 300000)
	mode="full (--full: the whole fleet month)"
	quick=0
elif ((quick)); then
	collector_args=(--sandboxes 300 --real 30 --rounds 20)
	bin_args=(300 10)
	api_secs=2
	fleet_args=(--accounts 20 --sandboxes 3000)
	mode="quick (--quick: small sizes, a smoke test)"
else
	collector_args=()
	bin_args=(1000 60)
	api_secs=10
	fleet_args=(--accounts 200 --sandboxes 30000)
	mode="default (the fleet at a tenth)"
fi

build=$(bash "$here/scripts/build.sh" | tail -n 1)
logs=${METER_BENCH_LOGS:-$build/bench-logs}/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$logs"

started=0
cleanup() {
	if [[ $started == 1 ]]; then
		bash "$here/scripts/pg.sh" stop >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [[ -z ${DATABASE_URL:-} ]] && ! bash "$here/scripts/pg.sh" status >/dev/null 2>&1; then
	bash "$here/scripts/pg.sh" start >/dev/null
	started=1
fi

failed=()
ran=()
# run NAME COMMAND...: its output into $logs/NAME.log, its status remembered
run() {
	local name=$1
	shift
	echo "table.sh: $name: $* (log: $logs/$name.log)" >&2
	local t0=$SECONDS st=0
	"$@" >"$logs/$name.log" 2>&1 || st=$?
	echo "table.sh: $name: exit $st after $((SECONDS - t0)) s" >&2
	if ((st != 0)); then
		failed+=("$name (exit $st)")
		tail -n 20 "$logs/$name.log" | sed "s/^/  $name: /" >&2
	fi
	ran+=("$name")
}

run collector "$build/bench_collector" "${collector_args[@]}"
run collector_bin env METER_BUILD="$build" bash "$here/bench/collector_real.sh" "${bin_args[@]}"
run api bash "$here/bench/bench_api.sh" "$api_secs"
run fleet "$build/bench_fleet" "${fleet_args[@]}" --queries --plans "$logs/fleet-plans.txt"
lag_ran=0
if [[ -f $here/bench/bench_lag.sh ]]; then
	if ((quick)); then
		run lag env METER_BENCH_QUICK=1 bash "$here/bench/bench_lag.sh"
	else
		run lag bash "$here/bench/bench_lag.sh"
	fi
	lag_ran=1
fi

# name=value pairs of every RESULT (and LAG) line, one a line
grep -h '^RESULT ' "$logs"/*.log 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep '=' >"$logs/results.txt" || true
if ((lag_ran)); then
	grep -h '^LAG ' "$logs/lag.log" 2>/dev/null | tail -n 1 | cut -d' ' -f2- | tr ' ' '\n' |
		grep '=' | sed 's/^/lag_/' >>"$logs/results.txt" || true
fi
get() { awk -F= -v k="$1" '$1 == k { v = $2 } END { print v }' "$logs/results.txt"; }
# calc EXPR with a=$2 b=$3 c=$4 (empty when any is missing or not a number)
calc() {
	local e=$1
	shift
	for x in "$@"; do [[ $x =~ ^-?[0-9.]+$ ]] || return 0; done
	awk -v a="${1:-}" -v b="${2:-}" -v c="${3:-}" "BEGIN { $e }"
}
# yes/no of a condition on numbers; "not run" when one is missing
met() {
	local e=$1
	shift
	for x in "$@"; do [[ $x =~ ^-?[0-9.]+$ ]] || {
		echo "not run"
		return 0
	}; done
	awk -v a="${1:-}" -v b="${2:-}" -v c="${3:-}" "BEGIN { print (($e) ? \"yes\" : \"no\") }"
}
# a number rounded to a whole one, with thousands separated by commas
num() {
	[[ ${1:-} =~ ^-?[0-9.]+$ ]] || {
		echo "not run"
		return 0
	}
	awk -v v="$1" 'BEGIN { s = sprintf("%.0f", v); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); print s }'
}
ms() { [[ ${1:-} =~ ^-?[0-9.]+$ ]] && awk -v v="$1" 'BEGIN { printf "%.2f ms", v }' || echo "not run"; }
row() { echo "| $1 | $2 | $3 | $4 | $5 | $6 |"; }

ing=$(get fleet_ingest_sps) cp=$(get fleet_copy_sps) nsamples=$(get fleet_samples) nwriters=$(get fleet_writers)
roll=$(get fleet_rollup_sps) rollsb=$(get fleet_rollup_sandboxes_per_s)
inv50=$(get fleet_invoice_p50_ms) inv99=$(get fleet_invoice_p99_ms)
q50=$(get fleet_quota_p50_ms) q99=$(get fleet_quota_p99_ms)
tr99=$(get fleet_trial_p99_ms) us50=$(get fleet_usage_p50_ms) us99=$(get fleet_usage_p99_ms)
sb99=$(get fleet_sandbox_usage_p99_ms)
um99=$(get fleet_usage_middle_p99_ms) us2=$(get fleet_usage_second_p99_ms)
d50=$(get fleet_dashboard_p50_ms) d99=$(get fleet_dashboard_p99_ms)
exr=$(get fleet_export_rows_per_s) exrss=$(get fleet_export_rss_growth_mib)
qd99=$(get fleet_quota_under_dashboards_p99_ms)
hours=$(get fleet_largest_sandbox_hours) nsb=$(get fleet_largest_sandboxes)
seq=$(get fleet_explain_samples_seqscans) nst=$(get fleet_explain_statements)
nplans=$(get fleet_explain_plans) notex=$(get fleet_explain_not_exercised)
# the paced quota check, three runs: each one's p99 and rate
pr1=$(get api_quota_paced_c10_run1_rps) pr2=$(get api_quota_paced_c10_run2_rps) pr3=$(get api_quota_paced_c10_run3_rps)
p991=$(get api_quota_paced_c10_run1_p99_ms) p992=$(get api_quota_paced_c10_run2_p99_ms) p993=$(get api_quota_paced_c10_run3_p99_ms)
prmin=$(calc 'printf "%.0f", (a < b ? (a < c ? a : c) : (b < c ? b : c))' "$pr1" "$pr2" "$pr3")
p99max=$(calc 'printf "%.2f", (a > b ? (a > c ? a : c) : (b > c ? b : c))' "$p991" "$p992" "$p993")
# and each run's reference: the database alone (pgbench), the same pipeline at that rate
g991=$(get pg_quota_paced_c10_run1_p99_ms) g992=$(get pg_quota_paced_c10_run2_p99_ms) g993=$(get pg_quota_paced_c10_run3_p99_ms)
# Throughput is the most each served, at 4 or at 16 connections: meter-api's requests
# take more hops (client, server, database) than pgbench's, so it peaks at more of them.
a4=$(get api_quota_c4_rps) g4=$(get pg_quota_c4_tps)
a16=$(get api_quota_c16_rps) g16=$(get pg_quota_c16_tps)
amax=$(calc 'printf "%.0f", (a > b ? a : b)' "$a4" "$a16")
gmax=$(calc 'printf "%.0f", (a > b ? a : b)' "$g4" "$g16")
u4=$(get api_usage_c4_rps) gu4=$(get pg_usage_c4_tps)
cc=$(get collector_copy_meter_us) crss=$(get collector_copy_meter_rss_mib)
cf=$(get collector_fake_meter_us) cn=$(get collector_fake_naive_us) cnrss=$(get collector_fake_naive_rss_mib)
cr=$(get collector_real_meter_us) crn=$(get collector_real_naive_us)
cbp=$(get collector_bin_pct) cbrss=$(get collector_bin_rss_mib) cbus=$(get collector_bin_us)
lag50=$(get lag_p50_ms) lag99=$(get lag_p99_ms) lagsps=$(get lag_ingest_sps)
lagint=$(get lag_interval_s)
[[ -n $lagint ]] || lagint=10

echo "meter benchmarks, $(date -u '+%Y-%m-%d %H:%M UTC'), host $(hostname), $(nproc) cores ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r)"
echo "mode: $mode; command: bash bench/table.sh${1:+ $1}; logs: $logs"
echo
row figure meter reference ratio goal met
echo "|---|---|---|---|---|---|"
row "ingest, samples/s (bench_fleet: $(num "$nsamples") samples from $nwriters collectors at once through their write path)" \
	"$(num "$ing")" "$(num "$cp") (psql \\copy, same rows and table)" "$(calc 'printf "%.2f", a / b' "$ing" "$cp")" \
	">= 0.8 x psql \\copy and >= 100,000" "$(met 'a >= 0.8 * b && a >= 100000' "$ing" "$cp")"
# The rollup's goal is the whole month's earlier figure (54,000 samples/s): not slower. Its
# rate depends on the fleet's size (batches of 32 sandboxes of more samples each), so smaller
# runs have none.
roll_goal=
[[ $mode == full* ]] && roll_goal=54000
if [[ -n $roll_goal ]]; then
	row "rollup, samples/s (one worker, from a backlog)" "$(num "$roll") ($(calc 'printf "%.0f", a' "$rollsb") sandboxes/s)" "" "" \
		">= $(num "$roll_goal") (not slower than before at this size)" "$(met "a >= $roll_goal" "$roll")"
else
	row "rollup, samples/s (one worker, from a backlog)" "$(num "$roll") ($(calc 'printf "%.0f", a' "$rollsb") sandboxes/s)" "" "" "--full: >= 54,000" "-"
fi
if ((lag_ran)); then
	row "rollup lag p50 / p99 (bench_lag; ingest $(num "$lagsps") samples/s)" \
		"$(ms "$lag50") / $(ms "$lag99")" "" "" "<= interval + 1 s ($((lagint + 1)) s) at p99" \
		"$(met 'b <= (c + 1) * 1000' "$lag50" "$lag99" "$lagint")"
else
	row "rollup lag (bench/bench_lag.sh)" "not run (no bench/bench_lag.sh yet)" "" "" "<= interval + 1 s" "not run"
fi
row "draft invoice of the largest account, p50 / p99 (acct-0000: $(num "$hours") sandbox-hours, $(num "$nsb") sandboxes)" \
	"$(ms "$inv50") / $(ms "$inv99")" "" "" "<= 50 ms (p99)" "$(met 'a <= 50' "$inv99")"
row "quota check of the largest account, p50 / p99 (one client, fleet database)" \
	"$(ms "$q50") / $(ms "$q99")" "" "" "p99 <= 2 ms" "$(met 'a <= 2' "$q99")"
row "quota check p99 at about 5,000/s, three runs (bench_api: 10 connections, 1 ms pauses)" \
	"$(ms "$p991") at $(num "$pr1")/s; $(ms "$p992") at $(num "$pr2")/s; $(ms "$p993") at $(num "$pr3")/s" \
	"$(ms "$g991"); $(ms "$g992"); $(ms "$g993") (pgbench, the same pipeline at each run's rate, 10 connections)" "" \
	"p99 <= 2 ms at 5,000/s in 3 runs of 3" "$(met 'a <= 2 && b >= 5000' "$p99max" "$prmin")"
row "quota check throughput, req/s, the most at 4 or 16 connections (bench_api; 4: $(num "$a4") and $(num "$g4"))" \
	"$(num "$amax")" "$(num "$gmax") (pgbench, the same two statements, one pipeline)" "$(calc 'printf "%.2f", a / b' "$amax" "$gmax")" ">= 0.5 x pgbench" "$(met 'a >= 0.5 * b' "$amax" "$gmax")"
row "account usage of a month, req/s (bench_api, 4 connections)" \
	"$(num "$u4")" "$(num "$gu4") (pgbench, same SQL)" "$(calc 'printf "%.2f", a / b' "$u4" "$gu4")" "none stated" "-"
row "usage of the largest account's month, first page of 100, p50 / p99 (one client)" "$(ms "$us50") / $(ms "$us99")" "" "" "p99 <= 50 ms" "$(met 'a <= 50' "$us99")"
row "usage of the largest account's month, a middle page / a new listing's second page (orders it), p99" \
	"$(ms "$um99") / $(ms "$us2")" "" "" "p99 <= 50 ms (middle)" "$(met 'a <= 50' "$um99")"
row "dashboard of the largest account's month, p50 / p99" "$(ms "$d50") / $(ms "$d99")" "" "" "p99 <= 100 ms" "$(met 'a <= 100' "$d99")"
row "FOCUS export of that month, rows/s; meter-api RSS growth with 4 at once, MiB" \
	"$(num "$exr"); +$(calc 'printf "%.1f", a' "$exrss")" "" "" ">= 100,000 rows/s; <= 32 MiB" "$(met 'a >= 100000 && b <= 32' "$exr" "$exrss")"
row "quota check p99 while 8 of that account's dashboards load" "$(ms "$qd99")" "" "" "p99 <= 5 ms" "$(met 'a <= 5' "$qd99")"
row "trial / a sandbox's month, p99 (one client)" "$(ms "$tr99") / $(ms "$sb99")" "" "" "none stated" "-"
row "collector CPU per sandbox per round, µs, each round COPY'd to PostgreSQL (bench_collector)" \
	"$(calc 'printf "%.2f", a' "$cc")" "" "" "<= 10 µs, all included" "$(met 'a <= 10' "$cc")"
row "collector CPU per sandbox per round, µs, reading only (tmpfs tree)" \
	"$(calc 'printf "%.2f", a' "$cf")" "$(calc 'printf "%.2f", a' "$cn") (naive reader)" \
	"$(calc 'printf "%.2f", a / b' "$cf" "$cn")" "below the naive reader" "$(met 'a < b' "$cf" "$cn")"
row "collector CPU per sandbox per round, µs, real cgroups" \
	"$(calc 'printf "%.2f", a' "$cr")" "$(calc 'printf "%.2f", a' "$crn") (naive reader)" \
	"$(calc 'printf "%.2f", a / b' "$cr" "$crn")" "none stated" "-"
row "collector binary, ${bin_args[0]} real cgroups, 1 s interval, with the write: % of one core (µs per sandbox per round)" \
	"$(calc 'printf "%.2f", a' "$cbp") ($(calc 'printf "%.1f", a' "$cbus"))" "" "" "<= 1 %" "$(met 'a <= 1' "$cbp")"
row "collector binary's peak RSS (VmHWM), MiB; most of it libpq's shared libraries" \
	"$(calc 'printf "%.1f", a' "$cbrss")" "" "" "<= 8 MiB" "$(met 'a <= 8' "$cbrss")"
row "collector peak RSS, MiB, with the COPY" "$(calc 'printf "%.1f", a' "$crss")" \
	"$(calc 'printf "%.1f", a' "$cnrss") (naive reader)" "" "<= 8 MiB" "$(met 'a <= 8' "$crss")"
row "hot statements whose plan reads samples with a Seq Scan (auto_explain, $(num "$nplans") plans; ${notex:-?} not exercised)" \
	"${seq:-not run} of ${nst:-?}" "" "" "0" "$(met 'a == 0 && b == 0' "$seq" "$notex")"

echo
if ((${#failed[@]})); then
	echo "FAILED to run: ${failed[*]} (see $logs)"
	exit 1
fi
echo "every benchmark ran: ${ran[*]}"
