/* The one internal header of service/: the engine's jobs, the batch context
 * handlers run in, and the history/state helpers they share. Every name that
 * crosses files inside service/ is declared here and carries the svc_ prefix
 * (docs/style.md "Names"). Not a public contract: nothing outside
 * service/ includes it (tests/check_rooms.sh), except the white-box unit tests
 * tests/test_svc_state.c and tests/test_svc_oom.c.
 *
 * Every handler runs on the engine thread inside one write transaction shared
 * by a batch of jobs (group commit), each job in its own nested transaction so
 * a failing job leaves nothing behind. A handler may run twice (the store
 * reruns a batch after growing its map), so handlers keep every effect in the
 * transaction or in their job's outputs, which are reset before each run, and
 * in-memory effects happen after commit (engine.c: apply_after_commit). */
#ifndef DBX_SERVICE_SVC_H
#define DBX_SERVICE_SVC_H

#include <pthread.h>
#include <stdint.h>

#include "base/alloc.h"
#include "base/err.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "protos/pb.h"
#include "service/service.h"
#include "service/visquery.h"
#include "store/store.h"

/* Kinds of TimerRecord. */
enum {
  TK_USER_TIMER = 1,
  TK_ACTIVITY_RETRY = 2,        /* backoff over: queue the next attempt */
  TK_ACTIVITY_SCHEDULE_TO_START = 3,
  TK_ACTIVITY_START_TO_CLOSE = 4,
  TK_ACTIVITY_HEARTBEAT = 5,
  TK_ACTIVITY_SCHEDULE_TO_CLOSE = 6,
  TK_WFT_START_TO_CLOSE = 7,
  TK_WORKFLOW_RUN_TIMEOUT = 8,
  TK_WORKFLOW_EXECUTION_TIMEOUT = 9,
  TK_WFT_RETRY = 10,            /* a failing workflow task's backoff is over */
  TK_WFT_STICKY_SCHEDULE_TO_START = 11, /* a task on a sticky queue was not taken in time */
  TK_SCHEDULE = 20,             /* a schedule's next action (schedule.c); workflow_id = its id */
};

enum { TASK_WORKFLOW = 1, TASK_ACTIVITY = 2, TASK_QUERY = 3 };
enum { PARK_NONE = 0, PARK_POLL, PARK_HISTORY, PARK_QUERY };

typedef struct job job;
struct job {
  dbx_rpc_call *call;           /* NULL for internal jobs (timers) */
  const char *method;
  /* outputs of the last run, reset before each run */
  int status;                   /* gRPC status; DBX_GRPC_OK = reply */
  char *message;
  uint8_t *details;
  size_t details_len;
  uint8_t *reply;
  size_t reply_len;
  int keep_writes;              /* 1: what the job wrote stays although status is an error */
  int park;                     /* PARK_*: answer later */
  char *park_key;               /* queue key (PARK_POLL) or run key (PARK_HISTORY) */
  size_t park_key_len;
  int64_t park_deadline_ns;     /* monotonic; when the empty answer is due */
  uint64_t query_id;            /* PARK_QUERY: the query this call waits for */
  /* The task this reply hands out: a packed TaskToken naming it (for an
   * activity, started_event_id holds the attempt's start time, ns). When
   * gRPC reports the reply undelivered, the engine runs an internal
   * "TaskUndelivered" job carrying it (call NULL) that gives the task back:
   * svc_h_task_undelivered. */
  uint8_t *handoff;
  size_t handoff_len;
  job *next;
};

typedef struct query query;
struct query {                  /* a QueryWorkflow waiting for a worker (memory only) */
  uint64_t id;
  char *ns, *workflow_id, *run_id, *task_queue;
  uint8_t *query;               /* packed WorkflowQuery */
  size_t query_len;
  int dispatched;
  uint64_t claim_epoch;         /* claimed by a poll in this batch run */
  job *waiter;                  /* the parked QueryWorkflow call */
  int64_t deadline_ns;          /* monotonic */
  query *next;
};

typedef struct note note;       /* something to do once the batch committed */
struct note {
  int kind;                     /* NOTE_TASK, NOTE_QUEUE, NOTE_RUN, NOTE_QUERY_ANSWER, NOTE_QUERY_NEW */
  char *key;
  uint64_t query_id;
  int status;
  uint8_t *bytes;
  size_t len;
  char *message;
  query *q;                     /* NOTE_QUERY_NEW */
  int consumed;                 /* NOTE_TASK: a parked poller took it on inside the batch */
  int waiters_joined;                /* NOTE_RUN: waiters parked before the batch joined it */
  note *next;
};
/* NOTE_TASK: one task enqueued, wakes one parked poller of its queue;
 * NOTE_QUEUE: wakes every parked poller of the queue (queries waiting). */
/* NOTE_POLLER: a poll arrived (key: queue key, len; message: identity), for
 * DescribeTaskQueue's pollers. */
enum { NOTE_TASK = 1, NOTE_RUN, NOTE_QUERY_ANSWER, NOTE_QUERY_NEW, NOTE_QUERY_DISPATCHED, NOTE_QUEUE, NOTE_POLLER };

typedef struct {
  char *name;
  char *id;
} ns_entry;

typedef struct {                /* a poller seen lately (memory only; DescribeTaskQueue) */
  char *key;                    /* queue key (svc_queue_key) */
  size_t key_len;
  char *identity;
  int64_t last_ns;              /* wall clock of its latest poll */
} poller_seen;

struct dbx_service {
  dbx_service_opts opts;
  char *db_path;
  int tmp_db;
  int lock_fd;                  /* flock on <db>/service.lock: one service per store */
  dbx_store *store;
  dbx_table t_runs, t_execs, t_history, t_tasks, t_timers, t_meta, t_requests;
  dbx_rpc_server *rpc;
  ns_entry *namespaces;
  size_t n_namespaces;
  dbx_history_limits limits;
  int64_t long_poll_ms;

  pthread_t thread;
  pthread_mutex_t mu;           /* guards incoming, stopping, wake */
  pthread_cond_t cond;
  job *incoming, *incoming_tail;
  int stopping;
  int wake;
  int test_hold;                /* dbx_service_test_hold */
  long test_alloc_fail_at;      /* dbx_service_test_alloc_fail_at, taken by the next batch */
  int test_alloc_failed, test_alloc_done;
  long storage_errors;          /* dbx_service_test_storage_errors */

  /* engine-thread only */
  job *parked;
  query *queries;
  uint64_t next_query_id;
  uint64_t epoch;
  int64_t next_timer_wall_ns;   /* earliest durable timer, INT64_MAX if none known */
  /* After a batch that fired timers failed (a full store, a name that does
   * not fit a key): no timer fires before this wall time, and the pause
   * doubles from 1 s to 10 s while they keep failing (0 after a success). */
  int64_t timers_held_until_wall_ns;
  int64_t timers_backoff_ns;
  int64_t started_wall_ns;      /* this process's start: no heartbeat could arrive before it */
  dbx_visq_sa_def *start_sa;    /* opts.search_attributes, parsed (names owned) */
  size_t n_start_sa;
  poller_seen *pollers;         /* queue pollers seen in the last 5 minutes */
  size_t n_pollers;
};

/* The context of one batch run. */
typedef struct {
  dbx_service *svc;
  dbx_txn *txn;
  int64_t now_ns;               /* wall clock at batch start */
  note *notes;                  /* reset per run */
  uint64_t epoch;
  uint64_t seq_next;            /* counters for keys, loaded lazily per run */
  int seq_loaded;
} ectx;

/* ---- job outputs (handlers.c) ---- */
void svc_job_fail(job *j, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void svc_job_fail_detail(job *j, int status, const ProtobufCMessage *detail, const char *type_url,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int svc_job_reply(job *j, const ProtobufCMessage *m); /* packs; 0 or -1 (OOM) */
/* Like job_reply, then appends field `field` (length-delimited) holding body:
 * a submessage encoded elsewhere (protobuf accepts fields in any order). */
int svc_job_reply_field(job *j, const ProtobufCMessage *m, uint32_t field, const uint8_t *body, size_t body_len);
void svc_job_reset(job *j);
/* Run one RPC job in ctx (handlers.c). Returns DBX_OK, or a store error that
 * aborts the whole batch (DBX_ESTOREFULL, DBX_ESTORE). */
dbx_err svc_handle_rpc(ectx *c, job *j);
/* Time out the run's started workflow task now, as its start-to-close
 * timer would (WorkflowTaskTimedOut, buffered events, the next attempt);
 * the caller saves rs. */
dbx_err svc_wft_time_out(ectx *c, RunState *rs);
/* Fire due durable timers (timers.c), earliest first: up to max of them,
 * and none after budget_ns (monotonic) have passed since the first; the
 * rest stay due for the next batch. Returns the count fired, or <0 with
 * *err set (the store's error). */
int svc_fire_due_timers(ectx *c, int max, int64_t budget_ns, dbx_err *err);

/* ---- RPC handlers, one file per family (see handlers.c). Each runs one
 * job in ctx: sets the job's reply or gRPC status; returns DBX_OK, or a store
 * error that aborts the batch. */
dbx_err svc_h_activity_canceled(ectx *c, job *j);
dbx_err svc_h_activity_canceled_by_id(ectx *c, job *j);
dbx_err svc_h_activity_completed_by_id(ectx *c, job *j);
dbx_err svc_h_activity_failed_by_id(ectx *c, job *j);
dbx_err svc_h_heartbeat_by_id(ectx *c, job *j);
dbx_err svc_h_activity_completed(ectx *c, job *j);
dbx_err svc_h_activity_failed(ectx *c, job *j);
dbx_err svc_h_count(ectx *c, job *j);
dbx_err svc_h_delete(ectx *c, job *j);
dbx_err svc_h_describe_task_queue(ectx *c, job *j);
dbx_err svc_h_describe_execution(ectx *c, job *j);
dbx_err svc_h_get_history(ectx *c, job *j);
dbx_err svc_h_get_history_reverse(ectx *c, job *j);
dbx_err svc_h_heartbeat(ectx *c, job *j);
dbx_err svc_h_list(ectx *c, job *j);
dbx_err svc_h_poll_activity(ectx *c, job *j);
dbx_err svc_h_poll_workflow(ectx *c, job *j);
dbx_err svc_h_query(ectx *c, job *j);
dbx_err svc_h_request_cancel(ectx *c, job *j);
dbx_err svc_h_reset(ectx *c, job *j);
dbx_err svc_h_respond_query(ectx *c, job *j);
dbx_err svc_h_signal(ectx *c, job *j);
dbx_err svc_h_signal_with_start(ectx *c, job *j);
dbx_err svc_h_start(ectx *c, job *j);
dbx_err svc_h_terminate(ectx *c, job *j);
dbx_err svc_h_wft_completed(ectx *c, job *j);
dbx_err svc_h_wft_failed(ectx *c, job *j);
/* ---- payload limits (limits.c) ---- */
/* 1 when the packed size of m (a payload blob; NULL = none) is over
 * limit.blobSize.error, logged with what and wfid; over limit.blobSize.warn
 * it is logged and 0 returned. */
int svc_blob_over(ectx *c, const ProtobufCMessage *m, const char *what, const char *wfid);
int svc_blob_size_over(ectx *c, int64_t size, const char *what, const char *wfid); /* the same for a size */
#define BLOB_REFUSED_MSG "Blob data size exceeds limit."
/* limit.blobSize.warn in bytes (the budget a replaced failure's cause keeps). */
int64_t svc_blob_warn_bytes(ectx *c);
/* Temporal's server failure: message, source "Server", ServerFailureInfo
 * {non_retryable: true}; with cause, a copy of it cut to cause_budget bytes
 * (svc_failure_truncated). malloc'd (free with
 * protobuf_c_message_free_unpacked); NULL on OOM (marked). */
Failure *svc_server_failure_new(const char *message, const Failure *cause, int64_t cause_budget);
/* A copy of f that fits about budget bytes, as Temporal cuts an oversized
 * failure: its kind, non-retryable flag and application type stay; its
 * causes, encoded attributes and application details go; source, message
 * and stack trace are cut at UTF-8 boundaries, in that order. NULL on OOM. */
Failure *svc_failure_truncated(const Failure *f, int64_t budget);
/* Temporal's messages for what an oversized worker response becomes. */
#define FAILURE_TOO_BIG_MSG "Failure exceeds size limit."
#define HEARTBEAT_TOO_BIG_MSG "Heartbeat details exceed size limit."
#define CANCEL_TOO_BIG_MSG "Cancel details exceed size limit."
#define RESULT_TOO_BIG_MSG "Complete result exceeds size limit."

/* ---- sticky execution (sticky.c; the handlers in matching.c) ---- */
/* 1 when the sticky queue (ns, name) has a worker: a poll parked on it now,
 * or one that arrived in the last 10 s (Temporal's window). */
int svc_sticky_available(ectx *c, const char *ns, const char *name);
/* Forget the run's sticky queue (a failed or timed out workflow task,
 * ResetStickyTaskQueue, a completion without sticky_attributes). Returns 1
 * when one was set. */
int svc_sticky_clear(RunState *rs);
/* The sticky schedule-to-start timer of the scheduled task event_id fired:
 * WorkflowTaskTimedOut (SCHEDULE_TO_START), stickiness cleared, the task
 * scheduled again on the normal queue. The caller saves rs. *changed = 1
 * when it acted. */
dbx_err svc_sticky_timed_out(ectx *c, RunState *rs, int64_t event_id, int32_t attempt, int *changed);
dbx_err svc_h_reset_sticky(ectx *c, job *j); /* ResetStickyTaskQueue */
dbx_err svc_h_shutdown_worker(ectx *c, job *j); /* ShutdownWorker: its sticky queue's tasks move */
/* After commit (engine thread): a poll of queue key from identity at now_ns
 * (NOTE_POLLER). Best effort: an entry that cannot be allocated is skipped. */
void svc_pollers_note(dbx_service *s, const char *key, size_t key_len, const char *identity, int64_t now_ns);
void svc_pollers_free(dbx_service *s);
/* Internal (call NULL): a poll reply carrying the task j->handoff was not
 * delivered; put the task back for the next poller (matching.c). */
dbx_err svc_h_task_undelivered(ectx *c, job *j);
#define SVC_METHOD_TASK_UNDELIVERED "TaskUndelivered"
/* Record in j->handoff the task a poll reply hands out (see job). 0, or -1 on OOM (marked). */
int svc_job_set_handoff(job *j, int kind, const RunState *rs, int64_t scheduled_event_id, int64_t started,
                        int32_t attempt);

#define NS_NOT_FOUND_URL "type.googleapis.com/temporal.api.errordetails.v1.NamespaceNotFoundFailure"
#define NOT_FOUND_URL "type.googleapis.com/temporal.api.errordetails.v1.NotFoundFailure"
#define ALREADY_STARTED_URL \
  "type.googleapis.com/temporal.api.errordetails.v1.WorkflowExecutionAlreadyStartedFailure"
#define QUERY_FAILED_URL "type.googleapis.com/temporal.api.errordetails.v1.QueryFailedFailure"
#define MAX_ID_BYTES 1000
/* The store's keys (store/store.h: at most 511 bytes) are made of a
 * namespace and a workflow id or a task queue name; the longest, a run's
 * (namespace \0 workflow id \0 run id, a 36-byte UUID), adds 38 bytes to
 * the two. So a namespace and a workflow id or task queue name are together
 * at most 473 bytes here, where Temporal takes each up to 1,000
 * (docs/compatibility.md). */
#define MAX_KEYED_BYTES 473
/* Longest timeout, delay or interval a request may ask for: 100 years, so a
 * clock reading in ns plus any of them in ns stays far inside int64. */
#define MAX_TIMEOUT_MS (100LL * 365 * 24 * 3600 * 1000)
#define HISTORY_PAGE_BYTES (4u << 20)

/* ---- request checks (check.c); each sets the job's status on refusal */
/* Decode the job's request as d, checking every string is UTF-8. NULL = refused. */
void *svc_decode(job *j, const ProtobufCMessageDescriptor *d);
int svc_check_ns(ectx *c, job *j, const char *ns);         /* 1 = known namespace */
int svc_check_id(job *j, const char *what, const char *v); /* 1 = present, not too long */
/* 1 when namespace ns and name (a workflow id or task queue name) with extra
 * bytes more (a schedule's suffix) fit MAX_KEYED_BYTES. */
int svc_keyed_fits(const char *ns, const char *name, size_t extra);
/* svc_check_id, and v with the namespace fits the store's keys
 * (svc_keyed_fits); INVALID_ARGUMENT naming both otherwise. */
int svc_check_keyed(job *j, const char *what, const char *ns, const char *v, size_t extra);
/* NOT_FOUND with NotFoundFailure; fmt takes two strings. */
void svc_fail_not_found(job *j, const char *fmt, const char *a, const char *b);
/* Resolve (ns, execution) to a loaded run; run_id "" = current run. *out NULL
 * when refused (status set). */
dbx_err svc_load_execution(ectx *c, job *j, const char *ns, const WorkflowExecution *we, RunState **out);
/* The token of kind, or NULL (INVALID_ARGUMENT set). Free with protobuf_c_message_free_unpacked. */
TaskToken *svc_token_decode(job *j, ProtobufCBinaryData tok, int kind);

/* ---- history page tokens (history_read.c): 16 bytes, next event id + last id */
void svc_page_token_make(uint8_t out[16], int64_t from, int64_t upto);

/* ---- notes (engine.c) ---- */
void svc_note_add(ectx *c, int kind, const char *key);
note *svc_note_new(ectx *c, int kind);

/* ---- state helpers (state.c) ---- */
/* Run key: namespace \0 workflow id \0 run id. Returns malloc'd key and length. */
char *svc_run_key(const char *ns, const char *wfid, const char *run_id, size_t *len);
char *svc_exec_key(const char *ns, const char *wfid, size_t *len);
/* Task queue key prefix: namespace \0 queue \0 kind. */
char *svc_queue_key(const char *ns, const char *tq, int kind, size_t *len);

uint64_t svc_next_seq(ectx *c);
/* Store the sequence counter if this batch run used it (engine.c, at commit). */
dbx_err svc_seq_save(ectx *c);

/* Load a run's state: DBX_OK, DBX_ENOTFOUND. *out: free with svc_runstate_free. */
dbx_err svc_run_load(ectx *c, const char *ns, const char *wfid, const char *run_id, RunState **out);
/* Current run id of a workflow id: DBX_OK (malloc'd *out) or DBX_ENOTFOUND. */
dbx_err svc_current_run_id(ectx *c, const char *ns, const char *wfid, char **out);
dbx_err svc_run_save(ectx *c, RunState *rs);
void svc_runstate_free(RunState *rs);
RunState *svc_runstate_new(void);

/* Append an event to the run's history (assigns event id and time; packs and
 * stores it; counts size) and apply it to rs (svc_state_apply_event). ev's
 * event_id/event_time are set here. If the run has a started workflow task
 * and buffer != 0, the event is held in rs->buffered_events instead (ids
 * assigned when flushed) and applied to rs at once. */
dbx_err svc_event_append(ectx *c, RunState *rs, HistoryEvent *ev, int buffer);
/* Write ev like svc_event_append without buffering and without applying it
 * to rs (reset copies a prefix, then folds it: svc_state_fold). */
dbx_err svc_event_copy(ectx *c, RunState *rs, HistoryEvent *ev);
/* Write buffered events (after a workflow task ended). Returns count or error. */
dbx_err svc_events_flush_buffer(ectx *c, RunState *rs, int *flushed);
/* Load events [from, to) (to 0 = all) of a run; *out array of unpacked events. */
dbx_err svc_events_load(ectx *c, uint64_t run_seq, int64_t from, int64_t to, HistoryEvent ***out,
                    size_t *n, size_t max_bytes);
void svc_events_free(HistoryEvent **evs, size_t n);
dbx_err svc_event_load_one(ectx *c, uint64_t run_seq, int64_t id, HistoryEvent **out);

/* Protobuf varint of v into out (at most 10 bytes); returns its length. */
size_t svc_pb_varint(uint8_t *out, uint64_t v);
/* The body of a History message for events [from, upto] (0 = to the end) from
 * the stored packed events, without decoding them; see state.c. */
dbx_err svc_history_encode(ectx *c, uint64_t run_seq, int64_t from, int64_t upto, size_t max_bytes, uint8_t **out,
                       size_t *len, int64_t *last_id);

/* Queue a task; notes the queue for waiting pollers. */
dbx_err svc_task_enqueue(ectx *c, const char *ns, const char *tq, int kind, const char *wfid,
                     const char *run_id, int64_t scheduled_event_id, int32_t attempt);
/* Add a durable timer at wall time fire_ns. */
dbx_err svc_timer_add(ectx *c, int64_t fire_ns, int kind, RunState *rs, int64_t event_id, int32_t attempt,
                  const char *timer_id);

/* Schedule a workflow task if none is pending (or mark that one is needed
 * after the started one). */
dbx_err svc_wft_schedule(ectx *c, RunState *rs);
/* Close the run with event ev (completed/failed/...); status is the new
 * WorkflowExecutionStatus. Notifies the parent, applies parent close policy. */
dbx_err svc_run_close(ectx *c, RunState *rs, HistoryEvent *ev, int status);
/* Terminate a loaded running run (saves it; a closed run is left alone).
 * Returns DBX_OK, DBX_ENOMEM or a store error. */
dbx_err svc_run_terminate(ectx *c, RunState *rs, const char *reason, const char *identity);
/* Delete a closed run: its history, its state and, when it is the workflow
 * id's current run, the pointer to it (DeleteWorkflowExecution). Tasks and
 * timers still naming it find no run and are dropped when they come due. */
dbx_err svc_run_delete(ectx *c, RunState *rs);
/* Request cancellation of the current run of (ns, wfid), if it runs. */
dbx_err svc_child_request_cancel(ectx *c, const char *ns, const char *wfid);

/* Start a new run (StartWorkflowExecution, child, continue-as-new, reset).
 * started: the WorkflowExecutionStarted attributes (borrowed; task queue,
 * type, timeouts read from it). Creates state, writes Started and the first
 * workflow task (unless first_wft_backoff_ms > 0: then a timer). *out: the new
 * state (caller frees) or NULL. */
typedef struct {
  const char *ns, *workflow_id, *run_id, *request_id;
  WorkflowExecutionStartedEventAttributes *started;
  const ParentInfo *parent;
  int64_t execution_expiration_ns;   /* inherited by continue-as-new; 0 = compute */
  const char *first_run_id;          /* inherited; NULL = run_id */
  HistoryEvent *after_started;       /* optional event written after Started (signal-with-start) */
  int skip_first_wft;                /* reset: the caller writes its own events */
} run_start_args;
dbx_err svc_run_start(ectx *c, const run_start_args *a, RunState **out);

ActivityInfo *svc_activity_find(RunState *rs, int64_t scheduled_event_id);
void svc_activity_remove(RunState *rs, int64_t scheduled_event_id);
TimerInfo *svc_timer_find(RunState *rs, const char *timer_id);
void svc_timer_remove(RunState *rs, const char *timer_id);
ChildInfo *svc_child_find(RunState *rs, int64_t initiated_event_id);
void svc_child_remove(RunState *rs, int64_t initiated_event_id);

/* ---- events to mutable state (mutable.c) ---- */
/* Apply one history event to the event-derived part of rs: pending
 * activities (scheduled, cancel requested, closed), timers (started, fired,
 * canceled), child workflows (initiated, started, failed to start, closed),
 * the workflow task's event ids and times, last_wft_started_event_id,
 * cancel_requested, and the close (status, close time and id; nothing
 * pending but children). The live path calls it for every appended event;
 * reset folds a prefix with it. ev is borrowed. DBX_OK, DBX_ENOMEM (rs may
 * then hold a partly filled entry), DBX_EINVAL for NULL arguments. No I/O. */
dbx_err svc_state_apply_event(RunState *rs, const HistoryEvent *ev);
/* svc_state_apply_event for evs[0..n) in order. */
dbx_err svc_state_fold(RunState *rs, HistoryEvent *const *evs, size_t n);

/* ---- run state machine (run.c) ---- */
/* Deliver a signal to a loaded run (buffered if its task is started) and
 * schedule a workflow task. Strings and messages are borrowed. */
dbx_err svc_run_signal(ectx *c, RunState *rs, const char *name, const Payloads *input, const char *identity,
                       const Header *header, const char *request_id);
/* WorkflowExecutionCancelRequested once, then a workflow task. */
dbx_err svc_run_request_cancel(ectx *c, RunState *rs, const char *identity, const char *reason);
WorkflowExecution *svc_we_new(const char *wfid, const char *run_id); /* malloc'd; NULL on OOM */

/* ---- activity state machine (activity.c) ---- */
/* Close an activity: ActivityTaskStarted (if it started), then ev, whose
 * started_event_id field (*started_field) is filled here; the activity leaves
 * the run and a workflow task is scheduled. ev stays the caller's. */
dbx_err svc_activity_close(ectx *c, RunState *rs, ActivityInfo *ai, HistoryEvent *ev, int64_t *started_field);
/* Activity attempt outcome (timers.c / activity_rpc.c): retry if the policy
 * allows, else close with events. failure is borrowed. timeout_type 0 for a
 * worker failure. Returns DBX_OK. */
dbx_err svc_activity_attempt_failed(ectx *c, RunState *rs, ActivityInfo *ai, Failure *failure,
                                int timeout_type, Payloads *last_details);
dbx_err svc_activity_queue_attempt(ectx *c, RunState *rs, ActivityInfo *ai);

/* ---- workflow updates (update.c) ---- */
dbx_err svc_h_update(ectx *c, job *j);      /* UpdateWorkflowExecution */
dbx_err svc_h_multi_operation(ectx *c, job *j); /* ExecuteMultiOperation: update-with-start */
/* StartWorkflowExecution's work for a decoded request (lifecycle.c): *run_id
 * (malloc'd) of the run started or, by the policies, reused (*started 0);
 * NULL with the job's status set when refused. q is borrowed. */
dbx_err svc_start_request(ectx *c, job *j, const StartWorkflowExecutionRequest *q, char **run_id, int *started);
dbx_err svc_h_poll_update(ectx *c, job *j); /* PollWorkflowExecutionUpdate */
/* Accepted / Completed update events into rs->updates (from
 * svc_state_apply_event). DBX_OK, DBX_ENOMEM, DBX_EINVAL for NULL. */
dbx_err svc_update_apply_event(RunState *rs, const HistoryEvent *ev);
/* The protocol messages of the workflow task rs just started: one
 * update.v1.Request per admitted update, marked as carried by this task (the
 * caller saves rs). *out: free with svc_update_messages_free. DBX_OK or
 * DBX_ENOMEM. */
dbx_err svc_update_messages(RunState *rs, ProtocolMessage ***out, size_t *n);
void svc_update_messages_free(ProtocolMessage **m, size_t n);
/* 1 when an admitted update was not carried by the task started as event
 * started_id (it came during it): the completion must schedule a new task. */
int svc_update_wants_task(const RunState *rs, int64_t started_id);
/* One protocol message of a RespondWorkflowTaskCompleted: Acceptance writes
 * WorkflowExecutionUpdateAccepted, Response WorkflowExecutionUpdateCompleted,
 * Rejection completes the update with its failure and writes nothing. A bad
 * message sets the job's INVALID_ARGUMENT. m is borrowed. */
dbx_err svc_update_message_apply(ectx *c, job *j, RunState *rs, const ProtocolMessage *m);

/* ---- custom search attributes (search_attrs.c) ---- */
/* A namespace's custom search attributes: the predefined ones, then those
 * added (names borrowed from stored). Free with svc_sa_defs_free. */
typedef struct {
  dbx_visq_sa_def *defs;
  size_t n;
  AddSearchAttributesRequest *stored;
} svc_sa_defs;
dbx_err svc_sa_defs_load(ectx *c, const char *ns, svc_sa_defs *out);
void svc_sa_defs_free(svc_sa_defs *d);
/* 1 when every attribute of sa is defined in ns; else 0 with the job
 * refused (INVALID_ARGUMENT "search attribute X is not defined"), or 0 with
 * *rc a store/memory error. */
int svc_sa_check(ectx *c, job *j, const char *ns, const SearchAttributes *sa, dbx_err *rc);
dbx_err svc_h_add_search_attributes(ectx *c, job *j);
/* At start: parse o->search_attributes into s->start_sa. DBX_OK, DBX_ENOMEM,
 * DBX_EINVAL with *msg (malloc'd) naming the bad one. */
dbx_err svc_sa_opts_parse(dbx_service *s, const dbx_service_opts *o, char **msg);
void svc_sa_opts_free(dbx_service *s);
dbx_err svc_h_list_search_attributes(ectx *c, job *j);

/* When a parked long poll (task poll, history wait, update wait) that
 * nothing answers gets its empty reply (monotonic ns): after long_poll_ms,
 * and at the latest 1 s before the call's own deadline (Temporal's frontend
 * keeps the same tail room), so a client never sees DEADLINE_EXCEEDED for a
 * poll that merely found nothing, even when a slow commit delays the engine
 * by most of a second. Engine thread. */
int64_t svc_long_poll_until(const ectx *c, const job *j);

/* Namespace lookup: 1 if known. */
int svc_ns_known(dbx_service *s, const char *ns);
const char *svc_ns_id(dbx_service *s, const char *ns);

/* Helpers for building protobuf values. Every one of them that fails to
 * allocate (returns NULL) also sets the sticky out-of-memory mark: callers
 * fill events field by field and do not check each string or submessage,
 * and a NULL one would be written as an absent field. The engine clears the
 * mark before each job and rejects the job (RESOURCE_EXHAUSTED, nothing
 * written) when it is set afterwards (engine.c: run_job), so no half-filled
 * event reaches the store. svc_oom_take returns the mark and clears it. Per
 * thread. */
void svc_oom_mark(void);
int svc_oom_take(void);
/* The mark, kept. svc_event_append, svc_event_copy and svc_run_save return
 * DBX_ENOMEM while it is set: nothing built after a failed allocation is
 * written or applied. */
int svc_oom_peek(void);
/* dbx_pb_unpack that tells why it failed: DBX_OK (*out: free with
 * protobuf_c_message_free_unpacked(m, NULL)), DBX_ENOMEM (an allocation
 * failed), DBX_EINVAL (malformed bytes). *out NULL unless DBX_OK. */
dbx_err svc_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n, void **out);
void *svc_pb_new(const ProtobufCMessageDescriptor *d); /* malloc'd, initialised; NULL on OOM */
char *svc_new_uuid(void); /* dbx_uuid_v4 text, malloc'd (engine.c); NULL on OOM or no randomness */
char *svc_pb_strdup(const char *s);      /* malloc'd copy; "" for NULL */
void svc_pb_setstr(char **field, const char *v);
Duration *svc_duration_new_ms(int64_t ms);
Timestamp *svc_timestamp_new_ns(int64_t ns);
HistoryEvent *svc_event_new(int type);   /* malloc'd, free with history_event_free */
void svc_history_event_free(HistoryEvent *ev);
/* Deep copy (dbx_pb_clone: pack, then unpack with dbx_pb_allocator()); NULL
 * for a NULL m, or on OOM (marked). */
ProtobufCMessage *svc_pb_clone(const ProtobufCMessage *m);
#define PB_CLONE(T, m) ((T *)svc_pb_clone((const ProtobufCMessage *)(m)))

/* ---- schedules (schedule_spec.c: specs and matching times; schedule.c:
 * the stored schedules, their actions and the schedule RPCs) ---- */
#include "durabox/service/v1/schedule.pb-c.h"
#include "temporal/api/schedule/v1/message.pb-c.h"
#include "temporal/api/workflowservice/v1/request_response_schedule.pb-c.h"
typedef Temporal__Api__Schedule__V1__ScheduleSpec ScheduleSpec;
typedef Temporal__Api__Schedule__V1__StructuredCalendarSpec StructuredCalendarSpec;
typedef Temporal__Api__Schedule__V1__CalendarSpec CalendarSpec;
typedef Temporal__Api__Schedule__V1__IntervalSpec IntervalSpec;
typedef Temporal__Api__Schedule__V1__Range Range;
#define ScheduleSpec__D temporal__api__schedule__v1__schedule_spec__descriptor
#define StructuredCalendarSpec__D temporal__api__schedule__v1__structured_calendar_spec__descriptor
#define IntervalSpec__D temporal__api__schedule__v1__interval_spec__descriptor
#define Range__D temporal__api__schedule__v1__range__descriptor
/* A copy of in with calendar, cron_string and exclude_calendar compiled into
 * structured calendars and intervals (Temporal's Describe shows only those),
 * checked. *out: free with protobuf_c_message_free_unpacked. DBX_OK,
 * DBX_ENOMEM, DBX_EINVAL with *err (malloc'd, says what is wrong). */
dbx_err svc_sched_spec_compile(const ScheduleSpec *in, ScheduleSpec **out, char **err);
/* The first matching time of a compiled spec after `after` (seconds since the
 * epoch; start/end times and exclusions applied), INT64_MAX when none. */
int64_t svc_sched_spec_next(const ScheduleSpec *s, int64_t after);
/* Seconds east of UTC of a fixed time zone name ("", UTC, Etc/GMT+N,
 * UTC+HH:MM, +HH:MM); 1 when it is not one (schedule_spec.c). */
int svc_sched_tz_offset(const char *name);
/* Zones by name (schedule_tz.c): fixed ones as above, and IANA names from
 * the system's TZif files ($TZDIR, else /usr/share/zoneinfo), cached for the
 * process; thread-safe. known: 1 when name is usable. offset_at: seconds
 * east at UTC second t (0 for an unknown zone). next_change: the first UTC
 * second > t at which the offset changes, INT64_MAX when none is known. */
int svc_sched_tz_known(const char *name);
int32_t svc_sched_tz_offset_at(const char *name, int64_t t);
int64_t svc_sched_tz_next_change(const char *name, int64_t t);
/* t_s as "2006-01-02T15:04:05Z" (UTC), NUL-terminated. */
void svc_sched_rfc3339(int64_t t_s, char out[32]);
/* TK_SCHEDULE timer tr came due: take the schedule's due actions (schedule.c). */
dbx_err svc_sched_fire(ectx *c, const TimerRecord *tr);
dbx_err svc_h_create_schedule(ectx *c, job *j);
dbx_err svc_h_describe_schedule(ectx *c, job *j);
dbx_err svc_h_update_schedule(ectx *c, job *j);
dbx_err svc_h_patch_schedule(ectx *c, job *j);
dbx_err svc_h_delete_schedule(ectx *c, job *j);
dbx_err svc_h_list_schedules(ectx *c, job *j);
dbx_err svc_h_list_schedule_matching_times(ectx *c, job *j);

#endif
