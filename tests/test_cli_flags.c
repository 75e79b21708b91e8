/* Unit tests of the command line's shared pieces: the flag parser
 * (cli/flags.h: --name value, --name=value, aliases, booleans, numbers
 * checked whole and in range) and the lossy UTF-8 repair of text from the
 * network (cli/conn.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/codec.h"
#include "cli/conn.h"
#include "cli/flags.h"

typedef struct {
  const char *name;
  int on, n;
  double secs;
} vals;

/* Parse argv (NULL-terminated) against one table; returns the first
 * non-flag's index, or -1 on a bad value (message on stderr). */
static int parse(vals *v, char **argv) {
  const dbx_cli_flag t[] = {
      {"--name", "-n", DBX_CLI_FLAG_STR, &v->name, 0, 0},
      {"--on", NULL, DBX_CLI_FLAG_BOOL, &v->on, 0, 0},
      {"--count", NULL, DBX_CLI_FLAG_INT, &v->n, 1, 100},
      {"--secs", NULL, DBX_CLI_FLAG_NUM, &v->secs, 0, 60},
  };
  int argc = 0;
  while (argv[argc]) argc++;
  memset(v, 0, sizeof *v);
  for (int i = 0; i < argc; i++) {
    int r = dbx_cli_flag_take("test", t, sizeof t / sizeof t[0], argc, argv, &i);
    if (r < 0) return -1;
    if (r == 0) return i;
  }
  return argc;
}

static void test_flags_both_forms_and_aliases(void **state) {
  (void)state;
  vals v;
  char *a[] = {"--name", "x", "--count=7", "--on", "--secs", "1.5", "rest", NULL};
  assert_int_equal(parse(&v, a), 6);
  assert_string_equal(v.name, "x");
  assert_int_equal(v.n, 7);
  assert_int_equal(v.on, 1);
  assert_true(v.secs == 1.5);
  char *b[] = {"--name=a=b", "-n", "y", NULL}; /* the value keeps its own '='; the last one wins */
  assert_int_equal(parse(&v, b), 3);
  assert_string_equal(v.name, "y");
  char *c[] = {"--name=", NULL}; /* an empty value is a value */
  assert_int_equal(parse(&v, c), 1);
  assert_string_equal(v.name, "");
  char *d[] = {"--names", "x", NULL}; /* a longer word is not the flag */
  assert_int_equal(parse(&v, d), 0);
  assert_null(v.name);
}

static void test_flags_bad_values_refused(void **state) {
  (void)state;
  vals v;
  char *cases[][3] = {
      {"--count", "abc", NULL}, {"--count", "7x", NULL},  {"--count", "", NULL},     {"--count=0", NULL, NULL},
      {"--count", "101", NULL}, {"--count", "1.5", NULL}, {"--secs", "nan", NULL},   {"--secs", "61", NULL},
      {"--secs", "-1", NULL},   {"--on=1", NULL, NULL},   {"--name", NULL, NULL},    {"--count", "99999999999999999999", NULL},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    if (parse(&v, cases[k]) != -1) fail_msg("accepted %s %s", cases[k][0], cases[k][1] ? cases[k][1] : "");
  double out = 0;
  assert_int_equal(dbx_cli_flag_number("t", "--x", "65535", 1, 0, 65535, &out), 0);
  assert_true(out == 65535);
  assert_int_equal(dbx_cli_flag_number("t", "--x", "0x10", 1, 0, 65535, &out), -1);
  assert_int_equal(dbx_cli_flag_is_help("-h") + dbx_cli_flag_is_help("--help") + dbx_cli_flag_is_help("--he"), 2);
}

static void test_utf8_repair(void **state) {
  (void)state;
  struct { const char *in; size_t n; const char *want; } cases[] = {
      {"plain", 5, "plain"},
      {"caf\xc3\xa9", 5, "caf\xc3\xa9"},                       /* valid stays */
      {"caf\xe9!", 5, "caf\xef\xbf\xbd!"},                     /* Latin-1 byte */
      {"\xf0\x9f\x98", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* truncated: one each, all valid */
      {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},             /* overlong */
      {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
      {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},             /* U+1F600 stays */
      {"", 0, ""},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char *r = dbx_cli_utf8_repair(cases[k].in, cases[k].n);
    assert_non_null(r);
    assert_string_equal(r, cases[k].want);
    assert_true(dbx_utf8_valid((const uint8_t *)r, strlen(r)));
    free(r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flags_both_forms_and_aliases),
      cmocka_unit_test(test_flags_bad_values_refused),
      cmocka_unit_test(test_utf8_repair),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
