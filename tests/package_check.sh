#!/usr/bin/env bash
# The Debian package, made and used as an operator would: cpack -G DEB builds
# it from BUILD_DIR in a temporary folder, lintian finds no error in it (any
# E: line fails, with all lintian printed), dpkg -i installs it on this
# machine, and then: the copyright names Apache-2.0 and changelog.Debian.gz
# is of the package's version, the system user "meter" exists, the installed units pass
# systemd-analyze verify, the installed /usr/bin/meter migrates a fresh
# database and prices a sandbox from a folder outside the checkout with no
# METER_MIGRATIONS_DIR (so it finds /usr/share/meter/migrations by itself),
# the installed daemons start far enough to print their help (their
# libraries are there), man finds the pages, and dpkg --purge removes it all
# with the user. An EXIT trap purges the package, removes the user and drops
# the database also on failure, so it runs twice in a row. Needs root; what
# it needs and does not find makes it fail, never skip.
#
#   bash tests/package_check.sh BUILD_DIR     (DATABASE_URL: the test server)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: package_check.sh BUILD_DIR}" && pwd)
fail() { echo "package_check: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || fail "must run as root (it installs the package with dpkg -i)"
for cmd in cpack dpkg dpkg-deb dpkg-shlibdeps dpkg-parsechangelog lintian systemd-analyze man psql getent \
	adduser deluser; do
	command -v "$cmd" >/dev/null ||
		fail "$cmd is missing (scripts/deps.sh installs cmake, dpkg-dev, lintian, systemd, man-db, postgresql-client and adduser)"
done
[[ -f $build/CPackConfig.cmake ]] || fail "$build/CPackConfig.cmake is missing: configure the build first"
for p in meter meter-api meter-collector meter-hook; do
	[[ -x $build/$p ]] || fail "$build/$p is missing: build first"
done
# the test server: DATABASE_URL, or the private cluster as the other tests
DATABASE_URL=${DATABASE_URL:-$(bash "$here/scripts/pg.sh" url)}

work=$(mktemp -d /tmp/meter-package-XXXXXX)
chmod 755 "$work"
db=meter_package_$$_$RANDOM
cleanup() {
	local rc=$?
	if dpkg-query -W -f='${Status}' meter 2>/dev/null | grep -q 'installed'; then
		dpkg --purge meter >/dev/null 2>&1 || echo "package_check: cleanup: dpkg --purge meter failed" >&2
	fi
	if getent passwd meter >/dev/null; then
		deluser --system --quiet meter >/dev/null 2>&1 || userdel meter 2>/dev/null || true
	fi
	if getent group meter >/dev/null; then
		delgroup --system --quiet meter >/dev/null 2>&1 || groupdel meter 2>/dev/null || true
	fi
	psql -X -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	rm -rf "$work"
	return $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A meter package left by an interrupted run, or installed by hand, would
# hide what this one installs.
if dpkg-query -W -f='${Status}' meter 2>/dev/null | grep -q 'installed'; then
	echo "package_check: a meter package is installed already; purging it first"
	dpkg --purge meter >/dev/null
fi

# ---- build and install ----
out=$(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/cpack" 2>&1) ||
	fail "cpack -G DEB failed: $out"
debs=("$work"/cpack/meter_*.deb)
[[ -f ${debs[0]} && ${#debs[@]} -eq 1 ]] || fail "cpack made no single meter_*.deb: $out"
deb=${debs[0]}
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libc6 libpq5 libmicrohttpd12 libcjson1 libpcre2-8-0 libcurl4 libssl3 zlib1g adduser; do
	[[ ", $depends," =~ ", "$lib[\ ,] ]] ||
		fail "the package does not depend on $lib: Depends: $depends"
done
[[ $(dpkg-deb -f "$deb" Recommends) == *postgresql* ]] || fail "the package does not recommend postgresql"

# ---- lintian ----
# Any E: line fails, with all lintian said; what it says on purpose is
# overridden in the package (deploy/debian/lintian-overrides). Warnings and
# the rest are shown. Exit status 2 is "tags at --fail-on's level" (the E:
# lines); anything else but 0 is lintian itself failing. Its note that it
# runs as root is dropped.
rc=0
out=$(lintian --fail-on error "$deb" 2>&1) || rc=$?
out=$(grep -v '^running with root privileges is not recommended!$' <<<"$out" || true)
if grep -q '^E: ' <<<"$out" || [[ $rc -ne 0 ]]; then
	fail "lintian $(basename "$deb") (status $rc):
$out"
fi
if [[ -n $out ]]; then
	sed 's/^/package_check: lintian: /' <<<"$out"
fi
echo "package_check: lintian finds no error in $(basename "$deb")"
out=$(dpkg -i "$deb" 2>&1) || fail "dpkg -i failed: $out"
dpkg-query -W -f='${Status}' meter | grep -q 'install ok installed' || fail "meter is not installed after dpkg -i"
echo "package_check: installed $(basename "$deb")"

# ---- the user and the files ----
getent passwd meter >/dev/null || fail "the postinst made no user meter"
getent group meter >/dev/null || fail "the postinst made no group meter"
uid=$(id -u meter)
(( uid < 1000 )) || fail "meter is not a system user (uid $uid)"
for f in /usr/bin/meter /usr/bin/meter-api /usr/bin/meter-collector /usr/bin/meter-hook; do
	[[ -x $f ]] || fail "$f is not installed"
done
nmig=$(find "$here/migrations" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)
ninst=$(find /usr/share/meter/migrations -maxdepth 1 -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)
[[ $ninst -eq $nmig && $nmig -gt 0 ]] || fail "/usr/share/meter/migrations has $ninst migrations, the checkout $nmig"
[[ -f /usr/share/meter/migrations/citus/place.sql ]] || fail "citus/place.sql is not installed"
# The licence, and the package's changelog of the package's version.
version=$(dpkg-deb -f "$deb" Version)
grep -qx 'License: Apache-2.0' /usr/share/doc/meter/copyright ||
	fail "/usr/share/doc/meter/copyright names no License: Apache-2.0"
[[ -f /usr/share/doc/meter/changelog.Debian.gz ]] || fail "/usr/share/doc/meter/changelog.Debian.gz is not installed"
clversion=$(zcat /usr/share/doc/meter/changelog.Debian.gz | dpkg-parsechangelog -l- -S Version) ||
	fail "changelog.Debian.gz does not parse"
[[ $clversion == "$version" ]] || fail "changelog.Debian.gz is of version $clversion, the package $version"
# Nothing installed may name the source tree or the build folder.
if grep -rlF -e "$here" -e "$build" /usr/lib/systemd/system/meter-*.service /usr/share/meter \
	/usr/share/doc/meter >/dev/null 2>&1; then
	fail "installed files name the checkout or the build folder"
fi
# Postinst again (an upgrade): the user is kept as it is.
out=$(dpkg -i "$deb" 2>&1) || fail "installing again failed: $out"
[[ $(id -u meter) == "$uid" ]] || fail "installing again changed the user meter"

# ---- the units ----
units=(/usr/lib/systemd/system/meter-api.service /usr/lib/systemd/system/meter-collector.service)
for u in "${units[@]}"; do
	[[ -f $u ]] || fail "$u is not installed"
	p=$(basename "$u" .service)
	grep -q "^ExecStart=/usr/bin/$p\$" "$u" || fail "$u does not start /usr/bin/$p"
	grep -q '^User=meter$' "$u" || fail "$u does not run as user meter"
done
out=$(systemd-analyze verify "${units[@]}" 2>&1) || fail "systemd-analyze verify failed: $out"
[[ -z $out ]] || fail "systemd-analyze verify complains: $out"
echo "package_check: user meter (uid $uid) and the units verified"

# ---- the installed programs, outside the checkout ----
read -r host user port < <(psql -X -qtA -F ' ' -d "$DATABASE_URL" -c \
	"SELECT coalesce(host(inet_server_addr()), split_part(current_setting('unix_socket_directories'), ',', 1)),
	        current_user, current_setting('port')")
psql -X -q -d "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
url="host=$host port=$port user=$user dbname=$db"
run() { (cd "$work" && env -u METER_MIGRATIONS_DIR -u METER_PG_DIR DATABASE_URL="$url" "$@"); }
out=$(run /usr/bin/meter migrate 2>&1) || fail "the installed meter migrate failed: $out"
grep -Eq "^migrations: $nmig applied now, 0 already applied; [0-9]+ function\(s\) applied\$" <<<"$out" ||
	fail "the installed meter migrate did not apply the $nmig migrations: $out"
out=$(run /usr/bin/meter migrate 2>&1) || fail "the installed meter migrate failed the second time: $out"
grep -q "^migrations: 0 applied now, $nmig already applied; 0 function(s) applied\$" <<<"$out" ||
	fail "the installed meter migrate applied something the second time: $out"
out=$(run /usr/bin/meter rates --vcpus 2 --memory-gib 4 --json 2>&1) || fail "the installed meter rates failed: $out"
grep -q '"busy' <<<"$out" || fail "the installed meter rates printed no busy price: $out"
for p in meter-api meter-collector meter-hook; do
	out=$(run "/usr/bin/$p" --help 2>&1) || fail "the installed $p --help failed: $out"
done
echo "package_check: the installed meter migrated $db ($nmig migrations) and priced a sandbox"

# ---- man ----
for page in "1 meter" "8 meter-api" "8 meter-collector" "8 meter-hook"; do
	read -r sec name <<<"$page"
	path=$(man -w "$sec" "$name" 2>&1) || fail "man -w $sec $name found no page: $path"
	[[ $path == /usr/share/man/man$sec/$name.$sec.gz ]] || fail "man -w $sec $name found $path"
	out=$(MANWIDTH=80 man --warnings=all "$sec" "$name" 2>&1 >/dev/null) || fail "man $sec $name failed: $out"
	[[ -z $out ]] || fail "man $sec $name warns: $out"
done
echo "package_check: man finds and renders the four pages"

# ---- purge ----
out=$(dpkg --purge meter 2>&1) || fail "dpkg --purge meter failed: $out"
! dpkg-query -W -f='${Status}' meter 2>/dev/null | grep -q 'installed' || fail "meter is still installed after the purge"
for f in /usr/bin/meter /usr/share/meter /usr/lib/systemd/system/meter-api.service /var/lib/meter; do
	[[ ! -e $f ]] || fail "$f is left after the purge"
done
! getent passwd meter >/dev/null || fail "the purge left the user meter"
! getent group meter >/dev/null || fail "the purge left the group meter"
echo "package_check: purged, user and group removed"
exit 0
