/* Unit tests of the pieces of checkpoints and forks that need no service
 * (issue 12): the Script's checks of the checkpoint policy and of
 * "fork_of", and the step identity key (workflows/script.h
 * dbx_script_step_key): the same for the same step whatever the member
 * order or sandbox, different for another type, input or field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "workflows/script.h"

static const char *check(const char *in) {
  static char err[512];
  err[0] = '\0';
  return dbx_script_validate(in, strlen(in), err, sizeof err) == 0 ? "" : err;
}

static void test_policy_checks(void **state) {
  (void)state;
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{\"every_steps\":3,\"on_completion\":true}},\"steps\":[]}"), "");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{}},\"steps\":[]}"), "");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{\"every_steps\":0}},\"steps\":[]}"),
                      "sandbox.checkpoint.every_steps must be a whole number from 1 to 10000");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{\"every_steps\":1.5}},\"steps\":[]}"),
                      "sandbox.checkpoint.every_steps must be a whole number from 1 to 10000");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{\"on_completion\":1}},\"steps\":[]}"),
                      "sandbox.checkpoint.on_completion must be true or false");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":{\"every\":1}},\"steps\":[]}"),
                      "sandbox.checkpoint: unknown field \"every\" (every_steps, on_completion)");
  assert_string_equal(check("{\"sandbox\":{\"checkpoint\":true},\"steps\":[]}"),
                      "sandbox.checkpoint must be {\"every_steps\": N, \"on_completion\": true|false}");
}

static void test_fork_of_checks(void **state) {
  (void)state;
  assert_string_equal(check("{\"fork_of\":{\"workflow_id\":\"w\",\"run_id\":\"r\",\"event_id\":7},\"steps\":[]}"), "");
  static const char *const bad[] = {
      "{\"fork_of\":{\"workflow_id\":\"w\",\"run_id\":\"r\"},\"steps\":[]}",
      "{\"fork_of\":{\"workflow_id\":\"\",\"run_id\":\"r\",\"event_id\":1},\"steps\":[]}",
      "{\"fork_of\":{\"workflow_id\":\"w\",\"run_id\":\"r\",\"event_id\":0},\"steps\":[]}",
      "{\"fork_of\":\"w\",\"steps\":[]}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_non_null(strstr(check(bad[i]), "fork_of must be"));
  assert_string_equal(check("{\"fork_of\":{\"workflow_id\":\"w\",\"run_id\":\"r\",\"event_id\":1,\"x\":1},\"steps\":[]}"),
                      "fork_of: unknown field \"x\" (workflow_id, run_id, event_id)");
}

static void key(const char *type, const char *in, char out[DBX_SCRIPT_STEP_KEY_LEN + 1]) {
  assert_int_equal(dbx_script_step_key(type, in, strlen(in), out), 0);
  assert_int_equal(strlen(out), DBX_SCRIPT_STEP_KEY_LEN);
}

static void test_step_key(void **state) {
  (void)state;
  char a[65], b[65], c[65], d[65], e[65];
  key("sandbox.write_file", "{\"sandbox_id\":\"s1\",\"path\":\"a\",\"content\":\"x\",\"step\":\"a\"}", a);
  key("sandbox.write_file", "{\"step\":\"a\",\"content\":\"x\",\"path\":\"a\",\"sandbox_id\":\"s2\"}", b);
  assert_string_equal(a, b); /* member order and sandbox left out */
  key("sandbox.exec", "{\"sandbox_id\":\"s1\",\"path\":\"a\",\"content\":\"x\",\"step\":\"a\"}", c);
  assert_string_not_equal(a, c); /* another type */
  key("sandbox.write_file", "{\"sandbox_id\":\"s1\",\"path\":\"a\",\"content\":\"y\",\"step\":\"a\"}", d);
  assert_string_not_equal(a, d); /* another input */
  key("sandbox.exec", "{\"command\":\"x\",\"env\":{\"B\":\"2\",\"A\":\"1\"}}", d);
  key("sandbox.exec", "{\"env\":{\"A\":\"1\",\"B\":\"2\"},\"command\":\"x\"}", e);
  assert_string_equal(d, e); /* nested objects sorted too */
  char z[65];
  assert_int_equal(dbx_script_step_key("sandbox.exec", "{not json", 9, z), -1);
  assert_int_equal(dbx_script_step_key(NULL, "{}", 2, z), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_checks),
      cmocka_unit_test(test_fork_of_checks),
      cmocka_unit_test(test_step_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
