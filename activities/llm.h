/* activities/llm: the activity "llm.chat", one OpenAI-compatible chat
 * completions call made from the worker (docs/agent.md).
 *
 *   llm.chat {"messages": [...], "tools"?: [...], "model"?: NAME,
 *             "base_url"?: URL, "max_tokens"?: N, "temperature"?: X}
 *     -> {"content": TEXT | null, "tool_calls": [{"id", "name", "arguments"}],
 *         "finish_reason": TEXT | null, "model": TEXT,
 *         "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
 *   POST <base>/chat/completions, where base is the input's base_url, else
 *   $LLM_BASE_URL (e.g. https://api.openai.com/v1); model: the input's,
 *   else $LLM_MODEL. $LLM_API_KEY (read when the activity runs, never part
 *   of input, result, error or log) is sent as "Authorization: Bearer KEY"
 *   when set. "arguments" is the model's text as sent (a JSON object in a
 *   string, parsed by the caller). The key's value is redacted from the
 *   result's texts should a reply echo it.
 *   The result is recorded in history like any activity result, so a
 *   replay reads it back and never calls the model.
 *
 * Failures (failure_type):
 *   LlmRateLimited       retryable: HTTP 429
 *   LlmServerError       retryable: HTTP 5xx, 408
 *   LlmUnavailable       retryable: no reply (cannot connect, timed out)
 *   LlmRequestRejected   non-retryable: any other 4xx (the reply's
 *                        error.message quoted)
 *   LlmMalformedResponse non-retryable: a 2xx reply that is not JSON, has no
 *                        choices[0].message, a tool call without id,
 *                        function.name or string function.arguments, or
 *                        usage counts that are not numbers; the message
 *                        names the field
 *   LlmNotConfigured     non-retryable: no base URL, no model
 *   InvalidInput         non-retryable: messages missing or not an array
 * Retry class: safe_to_retry (a repeated call costs tokens, nothing else);
 * the caller schedules it with a backoff retry policy.
 * Thread safety: runs on any number of threads at once (a handle per call). */
#ifndef DBX_ACTIVITIES_LLM_H
#define DBX_ACTIVITIES_LLM_H

#include "base/err.h"
#include "worker/api.h"

struct dbx_worker;

extern const dbx_activity_type dbx_llm_chat_activity;

/* Register llm.chat, github.open_pr and github.find_pr (activities/github.h) with w.
 * Returns DBX_OK or the first registration's error. */
dbx_err dbx_agent_acts_register(struct dbx_worker *w);

#endif
