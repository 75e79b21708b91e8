/* Checkpoints and forks over Daytona (issue 12): `durabox dev --sandbox
 * daytona` against the fake Daytona server (tests/fakes/daytona), where a
 * restore is a create from the snapshot (driver.h restore: UNSUPPORTED):
 *  - a Script with the checkpoint policy makes its snapshots on Daytona; a
 *    fork at a covered point creates its sandbox from the checkpoint, takes
 *    the steps up to the point from the record and runs the rest on the
 *    restored sandbox (a live read sees the restored file);
 *  - a checkpoint whose capture fails (the fake's silent_fail, Daytona issue
 *    #4990) is recorded as failed and the run goes on to complete. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"

static char *g_dir, *g_sdb, *g_wdb, *g_env_url, *g_env_key;
static char g_addr[64];
static int g_port;
static pid_t g_dev;
static dbx_fake_daytona g_fake;

static int durabox(char **out, char **err, ...) {
  char *argv[40];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 37) argv[k++] = (char *)a;
  va_end(ap);
  argv[k++] = "--address";
  argv[k++] = g_addr;
  argv[k] = NULL;
  char *env[] = {"TEMPORAL_ADDRESS", NULL};
  return dbx_svct_proc_run(argv, env, 150000, out, err);
}

static int setup(void **state) {
  (void)state;
  g_dir = dbx_test_tmpdir("itfd-files");
  g_sdb = dbx_test_tmpdir("itfd-svc");
  g_wdb = dbx_test_tmpdir("itfd-wrk");
  if (dbx_fake_daytona_start(&g_fake, g_dir) != 0) {
    fprintf(stderr, "fake daytona: %s\n", g_fake.why);
    return -1;
  }
  if (dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":20}") != 0) return -1;
  g_env_url = dbx_asprintf("DAYTONA_API_URL=%s", g_fake.api_url);
  g_env_key = dbx_asprintf("DAYTONA_API_KEY=%s", DBX_FAKE_DAYTONA_KEY);
  g_port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", g_port);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  char *home = dbx_asprintf("DURABOX_HOME=%s", g_dir);
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--port", port_s, "--db-filename", g_sdb, "--worker-db",
                   g_wdb, "--sandbox", "daytona", "--log-level", "warn", NULL};
  char *denv[] = {g_env_url, g_env_key, home, NULL};
  g_dev = dbx_svct_proc_spawn(dargv, denv, NULL, NULL);
  dbx_rpc_channel_destroy(dbx_svct_connect(g_port));
  free(home);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kill(g_dev, SIGTERM);
  dbx_svct_proc_wait(g_dev, 30000);
  dbx_svct_proc_kill_all();
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(g_dir);
  dbx_test_rmrf(g_sdb);
  dbx_test_rmrf(g_wdb);
  free(g_dir);
  free(g_sdb);
  free(g_wdb);
  free(g_env_url);
  free(g_env_key);
  return 0;
}

static void start_script(const char *wid, const char *input) {
  char *f = dbx_asprintf("%s/%s.json", g_dir, wid), *out = NULL, *err = NULL;
  dbx_svct_file_write(f, input);
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=durabox",
                   "--workflow-id", wid, "--input-file", f, NULL);
  if (rc != 0) fail_msg("start %s exited %d\n%s\n%s", wid, rc, out, err);
  free(out);
  free(err);
  free(f);
}

static cJSON *result_of(const char *wid) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "result", "-w", wid, "--output", "json", NULL);
  cJSON *ev = cJSON_Parse(out);
  cJSON *p = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "workflowExecutionCompletedEventAttributes"),
                                              "result"),
                          "payloads"),
      0);
  if (!p) fail_msg("%s did not complete (exit %d): %.3000s %s", wid, rc, out, err);
  cJSON *r = cJSON_Duplicate(p, 1);
  cJSON_Delete(ev);
  free(out);
  free(err);
  return r;
}

static const cJSON *ckpt_at(const cJSON *res, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(res, "checkpoints"), i);
}

static const cJSON *step_at(const cJSON *res, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(res, "steps"), i);
}

static void test_daytona_fork_at_a_covered_point(void **state) {
  (void)state;
  start_script("dt-src", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                         "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
                         "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"two\"},"
                         "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"}]}");
  cJSON *src = result_of("dt-src");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(src, "checkpoints")), 3); /* baseline, a, b */
  for (int i = 0; i < 3; i++) assert_true(cJSON_IsTrue(cJSON_GetObjectItem(ckpt_at(src, i), "ok")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_at(src, 2), "content")), "two");
  const char *ref = cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(src, 1), "ref"));
  assert_non_null(ref);
  /* fork right after a's checkpoint: a from the record, b and r live */
  char at[32], *out = NULL, *err = NULL;
  snprintf(at, sizeof at, "%lld",
           (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ckpt_at(src, 1), "covered_event_id")));
  int rc = durabox(&out, &err, "workflow", "fork", "-w", "dt-src", "--at", at, "--workflow-id-new", "dt-fork", NULL);
  if (rc != 0) fail_msg("fork exited %d: %s %s", rc, out, err);
  assert_null(strstr(err, "not covered"));
  cJSON *fk = result_of("dt-fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(fk, "status")), "completed");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step_at(fk, 0), "from_record")));
  assert_false(cJSON_IsTrue(cJSON_GetObjectItem(step_at(fk, 1), "from_record")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_at(fk, 2), "content")), "two");
  cJSON *f = cJSON_GetObjectItem(fk, "fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(f, "checkpoint"), "ref")), ref);
  free(out);
  free(err);
  /* a fork right after a's change reads a's restored content */
  start_script("dt-src2", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                          "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
                          "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"}]}");
  cJSON *src2 = result_of("dt-src2");
  snprintf(at, sizeof at, "%lld",
           (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ckpt_at(src2, 1), "covered_event_id")));
  rc = durabox(&out, &err, "workflow", "fork", "-w", "dt-src2", "--at", at, "--workflow-id-new", "dt-fork2", NULL);
  assert_int_equal(rc, 0);
  cJSON *fk2 = result_of("dt-fork2");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step_at(fk2, 0), "from_record")));
  assert_false(cJSON_IsTrue(cJSON_GetObjectItem(step_at(fk2, 1), "from_record")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_at(fk2, 1), "content")), "one");
  free(out);
  free(err);
  cJSON_Delete(src);
  cJSON_Delete(src2);
  cJSON_Delete(fk);
  cJSON_Delete(fk2);
}

static void test_daytona_failed_checkpoint_is_recorded_and_the_run_goes_on(void **state) {
  (void)state;
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"snapshot_mode\":\"silent_fail\"}"), 0);
  start_script("dt-fail", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                          "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"}]}");
  cJSON *res = result_of("dt-fail");
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"snapshot_mode\":\"ok\"}"), 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "completed");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(res, "checkpoints")), 2);
  for (int i = 0; i < 2; i++) {
    const cJSON *c = ckpt_at(res, i);
    assert_false(cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")));
    assert_null(cJSON_GetObjectItem(c, "ref"));
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(c, "error")), "SnapshotFailed"));
    assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "attempts")), 3);
  }
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step_at(res, 0), "ok")));
  /* fork-points: no interval, a fork would start fresh */
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "fork-points", "-w", "dt-fail", NULL);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "0 checkpoints"));
  free(out);
  free(err);
  cJSON_Delete(res);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_fork_at_a_covered_point),
      cmocka_unit_test(test_daytona_failed_checkpoint_is_recorded_and_the_run_goes_on),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  dbx_rpc_global_shutdown();
  return rc;
}
