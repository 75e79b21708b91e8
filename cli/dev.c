/* durabox dev: the embedded service and a worker in one process, serving
 * Temporal's API on 127.0.0.1:7233 (durabox.Script and the sandbox
 * activities on task queue "durabox" by default), and Temporal's Web UI on
 * --ui-port (default the gRPC port + 1000: 8233) unless --headless
 * (cli/ui.h). Stops on SIGINT/SIGTERM: running activities get 10 s to
 * finish. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/embed.h"
#include "cli/flags.h"
#include "cli/ui.h"
#include "rpc/rpc.h"
#include "worker/worker.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

int dbx_cli_dev(int argc, char **argv) {
  dbx_embed_opts o = {.port = 7233, .task_queue = "durabox", .start_service = 1, .start_worker = 1};
  const char *level = NULL, *sandbox = NULL, *ui_ip = NULL;
  int headless = 0, ui_port = 0;
  double retention_h = -1; /* unset: the worker's default */
  const dbx_cli_flag fl[] = {
      {"--ip", NULL, DBX_CLI_FLAG_STR, &o.ip, 0, 0},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
      {"--port", "-p", DBX_CLI_FLAG_INT, &o.port, 0, 65535},
      {"--db-filename", "-f", DBX_CLI_FLAG_STR, &o.db_path, 0, 0},
      {"--worker-db", NULL, DBX_CLI_FLAG_STR, &o.worker_db, 0, 0},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &o.task_queue, 0, 0},
      {"--namespace", "-n", DBX_CLI_FLAG_STR, &o.namespace_, 0, 0},
      {"--log-level", NULL, DBX_CLI_FLAG_STR, &level, 0, 0},
      {"--headless", NULL, DBX_CLI_FLAG_BOOL, &headless, 0, 0},
      {"--ui-port", NULL, DBX_CLI_FLAG_INT, &ui_port, 0, 65535},
      {"--ui-ip", NULL, DBX_CLI_FLAG_STR, &ui_ip, 0, 0},
      {"--store-retention-hours", NULL, DBX_CLI_FLAG_NUM, &retention_h, 0, 87600},
  };
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_flag_take("durabox dev", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      printf("usage: durabox dev [--ip A] [--port N] [--db-filename DIR] [--worker-db DIR] [--task-queue Q]\n"
             "                   [--namespace NS] [--log-level L] [--sandbox local|daytona]\n"
             "                   [--ui-port N] [--ui-ip A] [--headless] [--store-retention-hours H]\n"
             "                   (--flag value or --flag=value)\n"
             DBX_CLI_RETENTION_USAGE
             "  without --db-filename the service's store is temporary: workflows are gone when it stops\n"
             "  Temporal's Web UI runs on --ui-port (default: the gRPC port + 1000) unless --headless\n");
      return 0;
    }
    return dbx_cli_flag_unknown("durabox dev", argv[i]);
  }
  if (dbx_cli_nonempty("durabox dev", "--task-queue", o.task_queue) != 0 ||
      dbx_cli_nonempty("durabox dev", "--namespace", o.namespace_) != 0 ||
      dbx_cli_nonempty("durabox dev", "--db-filename", o.db_path) != 0 ||
      dbx_cli_nonempty("durabox dev", "--worker-db", o.worker_db) != 0 ||
      dbx_cli_store_folders_check("durabox dev", o.db_path, o.worker_db) != 0 ||
      dbx_cli_sandbox_driver("durabox dev", sandbox) != 0)
    return 2;
  o.store_retention_ms = dbx_cli_store_retention_ms(retention_h);
  if (sandbox) setenv("DURABOX_SANDBOX", sandbox, 1); /* the driver choice, read by cli/kit.c */
  dbx_log_level l = DBX_LOG_INFO;
  if (level) {
    if (dbx_log_level_parse(level, &l) != 0) {
      fprintf(stderr, "durabox dev: --log-level %s: use debug, info, warn or error\n", level);
      return 2;
    }
    dbx_log_set_level(l);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  dbx_embed e;
  if (dbx_embed_start(&o, &e) != 0) {
    return 1;
  }
  fprintf(stderr, "durabox dev: service on %s, worker on task queue %s (Ctrl-C stops)\n", e.address, o.task_queue);
  dbx_cli_ui *ui = NULL;
  if (!headless) {
    dbx_cli_ui_opts uo = {.grpc_ip = o.ip, .grpc_port = dbx_service_port(e.svc), .ui_ip = ui_ip,
                          .ui_port = ui_port, .who = "durabox dev", .verbose = l == DBX_LOG_DEBUG};
    ui = dbx_cli_ui_start(&uo);
    if (ui) fprintf(stderr, "durabox dev: Temporal's Web UI on %s\n", dbx_cli_ui_url(ui));
  }
  if (o.db_path)
    fprintf(stderr, "durabox dev: service store %s\n", o.db_path);
  else
    fprintf(stderr, "durabox dev: the service store is temporary: workflows and their history are gone when "
                    "this process stops (--db-filename DIR keeps them)\n");
  while (!stop_requested) pause();
  fprintf(stderr, "durabox dev: stopping\n");
  dbx_worker_stats ws;
  memset(&ws, 0, sizeof ws);
  if (e.worker) dbx_worker_get_stats(e.worker, &ws);
  dbx_cli_ui_stop(ui);
  dbx_embed_stop(&e, 10000);
  if (ws.activities_in_flight > 0)
    /* by design: a stopping worker leaves a step's command running for the next worker to re-attach */
    fprintf(stderr,
            "durabox dev: %llu activit%s still ran; a command a step started keeps running in its sandbox for "
            "the next worker to re-attach to%s (`durabox sandbox list` shows it busy, `durabox sandbox rm ID` "
            "stops it)\n",
            (unsigned long long)ws.activities_in_flight, ws.activities_in_flight == 1 ? "y" : "ies",
            o.db_path ? "" : "; with this temporary store nothing will");
  return 0;
}
