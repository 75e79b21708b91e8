/* libFuzzer harness: the durabox.Agent input check (workflows/agent.h,
 * dbx_agent_validate), which parses the input, the policy's text (JSON or
 * YAML, workflows/policy.h) and compiles its rules, as `durabox run` and the
 * workflow's create do; then the input's bytes as a policy text of its own,
 * compiled and evaluated for a tool call with the input as arguments. Any
 * bytes: a verdict (0, or -1 with a NUL-terminated message that names the
 * problem), never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "workflows/agent.h"
#include "workflows/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = malloc(size ? size : 1); /* exact size: a read past the end is ASan's */
  if (!in) return 0;
  if (size) memcpy(in, data, size);
  char err[256];
  memset(err, 'x', sizeof err);
  int rc = dbx_agent_validate(in, size, err, sizeof err);
  if (rc != 0 && rc != -1) abort();
  if (rc == -1 && (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')) abort();
  cJSON *tree = dbx_policy_parse_text(in, size, err, sizeof err);
  if (tree) {
    dbx_policy *p = dbx_policy_compile(tree, err, sizeof err);
    if (p) {
      dbx_policy_verdict v;
      dbx_policy_eval(p, "tool_call", "shell", tree, &v);
      if (!v.rule_id || !v.reason) abort();
      dbx_policy_eval(p, "llm_call", "", NULL, &v);
      dbx_policy_free(p);
    } else if (memchr(err, '\0', sizeof err) == NULL) {
      abort();
    }
    cJSON_Delete(tree);
  }
  free(in);
  return 0;
}
