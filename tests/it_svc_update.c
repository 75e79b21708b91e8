/* Integration tests of workflow updates on the embedded service, through
 * real gRPC, with the test playing the worker by hand:
 * - an update admitted (wait ADMITTED) rides in the next workflow task as a
 *   protocol message carrying update.v1.Request; the worker's Acceptance and
 *   Response, named by PROTOCOL_MESSAGE commands, write
 *   WorkflowExecutionUpdateAccepted and WorkflowExecutionUpdateCompleted;
 *   PollWorkflowExecutionUpdate then answers the outcome, and the same
 *   update id again answers it without a new admission;
 * - a caller waiting for COMPLETED (another thread) is answered when the
 *   worker's completion arrives;
 * - a rejection (a validator) writes no update event and the caller gets the
 *   failure as the outcome;
 * - a wait that reaches its deadline answers the stage reached so far;
 * - an update of a closed run is NOT_FOUND "workflow execution already
 *   completed"; a poll of an unknown update id is NOT_FOUND;
 * - bad requests (no update id, an unknown message id) are INVALID_ARGUMENT;
 * - an update admitted while a workflow task is started gets a new task
 *   once that one completes;
 * - update-with-start (ExecuteMultiOperation): the start and the admitted
 *   update in one call, the request in the run's first workflow task; a
 *   start without a conflict policy is INVALID_ARGUMENT. */
#include "tests/svc_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/service.h"

#define STAGE(x) TEMPORAL__API__ENUMS__V1__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_##x

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

/* UpdateWorkflowExecution "setValue" with argument arg; returns the status,
 * the reply in *out (may be NULL). */
static int update_call(dbx_rpc_channel *ch, const char *wfid, const char *update_id, const char *arg, int wait,
                       int64_t timeout_ms, UpdateWorkflowExecutionResponse **out) {
  UpdateWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Temporal__Api__Update__V1__WaitPolicy wp = INIT(TEMPORAL__API__UPDATE__V1__WAIT_POLICY);
  UpdateRequest req = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp = &p;
  p.data.data = (uint8_t *)arg;
  p.data.len = strlen(arg);
  ps.payloads = &pp;
  ps.n_payloads = 1;
  we.workflow_id = (char *)wfid;
  wp.lifecycle_stage = wait;
  meta.update_id = (char *)update_id;
  meta.identity = "it-client";
  in.name = "setValue";
  in.args = &ps;
  req.meta = &meta;
  req.input = &in;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.wait_policy = &wp;
  q.request = &req;
  UpdateWorkflowExecutionResponse *r = NULL;
  int st = dbx_svct_call(ch, "UpdateWorkflowExecution", &q.base, &UpdateWorkflowExecutionResponse__D, timeout_ms,
                         (void **)&r, NULL);
  if (out)
    *out = r;
  else if (r)
    protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

static int poll_update(dbx_rpc_channel *ch, const char *wfid, const char *update_id, int wait, int64_t timeout_ms,
                       PollWorkflowExecutionUpdateResponse **out) {
  PollWorkflowExecutionUpdateRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_EXECUTION_UPDATE_REQUEST);
  Temporal__Api__Update__V1__UpdateRef ref = INIT(TEMPORAL__API__UPDATE__V1__UPDATE_REF);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Temporal__Api__Update__V1__WaitPolicy wp = INIT(TEMPORAL__API__UPDATE__V1__WAIT_POLICY);
  we.workflow_id = (char *)wfid;
  ref.workflow_execution = &we;
  ref.update_id = (char *)update_id;
  wp.lifecycle_stage = wait;
  q.namespace_ = "default";
  q.update_ref = &ref;
  q.wait_policy = &wp;
  *out = NULL;
  return dbx_svct_call(ch, "PollWorkflowExecutionUpdate", &q.base, &PollWorkflowExecutionUpdateResponse__D,
                       timeout_ms, (void **)out, NULL);
}

/* The task's one protocol message: checks it carries the update request of
 * update_id with name setValue and argument arg, sequenced before
 * WorkflowTaskStarted. Returns its id (borrowed from t). */
static const char *check_request_message(const PollWorkflowTaskQueueResponse *t, const char *update_id,
                                         const char *arg) {
  assert_int_equal(t->n_messages, 1);
  const ProtocolMessage *m = t->messages[0];
  assert_string_equal(m->protocol_instance_id, update_id);
  assert_int_equal(m->sequencing_id_case, TEMPORAL__API__PROTOCOL__V1__MESSAGE__SEQUENCING_ID_EVENT_ID);
  assert_int_equal(m->event_id, t->started_event_id - 1);
  assert_non_null(m->body);
  assert_string_equal(m->body->type_url, "type.googleapis.com/temporal.api.update.v1.Request");
  UpdateRequest *req = (UpdateRequest *)dbx_pb_unpack(&UpdateRequest__D, m->body->value.data, m->body->value.len);
  assert_non_null(req);
  assert_string_equal(req->meta->update_id, update_id);
  assert_string_equal(req->meta->identity, "it-client");
  assert_string_equal(req->input->name, "setValue");
  assert_int_equal(req->input->args->n_payloads, 1);
  assert_int_equal(req->input->args->payloads[0]->data.len, strlen(arg));
  assert_memory_equal(req->input->args->payloads[0]->data.data, arg, strlen(arg));
  protobuf_c_message_free_unpacked(&req->base, NULL);
  return m->id;
}

/* A protocol message answering update_id: body msg packed as type url. */
static ProtocolMessage *answer_message(const char *id, const char *update_id, const char *url,
                                       const ProtobufCMessage *msg, Any *body) {
  ProtocolMessage *m = calloc(1, sizeof *m);
  assert_non_null(m);
  temporal__api__protocol__v1__message__init(m);
  google__protobuf__any__init(body);
  body->type_url = (char *)url;
  body->value.data = dbx_pb_pack(msg, &body->value.len);
  assert_non_null(body->value.data);
  m->id = (char *)id;
  m->protocol_instance_id = (char *)update_id;
  m->body = body;
  return m;
}

/* RespondWorkflowTaskCompleted with these messages and commands. */
static int wft_respond(dbx_rpc_channel *ch, ProtobufCBinaryData token, ProtocolMessage **msgs, size_t n_msgs,
                       Command **cmds, size_t n_cmds) {
  RespondWorkflowTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it-worker";
  q.messages = msgs;
  q.n_messages = n_msgs;
  q.commands = cmds;
  q.n_commands = n_cmds;
  return dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &q.base, &RespondWorkflowTaskCompletedResponse__D, 5000,
                       NULL, NULL);
}

/* Accept the update the task carries (request message req_id) and answer it
 * with result; two PROTOCOL_MESSAGE commands name the two messages. */
static int accept_and_respond(dbx_rpc_channel *ch, const PollWorkflowTaskQueueResponse *t, const char *update_id,
                              const char *req_id, const char *result) {
  UpdateAcceptance acc = INIT(TEMPORAL__API__UPDATE__V1__ACCEPTANCE);
  acc.accepted_request_message_id = (char *)req_id;
  acc.accepted_request_sequencing_event_id = t->started_event_id - 1;
  UpdateResponse resp = INIT(TEMPORAL__API__UPDATE__V1__RESPONSE);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  UpdateOutcome o = INIT(TEMPORAL__API__UPDATE__V1__OUTCOME);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp = &p;
  p.data.data = (uint8_t *)result;
  p.data.len = strlen(result);
  ps.payloads = &pp;
  ps.n_payloads = 1;
  o.value_case = TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_SUCCESS;
  o.success = &ps;
  meta.update_id = (char *)update_id;
  meta.identity = "it-worker";
  resp.meta = &meta;
  resp.outcome = &o;
  Any b1, b2;
  ProtocolMessage *msgs[2] = {
      answer_message("acc-1", update_id, "type.googleapis.com/temporal.api.update.v1.Acceptance", &acc.base, &b1),
      answer_message("resp-1", update_id, "type.googleapis.com/temporal.api.update.v1.Response", &resp.base, &b2)};
  Command c1 = INIT(TEMPORAL__API__COMMAND__V1__COMMAND), c2 = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  Temporal__Api__Command__V1__ProtocolMessageCommandAttributes a1 =
      INIT(TEMPORAL__API__COMMAND__V1__PROTOCOL_MESSAGE_COMMAND_ATTRIBUTES);
  Temporal__Api__Command__V1__ProtocolMessageCommandAttributes a2 = a1;
  a1.message_id = "acc-1";
  a2.message_id = "resp-1";
  c1.command_type = TEMPORAL__API__ENUMS__V1__COMMAND_TYPE__COMMAND_TYPE_PROTOCOL_MESSAGE;
  c2.command_type = c1.command_type;
  c1.attributes_case = CMD(PROTOCOL_MESSAGE);
  c2.attributes_case = CMD(PROTOCOL_MESSAGE);
  c1.protocol_message_command_attributes = &a1;
  c2.protocol_message_command_attributes = &a2;
  Command *cmds[2] = {&c1, &c2};
  int st = wft_respond(ch, t->task_token, msgs, 2, cmds, 2);
  free(b1.value.data);
  free(b2.value.data);
  free(msgs[0]);
  free(msgs[1]);
  return st;
}

static int reject(dbx_rpc_channel *ch, const PollWorkflowTaskQueueResponse *t, const char *update_id,
                  const char *req_id, const char *why) {
  UpdateRejection rej = INIT(TEMPORAL__API__UPDATE__V1__REJECTION);
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  fl.message = (char *)why;
  rej.rejected_request_message_id = (char *)req_id;
  rej.rejected_request_sequencing_event_id = t->started_event_id - 1;
  rej.failure = &fl;
  Any b;
  ProtocolMessage *msgs[1] = {
      answer_message("rej-1", update_id, "type.googleapis.com/temporal.api.update.v1.Rejection", &rej.base, &b)};
  int st = wft_respond(ch, t->task_token, msgs, 1, NULL, 0);
  free(b.value.data);
  free(msgs[0]);
  return st;
}

static void test_update_accepted_then_completed(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "upd-ok", "tq-upd-ok");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-upd-ok", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->n_messages, 0); /* no update yet */
  dbx_svct_wft_start_timer(f->ch, t->task_token, "wait", 600);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  UpdateWorkflowExecutionResponse *r = NULL;
  assert_int_equal(update_call(f->ch, "upd-ok", "u-1", "41", STAGE(ADMITTED), 5000, &r), DBX_GRPC_OK);
  assert_int_equal(r->stage, STAGE(ADMITTED));
  assert_null(r->outcome);
  assert_string_equal(r->update_ref->update_id, "u-1");
  assert_string_equal(r->update_ref->workflow_execution->run_id, run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);

  /* a workflow task was scheduled for it, carrying the request */
  t = dbx_svct_wft_poll(f->ch, "tq-upd-ok", 5000);
  assert_true(t->task_token.len > 0);
  const char *req_id = check_request_message(t, "u-1", "41");
  assert_string_equal(req_id, "u-1/request");
  assert_int_equal(accept_and_respond(f->ch, t, "u-1", req_id, "42"), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  PollWorkflowExecutionUpdateResponse *pr = NULL;
  assert_int_equal(poll_update(f->ch, "upd-ok", "u-1", STAGE(COMPLETED), 5000, &pr), DBX_GRPC_OK);
  assert_int_equal(pr->stage, STAGE(COMPLETED));
  assert_non_null(pr->outcome);
  assert_int_equal(pr->outcome->value_case, TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_SUCCESS);
  assert_int_equal(pr->outcome->success->payloads[0]->data.len, 2);
  assert_memory_equal(pr->outcome->success->payloads[0]->data.data, "42", 2);
  protobuf_c_message_free_unpacked(&pr->base, NULL);

  /* history: accepted then completed, after the task's WorkflowTaskCompleted */
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "upd-ok", run_id, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 1);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 1);
  size_t acc_i = 0, done_i = 0;
  for (size_t i = 0; i < h.n; i++) {
    if (h.events[i]->event_type == ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)) acc_i = i;
    if (h.events[i]->event_type == ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)) done_i = i;
  }
  assert_int_equal(h.events[acc_i - 1]->event_type, ET(WORKFLOW_TASK_COMPLETED));
  assert_int_equal(done_i, acc_i + 1);
  const WorkflowExecutionUpdateAcceptedEventAttributes *aa =
      h.events[acc_i]->workflow_execution_update_accepted_event_attributes;
  assert_string_equal(aa->protocol_instance_id, "u-1");
  assert_string_equal(aa->accepted_request_message_id, "u-1/request");
  assert_string_equal(aa->accepted_request->input->name, "setValue");
  const WorkflowExecutionUpdateCompletedEventAttributes *ca =
      h.events[done_i]->workflow_execution_update_completed_event_attributes;
  assert_string_equal(ca->meta->update_id, "u-1");
  assert_int_equal(ca->accepted_event_id, h.events[acc_i]->event_id);
  assert_memory_equal(ca->outcome->success->payloads[0]->data.data, "42", 2);
  size_t n_events = h.n;
  dbx_svct_history_cleanup(&h);

  /* the same update id again: the outcome, nothing new admitted or written */
  assert_int_equal(update_call(f->ch, "upd-ok", "u-1", "41", STAGE(COMPLETED), 5000, &r), DBX_GRPC_OK);
  assert_int_equal(r->stage, STAGE(COMPLETED));
  assert_memory_equal(r->outcome->success->payloads[0]->data.data, "42", 2);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  dbx_svct_history_get(f->ch, "upd-ok", run_id, &h);
  assert_int_equal(h.n, n_events);
  dbx_svct_history_cleanup(&h);

  /* an unknown update id */
  assert_int_equal(poll_update(f->ch, "upd-ok", "u-none", STAGE(COMPLETED), 5000, &pr), DBX_GRPC_NOT_FOUND);
  free(run_id);
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *wf, *id;
  int status;
  UpdateWorkflowExecutionResponse *r;
} waiter;

static void *update_thread(void *arg) {
  waiter *w = arg;
  w->status = update_call(w->ch, w->wf, w->id, "7", STAGE(COMPLETED), 20000, &w->r);
  return NULL;
}

/* A caller waiting for COMPLETED; the validator rejects: no update event,
 * the caller gets the failure. */
static void test_update_rejected_by_validator(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "upd-rej", "tq-upd-rej");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-upd-rej", 5000);
  dbx_svct_wft_start_timer(f->ch, t->task_token, "wait", 600);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  waiter w = {.ch = f->ch, .wf = "upd-rej", .id = "u-bad"};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, update_thread, &w), 0);
  t = dbx_svct_wft_poll(f->ch, "tq-upd-rej", 10000); /* the task the update scheduled */
  assert_true(t->task_token.len > 0);
  const char *req_id = check_request_message(t, "u-bad", "7");
  assert_int_equal(reject(f->ch, t, "u-bad", req_id, "value must be positive"), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  pthread_join(th, NULL);
  assert_int_equal(w.status, DBX_GRPC_OK);
  assert_int_equal(w.r->stage, STAGE(COMPLETED));
  assert_int_equal(w.r->outcome->value_case, TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_FAILURE);
  assert_string_equal(w.r->outcome->failure->message, "value must be positive");
  protobuf_c_message_free_unpacked(&w.r->base, NULL);

  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "upd-rej", run_id, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 0);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 0);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_TASK_COMPLETED)), 2);
  dbx_svct_history_cleanup(&h);
  /* the rejected update is not delivered again */
  t = dbx_svct_wft_poll(f->ch, "tq-upd-rej", 1500);
  assert_int_equal(t->task_token.len, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  free(run_id);
}

/* A wait for ACCEPTED whose deadline comes first answers ADMITTED; a worker
 * that accepts and responds in a later task completes it; a closed run
 * refuses new updates. */
static void test_update_wait_deadline_and_closed_run(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "upd-late", "tq-upd-late");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-upd-late", 5000);
  dbx_svct_wft_start_timer(f->ch, t->task_token, "wait", 600);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  UpdateWorkflowExecutionResponse *r = NULL;
  assert_int_equal(update_call(f->ch, "upd-late", "u-2", "5", STAGE(ACCEPTED), 1500, &r), DBX_GRPC_OK);
  assert_int_equal(r->stage, STAGE(ADMITTED)); /* answered before the client's deadline */
  assert_null(r->outcome);
  protobuf_c_message_free_unpacked(&r->base, NULL);

  /* an answer naming an unknown message is refused whole */
  t = dbx_svct_wft_poll(f->ch, "tq-upd-late", 5000);
  const char *req_id = check_request_message(t, "u-2", "5");
  Command c1 = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  Temporal__Api__Command__V1__ProtocolMessageCommandAttributes a1 =
      INIT(TEMPORAL__API__COMMAND__V1__PROTOCOL_MESSAGE_COMMAND_ATTRIBUTES);
  a1.message_id = "nope";
  c1.command_type = TEMPORAL__API__ENUMS__V1__COMMAND_TYPE__COMMAND_TYPE_PROTOCOL_MESSAGE;
  c1.attributes_case = CMD(PROTOCOL_MESSAGE);
  c1.protocol_message_command_attributes = &a1;
  Command *cmds[1] = {&c1};
  assert_int_equal(wft_respond(f->ch, t->task_token, NULL, 0, cmds, 1), DBX_GRPC_INVALID_ARGUMENT);
  assert_int_equal(accept_and_respond(f->ch, t, "u-2", req_id, "6"), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollWorkflowExecutionUpdateResponse *pr = NULL;
  assert_int_equal(poll_update(f->ch, "upd-late", "u-2", STAGE(ACCEPTED), 5000, &pr), DBX_GRPC_OK);
  assert_int_equal(pr->stage, STAGE(COMPLETED)); /* past the stage asked for */
  assert_memory_equal(pr->outcome->success->payloads[0]->data.data, "6", 1);
  protobuf_c_message_free_unpacked(&pr->base, NULL);

  /* no update id */
  assert_int_equal(update_call(f->ch, "upd-late", "", "1", STAGE(ADMITTED), 5000, NULL), DBX_GRPC_INVALID_ARGUMENT);

  TerminateWorkflowExecutionRequest tq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__TERMINATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "upd-late";
  tq.namespace_ = "default";
  tq.workflow_execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "TerminateWorkflowExecution", &tq.base, &TerminateWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(update_call(f->ch, "upd-late", "u-3", "1", STAGE(ADMITTED), 5000, NULL), DBX_GRPC_NOT_FOUND);
  /* the completed one still answers after the close */
  assert_int_equal(poll_update(f->ch, "upd-late", "u-2", STAGE(COMPLETED), 5000, &pr), DBX_GRPC_OK);
  assert_int_equal(pr->stage, STAGE(COMPLETED));
  protobuf_c_message_free_unpacked(&pr->base, NULL);
  free(run_id);
}

static void test_update_during_a_started_task_gets_a_new_task(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "upd-mid", "tq-upd-mid");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-upd-mid", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->n_messages, 0);
  /* admitted while the first task is started: not in it */
  assert_int_equal(update_call(f->ch, "upd-mid", "u-mid", "3", STAGE(ADMITTED), 5000, NULL), DBX_GRPC_OK);
  dbx_svct_wft_start_timer(f->ch, t->task_token, "wait", 600);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  t = dbx_svct_wft_poll(f->ch, "tq-upd-mid", 5000);
  assert_true(t->task_token.len > 0);
  const char *req_id = check_request_message(t, "u-mid", "3");
  /* a worker that leaves it unanswered gets it again in the next task only
   * when something else asks for one: no task loop */
  assert_int_equal(wft_respond(f->ch, t->task_token, NULL, 0, NULL, 0), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  t = dbx_svct_wft_poll(f->ch, "tq-upd-mid", 1500);
  assert_int_equal(t->task_token.len, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  (void)req_id;
  free(run_id);
}

static int multi_call(dbx_rpc_channel *ch, const char *wfid, const char *tq, int policy,
                      ExecuteMultiOperationResponse **out) {
  StartWorkflowExecutionRequest sq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Workflow";
  t.name = (char *)tq;
  sq.workflow_id = (char *)wfid;
  sq.workflow_type = &wt;
  sq.task_queue = &t;
  sq.request_id = "multi-req-1";
  sq.workflow_id_conflict_policy = policy;
  UpdateWorkflowExecutionRequest uq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Temporal__Api__Update__V1__WaitPolicy wp = INIT(TEMPORAL__API__UPDATE__V1__WAIT_POLICY);
  UpdateRequest req = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp = &p;
  p.data.data = (uint8_t *)"9";
  p.data.len = 1;
  ps.payloads = &pp;
  ps.n_payloads = 1;
  we.workflow_id = (char *)wfid;
  wp.lifecycle_stage = STAGE(ADMITTED);
  meta.update_id = "u-ws";
  meta.identity = "it-client";
  in.name = "setValue";
  in.args = &ps;
  req.meta = &meta;
  req.input = &in;
  uq.workflow_execution = &we;
  uq.wait_policy = &wp;
  uq.request = &req;
  ExecuteMultiOperationRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation o0 =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation o1 = o0;
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation *ops[2] = {&o0, &o1};
  o0.operation_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION__OPERATION_START_WORKFLOW;
  o0.start_workflow = &sq;
  o1.operation_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION__OPERATION_UPDATE_WORKFLOW;
  o1.update_workflow = &uq;
  q.namespace_ = "default"; /* the operations leave theirs empty: the call's applies */
  q.operations = ops;
  q.n_operations = 2;
  *out = NULL;
  return dbx_svct_call(ch, "ExecuteMultiOperation", &q.base, &ExecuteMultiOperationResponse__D, 5000, (void **)out,
                       NULL);
}

static void test_update_with_start(void **state) {
  fixture *f = *state;
  ExecuteMultiOperationResponse *r = NULL;
  assert_int_equal(multi_call(f->ch, "upd-ws", "tq-upd-ws", 0, &r), DBX_GRPC_INVALID_ARGUMENT);
  DescribeWorkflowExecutionRequest dq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution dwe = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  dwe.workflow_id = "upd-ws";
  dq.namespace_ = "default";
  dq.execution = &dwe;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &dq.base, &DescribeWorkflowExecutionResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND); /* the refusal started nothing */
  int use_existing = TEMPORAL__API__ENUMS__V1__WORKFLOW_ID_CONFLICT_POLICY__WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING;
  assert_int_equal(multi_call(f->ch, "upd-ws", "tq-upd-ws", use_existing, &r), DBX_GRPC_OK);
  assert_int_equal(r->n_responses, 2);
  const StartWorkflowExecutionResponse *sr = r->responses[0]->start_workflow;
  const UpdateWorkflowExecutionResponse *ur = r->responses[1]->update_workflow;
  assert_non_null(sr);
  assert_non_null(ur);
  assert_true(sr->started);
  assert_int_equal(ur->stage, STAGE(ADMITTED));
  assert_string_equal(ur->update_ref->workflow_execution->run_id, sr->run_id);
  char *run_id = strdup(sr->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);

  /* the run's first workflow task carries the update */
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-upd-ws", 5000);
  assert_true(t->task_token.len > 0);
  assert_string_equal(t->workflow_execution->run_id, run_id);
  const char *req_id = check_request_message(t, "u-ws", "9");
  assert_int_equal(accept_and_respond(f->ch, t, "u-ws", req_id, "10"), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  /* again (an SDK's retry): the same run, not started again, the outcome */
  assert_int_equal(multi_call(f->ch, "upd-ws", "tq-upd-ws", use_existing, &r), DBX_GRPC_OK);
  assert_string_equal(r->responses[0]->start_workflow->run_id, run_id);
  assert_int_equal(r->responses[1]->update_workflow->stage, STAGE(COMPLETED));
  assert_memory_equal(r->responses[1]->update_workflow->outcome->success->payloads[0]->data.data, "10", 2);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  free(run_id);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_update_accepted_then_completed),
      cmocka_unit_test(test_update_rejected_by_validator),
      cmocka_unit_test(test_update_wait_deadline_and_closed_run),
      cmocka_unit_test(test_update_during_a_started_task_gets_a_new_task),
      cmocka_unit_test(test_update_with_start),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
