/* The fixture of it_agent_push and it_agent_ckpt (included by both, no
 * other user): a spawned `durabox server start-dev` (its log kept), a
 * spawned `durabox worker` (debug log kept; its driver behind the sandbox
 * quotas, DURABOX_MAX_SANDBOXES), the scripted model (tests/fakes/llm), the
 * fake GitHub (tests/fakes/github), optionally the git smart-HTTP server
 * (tests/fakes/git/git_http.py), and a real git repository, on the local
 * driver. */
#ifndef DBX_TESTS_AGENT_FIXTURE_H
#define DBX_TESTS_AGENT_FIXTURE_H
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
  int git_token; /* 1: the worker gets GIT_TOKEN / GIT_USERNAME too (the push prefers them) */
  dbx_client *c;
} fixture;

static fixture F __attribute__((unused));

static __attribute__((unused)) int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static __attribute__((unused)) void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static __attribute__((unused)) char *src_path(const char *rel) {
  const char *src = getenv("DBX_SOURCE_DIR");
  assert_non_null(src);
  return dbx_asprintf("%s/%s", src, rel);
}

/* Start a fake (python3 script args...), wait for its port file. */
static __attribute__((unused)) int start_fake(const char *script_rel, const char *name, char *const extra[]) {
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

static __attribute__((unused)) void sh(const char *cmd) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  char *err = NULL;
  int rc = dbx_svct_proc_run(argv, NULL, 60000, NULL, &err);
  if (rc != 0) fail_msg("sh -c '%s' exited %d: %s", cmd, rc, err ? err : "");
  free(err);
}

/* The exit status of sh -c cmd (its output in *out when out). */
static __attribute__((unused)) int sh_rc(const char *cmd, char **out) {
  char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
  return dbx_svct_proc_run(argv, NULL, 60000, out, NULL);
}

static __attribute__((unused)) void spawn_worker(void) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", F.addr, "--task-queue", TQ,
                  "--db", F.wrk, "--log-level", "debug", NULL};
  /* GIT_TOKEN is emptied unless F.git_token: the push uses GITHUB_TOKEN; a
   * sandbox quota puts activities/quota.h in front of the local driver, so
   * the credentials pass through it too */
  char *env[] = {F.env_home, F.env_llm, "LLM_MODEL=fake-model", "LLM_API_KEY=" LLM_KEY,
                 "GITHUB_TOKEN=" GH_TOKEN, F.git_token ? "GIT_TOKEN=" GH_TOKEN : "GIT_TOKEN=",
                 F.git_token ? "GIT_USERNAME=x-access-token" : "GIT_USERNAME=", F.env_gh,
                 "DURABOX_MAX_SANDBOXES=50", NULL};
  char log[700];
  snprintf(log, sizeof log, "%s.%lld", F.wlog, (long long)mono_ms());
  F.worker = dbx_svct_proc_spawn(argv, env, log, log);
}

/* The repository, the fakes (model script given), the service, a worker. */
static __attribute__((unused)) void fixture_start(const char *script_json, int with_git_http) {
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

static __attribute__((unused)) int teardown(void **state) {
  (void)state;
  if (F.c) dbx_client_destroy(F.c);
  dbx_svct_proc_kill_all();
  dbx_svct_server_kill_all();
  if (F.dir && !getenv("DBX_KEEP")) dbx_test_rmrf(F.dir);
  free(F.dir), free(F.svc), free(F.wrk), free(F.home), free(F.repo);
  memset(&F, 0, sizeof F);
  return 0;
}

static __attribute__((unused)) char *start_agent(const char *wfid, const char *input, int reuse) {
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
static __attribute__((unused)) char *await_close(const char *wfid, const char *rid, int *how) {
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

static __attribute__((unused)) cJSON *completed(const char *wfid, const char *rid) {
  int how = 0;
  char *res = await_close(wfid, rid, &how);
  if (how != 0) fail_msg("%s did not complete (%d): %s", wfid, how, res);
  cJSON *j = cJSON_Parse(res);
  assert_non_null(j);
  free(res);
  return j;
}

/* Lines of a JSONL log, parsed. */
static __attribute__((unused)) cJSON *read_log(const char *path) {
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

static __attribute__((unused)) int count_where(const cJSON *log, const char *key, const char *value, int status) {
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
static __attribute__((unused)) int bytes_under(const char *path, const char *needle) {
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

static __attribute__((unused)) size_t scheduled(const char *wfid, const char *rid, sched_ev *out, size_t cap) {
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

static __attribute__((unused)) void sched_free(sched_ev *s, size_t n) {
  for (size_t i = 0; i < n; i++) free(s[i].input);
}

static __attribute__((unused)) int count_type(const sched_ev *s, size_t n, const char *type) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += strcmp(s[i].type, type) == 0;
  return k;
}

#endif
