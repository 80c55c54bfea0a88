#!/usr/bin/env bash
# bench_lag: how long a sample takes from its arrival to GET /usage, while
# collectors keep writing. On a PostgreSQL cluster of its own:
#   - meter-api with its rollup worker on (--rollup-idle as given);
#   - the ingest load: meter-collector on a fake cgroup v2 tree on tmpfs with
#     --sandboxes sandbox cgroups, sampling every --interval: its write path
#     (COPY, INSERT ... ON CONFLICT, the marking trigger), sandboxes/interval
#     samples a second, each marking its sandbox for the rollup;
#   - a probe: a sandbox of its own whose counter goes up by one CPU second,
#     written as the collector writes (INSERT as meter_collector, so the same
#     trigger marks it); arrival is when that write has committed (psql
#     returned), and the sample is visible when GET /v1/sandboxes/{id}/usage
#     shows the new CPU (polled every 20 ms). One probe every 0.5 to 1.5 s
#     (random, so probes fall anywhere in the collector's rounds) for --seconds.
# Prints the ingest rate measured in the table, a Markdown table row and the
# machine-readable line
#   LAG p50_ms=... p99_ms=... ingest_sps=...
# Never a test: figures only; exits 0 unless it could not run.
#
#   bash bench/bench_lag.sh [--sandboxes N] [--interval DURATION] [--seconds S]
#                           [--rollup-idle DURATION] [--history HOURS]
#   (defaults: 3000 sandboxes, 10s, 60 s, meter-api's own default, 0)
# --history gives every sandbox (and the probe) HOURS of samples at the
# interval before the run, already rolled up: sandboxes that have lived that
# long, whose every new round must not cost more to rate than a young one's.
#
# METER_BUILD names a build folder to take the programs from; otherwise the
# normal build is made. Everything it starts (programs, cluster, folders) is
# removed on exit, failure or Ctrl-C.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
nsb=3000 interval=10s secs=60 idle= history=0
usage() { echo "usage: bench_lag.sh [--sandboxes N] [--interval DURATION] [--seconds S] [--rollup-idle DURATION] [--history HOURS]" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
	case $1 in
	--sandboxes) nsb=${2:-}; shift 2 || usage ;;
	--interval) interval=${2:-}; shift 2 || usage ;;
	--seconds) secs=${2:-}; shift 2 || usage ;;
	--rollup-idle) idle=${2:-}; shift 2 || usage ;;
	--history) history=${2:-}; shift 2 || usage ;;
	*) usage ;;
	esac
done
[[ $nsb =~ ^[0-9]+$ && $nsb -ge 1 && $nsb -le 100000 ]] || { echo "bench_lag: --sandboxes must be 1 to 100000" >&2; exit 2; }
[[ $secs =~ ^[0-9]+$ && $secs -ge 5 ]] || { echo "bench_lag: --seconds must be a whole number, at least 5" >&2; exit 2; }
[[ $interval =~ ^[0-9]+(ms|s|m)$ ]] || { echo "bench_lag: --interval like 500ms, 10s or 1m" >&2; exit 2; }
[[ -z $idle || $idle =~ ^[0-9]+(ms|s)$ ]] || { echo "bench_lag: --rollup-idle like 50ms or 1s" >&2; exit 2; }
[[ $history =~ ^[0-9]+$ && $history -le 2000 ]] || { echo "bench_lag: --history must be 0 to 2000 hours" >&2; exit 2; }
command -v curl >/dev/null && command -v jq >/dev/null ||
	{ echo "bench_lag: needs curl and jq (apt-get install curl jq)" >&2; exit 1; }
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}
interval_ms=$(awk -v v="$interval" 'BEGIN { n = v + 0; if (v ~ /ms$/) print n; else if (v ~ /m$/) print n * 60000; else print n * 1000 }')

work=$(mktemp -d /tmp/meter-lag-XXXXXX)
chmod 711 "$work"
export METER_PG_DIR=$work/pg
api_pid= coll_pid=
cleanup() {
	set +e
	[[ -n $coll_pid ]] && kill -9 "$coll_pid" 2>/dev/null && wait "$coll_pid" 2>/dev/null
	[[ -n $api_pid ]] && kill -9 "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null
	bash "$here/scripts/pg.sh" destroy >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$here/bench/own_cluster.sh"
own_cluster_up
sql() { psql -X -q -v ON_ERROR_STOP=1 -tA -d "$url" "$@"; }
sql >/dev/null <<SQL
INSERT INTO accounts (id, name, plan) VALUES ('lag', 'Lag', 'paid');
INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at)
SELECT 'sb-' || i, 'lag', 2, 4, now() - interval '$history hours' FROM generate_series(1, $nsb) i;
INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at)
VALUES ('probe', 'lag', 2, 4, now() - interval '$history hours' - interval '1 minute');
SQL

# The fake tree: sandboxes/lag/sb-N, cgroup v2 files as a host has them.
cg=$work/cg/sandboxes/lag
mkdir -p "$cg"
echo 'cpu memory' >"$work/cg/cgroup.controllers"
for i in $(seq 1 "$nsb"); do
	d=$cg/sb-$i
	mkdir "$d"
	printf 'usage_usec %020d\nuser_usec 0\nsystem_usec 0\n' $((i * 1000)) >"$d/cpu.stat"
	echo 'populated 1' >"$d/cgroup.events"
	echo 1048576 >"$d/memory.current"
	echo 2097152 >"$d/memory.peak"
	echo 4294967296 >"$d/memory.max"
	echo '200000 100000' >"$d/cpu.max"
	printf 'anon 4096\nfile 100\nkernel 1024\nsock 0\n' >"$d/memory.stat"
done

# The history: every sandbox's earlier samples, in the incarnation the collector
# will report (the folder's inode), with a counter below what the tree shows.
if (( history > 0 )); then
	for i in $(seq 1 "$nsb"); do
		echo "sb-$i $(stat -c %i "$cg/sb-$i")"
	done >"$work/inodes"
	sql >/dev/null <<SQL
CREATE TEMP TABLE inodes (id text, inode bigint);
\copy inodes FROM '$work/inodes' WITH (DELIMITER ' ')
INSERT INTO inodes VALUES ('probe', 1);
GRANT SELECT ON inodes TO meter_collector;
SET ROLE meter_collector;
INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host, cpu_usage_us)
SELECT n.id, n.inode, g.t, 'lag', 'lag', 0
FROM inodes n, generate_series(now() - interval '$history hours', now() - interval '1 minute',
                               interval '$interval_ms milliseconds') g(t);
RESET ROLE;
SQL
	hist_rows=$(sql -c "SELECT count(*) FROM samples")
	echo "bench_lag: $hist_rows samples of history ($history h per sandbox); rolling them up first" >&2
fi

port=$((20000 + $$ % 20000))
"$build/meter-api" --listen "127.0.0.1:$port" --log-level warn ${idle:+--rollup-idle "$idle"} \
	>"$work/api.log" 2>&1 &
api_pid=$!
for _ in $(seq 1 300); do
	curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	kill -0 "$api_pid" 2>/dev/null || { cat "$work/api.log" >&2; echo "bench_lag: meter-api did not start" >&2; exit 1; }
	sleep 0.1
done
if (( history > 0 )); then
	t0=$(date +%s)
	until [[ $(sql -c "SELECT count(*) FROM rollup_queue WHERE waiting IS NULL") == 0 ]]; do
		(( $(date +%s) - t0 < 3600 )) || { echo "bench_lag: the history was not rolled up in an hour" >&2; exit 1; }
		sleep 1
	done
	echo "bench_lag: history rolled up in $(( $(date +%s) - t0 )) s" >&2
fi
# A sandbox of this tree keeps 6 cgroup files open; the collector keeps 64
# more for itself and samples only the sandboxes whose files fit below the
# open file limit (it says so loudly). Raise the limit when it is too low and
# that is allowed; say so when it is not.
need=$((nsb * 6 + 128))
if (( $(ulimit -Hn) < need )) && ! ulimit -n "$need" 2>/dev/null; then
	echo "bench_lag: the open file limit ($(ulimit -Hn)) is below the $need that $nsb sandboxes need: some will not be sampled" >&2
fi
"$build/meter-collector" --root "$work/cg" --layout v2 --interval "$interval" \
	--spool "$work/spool" --host-id lag --log-level warn >"$work/collector.log" 2>&1 &
coll_pid=$!

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# The rollup keeps up or not: wait for the first rounds to be written and rated.
sleep $(( interval_ms * 2 / 1000 + 1 ))
kill -0 "$coll_pid" 2>/dev/null || { cat "$work/collector.log" >&2; echo "bench_lag: the collector stopped" >&2; exit 1; }

hour() { date -u -d "@$1" +%Y-%m-%dT%H:00:00Z; }
from=$(hour $(( $(date +%s) - 7200 )))
to=$(hour $(( $(date +%s) + secs + 7200 )))
probe_url="http://127.0.0.1:$port/v1/sandboxes/probe/usage?from=$from&to=$to"
n0=$(sql -c "SELECT count(*) FROM samples WHERE sandbox_id <> 'probe'")
t_start=$(now_ms)
cpu=0 lost=0
: >"$work/lags"
while (( $(now_ms) - t_start < secs * 1000 )); do
	cpu=$((cpu + 1000000))
	sql >/dev/null <<SQL
BEGIN;
SET LOCAL ROLE meter_collector;
INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host, cpu_usage_us)
VALUES ('probe', 1, clock_timestamp(), 'lag', 'probe', $cpu);
COMMIT;
SQL
	t0=$(now_ms)
	want=$((cpu / 1000000))
	seen=0
	while (( $(now_ms) - t0 < 120000 )); do
		got=$(curl -fs -H "Authorization: Bearer $key" "$probe_url" | jq -r '.cpu_seconds // empty' 2>/dev/null || true)
		if [[ -n $got ]] && awk -v g="$got" -v w="$want" 'BEGIN { exit !(g + 0 >= w) }'; then
			seen=1
			break
		fi
		sleep 0.02
	done
	if (( seen )); then
		echo $(( $(now_ms) - t0 )) >>"$work/lags"
	else
		lost=$((lost + 1))
	fi
	sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.5 + r / 32768 }')"
done
t_end=$(now_ms)
n1=$(sql -c "SELECT count(*) FROM samples WHERE sandbox_id <> 'probe'")
kill -0 "$coll_pid" 2>/dev/null || { cat "$work/collector.log" >&2; echo "bench_lag: the collector stopped" >&2; exit 1; }
pending=$(sql -c "SELECT count(*) FROM rollup_queue WHERE waiting IS NULL")
grep -m 3 -E "not sampled|could not" "$work/collector.log" >&2 || true

sort -n "$work/lags" >"$work/lags.sorted"
probes=$(wc -l <"$work/lags.sorted")
(( probes > 0 )) || { echo "bench_lag: no probe became visible within 120 s" >&2; exit 1; }
pct() { sed -n "$(( (probes * $1 + 99) / 100 ))p" "$work/lags.sorted"; }
p50=$(pct 50) p99=$(pct 99) max=$(tail -n 1 "$work/lags.sorted")
sps=$(awk -v n=$((n1 - n0)) -v ms=$((t_end - t_start)) 'BEGIN { printf "%.0f", n * 1000 / ms }')
goal_ms=$((interval_ms + 1000))
echo "bench_lag: $nsb sandboxes sampled every $interval by meter-collector (fake v2 tree), each with $history h of history, $(nproc) cores, $(date -u +%Y-%m-%d)"
expected=$(awk -v n="$nsb" -v ms="$interval_ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')
echo "bench_lag: ingest $sps samples/s reached the table, of $expected/s the collector takes (rounds land at once, so a window that is not a whole number of intervals reads a little off)"
echo "bench_lag: $probes probes over $(( (t_end - t_start) / 1000 )) s (not visible within 120 s: $lost), max ${max} ms; marks pending at the end: $pending"
echo
echo "| figure | result | | | goal |"
echo "|---|---|---|---|---|"
awk -v s="$sps" -v a="$p50" -v b="$p99" -v g="$interval" \
	'BEGIN { printf "| rollup lag under ingest (%s samples/s) | p50 %.2f s, p99 %.2f s | | | <= interval + 1 s (%s + 1 s) |\n", s, a / 1000, b / 1000, g }'
echo
echo "LAG p50_ms=$p50 p99_ms=$p99 ingest_sps=$sps"
