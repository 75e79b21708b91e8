/* A stand-in for the worker's side of worker/api.h, for activity tests.
 *
 * The real worker library provides the dbx_act_* functions and
 * dbx_worker_register_activity; tests of activities/ link this file instead
 * so they run without a worker, a service or gRPC. A test fills a struct
 * dbx_act by hand (identity, attempt, cancel flag, deadline) and passes it to
 * an activity's run function. Single-threaded use. */
#ifndef DBX_TESTS_ACT_FAKE_H
#define DBX_TESTS_ACT_FAKE_H

#include <stdint.h>

#include "worker/api.h"

struct dbx_act {
  const char *workflow_id; /* borrowed */
  const char *run_id;
  const char *activity_id;
  int32_t attempt;
  int cancelled;           /* what dbx_act_cancelled / dbx_act_heartbeat report */
  int worker_stopping;     /* with cancelled: the cancellation is the worker stopping */
  int64_t remaining_ms;    /* 0 here means "no deadline" (INT64_MAX) */
  const char *prev_details; /* dbx_act_heartbeat_details; borrowed */
  char *last_details;      /* copy of the last heartbeat; free with dbx_fake_act_cleanup */
  int heartbeats;          /* number of dbx_act_heartbeat calls */
  int cancel_at_heartbeat; /* > 0: that heartbeat and later ones report cancellation */
  dbx_retry_class retry_class; /* dbx_act_retry_class (zeroed: safe_to_retry) */
  int superseded;          /* with cancelled: the attempt timed out or is gone (dbx_act_superseded) */
};

/* Frees last_details. */
void dbx_fake_act_cleanup(struct dbx_act *a);

#define DBX_FAKE_WORKER_MAX 32
struct dbx_worker {
  const dbx_activity_type *types[DBX_FAKE_WORKER_MAX];
  int n;
};

/* The fake registry: appends t to w->types; DBX_EEXIST for a repeated name,
 * DBX_ENOMEM when full. */
dbx_err dbx_worker_register_activity(struct dbx_worker *w, const dbx_activity_type *t);

#endif
