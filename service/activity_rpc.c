/* RPC handlers of activity workers: RecordActivityTaskHeartbeat and
 * RespondActivityTask{Completed,Failed,Canceled}. */
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

dbx_err svc_h_activity_completed(ectx *c, job *j) {
  RespondActivityTaskCompletedRequest *q = svc_decode(j, &RespondActivityTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_COMPLETED));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
    } else {
      ActivityTaskCompletedEventAttributes *a = ev->activity_task_completed_event_attributes;
      a->result = PB_CLONE(Payloads, q->result);
      a->scheduled_event_id = ai->scheduled_event_id;
      a->identity = svc_pb_strdup(q->identity);
      rc = svc_activity_close(c, rs, ai, ev, &a->started_event_id);
      svc_history_event_free(ev);
    }
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) j->status = DBX_GRPC_OK;
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_activity_failed(ectx *c, job *j) {
  RespondActivityTaskFailedRequest *q = svc_decode(j, &RespondActivityTaskFailedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    if (q->failure == NULL) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RespondActivityTaskFailed: failure is required");
    } else {
      rc = svc_activity_attempt_failed(c, rs, ai, q->failure, 0, q->last_heartbeat_details);
      if (rc == DBX_OK) rc = svc_run_save(c, rs);
    }
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_activity_canceled(ectx *c, job *j) {
  RespondActivityTaskCanceledRequest *q = svc_decode(j, &RespondActivityTaskCanceledRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_CANCELED));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
    } else {
      ActivityTaskCanceledEventAttributes *a = ev->activity_task_canceled_event_attributes;
      a->details = PB_CLONE(Payloads, q->details);
      a->latest_cancel_requested_event_id = ai->cancel_requested_event_id;
      a->scheduled_event_id = ai->scheduled_event_id;
      a->identity = svc_pb_strdup(q->identity);
      rc = svc_activity_close(c, rs, ai, ev, &a->started_event_id);
      svc_history_event_free(ev);
    }
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_heartbeat(ectx *c, job *j) {
  RecordActivityTaskHeartbeatRequest *q = svc_decode(j, &RecordActivityTaskHeartbeatRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    if (q->details) {
      Payloads *d = PB_CLONE(Payloads, q->details);
      if (d == NULL) {
        rc = DBX_ENOMEM;
      } else {
        if (ai->heartbeat_details) protobuf_c_message_free_unpacked(&ai->heartbeat_details->base, NULL);
        ai->heartbeat_details = d;
      }
    }
    ai->last_heartbeat_time_ns = c->now_ns;
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) {
      RecordActivityTaskHeartbeatResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_RESPONSE);
      r.cancel_requested = ai->cancel_requested;
      svc_job_reply(j, &r.base);
    }
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
