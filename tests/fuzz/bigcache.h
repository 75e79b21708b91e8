/* A cache of large heap blocks for the service harnesses, under clang's
 * ASan only (fuzz_service.c includes this file once).
 *
 * Why: every job of an engine batch runs in an LMDB child transaction, and
 * LMDB allocates a 2 MiB dirty list and a 1 MiB page list for each one and
 * frees them at its end. Under ASan a block that large is mapped afresh,
 * and its shadow is poisoned at allocation and again at free: about three
 * quarters of the harness's time (perf), so fuzz_service ran at about 100
 * inputs/s. Here malloc / calloc / realloc / free (ASan's are weak symbols,
 * so these override them and pass every other block on to ASan's own
 * __interceptor_* functions) keep up to BIGCACHE_KEEP freed blocks of
 * BIGCACHE_MIN bytes or more and hand one back to the next malloc of the
 * same size, unpoisoned. What is lost: ASan's use-after-free check on those
 * few large blocks, which only LMDB and an occasional large message use;
 * every other block is ASan's as before. Cached blocks stay reachable from
 * the tables here, so LeakSanitizer does not count them. Thread-safe (the
 * engine thread and libFuzzer's thread both allocate). x86-64 (the pause
 * instruction of the spin lock). */
#ifndef DBX_TESTS_FUZZ_BIGCACHE_H
#define DBX_TESTS_FUZZ_BIGCACHE_H

#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DBX_FUZZ_BIGCACHE 1
#endif
#endif

#ifdef DBX_FUZZ_BIGCACHE
#include <stddef.h>
#include <string.h>

void *__interceptor_malloc(size_t n);
void __interceptor_free(void *p);
void *__interceptor_calloc(size_t n, size_t m);
void *__interceptor_realloc(void *p, size_t n);
void *malloc(size_t n);
void free(void *p);
void *calloc(size_t n, size_t m);
void *realloc(void *p, size_t n);

#define BIGCACHE_MIN ((size_t)512 * 1024)
#define BIGCACHE_KEEP 8
#define BIGCACHE_LIVE 64

/* free runs before ASan is initialised (dlerror's buffers while ASan looks
 * up the functions it intercepts), when its shadow memory is not mapped yet:
 * an instrumented load or store here would fault (glibc 2.36-9+deb12u14
 * frees one there). So nothing in this file is instrumented; the blocks it
 * hands out are checked by ASan as before. */
#define BC_RAW __attribute__((no_sanitize("address")))

/* A spin lock: the sanitizers intercept pthread_mutex_lock. */
static char bc_mu;
BC_RAW static void bc_lock(char *m) {
  while (__atomic_test_and_set(m, __ATOMIC_ACQUIRE)) __builtin_ia32_pause();
}
BC_RAW static void bc_unlock(char *m) { __atomic_clear(m, __ATOMIC_RELEASE); }
static struct { void *p; size_t n; } bc_live[BIGCACHE_LIVE], bc_free[BIGCACHE_KEEP];
static int bc_nlive, bc_nfree;

/* Remove p from the live table; its size, or 0 if p is not a big block. */
BC_RAW static size_t bc_take_live(void *p) {
  for (int i = 0; i < bc_nlive; i++)
    if (bc_live[i].p == p) {
      size_t n = bc_live[i].n;
      bc_live[i] = bc_live[--bc_nlive];
      return n;
    }
  return 0;
}

BC_RAW void *malloc(size_t n) {
  if (n < BIGCACHE_MIN) return __interceptor_malloc(n);
  void *p = NULL;
  bc_lock(&bc_mu);
  for (int i = 0; i < bc_nfree; i++)
    if (bc_free[i].n == n) {
      p = bc_free[i].p;
      bc_free[i] = bc_free[--bc_nfree];
      break;
    }
  bc_unlock(&bc_mu);
  if (p == NULL) p = __interceptor_malloc(n);
  if (p == NULL) return NULL;
  bc_lock(&bc_mu);
  int kept = bc_nlive < BIGCACHE_LIVE;
  if (kept) bc_live[bc_nlive].p = p, bc_live[bc_nlive++].n = n;
  bc_unlock(&bc_mu);
  return p; /* a block the live table is full for is an ordinary one */
}

BC_RAW void free(void *p) {
  if (p == NULL) return;
  bc_lock(&bc_mu);
  size_t n = bc_nlive ? bc_take_live(p) : 0;
  int cached = n && bc_nfree < BIGCACHE_KEEP;
  if (cached) bc_free[bc_nfree].p = p, bc_free[bc_nfree++].n = n;
  bc_unlock(&bc_mu);
  if (!cached) __interceptor_free(p);
}

BC_RAW void *calloc(size_t n, size_t m) {
  if (m && n > (size_t)-1 / m) return NULL;
  if (n * m < BIGCACHE_MIN) return __interceptor_calloc(n, m);
  void *p = malloc(n * m);
  if (p) memset(p, 0, n * m);
  return p;
}

BC_RAW void *realloc(void *p, size_t n) {
  bc_lock(&bc_mu);
  size_t old = p && bc_nlive ? bc_take_live(p) : 0;
  bc_unlock(&bc_mu);
  if (old == 0 && n < BIGCACHE_MIN) return __interceptor_realloc(p, n);
  if (old == 0) { /* an ordinary block growing big: ASan's, as before */
    void *q = __interceptor_realloc(p, n);
    return q;
  }
  void *q = malloc(n);
  if (q == NULL) { /* p stays valid and big */
    bc_lock(&bc_mu);
    if (bc_nlive < BIGCACHE_LIVE) bc_live[bc_nlive].p = p, bc_live[bc_nlive++].n = old;
    bc_unlock(&bc_mu);
    return NULL;
  }
  memcpy(q, p, old < n ? old : n);
  bc_lock(&bc_mu);
  int cached = bc_nfree < BIGCACHE_KEEP;
  if (cached) bc_free[bc_nfree].p = p, bc_free[bc_nfree++].n = old;
  bc_unlock(&bc_mu);
  if (!cached) __interceptor_free(p);
  return q;
}
#endif

#endif
