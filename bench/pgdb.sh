# Sourced by bench scripts (with $here set to the checkout): the server of
# DATABASE_URL, or the private cluster, started when it was not running.
#   bench_pg_up          sets admin_url; bench_pg_started=1 when it started it
#   bench_db_make NAME   a fresh, migrated database NAME on it; sets url
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
	url=$(psql -X -qtA -d "$admin_url" -c "SELECT 'host=' || current_setting('unix_socket_directories') || ' user=' || current_user || ' dbname=$1'")
	[[ -n ${PGPORT:-} ]] && url="$url port=$PGPORT"
	DATABASE_URL=$url "$build/meter" migrate >/dev/null
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
