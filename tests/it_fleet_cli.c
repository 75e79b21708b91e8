/* Integration tests of `durabox fleet run|status|cancel` (cli/fleet.c), as
 * processes, with DURABOX_HOME in a temporary directory and local sandboxes:
 *  - run with the embedded service and worker: plain progress lines (stdout
 *    is not a terminal), the table and the counts, exit 1 for a failed item;
 *    the same file again skips the items that succeeded; status --output
 *    json prints the result of the last run;
 *  - against a spawned server and worker: status of a running fleet, cancel
 *    from another process; the run command reports the fleet cancelled and
 *    no sandbox is left. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "tests/svc_client.h"

static char *g_dir, *g_env_home;

static int setup(void **st) {
  (void)st;
  g_dir = dbx_test_tmpdir("itfleetcli");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s/home", g_dir);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  dbx_svct_proc_kill_all();
  dbx_svct_server_kill_all();
  dbx_test_rmrf(g_dir);
  free(g_dir);
  free(g_env_home);
  return 0;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static char *write_fleet(const char *name, int n, const char *sleep_s, int bad) {
  char *path = dbx_asprintf("%s/%s.json", g_dir, name);
  char items[2048] = "";
  for (int i = 0; i < n; i++)
    snprintf(items + strlen(items), sizeof items - strlen(items),
             "%s{\"key\":\"i%d\",\"ok\":\"%s\"}", i ? "," : "", i, i == bad ? "no" : "yes");
  char *text = dbx_asprintf(
      "{\"items\":[%s],\"template\":{\"input\":{\"sandbox\":{},\"steps\":[{\"name\":\"t\","
      "\"kind\":\"exec\",\"command\":\"sleep %s; test {{ok}} = yes\"}]}}}", items, sleep_s);
  dbx_svct_file_write(path, text);
  free(text);
  return path;
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; p && (p = strstr(p, needle)); p++) n++;
  return n;
}

static int sandbox_count(void) {
  char d[1024];
  snprintf(d, sizeof d, "%s/home/sandboxes", g_dir);
  DIR *dir = opendir(d);
  if (dir == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dir))) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

static void test_fleet_cli_run_rerun_status(void **st) {
  (void)st;
  char *f = write_fleet("small", 4, "0.3", 2);
  char *env[] = {g_env_home, NULL};
  char *out = NULL, *err = NULL;
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--concurrency", "2", NULL};
  int rc = dbx_svct_proc_run(run, env, 120000, &out, &err);
  if (rc != 1) fail_msg("fleet run exited %d: %s %s", rc, out, err);
  assert_non_null(strstr(out, "fleet fleet-small (run "));
  assert_true(count_lines_with(out, "\nprogress: ") >= 1);
  assert_non_null(strstr(out, "ITEM "));
  assert_non_null(strstr(out, "step t: exit code 1"));
  assert_non_null(strstr(out, "fleet fleet-small completed: 3 succeeded, 1 failed, 0 cancelled, "
                              "0 skipped, 0 not started"));
  free(out);
  free(err);
  rc = dbx_svct_proc_run(run, env, 120000, &out, &err);
  assert_int_equal(rc, 1);
  assert_non_null(strstr(out, "completed: 0 succeeded, 1 failed, 0 cancelled, 3 skipped"));
  free(out);
  free(err);
  char *status[] = {(char *)dbx_test_bin(), "fleet", "status", "fleet-small", "--output", "json", NULL};
  rc = dbx_svct_proc_run(status, env, 60000, &out, &err);
  if (rc != 0) fail_msg("fleet status exited %d: %s", rc, err);
  cJSON *j = cJSON_Parse(out);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_int_equal((int)cJSON_GetObjectItem(j, "skipped")->valuedouble, 3);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "items")), 4);
  cJSON_Delete(j);
  free(out);
  free(err);
  /* a child of the fleet is a durabox.Script run: not a fleet */
  char *notfleet[] = {(char *)dbx_test_bin(), "fleet", "status", "fleet-small/i0", NULL};
  assert_int_equal(dbx_svct_proc_run(notfleet, env, 60000, &out, &err), 1);
  assert_non_null(strstr(err, "fleet-small/i0 is a durabox.Script run, not a durabox.Fleet"));
  free(out);
  free(err);
  /* with --output json the error is an object on stdout, as for every
   * command's json output */
  static const struct { const char *id, *type, *says; } errs[] = {
      {"fleet-small/i0", "NotAFleet", "fleet-small/i0 is a durabox.Script run, not a durabox.Fleet"},
      {"no-such-fleet", "not found", "workflow id no-such-fleet"}};
  for (size_t k = 0; k < 2; k++) {
    char *sj[] = {(char *)dbx_test_bin(), "fleet", "status", (char *)errs[k].id, "--output", "json", NULL};
    assert_int_equal(dbx_svct_proc_run(sj, env, 60000, &out, &err), 1);
    cJSON *ej = cJSON_Parse(out), *eo = cJSON_GetObjectItem(ej, "error");
    if (eo == NULL) fail_msg("fleet status %s --output json printed: %s", errs[k].id, out);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(eo, "type")), errs[k].type);
    assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(eo, "message")), errs[k].says));
    cJSON_Delete(ej);
    free(out);
    free(err);
  }
  /* as `durabox workflow cancel` on a closed run: named closed, exit 0 */
  char *cancel[] = {(char *)dbx_test_bin(), "fleet", "cancel", "fleet-small", NULL};
  assert_int_equal(dbx_svct_proc_run(cancel, env, 60000, &out, &err), 0);
  assert_non_null(strstr(out, "fleet fleet-small had already closed (Completed): nothing to cancel"));
  assert_null(strstr(out, "cancel requested"));
  free(out);
  free(err);
  char *bad[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--concurrency", "0", NULL};
  assert_int_equal(dbx_svct_proc_run(bad, env, 30000, NULL, NULL), 2);
  /* a file that is no JSON object is named for what it is, and nothing starts */
  static const struct { const char *text, *says; } files[] = {
      {"{\"template\": {\"input\"", "is not valid JSON (near byte 20)"},
      {"{\"items\": []} {}", "has data after the JSON document (at byte 14)"},
      {"[1, 2]", ": not a JSON object"},
  };
  char *bf = dbx_asprintf("%s/bad-fleet.json", g_dir);
  for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
    dbx_svct_file_write(bf, files[k].text);
    char *badf[] = {(char *)dbx_test_bin(), "fleet", "run", bf, NULL};
    assert_int_equal(dbx_svct_proc_run(badf, env, 30000, &out, &err), 2);
    if (strstr(err, files[k].says) == NULL) fail_msg("fleet run of '%s' said: %s", files[k].text, err);
    free(out);
    free(err);
  }
  free(bf);
  /* the worker's store named the service's default store ($DURABOX_HOME/fleet/service,
   * no --db-filename): refused before either is opened */
  char *wenv = dbx_asprintf("DURABOX_WORKER_DB=%s/home/fleet/service", g_dir);
  char *clash_env[] = {g_env_home, wenv, NULL};
  char *clash[] = {(char *)dbx_test_bin(), "fleet", "run", f, NULL};
  assert_int_equal(dbx_svct_proc_run(clash, clash_env, 30000, &out, &err), 2);
  if (strstr(err, "must be different folders") == NULL || strstr(err, "$DURABOX_WORKER_DB") == NULL)
    fail_msg("fleet run with the worker's store on the fleet's service store said: %s", err);
  free(out);
  free(err);
  free(wenv);
  assert_int_equal(sandbox_count(), 0);
  free(f);
}

static void test_fleet_cli_cancel_from_another_process(void **st) {
  (void)st;
  char *svc = dbx_asprintf("%s/svc", g_dir), *wdb = dbx_asprintf("%s/wdb", g_dir);
  int port = dbx_svct_free_port();
  dbx_svct_server_spawn(svc, port);
  dbx_rpc_channel_destroy(dbx_svct_connect(port)); /* it answers */
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char *env[] = {g_env_home, NULL};
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "durabox",
                   "--db", wdb, "--log-level", "error", NULL};
  dbx_svct_proc_spawn(wargv, env, NULL, NULL);
  char *f = write_fleet("long", 5, "60", -1);
  char *outp = dbx_asprintf("%s/run.out", g_dir), *errp = dbx_asprintf("%s/run.err", g_dir);
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--concurrency", "2", "--address", addr,
                 NULL};
  pid_t rp = dbx_svct_proc_spawn(run, env, outp, errp);
  char *status[] = {(char *)dbx_test_bin(), "fleet", "status", "fleet-long", "--address", addr, NULL};
  int running = 0;
  for (int64_t end = dbx_mono_ns() / 1000000 + 60000; !running && dbx_mono_ns() / 1000000 < end;) {
    char *out = NULL;
    if (dbx_svct_proc_run(status, env, 30000, &out, NULL) == 0 && strstr(out, "2 running") &&
        sandbox_count() == 2)
      running = 1;
    free(out);
    if (!running) pause_ms(100);
  }
  if (!running) {
    char *t = dbx_svct_file_read(outp), *e = dbx_svct_file_read(errp);
    fail_msg("the fleet did not reach 2 running items (sandboxes %d); fleet run printed: %s %s",
             sandbox_count(), t ? t : "(nothing)", e ? e : "");
  }
  char *cancel[] = {(char *)dbx_test_bin(), "fleet", "cancel", "fleet-long", "--address", addr, NULL};
  char *out = NULL;
  assert_int_equal(dbx_svct_proc_run(cancel, env, 30000, &out, NULL), 0);
  assert_non_null(strstr(out, "cancel requested"));
  free(out);
  assert_int_equal(dbx_svct_proc_wait(rp, 60000), 1);
  char *text = dbx_svct_file_read(outp);
  assert_non_null(text);
  assert_non_null(strstr(text, "fleet fleet-long cancelled: 0 succeeded, 0 failed, 2 cancelled, "
                               "0 skipped, 3 not started"));
  free(text);
  assert_int_equal(sandbox_count(), 0);
  free(outp);
  free(errp);
  free(f);
  free(svc);
  free(wdb);
}

/* A fleet whose items file is missing ends Failed: fleet run and fleet
 * status name the status and the failure (type, message); with --output
 * json a JSON object with the error is on stdout. */
static void test_fleet_cli_failed_fleet_named(void **st) {
  (void)st;
  char *f = dbx_asprintf("%s/nope.json", g_dir);
  dbx_svct_file_write(f, "{\"items_file\":\"nope.jsonl\",\"template\":{\"input\":{\"steps\":[]}}}");
  char *missing = dbx_asprintf("%s/nope.jsonl: No such file or directory", g_dir);
  char *env[] = {g_env_home, NULL};
  char *out = NULL, *err = NULL;
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", f, NULL};
  assert_int_equal(dbx_svct_proc_run(run, env, 120000, &out, &err), 1);
  assert_non_null(strstr(err, "fleet fleet-nope ended Failed without a result: ItemsUnreadable: "));
  assert_non_null(strstr(err, missing));
  assert_null(strstr(err, "status 3"));
  free(out);
  free(err);
  char *runj[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--output", "json", NULL};
  assert_int_equal(dbx_svct_proc_run(runj, env, 120000, &out, &err), 1);
  cJSON *j = cJSON_Parse(out);
  if (j == NULL) fail_msg("fleet run --output json printed: %s", out ? out : "(nothing)");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "fleet_id")), "fleet-nope");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "Failed");
  const cJSON *e = cJSON_GetObjectItem(j, "error");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), "ItemsUnreadable");
  assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(e, "message")), missing));
  cJSON_Delete(j);
  free(out);
  free(err);
  char *status[] = {(char *)dbx_test_bin(), "fleet", "status", "fleet-nope", NULL};
  assert_int_equal(dbx_svct_proc_run(status, env, 60000, &out, &err), 1);
  assert_non_null(strstr(err, "fleet fleet-nope ended Failed without a result: ItemsUnreadable"));
  free(out);
  free(err);
  free(missing);
  free(f);
}

/* Wait (to 60 s) until n sandboxes exist; fail naming what fleet run printed. */
static void wait_sandboxes(int n, const char *outp, const char *errp) {
  for (int64_t end = dbx_mono_ns() / 1000000 + 60000; dbx_mono_ns() / 1000000 < end; pause_ms(50))
    if (sandbox_count() == n) return;
  char *t = dbx_svct_file_read(outp), *e = dbx_svct_file_read(errp);
  fail_msg("%d sandboxes, want %d; fleet run printed: %s %s", sandbox_count(), n, t ? t : "", e ? e : "");
}

/* Spawn `fleet run f --id id --concurrency 2` (embedded), wait for 2 sandboxes, kill -9 it. */
static void run_and_kill(const char *f, const char *id) {
  char *env[] = {g_env_home, NULL};
  char *outp = dbx_asprintf("%s/%s.out", g_dir, id), *errp = dbx_asprintf("%s/%s.err", g_dir, id);
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", (char *)f, "--id", (char *)id,
                 "--concurrency", "2", NULL};
  pid_t p = dbx_svct_proc_spawn(run, env, outp, errp);
  wait_sandboxes(2, outp, errp);
  int ws = dbx_svct_proc_kill(p, SIGKILL); /* reaped */
  assert_true(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
  free(outp);
  free(errp);
}

/* A fleet run killed while its embedded worker ran the fleet: fleet status
 * says the fleet is open with no worker and how to resume it; a run with
 * another input is refused naming the field; the same FILE again follows the
 * open fleet to its end. */
static void test_fleet_cli_resume_after_kill(void **st) {
  (void)st;
  char *f = write_fleet("rk", 4, "2", -1);
  run_and_kill(f, "rk");
  char *env[] = {g_env_home, NULL};
  char *out = NULL, *err = NULL;
  char *status[] = {(char *)dbx_test_bin(), "fleet", "status", "rk", NULL};
  assert_int_equal(dbx_svct_proc_run(status, env, 60000, &out, &err), 0);
  assert_non_null(strstr(out, "fleet rk is open, but no worker runs it"));
  assert_non_null(strstr(out, "durabox fleet run FILE --id rk"));
  free(out);
  free(err);
  char *other[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--id", "rk", "--concurrency", "3", NULL};
  assert_int_equal(dbx_svct_proc_run(other, env, 60000, &out, &err), 2);
  assert_non_null(strstr(err, "fleet rk is still open from an earlier fleet run whose input differs "
                              "from this one in: concurrency"));
  free(out);
  free(err);
  /* on another task queue this run's worker would never see the fleet's tasks: refused, not a hang */
  char *otq[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--id", "rk", "--concurrency", "2", "--task-queue",
                 "other", NULL};
  assert_int_equal(dbx_svct_proc_run(otq, env, 60000, &out, &err), 2);
  if (!strstr(err, "fleet rk is still open from an earlier fleet run on task queue durabox, not other: resume it "
                   "with --task-queue durabox"))
    fail_msg("fleet run --task-queue other said: %s", err);
  free(out);
  free(err);
  char *etq[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--id", "", NULL};
  assert_int_equal(dbx_svct_proc_run(etq, env, 60000, &out, &err), 2);
  assert_non_null(strstr(err, "durabox fleet run: --id is empty"));
  free(out);
  free(err);
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--id", "rk", "--concurrency", "2", NULL};
  int rc = dbx_svct_proc_run(run, env, 180000, &out, &err);
  if (rc != 0) fail_msg("resuming fleet run exited %d: %s %s", rc, out, err);
  assert_non_null(strstr(out, "is still open from an earlier fleet run: following it; the embedded "
                              "worker of this fleet run serves it now"));
  assert_non_null(strstr(out, "fleet rk completed: 4 succeeded, 0 failed, 0 cancelled, 0 skipped, "
                              "0 not started"));
  assert_null(strstr(err, "ALREADY_EXISTS"));
  free(out);
  free(err);
  assert_int_equal(sandbox_count(), 0);
  free(f);
}

/* fleet cancel while no worker runs the fleet records the cancel and says
 * that nothing stops until the next fleet run; fleet status shows it
 * pending; the next fleet run finishes it: the fleet ends cancelled and no
 * sandbox is left. */
static void test_fleet_cli_cancel_without_worker(void **st) {
  (void)st;
  char *f = write_fleet("ck", 4, "60", -1);
  run_and_kill(f, "ck");
  char *env[] = {g_env_home, NULL};
  char *out = NULL, *err = NULL;
  char *cancel[] = {(char *)dbx_test_bin(), "fleet", "cancel", "ck", NULL};
  assert_int_equal(dbx_svct_proc_run(cancel, env, 60000, &out, &err), 0);
  assert_non_null(strstr(out, "fleet ck: cancel recorded, but no worker runs this fleet now, so "
                              "nothing stops yet"));
  assert_null(strstr(out, "cancel requested"));
  free(out);
  free(err);
  char *status[] = {(char *)dbx_test_bin(), "fleet", "status", "ck", NULL};
  assert_int_equal(dbx_svct_proc_run(status, env, 60000, &out, &err), 0);
  assert_non_null(strstr(out, "a cancel is pending"));
  free(out);
  free(err);
  char *run[] = {(char *)dbx_test_bin(), "fleet", "run", f, "--id", "ck", "--concurrency", "2", NULL};
  int rc = dbx_svct_proc_run(run, env, 180000, &out, &err);
  if (rc != 1) fail_msg("fleet run exited %d: %s %s", rc, out, err);
  assert_non_null(strstr(out, "with a cancel pending (durabox fleet cancel): following it to its end"));
  assert_non_null(strstr(out, "fleet ck cancelled: 0 succeeded, 0 failed, 2 cancelled, 0 skipped, "
                              "2 not started"));
  free(out);
  free(err);
  assert_int_equal(sandbox_count(), 0);
  free(f);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_fleet_cli_run_rerun_status, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fleet_cli_cancel_from_another_process, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fleet_cli_failed_fleet_named, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fleet_cli_resume_after_kill, setup, teardown),
      cmocka_unit_test_setup_teardown(test_fleet_cli_cancel_without_worker, setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
