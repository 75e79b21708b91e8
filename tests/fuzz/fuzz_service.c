/* libFuzzer harness: every WorkflowService method's request as it reaches
 * the service's handler. One embedded service (service/service.h) runs in
 * this process on a real store in a temporary directory for the whole
 * fuzzing session; each input is a short sequence of calls (svcin.h: a
 * method selector, then the request's bytes). By default each call is
 * handed to the service in-process (rpc.h dbx_rpc_call_local_new, then
 * dbx_service_call_local): the same queue, engine batch, dispatch table
 * (service/handlers.c) and answer path as a gRPC call, without gRPC's
 * loopback round trip (and tests/fuzz/bigcache.h spares ASan the cost of
 * LMDB's large per-transaction blocks): about three times faster. Built with
 * -DDBX_FUZZ_SVC_RPC (fuzz_svcrpc.c, the end-to-end harness) each call goes
 * over loopback through rpc/ exactly as a client's does, so the server loop
 * and gRPC's framing are fuzzed too.
 *
 * Checked after each input: the store refused no change of the engine, a
 * call's or a due timer's (dbx_service_test_storage_errors).
 * Checked after each call: a status arrived (never a transport error or the
 * service gone), the status is one the service sends (not INTERNAL, UNKNOWN
 * or DATA_LOSS, nor UNAVAILABLE for a storage error: a change the service
 * accepted that its store cannot hold), and an OK reply decodes as the
 * method's response type.
 * Checked every CHECK_EVERY inputs, on each store before it is dropped for
 * a fresh one (every RESET_EVERY inputs) and at exit (check_store):
 * LMDB's own mdb_dump reads every table of the store; the service still
 * answers GetSystemInfo; and every listed execution's history reads back
 * whole: event ids 1..n with no gap, WorkflowExecutionStarted first, at most
 * one close event and only last, and DescribeWorkflowExecution agrees it
 * exists.
 *
 * Structure-aware: LLVMFuzzerCustomMutator either mutates the bytes
 * (libFuzzer's own mutations, which also change the method byte and the
 * framing) or unpacks one call's request as its method's protobuf and
 * changes fields (pbmut.h), so valid seeded flows (seeds.c: start, poll,
 * complete with commands, activity results, signals, reset, queries) stay
 * valid while their fields change. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/util.h"
#include "protos/pb.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/fuzz/bigcache.h"
#include "tests/fuzz/pbmut.h"
#include "tests/fuzz/svcin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed);

#define CHECK_EVERY 500
/* Every RESET_EVERY inputs the store is checked, dropped and made anew: the
 * visibility calls (List, Count, Scan) read every run of the namespace, so
 * on one store that only grows each input costs more (1,400 inputs/s at the
 * start, about 500/s after 200,000 inputs). */
#define RESET_EVERY 25000
#define CALL_MS 10000  /* a call that takes longer is a hang */
/* A call that may wait for a worker (QueryWorkflow): the service answers a
 * waiting query 100 ms before its deadline, so 2 ms here (over loopback a
 * 200 ms deadline made such inputs wait 100 ms: a third of fuzz_svcrpc's
 * time went to them). */
#define WAIT_MS 102
#ifdef DBX_FUZZ_SVC_RPC
#define POLL_MS 2      /* the service's long poll */
#else
#define POLL_MS 1
#endif

static char g_dir[256];
static char g_db[300];
static dbx_service *g_svc;
static dbx_rpc_channel *g_ch;
static long g_inputs;

static void die(const char *what, const char *method, int status, const char *msg) {
  fprintf(stderr, "fuzz_service: %s: %s: status %d %s\n", what, method ? method : "-", status,
          msg ? msg : "");
  abort();
}

#ifndef DBX_FUZZ_SVC_RPC
/* A hang: with DBX_FUZZ_HANG_GDB set, every thread's stack first (what the
 * engine was doing), then abort. */
static void die_hang(const char *what, const char *method) {
  if (getenv("DBX_FUZZ_HANG_GDB")) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "gdb -p %d -batch -ex 'thread apply all bt' >&2 2>/dev/null", (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "fuzz_service: gdb could not attach\n");
  }
  die(what, method, -1, NULL);
}

/* The answer of one in-process call, filled on the engine thread. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;
  dbx_rpc_result *r;
} g_wait = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};

static void on_answer(void *arg, int status, const char *message, const void *reply, size_t len) {
  (void)arg;
  pthread_mutex_lock(&g_wait.mu);
  dbx_rpc_result *r = g_wait.r;
  r->status = status;
  r->message = message ? strdup(message) : NULL;
  if (reply) {
    r->response = malloc(len ? len : 1);
    if (r->response == NULL) abort();
    memcpy(r->response, reply, len);
    r->response_len = len;
  }
  g_wait.done = 1;
  pthread_cond_signal(&g_wait.cv);
  pthread_mutex_unlock(&g_wait.mu);
}

/* Hand the request to the service in-process and wait for its answer. */
static dbx_err call_local(const char *method, const uint8_t *req, size_t len, int64_t ms,
                          dbx_rpc_result *r) {
  dbx_rpc_call *c = dbx_rpc_call_local_new(method, req, len, dbx_mono_ns() + ms * 1000000, on_answer, NULL);
  if (c == NULL) return DBX_ENOMEM;
  pthread_mutex_lock(&g_wait.mu);
  g_wait.done = 0;
  g_wait.r = r;
  pthread_mutex_unlock(&g_wait.mu);
  dbx_service_call_local(g_svc, c);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000 + 5; /* the service answers by the deadline; 5 s more is a hang */
  pthread_mutex_lock(&g_wait.mu);
  while (!g_wait.done)
    if (pthread_cond_timedwait(&g_wait.cv, &g_wait.mu, &until) != 0 && !g_wait.done) {
      pthread_mutex_unlock(&g_wait.mu);
      die_hang("no answer in time (in-process)", method);
    }
  g_wait.r = NULL;
  pthread_mutex_unlock(&g_wait.mu);
  return DBX_OK;
}
#endif

/* One call; the result in *r (cleanup by the caller). Aborts on a transport
 * error or a status the service never sends. */
static void call(const char *method, const uint8_t *req, size_t len, int64_t ms, dbx_rpc_result *r) {
  memset(r, 0, sizeof *r);
#ifdef DBX_FUZZ_SVC_RPC
  dbx_err rc = dbx_rpc_unary(g_ch, method, req, len, ms, 1, NULL, r);
#else
  dbx_err rc = call_local(method, req, len, ms, r);
#endif
  if (rc == DBX_ENOMEM) return;
  if (rc != DBX_OK) die("call failed", method, -1, dbx_strerror(rc));
  if (r->status == DBX_GRPC_INTERNAL || r->status == DBX_GRPC_UNKNOWN || r->status == DBX_GRPC_DATA_LOSS)
    die("unexpected status", method, r->status, r->message);
  /* the store refused a change the service had accepted (bug 15: a name
   * too long for a key); a full store is RESOURCE_EXHAUSTED, not this */
  if (r->status == DBX_GRPC_UNAVAILABLE && r->message && strncmp(r->message, "storage error", 13) == 0)
    die("the store refused a change", method, r->status, r->message);
  if (r->status == DBX_GRPC_DEADLINE_EXCEEDED && ms >= CALL_MS)
    die("no answer in time", method, r->status, r->message);
}

static void *call_ok(const dbx_fuzz_svc_method *m, const ProtobufCMessage *q) {
  uint8_t *buf = NULL;
  size_t len = 0;
  buf = dbx_pb_pack(q, &len);
  if (!buf) abort();
  dbx_rpc_result r;
  call(m->method, buf, len, CALL_MS, &r);
  free(buf);
  if (r.status != DBX_GRPC_OK) die("consistency call refused", m->method, r.status, r.message);
  void *out = protobuf_c_message_unpack(m->resp, NULL, r.response_len, r.response);
  if (!out) die("reply does not decode", m->method, 0, NULL);
  dbx_rpc_result_cleanup(&r);
  return out;
}

static const dbx_fuzz_svc_method *method_named(const char *name) {
  return &dbx_fuzz_svc_methods[dbx_fuzz_svc_method_index(name)];
}

static int is_close(int t) {
  return t == ET(WORKFLOW_EXECUTION_COMPLETED) || t == ET(WORKFLOW_EXECUTION_FAILED) ||
         t == ET(WORKFLOW_EXECUTION_CANCELED) || t == ET(WORKFLOW_EXECUTION_TERMINATED) ||
         t == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW) || t == ET(WORKFLOW_EXECUTION_TIMED_OUT);
}

static void check_history(const WorkflowExecution *we) {
  int64_t next = 1, closes = 0, last_type = 0;
  ProtobufCBinaryData token = {0, NULL};
  uint8_t *owned = NULL;
  for (int page = 0; page < 10000; page++) {
    GetWorkflowExecutionHistoryRequest q =
        INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
    q.namespace_ = "default";
    q.execution = (WorkflowExecution *)we;
    q.next_page_token = token;
    GetWorkflowExecutionHistoryResponse *h =
        call_ok(method_named("GetWorkflowExecutionHistory"), &q.base);
    for (size_t i = 0; h->history && i < h->history->n_events; i++) {
      const HistoryEvent *e = h->history->events[i];
      if (e->event_id != next) die("history has a gap", we->workflow_id, (int)e->event_id, we->run_id);
      if (next == 1 && e->event_type != ET(WORKFLOW_EXECUTION_STARTED))
        die("history does not begin with WorkflowExecutionStarted", we->workflow_id, e->event_type, we->run_id);
      if (closes) die("an event after the close event", we->workflow_id, e->event_type, we->run_id);
      closes += is_close(e->event_type);
      last_type = e->event_type;
      next++;
    }
    free(owned);
    owned = NULL;
    token.len = h->next_page_token.len;
    if (token.len) {
      owned = malloc(token.len);
      if (!owned) abort();
      memcpy(owned, h->next_page_token.data, token.len);
    }
    token.data = owned;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    if (!token.len) break;
  }
  free(owned);
  (void)last_type;
  if (next == 1) die("a listed execution has no history", we->workflow_id, 0, we->run_id);
  DescribeWorkflowExecutionRequest d = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  d.namespace_ = "default";
  d.execution = (WorkflowExecution *)we;
  DescribeWorkflowExecutionResponse *r = call_ok(method_named("DescribeWorkflowExecution"), &d.base);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void check_store(void) {
  char cmd[400];
  snprintf(cmd, sizeof cmd, "mdb_dump -a '%s' >/dev/null 2>&1", g_db);
  if (system(cmd) != 0) die("mdb_dump cannot read the store", g_db, 0, NULL);
  GetSystemInfoRequest gs = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
  GetSystemInfoResponse *gi = call_ok(method_named("GetSystemInfo"), &gs.base);
  protobuf_c_message_free_unpacked(&gi->base, NULL);
  ListWorkflowExecutionsRequest l = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_REQUEST);
  l.namespace_ = "default";
  l.page_size = 100; /* the newest hundred: the check's cost stays bounded */
  ListWorkflowExecutionsResponse *lr = call_ok(method_named("ListWorkflowExecutions"), &l.base);
  for (size_t i = 0; i < lr->n_executions; i++)
    if (lr->executions[i]->execution) check_history(lr->executions[i]->execution);
  protobuf_c_message_free_unpacked(&lr->base, NULL);
}

/* A fresh store and service (and, over loopback, channel) in a new
 * temporary directory. */
static void start_fresh(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/dbx-fuzz-svc.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) abort();
  snprintf(g_db, sizeof g_db, "%s/db", g_dir);
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = g_db;
  o.no_sync = 1;        /* the store's consistency does not depend on fsync; speed does */
  o.long_poll_ms = POLL_MS; /* an empty poll answers at once */
  char *err = NULL;
  if (dbx_service_start(&o, &g_svc, &err) != DBX_OK) {
    fprintf(stderr, "fuzz_service: service start: %s\n", err ? err : "?");
    abort();
  }
#ifdef DBX_FUZZ_SVC_RPC
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_service_port(g_svc));
  dbx_rpc_channel_opts co;
  memset(&co, 0, sizeof co);
  co.target = target;
  co.namespace_ = "default";
  if (dbx_rpc_channel_create(&co, &g_ch) != DBX_OK) abort();
#endif
}

/* The store's last check, then the service stopped and its directory gone. */
static void stop_checked(void) {
  check_store();
  if (g_ch) dbx_rpc_channel_destroy(g_ch);
  g_ch = NULL;
  dbx_service_stop(g_svc);
  g_svc = NULL;
  dbx_fs_remove_tree(g_dir);
}

static void finish(void) {
  if (!g_svc) return;
  stop_checked();
  dbx_rpc_global_shutdown();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  /* DBX_FUZZ_LOG=1: the service's warnings (slow batches) on stderr */
  dbx_log_set_level(getenv("DBX_FUZZ_LOG") ? DBX_LOG_WARN : DBX_LOG_OFF);
  dbx_rpc_global_init();
  start_fresh();
  atexit(finish);
  return 0;
}

/* ---- the input's records */

typedef struct {
  uint8_t sel;
  const uint8_t *req;
  size_t len;
} rec;

static size_t split(const uint8_t *data, size_t size, rec *out) {
  size_t n = 0, at = 0;
  while (at < size && n < DBX_FUZZ_SVC_MAX_CALLS) {
    rec r = {.sel = data[at++]};
    size_t len = 0;
    if (at + 2 <= size) len = (size_t)data[at] << 8 | data[at + 1], at += 2;
    else at = size;
    if (len > size - at) len = size - at;
    r.req = data + at;
    r.len = len;
    at += len;
    out[n++] = r;
  }
  return n;
}

/* The request with a one-byte task token "W" or "A" given the last token of
 * that kind (malloc'd, *len set), or NULL to send the bytes as they are. */
static uint8_t *with_token(const dbx_fuzz_svc_method *m, const rec *r, const ProtobufCBinaryData *wft,
                           const ProtobufCBinaryData *act, size_t *len) {
  const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(m->req, "task_token");
  if (!f || f->type != PROTOBUF_C_TYPE_BYTES) return NULL;
  ProtobufCMessage *q = protobuf_c_message_unpack(m->req, NULL, r->len, r->req);
  if (!q) return NULL;
  ProtobufCBinaryData *t = (ProtobufCBinaryData *)((char *)q + f->offset);
  uint8_t *out = NULL;
  if (t->len == 1 && (t->data[0] == 'W' || t->data[0] == 'A')) {
    ProtobufCBinaryData keep = *t;
    *t = t->data[0] == 'W' ? *wft : *act;
    out = dbx_pb_pack(q, len);
    *t = keep;
  }
  protobuf_c_message_free_unpacked(q, NULL);
  return out;
}

static void keep_token(ProtobufCBinaryData *dst, const ProtobufCBinaryData *src) {
  if (!src->len) return;
  uint8_t *b = malloc(src->len);
  if (!b) return;
  memcpy(b, src->data, src->len);
  free(dst->data);
  dst->data = b;
  dst->len = src->len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rec recs[DBX_FUZZ_SVC_MAX_CALLS];
  size_t n = split(data, size, recs);
  ProtobufCBinaryData wft = {0, NULL}, act = {0, NULL};
  for (size_t i = 0; i < n; i++) {
    const dbx_fuzz_svc_method *m = &dbx_fuzz_svc_methods[recs[i].sel % DBX_FUZZ_SVC_NMETHODS];
    size_t len = 0;
    uint8_t *sub = with_token(m, &recs[i], &wft, &act, &len);
    int waits = strcmp(m->method, "QueryWorkflow") == 0;
    dbx_rpc_result r;
    call(m->method, sub ? sub : recs[i].req, sub ? len : recs[i].len, waits ? WAIT_MS : CALL_MS, &r);
    free(sub);
    if (r.status == DBX_GRPC_OK && strcmp(m->method, "NoSuchMethod") == 0)
      die("an unknown method answered OK", m->method, r.status, NULL);
    if (r.status == DBX_GRPC_OK) {
      ProtobufCMessage *resp = protobuf_c_message_unpack(m->resp, NULL, r.response_len, r.response);
      if (!resp) die("reply does not decode", m->method, 0, NULL);
      if (m->resp == &PollWorkflowTaskQueueResponse__D)
        keep_token(&wft, &((PollWorkflowTaskQueueResponse *)resp)->task_token);
      if (m->resp == &PollActivityTaskQueueResponse__D)
        keep_token(&act, &((PollActivityTaskQueueResponse *)resp)->task_token);
      protobuf_c_message_free_unpacked(resp, NULL);
    }
    dbx_rpc_result_cleanup(&r);
  }
  free(wft.data);
  free(act.data);
  if (dbx_service_test_storage_errors(g_svc) != 0)
    die("the store refused a change of the engine (a call's or a due timer's)", NULL, 0, NULL);
  if (++g_inputs % RESET_EVERY == 0) {
    stop_checked();
    start_fresh();
  } else if (g_inputs % CHECK_EVERY == 0) {
    check_store();
  }
  return 0;
}

/* ---- structure-aware mutation */

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max, unsigned seed) {
  if (seed % 3 == 0 || size < 3) return LLVMFuzzerMutate(data, size, max);
  rec recs[DBX_FUZZ_SVC_MAX_CALLS];
  size_t n = split(data, size, recs);
  size_t k = seed / 3 % n;
  const dbx_fuzz_svc_method *m = &dbx_fuzz_svc_methods[recs[k].sel % DBX_FUZZ_SVC_NMETHODS];
  size_t room = 65535;
  uint8_t *buf = malloc(room);
  if (!buf) return LLVMFuzzerMutate(data, size, max);
  memcpy(buf, recs[k].req, recs[k].len);
  size_t nl = dbx_fuzz_pb_mutate(m->req, buf, recs[k].len, room, seed);
  if (nl == 0) {
    free(buf);
    return LLVMFuzzerMutate(data, size, max);
  }
  /* reassemble: the records before k, the new k, the ones after */
  uint8_t *out = malloc(size + nl + 3 * DBX_FUZZ_SVC_MAX_CALLS);
  size_t at = 0;
  if (!out) {
    free(buf);
    return LLVMFuzzerMutate(data, size, max);
  }
  for (size_t i = 0; i < n; i++) {
    const uint8_t *b = i == k ? buf : recs[i].req;
    size_t l = i == k ? nl : recs[i].len;
    out[at++] = recs[i].sel;
    out[at++] = (uint8_t)(l >> 8);
    out[at++] = (uint8_t)l;
    memcpy(out + at, b, l);
    at += l;
  }
  free(buf);
  if (at > max) {
    free(out);
    return LLVMFuzzerMutate(data, size, max);
  }
  memcpy(data, out, at);
  free(out);
  return at;
}
