/* worker/worker: a Temporal worker for the workflow and activity types in
 * worker/api.h.
 *
 * A dbx_worker owns a client (worker/client.h), its LMDB environment
 * (worker/wstore.h: replay history, activity journal, bindings) and its
 * threads: workflow pollers, activity pollers, workflow_task_threads that run
 * the workflow tasks the pollers hand over, a fixed pool of
 * activity_threads that run activities and one reactor thread that holds the
 * parked ones (waiting on an fd or a timer: api.h dbx_act_park) and runs the
 * timeouts; the threads do not grow with the activities in flight (bounded
 * by activity_slots). Poll loops survive the service going
 * away: polls and reports wait for the channel to reconnect (it retries
 * every 100 .. 500 ms), so the worker polls again within about a second of
 * the service being back; errors the service answers back off exponentially
 * with jitter (100 ms .. 5 s). Heartbeats are sent at most every
 * min(0.8 x heartbeat timeout, 1 s), so a cancel reaches a running activity
 * within about a second (docs/worker.md "Heartbeats and cancellation").
 *
 * Lifecycle: create -> register_* -> start -> stop -> destroy, all from one
 * controlling thread. Registered types are borrowed and must outlive the
 * worker. Sticky execution: besides the task queue's pollers, sticky_pollers
 * pollers (as many as workflow_pollers unless set) poll a sticky queue of
 * this worker process ("<identity>:<uuid>"), which
 * every completion names in sticky_attributes; the service then sends the
 * later tasks of the run there with only the new events, applied to the run
 * held in the worker's bounded cache (max_cached_runs, least recently
 * used evicted). A task whose run is not cached (evicted, or after a restart)
 * fetches the full history (GetWorkflowExecutionHistory) and replays.
 * Temporal: PollWorkflowTaskQueue, RespondWorkflowTaskCompleted/Failed,
 * RespondQueryTaskCompleted, PollActivityTaskQueue, RecordActivityTaskHeartbeat,
 * RespondActivityTaskCompleted/Failed/Canceled, ShutdownWorker. */
#ifndef DBX_WORKER_WORKER_H
#define DBX_WORKER_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "worker/api.h"

typedef struct dbx_worker dbx_worker;
struct dbx_wstore;

typedef struct {
  const char *address;        /* "host:port" (required) */
  const char *namespace_;     /* NULL = "default" */
  const char *task_queue;     /* required */
  int tls;                    /* 1 = TLS (implied when any PEM is set) */
  const char *tls_ca_pem;     /* PEM text, not paths */
  const char *tls_cert_pem;
  const char *tls_key_pem;
  const char *api_key;        /* NULL = none */
  const char *db_dir;         /* worker LMDB directory (required; created if missing) */
  /* The counts below: 0 or less = the default; each at most 1024 threads
   * (activity_slots at most 100000), dbx_worker_create refuses more with
   * DBX_EINVAL naming the field. */
  int workflow_pollers;       /* 0 = 2 */
  int activity_pollers;       /* 0 = 2 */
  int activity_slots;         /* concurrent activity executions (Temporal's "max concurrent
                                 activity executions": running and parked together); 0 = 8 */
  int activity_threads;       /* pool threads that run activity steps; 0 = the larger of
                                 2 x online CPUs + 4 and min(activity_slots, 32). A parked
                                 activity (api.h dbx_act_park: sandbox.exec waiting on its
                                 command) holds a slot but no thread, so slots may far
                                 exceed threads; one that blocks (a model call) holds a
                                 thread, and attempts beyond the pool wait in a queue */
  const char *identity;       /* NULL = "durabox@<host>:<pid>" */
  int no_sync;                /* 1 = LMDB commits not synced (tests/benchmarks only) */
  size_t max_message_bytes;   /* the service's message limit; 0 = 128 MiB. A workflow task
                                 completion larger than this (or one the service refuses as
                                 RESOURCE_EXHAUSTED over its limit) is not sent again: the task
                                 is answered RespondWorkflowTaskFailed with cause
                                 WORKFLOW_WORKER_UNHANDLED_FAILURE naming size and limit */
  int64_t sticky_schedule_to_start_ms; /* the sticky queue's schedule-to-start timeout the
                                 completions ask for; 0 = 5000 (Temporal's SDK default);
                                 < 0 = no sticky queue (every task carries the full history) */
  int max_cached_runs;        /* runs whose state the worker keeps between tasks; 0 = 512 */
  int sticky_pollers;         /* pollers of the sticky queue (none without one: sticky_schedule_
                                 to_start_ms < 0); 0 = workflow_pollers */
  int workflow_task_threads;  /* threads that run workflow tasks (Temporal's "max concurrent
                                 workflow task executions"), both queues' together; 0 = the
                                 larger of 2 x online CPUs + 4 and the workflow and sticky
                                 pollers together. A poller hands its task to them and polls
                                 again, so a few pollers keep this many tasks running; they
                                 poll only while fewer than this many tasks wait for a thread */
  int64_t store_retention_ms; /* the worker store's retention (wstore.h "retention"): a run
                                 whose entries were last written this long ago is asked about
                                 (DescribeWorkflowExecution, the worker's namespace only) and,
                                 once the service says it has closed (a closed status, never
                                 an error such as NOT_FOUND), its history copy, journal and
                                 at_most_once records are removed, so a long-lived worker's
                                 store holds its open runs and the recent ones, not every run
                                 it ever served. The store's upkeep thread passes every
                                 retention / 2 (at least 50 ms, at most 10 minutes), asking
                                 about at most 1024 runs a pass, up to 8 at once (at once
                                 again while a pass fills up and removes some);
                                 0 = 24 h (the retention durabox's service reports); < 0 = keep
                                 every run's entries (no pass) */
} dbx_worker_opts;

/* Strings in o are copied. Opens the store; does not connect.
 * *out: free with dbx_worker_destroy. errmsg (may be NULL): malloc'd on failure.
 * Returns DBX_OK, DBX_EINVAL (a required field missing, a count over its
 * limit), DBX_ENOMEM, DBX_ESTORE. */
dbx_err dbx_worker_create(const dbx_worker_opts *o, dbx_worker **out, char **errmsg);
/* Register before start. t is borrowed (static in practice).
 * Returns DBX_OK, DBX_EEXIST (name taken), DBX_ESTATE (already started), DBX_ENOMEM. */
dbx_err dbx_worker_register_workflow(dbx_worker *w, const dbx_workflow_type *t);
dbx_err dbx_worker_register_activity(dbx_worker *w, const dbx_activity_type *t);
/* Start the poller threads. Returns DBX_OK, DBX_ESTATE (started twice), DBX_ENOMEM. */
dbx_err dbx_worker_start(dbx_worker *w);
/* Stop polling (in-flight polls are cancelled), let running activities finish
 * within grace_ms, then mark them cancelled (dbx_act_cancelled() = 1) and
 * wait for them to return; send ShutdownWorker; join every thread.
 * Idempotent; safe before start. */
void dbx_worker_stop(dbx_worker *w, int64_t grace_ms);
/* Stops (grace 0) if needed and frees. Accepts NULL. */
void dbx_worker_destroy(dbx_worker *w);

/* The worker's store (bindings, checkpoints, journal); borrowed for the
 * worker's life; thread-safe (see wstore.h). */
struct dbx_wstore *dbx_worker_wstore(dbx_worker *w);
/* The worker's client to its service (worker/client.h), borrowed for the
 * worker's life; thread-safe. Activities that read the service (a fork's
 * durabox.fork_load, cli/fork.h) use it. */
struct dbx_client *dbx_worker_client(dbx_worker *w);
/* Counters for tests and metrics (any thread). */
typedef struct {
  uint64_t workflow_tasks;      /* completed or failed workflow tasks answered */
  uint64_t activity_tasks;      /* activity tasks received */
  uint64_t poll_errors;         /* failed polls (each followed by a backoff) */
  uint64_t cache_hits;          /* workflow tasks applied incrementally */
  uint64_t nondeterminism;      /* workflow tasks failed as NON_DETERMINISTIC */
  uint64_t oversized_completions; /* completions over the message limit, failed instead */
  uint64_t completions_sent;    /* RespondWorkflowTaskCompleted calls made */
  uint64_t sticky_tasks;        /* workflow tasks taken from the sticky queue */
  uint64_t full_history_fetches; /* tasks with partial history whose run was not cached:
                                   the full history was fetched and replayed */
  uint64_t activities_in_flight; /* now: attempts received and not yet finished (running,
                                   queued for a pool thread or parked) */
  uint64_t activities_parked;   /* now: of those, parked (dbx_act_park) */
  uint64_t store_sweeps;        /* retention passes over the worker store finished */
  uint64_t store_runs_removed;  /* closed runs whose entries those passes removed */
} dbx_worker_stats;
void dbx_worker_get_stats(dbx_worker *w, dbx_worker_stats *out);

/* Process-wide, for a program whose main job is a worker or the embedded
 * service: caps glibc's malloc arenas at one per online core (glibc's own
 * cap is eight per core) unless the environment sets a cap already
 * (MALLOC_ARENA_MAX, or glibc.malloc.arena_max in GLIBC_TUNABLES). Without
 * it each of the worker's few dozen threads that allocates gets an arena of
 * its own, and the pages those arenas keep were half of the worker's own
 * resident memory (docs/benchmarks.md, "malloc arenas"). Call from main
 * before any thread starts; not thread-safe. Returns the cap set, or 0 when
 * the environment's was kept or the C library has no such setting. */
int dbx_worker_cap_malloc_arenas(void);

#endif
