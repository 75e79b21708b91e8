/* Sandbox activities over the local driver (activities/local.h).
 *
 * Each activity is a dbx_activity_type (worker/api.h) whose input and result
 * are JSON objects; the worker runs them on its activity threads. They share
 * one process-wide dbx_local handle opened by dbx_sandbox_init().
 *
 *   sandbox.create      {"resource"?: "workspace", "source"?: {"kind": "empty"|"dir"|"git"|
 *                        "snapshot", "path"|"url"|"ref"}, "env"?: {..}}
 *                       -> {"sandbox_id", "adopted", "path"}
 *                       The id is "dbx-" + 16 hex digits of FNV-1a 64 over
 *                       workflow id + "/" + resource, so a retried create adopts
 *                       what an earlier attempt made. ("env" is validated; the
 *                       local driver keeps no per-sandbox environment.)
 *   sandbox.exec        {"sandbox_id", "command", "env"?: {K: "v" | {"secret": "NAME"}},
 *                        "cwd"?, "timeout_s"?, "max_output_bytes"?}
 *                       -> {"exit_code", "signal", "timed_out", "stdout"|"stdout_b64",
 *                           "stderr"|"stderr_b64", "stdout_truncated", "stderr_truncated",
 *                           "stdout_bytes", "stderr_bytes", "duration_ms"}
 *                       A non-zero exit is a result. Output that is not valid
 *                       UTF-8 (or holds NUL) is sent as base64, never decoded
 *                       lossily. *_bytes count all bytes the command wrote;
 *                       in a stream where a secret was redacted, the bytes
 *                       of the redacted text kept instead (so no value's
 *                       length shows).
 *   sandbox.write_file  {"sandbox_id", "path", "content" | "content_b64"} -> {"bytes"}
 *   sandbox.read_file   {"sandbox_id", "path"} -> {"content" | "content_b64", "bytes"}
 *   sandbox.checkpoint  {"sandbox_id", "name"?} -> {"ref"}; the default name is
 *                       "ckpt-" + FNV-1a 64 of sandbox id, workflow id, run id
 *                       and activity id, so retries of one activity agree.
 *   sandbox.git_commit  {"sandbox_id", "message", "author"?} -> {"sha", "nothing_to_commit"}
 *   sandbox.stop / sandbox.start / sandbox.delete {"sandbox_id"} -> {}
 *                       (delete: a missing sandbox counts as done)
 *
 * Failures (dbx_act_result.failure_type):
 *   InvalidInput     non-retryable: bad JSON, a missing or wrong-typed field
 *                    (the message names it)
 *   PathRefused      non-retryable: absolute path, "..", symlink leaving the workspace
 *   SandboxNotFound  non-retryable: no sandbox with that id
 *   FileNotFound     non-retryable: read_file path or exec cwd does not exist
 *   SourceNotFound   non-retryable: create's source dir or snapshot is missing
 *   SandboxConflict  non-retryable: the derived id exists with another source
 *   SecretMissing    non-retryable: a {"secret": NAME} is unset in the worker's
 *                    environment (the message names NAME, never a value)
 *   SandboxError     retryable: any other driver failure, with its message
 *
 * Security (DESIGN.md "Security"): secrets are resolved from the worker's
 * environment only when sandbox.exec runs, and every resolved value is
 * replaced by "[redacted:NAME]" in stdout/stderr before the result is built,
 * including a partial value cut off at the output cap.
 *
 * Thread safety: dbx_sandbox_init/shutdown once per process, before the
 * worker starts and after it stops; the activities may then run on any
 * number of threads at once. Retry classes: all safe_to_retry (exec's is the
 * default; a step may declare at_most_once when it schedules it). */
#ifndef DBX_ACTIVITIES_SANDBOX_H
#define DBX_ACTIVITIES_SANDBOX_H

#include "base/err.h"
#include "worker/api.h"

struct dbx_worker;

extern const dbx_activity_type dbx_sandbox_create_type;
extern const dbx_activity_type dbx_sandbox_exec_type;
extern const dbx_activity_type dbx_sandbox_write_file_type;
extern const dbx_activity_type dbx_sandbox_read_file_type;
extern const dbx_activity_type dbx_sandbox_checkpoint_type;
extern const dbx_activity_type dbx_sandbox_git_commit_type;
extern const dbx_activity_type dbx_sandbox_stop_type;
extern const dbx_activity_type dbx_sandbox_start_type;
extern const dbx_activity_type dbx_sandbox_delete_type;

/* Open the process-wide local driver over home (borrowed; NULL:
 * $DURABOX_HOME, else ~/.local/share/durabox). Calling it again while open
 * returns DBX_ESTATE. Returns what dbx_local_open returns otherwise; its
 * message is logged. Undo with dbx_sandbox_shutdown(). */
dbx_err dbx_sandbox_init(const char *home);
/* Close the driver; no activity may be running. Safe to call when not open. */
void dbx_sandbox_shutdown(void);

/* Register every type above with w (dbx_worker_register_activity); a failed
 * registration is logged. The types are static: nothing to free. */
void dbx_sandbox_register_all(struct dbx_worker *w);

#endif
