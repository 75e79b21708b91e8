/* durabox: process-wide setup, then dispatch the first word to its command
 * group. Process-wide state is set up here and only here, before any thread
 * starts: SIGPIPE ignored (a peer closing a socket or pipe is an error
 * return, never a signal), failpoints from the environment, gRPC core. The
 * subcommands assume all three. First of all, a re-executed detached-command
 * supervisor (activities/local.h) is caught and never reaches the rest. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activities/local.h"
#include "base/failpoint.h"
#include "cli/cli.h"
#include "cli/fleet.h"
#include "rpc/rpc.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: durabox <command> [flags]\n"
          "\n"
          "commands:\n"
          "  run FILE           run the workflow in FILE and follow it (embedded service when no address;\n"
          "                     --session S: the next turn of session S, in its last completed turn's sandbox)\n"
          "  dev                embedded service + worker in one process\n"
          "  server start-dev   run the embedded workflow service (Temporal's dev-server flags)\n"
          "  worker             poll a Temporal-compatible service for durabox workflows\n"
          "  replay             replay a recorded run offline and check determinism\n"
          "  workflow ...       start|execute|show|describe|list|result|query|signal|cancel|terminate|reset|fork|fork-points\n"
          "                     (start|execute --session S: the next turn of session S)\n"
          "  approval ...       list|grant|deny: decide a step an agent holds; let a refused at_most_once repeat run\n"
          "  sandbox ...        list|rm|gc|snapshots|rm-snapshot: the local sandboxes and snapshots, their\n"
          "                     owner runs, orphans\n"
          "  fleet ...          run FILE|status ID|cancel ID: one sandbox job over many items\n"
          "  version            print the version\n");
}

static int dispatch(int argc, char **argv) {
  const char *cmd = argv[1];
  if (strcmp(cmd, "server") == 0) return dbx_cli_server(argc - 1, argv + 1);
  if (strcmp(cmd, "worker") == 0) return dbx_cli_worker(argc - 1, argv + 1);
  if (strcmp(cmd, "replay") == 0) return dbx_cli_replay(argc - 1, argv + 1);
  if (strcmp(cmd, "workflow") == 0) return dbx_cli_workflow(argc - 1, argv + 1);
  if (strcmp(cmd, "dev") == 0) return dbx_cli_dev(argc - 1, argv + 1);
  if (strcmp(cmd, "approval") == 0) return dbx_cli_approval(argc - 1, argv + 1);
  if (strcmp(cmd, "run") == 0) return dbx_cli_run(argc - 1, argv + 1);
  if (strcmp(cmd, "sandbox") == 0) return dbx_cli_sandbox(argc - 1, argv + 1);
  if (strcmp(cmd, "fleet") == 0) return dbx_cli_fleet(argc - 1, argv + 1);
  fprintf(stderr, "durabox: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}

int main(int argc, char **argv) {
  /* a detached command's supervisor (activities/local.h): before any setup */
  dbx_local_supervisor_main(argc, argv);
  dbx_worker_cap_malloc_arenas(); /* before any thread: worker/worker.h */
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  char *fp_err = NULL;
  if (dbx_failpoint_init_from_env(&fp_err) != DBX_OK) { /* fault harness: tests/faults/ */
    fprintf(stderr, "durabox: DURABOX_FAILPOINTS: %s\n", fp_err ? fp_err : "out of memory");
    free(fp_err);
    return 2;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    if (argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
      printf("usage: durabox version   (prints durabox's version)\n");
      return 0;
    }
    if (argc > 2) {
      fprintf(stderr, "durabox %s: takes no arguments ('%s')\n", cmd, argv[2]);
      return 2;
    }
    printf("durabox %s\n", dbx_cli_version());
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  dbx_rpc_global_init();
  int rc = dispatch(argc, argv);
  dbx_rpc_global_shutdown();
  return rc;
}
