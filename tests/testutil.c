/* Test helpers (see testutil.h). */
#define _XOPEN_SOURCE 700
#include "tests/testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path) == 0 ? 0 : 0;
}

void dbx_test_rmrf(const char *path) {
  if (path) nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *dbx_test_bin(void) {
  const char *b = getenv("DBX_BIN");
  if (b == NULL || *b == '\0') fail_msg("DBX_BIN is not set: run the tests through ctest");
  return b;
}
