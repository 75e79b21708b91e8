/* Unit tests of base/failpoint: the spec grammar, the disabled fast path,
 * probabilities 0 and 1, after=/count=, the log line, and the kill action
 * (in a forked child that must die by SIGKILL after logging). */
#include "tests/testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/fs.h"
#include "base/util.h"

static int teardown(void **state) {
  (void)state;
  dbx_failpoint_reset();
  return 0;
}

/* Contents of a file the test wrote (malloc'd, NUL-terminated). */
static char *read_log(const char *path) {
  char *buf = NULL;
  size_t len = 0;
  assert_int_equal(dbx_fs_read_all(path, &buf, &len), DBX_OK);
  return buf;
}

static void test_failpoint_parse_errors(void **state) {
  (void)state;
  static const char *const bad[] = {"x", "=kill", "x=explode", "x=kill@1.5", "x=kill@-0.1",
                                    "x=kill@abc", "x=kill:after=", "x=kill:after=1x",
                                    "x=log:limit=3", "a=kill,b", "x=stall=", "x=stall=2s",
                                    "x=stall=600001", "x=stalled"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *err = NULL;
    assert_int_equal(dbx_failpoint_configure(bad[i], 1, NULL, &err), DBX_EINVAL);
    assert_non_null(err);
    free(err);
    assert_int_equal(dbx_failpoints_on, 0);
  }
  char *err = NULL;
  assert_int_equal(
      dbx_failpoint_configure("a.b=kill@0.25,c.*=log:after=2:count=3,,d=log@0", 1, NULL, &err),
      DBX_OK);
  assert_null(err);
  assert_int_equal(dbx_failpoints_on, 1);
  /* the whole uint64 range is a valid seed, one more is not */
  assert_int_equal(setenv("DURABOX_FAILPOINTS", "a=log", 1), 0);
  assert_int_equal(setenv("DURABOX_FAILPOINT_SEED", "18446744073709551615", 1), 0);
  assert_int_equal(dbx_failpoint_init_from_env(&err), DBX_OK);
  assert_int_equal(setenv("DURABOX_FAILPOINT_SEED", "18446744073709551616", 1), 0);
  assert_int_equal(dbx_failpoint_init_from_env(&err), DBX_EINVAL);
  free(err);
  err = NULL;
  unsetenv("DURABOX_FAILPOINTS");
  unsetenv("DURABOX_FAILPOINT_SEED");
  assert_int_equal(dbx_failpoint_configure("", 1, NULL, &err), DBX_OK);
  assert_int_equal(dbx_failpoints_on, 0);
}

static void test_failpoint_disabled_is_noop(void **state) {
  (void)state;
  assert_int_equal(dbx_failpoints_on, 0);
  DBX_FAILPOINT("anything");
  assert_int_equal(dbx_failpoint_hit("anything"), 0); /* no entry: nothing fires */
  assert_int_equal(dbx_failpoint_hits("anything"), 0);
}

static void test_failpoint_probability_zero_and_one(void **state) {
  (void)state;
  assert_int_equal(dbx_failpoint_configure("never=log@0,always=log@1,half=log@0.5", 7, NULL, NULL),
                   DBX_OK);
  int fired_never = 0, fired_always = 0, fired_half = 0;
  for (int i = 0; i < 1000; i++) {
    fired_never += dbx_failpoint_hit("never");
    fired_always += dbx_failpoint_hit("always");
    fired_half += dbx_failpoint_hit("half");
  }
  assert_int_equal(fired_never, 0);
  assert_int_equal(fired_always, 1000);
  assert_true(fired_half > 0 && fired_half < 1000);
  assert_int_equal(dbx_failpoint_hits("never"), 1000);
  /* the same seed gives the same draws */
  assert_int_equal(dbx_failpoint_configure("half=log@0.5", 7, NULL, NULL), DBX_OK);
  int again = 0;
  for (int i = 0; i < 1000; i++) {
    dbx_failpoint_hit("never");
    dbx_failpoint_hit("always");
    again += dbx_failpoint_hit("half");
  }
  assert_int_equal(again, fired_half);
}

static void test_failpoint_after_count_and_glob(void **state) {
  (void)state;
  assert_int_equal(dbx_failpoint_configure("w.*=log:after=2:count=3,w.x=kill", 1, NULL, NULL),
                   DBX_OK);
  int fired[8];
  for (int i = 0; i < 8; i++) fired[i] = dbx_failpoint_hit("w.x"); /* the glob wins: first match */
  int want[8] = {0, 0, 1, 1, 1, 0, 0, 0};
  assert_memory_equal(fired, want, sizeof want);
  assert_int_equal(dbx_failpoint_hits("w.*"), 8);
  assert_int_equal(dbx_failpoint_hit("v.x"), 0);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_failpoint_stall_holds_the_thread(void **state) {
  (void)state;
  assert_int_equal(dbx_failpoint_configure("s.x=stall=120:count=1", 1, NULL, NULL), DBX_OK);
  int64_t t0 = now_ms();
  assert_int_equal(dbx_failpoint_hit("s.x"), 1);
  int64_t held = now_ms() - t0;
  assert_true(held >= 120); /* at least the time asked for */
  assert_int_equal(dbx_failpoint_hit("s.x"), 0); /* count=1: once */
  assert_int_equal(dbx_failpoint_hits("s.x"), 2);
  assert_int_equal(dbx_failpoint_configure("s.y=stall", 1, NULL, NULL), DBX_OK); /* 1000 ms by default */
  assert_int_equal(dbx_failpoints_on, 1);
}

static void test_failpoint_log_line(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-fp");
  char *log = NULL;
  log = dbx_asprintf("%s/fp.log", dir);
  assert_non_null(log);
  assert_int_equal(dbx_failpoint_configure("a.one=log,a.two=log@0", 1, log, NULL), DBX_OK);
  DBX_FAILPOINT("a.one");
  DBX_FAILPOINT("a.two");
  DBX_FAILPOINT("a.one");
  char *txt = read_log(log);
  assert_string_equal(txt, "a.one\na.one\n");
  free(txt);
  free(log);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_failpoint_kill_in_child(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-fp");
  char *log = NULL;
  log = dbx_asprintf("%s/fp.log", dir);
  assert_non_null(log);
  assert_int_equal(setenv("DURABOX_FAILPOINTS", "svc.before=kill:after=1", 1), 0);
  assert_int_equal(setenv("DURABOX_FAILPOINT_SEED", "42", 1), 0);
  assert_int_equal(setenv("DURABOX_FAILPOINT_LOG", log, 1), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (dbx_failpoint_init_from_env(NULL) != DBX_OK) _exit(3);
    DBX_FAILPOINT("svc.before"); /* the first hit is skipped (after=1) */
    DBX_FAILPOINT("svc.other");
    DBX_FAILPOINT("svc.before"); /* dies here */
    _exit(0);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGKILL);
  char *txt = read_log(log);
  assert_string_equal(txt, "svc.before\n");
  free(txt);
  /* a bad seed is refused */
  assert_int_equal(setenv("DURABOX_FAILPOINT_SEED", "12x", 1), 0);
  char *err = NULL;
  assert_int_equal(dbx_failpoint_init_from_env(&err), DBX_EINVAL);
  assert_non_null(err);
  free(err);
  unsetenv("DURABOX_FAILPOINTS");
  unsetenv("DURABOX_FAILPOINT_SEED");
  unsetenv("DURABOX_FAILPOINT_LOG");
  assert_int_equal(dbx_failpoint_init_from_env(NULL), DBX_OK);
  assert_int_equal(dbx_failpoints_on, 0);
  free(log);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_failpoint_parse_errors, teardown),
      cmocka_unit_test_teardown(test_failpoint_disabled_is_noop, teardown),
      cmocka_unit_test_teardown(test_failpoint_probability_zero_and_one, teardown),
      cmocka_unit_test_teardown(test_failpoint_after_count_and_glob, teardown),
      cmocka_unit_test_teardown(test_failpoint_stall_holds_the_thread, teardown),
      cmocka_unit_test_teardown(test_failpoint_log_line, teardown),
      cmocka_unit_test_teardown(test_failpoint_kill_in_child, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
