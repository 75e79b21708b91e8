/* worker/replay: drive a workflow type (worker/api.h) from its history and
 * turn what it asks for into Temporal commands, checking determinism.
 *
 * A dbx_wf_run is one run's cached state: the workflow code's state object,
 * the id of the last history event applied, the commands issued and not yet
 * matched by a recorded command event, and the maps from scheduled/started
 * event ids to the code's sequence numbers. Applying a batch of events only
 * processes events with a larger id than the last applied (so a full history
 * may be passed to a cached run). Workflow code runs at each workflow task
 * that history shows as completed, and at the task being processed.
 *
 * Matching (Temporal sdk-core's rule): every command event in history
 * (ActivityTaskScheduled, TimerStarted, TimerCanceled, ActivityTaskCancel
 * Requested, MarkerRecorded, StartChildWorkflowExecutionInitiated,
 * SignalExternal/RequestCancelExternalWorkflowExecutionInitiated,
 * UpsertWorkflowSearchAttributes, WorkflowPropertiesModified,
 * WorkflowExecutionUpdateAccepted/Completed (update id),
 * WorkflowExecutionCompleted/Failed/Canceled/ContinuedAsNew) pops the oldest
 * unmatched command, which must be of the same kind and identity (activity
 * id AND type; timer id; marker name; child workflow id AND type; target
 * workflow id, and signal name). Markers a replayed task recorded are read
 * ahead (before its command events are applied) so dbx_wf_marker_record and
 * dbx_wf_get_version return the recorded values. A mismatch, a command
 * event with no command, or a command left unmatched after its task was
 * recorded as completed is non-determinism: the run is then unusable and
 * dbx_wf_run_error() names the event id, the recorded command and the new one.
 *
 * Thread safety: a run is used by one thread at a time. */
#ifndef DBX_WORKER_REPLAY_H
#define DBX_WORKER_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "protos/pb.h"
#include "worker/api.h"

/* Activity header field naming the retry class a workflow scheduled the
 * activity with; value: the JSON string "at_most_once" (absent = the activity
 * type's own class). Set by dbx_wf_schedule_activity, read by the executor. */
#define DBX_RETRY_CLASS_HEADER "durabox-retry-class"

typedef struct dbx_wf dbx_wf_run;

/* t is borrowed (must outlive the run); ids copied. *out: free with
 * dbx_wf_run_destroy. Returns DBX_OK, DBX_ENOMEM, DBX_EINVAL. */
dbx_err dbx_wf_run_create(const dbx_workflow_type *t, const char *workflow_id, const char *run_id,
                          dbx_wf_run **out);
void dbx_wf_run_destroy(dbx_wf_run *r); /* accepts NULL */

/* Apply events (borrowed for the call; ids contiguous, oldest first).
 * started_event_id: the WorkflowTaskStarted of the task being processed
 * (its activation is not "replaying"); 0 = none (offline replay or a query):
 * then a trailing WorkflowTaskStarted is activated as the current task.
 * Returns DBX_OK; DBX_ESTATE on non-determinism (message in dbx_wf_run_error,
 * failing event in dbx_wf_run_error_event); DBX_EINVAL for a history that is
 * not contiguous with what was applied (drop the cache and replay), or with
 * an event whose attributes are not those of its event_type; DBX_ENOMEM
 * (an allocation failed, also one the workflow code's command asked for: the
 * run is then partly applied and every later call returns DBX_ENOMEM again;
 * destroy it and replay, never send its commands). */
dbx_err dbx_wf_run_apply(dbx_wf_run *r, HistoryEvent *const *events, size_t n,
                         int64_t started_event_id);
int64_t dbx_wf_run_last_event_id(const dbx_wf_run *r);
const char *dbx_wf_run_error(const dbx_wf_run *r);     /* "" when none; run's life */
int64_t dbx_wf_run_error_event(const dbx_wf_run *r);   /* 0 when none */
/* Added (updates): the protocol messages of the workflow task being
 * processed (PollWorkflowTaskQueueResponse.messages), borrowed until the next
 * dbx_wf_run_apply returns; its current (not replayed) activation handles
 * the update requests among them. n = 0 / msgs NULL: none. */
void dbx_wf_run_set_messages(dbx_wf_run *r, ProtocolMessage *const *msgs, size_t n);
/* Added: the protocol messages to send with the commands
 * (RespondWorkflowTaskCompletedRequest.messages): the rejections of the
 * last activation, then the acceptances and responses the unsent
 * PROTOCOL_MESSAGE commands name. *out: malloc'd array of unpacked messages;
 * free with dbx_wf_run_messages_free. DBX_OK or DBX_ENOMEM. */
dbx_err dbx_wf_run_messages(const dbx_wf_run *r, ProtocolMessage ***out, size_t *n);
void dbx_wf_run_messages_free(ProtocolMessage **m, size_t n);
/* Commands issued and not yet matched by history: the ones to send.
 * *out: malloc'd array of unpacked Commands; free with dbx_wf_run_commands_free. */
dbx_err dbx_wf_run_commands(const dbx_wf_run *r, Command ***out, size_t *n);
void dbx_wf_run_commands_free(Command **cmds, size_t n);
size_t dbx_wf_run_commands_matched(const dbx_wf_run *r);
/* 1 once the code completed, failed or canceled the run. */
int dbx_wf_run_closed(const dbx_wf_run *r);
/* Answer a query through on_query: DBX_OK with *json malloc'd, DBX_ENOTFOUND
 * (unknown query or no on_query), DBX_ESTATE (no state: create failed). */
dbx_err dbx_wf_run_query(dbx_wf_run *r, const char *name, char **json);
/* Added: the same with the query's argument (args_json borrowed, NULL =
 * "null"), tried in order: Temporal's built-ins "__stack_trace" (a JSON
 * string: the pending activities, timers, children and awaited signals) and
 * "__temporal_workflow_metadata" (WorkflowMetadata as JSON: definition.type,
 * queryDefinitions, signalDefinitions, updateDefinitions, currentDetails),
 * then the type's queries table, then on_query. Also DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_wf_run_query_args(dbx_wf_run *r, const char *name, const char *args_json,
                              size_t args_len, char **json);

/* Offline replay of a recorded history (pure: no I/O). */
typedef struct {
  int deterministic;          /* 1 when every command matched */
  size_t events;              /* events applied */
  size_t commands_matched;    /* command events matched */
  int64_t event_id;           /* non-determinism: the event id, else 0 */
  char message[512];          /* non-determinism or error text, else "" */
} dbx_replay_report;

/* Replay events through a fresh state of t. Returns DBX_OK (see
 * out->deterministic), DBX_EINVAL (bad arguments or non-contiguous history),
 * DBX_ENOMEM. */
dbx_err dbx_replay_run(const dbx_workflow_type *t, HistoryEvent *const *events, size_t n,
                       dbx_replay_report *out);

#endif
