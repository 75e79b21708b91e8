/* Allocation failures in the service (issue 8, section 5): for each of a
 * representative set of requests, fail the Nth allocation of our own code
 * (base/alloc.h, protobuf-c through dbx_pb_allocator) inside the batch that
 * runs it, for N = 1, 2, ... until the request succeeds without reaching the
 * failure. Every failing run must answer a clean gRPC error
 * (RESOURCE_EXHAUSTED or INTERNAL) and leave the store exactly as it was;
 * the request then succeeds when retried, with the same events (types and
 * the fields they carry) as a reference run that never failed. ASan's leak
 * checker (the asan build) and valgrind (the normal build) find what a
 * failing run leaks.
 *
 * A real embedded service (service/service.h) on a real LMDB store in a
 * temporary directory, driven over loopback gRPC by a fake worker
 * (tests/svc_client). dbx_service_test_alloc_fail_at arms the hook on the
 * engine thread for the length of the batch's store write only, while this
 * thread waits for the answer, so the failure lands in service code, not in
 * the client's or the RPC layer's. The store is read directly through a
 * read transaction of the service's own store handle (white-box: this file
 * and test_svc_state.c include service/svc.h; tests/check_rooms.sh). */
#include "tests/svc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/util.h"
#include "service/service.h"
#include "service/svc.h"

#define CALL_MS 20000
#define MAX_WALK 20000

typedef struct {
  dbx_service *svc;
  dbx_rpc_channel *ch;
  char *dir;
} fixture;

/* A service on a fresh store in a temporary directory. NULL on failure. */
static fixture *fixture_open(void) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return NULL;
  const char *tmp = getenv("TMPDIR");
  f->dir = dbx_asprintf("%s/dbx-svc-oom.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (f->dir == NULL || mkdtemp(f->dir) == NULL) {
    free(f->dir);
    free(f);
    return NULL;
  }
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = f->dir;
  o.no_sync = 1;
  o.long_poll_ms = 2000;
  char *err = NULL;
  if (dbx_service_start(&o, &f->svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx_service_start: %s\n", err ? err : "?");
    free(err);
    dbx_fs_remove_tree(f->dir);
    free(f->dir);
    free(f);
    return NULL;
  }
  f->ch = dbx_svct_connect(dbx_service_port(f->svc));
  return f;
}

static void fixture_close(fixture *f) {
  if (f == NULL) return;
  dbx_rpc_channel_destroy(f->ch);
  dbx_service_stop(f->svc);
  if (f->dir) dbx_fs_remove_tree(f->dir);
  free(f->dir);
  free(f);
}

static int group_setup(void **state) {
  dbx_rpc_global_init();
  *state = fixture_open();
  return *state ? 0 : -1;
}

static int group_teardown(void **state) {
  fixture_close(*state);
  dbx_rpc_global_shutdown();
  return 0;
}

/* ------------------------------------------------------------ the store, read directly */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* A digest of every row of the tables a request may change (the sequence
 * counter in meta excepted: a failed job may have drawn numbers). */
static uint64_t store_digest(fixture *f) {
  dbx_service *s = f->svc;
  dbx_table ts[] = {s->t_runs, s->t_execs, s->t_history, s->t_tasks, s->t_timers, s->t_requests};
  dbx_txn *txn = NULL;
  assert_int_equal(dbx_store_read_begin(s->store, &txn), DBX_OK);
  uint64_t h = 1469598103934665603ULL;
  for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
    dbx_cursor *cur = NULL;
    assert_int_equal(dbx_store_cursor_open(txn, ts[t], &cur), DBX_OK);
    dbx_val k, v;
    dbx_err e = dbx_store_cursor_seek(cur, NULL, 0, &k, &v);
    while (e == DBX_OK) {
      h = fnv(h, &k.size, sizeof k.size);
      h = fnv(h, k.data, k.size);
      h = fnv(h, &v.size, sizeof v.size);
      h = fnv(h, v.data, v.size);
      e = dbx_store_cursor_next(cur, &k, &v);
    }
    assert_int_equal(e, DBX_ENOTFOUND);
    dbx_store_cursor_close(cur);
    h = fnv(h, "|", 1);
  }
  dbx_store_txn_abort(txn);
  return h;
}

/* The oneof member of ev that carries its attributes is set. */
static int attrs_set(const HistoryEvent *ev) {
  if (ev->attributes_case == TEMPORAL__API__HISTORY__V1__HISTORY_EVENT__ATTRIBUTES__NOT_SET) return 0;
  const ProtobufCFieldDescriptor *fd =
      protobuf_c_message_descriptor_get_field(&HistoryEvent__D, (unsigned)ev->attributes_case);
  return fd != NULL && *(void *const *)((const char *)ev + fd->offset) != NULL;
}

/* Every run in the store: its state unpacks; its history has ids 1..n
 * contiguous, one per id below next_event_id, each unpacking with event_time
 * and attributes set; its buffered events unpack too. */
static void store_check(fixture *f) {
  dbx_service *s = f->svc;
  dbx_txn *txn = NULL;
  assert_int_equal(dbx_store_read_begin(s->store, &txn), DBX_OK);
  ectx c;
  memset(&c, 0, sizeof c);
  c.svc = s;
  c.txn = txn;
  dbx_cursor *cur = NULL;
  assert_int_equal(dbx_store_cursor_open(txn, s->t_runs, &cur), DBX_OK);
  dbx_val k, v;
  dbx_err e = dbx_store_cursor_seek(cur, NULL, 0, &k, &v);
  while (e == DBX_OK) {
    RunState *rs = (RunState *)protobuf_c_message_unpack(&RunState__D, NULL, v.size, v.data);
    assert_non_null(rs);
    HistoryEvent **evs = NULL;
    size_t n = 0;
    assert_int_equal(svc_events_load(&c, rs->run_seq, 1, 0, &evs, &n, 0), DBX_OK);
    assert_int_equal((int64_t)n, rs->next_event_id - 1);
    for (size_t i = 0; i < n; i++) {
      assert_int_equal(evs[i]->event_id, (int64_t)i + 1);
      assert_non_null(evs[i]->event_time);
      if (!attrs_set(evs[i])) fail_msg("run %s: event %zu (type %d) has no attributes", rs->run_id, i + 1, evs[i]->event_type);
    }
    svc_events_free(evs, n);
    for (size_t i = 0; i < rs->n_buffered_events; i++) {
      HistoryEvent *b = (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, rs->buffered_events[i].len,
                                                                  rs->buffered_events[i].data);
      assert_non_null(b);
      assert_true(attrs_set(b));
      protobuf_c_message_free_unpacked(&b->base, NULL);
    }
    protobuf_c_message_free_unpacked(&rs->base, NULL);
    e = dbx_store_cursor_next(cur, &k, &v);
  }
  assert_int_equal(e, DBX_ENOTFOUND);
  dbx_store_cursor_close(cur);
  dbx_store_txn_abort(txn);
}

/* How many fields of m are present, recursively: submessages, non-empty
 * strings and bytes, repeated elements. Ids and times differ between two
 * runs of the same request; which fields an event carries does not, so a
 * field left out by an allocation failure shows here. */
static size_t presence(const ProtobufCMessage *m, int depth) {
  if (m == NULL || depth > 40) return 0;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  size_t n = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[i];
    const char *base = (const char *)m;
    if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (*(const uint32_t *)(base + fd->quantifier_offset) != fd->id) continue;
      n++;
    }
    size_t count = 1;
    const void *ptr = base + fd->offset;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      count = *(const size_t *)(base + fd->quantifier_offset);
      ptr = *(void *const *)(base + fd->offset);
      n += count;
      if (ptr == NULL) continue;
    }
    for (size_t k = 0; k < count; k++) {
      if (fd->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = ((const char *const *)ptr)[k];
        n += s != NULL && s[0] != '\0';
      } else if (fd->type == PROTOBUF_C_TYPE_BYTES) {
        n += ((const ProtobufCBinaryData *)ptr)[k].len > 0;
      } else if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessage *sub = ((const ProtobufCMessage *const *)ptr)[k];
        if (sub) n += 1 + presence(sub, depth + 1);
      }
    }
  }
  return n;
}

/* Events [from, end) of (wfid, run): their types and field counts into
 * out[0..cap), two ints each. Returns the number of events. */
static size_t events_shape(fixture *f, const char *wfid, const char *run_id, int64_t from, int *out, size_t cap) {
  dbx_txn *txn = NULL;
  assert_int_equal(dbx_store_read_begin(f->svc->store, &txn), DBX_OK);
  ectx c;
  memset(&c, 0, sizeof c);
  c.svc = f->svc;
  c.txn = txn;
  RunState *rs = NULL;
  assert_int_equal(svc_run_load(&c, "default", wfid, run_id, &rs), DBX_OK);
  HistoryEvent **evs = NULL;
  size_t n = 0;
  assert_int_equal(svc_events_load(&c, rs->run_seq, from, 0, &evs, &n, 0), DBX_OK);
  dbx_store_txn_abort(txn);
  assert_true(2 * n <= cap);
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = evs[i]->event_type;
    out[2 * i + 1] = (int)presence(&evs[i]->base, 0);
  }
  svc_events_free(evs, n);
  svc_runstate_free(rs);
  return n;
}

static int64_t history_len(fixture *f, const char *wfid, const char *run_id) {
  dbx_txn *txn = NULL;
  assert_int_equal(dbx_store_read_begin(f->svc->store, &txn), DBX_OK);
  ectx c;
  memset(&c, 0, sizeof c);
  c.svc = f->svc;
  c.txn = txn;
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(&c, "default", wfid, run_id, &rs);
  dbx_store_txn_abort(txn);
  if (rc == DBX_ENOTFOUND) return 0;
  assert_int_equal(rc, DBX_OK);
  int64_t n = rs->next_event_id - 1;
  svc_runstate_free(rs);
  return n;
}

/* ------------------------------------------------------------ scenarios */

#define SHAPE_CAP 256

/* One request kind: setup makes fresh state for it (a new workflow id each
 * time), call sends the request once (the same request on every try) and
 * returns its gRPC status, after fills the run whose new events show what
 * the request did (wfid, run id, first new event id). */
typedef struct scenario scenario;
struct scenario {
  const char *name;
  void (*setup)(fixture *f, scenario *s);
  int (*call)(fixture *f, scenario *s, dbx_rpc_result *raw);
  /* the run and first event id whose events the request produced */
  void (*after)(fixture *f, scenario *s, const char **wfid, const char **run, int64_t *from);
  int seq;
  char wfid[64], tq[64];
  char *run;                  /* run id from setup */
  char *new_run;              /* reset: the new run */
  ProtobufCBinaryData token;  /* workflow or activity task token from setup */
  int64_t event_id;           /* reset point */
  int64_t before;             /* history length before the call */
  size_t history_events;      /* GetWorkflowExecutionHistory: events in the reply */
};

static void scenario_clear(scenario *s) {
  free(s->run);
  free(s->new_run);
  free(s->token.data);
  s->run = s->new_run = NULL;
  s->token.data = NULL;
  s->token.len = 0;
}

static void fresh_ids(scenario *s) {
  s->seq++;
  snprintf(s->wfid, sizeof s->wfid, "oom-%s-%d", s->name, s->seq);
  snprintf(s->tq, sizeof s->tq, "oom-%s-q%d", s->name, s->seq);
}

static void start_request(const scenario *s, StartWorkflowExecutionRequest *q, WorkflowType *wt, TaskQueue *tq,
                          Duration *task_timeout) {
  wt->name = "oom.Workflow";
  tq->name = (char *)s->tq;
  dbx_pb_duration_init_ms(task_timeout, 120000); /* no task times out while the walk runs */
  q->namespace_ = "default";
  q->workflow_id = (char *)s->wfid;
  q->workflow_type = wt;
  q->task_queue = tq;
  q->workflow_task_timeout = task_timeout;
  q->identity = "oom-test";
  q->request_id = (char *)s->wfid;
}

static char *start(fixture *f, const scenario *s) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration d;
  start_request(s, &q, &wt, &tq, &d);
  StartWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, CALL_MS,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  char *run = strdup(r->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return run;
}

static ProtobufCBinaryData copy_token(ProtobufCBinaryData t) {
  ProtobufCBinaryData c = {t.len, malloc(t.len ? t.len : 1)};
  assert_non_null(c.data);
  memcpy(c.data, t.data, t.len);
  return c;
}

static ProtobufCBinaryData wft_take(fixture *f, const scenario *s) {
  PollWorkflowTaskQueueResponse *p = dbx_svct_wft_poll(f->ch, s->tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  ProtobufCBinaryData t = copy_token(p->task_token);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  return t;
}

static void after_run(fixture *f, scenario *s, const char **wfid, const char **run, int64_t *from) {
  (void)f;
  *wfid = s->wfid;
  *run = s->run;
  *from = s->before + 1;
}

static int respond(fixture *f, ProtobufCBinaryData token, Command **cmds, size_t n, dbx_rpc_result *raw) {
  RespondWorkflowTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  q.namespace_ = "default";
  q.task_token = token;
  q.commands = cmds;
  q.n_commands = n;
  q.identity = "oom-worker";
  return dbx_svct_call(f->ch, "RespondWorkflowTaskCompleted", &q.base, NULL, CALL_MS, NULL, raw);
}

/* StartWorkflowExecution */
static void start_setup(fixture *f, scenario *s) {
  (void)f;
  fresh_ids(s);
}
static int start_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration d;
  start_request(s, &q, &wt, &tq, &d);
  StartWorkflowExecutionResponse *r = NULL;
  int st = dbx_svct_call(f->ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, CALL_MS,
                         (void **)&r, raw);
  if (st == DBX_GRPC_OK) {
    free(s->run);
    s->run = strdup(r->run_id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  return st;
}

/* PollWorkflowTaskQueue */
static void poll_setup(fixture *f, scenario *s) {
  fresh_ids(s);
  s->run = start(f, s);
}
static int poll_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = s->tq;
  q.namespace_ = "default";
  q.task_queue = &tq;
  q.identity = "oom-worker";
  PollWorkflowTaskQueueResponse *r = NULL;
  int st = dbx_svct_call(f->ch, "PollWorkflowTaskQueue", &q.base, &PollWorkflowTaskQueueResponse__D, CALL_MS,
                         (void **)&r, raw);
  if (st == DBX_GRPC_OK) {
    assert_true(r->task_token.len > 0); /* the task was there: a failed poll gave it back */
    assert_int_equal(r->history->n_events, 3); /* Started, Scheduled, Started */
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  return st;
}

/* RespondWorkflowTaskCompleted with five command kinds */
static void cmds_setup(fixture *f, scenario *s) {
  fresh_ids(s);
  s->run = start(f, s);
  s->token = wft_take(f, s);
}

static int cmds_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE), ctq = tq;
  Duration s2c, fire;
  at.name = "oom.Activity";
  tq.name = s->tq;
  dbx_pb_duration_init_ms(&s2c, 600000);
  dbx_pb_duration_init_ms(&fire, 3600000);
  ScheduleActivityTaskCommandAttributes sa = INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  sa.activity_id = "a1";
  sa.activity_type = &at;
  sa.task_queue = &tq;
  sa.start_to_close_timeout = &s2c;
  StartTimerCommandAttributes ta = INIT(TEMPORAL__API__COMMAND__V1__START_TIMER_COMMAND_ATTRIBUTES);
  ta.timer_id = "t1";
  ta.start_to_fire_timeout = &fire;
  RecordMarkerCommandAttributes ma = INIT(TEMPORAL__API__COMMAND__V1__RECORD_MARKER_COMMAND_ATTRIBUTES);
  ma.marker_name = "oom-marker";
  char child_id[96];
  snprintf(child_id, sizeof child_id, "%s-child", s->wfid);
  WorkflowType cwt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  cwt.name = "oom.Child";
  ctq.name = "oom-child-q";
  StartChildWorkflowExecutionCommandAttributes ca =
      INIT(TEMPORAL__API__COMMAND__V1__START_CHILD_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  ca.namespace_ = "default";
  ca.workflow_id = child_id;
  ca.workflow_type = &cwt;
  ca.task_queue = &ctq;
  ca.workflow_task_timeout = &fire;
  ca.parent_close_policy = 2; /* ABANDON */
  Payload pv = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  pv.data.data = (uint8_t *)"\"blue\"";
  pv.data.len = 6;
  Temporal__Api__Common__V1__SearchAttributes__IndexedFieldsEntry ent =
      INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES__INDEXED_FIELDS_ENTRY);
  ent.key = "CustomKeywordField";
  ent.value = &pv;
  Temporal__Api__Common__V1__SearchAttributes__IndexedFieldsEntry *ents[1] = {&ent};
  SearchAttributes attrs = INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES);
  attrs.n_indexed_fields = 1;
  attrs.indexed_fields = ents;
  UpsertWorkflowSearchAttributesCommandAttributes ua =
      INIT(TEMPORAL__API__COMMAND__V1__UPSERT_WORKFLOW_SEARCH_ATTRIBUTES_COMMAND_ATTRIBUTES);
  ua.search_attributes = &attrs;
  Command c[5];
  for (int i = 0; i < 5; i++) {
    Command x = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
    c[i] = x;
  }
  c[0].command_type = CT(SCHEDULE_ACTIVITY_TASK);
  c[0].attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  c[0].schedule_activity_task_command_attributes = &sa;
  c[1].command_type = CT(START_TIMER);
  c[1].attributes_case = CMD(START_TIMER);
  c[1].start_timer_command_attributes = &ta;
  c[2].command_type = CT(RECORD_MARKER);
  c[2].attributes_case = CMD(RECORD_MARKER);
  c[2].record_marker_command_attributes = &ma;
  c[3].command_type = CT(START_CHILD_WORKFLOW_EXECUTION);
  c[3].attributes_case = CMD(START_CHILD_WORKFLOW_EXECUTION);
  c[3].start_child_workflow_execution_command_attributes = &ca;
  c[4].command_type = CT(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
  c[4].attributes_case = CMD(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
  c[4].upsert_workflow_search_attributes_command_attributes = &ua;
  Command *cp[5] = {&c[0], &c[1], &c[2], &c[3], &c[4]};
  return respond(f, s->token, cp, 5, raw);
}

/* RespondWorkflowTaskCompleted with CompleteWorkflowExecution */
static int complete_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  p.data.data = (uint8_t *)"42";
  p.data.len = 2;
  Payload *pp[1] = {&p};
  Payloads res = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  res.n_payloads = 1;
  res.payloads = pp;
  CompleteWorkflowExecutionCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  a.result = &res;
  Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  c.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  c.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  c.complete_workflow_execution_command_attributes = &a;
  Command *cp[1] = {&c};
  return respond(f, s->token, cp, 1, raw);
}

/* RespondActivityTaskCompleted / Failed */
static void activity_setup(fixture *f, scenario *s) {
  fresh_ids(s);
  s->run = start(f, s);
  ProtobufCBinaryData wt = wft_take(f, s);
  dbx_svct_wft_schedule_activity(f->ch, wt, "a1", s->tq, 600, 1);
  free(wt.data);
  PollActivityTaskQueueResponse *p = dbx_svct_activity_poll(f->ch, s->tq, CALL_MS);
  assert_true(p->task_token.len > 0);
  s->token = copy_token(p->task_token);
  protobuf_c_message_free_unpacked(&p->base, NULL);
}
static int act_completed_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  return dbx_svct_activity_complete(f->ch, s->token, raw);
}
static int act_failed_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  ai.type = "OomTestError";
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  fl.message = "it failed";
  fl.failure_info_case = FI(APPLICATION_FAILURE_INFO);
  fl.application_failure_info = &ai;
  RespondActivityTaskFailedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_REQUEST);
  q.namespace_ = "default";
  q.task_token = s->token;
  q.failure = &fl;
  q.identity = "oom-worker";
  return dbx_svct_call(f->ch, "RespondActivityTaskFailed", &q.base, NULL, CALL_MS, NULL, raw);
}

/* SignalWorkflowExecution */
static int signal_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  p.data.data = (uint8_t *)"\"ping\"";
  p.data.len = 6;
  Payload *pp[1] = {&p};
  Payloads in = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  in.n_payloads = 1;
  in.payloads = pp;
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = s->wfid;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = "poke";
  q.input = &in;
  q.identity = "oom-test";
  q.request_id = s->wfid;
  return dbx_svct_call(f->ch, "SignalWorkflowExecution", &q.base, NULL, CALL_MS, NULL, raw);
}

/* GetWorkflowExecutionHistory (a read: the reply must hold every event) */
static int history_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  GetWorkflowExecutionHistoryRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = s->wfid;
  we.run_id = s->run;
  q.namespace_ = "default";
  q.execution = &we;
  GetWorkflowExecutionHistoryResponse *r = NULL;
  int st = dbx_svct_call(f->ch, "GetWorkflowExecutionHistory", &q.base, &GetWorkflowExecutionHistoryResponse__D,
                         CALL_MS, (void **)&r, raw);
  if (st == DBX_GRPC_OK) {
    assert_non_null(r->history);
    s->history_events = r->history->n_events;
    assert_int_equal((int64_t)r->history->n_events, history_len(f, s->wfid, s->run));
    for (size_t i = 0; i < r->history->n_events; i++) assert_true(attrs_set(r->history->events[i]));
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  return st;
}

/* ResetWorkflowExecution to the first WorkflowTaskCompleted (a timer pending) */
static void reset_setup(fixture *f, scenario *s) {
  fresh_ids(s);
  s->run = start(f, s);
  ProtobufCBinaryData wt = wft_take(f, s);
  dbx_svct_wft_start_timer(f->ch, wt, "t1", 3600);
  free(wt.data);
  s->event_id = 4; /* Started, Scheduled, Started, Completed */
}
static int reset_call(fixture *f, scenario *s, dbx_rpc_result *raw) {
  ResetWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = s->wfid;
  we.run_id = s->run;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.workflow_task_finish_event_id = s->event_id;
  q.reason = "oom test";
  q.request_id = s->wfid;
  ResetWorkflowExecutionResponse *r = NULL;
  int st = dbx_svct_call(f->ch, "ResetWorkflowExecution", &q.base, &ResetWorkflowExecutionResponse__D, CALL_MS,
                         (void **)&r, raw);
  if (st == DBX_GRPC_OK) {
    free(s->new_run);
    s->new_run = strdup(r->run_id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  return st;
}
static void after_reset(fixture *f, scenario *s, const char **wfid, const char **run, int64_t *from) {
  (void)f;
  *wfid = s->wfid;
  *run = s->new_run;
  *from = 1;
}

/* ------------------------------------------------------------ the walk */

/* What the request produced, for comparing with the reference run. */
static size_t outcome(fixture *f, scenario *s, int *shape) {
  const char *wfid = NULL, *run = NULL;
  int64_t from = 1;
  s->after(f, s, &wfid, &run, &from);
  assert_non_null(run);
  size_t n = events_shape(f, wfid, run, from, shape, SHAPE_CAP);
  /* the base run of a reset too: it was terminated */
  if (s->new_run) n += events_shape(f, s->wfid, s->run, s->before + 1, shape + 2 * n, SHAPE_CAP - 2 * n);
  return n;
}

static void walk(fixture *f, scenario *s) {
  int ref[SHAPE_CAP], got[SHAPE_CAP];
  /* the reference: the request on fresh state, never failing */
  s->setup(f, s);
  s->before = s->run ? history_len(f, s->wfid, s->run) : 0;
  assert_int_equal(s->call(f, s, NULL), DBX_GRPC_OK);
  size_t nref = outcome(f, s, ref);
  size_t ref_history = s->history_events;
  scenario_clear(s);

  long failures = 0, absorbed = 0, n = 1;
  s->setup(f, s);
  s->before = s->run ? history_len(f, s->wfid, s->run) : 0;
  for (;; n++) {
    if (n > MAX_WALK) fail_msg("%s: still reaching the failure after %d allocations", s->name, MAX_WALK);
    uint64_t digest = store_digest(f);
    dbx_service_test_alloc_fail_at(f->svc, n);
    dbx_rpc_result raw;
    memset(&raw, 0, sizeof raw);
    int st = s->call(f, s, &raw);
    int hit = dbx_service_test_alloc_result(f->svc);
    if (hit < 0) fail_msg("%s: the call did not run in an armed batch", s->name);
    if (st != DBX_GRPC_OK) {
      if (!hit) fail_msg("%s (N=%ld): status %d without an allocation failure: %s", s->name, n, st,
                         raw.message ? raw.message : "");
      if (st != DBX_GRPC_RESOURCE_EXHAUSTED && st != DBX_GRPC_INTERNAL)
        fail_msg("%s (N=%ld): status %d (%s), want RESOURCE_EXHAUSTED or INTERNAL", s->name, n, st,
                 raw.message ? raw.message : "");
      dbx_rpc_result_cleanup(&raw);
      if (store_digest(f) != digest) fail_msg("%s (N=%ld): the failed request changed the store", s->name, n);
      failures++;
      continue;
    }
    dbx_rpc_result_cleanup(&raw);
    /* it succeeded: as if nothing had failed */
    store_check(f);
    size_t ngot = outcome(f, s, got);
    if (ngot != nref) fail_msg("%s (N=%ld): %zu events, the reference has %zu", s->name, n, ngot, nref);
    for (size_t i = 0; i < 2 * nref; i++)
      if (got[i] != ref[i])
        fail_msg("%s (N=%ld): event %zu differs from the reference (%s %d, want %d)", s->name, n, i / 2,
                 i % 2 ? "fields" : "type", got[i], ref[i]);
    assert_int_equal(s->history_events, ref_history);
    if (!hit) break;
    /* the failure was absorbed (nothing needed that allocation): go on from fresh state */
    absorbed++;
    if (getenv("OOM_DEBUG")) print_message("%s: absorbed at N=%ld\n", s->name, n);
    scenario_clear(s);
    s->setup(f, s);
    s->before = s->run ? history_len(f, s->wfid, s->run) : 0;
  }
  scenario_clear(s);
  print_message("%s: %ld allocations, %ld failed cleanly, %ld absorbed\n", s->name, n - 1, failures, absorbed);
  assert_true(failures > 0);
  /* Every allocation of these paths matters: one whose failure a request
   * survived was a lost note (a poller left asleep) or a lost signal request
   * id (a duplicate on retry), effects no event shows. */
  assert_int_equal(absorbed, 0);
}

/* ------------------------------------------------------------ tests */

static void test_svc_oom_start(void **state) {
  scenario s = {.name = "start", .setup = start_setup, .call = start_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_poll_workflow(void **state) {
  scenario s = {.name = "poll", .setup = poll_setup, .call = poll_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_wft_commands(void **state) {
  scenario s = {.name = "cmds", .setup = cmds_setup, .call = cmds_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_wft_complete(void **state) {
  scenario s = {.name = "complete", .setup = cmds_setup, .call = complete_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_activity_completed(void **state) {
  scenario s = {.name = "actdone", .setup = activity_setup, .call = act_completed_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_activity_failed(void **state) {
  scenario s = {.name = "actfail", .setup = activity_setup, .call = act_failed_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_signal(void **state) {
  scenario s = {.name = "signal", .setup = poll_setup, .call = signal_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_get_history(void **state) {
  scenario s = {.name = "history", .setup = poll_setup, .call = history_call, .after = after_run};
  walk(*state, &s);
}

static void test_svc_oom_reset(void **state) {
  scenario s = {.name = "reset", .setup = reset_setup, .call = reset_call, .after = after_reset};
  walk(*state, &s);
}

/* The store reruns a whole batch after growing a full map (store.h), so a
 * handler runs twice. A signal whose first put finds the map full
 * (dbx_store_test_inject_map_full), walked over both runs: each iteration on
 * a fresh service, since the map stays grown. */
static void test_svc_oom_map_growth_rerun(void **state) {
  (void)state;
  int ref[SHAPE_CAP], got[SHAPE_CAP];
  size_t nref = 0;
  long failures = 0;
  for (long n = 0;; n++) { /* n = 0: the reference, never failing */
    if (n > MAX_WALK) fail_msg("regrow: still reaching the failure after %d allocations", MAX_WALK);
    fixture *f = fixture_open();
    assert_non_null(f);
    scenario s = {.name = "regrow", .after = after_run};
    fresh_ids(&s);
    s.run = start(f, &s);
    s.before = history_len(f, s.wfid, s.run);
    size_t map_before = dbx_store_map_size(f->svc->store);
    uint64_t digest = store_digest(f);
    if (n > 0) dbx_service_test_alloc_fail_at(f->svc, n);
    dbx_store_test_inject_map_full(1);
    dbx_rpc_result raw;
    memset(&raw, 0, sizeof raw);
    int st = signal_call(f, &s, &raw);
    dbx_store_test_inject_map_full(0);
    int hit = n > 0 ? dbx_service_test_alloc_result(f->svc) : 0;
    if (hit < 0) fail_msg("regrow: the call did not run in an armed batch");
    int done = 0;
    if (st != DBX_GRPC_OK) {
      if (!hit) fail_msg("regrow (N=%ld): status %d without an allocation failure: %s", n, st,
                         raw.message ? raw.message : "");
      if (st != DBX_GRPC_RESOURCE_EXHAUSTED && st != DBX_GRPC_INTERNAL)
        fail_msg("regrow (N=%ld): status %d (%s)", n, st, raw.message ? raw.message : "");
      if (store_digest(f) != digest) fail_msg("regrow (N=%ld): the failed request changed the store", n);
      failures++;
    } else {
      assert_true(dbx_store_map_size(f->svc->store) > map_before); /* it did grow and rerun */
      store_check(f);
      size_t ngot = outcome(f, &s, n == 0 ? ref : got);
      if (n == 0) {
        nref = ngot;
        assert_true(nref > 0);
      } else {
        assert_int_equal(ngot, nref);
        assert_memory_equal(got, ref, 2 * nref * sizeof ref[0]);
        assert_int_equal(hit, 0); /* nothing absorbed */
        done = 1;
      }
    }
    dbx_rpc_result_cleanup(&raw);
    scenario_clear(&s);
    fixture_close(f);
    if (done) {
      print_message("regrow: %ld allocations over both runs, %ld failed cleanly\n", n - 1, failures);
      break;
    }
  }
  assert_true(failures > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_oom_start),
      cmocka_unit_test(test_svc_oom_poll_workflow),
      cmocka_unit_test(test_svc_oom_wft_commands),
      cmocka_unit_test(test_svc_oom_wft_complete),
      cmocka_unit_test(test_svc_oom_activity_completed),
      cmocka_unit_test(test_svc_oom_activity_failed),
      cmocka_unit_test(test_svc_oom_signal),
      cmocka_unit_test(test_svc_oom_get_history),
      cmocka_unit_test(test_svc_oom_reset),
      cmocka_unit_test(test_svc_oom_map_growth_rerun),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
