#!/usr/bin/env python3
"""make-input.py WORKDIR [GITHUB_REPO]: write WORKDIR/agent.json, a
durabox.Agent input for the fix-tests repository that
examples/fix-tests/prepare.sh made in WORKDIR/repo, with policy.yaml (next
to this file) as its policy. GITHUB_REPO (OWNER/NAME) is where open_pr opens
the pull request (default: durabox-example/cjson)."""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
work = os.path.abspath(sys.argv[1])
repo = sys.argv[2] if len(sys.argv) > 2 else "durabox-example/cjson"
with open(os.path.join(here, "policy.yaml"), encoding="utf-8") as f:
    policy = f.read()
task = ("The test suite of this repository fails: configure it with "
        "`cmake -S . -B build -DENABLE_CJSON_TEST=On -DENABLE_CJSON_UTILS=On`, build it "
        "and run `ctest --output-on-failure` in build/. Find the bug, fix it in the "
        "source (not in the tests), run the suite again until it passes, commit the fix "
        "with a message that says why, and open a pull request.")
doc = {
    "task": task,
    "sandbox": {"source": {"kind": "git", "path": os.path.join(work, "repo")}},
    "repository": {"github": repo, "base": "main"},
    "policy": policy,
    "budget": {"max_steps": 60},
    "tool_output_max_bytes": 12000,
}
with open(os.path.join(work, "agent.json"), "w", encoding="utf-8") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
print("wrote", os.path.join(work, "agent.json"))
