# bench/own_cluster.sh: sourced by the benchmarks that run on a PostgreSQL of
# their own (soak.sh, bench_lag.sh). They export METER_PG_DIR=$work/pg before
# their cleanup trap (which destroys that cluster), then call
#   own_cluster_up
# which starts it, migrates it with $build/meter, and sets url, DATABASE_URL
# and key (a new admin key).
own_cluster_up() {
	[[ -n ${METER_PG_DIR:-} && -n ${work:-} && $METER_PG_DIR == "$work/pg" ]] ||
		{ echo "own_cluster_up: METER_PG_DIR must be \$work/pg" >&2; return 1; }
	bash "$here/scripts/pg.sh" start >/dev/null
	url="postgresql:///meter?host=$work/pg/run&user=meter"
	export DATABASE_URL=$url
	"$build/meter" migrate >/dev/null
	key=$("$build/meter" key create --admin | grep -o 'mk_[0-9a-f]*' | head -n 1)
}
