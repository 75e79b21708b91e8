/* ResetWorkflowExecution: a new run from a prefix of the base run's history.
 *
 * The new run gets events [1, e) of the base run (same ids, new times) and
 * its mutable state is the fold of those events (mutable.c, the function the
 * live path applies to every event): pending activities, timers and child
 * workflows, the workflow task in progress, cancel request. Then it gets
 * WorkflowTaskFailed (RESET_WORKFLOW), the signals and the events of its
 * pending children (started, closed) recorded after the reset point, its
 * pending activities queued again from now, its timers at their original
 * fire time, its children that still run handed over from the base run, and
 * a new workflow task; the base run is terminated if it still runs. When the
 * base is not the current run (a reset to a run that continued as new, as
 * Temporal CLI's --type LastContinuedAsNew asks), the runs it continued as
 * new into hand over their signals and signal request ids too, and the
 * current run is terminated if it runs, as Temporal's workflow resetter
 * does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

/* The reset point must be a workflow task event inside the base run. */
static dbx_err check_reset_point(ectx *c, job *j, RunState *base, int64_t e) {
  if (e <= 1 || e >= base->next_event_id) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
                 "ResetWorkflowExecution: workflow_task_finish_event_id %lld is out of range (must be > 1 and < %lld)",
                 (long long)e, (long long)base->next_event_id);
    return DBX_OK;
  }
  HistoryEvent *pe = NULL;
  dbx_err rc = svc_event_load_one(c, base->run_seq, e, &pe);
  if (rc != DBX_OK) return rc;
  int et = pe->event_type;
  svc_history_event_free(pe);
  if (et != ET(WORKFLOW_TASK_COMPLETED) && et != ET(WORKFLOW_TASK_TIMED_OUT) && et != ET(WORKFLOW_TASK_FAILED) &&
      et != ET(WORKFLOW_TASK_STARTED)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
                 "ResetWorkflowExecution: event %lld is not a workflow task completed, failed, timed out or started "
                 "event",
                 (long long)e);
  }
  return DBX_OK;
}

/* The new run's state before any event: identity and settings of the base. */
static RunState *new_run_state(ectx *c, const RunState *base, const char *new_run, const char *request_id) {
  RunState *nrs = svc_runstate_new();
  if (nrs == NULL) return NULL;
  svc_pb_setstr(&nrs->namespace_, base->namespace_);
  svc_pb_setstr(&nrs->workflow_id, base->workflow_id);
  svc_pb_setstr(&nrs->run_id, new_run);
  svc_pb_setstr(&nrs->first_run_id, base->first_run_id);
  svc_pb_setstr(&nrs->workflow_type, base->workflow_type);
  svc_pb_setstr(&nrs->task_queue, base->task_queue);
  svc_pb_setstr(&nrs->start_request_id, request_id);
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
  /* the base run's signals all reach the new run (the prefix's, and the later
   * ones re-applied), so their request ids go with them: a resent signal is
   * still a duplicate */
  nrs->signal_request_ids = base->n_signal_request_ids ? dbx_calloc(base->n_signal_request_ids, sizeof(char *)) : NULL;
  for (size_t i = 0; nrs->signal_request_ids && i < base->n_signal_request_ids; i++) {
    nrs->signal_request_ids[i] = dbx_strdup(base->signal_request_ids[i]);
    if (nrs->signal_request_ids[i] == NULL) break;
    nrs->n_signal_request_ids = i + 1;
  }
  nrs->memo.data = base->memo.len ? dbx_malloc(base->memo.len) : NULL;
  if (nrs->memo.data) {
    memcpy(nrs->memo.data, base->memo.data, base->memo.len);
    nrs->memo.len = base->memo.len;
  }
  return nrs;
}

/* Copy the prefix into the new run (same ids, written at the reset's time),
 * then fold it, with its original times, into the new run's state. */
static dbx_err copy_prefix(ectx *c, RunState *nrs, HistoryEvent **evs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *ev = evs[i];
    Timestamp *t = ev->event_time;
    ev->event_time = NULL;
    dbx_err rc = svc_event_copy(c, nrs, ev);
    free(ev->event_time);
    ev->event_time = t;
    if (rc != DBX_OK) return rc;
  }
  return svc_state_fold(nrs, evs, n);
}

/* End the workflow task of the prefix with WorkflowTaskFailed RESET_WORKFLOW
 * (a synthetic WorkflowTaskStarted first if it was only scheduled). */
static dbx_err fail_reset_task(ectx *c, RunState *nrs, const ResetWorkflowExecutionRequest *q, const char *base_run,
                               const char *new_run) {
  dbx_err rc;
  if (nrs->wft_scheduled_event_id && !nrs->wft_started_event_id) {
    HistoryEvent *st = svc_event_new(ET(WORKFLOW_TASK_STARTED));
    if (st == NULL) return DBX_ENOMEM;
    st->workflow_task_started_event_attributes->scheduled_event_id = nrs->wft_scheduled_event_id;
    st->workflow_task_started_event_attributes->identity = svc_pb_strdup(q->identity);
    rc = svc_event_append(c, nrs, st, 0);
    svc_history_event_free(st);
    if (rc != DBX_OK) return rc;
  }
  HistoryEvent *f = svc_event_new(ET(WORKFLOW_TASK_FAILED));
  Failure *fl = svc_pb_new(&Failure__D);
  if (f == NULL || fl == NULL) {
    svc_history_event_free(f);
    free(fl);
    return DBX_ENOMEM;
  }
  fl->message = svc_pb_strdup(q->reason);
  fl->failure_info_case = FI(RESET_WORKFLOW_FAILURE_INFO);
  fl->reset_workflow_failure_info = svc_pb_new(&ResetWorkflowFailureInfo__D);
  WorkflowTaskFailedEventAttributes *fa = f->workflow_task_failed_event_attributes;
  fa->scheduled_event_id = nrs->wft_scheduled_event_id;
  fa->started_event_id = nrs->wft_started_event_id;
  fa->cause = WFC(RESET_WORKFLOW);
  fa->failure = fl;
  fa->identity = svc_pb_strdup(q->identity);
  fa->base_run_id = svc_pb_strdup(base_run);
  fa->new_run_id = svc_pb_strdup(new_run);
  rc = svc_event_append(c, nrs, f, 0);
  svc_history_event_free(f);
  return rc;
}

/* A child event recorded after the reset point, for a child the prefix left
 * pending in nrs: its initiated event id, and where its started_event_id
 * field is (NULL for the events that have none). 0 when ev is no such event
 * or its child is not pending in nrs (nor, for Started, still unstarted). */
static int64_t later_child_event(const RunState *nrs, HistoryEvent *ev, int64_t **started_field) {
  int64_t init = 0;
  *started_field = NULL;
  switch (ev->attributes_case) {
  case HEV(START_CHILD_WORKFLOW_EXECUTION_FAILED):
    init = ev->start_child_workflow_execution_failed_event_attributes->initiated_event_id;
    break;
  case HEV(CHILD_WORKFLOW_EXECUTION_STARTED):
    init = ev->child_workflow_execution_started_event_attributes->initiated_event_id;
    break;
#define CLOSE_CASE(K, f)                                                                                      \
  case HEV(K):                                                                                                \
    init = ev->f->initiated_event_id;                                                                         \
    *started_field = &ev->f->started_event_id;                                                                \
    break;
    CLOSE_CASE(CHILD_WORKFLOW_EXECUTION_COMPLETED, child_workflow_execution_completed_event_attributes)
    CLOSE_CASE(CHILD_WORKFLOW_EXECUTION_FAILED, child_workflow_execution_failed_event_attributes)
    CLOSE_CASE(CHILD_WORKFLOW_EXECUTION_CANCELED, child_workflow_execution_canceled_event_attributes)
    CLOSE_CASE(CHILD_WORKFLOW_EXECUTION_TIMED_OUT, child_workflow_execution_timed_out_event_attributes)
    CLOSE_CASE(CHILD_WORKFLOW_EXECUTION_TERMINATED, child_workflow_execution_terminated_event_attributes)
#undef CLOSE_CASE
  default: return 0;
  }
  const ChildInfo *ci = svc_child_find((RunState *)nrs, init);
  if (ci == NULL) return 0;
  if (ev->attributes_case == HEV(CHILD_WORKFLOW_EXECUTION_STARTED) && ci->started_event_id != 0) return 0;
  if (*started_field) **started_field = ci->started_event_id; /* the new run's id of its Started event */
  return init;
}

/* Events recorded after the reset point that the new run takes over, in their
 * order (Temporal's workflow resetter does the same): signals, unless the
 * request excludes them, and the progress of every child the prefix left
 * pending (started, failed to start, closed), so a child that closed after
 * the reset point reports its close to the new run and one that started
 * after it is reconnected. */
static dbx_err reapply_later(ectx *c, RunState *nrs, const ResetWorkflowExecutionRequest *q, HistoryEvent **later,
                             size_t nl) {
  int skip_signals = q->reset_reapply_type == 2;
  for (size_t i = 0; i < q->n_reset_reapply_exclude_types; i++) skip_signals |= q->reset_reapply_exclude_types[i] == 1;
  for (size_t i = 0; i < nl; i++) {
    int64_t *started_field = NULL;
    int signal = later[i]->event_type == ET(WORKFLOW_EXECUTION_SIGNALED);
    if (signal ? skip_signals : later_child_event(nrs, later[i], &started_field) == 0) continue;
    later[i]->event_id = 0;
    free(later[i]->event_time);
    later[i]->event_time = NULL;
    dbx_err rc = svc_event_append(c, nrs, later[i], 0);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* Pending activities run again from now (first attempt); pending timers keep
 * their fire time. */
static dbx_err resume_pending(ectx *c, RunState *nrs) {
  for (size_t i = 0; i < nrs->n_activities; i++) {
    ActivityInfo *ai = nrs->activities[i];
    ai->scheduled_time_ns = c->now_ns;
    ai->attempt_scheduled_time_ns = c->now_ns;
    dbx_err rc = svc_activity_queue_attempt(c, nrs, ai);
    if (rc != DBX_OK) return rc;
  }
  for (size_t i = 0; i < nrs->n_timers; i++) {
    dbx_err rc = svc_timer_add(c, nrs->timers[i]->fire_time_ns, TK_USER_TIMER, nrs, nrs->timers[i]->started_event_id,
                               0, nrs->timers[i]->timer_id);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* 1 if the child run ch still runs as a child of base. */
static int child_of(const RunState *ch, const RunState *base) {
  const ParentInfo *p = ch->parent;
  return ch->status == WS(RUNNING) && p && strcmp(p->namespace_, base->namespace_) == 0 &&
         strcmp(p->workflow_id, base->workflow_id) == 0 && strcmp(p->run_id, base->run_id) == 0;
}

/* The new run's pending children (the prefix's, with the later child events
 * reapplied) that still run as children of the base run now report to the
 * new run, and leave the base run (whose parent close policy no longer
 * applies to them). Children that never started, or run as children of
 * another run, leave the new run's state. */
static dbx_err hand_over_children(ectx *c, RunState *base, RunState *nrs) {
  size_t i = 0;
  while (i < nrs->n_children) {
    ChildInfo *ci = nrs->children[i];
    RunState *ch = NULL;
    dbx_err rc = ci->started_event_id ? svc_run_load(c, ci->namespace_, ci->workflow_id, ci->run_id, &ch) : DBX_ENOTFOUND;
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
    if (rc == DBX_ENOTFOUND || !child_of(ch, base)) {
      svc_runstate_free(ch);
      svc_child_remove(nrs, ci->initiated_event_id);
      continue;
    }
    svc_pb_setstr(&ch->parent->run_id, nrs->run_id);
    rc = ch->parent->run_id ? svc_run_save(c, ch) : DBX_ENOMEM;
    svc_runstate_free(ch);
    if (rc != DBX_OK) return rc;
    svc_child_remove(base, ci->initiated_event_id);
    i++;
  }
  return DBX_OK;
}

/* Point the workflow id at the new run. */
static dbx_err set_current(ectx *c, const RunState *nrs) {
  size_t kl;
  char *k = svc_exec_key(nrs->namespace_, nrs->workflow_id, &kl);
  if (k == NULL) return DBX_ENOMEM;
  ExecutionRecord er = INIT(DURABOX__SERVICE__V1__EXECUTION_RECORD);
  er.current_run_id = nrs->run_id;
  uint8_t buf[256];
  dbx_err rc = DBX_EINVAL;
  size_t bl = protobuf_c_message_get_packed_size(&er.base);
  if (bl <= sizeof buf) {
    protobuf_c_message_pack(&er.base, buf);
    rc = dbx_store_put(c->txn, c->svc->t_execs, k, kl, buf, bl);
  }
  free(k);
  return rc;
}

/* The run id evs[0..n) continued as new into (malloc'd), or NULL. */
static char *continued_into(HistoryEvent *const *evs, size_t n) {
  for (size_t i = n; i > 0; i--)
    if (evs[i - 1] && evs[i - 1]->event_type == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW)) {
      const char *r = evs[i - 1]->workflow_execution_continued_as_new_event_attributes->new_execution_run_id;
      return r && r[0] ? dbx_strdup(r) : NULL;
    }
  return NULL;
}

/* Keep rs's signal request ids in nrs (no duplicates; the newest 64). */
static dbx_err keep_request_ids(RunState *nrs, const RunState *rs) {
  for (size_t i = 0; i < rs->n_signal_request_ids; i++) {
    const char *r = rs->signal_request_ids[i];
    int seen = 0;
    for (size_t k = 0; k < nrs->n_signal_request_ids && !seen; k++) seen = strcmp(nrs->signal_request_ids[k], r) == 0;
    if (seen) continue;
    if (nrs->n_signal_request_ids >= 64) {
      free(nrs->signal_request_ids[0]);
      memmove(nrs->signal_request_ids, nrs->signal_request_ids + 1, 63 * sizeof *nrs->signal_request_ids);
      nrs->n_signal_request_ids--;
    }
    char **arr = dbx_realloc(nrs->signal_request_ids, (nrs->n_signal_request_ids + 1) * sizeof *arr);
    if (arr == NULL) return DBX_ENOMEM;
    nrs->signal_request_ids = arr;
    if ((arr[nrs->n_signal_request_ids] = dbx_strdup(r)) == NULL) return DBX_ENOMEM;
    nrs->n_signal_request_ids++;
  }
  return DBX_OK;
}

/* Move the signals of evs[0..n) to the end of *later. */
static dbx_err move_signals(HistoryEvent **evs, size_t n, HistoryEvent ***later, size_t *nl) {
  for (size_t i = 0; i < n; i++) {
    if (evs[i]->event_type != ET(WORKFLOW_EXECUTION_SIGNALED)) continue;
    HistoryEvent **arr = dbx_realloc(*later, (*nl + 1) * sizeof *arr);
    if (arr == NULL) return DBX_ENOMEM;
    *later = arr;
    arr[(*nl)++] = evs[i];
    evs[i] = NULL;
  }
  return DBX_OK;
}

/* The base run's buffered events (recorded while its workflow task was
 * started: acknowledged, but with no event in its history yet) after *later,
 * in their order: they too came after the reset point, and a signal among
 * them must reach the new run like one in the history. */
static dbx_err take_buffered(const RunState *base, HistoryEvent ***later, size_t *nl) {
  for (size_t i = 0; i < base->n_buffered_events; i++) {
    HistoryEvent *ev = NULL;
    dbx_err rc = svc_pb_unpack(&HistoryEvent__D, base->buffered_events[i].data, base->buffered_events[i].len,
                               (void **)&ev);
    if (rc != DBX_OK) return rc == DBX_EINVAL ? DBX_ESTORE : rc;
    HistoryEvent **arr = dbx_realloc(*later, (*nl + 1) * sizeof *arr);
    if (arr == NULL) {
      svc_history_event_free(ev);
      return DBX_ENOMEM;
    }
    *later = arr;
    arr[(*nl)++] = ev;
  }
  return DBX_OK;
}

/* The runs the base continued as new into, in order (at most 1000): their
 * signals after *later (reapply_later takes them to the new run), their
 * signal request ids into nrs. */
static dbx_err take_chain_signals(ectx *c, const RunState *base, RunState *nrs, HistoryEvent ***later, size_t *nl) {
  char *next = continued_into(*later, *nl);
  dbx_err rc = DBX_OK;
  for (int hop = 0; rc == DBX_OK && next && hop < 1000; hop++) {
    RunState *rs = NULL;
    HistoryEvent **evs = NULL;
    size_t n = 0;
    rc = svc_run_load(c, base->namespace_, base->workflow_id, next, &rs);
    free(next);
    next = NULL;
    if (rc == DBX_ENOTFOUND) return DBX_OK;
    if (rc == DBX_OK) rc = svc_events_load(c, rs->run_seq, 1, 0, &evs, &n, 0);
    if (rc == DBX_OK) next = continued_into(evs, n);
    if (rc == DBX_OK) rc = move_signals(evs, n, later, nl);
    if (rc == DBX_OK) rc = keep_request_ids(nrs, rs);
    svc_events_free(evs, n);
    svc_runstate_free(rs);
  }
  free(next);
  return rc;
}

/* The current run of the base's workflow id when it is another run that
 * still runs (to terminate), else NULL in *out. */
static dbx_err other_running_current(ectx *c, const RunState *base, RunState **out) {
  *out = NULL;
  char *cur = NULL;
  dbx_err rc = svc_current_run_id(c, base->namespace_, base->workflow_id, &cur);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc == DBX_OK && cur && strcmp(cur, base->run_id) != 0) {
    rc = svc_run_load(c, base->namespace_, base->workflow_id, cur, out);
    if (rc == DBX_ENOTFOUND) rc = DBX_OK;
    if (*out && (*out)->status != WS(RUNNING)) {
      svc_runstate_free(*out);
      *out = NULL;
    }
  }
  free(cur);
  return rc;
}

/* Terminate rs (a running run the reset replaces). */
static dbx_err terminate_replaced(ectx *c, RunState *rs, const RunState *nrs, const ResetWorkflowExecutionRequest *q) {
  char *reason = dbx_asprintf("reset to a new run %s: %s", nrs->run_id, q->reason);
  if (reason == NULL) return DBX_ENOMEM;
  dbx_err rc = svc_run_terminate(c, rs, reason, q->identity);
  free(reason);
  return rc;
}

/* Build the new run from the base run's events [1, e) and later ones. */
static dbx_err reset_run(ectx *c, const ResetWorkflowExecutionRequest *q, RunState *base, RunState *nrs,
                         HistoryEvent **evs, size_t n, HistoryEvent **later, size_t nl) {
  dbx_err rc = copy_prefix(c, nrs, evs, n);
  if (rc == DBX_OK) rc = fail_reset_task(c, nrs, q, base->run_id, nrs->run_id);
  if (rc == DBX_OK) rc = reapply_later(c, nrs, q, later, nl);
  if (rc == DBX_OK) rc = resume_pending(c, nrs);
  if (rc == DBX_OK) rc = hand_over_children(c, base, nrs);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, nrs);
  if (rc != DBX_OK) return rc;
  if (base->status == WS(RUNNING)) {
    rc = terminate_replaced(c, base, nrs, q);
    if (rc != DBX_OK) return rc;
  } else {
    rc = svc_run_save(c, base); /* it may have handed over children */
    if (rc != DBX_OK) return rc;
    RunState *cur = NULL;
    rc = other_running_current(c, base, &cur);
    if (rc == DBX_OK && cur) rc = terminate_replaced(c, cur, nrs, q);
    svc_runstate_free(cur);
    if (rc != DBX_OK) return rc;
  }
  rc = set_current(c, nrs);
  if (rc == DBX_OK) rc = svc_run_save(c, nrs);
  return rc;
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
  rc = check_reset_point(c, j, base, e);
  if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  rc = svc_events_load(c, base->run_seq, 1, e, &evs, &n, 0); /* the prefix [1, e) */
  if (rc == DBX_OK) rc = svc_events_load(c, base->run_seq, e, 0, &later, &nl, 0);
  if (rc != DBX_OK) goto out;
  new_run = svc_new_uuid();
  nrs = new_run ? new_run_state(c, base, new_run, q->request_id) : NULL;
  if (nrs == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  rc = take_buffered(base, &later, &nl);
  if (rc == DBX_OK) rc = take_chain_signals(c, base, nrs, &later, &nl);
  if (rc == DBX_OK) rc = reset_run(c, q, base, nrs, evs, n, later, nl);
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
