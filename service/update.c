/* Workflow updates: UpdateWorkflowExecution, PollWorkflowExecutionUpdate, the
 * update requests handed to workers as protocol messages in workflow tasks,
 * and the worker's answers (Acceptance, Rejection, Response) in
 * RespondWorkflowTaskCompleted.
 *
 * An update lives in its run's state (RunState.updates): admitted by the
 * call, it rides in every workflow task of the run until the worker accepts
 * or rejects it. Acceptance writes WorkflowExecutionUpdateAccepted, the
 * response WorkflowExecutionUpdateCompleted; the stages they reach are set
 * by svc_update_apply_event (from mutable.c), so a reset folds them. A
 * rejection writes no event: the entry is completed with the failure as its
 * outcome. A caller that waits for a stage not reached yet parks as a history
 * waiter of the run (PARK_HISTORY): every event of the run reruns the call,
 * which answers once the stage is reached, the run closed, or, at its
 * deadline, with the stage reached so far (the SDKs then poll again). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

#define STAGE(x) TEMPORAL__API__ENUMS__V1__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_##x
#define URL_PREFIX "type.googleapis.com/"
#define REQUEST_URL URL_PREFIX "temporal.api.update.v1.Request"
#define ACCEPTANCE_URL URL_PREFIX "temporal.api.update.v1.Acceptance"
#define REJECTION_URL URL_PREFIX "temporal.api.update.v1.Rejection"
#define RESPONSE_URL URL_PREFIX "temporal.api.update.v1.Response"

static UpdateInfo *update_find(const RunState *rs, const char *id) {
  for (size_t i = 0; i < rs->n_updates; i++)
    if (strcmp(rs->updates[i]->update_id, id) == 0) return rs->updates[i];
  return NULL;
}

static UpdateInfo *update_add(RunState *rs, const char *id) {
  UpdateInfo *u = svc_pb_new(&UpdateInfo__D);
  UpdateInfo **a = dbx_realloc(rs->updates, (rs->n_updates + 1) * sizeof *a);
  if (a) rs->updates = a;
  if (u == NULL || a == NULL) {
    free(u);
    svc_oom_mark();
    return NULL;
  }
  u->update_id = svc_pb_strdup(id);
  a[rs->n_updates++] = u;
  return u;
}

static void bytes_set(ProtobufCBinaryData *b, const ProtobufCMessage *m) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
  if (m == NULL) return;
  b->data = dbx_pb_pack(m, &b->len);
  if (b->data == NULL) svc_oom_mark();
}

dbx_err svc_update_apply_event(RunState *rs, const HistoryEvent *ev) {
  if (rs == NULL || ev == NULL) return DBX_EINVAL;
  if (ev->attributes_case == HEV(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)) {
    const WorkflowExecutionUpdateAcceptedEventAttributes *a = ev->workflow_execution_update_accepted_event_attributes;
    UpdateInfo *u = update_find(rs, a->protocol_instance_id);
    if (u == NULL) u = update_add(rs, a->protocol_instance_id);
    if (u == NULL) return DBX_ENOMEM;
    u->stage = STAGE(ACCEPTED);
    u->accepted_event_id = ev->event_id;
    if (u->request.len == 0) bytes_set(&u->request, &a->accepted_request->base);
    return svc_oom_peek() ? DBX_ENOMEM : DBX_OK;
  }
  if (ev->attributes_case == HEV(WORKFLOW_EXECUTION_UPDATE_COMPLETED)) {
    const WorkflowExecutionUpdateCompletedEventAttributes *a = ev->workflow_execution_update_completed_event_attributes;
    const char *id = a->meta ? a->meta->update_id : "";
    UpdateInfo *u = update_find(rs, id);
    if (u == NULL) u = update_add(rs, id);
    if (u == NULL) return DBX_ENOMEM;
    u->stage = STAGE(COMPLETED);
    if (u->accepted_event_id == 0) u->accepted_event_id = a->accepted_event_id;
    bytes_set(&u->outcome, a->outcome ? &a->outcome->base : NULL);
    return svc_oom_peek() ? DBX_ENOMEM : DBX_OK;
  }
  return DBX_OK;
}

/* ------------------------------------------------------------ delivery */

dbx_err svc_update_messages(RunState *rs, ProtocolMessage ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t want = 0;
  for (size_t i = 0; i < rs->n_updates; i++) want += rs->updates[i]->stage == STAGE(ADMITTED);
  if (want == 0) return DBX_OK;
  ProtocolMessage **m = dbx_calloc(want, sizeof *m);
  if (m == NULL) return DBX_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < rs->n_updates; i++) {
    UpdateInfo *u = rs->updates[i];
    if (u->stage != STAGE(ADMITTED)) continue;
    ProtocolMessage *pm = svc_pb_new(&ProtocolMessage__D);
    Any *body = svc_pb_new(&Any__D);
    size_t idlen = strlen(u->update_id);
    char *mid = dbx_malloc(idlen + sizeof "/request");
    uint8_t *val = dbx_malloc(u->request.len ? u->request.len : 1);
    if (pm == NULL || body == NULL || mid == NULL || val == NULL) {
      free(pm);
      free(body);
      free(mid);
      free(val);
      svc_update_messages_free(m, k);
      return DBX_ENOMEM;
    }
    memcpy(mid, u->update_id, idlen);
    memcpy(mid + idlen, "/request", sizeof "/request");
    if (u->request.len) memcpy(val, u->request.data, u->request.len);
    pm->id = mid;
    pm->protocol_instance_id = svc_pb_strdup(u->update_id);
    /* the request comes after the events before WorkflowTaskStarted */
    pm->sequencing_id_case = TEMPORAL__API__PROTOCOL__V1__MESSAGE__SEQUENCING_ID_EVENT_ID;
    pm->event_id = rs->wft_started_event_id - 1;
    body->type_url = svc_pb_strdup(REQUEST_URL);
    body->value.data = val;
    body->value.len = u->request.len;
    pm->body = body;
    u->delivered_wft_started_id = rs->wft_started_event_id;
    m[k++] = pm;
  }
  *out = m;
  *n = k;
  return svc_oom_peek() ? DBX_ENOMEM : DBX_OK;
}

void svc_update_messages_free(ProtocolMessage **m, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (m[i]) protobuf_c_message_free_unpacked(&m[i]->base, NULL);
  free(m);
}

int svc_update_wants_task(const RunState *rs, int64_t started_id) {
  for (size_t i = 0; i < rs->n_updates; i++) {
    const UpdateInfo *u = rs->updates[i];
    if (u->stage == STAGE(ADMITTED) && u->delivered_wft_started_id != started_id) return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ the worker's answers */

static int any_is(const Any *a, const char *url) { return a && a->type_url && strcmp(a->type_url, url) == 0; }

static dbx_err accept_update(ectx *c, job *j, RunState *rs, UpdateInfo *u, const ProtocolMessage *m) {
  UpdateAcceptance *acc = NULL;
  dbx_err rc = svc_pb_unpack(&UpdateAcceptance__D, m->body->value.data, m->body->value.len, (void **)&acc);
  if (rc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "update %s: the Acceptance message is malformed", u->update_id);
    return DBX_OK;
  }
  if (rc != DBX_OK) return rc;
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED));
  if (ev == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowExecutionUpdateAcceptedEventAttributes *a = ev->workflow_execution_update_accepted_event_attributes;
  a->protocol_instance_id = svc_pb_strdup(u->update_id);
  a->accepted_request_message_id = svc_pb_strdup(acc->accepted_request_message_id);
  a->accepted_request_sequencing_event_id = acc->accepted_request_sequencing_event_id;
  /* the request as admitted (the worker may leave it out) */
  if (u->request.len)
    svc_pb_unpack(&UpdateRequest__D, u->request.data, u->request.len, (void **)&a->accepted_request);
  if (a->accepted_request == NULL) a->accepted_request = PB_CLONE(UpdateRequest, acc->accepted_request);
  rc = svc_event_append(c, rs, ev, 0); /* stage ACCEPTED (svc_update_apply_event) */
out:
  svc_history_event_free(ev);
  if (acc) protobuf_c_message_free_unpacked(&acc->base, NULL);
  return rc;
}

static dbx_err reject_update(job *j, UpdateInfo *u, const ProtocolMessage *m) {
  UpdateRejection *rej = NULL;
  dbx_err rc = svc_pb_unpack(&UpdateRejection__D, m->body->value.data, m->body->value.len, (void **)&rej);
  if (rc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "update %s: the Rejection message is malformed", u->update_id);
    return DBX_OK;
  }
  if (rc != DBX_OK) return rc;
  UpdateOutcome o = INIT(TEMPORAL__API__UPDATE__V1__OUTCOME);
  Failure empty = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  o.value_case = TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_FAILURE;
  empty.message = "update rejected";
  o.failure = rej->failure ? rej->failure : &empty;
  bytes_set(&u->outcome, &o.base);
  u->stage = STAGE(COMPLETED);
  u->rejected = 1;
  protobuf_c_message_free_unpacked(&rej->base, NULL);
  return DBX_OK;
}

static dbx_err complete_update(ectx *c, job *j, RunState *rs, UpdateInfo *u, const ProtocolMessage *m) {
  UpdateResponse *resp = NULL;
  dbx_err rc = svc_pb_unpack(&UpdateResponse__D, m->body->value.data, m->body->value.len, (void **)&resp);
  if (rc == DBX_EINVAL || (rc == DBX_OK && resp->outcome == NULL)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "update %s: the Response message is malformed or has no outcome",
                 u->update_id);
    rc = DBX_OK;
    goto out;
  }
  if (rc != DBX_OK) goto out;
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED));
  if (ev == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowExecutionUpdateCompletedEventAttributes *a = ev->workflow_execution_update_completed_event_attributes;
  a->meta = svc_pb_new(&temporal__api__update__v1__meta__descriptor);
  if (a->meta) {
    a->meta->update_id = svc_pb_strdup(u->update_id);
    a->meta->identity = svc_pb_strdup(resp->meta ? resp->meta->identity : "");
  }
  a->accepted_event_id = u->accepted_event_id;
  a->outcome = PB_CLONE(UpdateOutcome, resp->outcome);
  rc = svc_event_append(c, rs, ev, 0); /* stage COMPLETED (svc_update_apply_event) */
  svc_history_event_free(ev);
out:
  if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
  return rc;
}

dbx_err svc_update_message_apply(ectx *c, job *j, RunState *rs, const ProtocolMessage *m) {
  const char *id = m->protocol_instance_id;
  UpdateInfo *u = id ? update_find(rs, id) : NULL;
  if (u == NULL || m->body == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "protocol message %s: no update %s in this run", m->id ? m->id : "",
                 id ? id : "");
    return DBX_OK;
  }
  if (any_is(m->body, ACCEPTANCE_URL)) {
    if (u->stage != STAGE(ADMITTED)) return DBX_OK; /* answered already (a retried task) */
    return accept_update(c, j, rs, u, m);
  }
  if (any_is(m->body, REJECTION_URL)) {
    if (u->stage != STAGE(ADMITTED)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "update %s: rejected after it was accepted", u->update_id);
      return DBX_OK;
    }
    return reject_update(j, u, m);
  }
  if (any_is(m->body, RESPONSE_URL)) {
    if (u->stage == STAGE(COMPLETED)) return DBX_OK;
    if (u->stage != STAGE(ACCEPTED)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "update %s: a response before the acceptance", u->update_id);
      return DBX_OK;
    }
    return complete_update(c, j, rs, u, m);
  }
  svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "protocol message %s: body type %s is not an update message",
               m->id ? m->id : "", m->body->type_url ? m->body->type_url : "");
  return DBX_OK;
}

/* ------------------------------------------------------------ the calls */

/* Park the call as a waiter of rs's history; reply (the stage so far) is what
 * it gets at its deadline. */
static void park_update(ectx *c, job *j, const RunState *rs) {
  j->park = PARK_HISTORY;
  j->park_key = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &j->park_key_len);
  j->park_deadline_ns = svc_long_poll_until(c, j);
  if (j->park_key == NULL) svc_oom_mark();
}

/* How answer() replies: UpdateWorkflowExecutionResponse, the poll's, or
 * ExecuteMultiOperation's pair (start: its start response). */
enum { ANS_UPDATE, ANS_POLL, ANS_MULTI };

static int reply_multi(job *j, UpdateWorkflowExecutionResponse *ur, StartWorkflowExecutionResponse *start) {
  ExecuteMultiOperationResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_RESPONSE);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationResponse__Response r0 =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_RESPONSE__RESPONSE);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationResponse__Response r1 = r0;
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationResponse__Response *rr[2] = {&r0, &r1};
  r0.response_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_RESPONSE__RESPONSE__RESPONSE_START_WORKFLOW;
  r0.start_workflow = start;
  r1.response_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_RESPONSE__RESPONSE__RESPONSE_UPDATE_WORKFLOW;
  r1.update_workflow = ur;
  r.responses = rr;
  r.n_responses = 2;
  return svc_job_reply(j, &r.base);
}

/* Answer for update u of rs (as kind, ANS_*): at once when the stage is
 * reached or the run closed, else parked. */
static dbx_err answer(ectx *c, job *j, const RunState *rs, const UpdateInfo *u, int wait, int kind,
                      StartWorkflowExecutionResponse *start) {
  if (wait == STAGE(UNSPECIFIED)) wait = STAGE(ACCEPTED);
  if (u->stage < wait && rs->status != WS(RUNNING)) {
    svc_fail_not_found(j, "workflow execution already completed (workflow id %s, run id %s)", rs->workflow_id,
                       rs->run_id);
    return DBX_OK;
  }
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = rs->workflow_id;
  we.run_id = rs->run_id;
  Temporal__Api__Update__V1__UpdateRef ref = INIT(TEMPORAL__API__UPDATE__V1__UPDATE_REF);
  ref.workflow_execution = &we;
  ref.update_id = u->update_id;
  UpdateOutcome *o = NULL;
  if (u->stage == STAGE(COMPLETED) && u->outcome.len &&
      svc_pb_unpack(&UpdateOutcome__D, u->outcome.data, u->outcome.len, (void **)&o) != DBX_OK)
    return DBX_ENOMEM;
  int rc;
  if (kind == ANS_POLL) {
    PollWorkflowExecutionUpdateResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_EXECUTION_UPDATE_RESPONSE);
    r.update_ref = &ref;
    r.outcome = o;
    r.stage = u->stage;
    rc = svc_job_reply(j, &r.base);
  } else {
    UpdateWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_WORKFLOW_EXECUTION_RESPONSE);
    r.update_ref = &ref;
    r.outcome = o;
    r.stage = u->stage;
    rc = kind == ANS_MULTI ? reply_multi(j, &r, start) : svc_job_reply(j, &r.base);
  }
  if (o) protobuf_c_message_free_unpacked(&o->base, NULL);
  if (rc != 0) return DBX_ENOMEM;
  if (u->stage < wait && j->call) park_update(c, j, rs);
  return DBX_OK;
}

static int wait_ok(job *j, const Temporal__Api__Update__V1__WaitPolicy *w) {
  int s = w ? w->lifecycle_stage : STAGE(UNSPECIFIED);
  if (s < STAGE(UNSPECIFIED) || s > STAGE(COMPLETED)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: wait_policy.lifecycle_stage %d is unknown", j->method, s);
    return 0;
  }
  return 1;
}

static dbx_err admit(ectx *c, job *j, RunState *rs, const UpdateRequest *req) {
  UpdateInfo *u = update_add(rs, req->meta->update_id);
  if (u == NULL) return DBX_ENOMEM;
  u->stage = STAGE(ADMITTED);
  bytes_set(&u->request, &req->base);
  if (svc_oom_peek()) return DBX_ENOMEM;
  DBX_INFO("service", "update %s (%s) admitted: workflow %s run %s", u->update_id, req->input->name, rs->workflow_id,
           rs->run_id);
  dbx_err rc = svc_wft_schedule(c, rs);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  (void)j;
  return rc;
}

/* UpdateWorkflowExecution's work for a decoded request (kind ANS_UPDATE, or
 * ANS_MULTI with the start's response). */
static dbx_err update_request(ectx *c, job *j, const UpdateWorkflowExecutionRequest *q, int kind,
                              StartWorkflowExecutionResponse *start) {
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_) || !wait_ok(j, q->wait_policy)) goto out;
  const UpdateRequest *req = q->request;
  if (!svc_check_id(j, "request.meta.update_id", req && req->meta ? req->meta->update_id : NULL)) goto out;
  if (!svc_check_id(j, "request.input.name", req->input ? req->input->name : NULL)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  if (q->first_execution_run_id[0] && strcmp(q->first_execution_run_id, rs->first_run_id) != 0) {
    svc_fail_not_found(j, "workflow execution not found: workflow id %s, first run id %s", rs->workflow_id,
                       q->first_execution_run_id);
    goto out;
  }
  UpdateInfo *u = update_find(rs, req->meta->update_id); /* the same id again: its state, nothing new */
  if (u == NULL) {
    if (rs->status != WS(RUNNING)) {
      svc_fail_not_found(j, "workflow execution already completed (workflow id %s, run id %s)", rs->workflow_id,
                         rs->run_id);
      goto out;
    }
    rc = admit(c, j, rs, req);
    if (rc != DBX_OK) goto out;
    u = update_find(rs, req->meta->update_id);
  }
  rc = answer(c, j, rs, u, q->wait_policy ? q->wait_policy->lifecycle_stage : STAGE(UNSPECIFIED), kind, start);
out:
  svc_runstate_free(rs);
  return rc;
}

dbx_err svc_h_update(ectx *c, job *j) {
  UpdateWorkflowExecutionRequest *q = svc_decode(j, &UpdateWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = update_request(c, j, q, ANS_UPDATE, NULL);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

#define MULTI_OP(x) TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION__OPERATION_##x

/* Update-with-start as Temporal accepts it: a start (with a conflict policy)
 * then an update of the same workflow id (no run id). */
static int multi_shape_ok(job *j, const ExecuteMultiOperationRequest *q) {
  const char *why = NULL;
  if (q->n_operations != 2 || q->operations[0]->operation_case != MULTI_OP(START_WORKFLOW) ||
      q->operations[1]->operation_case != MULTI_OP(UPDATE_WORKFLOW))
    why = "operations must be a start_workflow then an update_workflow";
  else if (q->operations[0]->start_workflow->workflow_id_conflict_policy ==
           TEMPORAL__API__ENUMS__V1__WORKFLOW_ID_CONFLICT_POLICY__WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED)
    why = "the start operation needs a workflow_id_conflict_policy";
  else if (q->operations[0]->start_workflow->cron_schedule[0] || q->operations[0]->start_workflow->workflow_start_delay)
    why = "the start operation may have no cron_schedule or workflow_start_delay";
  else if (q->operations[1]->update_workflow->workflow_execution == NULL ||
           strcmp(q->operations[1]->update_workflow->workflow_execution->workflow_id,
                  q->operations[0]->start_workflow->workflow_id) != 0 ||
           q->operations[1]->update_workflow->workflow_execution->run_id[0])
    why = "the update operation must name the start's workflow id and no run id";
  if (why == NULL) return 1;
  svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ExecuteMultiOperation: %s", why);
  return 0;
}

dbx_err svc_h_multi_operation(ectx *c, job *j) {
  ExecuteMultiOperationRequest *q = svc_decode(j, &ExecuteMultiOperationRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  char *run_id = NULL;
  if (!svc_check_ns(c, j, q->namespace_) || !multi_shape_ok(j, q)) goto out;
  StartWorkflowExecutionRequest *sq = q->operations[0]->start_workflow;
  UpdateWorkflowExecutionRequest *uq = q->operations[1]->update_workflow;
  /* the operations' namespace is the call's */
  if (sq->namespace_[0] == '\0') svc_pb_setstr(&sq->namespace_, q->namespace_);
  if (uq->namespace_[0] == '\0') svc_pb_setstr(&uq->namespace_, q->namespace_);
  if (strcmp(sq->namespace_, q->namespace_) != 0 || strcmp(uq->namespace_, q->namespace_) != 0) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ExecuteMultiOperation: an operation names another namespace");
    goto out;
  }
  int started = 0;
  rc = svc_start_request(c, j, sq, &run_id, &started);
  if (rc != DBX_OK || run_id == NULL) goto out;
  RunState *rs = NULL;
  rc = svc_run_load(c, sq->namespace_, sq->workflow_id, run_id, &rs);
  if (rc != DBX_OK) goto out;
  /* a rerun of this very call (a waiter woken) finds the run its request started */
  if (sq->request_id[0] && strcmp(rs->start_request_id, sq->request_id) == 0) started = 1;
  int status = rs->status;
  svc_runstate_free(rs);
  StartWorkflowExecutionResponse sr = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_RESPONSE);
  sr.run_id = run_id;
  sr.started = started;
  sr.status = status;
  rc = update_request(c, j, uq, ANS_MULTI, &sr);
out:
  free(run_id);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_poll_update(ectx *c, job *j) {
  PollWorkflowExecutionUpdateRequest *q = svc_decode(j, &PollWorkflowExecutionUpdateRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_) || !wait_ok(j, q->wait_policy)) goto out;
  if (!svc_check_id(j, "update_ref.update_id", q->update_ref ? q->update_ref->update_id : NULL)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->update_ref->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  UpdateInfo *u = update_find(rs, q->update_ref->update_id);
  if (u == NULL) {
    svc_fail_not_found(j, "update %s not found in workflow %s", q->update_ref->update_id, rs->workflow_id);
    goto out;
  }
  rc = answer(c, j, rs, u, q->wait_policy ? q->wait_policy->lifecycle_stage : STAGE(UNSPECIFIED), ANS_POLL, NULL);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
