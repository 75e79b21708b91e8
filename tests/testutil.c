/* Test helpers (see testutil.h). */
#define _GNU_SOURCE /* memmem */
#include "tests/testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int dbx_test_tree_holds(const char *path, const char *needle) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return 0;
  if (S_ISREG(sb.st_mode)) {
    char *buf = NULL;
    size_t n = 0;
    int found = dbx_fs_read_all(path, &buf, &n) == DBX_OK && memmem(buf, n, needle, strlen(needle));
    free(buf);
    return found;
  }
  if (!S_ISDIR(sb.st_mode)) return 0;
  int found = 0;
  DIR *d = opendir(path);
  for (struct dirent *e = d ? readdir(d) : NULL; e && !found; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    char *p = malloc(len);
    if (p == NULL) break;
    snprintf(p, len, "%s/%s", path, e->d_name);
    found = dbx_test_tree_holds(p, needle);
    free(p);
  }
  if (d) closedir(d);
  return found;
}

const char *dbx_test_bin(void) {
  const char *b = getenv("DBX_BIN");
  if (b == NULL || *b == '\0') fail_msg("DBX_BIN is not set: run the tests through ctest");
  return b;
}

long dbx_test_store_rss_kib(const char *dir) {
  char real[4096], path[4200];
  if (!realpath(dir, real)) fail_msg("realpath %s failed", dir);
  snprintf(path, sizeof path, "%s/data.mdb", real);
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) fail_msg("cannot read /proc/self/smaps");
  char line[4096];
  int in = 0;
  long kib = 0, n;
  size_t pl = strlen(path);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line: is it path's? */
      size_t ll = strcspn(line, "\n");
      line[ll] = 0;
      in = ll > pl && strcmp(line + ll - pl, path) == 0 && line[ll - pl - 1] == ' ';
    } else if (in && sscanf(line, "Rss: %ld kB", &n) == 1) {
      kib += n;
    }
  }
  fclose(f);
  return kib;
}
