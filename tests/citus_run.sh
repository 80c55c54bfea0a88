#!/usr/bin/env bash
# Runs a test program against a Citus cluster of its own (scripts/citus.sh: a
# coordinator and two workers on this machine, under BUILD_DIR, from PORT on),
# destroyed afterwards, also when the program fails. testdb (tests/support)
# then makes each test database on the three nodes, and meter migrate places
# the tables (migrations/citus/place.sql).
#
#   tests/citus_run.sh BUILD_DIR PORT PROGRAM [ARGS...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: citus_run.sh BUILD_DIR PORT PROGRAM [ARGS...]}" && pwd)
port=${2:?usage: citus_run.sh BUILD_DIR PORT PROGRAM [ARGS...]}
shift 2
export METER_CITUS_DIR=$build/citus-run-$port METER_CITUS_PORT=$port
citus() { bash "$here/scripts/citus.sh" "$@"; }
citus destroy >/dev/null 2>&1 || true
trap 'citus destroy >/dev/null 2>&1 || true' EXIT
citus up >/dev/null
DATABASE_URL=$(citus url)
METER_TEST_CITUS_WORKERS=$(citus workers)
export DATABASE_URL METER_TEST_CITUS_WORKERS
echo "citus_run: $* on the Citus cluster at $DATABASE_URL"
"$@"
