/* cli/fork: checkpoints and forks of durabox.Script runs (issue 12; the
 * rules in docs/worker.md "Checkpoints and forks").
 *
 * Two activity types, registered with every worker the durabox command
 * starts (cli/kit.c), over the kit's sandbox driver:
 *   durabox.checkpoint {"sandbox_id", "name", "covered_event_id", "reason"}
 *       -> {"ref", "name", "covered_event_id"}: the driver's checkpoint of
 *       the sandbox as snapshot `name` (deterministic, so a retry adopts the
 *       snapshot it made), then the entry in the worker's checkpoint index
 *       (worker/wstore.h DBX_WSTORE_CHECKPOINTS, key
 *       "<workflow id>/<run id>/<covered event id, 20 digits>", value
 *       {"name", "ref", "covered_event_id", "sandbox_id", "driver",
 *       "workflow_id", "run_id"}). A driver failure is its failure type
 *       (activities/sandbox.h "Failures"); an index write that fails is the
 *       retryable IndexWriteFailed.
 *   durabox.fork_load {"workflow_id", "run_id", "event_id"} -> the plan
 *       below, from the source's history read from the service with the
 *       worker's client (every page). ForkSourceNotFound (no such run) and
 *       ForkRefused (dbx_fork_plan's reason) are non-retryable.
 *
 * The plan (JSON): {"source": {"workflow_id", "run_id"}, "event_id" (the
 * fork point, after snapping), "requested_event_id", "snapped" (bool),
 * "last_event_id", "checkpoint": {"name", "ref", "covered_event_id"} | null,
 * "covered" (bool), "uncovered_steps": [{"step", "type", "event_id"}],
 * "steps": [{"type", "key" (dbx_script_step_key), "occurrence" (0, 1, ...
 * among steps of that key), "step", "event_id", "status": "completed" |
 * "failed" | "timed_out" | "canceled", "result"? (JSON), "failure_type"?,
 * "failure_message"?, "non_retryable"?, "attempts", "restored" (bool: the
 * restored sandbox has its effect)}], "steps_left_out" (steps past the
 * plan's size limit, run live)}.
 * Threading: one dbx_fork_acts per kit; its activities run on any number of
 * worker threads (the driver, wstore and client are thread-safe). */
#ifndef DBX_CLI_FORK_H
#define DBX_CLI_FORK_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "activities/driver.h"
#include "base/err.h"
#include "protos/pb.h"
#include "worker/worker.h"

typedef struct dbx_fork_acts dbx_fork_acts;

/* drv borrowed (it must outlive the set). *out: free with
 * dbx_fork_acts_destroy after the worker. DBX_OK, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_fork_acts_create(dbx_driver *drv, dbx_fork_acts **out);
/* Register both types with w (before start); the set then uses w's store
 * and client. One worker per set. DBX_OK or the registration's error. */
dbx_err dbx_fork_acts_register(dbx_fork_acts *a, dbx_worker *w);
void dbx_fork_acts_destroy(dbx_fork_acts *a); /* accepts NULL */

/* The plan of a fork of the run whose history is evs[0..n) at event `at`.
 * Refused (NULL, *why malloc'd, say it as is): no such event, a run that is
 * not durabox.Script, no completed workflow task. An `at` in the run's open
 * last workflow task (its WorkflowTaskScheduled, and Started, end the
 * history with no completion) is snapped to the last WorkflowTaskCompleted
 * ("snapped": true): that task has decided nothing yet. NULL with *why
 * NULL: OOM. evs borrowed. */
cJSON *dbx_fork_plan(HistoryEvent *const *evs, size_t n, int64_t at, const char *workflow_id,
                     const char *run_id, char **why);
/* The covered intervals of a run: {"last_event_id", "intervals": [{"from",
 * "to", "checkpoint", "ref"}]}: a fork at an event in [from, to] restores
 * that checkpoint with every recorded step's change. NULL on OOM. */
cJSON *dbx_fork_points(HistoryEvent *const *evs, size_t n);

/* durabox workflow fork | fork-points (argv[1] names which). */
int dbx_cli_fork(int argc, char **argv);

#endif
