# pytest hooks for the Python SDK suite.
#
# Temporal's Python SDK runs its Rust core on threads of its own that can
# outlive the event loop; when the interpreter then tears down, one of them
# may release the GIL too late and CPython aborts ("Fatal Python error:
# PyGILState_Release: thread state ... must be current when releasing",
# SIGABRT) after every test has passed: temporalio/sdk-python issue 300.
# Once pytest has reported, the process leaves with pytest's own exit
# status and skips that teardown, so the suite's outcome is the tests'.
import os
import sys

_status = {}


def pytest_sessionfinish(session, exitstatus):
    _status["code"] = int(exitstatus)


def pytest_unconfigure(config):
    if "code" not in _status:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status["code"])


# Temporal's SDK core gives a dev server it starts 5 s to answer
# (sdk-core's ephemeral_server: 50 connection tries 100 ms apart, not
# configurable). Temporal's own dev server can take longer on a loaded
# machine (a Go binary creating its SQLite schema), so a start that fails
# with exactly that timeout is tried again, up to 3 times; any other error,
# and a fourth timeout, fail the suite.
async def start_local_env(**kwargs):
    from temporalio.testing import WorkflowEnvironment

    for attempt in range(4):
        try:
            return await WorkflowEnvironment.start_local(**kwargs)
        except RuntimeError as e:
            if "did not start within" not in str(e) or attempt == 3:
                raise
            print(f"the dev server did not answer within the SDK's 5 s (attempt {attempt + 1}); starting it again",
                  file=sys.stderr)
