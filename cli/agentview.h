/* cli/agentview: how the durabox command shows a durabox.Agent run
 * (workflows/agent.h) to a person: its markers (each policy decision, a
 * held step, the decision on it) as one line each, for `durabox workflow
 * show [--follow]` and the run view of `durabox run`, and the step it holds
 * for approval (memo "durabox.approval") for `durabox workflow describe`
 * and `durabox approval list`. Pure formatting; any thread. */
#ifndef DBX_CLI_AGENTVIEW_H
#define DBX_CLI_AGENTVIEW_H

#include <cjson/cJSON.h>

#include "protos/pb.h"

/* One line for an agent marker ("durabox.policy", "durabox.approval_requested",
 * "durabox.approval_decided"), malloc'd; NULL for any other marker. The
 * texts are from history: the caller prints them through dbx_cli_utf8_puts. */
char *dbx_cli_agent_marker_line(const MarkerRecordedEventAttributes *m);
/* The held step of a run (its memo "durabox.approval", a JSON object: an
 * agent's step, whose "step" is a number, or a fork's at_most_once Script
 * step, whose "step" is its name), or NULL when none; the caller frees it
 * with cJSON_Delete. */
cJSON *dbx_cli_agent_held(const WorkflowExecutionInfo *info);
/* "step N" or "step 'NAME'", malloc'd; NULL on OOM. */
char *dbx_cli_held_step_words(const cJSON *held);
/* "step N tool_call open_pr (rule R: reason) arguments {...}, times out in
 * S s" (a fork's step: "step 'NAME' at_most_once sandbox.exec (rule fork:
 * ...) arguments {...}, waits without a timeout"), malloc'd; NULL on OOM. */
char *dbx_cli_agent_held_words(const cJSON *held);

/* Print a durabox.Agent result (steps table, status, pull request, answer)
 * to stdout for `durabox run`; texts made safe for a terminal. */
void dbx_cli_agent_print_summary(const cJSON *result);

#endif
