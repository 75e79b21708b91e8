/* Test helpers (see testutil.h). */
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"

char *dbx_test_tmpdir(const char *prefix) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || *base == '\0') base = "/tmp";
  size_t n = strlen(base) + strlen(prefix) + 16;
  char *p = malloc(n);
  if (p == NULL) abort();
  snprintf(p, n, "%s/%s.XXXXXX", base, prefix);
  if (mkdtemp(p) == NULL) abort();
  return p;
}

void dbx_test_rmrf(const char *path) {
  if (path) dbx_fs_remove_tree(path);
}

const char *dbx_test_bin(void) {
  const char *b = getenv("DBX_BIN");
  if (b == NULL || *b == '\0') fail_msg("DBX_BIN is not set: run the tests through ctest");
  return b;
}
