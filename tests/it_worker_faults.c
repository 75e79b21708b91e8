/* Integration tests of the worker under transport faults: the embedded
 * service in process (temporary LMDB, loopback, max_message_bytes 64 KiB)
 * and a dbx_worker with a workflow type defined here, t.Big, that completes
 * at once with a result of the size its input names.
 * - a completion over the service's limit (refused by gRPC as
 *   RESOURCE_EXHAUSTED) fails the workflow task with
 *   WORKFLOW_WORKER_UNHANDLED_FAILURE and a message naming size and limit,
 *   and each task attempt sends the completion once (no resend loop);
 * - a completion over the worker's configured limit is never sent. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/worker.h"

#define SVC_MAX_MSG (64u << 10)

static char *g_svc_dir;
static dbx_service *g_svc;
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

/* ------------------------------------------------------------ helpers */

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
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  return w;
}

static char *start(const char *wid, const char *tq, const char *input) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = "t.Big";
  o.task_queue = tq;
  o.input_json = input;
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fail_msg("start %s: %s", wid, err ? err : "?");
  return rid;
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
      size_t n = protobuf_c_message_get_packed_size(&h.events[i]->base);
      uint8_t *b = malloc(n + 1);
      assert_non_null(b);
      protobuf_c_message_pack(&h.events[i]->base, b);
      last = (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, n, b);
      free(b);
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

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  g_svc_dir = dbx_test_tmpdir("itwf-svc");
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = g_svc_dir;
  o.no_sync = 1;
  o.max_message_bytes = SVC_MAX_MSG;
  char *err = NULL;
  if (dbx_service_start(&o, &g_svc, &err) != DBX_OK) {
    fprintf(stderr, "service: %s\n", err ? err : "?");
    free(err);
    return -1;
  }
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", dbx_service_port(g_svc));
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
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
