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
