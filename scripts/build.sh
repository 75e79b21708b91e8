#!/usr/bin/env bash
# Configure and build durabox. Usage: scripts/build.sh [build-dir] [cmake args...]
# build-asan as the directory name turns on ASan + UBSan; build-fuzz builds the
# libFuzzer harnesses of tests/fuzz with clang (docs/reliability.md "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}; shift || true
extra=()
case "$dir" in
  *asan*) extra+=(-DDBX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug) ;;
  *fuzz*) extra+=(-DDBX_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
esac
cmake -S . -B "$dir" -G Ninja "${extra[@]}" "$@" >/dev/null
cmake --build "$dir"
