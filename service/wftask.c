/* Workflow task completion: RespondWorkflowTaskCompleted (one function per
 * command kind) and RespondWorkflowTaskFailed. Events are written in
 * Temporal's order; events arriving while a task is started are buffered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

/* Load the run a workflow task token names and check the task is current. */
static dbx_err load_wft(ectx *c, job *j, ProtobufCBinaryData token, RunState **out) {
  *out = NULL;
  TaskToken *t = svc_token_decode(j, token, TASK_WORKFLOW);
  if (t == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(c, t->namespace_, t->workflow_id, t->run_id, &rs);
  if (rc == DBX_OK && (rs->status != WS(RUNNING) || rs->wft_scheduled_event_id != t->scheduled_event_id ||
                       rs->wft_started_event_id != t->started_event_id || rs->wft_attempt != t->attempt)) {
    svc_runstate_free(rs);
    rs = NULL;
    rc = DBX_ENOTFOUND;
  }
  if (rc == DBX_ENOTFOUND) {
    svc_fail_not_found(j, "workflow task not found: it timed out, was completed, or the run closed (workflow id %s, run id %s)",
                       t->workflow_id, t->run_id);
    rc = DBX_OK;
  }
  protobuf_c_message_free_unpacked(&t->base, NULL);
  *out = rs;
  return rc;
}

static void fill_retry_policy(RetryPolicy *p) {
  if (p->initial_interval == NULL || dbx_pb_duration_ms(p->initial_interval) <= 0) {
    /* the worker's Duration may carry unknown fields: free it whole */
    if (p->initial_interval) protobuf_c_message_free_unpacked(&p->initial_interval->base, NULL);
    p->initial_interval = svc_duration_new_ms(1000);
  }
  if (p->backoff_coefficient < 1.0) p->backoff_coefficient = 2.0;
  if (p->maximum_interval == NULL || dbx_pb_duration_ms(p->maximum_interval) <= 0) {
    if (p->maximum_interval) protobuf_c_message_free_unpacked(&p->maximum_interval->base, NULL);
    int64_t ii = dbx_pb_duration_ms(p->initial_interval); /* saturates at INT64_MAX / 2 */
    p->maximum_interval = svc_duration_new_ms(ii > MAX_TIMEOUT_MS ? ii : 100 * ii);
  }
}

/* What the commands of one completion share. */
typedef struct {
  int64_t completed_id; /* the WorkflowTaskCompleted event the commands refer to */
  const char *identity; /* the worker's, borrowed */
  int closed;           /* a command closed the run */
  int new_wft;          /* a command led to a non-command event: a new workflow task */
  ProtocolMessage **msgs; /* the completion's protocol messages (updates), borrowed */
  size_t n_msgs;
  unsigned char *msg_used; /* per message: referenced by a PROTOCOL_MESSAGE command */
} wft_cmd;

static dbx_err cmd_schedule_activity(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ScheduleActivityTaskCommandAttributes *a = cmd->schedule_activity_task_command_attributes;
  if (!svc_check_id(j, "ScheduleActivityTask.activity_id", a->activity_id)) return DBX_OK;
  if (!svc_check_id(j, "ScheduleActivityTask.activity_type.name", a->activity_type ? a->activity_type->name : NULL))
    return DBX_OK;
  if (a->task_queue && a->task_queue->name[0] &&
      !svc_check_keyed(j, "ScheduleActivityTask.task_queue.name", rs->namespace_, a->task_queue->name, 0))
    return DBX_OK;
  for (size_t i = 0; i < rs->n_activities; i++)
    if (strcmp(rs->activities[i]->activity_id, a->activity_id) == 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ScheduleActivityTask: activity id %s is already pending", a->activity_id);
      return DBX_OK;
    }
  int64_t s2c = dbx_pb_duration_ms(a->schedule_to_close_timeout), s2s = dbx_pb_duration_ms(a->schedule_to_start_timeout),
          st2c = dbx_pb_duration_ms(a->start_to_close_timeout), hb = dbx_pb_duration_ms(a->heartbeat_timeout);
  if (s2c < 0 || s2s < 0 || st2c < 0 || hb < 0) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ScheduleActivityTask %s: a timeout is negative", a->activity_id);
    return DBX_OK;
  }
  if (s2c > MAX_TIMEOUT_MS || s2s > MAX_TIMEOUT_MS || st2c > MAX_TIMEOUT_MS || hb > MAX_TIMEOUT_MS) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ScheduleActivityTask %s: a timeout is longer than 100 years",
                 a->activity_id);
    return DBX_OK;
  }
  if (s2c == 0 && st2c == 0) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
                 "ScheduleActivityTask %s: either schedule_to_close_timeout or start_to_close_timeout is required",
                 a->activity_id);
    return DBX_OK;
  }
  if (st2c == 0) st2c = s2c;
  if (s2c > 0 && st2c > s2c) st2c = s2c;
  if (s2s == 0 || (s2c > 0 && s2s > s2c)) s2s = s2c;
  if (hb > st2c) hb = st2c;
  ev = svc_event_new(ET(ACTIVITY_TASK_SCHEDULED));
  if (ev == NULL) return DBX_ENOMEM;
  ActivityTaskScheduledEventAttributes *e = ev->activity_task_scheduled_event_attributes;
  e->activity_id = svc_pb_strdup(a->activity_id);
  e->activity_type = PB_CLONE(ActivityType, a->activity_type);
  e->task_queue = svc_pb_new(&TaskQueue__D);
  if (e->task_queue) {
    e->task_queue->name = svc_pb_strdup(a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue);
    e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  }
  e->header = PB_CLONE(Header, a->header);
  e->input = PB_CLONE(Payloads, a->input);
  e->schedule_to_close_timeout = svc_duration_new_ms(s2c);
  e->schedule_to_start_timeout = svc_duration_new_ms(s2s);
  e->start_to_close_timeout = svc_duration_new_ms(st2c);
  e->heartbeat_timeout = svc_duration_new_ms(hb);
  e->workflow_task_completed_event_id = w->completed_id;
  e->retry_policy = a->retry_policy ? PB_CLONE(RetryPolicy, a->retry_policy) : svc_pb_new(&RetryPolicy__D);
  if (e->retry_policy == NULL || e->task_queue == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  fill_retry_policy(e->retry_policy);
  rc = svc_event_append(c, rs, ev, 0); /* the activity is pending from here (mutable.c) */
  if (rc != DBX_OK) goto out;
  ActivityInfo *ai = svc_activity_find(rs, ev->event_id);
  if (ai == NULL) {
    rc = DBX_ESTORE;
    goto out;
  }
  rc = svc_activity_queue_attempt(c, rs, ai);
  if (rc == DBX_OK && s2c > 0)
    rc = svc_timer_add(c, c->now_ns + s2c * 1000000, TK_ACTIVITY_SCHEDULE_TO_CLOSE, rs, ai->scheduled_event_id, 0, NULL);
out:
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_request_cancel_activity(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  int64_t sid = cmd->request_cancel_activity_task_command_attributes->scheduled_event_id;
  ActivityInfo *ai = svc_activity_find(rs, sid);
  if (ai == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RequestCancelActivityTask: no pending activity scheduled by event %lld",
                 (long long)sid);
    return DBX_OK;
  }
  ev = svc_event_new(ET(ACTIVITY_TASK_CANCEL_REQUESTED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->activity_task_cancel_requested_event_attributes->scheduled_event_id = sid;
  ev->activity_task_cancel_requested_event_attributes->workflow_task_completed_event_id = w->completed_id;
  rc = svc_event_append(c, rs, ev, 0);
  if (rc != DBX_OK) goto out;
  if (ai->started_time_ns == 0) {
    HistoryEvent *cev = svc_event_new(ET(ACTIVITY_TASK_CANCELED));
    if (cev == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    cev->activity_task_canceled_event_attributes->scheduled_event_id = sid;
    cev->activity_task_canceled_event_attributes->latest_cancel_requested_event_id = ev->event_id;
    cev->activity_task_canceled_event_attributes->identity = svc_pb_strdup(w->identity);
    rc = svc_event_append(c, rs, cev, 0); /* ends the activity */
    svc_history_event_free(cev);
    w->new_wft = 1;
  }
out:
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_start_timer(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  StartTimerCommandAttributes *a = cmd->start_timer_command_attributes;
  if (!svc_check_id(j, "StartTimer.timer_id", a->timer_id)) return DBX_OK;
  int64_t ms = dbx_pb_duration_ms(a->start_to_fire_timeout);
  if (ms <= 0 || ms > MAX_TIMEOUT_MS) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartTimer %s: start_to_fire_timeout must be positive and at most 100 years",
                 a->timer_id);
    return DBX_OK;
  }
  if (svc_timer_find(rs, a->timer_id)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartTimer: timer id %s is already pending", a->timer_id);
    return DBX_OK;
  }
  ev = svc_event_new(ET(TIMER_STARTED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->timer_started_event_attributes->timer_id = svc_pb_strdup(a->timer_id);
  ev->timer_started_event_attributes->start_to_fire_timeout = svc_duration_new_ms(ms);
  ev->timer_started_event_attributes->workflow_task_completed_event_id = w->completed_id;
  rc = svc_event_append(c, rs, ev, 0); /* the timer is pending from here (mutable.c) */
  if (rc != DBX_OK) goto out;
  TimerInfo *ti = svc_timer_find(rs, a->timer_id);
  if (ti == NULL) {
    rc = DBX_ESTORE;
    goto out;
  }
  rc = svc_timer_add(c, ti->fire_time_ns, TK_USER_TIMER, rs, ev->event_id, 0, a->timer_id);
out:
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_cancel_timer(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  const char *tid = cmd->cancel_timer_command_attributes->timer_id;
  TimerInfo *ti = svc_timer_find(rs, tid);
  if (ti == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "CancelTimer: no pending timer with id %s", tid);
    return DBX_OK;
  }
  ev = svc_event_new(ET(TIMER_CANCELED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->timer_canceled_event_attributes->timer_id = svc_pb_strdup(tid);
  ev->timer_canceled_event_attributes->started_event_id = ti->started_event_id;
  ev->timer_canceled_event_attributes->workflow_task_completed_event_id = w->completed_id;
  ev->timer_canceled_event_attributes->identity = svc_pb_strdup(w->identity);
  rc = svc_event_append(c, rs, ev, 0); /* ends the timer */
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_record_marker(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  RecordMarkerCommandAttributes *a = cmd->record_marker_command_attributes;
  if (!svc_check_id(j, "RecordMarker.marker_name", a->marker_name)) return DBX_OK;
  ev = svc_event_new(ET(MARKER_RECORDED));
  if (ev == NULL) return DBX_ENOMEM;
  MarkerRecordedEventAttributes *e = ev->marker_recorded_event_attributes;
  /* same field numbers for name/details in both messages: copy via bytes */
  RecordMarkerCommandAttributes tmp = *a;
  size_t n = protobuf_c_message_get_packed_size(&tmp.base);
  uint8_t *buf = dbx_malloc(n ? n : 1);
  if (buf == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  protobuf_c_message_pack(&tmp.base, buf);
  MarkerRecordedEventAttributes *copy =
      (MarkerRecordedEventAttributes *)dbx_pb_unpack(&MarkerRecordedEventAttributes__D, buf, n);
  free(buf);
  if (copy == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  /* field 3 of the command is header, of the event workflow_task_completed_event_id: fix up */
  protobuf_c_message_free_unpacked(&e->base, NULL);
  ev->marker_recorded_event_attributes = copy;
  copy->workflow_task_completed_event_id = w->completed_id;
  if (copy->header == NULL && a->header) copy->header = PB_CLONE(Header, a->header);
  if (copy->failure == NULL && a->failure) copy->failure = PB_CLONE(Failure, a->failure);
  rc = svc_event_append(c, rs, ev, 0);
out:
  svc_history_event_free(ev);
  return rc;
}

/* Upsert into a run's packed Memo / SearchAttributes (both one map<string,
 * Payload>, entries laid out alike): the keys named replace their values,
 * the others stay (Temporal: UpsertWorkflowSearchAttributes and
 * ModifyWorkflowProperties, as DescribeWorkflowExecution then shows them). */
typedef Temporal__Api__Common__V1__Memo__FieldsEntry map_entry;

/* An upserted value that removes its key, as Temporal's merge: no payload,
 * empty data, JSON null or an empty JSON list. */
static int payload_is_removal(const Payload *p) {
  if (p == NULL || p->data.len == 0) return 1;
  return (p->data.len == 4 && memcmp(p->data.data, "null", 4) == 0) ||
         (p->data.len == 2 && memcmp(p->data.data, "[]", 2) == 0);
}
static dbx_err upsert_packed_map(ProtobufCBinaryData *dst, const ProtobufCMessageDescriptor *d,
                                 map_entry **upd, size_t n_upd) {
  Memo *cur = dst->len ? (Memo *)protobuf_c_message_unpack(d, NULL, dst->len, dst->data) : NULL;
  size_t n_cur = cur ? cur->n_fields : 0, n = 0;
  map_entry **all = calloc(n_cur + n_upd + 1, sizeof *all);
  dbx_err rc = DBX_ENOMEM;
  if (all == NULL || (dst->len && cur == NULL)) goto out;
  for (size_t i = 0; i < n_cur; i++) {
    int replaced = 0;
    for (size_t k = 0; k < n_upd; k++) replaced |= strcmp(cur->fields[i]->key, upd[k]->key) == 0;
    if (!replaced) all[n++] = cur->fields[i];
  }
  for (size_t k = 0; k < n_upd; k++)
    if (!payload_is_removal(upd[k]->value)) all[n++] = upd[k];
  Memo m = INIT(TEMPORAL__API__COMMON__V1__MEMO);
  m.base.descriptor = d; /* SearchAttributes: indexed_fields is the same one field */
  m.n_fields = n;
  m.fields = all;
  size_t len = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = malloc(len ? len : 1);
  if (buf == NULL) goto out;
  protobuf_c_message_pack(&m.base, buf);
  free(dst->data);
  dst->data = buf;
  dst->len = len;
  rc = DBX_OK;
out:
  free(all);
  if (cur) protobuf_c_message_free_unpacked(&cur->base, NULL);
  return rc;
}

static dbx_err cmd_upsert_search_attributes(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  if (!svc_sa_check(c, j, rs->namespace_, cmd->upsert_workflow_search_attributes_command_attributes->search_attributes,
                    &rc))
    return rc; /* refused (UpsertWorkflowSearchAttributes names an undefined attribute), or a store error */
  ev = svc_event_new(ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES));
  if (ev == NULL) return DBX_ENOMEM;
  ev->upsert_workflow_search_attributes_event_attributes->workflow_task_completed_event_id = w->completed_id;
  ev->upsert_workflow_search_attributes_event_attributes->search_attributes =
      PB_CLONE(SearchAttributes, cmd->upsert_workflow_search_attributes_command_attributes->search_attributes);
  rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev);
  const SearchAttributes *usa = cmd->upsert_workflow_search_attributes_command_attributes->search_attributes;
  if (rc == DBX_OK && usa)
    rc = upsert_packed_map(&rs->search_attributes, &SearchAttributes__D, (map_entry **)usa->indexed_fields,
                           usa->n_indexed_fields);
  return rc;
}

static dbx_err cmd_modify_properties(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ev = svc_event_new(ET(WORKFLOW_PROPERTIES_MODIFIED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_properties_modified_event_attributes->workflow_task_completed_event_id = w->completed_id;
  ev->workflow_properties_modified_event_attributes->upserted_memo =
      PB_CLONE(Memo, cmd->modify_workflow_properties_command_attributes->upserted_memo);
  rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev);
  const Memo *um = cmd->modify_workflow_properties_command_attributes->upserted_memo;
  if (rc == DBX_OK && um) rc = upsert_packed_map(&rs->memo, &Memo__D, um->fields, um->n_fields);
  return rc;
}

static dbx_err cmd_complete(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_COMPLETED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_completed_event_attributes->result =
      PB_CLONE(Payloads, cmd->complete_workflow_execution_command_attributes->result);
  ev->workflow_execution_completed_event_attributes->workflow_task_completed_event_id = w->completed_id;
  rc = svc_run_close(c, rs, ev, WS(COMPLETED));
  w->closed = 1;
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_fail(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_FAILED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_failed_event_attributes->failure =
      PB_CLONE(Failure, cmd->fail_workflow_execution_command_attributes->failure);
  ev->workflow_execution_failed_event_attributes->retry_state = RS(RETRY_POLICY_NOT_SET);
  ev->workflow_execution_failed_event_attributes->workflow_task_completed_event_id = w->completed_id;
  rc = svc_run_close(c, rs, ev, WS(FAILED));
  w->closed = 1;
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_cancel(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_CANCELED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_canceled_event_attributes->details =
      PB_CLONE(Payloads, cmd->cancel_workflow_execution_command_attributes->details);
  ev->workflow_execution_canceled_event_attributes->workflow_task_completed_event_id = w->completed_id;
  rc = svc_run_close(c, rs, ev, WS(CANCELED));
  w->closed = 1;
  svc_history_event_free(ev);
  return rc;
}

/* Continue-as-new without memo / search attributes keeps the run's current
 * ones (as Temporal: the new run starts with what the old one had, upserts
 * included). NULL when the run has none; marked on OOM. */
static void *carried(const ProtobufCBinaryData *packed, const ProtobufCMessageDescriptor *d) {
  void *m = NULL;
  if (packed->len) svc_pb_unpack(d, packed->data, packed->len, &m);
  return m;
}

static dbx_err cmd_continue_as_new(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  ContinueAsNewWorkflowExecutionCommandAttributes *a = cmd->continue_as_new_workflow_execution_command_attributes;
  if (!svc_sa_check(c, j, rs->namespace_, a->search_attributes, &rc)) return rc;
  if (a->task_queue && a->task_queue->name[0] &&
      !svc_check_keyed(j, "ContinueAsNewWorkflowExecution.task_queue.name", rs->namespace_, a->task_queue->name, 0))
    return DBX_OK;
  char *new_run = svc_new_uuid();
  ev = svc_event_new(ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
  HistoryEvent *sev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
  if (new_run == NULL || ev == NULL || sev == NULL) {
    free(new_run);
    svc_history_event_free(sev);
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowExecutionContinuedAsNewEventAttributes *e = ev->workflow_execution_continued_as_new_event_attributes;
  e->new_execution_run_id = svc_pb_strdup(new_run);
  e->workflow_type = svc_pb_new(&WorkflowType__D);
  e->task_queue = svc_pb_new(&TaskQueue__D);
  if (e->workflow_type) e->workflow_type->name = svc_pb_strdup(a->workflow_type && a->workflow_type->name[0] ? a->workflow_type->name : rs->workflow_type);
  if (e->task_queue) {
    e->task_queue->name = svc_pb_strdup(a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue);
    e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  }
  e->input = PB_CLONE(Payloads, a->input);
  e->workflow_run_timeout = a->workflow_run_timeout ? PB_CLONE(Duration, a->workflow_run_timeout) : svc_duration_new_ms(rs->run_timeout_ms);
  e->workflow_task_timeout = a->workflow_task_timeout ? PB_CLONE(Duration, a->workflow_task_timeout) : svc_duration_new_ms(rs->task_timeout_ms);
  e->workflow_task_completed_event_id = w->completed_id;
  e->backoff_start_interval = PB_CLONE(Duration, a->backoff_start_interval);
  e->initiator = a->initiator;
  e->header = PB_CLONE(Header, a->header);
  e->memo = PB_CLONE(Memo, a->memo);
  e->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
  e->last_completion_result = PB_CLONE(Payloads, a->last_completion_result);
  e->failure = PB_CLONE(Failure, a->failure);
  svc_pb_setstr(&rs->new_execution_run_id, new_run);
  rc = svc_run_close(c, rs, ev, WS(CONTINUED_AS_NEW));
  if (rc == DBX_OK) {
    WorkflowExecutionStartedEventAttributes *st = sev->workflow_execution_started_event_attributes;
    st->workflow_type = PB_CLONE(WorkflowType, e->workflow_type);
    st->task_queue = PB_CLONE(TaskQueue, e->task_queue);
    st->input = PB_CLONE(Payloads, a->input);
    st->workflow_run_timeout = rs->run_timeout_ms > 0 || a->workflow_run_timeout ? PB_CLONE(Duration, e->workflow_run_timeout) : NULL;
    st->workflow_task_timeout = PB_CLONE(Duration, e->workflow_task_timeout);
    st->workflow_execution_timeout = rs->execution_timeout_ms > 0 ? svc_duration_new_ms(rs->execution_timeout_ms) : NULL;
    st->continued_execution_run_id = svc_pb_strdup(rs->run_id);
    st->initiator = a->initiator;
    st->continued_failure = PB_CLONE(Failure, a->failure);
    st->last_completion_result = PB_CLONE(Payloads, a->last_completion_result);
    st->identity = svc_pb_strdup(w->identity);
    st->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
    st->attempt = 1;
    st->first_workflow_task_backoff = PB_CLONE(Duration, a->backoff_start_interval);
    st->memo = a->memo ? PB_CLONE(Memo, a->memo) : carried(&rs->memo, &Memo__D);
    st->search_attributes = a->search_attributes ? PB_CLONE(SearchAttributes, a->search_attributes)
                                                 : carried(&rs->search_attributes, &SearchAttributes__D);
    st->header = PB_CLONE(Header, a->header);
    if (rs->parent && rs->parent->workflow_id[0]) {
      st->parent_workflow_namespace = svc_pb_strdup(rs->parent->namespace_);
      st->parent_workflow_execution = svc_we_new(rs->parent->workflow_id, rs->parent->run_id);
      st->parent_initiated_event_id = rs->parent->initiated_event_id;
    }
    run_start_args ra = {.ns = rs->namespace_,
                         .workflow_id = rs->workflow_id,
                         .run_id = new_run,
                         .request_id = "",
                         .started = st,
                         .parent = rs->parent,
                         .execution_expiration_ns = rs->execution_expiration_ns,
                         .first_run_id = rs->first_run_id};
    RunState *nrs = NULL;
    rc = svc_run_start(c, &ra, &nrs);
    svc_runstate_free(nrs);
  }
  svc_history_event_free(sev);
  free(new_run);
  w->closed = 1;
out:
  svc_history_event_free(ev);
  return rc;
}

/* Start the child run a StartChildWorkflowExecution command initiated (event
 * initiated) and write ChildWorkflowExecutionStarted. a and tq are borrowed. */
static dbx_err child_start(ectx *c, RunState *rs, const StartChildWorkflowExecutionCommandAttributes *a,
                           const char *cns, const TaskQueue *tq, int64_t initiated, const char *identity) {
  dbx_err rc;
  char *child_run = svc_new_uuid();
  HistoryEvent *sev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
  if (child_run == NULL || sev == NULL) {
    free(child_run);
    svc_history_event_free(sev);
    return DBX_ENOMEM;
  }
  WorkflowExecutionStartedEventAttributes *st = sev->workflow_execution_started_event_attributes;
  st->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
  st->task_queue = PB_CLONE(TaskQueue, tq);
  st->input = PB_CLONE(Payloads, a->input);
  st->workflow_execution_timeout = PB_CLONE(Duration, a->workflow_execution_timeout);
  st->workflow_run_timeout = PB_CLONE(Duration, a->workflow_run_timeout);
  st->workflow_task_timeout = PB_CLONE(Duration, a->workflow_task_timeout);
  st->parent_workflow_namespace = svc_pb_strdup(rs->namespace_);
  st->parent_workflow_execution = svc_we_new(rs->workflow_id, rs->run_id);
  st->parent_initiated_event_id = initiated;
  st->identity = svc_pb_strdup(identity);
  st->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
  st->attempt = 1;
  st->memo = PB_CLONE(Memo, a->memo);
  st->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
  st->header = PB_CLONE(Header, a->header);
  ParentInfo pi = INIT(DURABOX__SERVICE__V1__PARENT_INFO);
  pi.namespace_ = rs->namespace_;
  pi.workflow_id = rs->workflow_id;
  pi.run_id = rs->run_id;
  pi.initiated_event_id = initiated;
  run_start_args ra = {.ns = cns, .workflow_id = a->workflow_id, .run_id = child_run, .request_id = "",
                       .started = st, .parent = &pi};
  RunState *crs = NULL;
  rc = svc_run_start(c, &ra, &crs);
  svc_runstate_free(crs);
  svc_history_event_free(sev);
  if (rc != DBX_OK) {
    free(child_run);
    return rc;
  }
  HistoryEvent *cev = svc_event_new(ET(CHILD_WORKFLOW_EXECUTION_STARTED));
  if (cev == NULL) {
    free(child_run);
    return DBX_ENOMEM;
  }
  ChildWorkflowExecutionStartedEventAttributes *ce = cev->child_workflow_execution_started_event_attributes;
  ce->namespace_ = svc_pb_strdup(cns);
  ce->initiated_event_id = initiated;
  ce->workflow_execution = svc_we_new(a->workflow_id, child_run);
  ce->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
  ce->header = PB_CLONE(Header, a->header);
  rc = svc_event_append(c, rs, cev, 0); /* the pending child gets its run id (mutable.c) */
  svc_history_event_free(cev);
  free(child_run);
  return rc;
}

static dbx_err cmd_start_child(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  StartChildWorkflowExecutionCommandAttributes *a = cmd->start_child_workflow_execution_command_attributes;
  const char *cns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
  if (!svc_ns_known(c->svc, cns)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartChildWorkflowExecution: namespace %s is not registered", cns);
    return DBX_OK;
  }
  if (!svc_check_keyed(j, "StartChildWorkflowExecution.workflow_id", cns, a->workflow_id, 0)) return DBX_OK;
  if (!svc_check_id(j, "StartChildWorkflowExecution.workflow_type.name", a->workflow_type ? a->workflow_type->name : NULL))
    return DBX_OK;
  if (!svc_sa_check(c, j, cns, a->search_attributes, &rc)) return rc;
  const char *ctq = a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue;
  if (!svc_check_keyed(j, "StartChildWorkflowExecution.task_queue.name", cns, ctq, 0)) return DBX_OK;
  ev = svc_event_new(ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED));
  if (ev == NULL) return DBX_ENOMEM;
  StartChildWorkflowExecutionInitiatedEventAttributes *e = ev->start_child_workflow_execution_initiated_event_attributes;
  e->namespace_ = svc_pb_strdup(cns);
  e->workflow_id = svc_pb_strdup(a->workflow_id);
  e->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
  e->task_queue = svc_pb_new(&TaskQueue__D);
  if (e->task_queue) {
    e->task_queue->name = svc_pb_strdup(ctq);
    e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  }
  e->input = PB_CLONE(Payloads, a->input);
  e->workflow_execution_timeout = PB_CLONE(Duration, a->workflow_execution_timeout);
  e->workflow_run_timeout = PB_CLONE(Duration, a->workflow_run_timeout);
  e->workflow_task_timeout = PB_CLONE(Duration, a->workflow_task_timeout);
  e->parent_close_policy = a->parent_close_policy;
  e->control = svc_pb_strdup(a->control);
  e->workflow_task_completed_event_id = w->completed_id;
  e->workflow_id_reuse_policy = a->workflow_id_reuse_policy;
  e->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
  e->cron_schedule = svc_pb_strdup(a->cron_schedule);
  e->header = PB_CLONE(Header, a->header);
  e->memo = PB_CLONE(Memo, a->memo);
  e->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
  rc = svc_event_append(c, rs, ev, 0);
  if (rc != DBX_OK) goto out;
  int64_t initiated = ev->event_id;
  w->new_wft = 1;
  /* start it now (Temporal does this right after the command) */
  char *cur = NULL;
  RunState *existing = NULL;
  rc = svc_current_run_id(c, cns, a->workflow_id, &cur);
  if (rc == DBX_OK) {
    rc = svc_run_load(c, cns, a->workflow_id, cur, &existing);
    free(cur);
    if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  } else if (rc == DBX_ENOTFOUND) {
    rc = DBX_OK;
  }
  if (rc != DBX_OK) goto out;
  if (existing && (existing->status == WS(RUNNING) || strcmp(existing->workflow_id, rs->workflow_id) == 0)) {
    svc_runstate_free(existing);
    HistoryEvent *fev = svc_event_new(ET(START_CHILD_WORKFLOW_EXECUTION_FAILED));
    if (fev == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    StartChildWorkflowExecutionFailedEventAttributes *f = fev->start_child_workflow_execution_failed_event_attributes;
    f->namespace_ = svc_pb_strdup(cns);
    f->workflow_id = svc_pb_strdup(a->workflow_id);
    f->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
    f->cause = TEMPORAL__API__ENUMS__V1__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE_WORKFLOW_ALREADY_EXISTS;
    f->control = svc_pb_strdup(a->control);
    f->initiated_event_id = initiated;
    f->workflow_task_completed_event_id = w->completed_id;
    rc = svc_event_append(c, rs, fev, 0);
    svc_history_event_free(fev);
    goto out;
  }
  svc_runstate_free(existing);
  rc = child_start(c, rs, a, cns, e->task_queue, initiated, w->identity);
out:
  svc_history_event_free(ev);
  return rc;
}

static dbx_err cmd_external(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  int is_signal = cmd->attributes_case == CMD(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION);
  const char *tns, *twf, *trun, *control;
  if (is_signal) {
    SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
    tns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
    twf = a->execution ? a->execution->workflow_id : "";
    trun = a->execution ? a->execution->run_id : "";
    control = a->control;
  } else {
    RequestCancelExternalWorkflowExecutionCommandAttributes *a =
        cmd->request_cancel_external_workflow_execution_command_attributes;
    tns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
    twf = a->workflow_id;
    trun = a->run_id;
    control = a->control;
  }
  if (!svc_check_id(j, "workflow_id of the external workflow", twf)) return DBX_OK;
  ev = svc_event_new(is_signal ? ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
                           : ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED));
  if (ev == NULL) return DBX_ENOMEM;
  if (is_signal) {
    SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
    SignalExternalWorkflowExecutionInitiatedEventAttributes *e = ev->signal_external_workflow_execution_initiated_event_attributes;
    e->workflow_task_completed_event_id = w->completed_id;
    e->namespace_ = svc_pb_strdup(tns);
    e->workflow_execution = svc_we_new(twf, trun);
    e->signal_name = svc_pb_strdup(a->signal_name);
    e->input = PB_CLONE(Payloads, a->input);
    e->control = svc_pb_strdup(control);
    e->child_workflow_only = a->child_workflow_only;
    e->header = PB_CLONE(Header, a->header);
  } else {
    RequestCancelExternalWorkflowExecutionInitiatedEventAttributes *e =
        ev->request_cancel_external_workflow_execution_initiated_event_attributes;
    e->workflow_task_completed_event_id = w->completed_id;
    e->namespace_ = svc_pb_strdup(tns);
    e->workflow_execution = svc_we_new(twf, trun);
    e->control = svc_pb_strdup(control);
    e->reason = svc_pb_strdup(cmd->request_cancel_external_workflow_execution_command_attributes->reason);
  }
  rc = svc_event_append(c, rs, ev, 0);
  if (rc != DBX_OK) goto out;
  int64_t initiated = ev->event_id;
  w->new_wft = 1;
  /* deliver */
  RunState *target = NULL;
  int self = strcmp(tns, rs->namespace_) == 0 && strcmp(twf, rs->workflow_id) == 0 &&
             (trun[0] == '\0' || strcmp(trun, rs->run_id) == 0);
  char *cur = NULL;
  if (!self) {
    if (trun[0]) {
      rc = svc_run_load(c, tns, twf, trun, &target);
    } else {
      rc = svc_current_run_id(c, tns, twf, &cur);
      if (rc == DBX_OK) rc = svc_run_load(c, tns, twf, cur, &target);
      free(cur);
    }
    if (rc == DBX_ENOTFOUND) rc = DBX_OK;
    if (rc != DBX_OK) goto out;
  }
  RunState *t = self ? rs : target;
  int ok = t && t->status == WS(RUNNING);
  if (ok) {
    if (is_signal) {
      SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
      rc = svc_run_signal(c, t, a->signal_name, a->input, w->identity, a->header, "");
    } else {
      rc = svc_run_request_cancel(c, t, w->identity,
                                  cmd->request_cancel_external_workflow_execution_command_attributes->reason);
    }
    if (rc == DBX_OK && !self) rc = svc_run_save(c, t);
  }
  svc_runstate_free(target);
  if (rc != DBX_OK) goto out;
  HistoryEvent *r = NULL;
  if (ok && is_signal) {
    r = svc_event_new(ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED));
    if (r) {
      r->external_workflow_execution_signaled_event_attributes->initiated_event_id = initiated;
      r->external_workflow_execution_signaled_event_attributes->namespace_ = svc_pb_strdup(tns);
      r->external_workflow_execution_signaled_event_attributes->workflow_execution = svc_we_new(twf, trun);
      r->external_workflow_execution_signaled_event_attributes->control = svc_pb_strdup(control);
    }
  } else if (ok) {
    r = svc_event_new(ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED));
    if (r) {
      r->external_workflow_execution_cancel_requested_event_attributes->initiated_event_id = initiated;
      r->external_workflow_execution_cancel_requested_event_attributes->namespace_ = svc_pb_strdup(tns);
      r->external_workflow_execution_cancel_requested_event_attributes->workflow_execution = svc_we_new(twf, trun);
    }
  } else if (is_signal) {
    r = svc_event_new(ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED));
    if (r) {
      SignalExternalWorkflowExecutionFailedEventAttributes *f = r->signal_external_workflow_execution_failed_event_attributes;
      f->cause = TEMPORAL__API__ENUMS__V1__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND;
      f->workflow_task_completed_event_id = w->completed_id;
      f->namespace_ = svc_pb_strdup(tns);
      f->workflow_execution = svc_we_new(twf, trun);
      f->initiated_event_id = initiated;
      f->control = svc_pb_strdup(control);
    }
  } else {
    r = svc_event_new(ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED));
    if (r) {
      RequestCancelExternalWorkflowExecutionFailedEventAttributes *f =
          r->request_cancel_external_workflow_execution_failed_event_attributes;
      f->cause = TEMPORAL__API__ENUMS__V1__CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE__CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND;
      f->workflow_task_completed_event_id = w->completed_id;
      f->namespace_ = svc_pb_strdup(tns);
      f->workflow_execution = svc_we_new(twf, trun);
      f->initiated_event_id = initiated;
      f->control = svc_pb_strdup(control);
    }
  }
  if (r == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  rc = svc_event_append(c, rs, r, 0);
  svc_history_event_free(r);
out:
  svc_history_event_free(ev);
  return rc;
}

/* PROTOCOL_MESSAGE: the message it names, applied here, in command order. */
static dbx_err cmd_protocol_message(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  const char *id = cmd->protocol_message_command_attributes->message_id;
  for (size_t i = 0; i < w->n_msgs; i++)
    if (w->msgs[i]->id && strcmp(w->msgs[i]->id, id) == 0) return svc_update_message_apply(c, j, rs, w->msgs[i]);
  svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ProtocolMessage: no message with id %s in the completion", id);
  return DBX_OK;
}

/* Mark the messages PROTOCOL_MESSAGE commands name; apply the others (a
 * rejection has no command) before the commands. */
static dbx_err apply_unreferenced_messages(ectx *c, job *j, RunState *rs, Command **cmds, size_t n_cmds, wft_cmd *w) {
  if (w->n_msgs == 0) return DBX_OK;
  w->msg_used = dbx_calloc(w->n_msgs, 1);
  if (w->msg_used == NULL) return DBX_ENOMEM;
  for (size_t k = 0; k < n_cmds; k++) {
    if (cmds[k]->attributes_case != CMD(PROTOCOL_MESSAGE)) continue;
    for (size_t i = 0; i < w->n_msgs; i++)
      if (w->msgs[i]->id && strcmp(w->msgs[i]->id, cmds[k]->protocol_message_command_attributes->message_id) == 0)
        w->msg_used[i] = 1;
  }
  for (size_t i = 0; i < w->n_msgs; i++) {
    if (w->msg_used[i]) continue;
    dbx_err rc = svc_update_message_apply(c, j, rs, w->msgs[i]);
    if (rc != DBX_OK || j->status != DBX_GRPC_OK) return rc;
  }
  return DBX_OK;
}

/* One command: the function for its kind. w->closed is set when the run
 * closed, w->new_wft when the command led to a non-command event (a new
 * workflow task is needed). Sets the job status on a bad command. */
static dbx_err apply_command(ectx *c, job *j, RunState *rs, Command *cmd, wft_cmd *w) {
  switch (cmd->attributes_case) {
  case CMD(SCHEDULE_ACTIVITY_TASK): return cmd_schedule_activity(c, j, rs, cmd, w);
  case CMD(REQUEST_CANCEL_ACTIVITY_TASK): return cmd_request_cancel_activity(c, j, rs, cmd, w);
  case CMD(START_TIMER): return cmd_start_timer(c, j, rs, cmd, w);
  case CMD(CANCEL_TIMER): return cmd_cancel_timer(c, j, rs, cmd, w);
  case CMD(RECORD_MARKER): return cmd_record_marker(c, j, rs, cmd, w);
  case CMD(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES): return cmd_upsert_search_attributes(c, j, rs, cmd, w);
  case CMD(MODIFY_WORKFLOW_PROPERTIES): return cmd_modify_properties(c, j, rs, cmd, w);
  case CMD(COMPLETE_WORKFLOW_EXECUTION): return cmd_complete(c, j, rs, cmd, w);
  case CMD(FAIL_WORKFLOW_EXECUTION): return cmd_fail(c, j, rs, cmd, w);
  case CMD(CANCEL_WORKFLOW_EXECUTION): return cmd_cancel(c, j, rs, cmd, w);
  case CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION): return cmd_continue_as_new(c, j, rs, cmd, w);
  case CMD(START_CHILD_WORKFLOW_EXECUTION): return cmd_start_child(c, j, rs, cmd, w);
  case CMD(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION): return cmd_external(c, j, rs, cmd, w);
  case CMD(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION): return cmd_external(c, j, rs, cmd, w);
  case CMD(PROTOCOL_MESSAGE): return cmd_protocol_message(c, j, rs, cmd, w);
  default:
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RespondWorkflowTaskCompleted: command type %d is not supported by this service",
                 (int)cmd->command_type);
    return DBX_OK;
  }
}

static int is_close_command(const Command *cmd) {
  return cmd->attributes_case == CMD(COMPLETE_WORKFLOW_EXECUTION) || cmd->attributes_case == CMD(FAIL_WORKFLOW_EXECUTION) ||
         cmd->attributes_case == CMD(CANCEL_WORKFLOW_EXECUTION) ||
         cmd->attributes_case == CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
}

/* Queries wait while their run has a started workflow task; when the task
 * ends, wake the queue's pollers so a waiting query goes out. */
static void wake_for_queries(ectx *c, RunState *rs) {
  for (query *qq = c->svc->queries; qq; qq = qq->next) {
    if (qq->dispatched || strcmp(qq->workflow_id, rs->workflow_id) != 0 || strcmp(qq->run_id, rs->run_id) != 0) continue;
    note *n = svc_note_new(c, NOTE_QUEUE);
    if (n) n->key = svc_queue_key(rs->namespace_, qq->task_queue, TASK_WORKFLOW, &n->len);
    return;
  }
}

/* End the started workflow task with a WorkflowTaskFailed event and schedule
 * the next attempt. */
static dbx_err wft_fail(ectx *c, RunState *rs, int cause, Failure *failure, const char *identity) {
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_FAILED));
  if (ev == NULL) return DBX_ENOMEM;
  WorkflowTaskFailedEventAttributes *a = ev->workflow_task_failed_event_attributes;
  a->scheduled_event_id = rs->wft_scheduled_event_id;
  a->started_event_id = rs->wft_started_event_id;
  a->cause = cause;
  a->failure = PB_CLONE(Failure, failure);
  a->identity = svc_pb_strdup(identity);
  rs->wft_started_event_id = 0;
  dbx_err rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev); /* the event ended the task */
  if (!svc_sticky_clear(rs)) rs->wft_attempt++; /* Temporal: a sticky task is retried once on the normal queue */
  int flushed = 0;
  if (rc == DBX_OK) rc = svc_events_flush_buffer(c, rs, &flushed);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  wake_for_queries(c, rs);
  return rc;
}

/* The size of the payload blob a command carries, for the size check, and
 * its cause when refused (Temporal's BAD_*_ATTRIBUTES) with Temporal's
 * message; 0 when the command kind carries none. */
static size_t packed(const void *m) { return m ? protobuf_c_message_get_packed_size(m) : 0; }
static int command_blob(const Command *cmd, size_t *size, const char **msg) {
#define BLOB(kind, attr, field, cause, text)  \
  case CMD(kind):                            \
    *size = packed(cmd->attr->field);         \
    *msg = text;                              \
    return WFC(cause)
  switch (cmd->attributes_case) {
    BLOB(SCHEDULE_ACTIVITY_TASK, schedule_activity_task_command_attributes, input, BAD_SCHEDULE_ACTIVITY_ATTRIBUTES,
         "BadScheduleActivityAttributes: ScheduleActivityTaskCommandAttributes.Input exceeds size limit.");
    BLOB(COMPLETE_WORKFLOW_EXECUTION, complete_workflow_execution_command_attributes, result,
         BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES, "BadCompleteWorkflowExecutionAttributes: CompleteWorkflowExecutionCommandAttributes.Result exceeds size limit.");
    BLOB(FAIL_WORKFLOW_EXECUTION, fail_workflow_execution_command_attributes, failure,
         BAD_FAIL_WORKFLOW_EXECUTION_ATTRIBUTES, "BadFailWorkflowExecutionAttributes: FailWorkflowExecutionCommandAttributes.Failure exceeds size limit.");
    BLOB(CANCEL_WORKFLOW_EXECUTION, cancel_workflow_execution_command_attributes, details,
         BAD_CANCEL_WORKFLOW_EXECUTION_ATTRIBUTES, "BadCancelWorkflowExecutionAttributes: CancelWorkflowExecutionCommandAttributes.Details exceeds size limit.");
    BLOB(CONTINUE_AS_NEW_WORKFLOW_EXECUTION, continue_as_new_workflow_execution_command_attributes, input,
         BAD_CONTINUE_AS_NEW_ATTRIBUTES, "BadContinueAsNewAttributes: ContinueAsNewWorkflowExecutionCommandAttributes.Input exceeds size limit.");
    BLOB(START_CHILD_WORKFLOW_EXECUTION, start_child_workflow_execution_command_attributes, input,
         BAD_START_CHILD_EXECUTION_ATTRIBUTES, "BadStartChildExecutionAttributes: StartChildWorkflowExecutionCommandAttributes.Input exceeds size limit.");
    BLOB(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION, signal_external_workflow_execution_command_attributes, input,
         BAD_SIGNAL_WORKFLOW_EXECUTION_ATTRIBUTES, "BadSignalWorkflowExecutionAttributes: SignalExternalWorkflowExecutionCommandAttributes.Input exceeds size limit.");
    BLOB(MODIFY_WORKFLOW_PROPERTIES, modify_workflow_properties_command_attributes, upserted_memo,
         BAD_MODIFY_WORKFLOW_PROPERTIES_ATTRIBUTES, "BadModifyWorkflowPropertiesAttributes: ModifyWorkflowPropertiesCommandAttributes.UpsertedMemo exceeds size limit.");
  case CMD(RECORD_MARKER): { /* the details map, its values together */
    const RecordMarkerCommandAttributes *a = cmd->record_marker_command_attributes;
    *size = 0;
    for (size_t i = 0; i < a->n_details; i++) *size += packed(a->details[i]->value);
    *msg = "BadRecordMarkerAttributes: RecordMarkerCommandAttributes.Details exceeds size limit.";
    return WFC(BAD_RECORD_MARKER_ATTRIBUTES);
  }
  default:
    *size = 0;
    *msg = "";
    return 0;
  }
#undef BLOB
}

/* A command's payload over the blob size limit ends the run as Temporal's
 * server does: WorkflowTaskFailed with the command's cause and message (a
 * ServerFailure), then WorkflowExecutionTerminated with the message as its
 * reason (identity "history-service"), and INVALID_ARGUMENT to the worker
 * (what was written stays). Nothing of the completion is applied. 1 when
 * it did so. */
static int refuse_big_commands(ectx *c, job *j, RunState *rs, const RespondWorkflowTaskCompletedRequest *q,
                               dbx_err *rc) {
  for (size_t i = 0; i < q->n_commands; i++) {
    size_t size = 0;
    const char *msg = NULL;
    int cause = command_blob(q->commands[i], &size, &msg);
    if (cause == 0 || !svc_blob_size_over(c, (int64_t)size, "a command's payload", rs->workflow_id)) continue;
    Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
    ServerFailureInfo si = INIT(TEMPORAL__API__FAILURE__V1__SERVER_FAILURE_INFO);
    f.message = (char *)msg;
    f.failure_info_case = FI(SERVER_FAILURE_INFO);
    f.server_failure_info = &si;
    HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_FAILED));
    if (ev == NULL) {
      *rc = DBX_ENOMEM;
      return 1;
    }
    WorkflowTaskFailedEventAttributes *a = ev->workflow_task_failed_event_attributes;
    a->scheduled_event_id = rs->wft_scheduled_event_id;
    a->started_event_id = rs->wft_started_event_id;
    a->cause = cause;
    a->failure = PB_CLONE(Failure, &f);
    a->identity = svc_pb_strdup(q->identity);
    rs->wft_started_event_id = 0;
    *rc = svc_event_append(c, rs, ev, 0); /* ends the task */
    svc_history_event_free(ev);
    int flushed = 0;
    if (*rc == DBX_OK) *rc = svc_events_flush_buffer(c, rs, &flushed);
    if (*rc == DBX_OK) *rc = svc_run_terminate(c, rs, msg, "history-service");
    if (*rc == DBX_OK) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s", msg);
      j->keep_writes = 1;
    }
    return 1;
  }
  return 0;
}

/* The worker's sticky_attributes: its next workflow tasks go to its sticky
 * queue (matching.c); none clears stickiness, as Temporal does. */
#define STICKY_DEFAULT_S2S_MS 5000
static void sticky_set(RunState *rs, const Temporal__Api__Taskqueue__V1__StickyExecutionAttributes *sa) {
  if (sa == NULL || sa->worker_task_queue == NULL || sa->worker_task_queue->name[0] == '\0' ||
      !svc_keyed_fits(rs->namespace_, sa->worker_task_queue->name, 0) || strcmp(sa->worker_task_queue->name, rs->task_queue) == 0) {
    svc_sticky_clear(rs);
    return;
  }
  int64_t ms = dbx_pb_duration_ms(sa->schedule_to_start_timeout);
  if (ms <= 0) ms = STICKY_DEFAULT_S2S_MS;
  if (ms > MAX_TIMEOUT_MS) ms = MAX_TIMEOUT_MS;
  svc_pb_setstr(&rs->sticky_task_queue, sa->worker_task_queue->name);
  rs->sticky_s2s_timeout_ms = ms;
}

static dbx_err check_history_limits(ectx *c, RunState *rs) {
  if (rs->status != WS(RUNNING)) return DBX_OK;
  int64_t count = rs->next_event_id - 1;
  if (count >= c->svc->limits.count_error || rs->history_size_bytes >= c->svc->limits.size_error_bytes) {
    DBX_WARN("service", "workflow %s run %s: history of %lld events, %lld bytes exceeds the limit: terminating",
             rs->workflow_id, rs->run_id, (long long)count, (long long)rs->history_size_bytes);
    return svc_run_terminate(c, rs, "Workflow history size / count exceeds limit.", "durabox");
  }
  if (count >= c->svc->limits.count_warn || rs->history_size_bytes >= c->svc->limits.size_warn_bytes)
    DBX_WARN("service", "workflow %s run %s: history of %lld events, %lld bytes passed the warning limit",
             rs->workflow_id, rs->run_id, (long long)count, (long long)rs->history_size_bytes);
  return DBX_OK;
}

dbx_err svc_h_wft_completed(ectx *c, job *j) {
  RespondWorkflowTaskCompletedRequest *q = svc_decode(j, &RespondWorkflowTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  wft_cmd w = {.identity = q->identity, .msgs = q->messages, .n_msgs = q->n_messages};
  dbx_err rc = load_wft(c, j, q->task_token, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  if (refuse_big_commands(c, j, rs, q, &rc)) goto out;
  int has_close = 0;
  for (size_t i = 0; i < q->n_commands; i++) has_close |= is_close_command(q->commands[i]);
  if (has_close && rs->n_buffered_events > 0) {
    /* new events arrived while the worker decided to close: it must see them */
    Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
    f.message = "UnhandledCommand: new events arrived during the workflow task";
    rc = wft_fail(c, rs, WFC(UNHANDLED_COMMAND), &f, q->identity);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) j->status = DBX_GRPC_OK;
    goto out;
  }
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_COMPLETED));
  if (ev == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowTaskCompletedEventAttributes *a = ev->workflow_task_completed_event_attributes;
  a->scheduled_event_id = rs->wft_scheduled_event_id;
  a->started_event_id = rs->wft_started_event_id;
  a->identity = svc_pb_strdup(q->identity);
  if (q->sdk_metadata) a->sdk_metadata = PB_CLONE(Temporal__Api__Sdk__V1__WorkflowTaskCompletedMetadata, q->sdk_metadata);
  int64_t started_id = rs->wft_started_event_id;
  rc = svc_event_append(c, rs, ev, 0); /* from here on events are written, not buffered */
  int64_t completed_id = ev->event_id;
  svc_history_event_free(ev);
  if (rc != DBX_OK) goto out;
  /* the event ended the task and set last_wft_started_event_id (mutable.c) */
  rs->wft_attempt = 1;
  rs->wft_backoff_until_ns = 0;
  sticky_set(rs, q->sticky_attributes);
  w.completed_id = completed_id;
  rc = apply_unreferenced_messages(c, j, rs, q->commands, q->n_commands, &w);
  if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  for (size_t i = 0; i < q->n_commands && !w.closed; i++) {
    rc = apply_command(c, j, rs, q->commands[i], &w);
    if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  }
  if (!w.closed) {
    int flushed = 0;
    rc = svc_events_flush_buffer(c, rs, &flushed);
    if (rc == DBX_OK && (flushed || w.new_wft || q->force_create_new_workflow_task ||
                         svc_update_wants_task(rs, started_id)))
      rc = svc_wft_schedule(c, rs);
    if (rc == DBX_OK) rc = check_history_limits(c, rs);
    if (rc == DBX_OK && rs->status == WS(RUNNING)) rc = svc_run_save(c, rs);
  }
  if (rc == DBX_OK) wake_for_queries(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK; /* empty RespondWorkflowTaskCompletedResponse */
out:
  free(w.msg_used);
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_wft_failed(ectx *c, job *j) {
  RespondWorkflowTaskFailedRequest *q = svc_decode(j, &RespondWorkflowTaskFailedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = load_wft(c, j, q->task_token, &rs);
  if (rc == DBX_OK && rs) {
    DBX_INFO("service", "workflow task failed: workflow %s run %s cause %d: %s", rs->workflow_id, rs->run_id,
             (int)q->cause, q->failure ? q->failure->message : "");
    Failure *f = q->failure, *replaced = NULL;
    if (f && svc_blob_over(c, (const ProtobufCMessage *)f, "a workflow task failure", rs->workflow_id)) {
      /* Temporal: "Failure exceeds size limit.", the original cut as its cause */
      replaced = f = svc_server_failure_new(FAILURE_TOO_BIG_MSG, f, svc_blob_warn_bytes(c));
      if (f == NULL) rc = DBX_ENOMEM;
    }
    if (rc == DBX_OK) rc = wft_fail(c, rs, q->cause, f, q->identity);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (replaced) protobuf_c_message_free_unpacked(&replaced->base, NULL);
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
