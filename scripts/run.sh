#!/usr/bin/env bash
# Runs meter on a fresh Debian 12 machine: installs the Debian packages that
# are missing, builds, starts the private PostgreSQL (unless DATABASE_URL names
# another one), applies the migrations, prints how to reach it all, then runs
# the services in the foreground until Ctrl-C (or SIGTERM):
#
#   meter-collector  samples the cgroups laid out as sandboxes/<account>/<sandbox>
#                    below this host's cgroup root (METER_MATCH changes the pattern)
#
#   scripts/run.sh --setup-only   everything but the services
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

setup_only=0
case "${1:-}" in
--setup-only) setup_only=1 ;;
"") ;;
*) echo "run.sh: unknown option \"$1\" (only --setup-only)" >&2; exit 2 ;;
esac

bash scripts/deps.sh
build=$(bash scripts/build.sh | tail -n 1)

if [[ -z ${DATABASE_URL:-} ]]; then
	bash scripts/pg.sh start >/dev/null
	DATABASE_URL=$(bash scripts/pg.sh url)
	export DATABASE_URL
fi
"$build/meter" migrate

match=${METER_MATCH:-'sandboxes/(?<account>[^/]+)/(?<sandbox>[^/]+)'}
mkdir -p "$here/.run"
cat <<MSG

meter is ready.
  database:   DATABASE_URL='$DATABASE_URL'
  psql:       psql '$DATABASE_URL'
  the CLI:    $build/meter rates --vcpus 2 --memory-gib 4
              $build/meter estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 0.5
              $build/meter key create --admin
  collector:  samples every cgroup matching '$match'
              below /sys/fs/cgroup, e.g. sandboxes/acme/sb-1; spool $here/.run/collector.spool
  samples:    psql '$DATABASE_URL' -c 'SELECT * FROM samples ORDER BY ts DESC LIMIT 10'
  stop:       Ctrl-C, then scripts/pg.sh stop
MSG
if [[ $setup_only == 1 ]]; then
	exit 0
fi
exec "$build/meter-collector" --root /sys/fs/cgroup --match "$match" \
	--spool "$here/.run/collector.spool"
