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
 * Exit status: 0 when every item succeeded or was skipped, 1 otherwise, 2 on
 * usage or input errors. */
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

/* The latest run's status (WS values), and its result JSON when completed
 * (*result malloc'd). DBX_OK or the call's error. */
static dbx_err fleet_state(dbx_client *c, const char *id, int *status, char **result, char **err) {
  *result = NULL;
  DescribeWorkflowExecutionResponse *d = NULL;
  dbx_err e = dbx_client_describe(c, id, NULL, &d, err);
  if (e != DBX_OK) return e;
  *status = d->workflow_execution_info ? (int)d->workflow_execution_info->status : 0;
  char *rid = d->workflow_execution_info && d->workflow_execution_info->execution
                  ? dbx_strdup(d->workflow_execution_info->execution->run_id)
                  : NULL;
  dbx_client_msg_free(d);
  if (*status == WS(COMPLETED)) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.close_event_only = 1};
    e = dbx_client_get_history(c, id, rid, &ho, &h, err);
    if (e == DBX_OK && h.n > 0 && h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_COMPLETED))
      *result = dbx_payloads_to_json(h.events[h.n - 1]->workflow_execution_completed_event_attributes->result);
    dbx_client_history_cleanup(&h);
  }
  free(rid);
  return e;
}

/* Follow fleet id until it ends; print the result. Exit status. */
static int follow(dbx_client *c, const char *id, int json, const char *hint) {
  progress p = {.tty = !json && isatty(STDOUT_FILENO), .last_done = -1};
  int cancel_sent = 0, bar = 0, status = 0, misses = 0;
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
    char *result = NULL, *err = NULL;
    dbx_err e = fleet_state(c, id, &status, &result, &err);
    if (e != DBX_OK) {
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
    if (status != WS(RUNNING)) {
      if (bar) printf("\n");
      if (result == NULL) {
        fprintf(stderr, "durabox fleet: %s ended without a result (status %d)\n", id, status);
        return 1;
      }
      cJSON *r = cJSON_Parse(result);
      int rc = 1;
      if (json) printf("%s\n", result);
      else if (r) rc = print_result(r);
      if (json && r) rc = strcmp(strv(r, "status"), "completed") == 0 && numv(r, "failed") == 0 ? 0 : 1;
      cJSON_Delete(r);
      free(result);
      return rc;
    }
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
  cJSON *in = cJSON_ParseWithLength(text, len);
  char err[512];
  if (!cJSON_IsObject(in)) { /* checked whole below, once completed */
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
static int connect_or_embed(const dbx_cli_conn *conn, const char *db, const char *tq, int worker,
                            dbx_embed *e, int *embedded, char **dbdef) {
  memset(e, 0, sizeof *e);
  *embedded = conn->address == NULL;
  if (!*embedded) {
    snprintf(e->address, sizeof e->address, "%s", conn->address);
    return 0;
  }
  if (db == NULL) {
    char *home = dbx_cli_home();
    *dbdef = home ? dbx_asprintf("%s/fleet/service", home) : NULL;
    free(home);
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
  char *input = prepare_input(file, conc);
  if (input == NULL) return 2;
  if (dbx_cli_conn_load(&conn) != 0) {
    free(input);
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
  if (dbx_cli_conn_load(&conn) != 0) return 2;
  int rc = 1, embedded = 0, status = 0;
  char *dbdef = NULL, *err = NULL, *result = NULL, *q = NULL;
  dbx_embed e;
  dbx_client *c = NULL;
  if (connect_or_embed(&conn, db, "durabox", 0, &e, &embedded, &dbdef) != 0) goto out;
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  co.address = e.address;
  if (dbx_client_create(&co, &c) != DBX_OK) goto out;
  const char *hint = embedded ? NULL : e.address;
  if (strcmp(verb, "cancel") == 0) {
    dbx_err er = dbx_client_cancel(c, id, NULL, "durabox fleet cancel", &err);
    if (er != DBX_OK) {
      dbx_cli_report("cancelling the fleet", hint, er, err);
      goto out;
    }
    if (conn.json) printf("{\"fleet_id\":\"%s\",\"cancel_requested\":true}\n", id);
    else printf("fleet %s: cancel requested (running items stop, their sandboxes are deleted)\n", id);
    rc = 0;
    goto out;
  }
  dbx_err er = fleet_state(c, id, &status, &result, &err);
  if (er != DBX_OK) {
    dbx_cli_report("reading the fleet", hint, er, err);
    goto out;
  }
  if (result) {
    cJSON *r = cJSON_Parse(result);
    if (conn.json) printf("%s\n", result), rc = 0;
    else if (r) rc = print_result(r);
    cJSON_Delete(r);
  } else if (status == WS(RUNNING) && dbx_client_query(c, id, NULL, "progress", NULL, &q, &err) == DBX_OK) {
    cJSON *j = cJSON_Parse(q);
    const cJSON *tot = cJSON_GetObjectItem(j, "total");
    char total[32] = "?";
    if (cJSON_IsNumber(tot)) snprintf(total, sizeof total, "%.0f", tot->valuedouble);
    if (conn.json) printf("%s\n", q);
    else if (j)
      printf("fleet %s running: %.0f/%s done, %.0f running, %.0f succeeded, %.0f failed, %.0f "
             "skipped (run %.0f)\n", id, numv(j, "done"), total, numv(j, "running"),
             numv(j, "succeeded"), numv(j, "failed"), numv(j, "skipped"), numv(j, "runs"));
    cJSON_Delete(j);
    rc = 0;
  } else {
    printf("fleet %s: status %d, no result\n", id, status);
  }
out:
  dbx_client_destroy(c);
  if (embedded) dbx_embed_stop(&e, 1000);
  dbx_cli_conn_cleanup(&conn);
  free(dbdef);
  free(err);
  free(result);
  free(q);
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
