/* Sticky execution (Temporal's sticky task queues), the engine's part: is a
 * sticky queue served, stickiness cleared, and the schedule-to-start timeout
 * of a task on a sticky queue, which moves it to the normal queue. The
 * handlers (poll from a sticky queue, ResetStickyTaskQueue, ShutdownWorker)
 * are in matching.c; the completion's sticky_attributes in wftask.c. */
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

#define STICKY_POLLER_WINDOW_NS (10LL * 1000000000) /* Temporal: a sticky worker unseen for 10 s is gone */

int svc_sticky_available(ectx *c, const char *ns, const char *name) {
  size_t kl;
  char *key = svc_queue_key(ns, name, TASK_WORKFLOW, &kl);
  if (key == NULL) return 0; /* the normal queue always works */
  int found = 0;
  for (job *p = c->svc->parked; p && !found; p = p->next)
    found = p->park == PARK_POLL && p->park_key_len == kl && memcmp(p->park_key, key, kl) == 0 &&
            !(p->call && dbx_rpc_call_cancelled(p->call));
  for (size_t i = 0; i < c->svc->n_pollers && !found; i++) {
    const poller_seen *p = &c->svc->pollers[i];
    found = p->key_len == kl && memcmp(p->key, key, kl) == 0 && c->now_ns - p->last_ns <= STICKY_POLLER_WINDOW_NS;
  }
  free(key);
  return found;
}

int svc_sticky_clear(RunState *rs) {
  if (rs->sticky_task_queue[0] == '\0') return 0;
  svc_pb_setstr(&rs->sticky_task_queue, "");
  rs->sticky_s2s_timeout_ms = 0;
  return 1;
}

dbx_err svc_sticky_timed_out(ectx *c, RunState *rs, int64_t event_id, int32_t attempt, int *changed) {
  if (rs->wft_scheduled_event_id != event_id || rs->wft_started_event_id != 0 || !rs->wft_sticky ||
      rs->wft_attempt != attempt)
    return DBX_OK; /* taken, or moved on */
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_TIMED_OUT));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_task_timed_out_event_attributes->scheduled_event_id = rs->wft_scheduled_event_id;
  ev->workflow_task_timed_out_event_attributes->timeout_type = TT(SCHEDULE_TO_START);
  DBX_INFO("service", "workflow %s run %s: no worker took the task on sticky queue %s: back to %s",
           rs->workflow_id, rs->run_id, rs->sticky_task_queue, rs->task_queue);
  dbx_err rc = svc_event_append(c, rs, ev, 0); /* ends the task (mutable.c) */
  svc_history_event_free(ev);
  /* Temporal: a task failing on a sticky queue clears stickiness and is
   * tried again on the normal queue with the same attempt */
  svc_sticky_clear(rs);
  rs->wft_sticky = 0;
  *changed = 1;
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

