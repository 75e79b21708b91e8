/* Sandbox activities (activities/sandbox.h) with real processes, files and git
 * in a temporary DURABOX_HOME, driven through a fake dbx_act (act_fake.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "activities/sandbox.h"
#include "base/util.h"
#include "tests/act_fake.h"
#include "tests/testutil.h"

static char *g_home;
static char *g_tmp; /* for host-side fixtures (a git repository) */

static int group_setup(void **state) {
  (void)state;
  g_home = dbx_test_tmpdir("dbx-acts-home");
  g_tmp = dbx_test_tmpdir("dbx-acts-tmp");
  setenv("DURABOX_HOME", g_home, 1);
  return dbx_sandbox_init(NULL) == DBX_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  dbx_sandbox_shutdown();
  dbx_test_rmrf(g_home);
  dbx_test_rmrf(g_tmp);
  free(g_home);
  free(g_tmp);
  return 0;
}

static struct dbx_act act_for(const char *wf) {
  struct dbx_act a = {0};
  a.workflow_id = wf;
  a.run_id = "run-1";
  a.activity_id = "1";
  a.attempt = 1;
  return a;
}

/* One run; *out: the parsed result (success) or NULL (failure kept in res). */
static dbx_err run(const dbx_activity_type *t, struct dbx_act *a, const char *json,
                   dbx_act_result *res, cJSON **out) {
  memset(res, 0, sizeof *res);
  /* The worker gives every scheduled activity its own id, and a repeated id
   * is a retry (an exec re-attaches to its command): so each exec here that
   * is not a deliberate retry (prev_details unset) gets a fresh id. */
  static int seq;
  char aid[64];
  const char *saved = a->activity_id;
  if (t == &dbx_sandbox_exec_type && a->prev_details == NULL) {
    snprintf(aid, sizeof aid, "%s.%d", a->activity_id, ++seq);
    a->activity_id = aid;
  }
  dbx_err rc = t->run(a, json, strlen(json), res, t->ud);
  if (a->activity_id != saved) dbx_fake_act_cleanup(a); /* only retry tests read heartbeats */
  a->activity_id = saved;
  if (out) *out = res->result_json ? cJSON_Parse(res->result_json) : NULL;
  return rc;
}

static void res_cleanup(dbx_act_result *r) {
  free(r->result_json);
  free(r->failure_type);
  free(r->failure_message);
  memset(r, 0, sizeof *r);
}

/* Run expecting success; returns the parsed result (free with cJSON_Delete). */
static cJSON *ok(const dbx_activity_type *t, struct dbx_act *a, const char *json) {
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(t, a, json, &r, &o), DBX_OK);
  if (r.failure_type) fail_msg("%s failed: %s: %s", t->name, r.failure_type, r.failure_message);
  assert_non_null(o);
  res_cleanup(&r);
  return o;
}

/* Run expecting a failure of type; returns its message (free()). */
static char *failed(const dbx_activity_type *t, struct dbx_act *a, const char *json,
                    const char *type, int non_retryable) {
  dbx_act_result r;
  assert_int_equal(run(t, a, json, &r, NULL), DBX_OK);
  assert_null(r.result_json);
  assert_non_null(r.failure_type);
  assert_string_equal(r.failure_type, type);
  assert_int_equal(r.non_retryable, non_retryable);
  char *m = r.failure_message;
  r.failure_message = NULL;
  res_cleanup(&r);
  return m;
}

static void expect_message(char *m, const char *needle) {
  if (strstr(m, needle) == NULL) fail_msg("message '%s' lacks '%s'", m, needle);
  free(m);
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsString(v));
  return v->valuestring;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static int boolean(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsBool(v));
  return cJSON_IsTrue(v);
}

/* Create a sandbox for workflow wf (resource "workspace"); returns its id (free()). */
static char *make_sandbox(const char *wf, const char *source_json) {
  struct dbx_act a = act_for(wf);
  char *in = dbx_asprintf("{\"resource\":\"workspace\",\"source\":%s}",
                          source_json ? source_json : "{\"kind\":\"empty\"}");
  cJSON *o = ok(&dbx_sandbox_create_type, &a, in);
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  free(in);
  return id;
}

static int b64v(char c) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const char *p = strchr(t, c);
  return (c && p) ? (int)(p - t) : 0;
}

/* Test-side decoder (independent of the one under test). */
static size_t b64dec(const char *s, uint8_t *out) {
  size_t n = strlen(s), o = 0;
  for (size_t i = 0; i + 3 < n; i += 4) {
    uint32_t v = (uint32_t)b64v(s[i]) << 18 | (uint32_t)b64v(s[i + 1]) << 12 |
                 (uint32_t)b64v(s[i + 2]) << 6 | (uint32_t)b64v(s[i + 3]);
    out[o++] = (uint8_t)(v >> 16);
    if (s[i + 2] != '=') out[o++] = (uint8_t)(v >> 8);
    if (s[i + 3] != '=') out[o++] = (uint8_t)v;
  }
  return o;
}

/* ------------------------------------------------------------------ tests */

static void test_sandbox_acts_register_all(void **state) {
  (void)state;
  struct dbx_worker w = {0};
  dbx_sandbox_register_all(&w);
  const char *want[] = {"sandbox.create",     "sandbox.exec",       "sandbox.write_file",
                        "sandbox.read_file",  "sandbox.checkpoint", "sandbox.git_commit",
                        "sandbox.stop",       "sandbox.start",      "sandbox.delete"};
  assert_int_equal(w.n, 9);
  for (int i = 0; i < 9; i++) {
    assert_string_equal(w.types[i]->name, want[i]);
    assert_int_equal(w.types[i]->retry_class, DBX_SAFE_TO_RETRY);
  }
}

static void test_sandbox_acts_create_adopts_derived_id(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-create");
  const char *in = "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"}}";
  cJSON *o1 = ok(&dbx_sandbox_create_type, &a, in);
  a.attempt = 2; /* a retry of the same activity */
  cJSON *o2 = ok(&dbx_sandbox_create_type, &a, in);
  /* FNV-1a 64 of "wf-create/workspace", computed here independently */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *s = "wf-create/workspace"; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  char want[32];
  snprintf(want, sizeof want, "dbx-%016llx", (unsigned long long)h);
  assert_string_equal(str(o1, "sandbox_id"), want);
  assert_string_equal(str(o2, "sandbox_id"), want);
  assert_false(boolean(o1, "adopted"));
  assert_true(boolean(o2, "adopted"));
  struct stat st;
  assert_int_equal(stat(str(o1, "path"), &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  /* another workflow, or another resource, gets another sandbox */
  struct dbx_act b = act_for("wf-create-2");
  cJSON *o3 = ok(&dbx_sandbox_create_type, &b, in);
  assert_string_not_equal(str(o3, "sandbox_id"), want);
  cJSON *o4 = ok(&dbx_sandbox_create_type, &a, "{\"resource\":\"other\"}");
  assert_string_not_equal(str(o4, "sandbox_id"), want);
  assert_false(boolean(o4, "adopted"));
  /* the same id with another source is a conflict, not an adoption */
  char *m = failed(&dbx_sandbox_create_type, &a,
                   "{\"resource\":\"workspace\",\"source\":{\"kind\":\"snapshot\",\"ref\":\"nope\"}}",
                   "SandboxConflict", 1);
  free(m);
  cJSON_Delete(o1);
  cJSON_Delete(o2);
  cJSON_Delete(o3);
  cJSON_Delete(o4);
}

/* Entries under $DURABOX_HOME/sandboxes. */
static int count_sandboxes(void) {
  char *cmd = dbx_asprintf("ls -A %s/sandboxes | wc -l", g_home);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  int n = -1;
  assert_int_equal(fscanf(p, "%d", &n), 1);
  pclose(p);
  free(cmd);
  return n;
}

/* A clone that never gets an answer (a listening socket nobody serves):
 * sandbox.create heartbeats while it waits, stops at the cancellation the
 * third heartbeat reports, leaves no git process behind, and the next
 * create of the same id starts clean. */
static void test_sandbox_acts_create_heartbeats_and_stops_on_cancel(void **state) {
  (void)state;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(ls >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(ls, 4), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
  int port = ntohs(sa.sin_port);

  struct dbx_act a = act_for("wf-hang");
  a.cancel_at_heartbeat = 3;
  alarm(120); /* without the cancellation the clone would wait forever: fail instead */
  char *in = dbx_asprintf("{\"resource\":\"workspace\",\"source\":{\"kind\":\"git\","
                          "\"url\":\"http://127.0.0.1:%d/hang.git\"}}", port);
  int before = count_sandboxes();
  dbx_act_result r;
  assert_int_equal(run(&dbx_sandbox_create_type, &a, in, &r, NULL), DBX_ECANCELED);
  assert_int_equal(count_sandboxes(), before); /* the cancelled create left nothing */
  alarm(0);
  assert_int_equal(a.heartbeats, 3);
  assert_null(r.result_json);
  res_cleanup(&r);
  dbx_fake_act_cleanup(&a);
  free(in);
  /* "han[g]" so the pattern does not match the shell running pgrep */
  char *pg = dbx_asprintf("pgrep -f '127.0.0.1:%d/han[g].git' >/dev/null", port);
  int st = system(pg);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 1); /* 1: no process matched */
  free(pg);
  close(ls);

  struct dbx_act b = act_for("wf-hang");
  cJSON *o = ok(&dbx_sandbox_create_type, &b,
                "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"}}");
  assert_false(boolean(o, "adopted"));
  char *tmp = dbx_asprintf("%s/sandboxes/%s/workspace.tmp", g_home, str(o, "sandbox_id"));
  assert_int_equal(access(tmp, F_OK), -1);
  assert_int_equal(access(str(o, "path"), F_OK), 0);
  free(tmp);
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&b);
}

static void test_sandbox_acts_exec_env_and_secret_redacted(void **state) {
  (void)state;
  const char *secret = "s3cr3t-Value-42";
  setenv("DBX_TEST_TOKEN", secret, 1);
  char *id = make_sandbox("wf-exec", NULL);
  struct dbx_act a = act_for("wf-exec");
  char *in = dbx_asprintf(
      "{\"sandbox_id\":\"%s\",\"command\":\"printf '%%s|%%s' \\\"$PLAIN\\\" \\\"$TOKEN\\\"; "
      "echo \\\"err:$TOKEN:$TOKEN\\\" >&2; exit 3\","
      "\"env\":{\"PLAIN\":\"hello\",\"TOKEN\":{\"secret\":\"DBX_TEST_TOKEN\"}}}",
      id);
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(&dbx_sandbox_exec_type, &a, in, &r, &o), DBX_OK);
  assert_null(r.failure_type); /* a non-zero exit is a result */
  assert_null(strstr(r.result_json, secret));
  assert_null(strstr(r.result_json, "s3cr3t"));
  assert_int_equal((int)num(o, "exit_code"), 3);
  assert_string_equal(str(o, "stdout"), "hello|[redacted:DBX_TEST_TOKEN]");
  assert_string_equal(str(o, "stderr"),
                      "err:[redacted:DBX_TEST_TOKEN]:[redacted:DBX_TEST_TOKEN]\n");
  assert_false(boolean(o, "timed_out"));
  assert_false(boolean(o, "stdout_truncated"));
  /* the redacted text's size, not the raw one (which would give the value's length) */
  assert_int_equal((int)num(o, "stdout_bytes"), (int)strlen("hello|[redacted:DBX_TEST_TOKEN]"));
  assert_int_equal((int)num(o, "stderr_bytes"),
                   (int)strlen("err:[redacted:DBX_TEST_TOKEN]:[redacted:DBX_TEST_TOKEN]\n"));
  assert_int_equal((int)num(o, "signal"), 0);
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);

  /* a value cut off at the output cap is still redacted */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf 'ab%%s' \\\"$T\\\"\","
                    "\"max_output_bytes\":9,\"env\":{\"T\":{\"secret\":\"DBX_TEST_TOKEN\"}}}",
                    id);
  assert_int_equal(run(&dbx_sandbox_exec_type, &a, in, &r, &o), DBX_OK);
  assert_null(strstr(r.result_json, "s3cr"));
  assert_string_equal(str(o, "stdout"), "ab[redacted:DBX_TEST_TOKEN]");
  assert_true(boolean(o, "stdout_truncated"));
  assert_int_equal((int)num(o, "stdout_bytes"), (int)strlen("ab[redacted:DBX_TEST_TOKEN]"));
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);

  /* an unset secret names the variable and runs nothing */
  unsetenv("DBX_TEST_MISSING");
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\","
                    "\"env\":{\"X\":{\"secret\":\"DBX_TEST_MISSING\"}}}", id);
  expect_message(failed(&dbx_sandbox_exec_type, &a, in, "SecretMissing", 1), "DBX_TEST_MISSING");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(&dbx_sandbox_read_file_type, &a, in, "FileNotFound", 1));
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_binary_output_base64(void **state) {
  (void)state;
  char *id = make_sandbox("wf-bin", NULL);
  struct dbx_act a = act_for("wf-bin");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '\\\\377\\\\376A\\\\000B'; "
                          "printf 'ok\\\\000' >&2\"}", id);
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "stdout"));
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "stderr"));
  uint8_t buf[64];
  size_t n = b64dec(str(o, "stdout_b64"), buf);
  const uint8_t want[] = {0xff, 0xfe, 'A', 0, 'B'};
  assert_int_equal(n, sizeof want);
  assert_memory_equal(buf, want, sizeof want);
  assert_int_equal((int)num(o, "stdout_bytes"), 5);
  n = b64dec(str(o, "stderr_b64"), buf); /* valid UTF-8 but with a NUL */
  assert_int_equal(n, 3);
  assert_memory_equal(buf, "ok\0", 3);
  cJSON_Delete(o);
  free(in);
  /* valid multi-byte UTF-8 stays text */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf 'h\\\\303\\\\251'\"}", id);
  o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_string_equal(str(o, "stdout"), "h\xc3\xa9");
  cJSON_Delete(o);
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_timeout(void **state) {
  (void)state;
  char *id = make_sandbox("wf-timeout", NULL);
  struct dbx_act a = act_for("wf-timeout");
  char *in = dbx_asprintf(
      "{\"sandbox_id\":\"%s\",\"command\":\"echo started; exec sleep 30\",\"timeout_s\":0.3}", id);
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_true(boolean(o, "timed_out"));
  assert_string_equal(str(o, "stdout"), "started\n");
  assert_int_not_equal((int)num(o, "exit_code"), 0);
  cJSON_Delete(o);
  free(in);
  free(id);
}

static void test_sandbox_acts_file_round_trip_all_bytes(void **state) {
  (void)state;
  char *id = make_sandbox("wf-files", NULL);
  struct dbx_act a = act_for("wf-files");
  /* all 256 byte values, base64 by a separate route: the exec of base64(1) */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"i=0; while [ $i -lt 256 ]; do "
                          "printf \\\"\\\\\\\\$(printf %%o $i)\\\"; i=$((i+1)); done | base64 -w0\"}",
                          id);
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  char *b64 = dbx_strdup(str(o, "stdout"));
  assert_int_equal(strlen(b64), 344);
  uint8_t buf[300];
  assert_int_equal(b64dec(b64, buf), 256);
  for (int i = 0; i < 256; i++) assert_int_equal(buf[i], i);
  cJSON_Delete(o);
  free(in);

  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/e/bytes.bin\",\"content_b64\":\"%s\"}", id,
                    b64);
  o = ok(&dbx_sandbox_write_file_type, &a, in);
  assert_int_equal((int)num(o, "bytes"), 256);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/e/bytes.bin\"}", id);
  o = ok(&dbx_sandbox_read_file_type, &a, in);
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "content"));
  assert_string_equal(str(o, "content_b64"), b64);
  assert_int_equal((int)num(o, "bytes"), 256);
  cJSON_Delete(o);
  free(in);
  /* the bytes on disk, checked by the sandbox itself */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"base64 -w0 d/e/bytes.bin\"}", id);
  o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_string_equal(str(o, "stdout"), b64);
  cJSON_Delete(o);
  free(in);

  /* text content comes back as text */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"t.txt\",\"content\":\"h\\u00e9llo\\n\"}", id);
  o = ok(&dbx_sandbox_write_file_type, &a, in);
  assert_int_equal((int)num(o, "bytes"), 7);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"t.txt\"}", id);
  o = ok(&dbx_sandbox_read_file_type, &a, in);
  assert_string_equal(str(o, "content"), "h\xc3\xa9llo\n");
  cJSON_Delete(o);
  free(in);
  free(b64);
  free(id);
}

static void test_sandbox_acts_path_refused(void **state) {
  (void)state;
  char *id = make_sandbox("wf-paths", NULL);
  struct dbx_act a = act_for("wf-paths");
  const char *bad[] = {"../x", "a/../../x", "/etc/passwd", ".."};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"%s\",\"content\":\"x\"}", id, bad[i]);
    free(failed(&dbx_sandbox_write_file_type, &a, in, "PathRefused", 1));
    free(failed(&dbx_sandbox_read_file_type, &a, in, "PathRefused", 1));
    free(in);
  }
  /* nothing was written next to the workspace */
  char *p = dbx_asprintf("%s/sandboxes/%s/x", g_home, id);
  assert_int_not_equal(access(p, F_OK), 0);
  free(p);
  /* a symlink that leads out of the workspace: refused by the driver */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"ln -s /etc out\"}", id);
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_int_equal((int)num(o, "exit_code"), 0);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"out/passwd\"}", id);
  free(failed(&dbx_sandbox_read_file_type, &a, in, "PathRefused", 1));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\",\"cwd\":\"../..\"}", id);
  free(failed(&dbx_sandbox_exec_type, &a, in, "PathRefused", 1));
  free(in);
  free(id);
}

static void test_sandbox_acts_invalid_input_names_field(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-invalid");
  expect_message(failed(&dbx_sandbox_exec_type, &a, "not json", "InvalidInput", 1), "JSON object");
  expect_message(failed(&dbx_sandbox_exec_type, &a, "[1]", "InvalidInput", 1), "JSON object");
  expect_message(failed(&dbx_sandbox_exec_type, &a, "{\"command\":\"true\"}", "InvalidInput", 1),
                 "'sandbox_id'");
  expect_message(failed(&dbx_sandbox_exec_type, &a, "{\"sandbox_id\":\"s\",\"command\":7}",
                        "InvalidInput", 1),
                 "'command'");
  expect_message(failed(&dbx_sandbox_exec_type, &a,
                        "{\"sandbox_id\":\"s\",\"command\":\"true\",\"timeout_s\":\"5\"}",
                        "InvalidInput", 1),
                 "'timeout_s'");
  expect_message(failed(&dbx_sandbox_exec_type, &a,
                        "{\"sandbox_id\":\"s\",\"command\":\"true\",\"env\":{\"A\":1}}",
                        "InvalidInput", 1),
                 "'env.A'");
  expect_message(failed(&dbx_sandbox_exec_type, &a,
                        "{\"sandbox_id\":\"../s\",\"command\":\"true\"}", "InvalidInput", 1),
                 "'sandbox_id'");
  expect_message(failed(&dbx_sandbox_write_file_type, &a,
                        "{\"sandbox_id\":\"s\",\"path\":\"f\",\"content_b64\":\"a$==\"}",
                        "InvalidInput", 1),
                 "'content_b64'");
  expect_message(failed(&dbx_sandbox_write_file_type, &a, "{\"sandbox_id\":\"s\",\"path\":\"f\"}",
                        "InvalidInput", 1),
                 "'content'");
  expect_message(failed(&dbx_sandbox_create_type, &a, "{\"source\":{\"kind\":\"floppy\"}}",
                        "InvalidInput", 1),
                 "'source.kind'");
  expect_message(failed(&dbx_sandbox_create_type, &a, "{\"source\":{\"kind\":\"dir\"}}",
                        "InvalidInput", 1),
                 "'source.path'");
  expect_message(failed(&dbx_sandbox_git_commit_type, &a, "{\"sandbox_id\":\"s\"}",
                        "InvalidInput", 1),
                 "'message'");
  expect_message(failed(&dbx_sandbox_checkpoint_type, &a,
                        "{\"sandbox_id\":\"s\",\"name\":\"a/b\"}", "InvalidInput", 1),
                 "'name'");
}

static void test_sandbox_acts_not_found(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-missing");
  const char *in = "{\"sandbox_id\":\"dbx-nosuch\",\"command\":\"true\",\"path\":\"f\","
                   "\"content\":\"x\",\"message\":\"m\"}";
  const dbx_activity_type *types[] = {&dbx_sandbox_exec_type,       &dbx_sandbox_read_file_type,
                                      &dbx_sandbox_write_file_type, &dbx_sandbox_git_commit_type,
                                      &dbx_sandbox_checkpoint_type, &dbx_sandbox_stop_type,
                                      &dbx_sandbox_start_type};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    expect_message(failed(types[i], &a, in, "SandboxNotFound", 1), "dbx-nosuch");
  expect_message(failed(&dbx_sandbox_create_type, &a,
                        "{\"source\":{\"kind\":\"dir\",\"path\":\"/nonexistent/dbx/dir\"}}",
                        "SourceNotFound", 1),
                 "/nonexistent/dbx/dir");
}

static void test_sandbox_acts_git_commit_sha(void **state) {
  (void)state;
  char *repo = dbx_asprintf("%s/repo", g_tmp);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init",
                           repo, repo);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  char *src = dbx_asprintf("{\"kind\":\"git\",\"path\":\"%s\"}", repo);
  char *id = make_sandbox("wf-git", src);
  struct dbx_act a = act_for("wf-git");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"a.txt\",\"content\":\"two\\n\"}", id);
  cJSON_Delete(ok(&dbx_sandbox_write_file_type, &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"message\":\"change a\",\"author\":\"A U <a@u>\"}", id);
  cJSON *o = ok(&dbx_sandbox_git_commit_type, &a, in);
  assert_false(boolean(o, "nothing_to_commit"));
  char *sha = dbx_strdup(str(o, "sha"));
  assert_int_equal(strlen(sha), 40);
  cJSON_Delete(o);
  /* the sandbox's own git agrees on HEAD, message and author */
  char *q = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"git log -1 --format='%%H %%an %%s'\"}",
                         id);
  o = ok(&dbx_sandbox_exec_type, &a, q);
  char *want = dbx_asprintf("%s A U change a\n", sha);
  assert_string_equal(str(o, "stdout"), want);
  free(want);
  cJSON_Delete(o);
  free(q);
  /* nothing changed since: nothing to commit, sha null */
  o = ok(&dbx_sandbox_git_commit_type, &a, in);
  assert_true(boolean(o, "nothing_to_commit"));
  assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "sha")));
  cJSON_Delete(o);
  free(in);
  free(sha);
  free(id);
  free(src);
  free(repo);
}

static void test_sandbox_acts_checkpoint_stable_across_retries(void **state) {
  (void)state;
  char *id = make_sandbox("wf-ckpt", NULL);
  struct dbx_act a = act_for("wf-ckpt");
  a.activity_id = "7";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"v1\"}", id);
  cJSON_Delete(ok(&dbx_sandbox_write_file_type, &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\"}", id);
  cJSON *o1 = ok(&dbx_sandbox_checkpoint_type, &a, in);
  a.attempt = 2;
  cJSON *o2 = ok(&dbx_sandbox_checkpoint_type, &a, in);
  assert_string_equal(str(o1, "ref"), str(o2, "ref"));
  struct dbx_act b = a;
  b.activity_id = "8";
  cJSON *o3 = ok(&dbx_sandbox_checkpoint_type, &b, in);
  assert_string_not_equal(str(o1, "ref"), str(o3, "ref"));
  free(in);
  /* a named checkpoint keeps its name */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"name\":\"my-ckpt.1\"}", id);
  cJSON *o4 = ok(&dbx_sandbox_checkpoint_type, &a, in);
  assert_non_null(strstr(str(o4, "ref"), "my-ckpt.1"));
  free(in);
  /* the ref restores the workspace as it was */
  struct dbx_act c = act_for("wf-ckpt-restore");
  in = dbx_asprintf("{\"source\":{\"kind\":\"snapshot\",\"ref\":\"%s\"}}", str(o1, "ref"));
  cJSON *o5 = ok(&dbx_sandbox_create_type, &c, in);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\"}", str(o5, "sandbox_id"));
  cJSON *o6 = ok(&dbx_sandbox_read_file_type, &c, in);
  assert_string_equal(str(o6, "content"), "v1");
  free(in);
  cJSON_Delete(o1);
  cJSON_Delete(o2);
  cJSON_Delete(o3);
  cJSON_Delete(o4);
  cJSON_Delete(o5);
  cJSON_Delete(o6);
  free(id);
}

static void test_sandbox_acts_stop_start_delete(void **state) {
  (void)state;
  char *id = make_sandbox("wf-life", NULL);
  struct dbx_act a = act_for("wf-life");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"echo hi\"}", id);
  cJSON *o = ok(&dbx_sandbox_stop_type, &a, in);
  assert_int_equal(cJSON_GetArraySize(o), 0);
  cJSON_Delete(o);
  /* a stopped sandbox refuses exec: retryable (it may be started again) */
  free(failed(&dbx_sandbox_exec_type, &a, in, "SandboxError", 0));
  cJSON_Delete(ok(&dbx_sandbox_start_type, &a, in));
  o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_string_equal(str(o, "stdout"), "hi\n");
  cJSON_Delete(o);
  cJSON_Delete(ok(&dbx_sandbox_delete_type, &a, in));
  cJSON_Delete(ok(&dbx_sandbox_delete_type, &a, in)); /* not found counts as done */
  free(failed(&dbx_sandbox_exec_type, &a, in, "SandboxNotFound", 1));
  char *p = dbx_asprintf("%s/sandboxes/%s", g_home, id);
  assert_int_not_equal(access(p, F_OK), 0);
  free(p);
  free(in);
  free(id);
}

static void test_sandbox_acts_cancelled_runs_nothing(void **state) {
  (void)state;
  char *id = make_sandbox("wf-cancel", NULL);
  struct dbx_act a = act_for("wf-cancel");
  a.cancelled = 1;
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\"}", id);
  dbx_act_result r;
  assert_int_equal(run(&dbx_sandbox_exec_type, &a, in, &r, NULL), DBX_ECANCELED);
  assert_null(r.result_json);
  res_cleanup(&r);
  free(in);
  a.cancelled = 0;
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(&dbx_sandbox_read_file_type, &a, in, "FileNotFound", 1));
  free(in);
  free(id);
}

/* A worker dies mid-command (the child running attempt 1 is SIGKILLed once
 * the command has begun); attempt 2 with the same identity re-attaches and
 * reports the one run's output: the side-effect file has one line. */
static void test_sandbox_acts_exec_retry_reattaches(void **state) {
  (void)state;
  char *id = make_sandbox("wf-reattach", NULL);
  struct dbx_act a = act_for("wf-reattach");
  a.activity_id = "5";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":"
                          "\"echo x >> n.txt; sleep 1; echo done\",\"timeout_s\":60}", id);
  char *marker = dbx_asprintf("%s/sandboxes/%s/workspace/n.txt", g_home, id);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    dbx_act_result r = {0};
    a.prev_details = "{}"; /* a deliberate identity: no fresh id from run() */
    dbx_sandbox_exec_type.run(&a, in, strlen(in), &r, NULL);
    _exit(0);
  }
  for (int i = 0; i < 3000 && access(marker, F_OK) != 0; i++) {
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(access(marker, F_OK), 0);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  a.attempt = 2;
  a.prev_details = "{}";
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_int_equal(num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "done\n");
  cJSON_Delete(o);
  assert_non_null(a.last_details);
  assert_non_null(strstr(a.last_details, "\"cmd_id\":\"x"));
  assert_non_null(strstr(a.last_details, "\"stdout_offset\":"));
  /* Attempt 3 with the details of attempt 2: the same finished command. */
  char *details = dbx_strdup(a.last_details);
  a.attempt = 3;
  a.prev_details = details;
  o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_string_equal(str(o, "stdout"), "done\n");
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"n.txt\"}", id);
  o = ok(&dbx_sandbox_read_file_type, &a, in);
  assert_string_equal(str(o, "content"), "x\n");
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(details);
  free(marker);
  free(in);
  free(id);
}

/* A cancel seen at a heartbeat kills the running command's group. */
static void test_sandbox_acts_exec_cancel_kills_command(void **state) {
  (void)state;
  char *id = make_sandbox("wf-cancel-run", NULL);
  struct dbx_act a = act_for("wf-cancel-run");
  a.prev_details = "{}";
  a.cancel_at_heartbeat = 2;
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"sleep 30\"}", id);
  dbx_act_result r;
  assert_int_equal(run(&dbx_sandbox_exec_type, &a, in, &r, NULL), DBX_ECANCELED);
  assert_null(r.result_json);
  res_cleanup(&r);
  /* The retry re-attaches to the killed command and sees SIGKILL's status. */
  a.cancelled = 0;
  a.cancel_at_heartbeat = 0;
  a.attempt = 2;
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_int_equal(num(o, "exit_code"), 137);
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_worker_stop_leaves_command_running(void **state) {
  (void)state;
  char *id = make_sandbox("wf-stop-run", NULL);
  struct dbx_act a = act_for("wf-stop-run");
  a.prev_details = "{}";
  a.cancel_at_heartbeat = 2;
  a.worker_stopping = 1; /* the cancellation is the worker shutting down */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"sleep 1; echo done\"}", id);
  dbx_act_result r;
  assert_int_equal(run(&dbx_sandbox_exec_type, &a, in, &r, NULL), DBX_ECANCELED);
  res_cleanup(&r);
  /* the next worker's attempt re-attaches to the command, which finished normally */
  a.cancelled = 0;
  a.cancel_at_heartbeat = 0;
  a.worker_stopping = 0;
  a.attempt = 2;
  cJSON *o = ok(&dbx_sandbox_exec_type, &a, in);
  assert_int_equal(num(o, "exit_code"), 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stdout")), "done\n");
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sandbox_acts_register_all),
      cmocka_unit_test(test_sandbox_acts_create_adopts_derived_id),
      cmocka_unit_test(test_sandbox_acts_create_heartbeats_and_stops_on_cancel),
      cmocka_unit_test(test_sandbox_acts_exec_env_and_secret_redacted),
      cmocka_unit_test(test_sandbox_acts_exec_binary_output_base64),
      cmocka_unit_test(test_sandbox_acts_exec_timeout),
      cmocka_unit_test(test_sandbox_acts_file_round_trip_all_bytes),
      cmocka_unit_test(test_sandbox_acts_path_refused),
      cmocka_unit_test(test_sandbox_acts_invalid_input_names_field),
      cmocka_unit_test(test_sandbox_acts_not_found),
      cmocka_unit_test(test_sandbox_acts_git_commit_sha),
      cmocka_unit_test(test_sandbox_acts_checkpoint_stable_across_retries),
      cmocka_unit_test(test_sandbox_acts_stop_start_delete),
      cmocka_unit_test(test_sandbox_acts_cancelled_runs_nothing),
      cmocka_unit_test(test_sandbox_acts_exec_retry_reattaches),
      cmocka_unit_test(test_sandbox_acts_exec_cancel_kills_command),
      cmocka_unit_test(test_sandbox_acts_exec_worker_stop_leaves_command_running),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
