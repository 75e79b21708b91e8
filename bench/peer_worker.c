/* dbx-bench-worker: the C worker's side of the benchmark matrix
 * (bench/matrix.sh), the same workflows under the same names and inputs as
 * the Go SDK worker (bench/peers/go) and the TypeScript SDK worker
 * (bench/peers/ts):
 *   bench.Chain {"n":N}  N no-op activities (bench.noop) one after another;
 *   bench.Hold  {"ms":M} one activity (bench.sleep) that sleeps M ms.
 * Connects to --address, polls --task-queue, keeps its store in --db-dir
 * (durable commits unless --no-sync), runs until SIGTERM or SIGINT. Not a
 * test. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "worker/worker.h"

/* The integer after "key": in a small JSON object, or dflt. */
static long json_int(const char *json, size_t len, const char *key, long dflt) {
  char pat[32], buf[256];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1),
           json ? json : "");
  const char *p = strstr(buf, pat);
  if (!p) return dflt;
  char *end = NULL;
  long v = strtol(p + strlen(pat), &end, 10);
  return end == p + strlen(pat) ? dflt : v;
}

typedef struct {
  long n, ms;
  char input[64];
} bench_wf;

static void chain_next(bench_wf *b, dbx_wf *wf, const char *type, int64_t start_to_close_ms) {
  dbx_activity_opts o = {0};
  o.start_to_close_ms = start_to_close_ms;
  if (dbx_wf_schedule_activity(wf, type, b->input, &o) < 1)
    dbx_wf_fail(wf, "BenchError", "could not schedule an activity");
}

static void *chain_create(dbx_wf *wf, const char *json, size_t len) {
  bench_wf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->n = json_int(json, len, "n", 1);
  snprintf(b->input, sizeof b->input, "{\"n\":%ld}", b->n);
  chain_next(b, wf, "bench.noop", 30000);
  return b;
}

static void chain_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  bench_wf *b = st;
  if (o->status != DBX_ACT_COMPLETED)
    dbx_wf_fail(wf, "BenchError", "a no-op activity did not complete");
  else if (seq < b->n)
    chain_next(b, wf, "bench.noop", 30000);
  else
    dbx_wf_complete(wf, NULL);
}

static void *hold_create(dbx_wf *wf, const char *json, size_t len) {
  bench_wf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->ms = json_int(json, len, "ms", 1000);
  snprintf(b->input, sizeof b->input, "{\"ms\":%ld}", b->ms);
  chain_next(b, wf, "bench.sleep", b->ms + 120000);
  return b;
}

static void hold_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq;
  if (o->status != DBX_ACT_COMPLETED)
    dbx_wf_fail(wf, "BenchError", "the sleeping activity did not complete");
  else
    dbx_wf_complete(wf, NULL);
}

static const dbx_workflow_type wf_chain = {"bench.Chain", chain_create, chain_on_activity, NULL,
                                           NULL, NULL, NULL, free};
static const dbx_workflow_type wf_hold = {"bench.Hold", hold_create, hold_on_activity, NULL,
                                          NULL, NULL, NULL, free};

static dbx_err act_noop(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a, (void)in, (void)len, (void)ud;
  res->result_json = NULL;
  return DBX_OK;
}

/* Sleeps parked on a timer (worker/api.h dbx_act_park: no thread held); a
 * cancel or a stopping worker wakes and ends it early. */
static dbx_err sleep_resume(dbx_act *a, dbx_act_result *res, void *ctx) {
  int64_t *until = ctx;
  int64_t left = (*until - dbx_mono_ns()) / 1000000;
  if (left > 0 && !dbx_act_cancelled(a) && dbx_act_park(a, -1, left, sleep_resume, until) == DBX_OK)
    return DBX_OK;
  free(until);
  res->result_json = NULL;
  return DBX_OK;
}

static dbx_err act_sleep(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)ud;
  int64_t *until = malloc(sizeof *until);
  if (!until) return DBX_ENOMEM;
  *until = dbx_mono_ns() + (int64_t)json_int(in, len, "ms", 1000) * 1000000;
  return sleep_resume(a, res, until);
}

static const dbx_activity_type at_noop = {"bench.noop", DBX_SAFE_TO_RETRY, act_noop, NULL};
static const dbx_activity_type at_sleep = {"bench.sleep", DBX_SAFE_TO_RETRY, act_sleep, NULL};

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig, g_stop = 1; }

static void usage(void) {
  fprintf(stderr,
          "usage: dbx-bench-worker --address HOST:PORT --db-dir DIR [--task-queue Q]\n"
          "         [--slots N] [--pollers N] [--act-pollers N] [--threads N] [--wft-threads N]\n"
          "         [--store-retention-ms MS] [--no-sync]\n"
          "  --pollers N      workflow, sticky and activity pollers each (2)\n"
          "  --act-pollers N  activity pollers (after --pollers)\n"
          "  --threads N      activity pool threads (dbx_worker_opts.activity_threads)\n"
          "  --wft-threads N  workflow task threads (dbx_worker_opts.workflow_task_threads)\n"
          "  --store-retention-ms MS  the worker store's retention (dbx_worker_opts.\n"
          "                   store_retention_ms; default 24 h)\n");
}

/* A count flag's value: a whole decimal number in 1..max, or -1 (told on stderr). */
static int count_arg(const char *flag, const char *v, int max) {
  char *end = NULL;
  errno = 0;
  long n = v ? strtol(v, &end, 10) : 0;
  if (!v || end == v || *end || errno || n < 1 || n > max) {
    fprintf(stderr, "dbx-bench-worker: %s wants a number from 1 to %d, not '%s'\n", flag, max,
            v ? v : "");
    return -1;
  }
  return (int)n;
}

int main(int argc, char **argv) {
  dbx_worker_cap_malloc_arenas(); /* as durabox's own main does */
  dbx_worker_opts wo = {0};
  wo.task_queue = "bench";
  wo.activity_slots = 2000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--address") == 0 && v) wo.address = argv[++i];
    else if (strcmp(a, "--db-dir") == 0 && v) wo.db_dir = argv[++i];
    else if (strcmp(a, "--task-queue") == 0 && v) wo.task_queue = argv[++i];
    else if (strcmp(a, "--slots") == 0 && v) {
      if ((wo.activity_slots = count_arg(a, argv[++i], 100000)) < 0) return 2;
    } else if (strcmp(a, "--pollers") == 0 && v) {
      if ((wo.workflow_pollers = wo.activity_pollers = count_arg(a, argv[++i], 1024)) < 0) return 2;
    } else if (strcmp(a, "--act-pollers") == 0 && v) {
      if ((wo.activity_pollers = count_arg(a, argv[++i], 1024)) < 0) return 2;
    } else if (strcmp(a, "--threads") == 0 && v) {
      if ((wo.activity_threads = count_arg(a, argv[++i], 1024)) < 0) return 2;
    } else if (strcmp(a, "--wft-threads") == 0 && v) {
      if ((wo.workflow_task_threads = count_arg(a, argv[++i], 1024)) < 0) return 2;
    } else if (strcmp(a, "--store-retention-ms") == 0 && v) {
      if ((wo.store_retention_ms = count_arg(a, argv[++i], 1000000000)) < 0) return 2;
    } else if (strcmp(a, "--no-sync") == 0) wo.no_sync = 1;
    else {
      usage();
      return 2;
    }
  }
  if (!wo.address || !wo.db_dir) {
    usage();
    return 2;
  }
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  dbx_log_set_level(DBX_LOG_WARN);
  dbx_rpc_global_init();
  dbx_worker *w = NULL;
  char *err = NULL;
  if (dbx_worker_create(&wo, &w, &err) != DBX_OK || dbx_worker_register_workflow(w, &wf_chain) ||
      dbx_worker_register_workflow(w, &wf_hold) || dbx_worker_register_activity(w, &at_noop) ||
      dbx_worker_register_activity(w, &at_sleep) || dbx_worker_start(w) != DBX_OK) {
    fprintf(stderr, "dbx-bench-worker: %s\n", err ? err : "could not start the worker");
    free(err);
    dbx_worker_destroy(w);
    return 1;
  }
  while (!g_stop) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
  }
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_rpc_global_shutdown();
  return 0;
}
