/* RPC dispatch of the embedded service (Temporal: WorkflowService), and the
 * methods that touch no run: GetSystemInfo, namespaces, empty replies.
 *
 * The RPC handlers are one file per family of methods: check.c (request
 * checks), lifecycle.c, matching.c, wftask.c, activity_rpc.c,
 * history_read.c, visibility.c, reset.c. Each decodes its request, checks it
 * (namespace, required fields, UTF-8 of every string, task tokens), then
 * reads and changes run state in the batch transaction through the engine
 * below it (run.c, activity.c, state.c, mutable.c, timers.c), which takes
 * plain inputs and returns dbx_err; only handlers set gRPC statuses. A
 * rejected request sets the job's gRPC status and the engine drops everything
 * it wrote. Semantics follow Temporal's server as described in
 * Temporal's WorkflowService contract and docs/service.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

#define SERVER_VERSION "1.25.0"

static dbx_err h_get_system_info(ectx *c, job *j) {
  (void)c;
  GetSystemInfoResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE);
  Temporal__Api__Workflowservice__V1__GetSystemInfoResponse__Capabilities cap =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE__CAPABILITIES);
  cap.signal_and_query_header = 1;
  cap.internal_error_differentiation = 1;
  cap.activity_failure_include_heartbeat = 1;
  cap.supports_schedules = 1;
  cap.encoded_failure_attributes = 1;
  cap.build_id_based_versioning = 1;
  cap.upsert_memo = 1;
  cap.eager_workflow_start = 1;
  cap.sdk_metadata = 1;
  cap.count_group_by_execution_status = 1;
  r.server_version = SERVER_VERSION;
  r.capabilities = &cap;
  svc_job_reply(j, &r.base);
  return DBX_OK;
}

static void fill_ns_info(dbx_service *s, size_t i, NamespaceInfo *info, NamespaceConfig *cfg, Duration *ttl) {
  info->name = s->namespaces[i].name;
  info->id = s->namespaces[i].id;
  info->state = TEMPORAL__API__ENUMS__V1__NAMESPACE_STATE__NAMESPACE_STATE_REGISTERED;
  dbx_pb_duration_init_ms(ttl, 24 * 3600 * 1000LL);
  cfg->workflow_execution_retention_ttl = ttl;
}

static dbx_err h_describe_namespace(ectx *c, job *j) {
  DescribeNamespaceRequest *q = svc_decode(j, &DescribeNamespaceRequest__D);
  if (q == NULL) return DBX_OK;
  size_t idx = SIZE_MAX;
  for (size_t i = 0; i < c->svc->n_namespaces; i++)
    if ((q->namespace_[0] && strcmp(c->svc->namespaces[i].name, q->namespace_) == 0) ||
        (q->namespace_[0] == '\0' && q->id[0] && strcmp(c->svc->namespaces[i].id, q->id) == 0))
      idx = i;
  if (idx == SIZE_MAX) {
    svc_check_ns(c, j, q->namespace_[0] ? q->namespace_ : q->id);
  } else {
    DescribeNamespaceResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_RESPONSE);
    NamespaceInfo info = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_INFO);
    NamespaceConfig cfg = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_CONFIG);
    Duration ttl = INIT(GOOGLE__PROTOBUF__DURATION);
    fill_ns_info(c->svc, idx, &info, &cfg, &ttl);
    r.namespace_info = &info;
    r.config = &cfg;
    svc_job_reply(j, &r.base);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

static dbx_err h_list_namespaces(ectx *c, job *j) {
  ListNamespacesRequest *q = svc_decode(j, &ListNamespacesRequest__D);
  if (q == NULL) return DBX_OK;
  size_t n = c->svc->n_namespaces;
  DescribeNamespaceResponse *items = dbx_calloc(n, sizeof *items);
  DescribeNamespaceResponse **ptrs = dbx_calloc(n, sizeof *ptrs);
  NamespaceInfo *infos = dbx_calloc(n, sizeof *infos);
  NamespaceConfig *cfgs = dbx_calloc(n, sizeof *cfgs);
  Duration *ttls = dbx_calloc(n, sizeof *ttls);
  if (items && ptrs && infos && cfgs && ttls) {
    for (size_t i = 0; i < n; i++) {
      DescribeNamespaceResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_RESPONSE);
      NamespaceInfo info = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_INFO);
      NamespaceConfig cfg = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_CONFIG);
      Duration ttl = INIT(GOOGLE__PROTOBUF__DURATION);
      items[i] = r;
      infos[i] = info;
      cfgs[i] = cfg;
      ttls[i] = ttl;
      fill_ns_info(c->svc, i, &infos[i], &cfgs[i], &ttls[i]);
      items[i].namespace_info = &infos[i];
      items[i].config = &cfgs[i];
      ptrs[i] = &items[i];
    }
    ListNamespacesResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_NAMESPACES_RESPONSE);
    r.n_namespaces = n;
    r.namespaces = ptrs;
    svc_job_reply(j, &r.base);
  } else {
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory");
  }
  free(items);
  free(ptrs);
  free(infos);
  free(cfgs);
  free(ttls);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

static dbx_err h_empty(ectx *c, job *j, const ProtobufCMessageDescriptor *d) {
  (void)c;
  void *q = svc_decode(j, d);
  if (q == NULL) return DBX_OK;
  protobuf_c_message_free_unpacked(q, NULL);
  j->status = DBX_GRPC_OK; /* an empty message: zero bytes */
  return DBX_OK;
}

typedef dbx_err (*handler_fn)(ectx *, job *);

static const struct {
  const char *method;
  handler_fn fn;
} handlers[] = {
    {"GetSystemInfo", h_get_system_info},
    {"DescribeNamespace", h_describe_namespace},
    {"ListNamespaces", h_list_namespaces},
    {"StartWorkflowExecution", svc_h_start},
    {"PollWorkflowTaskQueue", svc_h_poll_workflow},
    {"RespondWorkflowTaskCompleted", svc_h_wft_completed},
    {"RespondWorkflowTaskFailed", svc_h_wft_failed},
    {"PollActivityTaskQueue", svc_h_poll_activity},
    {"RecordActivityTaskHeartbeat", svc_h_heartbeat},
    {"RespondActivityTaskCompleted", svc_h_activity_completed},
    {"RespondActivityTaskFailed", svc_h_activity_failed},
    {"RespondActivityTaskCanceled", svc_h_activity_canceled},
    {"GetWorkflowExecutionHistory", svc_h_get_history},
    {"GetWorkflowExecutionHistoryReverse", svc_h_get_history_reverse},
    {"DescribeWorkflowExecution", svc_h_describe_execution},
    {"ListWorkflowExecutions", svc_h_list},
    {"CountWorkflowExecutions", svc_h_count},
    {"SignalWorkflowExecution", svc_h_signal},
    {"SignalWithStartWorkflowExecution", svc_h_signal_with_start},
    {"RequestCancelWorkflowExecution", svc_h_request_cancel},
    {"TerminateWorkflowExecution", svc_h_terminate},
    {"ResetWorkflowExecution", svc_h_reset},
    {"QueryWorkflow", svc_h_query},
    {"RespondQueryTaskCompleted", svc_h_respond_query},
};

dbx_err svc_handle_rpc(ectx *c, job *j) {
  if (j->call == NULL) { /* internal jobs only: no client can name one */
    if (j->method && strcmp(j->method, SVC_METHOD_TASK_UNDELIVERED) == 0) return svc_h_task_undelivered(c, j);
    return DBX_OK;
  }
  DBX_DEBUG("service", "rpc %s", j->method);
  if (dbx_rpc_call_is_workflow_service(j->call)) {
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
      if (strcmp(handlers[i].method, j->method) == 0) return handlers[i].fn(c, j);
    if (strcmp(j->method, "ShutdownWorker") == 0) return h_empty(c, j, &ShutdownWorkerRequest__D);
    if (strcmp(j->method, "ResetStickyTaskQueue") == 0) return h_empty(c, j, &ResetStickyTaskQueueRequest__D);
  }
  svc_job_fail(j, DBX_GRPC_UNIMPLEMENTED, "unknown method %s", j->method);
  return DBX_OK;
}
