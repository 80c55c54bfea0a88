#!/usr/bin/env bash
# Builds meter (programs and tests) in every build type with both compilers,
# warnings as errors: Debug, RelWithDebInfo and Release with GCC and with
# Clang, each configured in a temporary folder that is removed afterwards,
# also on failure. Prints one line per combination, and the end of the log of
# each that failed; exits 1 if any failed. .ci/run runs it before the tests.
#
#   bash scripts/build_matrix.sh
#
# Ninja when it is installed (scripts/deps.sh installs ninja-build), else
# make; -j2 either way.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

for cmd in cmake gcc clang; do
	command -v "$cmd" >/dev/null || { echo "build_matrix: $cmd is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done
generator=()
if command -v ninja >/dev/null; then
	generator=(-G Ninja)
fi

dirs=()
cleanup() {
	# ${dirs[@]+...}: an empty array under set -u
	rm -rf ${dirs[@]+"${dirs[@]}"}
}
trap cleanup EXIT
trap 'exit 1' INT TERM

failed=0
for cc in gcc clang; do
	for type in Debug RelWithDebInfo Release; do
		dir=$(mktemp -d "/tmp/meter-matrix-$cc-$type-XXXXXX")
		dirs+=("$dir")
		start=$SECONDS
		if cmake "${generator[@]}" -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE="$type" \
			-DCMAKE_C_COMPILER="$cc" -DMETER_WERROR=ON >"$dir/log" 2>&1 &&
			cmake --build "$dir" -j2 >>"$dir/log" 2>&1; then
			printf '%-6s %-15s ok (%ds)\n' "$cc" "$type" $((SECONDS - start))
		else
			printf '%-6s %-15s failed (%ds)\n' "$cc" "$type" $((SECONDS - start))
			grep -E -m 20 'error|warning' "$dir/log" | sed 's/^/    /' || tail -n 20 "$dir/log" | sed 's/^/    /'
			failed=1
		fi
		# The folder goes as soon as it is done: six builds side by side are
		# large, and only the log's end was wanted.
		rm -rf "$dir"
	done
done
exit "$failed"
