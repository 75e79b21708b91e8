/* Small helpers shared by every room: clocks, string copies, uuids, logging.
 *
 * Clocks: dbx_mono_ns() for deadlines and durations (never jumps),
 * dbx_wall_ns() for timestamps that leave the process (history event_time).
 * Logging: one line per call on stderr, "ts level [module] message"; the
 * level threshold and format are process-wide, set once in main() before
 * threads start. Thread safety: every function here may be called from any
 * thread; a log line is written with a single write(2). */
#ifndef DBX_BASE_UTIL_H
#define DBX_BASE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

int64_t dbx_mono_ns(void); /* CLOCK_MONOTONIC, nanoseconds */
int64_t dbx_wall_ns(void); /* CLOCK_REALTIME, nanoseconds since the epoch */

/* String copies, allocated through dbx_malloc (base/alloc.h: the failure
 * hook sees them). */
/* strdup that accepts NULL (returns NULL) and returns NULL on OOM. Free with free(). */
char *dbx_strdup(const char *s);
/* Copy of n bytes plus a NUL; NULL on OOM. Free with free(). */
char *dbx_strndup(const char *s, size_t n);
/* malloc'd printf; NULL on OOM or format error. Free with free(). */
char *dbx_asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define DBX_UUID_LEN 36
/* A random (version 4, RFC 9562) UUID from getrandom(2), as 36 lowercase
 * characters and a NUL in out ("1b4e28ba-2fa1-4d2b-883f-0016d3cca427").
 * Returns DBX_OK, DBX_EIO (the kernel gave no randomness; out is ""). */
dbx_err dbx_uuid_v4(char out[DBX_UUID_LEN + 1]);

typedef enum { DBX_LOG_DEBUG = 0, DBX_LOG_INFO, DBX_LOG_WARN, DBX_LOG_ERROR, DBX_LOG_OFF } dbx_log_level;

/* Parse "debug|info|warn|error|off" (Temporal CLI spellings, "warning" too).
 * Returns 0 and sets *out, or -1 for an unknown word. */
int dbx_log_level_parse(const char *s, dbx_log_level *out);
void dbx_log_set_level(dbx_log_level l);
/* json != 0: one JSON object per line (Temporal's --log-format json). */
void dbx_log_set_json(int json);
int dbx_log_enabled(dbx_log_level l);
void dbx_log(dbx_log_level l, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define DBX_DEBUG(mod, ...) dbx_log(DBX_LOG_DEBUG, mod, __VA_ARGS__)
#define DBX_INFO(mod, ...) dbx_log(DBX_LOG_INFO, mod, __VA_ARGS__)
#define DBX_WARN(mod, ...) dbx_log(DBX_LOG_WARN, mod, __VA_ARGS__)
#define DBX_ERROR(mod, ...) dbx_log(DBX_LOG_ERROR, mod, __VA_ARGS__)

#endif
