#!/usr/bin/env bash
# The deployment files of deploy/, checked for real:
#   - the systemd units pass systemd-analyze verify (ExecStart pointed at this
#     build's programs), and a broken copy does not (the check can fail);
#   - the PgBouncer example runs (Debian's pgbouncer, transaction pooling) in
#     front of the test PostgreSQL, and a collector writes through it: every
#     sample once, a batch sent again counts once.
#
#   bash tests/deploy_check.sh BUILD_DIR      (DATABASE_URL: the test server)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: deploy_check.sh BUILD_DIR}
: "${DATABASE_URL:?deploy_check: DATABASE_URL must name the test PostgreSQL}"
for cmd in systemd-analyze pgbouncer psql; do
	command -v "$cmd" >/dev/null || { echo "deploy_check: $cmd is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/meter-deploy-XXXXXX)
chmod 755 "$work"
db=meter_deploy_$$
pgb_pid=
cleanup() {
	set +e
	[[ -n $pgb_pid ]] && kill "$pgb_pid" 2>/dev/null && wait "$pgb_pid" 2>/dev/null
	psql -X -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$work"
	return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "deploy_check: $*" >&2; exit 1; }

# ---- systemd units ----
for u in meter-api meter-collector; do
	sed "s#^ExecStart=/usr/local/bin/$u#ExecStart=$build/$u#" "$here/deploy/$u.service" >"$work/$u.service"
	grep -q "^ExecStart=$build/$u\$" "$work/$u.service" || fail "$u.service has no ExecStart of /usr/local/bin/$u"
done
out=$(systemd-analyze verify "$work/meter-api.service" "$work/meter-collector.service" 2>&1) ||
	fail "systemd-analyze verify failed: $out"
[[ -z $out ]] || fail "systemd-analyze verify complains: $out"
grep -q '^Restart=on-failure' "$work/meter-collector.service" || fail "the collector does not restart on failure"
grep -q '^CapabilityBoundingSet=$' "$work/meter-collector.service" || fail "the collector keeps capabilities"
sed 's/^Restart=on-failure/Restart=sometimes/' "$work/meter-api.service" >"$work/broken.service"
out=$(systemd-analyze verify "$work/broken.service" 2>&1 || true)
[[ -n $out ]] || fail "a broken unit passed systemd-analyze verify: the check cannot fail"
echo "deploy_check: systemd units verified"

# ---- PgBouncer in front of the test server, a collector through it ----
read -r sockdir user port < <(psql -X -qtA -F ' ' -d "$DATABASE_URL" -c \
	"SELECT split_part(current_setting('unix_socket_directories'), ',', 1), current_user, current_setting('port')")
psql -X -q -d "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
direct="host=$sockdir port=$port user=$user dbname=$db"
DATABASE_URL=$direct "$build/meter" migrate >/dev/null
listen=$(( 30000 + $$ % 20000 ))
sed -e "s#^meter = .*#meter = host=$sockdir port=$port dbname=$db#" \
	-e "s#^listen_port = .*#listen_port = $listen#" \
	-e "s#^auth_type = .*#auth_type = trust#" \
	-e "s#^auth_file = .*#auth_file = $work/userlist.txt#" \
	-e "s#^logfile = .*#logfile = $work/pgbouncer.log#" \
	-e "s#^pidfile = .*#pidfile = $work/pgbouncer.pid#" \
	"$here/deploy/pgbouncer.ini" >"$work/pgbouncer.ini"
grep -q '^pool_mode = transaction' "$work/pgbouncer.ini" || fail "pgbouncer.ini does not pool transactions"
echo "\"$user\" \"\"" >"$work/userlist.txt"
echo "unix_socket_dir = $work" >>"$work/pgbouncer.ini"
chown -R postgres "$work"
pgbouncer -u postgres "$work/pgbouncer.ini" >"$work/pgbouncer.out" 2>&1 &
pgb_pid=$!
through="host=127.0.0.1 port=$listen user=$user dbname=meter"
for t in $(seq 1 100); do
	psql -X -qtA -d "$through" -c "SELECT 1" >/dev/null 2>&1 && break
	kill -0 $pgb_pid 2>/dev/null || { cat "$work/pgbouncer.out" "$work/pgbouncer.log" 2>/dev/null; fail "pgbouncer did not start"; }
	sleep 0.1
done
[[ $(psql -X -qtA -d "$through" -c "SELECT current_database()") == "$db" ]] || fail "pgbouncer does not reach $db"

# a fake v2 tree of two sandboxes
mkdir -p "$work/cg/sandboxes/acme/sb-1" "$work/cg/sandboxes/acme/sb-2"
touch "$work/cg/cgroup.controllers"
echo "usage_usec 4242" >"$work/cg/sandboxes/acme/sb-1/cpu.stat"
echo "usage_usec 777" >"$work/cg/sandboxes/acme/sb-2/cpu.stat"
chown -R postgres "$work"
for round in 1 2; do
	DATABASE_URL=$through "$build/meter-collector" --root "$work/cg" --layout v2 --once \
		--spool "$work/spool" --host-id deploy --log-level warn ||
		fail "the collector could not write through pgbouncer (round $round)"
done
n=$(psql -X -qtA -d "$direct" -c "SELECT count(*) FROM samples")
k=$(psql -X -qtA -d "$direct" -c "SELECT count(DISTINCT (sandbox_id, incarnation, ts)) FROM samples")
[[ $n == 4 && $k == 4 ]] || fail "through pgbouncer: $n samples ($k distinct), not 4"
echo "deploy_check: pgbouncer.ini runs; a collector wrote 4 samples through it"
exit 0
