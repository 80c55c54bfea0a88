#!/usr/bin/env bash
# Runs every test on a fresh Debian 12 machine: installs the Debian packages
# that are missing, builds, starts the private PostgreSQL (unless DATABASE_URL
# names another one), runs ctest, and stops the cluster again if it started it.
#
#   scripts/test.sh                 the normal build
#   scripts/test.sh --sanitize      the ASan + UBSan build
#   scripts/test.sh -- -R money     anything after -- goes to ctest
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

build_opt=()
ctest_args=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--sanitize) build_opt=(--sanitize); shift ;;
	--) shift; ctest_args=("$@"); break ;;
	*) echo "test.sh: unknown option \"$1\"" >&2; exit 2 ;;
	esac
done

bash scripts/deps.sh
# The OpenAPI checkers nobody here wrote (Ajv, Redocly's CLI), pinned in
# tests/openapi/package-lock.json; installed again when the lock changes.
openapi=tests/openapi
if [[ ! -x $openapi/node_modules/.bin/redocly || $openapi/package-lock.json -nt $openapi/node_modules/.package-lock.json ]]; then
	echo "meter: installing the OpenAPI checkers (npm ci in $openapi)"
	npm ci --prefix "$openapi" --no-audit --no-fund --loglevel=error
fi
build=$(bash scripts/build.sh "${build_opt[@]}" | tail -n 1)

# The Citus tests (label citus) need Citus: installed already, or built from
# the release CITUS_SOURCE names. That is done before any cluster starts, as
# the build's packages may update PostgreSQL's binaries.
citus_args=()
if [[ ${build_opt[*]:-} == --sanitize ]]; then
	# The Citus tests run the same C as the others, on other SQL: once, in the
	# normal build, is enough, and keeps the sanitized pass short.
	echo "meter: the Citus tests (label citus) are left out of the sanitized build; scripts/test.sh without --sanitize runs them"
	citus_args=(-LE citus)
elif [[ -n ${CITUS_SOURCE:-} ]] || bash scripts/citus.sh installed; then
	bash scripts/citus.sh install
else
	echo "meter: the Citus tests (label citus) are not run: Citus is not installed and CITUS_SOURCE does not name a Citus release to build it from (see scripts/citus.sh)"
	citus_args=(-LE citus)
fi

started=0
stop_cluster() {
	if [[ $started == 1 ]]; then bash "$here/scripts/pg.sh" stop; fi
}
trap stop_cluster EXIT
if [[ -z ${DATABASE_URL:-} ]]; then
	st=0
	bash scripts/pg.sh status >/dev/null || st=$?
	if [[ $st == 4 ]]; then
		bash scripts/pg.sh start # running on replaced binaries: restarted (it says why)
	elif [[ $st != 0 ]]; then
		bash scripts/pg.sh start
		started=1
	fi
	DATABASE_URL=$(bash scripts/pg.sh url)
	export DATABASE_URL
fi

cd "$build"
ctest --output-on-failure -j"$(nproc)" "${citus_args[@]}" "${ctest_args[@]}"
