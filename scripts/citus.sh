#!/usr/bin/env bash
# A Citus cluster on this machine: a coordinator and two workers, each a
# private PostgreSQL (scripts/pg.sh) under .citus/ (git-ignored), on TCP
# ports of 127.0.0.1 so the nodes reach each other.
#
#   scripts/citus.sh install  build and install Citus when it is missing (before
#                             any cluster starts: the build's packages may
#                             update PostgreSQL's binaries under a running server)
#   scripts/citus.sh installed exit 0 when Citus is installed, 3 when not
#   scripts/citus.sh up       build and install Citus when it is missing, start
#                             the three nodes, join the workers; prints the
#                             coordinator's DATABASE_URL
#   scripts/citus.sh down     stop the three nodes (their data is kept)
#   scripts/citus.sh status   exit 0 when all three run, 3 otherwise
#   scripts/citus.sh url      print the coordinator's DATABASE_URL
#   scripts/citus.sh workers  print the two workers' URLs, a line each
#   scripts/citus.sh destroy  stop the nodes and delete their folder
#
# Citus from Citus's own packages is used as it is. Otherwise it is built
# from the release tarball named by CITUS_SOURCE (with any
# citus-*.patch beside it applied), in METER_CITUS_BUILD (default
# /var/cache/meter/citus), so a second run does not build again; building
# installs Debian's PostgreSQL server headers and Citus's build dependencies.
# METER_CITUS_DIR moves the nodes' folder; METER_CITUS_PORT (default 57630)
# is the coordinator's port, the workers' the next two. Safe to run twice.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dir=${METER_CITUS_DIR:-$here/.citus}
base=${METER_CITUS_PORT:-57630}
build=${METER_CITUS_BUILD:-/var/cache/meter/citus}
names=(coordinator worker1 worker2)

die() { echo "citus.sh: $*" >&2; exit 1; }
[[ $base =~ ^[0-9]{1,5}$ ]] || die "METER_CITUS_PORT must be a port number, not \"$base\""

node() { # node I CMD...: scripts/pg.sh for node I
	local i=$1
	shift
	METER_PG_DIR=$dir/${names[$i]} bash "$here/scripts/pg.sh" "$@"
}
port_of() { echo $((base + $1)); }
url_of() { # the URL of node I (its socket, its port)
	local sock=$dir/${names[$1]}/run
	echo "postgresql:///meter?host=$sock&user=meter&port=$(port_of "$1")"
}
sql() { # sql I STATEMENT
	psql -X -q -v ON_ERROR_STOP=1 -d "$(url_of "$1")" -tAc "$2"
}

pg_config_bin() {
	local v
	v=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -1)
	[[ -n $v ]] || die "no PostgreSQL under /usr/lib/postgresql; run scripts/deps.sh"
	echo "$v"
}

installed() {
	local libdir
	libdir=$("$(pg_config_bin)/pg_config" --pkglibdir 2>/dev/null || echo "/usr/lib/postgresql/$(basename "$(dirname "$(pg_config_bin)")")/lib")
	[[ -f $libdir/citus.so ]]
}

install_citus() {
	installed && return 0
	[[ -n ${CITUS_SOURCE:-} ]] ||
		die "Citus is not installed, and CITUS_SOURCE does not name a Citus release tarball to build it from (for example the vendor folder's citus-13.2.2.tar.gz)"
	[[ -f $CITUS_SOURCE ]] || die "CITUS_SOURCE \"$CITUS_SOURCE\" is not a file"
	[[ $(id -u) -eq 0 ]] || die "building Citus installs packages and the extension: run as root"
	local major
	major=$(basename "$(dirname "$(pg_config_bin)")")
	local pkgs=(postgresql-server-dev-"$major" liblz4-dev libzstd-dev libssl-dev libkrb5-dev make gcc patch)
	local missing=()
	for p in "${pkgs[@]}"; do
		[[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == "install ok installed" ]] || missing+=("$p")
	done
	if [[ ${#missing[@]} -gt 0 ]]; then
		echo "citus.sh: installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	local name src
	name=$(basename "$CITUS_SOURCE" .tar.gz)
	src=$build/$name
	if [[ ! -f $src/src/backend/distributed/citus.so ]]; then
		echo "citus.sh: building $name in $src (a few minutes)"
		rm -rf "$src"
		mkdir -p "$build"
		tar xzf "$CITUS_SOURCE" -C "$build"
		[[ -d $src ]] || die "$CITUS_SOURCE did not unpack to $src"
		for p in "$(dirname "$CITUS_SOURCE")"/"$name"-*.patch; do
			[[ -f $p ]] || continue
			echo "citus.sh: applying $(basename "$p")"
			patch -d "$src" -p1 -s <"$p"
		done
		(cd "$src" && ./configure --without-libcurl >"$build/$name-configure.log" 2>&1) ||
			die "configure failed; see $build/$name-configure.log"
		make -C "$src" -j"$(nproc)" >"$build/$name-make.log" 2>&1 ||
			die "make failed; see $build/$name-make.log"
	fi
	make -C "$src" install >"$build/$name-install.log" 2>&1 || die "make install failed; see $build/$name-install.log"
	installed || die "Citus was built but citus.so is not in PostgreSQL's library folder"
}

running_all() {
	for i in 0 1 2; do
		node "$i" status >/dev/null 2>&1 || return 1
	done
}

cmd=${1:-}
case $cmd in
installed)
	installed && exit 0
	exit 3
	;;
install)
	install_citus
	echo "citus.sh: Citus is installed"
	;;
up)
	install_citus
	for i in 0 1 2; do
		if node "$i" status >/dev/null 2>&1; then continue; fi
		node "$i" start --port "$(port_of "$i")" >/dev/null
		conf=$dir/${names[$i]}/data/postgresql.conf
		if ! grep -q "^shared_preload_libraries = 'citus'" "$conf"; then
			# Citus must be loaded when the server starts.
			cat >>"$conf" <<CONF
# meter: a Citus node
shared_preload_libraries = 'citus'
max_connections = 300
CONF
			node "$i" stop >/dev/null
			node "$i" start --port "$(port_of "$i")" >/dev/null
		fi
		sql "$i" "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
	done
	sql 0 "SELECT citus_set_coordinator_host('127.0.0.1', $(port_of 0))" >/dev/null
	for i in 1 2; do
		sql 0 "SELECT citus_add_node('127.0.0.1', $(port_of "$i")) WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE nodeport = $(port_of "$i"))" >/dev/null
	done
	echo "citus.sh: coordinator and two workers running in $dir ($(sql 0 "SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary'") nodes, Citus $(sql 0 "SELECT extversion FROM pg_extension WHERE extname = 'citus'"))"
	echo "DATABASE_URL=$(url_of 0)"
	;;
down)
	for i in 0 1 2; do
		node "$i" stop >/dev/null 2>&1 || true
	done
	echo "citus.sh: stopped"
	;;
status)
	if running_all; then
		echo "citus.sh: running in $dir"
		exit 0
	fi
	echo "citus.sh: not running"
	exit 3
	;;
url)
	url_of 0
	;;
workers)
	url_of 1
	url_of 2
	;;
destroy)
	for i in 0 1 2; do
		node "$i" destroy >/dev/null 2>&1 || true
	done
	rm -rf "$dir"
	echo "citus.sh: destroyed $dir"
	;;
*)
	die "usage: citus.sh installed|install|up|down|status|url|workers|destroy"
	;;
esac
