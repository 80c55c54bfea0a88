#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and
# runs each for SECONDS (default 5) from its seed corpus in tests/fuzz/corpus
# (seeds made by hand and taken from real traffic: this machine's mountinfo
# and cgroup files, a real collector's spool, the API tests' request bodies,
# the config.json of `runc spec`,
# and every body of tests/data/bad_requests.txt for the JSON target). Each
# target checks what it parses against an oracle: a parser of the format
# written in the target, or a round trip.
#   scripts/fuzz.sh [SECONDS]          the short run the test suite does
#   scripts/fuzz.sh 600                a longer hunt
# The seed corpus is copied first, so a run never changes the repository; a
# crash stops the run with the input saved under build-fuzz/crashes/, to be
# fixed and added to the corpus.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
[[ $secs =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number" >&2; exit 2; }
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (scripts/deps.sh installs it)" >&2; exit 1; }
out=${METER_FUZZ_DIR:-$here/build-fuzz}
mkdir -p "$out/crashes"
cflags=(-g -O1 -std=gnu17 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
	-D_GNU_SOURCE -I"$here" $(pkg-config --cflags libcjson libpcre2-8 libpq))
libs=($(pkg-config --libs libcjson libpcre2-8 libpq zlib libcrypto) -lm -lpthread)
core=("$here"/meter/*.c)
declare -A extra=(
	[json]="$here/api/input.c $here/common/ids.c"
	[query]="$here/api/input.c $here/common/ids.c"
	[auth]="$here/api/input.c $here/common/ids.c"
	[route]="$here/api/route.c $here/api/routes.c $here/common/ids.c"
	[opts]="$here/common/opts.c $here/common/log.c"
	[cgroup]="$here/collector/cgroup.c"
	[mountinfo]="$here/collector/layout.c $here/collector/cgroup.c"
	[spool]="$here/collector/spool.c $here/common/log.c"
	[text]=""
	[cursor]="$here/api/cursor.c"
	[oci]="$here/hook/oci.c $here/collector/match.c $here/common/ids.c"
)
status=0
for t in json query auth route opts cgroup mountinfo spool text cursor oci; do
	bin=$out/fuzz_$t
	# shellcheck disable=SC2086
	clang "${cflags[@]}" "$here/tests/fuzz/fuzz_$t.c" ${extra[$t]} "${core[@]}" "${libs[@]}" -o "$bin"
	work=$(mktemp -d)
	cp "$here/tests/fuzz/corpus/$t"/* "$work/"
	if [[ $t == json ]]; then
		# and every body of the malformed requests the API test sends
		awk -v dir="$work" '/^### /{ n++; next } !/^#/ { f = dir "/bad-" n; printf "%s", $0 > f; close(f) }' \
			"$here/tests/data/bad_requests.txt"
	fi
	if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$out/crashes/$t-" "$work" >"$out/$t.log" 2>&1; then
		runs=$(awk '/stat::number_of_executed_units:/ { print $2 }' "$out/$t.log" | tail -1)
		echo "fuzz_$t: ok, ${runs:-?} inputs in ${secs} s, no crash"
	else
		echo "fuzz_$t: FAILED, see $out/$t.log and $out/crashes/"
		tail -30 "$out/$t.log"
		status=1
	fi
	rm -rf "$work"
done
exit $status
