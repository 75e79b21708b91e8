/* dbx_worker_cap_malloc_arenas (worker/worker.h): with the cap, a dozen
 * threads that allocate share at most one arena per core; without it (the
 * same program, no call) glibc gives them more, which is what the cap is for.
 * Arenas are counted in malloc_info()'s report, each case in a child process
 * of its own (the cap is process-wide). An arena cap the environment sets is
 * kept. Under ASan or valgrind their allocator replaces glibc's, so the
 * arena counts are skipped there (reported as skipped, not passed). */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "worker/worker.h"

#if defined(__SANITIZE_ADDRESS__)
#define DBX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DBX_ASAN 1
#endif
#endif

enum { THREADS = 12 };

static pthread_barrier_t all_allocated;
/* Where the blocks are kept: a store the compiler cannot see through, or it
 * drops the malloc and free of a block nothing reads. */
static char *volatile blocks[THREADS];

/* Each thread allocates and holds its block until every thread has one, so
 * no thread finishes (and hands its arena back) before the last starts. */
static void *allocate(void *arg) {
  size_t i = (size_t)arg;
  blocks[i] = malloc(4096);
  if (blocks[i]) memset(blocks[i], 1, 4096);
  pthread_barrier_wait(&all_allocated);
  free(blocks[i]);
  return NULL;
}

/* Arenas in use after THREADS threads allocated: the "<heap nr=" elements of
 * malloc_info()'s XML. -1 on error. */
static int arenas_after_threads(void) {
  pthread_t t[THREADS];
  pthread_barrier_init(&all_allocated, NULL, THREADS + 1);
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, allocate, (void *)(size_t)i) != 0) return -1;
  pthread_barrier_wait(&all_allocated);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return -1;
  int rc = malloc_info(0, f);
  fclose(f);
  int heaps = 0;
  for (const char *p = buf; rc == 0 && p && (p = strstr(p, "<heap nr=")); p++) heaps++;
  free(buf);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&all_allocated);
  return rc == 0 ? heaps : -1;
}

/* In a child: cap (or not), run the threads; exit code = arenas counted
 * (250 on error), and the cap returned is written to *cap_out through a pipe. */
static int child_arenas(int cap_first, int *cap_out) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    int cap = cap_first ? dbx_worker_cap_malloc_arenas() : 0;
    if (write(fds[1], &cap, sizeof cap) != (ssize_t)sizeof cap) _exit(251);
    int n = arenas_after_threads();
    _exit(n < 0 || n > 249 ? 250 : n);
  }
  close(fds[1]);
  int cap = -1;
  assert_int_equal(read(fds[0], &cap, sizeof cap), (ssize_t)sizeof cap);
  close(fds[0]);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  *cap_out = cap;
  return WEXITSTATUS(st);
}

static void test_cap_bounds_arenas_to_cores(void **state) {
  (void)state;
#ifdef DBX_ASAN
  skip();
#endif
  unsetenv("MALLOC_ARENA_MAX");
  unsetenv("GLIBC_TUNABLES");
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int cap = -1, uncapped_cap = -1;
  int capped = child_arenas(1, &cap);
  int uncapped = child_arenas(0, &uncapped_cap);
  /* One arena for twelve threads with no cap: an allocator that is not
   * glibc's (valgrind's), where arenas cannot be counted. */
  if (uncapped == 1) skip();
  assert_int_equal(cap, cores);
  assert_in_range(capped, 1, cap);
  /* glibc alone (eight arenas per core) gives the twelve threads more arenas
   * than one per core, or the cap would change nothing. */
  if (cores < THREADS) assert_true(uncapped > cap);
}

static void test_environment_cap_is_kept(void **state) {
  (void)state;
  int cap = -1;
  setenv("MALLOC_ARENA_MAX", "3", 1);
  (void)child_arenas(1, &cap);
  assert_int_equal(cap, 0);
  unsetenv("MALLOC_ARENA_MAX");
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=3", 1);
  (void)child_arenas(1, &cap);
  assert_int_equal(cap, 0);
  unsetenv("GLIBC_TUNABLES");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cap_bounds_arenas_to_cores),
      cmocka_unit_test(test_environment_cap_is_kept),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
