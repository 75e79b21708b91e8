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
/* The one cluster, named as Temporal's dev server names its own. */
#define CLUSTER_NAME "active"
#define CLUSTER_ID "6d1ee0f4-3c2a-4b8e-9f1a-6475726162ff"

static dbx_err h_get_system_info(ectx *c, job *j) {
  (void)c;
  GetSystemInfoResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE);
  Temporal__Api__Workflowservice__V1__GetSystemInfoResponse__Capabilities cap =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE__CAPABILITIES);
  /* Only what this service does (docs/compatibility.md): no
   * worker versioning, no eager workflow start; schedules and Count's GROUP BY
   * ExecutionStatus (service/visibility.c) are there. */
  cap.count_group_by_execution_status = 1;
  cap.supports_schedules = 1; /* service/schedule.c */
  cap.signal_and_query_header = 1;
  cap.internal_error_differentiation = 1;
  cap.activity_failure_include_heartbeat = 1;
  cap.encoded_failure_attributes = 1;
  cap.upsert_memo = 1;
  cap.sdk_metadata = 1;
  r.server_version = SERVER_VERSION;
  r.capabilities = &cap;
  svc_job_reply(j, &r.base);
  return DBX_OK;
}

/* The parts of a DescribeNamespaceResponse that Temporal's CLI reads
 * (replication_config, archival states, retention); pointers into one
 * caller-owned set of structs. */
typedef struct {
  DescribeNamespaceResponse r;
  NamespaceInfo info;
  NamespaceConfig cfg;
  Duration ttl;
  NamespaceReplicationConfig repl;
  ClusterReplicationConfig cluster;
  ClusterReplicationConfig *clusters[1];
} ns_reply;

static void fill_ns_info(dbx_service *s, size_t i, ns_reply *n) {
  DescribeNamespaceResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_RESPONSE);
  NamespaceInfo info = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_INFO);
  NamespaceConfig cfg = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_CONFIG);
  Duration ttl = INIT(GOOGLE__PROTOBUF__DURATION);
  NamespaceReplicationConfig repl = INIT(TEMPORAL__API__REPLICATION__V1__NAMESPACE_REPLICATION_CONFIG);
  ClusterReplicationConfig cl = INIT(TEMPORAL__API__REPLICATION__V1__CLUSTER_REPLICATION_CONFIG);
  n->r = r;
  n->info = info;
  n->cfg = cfg;
  n->ttl = ttl;
  n->repl = repl;
  n->cluster = cl;
  n->info.name = s->namespaces[i].name;
  n->info.id = s->namespaces[i].id;
  n->info.state = TEMPORAL__API__ENUMS__V1__NAMESPACE_STATE__NAMESPACE_STATE_REGISTERED;
  dbx_pb_duration_init_ms(&n->ttl, 24 * 3600 * 1000LL);
  n->cfg.workflow_execution_retention_ttl = &n->ttl;
  n->cfg.history_archival_state = TEMPORAL__API__ENUMS__V1__ARCHIVAL_STATE__ARCHIVAL_STATE_DISABLED;
  n->cfg.visibility_archival_state = TEMPORAL__API__ENUMS__V1__ARCHIVAL_STATE__ARCHIVAL_STATE_DISABLED;
  n->cluster.cluster_name = CLUSTER_NAME;
  n->clusters[0] = &n->cluster;
  n->repl.active_cluster_name = CLUSTER_NAME;
  n->repl.n_clusters = 1;
  n->repl.clusters = n->clusters;
  n->repl.state = TEMPORAL__API__ENUMS__V1__REPLICATION_STATE__REPLICATION_STATE_NORMAL;
  n->r.namespace_info = &n->info;
  n->r.config = &n->cfg;
  n->r.replication_config = &n->repl;
  n->r.is_global_namespace = 0;
  n->r.failover_version = 0;
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
    ns_reply n;
    fill_ns_info(c->svc, idx, &n);
    svc_job_reply(j, &n.r.base);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

static dbx_err h_list_namespaces(ectx *c, job *j) {
  ListNamespacesRequest *q = svc_decode(j, &ListNamespacesRequest__D);
  if (q == NULL) return DBX_OK;
  size_t n = c->svc->n_namespaces;
  ns_reply *items = dbx_calloc(n + 1, sizeof *items);
  DescribeNamespaceResponse **ptrs = dbx_calloc(n + 1, sizeof *ptrs);
  if (items && ptrs) {
    for (size_t i = 0; i < n; i++) {
      fill_ns_info(c->svc, i, &items[i]);
      ptrs[i] = &items[i].r;
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
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

/* GetClusterInfo: the first call of Temporal's Web UI. Supported clients as
 * Temporal's server lists them (its version checker's table). */
static dbx_err h_get_cluster_info(ectx *c, job *j) {
  (void)c;
  GetClusterInfoRequest *q = svc_decode(j, &GetClusterInfoRequest__D);
  if (q == NULL) return DBX_OK;
  static const char *const clients[][2] = {
      {"temporal-go", "<2.0.0"},     {"temporal-java", "<2.0.0"},   {"temporal-php", "<2.0.0"},
      {"temporal-typescript", "<2.0.0"}, {"temporal-python", "<2.0.0"}, {"temporal-cli", "<2.0.0"},
      {"temporal-server", "<2.0.0"}, {"temporal-ui", "<3.0.0"},
  };
  enum { NC = sizeof clients / sizeof clients[0] };
  Temporal__Api__Workflowservice__V1__GetClusterInfoResponse__SupportedClientsEntry ent[NC], *entp[NC];
  for (size_t i = 0; i < NC; i++) {
    Temporal__Api__Workflowservice__V1__GetClusterInfoResponse__SupportedClientsEntry e =
        INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_CLUSTER_INFO_RESPONSE__SUPPORTED_CLIENTS_ENTRY);
    ent[i] = e;
    ent[i].key = (char *)clients[i][0];
    ent[i].value = (char *)clients[i][1];
    entp[i] = &ent[i];
  }
  GetClusterInfoResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_CLUSTER_INFO_RESPONSE);
  r.n_supported_clients = NC;
  r.supported_clients = entp;
  r.server_version = SERVER_VERSION;
  r.cluster_id = CLUSTER_ID;
  r.cluster_name = CLUSTER_NAME;
  r.history_shard_count = 1;
  r.persistence_store = "lmdb";
  r.visibility_store = "durabox";
  r.initial_failover_version = 1;
  r.failover_version_increment = 10;
  svc_job_reply(j, &r.base);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

/* grpc.health.v1.Health/Check (`temporal operator cluster health`): SERVING
 * for the whole server ("") and the services it answers; NOT_FOUND for any
 * other, as gRPC's health protocol asks. */
static dbx_err h_health_check(ectx *c, job *j) {
  (void)c;
  HealthCheckRequest *q = svc_decode(j, &HealthCheckRequest__D);
  if (q == NULL) return DBX_OK;
  if (q->service[0] == '\0' || strcmp(q->service, "temporal.api.workflowservice.v1.WorkflowService") == 0 ||
      strcmp(q->service, "temporal.api.operatorservice.v1.OperatorService") == 0) {
    HealthCheckResponse r = INIT(GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE);
    r.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    svc_job_reply(j, &r.base);
  } else {
    svc_job_fail(j, DBX_GRPC_NOT_FOUND, "unknown service %s", q->service);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

typedef dbx_err (*handler_fn)(ectx *, job *);

static const struct {
  const char *method;
  handler_fn fn;
} handlers[] = {
    {"GetSystemInfo", h_get_system_info},
    {"GetClusterInfo", h_get_cluster_info},
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
    {"RecordActivityTaskHeartbeatById", svc_h_heartbeat_by_id},
    {"RespondActivityTaskCompletedById", svc_h_activity_completed_by_id},
    {"RespondActivityTaskFailedById", svc_h_activity_failed_by_id},
    {"RespondActivityTaskCanceledById", svc_h_activity_canceled_by_id},
    {"DeleteWorkflowExecution", svc_h_delete},
    {"DescribeTaskQueue", svc_h_describe_task_queue},
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
    {"UpdateWorkflowExecution", svc_h_update},
    {"PollWorkflowExecutionUpdate", svc_h_poll_update},
    {"ExecuteMultiOperation", svc_h_multi_operation},
    {"RespondQueryTaskCompleted", svc_h_respond_query},
    {"CreateSchedule", svc_h_create_schedule},
    {"DescribeSchedule", svc_h_describe_schedule},
    {"UpdateSchedule", svc_h_update_schedule},
    {"PatchSchedule", svc_h_patch_schedule},
    {"DeleteSchedule", svc_h_delete_schedule},
    {"ListSchedules", svc_h_list_schedules},
    {"ListScheduleMatchingTimes", svc_h_list_schedule_matching_times},
};

/* Methods of other services, by full path. */
static const struct {
  const char *method;
  handler_fn fn;
} other_handlers[] = {
    {"/grpc.health.v1.Health/Check", h_health_check},
    {"/temporal.api.operatorservice.v1.OperatorService/AddSearchAttributes", svc_h_add_search_attributes},
    {"/temporal.api.operatorservice.v1.OperatorService/ListSearchAttributes", svc_h_list_search_attributes},
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
    if (strcmp(j->method, "ShutdownWorker") == 0) return svc_h_shutdown_worker(c, j);
    if (strcmp(j->method, "ResetStickyTaskQueue") == 0) return svc_h_reset_sticky(c, j);
  } else {
    for (size_t i = 0; i < sizeof other_handlers / sizeof other_handlers[0]; i++)
      if (strcmp(other_handlers[i].method, j->method) == 0) return other_handlers[i].fn(c, j);
  }
  svc_job_fail(j, DBX_GRPC_UNIMPLEMENTED, "unknown method %s", j->method);
  return DBX_OK;
}
