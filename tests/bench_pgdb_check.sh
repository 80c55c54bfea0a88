#!/usr/bin/env bash
# bench/pgdb.sh's bench_db_make keeps the server of DATABASE_URL: the URL it
# gives meter migrate (and sets as $url for the bench) names the bench's own
# database on the same host and port, as the same user, for every form a
# DATABASE_URL takes (a URI with a host and port, a URI with the socket and
# port in its query, libpq's key=value words, nothing). psql and meter are
# stand-ins that record what they were given: no server is needed.
#
#   bash tests/bench_pgdb_check.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/meter-benchpgdb-XXXXXX)
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/pgdb.sh
. "$here/bench/pgdb.sh"
build=$work
cat >"$work/meter" <<'SH'
#!/bin/sh
printf '%s\n' "$DATABASE_URL" >"$(dirname "$0")/migrated"
SH
chmod +x "$work/meter"
# A server on a socket of its own, as the old derivation asked it for one.
psql() {
	printf '%s\n' "$*" >>"$work/psql"
	case "$*" in *unix_socket_directories*) echo "host=/var/run/postgresql user=meter dbname=meter_bench_x" ;; esac
}

failed=0
check() {
	local admin=$1 want=$2
	: >"$work/psql"
	rm -f "$work/migrated"
	admin_url=$admin
	bench_db_make meter_bench_x
	local got
	got=$(cat "$work/migrated" 2>/dev/null || echo "(meter migrate did not run)")
	if [[ $got != "$want" || $url != "$want" ]]; then
		echo "bench_pgdb: DATABASE_URL \"$admin\": meter migrate got \"$got\", url \"$url\"; want \"$want\"" >&2
		failed=1
	fi
	if ! grep -qF -- "-d $admin -c DROP DATABASE IF EXISTS meter_bench_x" "$work/psql"; then
		echo "bench_pgdb: DATABASE_URL \"$admin\": the database was not made on it: $(cat "$work/psql")" >&2
		failed=1
	fi
}

check "postgresql://user@db.example:5433/meter" "postgresql://user@db.example:5433/meter_bench_x"
check "postgres://user:secret@10.0.0.7:6432/meter?sslmode=require&connect_timeout=5" \
	"postgres://user:secret@10.0.0.7:6432/meter_bench_x?sslmode=require&connect_timeout=5"
check "postgresql://user@[::1]:5433" "postgresql://user@[::1]:5433/meter_bench_x"
check "postgresql://db.example:5433/?dbname=meter&user=u" "postgresql://db.example:5433/meter_bench_x?user=u"
check "postgresql:///meter?host=/srv/pg&port=5433" "postgresql:///meter_bench_x?host=/srv/pg&port=5433"
check "postgresql:///meter?host=/srv/pg&user=meter&port=5433" \
	"postgresql:///meter_bench_x?host=/srv/pg&user=meter&port=5433"
check "host=/srv/pg port=5433 user=meter dbname=meter" "host=/srv/pg port=5433 user=meter dbname=meter_bench_x"
check "host = db.example  dbname='my db' port=5433 password='a b\\'c'" \
	"host=db.example port=5433 password='a b\\'c' dbname=meter_bench_x"
check "" "dbname=meter_bench_x"
if [[ $failed == 0 ]]; then echo "bench_pgdb: every form kept its host and port"; fi
exit "$failed"
