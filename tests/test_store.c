/* Unit tests of store/: real LMDB environments in temporary directories.
 * Map growth, the ceiling and stale readers are exercised for real (tiny maps,
 * forked processes killed with SIGKILL); MAP_FULL inside fn uses the
 * injection hook so the rerun count is deterministic. */
#include "tests/testutil.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/err.h"
#include "base/util.h"
#include "store/store.h"

#define KIB ((size_t)1024)
#define MIB (KIB * 1024)

static dbx_store *open_at(const char *dir, size_t map, size_t ceiling) {
  dbx_store_opts o = {.path = dir, .map_size_bytes = map, .map_ceiling_bytes = ceiling,
                      .no_sync = 1};
  dbx_store *s = NULL;
  dbx_err e = dbx_store_open(&o, &s);
  if (e != DBX_OK) fail_msg("open %s: %s: %s", dir, dbx_err_name(e), dbx_store_open_errmsg());
  return s;
}

static dbx_table table_of(dbx_store *s, const char *name) {
  dbx_table tb = 0;
  assert_int_equal(dbx_store_table(s, name, &tb), DBX_OK);
  return tb;
}

/* ---- write functions used by the tests ---- */

typedef struct {
  dbx_table tb;
  int n;           /* entries k01..kNN with values "value-N" */
  size_t vlen;     /* 0: "value-N"; else vlen bytes filled with N */
  int calls;
  const char *prefix;
} fill_arg;

static dbx_err fill_fn(dbx_txn *t, void *arg) {
  fill_arg *a = arg;
  a->calls++;
  char *buf = a->vlen ? malloc(a->vlen) : NULL;
  dbx_err e = DBX_OK;
  for (int i = 1; i <= a->n && e == DBX_OK; i++) {
    char k[32], v[32];
    snprintf(k, sizeof k, "%s%02d", a->prefix ? a->prefix : "k", i);
    if (buf) {
      memset(buf, 'a' + i % 26, a->vlen);
      e = dbx_store_put(t, a->tb, k, strlen(k), buf, a->vlen);
    } else {
      snprintf(v, sizeof v, "value-%d", i);
      e = dbx_store_put(t, a->tb, k, strlen(k), v, strlen(v));
    }
  }
  free(buf);
  return e;
}

static void expect_str(dbx_store *s, dbx_table tb, const char *key, const char *want) {
  dbx_txn *t = NULL;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  dbx_val v = {0};
  dbx_err e = dbx_store_get(t, tb, key, strlen(key), &v);
  if (want == NULL) {
    assert_int_equal(e, DBX_ENOTFOUND);
  } else {
    assert_int_equal(e, DBX_OK);
    assert_int_equal(v.size, strlen(want));
    assert_memory_equal(v.data, want, v.size);
  }
  dbx_store_txn_abort(t);
}

static void expect_kv(dbx_err e, dbx_val k, dbx_val v, const char *wk, const char *wv) {
  assert_int_equal(e, DBX_OK);
  assert_int_equal(k.size, strlen(wk));
  assert_memory_equal(k.data, wk, k.size);
  assert_int_equal(v.size, strlen(wv));
  assert_memory_equal(v.data, wv, v.size);
}

/* ---- tests ---- */

typedef struct {
  dbx_table tb;
  dbx_err del_again;
} del_arg;

static dbx_err del_fn(dbx_txn *t, void *arg) {
  del_arg *a = arg;
  dbx_err e = dbx_store_del(t, a->tb, "k03", 3);
  if (e != DBX_OK) return e;
  a->del_again = dbx_store_del(t, a->tb, "k03", 3);
  /* delete k07 through a cursor */
  dbx_cursor *c = NULL;
  e = dbx_store_cursor_open(t, a->tb, &c);
  if (e != DBX_OK) return e;
  dbx_val k, v;
  e = dbx_store_cursor_seek(c, "k07", 3, &k, &v);
  if (e == DBX_OK) e = dbx_store_cursor_del(c);
  dbx_store_cursor_close(c);
  return e;
}

static void test_store_put_get_del_cursor(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 0, 0);
  dbx_table tb = table_of(s, "events");
  fill_arg fa = {.tb = tb, .n = 10};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  assert_int_equal(fa.calls, 1);
  expect_str(s, tb, "k05", "value-5");
  expect_str(s, tb, "k11", NULL);

  dbx_txn *t = NULL;
  dbx_cursor *c = NULL;
  dbx_val k, v;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  assert_int_equal(dbx_store_cursor_open(t, tb, &c), DBX_OK);
  expect_kv(dbx_store_cursor_seek(c, NULL, 0, &k, &v), k, v, "k01", "value-1");
  expect_kv(dbx_store_cursor_seek(c, "k05x", 4, &k, &v), k, v, "k06", "value-6");
  expect_kv(dbx_store_cursor_next(c, &k, &v), k, v, "k07", "value-7");
  expect_kv(dbx_store_cursor_prev(c, &k, &v), k, v, "k06", "value-6");
  expect_kv(dbx_store_cursor_seek(c, "k05", 3, &k, &v), k, v, "k05", "value-5");
  expect_kv(dbx_store_cursor_seek_le(c, "k05x", 4, &k, &v), k, v, "k05", "value-5");
  expect_kv(dbx_store_cursor_seek_le(c, "k05", 3, &k, &v), k, v, "k05", "value-5");
  expect_kv(dbx_store_cursor_seek_le(c, "zzz", 3, &k, &v), k, v, "k10", "value-10");
  expect_kv(dbx_store_cursor_seek_le(c, NULL, 0, &k, &v), k, v, "k10", "value-10");
  assert_int_equal(dbx_store_cursor_next(c, &k, &v), DBX_ENOTFOUND);
  assert_int_equal(dbx_store_cursor_seek(c, "k99", 3, &k, &v), DBX_ENOTFOUND);
  assert_int_equal(dbx_store_cursor_seek_le(c, "k00", 3, &k, &v), DBX_ENOTFOUND);
  expect_kv(dbx_store_cursor_seek(c, "k01", 3, &k, &v), k, v, "k01", "value-1");
  assert_int_equal(dbx_store_cursor_prev(c, &k, &v), DBX_ENOTFOUND);
  dbx_store_cursor_close(c);
  dbx_store_txn_abort(t);

  del_arg da = {.tb = tb};
  assert_int_equal(dbx_store_write(s, del_fn, &da), DBX_OK);
  assert_int_equal(da.del_again, DBX_ENOTFOUND);
  expect_str(s, tb, "k03", NULL);
  expect_str(s, tb, "k07", NULL);
  expect_str(s, tb, "k02", "value-2");
  expect_str(s, tb, "k08", "value-8");

  /* the walk skips deleted keys, forward and backward */
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  assert_int_equal(dbx_store_cursor_open(t, tb, &c), DBX_OK);
  expect_kv(dbx_store_cursor_seek(c, "k03", 3, &k, &v), k, v, "k04", "value-4");
  expect_kv(dbx_store_cursor_seek_le(c, "k07", 3, &k, &v), k, v, "k06", "value-6");
  expect_kv(dbx_store_cursor_next(c, &k, &v), k, v, "k08", "value-8");
  dbx_store_cursor_close(c);
  dbx_store_txn_abort(t);

  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_store_same_path_shares_handle(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  char other[4096];
  snprintf(other, sizeof other, "%s/./", dir);
  dbx_store *a = open_at(dir, 0, 0);
  dbx_store *b = open_at(other, 0, 0);
  assert_ptr_equal(a, b);
  dbx_table ta = table_of(a, "t");
  dbx_table tb = table_of(b, "t");
  assert_int_equal(ta, tb);
  fill_arg fa = {.tb = ta, .n = 3};
  assert_int_equal(dbx_store_write(a, fill_fn, &fa), DBX_OK);
  expect_str(b, tb, "k03", "value-3");
  dbx_store_close(a); /* b keeps the environment open */
  fill_arg fb = {.tb = tb, .n = 2, .prefix = "b"};
  assert_int_equal(dbx_store_write(b, fill_fn, &fb), DBX_OK);
  expect_str(b, tb, "b02", "value-2");
  expect_str(b, tb, "k01", "value-1");
  dbx_store_close(b);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_store_data_survives_reopen(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 0, 0);
  dbx_table tb = table_of(s, "journal");
  fill_arg fa = {.tb = tb, .n = 5};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  dbx_store_close(s);

  dbx_store_opts o = {.path = dir}; /* durable (synced) this time */
  s = NULL;
  assert_int_equal(dbx_store_open(&o, &s), DBX_OK);
  tb = table_of(s, "journal");
  expect_str(s, tb, "k04", "value-4");
  expect_str(s, tb, "k06", NULL);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A data.mdb cut short (a truncate, a partial copy) is refused at open with
 * both lengths named, where reading its pages through the map would have
 * been SIGBUS (a newcomer's truncate -s 8192 crashed replay and dev); a
 * file that is whole again opens with its data. */
static void test_store_truncated_file_refused(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store-cut");
  dbx_store *s = open_at(dir, 0, 0);
  dbx_table tb = table_of(s, "journal");
  fill_arg fa = {.tb = tb, .n = 40, .vlen = 1000}; /* about ten leaf pages */
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  dbx_store_close(s);
  char *data = dbx_asprintf("%s/data.mdb", dir);
  struct stat st;
  assert_int_equal(stat(data, &st), 0);
  assert_true(st.st_size > 8 * 4096);
  size_t n = (size_t)st.st_size;
  char *whole = malloc(n);
  FILE *f = fopen(data, "rb");
  assert_non_null(f);
  assert_int_equal(fread(whole, 1, n, f), n);
  fclose(f);
  assert_int_equal(truncate(data, 8192), 0); /* the two meta pages only */
  dbx_store_opts o = {.path = dir};
  s = NULL;
  assert_int_equal(dbx_store_open(&o, &s), DBX_ESTORE);
  assert_null(s);
  const char *msg = dbx_store_open_errmsg();
  if (strstr(msg, "data.mdb is 8192 bytes, shorter than the ") == NULL || strstr(msg, "cut short") == NULL)
    fail_msg("open of a truncated store said: %s", msg);
  f = fopen(data, "wb"); /* restored from the copy: it opens, with its data */
  assert_non_null(f);
  assert_int_equal(fwrite(whole, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
  assert_int_equal(dbx_store_open(&o, &s), DBX_OK);
  char want[1001];
  memset(want, 'a' + 40 % 26, 1000);
  want[1000] = '\0';
  expect_str(s, table_of(s, "journal"), "k40", want);
  dbx_store_close(s);
  free(whole);
  free(data);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_store_map_grows_on_full(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 64 * KIB, 0);
  assert_int_equal(dbx_store_map_size(s), 64 * KIB);
  dbx_table tb = table_of(s, "blobs");
  fill_arg fa = {.tb = tb, .n = 48, .vlen = 64 * KIB}; /* 3 MiB in one transaction */
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  assert_true(fa.calls > 1); /* it hit MAP_FULL and ran again */
  assert_true(dbx_store_map_size(s) >= 3 * MIB);

  dbx_txn *t = NULL;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  dbx_val v = {0};
  assert_int_equal(dbx_store_get(t, tb, "k48", 3, &v), DBX_OK);
  assert_int_equal(v.size, 64 * KIB);
  assert_int_equal(((const char *)v.data)[0], 'a' + 48 % 26);
  assert_int_equal(((const char *)v.data)[64 * KIB - 1], 'a' + 48 % 26);
  dbx_store_txn_abort(t);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

typedef struct {
  dbx_table tb;
  int calls;
} count_arg;

/* Increments a counter stored under "n": committing twice would leave 2. */
static dbx_err incr_fn(dbx_txn *t, void *arg) {
  count_arg *a = arg;
  a->calls++;
  dbx_val v = {0};
  unsigned n = 0;
  dbx_err e = dbx_store_get(t, a->tb, "n", 1, &v);
  if (e == DBX_OK) {
    if (v.size != sizeof n) return DBX_ESTATE;
    memcpy(&n, v.data, sizeof n);
  } else if (e != DBX_ENOTFOUND) {
    return e;
  }
  n++;
  return dbx_store_put(t, a->tb, "n", 1, &n, sizeof n);
}

static unsigned read_counter(dbx_store *s, dbx_table tb) {
  dbx_txn *t = NULL;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  dbx_val v = {0};
  unsigned n = 0;
  assert_int_equal(dbx_store_get(t, tb, "n", 1, &v), DBX_OK);
  assert_int_equal(v.size, sizeof n);
  memcpy(&n, v.data, sizeof n);
  dbx_store_txn_abort(t);
  return n;
}

static void test_store_injected_map_full_reruns_fn(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 64 * KIB, 0);
  dbx_table tb = table_of(s, "counters");
  dbx_store_test_inject_map_full(1);
  count_arg a = {.tb = tb};
  assert_int_equal(dbx_store_write(s, incr_fn, &a), DBX_OK);
  assert_int_equal(a.calls, 2);
  assert_int_equal(read_counter(s, tb), 1);
  assert_int_equal(dbx_store_map_size(s), 128 * KIB);
  /* the injection is spent: the next write runs once */
  a.calls = 0;
  assert_int_equal(dbx_store_write(s, incr_fn, &a), DBX_OK);
  assert_int_equal(a.calls, 1);
  assert_int_equal(read_counter(s, tb), 2);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Ignores a failed put and claims success: the store must still not commit. */
static dbx_err swallow_fn(dbx_txn *t, void *arg) {
  (void)fill_fn(t, arg); /* counts the call */
  return DBX_OK;
}

static void test_store_ceiling_full_then_recovers(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 64 * KIB, 256 * KIB);
  dbx_table tb = table_of(s, "t");
  fill_arg small = {.tb = tb, .n = 4};
  assert_int_equal(dbx_store_write(s, fill_fn, &small), DBX_OK);

  fill_arg big = {.tb = tb, .n = 16, .vlen = 64 * KIB, .prefix = "big"}; /* 1 MiB */
  assert_int_equal(dbx_store_write(s, fill_fn, &big), DBX_ESTOREFULL);
  assert_string_equal(dbx_store_errmsg(s), "storage full: map at 262144 bytes, ceiling 262144");
  assert_int_equal(dbx_store_map_size(s), 256 * KIB);

  fill_arg sw = {.tb = tb, .n = 16, .vlen = 64 * KIB, .prefix = "sw"};
  assert_int_equal(dbx_store_write(s, swallow_fn, &sw), DBX_ESTOREFULL);
  assert_int_equal(sw.calls, 1);

  expect_str(s, tb, "k04", "value-4");
  expect_str(s, tb, "big01", NULL);
  expect_str(s, tb, "sw01", NULL);
  fill_arg after = {.tb = tb, .n = 2, .prefix = "after"};
  assert_int_equal(dbx_store_write(s, fill_fn, &after), DBX_OK);
  expect_str(s, tb, "after02", "value-2");
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static dbx_err put_then_fail_fn(dbx_txn *t, void *arg) {
  dbx_table *tb = arg;
  dbx_err e = dbx_store_put(t, *tb, "half", 4, "done", 4);
  if (e != DBX_OK) return e;
  return DBX_EEXIST;
}

static dbx_err put_then_abort_fn(dbx_txn *t, void *arg) {
  dbx_table *tb = arg;
  dbx_err e = dbx_store_put(t, *tb, "half", 4, "done", 4);
  if (e != DBX_OK) return e;
  dbx_store_txn_abort(t);
  return DBX_OK;
}

static void test_store_fn_error_aborts(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 0, 0);
  dbx_table tb = table_of(s, "t");
  assert_int_equal(dbx_store_write(s, put_then_fail_fn, &tb), DBX_EEXIST);
  expect_str(s, tb, "half", NULL);
  assert_int_equal(dbx_store_write(s, put_then_abort_fn, &tb), DBX_ECANCELED);
  expect_str(s, tb, "half", NULL);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

typedef struct {
  dbx_table tb;
  size_t klen;
} key_arg;

static dbx_err put_key_fn(dbx_txn *t, void *arg) {
  key_arg *a = arg;
  char key[600];
  memset(key, 'x', sizeof key);
  dbx_err e = dbx_store_put(t, a->tb, "first", 5, "1", 1);
  if (e != DBX_OK) return e;
  return dbx_store_put(t, a->tb, key, a->klen, "v", 1);
}

static void test_store_bad_args_einval(void **state) {
  (void)state;
  dbx_store *s = NULL;
  assert_int_equal(dbx_store_open(NULL, &s), DBX_EINVAL);
  assert_null(s);
  dbx_store_opts o = {.path = NULL};
  assert_int_equal(dbx_store_open(&o, &s), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_open_errmsg(), "path"));

  char *dir = dbx_test_tmpdir("dbx-store");
  s = open_at(dir, 0, 0);
  dbx_table tb = 0;
  assert_int_equal(dbx_store_table(s, NULL, &tb), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "name"));
  assert_int_equal(dbx_store_write(s, NULL, NULL), DBX_EINVAL);
  assert_int_equal(dbx_store_write(NULL, put_key_fn, NULL), DBX_EINVAL);
  tb = table_of(s, "t");

  key_arg ka = {.tb = tb, .klen = 0};
  assert_int_equal(dbx_store_write(s, put_key_fn, &ka), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "key is empty"));
  ka.klen = 512;
  assert_int_equal(dbx_store_write(s, put_key_fn, &ka), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "512 bytes"));
  expect_str(s, tb, "first", NULL); /* the failed fn's earlier put was not committed */
  ka.klen = 511;
  assert_int_equal(dbx_store_write(s, put_key_fn, &ka), DBX_OK);
  expect_str(s, tb, "first", "1");

  dbx_txn *t = NULL;
  dbx_val v;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  assert_int_equal(dbx_store_get(t, tb, NULL, 3, &v), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "key is NULL"));
  assert_int_equal(dbx_store_get(t, 0, "k", 1, &v), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "table handle"));
  assert_int_equal(dbx_store_get(t, 77, "k", 1, &v), DBX_EINVAL);
  char longkey[600];
  memset(longkey, 'k', sizeof longkey);
  assert_int_equal(dbx_store_get(t, tb, longkey, sizeof longkey, &v), DBX_ENOTFOUND); /* none is stored */
  assert_int_equal(dbx_store_put(t, tb, "k", 1, "v", 1), DBX_EINVAL);
  assert_non_null(strstr(dbx_store_errmsg(s), "read-only"));
  assert_int_equal(dbx_store_get(NULL, tb, "k", 1, &v), DBX_EINVAL);
  dbx_cursor *c = NULL;
  assert_int_equal(dbx_store_cursor_open(t, 0, &c), DBX_EINVAL);
  assert_null(c);
  assert_int_equal(dbx_store_cursor_open(t, tb, &c), DBX_OK);
  /* seek keys longer than any stored one order as memcmp does: stored are
   * "first" and 511 'x' bytes */
  memset(longkey, 'x', sizeof longkey);
  assert_int_equal(dbx_store_cursor_seek(c, longkey, sizeof longkey, &v, NULL), DBX_ENOTFOUND);
  assert_int_equal(dbx_store_cursor_seek_le(c, longkey, sizeof longkey, &v, NULL), DBX_OK);
  assert_int_equal(v.size, 511);
  memset(longkey, 'f', sizeof longkey);
  assert_int_equal(dbx_store_cursor_seek(c, longkey, sizeof longkey, &v, NULL), DBX_OK);
  assert_int_equal(v.size, 5);
  assert_memory_equal(v.data, "first", 5);
  memset(longkey, 'w', sizeof longkey);
  assert_int_equal(dbx_store_cursor_seek_le(c, longkey, sizeof longkey, &v, NULL), DBX_OK);
  assert_memory_equal(v.data, "first", 5);
  assert_int_equal(dbx_store_cursor_del(c), DBX_EINVAL);
  assert_int_equal(dbx_store_cursor_seek(c, NULL, 5, &v, &v), DBX_EINVAL);
  dbx_store_cursor_close(c);
  dbx_store_cursor_close(NULL);
  dbx_store_txn_abort(t);
  dbx_store_txn_abort(NULL);
  dbx_store_close(NULL);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* ---- other processes ---- */

static void write_byte(int fd) {
  char b = 1;
  if (write(fd, &b, 1) != 1) _exit(90);
}

static void read_bytes(int fd, int n) {
  for (int i = 0; i < n; i++) {
    char b;
    assert_int_equal(read(fd, &b, 1), 1);
  }
}

/* Holds the environment open (without reading) until its go pipe closes. */
static pid_t spawn_holder(const char *dir, int ready_w, int go_r, int go_w) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(go_w);
    dbx_store_opts o = {.path = dir, .no_sync = 1};
    dbx_store *s = NULL;
    if (dbx_store_open(&o, &s) != DBX_OK) _exit(10);
    write_byte(ready_w);
    char b;
    while (read(go_r, &b, 1) > 0) {
    }
    dbx_store_close(s);
    _exit(0);
  }
  return pid;
}

#define STALE_READERS 20

static void test_store_stale_readers_cleared_at_open(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  int ready[2], go[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(go), 0);
  /* While some process keeps the environment open, LMDB keeps its reader
   * table; without one the next opener resets the table and nothing is stale. */
  pid_t holder = spawn_holder(dir, ready[1], go[0], go[1]);
  close(go[0]);
  read_bytes(ready[0], 1);

  pid_t readers[STALE_READERS];
  for (int i = 0; i < STALE_READERS; i++) {
    readers[i] = fork();
    assert_true(readers[i] >= 0);
    if (readers[i] == 0) {
      dbx_store_opts o = {.path = dir, .no_sync = 1};
      dbx_store *s = NULL;
      dbx_txn *t = NULL;
      if (dbx_store_open(&o, &s) != DBX_OK) _exit(11);
      if (dbx_store_read_begin(s, &t) != DBX_OK) _exit(12);
      write_byte(ready[1]);
      for (;;) pause(); /* killed while the read transaction is open */
    }
  }
  read_bytes(ready[0], STALE_READERS);
  for (int i = 0; i < STALE_READERS; i++) {
    assert_int_equal(kill(readers[i], SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(readers[i], &st, 0), readers[i]);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  }

  /* This process has never opened the environment: reader_check runs now. */
  dbx_store *s = open_at(dir, 0, 0);
  assert_int_equal(dbx_store_readers_cleared(s), STALE_READERS);
  dbx_table tb = table_of(s, "t");
  fill_arg fa = {.tb = tb, .n = 3};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  expect_str(s, tb, "k03", "value-3");
  /* a second open shares the handle and does not check again */
  dbx_store *again = open_at(dir, 0, 0);
  assert_ptr_equal(again, s);
  dbx_store_close(again);
  dbx_store_close(s);

  close(go[1]);
  int st = 0;
  assert_int_equal(waitpid(holder, &st, 0), holder);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  close(ready[0]);
  close(ready[1]);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Readers SIGKILLed while this process keeps the environment open (so the
 * check at open has already run and found nothing): every page freed after
 * their snapshot stays pinned, and a map whose ceiling is its initial size
 * fills with rewrites of the same few keys unless the store clears the dead
 * readers when the map is full. It must, and keep committing. */
static void test_store_stale_readers_cleared_when_full(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  /* The readers fork before this process opens the environment, so each
   * opens its own (an inherited handle must not be used after fork). */
  pid_t readers[STALE_READERS];
  for (int i = 0; i < STALE_READERS; i++) {
    readers[i] = fork();
    assert_true(readers[i] >= 0);
    if (readers[i] == 0) {
      dbx_store_opts o = {.path = dir, .map_size_bytes = 128 << 10, .no_sync = 1};
      dbx_store *cs = NULL;
      dbx_txn *t = NULL;
      if (dbx_store_open(&o, &cs) != DBX_OK) _exit(11);
      if (dbx_store_read_begin(cs, &t) != DBX_OK) _exit(12);
      write_byte(ready[1]);
      for (;;) pause();
    }
  }
  read_bytes(ready[0], STALE_READERS);
  dbx_store *s = open_at(dir, 128 << 10, 128 << 10); /* readers alive: none cleared */
  assert_int_equal(dbx_store_readers_cleared(s), 0);
  dbx_table tb = table_of(s, "t");
  fill_arg fa = {.tb = tb, .n = 8, .vlen = 1024};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  for (int i = 0; i < STALE_READERS; i++) {
    assert_int_equal(kill(readers[i], SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(readers[i], &st, 0), readers[i]);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  }
  for (int round = 0; round < 400; round++) {
    dbx_err e = dbx_store_write(s, fill_fn, &fa);
    if (e != DBX_OK) fail_msg("rewrite %d: %s: %s", round, dbx_err_name(e), dbx_store_errmsg(s));
  }
  assert_int_equal(dbx_store_readers_cleared(s), STALE_READERS);
  assert_int_equal(dbx_store_map_size(s), 128 << 10); /* pages reused, never grown */
  close(ready[0]);
  close(ready[1]);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Child: opens at 64 KiB, waits for the parent to grow the map past it, then
 * reads (read_first) or writes first; both must adopt the new size. */
static void resized_child(const char *dir, int read_first, int ready_w, int go_r) {
  dbx_store_opts o = {.path = dir, .map_size_bytes = 64 * KIB, .no_sync = 1};
  dbx_store *s = NULL;
  dbx_table tb = 0;
  if (dbx_store_open(&o, &s) != DBX_OK) _exit(20);
  if (dbx_store_table(s, "t", &tb) != DBX_OK) _exit(21);
  write_byte(ready_w);
  char b;
  if (read(go_r, &b, 1) != 1) _exit(22);
  fill_arg fa = {.tb = tb, .n = 1, .prefix = "child"};
  /* read_first 2: the page release is what first meets the grown map */
  if (read_first == 2 && dbx_store_release_pages(s) != DBX_OK) _exit(27);
  if (!read_first && dbx_store_write(s, fill_fn, &fa) != DBX_OK) _exit(23);
  dbx_txn *t = NULL;
  dbx_val v = {0};
  if (dbx_store_read_begin(s, &t) != DBX_OK) _exit(24);
  if (dbx_store_get(t, tb, "big32", 5, &v) != DBX_OK || v.size != 64 * KIB) _exit(25);
  dbx_store_txn_abort(t);
  if (read_first && dbx_store_write(s, fill_fn, &fa) != DBX_OK) _exit(26);
  dbx_store_close(s);
  _exit(0);
}

static void run_resized(int read_first) {
  char *dir = dbx_test_tmpdir("dbx-store");
  int ready[2], go[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(go), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(go[1]);
    resized_child(dir, read_first, ready[1], go[0]);
  }
  close(go[0]);
  read_bytes(ready[0], 1);
  dbx_store *s = open_at(dir, 64 * KIB, 0);
  dbx_table tb = table_of(s, "t");
  fill_arg big = {.tb = tb, .n = 32, .vlen = 64 * KIB, .prefix = "big"}; /* 2 MiB */
  assert_int_equal(dbx_store_write(s, fill_fn, &big), DBX_OK);
  assert_true(dbx_store_map_size(s) >= 2 * MIB);
  write_byte(go[1]);
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  expect_str(s, tb, "child01", "value-1");
  dbx_store_close(s);
  close(go[1]);
  close(ready[0]);
  close(ready[1]);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_store_map_resized_by_other_process(void **state) {
  (void)state;
  run_resized(1);
  run_resized(0);
  run_resized(2); /* dbx_store_release_pages adopts the size too (it failed with MAP_RESIZED) */
}

/* ---- threads: readers while the map grows ---- */

typedef struct {
  dbx_store *s;
  dbx_table tb;
  atomic_int stop;
  atomic_int bad;
  atomic_int reads;
} reader_arg;

static void *reader_main(void *p) {
  reader_arg *a = p;
  while (!atomic_load(&a->stop)) {
    dbx_txn *t = NULL;
    if (dbx_store_read_begin(a->s, &t) != DBX_OK) {
      atomic_store(&a->bad, 1);
      break;
    }
    dbx_val v = {0};
    if (dbx_store_get(t, a->tb, "k01", 3, &v) != DBX_OK || v.size != 7 ||
        memcmp(v.data, "value-1", 7) != 0)
      atomic_store(&a->bad, 2);
    dbx_store_txn_abort(t);
    atomic_fetch_add(&a->reads, 1);
  }
  return NULL;
}

static void test_store_readers_during_growth(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 64 * KIB, 0);
  dbx_table tb = table_of(s, "t");
  fill_arg fa = {.tb = tb, .n = 1};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  reader_arg ra = {.s = s, .tb = tb};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, reader_main, &ra), 0);
  size_t before = dbx_store_map_size(s);
  while (atomic_load(&ra.reads) == 0 && !atomic_load(&ra.bad)) sched_yield(); /* readers live */
  for (int round = 0; round < 8; round++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "r%d-", round);
    fill_arg big = {.tb = tb, .n = 8, .vlen = 32 * KIB, .prefix = prefix};
    assert_int_equal(dbx_store_write(s, fill_fn, &big), DBX_OK);
  }
  atomic_store(&ra.stop, 1);
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  assert_int_equal(atomic_load(&ra.bad), 0);
  assert_true(dbx_store_map_size(s) > before);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Every value of a fill of n entries of vlen bytes reads back whole. */
static void expect_filled(dbx_store *s, dbx_table tb, int n, size_t vlen, const char *prefix) {
  dbx_txn *t = NULL;
  assert_int_equal(dbx_store_read_begin(s, &t), DBX_OK);
  for (int i = 1; i <= n; i++) {
    char k[32];
    snprintf(k, sizeof k, "%s%02d", prefix, i);
    dbx_val v;
    assert_int_equal(dbx_store_get(t, tb, k, strlen(k), &v), DBX_OK);
    assert_int_equal(v.size, vlen);
    const unsigned char *b = v.data;
    for (size_t j = 0; j < vlen; j += 512) assert_int_equal(b[j], 'a' + i % 26);
    assert_int_equal(b[vlen - 1], 'a' + i % 26);
  }
  dbx_store_txn_abort(t);
}

/* dbx_store_release_pages: the map's pages read so far leave the process's
 * resident set (they were all resident after reading 4 MiB), while a view
 * held across the call, and every value read again after it, keep their
 * bytes. */
static void test_store_release_pages_unmaps_and_keeps_data(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-store");
  dbx_store *s = open_at(dir, 16 * MIB, 0);
  assert_int_equal(dbx_store_release_pages(s), DBX_OK); /* no table yet: nothing to unmap */
  dbx_table tb = table_of(s, "t");
  fill_arg fa = {.tb = tb, .n = 64, .vlen = 64 * KIB, .prefix = "p"};
  assert_int_equal(dbx_store_write(s, fill_fn, &fa), DBX_OK);
  expect_filled(s, tb, 64, 64 * KIB, "p");
  long before = dbx_test_store_rss_kib(dir);
  assert_true(before >= 4000); /* 64 values of 64 KiB read through the map */

  dbx_txn *held = NULL; /* a reader holding a view across the call */
  assert_int_equal(dbx_store_read_begin(s, &held), DBX_OK);
  dbx_val hv;
  assert_int_equal(dbx_store_get(held, tb, "p07", 3, &hv), DBX_OK);
  assert_int_equal(((const unsigned char *)hv.data)[100], 'a' + 7);

  if (dbx_store_release_pages(s) != DBX_OK) fail_msg("release: %s", dbx_store_errmsg(s));
  long after = dbx_test_store_rss_kib(dir);
  assert_true(after < 64); /* was >= 4000 */

  const unsigned char *hb = hv.data;
  for (size_t j = 0; j < hv.size; j += 4096) assert_int_equal(hb[j], 'a' + 7);
  dbx_store_txn_abort(held);
  expect_filled(s, tb, 64, 64 * KIB, "p");
  assert_true(dbx_test_store_rss_kib(dir) >= 4000); /* read again: mapped again */
  fill_arg more = {.tb = tb, .n = 8, .vlen = 4 * KIB, .prefix = "q"}; /* writes go on as before */
  assert_int_equal(dbx_store_release_pages(s), DBX_OK);
  assert_int_equal(dbx_store_write(s, fill_fn, &more), DBX_OK);
  expect_filled(s, tb, 8, 4 * KIB, "q");
  expect_filled(s, tb, 64, 64 * KIB, "p");
  assert_int_equal(dbx_store_release_pages(NULL), DBX_EINVAL);
  dbx_store_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_put_get_del_cursor),
      cmocka_unit_test(test_store_same_path_shares_handle),
      cmocka_unit_test(test_store_data_survives_reopen),
      cmocka_unit_test(test_store_truncated_file_refused),
      cmocka_unit_test(test_store_map_grows_on_full),
      cmocka_unit_test(test_store_injected_map_full_reruns_fn),
      cmocka_unit_test(test_store_ceiling_full_then_recovers),
      cmocka_unit_test(test_store_fn_error_aborts),
      cmocka_unit_test(test_store_bad_args_einval),
      cmocka_unit_test(test_store_stale_readers_cleared_at_open),
      cmocka_unit_test(test_store_stale_readers_cleared_when_full),
      cmocka_unit_test(test_store_map_resized_by_other_process),
      cmocka_unit_test(test_store_readers_during_growth),
      cmocka_unit_test(test_store_release_pages_unmaps_and_keeps_data),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
