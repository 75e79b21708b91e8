/* Integration tests of the embedded service's workflow semantics that
 * Temporal's SDKs rely on, in process with a real gRPC client playing the
 * worker:
 * - history limits: suggest_continue_as_new on WorkflowTaskStarted past the
 *   suggestion limit, termination with Temporal's reason past the error limit;
 * - completing the workflow while events arrived during the task fails the
 *   task with UNHANDLED_COMMAND, writes the events, and a new task follows;
 * - a workflow task that is not answered times out and comes back as
 *   attempt 2;
 * - a workflow run timeout closes the run as TIMED_OUT;
 * - an activity's ScheduleToStart timeout holds without a ScheduleToClose
 *   one;
 * - a history over the 4 MiB page size reaches the worker in pages that join
 *   up exactly (the poll's next_page_token continued by
 *   GetWorkflowExecutionHistory);
 * - calls that wait (a poll, a history long poll) run in one batch with the
 *   call that answers them, after it in the batch: they park only after the
 *   commit and must still be woken (a missed wake-up answers them empty at
 *   their deadline instead);
 * - temporary stores left by killed services are removed by the next one;
 * - a parked poll is answered before its client's deadline even while a
 *   slow commit holds the engine past it (the rpc layer's fallback answer;
 *   the commit held by the service.commit.before=stall failpoint). */
#include "tests/svc_client.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/util.h"
#include "service/service.h"

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  /* small limits, set through the same keys as --dynamic-config-value */
  if (dbx_service_opts_dynamic_config(&o, "limit.historyCount.suggestContinueAsNew", "5") != 1 ||
      dbx_service_opts_dynamic_config(&o, "limit.historyCount.warn", "8") != 1 ||
      dbx_service_opts_dynamic_config(&o, "limit.historyCount.error", "12") != 1 ||
      dbx_service_opts_dynamic_config(&o, "limit.historyCount.error", "-3") != -1 ||
      dbx_service_opts_dynamic_config(&o, "frontend.unknownKey", "1") != 0)
    return -1;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

static void start_with(dbx_rpc_channel *ch, const char *wfid, const char *tq, int64_t task_timeout_s,
                       int64_t run_timeout_s, char **run_id) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration task = INIT(GOOGLE__PROTOBUF__DURATION), run = INIT(GOOGLE__PROTOBUF__DURATION);
  wt.name = "it.Workflow";
  t.name = (char *)tq;
  task.seconds = task_timeout_s;
  run.seconds = run_timeout_s;
  q.namespace_ = "default";
  q.workflow_id = (char *)wfid;
  q.workflow_type = &wt;
  q.task_queue = &t;
  q.request_id = (char *)wfid;
  if (task_timeout_s) q.workflow_task_timeout = &task;
  if (run_timeout_s) q.workflow_run_timeout = &run;
  StartWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  *run_id = strdup(r->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* RespondWorkflowTaskCompleted with no commands (or one command); returns the status. */
static int wft_respond(dbx_rpc_channel *ch, ProtobufCBinaryData token, Command *cmd) {
  RespondWorkflowTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {cmd};
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it";
  q.n_commands = cmd ? 1 : 0;
  q.commands = cmd ? cmds : NULL;
  return dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &q.base, &RespondWorkflowTaskCompletedResponse__D,
                       5000, NULL, NULL);
}

static void signal(dbx_rpc_channel *ch, const char *wfid, const char *name) {
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = (char *)name;
  assert_int_equal(dbx_svct_call(ch, "SignalWorkflowExecution", &q.base, &SignalWorkflowExecutionResponse__D, 5000,
                                 NULL, NULL),
                   DBX_GRPC_OK);
}

static const HistoryEvent *event_at(const dbx_svct_history *h, int64_t id) {
  for (size_t i = 0; i < h->n; i++)
    if (h->events[i]->event_id == id) return h->events[i];
  return NULL;
}

static void assert_contiguous(const dbx_svct_history *h) {
  for (size_t i = 0; i < h->n; i++) assert_int_equal(h->events[i]->event_id, (int64_t)i + 1);
}

static void test_svc_history_limits_suggest_then_terminate(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "limits", "tq-limits", 0, 0, &run_id);
  /* each round: a workflow task answered with no commands, then a signal */
  for (int round = 0; round < 3; round++) {
    PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-limits", 5000);
    assert_true(t->task_token.len > 0);
    int st = wft_respond(f->ch, t->task_token, NULL);
    protobuf_c_message_free_unpacked(&t->base, NULL);
    assert_int_equal(st, DBX_GRPC_OK);
    if (round < 2) signal(f->ch, "limits", "tick");
  }
  /* 12 events reached the error limit: the run was terminated after them */
  assert_int_equal(dbx_svct_workflow_status(f->ch, "limits", run_id), WS(TERMINATED));
  dbx_svct_history h = {0};
  dbx_svct_history_get(f->ch, "limits", run_id, &h);
  assert_contiguous(&h);
  assert_int_equal(h.n, 13);
  const HistoryEvent *first = event_at(&h, 3), *second = event_at(&h, 7), *last = event_at(&h, 13);
  assert_int_equal(first->event_type, ET(WORKFLOW_TASK_STARTED));
  assert_false(first->workflow_task_started_event_attributes->suggest_continue_as_new); /* 2 events < 5 */
  assert_int_equal(second->event_type, ET(WORKFLOW_TASK_STARTED));
  assert_true(second->workflow_task_started_event_attributes->suggest_continue_as_new); /* 6 events >= 5 */
  assert_true(second->workflow_task_started_event_attributes->history_size_bytes > 0);
  assert_int_equal(last->event_type, ET(WORKFLOW_EXECUTION_TERMINATED));
  assert_string_equal(last->workflow_execution_terminated_event_attributes->reason,
                      "Workflow history size / count exceeds limit.");
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

static void test_svc_unhandled_command_when_events_arrived(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "unhandled", "tq-unhandled", 0, 0, &run_id);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-unhandled", 5000);
  assert_true(t->task_token.len > 0);
  signal(f->ch, "unhandled", "late"); /* arrives while the task is started: buffered */
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes ca = INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  cmd.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  cmd.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  cmd.complete_workflow_execution_command_attributes = &ca;
  assert_int_equal(wft_respond(f->ch, t->task_token, &cmd), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "unhandled", run_id), WS(RUNNING));
  /* the next task carries the failure and the signal; completing now works */
  t = dbx_svct_wft_poll(f->ch, "tq-unhandled", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->history->n_events, 7);
  const HistoryEvent *failed = t->history->events[3], *sig = t->history->events[4];
  assert_int_equal(failed->event_type, ET(WORKFLOW_TASK_FAILED));
  assert_int_equal(failed->workflow_task_failed_event_attributes->cause, WFC(UNHANDLED_COMMAND));
  assert_int_equal(failed->workflow_task_failed_event_attributes->started_event_id, 3);
  assert_int_equal(sig->event_type, ET(WORKFLOW_EXECUTION_SIGNALED));
  assert_string_equal(sig->workflow_execution_signaled_event_attributes->signal_name, "late");
  assert_int_equal(t->history->events[5]->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  assert_int_equal(t->history->events[6]->event_type, ET(WORKFLOW_TASK_STARTED));
  assert_int_equal(t->previous_started_event_id, 0); /* no task completed yet */
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "unhandled", run_id), WS(COMPLETED));
  free(run_id);
}

static void test_svc_workflow_task_timeout_then_attempt_2(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "wft-timeout", "tq-wft-timeout", 1, 0, &run_id);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-wft-timeout", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->attempt, 1);
  ProtobufCBinaryData stale = {t->task_token.len, malloc(t->task_token.len)};
  memcpy(stale.data, t->task_token.data, stale.len);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* no answer: the 1 s start-to-close timeout fires */
  assert_true(dbx_svct_history_wait_for(f->ch, "wft-timeout", run_id, ET(WORKFLOW_TASK_TIMED_OUT), 10000));
  t = dbx_svct_wft_poll(f->ch, "tq-wft-timeout", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->attempt, 2);
  const HistoryEvent *to = t->history->events[3];
  assert_int_equal(to->event_type, ET(WORKFLOW_TASK_TIMED_OUT));
  assert_int_equal(to->workflow_task_timed_out_event_attributes->timeout_type, TT(START_TO_CLOSE));
  assert_int_equal(t->history->events[4]->workflow_task_scheduled_event_attributes->attempt, 2);
  /* the first attempt's token is stale now */
  assert_int_equal(wft_respond(f->ch, stale, NULL), DBX_GRPC_NOT_FOUND);
  free(stale.data);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "wft-timeout", run_id), WS(COMPLETED));
  free(run_id);
}

static void test_svc_run_timeout_closes_the_run(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "run-timeout", "tq-run-timeout", 0, 1, &run_id);
  assert_true(dbx_svct_history_wait_for(f->ch, "run-timeout", run_id, ET(WORKFLOW_EXECUTION_TIMED_OUT), 10000));
  assert_int_equal(dbx_svct_workflow_status(f->ch, "run-timeout", run_id), WS(TIMED_OUT));
  dbx_svct_history h = {0};
  dbx_svct_history_get(f->ch, "run-timeout", run_id, &h);
  assert_contiguous(&h);
  assert_int_equal(h.events[h.n - 1]->workflow_execution_timed_out_event_attributes->retry_state, RS(TIMEOUT));
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

/* A ScheduleToStart timeout holds without a ScheduleToClose one (Temporal:
 * an unset schedule-to-close is unlimited, and the schedule-to-start
 * timeout stands alone): the activity nobody polls times out after 1 s as
 * ScheduleToStart, not retried (RetryState NON_RETRYABLE_FAILURE), and the
 * workflow gets a task for it. Before the fix the timer was armed only when
 * it was shorter than a schedule-to-close timeout, so here never. */
static void test_svc_schedule_to_start_alone_times_out(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "s2s-alone", "tq-s2s-alone", 0, 0, &run_id);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-s2s-alone", 5000);
  assert_true(t->task_token.len > 0);
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ScheduleActivityTaskCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  TaskQueue atq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration s2s = INIT(GOOGLE__PROTOBUF__DURATION), st2c = INIT(GOOGLE__PROTOBUF__DURATION);
  at.name = "it.Activity";
  atq.name = "tq-s2s-nobody-polls";
  s2s.seconds = 1;
  st2c.seconds = 60;
  a.activity_id = "1";
  a.activity_type = &at;
  a.task_queue = &atq;
  a.schedule_to_start_timeout = &s2s;
  a.start_to_close_timeout = &st2c;
  cmd.command_type = CT(SCHEDULE_ACTIVITY_TASK);
  cmd.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  cmd.schedule_activity_task_command_attributes = &a;
  assert_int_equal(wft_respond(f->ch, t->task_token, &cmd), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_true(dbx_svct_history_wait_for(f->ch, "s2s-alone", run_id, ET(ACTIVITY_TASK_TIMED_OUT), 10000));
  dbx_svct_history h = {0};
  dbx_svct_history_get(f->ch, "s2s-alone", run_id, &h);
  assert_contiguous(&h);
  const HistoryEvent *sched = NULL, *to = NULL;
  for (size_t i = 0; i < h.n; i++) {
    if (h.events[i]->event_type == ET(ACTIVITY_TASK_SCHEDULED)) sched = h.events[i];
    if (h.events[i]->event_type == ET(ACTIVITY_TASK_TIMED_OUT)) to = h.events[i];
  }
  assert_non_null(sched);
  assert_non_null(to);
  const ActivityTaskTimedOutEventAttributes *ta = to->activity_task_timed_out_event_attributes;
  assert_int_equal(ta->scheduled_event_id, sched->event_id);
  assert_int_equal(ta->started_event_id, 0); /* it never started */
  assert_int_equal(ta->retry_state, RS(NON_RETRYABLE_FAILURE));
  assert_non_null(ta->failure);
  assert_int_equal(ta->failure->failure_info_case, FI(TIMEOUT_FAILURE_INFO));
  assert_int_equal(ta->failure->timeout_failure_info->timeout_type, TT(SCHEDULE_TO_START));
  /* fired about 1 s after it was scheduled, not at once and not much later */
  int64_t waited_ms = (to->event_time->seconds - sched->event_time->seconds) * 1000 +
                      (to->event_time->nanos - sched->event_time->nanos) / 1000000;
  assert_in_range(waited_ms, 1000, 9000);
  assert_int_equal(h.events[h.n - 1]->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

static void signal_big(dbx_rpc_channel *ch, const char *wfid, size_t bytes) {
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp[1] = {&p};
  p.data.len = bytes;
  p.data.data = malloc(bytes);
  assert_non_null(p.data.data);
  memset(p.data.data, 'x', bytes);
  ps.n_payloads = 1;
  ps.payloads = pp;
  we.workflow_id = (char *)wfid;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = "big";
  q.input = &ps;
  assert_int_equal(dbx_svct_call(ch, "SignalWorkflowExecution", &q.base, &SignalWorkflowExecutionResponse__D, 10000,
                                 NULL, NULL),
                   DBX_GRPC_OK);
  free(p.data.data);
}

static void test_svc_large_history_in_pages(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "pages", "tq-pages", 0, 0, &run_id);
  for (int i = 0; i < 6; i++) signal_big(f->ch, "pages", 1u << 20); /* 6 MiB of signals before the first task */
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-pages", 10000);
  assert_true(t->task_token.len > 0);
  int64_t started = t->started_event_id;
  assert_int_equal(started, 9); /* 1 started, 2 task scheduled, 3..8 signals, 9 task started */
  size_t first = t->history->n_events;
  assert_true(first >= 1 && first < (size_t)started); /* the first page stopped before the end */
  assert_int_equal(t->next_page_token.len, 16);
  int64_t expect = 1;
  for (size_t i = 0; i < first; i++) assert_int_equal(t->history->events[i]->event_id, expect++);
  /* continue with GetWorkflowExecutionHistory until the token runs out */
  uint8_t tok[16];
  memcpy(tok, t->next_page_token.data, 16);
  size_t tok_len = 16;
  int pages = 1;
  while (tok_len) {
    GetWorkflowExecutionHistoryRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = "pages";
    we.run_id = run_id;
    q.namespace_ = "default";
    q.execution = &we;
    q.next_page_token.data = tok;
    q.next_page_token.len = tok_len;
    GetWorkflowExecutionHistoryResponse *r = NULL;
    assert_int_equal(dbx_svct_call(f->ch, "GetWorkflowExecutionHistory", &q.base, &GetWorkflowExecutionHistoryResponse__D,
                                   10000, (void **)&r, NULL),
                     DBX_GRPC_OK);
    assert_true(r->history->n_events > 0);
    for (size_t i = 0; i < r->history->n_events; i++) {
      assert_int_equal(r->history->events[i]->event_id, expect++);
      assert_true(r->history->events[i]->event_id <= started); /* never past the task's own history */
    }
    tok_len = r->next_page_token.len;
    assert_true(tok_len == 0 || tok_len == 16);
    if (tok_len) memcpy(tok, r->next_page_token.data, 16);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    pages++;
  }
  assert_int_equal(expect - 1, started);
  assert_true(pages >= 2);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "pages", run_id), WS(COMPLETED));
  free(run_id);
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *tq;
  int got;
} poll_arg;

static void *poll_thread(void *arg) {
  poll_arg *a = arg;
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(a->ch, a->tq, 8000);
  a->got = t->task_token.len > 0;
  if (a->got) dbx_svct_wft_complete_workflow(a->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  return NULL;
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *wf, *tq;
  char *run_id;
} start_arg;

static void *start_thread(void *arg) {
  start_arg *a = arg;
  start_with(a->ch, a->wf, a->tq, 0, 0, &a->run_id);
  return NULL;
}

static void wait_queued(dbx_service *svc, int n) {
  for (int i = 0; i < 10000 && dbx_service_test_queued(svc) < n; i++) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(dbx_service_test_queued(svc), n);
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *wf, *run_id;
  int64_t from;
  int got_event_type;
} history_arg;

/* GetWorkflowExecutionHistory(wait_new_event) from event `from`: the type of
 * the first event it returns, 0 when it came back empty. */
static void *history_thread(void *arg) {
  history_arg *a = arg;
  GetWorkflowExecutionHistoryRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  uint8_t tok[16] = {0};
  for (int i = 0; i < 8; i++) tok[i] = (uint8_t)((uint64_t)a->from >> (56 - 8 * i));
  we.workflow_id = (char *)a->wf;
  we.run_id = (char *)a->run_id;
  q.namespace_ = "default";
  q.execution = &we;
  q.wait_new_event = 1;
  q.next_page_token.data = tok;
  q.next_page_token.len = 16;
  GetWorkflowExecutionHistoryResponse *r = NULL;
  assert_int_equal(dbx_svct_call(a->ch, "GetWorkflowExecutionHistory", &q.base, &GetWorkflowExecutionHistoryResponse__D,
                                 8000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  a->got_event_type = r->history && r->history->n_events ? r->history->events[0]->event_type : 0;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return NULL;
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *wf;
} signal_arg;

static void *signal_thread(void *arg) {
  signal(((signal_arg *)arg)->ch, ((signal_arg *)arg)->wf, "wake");
  return NULL;
}

static void test_svc_waiters_in_the_answering_batch_are_woken(void **state) {
  fixture *f = *state;
  /* 1. a poll, then the start of its workflow, in one batch */
  dbx_service_test_hold(f->svc, 1);
  poll_arg a = {.ch = f->ch, .tq = "tq-race"};
  start_arg sa = {.ch = f->ch, .wf = "race", .tq = "tq-race"};
  pthread_t pt, st;
  assert_int_equal(pthread_create(&pt, NULL, poll_thread, &a), 0);
  wait_queued(f->svc, 1);
  assert_int_equal(pthread_create(&st, NULL, start_thread, &sa), 0);
  wait_queued(f->svc, 2);
  dbx_service_test_hold(f->svc, 0);
  pthread_join(st, NULL);
  pthread_join(pt, NULL);
  assert_true(a.got);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "race", sa.run_id), WS(COMPLETED));
  free(sa.run_id);

  /* 2. a history long poll for the next event, then the signal that writes it, in one batch */
  char *run_id = NULL;
  start_with(f->ch, "race-history", "tq-race-history", 0, 0, &run_id); /* events 1, 2 */
  dbx_service_test_hold(f->svc, 1);
  history_arg h = {.ch = f->ch, .wf = "race-history", .run_id = run_id, .from = 3};
  signal_arg sg = {.ch = f->ch, .wf = "race-history"};
  pthread_t ht, sgt;
  assert_int_equal(pthread_create(&ht, NULL, history_thread, &h), 0);
  wait_queued(f->svc, 1);
  assert_int_equal(pthread_create(&sgt, NULL, signal_thread, &sg), 0);
  wait_queued(f->svc, 2);
  dbx_service_test_hold(f->svc, 0);
  pthread_join(sgt, NULL);
  pthread_join(ht, NULL);
  assert_int_equal(h.got_event_type, ET(WORKFLOW_EXECUTION_SIGNALED));
  free(run_id);
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *wf;
  int status;
  char *answer; /* the first payload's data, malloc'd */
} query_arg;

/* QueryWorkflow "state" of wf's current run (10 s deadline). */
static void *query_thread(void *arg) {
  query_arg *a = arg;
  QueryWorkflowRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  WorkflowQuery wq = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
  we.workflow_id = (char *)a->wf;
  wq.query_type = "state";
  q.namespace_ = "default";
  q.execution = &we;
  q.query = &wq;
  QueryWorkflowResponse *r = NULL;
  a->status = dbx_svct_call(a->ch, "QueryWorkflow", &q.base, &QueryWorkflowResponse__D, 10000, (void **)&r, NULL);
  if (r && r->query_result && r->query_result->n_payloads)
    a->answer = dbx_strndup((const char *)r->query_result->payloads[0]->data.data,
                            r->query_result->payloads[0]->data.len);
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
  return NULL;
}

/* Temporal's order: a query that reaches the service before the run's first
 * workflow task has completed waits for that task, so the worker answers
 * from a run that has begun (its query task's history holds the completed
 * task); a closed run that never completed a task answers
 * FAILED_PRECONDITION at once. */
typedef struct {
  dbx_rpc_channel *ch;
  int status;
  int64_t took_ms;
} empty_poll_arg;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An activity poll of a queue nobody schedules on, with a 3 s deadline. */
static void *empty_poll_thread(void *arg) {
  empty_poll_arg *a = arg;
  PollActivityTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = "tq-nobody-stalled";
  q.namespace_ = "default";
  q.task_queue = &tq;
  int64_t t0 = mono_ms();
  PollActivityTaskQueueResponse *r = NULL;
  a->status = dbx_svct_call(a->ch, "PollActivityTaskQueue", &q.base, &PollActivityTaskQueueResponse__D, 3000,
                            (void **)&r, NULL);
  a->took_ms = mono_ms() - t0;
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
  return NULL;
}

static void test_svc_parked_poll_answered_while_a_commit_stalls(void **state) {
  fixture *f = *state;
  /* the poll parks first, in a batch of its own */
  dbx_service_test_hold(f->svc, 1);
  empty_poll_arg a = {.ch = f->ch};
  pthread_t pt;
  assert_int_equal(pthread_create(&pt, NULL, empty_poll_thread, &a), 0);
  wait_queued(f->svc, 1);
  dbx_service_test_hold(f->svc, 0);
  for (int i = 0; i < 10000 && dbx_service_test_queued(f->svc) > 0; i++) { /* the engine took it */
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(dbx_service_test_queued(f->svc), 0);
  /* then a commit holds the engine for 3.5 s, past the poll's deadline */
  assert_int_equal(dbx_failpoint_configure("service.commit.before=stall=3500:count=1", 1, NULL, NULL), DBX_OK);
  char *run_id = NULL;
  start_with(f->ch, "stalled-commit", "tq-stalled-commit", 0, 0, &run_id);
  dbx_failpoint_reset();
  pthread_join(pt, NULL);
  assert_int_equal(a.status, DBX_GRPC_OK); /* an empty poll, not DEADLINE_EXCEEDED */
  assert_true(a.took_ms < 3000);
  free(run_id);
}

static void test_svc_query_waits_for_the_first_workflow_task(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "query-first", "tq-query-first", 0, 0, &run_id); /* events 1, 2 */
  dbx_service_test_hold(f->svc, 1);
  query_arg qa = {.ch = f->ch, .wf = "query-first"};
  pthread_t qt;
  assert_int_equal(pthread_create(&qt, NULL, query_thread, &qa), 0);
  wait_queued(f->svc, 1); /* the query is in the engine before the first poll */
  dbx_service_test_hold(f->svc, 0);

  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-query-first", 5000);
  assert_true(t->task_token.len > 0);
  assert_null(t->query); /* the workflow task itself, not the query */
  dbx_svct_wft_start_timer(f->ch, t->task_token, "1", 60);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  t = dbx_svct_wft_poll(f->ch, "tq-query-first", 5000);
  assert_non_null(t->query);
  assert_string_equal(t->query->query_type, "state");
  assert_non_null(t->history);
  int completed = 0;
  for (size_t i = 0; i < t->history->n_events; i++)
    completed += t->history->events[i]->event_type == ET(WORKFLOW_TASK_COMPLETED);
  assert_int_equal(completed, 1);
  RespondQueryTaskCompletedRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_QUERY_TASK_COMPLETED_REQUEST);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp = &p;
  p.data.data = (uint8_t *)"\"begun\"";
  p.data.len = 7;
  ps.n_payloads = 1;
  ps.payloads = &pp;
  rq.namespace_ = "default";
  rq.task_token = t->task_token;
  rq.completed_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED;
  rq.query_result = &ps;
  assert_int_equal(dbx_svct_call(f->ch, "RespondQueryTaskCompleted", &rq.base, &RespondQueryTaskCompletedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  pthread_join(qt, NULL);
  assert_int_equal(qa.status, DBX_GRPC_OK);
  assert_string_equal(qa.answer, "\"begun\"");
  free(qa.answer);
  free(run_id);

  /* a run terminated before any workflow task completed */
  start_with(f->ch, "query-closed", "tq-query-closed", 0, 0, &run_id);
  TerminateWorkflowExecutionRequest tq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__TERMINATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "query-closed";
  tq.namespace_ = "default";
  tq.workflow_execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "TerminateWorkflowExecution", &tq.base, &TerminateWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  query_arg qc = {.ch = f->ch, .wf = "query-closed"};
  query_thread(&qc);
  assert_int_equal(qc.status, DBX_GRPC_FAILED_PRECONDITION);
  assert_null(qc.answer);
  free(run_id);
}

static void test_svc_terminated_run_has_nothing_pending(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  start_with(f->ch, "term-pending", "tq-term-pending", 0, 0, &run_id);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-term-pending", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "1", "tq-term-pending-act", 30, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  TerminateWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__TERMINATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "term-pending";
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.reason = "test";
  assert_int_equal(dbx_svct_call(f->ch, "TerminateWorkflowExecution", &q.base, &TerminateWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  DescribeWorkflowExecutionRequest d = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  d.namespace_ = "default";
  d.execution = &we;
  DescribeWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &d.base, &DescribeWorkflowExecutionResponse__D,
                                 5000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(r->workflow_execution_info->status, WS(TERMINATED));
  assert_int_equal(r->n_pending_activities, 0);
  assert_null(r->pending_workflow_task);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* the activity task queued before the termination is stale: never delivered */
  PollActivityTaskQueueResponse *a = dbx_svct_activity_poll(f->ch, "tq-term-pending-act", 2000);
  assert_int_equal(a->task_token.len, 0);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  free(run_id);
}

static void test_svc_one_service_per_store_and_port(void **state) {
  fixture *f = *state;
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  /* the same port as the running service: binding must fail, not share it */
  o.port = dbx_service_port(f->svc);
  dbx_service *second = NULL;
  char *err = NULL;
  assert_int_equal(dbx_service_start(&o, &second, &err), DBX_EIO);
  assert_non_null(err);
  assert_non_null(strstr(err, "already in use"));
  free(err);
  err = NULL;
  /* two services on one store directory: the second is refused */
  char *dir = dbx_test_tmpdir("it-svc-lock");
  o.port = 0;
  o.db_path = dir;
  dbx_service *a = NULL, *b = NULL;
  assert_int_equal(dbx_service_start(&o, &a, &err), DBX_OK);
  assert_int_equal(dbx_service_start(&o, &b, &err), DBX_ESTORE);
  assert_non_null(err);
  assert_non_null(strstr(err, "in use by another durabox service"));
  free(err);
  err = NULL;
  dbx_service_stop(a);
  /* once the first stops, the store opens again */
  assert_int_equal(dbx_service_start(&o, &b, &err), DBX_OK);
  dbx_service_stop(b);
  dbx_test_rmrf(dir);
  free(dir);
}

static void touch(const char *dir, const char *name) {
  char *p = dbx_asprintf("%s/%s", dir, name);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  close(fd);
  free(p);
}

/* A directory under dir named like a temporary store, with a service.lock
 * (when lock != 0), the temporary-store marker (when marker != 0) and its
 * mtime age_s seconds ago. Returns its path. */
static char *fake_store(const char *dir, const char *name, int lock, int marker, int age_s) {
  char *p = dbx_asprintf("%s/%s", dir, name);
  assert_int_equal(mkdir(p, 0700), 0);
  if (lock) touch(p, "service.lock");
  if (marker) touch(p, "temporary-store");
  struct timeval tv[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
  assert_int_equal(utimes(p, tv), 0);
  return p;
}

static void test_svc_temporary_store_sweeps_orphans(void **state) {
  (void)state;
  /* Stores of killed services are removed by the next service that makes a
   * temporary store; live, young, unknown and persistent ones (a store given
   * by path, even one named like a temporary store) are kept. */
  char *dir = dbx_test_tmpdir("it-svc-sweep");
  char *orphan = fake_store(dir, "durabox-dev.orphan", 1, 1, 3600);
  char *live = fake_store(dir, "durabox-dev.live", 1, 1, 3600);
  char *young = fake_store(dir, "durabox-dev.young", 1, 1, 0);
  char *nolock = fake_store(dir, "durabox-dev.nolock", 0, 1, 3600);
  char *persist = fake_store(dir, "durabox-dev.persist", 1, 0, 3600);
  char *other = fake_store(dir, "someone-else", 1, 1, 3600);
  char *lk = dbx_asprintf("%s/service.lock", live);
  int held = open(lk, O_RDWR | O_CLOEXEC);
  assert_true(held >= 0);
  assert_int_equal(flock(held, LOCK_EX | LOCK_NB), 0); /* as a live service holds it */
  const char *saved = getenv("TMPDIR");
  char *saved_copy = saved ? dbx_strdup(saved) : NULL;
  setenv("TMPDIR", dir, 1);
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  dbx_service *svc = NULL;
  char *err = NULL;
  assert_int_equal(dbx_service_start(&o, &svc, &err), DBX_OK);
  if (saved_copy) setenv("TMPDIR", saved_copy, 1);
  else unsetenv("TMPDIR");
  free(saved_copy);
  assert_int_equal(access(orphan, F_OK), -1);
  assert_int_equal(access(live, F_OK), 0);
  assert_int_equal(access(young, F_OK), 0);
  assert_int_equal(access(nolock, F_OK), 0);
  assert_int_equal(access(persist, F_OK), 0);
  assert_int_equal(access(other, F_OK), 0);
  /* the service's own temporary store is there while it runs, gone after */
  char *pat = dbx_asprintf("ls -d %s/durabox-dev.* | wc -l", dir);
  FILE *ls = popen(pat, "r");
  assert_non_null(ls);
  int count = -1;
  assert_int_equal(fscanf(ls, "%d", &count), 1);
  pclose(ls);
  assert_int_equal(count, 5); /* live, young, nolock, persist and its own */
  dbx_service_stop(svc);
  ls = popen(pat, "r");
  assert_non_null(ls);
  assert_int_equal(fscanf(ls, "%d", &count), 1);
  pclose(ls);
  assert_int_equal(count, 4);
  free(pat);
  /* a temporary store opened by path (to recover it) becomes persistent:
   * the marker goes, so no later sweep removes it */
  o.db_path = young;
  assert_int_equal(dbx_service_start(&o, &svc, &err), DBX_OK);
  char *mk = dbx_asprintf("%s/temporary-store", young);
  assert_int_equal(access(mk, F_OK), -1);
  free(mk);
  dbx_service_stop(svc);
  assert_int_equal(access(young, F_OK), 0);
  close(held);
  free(lk);
  free(orphan);
  free(live);
  free(young);
  free(nolock);
  free(persist);
  free(other);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_history_limits_suggest_then_terminate),
      cmocka_unit_test(test_svc_unhandled_command_when_events_arrived),
      cmocka_unit_test(test_svc_workflow_task_timeout_then_attempt_2),
      cmocka_unit_test(test_svc_run_timeout_closes_the_run),
      cmocka_unit_test(test_svc_schedule_to_start_alone_times_out),
      cmocka_unit_test(test_svc_large_history_in_pages),
      cmocka_unit_test(test_svc_terminated_run_has_nothing_pending),
      cmocka_unit_test(test_svc_one_service_per_store_and_port),
      cmocka_unit_test(test_svc_temporary_store_sweeps_orphans),
      cmocka_unit_test(test_svc_waiters_in_the_answering_batch_are_woken),
      cmocka_unit_test(test_svc_query_waits_for_the_first_workflow_task),
      cmocka_unit_test(test_svc_parked_poll_answered_while_a_commit_stalls),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
