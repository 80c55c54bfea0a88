#!/usr/bin/env bash
# The private PostgreSQL cluster of this checkout: Debian's server binaries,
# data and Unix socket under .pg/ (git-ignored), no TCP port unless asked.
#
#   scripts/pg.sh start [--port N]   initdb the first time, start, create the
#                                    database "meter"; prints DATABASE_URL
#   scripts/pg.sh stop [--immediate] fast (or immediate) shutdown; safe when not running
#   scripts/pg.sh status             exit 0 when running, 3 when not, 4 when
#                                    running on server binaries since replaced
#                                    (a package upgrade: start restarts it)
#   scripts/pg.sh url [--as ROLE]    print the DATABASE_URL of the cluster (as the
#                                    bootstrap superuser, or as ROLE: meter_owner,
#                                    meter_api, meter_collector, meter_reader)
#   scripts/pg.sh destroy            stop and delete the cluster's folder
#   scripts/pg.sh replica FROM [--port N]
#                                    a streaming replica (pg_basebackup) of the
#                                    running cluster whose folder is FROM, then start
#
# Roles: "meter", the bootstrap superuser, is for the tests' harness and for a
# DBA's psql; no meter program runs as it. "meter_owner" (LOGIN CREATEROLE,
# no superuser) owns the database "meter": meter migrate and meter key create
# run as it, and the migrations make meter_api, meter_collector and
# meter_reader, the roles meter-api, meter-collector and a replica's reads log
# in as (scripts/run.sh). A cluster made before meter_owner existed has its
# objects handed to meter_owner at the next start.
#
# METER_PG_DIR moves the folder (default: .pg in the checkout);
# METER_PG_BINDIR names the server binaries (default: the newest of
# /usr/lib/postgresql/*/bin). Every command
# is safe to run twice. The server cannot run as root, so when called as root
# it runs as the "postgres" user that Debian's package creates.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
pgdir=${METER_PG_DIR:-$here/.pg}
data=$pgdir/data
sock=$pgdir/run
log=$pgdir/server.log
db=meter
superuser=meter
owner=meter_owner

die() { echo "pg.sh: $*" >&2; exit 1; }

bindir=${METER_PG_BINDIR:-}
if [[ -z $bindir ]]; then
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
		if [[ -x $d/pg_ctl && -x $d/initdb && -x $d/postgres ]]; then bindir=$d; break; fi
	done
fi
[[ -n $bindir ]] || die "no PostgreSQL server binaries under /usr/lib/postgresql; run scripts/deps.sh (Debian package postgresql)"

# With a port (start --port N), the socket's name carries it too.
# url [DB [ROLE]]
url() { echo "postgresql:///${1:-$db}?host=$sock&user=${2:-$superuser}${port:+&port=$port}"; }

as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

running() { [[ -f $data/PG_VERSION ]] && as_owner "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1; }

# Whether the running server's program was replaced under it, as an upgrade
# of Debian's postgresql package does (unattended upgrades, or build
# dependencies that pull a newer one): its new backends then load the new
# libraries and fail ("plpgsql.so: undefined symbol"). Its /proc exe says
# "(deleted)". replaced_why tells the versions.
replaced() {
	local pid exe
	pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null) || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	[[ $exe == *" (deleted)" ]]
}
replaced_why() {
	local was now
	was=$("$bindir/psql" -X -q -d "$(url postgres)" -tAc "SHOW server_version" 2>/dev/null || echo "?")
	now=$("$bindir/postgres" -V 2>/dev/null | sed 's/^postgres (PostgreSQL) //')
	echo "the server binaries were replaced under the running cluster (it runs $was; $bindir/postgres is now $now: a package upgrade?)"
}

# The cluster's folder, made and handed to the server's user.
own_dir() {
	mkdir -p "$pgdir"
	if [[ $(id -u) -eq 0 ]]; then
		id postgres >/dev/null 2>&1 || die "user \"postgres\" does not exist; install Debian's postgresql package (scripts/deps.sh)"
		chown postgres: "$pgdir"
		chmod 700 "$pgdir"
		runuser -u postgres -- test -x "$pgdir" ||
			die "user \"postgres\" cannot reach \"$pgdir\" (a parent folder is not searchable); set METER_PG_DIR to a folder it can reach"
	fi
}

# The database "meter" (made if missing) and what is in it, owned by
# meter_owner: objects of the superuser's, from a cluster older than
# meter_owner, are handed to it. (In PostgreSQL 15 the schema public belongs
# to the database's owner.)
database() {
	# (a replica has what its primary has, and takes no writes)
	if [[ $("$bindir/psql" -X -q -d "$(url postgres)" -tAc "SELECT pg_is_in_recovery()") == t ]]; then
		return 0
	fi
	if ! "$bindir/psql" -X -q -d "$(url postgres)" -tAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
		"$bindir/psql" -X -q -d "$(url postgres)" -c "CREATE DATABASE $db" >/dev/null
	fi
	# The handover takes each object's lock in turn. A cluster restarted
	# under load (programs reconnecting while it runs) can make it a
	# deadlock's victim, which undoes it whole: it is tried again.
	local try
	for try in 1 2 3 4 5 6 7 8 9 10; do
		hand_over && return 0
		echo "pg.sh: handing the database to $owner, try $try failed: $(grep -m 1 ERROR "$pgdir/owner.log" || tail -n 1 "$pgdir/owner.log")" >&2
		sleep 1
	done
	die "could not hand the database to $owner; see $pgdir/owner.log"
}

hand_over() {
	"$bindir/psql" -X -q -v ON_ERROR_STOP=1 -d "$(url)" >"$pgdir/owner.log" 2>&1 <<SQL
SET lock_timeout = '5s';
DO \$\$
DECLARE
	o record;
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$owner') THEN
		CREATE ROLE $owner LOGIN CREATEROLE NOSUPERUSER;
	END IF;
	EXECUTE 'ALTER DATABASE $db OWNER TO $owner';
	FOR o IN SELECT c.oid::regclass AS name, c.relkind FROM pg_class c
	         JOIN pg_namespace n ON n.oid = c.relnamespace
	         WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) = '$superuser'
	           AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
	           -- (a sequence of a table's column goes with its table)
	           AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d
	                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
	                      AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
	         ORDER BY c.relkind = 'S' LOOP
		EXECUTE format(CASE o.relkind WHEN 'S' THEN 'ALTER SEQUENCE %s OWNER TO $owner'
		                              WHEN 'c' THEN 'ALTER TYPE %s OWNER TO $owner'
		                              ELSE 'ALTER TABLE %s OWNER TO $owner' END, o.name);
	END LOOP;
	FOR o IN SELECT p.oid::regprocedure AS name FROM pg_proc p
	         JOIN pg_namespace n ON n.oid = p.pronamespace
	         WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) = '$superuser' LOOP
		EXECUTE format('ALTER ROUTINE %s OWNER TO $owner', o.name);
	END LOOP;
	FOR o IN SELECT t.oid::regtype AS name FROM pg_type t
	         JOIN pg_namespace n ON n.oid = t.typnamespace
	         WHERE n.nspname = 'public' AND pg_get_userbyid(t.typowner) = '$superuser'
	           AND t.typtype IN ('e', 'd', 'c') AND t.typelem = 0
	           AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c') LOOP
		EXECUTE format('ALTER TYPE %s OWNER TO $owner', o.name);
	END LOOP;
END
\$\$;
SQL
}

port=""
cmd=${1:-}
shift || true
case $cmd in
start)
	port=""
	while [[ $# -gt 0 ]]; do
		case $1 in
		--port) port=${2:-}; shift 2 || die "--port needs a number" ;;
		*) die "unknown option \"$1\" for start" ;;
		esac
	done
	[[ -z $port || $port =~ ^[0-9]{1,5}$ ]] || die "--port needs a number, not \"$port\""
	# A Unix socket path has a hard limit of 107 bytes.
	if (( ${#sock} + 16 > 107 )); then
		die "socket folder \"$sock\" is too long for a Unix socket; set METER_PG_DIR to a shorter path"
	fi
	if running && replaced; then
		echo "pg.sh: $(replaced_why); restarting it on the new ones" >&2
		as_owner "$bindir/pg_ctl" -D "$data" -m fast -w -t 60 restart >/dev/null ||
			die "PostgreSQL did not restart; see $log"
	fi
	if running; then
		database
		echo "pg.sh: private PostgreSQL already running in $data"
		echo "DATABASE_URL=$(url)"
		exit 0
	fi
	own_dir
	if [[ ! -f $data/PG_VERSION ]]; then
		rm -rf "$data"
		as_owner mkdir -p "$data" "$sock"
		as_owner "$bindir/initdb" -D "$data" -U "$superuser" --auth=trust -E UTF8 --locale=C.UTF-8 >"$pgdir/initdb.log" 2>&1 ||
			die "initdb failed; see $pgdir/initdb.log"
		# Trust on the socket is safe only because nobody else can reach it.
		cat >>"$data/postgresql.conf" <<CONF
# meter: private cluster
listen_addresses = ''
unix_socket_directories = '$sock'
unix_socket_permissions = 0700
max_connections = 300
fsync = on
log_min_messages = warning
CONF
	fi
	as_owner mkdir -p "$sock"
	opts=""
	if [[ -n $port ]]; then opts="-c listen_addresses=127.0.0.1 -c port=$port"; fi
	as_owner "$bindir/pg_ctl" -D "$data" -l "$log" -w -t 60 -o "$opts" start >/dev/null ||
		die "PostgreSQL did not start; see $log"
	database
	echo "pg.sh: private PostgreSQL running in $data"
	echo "DATABASE_URL=$(url)"
	;;
stop)
	mode=fast
	if [[ "${1:-}" == "--immediate" ]]; then mode=immediate; fi
	if running; then
		as_owner "$bindir/pg_ctl" -D "$data" -m "$mode" -w stop >/dev/null
		echo "pg.sh: private PostgreSQL stopped"
	else
		echo "pg.sh: private PostgreSQL is not running"
	fi
	;;
status)
	if running && replaced; then
		echo "pg.sh: private PostgreSQL running in $data, but $(replaced_why): scripts/pg.sh start restarts it" >&2
		exit 4
	elif running; then
		echo "pg.sh: private PostgreSQL running in $data"
		echo "DATABASE_URL=$(url)"
	else
		echo "pg.sh: private PostgreSQL is not running"
		exit 3
	fi
	;;
url)
	case ${1:-} in
	"") url ;;
	--as) [[ ${2:-} =~ ^[a-z_]+$ ]] || die "--as needs a role name"; url "$db" "$2" ;;
	*) die "unknown option \"$1\" for url (--as ROLE)" ;;
	esac
	;;
replica)
	src=${1:-}
	shift || true
	[[ -n $src && -f $src/data/PG_VERSION ]] || die "replica needs FROM, the folder of a running cluster (its METER_PG_DIR)"
	[[ $(cd "$src" && pwd) != $(cd "$pgdir" 2>/dev/null && pwd || echo "$pgdir") ]] || die "a replica needs a folder of its own: set METER_PG_DIR"
	if [[ ! -f $data/PG_VERSION ]]; then
		own_dir
		rm -rf "$data"
		# -R: standby.signal and primary_conninfo; -X stream: the WAL made meanwhile too
		as_owner "$bindir/pg_basebackup" -D "$data" -R -X stream -c fast \
			-d "postgresql:///postgres?host=$src/run&user=$superuser" >"$pgdir/basebackup.log" 2>&1 ||
			die "pg_basebackup from $src failed; see $pgdir/basebackup.log"
		# The copied configuration names the primary's socket folder: this one has its own.
		cat >>"$data/postgresql.conf" <<CONF
# meter: a streaming replica of $src
unix_socket_directories = '$sock'
hot_standby = on
CONF
	fi
	exec bash "$0" start "$@"
	;;
destroy)
	if running; then as_owner "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null; fi
	rm -rf "$pgdir"
	echo "pg.sh: private PostgreSQL removed ($pgdir)"
	;;
*)
	echo "usage: scripts/pg.sh start [--port N] | stop [--immediate] | status | url | destroy | replica FROM [--port N]" >&2
	exit 2
	;;
esac
