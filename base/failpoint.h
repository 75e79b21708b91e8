/* base/failpoint: named fault-injection points compiled into the binary and
 * switched on by the environment, for the crash harness (tests/faults/).
 *
 * A failpoint is one line at a point where a crash matters:
 *     DBX_FAILPOINT("worker.journal.after_started");
 * When no failpoint is configured (the normal case) it costs one load and
 * one predictable branch of a global flag.
 *
 * Configuration (dbx_failpoint_configure, or dbx_failpoint_init_from_env from
 * DURABOX_FAILPOINTS / DURABOX_FAILPOINT_SEED / DURABOX_FAILPOINT_LOG):
 *     spec   := entry {',' entry}
 *     entry  := pattern '=' action ['@' probability] {':' option}
 *     action := 'kill'  SIGKILL this process (after logging, see below)
 *             | 'log'   only log the hit (to measure which points are reached)
 *             | 'stall' ['=' MS]  hold the hitting thread MS ms (default 1000,
 *                       at most 600000): a slow commit or a descheduled thread
 *     probability: 0..1 per eligible hit, default 1
 *     option := 'after=' N  (the first N matching hits never fire)
 *             | 'count=' N  (fire at most N times; 'log' entries only matter)
 *     pattern: a name or an fnmatch(3) glob ("worker.*"); first match wins.
 * Example: worker.journal.after_started=kill@0.3,service.commit.before=kill@0.05
 * When an entry fires and a log file is configured, the line "NAME\n" is
 * appended to it (O_APPEND, then fsync) BEFORE the kill, so a driver can
 * count kills per failpoint from outside.
 *
 * Thread safety: configure/init/reset before other threads hit failpoints
 * (startup or test setup); dbx_failpoint_hit may run on any thread. */
#ifndef DBX_BASE_FAILPOINT_H
#define DBX_BASE_FAILPOINT_H

#include <stdint.h>

#include "base/err.h"

/* Non-zero while any failpoint is configured. Read by DBX_FAILPOINT only. */
extern volatile int dbx_failpoints_on;

#define DBX_FAILPOINT(name)                                 \
  do {                                                      \
    if (__builtin_expect(dbx_failpoints_on, 0)) dbx_failpoint_hit(name); \
  } while (0)

/* Replace the configuration. spec: borrowed (NULL or "" disables every
 * failpoint). seed: for the probability draws (0 = time and pid). log_path:
 * borrowed, copied; NULL = no log. On a parse error returns DBX_EINVAL with
 * *errmsg (malloc'd; errmsg may be NULL) and leaves failpoints disabled.
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_failpoint_configure(const char *spec, uint64_t seed, const char *log_path,
                                char **errmsg);

/* dbx_failpoint_configure from DURABOX_FAILPOINTS, DURABOX_FAILPOINT_SEED
 * (decimal) and DURABOX_FAILPOINT_LOG. Unset DURABOX_FAILPOINTS: DBX_OK,
 * disabled. Call once from main(). Errors as dbx_failpoint_configure. */
dbx_err dbx_failpoint_init_from_env(char **errmsg);

/* Disable every failpoint and free the configuration. */
void dbx_failpoint_reset(void);

/* The slow path of DBX_FAILPOINT (name: borrowed, a string literal). Returns
 * 0 when nothing fired, 1 when a 'log' or 'stall' entry fired (a stall
 * returns after its time); a 'kill' entry that fires does not return. */
int dbx_failpoint_hit(const char *name);

/* How many times failpoints matching configured entry `pattern` were hit
 * (fired or not) since the last configure; 0 for an unknown pattern. */
uint64_t dbx_failpoint_hits(const char *pattern);

#endif
