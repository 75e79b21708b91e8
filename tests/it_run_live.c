/* Integration test of issue 9's "retries where they help" and the live view,
 * through the durabox binary ($DBX_BIN) as a user runs it (`durabox run
 * FILE`: the embedded service and worker in that process, the local driver,
 * real commands):
 *  - a failure no retry mends (a repository that does not exist, a ref it
 *    lacks, git_commit where there is no repository) fails at its first
 *    attempt, typed, well under the 15 s the default retries would take;
 *  - an exec step with retry_on_exit runs again on a listed exit code,
 *    each retry shown as it happens (attempt N of M, the code, next in X s),
 *    and not on another code; an at_most_once step may not ask for it;
 *  - while a step runs, `durabox run` (stdout not a terminal) prints a plain
 *    status line with the elapsed time and a line the step printed, before
 *    the step's end, and no cursor control;
 *  - the progress query of a run on `durabox dev` shows a retry_on_exit
 *    wait (attempt, code, when the next run starts). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "tests/svc_client.h"

#define CMD_TIMEOUT_MS 150000

static char *g_home, *g_env_home, *g_dir;

static int setup(void **state) {
  (void)state;
  g_home = dbx_test_tmpdir("itlive-home");
  g_dir = dbx_test_tmpdir("itlive-files");
  g_env_home = dbx_asprintf("DURABOX_HOME=%s", g_home);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dbx_svct_proc_kill_all();
  dbx_test_rmrf(g_home);
  dbx_test_rmrf(g_dir);
  free(g_home);
  free(g_dir);
  free(g_env_home);
  return 0;
}

static char *input_file(const char *name, const char *text) {
  char *p = dbx_asprintf("%s/%s", g_dir, name);
  assert_non_null(p);
  dbx_svct_file_write(p, text);
  return p;
}

/* `durabox run FILE [extra]`; *secs: how long it took. */
static int run_file(const char *file, const char *extra, char **out, char **err, double *secs) {
  char *argv[] = {(char *)dbx_test_bin(), "run", (char *)file, (char *)extra, NULL};
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", "DURABOX_WORKER_DB", NULL};
  int64_t t0 = dbx_mono_ns();
  int rc = dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, out, err);
  if (secs) *secs = (double)(dbx_mono_ns() - t0) / 1e9;
  return rc;
}

/* The first line of text containing needle (malloc'd), or NULL. */
static char *line_with(const char *text, const char *needle) {
  const char *p = strstr(text, needle);
  if (p == NULL) return NULL;
  const char *b = p, *e = p;
  while (b > text && b[-1] != '\n') b--;
  while (*e && *e != '\n') e++;
  return dbx_strndup(b, (size_t)(e - b));
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The Script's result printed by --output json. */
static cJSON *result_json(const char *out) {
  cJSON *j = cJSON_Parse(out);
  if (j == NULL) fail_msg("not JSON: %s", out);
  return j;
}

static const cJSON *step_of(const cJSON *res, int i) {
  const cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "steps"), i);
  assert_non_null(s);
  return s;
}

static void test_run_unretryable_failures_fail_fast(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  double secs = 0;
  /* a repository that does not exist */
  char *in = dbx_asprintf("{\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s/no-such-repo\"}},"
                          "\"steps\":[]}", g_dir);
  char *f = input_file("norepo.json", in);
  int rc = run_file(f, NULL, &out, &err, &secs);
  if (rc != 1) fail_msg("exit %d\n%s\n%s", rc, out, err);
  char *l = line_with(err, "did not complete");
  if (l == NULL || strstr(l, "no-such-repo") == NULL || strstr(l, "(repository not found)") == NULL)
    fail_msg("stderr: %s", err);
  if (secs >= 10) fail_msg("took %.1f s: retried?", secs); /* 5 attempts: 1+2+4+8 s of backoff */
  assert_int_equal(count_of(out, "FAIL sandbox.create"), 1); /* one attempt */
  free(l);
  free(out);
  free(err);
  free(f);
  free(in);

  /* a ref the repository lacks */
  char *repo = dbx_asprintf("%s/repo", g_dir);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init", repo, repo);
  assert_int_equal(system(cmd), 0);
  in = dbx_asprintf("{\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\",\"ref\":\"no-such-ref\"}},"
                    "\"steps\":[]}", repo);
  f = input_file("badref.json", in);
  rc = run_file(f, NULL, &out, &err, &secs);
  if (rc != 1) fail_msg("exit %d\n%s\n%s", rc, out, err);
  l = line_with(err, "did not complete");
  if (l == NULL || strstr(l, "no-such-ref") == NULL || strstr(l, "(no such branch, tag or commit)") == NULL)
    fail_msg("stderr: %s", err);
  if (secs >= 10) fail_msg("took %.1f s: retried?", secs);
  free(l);
  free(out);
  free(err);
  free(f);
  free(in);
  free(cmd);
  free(repo);

  /* git_commit where the workspace is no repository: the step's own failure */
  f = input_file("norepo-commit.json",
                 "{\"steps\":[{\"name\":\"commit\",\"kind\":\"git_commit\",\"message\":\"m\"}]}");
  rc = run_file(f, "--output=json", &out, &err, &secs);
  if (rc != 1) fail_msg("exit %d\n%s\n%s", rc, out, err);
  cJSON *res = result_json(out);
  const cJSON *st = step_of(res, 0);
  const char *e = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "error"));
  if (e == NULL || strncmp(e, "NotAGitRepository: ", 19) != 0 || strstr(e, "not a git repository") == NULL)
    fail_msg("error: %s", e ? e : "(none)");
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(st, "attempts")->valueint, 1);
  if (secs >= 10) fail_msg("took %.1f s: retried?", secs);
  cJSON_Delete(res);
  free(out);
  free(err);
  free(f);
}

/* A command that fails until its third run (a counter in the workspace). */
#define FLAKY "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; echo run-$n; [ $n -ge 3 ]"

static void test_run_retry_on_exit(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  char *f = input_file("flaky.json",
                       "{\"steps\":[{\"name\":\"flaky\",\"kind\":\"exec\",\"command\":\"" FLAKY "\","
                       "\"retry_on_exit\":{\"codes\":[1],\"max_attempts\":4,\"backoff_s\":0.5}}]}");
  char *argv[] = {(char *)dbx_test_bin(), "run", f, "--workflow-id", "live-flaky", NULL};
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", "DURABOX_WORKER_DB", NULL};
  int rc = dbx_svct_proc_run(argv, env, CMD_TIMEOUT_MS, &out, &err);
  if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
  /* each retry as it happened, before the next run's start */
  const char *r1 = strstr(out, "RETRY flaky: attempt 1 of 4 exited with code 1 (retry_on_exit); next in 0.5 s\n");
  const char *r2 = strstr(out, "RETRY flaky: attempt 2 of 4 exited with code 1 (retry_on_exit); next in 0.5 s\n");
  if (r1 == NULL || r2 == NULL || r2 < r1) fail_msg("stdout:\n%s", out);
  assert_null(strstr(out, "attempt 3 of 4"));
  assert_int_equal(count_of(out, "sandbox.exec         flaky ..."), 3); /* three runs scheduled */
  char *l = line_with(out, "ran 3 times (retry_on_exit)");
  if (l == NULL || strncmp(l, "flaky", 5) != 0) fail_msg("summary:\n%s", out);
  free(l);
  free(out);
  free(err);
  /* the loop is the workflow's: its history (markers, timers, three execs)
   * replays to the same commands */
  char *rargv[] = {(char *)dbx_test_bin(), "replay", "--workflow-id", "live-flaky", NULL};
  rc = dbx_svct_proc_run(rargv, env, CMD_TIMEOUT_MS, &out, &err);
  if (rc != 0 || strstr(out, "deterministic: ") == NULL)
    fail_msg("replay exited %d\n%s\n%s", rc, out, err);
  free(out);
  free(err);
  /* the result says it too */
  rc = run_file(f, "--output=json", &out, &err, NULL);
  if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
  cJSON *res = result_json(out);
  const cJSON *st = step_of(res, 0);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "ok")));
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(st, "runs")->valueint, 3);
  char *codes = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(st, "retried_exit_codes"));
  assert_string_equal(codes, "[1,1]");
  free(codes);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "stdout")), "run-3\n");
  cJSON_Delete(res);
  free(out);
  free(err);
  free(f);

  /* a code it does not list: one run, the step fails */
  f = input_file("other-code.json",
                 "{\"steps\":[{\"name\":\"two\",\"kind\":\"exec\",\"command\":\"exit 2\","
                 "\"retry_on_exit\":{\"codes\":[1],\"max_attempts\":4,\"backoff_s\":0}}]}");
  rc = run_file(f, "--output=json", &out, &err, NULL);
  if (rc != 1) fail_msg("exit %d\n%s\n%s", rc, out, err);
  res = result_json(out);
  st = step_of(res, 0);
  assert_false(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "ok")));
  assert_null(cJSON_GetObjectItemCaseSensitive(st, "runs"));
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(st, "reason")), "exit code 2");
  cJSON_Delete(res);
  free(out);
  free(err);
  free(f);

  /* "any", every run failing: max_attempts runs in all, then the step fails */
  f = input_file("any.json",
                 "{\"steps\":[{\"name\":\"seven\",\"kind\":\"exec\",\"command\":\"exit 7\","
                 "\"retry_on_exit\":{\"codes\":\"any\",\"max_attempts\":2,\"backoff_s\":0}}]}");
  rc = run_file(f, NULL, &out, &err, NULL);
  if (rc != 1) fail_msg("exit %d\n%s\n%s", rc, out, err);
  if (strstr(out, "RETRY seven: attempt 1 of 2 exited with code 7 (retry_on_exit); next in 0 s\n") == NULL)
    fail_msg("stdout:\n%s", out);
  assert_null(strstr(out, "attempt 2 of 2"));
  l = line_with(out, "ran 2 times (retry_on_exit)");
  if (l == NULL || strstr(l, " NO ") == NULL) fail_msg("summary:\n%s", out);
  free(l);
  free(out);
  free(err);
  free(f);

  /* an at_most_once step may not ask for it: refused before anything starts */
  f = input_file("amo.json",
                 "{\"steps\":[{\"name\":\"once\",\"kind\":\"exec\",\"command\":\"true\","
                 "\"retry_class\":\"at_most_once\",\"retry_on_exit\":{\"codes\":\"any\",\"max_attempts\":2}}]}");
  rc = run_file(f, NULL, &out, &err, NULL);
  if (rc != 2) fail_msg("exit %d\n%s\n%s", rc, out, err);
  if (strstr(err, "step 'once': retry_on_exit runs the command again, which an at_most_once step "
                  "must never do") == NULL)
    fail_msg("stderr: %s", err);
  free(out);
  free(err);
  free(f);
}

static void test_run_live_status_while_running(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  char *f = input_file("ticks.json",
                       "{\"steps\":[{\"name\":\"ticks\",\"kind\":\"exec\",\"command\":"
                       "\"for i in 1 2 3 4 5 6 7 8; do echo tick-$i; sleep 1; done\"}]}");
  int rc = run_file(f, NULL, &out, &err, NULL);
  if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
  /* stdout is no terminal here: plain lines, no cursor control */
  assert_null(strstr(out, "\033["));
  const char *status = strstr(out, "  ...  sandbox.exec ticks: running 0:");
  const char *done = strstr(out, "  ok   sandbox.exec         ticks: exit 0");
  if (status == NULL || done == NULL || status > done) fail_msg("stdout:\n%s", out);
  char *l = line_with(status, "running");
  /* elapsed m:ss, at least 5 s in (one line per 5 s), and a line the step printed by then */
  int secs = -1, tick = -1;
  if (sscanf(l, "  ...  sandbox.exec ticks: running 0:%2d; last output: tick-%d", &secs, &tick) != 2 ||
      secs < 5 || tick < 1 || tick > 8)
    fail_msg("status line: '%s'", l);
  free(l);
  /* not more than one status line per five seconds of the step */
  double took = 0;
  assert_int_equal(sscanf(done, "  ok   sandbox.exec         ticks: exit 0 (%lf s)", &took), 1);
  int n = count_of(out, "  ...  sandbox.exec ticks: running");
  if (n < 1 || n > (int)(took / 5)) fail_msg("%d status lines in %.1f s:\n%s", n, took, out);
  free(out);
  free(err);
  free(f);
}

/* A step's output cannot steer the user's terminal: the escape sequences
 * and control bytes it prints (clear screen, window title, CR, a C1 CSI)
 * come out of `durabox run` shown, not obeyed; --output json keeps them
 * exact. */
static void test_run_output_cannot_steer_the_terminal(void **state) {
  (void)state;
  char *out = NULL, *err = NULL;
  char *f = input_file("esc.json",
                       "{\"steps\":[{\"name\":\"esc\",\"kind\":\"exec\",\"command\":"
                       "\"printf 'a\\\\033[2Jb\\\\033]0;pwn\\\\007c\\\\rd\\\\302\\\\233e\\\\n'\"}]}");
  int rc = run_file(f, NULL, &out, &err, NULL);
  if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
  if (strstr(out, "\033") || strstr(out, "\007") || strstr(out, "\r") || strstr(out, "\xc2\x9b"))
    fail_msg("a control byte reached stdout:\n%s", out);
  if (strstr(out, "a^[[2Jb^[]0;pwn^Gc^Md\xef\xbf\xbd" "e") == NULL) fail_msg("stdout:\n%s", out);
  /* and its own stop (worker first, then the embedded service) warns of nothing */
  if (strstr(err, "warn")) fail_msg("stderr of a clean run:\n%s", err);
  free(out);
  free(err);
  rc = run_file(f, "--output=json", &out, &err, NULL);
  if (rc != 0) fail_msg("exit %d\n%s\n%s", rc, out, err);
  cJSON *res = result_json(out);
  const cJSON *so = cJSON_GetObjectItemCaseSensitive(step_of(res, 0), "stdout");
  if (!cJSON_IsString(so) || strstr(so->valuestring, "a\033[2Jb\033]0;pwn\007c\rd") == NULL)
    fail_msg("json stdout: %s", out);
  cJSON_Delete(res);
  free(out);
  free(err);
  free(f);
}

/* The progress query shows a retry_on_exit wait: which run failed, its
 * code, when the next starts (against `durabox dev`, a real service and
 * worker process). */
static void test_run_progress_shows_exit_retry(void **state) {
  (void)state;
  char *sdb = dbx_test_tmpdir("itlive-s"), *wdb = dbx_test_tmpdir("itlive-w");
  int port = dbx_svct_free_port();
  char port_s[16], addr[64];
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", sdb,
                   "--worker-db", wdb, "--log-level", "warn", NULL};
  char *env[] = {g_env_home, "TEMPORAL_ADDRESS", "DURABOX_WORKER_DB", NULL};
  pid_t dev = dbx_svct_proc_spawn(dargv, env, NULL, NULL);
  dbx_rpc_channel_destroy(dbx_svct_connect(port));
  char *f = input_file("wait.json",
                       "{\"steps\":[{\"name\":\"three\",\"kind\":\"exec\",\"command\":\"exit 3\","
                       "\"retry_on_exit\":{\"codes\":[3],\"max_attempts\":3,\"backoff_s\":60}}]}");
  char *sargv[] = {(char *)dbx_test_bin(), "workflow", "start", "--type=durabox.Script",
                   "--task-queue=durabox", "--workflow-id=live-q", "--input-file", f, "--address",
                   addr, NULL};
  char *out = NULL, *err = NULL;
  int rc = dbx_svct_proc_run(sargv, env, CMD_TIMEOUT_MS, &out, &err);
  if (rc != 0) fail_msg("start exited %d: %s", rc, err);
  free(out);
  free(err);
  char *qargv[] = {(char *)dbx_test_bin(), "workflow", "query", "-w", "live-q", "--type",
                   "progress", "--address", addr, NULL};
  const cJSON *retry = NULL, *cur = NULL;
  cJSON *j = NULL;
  int64_t deadline = dbx_mono_ns() + 60 * 1000000000LL;
  while (retry == NULL && dbx_mono_ns() < deadline) {
    cJSON_Delete(j);
    j = NULL;
    rc = dbx_svct_proc_run(qargv, env, CMD_TIMEOUT_MS, &out, &err);
    if (rc == 0) j = cJSON_Parse(out);
    cur = cJSON_GetObjectItemCaseSensitive(j, "current");
    retry = cJSON_GetObjectItemCaseSensitive(cur, "retry");
    free(out);
    free(err);
    if (retry == NULL) {
      struct timespec d = {0, 200000000};
      nanosleep(&d, NULL);
    }
  }
  if (retry == NULL) fail_msg("the progress never showed the retry wait");
  int64_t now_ms = dbx_wall_ns() / 1000000;
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cur, "name")), "three");
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(cur, "run")->valueint, 2);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(cur, "max_runs")->valueint, 3);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(retry, "attempt")->valueint, 1);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(retry, "of")->valueint, 3);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(retry, "exit_code")->valueint, 3);
  assert_int_equal(cJSON_GetObjectItemCaseSensitive(retry, "backoff_s")->valueint, 60);
  double next = cJSON_GetObjectItemCaseSensitive(retry, "next_at_ms")->valuedouble;
  if (next < (double)now_ms || next > (double)now_ms + 61000)
    fail_msg("next_at_ms %.0f is not within the next 60 s of %lld", next, (long long)now_ms);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "steps")), 0);
  cJSON_Delete(j);
  char *targv[] = {(char *)dbx_test_bin(), "workflow", "terminate", "-w", "live-q", "--address",
                   addr, NULL};
  rc = dbx_svct_proc_run(targv, env, CMD_TIMEOUT_MS, &out, &err);
  if (rc != 0) fail_msg("terminate exited %d: %s", rc, err);
  free(out);
  free(err);
  dbx_svct_proc_kill(dev, SIGTERM);
  assert_int_equal(dbx_svct_proc_wait(dev, 30000), 0);
  dbx_test_rmrf(sdb);
  dbx_test_rmrf(wdb);
  free(sdb);
  free(wdb);
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_run_unretryable_failures_fail_fast),
      cmocka_unit_test(test_run_retry_on_exit),
      cmocka_unit_test(test_run_live_status_while_running),
      cmocka_unit_test(test_run_output_cannot_steer_the_terminal),
      cmocka_unit_test(test_run_progress_shows_exit_retry),
  };
  dbx_rpc_global_init();
  int failed = cmocka_run_group_tests_name("run_live", tests, setup, teardown);
  dbx_rpc_global_shutdown();
  return failed;
}
