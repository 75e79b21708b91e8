/* worker/api.h: the contract between the worker and the code it runs.
 *
 * Workflow types (workflows/) are deterministic C state machines driven by
 * history: the worker creates a state object from the workflow input, then
 * feeds it the outcomes recorded in history (activity results, timers,
 * signals, cancellation) in history order; the code answers by issuing
 * commands through its dbx_wf context. On a cache miss the worker replays the
 * whole history through a fresh state object and checks that every command
 * the code issues matches the recorded command event (activity id and type,
 * timer id); a mismatch fails the workflow task with NON_DETERMINISTIC_ERROR
 * (Temporal: RespondWorkflowTaskFailedRequest, cause 24) naming the event id,
 * the recorded type and the new type.
 * Rules for workflow code: no clocks (use dbx_wf_now_ms), no randomness, no
 * I/O, no globals; its only inputs are the workflow input and the callbacks.
 *
 * Activity types (activities/) do the side effects. Each execution gets its
 * own dbx_act context on a worker thread; they may block. Payloads are
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

/* Retry classes (DESIGN.md "Retry classes"). */
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

typedef struct {
  const char *name;                /* workflow type name, e.g. "durabox.Script" */
  /* Create the state from the input JSON (borrowed). May issue commands.
   * Return NULL only after dbx_wf_fail(). */
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
/* End the run: result JSON copied (NULL = null). */
void dbx_wf_complete(dbx_wf *wf, const char *result_json);
void dbx_wf_fail(dbx_wf *wf, const char *type, const char *message);
void dbx_wf_cancel_done(dbx_wf *wf); /* CancelWorkflowExecution */
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
const char *dbx_act_workflow_id(const dbx_act *a);
const char *dbx_act_run_id(const dbx_act *a);
const char *dbx_act_activity_id(const dbx_act *a);
/* Remaining time before the start-to-close deadline, ms (INT64_MAX if none). */
int64_t dbx_act_remaining_ms(const dbx_act *a);

#endif
