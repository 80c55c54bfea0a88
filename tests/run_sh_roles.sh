#!/usr/bin/env bash
# The embedded set-up runs no program as a database superuser: scripts/run.sh
# on a private PostgreSQL of its own (METER_PG_DIR), with the build given
# (METER_BUILD), a free port and no demo. While it runs, every connection to
# its database but ours is checked: meter-api's is meter_api's and the
# collector's meter_collector's, neither a superuser; the tables, made by
# meter migrate, belong to meter_owner, no superuser either. The API answers
# and the collector writes the samples of a real cgroup, so each works with
# its role's rights alone. A second run.sh beside it refuses (the same run
# folder) or fails before it starts anything (the same address), and never
# says that meter is ready.
#
#   bash tests/run_sh_roles.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: run_sh_roles.sh BUILD_DIR}
fail() { echo "run_sh_roles: $*" >&2; exit 1; }
for cmd in psql curl; do
	command -v "$cmd" >/dev/null || fail "$cmd is missing (scripts/deps.sh installs it)"
done
[[ $(id -u) -eq 0 ]] || fail "needs root (a cgroup of its own for the collector to sample)"
cgroot=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[[ -n $cgroot ]] || fail "needs a cgroup v2 mount"

work=$(mktemp -d /tmp/meter-runsh-XXXXXX)
chmod 755 "$work"
export METER_PG_DIR=$work/pg
acct=runsh$$
cg=$cgroot/sandboxes/$acct
run_pid=
cleanup() {
	set +e
	if [[ -n $run_pid ]]; then
		kill -TERM -- "-$run_pid" 2>/dev/null
		for _ in $(seq 50); do kill -0 "$run_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$run_pid" 2>/dev/null
	fi
	# (run.sh starts them in sessions of their own)
	pkill -KILL -f -- "--listen 127.0.0.1:$port" 2>/dev/null
	pkill -KILL -f -- "$work/run/collector.spool" 2>/dev/null
	pkill -KILL -f -- "$work/run2/collector.spool" 2>/dev/null
	for p in $(cat "$cg/sb-1/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
	sleep 0.2
	rmdir "$cg/sb-1" "$cg" 2>/dev/null
	rmdir "$cgroot/sandboxes" 2>/dev/null
	bash "$here/scripts/pg.sh" stop --immediate >/dev/null 2>&1
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM

port=
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 30000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
done
[[ -n $port ]] || fail "no free port"

env -u DATABASE_URL -u METER_API_DATABASE_URL -u METER_COLLECTOR_DATABASE_URL \
	METER_BUILD="$build" METER_RUN_DIR="$work/run" METER_LISTEN="127.0.0.1:$port" \
	METER_INTERVAL=1s setsid bash "$here/scripts/run.sh" --no-demo >"$work/run.log" 2>&1 &
run_pid=$!
su=$(bash "$here/scripts/pg.sh" url 2>/dev/null || true)
q() { psql -X -qtA -d "$su" -c "$1"; }
for _ in $(seq 300); do
	curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break
	kill -0 "$run_pid" 2>/dev/null || { cat "$work/run.log" >&2; fail "run.sh ended"; }
	sleep 0.2
done
curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" || { cat "$work/run.log" >&2; fail "meter-api never answered"; }
key=$(cat "$work/run/admin.key")

# A real sandbox: the account, its registration, a cgroup with a process in it.
auth="Authorization: Bearer $key"
curl -sf -o /dev/null -H "$auth" -X POST "http://127.0.0.1:$port/v1/accounts" \
	-d "{\"id\":\"$acct\",\"name\":\"run.sh roles\",\"plan\":\"paid\"}" || fail "POST /v1/accounts failed"
curl -sf -o /dev/null -H "$auth" -X POST "http://127.0.0.1:$port/v1/sandboxes" \
	-d "{\"id\":\"sb-1\",\"account_id\":\"$acct\",\"vcpus\":1,\"memory_gib\":1}" || fail "POST /v1/sandboxes failed"
mkdir -p "$cg/sb-1"
setsid bash -c 'echo $$ > "$1/cgroup.procs"; exec sleep 60' cg "$cg/sb-1" &
answer=$(curl -s -H "$auth" -X POST "http://127.0.0.1:$port/v1/quota/check" \
	-d "{\"account_id\":\"$acct\",\"vcpus\":1,\"memory_gib\":1}")
[[ $answer == *'"allowed"'* ]] || fail "the quota check answered: $answer"

samples=0
for _ in $(seq 150); do
	samples=$(q "SELECT count(*) FROM samples WHERE account_id = '$acct'")
	[[ $samples -gt 0 ]] && break
	sleep 0.2
done
[[ $samples -gt 0 ]] || { cat "$work/run.log" >&2; fail "the collector wrote no sample of $cg/sb-1"; }

conns=$(q "SELECT string_agg(DISTINCT a.usename || ':' || r.rolsuper, ',' ORDER BY a.usename || ':' || r.rolsuper)
           FROM pg_stat_activity a JOIN pg_roles r ON r.rolname = a.usename
           WHERE a.datname = 'meter' AND a.pid <> pg_backend_pid()")
echo "run_sh_roles: connected to meter as $conns"
[[ $conns == "meter_api:false,meter_collector:false" ]] ||
	fail "meter-api and the collector should be connected as meter_api and meter_collector, no superuser; saw $conns"
owners=$(q "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')")
[[ $owners == meter_owner ]] || fail "meter migrate should have made the tables as meter_owner; they belong to $owners"
[[ $(q "SELECT rolsuper FROM pg_roles WHERE rolname = 'meter_owner'") == f ]] || fail "meter_owner is a superuser"
[[ $(q "SELECT count(*) FROM api_keys WHERE role = 'admin'") == 1 ]] || fail "run.sh made no admin key"

# A second run.sh beside it: on the same run folder it refuses at once; on a
# folder of its own but the same address, meter-api cannot listen and it
# fails before starting a collector. Neither says "meter is ready".
second() { # RUN_DIR LOG
	env -u DATABASE_URL -u METER_API_DATABASE_URL -u METER_COLLECTOR_DATABASE_URL \
		METER_BUILD="$build" METER_RUN_DIR="$1" METER_LISTEN="127.0.0.1:$port" \
		timeout 120 bash "$here/scripts/run.sh" --no-demo >"$2" 2>&1 </dev/null
}
rc=0; second "$work/run" "$work/second.log" || rc=$?
[[ $rc == 1 ]] || { cat "$work/second.log" >&2; fail "a second run.sh on the same run folder exited $rc, not 1"; }
grep -q "meter is already running from $work/run" "$work/second.log" || { cat "$work/second.log" >&2; fail "the second run.sh did not say why"; }
rc=0; second "$work/run2" "$work/third.log" || rc=$?
[[ $rc == 1 ]] || { cat "$work/third.log" >&2; fail "a run.sh on an address in use exited $rc, not 1"; }
grep -q "meter-api did not start on 127.0.0.1:$port" "$work/third.log" || { cat "$work/third.log" >&2; fail "the run.sh on an address in use did not say why"; }
for log in second third; do
	! grep -q "meter is ready" "$work/$log.log" || fail "the $log run.sh said meter is ready"
done
! pgrep -f -- "$work/run2/collector.spool" >/dev/null || fail "the run.sh on an address in use started a collector"
curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" || fail "the first run.sh's meter-api stopped answering"
rm -rf "$work/run2"
echo "run_sh_roles: ok ($samples samples written as meter_collector; a second run.sh refused)"
