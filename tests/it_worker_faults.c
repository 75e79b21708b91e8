/* Integration tests of the worker under transport faults: the embedded
 * service in process (temporary LMDB, loopback, max_message_bytes 64 KiB)
 * and a dbx_worker with a workflow type defined here, t.Big, that completes
 * at once with a result of the size its input names.
 * - a completion over the service's limit (refused by gRPC as
 *   RESOURCE_EXHAUSTED) fails the workflow task with
 *   WORKFLOW_WORKER_UNHANDLED_FAILURE and a message naming size and limit,
 *   and each task attempt sends the completion once (no resend loop);
 * - a completion over the worker's configured limit is never sent;
 * - heartbeats that cannot reach the service (it is stopped) for longer
 *   than the heartbeat timeout cancel the attempt in the worker, and its
 *   late result is never reported: after the restart the service times the
 *   attempt out (t.Hb, activity t.hbloop);
 * - a terminated workflow whose activity keeps failing (retry every 1 s)
 *   leaves no retry: the activity runs no more after the termination is
 *   acknowledged, and no activity task is delivered, before or after a
 *   service restart (t.Retry, activity t.failing). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/worker.h"

#define SVC_MAX_MSG (64u << 10)

static char *g_svc_dir;
static dbx_service *g_svc;
static int g_port;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_hb_running, g_hb_cancelled, g_hb_returned;
static int g_fail_calls; /* t.failing runs (g_mu) */
static dbx_client *g_c;
static char g_addr[64];

/* ------------------------------------------------------------ t.Big */

static void *big_create(dbx_wf *wf, const char *json, size_t len) {
  size_t n = (size_t)strtoull(json, NULL, 10);
  (void)len;
  char *res = malloc(n + 3);
  if (res == NULL) {
    dbx_wf_fail(wf, "OOM", "out of memory");
    return NULL;
  }
  res[0] = '"';
  memset(res + 1, 'b', n);
  res[n + 1] = '"';
  res[n + 2] = '\0';
  dbx_wf_complete(wf, res);
  free(res);
  return calloc(1, 1);
}

static const dbx_workflow_type wf_big = {"t.Big", big_create, NULL, NULL, NULL, NULL, NULL, free};

/* ------------------------------------------------------------ t.Hb */

static void *hbwf_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 120000;
  o.heartbeat_ms = 2000;
  o.maximum_attempts = 1;
  assert_int_equal(dbx_wf_schedule_activity(wf, "t.hbloop", "{}", &o), 1);
  return calloc(1, 1);
}

static void hbwf_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq;
  static const char *names[] = {"", "\"completed\"", "\"failed\"", "\"timed_out\"", "\"canceled\""};
  dbx_wf_complete(wf, names[o->status]);
}

static const dbx_workflow_type wf_hb = {"t.Hb", hbwf_create, hbwf_on_activity, NULL, NULL, NULL, NULL, free};

static void flag_set(int *flag) {
  pthread_mutex_lock(&g_mu);
  *flag = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

/* Wait up to ms for *flag; returns it. */
static int flag_wait(int *flag, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_mutex_lock(&g_mu);
  while (!*flag)
    if (pthread_cond_timedwait(&g_cv, &g_mu, &ts) != 0) break;
  int v = *flag;
  pthread_mutex_unlock(&g_mu);
  return v;
}

/* Heartbeats every 50 ms until told it is cancelled, then returns a result
 * anyway (the late result the worker must not report). */
static dbx_err act_hbloop(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)in, (void)len, (void)ud;
  flag_set(&g_hb_running);
  for (int i = 0; i < 2400; i++) { /* at most 120 s */
    if (dbx_act_heartbeat(a, NULL)) {
      flag_set(&g_hb_cancelled);
      break;
    }
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
  }
  res->result_json = dbx_strdup("\"late\"");
  flag_set(&g_hb_returned);
  return DBX_OK;
}

static const dbx_activity_type at_hbloop = {"t.hbloop", DBX_SAFE_TO_RETRY, act_hbloop, NULL};

/* ------------------------------------------------------------ t.Retry */

static void *retry_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 10000;
  o.initial_interval_ms = 1000;
  o.maximum_attempts = 0; /* unlimited */
  assert_int_equal(dbx_wf_schedule_activity(wf, "t.failing", "{}", &o), 1);
  return calloc(1, 1);
}

static void retry_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq, (void)o;
  dbx_wf_fail(wf, "Unexpected", "the activity should retry forever");
}

static const dbx_workflow_type wf_retry = {"t.Retry", retry_create, retry_on_activity, NULL, NULL, NULL, NULL, free};

static dbx_err act_failing(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a, (void)in, (void)len, (void)ud;
  pthread_mutex_lock(&g_mu);
  g_fail_calls++;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  res->failure_type = dbx_strdup("Flaky");
  res->failure_message = dbx_strdup("fails every time (retryable)");
  return DBX_OK;
}

static const dbx_activity_type at_failing = {"t.failing", DBX_SAFE_TO_RETRY, act_failing, NULL};

static int fail_calls(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_fail_calls;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* ------------------------------------------------------------ helpers */

static void service_start(int port) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = g_svc_dir;
  o.port = port;
  o.no_sync = 1;
  o.max_message_bytes = SVC_MAX_MSG;
  char *err = NULL;
  if (dbx_service_start(&o, &g_svc, &err) != DBX_OK) fail_msg("service: %s", err ? err : "?");
  g_port = dbx_service_port(g_svc);
}

/* After a restart the test client's channel may still be in gRPC's
 * reconnect backoff (calls fail UNAVAILABLE at once): retry a cheap call
 * until it answers. There is no readiness signal to wait on instead. */
static void client_wait_ready(void) {
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  for (;;) {
    GetSystemInfoRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
    ProtobufCMessage *rs = NULL;
    dbx_err rc = dbx_client_call(g_c, "GetSystemInfo", &rq.base, &GetSystemInfoResponse__D, 5000, NULL,
                                 &rs, NULL);
    dbx_client_msg_free(rs);
    if (rc == DBX_OK) return;
    if (dbx_mono_ns() > deadline) fail_msg("service unreachable after restart: %s", dbx_strerror(rc));
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
}

static dbx_worker *worker_start(const char *tq, const char *dir, size_t max_msg) {
  dbx_worker_opts o = {0};
  o.address = g_addr;
  o.task_queue = tq;
  o.db_dir = dir;
  o.no_sync = 1;
  o.workflow_pollers = 1;
  o.activity_pollers = 1;
  o.max_message_bytes = max_msg;
  dbx_worker *w = NULL;
  char *err = NULL;
  if (dbx_worker_create(&o, &w, &err) != DBX_OK) fail_msg("worker: %s", err ? err : "?");
  assert_int_equal(dbx_worker_register_workflow(w, &wf_big), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_hb), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_hbloop), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_retry), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_failing), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  return w;
}

static char *start_type(const char *wid, const char *type, const char *tq, const char *input) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = type;
  o.task_queue = tq;
  o.input_json = input;
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fail_msg("start %s: %s", wid, err ? err : "?");
  return rid;
}

static char *start(const char *wid, const char *tq, const char *input) {
  return start_type(wid, "t.Big", tq, input);
}

/* Follow the history (long polls) until `count` events of `type` are in it;
 * returns a copy of the last of them (free with protobuf_c_message_free_unpacked). */
static HistoryEvent *wait_events(const char *wid, const char *rid, int type, int count) {
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  HistoryEvent *last = NULL;
  int seen = 0;
  while (seen < count && dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.page_token = tok;
    ho.page_token_len = tok_len;
    ho.timeout_ms = 10000;
    assert_int_equal(dbx_client_get_history(g_c, wid, rid, &ho, &h, NULL), DBX_OK);
    for (size_t i = 0; i < h.n; i++) {
      if ((int)h.events[i]->event_type != type) continue;
      seen++;
      if (last) protobuf_c_message_free_unpacked(&last->base, NULL);
      last = (HistoryEvent *)dbx_pb_clone(&h.events[i]->base);
      assert_non_null(last);
    }
    free(tok);
    tok = h.next_page_token;
    tok_len = h.next_page_token_len;
    h.next_page_token = NULL;
    dbx_client_history_cleanup(&h);
  }
  free(tok);
  if (seen < count) fail_msg("%s: %d events of type %d, want %d", wid, seen, type, count);
  return last;
}

static void expect_oversized(const HistoryEvent *e, const char *needle) {
  assert_non_null(e);
  const WorkflowTaskFailedEventAttributes *a = e->workflow_task_failed_event_attributes;
  assert_non_null(a);
  assert_int_equal(a->cause, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE));
  assert_int_equal(a->cause, 14);
  assert_non_null(a->failure);
  if (strstr(a->failure->message, needle) == NULL)
    fail_msg("failure message \"%s\" lacks \"%s\"", a->failure->message, needle);
  assert_non_null(a->failure->application_failure_info);
  assert_string_equal(a->failure->application_failure_info->type, "WorkflowTaskTooLarge");
}

/* ------------------------------------------------------------ tests */

static void test_worker_faults_completion_over_service_limit(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itwf-wrk");
  dbx_worker *w = worker_start("big", dir, 0); /* worker assumes 128 MiB: it sends */
  char *rid = start("wf-big", "big", "102400");
  HistoryEvent *e = wait_events("wf-big", rid, ET(WORKFLOW_TASK_FAILED), 1);
  expect_oversized(e, "exceeds the service's message limit of 64 KiB");
  assert_non_null(strstr(e->workflow_task_failed_event_attributes->failure->message,
                         "workflow task completion of 100."));
  protobuf_c_message_free_unpacked(&e->base, NULL);
  /* The service retries the task (attempts 1 and 2 at once, then with
   * backoff). Wait until the third attempt has been answered, then stop the
   * worker: each attempt sent the completion exactly once. */
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  for (;;) {
    dbx_worker_stats s;
    dbx_worker_get_stats(w, &s);
    if (s.oversized_completions >= 3 || dbx_mono_ns() > deadline) break;
    /* no event marks a new attempt; a short history long poll paces the check */
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.timeout_ms = 200;
    dbx_client_get_history(g_c, "wf-big", rid, &ho, &h, NULL);
    dbx_client_history_cleanup(&h);
  }
  dbx_worker_stop(w, 0);
  dbx_worker_stats s;
  dbx_worker_get_stats(w, &s);
  assert_true(s.oversized_completions >= 3);
  assert_int_equal(s.completions_sent, s.oversized_completions);
  dbx_worker_destroy(w);
  free(rid);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_worker_faults_completion_over_configured_limit(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itwf-wrk");
  dbx_worker *w = worker_start("big16", dir, 16u << 10);
  char *rid = start("wf-big16", "big16", "20480"); /* fits the service, not the worker */
  HistoryEvent *e = wait_events("wf-big16", rid, ET(WORKFLOW_TASK_FAILED), 1);
  expect_oversized(e, "exceeds the service's message limit of 16 KiB");
  protobuf_c_message_free_unpacked(&e->base, NULL);
  dbx_worker_stop(w, 0);
  dbx_worker_stats s;
  dbx_worker_get_stats(w, &s);
  assert_true(s.oversized_completions >= 1);
  assert_int_equal(s.completions_sent, 0); /* never sent */
  dbx_worker_destroy(w);
  free(rid);
  dbx_test_rmrf(dir);
  free(dir);
}

static size_t count_type(const dbx_client_history *h, int type) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++) n += (int)h->events[i]->event_type == type;
  return n;
}

static void test_worker_faults_heartbeat_lost_cancels_attempt(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itwf-wrk");
  dbx_worker *w = worker_start("hb", dir, 0);
  char *rid = start_type("wf-hb", "t.Hb", "hb", "{}");
  assert_true(flag_wait(&g_hb_running, 30000));
  /* the service goes away: every heartbeat from now on fails */
  int port = g_port;
  dbx_service_stop(g_svc);
  g_svc = NULL;
  /* cancelled by the worker itself: heartbeat timeout (2 s) plus slack for
   * the throttled send that first fails and the watchdog's tick */
  if (!flag_wait(&g_hb_cancelled, 2000 + 3000))
    fail_msg("the attempt was not cancelled while its heartbeats failed");
  assert_true(flag_wait(&g_hb_returned, 5000)); /* its late result exists */
  service_start(port);
  client_wait_ready();
  HistoryEvent *e = wait_events("wf-hb", rid, ET(WORKFLOW_EXECUTION_COMPLETED), 1);
  char *res = dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result);
  assert_string_equal(res, "\"timed_out\"");
  free(res);
  protobuf_c_message_free_unpacked(&e->base, NULL);
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, "wf-hb", rid, NULL, &h, NULL), DBX_OK);
  assert_int_equal(count_type(&h, ET(ACTIVITY_TASK_TIMED_OUT)), 1);
  assert_int_equal(count_type(&h, ET(ACTIVITY_TASK_COMPLETED)), 0); /* the late result: not reported */
  for (size_t i = 0; i < h.n; i++)
    if (h.events[i]->event_type == ET(ACTIVITY_TASK_TIMED_OUT)) {
      const Failure *f = h.events[i]->activity_task_timed_out_event_attributes->failure;
      assert_non_null(f);
      assert_non_null(f->timeout_failure_info);
      assert_int_equal(f->timeout_failure_info->timeout_type,
                       TEMPORAL__API__ENUMS__V1__TIMEOUT_TYPE__TIMEOUT_TYPE_HEARTBEAT);
    }
  dbx_client_history_cleanup(&h);
  dbx_worker_stop(w, 0);
  dbx_worker_destroy(w);
  free(rid);
  dbx_test_rmrf(dir);
  free(dir);
}

/* PollActivityTaskQueue on tq with a client deadline of ms: 1 when a task
 * was delivered (its token is non-empty). */
static int activity_delivered(const char *tq, int64_t ms) {
  PollActivityTaskQueueRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
  TaskQueue q = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  q.name = (char *)tq;
  rq.namespace_ = "default";
  rq.task_queue = &q;
  rq.identity = "it-probe";
  PollActivityTaskQueueResponse *t = NULL;
  char *err = NULL;
  dbx_err rc = dbx_client_call(g_c, "PollActivityTaskQueue", &rq.base, &PollActivityTaskQueueResponse__D, ms,
                               NULL, (ProtobufCMessage **)&t, &err);
  if (rc != DBX_OK && rc != DBX_ETIMEDOUT) fail_msg("activity poll: %s", err ? err : dbx_strerror(rc));
  int got = rc == DBX_OK && t->task_token.len > 0;
  if (got) fprintf(stderr, "delivered: activity %s attempt %d\n", t->activity_id, t->attempt);
  dbx_client_msg_free(t);
  free(err);
  return got;
}

static void test_worker_faults_terminated_workflow_leaves_no_retry(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itwf-wrk");
  dbx_worker *w = worker_start("retry", dir, 0);
  char *rid = start_type("wf-retry", "t.Retry", "retry", "{}");
  pthread_mutex_lock(&g_mu);
  while (g_fail_calls < 2) pthread_cond_wait(&g_cv, &g_mu); /* failed, retried, failed */
  pthread_mutex_unlock(&g_mu);
  char *err = NULL;
  assert_int_equal(dbx_client_terminate(g_c, "wf-retry", rid, "test", NULL, &err), DBX_OK);
  int at_ack = fail_calls();
  /* A window longer than the next two backoffs (1 s, 2 s): the history must
   * stay as the termination left it, and the worker must not run it again. */
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, "wf-retry", rid, NULL, &h, NULL), DBX_OK);
  assert_true(h.n > 0);
  assert_int_equal(h.events[h.n - 1]->event_type, ET(WORKFLOW_EXECUTION_TERMINATED));
  int64_t last_id = h.events[h.n - 1]->event_id;
  dbx_client_history_cleanup(&h);
  int64_t until = dbx_mono_ns() + 3500LL * 1000000;
  while (dbx_mono_ns() < until) {
    dbx_client_history f = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.timeout_ms = 1000;
    assert_int_equal(dbx_client_get_history(g_c, "wf-retry", rid, &ho, &f, NULL), DBX_OK);
    for (size_t i = 0; i < f.n; i++) assert_true(f.events[i]->event_id <= last_id);
    dbx_client_history_cleanup(&f);
  }
  dbx_worker_stop(w, 5000);
  int after = fail_calls();
  assert_true(after <= at_ack + 1); /* only an attempt that was already running */
  /* No activity task is delivered now, nor after a restart (nothing re-armed). */
  assert_int_equal(activity_delivered("retry", 2500), 0);
  int port = g_port;
  dbx_service_stop(g_svc);
  g_svc = NULL;
  service_start(port);
  client_wait_ready();
  assert_int_equal(activity_delivered("retry", 3000), 0);
  DescribeWorkflowExecutionResponse *d = NULL;
  assert_int_equal(dbx_client_describe(g_c, "wf-retry", rid, &d, NULL), DBX_OK);
  assert_int_equal(d->workflow_execution_info->status, WS(TERMINATED));
  dbx_client_msg_free(&d->base);
  assert_int_equal(fail_calls(), after);
  dbx_worker_destroy(w);
  free(rid);
  dbx_test_rmrf(dir);
  free(dir);
}

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  g_svc_dir = dbx_test_tmpdir("itwf-svc");
  service_start(0);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  dbx_client_opts co = {0};
  co.address = g_addr;
  if (dbx_client_create(&co, &g_c) != DBX_OK) return -1;
  return 0;
}

static int group_teardown(void **st) {
  (void)st;
  dbx_client_destroy(g_c);
  dbx_service_stop(g_svc);
  dbx_test_rmrf(g_svc_dir);
  free(g_svc_dir);
  dbx_rpc_global_shutdown();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_faults_completion_over_service_limit),
      cmocka_unit_test(test_worker_faults_completion_over_configured_limit),
      cmocka_unit_test(test_worker_faults_heartbeat_lost_cancels_attempt),
      cmocka_unit_test(test_worker_faults_terminated_workflow_leaves_no_retry),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
