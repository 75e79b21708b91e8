/* A known git token appears nowhere after a run over Daytona (the fake
 * Daytona server, tests/fakes/daytona): the real embedded service, a real
 * `durabox worker --sandbox daytona` process that alone holds GIT_TOKEN,
 * and a git smart-HTTP server with Basic authentication
 * (tests/fakes/git/git_http.py) that accepts only that token. The Script's
 * sandbox is a git source from that server whose input names the token's
 * variable ("token_env"), never the value; the clone goes through a Daytona
 * secret restricted to the server's host, the sandbox seeing only the
 * secret's placeholder. After the run the token is not in the history
 * (every event packed, payloads included), the service's or the worker's
 * LMDB store files, the worker's log output, any request the fake logged
 * except the POST /secret that made the secret, the sandbox's environment
 * (a step prints it) or its files; no secret is left at Daytona. A
 * control puts the token in a file first, so the search is shown to find
 * it. Refused before any clone: a URL holding a password, and a token
 * variable the worker does not have. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/fs.h"
#include "temporal/api/history/v1/message.pb-c.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"

extern char **environ;

#define USER "dbx-bot"

static pid_t g_worker = -1, g_http = -1;
static dbx_fake_daytona g_fake;
static char g_token[64];

static int stop_children(void **state) {
  (void)state;
  if (g_worker > 0) {
    kill(g_worker, SIGKILL);
    waitpid(g_worker, NULL, 0);
    g_worker = -1;
  }
  if (g_http > 0) {
    kill(g_http, SIGTERM);
    waitpid(g_http, NULL, 0);
    g_http = -1;
  }
  dbx_fake_daytona_stop(&g_fake);
  return 0;
}

/* The git HTTP server on a seeded bare repository r.git under dir; its port. */
static int start_git_http(const char *dir) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "set -e; mkdir -p %s/http; git init -q --bare -b main %s/http/r.git; "
           "git init -q -b main %s/seed; cd %s/seed; echo one > a.txt; git add a.txt; "
           "git -c user.name=t -c user.email=t@e commit -q -m init; "
           "git push -q %s/http/r.git main",
           dir, dir, dir, dir, dir);
  assert_int_equal(system(cmd), 0);
  char script[1200], root[1100], portfile[1100], log[1100];
  const char *src = getenv("DBX_SOURCE_DIR");
  if (src && *src) {
    snprintf(script, sizeof script, "%s/tests/fakes/git/git_http.py", src);
  } else {
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    snprintf(slash + 1, sizeof script - (size_t)(slash + 1 - script), "fakes/git/git_http.py");
  }
  snprintf(root, sizeof root, "%s/http", dir);
  snprintf(portfile, sizeof portfile, "%s/http.port", dir);
  snprintf(log, sizeof log, "%s/http.log", dir);
  char *argv[] = {"python3", script, "--root", root, "--user", USER, "--password", g_token,
                  "--log", log, "--port-file", portfile, NULL};
  assert_int_equal(posix_spawnp(&g_http, "python3", NULL, NULL, argv, environ), 0);
  for (int i = 0; i < 3000; i++) { /* up to 60 s on a loaded machine */
    FILE *p = fopen(portfile, "r");
    int port = 0;
    if (p) {
      int got = fscanf(p, "%d", &port);
      fclose(p);
      if (got == 1 && port > 0) return port;
    }
    if (waitpid(g_http, NULL, WNOHANG) == g_http) {
      g_http = -1;
      fail_msg("the git HTTP server exited (python3?)");
    }
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  fail_msg("the git HTTP server did not start");
  return -1;
}

static const cJSON *step_named(const cJSON *j, const char *name) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "steps")) {
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")), name) == 0) return s;
  }
  fail_msg("no step '%s'", name);
  return NULL;
}

/* Every history event packed (payloads are raw bytes in it): none holds
 * the token; the sandbox.create's input names the variable. */
static void history_has_no_token(dbx_client *c, const char *wf, const char *rid) {
  dbx_client_history h = {0};
  char *err = NULL;
  assert_int_equal(dbx_client_get_history(c, wf, rid, NULL, &h, &err), DBX_OK);
  assert_true(h.n > 5);
  int named = 0;
  for (size_t i = 0; i < h.n; i++) {
    size_t n = temporal__api__history__v1__history_event__get_packed_size(h.events[i]);
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    temporal__api__history__v1__history_event__pack(h.events[i], buf);
    if (memmem(buf, n, g_token, strlen(g_token))) fail_msg("history event %zu holds the token", i);
    named += memmem(buf, n, "\"token_env\":\"GIT_TOKEN\"", 23) != NULL;
    free(buf);
  }
  assert_true(named > 0); /* the input travelled, with the name in it */
  dbx_client_history_cleanup(&h);
  free(err);
}

/* The fake's log: the token only in the body of POST /api/secret (which
 * restricts it to 127.0.0.1); the clone's body holds the placeholder. */
static void fake_log_only_in_secret(void) {
  char *log = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
  assert_non_null(log);
  cJSON *lj = cJSON_Parse(log);
  assert_non_null(lj);
  int in_secret = 0, clone_placeholder = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(lj, "requests")) {
    const char *m = cJSON_GetObjectItem(e, "method")->valuestring;
    const char *p = cJSON_GetObjectItem(e, "path")->valuestring;
    const char *q = cJSON_GetObjectItem(e, "query")->valuestring;
    const char *b = cJSON_GetStringValue(cJSON_GetObjectItem(e, "body"));
    assert_null(strstr(p, g_token));
    assert_null(strstr(q, g_token));
    if (b && strstr(b, g_token)) {
      if (strcmp(m, "POST") != 0 || strcmp(p, "/api/secret") != 0)
        fail_msg("the token is in the body of %s %s", m, p);
      assert_non_null(strstr(b, "\"hosts\":[\"127.0.0.1\"]"));
      in_secret++;
    }
    if (b && strstr(p, "/git/clone") && strstr(b, "\"password\":\"dtn_secret_"))
      clone_placeholder++;
  }
  cJSON_Delete(lj);
  free(log);
  assert_int_equal(in_secret, 1);
  assert_int_equal(clone_placeholder, 1);
  char *secrets = dbx_fake_daytona_call(&g_fake, "GET", "/_control/secrets", NULL);
  assert_non_null(secrets);
  assert_non_null(strstr(secrets, "\"items\": []")); /* deleted after the clone */
  free(secrets);
}

/* The close event's failure message of a run that failed (malloc'd), the
 * history long-polled up to about 10 s a poll. */
static char *await_failure(dbx_client *c, const char *wf, const char *rid) {
  for (int i = 0; i < 120; i++) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 10000};
    assert_int_equal(dbx_client_get_history(c, wf, rid, &ho, &h, NULL), DBX_OK);
    char *msg = NULL;
    if (h.n) {
      assert_int_equal(h.events[0]->event_type,
                       TEMPORAL__API__ENUMS__V1__EVENT_TYPE__EVENT_TYPE_WORKFLOW_EXECUTION_FAILED);
      const Temporal__Api__Failure__V1__Failure *f =
          h.events[0]->workflow_execution_failed_event_attributes->failure;
      msg = dbx_asprintf("%s | %s", f && f->message ? f->message : "",
                         f && f->cause && f->cause->message ? f->cause->message : "");
    }
    dbx_client_history_cleanup(&h);
    if (msg) return msg;
  }
  fail_msg("workflow %s did not close", wf);
  return NULL;
}

static void test_git_token_nowhere(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itds-svc"), *wrk_dir = dbx_test_tmpdir("itds-wrk"),
       *tmp = dbx_test_tmpdir("itds-tmp");
  char id[40];
  dbx_uuid_v4(id);
  snprintf(g_token, sizeof g_token, "tok-%s", id);
  /* the control: the search finds the token where it is */
  char *ctl = dbx_asprintf("%s/control/x.bin", tmp), *ctld = dbx_asprintf("%s/control", tmp);
  assert_int_equal(mkdir(ctld, 0700), 0);
  FILE *cf = fopen(ctl, "w");
  assert_non_null(cf);
  fprintf(cf, "%c%s%c", 0, g_token, 0);
  fclose(cf);
  assert_true(dbx_test_tree_holds(ctld, g_token));
  dbx_test_rmrf(ctld);
  free(ctl);
  free(ctld);

  int port = start_git_http(tmp);
  if (dbx_fake_daytona_start(&g_fake, tmp) != 0) fail_msg("%s", g_fake.why);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}"), 0);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  setenv("DAYTONA_API_URL", g_fake.api_url, 1);
  setenv("DAYTONA_API_KEY", DBX_FAKE_DAYTONA_KEY, 1);
  setenv("GIT_TOKEN", g_token, 1);
  setenv("GIT_USERNAME", USER, 1);
  char *wlog = dbx_asprintf("%s/worker.log", tmp);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, wlog, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "dsq",
                   "--db", wrk_dir, "--sandbox", "daytona", "--log-level", "debug", NULL};
  assert_int_equal(posix_spawn(&g_worker, wargv[0], &fa, NULL, wargv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  unsetenv("GIT_TOKEN"); /* only the worker has it */
  unsetenv("GIT_USERNAME");

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  char *input = dbx_asprintf(
      "{\"sandbox\":{\"keep\":true,\"source\":{\"kind\":\"git\","
      "\"url\":\"http://127.0.0.1:%d/r.git\",\"token_env\":\"GIT_TOKEN\"}},\"steps\":["
      "{\"name\":\"read\",\"kind\":\"exec\",\"command\":\"cat a.txt\"},"
      "{\"name\":\"env\",\"kind\":\"exec\",\"command\":\"env\"},"
      "{\"name\":\"cfg\",\"kind\":\"exec\",\"command\":\"git config --list --show-origin\"},"
      "{\"name\":\"bin\",\"kind\":\"exec\",\"command\":\"printf 'ok\\\\377'\"}]}",
      port);
  dbx_client_start_opts o = {0};
  o.workflow_id = "daytona-secrets";
  o.workflow_type = "durabox.Script";
  o.task_queue = "dsq";
  o.input_json = input;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  char *result = dbx_svct_await_result(c, o.workflow_id, rid, 120);
  assert_non_null(result);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "read"), "stdout")),
                      "one\n"); /* cloned with the token */
  const char *env = cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "env"), "stdout"));
  assert_non_null(env);
  if (strstr(env, "PWD=") == NULL) fail_msg("env step: %s", env); /* it is the environment */
  assert_null(strstr(env, g_token));
  assert_null(strstr(env, "DBX_GIT_TOKEN")); /* unmounted after the clone */
  const char *cfg = cJSON_GetStringValue(cJSON_GetObjectItem(step_named(j, "cfg"), "stdout"));
  assert_non_null(cfg);
  assert_non_null(strstr(cfg, "remote.origin.url=http://127.0.0.1:"));
  assert_null(strstr(cfg, g_token));
  assert_null(strstr(cfg, "dtn_secret_")); /* no credential of any kind kept */
  /* bytes that are no UTF-8 came from the raw copy: 3 bytes, not the log's
   * 5 (U+FFFD) */
  const cJSON *bin = step_named(j, "bin");
  assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(bin, "stdout_bytes")), 3);
  cJSON_Delete(j);
  assert_null(strstr(result, g_token));
  free(result);

  history_has_no_token(c, o.workflow_id, rid);
  fake_log_only_in_secret();
  /* the sandbox's files (work-dir with .git/config, HOME with the
   * command's env and raw output files) while it still exists */
  char *sbs = dbx_asprintf("%s/fake-daytona/sb", tmp);
  assert_true(dbx_test_tree_holds(sbs, "one\n")); /* the clone is there */
  assert_false(dbx_test_tree_holds(sbs, g_token));

  /* refused before any clone: a password in the URL (it would be in the
   * input), and a token variable the worker does not have */
  const char *bad[][2] = {
      {"\"url\":\"http://dbx-bot:pw-in-url-77@127.0.0.1:%d/r.git\"", "holds a password"},
      {"\"url\":\"http://127.0.0.1:%d/r.git\",\"token_env\":\"DBX_NO_SUCH_TOKEN\"",
       "is not set in the worker's environment"}};
  for (int i = 0; i < 2; i++) {
    char fmt[512], wid[32];
    snprintf(fmt, sizeof fmt, "{\"sandbox\":{\"source\":{\"kind\":\"git\",%s}},\"steps\":[]}",
             bad[i][0]);
    char *in2 = dbx_asprintf(fmt, port);
    snprintf(wid, sizeof wid, "daytona-secrets-bad-%d", i);
    dbx_client_start_opts o2 = {0};
    o2.workflow_id = wid;
    o2.workflow_type = "durabox.Script";
    o2.task_queue = "dsq";
    o2.input_json = in2;
    char *rid2 = NULL;
    assert_int_equal(dbx_client_start_workflow(c, &o2, &rid2, NULL), DBX_OK);
    char *r2 = await_failure(c, wid, rid2);
    assert_non_null(r2);
    if (strstr(r2, bad[i][1]) == NULL) fail_msg("run %d: %s", i, r2);
    assert_null(strstr(r2, "pw-in-url-77"));
    free(r2);
    free(rid2);
    free(in2);
  }

  kill(g_worker, SIGTERM);
  int st = 0;
  assert_int_equal(waitpid(g_worker, &st, 0), g_worker);
  g_worker = -1;
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  assert_false(dbx_test_tree_holds(svc_dir, g_token));
  assert_false(dbx_test_tree_holds(wrk_dir, g_token));
  assert_true(dbx_test_tree_holds(svc_dir, "token_env")); /* the store holds the input, by name */
  char *wl = NULL;
  size_t wn = 0;
  assert_int_equal(dbx_fs_read_all(wlog, &wl, &wn), DBX_OK);
  assert_true(wn > 0); /* debug logging said something */
  assert_null(memmem(wl, wn, g_token, strlen(g_token)));
  free(wl);
  dbx_fake_daytona_stop(&g_fake);
  kill(g_http, SIGTERM);
  waitpid(g_http, NULL, 0);
  g_http = -1;
  free(sbs);
  free(wlog);
  free(input);
  free(rid);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(tmp);
  free(svc_dir);
  free(wrk_dir);
  free(tmp);
  dbx_rpc_global_shutdown();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_git_token_nowhere, stop_children),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
