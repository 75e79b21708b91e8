/* activities/quota: a worker's sandbox quotas as a driver in front of another
 * driver: at most max_live sandboxes exist at once (those this driver knows:
 * the inner driver's at open, plus the ones created through it, less the ones
 * deleted through it) and at most creates_per_minute creates start in any 60 s.
 * A create over quota waits, never fails: it polls the create's `cancelled`
 * callback about every 50 ms while it waits (sandbox.create heartbeats
 * through it, so a long wait is no lost worker), and answers
 * DBX_DRV_CANCELED when that says stop. Adopting a sandbox that exists
 * already does not wait. Every other operation is passed to the inner driver
 * unchanged. Zero for a limit: none.
 * Thread safety: any number of threads; one mutex guards the counts and is
 * never held while the inner driver works. */
#ifndef DBX_ACTIVITIES_QUOTA_H
#define DBX_ACTIVITIES_QUOTA_H

#include <stdint.h>

#include "activities/driver.h"
#include "base/err.h"

typedef struct dbx_quota dbx_quota;

typedef struct {
  int max_live;          /* 0: no limit */
  int creates_per_minute; /* 0: no limit */
  int64_t window_ms;     /* the rate's window; 0: 60 s (tests shorten it) */
} dbx_quota_opts;

/* In front of inner (borrowed: it must outlive the quota). *out: free with
 * dbx_quota_close. DBX_OK, DBX_EINVAL (a negative limit), DBX_ENOMEM, DBX_EIO
 * (the inner driver cannot list its sandboxes). */
dbx_err dbx_quota_open(dbx_driver *inner, const dbx_quota_opts *o, dbx_quota **out);
/* Accepts NULL. No op may be running. */
void dbx_quota_close(dbx_quota *q);
/* The driver with the quotas: borrowed, valid until dbx_quota_close. */
dbx_driver *dbx_quota_driver(dbx_quota *q);
/* The most sandboxes that existed at once, the creates that had to wait. */
void dbx_quota_stats(dbx_quota *q, int *peak_live, int64_t *waited);

/* The limits from the environment: DURABOX_MAX_SANDBOXES and
 * DURABOX_SANDBOX_CREATES_PER_MINUTE (whole numbers >= 0; absent: 0).
 * Returns 0, or -1 when one is set but not such a number. */
int dbx_quota_opts_from_env(dbx_quota_opts *o);

#endif
