#!/usr/bin/env bash
# Runs meter on a fresh Debian 12 machine: installs the Debian packages that
# are missing, builds, starts the private PostgreSQL (unless DATABASE_URL names
# another one), applies the migrations, then runs in the foreground until
# Ctrl-C (or SIGTERM):
#
#   meter-api        the HTTP API on 127.0.0.1:8080 (METER_LISTEN), with its rollup worker
#   meter-collector  samples the cgroups laid out as sandboxes/<account>/<sandbox>
#                    below this host's cgroup root (METER_MATCH changes the pattern)
#   a demo sandbox   a real cgroup sandboxes/demo/demo-TIME running a light, varying
#                    load, registered to account "demo", so usage accrues at once
#                    (turn it off with METER_DEMO=0 or --no-demo)
#
# The first run makes an admin key, keeps it in .run/admin.key (mode 600) and
# prints it with a few curl lines to try.
#
# On the private PostgreSQL no program runs as a superuser: meter migrate and
# meter key create run as meter_owner, the database's owner; meter-api as
# meter_api and meter-collector as meter_collector, the roles the migrations
# make (scripts/pg.sh; docs/operations.md, "Roles and keys"). With
# DATABASE_URL set, every program uses it, unless METER_API_DATABASE_URL or
# METER_COLLECTOR_DATABASE_URL names the API's or the collector's.
#
#   scripts/run.sh --setup-only   everything but the services
#
# METER_BUILD names a build folder to use as it is (no packages installed, no
# build); METER_RUN_DIR moves .run (its key and the collector's spool).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

setup_only=0
demo=${METER_DEMO:-1}
for arg in "$@"; do
	case $arg in
	--setup-only) setup_only=1 ;;
	--no-demo) demo=0 ;;
	*) echo "run.sh: unknown option \"$arg\" (--setup-only, --no-demo)" >&2; exit 2 ;;
	esac
done

run=${METER_RUN_DIR:-$here/.run}
mkdir -p "$run"
chmod 700 "$run"
if [[ $setup_only == 0 ]]; then
	# One run.sh per run folder: a second would start a second collector on the
	# same spool and a second demo sandbox. The lock is held by the services too
	# (they inherit it), so it stands while any of them runs.
	exec 9>>"$run/run.lock"
	if ! flock -n 9; then
		echo "run.sh: meter is already running from $run (run.sh pid $(cat "$run/run.pid" 2>/dev/null || echo unknown)):" \
			"stop it first (Ctrl-C where it runs), or give this one a METER_RUN_DIR and METER_LISTEN of its own" >&2
		exit 1
	fi
	echo $$ >"$run/run.pid"
fi

if [[ -n ${METER_BUILD:-} ]]; then
	build=$METER_BUILD
	[[ -x $build/meter-api ]] || { echo "run.sh: no meter-api in METER_BUILD \"$build\"" >&2; exit 2; }
else
	bash scripts/deps.sh
	build=$(bash scripts/build.sh | tail -n 1)
fi

if [[ -z ${DATABASE_URL:-} ]]; then
	bash scripts/pg.sh start >/dev/null
	DATABASE_URL=$(bash scripts/pg.sh url --as meter_owner)
	api_url=$(bash scripts/pg.sh url --as meter_api)
	collector_url=$(bash scripts/pg.sh url --as meter_collector)
else
	api_url=${METER_API_DATABASE_URL:-$DATABASE_URL}
	collector_url=${METER_COLLECTOR_DATABASE_URL:-$DATABASE_URL}
fi
export DATABASE_URL
"$build/meter" migrate

if [[ ! -s "$run/admin.key" ]]; then
	(umask 077 && "$build/meter" key create --admin >"$run/admin.key" 2>/dev/null)
	echo "meter: made an admin key, kept in $run/admin.key"
fi
key=$(cat "$run/admin.key")
listen=${METER_LISTEN:-127.0.0.1:8080}
match=${METER_MATCH:-'sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)'}
url="http://$listen"

banner() {
	cat <<MSG

meter is ready.
  database:   DATABASE_URL='$DATABASE_URL'   (psql "\$DATABASE_URL")
  admin key:  $key
  try:        curl -s '$url/v1/rates?vcpus=2&memory_gib=4'
              curl -s -X POST $url/v1/estimates -d '{"runs_per_month":300,"minutes_per_run":6,"vcpus":2,"memory_gib":4,"avg_busy_vcpus":0.5}'
              curl -s -H "Authorization: Bearer $key" "$url/v1/accounts/demo/usage?from=\$(date -u +%Y-%m-%dT00:00:00Z)&to=\$(date -u -d tomorrow +%Y-%m-%dT00:00:00Z)"
              curl -s -H "Authorization: Bearer $key" -X POST $url/v1/quota/check -d '{"account_id":"demo","vcpus":1,"memory_gib":1}'
  collector:  samples every cgroup matching '$match' below /sys/fs/cgroup
  the CLI:    $build/meter estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 0.5
  stop:       Ctrl-C (the private PostgreSQL keeps running: scripts/pg.sh stop)
MSG
}
if [[ $setup_only == 1 ]]; then
	banner
	exit 0
fi

pids=()
demo_dirs=()
demo_pid=
demo_id=demo-$(date +%s)
cleanup() {
	trap - INT TERM EXIT
	if [[ ${#demo_dirs[@]} -gt 0 ]]; then
		# End the demo's processes (all of them: the cgroup knows), then stop it.
		kill "$demo_pid" 2>/dev/null || true
		for _ in 1 2 3 4 5; do
			procs=$(cat "${demo_dirs[2]}/cgroup.procs" 2>/dev/null || true)
			[[ -z $procs ]] && break
			kill -9 $procs 2>/dev/null || true
			sleep 0.2
		done
		curl -s -o /dev/null -X POST -H "Authorization: Bearer $key" "$url/v1/sandboxes/$demo_id/stop" || true
	fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for ((i = ${#demo_dirs[@]} - 1; i >= 0; i--)); do rmdir "${demo_dirs[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'cleanup; exit 0' INT TERM

# Own sessions: Ctrl-C reaches this script alone, which stops them in order.
# The API first: the collector and the demo start only once it answers, and
# it is ours that answers (another program on the port would answer too).
DATABASE_URL=$api_url setsid "$build/meter-api" --listen "$listen" &
api_pid=$!
pids+=($api_pid)
up=0
for _ in $(seq 100); do
	kill -0 "$api_pid" 2>/dev/null || break
	if curl -s -o /dev/null "$url/healthz"; then
		sleep 0.3
		kill -0 "$api_pid" 2>/dev/null && up=1
		break
	fi
	sleep 0.1
done
if [[ $up == 0 ]]; then
	echo "run.sh: meter-api did not start on $listen (its message is above; is the address in use? METER_LISTEN moves it)" >&2
	exit 1
fi
DATABASE_URL=$collector_url setsid "$build/meter-collector" --root /sys/fs/cgroup --match "$match" \
	--spool "$run/collector.spool" &
pids+=($!)

if [[ $demo == 1 ]]; then
	# The demo sandbox: where CPU is read (v2 if mounted, else v1 cpuacct) and, on a
	# hybrid or v1 host, the memory hierarchy too.
	cpu_root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
	[[ -n $cpu_root ]] || cpu_root=$(awk '$9 == "cgroup" && $NF ~ /cpuacct/ { print $5; exit }' /proc/self/mountinfo)
	mem_root=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
	dirs=()
	for r in "$cpu_root" "$mem_root"; do
		[[ -n $r ]] && dirs+=("$r/sandboxes" "$r/sandboxes/demo" "$r/sandboxes/demo/$demo_id")
	done
	if [[ -z $cpu_root ]] || ! mkdir -p "${dirs[@]}" 2>/dev/null; then
		echo "meter: no demo sandbox: cannot make cgroups here (needs root and cgroups)" >&2
	else
		demo_dirs=("${dirs[@]}")
		curl -s -o /dev/null -X POST -H "Authorization: Bearer $key" "$url/v1/accounts" \
			-d '{"id":"demo","name":"Demo (made by scripts/run.sh)","plan":"trial"}' || true
		curl -s -o /dev/null -X POST -H "Authorization: Bearer $key" "$url/v1/sandboxes" \
			-d "{\"id\":\"$demo_id\",\"account_id\":\"demo\",\"vcpus\":1,\"memory_gib\":1}" || true
		# A light, varying load: busy for 0.1 to 0.4 s, then idle for half a second.
		setsid bash -c 'for d in "$@"; do echo $$ > "$d/cgroup.procs"; done
			while :; do timeout 0.$((RANDOM % 4 + 1)) bash -c "while :; do :; done"; sleep 0.5; done' \
			demo "$cpu_root/sandboxes/demo/$demo_id" ${mem_root:+"$mem_root/sandboxes/demo/$demo_id"} &
		demo_pid=$!
		echo "meter: demo sandbox $demo_id of account demo is running (METER_DEMO=0 to skip)"
	fi
fi
banner
rc=0
wait -n "${pids[@]}" || rc=$?
echo "run.sh: a service ended (status $rc); stopping the others" >&2
exit $((rc == 0 ? 1 : rc))
