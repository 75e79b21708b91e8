/* durabox server start-dev: placeholder until service/ lands. */
#include <stdio.h>

#include "cli/cli.h"

int dbx_cli_server(int argc, char **argv) {
  (void)argc; (void)argv;
  fprintf(stderr, "durabox server: not built yet\n");
  return 1;
}
