#!/usr/bin/env bash
# Temporal's Python SDK against the server binary in DBX_BIN (durabox, or a
# Temporal CLI for checking the suite itself). The SDK and pytest, pinned in
# requirements.txt, live in .cache/pyvenv (scripts/setup.sh). Fails loudly,
# never skips.
set -euo pipefail
cd "$(dirname "$0")"
if [ -z "${DBX_BIN:-}" ]; then
  echo "interop-python: DBX_BIN is not set (path to durabox or a Temporal CLI binary)" >&2
  exit 1
fi
py=../../../.cache/pyvenv/bin/python
if [ ! -x "$py" ] || ! "$py" -c 'import temporalio, pytest' 2>/dev/null; then
  echo "interop-python: .cache/pyvenv with temporalio and pytest is missing; run scripts/setup.sh" >&2
  exit 1
fi
want=$(sed -n 's/^temporalio==//p' requirements.txt)
have=$("$py" -c 'import importlib.metadata as m; print(m.version("temporalio"))')
if [ "$want" != "$have" ]; then
  echo "interop-python: .cache/pyvenv has temporalio $have, requirements.txt pins $want; run scripts/setup.sh" >&2
  exit 1
fi
exec "$py" -m pytest -p no:cacheprovider -v "$@" test_durabox.py test_schedules.py
