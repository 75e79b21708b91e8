/* workflows/agent: the built-in "durabox.Agent" workflow type, a coding
 * agent loop run as durable steps (docs/agent.md).
 *
 * Input (JSON object; unknown fields are refused):
 *   "task": TEXT (required): the user's request for this turn;
 *   "sandbox"?: {"source": {...}, "env", "network", "host_fs", "keep"} as
 *     durabox.Script's (sandbox.create's input);
 *   "repository"?: {"github"?: "OWNER/NAME", "base"?: BRANCH (default
 *     "main"), "branch"?: NAME, "api_url"?: URL}: where open_pr opens the
 *     pull request; the sandbox works on its own branch (default
 *     "durabox/<workflow id>", created with git checkout -B when the
 *     sandbox's source is a git repository, which also gets the author
 *     "durabox agent <agent@durabox.invalid>" unless it has one);
 *   "model"?: {"name"?, "base_url"?, "max_tokens"?, "temperature"?,
 *     "timeout_s"? (default 300), "retry"?: {"maximum_attempts" (default 6),
 *     "initial_interval_s" (2), "backoff_coefficient" (2),
 *     "maximum_interval_s" (60)}}; name and base_url default to the worker's
 *     LLM_MODEL and LLM_BASE_URL (activities/llm.h);
 *   "policy"?: a policy object (workflows/policy.h) or its text (JSON or
 *     YAML); absent: every step is allowed;
 *   "budget"?: {"max_steps"? (default 50: model calls + tool calls),
 *     "max_tokens"? (default none: total tokens)};
 *   "system_prompt"?: TEXT; "tool_output_max_bytes"? (default 16384, at
 *     least 256): the most of one tool's output given back to the model;
 *   "session"?: {"id", "turn", "previous_run_id", "state"} as the CLI adds
 *     it (cli/session.h, docs/worker.md "Sessions"): state's conversation, sandbox,
 *     branch and pull_request are continued.
 *
 * Steps: sandbox.create (or, with a session's sandbox, sandbox.start of
 * it); then llm.chat {messages, tools, ...} -> for each tool call, in order:
 * the policy (a marker "durabox.policy" {step, kind, target, decision, rule,
 * reason} records each decision) -> the tool's activity, or a refusal the
 * model reads ("`open_pr` not allowed. reason: ..."):
 *   shell {command, timeout_s?}  -> sandbox.exec (safe_to_retry)
 *   read_file {path}             -> sandbox.read_file (safe_to_retry)
 *   write_file {path, content}   -> sandbox.write_file (safe_to_retry)
 *   open_pr {title, body?}       -> github.open_pr (at_most_once) with the
 *                                   repository, the branch as head, base;
 *                                   when its outcome is unknown (OutcomeUnknown,
 *                                   or it timed out after starting),
 *                                   github.find_pr tells whether it exists;
 *                                   when none does the call never reached
 *                                   GitHub and is made once more
 * until the model answers without tool calls or the budget is spent; then
 * sandbox.delete unless the sandbox is kept (sandbox.keep, or a session).
 * require_approval holds the step: sandbox.stop, memo "durabox.approval"
 * {step, kind, target, arguments, rule, reason, timeout_s, deadline_ms}
 * (null once decided), marker "durabox.approval_requested", and a wait for
 * the signal "durabox.approval" {"step"?, "decision": "grant"|"deny", "by",
 * "reason"?} or the rule's timeout (then denied, reason "approval timed
 * out"). A decision is recorded by marker "durabox.approval_decided",
 * sandbox.start runs, and a grant runs exactly the held call with its
 * recorded arguments (the model is not asked again); a denial gives the
 * model the refusal with the reason and who denied it.
 *
 * Output: {"status": "completed" | "budget_exhausted" | "denied", "answer",
 * "steps": [{"n", "kind", "target", "decision", "rule", "ok", "summary",
 * "approval"?}], "usage": {"prompt_tokens", "completion_tokens",
 * "total_tokens"}, "model_calls", "tool_calls", "pull_request": {"number",
 * "url"} | null, "sandbox_id", "branch", "session_state": {"conversation",
 * "sandbox": {"id", "owner_run_id"}, "branch", "pull_request"}}. A failed
 * model call (after its retries; LlmMalformedResponse at once) fails the run
 * with the activity's failure type and message; bad input fails it with
 * InvalidInput naming the field (a policy's problem names the rule).
 * Queries: "progress" (the output so far), "approval" (the held step or
 * null). Deterministic: input, activity outcomes and signals only. */
#ifndef DBX_WORKFLOWS_AGENT_H
#define DBX_WORKFLOWS_AGENT_H

#include <stddef.h>

#include "worker/api.h"

extern const dbx_workflow_type dbx_agent_workflow;

/* Check an Agent input as the workflow will. 0, or -1 with the message in err. */
int dbx_agent_validate(const char *input_json, size_t len, char *err, size_t n);

#endif
