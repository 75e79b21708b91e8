/* Integration test of the duplicate at_most_once refusal: the embedded
 * service (in-process) and a dbx_worker run a workflow that calls the same
 * at_most_once activity type with the same input three times in one run.
 * The first runs; the second fails DuplicateAtMostOnce naming activity id 1
 * (the activity is not invoked); `durabox approval list` shows the refusal
 * and `durabox approval grant` (the real binary, on the worker's store)
 * approves one more; the third then runs. */
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "tests/svc_client.h"
#include "worker/client.h"
#include "worker/worker.h"
#include "worker/wstore.h"

extern char **environ;

static _Atomic int g_sends;

/* ---- workflow t.Dup: send, send again, wait for signal "go", send again */

typedef struct {
  cJSON *outcomes;
  int n;
} dup_state;

static const char *SEND_INPUT = "{\"to\":\"ops\",\"text\":\"deploy done\"}";

static void send_once(dbx_wf *wf) {
  dbx_activity_opts o = {.start_to_close_ms = 10000, .retry_class = DBX_AT_MOST_ONCE};
  dbx_wf_schedule_activity(wf, "t.send", SEND_INPUT, &o);
}

static void *dup_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json;
  (void)len;
  dup_state *d = calloc(1, sizeof *d);
  d->outcomes = cJSON_CreateArray();
  send_once(wf);
  return d;
}

static void dup_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  dup_state *d = st;
  (void)seq;
  cJSON *x = cJSON_CreateObject();
  cJSON_AddStringToObject(x, "status", o->status == DBX_ACT_COMPLETED ? "completed" : "failed");
  cJSON_AddStringToObject(x, "type", o->failure_type ? o->failure_type : "");
  cJSON_AddStringToObject(x, "message", o->failure_message ? o->failure_message : "");
  cJSON_AddBoolToObject(x, "non_retryable", o->non_retryable);
  cJSON_AddItemToArray(d->outcomes, x);
  d->n++;
  if (d->n == 1) send_once(wf);
  if (d->n == 3) {
    char *txt = cJSON_PrintUnformatted(d->outcomes);
    dbx_wf_complete(wf, txt);
    free(txt);
  }
}

static void dup_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  dup_state *d = st;
  (void)json;
  (void)len;
  if (strcmp(name, "go") == 0 && d->n == 2) send_once(wf);
}

static void dup_destroy(void *st) {
  dup_state *d = st;
  cJSON_Delete(d->outcomes);
  free(d);
}

static const dbx_workflow_type wf_dup = {"t.Dup", dup_create, dup_on_activity, NULL,
                                         dup_on_signal, NULL, NULL, dup_destroy};

static dbx_err act_send(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a;
  (void)in;
  (void)len;
  (void)ud;
  g_sends++;
  res->result_json = dbx_strdup("{\"sent\":true}");
  return DBX_OK;
}

static const dbx_activity_type at_send = {"t.send", DBX_AT_MOST_ONCE, act_send, NULL};

/* Run the durabox binary with argv; its stdout (up to cap-1 bytes) in out. */
static int run_bin(char *const argv[], char *out, size_t cap) {
  char path[] = "/tmp/itamo-out-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  pid_t pid = -1;
  assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  ssize_t n = pread(fd, out, cap - 1, 0);
  out[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void test_amo_duplicate_refused_until_approved(void **state) {
  (void)state;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  char *svc_dir = dbx_test_tmpdir("itamo-svc"), *wrk_dir = dbx_test_tmpdir("itamo-wrk");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  dbx_worker_opts wo = {0};
  wo.address = addr;
  wo.task_queue = "amoq";
  wo.db_dir = wrk_dir;
  wo.no_sync = 1;
  dbx_worker *w = NULL;
  assert_int_equal(dbx_worker_create(&wo, &w, NULL), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_dup), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_send), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = "dup-1";
  o.workflow_type = "t.Dup";
  o.task_queue = "amoq";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);

  /* The worker records the refusal of the second call (bounded wait, 30 s). */
  dbx_wstore_refusal *r = NULL;
  size_t n = 0;
  for (int i = 0; i < 1500 && n == 0; i++) {
    dbx_wstore_refusals_free(r, n);
    r = NULL;
    assert_int_equal(dbx_wstore_refusals_list(dbx_worker_wstore(w), &r, &n), DBX_OK);
    if (n == 0) {
      struct timespec ts = {0, 20 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  assert_int_equal(n, 1);
  assert_string_equal(r[0].workflow_id, "dup-1");
  assert_string_equal(r[0].run_id, rid);
  assert_string_equal(r[0].activity_type, "t.send");
  assert_string_equal(r[0].activity_id, "2");
  assert_string_equal(r[0].earlier_activity_id, "1");
  char want[DBX_INPUT_HASH_LEN + 1];
  assert_int_equal(dbx_wstore_input_hash(SEND_INPUT, strlen(SEND_INPUT), want), DBX_OK);
  assert_string_equal(r[0].input_hash, want);
  dbx_wstore_refusals_free(r, n);
  assert_int_equal(g_sends, 1);

  /* The CLI lists it and grants one more execution (run id looked up). */
  char out[2048];
  char *largv[] = {(char *)dbx_test_bin(), "approval", "list", "--db", wrk_dir, NULL};
  assert_int_equal(run_bin(largv, out, sizeof out), 0);
  assert_non_null(strstr(out, want));
  assert_non_null(strstr(out, "workflow_id=dup-1"));
  char *gargv[] = {(char *)dbx_test_bin(), "approval", "grant", "--workflow-id", "dup-1",
                   "--activity-type", "t.send", "--input-hash", want, "--db", wrk_dir, NULL};
  assert_int_equal(run_bin(gargv, out, sizeof out), 0);
  assert_int_equal(dbx_client_signal(c, "dup-1", rid, "go", NULL, NULL), DBX_OK);

  char *result = dbx_svct_await_result(c, "dup-1", rid, 6);
  cJSON *j = cJSON_Parse(result);
  assert_int_equal(cJSON_GetArraySize(j), 3);
  cJSON *o1 = cJSON_GetArrayItem(j, 0), *o2 = cJSON_GetArrayItem(j, 1), *o3 = cJSON_GetArrayItem(j, 2);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o1, "status")), "completed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o2, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o2, "type")), "DuplicateAtMostOnce");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o2, "non_retryable")));
  const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(o2, "message"));
  assert_non_null(strstr(msg, "activity id 1"));
  assert_non_null(strstr(msg, "approval"));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o3, "status")), "completed");
  assert_int_equal(g_sends, 2); /* the refused call never reached the activity */
  cJSON_Delete(j);
  free(result);
  /* The approval was used up; the refusal is gone from the list. */
  assert_int_equal(dbx_wstore_refusals_list(dbx_worker_wstore(w), &r, &n), DBX_OK);
  assert_int_equal(n, 0);
  dbx_wstore_refusals_free(r, n);

  free(rid);
  dbx_client_destroy(c);
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_service_stop(svc);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  free(svc_dir);
  free(wrk_dir);
  dbx_rpc_global_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_amo_duplicate_refused_until_approved)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
