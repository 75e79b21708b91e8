# Sourced by the interop shell tests: find Temporal's CLI binary (built by
# temporal-server.sh), start Temporal's dev server or durabox's service on a
# free loopback port with a fresh database in a temporary directory, and
# wait (up to a deadline) until it answers. Every failure is fatal: nothing
# here skips.

itp_fail() { echo "${ITP_NAME:-interop}: FAIL: $*" >&2; exit 1; }

# ITP_TEMPORAL: Temporal's CLI (DBX_TEMPORAL_BIN, else .cache/temporal).
itp_find_temporal() {
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  ITP_TEMPORAL=${DBX_TEMPORAL_BIN:-$root/.cache/temporal}
  [ -x "$ITP_TEMPORAL" ] ||
    itp_fail "Temporal's CLI is missing at $ITP_TEMPORAL: run scripts/setup.sh (tests/interop/temporal-server.sh builds it)"
}

itp_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# itp_wait_ready ADDR PID: Temporal's `operator cluster health` answers
# SERVING within 60 s, or the server died.
itp_wait_ready() {
  local addr=$1 pid=$2 until=$((SECONDS + 60))
  while [ $SECONDS -lt $until ]; do
    kill -0 "$pid" 2>/dev/null || itp_fail "the server at $addr exited before it answered"
    if "$ITP_TEMPORAL" operator cluster health --address "$addr" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  itp_fail "the server at $addr did not answer within 60 s"
}

# itp_start_temporal DIR: Temporal's dev server, headless, on a free port, its
# SQLite file in DIR. Sets ITP_ADDR and ITP_PID.
itp_start_temporal() {
  local dir=$1 port http metrics
  port=$(itp_free_port)
  http=$(itp_free_port)
  metrics=$(itp_free_port)
  "$ITP_TEMPORAL" server start-dev --headless --ip 127.0.0.1 --port "$port" --http-port "$http" \
    --metrics-port "$metrics" --namespace default --db-filename "$dir/temporal.db" --log-level warn \
    --search-attribute DbxCliText=Text >"$dir/temporal.log" 2>&1 &
  ITP_PID=$!
  ITP_ADDR=127.0.0.1:$port
  itp_wait_ready "$ITP_ADDR" "$ITP_PID"
}

# itp_start_durabox DIR: durabox's service ($DBX_BIN server start-dev), its
# LMDB in DIR. Sets ITP_ADDR and ITP_PID.
itp_start_durabox() {
  local dir=$1 port
  [ -x "${DBX_BIN:-}" ] || itp_fail "DBX_BIN is not set to the durabox binary"
  port=$(itp_free_port)
  "$DBX_BIN" server start-dev --ip 127.0.0.1 --port "$port" --namespace default --db-filename "$dir/durabox.db" \
    --log-level warn --search-attribute DbxCliText=Text --headless >"$dir/durabox.log" 2>&1 &
  ITP_PID=$!
  ITP_ADDR=127.0.0.1:$port
  itp_wait_ready "$ITP_ADDR" "$ITP_PID"
}

itp_stop() {
  local pid=$1
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
