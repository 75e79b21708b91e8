/* Events to mutable state: the one function that turns a run's history events
 * into the event-derived part of its RunState (pending activities, timers and
 * child workflows, the workflow task's event ids, cancel request, close).
 *
 * The live path applies each event as it is appended (state.c:
 * svc_event_append), so handlers and timers never add or remove pending
 * entries themselves; reset folds the kept prefix of a run's history into a
 * fresh RunState with the same function (reset.c). What is not in any event
 * stays with the callers: attempts, start times, heartbeat details, queued
 * flags, buffered events, backoffs.
 *
 * An event's time is its event_time; an event without one (a buffered event,
 * whose time is set when it is written) counts from 0, which only matters for
 * the kinds that are never buffered (scheduled, started, initiated). Malformed
 * events (attributes missing) are ignored. */
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

static int64_t event_time_ns(const HistoryEvent *ev) { return dbx_pb_timestamp_ns(ev->event_time); }

/* Append a new element to a repeated message field of rs. */
#define APPEND_NEW(arr, n, T, D, out)                          \
  do {                                                         \
    T *x_ = svc_pb_new(&D);                                    \
    T **a_ = dbx_realloc((arr), ((n) + 1) * sizeof *a_);           \
    if (a_) (arr) = a_;                                        \
    if (x_ == NULL || a_ == NULL) {                            \
      free(x_);                                                \
      return DBX_ENOMEM;                                       \
    }                                                          \
    a_[(n)++] = x_;                                            \
    (out) = x_;                                                \
  } while (0)

static dbx_err activity_scheduled(RunState *rs, const HistoryEvent *ev) {
  const ActivityTaskScheduledEventAttributes *a = ev->activity_task_scheduled_event_attributes;
  ActivityInfo *ai;
  APPEND_NEW(rs->activities, rs->n_activities, ActivityInfo, ActivityInfo__D, ai);
  int64_t t = event_time_ns(ev);
  ai->scheduled_event_id = ev->event_id;
  ai->activity_id = svc_pb_strdup(a->activity_id);
  ai->activity_type = svc_pb_strdup(a->activity_type ? a->activity_type->name : "");
  ai->task_queue = svc_pb_strdup(a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue);
  ai->attempt = 1;
  ai->scheduled_time_ns = t;
  ai->attempt_scheduled_time_ns = t;
  ai->schedule_to_close_ms = dbx_pb_duration_ms(a->schedule_to_close_timeout);
  ai->schedule_to_start_ms = dbx_pb_duration_ms(a->schedule_to_start_timeout);
  ai->start_to_close_ms = dbx_pb_duration_ms(a->start_to_close_timeout);
  ai->heartbeat_ms = dbx_pb_duration_ms(a->heartbeat_timeout);
  if (a->retry_policy) {
    ai->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
    if (ai->retry_policy == NULL) return DBX_ENOMEM;
  }
  if (ai->activity_id == NULL || ai->activity_type == NULL || ai->task_queue == NULL) return DBX_ENOMEM;
  return DBX_OK;
}

static dbx_err timer_started(RunState *rs, const HistoryEvent *ev) {
  const TimerStartedEventAttributes *a = ev->timer_started_event_attributes;
  TimerInfo *ti;
  APPEND_NEW(rs->timers, rs->n_timers, TimerInfo, TimerInfo__D, ti);
  ti->timer_id = svc_pb_strdup(a->timer_id);
  ti->started_event_id = ev->event_id;
  ti->fire_time_ns = event_time_ns(ev) + dbx_pb_duration_ms(a->start_to_fire_timeout) * 1000000;
  return ti->timer_id ? DBX_OK : DBX_ENOMEM;
}

static dbx_err child_initiated(RunState *rs, const HistoryEvent *ev) {
  const StartChildWorkflowExecutionInitiatedEventAttributes *a =
      ev->start_child_workflow_execution_initiated_event_attributes;
  ChildInfo *ci;
  APPEND_NEW(rs->children, rs->n_children, ChildInfo, ChildInfo__D, ci);
  ci->initiated_event_id = ev->event_id;
  ci->namespace_ = svc_pb_strdup(a->namespace_[0] ? a->namespace_ : rs->namespace_);
  ci->workflow_id = svc_pb_strdup(a->workflow_id);
  ci->workflow_type = svc_pb_strdup(a->workflow_type ? a->workflow_type->name : "");
  ci->parent_close_policy = a->parent_close_policy;
  if (ci->namespace_ == NULL || ci->workflow_id == NULL || ci->workflow_type == NULL) return DBX_ENOMEM;
  return DBX_OK;
}

static dbx_err child_started(RunState *rs, const HistoryEvent *ev) {
  const ChildWorkflowExecutionStartedEventAttributes *a = ev->child_workflow_execution_started_event_attributes;
  ChildInfo *ci = svc_child_find(rs, a->initiated_event_id);
  if (ci == NULL) return DBX_OK;
  ci->started_event_id = ev->event_id;
  svc_pb_setstr(&ci->run_id, a->workflow_execution ? a->workflow_execution->run_id : "");
  return ci->run_id ? DBX_OK : DBX_ENOMEM;
}

static void activity_cancel_requested(RunState *rs, const HistoryEvent *ev) {
  ActivityInfo *ai = svc_activity_find(rs, ev->activity_task_cancel_requested_event_attributes->scheduled_event_id);
  if (ai == NULL) return;
  ai->cancel_requested = 1;
  ai->cancel_requested_event_id = ev->event_id;
}

static void wft_event(RunState *rs, const HistoryEvent *ev) {
  switch (ev->attributes_case) {
  case HEV(WORKFLOW_TASK_SCHEDULED):
    rs->wft_scheduled_event_id = ev->event_id;
    rs->wft_started_event_id = 0;
    rs->wft_scheduled_time_ns = event_time_ns(ev);
    break;
  case HEV(WORKFLOW_TASK_STARTED):
    rs->wft_started_event_id = ev->event_id;
    rs->wft_started_time_ns = event_time_ns(ev);
    break;
  case HEV(WORKFLOW_TASK_COMPLETED):
    rs->last_wft_started_event_id = ev->workflow_task_completed_event_attributes->started_event_id;
    rs->wft_scheduled_event_id = rs->wft_started_event_id = 0;
    break;
  default: /* failed, timed out */
    rs->wft_scheduled_event_id = rs->wft_started_event_id = 0;
    break;
  }
}

/* The run's close event: nothing is pending any more (queued tasks and
 * durable timers of the run go stale and are dropped when taken or fired);
 * children stay for the parent close policy. */
static void run_closed(RunState *rs, const HistoryEvent *ev, int status) {
  rs->status = status;
  rs->close_time_ns = event_time_ns(ev);
  rs->close_event_id = ev->event_id;
  for (size_t i = 0; i < rs->n_activities; i++) protobuf_c_message_free_unpacked(&rs->activities[i]->base, NULL);
  free(rs->activities);
  rs->activities = NULL;
  rs->n_activities = 0;
  for (size_t i = 0; i < rs->n_timers; i++) protobuf_c_message_free_unpacked(&rs->timers[i]->base, NULL);
  free(rs->timers);
  rs->timers = NULL;
  rs->n_timers = 0;
  rs->wft_scheduled_event_id = 0;
  rs->wft_started_event_id = 0;
}

/* The WorkflowExecutionStatus a close event ends the run with; 0 if ev does
 * not close the run. */
static int close_status(const HistoryEvent *ev) {
  switch (ev->attributes_case) {
  case HEV(WORKFLOW_EXECUTION_COMPLETED): return WS(COMPLETED);
  case HEV(WORKFLOW_EXECUTION_FAILED): return WS(FAILED);
  case HEV(WORKFLOW_EXECUTION_CANCELED): return WS(CANCELED);
  case HEV(WORKFLOW_EXECUTION_TERMINATED): return WS(TERMINATED);
  case HEV(WORKFLOW_EXECUTION_TIMED_OUT): return WS(TIMED_OUT);
  case HEV(WORKFLOW_EXECUTION_CONTINUED_AS_NEW): return WS(CONTINUED_AS_NEW);
  default: return 0;
  }
}

/* The initiated event id of a child event that ends the child's pendency. */
static int64_t child_ended(const HistoryEvent *ev) {
  switch (ev->attributes_case) {
  case HEV(START_CHILD_WORKFLOW_EXECUTION_FAILED):
    return ev->start_child_workflow_execution_failed_event_attributes->initiated_event_id;
  case HEV(CHILD_WORKFLOW_EXECUTION_COMPLETED):
    return ev->child_workflow_execution_completed_event_attributes->initiated_event_id;
  case HEV(CHILD_WORKFLOW_EXECUTION_FAILED):
    return ev->child_workflow_execution_failed_event_attributes->initiated_event_id;
  case HEV(CHILD_WORKFLOW_EXECUTION_CANCELED):
    return ev->child_workflow_execution_canceled_event_attributes->initiated_event_id;
  case HEV(CHILD_WORKFLOW_EXECUTION_TIMED_OUT):
    return ev->child_workflow_execution_timed_out_event_attributes->initiated_event_id;
  case HEV(CHILD_WORKFLOW_EXECUTION_TERMINATED):
    return ev->child_workflow_execution_terminated_event_attributes->initiated_event_id;
  default: return 0;
  }
}

/* The scheduled event id of an event that closes an activity. */
static int64_t activity_ended(const HistoryEvent *ev) {
  switch (ev->attributes_case) {
  case HEV(ACTIVITY_TASK_COMPLETED): return ev->activity_task_completed_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_FAILED): return ev->activity_task_failed_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_TIMED_OUT): return ev->activity_task_timed_out_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_CANCELED): return ev->activity_task_canceled_event_attributes->scheduled_event_id;
  default: return 0;
  }
}

dbx_err svc_state_apply_event(RunState *rs, const HistoryEvent *ev) {
  if (rs == NULL || ev == NULL) return DBX_EINVAL;
  switch (ev->attributes_case) {
  case HEV(ACTIVITY_TASK_SCHEDULED): return activity_scheduled(rs, ev);
  case HEV(ACTIVITY_TASK_CANCEL_REQUESTED): activity_cancel_requested(rs, ev); return DBX_OK;
  case HEV(TIMER_STARTED): return timer_started(rs, ev);
  case HEV(TIMER_FIRED): svc_timer_remove(rs, ev->timer_fired_event_attributes->timer_id); return DBX_OK;
  case HEV(TIMER_CANCELED): svc_timer_remove(rs, ev->timer_canceled_event_attributes->timer_id); return DBX_OK;
  case HEV(START_CHILD_WORKFLOW_EXECUTION_INITIATED): return child_initiated(rs, ev);
  case HEV(CHILD_WORKFLOW_EXECUTION_STARTED): return child_started(rs, ev);
  case HEV(WORKFLOW_EXECUTION_CANCEL_REQUESTED): rs->cancel_requested = 1; return DBX_OK;
  case HEV(WORKFLOW_EXECUTION_UPDATE_ACCEPTED):
  case HEV(WORKFLOW_EXECUTION_UPDATE_COMPLETED): return svc_update_apply_event(rs, ev);
  case HEV(WORKFLOW_TASK_SCHEDULED):
  case HEV(WORKFLOW_TASK_STARTED):
  case HEV(WORKFLOW_TASK_COMPLETED):
  case HEV(WORKFLOW_TASK_FAILED):
  case HEV(WORKFLOW_TASK_TIMED_OUT): wft_event(rs, ev); return DBX_OK;
  default: break;
  }
  int64_t activity = activity_ended(ev), child = child_ended(ev);
  int status = close_status(ev);
  if (activity != 0) svc_activity_remove(rs, activity);
  if (child != 0) svc_child_remove(rs, child);
  if (status != 0) run_closed(rs, ev, status);
  return DBX_OK;
}

dbx_err svc_state_fold(RunState *rs, HistoryEvent *const *evs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    dbx_err rc = svc_state_apply_event(rs, evs[i]);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}
