/* Visibility: DescribeWorkflowExecution, ListWorkflowExecutions and
 * CountWorkflowExecutions (a scan of the namespace's runs filtered by
 * visquery.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"
#include "service/visquery.h"

/* ns rounded down to whole seconds: Describe's pending times have always
 * carried seconds only. */
static int64_t whole_s(int64_t ns) { return ns / 1000000000 * 1000000000; }

/* Fill info from a run (pointers borrow rs; timestamps go to ts[0..2];
 * *memo and *sa are unpacked copies the caller frees, NULL when the run has
 * none or its stored bytes do not decode). DBX_OK or DBX_ENOMEM. */
static dbx_err fill_exec_info(RunState *rs, WorkflowExecutionInfo *info, WorkflowExecution *we, WorkflowType *wt,
                           Timestamp ts[3], Memo **memo, SearchAttributes **sa) {
  we->workflow_id = rs->workflow_id;
  we->run_id = rs->run_id;
  wt->name = rs->workflow_type;
  info->execution = we;
  info->type = wt;
  dbx_pb_timestamp_init_ns(&ts[0], rs->start_time_ns);
  info->start_time = &ts[0];
  if (rs->close_time_ns) {
    dbx_pb_timestamp_init_ns(&ts[1], rs->close_time_ns);
    info->close_time = &ts[1];
  }
  dbx_pb_timestamp_init_ns(&ts[2], rs->execution_time_ns);
  info->execution_time = &ts[2];
  info->status = rs->status;
  info->history_length = rs->next_event_id - 1;
  info->history_size_bytes = rs->history_size_bytes;
  info->task_queue = rs->task_queue;
  info->first_run_id = rs->first_run_id;
  info->state_transition_count = rs->state_transition_count;
  *memo = NULL;
  *sa = NULL;
  if (rs->memo.len && svc_pb_unpack(&Memo__D, rs->memo.data, rs->memo.len, (void **)memo) == DBX_ENOMEM)
    return DBX_ENOMEM;
  if (rs->search_attributes.len &&
      svc_pb_unpack(&SearchAttributes__D, rs->search_attributes.data, rs->search_attributes.len, (void **)sa) ==
          DBX_ENOMEM)
    return DBX_ENOMEM;
  info->memo = *memo;
  info->search_attributes = *sa;
  return DBX_OK;
}

dbx_err svc_h_describe_execution(ectx *c, job *j) {
  DescribeWorkflowExecutionRequest *q = svc_decode(j, &DescribeWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  DescribeWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_RESPONSE);
  WorkflowExecutionInfo info = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_INFO);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  Timestamp ts[3] = {INIT(GOOGLE__PROTOBUF__TIMESTAMP), INIT(GOOGLE__PROTOBUF__TIMESTAMP), INIT(GOOGLE__PROTOBUF__TIMESTAMP)};
  Memo *memo = NULL;
  SearchAttributes *sa = NULL;
  dbx_err frc = fill_exec_info(rs, &info, &we, &wt, ts, &memo, &sa);
  WorkflowExecutionConfig cfg = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_CONFIG);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = rs->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  cfg.task_queue = &tq;
  Duration *d_exec = svc_duration_new_ms(rs->execution_timeout_ms), *d_run = svc_duration_new_ms(rs->run_timeout_ms),
           *d_task = svc_duration_new_ms(rs->task_timeout_ms);
  cfg.workflow_execution_timeout = d_exec;
  cfg.workflow_run_timeout = d_run;
  cfg.default_workflow_task_timeout = d_task;
  r.execution_config = &cfg;
  r.workflow_execution_info = &info;
  /* root execution: stored since runs record it, else derived */
  WorkflowExecution root = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  int has_parent = rs->parent && rs->parent->workflow_id[0];
  root.workflow_id = rs->root_workflow_id[0] ? rs->root_workflow_id : has_parent ? rs->parent->workflow_id : rs->workflow_id;
  root.run_id = rs->root_workflow_id[0] ? rs->root_run_id : has_parent ? rs->parent->run_id : rs->run_id;
  info.root_execution = &root;
  Duration exec_dur = INIT(GOOGLE__PROTOBUF__DURATION);
  if (rs->close_time_ns && rs->close_time_ns >= rs->execution_time_ns) {
    dbx_pb_duration_init_ms(&exec_dur, (rs->close_time_ns - rs->execution_time_ns) / 1000000);
    info.execution_duration = &exec_dur;
  }
  Temporal__Api__Workflow__V1__WorkflowExecutionExtendedInfo ext =
      INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_EXTENDED_INFO);
  Timestamp ext_ts[2] = {INIT(GOOGLE__PROTOBUF__TIMESTAMP), INIT(GOOGLE__PROTOBUF__TIMESTAMP)};
  if (rs->execution_expiration_ns) {
    dbx_pb_timestamp_init_ns(&ext_ts[0], rs->execution_expiration_ns);
    ext.execution_expiration_time = &ext_ts[0];
  }
  if (rs->run_timeout_ms > 0) {
    dbx_pb_timestamp_init_ns(&ext_ts[1], rs->start_time_ns + rs->run_timeout_ms * 1000000);
    ext.run_expiration_time = &ext_ts[1];
  }
  ext.cancel_requested = rs->cancel_requested;
  ext.original_start_time = &ts[0];
  r.workflow_extended_info = &ext;
  ParentInfo *pi = rs->parent;
  WorkflowExecution pwe = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  if (pi && pi->workflow_id[0]) {
    pwe.workflow_id = pi->workflow_id;
    pwe.run_id = pi->run_id;
    info.parent_execution = &pwe;
    info.parent_namespace_id = (char *)(svc_ns_id(c->svc, pi->namespace_) ? svc_ns_id(c->svc, pi->namespace_) : "");
  }
  size_t na = rs->n_activities, nc = rs->n_children;
  PendingActivityInfo *pa = dbx_calloc(na + 1, sizeof *pa);
  PendingActivityInfo **pap = dbx_calloc(na + 1, sizeof *pap);
  ActivityType *ats = dbx_calloc(na + 1, sizeof *ats);
  Timestamp *pts = dbx_calloc(3 * na + 1, sizeof *pts);
  PendingChildExecutionInfo *pc = dbx_calloc(nc + 1, sizeof *pc);
  PendingChildExecutionInfo **pcp = dbx_calloc(nc + 1, sizeof *pcp);
  if (frc != DBX_OK || !pa || !pap || !ats || !pts || !pc || !pcp || !d_exec || !d_run || !d_task) {
    rc = DBX_ENOMEM;
  } else {
    for (size_t i = 0; i < na; i++) {
      ActivityInfo *ai = rs->activities[i];
      PendingActivityInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_ACTIVITY_INFO);
      ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
      pa[i] = x;
      ats[i] = at;
      ats[i].name = ai->activity_type;
      pa[i].activity_id = ai->activity_id;
      pa[i].activity_type = &ats[i];
      pa[i].state = ai->cancel_requested ? TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
                    : ai->started_time_ns ? TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_STARTED
                                          : TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_SCHEDULED;
      pa[i].heartbeat_details = ai->heartbeat_details;
      pa[i].attempt = ai->attempt;
      pa[i].maximum_attempts = ai->retry_policy ? ai->retry_policy->maximum_attempts : 0;
      pa[i].last_failure = ai->last_failure;
      pa[i].last_worker_identity = ai->started_identity;
      /* whole seconds, as before */
      dbx_pb_timestamp_init_ns(&pts[3 * i], whole_s(ai->scheduled_time_ns));
      pa[i].scheduled_time = &pts[3 * i];
      if (ai->last_heartbeat_time_ns) {
        dbx_pb_timestamp_init_ns(&pts[3 * i + 1], whole_s(ai->last_heartbeat_time_ns));
        pa[i].last_heartbeat_time = &pts[3 * i + 1];
      }
      if (ai->started_time_ns) {
        dbx_pb_timestamp_init_ns(&pts[3 * i + 2], whole_s(ai->started_time_ns));
        pa[i].last_started_time = &pts[3 * i + 2];
      }
      pap[i] = &pa[i];
    }
    for (size_t i = 0; i < nc; i++) {
      ChildInfo *ci = rs->children[i];
      PendingChildExecutionInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_CHILD_EXECUTION_INFO);
      pc[i] = x;
      pc[i].workflow_id = ci->workflow_id;
      pc[i].run_id = ci->run_id;
      pc[i].workflow_type_name = ci->workflow_type;
      pc[i].initiated_id = ci->initiated_event_id;
      pc[i].parent_close_policy = ci->parent_close_policy;
      pcp[i] = &pc[i];
    }
    r.n_pending_activities = na;
    r.pending_activities = pap;
    r.n_pending_children = nc;
    r.pending_children = pcp;
    PendingWorkflowTaskInfo pw = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_WORKFLOW_TASK_INFO);
    Timestamp ws, wst;
    if (rs->wft_scheduled_event_id) {
      pw.state = rs->wft_started_event_id ? TEMPORAL__API__ENUMS__V1__PENDING_WORKFLOW_TASK_STATE__PENDING_WORKFLOW_TASK_STATE_STARTED
                                          : TEMPORAL__API__ENUMS__V1__PENDING_WORKFLOW_TASK_STATE__PENDING_WORKFLOW_TASK_STATE_SCHEDULED;
      dbx_pb_timestamp_init_ns(&ws, whole_s(rs->wft_scheduled_time_ns));
      pw.scheduled_time = &ws;
      if (rs->wft_started_event_id) {
        dbx_pb_timestamp_init_ns(&wst, whole_s(rs->wft_started_time_ns));
        pw.started_time = &wst;
      }
      pw.attempt = rs->wft_attempt;
      r.pending_workflow_task = &pw;
    }
    svc_job_reply(j, &r.base);
  }
  free(pa);
  free(pap);
  free(ats);
  free(pts);
  free(pc);
  free(pcp);
  free(d_exec);
  free(d_run);
  free(d_task);
  if (memo) protobuf_c_message_free_unpacked(&memo->base, NULL);
  if (sa) protobuf_c_message_free_unpacked(&sa->base, NULL);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* Scan every run of a namespace matching query; calls fn for each (sorted by
 * start time as the query asks). */
typedef struct {
  RunState **runs;
  size_t n, cap;
  int desc;
} run_list;

static int cmp_start(const void *a, const void *b, void *desc) {
  const RunState *x = *(RunState *const *)a, *y = *(RunState *const *)b;
  int r = x->start_time_ns < y->start_time_ns ? -1 : x->start_time_ns > y->start_time_ns ? 1 : strcmp(x->run_id, y->run_id);
  return *(int *)desc ? -r : r;
}

static void run_list_free(run_list *l) {
  for (size_t i = 0; i < l->n; i++) svc_runstate_free(l->runs[i]);
  free(l->runs);
}

static int run_list_sort_desc;

static int cmp_start_qsort(const void *a, const void *b) { return cmp_start(a, b, &run_list_sort_desc); }

static dbx_err scan_runs(ectx *c, job *j, const char *ns, const char *qtext, run_list *out) {
  memset(out, 0, sizeof *out);
  char err[256];
  dbx_visq *vq = NULL;
  svc_sa_defs defs;
  dbx_err vrc = svc_sa_defs_load(c, ns, &defs);
  if (vrc != DBX_OK) return vrc;
  vrc = dbx_visq_create_sa(qtext, defs.defs, defs.n, &vq, err, sizeof err);
  svc_sa_defs_free(&defs);
  if (vrc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s", j->method, err);
    return DBX_OK;
  }
  if (vrc != DBX_OK) return vrc;
  out->desc = dbx_visq_order_desc(vq);
  size_t pl = strlen(ns) + 1;
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_runs, &cur);
  dbx_val k, v;
  if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, ns, pl, &k, &v);
  for (; rc == DBX_OK; rc = dbx_store_cursor_next(cur, &k, &v)) {
    if (k.size < pl || memcmp(k.data, ns, pl) != 0) break;
    RunState *rs = NULL;
    if (svc_pb_unpack(&RunState__D, v.data, v.size, (void **)&rs) == DBX_ENOMEM) {
      rc = DBX_ENOMEM;
      break;
    }
    if (rs == NULL) continue; /* a damaged row: not listed */
    dbx_visq_record rec = {.workflow_id = rs->workflow_id, .workflow_type = rs->workflow_type,
                           .task_queue = rs->task_queue, .run_id = rs->run_id, .status = rs->status,
                           .start_time_ns = rs->start_time_ns, .close_time_ns = rs->close_time_ns,
                           .execution_time_ns = rs->execution_time_ns};
    SearchAttributes *sa = NULL;
    dbx_visq_sa_value *vals = NULL;
    if (rs->search_attributes.len &&
        svc_pb_unpack(&SearchAttributes__D, rs->search_attributes.data, rs->search_attributes.len, (void **)&sa) ==
            DBX_ENOMEM) {
      svc_runstate_free(rs);
      rc = DBX_ENOMEM;
      break;
    }
    if (sa && sa->n_indexed_fields) {
      vals = dbx_calloc(sa->n_indexed_fields, sizeof *vals);
      for (size_t i = 0; vals && i < sa->n_indexed_fields; i++) {
        Payload *pv = sa->indexed_fields[i]->value;
        vals[i].name = sa->indexed_fields[i]->key;
        vals[i].json = pv ? (const char *)pv->data.data : NULL;
        vals[i].json_len = pv ? pv->data.len : 0;
      }
      rec.sa = vals;
      rec.n_sa = vals ? sa->n_indexed_fields : 0;
    }
    int match = !(sa && sa->n_indexed_fields && vals == NULL) && dbx_visq_match(vq, &rec);
    int oom = sa && sa->n_indexed_fields && vals == NULL;
    free(vals);
    if (sa) protobuf_c_message_free_unpacked(&sa->base, NULL);
    if (oom) {
      svc_runstate_free(rs);
      rc = DBX_ENOMEM;
      break;
    }
    if (!match) {
      svc_runstate_free(rs);
      continue;
    }
    if (out->n == out->cap) {
      size_t nc = out->cap ? out->cap * 2 : 64;
      RunState **na = dbx_realloc(out->runs, nc * sizeof *na);
      if (na == NULL) {
        svc_runstate_free(rs);
        rc = DBX_ENOMEM;
        break;
      }
      out->runs = na;
      out->cap = nc;
    }
    out->runs[out->n++] = rs;
  }
  dbx_store_cursor_close(cur);
  dbx_visq_destroy(vq);
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  if (rc == DBX_OK && out->n > 1) { /* qsort(NULL, 0) is undefined */
    run_list_sort_desc = out->desc;
    qsort(out->runs, out->n, sizeof *out->runs, cmp_start_qsort);
  }
  return rc;
}

dbx_err svc_h_list(ectx *c, job *j) {
  ListWorkflowExecutionsRequest *q = svc_decode(j, &ListWorkflowExecutionsRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  run_list l = {0};
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  uint64_t offset = 0;
  if (q->next_page_token.len) {
    if (q->next_page_token.len != 8) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ListWorkflowExecutions: next_page_token is malformed");
      goto out;
    }
    for (int i = 0; i < 8; i++) offset = (offset << 8) | q->next_page_token.data[i];
  }
  rc = scan_runs(c, j, q->namespace_, q->query, &l);
  if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  size_t page = q->page_size > 0 ? (size_t)q->page_size : 1000;
  size_t start = offset < l.n ? (size_t)offset : l.n;
  size_t cnt = l.n - start < page ? l.n - start : page;
  WorkflowExecutionInfo *infos = dbx_calloc(cnt + 1, sizeof *infos);
  WorkflowExecutionInfo **ptrs = dbx_calloc(cnt + 1, sizeof *ptrs);
  WorkflowExecution *wes = dbx_calloc(cnt + 1, sizeof *wes);
  WorkflowType *wts = dbx_calloc(cnt + 1, sizeof *wts);
  Timestamp *tss = dbx_calloc(3 * cnt + 1, sizeof *tss);
  Memo **memos = dbx_calloc(cnt + 1, sizeof *memos);
  SearchAttributes **sas = dbx_calloc(cnt + 1, sizeof *sas);
  if (infos && ptrs && wes && wts && tss && memos && sas) {
    for (size_t i = 0; i < cnt && rc == DBX_OK; i++) {
      WorkflowExecutionInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_INFO);
      WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
      WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
      Timestamp t0 = INIT(GOOGLE__PROTOBUF__TIMESTAMP);
      infos[i] = x;
      wes[i] = we;
      wts[i] = wt;
      tss[3 * i] = tss[3 * i + 1] = tss[3 * i + 2] = t0;
      rc = fill_exec_info(l.runs[start + i], &infos[i], &wes[i], &wts[i], &tss[3 * i], &memos[i], &sas[i]);
      ptrs[i] = &infos[i];
    }
    ListWorkflowExecutionsResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_RESPONSE);
    r.n_executions = cnt;
    r.executions = ptrs;
    uint8_t tok[8];
    if (start + cnt < l.n) {
      uint64_t nx = start + cnt;
      for (int i = 7; i >= 0; i--) {
        tok[i] = (uint8_t)nx;
        nx >>= 8;
      }
      r.next_page_token.data = tok;
      r.next_page_token.len = 8;
    }
    if (rc == DBX_OK) svc_job_reply(j, &r.base);
  } else {
    rc = DBX_ENOMEM;
  }
  for (size_t i = 0; memos && sas && i < cnt; i++) {
    if (memos[i]) protobuf_c_message_free_unpacked(&memos[i]->base, NULL);
    if (sas[i]) protobuf_c_message_free_unpacked(&sas[i]->base, NULL);
  }
  free(infos);
  free(ptrs);
  free(wes);
  free(wts);
  free(tss);
  free(memos);
  free(sas);
out:
  run_list_free(&l);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* CountWorkflowExecutions with "... GROUP BY ExecutionStatus" (the only
 * grouping Temporal's server allows; its Web UI asks for it): one group per
 * status that has runs, in status order, each value a json/plain Keyword
 * payload such as "Running". */
static void count_reply_by_status(job *j, const run_list *l) {
  int64_t per[8] = {0};
  for (size_t i = 0; i < l->n; i++)
    if (l->runs[i]->status > 0 && l->runs[i]->status < 8) per[l->runs[i]->status]++;
  Temporal__Api__Workflowservice__V1__CountWorkflowExecutionsResponse__AggregationGroup g[8], *gp[8];
  Payload pv[8], *pvp[8];
  Temporal__Api__Common__V1__Payload__MetadataEntry me[8][2], *mep[8][2];
  char data[8][24];
  size_t n = 0;
  for (int st = 1; st < 8; st++) {
    if (per[st] == 0) continue;
    Temporal__Api__Workflowservice__V1__CountWorkflowExecutionsResponse__AggregationGroup g0 =
        INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_RESPONSE__AGGREGATION_GROUP);
    Payload p0 = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
    Temporal__Api__Common__V1__Payload__MetadataEntry m0 = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY);
    int len = snprintf(data[n], sizeof data[n], "\"%s\"", dbx_visq_status_name(st));
    me[n][0] = me[n][1] = m0;
    me[n][0].key = "encoding";
    me[n][0].value.data = (uint8_t *)"json/plain";
    me[n][0].value.len = 10;
    me[n][1].key = "type";
    me[n][1].value.data = (uint8_t *)"Keyword";
    me[n][1].value.len = 7;
    mep[n][0] = &me[n][0];
    mep[n][1] = &me[n][1];
    pv[n] = p0;
    pv[n].n_metadata = 2;
    pv[n].metadata = mep[n];
    pv[n].data.data = (uint8_t *)data[n];
    pv[n].data.len = (size_t)len;
    pvp[n] = &pv[n];
    g[n] = g0;
    g[n].n_group_values = 1;
    g[n].group_values = &pvp[n];
    g[n].count = per[st];
    gp[n] = &g[n];
    n++;
  }
  CountWorkflowExecutionsResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_RESPONSE);
  r.count = (int64_t)l->n;
  r.n_groups = n;
  r.groups = gp;
  svc_job_reply(j, &r.base);
}

dbx_err svc_h_count(ectx *c, job *j) {
  CountWorkflowExecutionsRequest *q = svc_decode(j, &CountWorkflowExecutionsRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  run_list l = {0};
  char *filter = NULL;
  size_t cut = 0, al = 0;
  const char *attr = NULL;
  int grouped = dbx_visq_split_group_by(q->query, &cut, &attr, &al);
  if (grouped && !(al == 15 && strncmp(attr, "ExecutionStatus", 15) == 0)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
                 "CountWorkflowExecutions: 'group by' clause is only supported for ExecutionStatus search attribute");
    goto out;
  }
  if (grouped && (filter = dbx_strndup(q->query, cut)) == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  if (svc_check_ns(c, j, q->namespace_)) {
    rc = scan_runs(c, j, q->namespace_, grouped ? filter : q->query, &l);
    if (rc == DBX_OK && j->status == DBX_GRPC_OK) {
      if (grouped) {
        count_reply_by_status(j, &l);
      } else {
        CountWorkflowExecutionsResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_RESPONSE);
        r.count = (int64_t)l.n;
        svc_job_reply(j, &r.base);
      }
    }
  }
out:
  free(filter);
  run_list_free(&l);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
