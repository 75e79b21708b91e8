/* Integration tests of durabox.Agent's checkpoints and continue-as-new
 * (workflows/agent.h; docs/agent.md), with the fixture of it_agent_push
 * (tests/agent_fixture.h).
 *  - checkpoints: sandbox.checkpoint {every_steps: 2, on_completion: true}:
 *    a baseline before the first model call, one after the second
 *    workspace-changing tool call (write_file, shell; the reads do not
 *    count), one at completion; each recorded in history (durabox.checkpoint
 *    with its reason) and in the result, each snapshot holding the files as
 *    they were then.
 *  - continue_as_new: {after_model_calls: 2}: the run continues as new
 *    before its third model call, carrying the conversation; the new run
 *    adopts the sandbox and finishes; every model turn was asked once; both
 *    runs replay (durabox replay) without asking the model.
 *  - input_bounds: the new fields out of range are refused at the start. */
#include "tests/agent_fixture.h"
#include "workflows/agent.h"

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

/* ------------------------------------------------- input bounds */

/* The new input fields are refused out of range at the start, naming the
 * field (dbx_agent_validate, as the workflow's create and durabox run). */
static void test_input_bounds(void **state) {
  (void)state;
  static const char *const bad[][2] = {
      {"{\"task\":\"x\",\"sandbox\":{\"checkpoint\":{\"every_steps\":1.5}}}", "sandbox.checkpoint.every_steps"},
      {"{\"task\":\"x\",\"sandbox\":{\"checkpoint\":{\"every_steps\":1e300}}}", "sandbox.checkpoint.every_steps"},
      {"{\"task\":\"x\",\"sandbox\":{\"checkpoint\":{\"on_completion\":\"yes\"}}}", "sandbox.checkpoint.on_completion"},
      {"{\"task\":\"x\",\"sandbox\":{\"checkpoint\":{\"every\":2}}}", "unknown field \"every\""},
      {"{\"task\":\"x\",\"sandbox\":{\"checkpoint\":true}}", "sandbox.checkpoint must be"},
      {"{\"task\":\"x\",\"continue_as_new\":{\"after_model_calls\":0}}", "continue_as_new: after_model_calls"},
      {"{\"task\":\"x\",\"continue_as_new\":{\"after_history_bytes\":1e300}}", "after_history_bytes"},
      {"{\"task\":\"x\",\"continued\":{\"conversation\":5}}", "continued.conversation"},
      {"{\"task\":\"x\",\"model\":{\"timeout_s\":1e300}}", "model.timeout_s"},
      {"{\"task\":\"x\",\"model\":{\"retry\":{\"maximum_attempts\":1e12}}}", "model.retry.maximum_attempts"},
      {"{\"task\":\"x\",\"model\":{\"retry\":{\"tries\":2}}}", "unknown field \"tries\""},
      {"{\"task\":\"x\",\"repository\":{\"remote\":\"https://bot:s3cret@example.invalid/r.git\"}}", "must not carry credentials"},
      {"{\"task\":\"x\",\"repository\":{\"remote\":\"--upload-pack=x\"}}", "repository.remote"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char err[512] = "";
    int rc = dbx_agent_validate(bad[i][0], strlen(bad[i][0]), err, sizeof err);
    if (rc != -1 || !strstr(err, bad[i][1]))
      fail_msg("%s: rc %d, \"%s\" does not name \"%s\"", bad[i][0], rc, err, bad[i][1]);
  }
  const char *good = "{\"task\":\"x\",\"sandbox\":{\"checkpoint\":{\"every_steps\":3,\"on_completion\":false}},"
                     "\"continue_as_new\":{\"after_model_calls\":5,\"after_history_bytes\":1000000},"
                     "\"model\":{\"timeout_s\":60,\"retry\":{\"maximum_attempts\":3,\"initial_interval_s\":0.2}},"
                     "\"repository\":{\"remote\":\"https://github.com/acme/calc.git\"}}";
  char err[512] = "";
  if (dbx_agent_validate(good, strlen(good), err, sizeof err) != 0) fail_msg("refused: %s", err);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_checkpoints, teardown),
      cmocka_unit_test_teardown(test_continue_as_new, teardown),
      cmocka_unit_test(test_input_bounds),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
