/* A main for the harnesses outside libFuzzer: the normal and ASan builds
 * (gcc) link each harness with this file instead of -fsanitize=fuzzer and
 * replay the inputs named on the command line (files, or directories of
 * them) once each, in order, as libFuzzer's own replay does; so the
 * regression inputs of tests/fuzz/regress/ and the seeds run in every build
 * of the test suite, under ASan + UBSan in build-asan and under valgrind if
 * wanted. Exit status 0 when every input ran (a failing input aborts). */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max);

/* Referenced by the custom mutators, never called when only replaying. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max) {
  (void)data, (void)max;
  return size;
}

static int run_file(const char *path) {
  char *buf = NULL;
  size_t len = 0;
  if (dbx_fs_read_all(path, &buf, &len) != DBX_OK) {
    fprintf(stderr, "replay: cannot read %s\n", path);
    return -1;
  }
  uint8_t *exact = malloc(len ? len : 1); /* exactly len bytes: an overread shows */
  if (!exact) return -1;
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path, size_t *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: no such input %s\n", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path) == 0 ? (++*count, 0) : -1;
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char **g = realloc(names, (n + 1) * sizeof *names);
    if (!g) break;
    names = g;
    size_t l = strlen(path) + strlen(e->d_name) + 2;
    names[n] = malloc(l);
    if (!names[n]) break;
    snprintf(names[n++], l, "%s/%s", path, e->d_name);
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, cmp);
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (rc == 0 && run_path(names[i], count) != 0) rc = -1;
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t count = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0) return 1;
  printf("replayed %zu inputs\n", count);
  return count ? 0 : 1;
}
