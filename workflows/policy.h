/* workflows/policy: the agent's step policy (docs/agent.md "Policy").
 *
 * A policy is a JSON object (the durabox.Agent input's "policy"; YAML text
 * is parsed into the same tree by dbx_policy_parse_text):
 *   {"default_action": "allow" | "deny" | "require_approval" (default deny),
 *    "default_reason"?: TEXT,
 *    "rules": [{"id": ID, "when": {"step_kind"?: "llm_call" | "tool_call",
 *                                  "target"?: GLOB, "targets"?: [GLOB, ..],
 *                                  "arguments"?: {NAME: {"equals"?: V,
 *                                    "contains"?: TEXT, "one_of"?: [V, ..],
 *                                    "regex"?: ERE}}},
 *               "then": {"decision": "allow" | "deny" | "require_approval",
 *                        "reason"?: TEXT, "approval_timeout_s"?: N,
 *                        "approvers"?: [NAME, ..]}}, ..]}
 * approvers: only these names may decide a held step (absent: anyone).
 * A rule matches when every field of its "when" matches (an empty "when"
 * matches all): step_kind equal; target an fnmatch(3) glob of the step's
 * target (a tool's name, or the model for llm_call); targets any of its
 * globs; each argument present and every matcher of it true (a string
 * argument is compared as its text, any other value as its JSON text;
 * equals/one_of compare values, contains is a substring, regex a POSIX
 * extended regular expression searched in the text: at most 512 bytes, no
 * repetition count over 100, no back-references). First match wins; no
 * match gives default_action under rule id "default". Unknown keys, empty
 * matchers, duplicate or missing ids and bad regular expressions are refused
 * by dbx_policy_compile with the rule id and the problem. Without a policy
 * (NULL tree) every step is allowed under rule id "permissive".
 * Pure and deterministic (the policy is part of the workflow input, so a
 * replay decides the same way). A compiled policy is read-only: any number
 * of threads may evaluate it at once. */
#ifndef DBX_WORKFLOWS_POLICY_H
#define DBX_WORKFLOWS_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct dbx_policy dbx_policy;

typedef enum { DBX_POLICY_ALLOW = 0, DBX_POLICY_DENY, DBX_POLICY_APPROVAL } dbx_policy_decision;

/* The default approval timeout when a rule gives none: 15 minutes. */
#define DBX_POLICY_DEFAULT_APPROVAL_S 900

typedef struct {
  dbx_policy_decision decision;
  const char *rule_id;          /* borrowed from the policy ("default", "permissive") */
  const char *reason;           /* borrowed; "" when none */
  int64_t approval_timeout_ms;  /* APPROVAL: > 0 */
  const cJSON *approvers;       /* borrowed array of names, NULL = anyone */
} dbx_policy_verdict;

/* Compile tree (borrowed; NULL = no policy, permissive). Returns the policy
 * (free with dbx_policy_free) or NULL with the problem in err (n bytes),
 * "policy: rule 'ID': ..." when a rule is at fault; NULL with err "" on OOM. */
dbx_policy *dbx_policy_compile(const cJSON *tree, char *err, size_t n);
void dbx_policy_free(dbx_policy *p); /* accepts NULL */

/* Decide a step: kind "llm_call" or "tool_call", target (tool name or
 * model), args (a JSON object or NULL). *v borrows from p. */
void dbx_policy_eval(const dbx_policy *p, const char *kind, const char *target, const cJSON *args,
                     dbx_policy_verdict *v);

/* The text of a policy: JSON, else YAML (libyaml: block and flow mappings,
 * sequences and scalars; plain true/false/null/numbers typed, quoted
 * scalars text; non-core tags refused, and a document that expands past
 * 20000 nodes through aliases refused).
 * Returns a cJSON tree (caller owns it) or NULL with the problem in err. */
cJSON *dbx_policy_parse_text(const char *text, size_t len, char *err, size_t n);

/* "allow", "deny", "require_approval". */
const char *dbx_policy_decision_str(dbx_policy_decision d);

#endif
