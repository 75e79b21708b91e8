/* libFuzzer harness: the CLI's flag parser (cli/flags.h), as every durabox
 * subcommand drives it. The input is an argv: arguments separated by NUL
 * bytes (up to 64). They are parsed against a table with every flag kind
 * and the ranges the commands use (cli/dev.c's --port with its alias,
 * cli/worker.c's --activity-slots, cli/run.c's --pickup-timeout, a bool),
 * in the commands' loop: a taken flag, --help, or an unknown argument.
 * Every argument is also parsed as a number both ways. A result must be
 * 1 (taken: the index moved forward, the value within its range), 0 or -1;
 * never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/flags.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* The parser's one-line complaints go to stdio's stderr: point that stream
 * at /dev/null (a line per input would slow the run to a crawl). File
 * descriptor 2 stays as it was, so libFuzzer's and the sanitizers' reports,
 * which write to it directly, still show. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  FILE *null = fopen("/dev/null", "w");
  if (null) stderr = null;
  return 0;
}

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[MAX_ARGS + 1];
  int argc = 0;
  argv[argc++] = "durabox-fuzz";
  for (size_t at = 0; at <= size && argc < MAX_ARGS; at += strlen(buf + at) + 1) argv[argc++] = buf + at;
  argv[argc] = NULL;

  const char *ip = NULL, *db = NULL;
  int port = -1, slots = -1, tls = 0;
  double pickup = -1;
  const dbx_cli_flag fl[] = {
      {"--ip", NULL, DBX_CLI_FLAG_STR, &ip, 0, 0},
      {"--port", "-p", DBX_CLI_FLAG_INT, &port, 0, 65535},
      {"--db-filename", "-f", DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--activity-slots", NULL, DBX_CLI_FLAG_INT, &slots, 1, 4096},
      {"--pickup-timeout", NULL, DBX_CLI_FLAG_NUM, &pickup, 0, 86400},
      {"--tls", NULL, DBX_CLI_FLAG_BOOL, &tls, 0, 0},
  };
  for (int i = 1; i < argc; i++) {
    int before = i;
    int r = dbx_cli_flag_take("durabox fuzz", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < -1 || r > 1 || i < before || i >= argc) abort();
    if (r < 0) break;
    if (r > 0) continue;
    if (i != before) abort(); /* not a flag of the table: nothing consumed */
    if (dbx_cli_flag_is_help(argv[i])) break;
    if (dbx_cli_flag_unknown("durabox fuzz", argv[i]) != 2) abort();
    break;
  }
  if (port != -1 && (port < 0 || port > 65535)) abort();
  if (slots != -1 && (slots < 1 || slots > 4096)) abort();
  if (pickup != -1 && !(pickup >= 0 && pickup <= 86400)) abort();
  if (tls != 0 && tls != 1) abort();
  for (int i = 1; i < argc; i++) {
    double d = 0;
    if (dbx_cli_flag_number("durabox fuzz", "--n", argv[i], 1, -2147483648.0, 2147483647.0, &d) == 0 &&
        (d < -2147483648.0 || d > 2147483647.0))
      abort();
    if (dbx_cli_flag_number("durabox fuzz", "--x", argv[i], 0, -1e300, 1e300, &d) == 0 &&
        !(d >= -1e300 && d <= 1e300))
      abort();
  }
  free(buf);
  return 0;
}
