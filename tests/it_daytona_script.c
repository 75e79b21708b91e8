/* The Script workflow end to end over Daytona: the real embedded service, a
 * real `durabox worker --sandbox daytona` process, and the fake Daytona
 * server (tests/fakes/daytona) as its DAYTONA_API_URL. The run creates a
 * sandbox, runs commands (one with a secret from the worker's environment),
 * writes, reads, checkpoints, and deletes it; the summary says what each
 * step did, the fake's log shows one create and one delete and no sandbox
 * left, and the secret's value is nowhere: not in the service's store, the
 * worker's store, the fake's request log or the sandbox's files. A missing
 * python3 or fake fails the test. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/fs.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"

extern char **environ;

#define TOKEN "tok-9f2c1e7a-SECRET-value"

static pid_t g_worker = -1;
static dbx_fake_daytona g_fake;

static int stop_children(void **state) {
  (void)state;
  if (g_worker > 0) {
    kill(g_worker, SIGKILL);
    waitpid(g_worker, NULL, 0);
    g_worker = -1;
  }
  dbx_fake_daytona_stop(&g_fake);
  return 0;
}

/* 1 if some file under dir holds needle. */
static int tree_holds(const char *dir, const char *needle) {
  int found = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e = d ? readdir(d) : NULL; e && !found; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = dbx_asprintf("%s/%s", dir, e->d_name);
    struct stat sb;
    if (p && lstat(p, &sb) == 0) {
      if (S_ISDIR(sb.st_mode)) {
        found = tree_holds(p, needle);
      } else if (S_ISREG(sb.st_mode)) {
        char *buf = NULL;
        size_t n = 0;
        if (dbx_fs_read_all(p, &buf, &n) == DBX_OK)
          found = memmem(buf, n, needle, strlen(needle)) != NULL;
        free(buf);
      }
    }
    free(p);
  }
  if (d) closedir(d);
  return found;
}

static const cJSON *step_named(const cJSON *j, const char *name) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "steps")) {
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")), name) == 0) return s;
  }
  fail_msg("no step '%s'", name);
  return NULL;
}

static void test_daytona_script_end_to_end(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itdt-svc"), *wrk_dir = dbx_test_tmpdir("itdt-wrk"),
       *tmp = dbx_test_tmpdir("itdt-tmp");
  if (dbx_fake_daytona_start(&g_fake, tmp) != 0) fail_msg("%s", g_fake.why);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}"), 0);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  setenv("DAYTONA_API_URL", g_fake.api_url, 1);
  setenv("DAYTONA_API_KEY", DBX_FAKE_DAYTONA_KEY, 1);
  setenv("DBX_IT_TOKEN", TOKEN, 1);
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "dtq",
                   "--db", wrk_dir, "--sandbox", "daytona", "--log-level", "error", NULL};
  assert_int_equal(posix_spawn(&g_worker, wargv[0], NULL, NULL, wargv, environ), 0);
  unsetenv("DBX_IT_TOKEN"); /* only the worker has it */

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = "daytona-script";
  o.workflow_type = "durabox.Script";
  o.task_queue = "dtq";
  o.input_json =
      "{\"sandbox\":{\"keep\":false},\"steps\":["
      "{\"name\":\"hi\",\"kind\":\"exec\",\"command\":\"echo hello from $(basename $PWD); "
      "echo err-line >&2; echo run >> runs.log\"},"
      "{\"name\":\"tok\",\"kind\":\"exec\",\"command\":\"printf 'len=%s' ${#TOKEN}; "
      "printf '%s' \\\"$TOKEN\\\" > used.txt\",\"env\":{\"TOKEN\":{\"secret\":\"DBX_IT_TOKEN\"}}},"
      "{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"notes/a.txt\",\"content\":\"caf\xc3\xa9\\n\"},"
      "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"notes/a.txt\"},"
      "{\"name\":\"runs\",\"kind\":\"read_file\",\"path\":\"runs.log\"},"
      "{\"name\":\"cp\",\"kind\":\"checkpoint\"}]}";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  char *result = dbx_svct_await_result(c, "daytona-script", rid, 60);
  assert_non_null(result);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  const cJSON *hi = step_named(j, "hi");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(hi, "ok")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(hi, "stdout")), "hello from work\n");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(hi, "stderr")), "err-line\n");
  const cJSON *tok = step_named(j, "tok");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(tok, "ok")));
  char want[32];
  snprintf(want, sizeof want, "len=%zu", strlen(TOKEN));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(tok, "stdout")), want);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "r"), "content")),
                      "caf\xc3\xa9\n");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "runs"), "content")),
                      "run\n");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step_named(j, "cp"), "ok")));
  cJSON_Delete(j);
  assert_null(strstr(result, TOKEN));
  free(result);
  free(rid);

  /* the fake: one create, one delete, no sandbox left */
  char *log = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
  assert_non_null(log);
  assert_non_null(strstr(log, "used.txt")); /* the log holds the command texts sent */
  assert_null(strstr(log, TOKEN));          /* and the secret is in none of them */
  cJSON *lj = cJSON_Parse(log);
  free(log);
  int creates = 0, deletes = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(lj, "requests")) {
    const char *m = cJSON_GetObjectItem(e, "method")->valuestring;
    const char *p = cJSON_GetObjectItem(e, "path")->valuestring;
    creates += strcmp(m, "POST") == 0 && strcmp(p, "/api/sandbox") == 0;
    deletes += strcmp(m, "DELETE") == 0 && strncmp(p, "/api/sandbox/", 13) == 0;
  }
  cJSON_Delete(lj);
  assert_int_equal(creates, 1);
  assert_true(deletes >= 1);
  char *left = NULL;
  for (int i = 0; i < 100; i++) { /* the delete settles after the fake's transition */
    free(left);
    left = dbx_fake_daytona_call(&g_fake, "GET", "/_control/sandboxes", NULL);
    if (left && strstr(left, "\"items\": []")) break;
    usleep(50 * 1000);
  }
  assert_non_null(left);
  assert_non_null(strstr(left, "\"items\": []"));
  free(left);

  kill(g_worker, SIGTERM);
  int st = 0;
  assert_int_equal(waitpid(g_worker, &st, 0), g_worker);
  g_worker = -1;
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  /* the secret is in no store and no file the fake kept (its snapshot holds
   * the workspace, where the command wrote it: that one is the user's) */
  assert_false(tree_holds(svc_dir, TOKEN));
  assert_false(tree_holds(wrk_dir, TOKEN));
  char *sbs = dbx_asprintf("%s/fake-daytona/sb", tmp);
  assert_false(tree_holds(sbs, TOKEN));
  free(sbs);
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(tmp);
  free(svc_dir);
  free(wrk_dir);
  free(tmp);
  dbx_rpc_global_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_daytona_script_end_to_end, stop_children),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
