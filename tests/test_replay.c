/* Unit tests for worker/replay: command matching against recorded history,
 * non-determinism reports, timers, signals, queries and the per-run cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
