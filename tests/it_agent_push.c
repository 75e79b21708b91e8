/* Integration tests of durabox.Agent's pushes, cancellation and checkpoints
 * (workflows/agent.h; docs/agent.md): a spawned `durabox server start-dev`
 * (its log kept), a spawned `durabox worker` (debug log kept), the scripted
 * model (tests/fakes/llm) and the fake GitHub (tests/fakes/github), with a
 * real git repository on the local driver.
 *
 *  - push_two_turns: a git smart-HTTP server with Basic authentication
 *    (tests/fakes/git/git_http.py, user x-access-token, the worker's
 *    GITHUB_TOKEN as password). Turn 1 commits, tries `git push` from the
 *    sandbox itself (refused: the sandbox has no credentials), pushes with
 *    the push tool (git.push: the worker's token) and opens a pull request;
 *    turn 2 (--session) re-opens the sandbox through sandbox.create's adopt
 *    (no sandbox.start), commits, pushes the same branch and asks for a pull
 *    request again: GitHub's log shows one created (201) and one refused as
 *    existing (422), and turn 2 reports #1. Then the token's bytes are in no
 *    file under the test's folder: the service's and the worker's LMDB
 *    stores, their logs, the fakes' logs, the sandbox's tree (its
 *    environment dumped to a file, .git/config) and the bare repository;
 *    the grep is shown to find other text in each of those places.
 *  - cancel_cleans: cancelling a run while its shell command runs deletes
 *    its sandbox and the command's process is gone; a kept sandbox
 *    (sandbox.keep) is stopped instead, and stays (the second run starts
 *    once the first's command is gone: both run the same marked command).
 *  - checkpoints: sandbox.checkpoint {every_steps: 2, on_completion: true}:
 *    a baseline before the first model call, one after the second
 *    workspace-changing tool call (write_file, shell; the reads do not
 *    count), one at completion; each recorded in history (durabox.checkpoint
 *    with its reason) and in the result, each snapshot holding the files as
 *    they were then.
 *  - continue_as_new: {after_model_calls: 2}: the run continues as new
 *    before its third model call, carrying the conversation; the new run
 *    adopts the sandbox and finishes; every model turn was asked once; both
 *    runs replay (durabox replay) without asking the model. */
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

#define LLM_KEY "sk-test-PU5H-77aa66bb55cc"
#define GH_TOKEN "ghp_PU5HT0KEN-9z8y7x6w5v"
#define TQ "agentpushq"

typedef struct {
  char *dir, *svc, *wrk, *home, *repo;
  char llm_log[600], gh_log[600], wlog[600], git_log[600];
  char env_home[700], env_llm[128], env_gh[128];
  int port;
  char addr[64];
  pid_t worker;
  dbx_client *c;
} fixture;

static fixture F;

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
  char *argv[20] = {"/usr/bin/python3", script, "--port-file", pf};
  int k = 4;
  for (int i = 0; extra[i] && k < 19; i++) argv[k++] = extra[i];
  argv[k] = NULL;
  dbx_svct_proc_spawn(argv, NULL, NULL, NULL);
  int port = 0;
  for (int64_t end = mono_ms() + 60000; port == 0 && mono_ms() < end; pause_ms(20)) {
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

/* The exit status of sh -c cmd (its output in *out when out). */
static int sh_rc(const char *cmd, char **out) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  return dbx_svct_proc_run(argv, NULL, 60000, out, NULL);
}

static void spawn_worker(void) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", F.addr, "--task-queue", TQ,
                  "--db", F.wrk, "--log-level", "debug", NULL};
  /* GIT_TOKEN is emptied: the push uses GITHUB_TOKEN, as on GitHub */
  char *env[] = {F.env_home, F.env_llm, "LLM_MODEL=fake-model", "LLM_API_KEY=" LLM_KEY,
                 "GITHUB_TOKEN=" GH_TOKEN, "GIT_TOKEN=", F.env_gh, NULL};
  char log[700];
  snprintf(log, sizeof log, "%s.%lld", F.wlog, (long long)mono_ms());
  F.worker = dbx_svct_proc_spawn(argv, env, log, log);
}

/* The repository, the fakes (model script given), the service, a worker. */
static void fixture_start(const char *script_json, int with_git_http) {
  memset(&F, 0, sizeof F);
  F.dir = dbx_test_tmpdir("itagentpush");
  F.svc = dbx_asprintf("%s/svc", F.dir);
  F.wrk = dbx_asprintf("%s/wrk", F.dir);
  F.home = dbx_asprintf("%s/home", F.dir);
  F.repo = dbx_asprintf("%s/repo", F.dir);
  snprintf(F.llm_log, sizeof F.llm_log, "%s/llm.log", F.dir);
  snprintf(F.gh_log, sizeof F.gh_log, "%s/github.log", F.dir);
  snprintf(F.wlog, sizeof F.wlog, "%s/worker.log", F.dir);
  snprintf(F.git_log, sizeof F.git_log, "%s/git_http.log", F.dir);
  snprintf(F.env_home, sizeof F.env_home, "DURABOX_HOME=%s", F.home);
  char *cmd = dbx_asprintf(
      "mkdir -p %s %s %s %s/http && cd %s && git init -q -b main && git config user.name t && "
      "git config user.email t@example.invalid && echo base > base.txt && "
      "git add -A && git commit -qm initial && git clone -q --bare %s %s/http/r.git",
      F.svc, F.wrk, F.repo, F.dir, F.repo, F.repo, F.dir);
  sh(cmd);
  free(cmd);
  char *script = dbx_strdup(script_json);
  if (with_git_http) {
    char root[700];
    snprintf(root, sizeof root, "%s/http", F.dir);
    char *gx[] = {"--root", root, "--user", "x-access-token", "--password", GH_TOKEN, "--log",
                  F.git_log, NULL};
    int hp = start_fake("tests/fakes/git/git_http.py", "git_http", gx);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/r.git", hp);
    char *p;
    while ((p = strstr(script, "@REMOTE@")) != NULL) { /* the URL into the script */
      char *t = dbx_asprintf("%.*s%s%s", (int)(p - script), script, url, p + 8);
      free(script);
      script = t;
    }
  }
  char sp[700];
  snprintf(sp, sizeof sp, "%s/script.json", F.dir);
  dbx_svct_file_write(sp, script);
  free(script);
  char *lx[] = {"--script", sp, "--log", F.llm_log, "--key", LLM_KEY, NULL};
  int lp = start_fake("tests/fakes/llm/fake_llm.py", "llm", lx);
  char *gx[] = {"--log", F.gh_log, "--token", GH_TOKEN, NULL};
  int gp = start_fake("tests/fakes/github/fake_github.py", "github", gx);
  snprintf(F.env_llm, sizeof F.env_llm, "LLM_BASE_URL=http://127.0.0.1:%d/v1", lp);
  snprintf(F.env_gh, sizeof F.env_gh, "GITHUB_API_URL=http://127.0.0.1:%d", gp);
  F.port = dbx_svct_free_port();
  /* the service with its log in a file (info), for the secret check */
  char port_s[16], slog[700];
  snprintf(port_s, sizeof port_s, "%d", F.port);
  snprintf(slog, sizeof slog, "%s/server.log", F.dir);
  char *sargv[] = {(char *)dbx_test_bin(), "server", "start-dev", "--port", port_s,
                   "--db-filename", F.svc, "--log-level", "debug", NULL};
  dbx_svct_proc_spawn(sargv, NULL, slog, slog);
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

static char *start_agent(const char *wfid, const char *input, int reuse) {
  dbx_client_start_opts so = {0};
  so.workflow_id = wfid;
  so.workflow_type = "durabox.Agent";
  so.task_queue = TQ;
  so.input_json = input;
  so.id_reuse_policy = reuse ? 1 : 0;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(F.c, &so, &rid, NULL), DBX_OK);
  return rid;
}

/* The close event: its result (completed), failure message (failed: *how
 * 1), or "" (cancelled: *how 2). */
static char *await_close(const char *wfid, const char *rid, int *how) {
  for (int64_t end = mono_ms() + 180000; mono_ms() < end;) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 10000};
    dbx_err e = dbx_client_get_history(F.c, wfid, rid, &ho, &h, NULL);
    char *out = NULL;
    if (e == DBX_OK && h.n) {
      const HistoryEvent *ev = h.events[h.n - 1];
      if (ev->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
        out = dbx_payloads_to_json(ev->workflow_execution_completed_event_attributes->result);
        *how = 0;
      } else if (ev->event_type == ET(WORKFLOW_EXECUTION_FAILED)) {
        const Failure *f = ev->workflow_execution_failed_event_attributes->failure;
        out = dbx_strdup(f && f->message ? f->message : "");
        *how = 1;
      } else if (ev->event_type == ET(WORKFLOW_EXECUTION_CANCELED)) {
        out = dbx_strdup("");
        *how = 2;
      }
    }
    dbx_client_history_cleanup(&h);
    if (out) return out;
  }
  fail_msg("%s did not close within 180 s", wfid);
  return NULL;
}

static cJSON *completed(const char *wfid, const char *rid) {
  int how = 0;
  char *res = await_close(wfid, rid, &how);
  if (how != 0) fail_msg("%s did not complete (%d): %s", wfid, how, res);
  cJSON *j = cJSON_Parse(res);
  assert_non_null(j);
  free(res);
  return j;
}

/* Lines of a JSONL log, parsed. */
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

static int count_where(const cJSON *log, const char *key, const char *value, int status) {
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, log) {
    const cJSON *v = cJSON_GetObjectItem(e, key);
    if (!cJSON_IsString(v) || !strstr(v->valuestring, value)) continue;
    if (status == 0 || (int)cJSON_GetObjectItem(e, "status")->valuedouble == status) n++;
  }
  return n;
}

/* 1 when the bytes of needle are in any file under path (grep -a: binary
 * files such as LMDB's data.mdb too). */
static int bytes_under(const char *path, const char *needle) {
  char *cmd = dbx_asprintf("grep -r -a -q -F -e '%s' '%s'", needle, path);
  int rc = sh_rc(cmd, NULL);
  free(cmd);
  return rc == 0;
}

/* The activity types the run scheduled, in order, and their inputs. */
typedef struct {
  char type[64];
  char *input;
} sched_ev;

static size_t scheduled(const char *wfid, const char *rid, sched_ev *out, size_t cap) {
  dbx_rpc_channel *ch = dbx_svct_connect(F.port);
  dbx_svct_history h;
  dbx_svct_history_get(ch, wfid, rid, &h);
  size_t n = 0;
  for (size_t i = 0; i < h.n && n < cap; i++) {
    if (h.events[i]->event_type != ET(ACTIVITY_TASK_SCHEDULED)) continue;
    const ActivityTaskScheduledEventAttributes *a = h.events[i]->activity_task_scheduled_event_attributes;
    snprintf(out[n].type, sizeof out[n].type, "%s", a->activity_type->name);
    out[n].input = dbx_payloads_to_json(a->input);
    n++;
  }
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  return n;
}

static void sched_free(sched_ev *s, size_t n) {
  for (size_t i = 0; i < n; i++) free(s[i].input);
}

static int count_type(const sched_ev *s, size_t n, const char *type) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += strcmp(s[i].type, type) == 0;
  return k;
}

/* ------------------------------------------------------------ pushes */

static const char *PUSH_SCRIPT =
    "{\"replies\":["
    "{\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"notes.txt\",\"content\":\"turn one\\n\"}}]},"
    "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":"
    "\"git add -A && git commit -qm one && env > env.txt && git push -q @REMOTE@ HEAD 2>&1; echo push-exit=$?\"}}]},"
    "{\"expect\":\"push-exit=\",\"tool_calls\":[{\"name\":\"push\",\"arguments\":{}}]},"
    "{\"expect\":\"pushed durabox/sess-p to http://127.0.0.1:\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"Notes\"}}]},"
    "{\"expect\":\"pull request #1 opened\",\"content\":\"Turn one done.\"},"
    "{\"expect\":\"Add a second line\",\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"notes.txt\",\"content\":\"turn one\\nturn two\\n\"}}]},"
    "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"git commit -qam two && echo committed\"}}]},"
    "{\"expect\":\"committed\",\"tool_calls\":[{\"name\":\"push\",\"arguments\":{}}]},"
    "{\"expect\":\"with the worker's GITHUB_TOKEN\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"Notes\"}}]},"
    "{\"expect\":\"was already open\",\"content\":\"Updated pull request #1.\"}"
    "]}";

static void test_push_two_turns(void **state) {
  (void)state;
  fixture_start(PUSH_SCRIPT, 1);
  char *remote = NULL;
  {
    char pf[700];
    snprintf(pf, sizeof pf, "%s/git_http.port", F.dir);
    char *t = dbx_svct_file_read(pf);
    remote = dbx_asprintf("http://127.0.0.1:%d/r.git", atoi(t));
    free(t);
  }
  char *in1 = dbx_asprintf(
      "{\"task\":\"Write notes.txt (marker-task-Q7).\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"}},"
      "\"repository\":{\"github\":\"acme/calc\",\"remote\":\"%s\"},"
      "\"session\":{\"id\":\"sess-p\",\"turn\":1,\"previous_run_id\":null,\"state\":null}}",
      F.repo, remote);
  char *rid1 = start_agent("sess-p", in1, 0);
  cJSON *j1 = completed("sess-p", rid1);
  assert_string_equal(cJSON_GetObjectItem(j1, "answer")->valuestring, "Turn one done.");
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j1, "pull_request"), "number")->valuedouble, 1);
  /* the sandbox's own push was refused: it has no credentials */
  cJSON *conv = cJSON_GetObjectItem(cJSON_GetObjectItem(j1, "session_state"), "conversation");
  const cJSON *m, *shell_out = NULL;
  cJSON_ArrayForEach(m, conv) {
    const cJSON *c = cJSON_GetObjectItem(m, "content");
    if (cJSON_IsString(c) && strstr(c->valuestring, "push-exit=")) shell_out = c;
  }
  assert_non_null(shell_out);
  if (strstr(shell_out->valuestring, "push-exit=0"))
    fail_msg("the sandbox pushed without the worker: %s", shell_out->valuestring);
  cJSON *st = cJSON_GetObjectItem(j1, "session_state");
  const char *sb1 = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "sandbox"), "id")->valuestring;
  assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "sandbox"), "driver")->valuestring, "local");
  /* turn 2: the session field as the CLI writes it */
  cJSON *in2 = cJSON_CreateObject();
  cJSON_AddStringToObject(in2, "task", "Add a second line.");
  cJSON *rp = cJSON_AddObjectToObject(in2, "repository");
  cJSON_AddStringToObject(rp, "github", "acme/calc");
  cJSON_AddStringToObject(rp, "remote", remote);
  cJSON *sess = cJSON_AddObjectToObject(in2, "session");
  cJSON_AddStringToObject(sess, "id", "sess-p");
  cJSON_AddNumberToObject(sess, "turn", 2);
  cJSON_AddStringToObject(sess, "previous_run_id", rid1);
  cJSON_AddItemToObject(sess, "state", cJSON_Duplicate(st, 1));
  char *t2 = cJSON_PrintUnformatted(in2);
  char *rid2 = start_agent("sess-p", t2, 1);
  cJSON *j2 = completed("sess-p", rid2);
  assert_string_equal(cJSON_GetObjectItem(j2, "answer")->valuestring, "Updated pull request #1.");
  assert_string_equal(cJSON_GetObjectItem(j2, "sandbox_id")->valuestring, sb1);
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j2, "pull_request"), "number")->valuedouble, 1);
  /* turn 2 re-opened the sandbox through sandbox.create's adopt, not sandbox.start */
  sched_ev ev[64];
  size_t n = scheduled("sess-p", rid2, ev, 64);
  assert_true(n > 2);
  assert_string_equal(ev[0].type, "sandbox.create");
  if (!strstr(ev[0].input, "\"adopt\":{\"sandbox_id\":\"") || !strstr(ev[0].input, sb1))
    fail_msg("turn 2's create does not adopt %s: %s", sb1, ev[0].input);
  assert_int_equal(count_type(ev, n, "sandbox.start"), 0);
  assert_int_equal(count_type(ev, n, "git.push"), 1);
  sched_free(ev, n);
  /* both turns' commits are on the one branch of the remote */
  char *lg = dbx_asprintf("git -C %s/http/r.git log --format=%%s durabox/sess-p", F.dir);
  char *log = NULL;
  assert_int_equal(sh_rc(lg, &log), 0);
  assert_string_equal(log, "two\none\ninitial\n");
  free(log), free(lg);
  /* the git server: the sandbox's attempt came without credentials (401),
   * the worker's pushes with them */
  cJSON *gl = read_log(F.git_log);
  assert_true(count_where(gl, "auth", "none", 401) >= 1);
  assert_int_equal(count_where(gl, "auth", "bad", 0), 0);
  int pushes = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, gl) {
    if (strcmp(cJSON_GetObjectItem(e, "method")->valuestring, "POST") == 0 &&
        strstr(cJSON_GetObjectItem(e, "path")->valuestring, "git-receive-pack") &&
        strcmp(cJSON_GetObjectItem(e, "auth")->valuestring, "ok") == 0)
      pushes++;
  }
  assert_int_equal(pushes, 2);
  /* GitHub: one pull request made; the second ask found it (422, lookup) */
  cJSON *hl = read_log(F.gh_log);
  assert_int_equal(count_where(hl, "method", "POST", 201), 1);
  assert_int_equal(count_where(hl, "method", "POST", 422), 1);
  assert_int_equal(count_where(hl, "method", "POST", 0), 2);
  /* the model: each of the 10 turns once */
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 10);
  /* a remote URL with credentials in it is refused at the start */
  char *bad = dbx_asprintf("{\"task\":\"x\",\"repository\":{\"remote\":\"https://u:%s@example.invalid/r.git\"}}",
                           "not-a-token");
  char *rid3 = start_agent("agent-badremote", bad, 0);
  int how = 0;
  char *msg = await_close("agent-badremote", rid3, &how);
  assert_int_equal(how, 1);
  assert_non_null(strstr(msg, "repository.remote must not carry credentials"));
  free(msg), free(rid3), free(bad);
  /* the token: nowhere under the test's folder (stores, logs, sandbox,
   * remote); the same grep finds what is there in each place */
  kill(F.worker, SIGTERM);
  dbx_svct_proc_wait(F.worker, 30000);
  assert_true(bytes_under(F.svc, "marker-task-Q7"));   /* the service's LMDB */
  assert_true(bytes_under(F.wrk, "sess-p"));           /* the worker's LMDB */
  assert_true(bytes_under(F.home, "turn two"));        /* the sandbox's files */
  assert_true(bytes_under(F.home, "PATH="));           /* env.txt: its environment */
  assert_true(bytes_under(F.home, "[core]"));          /* its .git/config */
  assert_true(bytes_under(F.dir, "git.push"));         /* the worker's log */
  assert_false(bytes_under(F.dir, GH_TOKEN));
  assert_false(bytes_under(F.dir, LLM_KEY));
  cJSON_Delete(gl), cJSON_Delete(hl), cJSON_Delete(ll), cJSON_Delete(j1), cJSON_Delete(j2);
  cJSON_Delete(in2);
  free(t2), free(in1), free(rid1), free(rid2), free(remote);
}

/* ------------------------------------------------------------ cancel */

/* 1 when a process's command line holds marker. */
static int process_with(const char *marker) {
  DIR *d = opendir("/proc");
  int found = 0;
  for (struct dirent *de; d && !found && (de = readdir(d));) {
    if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
    char p[300], buf[4096];
    snprintf(p, sizeof p, "/proc/%s/cmdline", de->d_name);
    FILE *f = fopen(p, "r");
    if (!f) continue;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    for (size_t i = 0; i < k; i++)
      if (buf[i] == '\0') buf[i] = ' ';
    buf[k] = '\0';
    found = strstr(buf, marker) != NULL;
  }
  if (d) closedir(d);
  return found;
}

/* Start a run whose model runs a long command, wait until it runs, cancel
 * the run, wait for its end. Returns the sandbox id (malloc'd). */
static char *run_and_cancel(const char *wfid, const char *marker, int keep, char **rid_out) {
  char *in = dbx_asprintf("{\"task\":\"wait\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"}%s}}",
                          F.repo, keep ? ",\"keep\":true" : "");
  char *rid = start_agent(wfid, in, 0);
  free(in);
  int up = 0;
  for (int64_t end = mono_ms() + 90000; !up && mono_ms() < end; pause_ms(100)) up = process_with(marker);
  if (!up) fail_msg("%s: the command did not start within 90 s", wfid);
  assert_int_equal(dbx_client_cancel(F.c, wfid, rid, "test", NULL), DBX_OK);
  int how = -1;
  char *res = await_close(wfid, rid, &how);
  if (how != 2) fail_msg("%s ended %d, not cancelled: %s", wfid, how, res);
  free(res);
  sched_ev ev[32];
  size_t n = scheduled(wfid, rid, ev, 32);
  char *id = NULL;
  for (size_t i = 0; i < n && !id; i++) {
    cJSON *x = cJSON_Parse(ev[i].input);
    const cJSON *sid = cJSON_GetObjectItem(x, "sandbox_id");
    if (cJSON_IsString(sid)) id = dbx_strdup(sid->valuestring);
    cJSON_Delete(x);
  }
  /* the last activity is the cleanup */
  assert_string_equal(ev[n - 1].type, keep ? "sandbox.stop" : "sandbox.delete");
  assert_int_equal(count_type(ev, n, "sandbox.delete"), keep ? 0 : 1);
  sched_free(ev, n);
  assert_non_null(id);
  /* the command is gone (the delete or stop kills it; the exec is cancelled) */
  int gone = 0;
  for (int64_t end = mono_ms() + 60000; !gone && mono_ms() < end; pause_ms(100)) gone = !process_with(marker);
  if (!gone) fail_msg("%s: the command still runs 60 s after the run was cancelled", wfid);
  *rid_out = rid;
  return id;
}

static void test_cancel_cleans(void **state) {
  (void)state;
  fixture_start("{\"replies\":["
                "{\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"sleep 291 # dbx-cancel-mark-Z\",\"timeout_s\":900}}]}"
                "]}", 0);
  char *rid = NULL;
  char *id = run_and_cancel("agent-cancel", "dbx-cancel-mark-Z", 0, &rid);
  char *dir = dbx_asprintf("%s/sandboxes/%s", F.home, id);
  if (access(dir, F_OK) == 0) fail_msg("the sandbox %s is still there after the cancel", dir);
  free(dir), free(id), free(rid);
  /* a kept sandbox is stopped, and stays */
  id = run_and_cancel("agent-cancel-kept", "dbx-cancel-mark-Z", 1, &rid);
  char *stf = dbx_asprintf("%s/sandboxes/%s/meta/state", F.home, id);
  char *stv = dbx_svct_file_read(stf);
  if (!stv || strncmp(stv, "stopped", 7) != 0) fail_msg("%s: \"%s\", not stopped", stf, stv ? stv : "(none)");
  free(stv), free(stf), free(id), free(rid);
}

/* ------------------------------------------------------- checkpoints */

static void test_checkpoints(void **state) {
  (void)state;
  fixture_start("{\"replies\":["
                "{\"tool_calls\":[{\"name\":\"read_file\",\"arguments\":{\"path\":\"base.txt\"}}]},"
                "{\"expect\":\"base\",\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"a.txt\",\"content\":\"v1\\n\"}}]},"
                "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"read_file\",\"arguments\":{\"path\":\"a.txt\"}},"
                "{\"name\":\"shell\",\"arguments\":{\"command\":\"echo v2 > a.txt && echo done-v2\"}}]},"
                "{\"expect\":\"done-v2\",\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"b.txt\",\"content\":\"b\\n\"}}]},"
                "{\"expect\":\"wrote\",\"content\":\"Done.\"}]}", 0);
  char *in = dbx_asprintf("{\"task\":\"edit\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"},"
                          "\"checkpoint\":{\"every_steps\":2,\"on_completion\":true}}}", F.repo);
  char *rid = start_agent("agent-ck", in, 0);
  free(in);
  cJSON *j = completed("agent-ck", rid);
  cJSON *cks = cJSON_GetObjectItem(j, "checkpoints");
  assert_int_equal(cJSON_GetArraySize(cks), 3);
  static const char *const reasons[] = {"baseline", "every_steps", "completion"};
  /* the files of each snapshot: a.txt absent, "v2", and b.txt too */
  static const char *const a_txt[] = {NULL, "v2\n", "v2\n"};
  static const int has_b[] = {0, 0, 1};
  for (int i = 0; i < 3; i++) {
    cJSON *c = cJSON_GetArrayItem(cks, i);
    assert_string_equal(cJSON_GetObjectItem(c, "reason")->valuestring, reasons[i]);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(c, "ok")));
    const char *ref = cJSON_GetObjectItem(c, "ref")->valuestring;
    char *path = NULL;
    /* the local driver's ref names the snapshot's folder under the home */
    char *find = dbx_asprintf("find '%s' -type d -name '%s' | head -1", F.home,
                              cJSON_GetObjectItem(c, "name")->valuestring);
    assert_int_equal(sh_rc(find, &path), 0);
    free(find);
    if (!path || !*path) fail_msg("no snapshot folder %s (ref %s) under %s", cJSON_GetObjectItem(c, "name")->valuestring, ref, F.home);
    path[strcspn(path, "\n")] = 0;
    char *cat = dbx_asprintf("cat '%s'/*/a.txt '%s'/a.txt 2>/dev/null | head -1", path, path);
    char *a = NULL;
    sh_rc(cat, &a);
    free(cat);
    if (a_txt[i] == NULL) {
      if (a && *a) fail_msg("snapshot %d has a.txt: %s", i, a);
    } else if (!a || strcmp(a, a_txt[i]) != 0) {
      fail_msg("snapshot %d (%s): a.txt is \"%s\", not \"%s\"", i, path, a ? a : "", a_txt[i]);
    }
    char *bt = dbx_asprintf("ls '%s'/*/b.txt '%s'/b.txt 2>/dev/null | head -1", path, path);
    char *b = NULL;
    sh_rc(bt, &b);
    assert_int_equal(b && *b, has_b[i]);
    free(bt), free(b), free(a), free(path);
  }
  /* history: the baseline before the first model call, every_steps right
   * after the shell (the second change), completion after the last model call */
  sched_ev ev[64];
  size_t n = scheduled("agent-ck", rid, ev, 64);
  int ck = 0, chats = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(ev[i].type, "llm.chat") == 0) chats++;
    if (strcmp(ev[i].type, "durabox.checkpoint") != 0) continue;
    assert_in_range(ck, 0, 2);
    if (!strstr(ev[i].input, reasons[ck])) fail_msg("checkpoint %d: %s", ck, ev[i].input);
    if (ck == 0) assert_int_equal(chats, 0);
    if (ck == 1) {
      assert_string_equal(ev[i - 1].type, "sandbox.exec");
      assert_int_equal(chats, 3);
    }
    if (ck == 2) assert_int_equal(chats, 5);
    ck++;
  }
  assert_int_equal(ck, 3);
  sched_free(ev, n);
  cJSON_Delete(j);
  free(rid);
}

/* ------------------------------------------------- continue-as-new */

/* The run that continued run rid (its ContinuedAsNew event), or NULL when
 * rid closed otherwise. Waits for rid to close. */
static char *next_run(const char *wfid, const char *rid) {
  for (int64_t end = mono_ms() + 180000; mono_ms() < end;) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 10000};
    dbx_err e = dbx_client_get_history(F.c, wfid, rid, &ho, &h, NULL);
    char *out = NULL;
    int closed = 0;
    if (e == DBX_OK && h.n) {
      const HistoryEvent *ev = h.events[h.n - 1];
      closed = ev->event_type == ET(WORKFLOW_EXECUTION_COMPLETED) ||
               ev->event_type == ET(WORKFLOW_EXECUTION_FAILED) ||
               ev->event_type == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW);
      if (ev->event_type == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW))
        out = dbx_strdup(ev->workflow_execution_continued_as_new_event_attributes->new_execution_run_id);
    }
    dbx_client_history_cleanup(&h);
    if (closed) return out;
  }
  fail_msg("%s run %s did not close within 180 s", wfid, rid);
  return NULL;
}

static void replay_ok(const char *wfid, const char *rid) {
  char *argv[] = {(char *)dbx_test_bin(), "replay", "--workflow-id", (char *)wfid, "--run-id",
                  (char *)rid, "--address", F.addr, NULL};
  char *out = NULL, *err = NULL;
  char *env[] = {F.env_home, NULL};
  int rc = dbx_svct_proc_run(argv, env, 60000, &out, &err);
  if (rc != 0) fail_msg("durabox replay of %s exited %d: %s%s", rid, rc, out ? out : "", err ? err : "");
  free(out), free(err);
}

static void test_continue_as_new(void **state) {
  (void)state;
  fixture_start("{\"replies\":["
                "{\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"a.txt\",\"content\":\"one\\n\"}}]},"
                "{\"expect\":\"wrote\",\"tool_calls\":[{\"name\":\"shell\",\"arguments\":{\"command\":\"cat a.txt\"}}]},"
                "{\"expect\":\"one\",\"tool_calls\":[{\"name\":\"write_file\",\"arguments\":{\"path\":\"b.txt\",\"content\":\"two\\n\"}}]},"
                "{\"expect\":\"wrote\",\"content\":\"Done after four.\"}]}", 0);
  char *in = dbx_asprintf("{\"task\":\"write two files\",\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"%s\"}},"
                          "\"continue_as_new\":{\"after_model_calls\":2}}", F.repo);
  char *rid1 = start_agent("agent-can", in, 0);
  free(in);
  char *rid2 = next_run("agent-can", rid1);
  if (!rid2) fail_msg("the first run did not continue as new");
  cJSON *j = completed("agent-can", rid2);
  assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "completed");
  assert_string_equal(cJSON_GetObjectItem(j, "answer")->valuestring, "Done after four.");
  assert_int_equal((int)cJSON_GetObjectItem(j, "model_calls")->valuedouble, 4);
  assert_int_equal((int)cJSON_GetObjectItem(j, "tool_calls")->valuedouble, 3);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "steps")), 7);
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valuedouble, 60);
  /* the whole conversation was carried: system, one user message, 4 answers, 3 tool results */
  cJSON *conv = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "session_state"), "conversation");
  assert_int_equal(cJSON_GetArraySize(conv), 9);
  int users = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, conv) users += strcmp(cJSON_GetObjectItem(m, "role")->valuestring, "user") == 0;
  assert_int_equal(users, 1);
  /* each model turn asked once, none again after the continue */
  cJSON *ll = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll), 4);
  for (int t = 0; t < 4; t++) {
    const cJSON *e = cJSON_GetArrayItem(ll, t);
    assert_int_equal((int)cJSON_GetObjectItem(e, "turn")->valuedouble, t);
    assert_int_equal((int)cJSON_GetObjectItem(e, "status")->valuedouble, 200);
  }
  /* run 1: no delete (the sandbox goes on); run 2 adopts it, deletes it at the end */
  sched_ev e1[32], e2[32];
  size_t n1 = scheduled("agent-can", rid1, e1, 32), n2 = scheduled("agent-can", rid2, e2, 32);
  assert_int_equal(count_type(e1, n1, "sandbox.delete"), 0);
  assert_int_equal(count_type(e1, n1, "llm.chat"), 2);
  assert_int_equal(count_type(e2, n2, "llm.chat"), 2);
  assert_string_equal(e2[0].type, "sandbox.create");
  const char *sid = cJSON_GetObjectItem(j, "sandbox_id")->valuestring;
  if (!strstr(e2[0].input, "\"adopt\":{\"sandbox_id\":\"") || !strstr(e2[0].input, sid))
    fail_msg("run 2's create does not adopt %s: %s", sid, e2[0].input);
  assert_true(strstr(e1[0].input, sid) == NULL || strstr(e1[0].input, "adopt") == NULL);
  assert_string_equal(e2[n2 - 1].type, "sandbox.delete");
  /* run 2's first model call carries run 1's conversation */
  for (size_t i = 0; i < n2; i++) {
    if (strcmp(e2[i].type, "llm.chat") != 0) continue;
    cJSON *x = cJSON_Parse(e2[i].input);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(x, "messages")), 6);
    cJSON_Delete(x);
    break;
  }
  sched_free(e1, n1), sched_free(e2, n2);
  char *dir = dbx_asprintf("%s/sandboxes/%s", F.home, sid);
  if (access(dir, F_OK) == 0) fail_msg("the sandbox %s is still there", dir);
  free(dir);
  /* both runs replay against the code, and the model is not asked again */
  replay_ok("agent-can", rid1);
  replay_ok("agent-can", rid2);
  cJSON *ll2 = read_log(F.llm_log);
  assert_int_equal(cJSON_GetArraySize(ll2), 4);
  cJSON_Delete(ll), cJSON_Delete(ll2), cJSON_Delete(j);
  free(rid1), free(rid2);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_push_two_turns, teardown),
      cmocka_unit_test_teardown(test_cancel_cleans, teardown),
      cmocka_unit_test_teardown(test_checkpoints, teardown),
      cmocka_unit_test_teardown(test_continue_as_new, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
