/* Unit tests of the agent's step policy (workflows/policy.h): compile
 * errors name the rule and the problem; first match wins; each matcher;
 * YAML text gives the same decisions as JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tests/testutil.h"
#include "workflows/policy.h"

static dbx_policy *compile_text(const char *text, char *err, size_t n) {
  cJSON *t = dbx_policy_parse_text(text, strlen(text), err, n);
  if (!t) return NULL;
  dbx_policy *p = dbx_policy_compile(t, err, n);
  cJSON_Delete(t);
  return p;
}

static void expect_error(const char *text, const char *want1, const char *want2) {
  char err[512] = "";
  dbx_policy *p = compile_text(text, err, sizeof err);
  if (p) fail_msg("accepted: %s", text);
  if (!strstr(err, want1) || (want2 && !strstr(err, want2)))
    fail_msg("error \"%s\" does not name \"%s\" / \"%s\"", err, want1, want2 ? want2 : "");
}

static void test_policy_refuses_bad_policies(void **state) {
  (void)state;
  expect_error("{\"rules\":[{\"id\":\"r1\",\"when\":{\"arguments\":{\"command\":{\"regex\":\"([a\"}}},"
               "\"then\":{\"decision\":\"deny\"}}]}", "rule 'r1'", "regex");
  expect_error("{\"rules\":[{\"id\":\"r2\",\"when\":{\"tool\":\"x\"},\"then\":{\"decision\":\"deny\"}}]}",
               "rule 'r2'", "\"tool\"");
  expect_error("{\"rules\":[{\"id\":\"r3\",\"then\":{\"decision\":\"maybe\"}}]}", "rule 'r3'", "decision");
  expect_error("{\"rules\":[{\"id\":\"r4\",\"when\":{\"arguments\":{\"path\":{}}},\"then\":{\"decision\":\"deny\"}}]}",
               "rule 'r4'", "non-empty");
  expect_error("{\"rules\":[{\"id\":\"a\",\"then\":{\"decision\":\"deny\"}},{\"id\":\"a\",\"then\":{\"decision\":\"allow\"}}]}",
               "'a'", "twice");
  expect_error("{\"rules\":[{\"then\":{\"decision\":\"deny\"}}]}", "rules[0]", "id");
  expect_error("{\"default\":\"allow\"}", "\"default\"", NULL);
  expect_error("{\"rules\":[{\"id\":\"r5\",\"when\":{\"step_kind\":\"local\"},\"then\":{\"decision\":\"deny\"}}]}",
               "rule 'r5'", "step_kind");
  expect_error("rules: [ {id: r6, then: {decision: allow, timeout: 3}} ]", "rule 'r6'", "\"timeout\"");
  expect_error("a: [b\n", "neither JSON nor YAML", NULL);
  expect_error("{\"rules\":[{\"id\":\"big\",\"when\":{\"arguments\":{\"c\":{\"regex\":\"(a{1,1000}){1000}\"}}},"
               "\"then\":{\"decision\":\"deny\"}}]}", "rule 'big'", "over 100");
  expect_error("{\"rules\":[{\"id\":\"br\",\"when\":{\"arguments\":{\"c\":{\"regex\":\"(a*)*\\\\1\"}}},"
               "\"then\":{\"decision\":\"deny\"}}]}", "rule 'br'", "back-references");
  /* an alias bomb: each level doubles the nodes */
  char bomb[2048] = "a0: &a0 [x, x]\n";
  for (int i = 1; i < 20; i++) {
    char l[96];
    snprintf(l, sizeof l, "a%d: &a%d [*a%d, *a%d]\n", i, i, i - 1, i - 1);
    strcat(bomb, l);
  }
  expect_error(bomb, "over 20000 nodes", NULL);
}

static const char *JSON_POLICY =
    "{\"default_action\":\"deny\",\"default_reason\":\"not listed\",\"rules\":["
    "{\"id\":\"no-rm\",\"when\":{\"step_kind\":\"tool_call\",\"target\":\"shell\","
    "\"arguments\":{\"command\":{\"regex\":\"(^|[ ;&])rm +-[a-z]*r\"}}},"
    "\"then\":{\"decision\":\"deny\",\"reason\":\"no recursive deletes\"}},"
    "{\"id\":\"shell\",\"when\":{\"target\":\"shell\"},\"then\":{\"decision\":\"allow\"}},"
    "{\"id\":\"src\",\"when\":{\"targets\":[\"read_*\",\"write_*\"],\"arguments\":{\"path\":"
    "{\"contains\":\"src/\"}}},\"then\":{\"decision\":\"allow\"}},"
    "{\"id\":\"cfg\",\"when\":{\"target\":\"write_file\",\"arguments\":{\"path\":{\"one_of\":"
    "[\"a.cfg\",\"b.cfg\"]}}},\"then\":{\"decision\":\"require_approval\",\"approval_timeout_s\":30}},"
    "{\"id\":\"n\",\"when\":{\"arguments\":{\"n\":{\"equals\":3}}},\"then\":{\"decision\":\"allow\"}},"
    "{\"id\":\"pr\",\"when\":{\"target\":\"open_pr\"},\"then\":{\"decision\":\"require_approval\","
    "\"reason\":\"review\"}},"
    "{\"id\":\"model\",\"when\":{\"step_kind\":\"llm_call\"},\"then\":{\"decision\":\"allow\"}}]}";

static const char *YAML_POLICY =
    "default_action: deny\n"
    "default_reason: not listed\n"
    "rules:\n"
    "  - id: no-rm\n"
    "    when:\n"
    "      step_kind: tool_call\n"
    "      target: shell\n"
    "      arguments:\n"
    "        command: {regex: '(^|[ ;&])rm +-[a-z]*r'}\n"
    "    then: {decision: deny, reason: no recursive deletes}\n"
    "  - id: shell\n"
    "    when: {target: shell}\n"
    "    then: {decision: allow}\n"
    "  - id: src\n"
    "    when:\n"
    "      targets: [\"read_*\", \"write_*\"]\n"
    "      arguments: {path: {contains: src/}}\n"
    "    then: {decision: allow}\n"
    "  - id: cfg\n"
    "    when: {target: write_file, arguments: {path: {one_of: [a.cfg, b.cfg]}}}\n"
    "    then: {decision: require_approval, approval_timeout_s: 30}\n"
    "  - id: n\n"
    "    when: {arguments: {n: {equals: 3}}}\n"
    "    then: {decision: allow}\n"
    "  - id: pr\n"
    "    when: {target: open_pr}\n"
    "    then: {decision: require_approval, reason: review}\n"
    "  - id: model\n"
    "    when: {step_kind: llm_call}\n"
    "    then: {decision: allow}\n";

static void check(const dbx_policy *p, const char *kind, const char *target, const char *args,
                  dbx_policy_decision d, const char *rule) {
  cJSON *a = args ? cJSON_Parse(args) : NULL;
  dbx_policy_verdict v;
  dbx_policy_eval(p, kind, target, a, &v);
  cJSON_Delete(a);
  if (v.decision != d || strcmp(v.rule_id, rule) != 0)
    fail_msg("%s %s %s: got %s by %s, want %s by %s", kind, target, args ? args : "",
             dbx_policy_decision_str(v.decision), v.rule_id, dbx_policy_decision_str(d), rule);
}

static void decisions(const dbx_policy *p) {
  check(p, "tool_call", "shell", "{\"command\":\"rm -rf build\"}", DBX_POLICY_DENY, "no-rm");
  check(p, "tool_call", "shell", "{\"command\":\"make; rm -r x\"}", DBX_POLICY_DENY, "no-rm");
  check(p, "tool_call", "shell", "{\"command\":\"make test\"}", DBX_POLICY_ALLOW, "shell");
  check(p, "tool_call", "shell", "{\"command\":\"farm -rf\"}", DBX_POLICY_ALLOW, "shell");
  check(p, "tool_call", "read_file", "{\"path\":\"src/a.c\"}", DBX_POLICY_ALLOW, "src");
  check(p, "tool_call", "read_file", "{\"path\":\"README\"}", DBX_POLICY_DENY, "default");
  check(p, "tool_call", "write_file", "{\"path\":\"b.cfg\"}", DBX_POLICY_APPROVAL, "cfg");
  check(p, "tool_call", "write_file", "{\"path\":\"c.cfg\"}", DBX_POLICY_DENY, "default");
  check(p, "tool_call", "write_file", "{\"n\":3}", DBX_POLICY_ALLOW, "n");
  check(p, "tool_call", "write_file", "{\"n\":\"3\"}", DBX_POLICY_DENY, "default");
  check(p, "tool_call", "write_file", NULL, DBX_POLICY_DENY, "default");
  check(p, "tool_call", "open_pr", "{\"title\":\"x\"}", DBX_POLICY_APPROVAL, "pr");
  check(p, "llm_call", "gpt-x", NULL, DBX_POLICY_ALLOW, "model");
  dbx_policy_verdict v;
  cJSON *a = cJSON_Parse("{\"path\":\"a.cfg\"}");
  dbx_policy_eval(p, "tool_call", "write_file", a, &v);
  assert_int_equal(v.approval_timeout_ms, 30000);
  cJSON_Delete(a);
  dbx_policy_eval(p, "tool_call", "open_pr", NULL, &v);
  assert_string_equal(v.reason, "review");
  assert_int_equal(v.approval_timeout_ms, DBX_POLICY_DEFAULT_APPROVAL_S * 1000);
  dbx_policy_eval(p, "tool_call", "nothing", NULL, &v);
  assert_string_equal(v.reason, "not listed");
}

static void test_policy_json_and_yaml_decide_alike(void **state) {
  (void)state;
  char err[512];
  dbx_policy *pj = compile_text(JSON_POLICY, err, sizeof err);
  if (!pj) fail_msg("json: %s", err);
  decisions(pj);
  dbx_policy *py = compile_text(YAML_POLICY, err, sizeof err);
  if (!py) fail_msg("yaml: %s", err);
  decisions(py);
  dbx_policy_free(pj);
  dbx_policy_free(py);
}

static void test_policy_none_is_permissive_default_is_deny(void **state) {
  (void)state;
  char err[256];
  dbx_policy *p = dbx_policy_compile(NULL, err, sizeof err);
  check(p, "tool_call", "open_pr", NULL, DBX_POLICY_ALLOW, "permissive");
  dbx_policy_free(p);
  cJSON *t = cJSON_Parse("{\"rules\":[]}");
  p = dbx_policy_compile(t, err, sizeof err);
  check(p, "tool_call", "shell", "{}", DBX_POLICY_DENY, "default");
  dbx_policy_free(p);
  cJSON_Delete(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_policy_refuses_bad_policies),
      cmocka_unit_test(test_policy_json_and_yaml_decide_alike),
      cmocka_unit_test(test_policy_none_is_permissive_default_is_deny),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
