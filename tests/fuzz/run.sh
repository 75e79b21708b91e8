#!/usr/bin/env bash
# Run one libFuzzer harness of tests/fuzz (CTest label "fuzz").
#   run.sh regress HARNESS SRC NAME        replay SRC/regress/NAME and SRC/corpus/NAME
#   run.sh fuzz HARNESS SRC NAME SECS WORK fuzz for SECS seconds from those, new
#                                          inputs into WORK/NAME (never the tree)
# A crash, leak, sanitizer report or timeout fails the test; libFuzzer writes
# the input that did it to WORK/NAME-artifacts/ (see docs/reliability.md
# "Fuzzing" for turning it into a regression input).
set -euo pipefail
mode=$1 bin=$2 src=$3 name=$4
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
opts=(-timeout=30 -rss_limit_mb=2048 -max_len=65536)
case "$mode" in
  regress)
    files=()
    for d in "$src/regress/$name" "$src/corpus/$name"; do
      [ -d "$d" ] && for f in "$d"/*; do [ -f "$f" ] && files+=("$f"); done
    done
    [ ${#files[@]} -gt 0 ] || { echo "no inputs for $name" >&2; exit 1; }
    exec "$bin" "${opts[@]}" "${files[@]}"
    ;;
  fuzz)
    secs=$5 work=$6
    mkdir -p "$work/$name" "$work/$name-artifacts"
    dirs=("$work/$name" "$src/corpus/$name")
    [ -d "$src/regress/$name" ] && dirs+=("$src/regress/$name")
    exec "$bin" "${opts[@]}" -max_total_time="$secs" -print_final_stats=1 -close_fd_mask=1 \
      -artifact_prefix="$work/$name-artifacts/" "${dirs[@]}"
    ;;
  *) echo "usage: run.sh regress|fuzz HARNESS SRC NAME [SECS WORK]" >&2; exit 2 ;;
esac
