/* Integration test: `kill -9` of the worker in the middle of a fleet.
 *
 * A spawned `durabox server start-dev` and a spawned `durabox worker` (its own
 * --db, DURABOX_HOME in a temporary directory, local sandboxes) run a
 * durabox.Fleet of 10 items at concurrency 3; each item's child is a
 * durabox.Script that keeps its sandbox and runs "echo KEY >> runs.txt;
 * sleep 1". Once 3 sandboxes exist the worker gets SIGKILL, and a new worker
 * with the same --db and home takes over.
 * Expected: the fleet completes with 10 succeeded; each item's child id has
 * exactly one run (ListWorkflowExecutions); there are exactly 10 sandboxes,
 * one per item, and each one's runs.txt holds its key once: no item lost,
 * none run twice. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tests/svc_client.h"
#include "worker/client.h"

#define WFID "fleet-kill"
#define TQ "fleetkq"
#define N 10

static char *g_svc_dir, *g_wrk_dir, *g_home, *g_env_home;

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int teardown(void **state) {
  (void)state;
  dbx_svct_proc_kill_all();
  dbx_svct_server_kill_all();
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  dbx_test_rmrf(g_home);
  free(g_svc_dir);
  free(g_wrk_dir);
  free(g_home);
  free(g_env_home);
  return 0;
}

static pid_t spawn_worker(const char *addr) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", (char *)addr, "--task-queue", TQ,
                  "--db", g_wrk_dir, "--log-level", "error", NULL};
  char *env[] = {g_env_home, NULL};
  return dbx_svct_proc_spawn(argv, env, NULL, NULL);
}

/* The sandbox directories under $home/sandboxes; with texts non-NULL, each
 * one's workspace/runs.txt (malloc'd, NULL when absent) in texts[0..]. */
static int sandboxes(char **texts, int cap) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/sandboxes", g_home);
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (texts && n < cap) {
      char p[1400];
      snprintf(p, sizeof p, "%s/%s/workspace/runs.txt", dir, e->d_name);
      texts[n] = dbx_svct_file_read(p);
    }
    n++;
  }
  closedir(d);
  return n;
}

static int runs_of_child(dbx_client *c, const char *wid) {
  char q[256];
  snprintf(q, sizeof q, "WorkflowId = '%s'", wid);
  ListWorkflowExecutionsResponse *r = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_list(c, q, 100, NULL, 0, &r, &err);
  if (e != DBX_OK) fail_msg("list %s: %s", wid, err ? err : "?");
  int n = (int)r->n_executions;
  dbx_client_msg_free(r);
  return n;
}

static void test_fleet_worker_kill_loses_no_item_and_runs_none_twice(void **state) {
  (void)state;
  g_svc_dir = dbx_test_tmpdir("itfleetk-svc");
  g_wrk_dir = dbx_test_tmpdir("itfleetk-wrk");
  g_home = dbx_test_tmpdir("itfleetk-home");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s", g_home);
  int port = dbx_svct_free_port();
  dbx_svct_server_spawn(g_svc_dir, port);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  pid_t worker = spawn_worker(addr);

  dbx_client *c = NULL;
  dbx_client_opts co = {.address = addr};
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  char items[N * 24 + 8] = "[";
  for (int i = 0; i < N; i++)
    snprintf(items + strlen(items), sizeof items - strlen(items), "%s{\"key\":\"k%d\"}",
             i ? "," : "", i);
  strcat(items, "]");
  char *in = dbx_asprintf(
      "{\"items\":%s,\"concurrency\":3,\"template\":{\"input\":{\"sandbox\":{\"keep\":true},"
      "\"steps\":[{\"name\":\"work\",\"kind\":\"exec\",\"heartbeat_timeout_s\":3,"
      "\"command\":\"echo {{key}} >> runs.txt; sleep 1\"}]}}}", items);
  dbx_client_start_opts so = {.workflow_id = WFID, .workflow_type = "durabox.Fleet",
                              .task_queue = TQ, .input_json = in};
  char *rid = NULL, *err = NULL;
  if (dbx_client_start_workflow(c, &so, &rid, &err) != DBX_OK) fail_msg("start: %s", err);

  int64_t end = dbx_mono_ns() / 1000000 + 60000;
  while (sandboxes(NULL, 0) < 3 && dbx_mono_ns() / 1000000 < end) pause_ms(20);
  assert_true(sandboxes(NULL, 0) >= 3);
  dbx_svct_proc_kill(worker, SIGKILL);
  worker = spawn_worker(addr);

  char *result = dbx_svct_await_result(c, WFID, NULL, 60);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_int_equal((int)cJSON_GetObjectItem(j, "succeeded")->valuedouble, N);
  assert_int_equal((int)cJSON_GetObjectItem(j, "failed")->valuedouble, 0);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "items")), N);
  for (int i = 0; i < N; i++) {
    char wid[64];
    snprintf(wid, sizeof wid, WFID "/k%d", i);
    assert_int_equal(runs_of_child(c, wid), 1);
  }
  char *texts[N + 4] = {0};
  assert_int_equal(sandboxes(texts, N + 4), N);
  int seen[N] = {0};
  for (int i = 0; i < N; i++) {
    assert_non_null(texts[i]);
    int k = -1;
    assert_int_equal(sscanf(texts[i], "k%d\n", &k), 1);
    assert_in_range(k, 0, N - 1);
    char want[16];
    snprintf(want, sizeof want, "k%d\n", k);
    assert_string_equal(texts[i], want); /* one line: the command ran once */
    seen[k]++;
    free(texts[i]);
  }
  for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);
  cJSON_Delete(j);
  free(result);
  free(rid);
  free(in);
  dbx_client_destroy(c);
  dbx_rpc_channel_destroy(ch);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_fleet_worker_kill_loses_no_item_and_runs_none_twice, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
