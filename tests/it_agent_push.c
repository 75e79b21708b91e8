/* Integration tests of durabox.Agent's pushes and cancellation
 * (workflows/agent.h; docs/agent.md): a spawned `durabox server start-dev`
 * (its log kept), a spawned `durabox worker` (debug log kept; its driver
 * behind the sandbox quotas, DURABOX_MAX_SANDBOXES), the scripted
 * model (tests/fakes/llm) and the fake GitHub (tests/fakes/github), with a
 * real git repository on the local driver.
 *
 *  - push_two_turns: a git smart-HTTP server with Basic authentication
 *    (tests/fakes/git/git_http.py, user x-access-token, the worker's
 *    GITHUB_TOKEN as password). Turn 1 commits, tries `git push` from the
 *    sandbox itself (refused: the sandbox has no credentials), pushes with
 *    the push tool (git.push: the worker's token) and opens a pull request;
 *    turn 2 (--session, on a worker with GIT_TOKEN / GIT_USERNAME, which the
 *    push then uses) re-opens the sandbox through sandbox.create's adopt
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
 *    once the first's command is gone: both run the same marked command). */
#include "tests/agent_fixture.h"

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
    "{\"expect\":\"with the worker's GIT_TOKEN\",\"tool_calls\":[{\"name\":\"open_pr\",\"arguments\":{\"title\":\"Notes\"}}]},"
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
  /* turn 2 on a new worker that has GIT_TOKEN / GIT_USERNAME too: the push
   * takes those (the model reads which variable, never the value) */
  kill(F.worker, SIGTERM);
  dbx_svct_proc_wait(F.worker, 30000);
  F.git_token = 1;
  spawn_worker();
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

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_push_two_turns, teardown),
      cmocka_unit_test_teardown(test_cancel_cleans, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
