#!/usr/bin/env bash
# The room rules of docs/architecture.md that a machine can check (CTest
# check_rooms, label unit; docs/service.md lists what each rule enforces).
# Usage: tests/check_rooms.sh [source dir]. Prints each violation as
# "check_rooms: file:line: rule" and exits 1 if there is any.
set -uo pipefail
cd "${1:-$(dirname "$0")/..}" || exit 2
out=""
bad() { out+="check_rooms: $*"$'\n'; }

# Sources of the project: tracked .c/.h files (a plain find without git),
# never build directories or generated code.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files=$(git ls-files -- '*.c' '*.h')
else
  files=$(find . -name '*.[ch]' -not -path './build*' -not -path '*/node_modules/*' | sed 's|^\./||' | sort)
fi

# Rule 1: no function in service/ is longer than 150 lines, counted from the
# first line of its definition (column 0) to its closing brace at column 0.
while IFS= read -r l; do [ -n "$l" ] && bad "$l"; done < <(
  for f in service/*.c; do
    awk -v f="$f" -v max=150 '
      start == 0 && /^[A-Za-z_]/ && /\(/ && !/;[ \t]*$/ { start = NR; name = $0; next }
      start > 0 && /^\}/ {
        n = NR - start + 1
        if (n > max) printf "%s:%d: function of %d lines (at most %d): %s\n", f, start, n, max, name
        start = 0
      }' "$f"
  done)

# Rule 2: the engine files of service/ never call up into the RPC handlers:
# no function defined (non-static) in a handler file, and no job output
# (svc_job_*: gRPC statuses are the handlers'), is called from them.
handlers="handlers check lifecycle matching wftask activity_rpc history_read visibility reset"
engine="state timers mutable run activity sticky"
up=$(for h in $handlers; do
       [ -f "service/$h.c" ] && sed -nE 's/^[A-Za-z][A-Za-z_ *0-9]* \**(svc_[a-z0-9_]+)\(.*/\1/p' "service/$h.c"
     done | sort -u)
for e in $engine; do
  [ -f "service/$e.c" ] || continue
  for name in $up svc_job_fail svc_job_fail_detail svc_job_reply svc_job_reply_field svc_job_reset; do
    while IFS= read -r l; do
      [ -n "$l" ] && bad "service/$e.c:${l%%:*}: engine file calls $name (a handler's)"
    done < <(grep -nE "\b$name\(" "service/$e.c")
  done
done

# Include rules, per room (a file's first path component). A project header
# is one under a room's folder; system and third-party headers are free except
# the three libraries that belong to one room.
rooms=" base protos rpc store service worker activities workflows cli bench tests "
# allowed <room> <header>: 0 if a file of room may include header.
allowed() {
  local room=$1 h=$2
  case "$h" in
  grpc/*) [ "$room" = rpc ]; return ;;              # only rpc/ speaks gRPC core
  lmdb.h) [ "$room" = store ]; return ;;            # only store/ opens LMDB
  curl/*) [ "$room" = activities ]; return ;;       # only activities/ uses libcurl
  service/svc.h) [ "$room" = service ]; return ;;   # service/'s internal header
  esac
  [[ "$h" == */* && "$rooms" == *" ${h%%/*} "* ]] || return 0   # not a project header
  case "$room" in
  workflows) [[ "$h" == worker/api.h || "$h" == base/* || "$h" == workflows/* ]] ;;  # only the worker API
  activities) [[ "$h" != rpc/* && "$h" != service/* ]] ;;   # never the service or RPC
  service) [[ "$h" != worker/* && "$h" != activities/* && "$h" != workflows/* && "$h" != cli/* ]] ;;
  *) true ;;
  esac
}
for f in $files; do
  room=${f%%/*}
  [ "$f" = tests/test_svc_state.c ] && room=service   # white-box unit tests of service/
  [ "$f" = tests/test_svc_oom.c ] && room=service
  while IFS=: read -r line h; do
    [ -z "$line" ] && continue
    allowed "$room" "$h" || bad "$f:$line: $room/ may not include $h"
  done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]' "$f" |
           sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1:\2/')
done

if [ -n "$out" ]; then
  printf '%s' "$out"
  exit 1
fi
echo "check_rooms: ok ($(echo "$files" | wc -l) files)"
