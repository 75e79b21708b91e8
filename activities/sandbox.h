/* Sandbox activities over the driver interface (activities/driver.h).
 *
 * Each activity is a dbx_activity_type (worker/api.h) whose input and result
 * are JSON objects; the worker runs them on its activity threads. The driver
 * reaches them through their registration: dbx_sandbox_acts_create(drv)
 * makes one set of types whose ud carries drv, so two sets over two drivers
 * (two local homes, a local and a memory driver) live in one process.
 *
 *   sandbox.create      {"resource"?: "workspace", "source"?: {"kind": "empty"|"dir"|"git"|
 *                        "snapshot", "path"|"url"|"ref"}, "env"?: {..},
 *                        "network"?: "host"|"none", "host_fs"?: "host"|"system",
 *                        "owner_run_id"?: RUN, "keep"?: bool, "session"?: bool,
 *                        "adopt"?: {"sandbox_id": ID, "driver"?: NAME}}
 *                       -> {"sandbox_id", "adopted", "path", "driver"}
 *                       The id is "dbx-" + 16 hex digits of FNV-1a 64 over
 *                       workflow id + "/" + owner_run_id + "/" + resource
 *                       (a sandbox per run: docs/sandbox.md), so a retried
 *                       create of the same run adopts what an earlier attempt
 *                       made and another run never does; without
 *                       owner_run_id, over workflow id + "/" + resource (the
 *                       id of earlier versions). A fresh sandbox is labelled
 *                       durabox.resource, durabox.workflow_id, durabox.run_id
 *                       (owner_run_id, else the activity's run) and, with
 *                       "keep": true, durabox.keep = "true", with "session":
 *                       true durabox.session = "true" (a session's sandbox:
 *                       `durabox sandbox gc` asks the session whether it
 *                       still needs it; each when a valid label value). "path" is the workspace's host
 *                       path, absent when the driver has none. ("env" is
 *                       validated; the local driver keeps no per-sandbox
 *                       environment.) "network" "none": no network at all;
 *                       "host_fs" "system": of the host's files only the
 *                       system folders (docs/sandbox.md); a driver that
 *                       cannot enforce a setting fails the create
 *                       (Unsupported). With "adopt" nothing is made:
 *                       the existing sandbox ID is re-opened (a session's
 *                       next turn, docs/worker.md "Sessions"; started when
 *                       stopped), "adopted" is true and its labels stay as
 *                       they were; a missing one, or one made by another
 *                       driver than "driver" names, is SandboxNotFound
 *                       naming it, one labelled with another workflow id
 *                       SandboxConflict. "driver" is the driver's name
 *                       (local, daytona, or the memory driver's).
 *   sandbox.exec        {"sandbox_id", "command", "env"?: {K: "v" | {"secret": "NAME"}},
 *                        "cwd"?, "timeout_s"?, "max_output_bytes"?, "redact"?: ["NAME", ..]}
 *                       -> {"exit_code", "signal", "timed_out", "stdout"|"stdout_b64",
 *                           "stderr"|"stderr_b64", "stdout_truncated", "stderr_truncated",
 *                           "stdout_bytes", "stderr_bytes", "duration_ms"}
 *                       A non-zero exit is a result. See "Output" below.
 *                       While the command runs, the heartbeat details are
 *                       {"cmd_id", "stdout_offset", "stderr_offset",
 *                       "stdout_tail"?, "stderr_tail"?}: the tails are the
 *                       last 3 lines of each stream's last 600 bytes,
 *                       secrets redacted, as UTF-8 text (durabox run shows
 *                       them; read while a stream is under its cap).
 *                       *_bytes count all bytes the command wrote;
 *                       in a stream where a secret was redacted, the bytes
 *                       of the redacted text kept instead (so no value's
 *                       length shows).
 *                       max_output_bytes (per stream; default
 *                       DBX_SANDBOX_OUTPUT_DEFAULT_BYTES) over
 *                       DBX_SANDBOX_OUTPUT_MAX_BYTES is InvalidInput.
 *   sandbox.write_file  {"sandbox_id", "path", "content" | "content_b64"} -> {"bytes"}
 *                       content_b64 is standard base64 with padding, decoded
 *                       strictly (base/codec.h): no whitespace, and the bits
 *                       under the padding must be zero ("QQ==", not "QR==").
 *   sandbox.read_file   {"sandbox_id", "path", "redact"?: ["NAME", ..]}
 *                       -> {"content" | "content_b64", "bytes", "truncated"}:
 *                       a file over DBX_SANDBOX_READ_MAX_BYTES keeps its head
 *                       and tail with the mark (see "Output"); "bytes" is the
 *                       file's size (with a value redacted, the size of the
 *                       redacted text kept, as for exec's *_bytes).
 *   "redact" (exec, read_file): names of the worker's variables whose values
 *                       are replaced by "[redacted:NAME]" in what the step
 *                       returns, as a {"secret": NAME} of the step's own env
 *                       is: a secret an earlier step wrote into a file or
 *                       left in the sandbox stays out of history. At most
 *                       DBX_SANDBOX_REDACT_MAX; an unset or empty variable has
 *                       nothing to redact and is skipped. durabox.Script
 *                       passes every secret name of its input on both.
 *   sandbox.checkpoint  {"sandbox_id", "name"?} -> {"ref"}; the default name is
 *                       "ckpt-" + FNV-1a 64 of sandbox id, workflow id, run id
 *                       and activity id, so retries of one activity agree.
 *   sandbox.git_commit  {"sandbox_id", "message", "author"?, "paths"?: ["p", ..]}
 *                       -> {"sha", "nothing_to_commit"}
 *                       Stages every change of the workspace's repository
 *                       (new, modified, deleted; .gitignore respected) or, with
 *                       "paths" (1..1000, relative, literal), of those only,
 *                       and commits just that. HOME and caches are outside the
 *                       workspace, so never staged.
 *   sandbox.stop / sandbox.start / sandbox.delete {"sandbox_id"} -> {}
 *                       (delete: a missing sandbox counts as done; a sandbox
 *                       labelled kept by a run other than the input's
 *                       "owner_run_id" (else the activity's run) is left and
 *                       the result is {"deleted": false, "kept_by_run"})
 *
 * Output (exec's stdout and stderr, read_file's content). A stream over its
 * cap keeps its head and its tail (driver.h "Capture") with a mark between
 * them, on a line of its own: "[… 198,000,000 bytes cut …]" (U+2026, the
 * count with thousands commas; in a stream where a secret was redacted,
 * "[… bytes cut (count withheld) …]"). Caps under 1 KiB keep the head alone,
 * unmarked (*_truncated says it). The cut falls on UTF-8 character
 * boundaries. Text that is valid UTF-8 without NUL is sent as "stdout" (a
 * JSON string); other bytes as "stdout_b64", the exact kept bytes (mark
 * included) in base64 - kept for compatibility with existing callers; the
 * Script's summary shows them lossily (U+FFFD), never drops them. Every
 * result fits DBX_SANDBOX_RESULT_MAX_BYTES of JSON (under Temporal's 2 MiB
 * per payload): when the escaped text would not, each stream is cut further
 * (the mark counts it, *_truncated is true), so a result is always
 * reportable and never makes the activity run again.
 *
 * Failures (dbx_act_result.failure_type). Those a driver causes come from its
 * typed error (driver.h) by one table (dbx_sandbox_failure_type):
 *   InvalidInput     non-retryable: bad JSON, a missing or wrong-typed field
 *                    (the message names it); DBX_DRV_INVALID
 *   PathRefused      non-retryable: absolute path, "..", symlink leaving the
 *                    workspace; DBX_DRV_PATH_REFUSED
 *   SandboxGone      non-retryable: a step's sandbox no longer exists (removed
 *                    from outside, or never made); DBX_DRV_NO_SANDBOX. A create
 *                    re-opening (adopt) a missing one says SandboxNotFound
 *   SandboxNotFound  non-retryable: create's adopt names no such sandbox
 *   FileNotFound     non-retryable: read_file path or exec cwd does not exist;
 *                    DBX_DRV_NOT_FOUND
 *   SourceNotFound   non-retryable: create's source dir or snapshot is missing;
 *                    DBX_DRV_SOURCE_NOT_FOUND
 *   SandboxConflict  non-retryable: the derived id exists with another source;
 *                    DBX_DRV_CONFLICT
 *   SnapshotFailed   retryable: the checkpoint could not be made or verified;
 *                    DBX_DRV_SNAPSHOT_FAILED
 *   OutcomeUnknown   non-retryable: the driver cannot tell whether the
 *                    operation happened; DBX_DRV_OUTCOME_UNKNOWN
 *   Unsupported      non-retryable: the driver lacks it; DBX_DRV_UNSUPPORTED
 *   RepositoryNotFound non-retryable: a git source or clone names a
 *                    repository that does not exist; DBX_DRV_REPO_NOT_FOUND
 *   NotAGitRepository  non-retryable: a git source is no repository, or
 *                    git_commit runs where there is none; DBX_DRV_NOT_A_REPO
 *   RefNotFound      non-retryable: the source's ref (branch, tag, commit)
 *                    does not exist; DBX_DRV_REF_NOT_FOUND
 *   DiskFull         non-retryable: no space left on the device (or quota)
 *                    while writing; DBX_DRV_DISK_FULL
 *                    (these four read "<activity>: <what git or the system
 *                    said> (<cause>)", the cause the code's text)
 *   AuthFailed       non-retryable: the backend or a git remote refused the
 *                    credentials (Daytona's 401 / 403: a bad, revoked or
 *                    out-of-scope API key; git's "Authentication failed");
 *                    the message names which; DBX_DRV_AUTH
 *   SecretMissing    non-retryable: a {"secret": NAME} is unset in the worker's
 *                    environment (the message names NAME, never a value)
 *   CommandLost      retryable: exec's command lost its runner twice
 *   SandboxError     retryable: any other driver failure, with its message
 *                    (DBX_DRV_TRANSIENT, DBX_DRV_STATE: stopped, DBX_DRV_FAILED)
 * DBX_DRV_CANCELED makes the run return DBX_ECANCELED, DBX_DRV_NOMEM DBX_ENOMEM.
 * Any allocation failure of a run is DBX_ENOMEM with nothing recorded in the
 * result (the worker reports a retryable failure), never a success with
 * fields missing nor a non-retryable type.
 *
 * Security (docs/architecture.md "Promises"): secrets are resolved from the worker's
 * environment only when sandbox.exec runs, and every resolved value (and
 * every value "redact" names) is replaced by "[redacted:NAME]" in
 * stdout/stderr (read_file: content) before the result is built, including
 * a partial value cut off at the output cap.
 *
 * Thread safety: a dbx_sandbox_acts is immutable; its activities may run on
 * any number of threads at once (the driver is thread-safe, driver.h). Retry
 * classes: all safe_to_retry (exec's is the default; a step may declare
 * at_most_once when it schedules it). */
#ifndef DBX_ACTIVITIES_SANDBOX_H
#define DBX_ACTIVITIES_SANDBOX_H

#include <stddef.h>

#include "activities/driver.h"
#include "base/err.h"
#include "worker/api.h"

struct dbx_worker;

/* The activity types, in registration order: sandbox.create, sandbox.exec,
 * sandbox.write_file, sandbox.read_file, sandbox.checkpoint,
 * sandbox.git_commit, sandbox.stop, sandbox.start, sandbox.delete. */
#define DBX_SANDBOX_NTYPES 9

/* Output caps (see "Output"): exec's default and largest max_output_bytes,
 * per stream; read_file's kept bytes; the largest result JSON. Default
 * and largest fit both streams under the result's limit. */
#define DBX_SANDBOX_OUTPUT_DEFAULT_BYTES ((size_t)256 * 1024)
#define DBX_SANDBOX_OUTPUT_MAX_BYTES ((size_t)768 * 1024)
#define DBX_SANDBOX_READ_MAX_BYTES ((size_t)1024 * 1024)
/* At most this many names in an exec's or read_file's "redact". */
#define DBX_SANDBOX_REDACT_MAX 64
#define DBX_SANDBOX_RESULT_MAX_BYTES ((size_t)1792 * 1024)

typedef struct dbx_sandbox_acts dbx_sandbox_acts;

/* One set of the activity types over drv (borrowed: it must outlive the set
 * and every worker it is registered with). *out: free with
 * dbx_sandbox_acts_destroy() after the workers using it are destroyed.
 * Returns DBX_OK, DBX_EINVAL (no driver), DBX_ENOMEM. */
dbx_err dbx_sandbox_acts_create(dbx_driver *drv, dbx_sandbox_acts **out);
/* Accepts NULL. */
void dbx_sandbox_acts_destroy(dbx_sandbox_acts *acts);
/* The type named name ("sandbox.exec"), or NULL; borrowed from acts. */
const dbx_activity_type *dbx_sandbox_acts_type(const dbx_sandbox_acts *acts, const char *name);
/* The i-th type (0 <= i < DBX_SANDBOX_NTYPES) in registration order, or NULL. */
const dbx_activity_type *dbx_sandbox_acts_at(const dbx_sandbox_acts *acts, size_t i);

/* Register every type of acts with w (dbx_worker_register_activity, which
 * keeps the pointers: acts must outlive w). A failed registration is logged
 * and the others still made; returns DBX_OK or the first failure's code. */
dbx_err dbx_sandbox_register_all(struct dbx_worker *w, const dbx_sandbox_acts *acts);

/* The Temporal failure type ("SandboxGone") of a driver's typed error and
 * whether it is non-retryable; NULL for DBX_DRV_OK, DBX_DRV_CANCELED,
 * DBX_DRV_NOMEM and values out of range. Static string. non_retryable may be
 * NULL. */
const char *dbx_sandbox_failure_type(dbx_drv_err e, int *non_retryable);

#endif
