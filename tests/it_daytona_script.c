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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/daytona.h"
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
  assert_false(dbx_test_tree_holds(svc_dir, TOKEN));
  assert_false(dbx_test_tree_holds(wrk_dir, TOKEN));
  char *sbs = dbx_asprintf("%s/fake-daytona/sb", tmp);
  assert_false(dbx_test_tree_holds(sbs, TOKEN));
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


/* The Script's sandbox options end to end on one driver: the sandbox env
 * seen by a step (under the step's own), sizes and intervals, a file
 * uploaded at create and results downloaded before the delete (one missing:
 * reported, the sandbox still deleted). daytona: the fake's log shows the
 * create's fields as Daytona names them. */
static void script_options_on(const char *driver) {
  dbx_rpc_global_init();
  int dt = strcmp(driver, "daytona") == 0;
  char *svc_dir = dbx_test_tmpdir("itdo-svc"), *wrk_dir = dbx_test_tmpdir("itdo-wrk"),
       *tmp = dbx_test_tmpdir("itdo-tmp"), *home = dbx_test_tmpdir("itdo-home");
  if (dt && dbx_fake_daytona_start(&g_fake, tmp) != 0) fail_msg("%s", g_fake.why);
  if (dt) assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}"), 0);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  if (dt) {
    setenv("DAYTONA_API_URL", g_fake.api_url, 1);
    setenv("DAYTONA_API_KEY", DBX_FAKE_DAYTONA_KEY, 1);
  }
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "doq",
                   "--db", wrk_dir, "--sandbox", (char *)driver, "--sandbox-home", home,
                   "--log-level", "error", NULL};
  assert_int_equal(posix_spawn(&g_worker, wargv[0], NULL, NULL, wargv, environ), 0);
  char *up = dbx_asprintf("%s/input.txt", tmp), *dl = dbx_asprintf("%s/out/result.txt", tmp),
       *dl2 = dbx_asprintf("%s/out/none.txt", tmp);
  FILE *f = fopen(up, "w");
  assert_non_null(f);
  fputs("uploaded-line\n", f);
  fclose(f);
  char *input = dbx_asprintf(
      "{\"sandbox\":{\"env\":{\"SB_ONE\":\"one\",\"SB_TWO\":\"two\"},\"resources\":\"medium\","
      "\"auto_stop_minutes\":20,\"auto_delete_minutes\":0,"
      "\"upload\":[{\"from\":\"%s\",\"to\":\"data/input.txt\"}],"
      "\"download\":[{\"from\":\"result.txt\",\"to\":\"%s\"},{\"from\":\"none.txt\",\"to\":\"%s\"}]},"
      "\"steps\":[{\"name\":\"env\",\"kind\":\"exec\",\"command\":\"printf '%%s|%%s' \\\"$SB_ONE\\\" "
      "\\\"$SB_TWO\\\"\",\"env\":{\"SB_TWO\":\"step\"}},"
      "{\"name\":\"use\",\"kind\":\"exec\",\"command\":\"tr a-z A-Z < data/input.txt > result.txt\"}]}",
      up, dl, dl2);
  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = dt ? "options-daytona" : "options-local";
  o.workflow_type = "durabox.Script";
  o.task_queue = "doq";
  o.input_json = input;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  char *result = dbx_svct_await_result(c, o.workflow_id, rid, 60);
  assert_non_null(result);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "env"), "stdout")),
                      "one|step");
  const cJSON *got = cJSON_GetObjectItem(j, "downloaded");
  assert_int_equal(cJSON_GetArraySize(got), 1);
  assert_string_equal(cJSON_GetArrayItem(got, 0)->valuestring, dl);
  const cJSON *bad = cJSON_GetObjectItem(j, "download_failed");
  assert_int_equal(cJSON_GetArraySize(bad), 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(bad, 0), "from")),
                      "none.txt");
  cJSON_Delete(j);
  char *text = NULL;
  assert_int_equal(dbx_fs_read_all(dl, &text, NULL), DBX_OK);
  assert_string_equal(text, "UPLOADED-LINE\n");
  free(text);
  if (dt) {
    char *log = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
    assert_non_null(log);
    const char *fields[] = {"\\\"cpu\\\":2", "\\\"memory\\\":4", "\\\"disk\\\":8",
                            "\\\"autoStopInterval\\\":20", "\\\"autoDeleteInterval\\\":0",
                            "\\\"SB_ONE\\\":\\\"one\\\""};
    for (size_t i = 0; i < 6; i++)
      if (strstr(log, fields[i]) == NULL) fail_msg("the fake's log lacks %s", fields[i]);
    free(log);
    char *left = NULL;
    for (int i = 0; i < 100; i++) {
      free(left);
      left = dbx_fake_daytona_call(&g_fake, "GET", "/_control/sandboxes", NULL);
      if (left && strstr(left, "\"items\": []")) break;
      usleep(50 * 1000);
    }
    assert_non_null(left);
    assert_non_null(strstr(left, "\"items\": []"));
    free(left);
  } else { /* deleted: nothing left under the home's sandboxes */
    char *sbs = dbx_asprintf("%s/sandboxes", home);
    DIR *d = opendir(sbs);
    int n = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
      n += e->d_name[0] != '.';
    if (d) closedir(d);
    assert_int_equal(n, 0);
    free(sbs);
  }
  free(result);
  free(rid);
  kill(g_worker, SIGTERM);
  int st = 0;
  assert_int_equal(waitpid(g_worker, &st, 0), g_worker);
  g_worker = -1;
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(tmp);
  dbx_test_rmrf(home);
  free(svc_dir);
  free(wrk_dir);
  free(tmp);
  free(home);
  free(up);
  free(dl);
  free(dl2);
  free(input);
  dbx_rpc_global_shutdown();
}

static void test_script_options_daytona(void **state) {
  (void)state;
  script_options_on("daytona");
}

static void test_script_options_local(void **state) {
  (void)state;
  script_options_on("local");
}


/* `durabox sandbox list|gc|rm --sandbox daytona` against the fake: three
 * sandboxes made through the driver with the labels sandbox.create sets
 * (an orphan of a run the service does not know, a kept one, one with no
 * owner); list judges each, gc removes the orphan alone, rm the kept one. */
static int run_cli(const char *addr, char **out, char **err, ...) {
  char *argv[24];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 20) argv[k++] = (char *)a;
  va_end(ap);
  argv[k++] = "--address";
  argv[k++] = (char *)addr;
  argv[k] = NULL;
  return dbx_svct_proc_run(argv, NULL, 60000, out, err);
}

static const cJSON *row_of(const cJSON *list, const char *id) {
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(list, "sandboxes")) {
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(r, "id")), id) == 0) return r;
  }
  return NULL;
}

static void test_sandbox_cli_on_daytona(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itdc-svc"), *tmp = dbx_test_tmpdir("itdc-tmp");
  if (dbx_fake_daytona_start(&g_fake, tmp) != 0) fail_msg("%s", g_fake.why);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":30}"), 0);
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
  dbx_daytona *d = NULL;
  dbx_daytona_opts dopt = {.api_url = g_fake.api_url, .api_key = DBX_FAKE_DAYTONA_KEY};
  assert_int_equal(dbx_daytona_open(&dopt, &d, NULL), DBX_OK);
  dbx_driver *drv = dbx_daytona_driver(d);
  dbx_drv_label orphan[] = {{"durabox.workflow_id", "wf-orphan"}, {"durabox.run_id", "run-gone"},
                            {"durabox.resource", "workspace"}};
  dbx_drv_label kept[] = {{"durabox.workflow_id", "wf-kept"}, {"durabox.run_id", "run-gone-2"},
                          {"durabox.keep", "true"}};
  dbx_drv_create_opts c1 = {.labels = orphan, .nlabels = 3}, c2 = {.labels = kept, .nlabels = 3},
                      c3 = {0};
  assert_int_equal(drv->ops->create(drv->self, "dbx-cli-orphan", &c1, NULL), DBX_DRV_OK);
  assert_int_equal(drv->ops->create(drv->self, "dbx-cli-kept", &c2, NULL), DBX_DRV_OK);
  assert_int_equal(drv->ops->create(drv->self, "dbx-cli-nolabels", &c3, NULL), DBX_DRV_OK);

  char *out = NULL, *err = NULL;
  int rc = run_cli(addr, &out, &err, "sandbox", "list", "--sandbox", "daytona", "--output", "json",
                   NULL);
  if (rc != 0) fail_msg("list exited %d: %s", rc, err);
  cJSON *l = cJSON_Parse(out);
  assert_non_null(l);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(l, "sandboxes")), 3);
  const cJSON *r = row_of(l, "dbx-cli-orphan");
  assert_non_null(r);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "verdict")), "orphaned");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "owner_state")), "not_found");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "workflow_id")), "wf-orphan");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(r, "bytes"))); /* no local facts there */
  assert_null(cJSON_GetObjectItem(r, "path"));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(row_of(l, "dbx-cli-kept"), "verdict")),
                      "kept");
  assert_string_equal(
      cJSON_GetStringValue(cJSON_GetObjectItem(row_of(l, "dbx-cli-nolabels"), "verdict")), "unknown");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(l, "leftovers")), 0);
  cJSON_Delete(l);
  free(out);
  free(err);

  rc = run_cli(addr, &out, &err, "sandbox", "gc", "--sandbox", "daytona", "--output", "json", NULL);
  if (rc != 0) fail_msg("gc exited %d: %s", rc, err);
  l = cJSON_Parse(out);
  assert_non_null(l);
  const cJSON *gone = cJSON_GetObjectItem(l, "removed");
  assert_int_equal(cJSON_GetArraySize(gone), 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(gone, 0), "id")),
                      "dbx-cli-orphan");
  cJSON_Delete(l);
  free(out);
  free(err);
  assert_int_equal(drv->ops->exists(drv->self, "dbx-cli-orphan", NULL), DBX_DRV_NO_SANDBOX);
  assert_int_equal(drv->ops->exists(drv->self, "dbx-cli-kept", NULL), DBX_DRV_OK);

  rc = run_cli(addr, &out, &err, "sandbox", "rm", "dbx-cli-kept", "--sandbox", "daytona", NULL);
  if (rc != 0) fail_msg("rm exited %d: %s", rc, err);
  assert_non_null(strstr(out, "removed dbx-cli-kept"));
  free(out);
  free(err);
  assert_int_equal(drv->ops->exists(drv->self, "dbx-cli-kept", NULL), DBX_DRV_NO_SANDBOX);
  rc = run_cli(addr, &out, &err, "sandbox", "rm", "dbx-cli-none", "--sandbox", "daytona", NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "no sandbox 'dbx-cli-none' in Daytona ("));
  free(out);
  free(err);
  assert_int_equal(drv->ops->exists(drv->self, "dbx-cli-nolabels", NULL), DBX_DRV_OK);

  dbx_daytona_close(d);
  dbx_service_stop(svc);
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(tmp);
  free(svc_dir);
  free(tmp);
  dbx_rpc_global_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_daytona_script_end_to_end, stop_children),
      cmocka_unit_test_teardown(test_script_options_daytona, stop_children),
      cmocka_unit_test_teardown(test_script_options_local, stop_children),
      cmocka_unit_test_teardown(test_sandbox_cli_on_daytona, stop_children),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
