/* Sessions end to end (docs/worker.md "Sessions"): the real embedded
 * service in this process, a real `durabox worker` process over the local
 * driver (and one over the fake Daytona server), and every turn started by
 * the durabox binary (`workflow execute|start --session S`, `durabox run
 * --session S`):
 *  - turn 1 writes a file; turn 2 sees it in the same sandbox, gets turn 2
 *    and turn 1's run id as previous_run_id, and the same session_state
 *    sandbox; `durabox run --session` makes turn 3 there too;
 *  - a failed turn and a cancelled turn never become the parent: the next
 *    turn continues from the newest completed one (turn number and
 *    previous run), and the cancelled turn left the sandbox in place;
 *  - a turn started while one runs is refused, naming the open turn;
 *  - a turn whose previous sandbox was removed fails with SandboxNotFound
 *    naming it; `sandbox gc` leaves a session's sandbox;
 *  - on the fake Daytona server: turn 2 re-opens turn 1's sandbox (one
 *    create in the fake's log, no delete) and reads turn 1's file.
 * Every child is registered with the svc_client process registry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"

#define CMD_TIMEOUT_MS 120000
#define WAIT_MS 60000

static char *g_svc_dir, *g_wrk_dir, *g_home, *g_tmp, *g_env_home;
static char g_addr[64], g_env_addr[96];
static dbx_service *g_svc;

static int setup(void **state) {
  (void)state;
  dbx_rpc_global_init();
  g_svc_dir = dbx_test_tmpdir("itses-svc");
  g_wrk_dir = dbx_test_tmpdir("itses-wrk");
  g_home = dbx_test_tmpdir("itses-home");
  g_tmp = dbx_test_tmpdir("itses-tmp");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s", g_home);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = g_svc_dir;
  so.no_sync = 1;
  if (dbx_service_start(&so, &g_svc, NULL) != DBX_OK) return -1;
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", dbx_service_port(g_svc));
  snprintf(g_env_addr, sizeof g_env_addr, "TEMPORAL_ADDRESS=%s", g_addr);
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", g_addr, "--task-queue", "sq",
                  "--db", g_wrk_dir, "--sandbox", "local", "--sandbox-home", g_home,
                  "--log-level", "error", NULL};
  char *env[] = {g_env_home, "DURABOX_SANDBOX", NULL};
  dbx_svct_proc_spawn(argv, env, NULL, NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dbx_svct_proc_kill_all();
  dbx_service_stop(g_svc);
  dbx_rpc_global_shutdown();
  char *dirs[] = {g_svc_dir, g_wrk_dir, g_home, g_tmp};
  for (int i = 0; i < 4; i++) {
    dbx_test_rmrf(dirs[i]);
    free(dirs[i]);
  }
  free(g_env_home);
  return 0;
}

/* Run `durabox args...` against the service (TEMPORAL_ADDRESS), with the
 * worker's sandbox home as DURABOX_HOME. */
static int durabox(char **out, char **err, ...) {
  char *argv[40];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 39) argv[k++] = (char *)a;
  va_end(ap);
  argv[k] = NULL;
  char *env[] = {g_env_home, g_env_addr, "DURABOX_SANDBOX", "DURABOX_FAILPOINTS", NULL};
  return dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, out, err);
}

typedef struct {
  int rc;
  char *run_id;  /* from "started workflow S run R" */
  int turn;      /* from "session S: turn N (...)" */
  cJSON *result; /* the JSON result line, NULL when none (a failed turn) */
  char *out, *err;
} turn_out;

static void turn_free(turn_out *t) {
  free(t->run_id);
  cJSON_Delete(t->result);
  free(t->out);
  free(t->err);
  memset(t, 0, sizeof *t);
}

/* `workflow execute --session S` of a Script input on task queue tq. */
static turn_out execute_turn(const char *session, const char *tq, const char *input) {
  turn_out t = {0};
  t.rc = durabox(&t.out, &t.err, "workflow", "execute", "--session", session, "--type", "durabox.Script",
                 "--task-queue", tq, "--input", input, NULL);
  const char *p = strstr(t.out, "started workflow ");
  if (p && (p = strstr(p, " run ")) != NULL) {
    p += 5;
    t.run_id = strndup(p, strcspn(p, "\n"));
  }
  char want[200];
  snprintf(want, sizeof want, "session %s: turn ", session);
  const char *q = strstr(t.out, want);
  if (q) t.turn = atoi(q + strlen(want));
  const char *nl = q ? strchr(q, '\n') : NULL;
  if (nl) t.result = cJSON_Parse(nl + 1);
  return t;
}

static const cJSON *at(const cJSON *o, const char *path) {
  char buf[200];
  snprintf(buf, sizeof buf, "%s", path);
  const cJSON *v = o;
  for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
    v = cJSON_GetObjectItemCaseSensitive(v, k);
  return v;
}

static const char *str_at(const cJSON *o, const char *path) {
  const cJSON *v = at(o, path);
  if (!cJSON_IsString(v)) fail_msg("%s is not a string", path);
  return v->valuestring;
}

static const cJSON *step_named(const cJSON *j, const char *name) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(j, "steps")) {
    if (strcmp(str_at(s, "name"), name) == 0) return s;
  }
  fail_msg("no step '%s'", name);
  return NULL;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Poll `workflow describe` until the latest run of wfid has status (e.g.
 * "CANCELED"), up to WAIT_MS. */
static void await_status(const char *wfid, const char *status) {
  char want[64];
  snprintf(want, sizeof want, "status        %s", status);
  int64_t end = now_ms() + WAIT_MS;
  for (;;) {
    char *out = NULL;
    int rc = durabox(&out, NULL, "workflow", "describe", "--workflow-id", wfid, NULL);
    int ok = rc == 0 && out && strstr(out, want);
    free(out);
    if (ok) return;
    if (now_ms() > end) fail_msg("workflow %s never reached %s", wfid, status);
    usleep(100 * 1000);
  }
}

#define WRITE_ONE "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\\n\"}]}"
#define CAT_A "{\"steps\":[{\"name\":\"cat\",\"kind\":\"exec\",\"command\":\"cat a.txt\"}]}"

/* Turn 1 writes, turn 2 reads it in the same sandbox; turn 3 by `durabox run`. */
static void test_turns_share_the_sandbox(void **state) {
  (void)state;
  turn_out t1 = execute_turn("sess-a", "sq", WRITE_ONE);
  if (t1.rc != 0 || t1.result == NULL) fail_msg("turn 1 exited %d: %s\n%s", t1.rc, t1.err, t1.out);
  assert_int_equal(t1.turn, 1);
  assert_non_null(t1.run_id);
  assert_string_equal(str_at(t1.result, "status"), "completed");
  assert_int_equal((int)at(t1.result, "session.turn")->valuedouble, 1);
  assert_true(cJSON_IsNull(at(t1.result, "session.previous_run_id")));
  assert_string_equal(str_at(t1.result, "session.id"), "sess-a");
  const char *sb1 = str_at(t1.result, "session_state.sandbox.id");
  assert_string_equal(str_at(t1.result, "sandbox_id"), sb1);
  assert_string_equal(str_at(t1.result, "session_state.sandbox.driver"), "local");
  assert_string_equal(str_at(t1.result, "session_state.sandbox.owner_run_id"), t1.run_id);
  assert_true(cJSON_IsTrue(at(t1.result, "sandbox_kept")));
  const char *path = str_at(t1.result, "sandbox_path");
  assert_true(is_dir(path)); /* kept at the end of the turn */

  turn_out t2 = execute_turn("sess-a", "sq", CAT_A);
  if (t2.rc != 0 || t2.result == NULL) fail_msg("turn 2 exited %d: %s\n%s", t2.rc, t2.err, t2.out);
  assert_int_equal(t2.turn, 2);
  assert_int_equal((int)at(t2.result, "session.turn")->valuedouble, 2);
  assert_string_equal(str_at(t2.result, "session.previous_run_id"), t1.run_id);
  assert_string_not_equal(t2.run_id, t1.run_id);
  assert_string_equal(str_at(step_named(t2.result, "cat"), "stdout"), "one\n");
  assert_string_equal(str_at(t2.result, "session_state.sandbox.id"), sb1);
  assert_string_equal(str_at(t2.result, "session_state.sandbox.owner_run_id"), t1.run_id);
  assert_string_equal(str_at(t2.result, "sandbox_path"), path);

  /* the input turn 2 got, as the service recorded it */
  char *out = NULL;
  assert_int_equal(durabox(&out, NULL, "workflow", "show", "--workflow-id", "sess-a", "--run-id", t2.run_id,
                           "--output", "json", NULL), 0);
  assert_non_null(strstr(out, "previous_run_id"));
  assert_non_null(strstr(out, t1.run_id));
  free(out);

  /* turn 3 by durabox run against the same service */
  char *file = dbx_asprintf("%s/turn3.json", g_tmp);
  dbx_svct_file_write(file, "{\"steps\":[{\"name\":\"more\",\"kind\":\"exec\","
                            "\"command\":\"echo three >> a.txt && cat a.txt\"}]}");
  char *err = NULL;
  out = NULL;
  int rc = durabox(&out, &err, "run", file, "--session", "sess-a", "--task-queue", "sq", "--address", g_addr,
                   "--output", "json", NULL);
  if (rc != 0) fail_msg("durabox run --session exited %d: %s\n%s", rc, err, out);
  cJSON *r3 = cJSON_Parse(out);
  assert_non_null(r3);
  assert_int_equal((int)at(r3, "session.turn")->valuedouble, 3);
  assert_string_equal(str_at(r3, "session.previous_run_id"), t2.run_id);
  assert_string_equal(str_at(step_named(r3, "more"), "stdout"), "one\nthree\n");
  assert_string_equal(str_at(r3, "session_state.sandbox.id"), sb1);
  cJSON_Delete(r3);
  free(out);
  free(err);

  /* --session with the embedded service and no store: refused before anything starts */
  out = err = NULL;
  char *argv[] = {(char *)dbx_test_bin(), "run", file, "--session", "sess-a", NULL};
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", NULL};
  assert_int_equal(dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, &out, &err), 2);
  assert_non_null(strstr(err, "--db-filename"));
  free(out);
  free(err);
  free(file);
  turn_free(&t1);
  turn_free(&t2);
}

/* A failed and a cancelled turn are skipped as parents; an open turn refuses the next. */
static void test_failed_and_cancelled_turns_are_skipped(void **state) {
  (void)state;
  turn_out t1 = execute_turn("sess-b", "sq", WRITE_ONE);
  if (t1.rc != 0 || t1.result == NULL) fail_msg("turn 1 exited %d: %s\n%s", t1.rc, t1.err, t1.out);
  char *sb1 = strdup(str_at(t1.result, "session_state.sandbox.id"));

  /* a failed turn: the workflow fails (a step kind Script does not know) */
  turn_out tf = execute_turn("sess-b", "sq", "{\"steps\":[{\"name\":\"x\",\"kind\":\"nope\"}]}");
  assert_int_equal(tf.rc, 1);
  assert_int_equal(tf.turn, 2);
  assert_null(tf.result);
  assert_non_null(strstr(tf.err, "WorkflowExecutionFailed"));
  await_status("sess-b", "FAILED");

  /* a turn that waits; while it runs, another is refused */
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "start", "--session", "sess-b", "--type", "durabox.Script",
                   "--task-queue", "sq", "--output", "json", "--input",
                   "{\"steps\":[{\"name\":\"mark\",\"kind\":\"exec\",\"command\":\"echo c >> a.txt\"},"
                   "{\"name\":\"wait\",\"kind\":\"sleep\",\"seconds\":600}]}",
                   NULL);
  if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
  cJSON *st = cJSON_Parse(out);
  assert_non_null(st);
  assert_int_equal((int)at(st, "turn")->valuedouble, 2); /* the failed one did not count */
  assert_string_equal(str_at(st, "previousRunId"), t1.run_id);
  char *cancelled_run = strdup(str_at(st, "runId"));
  cJSON_Delete(st);
  free(out);
  free(err);
  turn_out busy = execute_turn("sess-b", "sq", CAT_A);
  assert_int_equal(busy.rc, 1);
  char want[200];
  snprintf(want, sizeof want, "session sess-b: turn 2 (run %s) is still running", cancelled_run);
  if (strstr(busy.err, want) == NULL) fail_msg("no '%s' in: %s", want, busy.err);
  assert_null(busy.result);

  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "cancel", "--workflow-id", "sess-b", NULL), 0);
  free(out);
  free(err);
  await_status("sess-b", "CANCELED");

  /* the next turn continues from turn 1, in the sandbox the cancelled turn left */
  turn_out t3 = execute_turn("sess-b", "sq", CAT_A);
  if (t3.rc != 0 || t3.result == NULL) fail_msg("turn 3 exited %d: %s\n%s", t3.rc, t3.err, t3.out);
  assert_int_equal(t3.turn, 2);
  assert_string_equal(str_at(t3.result, "session.previous_run_id"), t1.run_id);
  assert_string_equal(str_at(t3.result, "session_state.sandbox.id"), sb1);
  /* the workspace is the session's: what the cancelled turn did stays */
  const char *cat = str_at(step_named(t3.result, "cat"), "stdout");
  assert_true(strncmp(cat, "one\n", 4) == 0);

  /* and one more: turn 3 now, after the last completed one */
  turn_out t4 = execute_turn("sess-b", "sq", CAT_A);
  assert_int_equal(t4.rc, 0);
  assert_int_equal(t4.turn, 3);
  assert_string_equal(str_at(t4.result, "session.previous_run_id"), t3.run_id);
  free(sb1);
  free(cancelled_run);
  turn_free(&t1);
  turn_free(&tf);
  turn_free(&busy);
  turn_free(&t3);
  turn_free(&t4);
}

/* The verdict `sandbox list` gives sandbox id ("" when it is not listed). */
static char *verdict_of(const char *id) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "sandbox", "list", "--sandbox-home", g_home, "--output", "json", NULL);
  if (rc != 0) fail_msg("sandbox list exited %d: %s", rc, err);
  cJSON *j = cJSON_Parse(out);
  assert_non_null(j);
  char *v = strdup("");
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "sandboxes")) {
    if (strcmp(str_at(e, "id"), id) == 0) {
      free(v);
      v = strdup(str_at(e, "verdict"));
    }
  }
  cJSON_Delete(j);
  free(out);
  free(err);
  return v;
}

static void assert_verdict(const char *id, const char *want) {
  char *v = verdict_of(id);
  if (strcmp(v, want) != 0) fail_msg("sandbox %s: verdict '%s', want '%s'", id, v, want);
  free(v);
}

/* Sandbox id's owner state and verdict as `sandbox list` against addr says. */
static void assert_verdict_at(const char *id, const char *addr, const char *owner, const char *want) {
  char *out = NULL, *err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "list", "--sandbox-home", g_home, "--address", addr,
                           "--output", "json", NULL), 0);
  cJSON *lj = cJSON_Parse(out);
  const cJSON *row, *found = NULL;
  cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(lj, "sandboxes"))
    if (strcmp(str_at(row, "id"), id) == 0) found = row;
  if (found == NULL) fail_msg("sandbox %s not listed: %s", id, out);
  if (strcmp(str_at(found, "owner_state"), owner) != 0 || strcmp(str_at(found, "verdict"), want) != 0)
    fail_msg("sandbox %s at %s: owner %s verdict %s, want %s %s", id, addr, str_at(found, "owner_state"),
             str_at(found, "verdict"), owner, want);
  cJSON_Delete(lj);
  free(out);
  free(err);
}

/* gc leaves a session's sandbox; a removed one fails the next turn, named. */
static void test_gc_and_removed_sandbox(void **state) {
  (void)state;
  turn_out t1 = execute_turn("sess-c", "sq", WRITE_ONE);
  if (t1.rc != 0 || t1.result == NULL) fail_msg("turn 1 exited %d: %s\n%s", t1.rc, t1.err, t1.out);
  const char *id = str_at(t1.result, "session_state.sandbox.id"), *path = str_at(t1.result, "sandbox_path");
  assert_verdict(id, "kept"); /* the newest completed turn names it */
  char *out = NULL, *err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "gc", "--sandbox-home", g_home, NULL), 0);
  free(out);
  free(err);
  assert_true(is_dir(path));
  /* asked of a service that does not know the session, it is still kept */
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  dbx_service *other = NULL;
  assert_int_equal(dbx_service_start(&so, &other, NULL), DBX_OK);
  char other_addr[64];
  snprintf(other_addr, sizeof other_addr, "127.0.0.1:%d", dbx_service_port(other));
  assert_verdict_at(id, other_addr, "not_found", "kept");
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "gc", "--sandbox-home", g_home, "--address", other_addr, NULL), 0);
  free(out);
  free(err);
  /* nor when that service has a workflow of the session's id of its own */
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "start", "--address", other_addr, "--workflow-id", "sess-c",
                           "--type", "no.Worker", "--task-queue", "nobody", NULL), 0);
  free(out);
  free(err);
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "terminate", "--address", other_addr, "--workflow-id", "sess-c",
                           NULL), 0);
  free(out);
  free(err);
  assert_verdict_at(id, other_addr, "not_found", "kept");
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "gc", "--sandbox-home", g_home, "--address", other_addr, NULL), 0);
  free(out);
  free(err);
  dbx_service_stop(other);
  assert_true(is_dir(path));
  turn_out t2 = execute_turn("sess-c", "sq", CAT_A);
  assert_int_equal(t2.rc, 0);
  assert_string_equal(str_at(step_named(t2.result, "cat"), "stdout"), "one\n");

  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "rm", id, "--sandbox-home", g_home, NULL), 0);
  free(out);
  free(err);
  assert_false(is_dir(path));
  turn_out t3 = execute_turn("sess-c", "sq", CAT_A);
  assert_int_equal(t3.rc, 1);
  assert_int_equal(t3.turn, 3);
  if (strstr(t3.err, id) == NULL) fail_msg("the failure does not name %s: %s", id, t3.err);
  out = NULL;
  assert_int_equal(durabox(&out, NULL, "workflow", "show", "--workflow-id", "sess-c", "--run-id", t3.run_id,
                           "--output", "json", NULL), 0);
  assert_non_null(strstr(out, "SandboxNotFound"));
  free(out);
  turn_free(&t1);
  turn_free(&t2);
  turn_free(&t3);
}

/* A sandbox no turn of its session needs any more (a cancelled first
 * turn's) is orphaned and collected; the one of the newest completed turn,
 * and one a running turn uses, are not. */
static void test_gc_collects_what_no_turn_needs(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "start", "--session", "sess-e", "--type", "durabox.Script",
                   "--task-queue", "sq", "--input",
                   "{\"steps\":[{\"name\":\"wait\",\"kind\":\"sleep\",\"seconds\":600}]}", NULL);
  if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
  free(out);
  free(err);
  /* its sandbox, once sandbox.create made it */
  char *id = NULL;
  int64_t end = now_ms() + WAIT_MS;
  while (id == NULL) {
    out = NULL;
    assert_int_equal(durabox(&out, NULL, "sandbox", "list", "--sandbox-home", g_home, "--output", "json", NULL), 0);
    cJSON *j = cJSON_Parse(out);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "sandboxes")) {
      const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "workflow_id");
      if (cJSON_IsString(w) && strcmp(w->valuestring, "sess-e") == 0) id = strdup(str_at(e, "id"));
    }
    cJSON_Delete(j);
    free(out);
    if (id == NULL && now_ms() > end) fail_msg("the turn of sess-e made no sandbox");
    if (id == NULL) usleep(100 * 1000);
  }
  assert_verdict(id, "live");
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "cancel", "--workflow-id", "sess-e", NULL), 0);
  free(out);
  free(err);
  await_status("sess-e", "CANCELED");
  assert_verdict(id, "orphaned"); /* no completed turn names it */

  turn_out t = execute_turn("sess-e", "sq", WRITE_ONE);
  if (t.rc != 0 || t.result == NULL) fail_msg("turn exited %d: %s\n%s", t.rc, t.err, t.out);
  assert_int_equal(t.turn, 1); /* the cancelled one did not count */
  const char *mine = str_at(t.result, "session_state.sandbox.id");
  assert_string_not_equal(mine, id); /* a fresh sandbox: the cancelled turn was never a parent */
  assert_verdict(mine, "kept");
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "gc", "--sandbox-home", g_home, NULL), 0);
  free(out);
  free(err);
  char *v = verdict_of(id);
  assert_string_equal(v, ""); /* collected */
  free(v);
  assert_true(is_dir(str_at(t.result, "sandbox_path"))); /* left */

  /* while a turn runs in it, the session's sandbox is held (and rm refuses it) */
  out = err = NULL;
  rc = durabox(&out, &err, "workflow", "start", "--session", "sess-e", "--type", "durabox.Script",
               "--task-queue", "sq", "--input",
               "{\"steps\":[{\"name\":\"wait\",\"kind\":\"sleep\",\"seconds\":600}]}", NULL);
  if (rc != 0) fail_msg("workflow start exited %d: %s", rc, err);
  free(out);
  free(err);
  assert_verdict(mine, "held");
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "sandbox", "rm", mine, "--sandbox-home", g_home, NULL), 1);
  assert_non_null(strstr(err, "running"));
  free(out);
  free(err);
  assert_true(is_dir(str_at(t.result, "sandbox_path")));
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "terminate", "--workflow-id", "sess-e", NULL), 0);
  free(out);
  free(err);
  free(id);
  turn_free(&t);
}

/* `workflow execute` of a Script input as given (no --session): the
 * stderr of a turn that must fail, which the caller frees. */
static char *execute_failing(const char *wfid, const char *input) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "execute", "--workflow-id", wfid, "--type", "durabox.Script",
                   "--task-queue", "sq", "--input", input, NULL);
  if (rc != 1) fail_msg("workflow execute %s exited %d, want 1: %s\n%s", wfid, rc, err, out);
  free(out);
  return err;
}

/* Bad session fields and sandboxes a turn may not re-open, each named. */
static void test_reopen_refusals(void **state) {
  (void)state;
  turn_out t1 = execute_turn("sess-f", "sq", WRITE_ONE);
  if (t1.rc != 0 || t1.result == NULL) fail_msg("turn 1 exited %d: %s\n%s", t1.rc, t1.err, t1.out);
  const char *id = str_at(t1.result, "session_state.sandbox.id");
  char *in = NULL, *err = NULL, want[300];

  /* made by another driver than this worker's */
  in = dbx_asprintf("{\"session\":{\"id\":\"sess-f\",\"turn\":2,\"previous_run_id\":\"%s\","
                    "\"state\":{\"sandbox\":{\"id\":\"%s\",\"driver\":\"daytona\"}}},%s",
                    t1.run_id, id, CAT_A + 1);
  err = execute_failing("sess-f", in);
  snprintf(want, sizeof want, "sandbox '%s' was made by the daytona driver; this worker's is local", id);
  if (strstr(err, want) == NULL) fail_msg("no '%s' in: %s", want, err);
  free(err);
  free(in);

  /* another workflow's sandbox */
  in = dbx_asprintf("{\"session\":{\"id\":\"sess-g\",\"turn\":2,\"previous_run_id\":null,"
                    "\"state\":{\"sandbox\":{\"id\":\"%s\",\"driver\":\"local\"}}},%s",
                    id, CAT_A + 1);
  err = execute_failing("sess-g", in);
  snprintf(want, sizeof want, "sandbox '%s' belongs to workflow 'sess-f', not 'sess-g'", id);
  if (strstr(err, want) == NULL) fail_msg("no '%s' in: %s", want, err);
  free(err);
  free(in);
  char *out = NULL;
  assert_int_equal(durabox(&out, NULL, "workflow", "show", "--workflow-id", "sess-g", "--output", "json", NULL), 0);
  assert_non_null(strstr(out, "SandboxConflict"));
  free(out);

  /* session fields the Script checks before anything runs */
  static const char *const bad[][2] = {
      {"{\"id\":\"sess-h\",\"turn\":0,\"previous_run_id\":null,\"state\":null}", "session.turn"},
      {"{\"id\":\"\",\"turn\":1,\"previous_run_id\":null,\"state\":null}", "session.id"},
      {"{\"id\":\"sess-h\",\"turn\":1,\"previous_run_id\":null,\"state\":[]}", "session.state"},
      {"{\"id\":\"sess-h\",\"turn\":1,\"state\":{\"sandbox\":{\"driver\":\"local\"}}}",
       "session.state.sandbox"},
      {"{\"id\":\"sess-h\",\"turn\":1,\"who\":1}", "unknown field \"who\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    in = dbx_asprintf("{\"session\":%s,%s", bad[i][0], CAT_A + 1);
    err = execute_failing("sess-h", in);
    if (strstr(err, bad[i][1]) == NULL) fail_msg("input %s: no '%s' in: %s", in, bad[i][1], err);
    free(err);
    free(in);
  }
  /* and the CLI's own refusals, before any call */
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "start", "--session", "it's", "--type", "durabox.Script",
                           "--task-queue", "sq", "--input", CAT_A, NULL), 2);
  assert_non_null(strstr(err, "--session"));
  free(out);
  free(err);
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "start", "--session", "sess-f", "--type", "durabox.Script",
                           "--task-queue", "sq", "--input", "[1]", NULL), 2);
  assert_non_null(strstr(err, "JSON object"));
  free(out);
  free(err);
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "start", "--session", "sess-f", "--workflow-id", "other",
                           "--type", "durabox.Script", "--task-queue", "sq", "--input", CAT_A, NULL), 2);
  free(out);
  free(err);
  out = err = NULL;
  assert_int_equal(durabox(&out, &err, "workflow", "start", "--session", "sess-f", "--type", "durabox.Script",
                           "--task-queue", "sq", "--input", "{\"session\":1,\"steps\":[]}", NULL), 2);
  assert_non_null(strstr(err, "of its own"));
  free(out);
  free(err);
  /* none of these started a turn: the next one is turn 2 after turn 1 */
  turn_out t2 = execute_turn("sess-f", "sq", CAT_A);
  assert_int_equal(t2.rc, 0);
  assert_int_equal(t2.turn, 2);
  assert_string_equal(str_at(t2.result, "session.previous_run_id"), t1.run_id);
  turn_free(&t1);
  turn_free(&t2);
}

/* A session over the fake Daytona server: turn 2 re-opens turn 1's sandbox. */
static void test_session_on_fake_daytona(void **state) {
  (void)state;
  dbx_fake_daytona fake;
  char *dt_tmp = dbx_test_tmpdir("itses-dt"), *dt_wrk = dbx_test_tmpdir("itses-dtw");
  if (dbx_fake_daytona_start(&fake, dt_tmp) != 0) fail_msg("%s", fake.why);
  assert_int_equal(dbx_fake_daytona_faults(&fake, "{\"transition_ms\":30}"), 0);
  char env_url[200];
  snprintf(env_url, sizeof env_url, "DAYTONA_API_URL=%s", fake.api_url);
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", g_addr, "--task-queue", "dq",
                  "--db", dt_wrk, "--sandbox", "daytona", "--log-level", "error", NULL};
  char *env[] = {env_url, "DAYTONA_API_KEY=" DBX_FAKE_DAYTONA_KEY, NULL};
  pid_t w = dbx_svct_proc_spawn(argv, env, NULL, NULL);

  turn_out t1 = execute_turn("sess-d", "dq", WRITE_ONE);
  if (t1.rc != 0 || t1.result == NULL) fail_msg("turn 1 exited %d: %s\n%s", t1.rc, t1.err, t1.out);
  assert_string_equal(str_at(t1.result, "session_state.sandbox.driver"), "daytona");
  /* Daytona stops an idle sandbox (autoStopInterval): stopped between the turns */
  char *url = dbx_asprintf("%s/sandbox/%s/stop", fake.api_url, str_at(t1.result, "session_state.sandbox.id"));
  char *cargv[] = {"/usr/bin/curl", "-sSf", "-X", "POST", "-H", "Authorization: Bearer " DBX_FAKE_DAYTONA_KEY, url, NULL};
  char *cout = NULL, *cerr = NULL;
  if (dbx_svct_proc_run(cargv, NULL, CMD_TIMEOUT_MS, &cout, &cerr) != 0) fail_msg("stop: %s %s", cout, cerr);
  free(cout);
  free(cerr);
  free(url);
  int64_t end = now_ms() + WAIT_MS;
  for (;;) {
    char *sbs = dbx_fake_daytona_call(&fake, "GET", "/_control/sandboxes", NULL);
    int stopped = sbs && strstr(sbs, "\"stopped\"") != NULL;
    free(sbs);
    if (stopped) break;
    if (now_ms() > end) fail_msg("the fake never stopped the sandbox");
    usleep(50 * 1000);
  }
  turn_out t2 = execute_turn("sess-d", "dq", "{\"steps\":[{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"}]}");
  if (t2.rc != 0 || t2.result == NULL) fail_msg("turn 2 exited %d: %s\n%s", t2.rc, t2.err, t2.out);
  assert_int_equal(t2.turn, 2);
  assert_string_equal(str_at(t2.result, "session.previous_run_id"), t1.run_id);
  assert_string_equal(str_at(step_named(t2.result, "r"), "content"), "one\n");
  assert_string_equal(str_at(t2.result, "session_state.sandbox.id"), str_at(t1.result, "session_state.sandbox.id"));

  char *log = dbx_fake_daytona_call(&fake, "GET", "/_control/log", NULL);
  assert_non_null(log);
  cJSON *lj = cJSON_Parse(log);
  free(log);
  int creates = 0, deletes = 0, starts = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(lj, "requests")) {
    const char *m = str_at(e, "method"), *p = str_at(e, "path");
    size_t pl = strlen(p);
    creates += strcmp(m, "POST") == 0 && strcmp(p, "/api/sandbox") == 0;
    deletes += strcmp(m, "DELETE") == 0 && strncmp(p, "/api/sandbox/", 13) == 0;
    starts += strcmp(m, "POST") == 0 && pl > 6 && strcmp(p + pl - 6, "/start") == 0;
  }
  cJSON_Delete(lj);
  assert_true(starts >= 1);     /* turn 2 started the stopped sandbox */
  assert_int_equal(creates, 1); /* and made none */
  assert_int_equal(deletes, 0); /* and neither turn removed it */
  dbx_svct_proc_kill(w, SIGKILL);
  dbx_fake_daytona_stop(&fake);
  dbx_test_rmrf(dt_tmp);
  dbx_test_rmrf(dt_wrk);
  free(dt_tmp);
  free(dt_wrk);
  turn_free(&t1);
  turn_free(&t2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_turns_share_the_sandbox),
      cmocka_unit_test(test_failed_and_cancelled_turns_are_skipped),
      cmocka_unit_test(test_gc_and_removed_sandbox),
      cmocka_unit_test(test_gc_collects_what_no_turn_needs),
      cmocka_unit_test(test_reopen_refusals),
      cmocka_unit_test(test_session_on_fake_daytona),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
