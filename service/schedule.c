/* Schedules (Temporal: WorkflowService CreateSchedule, DescribeSchedule,
 * UpdateSchedule, PatchSchedule, DeleteSchedule, ListSchedules,
 * ListScheduleMatchingTimes): a stored record per schedule and the engine
 * that takes its actions.
 *
 * A schedule is one row of the meta table (key "schedule" \0 namespace \0
 * schedule id) holding a ScheduleRecord: the schedule with its spec compiled
 * (schedule_spec.c), its info (counters, running workflows, recent actions),
 * the nominal time processed up to, and the starts buffered by the overlap
 * policy. Its next action is a durable timer (TK_SCHEDULE, timers.c) whose
 * event_id is the record's generation: every change bumps the generation and
 * arms a new timer, so an older timer finds a newer generation and does
 * nothing. Because both are in the store, a restart re-arms every schedule,
 * and the actions missed while the service was down are taken when that
 * timer fires, within the catch-up window.
 *
 * An action starts a workflow as StartWorkflowExecution would, with the id
 * <workflow id>-<nominal time, RFC 3339 UTC seconds> and the search
 * attributes TemporalScheduledStartTime and TemporalScheduledById, as
 * Temporal's scheduler does. Everything runs on the engine thread in the
 * batch transaction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "service/svc.h"

typedef Durabox__Service__V1__ScheduleRecord ScheduleRecord;
typedef Durabox__Service__V1__ScheduleBufferedStart BufferedStart;
typedef Temporal__Api__Schedule__V1__Schedule Schedule;
typedef Temporal__Api__Schedule__V1__ScheduleInfo ScheduleInfo;
typedef Temporal__Api__Schedule__V1__ScheduleState ScheduleState;
typedef Temporal__Api__Schedule__V1__SchedulePolicies SchedulePolicies;
typedef Temporal__Api__Schedule__V1__SchedulePatch SchedulePatch;
typedef Temporal__Api__Schedule__V1__ScheduleActionResult ScheduleActionResult;
typedef Temporal__Api__Schedule__V1__ScheduleListEntry ScheduleListEntry;
typedef Temporal__Api__Schedule__V1__ScheduleListInfo ScheduleListInfo;
typedef Temporal__Api__Workflow__V1__NewWorkflowExecutionInfo NewWorkflowExecutionInfo;
typedef Temporal__Api__Common__V1__SearchAttributes__IndexedFieldsEntry SaEntry;
typedef Temporal__Api__Common__V1__Payload__MetadataEntry MetaEntry;
#define WS_REQ(x) Temporal__Api__Workflowservice__V1__##x
typedef WS_REQ(CreateScheduleRequest) CreateScheduleRequest;
typedef WS_REQ(CreateScheduleResponse) CreateScheduleResponse;
typedef WS_REQ(DescribeScheduleRequest) DescribeScheduleRequest;
typedef WS_REQ(DescribeScheduleResponse) DescribeScheduleResponse;
typedef WS_REQ(UpdateScheduleRequest) UpdateScheduleRequest;
typedef WS_REQ(UpdateScheduleResponse) UpdateScheduleResponse;
typedef WS_REQ(PatchScheduleRequest) PatchScheduleRequest;
typedef WS_REQ(PatchScheduleResponse) PatchScheduleResponse;
typedef WS_REQ(DeleteScheduleRequest) DeleteScheduleRequest;
typedef WS_REQ(DeleteScheduleResponse) DeleteScheduleResponse;
typedef WS_REQ(ListSchedulesRequest) ListSchedulesRequest;
typedef WS_REQ(ListSchedulesResponse) ListSchedulesResponse;
typedef WS_REQ(ListScheduleMatchingTimesRequest) ListScheduleMatchingTimesRequest;
typedef WS_REQ(ListScheduleMatchingTimesResponse) ListScheduleMatchingTimesResponse;
#define CreateScheduleRequest__D temporal__api__workflowservice__v1__create_schedule_request__descriptor
#define DescribeScheduleRequest__D temporal__api__workflowservice__v1__describe_schedule_request__descriptor
#define UpdateScheduleRequest__D temporal__api__workflowservice__v1__update_schedule_request__descriptor
#define PatchScheduleRequest__D temporal__api__workflowservice__v1__patch_schedule_request__descriptor
#define DeleteScheduleRequest__D temporal__api__workflowservice__v1__delete_schedule_request__descriptor
#define ListSchedulesRequest__D temporal__api__workflowservice__v1__list_schedules_request__descriptor
#define ListScheduleMatchingTimesRequest__D \
  temporal__api__workflowservice__v1__list_schedule_matching_times_request__descriptor

#define OV(x) TEMPORAL__API__ENUMS__V1__SCHEDULE_OVERLAP_POLICY__SCHEDULE_OVERLAP_POLICY_##x
#define NS_PER_S 1000000000LL
#define RECENT_MAX 10          /* recent actions kept, as Temporal */
#define FUTURE_MAX 10          /* future action times in Describe */
#define BUFFER_MAX 1000        /* BUFFER_ALL starts kept */
#define MATCHING_MAX 1000      /* times one ListScheduleMatchingTimes answers */
#define BACKFILL_MAX 1000      /* actions one backfill request takes */
#define CATCHUP_MIN_MS 10000   /* Temporal's floor for the catch-up window */
#define CATCHUP_DEFAULT_MS (365LL * 24 * 3600 * 1000)
#define WATCH_MS 1000          /* re-check of running workflows while starts are buffered */

/* ------------------------------------------------------------ the record */

static char *sched_key(const char *ns, const char *id, size_t *len) {
  static const char pfx[] = "schedule";
  size_t a = strlen(ns), b = id ? strlen(id) : 0;
  char *k = dbx_malloc(sizeof pfx + a + 1 + b);
  if (k == NULL) return NULL;
  memcpy(k, pfx, sizeof pfx);
  memcpy(k + sizeof pfx, ns, a);
  k[sizeof pfx + a] = '\0';
  if (b) memcpy(k + sizeof pfx + a + 1, id, b);
  *len = sizeof pfx + a + 1 + b;
  return k;
}

static dbx_err rec_load(ectx *c, const char *ns, const char *id, ScheduleRecord **out) {
  *out = NULL;
  size_t kl;
  char *k = sched_key(ns, id, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_val v;
  dbx_err rc = dbx_store_get(c->txn, c->svc->t_meta, k, kl, &v);
  free(k);
  if (rc != DBX_OK) return rc;
  rc = svc_pb_unpack(&durabox__service__v1__schedule_record__descriptor, v.data, v.size, (void **)out);
  if (rc == DBX_EINVAL) return DBX_ENOTFOUND; /* a damaged row: as if absent */
  if (rc == DBX_OK && ((*out)->schedule == NULL || (*out)->info == NULL)) {
    protobuf_c_message_free_unpacked(&(*out)->base, NULL);
    *out = NULL;
    return DBX_ENOTFOUND;
  }
  return rc;
}

static dbx_err rec_save(ectx *c, ScheduleRecord *r) {
  if (svc_oom_peek()) return DBX_ENOMEM;
  size_t kl, n = 0;
  char *k = sched_key(r->namespace_, r->schedule_id, &kl);
  uint8_t *buf = dbx_pb_pack(&r->base, &n);
  dbx_err rc = k && buf ? dbx_store_put(c->txn, c->svc->t_meta, k, kl, buf, n) : DBX_ENOMEM;
  free(k);
  free(buf);
  return rc;
}

static void rec_free(ScheduleRecord *r) {
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
}

static const SchedulePolicies *policies_of(const ScheduleRecord *r) { return r->schedule->policies; }

static int overlap_of(const ScheduleRecord *r) {
  int p = policies_of(r) ? (int)policies_of(r)->overlap_policy : 0;
  return p ? p : OV(SKIP);
}

static int64_t catchup_ns(const ScheduleRecord *r) {
  int64_t ms = policies_of(r) && policies_of(r)->catchup_window ? dbx_pb_duration_ms(policies_of(r)->catchup_window)
                                                                  : CATCHUP_DEFAULT_MS;
  if (ms <= 0) ms = CATCHUP_DEFAULT_MS;
  if (ms < CATCHUP_MIN_MS) ms = CATCHUP_MIN_MS;
  if (ms > MAX_TIMEOUT_MS) ms = MAX_TIMEOUT_MS; /* the ns fit int64 */
  return ms * 1000000;
}

static ScheduleState *state_of(ScheduleRecord *r) { return r->schedule->state; }

/* The actual time of nominal time t (s): t plus a jitter drawn from the
 * schedule id and t, below the spec's jitter and below the gap to the next
 * nominal time, so actual times keep their order. */
static int64_t actual_ns(const ScheduleRecord *r, int64_t t) {
  const ScheduleSpec *s = r->schedule->spec;
  int64_t j = s ? dbx_pb_duration_ms(s->jitter) : 0;
  if (j <= 0) return t * NS_PER_S;
  int64_t next = svc_sched_spec_next(s, t);
  if (next != INT64_MAX && (next - t) * 1000 < j) j = (next - t) * 1000;
  if (j <= 0) return t * NS_PER_S;
  uint64_t h = dbx_fnv1a64(DBX_FNV1A64_OFFSET, r->namespace_, strlen(r->namespace_));
  h = dbx_fnv1a64(h, r->schedule_id, strlen(r->schedule_id));
  h = dbx_fnv1a64(h, &t, sizeof t);
  return t * NS_PER_S + (int64_t)(h % (uint64_t)j) * 1000000;
}

static int64_t next_nominal(const ScheduleRecord *r, int64_t after_s) {
  return r->schedule->spec ? svc_sched_spec_next(r->schedule->spec, after_s) : INT64_MAX;
}

/* ------------------------------------------------------------ running workflows */

/* Status of the run a schedule started: the current run of its workflow id
 * while it descends from run_id (retries, continue-as-new), else the run. */
static dbx_err run_status(ectx *c, const char *ns, const WorkflowExecution *we, int *status) {
  *status = WS(COMPLETED);
  char *cur = NULL;
  RunState *rs = NULL;
  dbx_err rc = svc_current_run_id(c, ns, we->workflow_id, &cur);
  if (rc == DBX_OK) rc = svc_run_load(c, ns, we->workflow_id, cur, &rs);
  free(cur);
  if (rc == DBX_OK && strcmp(rs->run_id, we->run_id) != 0 && strcmp(rs->first_run_id, we->run_id) != 0) {
    svc_runstate_free(rs);
    rs = NULL;
    rc = svc_run_load(c, ns, we->workflow_id, we->run_id, &rs);
  }
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  *status = rs->status;
  svc_runstate_free(rs);
  return DBX_OK;
}

static void recent_set_status(ScheduleInfo *in, const WorkflowExecution *we, int status) {
  for (size_t i = 0; i < in->n_recent_actions; i++) {
    const WorkflowExecution *x = in->recent_actions[i]->start_workflow_result;
    if (x && strcmp(x->workflow_id, we->workflow_id) == 0 && strcmp(x->run_id, we->run_id) == 0)
      in->recent_actions[i]->start_workflow_status = status;
  }
}

/* Drop the closed ones from in->running_workflows, noting their status in
 * the recent actions. *failed: a closed one failed or timed out. */
static dbx_err refresh_running(ectx *c, const char *ns, ScheduleInfo *in, int *failed) {
  size_t k = 0;
  if (failed) *failed = 0;
  for (size_t i = 0; i < in->n_running_workflows; i++) {
    WorkflowExecution *we = in->running_workflows[i];
    int st = 0;
    dbx_err rc = run_status(c, ns, we, &st);
    if (rc != DBX_OK) {
      for (; i < in->n_running_workflows; i++) in->running_workflows[k++] = in->running_workflows[i];
      in->n_running_workflows = k;
      return rc;
    }
    if (st == WS(RUNNING)) {
      in->running_workflows[k++] = we;
      continue;
    }
    recent_set_status(in, we, st);
    if (failed && (st == WS(FAILED) || st == WS(TIMED_OUT))) *failed = 1;
    protobuf_c_message_free_unpacked(&we->base, NULL);
  }
  in->n_running_workflows = k;
  return DBX_OK;
}

static dbx_err refresh(ectx *c, ScheduleRecord *r) {
  if (svc_oom_peek()) return DBX_ENOMEM; /* something built before is partial */
  int failed = 0;
  dbx_err rc = refresh_running(c, r->namespace_, r->info, &failed);
  if (rc == DBX_OK && failed && policies_of(r) && policies_of(r)->pause_on_failure && !state_of(r)->paused) {
    state_of(r)->paused = 1;
    svc_pb_setstr(&state_of(r)->notes, "paused due to a workflow failure");
  }
  return rc;
}

/* ------------------------------------------------------------ starting */

static MetaEntry *meta_new(const char *key, const char *val) {
  MetaEntry *m = svc_pb_new(&temporal__api__common__v1__payload__metadata_entry__descriptor);
  if (m == NULL) return NULL;
  m->key = svc_pb_strdup(key);
  m->value.data = (uint8_t *)svc_pb_strdup(val);
  m->value.len = strlen(val);
  return m;
}

/* A json/plain payload of the JSON text json, typed for visibility. */
static SaEntry *sa_entry_new(const char *name, const char *json, const char *type) {
  SaEntry *e = svc_pb_new(&temporal__api__common__v1__search_attributes__indexed_fields_entry__descriptor);
  Payload *p = svc_pb_new(&temporal__api__common__v1__payload__descriptor);
  MetaEntry **md = dbx_calloc(2, sizeof *md);
  if (e == NULL || p == NULL || md == NULL) {
    free(md);
    if (p) protobuf_c_message_free_unpacked(&p->base, NULL);
    if (e) protobuf_c_message_free_unpacked(&e->base, NULL);
    svc_oom_mark();
    return NULL;
  }
  e->key = svc_pb_strdup(name);
  e->value = p;
  p->metadata = md;
  md[0] = meta_new("encoding", "json/plain");
  md[1] = meta_new("type", type);
  p->n_metadata = 2;
  if (md[0] == NULL || md[1] == NULL) { /* marked: the job is refused */
    for (int i = 0; i < 2; i++)
      if (md[i]) protobuf_c_message_free_unpacked(&md[i]->base, NULL);
    p->n_metadata = 0;
  }
  p->data.data = (uint8_t *)svc_pb_strdup(json);
  p->data.len = strlen(json);
  return e;
}

/* JSON string text of s (quotes and backslashes escaped), malloc'd. */
static char *json_quote(const char *s) {
  size_t n = strlen(s);
  char *o = dbx_malloc(2 * n + 3);
  if (o == NULL) return NULL;
  size_t k = 0;
  o[k++] = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') o[k++] = '\\';
    o[k++] = ch < 0x20 ? ' ' : (char)ch;
  }
  o[k++] = '"';
  o[k] = '\0';
  return o;
}

/* The action's search attributes plus Temporal's two; *own: the two entries
 * made here (free them after use; the others are borrowed). */
static void start_search_attributes(const ScheduleRecord *r, const NewWorkflowExecutionInfo *nw, int64_t nominal_s,
                                    SearchAttributes *out, SaEntry **own, SaEntry ***arr) {
  char when[32], json_when[40];
  svc_sched_rfc3339(nominal_s, when);
  snprintf(json_when, sizeof json_when, "\"%s\"", when);
  char *json_id = json_quote(r->schedule_id);
  own[0] = sa_entry_new("TemporalScheduledStartTime", json_when, "Datetime");
  own[1] = json_id ? sa_entry_new("TemporalScheduledById", json_id, "Keyword") : NULL;
  if (json_id == NULL) svc_oom_mark();
  free(json_id);
  size_t n0 = nw->search_attributes ? nw->search_attributes->n_indexed_fields : 0;
  *arr = dbx_calloc(n0 + 2, sizeof **arr);
  if (*arr == NULL) {
    svc_oom_mark();
    return;
  }
  size_t n = 0;
  for (size_t i = 0; i < n0; i++) {
    const char *k = nw->search_attributes->indexed_fields[i]->key;
    if (strcmp(k, "TemporalScheduledStartTime") && strcmp(k, "TemporalScheduledById"))
      (*arr)[n++] = nw->search_attributes->indexed_fields[i];
  }
  if (own[0]) (*arr)[n++] = own[0];
  if (own[1]) (*arr)[n++] = own[1];
  out->indexed_fields = *arr;
  out->n_indexed_fields = n;
}

static int push_ptr(void ***arr, size_t *n, void *p) {
  void **na = dbx_realloc(*arr, (*n + 1) * sizeof *na);
  if (na == NULL) {
    svc_oom_mark();
    return -1;
  }
  *arr = na;
  na[(*n)++] = p;
  return 0;
}

static void record_started(ectx *c, ScheduleRecord *r, const char *wfid, const char *run_id, int64_t act_ns,
                           int manual) {
  ScheduleInfo *in = r->info;
  in->action_count++;
  if (!manual && state_of(r)->limited_actions && state_of(r)->remaining_actions > 0)
    state_of(r)->remaining_actions--;
  ScheduleActionResult *ar = svc_pb_new(&temporal__api__schedule__v1__schedule_action_result__descriptor);
  if (ar == NULL) return;
  ar->schedule_time = svc_timestamp_new_ns(act_ns);
  ar->actual_time = svc_timestamp_new_ns(c->now_ns);
  ar->start_workflow_result = svc_we_new(wfid, run_id);
  ar->start_workflow_status = WS(RUNNING);
  if (in->n_recent_actions >= RECENT_MAX) {
    protobuf_c_message_free_unpacked(&in->recent_actions[0]->base, NULL);
    memmove(in->recent_actions, in->recent_actions + 1, (in->n_recent_actions - 1) * sizeof *in->recent_actions);
    in->n_recent_actions--;
  }
  if (push_ptr((void ***)&in->recent_actions, &in->n_recent_actions, ar) != 0) {
    protobuf_c_message_free_unpacked(&ar->base, NULL);
    return;
  }
  WorkflowExecution *we = svc_we_new(wfid, run_id);
  if (we == NULL) {
    svc_oom_mark();
    return;
  }
  if (push_ptr((void ***)&in->running_workflows, &in->n_running_workflows, we) != 0)
    protobuf_c_message_free_unpacked(&we->base, NULL);
}

/* Start the action's workflow for nominal time nominal_s. A start the
 * service refuses (an id still running, say) is logged and takes no action. */
static dbx_err start_one(ectx *c, ScheduleRecord *r, int64_t nominal_s, int64_t act_ns, int manual) {
  const NewWorkflowExecutionInfo *nw = r->schedule->action->start_workflow;
  char when[32];
  svc_sched_rfc3339(nominal_s, when);
  int keep = policies_of(r) && policies_of(r)->keep_original_workflow_id;
  char *wfid = keep ? dbx_strdup(nw->workflow_id) : dbx_asprintf("%s-%s", nw->workflow_id, when);
  char *identity = dbx_asprintf("temporal-scheduler-%s-%s", r->namespace_, r->schedule_id);
  char *request_id = svc_new_uuid();
  SaEntry *own[2] = {0};
  SaEntry **arr = NULL;
  SearchAttributes sa = INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES);
  start_search_attributes(r, nw, nominal_s, &sa, own, &arr);
  dbx_err rc = DBX_OK;
  if (wfid == NULL || identity == NULL || request_id == NULL || svc_oom_peek()) {
    rc = DBX_ENOMEM;
    goto out;
  }
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  q.namespace_ = r->namespace_;
  q.workflow_id = wfid;
  q.workflow_type = nw->workflow_type;
  q.task_queue = nw->task_queue;
  q.input = nw->input;
  q.workflow_execution_timeout = nw->workflow_execution_timeout;
  q.workflow_run_timeout = nw->workflow_run_timeout;
  q.workflow_task_timeout = nw->workflow_task_timeout;
  q.identity = identity;
  q.request_id = request_id;
  q.retry_policy = nw->retry_policy;
  q.memo = nw->memo;
  q.search_attributes = &sa;
  q.header = nw->header;
  job tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.method = "ScheduleAction";
  char *run_id = NULL;
  int started = 0;
  rc = svc_start_request(c, &tmp, &q, &run_id, &started);
  if (rc == DBX_OK && tmp.status != DBX_GRPC_OK)
    DBX_WARN("service", "schedule %s: start of %s refused: %s", r->schedule_id, wfid,
             tmp.message ? tmp.message : "");
  else if (rc == DBX_OK && started)
    record_started(c, r, wfid, run_id, act_ns, manual);
  free(run_id);
  svc_job_reset(&tmp);
  free(tmp.handoff);
out:
  for (int i = 0; i < 2; i++)
    if (own[i]) protobuf_c_message_free_unpacked(&own[i]->base, NULL);
  free(arr);
  free(wfid);
  free(identity);
  free(request_id);
  return rc;
}

/* ------------------------------------------------------------ overlap */

static void buffer_push(ScheduleRecord *r, int64_t nominal_s, int64_t act_ns, int policy, int manual) {
  BufferedStart *b = svc_pb_new(&durabox__service__v1__schedule_buffered_start__descriptor);
  if (b == NULL) return;
  b->nominal_time_ns = nominal_s * NS_PER_S;
  b->actual_time_ns = act_ns;
  b->overlap_policy = policy;
  b->manual = manual;
  if (push_ptr((void ***)&r->buffered, &r->n_buffered, b) != 0) protobuf_c_message_free_unpacked(&b->base, NULL);
}

static void buffer_clear(ScheduleRecord *r) {
  for (size_t i = 0; i < r->n_buffered; i++) protobuf_c_message_free_unpacked(&r->buffered[i]->base, NULL);
  r->n_buffered = 0;
}

/* Cancel or terminate every running workflow of the schedule. */
static dbx_err stop_running(ectx *c, ScheduleRecord *r, int terminate) {
  for (size_t i = 0; i < r->info->n_running_workflows; i++) {
    const WorkflowExecution *we = r->info->running_workflows[i];
    if (!terminate) {
      dbx_err rc = svc_child_request_cancel(c, r->namespace_, we->workflow_id);
      if (rc != DBX_OK) return rc;
      continue;
    }
    char *cur = NULL;
    RunState *rs = NULL;
    dbx_err rc = svc_current_run_id(c, r->namespace_, we->workflow_id, &cur);
    if (rc == DBX_OK) rc = svc_run_load(c, r->namespace_, we->workflow_id, cur, &rs);
    free(cur);
    if (rc == DBX_OK && rs->status == WS(RUNNING))
      rc = svc_run_terminate(c, rs, "terminated by schedule overlap policy", "temporal-scheduler");
    svc_runstate_free(rs);
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  }
  return DBX_OK;
}

/* One action due at nominal_s (actual act_ns), by policy. */
static dbx_err take_action(ectx *c, ScheduleRecord *r, int64_t nominal_s, int64_t act_ns, int policy, int manual) {
  if (svc_oom_peek()) return DBX_ENOMEM;
  if (r->info->n_running_workflows == 0 && r->n_buffered == 0) return start_one(c, r, nominal_s, act_ns, manual);
  dbx_err rc = DBX_OK;
  switch (policy) {
  case OV(ALLOW_ALL):
    return start_one(c, r, nominal_s, act_ns, manual);
  case OV(BUFFER_ONE):
    if (r->n_buffered > 0)
      r->info->overlap_skipped++;
    else
      buffer_push(r, nominal_s, act_ns, policy, manual);
    return DBX_OK;
  case OV(BUFFER_ALL):
    if (r->n_buffered >= BUFFER_MAX)
      r->info->buffer_dropped++;
    else
      buffer_push(r, nominal_s, act_ns, policy, manual);
    return DBX_OK;
  case OV(CANCEL_OTHER):
    buffer_clear(r); /* only the latest waits for the canceled ones */
    buffer_push(r, nominal_s, act_ns, policy, manual);
    return stop_running(c, r, 0);
  case OV(TERMINATE_OTHER):
    buffer_clear(r);
    rc = stop_running(c, r, 1);
    if (rc == DBX_OK) rc = refresh(c, r);
    if (rc == DBX_OK) rc = start_one(c, r, nominal_s, act_ns, manual);
    return rc;
  default: /* SKIP */
    r->info->overlap_skipped++;
    return DBX_OK;
  }
}

/* Start buffered starts while nothing runs. */
static dbx_err drain_buffer(ectx *c, ScheduleRecord *r) {
  while (r->n_buffered > 0 && r->info->n_running_workflows == 0) {
    BufferedStart *b = r->buffered[0];
    memmove(r->buffered, r->buffered + 1, (r->n_buffered - 1) * sizeof *r->buffered);
    r->n_buffered--;
    dbx_err rc = start_one(c, r, b->nominal_time_ns / NS_PER_S, b->actual_time_ns, b->manual);
    protobuf_c_message_free_unpacked(&b->base, NULL);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* ------------------------------------------------------------ the engine */

/* Actions due by now: refresh, drain, then every nominal time whose actual
 * time has come, paused / limited / outside the catch-up window / by the
 * overlap policy. */
static dbx_err process(ectx *c, ScheduleRecord *r) {
  dbx_err rc = refresh(c, r);
  if (rc == DBX_OK) rc = drain_buffer(c, r);
  if (rc != DBX_OK) return rc;
  int64_t cw = catchup_ns(r);
  int64_t from = r->processed_until_ns / NS_PER_S;
  /* far behind (a long outage): count what fell out of the window at once */
  int64_t horizon = (c->now_ns - cw) / NS_PER_S;
  for (int guard = 0; from < horizon && guard < 100000; guard++) {
    int64_t t = next_nominal(r, from);
    if (t == INT64_MAX || t >= horizon) break;
    if (!state_of(r)->paused) r->info->missed_catchup_window++;
    from = t;
  }
  if (from < horizon - 1) from = horizon - 1;
  if (from > r->processed_until_ns / NS_PER_S) r->processed_until_ns = from * NS_PER_S;
  for (int guard = 0; guard < 10000; guard++) {
    int64_t t = next_nominal(r, r->processed_until_ns / NS_PER_S);
    if (t == INT64_MAX) break;
    int64_t act = actual_ns(r, t);
    if (act > c->now_ns) break;
    r->processed_until_ns = t * NS_PER_S;
    if (state_of(r)->paused) continue;
    if (state_of(r)->limited_actions && state_of(r)->remaining_actions <= 0) continue;
    if (c->now_ns - act > cw) {
      r->info->missed_catchup_window++;
      continue;
    }
    rc = take_action(c, r, t, act, overlap_of(r), 0);
    if (rc != DBX_OK) return rc;
  }
  r->info->buffer_size = (int64_t)r->n_buffered;
  return DBX_OK;
}

/* 1 while no scheduled time can act: paused, or no actions remaining. Such
 * a schedule arms no timer for its times; unpausing or an update moves
 * processed_until to the present, so the times it slept through are skipped
 * (as Temporal skips the times of a pause), not caught up. */
static int idle(ScheduleRecord *r) {
  return state_of(r)->paused || (state_of(r)->limited_actions && state_of(r)->remaining_actions <= 0);
}

static void skip_to_now(ectx *c, ScheduleRecord *r) {
  int64_t now_s = c->now_ns / NS_PER_S * NS_PER_S;
  if (r->processed_until_ns < now_s) r->processed_until_ns = now_s;
}

/* A new generation and the timer for the next thing to do. */
static dbx_err arm(ectx *c, ScheduleRecord *r) {
  int64_t when = INT64_MAX;
  if (r->n_buffered > 0) when = c->now_ns + WATCH_MS * 1000000LL;
  int64_t t = idle(r) ? INT64_MAX : next_nominal(r, r->processed_until_ns / NS_PER_S);
  if (t != INT64_MAX && t < INT64_MAX / NS_PER_S - 100000) {
    int64_t a = actual_ns(r, t);
    if (a < when) when = a;
  }
  r->generation++;
  if (when == INT64_MAX) return DBX_OK;
  RunState fake = INIT(DURABOX__SERVICE__V1__RUN_STATE);
  fake.namespace_ = r->namespace_;
  fake.workflow_id = r->schedule_id;
  fake.run_id = "";
  return svc_timer_add(c, when, TK_SCHEDULE, &fake, r->generation, 0, NULL);
}

static dbx_err process_arm_save(ectx *c, ScheduleRecord *r) {
  dbx_err rc = svc_oom_peek() ? DBX_ENOMEM : process(c, r);
  if (rc == DBX_OK) rc = arm(c, r);
  if (rc == DBX_OK) rc = rec_save(c, r);
  return rc;
}

dbx_err svc_sched_fire(ectx *c, const TimerRecord *tr) {
  ScheduleRecord *r = NULL;
  dbx_err rc = rec_load(c, tr->namespace_, tr->workflow_id, &r);
  if (rc == DBX_ENOTFOUND) return DBX_OK; /* deleted */
  if (rc != DBX_OK) return rc;
  if (r->generation == tr->event_id) rc = process_arm_save(c, r);
  rec_free(r);
  return rc;
}

/* ------------------------------------------------------------ patches */

static int policy_or(const ScheduleRecord *r, int p) { return p ? p : overlap_of(r); }

static dbx_err backfill(ectx *c, ScheduleRecord *r, const Temporal__Api__Schedule__V1__BackfillRequest *b) {
  int64_t from = dbx_pb_timestamp_ns(b->start_time) / NS_PER_S, to = dbx_pb_timestamp_ns(b->end_time) / NS_PER_S;
  int64_t t = from - 1;
  for (int n = 0; n < BACKFILL_MAX; n++) {
    t = next_nominal(r, t);
    if (t == INT64_MAX || t > to) break;
    dbx_err rc = refresh(c, r);
    if (rc == DBX_OK) rc = drain_buffer(c, r);
    if (rc == DBX_OK) rc = take_action(c, r, t, actual_ns(r, t), policy_or(r, b->overlap_policy), 1);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* Trigger, then backfills, then pause / unpause, as Temporal orders them. */
static dbx_err apply_patch(ectx *c, ScheduleRecord *r, const SchedulePatch *p) {
  if (p == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (p->trigger_immediately) {
    int64_t nominal = p->trigger_immediately->scheduled_time
                          ? dbx_pb_timestamp_ns(p->trigger_immediately->scheduled_time) / NS_PER_S
                          : c->now_ns / NS_PER_S;
    rc = refresh(c, r);
    if (rc == DBX_OK) rc = drain_buffer(c, r);
    if (rc == DBX_OK)
      rc = take_action(c, r, nominal, c->now_ns, policy_or(r, p->trigger_immediately->overlap_policy), 1);
  }
  for (size_t i = 0; rc == DBX_OK && i < p->n_backfill_request; i++) rc = backfill(c, r, p->backfill_request[i]);
  if (p->pause && p->pause[0]) {
    state_of(r)->paused = 1;
    svc_pb_setstr(&state_of(r)->notes, p->pause);
  }
  if (p->unpause && p->unpause[0]) {
    if (state_of(r)->paused) skip_to_now(c, r);
    state_of(r)->paused = 0;
    svc_pb_setstr(&state_of(r)->notes, p->unpause);
  }
  return rc;
}

/* ------------------------------------------------------------ requests */

static void token_of(const ScheduleRecord *r, uint8_t out[8]) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)r->conflict_token >> (56 - 8 * i));
}

/* Check the schedule of a create or update and compile its spec into a new
 * Schedule (*out). 0 with the job refused when bad. */
static int schedule_prepare(ectx *c, job *j, const char *ns, const Schedule *in, Schedule **out, dbx_err *rc) {
  *out = NULL;
  *rc = DBX_OK;
  const NewWorkflowExecutionInfo *nw = in && in->action ? in->action->start_workflow : NULL;
  if (nw == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "schedule action start_workflow is required");
    return 0;
  }
  /* a scheduled run's workflow id is the action's, "-" and the time (at most 32 bytes more) */
  if (!svc_check_keyed(j, "workflow_id", ns, nw->workflow_id, 32) ||
      !svc_check_id(j, "workflow_type.name", nw->workflow_type ? nw->workflow_type->name : NULL) ||
      !svc_check_keyed(j, "task_queue.name", ns, nw->task_queue ? nw->task_queue->name : NULL, 0))
    return 0;
  if (!svc_sa_check(c, j, ns, nw->search_attributes, rc)) return 0;
  ScheduleSpec *spec = NULL;
  char *err = NULL;
  *rc = svc_sched_spec_compile(in->spec, &spec, &err);
  if (*rc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "invalid schedule spec: %s", err ? err : "");
    free(err);
    *rc = DBX_OK;
    return 0;
  }
  if (*rc != DBX_OK) return 0;
  Schedule *s = PB_CLONE(Schedule, in);
  if (s == NULL) {
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    *rc = DBX_ENOMEM;
    return 0;
  }
  if (s->spec) protobuf_c_message_free_unpacked(&s->spec->base, NULL);
  s->spec = spec;
  if (s->policies == NULL) s->policies = svc_pb_new(&temporal__api__schedule__v1__schedule_policies__descriptor);
  if (s->state == NULL) s->state = svc_pb_new(&temporal__api__schedule__v1__schedule_state__descriptor);
  if (s->policies && s->policies->overlap_policy == 0) s->policies->overlap_policy = OV(SKIP);
  if (s->policies && s->policies->catchup_window == NULL)
    s->policies->catchup_window = svc_duration_new_ms(CATCHUP_DEFAULT_MS);
  *out = s;
  if (svc_oom_peek()) *rc = DBX_ENOMEM;
  return *rc == DBX_OK;
}

static int ns_and_id(ectx *c, job *j, const char *ns, const char *id) {
  return svc_check_ns(c, j, ns) && svc_check_id(j, "schedule_id", id);
}

static void fail_not_found(job *j, const char *id) {
  svc_fail_not_found(j, "schedule %s%s not found", id, "");
}

/* Load the schedule a request names; 0 (refused: NOT_FOUND) or 1. */
static int load_named(ectx *c, job *j, const char *ns, const char *id, ScheduleRecord **r, dbx_err *rc) {
  *rc = rec_load(c, ns, id, r);
  if (*rc == DBX_ENOTFOUND) {
    fail_not_found(j, id);
    *rc = DBX_OK;
    return 0;
  }
  return *rc == DBX_OK;
}

static ScheduleRecord *record_new(ectx *c, const CreateScheduleRequest *q, Schedule *s) {
  ScheduleRecord *r = svc_pb_new(&durabox__service__v1__schedule_record__descriptor);
  if (r == NULL) return NULL;
  r->namespace_ = svc_pb_strdup(q->namespace_);
  r->schedule_id = svc_pb_strdup(q->schedule_id);
  r->schedule = s;
  r->info = svc_pb_new(&temporal__api__schedule__v1__schedule_info__descriptor);
  if (r->info) r->info->create_time = svc_timestamp_new_ns(c->now_ns);
  r->memo = PB_CLONE(Memo, q->memo);
  r->search_attributes = PB_CLONE(SearchAttributes, q->search_attributes);
  r->conflict_token = 1;
  r->processed_until_ns = c->now_ns / NS_PER_S * NS_PER_S;
  r->request_id = svc_pb_strdup(q->request_id);
  return r;
}

dbx_err svc_h_create_schedule(ectx *c, job *j) {
  CreateScheduleRequest *q = svc_decode(j, &CreateScheduleRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  Schedule *s = NULL;
  ScheduleRecord *r = NULL, *old = NULL;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id)) goto out;
  if (!svc_sa_check(c, j, q->namespace_, q->search_attributes, &rc)) goto out;
  rc = rec_load(c, q->namespace_, q->schedule_id, &old);
  if (rc == DBX_OK) {
    if (q->request_id[0] && strcmp(old->request_id, q->request_id) == 0) { /* a retried create */
      CreateScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__CREATE_SCHEDULE_RESPONSE);
      uint8_t tok[8];
      token_of(old, tok);
      resp.conflict_token.data = tok;
      resp.conflict_token.len = 8;
      svc_job_reply(j, &resp.base);
      goto out;
    }
    WorkflowExecutionAlreadyStartedFailure d =
        INIT(TEMPORAL__API__ERRORDETAILS__V1__WORKFLOW_EXECUTION_ALREADY_STARTED_FAILURE);
    d.start_request_id = old->request_id;
    svc_job_fail_detail(j, DBX_GRPC_ALREADY_EXISTS, &d.base, ALREADY_STARTED_URL,
                        "schedule with this ID is already registered");
    goto out;
  }
  if (rc != DBX_ENOTFOUND) goto out;
  rc = DBX_OK;
  if (!schedule_prepare(c, j, q->namespace_, q->schedule, &s, &rc)) goto out;
  r = record_new(c, q, s);
  if (r) s = NULL; /* the record's */
  if (r == NULL || r->info == NULL || svc_oom_peek()) {
    rc = DBX_ENOMEM;
    goto out;
  }
  rc = apply_patch(c, r, q->initial_patch);
  if (rc == DBX_OK) rc = process_arm_save(c, r);
  if (rc == DBX_OK) {
    CreateScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__CREATE_SCHEDULE_RESPONSE);
    uint8_t tok[8];
    token_of(r, tok);
    resp.conflict_token.data = tok;
    resp.conflict_token.len = 8;
    svc_job_reply(j, &resp.base);
  }
out:
  if (s) protobuf_c_message_free_unpacked(&s->base, NULL);
  rec_free(r);
  rec_free(old);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* Up to max future action times from the record (limited by the remaining
 * actions), into a malloc'd array of new Timestamps. */
static Timestamp **future_times(const ScheduleRecord *r, int64_t now_ns, size_t max, size_t *n) {
  *n = 0;
  ScheduleState *st = r->schedule->state;
  if (st && st->limited_actions && st->remaining_actions < (int64_t)max)
    max = st->remaining_actions > 0 ? (size_t)st->remaining_actions : 0;
  Timestamp **out = dbx_calloc(max + 1, sizeof *out);
  if (out == NULL) {
    svc_oom_mark();
    return NULL;
  }
  int64_t t = (r->processed_until_ns > now_ns ? r->processed_until_ns : now_ns) / NS_PER_S;
  while (*n < max) {
    t = next_nominal(r, t);
    if (t == INT64_MAX) break;
    out[*n] = svc_timestamp_new_ns(actual_ns(r, t));
    if (out[*n] == NULL) break;
    (*n)++;
  }
  return out;
}

static void timestamps_free(Timestamp **t, size_t n) {
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&t[i]->base, NULL);
  free(t);
}

dbx_err svc_h_describe_schedule(ectx *c, job *j) {
  DescribeScheduleRequest *q = svc_decode(j, &DescribeScheduleRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  ScheduleRecord *r = NULL;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id) || !load_named(c, j, q->namespace_, q->schedule_id, &r, &rc))
    goto out;
  /* the running ones as of now, without writing anything */
  rc = refresh_running(c, r->namespace_, r->info, NULL);
  if (rc != DBX_OK) goto out;
  size_t nf = 0;
  Timestamp **ft = future_times(r, c->now_ns, FUTURE_MAX, &nf);
  DescribeScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_SCHEDULE_RESPONSE);
  r->info->future_action_times = ft;
  r->info->n_future_action_times = nf;
  r->info->buffer_size = (int64_t)r->n_buffered;
  resp.schedule = r->schedule;
  resp.info = r->info;
  resp.memo = r->memo;
  resp.search_attributes = r->search_attributes;
  uint8_t tok[8];
  token_of(r, tok);
  resp.conflict_token.data = tok;
  resp.conflict_token.len = 8;
  if (ft) svc_job_reply(j, &resp.base);
  r->info->future_action_times = NULL;
  r->info->n_future_action_times = 0;
  if (ft) timestamps_free(ft, nf);
out:
  rec_free(r);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static void replace_msg(ProtobufCMessage **field, const ProtobufCMessage *v) {
  if (v == NULL) return;
  ProtobufCMessage *n = svc_pb_clone(v);
  if (n == NULL) return;
  if (*field) protobuf_c_message_free_unpacked(*field, NULL);
  *field = n;
}

dbx_err svc_h_update_schedule(ectx *c, job *j) {
  UpdateScheduleRequest *q = svc_decode(j, &UpdateScheduleRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  ScheduleRecord *r = NULL;
  Schedule *s = NULL;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id) || !load_named(c, j, q->namespace_, q->schedule_id, &r, &rc))
    goto out;
  uint8_t tok[8];
  token_of(r, tok);
  if (q->conflict_token.len > 0 && (q->conflict_token.len != 8 || memcmp(q->conflict_token.data, tok, 8) != 0)) {
    svc_job_fail(j, DBX_GRPC_FAILED_PRECONDITION, "mismatched conflict token");
    goto out;
  }
  if (!svc_sa_check(c, j, q->namespace_, q->search_attributes, &rc)) goto out;
  if (!schedule_prepare(c, j, q->namespace_, q->schedule, &s, &rc)) goto out;
  protobuf_c_message_free_unpacked(&r->schedule->base, NULL);
  r->schedule = s;
  s = NULL;
  if (r->info->update_time) protobuf_c_message_free_unpacked(&r->info->update_time->base, NULL);
  r->info->update_time = svc_timestamp_new_ns(c->now_ns);
  if (q->search_attributes) replace_msg((ProtobufCMessage **)&r->search_attributes, &q->search_attributes->base);
  if (q->memo) replace_msg((ProtobufCMessage **)&r->memo, &q->memo->base);
  r->conflict_token++;
  skip_to_now(c, r);
  rc = process_arm_save(c, r);
  if (rc == DBX_OK) {
    UpdateScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_SCHEDULE_RESPONSE);
    svc_job_reply(j, &resp.base);
  }
out:
  if (s) protobuf_c_message_free_unpacked(&s->base, NULL);
  rec_free(r);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_patch_schedule(ectx *c, job *j) {
  PatchScheduleRequest *q = svc_decode(j, &PatchScheduleRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  ScheduleRecord *r = NULL;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id) || !load_named(c, j, q->namespace_, q->schedule_id, &r, &rc))
    goto out;
  rc = apply_patch(c, r, q->patch);
  if (rc == DBX_OK) rc = process_arm_save(c, r);
  if (rc == DBX_OK) {
    PatchScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__PATCH_SCHEDULE_RESPONSE);
    svc_job_reply(j, &resp.base);
  }
out:
  rec_free(r);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_delete_schedule(ectx *c, job *j) {
  DeleteScheduleRequest *q = svc_decode(j, &DeleteScheduleRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  ScheduleRecord *r = NULL;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id) || !load_named(c, j, q->namespace_, q->schedule_id, &r, &rc))
    goto out;
  size_t kl;
  char *k = sched_key(q->namespace_, q->schedule_id, &kl);
  rc = k ? dbx_store_del(c->txn, c->svc->t_meta, k, kl) : DBX_ENOMEM;
  free(k);
  if (rc == DBX_OK) {
    DeleteScheduleResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DELETE_SCHEDULE_RESPONSE);
    svc_job_reply(j, &resp.base);
  }
out:
  rec_free(r);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_list_schedule_matching_times(ectx *c, job *j) {
  ListScheduleMatchingTimesRequest *q = svc_decode(j, &ListScheduleMatchingTimesRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  ScheduleRecord *r = NULL;
  Timestamp **ts = NULL;
  size_t n = 0;
  if (!ns_and_id(c, j, q->namespace_, q->schedule_id) || !load_named(c, j, q->namespace_, q->schedule_id, &r, &rc))
    goto out;
  if (q->start_time == NULL || q->end_time == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "start_time and end_time are required");
    goto out;
  }
  ts = dbx_calloc(MATCHING_MAX + 1, sizeof *ts);
  if (ts == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  int64_t t = dbx_pb_timestamp_ns(q->start_time) / NS_PER_S - 1, end = dbx_pb_timestamp_ns(q->end_time) / NS_PER_S;
  while (n < MATCHING_MAX) {
    t = next_nominal(r, t);
    if (t == INT64_MAX || t > end) break;
    ts[n] = svc_timestamp_new_ns(actual_ns(r, t));
    if (ts[n] == NULL) break;
    n++;
  }
  ListScheduleMatchingTimesResponse resp =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_SCHEDULE_MATCHING_TIMES_RESPONSE);
  resp.start_time = ts;
  resp.n_start_time = n;
  svc_job_reply(j, &resp.base);
out:
  if (ts) timestamps_free(ts, n);
  rec_free(r);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ list */

typedef struct {
  ScheduleRecord **recs;
  ScheduleListEntry **entries;
  ScheduleListInfo **infos;
  Timestamp ***futures;
  size_t *n_futures;
  size_t n;
} list_page;

static void page_free(list_page *p) {
  for (size_t i = 0; i < p->n; i++) {
    rec_free(p->recs[i]);
    free(p->entries[i]);
    free(p->infos[i]);
    timestamps_free(p->futures[i], p->n_futures[i]);
  }
  free(p->recs);
  free(p->entries);
  free(p->infos);
  free(p->futures);
  free(p->n_futures);
}

/* Entry i of the page from its record (borrowed pointers into it). */
static int page_entry(ectx *c, list_page *p, size_t i) {
  ScheduleRecord *r = p->recs[i];
  if (refresh_running(c, r->namespace_, r->info, NULL) != DBX_OK) return -1;
  ScheduleListEntry *e = dbx_malloc(sizeof *e);
  ScheduleListInfo *li = dbx_malloc(sizeof *li);
  p->entries[i] = e;
  p->infos[i] = li;
  p->futures[i] = future_times(r, c->now_ns, 5, &p->n_futures[i]);
  if (e == NULL || li == NULL || p->futures[i] == NULL) return -1;
  temporal__api__schedule__v1__schedule_list_entry__init(e);
  temporal__api__schedule__v1__schedule_list_info__init(li);
  e->schedule_id = r->schedule_id;
  e->memo = r->memo;
  e->search_attributes = r->search_attributes;
  e->info = li;
  li->spec = r->schedule->spec;
  li->workflow_type = r->schedule->action->start_workflow->workflow_type;
  li->notes = r->schedule->state ? r->schedule->state->notes : "";
  li->paused = r->schedule->state ? r->schedule->state->paused : 0;
  li->recent_actions = r->info->recent_actions;
  li->n_recent_actions = r->info->n_recent_actions;
  li->future_action_times = p->futures[i];
  li->n_future_action_times = p->n_futures[i];
  return 0;
}

static int page_alloc(list_page *p, size_t max) {
  memset(p, 0, sizeof *p);
  p->recs = dbx_calloc(max, sizeof *p->recs);
  p->entries = dbx_calloc(max, sizeof *p->entries);
  p->infos = dbx_calloc(max, sizeof *p->infos);
  p->futures = dbx_calloc(max, sizeof *p->futures);
  p->n_futures = dbx_calloc(max, sizeof *p->n_futures);
  return p->recs && p->entries && p->infos && p->futures && p->n_futures ? 0 : -1;
}

/* 1 when the schedule r satisfies vq (NULL: every one), 0 when not, -1 on
 * OOM. A schedule's visibility is its search attributes and
 * TemporalSchedulePaused. */
static int sched_matches(const dbx_visq *vq, const ScheduleRecord *r) {
  if (vq == NULL) return 1;
  const SearchAttributes *sa = r->search_attributes;
  size_t n = sa ? sa->n_indexed_fields : 0;
  dbx_visq_sa_value *vals = dbx_calloc(n + 1, sizeof *vals);
  if (vals == NULL) return -1;
  for (size_t i = 0; i < n; i++) {
    const Payload *pv = sa->indexed_fields[i]->value;
    vals[i].name = sa->indexed_fields[i]->key;
    vals[i].json = pv ? (const char *)pv->data.data : NULL;
    vals[i].json_len = pv ? pv->data.len : 0;
  }
  int paused = r->schedule->state && r->schedule->state->paused;
  vals[n].name = "TemporalSchedulePaused";
  vals[n].json = paused ? "true" : "false";
  vals[n].json_len = strlen(vals[n].json);
  dbx_visq_record rec = {.sa = vals, .n_sa = n + 1};
  int m = dbx_visq_match(vq, &rec);
  free(vals);
  return m;
}

/* Records of ns after the id `after` (len alen) that match vq (NULL: all),
 * up to max, into p->recs; *more when another one follows. */
static dbx_err page_read(ectx *c, const char *ns, const uint8_t *after, size_t alen, size_t max,
                         const dbx_visq *vq, list_page *p, int *more) {
  size_t pl;
  char *pfx = sched_key(ns, NULL, &pl);
  char *start = pfx ? dbx_malloc(pl + alen + 1) : NULL;
  dbx_cursor *cur = NULL;
  dbx_err rc = start ? dbx_store_cursor_open(c->txn, c->svc->t_meta, &cur) : DBX_ENOMEM;
  *more = 0;
  if (rc != DBX_OK) goto out;
  memcpy(start, pfx, pl);
  if (alen) memcpy(start + pl, after, alen);
  dbx_val k, v;
  rc = dbx_store_cursor_seek(cur, start, pl + alen, &k, &v);
  for (; rc == DBX_OK; rc = dbx_store_cursor_next(cur, &k, &v)) {
    if (k.size < pl || memcmp(k.data, pfx, pl) != 0) break;
    if (alen && k.size == pl + alen && memcmp((const char *)k.data + pl, after, alen) == 0) continue;
    if (p->n == max) {
      *more = 1;
      break;
    }
    ScheduleRecord *r = NULL;
    dbx_err urc = svc_pb_unpack(&durabox__service__v1__schedule_record__descriptor, v.data, v.size, (void **)&r);
    if (urc == DBX_ENOMEM) {
      rc = urc;
      goto out;
    }
    if (r == NULL) continue;
    if (r->schedule == NULL || r->info == NULL || r->schedule->action == NULL ||
        r->schedule->action->start_workflow == NULL) {
      rec_free(r);
      continue;
    }
    int m = sched_matches(vq, r);
    if (m <= 0) {
      rec_free(r);
      if (m < 0) {
        rc = DBX_ENOMEM;
        goto out;
      }
      continue;
    }
    p->recs[p->n++] = r;
  }
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
out:
  dbx_store_cursor_close(cur);
  free(pfx);
  free(start);
  return rc;
}

/* A ListSchedules query: the visibility language over the namespace's
 * search attributes and TemporalSchedulePaused (Bool). *out NULL with the
 * job refused (INVALID_ARGUMENT naming the problem) when it does not
 * compile. */
static dbx_err compile_query(ectx *c, job *j, const char *ns, const char *text, dbx_visq **out) {
  *out = NULL;
  svc_sa_defs defs;
  dbx_err rc = svc_sa_defs_load(c, ns, &defs);
  if (rc != DBX_OK) return rc;
  dbx_visq_sa_def *all = dbx_calloc(defs.n + 1, sizeof *all);
  if (all == NULL) {
    svc_sa_defs_free(&defs);
    return DBX_ENOMEM;
  }
  if (defs.n) memcpy(all, defs.defs, defs.n * sizeof *all);
  all[defs.n] = (dbx_visq_sa_def){"TemporalSchedulePaused", DBX_VISQ_SA_BOOL};
  char err[256];
  rc = dbx_visq_create_sa(text, all, defs.n + 1, out, err, sizeof err);
  free(all);
  svc_sa_defs_free(&defs);
  if (rc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ListSchedules: %s", err);
    return DBX_OK;
  }
  return rc;
}

dbx_err svc_h_list_schedules(ectx *c, job *j) {
  ListSchedulesRequest *q = svc_decode(j, &ListSchedulesRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  list_page p;
  memset(&p, 0, sizeof p);
  dbx_visq *vq = NULL;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  if (q->query && q->query[0]) {
    rc = compile_query(c, j, q->namespace_, q->query, &vq);
    if (rc != DBX_OK || vq == NULL) goto out;
  }
  size_t max = q->maximum_page_size > 0 && q->maximum_page_size < 1000 ? (size_t)q->maximum_page_size : 1000;
  if (page_alloc(&p, max) != 0) {
    rc = DBX_ENOMEM;
    goto out;
  }
  int more = 0;
  rc = page_read(c, q->namespace_, q->next_page_token.data, q->next_page_token.len, max, vq, &p, &more);
  for (size_t i = 0; rc == DBX_OK && i < p.n; i++)
    if (page_entry(c, &p, i) != 0) rc = DBX_ENOMEM;
  if (rc != DBX_OK) goto out;
  ListSchedulesResponse resp = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_SCHEDULES_RESPONSE);
  resp.schedules = p.entries;
  resp.n_schedules = p.n;
  if (more && p.n > 0) {
    resp.next_page_token.data = (uint8_t *)p.recs[p.n - 1]->schedule_id;
    resp.next_page_token.len = strlen(p.recs[p.n - 1]->schedule_id);
  }
  svc_job_reply(j, &resp.base);
out:
  dbx_visq_destroy(vq);
  page_free(&p);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
