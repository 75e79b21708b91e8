/* workflows/script: the built-in "durabox.Script" workflow type: a declared
 * list of sandbox steps run as activities, one after the other.
 *
 * Input (JSON): {"sandbox": {"source": {"kind": "empty"|"dir"|"git"|"snapshot",
 * "path"|"url"|"ref": ...}, "env": {...}, "keep": false}, "steps": [{"name",
 * "kind": "exec"|"write_file"|"read_file"|"checkpoint"|"sleep"|"git_commit",
 * ...kind fields..., "retry_class": "safe_to_retry"|"at_most_once",
 * "timeout_s": N, "continue_on_failure": false}]}.
 * Activities: sandbox.create {"resource": "workspace", "source", "env"};
 * then per step sandbox.<kind> {"sandbox_id", ...step fields} (sleep is a
 * durable timer); then sandbox.delete {"sandbox_id"} unless keep.
 * Options: exec start-to-close = timeout_s (default 600) + 60 s, other steps
 * and delete 60 s, create sandbox.timeout_s (default 600 s); at_most_once -> maximum_attempts 1;
 * safe_to_retry -> maximum_attempts 5, initial interval 1 s.
 * Output: {"sandbox_id", "status": "completed"|"failed", "failed_step",
 * "steps": [{"name", "kind", "ok", "attempts", "duration_ms"?, "exit_code"?,
 * "output_excerpt"?, "detail"? (git_commit sha, checkpoint ref)}]}; status is "failed" when a failed step stopped the
 * script (steps with continue_on_failure record ok:false and go on).
 * Bad input fails the run with type "InvalidInput"; a failed sandbox.create
 * fails it with type "SandboxCreateFailed". Query "progress": the output so far.
 * Deterministic: its only inputs are the input JSON and activity outcomes. */
#ifndef DBX_WORKFLOWS_SCRIPT_H
#define DBX_WORKFLOWS_SCRIPT_H

#include "worker/api.h"

extern const dbx_workflow_type dbx_script_workflow;

#endif
