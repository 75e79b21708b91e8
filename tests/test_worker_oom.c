/* Allocation failures on the worker's workflow task and activity result
 * paths (issue 8, section 5): for N = 1, 2, ... the Nth allocation through
 * base/alloc.h fails while one real workflow task is processed the way
 * worker.c processes it (history recorded in a real LMDB worker store,
 * replay, commands and query results, the packed answer) and an activity
 * result is journaled and turned into its report. Every failing run must
 * end with an error or a RespondWorkflowTaskFailed, never with a completion
 * other than the one a never-failed run builds; the store must hold all of
 * the history or none of it, and the journal a whole entry or none; the
 * same task processed again without the hook must build the same bytes.
 * Leaks are found by ASan (asan build) and valgrind (normal build). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/util.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/wft.h"
#include "worker/wstore.h"

#define NS "default"
#define RID "run-1"
#define MAX_SWEEP 20000

/* ---- oom.Kinds: the first task issues one command of most kinds; the
 * second (the task under test, continue-as-new suggested) reacts to their
 * outcomes and continues as new. */

static char *fresh_value(void *ud) {
  (void)ud;
  return dbx_strdup("\"fresh\""); /* replayed: history holds "se", this never runs */
}

static void *k_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  const char *sk[] = {"CustomKeywordField"}, *sv[] = {"\"blue\""};
  const char *mk[] = {"note"}, *mv[] = {"{\"n\":1}"};
  dbx_activity_opts ao = {.start_to_close_ms = 30000, .heartbeat_ms = 5000,
                          .retry_class = DBX_AT_MOST_ONCE};
  dbx_child_opts co = {.workflow_id = "kid-1", .run_timeout_ms = 60000, .maximum_attempts = 2};
  dbx_wf_schedule_activity(wf, "a.one", "{\"step\":1}", &ao);        /* seq 1 */
  dbx_wf_start_timer(wf, 5000);                                       /* seq 2 */
  dbx_wf_marker_record(wf, "m", "\"first\"");
  dbx_wf_side_effect(wf, fresh_value, NULL);
  dbx_wf_get_version(wf, "chg", DBX_WF_DEFAULT_VERSION, 1);
  dbx_wf_start_child(wf, "oom.Kid", "{\"x\":1}", &co);                /* seq 3 */
  dbx_wf_signal_external(wf, "other", NULL, "hello", "{\"hi\":1}");  /* seq 4 */
  dbx_wf_upsert_search_attributes(wf, sk, sv, 1);
  dbx_wf_upsert_memo(wf, mk, mv, 1);
  dbx_wf_await_signal(wf, "go", 3000); /* seq 5, its timer seq 6 */
  return calloc(1, 1);
}

static void k_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq;
  dbx_wf_schedule_activity(wf, "a.two", o->result_json, NULL); /* seq 7 */
}

static void k_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st, (void)seq;
  dbx_wf_marker_record(wf, "after-timer", "{\"t\":2}");
}

static void k_on_wait(void *st, dbx_wf *wf, int64_t seq, const char *json, size_t len,
                      int timed_out) {
  (void)st, (void)seq, (void)len;
  if (!timed_out && dbx_wf_continue_as_new_suggested(wf)) dbx_wf_continue_as_new(wf, json, NULL);
}

static void k_destroy(void *st) { free(st); }

static const dbx_workflow_type kinds_wf = {
    .name = "oom.Kinds", .create = k_create, .on_activity = k_on_activity,
    .on_timer = k_on_timer, .destroy = k_destroy, .on_signal_wait = k_on_wait};

/* ---- the history, as the service records it */

static HistoryEvent *finish(HistoryEvent *e) {
  size_t len = protobuf_c_message_get_packed_size(&e->base);
  uint8_t *buf = malloc(len + 1);
  protobuf_c_message_pack(&e->base, buf);
  HistoryEvent *out = (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, len, buf);
  free(buf);
  assert_non_null(out);
  return out;
}

static HistoryEvent g_ev;
static Timestamp g_ts;

static HistoryEvent *ev(int64_t id, int type) {
  g_ev = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  g_ts = (Timestamp)INIT(GOOGLE__PROTOBUF__TIMESTAMP);
  dbx_pb_timestamp_init_ns(&g_ts, (1700000000 + id) * 1000000000LL);
  g_ev.event_id = id;
  g_ev.event_type = type;
  g_ev.event_time = &g_ts;
  return &g_ev;
}

typedef Temporal__Api__History__V1__MarkerRecordedEventAttributes__DetailsEntry detail;

static HistoryEvent *marker(int64_t id, const char *name, const char *k1, const char *v1,
                            const char *k2, const char *v2) {
  HistoryEvent *e = ev(id, ET(MARKER_RECORDED));
  MarkerRecordedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES);
  detail d[2] = {INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES__DETAILS_ENTRY),
                 INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES__DETAILS_ENTRY)};
  detail *dp[2] = {&d[0], &d[1]};
  d[0].key = (char *)k1;
  d[0].value = dbx_payloads_from_json(v1, strlen(v1));
  if (k2) {
    d[1].key = (char *)k2;
    d[1].value = dbx_payloads_from_json(v2, strlen(v2));
  }
  a.marker_name = (char *)name;
  a.n_details = k2 ? 2 : 1;
  a.details = dp;
  a.workflow_task_completed_event_id = 4;
  e->attributes_case = HEV(MARKER_RECORDED);
  e->marker_recorded_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(d[0].value);
  dbx_payloads_free(d[1].value);
  return r;
}

static HistoryEvent *wf_started(int64_t id) {
  HistoryEvent *e = ev(id, ET(WORKFLOW_EXECUTION_STARTED));
  WorkflowExecutionStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_STARTED_EVENT_ATTRIBUTES);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  tq.name = "tq";
  wt.name = "oom.Kinds";
  a.task_queue = &tq;
  a.workflow_type = &wt;
  a.input = dbx_payloads_from_json("{\"round\":1}", 11);
  e->attributes_case = HEV(WORKFLOW_EXECUTION_STARTED);
  e->workflow_execution_started_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.input);
  return r;
}

static HistoryEvent *wft_started(int64_t id, int suggest) {
  HistoryEvent *e = ev(id, ET(WORKFLOW_TASK_STARTED));
  WorkflowTaskStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_STARTED_EVENT_ATTRIBUTES);
  a.scheduled_event_id = id - 1;
  a.history_size_bytes = 4096 * id;
  a.suggest_continue_as_new = suggest;
  e->attributes_case = HEV(WORKFLOW_TASK_STARTED);
  e->workflow_task_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *act_scheduled(int64_t id) {
  HistoryEvent *e = ev(id, ET(ACTIVITY_TASK_SCHEDULED));
  ActivityTaskScheduledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  at.name = "a.one";
  a.activity_id = "1";
  a.activity_type = &at;
  e->attributes_case = HEV(ACTIVITY_TASK_SCHEDULED);
  e->activity_task_scheduled_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *act_started(int64_t id, int64_t sched) {
  HistoryEvent *e = ev(id, ET(ACTIVITY_TASK_STARTED));
  ActivityTaskStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_STARTED_EVENT_ATTRIBUTES);
  a.scheduled_event_id = sched;
  a.attempt = 1;
  e->attributes_case = HEV(ACTIVITY_TASK_STARTED);
  e->activity_task_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *act_completed(int64_t id, int64_t sched, int64_t started) {
  HistoryEvent *e = ev(id, ET(ACTIVITY_TASK_COMPLETED));
  ActivityTaskCompletedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_COMPLETED_EVENT_ATTRIBUTES);
  a.scheduled_event_id = sched;
  a.started_event_id = started;
  a.result = dbx_payloads_from_json("{\"exit_code\":0}", 15);
  e->attributes_case = HEV(ACTIVITY_TASK_COMPLETED);
  e->activity_task_completed_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.result);
  return r;
}

static HistoryEvent *timer_started(int64_t id, const char *tid) {
  HistoryEvent *e = ev(id, ET(TIMER_STARTED));
  TimerStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__TIMER_STARTED_EVENT_ATTRIBUTES);
  a.timer_id = (char *)tid;
  e->attributes_case = HEV(TIMER_STARTED);
  e->timer_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *timer_fired(int64_t id, const char *tid, int64_t started) {
  HistoryEvent *e = ev(id, ET(TIMER_FIRED));
  TimerFiredEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__TIMER_FIRED_EVENT_ATTRIBUTES);
  a.timer_id = (char *)tid;
  a.started_event_id = started;
  e->attributes_case = HEV(TIMER_FIRED);
  e->timer_fired_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *child_initiated(int64_t id) {
  HistoryEvent *e = ev(id, ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED));
  StartChildWorkflowExecutionInitiatedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__START_CHILD_WORKFLOW_EXECUTION_INITIATED_EVENT_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = "oom.Kid";
  a.workflow_id = "kid-1";
  a.workflow_type = &wt;
  e->attributes_case = HEV(START_CHILD_WORKFLOW_EXECUTION_INITIATED);
  e->start_child_workflow_execution_initiated_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *child_started(int64_t id, int64_t init) {
  HistoryEvent *e = ev(id, ET(CHILD_WORKFLOW_EXECUTION_STARTED));
  ChildWorkflowExecutionStartedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__CHILD_WORKFLOW_EXECUTION_STARTED_EVENT_ATTRIBUTES);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "kid-1";
  we.run_id = "kid-run";
  a.initiated_event_id = init;
  a.workflow_execution = &we;
  e->attributes_case = HEV(CHILD_WORKFLOW_EXECUTION_STARTED);
  e->child_workflow_execution_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *signal_ext_initiated(int64_t id) {
  HistoryEvent *e = ev(id, ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED));
  SignalExternalWorkflowExecutionInitiatedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED_EVENT_ATTRIBUTES);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "other";
  a.workflow_execution = &we;
  a.signal_name = "hello";
  e->attributes_case = HEV(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED);
  e->signal_external_workflow_execution_initiated_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ext_signaled(int64_t id, int64_t init) {
  HistoryEvent *e = ev(id, ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED));
  ExternalWorkflowExecutionSignaledEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__EXTERNAL_WORKFLOW_EXECUTION_SIGNALED_EVENT_ATTRIBUTES);
  a.initiated_event_id = init;
  e->attributes_case = HEV(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED);
  e->external_workflow_execution_signaled_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *signaled(int64_t id, const char *name, const char *json) {
  HistoryEvent *e = ev(id, ET(WORKFLOW_EXECUTION_SIGNALED));
  WorkflowExecutionSignaledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_SIGNALED_EVENT_ATTRIBUTES);
  a.signal_name = (char *)name;
  a.input = dbx_payloads_from_json(json, strlen(json));
  e->attributes_case = HEV(WORKFLOW_EXECUTION_SIGNALED);
  e->workflow_execution_signaled_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.input);
  return r;
}

#define NEVENTS 25

/* Task 1 (events 3..4) issued every command of k_create; the task started
 * at event 25 is the one processed, after the outcomes 15..20. */
static size_t build_history(HistoryEvent **h) {
  size_t n = 0;
  h[n++] = wf_started(1);
  h[n++] = finish(ev(2, ET(WORKFLOW_TASK_SCHEDULED)));
  h[n++] = wft_started(3, 0);
  h[n++] = finish(ev(4, ET(WORKFLOW_TASK_COMPLETED)));
  h[n++] = act_scheduled(5);
  h[n++] = timer_started(6, "2");
  h[n++] = marker(7, "m", "data", "\"first\"", NULL, NULL);
  h[n++] = marker(8, "SideEffect", "side-effect-id", "1", "data", "\"se\"");
  h[n++] = marker(9, "Version", "change-id", "\"chg\"", "version", "1");
  h[n++] = child_initiated(10);
  h[n++] = signal_ext_initiated(11);
  h[n++] = finish(ev(12, ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES)));
  h[n++] = finish(ev(13, ET(WORKFLOW_PROPERTIES_MODIFIED)));
  h[n++] = timer_started(14, "6");
  h[n++] = act_started(15, 5);
  h[n++] = act_completed(16, 5, 15);
  h[n++] = timer_fired(17, "2", 6);
  h[n++] = child_started(18, 10);
  h[n++] = ext_signaled(19, 11);
  h[n++] = signaled(20, "go", "{\"round\":2}");
  h[n++] = finish(ev(21, ET(WORKFLOW_TASK_SCHEDULED)));
  h[n++] = wft_started(22, 0);
  h[n++] = finish(ev(23, ET(WORKFLOW_TASK_TIMED_OUT))); /* a lost task: not activated */
  h[n++] = finish(ev(24, ET(WORKFLOW_TASK_SCHEDULED)));
  h[n++] = wft_started(25, 1);
  return n;
}

typedef Temporal__Api__Workflowservice__V1__PollWorkflowTaskQueueResponse__QueriesEntry query_entry;

/* The poll response for task 2 with one query (__stack_trace), unpacked as
 * the worker's client unpacks it. Free with protobuf_c_message_free_unpacked. */
static PollWorkflowTaskQueueResponse *build_task(const char *wid, HistoryEvent **h, size_t n) {
  PollWorkflowTaskQueueResponse t = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  History hist = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
  WorkflowQuery q = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
  query_entry qe = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE__QUERIES_ENTRY);
  query_entry *qp[1] = {&qe};
  static uint8_t token[] = "task-token-2";
  t.task_token.data = token;
  t.task_token.len = sizeof token - 1;
  we.workflow_id = (char *)wid;
  we.run_id = RID;
  t.workflow_execution = &we;
  wt.name = "oom.Kinds";
  t.workflow_type = &wt;
  t.started_event_id = 25;
  t.previous_started_event_id = 3;
  t.attempt = 1;
  hist.events = h;
  hist.n_events = n;
  t.history = &hist;
  q.query_type = "__stack_trace";
  qe.key = "q1";
  qe.value = &q;
  t.queries = qp;
  t.n_queries = 1;
  size_t len = protobuf_c_message_get_packed_size(&t.base);
  uint8_t *buf = malloc(len);
  protobuf_c_message_pack(&t.base, buf);
  PollWorkflowTaskQueueResponse *out = (PollWorkflowTaskQueueResponse *)protobuf_c_message_unpack(
      &PollWorkflowTaskQueueResponse__D, NULL, len, buf);
  free(buf);
  assert_non_null(out);
  return out;
}

/* ---- the path under test */

typedef struct {
  int failed;           /* the answer is a RespondWorkflowTaskFailed */
  uint8_t *packed;      /* the packed answer */
  size_t len;
  int64_t cause;
  char type[64], message[256];
} answer;

/* What process_wft does with a polled task: record the history (ws NULL:
 * not), build the answer, pack it (as dbx_client_call does before sending). */
static dbx_err process_task(dbx_wstore *ws, const PollWorkflowTaskQueueResponse *t, answer *out,
                            dbx_err *store_rc) {
  memset(out, 0, sizeof *out);
  HistoryEvent **evs = t->history->events;
  size_t n = t->history->n_events;
  *store_rc = ws ? dbx_wstore_history_put(ws, NS, t->workflow_execution->workflow_id, RID, evs, n)
                 : DBX_OK;
  dbx_wf_run *r = NULL;
  dbx_wft_answer_ a;
  dbx_err rc = dbx_wft_answer_build_(&kinds_wf, t, evs, n, NS, "oom-tester", &r, &a);
  if (rc == DBX_OK) {
    out->failed = a.failed;
    if (a.failed) {
      out->cause = a.failed_rq.cause;
      snprintf(out->type, sizeof out->type, "%s", a.failed_rq.failure->application_failure_info->type);
      snprintf(out->message, sizeof out->message, "%s", a.failed_rq.failure->message);
    }
    out->packed = dbx_pb_pack(a.failed ? &a.failed_rq.base : &a.completed.base, &out->len);
    if (!out->packed) rc = DBX_ENOMEM;
  }
  dbx_wft_answer_cleanup_(&a);
  dbx_wf_run_destroy(r);
  return rc;
}

/* The store holds all of this run's history or none of it: ids 1..n in
 * order, each unpacking to the bytes that were given. Returns the count. */
static size_t check_history(dbx_wstore *ws, const char *wid, HistoryEvent **h, size_t n) {
  HistoryEvent **got = NULL;
  size_t ng = 0;
  dbx_err rc = dbx_wstore_history_load(ws, NS, wid, RID, &got, &ng, NULL);
  if (rc == DBX_ENOTFOUND) return 0;
  assert_int_equal(rc, DBX_OK);
  assert_int_equal(ng, n);
  for (size_t i = 0; i < ng; i++) {
    assert_int_equal(got[i]->event_id, (int64_t)i + 1);
    size_t la = protobuf_c_message_get_packed_size(&got[i]->base);
    size_t lb = protobuf_c_message_get_packed_size(&h[i]->base);
    assert_int_equal(la, lb);
    uint8_t *pa = malloc(la + 1), *pb = malloc(lb + 1);
    protobuf_c_message_pack(&got[i]->base, pa);
    protobuf_c_message_pack(&h[i]->base, pb);
    assert_memory_equal(pa, pb, la);
    free(pa);
    free(pb);
  }
  dbx_wstore_history_free(got, ng);
  return ng;
}

static void free_history(HistoryEvent **h, size_t n) {
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&h[i]->base, NULL);
}

static void test_worker_oom_workflow_task(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("twoom");
  dbx_wstore *ws = NULL;
  assert_int_equal(dbx_wstore_open(dir, 1, &ws, NULL), DBX_OK);
  HistoryEvent *h[NEVENTS];
  assert_int_equal(build_history(h), NEVENTS);

  /* the never-failed answer */
  PollWorkflowTaskQueueResponse *t = build_task("wf-ref", h, NEVENTS);
  answer ref;
  dbx_err src;
  assert_int_equal(process_task(ws, t, &ref, &src), DBX_OK);
  assert_int_equal(src, DBX_OK);
  assert_int_equal(ref.failed, 0);
  assert_int_equal(check_history(ws, "wf-ref", h, NEVENTS), NEVENTS);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* it is the completion the code asks for: activity, marker, timer cancel, continue-as-new */
  RespondWorkflowTaskCompletedRequest *done = (RespondWorkflowTaskCompletedRequest *)
      protobuf_c_message_unpack(&RespondWorkflowTaskCompletedRequest__D, NULL, ref.len, ref.packed);
  assert_non_null(done);
  assert_int_equal(done->n_commands, 4);
  assert_int_equal(done->commands[0]->command_type, CT(SCHEDULE_ACTIVITY_TASK));
  assert_string_equal(done->commands[0]->schedule_activity_task_command_attributes->activity_id, "7");
  assert_int_equal(done->commands[1]->command_type, CT(RECORD_MARKER));
  assert_string_equal(done->commands[1]->record_marker_command_attributes->marker_name, "after-timer");
  assert_int_equal(done->commands[2]->command_type, CT(CANCEL_TIMER));
  assert_string_equal(done->commands[2]->cancel_timer_command_attributes->timer_id, "6");
  assert_int_equal(done->commands[3]->command_type, CT(CONTINUE_AS_NEW_WORKFLOW_EXECUTION));
  assert_int_equal(done->n_query_results, 1);
  assert_string_equal(done->query_results[0]->key, "q1");
  assert_int_equal(done->query_results[0]->value->result_type,
                   TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED);
  protobuf_c_message_free_unpacked(&done->base, NULL);

  long n = 1, failing = 0, failed_answers = 0;
  for (;; n++) {
    char wid[32];
    snprintf(wid, sizeof wid, "wf-%ld", n);
    t = build_task(wid, h, NEVENTS);
    answer got, want; /* the never-failed answer for this workflow id */
    assert_int_equal(process_task(NULL, t, &want, &src), DBX_OK);
    assert_int_equal(want.failed, 0);
    dbx_alloc_fail_at(n);
    dbx_err rc = process_task(ws, t, &got, &src);
    int hit = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!hit) {
      assert_int_equal(rc, DBX_OK);
      assert_int_equal(src, DBX_OK);
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.packed, want.packed, want.len);
      free(got.packed);
      free(want.packed);
      protobuf_c_message_free_unpacked(&t->base, NULL);
      break;
    }
    failing++;
    /* a clean end: an error, a RespondWorkflowTaskFailed naming the
     * failure, or (the failure hit the store only) the very completion a
     * never-failed run builds */
    if (rc == DBX_OK && got.failed) {
      failed_answers++;
      assert_int_equal(got.cause, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE));
      assert_string_equal(got.type, "WorkerError");
      assert_string_equal(got.message, dbx_strerror(DBX_ENOMEM));
    } else if (rc == DBX_OK) {
      assert_int_not_equal(src, DBX_OK);
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.packed, want.packed, want.len);
    } else {
      assert_int_equal(rc, DBX_ENOMEM);
    }
    free(got.packed);
    size_t stored = check_history(ws, wid, h, NEVENTS);
    assert_true(stored == 0 || stored == NEVENTS);
    if (src != DBX_OK) assert_int_equal(stored, 0);
    /* the same task again, without the hook: the never-failed answer */
    assert_int_equal(process_task(ws, t, &got, &src), DBX_OK);
    assert_int_equal(src, DBX_OK);
    assert_int_equal(got.failed, 0);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.packed, want.packed, want.len);
    assert_int_equal(check_history(ws, wid, h, NEVENTS), NEVENTS);
    free(got.packed);
    free(want.packed);
    protobuf_c_message_free_unpacked(&t->base, NULL);
    assert_true(n < MAX_SWEEP);
  }
  /* the path allocates through the hook at all, and some failures are
   * answered as failed tasks (the replay's) */
  assert_true(failing > 50);
  assert_true(failed_answers > 0);
  print_message("workflow task: %ld allocations failed one at a time (%ld answered as failed)\n",
                failing, failed_answers);
  free(ref.packed);
  free_history(h, NEVENTS);
  dbx_wstore_close(ws);
  dbx_test_rmrf(dir);
  free(dir);
}

/* ---- workflow code that runs out of memory itself */

static void *self_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  dbx_wf_schedule_activity(wf, "a.one", "{}", NULL);
  dbx_wf_out_of_memory(wf); /* say, its own state could not be allocated */
  assert_int_equal(dbx_wf_start_timer(wf, 10), -1);
  return NULL;
}

static const dbx_workflow_type self_wf = {.name = "oom.Kinds", .create = self_create};

static void test_worker_oom_code_out_of_memory_fails_the_task(void **state) {
  (void)state;
  HistoryEvent *h[NEVENTS];
  assert_int_equal(build_history(h), NEVENTS);
  PollWorkflowTaskQueueResponse *t = build_task("wf-self", h, NEVENTS);
  dbx_wf_run *r = NULL;
  dbx_wft_answer_ a;
  /* not the workflow's failure (no FailWorkflowExecution, nothing scheduled):
   * the task fails and is retried */
  assert_int_equal(dbx_wft_answer_build_(&self_wf, t, h, NEVENTS, NS, "oom-tester", &r, &a), DBX_OK);
  assert_int_equal(a.failed, 1);
  assert_int_equal(a.nondeterministic, 0);
  assert_int_equal(a.failed_rq.cause, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE));
  assert_string_equal(a.failed_rq.failure->application_failure_info->type, "WorkerError");
  assert_string_equal(a.failed_rq.failure->message, dbx_strerror(DBX_ENOMEM));
  assert_int_equal(dbx_wf_run_closed(r), 0);
  assert_int_equal(dbx_wf_run_apply(r, h, NEVENTS, 25), DBX_ENOMEM); /* unusable from now on */
  dbx_wft_answer_cleanup_(&a);
  dbx_wf_run_destroy(r);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  free_history(h, NEVENTS);
}

/* ---- the activity side: a result journaled, read back, reported */

static dbx_err journal_and_report(dbx_wstore *ws, const char *wid, const dbx_act_result *res,
                                  uint8_t **packed, size_t *len) {
  *packed = NULL;
  dbx_err rc = dbx_wstore_journal_result(ws, NS, wid, RID, "1", 3, res);
  if (rc != DBX_OK) return rc;
  dbx_journal_entry je;
  rc = dbx_wstore_journal_get(ws, NS, wid, RID, "1", &je);
  if (rc != DBX_OK) return rc;
  /* what run_activity does with a journaled result of this attempt */
  static uint8_t token[] = "act-token";
  ProtobufCBinaryData tt = {sizeof token - 1, token};
  dbx_act_report_ rp;
  rc = dbx_act_report_build_(tt, NS, "oom-tester", je.result.failure_type ? 1 : 0, &je.result, &rp);
  if (rc == DBX_OK) {
    *packed = dbx_pb_pack(rp.req, len);
    if (!*packed) rc = DBX_ENOMEM;
  }
  dbx_act_report_cleanup_(&rp);
  dbx_journal_entry_cleanup(&je);
  return rc;
}

/* One result (a success, or a failure: a failure must never come back as a
 * success) swept through journal write, journal read and report. */
static void sweep_activity(dbx_wstore *ws, const char *prefix, const dbx_act_result *res) {
  uint8_t *ref = NULL, *got = NULL;
  size_t rl = 0, gl = 0;
  char wid[32];
  snprintf(wid, sizeof wid, "%s-ref", prefix);
  assert_int_equal(journal_and_report(ws, wid, res, &ref, &rl), DBX_OK);
  long n = 1;
  for (;; n++) {
    snprintf(wid, sizeof wid, "%s-%ld", prefix, n);
    dbx_alloc_fail_at(n);
    dbx_err rc = journal_and_report(ws, wid, res, &got, &gl);
    int hit = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!hit) {
      assert_int_equal(rc, DBX_OK);
      assert_int_equal(gl, rl);
      assert_memory_equal(got, ref, rl);
      free(got);
      break;
    }
    assert_int_equal(rc, DBX_ENOMEM);
    assert_null(got);
    /* the journal has the whole entry or none */
    dbx_journal_entry je;
    assert_int_equal(dbx_wstore_journal_get(ws, NS, wid, RID, "1", &je), DBX_OK);
    if (je.state != DBX_JOURNAL_NONE) {
      assert_int_equal(je.state, DBX_JOURNAL_DONE);
      assert_int_equal(je.attempt, 3);
      assert_string_equal(je.result.result_json, res->result_json);
      assert_string_equal(je.result.failure_message, res->failure_message);
      if (res->failure_type) assert_string_equal(je.result.failure_type, res->failure_type);
      else assert_null(je.result.failure_type);
      assert_int_equal(je.result.non_retryable, res->non_retryable);
    }
    dbx_journal_entry_cleanup(&je);
    /* again without the hook: the same report */
    assert_int_equal(journal_and_report(ws, wid, res, &got, &gl), DBX_OK);
    assert_int_equal(gl, rl);
    assert_memory_equal(got, ref, rl);
    free(got);
    got = NULL;
    assert_true(n < MAX_SWEEP);
  }
  assert_true(n > 3);
  free(ref);
}

static void test_worker_oom_activity_result(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("twoom");
  dbx_wstore *ws = NULL;
  assert_int_equal(dbx_wstore_open(dir, 1, &ws, NULL), DBX_OK);
  dbx_act_result ok = {.result_json = "{\"exit_code\":0,\"output\":\"ok\"}",
                       .failure_message = "a note", .non_retryable = 1};
  dbx_act_result bad = {.result_json = "null", .failure_type = "ExecFailed",
                        .failure_message = "exit code 2", .non_retryable = 0};
  sweep_activity(ws, "ok", &ok);
  sweep_activity(ws, "bad", &bad);
  dbx_wstore_close(ws);
  dbx_test_rmrf(dir);
  free(dir);
}

/* ---- a workflow task carrying update requests: one accepted and answered,
 * one rejected by its validator, one of an unknown name */

static char *upd_validate(void *st, const char *json, size_t len) {
  (void)st, (void)len;
  return json[0] == '-' ? strdup("negative") : NULL; /* libc: the hook is for the worker's allocations */
}
static void upd_run(void *st, dbx_wf *wf, int64_t h, const char *json, size_t len) {
  (void)st;
  char r[64];
  snprintf(r, sizeof r, "{\"got\":%.*s}", (int)len, json);
  dbx_wf_update_complete(wf, h, r);
}
static const dbx_wf_update_def upd_defs[] = {{"set", upd_validate, upd_run, NULL}, {NULL, NULL, NULL, NULL}};
static void *upd_create(dbx_wf *wf, const char *in, size_t len) {
  (void)wf, (void)in, (void)len;
  return malloc(1);
}
static const dbx_workflow_type upd_wf = {.name = "oom.Kinds", .create = upd_create, .destroy = k_destroy,
                                         .updates = upd_defs};

static ProtocolMessage *upd_message(const char *uid, const char *name, const char *arg) {
  UpdateRequest rq = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  Temporal__Api__Common__V1__Payload pl = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Temporal__Api__Common__V1__Payload *pp = &pl;
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  pl.data.data = (uint8_t *)arg;
  pl.data.len = strlen(arg);
  ps.payloads = &pp;
  ps.n_payloads = 1;
  meta.update_id = (char *)uid;
  in.name = (char *)name;
  in.args = &ps;
  rq.meta = &meta;
  rq.input = &in;
  ProtocolMessage m = INIT(TEMPORAL__API__PROTOCOL__V1__MESSAGE);
  Any any = INIT(GOOGLE__PROTOBUF__ANY);
  any.type_url = "type.googleapis.com/temporal.api.update.v1.Request";
  any.value.len = protobuf_c_message_get_packed_size(&rq.base);
  any.value.data = malloc(any.value.len + 1);
  protobuf_c_message_pack(&rq.base, any.value.data);
  m.id = (char *)uid;
  m.protocol_instance_id = (char *)uid;
  m.body = &any;
  size_t len = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = malloc(len + 1);
  protobuf_c_message_pack(&m.base, buf);
  free(any.value.data);
  ProtocolMessage *out = (ProtocolMessage *)protobuf_c_message_unpack(&ProtocolMessage__D, NULL, len, buf);
  free(buf);
  assert_non_null(out);
  return out;
}

static dbx_err upd_answer(const PollWorkflowTaskQueueResponse *t, HistoryEvent **h, size_t n, answer *out) {
  memset(out, 0, sizeof *out);
  dbx_wf_run *r = NULL;
  dbx_wft_answer_ a;
  dbx_err rc = dbx_wft_answer_build_(&upd_wf, t, h, n, NS, "oom-tester", &r, &a);
  if (rc == DBX_OK) {
    out->failed = a.failed;
    if (a.failed) snprintf(out->type, sizeof out->type, "%s", a.failed_rq.failure->application_failure_info->type);
    out->packed = dbx_pb_pack(a.failed ? &a.failed_rq.base : &a.completed.base, &out->len);
    if (!out->packed) rc = DBX_ENOMEM;
  }
  dbx_wft_answer_cleanup_(&a);
  dbx_wf_run_destroy(r);
  return rc;
}

static void test_worker_oom_update_task(void **state) {
  (void)state;
  HistoryEvent *h[3] = {wf_started(1), finish(ev(2, ET(WORKFLOW_TASK_SCHEDULED))), wft_started(3, 0)};
  ProtocolMessage *msgs[3] = {upd_message("u1", "set", "7"), upd_message("u2", "set", "-1"),
                              upd_message("u3", "nope", "1")};
  PollWorkflowTaskQueueResponse t = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  we.workflow_id = "wf-upd";
  we.run_id = RID;
  wt.name = "oom.Kinds";
  t.workflow_execution = &we;
  t.workflow_type = &wt;
  t.started_event_id = 3;
  t.messages = msgs;
  t.n_messages = 3;
  answer want, got;
  assert_int_equal(upd_answer(&t, h, 3, &want), DBX_OK);
  assert_int_equal(want.failed, 0);
  RespondWorkflowTaskCompletedRequest *done = (RespondWorkflowTaskCompletedRequest *)
      protobuf_c_message_unpack(&RespondWorkflowTaskCompletedRequest__D, NULL, want.len, want.packed);
  assert_non_null(done);
  assert_int_equal(done->n_commands, 2);
  assert_int_equal(done->commands[0]->command_type, CT(PROTOCOL_MESSAGE));
  assert_string_equal(done->commands[0]->protocol_message_command_attributes->message_id, "u1/accept");
  assert_string_equal(done->commands[1]->protocol_message_command_attributes->message_id, "u1/response");
  assert_int_equal(done->n_messages, 4);
  assert_string_equal(done->messages[0]->id, "u2/reject");
  assert_string_equal(done->messages[1]->id, "u3/reject");
  assert_string_equal(done->messages[2]->id, "u1/accept");
  assert_string_equal(done->messages[3]->id, "u1/response");
  protobuf_c_message_free_unpacked(&done->base, NULL);
  long n = 1, failing = 0;
  for (;; n++) {
    dbx_alloc_fail_at(n);
    dbx_err rc = upd_answer(&t, h, 3, &got);
    int hit = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!hit) {
      assert_int_equal(rc, DBX_OK);
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.packed, want.packed, want.len);
      free(got.packed);
      break;
    }
    failing++;
    /* never a completion other than the never-failed one */
    if (rc == DBX_OK && got.failed) {
      assert_string_equal(got.type, "WorkerError");
    } else if (rc == DBX_OK) {
      assert_int_equal(got.len, want.len);
      assert_memory_equal(got.packed, want.packed, want.len);
    } else {
      assert_int_equal(rc, DBX_ENOMEM);
    }
    free(got.packed);
    assert_true(n < MAX_SWEEP);
  }
  assert_true(failing > 20);
  print_message("update task: %ld allocations failed one at a time\n", failing);
  free(want.packed);
  for (size_t i = 0; i < 3; i++) protobuf_c_message_free_unpacked(&msgs[i]->base, NULL);
  free_history(h, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_oom_workflow_task),
      cmocka_unit_test(test_worker_oom_code_out_of_memory_fails_the_task),
      cmocka_unit_test(test_worker_oom_activity_result),
      cmocka_unit_test(test_worker_oom_update_task),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
