/* Integration tests of the workflow API (worker/api.h) on the real embedded
 * service (in-process, temp LMDB, loopback) with the real C worker: a parent
 * starting a child and getting its result, continue-as-new carrying input, a
 * marker read back after a new worker replays the whole history, a timer
 * cancelled, signal-with-start, a signal wait that times out and one that a
 * signal ends (its timer cancelled), queries answered by workflow code and
 * the built-ins, and upserted search attributes / memo as
 * DescribeWorkflowExecution shows them.
 * Waits long-poll history (GetWorkflowExecutionHistory wait_new_event) up to
 * a deadline. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/worker.h"

static char *g_svc_dir, *g_wrk_dir;
static dbx_service *g_svc;
static dbx_worker *g_w;
static dbx_client *g_c;
static char g_addr[64];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_marker_creates; /* t.Marker create calls, in this process */

/* ------------------------------------------------------------ workflow types */

static void st_free(void *st) { free(st); }

/* t.Child: completes with {"echo": its input}. */
static void *child_create(dbx_wf *wf, const char *in, size_t len) {
  char *r = dbx_asprintf("{\"echo\":%.*s}", (int)len, in);
  dbx_wf_complete(wf, r);
  free(r);
  return calloc(1, 1);
}
static const dbx_workflow_type wf_child = {"t.Child", child_create, NULL, NULL, NULL, NULL, NULL, st_free};

/* t.Parent: starts t.Child ("<wid>-kid") with {"n":5}; completes with the
 * child's result and the status it saw start. */
typedef struct {
  int started;
} parent;
static void *parent_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  char *kid = dbx_asprintf("%s-kid", dbx_wf_workflow_id(wf));
  dbx_child_opts o = {.workflow_id = kid, .run_timeout_ms = 60000};
  int64_t seq = dbx_wf_start_child(wf, "t.Child", "{\"n\":5}", &o);
  free(kid);
  if (seq != 1) dbx_wf_fail(wf, "Test", "start_child did not return seq 1");
  return calloc(1, sizeof(parent));
}
static void parent_on_child(void *st, dbx_wf *wf, int64_t seq, const dbx_child_outcome *o) {
  parent *p = st;
  if (o->status == DBX_CHILD_STARTED) {
    p->started = o->run_id[0] != '\0';
    return;
  }
  char *r = dbx_asprintf("{\"status\":%d,\"seq\":%lld,\"started\":%d,\"child\":%s}", (int)o->status,
                         (long long)seq, p->started, o->result_json);
  dbx_wf_complete(wf, r);
  free(r);
}
static const dbx_workflow_type wf_parent = {"t.Parent", parent_create, NULL, NULL, NULL, NULL, NULL,
                                            st_free, parent_on_child};

/* t.Can: {"round":N}: continues as new with N+1 until 3, then completes
 * with the round and the history length it saw. */
static void *can_create(dbx_wf *wf, const char *in, size_t len) {
  cJSON *j = cJSON_ParseWithLength(in, len);
  int round = j && cJSON_IsNumber(cJSON_GetObjectItem(j, "round"))
                  ? (int)cJSON_GetObjectItem(j, "round")->valuedouble
                  : -1;
  cJSON_Delete(j);
  char *r;
  if (round >= 1 && round < 3) {
    r = dbx_asprintf("{\"round\":%d}", round + 1);
    dbx_wf_continue_as_new(wf, r, NULL);
  } else {
    r = dbx_asprintf("{\"round\":%d,\"history_length\":%lld,\"size_known\":%s}", round,
                     (long long)dbx_wf_history_length(wf),
                     dbx_wf_history_size_bytes(wf) > 0 ? "true" : "false");
    dbx_wf_complete(wf, r);
  }
  free(r);
  return calloc(1, 1);
}
static const dbx_workflow_type wf_can = {"t.Can", can_create, NULL, NULL, NULL, NULL, NULL, st_free};

/* t.Marker: records marker "pick" whose new value differs at every create in
 * this process, waits for signal "go", completes with the value it holds. */
typedef struct {
  char value[64];
} marker;
static void *marker_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  pthread_mutex_lock(&g_mu);
  int n = ++g_marker_creates;
  pthread_mutex_unlock(&g_mu);
  char fresh[32];
  snprintf(fresh, sizeof fresh, "\"v%d\"", n);
  marker *m = calloc(1, sizeof *m);
  const char *v = dbx_wf_marker_record(wf, "pick", fresh);
  snprintf(m->value, sizeof m->value, "%s", v ? v : "null");
  dbx_wf_await_signal(wf, "go", 0);
  return m;
}
static void marker_wait(void *st, dbx_wf *wf, int64_t seq, const char *json, size_t len, int timed_out) {
  (void)seq, (void)json, (void)len, (void)timed_out;
  dbx_wf_complete(wf, ((marker *)st)->value);
}
static const dbx_workflow_type wf_marker = {"t.Marker", marker_create, NULL, NULL, NULL, NULL, NULL,
                                            st_free, NULL, NULL, marker_wait};

/* t.TimerCancel: a one-hour timer; signal "stop" cancels it and completes. */
static void *tc_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  dbx_wf_start_timer(wf, 3600 * 1000);
  return calloc(1, 1);
}
static void tc_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st;
  dbx_wf_fail(wf, "Test", "the cancelled timer fired");
}
static void tc_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)st, (void)json, (void)len;
  if (strcmp(name, "stop") != 0) return;
  int rc = dbx_wf_cancel_timer(wf, 1);
  char *r = dbx_asprintf("{\"cancel\":%d,\"again\":%d}", rc, dbx_wf_cancel_timer(wf, 1));
  dbx_wf_complete(wf, r);
  free(r);
}
static const dbx_workflow_type wf_tc = {"t.TimerCancel", tc_create, NULL, tc_on_timer, tc_on_signal,
                                        NULL, NULL, st_free};

/* t.Wait {"timeout_ms":N}: waits for signal "go" up to N ms; completes with
 * {"timed_out":..,"input":..}. Queries: "pokes" (named handler count) with
 * its argument echoed; on_query "legacy". */
typedef struct {
  int pokes;
} waiter;
static void *wait_create(dbx_wf *wf, const char *in, size_t len) {
  cJSON *j = cJSON_ParseWithLength(in, len);
  int64_t t = j && cJSON_IsNumber(cJSON_GetObjectItem(j, "timeout_ms"))
                  ? (int64_t)cJSON_GetObjectItem(j, "timeout_ms")->valuedouble
                  : 0;
  cJSON_Delete(j);
  dbx_wf_await_signal(wf, "go", t);
  return calloc(1, sizeof(waiter));
}
static void wait_done(void *st, dbx_wf *wf, int64_t seq, const char *json, size_t len, int timed_out) {
  (void)st, (void)seq;
  char *r = dbx_asprintf("{\"timed_out\":%s,\"input\":%.*s}", timed_out ? "true" : "false", (int)len, json);
  dbx_wf_complete(wf, r);
  free(r);
}
static void wait_poke(void *st, dbx_wf *wf, const char *json, size_t len) {
  (void)wf, (void)json, (void)len;
  ((waiter *)st)->pokes++;
}
static char *wait_q_pokes(void *st, const char *args, size_t len) {
  return dbx_asprintf("{\"pokes\":%d,\"args\":%.*s}", ((waiter *)st)->pokes, (int)len, args);
}
static char *wait_on_query(void *st, const char *name) {
  (void)st;
  return strcmp(name, "legacy") == 0 ? dbx_strdup("\"old style\"") : NULL;
}
static const dbx_wf_signal_def wait_signals[] = {{"poke", wait_poke, "count pokes"}, {NULL, NULL, NULL}};
static const dbx_wf_query_def wait_queries[] = {{"pokes", wait_q_pokes, "pokes so far"}, {NULL, NULL, NULL}};
static const dbx_workflow_type wf_wait = {"t.Wait", wait_create, NULL, NULL, NULL, NULL, wait_on_query,
                                          st_free, NULL, NULL, wait_done, wait_signals, wait_queries};

/* t.Upsert: upserts search attribute CustomKeywordField and memo "note",
 * then completes. */
static void *up_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  const char *sk[] = {"CustomKeywordField"}, *sv[] = {"\"blue\""};
  const char *mk[] = {"note"}, *mv[] = {"{\"n\":1}"};
  if (dbx_wf_upsert_search_attributes(wf, sk, sv, 1) || dbx_wf_upsert_memo(wf, mk, mv, 1))
    dbx_wf_fail(wf, "Test", "upsert refused");
  else
    dbx_wf_complete(wf, "\"done\"");
  return calloc(1, 1);
}
static const dbx_workflow_type wf_upsert = {"t.Upsert", up_create, NULL, NULL, NULL, NULL, NULL, st_free};

/* t.Remote {"op":"signal"|"cancel"}: starts t.Wait ("<wid>-kid", 60 s
 * timeout); once it started, signals it "go" [1] or cancels it; completes
 * with what it saw: the external request's delivery and the child's end. */
typedef struct {
  int cancel;
  char seen[256];
} remote;
static void *remote_create(dbx_wf *wf, const char *in, size_t len) {
  remote *r = calloc(1, sizeof *r);
  (void)len;
  r->cancel = strstr(in, "cancel") != NULL; /* input is NUL-terminated JSON */
  char *kid = dbx_asprintf("%s-kid", dbx_wf_workflow_id(wf));
  dbx_child_opts o = {.workflow_id = kid};
  dbx_wf_start_child(wf, "t.Wait", "{\"timeout_ms\":60000}", &o);
  free(kid);
  return r;
}
static void remote_on_child(void *st, dbx_wf *wf, int64_t seq, const dbx_child_outcome *o) {
  remote *r = st;
  size_t u = strlen(r->seen);
  if (o->status == DBX_CHILD_STARTED) {
    int64_t x = r->cancel ? dbx_wf_cancel_child(wf, seq)
                          : dbx_wf_signal_external(wf, o->workflow_id, o->run_id, "go", "[1]");
    snprintf(r->seen + u, sizeof r->seen - u, "request %lld;", (long long)x);
    return;
  }
  snprintf(r->seen + u, sizeof r->seen - u, "child %d %s", (int)o->status, o->result_json);
  cJSON *j = cJSON_CreateString(r->seen);
  char *res = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  dbx_wf_complete(wf, res);
  free(res);
}
static void remote_on_external(void *st, dbx_wf *wf, int64_t seq, int failed) {
  (void)wf;
  remote *r = st;
  size_t u = strlen(r->seen);
  snprintf(r->seen + u, sizeof r->seen - u, "delivered %lld %d;", (long long)seq, failed);
}
static const dbx_workflow_type wf_remote = {"t.Remote", remote_create, NULL, NULL, NULL, NULL,
                                            NULL, st_free, remote_on_child, remote_on_external};

/* ------------------------------------------------------------ helpers */

static void worker_start(void) {
  dbx_worker_opts o = {0};
  o.address = g_addr;
  o.task_queue = "apiq";
  o.db_dir = g_wrk_dir;
  o.no_sync = 1;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&o, &g_w, &err), DBX_OK);
  const dbx_workflow_type *types[] = {&wf_child, &wf_parent, &wf_can,    &wf_marker,
                                      &wf_tc,    &wf_wait,   &wf_upsert, &wf_remote};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    assert_int_equal(dbx_worker_register_workflow(g_w, types[i]), DBX_OK);
  assert_int_equal(dbx_worker_start(g_w), DBX_OK);
}

static void worker_end(void) {
  dbx_worker_stop(g_w, 1000);
  dbx_worker_destroy(g_w);
  g_w = NULL;
}

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  g_svc_dir = dbx_test_tmpdir("itapi-svc");
  g_wrk_dir = dbx_test_tmpdir("itapi-wrk");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = g_svc_dir;
  so.port = 0;
  so.no_sync = 1;
  char *err = NULL;
  assert_int_equal(dbx_service_start(&so, &g_svc, &err), DBX_OK);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", dbx_service_port(g_svc));
  worker_start();
  dbx_client_opts co = {0};
  co.address = g_addr;
  assert_int_equal(dbx_client_create(&co, &g_c), DBX_OK);
  return 0;
}

static int group_teardown(void **st) {
  (void)st;
  if (g_w) worker_end();
  dbx_client_destroy(g_c);
  dbx_service_stop(g_svc);
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  free(g_svc_dir);
  free(g_wrk_dir);
  dbx_rpc_global_shutdown();
  return 0;
}

static char *start(const char *wid, const char *type, const char *input) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = type;
  o.task_queue = "apiq";
  o.input_json = input;
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fprintf(stderr, "start %s: %s\n", wid, err ? err : "?");
  free(err);
  assert_int_equal(rc, DBX_OK);
  return rid;
}

/* The close event of a run (rid NULL = the latest run): the result JSON of a
 * completion, else "CLOSED:<event type>". Long-polls up to 60 s. */
static char *wait_close(const char *wid, const char *rid) {
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  while (dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.close_event_only = 1;
    ho.timeout_ms = 5000;
    dbx_err rc = dbx_client_get_history(g_c, wid, rid, &ho, &h, NULL);
    if (rc == DBX_OK && h.n > 0) {
      HistoryEvent *e = h.events[h.n - 1];
      char *out = e->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)
                      ? dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result)
                      : dbx_asprintf("CLOSED:%d", (int)e->event_type);
      dbx_client_history_cleanup(&h);
      return out;
    }
    dbx_client_history_cleanup(&h);
  }
  fail_msg("workflow %s did not close", wid);
  return NULL;
}

/* Full history of a run (rid NULL = latest); release with dbx_client_history_cleanup. */
static void history(const char *wid, const char *rid, dbx_client_history *h) {
  memset(h, 0, sizeof *h);
  assert_int_equal(dbx_client_get_history(g_c, wid, rid, NULL, h, NULL), DBX_OK);
}

static size_t count(const dbx_client_history *h, int type) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++) n += (int)h->events[i]->event_type == type;
  return n;
}

/* Poll the history until it holds at least `want` events of type (up to 30 s). */
static void wait_count(const char *wid, const char *rid, int type, size_t want) {
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  for (;;) {
    dbx_client_history h;
    history(wid, rid, &h);
    size_t n = count(&h, type);
    dbx_client_history_cleanup(&h);
    if (n >= want) return;
    if (dbx_mono_ns() > deadline) fail_msg("%s: %zu events of type %d, want %zu", wid, n, type, want);
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* A query answered by the worker (retried while the worker has not yet
 * answered the first task). */
static char *query(const char *wid, const char *name, const char *args) {
  char *q = NULL, *err = NULL;
  dbx_err rc = dbx_client_query(g_c, wid, NULL, name, args, &q, &err);
  if (rc != DBX_OK) fail_msg("query %s on %s: %s", name, wid, err ? err : dbx_strerror(rc));
  free(err);
  return q;
}

/* ------------------------------------------------------------ tests */

static void test_api_child_workflow_result(void **st) {
  (void)st;
  char *rid = start("api-parent", "t.Parent", "{}");
  char *res = wait_close("api-parent", rid);
  assert_string_equal(res, "{\"status\":3,\"seq\":1,\"started\":1,\"child\":{\"echo\":{\"n\":5}}}");
  dbx_client_history h;
  history("api-parent", rid, &h);
  assert_int_equal(count(&h, ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED)), 1);
  assert_int_equal(count(&h, ET(CHILD_WORKFLOW_EXECUTION_STARTED)), 1);
  assert_int_equal(count(&h, ET(CHILD_WORKFLOW_EXECUTION_COMPLETED)), 1);
  dbx_client_history_cleanup(&h);
  char *kid = wait_close("api-parent-kid", NULL);
  assert_string_equal(kid, "{\"echo\":{\"n\":5}}");
  free(kid);
  free(res);
  free(rid);
}

static void test_api_continue_as_new_carries_input(void **st) {
  (void)st;
  char *rid = start("api-can", "t.Can", "{\"round\":1}");
  char *first = wait_close("api-can", rid);
  char want[32];
  snprintf(want, sizeof want, "CLOSED:%d", (int)ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
  assert_string_equal(first, want);
  dbx_client_history h;
  history("api-can", rid, &h);
  const HistoryEvent *e = h.events[h.n - 1];
  assert_int_equal(e->event_type, ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
  char *in = dbx_payloads_to_json(e->workflow_execution_continued_as_new_event_attributes->input);
  assert_string_equal(in, "{\"round\":2}");
  free(in);
  dbx_client_history_cleanup(&h);
  char *last = NULL;
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  while (dbx_mono_ns() < deadline) { /* the latest run changes until round 3 closes */
    free(last);
    last = wait_close("api-can", NULL);
    if (strncmp(last, "CLOSED:", 7) != 0) break;
  }
  /* round 3's first task: its WorkflowTaskStarted is event 3 */
  assert_string_equal(last, "{\"round\":3,\"history_length\":3,\"size_known\":true}");
  free(last);
  free(first);
  free(rid);
}

static void test_api_marker_read_back_after_worker_restart(void **st) {
  (void)st;
  g_marker_creates = 0;
  char *rid = start("api-marker", "t.Marker", "{}");
  wait_count("api-marker", rid, ET(MARKER_RECORDED), 1);
  assert_int_equal(g_marker_creates, 1);
  /* a new worker has no cached state: the signal's task replays the whole
   * history, and create records "v2" unless the marker is read back */
  worker_end();
  worker_start();
  assert_int_equal(dbx_client_signal(g_c, "api-marker", rid, "go", NULL, NULL), DBX_OK);
  char *res = wait_close("api-marker", rid);
  assert_string_equal(res, "\"v1\"");
  assert_int_equal(g_marker_creates, 2);
  dbx_client_history h;
  history("api-marker", rid, &h);
  assert_int_equal(count(&h, ET(MARKER_RECORDED)), 1);
  assert_int_equal(count(&h, ET(WORKFLOW_TASK_FAILED)), 0);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

static void test_api_timer_cancelled(void **st) {
  (void)st;
  char *rid = start("api-timer", "t.TimerCancel", "{}");
  wait_count("api-timer", rid, ET(TIMER_STARTED), 1);
  assert_int_equal(dbx_client_signal(g_c, "api-timer", rid, "stop", NULL, NULL), DBX_OK);
  char *res = wait_close("api-timer", rid);
  assert_string_equal(res, "{\"cancel\":0,\"again\":-1}");
  dbx_client_history h;
  history("api-timer", rid, &h);
  assert_int_equal(count(&h, ET(TIMER_CANCELED)), 1);
  assert_int_equal(count(&h, ET(TIMER_FIRED)), 0);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

static void test_api_signal_with_start(void **st) {
  (void)st;
  SignalWithStartWorkflowExecutionRequest rq =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WITH_START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "t.Wait";
  tq.name = "apiq";
  rq.namespace_ = "default";
  rq.workflow_id = "api-sws";
  rq.workflow_type = &wt;
  rq.task_queue = &tq;
  rq.input = dbx_payloads_from_json("{\"timeout_ms\":60000}", 20);
  rq.signal_name = "go";
  rq.signal_input = dbx_payloads_from_json("{\"v\":1}", 7);
  rq.identity = "it";
  rq.request_id = "sws-1";
  ProtobufCMessage *resp = NULL;
  char *err = NULL;
  dbx_err rc = dbx_client_call(g_c, "SignalWithStartWorkflowExecution", &rq.base,
                               &SignalWithStartWorkflowExecutionResponse__D, 10000, NULL, &resp, &err);
  if (rc != DBX_OK) fprintf(stderr, "SignalWithStart: %s\n", err ? err : "?");
  assert_int_equal(rc, DBX_OK);
  SignalWithStartWorkflowExecutionResponse *r = (SignalWithStartWorkflowExecutionResponse *)resp;
  char *rid = dbx_strdup(r->run_id);
  dbx_client_msg_free(resp);
  dbx_payloads_free(rq.input);
  dbx_payloads_free(rq.signal_input);
  char *res = wait_close("api-sws", rid);
  assert_string_equal(res, "{\"timed_out\":false,\"input\":{\"v\":1}}");
  /* the wait began and ended in the first task: its timer was never sent */
  dbx_client_history h;
  history("api-sws", rid, &h);
  assert_int_equal(count(&h, ET(TIMER_STARTED)), 0);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 1);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

static void test_api_await_signal_times_out(void **st) {
  (void)st;
  char *rid = start("api-wait-timeout", "t.Wait", "{\"timeout_ms\":300}");
  char *res = wait_close("api-wait-timeout", rid);
  assert_string_equal(res, "{\"timed_out\":true,\"input\":null}");
  dbx_client_history h;
  history("api-wait-timeout", rid, &h);
  assert_int_equal(count(&h, ET(TIMER_FIRED)), 1);
  assert_int_equal(count(&h, ET(TIMER_CANCELED)), 0);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

static void test_api_await_signal_queries_then_signal(void **st) {
  (void)st;
  char *rid = start("api-wait-sig", "t.Wait", "{\"timeout_ms\":60000}");
  wait_count("api-wait-sig", rid, ET(TIMER_STARTED), 1);
  assert_int_equal(dbx_client_signal(g_c, "api-wait-sig", rid, "poke", "{}", NULL), DBX_OK);
  wait_count("api-wait-sig", rid, ET(WORKFLOW_TASK_COMPLETED), 2);
  char *q = query("api-wait-sig", "pokes", "{\"who\":\"it\"}");
  assert_string_equal(q, "{\"pokes\":1,\"args\":{\"who\":\"it\"}}");
  free(q);
  q = query("api-wait-sig", "legacy", NULL);
  assert_string_equal(q, "\"old style\"");
  free(q);
  q = query("api-wait-sig", "__stack_trace", NULL);
  assert_non_null(strstr(q, "signal 'go' (wait 1, with timeout)"));
  assert_null(strstr(q, "timer 2")); /* the wait's own timer is shown as the wait */
  free(q);
  q = query("api-wait-sig", "__temporal_workflow_metadata", NULL);
  cJSON *j = cJSON_Parse(q);
  assert_non_null(j);
  cJSON *def = cJSON_GetObjectItem(j, "definition");
  assert_string_equal(cJSON_GetObjectItem(def, "type")->valuestring, "t.Wait");
  assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(def, "signalDefinitions"), 0)
                          ->child->valuestring,
                      "poke");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(def, "queryDefinitions")), 3);
  cJSON_Delete(j);
  free(q);
  assert_int_equal(dbx_client_signal(g_c, "api-wait-sig", rid, "go", "[7]", NULL), DBX_OK);
  char *res = wait_close("api-wait-sig", rid);
  assert_string_equal(res, "{\"timed_out\":false,\"input\":[7]}");
  dbx_client_history h;
  history("api-wait-sig", rid, &h);
  assert_int_equal(count(&h, ET(TIMER_CANCELED)), 1);
  assert_int_equal(count(&h, ET(TIMER_FIRED)), 0);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

static void test_api_upsert_visible_in_describe(void **st) {
  (void)st;
  char *rid = start("api-upsert", "t.Upsert", "{}");
  char *res = wait_close("api-upsert", rid);
  assert_string_equal(res, "\"done\"");
  DescribeWorkflowExecutionResponse *d = NULL;
  char *err = NULL;
  assert_int_equal(dbx_client_describe(g_c, "api-upsert", rid, &d, &err), DBX_OK);
  const WorkflowExecutionInfo *info = d->workflow_execution_info;
  assert_non_null(info->search_attributes);
  assert_int_equal(info->search_attributes->n_indexed_fields, 1);
  assert_string_equal(info->search_attributes->indexed_fields[0]->key, "CustomKeywordField");
  const Payload *p = info->search_attributes->indexed_fields[0]->value;
  assert_int_equal(p->data.len, 6);
  assert_memory_equal(p->data.data, "\"blue\"", 6);
  assert_non_null(info->memo);
  assert_int_equal(info->memo->n_fields, 1);
  assert_string_equal(info->memo->fields[0]->key, "note");
  p = info->memo->fields[0]->value;
  assert_int_equal(p->data.len, 7);
  assert_memory_equal(p->data.data, "{\"n\":1}", 7);
  dbx_client_msg_free(d);
  free(err);
  free(res);
  free(rid);
}

static void test_api_signal_external_and_cancel_child(void **st) {
  (void)st;
  char *rid = start("api-remote-sig", "t.Remote", "{\"op\":\"signal\"}");
  char *res = wait_close("api-remote-sig", rid);
  /* seq 1 the child, 2 the signal; the child got [1] from its parent */
  assert_string_equal(res, "\"request 2;delivered 2 0;child 3 {\\\"timed_out\\\":false,\\\"input\\\":[1]}\"");
  dbx_client_history h;
  history("api-remote-sig", rid, &h);
  assert_int_equal(count(&h, ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)), 1);
  assert_int_equal(count(&h, ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED)), 1);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);

  rid = start("api-remote-cancel", "t.Remote", "{\"op\":\"cancel\"}");
  res = wait_close("api-remote-cancel", rid);
  /* the child (no on_cancel) completes as canceled */
  assert_string_equal(res, "\"request 2;delivered 2 0;child 5 null\"");
  history("api-remote-cancel", rid, &h);
  assert_int_equal(count(&h, ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)), 1);
  assert_int_equal(count(&h, ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED)), 1);
  assert_int_equal(count(&h, ET(CHILD_WORKFLOW_EXECUTION_CANCELED)), 1);
  dbx_client_history_cleanup(&h);
  free(res);
  free(rid);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_api_child_workflow_result),
      cmocka_unit_test(test_api_continue_as_new_carries_input),
      cmocka_unit_test(test_api_marker_read_back_after_worker_restart),
      cmocka_unit_test(test_api_timer_cancelled),
      cmocka_unit_test(test_api_signal_with_start),
      cmocka_unit_test(test_api_await_signal_times_out),
      cmocka_unit_test(test_api_await_signal_queries_then_signal),
      cmocka_unit_test(test_api_upsert_visible_in_describe),
      cmocka_unit_test(test_api_signal_external_and_cancel_child),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
