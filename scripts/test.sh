#!/usr/bin/env bash
# Set up, build and run every test: the normal build (unit, integration and
# interop tests), then the whole suite again under ASan + UBSan, then the
# libFuzzer harnesses (tests/fuzz, clang): their regression inputs and a short
# run of each (DBX_FUZZ_SECONDS, 40 s; docs/reliability.md "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
(cd build && ctest --output-on-failure --timeout 600 -j2)
scripts/build.sh build-asan
# the sanitizer run keeps Abseil's mutex deadlock detection on (rpc/rpc.h)
(cd build-asan && DBX_ABSL_DEADLOCK_DETECTION=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure --timeout 900 -j2)
scripts/build.sh build-fuzz
(cd build-fuzz && ctest --output-on-failure --timeout 600 -j2 -L fuzz)
