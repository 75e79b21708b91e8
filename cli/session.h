/* Sessions (docs/worker.md "Sessions"): a session is a workflow id S; each
 * turn is a new run of S, started with workflow id reuse policy
 * ALLOW_DUPLICATE only when no run of S is open. The turn's input is the
 * given JSON object with one field added:
 *   "session": {"id": S, "turn": N, "previous_run_id": R | null,
 *               "state": <session_state of run R's result> | null}
 * where R is the newest run of S whose status is Completed (failed,
 * cancelled, terminated and timed-out runs are skipped: they never become
 * the parent) and N = 1 + the number of completed runs of S. Generic: any
 * workflow type that puts "session_state" in its result takes part
 * (durabox.Script, durabox.Agent). `durabox workflow start|execute
 * --session S` and `durabox run FILE --session S` use it; `durabox sandbox
 * gc` asks dbx_cli_session_owns whether a session still needs a sandbox.
 * One thread per call; the client is borrowed. */
#ifndef DBX_CLI_SESSION_H
#define DBX_CLI_SESSION_H

#include "worker/client.h"

typedef struct {
  int turn;              /* N, from 1 */
  char *previous_run_id; /* R (malloc'd), NULL for the first turn */
  char *input_json;      /* the input with "session" added (malloc'd) */
} dbx_cli_session_turn;

/* Prepare the next turn of session S: find the previous completed turn
 * (ListWorkflowExecutions "WorkflowId = 'S'", every page, and
 * DescribeWorkflowExecution of S's latest run, which a lagging visibility
 * store may not list yet), read its result's session_state, and build the
 * input from input_json (NULL: {}). Returns 0 with *out filled (release
 * with dbx_cli_session_turn_free); otherwise a message on stderr
 * ("durabox <cmd>: ...", with json also {"error": ...} on stdout) and 1
 * when a turn of S is open ("session S: turn N (run R) is still running")
 * or a call failed, 2 when S or the input is unusable (S with a quote,
 * backslash or control character; an input that is no JSON object or has
 * its own "session"). address: for dbx_cli_report's hint, may be NULL. */
int dbx_cli_session_prepare(dbx_client *c, const char *cmd, const char *address, int json,
                            const char *session, const char *input_json,
                            dbx_cli_session_turn *out);
void dbx_cli_session_turn_free(dbx_cli_session_turn *t);

/* 0 when S can be a session id: a workflow id, not empty, without quotes,
 * backslashes or control characters. Otherwise says so on stderr ("durabox
 * <cmd>: --session: ...") and returns 2: the flag check a command makes
 * before it starts or dials anything (dbx_cli_session_prepare checks again).
 * Any thread. */
int dbx_cli_session_check_id(const char *cmd, const char *session);

/* StartWorkflowExecution of a prepared turn: so's workflow id becomes S,
 * its input the turn's, its reuse policy ALLOW_DUPLICATE (so is copied,
 * not changed). The service's WorkflowExecutionAlreadyStarted (another
 * turn started meanwhile) is DBX_EEXIST with *errmsg "session S: a turn is
 * still running (started meanwhile)". As dbx_client_start_workflow. */
dbx_err dbx_cli_session_start(dbx_client *c, const dbx_client_start_opts *so, const char *session,
                              const dbx_cli_session_turn *t, char **run_id_out, char **errmsg);

/* 1 when sandbox_id is the sandbox of session (workflow id) S's newest
 * completed turn: its result's session_state.sandbox.id (the next turn
 * re-opens it, so gc must leave it); 0 when not, -1 when the service could
 * not tell (unreachable, a failed call). */
int dbx_cli_session_owns(dbx_client *c, const char *session, const char *sandbox_id);

#endif
