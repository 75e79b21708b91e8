/* workflows/script: the built-in "durabox.Script" workflow type: a declared
 * list of sandbox steps run as activities, one after the other.
 *
 * Input (JSON): {"sandbox": {"source": {"kind": "empty"|"dir"|"git"|"snapshot",
 * "path"|"url"|"ref": ...}, "env": {...}, "keep": false, "network": "host"|"none",
 * "host_fs": "host"|"system"}, "steps": [{"name",
 * "kind": "exec"|"write_file"|"read_file"|"checkpoint"|"sleep"|"git_commit",
 * ...kind fields..., "retry_class": "safe_to_retry"|"at_most_once",
 * "timeout_s": N, "heartbeat_timeout_s": N, "continue_on_failure": false,
 * "retry": {...}, "schedule_to_close_s": N}], "retry": {...},
 * "schedule_to_close_s": N}; sandbox also takes "timeout_s" and
 * "heartbeat_timeout_s", and "checkpoint": {"every_steps": N, "on_completion":
 * bool} (the checkpoint policy; a fork's input also has "fork_of":
 * {"workflow_id", "run_id", "event_id"}: docs/worker.md "Checkpoints and
 * forks"; then the result has "checkpoints" and "fork", and recorded steps
 * "from_record"). Durations are seconds, at most 10 years.
 * Activities: sandbox.create {"resource": "workspace", "source", "env"};
 * then per step sandbox.<kind> {"sandbox_id", ...step fields} (sleep is a
 * durable timer); then sandbox.delete {"sandbox_id"} unless keep.
 * Options: exec start-to-close = timeout_s (default 600) + 60 s, heartbeat
 * timeout heartbeat_timeout_s (default 30); other steps and delete 60 s;
 * create start-to-close sandbox.timeout_s (default 600), heartbeat timeout
 * sandbox.heartbeat_timeout_s (default 30). at_most_once -> maximum_attempts
 * 1 (a "retry" there is InvalidInput). safe_to_retry -> Temporal's
 * RetryPolicy from "retry" {maximum_attempts (0 = unlimited), initial_interval_s,
 * backoff_coefficient, maximum_interval_s}: the step's fields over the
 * input's over the default 5 attempts, 1 s, 2.0, 100 x initial; and
 * schedule_to_close_s likewise (default none).
 * Output: {"sandbox_id", "status": "completed"|"failed", "failed_step",
 * "steps": [{"name", "kind", "ok", "attempts", "duration_ms"?, "exit_code"?,
 * "output_excerpt"?, "detail"? (git_commit sha, checkpoint ref)}]}; status is "failed" when a failed step stopped the
 * script (steps with continue_on_failure record ok:false and go on).
 * Limits (docs/limits.md): the input is one JSON document (white space may
 * follow it), at most DBX_SCRIPT_MAX_INPUT_BYTES; no string in it (key or
 * value) holds a NUL, a raw control character or bytes that are not UTF-8,
 * or is longer than DBX_SCRIPT_MAX_FIELD_BYTES; at most DBX_SCRIPT_MAX_STEPS
 * steps, with distinct names of at most DBX_SCRIPT_MAX_NAME_BYTES.
 * Bad input fails the run with type "InvalidInput"; a failed sandbox.create
 * fails it with type "SandboxCreateFailed". Query "progress": the output so far.
 * Deterministic: its only inputs are the input JSON and activity outcomes. */
#ifndef DBX_WORKFLOWS_SCRIPT_H
#define DBX_WORKFLOWS_SCRIPT_H

#include <stddef.h>

#include "worker/api.h"

extern const dbx_workflow_type dbx_script_workflow;

/* Temporal's default payload limit (limit.blobSize.error, 2 MiB) less 64 KiB
 * for what travels with the input: the payload's metadata, and in each
 * step's activity input the sandbox id and step name. Every string of a
 * checked input re-encodes to at most its own length, so each activity
 * input and the workflow input fit one payload. */
#define DBX_SCRIPT_MAX_INPUT_BYTES (2u * 1024 * 1024 - 64 * 1024)
/* Longest string (decoded bytes), key or value: write_file content, an
 * exec command, an env value... The input limit bounds it; this names it. */
#define DBX_SCRIPT_MAX_FIELD_BYTES DBX_SCRIPT_MAX_INPUT_BYTES
/* Steps per input: each takes ~6 history events and ~2.5 KiB of the
 * result's summary, so 500 stay under the service's history suggestion
 * (4096 events) and the result under one payload. */
#define DBX_SCRIPT_MAX_STEPS 500
/* A step name's length in bytes (it heads error messages and history). */
#define DBX_SCRIPT_MAX_NAME_BYTES 128

/* Check a Script input as the workflow will, without running it (durabox run
 * uses it to refuse a bad file before starting a workflow). Returns 0, or -1
 * with a message naming the problem in err (n bytes, NUL-terminated), the
 * same text the workflow would fail with. Pure; thread-safe. */
int dbx_script_validate(const char *input_json, size_t len, char *err, size_t n);

/* The identity key of a step for forks (docs/worker.md "Checkpoints and
 * forks"): sha256 hex of type, a newline and the canonical JSON of the
 * activity input (every object's members sorted by key, the top-level
 * "sandbox_id" left out, printed without white space). out: 65 bytes.
 * Returns 0, or -1 (input not JSON, OOM). Pure; thread-safe. */
#define DBX_SCRIPT_STEP_KEY_LEN 64
int dbx_script_step_key(const char *type, const char *input_json, size_t len,
                        char out[DBX_SCRIPT_STEP_KEY_LEN + 1]);

#endif
