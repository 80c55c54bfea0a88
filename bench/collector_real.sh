#!/usr/bin/env bash
# collector_real: the real meter-collector binary on N real cgroups of this
# host, sampling every second and writing to PostgreSQL, measured from /proc:
# its CPU (utime + stime over the measured span, after a warm-up of a rescan's
# length) in share of one core and per sandbox per round, its peak RSS
# (VmHWM), and the samples the database received in that span.
#
#   bash bench/collector_real.sh [N] [SECONDS]     (default 1000 cgroups, 60 s)
#
# METER_BENCH_SMAPS=FILE keeps a copy of the collector's /proc/PID/smaps at the
# end: what its RSS is made of, mapping by mapping.
#
# Needs root (cgroups). Uses DATABASE_URL's server or the private cluster
# (started and stopped again when it was not running), in a database of its
# own that it drops at the end, with the cgroups. Prints a line of figures,
# then "RESULT collector_bin_pct=... collector_bin_us=... collector_bin_rss_mib=..."
# for bench/table.sh. Never a test: figures only.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-1000}
secs=${2:-60}
[[ $n =~ ^[0-9]+$ && $secs =~ ^[0-9]+$ && $secs -ge 5 ]] ||
	{ echo "collector_real: N and SECONDS are whole numbers, SECONDS at least 5" >&2; exit 2; }
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}

# The hierarchies: v2 alone, hybrid (v2 for CPU, v1 for memory), or v1.
root=/sys/fs/cgroup
if [[ -f $root/cgroup.controllers ]]; then
	prim=$root mem=
elif [[ -d $root/unified ]]; then
	prim=$root/unified mem=$root/memory
else
	prim=$root/cpuacct mem=$root/memory
fi

. "$here/bench/pgdb.sh"
bench_pg_up
db=meter_bench_collector
acct=bench-$$
work=$(mktemp -d /tmp/meter-bench-collector-XXXXXX)
pid=
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	for h in "$prim" $mem; do
		[[ -d $h/sandboxes/$acct ]] || continue
		find "$h/sandboxes/$acct" -mindepth 1 -maxdepth 1 -type d -exec rmdir {} + 2>/dev/null || true
		rmdir "$h/sandboxes/$acct" 2>/dev/null || true
	done
	rm -rf "$work"
	bench_pg_down "$db"
}
trap cleanup EXIT

bench_db_make "$db"
psql -X -q -d "$url" -c "INSERT INTO accounts (id, name, plan) VALUES ('$acct', 'Bench', 'paid')" >/dev/null

for h in "$prim" $mem; do
	mkdir -p "$h/sandboxes/$acct"
	for ((i = 0; i < n; i++)); do mkdir "$h/sandboxes/$acct/sb-$i"; done
done

DATABASE_URL=$url "$build/meter-collector" --interval 1s --spool "$work/spool" --db-role "" \
	--host-id bench --log-level warn >"$work/log" 2>&1 &
pid=$!
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
samples() { psql -X -qtA -d "$url" -c "SELECT count(*) FROM samples"; }
sleep 10 # the first rounds register every sandbox; measure the steady state
c0=$(cpu) s0=$(samples) t0=$(date +%s.%N)
sleep "$secs"
c1=$(cpu) s1=$(samples) t1=$(date +%s.%N)
rss=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
[[ -n ${METER_BENCH_SMAPS:-} ]] && cp "/proc/$pid/smaps" "$METER_BENCH_SMAPS"
kill -0 "$pid" || { cat "$work/log" >&2; echo "collector_real: the collector died" >&2; exit 1; }
awk -v c="$((c1 - c0))" -v hz="$ticks" -v t0="$t0" -v t1="$t1" -v n="$n" -v s="$((s1 - s0))" -v rss="$rss" '
BEGIN {
	span = t1 - t0; sec = c / hz
	pct = 100 * sec / span
	us = sec * 1e6 / (span * n)
	printf "collector binary, %d real cgroups, 1 s interval, with the write: %.2f %% of a core, %.1f us per sandbox per round, peak RSS %.1f MiB, %d samples in %.0f s (%.0f/s)\n", n, pct, us, rss / 1024, s, span, s / span
	printf "RESULT collector_bin_pct=%.2f collector_bin_us=%.1f collector_bin_rss_mib=%.1f collector_bin_samples_per_s=%.0f\n", pct, us, rss / 1024, s / span
}'
