#!/usr/bin/env bash
# Installs the Debian packages meter needs to build, test and run, and only
# those that are missing. Safe to run twice: with everything present it only
# checks and prints nothing.
#
#   scripts/deps.sh            install what is missing (needs root)
#   scripts/deps.sh --check    only list what is missing; exit 1 if anything is
set -euo pipefail

PACKAGES=(
	gcc make cmake pkg-config ninja-build
	libpq-dev libmicrohttpd-dev libcjson-dev libpcre2-dev libcmocka-dev zlib1g-dev
	libssl-dev libcurl4-openssl-dev python3 runc busybox-static
	postgresql postgresql-contrib
	chromium fonts-dejavu-core
	clang libclang-rt-14-dev
	procps util-linux e2fsprogs faketime wrk valgrind curl jq openssl systemd pgbouncer
	dpkg-dev lintian adduser man-db groff-base
)

missing=()
for p in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	if [[ "$status" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done

# Node.js and npm run the OpenAPI checkers of the tests (tests/openapi); a
# Node.js installed from elsewhere (NodeSource's, 20 or later) is kept.
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
	echo "missing Debian packages: ${missing[*]}"
	exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "meter: missing Debian packages: ${missing[*]}" >&2
	echo "meter: cannot install them: not root; run as root, or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi

echo "meter: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
