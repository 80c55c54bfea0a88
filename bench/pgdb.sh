# Sourced by bench scripts (with $here set to the checkout): the server of
# DATABASE_URL, or the private cluster, started when it was not running.
#   bench_pg_up          sets admin_url; bench_pg_started=1 when it started it
#   bench_db_make NAME   a fresh, migrated database NAME on it; sets url
#   bench_db_url URL NAME  prints URL naming database NAME instead of its own
#   bench_pg_down NAME   drops NAME; stops the cluster when bench_pg_up started it
#   bench_api_up [ARG..] meter-api on url (no rollup), a random port, answering;
#                        sets port, api (its address) and api_pid
# Needs $build (the build folder with the meter program).
bench_pg_started=0
bench_pg_up() {
	if [[ -z ${DATABASE_URL:-} ]]; then
		if ! bash "$here/scripts/pg.sh" status >/dev/null; then
			bash "$here/scripts/pg.sh" start >/dev/null
			bench_pg_started=1
		fi
		DATABASE_URL=$(bash "$here/scripts/pg.sh" url)
	fi
	admin_url=$DATABASE_URL
}
bench_db_make() {
	PGOPTIONS="-c client_min_messages=warning" psql -X -q -d "$admin_url" \
		-c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null
	url=$(bench_db_url "$admin_url" "$1")
	DATABASE_URL=$url "$build/meter" migrate >/dev/null
}
# The database URL (a postgresql:// or postgres:// URI, or libpq's key=value
# words; empty for libpq's defaults) with NAME as its database, all else kept:
# host, port, user, password and options, as the URL gives them or as libpq
# takes them from PGHOST, PGPORT... when it does not. A URI's path is
# replaced and a dbname parameter of its query dropped; a dbname word is
# dropped and dbname=NAME added.
bench_db_url() {
	local admin=$1 name=$2
	if [[ $admin =~ ^postgres(ql)?:// ]]; then
		local scheme=${BASH_REMATCH[0]} rest=${admin#*://} kept='' param params=()
		if [[ $rest == *'?'* ]]; then
			IFS='&' read -ra params <<<"${rest#*'?'}"
			rest=${rest%%'?'*}
		fi
		for param in "${params[@]}"; do
			[[ -z $param || $param == dbname=* ]] || kept+=${kept:+&}$param
		done
		printf '%s%s/%s%s\n' "$scheme" "${rest%%/*}" "$name" "${kept:+?$kept}"
		return
	fi
	# key = value words; a value is quoted ('a b', with \' and \\) or runs to a space
	local q=\' out=
	local word="^[[:space:]]*([A-Za-z_]+)[[:space:]]*=[[:space:]]*($q([^$q\\\\]|\\\\.)*$q|([^[:space:]$q\\\\]|\\\\.)*)"
	while [[ $admin =~ $word ]]; do
		[[ ${BASH_REMATCH[1]} == dbname ]] || out+="${BASH_REMATCH[1]}=${BASH_REMATCH[2]} "
		admin=${admin:${#BASH_REMATCH[0]}}
	done
	printf '%sdbname=%s\n' "$out" "$name"
}
bench_pg_down() {
	psql -X -q -d "$admin_url" -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true
	[[ $bench_pg_started == 1 ]] && bash "$here/scripts/pg.sh" stop >/dev/null || true
}
bench_api_up() {
	port=$((18000 + RANDOM % 2000))
	DATABASE_URL=$url "$build/meter-api" --listen 127.0.0.1:$port --no-rollup --log-level error "$@" &
	api_pid=$!
	for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
	api=http://127.0.0.1:$port
}
