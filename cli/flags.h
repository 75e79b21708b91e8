/* One flag parser for every durabox subcommand: a table of flags per command,
 * each written `--name value` or `--name=value` (a short alias such as -n
 * takes `-n value` only). Numeric values are parsed whole (strtoll/strtod)
 * and range-checked; errors name the command, the flag and the value.
 * One thread; no allocation; values are borrowed from argv. */
#ifndef DBX_CLI_FLAGS_H
#define DBX_CLI_FLAGS_H

#include <stddef.h>

typedef enum {
  DBX_CLI_FLAG_STR,  /* dst: const char ** */
  DBX_CLI_FLAG_BOOL, /* dst: int *, set to 1; takes no value */
  DBX_CLI_FLAG_INT,  /* dst: int *; min..max inclusive */
  DBX_CLI_FLAG_NUM,  /* dst: double *; min..max inclusive */
} dbx_cli_flag_kind;

typedef struct {
  const char *name;  /* "--activity-slots" */
  const char *alias; /* "-n", or NULL */
  dbx_cli_flag_kind kind;
  void *dst;
  double min, max;   /* numeric kinds only */
} dbx_cli_flag;

/* If argv[*i] is one of the n flags of t, store its value, advance *i past
 * it and return 1; 0 when it is none of them (nothing printed); -1 with one
 * line printed to stderr ("<cmd>: --port needs a value", "<cmd>: --port
 * 'abc' is not a number", "... is out of range (1-65535)", "<cmd>: --tls
 * takes no value") when it is one but its value is missing or bad. */
int dbx_cli_flag_take(const char *cmd, const dbx_cli_flag *t, size_t n, int argc, char **argv, int *i);

/* Parse all of v as a number in min..max: 0 and *out, or -1 with a line
 * printed naming cmd, flag and v. int_only refuses fractions. */
int dbx_cli_flag_number(const char *cmd, const char *flag, const char *v, int int_only, double min,
                        double max, double *out);

/* Print "<cmd>: unknown flag '<arg>'" (arg starts with '-') or "<cmd>:
 * unexpected argument '<arg>'" and return 2, the usage exit status. */
int dbx_cli_flag_unknown(const char *cmd, const char *arg);

/* 1 when arg is --help or -h. */
int dbx_cli_flag_is_help(const char *arg);

#endif
