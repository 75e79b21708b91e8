/* Run state machine operations below the handlers (history engine): signal,
 * cancel request and termination of a loaded run. Plain inputs, dbx_err
 * results; used by handlers, by workflow task commands and by state.c's
 * parent close policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

WorkflowExecution *svc_we_new(const char *wfid, const char *run_id) {
  WorkflowExecution *we = svc_pb_new(&WorkflowExecution__D);
  if (we) {
    we->workflow_id = svc_pb_strdup(wfid);
    we->run_id = svc_pb_strdup(run_id);
  }
  return we;
}

/* Deliver a signal to a loaded run (buffered if its task is started). */
dbx_err svc_run_signal(ectx *c, RunState *rs, const char *name, const Payloads *input, const char *identity,
                          const Header *header, const char *request_id) {
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_SIGNALED));
  if (ev == NULL) return DBX_ENOMEM;
  WorkflowExecutionSignaledEventAttributes *a = ev->workflow_execution_signaled_event_attributes;
  a->signal_name = svc_pb_strdup(name);
  a->input = PB_CLONE(Payloads, input);
  a->identity = svc_pb_strdup(identity);
  a->header = PB_CLONE(Header, header);
  a->request_id = svc_pb_strdup(request_id);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  svc_history_event_free(ev);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

dbx_err svc_run_request_cancel(ectx *c, RunState *rs, const char *identity, const char *reason) {
  if (rs->cancel_requested) return DBX_OK;
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_cancel_requested_event_attributes->identity = svc_pb_strdup(identity);
  /* Temporal: RequestCancelWorkflowExecutionRequest.reason is recorded as the event's cause */
  ev->workflow_execution_cancel_requested_event_attributes->cause = svc_pb_strdup(reason);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  svc_history_event_free(ev); /* the event set rs->cancel_requested */
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

dbx_err svc_child_request_cancel(ectx *c, const char *ns, const char *wfid) {
  char *cur = NULL;
  dbx_err rc = svc_current_run_id(c, ns, wfid, &cur);
  if (rc != DBX_OK) return rc == DBX_ENOTFOUND ? DBX_OK : rc;
  RunState *rs = NULL;
  rc = svc_run_load(c, ns, wfid, cur, &rs);
  free(cur);
  if (rc != DBX_OK) return rc == DBX_ENOTFOUND ? DBX_OK : rc;
  if (rs->status == WS(RUNNING)) {
    rc = svc_run_request_cancel(c, rs, "durabox", NULL);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  svc_runstate_free(rs);
  return rc;
}

/* Terminate a loaded running run (saves it). Returns 0 or -1. */
dbx_err svc_run_terminate(ectx *c, RunState *rs, const char *reason, const char *identity) {
  if (rs->status != WS(RUNNING)) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (rs->wft_started_event_id > 0) {
    HistoryEvent *f = svc_event_new(ET(WORKFLOW_TASK_FAILED));
    if (f == NULL) return DBX_ENOMEM;
    f->workflow_task_failed_event_attributes->scheduled_event_id = rs->wft_scheduled_event_id;
    f->workflow_task_failed_event_attributes->started_event_id = rs->wft_started_event_id;
    f->workflow_task_failed_event_attributes->cause = WFC(FORCE_CLOSE_COMMAND);
    f->workflow_task_failed_event_attributes->identity = svc_pb_strdup(identity);
    rs->wft_started_event_id = 0;
    rc = svc_event_append(c, rs, f, 0);
    svc_history_event_free(f);
  }
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_TERMINATED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_terminated_event_attributes->reason = svc_pb_strdup(reason);
  ev->workflow_execution_terminated_event_attributes->identity = svc_pb_strdup(identity);
  if (rc == DBX_OK) rc = svc_run_close(c, rs, ev, WS(TERMINATED));
  svc_history_event_free(ev);
  return rc;
}
