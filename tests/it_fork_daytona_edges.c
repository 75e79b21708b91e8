/* Fork edge cases over Daytona (issue 12, "Fork"): `durabox dev --sandbox
 * daytona` against the fake Daytona server (tests/fakes/daytona), as in
 * it_fork_daytona.c (the local driver's are in it_fork.c):
 *  - a run that timed out forks with a fresh timeout measured from the
 *    fork's start (never an instant time-out), and the fork gets to work;
 *  - a snapshot gone from Daytona (the fake's /_control/snapshots/forget)
 *    fails the fork with ForkSnapshotMissing naming it and the source;
 *  - a point in the run's open last workflow task snaps to the last
 *    completed one (the CLI says so) and the fork, on the queue the Daytona
 *    worker serves (--task-queue), runs to completion. */
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
  g_dir = dbx_test_tmpdir("itfe-files");
  g_sdb = dbx_test_tmpdir("itfe-svc");
  g_wdb = dbx_test_tmpdir("itfe-wrk");
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

static int64_t ms_of(const HistoryEvent *e) {
  return e->event_time ? (int64_t)e->event_time->seconds * 1000 + e->event_time->nanos / 1000000 : 0;
}

/* The id of the first event of type whose activity (scheduled event) is act. */
static int64_t activity_event(dbx_svct_history *h, int type, const char *act) {
  for (size_t i = 0; i < h->n; i++) {
    const HistoryEvent *e = h->events[i];
    if ((int)e->event_type != type || type != ET(ACTIVITY_TASK_COMPLETED)) continue;
    int64_t sid = e->activity_task_completed_event_attributes->scheduled_event_id;
    const HistoryEvent *s = sid >= 1 && (size_t)sid <= h->n ? h->events[sid - 1] : NULL;
    if (s && s->activity_task_scheduled_event_attributes &&
        strcmp(s->activity_task_scheduled_event_attributes->activity_type->name, act) == 0)
      return e->event_id;
  }
  return 0;
}

#define DT_RUN_TIMEOUT_MS 8000

static void test_daytona_fork_of_timed_out_run_gets_a_fresh_timeout(void **state) {
  (void)state;
  dbx_client_opts co = {.address = g_addr};
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  const char *in = "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                   "{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":600}]}";
  dbx_client_start_opts so = {.workflow_id = "dt-to", .workflow_type = "durabox.Script", .task_queue = "durabox",
                              .input_json = in, .run_timeout_ms = DT_RUN_TIMEOUT_MS};
  char *run = NULL, *err = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &so, &run, &err), DBX_OK);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "dt-to", run, ET(WORKFLOW_EXECUTION_TIMED_OUT), 60000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-to", run, &h);
  long long at = activity_event(&h, ET(ACTIVITY_TASK_COMPLETED), "sandbox.write_file");
  dbx_svct_history_cleanup(&h);
  assert_true(at > 0);
  char *e = NULL, *out = fork_of("dt-to", "dt-to-fork", at, NULL, &e);
  assert_true(dbx_svct_history_wait_for(ch, "dt-to-fork", NULL, ET(WORKFLOW_EXECUTION_TIMED_OUT), 60000));
  dbx_svct_history_get(ch, "dt-to-fork", NULL, &h);
  const WorkflowExecutionStartedEventAttributes *sa = h.events[0]->workflow_execution_started_event_attributes;
  assert_int_equal(dbx_pb_duration_ms(sa->workflow_run_timeout), DT_RUN_TIMEOUT_MS);
  int64_t lived = ms_of(h.events[h.n - 1]) - ms_of(h.events[0]);
  assert_true(lived >= DT_RUN_TIMEOUT_MS - 500); /* measured from the fork's start */
  assert_int_equal(count_of(&h, ET(MARKER_RECORDED), "durabox.fork_step"), 1); /* it got to work first */
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.write_file"), 0);
  assert_true(count_of(&h, ET(TIMER_STARTED), NULL) > 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  free(run);
  free(err);
  dbx_client_destroy(c);
}

static void test_daytona_fork_with_a_missing_snapshot_fails_naming_it(void **state) {
  (void)state;
  start_script("dt-miss", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                          "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                          "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"b\",\"content\":\"y\"}]}");
  cJSON *res = result_of("dt-miss");
  const cJSON *ck = ckpt_at(res, 1);
  const char *ref = ref_of(ck);
  assert_non_null(ref);
  char *free_dir = snapshot_dir(ref); /* it is there, active */
  free(free_dir);
  char *body = dbx_asprintf("{\"name\":\"%s\"}", ref);
  char *r = dbx_fake_daytona_call(&g_fake, "POST", "/_control/snapshots/forget", body);
  assert_non_null(r);
  assert_non_null(strstr(r, ref));
  free(r);
  free(body);
  char *e = NULL, *out = fork_of("dt-miss", "dt-miss-fork", covered_of(ck), NULL, &e);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "dt-miss-fork", NULL, ET(WORKFLOW_EXECUTION_FAILED), 60000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-miss-fork", NULL, &h);
  const Failure *fl = h.events[h.n - 1]->workflow_execution_failed_event_attributes->failure;
  assert_non_null(fl);
  assert_non_null(strstr(fl->message, ref));
  assert_non_null(strstr(fl->message, "is missing"));
  assert_non_null(strstr(fl->message, "dt-miss"));
  assert_string_equal(fl->application_failure_info->type, "ForkSnapshotMissing");
  /* nothing after the point ran: b was to run live on the restored sandbox */
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.write_file"), 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  cJSON_Delete(res);
}

static void test_daytona_fork_at_an_open_task_snaps(void **state) {
  (void)state;
  /* a run whose one completed task started a timer, then a signal's task is
   * left open (no worker polls "dt-open") */
  char *f = dbx_asprintf("%s/dt-open.json", g_dir), *out = NULL, *err = NULL;
  dbx_svct_file_write(f, "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
                         "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"}]}");
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=dt-open", "--workflow-id",
                   "dt-open", "--input-file", f, NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, "dt-open", 10000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_start_timer(ch, t->task_token, "1", 3600);
  dbx_client_msg_free(t);
  rc = durabox(&out, &err, "workflow", "signal", "-w", "dt-open", "--name", "poke", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-open", NULL, &h);
  long long last = (long long)h.n, wtc = 0;
  for (size_t i = 0; i < h.n; i++)
    if (h.events[i]->event_type == ET(WORKFLOW_TASK_COMPLETED)) wtc = h.events[i]->event_id;
  assert_int_equal(h.events[h.n - 1]->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  assert_true(wtc > 0 && wtc < last);
  dbx_svct_history_cleanup(&h);
  /* the fork, on the queue the Daytona worker serves */
  err = NULL;
  out = fork_of("dt-open", "dt-open-fork", last, "durabox", &err);
  char *want = dbx_asprintf("forking at event %lld, the last completed workflow task", wtc);
  assert_non_null(strstr(err, "open workflow task"));
  assert_non_null(strstr(err, want));
  free(want);
  cJSON *res = result_of("dt-open-fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "completed");
  assert_false(from_record(res, 0)); /* nothing was recorded up to the point */
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_at(res, 1), "content")), "one");
  dbx_svct_history_get(ch, "dt-open-fork", NULL, &h);
  const WorkflowExecutionStartedEventAttributes *sa = h.events[0]->workflow_execution_started_event_attributes;
  assert_string_equal(sa->task_queue->name, "durabox");
  char *in = dbx_payloads_to_json(sa->input);
  cJSON *inj = cJSON_Parse(in);
  cJSON *fo = cJSON_GetObjectItem(inj, "fork_of");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(fo, "workflow_id")), "dt-open");
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(fo, "event_id")), wtc);
  cJSON_Delete(inj);
  free(in);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(err);
  out = err = NULL;
  rc = durabox(&out, &err, "workflow", "terminate", "-w", "dt-open", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  free(f);
  cJSON_Delete(res);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_fork_of_timed_out_run_gets_a_fresh_timeout),
      cmocka_unit_test(test_daytona_fork_with_a_missing_snapshot_fails_naming_it),
      cmocka_unit_test(test_daytona_fork_at_an_open_task_snaps),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  dbx_rpc_global_shutdown();
  return rc;
}
