#!/usr/bin/env bash
# The private cluster's server binaries replaced under it, as an upgrade of
# Debian's postgresql package does: its new backends would load the new
# libraries and fail ("plpgsql.so: undefined symbol"). scripts/pg.sh status
# says so (exit 4) and scripts/pg.sh start restarts it on the new binaries.
# A copy of the server binaries stands in for the package's (METER_PG_BINDIR),
# laid out as the package lays them out, so the copy finds the real libraries;
# it is replaced the way dpkg replaces a file: a new one renamed over it.
#
#   bash tests/pg_replaced.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "pg_replaced: $*" >&2; exit 1; }
real=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -n 1)
[[ -x $real/postgres ]] || fail "no PostgreSQL server binaries under /usr/lib/postgresql (scripts/deps.sh installs them)"
ver=$(basename "$(dirname "$real")")
work=$(mktemp -d /tmp/meter-pgreplaced-XXXXXX)
cleanup() {
	set +e
	bash "$here/scripts/pg.sh" stop --immediate >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
bindir=$work/usr/lib/postgresql/$ver/bin
mkdir -p "$bindir" "$work/usr/share/postgresql"
ln -s "/usr/lib/postgresql/$ver/lib" "$work/usr/lib/postgresql/$ver/lib"
ln -s "/usr/share/postgresql/$ver" "$work/usr/share/postgresql/$ver"
for b in postgres pg_ctl initdb psql; do cp "$real/$b" "$bindir/"; done
export METER_PG_DIR=$work/pg METER_PG_BINDIR=$bindir
pg() { bash "$here/scripts/pg.sh" "$@"; }
plpgsql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -d "$(pg url)" -c 'DO $$ BEGIN PERFORM 1; END $$'; }
server_exe() { readlink "/proc/$(head -n 1 "$work/pg/data/postmaster.pid")/exe"; }

pg start >/dev/null || fail "the cluster did not start"
plpgsql || fail "PL/pgSQL does not run on a fresh cluster"
[[ $(server_exe) != *"(deleted)" ]] || fail "the server's program reads as replaced before it was"
rc=0
pg status >/dev/null 2>&1 || rc=$?
[[ $rc == 0 ]] || fail "status exited $rc on a cluster whose binaries are as they were"

# the package upgrade: a new file renamed over the running server's program
cp "$bindir/postgres" "$bindir/postgres.dpkg-new"
mv -f "$bindir/postgres.dpkg-new" "$bindir/postgres"
[[ $(server_exe) == *"(deleted)" ]] || fail "the running server's program does not read as replaced"
rc=0
pg status >/dev/null 2>"$work/status.err" || rc=$?
[[ $rc == 4 ]] || { cat "$work/status.err" >&2; fail "status exited $rc, not 4, on replaced binaries"; }
grep -q "server binaries were replaced under the running cluster" "$work/status.err" ||
	{ cat "$work/status.err" >&2; fail "status did not say why"; }
pg start >/dev/null 2>"$work/start.err" || { cat "$work/start.err" >&2; fail "start failed on replaced binaries"; }
grep -q "restarting it on the new ones" "$work/start.err" || { cat "$work/start.err" >&2; fail "start did not say it restarts"; }
[[ $(server_exe) != *"(deleted)" ]] || fail "start left the server on the replaced program"
pg status >/dev/null || fail "status after the restart is not 0"
plpgsql || fail "PL/pgSQL does not run after the restart"
echo "pg_replaced: ok (status 4 and why, then restarted by start)"
