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
#define FDX_PREFIX "itfd"
#include "tests/fork_daytona_fixture.h"

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
