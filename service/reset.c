/* ResetWorkflowExecution: a new run from a prefix of the base run's history. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

/* Rebuild pending activities and timers of rs from events (the copied prefix). */
static dbx_err rebuild_pending(ectx *c, RunState *rs, HistoryEvent **evs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *e = evs[i];
    int64_t t_ns = e->event_time ? e->event_time->seconds * 1000000000 + e->event_time->nanos : c->now_ns;
    switch (e->attributes_case) {
    case HEV(ACTIVITY_TASK_SCHEDULED): {
      ActivityTaskScheduledEventAttributes *a = e->activity_task_scheduled_event_attributes;
      ActivityInfo *ai = svc_pb_new(&ActivityInfo__D);
      ActivityInfo **arr = realloc(rs->activities, (rs->n_activities + 1) * sizeof *arr);
      if (ai == NULL || arr == NULL) {
        free(ai);
        if (arr) rs->activities = arr;
        return DBX_ENOMEM;
      }
      rs->activities = arr;
      arr[rs->n_activities++] = ai;
      ai->scheduled_event_id = e->event_id;
      ai->activity_id = svc_pb_strdup(a->activity_id);
      ai->activity_type = svc_pb_strdup(a->activity_type ? a->activity_type->name : "");
      ai->task_queue = svc_pb_strdup(a->task_queue ? a->task_queue->name : rs->task_queue);
      ai->attempt = 1;
      ai->scheduled_time_ns = c->now_ns;
      ai->attempt_scheduled_time_ns = c->now_ns;
      ai->schedule_to_close_ms = svc_duration_ms(a->schedule_to_close_timeout);
      ai->schedule_to_start_ms = svc_duration_ms(a->schedule_to_start_timeout);
      ai->start_to_close_ms = svc_duration_ms(a->start_to_close_timeout);
      ai->heartbeat_ms = svc_duration_ms(a->heartbeat_timeout);
      ai->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
      break;
    }
    case HEV(ACTIVITY_TASK_COMPLETED):
      svc_activity_remove(rs, e->activity_task_completed_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_FAILED):
      svc_activity_remove(rs, e->activity_task_failed_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_TIMED_OUT):
      svc_activity_remove(rs, e->activity_task_timed_out_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_CANCELED):
      svc_activity_remove(rs, e->activity_task_canceled_event_attributes->scheduled_event_id);
      break;
    case HEV(TIMER_STARTED): {
      TimerInfo *ti = svc_pb_new(&TimerInfo__D);
      TimerInfo **arr = realloc(rs->timers, (rs->n_timers + 1) * sizeof *arr);
      if (ti == NULL || arr == NULL) {
        free(ti);
        if (arr) rs->timers = arr;
        return DBX_ENOMEM;
      }
      rs->timers = arr;
      arr[rs->n_timers++] = ti;
      ti->timer_id = svc_pb_strdup(e->timer_started_event_attributes->timer_id);
      ti->started_event_id = e->event_id;
      ti->fire_time_ns = t_ns + svc_duration_ms(e->timer_started_event_attributes->start_to_fire_timeout) * 1000000;
      break;
    }
    case HEV(TIMER_FIRED):
      svc_timer_remove(rs, e->timer_fired_event_attributes->timer_id);
      break;
    case HEV(TIMER_CANCELED):
      svc_timer_remove(rs, e->timer_canceled_event_attributes->timer_id);
      break;
    case HEV(WORKFLOW_EXECUTION_CANCEL_REQUESTED):
      rs->cancel_requested = 1;
      break;
    case HEV(WORKFLOW_TASK_COMPLETED):
      rs->last_wft_started_event_id = e->workflow_task_completed_event_attributes->started_event_id;
      break;
    default:
      break;
    }
  }
  return DBX_OK;
}

dbx_err svc_h_reset(ectx *c, job *j) {
  ResetWorkflowExecutionRequest *q = svc_decode(j, &ResetWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *base = NULL, *nrs = NULL;
  HistoryEvent **evs = NULL, **later = NULL;
  size_t n = 0, nl = 0;
  char *new_run = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->workflow_execution, &base);
  if (rc != DBX_OK || base == NULL) goto out;
  int64_t e = q->workflow_task_finish_event_id;
  if (e <= 1 || e >= base->next_event_id) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
             "ResetWorkflowExecution: workflow_task_finish_event_id %lld is out of range (must be > 1 and < %lld)",
             (long long)e, (long long)base->next_event_id);
    goto out;
  }
  HistoryEvent *pe = NULL;
  rc = svc_event_load_one(c, base->run_seq, e, &pe);
  if (rc != DBX_OK) goto out;
  int et = pe->event_type;
  svc_history_event_free(pe);
  if (et != ET(WORKFLOW_TASK_COMPLETED) && et != ET(WORKFLOW_TASK_TIMED_OUT) && et != ET(WORKFLOW_TASK_FAILED) &&
      et != ET(WORKFLOW_TASK_STARTED)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
             "ResetWorkflowExecution: event %lld is not a workflow task completed, failed, timed out or started event",
             (long long)e);
    goto out;
  }
  /* the prefix [1, e) */
  rc = svc_events_load(c, base->run_seq, 1, e, &evs, &n, 0);
  if (rc != DBX_OK) goto out;
  rc = svc_events_load(c, base->run_seq, e, 0, &later, &nl, 0);
  if (rc != DBX_OK) goto out;
  new_run = svc_new_uuid();
  nrs = svc_runstate_new();
  if (new_run == NULL || nrs == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  svc_pb_setstr(&nrs->namespace_, base->namespace_);
  svc_pb_setstr(&nrs->workflow_id, base->workflow_id);
  svc_pb_setstr(&nrs->run_id, new_run);
  svc_pb_setstr(&nrs->first_run_id, base->first_run_id);
  svc_pb_setstr(&nrs->workflow_type, base->workflow_type);
  svc_pb_setstr(&nrs->task_queue, base->task_queue);
  svc_pb_setstr(&nrs->start_request_id, q->request_id);
  svc_pb_setstr(&nrs->reset_from_run_id, base->run_id);
  nrs->run_seq = svc_next_seq(c);
  nrs->status = WS(RUNNING);
  nrs->next_event_id = 1;
  nrs->start_time_ns = c->now_ns;
  nrs->execution_time_ns = c->now_ns;
  nrs->run_timeout_ms = base->run_timeout_ms;
  nrs->execution_timeout_ms = base->execution_timeout_ms;
  nrs->task_timeout_ms = base->task_timeout_ms;
  nrs->execution_expiration_ns = base->execution_expiration_ns;
  nrs->wft_attempt = 1;
  if (base->parent) nrs->parent = PB_CLONE(ParentInfo, base->parent);
  nrs->memo.data = base->memo.len ? malloc(base->memo.len) : NULL;
  if (nrs->memo.data) {
    memcpy(nrs->memo.data, base->memo.data, base->memo.len);
    nrs->memo.len = base->memo.len;
  }
  int64_t wft_sched = 0, wft_started = 0;
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *ev = evs[i];
    if (ev->event_type == ET(WORKFLOW_TASK_SCHEDULED)) {
      wft_sched = ev->event_id;
      wft_started = 0;
    } else if (ev->event_type == ET(WORKFLOW_TASK_STARTED)) {
      wft_started = ev->event_id;
    } else if (ev->event_type == ET(WORKFLOW_TASK_COMPLETED) || ev->event_type == ET(WORKFLOW_TASK_FAILED) ||
               ev->event_type == ET(WORKFLOW_TASK_TIMED_OUT)) {
      wft_sched = wft_started = 0;
    }
    int64_t keep_time = 1;
    (void)keep_time;
    Timestamp *t = ev->event_time;
    ev->event_time = NULL;
    rc = svc_event_append(c, nrs, ev, 0); /* same ids, 1.. */
    if (ev->event_time) free(ev->event_time);
    ev->event_time = t;
    if (rc != DBX_OK) goto out;
  }
  rc = rebuild_pending(c, nrs, evs, n);
  if (rc != DBX_OK) goto out;
  if (wft_sched && !wft_started) {
    HistoryEvent *st = svc_event_new(ET(WORKFLOW_TASK_STARTED));
    if (st == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    st->workflow_task_started_event_attributes->scheduled_event_id = wft_sched;
    st->workflow_task_started_event_attributes->identity = svc_pb_strdup(q->identity);
    rc = svc_event_append(c, nrs, st, 0);
    wft_started = st->event_id;
    svc_history_event_free(st);
    if (rc != DBX_OK) goto out;
  }
  HistoryEvent *f = svc_event_new(ET(WORKFLOW_TASK_FAILED));
  Failure *fl = svc_pb_new(&Failure__D);
  if (f == NULL || fl == NULL) {
    svc_history_event_free(f);
    free(fl);
    rc = DBX_ENOMEM;
    goto out;
  }
  fl->message = svc_pb_strdup(q->reason);
  fl->failure_info_case = FI(RESET_WORKFLOW_FAILURE_INFO);
  fl->reset_workflow_failure_info = svc_pb_new(&ResetWorkflowFailureInfo__D);
  WorkflowTaskFailedEventAttributes *fa = f->workflow_task_failed_event_attributes;
  fa->scheduled_event_id = wft_sched;
  fa->started_event_id = wft_started;
  fa->cause = WFC(RESET_WORKFLOW);
  fa->failure = fl;
  fa->identity = svc_pb_strdup(q->identity);
  fa->base_run_id = svc_pb_strdup(base->run_id);
  fa->new_run_id = svc_pb_strdup(new_run);
  rc = svc_event_append(c, nrs, f, 0);
  svc_history_event_free(f);
  if (rc != DBX_OK) goto out;
  /* reapply signals recorded after the reset point */
  int skip_signals = q->reset_reapply_type == 2;
  for (size_t i = 0; i < q->n_reset_reapply_exclude_types; i++) skip_signals |= q->reset_reapply_exclude_types[i] == 1;
  for (size_t i = 0; i < nl && !skip_signals; i++) {
    if (later[i]->event_type != ET(WORKFLOW_EXECUTION_SIGNALED)) continue;
    later[i]->event_id = 0;
    free(later[i]->event_time);
    later[i]->event_time = NULL;
    rc = svc_event_append(c, nrs, later[i], 0);
    if (rc != DBX_OK) goto out;
  }
  /* pending activities run again; pending timers keep their fire time */
  for (size_t i = 0; i < nrs->n_activities; i++) {
    rc = svc_activity_queue_attempt(c, nrs, nrs->activities[i]);
    if (rc != DBX_OK) goto out;
  }
  for (size_t i = 0; i < nrs->n_timers; i++) {
    rc = svc_timer_add(c, nrs->timers[i]->fire_time_ns, TK_USER_TIMER, nrs, nrs->timers[i]->started_event_id, 0,
                   nrs->timers[i]->timer_id);
    if (rc != DBX_OK) goto out;
  }
  rc = svc_wft_schedule(c, nrs);
  if (rc != DBX_OK) goto out;
  if (base->status == WS(RUNNING)) {
    char *reason = dbx_asprintf("reset to a new run %s: %s", new_run, q->reason);
    int tr = svc_run_terminate(c, base, reason ? reason : "reset", q->identity);
    free(reason);
    if (tr != 0) {
      rc = DBX_ESTORE;
      goto out;
    }
  }
  size_t kl;
  char *k = svc_exec_key(nrs->namespace_, nrs->workflow_id, &kl);
  if (k == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  ExecutionRecord er = INIT(DURABOX__SERVICE__V1__EXECUTION_RECORD);
  er.current_run_id = new_run;
  uint8_t buf[256];
  size_t bl = protobuf_c_message_get_packed_size(&er.base);
  if (bl <= sizeof buf) {
    protobuf_c_message_pack(&er.base, buf);
    rc = dbx_store_put(c->txn, c->svc->t_execs, k, kl, buf, bl);
  } else {
    rc = DBX_EINVAL;
  }
  free(k);
  if (rc == DBX_OK) rc = svc_run_save(c, nrs);
  if (rc == DBX_OK) {
    ResetWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_RESPONSE);
    r.run_id = new_run;
    svc_job_reply(j, &r.base);
  }
out:
  svc_events_free(evs, n);
  svc_events_free(later, nl);
  free(new_run);
  svc_runstate_free(nrs);
  svc_runstate_free(base);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
