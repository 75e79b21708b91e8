/* Whether a worker has taken a new run's first workflow task (see conn.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/conn.h"

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int is_close(int t) {
  return t == ET(WORKFLOW_EXECUTION_COMPLETED) || t == ET(WORKFLOW_EXECUTION_FAILED) ||
         t == ET(WORKFLOW_EXECUTION_CANCELED) || t == ET(WORKFLOW_EXECUTION_TERMINATED) ||
         t == ET(WORKFLOW_EXECUTION_TIMED_OUT) || t == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW);
}

/* One look at the history: 1 taken (or unknowable), 0 not yet; *failed and
 * msg when a workflow task failed; *started when one started. */
static int look(dbx_client *c, const char *wid, const char *rid, int *failed, int *started, char *msg, size_t cap) {
  dbx_client_history h = {0};
  char *err = NULL;
  dbx_err e = dbx_client_get_history(c, wid, rid, NULL, &h, &err);
  free(err);
  int done = e != DBX_OK;
  for (size_t i = 0; e == DBX_OK && i < h.n; i++) {
    const HistoryEvent *ev = h.events[i];
    if (ev->event_type == ET(WORKFLOW_TASK_COMPLETED) || is_close(ev->event_type)) done = 1;
    if (ev->event_type == ET(WORKFLOW_TASK_STARTED)) *started = 1;
    if (ev->event_type == ET(WORKFLOW_TASK_FAILED) && !*failed) {
      const Failure *f = ev->workflow_task_failed_event_attributes->failure;
      *failed = 1;
      snprintf(msg, cap, "%s", f && f->message ? f->message : "(no message)");
    }
  }
  dbx_client_history_cleanup(&h);
  return done;
}

int dbx_cli_await_pickup(dbx_client *c, const char *workflow_id, const char *run_id, const char *type,
                         const char *task_queue, double timeout_s, int json) {
  int64_t deadline = mono_ms() + (int64_t)(timeout_s * 1000);
  char msg[512] = "", text[1024];
  int failed = 0, started = 0;
  for (;;) {
    if (look(c, workflow_id, run_id, &failed, &started, msg, sizeof msg)) return 1;
    if (failed) break;
    if (mono_ms() >= deadline) {
      if (started) return 1; /* taken, still at work */
      break;
    }
    struct timespec d = {0, 200 * 1000000};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
  }
  if (failed)
    snprintf(text, sizeof text,
             "the workflow task of %s failed on the worker: %s (the run stays open; a worker that serves type %s on "
             "task queue %s can take it)",
             workflow_id, msg, type, task_queue);
  else
    snprintf(text, sizeof text,
             "no worker has picked up the workflow task on task queue %s after %.0f s: is a worker for type %s "
             "running? (the run %s stays open)",
             task_queue, timeout_s, type, workflow_id);
  fprintf(stderr, "durabox: %s\n", text);
  if (json) dbx_cli_json_error(failed ? "WorkflowTaskFailed" : "NoWorker", text);
  return 0;
}
