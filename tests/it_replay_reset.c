/* Integration test of `durabox workflow reset`, `workflow show --output json`
 * (Temporal's JSON history) and `durabox replay` (issue 12, "Reset and
 * replay"), through the binary against a spawned `durabox dev` (embedded
 * service and the C worker, real durabox.Script runs on the local sandbox):
 *  - export -> replay --history passes, so does replay from the service
 *    (--address, every page) and the raw-payload export, and a history
 *    rewritten the way other exporters write it (short enum names, ids as
 *    numbers);
 *  - a history whose activity type was changed reports nondeterminism at
 *    that event's id, exit 1;
 *  - a run longer than one history page (the service's 1000 events) exports
 *    whole and replays;
 *  - reset by --type FirstWorkflowTask and by --event-id: a new run of the
 *    same workflow id that the worker runs to completion;
 *  - a signal after the reset point is re-applied with its request id, so
 *    resending it to the new run is deduplicated;
 *  - reset --type LastContinuedAsNew (driven by hand on a queue of its
 *    own): the base is the run that continued as new into the current one,
 *    at its last completed workflow task; the current run is terminated and
 *    its signals re-applied to the new run, a resent one still a duplicate;
 *    --type LastWorkflowTask: the last completed task, a later signal
 *    re-applied and deduplicated; --type FirstWorkflowTask of a run whose
 *    first task never completed resets to its WorkflowTaskStarted;
 *  - a hand-made history in Temporal CLI's style and one written by
 *    Temporal's Python SDK (tests/data) replay;
 *  - bad history files exit 2 with a message naming the problem. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tests/svc_client.h"
#include "worker/client.h"

#define CMD_TIMEOUT_MS 150000

static char *g_home, *g_env_home, *g_dir, *g_sdb, *g_wdb;
static char g_addr[64];
static pid_t g_dev;

static int durabox(char **out, char **err, ...) {
  char *argv[32];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 31) argv[k++] = (char *)a;
  va_end(ap);
  argv[k] = NULL;
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", "DURABOX_WORKER_DB", NULL};
  return dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, out, err);
}

static char *path_of(const char *name) {
  size_t n = strlen(g_dir) + strlen(name) + 2;
  char *p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", g_dir, name);
  return p;
}

static char *file_of(const char *name, const char *text) {
  char *p = path_of(name);
  dbx_svct_file_write(p, text);
  return p;
}

static int setup(void **state) {
  (void)state;
  g_home = dbx_test_tmpdir("itrr-home");
  g_dir = dbx_test_tmpdir("itrr-files");
  g_sdb = dbx_test_tmpdir("itrr-svc");
  g_wdb = dbx_test_tmpdir("itrr-wrk");
  size_t n = strlen(g_home) + 16;
  g_env_home = malloc(n);
  snprintf(g_env_home, n, "DURABOX_HOME=%s", g_home);
  int port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", port);
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", g_sdb,
                   "--worker-db", g_wdb, "--log-level", "warn", NULL};
  char *denv[] = {g_env_home, NULL};
  g_dev = dbx_svct_proc_spawn(dargv, denv, NULL, NULL);
  dbx_rpc_channel_destroy(dbx_svct_connect(port));
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

/* Start a durabox.Script run of input and wait for its result (exit 0). */
static void run_script(const char *wid, const char *input) {
  char *f = file_of("input.json", input), *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "execute", "--type=durabox.Script", "--task-queue=durabox",
                   "--workflow-id", wid, "--input-file", f, "--pickup-timeout", "120", "--address", g_addr, NULL);
  if (rc != 0) fail_msg("execute %s exited %d\n%s\n%s", wid, rc, out, err);
  free(out);
  free(err);
  free(f);
}

/* `workflow show --output json` of wid (extra: one more flag or NULL) into
 * file name; returns the parsed document. */
static cJSON *export_to(const char *wid, const char *run, const char *extra, const char *name) {
  char *out = NULL, *err = NULL;
  int rc = run ? durabox(&out, &err, "workflow", "show", "-w", wid, "-r", run, "--output", "json", "--address", g_addr,
                         NULL)
               : durabox(&out, &err, "workflow", "show", "-w", wid, "--output", "json", "--address", g_addr, extra,
                         NULL);
  if (rc != 0) fail_msg("show exited %d: %s", rc, err);
  char *p = file_of(name, out);
  free(p);
  cJSON *j = cJSON_Parse(out);
  if (j == NULL) fail_msg("show --output json is not one JSON document:\n%.2000s", out);
  free(out);
  free(err);
  return j;
}

static void write_json(const char *name, const cJSON *j) {
  char *t = cJSON_Print(j), *p = file_of(name, t);
  free(t);
  free(p);
}

/* Run `replay --history name`; returns the exit status, *out its stdout. */
static int replay_file(const char *name, char **out, char **err) {
  char *p = path_of(name);
  int rc = durabox(out, err, "replay", "--history", p, NULL);
  free(p);
  return rc;
}

static const char *k_two_steps =
    "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
    "{\"name\":\"b\",\"kind\":\"exec\",\"command\":\"cat a.txt\"}]}";

static void test_export_and_replay(void **state) {
  (void)state;
  run_script("rr-export", k_two_steps);
  cJSON *doc = export_to("rr-export", NULL, NULL, "h.json");
  cJSON *evs = cJSON_GetObjectItem(doc, "events");
  assert_true(cJSON_IsArray(evs));
  assert_true(cJSON_GetArraySize(evs) > 10);
  cJSON *e0 = cJSON_GetArrayItem(evs, 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e0, "eventId")), "1");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e0, "eventType")),
                      "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED");
  cJSON *wt = cJSON_GetObjectItem(cJSON_GetObjectItem(e0, "workflowExecutionStartedEventAttributes"), "workflowType");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(wt, "name")), "durabox.Script");
  char *out = NULL, *err = NULL;
  int rc = replay_file("h.json", &out, &err);
  if (rc != 0 || strstr(out, "deterministic: ") == NULL) fail_msg("replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* from the service */
  rc = durabox(&out, &err, "replay", "--workflow-id", "rr-export", "--address", g_addr, NULL);
  if (rc != 0 || strstr(out, "deterministic: ") == NULL) fail_msg("replay from service exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* raw payloads: {"metadata": {"encoding": base64}, "data": base64} */
  cJSON *raw = export_to("rr-export", NULL, "--no-json-shorthand-payloads", "raw.json");
  cJSON *in = cJSON_GetObjectItem(
      cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(raw, "events"), 0), "workflowExecutionStartedEventAttributes"),
      "input");
  cJSON *p0 = cJSON_GetArrayItem(cJSON_GetObjectItem(in, "payloads"), 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(p0, "metadata"), "encoding")),
                      "anNvbi9wbGFpbg==");
  assert_true(cJSON_IsString(cJSON_GetObjectItem(p0, "data")));
  cJSON_Delete(raw);
  rc = replay_file("raw.json", &out, &err);
  if (rc != 0) fail_msg("raw replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* as other exporters write it: short enum names, ids as numbers */
  cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(e, "eventType"));
    char shortname[128];
    snprintf(shortname, sizeof shortname, "%s", t + strlen("EVENT_TYPE_"));
    cJSON_ReplaceItemInObject(e, "eventType", cJSON_CreateString(shortname));
    double id = atof(cJSON_GetStringValue(cJSON_GetObjectItem(e, "eventId")));
    cJSON_ReplaceItemInObject(e, "eventId", cJSON_CreateNumber(id));
  }
  write_json("other.json", doc);
  rc = replay_file("other.json", &out, &err);
  if (rc != 0) fail_msg("rewritten history replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* tampered: the exec step's activity type changed */
  long tampered = 0;
  cJSON_ArrayForEach(e, evs) {
    cJSON *a = cJSON_GetObjectItem(e, "activityTaskScheduledEventAttributes");
    cJSON *at = a ? cJSON_GetObjectItem(a, "activityType") : NULL;
    if (at && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(at, "name")), "sandbox.exec") == 0) {
      cJSON_ReplaceItemInObject(at, "name", cJSON_CreateString("sandbox.exec_changed"));
      tampered = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "eventId"));
      break;
    }
  }
  assert_true(tampered > 0);
  write_json("tampered.json", doc);
  rc = replay_file("tampered.json", &out, &err);
  assert_int_equal(rc, 1);
  char want[64];
  snprintf(want, sizeof want, "nondeterminism at event %ld:", tampered);
  if (strstr(out, want) == NULL) fail_msg("tampered replay does not say '%s':\n%s", want, out);
  free(out);
  free(err);
  cJSON_Delete(doc);
}

static void test_bad_history_files(void **state) {
  (void)state;
  static const struct {
    const char *text, *says;
  } cases[] = {
      {"not json at all", "not valid JSON (near byte 0)"},
      {"{\"foo\": 1}", "expected an object {\"events\": [...]}"},
      {"{\"events\": []}", "the history has no events"},
      {"{\"events\": [{\"eventId\": \"x1\"}]}", "events[0].eventId: expected a 64-bit integer"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"NO_SUCH_TYPE\"}]}", "events[0].eventType: not a value"},
      {"{\"events\": [{\"eventId\": \"2\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {}}]}",
       "events[0]: eventId is 2, expected 1"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_TIMER_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {}}]}",
       "not those of its eventType"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"eventTime\": \"yesterday\", \"workflowExecutionStartedEventAttributes\": {}}]}",
       "events[0].eventTime: not an RFC 3339 time"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {\"input\": {\"payloads\": [{\"data\": \"%%%\"}]}}}]}",
       "events[0].workflowExecutionStartedEventAttributes.input.payloads[0].data: not valid base64"},
      /* numbers: a lone '-', hex or spaces in a string, beyond a type's range */
      {"{\"events\": [{\"eventId\": \"1\", \"taskId\": \"-\"}]}", "events[0].taskId: expected a 64-bit integer"},
      {"{\"events\": [{\"eventId\": \"1\", \"taskId\": 1e20}]}", "events[0].taskId: expected a 64-bit integer"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {\"attempt\": \"0x10\"}}]}",
       "events[0].workflowExecutionStartedEventAttributes.attempt: expected a 32-bit integer"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {\"attempt\": 8.9e19}}]}",
       "events[0].workflowExecutionStartedEventAttributes.attempt: expected a 32-bit integer"},
      {"{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
       "\"workflowExecutionStartedEventAttributes\": {\"priority\": {\"fairnessWeight\": 1e39}}}]}",
       "priority.fairnessWeight: number out of range for a float"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *p = file_of("bad.json", cases[i].text), *out = NULL, *err = NULL;
    int rc = durabox(&out, &err, "replay", "--history", p, NULL);
    if (rc != 2 || strstr(err, cases[i].says) == NULL || strstr(err, p) == NULL)
      fail_msg("case %zu: exit %d, stderr '%s' (want 2 and '%s')", i, rc, err, cases[i].says);
    free(out);
    free(err);
    free(p);
  }
  /* the largest float as Go's protojson writes it (above FLT_MAX, rounds to it) loads */
  free(file_of("maxfloat.json",
                "{\"events\": [{\"eventId\": \"1\", \"eventType\": \"EVENT_TYPE_WORKFLOW_EXECUTION_STARTED\", "
                "\"workflowExecutionStartedEventAttributes\": {\"workflowType\": {\"name\": \"durabox.Script\"}, "
                "\"attempt\": \"7\", \"priority\": {\"fairnessWeight\": 3.4028235e38}}}]}"));
  char *fo = NULL, *fe = NULL;
  int frc = replay_file("maxfloat.json", &fo, &fe);
  if (frc != 0 || strstr(fo, "deterministic: 1 events") == NULL)
    fail_msg("max float history: exit %d\n%s\n%s", frc, fo, fe);
  free(fo);
  free(fe);
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "replay", "--history", "/nonexistent/h.json", NULL);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(err, "cannot read /nonexistent/h.json"));
  free(out);
  free(err);
}

static void test_long_history_pages(void **state) {
  (void)state;
  /* 180 write_file steps: 6 events a step, more than one 1000-event page */
  size_t cap = 64 + 180 * 96;
  char *in = malloc(cap);
  assert_non_null(in);
  size_t k = (size_t)snprintf(in, cap, "{\"steps\":[");
  for (int i = 0; i < 180; i++)
    k += (size_t)snprintf(in + k, cap - k, "%s{\"name\":\"s%d\",\"kind\":\"write_file\",\"path\":\"f%d\",\"content\":\"x\"}",
                          i ? "," : "", i, i);
  snprintf(in + k, cap - k, "]}");
  run_script("rr-long", in);
  free(in);
  cJSON *doc = export_to("rr-long", NULL, NULL, "long.json");
  int n = cJSON_GetArraySize(cJSON_GetObjectItem(doc, "events"));
  if (n <= 1000) fail_msg("only %d events", n);
  cJSON *last = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "events"), n - 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(last, "eventType")),
                      "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED");
  cJSON_Delete(doc);
  char *out = NULL, *err = NULL;
  int rc = replay_file("long.json", &out, &err);
  if (rc != 0) fail_msg("long replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  rc = durabox(&out, &err, "replay", "-w", "rr-long", "--address", g_addr, NULL);
  if (rc != 0) fail_msg("long replay from the service exited %d\n%s\n%s", rc, out, err);
  char want[64];
  snprintf(want, sizeof want, "deterministic: %d events", n);
  if (strstr(out, want) == NULL) fail_msg("want '%s':\n%s", want, out);
  free(out);
  free(err);
}

/* The history of run of wid as events, with the reset's marks checked:
 * WorkflowTaskFailed RESET_WORKFLOW and a completed close event. */
static void assert_reset_run_completed(const char *wid, const char *run) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "result", "-w", wid, "-r", run, "--address", g_addr, NULL);
  if (rc != 0) fail_msg("result of the reset run exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  cJSON *doc = export_to(wid, run, NULL, "reset.json");
  cJSON *e;
  int failed_reset = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "events")) {
    cJSON *f = cJSON_GetObjectItem(e, "workflowTaskFailedEventAttributes");
    if (f && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(f, "cause")),
                    "WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW") == 0)
      failed_reset = 1;
  }
  assert_true(failed_reset);
  cJSON_Delete(doc);
  rc = replay_file("reset.json", &out, &err);
  if (rc != 0) fail_msg("replay of the reset run exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
}

static void test_reset(void **state) {
  (void)state;
  run_script("rr-reset", k_two_steps);
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-reset", "--type", "FirstWorkflowTask", "--reason",
                   "try again", "--output", "json", "--address", g_addr, NULL);
  if (rc != 0) fail_msg("reset exited %d\n%s\n%s", rc, out, err);
  cJSON *j = cJSON_Parse(out);
  const char *run = cJSON_GetStringValue(cJSON_GetObjectItem(j, "runId"));
  if (run == NULL || strlen(run) < 8) fail_msg("no runId in %s", out);
  assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "eventId")), 4); /* first WorkflowTaskCompleted */
  char *run1 = strdup(run);
  cJSON_Delete(j);
  free(out);
  free(err);
  assert_reset_run_completed("rr-reset", run1);
  /* by event id: the last workflow task of the new run, text output */
  cJSON *doc = export_to("rr-reset", run1, NULL, "r1.json");
  long last_wtc = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "events")) {
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "eventType")), "EVENT_TYPE_WORKFLOW_TASK_COMPLETED") == 0)
      last_wtc = atol(cJSON_GetStringValue(cJSON_GetObjectItem(e, "eventId")));
  }
  cJSON_Delete(doc);
  assert_true(last_wtc > 4);
  char ev[32];
  snprintf(ev, sizeof ev, "%ld", last_wtc);
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-reset", "--event-id", ev, "--address", g_addr, NULL);
  if (rc != 0) fail_msg("reset --event-id exited %d\n%s\n%s", rc, out, err);
  const char *p = strstr(out, "new run ");
  if (p == NULL) fail_msg("no new run in: %s", out);
  char run2[64];
  snprintf(run2, sizeof run2, "%.*s", (int)strcspn(p + 8, "\n"), p + 8);
  assert_string_not_equal(run2, run1);
  free(out);
  free(err);
  assert_reset_run_completed("rr-reset", run2);
  /* usage errors */
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-reset", "--address", g_addr, NULL);
  assert_int_equal(rc, 2);
  assert_non_null(strstr(err, "give one of --event-id"));
  free(out);
  free(err);
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-reset", "--type", "Middle", "--address", g_addr, NULL);
  assert_int_equal(rc, 2);
  free(out);
  free(err);
  /* a reset point that is no workflow task event: the service's message */
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-reset", "--event-id", "1", "--address", g_addr, NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "out of range"));
  free(out);
  free(err);
  free(run1);
}

/* SignalWorkflowExecution of the latest run of wid with request id req. */
static void signal_req(dbx_rpc_channel *ch, const char *wid, const char *req) {
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wid;
  SignalWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.signal_name = "poke";
  q.request_id = (char *)req;
  q.identity = "it_replay_reset";
  assert_int_equal(dbx_svct_call(ch, "SignalWorkflowExecution", &q.base, &SignalWorkflowExecutionResponse__D, 10000,
                                 NULL, NULL),
                   DBX_GRPC_OK);
}

/* A signal after the reset point is re-applied to the new run with its
 * request id: sending it again (same id) adds nothing, a new id does. */
static void test_reset_reapplies_signals_deduplicated(void **state) {
  (void)state;
  char *f = file_of("sleep.json", "{\"steps\":[{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":600}]}");
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=durabox", "-w", "rr-sig",
                   "--input-file", f, "--address", g_addr, NULL);
  if (rc != 0) fail_msg("start exited %d: %s", rc, err);
  free(out);
  free(err);
  free(f);
  dbx_rpc_channel *ch = dbx_svct_connect(atoi(strchr(g_addr, ':') + 1));
  assert_true(dbx_svct_history_wait_for(ch, "rr-sig", NULL, ET(TIMER_STARTED), 60000));
  signal_req(ch, "rr-sig", "req-one");
  signal_req(ch, "rr-sig", "req-one"); /* a resend: deduplicated */
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-sig", "--type", "FirstWorkflowTask", "--output", "json",
               "--address", g_addr, NULL);
  if (rc != 0) fail_msg("reset exited %d\n%s\n%s", rc, out, err);
  cJSON *j = cJSON_Parse(out);
  char *run = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(j, "runId")));
  cJSON_Delete(j);
  free(out);
  free(err);
  signal_req(ch, "rr-sig", "req-one"); /* the new run knows this id */
  signal_req(ch, "rr-sig", "req-two");
  /* the worker takes the new run up again: its timer is started anew. A
   * signal that came while that workflow task was running is buffered and
   * enters history only when the task completes (Temporal's rule), so the
   * count is read once no workflow task is pending. */
  assert_true(dbx_svct_history_wait_for(ch, "rr-sig", run, ET(TIMER_STARTED), 60000));
  dbx_svct_history h = {0};
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  for (;;) {
    dbx_svct_history_get(ch, "rr-sig", run, &h);
    /* settled: every workflow task scheduled has closed, so no signal is
     * buffered behind one (every signal sent above is in history by now) */
    size_t open = dbx_svct_history_count(&h, ET(WORKFLOW_TASK_SCHEDULED)) -
                  dbx_svct_history_count(&h, ET(WORKFLOW_TASK_COMPLETED)) -
                  dbx_svct_history_count(&h, ET(WORKFLOW_TASK_FAILED)) -
                  dbx_svct_history_count(&h, ET(WORKFLOW_TASK_TIMED_OUT));
    int settled = open == 0 && dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)) >= 2;
    if (settled || dbx_mono_ns() > deadline) break;
    dbx_svct_history_cleanup(&h);
    usleep(50 * 1000);
  }
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 2);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_TASK_FAILED)), 1);
  dbx_svct_history_cleanup(&h);
  rc = durabox(&out, &err, "workflow", "terminate", "-w", "rr-sig", "--address", g_addr, NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  free(run);
  dbx_rpc_channel_destroy(ch);
}

/* ---------------------------------------- reset by --type, driven by hand */

/* RespondWorkflowTaskCompleted with one ContinueAsNewWorkflowExecution of
 * type it.Can on queue tq. */
static void wft_continue_as_new(dbx_rpc_channel *ch, ProtobufCBinaryData token, const char *tq) {
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ContinueAsNewWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__CONTINUE_AS_NEW_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue q = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Can";
  q.name = (char *)tq;
  a.workflow_type = &wt;
  a.task_queue = &q;
  cmd.command_type = CT(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
  cmd.attributes_case = CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
  cmd.continue_as_new_workflow_execution_command_attributes = &a;
  RespondWorkflowTaskCompletedRequest r =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {&cmd};
  r.namespace_ = "default";
  r.task_token = token;
  r.commands = cmds;
  r.n_commands = 1;
  r.identity = "it_replay_reset";
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &r.base, NULL, 10000, NULL, &raw);
  if (st != DBX_GRPC_OK) fail_msg("continue-as-new: status %d %s", st, raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
}

/* Poll queue tq for a workflow task (the service has one ready); the run id
 * it is for into run (cap bytes); returns the response. */
static PollWorkflowTaskQueueResponse *poll_task(dbx_rpc_channel *ch, const char *tq, char *run, size_t cap) {
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, tq, 10000);
  if (t == NULL || t->task_token.len == 0 || t->workflow_execution == NULL) fail_msg("no workflow task on %s", tq);
  snprintf(run, cap, "%s", t->workflow_execution->run_id);
  return t;
}

/* `workflow reset -w wid --type type --output json`: the new run id (into
 * run) and the event the CLI reset to. */
static long reset_by_type(const char *wid, const char *type, char *run, size_t cap) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "reset", "-w", wid, "--type", type, "--output", "json", "--address",
                   g_addr, NULL);
  if (rc != 0) fail_msg("reset --type %s exited %d\n%s\n%s", type, rc, out, err);
  cJSON *j = cJSON_Parse(out);
  const char *r = cJSON_GetStringValue(cJSON_GetObjectItem(j, "runId"));
  if (r == NULL || strlen(r) < 8) fail_msg("no runId in %s", out);
  snprintf(run, cap, "%s", r);
  long ev = (long)cJSON_GetNumberValue(cJSON_GetObjectItem(j, "eventId"));
  cJSON_Delete(j);
  free(out);
  free(err);
  return ev;
}

static int run_status(dbx_rpc_channel *ch, const char *wid, const char *run) {
  dbx_svct_history h = {0};
  dbx_svct_history_get(ch, wid, run, &h);
  int t = h.n ? (int)h.events[h.n - 1]->event_type : 0;
  dbx_svct_history_cleanup(&h);
  return t;
}

static size_t signals_in(dbx_rpc_channel *ch, const char *wid, const char *run) {
  dbx_svct_history h = {0};
  dbx_svct_history_get(ch, wid, run, &h);
  size_t n = dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED));
  dbx_svct_history_cleanup(&h);
  return n;
}

/* --type LastContinuedAsNew (Temporal's CLI): the base is the run that
 * continued as new into the current one, at its last completed workflow
 * task; the current run is terminated, the signals it received are
 * re-applied to the new run with their request ids. */
static void test_reset_last_continued_as_new(void **state) {
  (void)state;
  char *out = NULL, *err = NULL, run1[64], run2[64], run3[64], polled[64];
  int rc = durabox(&out, &err, "workflow", "start", "--type=it.Can", "--task-queue=rr-can", "-w", "rr-can",
                   "--address", g_addr, NULL);
  if (rc != 0) fail_msg("start exited %d: %s", rc, err);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(atoi(strchr(g_addr, ':') + 1));
  /* a run that is not a continuation has no such point */
  rc = durabox(&out, &err, "workflow", "reset", "-w", "rr-can", "--type", "LastContinuedAsNew", "--address", g_addr,
               NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "did not start from a continue-as-new"));
  free(out);
  free(err);
  PollWorkflowTaskQueueResponse *t = poll_task(ch, "rr-can", run1, sizeof run1);
  wft_continue_as_new(ch, t->task_token, "rr-can"); /* run1: 1-3, WTC 4, ContinuedAsNew 5 */
  dbx_client_msg_free(t);
  t = poll_task(ch, "rr-can", run2, sizeof run2);
  assert_string_not_equal(run1, run2);
  dbx_svct_wft_start_timer(ch, t->task_token, "1", 3600);
  dbx_client_msg_free(t);
  signal_req(ch, "rr-can", "can-one"); /* to run2, after the reset point */
  signal_req(ch, "rr-can", "can-one"); /* a resend: deduplicated */
  assert_int_equal(signals_in(ch, "rr-can", run2), 1);
  long ev = reset_by_type("rr-can", "LastContinuedAsNew", run3, sizeof run3);
  assert_int_equal(ev, 4); /* run1's last WorkflowTaskCompleted */
  assert_string_not_equal(run3, run1);
  assert_string_not_equal(run3, run2);
  dbx_svct_history h = {0};
  dbx_svct_history_get(ch, "rr-can", run3, &h);
  assert_true(h.n >= 5);
  assert_string_equal(h.events[0]->workflow_execution_started_event_attributes->original_execution_run_id
                          ? h.events[0]->workflow_execution_started_event_attributes->original_execution_run_id
                          : run1,
                      run1);
  assert_int_equal(h.events[3]->event_type, ET(WORKFLOW_TASK_FAILED)); /* in place of run1's WTC 4 */
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 1);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW)), 0);
  dbx_svct_history_cleanup(&h);
  /* run2, the current run then, is terminated; the id's current run is run3 */
  assert_int_equal(run_status(ch, "rr-can", run2), ET(WORKFLOW_EXECUTION_TERMINATED));
  dbx_svct_history_get(ch, "rr-can", NULL, &h);
  assert_true(h.n > 0);
  dbx_svct_history_cleanup(&h);
  signal_req(ch, "rr-can", "can-one"); /* the new run knows this id */
  assert_int_equal(signals_in(ch, "rr-can", run3), 1);
  signal_req(ch, "rr-can", "can-two");
  assert_int_equal(signals_in(ch, "rr-can", run3), 2);
  assert_int_equal(signals_in(ch, "rr-can", run2), 1); /* nothing reached the terminated run */
  /* the worker side: the next task on the queue is the new run's */
  t = poll_task(ch, "rr-can", polled, sizeof polled);
  assert_string_equal(polled, run3);
  dbx_svct_wft_complete_workflow(ch, t->task_token);
  dbx_client_msg_free(t);
  assert_int_equal(run_status(ch, "rr-can", run3), ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_rpc_channel_destroy(ch);
}

/* --type LastWorkflowTask: the last WorkflowTaskCompleted of the run; a
 * signal after it is re-applied, its resend deduplicated. */
static void test_reset_last_workflow_task(void **state) {
  (void)state;
  char *out = NULL, *err = NULL, run1[64], run2[64], polled[64];
  int rc = durabox(&out, &err, "workflow", "start", "--type=it.Can", "--task-queue=rr-last", "-w", "rr-last",
                   "--address", g_addr, NULL);
  if (rc != 0) fail_msg("start exited %d: %s", rc, err);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(atoi(strchr(g_addr, ':') + 1));
  PollWorkflowTaskQueueResponse *t = poll_task(ch, "rr-last", run1, sizeof run1);
  dbx_svct_wft_start_timer(ch, t->task_token, "1", 3600); /* WTC 4, TimerStarted 5 */
  dbx_client_msg_free(t);
  signal_req(ch, "rr-last", "last-one"); /* 6, its task 7-8 */
  t = poll_task(ch, "rr-last", polled, sizeof polled);
  dbx_svct_wft_start_timer(ch, t->task_token, "2", 3600); /* WTC 9, TimerStarted 10 */
  dbx_client_msg_free(t);
  signal_req(ch, "rr-last", "last-two"); /* 11: after the last completed task */
  long ev = reset_by_type("rr-last", "LastWorkflowTask", run2, sizeof run2);
  assert_int_equal(ev, 9);
  assert_int_equal(run_status(ch, "rr-last", run1), ET(WORKFLOW_EXECUTION_TERMINATED));
  assert_int_equal(signals_in(ch, "rr-last", run2), 2); /* one in the prefix, one re-applied */
  signal_req(ch, "rr-last", "last-two");
  signal_req(ch, "rr-last", "last-one");
  assert_int_equal(signals_in(ch, "rr-last", run2), 2);
  t = poll_task(ch, "rr-last", polled, sizeof polled);
  assert_string_equal(polled, run2);
  dbx_svct_wft_complete_workflow(ch, t->task_token);
  dbx_client_msg_free(t);
  assert_int_equal(run_status(ch, "rr-last", run2), ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_rpc_channel_destroy(ch);
}

/* Start an it.Can workflow wid on task queue wid and poll its first
 * workflow task by hand, never answering it (the task stays started); its
 * run id into run (cap bytes). Returns a channel to the service. */
static dbx_rpc_channel *start_with_task_held(const char *wid, char *run, size_t cap) {
  char *out = NULL, *err = NULL, tq[64];
  snprintf(tq, sizeof tq, "--task-queue=%s", wid);
  int rc = durabox(&out, &err, "workflow", "start", "--type=it.Can", tq, "-w", wid, "--address", g_addr, NULL);
  if (rc != 0) fail_msg("start exited %d: %s", rc, err);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(atoi(strchr(g_addr, ':') + 1));
  dbx_client_msg_free(poll_task(ch, wid, run, cap));
  return ch;
}

/* --type FirstWorkflowTask of a run whose first task started and never
 * completed (its worker died): the point is that WorkflowTaskStarted (3), as
 * Temporal's CLI picks; the new run's task goes to the next poller. */
static void test_reset_first_task_never_completed(void **state) {
  (void)state;
  char run1[64], run2[64], polled[64];
  dbx_rpc_channel *ch = start_with_task_held("rr-first", run1, sizeof run1);
  long ev = reset_by_type("rr-first", "FirstWorkflowTask", run2, sizeof run2);
  assert_int_equal(ev, 3);
  assert_int_equal(run_status(ch, "rr-first", run1), ET(WORKFLOW_EXECUTION_TERMINATED));
  PollWorkflowTaskQueueResponse *t = poll_task(ch, "rr-first", polled, sizeof polled);
  assert_string_equal(polled, run2);
  dbx_svct_wft_complete_workflow(ch, t->task_token);
  dbx_client_msg_free(t);
  assert_int_equal(run_status(ch, "rr-first", run2), ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_rpc_channel_destroy(ch);
}

/* A signal that arrives while a workflow task is started is buffered (it
 * has no event yet) but acknowledged: a reset then must take it to the new
 * run like a signal in the history, not drop it. Deterministic form of a
 * race test_reset_reapplies_signals_deduplicated met under load. */
static void test_reset_takes_buffered_signals(void **state) {
  (void)state;
  char run1[64], run2[64], polled[64];
  dbx_rpc_channel *ch = start_with_task_held("rr-buf", run1, sizeof run1);
  signal_req(ch, "rr-buf", "req-buffered"); /* held until the task ends */
  dbx_svct_history h = {0};
  dbx_svct_history_get(ch, "rr-buf", run1, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 0);
  dbx_svct_history_cleanup(&h);
  long ev = reset_by_type("rr-buf", "FirstWorkflowTask", run2, sizeof run2);
  assert_int_equal(ev, 3);
  signal_req(ch, "rr-buf", "req-buffered"); /* a resend: still a duplicate */
  memset(&h, 0, sizeof h);
  dbx_svct_history_get(ch, "rr-buf", run2, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_SIGNALED)), 1);
  const char *req = NULL;
  for (size_t i = 0; i < h.n; i++)
    if (h.events[i]->event_type == ET(WORKFLOW_EXECUTION_SIGNALED))
      req = h.events[i]->workflow_execution_signaled_event_attributes->request_id;
  assert_non_null(req);
  assert_string_equal(req, "req-buffered");
  dbx_svct_history_cleanup(&h);
  PollWorkflowTaskQueueResponse *t = poll_task(ch, "rr-buf", polled, sizeof polled);
  assert_string_equal(polled, run2);
  dbx_svct_wft_complete_workflow(ch, t->task_token);
  dbx_client_msg_free(t);
  assert_int_equal(run_status(ch, "rr-buf", run2), ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_rpc_channel_destroy(ch);
}

/* A history in the form Temporal's CLI writes (2-space indent, nanosecond
 * times, fields of newer Temporal versions, empty headers): tests/data. */
static void test_temporal_cli_fixture_replays(void **state) {
  (void)state;
  const char *src = getenv("DBX_SOURCE_DIR");
  assert_non_null(src);
  char p[4096];
  snprintf(p, sizeof p, "%s/tests/data/temporal_cli_script.json", src);
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "replay", "--history", p, NULL);
  if (rc != 0 || strstr(out, "deterministic: 29 events, 5 commands matched") == NULL)
    fail_msg("fixture replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* written by Temporal's Python SDK (WorkflowHistory.to_json, protobuf's
   * json_format) from a raw export */
  snprintf(p, sizeof p, "%s/tests/data/temporalio_python_history.json", src);
  rc = durabox(&out, &err, "replay", "--history", p, NULL);
  if (rc != 0 || strstr(out, "deterministic: 29 events, 5 commands matched") == NULL)
    fail_msg("temporalio fixture replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_history_files),
      cmocka_unit_test(test_export_and_replay),
      cmocka_unit_test(test_reset),
      cmocka_unit_test(test_long_history_pages),
      cmocka_unit_test(test_reset_reapplies_signals_deduplicated),
      cmocka_unit_test(test_reset_last_continued_as_new),
      cmocka_unit_test(test_reset_last_workflow_task),
      cmocka_unit_test(test_reset_first_task_never_completed),
      cmocka_unit_test(test_reset_takes_buffered_signals),
      cmocka_unit_test(test_temporal_cli_fixture_replays),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
