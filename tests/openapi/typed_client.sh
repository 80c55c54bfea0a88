#!/usr/bin/env bash
# The typed client (tests/openapi/client.ts) against a live meter-api: types
# generated from api/openapi.json by openapi-typescript, the script checked by
# tsc --strict and run by Node.js, on a database of its own (dropped at the
# end, also on failure).
#
#   bash tests/openapi/typed_client.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: typed_client.sh BUILD_DIR}
bin=$here/tests/openapi/node_modules/.bin
[[ -x $bin/tsc && -x $bin/openapi-typescript ]] || {
	echo "typed_client: the npm packages are missing (scripts/test.sh runs npm ci in tests/openapi)" >&2
	exit 1
}
DATABASE_URL=${DATABASE_URL:-$(bash "$here/scripts/pg.sh" url)}
work=$(mktemp -d /tmp/meter-typed-XXXXXX)
db=meter_typed_$$
api_pid=
cleanup() {
	set +e
	[[ -n $api_pid ]] && kill "$api_pid" 2>/dev/null && wait "$api_pid" 2>/dev/null
	psql -X -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1
	rm -rf "$work"
	return 0
}
trap cleanup EXIT

# the types, and the script compiled against them (strict)
"$bin/openapi-typescript" "$here/api/openapi.json" -o "$work/meter-api.d.ts" >/dev/null
cp "$here/tests/openapi/client.ts" "$work/"
ln -s "$here/tests/openapi/node_modules" "$work/node_modules"
cat >"$work/tsconfig.json" <<'JSON'
{ "compilerOptions": { "strict": true, "target": "es2022", "module": "nodenext",
  "moduleResolution": "nodenext", "outDir": "out", "skipLibCheck": true, "types": [] },
  "files": ["client.ts"] }
JSON
echo '{ "type": "module" }' >"$work/package.json"
(cd "$work" && "$bin/tsc" -p tsconfig.json)

# a database and a meter-api of its own
psql -X -q -d "$DATABASE_URL" -c "CREATE DATABASE $db" >/dev/null
read -r sockdir user port < <(psql -X -qtA -F ' ' -d "$DATABASE_URL" -c \
	"SELECT split_part(current_setting('unix_socket_directories'), ',', 1), current_user, current_setting('port')")
url="host=$sockdir port=$port user=$user dbname=$db"
DATABASE_URL=$url "$build/meter" migrate >/dev/null
key=$(DATABASE_URL=$url "$build/meter" key create --admin 2>/dev/null)
listen=$((20000 + ($$ * 11) % 30000))
DATABASE_URL=$url "$build/meter-api" --listen "127.0.0.1:$listen" --log-level=warn >"$work/api.log" 2>&1 &
api_pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$listen/healthz" && break; sleep 0.05; done
METER_URL="http://127.0.0.1:$listen" METER_KEY=$key node "$work/out/client.js"
