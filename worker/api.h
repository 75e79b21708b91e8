/* worker/api.h: the contract between the worker and the code it runs.
 *
 * Workflow types (workflows/) are deterministic C state machines driven by
 * history: the worker creates a state object from the workflow input, then
 * feeds it the outcomes recorded in history (activity results, timers,
 * signals, cancellation) in history order; the code answers by issuing
 * commands through its dbx_wf context. On a cache miss the worker replays the
 * whole history through a fresh state object and checks that every command
 * the code issues matches the recorded command event (activity id and type;
 * timer id; marker name; child workflow id and type; external workflow id
 * and signal name; the kind alone for upserts and the run's end); a mismatch
 * fails the workflow task with NON_DETERMINISTIC_ERROR
 * (Temporal: RespondWorkflowTaskFailedRequest, cause 24) naming the event id,
 * the recorded type and the new type.
 * Rules for workflow code: no clocks (use dbx_wf_now_ms), no randomness, no
 * I/O, no globals; its only inputs are the workflow input and the callbacks.
 * A value from outside (a random id, a decision read from elsewhere) goes
 * through dbx_wf_side_effect or dbx_wf_marker_record; a change of code for
 * running workflows through dbx_wf_get_version.
 * Sequence numbers (seq) are shared by activities, timers, children, signal
 * waits and external requests, in issue order. Every callback may issue
 * commands; a string or outcome given to a callback is borrowed for it.
 *
 * Activity types (activities/) do the side effects. Each execution gets its
 * own dbx_act context on one of the worker's pool threads; they may block,
 * but a long wait should park (dbx_act_park) so the pool stays free. Payloads are
 * Temporal "json/plain" payloads: UTF-8 JSON text, never NUL-terminated
 * assumptions on bytes (lengths are given).
 *
 * Thread safety: a dbx_wf is used by one thread during one callback; a
 * dbx_act by the thread running the activity (heartbeat and cancel queries
 * are safe from that thread only). */
#ifndef DBX_WORKER_API_H
#define DBX_WORKER_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* ------------------------------------------------------------ workflows */

typedef struct dbx_wf dbx_wf;

/* How an activity ended, as recorded in history. */
typedef enum {
  DBX_ACT_COMPLETED = 1, /* ActivityTaskCompleted: result set */
  DBX_ACT_FAILED,        /* ActivityTaskFailed: failure_type/message set */
  DBX_ACT_TIMED_OUT,     /* ActivityTaskTimedOut */
  DBX_ACT_CANCELED       /* ActivityTaskCanceled */
} dbx_act_status;

typedef struct {
  dbx_act_status status;
  const char *result_json;   /* COMPLETED: JSON text (borrowed, NUL-terminated), "null" if none */
  size_t result_len;
  const char *failure_type;  /* FAILED: ApplicationFailureInfo.type ("" if none) */
  const char *failure_message;
  int non_retryable;
  int attempts;              /* ActivityTaskStarted.attempt (0 if never started) */
} dbx_act_outcome;

/* Retry classes (docs/architecture.md "Promises and where they live"). */
typedef enum { DBX_SAFE_TO_RETRY = 0, DBX_AT_MOST_ONCE = 1 } dbx_retry_class;

typedef struct {
  const char *task_queue;          /* NULL = the workflow's */
  int64_t start_to_close_ms;       /* 0 = schedule_to_close_ms */
  int64_t schedule_to_close_ms;    /* 0 = unlimited */
  int64_t heartbeat_ms;            /* 0 = none */
  dbx_retry_class retry_class;     /* AT_MOST_ONCE sends maximum_attempts = 1 */
  int32_t maximum_attempts;        /* SAFE_TO_RETRY: 0 = unlimited */
  int64_t initial_interval_ms;     /* 0 = 1000 */
  double backoff_coefficient;      /* 0 = 2.0; else >= 1 */
  int64_t maximum_interval_ms;     /* 0 = 100 x initial_interval_ms */
  const char *const *non_retryable_error_types; /* NULL-terminated, or NULL */
} dbx_activity_opts;

/* How a child workflow stands, as recorded in the parent's history
 * (Temporal: ChildWorkflowExecution*EventAttributes). */
typedef enum {
  DBX_CHILD_STARTED = 1,   /* ChildWorkflowExecutionStarted: run_id set; more outcomes follow */
  DBX_CHILD_START_FAILED,  /* StartChildWorkflowExecutionFailed: cause set (1 = WORKFLOW_ALREADY_EXISTS) */
  DBX_CHILD_COMPLETED,     /* ChildWorkflowExecutionCompleted: result_json set */
  DBX_CHILD_FAILED,        /* ChildWorkflowExecutionFailed: failure_type/message set */
  DBX_CHILD_CANCELED,      /* ChildWorkflowExecutionCanceled */
  DBX_CHILD_TIMED_OUT,     /* ChildWorkflowExecutionTimedOut */
  DBX_CHILD_TERMINATED     /* ChildWorkflowExecutionTerminated */
} dbx_child_status;

typedef struct {
  dbx_child_status status;
  const char *workflow_id;     /* borrowed for the call */
  const char *run_id;          /* "" before STARTED / on START_FAILED */
  const char *result_json;     /* COMPLETED: JSON text, else "null" */
  size_t result_len;
  const char *failure_type;    /* FAILED: ApplicationFailureInfo.type ("" if none) */
  const char *failure_message; /* FAILED: the failure's message ("" if none) */
  int cause;                   /* START_FAILED: Temporal's StartChildWorkflowExecutionFailedCause */
} dbx_child_outcome;

/* Temporal's ParentClosePolicy values. */
typedef enum {
  DBX_PARENT_CLOSE_DEFAULT = 0,   /* the service's default (TERMINATE) */
  DBX_PARENT_CLOSE_TERMINATE = 1,
  DBX_PARENT_CLOSE_ABANDON = 2,
  DBX_PARENT_CLOSE_REQUEST_CANCEL = 3
} dbx_parent_close_policy;

typedef struct {
  const char *workflow_id;             /* NULL = "<parent workflow id>-child-<seq>" */
  const char *task_queue;              /* NULL = the parent's */
  int64_t execution_timeout_ms;        /* 0 = unlimited */
  int64_t run_timeout_ms;              /* 0 = unlimited */
  int64_t task_timeout_ms;             /* 0 = the service's default (10 s) */
  dbx_parent_close_policy parent_close_policy;
  /* retry policy; maximum_attempts 0 and no other field = no retry policy sent */
  int32_t maximum_attempts;            /* 0 = unlimited (when a policy is sent) */
  int64_t initial_interval_ms;         /* 0 = 1000 */
  double backoff_coefficient;          /* 0 = 2.0 */
  int64_t maximum_interval_ms;         /* 0 = 100 x initial_interval_ms */
} dbx_child_opts;

typedef struct {
  const char *workflow_type;           /* NULL = this run's type */
  const char *task_queue;              /* NULL = this run's */
  int64_t run_timeout_ms;              /* 0 = this run's */
  int64_t task_timeout_ms;             /* 0 = this run's */
} dbx_continue_opts;

/* A signal handler by name (see dbx_workflow_type.signals). name and json are
 * borrowed for the call. description: shown by __temporal_workflow_metadata. */
typedef struct {
  const char *name;
  void (*fn)(void *state, dbx_wf *wf, const char *json, size_t len);
  const char *description;
} dbx_wf_signal_def;

/* A query handler by name: args_json (borrowed; "null" when none) is the
 * query's first argument. Return malloc'd JSON, or NULL to fail the query.
 * Must not issue commands or change state (it gets no dbx_wf). */
typedef struct {
  const char *name;
  char *(*fn)(void *state, const char *args_json, size_t len);
  const char *description;
} dbx_wf_query_def;

/* Added: an update handler by name (Temporal: workflow updates; see
 * dbx_workflow_type.updates). An update request arrives in a workflow task
 * (a protocol message); after the activation's other callbacks (activity
 * outcomes, timers, signals, ...) it is validated, then accepted or rejected:
 *  - validate (may be NULL = accept all): runs only when the request is new,
 *    never on replay; it gets no dbx_wf and must not change state. Return
 *    NULL to accept, or a malloc'd message to reject (the caller gets an
 *    ApplicationFailure of type "ValidationError" with that message; nothing
 *    is written to history).
 *  - fn runs once, at acceptance (WorkflowExecutionUpdateAccepted), with the
 *    update's handle and its first argument (JSON, borrowed; "null" when
 *    none). It may issue commands like a signal handler. The update stays
 *    open until the code calls dbx_wf_update_complete or dbx_wf_update_fail
 *    with the handle, in this callback or any later one (after an activity,
 *    a timer, ...): keep the handle in the state.
 * On replay the handler runs again in the activation of the workflow task
 * whose completion recorded the Accepted event (with the request recorded
 * there), at the same place, so handles and commands repeat exactly. A
 * request whose name has no entry is rejected ("UnknownUpdate"). */
typedef struct {
  const char *name;
  char *(*validate)(void *state, const char *args_json, size_t len);
  void (*fn)(void *state, dbx_wf *wf, int64_t update, const char *args_json, size_t len);
  const char *description;
} dbx_wf_update_def;

typedef struct {
  const char *name;                /* workflow type name, e.g. "durabox.Script" */
  /* Create the state from the input JSON (borrowed). May issue commands.
   * Return NULL only after dbx_wf_fail() or dbx_wf_out_of_memory(). */
  void *(*create)(dbx_wf *wf, const char *input_json, size_t len);
  /* An activity this code scheduled has an outcome (borrowed for the call). */
  void (*on_activity)(void *state, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o);
  /* A timer this code started fired. */
  void (*on_timer)(void *state, dbx_wf *wf, int64_t seq);
  /* A signal arrived (name and JSON input borrowed). NULL = ignore signals. */
  void (*on_signal)(void *state, dbx_wf *wf, const char *name, const char *json, size_t len);
  /* Cancellation was requested. NULL = complete as canceled at once. */
  void (*on_cancel)(void *state, dbx_wf *wf);
  /* Answer a query: return malloc'd JSON, or NULL (unknown query). May be NULL. */
  char *(*on_query)(void *state, const char *name);
  void (*destroy)(void *state);
  /* ---- added (compatible: an initializer that stops above leaves these NULL) */
  /* A child this code started (dbx_wf_start_child) has news; borrowed for the call. */
  void (*on_child)(void *state, dbx_wf *wf, int64_t seq, const dbx_child_outcome *o);
  /* A dbx_wf_signal_external / dbx_wf_cancel_child request was delivered
   * (failed = 0: ExternalWorkflowExecutionSignaled / ...CancelRequested) or
   * refused (failed = 1: ...Failed, e.g. no such workflow). */
  void (*on_external)(void *state, dbx_wf *wf, int64_t seq, int failed);
  /* A dbx_wf_await_signal wait ended: with the signal's input (borrowed) or,
   * timed_out = 1, by its timer (json "null"). */
  void (*on_signal_wait)(void *state, dbx_wf *wf, int64_t seq, const char *json, size_t len,
                         int timed_out);
  /* Per-name handlers, ended by an entry with name NULL; NULL = none. A signal
   * goes to its named handler if any, else to on_signal. */
  const dbx_wf_signal_def *signals;
  /* Per-name query handlers, ended by name NULL; tried before on_query. */
  const dbx_wf_query_def *queries;
  /* Added: update handlers, ended by name NULL; NULL = none (every update is
   * rejected as unknown). */
  const dbx_wf_update_def *updates;
} dbx_workflow_type;

/* Commands (each returns a sequence number used as the activity/timer id:
 * "1", "2", ... in issue order, as Temporal's core SDKs do). input_json is
 * copied. Returns -1 after the workflow already completed or on OOM. */
int64_t dbx_wf_schedule_activity(dbx_wf *wf, const char *type, const char *input_json,
                                 const dbx_activity_opts *o);
int64_t dbx_wf_start_timer(dbx_wf *wf, int64_t duration_ms);
/* Added (compatible): ask the service to cancel activity seq (Temporal:
 * RequestCancelActivityTask). Its heartbeats then report cancel_requested and
 * on_activity later sees DBX_ACT_CANCELED (or its result, if it finished
 * first). Returns 0, or -1 (no command issued) when seq is not an activity
 * whose schedule history has already recorded (e.g. scheduled in this same
 * task), when its outcome is already in history (on_activity gets it in this
 * activation or got it before), or after the workflow completed. */
int dbx_wf_cancel_activity(dbx_wf *wf, int64_t seq);
/* Added: cancel timer seq (Temporal: CancelTimerCommandAttributes, event
 * TimerCanceled). A timer started in this same activation is not sent at
 * all; on_timer never runs for a cancelled timer. Returns 0, or -1 when seq is
 * not a pending timer of this code (unknown, fired, already cancelled, or a
 * dbx_wf_await_signal timer) or after the workflow completed. */
int dbx_wf_cancel_timer(dbx_wf *wf, int64_t seq);

/* Added: start a child workflow (Temporal: StartChildWorkflowExecution
 * CommandAttributes; matched on replay by StartChildWorkflowExecutionInitiated
 * with the same workflow id and type). type and input_json copied; o may be
 * NULL (all defaults). Outcomes arrive through on_child (STARTED, then one
 * final status; or START_FAILED). Returns the seq (shared with activities and
 * timers), or -1 (bad arguments, completed, OOM). */
int64_t dbx_wf_start_child(dbx_wf *wf, const char *type, const char *input_json,
                           const dbx_child_opts *o);
/* Added: ask the service to cancel child seq (Temporal: RequestCancelExternal
 * WorkflowExecutionCommandAttributes with child_workflow_only). The child's
 * final outcome still comes through on_child (CANCELED if it honours it); the
 * request's delivery comes through on_external with the returned seq.
 * Returns a new seq, or -1 when seq is not a child whose start history has
 * recorded and that has not ended, or after the workflow completed. */
int64_t dbx_wf_cancel_child(dbx_wf *wf, int64_t seq);
/* Added: signal another workflow (Temporal: SignalExternalWorkflowExecution
 * CommandAttributes). run_id NULL or "" = its current run. All strings copied.
 * Delivery through on_external. Returns the seq, or -1. */
int64_t dbx_wf_signal_external(dbx_wf *wf, const char *workflow_id, const char *run_id,
                               const char *signal_name, const char *input_json);

/* Added: markers (Temporal: RecordMarkerCommandAttributes, event
 * MarkerRecorded, matched on replay by marker name). The value is stored as
 * details["data"] (json/plain). When this task's history already holds the
 * marker (replay), the recorded value is returned and value_json ignored;
 * otherwise value_json is recorded and returned. name and value_json copied;
 * the result is owned by the run, valid until the callback returns. NULL on
 * bad arguments, after completion or OOM. Markers of one name are matched in
 * issue order within a workflow task. */
const char *dbx_wf_marker_record(dbx_wf *wf, const char *name, const char *value_json);
/* Added: a side effect: fn(ud) runs only when history does not hold its
 * result yet; its malloc'd JSON (NULL = "null") is recorded as a marker named
 * "SideEffect" with details "side-effect-id" (1, 2, ... per run) and "data",
 * as the Go SDK records it, and returned as dbx_wf_marker_record does. */
const char *dbx_wf_side_effect(dbx_wf *wf, char *(*fn)(void *ud), void *ud);
/* Added: versioning, the Go SDK's workflow.GetVersion: marker "Version" with
 * details "change-id" (JSON string) and "version" (JSON number), compatible
 * with how the Go SDK records it (its TemporalChangeVersion search attribute
 * is not upserted). First execution: records max_version and returns it.
 * Replay: returns the recorded version; when history has no marker for
 * change_id, returns DBX_WF_DEFAULT_VERSION (-1) and records nothing (code
 * that ran before the change). Later calls with the same change_id return the
 * same version without a new marker. A version outside [min, max] fails the
 * workflow (UnsupportedVersion) and returns it. */
#define DBX_WF_DEFAULT_VERSION (-1)
int64_t dbx_wf_get_version(dbx_wf *wf, const char *change_id, int64_t min_version,
                           int64_t max_version);

/* Added: wait for a signal named name (copied) for up to timeout_ms (0 = no
 * limit). A timer is started (StartTimer) unless timeout_ms is 0; the first
 * signal of that name that arrives after this call ends the wait (it is also
 * given to its handler / on_signal first) and cancels the timer (CancelTimer,
 * or the StartTimer is not sent when both happen in one activation); if the
 * timer fires first the wait ends timed out. Either way on_signal_wait gets the
 * returned seq. Deterministic on replay. Returns the seq, or -1. */
int64_t dbx_wf_await_signal(dbx_wf *wf, const char *name, int64_t timeout_ms);

/* Added: upsert search attributes (Temporal: UpsertWorkflowSearchAttributes
 * CommandAttributes) / memo (ModifyWorkflowPropertiesCommandAttributes.
 * upserted_memo): n keys with JSON values (each json/plain), all copied.
 * Matched on replay by kind. Returns 0, or -1 (bad arguments, completed, OOM). */
int dbx_wf_upsert_search_attributes(dbx_wf *wf, const char *const *keys,
                                    const char *const *values_json, size_t n);
int dbx_wf_upsert_memo(dbx_wf *wf, const char *const *keys, const char *const *values_json,
                       size_t n);

/* Added: end this run and start a new one of the same workflow id with
 * input_json (copied; NULL = null) (Temporal: ContinueAsNewWorkflowExecution
 * CommandAttributes, event WorkflowExecutionContinuedAsNew). o may be NULL. */
void dbx_wf_continue_as_new(dbx_wf *wf, const char *input_json, const dbx_continue_opts *o);
/* Added: of the workflow task being processed (its WorkflowTaskStarted event):
 * the history length in events (= that event's id, as Temporal SDKs report it),
 * the service's history size in bytes, and its suggest_continue_as_new. */
int64_t dbx_wf_history_length(const dbx_wf *wf);
int64_t dbx_wf_history_size_bytes(const dbx_wf *wf);
int dbx_wf_continue_as_new_suggested(const dbx_wf *wf);

/* Added: end the accepted update `update` (a handle given to its handler)
 * with a result (JSON copied; NULL = null) or a failure (ApplicationFailure
 * with type and message, copied; NULL = ""): the UpdateWorkflowExecution
 * caller gets it (event WorkflowExecutionUpdateCompleted, matched on replay
 * by update id). Complete updates before ending the run. Returns 0, or -1
 * (unknown handle, the update already ended, the run completed, OOM). */
int dbx_wf_update_complete(dbx_wf *wf, int64_t update, const char *result_json);
int dbx_wf_update_fail(dbx_wf *wf, int64_t update, const char *type, const char *message);
/* Added: the update id (Temporal: Meta.update_id) of handle update, borrowed
 * for the run's life; NULL for an unknown handle. */
const char *dbx_wf_update_id(const dbx_wf *wf, int64_t update);

/* End the run: result JSON copied (NULL = null). */
void dbx_wf_complete(dbx_wf *wf, const char *result_json);
void dbx_wf_fail(dbx_wf *wf, const char *type, const char *message);
void dbx_wf_cancel_done(dbx_wf *wf); /* CancelWorkflowExecution */
/* Added: the code itself ran out of memory (its own allocation failed): drop
 * this activation instead of deciding anything from it. Nothing of the task
 * is sent as a completion; the worker answers it RespondWorkflowTaskFailed
 * (WorkerError) and the service retries it, replaying from history. Prefer
 * it to dbx_wf_fail, which ends the run for good. Later calls on wf are
 * refused as after completion. */
void dbx_wf_out_of_memory(dbx_wf *wf);
/* Deterministic time: the WorkflowTaskStarted event time of the task being processed. */
int64_t dbx_wf_now_ms(const dbx_wf *wf);
const char *dbx_wf_workflow_id(const dbx_wf *wf);
const char *dbx_wf_run_id(const dbx_wf *wf);
int dbx_wf_is_replaying(const dbx_wf *wf);
/* Log from workflow code; suppressed while replaying. */
void dbx_wf_log(const dbx_wf *wf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------ activities */

typedef struct dbx_act dbx_act;

typedef struct {
  char *result_json;      /* on success: malloc'd JSON text (NULL = null) */
  char *failure_type;     /* on failure: malloc'd type naming the fault ("InvalidInput") */
  char *failure_message;  /* malloc'd */
  int non_retryable;      /* 1: no further attempts */
} dbx_act_result;

typedef struct {
  const char *name;                 /* "sandbox.exec" */
  dbx_retry_class retry_class;
  /* Run one attempt. input is borrowed JSON. Fill res; return DBX_OK for a
   * result or a failure written into res (failure_type set), or DBX_ECANCELED
   * when it stopped because dbx_act_cancelled() said so. */
  dbx_err (*run)(dbx_act *a, const char *input_json, size_t len, dbx_act_result *res, void *ud);
  void *ud;
} dbx_activity_type;

/* Record a heartbeat with details JSON (copied; NULL = none). Returns 1 if
 * cancellation was requested (stop and return DBX_ECANCELED), else 0. Cheap:
 * the worker throttles what it sends. */
int dbx_act_heartbeat(dbx_act *a, const char *details_json);
/* Details of the last heartbeat of a previous attempt (borrowed JSON), or NULL. */
const char *dbx_act_heartbeat_details(const dbx_act *a);
int dbx_act_cancelled(const dbx_act *a);
/* 1 when the cancellation is this worker stopping (SIGINT/SIGTERM), not a
 * cancel request, a timeout or lost heartbeats. Work that outlives the worker
 * (a supervised command) should then be left running and the activity return
 * DBX_ECANCELED: the worker reports a retryable WorkerShutdown failure and
 * the next attempt re-attaches. */
int dbx_act_worker_stopping(const dbx_act *a);
int32_t dbx_act_attempt(const dbx_act *a);
/* The class this attempt runs under: the stricter of its type's and the one
 * the workflow scheduled it with (an at_most_once step of a safe_to_retry
 * type is at_most_once). Work that cannot tell whether its effect already
 * happened must then fail OutcomeUnknown rather than do it again. */
dbx_retry_class dbx_act_retry_class(const dbx_act *a);
/* 1 when the cancellation is this attempt being out of date: its start-to-
 * close or heartbeat timeout passed, or the service no longer knows it. A
 * newer attempt may then be running the same work (on this worker or
 * another): work shared with it (a detached command) must only be stopped
 * under a fence (driver.h exec_cancel_as), never unconditionally. 0 for a
 * cancel request and for the worker stopping. */
int dbx_act_superseded(const dbx_act *a);
const char *dbx_act_workflow_id(const dbx_act *a);
const char *dbx_act_run_id(const dbx_act *a);
const char *dbx_act_activity_id(const dbx_act *a);
/* Remaining time before the start-to-close deadline, ms (INT64_MAX if none). */
int64_t dbx_act_remaining_ms(const dbx_act *a);

/* Parking: waiting without holding a thread. A worker runs activities on a
 * fixed pool of threads (dbx_worker_opts.activity_threads); an activity that
 * would block for long (a detached command, a timer) parks instead: from
 * run() or from a resume function it calls dbx_act_park and, when that
 * returns DBX_OK, returns at once (its return value and res are then ignored
 * for this step). The worker's reactor thread later calls resume(a, res, ctx)
 * on a pool thread, with the same a and res, when fd is readable (or hung up),
 * when wait_ms have passed, as soon as the attempt is cancelled
 * (dbx_act_cancelled: a cancel request, a timeout, the worker stopping), or
 * early, when a heartbeat the activity sent before is due again (every
 * <= 1 s), so the resume must heartbeat to keep cancel requests flowing. A
 * resume may come early for any of these reasons: it checks its own state and
 * parks again or finishes; it returns as run() does.
 * fd: borrowed, >= 0 to wait for POLLIN/POLLHUP, -1 for a pure timer; it must
 * stay open until resume runs (the worker stops watching it before then).
 * wait_ms: >= 0, milliseconds. ctx: owned by the activity (free it when it
 * finishes). One park per step; the activity runs on one thread at a time
 * (each step happens after the previous one), not always the same thread.
 * Returns DBX_OK (parked), DBX_EINVAL (bad arguments, parked twice in one
 * step), DBX_EUNSUPPORTED (the runner cannot park, as tests/act_fake.c:
 * wait on the calling thread instead). */
typedef dbx_err (*dbx_act_resume_fn)(dbx_act *a, dbx_act_result *res, void *ctx);
dbx_err dbx_act_park(dbx_act *a, int fd, int64_t wait_ms, dbx_act_resume_fn resume, void *ctx);

#endif
