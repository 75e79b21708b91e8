/* Integration tests of the payload blob limits (Temporal's
 * limit.blobSize.error / limit.blobSize.warn), configured small through the
 * dynamic-config keys, on the embedded service with a real gRPC client
 * playing client and worker:
 * - a start, a signal or a signal-with-start whose payload is over the limit
 *   is INVALID_ARGUMENT "Blob data size exceeds limit." and leaves nothing;
 *   just under it is accepted;
 * - a command whose payload is over the limit ends the run as Temporal's
 *   server does: WorkflowTaskFailed with the command's cause and message,
 *   then WorkflowExecutionTerminated, INVALID_ARGUMENT to the worker,
 *   nothing of the completion applied; at the limit it is accepted;
 * - an activity result over the limit fails the activity, non-retryable
 *   ("Complete result exceeds size limit."); so do heartbeat details
 *   ("Heartbeat details exceed size limit.", the heartbeat answered
 *   cancel_requested) and cancellation details ("Cancel details exceed size
 *   limit."); an oversized activity failure becomes "Failure exceeds size
 *   limit." with the original, cut, as its cause, oversized last heartbeat
 *   details are dropped, and the reply lists both replacements; an oversized
 *   workflow task failure is replaced the same way; query arguments over
 *   the limit are INVALID_ARGUMENT, and a query result over it fails the
 *   query with the blob limit's message;
 * - `durabox server start-dev --dynamic-config-value limit.blobSize.error=N`
 *   sets the same limit;
 * - a workflow id or task queue name that with the namespace is over the
 *   473 bytes the store's keys hold (svc.h MAX_KEYED_BYTES) is
 *   INVALID_ARGUMENT naming it, at the limit it is accepted; a lookup of a
 *   workflow id longer than any key is NOT_FOUND (not a storage error). */
#include "tests/svc_client.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "service/service.h"

#define LIMIT 1000

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  if (o.limits.blob_error_bytes != 2 << 20 || o.limits.blob_warn_bytes != 512 << 10) return -1; /* Temporal's defaults */
  if (dbx_service_opts_dynamic_config(&o, "limit.blobSize.error", "1000") != 1 ||
      dbx_service_opts_dynamic_config(&o, "limit.blobSize.warn", "400") != 1 ||
      dbx_service_opts_dynamic_config(&o, "limit.blobSize.error", "x") != -1)
    return -1;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

/* One payload whose Payloads message packs to exactly size bytes (size >= 8):
 * data of size - 5 bytes (tags and lengths take 5 up to 127 bytes of
 * data, 6 up to 16383). */
typedef struct {
  Payloads ps;
  Payload p;
  Payload *pp[1];
  uint8_t *buf;
} blob;
static void blob_make(blob *b, size_t size) {
  b->ps = (Payloads)INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  b->p = (Payload)INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  size_t data = size > 133 ? size - 6 : size - 4;
  b->buf = malloc(data);
  assert_non_null(b->buf);
  memset(b->buf, 'x', data);
  b->p.data.data = b->buf;
  b->p.data.len = data;
  b->pp[0] = &b->p;
  b->ps.payloads = b->pp;
  b->ps.n_payloads = 1;
  assert_int_equal(protobuf_c_message_get_packed_size(&b->ps.base), size);
}

static int start_with(fixture *f, const char *wfid, const char *tq, blob *b, char **message) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Workflow";
  t.name = (char *)tq;
  q.namespace_ = "default";
  q.workflow_id = (char *)wfid;
  q.workflow_type = &wt;
  q.task_queue = &t;
  q.input = b ? &b->ps : NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(f->ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, 5000, NULL,
                         &raw);
  if (message) *message = raw.message ? strdup(raw.message) : NULL;
  dbx_rpc_result_cleanup(&raw);
  return st;
}

static void test_limits_start_and_signal_over_the_limit_are_refused(void **state) {
  fixture *f = *state;
  blob big, ok;
  blob_make(&big, LIMIT + 1);
  blob_make(&ok, LIMIT);
  char *msg = NULL;
  assert_int_equal(start_with(f, "lim-start", "tq-lim", &big, &msg), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(msg);
  assert_string_equal(msg, "Blob data size exceeds limit.");
  free(msg);
  /* nothing was started */
  DescribeWorkflowExecutionRequest dq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "lim-start";
  dq.namespace_ = "default";
  dq.execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &dq.base, &DescribeWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  assert_int_equal(start_with(f, "lim-start", "tq-lim", &ok, NULL), DBX_GRPC_OK); /* at the limit: accepted */

  SignalWorkflowExecutionRequest sq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  sq.namespace_ = "default";
  sq.workflow_execution = &we;
  sq.signal_name = "s";
  sq.input = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &sq.base, &SignalWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_INVALID_ARGUMENT);
  sq.input = &ok.ps;
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &sq.base, &SignalWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lim-start", "", &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 1);
  dbx_svct_history_cleanup(&h);

  SignalWithStartWorkflowExecutionRequest wq =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WITH_START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Workflow";
  t.name = "tq-lim";
  wq.namespace_ = "default";
  wq.workflow_id = "lim-sws";
  wq.workflow_type = &wt;
  wq.task_queue = &t;
  wq.signal_name = "s";
  wq.signal_input = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "SignalWithStartWorkflowExecution", &wq.base,
                                 &SignalWithStartWorkflowExecutionResponse__D, 5000, NULL, NULL),
                   DBX_GRPC_INVALID_ARGUMENT);
  wq.signal_input = NULL;
  wq.input = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "SignalWithStartWorkflowExecution", &wq.base,
                                 &SignalWithStartWorkflowExecutionResponse__D, 5000, NULL, NULL),
                   DBX_GRPC_INVALID_ARGUMENT);
  free(big.buf);
  free(ok.buf);
}

static int respond_cmd(fixture *f, ProtobufCBinaryData token, Command *cmd, char **message) {
  RespondWorkflowTaskCompletedRequest q =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {cmd};
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it-limits";
  q.commands = cmds;
  q.n_commands = 1;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(f->ch, "RespondWorkflowTaskCompleted", &q.base, &RespondWorkflowTaskCompletedResponse__D,
                         5000, NULL, &raw);
  if (message) *message = raw.message ? strdup(raw.message) : NULL;
  dbx_rpc_result_cleanup(&raw);
  return st;
}

static const HistoryEvent *last_of(const dbx_svct_history *h, int type) {
  for (size_t i = h->n; i > 0; i--)
    if ((int)h->events[i - 1]->event_type == type) return h->events[i - 1];
  return NULL;
}

/* The run ended as Temporal's server ends it for an oversized command:
 * WorkflowTaskFailed (cause, message, a ServerFailure), then
 * WorkflowExecutionTerminated with the message as reason; nothing of the
 * completion applied. */
static void expect_task_failed_and_terminated(fixture *f, const char *wfid, int cause, const char *message) {
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, wfid, "", &h);
  assert_int_equal(h.n, 5);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_TASK_COMPLETED)), 0);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_SCHEDULED)), 0);
  const HistoryEvent *e = h.events[3];
  assert_int_equal(e->event_type, ET(WORKFLOW_TASK_FAILED));
  assert_int_equal(e->workflow_task_failed_event_attributes->cause, cause);
  assert_string_equal(e->workflow_task_failed_event_attributes->failure->message, message);
  assert_int_equal(e->workflow_task_failed_event_attributes->failure->failure_info_case, FI(SERVER_FAILURE_INFO));
  e = h.events[4];
  assert_int_equal(e->event_type, ET(WORKFLOW_EXECUTION_TERMINATED));
  assert_string_equal(e->workflow_execution_terminated_event_attributes->reason, message);
  assert_string_equal(e->workflow_execution_terminated_event_attributes->identity, "history-service");
  dbx_svct_history_cleanup(&h);
  assert_int_equal(dbx_svct_workflow_status(f->ch, wfid, ""), WS(TERMINATED));
}

static void test_limits_command_over_the_limit_fails_the_task(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  assert_int_equal(start_with(f, "lim-cmd", "tq-lim-cmd", NULL, NULL), DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-lim-cmd", 5000);
  assert_true(t->task_token.len > 0);
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ScheduleActivityTaskCommandAttributes sa = INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  at.name = "it.Activity";
  d.seconds = 30;
  sa.activity_id = "a1";
  sa.activity_type = &at;
  sa.start_to_close_timeout = &d;
  sa.input = &big.ps;
  cmd.command_type = CT(SCHEDULE_ACTIVITY_TASK);
  cmd.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  cmd.schedule_activity_task_command_attributes = &sa;
  char *msg = NULL;
  assert_int_equal(respond_cmd(f, t->task_token, &cmd, &msg), DBX_GRPC_INVALID_ARGUMENT);
  assert_string_equal(msg, "BadScheduleActivityAttributes: ScheduleActivityTaskCommandAttributes.Input exceeds size limit.");
  free(msg);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  expect_task_failed_and_terminated(
      f, "lim-cmd", TEMPORAL__API__ENUMS__V1__WORKFLOW_TASK_FAILED_CAUSE__WORKFLOW_TASK_FAILED_CAUSE_BAD_SCHEDULE_ACTIVITY_ATTRIBUTES,
      "BadScheduleActivityAttributes: ScheduleActivityTaskCommandAttributes.Input exceeds size limit.");

  /* a result over the limit ends its run the same way */
  assert_int_equal(start_with(f, "lim-cmd2", "tq-lim-cmd2", NULL, NULL), DBX_GRPC_OK);
  t = dbx_svct_wft_poll(f->ch, "tq-lim-cmd2", 5000);
  assert_true(t->task_token.len > 0);
  Command cc = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes ca =
      INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  ca.result = &big.ps;
  cc.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  cc.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  cc.complete_workflow_execution_command_attributes = &ca;
  assert_int_equal(respond_cmd(f, t->task_token, &cc, NULL), DBX_GRPC_INVALID_ARGUMENT);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  expect_task_failed_and_terminated(
      f, "lim-cmd2",
      TEMPORAL__API__ENUMS__V1__WORKFLOW_TASK_FAILED_CAUSE__WORKFLOW_TASK_FAILED_CAUSE_BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES,
      "BadCompleteWorkflowExecutionAttributes: CompleteWorkflowExecutionCommandAttributes.Result exceeds size limit.");

  /* at the limit: completed */
  blob ok;
  blob_make(&ok, LIMIT);
  assert_int_equal(start_with(f, "lim-cmd3", "tq-lim-cmd3", NULL, NULL), DBX_GRPC_OK);
  t = dbx_svct_wft_poll(f->ch, "tq-lim-cmd3", 5000);
  assert_true(t->task_token.len > 0);
  ca.result = &ok.ps;
  assert_int_equal(respond_cmd(f, t->task_token, &cc, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "lim-cmd3", ""), WS(COMPLETED));
  free(big.buf);
  free(ok.buf);
}

static void test_limits_activity_result_over_the_limit_fails_it(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  assert_int_equal(start_with(f, "lim-act", "tq-lim-act", NULL, NULL), DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-lim-act", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "a1", "tq-lim-act-a", 30, 0); /* retries allowed */
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollActivityTaskQueueResponse *a = dbx_svct_activity_poll(f->ch, "tq-lim-act-a", 5000);
  assert_true(a->task_token.len > 0);
  RespondActivityTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_REQUEST);
  q.namespace_ = "default";
  q.task_token = a->task_token;
  q.result = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCompleted", &q.base, &RespondActivityTaskCompletedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lim-act", "", &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 0);
  const HistoryEvent *e = last_of(&h, ET(ACTIVITY_TASK_FAILED));
  assert_non_null(e);
  const Failure *fl = e->activity_task_failed_event_attributes->failure;
  assert_string_equal(fl->message, "Complete result exceeds size limit.");
  assert_int_equal(fl->failure_info_case, FI(SERVER_FAILURE_INFO));
  assert_true(fl->server_failure_info->non_retryable);
  assert_int_equal(e->activity_task_failed_event_attributes->retry_state, RS(NON_RETRYABLE_FAILURE));
  dbx_svct_history_cleanup(&h);
  /* no second attempt */
  a = dbx_svct_activity_poll(f->ch, "tq-lim-act-a", 1200);
  assert_int_equal(a->task_token.len, 0);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  free(big.buf);
}

/* A run "wfid" whose activity a1 (task queue tq + "-a", retries allowed) is
 * started; returns its activity task. */
static PollActivityTaskQueueResponse *started_activity(fixture *f, const char *wfid, const char *tq) {
  char atq[128];
  snprintf(atq, sizeof atq, "%s-a", tq);
  assert_int_equal(start_with(f, wfid, tq, NULL, NULL), DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, tq, 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "a1", atq, 30, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollActivityTaskQueueResponse *a = dbx_svct_activity_poll(f->ch, atq, 5000);
  assert_true(a->task_token.len > 0);
  return a;
}

/* The run's last ActivityTaskFailed is a non-retryable server failure with msg. */
static void expect_activity_server_failure(fixture *f, const char *wfid, const char *msg) {
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, wfid, "", &h);
  const HistoryEvent *e = last_of(&h, ET(ACTIVITY_TASK_FAILED));
  assert_non_null(e);
  const Failure *fl = e->activity_task_failed_event_attributes->failure;
  assert_string_equal(fl->message, msg);
  assert_string_equal(fl->source, "Server");
  assert_int_equal(fl->failure_info_case, FI(SERVER_FAILURE_INFO));
  assert_true(fl->server_failure_info->non_retryable);
  assert_int_equal(e->activity_task_failed_event_attributes->retry_state, RS(NON_RETRYABLE_FAILURE));
  dbx_svct_history_cleanup(&h);
}

static void test_limits_heartbeat_and_cancel_details_over_the_limit_fail_the_activity(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  PollActivityTaskQueueResponse *a = started_activity(f, "lim-hb", "tq-lim-hb");
  RecordActivityTaskHeartbeatRequest hq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_REQUEST);
  hq.namespace_ = "default";
  hq.task_token = a->task_token;
  hq.details = &big.ps;
  RecordActivityTaskHeartbeatResponse *hr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "RecordActivityTaskHeartbeat", &hq.base,
                                 &RecordActivityTaskHeartbeatResponse__D, 5000, (void **)&hr, NULL),
                   DBX_GRPC_OK);
  assert_true(hr->cancel_requested); /* the worker is told to stop */
  protobuf_c_message_free_unpacked(&hr->base, NULL);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  expect_activity_server_failure(f, "lim-hb", "Heartbeat details exceed size limit.");

  a = started_activity(f, "lim-cancel", "tq-lim-cancel");
  RespondActivityTaskCanceledRequest cq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_CANCELED_REQUEST);
  cq.namespace_ = "default";
  cq.task_token = a->task_token;
  cq.details = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCanceled", &cq.base,
                                 &RespondActivityTaskCanceledResponse__D, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  expect_activity_server_failure(f, "lim-cancel", "Cancel details exceed size limit.");
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lim-cancel", "", &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_CANCELED)), 0);
  dbx_svct_history_cleanup(&h);
  free(big.buf);
}

static void test_limits_failure_over_the_limit_is_replaced(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  char msg[1600];
  memset(msg, 'm', sizeof msg - 1);
  msg[sizeof msg - 1] = '\0';
  memcpy(msg, "original:\xc3\xa9", 11); /* a two-byte character early on */
  PollActivityTaskQueueResponse *a = started_activity(f, "lim-fail", "tq-lim-fail");
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  ai.type = "Boom";
  fl.message = msg;
  fl.failure_info_case = FI(APPLICATION_FAILURE_INFO);
  fl.application_failure_info = &ai;
  RespondActivityTaskFailedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_REQUEST);
  q.namespace_ = "default";
  q.task_token = a->task_token;
  q.failure = &fl;
  q.last_heartbeat_details = &big.ps;
  RespondActivityTaskFailedResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskFailed", &q.base, &RespondActivityTaskFailedResponse__D,
                                 5000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(r->n_failures, 2);
  assert_string_equal(r->failures[0]->message, "Heartbeat details exceed size limit.");
  assert_string_equal(r->failures[1]->message, "Failure exceeds size limit.");
  protobuf_c_message_free_unpacked(&r->base, NULL);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  expect_activity_server_failure(f, "lim-fail", "Failure exceeds size limit.");
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lim-fail", "", &h);
  const HistoryEvent *e = last_of(&h, ET(ACTIVITY_TASK_FAILED));
  const Failure *cause = e->activity_task_failed_event_attributes->failure->cause;
  assert_non_null(cause); /* the original, cut to the warn limit */
  assert_int_equal(cause->failure_info_case, FI(APPLICATION_FAILURE_INFO));
  assert_string_equal(cause->application_failure_info->type, "Boom");
  assert_true(strncmp(cause->message, "original:\xc3\xa9mmm", 14) == 0);
  assert_true(strlen(cause->message) < 400);
  assert_true(protobuf_c_message_get_packed_size(&cause->base) <= 400);
  dbx_svct_history_cleanup(&h);

  /* a workflow task failure over the limit: replaced the same way */
  assert_int_equal(start_with(f, "lim-wft", "tq-lim-wft", NULL, NULL), DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-lim-wft", 5000);
  assert_true(t->task_token.len > 0);
  RespondWorkflowTaskFailedRequest wq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_FAILED_REQUEST);
  wq.namespace_ = "default";
  wq.task_token = t->task_token;
  wq.cause = TEMPORAL__API__ENUMS__V1__WORKFLOW_TASK_FAILED_CAUSE__WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE;
  wq.failure = &fl;
  assert_int_equal(dbx_svct_call(f->ch, "RespondWorkflowTaskFailed", &wq.base, &RespondWorkflowTaskFailedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  dbx_svct_history_get(f->ch, "lim-wft", "", &h);
  e = last_of(&h, ET(WORKFLOW_TASK_FAILED));
  assert_non_null(e);
  assert_string_equal(e->workflow_task_failed_event_attributes->failure->message, "Failure exceeds size limit.");
  assert_non_null(e->workflow_task_failed_event_attributes->failure->cause);
  dbx_svct_history_cleanup(&h);
  free(big.buf);
}

static void test_limits_query_arguments_over_the_limit_are_refused(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  assert_int_equal(start_with(f, "lim-query", "tq-lim-query", NULL, NULL), DBX_GRPC_OK);
  QueryWorkflowRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_REQUEST);
  WorkflowQuery wq = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "lim-query";
  wq.query_type = "state";
  wq.query_args = &big.ps;
  q.namespace_ = "default";
  q.execution = &we;
  q.query = &wq;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(dbx_svct_call(f->ch, "QueryWorkflow", &q.base, &QueryWorkflowResponse__D, 5000, NULL, &raw),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_string_equal(raw.message, "Blob data size exceeds limit.");
  dbx_rpc_result_cleanup(&raw);
  free(big.buf);
}

typedef struct {
  dbx_rpc_channel *ch;
  int status;
  char *message;
} query_arg;

static void *query_thread(void *arg) {
  query_arg *a = arg;
  QueryWorkflowRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_REQUEST);
  WorkflowQuery wq = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "lim-qres";
  wq.query_type = "state";
  q.namespace_ = "default";
  q.execution = &we;
  q.query = &wq;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  a->status = dbx_svct_call(a->ch, "QueryWorkflow", &q.base, &QueryWorkflowResponse__D, 10000, NULL, &raw);
  a->message = raw.message ? strdup(raw.message) : NULL;
  dbx_rpc_result_cleanup(&raw);
  return NULL;
}

static void test_limits_query_result_over_the_limit_fails_the_query(void **state) {
  fixture *f = *state;
  blob big;
  blob_make(&big, LIMIT + 1);
  assert_int_equal(start_with(f, "lim-qres", "tq-lim-qres", NULL, NULL), DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-lim-qres", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_start_timer(f->ch, t->task_token, "1", 60); /* the first task completes, the run goes on */
  protobuf_c_message_free_unpacked(&t->base, NULL);
  query_arg qa = {.ch = f->ch};
  pthread_t qt;
  assert_int_equal(pthread_create(&qt, NULL, query_thread, &qa), 0);
  t = dbx_svct_wft_poll(f->ch, "tq-lim-qres", 8000);
  assert_non_null(t->query);
  RespondQueryTaskCompletedRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_QUERY_TASK_COMPLETED_REQUEST);
  rq.namespace_ = "default";
  rq.task_token = t->task_token;
  rq.completed_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED;
  rq.query_result = &big.ps;
  assert_int_equal(dbx_svct_call(f->ch, "RespondQueryTaskCompleted", &rq.base, &RespondQueryTaskCompletedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  pthread_join(qt, NULL);
  assert_int_equal(qa.status, DBX_GRPC_INVALID_ARGUMENT); /* a failed query, as Temporal answers it */
  assert_non_null(qa.message);
  assert_string_equal(qa.message, "Blob data size exceeds limit.");
  free(qa.message);
  free(big.buf);
}

static void test_limits_ids_that_do_not_fit_a_store_key_are_refused(void **state) {
  fixture *f = *state;
  enum { FITS = 473 - 7 }; /* "default" is 7 bytes */
  char wfid[FITS + 2], tq[FITS + 2];
  memset(wfid, 'w', sizeof wfid - 1);
  memset(tq, 'q', sizeof tq - 1);
  wfid[FITS + 1] = tq[FITS + 1] = '\0';
  char *msg = NULL;
  assert_int_equal(start_with(f, wfid, "tq-key", NULL, &msg), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(msg);
  assert_non_null(strstr(msg, "workflow_id (467 bytes)"));
  assert_non_null(strstr(msg, "store keys"));
  free(msg);
  assert_int_equal(start_with(f, "key-tq", tq, NULL, &msg), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(msg);
  assert_non_null(strstr(msg, "task_queue.name (467 bytes)"));
  free(msg);
  wfid[FITS] = tq[FITS] = '\0';
  assert_int_equal(start_with(f, wfid, tq, NULL, NULL), DBX_GRPC_OK); /* at the limit */
  assert_int_equal(dbx_svct_workflow_status(f->ch, wfid, ""), WS(RUNNING));
  /* a lookup longer than any key: NOT_FOUND, as for any unknown id */
  char far[700];
  memset(far, 'w', sizeof far - 1);
  far[sizeof far - 1] = '\0';
  DescribeWorkflowExecutionRequest dq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = far;
  dq.namespace_ = "default";
  dq.execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &dq.base, &DescribeWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
}

static void test_limits_dynamic_config_flag_of_start_dev(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("it-limits-srv");
  int port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  char *argv[] = {(char *)dbx_test_bin(), "server", "start-dev", "--port", port_s, "--db-filename", dir,
                  "--log-level", "error", "--headless", "--dynamic-config-value", "limit.blobSize.error=300",
                  "--dynamic-config-value", "limit.blobSize.warn=200", NULL};
  pid_t pid = dbx_svct_proc_spawn(argv, NULL, NULL, NULL);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  fixture g = {NULL, ch};
  blob b;
  blob_make(&b, 301);
  assert_int_equal(start_with(&g, "lim-flag", "tq-flag", &b, NULL), DBX_GRPC_INVALID_ARGUMENT);
  free(b.buf);
  blob_make(&b, 300);
  assert_int_equal(start_with(&g, "lim-flag", "tq-flag", &b, NULL), DBX_GRPC_OK);
  free(b.buf);
  dbx_rpc_channel_destroy(ch);
  dbx_svct_proc_kill(pid, SIGKILL);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_limits_start_and_signal_over_the_limit_are_refused),
      cmocka_unit_test(test_limits_command_over_the_limit_fails_the_task),
      cmocka_unit_test(test_limits_activity_result_over_the_limit_fails_it),
      cmocka_unit_test(test_limits_heartbeat_and_cancel_details_over_the_limit_fail_the_activity),
      cmocka_unit_test(test_limits_failure_over_the_limit_is_replaced),
      cmocka_unit_test(test_limits_query_arguments_over_the_limit_are_refused),
      cmocka_unit_test(test_limits_query_result_over_the_limit_fails_the_query),
      cmocka_unit_test(test_limits_ids_that_do_not_fit_a_store_key_are_refused),
      cmocka_unit_test(test_limits_dynamic_config_flag_of_start_dev),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
