/* The activity state machine below the handlers: queueing an attempt,
 * retries in mutable state (no events), closing with ActivityTaskStarted
 * written when the activity closes (Temporal's rule). Used by activity_rpc.c
 * (worker results) and timers.c (timeouts, retry backoff). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

/* ActivityTaskStarted, written when the activity closes (Temporal's rule). */
static dbx_err write_activity_started(ectx *c, RunState *rs, ActivityInfo *ai, int64_t *started_id) {
  *started_id = 0;
  if (ai->started_time_ns == 0) return DBX_OK;
  HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_STARTED));
  if (ev == NULL) return DBX_ENOMEM;
  ActivityTaskStartedEventAttributes *a = ev->activity_task_started_event_attributes;
  a->scheduled_event_id = ai->scheduled_event_id;
  a->identity = svc_pb_strdup(ai->started_identity);
  a->request_id = svc_pb_strdup(ai->started_request_id);
  a->attempt = ai->attempt;
  a->last_failure = PB_CLONE(Failure, ai->last_failure);
  ev->event_time = svc_timestamp_new_ns(ai->started_time_ns);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  /* buffered events get their id when flushed; the close event refers to it
   * by position: the started event is always written just before */
  *started_id = rs->wft_started_event_id > 0 ? 0 : ev->event_id;
  svc_history_event_free(ev);
  return rc;
}

/* Close an activity: ActivityTaskStarted (if it started), then ev, whose
 * started_event_id field (*started_field) is filled here; the activity leaves
 * the run and a workflow task is scheduled. ev stays the caller's. */
dbx_err svc_activity_close(ectx *c, RunState *rs, ActivityInfo *ai, HistoryEvent *ev, int64_t *started_field) {
  int64_t sid = 0;
  dbx_err rc = write_activity_started(c, rs, ai, &sid);
  if (rc != DBX_OK) return rc;
  /* buffered: the started event gets (this event's id - 1) when flushed */
  *started_field = sid ? sid : (ai->started_time_ns ? -1 : 0);
  rc = svc_event_append(c, rs, ev, 1); /* removes (frees) ai: mutable.c */
  if (rc != DBX_OK) return rc;
  return svc_wft_schedule(c, rs);
}

dbx_err svc_activity_queue_attempt(ectx *c, RunState *rs, ActivityInfo *ai) {
  ai->queued = 1;
  ai->started_time_ns = 0;
  dbx_err rc = svc_task_enqueue(c, rs->namespace_, ai->task_queue, TASK_ACTIVITY, rs->workflow_id, rs->run_id,
                                ai->scheduled_event_id, ai->attempt);
  /* a schedule-to-close timeout of 0 is unlimited: the schedule-to-start one
   * then stands alone; else it is armed only when it would fire first */
  if (rc == DBX_OK && ai->schedule_to_start_ms > 0 &&
      (ai->schedule_to_close_ms == 0 || ai->schedule_to_start_ms < ai->schedule_to_close_ms))
    rc = svc_timer_add(c, c->now_ns + ai->schedule_to_start_ms * 1000000, TK_ACTIVITY_SCHEDULE_TO_START, rs,
                       ai->scheduled_event_id, ai->attempt, NULL);
  return rc;
}

/* The wait before the next attempt (ms), at most MAX_TIMEOUT_MS: a worker's
 * next_retry_delay is not checked where it arrives, and the caller adds the
 * result in ns to a clock reading. */
static int64_t retry_backoff_ms(const RetryPolicy *p, int attempt, const Failure *f) {
  if (f && f->failure_info_case == FI(APPLICATION_FAILURE_INFO) && f->application_failure_info->next_retry_delay) {
    int64_t d = dbx_pb_duration_ms(f->application_failure_info->next_retry_delay);
    if (d >= 0) return d > MAX_TIMEOUT_MS ? MAX_TIMEOUT_MS : d;
  }
  double ms = (double)dbx_pb_duration_ms(p ? p->initial_interval : NULL);
  if (ms <= 0) ms = 1000;
  double coeff = p && p->backoff_coefficient >= 1.0 ? p->backoff_coefficient : 2.0;
  double maxi = (double)dbx_pb_duration_ms(p ? p->maximum_interval : NULL);
  if (maxi <= 0) maxi = ms * 100;
  for (int i = 1; i < attempt && ms < maxi; i++) ms *= coeff;
  if (ms > maxi) ms = maxi;
  return ms > (double)MAX_TIMEOUT_MS ? MAX_TIMEOUT_MS : (int64_t)ms;
}

static int type_listed(const RetryPolicy *p, const char *type) {
  for (size_t i = 0; p && type && i < p->n_non_retryable_error_types; i++)
    if (strcmp(p->non_retryable_error_types[i], type) == 0) return 1;
  return 0;
}

dbx_err svc_activity_attempt_failed(ectx *c, RunState *rs, ActivityInfo *ai, Failure *failure, int timeout_type,
                                    Payloads *last_details) {
  int retry_state = RS(IN_PROGRESS);
  int retryable = 1;
  const char *timeout_names[] = {"", "StartToClose", "ScheduleToStart", "ScheduleToClose", "Heartbeat"};
  if (timeout_type) {
    char key[64];
    snprintf(key, sizeof key, "TemporalTimeout:%s", timeout_type <= 4 ? timeout_names[timeout_type] : "");
    if (timeout_type == TT(SCHEDULE_TO_START) || timeout_type == TT(SCHEDULE_TO_CLOSE) ||
        type_listed(ai->retry_policy, key)) {
      retryable = 0;
      retry_state = timeout_type == TT(SCHEDULE_TO_CLOSE) ? RS(TIMEOUT) : RS(NON_RETRYABLE_FAILURE);
    }
  } else if (failure && failure->failure_info_case == FI(APPLICATION_FAILURE_INFO)) {
    if (failure->application_failure_info->non_retryable || type_listed(ai->retry_policy, failure->application_failure_info->type)) {
      retryable = 0;
      retry_state = RS(NON_RETRYABLE_FAILURE);
    }
  } else if (failure && (failure->failure_info_case == FI(CANCELED_FAILURE_INFO) ||
                         failure->failure_info_case == FI(TERMINATED_FAILURE_INFO) ||
                         (failure->failure_info_case == FI(SERVER_FAILURE_INFO) &&
                          failure->server_failure_info->non_retryable))) {
    retryable = 0;
    retry_state = RS(NON_RETRYABLE_FAILURE);
  }
  int32_t max = ai->retry_policy ? ai->retry_policy->maximum_attempts : 0;
  if (retryable && max > 0 && ai->attempt >= max) {
    retryable = 0;
    retry_state = RS(MAXIMUM_ATTEMPTS_REACHED);
  }
  int64_t backoff = retryable ? retry_backoff_ms(ai->retry_policy, ai->attempt, failure) : 0;
  if (retryable && ai->schedule_to_close_ms > 0 &&
      c->now_ns + backoff * 1000000 >= ai->scheduled_time_ns + ai->schedule_to_close_ms * 1000000) {
    retryable = 0;
    retry_state = RS(TIMEOUT);
  }
  if (last_details) {
    Payloads *d = PB_CLONE(Payloads, last_details);
    if (d) {
      if (ai->heartbeat_details) protobuf_c_message_free_unpacked(&ai->heartbeat_details->base, NULL);
      ai->heartbeat_details = d;
    }
  }
  if (retryable) {
    /* a retry in mutable state: no events */
    if (ai->last_failure) protobuf_c_message_free_unpacked(&ai->last_failure->base, NULL);
    ai->last_failure = PB_CLONE(Failure, failure);
    ai->attempt++;
    ai->started_time_ns = 0;
    ai->queued = 0;
    ai->attempt_scheduled_time_ns = c->now_ns + backoff * 1000000;
    if (backoff <= 0) return svc_activity_queue_attempt(c, rs, ai);
    return svc_timer_add(c, ai->attempt_scheduled_time_ns, TK_ACTIVITY_RETRY, rs, ai->scheduled_event_id, ai->attempt, NULL);
  }
  HistoryEvent *ev;
  int64_t *started_field;
  if (timeout_type) {
    ev = svc_event_new(ET(ACTIVITY_TASK_TIMED_OUT));
    if (ev == NULL) return DBX_ENOMEM;
    ActivityTaskTimedOutEventAttributes *a = ev->activity_task_timed_out_event_attributes;
    a->scheduled_event_id = ai->scheduled_event_id;
    a->retry_state = retry_state;
    a->failure = failure ? PB_CLONE(Failure, failure) : NULL;
    started_field = &a->started_event_id;
  } else {
    ev = svc_event_new(ET(ACTIVITY_TASK_FAILED));
    if (ev == NULL) return DBX_ENOMEM;
    ActivityTaskFailedEventAttributes *a = ev->activity_task_failed_event_attributes;
    a->scheduled_event_id = ai->scheduled_event_id;
    a->identity = svc_pb_strdup(ai->started_identity);
    a->retry_state = retry_state;
    a->failure = PB_CLONE(Failure, failure);
    started_field = &a->started_event_id;
  }
  dbx_err rc = svc_activity_close(c, rs, ai, ev, started_field);
  svc_history_event_free(ev);
  return rc;
}
