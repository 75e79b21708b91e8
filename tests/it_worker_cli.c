/* Integration test of the durabox command: `durabox worker` as a child
 * process against the in-process embedded service runs a durabox.Script over
 * real local sandboxes, stops with exit 0 on SIGTERM, and `durabox replay`
 * then replays the recorded run from the worker's store; a worker whose
 * polls are refused says so once, and says when they are answered again. */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "tests/svc_client.h"
#include "worker/client.h"

extern char **environ;

static pid_t spawn2(char *const argv[], int out_fd, int err_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  assert_int_equal(rc, 0);
  return pid;
}

static pid_t spawn(char *const argv[], int out_fd) { return spawn2(argv, out_fd, -1); }

static int wait_exit(pid_t pid) {
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* An unsynced embedded service on a store in dir. */
static void service_opts(dbx_service_opts *so, const char *dir) {
  dbx_service_opts_init(so);
  so->db_path = dir;
  so->no_sync = 1;
}

/* Remove and free a test's three directories; the end of its gRPC use. */
static void drop_dirs(char *svc_dir, char *wrk_dir, char *home) {
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(home);
  free(svc_dir);
  free(wrk_dir);
  free(home);
  dbx_rpc_global_shutdown();
}

static void test_cli_worker_runs_script_then_replay(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itc-svc"), *wrk_dir = dbx_test_tmpdir("itc-wrk"),
       *home = dbx_test_tmpdir("itc-home");
  dbx_service_opts so;
  service_opts(&so, svc_dir);
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));

  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "cliq",
                   "--db", wrk_dir, "--sandbox-home", home, "--log-level", "error", NULL};
  pid_t worker = spawn(wargv, -1);

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = "cli-script";
  o.workflow_type = "durabox.Script";
  o.task_queue = "cliq";
  o.input_json = "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"hello\"},"
                 "{\"name\":\"cat\",\"kind\":\"exec\",\"command\":\"cat a.txt\"}]}";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  char *result = dbx_svct_await_result(c, "cli-script", rid, 20);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *cat = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "steps"), 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cat, "output_excerpt")), "hello");
  assert_int_equal((int)cJSON_GetObjectItem(cat, "exit_code")->valuedouble, 0);
  cJSON_Delete(j);
  free(result);

  kill(worker, SIGTERM);
  assert_int_equal(wait_exit(worker), 0);

  char outp[] = "/tmp/itc-replay-XXXXXX";
  int fd = mkstemp(outp);
  assert_true(fd >= 0);
  char *rargv[] = {(char *)dbx_test_bin(), "replay", "--workflow-id", "cli-script", "--db", wrk_dir, NULL};
  assert_int_equal(wait_exit(spawn(rargv, fd)), 0);
  char buf[512] = {0};
  assert_true(pread(fd, buf, sizeof buf - 1, 0) > 0);
  close(fd);
  unlink(outp);
  assert_non_null(strstr(buf, "deterministic: "));
  assert_non_null(strstr(buf, "4 commands matched")); /* create, write_file, exec, delete */

  free(rid);
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  drop_dirs(svc_dir, wrk_dir, home);
}

/* Occurrences of needle in the file's text so far. */
static int count_in_file(int fd, const char *needle) {
  char buf[16384] = {0};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  int c = 0;
  for (const char *p = n > 0 ? buf : ""; (p = strstr(p, needle)); p += strlen(needle)) c++;
  return c;
}

/* Polls every 50 ms up to 20 s until needle is in the file; its count then. */
static int await_in_file(int fd, const char *needle) {
  for (int i = 0; i < 400; i++) {
    int c = count_in_file(fd, needle);
    if (c) return c;
    usleep(50 * 1000);
  }
  return 0;
}

static pid_t g_worker; /* the spawned worker, for the teardown after a failed assertion */

static int kill_worker(void **state) {
  (void)state;
  if (g_worker > 0) {
    kill(g_worker, SIGKILL);
    waitpid(g_worker, NULL, 0);
  }
  g_worker = 0;
  return 0;
}

static void test_cli_worker_says_why_its_polls_fail(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itc-svc"), *wrk_dir = dbx_test_tmpdir("itc-wrk"),
       *home = dbx_test_tmpdir("itc-home");
  dbx_service_opts so;
  service_opts(&so, svc_dir);
  so.long_poll_ms = 300; /* an answered poll is known when it ends */
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  int port = dbx_service_port(svc);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

  char errp[] = "/tmp/itc-stderr-XXXXXX";
  int efd = mkstemp(errp);
  assert_true(efd >= 0);
  unlink(errp);
  /* The service lacks namespace "later": every poll is refused with NOT_FOUND. */
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--namespace", "later",
                   "--task-queue", "pollq", "--db", wrk_dir, "--sandbox-home", home,
                   "--log-level", "info", NULL};
  pid_t worker = g_worker = spawn2(wargv, -1, efd);
  const char *warned = "poll of task queue pollq in namespace later failed, polling again with backoff: ";
  assert_int_equal(await_in_file(efd, warned), 1);
  assert_int_equal(await_in_file(efd, "Namespace later is not found."), 1);
  /* Every poller keeps failing with backoff; still one warning for them all. */
  usleep(1500 * 1000);
  assert_int_equal(count_in_file(efd, warned), 1);
  assert_int_equal(count_in_file(efd, "answered again"), 0);

  /* The service comes back on the same port with the namespace, but now
   * wants an API key the worker lacks: a new cause, a new warning. */
  dbx_service_stop(svc);
  const char *ns[] = {"later"};
  so.port = port;
  so.namespaces = ns;
  so.n_namespaces = 1;
  so.api_key = "k";
  svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  assert_int_equal(await_in_file(efd, "UNAUTHENTICATED"), 1);
  usleep(1500 * 1000);
  assert_int_equal(count_in_file(efd, "UNAUTHENTICATED"), 1);
  assert_int_equal(count_in_file(efd, "answered again"), 0);

  /* and then without the key: answered again */
  dbx_service_stop(svc);
  so.api_key = NULL;
  svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  assert_int_equal(await_in_file(efd, "polls of task queue pollq in namespace later are answered again"), 1);
  /* one warning per cause (the restarts' dropped polls are causes of their own) */
  assert_int_equal(count_in_file(efd, "with backoff: NOT_FOUND: Namespace later is not found."), 1);
  assert_int_equal(count_in_file(efd, "with backoff: UNAUTHENTICATED"), 1);

  kill(worker, SIGTERM);
  assert_int_equal(wait_exit(worker), 0);
  g_worker = 0;
  close(efd);
  dbx_service_stop(svc);
  drop_dirs(svc_dir, wrk_dir, home);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_cli_worker_runs_script_then_replay),
                                     cmocka_unit_test_teardown(test_cli_worker_says_why_its_polls_fail, kill_worker)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
