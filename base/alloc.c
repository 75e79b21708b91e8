/* The allocation-failure hook behind base/alloc.h. Three atomics: armed (the
 * wrappers' fast-path flag), the count of allocations seen while armed, and
 * the target count that fails. Counting with fetch_add makes exactly one
 * allocation fail even when several threads race through the hook. */
#include "base/alloc.h"

atomic_int dbx_alloc_armed_ = 0;
static atomic_long count = 0;
static atomic_long target = 0;
static atomic_int failed = 0;

int dbx_alloc_hook_(void) {
  long c = atomic_fetch_add_explicit(&count, 1, memory_order_relaxed) + 1;
  if (c != atomic_load_explicit(&target, memory_order_relaxed)) return 0;
  atomic_store_explicit(&failed, 1, memory_order_relaxed);
  return 1;
}

void dbx_alloc_fail_at(long n) {
  if (n <= 0) {
    atomic_store(&dbx_alloc_armed_, 0);
    atomic_store(&target, 0);
    return;
  }
  atomic_store(&dbx_alloc_armed_, 0);
  atomic_store(&count, 0);
  atomic_store(&failed, 0);
  atomic_store(&target, n);
  atomic_store(&dbx_alloc_armed_, 1);
}

long dbx_alloc_count(void) { return atomic_load(&count); }

int dbx_alloc_failed(void) { return atomic_load(&failed); }
