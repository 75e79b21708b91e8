/* worker/replay: history -> workflow code -> commands (see replay.h).
 *
 * Events are applied in id order. Outcome events (activity results, timer
 * fired, signals, cancel requests, child workflow and external-request
 * outcomes) become jobs that wait for the next
 * activation; an activation happens at a WorkflowTaskStarted event that
 * history shows as completed (the next event is WorkflowTaskCompleted) or
 * that is the task being processed; tasks that failed or timed out are not
 * activated, exactly as the service discarded their commands. Commands the
 * code issues are packed protobufs in a FIFO; each recorded command event
 * pops the head and compares kind and identity. Sequence numbers are shared
 * by activities, timers, children, signal waits and external requests ("1",
 * "2", ... in issue order). A StartTimer cancelled in the activation that
 * issued it is taken out of the FIFO (it was never sent). A signal wait is a
 * waiter plus an optional timer: whichever of signal and TimerFired history
 * delivers first ends it, and a signal cancels the timer. A replayed
 * activation first reads ahead the markers its task recorded (lookahead[]),
 * which marker, side-effect and version calls consume. pending[] lists what
 * the code waits on, for __stack_trace. Updates: after an activation's jobs,
 * its update requests run (run_updates): new ones from the task's protocol
 * messages (validated; a rejection is a message in rejects[], nothing else),
 * replayed ones from the Accepted events its task's completion recorded; an
 * acceptance and a response are PROTOCOL_MESSAGE commands in the FIFO that
 * carry their message and are matched by the Accepted / Completed events
 * (update id); upds[] maps handles to update ids. After a non-determinism
 * error the run refuses further work (bad != 0).
 * No I/O and no clocks here: time comes from WorkflowTaskStarted events. */
#include "worker/replay.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/util.h"
#include "worker/client.h"

typedef enum {
  K_ACT = 1, K_TIMER, K_COMPLETE, K_FAIL, K_CANCEL, K_ACT_CANCEL,
  K_TIMER_CANCEL, K_MARKER, K_CHILD, K_CANCEL_EXT, K_SIGNAL_EXT, K_UPSERT_SA, K_MEMO, K_CAN,
  K_UPD_ACCEPT, K_UPD_RESPOND /* PROTOCOL_MESSAGE commands: an update's acceptance / response */
} cmd_kind;

typedef struct {
  cmd_kind kind;
  int64_t seq;
  char *type;  /* activity / child workflow type, marker name, signal name */
  char *ident; /* child / external workflow id, update id */
  uint8_t *packed;
  size_t len;
  int64_t activation;
  uint8_t *msg; /* K_UPD_*: the packed ProtocolMessage the command names */
  size_t msg_len;
} pcmd;

/* An accepted update; its handle is its index + 1 (acceptance order). */
typedef struct {
  char *id, *name;
  int done; /* its response was issued */
} upd;

/* A packed ProtocolMessage to send with this task (an update's rejection). */
typedef struct {
  uint8_t *packed;
  size_t len;
} pmsg;

typedef enum { J_ACT = 1, J_TIMER, J_SIGNAL, J_CANCEL, J_CHILD, J_EXT } job_kind;

typedef struct {
  job_kind kind;
  int64_t seq;
  dbx_act_outcome o;   /* strings owned (cast away const on free) */
  dbx_child_outcome co; /* J_CHILD: strings owned */
  int failed;          /* J_EXT */
  char *name;
  char *json;
  size_t len;
} job;

typedef struct {
  int64_t event_id, seq;
  int32_t attempt;
  int resolved; /* an outcome event has been applied (timers: fired or cancelled) */
} idmap;

/* A child workflow this code started: event_id is its Initiated event (0
 * until history records it). */
typedef struct {
  int64_t seq, event_id;
  char *wid, *run_id, *type;
  int done;
} kid;

/* A dbx_wf_await_signal wait; timer_seq 0 = no timeout. */
typedef struct {
  int64_t seq, timer_seq;
  char *name;
  int done;
} waiter;

/* A marker this workflow task recorded, read ahead from history when the
 * task is replayed; key: the change id of a "Version" marker. */
typedef struct {
  char *name, *key, *value;
  int used;
} lookahead;

typedef struct {
  char *change_id;
  int64_t version;
} version;

/* What the code waits on, for __stack_trace: 'a' activity, 't' timer, 'c' child. */
typedef struct {
  char kind;
  int64_t seq;
  const char *label; /* borrowed: the pcmd's or kid's type */
} pending;

struct dbx_wf {
  const dbx_workflow_type *t;
  char *wid, *rid, *task_queue;
  void *state;
  int created, have_start, closed, replaying, bad;
  int oom; /* an allocation failed while the code ran: the run is unusable (DBX_ENOMEM) */
  char *input;
  size_t input_len;
  int64_t last_event, seq, now_ms;
  int64_t activation, last_completed_activation;
  int64_t hist_len, hist_bytes;
  int64_t side_effects; /* dbx_wf_side_effect calls: the Go SDK's side-effect-id */
  int suggest_can;
  pcmd *cmds;
  size_t ncmds, head, cap_cmds, matched;
  job *jobs;
  size_t njobs, cap_jobs;
  idmap *acts, *timers, *exts;
  size_t nacts, cap_acts, ntimers, cap_timers, nexts, cap_exts;
  kid *kids;
  size_t nkids, cap_kids;
  waiter *waits;
  size_t nwaits, cap_waits;
  lookahead *look;
  size_t nlook, cap_look;
  version *vers;
  size_t nvers, cap_vers;
  pending *pend;
  size_t npend, cap_pend;
  /* the replayed activation's events (borrowed during dbx_wf_run_apply),
   * read ahead for markers on the first marker call (look_ready) */
  HistoryEvent *const *act_events;
  size_t act_i, act_n;
  int look_ready;
  char **scratch; /* values returned to the code, freed at the next activation */
  size_t nscratch, cap_scratch;
  upd *upds;
  size_t nupds, cap_upds;
  pmsg *rejects; /* rejections of the current activation */
  size_t nrejects, cap_rejects;
  ProtocolMessage *const *msgs; /* the task's messages (borrowed: dbx_wf_run_set_messages) */
  size_t nmsgs;
  int64_t err_event;
  char err[512];
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *p = dbx_realloc(*arr, nc * elem);
  if (!p) return -1;
  *arr = p;
  *cap = nc;
  return 0;
}

dbx_err dbx_wf_run_create(const dbx_workflow_type *t, const char *workflow_id, const char *run_id,
                          dbx_wf_run **out) {
  if (!t || !workflow_id || !run_id || !out) return DBX_EINVAL;
  dbx_wf_run *r = dbx_calloc(1, sizeof *r);
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
  free((char *)j->co.workflow_id);
  free((char *)j->co.run_id);
  free((char *)j->co.result_json);
  free((char *)j->co.failure_type);
  free((char *)j->co.failure_message);
  free(j->name);
  free(j->json);
}

static void rejects_clear(dbx_wf_run *r) {
  for (size_t i = 0; i < r->nrejects; i++) free(r->rejects[i].packed);
  r->nrejects = 0;
}

static void look_clear(dbx_wf_run *r) {
  for (size_t i = 0; i < r->nlook; i++) {
    free(r->look[i].name);
    free(r->look[i].key);
    free(r->look[i].value);
  }
  r->nlook = 0;
  for (size_t i = 0; i < r->nscratch; i++) free(r->scratch[i]);
  r->nscratch = 0;
}

void dbx_wf_run_destroy(dbx_wf_run *r) {
  if (!r) return;
  if (r->state && r->t->destroy) r->t->destroy(r->state);
  for (size_t i = 0; i < r->ncmds; i++) {
    free(r->cmds[i].type);
    free(r->cmds[i].packed);
    free(r->cmds[i].msg);
  }
  for (size_t i = 0; i < r->nupds; i++) {
    free(r->upds[i].id);
    free(r->upds[i].name);
  }
  free(r->upds);
  rejects_clear(r);
  free(r->rejects);
  for (size_t i = 0; i < r->njobs; i++) job_free(&r->jobs[i]);
  for (size_t i = 0; i < r->ncmds; i++) free(r->cmds[i].ident);
  for (size_t i = 0; i < r->nkids; i++) {
    free(r->kids[i].wid);
    free(r->kids[i].run_id);
    free(r->kids[i].type);
  }
  for (size_t i = 0; i < r->nwaits; i++) free(r->waits[i].name);
  for (size_t i = 0; i < r->nvers; i++) free(r->vers[i].change_id);
  look_clear(r);
  free(r->look);
  free(r->scratch);
  free(r->kids);
  free(r->waits);
  free(r->vers);
  free(r->pend);
  free(r->exts);
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

/* An allocation failed on behalf of the code: what it asked for may be
 * missing, so nothing of this activation may be sent; dbx_wf_run_apply
 * returns DBX_ENOMEM and the caller drops the run. Returns -1. */
static int oom(dbx_wf_run *r) {
  r->oom = 1;
  return -1;
}

static int usable(const dbx_wf *wf) { return wf && !wf->closed && !wf->bad && !wf->oom; }

/* ------------------------------------------------------------ commands */

static int64_t push_cmd_id(dbx_wf *wf, cmd_kind kind, int64_t seq, const char *type,
                           const char *ident, Command *c) {
  if (grow((void **)&wf->cmds, &wf->cap_cmds, wf->ncmds + 1, sizeof *wf->cmds)) return oom(wf);
  pcmd *p = &wf->cmds[wf->ncmds];
  memset(p, 0, sizeof *p);
  p->len = protobuf_c_message_get_packed_size(&c->base);
  p->packed = dbx_malloc(p->len ? p->len : 1);
  p->type = type ? dbx_strdup(type) : NULL;
  p->ident = ident ? dbx_strdup(ident) : NULL;
  if (!p->packed || (type && !p->type) || (ident && !p->ident)) {
    free(p->packed);
    free(p->type);
    free(p->ident);
    return oom(wf);
  }
  protobuf_c_message_pack(&c->base, p->packed);
  p->kind = kind;
  p->seq = seq;
  p->activation = wf->activation;
  wf->ncmds++;
  return seq;
}

static int64_t push_cmd(dbx_wf *wf, cmd_kind kind, int64_t seq, const char *type, Command *c) {
  return push_cmd_id(wf, kind, seq, type, NULL, c);
}

/* label: borrowed for the run's life (a pcmd's or kid's type string). */
static int pending_add(dbx_wf *wf, char kind, int64_t seq, const char *label) {
  if (grow((void **)&wf->pend, &wf->cap_pend, wf->npend + 1, sizeof *wf->pend)) return oom(wf);
  wf->pend[wf->npend++] = (pending){kind, seq, label ? label : ""};
  return 0;
}

static void pending_del(dbx_wf *wf, int64_t seq) {
  for (size_t i = wf->npend; i-- > 0;)
    if (wf->pend[i].seq == seq) {
      wf->pend[i] = wf->pend[--wf->npend];
      return;
    }
}

int64_t dbx_wf_schedule_activity(dbx_wf *wf, const char *type, const char *input_json,
                                 const dbx_activity_opts *o) {
  if (!usable(wf) || !type) return -1;
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
  if (!a.input) return oom(wf);
  int64_t start_ms = o->start_to_close_ms, sched_ms = o->schedule_to_close_ms;
  if (start_ms <= 0 && sched_ms <= 0) start_ms = 600000;
  if (start_ms > 0) dbx_pb_duration_init_ms(&st2c, start_ms), a.start_to_close_timeout = &st2c;
  if (sched_ms > 0) dbx_pb_duration_init_ms(&s2c, sched_ms), a.schedule_to_close_timeout = &s2c;
  if (o->heartbeat_ms > 0) dbx_pb_duration_init_ms(&hb, o->heartbeat_ms), a.heartbeat_timeout = &hb;
  dbx_pb_duration_init_ms(&ii, o->initial_interval_ms > 0 ? o->initial_interval_ms : 1000);
  rp.initial_interval = &ii;
  rp.backoff_coefficient = o->backoff_coefficient >= 1.0 ? o->backoff_coefficient : 2.0;
  if (o->maximum_interval_ms > 0) dbx_pb_duration_init_ms(&mi, o->maximum_interval_ms), rp.maximum_interval = &mi;
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
      return oom(wf);
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
  if (rc > 0) {
    wf->seq = seq;
    if (pending_add(wf, 'a', seq, wf->cmds[wf->ncmds - 1].type)) return -1;
  }
  return rc;
}

int64_t dbx_wf_start_timer(dbx_wf *wf, int64_t duration_ms) {
  if (!usable(wf)) return -1;
  int64_t seq = wf->seq + 1;
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)seq);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  StartTimerCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__START_TIMER_COMMAND_ATTRIBUTES);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  dbx_pb_duration_init_ms(&d, duration_ms > 0 ? duration_ms : 1);
  a.timer_id = id;
  a.start_to_fire_timeout = &d;
  c.command_type = CT(START_TIMER);
  c.attributes_case = CMD(START_TIMER);
  c.start_timer_command_attributes = &a;
  int64_t rc = push_cmd(wf, K_TIMER, seq, NULL, &c);
  if (rc > 0) {
    wf->seq = seq;
    if (pending_add(wf, 't', seq, NULL)) return -1;
  }
  return rc;
}

int dbx_wf_cancel_activity(dbx_wf *wf, int64_t seq) {
  if (!usable(wf)) return -1;
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

int dbx_wf_cancel_timer(dbx_wf *wf, int64_t seq) {
  if (!usable(wf)) return -1;
  for (size_t i = 0; i < wf->nwaits; i++)
    if (wf->waits[i].timer_seq == seq && !wf->waits[i].done) return -1; /* a wait's own timer */
  idmap *m = NULL;
  for (size_t i = 0; i < wf->ntimers; i++)
    if (wf->timers[i].seq == seq) m = &wf->timers[i];
  if (m && m->resolved) return -1;
  if (!m) {
    /* not recorded yet: a StartTimer of this activation that was never sent
     * is dropped (the replay of this activation drops it the same way) */
    for (size_t i = wf->head; i < wf->ncmds; i++) {
      pcmd *p = &wf->cmds[i];
      if (p->kind != K_TIMER || p->seq != seq || p->activation != wf->activation) continue;
      free(p->packed);
      free(p->type);
      free(p->ident);
      memmove(p, p + 1, (wf->ncmds - i - 1) * sizeof *p);
      wf->ncmds--;
      pending_del(wf, seq);
      return 0;
    }
    return -1;
  }
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)seq);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CancelTimerCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__CANCEL_TIMER_COMMAND_ATTRIBUTES);
  a.timer_id = id;
  c.command_type = CT(CANCEL_TIMER);
  c.attributes_case = CMD(CANCEL_TIMER);
  c.cancel_timer_command_attributes = &a;
  if (push_cmd(wf, K_TIMER_CANCEL, seq, NULL, &c) != seq) return -1;
  m->resolved = 1;
  pending_del(wf, seq);
  return 0;
}

static RetryPolicy *child_retry(const dbx_child_opts *o, RetryPolicy *rp, Duration *ii,
                                Duration *mi) {
  if (!o->maximum_attempts && !o->initial_interval_ms && o->backoff_coefficient == 0 &&
      !o->maximum_interval_ms)
    return NULL;
  dbx_pb_duration_init_ms(ii, o->initial_interval_ms > 0 ? o->initial_interval_ms : 1000);
  rp->initial_interval = ii;
  rp->backoff_coefficient = o->backoff_coefficient >= 1.0 ? o->backoff_coefficient : 2.0;
  if (o->maximum_interval_ms > 0) dbx_pb_duration_init_ms(mi, o->maximum_interval_ms), rp->maximum_interval = mi;
  rp->maximum_attempts = o->maximum_attempts > 0 ? o->maximum_attempts : 0;
  return rp;
}

int64_t dbx_wf_start_child(dbx_wf *wf, const char *type, const char *input_json,
                           const dbx_child_opts *o) {
  if (!usable(wf) || !type || !*type) return -1;
  dbx_child_opts def = {0};
  if (!o) o = &def;
  int64_t seq = wf->seq + 1;
  char *wid = o->workflow_id && *o->workflow_id
                  ? dbx_strdup(o->workflow_id)
                  : dbx_asprintf("%s-child-%lld", wf->wid, (long long)seq);
  if (!wid) return oom(wf);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  StartChildWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__START_CHILD_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration ex = INIT(GOOGLE__PROTOBUF__DURATION), run = INIT(GOOGLE__PROTOBUF__DURATION),
           task = INIT(GOOGLE__PROTOBUF__DURATION), ii = INIT(GOOGLE__PROTOBUF__DURATION),
           mi = INIT(GOOGLE__PROTOBUF__DURATION);
  RetryPolicy rp = INIT(TEMPORAL__API__COMMON__V1__RETRY_POLICY);
  a.namespace_ = "";
  a.workflow_id = wid;
  wt.name = (char *)type;
  a.workflow_type = &wt;
  tq.name = (char *)(o->task_queue ? o->task_queue : (wf->task_queue ? wf->task_queue : ""));
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  a.task_queue = &tq;
  if (o->execution_timeout_ms > 0) dbx_pb_duration_init_ms(&ex, o->execution_timeout_ms), a.workflow_execution_timeout = &ex;
  if (o->run_timeout_ms > 0) dbx_pb_duration_init_ms(&run, o->run_timeout_ms), a.workflow_run_timeout = &run;
  if (o->task_timeout_ms > 0) dbx_pb_duration_init_ms(&task, o->task_timeout_ms), a.workflow_task_timeout = &task;
  a.parent_close_policy = (Temporal__Api__Enums__V1__ParentClosePolicy)o->parent_close_policy;
  a.retry_policy = child_retry(o, &rp, &ii, &mi);
  a.input = dbx_payloads_from_json(input_json, input_json ? strlen(input_json) : 0);
  int64_t rc = -1;
  if (!a.input) {
    oom(wf);
    goto out;
  }
  c.command_type = CT(START_CHILD_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(START_CHILD_WORKFLOW_EXECUTION);
  c.start_child_workflow_execution_command_attributes = &a;
  if (grow((void **)&wf->kids, &wf->cap_kids, wf->nkids + 1, sizeof *wf->kids)) {
    oom(wf);
    goto out;
  }
  kid k = {seq, 0, wid, dbx_strdup(""), dbx_strdup(type), 0};
  if (!k.run_id || !k.type) {
    free(k.run_id);
    free(k.type);
    oom(wf);
    goto out;
  }
  rc = push_cmd_id(wf, K_CHILD, seq, type, wid, &c);
  if (rc != seq || pending_add(wf, 'c', seq, k.type)) {
    free(k.run_id);
    free(k.type);
    rc = -1;
    goto out;
  }
  wf->kids[wf->nkids++] = k;
  wid = NULL; /* owned by the kid */
  wf->seq = seq;
out:
  dbx_payloads_free(a.input);
  free(wid);
  return rc;
}

static kid *find_kid_seq(dbx_wf *wf, int64_t seq) {
  for (size_t i = 0; i < wf->nkids; i++)
    if (wf->kids[i].seq == seq) return &wf->kids[i];
  return NULL;
}

int64_t dbx_wf_cancel_child(dbx_wf *wf, int64_t seq) {
  if (!usable(wf)) return -1;
  kid *k = find_kid_seq(wf, seq);
  if (!k || !k->event_id || k->done) return -1;
  int64_t nseq = wf->seq + 1;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  RequestCancelExternalWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  a.namespace_ = "";
  a.workflow_id = k->wid;
  a.run_id = k->run_id;
  a.child_workflow_only = 1;
  c.command_type = CT(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION);
  c.request_cancel_external_workflow_execution_command_attributes = &a;
  if (push_cmd_id(wf, K_CANCEL_EXT, nseq, NULL, k->wid, &c) != nseq) return -1;
  wf->seq = nseq;
  return nseq;
}

int64_t dbx_wf_signal_external(dbx_wf *wf, const char *workflow_id, const char *run_id,
                               const char *signal_name, const char *input_json) {
  if (!usable(wf) || !workflow_id || !*workflow_id || !signal_name) return -1;
  int64_t seq = wf->seq + 1;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  SignalExternalWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)workflow_id;
  we.run_id = (char *)(run_id ? run_id : "");
  a.namespace_ = "";
  a.execution = &we;
  a.signal_name = (char *)signal_name;
  a.input = dbx_payloads_from_json(input_json, input_json ? strlen(input_json) : 0);
  if (!a.input) return oom(wf);
  c.command_type = CT(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION);
  c.signal_external_workflow_execution_command_attributes = &a;
  int64_t rc = push_cmd_id(wf, K_SIGNAL_EXT, seq, signal_name, workflow_id, &c);
  dbx_payloads_free(a.input);
  if (rc == seq) wf->seq = seq;
  return rc == seq ? seq : -1;
}

/* ---- markers */

static const char *keep(dbx_wf *wf, char *v) {
  if (!v) {
    oom(wf);
    return NULL;
  }
  if (grow((void **)&wf->scratch, &wf->cap_scratch, wf->nscratch + 1, sizeof *wf->scratch)) {
    free(v);
    oom(wf);
    return NULL;
  }
  wf->scratch[wf->nscratch++] = v;
  return v;
}

/* JSON string literal of s (malloc'd). */
static char *json_quote(const char *s) {
  size_t n = strlen(s);
  char *o = dbx_malloc(n * 6 + 3), *q = o;
  if (!o) return NULL; /* callers with a run mark it oom */
  *q++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') *q++ = '\\', *q++ = (char)*p;
    else if (*p == '\n') *q++ = '\\', *q++ = 'n';
    else if (*p < 0x20) q += sprintf(q, "\\u%04x", *p);
    else *q++ = (char)*p;
  }
  *q++ = '"';
  *q = 0;
  return o;
}

typedef Temporal__Api__Command__V1__RecordMarkerCommandAttributes__DetailsEntry marker_entry;

/* Push a RecordMarker with details keys[i] = values[i] (JSON). */
static int push_marker(dbx_wf *wf, const char *name, const char *const *keys,
                       const char *const *values, size_t n) {
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  RecordMarkerCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__RECORD_MARKER_COMMAND_ATTRIBUTES);
  marker_entry ents[2], *ep[2];
  int rc = -1;
  size_t made = 0;
  if (n > 2) return -1;
  for (; made < n; made++) {
    ents[made] = (marker_entry)INIT(TEMPORAL__API__COMMAND__V1__RECORD_MARKER_COMMAND_ATTRIBUTES__DETAILS_ENTRY);
    ents[made].key = (char *)keys[made];
    ents[made].value = dbx_payloads_from_json(values[made], strlen(values[made]));
    ep[made] = &ents[made];
    if (!ents[made].value) {
      oom(wf);
      goto out;
    }
  }
  a.marker_name = (char *)name;
  a.n_details = n;
  a.details = ep;
  c.command_type = CT(RECORD_MARKER);
  c.attributes_case = CMD(RECORD_MARKER);
  c.record_marker_command_attributes = &a;
  rc = push_cmd(wf, K_MARKER, 0, name, &c) == 0 ? 0 : -1;
out:
  for (size_t i = 0; i < made; i++) dbx_payloads_free(ents[i].value);
  return rc;
}

static int read_markers(dbx_wf_run *r, HistoryEvent *const *events, size_t i, size_t n);

/* The next unused read-ahead marker of this name (and key), or NULL. */
static lookahead *look_take(dbx_wf *wf, const char *name, const char *key) {
  if (!wf->look_ready) {
    wf->look_ready = 1;
    if (wf->act_events && read_markers(wf, wf->act_events, wf->act_i, wf->act_n)) {
      oom(wf);
      return NULL;
    }
  }
  for (size_t i = 0; i < wf->nlook; i++) {
    lookahead *l = &wf->look[i];
    if (l->used || strcmp(l->name, name) != 0) continue;
    if (key && (!l->key || strcmp(l->key, key) != 0)) continue;
    l->used = 1;
    return l;
  }
  return NULL;
}

const char *dbx_wf_marker_record(dbx_wf *wf, const char *name, const char *value_json) {
  if (!usable(wf) || !name || !*name) return NULL;
  if (!value_json) value_json = "null";
  lookahead *l = wf->replaying ? look_take(wf, name, NULL) : NULL;
  if (wf->oom) return NULL;
  const char *v = l ? l->value : value_json;
  const char *key = "data";
  if (push_marker(wf, name, &key, &v, 1)) return NULL;
  return keep(wf, dbx_strdup(v));
}

const char *dbx_wf_side_effect(dbx_wf *wf, char *(*fn)(void *ud), void *ud) {
  if (!usable(wf) || !fn) return NULL;
  lookahead *l = wf->replaying ? look_take(wf, "SideEffect", NULL) : NULL;
  if (wf->oom) return NULL;
  char *fresh = l ? NULL : fn(ud);
  const char *v = l ? l->value : (fresh ? fresh : "null");
  char id[24];
  snprintf(id, sizeof id, "%lld", (long long)++wf->side_effects);
  const char *keys[2] = {"side-effect-id", "data"}, *vals[2] = {id, v};
  const char *r = push_marker(wf, "SideEffect", keys, vals, 2) ? NULL : keep(wf, dbx_strdup(v));
  free(fresh);
  return r;
}

int64_t dbx_wf_get_version(dbx_wf *wf, const char *change_id, int64_t min_version,
                           int64_t max_version) {
  if (!usable(wf) || !change_id) return DBX_WF_DEFAULT_VERSION;
  for (size_t i = 0; i < wf->nvers; i++)
    if (strcmp(wf->vers[i].change_id, change_id) == 0) return wf->vers[i].version;
  char *q = json_quote(change_id);
  if (!q) return oom(wf), DBX_WF_DEFAULT_VERSION;
  int64_t v = max_version;
  int record = 1;
  if (wf->replaying) {
    lookahead *l = look_take(wf, "Version", q);
    if (wf->oom) {
      free(q);
      return DBX_WF_DEFAULT_VERSION;
    }
    if (l) v = strtoll(l->value, NULL, 10);
    else v = DBX_WF_DEFAULT_VERSION, record = 0;
  }
  char num[24];
  snprintf(num, sizeof num, "%lld", (long long)v);
  const char *keys[2] = {"change-id", "version"}, *vals[2] = {q, num};
  char *cid = grow((void **)&wf->vers, &wf->cap_vers, wf->nvers + 1, sizeof *wf->vers)
                  ? NULL
                  : dbx_strdup(change_id);
  if (!cid || (record && push_marker(wf, "Version", keys, vals, 2))) {
    free(cid);
    free(q);
    oom(wf);
    return DBX_WF_DEFAULT_VERSION;
  }
  wf->vers[wf->nvers++] = (version){cid, v};
  free(q);
  if (v < min_version || v > max_version) {
    char msg[160];
    snprintf(msg, sizeof msg, "version %lld of change '%.64s' is outside [%lld, %lld]",
             (long long)v, change_id, (long long)min_version, (long long)max_version);
    dbx_wf_fail(wf, "UnsupportedVersion", msg);
  }
  return v;
}

int64_t dbx_wf_await_signal(dbx_wf *wf, const char *name, int64_t timeout_ms) {
  if (!usable(wf) || !name) return -1;
  if (grow((void **)&wf->waits, &wf->cap_waits, wf->nwaits + 1, sizeof *wf->waits)) return oom(wf);
  char *n = dbx_strdup(name);
  if (!n) return oom(wf);
  int64_t seq = ++wf->seq, tseq = 0;
  if (timeout_ms > 0) {
    tseq = dbx_wf_start_timer(wf, timeout_ms);
    if (tseq < 0) {
      free(n);
      return -1;
    }
  }
  wf->waits[wf->nwaits++] = (waiter){seq, tseq, n, 0};
  return seq;
}

typedef Temporal__Api__Common__V1__SearchAttributes__IndexedFieldsEntry sa_entry;
typedef Temporal__Api__Common__V1__Memo__FieldsEntry memo_entry;

/* The n values as json/plain Payloads (pl[i], free each) for map entries. */
static int kv_payloads(const char *const *keys, const char *const *values, size_t n, Payloads **pl) {
  for (size_t i = 0; i < n; i++) {
    if (!keys[i] || !*keys[i] || !values[i]) return -1;
    pl[i] = dbx_payloads_from_json(values[i], strlen(values[i]));
    if (!pl[i]) return -2;
  }
  return 0;
}

static int upsert(dbx_wf *wf, int memo, const char *const *keys, const char *const *values,
                  size_t n) {
  if (!usable(wf) || !n || !keys || !values) return -1;
  Payloads **pl = dbx_calloc(n, sizeof *pl);
  sa_entry *se = dbx_calloc(n, sizeof *se), **sp = dbx_calloc(n, sizeof *sp);
  memo_entry *me = dbx_calloc(n, sizeof *me), **mp = dbx_calloc(n, sizeof *mp);
  int rc = -1;
  if (!pl || !se || !sp || !me || !mp) {
    oom(wf);
    goto out;
  }
  int kv = kv_payloads(keys, values, n, pl);
  if (kv == -2) oom(wf);
  if (kv) goto out;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  UpsertWorkflowSearchAttributesCommandAttributes ua =
      INIT(TEMPORAL__API__COMMAND__V1__UPSERT_WORKFLOW_SEARCH_ATTRIBUTES_COMMAND_ATTRIBUTES);
  ModifyWorkflowPropertiesCommandAttributes ma =
      INIT(TEMPORAL__API__COMMAND__V1__MODIFY_WORKFLOW_PROPERTIES_COMMAND_ATTRIBUTES);
  SearchAttributes sa = INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES);
  Memo mm = INIT(TEMPORAL__API__COMMON__V1__MEMO);
  for (size_t i = 0; i < n; i++) {
    se[i] = (sa_entry)INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES__INDEXED_FIELDS_ENTRY);
    me[i] = (memo_entry)INIT(TEMPORAL__API__COMMON__V1__MEMO__FIELDS_ENTRY);
    se[i].key = me[i].key = (char *)keys[i];
    se[i].value = me[i].value = pl[i]->payloads[0];
    sp[i] = &se[i];
    mp[i] = &me[i];
  }
  if (memo) {
    mm.n_fields = n;
    mm.fields = mp;
    ma.upserted_memo = &mm;
    c.command_type = CT(MODIFY_WORKFLOW_PROPERTIES);
    c.attributes_case = CMD(MODIFY_WORKFLOW_PROPERTIES);
    c.modify_workflow_properties_command_attributes = &ma;
  } else {
    sa.n_indexed_fields = n;
    sa.indexed_fields = sp;
    ua.search_attributes = &sa;
    c.command_type = CT(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
    c.attributes_case = CMD(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
    c.upsert_workflow_search_attributes_command_attributes = &ua;
  }
  rc = push_cmd(wf, memo ? K_MEMO : K_UPSERT_SA, 0, NULL, &c) == 0 ? 0 : -1;
out:
  if (pl)
    for (size_t i = 0; i < n; i++) dbx_payloads_free(pl[i]);
  free(pl);
  free(se);
  free(sp);
  free(me);
  free(mp);
  return rc;
}

int dbx_wf_upsert_search_attributes(dbx_wf *wf, const char *const *keys,
                                    const char *const *values_json, size_t n) {
  return upsert(wf, 0, keys, values_json, n);
}

int dbx_wf_upsert_memo(dbx_wf *wf, const char *const *keys, const char *const *values_json,
                       size_t n) {
  return upsert(wf, 1, keys, values_json, n);
}

void dbx_wf_continue_as_new(dbx_wf *wf, const char *input_json, const dbx_continue_opts *o) {
  if (!usable(wf)) return;
  dbx_continue_opts def = {0};
  if (!o) o = &def;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ContinueAsNewWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__CONTINUE_AS_NEW_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration run = INIT(GOOGLE__PROTOBUF__DURATION), task = INIT(GOOGLE__PROTOBUF__DURATION);
  wt.name = (char *)(o->workflow_type ? o->workflow_type : wf->t->name);
  a.workflow_type = &wt;
  tq.name = (char *)(o->task_queue ? o->task_queue : (wf->task_queue ? wf->task_queue : ""));
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  a.task_queue = &tq;
  if (o->run_timeout_ms > 0) dbx_pb_duration_init_ms(&run, o->run_timeout_ms), a.workflow_run_timeout = &run;
  if (o->task_timeout_ms > 0) dbx_pb_duration_init_ms(&task, o->task_timeout_ms), a.workflow_task_timeout = &task;
  a.initiator = TEMPORAL__API__ENUMS__V1__CONTINUE_AS_NEW_INITIATOR__CONTINUE_AS_NEW_INITIATOR_WORKFLOW;
  a.input = dbx_payloads_from_json(input_json, input_json ? strlen(input_json) : 0);
  c.command_type = CT(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
  c.continue_as_new_workflow_execution_command_attributes = &a;
  if (!a.input) oom(wf);
  else if (push_cmd(wf, K_CAN, 0, wt.name, &c) == 0) wf->closed = 1;
  dbx_payloads_free(a.input);
}

/* ------------------------------------------------------------ updates */

#define UPD_URL "type.googleapis.com/temporal.api.update.v1."

/* A packed ProtocolMessage for update id: "<id>/<suffix>", body type_url
 * UPD_URL<kind> holding body (packed). Returns malloc'd bytes or NULL. */
static uint8_t *update_message(const char *id, const char *suffix, const char *kind,
                               const ProtobufCMessage *body, size_t *len) {
  ProtocolMessage m = INIT(TEMPORAL__API__PROTOCOL__V1__MESSAGE);
  Any any = INIT(GOOGLE__PROTOBUF__ANY);
  char *mid = dbx_asprintf("%s/%s", id, suffix);
  char *url = dbx_asprintf(UPD_URL "%s", kind);
  uint8_t *out = NULL;
  any.value.data = dbx_pb_pack(body, &any.value.len);
  if (!mid || !url || !any.value.data) goto out;
  m.id = mid;
  m.protocol_instance_id = (char *)id;
  any.type_url = url;
  m.body = &any;
  out = dbx_pb_pack(&m.base, len);
out:
  free(mid);
  free(url);
  free(any.value.data);
  return out;
}

static upd *update_get(const dbx_wf *wf, int64_t h) {
  return wf && h >= 1 && (size_t)h <= wf->nupds ? &wf->upds[h - 1] : NULL;
}

const char *dbx_wf_update_id(const dbx_wf *wf, int64_t update) {
  upd *u = update_get(wf, update);
  return u ? u->id : NULL;
}

/* A PROTOCOL_MESSAGE command naming "<id>/<suffix>" with its message. */
static int64_t push_update_cmd(dbx_wf *wf, cmd_kind kind, int64_t h, const char *suffix, uint8_t *msg,
                               size_t msg_len) {
  upd *u = update_get(wf, h);
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  Temporal__Api__Command__V1__ProtocolMessageCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__PROTOCOL_MESSAGE_COMMAND_ATTRIBUTES);
  char *mid = dbx_asprintf("%s/%s", u->id, suffix);
  if (!msg || !mid) {
    free(msg);
    free(mid);
    return oom(wf);
  }
  a.message_id = mid;
  c.command_type = CT(PROTOCOL_MESSAGE);
  c.attributes_case = CMD(PROTOCOL_MESSAGE);
  c.protocol_message_command_attributes = &a;
  int64_t rc = push_cmd_id(wf, kind, h, u->name, u->id, &c);
  free(mid);
  if (rc < 0) {
    free(msg);
    return rc;
  }
  wf->cmds[wf->ncmds - 1].msg = msg;
  wf->cmds[wf->ncmds - 1].msg_len = msg_len;
  return rc;
}

static int update_end(dbx_wf *wf, int64_t h, UpdateOutcome *o) {
  upd *u = update_get(wf, h);
  if (!usable(wf) || !u || u->done) return -1;
  UpdateResponse resp = INIT(TEMPORAL__API__UPDATE__V1__RESPONSE);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  meta.update_id = u->id;
  meta.identity = "";
  resp.meta = &meta;
  resp.outcome = o;
  size_t len = 0;
  uint8_t *msg = update_message(u->id, "response", "Response", &resp.base, &len);
  if (push_update_cmd(wf, K_UPD_RESPOND, h, "response", msg, len) < 0) return -1;
  u->done = 1;
  return 0;
}

int dbx_wf_update_complete(dbx_wf *wf, int64_t update, const char *result_json) {
  if (!usable(wf) || !update_get(wf, update)) return -1;
  UpdateOutcome o = INIT(TEMPORAL__API__UPDATE__V1__OUTCOME);
  o.value_case = TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_SUCCESS;
  o.success = dbx_payloads_from_json(result_json, result_json ? strlen(result_json) : 0);
  if (!o.success) return oom(wf);
  int rc = update_end(wf, update, &o);
  dbx_payloads_free(o.success);
  return rc;
}

int dbx_wf_update_fail(dbx_wf *wf, int64_t update, const char *type, const char *message) {
  UpdateOutcome o = INIT(TEMPORAL__API__UPDATE__V1__OUTCOME);
  Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  f.message = (char *)(message ? message : "");
  f.source = "durabox";
  ai.type = (char *)(type ? type : "");
  f.failure_info_case = FI(APPLICATION_FAILURE_INFO);
  f.application_failure_info = &ai;
  o.value_case = TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_FAILURE;
  o.failure = &f;
  return update_end(wf, update, &o);
}

/* Answer request rq (message msg_id, sequencing event seq_ev) with a
 * Rejection carrying an ApplicationFailure (type, message); sent with this
 * task's completion, nothing in history. */
static void update_reject(dbx_wf_run *r, const UpdateRequest *rq, const char *msg_id, int64_t seq_ev,
                          const char *type, const char *message) {
  UpdateRejection rej = INIT(TEMPORAL__API__UPDATE__V1__REJECTION);
  Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  f.message = (char *)message;
  f.source = "durabox";
  ai.type = (char *)type;
  ai.non_retryable = 1;
  f.failure_info_case = FI(APPLICATION_FAILURE_INFO);
  f.application_failure_info = &ai;
  rej.rejected_request_message_id = (char *)msg_id;
  rej.rejected_request_sequencing_event_id = seq_ev;
  rej.rejected_request = (UpdateRequest *)rq;
  rej.failure = &f;
  if (grow((void **)&r->rejects, &r->cap_rejects, r->nrejects + 1, sizeof *r->rejects)) {
    oom(r);
    return;
  }
  pmsg *p = &r->rejects[r->nrejects];
  p->packed = update_message(rq->meta->update_id, "reject", "Rejection", &rej.base, &p->len);
  if (!p->packed) oom(r);
  else r->nrejects++;
}

/* One update request: new (validate = 1: from this task's messages; the
 * validator decides) or replayed (validate = 0: from a recorded Accepted
 * event). Accepting = the acceptance command, then the handler. */
static void update_request(dbx_wf_run *r, const UpdateRequest *rq, const char *msg_id, int64_t seq_ev,
                           int validate, int64_t event_id) {
  if (!rq || !rq->meta || !rq->meta->update_id || !rq->input) return;
  const char *id = rq->meta->update_id, *name = rq->input->name ? rq->input->name : "";
  for (size_t i = 0; i < r->nupds; i++)
    if (strcmp(r->upds[i].id, id) == 0) return; /* delivered again: answered already */
  const dbx_wf_update_def *d = r->t->updates;
  while (d && d->name && strcmp(d->name, name) != 0) d++;
  if (!d || !d->name || !d->fn) {
    if (!validate) {
      set_bad(r, event_id, "nondeterminism at event %lld: history accepted update '%s', workflow code has no handler for it",
              (long long)event_id, name);
      return;
    }
    char *m = dbx_asprintf("update '%s' is not handled by workflow type '%s'", name, r->t->name);
    if (m) update_reject(r, rq, msg_id, seq_ev, "UnknownUpdate", m);
    else oom(r);
    free(m);
    return;
  }
  char *json = rq->input->args ? dbx_payloads_to_json(rq->input->args) : dbx_strdup("null");
  if (!json) {
    oom(r);
    return;
  }
  size_t len = strlen(json);
  if (validate && !usable(r)) { /* the code ended the run in this activation */
    update_reject(r, rq, msg_id, seq_ev, "WorkflowClosing", "the workflow is closing");
    free(json);
    return;
  }
  char *why = validate && d->validate ? d->validate(r->state, json, len) : NULL;
  if (why) {
    update_reject(r, rq, msg_id, seq_ev, "ValidationError", why);
    free(why);
    free(json);
    return;
  }
  if (grow((void **)&r->upds, &r->cap_upds, r->nupds + 1, sizeof *r->upds)) {
    free(json);
    oom(r);
    return;
  }
  upd *u = &r->upds[r->nupds];
  u->id = dbx_strdup(id);
  u->name = dbx_strdup(name);
  u->done = 0;
  if (!u->id || !u->name) {
    free(u->id);
    free(u->name);
    free(json);
    oom(r);
    return;
  }
  int64_t h = (int64_t)++r->nupds;
  UpdateAcceptance acc = INIT(TEMPORAL__API__UPDATE__V1__ACCEPTANCE);
  acc.accepted_request_message_id = (char *)(msg_id ? msg_id : "");
  acc.accepted_request_sequencing_event_id = seq_ev;
  acc.accepted_request = (UpdateRequest *)rq;
  size_t mlen = 0;
  uint8_t *msg = update_message(id, "accept", "Acceptance", &acc.base, &mlen);
  if (push_update_cmd(r, K_UPD_ACCEPT, h, "accept", msg, mlen) >= 0 && usable(r))
    d->fn(r->state, r, h, json, len);
  free(json);
}

/* The activation's update requests, after its other callbacks: replayed,
 * the Accepted events its task's completion recorded (events[i] is its
 * WorkflowTaskStarted); new, the task's protocol messages. */
static void run_updates(dbx_wf_run *r, int replaying, HistoryEvent *const *events, size_t i, size_t n) {
  if (replaying) {
    for (size_t k = i + 1; k < n && r->state && !r->bad && !r->oom; k++) {
      const HistoryEvent *e = events[k];
      if (e->event_type == ET(WORKFLOW_TASK_STARTED)) break;
      const WorkflowExecutionUpdateAcceptedEventAttributes *a =
          e->workflow_execution_update_accepted_event_attributes;
      if (e->event_type == ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED) && a)
        update_request(r, a->accepted_request, a->accepted_request_message_id,
                       a->accepted_request_sequencing_event_id, 0, e->event_id);
    }
    return;
  }
  for (size_t k = 0; k < r->nmsgs && r->state && !r->bad && !r->oom; k++) {
    const ProtocolMessage *m = r->msgs[k];
    if (!m || !m->body || !m->body->type_url || strcmp(m->body->type_url, UPD_URL "Request") != 0) continue;
    UpdateRequest *rq = (UpdateRequest *)dbx_pb_unpack(&UpdateRequest__D, m->body->value.data, m->body->value.len);
    if (!rq) { /* OOM (or bytes the service never sends): no answer, the task is retried */
      oom(r);
      return;
    }
    int64_t seq_ev = m->sequencing_id_case == TEMPORAL__API__PROTOCOL__V1__MESSAGE__SEQUENCING_ID_EVENT_ID ? m->event_id : 0;
    update_request(r, rq, m->id, seq_ev, 1, 0);
    protobuf_c_message_free_unpacked(&rq->base, NULL);
  }
}

void dbx_wf_run_set_messages(dbx_wf_run *r, ProtocolMessage *const *msgs, size_t n) {
  if (!r) return;
  r->msgs = msgs;
  r->nmsgs = msgs ? n : 0;
}

dbx_err dbx_wf_run_messages(const dbx_wf_run *r, ProtocolMessage ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  size_t cnt = r->nrejects;
  for (size_t i = r->head; i < r->ncmds; i++) cnt += r->cmds[i].msg != NULL;
  if (!cnt) return DBX_OK;
  ProtocolMessage **arr = dbx_calloc(cnt, sizeof *arr);
  if (!arr) return DBX_ENOMEM;
  size_t k = 0;
  for (size_t i = 0; i < r->nrejects; i++)
    if (!(arr[k++] = (ProtocolMessage *)dbx_pb_unpack(&ProtocolMessage__D, r->rejects[i].packed, r->rejects[i].len)))
      goto fail;
  for (size_t i = r->head; i < r->ncmds; i++)
    if (r->cmds[i].msg &&
        !(arr[k++] = (ProtocolMessage *)dbx_pb_unpack(&ProtocolMessage__D, r->cmds[i].msg, r->cmds[i].msg_len)))
      goto fail;
  *out = arr;
  *n = cnt;
  return DBX_OK;
fail:
  dbx_wf_run_messages_free(arr, k);
  return DBX_ENOMEM;
}

void dbx_wf_run_messages_free(ProtocolMessage **m, size_t n) {
  if (!m) return;
  for (size_t i = 0; i < n; i++)
    if (m[i]) protobuf_c_message_free_unpacked(&m[i]->base, NULL);
  free(m);
}

int64_t dbx_wf_history_length(const dbx_wf *wf) { return wf->hist_len; }
int64_t dbx_wf_history_size_bytes(const dbx_wf *wf) { return wf->hist_bytes; }
int dbx_wf_continue_as_new_suggested(const dbx_wf *wf) { return wf->suggest_can; }

void dbx_wf_complete(dbx_wf *wf, const char *result_json) {
  if (!usable(wf)) return;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  a.result = dbx_payloads_from_json(result_json, result_json ? strlen(result_json) : 0);
  c.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  c.complete_workflow_execution_command_attributes = &a;
  if (!a.result) oom(wf);
  else if (push_cmd(wf, K_COMPLETE, 0, NULL, &c) == 0) wf->closed = 1;
  dbx_payloads_free(a.result);
}

void dbx_wf_fail(dbx_wf *wf, const char *type, const char *message) {
  if (!usable(wf)) return;
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
  if (!usable(wf)) return;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CancelWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__CANCEL_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  c.command_type = CT(CANCEL_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(CANCEL_WORKFLOW_EXECUTION);
  c.cancel_workflow_execution_command_attributes = &a;
  if (push_cmd(wf, K_CANCEL, 0, NULL, &c) == 0) wf->closed = 1;
}

void dbx_wf_out_of_memory(dbx_wf *wf) {
  if (wf) oom(wf);
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
  Command **arr = dbx_calloc(cnt, sizeof *arr);
  if (!arr) return DBX_ENOMEM;
  for (size_t i = 0; i < cnt; i++) {
    const pcmd *p = &r->cmds[r->head + i];
    arr[i] = (Command *)dbx_pb_unpack(&Command__D, p->packed, p->len);
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

/* ---- queries */

typedef struct {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (grow((void **)&b->p, &b->cap, b->len + n + 1, 1)) {
    b->oom = 1;
    return;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

#define SB_LIT(b, lit) sb_add((b), (lit), sizeof(lit) - 1)

static void sb_fmt(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_str(sbuf *b, const char *s) {
  char *q = json_quote(s ? s : "");
  if (!q) b->oom = 1;
  else sb_add(b, q, strlen(q));
  free(q);
}

static char *sb_done(sbuf *b) {
  if (b->oom) {
    free(b->p);
    return NULL;
  }
  return b->p;
}

/* __stack_trace: what the code is blocked on, one line each, as a JSON string. */
static char *stack_trace(const dbx_wf_run *r) {
  sbuf t = {0};
  sb_fmt(&t, "workflow %s (%s/%s)%s\n", r->t->name, r->wid, r->rid,
         r->closed ? ": closed" : ", blocked on:");
  for (size_t i = 0; i < r->npend; i++) {
    const pending *p = &r->pend[i];
    int wait_timer = 0;
    for (size_t w = 0; w < r->nwaits; w++)
      if (r->waits[w].timer_seq == p->seq) wait_timer = 1;
    if (wait_timer) continue;
    if (p->kind == 'a') sb_fmt(&t, "  activity %lld '%.200s'\n", (long long)p->seq, p->label);
    else if (p->kind == 't') sb_fmt(&t, "  timer %lld\n", (long long)p->seq);
    else sb_fmt(&t, "  child workflow %lld '%.200s'\n", (long long)p->seq, p->label);
  }
  for (size_t w = 0; w < r->nwaits; w++)
    if (!r->waits[w].done)
      sb_fmt(&t, "  signal '%.200s' (wait %lld%s)\n", r->waits[w].name, (long long)r->waits[w].seq,
             r->waits[w].timer_seq ? ", with timeout" : "");
  char *text = sb_done(&t);
  char *json = text ? json_quote(text) : NULL;
  free(text);
  return json;
}

/* __temporal_workflow_metadata: Temporal's WorkflowMetadata in its JSON form
 * (proto3 JSON names), sent as json/plain. */
static char *metadata(const dbx_wf_run *r) {
  static const char *const builtin[][2] = {
      {"__stack_trace", "what the workflow is blocked on"},
      {"__temporal_workflow_metadata", "the workflow's type, queries and signals"}};
  sbuf b = {0};
  SB_LIT(&b, "{\"definition\":{\"type\":");
  sb_str(&b, r->t->name);
  SB_LIT(&b, ",\"queryDefinitions\":[");
  for (size_t i = 0; i < 2; i++) {
    if (i) SB_LIT(&b, ",");
    SB_LIT(&b, "{\"name\":");
    sb_str(&b, builtin[i][0]);
    SB_LIT(&b, ",\"description\":");
    sb_str(&b, builtin[i][1]);
    SB_LIT(&b, "}");
  }
  for (const dbx_wf_query_def *q = r->t->queries; q && q->name; q++) {
    SB_LIT(&b, ",{\"name\":");
    sb_str(&b, q->name);
    SB_LIT(&b, ",\"description\":");
    sb_str(&b, q->description);
    SB_LIT(&b, "}");
  }
  SB_LIT(&b, "],\"signalDefinitions\":[");
  for (const dbx_wf_signal_def *d = r->t->signals; d && d->name; d++) {
    if (d != r->t->signals) SB_LIT(&b, ",");
    SB_LIT(&b, "{\"name\":");
    sb_str(&b, d->name);
    SB_LIT(&b, ",\"description\":");
    sb_str(&b, d->description);
    SB_LIT(&b, "}");
  }
  SB_LIT(&b, "],\"updateDefinitions\":[");
  for (const dbx_wf_update_def *d = r->t->updates; d && d->name; d++) {
    if (d != r->t->updates) SB_LIT(&b, ",");
    SB_LIT(&b, "{\"name\":");
    sb_str(&b, d->name);
    SB_LIT(&b, ",\"description\":");
    sb_str(&b, d->description);
    SB_LIT(&b, "}");
  }
  SB_LIT(&b, "]},\"currentDetails\":\"\"}");
  return sb_done(&b);
}

dbx_err dbx_wf_run_query_args(dbx_wf_run *r, const char *name, const char *args_json,
                              size_t args_len, char **json) {
  *json = NULL;
  if (!r || !name) return DBX_EINVAL;
  if (!r->state) return DBX_ESTATE;
  if (!args_json) args_json = "null", args_len = 4;
  if (strcmp(name, "__stack_trace") == 0) {
    *json = stack_trace(r);
    return *json ? DBX_OK : DBX_ENOMEM;
  }
  if (strcmp(name, "__temporal_workflow_metadata") == 0) {
    *json = metadata(r);
    return *json ? DBX_OK : DBX_ENOMEM;
  }
  for (const dbx_wf_query_def *q = r->t->queries; q && q->name; q++)
    if (strcmp(q->name, name) == 0) {
      *json = q->fn ? q->fn(r->state, args_json, args_len) : NULL;
      return *json ? DBX_OK : DBX_ENOTFOUND;
    }
  if (!r->t->on_query) return DBX_ENOTFOUND;
  *json = r->t->on_query(r->state, name);
  return *json ? DBX_OK : DBX_ENOTFOUND;
}

dbx_err dbx_wf_run_query(dbx_wf_run *r, const char *name, char **json) {
  return dbx_wf_run_query_args(r, name, NULL, 0, json);
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
  case K_TIMER_CANCEL: snprintf(buf, n, "cancelled timer %lld", (long long)p->seq); break;
  case K_MARKER: snprintf(buf, n, "recorded marker '%s'", p->type); break;
  case K_CHILD:
    snprintf(buf, n, "started child workflow '%s' (workflow id %s)", p->type, p->ident);
    break;
  case K_CANCEL_EXT: snprintf(buf, n, "requested cancellation of workflow %s", p->ident); break;
  case K_SIGNAL_EXT: snprintf(buf, n, "signalled '%s' to workflow %s", p->type, p->ident); break;
  case K_UPSERT_SA: snprintf(buf, n, "upserted search attributes"); break;
  case K_MEMO: snprintf(buf, n, "modified the memo"); break;
  case K_CAN: snprintf(buf, n, "continued as new"); break;
  case K_UPD_ACCEPT: snprintf(buf, n, "accepted update '%s' (update id %s)", p->type, p->ident); break;
  case K_UPD_RESPOND: snprintf(buf, n, "completed update '%s' (update id %s)", p->type, p->ident); break;
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
  case ET(WORKFLOW_PROPERTIES_MODIFIED): return "WorkflowPropertiesModified";
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
  case ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES):
  case ET(WORKFLOW_PROPERTIES_MODIFIED):
  case ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED):
  case ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED): return 1;
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
  } else if (t == ET(TIMER_CANCELED) && e->timer_canceled_event_attributes) {
    snprintf(hist, sizeof hist, "%s (timer id %s)", hname, e->timer_canceled_event_attributes->timer_id);
  } else if (t == ET(MARKER_RECORDED) && e->marker_recorded_event_attributes) {
    snprintf(hist, sizeof hist, "%s '%s'", hname, e->marker_recorded_event_attributes->marker_name);
  } else if (t == ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED) &&
             e->start_child_workflow_execution_initiated_event_attributes) {
    const StartChildWorkflowExecutionInitiatedEventAttributes *a =
        e->start_child_workflow_execution_initiated_event_attributes;
    snprintf(hist, sizeof hist, "%s '%s' (workflow id %s)", hname,
             a->workflow_type ? a->workflow_type->name : "", a->workflow_id);
  } else if (t == ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED) &&
             e->signal_external_workflow_execution_initiated_event_attributes) {
    const SignalExternalWorkflowExecutionInitiatedEventAttributes *a =
        e->signal_external_workflow_execution_initiated_event_attributes;
    snprintf(hist, sizeof hist, "%s '%s' (workflow id %s)", hname, a->signal_name,
             a->workflow_execution ? a->workflow_execution->workflow_id : "");
  } else if (t == ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED) &&
             e->request_cancel_external_workflow_execution_initiated_event_attributes) {
    const RequestCancelExternalWorkflowExecutionInitiatedEventAttributes *a =
        e->request_cancel_external_workflow_execution_initiated_event_attributes;
    snprintf(hist, sizeof hist, "%s (workflow id %s)", hname,
             a->workflow_execution ? a->workflow_execution->workflow_id : "");
  } else if (t == ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED) && e->workflow_execution_update_accepted_event_attributes) {
    snprintf(hist, sizeof hist, "%s (update id %s)", hname,
             e->workflow_execution_update_accepted_event_attributes->protocol_instance_id);
  } else if (t == ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED) && e->workflow_execution_update_completed_event_attributes &&
             e->workflow_execution_update_completed_event_attributes->meta) {
    snprintf(hist, sizeof hist, "%s (update id %s)", hname,
             e->workflow_execution_update_completed_event_attributes->meta->update_id);
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
          oom(r);
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
        oom(r);
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
  case ET(TIMER_CANCELED): {
    const TimerCanceledEventAttributes *a = e->timer_canceled_event_attributes;
    ok = p->kind == K_TIMER_CANCEL && a && strcmp(a->timer_id, seq) == 0;
    break;
  }
  case ET(MARKER_RECORDED): {
    const MarkerRecordedEventAttributes *a = e->marker_recorded_event_attributes;
    ok = p->kind == K_MARKER && a && strcmp(a->marker_name, p->type) == 0;
    break;
  }
  case ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED): {
    const StartChildWorkflowExecutionInitiatedEventAttributes *a =
        e->start_child_workflow_execution_initiated_event_attributes;
    ok = p->kind == K_CHILD && a && strcmp(a->workflow_id, p->ident) == 0 && a->workflow_type &&
         strcmp(a->workflow_type->name, p->type) == 0;
    kid *k = ok ? find_kid_seq(r, p->seq) : NULL;
    if (k) k->event_id = e->event_id;
    break;
  }
  case ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED):
  case ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED): {
    const WorkflowExecution *we = NULL;
    if (t == ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)) {
      const SignalExternalWorkflowExecutionInitiatedEventAttributes *a =
          e->signal_external_workflow_execution_initiated_event_attributes;
      we = a ? a->workflow_execution : NULL;
      ok = p->kind == K_SIGNAL_EXT && a && strcmp(a->signal_name, p->type) == 0;
    } else {
      const RequestCancelExternalWorkflowExecutionInitiatedEventAttributes *a =
          e->request_cancel_external_workflow_execution_initiated_event_attributes;
      we = a ? a->workflow_execution : NULL;
      ok = p->kind == K_CANCEL_EXT && a;
    }
    ok = ok && we && strcmp(we->workflow_id, p->ident) == 0;
    if (ok) {
      if (grow((void **)&r->exts, &r->cap_exts, r->nexts + 1, sizeof *r->exts)) {
        oom(r);
        return;
      }
      r->exts[r->nexts++] = (idmap){e->event_id, p->seq, 0, 0};
    }
    break;
  }
  case ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES): ok = p->kind == K_UPSERT_SA; break;
  case ET(WORKFLOW_PROPERTIES_MODIFIED): ok = p->kind == K_MEMO; break;
  case ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED): {
    const WorkflowExecutionUpdateAcceptedEventAttributes *a = e->workflow_execution_update_accepted_event_attributes;
    ok = p->kind == K_UPD_ACCEPT && a && a->protocol_instance_id && strcmp(a->protocol_instance_id, p->ident) == 0;
    break;
  }
  case ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED): {
    const WorkflowExecutionUpdateCompletedEventAttributes *a = e->workflow_execution_update_completed_event_attributes;
    ok = p->kind == K_UPD_RESPOND && a && a->meta && a->meta->update_id && strcmp(a->meta->update_id, p->ident) == 0;
    break;
  }
  case ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW): ok = p->kind == K_CAN; break;
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
  pending_del(r, m->seq);
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

static kid *find_kid_event(dbx_wf_run *r, int64_t initiated) {
  for (size_t i = 0; i < r->nkids; i++)
    if (r->kids[i].event_id == initiated && initiated) return &r->kids[i];
  return NULL;
}

/* Child workflow events: 1 handled, 0 not a child event, -1 OOM. */
static int child_outcome(dbx_wf_run *r, const HistoryEvent *e) {
  int64_t init = 0;
  dbx_child_status st;
  const Payloads *res = NULL;
  const Failure *f = NULL;
  const WorkflowExecution *we = NULL;
  int cause = 0;
  switch (e->event_type) {
#define CASE(ev, field, status)                                                                    \
  case ET(ev):                                                                                     \
    if (!e->field) return 1;                                                                       \
    init = e->field->initiated_event_id;                                                           \
    st = status;
    CASE(CHILD_WORKFLOW_EXECUTION_STARTED, child_workflow_execution_started_event_attributes, DBX_CHILD_STARTED)
    we = e->child_workflow_execution_started_event_attributes->workflow_execution;
    break;
    CASE(START_CHILD_WORKFLOW_EXECUTION_FAILED, start_child_workflow_execution_failed_event_attributes,
         DBX_CHILD_START_FAILED)
    cause = e->start_child_workflow_execution_failed_event_attributes->cause;
    break;
    CASE(CHILD_WORKFLOW_EXECUTION_COMPLETED, child_workflow_execution_completed_event_attributes,
         DBX_CHILD_COMPLETED)
    res = e->child_workflow_execution_completed_event_attributes->result;
    break;
    CASE(CHILD_WORKFLOW_EXECUTION_FAILED, child_workflow_execution_failed_event_attributes, DBX_CHILD_FAILED)
    f = e->child_workflow_execution_failed_event_attributes->failure;
    break;
    CASE(CHILD_WORKFLOW_EXECUTION_CANCELED, child_workflow_execution_canceled_event_attributes, DBX_CHILD_CANCELED)
    break;
    CASE(CHILD_WORKFLOW_EXECUTION_TIMED_OUT, child_workflow_execution_timed_out_event_attributes,
         DBX_CHILD_TIMED_OUT)
    break;
    CASE(CHILD_WORKFLOW_EXECUTION_TERMINATED, child_workflow_execution_terminated_event_attributes,
         DBX_CHILD_TERMINATED)
    break;
#undef CASE
  default: return 0;
  }
  kid *k = find_kid_event(r, init);
  if (!k || k->done) {
    set_bad(r, e->event_id,
            "nondeterminism at event %lld: %s for initiated event %lld, a child workflow code never started",
            (long long)e->event_id, st == DBX_CHILD_START_FAILED ? "StartChildWorkflowExecutionFailed" : "a child workflow event",
            (long long)init);
    return 1;
  }
  if (st == DBX_CHILD_STARTED && we) {
    char *rid = dbx_strdup(we->run_id);
    if (!rid) return -1;
    free(k->run_id);
    k->run_id = rid;
  }
  if (st != DBX_CHILD_STARTED) {
    k->done = 1;
    pending_del(r, k->seq);
  }
  job *j = new_job(r, J_CHILD, k->seq);
  if (!j) return -1;
  const Failure *af = app_failure(f);
  int app = af && af->failure_info_case == FI(APPLICATION_FAILURE_INFO) && af->application_failure_info;
  j->co.status = st;
  j->co.cause = cause;
  j->co.workflow_id = dbx_strdup(k->wid);
  j->co.run_id = dbx_strdup(k->run_id);
  j->co.result_json = st == DBX_CHILD_COMPLETED ? dbx_payloads_to_json(res) : dbx_strdup("null");
  j->co.result_len = j->co.result_json ? strlen(j->co.result_json) : 0;
  j->co.failure_type = dbx_strdup(app ? af->application_failure_info->type : "");
  j->co.failure_message = dbx_strdup(af ? af->message : "");
  if (!j->co.workflow_id || !j->co.run_id || !j->co.result_json || !j->co.failure_type ||
      !j->co.failure_message)
    return -1;
  return 1;
}

/* Outcomes of SignalExternal / RequestCancelExternal: 1 handled, 0 not one, -1 OOM. */
static int external_outcome(dbx_wf_run *r, const HistoryEvent *e) {
  int64_t init;
  int failed = 0;
  switch (e->event_type) {
  case ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED):
    if (!e->external_workflow_execution_signaled_event_attributes) return 1;
    init = e->external_workflow_execution_signaled_event_attributes->initiated_event_id;
    break;
  case ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED):
    if (!e->signal_external_workflow_execution_failed_event_attributes) return 1;
    init = e->signal_external_workflow_execution_failed_event_attributes->initiated_event_id;
    failed = 1;
    break;
  case ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED):
    if (!e->external_workflow_execution_cancel_requested_event_attributes) return 1;
    init = e->external_workflow_execution_cancel_requested_event_attributes->initiated_event_id;
    break;
  case ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED):
    if (!e->request_cancel_external_workflow_execution_failed_event_attributes) return 1;
    init = e->request_cancel_external_workflow_execution_failed_event_attributes->initiated_event_id;
    failed = 1;
    break;
  default: return 0;
  }
  idmap *m = find_map(r->exts, r->nexts, init);
  if (!m || m->resolved) {
    set_bad(r, e->event_id,
            "nondeterminism at event %lld: outcome for initiated event %lld that workflow code never issued",
            (long long)e->event_id, (long long)init);
    return 1;
  }
  m->resolved = 1;
  job *j = new_job(r, J_EXT, m->seq);
  if (!j) return -1;
  j->failed = failed;
  return 1;
}

/* JSON of details[key] of a marker event (malloc'd), NULL when absent;
 * sets *oom (never clears it) when the copy could not be allocated. */
static char *marker_detail(const MarkerRecordedEventAttributes *a, const char *key, int *oom) {
  for (size_t i = 0; i < a->n_details; i++)
    if (a->details[i] && strcmp(a->details[i]->key, key) == 0) {
      char *v = dbx_payloads_to_json(a->details[i]->value);
      if (!v) *oom = 1;
      return v;
    }
  return NULL;
}

/* Read ahead the markers that the task started at events[i] recorded (the
 * code asks for their values before the events are applied, as Temporal
 * SDKs do): those after its WorkflowTaskCompleted, up to the next task. */
static int read_markers(dbx_wf_run *r, HistoryEvent *const *events, size_t i, size_t n) {
  if (i + 1 >= n || events[i + 1]->event_type != ET(WORKFLOW_TASK_COMPLETED)) return 0;
  int64_t done_id = events[i + 1]->event_id;
  for (size_t k = i + 2; k < n && events[k]->event_type != ET(WORKFLOW_TASK_STARTED); k++) {
    const MarkerRecordedEventAttributes *a = events[k]->marker_recorded_event_attributes;
    if (events[k]->event_type != ET(MARKER_RECORDED) || !a) continue;
    if (a->workflow_task_completed_event_id && a->workflow_task_completed_event_id != done_id) continue;
    if (grow((void **)&r->look, &r->cap_look, r->nlook + 1, sizeof *r->look)) return -1;
    int ver = strcmp(a->marker_name, "Version") == 0, oom = 0;
    lookahead l = {dbx_strdup(a->marker_name), ver ? marker_detail(a, "change-id", &oom) : NULL,
                   marker_detail(a, ver ? "version" : "data", &oom), 0};
    if (!l.value && !oom) l.value = dbx_strdup("null");
    if (!l.name || !l.value || oom) {
      free(l.name);
      free(l.key);
      free(l.value);
      return -1;
    }
    r->look[r->nlook++] = l;
  }
  return 0;
}

static void end_wait(dbx_wf_run *r, size_t w, const char *json, size_t len, int timed_out) {
  r->waits[w].done = 1;
  int64_t seq = r->waits[w].seq, tseq = r->waits[w].timer_seq;
  if (!timed_out && tseq > 0) dbx_wf_cancel_timer(r, tseq); /* -1 when it already fired: ignored */
  if (r->t->on_signal_wait) r->t->on_signal_wait(r->state, r, seq, json, len, timed_out);
}

static void run_signal(dbx_wf_run *r, const job *j) {
  size_t nwaits = r->nwaits; /* a wait begun by the handler itself awaits a later signal */
  const dbx_wf_signal_def *d = r->t->signals;
  while (d && d->name && strcmp(d->name, j->name) != 0) d++;
  if (d && d->name) {
    if (d->fn) d->fn(r->state, r, j->json, j->len);
  } else if (r->t->on_signal) {
    r->t->on_signal(r->state, r, j->name, j->json, j->len);
  }
  for (size_t w = 0; w < nwaits && usable(r); w++)
    if (!r->waits[w].done && strcmp(r->waits[w].name, j->name) == 0) {
      end_wait(r, w, j->json, j->len, 0);
      break;
    }
}

static void run_timer(dbx_wf_run *r, int64_t seq) {
  for (size_t w = 0; w < r->nwaits; w++)
    if (r->waits[w].timer_seq == seq) { /* a wait's timer: never on_timer */
      if (!r->waits[w].done) end_wait(r, w, "null", 4, 1);
      return;
    }
  if (r->t->on_timer) r->t->on_timer(r->state, r, seq);
}

static void activate(dbx_wf_run *r, const HistoryEvent *e, int replaying, HistoryEvent *const *events,
                     size_t i, size_t n) {
  check_unmatched(r, e->event_id);
  if (r->bad || r->oom) return;
  r->activation++;
  r->replaying = replaying;
  if (e->event_time) r->now_ms = dbx_pb_timestamp_ns(e->event_time) / 1000000;
  r->hist_len = e->event_id;
  const WorkflowTaskStartedEventAttributes *ws = e->workflow_task_started_event_attributes;
  r->hist_bytes = ws ? ws->history_size_bytes : 0;
  r->suggest_can = ws ? ws->suggest_continue_as_new : 0;
  look_clear(r);
  rejects_clear(r);
  r->look_ready = 0;
  r->act_events = replaying ? events : NULL;
  r->act_i = i;
  r->act_n = n;
  if (!r->created && r->have_start) {
    r->created = 1;
    r->state = r->t->create(r, r->input ? r->input : "null", r->input ? r->input_len : 4);
    if (!r->state && !r->closed) dbx_wf_fail(r, "WorkflowError", "workflow code could not start");
  }
  for (size_t k = 0; k < r->njobs; k++) {
    job *j = &r->jobs[k];
    if (!usable(r) || !r->state) break;
    switch (j->kind) {
    case J_ACT:
      if (r->t->on_activity) r->t->on_activity(r->state, r, j->seq, &j->o);
      break;
    case J_TIMER: run_timer(r, j->seq); break;
    case J_SIGNAL: run_signal(r, j); break;
    case J_CANCEL:
      if (r->t->on_cancel) r->t->on_cancel(r->state, r);
      else dbx_wf_cancel_done(r);
      break;
    case J_CHILD:
      if (r->t->on_child) r->t->on_child(r->state, r, j->seq, &j->co);
      break;
    case J_EXT:
      if (r->t->on_external) r->t->on_external(r->state, r, j->seq, j->failed);
      break;
    }
  }
  for (size_t k = 0; k < r->njobs; k++) job_free(&r->jobs[k]);
  r->njobs = 0;
  run_updates(r, replaying, events, i, n);
  r->act_events = NULL; /* borrowed for this call only */
}

static dbx_err apply_events(dbx_wf_run *r, HistoryEvent *const *events, size_t n,
                           int64_t started_event_id) {
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
      if (a && a->task_queue && !r->task_queue) {
        r->task_queue = dbx_strdup(a->task_queue->name);
        if (!r->task_queue) return DBX_ENOMEM;
      }
      r->have_start = 1;
    } else if (t == ET(WORKFLOW_TASK_STARTED)) {
      int next_completed = i + 1 < n && events[i + 1]->event_type == ET(WORKFLOW_TASK_COMPLETED);
      if (started_event_id > 0 && e->event_id == started_event_id)
        activate(r, e, 0, events, i, n);
      else if (next_completed)
        activate(r, e, 1, events, i, n);
      else if (started_event_id <= 0 && i + 1 == n)
        activate(r, e, 0, events, i, n);
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
      if (!m || m->resolved) {
        set_bad(r, e->event_id, "nondeterminism at event %lld: TimerFired for a timer workflow code never started or cancelled",
                (long long)e->event_id);
      } else {
        m->resolved = 1;
        pending_del(r, m->seq);
        if (!new_job(r, J_TIMER, m->seq)) return DBX_ENOMEM;
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
    } else if (child_outcome(r, e) < 0 || external_outcome(r, e) < 0) {
      return DBX_ENOMEM;
    }
    if (r->oom) return DBX_ENOMEM;
    if (r->bad) return DBX_ESTATE;
  }
  return DBX_OK;
}

/* 1 when e's attributes (a oneof) are none or the ones of its event_type:
 * the code reads the attributes member its event_type names, so a history
 * from outside (a service, a worker store) that sets another member is
 * refused, not read as the wrong type. By name: EVENT_TYPE_X has the
 * attributes field x_event_attributes. */
static int attributes_match(const HistoryEvent *e) {
  if (e->attributes_case == 0) return 1;
  const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(&HistoryEvent__D, e->attributes_case);
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__event_type__descriptor, e->event_type);
  if (!f || !v || strncmp(v->name, "EVENT_TYPE_", 11) != 0) return 0;
  const char *a = v->name + 11, *b = f->name;
  for (; *a; a++, b++)
    if (*b != (*a >= 'A' && *a <= 'Z' ? *a - 'A' + 'a' : *a)) return 0;
  return strcmp(b, "_event_attributes") == 0;
}

dbx_err dbx_wf_run_apply(dbx_wf_run *r, HistoryEvent *const *events, size_t n,
                         int64_t started_event_id) {
  if (!r || (n && !events)) return DBX_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (!events[i] || !attributes_match(events[i])) return DBX_EINVAL; /* malformed history */
  if (r->bad) return DBX_ESTATE;
  if (r->oom) return DBX_ENOMEM;
  rejects_clear(r);
  dbx_err rc = apply_events(r, events, n, started_event_id);
  if (rc == DBX_ENOMEM) r->oom = 1; /* partly applied: never used again */
  return rc;
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
