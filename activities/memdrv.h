/* The memory driver: the whole driver interface (driver.h) over sandboxes
 * held in memory, for tests of the layers above drivers.
 *
 * A sandbox is a name, a source, labels, a running/stopped state, a map of
 * files (path -> bytes), its commands and its git repositories. Checkpoints
 * are copies of the file map. DIR and GIT sources, and git clone, read the
 * "host" sources a test registers with dbx_memdrv_source_put (a location
 * names a file map); IMAGE is accepted as an empty workspace. Commands do not
 * run: exec_start calls the test's callback (dbx_memdrv_opts.exec), which
 * says what the command printed, its exit code and how long it "runs" (wall
 * time); the command is RUNNING until then. Git keeps, per repository (a
 * folder with a clone, or the root of a GIT-source sandbox), a head whose
 * commit sha is a hash of its files, parent and message; push records
 * (remote, branch) -> sha (dbx_memdrv_pushed). upload/download read and
 * write real host files.
 *
 * Failure injection: dbx_memdrv_fail_next(m, op, e) makes the next call of
 * op (its driver.h member name, "file_read"; NULL: any op) fail with e and
 * the message "injected <code text>", without doing anything.
 *
 * Thread safety: every op and every function here may be called from any
 * number of threads; one mutex guards the state and is never held while
 * the exec callback runs. Error messages are per thread. */
#ifndef DBX_ACTIVITIES_MEMDRV_H
#define DBX_ACTIVITIES_MEMDRV_H

#include <stddef.h>
#include <stdint.h>

#include "activities/driver.h"
#include "base/err.h"

typedef struct dbx_memdrv dbx_memdrv;

/* What a command printed and did, filled by the exec callback. */
typedef struct {
  int exit_code;
  uint8_t *stdout_buf; /* malloc'd or NULL; the driver takes it */
  size_t stdout_len;
  uint8_t *stderr_buf; /* malloc'd or NULL; the driver takes it */
  size_t stderr_len;
  int64_t duration_ms; /* it stays RUNNING this long (a timeout or cancel cuts it) */
} dbx_memdrv_exec_out;

/* Called by exec_start, without the driver's lock, on the caller's thread.
 * drv is the driver itself: the callback may change files through its ops
 * (a command's side effects). out is zeroed. */
typedef void (*dbx_memdrv_exec_fn)(void *ud, dbx_driver *drv, const char *sandbox,
                                   const dbx_drv_exec_opts *o, dbx_memdrv_exec_out *out);

typedef struct {
  dbx_memdrv_exec_fn exec; /* NULL: every command exits 0 at once, printing nothing */
  void *exec_ud;
  const char *name;        /* dbx_driver.name; NULL: "memory" (copied) */
} dbx_memdrv_opts;

/* o may be NULL (defaults). *out: free with dbx_memdrv_destroy. DBX_OK,
 * DBX_ENOMEM. */
dbx_err dbx_memdrv_create(const dbx_memdrv_opts *o, dbx_memdrv **out);
/* Accepts NULL. No op may be running. */
void dbx_memdrv_destroy(dbx_memdrv *m);
/* The driver interface over m: borrowed, valid until dbx_memdrv_destroy. */
dbx_driver *dbx_memdrv_driver(dbx_memdrv *m);

/* Add (or replace) file path of host source location (both copied).
 * DBX_OK, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_memdrv_source_put(dbx_memdrv *m, const char *location, const char *path,
                              const void *data, size_t len);
/* Make the next call of op (NULL: any) fail with e (not DBX_DRV_OK). count
 * calls in a row fail (>= 1). Replaces an earlier injection. */
void dbx_memdrv_fail_next(dbx_memdrv *m, const char *op, dbx_drv_err e, int count);
/* Mark a RUNNING command LOST (its runner vanished). DBX_OK, DBX_ENOTFOUND. */
dbx_err dbx_memdrv_cmd_lose(dbx_memdrv *m, const char *sandbox, const char *cmd_id);
/* The sha last pushed to (remote, branch); branch NULL: "HEAD". *sha:
 * malloc'd (free()). DBX_OK, DBX_ENOTFOUND, DBX_ENOMEM. */
dbx_err dbx_memdrv_pushed(dbx_memdrv *m, const char *remote, const char *branch, char **sha);
/* Number of exec_start calls that started a command (not adoptions, not
 * the ones dbx_memdrv_not_started_next turned away). */
int dbx_memdrv_exec_count(dbx_memdrv *m);
/* The next count exec_start calls make commands that never run: FINISHED at
 * once with exit 127 and exec_result's not_started set, as the local
 * driver's supervisor reports a child killed before exec. */
void dbx_memdrv_not_started_next(dbx_memdrv *m, int count);

#endif
