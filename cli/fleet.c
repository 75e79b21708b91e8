/* cli/fleet: `durabox fleet run|status|cancel` (cli/fleet.h).
 *
 * run: reads FILE (a durabox.Fleet input, workflows/fleet.h), applies
 * --concurrency, makes a relative items_file absolute (relative to FILE's
 * folder), checks the input as the workflow will, starts it (on the embedded
 * service and worker when no address is given; their store is
 * $DURABOX_HOME/fleet/service unless --db-filename, so a re-run with the same
 * id finds what succeeded) and shows progress until the fleet ends: on a
 * terminal one bar redrawn in place (done/total, running, failed, rate,
 * time left), otherwise one plain line whenever the count of finished items
 * changes (at most every 2 s) and at the end. Then the table of items and
 * the counts; --output json prints the fleet's result instead. SIGINT /
 * SIGTERM the first time cancels the fleet and waits for it to end (its
 * children delete their sandboxes); the second time leaves at once.
 * A fleet id that is open already (a fleet run that left before its fleet
 * ended) is followed when FILE gives the same input, refused naming the
 * fields otherwise (resume()). A fleet that closed without a result is named
 * by Temporal's status name and its failure (print_closed()).
 * status, cancel: only of a durabox.Fleet. Without an address this process
 * holds the store, so no worker runs an open fleet: status says so, cancel
 * records the request that the next fleet run finishes.
 * Exit status: 0 when every item succeeded or was skipped, 1 otherwise, 2 on
 * usage or input errors (and for a different input to an open fleet). */
#include "cli/fleet.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/fs.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/embed.h"
#include "cli/flags.h"
#include "protos/pb.h"
#include "workflows/fleet.h"

#define FLEET_MAX_FILE_BYTES (2u * 1024 * 1024)

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop++;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int64_t now_ms(void) { return dbx_mono_ns() / 1000000; }

/* s with control characters shown as '?', into buf (n bytes). */
static const char *safe(const char *s, char *buf, size_t n) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < n; i++)
    buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
  buf[i] = '\0';
  return buf;
}

static double numv(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *strv(const cJSON *o, const char *k) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
  return s ? s : "";
}

/* ------------------------------------------------------------ output */

/* The table of items and the counts. Returns the exit status it implies. */
static int print_result(const cJSON *r) {
  const cJSON *it;
  printf("\n%-32s %-10s %9s %8s  %-36s %s\n", "ITEM", "STATUS", "SECONDS", "ATTEMPTS", "CHILD RUN",
         "ERROR");
  cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r, "items")) {
    char k[64], e[200], rid[64];
    printf("%-32s %-10s %9.1f %8d  %-36s %s\n", safe(strv(it, "key"), k, sizeof k),
           strv(it, "status"), numv(it, "duration_ms") / 1000.0, (int)numv(it, "attempts"),
           safe(strv(it, "run_id"), rid, sizeof rid), safe(strv(it, "error"), e, sizeof e));
  }
  if (numv(r, "items_dropped") > 0)
    printf("(%.0f more items not listed: the fleet keeps %d records)\n", numv(r, "items_dropped"),
           DBX_FLEET_MAX_RECORDS);
  /* not_started is null when the items file was not read to its end */
  char ns[96] = "not started unknown (the items file was not read to its end)";
  if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(r, "not_started")))
    snprintf(ns, sizeof ns, "%.0f not started", numv(r, "not_started"));
  printf("\nfleet %s %s: %.0f succeeded, %.0f failed, %.0f cancelled, %.0f skipped, %s, in "
         "%.1f s (%.0f run%s)\n",
         strv(r, "fleet_id"), strv(r, "status"), numv(r, "succeeded"), numv(r, "failed"),
         numv(r, "cancelled"), numv(r, "skipped"), ns, numv(r, "duration_ms") / 1000.0,
         numv(r, "runs"), numv(r, "runs") == 1 ? "" : "s");
  return strcmp(strv(r, "status"), "completed") == 0 && numv(r, "failed") == 0 &&
                 numv(r, "cancelled") == 0
             ? 0
             : 1;
}

typedef struct {
  int tty;
  int64_t t0;
  double done0;
  int have0;
  double last_done;
  int64_t last_print;
} progress;

static void show_progress(progress *p, const cJSON *q) {
  double done = numv(q, "done"), running = numv(q, "running"), failed = numv(q, "failed");
  const cJSON *tot = cJSON_GetObjectItemCaseSensitive(q, "total");
  int64_t t = now_ms();
  if (!p->have0) p->done0 = done, p->t0 = t, p->have0 = 1;
  double secs = (double)(t - p->t0) / 1000.0;
  double rate = secs > 0.5 ? (done - p->done0) / secs : 0;
  char total[32] = "?", left[32] = "?";
  if (cJSON_IsNumber(tot)) {
    snprintf(total, sizeof total, "%.0f", tot->valuedouble);
    if (rate > 0) snprintf(left, sizeof left, "%.0f s", (tot->valuedouble - done) / rate);
  }
  if (p->tty) {
    char bar[31];
    int fill = cJSON_IsNumber(tot) && tot->valuedouble > 0 ? (int)(30 * done / tot->valuedouble) : 0;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
    bar[30] = '\0';
    printf("\r[%s] %.0f/%s done, %.0f running, %.0f failed, %.2f items/s, %s left\033[K", bar, done,
           total, running, failed, rate, left);
    fflush(stdout);
    return;
  }
  if (done == p->last_done && t - p->last_print < 30000) return;
  if (done != p->last_done && t - p->last_print < 2000) return;
  p->last_done = done;
  p->last_print = t;
  printf("progress: %.0f/%s done, %.0f running, %.0f failed, %.2f items/s, %s left\n", done, total,
         running, failed, rate, left);
  fflush(stdout);
}

/* Temporal's name of a workflow execution status (WS values). */
static const char *status_name(int st) {
  switch (st) {
  case WS(RUNNING): return "Running";
  case WS(COMPLETED): return "Completed";
  case WS(FAILED): return "Failed";
  case WS(CANCELED): return "Canceled";
  case WS(TERMINATED): return "Terminated";
  case WS(CONTINUED_AS_NEW): return "ContinuedAsNew";
  case WS(TIMED_OUT): return "TimedOut";
  default: return "Unspecified";
  }
}

/* What the service says of the latest run of a workflow id. */
typedef struct {
  int status;      /* WS value */
  char *type;      /* the workflow type's name */
  char *run_id;
  char *task_queue; /* the run's task queue ("" when the service did not say) */
  char *result;    /* Completed: the result JSON */
  char *fail_type; /* closed otherwise: the failure's type, or NULL */
  char *fail_msg;  /* closed otherwise: its message, or NULL */
} fleet_view;

static void view_cleanup(fleet_view *v) {
  free(v->type);
  free(v->run_id);
  free(v->task_queue);
  free(v->result);
  free(v->fail_type);
  free(v->fail_msg);
  memset(v, 0, sizeof *v);
}

/* The result or the failure of a closed run, from its close event, into v. */
static void view_close(const HistoryEvent *ev, fleet_view *v) {
  switch (ev->event_type) {
  case ET(WORKFLOW_EXECUTION_COMPLETED):
    v->result = dbx_payloads_to_json(ev->workflow_execution_completed_event_attributes->result);
    break;
  case ET(WORKFLOW_EXECUTION_FAILED): {
    const Failure *f = ev->workflow_execution_failed_event_attributes->failure;
    v->fail_msg = f && f->message ? dbx_strdup(f->message) : NULL;
    v->fail_type = f && f->application_failure_info && f->application_failure_info->type
                       ? dbx_strdup(f->application_failure_info->type)
                       : NULL;
    break;
  }
  case ET(WORKFLOW_EXECUTION_TERMINATED):
    v->fail_type = dbx_strdup("Terminated");
    v->fail_msg = dbx_strdup(ev->workflow_execution_terminated_event_attributes->reason);
    break;
  case ET(WORKFLOW_EXECUTION_TIMED_OUT):
    v->fail_type = dbx_strdup("TimedOut");
    v->fail_msg = dbx_strdup("the fleet's execution timeout passed");
    break;
  case ET(WORKFLOW_EXECUTION_CANCELED):
    v->fail_type = dbx_strdup("Canceled");
    v->fail_msg = dbx_strdup("the fleet was cancelled before it could end on its own");
    break;
  default: break;
  }
}

/* The latest run of id into v (zeroed; free with view_cleanup): its status,
 * type, run id, and from its close event its result or failure. DBX_OK or
 * the call's error. */
static dbx_err fleet_state(dbx_client *c, const char *id, fleet_view *v, char **err) {
  memset(v, 0, sizeof *v);
  DescribeWorkflowExecutionResponse *d = NULL;
  dbx_err e = dbx_client_describe(c, id, NULL, &d, err);
  if (e != DBX_OK) return e;
  const WorkflowExecutionInfo *i = d->workflow_execution_info;
  v->status = i ? (int)i->status : 0;
  v->type = dbx_strdup(i && i->type && i->type->name ? i->type->name : "");
  v->run_id = i && i->execution ? dbx_strdup(i->execution->run_id) : NULL;
  v->task_queue = dbx_strdup(i && i->task_queue ? i->task_queue : "");
  dbx_client_msg_free(d);
  if (v->status != WS(RUNNING) && v->run_id) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.close_event_only = 1};
    e = dbx_client_get_history(c, id, v->run_id, &ho, &h, err);
    if (e == DBX_OK && h.n > 0) view_close(h.events[h.n - 1], v);
    dbx_client_history_cleanup(&h);
  }
  return e;
}

/* A fleet that closed without a result: its status by name and why, on
 * stderr, or with json a JSON object on stdout. */
static void print_closed(const char *id, const fleet_view *v, int json) {
  if (json) {
    cJSON *o = cJSON_CreateObject(), *er = NULL;
    cJSON_AddStringToObject(o, "fleet_id", id);
    cJSON_AddStringToObject(o, "status", status_name(v->status));
    if (v->fail_type || v->fail_msg) er = cJSON_AddObjectToObject(o, "error");
    if (v->fail_type) cJSON_AddStringToObject(er, "type", v->fail_type);
    if (v->fail_msg) cJSON_AddStringToObject(er, "message", v->fail_msg);
    char *t = cJSON_PrintUnformatted(o);
    if (t) printf("%s\n", t);
    free(t);
    cJSON_Delete(o);
    return;
  }
  fprintf(stderr, "durabox fleet: fleet %s ended %s without a result%s%s%s%s\n", id,
          status_name(v->status), v->fail_type || v->fail_msg ? ": " : "",
          v->fail_type ? v->fail_type : "", v->fail_type && v->fail_msg ? ": " : "",
          v->fail_msg ? v->fail_msg : "");
}

/* The input of the open run of id (without the "state" it carries across
 * runs) into *input (free with cJSON_Delete), and whether a cancel of it was
 * requested. DBX_OK or the call's error. */
static dbx_err open_run(dbx_client *c, const char *id, cJSON **input, int *cancel_requested,
                        char **err) {
  *input = NULL;
  *cancel_requested = 0;
  dbx_client_history h = {0};
  dbx_err e = dbx_client_get_history(c, id, NULL, NULL, &h, err);
  for (size_t i = 0; e == DBX_OK && i < h.n; i++) {
    const HistoryEvent *ev = h.events[i];
    if (ev->event_type == ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED)) *cancel_requested = 1;
    if (ev->event_type != ET(WORKFLOW_EXECUTION_STARTED) || *input) continue;
    char *t = dbx_payloads_to_json(ev->workflow_execution_started_event_attributes->input);
    *input = t ? cJSON_Parse(t) : NULL;
    free(t);
    cJSON_DeleteItemFromObjectCaseSensitive(*input, "state");
  }
  dbx_client_history_cleanup(&h);
  return e;
}

/* The top-level fields in which a and b differ, comma-separated (malloc'd),
 * or NULL when they are equal. */
static char *input_diff(const cJSON *a, const cJSON *b) {
  char *out = NULL;
  for (int pass = 0; pass < 2; pass++) {
    const cJSON *x = pass ? b : a, *y = pass ? a : b, *f;
    cJSON_ArrayForEach(f, x) {
      const cJSON *g = cJSON_GetObjectItemCaseSensitive(y, f->string);
      if ((pass && g) || (g && cJSON_Compare(f, g, 1))) continue;
      char *n = dbx_asprintf("%s%s%s", out ? out : "", out ? ", " : "", f->string);
      free(out);
      out = n;
    }
  }
  return out;
}

/* Follow fleet id until it ends; print the result. Exit status. */
static int follow(dbx_client *c, const char *id, int json, const char *hint) {
  progress p = {.tty = !json && isatty(STDOUT_FILENO), .last_done = -1};
  int cancel_sent = 0, bar = 0, misses = 0;
  for (;;) {
    if (g_stop >= 2) {
      fprintf(stderr, "\ndurabox fleet: left without waiting; the fleet %s\n",
              cancel_sent ? "is being cancelled" : "goes on");
      return 1;
    }
    if (g_stop == 1 && !cancel_sent) {
      char *err = NULL;
      dbx_err e = dbx_client_cancel(c, id, NULL, "durabox fleet run interrupted", &err);
      fprintf(stderr, "\ndurabox fleet: %s; waiting for the running items to stop (again to "
                      "leave at once)\n", e == DBX_OK ? "cancelling the fleet" : "cancel failed");
      free(err);
      cancel_sent = 1;
    }
    char *err = NULL;
    fleet_view v;
    dbx_err e = fleet_state(c, id, &v, &err);
    if (e != DBX_OK) {
      view_cleanup(&v);
      if (++misses < 20) { /* a continue-as-new in between, a busy service */
        free(err);
        pause_ms(250);
        continue;
      }
      dbx_cli_report("reading the fleet", hint, e, err);
      free(err);
      return 1;
    }
    misses = 0;
    free(err);
    if (v.status != WS(RUNNING)) {
      if (bar) printf("\n");
      int rc = 1;
      if (v.result == NULL) {
        print_closed(id, &v, json);
      } else {
        cJSON *r = cJSON_Parse(v.result);
        if (json) printf("%s\n", v.result);
        else if (r) rc = print_result(r);
        if (json && r) rc = strcmp(strv(r, "status"), "completed") == 0 && numv(r, "failed") == 0 ? 0 : 1;
        cJSON_Delete(r);
      }
      view_cleanup(&v);
      return rc;
    }
    view_cleanup(&v);
    char *q = NULL;
    if (!json && dbx_client_query(c, id, NULL, "progress", NULL, &q, NULL) == DBX_OK) {
      cJSON *j = cJSON_Parse(q);
      if (j) show_progress(&p, j), bar = p.tty;
      cJSON_Delete(j);
    }
    free(q);
    pause_ms(p.tty ? 250 : 500);
  }
}

/* ------------------------------------------------------------ run */

/* The input of FILE with --concurrency and an absolute items_file; NULL with
 * a message printed. */
static char *prepare_input(const char *file, int conc) {
  size_t len = 0;
  char *text = dbx_cli_read_file(file, &len);
  if (text == NULL) {
    fprintf(stderr, "durabox fleet run: cannot read %s: %s\n", file, strerror(errno));
    return NULL;
  }
  if (len > FLEET_MAX_FILE_BYTES) {
    fprintf(stderr, "durabox fleet run: %s is over %u bytes: put the items in an items_file\n",
            file, FLEET_MAX_FILE_BYTES);
    free(text);
    return NULL;
  }
  const char *end = NULL;
  cJSON *in = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  size_t at = in ? (size_t)(end - text) : 0;
  while (in && at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\r' || text[at] == '\n')) at++;
  char err[512];
  if (in == NULL || at < len || !cJSON_IsObject(in)) { /* checked whole below, once completed */
    if (in == NULL) /* the CLI's one thread: cJSON's error pointer is ours */
      fprintf(stderr, "durabox fleet run: %s is not valid JSON (near byte %ld)\n", file,
              (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
    else if (at < len)
      fprintf(stderr, "durabox fleet run: %s has data after the JSON document (at byte %zu)\n", file, at);
    else
      fprintf(stderr, "durabox fleet run: %s: not a JSON object\n", file);
    cJSON_Delete(in);
    free(text);
    return NULL;
  }
  free(text);
  if (conc > 0) {
    cJSON_DeleteItemFromObjectCaseSensitive(in, "concurrency");
    cJSON_AddNumberToObject(in, "concurrency", conc);
  }
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(in, "items_file");
  if (cJSON_IsString(f) && f->valuestring[0] != '/') {
    const char *slash = strrchr(file, '/');
    char *dir = slash ? dbx_asprintf("%.*s", (int)(slash - file), file) : dbx_strdup(".");
    char *abs = dir ? realpath(dir, NULL) : NULL;
    char *full = abs ? dbx_asprintf("%s/%s", abs, f->valuestring) : NULL;
    free(dir);
    free(abs);
    if (full == NULL) {
      fprintf(stderr, "durabox fleet run: cannot resolve items_file %s\n", f->valuestring);
      cJSON_Delete(in);
      return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(in, "items_file");
    cJSON_AddStringToObject(in, "items_file", full);
    free(full);
  }
  char *out = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (out && dbx_fleet_validate(out, strlen(out), err, sizeof err) != 0) {
    fprintf(stderr, "durabox fleet run: %s: %s\n", file, err);
    free(out);
    return NULL;
  }
  return out;
}

/* Start the embedded service (and worker) unless conn has an address; the
 * address to use into e->address. 0, or 1 (printed). */
/* The embedded service's store without --db-filename: $DURABOX_HOME/fleet/service,
 * malloc'd (NULL when out of memory). */
static char *fleet_service_default(void) {
  char *home = dbx_cli_home();
  char *db = home ? dbx_asprintf("%s/fleet/service", home) : NULL;
  free(home);
  return db;
}

static int connect_or_embed(const dbx_cli_conn *conn, const char *db, const char *tq, int worker,
                            dbx_embed *e, int *embedded, char **dbdef) {
  memset(e, 0, sizeof *e);
  *embedded = conn->address == NULL;
  if (!*embedded) {
    snprintf(e->address, sizeof e->address, "%s", conn->address);
    return 0;
  }
  if (db == NULL) {
    *dbdef = fleet_service_default();
    if (*dbdef == NULL || dbx_fs_mkdirs(*dbdef, 0700) != DBX_OK) {
      fprintf(stderr, "durabox fleet: cannot create the fleet store %s\n", *dbdef ? *dbdef : "");
      return 1;
    }
    db = *dbdef;
  }
  if (getenv("DURABOX_LOG_LEVEL") == NULL) dbx_log_set_level(DBX_LOG_WARN);
  dbx_embed_opts eo = {.task_queue = tq, .namespace_ = conn->namespace_, .db_path = db,
                       .api_key = conn->api_key, .start_service = 1, .start_worker = worker};
  if (dbx_embed_start(&eo, e) != 0) {
    *embedded = 0;
    return 1;
  }
  return 0;
}

/* The fleet id is open already (a fleet run that ended before its fleet
 * did: killed, or left with a second Ctrl-C): follow it when its input is
 * FILE's (the same as Temporal's USE_EXISTING conflict policy, and a
 * Temporal start never changes a running workflow's input), refuse naming
 * the fields when it differs, and when a cancel is pending (fleet cancel
 * while no worker ran it) follow it to its cancelled end. Exit status. */
static int resume(dbx_client *c, const char *id, const char *input, const char *tq, int json, int embedded,
                  const char *hint) {
  fleet_view v;
  char *err = NULL, *diff = NULL;
  cJSON *open = NULL, *mine = cJSON_Parse(input);
  int rc = 1, cancel = 0;
  dbx_err e = fleet_state(c, id, &v, &err);
  if (e == DBX_OK && strcmp(v.type, "durabox.Fleet") != 0) {
    fprintf(stderr, "durabox fleet run: %s is a running %s workflow, not a durabox.Fleet: choose "
                    "another --id\n", id, v.type);
    goto out;
  }
  if (e == DBX_OK) e = open_run(c, id, &open, &cancel, &err);
  if (e != DBX_OK || open == NULL || mine == NULL) {
    dbx_cli_report("reading the open fleet", hint, e != DBX_OK ? e : DBX_ENOMEM, err);
    goto out;
  }
  /* a worker of this run polls tq: on another queue it would never see the fleet's tasks */
  if (v.task_queue && *v.task_queue && strcmp(v.task_queue, tq) != 0) {
    fprintf(stderr, "durabox fleet run: fleet %s is still open from an earlier fleet run on task queue %s, "
                    "not %s: resume it with --task-queue %s, or cancel it (durabox fleet cancel %s) and run "
                    "again\n", id, v.task_queue, tq, v.task_queue, id);
    rc = 2;
    goto out;
  }
  const char *who = embedded ? "; the embedded worker of this fleet run serves it now" : "";
  if (cancel) {
    fprintf(json ? stderr : stdout, "fleet %s (run %s) is still open from an earlier fleet run, "
            "with a cancel pending (durabox fleet cancel): following it to its end%s\n", id,
            v.run_id ? v.run_id : "", who);
    fflush(stdout);
    rc = follow(c, id, json, hint);
    fprintf(stderr, "durabox fleet run: the cancelled fleet %s has ended; run the command again "
                    "to start it anew\n", id);
    goto out;
  }
  diff = input_diff(open, mine);
  if (diff) {
    fprintf(stderr, "durabox fleet run: fleet %s is still open from an earlier fleet run whose "
                    "input differs from this one in: %s. Resume it with the file and flags it was "
                    "started with, or cancel it (durabox fleet cancel %s) and run again\n", id,
            diff, id);
    rc = 2;
    goto out;
  }
  fprintf(json ? stderr : stdout, "fleet %s (run %s) is still open from an earlier fleet run: "
          "following it%s\n", id, v.run_id ? v.run_id : "", who);
  fflush(stdout);
  rc = follow(c, id, json, hint);
out:
  view_cleanup(&v);
  cJSON_Delete(open);
  cJSON_Delete(mine);
  free(diff);
  free(err);
  return rc;
}

static int fleet_run(int argc, char **argv) {
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const char *file = NULL, *id = NULL, *tq = "durabox", *db = NULL, *sandbox = NULL;
  int conc = 0;
  const dbx_cli_flag fl[] = {
      {"--concurrency", "-c", DBX_CLI_FLAG_INT, &conc, 1, DBX_FLEET_MAX_CONCURRENCY},
      {"--id", "-w", DBX_CLI_FLAG_STR, &id, 0, 0},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &tq, 0, 0},
      {"--db-filename", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
  };
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take("durabox fleet run", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      printf("usage: durabox fleet run FILE [--concurrency C] [--id ID] [--task-queue Q]\n"
             "       [--db-filename DIR] [--sandbox local|daytona] [--output json] [--address A ...]\n"
             "  FILE: a durabox.Fleet input (docs/fleet.md); the id defaults to fleet-<FILE's name>,\n"
             "  so running the same file again skips the items that already succeeded\n");
      return 0;
    }
    if (argv[i][0] == '-' && argv[i][1]) return dbx_cli_flag_unknown("durabox fleet run", argv[i]);
    if (file) return dbx_cli_flag_unknown("durabox fleet run", argv[i]);
    file = argv[i];
  }
  if (file == NULL) {
    fprintf(stderr, "durabox fleet run: FILE is required (a durabox.Fleet input, JSON)\n");
    return 2;
  }
  if (dbx_cli_nonempty("durabox fleet run", "--id", id) != 0 ||
      dbx_cli_nonempty("durabox fleet run", "--task-queue", tq) != 0 ||
      dbx_cli_nonempty("durabox fleet run", "--db-filename", db) != 0 ||
      dbx_cli_sandbox_driver("durabox fleet run", sandbox) != 0)
    return 2;
  char *input = prepare_input(file, conc);
  if (input == NULL) return 2;
  if (dbx_cli_conn_load(&conn) != 0) {
    free(input);
    return 2;
  }
  char *svc = db ? NULL : fleet_service_default();
  int clash = conn.address == NULL && dbx_cli_store_folders_check("durabox fleet run", db ? db : svc, NULL);
  free(svc);
  if (clash) {
    free(input);
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  if (sandbox) setenv("DURABOX_SANDBOX", sandbox, 1);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  char *gen = NULL, *dbdef = NULL, *err = NULL, *rid = NULL;
  if (id == NULL) {
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    const char *dot = strrchr(base, '.');
    id = gen = dbx_asprintf("fleet-%.*s", dot && dot != base ? (int)(dot - base) : (int)strlen(base), base);
  }
  int rc = 1, embedded = 0;
  dbx_embed e;
  dbx_client *c = NULL;
  if (connect_or_embed(&conn, db, tq, 1, &e, &embedded, &dbdef) != 0) goto out;
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  co.address = e.address;
  if (dbx_client_create(&co, &c) != DBX_OK) goto out;
  dbx_client_start_opts so = {.workflow_id = id, .workflow_type = "durabox.Fleet", .task_queue = tq,
                              .input_json = input};
  dbx_err er = dbx_client_start_workflow(c, &so, &rid, &err);
  if (er == DBX_EEXIST) {
    rc = resume(c, id, input, tq, conn.json, embedded, embedded ? NULL : e.address);
    goto out;
  }
  if (er != DBX_OK) {
    dbx_cli_report("starting the fleet", embedded ? NULL : e.address, er, err);
    goto out;
  }
  if (!conn.json) {
    printf("fleet %s (run %s) on %s%s\n", id, rid ? rid : "", e.address, embedded ? " (embedded)" : "");
    fflush(stdout);
  }
  rc = follow(c, id, conn.json, embedded ? NULL : e.address);
out:
  dbx_client_destroy(c);
  if (embedded) dbx_embed_stop(&e, 10000);
  dbx_cli_conn_cleanup(&conn);
  free(input);
  free(gen);
  free(dbdef);
  free(err);
  free(rid);
  return rc;
}

/* ------------------------------------------------------------ status, cancel */

/* Whether a cancel of the open fleet id was requested (0 when unknown). */
static int cancel_pending(dbx_client *c, const char *id) {
  cJSON *in = NULL;
  char *err = NULL;
  int cancel = 0;
  (void)open_run(c, id, &in, &cancel, &err);
  cJSON_Delete(in);
  free(err);
  return cancel;
}

/* fleet cancel of the fleet v says id is. Like `durabox workflow cancel`, a
 * fleet that has already closed is named as such, exit 0: nothing to cancel.
 * Without an address no worker runs the fleet (this process holds its store
 * without one): the request is recorded and the next `fleet run` of the id
 * finishes it, which is what it says. Exit status. */
static int fleet_cancel(dbx_client *c, const char *id, const fleet_view *v, int json,
                        int embedded, const char *hint) {
  if (v->status != WS(RUNNING)) {
    if (json)
      printf("{\"fleet_id\":\"%s\",\"cancel_requested\":false,\"status\":\"%s\"}\n", id,
             status_name(v->status));
    else printf("fleet %s had already closed (%s): nothing to cancel\n", id, status_name(v->status));
    return 0;
  }
  char *err = NULL;
  dbx_err er = dbx_client_cancel(c, id, NULL, "durabox fleet cancel", &err);
  if (er != DBX_OK) {
    dbx_cli_report("cancelling the fleet", hint, er, err);
    free(err);
    return 1;
  }
  free(err);
  if (json)
    printf("{\"fleet_id\":\"%s\",\"cancel_requested\":true,\"worker\":%s}\n", id,
           embedded ? "false" : "true");
  else if (embedded)
    printf("fleet %s: cancel recorded, but no worker runs this fleet now, so nothing stops yet: "
           "the next `durabox fleet run FILE --id %s` finishes the cancel (running items stop, "
           "their sandboxes are deleted) and reports the fleet cancelled\n", id, id);
  else printf("fleet %s: cancel requested (running items stop, their sandboxes are deleted)\n", id);
  return 0;
}

/* fleet status of the fleet v says id is. Exit status: 0 when it could
 * tell, 1 when the fleet closed without a result or its progress is unknown. */
static int fleet_status(dbx_client *c, const char *id, const fleet_view *v, int json,
                        int embedded) {
  if (v->result) {
    cJSON *r = cJSON_Parse(v->result);
    int rc = json ? 0 : r ? print_result(r) : 1;
    if (json) printf("%s\n", v->result);
    cJSON_Delete(r);
    return rc;
  }
  if (v->status != WS(RUNNING)) {
    print_closed(id, v, json);
    return 1;
  }
  if (embedded) { /* this process holds the store: no fleet run, so no worker */
    int cancel = cancel_pending(c, id);
    if (json)
      printf("{\"fleet_id\":\"%s\",\"status\":\"Running\",\"worker\":false,\"cancel_requested\":%s,"
             "\"resume\":\"durabox fleet run FILE --id %s\"}\n", id, cancel ? "true" : "false", id);
    else
      printf("fleet %s is open, but no worker runs it: the fleet run that started it ended before "
             "it did%s. Resume it with `durabox fleet run FILE --id %s` (the same FILE)\n", id,
             cancel ? ", and a cancel is pending, which that run finishes" : "", id);
    return 0;
  }
  char *q = NULL, *err = NULL;
  dbx_err er = dbx_client_query(c, id, NULL, "progress", NULL, &q, &err);
  if (er != DBX_OK) {
    fprintf(stderr, "durabox fleet status: fleet %s is Running, its progress unknown (is a worker "
                    "polling its task queue?): %s\n", id, err ? err : dbx_strerror(er));
    free(err);
    return 1;
  }
  cJSON *j = cJSON_Parse(q);
  const cJSON *tot = cJSON_GetObjectItem(j, "total");
  char total[32] = "?";
  if (cJSON_IsNumber(tot)) snprintf(total, sizeof total, "%.0f", tot->valuedouble);
  if (json) printf("%s\n", q);
  else if (j)
    printf("fleet %s running: %.0f/%s done, %.0f running, %.0f succeeded, %.0f failed, %.0f "
           "skipped (run %.0f)\n", id, numv(j, "done"), total, numv(j, "running"),
           numv(j, "succeeded"), numv(j, "failed"), numv(j, "skipped"), numv(j, "runs"));
  cJSON_Delete(j);
  free(q);
  free(err);
  return 0;
}

static int fleet_other(const char *verb, int argc, char **argv) {
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const char *id = NULL, *db = NULL;
  const dbx_cli_flag fl[] = {{"--db-filename", NULL, DBX_CLI_FLAG_STR, &db, 0, 0}};
  char cmd[64];
  snprintf(cmd, sizeof cmd, "durabox fleet %s", verb);
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take(cmd, fl, 1, argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      printf("usage: %s ID [--output json] [--address A ...] [--db-filename DIR]\n"
             "  (no address: the store of `durabox fleet run`'s embedded service)\n", cmd);
      return 0;
    }
    if ((argv[i][0] == '-' && argv[i][1]) || id) return dbx_cli_flag_unknown(cmd, argv[i]);
    id = argv[i];
  }
  if (id == NULL) {
    fprintf(stderr, "%s: ID is required\n", cmd);
    return 2;
  }
  if (!*id) {
    fprintf(stderr, "%s: ID is empty\n", cmd);
    return 2;
  }
  if (dbx_cli_nonempty(cmd, "--db-filename", db) != 0) return 2;
  if (dbx_cli_conn_load(&conn) != 0) return 2;
  int rc = 1, embedded = 0;
  char *dbdef = NULL, *err = NULL;
  fleet_view v = {0};
  dbx_embed e;
  dbx_client *c = NULL;
  if (connect_or_embed(&conn, db, "durabox", 0, &e, &embedded, &dbdef) != 0) goto out;
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  co.address = e.address;
  if (dbx_client_create(&co, &c) != DBX_OK) goto out;
  const char *hint = embedded ? NULL : e.address;
  dbx_err er = fleet_state(c, id, &v, &err);
  if (er != DBX_OK) {
    dbx_cli_report("reading the fleet", hint, er, err);
    if (conn.json) dbx_cli_json_error(dbx_strerror(er), err ? err : dbx_strerror(er));
    goto out;
  }
  if (strcmp(v.type, "durabox.Fleet") != 0) {
    fprintf(stderr, "%s: %s is a %s run, not a durabox.Fleet (see durabox workflow describe -w "
                    "%s)\n", cmd, id, v.type, id);
    if (conn.json) {
      char *m = dbx_asprintf("%s is a %s run, not a durabox.Fleet", id, v.type);
      dbx_cli_json_error("NotAFleet", m ? m : "not a durabox.Fleet");
      free(m);
    }
    goto out;
  }
  if (strcmp(verb, "cancel") == 0) rc = fleet_cancel(c, id, &v, conn.json, embedded, hint);
  else rc = fleet_status(c, id, &v, conn.json, embedded);
out:
  dbx_client_destroy(c);
  if (embedded) dbx_embed_stop(&e, 1000);
  dbx_cli_conn_cleanup(&conn);
  view_cleanup(&v);
  free(dbdef);
  free(err);
  return rc;
}

int dbx_cli_fleet(int argc, char **argv) {
  if (argc < 2 || dbx_cli_flag_is_help(argv[1])) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: durabox fleet run FILE [--concurrency C] | status ID | cancel ID\n");
    return argc < 2 ? 2 : 0;
  }
  if (strcmp(argv[1], "run") == 0) return fleet_run(argc - 1, argv + 1);
  if (strcmp(argv[1], "status") == 0) return fleet_other("status", argc - 1, argv + 1);
  if (strcmp(argv[1], "cancel") == 0) return fleet_other("cancel", argc - 1, argv + 1);
  fprintf(stderr, "durabox fleet: unknown verb '%s' (run, status, cancel)\n", argv[1]);
  return 2;
}
