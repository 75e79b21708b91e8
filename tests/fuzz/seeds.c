/* Seed generator of the service and worker harnesses' corpora
 * (tests/fuzz/corpus/service, tests/fuzz/corpus/wft). Usage:
 *   fuzz_seeds DIR      (DIR = tests/fuzz/corpus; writes DIR/service, DIR/wft)
 * Real traffic, recorded: an embedded service runs in this process; for each
 * Script input below a durabox.Script workflow is started and driven as the
 * worker drives it (each polled workflow task answered by the worker's own
 * dbx_wft_answer_build_, each activity task answered with a canned result of
 * its type, or failed). Every poll reply is written as a wft seed (the bytes
 * the worker received), and every request of a flow as one service seed
 * (svcin.h records, task tokens as the placeholders "W"/"A"). Then one seed
 * per other method, each after a StartWorkflowExecution. Run it again after
 * a change of the protos or of the Script workflow; the output is small. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "protos/pb.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/fuzz/svcin.h"
#include "worker/client.h"
#include "worker/wft.h"
#include "workflows/builtin.h"

static const char *g_out;
static dbx_rpc_channel *g_ch;

typedef struct {
  uint8_t buf[65536];
  size_t len, calls;
} flow;

static void write_seed(const char *sub, const char *name, const uint8_t *p, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_out, sub);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/%s", g_out, sub, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "fuzz_seeds: cannot write %s\n", path);
    exit(1);
  }
}

static void rec_add(flow *fl, const char *method, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  int idx = dbx_fuzz_svc_method_index(method);
  if (idx < 0 || fl->calls >= DBX_FUZZ_SVC_MAX_CALLS || fl->len + 3 + n > sizeof fl->buf || n > 65535) return;
  fl->buf[fl->len++] = (uint8_t)idx;
  fl->buf[fl->len++] = (uint8_t)(n >> 8);
  fl->buf[fl->len++] = (uint8_t)n;
  protobuf_c_message_pack(m, fl->buf + fl->len);
  fl->len += n;
  fl->calls++;
}

/* Send m; the reply's bytes unpacked as method's response (NULL unless OK). */
static ProtobufCMessage *send(const char *method, const ProtobufCMessage *m, int64_t ms, dbx_rpc_result *raw) {
  size_t n = 0;
  uint8_t *b = dbx_pb_pack(m, &n);
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  if (!b || dbx_rpc_unary(g_ch, method, b, n, ms, 1, NULL, &r) != DBX_OK) {
    fprintf(stderr, "fuzz_seeds: %s failed\n", method);
    exit(1);
  }
  free(b);
  ProtobufCMessage *out = NULL;
  if (r.status == DBX_GRPC_OK)
    out = protobuf_c_message_unpack(dbx_fuzz_svc_methods[dbx_fuzz_svc_method_index(method)].resp, NULL,
                                    r.response_len, r.response);
  if (raw) *raw = r;
  else dbx_rpc_result_cleanup(&r);
  return out;
}

static uint8_t g_W[] = "W", g_A[] = "A";

static void start_req(StartWorkflowExecutionRequest *q, WorkflowType *wt, TaskQueue *tq, const char *wid,
                      const char *type, const char *input) {
  *q = (StartWorkflowExecutionRequest)INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  *wt = (WorkflowType)INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  *tq = (TaskQueue)INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt->name = (char *)type;
  tq->name = "tq";
  q->namespace_ = "default";
  q->workflow_id = (char *)wid;
  q->workflow_type = wt;
  q->task_queue = tq;
  q->request_id = (char *)wid;
  q->identity = "seeds";
  q->input = input ? dbx_payloads_from_json(input, strlen(input)) : NULL;
}

static const char *canned_result(const char *type) {
  if (strcmp(type, "sandbox.create") == 0) return "{\"sandbox_id\":\"dbx-0123456789abcdef\",\"adopted\":false,\"path\":\"/tmp/w\"}";
  if (strcmp(type, "sandbox.exec") == 0)
    return "{\"exit_code\":1,\"signal\":0,\"timed_out\":false,\"stdout\":\"ok\\n\",\"stderr\":\"FAIL x\","
           "\"stdout_truncated\":false,\"stderr_truncated\":false,\"stdout_bytes\":3,\"stderr_bytes\":6,"
           "\"duration_ms\":12}";
  if (strcmp(type, "sandbox.write_file") == 0) return "{\"bytes\":5}";
  if (strcmp(type, "sandbox.read_file") == 0) return "{\"content\":\"hello\",\"bytes\":5,\"truncated\":false}";
  if (strcmp(type, "sandbox.checkpoint") == 0) return "{\"ref\":\"ckpt-1\"}";
  if (strcmp(type, "sandbox.git_commit") == 0) return "{\"sha\":\"0123abcd\",\"nothing_to_commit\":false}";
  return "{}";
}

/* Drive one Script workflow; seeds named by tag. fail_at: the activity
 * number (1-based) answered with a failure instead (0 = none). */
static void script_flow(const char *tag, const char *input, int fail_at) {
  flow *fl = calloc(1, sizeof *fl);
  char wid[64], name[96];
  snprintf(wid, sizeof wid, "wf-%s", tag);
  StartWorkflowExecutionRequest sq;
  WorkflowType wt;
  TaskQueue tq;
  start_req(&sq, &wt, &tq, wid, "durabox.Script", input);
  ProtobufCMessage *sr = send("StartWorkflowExecution", &sq.base, 5000, NULL);
  rec_add(fl, "StartWorkflowExecution", &sq.base);
  dbx_payloads_free(sq.input);
  if (!sr) exit(1);
  protobuf_c_message_free_unpacked(sr, NULL);
  int acts = 0;
  for (int round = 0; round < 12; round++) {
    PollWorkflowTaskQueueRequest pq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
    pq.namespace_ = "default";
    pq.task_queue = &tq;
    pq.identity = "seeds";
    dbx_rpc_result raw;
    PollWorkflowTaskQueueResponse *t = (PollWorkflowTaskQueueResponse *)send("PollWorkflowTaskQueue", &pq.base, 5000, &raw);
    rec_add(fl, "PollWorkflowTaskQueue", &pq.base);
    if (!t || !t->task_token.len) {
      dbx_rpc_result_cleanup(&raw);
      if (t) protobuf_c_message_free_unpacked(&t->base, NULL);
      break;
    }
    snprintf(name, sizeof name, "%s-task%d", tag, round + 1);
    write_seed("wft", name, raw.response, raw.response_len);
    dbx_rpc_result_cleanup(&raw);
    dbx_wf_run *run = NULL;
    dbx_wft_answer_ a;
    const dbx_workflow_type *type = dbx_workflows_builtin_find("durabox.Script");
    if (dbx_wft_answer_build_(type, t, t->history->events, t->history->n_events, "default", "seeds", &run,
                              &a) != DBX_OK)
      exit(1);
    const char *m = a.failed ? "RespondWorkflowTaskFailed" : "RespondWorkflowTaskCompleted";
    ProtobufCMessage *ans = a.failed ? &a.failed_rq.base : &a.completed.base;
    int closing = 0;
    for (size_t i = 0; !a.failed && i < a.completed.n_commands; i++)
      closing |= a.completed.commands[i]->command_type == CT(COMPLETE_WORKFLOW_EXECUTION) ||
                 a.completed.commands[i]->command_type == CT(FAIL_WORKFLOW_EXECUTION);
    ProtobufCMessage *ar = send(m, ans, 5000, NULL);
    if (ar) protobuf_c_message_free_unpacked(ar, NULL);
    if (a.failed) a.failed_rq.task_token = (ProtobufCBinaryData){1, g_W};
    else a.completed.task_token = (ProtobufCBinaryData){1, g_W};
    rec_add(fl, m, ans);
    dbx_wft_answer_cleanup_(&a);
    dbx_wf_run_destroy(run);
    protobuf_c_message_free_unpacked(&t->base, NULL);
    if (closing) break;
    PollActivityTaskQueueRequest aq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
    aq.namespace_ = "default";
    aq.task_queue = &tq;
    aq.identity = "seeds";
    PollActivityTaskQueueResponse *at = (PollActivityTaskQueueResponse *)send("PollActivityTaskQueue", &aq.base, 3000, NULL);
    rec_add(fl, "PollActivityTaskQueue", &aq.base);
    if (!at || !at->task_token.len) {
      if (at) protobuf_c_message_free_unpacked(&at->base, NULL);
      continue;
    }
    acts++;
    ProtobufCBinaryData tok = at->task_token;
    if (acts == fail_at) {
      RespondActivityTaskFailedRequest fq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_REQUEST);
      Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
      ApplicationFailureInfo ai = INIT(TEMPORAL__API__FAILURE__V1__APPLICATION_FAILURE_INFO);
      ai.type = "SandboxError";
      ai.non_retryable = 1;
      f.message = "the sandbox went away";
      f.source = "durabox";
      f.failure_info_case = TEMPORAL__API__FAILURE__V1__FAILURE__FAILURE_INFO_APPLICATION_FAILURE_INFO;
      f.application_failure_info = &ai;
      fq.namespace_ = "default";
      fq.identity = "seeds";
      fq.failure = &f;
      fq.task_token = tok;
      ProtobufCMessage *x = send("RespondActivityTaskFailed", &fq.base, 5000, NULL);
      if (x) protobuf_c_message_free_unpacked(x, NULL);
      fq.task_token = (ProtobufCBinaryData){1, g_A};
      rec_add(fl, "RespondActivityTaskFailed", &fq.base);
    } else {
      RespondActivityTaskCompletedRequest cq =
          INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_REQUEST);
      const char *res = canned_result(at->activity_type ? at->activity_type->name : "");
      cq.namespace_ = "default";
      cq.identity = "seeds";
      cq.result = dbx_payloads_from_json(res, strlen(res));
      cq.task_token = tok;
      ProtobufCMessage *x = send("RespondActivityTaskCompleted", &cq.base, 5000, NULL);
      if (x) protobuf_c_message_free_unpacked(x, NULL);
      cq.task_token = (ProtobufCBinaryData){1, g_A};
      rec_add(fl, "RespondActivityTaskCompleted", &cq.base);
      dbx_payloads_free(cq.result);
    }
    protobuf_c_message_free_unpacked(&at->base, NULL);
  }
  snprintf(name, sizeof name, "flow-%s", tag);
  write_seed("service", name, fl->buf, fl->len);
  free(fl);
}

/* A seed of two calls: a start of it.Workflow, then m. */
static void after_start(const char *name, const char *method, const ProtobufCMessage *m) {
  flow *fl = calloc(1, sizeof *fl);
  StartWorkflowExecutionRequest sq;
  WorkflowType wt;
  TaskQueue tq;
  start_req(&sq, &wt, &tq, "wf-1", "it.Workflow", "{\"x\":1}");
  rec_add(fl, "StartWorkflowExecution", &sq.base);
  dbx_payloads_free(sq.input);
  rec_add(fl, method, m);
  write_seed("service", name, fl->buf, fl->len);
  free(fl);
}

static void single_calls(void) {
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "wf-1";
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = "tq";
  Payloads *pl = dbx_payloads_from_json("{\"round\":1}", 11);
#define REQ(T, U, v) T v = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__##U); v.namespace_ = "default"
  { GetSystemInfoRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST); after_start("sysinfo", "GetSystemInfo", &q.base); }
  { REQ(DescribeNamespaceRequest, DESCRIBE_NAMESPACE_REQUEST, q); after_start("describe-ns", "DescribeNamespace", &q.base); }
  { ListNamespacesRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_NAMESPACES_REQUEST); after_start("list-ns", "ListNamespaces", &q.base); }
  { REQ(DescribeWorkflowExecutionRequest, DESCRIBE_WORKFLOW_EXECUTION_REQUEST, q); q.execution = &we; after_start("describe", "DescribeWorkflowExecution", &q.base); }
  { REQ(GetWorkflowExecutionHistoryRequest, GET_WORKFLOW_EXECUTION_HISTORY_REQUEST, q); q.execution = &we; q.maximum_page_size = 2; after_start("history", "GetWorkflowExecutionHistory", &q.base); }
  { REQ(GetWorkflowExecutionHistoryRequest, GET_WORKFLOW_EXECUTION_HISTORY_REQUEST, q); q.execution = &we; q.wait_new_event = 1; q.history_event_filter_type = 2; after_start("history-wait", "GetWorkflowExecutionHistory", &q.base); }
  { REQ(GetWorkflowExecutionHistoryReverseRequest, GET_WORKFLOW_EXECUTION_HISTORY_REVERSE_REQUEST, q); q.execution = &we; q.maximum_page_size = 1; after_start("history-reverse", "GetWorkflowExecutionHistoryReverse", &q.base); }
  const char *queries[] = {"WorkflowId = 'wf-1'", "ExecutionStatus = 'Running' AND WorkflowType = 'it.Workflow' ORDER BY StartTime ASC",
                           "StartTime > '2020-01-01T00:00:00Z'", "TaskQueue IN ('tq', 'x') OR RunId IS NULL"};
  for (int i = 0; i < 4; i++) {
    char name[32];
    REQ(ListWorkflowExecutionsRequest, LIST_WORKFLOW_EXECUTIONS_REQUEST, q);
    q.query = (char *)queries[i];
    q.page_size = 1 + i;
    snprintf(name, sizeof name, "list-%d", i);
    after_start(name, "ListWorkflowExecutions", &q.base);
    REQ(CountWorkflowExecutionsRequest, COUNT_WORKFLOW_EXECUTIONS_REQUEST, c);
    c.query = (char *)queries[i];
    snprintf(name, sizeof name, "count-%d", i);
    after_start(name, "CountWorkflowExecutions", &c.base);
  }
  { REQ(SignalWorkflowExecutionRequest, SIGNAL_WORKFLOW_EXECUTION_REQUEST, q); q.workflow_execution = &we; q.signal_name = "go"; q.input = pl; q.request_id = "r1"; after_start("signal", "SignalWorkflowExecution", &q.base); }
  {
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = "it.Workflow";
    REQ(SignalWithStartWorkflowExecutionRequest, SIGNAL_WITH_START_WORKFLOW_EXECUTION_REQUEST, q);
    q.workflow_id = "wf-2"; q.workflow_type = &wt; q.task_queue = &tq; q.signal_name = "go"; q.signal_input = pl; q.input = pl; q.request_id = "r2";
    after_start("signal-with-start", "SignalWithStartWorkflowExecution", &q.base);
  }
  { REQ(RequestCancelWorkflowExecutionRequest, REQUEST_CANCEL_WORKFLOW_EXECUTION_REQUEST, q); q.workflow_execution = &we; q.reason = "enough"; after_start("cancel", "RequestCancelWorkflowExecution", &q.base); }
  { REQ(TerminateWorkflowExecutionRequest, TERMINATE_WORKFLOW_EXECUTION_REQUEST, q); q.workflow_execution = &we; q.reason = "stop"; q.details = pl; after_start("terminate", "TerminateWorkflowExecution", &q.base); }
  { REQ(ResetWorkflowExecutionRequest, RESET_WORKFLOW_EXECUTION_REQUEST, q); q.workflow_execution = &we; q.workflow_task_finish_event_id = 3; q.reason = "again"; q.request_id = "r3"; after_start("reset", "ResetWorkflowExecution", &q.base); }
  {
    WorkflowQuery wq = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
    wq.query_type = "__stack_trace";
    REQ(QueryWorkflowRequest, QUERY_WORKFLOW_REQUEST, q); q.execution = &we; q.query = &wq;
    after_start("query", "QueryWorkflow", &q.base);
  }
  { REQ(RespondQueryTaskCompletedRequest, RESPOND_QUERY_TASK_COMPLETED_REQUEST, q); q.task_token = (ProtobufCBinaryData){1, g_W}; q.completed_type = 1; q.query_result = pl; after_start("query-answer", "RespondQueryTaskCompleted", &q.base); }
  { REQ(PollActivityTaskQueueRequest, POLL_ACTIVITY_TASK_QUEUE_REQUEST, q); q.task_queue = &tq; after_start("poll-activity", "PollActivityTaskQueue", &q.base); }
  { REQ(RecordActivityTaskHeartbeatRequest, RECORD_ACTIVITY_TASK_HEARTBEAT_REQUEST, q); q.task_token = (ProtobufCBinaryData){1, g_A}; q.details = pl; after_start("heartbeat", "RecordActivityTaskHeartbeat", &q.base); }
  { REQ(RespondActivityTaskCanceledRequest, RESPOND_ACTIVITY_TASK_CANCELED_REQUEST, q); q.task_token = (ProtobufCBinaryData){1, g_A}; q.details = pl; after_start("activity-canceled", "RespondActivityTaskCanceled", &q.base); }
  {
    Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
    f.message = "boom";
    REQ(RespondWorkflowTaskFailedRequest, RESPOND_WORKFLOW_TASK_FAILED_REQUEST, q);
    q.task_token = (ProtobufCBinaryData){1, g_W}; q.failure = &f; q.cause = WFC(WORKFLOW_WORKER_UNHANDLED_FAILURE);
    after_start("wft-failed", "RespondWorkflowTaskFailed", &q.base);
  }
  { REQ(ShutdownWorkerRequest, SHUTDOWN_WORKER_REQUEST, q); after_start("shutdown-worker", "ShutdownWorker", &q.base); }
  { REQ(ResetStickyTaskQueueRequest, RESET_STICKY_TASK_QUEUE_REQUEST, q); q.execution = &we; after_start("reset-sticky", "ResetStickyTaskQueue", &q.base); }
  dbx_payloads_free(pl);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  g_out = argv[1];
  dbx_log_set_level(DBX_LOG_ERROR);
  dbx_rpc_global_init();
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  o.long_poll_ms = 300;
  dbx_service *svc = NULL;
  char *err = NULL;
  if (dbx_service_start(&o, &svc, &err) != DBX_OK) {
    fprintf(stderr, "fuzz_seeds: %s\n", err ? err : "service start failed");
    return 1;
  }
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_service_port(svc));
  dbx_rpc_channel_opts co;
  memset(&co, 0, sizeof co);
  co.target = target;
  if (dbx_rpc_channel_create(&co, &g_ch) != DBX_OK) return 1;
  script_flow("exec", "{\"steps\":[{\"name\":\"e\",\"kind\":\"exec\",\"command\":\"echo hi\",\"timeout_s\":60}]}", 0);
  script_flow("files",
              "{\"sandbox\":{\"source\":{\"kind\":\"git\",\"path\":\"/src\"},\"keep\":false},\"steps\":["
              "{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"hello\"},"
              "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"},"
              "{\"name\":\"c\",\"kind\":\"git_commit\",\"message\":\"m\"},{\"name\":\"k\",\"kind\":\"checkpoint\"}]}",
              0);
  script_flow("fail", "{\"steps\":[{\"name\":\"e\",\"kind\":\"exec\",\"command\":\"false\",\"continue_on_failure\":true},"
                      "{\"name\":\"f\",\"kind\":\"exec\",\"command\":\"true\"}]}", 2);
  script_flow("bad-input", "{\"steps\":[{\"name\":\"e\",\"kind\":\"nope\"}]}", 0);
  script_flow("retry", "{\"retry\":{\"maximum_attempts\":2},\"sandbox\":{\"network\":\"none\",\"env\":{\"A\":\"b\"}},"
                       "\"steps\":[{\"name\":\"e\",\"kind\":\"exec\",\"command\":\"make\",\"env\":{\"T\":{\"secret\":\"TOKEN\"}}}]}", 1);
  single_calls();
  dbx_rpc_channel_destroy(g_ch);
  dbx_service_stop(svc);
  dbx_rpc_global_shutdown();
  return 0;
}
