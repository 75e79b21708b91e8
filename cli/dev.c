/* durabox dev: the embedded service and a worker in one process, serving
 * Temporal's API on 127.0.0.1:7233 (durabox.Script and the sandbox
 * activities on task queue "durabox" by default). Stops on SIGINT/SIGTERM:
 * running activities get 10 s to finish. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/embed.h"
#include "rpc/rpc.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

int dbx_cli_dev(int argc, char **argv) {
  dbx_embed_opts o = {.port = 7233, .task_queue = "durabox", .start_service = 1, .start_worker = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **dst = NULL;
    if (strcmp(a, "--ip") == 0) dst = &o.ip;
    else if (strcmp(a, "--db-filename") == 0) dst = &o.db_path;
    else if (strcmp(a, "--worker-db") == 0) dst = &o.worker_db;
    else if (strcmp(a, "--task-queue") == 0) dst = &o.task_queue;
    else if (strcmp(a, "--namespace") == 0) dst = &o.namespace_;
    else if (strcmp(a, "--port") == 0 || strcmp(a, "--log-level") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "durabox dev: %s needs a value\n", a);
        return 2;
      }
      const char *v = argv[++i];
      if (strcmp(a, "--port") == 0) {
        char *end = NULL;
        long p = strtol(v, &end, 10);
        if (end == v || *end || p < 0 || p > 65535) {
          fprintf(stderr, "durabox dev: --port %s is not a port number\n", v);
          return 2;
        }
        o.port = (int)p;
      } else {
        dbx_log_level l;
        if (dbx_log_level_parse(v, &l) != 0) {
          fprintf(stderr, "durabox dev: --log-level %s: use debug, info, warn or error\n", v);
          return 2;
        }
        dbx_log_set_level(l);
      }
      continue;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: durabox dev [--ip A] [--port N] [--db-filename DIR] [--worker-db DIR] [--task-queue Q]\n"
             "                   [--namespace NS] [--log-level L]\n");
      return 0;
    } else {
      fprintf(stderr, "durabox dev: unknown flag '%s'\n", a);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "durabox dev: %s needs a value\n", a);
      return 2;
    }
    *dst = argv[++i];
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
  while (!stop_requested) pause();
  fprintf(stderr, "durabox dev: stopping\n");
  dbx_embed_stop(&e, 10000);
  return 0;
}
