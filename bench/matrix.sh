#!/usr/bin/env bash
# The benchmark matrix of issue 17 in one command: every worker (the C worker
# bench/dbx-bench-worker, the Go SDK worker, the TypeScript SDK worker) on
# every server (durabox's `server start-dev`, Temporal's dev server with a
# SQLite file), driven by the Go SDK client (bench/peers/go `drive`), plus
# durabox's own dbx-loadgen (client + worker in one) on each server. The
# compared runs are interleaved: each repeat runs the whole matrix once, in
# the same order, so slow phases of a shared machine hit every cell alike.
# Every run gets a fresh server and a fresh worker store. Measured per run,
# for every process (server, worker, driver): CPU seconds during the measured
# window (from /proc/PID/stat, the driver's from getrusage), peak RSS (VmHWM)
# and the most threads seen (sampled every 0.2 s); the driver's throughput and
# start->completed p50/p99. Results: one JSON line per run in
# $OUT/results.jsonl, the medians as a Markdown table in $OUT/table.md and,
# unless NO_DOC=1, between the matrix markers of docs/benchmarks.md.
#
# Workloads: one  = bench.Chain {"n":1}, closed loop for RUN_S s at CONC in flight;
#            chain20 = bench.Chain {"n":20}, the same;
#            hold = HOLD_N workflows of bench.Hold {"ms":HOLD_MS}, all started at once.
# Temporal's dev server is two orders of magnitude slower here, so by default it
# runs only the `one` workload (TEMPORAL_WORKLOADS) at CONC_TEMPORAL in flight;
# `hold` measures the worker (RSS, threads with 1,000 activities in flight),
# so it runs on durabox's server only unless TEMPORAL_WORKLOADS names it.
# Knobs (environment): REPS (3), RUN_S (8), CONC (64), CONC_TEMPORAL (16),
#   TEMPORAL_WORKLOADS ("one"), HOLD_N (1000),
#   HOLD_MS (10000), SERVERS ("durabox temporal"), WORKERS ("c go ts"),
#   WORKLOADS ("one chain20 hold"), LOADGEN (1; 0 = skip dbx-loadgen),
#   LG_WORKFLOWS_DURABOX (3000), LG_WORKFLOWS_TEMPORAL (300), OUT (a fresh dir),
#   BUILD (build: the directory holding cli/durabox and bench/dbx-*),
#   BASE_BUILD (another such directory: the worker "cbase" is its C worker,
#   so a change to the C worker is compared before/after in the same run),
#   C_ARGS (the C worker's flags after --db-dir; "--pollers 4 --wft-threads 16
#   --threads 8": 46 threads; docs/benchmarks.md "Workflow task threads"), CBASE_ARGS
#   (cbase's; C_ARGS unless set, for a cbase that lacks one of its flags).
# Needs: scripts/build.sh build, bench/peers/setup.sh. Not part of the tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
REPS=${REPS:-3} RUN_S=${RUN_S:-8} CONC=${CONC:-64} HOLD_N=${HOLD_N:-1000} HOLD_MS=${HOLD_MS:-10000}
SERVERS=${SERVERS:-durabox temporal} WORKERS=${WORKERS:-c go ts} WORKLOADS=${WORKLOADS:-one chain20 hold}
CONC_TEMPORAL=${CONC_TEMPORAL:-16} TEMPORAL_WORKLOADS=${TEMPORAL_WORKLOADS:-one}
LOADGEN=${LOADGEN:-1} LG_WORKFLOWS_DURABOX=${LG_WORKFLOWS_DURABOX:-3000} LG_WORKFLOWS_TEMPORAL=${LG_WORKFLOWS_TEMPORAL:-300}
BUILD=${BUILD:-$root/build}
read -r -a c_args <<<"${C_ARGS:---pollers 4 --wft-threads 16 --threads 8}"
read -r -a cbase_args <<<"${CBASE_ARGS:-${c_args[*]}}"
DBX=$BUILD/cli/durabox CW=$BUILD/bench/dbx-bench-worker LG=$BUILD/bench/dbx-loadgen
GO=$root/.cache/bench-peers/dbx-peer-go TS_BUNDLE=$root/.cache/bench-peers/ts-workflow-bundle.js
for f in "$DBX" "$CW" "$LG"; do [ -x "$f" ] || { echo "matrix: $f missing: scripts/build.sh build" >&2; exit 1; }; done
[ -x "$GO" ] && [ -s "$TS_BUNDLE" ] || { echo "matrix: peers missing: bench/peers/setup.sh" >&2; exit 1; }
DBX_BIN=$DBX
. tests/interop/servers.sh
itp_find_temporal
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/dbx-matrix.XXXXXX")}
mkdir -p "$OUT"
results=$OUT/results.jsonl
: >"$results"
tick=$(getconf CLK_TCK)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

cpu_s() { # CPU seconds (user+system) of PID so far
  awk -v t="$tick" '{sub(/^.*\) /, ""); print ($12 + $13) / t}' "/proc/$1/stat" 2>/dev/null || echo 0
}
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# monitor PID FILE: the most threads PID had and its largest RssAnon (KiB:
# its own memory, without the mapped files: libraries, and the C worker's
# LMDB map, which grows with its store), sampled every 0.2 s, into FILE as
# "THREADS ANON_KIB".
monitor() {
  local pid=$1 file=$2 max=0 amax=0 n a
  rm -f "$file" # no sample (the worker died at once): the run's line says null
  while kill -0 "$pid" 2>/dev/null; do
    read -r n a < <(awk '/^Threads/ {t = $2} /^RssAnon/ {a = $2} END {print t + 0, a + 0}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
    [ "${n:-0}" -gt "$max" ] && max=$n
    [ "${a:-0}" -gt "$amax" ] && amax=$a
    echo "$max $amax" >"$file.new" && mv -f "$file.new" "$file" # whole, even if killed mid-write
    sleep 0.2
  done
}

start_server() { # start_server KIND DIR -> SRV_PID, ADDR
  local kind=$1 dir=$2
  mkdir -p "$dir"
  if [ "$kind" = durabox ]; then itp_start_durabox "$dir"; else itp_start_temporal "$dir"; fi
  SRV_PID=$ITP_PID ADDR=$ITP_ADDR
  pids+=("$SRV_PID")
}
start_worker() { # start_worker KIND DIR -> WRK_PID
  local kind=$1 dir=$2
  case $kind in
    c) "$CW" --address "$ADDR" --task-queue bench --db-dir "$dir/cworker" "${c_args[@]}" >"$dir/worker.log" 2>&1 & ;;
    cbase) "${BASE_BUILD:?BASE_BUILD names the build of worker cbase}/bench/dbx-bench-worker" --address "$ADDR" \
      --task-queue bench --db-dir "$dir/cworker" "${cbase_args[@]}" >"$dir/worker.log" 2>&1 & ;;
    go) "$GO" worker --address "$ADDR" --task-queue bench >"$dir/worker.log" 2>&1 & ;;
    ts) node bench/peers/ts/worker.js --address "$ADDR" --task-queue bench --bundle "$TS_BUNDLE" >"$dir/worker.log" 2>&1 & ;;
  esac
  WRK_PID=$!
  pids+=("$WRK_PID")
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# run_cell REP SERVER WORKER WORKLOAD: one run, one JSON line.
run_cell() {
  local rep=$1 srv=$2 wrk=$3 wl=$4 dir drive args conc=$CONC
  [ "$srv" = temporal ] && conc=$CONC_TEMPORAL
  dir=$OUT/r$rep-$srv-$wrk-$wl
  start_server "$srv" "$dir"
  start_worker "$wrk" "$dir"
  # warm-up: the worker is polling (and JITs are warm) before the window opens
  "$GO" drive --address "$ADDR" --task-queue bench --type bench.Chain --input '{"n":1}' \
    --workflows 8 --concurrency 4 --timeout 120s --id-prefix warm >/dev/null 2>>"$dir/driver.err" || true
  case $wl in
    one) args=(--type bench.Chain --input '{"n":1}' --seconds "$RUN_S" --concurrency "$conc" --timeout 60s) ;;
    chain20) args=(--type bench.Chain --input '{"n":20}' --seconds "$RUN_S" --concurrency "$conc" --timeout 120s) ;;
    hold) args=(--type bench.Hold --input "{\"ms\":$HOLD_MS}" --workflows "$HOLD_N" --concurrency "$HOLD_N" --timeout 300s) ;;
  esac
  local s0 w0 s1 w1
  s0=$(cpu_s "$SRV_PID") w0=$(cpu_s "$WRK_PID")
  monitor "$WRK_PID" "$dir/worker.threads" &
  local mon=$!
  drive=$("$GO" drive --address "$ADDR" --task-queue bench --id-prefix "m$rep" "${args[@]}" 2>>"$dir/driver.err") || true
  s1=$(cpu_s "$SRV_PID") w1=$(cpu_s "$WRK_PID")
  local shwm whwm
  shwm=$(hwm_kib "$SRV_PID") whwm=$(hwm_kib "$WRK_PID")
  kill "$mon" 2>/dev/null || true
  wait "$mon" 2>/dev/null || true
  local wthr wanon wstore=null
  read -r wthr wanon <"$dir/worker.threads" 2>/dev/null || true
  stop "$WRK_PID"
  stop "$SRV_PID"
  # the C workers' store file at the end of the run (KiB): what it kept
  [ -f "$dir/cworker/data.mdb" ] && wstore=$(( $(stat -c %s "$dir/cworker/data.mdb") / 1024 ))
  [ -n "$drive" ] || drive='{"completed":0,"failed":-1}'
  jq -c --arg rep "$rep" --arg srv "$srv" --arg wrk "$wrk" --arg wl "$wl" \
    --argjson scpu "$(echo "$s1 $s0" | awk '{print $1 - $2}')" --argjson wcpu "$(echo "$w1 $w0" | awk '{print $1 - $2}')" \
    --argjson shwm "${shwm:-0}" --argjson whwm "${whwm:-0}" --argjson wthr "${wthr:-null}" --argjson wanon "${wanon:-null}" \
    --argjson wstore "$wstore" \
    '{rep: ($rep|tonumber), server: $srv, worker: $wrk, workload: $wl, server_cpu_s: $scpu, worker_cpu_s: $wcpu,
      server_rss_kib: $shwm, worker_rss_kib: $whwm, worker_anon_kib: $wanon, worker_threads_max: $wthr,
      worker_store_kib: $wstore} + .' <<<"$drive" | tee -a "$results"
  rm -rf "$dir/cworker" "$dir"/*.db "$dir"/*.db-*
}

# run_loadgen REP SERVER: dbx-loadgen (client and worker) against a fresh server.
run_loadgen() {
  local rep=$1 srv=$2 dir n s0 s1 shwm lg
  dir=$OUT/r$rep-$srv-loadgen
  start_server "$srv" "$dir"
  n=$LG_WORKFLOWS_DURABOX
  [ "$srv" = temporal ] && n=$LG_WORKFLOWS_TEMPORAL
  s0=$(cpu_s "$SRV_PID")
  lg=$(/usr/bin/time -f '%M' -o "$dir/lg.time" "$LG" --address "$ADDR" --workflows "$n" --concurrency 128 \
    --wft-pollers 64 --act-pollers 64 --timeout 120 --json 2>>"$dir/driver.err") || true
  s1=$(cpu_s "$SRV_PID") shwm=$(hwm_kib "$SRV_PID")
  stop "$SRV_PID"
  [ -n "$lg" ] || lg='{"completed":0}'
  jq -c --arg rep "$rep" --arg srv "$srv" --argjson scpu "$(echo "$s1 $s0" | awk '{print $1 - $2}')" \
    --argjson shwm "${shwm:-0}" --argjson drss "$(tail -1 "$dir/lg.time" 2>/dev/null || echo 0)" \
    '{rep: ($rep|tonumber), server: $srv, worker: "loadgen", workload: "one", server_cpu_s: $scpu,
      server_rss_kib: $shwm, completed: .completed, failed: .errors, wall_s: .wall_s, wf_per_s: .workflows_per_s,
      p50_ms: .latency_ms.workflow_end_to_end.p50, p99_ms: .latency_ms.workflow_end_to_end.p99,
      driver_cpu_s: .loadgen_cpu_s, driver_rss_kib: $drss, worker_cpu_s: 0, worker_rss_kib: 0,
      in_flight_mean: .in_flight_mean}' <<<"$lg" | tee -a "$results"
  rm -rf "$dir"/*.db "$dir"/*.db-*
}

echo "matrix: results in $OUT (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
{
  echo "date_utc=$(date -u +%FT%TZ) commit=$(git rev-parse --short HEAD) nproc=$(nproc)"
  echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg) C_ARGS=${c_args[*]} CBASE_ARGS=${cbase_args[*]} REPS=$REPS RUN_S=$RUN_S CONC=$CONC CONC_TEMPORAL=$CONC_TEMPORAL TEMPORAL_WORKLOADS=$TEMPORAL_WORKLOADS HOLD_N=$HOLD_N HOLD_MS=$HOLD_MS"
} >"$OUT/conditions"
for rep in $(seq 1 "$REPS"); do
  for wl in $WORKLOADS; do
    for srv in $SERVERS; do
      [ "$srv" = temporal ] && [[ " $TEMPORAL_WORKLOADS " != *" $wl "* ]] && continue
      for wrk in $WORKERS; do run_cell "$rep" "$srv" "$wrk" "$wl"; done
    done
  done
  if [ "$LOADGEN" = 1 ]; then for srv in $SERVERS; do run_loadgen "$rep" "$srv"; done; fi
done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/conditions"
python3 bench/peers/table.py "$results" "$OUT/conditions" >"$OUT/table.md"
cat "$OUT/table.md"
[ "${NO_DOC:-0}" = 1 ] || python3 bench/peers/table.py --doc docs/benchmarks.md "$OUT/table.md"
