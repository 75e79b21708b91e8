/* Integration test of the bounded activity executor (worker/worker.c
 * "Executor"): one in-process worker with a pool of POOL threads runs N
 * sandbox.exec activities at once, each a real detached command under its
 * supervisor (local driver, unsandboxed). Every command records that it
 * started, then blocks reading one line from a gate FIFO (no polling: 300
 * shells looping on sleep would fork 1,000 processes a second, load this
 * host and slow the worker's looks). While all N are in flight (every
 * command has started, none may finish), the test samples the threads of
 * this process (/proc/self/task) and asserts that they did not grow with
 * the activities: parked attempts hold a slot, no thread. Then it writes N
 * lines into the gate, one for each command, and asserts that every
 * activity completed with its own output. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "activities/local.h"
#include "activities/sandbox.h"
#include "base/fs.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/worker.h"

#ifdef __SANITIZE_ADDRESS__
#define N 150 /* each supervisor is this (ASan) binary re-executed: slower to start */
#else
#define N 300
#endif
#define POOL 8
#define SBX "pool-sbx"

typedef struct {
  int done, ok;
} fan_state;

/* t.Fan: N sandbox.exec activities at once; completes with {"ok": K}, K the
 * activities whose stdout was their own "out-<seq>". */
static void *fan_create(dbx_wf *wf, const char *in, size_t len) {
  (void)in, (void)len;
  fan_state *s = calloc(1, sizeof *s);
  if (s == NULL) {
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 300000;
  o.maximum_attempts = 1;
  for (int i = 1; i <= N; i++) {
    char input[256];
    snprintf(input, sizeof input,
             "{\"sandbox_id\":\"" SBX "\",\"command\":\"touch s/%d; read gate <> go; echo "
             "out-%d\"}",
             i, i);
    if (dbx_wf_schedule_activity(wf, "sandbox.exec", input, &o) != i) {
      dbx_wf_fail(wf, "TestError", "unexpected sequence number");
      return s;
    }
  }
  return s;
}

static void fan_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  fan_state *s = st;
  char want[32];
  snprintf(want, sizeof want, "\"out-%lld\\n\"", (long long)seq);
  if (o->status == DBX_ACT_COMPLETED && o->result_json && strstr(o->result_json, want) &&
      strstr(o->result_json, "\"exit_code\":0"))
    s->ok++;
  if (++s->done == N) {
    char r[64];
    snprintf(r, sizeof r, "{\"ok\":%d}", s->ok);
    dbx_wf_complete(wf, r);
  }
}

static const dbx_workflow_type wf_fan = {"t.Fan", fan_create, fan_on_activity, NULL, NULL,
                                         NULL, NULL, free};

static int count_dir(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_exec_pool_bounded_threads(void **state) {
  (void)state;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  char *svc_dir = dbx_test_tmpdir("itp-svc"), *wrk_dir = dbx_test_tmpdir("itp-wrk"),
       *home = dbx_test_tmpdir("itp-home");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = svc_dir;
  so.no_sync = 1;
  dbx_service *svc = NULL;
  assert_int_equal(dbx_service_start(&so, &svc, NULL), DBX_OK);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(svc));

  dbx_local *d = NULL;
  dbx_local_open_opts oo = {.unsandboxed = 1};
  assert_int_equal(dbx_local_open_with(home, &oo, &d), DBX_OK);
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  assert_int_equal(dbx_local_sandbox_create(d, SBX, &src, NULL), DBX_OK);
  char *ws = dbx_local_sandbox_path(d, SBX);
  assert_non_null(ws);
  char *sdir = dbx_asprintf("%s/s", ws), *gate = dbx_asprintf("%s/go", ws);
  assert_int_equal(dbx_fs_mkdirs(sdir, 0755), DBX_OK);
  assert_int_equal(mkfifo(gate, 0600), 0);
  dbx_sandbox_acts *acts = NULL;
  assert_int_equal(dbx_sandbox_acts_create(dbx_local_driver(d), &acts), DBX_OK);

  dbx_worker_opts wo = {0};
  wo.address = addr;
  wo.task_queue = "poolq";
  wo.db_dir = wrk_dir;
  wo.no_sync = 1;
  wo.activity_slots = N + 20;
  wo.activity_threads = POOL;
  dbx_worker *w = NULL;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&wo, &w, &err), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_fan), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, dbx_sandbox_acts_type(acts, "sandbox.exec")),
                   DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  nap_ms(300); /* let the pollers' and gRPC's threads settle before the baseline */
  int base = count_dir("/proc/self/task");

  dbx_client_start_opts st = {0};
  st.workflow_id = "fan";
  st.workflow_type = "t.Fan";
  st.task_queue = "poolq";
  st.input_json = "{}";
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &st, &rid, &err), DBX_OK);

  /* every command started (none can end before the gate opens): all N
   * attempts are in flight at once; threads sampled meanwhile */
  int peak = 0, started = 0;
  uint64_t max_in_flight = 0, max_parked = 0;
  dbx_worker_stats wst;
  int64_t deadline = dbx_mono_ns() + 150LL * 1000000000LL;
  for (int settled = 0; settled < 10 && dbx_mono_ns() < deadline;) {
    started = count_dir(sdir);
    if (started == N) settled++; /* and a second in that state */
    int t = count_dir("/proc/self/task");
    if (t > peak) peak = t;
    dbx_worker_get_stats(w, &wst);
    if (wst.activities_in_flight > max_in_flight) max_in_flight = wst.activities_in_flight;
    if (wst.activities_parked > max_parked) max_parked = wst.activities_parked;
    nap_ms(100);
  }
  fprintf(stderr,
          "it_exec_pool: %d of %d commands in flight; threads: %d before, %d at most; "
          "attempts in flight at most %llu, parked at most %llu\n",
          started, N, base, peak, (unsigned long long)max_in_flight,
          (unsigned long long)max_parked);
  assert_int_equal(started, N);
  assert_int_equal(max_in_flight, N);
  /* more attempts parked at once than there are threads to hold them (how
   * many more depends on how fast the pool looks, so on this host's load) */
  assert_true(max_parked > POOL);
  /* a thread per activity would be N more; gRPC may add a few of its own */
  assert_true(peak <= base + 12);

  /* each command's read takes one line: the shell reads a byte at a time
   * from a pipe, so no command takes another's */
  FILE *g = fopen(gate, "w");
  assert_non_null(g);
  for (int i = 0; i < N; i++) fputc('\n', g);
  assert_int_equal(fclose(g), 0);
  char *res = NULL;
  deadline = dbx_mono_ns() + 150LL * 1000000000LL;
  while (res == NULL && dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.close_event_only = 1;
    ho.timeout_ms = 5000;
    if (dbx_client_get_history(c, "fan", rid, &ho, &h, NULL) == DBX_OK && h.n > 0) {
      HistoryEvent *e = h.events[h.n - 1];
      res = e->event_type == TEMPORAL__API__ENUMS__V1__EVENT_TYPE__EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
                ? dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result)
                : dbx_asprintf("CLOSED:%d", (int)e->event_type);
    }
    dbx_client_history_cleanup(&h);
  }
  assert_non_null(res);
  char want[32];
  snprintf(want, sizeof want, "{\"ok\":%d}", N);
  assert_string_equal(res, want);

  free(res);
  free(rid);
  dbx_client_destroy(c);
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_sandbox_acts_destroy(acts);
  free(sdir);
  free(gate);
  free(ws);
  dbx_local_close(d);
  dbx_service_stop(svc);
  dbx_test_rmrf(svc_dir);
  dbx_test_rmrf(wrk_dir);
  dbx_test_rmrf(home);
  free(svc_dir);
  free(wrk_dir);
  free(home);
  dbx_rpc_global_shutdown();
}

int main(int argc, char **argv) {
  dbx_local_supervisor_main(argc, argv); /* this binary is re-executed as the supervisor */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exec_pool_bounded_threads),
  };
  return cmocka_run_group_tests_name("it_exec_pool", tests, NULL, NULL);
}
