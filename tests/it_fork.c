/* Integration test of checkpoints and forks (issue 12, "Checkpoints" and
 * "Fork"), through the durabox binary against a spawned `durabox dev` (the
 * embedded service and the C worker, real durabox.Script runs on the local
 * sandbox driver under a temporary DURABOX_HOME):
 *  - the checkpoint policy: a baseline, one per every_steps changing steps
 *    (reads do not count), one at completion when something changed since;
 *    names "ck-<run>-e<covered event>"; the snapshots on disk; the entries
 *    of the worker's checkpoint index; off by default;
 *  - fork at a covered point: the fork's restored tree hashes as the
 *    checkpoint's; recorded steps up to the point are markers, not runs; a
 *    live at_most_once step waits for its approval signal;
 *  - a fork never re-runs a recorded at_most_once step (its file has one line);
 *  - fork at an uncovered point warns naming the steps whose changes the
 *    sandbox lacks; a denied approval fails the step;
 *  - fork-points lists the covered intervals;
 *  - edge cases: a run with no completed workflow task is refused; a point in
 *    a run's open last workflow task snaps to the last completed one; a run
 *    that timed out forks with a fresh timeout from the fork's start; a
 *    missing snapshot fails the fork naming it; a fork of a fork. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/wstore.h"

#define CMD_TIMEOUT_MS 150000

static char *g_home, *g_env_home, *g_dir, *g_sdb, *g_wdb;
static char g_addr[64];
static int g_port;
static pid_t g_dev;

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
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", NULL};
  return dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, out, err);
}

static int setup(void **state) {
  (void)state;
  g_home = dbx_test_tmpdir("itfk-home");
  g_dir = dbx_test_tmpdir("itfk-files");
  g_sdb = dbx_test_tmpdir("itfk-svc");
  g_wdb = dbx_test_tmpdir("itfk-wrk");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s", g_home);
  g_port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", g_port);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", g_sdb,
                   "--worker-db", g_wdb, "--log-level", "warn", NULL};
  char *denv[] = {g_env_home, NULL};
  g_dev = dbx_svct_proc_spawn(dargv, denv, NULL, NULL);
  dbx_rpc_channel_destroy(dbx_svct_connect(g_port));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (g_dev > 0) { /* 0 when the setup failed before the spawn: kill(0) would signal our group */
    kill(g_dev, SIGTERM);
    dbx_svct_proc_wait(g_dev, 30000);
  }
  dbx_svct_proc_kill_all();
  dbx_test_rmrf(g_home);
  dbx_test_rmrf(g_dir);
  dbx_test_rmrf(g_sdb);
  dbx_test_rmrf(g_wdb);
  free(g_home);
  free(g_dir);
  free(g_sdb);
  free(g_wdb);
  free(g_env_home);
  return 0;
}

static char *file_of(const char *name, const char *text) {
  char *p = dbx_asprintf("%s/%s", g_dir, name);
  dbx_svct_file_write(p, text);
  return p;
}

/* Start a durabox.Script run of input; returns its run id (malloc'd). */
static char *start_script(const char *wid, const char *input) {
  char *f = file_of("input.json", input), *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=durabox",
                   "--workflow-id", wid, "--input-file", f, "--output", "json", NULL);
  if (rc != 0) fail_msg("start %s exited %d\n%s\n%s", wid, rc, out, err);
  cJSON *j = cJSON_Parse(out);
  char *run = dbx_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(j, "runId")));
  assert_non_null(run);
  cJSON_Delete(j);
  free(out);
  free(err);
  free(f);
  return run;
}

/* The close event of wid's latest run (`workflow result --output json`,
 * waiting for it), parsed; *rc its exit status. */
static cJSON *close_event(const char *wid, int *rc) {
  char *out = NULL, *err = NULL;
  *rc = durabox(&out, &err, "workflow", "result", "-w", wid, "--output", "json", NULL);
  char *last = out ? strrchr(out, '{') : NULL;
  (void)last;
  cJSON *j = cJSON_Parse(out);
  if (!j) fail_msg("result of %s is not JSON (exit %d):\n%s\n%s", wid, *rc, out, err);
  free(out);
  free(err);
  return j;
}

/* The Script summary a completed run of wid returned (the test fails otherwise). */
static cJSON *result_of(const char *wid) {
  int rc = 0;
  cJSON *ev = close_event(wid, &rc);
  cJSON *p = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "workflowExecutionCompletedEventAttributes"),
                                              "result"),
                          "payloads"),
      0);
  if (!p) {
    char *t = cJSON_PrintUnformatted(ev);
    fail_msg("%s did not complete (exit %d): %.3000s", wid, rc, t);
  }
  cJSON *r = cJSON_Duplicate(p, 1);
  cJSON_Delete(ev);
  return r;
}

static cJSON *progress_of(const char *wid) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "query", "-w", wid, "--type", "progress", NULL);
  cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
  free(out);
  free(err);
  return j;
}

/* Poll the progress query until awaiting_approval names step (60 s). */
static void wait_approval(const char *wid, const char *step) {
  for (int i = 0; i < 600; i++) {
    cJSON *p = progress_of(wid);
    const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(p, "awaiting_approval"));
    int hit = a && strcmp(a, step) == 0;
    cJSON_Delete(p);
    if (hit) return;
    usleep(100 * 1000);
  }
  fail_msg("%s never waited for the approval of step %s", wid, step);
}

static void signal_approval(const char *wid, const char *json) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "signal", "-w", wid, "--name", "durabox.approval", "--input",
                   json, NULL);
  if (rc != 0) fail_msg("signal exited %d: %s", rc, err);
  free(out);
  free(err);
}

/* sha256 of a tree's files (relative names and contents, sorted), as hex. */
static char *tree_hash(const char *dir) {
  char *cmd = dbx_asprintf("cd '%s' && find . -type f ! -path './.git/*' | LC_ALL=C sort | "
                           "while read -r f; do printf '%%s\\n' \"$f\"; cat \"$f\"; done | sha256sum",
                           dir);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL}, *out = NULL;
  int rc = dbx_svct_proc_run(argv, NULL, 30000, &out, NULL);
  assert_int_equal(rc, 0);
  free(cmd);
  char *sp = strchr(out, ' ');
  if (sp) *sp = '\0';
  return out;
}

static char *snap_dir(const char *ref) { return dbx_asprintf("%s/snapshots/%s", g_home, ref); }

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* The id of the n-th (0-based) event of type in wid's history whose detail
 * (activity type of a completion's scheduled event) is act, or of type alone
 * when act is NULL; 0 when none. */
static int64_t event_of(dbx_svct_history *h, int type, const char *act, int nth) {
  for (size_t i = 0; i < h->n; i++) {
    const HistoryEvent *e = h->events[i];
    if ((int)e->event_type != type) continue;
    if (act) {
      int64_t sid = type == ET(ACTIVITY_TASK_COMPLETED)
                        ? e->activity_task_completed_event_attributes->scheduled_event_id
                    : type == ET(ACTIVITY_TASK_SCHEDULED) ? e->event_id
                                                          : 0;
      const HistoryEvent *s = sid >= 1 && (size_t)sid <= h->n ? h->events[sid - 1] : NULL;
      if (!s || !s->activity_task_scheduled_event_attributes ||
          strcmp(s->activity_task_scheduled_event_attributes->activity_type->name, act) != 0)
        continue;
    }
    if (nth-- == 0) return e->event_id;
  }
  return 0;
}

static size_t count_activities(dbx_svct_history *h, const char *act) {
  size_t n = 0;
  while (event_of(h, ET(ACTIVITY_TASK_SCHEDULED), act, (int)n)) n++;
  return n;
}

static size_t count_markers(dbx_svct_history *h, const char *name) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++)
    if (h->events[i]->event_type == ET(MARKER_RECORDED) &&
        strcmp(h->events[i]->marker_recorded_event_attributes->marker_name, name) == 0)
      n++;
  return n;
}

static const char *step_field(const cJSON *res, int i, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(res, "steps"), i), k));
}

static int step_flag(const cJSON *res, int i, const char *k) {
  return cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(res, "steps"), i), k));
}

/* a, r (a read), b, c (at_most_once exec appending to runs.log), d, e */
static const char *k_src =
    "{\"sandbox\":{\"checkpoint\":{\"every_steps\":2,\"on_completion\":true}},\"steps\":["
    "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
    "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"},"
    "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"b.txt\",\"content\":\"two\"},"
    "{\"name\":\"c\",\"kind\":\"exec\",\"command\":\"echo ran >> runs.log\",\"retry_class\":\"at_most_once\"},"
    "{\"name\":\"d\",\"kind\":\"write_file\",\"path\":\"d.txt\",\"content\":\"four\"},"
    "{\"name\":\"e\",\"kind\":\"exec\",\"command\":\"echo five > e.txt\"}]}";

static char *g_src_run;   /* ck-src's run */
static cJSON *g_src_res;  /* its summary */

static const cJSON *ckpt_at(const cJSON *res, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(res, "checkpoints"), i);
}

static void need_source(void) {
  if (g_src_res) return;
  g_src_run = start_script("ck-src", k_src);
  g_src_res = result_of("ck-src");
}

static void test_checkpoint_policy(void **state) {
  (void)state;
  need_source();
  const cJSON *cks = cJSON_GetObjectItem(g_src_res, "checkpoints");
  assert_int_equal(cJSON_GetArraySize(cks), 4);
  static const char *const reasons[] = {"baseline", "every_steps", "every_steps", "completion"};
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "ck-src", g_src_run, &h);
  for (int i = 0; i < 4; i++) {
    const cJSON *c = ckpt_at(g_src_res, i);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(c, "reason")), reasons[i]);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")));
    long long cov = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "covered_event_id"));
    char *want = dbx_asprintf("ck-%s-e%lld", g_src_run, cov);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(c, "name")), want);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(c, "ref")), want);
    /* the covered event is a WorkflowTaskStarted */
    assert_true(cov >= 1 && (size_t)cov <= h.n);
    assert_int_equal(h.events[cov - 1]->event_type, ET(WORKFLOW_TASK_STARTED));
    char *d = snap_dir(want);
    assert_true(exists(d));
    free(d);
    free(want);
  }
  /* every_steps counts changes, not the read: after a and b, then c and d */
  char *d1 = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(g_src_res, 1), "ref")));
  char *p = dbx_asprintf("%s/b.txt", d1), *q = dbx_asprintf("%s/runs.log", d1);
  assert_true(exists(p));
  assert_false(exists(q));
  free(p);
  free(q);
  free(d1);
  char *d0 = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(g_src_res, 0), "ref")));
  p = dbx_asprintf("%s/a.txt", d0);
  assert_false(exists(p)); /* the baseline is the empty source */
  free(p);
  free(d0);
  char *d3 = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(g_src_res, 3), "ref")));
  p = dbx_asprintf("%s/e.txt", d3);
  assert_true(exists(p)); /* completion: after e */
  free(p);
  free(d3);
  assert_int_equal(count_activities(&h, "durabox.checkpoint"), 4);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  /* the worker's checkpoint index (LMDB is shared between processes) */
  dbx_wstore *ws = NULL;
  char *werr = NULL;
  assert_int_equal(dbx_wstore_open(g_wdb, 0, &ws, &werr), DBX_OK);
  for (int i = 0; i < 4; i++) {
    const cJSON *c = ckpt_at(g_src_res, i);
    char *key = dbx_asprintf("ck-src/%s/%020lld", g_src_run,
                             (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(c, "covered_event_id")));
    char *v = NULL;
    assert_int_equal(dbx_wstore_kv_get(ws, DBX_WSTORE_CHECKPOINTS, key, &v), DBX_OK);
    cJSON *vj = cJSON_Parse(v);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(vj, "ref")),
                        cJSON_GetStringValue(cJSON_GetObjectItem(c, "ref")));
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(vj, "driver")), "local");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(vj, "sandbox_id")),
                        cJSON_GetStringValue(cJSON_GetObjectItem(g_src_res, "sandbox_id")));
    cJSON_Delete(vj);
    free(v);
    free(key);
  }
  dbx_wstore_close(ws);
}

static void test_checkpoint_off_by_default(void **state) {
  (void)state;
  char *run = start_script("ck-off", "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\","
                                     "\"content\":\"x\"}]}");
  cJSON *res = result_of("ck-off");
  assert_null(cJSON_GetObjectItem(res, "checkpoints"));
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "ck-off", run, &h);
  assert_int_equal(count_activities(&h, "durabox.checkpoint"), 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  cJSON_Delete(res);
  free(run);
  /* a bad policy is refused before anything runs */
  char *f = file_of("bad.json", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":0}},\"steps\":[]}");
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "run", f, NULL);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err, "sandbox.checkpoint.every_steps"));
  free(out);
  free(err);
  free(f);
}

/* fork ck-src at --at; returns the CLI's stderr, *out its stdout. */
static char *fork_at(const char *wid, const char *new_id, long long at, char **out) {
  char at_s[32], *err = NULL;
  snprintf(at_s, sizeof at_s, "%lld", at);
  int rc = new_id ? durabox(out, &err, "workflow", "fork", "-w", wid, "--at", at_s, "--workflow-id-new", new_id, NULL)
                  : durabox(out, &err, "workflow", "fork", "-w", wid, "--at", at_s, NULL);
  if (rc != 0) fail_msg("fork %s at %lld exited %d\n%s\n%s", wid, at, rc, *out, err);
  return err;
}

static void test_fork_covered_restores_the_checkpoint(void **state) {
  (void)state;
  need_source();
  const cJSON *ck = ckpt_at(g_src_res, 1); /* after a and b */
  long long at = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id"));
  char *out = NULL, *err = fork_at("ck-src", "fk-cov", at, &out);
  assert_non_null(strstr(out, "started fk-cov run"));
  assert_null(strstr(err, "not covered"));
  /* c is at_most_once and after the point: it waits for an approval */
  wait_approval("fk-cov", "c");
  signal_approval("fk-cov", "{\"step\":\"other\",\"decision\":\"grant\"}"); /* not c's */
  cJSON *p = progress_of("fk-cov");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(p, "awaiting_approval")), "c");
  cJSON_Delete(p);
  /* the held step is where a person looks for it: durabox approval list|grant */
  char *lout = NULL, *lerr = NULL;
  int lrc = durabox(&lout, &lerr, "approval", "list", NULL);
  if (lrc != 0 || !strstr(lout, "workflow_id=fk-cov ") || !strstr(lout, "step 'c' at_most_once sandbox.exec") ||
      !strstr(lout, "waits without a timeout"))
    fail_msg("approval list exited %d\n%s\n%s", lrc, lout, lerr);
  free(lout);
  free(lerr);
  lrc = durabox(&lout, &lerr, "approval", "grant", "fk-cov", "--by", "it", NULL);
  if (lrc != 0 || !strstr(lout, "granted step 'c' (sandbox.exec) of fk-cov run "))
    fail_msg("approval grant exited %d\n%s\n%s", lrc, lout, lerr);
  free(lout);
  free(lerr);
  cJSON *res = result_of("fk-cov");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "completed");
  for (int i = 0; i < 3; i++) assert_true(step_flag(res, i, "from_record")); /* a, r, b */
  for (int i = 3; i < 6; i++) assert_false(step_flag(res, i, "from_record"));
  assert_string_equal(step_field(res, 1, "content"), "one"); /* the read's recorded result */
  cJSON *fk = cJSON_GetObjectItem(res, "fork");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(fk, "covered")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(fk, "checkpoint"), "ref")),
                      cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref")));
  /* the fork's baseline is its restored sandbox: the same tree as the checkpoint */
  char *a = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref")));
  char *b = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(res, 0), "ref")));
  char *ha = tree_hash(a), *hb = tree_hash(b);
  assert_string_equal(ha, hb);
  /* and the steps after the point ran on it: c once */
  char *last = snap_dir(cJSON_GetStringValue(
      cJSON_GetObjectItem(ckpt_at(res, cJSON_GetArraySize(cJSON_GetObjectItem(res, "checkpoints")) - 1), "ref")));
  char *runs = dbx_asprintf("%s/runs.log", last), *txt = dbx_svct_file_read(runs);
  assert_string_equal(txt, "ran\n");
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "fk-cov", NULL, &h);
  assert_int_equal(count_markers(&h, "durabox.fork_step"), 3);
  assert_int_equal(count_activities(&h, "sandbox.write_file"), 1); /* d only */
  /* the fork's first activity loads the source */
  assert_int_equal(event_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "durabox.fork_load", 0),
                   event_of(&h, ET(ACTIVITY_TASK_SCHEDULED), NULL, 0));
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  /* the fork replays deterministically against the current code */
  char *rout = NULL, *rerr = NULL;
  int rrc = durabox(&rout, &rerr, "replay", "--workflow-id", "fk-cov", NULL);
  if (rrc != 0 || strstr(rout, "deterministic: ") == NULL) fail_msg("replay exited %d\n%s\n%s", rrc, rout, rerr);
  free(rout);
  free(rerr);
  /* the source is unchanged */
  cJSON *again = result_of("ck-src");
  assert_true(cJSON_Compare(again, g_src_res, 1));
  cJSON_Delete(again);
  free(runs);
  free(txt);
  free(last);
  free(a);
  free(b);
  free(ha);
  free(hb);
  free(out);
  free(err);
  cJSON_Delete(res);
}

static void test_fork_never_reruns_a_recorded_at_most_once_step(void **state) {
  (void)state;
  need_source();
  const cJSON *ck = ckpt_at(g_src_res, 3); /* completion: every step recorded */
  long long at = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id"));
  char *out = NULL, *err = fork_at("ck-src", "fk-end", at, &out);
  cJSON *res = result_of("fk-end"); /* no approval asked: c is from the record */
  for (int i = 0; i < 6; i++) assert_true(step_flag(res, i, "from_record"));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "fork"), "checkpoint")
                                               ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "fork"), "checkpoint"), "ref")
                                               : NULL),
                      cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref")));
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "fk-end", NULL, &h);
  assert_int_equal(count_activities(&h, "sandbox.exec"), 0);
  assert_int_equal(count_markers(&h, "durabox.fork_step"), 6);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  char *base = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(res, 0), "ref")));
  char *runs = dbx_asprintf("%s/runs.log", base), *txt = dbx_svct_file_read(runs);
  assert_string_equal(txt, "ran\n"); /* the source's one run, restored */
  free(runs);
  free(txt);
  free(base);
  free(out);
  free(err);
  cJSON_Delete(res);
}

static void test_fork_uncovered_warns(void **state) {
  (void)state;
  need_source();
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "ck-src", g_src_run, &h);
  long long at = event_of(&h, ET(ACTIVITY_TASK_COMPLETED), "sandbox.write_file", 0); /* a done */
  dbx_svct_history_cleanup(&h);
  assert_true(at > 0);
  char *out = NULL, *err = fork_at("ck-src", "fk-unc", at, &out);
  assert_non_null(strstr(err, "is not covered by a checkpoint"));
  assert_non_null(strstr(err, "step 'a' (sandbox.write_file"));
  assert_null(strstr(err, "step 'b'"));
  cJSON *res = result_of("fk-unc");
  /* the read after the point runs live on the restored sandbox, which lacks
   * a's file: what the warning said */
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "failed_step")), "r");
  assert_non_null(strstr(step_field(res, 1, "error"), "FileNotFound"));
  assert_true(step_flag(res, 0, "from_record"));
  assert_false(step_flag(res, 1, "from_record"));
  cJSON *fk = cJSON_GetObjectItem(res, "fork");
  assert_false(cJSON_IsTrue(cJSON_GetObjectItem(fk, "covered")));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(fk, "uncovered_steps"), 0), "step")),
                      "a");
  /* the restored baseline lacks a's change, as the warning said */
  char *base = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(res, 0), "ref")));
  char *pa = dbx_asprintf("%s/a.txt", base);
  assert_false(exists(pa));
  free(pa);
  free(base);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(err);
  cJSON_Delete(res);
}

static void test_fork_denied_approval_fails_the_step(void **state) {
  (void)state;
  need_source();
  const cJSON *ck = ckpt_at(g_src_res, 1);
  long long at = (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id"));
  char *out = NULL, *err = fork_at("ck-src", "fk-deny", at, &out);
  wait_approval("fk-deny", "c");
  signal_approval("fk-deny", "{\"step\":\"c\",\"decision\":\"deny\",\"by\":\"it\",\"reason\":\"no\"}");
  cJSON *res = result_of("fk-deny");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "failed_step")), "c");
  assert_non_null(strstr(step_field(res, 3, "error"), "ApprovalDenied: denied by it: no"));
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "fk-deny", NULL, &h);
  assert_int_equal(count_activities(&h, "sandbox.exec"), 0); /* c never ran */
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(err);
  cJSON_Delete(res);
}

/* Two decisions on one held step at the same time: the run takes the first
 * in its history and ignores the other, so only the first may say it
 * succeeded. The fork runs on a queue of its own, served by a worker this
 * test stops (SIGSTOP) while a deny by bob reaches the run: the step stays
 * held in its memo, so alice's grant is sent, and must be told that bob's
 * deny came first. */
static void test_fork_approval_race_names_the_first_decision(void **state) {
  (void)state;
  need_source();
  char *wdb = dbx_test_tmpdir("itfk-race-wrk");
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", g_addr, "--task-queue", "fk-race-q",
                   "--db", wdb, "--log-level", "warn", NULL};
  char *wenv[] = {g_env_home, "TEMPORAL_ADDRESS", NULL};
  pid_t w = dbx_svct_proc_spawn(wargv, wenv, NULL, NULL);
  assert_true(w > 0);
  const cJSON *ck = ckpt_at(g_src_res, 1);
  char at[32], *out = NULL, *err = NULL;
  snprintf(at, sizeof at, "%lld", (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id")));
  int rc = durabox(&out, &err, "workflow", "fork", "-w", "ck-src", "--at", at, "--workflow-id-new", "fk-race",
                   "--task-queue", "fk-race-q", NULL);
  if (rc != 0) fail_msg("fork exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  wait_approval("fk-race", "c");
  assert_int_equal(kill(w, SIGSTOP), 0);
  signal_approval("fk-race", "{\"step\":\"c\",\"decision\":\"deny\",\"by\":\"bob\",\"reason\":\"first\"}");
  rc = durabox(&out, &err, "approval", "grant", "fk-race", "--by", "alice", NULL);
  if (rc != 1 || strstr(err, "step 'c' (sandbox.exec) of fk-race run ") == NULL ||
      strstr(err, "was already denied by bob: a decision sent at the same time came first, and this grant is "
                  "ignored") == NULL || strstr(out, "granted") != NULL)
    fail_msg("approval grant after bob's deny exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  assert_int_equal(kill(w, SIGCONT), 0);
  cJSON *res = result_of("fk-race");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "failed");
  assert_non_null(strstr(step_field(res, 3, "error"), "ApprovalDenied: denied by bob: first"));
  cJSON_Delete(res);
  kill(w, SIGTERM);
  assert_int_equal(dbx_svct_proc_wait(w, 30000), 0);
  dbx_test_rmrf(wdb);
  free(wdb);
}

/* A reset run replays the checkpoints before its point from the base run's
 * history: their names in its result are the names they were taken under
 * (the base run's id), the same as their refs and the snapshots on disk. */
static void test_reset_run_names_its_replayed_checkpoints_as_taken(void **state) {
  (void)state;
  char *base = start_script("ck-reset", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                                        "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                                        "{\"name\":\"nap\",\"kind\":\"sleep\",\"seconds\":2}]}");
  /* the baseline and the checkpoint after a are done, the timer is running */
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  int ready = 0;
  for (int i = 0; i < 600 && !ready; i++) {
    dbx_svct_history h;
    dbx_svct_history_get(ch, "ck-reset", base, &h);
    ready = event_of(&h, ET(ACTIVITY_TASK_COMPLETED), "durabox.checkpoint", 1) > 0 &&
            event_of(&h, ET(TIMER_STARTED), NULL, 0) > 0;
    dbx_svct_history_cleanup(&h);
    if (!ready) usleep(50 * 1000);
  }
  dbx_rpc_channel_destroy(ch);
  assert_true(ready);
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "reset", "-w", "ck-reset", "--type", "LastWorkflowTask", NULL);
  if (rc != 0) fail_msg("reset exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  cJSON *res = result_of("ck-reset");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(res, "checkpoints")), 2);
  for (int i = 0; i < 2; i++) {
    const cJSON *c = ckpt_at(res, i);
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
    const char *ref = cJSON_GetStringValue(cJSON_GetObjectItem(c, "ref"));
    assert_non_null(name);
    assert_non_null(ref);
    assert_string_equal(name, ref);
    char *want = dbx_asprintf("ck-%s-e", base);
    if (strncmp(name, want, strlen(want)) != 0) fail_msg("checkpoint %d is named %s, not after run %s", i, name, base);
    char *d = snap_dir(ref);
    assert_true(exists(d));
    free(d);
    free(want);
  }
  cJSON_Delete(res);
  free(base);
}

static void test_fork_points(void **state) {
  (void)state;
  need_source();
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "fork-points", "-w", "ck-src", "--output", "json", NULL);
  assert_int_equal(rc, 0);
  cJSON *j = cJSON_Parse(out);
  cJSON *iv = cJSON_GetObjectItem(j, "intervals");
  assert_int_equal(cJSON_GetArraySize(iv), 4);
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "ck-src", g_src_run, &h);
  cJSON *i0 = cJSON_GetArrayItem(iv, 0);
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(i0, "from")),
                   (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ckpt_at(g_src_res, 0), "covered_event_id")));
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(i0, "to")),
                   event_of(&h, ET(ACTIVITY_TASK_COMPLETED), "sandbox.write_file", 0) - 1);
  cJSON *i3 = cJSON_GetArrayItem(iv, 3);
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(i3, "to")), (long long)h.n);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  cJSON_Delete(j);
  free(out);
  free(err);
  rc = durabox(&out, &err, "workflow", "fork-points", "-w", "ck-src", NULL);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "4 checkpoints"));
  assert_non_null(strstr(out, "covered by checkpoint ck-"));
  free(out);
  free(err);
}

static void test_fork_refusals_and_open_task(void **state) {
  (void)state;
  /* a run no worker took: no completed workflow task */
  char *f = file_of("dead.json", k_src), *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=fork-dead",
                   "--workflow-id", "fk-dead", "--input-file", f, NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  rc = durabox(&out, &err, "workflow", "fork", "-w", "fk-dead", "--at", "2", NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "no completed workflow task"));
  free(out);
  free(err);
  need_source();
  rc = durabox(&out, &err, "workflow", "fork", "-w", "ck-src", "--at", "100000", NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "event 100000 is not in the run"));
  free(out);
  free(err);
  /* a completed task, then an open one (a signal's): the point snaps */
  rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=fork-open",
               "--workflow-id", "fk-open", "--input-file", f, NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, "fork-open", 10000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_start_timer(ch, t->task_token, "1", 3600);
  dbx_client_msg_free(t);
  rc = durabox(&out, &err, "workflow", "signal", "-w", "fk-open", "--name", "poke", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_svct_history h;
  dbx_svct_history_get(ch, "fk-open", NULL, &h);
  long long last = (long long)h.n, wtc = event_of(&h, ET(WORKFLOW_TASK_COMPLETED), NULL, 0);
  assert_int_equal(h.events[h.n - 1]->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  dbx_svct_history_cleanup(&h);
  char *e = fork_at("fk-open", "fk-open-fork", last, &out);
  char *want = dbx_asprintf("forking at event %lld, the last completed workflow task", wtc);
  assert_non_null(strstr(e, "open workflow task"));
  assert_non_null(strstr(e, want));
  char *atw = dbx_asprintf("at event %lld", wtc);
  assert_non_null(strstr(out, atw));
  free(atw);
  free(want);
  free(e);
  free(out);
  /* the fork's input is marked with the snapped point */
  dbx_svct_history_get(ch, "fk-open-fork", NULL, &h);
  char *in = dbx_payloads_to_json(h.events[0]->workflow_execution_started_event_attributes->input);
  cJSON *inj = cJSON_Parse(in);
  cJSON *fo = cJSON_GetObjectItem(inj, "fork_of");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(fo, "workflow_id")), "fk-open");
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(fo, "event_id")), wtc);
  cJSON_Delete(inj);
  free(in);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  static const char *const ends[] = {"fk-dead", "fk-open", "fk-open-fork"};
  for (int i = 0; i < 3; i++) {
    rc = durabox(&out, &err, "workflow", "terminate", "-w", ends[i], NULL);
    free(out);
    free(err);
  }
  free(f);
}

static int64_t ms_of(const HistoryEvent *e) {
  return e->event_time ? (int64_t)e->event_time->seconds * 1000 + e->event_time->nanos / 1000000 : 0;
}

static void test_fork_of_timed_out_run_gets_a_fresh_timeout(void **state) {
  (void)state;
  dbx_client_opts co = {.address = g_addr};
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  const char *in = "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                   "{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":600}]}";
  dbx_client_start_opts so = {.workflow_id = "fk-to", .workflow_type = "durabox.Script", .task_queue = "durabox",
                              .input_json = in, .run_timeout_ms = 3000};
  char *run = NULL, *err = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &so, &run, &err), DBX_OK);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "fk-to", run, ET(WORKFLOW_EXECUTION_TIMED_OUT), 30000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "fk-to", run, &h);
  long long at = event_of(&h, ET(ACTIVITY_TASK_COMPLETED), "sandbox.write_file", 0);
  dbx_svct_history_cleanup(&h);
  assert_true(at > 0);
  char *out = NULL, *e = fork_at("fk-to", "fk-to-fork", at, &out);
  assert_true(dbx_svct_history_wait_for(ch, "fk-to-fork", NULL, ET(WORKFLOW_EXECUTION_TIMED_OUT), 30000));
  dbx_svct_history_get(ch, "fk-to-fork", NULL, &h);
  const WorkflowExecutionStartedEventAttributes *sa = h.events[0]->workflow_execution_started_event_attributes;
  assert_int_equal(dbx_pb_duration_ms(sa->workflow_run_timeout), 3000);
  int64_t lived = ms_of(h.events[h.n - 1]) - ms_of(h.events[0]);
  assert_true(lived >= 2500); /* measured from the fork's start, not the source's */
  assert_int_equal(count_markers(&h, "durabox.fork_step"), 1); /* it got to work first */
  assert_true(event_of(&h, ET(TIMER_STARTED), NULL, 0) > 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  free(run);
  free(err);
  dbx_client_destroy(c);
}

static void test_fork_with_a_missing_snapshot_fails_naming_it(void **state) {
  (void)state;
  const char *in = "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                   "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                   "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"b\",\"content\":\"y\"}]}";
  char *run = start_script("fk-miss", in);
  cJSON *res = result_of("fk-miss");
  const cJSON *ck = ckpt_at(res, 1);
  const char *ref = cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref"));
  char *d = snap_dir(ref);
  dbx_test_rmrf(d);
  assert_false(exists(d));
  char *out = NULL, *e = fork_at("fk-miss", "fk-miss-fork", (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id")), &out);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "fk-miss-fork", NULL, ET(WORKFLOW_EXECUTION_FAILED), 30000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "fk-miss-fork", NULL, &h);
  const Failure *fl = h.events[h.n - 1]->workflow_execution_failed_event_attributes->failure;
  assert_non_null(fl);
  assert_non_null(strstr(fl->message, ref));
  assert_non_null(strstr(fl->message, "is missing"));
  assert_string_equal(fl->application_failure_info->type, "ForkSnapshotMissing");
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(d);
  free(out);
  free(e);
  free(run);
  cJSON_Delete(res);
}

static void test_fork_of_a_fork(void **state) {
  (void)state;
  need_source();
  /* fk-end (every step from the record) has its own checkpoints: fork it */
  cJSON *a = result_of("fk-end");
  const cJSON *ck = ckpt_at(a, 0);
  assert_non_null(ck);
  dbx_svct_history h;
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  dbx_svct_history_get(ch, "fk-end", NULL, &h);
  long long at = (long long)h.n - 1;
  dbx_svct_history_cleanup(&h);
  char *out = NULL, *e = fork_at("fk-end", "fk-end-fork", at, &out);
  assert_null(strstr(e, "not covered"));
  cJSON *b = result_of("fk-end-fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(b, "status")), "completed");
  for (int i = 0; i < 6; i++) assert_true(step_flag(b, i, "from_record"));
  cJSON *fk = cJSON_GetObjectItem(b, "fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(fk, "source"), "workflow_id")),
                      "fk-end");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(fk, "covered")));
  const char *ref = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(fk, "checkpoint"), "ref"));
  char *want = dbx_asprintf("ck-%s", "");
  assert_non_null(ref);
  assert_non_null(strstr(ref, want));
  /* restored from fk-end's own checkpoint: same tree as ck-src's completion */
  char *x = snap_dir(ref), *y = snap_dir(cJSON_GetStringValue(cJSON_GetObjectItem(ckpt_at(g_src_res, 3), "ref")));
  char *hx = tree_hash(x), *hy = tree_hash(y);
  assert_string_equal(hx, hy);
  free(hx);
  free(hy);
  free(x);
  free(y);
  free(want);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  cJSON_Delete(a);
  cJSON_Delete(b);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checkpoint_policy),
      cmocka_unit_test(test_checkpoint_off_by_default),
      cmocka_unit_test(test_fork_covered_restores_the_checkpoint),
      cmocka_unit_test(test_fork_never_reruns_a_recorded_at_most_once_step),
      cmocka_unit_test(test_fork_uncovered_warns),
      cmocka_unit_test(test_fork_denied_approval_fails_the_step),
      cmocka_unit_test(test_fork_approval_race_names_the_first_decision),
      cmocka_unit_test(test_reset_run_names_its_replayed_checkpoints_as_taken),
      cmocka_unit_test(test_fork_points),
      cmocka_unit_test(test_fork_refusals_and_open_task),
      cmocka_unit_test(test_fork_of_timed_out_run_gets_a_fresh_timeout),
      cmocka_unit_test(test_fork_with_a_missing_snapshot_fails_naming_it),
      cmocka_unit_test(test_fork_of_a_fork),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  cJSON_Delete(g_src_res);
  free(g_src_run);
  dbx_rpc_global_shutdown();
  return rc;
}
