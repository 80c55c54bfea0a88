#!/usr/bin/env bash
# Many collectors, few connections: Debian's PgBouncer, started from
# deploy/pgbouncer.ini (transaction pooling, 10 server connections), in front
# of the test PostgreSQL; 200 meter-collector processes, each on a fake cgroup
# tree of its own with 20 sandboxes, write through it for a few rounds. Then
# two outages: the database away behind PgBouncer (it refuses connections and
# its sessions are ended), and PgBouncer itself killed and started again; the
# collectors spool meanwhile and replay through it. Every sample each
# collector says it took is in the table exactly once, and the database never
# saw more than the pool's connections for it.
#
#   bash tests/pgbouncer_check.sh BUILD_DIR [COLLECTORS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: pgbouncer_check.sh BUILD_DIR [COLLECTORS]}
ncoll=${2:-200}
nsb=20 # (the tree below is made with {1..20})
# the test server: DATABASE_URL, or the private cluster as the other tests
DATABASE_URL=${DATABASE_URL:-$(bash "$here/scripts/pg.sh" url)}
for cmd in pgbouncer psql; do
	command -v "$cmd" >/dev/null || { echo "pgbouncer_check: $cmd is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/meter-pgbouncer-XXXXXX)
chmod 755 "$work"
db=meter_pgbouncer_$$
pgb_pid=
pids=()
# Each collector holds an inotify instance: one machine running 200 of them
# needs more than the default 128 a user may have (put back at the end).
inotify_was=$(cat /proc/sys/fs/inotify/max_user_instances)
cleanup() {
	set +e
	echo "$inotify_was" >/proc/sys/fs/inotify/max_user_instances
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
	[[ -n $pgb_pid ]] && kill "$pgb_pid" 2>/dev/null
	wait 2>/dev/null
	psql -X -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "pgbouncer_check: $*" >&2; exit 1; }

if (( inotify_was < ncoll + 64 )); then echo $(( ncoll + 256 )) >/proc/sys/fs/inotify/max_user_instances; fi
read -r sockdir user port < <(psql -X -qtA -F ' ' -d "$DATABASE_URL" -c \
	"SELECT split_part(current_setting('unix_socket_directories'), ',', 1), current_user, current_setting('port')")
psql -X -q -d "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
direct="host=$sockdir port=$port user=$user dbname=$db"
DATABASE_URL=$direct "$build/meter" migrate >/dev/null

# The example configuration, pointed at the test server and at folders of ours.
listen=$(( 30000 + $$ % 20000 ))
sed -e "s#^meter = .*#meter = host=$sockdir port=$port dbname=$db#" \
	-e "s#^listen_port = .*#listen_port = $listen#" \
	-e "s#^auth_type = .*#auth_type = trust#" \
	-e "s#^auth_file = .*#auth_file = $work/userlist.txt#" \
	-e "s#^logfile = .*#logfile = $work/pgbouncer.log#" \
	-e "s#^pidfile = .*#pidfile = $work/pgbouncer.pid#" \
	"$here/deploy/pgbouncer.ini" >"$work/pgbouncer.ini"
grep -q '^pool_mode = transaction' "$work/pgbouncer.ini" || fail "pgbouncer.ini does not pool transactions"
pool=$(sed -n 's/^default_pool_size = //p' "$work/pgbouncer.ini")
reserve=$(sed -n 's/^reserve_pool_size = //p' "$work/pgbouncer.ini")
echo "\"$user\" \"\"" >"$work/userlist.txt"
echo "unix_socket_dir = $work" >>"$work/pgbouncer.ini"
chown -R postgres "$work"
through="host=127.0.0.1 port=$listen user=$user dbname=meter"
start_pgbouncer() {
	pgbouncer -u postgres "$work/pgbouncer.ini" >>"$work/pgbouncer.out" 2>&1 &
	pgb_pid=$!
	for t in $(seq 1 100); do
		psql -X -qtA -d "$through" -c "SELECT 1" >/dev/null 2>&1 && return 0
		kill -0 $pgb_pid 2>/dev/null || { cat "$work/pgbouncer.out" "$work/pgbouncer.log" 2>/dev/null; fail "pgbouncer did not start"; }
		sleep 0.1
	done
	fail "pgbouncer did not answer in 10 s"
}
start_pgbouncer
[[ $(psql -X -qtA -d "$through" -c "SELECT current_database()") == "$db" ]] || fail "pgbouncer does not reach $db"

# One fake v2 tree per collector, 20 sandboxes each.
for i in $(seq 1 "$ncoll"); do
	root=$work/cg-$i
	mkdir -p "$root/sandboxes/acct-$i"/sb-$i-{1..20}
	: >"$root/cgroup.controllers"
	for k in $(seq 1 $nsb); do
		echo "usage_usec $(( i * 1000 + k ))" >"$root/sandboxes/acct-$i/sb-$i-$k/cpu.stat"
	done
done

for i in $(seq 1 "$ncoll"); do
	DATABASE_URL=$through "$build/meter-collector" --root "$work/cg-$i" --layout v2 \
		--interval 1s --spool "$work/spool-$i" --host-id "h-$i" --log-level info \
		>"$work/collector-$i.log" 2>&1 &
	pids+=($!)
done
began=$(date +%s%N) # every collector started: the test's own clock for their rounds
# While they write: the database sees at most the pool's server connections for them.
most=0
for t in $(seq 1 8); do
	sleep 0.5
	n=$(psql -X -qtA -d "$DATABASE_URL" -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db'")
	if (( n > most )); then most=$n; fi
done
# Outage 1: the database away behind the pool for 3 s.
psql -X -q -d "$DATABASE_URL" -c "ALTER DATABASE $db ALLOW_CONNECTIONS false" >/dev/null
psql -X -q -d "$DATABASE_URL" -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$db'" >/dev/null
sleep 3
psql -X -q -d "$DATABASE_URL" -c "ALTER DATABASE $db ALLOW_CONNECTIONS true" >/dev/null
sleep 3
# Outage 2: PgBouncer killed, started again 3 s later.
kill -9 "$pgb_pid"
wait "$pgb_pid" 2>/dev/null || true
pgb_pid=
sleep 3
start_pgbouncer
sleep 4
ran_ms=$(( ($(date +%s%N) - began) / 1000000 ))
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
bad=0
for i in "${!pids[@]}"; do
	rc=0
	wait "${pids[$i]}" || rc=$?
	if (( rc != 0 )); then
		bad=$(( bad + 1 ))
		echo "collector $(( i + 1 )) exited $rc:" >&2
		tail -n 3 "$work/collector-$(( i + 1 )).log" >&2 || true
	fi
done
pids=()
(( bad == 0 )) || fail "$bad collectors did not exit 0"

taken=0 written=0 spooled=0 replayed=0
for i in $(seq 1 "$ncoll"); do
	grep -q 'database away: spooled' "$work/collector-$i.log" && spooled=$(( spooled + 1 ))
	grep -q 'replayed' "$work/collector-$i.log" && replayed=$(( replayed + 1 ))
	line=$(grep 'stopping:' "$work/collector-$i.log" | tail -n 1)
	t=$(echo "$line" | sed -n 's/.* \([0-9]*\) samples (.*/\1/p')
	w=$(echo "$line" | sed -n 's/.*(\([0-9]*\) written.*/\1/p')
	[[ -n $t && -n $w ]] || fail "collector $i printed no summary: $(tail -n 2 "$work/collector-$i.log")"
	taken=$(( taken + t )) written=$(( written + w ))
done
stored=$(psql -X -qtA -d "$direct" -c "SELECT count(*) FROM samples")
distinct=$(psql -X -qtA -d "$direct" -c "SELECT count(DISTINCT (sandbox_id, incarnation, ts)) FROM samples")
hosts=$(psql -X -qtA -d "$direct" -c "SELECT count(DISTINCT host) FROM samples")
echo "pgbouncer_check: $ncoll collectors, $(( ncoll * nsb )) sandboxes: $taken samples taken, $written known written (the rest were committed as a connection died, and their replay found them in), $stored in the table ($distinct distinct), at most $most server connections (pool $pool + reserve $reserve); through two outages $spooled collectors spooled and $replayed replayed"
(( taken >= ncoll * nsb * 2 )) || fail "too few rounds: $taken samples"
# Against a truth that is not the collectors' own word: every sandbox of a host
# sampled in each of its rounds (as many rows as the others), and each in more
# than a third of the 1 s rounds the test's clock gave all of them: a collector
# that samples in one round of three or fewer is caught. (A quiet run here has
# 9/10; beside the valgrind soak on 2 cores, 2/3 was seen, and 0.49 in CI's
# sanitized pass beside the other tests: a bound that is a figure of speed
# would fail on a loaded machine, so it stays far from them.)
read -r nsbs least uneven < <(psql -X -qtA -F ' ' -d "$direct" -c "
	SELECT count(*), min(n), (SELECT count(*) FROM (SELECT host FROM (SELECT host, sandbox_id,
	  count(*) n FROM samples GROUP BY 1, 2) y GROUP BY host HAVING min(n) <> max(n)) z)
	FROM (SELECT sandbox_id, count(*) n FROM samples GROUP BY 1) x")
echo "pgbouncer_check: $nsbs sandboxes with rows, the fewest $least, $uneven host(s) with uneven rounds, $ran_ms ms of rounds by the clock"
(( nsbs == ncoll * nsb )) || fail "$nsbs sandboxes have rows, not $(( ncoll * nsb ))"
(( uneven == 0 )) || fail "$uneven collector(s) sampled some sandboxes in fewer rounds than others"
(( least * 1000 * 3 > ran_ms )) || fail "a sandbox has $least rows for $ran_ms ms of 1 s rounds"
[[ $taken == "$stored" && $stored == "$distinct" ]] || fail "not every sample landed exactly once"
# "written" counts the rows a collector knows it inserted: a batch whose COMMIT
# went through as the connection died is spooled, and its replay inserts
# nothing new. It can fall short of taken, never exceed it.
(( written <= taken )) || fail "$written written, more than the $taken taken"
[[ $hosts == "$ncoll" ]] || fail "samples of $hosts collectors, not $ncoll"
(( spooled == ncoll && replayed == ncoll )) || fail "through the outages only $spooled collectors spooled and $replayed replayed, of $ncoll"
(( most <= pool + reserve + 1 )) || fail "the database saw $most connections, past the pool"
exit 0
