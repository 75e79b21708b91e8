/* Checkpoints and forks over Daytona (issue 12): `durabox dev --sandbox
 * daytona` against the fake Daytona server (tests/fakes/daytona), where a
 * restore is a create from the snapshot (driver.h restore: UNSUPPORTED):
 *  - a Script with the checkpoint policy makes its snapshots on Daytona; a
 *    fork at a covered point creates its sandbox from the checkpoint, takes
 *    the steps up to the point from the record and runs the rest on the
 *    restored sandbox (a live read sees the restored file);
 *  - a checkpoint whose capture fails (the fake's silent_fail, Daytona issue
 *    #4990) is recorded as failed and the run goes on to complete;
 *  - fork at a covered point restores exactly the checkpoint's files (the
 *    hash of the fork's baseline snapshot tree is the checkpoint's); a live
 *    at_most_once step after the point waits for its approval and runs once;
 *  - a fork never re-runs a recorded at_most_once step (no sandbox.exec in
 *    its history, runs.log has the source's one line);
 *  - a fork of a fork restores the fork's own checkpoint.
 * The edge cases (timed-out source, missing snapshot, open last task) are in
 * it_fork_daytona_edges.c, each file well under a minute. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", g_sdb, "--worker-db",
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

/* ------------------------------------------------------------ fork rules */

static char *fork_of(const char *wid, const char *new_id, long long at, const char *queue, char **err) {
  char at_s[32], *out = NULL;
  snprintf(at_s, sizeof at_s, "%lld", at);
  int rc = queue ? durabox(&out, err, "workflow", "fork", "-w", wid, "--at", at_s, "--workflow-id-new", new_id,
                           "--task-queue", queue, NULL)
                 : durabox(&out, err, "workflow", "fork", "-w", wid, "--at", at_s, "--workflow-id-new", new_id, NULL);
  if (rc != 0) fail_msg("fork %s at %lld exited %d\n%s\n%s", wid, at, rc, out, *err);
  return out;
}

static long long covered_of(const cJSON *ck) {
  return (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id"));
}

static const char *ref_of(const cJSON *ck) { return cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref")); }

static int from_record(const cJSON *res, int i) {
  return cJSON_IsTrue(cJSON_GetObjectItem(step_at(res, i), "from_record"));
}

/* The folder of the fake's snapshot named ref (GET /_control/snapshots);
 * malloc'd. The test fails when there is none or it is not active. */
static char *snapshot_dir(const char *ref) {
  char *body = dbx_fake_daytona_call(&g_fake, "GET", "/_control/snapshots", NULL);
  cJSON *j = body ? cJSON_Parse(body) : NULL, *it;
  char *dir = NULL;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "items")) {
    if (ref && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), ref) == 0 &&
        strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "state")), "active") == 0)
      dir = dbx_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(it, "dir")));
  }
  if (!dir) fail_msg("no active snapshot %s on the fake: %.2000s", ref ? ref : "(null)", body ? body : "(no reply)");
  cJSON_Delete(j);
  free(body);
  return dir;
}

/* sha256 of a snapshot's files (relative names and contents, sorted), hex. */
static char *tree_hash(const char *ref) {
  char *dir = snapshot_dir(ref);
  char *cmd = dbx_asprintf("cd '%s' && find . -type f ! -path './.git/*' | LC_ALL=C sort | "
                           "while read -r f; do printf '%%s\\n' \"$f\"; cat \"$f\"; done | sha256sum",
                           dir);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL}, *out = NULL;
  assert_int_equal(dbx_svct_proc_run(argv, NULL, 30000, &out, NULL), 0);
  char *sp = strchr(out, ' ');
  if (sp) *sp = '\0';
  free(cmd);
  free(dir);
  return out;
}

/* The contents of file name in snapshot ref, malloc'd (NULL: none). */
static char *snapshot_file(const char *ref, const char *name) {
  char *dir = snapshot_dir(ref), *p = dbx_asprintf("%s/%s", dir, name);
  FILE *f = fopen(p, "r");
  char *txt = NULL;
  if (f) {
    fclose(f);
    txt = dbx_svct_file_read(p);
  }
  free(p);
  free(dir);
  return txt;
}

static size_t count_of(dbx_svct_history *h, int type, const char *name) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++) {
    const HistoryEvent *e = h->events[i];
    if ((int)e->event_type != type) continue;
    const char *nm = type == ET(MARKER_RECORDED) ? e->marker_recorded_event_attributes->marker_name
                     : type == ET(ACTIVITY_TASK_SCHEDULED)
                         ? e->activity_task_scheduled_event_attributes->activity_type->name
                         : NULL;
    if (!name || (nm && strcmp(nm, name) == 0)) n++;
  }
  return n;
}

static cJSON *query_progress(const char *wid) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "query", "-w", wid, "--type", "progress", NULL);
  cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
  free(out);
  free(err);
  return j;
}

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Poll the progress query until awaiting_approval names step (120 s). */
static void wait_approval(const char *wid, const char *step) {
  int64_t end = mono_ms() + 120000;
  while (mono_ms() < end) {
    cJSON *p = query_progress(wid);
    const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(p, "awaiting_approval"));
    int hit = a && strcmp(a, step) == 0;
    cJSON_Delete(p);
    if (hit) return;
    usleep(100 * 1000);
  }
  fail_msg("%s never waited for the approval of step %s", wid, step);
}

/* a, c (an at_most_once exec appending to runs.log), d; a checkpoint after each */
static const char *k_amo =
    "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1,\"on_completion\":true}},\"steps\":["
    "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
    "{\"name\":\"c\",\"kind\":\"exec\",\"command\":\"echo ran >> runs.log\",\"retry_class\":\"at_most_once\"},"
    "{\"name\":\"d\",\"kind\":\"write_file\",\"path\":\"d.txt\",\"content\":\"four\"}]}";

static cJSON *g_amo_src; /* dt-amo's summary */
static cJSON *g_amo_end; /* dt-amo-end's (the fork at the last checkpoint) */

static const cJSON *last_ckpt(const cJSON *res) {
  return ckpt_at(res, cJSON_GetArraySize(cJSON_GetObjectItem(res, "checkpoints")) - 1);
}

static void test_daytona_fork_restores_the_tree_and_never_reruns_at_most_once(void **state) {
  (void)state;
  start_script("dt-amo", k_amo);
  g_amo_src = result_of("dt-amo");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g_amo_src, "status")), "completed");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(g_amo_src, "checkpoints")), 4); /* baseline, a, c, d */
  const cJSON *ck1 = ckpt_at(g_amo_src, 1), *ckn = last_ckpt(g_amo_src);
  char *h0 = tree_hash(ref_of(ckpt_at(g_amo_src, 0))), *h1 = tree_hash(ref_of(ck1));
  assert_string_not_equal(h0, h1); /* a's file tells them apart */
  /* at a covered point (after a): c is live, so it waits for its approval */
  char *err = NULL, *out = fork_of("dt-amo", "dt-amo-cov", covered_of(ck1), NULL, &err);
  assert_null(strstr(err, "not covered"));
  wait_approval("dt-amo-cov", "c");
  free(out);
  free(err);
  out = NULL;
  err = NULL;
  int rc = durabox(&out, &err, "workflow", "signal", "-w", "dt-amo-cov", "--name", "durabox.approval", "--input",
                   "{\"step\":\"c\",\"decision\":\"grant\",\"by\":\"it\"}", NULL);
  assert_int_equal(rc, 0);
  cJSON *cov = result_of("dt-amo-cov");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cov, "status")), "completed");
  assert_true(from_record(cov, 0));
  assert_false(from_record(cov, 1));
  assert_false(from_record(cov, 2));
  assert_string_equal(ref_of(cJSON_GetObjectItem(cJSON_GetObjectItem(cov, "fork"), "checkpoint")), ref_of(ck1));
  /* the fork's baseline is its restored sandbox: exactly the checkpoint's files */
  char *hb = tree_hash(ref_of(ckpt_at(cov, 0)));
  assert_string_equal(hb, h1);
  char *runs = snapshot_file(ref_of(last_ckpt(cov)), "runs.log");
  assert_non_null(runs);
  assert_string_equal(runs, "ran\n"); /* c ran once, live, in the fork */
  free(runs);
  free(out);
  free(err);
  /* at the last checkpoint every step is recorded: c is never run again */
  err = NULL;
  out = fork_of("dt-amo", "dt-amo-end", covered_of(ckn), NULL, &err);
  g_amo_end = result_of("dt-amo-end"); /* no approval asked */
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(g_amo_end, "status")), "completed");
  for (int i = 0; i < 3; i++) assert_true(from_record(g_amo_end, i));
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "dt-amo-end", NULL, &h);
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.exec"), 0);
  assert_int_equal(count_of(&h, ET(MARKER_RECORDED), "durabox.fork_step"), 3);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  char *he = tree_hash(ref_of(ckpt_at(g_amo_end, 0))), *hn = tree_hash(ref_of(ckn));
  assert_string_equal(he, hn);
  runs = snapshot_file(ref_of(ckpt_at(g_amo_end, 0)), "runs.log");
  assert_non_null(runs);
  assert_string_equal(runs, "ran\n"); /* the source's one run, restored */
  free(runs);
  free(he);
  free(hn);
  free(hb);
  free(h0);
  free(h1);
  free(out);
  free(err);
  cJSON_Delete(cov);
}

static void test_daytona_fork_of_a_fork(void **state) {
  (void)state;
  assert_non_null(g_amo_end); /* made by the test before */
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "dt-amo-end", NULL, &h);
  long long at = (long long)h.n - 1;
  dbx_svct_history_cleanup(&h);
  char *err = NULL, *out = fork_of("dt-amo-end", "dt-amo-end-fork", at, NULL, &err);
  assert_null(strstr(err, "not covered"));
  cJSON *b = result_of("dt-amo-end-fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(b, "status")), "completed");
  for (int i = 0; i < 3; i++) assert_true(from_record(b, i));
  cJSON *fk = cJSON_GetObjectItem(b, "fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(fk, "source"), "workflow_id")),
                      "dt-amo-end");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(fk, "covered")));
  /* restored from one of dt-amo-end's own checkpoints */
  const char *ref = ref_of(cJSON_GetObjectItem(fk, "checkpoint"));
  int own = 0;
  for (int i = 0; i < cJSON_GetArraySize(cJSON_GetObjectItem(g_amo_end, "checkpoints")); i++)
    own |= ref && strcmp(ref, ref_of(ckpt_at(g_amo_end, i))) == 0;
  assert_true(own);
  char *hx = tree_hash(ref), *hy = tree_hash(ref_of(last_ckpt(g_amo_src)));
  assert_string_equal(hx, hy);
  dbx_svct_history_get(ch, "dt-amo-end-fork", NULL, &h);
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.exec"), 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(hx);
  free(hy);
  free(out);
  free(err);
  cJSON_Delete(b);
}


int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_fork_at_a_covered_point),
      cmocka_unit_test(test_daytona_failed_checkpoint_is_recorded_and_the_run_goes_on),
      cmocka_unit_test(test_daytona_fork_restores_the_tree_and_never_reruns_at_most_once),
      cmocka_unit_test(test_daytona_fork_of_a_fork),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  cJSON_Delete(g_amo_src);
  cJSON_Delete(g_amo_end);
  dbx_rpc_global_shutdown();
  return rc;
}
