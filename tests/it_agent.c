/* Integration tests of durabox.Agent (workflows/agent.h): a spawned
 * `durabox server start-dev`, a spawned `durabox worker` (killed with -9 and
 * started again where the test says), the scripted model
 * (tests/fakes/llm/fake_llm.py) and the fake GitHub
 * (tests/fakes/github/fake_github.py), both with request logs, and a real
 * git repository whose test fails until add.sh is fixed.
 *
 *  - fix_and_open_pr: the model reads the test, writes the fix, runs the
 *    tests and commits, asks to open a pull request; turn 0 of the model
 *    answers 429 then 500 first (llm.chat retries). The policy holds open_pr;
 *    `durabox approval list` shows it; the worker is killed while it is
 *    pending and again right after `durabox approval grant`: exactly one
 *    pull request is created, every model turn was requested once (turn 0:
 *    the two faults and one answer), the held call ran with the model's
 *    arguments, a replay of the finished run makes no request, and neither
 *    LLM_API_KEY's nor GITHUB_TOKEN's value is in the history, the worker's
 *    log or the sandbox's files.
 *  - deny_and_timeout: a policy deny (argument matcher) and a person's
 *    denial reach the model as text; an approval timeout denies; no pull
 *    request is made.
 *  - malformed_reply: a reply that is not JSON fails the run at once,
 *    LlmMalformedResponse, requested once.
 *  - bad_policy: a bad regular expression fails the start naming the rule.
 *  - second_turn: a later turn with the session field continues the
 *    conversation and re-opens the same sandbox. */
#define _GNU_SOURCE
#include <dirent.h>
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

#define LLM_KEY "sk-test-K3Y-9f8e7d6c5b4a"
#define GH_TOKEN "ghp_T0KEN-0a1b2c3d4e5f"
#define TQ "agentq"

typedef struct {
  char *dir, *svc, *wrk, *home, *repo;
  char llm_log[600], gh_log[600], wlog[600];
  char env_home[700], env_llm[128], env_gh[128];
  int port;
  char addr[64];
  pid_t worker;
  dbx_client *c;
} fixture;

static fixture F;
static const char *g_gh_extra; /* one more flag for the fake GitHub, or NULL */

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static char *src_path(const char *rel) {
  const char *src = getenv("DBX_SOURCE_DIR");
  assert_non_null(src);
  return dbx_asprintf("%s/%s", src, rel);
}

/* Start a fake (python3 script args...), wait for its port file. */
static int start_fake(const char *script_rel, const char *name, char *const extra[]) {
  char *script = src_path(script_rel);
  char pf[700];
  snprintf(pf, sizeof pf, "%s/%s.port", F.dir, name);
  char *argv[16] = {"/usr/bin/python3", script, "--port-file", pf};
  int k = 4;
  for (int i = 0; extra[i] && k < 15; i++) argv[k++] = extra[i];
  argv[k] = NULL;
  dbx_svct_proc_spawn(argv, NULL, NULL, NULL);
  int port = 0;
  for (int64_t end = mono_ms() + 20000; port == 0 && mono_ms() < end; pause_ms(20)) {
    char *t = dbx_svct_file_read(pf);
    if (t) port = atoi(t);
    free(t);
  }
  free(script);
  if (port <= 0) fail_msg("the fake %s did not start", name);
  return port;
}

static void sh(const char *cmd) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  char *err = NULL;
  int rc = dbx_svct_proc_run(argv, NULL, 60000, NULL, &err);
  if (rc != 0) fail_msg("sh -c '%s' exited %d: %s", cmd, rc, err ? err : "");
  free(err);
}

static void spawn_worker(void) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", F.addr, "--task-queue", TQ,
                  "--db", F.wrk, "--log-level", "info", NULL};
  char *env[] = {F.env_home, F.env_llm, "LLM_MODEL=fake-model", "LLM_API_KEY=" LLM_KEY,
                 "GITHUB_TOKEN=" GH_TOKEN, F.env_gh, NULL};
  char log[700];
  snprintf(log, sizeof log, "%s.%lld", F.wlog, (long long)mono_ms());
  /* every worker's log is kept (appended by name) for the secret check */
  F.worker = dbx_svct_proc_spawn(argv, env, NULL, log);
}

/* Everything but the model script. */
static void fixture_start(const char *script_json) {
  memset(&F, 0, sizeof F);
  F.dir = dbx_test_tmpdir("itagent");
  F.svc = dbx_asprintf("%s/svc", F.dir);
  F.wrk = dbx_asprintf("%s/wrk", F.dir);
  F.home = dbx_asprintf("%s/home", F.dir);
  F.repo = dbx_asprintf("%s/repo", F.dir);
  snprintf(F.llm_log, sizeof F.llm_log, "%s/llm.log", F.dir);
  snprintf(F.gh_log, sizeof F.gh_log, "%s/github.log", F.dir);
  snprintf(F.wlog, sizeof F.wlog, "%s/worker.log", F.dir);
  snprintf(F.env_home, sizeof F.env_home, "DURABOX_HOME=%s", F.home);
  char *cmd = dbx_asprintf(
      "mkdir -p %s %s %s && cd %s && git init -q -b main && git config user.name t && "
      "git config user.email t@example.invalid && "
      "printf 'echo $(($1 - $2))\\n' > add.sh && "
      "printf '[ \"$(sh add.sh 2 3)\" = 5 ] || { echo \"FAIL: add 2 3 gave $(sh add.sh 2 3)\"; exit 1; }\\necho PASS\\n' > test.sh && "
      "git add -A && git commit -qm initial",
      F.svc, F.wrk, F.repo, F.repo);
  sh(cmd);
  free(cmd);
  char sp[700];
  snprintf(sp, sizeof sp, "%s/script.json", F.dir);
  dbx_svct_file_write(sp, script_json);
  char *lx[] = {"--script", sp, "--log", F.llm_log, "--key", LLM_KEY, NULL};
  int lp = start_fake("tests/fakes/llm/fake_llm.py", "llm", lx);
  char *gx[] = {"--log", F.gh_log, "--token", GH_TOKEN, (char *)g_gh_extra, g_gh_extra ? "1" : NULL, NULL};
  int gp = start_fake("tests/fakes/github/fake_github.py", "github", gx);
  snprintf(F.env_llm, sizeof F.env_llm, "LLM_BASE_URL=http://127.0.0.1:%d/v1", lp);
  snprintf(F.env_gh, sizeof F.env_gh, "GITHUB_API_URL=http://127.0.0.1:%d", gp);
  F.port = dbx_svct_free_port();
  dbx_svct_server_spawn(F.svc, F.port);
  dbx_rpc_channel_destroy(dbx_svct_connect(F.port));
  snprintf(F.addr, sizeof F.addr, "127.0.0.1:%d", F.port);
  spawn_worker();
  dbx_client_opts co = {0};
  co.address = F.addr;
  assert_int_equal(dbx_client_create(&co, &F.c), DBX_OK);
}

static int teardown(void **state) {
  (void)state;
  if (F.c) dbx_client_destroy(F.c);
  dbx_svct_proc_kill_all();
  dbx_svct_server_kill_all();
  if (F.dir && !getenv("DBX_KEEP")) dbx_test_rmrf(F.dir);
  free(F.dir), free(F.svc), free(F.wrk), free(F.home), free(F.repo);
  memset(&F, 0, sizeof F);
  return 0;
}

static char *start_agent(const char *wfid, const char *input) {
  dbx_client_start_opts so = {0};
  so.workflow_id = wfid;
  so.workflow_type = "durabox.Agent";
  so.task_queue = TQ;
  so.input_json = input;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(F.c, &so, &rid, NULL), DBX_OK);
  return rid;
}

/* The close event's result (completed) or failure message (failed: *failed = 1). */
static char *await_close(const char *wfid, const char *rid, int *failed, char **ftype) {
  for (int64_t end = mono_ms() + 240000; mono_ms() < end;) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 20000};
    dbx_err e = dbx_client_get_history(F.c, wfid, rid, &ho, &h, NULL);
    char *out = NULL;
    if (e == DBX_OK && h.n) {
      const HistoryEvent *ev = h.events[h.n - 1];
      if (ev->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
        out = dbx_payloads_to_json(ev->workflow_execution_completed_event_attributes->result);
        *failed = 0;
      } else if (ev->event_type == ET(WORKFLOW_EXECUTION_FAILED)) {
        const Failure *f = ev->workflow_execution_failed_event_attributes->failure;
        out = dbx_strdup(f && f->message ? f->message : "");
        if (ftype) *ftype = dbx_strdup(f && f->application_failure_info ? f->application_failure_info->type : "");
        *failed = 1;
      }
    }
    dbx_client_history_cleanup(&h);
    if (out) return out;
  }
  fail_msg("%s did not close within 240 s", wfid);
  return NULL;
}

/* Lines of a JSONL log, parsed; NULL when absent. */
static cJSON *read_log(const char *path) {
  char *t = dbx_svct_file_read(path);
  cJSON *arr = cJSON_CreateArray();
  for (char *p = t, *e; p && *p; p = e ? e + 1 : NULL) {
    e = strchr(p, '\n');
    if (e) *e = 0;
    if (*p) cJSON_AddItemToArray(arr, cJSON_Parse(p));
  }
  free(t);
  return arr;
}

static int count_turn(const cJSON *log, int turn, int status) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, log) {
    if ((int)cJSON_GetObjectItem(e, "turn")->valuedouble != turn) continue;
    if (status == 0 || (int)cJSON_GetObjectItem(e, "status")->valuedouble == status) n++;
  }
  return n;
}

static int count_method(const cJSON *log, const char *method) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, log) n += strcmp(cJSON_GetObjectItem(e, "method")->valuestring, method) == 0;
  return n;
}

static char *run_cli(char *const argv[], int *rc) {
  char *out = NULL, *err = NULL;
  char *env[] = {F.env_home, NULL};
  *rc = dbx_svct_proc_run(argv, env, 60000, &out, &err);
  char *both = dbx_asprintf("%s%s", out ? out : "", err ? err : "");
  free(out);
  free(err);
  return both;
}

/* Poll `durabox approval list` until it names wfid and target. */
static char *await_held(const char *wfid, const char *target) {
  char want[200];
  snprintf(want, sizeof want, "workflow_id=%s ", wfid);
  char tg[80];
  snprintf(tg, sizeof tg, " %s (rule ", target);
  for (int64_t end = mono_ms() + 60000; mono_ms() < end; pause_ms(100)) {
    char *argv[] = {(char *)dbx_test_bin(), "approval", "list", "--address", F.addr, NULL};
    int rc = 0;
    char *out = run_cli(argv, &rc);
    if (rc == 0 && strstr(out, want) && strstr(out, tg)) return out;
    free(out);
  }
  fail_msg("%s: no held %s in durabox approval list within 60 s", wfid, target);
  return NULL;
}

static void decide(const char *verb, const char *wfid, const char *by, const char *reason) {
  char *argv[] = {(char *)dbx_test_bin(), "approval", (char *)verb, (char *)wfid, "--by", (char *)by,
                  "--address", F.addr, reason ? "--reason" : NULL, (char *)reason, NULL};
  int rc = 0;
  char *out = run_cli(argv, &rc);
  if (rc != 0) fail_msg("durabox approval %s exited %d: %s", verb, rc, out);
  free(out);
}

/* 1 when needle is in any file under dir (recursively). */
static int tree_contains(const char *dir, const char *needle) {
  char *cmd = dbx_asprintf("grep -rqF -- '%s' '%s'", needle, dir);
  char *argv[] = {"/bin/sh", "-c", cmd, NULL};
  int rc = dbx_svct_proc_run(argv, NULL, 60000, NULL, NULL);
  free(cmd);
  return rc == 0;
}

static const char *FIX_SCRIPT =
    "{\"replies\":["
    "{\"faults\":[\"429\",\"500\"],\"tool_calls\":[{\"name\":\"read_file\",\"arguments\":{\"path\":\"test.sh\"}}]},"
    "{\"expect\":\"add.sh\",\"tool_calls\":[{\"name\":\"read_file\",\"arguments\":{\"path\":\"add.sh\"}}]},"
    "{\"expect\":\"$1 - $2\",\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"add.sh\",\"content\":\"echo $(($1 + $2))\\n\"}}]},"
    "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"sh test.sh && git commit -qam 'Fix add' && git rev-parse --abbrev-ref HEAD && env > env.txt\"}}]},"
    "{\"expect\":\"durabox/agent-fix\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"Fix add.sh\",\"body\":\"add.sh subtracted\"}}]},"
    "{\"expect\":\"pull request #1\",\"content\":\"Fixed add.sh (it subtracted); pull request #1 is open.\"}"
    "]}";

static char *fix_input(const char *extra) {
  return dbx_asprintf(
      "{\"task\":\"The tests fail (sh test.sh). Fix the bug and open a pull request.\","
      "\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"},\"keep\":true},"
      "\"repository\":{\"github\":\"acme/calc\",\"base\":\"main\"},"
      "\"model\":{\"retry\":{\"initial_interval_s\":0.2,\"maximum_interval_s\":0.5}},"
      "\"policy\":{\"default_action\":\"allow\",\"rules\":[{\"id\":\"review-prs\","
      "\"when\":{\"step_kind\":\"tool_call\",\"target\":\"open_pr\"},"
      "\"then\":{\"decision\":\"require_approval\",\"reason\":\"a person reviews pull requests\","
      "\"approval_timeout_s\":600}}]}%s}",
      F.repo, extra ? extra : "");
}

static void test_fix_and_open_pr(void **state) {
  (void)state;
  fixture_start(FIX_SCRIPT);
  char *input = fix_input(NULL);
  char *rid = start_agent("agent-fix", input);
  free(input);
  char *held = await_held("agent-fix", "open_pr");
  assert_non_null(strstr(held, "(rule review-prs: a person reviews pull requests)"));
  assert_non_null(strstr(held, "Fix add.sh"));
  free(held);
  char *dargv[] = {(char *)dbx_test_bin(), "workflow", "describe", "--workflow-id", "agent-fix",
                   "--address", F.addr, NULL};
  int drc = 0;
  char *desc = run_cli(dargv, &drc);
  assert_int_equal(drc, 0);
  if (!strstr(desc, "awaiting      approval of step 10 tool_call open_pr (rule review-prs: a person reviews"))
    fail_msg("describe does not show the held step: %s", desc);
  free(desc);
  /* kill -9 while the approval is pending, then a new worker */
  dbx_svct_proc_kill(F.worker, SIGKILL);
  spawn_worker();
  decide("grant", "agent-fix", "alice", "looks right");
  dbx_svct_proc_kill(F.worker, SIGKILL); /* right after the grant */
  spawn_worker();
  int failed = 0;
  char *res = await_close("agent-fix", rid, &failed, NULL);
  if (failed) fail_msg("the run failed: %s", res);
  cJSON *j = cJSON_Parse(res);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "completed");
  assert_non_null(strstr(cJSON_GetObjectItem(j, "answer")->valuestring, "pull request #1"));
  cJSON *pr = cJSON_GetObjectItem(j, "pull_request");
  assert_int_equal((int)cJSON_GetObjectItem(pr, "number")->valuedouble, 1);
  assert_int_equal((int)cJSON_GetObjectItem(j, "model_calls")->valuedouble, 6);
  assert_int_equal((int)cJSON_GetObjectItem(j, "tool_calls")->valuedouble, 5);
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valuedouble, 90);
  /* the held step: approved by alice, run once */
  cJSON *steps = cJSON_GetObjectItem(j, "steps"), *st, *held_step = NULL;
  cJSON_ArrayForEach(st, steps) if (strcmp(cJSON_GetObjectItem(st, "target")->valuestring, "open_pr") == 0) held_step = st;
  assert_non_null(held_step);
  assert_string_equal(cJSON_GetObjectItem(held_step, "decision")->valuestring, "require_approval");
  cJSON *ap = cJSON_GetObjectItem(held_step, "approval");
  assert_string_equal(cJSON_GetObjectItem(ap, "decision")->valuestring, "granted");
  assert_string_equal(cJSON_GetObjectItem(ap, "by")->valuestring, "alice");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(held_step, "ok")));
  const char *branch = cJSON_GetObjectItem(j, "branch")->valuestring;
  assert_string_equal(branch, "durabox/agent-fix");
  /* GitHub: exactly one pull request, with the recorded arguments */
  cJSON *gl = read_log(F.gh_log);
  assert_int_equal(count_method(gl, "POST"), 1);
  cJSON *b = cJSON_GetObjectItem(cJSON_GetArrayItem(gl, 0), "body");
  assert_string_equal(cJSON_GetObjectItem(b, "title")->valuestring, "Fix add.sh");
  assert_string_equal(cJSON_GetObjectItem(b, "head")->valuestring, "durabox/agent-fix");
  assert_string_equal(cJSON_GetObjectItem(b, "base")->valuestring, "main");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(gl, 0), "auth_ok")));
  /* the model: turn 0 got 429, 500, then its answer; every other turn once */
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(count_turn(ll, 0, 429), 1);
  assert_int_equal(count_turn(ll, 0, 500), 1);
  for (int t = 0; t < 6; t++) {
    assert_int_equal(count_turn(ll, t, 200), 1);
  }
  assert_int_equal(cJSON_GetArraySize(ll), 8);
  const cJSON *e;
  cJSON_ArrayForEach(e, ll) assert_true(cJSON_IsTrue(cJSON_GetObjectItem(e, "auth_ok")));
  /* a replay of the finished run makes no call */
  char *rargv[] = {(char *)dbx_test_bin(), "replay", "--workflow-id", "agent-fix", "--db", F.wrk, NULL};
  char *rout = NULL;
  int rrc = 0;
  kill(F.worker, SIGTERM);
  dbx_svct_proc_wait(F.worker, 30000);
  rout = run_cli(rargv, &rrc);
  if (rrc != 0) fail_msg("durabox replay exited %d: %s", rrc, rout);
  free(rout);
  cJSON *ll2 = read_log(F.llm_log), *gl2 = read_log(F.gh_log);
  assert_int_equal(cJSON_GetArraySize(ll2), 8);
  assert_int_equal(cJSON_GetArraySize(gl2), 1);
  /* watching: each model call, tool call, decision and the held step in show */
  char *wargv[] = {(char *)dbx_test_bin(), "workflow", "show", "--workflow-id", "agent-fix",
                   "--address", F.addr, NULL};
  int wrc = 0;
  char *shown = run_cli(wargv, &wrc);
  assert_int_equal(wrc, 0);
  static const char *const want[] = {
      "llm.chat (activity", "sandbox.read_file (activity", "sandbox.write_file (activity",
      "sandbox.exec (activity", "github.open_pr (activity",
      "policy: step 2 tool_call read_file -> allow (rule default)",
      "policy: step 10 tool_call open_pr -> require_approval (rule review-prs: a person reviews pull requests)",
      "HELD step 10 tool_call open_pr", "approval: step 10 granted by alice (looks right)"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(shown, want[i])) fail_msg("workflow show lacks \"%s\":\n%s", want[i], shown);
  free(shown);
  /* history: the held step stopped the sandbox and started it again; open_pr ran once */
  dbx_rpc_channel *ch = dbx_svct_connect(F.port);
  dbx_svct_history h;
  dbx_svct_history_get(ch, "agent-fix", rid, &h);
  int stop = 0, start = 0, pr_sched = 0, order_ok = 0, lookups = 0;
  for (size_t i = 0; i < h.n; i++) {
    if (h.events[i]->event_type != ET(ACTIVITY_TASK_SCHEDULED)) continue;
    const char *t = h.events[i]->activity_task_scheduled_event_attributes->activity_type->name;
    if (strcmp(t, "sandbox.stop") == 0) stop++;
    if (strcmp(t, "sandbox.start") == 0) start++;
    if (strcmp(t, "github.open_pr") == 0) {
      pr_sched++;
      order_ok = stop == 1 && start == 1;
    }
    /* a worker killed right after the grant may die inside open_pr before
     * it sent anything: the agent looks up the pull request, finds none and
     * calls once more; GitHub still gets one request (asserted above) */
    if (strcmp(t, "github.find_pr") == 0) lookups++;
  }
  assert_int_equal(stop, 1);
  assert_int_equal(start, 1);
  assert_in_range(lookups, 0, 1);
  assert_int_equal(pr_sched, 1 + lookups);
  assert_true(order_ok);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  /* the secrets: not in the history, the worker's logs, the sandbox */
  char *sargv[] = {(char *)dbx_test_bin(), "workflow", "show", "--workflow-id", "agent-fix",
                   "--output", "json", "--address", F.addr, NULL};
  int src = 0;
  char *hist = run_cli(sargv, &src);
  assert_int_equal(src, 0);
  assert_non_null(strstr(hist, "llm.chat"));
  assert_null(strstr(hist, LLM_KEY));
  assert_null(strstr(hist, GH_TOKEN));
  free(hist);
  assert_true(tree_contains(F.home, "echo $(($1 + $2))")); /* the grep finds what is there */
  assert_true(tree_contains(F.home, "PATH=")); /* env.txt: the commands' environment */
  assert_false(tree_contains(F.home, LLM_KEY));
  assert_false(tree_contains(F.home, GH_TOKEN));
  char *logs = dbx_asprintf("%s", F.dir);
  char *g1 = dbx_asprintf("cat '%s'/worker.log.* | grep -qF -- '%s'", logs, LLM_KEY);
  char *g2 = dbx_asprintf("cat '%s'/worker.log.* | grep -qF -- '%s'", logs, GH_TOKEN);
  char *a1[] = {"/bin/sh", "-c", g1, NULL}, *a2[] = {"/bin/sh", "-c", g2, NULL};
  assert_int_not_equal(dbx_svct_proc_run(a1, NULL, 30000, NULL, NULL), 0);
  assert_int_not_equal(dbx_svct_proc_run(a2, NULL, 30000, NULL, NULL), 0);
  free(g1), free(g2), free(logs);
  cJSON_Delete(ll), cJSON_Delete(ll2), cJSON_Delete(gl), cJSON_Delete(gl2), cJSON_Delete(j);
  free(res);
  free(rid);
}

static void test_deny_and_timeout(void **state) {
  (void)state;
  fixture_start(
      "{\"replies\":["
      "{\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"rm -rf .git\"}}]},"
      "{\"expect\":\"`shell` not allowed. reason: no deletions\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"A\"}}]},"
      "{\"expect\":\"approval timed out\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"B\"}}]},"
      "{\"expect\":\"not yet (decided by bob)\",\"content\":\"Understood, no pull request.\"}"
      "]}");
  char *input = dbx_asprintf(
      "{\"task\":\"Tidy up.\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"}},"
      "\"repository\":{\"github\":\"acme/calc\"},"
      "\"policy\":{\"default_action\":\"allow\",\"rules\":["
      "{\"id\":\"no-rm\",\"when\":{\"target\":\"shell\",\"arguments\":{\"command\":{\"regex\":\"rm +-[a-z]*r\"}}},"
      "\"then\":{\"decision\":\"deny\",\"reason\":\"no deletions\"}},"
      "{\"id\":\"pr-A\",\"when\":{\"target\":\"open_pr\",\"arguments\":{\"title\":{\"equals\":\"A\"}}},"
      "\"then\":{\"decision\":\"require_approval\",\"approval_timeout_s\":2}},"
      "{\"id\":\"pr\",\"when\":{\"targets\":[\"open_*\"]},\"then\":{\"decision\":\"require_approval\","
      "\"approvers\":[\"bob\",\"carol\"]}}]}}",
      F.repo);
  char *rid = start_agent("agent-deny", input);
  free(input);
  char *held = await_held("agent-deny", "open_pr");
  assert_non_null(strstr(held, "(rule pr"));
  free(held);
  /* the first hold (rule pr-A) times out after 2 s; then B is held under rule pr */
  for (int64_t end = mono_ms() + 60000;; pause_ms(100)) {
    char *h = await_held("agent-deny", "open_pr");
    int second = strstr(h, "(rule pr)") != NULL && strstr(h, "approvers [\"bob\",\"carol\"]") != NULL;
    free(h);
    if (second) break;
    if (mono_ms() > end) fail_msg("the second open_pr was not held");
  }
  /* someone the rule does not list is refused, and the step stays held */
  char *margv[] = {(char *)dbx_test_bin(), "approval", "grant", "agent-deny", "--by", "mallory",
                   "--address", F.addr, NULL};
  int mrc = 0;
  char *mout = run_cli(margv, &mrc);
  assert_int_equal(mrc, 1);
  assert_non_null(strstr(mout, "mallory is not among the approvers"));
  free(mout);
  free(await_held("agent-deny", "open_pr"));
  decide("deny", "agent-deny", "bob", "not yet");
  int failed = 0;
  char *res = await_close("agent-deny", rid, &failed, NULL);
  if (failed) fail_msg("the run failed: %s", res);
  cJSON *j = cJSON_Parse(res);
  assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "completed");
  assert_string_equal(cJSON_GetObjectItem(j, "answer")->valuestring, "Understood, no pull request.");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "pull_request")));
  cJSON *steps = cJSON_GetObjectItem(j, "steps");
  /* llm, shell (denied), llm, open_pr (timeout), llm, open_pr (denied by bob), llm */
  assert_int_equal(cJSON_GetArraySize(steps), 7);
  cJSON *s1 = cJSON_GetArrayItem(steps, 1), *s3 = cJSON_GetArrayItem(steps, 3), *s5 = cJSON_GetArrayItem(steps, 5);
  assert_string_equal(cJSON_GetObjectItem(s1, "decision")->valuestring, "deny");
  assert_string_equal(cJSON_GetObjectItem(s1, "rule")->valuestring, "no-rm");
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s3, "approval"), "by")->valuestring, "timeout");
  assert_string_equal(cJSON_GetObjectItem(s3, "rule")->valuestring, "pr-A");
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s5, "approval"), "decision")->valuestring, "denied");
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s5, "approval"), "reason")->valuestring, "not yet");
  cJSON *gl = read_log(F.gh_log);
  assert_int_equal(cJSON_GetArraySize(gl), 0);
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 4); /* each turn once, every expect met */
  const cJSON *e;
  cJSON_ArrayForEach(e, ll) assert_int_equal((int)cJSON_GetObjectItem(e, "status")->valuedouble, 200);
  /* the .git directory is still there: the denied command never ran */
  cJSON_Delete(gl), cJSON_Delete(ll), cJSON_Delete(j);
  free(res);
  free(rid);
}

static void test_malformed_reply(void **state) {
  (void)state;
  /* turn 0 of three runs, one after the other: each gets the next fault */
  fixture_start("{\"replies\":[{\"faults\":[\"malformed\",\"no_choices\",\"bad_tool_call\"],\"content\":\"never\"}]}");
  static const char *const ids[] = {"agent-bad1", "agent-bad2", "agent-bad3"};
  static const char *const why[] = {"is not a JSON object", "has no \"choices\" array",
                                    "tool_calls[0] has no function.name"};
  for (int i = 0; i < 3; i++) {
    char *rid = start_agent(ids[i], "{\"task\":\"hello\"}");
    int failed = 0;
    char *type = NULL;
    char *msg = await_close(ids[i], rid, &failed, &type);
    assert_int_equal(failed, 1);
    assert_string_equal(type, "LlmMalformedResponse");
    if (!strstr(msg, why[i])) fail_msg("%s: \"%s\" does not say \"%s\"", ids[i], msg, why[i]);
    cJSON *ll = read_log(F.llm_log);
    assert_int_equal(cJSON_GetArraySize(ll), i + 1); /* non-retryable: asked once */
    cJSON_Delete(ll);
    free(msg), free(type), free(rid);
  }
}

static void test_bad_policy(void **state) {
  (void)state;
  fixture_start("{\"replies\":[]}");
  char *rid = start_agent("agent-pol", "{\"task\":\"x\",\"policy\":{\"rules\":[{\"id\":\"r1\","
                          "\"when\":{\"arguments\":{\"command\":{\"regex\":\"([a-z\"}}},"
                          "\"then\":{\"decision\":\"deny\"}}]}}");
  int failed = 0;
  char *type = NULL;
  char *msg = await_close("agent-pol", rid, &failed, &type);
  assert_int_equal(failed, 1);
  assert_string_equal(type, "InvalidInput");
  assert_non_null(strstr(msg, "rule 'r1'"));
  assert_non_null(strstr(msg, "regex"));
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 0);
  cJSON_Delete(ll);
  free(msg), free(type), free(rid);
}

static void test_second_turn(void **state) {
  (void)state;
  fixture_start(
      "{\"replies\":["
      "{\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"notes.txt\",\"content\":\"turn one\\n\"}}]},"
      "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":"
      "\"git add notes.txt && git commit -qm one && git push -q origin HEAD && echo pushed\"}}]},"
      "{\"expect\":\"pushed\",\"content\":\"Wrote and pushed notes.txt.\"},"
      "{\"expect\":\"Now read it back\",\"tool_calls\":[{\"name\":\"read_file\",\"arguments\":{\"path\":\"notes.txt\"}}]},"
      "{\"expect\":\"turn one\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":"
      "\"git commit -q --allow-empty -m two && git push -q origin HEAD && echo pushed again\"}}]},"
      "{\"expect\":\"pushed again\",\"content\":\"It says: turn one.\"}"
      "]}");
  /* the remote: a bare repository served by git daemon on loopback, which
   * the sandbox clones and pushes its branch to */
  char *bare = dbx_asprintf("%s/remote.git", F.dir);
  char *mk = dbx_asprintf("git clone -q --bare %s %s && git -C %s config daemon.receivepack true",
                          F.repo, bare, bare);
  sh(mk);
  free(mk);
  int gport = dbx_svct_free_port();
  char portarg[32], basearg[700];
  snprintf(portarg, sizeof portarg, "--port=%d", gport);
  snprintf(basearg, sizeof basearg, "--base-path=%s", F.dir);
  char *gd[] = {"/usr/bin/git", "daemon", "--reuseaddr", "--listen=127.0.0.1", portarg, basearg,
                "--export-all", "--enable=receive-pack", F.dir, NULL};
  dbx_svct_proc_spawn(gd, NULL, NULL, NULL);
  char *url = dbx_asprintf("git://127.0.0.1:%d/remote.git", gport);
  char *probe = dbx_asprintf("git ls-remote -q %s >/dev/null 2>&1", url);
  char *pargv[] = {"/bin/sh", "-c", probe, NULL};
  int up = 0;
  for (int64_t end = mono_ms() + 20000; !up && mono_ms() < end; pause_ms(50))
    up = dbx_svct_proc_run(pargv, NULL, 10000, NULL, NULL) == 0;
  if (!up) fail_msg("git daemon did not serve %s", url);
  free(probe);
  char *in1 = dbx_asprintf("{\"task\":\"Write notes.txt.\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"url\":\"%s\"}},"
                           "\"session\":{\"id\":\"sess-a\",\"turn\":1,\"previous_run_id\":null,\"state\":null}}",
                           url);
  free(url);
  char *rid1 = start_agent("sess-a", in1);
  int failed = 0;
  char *res1 = await_close("sess-a", rid1, &failed, NULL);
  if (failed) fail_msg("turn 1 failed: %s", res1);
  cJSON *j1 = cJSON_Parse(res1);
  cJSON *st = cJSON_GetObjectItem(j1, "session_state");
  const char *sb1 = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "sandbox"), "id")->valuestring;
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(st, "conversation")), 7);
  /* turn 2: the session field as the CLI writes it */
  cJSON *in2 = cJSON_CreateObject();
  cJSON_AddStringToObject(in2, "task", "Now read it back.");
  cJSON *sess = cJSON_AddObjectToObject(in2, "session");
  cJSON_AddStringToObject(sess, "id", "sess-a");
  cJSON_AddNumberToObject(sess, "turn", 2);
  cJSON_AddStringToObject(sess, "previous_run_id", rid1);
  cJSON_AddItemToObject(sess, "state", cJSON_Duplicate(st, 1));
  char *t2 = cJSON_PrintUnformatted(in2);
  dbx_client_start_opts so = {0};
  so.workflow_id = "sess-a";
  so.workflow_type = "durabox.Agent";
  so.task_queue = TQ;
  so.input_json = t2;
  so.id_reuse_policy = 1; /* ALLOW_DUPLICATE */
  char *rid2 = NULL;
  assert_int_equal(dbx_client_start_workflow(F.c, &so, &rid2, NULL), DBX_OK);
  char *res2 = await_close("sess-a", rid2, &failed, NULL);
  if (failed) fail_msg("turn 2 failed: %s", res2);
  cJSON *j2 = cJSON_Parse(res2);
  assert_string_equal(cJSON_GetObjectItem(j2, "answer")->valuestring, "It says: turn one.");
  assert_string_equal(cJSON_GetObjectItem(j2, "sandbox_id")->valuestring, sb1);
  assert_string_equal(cJSON_GetObjectItem(j2, "branch")->valuestring, "durabox/sess-a");
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 6);
  /* turn 2's first request carries turn 1's conversation and the new task */
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetArrayItem(ll, 3), "messages")->valuedouble, 8);
  /* both turns pushed the one branch of the session */
  char *lg = dbx_asprintf("git -C %s log --format=%%s durabox/sess-a", bare);
  char *largv[] = {"/bin/sh", "-c", lg, NULL};
  char *log = NULL;
  assert_int_equal(dbx_svct_proc_run(largv, NULL, 30000, &log, NULL), 0);
  assert_string_equal(log, "two\none\ninitial\n");
  free(log), free(lg), free(bare);
  cJSON_Delete(ll), cJSON_Delete(j1), cJSON_Delete(j2), cJSON_Delete(in2);
  free(t2), free(in1), free(res1), free(res2), free(rid1), free(rid2);
}

/* The step budget ends a run that keeps calling tools; a policy that denies
 * the model call ends the run before any request. */
static void test_budget_and_model_denied(void **state) {
  (void)state;
  fixture_start("{\"replies\":["
                "{\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"echo one\"}}]},"
                "{\"expect\":\"one\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"echo two\"}}]},"
                "{\"content\":\"never asked\"}]}");
  char *rid = start_agent("agent-budget", "{\"task\":\"loop\",\"budget\":{\"max_steps\":3}}");
  int failed = 0;
  char *res = await_close("agent-budget", rid, &failed, NULL);
  if (failed) fail_msg("the run failed: %s", res);
  cJSON *j = cJSON_Parse(res);
  assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "budget_exhausted");
  assert_int_equal((int)cJSON_GetObjectItem(j, "model_calls")->valuedouble, 2);
  assert_int_equal((int)cJSON_GetObjectItem(j, "tool_calls")->valuedouble, 1);
  /* the unrun call still got its answer in the conversation */
  cJSON *conv = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "session_state"), "conversation");
  cJSON *last = cJSON_GetArrayItem(conv, cJSON_GetArraySize(conv) - 1);
  assert_string_equal(cJSON_GetObjectItem(last, "role")->valuestring, "tool");
  assert_string_equal(cJSON_GetObjectItem(last, "content")->valuestring, "not run: the step budget is spent");
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 2);
  cJSON_Delete(ll), cJSON_Delete(j);
  free(res), free(rid);
  rid = start_agent("agent-nomodel", "{\"task\":\"x\",\"policy\":{\"default_action\":\"allow\","
                    "\"rules\":[{\"id\":\"quiet\",\"when\":{\"step_kind\":\"llm_call\",\"target\":\"fake-*\"},"
                    "\"then\":{\"decision\":\"deny\",\"reason\":\"no model today\"}}]},"
                    "\"model\":{\"name\":\"fake-model\"}}");
  res = await_close("agent-nomodel", rid, &failed, NULL);
  if (failed) fail_msg("the run failed: %s", res);
  j = cJSON_Parse(res);
  assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "denied");
  assert_non_null(strstr(cJSON_GetObjectItem(j, "answer")->valuestring, "no model today"));
  assert_int_equal((int)cJSON_GetObjectItem(j, "model_calls")->valuedouble, 0);
  ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 2); /* no new request */
  cJSON_Delete(ll), cJSON_Delete(j);
  free(res), free(rid);
}

/* The reply to open_pr is lost after GitHub made the pull request: the
 * outcome is unknown (at_most_once: not sent again), the agent looks the
 * pull request up (github.find_pr) and the model reads that it exists. */
static void test_open_pr_reply_lost(void **state) {
  (void)state;
  g_gh_extra = "--drop-first";
  fixture_start("{\"replies\":["
                "{\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"T\"}}]},"
                "{\"expect\":\"pull request #1\",\"content\":\"PR #1 is open.\"}]}");
  g_gh_extra = NULL;
  char *rid = start_agent("agent-lost", "{\"task\":\"open it\",\"repository\":{\"github\":\"acme/calc\","
                          "\"branch\":\"fix-1\"}}");
  int failed = 0;
  char *res = await_close("agent-lost", rid, &failed, NULL);
  if (failed) fail_msg("the run failed: %s", res);
  cJSON *j = cJSON_Parse(res);
  assert_string_equal(cJSON_GetObjectItem(j, "answer")->valuestring, "PR #1 is open.");
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pull_request"), "number")->valuedouble, 1);
  cJSON *gl = read_log(F.gh_log);
  assert_int_equal(count_method(gl, "POST"), 1); /* never sent twice */
  assert_int_equal(count_method(gl, "GET"), 1);  /* the lookup */
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(gl, 0), "dropped")));
  cJSON_Delete(gl), cJSON_Delete(j);
  free(res), free(rid);
}

/* durabox run FILE --type durabox.Agent (embedded service and worker):
 * the live view names each decision; a bad policy is refused before start. */
static void test_run_view(void **state) {
  (void)state;
  fixture_start(
      "{\"replies\":["
      "{\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"a.txt\",\"content\":\"a\"}},"
      "{\"name\":\"shell\",\"arguments\":{\"command\":\"cat a.txt; rm -rf .git\"}}]},"
      "{\"expect\":\"not allowed\",\"content\":\"Done.\"}]}");
  char f[700], bad[700];
  snprintf(f, sizeof f, "%s/agent.json", F.dir);
  snprintf(bad, sizeof bad, "%s/bad.json", F.dir);
  dbx_svct_file_write(f, "{\"task\":\"write a.txt\",\"policy\":\"default_action: allow\\nrules:\\n"
                         "  - id: no-rm\\n    when: {arguments: {command: {contains: 'rm -rf'}}}\\n"
                         "    then: {decision: deny, reason: no deletes}\\n\"}");
  dbx_svct_file_write(bad, "{\"task\":\"x\",\"policy\":{\"rules\":[{\"id\":\"r9\",\"then\":{\"decision\":\"perhaps\"}}]}}");
  char home[700];
  snprintf(home, sizeof home, "DURABOX_HOME=%s/runhome", F.dir);
  char *env[] = {home, F.env_llm, "LLM_MODEL=fake-model", "LLM_API_KEY=" LLM_KEY, "TEMPORAL_ADDRESS", NULL};
  char *argv[] = {(char *)dbx_test_bin(), "run", f, "--type", "durabox.Agent", "--workflow-id", "agent-run", NULL};
  char *out = NULL, *err = NULL;
  int rc = dbx_svct_proc_run(argv, env, 120000, &out, &err);
  if (rc != 0) fail_msg("durabox run exited %d\n%s\n%s", rc, out, err);
  static const char *const want[] = {"llm.chat", "policy: step 2 tool_call write_file -> allow (rule default)",
                                     "policy: step 3 tool_call shell -> deny (rule no-rm: no deletes)",
                                     "answer: Done.", "status: completed; 2 model calls, 1 tool calls"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(out, want[i])) fail_msg("durabox run's output lacks \"%s\":\n%s", want[i], out);
  assert_null(strstr(out, LLM_KEY));
  free(out), free(err);
  char *bargv[] = {(char *)dbx_test_bin(), "run", bad, "--type", "durabox.Agent", NULL};
  rc = dbx_svct_proc_run(bargv, env, 60000, &out, &err);
  assert_int_equal(rc, 2);
  if (!strstr(err, "rule 'r9'") || !strstr(err, "decision")) fail_msg("stderr: %s", err);
  free(out), free(err);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_malformed_reply, teardown),
      cmocka_unit_test_teardown(test_bad_policy, teardown),
      cmocka_unit_test_teardown(test_fix_and_open_pr, teardown),
      cmocka_unit_test_teardown(test_deny_and_timeout, teardown),
      cmocka_unit_test_teardown(test_second_turn, teardown),
      cmocka_unit_test_teardown(test_run_view, teardown),
      cmocka_unit_test_teardown(test_budget_and_model_denied, teardown),
      cmocka_unit_test_teardown(test_open_pr_reply_lost, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
