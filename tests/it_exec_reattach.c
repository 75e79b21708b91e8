/* Integration test of re-attaching exec: `durabox worker` (a real child
 * process) runs a durabox.Script against the in-process embedded service; the
 * exec step's command records "start", runs for seconds and records "end".
 * The worker is killed with SIGKILL as soon as "start" is on disk and started
 * again; the service notices the silent heartbeat, retries the activity, and
 * the new worker re-attaches to the command that kept running under its
 * supervisor. The workflow completes, the command ran exactly once, and the
 * step reports its exit code and output. */
#include <glob.h>
#include <signal.h>
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

extern char **environ;

static pid_t spawn(char *const argv[]) {
  pid_t pid = -1;
  assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
  return pid;
}

/* Contents of the first <home>/sandboxes/x/workspace/n.txt, or NULL. */
static char *read_marker(const char *home) {
  char *pat = dbx_asprintf("%s/sandboxes/*/workspace/n.txt", home);
  glob_t g;
  char *out = NULL;
  if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
    FILE *f = fopen(g.gl_pathv[0], "r");
    if (f != NULL) {
      char buf[256] = {0};
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      out = dbx_strndup(buf, n);
    }
  }
  globfree(&g);
  free(pat);
  return out;
}

static void test_exec_reattach_after_worker_sigkill(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itr-svc"), *wrk_dir = dbx_test_tmpdir("itr-wrk"),
       *home = dbx_test_tmpdir("itr-home");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "req",
                   "--db", wrk_dir, "--sandbox-home", home, "--log-level", "error", NULL};
  pid_t worker = spawn(wargv);

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = "reattach";
  o.workflow_type = "durabox.Script";
  o.task_queue = "req";
  o.input_json = "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"build\",\"kind\":\"exec\","
                 "\"command\":\"echo start >> n.txt; sleep 8; echo end >> n.txt; echo built\","
                 "\"timeout_s\":60,\"heartbeat_timeout_s\":3}]}";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);

  /* Wait (bounded, 60 s) for the command's first side effect, then kill. The
   * shell creates n.txt before it writes to it: an empty file is not yet the
   * side effect. */
  char *m = NULL;
  for (int i = 0; i < 3000 && (m == NULL || *m == '\0'); i++) {
    free(m);
    m = read_marker(home);
    if (m == NULL || *m == '\0') {
      struct timespec ts = {0, 20 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  assert_non_null(m);
  assert_string_equal(m, "start\n");
  free(m);
  kill(worker, SIGKILL);
  int st = 0;
  assert_int_equal(waitpid(worker, &st, 0), worker);
  assert_true(WIFSIGNALED(st));
  worker = spawn(wargv);

  char *result = dbx_svct_await_result(c, "reattach", rid, 12);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *step = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "steps"), 0);
  assert_int_equal((int)cJSON_GetObjectItem(step, "exit_code")->valuedouble, 0);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step, "ok")));
  /* The second attempt produced the result, and it is the one run's. */
  assert_int_equal((int)cJSON_GetObjectItem(step, "attempts")->valuedouble, 2);
  assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(step, "output_excerpt")),
                         "built"));
  cJSON_Delete(j);
  free(result);
  m = read_marker(home);
  assert_non_null(m);
  assert_string_equal(m, "start\nend\n"); /* exactly one start: not run again */
  free(m);

  kill(worker, SIGTERM);
  assert_int_equal(waitpid(worker, &st, 0), worker);
  free(rid);
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(home);
  free(svc_dir);
  free(wrk_dir);
  free(home);
  dbx_rpc_global_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_exec_reattach_after_worker_sigkill)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
