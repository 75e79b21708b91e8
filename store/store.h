/* store: the only room that touches LMDB.
 *
 * One environment per path per process: opening the same path twice returns
 * the same handle with a reference count (LMDB forbids two environments on
 * one file in a process). Named tables are LMDB named databases.
 *
 * Writes go through dbx_store_write(): it begins a write transaction, calls
 * the caller's function, and commits. If LMDB reports MDB_MAP_FULL, either
 * inside the function (a put) or at commit, the transaction is aborted, the
 * map grows (doubling, up to opts.map_ceiling_bytes) and the WHOLE function
 * runs again in a new transaction; so the function must keep all its effects
 * inside the transaction (or reset its own side state when it starts).
 * Past the ceiling it returns DBX_ESTOREFULL ("storage full"), the store stays
 * readable and writable for smaller transactions; it never leaves a
 * transaction in MDB_BAD_TXN. ENOSPC from the disk is DBX_ESTOREFULL as well,
 * and so is a commit that failed with a short write (LMDB's EIO) on a file
 * system with less than 64 pages free ("no space left on device").
 *
 * Durability: commits are synced (no MDB_NOSYNC, no MDB_WRITEMAP) unless
 * opts.no_sync is set (benchmarks and tests that say so). mdb_reader_check()
 * runs at open, when a write finds the map full and when a read finds the
 * reader table full, clearing read slots of dead processes (a live process
 * keeps serving after readers were SIGKILLed while holding transactions).
 *
 * Threading: a dbx_store may be used from any number of threads. A
 * transaction belongs to the thread that began it. Read transactions may run
 * concurrently with one writer; growing the map waits for this process's
 * readers to finish (an rwlock), so keep read transactions short. A thread
 * that still holds a read transaction when its own write needs the map to
 * grow gets DBX_ESTORE instead of waiting for itself.
 *
 * Errors: DBX_OK; DBX_ENOTFOUND (a normal outcome for get and seek);
 * DBX_ESTOREFULL; DBX_ESTORE (anything else, detail in dbx_store_errmsg);
 * DBX_EINVAL for bad arguments (put or del of a key over 511 bytes, unknown
 * table). */
#ifndef DBX_STORE_STORE_H
#define DBX_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct dbx_store dbx_store;
typedef struct dbx_txn dbx_txn;
typedef struct dbx_cursor dbx_cursor;
typedef unsigned int dbx_table; /* handle from dbx_store_table(); valid for the store's life */

typedef struct {
  const char *path;            /* directory; created (mode 0700) if missing. Borrowed. */
  size_t map_size_bytes;       /* initial map size; 0 = 64 MiB */
  size_t map_ceiling_bytes;    /* growth stops here; 0 = 64 GiB */
  unsigned int max_tables;     /* named tables; 0 = 32 */
  unsigned int max_readers;    /* 0 = 510 */
  int no_sync;                 /* 1 = MDB_NOSYNC (not durable; benchmarks/tests only) */
} dbx_store_opts;

/* A borrowed view of bytes inside the store, valid until its transaction ends. */
typedef struct {
  const void *data;
  size_t size;
} dbx_val;

/* Open (or share) the environment at o->path. *out: free with dbx_store_close.
 * Sharing is by realpath; the first opener's options (sizes, no_sync) win.
 * Returns DBX_OK, DBX_EINVAL, DBX_ESTORE (message via dbx_store_open_errmsg;
 * among them a data.mdb shorter than the pages its meta page names, which
 * reading through the map would turn into SIGBUS). */
dbx_err dbx_store_open(const dbx_store_opts *o, dbx_store **out);
/* Text of the last dbx_store_open failure in this thread; static or thread-local, never NULL. */
const char *dbx_store_open_errmsg(void);
/* Drop one reference; the environment closes with the last. Accepts NULL.
 * No transaction of this handle may be open. */
void dbx_store_close(dbx_store *s);
/* Detail of the last failure on this store (thread-local to the caller); never NULL. */
const char *dbx_store_errmsg(const dbx_store *s);
/* Current map size in bytes (for tests and metrics). */
size_t dbx_store_map_size(dbx_store *s);
/* Unmap the pages of the store this process has read (Linux: madvise
 * MADV_DONTNEED over the whole map). Every page LMDB reads is read through
 * its map, and a page once read stays in the process's resident set (RSS)
 * for good, so a process that writes a store keyed at random ends up with
 * the whole file resident, however little of it it needs again. The pages
 * stay in the kernel's page cache; a later read of one maps it again (a
 * minor fault, no I/O unless the kernel has reclaimed it meanwhile) with
 * the same bytes. Nothing stored changes: the map is read-only (writes go
 * through write(2)), so only this process's page table entries go. The map
 * is found in /proc/self/maps by an address inside it, read in a short
 * read transaction (dbx_store_read_begin: it takes a reader slot, adopts a
 * map another process grew), which holds on any file system.
 * Transactions of any thread may run meanwhile, and the views they hold
 * stay valid (their next use maps the page again); a map being grown waits
 * (the grow lock, shared). Returns DBX_OK, DBX_EINVAL (s NULL), or what
 * dbx_store_read_begin returns, or DBX_ESTORE (the map could not be read or
 * found, or madvise failed); the message via dbx_store_errmsg. */
dbx_err dbx_store_release_pages(dbx_store *s);
/* How many reader slots of dead processes mdb_reader_check() cleared in
 * this process's handle (for tests and metrics): at open (a later
 * dbx_store_open of the same path shares the handle and does not check
 * again), and while serving: whenever a write finds the map full (before it
 * grows it, so pages pinned by dead readers are reused first) and whenever a
 * read finds the reader table full. Any thread. */
unsigned dbx_store_readers_cleared(const dbx_store *s);

/* Open or create the named table. Call before any transaction is active in
 * this thread; handles are shared by every thread. */
dbx_err dbx_store_table(dbx_store *s, const char *name, dbx_table *out);

/* Read-only transaction. Ends with dbx_store_txn_abort (commit also ends it). */
dbx_err dbx_store_read_begin(dbx_store *s, dbx_txn **out);

typedef dbx_err (*dbx_store_write_fn)(dbx_txn *txn, void *arg);
/* Run fn inside a write transaction and commit it durably (see above). If fn
 * returns anything but DBX_OK the transaction is aborted and that code is
 * returned; fn may run more than once (map growth). One writer at a time:
 * concurrent callers wait. */
dbx_err dbx_store_write(dbx_store *s, dbx_store_write_fn fn, void *arg);
/* As dbx_store_write, but the commit does not wait for its meta page to reach
 * the disk (LMDB's MDB_NOMETASYNC for this one commit): the data pages are
 * synced as usual, so the database stays intact through a machine crash,
 * which may undo this commit until a later synced commit (or the OS) writes
 * the meta page; a process crash loses nothing. Only for data that another
 * party holds durably (the worker's copy of history the service holds). */
dbx_err dbx_store_write_lazy_meta(dbx_store *s, dbx_store_write_fn fn, void *arg);

/* End a read transaction (or abort a write one from inside dbx_store_write's
 * caller; never needed there). Accepts NULL. */
void dbx_store_txn_abort(dbx_txn *t);

/* Child (nested) write transactions, inside dbx_store_write's fn: changes
 * made in the child reach the parent only if the child commits; aborting it
 * (dbx_store_txn_abort) drops them and leaves the parent usable. The parent
 * must not be used while its child is open. A MAP_FULL inside the child makes
 * the whole write grow the map and rerun fn, as in the parent.
 * Returns DBX_OK, DBX_EINVAL (parent not a write txn), DBX_ESTORE, DBX_ESTOREFULL. */
dbx_err dbx_store_txn_child_begin(dbx_txn *parent, dbx_txn **out);
/* Commit a child into its parent and free it (also on failure). */
dbx_err dbx_store_txn_child_commit(dbx_txn *t);

/* Point lookups and changes. Keys are 1..511 bytes; values any size.
 * get: DBX_OK with *out a borrowed view, or DBX_ENOTFOUND (also for a key
 * over 511 bytes, which no put stores). */
dbx_err dbx_store_get(dbx_txn *t, dbx_table tb, const void *key, size_t klen, dbx_val *out);
dbx_err dbx_store_put(dbx_txn *t, dbx_table tb, const void *key, size_t klen, const void *val,
                      size_t vlen);
/* Delete: DBX_OK, or DBX_ENOTFOUND when the key is absent. */
dbx_err dbx_store_del(dbx_txn *t, dbx_table tb, const void *key, size_t klen);

/* Cursors over a table in key order (memcmp). Close before the transaction ends
 * (a cursor still open then is released with it and must not be used again). */
dbx_err dbx_store_cursor_open(dbx_txn *t, dbx_table tb, dbx_cursor **out);
void dbx_store_cursor_close(dbx_cursor *c); /* accepts NULL */
/* Position at the first key >= key (klen 0: the first key). DBX_ENOTFOUND past the end.
 * A key may be longer than the 511 bytes a stored one has (a prefix built
 * from long names): it orders as memcmp would. */
dbx_err dbx_store_cursor_seek(dbx_cursor *c, const void *key, size_t klen, dbx_val *k, dbx_val *v);
/* Position at the last key <= key (klen 0: the last key). DBX_ENOTFOUND before the start. */
dbx_err dbx_store_cursor_seek_le(dbx_cursor *c, const void *key, size_t klen, dbx_val *k,
                                 dbx_val *v);
dbx_err dbx_store_cursor_next(dbx_cursor *c, dbx_val *k, dbx_val *v);
dbx_err dbx_store_cursor_prev(dbx_cursor *c, dbx_val *k, dbx_val *v);
/* Delete the entry under the cursor (write transactions only). */
dbx_err dbx_store_cursor_del(dbx_cursor *c);

/* Test hook: make the next n puts in this process fail as MDB_MAP_FULL would,
 * to exercise growth without filling a disk. 0 disables. */
void dbx_store_test_inject_map_full(int n);

#endif
