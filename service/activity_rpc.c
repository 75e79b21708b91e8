/* RPC handlers of activity workers: RecordActivityTaskHeartbeat and
 * RespondActivityTask{Completed,Failed,Canceled}, each by task token and
 * ...ById (namespace, workflow id, run id or "" for the current run, activity
 * id: `temporal activity complete|fail`). Both forms reach the same
 * function per outcome. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

static dbx_err load_activity(ectx *c, job *j, ProtobufCBinaryData token, RunState **rs_out, ActivityInfo **ai_out) {
  *rs_out = NULL;
  *ai_out = NULL;
  TaskToken *t = svc_token_decode(j, token, TASK_ACTIVITY);
  if (t == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(c, t->namespace_, t->workflow_id, t->run_id, &rs);
  ActivityInfo *ai = rc == DBX_OK ? svc_activity_find(rs, t->scheduled_event_id) : NULL;
  if (rc == DBX_OK && (rs->status != WS(RUNNING) || ai == NULL || ai->attempt != t->attempt || ai->started_time_ns == 0))
    rc = DBX_ENOTFOUND;
  if (rc == DBX_ENOTFOUND) {
    svc_fail_not_found(j,
                       "activity task not found: the attempt timed out, was completed, or the run closed "
                       "(workflow id %s, activity id %s)",
                       t->workflow_id, t->activity_id);
    svc_runstate_free(rs);
    rs = NULL;
    ai = NULL;
    rc = DBX_OK;
  }
  protobuf_c_message_free_unpacked(&t->base, NULL);
  *rs_out = rs;
  *ai_out = ai;
  return rc;
}

/* ById: the current attempt of activity_id in the run; NOT_FOUND as for a
 * stale token when the run is closed or there is no such activity. As
 * Temporal's server, an outcome by id may end an attempt that no worker
 * started (it is marked started now, by identity, so ActivityTaskStarted is
 * written before the outcome); a heartbeat (started_only) needs a started
 * one. */
static dbx_err load_activity_by_id(ectx *c, job *j, const char *ns, const char *wfid, const char *run_id,
                                   const char *activity_id, const char *identity, int started_only,
                                   RunState **rs_out, ActivityInfo **ai_out) {
  *rs_out = NULL;
  *ai_out = NULL;
  if (!svc_check_ns(c, j, ns) || !svc_check_id(j, "activity_id", activity_id)) return DBX_OK;
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  we.run_id = (char *)run_id;
  RunState *rs = NULL;
  dbx_err rc = svc_load_execution(c, j, ns, &we, &rs);
  if (rc != DBX_OK || rs == NULL) return rc;
  ActivityInfo *ai = NULL;
  for (size_t i = 0; i < rs->n_activities; i++)
    if (strcmp(rs->activities[i]->activity_id, activity_id) == 0) ai = rs->activities[i];
  if (rs->status != WS(RUNNING) || ai == NULL || (started_only && ai->started_time_ns == 0)) {
    if (started_only)
      svc_fail_not_found(j, "activity task not found: not started, completed, or the run closed (workflow id %s, activity id %s)",
                         wfid, activity_id);
    else
      svc_fail_not_found(j, "activity task not found: completed, or the run closed (workflow id %s, activity id %s)",
                         wfid, activity_id);
    svc_runstate_free(rs);
    return DBX_OK;
  }
  if (ai->started_time_ns == 0) { /* the queued task, if any, is stale from now on */
    ai->started_time_ns = c->now_ns;
    ai->queued = 0;
    svc_pb_setstr(&ai->started_identity, identity);
  }
  *rs_out = rs;
  *ai_out = ai;
  return DBX_OK;
}

static dbx_err act_fail(ectx *c, job *j, RunState *rs, ActivityInfo *ai, Failure *failure, Payloads *details);

/* Temporal's server: a response over the blob size limit fails the activity
 * with a non-retryable server failure (msg, source Server) instead, and the
 * call itself succeeds. */
static dbx_err act_fail_server(ectx *c, job *j, RunState *rs, ActivityInfo *ai, const char *msg) {
  Failure *f = svc_server_failure_new(msg, NULL, 0);
  if (f == NULL) return DBX_ENOMEM;
  dbx_err rc = act_fail(c, j, rs, ai, f, NULL);
  protobuf_c_message_free_unpacked(&f->base, NULL);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
  return rc;
}

static dbx_err act_complete(ectx *c, job *j, RunState *rs, ActivityInfo *ai, const Payloads *result,
                            const char *identity) {
  if (svc_blob_over(c, (const ProtobufCMessage *)result, "an activity result", rs->workflow_id))
    return act_fail_server(c, j, rs, ai, RESULT_TOO_BIG_MSG);
  HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_COMPLETED));
  if (ev == NULL) return DBX_ENOMEM;
  ActivityTaskCompletedEventAttributes *a = ev->activity_task_completed_event_attributes;
  a->result = PB_CLONE(Payloads, result);
  a->scheduled_event_id = ai->scheduled_event_id;
  a->identity = svc_pb_strdup(identity);
  dbx_err rc = svc_activity_close(c, rs, ai, ev, &a->started_event_id);
  svc_history_event_free(ev);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
  return rc;
}

static dbx_err act_fail(ectx *c, job *j, RunState *rs, ActivityInfo *ai, Failure *failure, Payloads *details) {
  if (failure == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: failure is required", j->method);
    return DBX_OK;
  }
  dbx_err rc = svc_activity_attempt_failed(c, rs, ai, failure, 0, details);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  return rc;
}

/* RespondActivityTaskFailed(ById): oversized last heartbeat details are
 * dropped and an oversized failure is replaced by "Failure exceeds size
 * limit." (its cause the original cut to the warn limit), each replacement
 * also listed in the reply's failures, as Temporal's server does. The two
 * reply types have the same single field. */
static dbx_err act_fail_rpc(ectx *c, job *j, RunState *rs, ActivityInfo *ai, Failure *failure,
                            Payloads *details) {
  Failure *given[2] = {NULL, NULL};
  size_t n = 0;
  if (svc_blob_over(c, (const ProtobufCMessage *)details, "the last heartbeat details", rs->workflow_id)) {
    details = NULL;
    given[n] = svc_server_failure_new(HEARTBEAT_TOO_BIG_MSG, NULL, 0);
    if (given[n++] == NULL) return DBX_ENOMEM;
  }
  if (failure && svc_blob_over(c, (const ProtobufCMessage *)failure, "an activity failure", rs->workflow_id)) {
    given[n] = svc_server_failure_new(FAILURE_TOO_BIG_MSG, failure, svc_blob_warn_bytes(c));
    if (given[n] == NULL) {
      if (n) protobuf_c_message_free_unpacked(&given[0]->base, NULL);
      return DBX_ENOMEM;
    }
    failure = given[n++];
  }
  dbx_err rc = act_fail(c, j, rs, ai, failure, details);
  if (rc == DBX_OK && j->status == DBX_GRPC_OK && n > 0) {
    RespondActivityTaskFailedResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_RESPONSE);
    r.failures = given;
    r.n_failures = n;
    svc_job_reply(j, &r.base);
  }
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&given[i]->base, NULL);
  return rc;
}

static dbx_err act_cancel(ectx *c, job *j, RunState *rs, ActivityInfo *ai, const Payloads *details,
                          const char *identity) {
  if (svc_blob_over(c, (const ProtobufCMessage *)details, "the cancellation details", rs->workflow_id))
    return act_fail_server(c, j, rs, ai, CANCEL_TOO_BIG_MSG);
  HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_CANCELED));
  if (ev == NULL) return DBX_ENOMEM;
  ActivityTaskCanceledEventAttributes *a = ev->activity_task_canceled_event_attributes;
  a->details = PB_CLONE(Payloads, details);
  a->latest_cancel_requested_event_id = ai->cancel_requested_event_id;
  a->scheduled_event_id = ai->scheduled_event_id;
  a->identity = svc_pb_strdup(identity);
  dbx_err rc = svc_activity_close(c, rs, ai, ev, &a->started_event_id);
  svc_history_event_free(ev);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  return rc;
}

/* Heartbeat: keeps details, replies cancel_requested (resp_d: the reply type
 * of the token or ById form; both are {cancel_requested = 1, ...}). */
static dbx_err act_heartbeat(ectx *c, job *j, RunState *rs, ActivityInfo *ai, const Payloads *details) {
  dbx_err rc = DBX_OK;
  if (svc_blob_over(c, (const ProtobufCMessage *)details, "the heartbeat details", rs->workflow_id)) {
    /* Temporal: the activity fails, and the worker is told to stop */
    rc = act_fail_server(c, j, rs, ai, HEARTBEAT_TOO_BIG_MSG);
    if (rc == DBX_OK) {
      RecordActivityTaskHeartbeatResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_RESPONSE);
      r.cancel_requested = 1;
      svc_job_reply(j, &r.base);
    }
    return rc;
  }
  if (details) {
    Payloads *d = PB_CLONE(Payloads, details);
    if (d == NULL) return DBX_ENOMEM;
    if (ai->heartbeat_details) protobuf_c_message_free_unpacked(&ai->heartbeat_details->base, NULL);
    ai->heartbeat_details = d;
  }
  ai->last_heartbeat_time_ns = c->now_ns;
  rc = svc_run_save(c, rs);
  if (rc == DBX_OK) {
    RecordActivityTaskHeartbeatResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_RESPONSE);
    r.cancel_requested = ai->cancel_requested;
    svc_job_reply(j, &r.base); /* the same fields as RecordActivityTaskHeartbeatByIdResponse */
  }
  return rc;
}

/* The two forms of each method: decode, find the attempt, run fn. */
#define ACT_BY_TOKEN(name, T, call)                                \
  dbx_err name(ectx *c, job *j) {                                  \
    T *q = svc_decode(j, &T##__D);                                 \
    if (q == NULL) return DBX_OK;                                  \
    RunState *rs = NULL;                                           \
    ActivityInfo *ai = NULL;                                       \
    dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);     \
    if (rc == DBX_OK && rs) rc = call;                             \
    svc_runstate_free(rs);                                         \
    protobuf_c_message_free_unpacked(&q->base, NULL);              \
    return rc;                                                     \
  }
#define ACT_BY_ID(name, T, started_only, call)                                                             \
  dbx_err name(ectx *c, job *j) {                                                                         \
    T *q = svc_decode(j, &T##__D);                                                                        \
    if (q == NULL) return DBX_OK;                                                                         \
    RunState *rs = NULL;                                                                                  \
    ActivityInfo *ai = NULL;                                                                              \
    dbx_err rc = load_activity_by_id(c, j, q->namespace_, q->workflow_id, q->run_id, q->activity_id,     \
                                     q->identity, started_only, &rs, &ai);                                \
    if (rc == DBX_OK && rs) rc = call;                                                                    \
    svc_runstate_free(rs);                                                                                \
    protobuf_c_message_free_unpacked(&q->base, NULL);                                                     \
    return rc;                                                                                            \
  }

ACT_BY_TOKEN(svc_h_activity_completed, RespondActivityTaskCompletedRequest, act_complete(c, j, rs, ai, q->result, q->identity))
ACT_BY_TOKEN(svc_h_activity_failed, RespondActivityTaskFailedRequest, act_fail_rpc(c, j, rs, ai, q->failure, q->last_heartbeat_details))
ACT_BY_TOKEN(svc_h_activity_canceled, RespondActivityTaskCanceledRequest, act_cancel(c, j, rs, ai, q->details, q->identity))
ACT_BY_TOKEN(svc_h_heartbeat, RecordActivityTaskHeartbeatRequest, act_heartbeat(c, j, rs, ai, q->details))
ACT_BY_ID(svc_h_activity_completed_by_id, RespondActivityTaskCompletedByIdRequest, 0, act_complete(c, j, rs, ai, q->result, q->identity))
ACT_BY_ID(svc_h_activity_failed_by_id, RespondActivityTaskFailedByIdRequest, 0, act_fail_rpc(c, j, rs, ai, q->failure, q->last_heartbeat_details))
ACT_BY_ID(svc_h_activity_canceled_by_id, RespondActivityTaskCanceledByIdRequest, 0, act_cancel(c, j, rs, ai, q->details, q->identity))
ACT_BY_ID(svc_h_heartbeat_by_id, RecordActivityTaskHeartbeatByIdRequest, 1, act_heartbeat(c, j, rs, ai, q->details))
