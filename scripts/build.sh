#!/usr/bin/env bash
# Configures and builds meter. scripts/build.sh [--sanitize]
#   default      build/       RelWithDebInfo
#   --sanitize   build-asan/  Debug, AddressSanitizer + UndefinedBehaviorSanitizer
# Prints the build folder on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMETER_WERROR=ON)
if [[ "${1:-}" == "--sanitize" ]]; then
	build=$here/build-asan
	opts=(-DCMAKE_BUILD_TYPE=Debug -DMETER_SANITIZE=ON -DMETER_WERROR=ON)
fi
cmake -S "$here" -B "$build" "${opts[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "$build"
