#!/usr/bin/env bash
# Runs meter on a fresh Debian 12 machine: installs the Debian packages that
# are missing, builds, starts the private PostgreSQL (unless DATABASE_URL names
# another one), applies the migrations, and prints how to reach it all.
#
# The services that exist are started here as they are written (the HTTP API
# and the collector come with their issues).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

bash scripts/deps.sh
build=$(bash scripts/build.sh | tail -n 1)

if [[ -z ${DATABASE_URL:-} ]]; then
	bash scripts/pg.sh start >/dev/null
	DATABASE_URL=$(bash scripts/pg.sh url)
	export DATABASE_URL
fi
"$build/meter" migrate

cat <<MSG

meter is ready.
  database:  DATABASE_URL='$DATABASE_URL'
  psql:      psql '$DATABASE_URL'
  the CLI:   $build/meter rates --vcpus 2 --memory-gib 4
             $build/meter estimate --runs 300 --minutes 6 --vcpus 2 --memory-gib 4 --busy-vcpus 0.5
             $build/meter key create --admin
  stop:      scripts/pg.sh stop
MSG
