/* Fake worker side of worker/api.h for activity tests (see act_fake.h).
 * The real worker provides these functions; nothing here talks to a service. */
#include "tests/act_fake.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

void dbx_fake_act_cleanup(struct dbx_act *a) {
  free(a->last_details);
  a->last_details = NULL;
}

int dbx_act_heartbeat(dbx_act *a, const char *details_json) {
  a->heartbeats++;
  if (details_json != NULL) {
    free(a->last_details);
    a->last_details = dbx_strdup(details_json);
  }
  if (a->cancel_at_heartbeat > 0 && a->heartbeats >= a->cancel_at_heartbeat) a->cancelled = 1;
  return a->cancelled ? 1 : 0;
}

const char *dbx_act_heartbeat_details(const dbx_act *a) { return a->prev_details; }
int dbx_act_cancelled(const dbx_act *a) { return a->cancelled; }
int dbx_act_worker_stopping(const dbx_act *a) { return a->cancelled && a->worker_stopping; }
int32_t dbx_act_attempt(const dbx_act *a) { return a->attempt; }
dbx_retry_class dbx_act_retry_class(const dbx_act *a) { return a->retry_class; }
int dbx_act_superseded(const dbx_act *a) { return a->cancelled && a->superseded; }
const char *dbx_act_workflow_id(const dbx_act *a) { return a->workflow_id; }
const char *dbx_act_run_id(const dbx_act *a) { return a->run_id; }
const char *dbx_act_activity_id(const dbx_act *a) { return a->activity_id; }
int64_t dbx_act_remaining_ms(const dbx_act *a) {
  return a->remaining_ms > 0 ? a->remaining_ms : INT64_MAX;
}

/* The fake runs activities on the caller's thread only: no parking. */
dbx_err dbx_act_park(dbx_act *a, int fd, int64_t wait_ms, dbx_act_resume_fn resume, void *ctx) {
  (void)a, (void)fd, (void)wait_ms, (void)resume, (void)ctx;
  return DBX_EUNSUPPORTED;
}

dbx_err dbx_worker_register_activity(struct dbx_worker *w, const dbx_activity_type *t) {
  for (int i = 0; i < w->n; i++)
    if (strcmp(w->types[i]->name, t->name) == 0) return DBX_EEXIST;
  if (w->n >= DBX_FAKE_WORKER_MAX) return DBX_ENOMEM;
  w->types[w->n++] = t;
  return DBX_OK;
}
