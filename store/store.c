/* store: durabox's only LMDB user (contract in store.h).
 *
 * Registry: one dbx_store per realpath per process (LMDB forbids opening one
 * environment twice in a process); a global mutex guards the list and the
 * reference counts. Each store has a write mutex (one dbx_store_write at a
 * time) and a "grow" rwlock: every transaction of this process, read or
 * write, holds it shared for its whole life; mdb_env_set_mapsize() (growth
 * after MDB_MAP_FULL, adoption after MDB_MAP_RESIZED) holds it exclusive,
 * because LMDB requires that no transaction of the process is active then.
 * A thread that holds a read transaction never waits for the exclusive lock
 * (it would wait for itself): it gets DBX_ESTORE instead.
 * A write transaction that saw any failed change is marked broken and is
 * always aborted, never committed (no MDB_BAD_TXN ever reaches a commit);
 * MAP_FULL marks it for growth, then fn runs again in a fresh transaction.
 * Error text: a few thread-local slots keyed by the store's unique id. */
#define _GNU_SOURCE /* realpath */
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/util.h"

#define MOD "store"
#define KEY_MAX 511
#define DEFAULT_MAP ((size_t)64 << 20)
#define DEFAULT_CEILING ((size_t)64 << 30)
#define RESIZE_RETRIES 16

struct dbx_store {
  dbx_store *next; /* registry list */
  char *path;      /* realpath, owned */
  MDB_env *env;
  int refs;                 /* guarded by reg_mu */
  uint64_t id;              /* unique per open; keys the error slots */
  size_t ceiling_bytes;     /* page-rounded */
  atomic_uint readers_cleared; /* stale reader slots cleared (open, growth, full table) */
  pthread_mutex_t write_mu;
  pthread_rwlock_t grow_lock;
};

struct dbx_txn {
  dbx_store *s;
  MDB_txn *mt;
  int write;
  int broken;       /* a change failed: never commit */
  dbx_err broken_rc;
  int map_full;     /* a change failed with MAP_FULL: grow and rerun */
  int user_aborted; /* dbx_store_txn_abort called on a write txn inside fn */
  dbx_cursor *cursors; /* open cursors, closed when the txn ends */
  dbx_txn *parent;     /* set for a child (nested) write transaction */
};

struct dbx_cursor {
  dbx_cursor *next, *prev;
  dbx_txn *t;
  MDB_cursor *mc;
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static dbx_store *reg_head;
static uint64_t reg_next_id = 1; /* guarded by reg_mu */
static atomic_int inject_map_full;

/* ---- error text ---- */

#define ERR_SLOTS 8
#define ERR_LEN 384
static _Thread_local struct {
  uint64_t id;
  char msg[ERR_LEN];
} err_slots[ERR_SLOTS];
static _Thread_local unsigned err_next;
static _Thread_local char open_err[ERR_LEN];
static _Thread_local int tl_reads; /* read txns open in this thread (any store) */

static void set_msg(const dbx_store *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_msg(const dbx_store *s, const char *fmt, ...) {
  unsigned i;
  for (i = 0; i < ERR_SLOTS; i++)
    if (err_slots[i].id == s->id) break;
  if (i == ERR_SLOTS) {
    i = err_next++ % ERR_SLOTS;
    err_slots[i].id = s->id;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_slots[i].msg, ERR_LEN, fmt, ap);
  va_end(ap);
}

static void set_open_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_open_msg(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(open_err, ERR_LEN, fmt, ap);
  va_end(ap);
}

const char *dbx_store_open_errmsg(void) { return open_err[0] ? open_err : "no error"; }

const char *dbx_store_errmsg(const dbx_store *s) {
  if (s == NULL) return "no store";
  for (unsigned i = 0; i < ERR_SLOTS; i++)
    if (err_slots[i].id == s->id) return err_slots[i].msg;
  return "no error";
}

/* Translate an LMDB or errno code; records "what: detail" on the store. */
static dbx_err lmdb_err(const dbx_store *s, int rc, const char *what) {
  if (rc == MDB_NOTFOUND) return DBX_ENOTFOUND;
  set_msg(s, "%s: %s", what, mdb_strerror(rc));
  switch (rc) {
    case MDB_MAP_FULL:
    case ENOSPC: return DBX_ESTOREFULL;
    case ENOMEM: return DBX_ENOMEM;
    case EINVAL: return DBX_EINVAL;
    case MDB_KEYEXIST: return DBX_EEXIST;
    default: return DBX_ESTORE;
  }
}

/* ---- open / close ---- */

static size_t page_round_up(size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  size_t p = pg > 0 ? (size_t)pg : 4096;
  return (n + p - 1) / p * p;
}

static size_t page_round_down(size_t n) {
  long pg = sysconf(_SC_PAGESIZE);
  size_t p = pg > 0 ? (size_t)pg : 4096;
  return n / p * p;
}

static size_t env_map_size(MDB_env *env) {
  MDB_envinfo info;
  if (mdb_env_info(env, &info) != 0) return 0;
  return info.me_mapsize;
}

/* An address inside the map of t's environment: the first key of LMDB's
 * main database (the tables' names), which a read-only transaction hands
 * out as a pointer into the map. NULL when the environment holds no table
 * yet (nothing of it worth unmapping) or on a failure (message set). */
static const void *map_address(dbx_txn *t, int *failed) {
  MDB_dbi main_dbi;
  MDB_cursor *c = NULL;
  MDB_val k, v;
  const void *addr = NULL;
  int rc = mdb_dbi_open(t->mt, NULL, 0, &main_dbi);
  if (rc == 0) rc = mdb_cursor_open(t->mt, main_dbi, &c);
  if (rc == 0) rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
  if (rc == 0) addr = k.mv_data;
  if (c) mdb_cursor_close(c);
  *failed = rc != 0 && rc != MDB_NOTFOUND;
  if (*failed) set_msg(t->s, "dbx_store_release_pages: reading %s: %s", t->s->path, mdb_strerror(rc));
  return addr;
}

/* madvise(MADV_DONTNEED) the mapping of this process that holds addr, an
 * address inside s's map, found in /proc/self/maps (LMDB names its map's
 * address only for a fixed map, and a file's device as stat(2) gives it
 * can differ from the one maps shows, as on btrfs). LMDB maps its file
 * once, so one mapping holds the whole map. 0, or -1 with the message set. */
static int unmap_holding(dbx_store *s, const void *addr) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (f == NULL) {
    set_msg(s, "dbx_store_release_pages: cannot read /proc/self/maps: %s", strerror(errno));
    return -1;
  }
  char line[512];
  int rc = -1, eol = 1;
  while (rc == -1 && fgets(line, sizeof line, f)) {
    int at_start = eol; /* a line longer than the buffer comes in pieces */
    eol = strchr(line, '\n') != NULL;
    uintptr_t lo, hi, a = (uintptr_t)addr;
    if (!at_start || sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || a < lo || a >= hi)
      continue;
    rc = 0;
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) {
      set_msg(s, "madvise(MADV_DONTNEED) of %s/data.mdb's map: %s", s->path, strerror(errno));
      rc = -2;
    }
  }
  fclose(f);
  if (rc == -1)
    set_msg(s, "dbx_store_release_pages: no mapping in /proc/self/maps holds %s/data.mdb's map",
            s->path);
  return rc == 0 ? 0 : -1;
}

dbx_err dbx_store_release_pages(dbx_store *s) {
  if (s == NULL) return DBX_EINVAL;
  /* a read transaction as any other: it adopts a map another process grew
   * and clears dead readers' slots, and it holds the grow lock shared, so
   * the map stays where it is until the end */
  dbx_txn *t = NULL;
  dbx_err err = dbx_store_read_begin(s, &t);
  if (err != DBX_OK) return err;
  int failed = 0;
  const void *addr = map_address(t, &failed);
  if (!failed && addr != NULL && unmap_holding(s, addr) != 0) failed = 1;
  dbx_store_txn_abort(t);
  return failed ? DBX_ESTORE : DBX_OK;
}

static void store_free(dbx_store *s) {
  if (s == NULL) return;
  if (s->env) mdb_env_close(s->env);
  pthread_mutex_destroy(&s->write_mu);
  pthread_rwlock_destroy(&s->grow_lock);
  free(s->path);
  free(s);
}

/* 0 when data.mdb holds every page its newest meta page says is used; else
 * -1 with the open message set. A shorter file (cut by a truncate, a partial
 * copy, a full disk under another tool) would be read through the map past
 * its end, and a read there is SIGBUS, not an error: so it is refused here.
 * The meta page is read before the length, so a commit by another process
 * in between only lengthens the file. */
static int check_length(MDB_env *env, const char *rp) {
  MDB_envinfo info;
  MDB_stat st;
  mdb_filehandle_t fd;
  struct stat fst;
  if (mdb_env_info(env, &info) != 0 || mdb_env_stat(env, &st) != 0 || mdb_env_get_fd(env, &fd) != 0 ||
      fstat(fd, &fst) != 0) {
    set_open_msg("%s: cannot read the length of data.mdb or its last page", rp);
    return -1;
  }
  uintmax_t need = ((uintmax_t)info.me_last_pgno + 1) * st.ms_psize;
  if ((uintmax_t)fst.st_size >= need) return 0;
  set_open_msg("%s: data.mdb is %ju bytes, shorter than the %ju its pages take (last page %ju of %u bytes): "
               "the file was cut short; restore it from a copy",
               rp, (uintmax_t)fst.st_size, need, (uintmax_t)info.me_last_pgno, st.ms_psize);
  return -1;
}

/* Create and open the environment for rp (a realpath); reg_mu held. */
static dbx_err store_create(const dbx_store_opts *o, const char *rp, dbx_store **out) {
  dbx_store *s = dbx_calloc(1, sizeof *s);
  if (s == NULL) {
    set_open_msg("out of memory opening %s", rp);
    return DBX_ENOMEM;
  }
  pthread_mutex_init(&s->write_mu, NULL);
  pthread_rwlock_init(&s->grow_lock, NULL);
  dbx_err err = DBX_ESTORE;
  const char *step = "mdb_env_create";
  int rc;
  s->path = dbx_strdup(rp);
  if (s->path == NULL) {
    set_open_msg("out of memory opening %s", rp);
    err = DBX_ENOMEM;
    goto fail;
  }
  size_t map = page_round_up(o->map_size_bytes ? o->map_size_bytes : DEFAULT_MAP);
  size_t ceil = page_round_down(o->map_ceiling_bytes ? o->map_ceiling_bytes : DEFAULT_CEILING);
  if (ceil < map) ceil = map;
  s->ceiling_bytes = ceil;
  rc = mdb_env_create(&s->env);
  if (rc != 0) goto lmdb_fail;
  step = "mdb_env_set_maxdbs";
  rc = mdb_env_set_maxdbs(s->env, o->max_tables ? o->max_tables : 32);
  if (rc != 0) goto lmdb_fail;
  step = "mdb_env_set_maxreaders";
  rc = mdb_env_set_maxreaders(s->env, o->max_readers ? o->max_readers : 510);
  if (rc != 0) goto lmdb_fail;
  step = "mdb_env_set_mapsize";
  rc = mdb_env_set_mapsize(s->env, map);
  if (rc != 0) goto lmdb_fail;
  step = "mdb_env_open";
  rc = mdb_env_open(s->env, rp, MDB_NOTLS | (o->no_sync ? MDB_NOSYNC : 0), 0600);
  if (rc != 0) goto lmdb_fail;
  if (check_length(s->env, rp) != 0) goto fail; /* DBX_ESTORE, said */
  int dead = 0;
  step = "mdb_reader_check";
  rc = mdb_reader_check(s->env, &dead);
  if (rc != 0) goto lmdb_fail;
  s->readers_cleared = (unsigned)dead;
  if (dead > 0)
    DBX_INFO(MOD, "%s: cleared %d stale reader slot(s) of dead processes", rp, dead);
  else
    DBX_DEBUG(MOD, "%s: no stale readers", rp);
  s->id = reg_next_id++;
  s->refs = 1;
  *out = s;
  return DBX_OK;
lmdb_fail:
  set_open_msg("%s %s: %s", step, rp, mdb_strerror(rc));
  err = rc == ENOMEM ? DBX_ENOMEM : DBX_ESTORE;
fail:
  store_free(s);
  return err;
}

dbx_err dbx_store_open(const dbx_store_opts *o, dbx_store **out) {
  if (out != NULL) *out = NULL;
  if (o == NULL || out == NULL) {
    set_open_msg("dbx_store_open: %s is NULL", o == NULL ? "opts" : "out");
    return DBX_EINVAL;
  }
  if (o->path == NULL || o->path[0] == '\0') {
    set_open_msg("dbx_store_open: path is NULL or empty");
    return DBX_EINVAL;
  }
  if (mkdir(o->path, 0700) != 0 && errno != EEXIST) {
    set_open_msg("mkdir %s: %s", o->path, strerror(errno));
    return DBX_ESTORE;
  }
  char rp[PATH_MAX];
  if (realpath(o->path, rp) == NULL) {
    set_open_msg("realpath %s: %s", o->path, strerror(errno));
    return DBX_ESTORE;
  }
  struct stat st;
  if (stat(rp, &st) != 0 || !S_ISDIR(st.st_mode)) {
    set_open_msg("%s is not a directory", rp);
    return DBX_EINVAL;
  }
  dbx_err err = DBX_OK;
  pthread_mutex_lock(&reg_mu);
  dbx_store *s;
  for (s = reg_head; s != NULL; s = s->next)
    if (strcmp(s->path, rp) == 0) break;
  if (s != NULL) {
    s->refs++;
  } else {
    err = store_create(o, rp, &s);
    if (err == DBX_OK) {
      s->next = reg_head;
      reg_head = s;
    }
  }
  pthread_mutex_unlock(&reg_mu);
  if (err == DBX_OK) *out = s;
  return err;
}

void dbx_store_close(dbx_store *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&reg_mu);
  int last = --s->refs == 0;
  if (last) {
    dbx_store **pp = &reg_head;
    while (*pp != NULL && *pp != s) pp = &(*pp)->next;
    if (*pp == s) *pp = s->next;
  }
  pthread_mutex_unlock(&reg_mu);
  if (last) store_free(s);
}

size_t dbx_store_map_size(dbx_store *s) { return s ? env_map_size(s->env) : 0; }

unsigned dbx_store_readers_cleared(const dbx_store *s) {
  return s ? atomic_load(&((dbx_store *)s)->readers_cleared) : 0;
}

/* Clear the reader slots of dead processes (a process killed while it held
 * a read transaction pins every page freed since its snapshot, and its slot
 * stays taken). Returns how many were cleared. Any thread, any lock state. */
static unsigned clear_stale_readers(dbx_store *s, const char *why) {
  int dead = 0;
  if (mdb_reader_check(s->env, &dead) != 0 || dead <= 0) return 0;
  atomic_fetch_add(&s->readers_cleared, (unsigned)dead);
  DBX_INFO(MOD, "%s: %s: cleared %d stale reader slot(s) of dead processes", s->path, why, dead);
  return (unsigned)dead;
}

/* ---- map size changes (grow lock held exclusive) ---- */

/* Take the grow lock exclusive; refuses when this thread holds a read txn. */
static dbx_err grow_lock_excl(dbx_store *s, const char *why) {
  if (tl_reads > 0) {
    set_msg(s, "%s: this thread holds a read transaction, so the map cannot change", why);
    return DBX_ESTORE;
  }
  pthread_rwlock_wrlock(&s->grow_lock);
  return DBX_OK;
}

/* Another process grew the map: adopt its size. */
static dbx_err adopt_resized(dbx_store *s) {
  dbx_err err = grow_lock_excl(s, "map resized by another process");
  if (err != DBX_OK) return err;
  int rc = mdb_env_set_mapsize(s->env, 0);
  pthread_rwlock_unlock(&s->grow_lock);
  if (rc != 0) return lmdb_err(s, rc, "mdb_env_set_mapsize(0) after MDB_MAP_RESIZED");
  DBX_DEBUG(MOD, "%s: adopted map size %zu from another process", s->path, env_map_size(s->env));
  return DBX_OK;
}

/* Double the map, capped at the ceiling; DBX_ESTOREFULL once at the ceiling.
 * First clears stale readers: when it cleared any, the pages they pinned are
 * free again, so the caller reruns its transaction without growing. */
static dbx_err grow(dbx_store *s) {
  if (clear_stale_readers(s, "map full") > 0) return DBX_OK;
  dbx_err err = grow_lock_excl(s, "map full");
  if (err != DBX_OK) return err;
  size_t cur = env_map_size(s->env);
  if (cur >= s->ceiling_bytes) {
    pthread_rwlock_unlock(&s->grow_lock);
    set_msg(s, "storage full: map at %zu bytes, ceiling %zu", cur, s->ceiling_bytes);
    return DBX_ESTOREFULL;
  }
  size_t next = cur > s->ceiling_bytes / 2 ? s->ceiling_bytes : cur * 2;
  int rc = mdb_env_set_mapsize(s->env, next);
  pthread_rwlock_unlock(&s->grow_lock);
  if (rc != 0) return lmdb_err(s, rc, "mdb_env_set_mapsize");
  DBX_INFO(MOD, "%s: map grew from %zu to %zu bytes", s->path, cur, env_map_size(s->env));
  return DBX_OK;
}

/* ---- transactions ---- */

static void cursors_release(dbx_txn *t, int lmdb_closes) {
  while (t->cursors != NULL) {
    dbx_cursor *c = t->cursors;
    t->cursors = c->next;
    if (!lmdb_closes) mdb_cursor_close(c->mc);
    free(c);
  }
}

dbx_err dbx_store_read_begin(dbx_store *s, dbx_txn **out) {
  if (out != NULL) *out = NULL;
  if (s == NULL || out == NULL) return DBX_EINVAL;
  dbx_txn *t = dbx_calloc(1, sizeof *t);
  if (t == NULL) {
    set_msg(s, "out of memory beginning a read transaction");
    return DBX_ENOMEM;
  }
  t->s = s;
  for (int attempt = 0;; attempt++) {
    pthread_rwlock_rdlock(&s->grow_lock);
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &t->mt);
    if (rc == 0) break;
    pthread_rwlock_unlock(&s->grow_lock);
    dbx_err err;
    if (rc == MDB_MAP_RESIZED && attempt < RESIZE_RETRIES) {
      err = adopt_resized(s);
      if (err == DBX_OK) continue;
    } else if (rc == MDB_READERS_FULL && attempt < RESIZE_RETRIES &&
               clear_stale_readers(s, "reader table full") > 0) {
      continue;
    } else {
      err = lmdb_err(s, rc, "mdb_txn_begin(read)");
    }
    free(t);
    return err;
  }
  tl_reads++;
  *out = t;
  return DBX_OK;
}

void dbx_store_txn_abort(dbx_txn *t) {
  if (t == NULL) return;
  if (t->parent) { /* a child: end it now; its parent goes on */
    cursors_release(t, 1);
    mdb_txn_abort(t->mt);
    if (t->map_full) t->parent->map_full = 1; /* grow and rerun the whole write */
    free(t);
    return;
  }
  if (t->write) { /* owned by dbx_store_write: it aborts once fn returns */
    t->user_aborted = 1;
    return;
  }
  cursors_release(t, 0);
  mdb_txn_abort(t->mt);
  pthread_rwlock_unlock(&t->s->grow_lock);
  tl_reads--;
  free(t);
}

/* Ends the write txn t (abort), releasing cursors and the shared lock. */
static void write_end_abort(dbx_txn *t) {
  cursors_release(t, 1);
  mdb_txn_abort(t->mt);
  t->mt = NULL;
  pthread_rwlock_unlock(&t->s->grow_lock);
}

/* LMDB reports a short write as EIO (only a write that wrote nothing is
 * ENOSPC). A short write fills the file system to its last block, so when
 * the commit failed with EIO and (almost) no space is left, the cause is a
 * full disk: say so, and let the caller treat it as retryable. */
static int disk_full(dbx_store *s) {
  struct statvfs v;
  if (statvfs(s->path, &v) != 0) return 0;
  unsigned long long avail = (unsigned long long)v.f_bavail * v.f_frsize;
  long pg = sysconf(_SC_PAGESIZE);
  if (avail >= 64ull * (unsigned long long)(pg > 0 ? pg : 4096)) return 0; /* one LMDB write batch */
  set_msg(s, "mdb_txn_commit: no space left on device (a short write; %llu bytes free in %s)", avail,
          s->path);
  return 1;
}

static dbx_err write_commit(dbx_store *s, dbx_store_write_fn fn, void *arg, int lazy_meta);

dbx_err dbx_store_write(dbx_store *s, dbx_store_write_fn fn, void *arg) {
  return write_commit(s, fn, arg, 0);
}

dbx_err dbx_store_write_lazy_meta(dbx_store *s, dbx_store_write_fn fn, void *arg) {
  return write_commit(s, fn, arg, 1);
}

/* lazy_meta: this commit's meta page is written without O_DSYNC
 * (MDB_NOMETASYNC, set on the environment only around this commit: every
 * write of this process holds write_mu, and no other process writes this
 * file, so no other commit sees the flag). */
static dbx_err write_commit(dbx_store *s, dbx_store_write_fn fn, void *arg, int lazy_meta) {
  if (s == NULL) return DBX_EINVAL;
  if (fn == NULL) {
    set_msg(s, "dbx_store_write: fn is NULL");
    return DBX_EINVAL;
  }
  dbx_err result = DBX_OK;
  int resized = 0;
  pthread_mutex_lock(&s->write_mu);
  for (;;) {
    dbx_txn t;
    memset(&t, 0, sizeof t);
    t.s = s;
    t.write = 1;
    pthread_rwlock_rdlock(&s->grow_lock);
    int rc = mdb_txn_begin(s->env, NULL, 0, &t.mt);
    if (rc != 0) {
      pthread_rwlock_unlock(&s->grow_lock);
      if (rc == MDB_MAP_RESIZED && resized++ < RESIZE_RETRIES) {
        result = adopt_resized(s);
        if (result == DBX_OK) continue;
      } else {
        result = lmdb_err(s, rc, "mdb_txn_begin(write)");
      }
      break;
    }
    dbx_err frc = fn(&t, arg);
    if (t.map_full) { /* whatever fn returned: grow and run it again */
      write_end_abort(&t);
      result = grow(s);
      if (result == DBX_OK) continue;
      break;
    }
    if (frc != DBX_OK || t.broken || t.user_aborted) {
      write_end_abort(&t);
      if (frc != DBX_OK)
        result = frc;
      else if (t.broken)
        result = t.broken_rc; /* fn ignored a failed change; its message stands */
      else {
        set_msg(s, "write transaction aborted by its function");
        result = DBX_ECANCELED;
      }
      break;
    }
    cursors_release(&t, 1);
    if (lazy_meta) mdb_env_set_flags(s->env, MDB_NOMETASYNC, 1);
    rc = mdb_txn_commit(t.mt); /* ends the txn, success or not */
    if (lazy_meta) mdb_env_set_flags(s->env, MDB_NOMETASYNC, 0);
    pthread_rwlock_unlock(&s->grow_lock);
    if (rc == 0) {
      result = DBX_OK;
      break;
    }
    if (rc == MDB_MAP_FULL) {
      result = grow(s);
      if (result == DBX_OK) continue;
      break;
    }
    if (rc == EIO && disk_full(s)) {
      result = DBX_ESTOREFULL;
      break;
    }
    result = lmdb_err(s, rc, "mdb_txn_commit");
    if (result != DBX_ESTOREFULL && result != DBX_ENOMEM) result = DBX_ESTORE;
    break;
  }
  pthread_mutex_unlock(&s->write_mu);
  return result;
}

/* ---- tables ---- */

typedef struct {
  const char *name;
  MDB_dbi dbi;
} table_arg;

static dbx_err table_open_fn(dbx_txn *t, void *arg) {
  table_arg *a = arg;
  int rc = mdb_dbi_open(t->mt, a->name, MDB_CREATE, &a->dbi);
  if (rc == MDB_MAP_FULL) t->map_full = 1;
  if (rc != 0) return lmdb_err(t->s, rc, "mdb_dbi_open");
  return DBX_OK;
}

dbx_err dbx_store_table(dbx_store *s, const char *name, dbx_table *out) {
  if (s == NULL) return DBX_EINVAL;
  if (name == NULL || name[0] == '\0' || out == NULL) {
    set_msg(s, "dbx_store_table: %s", out == NULL ? "out is NULL" : "table name is NULL or empty");
    return DBX_EINVAL;
  }
  if (strlen(name) > KEY_MAX) {
    set_msg(s, "dbx_store_table: table name longer than %d bytes", KEY_MAX);
    return DBX_EINVAL;
  }
  table_arg a = {name, 0};
  dbx_err err = dbx_store_write(s, table_open_fn, &a);
  if (err == DBX_OK) *out = (dbx_table)a.dbi;
  return err;
}

/* ---- point operations ---- */

/* Validates txn, table and key; records the problem on the store. */
static dbx_err check_args(dbx_txn *t, dbx_table tb, const void *key, size_t klen, const char *op) {
  if (t == NULL) return DBX_EINVAL;
  if (t->write && t->user_aborted) {
    set_msg(t->s, "%s: transaction already aborted", op);
    return DBX_ESTATE;
  }
  if (t->broken) {
    set_msg(t->s, "%s: an earlier change in this transaction failed", op);
    return t->broken_rc;
  }
  if (tb < 2) { /* 0 and 1 are LMDB's free-page and main databases */
    set_msg(t->s, "%s: table handle %u is not from dbx_store_table", op, tb);
    return DBX_EINVAL;
  }
  if (key == NULL) {
    set_msg(t->s, "%s: key is NULL", op);
    return DBX_EINVAL;
  }
  if (klen == 0) {
    set_msg(t->s, "%s: key is empty (keys are 1..%d bytes)", op, KEY_MAX);
    return DBX_EINVAL;
  }
  if (klen > KEY_MAX) {
    set_msg(t->s, "%s: key is %zu bytes, over the %d-byte limit", op, klen, KEY_MAX);
    return DBX_EINVAL;
  }
  return DBX_OK;
}

/* A change failed inside a write txn: remember it so the txn is never committed. */
static dbx_err change_failed(dbx_txn *t, int rc, const char *op) {
  dbx_err err = lmdb_err(t->s, rc, op);
  if (rc == MDB_NOTFOUND) return err; /* a normal outcome; the txn stays usable */
  if (rc == EINVAL || rc == MDB_BAD_DBI) return err; /* rejected before any change */
  if (rc == MDB_MAP_FULL) t->map_full = 1;
  t->broken = 1;
  t->broken_rc = err;
  return err;
}

static int take_injected_map_full(void) {
  int n = atomic_load(&inject_map_full);
  while (n > 0)
    if (atomic_compare_exchange_weak(&inject_map_full, &n, n - 1)) return 1;
  return 0;
}

void dbx_store_test_inject_map_full(int n) { atomic_store(&inject_map_full, n > 0 ? n : 0); }

dbx_err dbx_store_get(dbx_txn *t, dbx_table tb, const void *key, size_t klen, dbx_val *out) {
  dbx_err err = check_args(t, tb, key, klen <= KEY_MAX ? klen : 1, "get");
  if (err != DBX_OK) return err;
  if (out == NULL) {
    set_msg(t->s, "get: out is NULL");
    return DBX_EINVAL;
  }
  if (klen > KEY_MAX) return DBX_ENOTFOUND; /* longer than any key put can store */
  MDB_val k = {klen, (void *)key}, v;
  int rc = mdb_get(t->mt, tb, &k, &v);
  if (rc != 0) return lmdb_err(t->s, rc, "mdb_get");
  out->data = v.mv_data;
  out->size = v.mv_size;
  return DBX_OK;
}

dbx_err dbx_store_put(dbx_txn *t, dbx_table tb, const void *key, size_t klen, const void *val,
                      size_t vlen) {
  dbx_err err = check_args(t, tb, key, klen, "put");
  if (err != DBX_OK) return err;
  if (!t->write) {
    set_msg(t->s, "put: read-only transaction");
    return DBX_EINVAL;
  }
  if (val == NULL && vlen > 0) {
    set_msg(t->s, "put: value is NULL with length %zu", vlen);
    return DBX_EINVAL;
  }
  if (take_injected_map_full()) return change_failed(t, MDB_MAP_FULL, "mdb_put (injected)");
  MDB_val k = {klen, (void *)key}, v = {vlen, (void *)val};
  int rc = mdb_put(t->mt, tb, &k, &v, 0);
  if (rc != 0) return change_failed(t, rc, "mdb_put");
  return DBX_OK;
}

dbx_err dbx_store_del(dbx_txn *t, dbx_table tb, const void *key, size_t klen) {
  dbx_err err = check_args(t, tb, key, klen, "del");
  if (err != DBX_OK) return err;
  if (!t->write) {
    set_msg(t->s, "del: read-only transaction");
    return DBX_EINVAL;
  }
  MDB_val k = {klen, (void *)key};
  int rc = mdb_del(t->mt, tb, &k, NULL);
  if (rc != 0) return change_failed(t, rc, "mdb_del");
  return DBX_OK;
}

/* ---- cursors ---- */

dbx_err dbx_store_cursor_open(dbx_txn *t, dbx_table tb, dbx_cursor **out) {
  if (out != NULL) *out = NULL;
  if (t == NULL) return DBX_EINVAL;
  if (out == NULL || tb < 2) {
    set_msg(t->s, "cursor_open: %s", out == NULL ? "out is NULL" : "table handle is not from dbx_store_table");
    return DBX_EINVAL;
  }
  if (t->write && t->user_aborted) {
    set_msg(t->s, "cursor_open: transaction already aborted");
    return DBX_ESTATE;
  }
  dbx_cursor *c = dbx_calloc(1, sizeof *c);
  if (c == NULL) {
    set_msg(t->s, "out of memory opening a cursor");
    return DBX_ENOMEM;
  }
  int rc = mdb_cursor_open(t->mt, tb, &c->mc);
  if (rc != 0) {
    free(c);
    return lmdb_err(t->s, rc, "mdb_cursor_open");
  }
  c->t = t;
  c->next = t->cursors;
  if (t->cursors) t->cursors->prev = c;
  t->cursors = c;
  *out = c;
  return DBX_OK;
}

void dbx_store_cursor_close(dbx_cursor *c) {
  if (c == NULL) return;
  dbx_txn *t = c->t;
  if (c->prev)
    c->prev->next = c->next;
  else
    t->cursors = c->next;
  if (c->next) c->next->prev = c->prev;
  mdb_cursor_close(c->mc);
  free(c);
}

static dbx_err cursor_get(dbx_cursor *c, MDB_val *k, MDB_val *v, MDB_cursor_op op,
                          dbx_val *ko, dbx_val *vo) {
  int rc = mdb_cursor_get(c->mc, k, v, op);
  if (rc != 0) return lmdb_err(c->t->s, rc, "mdb_cursor_get");
  if (ko) {
    ko->data = k->mv_data;
    ko->size = k->mv_size;
  }
  if (vo) {
    vo->data = v->mv_data;
    vo->size = v->mv_size;
  }
  return DBX_OK;
}

static dbx_err check_seek_key(dbx_cursor *c, const void *key, size_t klen, const char *op) {
  if (c == NULL) return DBX_EINVAL;
  if (klen > 0 && key == NULL) {
    set_msg(c->t->s, "%s: key is NULL with length %zu", op, klen);
    return DBX_EINVAL;
  }
  return DBX_OK;
}

/* A seek key longer than any stored key (KEY_MAX) orders as its first
 * KEY_MAX bytes T do, except against T itself, which is smaller: so the
 * first key >= it is the first key >= T unless that is T, then the next;
 * and the last key <= it is the last key <= T. */

dbx_err dbx_store_cursor_seek(dbx_cursor *c, const void *key, size_t klen, dbx_val *k,
                              dbx_val *v) {
  dbx_err err = check_seek_key(c, key, klen, "cursor_seek");
  if (err != DBX_OK) return err;
  MDB_val mk = {klen > KEY_MAX ? KEY_MAX : klen, (void *)key}, mv;
  if (klen <= KEY_MAX) return cursor_get(c, &mk, &mv, klen ? MDB_SET_RANGE : MDB_FIRST, k, v);
  dbx_err rc = cursor_get(c, &mk, &mv, MDB_SET_RANGE, k, v);
  if (rc == DBX_OK && mk.mv_size == KEY_MAX && memcmp(mk.mv_data, key, KEY_MAX) == 0)
    rc = cursor_get(c, &mk, &mv, MDB_NEXT, k, v);
  return rc;
}

dbx_err dbx_store_cursor_seek_le(dbx_cursor *c, const void *key, size_t klen, dbx_val *k,
                                 dbx_val *v) {
  dbx_err err = check_seek_key(c, key, klen, "cursor_seek_le");
  if (err != DBX_OK) return err;
  if (klen > KEY_MAX) klen = KEY_MAX; /* the same answer (above) */
  MDB_val mk = {klen, (void *)key}, mv;
  if (klen == 0) return cursor_get(c, &mk, &mv, MDB_LAST, k, v);
  int rc = mdb_cursor_get(c->mc, &mk, &mv, MDB_SET_RANGE);
  if (rc == MDB_NOTFOUND) return cursor_get(c, &mk, &mv, MDB_LAST, k, v); /* all keys < key */
  if (rc != 0) return lmdb_err(c->t->s, rc, "mdb_cursor_get");
  if (mk.mv_size == klen && memcmp(mk.mv_data, key, klen) == 0)
    return cursor_get(c, &mk, &mv, MDB_GET_CURRENT, k, v);
  return cursor_get(c, &mk, &mv, MDB_PREV, k, v); /* first key > key: step back */
}

dbx_err dbx_store_cursor_next(dbx_cursor *c, dbx_val *k, dbx_val *v) {
  if (c == NULL) return DBX_EINVAL;
  MDB_val mk, mv;
  return cursor_get(c, &mk, &mv, MDB_NEXT, k, v);
}

dbx_err dbx_store_cursor_prev(dbx_cursor *c, dbx_val *k, dbx_val *v) {
  if (c == NULL) return DBX_EINVAL;
  MDB_val mk, mv;
  return cursor_get(c, &mk, &mv, MDB_PREV, k, v);
}

dbx_err dbx_store_cursor_del(dbx_cursor *c) {
  if (c == NULL) return DBX_EINVAL;
  dbx_txn *t = c->t;
  if (!t->write) {
    set_msg(t->s, "cursor_del: read-only transaction");
    return DBX_EINVAL;
  }
  if (t->broken) {
    set_msg(t->s, "cursor_del: an earlier change in this transaction failed");
    return t->broken_rc;
  }
  int rc = mdb_cursor_del(c->mc, 0);
  if (rc != 0) return change_failed(t, rc, "mdb_cursor_del");
  return DBX_OK;
}

dbx_err dbx_store_txn_child_begin(dbx_txn *parent, dbx_txn **out) {
  if (parent == NULL || out == NULL || !parent->write) return DBX_EINVAL;
  *out = NULL;
  dbx_txn *t = dbx_calloc(1, sizeof *t);
  if (t == NULL) return DBX_ENOMEM;
  t->s = parent->s;
  t->write = 1;
  t->parent = parent;
  int rc = mdb_txn_begin(parent->s->env, parent->mt, 0, &t->mt);
  if (rc != 0) {
    free(t);
    return change_failed(parent, rc, "mdb_txn_begin(child)");
  }
  *out = t;
  return DBX_OK;
}

dbx_err dbx_store_txn_child_commit(dbx_txn *t) {
  if (t == NULL || t->parent == NULL) return DBX_EINVAL;
  if (t->broken) { /* a change failed: the child's writes must not reach the parent */
    dbx_err err = t->broken_rc;
    dbx_store_txn_abort(t);
    return err;
  }
  dbx_txn *parent = t->parent;
  cursors_release(t, 1);
  int rc = mdb_txn_commit(t->mt);
  free(t);
  if (rc != 0) return change_failed(parent, rc, "mdb_txn_commit(child)");
  return DBX_OK;
}
