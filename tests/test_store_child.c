/* Unit tests of the store's child (nested) write transactions
 * (dbx_store_txn_child_begin/commit inside dbx_store_write's fn), on real
 * LMDB environments in temporary directories: what a committed or aborted
 * child leaves in its parent, and that MAP_FULL inside a child (injected)
 * reruns the whole write and commits it exactly once. */
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "store/store.h"

#define KIB ((size_t)1024)

typedef struct {
  char *dir;
  dbx_store *s;
  dbx_table tb;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->dir = dbx_test_tmpdir("dbx-store-child");
  dbx_store_opts o = {.path = f->dir, .map_size_bytes = 64 * KIB, .no_sync = 1};
  if (dbx_store_open(&o, &f->s) != DBX_OK) return -1;
  if (dbx_store_table(f->s, "kv", &f->tb) != DBX_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  dbx_store_test_inject_map_full(0);
  dbx_store_close(f->s);
  dbx_test_rmrf(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

static dbx_err put_str(dbx_txn *t, dbx_table tb, const char *k, const char *v) {
  return dbx_store_put(t, tb, k, strlen(k), v, strlen(v));
}

/* Value of k as a string in buf ("" when absent); returns 1 when present. */
static int get_str(dbx_txn *t, dbx_table tb, const char *k, char *buf, size_t cap) {
  dbx_val v;
  buf[0] = '\0';
  dbx_err e = dbx_store_get(t, tb, k, strlen(k), &v);
  if (e == DBX_ENOTFOUND) return 0;
  assert_int_equal(e, DBX_OK);
  snprintf(buf, cap, "%.*s", (int)v.size, (const char *)v.data);
  return 1;
}

/* Reads k after the write, in its own read transaction. */
static int read_after(fixture *f, const char *k, char *buf, size_t cap) {
  dbx_txn *t = NULL;
  assert_int_equal(dbx_store_read_begin(f->s, &t), DBX_OK);
  int found = get_str(t, f->tb, k, buf, cap);
  dbx_store_txn_abort(t);
  return found;
}

/* ---- a committed child */

typedef struct {
  dbx_table tb;
  int seen_in_parent; /* the child's key, read through the parent after commit */
} commit_arg;

static dbx_err commit_fn(dbx_txn *t, void *arg) {
  commit_arg *a = arg;
  dbx_err e = put_str(t, a->tb, "parent", "p1");
  if (e != DBX_OK) return e;
  dbx_txn *c = NULL;
  e = dbx_store_txn_child_begin(t, &c);
  if (e != DBX_OK) return e;
  e = put_str(c, a->tb, "child", "c1");
  if (e != DBX_OK) {
    dbx_store_txn_abort(c);
    return e;
  }
  e = dbx_store_txn_child_commit(c);
  if (e != DBX_OK) return e;
  char buf[32];
  a->seen_in_parent = get_str(t, a->tb, "child", buf, sizeof buf) && strcmp(buf, "c1") == 0;
  return DBX_OK;
}

static void test_store_child_commit_reaches_outer_commit(void **state) {
  fixture *f = *state;
  commit_arg a = {.tb = f->tb};
  assert_int_equal(dbx_store_write(f->s, commit_fn, &a), DBX_OK);
  assert_int_equal(a.seen_in_parent, 1);
  char buf[32];
  assert_int_equal(read_after(f, "child", buf, sizeof buf), 1);
  assert_string_equal(buf, "c1");
  assert_int_equal(read_after(f, "parent", buf, sizeof buf), 1);
  assert_string_equal(buf, "p1");
}

/* ---- an aborted child */

typedef struct {
  dbx_table tb;
  int child_saw_parent; /* the child reads the parent's uncommitted write */
} abort_arg;

static dbx_err abort_fn(dbx_txn *t, void *arg) {
  abort_arg *a = arg;
  dbx_err e = put_str(t, a->tb, "parent", "p1");
  if (e != DBX_OK) return e;
  dbx_txn *c = NULL;
  e = dbx_store_txn_child_begin(t, &c);
  if (e != DBX_OK) return e;
  char buf[32];
  a->child_saw_parent = get_str(c, a->tb, "parent", buf, sizeof buf) && strcmp(buf, "p1") == 0;
  e = put_str(c, a->tb, "child", "c1");
  if (e == DBX_OK) e = put_str(c, a->tb, "parent", "overwritten by the child");
  if (e == DBX_OK) e = dbx_store_del(c, a->tb, "kept", 4);
  dbx_store_txn_abort(c);
  if (e != DBX_OK) return e;
  /* the parent goes on after the abort */
  return put_str(t, a->tb, "parent-after", "p2");
}

static dbx_err seed_fn(dbx_txn *t, void *arg) {
  return put_str(t, *(dbx_table *)arg, "kept", "k0");
}

static void test_store_child_abort_drops_child_keeps_parent(void **state) {
  fixture *f = *state;
  assert_int_equal(dbx_store_write(f->s, seed_fn, &f->tb), DBX_OK);
  abort_arg a = {.tb = f->tb};
  assert_int_equal(dbx_store_write(f->s, abort_fn, &a), DBX_OK);
  assert_int_equal(a.child_saw_parent, 1);
  char buf[64];
  assert_int_equal(read_after(f, "child", buf, sizeof buf), 0);
  assert_int_equal(read_after(f, "parent", buf, sizeof buf), 1);
  assert_string_equal(buf, "p1");
  assert_int_equal(read_after(f, "parent-after", buf, sizeof buf), 1);
  assert_string_equal(buf, "p2");
  assert_int_equal(read_after(f, "kept", buf, sizeof buf), 1); /* the child's delete was dropped */
  assert_string_equal(buf, "k0");
}

/* ---- MAP_FULL inside a child */

typedef struct {
  dbx_table tb;
  int calls;
  dbx_err child_put[4];    /* per call */
  dbx_err child_commit[4]; /* per call */
} full_arg;

/* Increments "n-parent" in the parent and "n-child" in a child. */
static dbx_err incr(dbx_txn *t, dbx_table tb, const char *k, dbx_err *put_rc) {
  char buf[32];
  long n = get_str(t, tb, k, buf, sizeof buf) ? strtol(buf, NULL, 10) : 0;
  snprintf(buf, sizeof buf, "%ld", n + 1);
  dbx_err e = put_str(t, tb, k, buf);
  if (put_rc) *put_rc = e;
  return e;
}

static dbx_err full_fn(dbx_txn *t, void *arg) {
  full_arg *a = arg;
  int call = a->calls++;
  if (call >= 4) return DBX_EINVAL;
  dbx_err e = incr(t, a->tb, "n-parent", NULL);
  if (e != DBX_OK) return e;
  dbx_store_test_inject_map_full(call == 0 ? 1 : 0); /* the child's first put fails, once */
  dbx_txn *c = NULL;
  e = dbx_store_txn_child_begin(t, &c);
  if (e != DBX_OK) return e;
  (void)incr(c, a->tb, "n-child", &a->child_put[call]);
  /* commit even after a failed put: the store must refuse to merge it */
  e = dbx_store_txn_child_commit(c);
  a->child_commit[call] = e;
  return e;
}

static void test_store_child_map_full_reruns_whole_write_once(void **state) {
  fixture *f = *state;
  size_t map0 = dbx_store_map_size(f->s);
  full_arg a = {.tb = f->tb};
  assert_int_equal(dbx_store_write(f->s, full_fn, &a), DBX_OK);
  assert_int_equal(a.calls, 2);
  assert_int_not_equal(a.child_put[0], DBX_OK);
  assert_int_not_equal(a.child_commit[0], DBX_OK);
  assert_int_equal(a.child_put[1], DBX_OK);
  assert_int_equal(a.child_commit[1], DBX_OK);
  assert_true(dbx_store_map_size(f->s) > map0); /* it grew before the rerun */
  char buf[32];
  /* committed exactly once: neither the parent's nor the child's first run survived */
  assert_int_equal(read_after(f, "n-parent", buf, sizeof buf), 1);
  assert_string_equal(buf, "1");
  assert_int_equal(read_after(f, "n-child", buf, sizeof buf), 1);
  assert_string_equal(buf, "1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_store_child_commit_reaches_outer_commit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_store_child_abort_drops_child_keeps_parent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_store_child_map_full_reruns_whole_write_once, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
