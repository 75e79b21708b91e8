/* White-box unit tests of service/mutable.c, the one function that turns
 * history events into a run's mutable state (svc_state_apply_event /
 * svc_state_fold): the live path applies it to every appended event, reset
 * folds a prefix with it.
 *
 * A real embedded service runs workflows driven over gRPC by a fake worker
 * (tests/svc_client); the test then reads the stored RunState and stored
 * history of the run through a read transaction of the service's own store
 * and checks that folding the history gives the stored state, field by
 * field, at several points; and that reset at several points rebuilds the
 * pending activities, timers and children the prefix leaves open. This test
 * is the one file outside service/ that includes service/svc.h
 * (tests/check_rooms.sh allows it). */
#include "tests/svc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "service/service.h"
#include "service/svc.h"

#define CALL_MS 10000

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  o.long_poll_ms = 2000;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

/* ------------------------------------------------------------ the store, read directly */

/* The stored RunState of a run and its stored history, read in one read
 * transaction of the service's store (replies come after commit, so what a
 * reply acknowledged is there). */
static void read_run(fixture *f, const char *wfid, const char *run_id, RunState **rs, HistoryEvent ***evs, size_t *n) {
  dbx_txn *txn = NULL;
  assert_int_equal(dbx_store_read_begin(f->svc->store, &txn), DBX_OK);
  ectx c;
  memset(&c, 0, sizeof c);
  c.svc = f->svc;
  c.txn = txn;
  assert_int_equal(svc_run_load(&c, "default", wfid, run_id, rs), DBX_OK);
  assert_int_equal(svc_events_load(&c, (*rs)->run_seq, 1, 0, evs, n, 0), DBX_OK);
  dbx_store_txn_abort(txn);
  assert_int_equal((int64_t)*n, (*rs)->next_event_id - 1);
}

static int same_msg(const ProtobufCMessage *a, const ProtobufCMessage *b) {
  if (a == NULL || b == NULL) return a == b;
  size_t na = protobuf_c_message_get_packed_size(a), nb = protobuf_c_message_get_packed_size(b);
  if (na != nb) return 0;
  uint8_t *x = malloc(na + 1), *y = malloc(nb + 1);
  assert_non_null(x);
  assert_non_null(y);
  protobuf_c_message_pack(a, x);
  protobuf_c_message_pack(b, y);
  int same = memcmp(x, y, na) == 0;
  free(x);
  free(y);
  return same;
}

/* The event-derived fields of two states are equal (what svc_state_apply_event
 * owns; attempts, start times, queued flags are the live path's).
 * live = 0 for a run made by reset, whose state is its prefix's fold plus
 * what reset does after it (checked apart by the reset test): its copied
 * events carry the reset's time while its activities restart from then and
 * its timers keep their first fire time, and only the children it took over
 * from the base run stay. */
static void assert_same_derived(const RunState *want, const RunState *got, int live) {
  int times = live;
  assert_int_equal(got->n_activities, want->n_activities);
  for (size_t i = 0; i < want->n_activities; i++) {
    const ActivityInfo *a = want->activities[i], *b = got->activities[i];
    assert_int_equal(b->scheduled_event_id, a->scheduled_event_id);
    assert_string_equal(b->activity_id, a->activity_id);
    assert_string_equal(b->activity_type, a->activity_type);
    assert_string_equal(b->task_queue, a->task_queue);
    if (times) assert_int_equal(b->scheduled_time_ns, a->scheduled_time_ns);
    assert_int_equal(b->schedule_to_close_ms, a->schedule_to_close_ms);
    assert_int_equal(b->schedule_to_start_ms, a->schedule_to_start_ms);
    assert_int_equal(b->start_to_close_ms, a->start_to_close_ms);
    assert_int_equal(b->heartbeat_ms, a->heartbeat_ms);
    assert_true(same_msg(&a->retry_policy->base, &b->retry_policy->base));
    assert_int_equal(b->cancel_requested, a->cancel_requested);
    assert_int_equal(b->cancel_requested_event_id, a->cancel_requested_event_id);
  }
  assert_int_equal(got->n_timers, want->n_timers);
  for (size_t i = 0; i < want->n_timers; i++) {
    assert_string_equal(got->timers[i]->timer_id, want->timers[i]->timer_id);
    assert_int_equal(got->timers[i]->started_event_id, want->timers[i]->started_event_id);
    if (times) assert_int_equal(got->timers[i]->fire_time_ns, want->timers[i]->fire_time_ns);
  }
  if (live) assert_int_equal(got->n_children, want->n_children);
  for (size_t i = 0; live && i < want->n_children; i++) {
    const ChildInfo *a = want->children[i], *b = got->children[i];
    assert_int_equal(b->initiated_event_id, a->initiated_event_id);
    assert_int_equal(b->started_event_id, a->started_event_id);
    assert_string_equal(b->namespace_, a->namespace_);
    assert_string_equal(b->workflow_id, a->workflow_id);
    assert_string_equal(b->run_id, a->run_id);
    assert_string_equal(b->workflow_type, a->workflow_type);
    assert_int_equal(b->parent_close_policy, a->parent_close_policy);
  }
  assert_int_equal(got->wft_scheduled_event_id, want->wft_scheduled_event_id);
  assert_int_equal(got->wft_started_event_id, want->wft_started_event_id);
  assert_int_equal(got->wft_scheduled_time_ns, want->wft_scheduled_time_ns);
  assert_int_equal(got->last_wft_started_event_id, want->last_wft_started_event_id);
  assert_int_equal(got->cancel_requested, want->cancel_requested);
  assert_int_equal(got->close_event_id, want->close_event_id);
  assert_int_equal(got->close_time_ns, want->close_time_ns);
}

/* Fold the stored history of (wfid, run) into a fresh state and compare it
 * with the stored state. Returns the stored state (caller frees). */
static RunState *check_fold_matches(fixture *f, const char *wfid, const char *run_id, int live) {
  RunState *rs = NULL;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  read_run(f, wfid, run_id, &rs, &evs, &n);
  RunState *folded = svc_runstate_new();
  assert_non_null(folded);
  svc_pb_setstr(&folded->namespace_, rs->namespace_);
  svc_pb_setstr(&folded->task_queue, rs->task_queue);
  folded->status = WS(RUNNING);
  assert_int_equal(svc_state_fold(folded, evs, n), DBX_OK);
  assert_same_derived(rs, folded, live);
  if (rs->status != WS(RUNNING)) assert_int_equal(folded->status, rs->status);
  svc_runstate_free(folded);
  svc_events_free(evs, n);
  return rs;
}

/* ------------------------------------------------------------ a fake worker */

static Command *cmd_activity(const char *id, const char *tq) {
  Command *c = svc_pb_new(&Command__D);
  ScheduleActivityTaskCommandAttributes *a = svc_pb_new(&ScheduleActivityTaskCommandAttributes__D);
  ActivityType *at = svc_pb_new(&ActivityType__D);
  TaskQueue *q = svc_pb_new(&TaskQueue__D);
  Duration *d = svc_pb_new(&Duration__D);
  assert_true(c && a && at && q && d);
  at->name = "fold.Activity";
  q->name = (char *)tq;
  d->seconds = 120;
  a->activity_id = (char *)id;
  a->activity_type = at;
  a->task_queue = q;
  a->start_to_close_timeout = d;
  c->command_type = CT(SCHEDULE_ACTIVITY_TASK);
  c->attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  c->schedule_activity_task_command_attributes = a;
  return c;
}

static Command *cmd_timer(const char *id, int64_t seconds) {
  Command *c = svc_pb_new(&Command__D);
  StartTimerCommandAttributes *a = svc_pb_new(&StartTimerCommandAttributes__D);
  Duration *d = svc_pb_new(&Duration__D);
  assert_true(c && a && d);
  d->seconds = seconds;
  a->timer_id = (char *)id;
  a->start_to_fire_timeout = d;
  c->command_type = CT(START_TIMER);
  c->attributes_case = CMD(START_TIMER);
  c->start_timer_command_attributes = a;
  return c;
}

static Command *cmd_child(const char *wfid, const char *tq) {
  Command *c = svc_pb_new(&Command__D);
  StartChildWorkflowExecutionCommandAttributes *a = svc_pb_new(&StartChildWorkflowExecutionCommandAttributes__D);
  WorkflowType *wt = svc_pb_new(&WorkflowType__D);
  TaskQueue *q = svc_pb_new(&TaskQueue__D);
  assert_true(c && a && wt && q);
  wt->name = "fold.Child";
  q->name = (char *)tq;
  a->workflow_id = (char *)wfid;
  a->workflow_type = wt;
  a->task_queue = q;
  a->parent_close_policy = 2; /* ABANDON: the child outlives a terminated base */
  c->command_type = CT(START_CHILD_WORKFLOW_EXECUTION);
  c->attributes_case = CMD(START_CHILD_WORKFLOW_EXECUTION);
  c->start_child_workflow_execution_command_attributes = a;
  return c;
}

static Command *cmd_cancel_timer(const char *id) {
  Command *c = svc_pb_new(&Command__D);
  CancelTimerCommandAttributes *a = svc_pb_new(&CancelTimerCommandAttributes__D);
  assert_true(c && a);
  a->timer_id = (char *)id;
  c->command_type = CT(CANCEL_TIMER);
  c->attributes_case = CMD(CANCEL_TIMER);
  c->cancel_timer_command_attributes = a;
  return c;
}

static Command *cmd_cancel_activity(int64_t scheduled_event_id) {
  Command *c = svc_pb_new(&Command__D);
  RequestCancelActivityTaskCommandAttributes *a = svc_pb_new(&RequestCancelActivityTaskCommandAttributes__D);
  assert_true(c && a);
  a->scheduled_event_id = scheduled_event_id;
  c->command_type = CT(REQUEST_CANCEL_ACTIVITY_TASK);
  c->attributes_case = CMD(REQUEST_CANCEL_ACTIVITY_TASK);
  c->request_cancel_activity_task_command_attributes = a;
  return c;
}

/* Free a command built above (its borrowed strings stay). */
static void cmd_free(Command *c) {
  switch (c->attributes_case) {
  case CMD(SCHEDULE_ACTIVITY_TASK): {
    ScheduleActivityTaskCommandAttributes *a = c->schedule_activity_task_command_attributes;
    free(a->activity_type);
    free(a->task_queue);
    free(a->start_to_close_timeout);
    free(a);
    break;
  }
  case CMD(START_TIMER):
    free(c->start_timer_command_attributes->start_to_fire_timeout);
    free(c->start_timer_command_attributes);
    break;
  case CMD(START_CHILD_WORKFLOW_EXECUTION):
    free(c->start_child_workflow_execution_command_attributes->workflow_type);
    free(c->start_child_workflow_execution_command_attributes->task_queue);
    free(c->start_child_workflow_execution_command_attributes);
    break;
  case CMD(CANCEL_TIMER): free(c->cancel_timer_command_attributes); break;
  case CMD(REQUEST_CANCEL_ACTIVITY_TASK): free(c->request_cancel_activity_task_command_attributes); break;
  default: break;
  }
  free(c);
}

/* Poll the workflow task of tq and complete it with cmds (consumed). */
static void wft_complete(fixture *f, const char *tq, Command **cmds, size_t n) {
  PollWorkflowTaskQueueResponse *p = dbx_svct_wft_poll(f->ch, tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  RespondWorkflowTaskCompletedRequest q =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  q.namespace_ = "default";
  q.task_token = p->task_token;
  q.commands = cmds;
  q.n_commands = n;
  q.identity = "fold-worker";
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(f->ch, "RespondWorkflowTaskCompleted", &q.base, NULL, CALL_MS, NULL, &raw);
  if (st != DBX_GRPC_OK) fail_msg("RespondWorkflowTaskCompleted: %d %s", st, raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
  for (size_t i = 0; i < n; i++) cmd_free(cmds[i]);
  protobuf_c_message_free_unpacked(&p->base, NULL);
}

/* Poll one activity task of tq: its token (malloc'd copy) and activity id. */
static ProtobufCBinaryData activity_take(fixture *f, const char *tq, char id[64]) {
  PollActivityTaskQueueResponse *p = dbx_svct_activity_poll(f->ch, tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  ProtobufCBinaryData t = {p->task_token.len, malloc(p->task_token.len)};
  assert_non_null(t.data);
  memcpy(t.data, p->task_token.data, t.len);
  snprintf(id, 64, "%s", p->activity_id);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  return t;
}

static void signal_run(fixture *f, const char *wfid) {
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = "poke";
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &q.base, NULL, CALL_MS, NULL, NULL), DBX_GRPC_OK);
}

static char *reset_run(fixture *f, const char *wfid, const char *run_id, int64_t event_id) {
  ResetWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  we.run_id = (char *)run_id;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.workflow_task_finish_event_id = event_id;
  q.reason = "fold test";
  q.request_id = "fold-reset";
  ResetWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "ResetWorkflowExecution", &q.base, &ResetWorkflowExecutionResponse__D, CALL_MS,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  char *id = dbx_strdup(r->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return id;
}

/* The id of the n-th (from 1) event of type in the stored history. */
static int64_t nth_event(fixture *f, const char *wfid, const char *run_id, int type, int nth) {
  RunState *rs = NULL;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  read_run(f, wfid, run_id, &rs, &evs, &n);
  int64_t id = 0;
  for (size_t i = 0; i < n && id == 0; i++)
    if ((int)evs[i]->event_type == type && --nth == 0) id = evs[i]->event_id;
  svc_events_free(evs, n);
  svc_runstate_free(rs);
  assert_true(id > 0);
  return id;
}

/* ------------------------------------------------------------ tests */

/* A run with activities, timers and a child at several points: the fold of
 * its stored history equals its stored state. */
static void test_svc_state_live_equals_fold(void **state) {
  fixture *f = *state;
  const char *wf = "fold-live", *tq = "fold-live-q";
  char *run = dbx_svct_workflow_start(f->ch, wf, tq);
  RunState *rs = check_fold_matches(f, wf, run, 1); /* scheduled task only */
  assert_int_equal(rs->wft_scheduled_event_id, 2);
  svc_runstate_free(rs);

  Command *c1[] = {cmd_activity("a1", tq), cmd_activity("a2", tq), cmd_timer("t1", 600), cmd_timer("t2", 900),
                   cmd_child("fold-live-child", "fold-live-child-q")};
  wft_complete(f, tq, c1, 5);
  rs = check_fold_matches(f, wf, run, 1);
  assert_int_equal(rs->n_activities, 2);
  assert_int_equal(rs->n_timers, 2);
  assert_int_equal(rs->n_children, 1);
  assert_true(rs->children[0]->started_event_id > 0);
  assert_true(rs->children[0]->run_id[0] != '\0');
  assert_true(rs->timers[1]->fire_time_ns - rs->timers[0]->fire_time_ns == 300LL * 1000000000);
  svc_runstate_free(rs);
  /* what the fold (and so the live path) derives, against the events themselves */
  HistoryEvent **evs = NULL;
  size_t n = 0;
  read_run(f, wf, run, &rs, &evs, &n);
  for (size_t i = 0; i < n; i++) {
    const Timestamp *t = evs[i]->event_time;
    int64_t at = t->seconds * 1000000000 + t->nanos;
    if (evs[i]->event_type == ET(TIMER_STARTED) && strcmp(evs[i]->timer_started_event_attributes->timer_id, "t1") == 0)
      assert_int_equal(svc_timer_find(rs, "t1")->fire_time_ns, at + 600LL * 1000000000);
    if (evs[i]->event_type == ET(ACTIVITY_TASK_SCHEDULED)) {
      ActivityInfo *ai = svc_activity_find(rs, evs[i]->event_id);
      assert_non_null(ai);
      assert_int_equal(ai->scheduled_time_ns, at);
      assert_int_equal(ai->start_to_close_ms, 120000);
      assert_string_equal(ai->task_queue, tq);
    }
    if (evs[i]->event_type == ET(CHILD_WORKFLOW_EXECUTION_STARTED)) {
      ChildWorkflowExecutionStartedEventAttributes *a = evs[i]->child_workflow_execution_started_event_attributes;
      ChildInfo *ci = svc_child_find(rs, a->initiated_event_id);
      assert_non_null(ci);
      assert_int_equal(ci->started_event_id, evs[i]->event_id);
      assert_string_equal(ci->run_id, a->workflow_execution->run_id);
      assert_string_equal(ci->workflow_id, "fold-live-child");
      assert_int_equal(ci->parent_close_policy, 2);
    }
  }
  svc_events_free(evs, n);
  svc_runstate_free(rs);

  /* a1 completes, a2 starts; a signal arrives */
  char id1[64], id2[64];
  ProtobufCBinaryData t1 = activity_take(f, tq, id1);
  ProtobufCBinaryData t2 = activity_take(f, tq, id2);
  ProtobufCBinaryData done = strcmp(id1, "a1") == 0 ? t1 : t2;
  assert_int_equal(dbx_svct_activity_complete(f->ch, done, NULL), DBX_GRPC_OK);
  signal_run(f, wf);
  rs = check_fold_matches(f, wf, run, 1);
  assert_int_equal(rs->n_activities, 1);
  assert_string_equal(rs->activities[0]->activity_id, "a2");
  int64_t a2 = rs->activities[0]->scheduled_event_id;
  svc_runstate_free(rs);

  /* cancel t2 and request cancellation of the started a2 */
  Command *c2[] = {cmd_cancel_timer("t2"), cmd_cancel_activity(a2)};
  wft_complete(f, tq, c2, 2);
  rs = check_fold_matches(f, wf, run, 1);
  assert_int_equal(rs->n_timers, 1);
  assert_string_equal(rs->timers[0]->timer_id, "t1");
  assert_int_equal(rs->n_activities, 1);
  assert_true(rs->activities[0]->cancel_requested);
  assert_true(rs->last_wft_started_event_id > 0);
  svc_runstate_free(rs);

  /* a signal brings a task, which closes the run: nothing pending but the
   * (abandoned) child */
  signal_run(f, wf);
  PollWorkflowTaskQueueResponse *p = dbx_svct_wft_poll(f->ch, tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  dbx_svct_wft_complete_workflow(f->ch, p->task_token);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  rs = check_fold_matches(f, wf, run, 1);
  assert_int_equal(rs->status, WS(COMPLETED));
  assert_int_equal(rs->n_activities, 0);
  assert_int_equal(rs->n_timers, 0);
  assert_int_equal(rs->n_children, 1);
  svc_runstate_free(rs);
  free(t1.data);
  free(t2.data);
  free(run);
}

/* Reset at several points: the new run's pending activities, timers and
 * children are those open at the reset point, and its state is again the
 * fold of its own history. */
static void test_svc_state_reset_rebuilds_pending(void **state) {
  fixture *f = *state;
  const char *wf = "fold-reset", *tq = "fold-reset-q";
  char *run = dbx_svct_workflow_start(f->ch, wf, tq);
  Command *c1[] = {cmd_activity("r1", tq), cmd_timer("rt1", 600), cmd_child("fold-reset-child", "fold-reset-cq")};
  wft_complete(f, tq, c1, 3);
  RunState *base = check_fold_matches(f, wf, run, 1);
  int64_t rt1_fire = base->timers[0]->fire_time_ns;
  char *child_run = dbx_strdup(base->children[0]->run_id);
  svc_runstate_free(base);
  char id[64];
  ProtobufCBinaryData t = activity_take(f, tq, id);
  assert_string_equal(id, "r1");
  assert_int_equal(dbx_svct_activity_complete(f->ch, t, NULL), DBX_GRPC_OK);
  free(t.data);
  Command *c2[] = {cmd_activity("r2", tq), cmd_cancel_timer("rt1"), cmd_timer("rt2", 700)};
  wft_complete(f, tq, c2, 3);
  signal_run(f, wf); /* a third task, left started */
  PollWorkflowTaskQueueResponse *p = dbx_svct_wft_poll(f->ch, tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  base = check_fold_matches(f, wf, run, 1);
  assert_int_equal(base->n_activities, 1);
  assert_int_equal(base->n_timers, 1);
  assert_int_equal(base->n_children, 1);
  assert_true(base->wft_started_event_id > 0);
  int64_t rt2_fire = base->timers[0]->fire_time_ns;
  svc_runstate_free(base);

  /* (1) at the first WorkflowTaskCompleted: nothing was pending yet */
  int64_t e1 = nth_event(f, wf, run, ET(WORKFLOW_TASK_COMPLETED), 1);
  char *n1 = reset_run(f, wf, run, e1);
  RunState *rs = check_fold_matches(f, wf, n1, 0);
  assert_int_equal(rs->n_activities, 0);
  assert_int_equal(rs->n_timers, 0);
  assert_int_equal(rs->n_children, 0);
  assert_true(rs->wft_scheduled_event_id > 0); /* the new task */
  assert_int_equal(rs->wft_started_event_id, 0);
  svc_runstate_free(rs);
  assert_int_equal(dbx_svct_workflow_status(f->ch, wf, run), WS(TERMINATED));

  /* (2) at the second: r1 done; rt1 (at its first fire time) and the child
   * pending; r2 and rt2 not yet */
  int64_t e2 = nth_event(f, wf, run, ET(WORKFLOW_TASK_COMPLETED), 2);
  char *n2 = reset_run(f, wf, run, e2);
  rs = check_fold_matches(f, wf, n2, 0);
  assert_int_equal(rs->n_activities, 0);
  assert_int_equal(rs->n_timers, 1);
  assert_string_equal(rs->timers[0]->timer_id, "rt1");
  assert_int_equal(rs->timers[0]->fire_time_ns, rt1_fire);
  assert_int_equal(rs->n_children, 1);
  assert_string_equal(rs->children[0]->run_id, child_run);
  svc_runstate_free(rs);
  /* the child, still running, now reports to the new run */
  RunState *ch = NULL;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  read_run(f, "fold-reset-child", child_run, &ch, &evs, &n);
  assert_int_equal(ch->status, WS(RUNNING));
  assert_string_equal(ch->parent->run_id, n2);
  svc_events_free(evs, n);
  svc_runstate_free(ch);

  /* (3) at the third WorkflowTaskStarted: r2 pending again (first attempt,
   * queued), rt2 pending at its first fire time, rt1 canceled; the child
   * left (it belongs to the run of (2) now) */
  int64_t e3 = nth_event(f, wf, run, ET(WORKFLOW_TASK_STARTED), 3);
  char *n3 = reset_run(f, wf, run, e3);
  rs = check_fold_matches(f, wf, n3, 0);
  assert_int_equal(rs->n_activities, 1);
  assert_string_equal(rs->activities[0]->activity_id, "r2");
  assert_int_equal(rs->activities[0]->attempt, 1);
  assert_true(rs->activities[0]->queued);
  assert_int_equal(rs->n_timers, 1);
  assert_string_equal(rs->timers[0]->timer_id, "rt2");
  assert_int_equal(rs->timers[0]->fire_time_ns, rt2_fire);
  assert_int_equal(rs->n_children, 0);
  svc_runstate_free(rs);

  free(child_run);
  free(n1);
  free(n2);
  free(n3);
  free(run);
}

/* Reset to a point after a child started, when the child closed after that
 * point: the new run gets the child's ChildWorkflowExecutionCompleted (as
 * Temporal's resetter reapplies child events), so a parent waiting on it can
 * finish. */
static void test_svc_state_reset_reapplies_child_close(void **state) {
  fixture *f = *state;
  const char *wf = "fold-reset-done", *tq = "fold-reset-done-q", *cwf = "fold-reset-done-child",
             *cq = "fold-reset-done-cq";
  char *run = dbx_svct_workflow_start(f->ch, wf, tq);
  Command *c1[] = {cmd_child(cwf, cq)};
  wft_complete(f, tq, c1, 1); /* Initiated, Started, a task */
  Command *c2[] = {cmd_timer("wait", 3600)};
  wft_complete(f, tq, c2, 1);
  int64_t initiated = nth_event(f, wf, run, ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED), 1);
  int64_t started = nth_event(f, wf, run, ET(CHILD_WORKFLOW_EXECUTION_STARTED), 1);
  int64_t point = nth_event(f, wf, run, ET(WORKFLOW_TASK_COMPLETED), 2);
  assert_true(initiated < started && started < point);
  /* the child completes after the reset point */
  PollWorkflowTaskQueueResponse *p = dbx_svct_wft_poll(f->ch, cq, CALL_MS);
  assert_true(p->task_token.len > 0);
  char *child_run = dbx_strdup(p->workflow_execution->run_id);
  dbx_svct_wft_complete_workflow(f->ch, p->task_token);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, cwf, child_run), WS(COMPLETED));
  assert_true(nth_event(f, wf, run, ET(CHILD_WORKFLOW_EXECUTION_COMPLETED), 1) > point);

  char *nr = reset_run(f, wf, run, point);
  RunState *rs = check_fold_matches(f, wf, nr, 0);
  assert_int_equal(rs->n_children, 0); /* its close was reapplied */
  assert_int_equal(rs->n_timers, 0);   /* its timer was started by the task the reset undid */
  svc_runstate_free(rs);
  HistoryEvent **evs = NULL;
  size_t n = 0;
  read_run(f, wf, nr, &rs, &evs, &n);
  size_t reset_failed = 0, closed = 0, scheduled = 0;
  for (size_t i = 0; i < n; i++) {
    if (evs[i]->event_type == ET(WORKFLOW_TASK_FAILED)) reset_failed = i + 1;
    if (evs[i]->event_type == ET(WORKFLOW_TASK_SCHEDULED)) scheduled = i + 1;
    if (evs[i]->event_type != ET(CHILD_WORKFLOW_EXECUTION_COMPLETED)) continue;
    assert_int_equal(closed, 0);
    closed = i + 1;
    const ChildWorkflowExecutionCompletedEventAttributes *a = evs[i]->child_workflow_execution_completed_event_attributes;
    assert_int_equal(a->initiated_event_id, initiated);
    assert_int_equal(a->started_event_id, started);
    assert_string_equal(a->workflow_execution->workflow_id, cwf);
    assert_string_equal(a->workflow_execution->run_id, child_run);
  }
  /* after the reset's WorkflowTaskFailed, before the new task */
  assert_true(reset_failed > 0 && closed > reset_failed && scheduled > closed);
  assert_int_equal(evs[closed - 1]->event_id, (int64_t)closed);
  svc_events_free(evs, n);
  svc_runstate_free(rs);

  /* the parent's new task sees the close and completes the workflow */
  p = dbx_svct_wft_poll(f->ch, tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  assert_string_equal(p->workflow_execution->run_id, nr);
  dbx_svct_wft_complete_workflow(f->ch, p->task_token);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, wf, nr), WS(COMPLETED));
  assert_int_equal(dbx_svct_workflow_status(f->ch, wf, run), WS(TERMINATED));
  free(nr);
  free(child_run);
  free(run);
}

/* The function itself on hand-built events: order and kinds it ignores. */
static void test_svc_state_apply_by_hand(void **state) {
  (void)state;
  RunState *rs = svc_runstate_new();
  assert_non_null(rs);
  svc_pb_setstr(&rs->task_queue, "q");
  svc_pb_setstr(&rs->namespace_, "default");
  rs->status = WS(RUNNING);
  HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_SCHEDULED));
  ev->event_id = 5;
  ev->event_time = svc_timestamp_new_ns(7000000000LL);
  ev->activity_task_scheduled_event_attributes->activity_id = dbx_strdup("x");
  assert_int_equal(svc_state_apply_event(rs, ev), DBX_OK);
  svc_history_event_free(ev);
  assert_int_equal(rs->n_activities, 1);
  assert_string_equal(rs->activities[0]->task_queue, "q"); /* the run's queue by default */
  assert_int_equal(rs->activities[0]->scheduled_time_ns, 7000000000LL);
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_SIGNALED)); /* no state of its own */
  assert_int_equal(svc_state_apply_event(rs, ev), DBX_OK);
  svc_history_event_free(ev);
  ev = svc_event_new(ET(ACTIVITY_TASK_FAILED));
  ev->activity_task_failed_event_attributes->scheduled_event_id = 6; /* not pending: ignored */
  assert_int_equal(svc_state_apply_event(rs, ev), DBX_OK);
  assert_int_equal(rs->n_activities, 1);
  ev->activity_task_failed_event_attributes->scheduled_event_id = 5;
  assert_int_equal(svc_state_apply_event(rs, ev), DBX_OK);
  assert_int_equal(rs->n_activities, 0);
  svc_history_event_free(ev);
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_TERMINATED));
  ev->event_id = 9;
  assert_int_equal(svc_state_apply_event(rs, ev), DBX_OK);
  assert_int_equal(rs->status, WS(TERMINATED));
  assert_int_equal(rs->close_event_id, 9);
  svc_history_event_free(ev);
  assert_int_equal(svc_state_apply_event(NULL, NULL), DBX_EINVAL);
  svc_runstate_free(rs);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_state_apply_by_hand),
      cmocka_unit_test(test_svc_state_live_equals_fold),
      cmocka_unit_test(test_svc_state_reset_rebuilds_pending),
      cmocka_unit_test(test_svc_state_reset_reapplies_child_close),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
