#!/usr/bin/env bash
# soak: meter-api and meter-collector under steady load for a set time, on a
# PostgreSQL cluster of their own: wrk on loopback against the quota check and
# an account's usage, and 200 real sandbox cgroups (each with a process in
# it) sampled every second. Reports RSS over time, errors, and whether every
# sample landed; exits 1 when something failed.
#
#   bash bench/soak.sh [SECONDS] [--valgrind]      (default 600 s)
#
# --valgrind runs both programs under valgrind's memcheck (use a short time:
# everything is some 20 times slower) and fails on any error or on memory no
# pointer reaches at exit (definitely or indirectly lost).
# Needs root (cgroups, apt for wrk the first time). METER_BUILD names a build
# folder to take the programs from (the suite passes its own); otherwise the
# normal build is made. The suite runs a short form of both.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=600
valgrind=0
for a in "$@"; do
	case $a in
	--valgrind) valgrind=1 ;;
	*) [[ $a =~ ^[0-9]+$ ]] || { echo "soak: usage: soak.sh [SECONDS] [--valgrind]" >&2; exit 2; }
	   secs=$a ;;
	esac
done
(( secs >= 5 )) || { echo "soak: SECONDS must be at least 5" >&2; exit 2; }
command -v wrk >/dev/null || apt-get install -y -qq wrk >/dev/null ||
	{ echo "soak: needs wrk (apt-get install wrk)" >&2; exit 1; }
if [[ $valgrind == 1 ]]; then
	command -v valgrind >/dev/null || apt-get install -y -qq valgrind >/dev/null ||
		{ echo "soak: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
fi
build=${METER_BUILD:-$(bash "$here/scripts/build.sh" | tail -n 1)}
sanitized=0
grep -q "METER_SANITIZE:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null && sanitized=1
if [[ $valgrind == 1 && $sanitized == 1 ]]; then
	echo "soak: $build is a sanitizer build, which valgrind cannot run; LeakSanitizer checks it at exit instead" >&2
	exit 2
fi

work=$(mktemp -d /tmp/meter-soak-XXXXXX)
chmod 711 "$work"
export METER_PG_DIR=$work/pg
holder=meter-soak-$$
nsb=200
api_pid= coll_pid= wrk_pid=
sleepers=()
# Where sandboxes live on this host: v2, hybrid (v2 for CPU, v1 memory) or v1.
if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
	dirs=(/sys/fs/cgroup)
elif [[ -f /sys/fs/cgroup/unified/cgroup.controllers ]]; then
	dirs=(/sys/fs/cgroup/unified /sys/fs/cgroup/memory)
else
	dirs=(/sys/fs/cgroup/cpuacct /sys/fs/cgroup/memory)
fi

cleanup() {
	set +e
	[[ -n $wrk_pid ]] && kill "$wrk_pid" 2>/dev/null
	[[ -n $coll_pid ]] && kill -9 "$coll_pid" 2>/dev/null
	[[ -n $api_pid ]] && kill -9 "$api_pid" 2>/dev/null
	for p in "${sleepers[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	for d in "${dirs[@]}"; do
		for i in $(seq 1 $nsb); do
			[[ -d $d/$holder/sb-$i ]] || continue
			for t in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d/$holder/sb-$i" 2>/dev/null && break; sleep 0.1; done
		done
		[[ -d $d/$holder ]] && rmdir "$d/$holder"
	done
	bash "$here/scripts/pg.sh" destroy >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$here/bench/own_cluster.sh"
own_cluster_up
psql -X -q -d "$url" >/dev/null <<SQL
INSERT INTO accounts (id, name, plan) VALUES ('soak', 'Soak', 'paid');
INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at)
SELECT 'sb-' || i, 'soak', 1, 1, now() FROM generate_series(1, $nsb) i;
SQL

# 200 sandbox cgroups, each with a sleeping process in it.
for d in "${dirs[@]}"; do mkdir "$d/$holder"; done
for i in $(seq 1 $nsb); do
	for d in "${dirs[@]}"; do mkdir "$d/$holder/sb-$i"; done
	sleep 100000 &
	sleepers+=($!)
	for d in "${dirs[@]}"; do echo $! >"$d/$holder/sb-$i/cgroup.procs"; done
done

vg=()
if [[ $valgrind == 1 ]]; then
	# a leak of any block no pointer reaches (definite, or lost with one that is) fails
	# --trace-children: meter-collector starts itself again once (collector/meter_collector.c)
	vg=(valgrind --quiet --error-exitcode=99 --leak-check=full --trace-children=yes
	    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect
	    --track-origins=no)
fi
port=$(( 20000 + $$ % 20000 ))
"${vg[@]}" "$build/meter-api" --listen "127.0.0.1:$port" --rollup-idle 100ms --log-level warn \
	>"$work/api.log" 2>&1 &
api_pid=$!
"${vg[@]}" "$build/meter-collector" --root /sys/fs/cgroup --match "$holder/(?<sandbox>[^/]+)" \
	--interval 1s --spool "$work/spool" --host-id soak --log-level info >"$work/collector.log" 2>&1 &
coll_pid=$!
began=$(date +%s%N) # the test's own clock for the collector's rounds
for t in $(seq 1 600); do
	curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
	kill -0 $api_pid 2>/dev/null || { cat "$work/api.log" >&2; echo "soak: meter-api did not start" >&2; exit 1; }
	sleep 0.1
done

cat >"$work/load.lua" <<LUA
local n = 0
-- steady, not flat out: each connection pauses 1 ms between requests
delay = function() return 1 end
request = function()
  n = n + 1
  if n % 10 == 0 then
    return wrk.format("GET", "/v1/accounts/soak/usage?from=" .. os.date("!%Y-%m-%dT%H:00:00Z", os.time() - 3600) .. "&to=" .. os.date("!%Y-%m-%dT%H:00:00Z", os.time() + 3600), {["Authorization"] = "Bearer $key"})
  end
  return wrk.format("POST", "/v1/quota/check", {["Authorization"] = "Bearer $key", ["Content-Type"] = "application/json"}, '{"account_id":"soak","vcpus":1,"memory_gib":1}')
end
done = function(summary, latency, requests)
  io.write(string.format("wrk: %d requests, %d non-2xx/3xx, %d socket errors\n", summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
LUA
conns=2
[[ $valgrind == 1 ]] && conns=1
wrk -t1 -c$conns -d"${secs}s" --timeout 10s -s "$work/load.lua" "http://127.0.0.1:$port" >"$work/wrk.out" 2>&1 &
wrk_pid=$!

rss() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "-"; }
step=$(( secs / 10 )); (( step >= 1 )) || step=1
# RSS every 2 s for the slope below ("seconds api collector" a line)
( t=0; while kill -0 $wrk_pid 2>/dev/null; do
	echo "$t $(rss $api_pid) $(rss $coll_pid)"; sleep 2; t=$(( t + 2 ))
done ) >"$work/rss.dense" &
dense_pid=$!
echo "soak: ${secs} s, $nsb sandbox cgroups sampled every second, wrk with $conns connection(s)$([[ $valgrind == 1 ]] && echo ', under valgrind memcheck')"
echo
echo "| s | meter-api RSS MiB | meter-collector RSS MiB |"
echo "|---|---|---|"
rss_api=() rss_coll=()
elapsed=0
while kill -0 $wrk_pid 2>/dev/null; do
	a=$(rss $api_pid) c=$(rss $coll_pid)
	echo "| $elapsed | $a | $c |"
	rss_api+=("$a") rss_coll+=("$c")
	sleep "$step"
	elapsed=$(( elapsed + step ))
done
wait $wrk_pid || true
wrk_pid=
wait $dense_pid 2>/dev/null || true
a=$(rss $api_pid) c=$(rss $coll_pid)
echo "| end | $a | $c |"
rss_api+=("$a") rss_coll+=("$c")
echo

fail=0
wrk_line=$(grep '^wrk:' "$work/wrk.out" || true)
echo "$wrk_line"
if [[ -z $wrk_line ]]; then cat "$work/wrk.out"; fail=1; fi
read -r reqs bad sockerr < <(echo "$wrk_line" | awk '{gsub(",", ""); print $2, $4, $6}')
if [[ ${bad:-1} != 0 || ${sockerr:-1} != 0 || ${reqs:-0} == 0 ]]; then
	echo "FAIL: requests failed"; fail=1
fi

# Every sample landed: the collector's own count against the table.
sleep 1.5
ran_ms=$(( ($(date +%s%N) - began) / 1000000 ))
kill -TERM $coll_pid
coll_rc=0; wait $coll_pid || coll_rc=$?
coll_pid=
summary=$(grep 'stopping:' "$work/collector.log" | tail -n 1 || true)
taken=$(echo "$summary" | sed -n 's/.* \([0-9]*\) samples (.*/\1/p')
written=$(echo "$summary" | sed -n 's/.*(\([0-9]*\) written.*/\1/p')
stored=$(psql -X -qtA -d "$url" -c "SELECT count(*) FROM samples")
echo "samples: $taken taken, $written written, $stored in the table"
if [[ -z $taken || $taken == 0 || $taken != "$written" || $written != "$stored" ]]; then
	echo "FAIL: not every sample landed exactly once"; fail=1
fi
# ... and against the clock, not the collector's own word: each of the sandboxes
# sampled in every round (as many rows as the others), at least 2/3 of the 1 s
# rounds the time it ran allows (a run here has more than all of them; under
# valgrind a round may take longer: 1/4).
read -r nsbs least most < <(psql -X -qtA -F ' ' -d "$url" -c "SELECT count(*), min(n), max(n) FROM (SELECT sandbox_id, count(*) n FROM samples GROUP BY 1) x")
need=$(( ran_ms * ($valgrind == 1 ? 3 : 8) / 12000 ))
echo "rounds: $nsbs sandboxes, $least to $most rows each, $ran_ms ms by the clock (at least $need wanted)"
if [[ $nsbs != "$nsb" ]] || (( most - least > 1 || least < need )); then
	echo "FAIL: rounds are missing"; fail=1
fi
# ... and was rolled up for all sandboxes.
for t in $(seq 1 300); do
	q=$(psql -X -qtA -d "$url" -c "SELECT count(*) FROM rollup_queue")
	[[ $q == 0 ]] && break
	sleep 0.2
done
rated=$(psql -X -qtA -d "$url" -c "SELECT count(DISTINCT sandbox_id) FROM usage_hourly")
echo "sandboxes rolled up: $rated of $nsb"
[[ $rated == "$nsb" ]] || { echo "FAIL: not every sandbox was rolled up"; fail=1; }

kill -TERM $api_pid
api_rc=0; wait $api_pid || api_rc=$?
api_pid=
errors=$(cat "$work/api.log" "$work/collector.log" | { grep -c -E ' error: |ERROR' || true; })
echo "exit: meter-api $api_rc, meter-collector $coll_rc; error lines in the logs: $errors"
if [[ $api_rc != 0 || $coll_rc != 0 || $errors != 0 ]]; then
	[[ $valgrind == 1 ]] && echo "(valgrind exits 99 on a memory error or a definite leak)"
	grep -h -E ' error: |ERROR|==[0-9]+==' "$work/api.log" "$work/collector.log" | head -n 40
	echo "FAIL: errors"; fail=1
fi

# Flat RSS: the last reading against the highest after the first quarter (warm-up).
# Not judged under valgrind or the sanitizers, whose own bookkeeping (ASan's
# quarantine of freed memory) grows; they judge leaks themselves at exit.
if [[ $valgrind == 1 || $sanitized == 1 ]]; then
	echo "RSS not judged: $([[ $valgrind == 1 ]] && echo valgrind || echo 'a sanitizer build'); leaks are checked at exit instead"
else
	flat() {
		local -a v=("$@")
		local n=${#v[@]} q=$(( ${#v[@]} / 4 ))
		(( q >= 1 )) || q=1
		awk -v warm="$(printf '%s\n' "${v[@]:0:$(( q + 1 ))}" | sort -g | tail -n 1)" -v last="${v[$(( n - 1 ))]}" \
			'BEGIN { printf "%.1f -> %.1f MiB", warm, last; exit !(last <= warm * 1.10 + 1.0) }'
	}
	# The slope of the floor, by least squares (MiB an hour): the least RSS of each
	# 30 s of the readings every 2 s, after the first quarter. A leak lifts the
	# floor; the passing peaks of a busy moment (a megabyte or two, given back)
	# do not. Judged on runs of 5 minutes or more: over the run it must project
	# less than 10 % of the warm RSS plus 1 MiB.
	slope() {
		awk -v col="$1" -v secs="$secs" -v judge="$(( secs >= 300 ))" '
			$col != "-" && $1 >= secs / 4 { w = int($1 / 30); if (!(w in lo) || $col < lo[w]) lo[w] = $col }
			END { for (w in lo) { x = w * 30; y = lo[w]; n++; sx += x; sy += y; sxx += x * x
			                       sxy += x * y; if (n == 1 || y < warm) warm = y }
			      d = n * sxx - sx * sx; b = d > 0 ? (n * sxy - sx * sy) / d : 0
			      printf "%+.2f MiB an hour (the floor of %d half-minutes)", b * 3600, n
			      exit judge && b * secs > warm * 0.10 + 1.0 }' "$work/rss.dense"
	}
	for who in api coll; do
		if [[ $who == api ]]; then name=meter-api; vals=("${rss_api[@]}"); else name=meter-collector; vals=("${rss_coll[@]}"); fi
		if line=$(flat "${vals[@]}"); then echo "RSS $name after warm-up: $line (flat)"
		else echo "RSS $name after warm-up: $line"; echo "FAIL: $name grew"; fail=1; fi
		if line=$(slope "$([[ $who == api ]] && echo 2 || echo 3)"); then echo "RSS $name slope: $line$( (( secs >= 300 )) || echo ' (not judged under 5 minutes)')"
		else echo "RSS $name slope: $line"; echo "FAIL: $name grows steadily"; fail=1; fi
	done
fi
[[ $fail == 0 ]] && echo "soak: passed" || echo "soak: FAILED"
exit $fail
