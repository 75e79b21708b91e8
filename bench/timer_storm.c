/* dbx-timer-storm: how long the embedded service (service/service.h) takes
 * to fire many durable timers that fall due together, and how long a call
 * waits behind them.
 *
 * W workflows each schedule A activities (one RespondWorkflowTaskCompleted
 * with A ScheduleActivityTask commands) with a schedule-to-start timeout
 * of --due-s seconds (1) on a task queue nobody polls, so W * A timers fall
 * due together that much later; each times its activity out
 * (ActivityTaskTimedOut, not retried: Temporal does not retry a
 * ScheduleToStart timeout). Meanwhile a
 * probe calls GetSystemInfo every 2 ms and records each call's latency.
 * Printed: the time from the first timer's due time until every workflow's
 * DescribeWorkflowExecution shows no pending activity (checked every 20
 * ms; then each history is checked for its A ActivityTaskTimedOut events),
 * and the probe's p50 / p99 / max over that window. The same W * A with A large and W small versus A small and W large
 * separates the cost per timer from the cost per run's size.
 * Durable commits unless --no-sync. Not a test: no assertions on time. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/util.h"
#include "protos/pb.h"
#include "rpc/rpc.h"
#include "service/service.h"

#define CALL_MS 60000

static dbx_rpc_channel *g_ch;
static int g_due_s = 1; /* the schedule-to-start timeout, s */

static void die(const char *what, const dbx_rpc_result *r) {
  fprintf(stderr, "dbx-timer-storm: %s: status %d %s\n", what, r ? r->status : -1,
          r && r->message ? r->message : "");
  exit(1);
}

/* One call; the unpacked reply (resp_d) or NULL when resp_d is NULL. */
static void *call(const char *method, const ProtobufCMessage *q, const ProtobufCMessageDescriptor *resp_d) {
  size_t len = 0;
  uint8_t *buf = dbx_pb_pack(q, &len);
  if (buf == NULL) die("out of memory", NULL);
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  if (dbx_rpc_unary(g_ch, method, buf, len, CALL_MS, 1, NULL, &r) != DBX_OK || r.status != DBX_GRPC_OK)
    die(method, &r);
  free(buf);
  void *out = NULL;
  if (resp_d) {
    out = protobuf_c_message_unpack(resp_d, NULL, r.response_len, r.response);
    if (out == NULL) die("reply does not decode", &r);
  }
  dbx_rpc_result_cleanup(&r);
  return out;
}

static void start(int w) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  char id[32], rid[48];
  snprintf(id, sizeof id, "storm-%d", w);
  snprintf(rid, sizeof rid, "storm-request-%d", w);
  wt.name = "bench.Storm";
  tq.name = id; /* a queue per workflow: its poll gets this workflow's task */
  q.namespace_ = "default";
  q.workflow_id = id;
  q.workflow_type = &wt;
  q.task_queue = &tq;
  q.request_id = rid;
  StartWorkflowExecutionResponse *r = call("StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

/* Poll one workflow task and answer it with n ScheduleActivityTask
 * commands. */
static void schedule(int w, int n) {
  PollWorkflowTaskQueueRequest p = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  char id[32];
  snprintf(id, sizeof id, "storm-%d", w);
  tq.name = id;
  p.namespace_ = "default";
  p.task_queue = &tq;
  p.identity = "storm";
  PollWorkflowTaskQueueResponse *t = call("PollWorkflowTaskQueue", &p.base, &PollWorkflowTaskQueueResponse__D);
  if (t->task_token.len == 0) die("no workflow task", NULL);
  Command *cmds = calloc((size_t)n, sizeof *cmds);
  Command **pc = calloc((size_t)n, sizeof *pc);
  ScheduleActivityTaskCommandAttributes *a = calloc((size_t)n, sizeof *a);
  char (*ids)[16] = calloc((size_t)n, sizeof *ids);
  if (!cmds || !pc || !a || !ids) die("out of memory", NULL);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  TaskQueue atq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration s2s = INIT(GOOGLE__PROTOBUF__DURATION), s2c = INIT(GOOGLE__PROTOBUF__DURATION);
  at.name = "bench.noop";
  atq.name = "storm-nobody";
  s2s.seconds = g_due_s;
  s2c.seconds = 60;
  for (int i = 0; i < n; i++) {
    Command c = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
    ScheduleActivityTaskCommandAttributes x = INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
    snprintf(ids[i], sizeof ids[i], "%d", i + 1);
    x.activity_id = ids[i];
    x.activity_type = &at;
    x.task_queue = &atq;
    x.schedule_to_start_timeout = &s2s;
    x.start_to_close_timeout = &s2c;
    a[i] = x;
    c.command_type = CT(SCHEDULE_ACTIVITY_TASK);
    c.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
    c.schedule_activity_task_command_attributes = &a[i];
    cmds[i] = c;
    pc[i] = &cmds[i];
  }
  RespondWorkflowTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  q.namespace_ = "default";
  q.task_token = t->task_token;
  q.commands = pc;
  q.n_commands = (size_t)n;
  q.identity = "storm";
  (void)call("RespondWorkflowTaskCompleted", &q.base, NULL);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  free(cmds);
  free(pc);
  free(a);
  free(ids);
}

/* ActivityTaskTimedOut events in workflow w's history. */
static int timeouts(int w) {
  char id[32];
  snprintf(id, sizeof id, "storm-%d", w);
  int n = 0;
  ProtobufCBinaryData token = {0, NULL};
  uint8_t *owned = NULL;
  for (;;) {
    GetWorkflowExecutionHistoryRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = id;
    q.namespace_ = "default";
    q.execution = &we;
    q.next_page_token = token;
    GetWorkflowExecutionHistoryResponse *h =
        call("GetWorkflowExecutionHistory", &q.base, &GetWorkflowExecutionHistoryResponse__D);
    for (size_t i = 0; h->history && i < h->history->n_events; i++)
      n += h->history->events[i]->event_type == ET(ACTIVITY_TASK_TIMED_OUT);
    free(owned);
    owned = NULL;
    token.len = h->next_page_token.len;
    if (token.len) {
      owned = malloc(token.len);
      if (!owned) die("out of memory", NULL);
      memcpy(owned, h->next_page_token.data, token.len);
    }
    token.data = owned;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    if (!token.len) break;
  }
  free(owned);
  return n;
}

/* The probe thread: GetSystemInfo every 2 ms from the first timer's due
 * time until stop; each call's latency (ns) into lat. */
static struct {
  dbx_rpc_channel *ch;
  int64_t from_ns;
  atomic_int stop;
  int64_t *lat;
  size_t n, cap;
} g_probe;

static void *probe_main(void *arg) {
  (void)arg;
  while (!atomic_load(&g_probe.stop)) {
    if (dbx_mono_ns() >= g_probe.from_ns && g_probe.n < g_probe.cap) {
      GetSystemInfoRequest g = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
      uint8_t buf[16];
      size_t len = protobuf_c_message_pack(&g.base, buf);
      dbx_rpc_result r;
      memset(&r, 0, sizeof r);
      int64_t t0 = dbx_mono_ns();
      if (dbx_rpc_unary(g_probe.ch, "GetSystemInfo", buf, len, CALL_MS, 1, NULL, &r) != DBX_OK ||
          r.status != DBX_GRPC_OK)
        die("GetSystemInfo", &r);
      g_probe.lat[g_probe.n++] = dbx_mono_ns() - t0;
      dbx_rpc_result_cleanup(&r);
    }
    usleep(2000);
  }
  return NULL;
}

/* Pending activities of workflow w (DescribeWorkflowExecution): cheaper to
 * watch than the history, so the watching costs the engine little. */
static size_t pending(int w) {
  char id[32];
  snprintf(id, sizeof id, "storm-%d", w);
  DescribeWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = id;
  q.namespace_ = "default";
  q.execution = &we;
  DescribeWorkflowExecutionResponse *r =
      call("DescribeWorkflowExecution", &q.base, &DescribeWorkflowExecutionResponse__D);
  size_t n = r->n_pending_activities;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return n;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int W = 1, A = 2000, no_sync = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--workflows") == 0 && i + 1 < argc) W = atoi(argv[++i]);
    else if (strcmp(argv[i], "--activities") == 0 && i + 1 < argc) A = atoi(argv[++i]);
    else if (strcmp(argv[i], "--due-s") == 0 && i + 1 < argc) g_due_s = atoi(argv[++i]);
    else if (strcmp(argv[i], "--no-sync") == 0) no_sync = 1;
    else {
      fprintf(stderr, "usage: dbx-timer-storm [--workflows W] [--activities A per workflow] [--due-s S] [--no-sync]\n");
      return 2;
    }
  }
  if (W < 1 || A < 1 || A > 100000 || g_due_s < 1) {
    fprintf(stderr, "dbx-timer-storm: --workflows, --activities and --due-s must be at least 1 (activities at most 100000)\n");
    return 2;
  }
  dbx_log_set_level(DBX_LOG_WARN);
  char dir[] = "/tmp/dbx-timer-storm.XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char db[64];
  snprintf(db, sizeof db, "%s/db", dir);
  dbx_rpc_global_init();
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = db;
  o.no_sync = no_sync;
  dbx_service *svc = NULL;
  char *err = NULL;
  if (dbx_service_start(&o, &svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx-timer-storm: service start: %s\n", err ? err : "?");
    return 1;
  }
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_service_port(svc));
  dbx_rpc_channel_opts co;
  memset(&co, 0, sizeof co);
  co.target = target;
  co.namespace_ = "default";
  if (dbx_rpc_channel_create(&co, &g_ch) != DBX_OK) return 1;

  /* the probe: its own channel and thread, a call every 2 ms */
  if (dbx_rpc_channel_create(&co, &g_probe.ch) != DBX_OK) return 1;
  g_probe.cap = 1 << 16;
  g_probe.lat = malloc(g_probe.cap * sizeof *g_probe.lat);
  if (!g_probe.lat) return 1;
  int64_t t_sched0 = dbx_mono_ns();
  for (int w = 0; w < W; w++) {
    start(w);
    schedule(w, A);
  }
  int64_t t_sched1 = dbx_mono_ns();
  g_probe.from_ns = t_sched0 + g_due_s * 1000000000LL;
  if (t_sched1 > g_probe.from_ns) {
    fprintf(stderr, "dbx-timer-storm: scheduling took %.1f s, longer than the timeout: give a larger --due-s\n",
            (t_sched1 - t_sched0) / 1e9);
    return 1;
  }
  pthread_t pt;
  if (pthread_create(&pt, NULL, probe_main, NULL) != 0) return 1;
  /* the first timers are due g_due_s after the first workflow's commands */
  int64_t due = g_probe.from_ns;
  int done_w = 0;
  int64_t t_done = 0;
  while (done_w < W) {
    usleep(20000);
    while (done_w < W && pending(done_w) == 0) done_w++;
    t_done = dbx_mono_ns();
    if (t_done - due > 600000000000LL) {
      fprintf(stderr, "dbx-timer-storm: the timeouts did not all fire within 10 minutes\n");
      return 1;
    }
  }
  atomic_store(&g_probe.stop, 1);
  pthread_join(pt, NULL);
  for (int w = 0; w < W; w++) {
    int got = timeouts(w);
    if (got != A) {
      fprintf(stderr, "dbx-timer-storm: workflow storm-%d has %d ActivityTaskTimedOut events, not %d\n", w, got, A);
      return 1;
    }
  }
  int64_t *lat = g_probe.lat;
  size_t n = g_probe.n;
  qsort(lat, n, sizeof *lat, cmp_i64);
  printf("{\"workflows\":%d,\"activities_per_workflow\":%d,\"timers\":%d,\"sync\":%s,"
         "\"schedule_s\":%.3f,\"fire_all_s\":%.3f,\"timers_per_s\":%.0f,"
         "\"probe_calls\":%zu,\"probe_p50_ms\":%.2f,\"probe_p99_ms\":%.2f,\"probe_max_ms\":%.2f}\n",
         W, A, W * A, no_sync ? "false" : "true", (t_sched1 - t_sched0) / 1e9, (t_done - due) / 1e9,
         (double)W * A / ((t_done - due) / 1e9), n, n ? lat[n / 2] / 1e6 : 0.0,
         n ? lat[n * 99 / 100] / 1e6 : 0.0, n ? lat[n - 1] / 1e6 : 0.0);
  free(lat);
  dbx_rpc_channel_destroy(g_probe.ch);
  dbx_rpc_channel_destroy(g_ch);
  dbx_service_stop(svc);
  dbx_rpc_global_shutdown();
  dbx_fs_remove_tree(dir);
  return 0;
}
