/* Integration tests of sticky execution (Temporal's sticky task queues) on
 * the embedded service, with a real gRPC client playing the worker, and the
 * C worker's cache on top of it:
 * - a completion with sticky_attributes sends the run's next workflow task
 *   to the worker's sticky queue (WorkflowTaskScheduled names it, kind
 *   STICKY) with only the events after the previous task's; the normal queue
 *   does not get it; GetWorkflowExecutionHistory still has them all;
 * - a sticky worker that does not take the task within the sticky
 *   schedule-to-start timeout (it died): WorkflowTaskTimedOut of type
 *   SCHEDULE_TO_START, then the task on the normal queue with full history,
 *   same attempt;
 * - ResetStickyTaskQueue, a completion without sticky_attributes, and a
 *   sticky queue nobody polls: the next task goes to the normal queue;
 * - a sticky queue whose name does not fit the store's keys with the
 *   namespace (bug 15, found by fuzz_service): not used, the task after a
 *   timer goes to the normal queue, and the service answers every call;
 * - a failed task on a sticky queue: the next attempt on the normal queue
 *   with the attempt number unchanged (Temporal's rule), the one after
 *   counts;
 * - the C worker: later tasks come on its sticky queue and are applied to
 *   the cached run; with a cache of one run, a run evicted meanwhile gets
 *   its task on the sticky queue, fetches the full history and replays. */
#include "tests/svc_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "service/service.h"
#include "worker/client.h"
#include "worker/worker.h"

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

/* PollWorkflowTaskQueue on name, kind STICKY when sticky. */
static PollWorkflowTaskQueueResponse *poll_wft(dbx_rpc_channel *ch, const char *name, int sticky,
                                               const char *normal, int64_t timeout_ms) {
  PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)name;
  tq.kind = sticky ? TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY
                   : TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  if (sticky) tq.normal_name = (char *)normal;
  q.namespace_ = "default";
  q.task_queue = &tq;
  q.identity = "it-sticky-worker";
  PollWorkflowTaskQueueResponse *r = NULL;
  int st = dbx_svct_call(ch, "PollWorkflowTaskQueue", &q.base, &PollWorkflowTaskQueueResponse__D, timeout_ms,
                         (void **)&r, NULL);
  if (st != DBX_GRPC_OK) fail_msg("PollWorkflowTaskQueue %s: status %d", name, st);
  return r;
}

/* RespondWorkflowTaskCompleted with cmd (may be NULL) and, when sticky is
 * not NULL, sticky_attributes naming it with a timeout of s2s_ms. */
static void respond(dbx_rpc_channel *ch, ProtobufCBinaryData token, Command *cmd, const char *sticky,
                    const char *normal, int64_t s2s_ms) {
  RespondWorkflowTaskCompletedRequest q =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Temporal__Api__Taskqueue__V1__StickyExecutionAttributes sa =
      INIT(TEMPORAL__API__TASKQUEUE__V1__STICKY_EXECUTION_ATTRIBUTES);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it-sticky-worker";
  Command *cmds[1] = {cmd};
  q.commands = cmds;
  q.n_commands = cmd != NULL;
  if (sticky) {
    tq.name = (char *)sticky;
    tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY;
    tq.normal_name = (char *)normal;
    d.seconds = s2s_ms / 1000;
    d.nanos = (int32_t)(s2s_ms % 1000) * 1000000;
    sa.worker_task_queue = &tq;
    sa.schedule_to_start_timeout = &d;
    q.sticky_attributes = &sa;
  }
  int st = dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &q.base, &RespondWorkflowTaskCompletedResponse__D,
                         5000, NULL, NULL);
  if (st != DBX_GRPC_OK) fail_msg("RespondWorkflowTaskCompleted: status %d", st);
}

static Command *timer_cmd(Command *cmd, StartTimerCommandAttributes *a, Duration *d, const char *id, int64_t ms) {
  *cmd = (Command)INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  *a = (StartTimerCommandAttributes)INIT(TEMPORAL__API__COMMAND__V1__START_TIMER_COMMAND_ATTRIBUTES);
  *d = (Duration)INIT(GOOGLE__PROTOBUF__DURATION);
  d->seconds = ms / 1000;
  d->nanos = (int32_t)(ms % 1000) * 1000000;
  a->timer_id = (char *)id;
  a->start_to_fire_timeout = d;
  cmd->command_type = CT(START_TIMER);
  cmd->attributes_case = CMD(START_TIMER);
  cmd->start_timer_command_attributes = a;
  return cmd;
}

static void signal_run(dbx_rpc_channel *ch, const char *wfid) {
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = "poke";
  q.identity = "it";
  assert_int_equal(dbx_svct_call(ch, "SignalWorkflowExecution", &q.base, &SignalWorkflowExecutionResponse__D, 5000,
                                 NULL, NULL),
                   DBX_GRPC_OK);
}

/* The n-th (1-based) event of type in h, or NULL. */
static const HistoryEvent *nth_of(const dbx_svct_history *h, int type, int nth) {
  for (size_t i = 0; i < h->n; i++)
    if ((int)h->events[i]->event_type == type && --nth == 0) return h->events[i];
  return NULL;
}

static const TaskQueue *scheduled_queue(const dbx_svct_history *h, int nth) {
  const HistoryEvent *e = nth_of(h, ET(WORKFLOW_TASK_SCHEDULED), nth);
  assert_non_null(e);
  return e->workflow_task_scheduled_event_attributes->task_queue;
}

/* A first task taken from the normal queue and a short poll of the sticky
 * queue, so the service has seen the sticky worker. */
static PollWorkflowTaskQueueResponse *first_task(fixture *f, const char *tq, const char *sticky) {
  PollWorkflowTaskQueueResponse *t = poll_wft(f->ch, tq, 0, NULL, 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->history->n_events, 3);
  assert_int_equal(t->history->events[0]->event_id, 1);
  PollWorkflowTaskQueueResponse *none = poll_wft(f->ch, sticky, 1, tq, 1200); /* answered empty, before 1.2 s */
  assert_int_equal(none->task_token.len, 0);
  protobuf_c_message_free_unpacked(&none->base, NULL);
  return t;
}

static void test_sticky_task_carries_only_new_events(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "sticky-partial", "tq-sp");
  PollWorkflowTaskQueueResponse *t = first_task(f, "tq-sp", "tq-sp-sticky-1");
  Command cmd;
  StartTimerCommandAttributes ta;
  Duration d;
  respond(f->ch, t->task_token, timer_cmd(&cmd, &ta, &d, "t1", 300), "tq-sp-sticky-1", "tq-sp", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  /* the timer fires (6), the task is scheduled on the sticky queue (7) */
  t = poll_wft(f->ch, "tq-sp-sticky-1", 1, "tq-sp", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->previous_started_event_id, 3);
  assert_int_equal(t->started_event_id, 8);
  assert_int_equal(t->attempt, 1);
  assert_int_equal(t->history->n_events, 5); /* 4 WorkflowTaskCompleted .. 8 WorkflowTaskStarted */
  assert_int_equal(t->history->events[0]->event_id, 4);
  assert_int_equal(t->history->events[0]->event_type, ET(WORKFLOW_TASK_COMPLETED));
  assert_int_equal(t->history->events[2]->event_type, ET(TIMER_FIRED));
  assert_int_equal(t->history->events[4]->event_id, 8);
  assert_int_equal(t->history->events[4]->event_type, ET(WORKFLOW_TASK_STARTED));
  assert_string_equal(t->workflow_execution_task_queue->name, "tq-sp");

  /* the worker that lost its state asks for the rest */
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "sticky-partial", run_id, &h);
  assert_int_equal(h.n, 8);
  assert_int_equal(h.events[0]->event_type, ET(WORKFLOW_EXECUTION_STARTED));
  const TaskQueue *q1 = scheduled_queue(&h, 1), *q2 = scheduled_queue(&h, 2);
  assert_string_equal(q1->name, "tq-sp");
  assert_int_equal(q1->kind, TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL);
  assert_string_equal(q2->name, "tq-sp-sticky-1");
  assert_int_equal(q2->kind, TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY);
  assert_string_equal(q2->normal_name, "tq-sp");
  dbx_svct_history_cleanup(&h);

  /* a third task, after a signal, on the sticky queue again: events 9.. */
  respond(f->ch, t->task_token, NULL, "tq-sp-sticky-1", "tq-sp", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  signal_run(f->ch, "sticky-partial");
  t = poll_wft(f->ch, "tq-sp-sticky-1", 1, "tq-sp", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->previous_started_event_id, 8);
  assert_int_equal(t->history->events[0]->event_id, 9);
  assert_int_equal(t->history->events[1]->event_type, ET(WORKFLOW_EXECUTION_SIGNALED));
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "sticky-partial", run_id), WS(COMPLETED));
  /* the normal queue never got a task of the run */
  t = poll_wft(f->ch, "tq-sp", 0, NULL, 1200);
  assert_int_equal(t->task_token.len, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  free(run_id);
}

static void test_sticky_timeout_falls_back_to_the_normal_queue(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "sticky-dead", "tq-sd");
  PollWorkflowTaskQueueResponse *t = first_task(f, "tq-sd", "tq-sd-sticky-1");
  Command cmd;
  StartTimerCommandAttributes ta;
  Duration d;
  respond(f->ch, t->task_token, timer_cmd(&cmd, &ta, &d, "t1", 200), "tq-sd-sticky-1", "tq-sd", 1000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* the sticky worker is gone: nobody polls its queue again */
  int64_t t0 = dbx_mono_ns();
  t = poll_wft(f->ch, "tq-sd", 0, NULL, 10000);
  int64_t waited_ms = (dbx_mono_ns() - t0) / 1000000;
  assert_true(t->task_token.len > 0);
  assert_true(waited_ms >= 1000); /* the timer (0.2 s), then the sticky timeout (1 s) */
  assert_int_equal(t->attempt, 1);
  assert_int_equal(t->history->events[0]->event_id, 1); /* full history */
  assert_int_equal(t->started_event_id, 10);
  assert_int_equal(t->history->n_events, 10);
  const HistoryEvent *to = t->history->events[7];
  assert_int_equal(to->event_type, ET(WORKFLOW_TASK_TIMED_OUT));
  assert_int_equal(to->workflow_task_timed_out_event_attributes->timeout_type, TT(SCHEDULE_TO_START));
  assert_int_equal(to->workflow_task_timed_out_event_attributes->scheduled_event_id, 7);
  assert_int_equal(to->workflow_task_timed_out_event_attributes->started_event_id, 0);
  const HistoryEvent *s9 = t->history->events[8];
  assert_int_equal(s9->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  assert_string_equal(s9->workflow_task_scheduled_event_attributes->task_queue->name, "tq-sd");
  assert_int_equal(s9->workflow_task_scheduled_event_attributes->task_queue->kind,
                   TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL);
  /* stickiness is gone: a late poll of the old sticky queue finds nothing */
  PollWorkflowTaskQueueResponse *late = poll_wft(f->ch, "tq-sd-sticky-1", 1, "tq-sd", 1200);
  assert_int_equal(late->task_token.len, 0);
  protobuf_c_message_free_unpacked(&late->base, NULL);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "sticky-dead", run_id), WS(COMPLETED));
  free(run_id);
}

static void reset_sticky(dbx_rpc_channel *ch, const char *wfid, const char *run_id) {
  ResetStickyTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_STICKY_TASK_QUEUE_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  we.run_id = (char *)run_id;
  q.namespace_ = "default";
  q.execution = &we;
  assert_int_equal(dbx_svct_call(ch, "ResetStickyTaskQueue", &q.base, &ResetStickyTaskQueueResponse__D, 5000, NULL,
                                 NULL),
                   DBX_GRPC_OK);
}

/* Take the run's next task from the normal queue (full history). */
static PollWorkflowTaskQueueResponse *next_on_normal(fixture *f, const char *tq, int64_t started) {
  PollWorkflowTaskQueueResponse *t = poll_wft(f->ch, tq, 0, NULL, 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->history->events[0]->event_id, 1);
  assert_int_equal(t->started_event_id, started);
  return t;
}

static void test_sticky_reset_and_unpolled_queue_go_to_normal(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "sticky-reset", "tq-sr");
  PollWorkflowTaskQueueResponse *t = first_task(f, "tq-sr", "tq-sr-sticky-1");
  respond(f->ch, t->task_token, NULL, "tq-sr-sticky-1", "tq-sr", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* ResetStickyTaskQueue (of the current run): the signal's task is normal */
  reset_sticky(f->ch, "sticky-reset", "");
  signal_run(f->ch, "sticky-reset");
  t = next_on_normal(f, "tq-sr", 7); /* 4 completed, 5 signaled, 6 scheduled, 7 started */
  respond(f->ch, t->task_token, NULL, "tq-sr-sticky-2", "tq-sr", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* tq-sr-sticky-2 was never polled: no worker behind it, normal queue */
  signal_run(f->ch, "sticky-reset");
  t = next_on_normal(f, "tq-sr", 11);
  assert_int_equal(t->history->events[9]->workflow_task_scheduled_event_attributes->task_queue->kind,
                   TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL);
  /* a completion without sticky_attributes ends stickiness too */
  PollWorkflowTaskQueueResponse *none = poll_wft(f->ch, "tq-sr-sticky-3", 1, "tq-sr", 1200);
  protobuf_c_message_free_unpacked(&none->base, NULL);
  respond(f->ch, t->task_token, NULL, NULL, NULL, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  signal_run(f->ch, "sticky-reset");
  t = next_on_normal(f, "tq-sr", 15);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "sticky-reset", run_id), WS(COMPLETED));
  /* the reset of an unknown run is NOT_FOUND */
  ResetStickyTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_STICKY_TASK_QUEUE_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "no-such-workflow";
  q.namespace_ = "default";
  q.execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "ResetStickyTaskQueue", &q.base, &ResetStickyTaskQueueResponse__D, 5000,
                                 NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  free(run_id);
}

static void test_sticky_queue_too_long_for_a_key_is_not_used(void **state) {
  fixture *f = *state;
  char sticky[601];
  memset(sticky, 's', sizeof sticky - 1);
  sticky[sizeof sticky - 1] = '\0';
  char *run_id = dbx_svct_workflow_start(f->ch, "sticky-long", "tq-sl");
  PollWorkflowTaskQueueResponse *t = first_task(f, "tq-sl", sticky); /* the long queue has a poller */
  Command cmd;
  StartTimerCommandAttributes ta;
  Duration d;
  respond(f->ch, t->task_token, timer_cmd(&cmd, &ta, &d, "t1", 200), sticky, "tq-sl", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* the timer fires; its workflow task is on the normal queue (a sticky one
   * would need a key of 614 bytes: the timer's change could not be stored,
   * and before the fix every later batch failed with it) */
  t = next_on_normal(f, "tq-sl", 8); /* 4 completed, 5 timer started, 6 fired, 7 scheduled, 8 started */
  GetSystemInfoRequest gq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
  assert_int_equal(dbx_svct_call(f->ch, "GetSystemInfo", &gq.base, &GetSystemInfoResponse__D, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "sticky-long", run_id), WS(COMPLETED));
  free(run_id);
}

static void fail_task(dbx_rpc_channel *ch, ProtobufCBinaryData token) {
  RespondWorkflowTaskFailedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_FAILED_REQUEST);
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  fl.message = "it fails";
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it-sticky-worker";
  q.failure = &fl;
  q.cause = TEMPORAL__API__ENUMS__V1__WORKFLOW_TASK_FAILED_CAUSE__WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE;
  assert_int_equal(dbx_svct_call(ch, "RespondWorkflowTaskFailed", &q.base, &RespondWorkflowTaskFailedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
}

static void test_sticky_failure_retries_on_normal_with_same_attempt(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "sticky-fail", "tq-sf");
  PollWorkflowTaskQueueResponse *t = first_task(f, "tq-sf", "tq-sf-sticky-1");
  respond(f->ch, t->task_token, NULL, "tq-sf-sticky-1", "tq-sf", 5000);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  signal_run(f->ch, "sticky-fail");
  t = poll_wft(f->ch, "tq-sf-sticky-1", 1, "tq-sf", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->attempt, 1);
  fail_task(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  t = next_on_normal(f, "tq-sf", 10); /* 8 failed, 9 scheduled, 10 started */
  assert_int_equal(t->attempt, 1);
  fail_task(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  t = next_on_normal(f, "tq-sf", 13);
  assert_int_equal(t->attempt, 2);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "sticky-fail", run_id), WS(COMPLETED));
  free(run_id);
}

/* ------------------------------------------------------------ the C worker */

/* it.Steps: three timers one after the other, then completes with the
 * number of timers fired; every step is its own workflow task. */
typedef struct {
  int fired;
} steps;
static void *steps_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  dbx_wf_start_timer(wf, 100);
  return calloc(1, sizeof(steps));
}
static void steps_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)seq;
  steps *s = st;
  if (++s->fired < 3) {
    dbx_wf_start_timer(wf, 100);
    return;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "{\"fired\":%d}", s->fired);
  dbx_wf_complete(wf, buf);
}
static const dbx_workflow_type wf_steps = {"it.Steps", steps_create, NULL, steps_timer, NULL, NULL, NULL, free};

/* it.Meet: one timer; its workflow task waits (up to 2 s, under the sticky
 * queue's 5 s schedule-to-start timeout) until as many runs as meet_want are
 * inside that same task, then completes with how many were inside at once.
 * Two runs meet only if two of their sticky tasks run at once. */
static pthread_mutex_t meet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meet_cv = PTHREAD_COND_INITIALIZER;
static int meet_in, meet_peak, meet_want = 2; /* inside now; most inside at once since
                                                 the last time none was */
static void *meet_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  dbx_wf_start_timer(wf, 200); /* the sticky pollers are polling by then */
  return calloc(1, 1);
}
static void meet_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st, (void)seq;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  pthread_mutex_lock(&meet_mu);
  if (++meet_in > meet_peak) meet_peak = meet_in;
  pthread_cond_broadcast(&meet_cv);
  while (meet_peak < meet_want && pthread_cond_timedwait(&meet_cv, &meet_mu, &until) == 0) {
  }
  int seen = meet_peak;
  if (--meet_in == 0) meet_peak = 0;
  pthread_mutex_unlock(&meet_mu);
  char buf[32];
  snprintf(buf, sizeof buf, "{\"met\":%d}", seen);
  dbx_wf_complete(wf, buf);
}
static const dbx_workflow_type wf_meet = {"it.Meet", meet_create, NULL, meet_timer, NULL, NULL, NULL, free};

static dbx_worker *worker_start_p(fixture *f, const char *dir, int cache, int wf_pollers,
                                  int sticky_pollers, int wft_threads) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(f->svc));
  dbx_worker_opts o = {0};
  o.address = addr;
  o.task_queue = "tq-cw";
  o.db_dir = dir;
  o.no_sync = 1;
  o.workflow_pollers = wf_pollers;
  o.max_cached_runs = cache;
  o.sticky_pollers = sticky_pollers;
  o.workflow_task_threads = wft_threads;
  dbx_worker *w = NULL;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, &err), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_steps), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_meet), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  return w;
}

static dbx_worker *worker_start_n(fixture *f, const char *dir, int cache, int sticky_pollers,
                                  int wft_threads) {
  return worker_start_p(f, dir, cache, 1, sticky_pollers, wft_threads);
}

static dbx_worker *worker_start(fixture *f, const char *dir, int cache) {
  return worker_start_n(f, dir, cache, 0, 0);
}

static char *start_steps(dbx_client *c, const char *wfid) {
  dbx_client_start_opts so = {0};
  so.workflow_id = wfid;
  so.workflow_type = "it.Steps";
  so.task_queue = "tq-cw";
  char *run_id = NULL, *err = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &so, &run_id, &err), DBX_OK);
  return run_id;
}

static dbx_client *client_of(fixture *f) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(f->svc));
  dbx_client_opts co = {0};
  co.address = addr;
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  return c;
}

static void test_c_worker_uses_its_sticky_queue(void **state) {
  fixture *f = *state;
  char *dir = dbx_test_tmpdir("it-sticky-w1");
  dbx_worker *w = worker_start(f, dir, 0);
  dbx_client *c = client_of(f);
  char *run_id = start_steps(c, "cw-steps-1");
  char *res = dbx_svct_await_result(c, "cw-steps-1", run_id, 3);
  assert_string_equal(res, "{\"fired\":3}");
  dbx_worker_stats st;
  dbx_worker_get_stats(w, &st);
  /* tasks 2..4 came on the sticky queue and were applied to the cached run */
  assert_int_equal(st.sticky_tasks, 3);
  assert_int_equal(st.cache_hits, 3);
  assert_int_equal(st.full_history_fetches, 0);
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "cw-steps-1", run_id, &h);
  const TaskQueue *q = scheduled_queue(&h, 2);
  assert_int_equal(q->kind, TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY);
  assert_string_equal(q->normal_name, "tq-cw");
  assert_null(nth_of(&h, ET(WORKFLOW_TASK_TIMED_OUT), 1));
  dbx_svct_history_cleanup(&h);
  free(res);
  free(run_id);
  dbx_client_destroy(c);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_c_worker_cache_miss_fetches_full_history(void **state) {
  fixture *f = *state;
  char *dir = dbx_test_tmpdir("it-sticky-w2");
  dbx_worker *w = worker_start(f, dir, 1); /* one run cached: two runs evict each other */
  dbx_client *c = client_of(f);
  char *r1 = start_steps(c, "cw-evict-1");
  char *r2 = start_steps(c, "cw-evict-2");
  char *a = dbx_svct_await_result(c, "cw-evict-1", r1, 3);
  char *b = dbx_svct_await_result(c, "cw-evict-2", r2, 3);
  assert_string_equal(a, "{\"fired\":3}");
  assert_string_equal(b, "{\"fired\":3}");
  dbx_worker_stats st;
  dbx_worker_get_stats(w, &st);
  assert_true(st.sticky_tasks >= 1);
  /* every sticky task whose run was evicted was replayed from the full history */
  assert_true(st.full_history_fetches >= 1);
  assert_int_equal(st.cache_hits + st.full_history_fetches, st.sticky_tasks);
  assert_int_equal(st.nondeterminism, 0);
  free(a);
  free(b);
  free(r1);
  free(r2);
  dbx_client_destroy(c);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Two it.Meet runs on a worker with sticky_pollers and workflow_task_threads
 * as given; both results must be want (how many of their sticky tasks were
 * inside at once), within wait_s. */
static void meet_two(fixture *f, const char *tag, int sticky_pollers, int wft_threads,
                     const char *want, int wait_s) {
  char name[64];
  snprintf(name, sizeof name, "it-sticky-%s", tag);
  char *dir = dbx_test_tmpdir(name);
  dbx_worker *w = worker_start_n(f, dir, 0, sticky_pollers, wft_threads);
  dbx_client *c = client_of(f);
  dbx_client_start_opts so = {0};
  so.workflow_type = "it.Meet";
  so.task_queue = "tq-cw";
  char *rid[2], *res[2], *err = NULL, ids[2][64];
  for (int i = 0; i < 2; i++) {
    snprintf(ids[i], sizeof ids[i], "cw-meet-%s-%d", tag, i + 1);
    so.workflow_id = ids[i];
    assert_int_equal(dbx_client_start_workflow(c, &so, &rid[i], &err), DBX_OK);
  }
  for (int i = 0; i < 2; i++) res[i] = dbx_svct_await_result(c, ids[i], rid[i], wait_s);
  for (int i = 0; i < 2; i++) assert_string_equal(res[i], want);
  dbx_worker_stats st;
  dbx_worker_get_stats(w, &st);
  assert_int_equal(st.sticky_tasks, 2);
  for (int i = 0; i < 2; i++) {
    free(res[i]);
    free(rid[i]);
  }
  dbx_client_destroy(c);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Two sticky pollers and the default threads: two runs' sticky tasks run at
 * once (when a poller ran its own task, one sticky poller made the first
 * wait its 2 s alone and complete with {"met":1}). */
static void test_c_worker_sticky_tasks_run_concurrently(void **state) {
  meet_two(*state, "w3", 2, 0, "{\"met\":2}", 3);
}

/* One sticky poller hands each task to the workflow task threads and polls
 * again: with two threads, the two runs' tasks still meet. */
static void test_c_worker_one_poller_feeds_many_threads(void **state) {
  meet_two(*state, "w4", 1, 2, "{\"met\":2}", 3);
}

/* The threads bound how many tasks run at once, whatever the pollers: with
 * one thread and two sticky pollers the tasks run one after the other (each
 * waits its 2 s alone), and both are answered. */
static void test_c_worker_task_threads_bound_concurrency(void **state) {
  meet_two(*state, "w5", 2, 1, "{\"met\":1}", 8);
}

/* Fewer threads than pollers: while the one thread's queue is full every
 * poller waits, and when the thread takes the task every one of them must
 * poll again. Woken one at a time, the sticky pollers slept on while a
 * normal poller took the room, so sticky tasks waited out the queue's 5 s
 * schedule-to-start and went back to the normal queue (found by a newcomer
 * check: 200 workflows took 60 to 76 s instead of under 2). 24 runs on four
 * pollers of each queue and one thread: every timer task must come from the
 * sticky queue. */
static void test_c_worker_pollers_all_resume_when_queue_has_room(void **state) {
  fixture *f = *state;
  char *dir = dbx_test_tmpdir("it-sticky-w6");
  dbx_worker *w = worker_start_p(f, dir, 0, 4, 4, 1);
  dbx_client *c = client_of(f);
  dbx_client_start_opts so = {0};
  so.workflow_type = "it.Meet";
  so.task_queue = "tq-cw";
  enum { N = 24 };
  char *rid[N], *err = NULL, ids[N][64];
  pthread_mutex_lock(&meet_mu);
  meet_want = 1; /* each run's timer task completes at once */
  pthread_mutex_unlock(&meet_mu);
  for (int i = 0; i < N; i++) {
    snprintf(ids[i], sizeof ids[i], "cw-room-%d", i + 1);
    so.workflow_id = ids[i];
    assert_int_equal(dbx_client_start_workflow(c, &so, &rid[i], &err), DBX_OK);
  }
  for (int i = 0; i < N; i++) {
    char *res = dbx_svct_await_result(c, ids[i], rid[i], 30);
    assert_non_null(res);
    assert_string_equal(res, "{\"met\":1}");
    free(res);
    free(rid[i]);
  }
  dbx_worker_stats st;
  dbx_worker_get_stats(w, &st);
  pthread_mutex_lock(&meet_mu);
  meet_want = 2;
  pthread_mutex_unlock(&meet_mu);
  assert_int_equal(st.sticky_tasks, N);
  dbx_client_destroy(c);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sticky_task_carries_only_new_events),
      cmocka_unit_test(test_sticky_timeout_falls_back_to_the_normal_queue),
      cmocka_unit_test(test_sticky_reset_and_unpolled_queue_go_to_normal),
      cmocka_unit_test(test_sticky_queue_too_long_for_a_key_is_not_used),
      cmocka_unit_test(test_sticky_failure_retries_on_normal_with_same_attempt),
      cmocka_unit_test(test_c_worker_uses_its_sticky_queue),
      cmocka_unit_test(test_c_worker_cache_miss_fetches_full_history),
      cmocka_unit_test(test_c_worker_sticky_tasks_run_concurrently),
      cmocka_unit_test(test_c_worker_one_poller_feeds_many_threads),
      cmocka_unit_test(test_c_worker_task_threads_bound_concurrency),
      cmocka_unit_test(test_c_worker_pollers_all_resume_when_queue_has_room),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
