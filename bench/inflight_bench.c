/* dbx-inflight-bench: the C worker holding many activities in flight
 * (issue 17: 1,000 in flight under 25 MiB and a few dozen threads; 10,000
 * sleeping activities on one worker). Not a test.
 *
 *   dbx-inflight-bench --kind sleep|exec --n N --ms M [--threads T] [--block] [--sync]
 *
 * The driver (this process) runs the embedded service in-process and starts
 * itself again as the worker (a child, so its RSS and threads are its own):
 * N workflows, each holding one activity for M ms: kind sleep, an activity
 * that parks on a timer (dbx_act_park, fd -1); kind exec, sandbox.exec of
 * `sleep M/1000` on one shared local sandbox (unsandboxed: a supervisor and a
 * sleep process per activity); --block makes the sleep hold its thread
 * (in 50 ms slices) as every activity did before the executor parked them
 * (with --threads N: the thread per activity of before). It samples the worker's /proc/PID/status
 * (VmRSS, VmHWM, Threads) every 100 ms and its stats (activities in flight
 * and parked, written by the worker to a file every 100 ms), and prints one
 * line when every workflow completed: the most in flight at once, peak RSS
 * (VmHWM) and threads, and the wall time. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "activities/local.h"
#include "activities/sandbox.h"
#include "base/fs.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "worker/client.h"
#include "worker/worker.h"

extern char **environ;

typedef struct {
  long n, ms, threads;
  const char *kind, *addr, *db, *home, *stats;
  int sync, block;
} bench_opts;

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ worker side */

static long g_ms;

static void *hold_create(dbx_wf *wf, int exec) {
  int *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  dbx_activity_opts o = {0};
  o.start_to_close_ms = g_ms + 600000;
  o.maximum_attempts = 1;
  char in[160];
  if (exec) {
    snprintf(in, sizeof in, "{\"sandbox_id\":\"ib\",\"command\":\"sleep %.3f\"}", g_ms / 1000.0);
    dbx_wf_schedule_activity(wf, "sandbox.exec", in, &o);
  } else {
    snprintf(in, sizeof in, "{\"ms\":%ld}", g_ms);
    dbx_wf_schedule_activity(wf, "ib.sleep", in, &o);
  }
  return st;
}

static void *sleep_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  return hold_create(wf, 0);
}
static void *exec_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  return hold_create(wf, 1);
}

static void hold_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  (void)st, (void)seq;
  if (o->status != DBX_ACT_COMPLETED)
    dbx_wf_fail(wf, "BenchError", "the held activity did not complete");
  else
    dbx_wf_complete(wf, NULL);
}

static const dbx_workflow_type wf_sleep = {"ib.Sleep", sleep_create, hold_on_activity, NULL,
                                           NULL, NULL, NULL, free};
static const dbx_workflow_type wf_exec = {"ib.Exec", exec_create, hold_on_activity, NULL,
                                          NULL, NULL, NULL, free};

/* Parks on a timer until its time is up (or it is cancelled). */
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
  (void)in, (void)len, (void)ud;
  int64_t *until = malloc(sizeof *until);
  if (!until) return DBX_ENOMEM;
  *until = dbx_mono_ns() + (int64_t)g_ms * 1000000;
  return sleep_resume(a, res, until);
}

/* kind block: the same sleep holding its thread (in 50 ms slices), as every
 * activity did before the executor parked them: run with --threads N. */
static dbx_err act_block(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)in, (void)len, (void)ud;
  int64_t until = dbx_mono_ns() + (int64_t)g_ms * 1000000;
  while (dbx_mono_ns() < until && !dbx_act_cancelled(a)) nap_ms(50);
  res->result_json = NULL;
  return DBX_OK;
}

static const dbx_activity_type at_sleep = {"ib.sleep", DBX_SAFE_TO_RETRY, act_sleep, NULL};
static const dbx_activity_type at_block = {"ib.sleep", DBX_SAFE_TO_RETRY, act_block, NULL};

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig, g_stop = 1; }

static int worker_main(const bench_opts *b) {
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  dbx_log_set_level(DBX_LOG_WARN);
  dbx_rpc_global_init();
  g_ms = b->ms;
  dbx_local *d = NULL;
  dbx_sandbox_acts *acts = NULL;
  dbx_local_open_opts oo = {.unsandboxed = 1};
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  if (dbx_local_open_with(b->home, &oo, &d) != DBX_OK ||
      dbx_local_sandbox_create(d, "ib", &src, NULL) != DBX_OK ||
      dbx_sandbox_acts_create(dbx_local_driver(d), &acts) != DBX_OK) {
    fprintf(stderr, "dbx-inflight-bench: local driver: %s\n", dbx_local_errmsg(d));
    return 1;
  }
  dbx_worker_opts wo = {0};
  wo.address = b->addr;
  wo.task_queue = "ib";
  wo.db_dir = b->db;
  wo.no_sync = !b->sync;
  wo.activity_slots = (int)b->n + 64;
  wo.activity_threads = (int)b->threads;
  wo.workflow_pollers = wo.activity_pollers = 4;
  dbx_worker *w = NULL;
  char *err = NULL;
  if (dbx_worker_create(&wo, &w, &err) != DBX_OK || dbx_worker_register_workflow(w, &wf_sleep) ||
      dbx_worker_register_workflow(w, &wf_exec) || dbx_worker_register_activity(w, b->block ? &at_block : &at_sleep) ||
      dbx_worker_register_activity(w, dbx_sandbox_acts_type(acts, "sandbox.exec")) ||
      dbx_worker_start(w) != DBX_OK) {
    fprintf(stderr, "dbx-inflight-bench: worker: %s\n", err ? err : "could not start");
    return 1;
  }
  char *tmp = dbx_asprintf("%s.tmp", b->stats);
  while (!g_stop) {
    dbx_worker_stats st;
    dbx_worker_get_stats(w, &st);
    FILE *f = fopen(tmp, "w");
    if (f) {
      fprintf(f, "%llu %llu\n", (unsigned long long)st.activities_in_flight,
              (unsigned long long)st.activities_parked);
      fclose(f);
      rename(tmp, b->stats);
    }
    nap_ms(100);
  }
  free(tmp);
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_sandbox_acts_destroy(acts);
  dbx_local_close(d);
  dbx_rpc_global_shutdown();
  return 0;
}

/* ------------------------------------------------------------ driver side */

static long status_kb(pid_t pid, const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  long v = -1;
  size_t kl = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, kl) == 0) v = strtol(line + kl, NULL, 10);
  if (f) fclose(f);
  return v;
}

static int driver_main(const bench_opts *b, const char *self) {
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  char tmpl[] = "/tmp/dbx-inflight-XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  char *svc_dir = dbx_asprintf("%s/svc", tmpl), *wdb = dbx_asprintf("%s/wdb", tmpl),
       *home = dbx_asprintf("%s/home", tmpl), *stats = dbx_asprintf("%s/stats", tmpl);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = !b->sync;
  dbx_service *svc = NULL;
  char *err = NULL;
  if (dbx_service_start(&so, &svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx-inflight-bench: service: %s\n", err ? err : "?");
    return 1;
  }
  char addr[64], nb[32], msb[32], thb[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));
  snprintf(nb, sizeof nb, "%ld", b->n);
  snprintf(msb, sizeof msb, "%ld", b->ms);
  snprintf(thb, sizeof thb, "%ld", b->threads);
  char *argv[22] = {(char *)self, "--worker", "--addr", addr, "--db", wdb, "--home", home,
                  "--stats", stats, "--n", nb, "--ms", msb, "--threads", thb,
                  "--kind", (char *)b->kind, NULL, NULL, NULL};
  int na = 18;
  if (b->block) argv[na++] = "--block";
  if (b->sync) argv[na++] = "--sync";
  pid_t wpid = -1;
  if (posix_spawn(&wpid, self, NULL, NULL, argv, environ) != 0) return 1;
  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  if (dbx_client_create(&co, &c) != DBX_OK) return 1;
  nap_ms(500);
  long base_threads = status_kb(wpid, "Threads:");
  const char *type = strcmp(b->kind, "exec") == 0 ? "ib.Exec" : "ib.Sleep";
  int64_t t0 = dbx_mono_ns();
  long started = 0, peak_threads = 0, peak_rss = 0, max_in_flight = 0, max_parked = 0;
  long rss_at_max = 0, threads_at_max = 0;
  for (long i = 0; i < b->n; i++) {
    char wid[64];
    snprintf(wid, sizeof wid, "ib-%ld", i);
    dbx_client_start_opts st = {0};
    st.workflow_id = wid;
    st.workflow_type = type;
    st.task_queue = "ib";
    st.input_json = "{}";
    char *rid = NULL;
    if (dbx_client_start_workflow(c, &st, &rid, NULL) == DBX_OK) started++;
    free(rid);
  }
  int64_t t_started = dbx_mono_ns();
  /* sample until every activity has come and gone (or 10 minutes) */
  int64_t deadline = t0 + 600LL * 1000000000LL;
  int seen_all = 0;
  while (dbx_mono_ns() < deadline) {
    long th = status_kb(wpid, "Threads:"), rss = status_kb(wpid, "VmRSS:");
    if (th > peak_threads) peak_threads = th;
    long hwm = status_kb(wpid, "VmHWM:");
    if (hwm > peak_rss) peak_rss = hwm;
    unsigned long long inf = 0, pk = 0;
    FILE *f = fopen(stats, "r");
    if (f) {
      if (fscanf(f, "%llu %llu", &inf, &pk) != 2) inf = pk = 0;
      fclose(f);
    }
    if ((long)inf > max_in_flight) {
      max_in_flight = (long)inf;
      rss_at_max = rss;
      threads_at_max = th;
    }
    if ((long)pk > max_parked) max_parked = (long)pk;
    if (inf >= (unsigned long long)b->n) seen_all = 1;
    if ((seen_all || dbx_mono_ns() - t_started > (b->ms + 30000) * 1000000LL) && inf == 0) break;
    nap_ms(100);
  }
  double wall = (dbx_mono_ns() - t0) / 1e9;
  printf("kind=%s n=%ld started=%ld ms=%ld threads_opt=%ld: in flight at most %ld (parked %ld); "
         "worker threads idle %ld, at most %ld (%ld at the most in flight); RSS at the most in "
         "flight %.1f MiB, peak (VmHWM) %.1f MiB; %.1f s to start all, %.1f s wall\n",
         b->kind, b->n, started, b->ms, b->threads, max_in_flight, max_parked, base_threads,
         peak_threads, threads_at_max, rss_at_max / 1024.0, peak_rss / 1024.0,
         (t_started - t0) / 1e9, wall);
  fflush(stdout);
  kill(wpid, SIGTERM);
  int wst;
  waitpid(wpid, &wst, 0);
  dbx_client_destroy(c);
  dbx_service_stop(svc);
  char *rm = dbx_asprintf("rm -rf '%s'", tmpl);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmpl);
  free(rm);
  free(svc_dir), free(wdb), free(home), free(stats);
  dbx_rpc_global_shutdown();
  return max_in_flight >= b->n ? 0 : 3;
}

int main(int argc, char **argv) {
  dbx_local_supervisor_main(argc, argv); /* the exec kind's supervisors are this binary */
  bench_opts b = {.n = 1000, .ms = 20000, .kind = "sleep"};
  int worker = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--worker") == 0) worker = 1;
    else if (strcmp(a, "--sync") == 0) b.sync = 1;
    else if (strcmp(a, "--block") == 0) b.block = 1;
    else if (strcmp(a, "--kind") == 0 && v) b.kind = argv[++i];
    else if (strcmp(a, "--n") == 0 && v) b.n = atol(argv[++i]);
    else if (strcmp(a, "--ms") == 0 && v) b.ms = atol(argv[++i]);
    else if (strcmp(a, "--threads") == 0 && v) b.threads = atol(argv[++i]);
    else if (strcmp(a, "--addr") == 0 && v) b.addr = argv[++i];
    else if (strcmp(a, "--db") == 0 && v) b.db = argv[++i];
    else if (strcmp(a, "--home") == 0 && v) b.home = argv[++i];
    else if (strcmp(a, "--stats") == 0 && v) b.stats = argv[++i];
    else {
      fprintf(stderr, "usage: dbx-inflight-bench --kind sleep|exec --n N --ms M [--threads T] "
                      "[--block] [--sync]\n");
      return 2;
    }
  }
  if (b.n < 1 || b.ms < 1) return 2;
  return worker ? worker_main(&b) : driver_main(&b, "/proc/self/exe");
}
