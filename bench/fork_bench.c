/* dbx-fork-bench: the two figures of issue 12's benchmarks
 * (docs/benchmarks.md "Checkpoints and forks"):
 *  1. the fork of a 10,000-event durabox.Script run at a middle event: the
 *     history (synthetic, as the service records a Script of K exec steps
 *     with a durabox.checkpoint after every 100th; 6 events per step and per
 *     checkpoint, K = 1650 gives 10,000 events with 16 checkpoints) is packed
 *     into GetWorkflowExecutionHistory pages of 1,000 events and unpacked, as
 *     a reply off the wire, then the fork plan is made at the middle event
 *     (cli/fork.h dbx_fork_plan: recorded steps, their keys, the checkpoint)
 *     and printed as the activity's result JSON. The gRPC transfer itself is
 *     not in it (bench/replay_bench.c measures loading 10,000 events).
 *  2. a local checkpoint of a 100 MB workspace (100 files of 1 MiB of
 *     random bytes), and its restores: a new sandbox created from the
 *     snapshot (what a fork does) and dbx_local_sandbox_restore in place.
 * Times are medians (min, max) of --runs runs, wall clock (and, for the
 * plan, this process's CPU time, which a loaded machine changes less). Not a test: no assertions on
 * time; it exits non-zero when an operation fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/local.h"
#include "base/util.h"
#include "cli/fork.h"
#include "protos/pb.h"
#include "worker/client.h"

typedef struct {
  HistoryEvent **ev;
  size_t n, cap;
} hist;

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void add(hist *h, HistoryEvent *e) {
  if (h->n == h->cap) {
    h->cap = h->cap ? 2 * h->cap : 1024;
    h->ev = realloc(h->ev, h->cap * sizeof *h->ev);
    if (!h->ev) exit(1);
  }
  e->event_id = (int64_t)h->n + 1;
  HistoryEvent *c = (HistoryEvent *)dbx_pb_clone(&e->base);
  if (!c) exit(1);
  h->ev[h->n++] = c;
}

static void wft(hist *h) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  WorkflowTaskScheduledEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  e.event_type = ET(WORKFLOW_TASK_SCHEDULED);
  e.attributes_case = HEV(WORKFLOW_TASK_SCHEDULED);
  e.workflow_task_scheduled_event_attributes = &sa;
  add(h, &e);
  WorkflowTaskStartedEventAttributes st = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_STARTED_EVENT_ATTRIBUTES);
  st.scheduled_event_id = (int64_t)h->n;
  e = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_type = ET(WORKFLOW_TASK_STARTED);
  e.attributes_case = HEV(WORKFLOW_TASK_STARTED);
  e.workflow_task_started_event_attributes = &st;
  add(h, &e);
  WorkflowTaskCompletedEventAttributes ca = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_COMPLETED_EVENT_ATTRIBUTES);
  ca.scheduled_event_id = (int64_t)h->n - 1;
  ca.started_event_id = (int64_t)h->n;
  e = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_type = ET(WORKFLOW_TASK_COMPLETED);
  e.attributes_case = HEV(WORKFLOW_TASK_COMPLETED);
  e.workflow_task_completed_event_attributes = &ca;
  add(h, &e);
}

/* Scheduled, Started, Completed of one activity. */
static void activity(hist *h, const char *type, const char *in, const char *res) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  ActivityTaskScheduledEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  char aid[24];
  snprintf(aid, sizeof aid, "%zu", h->n);
  at.name = (char *)type;
  sa.activity_id = aid;
  sa.activity_type = &at;
  sa.input = dbx_payloads_from_json(in, strlen(in));
  e.event_type = ET(ACTIVITY_TASK_SCHEDULED);
  e.attributes_case = HEV(ACTIVITY_TASK_SCHEDULED);
  e.activity_task_scheduled_event_attributes = &sa;
  add(h, &e);
  dbx_payloads_free(sa.input);
  int64_t sched = (int64_t)h->n;
  ActivityTaskStartedEventAttributes st = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_STARTED_EVENT_ATTRIBUTES);
  st.scheduled_event_id = sched;
  st.attempt = 1;
  e = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_type = ET(ACTIVITY_TASK_STARTED);
  e.attributes_case = HEV(ACTIVITY_TASK_STARTED);
  e.activity_task_started_event_attributes = &st;
  add(h, &e);
  ActivityTaskCompletedEventAttributes ca = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_COMPLETED_EVENT_ATTRIBUTES);
  ca.scheduled_event_id = sched;
  ca.started_event_id = sched + 1;
  ca.result = dbx_payloads_from_json(res, strlen(res));
  e = (HistoryEvent)INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_type = ET(ACTIVITY_TASK_COMPLETED);
  e.attributes_case = HEV(ACTIVITY_TASK_COMPLETED);
  e.activity_task_completed_event_attributes = &ca;
  add(h, &e);
  dbx_payloads_free(ca.result);
}

static void build(hist *h, int k) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  WorkflowExecutionStartedEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_STARTED_EVENT_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = "durabox.Script";
  sa.workflow_type = &wt;
  e.event_type = ET(WORKFLOW_EXECUTION_STARTED);
  e.attributes_case = HEV(WORKFLOW_EXECUTION_STARTED);
  e.workflow_execution_started_event_attributes = &sa;
  add(h, &e);
  wft(h);
  char in[200], res[300];
  for (int i = 1; i <= k; i++) {
    snprintf(in, sizeof in, "{\"command\":\"make step-%d\",\"sandbox_id\":\"dbx-0123456789abcdef\","
                            "\"step\":\"s%d\"}", i, i);
    snprintf(res, sizeof res, "{\"exit_code\":0,\"stdout\":\"step %d ok\\n\",\"stderr\":\"\","
                              "\"timed_out\":false,\"duration_ms\":1234}", i);
    activity(h, "sandbox.exec", in, res);
    wft(h);
    if (i % 100 == 0) {
      long long cov = (long long)h->n - 1; /* the WorkflowTaskStarted just added */
      snprintf(in, sizeof in, "{\"sandbox_id\":\"dbx-0123456789abcdef\",\"name\":\"ck-run-e%lld\","
                              "\"covered_event_id\":%lld,\"reason\":\"every_steps\"}", cov, cov);
      snprintf(res, sizeof res, "{\"ref\":\"ck-run-e%lld\",\"name\":\"ck-run-e%lld\","
                                "\"covered_event_id\":%lld}", cov, cov, cov);
      activity(h, "durabox.checkpoint", in, res);
      wft(h);
    }
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static void show(const char *name, int64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  printf("%-48s median %9.3f ms  (min %.3f, max %.3f, %d runs)\n", name, (double)v[n / 2] / 1e6,
         (double)v[0] / 1e6, (double)v[n - 1] / 1e6, n);
}

/* Pack the history as pages of 1,000 events and unpack them, then plan. */
static int fork_once(const hist *h, int64_t at, size_t *plan_bytes) {
  size_t pages = (h->n + 999) / 1000;
  int rc = 0;
  HistoryEvent **evs = malloc(h->n * sizeof *evs);
  GetWorkflowExecutionHistoryResponse **got = calloc(pages, sizeof *got);
  if (!evs || !got) return -1;
  size_t k = 0;
  for (size_t p = 0; p < pages; p++) {
    History hy = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
    GetWorkflowExecutionHistoryResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_RESPONSE);
    size_t from = p * 1000, n = h->n - from < 1000 ? h->n - from : 1000;
    hy.events = h->ev + from;
    hy.n_events = n;
    r.history = &hy;
    size_t len = protobuf_c_message_get_packed_size(&r.base);
    uint8_t *buf = malloc(len);
    if (!buf) return -1;
    protobuf_c_message_pack(&r.base, buf);
    got[p] = temporal__api__workflowservice__v1__get_workflow_execution_history_response__unpack(NULL, len, buf);
    free(buf);
    if (!got[p] || !got[p]->history) return -1;
    for (size_t i = 0; i < got[p]->history->n_events; i++) evs[k++] = got[p]->history->events[i];
  }
  char *why = NULL;
  cJSON *plan = dbx_fork_plan(evs, k, at, "bench-src", "run", &why);
  char *txt = plan ? cJSON_PrintUnformatted(plan) : NULL;
  if (!txt) {
    fprintf(stderr, "plan: %s\n", why ? why : "out of memory");
    rc = -1;
  }
  *plan_bytes = txt ? strlen(txt) : 0;
  free(txt);
  free(why);
  cJSON_Delete(plan);
  for (size_t p = 0; p < pages; p++) protobuf_c_message_free_unpacked(&got[p]->base, NULL);
  free(got);
  free(evs);
  return rc;
}

static int bench_fork(int runs) {
  hist h = {0};
  build(&h, 1650);
  int64_t at = (int64_t)h.n / 2, *t = calloc((size_t)runs, sizeof *t),
          *c = calloc((size_t)runs, sizeof *c);
  size_t bytes = 0;
  for (int i = 0; i < runs; i++) {
    int64_t t0 = now_ns(), c0 = cpu_ns();
    if (fork_once(&h, at, &bytes) != 0) return 1;
    t[i] = now_ns() - t0;
    c[i] = cpu_ns() - c0;
  }
  printf("history: %zu events, fork at event %lld, plan %zu bytes\n", h.n, (long long)at, bytes);
  show("fork plan (unpack 10 pages + plan + JSON)", t, runs);
  show("  the same, CPU time of this process", c, runs);
  free(c);
  for (size_t i = 0; i < h.n; i++) protobuf_c_message_free_unpacked(&h.ev[i]->base, NULL);
  free(h.ev);
  free(t);
  return 0;
}

static int bench_checkpoint(int runs, size_t mib) {
  char home[] = "/tmp/dbx-fork-bench-XXXXXX";
  if (!mkdtemp(home)) return 1;
  dbx_local_open_opts oo = {.unsandboxed = 1};
  dbx_local *d = NULL;
  if (dbx_local_open_with(home, &oo, &d) != DBX_OK) return 1;
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  int adopted = 0, rc = 0;
  if (dbx_local_sandbox_create(d, "bench-src", &src, &adopted) != DBX_OK) return 1;
  char *ws = dbx_local_sandbox_path(d, "bench-src");
  char *cmd = dbx_asprintf("cd '%s' && for i in $(seq 1 %zu); do head -c 1048576 /dev/urandom > f$i.bin; done",
                           ws, mib);
  if (!cmd || system(cmd) != 0) return 1;
  int64_t *tc = calloc((size_t)runs, sizeof *tc), *tr = calloc((size_t)runs, sizeof *tr),
          *tp = calloc((size_t)runs, sizeof *tp);
  for (int i = 0; i < runs && rc == 0; i++) {
    char name[64], id[64];
    char *ref = NULL;
    snprintf(name, sizeof name, "ck-bench-e%d", i);
    int64_t t0 = now_ns();
    if (dbx_local_sandbox_checkpoint(d, "bench-src", name, &ref) != DBX_OK) rc = 1;
    tc[i] = now_ns() - t0;
    snprintf(id, sizeof id, "bench-fork-%d", i);
    dbx_local_source from = {.kind = DBX_LOCAL_SOURCE_SNAPSHOT, .location = ref};
    t0 = now_ns();
    if (rc == 0 && dbx_local_sandbox_create(d, id, &from, &adopted) != DBX_OK) rc = 1;
    tr[i] = now_ns() - t0;
    t0 = now_ns();
    if (rc == 0 && dbx_local_sandbox_restore(d, id, ref) != DBX_OK) rc = 1;
    tp[i] = now_ns() - t0;
    if (rc != 0) fprintf(stderr, "checkpoint/restore: %s\n", dbx_local_errmsg(d));
    (void)dbx_local_sandbox_delete(d, id);
    (void)dbx_local_snapshot_delete(d, name);
    free(ref);
  }
  if (rc == 0) {
    printf("workspace: %zu files of 1 MiB under %s\n", mib, home);
    show("local checkpoint", tc, runs);
    show("restore: create a sandbox from the snapshot", tr, runs);
    show("restore: dbx_local_sandbox_restore in place", tp, runs);
  }
  free(tc);
  free(tr);
  free(tp);
  free(cmd);
  free(ws);
  dbx_local_close(d);
  char *rm = dbx_asprintf("rm -rf '%s'", home);
  if (rm && system(rm) != 0) rc = 1;
  free(rm);
  return rc;
}

int main(int argc, char **argv) {
  int runs = 11;
  size_t mib = 100;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = atoi(argv[++i]);
    else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) mib = (size_t)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: dbx-fork-bench [--runs R (11)] [--mib M (100)]\n");
      return 2;
    }
  }
  if (runs < 1 || mib < 1) return 2;
  if (bench_fork(runs) != 0) return 1;
  return bench_checkpoint(runs < 5 ? runs : 5, mib);
}
