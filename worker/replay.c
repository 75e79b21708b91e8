/* worker/replay: history -> workflow code -> commands (see replay.h).
 *
 * Events are applied in id order. Outcome events (activity results, timer
 * fired, signals, cancel requests) become jobs that wait for the next
 * activation; an activation happens at a WorkflowTaskStarted event that
 * history shows as completed (the next event is WorkflowTaskCompleted) or
 * that is the task being processed; tasks that failed or timed out are not
 * activated, exactly as the service discarded their commands. Commands the
 * code issues are packed protobufs in a FIFO; each recorded command event
 * pops the head and compares kind and identity. Sequence numbers are shared
 * by activities and timers ("1", "2", ... in issue order). After a
 * non-determinism error the run refuses further work (bad != 0).
 * No I/O and no clocks here: time comes from WorkflowTaskStarted events. */
#include "worker/replay.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "worker/client.h"

typedef enum { K_ACT = 1, K_TIMER, K_COMPLETE, K_FAIL, K_CANCEL, K_ACT_CANCEL } cmd_kind;

typedef struct {
  cmd_kind kind;
  int64_t seq;
  char *type; /* activity type */
  uint8_t *packed;
  size_t len;
  int64_t activation;
} pcmd;

typedef enum { J_ACT = 1, J_TIMER, J_SIGNAL, J_CANCEL } job_kind;

typedef struct {
  job_kind kind;
  int64_t seq;
  dbx_act_outcome o; /* strings owned (cast away const on free) */
  char *name;
  char *json;
  size_t len;
} job;

typedef struct {
  int64_t event_id, seq;
  int32_t attempt;
  int resolved; /* activities: an outcome event has been applied */
} idmap;

struct dbx_wf {
  const dbx_workflow_type *t;
  char *wid, *rid, *task_queue;
  void *state;
  int created, have_start, closed, replaying, bad;
  char *input;
  size_t input_len;
  int64_t last_event, seq, now_ms;
  int64_t activation, last_completed_activation;
  pcmd *cmds;
  size_t ncmds, head, cap_cmds, matched;
  job *jobs;
  size_t njobs, cap_jobs;
  idmap *acts, *timers;
  size_t nacts, cap_acts, ntimers, cap_timers;
  int64_t err_event;
  char err[512];
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *p = realloc(*arr, nc * elem);
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

dbx_err dbx_wf_run_create(const dbx_workflow_type *t, const char *workflow_id, const char *run_id,
                          dbx_wf_run **out) {
  if (!t || !workflow_id || !run_id || !out) return DBX_EINVAL;
  dbx_wf_run *r = calloc(1, sizeof *r);
  if (!r) return DBX_ENOMEM;
  r->t = t;
  r->wid = dbx_strdup(workflow_id);
  r->rid = dbx_strdup(run_id);
  if (!r->wid || !r->rid) {
    dbx_wf_run_destroy(r);
    return DBX_ENOMEM;
  }
  *out = r;
  return DBX_OK;
}

static void job_free(job *j) {
  free((char *)j->o.result_json);
  free((char *)j->o.failure_type);
  free((char *)j->o.failure_message);
  free(j->name);
  free(j->json);
}

void dbx_wf_run_destroy(dbx_wf_run *r) {
  if (!r) return;
  if (r->state && r->t->destroy) r->t->destroy(r->state);
  for (size_t i = 0; i < r->ncmds; i++) {
    free(r->cmds[i].type);
    free(r->cmds[i].packed);
  }
  for (size_t i = 0; i < r->njobs; i++) job_free(&r->jobs[i]);
  free(r->cmds);
  free(r->jobs);
  free(r->acts);
  free(r->timers);
  free(r->input);
  free(r->wid);
  free(r->rid);
  free(r->task_queue);
  free(r);
}

int64_t dbx_wf_run_last_event_id(const dbx_wf_run *r) { return r->last_event; }
const char *dbx_wf_run_error(const dbx_wf_run *r) { return r->err; }
int64_t dbx_wf_run_error_event(const dbx_wf_run *r) { return r->err_event; }
size_t dbx_wf_run_commands_matched(const dbx_wf_run *r) { return r->matched; }
int dbx_wf_run_closed(const dbx_wf_run *r) { return r->closed; }

static void set_bad(dbx_wf_run *r, int64_t event_id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_bad(dbx_wf_run *r, int64_t event_id, const char *fmt, ...) {
  if (r->bad) return;
  r->bad = 1;
  r->err_event = event_id;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------ commands */

static int64_t push_cmd(dbx_wf *wf, cmd_kind kind, int64_t seq, const char *type, Command *c) {
  if (grow((void **)&wf->cmds, &wf->cap_cmds, wf->ncmds + 1, sizeof *wf->cmds)) return -1;
  pcmd *p = &wf->cmds[wf->ncmds];
  memset(p, 0, sizeof *p);
  p->len = protobuf_c_message_get_packed_size(&c->base);
  p->packed = malloc(p->len ? p->len : 1);
  p->type = type ? dbx_strdup(type) : NULL;
  if (!p->packed || (type && !p->type)) {
    free(p->packed);
    free(p->type);
    return -1;
  }
  protobuf_c_message_pack(&c->base, p->packed);
  p->kind = kind;
  p->seq = seq;
  p->activation = wf->activation;
  wf->ncmds++;
  return seq;
}

static void set_dur(Duration *d, int64_t ms) {
  d->seconds = ms / 1000;
  d->nanos = (int32_t)((ms % 1000) * 1000000);
}

int64_t dbx_wf_schedule_activity(dbx_wf *wf, const char *type, const char *input_json,
                                 const dbx_activity_opts *o) {
  if (!wf || wf->closed || wf->bad || !type) return -1;
  dbx_activity_opts def = {0};
  if (!o) o = &def;
  int64_t seq = wf->seq + 1;
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)seq);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ScheduleActivityTaskCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration s2c = INIT(GOOGLE__PROTOBUF__DURATION), st2c = INIT(GOOGLE__PROTOBUF__DURATION),
           hb = INIT(GOOGLE__PROTOBUF__DURATION), ii = INIT(GOOGLE__PROTOBUF__DURATION),
           mi = INIT(GOOGLE__PROTOBUF__DURATION);
  RetryPolicy rp = INIT(TEMPORAL__API__COMMON__V1__RETRY_POLICY);
  c.command_type = CT(SCHEDULE_ACTIVITY_TASK);
  c.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  c.schedule_activity_task_command_attributes = &a;
  a.activity_id = id;
  at.name = (char *)type;
  a.activity_type = &at;
  tq.name = (char *)(o->task_queue ? o->task_queue : (wf->task_queue ? wf->task_queue : ""));
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  a.task_queue = &tq;
  a.input = dbx_payloads_from_json(input_json, input_json ? strlen(input_json) : 0);
  if (!a.input) return -1;
  int64_t start_ms = o->start_to_close_ms, sched_ms = o->schedule_to_close_ms;
  if (start_ms <= 0 && sched_ms <= 0) start_ms = 600000;
  if (start_ms > 0) set_dur(&st2c, start_ms), a.start_to_close_timeout = &st2c;
  if (sched_ms > 0) set_dur(&s2c, sched_ms), a.schedule_to_close_timeout = &s2c;
  if (o->heartbeat_ms > 0) set_dur(&hb, o->heartbeat_ms), a.heartbeat_timeout = &hb;
  set_dur(&ii, o->initial_interval_ms > 0 ? o->initial_interval_ms : 1000);
  rp.initial_interval = &ii;
  rp.backoff_coefficient = o->backoff_coefficient >= 1.0 ? o->backoff_coefficient : 2.0;
  if (o->maximum_interval_ms > 0) set_dur(&mi, o->maximum_interval_ms), rp.maximum_interval = &mi;
  rp.maximum_attempts = o->retry_class == DBX_AT_MOST_ONCE ? 1 : o->maximum_attempts;
  size_t nnr = 0;
  if (o->non_retryable_error_types)
    while (o->non_retryable_error_types[nnr]) nnr++;
  rp.n_non_retryable_error_types = nnr;
  rp.non_retryable_error_types = (char **)o->non_retryable_error_types;
  a.retry_policy = &rp;
  /* The class travels with the task, so the worker that runs it journals an
   * at_most_once step even when its activity type is safe_to_retry by default
   * (sandbox.exec: the class is declared per step). */
  Header hdr = INIT(TEMPORAL__API__COMMON__V1__HEADER);
  Temporal__Api__Common__V1__Header__FieldsEntry fe =
      INIT(TEMPORAL__API__COMMON__V1__HEADER__FIELDS_ENTRY);
  Temporal__Api__Common__V1__Header__FieldsEntry *fes[1] = {&fe};
  Payloads *cls = NULL;
  if (o->retry_class == DBX_AT_MOST_ONCE) {
    cls = dbx_payloads_from_json("\"at_most_once\"", 14);
    if (!cls || cls->n_payloads != 1) {
      dbx_payloads_free(cls);
      dbx_payloads_free(a.input);
      return -1;
    }
    fe.key = DBX_RETRY_CLASS_HEADER;
    fe.value = cls->payloads[0];
    hdr.n_fields = 1;
    hdr.fields = fes;
    a.header = &hdr;
  }
  int64_t rc = push_cmd(wf, K_ACT, seq, type, &c);
  dbx_payloads_free(cls);
  dbx_payloads_free(a.input);
  if (rc > 0) wf->seq = seq;
  return rc;
}

int64_t dbx_wf_start_timer(dbx_wf *wf, int64_t duration_ms) {
  if (!wf || wf->closed || wf->bad) return -1;
  int64_t seq = wf->seq + 1;
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)seq);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  StartTimerCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__START_TIMER_COMMAND_ATTRIBUTES);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  set_dur(&d, duration_ms > 0 ? duration_ms : 1);
  a.timer_id = id;
  a.start_to_fire_timeout = &d;
  c.command_type = CT(START_TIMER);
  c.attributes_case = CMD(START_TIMER);
  c.start_timer_command_attributes = &a;
  int64_t rc = push_cmd(wf, K_TIMER, seq, NULL, &c);
  if (rc > 0) wf->seq = seq;
  return rc;
}

int dbx_wf_cancel_activity(dbx_wf *wf, int64_t seq) {
  if (!wf || wf->closed || wf->bad) return -1;
  int64_t sched = 0;
  int resolved = 0;
  for (size_t i = 0; i < wf->nacts; i++)
    if (wf->acts[i].seq == seq) sched = wf->acts[i].event_id, resolved = wf->acts[i].resolved;
  /* an outcome already in history (delivered in this activation or before):
   * the service has nothing left to cancel and would reject the command */
  if (!sched || resolved) return -1;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  RequestCancelActivityTaskCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__REQUEST_CANCEL_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  a.scheduled_event_id = sched;
  c.command_type = CT(REQUEST_CANCEL_ACTIVITY_TASK);
  c.attributes_case = CMD(REQUEST_CANCEL_ACTIVITY_TASK);
  c.request_cancel_activity_task_command_attributes = &a;
  return push_cmd(wf, K_ACT_CANCEL, seq, NULL, &c) == seq ? 0 : -1;
}

void dbx_wf_complete(dbx_wf *wf, const char *result_json) {
  if (!wf || wf->closed || wf->bad) return;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  a.result = dbx_payloads_from_json(result_json, result_json ? strlen(result_json) : 0);
  c.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  c.complete_workflow_execution_command_attributes = &a;
  if (a.result && push_cmd(wf, K_COMPLETE, 0, NULL, &c) == 0) wf->closed = 1;
  dbx_payloads_free(a.result);
}

void dbx_wf_fail(dbx_wf *wf, const char *type, const char *message) {
  if (!wf || wf->closed || wf->bad) return;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  FailWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__FAIL_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  f.message = (char *)(message ? message : "");
  f.source = "durabox";
  ai.type = (char *)(type ? type : "");
  f.failure_info_case = FI(APPLICATION_FAILURE_INFO);
  f.application_failure_info = &ai;
  a.failure = &f;
  c.command_type = CT(FAIL_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(FAIL_WORKFLOW_EXECUTION);
  c.fail_workflow_execution_command_attributes = &a;
  if (push_cmd(wf, K_FAIL, 0, NULL, &c) == 0) wf->closed = 1;
}

void dbx_wf_cancel_done(dbx_wf *wf) {
  if (!wf || wf->closed || wf->bad) return;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CancelWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__CANCEL_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  c.command_type = CT(CANCEL_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(CANCEL_WORKFLOW_EXECUTION);
  c.cancel_workflow_execution_command_attributes = &a;
  if (push_cmd(wf, K_CANCEL, 0, NULL, &c) == 0) wf->closed = 1;
}

int64_t dbx_wf_now_ms(const dbx_wf *wf) { return wf->now_ms; }
const char *dbx_wf_workflow_id(const dbx_wf *wf) { return wf->wid; }
const char *dbx_wf_run_id(const dbx_wf *wf) { return wf->rid; }
int dbx_wf_is_replaying(const dbx_wf *wf) { return wf->replaying; }

void dbx_wf_log(const dbx_wf *wf, const char *fmt, ...) {
  if (wf->replaying || !dbx_log_enabled(DBX_LOG_INFO)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  dbx_log(DBX_LOG_INFO, "workflow", "%s/%s: %s", wf->wid, wf->rid, buf);
}

dbx_err dbx_wf_run_commands(const dbx_wf_run *r, Command ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cnt = r->ncmds - r->head;
  if (!cnt) return DBX_OK;
  Command **arr = calloc(cnt, sizeof *arr);
  if (!arr) return DBX_ENOMEM;
  for (size_t i = 0; i < cnt; i++) {
    const pcmd *p = &r->cmds[r->head + i];
    arr[i] = (Command *)protobuf_c_message_unpack(&Command__D, NULL, p->len, p->packed);
    if (!arr[i]) {
      dbx_wf_run_commands_free(arr, i);
      return DBX_ENOMEM;
    }
  }
  *out = arr;
  *n = cnt;
  return DBX_OK;
}

void dbx_wf_run_commands_free(Command **cmds, size_t n) {
  if (!cmds) return;
  for (size_t i = 0; i < n; i++)
    if (cmds[i]) protobuf_c_message_free_unpacked(&cmds[i]->base, NULL);
  free(cmds);
}

dbx_err dbx_wf_run_query(dbx_wf_run *r, const char *name, char **json) {
  *json = NULL;
  if (!r->state) return DBX_ESTATE;
  if (!r->t->on_query) return DBX_ENOTFOUND;
  *json = r->t->on_query(r->state, name);
  return *json ? DBX_OK : DBX_ENOTFOUND;
}

/* ------------------------------------------------------------ matching */

static void describe_cmd(const pcmd *p, char *buf, size_t n, int with_id) {
  switch (p->kind) {
  case K_ACT:
    if (with_id)
      snprintf(buf, n, "scheduled '%s' (activity id %lld)", p->type, (long long)p->seq);
    else
      snprintf(buf, n, "scheduled '%s'", p->type);
    break;
  case K_TIMER: snprintf(buf, n, "started timer %lld", (long long)p->seq); break;
  case K_COMPLETE: snprintf(buf, n, "completed the workflow"); break;
  case K_FAIL: snprintf(buf, n, "failed the workflow"); break;
  case K_CANCEL: snprintf(buf, n, "canceled the workflow"); break;
  case K_ACT_CANCEL: snprintf(buf, n, "requested cancellation of activity %lld", (long long)p->seq); break;
  }
}

static const char *event_name(int t) {
  switch (t) {
  case ET(ACTIVITY_TASK_SCHEDULED): return "ActivityTaskScheduled";
  case ET(TIMER_STARTED): return "TimerStarted";
  case ET(WORKFLOW_EXECUTION_COMPLETED): return "WorkflowExecutionCompleted";
  case ET(WORKFLOW_EXECUTION_FAILED): return "WorkflowExecutionFailed";
  case ET(WORKFLOW_EXECUTION_CANCELED): return "WorkflowExecutionCanceled";
  case ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW): return "WorkflowExecutionContinuedAsNew";
  case ET(MARKER_RECORDED): return "MarkerRecorded";
  case ET(TIMER_CANCELED): return "TimerCanceled";
  case ET(ACTIVITY_TASK_CANCEL_REQUESTED): return "ActivityTaskCancelRequested";
  case ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED): return "StartChildWorkflowExecutionInitiated";
  case ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED): return "SignalExternalWorkflowExecutionInitiated";
  case ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED): return "RequestCancelExternalWorkflowExecutionInitiated";
  case ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES): return "UpsertWorkflowSearchAttributes";
  default: return "a command event";
  }
}

static int is_command_event(int t) {
  switch (t) {
  case ET(ACTIVITY_TASK_SCHEDULED):
  case ET(TIMER_STARTED):
  case ET(WORKFLOW_EXECUTION_COMPLETED):
  case ET(WORKFLOW_EXECUTION_FAILED):
  case ET(WORKFLOW_EXECUTION_CANCELED):
  case ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW):
  case ET(MARKER_RECORDED):
  case ET(TIMER_CANCELED):
  case ET(ACTIVITY_TASK_CANCEL_REQUESTED):
  case ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED):
  case ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED):
  case ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED):
  case ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES): return 1;
  default: return 0;
  }
}

static idmap *find_map(idmap *m, size_t n, int64_t event_id) {
  for (size_t i = n; i-- > 0;)
    if (m[i].event_id == event_id) return &m[i];
  return NULL;
}

static void match_command_event(dbx_wf_run *r, const HistoryEvent *e) {
  char hist[256], code[256];
  int t = e->event_type;
  const char *hname = event_name(t);
  snprintf(hist, sizeof hist, "%s", hname);
  if (t == ET(ACTIVITY_TASK_SCHEDULED) && e->activity_task_scheduled_event_attributes) {
    const ActivityTaskScheduledEventAttributes *a = e->activity_task_scheduled_event_attributes;
    snprintf(hist, sizeof hist, "%s '%s' (activity id %s)", hname,
             a->activity_type ? a->activity_type->name : "", a->activity_id);
  } else if (t == ET(TIMER_STARTED) && e->timer_started_event_attributes) {
    snprintf(hist, sizeof hist, "%s (timer id %s)", hname, e->timer_started_event_attributes->timer_id);
  }
  if (r->head >= r->ncmds) {
    set_bad(r, e->event_id, "nondeterminism at event %lld: history has %s, workflow code issued no command",
            (long long)e->event_id, hist);
    return;
  }
  pcmd *p = &r->cmds[r->head];
  int ok = 0, same_id = 1;
  char seq[24];
  snprintf(seq, sizeof seq, "%lld", (long long)p->seq);
  switch (t) {
  case ET(ACTIVITY_TASK_SCHEDULED): {
    const ActivityTaskScheduledEventAttributes *a = e->activity_task_scheduled_event_attributes;
    if (p->kind == K_ACT && a) {
      same_id = strcmp(a->activity_id, seq) == 0;
      ok = same_id && a->activity_type && strcmp(a->activity_type->name, p->type) == 0;
      if (ok) {
        if (grow((void **)&r->acts, &r->cap_acts, r->nacts + 1, sizeof *r->acts)) {
          set_bad(r, e->event_id, "out of memory");
          return;
        }
        r->acts[r->nacts++] = (idmap){e->event_id, p->seq, 0, 0};
      }
    }
    break;
  }
  case ET(TIMER_STARTED): {
    const TimerStartedEventAttributes *a = e->timer_started_event_attributes;
    if (p->kind == K_TIMER && a && strcmp(a->timer_id, seq) == 0) {
      if (grow((void **)&r->timers, &r->cap_timers, r->ntimers + 1, sizeof *r->timers)) {
        set_bad(r, e->event_id, "out of memory");
        return;
      }
      r->timers[r->ntimers++] = (idmap){e->event_id, p->seq, 0, 0};
      ok = 1;
    }
    break;
  }
  case ET(ACTIVITY_TASK_CANCEL_REQUESTED): {
    const ActivityTaskCancelRequestedEventAttributes *a =
        e->activity_task_cancel_requested_event_attributes;
    idmap *m = a ? find_map(r->acts, r->nacts, a->scheduled_event_id) : NULL;
    ok = p->kind == K_ACT_CANCEL && m && m->seq == p->seq;
    break;
  }
  case ET(WORKFLOW_EXECUTION_COMPLETED): ok = p->kind == K_COMPLETE; break;
  case ET(WORKFLOW_EXECUTION_FAILED): ok = p->kind == K_FAIL; break;
  case ET(WORKFLOW_EXECUTION_CANCELED): ok = p->kind == K_CANCEL; break;
  default: ok = 0;
  }
  if (!ok) {
    describe_cmd(p, code, sizeof code, !same_id || p->kind != K_ACT || t != ET(ACTIVITY_TASK_SCHEDULED) ? 1 : 0);
    set_bad(r, e->event_id, "nondeterminism at event %lld: history has %s, workflow code %s",
            (long long)e->event_id, hist, code);
    return;
  }
  r->head++;
  r->matched++;
}

/* Commands of an activation whose task history recorded as completed must
 * all have been matched by now. */
static void check_unmatched(dbx_wf_run *r, int64_t event_id) {
  if (r->head < r->ncmds && r->cmds[r->head].activation <= r->last_completed_activation) {
    char code[256];
    describe_cmd(&r->cmds[r->head], code, sizeof code, 1);
    set_bad(r, event_id,
            "nondeterminism at event %lld: workflow code %s, history has no matching event",
            (long long)event_id, code);
  }
}

static job *new_job(dbx_wf_run *r, job_kind k, int64_t seq) {
  if (grow((void **)&r->jobs, &r->cap_jobs, r->njobs + 1, sizeof *r->jobs)) return NULL;
  job *j = &r->jobs[r->njobs++];
  memset(j, 0, sizeof *j);
  j->kind = k;
  j->seq = seq;
  return j;
}

static const Failure *app_failure(const Failure *f) {
  for (const Failure *x = f; x; x = x->cause)
    if (x->failure_info_case == FI(APPLICATION_FAILURE_INFO)) return x;
  return f;
}

static int activity_outcome(dbx_wf_run *r, const HistoryEvent *e) {
  int64_t sched = 0;
  dbx_act_outcome o = {0};
  const Failure *f = NULL;
  const Payloads *res = NULL;
  switch (e->event_type) {
  case ET(ACTIVITY_TASK_COMPLETED):
    if (!e->activity_task_completed_event_attributes) return 0;
    sched = e->activity_task_completed_event_attributes->scheduled_event_id;
    res = e->activity_task_completed_event_attributes->result;
    o.status = DBX_ACT_COMPLETED;
    break;
  case ET(ACTIVITY_TASK_FAILED):
    if (!e->activity_task_failed_event_attributes) return 0;
    sched = e->activity_task_failed_event_attributes->scheduled_event_id;
    f = e->activity_task_failed_event_attributes->failure;
    o.status = DBX_ACT_FAILED;
    break;
  case ET(ACTIVITY_TASK_TIMED_OUT):
    if (!e->activity_task_timed_out_event_attributes) return 0;
    sched = e->activity_task_timed_out_event_attributes->scheduled_event_id;
    f = e->activity_task_timed_out_event_attributes->failure;
    o.status = DBX_ACT_TIMED_OUT;
    break;
  case ET(ACTIVITY_TASK_CANCELED):
    if (!e->activity_task_canceled_event_attributes) return 0;
    sched = e->activity_task_canceled_event_attributes->scheduled_event_id;
    o.status = DBX_ACT_CANCELED;
    break;
  default: return 0;
  }
  idmap *m = find_map(r->acts, r->nacts, sched);
  if (!m) {
    set_bad(r, e->event_id,
            "nondeterminism at event %lld: activity outcome for scheduled event %lld that workflow code never scheduled",
            (long long)e->event_id, (long long)sched);
    return 0;
  }
  m->resolved = 1;
  job *j = new_job(r, J_ACT, m->seq);
  if (!j) return -1;
  j->o.status = o.status;
  j->o.attempts = m->attempt;
  char *rj = o.status == DBX_ACT_COMPLETED ? dbx_payloads_to_json(res) : dbx_strdup("null");
  const Failure *af = app_failure(f);
  const char *ft = (af && af->failure_info_case == FI(APPLICATION_FAILURE_INFO) &&
                    af->application_failure_info)
                       ? af->application_failure_info->type
                       : "";
  j->o.non_retryable = (af && af->failure_info_case == FI(APPLICATION_FAILURE_INFO) &&
                        af->application_failure_info)
                           ? af->application_failure_info->non_retryable
                           : 0;
  j->o.result_json = rj;
  j->o.result_len = rj ? strlen(rj) : 0;
  j->o.failure_type = dbx_strdup(ft);
  j->o.failure_message = dbx_strdup(af ? af->message : (f ? f->message : ""));
  if (!rj || !j->o.failure_type || !j->o.failure_message) return -1;
  return 0;
}

static void activate(dbx_wf_run *r, const HistoryEvent *e, int replaying) {
  check_unmatched(r, e->event_id);
  if (r->bad) return;
  r->activation++;
  r->replaying = replaying;
  if (e->event_time) r->now_ms = e->event_time->seconds * 1000 + e->event_time->nanos / 1000000;
  if (!r->created && r->have_start) {
    r->created = 1;
    r->state = r->t->create(r, r->input ? r->input : "null", r->input ? r->input_len : 4);
    if (!r->state && !r->closed) dbx_wf_fail(r, "WorkflowError", "workflow code could not start");
  }
  for (size_t i = 0; i < r->njobs; i++) {
    job *j = &r->jobs[i];
    if (r->closed || r->bad || !r->state) break;
    switch (j->kind) {
    case J_ACT:
      if (r->t->on_activity) r->t->on_activity(r->state, r, j->seq, &j->o);
      break;
    case J_TIMER:
      if (r->t->on_timer) r->t->on_timer(r->state, r, j->seq);
      break;
    case J_SIGNAL:
      if (r->t->on_signal) r->t->on_signal(r->state, r, j->name, j->json, j->len);
      break;
    case J_CANCEL:
      if (r->t->on_cancel) r->t->on_cancel(r->state, r);
      else dbx_wf_cancel_done(r);
      break;
    }
  }
  for (size_t i = 0; i < r->njobs; i++) job_free(&r->jobs[i]);
  r->njobs = 0;
}

dbx_err dbx_wf_run_apply(dbx_wf_run *r, HistoryEvent *const *events, size_t n,
                         int64_t started_event_id) {
  if (!r || (n && !events)) return DBX_EINVAL;
  if (r->bad) return DBX_ESTATE;
  for (size_t i = 0; i < n; i++) {
    const HistoryEvent *e = events[i];
    if (e->event_id <= r->last_event) continue;
    if (e->event_id != r->last_event + 1) return DBX_EINVAL;
    r->last_event = e->event_id;
    int t = e->event_type;
    if (is_command_event(t)) {
      match_command_event(r, e);
    } else if (t == ET(WORKFLOW_EXECUTION_STARTED)) {
      const WorkflowExecutionStartedEventAttributes *a = e->workflow_execution_started_event_attributes;
      free(r->input);
      r->input = a ? dbx_payloads_to_json(a->input) : dbx_strdup("null");
      if (!r->input) return DBX_ENOMEM;
      r->input_len = strlen(r->input);
      if (a && a->task_queue && !r->task_queue) r->task_queue = dbx_strdup(a->task_queue->name);
      r->have_start = 1;
    } else if (t == ET(WORKFLOW_TASK_STARTED)) {
      int next_completed = i + 1 < n && events[i + 1]->event_type == ET(WORKFLOW_TASK_COMPLETED);
      if (started_event_id > 0 && e->event_id == started_event_id)
        activate(r, e, 0);
      else if (next_completed)
        activate(r, e, 1);
      else if (started_event_id <= 0 && i + 1 == n)
        activate(r, e, 0);
    } else if (t == ET(WORKFLOW_TASK_COMPLETED)) {
      r->last_completed_activation = r->activation;
    } else if (t == ET(ACTIVITY_TASK_STARTED)) {
      const ActivityTaskStartedEventAttributes *a = e->activity_task_started_event_attributes;
      idmap *m = a ? find_map(r->acts, r->nacts, a->scheduled_event_id) : NULL;
      if (m) m->attempt = a->attempt;
    } else if (t == ET(ACTIVITY_TASK_COMPLETED) || t == ET(ACTIVITY_TASK_FAILED) ||
               t == ET(ACTIVITY_TASK_TIMED_OUT) || t == ET(ACTIVITY_TASK_CANCELED)) {
      if (activity_outcome(r, e) < 0) return DBX_ENOMEM;
    } else if (t == ET(TIMER_FIRED)) {
      const TimerFiredEventAttributes *a = e->timer_fired_event_attributes;
      idmap *m = a ? find_map(r->timers, r->ntimers, a->started_event_id) : NULL;
      if (!m) {
        set_bad(r, e->event_id, "nondeterminism at event %lld: TimerFired for a timer workflow code never started",
                (long long)e->event_id);
      } else if (!new_job(r, J_TIMER, m->seq)) {
        return DBX_ENOMEM;
      }
    } else if (t == ET(WORKFLOW_EXECUTION_SIGNALED)) {
      const WorkflowExecutionSignaledEventAttributes *a = e->workflow_execution_signaled_event_attributes;
      job *j = new_job(r, J_SIGNAL, 0);
      if (!j) return DBX_ENOMEM;
      j->name = dbx_strdup(a ? a->signal_name : "");
      j->json = a ? dbx_payloads_to_json(a->input) : dbx_strdup("null");
      if (!j->name || !j->json) return DBX_ENOMEM;
      j->len = strlen(j->json);
    } else if (t == ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED)) {
      if (!new_job(r, J_CANCEL, 0)) return DBX_ENOMEM;
    }
    if (r->bad) return DBX_ESTATE;
  }
  return DBX_OK;
}

dbx_err dbx_replay_run(const dbx_workflow_type *t, HistoryEvent *const *events, size_t n,
                       dbx_replay_report *out) {
  if (!t || !out || (n && !events)) return DBX_EINVAL;
  memset(out, 0, sizeof *out);
  dbx_wf_run *r = NULL;
  dbx_err rc = dbx_wf_run_create(t, "replay", "replay", &r);
  if (rc != DBX_OK) return rc;
  rc = dbx_wf_run_apply(r, events, n, 0);
  if (rc == DBX_OK && n) check_unmatched(r, events[n - 1]->event_id);
  out->events = (size_t)r->last_event;
  out->commands_matched = r->matched;
  if (rc == DBX_OK || rc == DBX_ESTATE) {
    out->deterministic = !r->bad;
    out->event_id = r->err_event;
    snprintf(out->message, sizeof out->message, "%s", r->err);
    rc = DBX_OK;
  } else if (rc == DBX_EINVAL) {
    snprintf(out->message, sizeof out->message, "history is not contiguous after event %lld",
             (long long)r->last_event);
  }
  dbx_wf_run_destroy(r);
  return rc;
}
