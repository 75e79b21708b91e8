/* base/alloc: the one allocation path of our own code, with a test hook that
 * fails the Nth allocation (SQLite's fault simulation, libuv's
 * test-loop-oom.c).
 *
 * dbx_malloc/dbx_calloc/dbx_realloc behave exactly as malloc/calloc/realloc
 * and dbx_free as free; memory from one family may be freed by the other.
 * When the hook is off (always, outside tests) each call costs one relaxed
 * atomic load and one predicted branch before the libc call.
 *
 * The hook is process-wide: with several threads allocating, "the Nth
 * allocation" is the Nth to reach the hook in any thread. Tests arm it on a
 * quiet process (no other threads allocating through these wrappers), or
 * accept that the failure lands in whichever thread gets there.
 * Memory gRPC core, LMDB, cJSON or libc allocate for themselves does not go
 * through here; protobuf-c's does when the caller passes dbx_pb_allocator()
 * (protos/pb.h). Thread safety: every function may be called from any thread. */
#ifndef DBX_BASE_ALLOC_H
#define DBX_BASE_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

/* Non-zero while dbx_alloc_fail_at() has armed the hook. Internal: read by
 * the inline wrappers only. */
extern atomic_int dbx_alloc_armed_;
/* The hook's slow path: counts one allocation, 1 when it must fail. */
int dbx_alloc_hook_(void);

static inline void *dbx_malloc(size_t n) {
  if (__builtin_expect(atomic_load_explicit(&dbx_alloc_armed_, memory_order_relaxed), 0) &&
      dbx_alloc_hook_())
    return NULL;
  return malloc(n);
}

static inline void *dbx_calloc(size_t count, size_t size) {
  if (__builtin_expect(atomic_load_explicit(&dbx_alloc_armed_, memory_order_relaxed), 0) &&
      dbx_alloc_hook_())
    return NULL;
  return calloc(count, size);
}

/* As realloc: on failure (real or injected) returns NULL and p is unchanged. */
static inline void *dbx_realloc(void *p, size_t n) {
  if (__builtin_expect(atomic_load_explicit(&dbx_alloc_armed_, memory_order_relaxed), 0) &&
      dbx_alloc_hook_())
    return NULL;
  return realloc(p, n);
}

static inline void dbx_free(void *p) { free(p); }

/* Test control. n > 0: arm the hook, reset the count to 0, and make the nth
 * allocation through these wrappers from now fail (one failure only; later
 * ones succeed and are still counted). n = LONG_MAX in effect only counts.
 * n <= 0: disarm (allocations are no longer counted; the count is kept). */
void dbx_alloc_fail_at(long n);
/* Allocations that reached the hook since the last dbx_alloc_fail_at(n > 0),
 * the failed one included. */
long dbx_alloc_count(void);
/* 1 once the armed failure has been injected (since the last fail_at). */
int dbx_alloc_failed(void);

#endif
