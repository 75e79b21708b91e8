/* worker/worker: pollers, workflow task processing, activity execution.
 *
 * Threads: N workflow pollers (and as many sticky ones), M activity pollers,
 * a fixed set of workflow task threads, a fixed pool of activity threads and
 * one reactor (see "Executor" below). Every poll uses the worker's cancel token, so
 * stop() aborts in-flight long polls at once. Polls wait for the channel
 * (wait_for_ready) while the service is unreachable; a poll the service
 * fails backs off exponentially (100 ms .. 5 s, 500 ms for a dropped
 * connection, jittered to 50..100%) on the worker's condition variable, so
 * stop() also ends a backoff.
 *
 * Workflow tasks: a workflow poller (normal or sticky queue) queues the task
 * it gets for the wft_n workflow task threads (a FIFO under w->wmu) and polls
 * again at once, so a few pollers keep many tasks running (Temporal's SDKs
 * split pollers from executors the same way). A poller polls only while
 * fewer than wft_n tasks wait in that queue: when every thread is busy the
 * worker stops taking tasks it could not start soon, and neither queue's
 * pollers can hold the other's back (a slot taken before the poll would let
 * pollers parked on an empty sticky queue starve the normal one; when room
 * comes every waiting poller is woken, or a normal poller could take it
 * while the sticky ones slept). The service hands out one workflow task of
 * a run at a time, so two threads never work on one run. On stop, the tasks
 * already queued are still processed and answered before the threads end.
 * A task's full history (all pages) is recorded in the worker
 * store and applied to the run's cached dbx_wf_run; the cache entry is used
 * only when the first event after its last applied one is the
 * WorkflowTaskCompleted of the task it answered (our answer was accepted),
 * otherwise the run is replayed from scratch. An entry is taken out of the
 * cache while a task uses it, so two threads never share a run. The answer
 * (completion or failure) is built by dbx_wft_answer_build_ (wft.h) without
 * I/O; a run whose replay ran out of memory is never cached or answered as
 * a completion. Legacy query
 * tasks are answered from a fresh replay and never touch the cache; queries
 * a workflow task carries (its `queries` map) are answered from the run's
 * state after the task's activation, in query_results.
 *
 * Activities: an activity poller first takes a slot (a counting semaphore
 * on the worker mutex), then polls. The journal in the worker store decides
 * whether to run, to report a journaled result, or to answer OutcomeUnknown
 * (wstore.h). The watchdog pass (run by the reactor every 50 ms) marks
 * attempts whose start-to-close or heartbeat timer passed, or whose
 * heartbeats have failed to reach the service for longer than the heartbeat
 * timeout, as cancelled and timed out; their late results are not reported.
 * Heartbeats never extend start-to-close.
 *
 * Executor: an activity is a sequence of steps (run(), then one resume per
 * park, api.h dbx_act_park), each run by one of pool_n pool threads taken
 * from a FIFO run queue. A step that parked is handed to the reactor thread:
 * a min-heap of parked attempts by wake time (the park's wait, capped at the
 * attempt's next heartbeat when it heartbeats) and an epoll set of their
 * fds. The reactor moves an attempt back to the run queue when its fd fires,
 * its time comes, or it is cancelled (checked every 50 ms, after the
 * watchdog pass). Only the reactor un-parks, so an attempt is on exactly one
 * of: a pool thread, the run queue, the parked set. The slots
 * (activity_slots) bound attempts in all three; the threads stay pool_n + 1
 * however many are parked. After its last step an attempt journals its
 * result, reports it, leaves w->running and frees its slot.
 * The store's upkeep thread unmaps the store's pages read every 250 ms
 * (dbx_wstore_release_pages: the worker's resident set does not grow with
 * its store) and, for the retention, passes over the store every
 * retention / 2 (dbx_wstore_sweep), asking the service about each run not
 * written for a retention (DescribeWorkflowExecution, cancelled by stop()
 * like the polls); a closed run's entries are removed.
 *
 * Mutex order: w->mu, w->xmu (executor queue and parked set) and w->wmu
 * (workflow task queue) are never held together. */
#include "worker/worker.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/util.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/wft.h"
#include "worker/wstore.h"

#define POLL_TIMEOUT_MS 70000
#define CALL_TIMEOUT_MS 10000
#define CACHE_MAX 512
#define DEFAULT_MAX_MSG ((size_t)128 << 20)
#define POOL_DEFAULT_MAX 32
#define MAX_THREADS_EACH 1024 /* pollers of each kind, pool threads (worker.h) */
#define MAX_SLOTS 100000       /* activity_slots (worker.h) */
#define RETENTION_DEFAULT_MS (24LL * 3600 * 1000)
#define SWEEP_PERIOD_MIN_MS 50
#define SWEEP_PERIOD_MAX_MS (10LL * 60 * 1000)
#define SWEEP_MAX_RUNS 1024 /* runs asked about in one pass */
#define SWEEP_ASKERS 8       /* threads of a pass that ask the service at once */
#define RELEASE_PAGES_MS 250 /* the store's pages read are unmapped this often */
#define SWEEP_CALL_MS 10000

struct dbx_act {
  dbx_worker *w;
  PollActivityTaskQueueResponse *task;
  const dbx_activity_type *type;
  char *prev_details;
  atomic_int cancelled, cancel_requested, timed_out, abandoned, done;
  int64_t s2c_deadline_ns;     /* INT64_MAX: none */
  int64_t hb_timeout_ns;       /* 0: none */
  _Atomic int64_t last_hb_ns;  /* last dbx_act_heartbeat (or start) */
  _Atomic int64_t hb_ok_ns;    /* last heartbeat the service acknowledged (or start) */
  atomic_int hb_failing;       /* a heartbeat RPC failed since hb_ok_ns */
  int64_t last_sent_ns;
  struct dbx_act *next;        /* w->running, under w->mu */
  /* executor; the step fields belong to the thread running the step, the
   * park fields to the reactor (under w->xmu) while parked */
  dbx_act_result res;          /* the attempt's result, filled across steps */
  int begun;                   /* run() was called */
  int park_set;                /* dbx_act_park was called in this step */
  int park_fd, park_fd_added;  /* -1: none; added: in w->epfd */
  int64_t park_until_ns;       /* mono clock */
  dbx_act_resume_fn resume;
  void *resume_ctx;
  size_t heap_i;               /* index in w->parked while parked */
  struct dbx_act *qnext;       /* run queue */
};

/* A polled workflow task waiting for a workflow task thread. */
typedef struct wft_item {
  PollWorkflowTaskQueueResponse *task;
  struct wft_item *next;
} wft_item;

typedef struct {
  char *key; /* wid \n rid */
  dbx_wf_run *run;
  uint64_t used;
} cache_ent;

struct dbx_worker {
  char *ns, *tq, *identity;
  dbx_client *client;
  dbx_wstore *ws;
  const dbx_workflow_type **wfs;
  size_t nwfs;
  const dbx_activity_type **acts;
  size_t nacts;
  int n_wf_pollers, n_act_pollers, n_sticky_pollers, slots;
  pthread_t *threads;
  int nthreads;
  /* executor (see the file comment) */
  int pool_n, pool_started, reactor_started, x_stop;
  pthread_t *pool, reactor;
  pthread_mutex_t xmu;
  pthread_cond_t xcv;
  dbx_act *qhead, *qtail;      /* run queue */
  dbx_act **parked;            /* min-heap by park_until_ns */
  size_t nparked, capparked;
  int epfd, evfd;              /* parked fds; the reactor's wake-up */
  /* workflow task threads (see the file comment) */
  int wft_n, wft_started, wft_stop;
  pthread_t *wft;
  pthread_mutex_t wmu;
  pthread_cond_t wcv_task, wcv_room; /* a task queued / one taken from the queue */
  int wq_len;                  /* tasks queued, not yet taken by a thread */
  wft_item *wq_head, *wq_tail;
  dbx_rpc_cancel *poll_cancel;
  atomic_int stopping;
  atomic_int poll_warned;      /* the kind of the poll failure last logged (0 = none since an answered poll) */
  int started, stopped;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int slots_used;
  struct dbx_act *running;
  cache_ent *cache;
  size_t ncache;
  uint64_t cache_clock;
  _Atomic uint64_t st_wft, st_act, st_poll_err, st_hits, st_nondet, st_oversized, st_completions;
  _Atomic uint64_t st_sticky, st_full_fetch, st_in_flight, st_parked;
  char *sticky_tq;     /* this worker's sticky queue; NULL = none */
  size_t cache_max;    /* runs kept in the cache */
  int64_t sticky_s2s_ms;
  size_t max_msg; /* the service's message limit (bytes) */
  int64_t retention_ms; /* < 0: no sweep */
  pthread_t upkeep;
  int upkeep_started;
  _Atomic uint64_t st_sweeps, st_swept;
};

static dbx_err executor_open(dbx_worker *w);

/* ------------------------------------------------------------ lifecycle */

dbx_err dbx_worker_create(const dbx_worker_opts *o, dbx_worker **out, char **errmsg) {
  if (errmsg) *errmsg = NULL;
  if (!o || !out || !o->address || !o->task_queue || !o->db_dir) {
    if (errmsg) *errmsg = dbx_strdup("worker: address, task queue and db dir are required");
    return DBX_EINVAL;
  }
  *out = NULL;
  /* each count is a thread (or, for slots, an attempt's memory): a value
   * past the bound is refused by name rather than started until the host
   * runs out of tasks (the pollers' sum must not overflow either) */
  const struct {
    const char *name;
    int v, max;
  } counts[] = {
      {"workflow_pollers", o->workflow_pollers, MAX_THREADS_EACH},
      {"activity_pollers", o->activity_pollers, MAX_THREADS_EACH},
      {"sticky_pollers", o->sticky_pollers, MAX_THREADS_EACH},
      {"activity_threads", o->activity_threads, MAX_THREADS_EACH},
      {"workflow_task_threads", o->workflow_task_threads, MAX_THREADS_EACH},
      {"activity_slots", o->activity_slots, MAX_SLOTS},
  };
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
    if (counts[i].v <= counts[i].max) continue;
    if (errmsg)
      *errmsg = dbx_asprintf("worker: %s %d is over the limit of %d", counts[i].name, counts[i].v,
                             counts[i].max);
    return DBX_EINVAL;
  }
  dbx_worker *w = dbx_calloc(1, sizeof *w);
  if (!w) return DBX_ENOMEM;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  pthread_mutex_init(&w->xmu, NULL);
  pthread_cond_init(&w->xcv, NULL);
  pthread_mutex_init(&w->wmu, NULL);
  pthread_cond_init(&w->wcv_task, NULL);
  pthread_cond_init(&w->wcv_room, NULL);
  w->epfd = w->evfd = -1;
  w->ns = dbx_strdup(o->namespace_ ? o->namespace_ : "default");
  w->tq = dbx_strdup(o->task_queue);
  w->n_wf_pollers = o->workflow_pollers > 0 ? o->workflow_pollers : 2;
  w->n_act_pollers = o->activity_pollers > 0 ? o->activity_pollers : 2;
  w->n_sticky_pollers = o->sticky_pollers > 0 ? o->sticky_pollers : w->n_wf_pollers;
  w->slots = o->activity_slots > 0 ? o->activity_slots : 8;
  /* default: 2 x CPUs + 4, and as many as the slots up to POOL_DEFAULT_MAX, so
   * that up to that many activities that block rather than park (a model
   * call, a clone) still all run at once as they did with a thread each */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int by_cpu = 2 * (int)(ncpu > 0 && ncpu < 512 ? ncpu : 1) + 4;
  int by_slots = w->slots < POOL_DEFAULT_MAX ? w->slots : POOL_DEFAULT_MAX;
  w->pool_n = o->activity_threads > 0 ? o->activity_threads
                                      : (by_cpu > by_slots ? by_cpu : by_slots);
  /* a workflow task is mostly waiting (its history commit, the answer's
   * round trip, the service's synced commit behind it): the default keeps at
   * least as many tasks running as there are pollers to bring them */
  int npollers = w->n_wf_pollers + (o->sticky_schedule_to_start_ms >= 0 ? w->n_sticky_pollers : 0);
  w->wft_n = o->workflow_task_threads > 0 ? o->workflow_task_threads
                                          : (by_cpu > npollers ? by_cpu : npollers);
  w->wft = dbx_calloc((size_t)w->wft_n, sizeof *w->wft);
  w->max_msg = o->max_message_bytes ? o->max_message_bytes : DEFAULT_MAX_MSG;
  w->cache_max = o->max_cached_runs > 0 ? (size_t)o->max_cached_runs : CACHE_MAX;
  w->retention_ms = o->store_retention_ms ? o->store_retention_ms : RETENTION_DEFAULT_MS;
  dbx_client_opts co = {0};
  co.address = o->address;
  co.namespace_ = w->ns;
  co.tls = o->tls;
  co.tls_ca_pem = o->tls_ca_pem;
  co.tls_cert_pem = o->tls_cert_pem;
  co.tls_key_pem = o->tls_key_pem;
  co.api_key = o->api_key;
  co.identity = o->identity;
  dbx_err rc = (!w->ns || !w->tq || !w->wft) ? DBX_ENOMEM : dbx_client_create(&co, &w->client);
  if (rc == DBX_OK) {
    w->identity = dbx_strdup(dbx_client_identity(w->client));
    rc = w->identity ? DBX_OK : DBX_ENOMEM;
  }
  if (rc == DBX_OK && o->sticky_schedule_to_start_ms >= 0) {
    char u[DBX_UUID_LEN + 1];
    w->sticky_s2s_ms = o->sticky_schedule_to_start_ms ? o->sticky_schedule_to_start_ms : 5000;
    rc = dbx_uuid_v4(u);
    if (rc == DBX_OK) w->sticky_tq = dbx_asprintf("%s:%s", w->identity, u);
    if (rc == DBX_OK && !w->sticky_tq) rc = DBX_ENOMEM;
  }
  if (rc == DBX_OK) rc = dbx_rpc_cancel_create(&w->poll_cancel);
  if (rc == DBX_OK) rc = executor_open(w);
  if (rc == DBX_OK) rc = dbx_wstore_open(o->db_dir, o->no_sync, &w->ws, errmsg);
  if (rc != DBX_OK) {
    if (errmsg && !*errmsg) *errmsg = dbx_asprintf("worker: %s", dbx_strerror(rc));
    dbx_worker_destroy(w);
    return rc;
  }
  *out = w;
  return DBX_OK;
}

static dbx_err reg(dbx_worker *w, const void ***arr, size_t *n, const void *t, const char *name,
                   const char *(*name_of)(const void *)) {
  if (!w || !t || !name) return DBX_EINVAL;
  if (w->started) return DBX_ESTATE;
  for (size_t i = 0; i < *n; i++)
    if (strcmp(name_of((*arr)[i]), name) == 0) return DBX_EEXIST;
  const void **np = dbx_realloc(*arr, (*n + 1) * sizeof *np);
  if (!np) return DBX_ENOMEM;
  np[(*n)++] = t;
  *arr = np;
  return DBX_OK;
}
static const char *wf_name(const void *t) { return ((const dbx_workflow_type *)t)->name; }
static const char *act_name(const void *t) { return ((const dbx_activity_type *)t)->name; }

dbx_err dbx_worker_register_workflow(dbx_worker *w, const dbx_workflow_type *t) {
  return reg(w, (const void ***)&w->wfs, &w->nwfs, t, t ? t->name : NULL, wf_name);
}
dbx_err dbx_worker_register_activity(dbx_worker *w, const dbx_activity_type *t) {
  return reg(w, (const void ***)&w->acts, &w->nacts, t, t ? t->name : NULL, act_name);
}

struct dbx_wstore *dbx_worker_wstore(dbx_worker *w) { return w->ws; }
struct dbx_client *dbx_worker_client(dbx_worker *w) { return w->client; }

void dbx_worker_get_stats(dbx_worker *w, dbx_worker_stats *out) {
  out->workflow_tasks = w->st_wft;
  out->activity_tasks = w->st_act;
  out->poll_errors = w->st_poll_err;
  out->cache_hits = w->st_hits;
  out->sticky_tasks = w->st_sticky;
  out->store_sweeps = w->st_sweeps;
  out->store_runs_removed = w->st_swept;
  out->full_history_fetches = w->st_full_fetch;
  out->nondeterminism = w->st_nondet;
  out->oversized_completions = w->st_oversized;
  out->completions_sent = w->st_completions;
  out->activities_in_flight = w->st_in_flight;
  out->activities_parked = w->st_parked;
}

int dbx_worker_cap_malloc_arenas(void) {
#ifdef M_ARENA_MAX
  const char *tun = getenv("GLIBC_TUNABLES");
  if (getenv("MALLOC_ARENA_MAX") || (tun && strstr(tun, "glibc.malloc.arena_max"))) return 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int cap = cores < 1 ? 1 : cores > 1024 ? 1024 : (int)cores;
  return mallopt(M_ARENA_MAX, cap) == 1 ? cap : 0;
#else
  return 0;
#endif
}

/* Sleep up to ms on the worker's condition; returns early on stop. */
static void nap(dbx_worker *w, int64_t ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_mutex_lock(&w->mu);
  /* w->cv is broadcast for every finished activity too: wait out the time */
  while (!w->stopping && pthread_cond_timedwait(&w->cv, &w->mu, &ts) != ETIMEDOUT) {
  }
  pthread_mutex_unlock(&w->mu);
}

/* Exponential backoff from 100 ms to max_ms, jittered to 50..100 %. */
static void backoff(dbx_worker *w, int *failures, unsigned *seed, int64_t max_ms) {
  int64_t d = 100;
  for (int i = 0; i < *failures && d < max_ms; i++) d *= 2;
  if (d > max_ms) d = max_ms;
  d = d / 2 + (int64_t)(rand_r(seed) % (unsigned)(d / 2 + 1));
  (*failures)++;
  nap(w, d);
}

/* Polls wait for the channel (dbx_client_call_ready), so a service that is
 * down holds the next poll until gRPC reconnects (every 100 .. 500 ms)
 * rather than a backoff sleep: the worker polls again within a second of
 * the service being back, whatever the outage. UNAVAILABLE now means the
 * connection dropped under a call (the service went away, or is shutting
 * down): a short backoff, then a poll that waits. Other errors are the
 * service's answers and back off up to 5 s. */
static int64_t poll_backoff_max_ms(dbx_err rc) { return rc == DBX_EUNAVAILABLE ? 500 : 5000; }

/* A failed poll is retried with backoff for as long as the failure lasts.
 * A failure is logged as a warning when it differs in kind (its gRPC
 * status, or the local error when none came) from the last one logged since
 * an answered poll: once for all the worker's pollers while the cause
 * stays, again when it changes (a namespace now found but the API key now
 * refused); the next answered poll says so. A worker polling a namespace
 * the service lacks, refused its credentials, or cut off from its service
 * says why it idles instead of idling in silence. */
static void poll_failed(dbx_worker *w, const char *kind, dbx_err rc, const dbx_client_status *st,
                        const char *err) {
  w->st_poll_err++;
  int why = st->grpc_status != DBX_GRPC_OK ? st->grpc_status + 1 : 1000 + (int)rc;
  if (atomic_exchange(&w->poll_warned, why) != why)
    DBX_WARN("worker", "%s poll of task queue %s in namespace %s failed, polling again with backoff: %s",
             kind, w->tq, w->ns, err ? err : dbx_strerror(rc));
  else
    DBX_DEBUG("worker", "%s poll: %s", kind, err ? err : dbx_strerror(rc));
}

static void poll_answered(dbx_worker *w) {
  if (atomic_load(&w->poll_warned) && atomic_exchange(&w->poll_warned, 0))
    DBX_INFO("worker", "polls of task queue %s in namespace %s are answered again", w->tq, w->ns);
}

/* ------------------------------------------------------------ cache */

static char *run_key(const char *wid, const char *rid) { return dbx_asprintf("%s\n%s", wid, rid); }

static dbx_wf_run *cache_take(dbx_worker *w, const char *key) {
  dbx_wf_run *r = NULL;
  pthread_mutex_lock(&w->mu);
  for (size_t i = 0; i < w->ncache; i++) {
    if (strcmp(w->cache[i].key, key) == 0) {
      r = w->cache[i].run;
      free(w->cache[i].key);
      w->cache[i] = w->cache[--w->ncache];
      break;
    }
  }
  pthread_mutex_unlock(&w->mu);
  return r;
}

static void cache_put(dbx_worker *w, const char *key, dbx_wf_run *r) {
  dbx_wf_run *evict = NULL;
  char *k = dbx_strdup(key);
  if (!k) {
    dbx_wf_run_destroy(r);
    return;
  }
  pthread_mutex_lock(&w->mu);
  if (w->ncache == w->cache_max) {
    size_t old = 0;
    for (size_t i = 1; i < w->ncache; i++)
      if (w->cache[i].used < w->cache[old].used) old = i;
    evict = w->cache[old].run;
    free(w->cache[old].key);
    w->cache[old] = w->cache[--w->ncache];
  }
  if (!w->cache) w->cache = dbx_calloc(w->cache_max, sizeof *w->cache);
  if (w->cache) {
    w->cache[w->ncache++] = (cache_ent){k, r, ++w->cache_clock};
  } else {
    evict = r; /* no memory for a cache: run uncached */
    free(k);
  }
  pthread_mutex_unlock(&w->mu);
  dbx_wf_run_destroy(evict);
}

/* ------------------------------------------------------------ workflow tasks */

static const dbx_workflow_type *find_wf(dbx_worker *w, const char *name) {
  for (size_t i = 0; i < w->nwfs; i++)
    if (strcmp(w->wfs[i]->name, name) == 0) return w->wfs[i];
  return NULL;
}

/* rq, f, ai: caller's; strings borrowed. */
static void fill_failed(RespondWorkflowTaskFailedRequest *rq, Failure *f, ApplicationFailureInfo *ai,
                        const PollWorkflowTaskQueueResponse *t, int cause, const char *type,
                        const char *msg, const char *ns, const char *identity) {
  *rq = (RespondWorkflowTaskFailedRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_FAILED_REQUEST);
  *f = (Failure)INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  *ai = (ApplicationFailureInfo)INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  f->message = (char *)msg;
  f->source = "durabox";
  ai->type = (char *)type;
  f->failure_info_case = FI(APPLICATION_FAILURE_INFO);
  f->application_failure_info = ai;
  rq->task_token = t->task_token;
  rq->cause = cause;
  rq->failure = f;
  rq->identity = (char *)identity;
  rq->namespace_ = (char *)ns;
}

static void wft_fail_send(dbx_worker *w, const RespondWorkflowTaskFailedRequest *rq) {
  char *err = NULL;
  ProtobufCMessage *rs = NULL;
  dbx_err rc = dbx_client_call(w->client, "RespondWorkflowTaskFailed", &rq->base,
                               &RespondWorkflowTaskFailedResponse__D, CALL_TIMEOUT_MS, NULL, &rs,
                               &err);
  if (rc != DBX_OK) DBX_WARN("worker", "RespondWorkflowTaskFailed: %s", err ? err : dbx_strerror(rc));
  dbx_client_msg_free(rs);
  free(err);
  w->st_wft++;
}

static void wft_fail(dbx_worker *w, const PollWorkflowTaskQueueResponse *t, int cause,
                     const char *type, const char *msg) {
  RespondWorkflowTaskFailedRequest rq;
  Failure f;
  ApplicationFailureInfo ai;
  fill_failed(&rq, &f, &ai, t, cause, type, msg, w->ns, w->identity);
  wft_fail_send(w, &rq);
}

/* "5.2 MiB", "100 KiB", "512 bytes" into buf. */
static const char *size_text(char *buf, size_t cap, size_t n) {
  if (n >= ((size_t)1 << 20))
    snprintf(buf, cap, "%.1f MiB", (double)n / (1 << 20));
  else if (n >= 1024)
    snprintf(buf, cap, "%.1f KiB", (double)n / 1024);
  else
    snprintf(buf, cap, "%zu bytes", n);
  char *dot = strstr(buf, ".0 "); /* "4.0 MiB" -> "4 MiB" */
  if (dot) memmove(dot, dot + 2, strlen(dot + 2) + 1);
  return buf;
}

/* A completion of size bytes cannot reach the service (limit bytes): fail
 * the task with a clear cause instead of resending it. The service retries
 * the task with backoff; each attempt replays and ends here again, so the
 * warning is logged for the first attempt only. */
static void wft_fail_oversized(dbx_worker *w, const PollWorkflowTaskQueueResponse *t,
                               const char *wid, const char *rid, size_t size, size_t limit) {
  char a[32], b[32];
  char *m = dbx_asprintf("workflow task completion of %s exceeds the service's message limit of %s",
                         size_text(a, sizeof a, size), size_text(b, sizeof b, limit));
  if (t->attempt <= 1)
    DBX_WARN("worker", "%s/%s: %s; failing the workflow task", wid, rid, m ? m : "too large");
  else
    DBX_DEBUG("worker", "%s/%s (attempt %d): %s", wid, rid, t->attempt, m ? m : "too large");
  w->st_oversized++;
  wft_fail(w, t, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE), "WorkflowTaskTooLarge",
           m ? m : "workflow task completion exceeds the service's message limit");
  free(m);
}

/* Answer one query against r: DBX_OK with *json, else *msg (both malloc'd). */
static dbx_err run_query(dbx_wf_run *r, const WorkflowQuery *q, char **json, char **msg) {
  *json = NULL;
  *msg = NULL;
  char *args = q->query_args && q->query_args->n_payloads ? dbx_payloads_to_json(q->query_args) : NULL;
  if (q->query_args && q->query_args->n_payloads && !args) return DBX_ENOMEM;
  dbx_err rc = dbx_wf_run_query_args(r, q->query_type, args, args ? strlen(args) : 0, json);
  free(args);
  if (rc == DBX_ENOTFOUND)
    *msg = dbx_asprintf("unknown query type '%s'", q->query_type);
  else if (rc == DBX_ESTATE && *dbx_wf_run_error(r))
    *msg = dbx_strdup(dbx_wf_run_error(r));
  else if (rc != DBX_OK)
    *msg = dbx_asprintf("query failed: %s", dbx_strerror(rc));
  return rc;
}

typedef Temporal__Api__Query__V1__WorkflowQueryResult WorkflowQueryResult;
typedef Temporal__Api__Workflowservice__V1__RespondWorkflowTaskCompletedRequest__QueryResultsEntry
    query_result_entry;

/* Answers to the queries a workflow task carries (Temporal: PollWorkflowTask
 * QueueResponse.queries, answered in RespondWorkflowTaskCompletedRequest.
 * query_results). *out: n entries, free with query_results_free. */
static void query_results_free(query_result_entry **e, size_t n) {
  if (!e) return;
  for (size_t i = 0; i < n; i++) {
    if (!e[i]) continue;
    if (e[i]->value) {
      dbx_payloads_free(e[i]->value->answer);
      if (e[i]->value->error_message != protobuf_c_empty_string) free(e[i]->value->error_message);
      free(e[i]->value);
    }
    free(e[i]);
  }
  free(e);
}

static query_result_entry **query_results(dbx_wf_run *r, const PollWorkflowTaskQueueResponse *t) {
  query_result_entry **e = dbx_calloc(t->n_queries, sizeof *e);
  if (!e) return NULL;
  for (size_t i = 0; i < t->n_queries; i++) {
    const WorkflowQuery *q = t->queries[i]->value;
    e[i] = dbx_calloc(1, sizeof **e);
    WorkflowQueryResult *res = dbx_calloc(1, sizeof *res);
    if (!e[i] || !res) {
      free(res);
      query_results_free(e, t->n_queries);
      return NULL;
    }
    *e[i] = (query_result_entry)INIT(
        TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST__QUERY_RESULTS_ENTRY);
    *res = (WorkflowQueryResult)INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY_RESULT);
    e[i]->key = t->queries[i]->key;
    e[i]->value = res;
    char *json = NULL, *msg = NULL;
    dbx_err rc = q ? run_query(r, q, &json, &msg) : DBX_EINVAL;
    int ok;
    if (rc == DBX_OK) {
      res->result_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED;
      res->answer = dbx_payloads_from_json(json, strlen(json));
      ok = res->answer != NULL;
    } else {
      res->result_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_FAILED;
      res->error_message = msg ? msg : dbx_strdup("query failed");
      msg = NULL;
      /* out of memory is no answer to give: the task is not answered at all */
      ok = rc != DBX_ENOMEM && res->error_message;
    }
    free(json);
    free(msg);
    if (!ok) {
      query_results_free(e, t->n_queries);
      return NULL;
    }
  }
  return e;
}

static void answer_query(dbx_worker *w, const PollWorkflowTaskQueueResponse *t,
                         const dbx_workflow_type *type, HistoryEvent **evs, size_t n) {
  RespondQueryTaskCompletedRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_QUERY_TASK_COMPLETED_REQUEST);
  rq.task_token = t->task_token;
  rq.namespace_ = w->ns;
  char *json = NULL, *msg = NULL;
  dbx_wf_run *r = NULL;
  dbx_err rc = type ? dbx_wf_run_create(type, t->workflow_execution->workflow_id,
                                        t->workflow_execution->run_id, &r)
                    : DBX_ENOTFOUND;
  if (rc == DBX_OK) rc = dbx_wf_run_apply(r, evs, n, 0);
  if (rc == DBX_OK) rc = run_query(r, t->query, &json, &msg);
  if (rc == DBX_OK) {
    rq.completed_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED;
    rq.query_result = dbx_payloads_from_json(json, strlen(json));
  } else {
    rq.completed_type = TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_FAILED;
    if (!msg) {
      if (!type)
        msg = dbx_asprintf("workflow type not registered on this worker");
      else if (rc == DBX_ESTATE && r && *dbx_wf_run_error(r))
        msg = dbx_strdup(dbx_wf_run_error(r));
      else
        msg = dbx_asprintf("query failed: %s", dbx_strerror(rc));
    }
    rq.error_message = msg ? msg : "query failed";
  }
  char *err = NULL;
  ProtobufCMessage *rs = NULL;
  rc = dbx_client_call(w->client, "RespondQueryTaskCompleted", &rq.base,
                       &RespondQueryTaskCompletedResponse__D, CALL_TIMEOUT_MS, NULL, &rs, &err);
  if (rc != DBX_OK) DBX_WARN("worker", "RespondQueryTaskCompleted: %s", err ? err : dbx_strerror(rc));
  dbx_client_msg_free(rs);
  dbx_payloads_free(rq.query_result);
  free(err);
  free(json);
  free(msg);
  dbx_wf_run_destroy(r);
}

/* Cached state is usable when the event after its last applied one is the
 * WorkflowTaskCompleted of the task it answered. */
static int cache_valid(const dbx_wf_run *r, HistoryEvent **evs, size_t n) {
  int64_t next = dbx_wf_run_last_event_id(r) + 1;
  for (size_t i = 0; i < n; i++)
    if (evs[i]->event_id == next) return evs[i]->event_type == ET(WORKFLOW_TASK_COMPLETED);
  return 0;
}

static void answer_failed(dbx_wft_answer_ *a, const PollWorkflowTaskQueueResponse *t, int cause,
                          const char *type, const char *msg, const char *ns, const char *identity) {
  a->failed = 1;
  a->nondeterministic = cause == WFC(NON_DETERMINISTIC_ERROR);
  fill_failed(&a->failed_rq, &a->failure_, &a->info_, t, cause, type, msg, ns, identity);
}

dbx_err dbx_wft_answer_build_(const dbx_workflow_type *type, const PollWorkflowTaskQueueResponse *t,
                              HistoryEvent *const *evs, size_t n, const char *ns,
                              const char *identity, dbx_wf_run **run, dbx_wft_answer_ *out) {
  memset(out, 0, sizeof *out);
  const char *wid = t->workflow_execution ? t->workflow_execution->workflow_id : "";
  const char *rid = t->workflow_execution ? t->workflow_execution->run_id : "";
  if (!type) {
    out->msg_ = dbx_asprintf("workflow type '%s' is not registered on this worker",
                             t->workflow_type ? t->workflow_type->name : "");
    answer_failed(out, t, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE), "WorkflowTypeNotRegistered",
                  out->msg_ ? out->msg_ : "workflow type not registered", ns, identity);
    return DBX_OK;
  }
  dbx_err rc = DBX_OK;
  for (int tries = 0; tries < 2; tries++) {
    if (!*run) {
      rc = dbx_wf_run_create(type, wid, rid, run);
      if (rc != DBX_OK) return rc;
    }
    dbx_wf_run_set_messages(*run, t->messages, t->n_messages);
    rc = dbx_wf_run_apply(*run, evs, n, t->started_event_id);
    dbx_wf_run_set_messages(*run, NULL, 0);
    if (rc != DBX_EINVAL) break;
    dbx_wf_run_destroy(*run); /* not contiguous with the cache: replay from scratch */
    *run = NULL;
  }
  if (rc == DBX_ESTATE) {
    answer_failed(out, t, WFC(NON_DETERMINISTIC_ERROR), "NonDeterminism", dbx_wf_run_error(*run),
                  ns, identity);
    return DBX_OK;
  }
  if (rc != DBX_OK) {
    answer_failed(out, t, WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE), "WorkerError", dbx_strerror(rc),
                  ns, identity);
    return DBX_OK;
  }
  rc = dbx_wf_run_commands(*run, &out->cmds_, &out->ncmds_);
  if (rc != DBX_OK) return rc;
  rc = dbx_wf_run_messages(*run, &out->msgs_, &out->nmsgs_);
  if (rc != DBX_OK) {
    dbx_wft_answer_cleanup_(out);
    return rc;
  }
  RespondWorkflowTaskCompletedRequest *rq = &out->completed;
  *rq = (RespondWorkflowTaskCompletedRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  rq->task_token = t->task_token;
  rq->commands = out->cmds_;
  rq->n_commands = out->ncmds_;
  rq->messages = out->msgs_;
  rq->n_messages = out->nmsgs_;
  rq->identity = (char *)identity;
  rq->namespace_ = (char *)ns;
  if (t->n_queries) {
    query_result_entry **qres = query_results(*run, t);
    if (!qres) {
      dbx_wft_answer_cleanup_(out);
      return DBX_ENOMEM;
    }
    out->qres_ = qres;
    out->nqres_ = t->n_queries;
    rq->query_results = qres;
    rq->n_query_results = t->n_queries;
  }
  return DBX_OK;
}

void dbx_wft_answer_cleanup_(dbx_wft_answer_ *a) {
  if (!a) return;
  query_results_free(a->qres_, a->nqres_);
  dbx_wf_run_commands_free(a->cmds_, a->ncmds_);
  dbx_wf_run_messages_free(a->msgs_, a->nmsgs_);
  free(a->msg_);
  memset(a, 0, sizeof *a);
}

/* The run's whole history up to the task's started event, fetched into
 * *more (cleaned first) with *evs pointing into it. */
static dbx_err fetch_full(dbx_worker *w, const PollWorkflowTaskQueueResponse *t, const char *wid,
                          const char *rid, dbx_client_history *more, HistoryEvent ***evs, size_t *n) {
  dbx_client_history_cleanup(more);
  memset(more, 0, sizeof *more);
  free(*evs);
  *evs = NULL;
  *n = 0;
  w->st_full_fetch++;
  char *err = NULL;
  dbx_err rc = dbx_client_get_history(w->client, wid, rid, NULL, more, &err);
  if (rc != DBX_OK) {
    DBX_WARN("worker", "%s/%s: full history for a task whose run is not cached: %s", wid, rid,
             err ? err : dbx_strerror(rc));
    free(err);
    return rc;
  }
  *evs = dbx_malloc((more->n + 1) * sizeof **evs);
  if (!*evs) return DBX_ENOMEM;
  for (size_t i = 0; i < more->n; i++) {
    /* events after the task's started one belong to later tasks */
    if (!t->query && t->started_event_id > 0 && more->events[i]->event_id > t->started_event_id) break;
    (*evs)[(*n)++] = more->events[i];
  }
  return DBX_OK;
}

static void process_wft(dbx_worker *w, PollWorkflowTaskQueueResponse *t) {
  dbx_client_history more = {0};
  HistoryEvent **evs = NULL;
  size_t n = 0;
  char *key = NULL;
  dbx_wf_run *r = NULL;
  dbx_wft_answer_ a = {0};
  const char *wid = t->workflow_execution ? t->workflow_execution->workflow_id : "";
  const char *rid = t->workflow_execution ? t->workflow_execution->run_id : "";
  const dbx_workflow_type *type = t->workflow_type ? find_wf(w, t->workflow_type->name) : NULL;
  size_t n0 = t->history ? t->history->n_events : 0;
  if (t->next_page_token.len) {
    dbx_client_history_opts ho = {0};
    ho.page_token = t->next_page_token.data;
    ho.page_token_len = t->next_page_token.len;
    char *err = NULL;
    dbx_err rc = dbx_client_get_history(w->client, wid, rid, &ho, &more, &err);
    if (rc != DBX_OK) {
      DBX_WARN("worker", "%s/%s: history pages: %s", wid, rid, err ? err : dbx_strerror(rc));
      free(err);
      goto out; /* the task times out and is retried */
    }
  }
  evs = dbx_malloc((n0 + more.n + 1) * sizeof *evs);
  if (!evs) goto out;
  for (size_t i = 0; i < n0; i++) evs[n++] = t->history->events[i];
  for (size_t i = 0; i < more.n; i++) evs[n++] = more.events[i];

  if (type && !t->query) {
    key = run_key(wid, rid);
    if (!key) goto out;
    r = cache_take(w, key);
    if (r && !cache_valid(r, evs, n)) {
      dbx_wf_run_destroy(r);
      r = NULL;
    }
    if (r) w->st_hits++;
  }
  /* a sticky task (or a query on Temporal's sticky queue) carries only the
   * events after the previous task's: without the run cached, replay needs
   * them all */
  if ((n == 0 || evs[0]->event_id > 1) && !r && (type || t->query)) {
    if (fetch_full(w, t, wid, rid, &more, &evs, &n) != DBX_OK) goto out; /* the task times out and is retried */
  }
  if (t->query) {
    answer_query(w, t, type, evs, n);
    goto out;
  }
  dbx_err rc = dbx_wstore_history_put(w->ws, w->ns, wid, rid, evs, n);
  if (rc != DBX_OK) DBX_WARN("worker", "%s/%s: recording history: %s", wid, rid, dbx_strerror(rc));
  if (dbx_wft_answer_build_(type, t, evs, n, w->ns, w->identity, &r, &a) != DBX_OK) goto out;
  if (a.failed) {
    if (a.nondeterministic) {
      w->st_nondet++;
      DBX_WARN("worker", "%s/%s: %s", wid, rid, a.failed_rq.failure->message);
    }
    wft_fail_send(w, &a.failed_rq);
    goto out;
  }
  size_t size = protobuf_c_message_get_packed_size(&a.completed.base);
  if (size > w->max_msg) {
    wft_fail_oversized(w, t, wid, rid, size, w->max_msg);
    goto out; /* drop the cached state: the next attempt replays */
  }
  /* the run stays cached: its next tasks may come on this worker's sticky queue */
  TaskQueue stq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Temporal__Api__Taskqueue__V1__StickyExecutionAttributes sa =
      INIT(TEMPORAL__API__TASKQUEUE__V1__STICKY_EXECUTION_ATTRIBUTES);
  Duration s2s;
  if (w->sticky_tq && !dbx_wf_run_closed(r)) {
    stq.name = w->sticky_tq;
    stq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY;
    stq.normal_name = w->tq;
    dbx_pb_duration_init_ms(&s2s, w->sticky_s2s_ms);
    sa.worker_task_queue = &stq;
    sa.schedule_to_start_timeout = &s2s;
    a.completed.sticky_attributes = &sa;
  }
  char *err = NULL;
  ProtobufCMessage *rs = NULL;
  w->st_completions++;
  DBX_FAILPOINT("worker.wft.report.before");
  dbx_client_status cs;
  rc = dbx_client_call_status(w->client, "RespondWorkflowTaskCompleted", &a.completed.base,
                              &RespondWorkflowTaskCompletedResponse__D, CALL_TIMEOUT_MS, NULL, &rs,
                              &cs, &err);
  dbx_client_msg_free(rs);
  /* gRPC's size check (the service's limit, below ours), told by code; the
   * service's own RESOURCE_EXHAUSTED ("storage full") is transient. */
  if (rc != DBX_OK && cs.grpc_status == DBX_GRPC_RESOURCE_EXHAUSTED && cs.message_limit_bytes > 0) {
    free(err);
    wft_fail_oversized(w, t, wid, rid, size, cs.message_limit_bytes);
    goto out;
  }
  w->st_wft++;
  if (rc != DBX_OK) {
    DBX_WARN("worker", "%s/%s: RespondWorkflowTaskCompleted: %s", wid, rid,
             err ? err : dbx_strerror(rc));
    free(err);
    goto out; /* drop the cached state: the next task replays */
  }
  if (!dbx_wf_run_closed(r)) {
    cache_put(w, key, r);
    r = NULL;
  }
out:
  dbx_wft_answer_cleanup_(&a);
  dbx_wf_run_destroy(r);
  free(key);
  free(evs);
  dbx_client_history_cleanup(&more);
}

/* Wait until fewer than wft_n tasks wait for a thread: 1, or 0 when the
 * worker is stopping. */
static int wft_may_poll(dbx_worker *w) {
  pthread_mutex_lock(&w->wmu);
  while (w->wq_len >= w->wft_n && !w->stopping) pthread_cond_wait(&w->wcv_room, &w->wmu);
  int ok = !w->stopping;
  pthread_mutex_unlock(&w->wmu);
  return ok;
}

/* Hand a polled task (owned) to the workflow task threads. */
static void wft_queue(dbx_worker *w, PollWorkflowTaskQueueResponse *t) {
  wft_item *it = dbx_malloc(sizeof *it);
  if (!it) { /* run it here rather than leave it unanswered */
    process_wft(w, t);
    dbx_client_msg_free(t);
    return;
  }
  it->task = t;
  it->next = NULL;
  pthread_mutex_lock(&w->wmu);
  if (w->wq_tail) w->wq_tail->next = it;
  else w->wq_head = it;
  w->wq_tail = it;
  w->wq_len++;
  pthread_cond_signal(&w->wcv_task);
  pthread_mutex_unlock(&w->wmu);
}

/* A workflow task thread: runs queued tasks until stopped and drained. */
static void *wft_thread(void *arg) {
  dbx_worker *w = arg;
  pthread_mutex_lock(&w->wmu);
  for (;;) {
    while (!w->wq_head && !w->wft_stop) pthread_cond_wait(&w->wcv_task, &w->wmu);
    wft_item *it = w->wq_head;
    if (!it) break;
    w->wq_head = it->next;
    if (!w->wq_head) w->wq_tail = NULL;
    /* every waiting poller may poll now, not one: woken one at a time, a
     * normal poller took the room and the sticky ones slept on while their
     * tasks waited out the sticky schedule-to-start */
    w->wq_len--;
    pthread_cond_broadcast(&w->wcv_room);
    pthread_mutex_unlock(&w->wmu);
    process_wft(w, it->task);
    dbx_client_msg_free(it->task);
    free(it);
    pthread_mutex_lock(&w->wmu);
  }
  pthread_mutex_unlock(&w->wmu);
  return NULL;
}

static void wf_poll_loop(dbx_worker *w, int sticky) {
  unsigned seed = (unsigned)dbx_mono_ns();
  int failures = 0;
  while (wft_may_poll(w)) {
    PollWorkflowTaskQueueRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
    TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
    tq.name = sticky ? w->sticky_tq : w->tq;
    tq.kind = sticky ? TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY
                     : TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    if (sticky) tq.normal_name = w->tq;
    rq.namespace_ = w->ns;
    rq.task_queue = &tq;
    rq.identity = w->identity;
    PollWorkflowTaskQueueResponse *t = NULL;
    char *err = NULL;
    dbx_client_status st;
    dbx_err rc = dbx_client_call_ready_status(w->client, "PollWorkflowTaskQueue", &rq.base,
                                              &PollWorkflowTaskQueueResponse__D, POLL_TIMEOUT_MS,
                                              w->poll_cancel, (ProtobufCMessage **)&t, &st, &err);
    if (w->stopping) { /* stop() fires poll_cancel only after setting stopping */
      free(err);
      dbx_client_msg_free(t);
      break;
    }
    /* CANCELLED from the service (it was stopping) is transient like UNAVAILABLE */
    if (rc != DBX_OK) {
      if (rc != DBX_ETIMEDOUT) {
        poll_failed(w, sticky ? "sticky workflow task" : "workflow task", rc, &st, err);
        backoff(w, &failures, &seed, poll_backoff_max_ms(rc));
      }
      free(err);
      continue;
    }
    failures = 0;
    poll_answered(w);
    if (!t->task_token.len) { /* the long poll ended without a task */
      dbx_client_msg_free(t);
      continue;
    }
    if (sticky) w->st_sticky++;
    wft_queue(w, t);
  }
}

static void *wf_poller(void *arg) {
  wf_poll_loop(arg, 0);
  return NULL;
}

static void *wf_sticky_poller(void *arg) {
  wf_poll_loop(arg, 1);
  return NULL;
}

/* ------------------------------------------------------------ activities */

static const dbx_activity_type *find_act(dbx_worker *w, const char *name) {
  for (size_t i = 0; i < w->nacts; i++)
    if (strcmp(w->acts[i]->name, name) == 0) return w->acts[i];
  return NULL;
}

int dbx_act_cancelled(const dbx_act *a) { return atomic_load(&a->cancelled); }
int dbx_act_worker_stopping(const dbx_act *a) {
  return atomic_load(&a->cancelled) && atomic_load(&a->w->stopping) && !atomic_load(&a->cancel_requested) &&
         !atomic_load(&a->timed_out) && !atomic_load(&a->abandoned);
}
int32_t dbx_act_attempt(const dbx_act *a) { return a->task->attempt; }
int dbx_act_superseded(const dbx_act *a) {
  return atomic_load(&a->cancelled) && !atomic_load(&a->cancel_requested) &&
         (atomic_load(&a->timed_out) || atomic_load(&a->abandoned));
}
const char *dbx_act_workflow_id(const dbx_act *a) { return a->task->workflow_execution->workflow_id; }
const char *dbx_act_run_id(const dbx_act *a) { return a->task->workflow_execution->run_id; }
const char *dbx_act_activity_id(const dbx_act *a) { return a->task->activity_id; }
const char *dbx_act_heartbeat_details(const dbx_act *a) { return a->prev_details; }

int64_t dbx_act_remaining_ms(const dbx_act *a) {
  if (a->s2c_deadline_ns == INT64_MAX) return INT64_MAX;
  int64_t left = (a->s2c_deadline_ns - dbx_mono_ns()) / 1000000;
  return left > 0 ? left : 0;
}

/* How often a heartbeating activity's heartbeat is actually sent: 0.8 x
 * its heartbeat timeout (what the service needs) but at most every
 * HB_SEND_MAX_NS, because the reply is also how a cancel request reaches the
 * activity (RecordActivityTaskHeartbeatResponse.cancel_requested): a cancel
 * then reaches a running command within about a second whatever the timeout.
 * Cost: one small RPC (and one service write) per second per activity that
 * heartbeats (sandbox.exec and sandbox.create while they run); activities
 * that never call dbx_act_heartbeat send nothing (docs/worker.md). */
#define HB_SEND_MAX_NS 1000000000LL
static int64_t hb_send_interval_ns(int64_t hb_timeout_ns) {
  int64_t every = hb_timeout_ns ? hb_timeout_ns * 8 / 10 : HB_SEND_MAX_NS;
  return every < HB_SEND_MAX_NS ? every : HB_SEND_MAX_NS;
}

int dbx_act_heartbeat(dbx_act *a, const char *details_json) {
  int64_t now = dbx_mono_ns();
  atomic_store(&a->last_hb_ns, now);
  if (atomic_load(&a->abandoned)) return 1;
  int64_t every = hb_send_interval_ns(a->hb_timeout_ns);
  /* between sends, what is already known: a cancel request, a local
   * timeout, or the worker stopping after its grace period */
  if (a->last_sent_ns && now - a->last_sent_ns < every) return atomic_load(&a->cancelled);
  a->last_sent_ns = now;
  dbx_worker *w = a->w;
  RecordActivityTaskHeartbeatRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_REQUEST);
  rq.task_token = a->task->task_token;
  rq.details = details_json ? dbx_payloads_from_json(details_json, strlen(details_json)) : NULL;
  rq.identity = w->identity;
  rq.namespace_ = w->ns;
  RecordActivityTaskHeartbeatResponse *rs = NULL;
  char *err = NULL;
  /* a hung call must not hide a lost service past the heartbeat timeout */
  int64_t call_ms = CALL_TIMEOUT_MS;
  if (a->hb_timeout_ns && a->hb_timeout_ns / 2000000 < call_ms)
    call_ms = a->hb_timeout_ns / 2000000 > 100 ? a->hb_timeout_ns / 2000000 : 100;
  dbx_err rc = dbx_client_call(w->client, "RecordActivityTaskHeartbeat", &rq.base,
                               &RecordActivityTaskHeartbeatResponse__D, call_ms, NULL,
                               (ProtobufCMessage **)&rs, &err);
  if (rc == DBX_OK) {
    atomic_store(&a->hb_ok_ns, dbx_mono_ns());
    atomic_store(&a->hb_failing, 0);
  } else if (rc != DBX_ENOTFOUND) {
    atomic_store(&a->hb_failing, 1);
  }
  if (rc == DBX_OK && rs->cancel_requested) {
    atomic_store(&a->cancel_requested, 1);
    atomic_store(&a->cancelled, 1);
  } else if (rc == DBX_ENOTFOUND) {
    DBX_WARN("worker", "activity %s of %s: attempt is gone (%s); abandoning it",
             a->task->activity_id, dbx_act_workflow_id(a), err ? err : "not found");
    atomic_store(&a->abandoned, 1);
    atomic_store(&a->cancelled, 1);
  } else if (rc != DBX_OK) {
    DBX_DEBUG("worker", "heartbeat: %s", err ? err : dbx_strerror(rc));
  }
  dbx_client_msg_free(rs);
  dbx_payloads_free(rq.details);
  free(err);
  return atomic_load(&a->cancelled);
}

static Failure *mk_failure(Failure *f, ApplicationFailureInfo *ai, const char *type,
                           const char *msg, int non_retryable) {
  *f = (Failure)INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  *ai = (ApplicationFailureInfo)INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
  f->message = (char *)(msg ? msg : "");
  f->source = "durabox";
  ai->type = (char *)(type ? type : "");
  ai->non_retryable = non_retryable ? 1 : 0;
  f->failure_info_case = FI(APPLICATION_FAILURE_INFO);
  f->application_failure_info = ai;
  return f;
}

#define REPORT_RETRY_MS 30000
#define REPORT_BACKOFF_MAX_MS 1000

/* Report an outcome. kind: 0 completed, 1 failed, 2 canceled. Retries
 * transient errors until the attempt's start-to-close deadline (at least
 * REPORT_RETRY_MS; without one, until the worker stops); NotFound abandons. */
dbx_err dbx_act_report_build_(ProtobufCBinaryData task_token, const char *ns, const char *identity,
                              int kind, const dbx_act_result *res, dbx_act_report_ *out) {
  memset(out, 0, sizeof *out);
  if (kind == 0) {
    RespondActivityTaskCompletedRequest *cq = &out->completed_;
    *cq = (RespondActivityTaskCompletedRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_REQUEST);
    const char *j = res->result_json ? res->result_json : "null";
    out->result_ = dbx_payloads_from_json(j, strlen(j));
    if (!out->result_) return DBX_ENOMEM; /* never a completion without its result */
    cq->task_token = task_token;
    cq->result = out->result_;
    cq->identity = (char *)identity;
    cq->namespace_ = (char *)ns;
    out->req = &cq->base;
    out->method = "RespondActivityTaskCompleted";
    out->resp = &RespondActivityTaskCompletedResponse__D;
  } else if (kind == 1) {
    RespondActivityTaskFailedRequest *fq = &out->failed_;
    *fq = (RespondActivityTaskFailedRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_REQUEST);
    fq->task_token = task_token;
    fq->failure = mk_failure(&out->failure_, &out->info_, res->failure_type, res->failure_message,
                             res->non_retryable);
    fq->identity = (char *)identity;
    fq->namespace_ = (char *)ns;
    out->req = &fq->base;
    out->method = "RespondActivityTaskFailed";
    out->resp = &RespondActivityTaskFailedResponse__D;
  } else {
    RespondActivityTaskCanceledRequest *kq = &out->canceled_;
    *kq = (RespondActivityTaskCanceledRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_CANCELED_REQUEST);
    kq->task_token = task_token;
    kq->identity = (char *)identity;
    kq->namespace_ = (char *)ns;
    out->req = &kq->base;
    out->method = "RespondActivityTaskCanceled";
    out->resp = &RespondActivityTaskCanceledResponse__D;
  }
  return DBX_OK;
}

void dbx_act_report_cleanup_(dbx_act_report_ *r) {
  if (!r) return;
  dbx_payloads_free(r->result_);
  memset(r, 0, sizeof *r);
}

static void report(dbx_act *a, int kind, const dbx_act_result *res) {
  dbx_worker *w = a->w;
  dbx_act_report_ rp;
  if (dbx_act_report_build_(a->task->task_token, w->ns, w->identity, kind, res, &rp) != DBX_OK) {
    /* the result stays journaled; the attempt times out on the service */
    DBX_WARN("worker", "activity %s of %s: out of memory building its report; not reported",
             a->task->activity_id, dbx_act_workflow_id(a));
    return;
  }
  ProtobufCMessage *req = rp.req;
  const char *method = rp.method;
  const ProtobufCMessageDescriptor *rd = rp.resp;
  unsigned seed = (unsigned)dbx_mono_ns();
  int failures = 0;
  DBX_FAILPOINT("worker.report.before");
  /* Transient errors are retried until the attempt's own timeout says it is
   * gone (the service answers NotFound, or its start-to-close passed): a
   * report given up leaves the journaled result waiting for the attempt's
   * timeout (and an at_most_once step failing). Each try waits for the
   * channel, so the report goes out as soon as the service is back. */
  int64_t give_up_ns = dbx_mono_ns() + (int64_t)REPORT_RETRY_MS * 1000000;
  if (a->s2c_deadline_ns == INT64_MAX)
    give_up_ns = INT64_MAX;
  else if (a->s2c_deadline_ns > give_up_ns)
    give_up_ns = a->s2c_deadline_ns;
  for (;;) {
    char *err = NULL;
    ProtobufCMessage *rs = NULL;
    /* once the worker stops, a try no longer waits for a channel that is down */
    dbx_err rc = atomic_load(&w->stopping)
                     ? dbx_client_call(w->client, method, req, rd, CALL_TIMEOUT_MS, NULL, &rs, &err)
                     : dbx_client_call_ready(w->client, method, req, rd, CALL_TIMEOUT_MS, NULL, &rs,
                                             &err);
    dbx_client_msg_free(rs);
    if (rc == DBX_OK) {
      free(err);
      break;
    }
    if (rc == DBX_ENOTFOUND) {
      DBX_WARN("worker", "activity %s of %s: %s: attempt is gone (%s); abandoning it",
               a->task->activity_id, dbx_act_workflow_id(a), method, err ? err : "");
      free(err);
      break;
    }
    DBX_WARN("worker", "activity %s of %s: %s: %s", a->task->activity_id, dbx_act_workflow_id(a),
             method, err ? err : dbx_strerror(rc));
    free(err);
    if (rc != DBX_EUNAVAILABLE && rc != DBX_ETIMEDOUT) break;
    if (w->stopping || dbx_mono_ns() > give_up_ns) break;
    if (rc == DBX_EUNAVAILABLE) backoff(w, &failures, &seed, REPORT_BACKOFF_MAX_MS);
  }
  DBX_FAILPOINT("worker.report.after");
  dbx_act_report_cleanup_(&rp);
}

static void result_cleanup(dbx_act_result *r) {
  free(r->result_json);
  free(r->failure_type);
  free(r->failure_message);
  memset(r, 0, sizeof *r);
}

/* The class the workflow scheduled this task with (DBX_RETRY_CLASS_HEADER),
 * else the type's default. A step may only tighten safe_to_retry. */
static dbx_retry_class task_retry_class(const PollActivityTaskQueueResponse *t,
                                        dbx_retry_class type_class) {
  if (!t->header) return type_class;
  for (size_t i = 0; i < t->header->n_fields; i++) {
    const Temporal__Api__Common__V1__Header__FieldsEntry *f = t->header->fields[i];
    if (!f || !f->key || strcmp(f->key, DBX_RETRY_CLASS_HEADER) != 0 || !f->value) continue;
    const ProtobufCBinaryData *d = &f->value->data;
    if (d->len == 14 && memcmp(d->data, "\"at_most_once\"", 14) == 0) return DBX_AT_MOST_ONCE;
  }
  return type_class;
}

dbx_retry_class dbx_act_retry_class(const dbx_act *a) {
  return task_retry_class(a->task, a->type ? a->type->retry_class : DBX_SAFE_TO_RETRY);
}

/* The first step of an attempt: the journal decides; run() is called unless
 * the attempt is answered here. Returns 1 with *rcp = run()'s code when run
 * was called, 0 when the attempt was answered (reported) already. */
static int act_begin(dbx_act *a, dbx_err *rcp) {
  dbx_worker *w = a->w;
  PollActivityTaskQueueResponse *t = a->task;
  const char *wid = dbx_act_workflow_id(a), *rid = dbx_act_run_id(a), *aid = t->activity_id;
  const char *ns = t->workflow_namespace && *t->workflow_namespace ? t->workflow_namespace : w->ns;
  dbx_act_result res = {0};
  const char *tname = t->activity_type ? t->activity_type->name : "";
  a->type = find_act(w, tname);
  if (!a->type) {
    res.failure_type = dbx_strdup("ActivityTypeNotRegistered");
    res.failure_message = dbx_asprintf("activity type '%s' is not registered on worker %s", tname,
                                       w->identity);
    report(a, 1, &res);
    result_cleanup(&res);
    return 0;
  }
  dbx_journal_entry je;
  dbx_err rc = dbx_wstore_journal_get(w->ws, ns, wid, rid, aid, &je);
  if (rc != DBX_OK) {
    res.failure_type = dbx_strdup("JournalError");
    res.failure_message = dbx_asprintf("worker journal unreadable: %s", dbx_strerror(rc));
    res.non_retryable = task_retry_class(t, a->type->retry_class) == DBX_AT_MOST_ONCE;
    report(a, 1, &res);
    result_cleanup(&res);
    return 0;
  }
  dbx_retry_class cls = task_retry_class(t, a->type->retry_class);
  dbx_journal_decision d = dbx_journal_decide(&je, cls, t->attempt);
  if (dbx_journal_stale(&je, t->attempt))
    DBX_WARN("worker",
             "activity %s of %s/%s: discarding the journaled result of attempt %d (it closed "
             "before the result was reported); this is attempt %d, %s",
             aid, wid, rid, je.attempt, t->attempt,
             d == DBX_JOURNAL_RUN ? "running it again" : "answering OutcomeUnknown");
  if (d == DBX_JOURNAL_REPORT) {
    DBX_INFO("worker", "activity %s of %s/%s: reporting the journaled result of attempt %d",
             aid, wid, rid, je.attempt);
    report(a, je.result.failure_type ? 1 : 0, &je.result);
    dbx_journal_entry_cleanup(&je);
    return 0;
  }
  dbx_journal_entry_cleanup(&je);
  if (d == DBX_JOURNAL_OUTCOME_UNKNOWN) {
    res.failure_type = dbx_strdup("OutcomeUnknown");
    res.failure_message = dbx_asprintf(
        "at_most_once activity '%s' (activity id %s) was started before and never finished; "
        "its effect may already have happened, so it is not run again",
        tname, aid);
    res.non_retryable = 1;
    report(a, 1, &res);
    result_cleanup(&res);
    return 0;
  }
  char *input = dbx_payloads_to_json(t->input);
  if (cls == DBX_AT_MOST_ONCE) {
    /* Journal "started" and claim (type, input) for this activity id in one
     * commit: a later activity id of the same run with the same type and
     * input is refused until a person approves it (durabox approval grant). */
    char hash[DBX_INPUT_HASH_LEN + 1], *earlier = NULL;
    rc = input ? dbx_wstore_input_hash(input, strlen(input), hash) : DBX_ENOMEM;
    DBX_FAILPOINT("worker.journal.before_started");
    if (rc == DBX_OK)
      rc = dbx_wstore_amo_begin(w->ws, ns, wid, rid, aid, t->attempt, tname, hash, &earlier);
    DBX_FAILPOINT("worker.journal.after_started");
    if (rc == DBX_EEXIST) {
      res.failure_type = dbx_strdup("DuplicateAtMostOnce");
      res.failure_message = dbx_asprintf(
          "at_most_once activity '%s' with the same input already ran in this run as activity "
          "id %s; not run again without approval (input hash %s: durabox approval grant "
          "--workflow-id %s --run-id %s --activity-type %s --input-hash %s)",
          tname, earlier ? earlier : "?", hash, wid, rid, tname, hash);
      res.non_retryable = 1;
      DBX_WARN("worker", "activity %s of %s/%s: refused: duplicate of at_most_once activity %s",
               aid, wid, rid, earlier ? earlier : "?");
      free(earlier);
      free(input);
      report(a, 1, &res);
      result_cleanup(&res);
      return 0;
    }
    free(earlier);
    if (rc != DBX_OK) {
      res.failure_type = dbx_strdup("JournalError");
      res.failure_message = dbx_asprintf("cannot journal the start: %s; not run", dbx_strerror(rc));
      free(input);
      report(a, 1, &res);
      result_cleanup(&res);
      return 0;
    }
  }
  *rcp = input ? a->type->run(a, input, strlen(input), &a->res, a->type->ud) : DBX_ENOMEM;
  free(input);
  return 1;
}

/* After the last step (rc: its code, a->res its result): journal, report. */
static void act_finish(dbx_act *a, dbx_err rc) {
  dbx_worker *w = a->w;
  PollActivityTaskQueueResponse *t = a->task;
  const char *wid = dbx_act_workflow_id(a), *rid = dbx_act_run_id(a), *aid = t->activity_id;
  const char *ns = t->workflow_namespace && *t->workflow_namespace ? t->workflow_namespace : w->ns;
  dbx_act_result *res = &a->res;
  DBX_FAILPOINT("worker.activity.after_effect");
  if (atomic_load(&a->timed_out) || atomic_load(&a->abandoned)) {
    if (rc == DBX_OK) dbx_wstore_journal_result(w->ws, ns, wid, rid, aid, t->attempt, res);
    DBX_WARN("worker", "activity %s of %s/%s: %s; its result is not reported", aid, wid, rid,
             atomic_load(&a->timed_out) ? "timed out locally" : "abandoned");
    result_cleanup(res);
    return;
  }
  if (rc == DBX_ECANCELED) {
    if (atomic_load(&a->cancel_requested)) {
      report(a, 2, NULL);
    } else {
      result_cleanup(res);
      res->failure_type = dbx_strdup("WorkerShutdown");
      res->failure_message = dbx_strdup("the worker stopped while the activity ran");
      report(a, 1, res);
    }
    result_cleanup(res);
    return;
  }
  if (rc != DBX_OK && !res->failure_type) {
    res->failure_type = dbx_strdup("ActivityError");
    res->failure_message = dbx_asprintf("activity returned %s", dbx_strerror(rc));
  }
  rc = dbx_wstore_journal_result(w->ws, ns, wid, rid, aid, t->attempt, res);
  DBX_FAILPOINT("worker.journal.after_result");
  if (rc != DBX_OK)
    DBX_WARN("worker", "activity %s of %s/%s: journaling the result: %s", aid, wid, rid,
             dbx_strerror(rc));
  report(a, res->failure_type ? 1 : 0, res);
  result_cleanup(res);
}

static void act_free(dbx_act *a) {
  result_cleanup(&a->res);
  dbx_client_msg_free(a->task);
  free(a->prev_details);
  free(a);
}

/* ------------------------------------------------------------ executor */

dbx_err dbx_act_park(dbx_act *a, int fd, int64_t wait_ms, dbx_act_resume_fn resume, void *ctx) {
  if (!a || !resume || fd < -1 || wait_ms < 0 || a->park_set) return DBX_EINVAL;
  int64_t now = dbx_mono_ns();
  a->park_set = 1;
  a->park_fd = fd;
  a->park_until_ns = wait_ms > (INT64_MAX - now) / 1000000 ? INT64_MAX : now + wait_ms * 1000000;
  a->resume = resume;
  a->resume_ctx = ctx;
  return DBX_OK;
}

static dbx_err executor_open(dbx_worker *w) {
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  w->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (w->epfd < 0 || w->evfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->evfd, &ev) != 0)
    return DBX_EIO;
  w->pool = dbx_calloc((size_t)w->pool_n, sizeof *w->pool);
  return w->pool ? DBX_OK : DBX_ENOMEM;
}

static void reactor_poke(dbx_worker *w) {
  uint64_t one = 1;
  if (write(w->evfd, &one, sizeof one) < 0) { /* EAGAIN: a wake-up is pending already */
  }
}

/* Append to the run queue (caller holds w->xmu). */
static void runq_push(dbx_worker *w, dbx_act *a) {
  a->qnext = NULL;
  if (w->qtail) w->qtail->qnext = a;
  else w->qhead = a;
  w->qtail = a;
  pthread_cond_signal(&w->xcv);
}

/* The min-heap of parked attempts by park_until_ns (caller holds w->xmu). */
static void heap_set(dbx_worker *w, size_t i, dbx_act *a) {
  w->parked[i] = a;
  a->heap_i = i;
}
static void heap_up(dbx_worker *w, size_t i) {
  dbx_act *a = w->parked[i];
  while (i > 0 && w->parked[(i - 1) / 2]->park_until_ns > a->park_until_ns) {
    heap_set(w, i, w->parked[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  heap_set(w, i, a);
}
static void heap_down(dbx_worker *w, size_t i) {
  dbx_act *a = w->parked[i];
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= w->nparked) break;
    if (c + 1 < w->nparked && w->parked[c + 1]->park_until_ns < w->parked[c]->park_until_ns) c++;
    if (w->parked[c]->park_until_ns >= a->park_until_ns) break;
    heap_set(w, i, w->parked[c]);
    i = c;
  }
  heap_set(w, i, a);
}

/* Un-park a: out of the heap and the epoll set, onto the run queue. Only the
 * reactor calls this (caller holds w->xmu). */
static void unpark(dbx_worker *w, dbx_act *a) {
  size_t i = a->heap_i;
  if (i >= w->nparked || w->parked[i] != a) return;
  dbx_act *last = w->parked[--w->nparked];
  w->st_parked = w->nparked;
  if (i < w->nparked) {
    heap_set(w, i, last);
    heap_up(w, i);
    heap_down(w, last->heap_i);
  }
  if (a->park_fd_added) epoll_ctl(w->epfd, EPOLL_CTL_DEL, a->park_fd, NULL);
  a->park_fd_added = 0;
  runq_push(w, a);
}

/* Hand a step that parked to the reactor. The wait is capped at the next
 * heartbeat of an attempt that heartbeats, so its resume keeps heartbeats
 * (and with them cancel requests) flowing. */
static void park_insert(dbx_worker *w, dbx_act *a) {
  if (a->last_sent_ns) {
    int64_t due = a->last_sent_ns + hb_send_interval_ns(a->hb_timeout_ns);
    if (due < a->park_until_ns) a->park_until_ns = due;
  }
  pthread_mutex_lock(&w->xmu);
  if (w->nparked == w->capparked) {
    size_t cap = w->capparked ? w->capparked * 2 : 64;
    dbx_act **np = dbx_realloc(w->parked, cap * sizeof *np);
    if (!np) { /* no room to park: run the resume again at once (a busy wait, not a loss) */
      runq_push(w, a);
      pthread_mutex_unlock(&w->xmu);
      return;
    }
    w->parked = np;
    w->capparked = cap;
  }
  heap_set(w, w->nparked++, a);
  w->st_parked = w->nparked;
  heap_up(w, a->heap_i);
  a->park_fd_added = 0;
  if (a->park_fd >= 0) { /* a fd epoll refuses (a regular file) leaves the timer */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = a};
    a->park_fd_added = epoll_ctl(w->epfd, EPOLL_CTL_ADD, a->park_fd, &ev) == 0;
  }
  pthread_mutex_unlock(&w->xmu);
  reactor_poke(w);
}

/* An attempt is over: out of w->running, its slot free, freed. */
static void act_done(dbx_act *a) {
  dbx_worker *w = a->w;
  pthread_mutex_lock(&w->mu);
  for (dbx_act **pp = &w->running; *pp; pp = &(*pp)->next)
    if (*pp == a) {
      *pp = a->next;
      break;
    }
  atomic_store(&a->done, 1);
  w->st_in_flight--;
  w->slots_used--;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  act_free(a);
}

/* Run one step of a: run() first, then a resume per park. */
static void act_step(dbx_act *a) {
  dbx_err rc = DBX_OK;
  a->park_set = 0;
  if (!a->begun) {
    a->begun = 1;
    if (!act_begin(a, &rc)) {
      act_done(a);
      return;
    }
  } else {
    rc = a->resume(a, &a->res, a->resume_ctx);
  }
  if (a->park_set) {
    park_insert(a->w, a);
    return;
  }
  act_finish(a, rc);
  act_done(a);
}

static void *pool_thread(void *arg) {
  dbx_worker *w = arg;
  pthread_mutex_lock(&w->xmu);
  for (;;) {
    while (!w->qhead && !w->x_stop) pthread_cond_wait(&w->xcv, &w->xmu);
    dbx_act *a = w->qhead;
    if (!a) break;
    w->qhead = a->qnext;
    if (!w->qhead) w->qtail = NULL;
    pthread_mutex_unlock(&w->xmu);
    act_step(a);
    pthread_mutex_lock(&w->xmu);
  }
  pthread_mutex_unlock(&w->xmu);
  return NULL;
}

static void watchdog_scan(dbx_worker *w);

#define SCAN_NS 50000000LL
/* The reactor: wakes parked attempts (fd, time, cancellation) and runs the
 * watchdog pass every SCAN_NS. */
static void *reactor_thread(void *arg) {
  dbx_worker *w = arg;
  struct epoll_event evs[64];
  int64_t next_scan = 0;
  pthread_mutex_lock(&w->xmu);
  while (!w->x_stop) {
    int64_t now = dbx_mono_ns();
    if (now >= next_scan) {
      pthread_mutex_unlock(&w->xmu);
      watchdog_scan(w);
      pthread_mutex_lock(&w->xmu);
      for (size_t i = w->nparked; i-- > 0;)
        if (i < w->nparked && atomic_load(&w->parked[i]->cancelled)) unpark(w, w->parked[i]);
      next_scan = now + SCAN_NS;
    }
    while (w->nparked && w->parked[0]->park_until_ns <= now) unpark(w, w->parked[0]);
    int64_t until = next_scan;
    if (w->nparked && w->parked[0]->park_until_ns < until) until = w->parked[0]->park_until_ns;
    int ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
    pthread_mutex_unlock(&w->xmu);
    int n = epoll_wait(w->epfd, evs, 64, ms);
    pthread_mutex_lock(&w->xmu);
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL) {
        uint64_t v;
        if (read(w->evfd, &v, sizeof v) < 0) { /* EAGAIN: drained */
        }
      } else {
        unpark(w, evs[i].data.ptr);
      }
    }
  }
  pthread_mutex_unlock(&w->xmu);
  return NULL;
}

/* Start the pool and the reactor. */
static dbx_err executor_start(dbx_worker *w) {
  if (pthread_create(&w->reactor, NULL, reactor_thread, w) != 0) return DBX_ENOMEM;
  w->reactor_started = 1;
  for (; w->pool_started < w->pool_n; w->pool_started++)
    if (pthread_create(&w->pool[w->pool_started], NULL, pool_thread, w) != 0) return DBX_ENOMEM;
  return DBX_OK;
}

/* Stop the pool and the reactor (every attempt is done). */
static void executor_stop(dbx_worker *w) {
  pthread_mutex_lock(&w->xmu);
  w->x_stop = 1;
  pthread_cond_broadcast(&w->xcv);
  pthread_mutex_unlock(&w->xmu);
  if (w->evfd >= 0) reactor_poke(w);
  for (int i = 0; i < w->pool_started; i++) pthread_join(w->pool[i], NULL);
  w->pool_started = 0;
  if (w->reactor_started) pthread_join(w->reactor, NULL);
  w->reactor_started = 0;
}

static void *act_poller(void *arg) {
  dbx_worker *w = arg;
  unsigned seed = (unsigned)dbx_mono_ns() ^ 0x5bd1e995u;
  int failures = 0;
  while (!w->stopping) {
    pthread_mutex_lock(&w->mu);
    while (!w->stopping && w->slots_used >= w->slots) pthread_cond_wait(&w->cv, &w->mu);
    if (w->stopping) {
      pthread_mutex_unlock(&w->mu);
      break;
    }
    w->slots_used++;
    pthread_mutex_unlock(&w->mu);
    PollActivityTaskQueueRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
    TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
    tq.name = w->tq;
    tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    rq.namespace_ = w->ns;
    rq.task_queue = &tq;
    rq.identity = w->identity;
    PollActivityTaskQueueResponse *t = NULL;
    char *err = NULL;
    dbx_client_status st;
    dbx_err rc = dbx_client_call_ready_status(w->client, "PollActivityTaskQueue", &rq.base,
                                              &PollActivityTaskQueueResponse__D, POLL_TIMEOUT_MS,
                                              w->poll_cancel, (ProtobufCMessage **)&t, &st, &err);
    if (rc == DBX_OK) { /* an empty poll answered too: the service is fine */
      failures = 0;
      poll_answered(w);
    }
    int got = rc == DBX_OK && t->task_token.len && t->workflow_execution;
    dbx_act *a = got ? dbx_calloc(1, sizeof *a) : NULL;
    if (!a) {
      pthread_mutex_lock(&w->mu);
      w->slots_used--;
      pthread_cond_broadcast(&w->cv);
      pthread_mutex_unlock(&w->mu);
      dbx_client_msg_free(t);
      if (w->stopping) { /* a CANCELLED poll otherwise backs off and polls again */
        free(err);
        break;
      }
      if (rc != DBX_OK && rc != DBX_ETIMEDOUT) {
        poll_failed(w, "activity task", rc, &st, err);
        backoff(w, &failures, &seed, poll_backoff_max_ms(rc));
      }
      free(err);
      continue;
    }
    free(err);
    failures = 0;
    w->st_act++;
    a->w = w;
    a->task = t;
    int64_t now = dbx_mono_ns();
    int64_t s2c = dbx_pb_duration_ns(t->start_to_close_timeout);
    if (!s2c) s2c = dbx_pb_duration_ns(t->schedule_to_close_timeout);
    a->s2c_deadline_ns = s2c ? now + s2c : INT64_MAX;
    a->hb_timeout_ns = dbx_pb_duration_ns(t->heartbeat_timeout);
    atomic_store(&a->last_hb_ns, now);
    atomic_store(&a->hb_ok_ns, now);
    if (t->heartbeat_details && t->heartbeat_details->n_payloads)
      a->prev_details = dbx_payloads_to_json(t->heartbeat_details);
    a->park_fd = -1;
    pthread_mutex_lock(&w->mu);
    a->next = w->running;
    w->running = a;
    w->st_in_flight++;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&w->xmu);
    runq_push(w, a);
    pthread_mutex_unlock(&w->xmu);
  }
  return NULL;
}

/* Marks attempts whose start-to-close or heartbeat timer passed (the
 * reactor runs it every SCAN_NS). */
static void watchdog_scan(dbx_worker *w) {
  pthread_mutex_lock(&w->mu);
  {
    int64_t now = dbx_mono_ns();
    for (dbx_act *a = w->running; a; a = a->next) {
      if (atomic_load(&a->done) || atomic_load(&a->timed_out)) continue;
      int s2c = now > a->s2c_deadline_ns;
      int hb = a->hb_timeout_ns && now - atomic_load(&a->last_hb_ns) > a->hb_timeout_ns;
      /* heartbeats are sent but fail: past the timeout the service has timed
       * the attempt out (or will), so its result could only be late */
      int lost = a->hb_timeout_ns && atomic_load(&a->hb_failing) &&
                 now - atomic_load(&a->hb_ok_ns) > a->hb_timeout_ns;
      if (s2c || hb || lost) {
        atomic_store(&a->timed_out, 1);
        atomic_store(&a->cancelled, 1);
        if (lost && !s2c && !hb)
          DBX_WARN("worker",
                   "activity %s of %s: heartbeats have not reached the service for longer than "
                   "the heartbeat timeout; cancelling the attempt (its result will not be reported)",
                   a->task->activity_id, a->task->workflow_execution->workflow_id);
        else
          DBX_WARN("worker", "activity %s of %s: %s timeout passed; cancelling the attempt",
                   a->task->activity_id, a->task->workflow_execution->workflow_id,
                   s2c ? "start-to-close" : "heartbeat");
      }
    }
  }
  pthread_mutex_unlock(&w->mu);
}

/* ------------------------------------------------------------ retention */

#define ES(x) TEMPORAL__API__ENUMS__V1__WORKFLOW_EXECUTION_STATUS__WORKFLOW_EXECUTION_STATUS_##x

/* Once per gRPC status, the first time a question failed with it: a
 * retention that never removes anything should say why. */
static atomic_uint g_sweep_warned;

/* The service's word on one run of the worker store (wstore.h). Only an
 * answer that the run has closed removes it. Everything else keeps it:
 * a run of another namespace than the worker's (this service may not be
 * theirs); NOT_FOUND, which says as much about the question as about the
 * run (a namespace this service lacks, a store shared with another
 * service's worker) and so is kept and asked again a retention later,
 * like any other refusal and any status this code does not know as
 * closed (a newer server's PAUSED); and a service that could not be
 * reached, asked again at the next pass. */
static dbx_wstore_run_status run_status(void *arg, const char *ns, const char *wid,
                                        const char *rid) {
  dbx_worker *w = arg;
  if (atomic_load(&w->stopping)) return DBX_WSTORE_RUN_UNKNOWN;
  if (strcmp(ns, w->ns) != 0) return DBX_WSTORE_RUN_OPEN;
  WorkflowExecution ex = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  ex.workflow_id = (char *)wid;
  ex.run_id = (char *)rid;
  DescribeWorkflowExecutionRequest rq =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  rq.namespace_ = w->ns;
  rq.execution = &ex;
  DescribeWorkflowExecutionResponse *rs = NULL;
  dbx_client_status st;
  char *err = NULL;
  dbx_err rc = dbx_client_call_status(w->client, "DescribeWorkflowExecution", &rq.base,
                                      &DescribeWorkflowExecutionResponse__D, SWEEP_CALL_MS,
                                      w->poll_cancel, (ProtobufCMessage **)&rs, &st, &err);
  dbx_wstore_run_status out = DBX_WSTORE_RUN_OPEN;
  if (rc == DBX_OK && rs && rs->workflow_execution_info) {
    switch ((int)rs->workflow_execution_info->status) {
      case ES(COMPLETED): case ES(FAILED): case ES(CANCELED): case ES(TERMINATED):
      case ES(CONTINUED_AS_NEW): case ES(TIMED_OUT):
        out = DBX_WSTORE_RUN_CLOSED;
        break;
      default:
        break; /* running, or a status not known here as closed */
    }
  } else if (rc != DBX_OK && (st.grpc_status == DBX_GRPC_OK || st.grpc_status == DBX_GRPC_UNAVAILABLE ||
                              st.grpc_status == DBX_GRPC_DEADLINE_EXCEEDED ||
                              st.grpc_status == DBX_GRPC_CANCELLED)) {
    out = DBX_WSTORE_RUN_UNKNOWN; /* not reached, or stopped: ask at the next pass */
  } else if (rc != DBX_OK) {
    unsigned bit = 1u << (st.grpc_status & 31);
    if (!(atomic_fetch_or(&g_sweep_warned, bit) & bit))
      DBX_WARN("worker", "worker store retention: DescribeWorkflowExecution of %s: %s; the run is "
               "kept and asked about again a retention later", wid, err ? err : dbx_strerror(rc));
  }
  free(err);
  dbx_client_msg_free(rs);
  return out;
}
#undef ES

/* A pass's questions: asked by up to SWEEP_ASKERS threads at once (the
 * upkeep thread and threads started for the pass), since one at a time a pass
 * could not keep up with a busy worker: each call waits its turn in the
 * service's batch, and calls that arrive together share a batch. */
typedef struct {
  dbx_worker *w;
  dbx_wstore_run_ask *runs;
  size_t n;
  atomic_size_t next;
} sweep_asks;

static void *ask_thread(void *arg) {
  sweep_asks *a = arg;
  for (size_t i; (i = atomic_fetch_add(&a->next, 1)) < a->n;)
    a->runs[i].status = run_status(a->w, a->runs[i].ns, a->runs[i].workflow_id, a->runs[i].run_id);
  return NULL;
}

static void ask_service(void *arg, dbx_wstore_run_ask *runs, size_t n) {
  sweep_asks a = {.w = arg, .runs = runs, .n = n};
  atomic_init(&a.next, 0);
  pthread_t th[SWEEP_ASKERS - 1];
  size_t k = n < SWEEP_ASKERS ? n : SWEEP_ASKERS, started = 0;
  while (started + 1 < k && pthread_create(&th[started], NULL, ask_thread, &a) == 0) started++;
  ask_thread(&a); /* the upkeep thread asks too (alone when no thread could start) */
  for (size_t i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* The store's upkeep: every RELEASE_PAGES_MS it unmaps the store's pages
 * read since (dbx_wstore_release_pages), so the worker's resident set does
 * not grow with its store; with a retention, every retention / 2 it sweeps
 * (at once again while a pass fills up and removes some). */
static void *upkeep_thread(void *arg) {
  dbx_worker *w = arg;
  int sweeping = w->retention_ms > 0;
  int64_t period = w->retention_ms / 2;
  if (period < SWEEP_PERIOD_MIN_MS) period = SWEEP_PERIOD_MIN_MS;
  if (period > SWEEP_PERIOD_MAX_MS) period = SWEEP_PERIOD_MAX_MS;
  int64_t next_sweep = dbx_mono_ns() / 1000000 + period;
  dbx_err last = DBX_OK, last_release = DBX_OK;
  int full = 0; /* the last pass asked SWEEP_MAX_RUNS: more are due, go on at once */
  while (!atomic_load(&w->stopping)) {
    if (!full) {
      int64_t wait = next_sweep - dbx_mono_ns() / 1000000;
      if (!sweeping || wait > RELEASE_PAGES_MS) wait = RELEASE_PAGES_MS;
      if (wait > 0) nap(w, wait);
    }
    if (atomic_load(&w->stopping)) break;
    dbx_err rel = dbx_wstore_release_pages(w->ws);
    if (rel != DBX_OK && rel != last_release) /* once per kind of failure, again after a success */
      DBX_WARN("worker",
               "worker store: cannot unmap the pages it read (%s); they stay in its resident set "
               "until a later try succeeds",
               dbx_wstore_release_errmsg(w->ws));
    last_release = rel;
    if (!sweeping || (!full && dbx_mono_ns() / 1000000 < next_sweep)) continue;
    dbx_wstore_sweep_result r;
    dbx_err rc = dbx_wstore_sweep(w->ws, w->retention_ms, dbx_wall_ns() / 1000000, SWEEP_MAX_RUNS,
                                  ask_service, w, &r);
    next_sweep = dbx_mono_ns() / 1000000 + period;
    if (rc != DBX_OK && rc != last) /* once per kind of failure, not every pass */
      DBX_WARN("worker", "worker store retention: %s; closed runs stay until a later pass",
               dbx_strerror(rc));
    last = rc;
    full = rc == DBX_OK && r.asked == SWEEP_MAX_RUNS && r.removed > 0;
    if (r.removed) DBX_DEBUG("worker", "worker store retention: removed %zu closed runs", r.removed);
    atomic_fetch_add(&w->st_swept, r.removed);
    atomic_fetch_add(&w->st_sweeps, 1);
  }
  return NULL;
}

dbx_err dbx_worker_start(dbx_worker *w) {
  if (!w) return DBX_EINVAL;
  if (w->started) return DBX_ESTATE;
  w->started = 1;
  int total = w->n_wf_pollers + w->n_act_pollers + (w->sticky_tq ? w->n_sticky_pollers : 0);
  w->threads = dbx_calloc((size_t)total, sizeof *w->threads);
  if (!w->threads) return DBX_ENOMEM;
  if (executor_start(w) != DBX_OK) {
    DBX_ERROR("worker", "cannot start the activity executor's threads");
    return DBX_ENOMEM;
  }
  for (; w->wft_started < w->wft_n; w->wft_started++)
    if (pthread_create(&w->wft[w->wft_started], NULL, wft_thread, w) != 0) {
      DBX_ERROR("worker", "cannot start the workflow task threads");
      return DBX_ENOMEM;
    }
  for (int i = 0; i < total; i++) {
    void *(*fn)(void *) = i < w->n_wf_pollers                     ? wf_poller
                          : i < w->n_wf_pollers + w->n_act_pollers ? act_poller
                                                                   : wf_sticky_poller;
    if (pthread_create(&w->threads[w->nthreads], NULL, fn, w) != 0) {
      DBX_ERROR("worker", "cannot start poller threads");
      return DBX_ENOMEM;
    }
    w->nthreads++;
  }
  if (pthread_create(&w->upkeep, NULL, upkeep_thread, w) != 0) {
    DBX_ERROR("worker", "cannot start the worker store's upkeep thread");
    return DBX_ENOMEM;
  }
  w->upkeep_started = 1;
  DBX_INFO("worker", "polling task queue '%s' in namespace '%s' as %s", w->tq, w->ns, w->identity);
  return DBX_OK;
}

void dbx_worker_stop(dbx_worker *w, int64_t grace_ms) {
  if (!w || !w->started || w->stopped) return;
  pthread_mutex_lock(&w->mu);
  w->stopping = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_lock(&w->wmu); /* pollers waiting for room in the queue */
  pthread_cond_broadcast(&w->wcv_room);
  pthread_mutex_unlock(&w->wmu);
  dbx_rpc_cancel_fire(w->poll_cancel);
  for (int i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  w->nthreads = 0;
  if (w->upkeep_started) pthread_join(w->upkeep, NULL);
  w->upkeep_started = 0;
  /* no poller is left to queue a task: the threads answer the queued ones and end */
  pthread_mutex_lock(&w->wmu);
  w->wft_stop = 1;
  pthread_cond_broadcast(&w->wcv_task);
  pthread_mutex_unlock(&w->wmu);
  for (int i = 0; i < w->wft_started; i++) pthread_join(w->wft[i], NULL);
  w->wft_started = 0;
  /* Let running activities finish within the grace period, then cancel them. */
  int64_t deadline = dbx_mono_ns() + (grace_ms > 0 ? grace_ms : 0) * 1000000LL;
  pthread_mutex_lock(&w->mu);
  while (w->slots_used > 0 && dbx_mono_ns() < deadline) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  for (dbx_act *a = w->running; a; a = a->next) atomic_store(&a->cancelled, 1);
  /* parked ones are woken by the reactor's next pass; each reports and
   * leaves w->running (act_done broadcasts w->cv) */
  while (w->running) pthread_cond_wait(&w->cv, &w->mu);
  w->stopped = 1;
  pthread_mutex_unlock(&w->mu);
  executor_stop(w);
  ShutdownWorkerRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SHUTDOWN_WORKER_REQUEST);
  rq.namespace_ = w->ns;
  rq.identity = w->identity;
  rq.reason = "graceful shutdown";
  rq.task_queue = w->tq;
  rq.sticky_task_queue = w->sticky_tq ? w->sticky_tq : "";
  ProtobufCMessage *rs = NULL;
  dbx_err rc = dbx_client_call(w->client, "ShutdownWorker", &rq.base, &ShutdownWorkerResponse__D,
                               2000, NULL, &rs, NULL);
  if (rc != DBX_OK) DBX_DEBUG("worker", "ShutdownWorker: %s", dbx_strerror(rc));
  dbx_client_msg_free(rs);
  DBX_INFO("worker", "stopped");
}

void dbx_worker_destroy(dbx_worker *w) {
  if (!w) return;
  dbx_worker_stop(w, 0);
  for (size_t i = 0; i < w->ncache; i++) {
    free(w->cache[i].key);
    dbx_wf_run_destroy(w->cache[i].run);
  }
  free(w->cache);
  free(w->threads);
  free(w->pool);
  free(w->wft);
  free(w->parked);
  if (w->epfd >= 0) close(w->epfd);
  if (w->evfd >= 0) close(w->evfd);
  pthread_mutex_destroy(&w->xmu);
  pthread_cond_destroy(&w->xcv);
  pthread_mutex_destroy(&w->wmu);
  pthread_cond_destroy(&w->wcv_task);
  pthread_cond_destroy(&w->wcv_room);
  free(w->wfs);
  free(w->acts);
  dbx_rpc_cancel_destroy(w->poll_cancel);
  dbx_client_destroy(w->client);
  dbx_wstore_close(w->ws);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->ns);
  free(w->tq);
  free(w->identity);
  free(w->sticky_tq);
  free(w);
}
