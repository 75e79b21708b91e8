/* Unit tests of base/: error names and messages, log levels, helpers. */
#include "tests/testutil.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/util.h"

static void test_base_strerror_names_every_code(void **state) {
  (void)state;
  assert_string_equal(dbx_strerror(DBX_OK), "success");
  assert_string_equal(dbx_strerror(DBX_ESTOREFULL), "storage full");
  assert_string_equal(dbx_err_name(DBX_ENOTFOUND), "DBX_ENOTFOUND");
  for (int e = 0; e < DBX_ERR_COUNT_; e++) {
    assert_non_null(dbx_strerror((dbx_err)e));
    assert_string_not_equal(dbx_strerror((dbx_err)e), "unknown error");
  }
  assert_string_equal(dbx_strerror((dbx_err)999), "unknown error");
}

static void test_base_log_level_parse(void **state) {
  (void)state;
  dbx_log_level l = DBX_LOG_OFF;
  assert_int_equal(dbx_log_level_parse("warn", &l), 0);
  assert_int_equal(l, DBX_LOG_WARN);
  assert_int_equal(dbx_log_level_parse("DEBUG", &l), 0);
  assert_int_equal(l, DBX_LOG_DEBUG);
  assert_int_equal(dbx_log_level_parse("loud", &l), -1);
  assert_int_equal(dbx_log_level_parse(NULL, &l), -1);
}

static void test_base_asprintf_and_strndup(void **state) {
  (void)state;
  char *s = dbx_asprintf("%s-%d", "run", 42);
  assert_string_equal(s, "run-42");
  free(s);
  s = dbx_strndup("abcdef", 3);
  assert_string_equal(s, "abc");
  free(s);
  assert_null(dbx_strdup(NULL));
}

static void test_base_clocks_advance(void **state) {
  (void)state;
  int64_t a = dbx_mono_ns();
  int64_t b = dbx_mono_ns();
  assert_true(b >= a);
  assert_true(dbx_wall_ns() > (int64_t)1600000000 * 1000000000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_strerror_names_every_code),
      cmocka_unit_test(test_base_log_level_parse),
      cmocka_unit_test(test_base_asprintf_and_strndup),
      cmocka_unit_test(test_base_clocks_advance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
