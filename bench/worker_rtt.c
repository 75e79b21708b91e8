/* dbx-worker-rtt: the round trip of a no-op activity through the C worker
 * (worker/worker.h) and the embedded service (service/service.h), in one
 * process over loopback gRPC.
 *
 * The workflow type bench.Chain schedules K no-op activities one after
 * another (the next one from the callback that sees the previous outcome).
 * The figure is, per activity, from the moment the workflow code calls
 * dbx_wf_schedule_activity() to the moment its on_activity() callback runs
 * with the outcome: what a workflow author waits for. The callbacks read the
 * monotonic clock only when the worker says they are not replaying, and only
 * write it to a side table, never into commands: the bench workflow stays
 * deterministic. The no-op activity stamps when it starts, which splits the
 * round trip in two: schedule -> activity running, activity running -> the
 * outcome seen by the workflow code.
 * Workflows run one at a time (no concurrency: unloaded latency). Durable
 * commits (service and worker store) unless --no-sync. Not a test: no
 * assertions on time. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "worker/client.h"
#include "worker/worker.h"

static int g_workflows = 20, g_acts = 100;
static _Atomic int64_t *g_sched, *g_start, *g_seen; /* [w * g_acts + (seq - 1)] */

static _Atomic int64_t *slot(_Atomic int64_t *tab, int w, int64_t seq) {
  if (w < 0 || w >= g_workflows || seq < 1 || seq > g_acts) return NULL;
  return &tab[(size_t)w * (size_t)g_acts + (size_t)(seq - 1)];
}

/* Record now into tab[w, seq] once (the first, live, observation wins). */
static void stamp(_Atomic int64_t *tab, int w, int64_t seq) {
  _Atomic int64_t *p = slot(tab, w, seq);
  int64_t zero = 0;
  if (p) atomic_compare_exchange_strong(p, &zero, dbx_mono_ns());
}

/* ------------------------------------------------------------ bench.Chain */

typedef struct {
  int w, n;
} chain;

static void chain_next(chain *c, dbx_wf *wf, int64_t seq) {
  char in[64];
  snprintf(in, sizeof in, "{\"w\":%d,\"s\":%lld}", c->w, (long long)seq);
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 10000;
  o.maximum_attempts = 3;
  if (!dbx_wf_is_replaying(wf)) stamp(g_sched, c->w, seq);
  if (dbx_wf_schedule_activity(wf, "bench.noop", in, &o) != seq)
    dbx_wf_fail(wf, "BenchError", "unexpected activity sequence number");
}

static void *chain_create(dbx_wf *wf, const char *json, size_t len) {
  char buf[128];
  snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), json);
  chain *c = calloc(1, sizeof *c);
  if (!c || sscanf(buf, "{\"w\":%d,\"n\":%d}", &c->w, &c->n) != 2 || c->n < 1) {
    free(c);
    dbx_wf_fail(wf, "InvalidInput", "bench.Chain needs {\"w\":W,\"n\":N}");
    return NULL;
  }
  chain_next(c, wf, 1);
  return c;
}

static void chain_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  chain *c = st;
  if (!dbx_wf_is_replaying(wf)) stamp(g_seen, c->w, seq);
  if (o->status != DBX_ACT_COMPLETED) {
    dbx_wf_fail(wf, "BenchError", "a no-op activity did not complete");
    return;
  }
  if (seq < c->n)
    chain_next(c, wf, seq + 1);
  else
    dbx_wf_complete(wf, NULL);
}

static const dbx_workflow_type wf_chain = {"bench.Chain", chain_create, chain_on_activity, NULL,
                                           NULL, NULL, NULL, free};

static dbx_err act_noop(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a, (void)len, (void)ud;
  int w = -1;
  long long s = 0;
  if (sscanf(in, "{\"w\":%d,\"s\":%lld}", &w, &s) == 2) stamp(g_start, w, s);
  res->result_json = NULL; /* null */
  return DBX_OK;
}

static const dbx_activity_type at_noop = {"bench.noop", DBX_SAFE_TO_RETRY, act_noop, NULL};

/* ------------------------------------------------------------ stats */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v, in ms. */
static double pct_ms(const int64_t *v, size_t n, double q) {
  if (n == 0) return 0;
  size_t k = (size_t)ceil(q * (double)n);
  if (k == 0) k = 1;
  if (k > n) k = n;
  return (double)v[k - 1] / 1e6;
}

static void report(const char *name, int64_t *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_i64);
  printf("%-34s n=%-6zu p50 %7.3f  p90 %7.3f  p99 %7.3f  max %7.3f ms\n", name, n,
         pct_ms(v, n, 0.50), pct_ms(v, n, 0.90), pct_ms(v, n, 0.99), pct_ms(v, n, 1.0));
}

/* Collect b - a over activities whose index within its workflow is in [lo, hi). */
static size_t diffs(_Atomic int64_t *a, _Atomic int64_t *b, int lo, int hi, int64_t *out) {
  size_t n = 0;
  for (int w = 0; w < g_workflows; w++)
    for (int s = lo; s < hi; s++) {
      int64_t x = atomic_load(slot(a, w, s + 1)), y = atomic_load(slot(b, w, s + 1));
      if (x && y && y >= x) out[n++] = y - x;
    }
  return n;
}

static double cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* ------------------------------------------------------------ main */

static void usage(void) {
  fprintf(stderr,
          "usage: dbx-worker-rtt [--workflows W] [--activities K] [--no-sync] [--dir DIR]\n"
          "  runs W workflows one after another, each a chain of K no-op activities\n"
          "  (defaults 20 x 100 = 2000 samples); LMDB under DIR (default: a fresh\n"
          "  directory in $TMPDIR or /tmp, removed at the end).\n");
}

static void rm_tree(const char *dir) {
  char *cmd = dbx_asprintf("rm -rf '%s'", dir);
  if (cmd && system(cmd) != 0) fprintf(stderr, "dbx-worker-rtt: could not remove %s\n", dir);
  free(cmd);
}

/* Wait for the close event of (wid, rid); 0 when it completed. */
static int wait_close(dbx_client *c, const char *wid, const char *rid) {
  for (int tries = 0; tries < 30; tries++) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.close_event_only = 1;
    ho.timeout_ms = 20000;
    dbx_err rc = dbx_client_get_history(c, wid, rid, &ho, &h, NULL);
    int type = rc == DBX_OK && h.n ? (int)h.events[h.n - 1]->event_type : 0;
    dbx_client_history_cleanup(&h);
    if (type) return type == ET(WORKFLOW_EXECUTION_COMPLETED) ? 0 : -1;
  }
  return -1;
}

int main(int argc, char **argv) {
  int no_sync = 0;
  const char *dir_opt = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--workflows") == 0 && i + 1 < argc) {
      g_workflows = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--activities") == 0 && i + 1 < argc) {
      g_acts = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--no-sync") == 0) {
      no_sync = 1;
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir_opt = argv[++i];
    } else {
      usage();
      return 2;
    }
  }
  if (g_workflows < 1 || g_acts < 1 || (int64_t)g_workflows * g_acts > 10000000) {
    usage();
    return 2;
  }
  size_t total = (size_t)g_workflows * (size_t)g_acts;
  g_sched = calloc(total, sizeof *g_sched);
  g_start = calloc(total, sizeof *g_start);
  g_seen = calloc(total, sizeof *g_seen);
  int64_t *buf = malloc(total * sizeof *buf);
  if (!g_sched || !g_start || !g_seen || !buf) return 1;

  char *root = NULL;
  if (dir_opt) {
    root = dbx_strdup(dir_opt);
    mkdir(root, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    root = dbx_asprintf("%s/dbx-worker-rtt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!root || !mkdtemp(root)) {
      perror("mkdtemp");
      return 1;
    }
  }
  char *svc_dir = dbx_asprintf("%s/service", root), *wrk_dir = dbx_asprintf("%s/worker", root);

  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_WARN);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = no_sync;
  dbx_service *svc = NULL;
  char *err = NULL;
  if (dbx_service_start(&so, &svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx-worker-rtt: service: %s\n", err ? err : "?");
    return 1;
  }
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  dbx_worker_opts wo = {0};
  wo.address = addr;
  wo.task_queue = "rtt";
  wo.db_dir = wrk_dir;
  wo.no_sync = no_sync;
  dbx_worker *w = NULL;
  if (dbx_worker_create(&wo, &w, &err) != DBX_OK ||
      dbx_worker_register_workflow(w, &wf_chain) != DBX_OK ||
      dbx_worker_register_activity(w, &at_noop) != DBX_OK || dbx_worker_start(w) != DBX_OK) {
    fprintf(stderr, "dbx-worker-rtt: worker: %s\n", err ? err : "?");
    return 1;
  }
  dbx_client_opts co = {0};
  co.address = addr;
  dbx_client *c = NULL;
  if (dbx_client_create(&co, &c) != DBX_OK) return 1;

  int failed = 0;
  int64_t t0 = dbx_mono_ns();
  double cpu0 = cpu_s();
  for (int i = 0; i < g_workflows && !failed; i++) {
    char wid[48], in[64];
    snprintf(wid, sizeof wid, "rtt-%d", i);
    snprintf(in, sizeof in, "{\"w\":%d,\"n\":%d}", i, g_acts);
    dbx_client_start_opts st = {0};
    st.workflow_id = wid;
    st.workflow_type = "bench.Chain";
    st.task_queue = "rtt";
    st.input_json = in;
    char *rid = NULL;
    if (dbx_client_start_workflow(c, &st, &rid, &err) != DBX_OK || wait_close(c, wid, rid) != 0) {
      fprintf(stderr, "dbx-worker-rtt: workflow %s failed: %s\n", wid, err ? err : "see history");
      failed = 1;
    }
    free(rid);
  }
  double wall_s = (double)(dbx_mono_ns() - t0) / 1e9, cpu = cpu_s() - cpu0;
  dbx_worker_stats ws;
  dbx_worker_get_stats(w, &ws);

  printf("dbx-worker-rtt: %d workflows x %d no-op activities, one at a time, %s commits\n",
         g_workflows, g_acts, no_sync ? "NOT synced (--no-sync)" : "durable");
  printf("wall %.2f s (%.0f activities/s), process CPU %.2f s (%.3f ms per activity)\n", wall_s,
         (double)total / wall_s, cpu, cpu * 1e3 / (double)total);
  printf("worker: %llu workflow tasks, %llu cache hits, %llu activity tasks, %llu poll errors\n",
         (unsigned long long)ws.workflow_tasks, (unsigned long long)ws.cache_hits,
         (unsigned long long)ws.activity_tasks, (unsigned long long)ws.poll_errors);
  report("schedule -> outcome seen (RTT)", buf, diffs(g_sched, g_seen, 0, g_acts, buf));
  report("  schedule -> activity running", buf, diffs(g_sched, g_start, 0, g_acts, buf));
  report("  activity running -> outcome seen", buf, diffs(g_start, g_seen, 0, g_acts, buf));
  int q = g_acts / 10 ? g_acts / 10 : 1;
  char name[64];
  snprintf(name, sizeof name, "RTT, activities 1..%d of each", q);
  report(name, buf, diffs(g_sched, g_seen, 0, q, buf));
  snprintf(name, sizeof name, "RTT, activities %d..%d of each", g_acts - q + 1, g_acts);
  report(name, buf, diffs(g_sched, g_seen, g_acts - q, g_acts, buf));

  dbx_client_destroy(c);
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_service_stop(svc);
  dbx_rpc_global_shutdown();
  if (!dir_opt) rm_tree(root);
  free(root);
  free(svc_dir);
  free(wrk_dir);
  free(buf);
  free((void *)g_sched);
  free((void *)g_start);
  free((void *)g_seen);
  return failed;
}
