/* Matching: task queue polls (PollWorkflowTaskQueue, PollActivityTaskQueue),
 * parked polls, and legacy query tasks (QueryWorkflow, their dispatch to a
 * polling worker, RespondQueryTaskCompleted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

#define POLLER_TTL_NS (5LL * 60 * 1000000000) /* Temporal forgets a poller after 5 minutes */

/* Remember that identity polls (ns, tq, kind), once the batch commits. */
static void note_poller(ectx *c, const char *ns, const char *tq, int kind, const char *identity) {
  note *n = svc_note_new(c, NOTE_POLLER);
  if (n == NULL) return; /* marked: the job fails */
  n->key = svc_queue_key(ns, tq, kind, &n->len);
  n->message = svc_pb_strdup(identity);
  if (n->key == NULL || n->message == NULL) svc_oom_mark();
}

void svc_pollers_note(dbx_service *s, const char *key, size_t key_len, const char *identity, int64_t now_ns) {
  size_t w = 0;
  poller_seen *found = NULL;
  for (size_t i = 0; i < s->n_pollers; i++) { /* drop the stale ones while looking */
    poller_seen *p = &s->pollers[i];
    if (now_ns - p->last_ns > POLLER_TTL_NS) {
      free(p->key);
      free(p->identity);
      continue;
    }
    s->pollers[w] = *p;
    if (p->key_len == key_len && memcmp(p->key, key, key_len) == 0 && strcmp(p->identity, identity) == 0)
      found = &s->pollers[w];
    w++;
  }
  s->n_pollers = w;
  if (found) {
    found->last_ns = now_ns;
    return;
  }
  poller_seen *np = dbx_realloc(s->pollers, (s->n_pollers + 1) * sizeof *np);
  if (np == NULL) return;
  s->pollers = np;
  poller_seen e = {dbx_malloc(key_len), key_len, dbx_strdup(identity), now_ns};
  if (e.key == NULL || e.identity == NULL) {
    free(e.key);
    free(e.identity);
    return;
  }
  memcpy(e.key, key, key_len);
  s->pollers[s->n_pollers++] = e;
}

void svc_pollers_free(dbx_service *s) {
  for (size_t i = 0; i < s->n_pollers; i++) {
    free(s->pollers[i].key);
    free(s->pollers[i].identity);
  }
  free(s->pollers);
  s->pollers = NULL;
  s->n_pollers = 0;
}

/* Queued tasks of a queue key (the backlog; stale entries included, as
 * Temporal's approximate count includes them). */
static dbx_err count_tasks(ectx *c, const char *prefix, size_t pl, int64_t *n) {
  *n = 0;
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_tasks, &cur);
  dbx_val k, v;
  if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, prefix, pl, &k, &v);
  for (; rc == DBX_OK; rc = dbx_store_cursor_next(cur, &k, &v)) {
    if (k.size != pl + 9 || memcmp(k.data, prefix, pl) != 0) break;
    (*n)++;
  }
  dbx_store_cursor_close(cur);
  return rc == DBX_ENOTFOUND ? DBX_OK : rc;
}

static dbx_err describe_tq_reply(ectx *c, job *j, DescribeTaskQueueRequest *q, int kind) {
  size_t pl;
  char *prefix = svc_queue_key(q->namespace_, q->task_queue->name, kind, &pl);
  if (prefix == NULL) return DBX_ENOMEM;
  int64_t backlog = 0;
  dbx_err rc = count_tasks(c, prefix, pl, &backlog);
  dbx_service *s = c->svc;
  PollerInfo *pi = dbx_calloc(s->n_pollers + 1, sizeof *pi);
  PollerInfo **pp = dbx_calloc(s->n_pollers + 1, sizeof *pp);
  Timestamp *ts = dbx_calloc(s->n_pollers + 1, sizeof *ts);
  if (rc == DBX_OK && (!pi || !pp || !ts)) rc = DBX_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; rc == DBX_OK && i < s->n_pollers; i++) {
    poller_seen *p = &s->pollers[i];
    if (p->key_len != pl || memcmp(p->key, prefix, pl) != 0 || c->now_ns - p->last_ns > POLLER_TTL_NS) continue;
    PollerInfo x = INIT(TEMPORAL__API__TASKQUEUE__V1__POLLER_INFO);
    pi[n] = x;
    dbx_pb_timestamp_init_ns(&ts[n], p->last_ns);
    pi[n].last_access_time = &ts[n];
    pi[n].identity = p->identity;
    pp[n] = &pi[n];
    n++;
  }
  if (rc == DBX_OK) {
    DescribeTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_TASK_QUEUE_RESPONSE);
    TaskQueueStats st = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE_STATS);
    r.n_pollers = n;
    r.pollers = pp;
    st.approximate_backlog_count = backlog;
    if (q->report_stats) r.stats = &st;
    /* the deprecated status (Temporal's CLI reads it in --legacy-mode): the
     * backlog; durabox hands out no task id blocks, so the levels are 0 */
    TaskQueueStatus tqs = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE_STATUS);
    TaskIdBlock blk = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_ID_BLOCK);
    tqs.backlog_count_hint = backlog;
    tqs.task_id_block = &blk;
    if (q->include_task_queue_status) r.task_queue_status = &tqs;
    svc_job_reply(j, &r.base);
  }
  free(prefix);
  free(pi);
  free(pp);
  free(ts);
  return rc;
}

/* DescribeTaskQueue: the pollers seen in the last 5 minutes (identity, last
 * poll time) and, with report_stats, the backlog. Workflow type unless
 * task_queue_type says activity. */
dbx_err svc_h_describe_task_queue(ectx *c, job *j) {
  DescribeTaskQueueRequest *q = svc_decode(j, &DescribeTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (svc_check_ns(c, j, q->namespace_) &&
      svc_check_id(j, "task_queue.name", q->task_queue ? q->task_queue->name : NULL)) {
    int kind = q->task_queue_type == TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_ACTIVITY ? TASK_ACTIVITY
                                                                                                       : TASK_WORKFLOW;
    if (q->task_queue_type == TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_NEXUS) {
      /* no Nexus worker ever polls durabox: as Temporal answers a Nexus queue
       * nobody polls (Temporal's Web UI asks for all three types) */
      DescribeTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_TASK_QUEUE_RESPONSE);
      svc_job_reply(j, &r.base);
    } else {
      rc = describe_tq_reply(c, j, q, kind);
    }
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static void park_poll(ectx *c, job *j, const char *ns, const char *tq, int kind) {
  svc_job_reset(j);
  j->park = PARK_POLL;
  j->park_key = svc_queue_key(ns, tq, kind, &j->park_key_len);
  j->park_deadline_ns = svc_long_poll_until(c, j); /* answer before the client gives up */
  /* the reply at the deadline is an empty message (no task) */
}

/* Take the first queued task of (ns, tq, kind), deleting it. *out NULL if none. */
static dbx_err take_task(ectx *c, const char *ns, const char *tq, int kind, TaskRecord **out) {
  *out = NULL;
  size_t pl;
  char *prefix = svc_queue_key(ns, tq, kind, &pl);
  if (prefix == NULL) return DBX_ENOMEM;
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_tasks, &cur);
  if (rc != DBX_OK) {
    free(prefix);
    return rc;
  }
  dbx_val k, v;
  rc = dbx_store_cursor_seek(cur, prefix, pl, &k, &v);
  if (rc == DBX_OK && k.size == pl + 9 && memcmp(k.data, prefix, pl) == 0 && ((const char *)k.data)[pl] == 0) {
    dbx_err urc = svc_pb_unpack(&TaskRecord__D, v.data, v.size, (void **)out);
    rc = dbx_store_cursor_del(cur);
    if (rc == DBX_OK && urc != DBX_OK) rc = urc == DBX_ENOMEM ? DBX_ENOMEM : DBX_ESTORE;
  } else if (rc == DBX_OK || rc == DBX_ENOTFOUND) {
    rc = DBX_OK;
  }
  dbx_store_cursor_close(cur);
  free(prefix);
  if (rc != DBX_OK && *out) {
    protobuf_c_message_free_unpacked(&(*out)->base, NULL);
    *out = NULL;
  }
  return rc;
}

static int64_t history_suggest_can(ectx *c, RunState *rs) {
  return (rs->next_event_id - 1 >= c->svc->limits.count_suggest_can) ||
         (rs->history_size_bytes >= c->svc->limits.size_suggest_can_bytes);
}

static dbx_err try_dispatch_query(ectx *c, job *j, const char *ns, const char *tq, int *done);

/* Start the scheduled workflow task of rs for the poller identity and reply
 * with it: the history from event `from` (1, or after the previous task's
 * events for a sticky poll) to the started event, first page. */
static dbx_err wft_start_reply(ectx *c, job *j, RunState *rs, const char *identity, int64_t from) {
  dbx_err rc = DBX_OK;
  /* start the workflow task */
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_STARTED));
  char *req_id = svc_new_uuid();
  if (ev == NULL || req_id == NULL) {
    svc_history_event_free(ev);
    free(req_id);
    return DBX_ENOMEM;
  }
  WorkflowTaskStartedEventAttributes *a = ev->workflow_task_started_event_attributes;
  a->scheduled_event_id = rs->wft_scheduled_event_id;
  a->identity = svc_pb_strdup(identity);
  a->request_id = req_id;
  a->suggest_continue_as_new = (protobuf_c_boolean)history_suggest_can(c, rs);
  a->history_size_bytes = rs->history_size_bytes;
  rc = svc_event_append(c, rs, ev, 0);
  if (rc == DBX_OK) { /* the event started the task (mutable.c) */
    svc_pb_setstr(&rs->wft_request_id, req_id);
    svc_pb_setstr(&rs->wft_identity, identity);
    rc = svc_timer_add(c, c->now_ns + rs->task_timeout_ms * 1000000, TK_WFT_START_TO_CLOSE, rs,
                       rs->wft_scheduled_event_id, rs->wft_attempt, NULL);
  }
  svc_history_event_free(ev);
  ProtocolMessage **msgs = NULL; /* admitted updates ride along (update.c) */
  size_t n_msgs = 0;
  if (rc == DBX_OK) rc = svc_update_messages(rs, &msgs, &n_msgs);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  if (rc != DBX_OK) {
    svc_update_messages_free(msgs, n_msgs);
    return rc;
  }
  /* the reply: the history from `from` (first page) */
  PollWorkflowTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
  TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
  tok.kind = TASK_WORKFLOW;
  tok.namespace_ = rs->namespace_;
  tok.workflow_id = rs->workflow_id;
  tok.run_id = rs->run_id;
  tok.scheduled_event_id = rs->wft_scheduled_event_id;
  tok.started_event_id = rs->wft_started_event_id;
  tok.attempt = rs->wft_attempt;
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = rs->workflow_id;
  we.run_id = rs->run_id;
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = rs->workflow_type;
  TaskQueue wtq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wtq.name = rs->task_queue;
  wtq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  uint8_t *hist = NULL;
  size_t hist_len = 0;
  int64_t last_id = 0;
  Timestamp *ts_sched = svc_timestamp_new_ns(rs->wft_scheduled_time_ns);
  Timestamp *ts_start = svc_timestamp_new_ns(c->now_ns);
  /* the history, first page, spliced in from the stored bytes */
  rc = svc_history_encode(c, rs->run_seq, from, rs->wft_started_event_id, HISTORY_PAGE_BYTES, &hist, &hist_len, &last_id);
  uint8_t page_tok[16];
  if (rc == DBX_OK && (r.task_token.data = dbx_pb_pack(&tok.base, &r.task_token.len)) != NULL) {
    r.workflow_execution = &we;
    r.workflow_type = &wt;
    r.previous_started_event_id = rs->last_wft_started_event_id;
    r.started_event_id = rs->wft_started_event_id;
    r.attempt = rs->wft_attempt;
    r.workflow_execution_task_queue = &wtq;
    r.scheduled_time = ts_sched;
    r.started_time = ts_start;
    r.messages = msgs;
    r.n_messages = n_msgs;
    if (last_id < rs->wft_started_event_id) {
      /* page token: next event id + the last id of this task's history, for GetWorkflowExecutionHistory */
      svc_page_token_make(page_tok, last_id + 1, rs->wft_started_event_id);
      r.next_page_token.data = page_tok;
      r.next_page_token.len = 16;
    }
    if (svc_job_reply_field(j, &r.base, 8 /* history */, hist, hist_len) == 0)
      svc_job_set_handoff(j, TASK_WORKFLOW, rs, rs->wft_scheduled_event_id, rs->wft_started_event_id,
                          rs->wft_attempt);
    free(r.task_token.data);
  } else if (rc == DBX_OK) {
    rc = DBX_ENOMEM;
  }
  free(hist);
  free(ts_sched);
  free(ts_start);
  svc_update_messages_free(msgs, n_msgs);
  return rc;
}

dbx_err svc_h_poll_workflow(ectx *c, job *j) {
  PollWorkflowTaskQueueRequest *q = svc_decode(j, &PollWorkflowTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  if (!svc_check_id(j, "task_queue.name", q->task_queue ? q->task_queue->name : NULL)) goto out;
  note_poller(c, q->namespace_, q->task_queue->name, TASK_WORKFLOW, q->identity);
  /* a sticky queue holds the tasks of the runs its worker caches: they go
   * out with the events after the previous task's (Temporal's sticky
   * execution); legacy queries go to the normal queue with full history */
  int sticky = q->task_queue->kind == TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY;
  int done = 0;
  if (!sticky) rc = try_dispatch_query(c, j, q->namespace_, q->task_queue->name, &done);
  if (rc != DBX_OK || done) goto out;
  for (;;) {
    TaskRecord *tr = NULL;
    rc = take_task(c, q->namespace_, q->task_queue->name, TASK_WORKFLOW, &tr);
    if (rc != DBX_OK) goto out;
    if (tr == NULL) {
      park_poll(c, j, q->namespace_, q->task_queue->name, TASK_WORKFLOW);
      goto out;
    }
    RunState *rs = NULL;
    rc = svc_run_load(c, q->namespace_, tr->workflow_id, tr->run_id, &rs);
    /* a task record is stale once its task moved on, or moved between the
     * sticky and the normal queue (a sticky schedule-to-start timeout) */
    int valid = rc == DBX_OK && rs->status == WS(RUNNING) && rs->wft_scheduled_event_id == tr->scheduled_event_id &&
                rs->wft_started_event_id == 0 && (rs->wft_sticky != 0) == sticky;
    protobuf_c_message_free_unpacked(&tr->base, NULL);
    if (rc == DBX_ENOTFOUND || (rc == DBX_OK && !valid)) {
      svc_runstate_free(rs);
      rc = DBX_OK;
      continue; /* stale task */
    }
    if (rc != DBX_OK) goto out;
    int64_t from = sticky && rs->last_wft_started_event_id > 0 ? rs->last_wft_started_event_id + 1 : 1;
    rc = wft_start_reply(c, j, rs, q->identity, from);
    svc_runstate_free(rs);
    goto out;
  }
out:
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_poll_activity(ectx *c, job *j) {
  PollActivityTaskQueueRequest *q = svc_decode(j, &PollActivityTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  if (!svc_check_id(j, "task_queue.name", q->task_queue ? q->task_queue->name : NULL)) goto out;
  note_poller(c, q->namespace_, q->task_queue->name, TASK_ACTIVITY, q->identity);
  for (;;) {
    TaskRecord *tr = NULL;
    rc = take_task(c, q->namespace_, q->task_queue->name, TASK_ACTIVITY, &tr);
    if (rc != DBX_OK) goto out;
    if (tr == NULL) {
      park_poll(c, j, q->namespace_, q->task_queue->name, TASK_ACTIVITY);
      goto out;
    }
    RunState *rs = NULL;
    rc = svc_run_load(c, q->namespace_, tr->workflow_id, tr->run_id, &rs);
    ActivityInfo *ai = rc == DBX_OK ? svc_activity_find(rs, tr->scheduled_event_id) : NULL;
    int valid = ai && rs->status == WS(RUNNING) && ai->attempt == tr->attempt && ai->started_time_ns == 0;
    protobuf_c_message_free_unpacked(&tr->base, NULL);
    if (rc == DBX_ENOTFOUND || (rc == DBX_OK && !valid)) {
      svc_runstate_free(rs);
      rc = DBX_OK;
      continue;
    }
    if (rc != DBX_OK) goto out;
    ai->started_time_ns = c->now_ns;
    ai->queued = 0;
    svc_pb_setstr(&ai->started_identity, q->identity);
    char *req = svc_new_uuid();
    if (req) {
      svc_pb_setstr(&ai->started_request_id, req);
      free(req);
    }
    if (ai->start_to_close_ms > 0)
      rc = svc_timer_add(c, c->now_ns + ai->start_to_close_ms * 1000000, TK_ACTIVITY_START_TO_CLOSE, rs,
                         ai->scheduled_event_id, ai->attempt, NULL);
    if (rc == DBX_OK && ai->heartbeat_ms > 0)
      rc = svc_timer_add(c, c->now_ns + ai->heartbeat_ms * 1000000, TK_ACTIVITY_HEARTBEAT, rs, ai->scheduled_event_id,
                         ai->attempt, NULL);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc != DBX_OK) {
      svc_runstate_free(rs);
      goto out;
    }
    /* the scheduled event holds input and header */
    HistoryEvent *sev = NULL;
    rc = svc_event_load_one(c, rs->run_seq, ai->scheduled_event_id, &sev);
    if (rc != DBX_OK) {
      svc_runstate_free(rs);
      goto out;
    }
    ActivityTaskScheduledEventAttributes *sa = sev->activity_task_scheduled_event_attributes;
    PollActivityTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_RESPONSE);
    TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
    tok.kind = TASK_ACTIVITY;
    tok.namespace_ = rs->namespace_;
    tok.workflow_id = rs->workflow_id;
    tok.run_id = rs->run_id;
    tok.scheduled_event_id = ai->scheduled_event_id;
    tok.attempt = ai->attempt;
    tok.activity_id = ai->activity_id;
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = rs->workflow_id;
    we.run_id = rs->run_id;
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = rs->workflow_type;
    ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
    at.name = ai->activity_type;
    Duration d1, d2, d3;
    dbx_pb_duration_init_ms(&d1, ai->schedule_to_close_ms);
    dbx_pb_duration_init_ms(&d2, ai->start_to_close_ms);
    dbx_pb_duration_init_ms(&d3, ai->heartbeat_ms);
    Timestamp t1, t2, t3;
    dbx_pb_timestamp_init_ns(&t1, ai->scheduled_time_ns);
    dbx_pb_timestamp_init_ns(&t2, ai->attempt_scheduled_time_ns);
    dbx_pb_timestamp_init_ns(&t3, c->now_ns);
    if ((r.task_token.data = dbx_pb_pack(&tok.base, &r.task_token.len)) == NULL) {
      svc_history_event_free(sev);
      svc_runstate_free(rs);
      rc = DBX_ENOMEM;
      goto out;
    }
    r.workflow_namespace = rs->namespace_;
    r.workflow_type = &wt;
    r.workflow_execution = &we;
    r.activity_type = &at;
    r.activity_id = ai->activity_id;
    r.header = sa->header;
    r.input = sa->input;
    r.heartbeat_details = ai->heartbeat_details;
    r.scheduled_time = &t1;
    r.current_attempt_scheduled_time = &t2;
    r.started_time = &t3;
    r.attempt = ai->attempt;
    r.schedule_to_close_timeout = &d1;
    r.start_to_close_timeout = &d2;
    r.heartbeat_timeout = &d3;
    r.retry_policy = ai->retry_policy;
    if (svc_job_reply(j, &r.base) == 0)
      svc_job_set_handoff(j, TASK_ACTIVITY, rs, ai->scheduled_event_id, ai->started_time_ns, ai->attempt);
    free(r.task_token.data);
    svc_history_event_free(sev);
    svc_runstate_free(rs);
    goto out;
  }
out:
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_query(ectx *c, job *j) {
  QueryWorkflowRequest *q = svc_decode(j, &QueryWorkflowRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  if (!svc_check_id(j, "query.query_type", q->query ? q->query->query_type : NULL)) goto out;
  if (svc_blob_over(c, (const ProtobufCMessage *)q->query->query_args, "the query arguments",
                    q->execution ? q->execution->workflow_id : "")) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, BLOB_REFUSED_MSG);
    goto out;
  }
  rc = svc_load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  /* A run that has completed no workflow task has no state a worker could
   * query: a running one waits for its first task (below, in the dispatch);
   * a closed one never gets one (Temporal: WorkflowNotReady). */
  if (rs->status != WS(RUNNING) && rs->last_wft_started_event_id == 0) {
    svc_job_fail(j, DBX_GRPC_FAILED_PRECONDITION,
                 "workflow task has not completed yet: the run closed before its first workflow task completed");
    goto out;
  }
  note *n = svc_note_new(c, NOTE_QUERY_NEW);
  query *qq = dbx_calloc(1, sizeof *qq);
  if (n == NULL || qq == NULL) {
    free(qq);
    rc = DBX_ENOMEM;
    goto out;
  }
  qq->id = ++c->svc->next_query_id;
  qq->ns = dbx_strdup(rs->namespace_);
  qq->workflow_id = dbx_strdup(rs->workflow_id);
  qq->run_id = dbx_strdup(rs->run_id);
  qq->task_queue = dbx_strdup(rs->task_queue);
  qq->query_len = protobuf_c_message_get_packed_size(&q->query->base);
  qq->query = dbx_malloc(qq->query_len ? qq->query_len : 1);
  if (qq->query) protobuf_c_message_pack(&q->query->base, qq->query);
  qq->waiter = j;
  n->q = qq;
  j->park = PARK_QUERY;
  j->query_id = qq->id;
  int64_t now = dbx_mono_ns();
  int64_t dl = dbx_rpc_call_deadline_mono_ns(j->call);
  j->park_deadline_ns = dl == INT64_MAX ? now + 60000000000LL : dl - 100000000LL;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* A waiting query for this queue whose run has completed a workflow task and
 * has none started goes out as a legacy query task (the poll reply's `query`
 * field). */
static dbx_err try_dispatch_query(ectx *c, job *j, const char *ns, const char *tq, int *done) {
  *done = 0;
  for (query *qq = c->svc->queries; qq; qq = qq->next) {
    if (qq->dispatched || qq->claim_epoch == c->epoch || strcmp(qq->ns, ns) != 0 || strcmp(qq->task_queue, tq) != 0)
      continue;
    RunState *rs = NULL;
    dbx_err rc = svc_run_load(c, qq->ns, qq->workflow_id, qq->run_id, &rs);
    if (rc == DBX_ENOTFOUND) continue;
    if (rc != DBX_OK) return rc;
    /* Temporal's order: a query waits while a workflow task is started, and
     * until the run's first workflow task has completed (before that, the
     * history holds only the start and a worker would answer from a run
     * that has not begun); wake_for_queries retries when a task ends. */
    if (rs->wft_started_event_id > 0 || rs->last_wft_started_event_id == 0) {
      svc_runstate_free(rs);
      continue;
    }
    WorkflowQuery *wq = NULL;
    if (svc_pb_unpack(&WorkflowQuery__D, qq->query, qq->query_len, (void **)&wq) == DBX_ENOMEM) {
      svc_runstate_free(rs);
      return DBX_ENOMEM;
    }
    PollWorkflowTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
    TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
    tok.kind = TASK_QUERY;
    tok.namespace_ = rs->namespace_;
    tok.workflow_id = rs->workflow_id;
    tok.run_id = rs->run_id;
    tok.scheduled_event_id = (int64_t)qq->id;
    char qid[32];
    snprintf(qid, sizeof qid, "%llu", (unsigned long long)qq->id);
    tok.query_id = qid;
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = rs->workflow_id;
    we.run_id = rs->run_id;
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = rs->workflow_type;
    uint8_t *hist = NULL;
    size_t hist_len = 0;
    int64_t last_id = 0;
    /* history up to the last completed workflow task's events, spliced in from the stored bytes */
    int64_t upto = rs->wft_scheduled_event_id > 0 ? rs->wft_scheduled_event_id - 1 : rs->next_event_id - 1;
    rc = svc_history_encode(c, rs->run_seq, 1, upto, 0, &hist, &hist_len, &last_id);
    TaskQueue wtq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
    wtq.name = rs->task_queue;
    wtq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    Timestamp now_ts;
    dbx_pb_timestamp_init_ns(&now_ts, c->now_ns);
    if (rc == DBX_OK && wq && (r.task_token.data = dbx_pb_pack(&tok.base, &r.task_token.len)) != NULL) {
      r.workflow_execution = &we;
      r.workflow_type = &wt;
      r.workflow_execution_task_queue = &wtq;
      r.scheduled_time = &now_ts;
      r.started_time = &now_ts;
      r.attempt = 1;
      r.previous_started_event_id = rs->last_wft_started_event_id;
      r.started_event_id = rs->last_wft_started_event_id;
      r.query = wq;
      svc_job_reply_field(j, &r.base, 8 /* history */, hist, hist_len);
      free(r.task_token.data);
      qq->claim_epoch = c->epoch;
      note *nn = svc_note_new(c, NOTE_QUERY_DISPATCHED);
      if (nn) nn->query_id = qq->id;
      *done = 1;
    }
    if (wq) protobuf_c_message_free_unpacked(&wq->base, NULL);
    free(hist);
    svc_runstate_free(rs);
    if (rc != DBX_OK || *done) return rc;
  }
  return DBX_OK;
}

dbx_err svc_h_respond_query(ectx *c, job *j) {
  RespondQueryTaskCompletedRequest *q = svc_decode(j, &RespondQueryTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  TaskToken *t = svc_token_decode(j, q->task_token, TASK_QUERY);
  if (t) {
    note *n = svc_note_new(c, NOTE_QUERY_ANSWER);
    if (n == NULL) {
      protobuf_c_message_free_unpacked(&t->base, NULL);
      protobuf_c_message_free_unpacked(&q->base, NULL);
      return DBX_ENOMEM;
    }
    n->query_id = (uint64_t)t->scheduled_event_id;
    int too_big = svc_blob_over(c, (const ProtobufCMessage *)q->query_result, "a query result", t->workflow_id);
    if (too_big) { /* Temporal: the query fails with the blob limit's message */
      q->completed_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_FAILED;
      svc_pb_setstr(&q->error_message, BLOB_REFUSED_MSG);
      if (q->failure) protobuf_c_message_free_unpacked(&q->failure->base, NULL);
      q->failure = NULL;
    }
    if (q->completed_type == TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED) {
      QueryWorkflowResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_RESPONSE);
      r.query_result = q->query_result;
      n->status = DBX_GRPC_OK;
      n->len = protobuf_c_message_get_packed_size(&r.base);
      n->bytes = dbx_malloc(n->len ? n->len : 1);
      if (n->bytes) protobuf_c_message_pack(&r.base, n->bytes);
    } else {
      /* Temporal answers a failed query with INVALID_ARGUMENT + QueryFailedFailure */
      job tmp = {0};
      QueryFailedFailure d = INIT(TEMPORAL__API__ERRORDETAILS__V1__QUERY_FAILED_FAILURE);
      d.failure = q->failure;
      svc_job_fail_detail(&tmp, DBX_GRPC_INVALID_ARGUMENT, &d.base, QUERY_FAILED_URL, "%s",
                          q->error_message[0] ? q->error_message : "query failed");
      n->status = DBX_GRPC_INVALID_ARGUMENT;
      n->message = tmp.message;
      n->bytes = tmp.details;
      n->len = tmp.details_len;
    }
    j->status = DBX_GRPC_OK;
    protobuf_c_message_free_unpacked(&t->base, NULL);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

/* A poll reply that handed out a task did not reach its poller (it was
 * cancelled, its deadline passed or its connection dropped first): give the
 * task to the next poller now rather than after the task's timeout. A
 * workflow task times out at once (WorkflowTaskTimedOut, then the next
 * attempt, as its start-to-close timer would do later: history stays
 * append-only); an activity's start is undone (it is in mutable state only)
 * and the same attempt is queued again. Nothing happens when the task moved
 * on meanwhile (completed, timed out, the run closed). */
dbx_err svc_h_task_undelivered(ectx *c, job *j) {
  TaskToken *t = NULL;
  dbx_err rc = svc_pb_unpack(&TaskToken__D, j->handoff, j->handoff_len, (void **)&t);
  if (rc != DBX_OK) return rc == DBX_ENOMEM ? DBX_ENOMEM : DBX_OK;
  RunState *rs = NULL;
  rc = svc_run_load(c, t->namespace_, t->workflow_id, t->run_id, &rs);
  if (rc == DBX_ENOTFOUND || (rc == DBX_OK && rs->status != WS(RUNNING))) {
    rc = DBX_OK;
    goto out;
  }
  if (rc != DBX_OK) goto out;
  int changed = 0;
  if (t->kind == TASK_WORKFLOW) {
    if (rs->wft_scheduled_event_id == t->scheduled_event_id && rs->wft_started_event_id == t->started_event_id &&
        rs->wft_attempt == t->attempt && t->started_event_id > 0) {
      DBX_INFO("service", "workflow task %lld of %s attempt %d was not delivered to its poller: timed out now",
               (long long)t->scheduled_event_id, rs->workflow_id, t->attempt);
      rc = svc_wft_time_out(c, rs);
      changed = 1;
    }
  } else if (t->kind == TASK_ACTIVITY) {
    ActivityInfo *ai = svc_activity_find(rs, t->scheduled_event_id);
    if (ai && ai->attempt == t->attempt && ai->started_time_ns != 0 && ai->started_time_ns == t->started_event_id) {
      DBX_INFO("service", "activity %s of %s attempt %d was not delivered to its poller: queued again",
               ai->activity_id, rs->workflow_id, ai->attempt);
      ai->started_time_ns = 0;
      svc_pb_setstr(&ai->started_identity, "");
      svc_pb_setstr(&ai->started_request_id, "");
      ai->queued = 1;
      rc = svc_task_enqueue(c, rs->namespace_, ai->task_queue, TASK_ACTIVITY, rs->workflow_id, rs->run_id,
                            ai->scheduled_event_id, ai->attempt);
      changed = 1;
    }
  }
  if (rc == DBX_OK && changed) rc = svc_run_save(c, rs);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ sticky execution */

/* ResetStickyTaskQueue: the run's next workflow tasks go to the normal queue
 * with full history. A task already on the sticky queue stays there until
 * its worker takes it or its schedule-to-start timeout moves it, as in
 * Temporal. */
dbx_err svc_h_reset_sticky(ectx *c, job *j) {
  ResetStickyTaskQueueRequest *q = svc_decode(j, &ResetStickyTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  if (rs->status == WS(RUNNING) && svc_sticky_clear(rs)) rc = svc_run_save(c, rs);
  if (rc == DBX_OK) {
    ResetStickyTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_STICKY_TASK_QUEUE_RESPONSE);
    svc_job_reply(j, &r.base);
  }
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ShutdownWorker: the worker's sticky queue has no poller from now on, so
 * new tasks of its runs go to the normal queue (those already there wait
 * for their schedule-to-start timeout). */
dbx_err svc_h_shutdown_worker(ectx *c, job *j) {
  ShutdownWorkerRequest *q = svc_decode(j, &ShutdownWorkerRequest__D);
  if (q == NULL) return DBX_OK;
  if (svc_check_ns(c, j, q->namespace_)) {
    if (q->sticky_task_queue[0]) {
      size_t kl;
      char *key = svc_queue_key(q->namespace_, q->sticky_task_queue, TASK_WORKFLOW, &kl);
      dbx_service *s = c->svc;
      for (size_t i = 0; key && i < s->n_pollers; i++)
        if (s->pollers[i].key_len == kl && memcmp(s->pollers[i].key, key, kl) == 0)
          s->pollers[i].last_ns = INT64_MIN / 2; /* forgotten at the next look (idempotent on a rerun) */
      free(key);
    }
    ShutdownWorkerResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SHUTDOWN_WORKER_RESPONSE);
    svc_job_reply(j, &r.base);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}
