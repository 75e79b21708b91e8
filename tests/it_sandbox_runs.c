/* Integration test of "a sandbox per run" and `durabox sandbox list|rm|gc`,
 * through the binary ($DBX_BIN) against a spawned `durabox dev` (its worker
 * serves durabox.Script over the local driver in $DURABOX_HOME):
 *  - two runs of one workflow id get two sandboxes, the second starts from
 *    a fresh workspace, and run B's cleanup leaves run A's kept sandbox;
 *  - a reset run makes its own sandbox rather than adopting the base run's;
 *  - a worker killed right after its create (failpoint
 *    activity.sandbox_create.after) leaves one sandbox, which the retried
 *    create of the same run adopts;
 *  - `sandbox list` shows owner, state, kept, live and orphaned (a
 *    terminated run's, and one whose owner run the service does not know),
 *    held (an unknown owner while a run of its workflow id is open), busy
 *    (an unknown owner, a command at work),
 *    and says the owner state is unknown when no service answers;
 *  - an interrupted `sandbox rm` (failpoint local.delete.after_rename) leaves
 *    a half-deleted tree that list shows and `gc` removes, with the orphans,
 *    leaving kept and live sandboxes; `gc --dry-run` removes nothing;
 *  - `sandbox rm` of an unknown id says so and exits 1;
 *  - `durabox run` names a kept sandbox's path at the end;
 *  - `sandbox snapshots|rm-snapshot` and `gc --snapshots-older-than`: the
 *    checkpoints' snapshots with their runs, an open run's kept.
 * Every child is registered with the svc_client process registry. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/local.h"
#include "base/util.h"
#include "tests/svc_client.h"

#define CMD_TIMEOUT_MS 150000
#define WAIT_MS 60000

static char *g_home, *g_env_home, *g_dir, *g_sdb, *g_wdb;
static char g_addr[64], g_env_addr[96];
static int g_port;
static pid_t g_dev;

static int setup(void **state) {
  (void)state;
  g_home = dbx_test_tmpdir("itsbx-home");
  g_dir = dbx_test_tmpdir("itsbx-files");
  g_sdb = dbx_test_tmpdir("itsbx-sdb");
  g_wdb = dbx_test_tmpdir("itsbx-wdb");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s", g_home);
  g_port = dbx_svct_free_port();
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  snprintf(g_env_addr, sizeof g_env_addr, "TEMPORAL_ADDRESS=%s", g_addr);
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", g_port);
  char *argv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", g_sdb,
                  "--worker-db", g_wdb, "--log-level", "warn", NULL};
  char *env[] = {g_env_home, "DURABOX_FAILPOINTS", NULL};
  g_dev = dbx_svct_proc_spawn(argv, env, NULL, NULL);
  dbx_rpc_global_init();
  dbx_rpc_channel *ch = dbx_svct_connect(g_port); /* waits until the service answers */
  dbx_rpc_channel_destroy(ch);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dbx_svct_proc_kill_all();
  dbx_rpc_global_shutdown();
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

/* Run `durabox args...` with DURABOX_HOME and TEMPORAL_ADDRESS of the dev
 * service (extra_env may add or remove one more variable). */
static int durabox(const char *extra_env, char **out, char **err, ...) {
  char *argv[32];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 31) argv[k++] = (char *)a;
  va_end(ap);
  argv[k] = NULL;
  char *env[] = {g_env_home, g_env_addr, "DURABOX_WORKER_DB", "DURABOX_FAILPOINTS",
                 (char *)extra_env, NULL};
  return dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, out, err);
}

static char *input_file(const char *name, const char *text) {
  char *p = dbx_asprintf("%s/%s", g_dir, name);
  dbx_svct_file_write(p, text);
  return p;
}

/* A Script: keep or not; its one exec step fails unless the workspace is
 * fresh (no marker from an earlier run), then leaves the marker. */
static char *script_file(const char *name, int keep, const char *extra_step) {
  char *text = dbx_asprintf(
      "{\"sandbox\":{\"keep\":%s,\"heartbeat_timeout_s\":2},\"steps\":["
      "{\"name\":\"fresh\",\"kind\":\"exec\",\"command\":\"test ! -e marker && echo %s > marker\"}%s]}",
      keep ? "true" : "false", name, extra_step ? extra_step : "");
  char *p = input_file(name, text);
  free(text);
  return p;
}

/* `workflow execute` of a Script; *run_id (malloc'd) and the result. */
static cJSON *execute(const char *wfid, const char *file, const char *tq, char **run_id) {
  char *out = NULL, *err = NULL;
  int rc = durabox(NULL, &out, &err, "workflow", "execute", "--type", "durabox.Script",
                   "--task-queue", tq, "--workflow-id", wfid, "--input-file", file, NULL);
  if (rc != 0) fail_msg("workflow execute %s exited %d: %s\n%s", wfid, rc, err, out);
  const char *p = strstr(out, " run ");
  assert_non_null(p);
  p += 5;
  const char *nl = strchr(p, '\n');
  assert_non_null(nl);
  if (run_id) *run_id = strndup(p, (size_t)(nl - p));
  cJSON *j = cJSON_Parse(nl + 1);
  if (j == NULL) fail_msg("no JSON result in: %s", out);
  free(out);
  free(err);
  return j;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsString(v)) fail_msg("field '%s' is not a string", k);
  return v->valuestring;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* `sandbox list --output json` (extra: one more flag pair or NULL). */
static cJSON *list_json(const char *flag, const char *value) {
  char *out = NULL, *err = NULL;
  int rc = flag ? durabox(NULL, &out, &err, "sandbox", "list", "--output", "json", flag, value, NULL)
                : durabox(NULL, &out, &err, "sandbox", "list", "--output", "json", NULL);
  if (rc != 0) fail_msg("sandbox list exited %d: %s", rc, err);
  cJSON *j = cJSON_Parse(out);
  if (j == NULL) fail_msg("sandbox list printed no JSON: %s", out);
  free(out);
  free(err);
  return j;
}

/* The list entries of workflow wfid, in a new array (cJSON_Delete). */
static cJSON *entries_of(const cJSON *list, const char *wfid) {
  cJSON *a = cJSON_CreateArray();
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(list, "sandboxes")) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "workflow_id");
    if (cJSON_IsString(w) && strcmp(w->valuestring, wfid) == 0)
      cJSON_AddItemToArray(a, cJSON_Duplicate(e, 1));
  }
  return a;
}

static const cJSON *entry_by_id(const cJSON *list, const char *id) {
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(list, "sandboxes")) {
    if (strcmp(jstr(e, "id"), id) == 0) return e;
  }
  return NULL;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Poll `sandbox list` until workflow wfid has a sandbox with verdict, up to
 * WAIT_MS; returns that entry (cJSON_Delete) or fails. */
static cJSON *await_verdict(const char *wfid, const char *verdict) {
  int64_t end = now_ms() + WAIT_MS;
  for (;;) {
    cJSON *l = list_json(NULL, NULL), *mine = entries_of(l, wfid);
    cJSON_Delete(l);
    const cJSON *e;
    cJSON_ArrayForEach(e, mine) {
      if (strcmp(jstr(e, "verdict"), verdict) == 0) {
        cJSON *r = cJSON_Duplicate(e, 1);
        cJSON_Delete(mine);
        return r;
      }
    }
    cJSON_Delete(mine);
    if (now_ms() > end) fail_msg("workflow %s never had a sandbox '%s'", wfid, verdict);
    struct timespec t = {0, 200 * 1000000};
    nanosleep(&t, NULL);
  }
}

/* Two runs of one workflow id: two sandboxes, the second fresh; run B's
 * cleanup leaves run A's kept sandbox (and its marker) alone. */
static void test_sandbox_two_runs_one_workflow_id(void **state) {
  (void)state;
  char *fa = script_file("two-a.json", 1, NULL), *fb = script_file("two-b.json", 0, NULL);
  char *ra = NULL, *rb = NULL;
  cJSON *a = execute("two", fa, "durabox", &ra);
  assert_string_equal(jstr(a, "status"), "completed");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "sandbox_kept")));
  const char *path_a = jstr(a, "sandbox_path");
  assert_true(is_dir(path_a));
  cJSON *b = execute("two", fb, "durabox", &rb); /* "fresh" fails on A's workspace */
  assert_string_equal(jstr(b, "status"), "completed");
  assert_string_not_equal(ra, rb);
  assert_string_not_equal(jstr(a, "sandbox_id"), jstr(b, "sandbox_id"));
  assert_null(cJSON_GetObjectItemCaseSensitive(b, "sandbox_kept"));
  /* B deleted its own at the end; A's is still there with A's marker */
  char *b_dir = dbx_asprintf("%s/sandboxes/%s", g_home, jstr(b, "sandbox_id"));
  assert_false(is_dir(b_dir));
  char *marker = dbx_asprintf("%s/marker", path_a);
  char *m = dbx_svct_file_read(marker);
  assert_non_null(m);
  assert_string_equal(m, "two-a.json\n");
  cJSON *l = list_json(NULL, NULL), *mine = entries_of(l, "two");
  assert_int_equal(cJSON_GetArraySize(mine), 1);
  const cJSON *e = cJSON_GetArrayItem(mine, 0);
  assert_string_equal(jstr(e, "id"), jstr(a, "sandbox_id"));
  assert_string_equal(jstr(e, "run_id"), ra);
  assert_string_equal(jstr(e, "state"), "running");
  assert_string_equal(jstr(e, "owner_state"), "completed");
  assert_string_equal(jstr(e, "verdict"), "kept");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "kept")));
  assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "orphaned")));
  assert_string_equal(jstr(e, "path"), path_a);
  assert_true(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "bytes")) > 0);
  cJSON_Delete(l);
  cJSON_Delete(mine);
  cJSON_Delete(a);
  cJSON_Delete(b);
  free(fa);
  free(fb);
  free(ra);
  free(rb);
  free(b_dir);
  free(marker);
  free(m);
}

/* A reset run (to the first workflow task, before its create) makes its own
 * sandbox: its "fresh" step passes, the base run's sandbox is untouched. */
static void test_sandbox_reset_run_does_not_adopt(void **state) {
  (void)state;
  char *f = script_file("reset.json", 1, NULL);
  char *base = NULL;
  cJSON *a = execute("rst", f, "durabox", &base);
  assert_string_equal(jstr(a, "status"), "completed");
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  ResetWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "rst";
  we.run_id = base;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.workflow_task_finish_event_id = 3; /* the first WorkflowTaskStarted */
  q.reason = "it_sandbox_runs";
  q.request_id = "rst-reset-1";
  ResetWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "ResetWorkflowExecution", &q.base, &ResetWorkflowExecutionResponse__D,
                                 10000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  char *nrun = strdup(r->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  dbx_rpc_channel_destroy(ch);
  assert_string_not_equal(nrun, base);
  char *out = NULL, *err = NULL;
  int rc = durabox(NULL, &out, &err, "workflow", "result", "--workflow-id", "rst", "--run-id", nrun, NULL);
  if (rc != 0) fail_msg("the reset run did not complete (%d): %s\n%s", rc, err, out);
  cJSON *b = cJSON_Parse(out);
  assert_non_null(b);
  assert_string_equal(jstr(b, "status"), "completed"); /* "fresh" passed */
  assert_string_not_equal(jstr(a, "sandbox_id"), jstr(b, "sandbox_id"));
  cJSON *l = list_json(NULL, NULL);
  const cJSON *ea = entry_by_id(l, jstr(a, "sandbox_id")), *eb = entry_by_id(l, jstr(b, "sandbox_id"));
  assert_non_null(ea);
  assert_non_null(eb);
  assert_string_equal(jstr(ea, "run_id"), base);
  assert_string_equal(jstr(eb, "run_id"), nrun);
  cJSON_Delete(l);
  cJSON_Delete(a);
  cJSON_Delete(b);
  free(out);
  free(err);
  free(f);
  free(base);
  free(nrun);
}

/* A worker killed right after sandbox.create made the sandbox (before it
 * could report): the retried create of the same run adopts that one. */
static void test_sandbox_retried_create_adopts(void **state) {
  (void)state;
  char *wdb1 = dbx_test_tmpdir("itsbx-w1"), *wdb2 = dbx_test_tmpdir("itsbx-w2");
  char *argv1[] = {(char *)dbx_test_bin(), "worker", "--task-queue", "tq-crash", "--db", wdb1,
                   "--log-level", "warn", NULL};
  char *env1[] = {g_env_home, g_env_addr, "DURABOX_FAILPOINTS=activity.sandbox_create.after=kill", NULL};
  pid_t w1 = dbx_svct_proc_spawn(argv1, env1, NULL, NULL);
  char *f = script_file("crash.json", 0, NULL);
  char *out = NULL, *err = NULL;
  int rc = durabox(NULL, &out, &err, "workflow", "start", "--type", "durabox.Script", "--task-queue",
                   "tq-crash", "--workflow-id", "crash", "--input-file", f, NULL);
  if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
  free(out);
  free(err);
  int st = dbx_svct_proc_wait(w1, WAIT_MS); /* the failpoint kills it */
  assert_int_equal(st, 128 + SIGKILL);
  cJSON *first = await_verdict("crash", "live"); /* made, never reported */
  char *argv2[] = {(char *)dbx_test_bin(), "worker", "--task-queue", "tq-crash", "--db", wdb2,
                   "--log-level", "warn", NULL};
  char *env2[] = {g_env_home, g_env_addr, "DURABOX_FAILPOINTS", NULL};
  pid_t w2 = dbx_svct_proc_spawn(argv2, env2, NULL, NULL);
  rc = durabox(NULL, &out, &err, "workflow", "result", "--workflow-id", "crash", NULL);
  if (rc != 0) fail_msg("the run did not complete (%d): %s\n%s", rc, err, out);
  cJSON *j = cJSON_Parse(out);
  assert_non_null(j);
  assert_string_equal(jstr(j, "status"), "completed");
  /* the run used the sandbox the killed attempt made (and deleted it) */
  assert_string_equal(jstr(j, "sandbox_id"), jstr(first, "id"));
  cJSON *l = list_json(NULL, NULL), *mine = entries_of(l, "crash");
  assert_int_equal(cJSON_GetArraySize(mine), 0);
  dbx_svct_proc_kill(w2, SIGKILL);
  cJSON_Delete(l);
  cJSON_Delete(mine);
  cJSON_Delete(j);
  cJSON_Delete(first);
  free(out);
  free(err);
  free(f);
  dbx_test_rmrf(wdb1);
  dbx_test_rmrf(wdb2);
  free(wdb1);
  free(wdb2);
}

/* A sandbox id in the home of workflow wf whose owner run the service never
 * heard of, with a command running in it when busy; returns its workspace
 * path. */
static char *make_ghost(const char *id, const char *wf, int busy) {
  dbx_local *d = NULL;
  dbx_local_open_opts oo = {.unsandboxed = 1};
  assert_int_equal(dbx_local_open_with(g_home, &oo, &d), DBX_OK);
  dbx_drv_label labels[] = {{"durabox.workflow_id", wf},
                            {"durabox.run_id", "00000000-0000-4000-8000-000000000000"},
                            {"durabox.resource", "workspace"}};
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY, .labels = labels, .nlabels = 3};
  assert_int_equal(dbx_local_sandbox_create(d, id, &src, NULL), DBX_OK);
  if (busy) {
    dbx_local_exec_opts o = {.command = "sleep 300", .timeout_ms = 600000};
    assert_int_equal(dbx_local_exec_start(d, id, "c1", &o, NULL), DBX_OK);
    int64_t end = now_ms() + WAIT_MS;
    dbx_local_cmd_status st = {0};
    while (dbx_local_exec_poll(d, id, "c1", &st) == DBX_OK && st.state != DBX_LOCAL_CMD_RUNNING) {
      if (now_ms() > end) fail_msg("the command in %s never ran", id);
      struct timespec t = {0, 50 * 1000000};
      nanosleep(&t, NULL);
    }
    assert_int_equal(st.state, DBX_LOCAL_CMD_RUNNING);
  }
  char *p = dbx_local_sandbox_path(d, id);
  dbx_local_close(d);
  return p;
}

/* list: live, kept, orphaned (terminated owner; unknown owner); an
 * interrupted rm's tombstone; gc --dry-run removes nothing, gc the orphans
 * and the tombstone only; rm of an unknown id; no service: unknown. */
static void test_sandbox_list_gc_rm(void **state) {
  (void)state;
  char *fk = script_file("kept.json", 1, NULL), *fk2 = script_file("kept2.json", 1, NULL);
  cJSON *k = execute("gc-kept", fk, "durabox", NULL);
  cJSON *k2 = execute("gc-kept2", fk2, "durabox", NULL);
  /* a run that is still at work, and one terminated mid-step (no cleanup) */
  char *fl = script_file("live.json", 0, ",{\"name\":\"wait\",\"kind\":\"exec\",\"command\":\"sleep 300\"}");
  char *out = NULL, *err = NULL;
  for (int i = 0; i < 2; i++) {
    int rc = durabox(NULL, &out, &err, "workflow", "start", "--type", "durabox.Script", "--task-queue",
                     "durabox", "--workflow-id", i ? "gc-orphan" : "gc-live", "--input-file", fl, NULL);
    if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
    free(out);
    free(err);
  }
  cJSON *live = await_verdict("gc-live", "live");
  cJSON *orph = await_verdict("gc-orphan", "live");
  int rc = durabox(NULL, &out, &err, "workflow", "terminate", "--workflow-id", "gc-orphan", NULL);
  if (rc != 0) fail_msg("terminate exited %d: %s", rc, err);
  free(out);
  free(err);
  cJSON *o2 = await_verdict("gc-orphan", "orphaned");
  assert_string_equal(jstr(o2, "owner_state"), "terminated");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o2, "orphaned")));
  char *ghost = make_ghost("dbx-ghost", "ghost-of-a-workflow-whose-id-is-longer-than-its-column", 0);
  /* closed-or-unknown owner, but its workflow id has an open run: held */
  char *held = make_ghost("dbx-held", "gc-live", 0);
  /* an owner the service does not know, and a command at work: busy */
  char *busy = make_ghost("dbx-busy", "elsewhere", 1);
  /* an rm killed between its rename and its removal: a half-deleted tree */
  char *rm_argv[] = {(char *)dbx_test_bin(), "sandbox", "rm", (char *)jstr(k2, "sandbox_id"), NULL};
  char *rm_env[] = {g_env_home, g_env_addr, "DURABOX_FAILPOINTS=local.delete.after_rename=kill", NULL};
  rc = dbx_svct_proc_run(rm_argv, rm_env, CMD_TIMEOUT_MS, NULL, NULL);
  assert_int_equal(rc, 128 + SIGKILL);
  assert_false(is_dir(jstr(k2, "sandbox_path")));

  cJSON *l = list_json(NULL, NULL);
  const cJSON *e = entry_by_id(l, "dbx-ghost");
  assert_non_null(e);
  assert_string_equal(jstr(e, "owner_state"), "not_found");
  assert_string_equal(jstr(e, "verdict"), "orphaned");
  e = entry_by_id(l, jstr(k, "sandbox_id"));
  assert_non_null(e);
  assert_string_equal(jstr(e, "verdict"), "kept");
  e = entry_by_id(l, jstr(live, "id"));
  assert_string_equal(jstr(e, "owner_state"), "running");
  assert_string_equal(jstr(e, "verdict"), "live");
  assert_null(entry_by_id(l, jstr(k2, "sandbox_id")));
  e = entry_by_id(l, "dbx-held");
  assert_non_null(e);
  assert_string_equal(jstr(e, "owner_state"), "not_found");
  assert_string_equal(jstr(e, "verdict"), "held");
  assert_string_equal(jstr(e, "open_run_id"), jstr(live, "run_id"));
  e = entry_by_id(l, "dbx-busy");
  assert_non_null(e);
  assert_string_equal(jstr(e, "verdict"), "busy");
  const cJSON *left = cJSON_GetObjectItemCaseSensitive(l, "leftovers");
  assert_int_equal(cJSON_GetArraySize(left), 1);
  const cJSON *tomb = cJSON_GetArrayItem(left, 0);
  assert_string_equal(jstr(tomb, "kind"), "half-deleted");
  char *tomb_path = strdup(jstr(tomb, "path"));
  assert_true(is_dir(tomb_path));
  assert_true(strstr(tomb_path, jstr(k2, "sandbox_id")) != NULL);
  cJSON_Delete(l);
  /* the table for people says the same */
  rc = durabox(NULL, &out, &err, "sandbox", "list", NULL);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "dbx-ghost"));
  assert_non_null(strstr(out, "orphaned"));
  assert_non_null(strstr(out, "leftover half-deleted"));
  /* a workflow id longer than its column widens it: STATE stays aligned */
  const char *hdr = strstr(out, "ID "), *row = strstr(out, "\ndbx-ghost ");
  assert_non_null(hdr);
  assert_non_null(row);
  row++;
  const char *hs = strstr(hdr, " STATE "), *rs = strstr(row, " running ");
  assert_non_null(hs);
  assert_non_null(rs);
  assert_int_equal(hs - hdr, rs - row);
  free(out);
  free(err);

  /* gc --dry-run: names them, removes nothing */
  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--dry-run", NULL);
  if (rc != 0) fail_msg("gc --dry-run exited %d: %s", rc, err);
  assert_non_null(strstr(out, "would remove orphaned sandbox dbx-ghost"));
  assert_non_null(strstr(out, jstr(orph, "id")));
  assert_non_null(strstr(out, "would remove half-deleted tree"));
  assert_non_null(strstr(out, "kept busy sandbox dbx-busy: a command runs in it"));
  assert_null(strstr(out, jstr(k, "sandbox_id")));
  assert_null(strstr(out, jstr(live, "id")));
  free(out);
  free(err);
  assert_true(is_dir(ghost));
  assert_true(is_dir(tomb_path));

  /* gc: orphans and the tombstone go; kept and live stay */
  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--output", "json", NULL);
  if (rc != 0) fail_msg("gc exited %d: %s\n%s", rc, err, out);
  cJSON *g = cJSON_Parse(out);
  assert_non_null(g);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "removed")), 3);
  const cJSON *kb = cJSON_GetObjectItemCaseSensitive(g, "kept_busy"); /* named, not removed */
  assert_int_equal(cJSON_GetArraySize(kb), 1);
  assert_string_equal(jstr(cJSON_GetArrayItem(kb, 0), "id"), "dbx-busy");
  cJSON_Delete(g);
  free(out);
  free(err);
  assert_false(is_dir(ghost));
  assert_false(is_dir(tomb_path));
  assert_false(is_dir(jstr(orph, "path")));
  assert_true(is_dir(jstr(k, "sandbox_path")));
  assert_true(is_dir(jstr(live, "path")));
  assert_true(is_dir(held));
  assert_true(is_dir(busy));
  l = list_json(NULL, NULL);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(l, "leftovers")), 0);
  cJSON_Delete(l);

  /* rm: an unknown id is named; a live run's sandbox needs --force */
  rc = durabox(NULL, &out, &err, "sandbox", "rm", "dbx-nosuch", NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "no sandbox 'dbx-nosuch'"));
  free(out);
  free(err);
  rc = durabox(NULL, &out, &err, "sandbox", "rm", jstr(live, "id"), NULL);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(err, "running run"));
  assert_true(is_dir(jstr(live, "path")));
  free(out);
  free(err);

  /* no service: local facts, owner state unknown */
  char dead[64];
  snprintf(dead, sizeof dead, "127.0.0.1:%d", dbx_svct_free_port());
  l = list_json("--address", dead);
  assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(l, "service"), "reachable")));
  e = entry_by_id(l, jstr(live, "id"));
  assert_non_null(e);
  assert_string_equal(jstr(e, "owner_state"), "unknown");
  assert_string_equal(jstr(e, "verdict"), "unknown");
  e = entry_by_id(l, jstr(k, "sandbox_id"));
  assert_string_equal(jstr(e, "verdict"), "kept");
  cJSON_Delete(l);
  rc = durabox(NULL, &out, &err, "sandbox", "list", "--address", dead, NULL);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "owner state unknown"));
  free(out);
  free(err);

  /* the kept one: rm removes it */
  rc = durabox(NULL, &out, &err, "sandbox", "rm", jstr(k, "sandbox_id"), NULL);
  if (rc != 0) fail_msg("rm exited %d: %s", rc, err);
  assert_false(is_dir(jstr(k, "sandbox_path")));
  free(out);
  free(err);
  /* --force removes a live run's sandbox (and stops its command) */
  rc = durabox(NULL, &out, &err, "sandbox", "rm", "--force", jstr(live, "id"), NULL);
  if (rc != 0) fail_msg("rm --force exited %d: %s", rc, err);
  assert_false(is_dir(jstr(live, "path")));
  free(out);
  free(err);
  rc = durabox(NULL, &out, &err, "workflow", "terminate", "--workflow-id", "gc-live", NULL);
  free(out);
  free(err);
  cJSON_Delete(k);
  cJSON_Delete(k2);
  cJSON_Delete(live);
  cJSON_Delete(orph);
  cJSON_Delete(o2);
  rc = durabox(NULL, &out, &err, "sandbox", "rm", "dbx-held", "dbx-busy", NULL);
  assert_int_equal(rc, 0);
  assert_false(is_dir(held));
  assert_false(is_dir(busy));
  free(out);
  free(err);
  free(ghost);
  free(held);
  free(busy);
  free(tomb_path);
  free(fk);
  free(fk2);
  free(fl);
}

/* `durabox run` against the service names the kept sandbox's path. */
static void test_sandbox_run_prints_kept_path(void **state) {
  (void)state;
  char *f = script_file("run-kept.json", 1, NULL);
  char *out = NULL, *err = NULL;
  int rc = durabox(NULL, &out, &err, "run", f, "--workflow-id", "run-kept", "--address", g_addr, NULL);
  if (rc != 0) fail_msg("run exited %d: %s\n%s", rc, err, out);
  const char *p = strstr(out, "sandbox kept: ");
  if (p == NULL) fail_msg("no kept path in:\n%s", out);
  p += strlen("sandbox kept: ");
  const char *sp = strchr(p, ' ');
  assert_non_null(sp);
  char *path = strndup(p, (size_t)(sp - p));
  assert_true(is_dir(path));
  char *marker = dbx_asprintf("%s/marker", path);
  char *m = dbx_svct_file_read(marker);
  assert_non_null(m);
  assert_string_equal(m, "run-kept.json\n");
  free(m);
  free(marker);
  free(path);
  free(out);
  free(err);
  free(f);
}

/* The snapshots (checkpoints) of the local home: `sandbox snapshots` lists
 * each with its run and the run's state; `rm-snapshot` refuses one whose
 * run is open and names one that is not there; `gc` keeps snapshots unless
 * given --snapshots-older-than, then removes the closed runs' (--dry-run
 * only names them) and a checkpoint's half-made copy, and keeps an open
 * run's. */
static void test_sandbox_snapshots_rm_gc(void **state) {
  (void)state;
  char *fo = input_file("snap-open.json",
                        "{\"steps\":[{\"name\":\"ck\",\"kind\":\"checkpoint\"},"
                        "{\"name\":\"wait\",\"kind\":\"exec\",\"command\":\"sleep 300\"}]}");
  char *fd = input_file("snap-done.json", "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\","
                                          "\"path\":\"a.txt\",\"content\":\"abc\"},"
                                          "{\"name\":\"ck\",\"kind\":\"checkpoint\"}]}");
  char *out = NULL, *err = NULL;
  int rc = durabox(NULL, &out, &err, "workflow", "start", "--type", "durabox.Script", "--task-queue",
                   "durabox", "--workflow-id", "snap-open", "--input-file", fo, NULL);
  if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
  free(out);
  free(err);
  char *done_run = NULL;
  cJSON_Delete(execute("snap-done", fd, "durabox", &done_run));

  /* both snapshots listed, each with its run and the run's state */
  cJSON *list = NULL;
  const cJSON *s_open = NULL, *s_done = NULL;
  int64_t end = now_ms() + WAIT_MS;
  for (;;) {
    rc = durabox(NULL, &out, &err, "sandbox", "snapshots", "--output", "json", NULL);
    if (rc != 0) fail_msg("sandbox snapshots exited %d: %s", rc, err);
    list = cJSON_Parse(out);
    if (list == NULL) fail_msg("sandbox snapshots printed no JSON: %s", out);
    free(out);
    free(err);
    s_open = s_done = NULL;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(list, "snapshots")) {
      const char *wf = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "workflow_id"));
      if (wf && strcmp(wf, "snap-open") == 0) s_open = e;
      if (wf && strcmp(wf, "snap-done") == 0) s_done = e;
    }
    if (s_open && s_done) break;
    if (now_ms() > end) {
      char *t = cJSON_Print(list);
      fail_msg("no snapshot of snap-open or snap-done with its run after %d ms:\n%s", WAIT_MS, t);
    }
    cJSON_Delete(list);
    struct timespec t = {0, 100 * 1000000};
    nanosleep(&t, NULL);
  }
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(list, "snapshots")), 2);
  assert_string_equal(jstr(s_open, "owner_state"), "running");
  assert_string_equal(jstr(s_done, "owner_state"), "completed");
  assert_string_equal(jstr(s_done, "run_id"), done_run);
  assert_memory_equal(jstr(s_done, "name"), "ckpt-", 5); /* a checkpoint step's name */
  assert_true(cJSON_GetObjectItemCaseSensitive(s_done, "bytes")->valuedouble >= 3);
  const char *made = jstr(s_done, "made");
  assert_int_equal(strlen(made), 20); /* 2026-12-07T07:30:00Z */
  assert_int_equal(made[10], 'T');
  char *open_name = strdup(jstr(s_open, "name")), *done_name = strdup(jstr(s_done, "name"));
  cJSON_Delete(list);
  char *open_path = dbx_asprintf("%s/snapshots/%s", g_home, open_name);
  char *done_path = dbx_asprintf("%s/snapshots/%s", g_home, done_name);
  char *a_txt = dbx_asprintf("%s/a.txt", done_path);
  char *a = dbx_svct_file_read(a_txt); /* the snapshot holds the workspace */
  assert_non_null(a);
  assert_string_equal(a, "abc");
  free(a);
  free(a_txt);

  rc = durabox(NULL, &out, &err, "sandbox", "snapshots", NULL);
  assert_int_equal(rc, 0);
  if (!strstr(out, done_name) || !strstr(out, "completed") || !strstr(out, "running") ||
      !strstr(out, "2 snapshots"))
    fail_msg("sandbox snapshots:\n%s", out);
  free(out);
  free(err);

  /* rm-snapshot: an open run's is refused, a missing name named; both exit 1 */
  rc = durabox(NULL, &out, &err, "sandbox", "rm-snapshot", open_name, NULL);
  assert_int_equal(rc, 1);
  if (!strstr(err, "belongs to a running run")) fail_msg("rm-snapshot of an open run's: %s", err);
  assert_true(is_dir(open_path));
  free(out);
  free(err);
  rc = durabox(NULL, &out, &err, "sandbox", "rm-snapshot", "ck-nope-e1", NULL);
  assert_int_equal(rc, 1);
  if (!strstr(err, "no snapshot 'ck-nope-e1'")) fail_msg("rm-snapshot of a missing one: %s", err);
  free(out);
  free(err);
  /* the age flag is gc's */
  rc = durabox(NULL, &out, &err, "sandbox", "list", "--snapshots-older-than", "1", NULL);
  assert_int_equal(rc, 2);
  if (!strstr(err, "--snapshots-older-than is for gc")) fail_msg("list with the age flag: %s", err);
  free(out);
  free(err);

  /* a checkpoint's copy that died half-made */
  char *part = dbx_asprintf("%s/snapshots/.tmp-%s", g_home, done_name);
  assert_int_equal(mkdir(part, 0700), 0);

  /* gc without the flag keeps every snapshot and says so; the part goes */
  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--dry-run", NULL);
  assert_int_equal(rc, 0);
  if (!strstr(out, "kept 2 snapshots") || !strstr(out, "would remove half-made snapshot tree"))
    fail_msg("gc --dry-run:\n%s", out);
  free(out);
  free(err);
  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--dry-run", "--snapshots-older-than", "0", NULL);
  assert_int_equal(rc, 0);
  char *line = dbx_asprintf("would remove snapshot %s", done_name);
  char *kline = dbx_asprintf("kept snapshot %s: its run", open_name);
  if (!strstr(out, line) || !strstr(out, kline) || strstr(out, "would remove snapshot ckpt-") != strstr(out, line))
    fail_msg("gc --dry-run --snapshots-older-than 0:\n%s", out);
  free(line);
  free(kline);
  assert_true(is_dir(done_path));
  assert_true(is_dir(part));
  free(out);
  free(err);

  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--snapshots-older-than", "0", "--output", "json", NULL);
  if (rc != 0) fail_msg("gc exited %d: %s\n%s", rc, err, out);
  cJSON *g = cJSON_Parse(out);
  assert_non_null(g);
  int saw_snap = 0, saw_part = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "removed")) {
    const char *k = jstr(e, "kind");
    if (k && strcmp(k, "snapshot") == 0) {
      assert_string_equal(jstr(e, "name"), done_name);
      saw_snap++;
    }
    if (k && strcmp(k, "half-made snapshot") == 0) saw_part++;
  }
  assert_int_equal(saw_snap, 1);
  assert_int_equal(saw_part, 1);
  const cJSON *kept = cJSON_GetObjectItemCaseSensitive(g, "kept_snapshots");
  assert_int_equal(cJSON_GetArraySize(kept), 1);
  assert_string_equal(jstr(cJSON_GetArrayItem(kept, 0), "name"), open_name);
  cJSON_Delete(g);
  free(out);
  free(err);
  assert_false(is_dir(done_path));
  assert_false(is_dir(part));
  assert_true(is_dir(open_path));

  /* once its run is closed, the open run's goes too */
  rc = durabox(NULL, &out, &err, "workflow", "terminate", "--workflow-id", "snap-open", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  rc = durabox(NULL, &out, &err, "sandbox", "gc", "--snapshots-older-than", "0", NULL);
  assert_int_equal(rc, 0);
  if (!strstr(out, open_name)) fail_msg("gc after terminate:\n%s", out);
  free(out);
  free(err);
  assert_false(is_dir(open_path));
  rc = durabox(NULL, &out, &err, "sandbox", "snapshots", NULL);
  assert_int_equal(rc, 0);
  if (!strstr(out, "(no snapshots)")) fail_msg("snapshots after gc:\n%s", out);
  free(out);
  free(err);
  free(part);
  free(open_path);
  free(done_path);
  free(open_name);
  free(done_name);
  free(done_run);
  free(fo);
  free(fd);
}

int main(int argc, char **argv) {
  dbx_local_supervisor_main(argc, argv); /* this binary starts a detached command */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sandbox_two_runs_one_workflow_id),
      cmocka_unit_test(test_sandbox_reset_run_does_not_adopt),
      cmocka_unit_test(test_sandbox_retried_create_adopts),
      cmocka_unit_test(test_sandbox_list_gc_rm),
      cmocka_unit_test(test_sandbox_run_prints_kept_path),
      cmocka_unit_test(test_sandbox_snapshots_rm_gc),
  };
  return cmocka_run_group_tests_name("it_sandbox_runs", tests, setup, teardown);
}
