/* cli/fork: `durabox workflow fork` and `durabox workflow fork-points`
 * (see fork.h; docs/worker.md "Checkpoints and forks").
 *
 * fork reads the source run's whole history, makes the same plan the fork's
 * first activity will (to refuse a bad point, say where it snapped and warn
 * at an uncovered point before anything starts), then starts a new
 * execution of the same type, task queue (or --task-queue), timeouts and input, the input
 * marked "fork_of": {"workflow_id", "run_id", "event_id"}. The source is not
 * changed. The run timeout and execution timeout are durations, so the fork
 * gets them afresh from its own start. */
#include "cli/fork.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/flags.h"
#include "worker/client.h"

typedef struct {
  const char *workflow_id, *run_id, *new_id, *task_queue;
  double at;
  int points;
} fork_args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: durabox workflow fork --workflow-id ID [--run-id R] --at EVENT_ID\n"
          "                             [--workflow-id-new NEW] [--task-queue Q] [--address A]\n"
          "                             [--output json]\n"
          "       durabox workflow fork-points --workflow-id ID [--run-id R]\n"
          "fork starts a new execution of the run's type and input from event EVENT_ID:\n"
          "its sandbox is restored from the checkpoint covering that event, the steps\n"
          "recorded up to it are taken from the record, the rest run live (at_most_once\n"
          "steps wait for a durabox.approval signal). fork-points lists the events a\n"
          "checkpoint covers. --task-queue runs the fork on another queue (default: the\n"
          "source's), e.g. a worker with changed code or another sandbox driver.\n");
}

static int parse(int argc, char **argv, fork_args *a, dbx_cli_conn *conn) {
  const dbx_cli_flag fl[] = {
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &a->workflow_id, 0, 0},
      {"--run-id", "-r", DBX_CLI_FLAG_STR, &a->run_id, 0, 0},
      {"--workflow-id-new", NULL, DBX_CLI_FLAG_STR, &a->new_id, 0, 0},
      {"--at", NULL, DBX_CLI_FLAG_NUM, &a->at, 1, 1e15},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &a->task_queue, 0, 0},
  };
  const char *cmd = a->points ? "durabox workflow fork-points" : "durabox workflow fork";
  for (int i = 2; i < argc; i++) {
    int r = dbx_cli_conn_flag(conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take(cmd, fl, a->points ? 2 : 5, argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      usage(stdout);
      return -1;
    }
    return dbx_cli_flag_unknown(cmd, argv[i]);
  }
  if (!a->workflow_id || !*a->workflow_id) {
    fprintf(stderr, "%s: --workflow-id is required\n", cmd);
    return 2;
  }
  /* given but empty: refused, not taken as "the default" */
  if (dbx_cli_nonempty(cmd, "--workflow-id-new", a->new_id) != 0 ||
      dbx_cli_nonempty(cmd, "--task-queue", a->task_queue) != 0 || dbx_cli_nonempty(cmd, "--run-id", a->run_id) != 0)
    return 2;
  if (!a->points && a->at < 1) {
    fprintf(stderr, "%s: --at EVENT_ID is required\n", cmd);
    return 2;
  }
  if (a->at != (double)(int64_t)a->at) {
    fprintf(stderr, "%s: --at must be a whole event id\n", cmd);
    return 2;
  }
  return 0;
}

/* The source's run id (given, or its latest run's). malloc'd; NULL after a report. */
static char *source_run(dbx_client *c, const fork_args *a, const char *addr) {
  if (a->run_id && *a->run_id) return dbx_strdup(a->run_id);
  DescribeWorkflowExecutionResponse *d = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_describe(c, a->workflow_id, NULL, &d, &err);
  char *rid = NULL;
  if (e == DBX_OK && d->workflow_execution_info && d->workflow_execution_info->execution)
    rid = dbx_strdup(d->workflow_execution_info->execution->run_id);
  if (e != DBX_OK) dbx_cli_report(a->points ? "fork-points" : "fork", addr, e, err);
  free(err);
  dbx_client_msg_free(d);
  return rid;
}

static void print_points(const cJSON *p, const fork_args *a, const char *rid, int json) {
  if (json) {
    dbx_cli_json_print(p, 0);
    return;
  }
  const cJSON *iv = cJSON_GetObjectItemCaseSensitive(p, "intervals"), *i;
  printf("workflow %s run %s: %d events, %d checkpoint%s\n", a->workflow_id, rid,
         (int)dbx_json_int(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(p, "last_event_id")), 0, INT_MAX),
         cJSON_GetArraySize(iv), cJSON_GetArraySize(iv) == 1 ? "" : "s");
  cJSON_ArrayForEach(i, iv) {
    char line[512];
    snprintf(line, sizeof line, "  events %lld-%lld: covered by checkpoint %s",
             (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(i, "from")),
             (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(i, "to")),
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(i, "checkpoint")));
    dbx_cli_utf8_puts(line);
  }
  if (cJSON_GetArraySize(iv) == 0)
    printf("  no checkpoints: a fork starts from a fresh sandbox (set sandbox.checkpoint)\n");
}

/* The warnings of a plan, on stderr: a snapped point, an uncovered one. */
static void warn_plan(const cJSON *plan) {
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "snapped")))
    fprintf(stderr,
            "durabox workflow fork: event %lld is in the run's open workflow task (nothing it "
            "decides is recorded yet): forking at event %lld, the last completed workflow task\n",
            (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(plan, "requested_event_id")),
            (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(plan, "event_id")));
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(plan, "covered"))) return;
  const cJSON *ck = cJSON_GetObjectItemCaseSensitive(plan, "checkpoint");
  char head[400];
  if (cJSON_IsObject(ck))
    snprintf(head, sizeof head, "checkpoint %s (covering event %lld)",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ck, "name")),
             (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(ck, "covered_event_id")));
  else
    snprintf(head, sizeof head, "a fresh sandbox (no checkpoint at or before the event)");
  fprintf(stderr,
          "durabox workflow fork: warning: event %lld is not covered by a checkpoint: the fork "
          "restores %s, and these recorded steps describe changes that sandbox does not have; the fork "
          "takes their results from the record and does not run them again:\n",
          (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(plan, "event_id")), head);
  const cJSON *u;
  cJSON_ArrayForEach(u, cJSON_GetObjectItemCaseSensitive(plan, "uncovered_steps")) {
    char line[400];
    snprintf(line, sizeof line, "  step '%s' (%s, event %lld)",
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(u, "step")),
             cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(u, "type")),
             (long long)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "event_id")));
    fputs(line, stderr);
    fputc('\n', stderr);
  }
}

/* Start the fork. Returns the exit status. */
static int start_fork(dbx_client *c, const fork_args *a, const char *rid, const HistoryEvent *first,
                      const cJSON *plan, const dbx_cli_conn *conn) {
  const WorkflowExecutionStartedEventAttributes *s = first->workflow_execution_started_event_attributes;
  char *in = dbx_payloads_to_json(s->input), *err = NULL, *new_run = NULL, *txt = NULL;
  cJSON *inj = in ? cJSON_Parse(in) : NULL;
  int64_t at = dbx_json_int(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(plan, "event_id")), 0, INT64_MAX);
  char defid[300];
  snprintf(defid, sizeof defid, "%.200s-fork-%lld", a->workflow_id, (long long)at);
  const char *nid = a->new_id && *a->new_id ? a->new_id : defid;
  int rc = 1;
  if (!cJSON_IsObject(inj)) {
    fprintf(stderr, "durabox workflow fork: the source's input is not a JSON object\n");
    goto out;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(inj, "fork_of"); /* a fork of a fork */
  cJSON *fo = cJSON_AddObjectToObject(inj, "fork_of");
  cJSON_AddStringToObject(fo, "workflow_id", a->workflow_id);
  cJSON_AddStringToObject(fo, "run_id", rid);
  cJSON_AddNumberToObject(fo, "event_id", (double)at);
  txt = cJSON_PrintUnformatted(inj);
  dbx_client_start_opts so = {
      .workflow_id = nid,
      .workflow_type = s->workflow_type->name,
      .task_queue = a->task_queue && *a->task_queue ? a->task_queue
                    : s->task_queue                 ? s->task_queue->name
                                                    : "durabox",
      .input_json = txt,
      .execution_timeout_ms = dbx_pb_duration_ms(s->workflow_execution_timeout),
      .run_timeout_ms = dbx_pb_duration_ms(s->workflow_run_timeout),
      .task_timeout_ms = dbx_pb_duration_ms(s->workflow_task_timeout)};
  dbx_err e = txt ? dbx_client_start_workflow(c, &so, &new_run, &err) : DBX_ENOMEM;
  if (e != DBX_OK) {
    dbx_cli_report("fork: start", conn->address, e, err);
    if (e == DBX_EEXIST)
      fprintf(stderr, "durabox workflow fork: a run of %s is open; %s\n", nid,
              a->new_id && *a->new_id ? "pick another --workflow-id-new, or wait for that run to close"
                                      : "name the fork with --workflow-id-new");
    goto out;
  }
  const cJSON *ck = cJSON_GetObjectItemCaseSensitive(plan, "checkpoint");
  if (conn->json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "workflowId", nid);
    cJSON_AddStringToObject(o, "runId", new_run ? new_run : "");
    cJSON *f = cJSON_AddObjectToObject(o, "forkOf");
    cJSON_AddStringToObject(f, "workflowId", a->workflow_id);
    cJSON_AddStringToObject(f, "runId", rid);
    cJSON_AddNumberToObject(f, "eventId", (double)at);
    cJSON_AddItemToObject(o, "checkpoint", cJSON_Duplicate(ck, 1));
    cJSON_AddItemToObject(o, "covered", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(plan, "covered"), 1));
    cJSON_AddItemToObject(o, "uncoveredSteps",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(plan, "uncovered_steps"), 1));
    dbx_cli_json_print(o, 0);
    cJSON_Delete(o);
  } else {
    char line[900];
    snprintf(line, sizeof line, "forked workflow %s run %s at event %lld: started %s run %s (%s)",
             a->workflow_id, rid, (long long)at, nid, new_run ? new_run : "",
             cJSON_IsObject(ck) ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ck, "name"))
                                : "fresh sandbox");
    dbx_cli_utf8_puts(line);
  }
  rc = 0;
out:
  free(in);
  free(txt);
  free(err);
  free(new_run);
  cJSON_Delete(inj);
  return rc;
}

static int run(dbx_client *c, const fork_args *a, const dbx_cli_conn *conn) {
  char *rid = source_run(c, a, conn->address), *err = NULL, *why = NULL;
  if (!rid) return 1;
  dbx_client_history h = {0};
  int rc = 1;
  cJSON *out = NULL;
  dbx_err e = dbx_client_get_history(c, a->workflow_id, rid, NULL, &h, &err);
  if (e != DBX_OK || h.n == 0) {
    dbx_cli_report(a->points ? "fork-points" : "fork", conn->address, e == DBX_OK ? DBX_ENOTFOUND : e, err);
    goto done;
  }
  if (a->points) {
    out = dbx_fork_points(h.events, h.n);
    if (out) print_points(out, a, rid, conn->json);
    rc = out ? 0 : 1;
    goto done;
  }
  out = dbx_fork_plan(h.events, h.n, (int64_t)a->at, a->workflow_id, rid, &why);
  if (!out) {
    fprintf(stderr, "durabox workflow fork: cannot fork workflow %s run %s at event %lld: %s\n",
            a->workflow_id, rid, (long long)a->at, why ? why : "out of memory");
    if (conn->json) dbx_cli_json_error("ForkRefused", why ? why : "out of memory");
    goto done;
  }
  warn_plan(out);
  rc = start_fork(c, a, rid, h.events[0], out, conn);
done:
  cJSON_Delete(out);
  free(why);
  free(err);
  free(rid);
  dbx_client_history_cleanup(&h);
  return rc;
}

int dbx_cli_fork(int argc, char **argv) {
  fork_args a = {.points = argc > 1 && strcmp(argv[1], "fork-points") == 0};
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  int pr = parse(argc, argv, &a, &conn);
  if (pr != 0) return pr < 0 ? 0 : pr;
  if (conn.address == NULL) conn.address = "127.0.0.1:7233";
  if (dbx_cli_conn_load(&conn) != 0) return 2;
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  dbx_client *c = NULL;
  int rc = 1;
  if (dbx_client_create(&co, &c) != DBX_OK) fprintf(stderr, "durabox: cannot create a client for %s\n", conn.address);
  else rc = run(c, &a, &conn);
  dbx_client_destroy(c);
  dbx_cli_conn_cleanup(&conn);
  return rc;
}
