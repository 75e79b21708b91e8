/* dbx-replay-bench: offline replay (worker/replay.h dbx_replay_run) of a
 * long history, and loading it from the worker's LMDB store (wstore.h).
 *
 * The history is synthetic but is what the service records for the workflow
 * type bench.Replay: it schedules K activities one after another (each from
 * the callback that sees the previous outcome), then starts one timer, and
 * completes when it fires. Events: WorkflowExecutionStarted, a workflow task
 * (Scheduled/Started/Completed), then per activity ActivityTaskScheduled/
 * Started/Completed + a workflow task, then TimerStarted, TimerFired, a
 * workflow task, WorkflowExecutionCompleted: 6K + 10 events, so K = 1665
 * gives exactly 10,000. Every event is packed and unpacked once, so it is an
 * ordinary protobuf-c allocation as if it came off the wire or the store;
 * payloads are small JSON objects as a sandbox step would return.
 * The replay must report deterministic with K + 2 commands matched, or the
 * bench exits non-zero. Times are the median (and min/max) of --runs runs.
 * Not a test: no assertions on time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "protos/pb.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/wstore.h"

/* ------------------------------------------------------------ bench.Replay */

typedef struct {
  int n;
} rp;

static void rp_next(dbx_wf *wf, int64_t seq) {
  char in[96];
  snprintf(in, sizeof in, "{\"command\":\"make step-%lld\",\"timeout_s\":600}", (long long)seq);
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 600000;
  dbx_wf_schedule_activity(wf, "sandbox.exec", in, &o);
}

static void *rp_create(dbx_wf *wf, const char *json, size_t len) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), json);
  rp *s = calloc(1, sizeof *s);
  if (!s || sscanf(buf, "{\"n\":%d}", &s->n) != 1 || s->n < 1) {
    free(s);
    dbx_wf_fail(wf, "InvalidInput", "bench.Replay needs {\"n\":N}");
    return NULL;
  }
  rp_next(wf, 1);
  return s;
}

static void rp_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  rp *s = st;
  if (o->status != DBX_ACT_COMPLETED) {
    dbx_wf_fail(wf, "StepFailed", "a step failed");
  } else if (seq < s->n) {
    rp_next(wf, seq + 1);
  } else {
    dbx_wf_start_timer(wf, 1000);
  }
}

static void rp_on_timer(void *st, dbx_wf *wf, int64_t seq) {
  (void)st, (void)seq;
  dbx_wf_complete(wf, "{\"steps\":\"done\"}");
}

static const dbx_workflow_type wf_replay = {"bench.Replay", rp_create, rp_on_activity, rp_on_timer,
                                            NULL, NULL, NULL, free};

/* ------------------------------------------------------------ history builder */

static HistoryEvent *finish(HistoryEvent *e) {
  return (HistoryEvent *)dbx_pb_clone(&e->base);
}

typedef struct {
  HistoryEvent **ev;
  size_t n;
  size_t bytes;
  int oom;
} hist;

static void add(hist *h, HistoryEvent *e) {
  HistoryEvent *u = finish(e);
  if (!u) {
    h->oom = 1;
    return;
  }
  h->bytes += protobuf_c_message_get_packed_size(&u->base);
  h->ev[h->n++] = u;
}

/* A plain event of type t with id n+1, a time 50 ms after the previous. */
static HistoryEvent base(const hist *h, int t, Timestamp *ts) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  int64_t ms = 1700000000000LL + 50LL * (int64_t)h->n;
  dbx_pb_timestamp_init_ns(ts, ms * 1000000);
  e.event_id = (int64_t)h->n + 1;
  e.event_type = t;
  e.event_time = ts;
  e.task_id = 1048576 + (int64_t)h->n;
  return e;
}

static void wft(hist *h, TaskQueue *tq) {
  Timestamp ts;
  HistoryEvent e = base(h, ET(WORKFLOW_TASK_SCHEDULED), &ts);
  WorkflowTaskScheduledEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  Duration to = INIT(GOOGLE__PROTOBUF__DURATION);
  to.seconds = 10;
  sa.task_queue = tq;
  sa.start_to_close_timeout = &to;
  sa.attempt = 1;
  e.attributes_case = HEV(WORKFLOW_TASK_SCHEDULED);
  e.workflow_task_scheduled_event_attributes = &sa;
  add(h, &e);
  int64_t sched = (int64_t)h->n;
  e = base(h, ET(WORKFLOW_TASK_STARTED), &ts);
  WorkflowTaskStartedEventAttributes st = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_STARTED_EVENT_ATTRIBUTES);
  st.scheduled_event_id = sched;
  st.identity = "durabox@bench:1";
  st.request_id = "5f0c6a52-2d53-4d0e-9a4c-0b1f6a0e7d11";
  e.attributes_case = HEV(WORKFLOW_TASK_STARTED);
  e.workflow_task_started_event_attributes = &st;
  add(h, &e);
  e = base(h, ET(WORKFLOW_TASK_COMPLETED), &ts);
  WorkflowTaskCompletedEventAttributes ca = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_TASK_COMPLETED_EVENT_ATTRIBUTES);
  ca.scheduled_event_id = sched;
  ca.started_event_id = sched + 1;
  ca.identity = "durabox@bench:1";
  e.attributes_case = HEV(WORKFLOW_TASK_COMPLETED);
  e.workflow_task_completed_event_attributes = &ca;
  add(h, &e);
}

static void activity(hist *h, TaskQueue *tq, int64_t seq) {
  Timestamp ts;
  char aid[24], in[96], res[160];
  snprintf(aid, sizeof aid, "%lld", (long long)seq);
  snprintf(in, sizeof in, "{\"command\":\"make step-%lld\",\"timeout_s\":600}", (long long)seq);
  snprintf(res, sizeof res,
           "{\"exit_code\":0,\"stdout\":\"step %lld ok\\n\",\"stderr\":\"\",\"timed_out\":false,"
           "\"duration_ms\":1234}",
           (long long)seq);
  HistoryEvent e = base(h, ET(ACTIVITY_TASK_SCHEDULED), &ts);
  ActivityTaskScheduledEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  Duration s2c = INIT(GOOGLE__PROTOBUF__DURATION);
  s2c.seconds = 600;
  at.name = "sandbox.exec";
  sa.activity_id = aid;
  sa.activity_type = &at;
  sa.task_queue = tq;
  sa.input = dbx_payloads_from_json(in, strlen(in));
  sa.start_to_close_timeout = &s2c;
  sa.workflow_task_completed_event_id = (int64_t)h->n;
  e.attributes_case = HEV(ACTIVITY_TASK_SCHEDULED);
  e.activity_task_scheduled_event_attributes = &sa;
  add(h, &e);
  dbx_payloads_free(sa.input);
  int64_t sched = (int64_t)h->n;
  e = base(h, ET(ACTIVITY_TASK_STARTED), &ts);
  ActivityTaskStartedEventAttributes st = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_STARTED_EVENT_ATTRIBUTES);
  st.scheduled_event_id = sched;
  st.identity = "durabox@bench:1";
  st.request_id = "0b7e3c1a-6c55-4a8e-8f0d-2a9b4c6d8e10";
  st.attempt = 1;
  e.attributes_case = HEV(ACTIVITY_TASK_STARTED);
  e.activity_task_started_event_attributes = &st;
  add(h, &e);
  e = base(h, ET(ACTIVITY_TASK_COMPLETED), &ts);
  ActivityTaskCompletedEventAttributes ca = INIT(TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_COMPLETED_EVENT_ATTRIBUTES);
  ca.scheduled_event_id = sched;
  ca.started_event_id = sched + 1;
  ca.identity = "durabox@bench:1";
  ca.result = dbx_payloads_from_json(res, strlen(res));
  e.attributes_case = HEV(ACTIVITY_TASK_COMPLETED);
  e.activity_task_completed_event_attributes = &ca;
  add(h, &e);
  dbx_payloads_free(ca.result);
}

static void build(hist *h, int k) {
  Timestamp ts;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = "bench";
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  char in[32];
  snprintf(in, sizeof in, "{\"n\":%d}", k);
  HistoryEvent e = base(h, ET(WORKFLOW_EXECUTION_STARTED), &ts);
  WorkflowExecutionStartedEventAttributes sa = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_STARTED_EVENT_ATTRIBUTES);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = "bench.Replay";
  sa.workflow_type = &wt;
  sa.task_queue = &tq;
  sa.input = dbx_payloads_from_json(in, strlen(in));
  sa.original_execution_run_id = "3d6f4b0e-8f1c-4c2a-9b7e-5a1d2c3e4f50";
  sa.first_execution_run_id = sa.original_execution_run_id;
  sa.identity = "durabox@bench:1";
  sa.attempt = 1;
  e.attributes_case = HEV(WORKFLOW_EXECUTION_STARTED);
  e.workflow_execution_started_event_attributes = &sa;
  add(h, &e);
  dbx_payloads_free(sa.input);
  wft(h, &tq);
  for (int i = 1; i <= k; i++) {
    activity(h, &tq, i);
    wft(h, &tq);
  }
  char tid[24];
  snprintf(tid, sizeof tid, "%d", k + 1);
  e = base(h, ET(TIMER_STARTED), &ts);
  TimerStartedEventAttributes ta = INIT(TEMPORAL__API__HISTORY__V1__TIMER_STARTED_EVENT_ATTRIBUTES);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  d.seconds = 1;
  ta.timer_id = tid;
  ta.start_to_fire_timeout = &d;
  ta.workflow_task_completed_event_id = (int64_t)h->n;
  e.attributes_case = HEV(TIMER_STARTED);
  e.timer_started_event_attributes = &ta;
  add(h, &e);
  int64_t started = (int64_t)h->n;
  e = base(h, ET(TIMER_FIRED), &ts);
  TimerFiredEventAttributes fa = INIT(TEMPORAL__API__HISTORY__V1__TIMER_FIRED_EVENT_ATTRIBUTES);
  fa.timer_id = tid;
  fa.started_event_id = started;
  e.attributes_case = HEV(TIMER_FIRED);
  e.timer_fired_event_attributes = &fa;
  add(h, &e);
  wft(h, &tq);
  e = base(h, ET(WORKFLOW_EXECUTION_COMPLETED), &ts);
  WorkflowExecutionCompletedEventAttributes ca = INIT(TEMPORAL__API__HISTORY__V1__WORKFLOW_EXECUTION_COMPLETED_EVENT_ATTRIBUTES);
  const char *out = "{\"steps\":\"done\"}";
  ca.result = dbx_payloads_from_json(out, strlen(out));
  ca.workflow_task_completed_event_id = (int64_t)h->n;
  e.attributes_case = HEV(WORKFLOW_EXECUTION_COMPLETED);
  e.workflow_execution_completed_event_attributes = &ca;
  add(h, &e);
  dbx_payloads_free(ca.result);
}

/* ------------------------------------------------------------ timing */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static void show(const char *name, int64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  printf("%-40s median %8.3f ms  (min %.3f, max %.3f, %d runs)\n", name, (double)v[n / 2] / 1e6,
         (double)v[0] / 1e6, (double)v[n - 1] / 1e6, n);
}

static void usage(void) {
  fprintf(stderr, "usage: dbx-replay-bench [--activities K] [--runs R] [--no-store]\n"
                  "  K activities = 6K+10 events (default 1665 = 10,000); R runs (default 21)\n");
}

int main(int argc, char **argv) {
  int k = 1665, runs = 21, store = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--activities") == 0 && i + 1 < argc) {
      k = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--no-store") == 0) {
      store = 0;
    } else {
      usage();
      return 2;
    }
  }
  if (k < 1 || k > 1000000 || runs < 1 || runs > 10000) {
    usage();
    return 2;
  }
  dbx_log_set_level(DBX_LOG_WARN);
  hist h = {0};
  h.ev = calloc((size_t)k * 6 + 10, sizeof *h.ev);
  int64_t *t = calloc((size_t)runs, sizeof *t);
  if (!h.ev || !t) return 1;
  build(&h, k);
  if (h.oom) return 1;
  printf("dbx-replay-bench: history of %zu events (%d activities), %.2f MiB packed\n", h.n, k,
         (double)h.bytes / 1048576.0);

  int bad = 0;
  for (int r = 0; r < runs; r++) {
    dbx_replay_report rep;
    int64_t t0 = dbx_mono_ns();
    dbx_err rc = dbx_replay_run(&wf_replay, h.ev, h.n, &rep);
    t[r] = dbx_mono_ns() - t0;
    if (rc != DBX_OK || !rep.deterministic || rep.commands_matched != (size_t)k + 2 ||
        rep.events != h.n) {
      fprintf(stderr, "dbx-replay-bench: replay: %s deterministic=%d matched=%zu events=%zu: %s\n",
              dbx_strerror(rc), rep.deterministic, rep.commands_matched, rep.events, rep.message);
      bad = 1;
      break;
    }
  }
  if (!bad) show("dbx_replay_run", t, runs);

  if (store && !bad) {
    const char *tmp = getenv("TMPDIR");
    char *dir = dbx_asprintf("%s/dbx-replay-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    dbx_wstore *ws = NULL;
    char *err = NULL;
    if (!dir || !mkdtemp(dir) || dbx_wstore_open(dir, 0, &ws, &err) != DBX_OK) {
      fprintf(stderr, "dbx-replay-bench: store: %s\n", err ? err : "cannot create");
      return 1;
    }
    int64_t t0 = dbx_mono_ns();
    dbx_err rc = dbx_wstore_history_put(ws, "default", "bench-wf", "bench-run", h.ev, h.n);
    int64_t put = dbx_mono_ns() - t0;
    if (rc != DBX_OK) {
      fprintf(stderr, "dbx-replay-bench: history_put: %s\n", dbx_strerror(rc));
      return 1;
    }
    printf("%-40s %8.3f ms  (one durable commit, once)\n", "dbx_wstore_history_put (all events)",
           (double)put / 1e6);
    int64_t *tl = calloc((size_t)runs, sizeof *tl);
    if (!tl) return 1;
    for (int r = 0; r < runs && !bad; r++) {
      HistoryEvent **evs = NULL;
      size_t n = 0;
      dbx_replay_report rep;
      t0 = dbx_mono_ns();
      rc = dbx_wstore_history_load(ws, "default", "bench-wf", "bench-run", &evs, &n, NULL);
      int64_t t1 = dbx_mono_ns();
      if (rc == DBX_OK) rc = dbx_replay_run(&wf_replay, evs, n, &rep);
      t[r] = dbx_mono_ns() - t0;
      tl[r] = t1 - t0;
      if (rc != DBX_OK || n != h.n || !rep.deterministic) bad = 1;
      dbx_wstore_history_free(evs, n);
    }
    if (!bad) {
      show("dbx_wstore_history_load", tl, runs);
      show("history_load + dbx_replay_run", t, runs);
    } else {
      fprintf(stderr, "dbx-replay-bench: load + replay failed\n");
    }
    free(tl);
    dbx_wstore_close(ws);
    char *cmd = dbx_asprintf("rm -rf '%s'", dir);
    if (cmd && system(cmd) != 0) fprintf(stderr, "dbx-replay-bench: could not remove %s\n", dir);
    free(cmd);
    free(dir);
  }
  for (size_t i = 0; i < h.n; i++) protobuf_c_message_free_unpacked(&h.ev[i]->base, NULL);
  free(h.ev);
  free(t);
  return bad;
}
