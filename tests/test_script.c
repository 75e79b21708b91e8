/* Unit tests of the Script's input check (workflows/script.h,
 * dbx_script_validate, the same check its workflow runs first) and of the
 * text check under it (base/json.h): NUL characters, raw control
 * characters, invalid UTF-8, trailing data, duplicate step names and the
 * size limits, each refused past its boundary and accepted at it. */
#include "tests/testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "workflows/script.h"

/* dbx_script_validate of s[0..n): the message, or "" when accepted. */
static const char *check_n(const char *s, size_t n) {
  static char err[256];
  err[0] = '\0';
  if (dbx_script_validate(s, n, err, sizeof err) == 0) return "";
  assert_true(err[0] != '\0'); /* a refusal always says why */
  return err;
}
static const char *check(const char *s) { return check_n(s, strlen(s)); }

#define W(content) "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"f\",\"content\":\"" content "\"}]}"

static void test_script_nul_refused_in_values_and_keys(void **state) {
  (void)state;
  assert_string_equal(check(W("a\\u0000b")),
                      "input: steps[0].content contains a NUL character (\\u0000)");
  assert_string_equal(check("{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"true\","
                            "\"env\":{\"A\\u0000B\":\"v\"}}]}"),
                      "input: a field name in steps[0].env contains a NUL character (\\u0000)");
  assert_string_equal(check("{\"sandbox\":{\"env\":{\"K\":\"x\\u0000\"}},\"steps\":[]}"),
                      "input: sandbox.env.K contains a NUL character (\\u0000)");
  assert_string_equal(check("{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":"
                            "\"echo \\u0000; rm -rf x\"}]}"),
                      "input: steps[0].command contains a NUL character (\\u0000)");
  assert_string_equal(check("{\"steps\":[{\"name\":\"x\\u0000y\",\"kind\":\"checkpoint\"}]}"),
                      "input: steps[0].name contains a NUL character (\\u0000)");
  /* a raw 0 byte inside a string */
  static const char raw[] = "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"a\0b\","
                            "\"content\":\"x\"}]}";
  assert_string_equal(check_n(raw, sizeof raw - 1),
                      "input: steps[0].path contains a NUL character (\\u0000)");
  /* an escaped backslash then "u0000" is no NUL; neither is \u0001 or \u00000 text */
  assert_string_equal(check(W("a\\\\u0000b")), "");
  assert_string_equal(check(W("a\\u0001b\\u00e9")), "");
  assert_string_equal(check(W("\\\\\\\\u0000")), "");
  assert_string_equal(check(W("\\\\\\u0000")), "input: steps[0].content contains a NUL character (\\u0000)");
}

static void test_script_control_and_utf8_refused(void **state) {
  (void)state;
  assert_string_equal(check(W("a\001b")), "input: steps[0].content contains a raw control "
                                          "character (escape it, e.g. \\n or \\u0001)");
  assert_string_equal(check("{\"steps\":[{\"name\":\"\xff\",\"kind\":\"checkpoint\"}]}"),
                      "input: steps[0].name is not valid UTF-8");
  assert_string_equal(check("{\"steps\":[{\"name\":\"x\",\"kind\":\"checkpoint\"}],\"\xc3\":1}"),
                      "input: a field name in the input is not valid UTF-8");
  assert_string_equal(check(W("caf\xc3\xa9 \xf0\x9f\x98\x80")), ""); /* real UTF-8 is fine */
  assert_string_equal(check("{\"steps\":[{\"name\":\"\xc3\xa9t\xc3\xa9\",\"kind\":\"checkpoint\"}]}"),
                      "");
  /* an overlong form and an encoded surrogate are not UTF-8 */
  assert_string_equal(check(W("\xc0\xaf")), "input: steps[0].content is not valid UTF-8");
  assert_string_equal(check(W("\xed\xa0\x80")), "input: steps[0].content is not valid UTF-8");
}

static void test_script_trailing_data_refused(void **state) {
  (void)state;
  const char *ok = "{\"steps\":[]}";
  assert_string_equal(check(ok), "");
  assert_string_equal(check("{\"steps\":[]} \n\t\r\n"), "");
  assert_string_equal(check("{\"steps\":[]} x"), "input has data after the JSON document (at byte 13)");
  assert_string_equal(check("{\"steps\":[]}{\"steps\":[]}"),
                      "input has data after the JSON document (at byte 12)");
  static const char nul[] = "{\"steps\":[]}\0";
  assert_string_equal(check_n(nul, sizeof nul - 1),
                      "input has data after the JSON document (at byte 12)");
  assert_string_equal(check("{\"steps\":[] "), "input is not valid JSON");
}

static void test_script_duplicate_names_refused(void **state) {
  (void)state;
  assert_string_equal(check("{\"steps\":[{\"name\":\"a\",\"kind\":\"checkpoint\"},"
                            "{\"name\":\"b\",\"kind\":\"checkpoint\"},"
                            "{\"name\":\"a\",\"kind\":\"checkpoint\"}]}"),
                      "step 2: name 'a' is given to an earlier step too (step names must be "
                      "distinct)");
  assert_string_equal(check("{\"steps\":[{\"name\":\"a\",\"kind\":\"checkpoint\"},"
                            "{\"name\":\"A\",\"kind\":\"checkpoint\"},"
                            "{\"name\":\"a \",\"kind\":\"checkpoint\"}]}"),
                      "");
}

/* An input whose write_file content is `fill` bytes of 'x'. */
static char *with_content(size_t fill, size_t *len) {
  static const char head[] = "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"f\","
                             "\"content\":\"";
  static const char tail[] = "\"}]}";
  size_t n = sizeof head - 1 + fill + sizeof tail - 1;
  char *s = malloc(n + 1);
  assert_non_null(s);
  memcpy(s, head, sizeof head - 1);
  memset(s + sizeof head - 1, 'x', fill);
  memcpy(s + sizeof head - 1 + fill, tail, sizeof tail);
  *len = n;
  return s;
}

static void test_script_size_limits_at_the_boundary(void **state) {
  (void)state;
  size_t len, over = sizeof "{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"f\","
                            "\"content\":\"\"}]}" - 1;
  char want[256];
  /* the whole input at its limit passes, one byte more does not */
  char *s = with_content(DBX_SCRIPT_MAX_INPUT_BYTES - over, &len);
  assert_int_equal(len, DBX_SCRIPT_MAX_INPUT_BYTES);
  assert_string_equal(check_n(s, len), "");
  free(s);
  s = with_content(DBX_SCRIPT_MAX_INPUT_BYTES - over + 1, &len);
  snprintf(want, sizeof want, "input is %u bytes, over the limit of %u bytes per input",
           DBX_SCRIPT_MAX_INPUT_BYTES + 1, DBX_SCRIPT_MAX_INPUT_BYTES);
  assert_string_equal(check_n(s, len), want);
  free(s);
  /* a field at its limit passes the field check (the input's then speaks);
   * one byte more is named as the field */
  s = with_content(DBX_SCRIPT_MAX_FIELD_BYTES, &len);
  snprintf(want, sizeof want, "input is %zu bytes, over the limit of %u bytes per input", len,
           DBX_SCRIPT_MAX_INPUT_BYTES);
  assert_string_equal(check_n(s, len), want);
  free(s);
  s = with_content(30u * 1000 * 1000, &len); /* the 30 MB write_file */
  snprintf(want, sizeof want,
           "input: steps[0].content is 30000000 bytes, over the limit of %u bytes per field",
           DBX_SCRIPT_MAX_FIELD_BYTES);
  assert_string_equal(check_n(s, len), want);
  free(s);
}

static void test_script_step_count_and_name_length(void **state) {
  (void)state;
  size_t cap = 64 + (DBX_SCRIPT_MAX_STEPS + 1) * 48;
  char *s = malloc(cap);
  assert_non_null(s);
  for (int steps = DBX_SCRIPT_MAX_STEPS; steps <= DBX_SCRIPT_MAX_STEPS + 1; steps++) {
    size_t o = (size_t)snprintf(s, cap, "{\"steps\":[");
    for (int i = 0; i < steps; i++)
      o += (size_t)snprintf(s + o, cap - o, "%s{\"name\":\"s%d\",\"kind\":\"checkpoint\"}",
                            i ? "," : "", i);
    snprintf(s + o, cap - o, "]}");
    if (steps == DBX_SCRIPT_MAX_STEPS) {
      assert_string_equal(check(s), "");
    } else {
      char want[128];
      snprintf(want, sizeof want, "input has %d steps, over the limit of %d steps per input",
               steps, DBX_SCRIPT_MAX_STEPS);
      assert_string_equal(check(s), want);
    }
  }
  char name[DBX_SCRIPT_MAX_NAME_BYTES + 2];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  snprintf(s, cap, "{\"steps\":[{\"name\":\"%s\",\"kind\":\"checkpoint\"}]}", name);
  char want[128];
  snprintf(want, sizeof want, "step 0: name is %d bytes, over the limit of %d bytes per step name",
           DBX_SCRIPT_MAX_NAME_BYTES + 1, DBX_SCRIPT_MAX_NAME_BYTES);
  assert_string_equal(check(s), want);
  name[DBX_SCRIPT_MAX_NAME_BYTES] = '\0';
  snprintf(s, cap, "{\"steps\":[{\"name\":\"%s\",\"kind\":\"checkpoint\"}]}", name);
  assert_string_equal(check(s), "");
  free(s);
}

/* dbx_json_text_check counts strings as a cJSON tree lists them. */
static void test_json_text_check_ordinals(void **state) {
  (void)state;
  size_t at = 99;
  const char *t = "{\"a\":[\"x\",{\"b\\\"\":\"\\\\\"}],\"c\":\"d\\u0000\"}";
  assert_int_equal(dbx_json_text_check(t, strlen(t), strlen(t), &at), DBX_JSON_NUL);
  assert_int_equal(at, 5); /* a, x, b", \, c, then the value of c */
  t = "[\"\\u0000\"]";
  assert_int_equal(dbx_json_text_check(t, strlen(t), strlen(t), &at), DBX_JSON_NUL);
  assert_int_equal(at, 0);
  t = "[\"\\\\u0000\", 1]  ";
  assert_int_equal(dbx_json_text_check(t, strlen(t), strlen(t) - 2, &at), DBX_JSON_OK);
  assert_int_equal(dbx_json_text_check(t, strlen(t), 3, &at), DBX_JSON_TRAILING);
  assert_int_equal(at, 3);
  assert_int_equal(dbx_json_text_check(NULL, 0, 0, &at), DBX_JSON_OK);
}

/* An exec step's retry_on_exit, checked before anything runs. */
#define R(extra, roe) "{\"steps\":[{\"name\":\"t\",\"kind\":\"exec\",\"command\":\"make test\"" extra \
                      ",\"retry_on_exit\":" roe "}]}"
/* base/json.h dbx_json_int: JSON numbers of any size become integers in
 * range without an undefined cast. */
static void test_json_int_clamps(void **state) {
  (void)state;
  assert_int_equal(dbx_json_int(42.9, 0, 100), 42);
  assert_int_equal(dbx_json_int(-42.9, -100, 100), -42);
  assert_int_equal(dbx_json_int(1e300, 0, INT32_MAX), INT32_MAX);
  assert_int_equal(dbx_json_int(-1e300, INT32_MIN, INT32_MAX), INT32_MIN);
  assert_true(dbx_json_int(9.3e18, 0, INT64_MAX) == INT64_MAX);
  assert_true(dbx_json_int(-9.3e18, INT64_MIN, INT64_MAX) == INT64_MIN);
  assert_true(dbx_json_int(9223372036854774784.0, 0, INT64_MAX) == 9223372036854774784LL); /* 2^63 - 1024 */
  assert_int_equal(dbx_json_int(0.0 / 0.0, 5, 10), 5);
  assert_int_equal(dbx_json_int(3, 5, 10), 5);
  cJSON *j = cJSON_Parse("1e999"); /* strtod: infinity */
  assert_non_null(j);
  assert_int_equal(dbx_json_int(j->valuedouble, 0, 7), 7);
  assert_int_equal(dbx_json_whole(j->valuedouble, 0, 1e308), 0); /* infinity */
  cJSON_Delete(j);
  assert_int_equal(dbx_json_whole(42.0, 0, 100), 1);
  assert_int_equal(dbx_json_whole(42.5, 0, 100), 0);
  assert_int_equal(dbx_json_whole(101.0, 0, 100), 0);
  assert_int_equal(dbx_json_whole(1e20, 0, 1e30), 0); /* beyond int64: refused, no cast */
  assert_int_equal(dbx_json_whole(-9223372036854775808.0, -1e19, 0), 1);
  assert_int_equal(dbx_json_whole(0.0 / 0.0, 0, 1), 0);
}

static void test_script_retry_on_exit_checked(void **state) {
  (void)state;
  assert_string_equal(check(R("", "{\"codes\":[1,2],\"max_attempts\":3,\"backoff_s\":2}")), "");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":2}")), "");
  assert_string_equal(check(R("", "{\"codes\":[1],\"max_attempts\":100,\"backoff_s\":0}")), "");
  assert_string_equal(
      check(R(",\"retry_class\":\"at_most_once\"", "{\"codes\":\"any\",\"max_attempts\":2}")),
      "step 't': retry_on_exit runs the command again, which an at_most_once step must never "
      "do; drop one of them");
  assert_string_equal(check(R("", "true")),
                      "step 't' (exec): retry_on_exit must be an object {\"codes\", "
                      "\"max_attempts\", \"backoff_s\"}");
  assert_string_equal(check(R("", "{\"max_attempts\":3}")),
                      "step 't' (exec): retry_on_exit.codes is required: a list of exit codes "
                      "(1..255) or \"any\"");
  const char *bad_codes[] = {"[]", "[0]", "[256]", "[1.5]", "[\"1\"]", "\"all\"", "3"};
  for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++) {
    char in[256];
    snprintf(in, sizeof in, R("", "{\"codes\":%s,\"max_attempts\":3}"), bad_codes[i]);
    const char *m = check(in);
    if (strstr(m, "retry_on_exit.codes") == NULL) fail_msg("codes %s: '%s'", bad_codes[i], m);
  }
  assert_string_equal(check(R("", "{\"codes\":\"any\"}")),
                      "step 't' (exec): retry_on_exit.max_attempts is required: a whole number "
                      "of runs in all, from 2 to 100");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":1}")),
                      "step 't' (exec): retry_on_exit.max_attempts is required: a whole number "
                      "of runs in all, from 2 to 100");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":101}")),
                      "step 't' (exec): retry_on_exit.max_attempts is required: a whole number "
                      "of runs in all, from 2 to 100");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":3,\"backoff_s\":-1}")),
                      "step 't' (exec): retry_on_exit.backoff_s must be a number of seconds from "
                      "0 to 3600");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":3,\"backoff_s\":3601}")),
                      "step 't' (exec): retry_on_exit.backoff_s must be a number of seconds from "
                      "0 to 3600");
  assert_string_equal(check(R("", "{\"codes\":\"any\",\"max_attempts\":3,\"backof_s\":1}")),
                      "step 't' (exec): retry_on_exit: unknown field \"backof_s\" (codes, "
                      "max_attempts, backoff_s)");
  /* only exec steps take it */
  assert_string_equal(check("{\"steps\":[{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"f\","
                            "\"retry_on_exit\":{\"codes\":\"any\",\"max_attempts\":2}}]}"),
                      "step 'r' (read_file): unknown field \"retry_on_exit\"");
}


/* sandbox.resources, the auto_*_minutes, upload and download. */
#define SB(fields) "{\"sandbox\":{" fields "},\"steps\":[]}"
static void test_script_sandbox_sizes_and_transfers_checked(void **state) {
  (void)state;
  assert_string_equal(check(SB("\"resources\":\"small\"")), "");
  assert_string_equal(check(SB("\"resources\":{\"cpu\":2,\"memory_gib\":4,\"disk_gib\":8}")), "");
  assert_string_equal(check(SB("\"auto_stop_minutes\":0,\"auto_archive_minutes\":60,"
                               "\"auto_delete_minutes\":30")), "");
  assert_string_equal(check(SB("\"upload\":[{\"from\":\"/tmp/a\",\"to\":\"a\"}],"
                               "\"download\":[{\"from\":\"out/r.xml\",\"to\":\"/tmp/r.xml\"}]")),
                      "");
  assert_string_equal(check(SB("\"resources\":\"xl\"")),
                      "sandbox.resources must be \"small\", \"medium\", \"large\" or {\"cpu\", "
                      "\"memory_gib\", \"disk_gib\"}");
  assert_string_equal(check(SB("\"resources\":{\"memory\":4}")),
                      "sandbox.resources: unknown field \"memory\" (cpu, memory_gib, disk_gib)");
  assert_string_equal(check(SB("\"resources\":{\"memory_gib\":0.5}")),
                      "sandbox.resources.memory_gib must be a whole number from 1 to 1024 (GiB)");
  assert_string_equal(check(SB("\"resources\":{\"cpu\":2000}")),
                      "sandbox.resources.cpu must be a whole number from 1 to 1024 (cores)");
  assert_string_equal(check(SB("\"auto_stop_minutes\":-1")),
                      "sandbox.auto_stop_minutes must be a whole number of minutes from 0 to 525600");
  assert_string_equal(check(SB("\"auto_delete_minutes\":\"5\"")),
                      "sandbox.auto_delete_minutes must be a whole number of minutes from 0 to "
                      "525600");
  assert_string_equal(check(SB("\"upload\":[]")),
                      "sandbox.upload must be a list of 1 to 100 {\"from\": host path, \"to\": "
                      "sandbox path}");
  assert_string_equal(check(SB("\"upload\":[{\"from\":\"rel\",\"to\":\"a\"}]")),
                      "sandbox.upload[0].from: the host path 'rel' must be absolute");
  assert_string_equal(check(SB("\"upload\":[{\"from\":\"/a\",\"to\":\"x/../../a\"}]")),
                      "sandbox.upload[0].to: the sandbox path 'x/../../a' must stay in the "
                      "workspace (relative, no \"..\")");
  assert_string_equal(check(SB("\"download\":[{\"from\":\"/etc/passwd\",\"to\":\"/tmp/p\"}]")),
                      "sandbox.download[0].from: the sandbox path '/etc/passwd' must stay in the "
                      "workspace (relative, no \"..\")");
  assert_string_equal(check(SB("\"download\":[{\"from\":\"a\",\"to\":\"/b\",\"x\":1}]")),
                      "sandbox.download[0] must be {\"from\": path, \"to\": path}");
  assert_string_equal(check(SB("\"keep\":true,\"download\":[{\"from\":\"a\",\"to\":\"/b\"}]")),
                      "sandbox.download happens when the sandbox is deleted at the end, and a "
                      "kept sandbox (keep: true) is not: drop one of them");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_script_nul_refused_in_values_and_keys),
      cmocka_unit_test(test_json_int_clamps),
      cmocka_unit_test(test_script_control_and_utf8_refused),
      cmocka_unit_test(test_script_trailing_data_refused),
      cmocka_unit_test(test_script_duplicate_names_refused),
      cmocka_unit_test(test_script_size_limits_at_the_boundary),
      cmocka_unit_test(test_script_step_count_and_name_length),
      cmocka_unit_test(test_json_text_check_ordinals),
      cmocka_unit_test(test_script_retry_on_exit_checked),
      cmocka_unit_test(test_script_sandbox_sizes_and_transfers_checked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
