/* Integration tests of "at_most_once holds whatever process dies" (issue 10)
 * for exec steps: the in-process embedded service, real `durabox worker`
 * processes (children), real bwrap sandboxes, real SIGKILL / SIGSTOP. Each
 * command counts its own starts in a file of its workspace (on the host: it
 * outlives every process of the run and is read from outside), so a second
 * start or a killed first copy shows there whatever durabox reports.
 *
 *   1. the exec supervisor of a running at_most_once command is killed: the
 *      step fails OutcomeUnknown ("the command may have run"), the command
 *      started once, and nothing of it runs afterwards;
 *   2. the same for a safe_to_retry command, without bubblewrap (so nothing
 *      kills the orphaned first copy but durabox): it is started again only
 *      once the first copy is dead (an outside flock would see them overlap);
 *   3. two workers on one task queue: the first is paused (SIGSTOP) past its
 *      heartbeat timeout, the second re-attaches, the first resumes: its
 *      stale attempt leaves the command alone (before: exit 137);
 *   4. one worker paused past the heartbeat timeout of an at_most_once step:
 *      the step says OutcomeUnknown, "may have run", not "Heartbeat timeout",
 *      and once the worker resumes the command is stopped;
 *   5. a sandbox removed from outside while a command runs: the step fails
 *      SandboxGone (non-retryable) and the command is stopped;
 *   6. the worker killed after git_commit's commit landed, before its result
 *      was recorded: the retry reports that commit's sha (one commit). */
#define _GNU_SOURCE
#include <errno.h>
#include <glob.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "protos/pb.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"

extern char **environ;

typedef struct {
  char *svc_dir, *home, *wrk[2];
  dbx_service *svc;
  char addr[64];
  dbx_client *c;
  pid_t worker[2];
} rig;

static rig g_rig; /* one test at a time; the teardown stops what a failed test left */

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static pid_t spawn_worker_fp(rig *r, int i, int unsandboxed, const char *failpoints) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", r->addr, "--task-queue", "amo",
                  "--db", r->wrk[i], "--sandbox-home", r->home, "--log-level", "error", NULL};
  size_t n = 0;
  while (environ[n]) n++;
  char **envp = calloc(n + 2, sizeof *envp);
  for (size_t k = 0; k < n; k++) envp[k] = environ[k];
  char *fp = failpoints ? dbx_asprintf("DURABOX_FAILPOINTS=%s", failpoints) : NULL;
  if (unsandboxed) envp[n] = "DURABOX_UNSANDBOXED=1";
  else if (fp) envp[n] = fp;
  pid_t pid = -1;
  assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, envp), 0);
  free(envp);
  free(fp);
  return pid;
}

static pid_t spawn_worker(rig *r, int i, int unsandboxed) {
  return spawn_worker_fp(r, i, unsandboxed, NULL);
}

static void rig_up(rig *r, int unsandboxed) {
  memset(r, 0, sizeof *r);
  dbx_rpc_global_init();
  r->svc_dir = dbx_test_tmpdir("iam-svc");
  r->home = dbx_test_tmpdir("iam-home");
  r->wrk[0] = dbx_test_tmpdir("iam-w0");
  r->wrk[1] = dbx_test_tmpdir("iam-w1");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = r->svc_dir;
  so.no_sync = 1;
  assert_int_equal(dbx_service_start(&so, &r->svc, NULL), DBX_OK);
  snprintf(r->addr, sizeof r->addr, "127.0.0.1:%d", dbx_service_port(r->svc));
  dbx_client_opts co = {0};
  co.address = r->addr;
  assert_int_equal(dbx_client_create(&co, &r->c), DBX_OK);
  r->worker[0] = spawn_worker(r, 0, unsandboxed);
  r->worker[1] = -1;
}

static void rig_down(rig *r) {
  if (r->svc == NULL) return; /* already down */
  for (int i = 0; i < 2; i++)
    if (r->worker[i] > 0) {
      kill(r->worker[i], SIGCONT);
      kill(r->worker[i], SIGKILL);
      waitpid(r->worker[i], NULL, 0);
    }
  dbx_client_destroy(r->c);
  dbx_service_stop(r->svc);
  char *all[] = {r->svc_dir, r->home, r->wrk[0], r->wrk[1]};
  for (int i = 0; i < 4; i++) {
    dbx_test_rmrf(all[i]);
    free(all[i]);
  }
  dbx_rpc_global_shutdown();
  memset(r, 0, sizeof *r);
}

/* After every test, also one that failed half-way: no worker outlives it. */
static int rig_teardown(void **state) {
  (void)state;
  rig_down(&g_rig);
  return 0;
}

/* Contents of the first file matching home/pattern, or NULL. */
static char *read_glob(const char *home, const char *pattern) {
  char *pat = dbx_asprintf("%s/%s", home, pattern);
  glob_t g;
  char *out = NULL;
  if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
    FILE *f = fopen(g.gl_pathv[0], "r");
    if (f != NULL) {
      char buf[512] = {0};
      size_t n = fread(buf, 1, sizeof buf - 1, f);
      fclose(f);
      out = dbx_strndup(buf, n);
    }
  }
  globfree(&g);
  free(pat);
  return out;
}

/* Poll (every 20 ms, up to ms) until home/pattern holds exactly want. */
static int wait_content(const char *home, const char *pattern, const char *want, int ms) {
  for (int t = 0; t <= ms; t += 20) {
    char *m = read_glob(home, pattern);
    int same = m && strcmp(m, want) == 0;
    free(m);
    if (same) return 1;
    nap_ms(20);
  }
  return 0;
}

/* The pid recorded in the command's "supervisor" or "pgid" file. */
static long recorded_pid(const char *home, const char *file) {
  char *pat = dbx_asprintf("sandboxes/*/meta/cmds/*/%s", file);
  char *t = NULL;
  for (int i = 0; i < 500 && (t == NULL || *t == '\0'); i++) {
    free(t);
    t = read_glob(home, pat);
    if (t == NULL || *t == '\0') nap_ms(20);
  }
  free(pat);
  long pid = t ? strtol(t, NULL, 10) : 0;
  free(t);
  return pid;
}

/* 1 once no process of group pgid is left (polled up to ms). */
static int group_gone(long pgid, int ms) {
  for (int t = 0; t <= ms; t += 20) {
    if (kill(-(pid_t)pgid, 0) != 0 && errno == ESRCH) return 1;
    nap_ms(20);
  }
  return 0;
}

static char *start(rig *r, const char *wid, const char *input) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = "durabox.Script";
  o.task_queue = "amo";
  o.input_json = input;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(r->c, &o, &rid, NULL), DBX_OK);
  return rid;
}

static cJSON *result(rig *r, const char *wid, const char *rid) {
  char *txt = dbx_svct_await_result(r->c, wid, rid, 12);
  cJSON *j = cJSON_Parse(txt);
  free(txt);
  assert_non_null(j);
  return j;
}

static cJSON *step0(cJSON *j) { return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "steps"), 0); }

static const char *step_error(cJSON *j) {
  const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(step0(j), "error"));
  return e ? e : "";
}

#define N_TXT "sandboxes/*/workspace/n.txt"

/* 1. */
static void test_amo_supervisor_killed_outcome_unknown(void **state) {
  (void)state;
  rig_up(&g_rig, 0);
  char *rid = start(&g_rig, "amo-sup",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"send\",\"kind\":\"exec\","
                    "\"retry_class\":\"at_most_once\",\"command\":\"echo start >> n.txt; sleep 6; "
                    "echo end >> n.txt\",\"timeout_s\":60,\"heartbeat_timeout_s\":5}]}");
  assert_true(wait_content(g_rig.home, N_TXT, "start\n", 60000));
  long sup = recorded_pid(g_rig.home, "supervisor"), grp = recorded_pid(g_rig.home, "pgid");
  assert_true(sup > 1);
  assert_true(grp > 1);
  assert_int_equal(kill((pid_t)sup, SIGKILL), 0);
  cJSON *j = result(&g_rig, "amo-sup", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  assert_non_null(strstr(step_error(j), "OutcomeUnknown"));
  assert_non_null(strstr(step_error(j), "may have run"));
  assert_int_equal((int)cJSON_GetObjectItem(step0(j), "attempts")->valuedouble, 1);
  cJSON_Delete(j);
  /* nothing of the command is left, and it started exactly once: past the
   * time its first copy would have written "end", the file has one line */
  assert_true(group_gone(grp, 10000));
  nap_ms(6500);
  char *m = read_glob(g_rig.home, N_TXT);
  assert_non_null(m);
  assert_string_equal(m, "start\n");
  free(m);
  free(rid);
  rig_down(&g_rig);
}

/* 2. */
static void test_safe_supervisor_killed_never_overlaps(void **state) {
  (void)state;
  rig_up(&g_rig, 1);
  /* an outside lock held by every copy while it runs: a second copy that
   * finds it taken runs beside a live first one */
  char *rid = start(&g_rig, "safe-sup",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"build\",\"kind\":\"exec\","
                    "\"command\":\"exec 9>>lk; flock -n 9 || echo overlap >> bad.txt; "
                    "echo start >> n.txt; sleep 4; echo end >> n.txt; echo built\","
                    "\"timeout_s\":60,\"heartbeat_timeout_s\":5}]}");
  assert_true(wait_content(g_rig.home, N_TXT, "start\n", 60000));
  long sup = recorded_pid(g_rig.home, "supervisor");
  assert_true(sup > 1);
  assert_int_equal(kill((pid_t)sup, SIGKILL), 0);
  cJSON *j = result(&g_rig, "safe-sup", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(step0(j), "ok")));
  cJSON_Delete(j);
  char *m = read_glob(g_rig.home, N_TXT);
  assert_non_null(m);
  assert_string_equal(m, "start\nstart\nend\n"); /* the first copy never wrote "end" */
  free(m);
  m = read_glob(g_rig.home, "sandboxes/*/workspace/bad.txt");
  assert_null(m);
  free(rid);
  rig_down(&g_rig);
}

/* 3. */
static void test_stale_attempt_leaves_reattached_command(void **state) {
  (void)state;
  rig_up(&g_rig, 0);
  char *rid = start(&g_rig, "stale",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"build\",\"kind\":\"exec\","
                    "\"command\":\"echo start >> n.txt; sleep 20; echo end >> n.txt; echo built\","
                    "\"timeout_s\":90,\"heartbeat_timeout_s\":2}]}");
  assert_true(wait_content(g_rig.home, N_TXT, "start\n", 60000));
  g_rig.worker[1] = spawn_worker(&g_rig, 1, 0);
  assert_int_equal(kill(g_rig.worker[0], SIGSTOP), 0);
  /* the second worker's attempt claims the command (fencing record) */
  int claimed = 0;
  for (int t = 0; t < 40000 && !claimed; t += 50) {
    char *o = read_glob(g_rig.home, "sandboxes/*/meta/cmds/.owner-*");
    claimed = o && atoi(o) >= 2;
    free(o);
    if (!claimed) nap_ms(50);
  }
  assert_true(claimed);
  assert_int_equal(kill(g_rig.worker[0], SIGCONT), 0); /* its attempt 1 is stale now */
  cJSON *j = result(&g_rig, "stale", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *s = step0(j);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s, "ok")));
  assert_int_equal((int)cJSON_GetObjectItem(s, "exit_code")->valuedouble, 0);
  assert_true(cJSON_GetObjectItem(s, "attempts")->valuedouble >= 2);
  assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(s, "output_excerpt")), "built"));
  cJSON_Delete(j);
  char *m = read_glob(g_rig.home, N_TXT);
  assert_string_equal(m, "start\nend\n"); /* one run, never killed, never restarted */
  free(m);
  free(rid);
  rig_down(&g_rig);
}

/* 4. */
static void test_amo_paused_worker_says_outcome_unknown(void **state) {
  (void)state;
  rig_up(&g_rig, 0);
  char *rid = start(&g_rig, "amo-pause",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"send\",\"kind\":\"exec\","
                    "\"retry_class\":\"at_most_once\",\"command\":\"echo start >> n.txt; sleep 40; "
                    "echo end >> n.txt\",\"timeout_s\":90,\"heartbeat_timeout_s\":2}]}");
  assert_true(wait_content(g_rig.home, N_TXT, "start\n", 60000));
  long grp = recorded_pid(g_rig.home, "pgid");
  assert_true(grp > 1);
  assert_int_equal(kill(g_rig.worker[0], SIGSTOP), 0);
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(g_rig.svc));
  assert_true(dbx_svct_history_wait_for(ch, "amo-pause", rid, ET(ACTIVITY_TASK_TIMED_OUT), 30000));
  dbx_rpc_channel_destroy(ch);
  assert_int_equal(kill(g_rig.worker[0], SIGCONT), 0);
  cJSON *j = result(&g_rig, "amo-pause", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  const char *e = step_error(j);
  assert_true(strncmp(e, "OutcomeUnknown", 14) == 0);
  assert_non_null(strstr(e, "may have run"));
  cJSON_Delete(j);
  /* the resumed worker's timed-out attempt still owns the command: stopped */
  assert_true(group_gone(grp, 15000));
  char *m = read_glob(g_rig.home, N_TXT);
  assert_string_equal(m, "start\n");
  free(m);
  free(rid);
  rig_down(&g_rig);
}

/* 5. */
static void test_vanished_sandbox_fails_typed_and_stops(void **state) {
  (void)state;
  rig_up(&g_rig, 0);
  char *rid = start(&g_rig, "gone",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"build\",\"kind\":\"exec\","
                    "\"command\":\"echo start >> n.txt; sleep 40; echo end >> n.txt\","
                    "\"timeout_s\":90,\"heartbeat_timeout_s\":5}]}");
  assert_true(wait_content(g_rig.home, N_TXT, "start\n", 60000));
  long grp = recorded_pid(g_rig.home, "pgid");
  assert_true(grp > 1);
  char *sbs = dbx_asprintf("%s/sandboxes", g_rig.home);
  dbx_test_rmrf(sbs); /* from outside, not through durabox */
  free(sbs);
  cJSON *j = result(&g_rig, "gone", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  assert_true(strncmp(step_error(j), "SandboxGone", 11) == 0);
  assert_int_equal((int)cJSON_GetObjectItem(step0(j), "attempts")->valuedouble, 1);
  cJSON_Delete(j);
  assert_true(group_gone(grp, 10000));
  free(rid);
  rig_down(&g_rig);
}

/* 6. The worker dies right after git_commit's commit landed (failpoint
 * worker.activity.after_effect, its third hit: create, exec, git_commit),
 * before the result is journaled; the retry reports that commit's sha. */
static void test_git_commit_retry_after_worker_death_reports_sha(void **state) {
  (void)state;
  rig_up(&g_rig, 0);
  kill(g_rig.worker[0], SIGKILL);
  waitpid(g_rig.worker[0], NULL, 0);
  g_rig.worker[0] = spawn_worker_fp(&g_rig, 0, 0, "worker.activity.after_effect=kill:after=2");
  char *rid = start(&g_rig, "gitc",
                    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"prep\",\"kind\":\"exec\","
                    "\"command\":\"git init -q -b main . && git -c user.name=t -c user.email=t@e "
                    "commit -q --allow-empty -m init && echo two > a.txt\"},"
                    "{\"name\":\"commit\",\"kind\":\"git_commit\",\"message\":\"add a\"}]}");
  int st = 0;
  for (int t = 0; t < 60000 && waitpid(g_rig.worker[0], &st, WNOHANG) == 0; t += 20) nap_ms(20);
  assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL); /* at the failpoint */
  g_rig.worker[0] = spawn_worker(&g_rig, 0, 0);
  cJSON *j = result(&g_rig, "gitc", rid);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "steps"), 1);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")));
  assert_int_equal((int)cJSON_GetObjectItem(c, "attempts")->valuedouble, 2);
  const char *sha = cJSON_GetStringValue(cJSON_GetObjectItem(c, "detail"));
  assert_non_null(sha);
  /* the workspace's own history: init and that one commit */
  char *cmd = dbx_asprintf("cd %s/sandboxes/*/workspace && git rev-list --count HEAD && "
                           "git rev-parse HEAD", g_rig.home);
  FILE *pf = popen(cmd, "r");
  char out[256] = "";
  size_t n = pf ? fread(out, 1, sizeof out - 1, pf) : 0;
  if (pf) pclose(pf);
  out[n] = '\0';
  char *want = dbx_asprintf("2\n%s\n", sha);
  assert_string_equal(out, want);
  free(want);
  free(cmd);
  cJSON_Delete(j);
  free(rid);
  rig_down(&g_rig);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_amo_supervisor_killed_outcome_unknown, rig_teardown),
      cmocka_unit_test_teardown(test_safe_supervisor_killed_never_overlaps, rig_teardown),
      cmocka_unit_test_teardown(test_stale_attempt_leaves_reattached_command, rig_teardown),
      cmocka_unit_test_teardown(test_amo_paused_worker_says_outcome_unknown, rig_teardown),
      cmocka_unit_test_teardown(test_vanished_sandbox_fails_typed_and_stops, rig_teardown),
      cmocka_unit_test_teardown(test_git_commit_retry_after_worker_death_reports_sha,
                                rig_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
