/* RPC handlers that start and end runs from outside: StartWorkflowExecution,
 * SignalWorkflowExecution, SignalWithStartWorkflowExecution,
 * RequestCancelWorkflowExecution, TerminateWorkflowExecution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

typedef struct {
  const char *ns, *workflow_id, *request_id, *identity;
  WorkflowType *type;
  TaskQueue *task_queue;
  Payloads *input;
  Duration *exec_timeout, *run_timeout, *task_timeout, *start_delay;
  int reuse_policy, conflict_policy;
  RetryPolicy *retry_policy;
  const char *cron;
  Memo *memo;
  SearchAttributes *search_attributes;
  Header *header;
  HistoryEvent *signal; /* signal-with-start */
} start_args;

/* Start a run or decide it exists. *run_id_out: malloc'd run id (new or
 * existing); *started: 1 if a new run was created. Sets the job status when
 * the start is refused. */
static dbx_err start_common(ectx *c, job *j, const start_args *a, char **run_id_out, int *started) {
  *run_id_out = NULL;
  *started = 0;
  if (!svc_check_ns(c, j, a->ns) || !svc_check_keyed(j, "workflow_id", a->ns, a->workflow_id, 0)) return DBX_OK;
  if (!svc_check_id(j, "workflow_type.name", a->type ? a->type->name : NULL)) return DBX_OK;
  if (!svc_check_keyed(j, "task_queue.name", a->ns, a->task_queue ? a->task_queue->name : NULL, 0)) return DBX_OK;
  if (a->request_id && strlen(a->request_id) > MAX_ID_BYTES) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: request_id is longer than %d bytes", j->method, MAX_ID_BYTES);
    return DBX_OK;
  }
  if (svc_blob_over(c, (const ProtobufCMessage *)a->input, "the input", a->workflow_id) ||
      svc_blob_over(c, (const ProtobufCMessage *)a->memo, "the memo", a->workflow_id)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, BLOB_REFUSED_MSG);
    return DBX_OK;
  }
  const Duration *ds[] = {a->exec_timeout, a->run_timeout, a->task_timeout, a->start_delay};
  const char *dn[] = {"workflow_execution_timeout", "workflow_run_timeout", "workflow_task_timeout",
                      "workflow_start_delay"};
  for (int i = 0; i < 4; i++) {
    if (ds[i] && dbx_pb_duration_ms(ds[i]) < 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s is negative", j->method, dn[i]);
      return DBX_OK;
    }
    if (ds[i] && dbx_pb_duration_ms(ds[i]) > MAX_TIMEOUT_MS) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s is longer than 100 years", j->method, dn[i]);
      return DBX_OK;
    }
  }
  dbx_err rc = DBX_OK;
  if (!svc_sa_check(c, j, a->ns, a->search_attributes, &rc)) return rc;
  char *cur = NULL;
  RunState *old = NULL;
  rc = svc_current_run_id(c, a->ns, a->workflow_id, &cur);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  if (cur) {
    rc = svc_run_load(c, a->ns, a->workflow_id, cur, &old);
    free(cur);
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  }
  if (old) {
    int running = old->status == WS(RUNNING);
    if (running) {
      /* a retried request with the same request id gets the same run */
      if (a->request_id && a->request_id[0] && strcmp(old->start_request_id, a->request_id) == 0) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      int conflict = a->conflict_policy;
      if (a->reuse_policy == 4 /* TERMINATE_IF_RUNNING */) conflict = 3;
      if (conflict == 2 /* USE_EXISTING */) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      if (conflict == 3 /* TERMINATE_EXISTING */) {
        dbx_err trc = svc_run_terminate(c, old, "terminated by a new start (id conflict policy)", a->identity);
        if (trc != DBX_OK) {
          svc_runstate_free(old);
          return trc;
        }
      } else {
        WorkflowExecutionAlreadyStartedFailure d =
            INIT(TEMPORAL__API__ERRORDETAILS__V1__WORKFLOW_EXECUTION_ALREADY_STARTED_FAILURE);
        d.start_request_id = old->start_request_id;
        d.run_id = old->run_id;
        svc_job_fail_detail(j, DBX_GRPC_ALREADY_EXISTS, &d.base, ALREADY_STARTED_URL,
                            "Workflow execution is already running. WorkflowId: %s, RunId: %s.", old->workflow_id,
                            old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
    } else {
      int reuse = a->reuse_policy ? a->reuse_policy : 1;
      int failed = old->status == WS(FAILED) || old->status == WS(CANCELED) || old->status == WS(TERMINATED) ||
                   old->status == WS(TIMED_OUT);
      if (a->request_id && a->request_id[0] && strcmp(old->start_request_id, a->request_id) == 0) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      if (reuse == 3 || (reuse == 2 && !failed)) {
        WorkflowExecutionAlreadyStartedFailure d =
            INIT(TEMPORAL__API__ERRORDETAILS__V1__WORKFLOW_EXECUTION_ALREADY_STARTED_FAILURE);
        d.start_request_id = old->start_request_id;
        d.run_id = old->run_id;
        svc_job_fail_detail(j, DBX_GRPC_ALREADY_EXISTS, &d.base, ALREADY_STARTED_URL,
                            "Workflow execution already finished and its id reuse policy does not allow a new "
                            "run. WorkflowId: %s, RunId: %s.",
                            old->workflow_id, old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
    }
    svc_runstate_free(old);
  }
  char *run_id = svc_new_uuid();
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
  if (run_id == NULL || ev == NULL) {
    free(run_id);
    svc_history_event_free(ev);
    return DBX_ENOMEM;
  }
  WorkflowExecutionStartedEventAttributes *st = ev->workflow_execution_started_event_attributes;
  /* borrowed pointers in a stack-like attribute set; cleared before freeing */
  st->workflow_type = a->type;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = a->task_queue->name;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  st->task_queue = &tq;
  st->input = a->input;
  st->workflow_execution_timeout = a->exec_timeout;
  st->workflow_run_timeout = a->run_timeout;
  st->workflow_task_timeout = a->task_timeout;
  st->first_workflow_task_backoff = a->start_delay;
  st->identity = (char *)(a->identity ? a->identity : "");
  st->retry_policy = a->retry_policy;
  st->cron_schedule = (char *)(a->cron ? a->cron : "");
  st->memo = a->memo;
  st->search_attributes = a->search_attributes;
  st->header = a->header;
  st->attempt = 1;
  run_start_args ra = {.ns = a->ns,
                       .workflow_id = a->workflow_id,
                       .run_id = run_id,
                       .request_id = a->request_id,
                       .started = st,
                       .after_started = a->signal};
  RunState *rs = NULL;
  rc = svc_run_start(c, &ra, &rs);
  memset(st, 0, sizeof *st); /* everything in it was borrowed */
  protobuf_c_message_init(&WorkflowExecutionStartedEventAttributes__D, st);
  svc_history_event_free(ev);
  svc_runstate_free(rs);
  if (rc != DBX_OK) {
    free(run_id);
    return rc;
  }
  *run_id_out = run_id;
  *started = 1;
  return DBX_OK;
}

dbx_err svc_start_request(ectx *c, job *j, const StartWorkflowExecutionRequest *q, char **run_id, int *started) {
  start_args a = {.ns = q->namespace_,
                  .workflow_id = q->workflow_id,
                  .request_id = q->request_id,
                  .identity = q->identity,
                  .type = q->workflow_type,
                  .task_queue = q->task_queue,
                  .input = q->input,
                  .exec_timeout = q->workflow_execution_timeout,
                  .run_timeout = q->workflow_run_timeout,
                  .task_timeout = q->workflow_task_timeout,
                  .start_delay = q->workflow_start_delay,
                  .reuse_policy = q->workflow_id_reuse_policy,
                  .conflict_policy = q->workflow_id_conflict_policy,
                  .retry_policy = q->retry_policy,
                  .cron = q->cron_schedule,
                  .memo = q->memo,
                  .search_attributes = q->search_attributes,
                  .header = q->header};
  *run_id = NULL;
  *started = 0;
  return start_common(c, j, &a, run_id, started);
}

dbx_err svc_h_start(ectx *c, job *j) {
  StartWorkflowExecutionRequest *q = svc_decode(j, &StartWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  char *run_id = NULL;
  int started = 0;
  dbx_err rc = svc_start_request(c, j, q, &run_id, &started);
  if (rc == DBX_OK && run_id) {
    StartWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_RESPONSE);
    r.run_id = run_id;
    r.started = started;
    r.status = WS(RUNNING);
    svc_job_reply(j, &r.base);
  }
  free(run_id);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static int running_or_fail(job *j, RunState *rs) {
  if (rs->status == WS(RUNNING)) return 1;
  svc_fail_not_found(j, "workflow execution already completed (workflow id %s, run id %s)", rs->workflow_id, rs->run_id);
  return 0;
}

static int seen_request(RunState *rs, const char *req) {
  for (size_t i = 0; req && req[0] && i < rs->n_signal_request_ids; i++)
    if (strcmp(rs->signal_request_ids[i], req) == 0) return 1;
  return 0;
}

/* Keep req among the run's signal request ids (dedupe). DBX_OK or
 * DBX_ENOMEM: a signal whose id is not kept must not be written, or its
 * retry would be delivered twice. */
static dbx_err remember_request(RunState *rs, const char *req) {
  if (req == NULL || req[0] == '\0') return DBX_OK;
  if (rs->n_signal_request_ids >= 64) { /* keep the newest 64 */
    free(rs->signal_request_ids[0]);
    memmove(rs->signal_request_ids, rs->signal_request_ids + 1, 63 * sizeof *rs->signal_request_ids);
    rs->n_signal_request_ids--;
  }
  char **arr = dbx_realloc(rs->signal_request_ids, (rs->n_signal_request_ids + 1) * sizeof *arr);
  if (arr == NULL) return DBX_ENOMEM;
  rs->signal_request_ids = arr;
  char *d = dbx_strdup(req);
  if (d == NULL) return DBX_ENOMEM;
  arr[rs->n_signal_request_ids++] = d;
  return DBX_OK;
}

dbx_err svc_h_signal(ectx *c, job *j) {
  SignalWorkflowExecutionRequest *q = svc_decode(j, &SignalWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_) || !svc_check_id(j, "signal_name", q->signal_name)) goto out;
  if (svc_blob_over(c, (const ProtobufCMessage *)q->input, "the signal input",
                    q->workflow_execution ? q->workflow_execution->workflow_id : "")) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, BLOB_REFUSED_MSG);
    goto out;
  }
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL || !running_or_fail(j, rs)) goto out;
  if (!seen_request(rs, q->request_id)) {
    rc = svc_run_signal(c, rs, q->signal_name, q->input, q->identity, q->header, q->request_id);
    if (rc == DBX_OK) rc = remember_request(rs, q->request_id);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_signal_with_start(ectx *c, job *j) {
  SignalWithStartWorkflowExecutionRequest *q = svc_decode(j, &SignalWithStartWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  RunState *rs = NULL;
  char *cur = NULL;
  if (!svc_check_ns(c, j, q->namespace_) || !svc_check_keyed(j, "workflow_id", q->namespace_, q->workflow_id, 0) ||
      !svc_check_id(j, "signal_name", q->signal_name))
    goto out;
  if (svc_blob_over(c, (const ProtobufCMessage *)q->signal_input, "the signal input", q->workflow_id) ||
      svc_blob_over(c, (const ProtobufCMessage *)q->input, "the input", q->workflow_id)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, BLOB_REFUSED_MSG);
    goto out;
  }
  rc = svc_current_run_id(c, q->namespace_, q->workflow_id, &cur);
  if (rc == DBX_OK) rc = svc_run_load(c, q->namespace_, q->workflow_id, cur, &rs);
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  if (rc != DBX_OK) goto out;
  SignalWithStartWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WITH_START_WORKFLOW_EXECUTION_RESPONSE);
  if (rs && rs->status == WS(RUNNING)) {
    rc = svc_run_signal(c, rs, q->signal_name, q->signal_input, q->identity, q->header, q->request_id);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) {
      r.run_id = rs->run_id;
      r.started = 0;
      svc_job_reply(j, &r.base);
    }
    goto out;
  }
  HistoryEvent *sig = svc_event_new(ET(WORKFLOW_EXECUTION_SIGNALED));
  if (sig == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowExecutionSignaledEventAttributes *sa = sig->workflow_execution_signaled_event_attributes;
  sa->signal_name = svc_pb_strdup(q->signal_name);
  sa->input = PB_CLONE(Payloads, q->signal_input);
  sa->identity = svc_pb_strdup(q->identity);
  sa->header = PB_CLONE(Header, q->header);
  start_args a = {.ns = q->namespace_, .workflow_id = q->workflow_id, .request_id = q->request_id,
                  .identity = q->identity, .type = q->workflow_type, .task_queue = q->task_queue, .input = q->input,
                  .exec_timeout = q->workflow_execution_timeout, .run_timeout = q->workflow_run_timeout,
                  .task_timeout = q->workflow_task_timeout, .start_delay = q->workflow_start_delay,
                  .reuse_policy = q->workflow_id_reuse_policy, .conflict_policy = 0,
                  .retry_policy = q->retry_policy, .cron = q->cron_schedule, .memo = q->memo,
                  .search_attributes = q->search_attributes, .header = q->header, .signal = sig};
  char *run_id = NULL;
  int started = 0;
  rc = start_common(c, j, &a, &run_id, &started);
  svc_history_event_free(sig);
  if (rc == DBX_OK && run_id) {
    r.run_id = run_id;
    r.started = started;
    svc_job_reply(j, &r.base);
  }
  free(run_id);
out:
  free(cur);
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_request_cancel(ectx *c, job *j) {
  RequestCancelWorkflowExecutionRequest *q = svc_decode(j, &RequestCancelWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  if (rs->status != WS(RUNNING)) { /* Temporal's server: a no-op success, nothing written */
    j->status = DBX_GRPC_OK;
    goto out;
  }
  rc = svc_run_request_cancel(c, rs, q->identity, q->reason);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_terminate(ectx *c, job *j) {
  TerminateWorkflowExecutionRequest *q = svc_decode(j, &TerminateWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL || !running_or_fail(j, rs)) goto out;
  rc = svc_run_terminate(c, rs, q->reason, q->identity);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* DeleteWorkflowExecution: as Temporal's server, a running run is terminated
 * first ("Delete workflow execution", identity of the request's sender:
 * none here), then the run is gone; Describe, history and List no longer
 * know it. Temporal deletes asynchronously; here it is done when the call
 * answers. */
dbx_err svc_h_delete(ectx *c, job *j) {
  DeleteWorkflowExecutionRequest *q = svc_decode(j, &DeleteWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  if (rs->status == WS(RUNNING)) rc = svc_run_terminate(c, rs, "Delete workflow execution", "");
  if (rc == DBX_OK) rc = svc_run_delete(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
