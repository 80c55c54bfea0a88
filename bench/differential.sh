#!/usr/bin/env bash
# differential: many seeds of the differential test, meter against the
# independent reference of the rating rules (tests/reference/ref.c).
#
#   bash bench/differential.sh [FIRST-LAST]     default 1-1000
#
# Builds, starts the private PostgreSQL when DATABASE_URL is not set and it is
# not running (and stops it again), runs build/tests/test_reference over the
# seeds in chunks of 100 (one line each), then prints every seed that differs
# with the command that replays it, and one line:
#   RESULT differential_seeds=N differential_accounts=N differential_differ=N
# Exit status 0 when no seed differs, 1 when one does, 2 for a wrong command
# line. About 0.7 s a seed on 2 cores.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
range=${1:-1-1000}
if [[ ! $range =~ ^([0-9]+)-([0-9]+)$ ]] || ((BASH_REMATCH[1] > BASH_REMATCH[2])); then
	echo "usage: bash bench/differential.sh [FIRST-LAST]" >&2
	exit 2
fi
first=${BASH_REMATCH[1]} last=${BASH_REMATCH[2]}

build=$(bash "$here/scripts/build.sh" | tail -n 1)
started=0
stop_cluster() { if [[ $started == 1 ]]; then bash "$here/scripts/pg.sh" stop >/dev/null; fi; }
trap stop_cluster EXIT
if [[ -z ${DATABASE_URL:-} ]]; then
	if ! bash "$here/scripts/pg.sh" status >/dev/null; then
		bash "$here/scripts/pg.sh" start >/dev/null
		started=1
	fi
	DATABASE_URL=$(bash "$here/scripts/pg.sh" url)
	export DATABASE_URL
fi

differ=() accounts=0
for ((a = first; a <= last; a += 100)); do
	b=$((a + 99 < last ? a + 99 : last))
	out=$("$build/tests/test_reference" --seeds "$a-$b" 2>&1) || true
	summary=$(grep '^differential:' <<<"$out" || echo "differential: seeds $a-$b did not finish")
	echo "$summary"
	while read -r seed; do
		[[ -n $seed ]] && differ+=("$seed")
	done < <(sed -n 's/^DIFFERS: seed \([0-9]*\).*/\1/p' <<<"$out")
	n=$(sed -n "s/^differential: .*, \([0-9]*\) accounts compared.*/\1/p" <<<"$summary")
	accounts=$((accounts + ${n:-0}))
	if [[ $summary == *"did not finish"* ]]; then
		differ+=("$a-$b")
	fi
done
for seed in "${differ[@]}"; do
	echo "DIFFERS: seed $seed (replay: $build/tests/test_reference --seed $seed -v)"
done
echo "RESULT differential_seeds=$((last - first + 1)) differential_accounts=$accounts differential_differ=${#differ[@]}"
((${#differ[@]} == 0))
