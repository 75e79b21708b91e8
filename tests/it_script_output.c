/* Integration test of a Script's output (issue 9, "Output") on the real
 * embedded service and a real `durabox worker` over local sandboxes: a step
 * printing 30 MB runs exactly once and its summary keeps the tail where the
 * test summary is; stdout and stderr stay apart; a Latin-1 byte shows as
 * U+FFFD instead of erasing the output; a failed step says why; a
 * max_output_bytes over the payload's limit is refused when checked; a
 * secret one step leaves in the sandbox comes back from no later step. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/sandbox.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "workflows/script.h"

extern char **environ;

/* The worker child, killed by the teardown also when an assertion failed
 * (it would otherwise outlive the test holding its stdout). */
static pid_t g_worker = -1;

static int kill_worker(void **state) {
  (void)state;
  if (g_worker > 0) {
    kill(g_worker, SIGKILL);
    waitpid(g_worker, NULL, 0);
    g_worker = -1;
  }
  return 0;
}

static pid_t spawn(char *const argv[]) {
  pid_t pid = -1;
  assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
  return pid;
}

static int wait_exit(pid_t pid) {
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Bytes allocated on disk under dir (sparse files count what they use). */
static long long disk_bytes(const char *dir) {
  long long sum = 0;
  DIR *d = opendir(dir);
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = dbx_asprintf("%s/%s", dir, e->d_name);
    struct stat sb;
    if (p && lstat(p, &sb) == 0)
      sum += S_ISDIR(sb.st_mode) ? disk_bytes(p) : (long long)sb.st_blocks * 512;
    free(p);
  }
  if (d) closedir(d);
  return sum;
}

static const cJSON *step_named(const cJSON *j, const char *name) {
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(j, "steps")) {
    if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")), name) == 0) return s;
  }
  fail_msg("no step '%s'", name);
  return NULL;
}

static const char *sval(const cJSON *o, const char *k) {
  const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(o, k));
  if (v == NULL) fail_msg("no string field '%s'", k);
  return v;
}

static double nval(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItem(o, k);
  if (!cJSON_IsNumber(v)) fail_msg("no number field '%s'", k);
  return v->valuedouble;
}

static void test_script_output_tells_the_truth(void **state) {
  (void)state;
  dbx_rpc_global_init();
  char *svc_dir = dbx_test_tmpdir("itso-svc"), *wrk_dir = dbx_test_tmpdir("itso-wrk"),
       *home = dbx_test_tmpdir("itso-home");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  /* the worker alone holds the secret, as a variable of its environment */
  static const char *const secret = "Itso-Hidden-7261";
  setenv("DBX_ITSO_TOKEN", secret, 1);
  char *wargv[] = {(char *)dbx_test_bin(), "worker", "--address", addr, "--task-queue", "soq",
                   "--db", wrk_dir, "--sandbox-home", home, "--log-level", "error", NULL};
  pid_t worker = spawn(wargv);
  g_worker = worker;
  long long store_before = disk_bytes(wrk_dir);

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts o = {0};
  o.workflow_id = "script-output";
  o.workflow_type = "durabox.Script";
  o.task_queue = "soq";
  o.input_json =
      "{\"sandbox\":{\"keep\":false},\"steps\":["
      "{\"name\":\"big\",\"kind\":\"exec\",\"command\":\"echo run >> runs.log; "
      "head -c 30000000 /dev/zero | tr '\\\\000' x; echo; echo 'SUMMARY: 3 passed'\"},"
      "{\"name\":\"mixed\",\"kind\":\"exec\",\"continue_on_failure\":true,\"command\":"
      "\"printf 'out-a'; printf 'err-a\\\\n' >&2; printf ' out-b\\\\n'; "
      "printf 'caf\\\\351 latin1\\\\n'; exit 3\"},"
      "{\"name\":\"runs\",\"kind\":\"read_file\",\"path\":\"runs.log\"}]}";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  char *result = dbx_svct_await_result(c, "script-output", rid, 30);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_true(strlen(result) < 64 * 1024); /* the summary stays small */

  /* 30 MB: one run, the tail kept with the count of what was cut */
  const cJSON *big = step_named(j, "big");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(big, "ok")));
  assert_int_equal((int)nval(big, "attempts"), 1);
  assert_int_equal((long long)nval(big, "stdout_bytes"), 30000000LL + 1 + 18);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(big, "stdout_truncated")));
  assert_false(cJSON_IsTrue(cJSON_GetObjectItem(big, "timed_out")));
  const char *out = sval(big, "stdout");
  size_t ol = strlen(out);
  assert_true(ol <= 2048 + 64);
  assert_string_equal(out + ol - 19, "\nSUMMARY: 3 passed\n");
  assert_memory_equal(out, "[\xe2\x80\xa6 ", 4);
  assert_non_null(strstr(out, " bytes cut \xe2\x80\xa6]\n"));
  const cJSON *runs = step_named(j, "runs");
  assert_string_equal(sval(runs, "content"), "run\n"); /* the command ran exactly once */

  /* stdout and stderr apart; a Latin-1 byte is U+FFFD, the rest stays */
  const cJSON *mixed = step_named(j, "mixed");
  assert_false(cJSON_IsTrue(cJSON_GetObjectItem(mixed, "ok")));
  assert_int_equal((int)nval(mixed, "exit_code"), 3);
  assert_string_equal(sval(mixed, "stdout"), "out-a out-b\ncaf\xef\xbf\xbd latin1\n");
  assert_string_equal(sval(mixed, "stderr"), "err-a\n");
  assert_int_equal((int)nval(mixed, "stdout_bytes"), 24);
  assert_int_equal((int)nval(mixed, "stderr_bytes"), 6);
  assert_string_equal(sval(mixed, "reason"), "exit code 3");
  assert_string_equal(sval(mixed, "output_excerpt"),
                      "out-a out-b\ncaf\xef\xbf\xbd latin1\nerr-a\n");
  assert_null(cJSON_GetObjectItem(big, "reason"));
  cJSON_Delete(j);
  free(result);
  free(rid);
  rid = NULL;

  /* A secret one step leaves in the sandbox comes back from no later step:
   * read_file and an exec that did not ask for it get every secret name of
   * the input as "redact"; no history event, store file or the result
   * holds the value. */
  o.workflow_id = "script-secret-left";
  o.input_json =
      "{\"sandbox\":{\"keep\":false},\"steps\":["
      "{\"name\":\"stash\",\"kind\":\"exec\",\"command\":\"printf 'tok=%s;' \\\"$T\\\" > left.txt\","
      "\"env\":{\"T\":{\"secret\":\"DBX_ITSO_TOKEN\"}}},"
      "{\"name\":\"peek\",\"kind\":\"read_file\",\"path\":\"left.txt\"},"
      "{\"name\":\"cat\",\"kind\":\"exec\",\"command\":\"cat left.txt; wc -c < left.txt\"}]}";
  assert_int_equal(dbx_client_start_workflow(c, &o, &rid, NULL), DBX_OK);
  result = dbx_svct_await_result(c, "script-secret-left", rid, 30);
  assert_null(strstr(result, secret));
  j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(sval(step_named(j, "peek"), "content"), "tok=[redacted:DBX_ITSO_TOKEN];");
  /* the file is 21 bytes: its real size shows only through wc, which is
   * no secret; the redacted content's size is what "bytes" says */
  assert_string_equal(sval(step_named(j, "cat"), "stdout"), "tok=[redacted:DBX_ITSO_TOKEN];21\n");
  cJSON_Delete(j);
  free(result);
  dbx_client_history h = {0};
  char *herr = NULL;
  assert_int_equal(dbx_client_get_history(c, "script-secret-left", rid, NULL, &h, &herr), DBX_OK);
  size_t with_redact = 0;
  for (size_t i = 0; i < h.n; i++) {
    size_t n = temporal__api__history__v1__history_event__get_packed_size(h.events[i]);
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    temporal__api__history__v1__history_event__pack(h.events[i], buf);
    if (memmem(buf, n, secret, strlen(secret))) fail_msg("history event %zu holds the secret", i);
    with_redact += memmem(buf, n, "\"redact\":[\"DBX_ITSO_TOKEN\"]", 27) != NULL;
    free(buf);
  }
  assert_int_equal(with_redact, 3); /* the scheduled events of stash, peek and cat */
  dbx_client_history_cleanup(&h);
  free(herr);
  free(rid);
  assert_false(dbx_test_tree_holds(svc_dir, secret));
  assert_false(dbx_test_tree_holds(wrk_dir, secret));

  /* the worker's store did not take in the 30 MB */
  long long grown = disk_bytes(wrk_dir) - store_before;
  if (grown > 16LL * 1024 * 1024) fail_msg("worker store grew by %lld bytes", grown);

  kill(worker, SIGTERM);
  assert_int_equal(wait_exit(worker), 0);
  g_worker = -1;
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(home);
  free(svc_dir);
  free(wrk_dir);
  free(home);
  dbx_rpc_global_shutdown();
}

static void test_script_output_cap_over_limit_refused(void **state) {
  (void)state;
  char err[256] = "";
  char *in = dbx_asprintf("{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"true\","
                          "\"max_output_bytes\":%zu}]}", DBX_SANDBOX_OUTPUT_MAX_BYTES + 1);
  assert_int_not_equal(dbx_script_validate(in, strlen(in), err, sizeof err), 0);
  assert_non_null(strstr(err, "max_output_bytes is over the limit"));
  free(in);
  in = dbx_asprintf("{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"true\","
                    "\"max_output_bytes\":%zu}]}", DBX_SANDBOX_OUTPUT_MAX_BYTES);
  assert_int_equal(dbx_script_validate(in, strlen(in), err, sizeof err), 0);
  free(in);
}

/* The distinct secrets of an input are limited to what a step's "redact"
 * takes (DBX_SANDBOX_REDACT_MAX); one used by many steps counts once. */
static void test_script_secret_names_limit(void **state) {
  (void)state;
  for (int extra = 0; extra <= 1; extra++) {
    size_t cap = 64 * 1024, k = 0;
    char *in = malloc(cap);
    assert_non_null(in);
    k += (size_t)snprintf(in + k, cap - k, "{\"steps\":[");
    for (int i = 0; i < DBX_SANDBOX_REDACT_MAX + extra; i++)
      k += (size_t)snprintf(in + k, cap - k,
                            "%s{\"name\":\"s%d\",\"kind\":\"exec\",\"command\":\"true\","
                            "\"env\":{\"A\":{\"secret\":\"S%d\"},\"B\":{\"secret\":\"S0\"}}}",
                            i ? "," : "", i, i);
    snprintf(in + k, cap - k, "]}");
    char err[256] = "";
    int rc = dbx_script_validate(in, strlen(in), err, sizeof err);
    if (extra) {
      assert_int_not_equal(rc, 0);
      assert_string_equal(err, "input uses 65 distinct secrets, over the limit of 64 per input");
    } else {
      assert_int_equal(rc, 0);
    }
    free(in);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_script_output_cap_over_limit_refused),
      cmocka_unit_test(test_script_secret_names_limit),
      cmocka_unit_test_teardown(test_script_output_tells_the_truth, kill_worker),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
