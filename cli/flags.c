/* The shared flag parser (see flags.h). */
#include "cli/flags.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dbx_cli_flag_number(const char *cmd, const char *flag, const char *v, int int_only, double min,
                        double max, double *out) {
  char *end = NULL;
  double d;
  errno = 0;
  if (int_only) {
    long long x = strtoll(v, &end, 10);
    d = (double)x;
  } else {
    d = strtod(v, &end);
  }
  if (*v == '\0' || end == v || *end != '\0' || (!int_only && !isfinite(d))) {
    fprintf(stderr, "%s: %s '%s' is not a%s number\n", cmd, flag, v, int_only ? " whole" : "");
    return -1;
  }
  if (errno == ERANGE || d < min || d > max) {
    fprintf(stderr, "%s: %s %s is out of range (%.15g-%.15g)\n", cmd, flag, v, min, max);
    return -1;
  }
  *out = d;
  return 0;
}

/* argv[*i] names flag f: by its name alone, by "name=value" (*eq set to the
 * value), or by its alias alone. */
static int names(const dbx_cli_flag *f, const char *a, const char **eq) {
  size_t n = strlen(f->name);
  *eq = NULL;
  if (strncmp(a, f->name, n) == 0 && (a[n] == '\0' || a[n] == '=')) {
    if (a[n] == '=') *eq = a + n + 1;
    return 1;
  }
  return f->alias && strcmp(a, f->alias) == 0;
}

int dbx_cli_flag_take(const char *cmd, const dbx_cli_flag *t, size_t n, int argc, char **argv, int *i) {
  const char *a = argv[*i], *v = NULL;
  size_t k = 0;
  while (k < n && !names(&t[k], a, &v)) k++;
  if (k == n) return 0;
  const dbx_cli_flag *f = &t[k];
  if (f->kind == DBX_CLI_FLAG_BOOL) {
    if (v) {
      fprintf(stderr, "%s: %s takes no value\n", cmd, f->name);
      return -1;
    }
    *(int *)f->dst = 1;
    return 1;
  }
  if (v == NULL) {
    if (*i + 1 >= argc) {
      fprintf(stderr, "%s: %s needs a value\n", cmd, f->name);
      return -1;
    }
    v = argv[++*i];
  }
  if (f->kind == DBX_CLI_FLAG_STR) {
    *(const char **)f->dst = v;
    return 1;
  }
  double d = 0;
  if (dbx_cli_flag_number(cmd, f->name, v, f->kind == DBX_CLI_FLAG_INT, f->min, f->max, &d) != 0) return -1;
  if (f->kind == DBX_CLI_FLAG_INT)
    *(int *)f->dst = (int)d;
  else
    *(double *)f->dst = d;
  return 1;
}

int dbx_cli_flag_unknown(const char *cmd, const char *arg) {
  if (arg[0] == '-')
    fprintf(stderr, "%s: unknown flag '%s'\n", cmd, arg);
  else
    fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, arg);
  return 2;
}

int dbx_cli_flag_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }
