/* Unit tests for worker/replay: command matching against recorded history,
 * non-determinism reports, timers, signals, queries and the per-run cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"

/* ---- a test workflow: activity (type chosen by g_act_type), then a timer, then complete */

static const char *g_act_type = "sandbox.exec";
static int g_timer_first = 0;

typedef struct {
  int signals;
  char last_result[64];
  int attempts;
} wstate;

static void *t_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  wstate *s = calloc(1, sizeof *s);
  if (g_timer_first)
    dbx_wf_start_timer(wf, 1000);
  else
    dbx_wf_schedule_activity(wf, g_act_type, "{\"command\":\"make\"}", NULL);
  return s;
}
static void t_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  wstate *s = st;
  assert_int_equal(seq, 1);
  snprintf(s->last_result, sizeof s->last_result, "%s", o->result_json);
  s->attempts = o->attempts;
  dbx_wf_start_timer(wf, 1000);
}
static void t_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st;
  assert_int_equal(seq, 2);
  dbx_wf_complete(wf, "{\"ok\":true}");
}
static void t_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)wf, (void)json, (void)len;
  if (strcmp(name, "poke") == 0) ((wstate *)st)->signals++;
}
static char *t_on_query(void *st, const char *name) {
  wstate *s = st;
  if (strcmp(name, "state") != 0) return NULL;
  char *r = malloc(128);
  snprintf(r, 128, "{\"signals\":%d,\"attempts\":%d}", s->signals, s->attempts);
  return r;
}
static void t_destroy(void *st) { free(st); }

static const dbx_workflow_type test_wf = {"test.TwoStep", t_create, t_on_activity, t_on_timer,
                                          t_on_signal, NULL, t_on_query, t_destroy};

/* ---- history builder: events are packed from stack structs and unpacked, so
 * each one is an ordinary protobuf-c allocation. */

static HistoryEvent *finish(HistoryEvent *e) {
  size_t len = protobuf_c_message_get_packed_size(&e->base);
  uint8_t *buf = malloc(len + 1);
  protobuf_c_message_pack(&e->base, buf);
  HistoryEvent *out = (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, len, buf);
  free(buf);
  assert_non_null(out);
  return out;
}

static HistoryEvent *ev_base(int64_t id, int type) {
  static HistoryEvent e;
  static Timestamp ts;
  e = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  ts = (Timestamp)INIT(GOOGLE__PROTOBUF__TIMESTAMP);
  ts.seconds = 1700000000 + id;
  e.event_id = id;
  e.event_type = type;
  e.event_time = &ts;
  return &e;
}

static HistoryEvent *ev_started(int64_t id) {
  HistoryEvent *e = ev_base(id, ET(WORKFLOW_EXECUTION_STARTED));
  WorkflowExecutionStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_STARTED_EVENT_ATTRIBUTES);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = "tq";
  a.task_queue = &tq;
  a.input = dbx_payloads_from_json("{}", 2);
  e->attributes_case = HEV(WORKFLOW_EXECUTION_STARTED);
  e->workflow_execution_started_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.input);
  return r;
}

static HistoryEvent *ev_plain(int64_t id, int type) { return finish(ev_base(id, type)); }

static HistoryEvent *ev_act_sched(int64_t id, const char *aid, const char *type) {
  HistoryEvent *e = ev_base(id, ET(ACTIVITY_TASK_SCHEDULED));
  ActivityTaskScheduledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  at.name = (char *)type;
  a.activity_id = (char *)aid;
  a.activity_type = &at;
  e->attributes_case = HEV(ACTIVITY_TASK_SCHEDULED);
  e->activity_task_scheduled_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_act_started(int64_t id, int64_t sched, int attempt) {
  HistoryEvent *e = ev_base(id, ET(ACTIVITY_TASK_STARTED));
  ActivityTaskStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_STARTED_EVENT_ATTRIBUTES);
  a.scheduled_event_id = sched;
  a.attempt = attempt;
  e->attributes_case = HEV(ACTIVITY_TASK_STARTED);
  e->activity_task_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_act_completed(int64_t id, int64_t sched, int64_t started, const char *json) {
  HistoryEvent *e = ev_base(id, ET(ACTIVITY_TASK_COMPLETED));
  ActivityTaskCompletedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_COMPLETED_EVENT_ATTRIBUTES);
  a.scheduled_event_id = sched;
  a.started_event_id = started;
  a.result = dbx_payloads_from_json(json, strlen(json));
  e->attributes_case = HEV(ACTIVITY_TASK_COMPLETED);
  e->activity_task_completed_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.result);
  return r;
}

static HistoryEvent *ev_timer_started(int64_t id, const char *tid) {
  HistoryEvent *e = ev_base(id, ET(TIMER_STARTED));
  TimerStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__TIMER_STARTED_EVENT_ATTRIBUTES);
  a.timer_id = (char *)tid;
  e->attributes_case = HEV(TIMER_STARTED);
  e->timer_started_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_timer_fired(int64_t id, const char *tid, int64_t started) {
  HistoryEvent *e = ev_base(id, ET(TIMER_FIRED));
  TimerFiredEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__TIMER_FIRED_EVENT_ATTRIBUTES);
  a.timer_id = (char *)tid;
  a.started_event_id = started;
  e->attributes_case = HEV(TIMER_FIRED);
  e->timer_fired_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_signal(int64_t id, const char *name) {
  HistoryEvent *e = ev_base(id, ET(WORKFLOW_EXECUTION_SIGNALED));
  WorkflowExecutionSignaledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_SIGNALED_EVENT_ATTRIBUTES);
  a.signal_name = (char *)name;
  e->attributes_case = HEV(WORKFLOW_EXECUTION_SIGNALED);
  e->workflow_execution_signaled_event_attributes = &a;
  return finish(e);
}

/* The full recorded run of test.TwoStep (16 events); event 5 schedules sandbox.exec. */
static size_t build_history(HistoryEvent **h) {
  size_t n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_plain(2, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(3, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(4, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_act_sched(5, "1", "sandbox.exec");
  h[n++] = ev_act_started(6, 5, 3);
  h[n++] = ev_act_completed(7, 5, 6, "{\"exit_code\":0}");
  h[n++] = ev_plain(8, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(9, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(10, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_timer_started(11, "2");
  h[n++] = ev_timer_fired(12, "2", 11);
  h[n++] = ev_plain(13, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(14, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(15, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_plain(16, ET(WORKFLOW_EXECUTION_COMPLETED));
  return n;
}

static void free_history(HistoryEvent **h, size_t n) {
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&h[i]->base, NULL);
}

static int setup(void **st) {
  (void)st;
  g_act_type = "sandbox.exec";
  g_timer_first = 0;
  return 0;
}

static void test_replay_clean(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&test_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 1);
  assert_int_equal(rep.events, 16);
  assert_int_equal(rep.commands_matched, 3);
  assert_string_equal(rep.message, "");
  free_history(h, n);
}

static void test_replay_nondeterministic_activity_type(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  g_act_type = "sandbox.write_file";
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&test_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 5);
  assert_string_equal(rep.message,
                      "nondeterminism at event 5: history has ActivityTaskScheduled "
                      "'sandbox.exec' (activity id 1), workflow code scheduled 'sandbox.write_file'");
  free_history(h, n);
}

static void test_replay_nondeterministic_timer_for_activity(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  g_timer_first = 1;
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&test_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 5);
  assert_non_null(strstr(rep.message, "workflow code started timer 1"));
  free_history(h, n);
}

static void test_replay_extra_command_is_reported(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  /* Cut after event 10: the task that started timer 2 completed, but its
   * TimerStarted is missing from history. */
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&test_wf, h, 10, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 10);
  assert_non_null(strstr(rep.message, "started timer 2, history has no matching event"));
  free_history(h, n);
}

static void test_replay_timer_and_outcome_routing(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  dbx_wf_run *r = NULL;
  assert_int_equal(dbx_wf_run_create(&test_wf, "wf", "run", &r), DBX_OK);
  /* up to the second task: the activity outcome (attempt 3) arrives, the code starts timer 2 */
  assert_int_equal(dbx_wf_run_apply(r, h, 9, 9), DBX_OK);
  Command **cmds = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &cmds, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  assert_int_equal(cmds[0]->command_type, CT(START_TIMER));
  assert_string_equal(cmds[0]->start_timer_command_attributes->timer_id, "2");
  assert_int_equal(cmds[0]->start_timer_command_attributes->start_to_fire_timeout->seconds, 1);
  dbx_wf_run_commands_free(cmds, nc);
  char *q = NULL;
  assert_int_equal(dbx_wf_run_query(r, "state", &q), DBX_OK);
  assert_string_equal(q, "{\"signals\":0,\"attempts\":3}");
  free(q);
  assert_int_equal(dbx_wf_run_query(r, "nope", &q), DBX_ENOTFOUND);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void pack_all(Command **c, size_t n, uint8_t **out, size_t *len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += protobuf_c_message_get_packed_size(&c[i]->base);
  *out = malloc(total + 1);
  *len = 0;
  for (size_t i = 0; i < n; i++) *len += protobuf_c_message_pack(&c[i]->base, *out + *len);
}

static void test_replay_cache_matches_full_replay(void **st) {
  (void)st;
  HistoryEvent *h[32];
  size_t n = build_history(h);
  /* Cached: task 1 (events 1..3), then task 2 given the full history 1..9. */
  dbx_wf_run *cached = NULL, *fresh = NULL;
  assert_int_equal(dbx_wf_run_create(&test_wf, "wf", "run", &cached), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(cached, h, 3, 3), DBX_OK);
  Command **c1 = NULL;
  size_t n1 = 0;
  assert_int_equal(dbx_wf_run_commands(cached, &c1, &n1), DBX_OK);
  assert_int_equal(n1, 1);
  assert_int_equal(c1[0]->command_type, CT(SCHEDULE_ACTIVITY_TASK));
  assert_string_equal(c1[0]->schedule_activity_task_command_attributes->activity_id, "1");
  assert_string_equal(c1[0]->schedule_activity_task_command_attributes->activity_type->name,
                      "sandbox.exec");
  assert_string_equal(c1[0]->schedule_activity_task_command_attributes->task_queue->name, "tq");
  dbx_wf_run_commands_free(c1, n1);
  assert_int_equal(dbx_wf_run_apply(cached, h, 9, 9), DBX_OK);
  assert_int_equal(dbx_wf_run_last_event_id(cached), 9);
  assert_int_equal(dbx_wf_run_commands_matched(cached), 1);

  assert_int_equal(dbx_wf_run_create(&test_wf, "wf", "run", &fresh), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(fresh, h, 9, 9), DBX_OK);

  Command **a = NULL, **b = NULL;
  size_t na = 0, nb = 0;
  assert_int_equal(dbx_wf_run_commands(cached, &a, &na), DBX_OK);
  assert_int_equal(dbx_wf_run_commands(fresh, &b, &nb), DBX_OK);
  assert_int_equal(na, 1);
  assert_int_equal(nb, 1);
  uint8_t *pa, *pb;
  size_t la, lb;
  pack_all(a, na, &pa, &la);
  pack_all(b, nb, &pb, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(pa, pb, la);
  free(pa), free(pb);
  dbx_wf_run_commands_free(a, na);
  dbx_wf_run_commands_free(b, nb);

  /* A history that skips ahead of the cache is refused, not misapplied. */
  assert_int_equal(dbx_wf_run_apply(cached, h + 11, 3, 14), DBX_EINVAL);
  dbx_wf_run_destroy(cached);
  dbx_wf_run_destroy(fresh);
  free_history(h, n);
}

static void test_replay_signal_before_first_task_and_failed_task_not_activated(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_plain(2, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_signal(3, "poke");
  h[n++] = ev_plain(4, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(5, ET(WORKFLOW_TASK_FAILED)); /* this task's commands were dropped */
  h[n++] = ev_signal(6, "poke");
  h[n++] = ev_plain(7, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(8, ET(WORKFLOW_TASK_STARTED));
  dbx_wf_run *r = NULL;
  assert_int_equal(dbx_wf_run_create(&test_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, n, 8), DBX_OK);
  char *q = NULL;
  assert_int_equal(dbx_wf_run_query(r, "state", &q), DBX_OK);
  assert_string_equal(q, "{\"signals\":2,\"attempts\":0}");
  free(q);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1); /* one ScheduleActivity, from the only activation */
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

/* ---- cancelling an activity: test.CancelAct schedules activity 1; on the
 * workflow's cancellation it asks to cancel that activity (and records the
 * answer); the activity's outcome completes the run. */

static int g_cancel_rc = 99;

static void *c_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  dbx_wf_schedule_activity(wf, "sandbox.create", "{}", NULL);
  return calloc(1, 1);
}
static void c_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq, (void)o;
  dbx_wf_complete(wf, "{}");
}
static void c_on_cancel(void *st, dbx_wf *wf) {
  (void)st;
  g_cancel_rc = dbx_wf_cancel_activity(wf, 1);
}
static const dbx_workflow_type cancel_wf = {"test.CancelAct", c_create, c_on_activity, NULL,
                                            NULL, c_on_cancel, NULL, t_destroy};

static void test_replay_cancel_activity_only_while_pending(void **st) {
  (void)st;
  /* The run's cancellation (event 7) and the activity's completion (event 8)
   * reach the code in one activation, cancellation first: the activity has
   * its outcome already, so no RequestCancelActivityTask is issued (the
   * service would reject it and fail every retry of the task). */
  HistoryEvent *h[16];
  size_t n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_plain(2, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(3, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(4, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_act_sched(5, "1", "sandbox.create");
  h[n++] = ev_act_started(6, 5, 1);
  h[n++] = ev_plain(7, ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED));
  h[n++] = ev_act_completed(8, 5, 6, "{\"sandbox_id\":\"s\"}");
  h[n++] = ev_plain(9, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(10, ET(WORKFLOW_TASK_STARTED));
  dbx_wf_run *r = NULL;
  assert_int_equal(dbx_wf_run_create(&cancel_wf, "wf", "run", &r), DBX_OK);
  g_cancel_rc = 99;
  assert_int_equal(dbx_wf_run_apply(r, h, n, 10), DBX_OK);
  assert_int_equal(g_cancel_rc, -1);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  assert_int_equal(c[0]->command_type, CT(COMPLETE_WORKFLOW_EXECUTION));
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);

  /* Without the completion the activity is pending: the command names its
   * scheduled event. */
  protobuf_c_message_free_unpacked(&h[7]->base, NULL);
  protobuf_c_message_free_unpacked(&h[8]->base, NULL);
  protobuf_c_message_free_unpacked(&h[9]->base, NULL);
  h[7] = ev_plain(8, ET(WORKFLOW_TASK_SCHEDULED));
  h[8] = ev_plain(9, ET(WORKFLOW_TASK_STARTED));
  n = 9;
  assert_int_equal(dbx_wf_run_create(&cancel_wf, "wf", "run", &r), DBX_OK);
  g_cancel_rc = 99;
  assert_int_equal(dbx_wf_run_apply(r, h, n, 9), DBX_OK);
  assert_int_equal(g_cancel_rc, 0);
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  assert_int_equal(c[0]->command_type, CT(REQUEST_CANCEL_ACTIVITY_TASK));
  assert_int_equal(c[0]->request_cancel_activity_task_command_attributes->scheduled_event_id, 5);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

/* ---- one test per command kind: test.Kinds issues the command of scenario
 * g_kind in its first task; g_variant = 1 issues a changed command instead,
 * which replay must report with the event id and both kinds. */

enum {
  KIND_MARKER = 1, KIND_SIDE_EFFECT, KIND_VERSION, KIND_UPSERT_SA, KIND_MEMO, KIND_CAN,
  KIND_CHILD, KIND_CANCEL_CHILD, KIND_SIGNAL_EXT, KIND_CANCEL_TIMER, KIND_WAIT, KIND_FAIL,
  KIND_CANCEL_WF
};

static int g_kind, g_variant, g_side_calls;
static char g_got[256];
static int64_t g_version;

static char *side_fn(void *ud) {
  (void)ud;
  g_side_calls++;
  return dbx_strdup("\"fresh\"");
}

static void k_wait_done(void *st, dbx_wf *wf, int64_t seq, const char *json, size_t len, int timed_out) {
  (void)st;
  snprintf(g_got, sizeof g_got, "wait %lld %s %.*s", (long long)seq, timed_out ? "timeout" : "signal",
           (int)len, json);
  dbx_wf_complete(wf, json);
}

static void *k_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  const char *k1[] = {"CustomKeywordField"}, *v1[] = {"\"blue\""};
  const char *k2[] = {"note"}, *v2[] = {"{\"n\":1}"};
  dbx_child_opts co = {.workflow_id = g_variant ? "kid-2" : "kid-1", .run_timeout_ms = 60000,
                       .parent_close_policy = DBX_PARENT_CLOSE_ABANDON, .maximum_attempts = 2};
  const char *v;
  switch (g_kind) {
  case KIND_MARKER:
    v = dbx_wf_marker_record(wf, g_variant ? "other" : "decision", "\"new\"");
    snprintf(g_got, sizeof g_got, "%s", v ? v : "(null)");
    dbx_wf_complete(wf, v);
    break;
  case KIND_SIDE_EFFECT:
    v = dbx_wf_side_effect(wf, side_fn, NULL);
    snprintf(g_got, sizeof g_got, "%s", v ? v : "(null)");
    dbx_wf_complete(wf, v);
    break;
  case KIND_VERSION:
    g_version = dbx_wf_get_version(wf, g_variant ? "other-change" : "my-change", DBX_WF_DEFAULT_VERSION, 2);
    assert_int_equal(dbx_wf_get_version(wf, g_variant ? "other-change" : "my-change", DBX_WF_DEFAULT_VERSION, 2),
                     g_version);
    dbx_wf_complete(wf, NULL);
    break;
  case KIND_UPSERT_SA:
    if (g_variant) dbx_wf_upsert_memo(wf, k2, v2, 1);
    else dbx_wf_upsert_search_attributes(wf, k1, v1, 1);
    dbx_wf_complete(wf, NULL);
    break;
  case KIND_MEMO:
    if (g_variant) dbx_wf_upsert_search_attributes(wf, k1, v1, 1);
    else dbx_wf_upsert_memo(wf, k2, v2, 1);
    dbx_wf_complete(wf, NULL);
    break;
  case KIND_CAN:
    if (g_variant) dbx_wf_complete(wf, NULL);
    else dbx_wf_continue_as_new(wf, "{\"round\":2}", NULL);
    break;
  case KIND_CHILD:
  case KIND_CANCEL_CHILD: assert_int_equal(dbx_wf_start_child(wf, "test.Kid", "{\"x\":1}", &co), 1); break;
  case KIND_SIGNAL_EXT:
    assert_int_equal(dbx_wf_signal_external(wf, g_variant ? "elsewhere" : "other", NULL, "hello", "{}"), 1);
    break;
  case KIND_CANCEL_TIMER: assert_int_equal(dbx_wf_start_timer(wf, 60000), 1); break;
  case KIND_WAIT: assert_int_equal(dbx_wf_await_signal(wf, "go", 5000), 1); break;
  case KIND_FAIL:
    if (g_variant) dbx_wf_cancel_done(wf);
    else dbx_wf_fail(wf, "Broken", "it broke");
    break;
  case KIND_CANCEL_WF:
    if (g_variant) dbx_wf_fail(wf, "Broken", "it broke");
    else dbx_wf_cancel_done(wf);
    break;
  }
  return calloc(1, 1);
}

static void k_on_child(void *st, dbx_wf *wf, int64_t seq, const dbx_child_outcome *o) {
  (void)st;
  assert_int_equal(seq, 1);
  if (o->status == DBX_CHILD_STARTED) {
    assert_string_equal(o->run_id, "kid-run");
    if (g_kind == KIND_CANCEL_CHILD) assert_int_equal(dbx_wf_cancel_child(wf, 1), g_variant ? -1 : 2);
    return;
  }
  size_t used = strlen(g_got);
  snprintf(g_got + used, sizeof g_got - used, "child %d %s %s", (int)o->status, o->workflow_id,
           o->result_json);
  dbx_wf_complete(wf, o->result_json);
}

static void k_on_external(void *st, dbx_wf *wf, int64_t seq, int failed) {
  (void)st, (void)wf;
  snprintf(g_got + strlen(g_got), sizeof g_got - strlen(g_got), "ext %lld %d;", (long long)seq, failed);
  if (g_kind == KIND_SIGNAL_EXT) dbx_wf_complete(wf, NULL);
}

static void k_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)st, (void)json, (void)len;
  if (g_kind == KIND_CANCEL_TIMER && strcmp(name, "stop") == 0) {
    assert_int_equal(dbx_wf_cancel_timer(wf, g_variant ? 7 : 1), g_variant ? -1 : 0);
    assert_int_equal(dbx_wf_cancel_timer(wf, 1), g_variant ? 0 : -1); /* only once */
    if (g_variant) dbx_wf_start_timer(wf, 10); /* variant: a different command after */
    dbx_wf_complete(wf, NULL);
  }
}

static void k_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st, (void)wf;
  snprintf(g_got, sizeof g_got, "on_timer %lld", (long long)seq); /* must not happen for waits */
}

static const dbx_workflow_type kinds_wf = {
    "test.Kinds", k_create, NULL, k_on_timer, k_on_signal, NULL, NULL, t_destroy,
    k_on_child, k_on_external, k_wait_done, NULL, NULL};

/* ---- builders for the command events and outcomes */

typedef Temporal__Api__History__V1__MarkerRecordedEventAttributes__DetailsEntry hist_detail;

static HistoryEvent *ev_marker(int64_t id, const char *name, const char *k1, const char *v1,
                               const char *k2, const char *v2) {
  HistoryEvent *e = ev_base(id, ET(MARKER_RECORDED));
  MarkerRecordedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES);
  hist_detail d[2] = {INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES__DETAILS_ENTRY),
                      INIT(TEMPORAL__API__HISTORY__V1__MARKER_RECORDED_EVENT_ATTRIBUTES__DETAILS_ENTRY)};
  hist_detail *dp[2] = {&d[0], &d[1]};
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

static HistoryEvent *ev_child_initiated(int64_t id, const char *wid, const char *type) {
  HistoryEvent *e = ev_base(id, ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED));
  StartChildWorkflowExecutionInitiatedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__START_CHILD_WORKFLOW_EXECUTION_INITIATED_EVENT_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = (char *)type;
  a.workflow_id = (char *)wid;
  a.workflow_type = &wt;
  e->attributes_case = HEV(START_CHILD_WORKFLOW_EXECUTION_INITIATED);
  e->start_child_workflow_execution_initiated_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_child_started(int64_t id, int64_t init) {
  HistoryEvent *e = ev_base(id, ET(CHILD_WORKFLOW_EXECUTION_STARTED));
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

static HistoryEvent *ev_child_completed(int64_t id, int64_t init, const char *json) {
  HistoryEvent *e = ev_base(id, ET(CHILD_WORKFLOW_EXECUTION_COMPLETED));
  ChildWorkflowExecutionCompletedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__CHILD_WORKFLOW_EXECUTION_COMPLETED_EVENT_ATTRIBUTES);
  a.initiated_event_id = init;
  a.result = dbx_payloads_from_json(json, strlen(json));
  e->attributes_case = HEV(CHILD_WORKFLOW_EXECUTION_COMPLETED);
  e->child_workflow_execution_completed_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.result);
  return r;
}

static HistoryEvent *ev_child_canceled(int64_t id, int64_t init) {
  HistoryEvent *e = ev_base(id, ET(CHILD_WORKFLOW_EXECUTION_CANCELED));
  ChildWorkflowExecutionCanceledEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__CHILD_WORKFLOW_EXECUTION_CANCELED_EVENT_ATTRIBUTES);
  a.initiated_event_id = init;
  e->attributes_case = HEV(CHILD_WORKFLOW_EXECUTION_CANCELED);
  e->child_workflow_execution_canceled_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_child_start_failed(int64_t id, int64_t init) {
  HistoryEvent *e = ev_base(id, ET(START_CHILD_WORKFLOW_EXECUTION_FAILED));
  StartChildWorkflowExecutionFailedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__START_CHILD_WORKFLOW_EXECUTION_FAILED_EVENT_ATTRIBUTES);
  a.initiated_event_id = init;
  a.workflow_id = "kid-1";
  a.cause = TEMPORAL__API__ENUMS__V1__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE_WORKFLOW_ALREADY_EXISTS;
  e->attributes_case = HEV(START_CHILD_WORKFLOW_EXECUTION_FAILED);
  e->start_child_workflow_execution_failed_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_ext_initiated(int64_t id, int signal, const char *wid) {
  HistoryEvent *e = ev_base(id, signal ? ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
                                       : ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED));
  SignalExternalWorkflowExecutionInitiatedEventAttributes s =
      INIT(TEMPORAL__API__HISTORY__V1__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED_EVENT_ATTRIBUTES);
  RequestCancelExternalWorkflowExecutionInitiatedEventAttributes c =
      INIT(TEMPORAL__API__HISTORY__V1__REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED_EVENT_ATTRIBUTES);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wid;
  if (signal) {
    s.workflow_execution = &we;
    s.signal_name = "hello";
    e->attributes_case = HEV(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED);
    e->signal_external_workflow_execution_initiated_event_attributes = &s;
  } else {
    c.workflow_execution = &we;
    c.child_workflow_only = 1;
    e->attributes_case = HEV(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED);
    e->request_cancel_external_workflow_execution_initiated_event_attributes = &c;
  }
  return finish(e);
}

static HistoryEvent *ev_ext_done(int64_t id, int signal, int64_t init) {
  HistoryEvent *e = ev_base(id, signal ? ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED)
                                       : ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED));
  ExternalWorkflowExecutionSignaledEventAttributes s =
      INIT(TEMPORAL__API__HISTORY__V1__EXTERNAL_WORKFLOW_EXECUTION_SIGNALED_EVENT_ATTRIBUTES);
  ExternalWorkflowExecutionCancelRequestedEventAttributes c =
      INIT(TEMPORAL__API__HISTORY__V1__EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED_EVENT_ATTRIBUTES);
  if (signal) {
    s.initiated_event_id = init;
    e->attributes_case = HEV(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED);
    e->external_workflow_execution_signaled_event_attributes = &s;
  } else {
    c.initiated_event_id = init;
    e->attributes_case = HEV(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED);
    e->external_workflow_execution_cancel_requested_event_attributes = &c;
  }
  return finish(e);
}

static HistoryEvent *ev_timer_canceled(int64_t id, const char *tid, int64_t started) {
  HistoryEvent *e = ev_base(id, ET(TIMER_CANCELED));
  TimerCanceledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__TIMER_CANCELED_EVENT_ATTRIBUTES);
  a.timer_id = (char *)tid;
  a.started_event_id = started;
  e->attributes_case = HEV(TIMER_CANCELED);
  e->timer_canceled_event_attributes = &a;
  return finish(e);
}

static HistoryEvent *ev_signal_input(int64_t id, const char *name, const char *json) {
  HistoryEvent *e = ev_base(id, ET(WORKFLOW_EXECUTION_SIGNALED));
  WorkflowExecutionSignaledEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_SIGNALED_EVENT_ATTRIBUTES);
  a.signal_name = (char *)name;
  a.input = dbx_payloads_from_json(json, strlen(json));
  e->attributes_case = HEV(WORKFLOW_EXECUTION_SIGNALED);
  e->workflow_execution_signaled_event_attributes = &a;
  HistoryEvent *r = finish(e);
  dbx_payloads_free(a.input);
  return r;
}

/* Events 1..4: started, the first task, completed. */
static size_t first_task(HistoryEvent **h) {
  h[0] = ev_started(1);
  h[1] = ev_plain(2, ET(WORKFLOW_TASK_SCHEDULED));
  h[2] = ev_plain(3, ET(WORKFLOW_TASK_STARTED));
  h[3] = ev_plain(4, ET(WORKFLOW_TASK_COMPLETED));
  return 4;
}

/* Another task at events id..id+2. */
static size_t next_task(HistoryEvent **h, size_t n, int64_t id) {
  h[n++] = ev_plain(id, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(id + 1, ET(WORKFLOW_TASK_STARTED));
  h[n++] = ev_plain(id + 2, ET(WORKFLOW_TASK_COMPLETED));
  return n;
}

static void kinds_setup(int kind, int variant) {
  g_kind = kind;
  g_variant = variant;
  g_side_calls = 0;
  g_got[0] = 0;
  g_version = 99;
}

/* Replay h with scenario kind: variant 0 must match; variant 1 must be
 * reported at event bad_event with the message containing want. */
static void replay_both(int kind, HistoryEvent **h, size_t n, int64_t matched, int64_t bad_event,
                        const char *want) {
  dbx_replay_report rep;
  kinds_setup(kind, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("kind %d: %s", kind, rep.message);
  assert_int_equal(rep.commands_matched, matched);
  char got[256];
  snprintf(got, sizeof got, "%s", g_got);
  kinds_setup(kind, 1);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, bad_event);
  if (!strstr(rep.message, want)) fail_msg("kind %d: message '%s' lacks '%s'", kind, rep.message, want);
  snprintf(g_got, sizeof g_got, "%s", got);
}

static void test_replay_kind_marker_read_back(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_marker(5, "decision", "data", "\"recorded\"", NULL, NULL);
  h[n++] = ev_plain(6, ET(WORKFLOW_EXECUTION_COMPLETED));
  replay_both(KIND_MARKER, h, n, 2, 5,
              "nondeterminism at event 5: history has MarkerRecorded 'decision', workflow code recorded marker 'other'");
  assert_string_equal(g_got, "\"recorded\""); /* the recorded value, not the new one */
  /* the first execution records the given value */
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_MARKER, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  assert_string_equal(g_got, "\"new\"");
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 2);
  assert_int_equal(c[0]->command_type, CT(RECORD_MARKER));
  assert_string_equal(c[0]->record_marker_command_attributes->marker_name, "decision");
  assert_int_equal(c[0]->record_marker_command_attributes->n_details, 1);
  assert_string_equal(c[0]->record_marker_command_attributes->details[0]->key, "data");
  char *j = dbx_payloads_to_json(c[0]->record_marker_command_attributes->details[0]->value);
  assert_string_equal(j, "\"new\"");
  free(j);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_side_effect_runs_once(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_marker(5, "SideEffect", "data", "\"first\"", NULL, NULL);
  h[n++] = ev_plain(6, ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_replay_report rep;
  kinds_setup(KIND_SIDE_EFFECT, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 1);
  assert_int_equal(g_side_calls, 0);
  assert_string_equal(g_got, "\"first\"");
  /* first execution: fn runs once and its value is recorded */
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_SIDE_EFFECT, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  assert_int_equal(g_side_calls, 1);
  assert_string_equal(g_got, "\"fresh\"");
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  const RecordMarkerCommandAttributes *m = c[0]->record_marker_command_attributes;
  assert_string_equal(m->marker_name, "SideEffect");
  assert_int_equal(m->n_details, 2);
  assert_string_equal(m->details[0]->key, "side-effect-id");
  assert_string_equal(m->details[1]->key, "data");
  char *j0 = dbx_payloads_to_json(m->details[0]->value), *j1 = dbx_payloads_to_json(m->details[1]->value);
  assert_string_equal(j0, "1");
  assert_string_equal(j1, "\"fresh\"");
  free(j0), free(j1);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_version_marker(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_marker(5, "Version", "change-id", "\"my-change\"", "version", "1");
  h[n++] = ev_plain(6, ET(WORKFLOW_EXECUTION_COMPLETED));
  /* variant asks for another change id: no marker for it, so DEFAULT and no
   * command; the recorded Version marker then has no command */
  replay_both(KIND_VERSION, h, n, 2, 5,
              "nondeterminism at event 5: history has MarkerRecorded 'Version', workflow code completed the workflow");
  kinds_setup(KIND_VERSION, 0);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(g_version, 1); /* the recorded version, not max (2) */
  /* a history from before the change (no marker): DEFAULT, nothing recorded */
  HistoryEvent *old[8];
  size_t no = first_task(old);
  old[no++] = ev_plain(5, ET(WORKFLOW_EXECUTION_COMPLETED));
  assert_int_equal(dbx_replay_run(&kinds_wf, old, no, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 1);
  assert_int_equal(g_version, DBX_WF_DEFAULT_VERSION);
  /* first execution: max, recorded as the Go SDK does */
  dbx_wf_run *r = NULL;
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  assert_int_equal(g_version, 2);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 2);
  const RecordMarkerCommandAttributes *m = c[0]->record_marker_command_attributes;
  assert_string_equal(m->marker_name, "Version");
  assert_int_equal(m->n_details, 2);
  assert_string_equal(m->details[0]->key, "change-id");
  assert_string_equal(m->details[1]->key, "version");
  char *j0 = dbx_payloads_to_json(m->details[0]->value), *j1 = dbx_payloads_to_json(m->details[1]->value);
  assert_string_equal(j0, "\"my-change\"");
  assert_string_equal(j1, "2");
  free(j0), free(j1);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(old, no);
  free_history(h, n);
}

static void test_replay_kind_upsert_search_attributes(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_plain(5, ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES));
  h[n++] = ev_plain(6, ET(WORKFLOW_EXECUTION_COMPLETED));
  replay_both(KIND_UPSERT_SA, h, n, 2, 5,
              "nondeterminism at event 5: history has UpsertWorkflowSearchAttributes, workflow code modified the memo");
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_UPSERT_SA, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(c[0]->command_type, CT(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES));
  const SearchAttributes *sa = c[0]->upsert_workflow_search_attributes_command_attributes->search_attributes;
  assert_int_equal(sa->n_indexed_fields, 1);
  assert_string_equal(sa->indexed_fields[0]->key, "CustomKeywordField");
  assert_memory_equal(sa->indexed_fields[0]->value->data.data, "\"blue\"", 6);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_modify_memo(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_plain(5, ET(WORKFLOW_PROPERTIES_MODIFIED));
  h[n++] = ev_plain(6, ET(WORKFLOW_EXECUTION_COMPLETED));
  replay_both(KIND_MEMO, h, n, 2, 5,
              "nondeterminism at event 5: history has WorkflowPropertiesModified, workflow code upserted search attributes");
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_MEMO, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(c[0]->command_type, CT(MODIFY_WORKFLOW_PROPERTIES));
  const Memo *m = c[0]->modify_workflow_properties_command_attributes->upserted_memo;
  assert_int_equal(m->n_fields, 1);
  assert_string_equal(m->fields[0]->key, "note");
  assert_memory_equal(m->fields[0]->value->data.data, "{\"n\":1}", 7);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_continue_as_new(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_plain(5, ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
  replay_both(KIND_CAN, h, n, 1, 5,
              "nondeterminism at event 5: history has WorkflowExecutionContinuedAsNew, workflow code completed the workflow");
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_CAN, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  assert_int_equal(dbx_wf_run_closed(r), 1);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  const ContinueAsNewWorkflowExecutionCommandAttributes *a =
      c[0]->continue_as_new_workflow_execution_command_attributes;
  assert_string_equal(a->workflow_type->name, "test.Kinds");
  assert_string_equal(a->task_queue->name, "tq");
  char *j = dbx_payloads_to_json(a->input);
  assert_string_equal(j, "{\"round\":2}");
  free(j);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_child_workflow(void **st) {
  (void)st;
  HistoryEvent *h[24];
  size_t n = first_task(h);
  h[n++] = ev_child_initiated(5, "kid-1", "test.Kid");
  h[n++] = ev_child_started(6, 5);
  n = next_task(h, n, 7);
  h[n++] = ev_child_completed(10, 5, "{\"kid\":\"done\"}");
  n = next_task(h, n, 11);
  h[n++] = ev_plain(14, ET(WORKFLOW_EXECUTION_COMPLETED));
  replay_both(KIND_CHILD, h, n, 2, 5,
              "nondeterminism at event 5: history has StartChildWorkflowExecutionInitiated 'test.Kid' (workflow id kid-1), "
              "workflow code started child workflow 'test.Kid' (workflow id kid-2)");
  assert_string_equal(g_got, "child 3 kid-1 {\"kid\":\"done\"}");
  /* the command the first execution sends */
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_CHILD, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, 3, 3), DBX_OK);
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  const StartChildWorkflowExecutionCommandAttributes *a = c[0]->start_child_workflow_execution_command_attributes;
  assert_string_equal(a->workflow_id, "kid-1");
  assert_string_equal(a->workflow_type->name, "test.Kid");
  assert_string_equal(a->task_queue->name, "tq");
  assert_int_equal(a->workflow_run_timeout->seconds, 60);
  assert_int_equal(a->parent_close_policy, DBX_PARENT_CLOSE_ABANDON);
  assert_int_equal(a->retry_policy->maximum_attempts, 2);
  char *j = dbx_payloads_to_json(a->input);
  assert_string_equal(j, "{\"x\":1}");
  free(j);
  char *q = NULL;
  assert_int_equal(dbx_wf_run_query(r, "__stack_trace", &q), DBX_OK);
  assert_non_null(strstr(q, "child workflow 1 'test.Kid'"));
  free(q);
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);

  /* WORKFLOW_ALREADY_EXISTS reaches on_child as START_FAILED */
  n = first_task(h);
  h[n++] = ev_child_initiated(5, "kid-1", "test.Kid");
  h[n++] = ev_child_start_failed(6, 5);
  n = next_task(h, n, 7);
  h[n++] = ev_plain(10, ET(WORKFLOW_EXECUTION_COMPLETED));
  kinds_setup(KIND_CHILD, 0);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 1);
  assert_string_equal(g_got, "child 2 kid-1 null");
  free_history(h, n);
}

static void test_replay_kind_cancel_child(void **st) {
  (void)st;
  HistoryEvent *h[24];
  size_t n = first_task(h);
  h[n++] = ev_child_initiated(5, "kid-1", "test.Kid");
  h[n++] = ev_child_started(6, 5);
  n = next_task(h, n, 7);
  h[n++] = ev_ext_initiated(10, 0, "kid-1");
  h[n++] = ev_ext_done(11, 0, 10);
  h[n++] = ev_child_canceled(12, 5);
  n = next_task(h, n, 13);
  h[n++] = ev_plain(16, ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_replay_report rep;
  kinds_setup(KIND_CANCEL_CHILD, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("%s", rep.message);
  assert_int_equal(rep.commands_matched, 3);
  assert_string_equal(g_got, "ext 2 0;child 5 kid-1 null");
  /* variant: the code does not ask to cancel (cancel_child refused) */
  kinds_setup(KIND_CANCEL_CHILD, 1);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 5);
  assert_non_null(strstr(rep.message, "StartChildWorkflowExecutionInitiated"));
  free_history(h, n);
  /* a changed cancel target: the history asks to cancel another workflow */
  n = first_task(h);
  h[n++] = ev_child_initiated(5, "kid-1", "test.Kid");
  h[n++] = ev_child_started(6, 5);
  n = next_task(h, n, 7);
  h[n++] = ev_ext_initiated(10, 0, "someone-else");
  kinds_setup(KIND_CANCEL_CHILD, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 10);
  assert_string_equal(rep.message,
                      "nondeterminism at event 10: history has RequestCancelExternalWorkflowExecutionInitiated "
                      "(workflow id someone-else), workflow code requested cancellation of workflow kid-1");
  free_history(h, n);
}

static void test_replay_kind_signal_external(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_ext_initiated(5, 1, "other");
  h[n++] = ev_ext_done(6, 1, 5);
  n = next_task(h, n, 7);
  h[n++] = ev_plain(10, ET(WORKFLOW_EXECUTION_COMPLETED));
  replay_both(KIND_SIGNAL_EXT, h, n, 2, 5,
              "nondeterminism at event 5: history has SignalExternalWorkflowExecutionInitiated 'hello' (workflow id other), "
              "workflow code signalled 'hello' to workflow elsewhere");
  assert_string_equal(g_got, "ext 1 0;");
  free_history(h, n);
}

static void test_replay_kind_cancel_timer(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_timer_started(5, "1");
  h[n++] = ev_signal(6, "stop");
  n = next_task(h, n, 7);
  h[n++] = ev_timer_canceled(10, "1", 5);
  h[n++] = ev_plain(11, ET(WORKFLOW_EXECUTION_COMPLETED));
  /* variant cancels a wrong id (refused), then timer 1, then starts timer 2 */
  replay_both(KIND_CANCEL_TIMER, h, n, 3, 11,
              "nondeterminism at event 11: history has WorkflowExecutionCompleted, workflow code started timer 2");
  /* a TimerCanceled for another timer id */
  protobuf_c_message_free_unpacked(&h[9]->base, NULL);
  h[9] = ev_timer_canceled(10, "9", 5);
  kinds_setup(KIND_CANCEL_TIMER, 0);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 0);
  assert_int_equal(rep.event_id, 10);
  assert_string_equal(rep.message,
                      "nondeterminism at event 10: history has TimerCanceled (timer id 9), workflow code cancelled timer 1");
  free_history(h, n);
}

static void test_replay_kind_await_signal_both_ways(void **st) {
  (void)st;
  /* the signal first: the wait's timer (seq 2) is cancelled */
  HistoryEvent *h[16];
  size_t n = first_task(h);
  h[n++] = ev_timer_started(5, "2");
  h[n++] = ev_signal_input(6, "go", "{\"v\":7}");
  n = next_task(h, n, 7);
  h[n++] = ev_timer_canceled(10, "2", 5);
  h[n++] = ev_plain(11, ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_replay_report rep;
  kinds_setup(KIND_WAIT, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("%s", rep.message);
  assert_int_equal(rep.commands_matched, 3);
  assert_string_equal(g_got, "wait 1 signal {\"v\":7}");
  free_history(h, n);
  /* the timer first: the wait times out, on_timer is not called */
  n = first_task(h);
  h[n++] = ev_timer_started(5, "2");
  h[n++] = ev_timer_fired(6, "2", 5);
  n = next_task(h, n, 7);
  h[n++] = ev_plain(10, ET(WORKFLOW_EXECUTION_COMPLETED));
  kinds_setup(KIND_WAIT, 0);
  assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("%s", rep.message);
  assert_string_equal(g_got, "wait 1 timeout null");
  free_history(h, n);
  /* both in one activation, signal first: the StartTimer is never sent */
  n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_signal_input(2, "go", "1");
  h[n++] = ev_plain(3, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(4, ET(WORKFLOW_TASK_STARTED));
  dbx_wf_run *r = NULL;
  kinds_setup(KIND_WAIT, 0);
  assert_int_equal(dbx_wf_run_create(&kinds_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, n, 4), DBX_OK);
  assert_string_equal(g_got, "wait 1 signal 1"); /* signal-with-start reaches a wait begun in create */
  Command **c = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &c, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  assert_int_equal(c[0]->command_type, CT(COMPLETE_WORKFLOW_EXECUTION));
  dbx_wf_run_commands_free(c, nc);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

static void test_replay_kind_fail_and_cancel_workflow(void **st) {
  (void)st;
  HistoryEvent *h[8];
  size_t n = first_task(h);
  h[n++] = ev_plain(5, ET(WORKFLOW_EXECUTION_FAILED));
  replay_both(KIND_FAIL, h, n, 1, 5,
              "nondeterminism at event 5: history has WorkflowExecutionFailed, workflow code canceled the workflow");
  free_history(h, n);
  n = first_task(h);
  h[n++] = ev_plain(5, ET(WORKFLOW_EXECUTION_CANCELED));
  replay_both(KIND_CANCEL_WF, h, n, 1, 5,
              "nondeterminism at event 5: history has WorkflowExecutionCanceled, workflow code failed the workflow");
  free_history(h, n);
}

/* Events of the new kinds without their attributes (bad input) never crash:
 * a command event is a mismatch at its id, an outcome event is ignored. */
static void test_replay_events_without_attributes(void **st) {
  (void)st;
  static const int command_events[] = {
      ET(MARKER_RECORDED), ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED), ET(TIMER_CANCELED),
      ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED), ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)};
  static const int kinds[] = {KIND_MARKER, KIND_CHILD, KIND_CANCEL_TIMER, KIND_SIGNAL_EXT, KIND_CANCEL_CHILD};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    HistoryEvent *h[8];
    size_t n = first_task(h);
    h[n++] = ev_plain(5, command_events[k]);
    dbx_replay_report rep;
    kinds_setup(kinds[k], 0);
    assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
    assert_int_equal(rep.deterministic, 0);
    assert_int_equal(rep.event_id, 5);
    free_history(h, n);
  }
  static const int outcomes[] = {
      ET(CHILD_WORKFLOW_EXECUTION_STARTED), ET(CHILD_WORKFLOW_EXECUTION_COMPLETED),
      ET(CHILD_WORKFLOW_EXECUTION_FAILED), ET(START_CHILD_WORKFLOW_EXECUTION_FAILED),
      ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED), ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED),
      ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED), ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED)};
  for (size_t k = 0; k < sizeof outcomes / sizeof outcomes[0]; k++) {
    HistoryEvent *h[12];
    size_t n = first_task(h);
    h[n++] = ev_child_initiated(5, "kid-1", "test.Kid");
    h[n++] = ev_plain(6, outcomes[k]);
    n = next_task(h, n, 7);
    dbx_replay_report rep;
    kinds_setup(KIND_CHILD, 0);
    assert_int_equal(dbx_replay_run(&kinds_wf, h, n, &rep), DBX_OK);
    assert_int_equal(rep.deterministic, 1);
    assert_string_equal(g_got, ""); /* no outcome reached the code */
    free_history(h, n);
  }
}

/* ---- queries, signal handlers by name, history length */

static int g_named_signals;
static void q_sig(void *st, dbx_wf *wf, const char *json, size_t len) {
  (void)st, (void)wf, (void)json, (void)len;
  g_named_signals++;
}
static char *q_echo(void *st, const char *args, size_t len) {
  (void)st;
  char *r = malloc(len + 16);
  snprintf(r, len + 16, "{\"echo\":%.*s}", (int)len, args);
  return r;
}
static const dbx_wf_signal_def q_signals[] = {{"poke", q_sig, "count a poke"}, {NULL, NULL, NULL}};
static const dbx_wf_query_def q_queries[] = {{"echo", q_echo, "echo the argument"}, {NULL, NULL, NULL}};
static int64_t g_hist_len, g_hist_bytes;
static int g_suggest;
static void *q_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  g_hist_len = dbx_wf_history_length(wf);
  g_hist_bytes = dbx_wf_history_size_bytes(wf);
  g_suggest = dbx_wf_continue_as_new_suggested(wf);
  dbx_wf_schedule_activity(wf, "sandbox.exec", "{}", NULL);
  dbx_wf_start_timer(wf, 5000);
  dbx_wf_await_signal(wf, "go", 0);
  return calloc(1, sizeof(wstate));
}
static const dbx_workflow_type query_wf = {"test.Queries", q_create, NULL, NULL, t_on_signal, NULL,
                                           t_on_query, t_destroy, NULL, NULL, NULL, q_signals, q_queries};

static void test_replay_queries_builtins_and_handlers(void **st) {
  (void)st;
  HistoryEvent *h[8];
  size_t n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_signal(2, "poke"); /* signal-with-start: before the first task */
  h[n++] = ev_plain(3, ET(WORKFLOW_TASK_SCHEDULED));
  HistoryEvent *e = ev_base(4, ET(WORKFLOW_TASK_STARTED));
  WorkflowTaskStartedEventAttributes a = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_STARTED_EVENT_ATTRIBUTES);
  a.history_size_bytes = 4242;
  a.suggest_continue_as_new = 1;
  e->attributes_case = HEV(WORKFLOW_TASK_STARTED);
  e->workflow_task_started_event_attributes = &a;
  h[n++] = finish(e);
  dbx_wf_run *r = NULL;
  g_named_signals = 0;
  assert_int_equal(dbx_wf_run_create(&query_wf, "wf", "run", &r), DBX_OK);
  assert_int_equal(dbx_wf_run_apply(r, h, n, 4), DBX_OK);
  assert_int_equal(g_hist_len, 4);
  assert_int_equal(g_hist_bytes, 4242);
  assert_int_equal(g_suggest, 1);
  assert_int_equal(g_named_signals, 1); /* the named handler, not on_signal */
  char *q = NULL;
  assert_int_equal(dbx_wf_run_query(r, "state", &q), DBX_OK);
  assert_string_equal(q, "{\"signals\":0,\"attempts\":0}");
  free(q);
  assert_int_equal(dbx_wf_run_query_args(r, "echo", "[1,2]", 5, &q), DBX_OK);
  assert_string_equal(q, "{\"echo\":[1,2]}");
  free(q);
  assert_int_equal(dbx_wf_run_query(r, "__stack_trace", &q), DBX_OK);
  assert_string_equal(q, "\"workflow test.Queries (wf/run), blocked on:\\n  activity 1 'sandbox.exec'\\n"
                         "  timer 2\\n  signal 'go' (wait 3)\\n\"");
  free(q);
  assert_int_equal(dbx_wf_run_query(r, "__temporal_workflow_metadata", &q), DBX_OK);
  assert_string_equal(q, "{\"definition\":{\"type\":\"test.Queries\",\"queryDefinitions\":["
                         "{\"name\":\"__stack_trace\",\"description\":\"what the workflow is blocked on\"},"
                         "{\"name\":\"__temporal_workflow_metadata\",\"description\":\"the workflow's type, queries and signals\"},"
                         "{\"name\":\"echo\",\"description\":\"echo the argument\"}],"
                         "\"signalDefinitions\":[{\"name\":\"poke\",\"description\":\"count a poke\"}],"
                         "\"updateDefinitions\":[]},\"currentDetails\":\"\"}");
  free(q);
  assert_int_equal(dbx_wf_run_query(r, "nope", &q), DBX_ENOTFOUND);
  dbx_wf_run_destroy(r);
  free_history(h, n);
}

/* ---- updates: validator, handler, a handle completed later, replay */

typedef struct {
  int64_t n, pending;
} ustate;

static char *u_validate(void *st, const char *json, size_t len) {
  (void)st, (void)len;
  return atoi(json) < 0 ? dbx_asprintf("negative %s", json) : NULL;
}
static void u_inc(void *st, dbx_wf *wf, int64_t h, const char *json, size_t len) {
  (void)len;
  ustate *u = st;
  int v = atoi(json);
  u->n += v;
  if (v == 0) { /* long-running: answered when the timer fires */
    u->pending = h;
    dbx_wf_start_timer(wf, 1000);
    return;
  }
  char *r = dbx_asprintf("{\"n\":%lld}", (long long)u->n);
  assert_int_equal(dbx_wf_update_complete(wf, h, r), 0);
  assert_int_equal(dbx_wf_update_complete(wf, h, r), -1);
  free(r);
}
static void u_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)seq;
  ustate *u = st;
  assert_string_equal(dbx_wf_update_id(wf, u->pending), "u4");
  assert_int_equal(dbx_wf_update_fail(wf, u->pending, "Late", "timer"), 0);
}
static void u_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)wf, (void)name, (void)json, (void)len;
  ((ustate *)st)->n *= 10;
}
static void *u_create(dbx_wf *wf, const char *in, size_t len) {
  (void)wf, (void)in, (void)len;
  return calloc(1, sizeof(ustate));
}
static const dbx_wf_update_def u_defs[] = {{"inc", u_validate, u_inc, "add"}, {NULL, NULL, NULL, NULL}};
static const dbx_workflow_type upd_wf = {.name = "test.Upd", .create = u_create, .on_timer = u_on_timer,
                                         .on_signal = u_on_signal, .destroy = t_destroy, .updates = u_defs};
static const dbx_workflow_type upd_wf_none = {.name = "test.Upd", .create = u_create, .on_timer = u_on_timer,
                                              .on_signal = u_on_signal, .destroy = t_destroy};

static ProtobufCMessage *u_request(const char *uid, const char *name, const char *arg) {
  UpdateRequest rq = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  meta.update_id = (char *)uid;
  in.name = (char *)name;
  in.args = dbx_payloads_from_json(arg, strlen(arg));
  rq.meta = &meta;
  rq.input = &in;
  ProtobufCMessage *m = dbx_pb_clone(&rq.base);
  dbx_payloads_free(in.args);
  assert_non_null(m);
  return m;
}

static ProtocolMessage *u_message(const char *uid, const char *name, const char *arg, int64_t seq_ev) {
  ProtocolMessage m = INIT(TEMPORAL__API__PROTOCOL__V1__MESSAGE);
  Any any = INIT(GOOGLE__PROTOBUF__ANY);
  ProtobufCMessage *rq = u_request(uid, name, arg);
  char id[64];
  snprintf(id, sizeof id, "%s/request", uid);
  any.type_url = "type.googleapis.com/temporal.api.update.v1.Request";
  any.value.data = dbx_pb_pack(rq, &any.value.len);
  m.id = id;
  m.protocol_instance_id = (char *)uid;
  m.sequencing_id_case = TEMPORAL__API__PROTOCOL__V1__MESSAGE__SEQUENCING_ID_EVENT_ID;
  m.event_id = seq_ev;
  m.body = &any;
  ProtocolMessage *out = (ProtocolMessage *)dbx_pb_clone(&m.base);
  free(any.value.data);
  protobuf_c_message_free_unpacked(rq, NULL);
  assert_non_null(out);
  return out;
}

static HistoryEvent *ev_upd_accepted(int64_t id, const char *uid, const char *arg) {
  HistoryEvent *e = ev_base(id, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED));
  WorkflowExecutionUpdateAcceptedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_UPDATE_ACCEPTED_EVENT_ATTRIBUTES);
  a.protocol_instance_id = (char *)uid;
  a.accepted_request_message_id = "x/request";
  a.accepted_request = (UpdateRequest *)u_request(uid, "inc", arg);
  e->attributes_case = HEV(WORKFLOW_EXECUTION_UPDATE_ACCEPTED);
  e->workflow_execution_update_accepted_event_attributes = &a;
  HistoryEvent *r = finish(e);
  protobuf_c_message_free_unpacked(&a.accepted_request->base, NULL);
  return r;
}

static HistoryEvent *ev_upd_completed(int64_t id, const char *uid) {
  HistoryEvent *e = ev_base(id, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED));
  WorkflowExecutionUpdateCompletedEventAttributes a =
      INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_UPDATE_COMPLETED_EVENT_ATTRIBUTES);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  meta.update_id = (char *)uid;
  a.meta = &meta;
  e->attributes_case = HEV(WORKFLOW_EXECUTION_UPDATE_COMPLETED);
  e->workflow_execution_update_completed_event_attributes = &a;
  return finish(e);
}

/* The body of message m (unpacked with d; free it). */
static ProtobufCMessage *u_body(const ProtocolMessage *m, const ProtobufCMessageDescriptor *d, const char *kind) {
  char url[96];
  snprintf(url, sizeof url, "type.googleapis.com/temporal.api.update.v1.%s", kind);
  assert_non_null(m->body);
  assert_string_equal(m->body->type_url, url);
  ProtobufCMessage *b = dbx_pb_unpack(d, m->body->value.data, m->body->value.len);
  assert_non_null(b);
  return b;
}

static void test_replay_updates_accept_reject_and_replay(void **st) {
  (void)st;
  HistoryEvent *h[16];
  size_t n = 0;
  h[n++] = ev_started(1);
  h[n++] = ev_plain(2, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_signal(3, "s"); /* signals run before the task's updates: 0 * 10, then + 2 */
  h[n++] = ev_plain(4, ET(WORKFLOW_TASK_STARTED));
  ProtocolMessage *msgs[4] = {u_message("u1", "inc", "2", 3), u_message("u2", "zz", "1", 3),
                              u_message("u3", "inc", "-1", 3), u_message("u4", "inc", "0", 3)};
  dbx_wf_run *r = NULL;
  assert_int_equal(dbx_wf_run_create(&upd_wf, "w", "r", &r), DBX_OK);
  dbx_wf_run_set_messages(r, msgs, 4);
  assert_int_equal(dbx_wf_run_apply(r, h, n, 4), DBX_OK);
  dbx_wf_run_set_messages(r, NULL, 0);
  Command **cmds = NULL;
  size_t nc = 0;
  assert_int_equal(dbx_wf_run_commands(r, &cmds, &nc), DBX_OK);
  assert_int_equal(nc, 4);
  const char *want_ids[] = {"u1/accept", "u1/response", "u4/accept"};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(cmds[i]->command_type, CT(PROTOCOL_MESSAGE));
    assert_string_equal(cmds[i]->protocol_message_command_attributes->message_id, want_ids[i]);
  }
  assert_int_equal(cmds[3]->command_type, CT(START_TIMER));
  dbx_wf_run_commands_free(cmds, nc);
  ProtocolMessage **out = NULL;
  size_t nm = 0;
  assert_int_equal(dbx_wf_run_messages(r, &out, &nm), DBX_OK);
  assert_int_equal(nm, 5);
  assert_string_equal(out[0]->id, "u2/reject");
  UpdateRejection *rej = (UpdateRejection *)u_body(out[0], &UpdateRejection__D, "Rejection");
  assert_string_equal(rej->failure->message, "update 'zz' is not handled by workflow type 'test.Upd'");
  assert_string_equal(rej->failure->application_failure_info->type, "UnknownUpdate");
  assert_string_equal(rej->rejected_request_message_id, "u2/request");
  assert_int_equal(rej->rejected_request_sequencing_event_id, 3);
  protobuf_c_message_free_unpacked(&rej->base, NULL);
  assert_string_equal(out[1]->id, "u3/reject");
  rej = (UpdateRejection *)u_body(out[1], &UpdateRejection__D, "Rejection");
  assert_string_equal(rej->failure->message, "negative -1");
  assert_string_equal(rej->failure->application_failure_info->type, "ValidationError");
  protobuf_c_message_free_unpacked(&rej->base, NULL);
  assert_string_equal(out[2]->id, "u1/accept");
  assert_string_equal(out[2]->protocol_instance_id, "u1");
  UpdateAcceptance *acc = (UpdateAcceptance *)u_body(out[2], &UpdateAcceptance__D, "Acceptance");
  assert_string_equal(acc->accepted_request_message_id, "u1/request");
  assert_string_equal(acc->accepted_request->meta->update_id, "u1");
  protobuf_c_message_free_unpacked(&acc->base, NULL);
  assert_string_equal(out[3]->id, "u1/response");
  UpdateResponse *resp = (UpdateResponse *)u_body(out[3], &UpdateResponse__D, "Response");
  assert_int_equal(resp->outcome->value_case, TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_SUCCESS);
  char *res = dbx_payloads_to_json(resp->outcome->success);
  assert_string_equal(res, "{\"n\":2}");
  free(res);
  assert_string_equal(resp->meta->update_id, "u1");
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  assert_string_equal(out[4]->id, "u4/accept");
  dbx_wf_run_messages_free(out, nm);
  /* what the service recorded; then the timer's task, on the cached run */
  h[n++] = ev_plain(5, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_upd_accepted(6, "u1", "2");
  h[n++] = ev_upd_completed(7, "u1");
  h[n++] = ev_upd_accepted(8, "u4", "0");
  h[n++] = ev_timer_started(9, "1");
  h[n++] = ev_timer_fired(10, "1", 9);
  h[n++] = ev_plain(11, ET(WORKFLOW_TASK_SCHEDULED));
  h[n++] = ev_plain(12, ET(WORKFLOW_TASK_STARTED));
  assert_int_equal(dbx_wf_run_apply(r, h, n, 12), DBX_OK);
  assert_int_equal(dbx_wf_run_commands_matched(r), 4);
  assert_int_equal(dbx_wf_run_commands(r, &cmds, &nc), DBX_OK);
  assert_int_equal(nc, 1);
  assert_string_equal(cmds[0]->protocol_message_command_attributes->message_id, "u4/response");
  dbx_wf_run_commands_free(cmds, nc);
  assert_int_equal(dbx_wf_run_messages(r, &out, &nm), DBX_OK);
  assert_int_equal(nm, 1); /* the first task's rejections are not sent again */
  resp = (UpdateResponse *)u_body(out[0], &UpdateResponse__D, "Response");
  assert_int_equal(resp->outcome->value_case, TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_FAILURE);
  assert_string_equal(resp->outcome->failure->message, "timer");
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  dbx_wf_run_messages_free(out, nm);
  dbx_wf_run_destroy(r);
  h[n++] = ev_plain(13, ET(WORKFLOW_TASK_COMPLETED));
  h[n++] = ev_upd_completed(14, "u4");
  /* a fresh replay rebuilds both updates at their Accepted events (the
   * validator does not run: nothing is rejected) */
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&upd_wf, h, n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("%s", rep.message);
  assert_int_equal(rep.commands_matched, 5);
  /* code without the handler cannot replay it */
  assert_int_equal(dbx_replay_run(&upd_wf_none, h, n, &rep), DBX_OK);
  assert_false(rep.deterministic);
  assert_int_equal(rep.event_id, 6);
  assert_non_null(strstr(rep.message, "accepted update 'inc'"));
  /* a history whose Completed names another update */
  HistoryEvent *keep = h[6];
  h[6] = ev_upd_completed(7, "u9");
  assert_int_equal(dbx_replay_run(&upd_wf, h, n, &rep), DBX_OK);
  assert_false(rep.deterministic);
  assert_int_equal(rep.event_id, 7);
  assert_non_null(strstr(rep.message, "completed update 'inc' (update id u1)"));
  protobuf_c_message_free_unpacked(&h[6]->base, NULL);
  h[6] = keep;
  for (size_t i = 0; i < 4; i++) protobuf_c_message_free_unpacked(&msgs[i]->base, NULL);
  free_history(h, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_replay_clean, setup),
      cmocka_unit_test_setup(test_replay_nondeterministic_activity_type, setup),
      cmocka_unit_test_setup(test_replay_nondeterministic_timer_for_activity, setup),
      cmocka_unit_test_setup(test_replay_extra_command_is_reported, setup),
      cmocka_unit_test_setup(test_replay_timer_and_outcome_routing, setup),
      cmocka_unit_test_setup(test_replay_cache_matches_full_replay, setup),
      cmocka_unit_test_setup(test_replay_signal_before_first_task_and_failed_task_not_activated, setup),
      cmocka_unit_test_setup(test_replay_cancel_activity_only_while_pending, setup),
      cmocka_unit_test_setup(test_replay_kind_marker_read_back, setup),
      cmocka_unit_test_setup(test_replay_kind_side_effect_runs_once, setup),
      cmocka_unit_test_setup(test_replay_kind_version_marker, setup),
      cmocka_unit_test_setup(test_replay_kind_upsert_search_attributes, setup),
      cmocka_unit_test_setup(test_replay_kind_modify_memo, setup),
      cmocka_unit_test_setup(test_replay_kind_continue_as_new, setup),
      cmocka_unit_test_setup(test_replay_kind_child_workflow, setup),
      cmocka_unit_test_setup(test_replay_kind_cancel_child, setup),
      cmocka_unit_test_setup(test_replay_kind_signal_external, setup),
      cmocka_unit_test_setup(test_replay_kind_cancel_timer, setup),
      cmocka_unit_test_setup(test_replay_kind_await_signal_both_ways, setup),
      cmocka_unit_test_setup(test_replay_kind_fail_and_cancel_workflow, setup),
      cmocka_unit_test_setup(test_replay_events_without_attributes, setup),
      cmocka_unit_test_setup(test_replay_queries_builtins_and_handlers, setup),
      cmocka_unit_test_setup(test_replay_updates_accept_reject_and_replay, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
