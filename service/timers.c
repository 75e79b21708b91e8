/* Durable timers: user timers, activity timeouts and retries, workflow task
 * timeouts and retries, workflow run and execution timeouts. Each is a row
 * in the timers table keyed by fire time; svc_fire_due_timers() takes the due
 * rows inside the batch transaction, deletes them, and applies each one if it
 * still matches the run's state (a timer whose activity attempt moved on, or
 * whose run closed, is stale and dropped). Because the rows are in the store,
 * a restart re-arms every timer by itself. */
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"


static Failure *timeout_failure(int timeout_type, const Payloads *details) {
  static const char *names[] = {"", "StartToClose", "ScheduleToStart", "ScheduleToClose", "Heartbeat"};
  Failure *f = svc_pb_new(&Failure__D);
  if (f == NULL) return NULL;
  char *msg = dbx_asprintf("activity %s timeout", timeout_type <= 4 ? names[timeout_type] : "");
  f->message = msg ? msg : svc_pb_strdup("activity timeout");
  f->source = svc_pb_strdup("Server");
  TimeoutFailureInfo *ti = svc_pb_new(&TimeoutFailureInfo__D);
  if (ti == NULL) {
    protobuf_c_message_free_unpacked(&f->base, NULL);
    return NULL;
  }
  ti->timeout_type = timeout_type;
  ti->last_heartbeat_details = PB_CLONE(Payloads, details);
  f->failure_info_case = FI(TIMEOUT_FAILURE_INFO);
  f->timeout_failure_info = ti;
  return f;
}

static dbx_err fire_activity(ectx *c, RunState *rs, TimerRecord *tr, int *changed) {
  ActivityInfo *ai = svc_activity_find(rs, tr->event_id);
  if (ai == NULL) return DBX_OK;
  int tt = 0;
  switch (tr->kind) {
  case TK_ACTIVITY_RETRY:
    if (ai->attempt != tr->attempt || ai->started_time_ns != 0 || ai->queued) return DBX_OK;
    *changed = 1;
    return svc_activity_queue_attempt(c, rs, ai);
  case TK_ACTIVITY_SCHEDULE_TO_START:
    if (ai->attempt != tr->attempt || ai->started_time_ns != 0) return DBX_OK;
    tt = TT(SCHEDULE_TO_START);
    break;
  case TK_ACTIVITY_START_TO_CLOSE: {
    if (ai->attempt != tr->attempt || ai->started_time_ns == 0) return DBX_OK;
    /* a timer armed by an earlier start of this attempt whose hand-off was
     * undone (matching.c: svc_h_task_undelivered) waits for this start's */
    int64_t due = ai->started_time_ns + ai->start_to_close_ms * 1000000;
    if (due > c->now_ns) {
      *changed = 1;
      return svc_timer_add(c, due, TK_ACTIVITY_START_TO_CLOSE, rs, ai->scheduled_event_id, ai->attempt, NULL);
    }
    tt = TT(START_TO_CLOSE);
    break;
  }
  case TK_ACTIVITY_HEARTBEAT: {
    if (ai->attempt != tr->attempt || ai->started_time_ns == 0) return DBX_OK;
    int64_t last = ai->last_heartbeat_time_ns > ai->started_time_ns ? ai->last_heartbeat_time_ns : ai->started_time_ns;
    /* while the service was down no heartbeat could reach it: the worker
     * gets a full heartbeat timeout from the restart to report or heartbeat */
    if (last < c->svc->started_wall_ns) last = c->svc->started_wall_ns;
    int64_t due = last + ai->heartbeat_ms * 1000000;
    if (due > c->now_ns) { /* it heartbeat meanwhile: wait for the next deadline */
      *changed = 1;
      return svc_timer_add(c, due, TK_ACTIVITY_HEARTBEAT, rs, ai->scheduled_event_id, ai->attempt, NULL);
    }
    tt = TT(HEARTBEAT);
    break;
  }
  case TK_ACTIVITY_SCHEDULE_TO_CLOSE:
    tt = TT(SCHEDULE_TO_CLOSE);
    break;
  default:
    return DBX_OK;
  }
  Failure *f = timeout_failure(tt, ai->heartbeat_details);
  if (f == NULL) return DBX_ENOMEM;
  *changed = 1;
  DBX_INFO("service", "activity %s of workflow %s attempt %d: %s", ai->activity_id, rs->workflow_id, ai->attempt,
           f->message);
  dbx_err rc = svc_activity_attempt_failed(c, rs, ai, f, tt, NULL);
  protobuf_c_message_free_unpacked(&f->base, NULL);
  return rc;
}

dbx_err svc_wft_time_out(ectx *c, RunState *rs) {
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_TIMED_OUT));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_task_timed_out_event_attributes->scheduled_event_id = rs->wft_scheduled_event_id;
  ev->workflow_task_timed_out_event_attributes->started_event_id = rs->wft_started_event_id;
  ev->workflow_task_timed_out_event_attributes->timeout_type = TT(START_TO_CLOSE);
  rs->wft_started_event_id = 0;
  dbx_err rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev); /* the event ended the task */
  if (!svc_sticky_clear(rs)) rs->wft_attempt++; /* Temporal: a sticky task is retried once on the normal queue */
  int flushed = 0;
  if (rc == DBX_OK) rc = svc_events_flush_buffer(c, rs, &flushed);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

static dbx_err fire_one(ectx *c, TimerRecord *tr) {
  if (tr->kind == TK_SCHEDULE) return svc_sched_fire(c, tr); /* names a schedule, not a run */
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(c, tr->namespace_, tr->workflow_id, tr->run_id, &rs);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  int changed = 0;
  if (rs->status != WS(RUNNING)) goto out;
  switch (tr->kind) {
  case TK_USER_TIMER: {
    TimerInfo *ti = svc_timer_find(rs, tr->timer_id);
    if (ti == NULL || ti->started_event_id != tr->event_id) break;
    HistoryEvent *ev = svc_event_new(ET(TIMER_FIRED));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    ev->timer_fired_event_attributes->timer_id = svc_pb_strdup(tr->timer_id);
    ev->timer_fired_event_attributes->started_event_id = tr->event_id;
    rc = svc_event_append(c, rs, ev, 1); /* ends the timer */
    svc_history_event_free(ev);
    if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
    changed = 1;
    break;
  }
  case TK_WFT_START_TO_CLOSE: {
    if (rs->wft_scheduled_event_id != tr->event_id || rs->wft_started_event_id == 0 || rs->wft_attempt != tr->attempt)
      break;
    rc = svc_wft_time_out(c, rs);
    changed = 1;
    break;
  }
  case TK_WFT_STICKY_SCHEDULE_TO_START:
    rc = svc_sticky_timed_out(c, rs, tr->event_id, tr->attempt, &changed);
    break;
  case TK_WFT_RETRY:
    if (rs->wft_scheduled_event_id != 0 || rs->wft_backoff_until_ns == 0) break;
    rs->wft_backoff_until_ns = 0;
    /* attempt stays; a zero backoff_until lets wft_schedule write the task now */
    rs->wft_backoff_until_ns = -1;
    rc = svc_wft_schedule(c, rs);
    if (rs->wft_backoff_until_ns == -1) rs->wft_backoff_until_ns = 0;
    changed = 1;
    break;
  case TK_WORKFLOW_RUN_TIMEOUT:
  case TK_WORKFLOW_EXECUTION_TIMEOUT: {
    HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_TIMED_OUT));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    ev->workflow_execution_timed_out_event_attributes->retry_state = RS(TIMEOUT);
    if (rs->wft_started_event_id > 0) rs->wft_started_event_id = 0; /* the task dies with the run */
    rc = svc_run_close(c, rs, ev, WS(TIMED_OUT));
    svc_history_event_free(ev);
    goto out; /* run_close saved it */
  }
  default:
    rc = fire_activity(c, rs, tr, &changed);
    break;
  }
  if (rc == DBX_OK && changed) rc = svc_run_save(c, rs);
out:
  svc_runstate_free(rs);
  return rc;
}

int svc_fire_due_timers(ectx *c, int max, int64_t budget_ns, dbx_err *err) {
  int fired = 0;
  *err = DBX_OK;
  int64_t until = dbx_mono_ns() + budget_ns;
  for (; fired < max && (fired == 0 || dbx_mono_ns() < until); fired++) {
    dbx_cursor *cur = NULL;
    dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_timers, &cur);
    if (rc != DBX_OK) {
      *err = rc;
      return -1;
    }
    dbx_val k, v;
    rc = dbx_store_cursor_seek(cur, NULL, 0, &k, &v);
    if (rc == DBX_ENOTFOUND) {
      dbx_store_cursor_close(cur);
      break;
    }
    if (rc != DBX_OK || k.size != 16) {
      dbx_store_cursor_close(cur);
      *err = rc != DBX_OK ? rc : DBX_ESTORE;
      return -1;
    }
    uint64_t when = 0;
    for (int i = 0; i < 8; i++) when = (when << 8) | ((const uint8_t *)k.data)[i];
    if ((int64_t)when > c->now_ns) {
      dbx_store_cursor_close(cur);
      break;
    }
    TimerRecord *tr = NULL;
    dbx_err urc = svc_pb_unpack(&TimerRecord__D, v.data, v.size, (void **)&tr);
    if (urc == DBX_ENOMEM) { /* the row stays for the next try */
      dbx_store_cursor_close(cur);
      *err = urc;
      return -1;
    }
    rc = dbx_store_cursor_del(cur);
    dbx_store_cursor_close(cur);
    if (rc != DBX_OK) {
      if (tr) protobuf_c_message_free_unpacked(&tr->base, NULL);
      *err = rc;
      return -1;
    }
    if (tr == NULL) continue; /* a damaged row: dropped */
    rc = fire_one(c, tr);
    protobuf_c_message_free_unpacked(&tr->base, NULL);
    if (rc != DBX_OK) {
      *err = rc;
      return -1;
    }
  }
  return fired;
}
