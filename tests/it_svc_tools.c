/* Integration tests of the embedded service's answers to Temporal's own tools
 * (its CLI `temporal` and its Web UI), in process over real gRPC:
 * - DescribeNamespace / ListNamespaces carry replication_config (the one
 *   cluster "active"), archival states (disabled) and the retention;
 * - GetSystemInfo advertises only what the service does;
 * - GetClusterInfo (the Web UI's first call) names the cluster, version,
 *   stores and supported clients;
 * - grpc.health.v1.Health/Check answers SERVING (`operator cluster health`);
 * - DeleteWorkflowExecution (a running run is terminated, then gone);
 * - DescribeTaskQueue: pollers (identity, last access time), backlog;
 * - the ...ById activity methods (`temporal activity complete|fail`);
 * - cancel of a closed run: a no-op success, as Temporal's server (v1.29) answers;
 * - Describe's root execution, state transition count, start delay, extended
 *   info;
 * - custom search attributes: AddSearchAttributes / ListSearchAttributes,
 *   an undefined one refused at start, in an upsert and in a query; values
 *   upserted from workflow code are what Describe, List and Count see;
 *   `server start-dev --search-attribute Name=Type`. */
#include "tests/svc_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "service/service.h"

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  static const char *const extra[] = {"tools-ns"};
  o.namespaces = extra;
  o.n_namespaces = 1;
  static const char *const sas[] = {"StartFlagAttr=double", "CustomKeywordField=Keyword"};
  o.search_attributes = sas;
  o.n_search_attributes = 2;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_proc_kill_all(); /* a server a failed test left running */
  dbx_svct_fixture_stop(*state);
  return 0;
}

/* What the CLI's `operator namespace describe` dereferences. */
static void assert_namespace_reply(const DescribeNamespaceResponse *r, const char *name) {
  assert_non_null(r->namespace_info);
  assert_string_equal(r->namespace_info->name, name);
  assert_int_equal(r->namespace_info->state, TEMPORAL__API__ENUMS__V1__NAMESPACE_STATE__NAMESPACE_STATE_REGISTERED);
  assert_int_equal(strlen(r->namespace_info->id), 36);
  assert_non_null(r->config);
  assert_non_null(r->config->workflow_execution_retention_ttl);
  assert_int_equal(r->config->workflow_execution_retention_ttl->seconds, 24 * 3600);
  assert_int_equal(r->config->history_archival_state, TEMPORAL__API__ENUMS__V1__ARCHIVAL_STATE__ARCHIVAL_STATE_DISABLED);
  assert_int_equal(r->config->visibility_archival_state,
                   TEMPORAL__API__ENUMS__V1__ARCHIVAL_STATE__ARCHIVAL_STATE_DISABLED);
  assert_non_null(r->replication_config);
  assert_string_equal(r->replication_config->active_cluster_name, "active");
  assert_int_equal(r->replication_config->n_clusters, 1);
  assert_string_equal(r->replication_config->clusters[0]->cluster_name, "active");
  assert_int_equal(r->replication_config->state,
                   TEMPORAL__API__ENUMS__V1__REPLICATION_STATE__REPLICATION_STATE_NORMAL);
  assert_false(r->is_global_namespace);
}

static void test_tools_describe_and_list_namespaces(void **state) {
  fixture *f = *state;
  DescribeNamespaceRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_REQUEST);
  q.namespace_ = "tools-ns";
  DescribeNamespaceResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeNamespace", &q.base, &DescribeNamespaceResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_namespace_reply(r, "tools-ns");
  char *id = strdup(r->namespace_info->id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* by id, as the CLI's --namespace-id does */
  q.namespace_ = "";
  q.id = id;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeNamespace", &q.base, &DescribeNamespaceResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_namespace_reply(r, "tools-ns");
  protobuf_c_message_free_unpacked(&r->base, NULL);
  free(id);

  ListNamespacesRequest lq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_NAMESPACES_REQUEST);
  ListNamespacesResponse *lr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "ListNamespaces", &lq.base, &ListNamespacesResponse__D, 5000, (void **)&lr,
                                 NULL),
                   DBX_GRPC_OK);
  assert_int_equal(lr->n_namespaces, 2);
  int seen_default = 0, seen_tools = 0;
  for (size_t i = 0; i < lr->n_namespaces; i++) {
    const char *name = lr->namespaces[i]->namespace_info->name;
    assert_namespace_reply(lr->namespaces[i], name);
    seen_default += strcmp(name, "default") == 0;
    seen_tools += strcmp(name, "tools-ns") == 0;
  }
  assert_int_equal(seen_default, 1);
  assert_int_equal(seen_tools, 1);
  protobuf_c_message_free_unpacked(&lr->base, NULL);
}

static void test_tools_system_info_only_real_capabilities(void **state) {
  fixture *f = *state;
  GetSystemInfoRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
  GetSystemInfoResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "GetSystemInfo", &q.base, &GetSystemInfoResponse__D, 5000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_non_null(r->capabilities);
  assert_true(r->capabilities->sdk_metadata);
  assert_true(r->capabilities->upsert_memo);
  assert_true(r->capabilities->signal_and_query_header);
  assert_true(r->capabilities->activity_failure_include_heartbeat);
  assert_true(r->capabilities->count_group_by_execution_status);
  assert_true(r->capabilities->supports_schedules);
  /* not implemented here, so not advertised */
  assert_false(r->capabilities->eager_workflow_start);
  assert_false(r->capabilities->build_id_based_versioning);
  assert_false(r->capabilities->nexus);
  assert_string_equal(r->server_version, "1.25.0");
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_tools_cluster_info(void **state) {
  fixture *f = *state;
  GetClusterInfoRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_CLUSTER_INFO_REQUEST);
  GetClusterInfoResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "GetClusterInfo", &q.base, &GetClusterInfoResponse__D, 5000, (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_string_equal(r->cluster_name, "active");
  assert_string_equal(r->server_version, "1.25.0");
  assert_int_equal(strlen(r->cluster_id), 36);
  assert_string_equal(r->persistence_store, "lmdb");
  assert_string_equal(r->visibility_store, "durabox");
  assert_int_equal(r->history_shard_count, 1);
  int ui = 0, py = 0, cli = 0;
  for (size_t i = 0; i < r->n_supported_clients; i++) {
    if (strcmp(r->supported_clients[i]->key, "temporal-ui") == 0)
      ui = strcmp(r->supported_clients[i]->value, "<3.0.0") == 0;
    if (strcmp(r->supported_clients[i]->key, "temporal-python") == 0) py = 1;
    if (strcmp(r->supported_clients[i]->key, "temporal-cli") == 0) cli = 1;
  }
  assert_true(ui && py && cli);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static int health(dbx_rpc_channel *ch, const char *service, int *serving) {
  HealthCheckRequest q = INIT(GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST);
  q.service = (char *)service;
  HealthCheckResponse *r = NULL;
  int st = dbx_svct_call(ch, "/grpc.health.v1.Health/Check", &q.base, &HealthCheckResponse__D, 5000, (void **)&r,
                         NULL);
  *serving = r ? (int)r->status : -1;
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

static void test_tools_health_check(void **state) {
  fixture *f = *state;
  int serving = -1;
  assert_int_equal(health(f->ch, "temporal.api.workflowservice.v1.WorkflowService", &serving), DBX_GRPC_OK);
  assert_int_equal(serving, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  assert_int_equal(health(f->ch, "", &serving), DBX_GRPC_OK);
  assert_int_equal(serving, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  assert_int_equal(health(f->ch, "no.such.Service", &serving), DBX_GRPC_NOT_FOUND);
  /* a method of Health the service does not have */
  HealthCheckRequest q = INIT(GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST);
  assert_int_equal(dbx_svct_call(f->ch, "/grpc.health.v1.Health/Watch", &q.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_UNIMPLEMENTED);
}

static int describe(dbx_rpc_channel *ch, const char *wfid, const char *run_id, DescribeWorkflowExecutionResponse **out) {
  DescribeWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  we.run_id = (char *)run_id;
  q.namespace_ = "default";
  q.execution = &we;
  return dbx_svct_call(ch, "DescribeWorkflowExecution", &q.base, &DescribeWorkflowExecutionResponse__D, 5000,
                       (void **)out, NULL);
}

static int delete_run(dbx_rpc_channel *ch, const char *wfid, const char *run_id) {
  DeleteWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DELETE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)wfid;
  we.run_id = (char *)run_id;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  return dbx_svct_call(ch, "DeleteWorkflowExecution", &q.base, &DeleteWorkflowExecutionResponse__D, 5000, NULL, NULL);
}

static int64_t count_query(dbx_rpc_channel *ch, const char *query) {
  CountWorkflowExecutionsRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_REQUEST);
  q.namespace_ = "default";
  q.query = (char *)query;
  CountWorkflowExecutionsResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "CountWorkflowExecutions", &q.base, &CountWorkflowExecutionsResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  int64_t n = r->count;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return n;
}

static void test_tools_delete_workflow_execution(void **state) {
  fixture *f = *state;
  char *closed = dbx_svct_workflow_start(f->ch, "del-closed", "tq-del");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-del", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  char *running = dbx_svct_workflow_start(f->ch, "del-running", "tq-del");
  assert_int_equal(count_query(f->ch, "WorkflowId = 'del-closed' OR WorkflowId = 'del-running'"), 2);

  /* a closed run: gone from Describe, history and Count */
  assert_int_equal(delete_run(f->ch, "del-closed", closed), DBX_GRPC_OK);
  DescribeWorkflowExecutionResponse *d = NULL;
  assert_int_equal(describe(f->ch, "del-closed", closed, &d), DBX_GRPC_NOT_FOUND);
  assert_int_equal(describe(f->ch, "del-closed", "", &d), DBX_GRPC_NOT_FOUND);
  GetWorkflowExecutionHistoryRequest hq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "del-closed";
  we.run_id = closed;
  hq.namespace_ = "default";
  hq.execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "GetWorkflowExecutionHistory", &hq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  assert_int_equal(count_query(f->ch, "WorkflowId = 'del-closed'"), 0);
  assert_int_equal(delete_run(f->ch, "del-closed", closed), DBX_GRPC_NOT_FOUND);

  /* a running run (by workflow id alone): terminated, then gone; its
   * queued workflow task is dropped, not handed out */
  assert_int_equal(delete_run(f->ch, "del-running", ""), DBX_GRPC_OK);
  assert_int_equal(describe(f->ch, "del-running", running, &d), DBX_GRPC_NOT_FOUND);
  assert_int_equal(count_query(f->ch, "WorkflowId = 'del-running'"), 0);
  t = dbx_svct_wft_poll(f->ch, "tq-del", 300);
  assert_int_equal(t->task_token.len, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* the workflow id is free again */
  char *again = dbx_svct_workflow_start(f->ch, "del-running", "tq-del");
  assert_string_not_equal(again, running);
  free(again);
  free(closed);
  free(running);
}

/* CountWorkflowExecutions "... GROUP BY ExecutionStatus": the total and one
 * group per status with runs, its value a json/plain Keyword payload; any
 * other grouping refused as Temporal refuses it. */
static void test_tools_count_group_by_status(void **state) {
  fixture *f = *state;
  char *done = dbx_svct_workflow_start(f->ch, "grp-done", "tq-grp");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-grp", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  char *run1 = dbx_svct_workflow_start(f->ch, "grp-run-1", "tq-grp");
  char *run2 = dbx_svct_workflow_start(f->ch, "grp-run-2", "tq-grp");
  CountWorkflowExecutionsRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_REQUEST);
  q.namespace_ = "default";
  q.query = "TaskQueue = 'tq-grp' group by ExecutionStatus ";
  CountWorkflowExecutionsResponse *r = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "CountWorkflowExecutions", &q.base, &CountWorkflowExecutionsResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(r->count, 3);
  assert_int_equal(r->n_groups, 2);
  const char *want[2] = {"\"Running\"", "\"Completed\""};
  int64_t want_n[2] = {2, 1};
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(r->groups[i]->n_group_values, 1);
    Payload *p = r->groups[i]->group_values[0];
    assert_int_equal(p->data.len, strlen(want[i]));
    assert_memory_equal(p->data.data, want[i], p->data.len);
    assert_int_equal(p->n_metadata, 2);
    assert_string_equal(p->metadata[0]->key, "encoding");
    assert_memory_equal(p->metadata[0]->value.data, "json/plain", 10);
    assert_int_equal(r->groups[i]->count, want_n[i]);
  }
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* the whole namespace, no filter before the clause */
  q.query = "GROUP BY ExecutionStatus";
  assert_int_equal(dbx_svct_call(f->ch, "CountWorkflowExecutions", &q.base, &CountWorkflowExecutionsResponse__D, 5000,
                                 (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_true(r->count >= 3);
  assert_true(r->n_groups >= 2);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* a quoted "group by" is a value, not a clause */
  assert_int_equal(count_query(f->ch, "WorkflowId = 'x group by ExecutionStatus'"), 0);
  /* another attribute: refused, naming the rule */
  q.query = "GROUP BY WorkflowType";
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(dbx_svct_call(f->ch, "CountWorkflowExecutions", &q.base, NULL, 5000, NULL, &raw),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(raw.message, "only supported for ExecutionStatus"));
  dbx_rpc_result_cleanup(&raw);
  free(done);
  free(run1);
  free(run2);
}

/* stats: 1 report_stats, 2 include_task_queue_status (deprecated; Temporal's
 * CLI asks for it in --legacy-mode), or both */
static DescribeTaskQueueResponse *describe_tq(dbx_rpc_channel *ch, const char *tq, int type, int stats) {
  DescribeTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_TASK_QUEUE_REQUEST);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  t.name = (char *)tq;
  q.namespace_ = "default";
  q.task_queue = &t;
  q.task_queue_type = type;
  q.report_stats = (stats & 1) != 0;
  q.include_task_queue_status = (stats & 2) != 0;
  DescribeTaskQueueResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "DescribeTaskQueue", &q.base, &DescribeTaskQueueResponse__D, 5000, (void **)&r,
                                 NULL),
                   DBX_GRPC_OK);
  return r;
}

static void test_tools_describe_task_queue(void **state) {
  fixture *f = *state;
  /* nobody polled yet */
  DescribeTaskQueueResponse *r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_WORKFLOW, 1);
  assert_int_equal(r->n_pollers, 0);
  assert_non_null(r->stats);
  assert_int_equal(r->stats->approximate_backlog_count, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* two queued workflow tasks: the backlog */
  char *a = dbx_svct_workflow_start(f->ch, "tq-desc-1", "tq-desc");
  char *b = dbx_svct_workflow_start(f->ch, "tq-desc-2", "tq-desc");
  r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_WORKFLOW, 1);
  assert_int_equal(r->stats->approximate_backlog_count, 2);
  assert_null(r->task_queue_status); /* not asked for */
  protobuf_c_message_free_unpacked(&r->base, NULL);
  r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_WORKFLOW, 2);
  assert_null(r->stats);
  assert_non_null(r->task_queue_status);
  assert_int_equal(r->task_queue_status->backlog_count_hint, 2);
  assert_non_null(r->task_queue_status->task_id_block);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* a workflow poll and an activity poll are seen with identity and time */
  int64_t before = dbx_wall_ns() / 1000000000 - 1;
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-desc", 5000);
  assert_true(t->task_token.len > 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollActivityTaskQueueResponse *at = dbx_svct_activity_poll(f->ch, "tq-desc", 200);
  assert_int_equal(at->task_token.len, 0);
  protobuf_c_message_free_unpacked(&at->base, NULL);
  r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_WORKFLOW, 1);
  assert_int_equal(r->n_pollers, 1);
  assert_string_equal(r->pollers[0]->identity, "it-workflow-worker");
  assert_non_null(r->pollers[0]->last_access_time);
  assert_true(r->pollers[0]->last_access_time->seconds >= before);
  assert_true(r->pollers[0]->last_access_time->seconds <= dbx_wall_ns() / 1000000000 + 1);
  assert_int_equal(r->stats->approximate_backlog_count, 1);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_ACTIVITY, 0);
  assert_int_equal(r->n_pollers, 1);
  assert_string_equal(r->pollers[0]->identity, "it-activity-worker");
  assert_null(r->stats); /* not asked for */
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* a Nexus queue: nobody polls one on durabox; answered empty, as Temporal
   * answers (Temporal's Web UI asks for all three types on a run's page) */
  r = describe_tq(f->ch, "tq-desc", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_NEXUS, 0);
  assert_int_equal(r->n_pollers, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* another queue has its own pollers */
  r = describe_tq(f->ch, "tq-desc-other", TEMPORAL__API__ENUMS__V1__TASK_QUEUE_TYPE__TASK_QUEUE_TYPE_WORKFLOW, 0);
  assert_int_equal(r->n_pollers, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  free(a);
  free(b);
}

/* A run with one started activity "act" on tq; returns the run id. */
static char *run_with_started_activity(dbx_rpc_channel *ch, const char *wfid, const char *tq) {
  char *rid = dbx_svct_workflow_start(ch, wfid, tq);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, tq, 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(ch, t->task_token, "act", tq, 60, 1);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollActivityTaskQueueResponse *at = dbx_svct_activity_poll(ch, tq, 5000);
  assert_true(at->task_token.len > 0);
  assert_string_equal(at->activity_id, "act");
  protobuf_c_message_free_unpacked(&at->base, NULL);
  return rid;
}

static const HistoryEvent *last_of(const dbx_svct_history *h, int type) {
  const HistoryEvent *e = NULL;
  for (size_t i = 0; i < h->n; i++)
    if ((int)h->events[i]->event_type == type) e = h->events[i];
  return e;
}

static void test_tools_activity_by_id(void **state) {
  fixture *f = *state;
  char *rid = run_with_started_activity(f->ch, "byid-1", "tq-byid-1");
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pp[1] = {&p};
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  p.data.data = (uint8_t *)"\"hb\"";
  p.data.len = 4;
  ps.n_payloads = 1;
  ps.payloads = pp;
  /* heartbeat by id: details kept, shown by Describe */
  RecordActivityTaskHeartbeatByIdRequest hq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_BY_ID_REQUEST);
  hq.namespace_ = "default";
  hq.workflow_id = "byid-1";
  hq.activity_id = "act";
  hq.details = &ps;
  RecordActivityTaskHeartbeatByIdResponse *hr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "RecordActivityTaskHeartbeatById", &hq.base,
                                 &RecordActivityTaskHeartbeatByIdResponse__D, 5000, (void **)&hr, NULL),
                   DBX_GRPC_OK);
  assert_false(hr->cancel_requested);
  protobuf_c_message_free_unpacked(&hr->base, NULL);
  DescribeWorkflowExecutionResponse *d = NULL;
  assert_int_equal(describe(f->ch, "byid-1", rid, &d), DBX_GRPC_OK);
  assert_int_equal(d->n_pending_activities, 1);
  assert_int_equal(d->pending_activities[0]->heartbeat_details->payloads[0]->data.len, 4);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* an unknown activity id is NOT_FOUND */
  RespondActivityTaskCompletedByIdRequest cq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_BY_ID_REQUEST);
  cq.namespace_ = "default";
  cq.workflow_id = "byid-1";
  cq.run_id = rid;
  cq.activity_id = "nope";
  cq.result = &ps;
  cq.identity = "cli-user";
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCompletedById", &cq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  /* complete by id: ActivityTaskCompleted with the result and identity */
  cq.activity_id = "act";
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCompletedById", &cq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history h = {0};
  dbx_svct_history_get(f->ch, "byid-1", rid, &h);
  const HistoryEvent *e = last_of(&h, ET(ACTIVITY_TASK_COMPLETED));
  assert_non_null(e);
  assert_string_equal(e->activity_task_completed_event_attributes->identity, "cli-user");
  assert_memory_equal(e->activity_task_completed_event_attributes->result->payloads[0]->data.data, "\"hb\"", 4);
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_TASK_SCHEDULED)), 2);
  dbx_svct_history_cleanup(&h);
  /* a second completion: the activity is gone */
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCompletedById", &cq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  free(rid);

  /* fail by id (one attempt allowed): ActivityTaskFailed with the failure */
  rid = run_with_started_activity(f->ch, "byid-2", "tq-byid-2");
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  fl.message = "failed from the CLI";
  RespondActivityTaskFailedByIdRequest fq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_BY_ID_REQUEST);
  fq.namespace_ = "default";
  fq.workflow_id = "byid-2";
  fq.activity_id = "act";
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskFailedById", &fq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_INVALID_ARGUMENT); /* failure is required */
  fq.failure = &fl;
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskFailedById", &fq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history_get(f->ch, "byid-2", rid, &h);
  e = last_of(&h, ET(ACTIVITY_TASK_FAILED));
  assert_non_null(e);
  assert_string_equal(e->activity_task_failed_event_attributes->failure->message, "failed from the CLI");
  dbx_svct_history_cleanup(&h);
  free(rid);

  /* cancel by id */
  rid = run_with_started_activity(f->ch, "byid-3", "tq-byid-3");
  RespondActivityTaskCanceledByIdRequest kq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_CANCELED_BY_ID_REQUEST);
  kq.namespace_ = "default";
  kq.workflow_id = "byid-3";
  kq.activity_id = "act";
  kq.identity = "cli-user";
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCanceledById", &kq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history_get(f->ch, "byid-3", rid, &h);
  e = last_of(&h, ET(ACTIVITY_TASK_CANCELED));
  assert_non_null(e);
  assert_string_equal(e->activity_task_canceled_event_attributes->identity, "cli-user");
  dbx_svct_history_cleanup(&h);
  free(rid);

  /* an attempt no worker started: a heartbeat by id is NOT_FOUND; complete
   * by id ends it (ActivityTaskStarted by the caller, then Completed), as
   * Temporal's server does, and its queued task is not handed out */
  rid = dbx_svct_workflow_start(f->ch, "byid-4", "tq-byid-4");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-byid-4", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "act", "tq-byid-4", 60, 1);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  hq.workflow_id = "byid-4";
  assert_int_equal(dbx_svct_call(f->ch, "RecordActivityTaskHeartbeatById", &hq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  cq.workflow_id = "byid-4";
  cq.run_id = "";
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskCompletedById", &cq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history_get(f->ch, "byid-4", rid, &h);
  const HistoryEvent *st = last_of(&h, ET(ACTIVITY_TASK_STARTED));
  e = last_of(&h, ET(ACTIVITY_TASK_COMPLETED));
  assert_non_null(st);
  assert_non_null(e);
  assert_string_equal(st->activity_task_started_event_attributes->identity, "cli-user");
  assert_int_equal(e->activity_task_completed_event_attributes->started_event_id, st->event_id);
  dbx_svct_history_cleanup(&h);
  PollActivityTaskQueueResponse *at = dbx_svct_activity_poll(f->ch, "tq-byid-4", 300);
  assert_int_equal(at->task_token.len, 0);
  protobuf_c_message_free_unpacked(&at->base, NULL);
  free(rid);
}

static void test_tools_cancel_closed_run_is_noop(void **state) {
  fixture *f = *state;
  char *rid = dbx_svct_workflow_start(f->ch, "cancel-closed", "tq-cc");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-cc", 5000);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  dbx_svct_history before, after;
  dbx_svct_history_get(f->ch, "cancel-closed", rid, &before);
  RequestCancelWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__REQUEST_CANCEL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "cancel-closed";
  q.namespace_ = "default";
  q.workflow_execution = &we;
  /* Temporal's server (v1.29): a cancel of a closed run is a success that
   * changes nothing */
  assert_int_equal(dbx_svct_call(f->ch, "RequestCancelWorkflowExecution", &q.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  dbx_svct_history_get(f->ch, "cancel-closed", rid, &after);
  assert_int_equal(after.n, before.n);
  assert_int_equal(dbx_svct_history_count(&after, ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED)), 0);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "cancel-closed", rid), WS(COMPLETED));
  dbx_svct_history_cleanup(&before);
  dbx_svct_history_cleanup(&after);
  /* a workflow id that never ran is still NOT_FOUND */
  we.workflow_id = "cancel-never-started";
  assert_int_equal(dbx_svct_call(f->ch, "RequestCancelWorkflowExecution", &q.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
  free(rid);
}

static void test_tools_describe_cli_fields(void **state) {
  fixture *f = *state;
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration delay = INIT(GOOGLE__PROTOBUF__DURATION), run = INIT(GOOGLE__PROTOBUF__DURATION);
  wt.name = "it.Workflow";
  t.name = "tq-fields";
  delay.seconds = 30;
  run.seconds = 600;
  q.namespace_ = "default";
  q.workflow_id = "fields";
  q.workflow_type = &wt;
  q.task_queue = &t;
  q.request_id = "fields-req";
  q.workflow_start_delay = &delay;
  q.workflow_run_timeout = &run;
  StartWorkflowExecutionResponse *sr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, 5000,
                                 (void **)&sr, NULL),
                   DBX_GRPC_OK);
  DescribeWorkflowExecutionResponse *d = NULL;
  assert_int_equal(describe(f->ch, "fields", sr->run_id, &d), DBX_GRPC_OK);
  WorkflowExecutionInfo *i = d->workflow_execution_info;
  assert_non_null(i->root_execution);
  assert_string_equal(i->root_execution->workflow_id, "fields");
  assert_string_equal(i->root_execution->run_id, sr->run_id);
  assert_true(i->state_transition_count >= 1);
  int64_t first = i->state_transition_count;
  /* first workflow task backoff: execution time = start time + 30 s */
  assert_int_equal(i->execution_time->seconds - i->start_time->seconds, 30);
  assert_null(i->execution_duration);
  assert_non_null(d->workflow_extended_info);
  assert_non_null(d->workflow_extended_info->run_expiration_time);
  assert_int_equal(d->workflow_extended_info->run_expiration_time->seconds - i->start_time->seconds, 600);
  assert_false(d->workflow_extended_info->cancel_requested);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  /* a cancel request: one more transition, shown in extended info */
  RequestCancelWorkflowExecutionRequest cq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__REQUEST_CANCEL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "fields";
  cq.namespace_ = "default";
  cq.workflow_execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "RequestCancelWorkflowExecution", &cq.base, NULL, 5000, NULL, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(describe(f->ch, "fields", sr->run_id, &d), DBX_GRPC_OK);
  assert_true(d->workflow_execution_info->state_transition_count > first);
  assert_true(d->workflow_extended_info->cancel_requested);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  protobuf_c_message_free_unpacked(&sr->base, NULL);
}

typedef Temporal__Api__Operatorservice__V1__AddSearchAttributesRequest__SearchAttributesEntry add_entry;
typedef Temporal__Api__Common__V1__SearchAttributes__IndexedFieldsEntry sa_field;

static int add_sa(dbx_rpc_channel *ch, const char *name, int type) {
  AddSearchAttributesRequest q = INIT(TEMPORAL__API__OPERATORSERVICE__V1__ADD_SEARCH_ATTRIBUTES_REQUEST);
  add_entry e = INIT(TEMPORAL__API__OPERATORSERVICE__V1__ADD_SEARCH_ATTRIBUTES_REQUEST__SEARCH_ATTRIBUTES_ENTRY);
  add_entry *ep[1] = {&e};
  e.key = (char *)name;
  e.value = type;
  q.namespace_ = "default";
  q.n_search_attributes = 1;
  q.search_attributes = ep;
  return dbx_svct_call(ch, "/temporal.api.operatorservice.v1.OperatorService/AddSearchAttributes", &q.base,
                       &AddSearchAttributesResponse__D, 5000, NULL, NULL);
}

/* SearchAttributes with one field whose payload is json (json/plain). */
typedef struct {
  SearchAttributes sa;
  sa_field f;
  sa_field *fp[1];
  Payload p;
  Temporal__Api__Common__V1__Payload__MetadataEntry m;
  Temporal__Api__Common__V1__Payload__MetadataEntry *mp[1];
} one_sa;

static void one_sa_init(one_sa *o, const char *name, const char *json) {
  SearchAttributes sa = INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES);
  sa_field f = INIT(TEMPORAL__API__COMMON__V1__SEARCH_ATTRIBUTES__INDEXED_FIELDS_ENTRY);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Temporal__Api__Common__V1__Payload__MetadataEntry m = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY);
  o->sa = sa;
  o->f = f;
  o->p = p;
  o->m = m;
  o->m.key = "encoding";
  o->m.value.data = (uint8_t *)"json/plain";
  o->m.value.len = 10;
  o->mp[0] = &o->m;
  o->p.n_metadata = 1;
  o->p.metadata = o->mp;
  o->p.data.data = (uint8_t *)json;
  o->p.data.len = strlen(json);
  o->f.key = (char *)name;
  o->f.value = &o->p;
  o->fp[0] = &o->f;
  o->sa.n_indexed_fields = 1;
  o->sa.indexed_fields = o->fp;
}

static int start_sa(dbx_rpc_channel *ch, const char *wfid, const char *tq, const one_sa *o, char **run_id,
                    dbx_rpc_result *raw) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue t = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Workflow";
  t.name = (char *)tq;
  q.namespace_ = "default";
  q.workflow_id = (char *)wfid;
  q.workflow_type = &wt;
  q.task_queue = &t;
  q.request_id = (char *)wfid;
  q.search_attributes = (SearchAttributes *)&o->sa;
  StartWorkflowExecutionResponse *r = NULL;
  int st = dbx_svct_call(ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, 5000, (void **)&r,
                         raw);
  if (r) {
    *run_id = strdup(r->run_id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  return st;
}

static int respond_upsert(dbx_rpc_channel *ch, ProtobufCBinaryData token, const one_sa *o, dbx_rpc_result *raw) {
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  UpsertWorkflowSearchAttributesCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__UPSERT_WORKFLOW_SEARCH_ATTRIBUTES_COMMAND_ATTRIBUTES);
  a.search_attributes = (SearchAttributes *)&o->sa;
  cmd.command_type = TEMPORAL__API__ENUMS__V1__COMMAND_TYPE__COMMAND_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES;
  cmd.attributes_case = CMD(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES);
  cmd.upsert_workflow_search_attributes_command_attributes = &a;
  RespondWorkflowTaskCompletedRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {&cmd};
  q.namespace_ = "default";
  q.task_token = token;
  q.identity = "it";
  q.n_commands = 1;
  q.commands = cmds;
  return dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &q.base, &RespondWorkflowTaskCompletedResponse__D, 5000,
                       NULL, raw);
}

/* The JSON of attribute name in a Describe reply, or NULL. */
static char *described_sa(dbx_rpc_channel *ch, const char *wfid, const char *name) {
  DescribeWorkflowExecutionResponse *d = NULL;
  assert_int_equal(describe(ch, wfid, "", &d), DBX_GRPC_OK);
  char *out = NULL;
  SearchAttributes *sa = d->workflow_execution_info->search_attributes;
  for (size_t i = 0; sa && i < sa->n_indexed_fields; i++)
    if (strcmp(sa->indexed_fields[i]->key, name) == 0)
      out = strndup((const char *)sa->indexed_fields[i]->value->data.data, sa->indexed_fields[i]->value->data.len);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  return out;
}

static int count_status(dbx_rpc_channel *ch, const char *query, dbx_rpc_result *raw) {
  CountWorkflowExecutionsRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_REQUEST);
  q.namespace_ = "default";
  q.query = (char *)query;
  return dbx_svct_call(ch, "CountWorkflowExecutions", &q.base, NULL, 5000, NULL, raw);
}

/* --search-attribute values the service cannot take fail its start. */
static void test_tools_search_attribute_flag_refused(void **state) {
  (void)state;
  static const char *const bad[][1] = {{"NoType"}, {"X=Nope"}, {"=Keyword"}, {"WorkflowId=Keyword"},
                                       {"CustomIntField=Keyword"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dbx_service_opts o;
    dbx_service_opts_init(&o);
    o.no_sync = 1;
    o.search_attributes = bad[i];
    o.n_search_attributes = 1;
    dbx_service *s = NULL;
    char *msg = NULL;
    assert_int_equal(dbx_service_start(&o, &s, &msg), DBX_EINVAL);
    assert_null(s);
    assert_non_null(msg);
    assert_non_null(strstr(msg, "--search-attribute"));
    free(msg);
  }
}

static void test_tools_search_attributes(void **state) {
  fixture *f = *state;
  /* register two; again with the same type is a no-op; another type, a
   * system name or a bad type is refused */
  assert_int_equal(add_sa(f->ch, "OrderId", TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD),
                   DBX_GRPC_OK);
  assert_int_equal(add_sa(f->ch, "Amount", TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_INT),
                   DBX_GRPC_OK);
  assert_int_equal(add_sa(f->ch, "OrderId", TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD),
                   DBX_GRPC_OK);
  assert_int_equal(add_sa(f->ch, "OrderId", TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_INT),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_int_equal(add_sa(f->ch, "WorkflowId", TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_int_equal(add_sa(f->ch, "Bad", 42), DBX_GRPC_INVALID_ARGUMENT);
  ListSearchAttributesRequest lq = INIT(TEMPORAL__API__OPERATORSERVICE__V1__LIST_SEARCH_ATTRIBUTES_REQUEST);
  lq.namespace_ = "default";
  ListSearchAttributesResponse *lr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "/temporal.api.operatorservice.v1.OperatorService/ListSearchAttributes",
                                 &lq.base, &ListSearchAttributesResponse__D, 5000, (void **)&lr, NULL),
                   DBX_GRPC_OK);
  int order = 0, amount = 0, ckw = 0, wid = 0, n_order = 0, flag = 0, n_ckw = 0;
  for (size_t i = 0; i < lr->n_custom_attributes; i++) {
    const char *k = lr->custom_attributes[i]->key;
    int v = (int)lr->custom_attributes[i]->value;
    if (strcmp(k, "StartFlagAttr") == 0) flag = v;
    if (strcmp(k, "CustomKeywordField") == 0) n_ckw++;
    if (strcmp(k, "OrderId") == 0) order = v, n_order++;
    if (strcmp(k, "Amount") == 0) amount = v;
    if (strcmp(k, "CustomKeywordField") == 0) ckw = v;
  }
  for (size_t i = 0; i < lr->n_system_attributes; i++)
    if (strcmp(lr->system_attributes[i]->key, "WorkflowId") == 0) wid = (int)lr->system_attributes[i]->value;
  assert_int_equal(order, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD);
  assert_int_equal(n_order, 1);
  assert_int_equal(n_ckw, 1);
  assert_int_equal(flag, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_DOUBLE);
  assert_int_equal(amount, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_INT);
  assert_int_equal(ckw, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD);
  assert_int_equal(wid, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD);
  protobuf_c_message_free_unpacked(&lr->base, NULL);

  /* an undefined attribute at start: refused as Temporal refuses it */
  one_sa o;
  one_sa_init(&o, "NoSuchAttr", "\"x\"");
  char *rid = NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(start_sa(f->ch, "sa-bad", "tq-sa", &o, &rid, &raw), DBX_GRPC_INVALID_ARGUMENT);
  assert_string_equal(raw.message, "search attribute NoSuchAttr is not defined");
  dbx_rpc_result_cleanup(&raw);
  assert_null(rid);
  /* TemporalChangeVersion, a system attribute the SDKs set for
   * workflow.patched, is accepted as Temporal accepts it */
  one_sa_init(&o, "TemporalChangeVersion", "[\"p-1\"]");
  assert_int_equal(start_sa(f->ch, "sa-tcv", "tq-sa-tcv", &o, &rid, NULL), DBX_GRPC_OK);
  assert_non_null(rid);
  free(rid);
  rid = NULL;

  /* start with OrderId o-1, upsert o-2 and Amount 5 from the workflow task */
  one_sa_init(&o, "OrderId", "\"o-1\"");
  assert_int_equal(start_sa(f->ch, "sa-1", "tq-sa", &o, &rid, NULL), DBX_GRPC_OK);
  free(rid);
  assert_int_equal(count_query(f->ch, "OrderId = 'o-1'"), 1);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-sa", 5000);
  assert_true(t->task_token.len > 0);
  one_sa bad;
  one_sa_init(&bad, "NoSuchAttr", "1");
  memset(&raw, 0, sizeof raw);
  assert_int_equal(respond_upsert(f->ch, t->task_token, &bad, &raw), DBX_GRPC_INVALID_ARGUMENT);
  assert_string_equal(raw.message, "search attribute NoSuchAttr is not defined");
  dbx_rpc_result_cleanup(&raw);
  one_sa_init(&o, "OrderId", "\"o-2\"");
  assert_int_equal(respond_upsert(f->ch, t->task_token, &o, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  /* the upsert made no new workflow task; a signal does */
  SignalWorkflowExecutionRequest sq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "sa-1";
  sq.namespace_ = "default";
  sq.workflow_execution = &we;
  sq.signal_name = "go";
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &sq.base, NULL, 5000, NULL, NULL), DBX_GRPC_OK);
  t = dbx_svct_wft_poll(f->ch, "tq-sa", 5000);
  assert_true(t->task_token.len > 0);
  one_sa_init(&o, "Amount", "5");
  assert_int_equal(respond_upsert(f->ch, t->task_token, &o, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  char *v = described_sa(f->ch, "sa-1", "OrderId");
  assert_string_equal(v, "\"o-2\"");
  free(v);
  v = described_sa(f->ch, "sa-1", "Amount");
  assert_string_equal(v, "5");
  free(v);
  assert_int_equal(count_query(f->ch, "OrderId = 'o-1'"), 0);
  assert_int_equal(count_query(f->ch, "OrderId = 'o-2'"), 1);
  assert_int_equal(count_query(f->ch, "OrderId IN ('o-9', 'o-2') AND Amount > 3"), 1);
  assert_int_equal(count_query(f->ch, "Amount >= 6"), 0);
  assert_int_equal(count_query(f->ch, "Amount = '5'"), 1);
  assert_int_equal(count_query(f->ch, "OrderId IS NOT NULL AND WorkflowId = 'sa-1'"), 1);
  assert_int_equal(count_query(f->ch, "Amount IS NULL AND WorkflowId = 'sa-1'"), 0);
  /* List shows the upserted values too */
  ListWorkflowExecutionsRequest lw = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_REQUEST);
  lw.namespace_ = "default";
  lw.query = "OrderId = 'o-2'";
  ListWorkflowExecutionsResponse *lwr = NULL;
  assert_int_equal(dbx_svct_call(f->ch, "ListWorkflowExecutions", &lw.base, &ListWorkflowExecutionsResponse__D, 5000,
                                 (void **)&lwr, NULL),
                   DBX_GRPC_OK);
  assert_int_equal(lwr->n_executions, 1);
  assert_string_equal(lwr->executions[0]->execution->workflow_id, "sa-1");
  assert_int_equal(lwr->executions[0]->search_attributes->n_indexed_fields, 2);
  protobuf_c_message_free_unpacked(&lwr->base, NULL);
  /* an undefined attribute in a query */
  memset(&raw, 0, sizeof raw);
  assert_int_equal(count_status(f->ch, "NoSuchAttr = 'x'", &raw), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(raw.message, "search attribute NoSuchAttr is not defined"));
  dbx_rpc_result_cleanup(&raw);
  memset(&raw, 0, sizeof raw);
  assert_int_equal(count_status(f->ch, "Amount = 'many'", &raw), DBX_GRPC_INVALID_ARGUMENT);
  dbx_rpc_result_cleanup(&raw);

  /* upserting null removes an attribute, as Temporal's merge does */
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &sq.base, NULL, 5000, NULL, NULL), DBX_GRPC_OK);
  t = dbx_svct_wft_poll(f->ch, "tq-sa", 5000);
  assert_true(t->task_token.len > 0);
  one_sa_init(&o, "Amount", "null");
  assert_int_equal(respond_upsert(f->ch, t->task_token, &o, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_null(described_sa(f->ch, "sa-1", "Amount"));
  assert_int_equal(count_query(f->ch, "Amount IS NULL AND WorkflowId = 'sa-1'"), 1);

  /* continue-as-new without search attributes: the new run keeps o-2 */
  assert_int_equal(dbx_svct_call(f->ch, "SignalWorkflowExecution", &sq.base, NULL, 5000, NULL, NULL), DBX_GRPC_OK);
  t = dbx_svct_wft_poll(f->ch, "tq-sa", 5000);
  assert_true(t->task_token.len > 0);
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ContinueAsNewWorkflowExecutionCommandAttributes can =
      INIT(TEMPORAL__API__COMMAND__V1__CONTINUE_AS_NEW_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  cmd.command_type = TEMPORAL__API__ENUMS__V1__COMMAND_TYPE__COMMAND_TYPE_CONTINUE_AS_NEW_WORKFLOW_EXECUTION;
  cmd.attributes_case = CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
  cmd.continue_as_new_workflow_execution_command_attributes = &can;
  RespondWorkflowTaskCompletedRequest cq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {&cmd};
  cq.namespace_ = "default";
  cq.task_token = t->task_token;
  cq.n_commands = 1;
  cq.commands = cmds;
  assert_int_equal(dbx_svct_call(f->ch, "RespondWorkflowTaskCompleted", &cq.base, NULL, 5000, NULL, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  v = described_sa(f->ch, "sa-1", "OrderId"); /* the current run: the new one */
  assert_string_equal(v, "\"o-2\"");
  free(v);
  assert_int_equal(count_query(f->ch, "OrderId = 'o-2' AND ExecutionStatus = 'Running'"), 1);
  assert_int_equal(count_query(f->ch, "OrderId = 'o-2' AND ExecutionStatus = 'ContinuedAsNew'"), 1);
}

/* `durabox server start-dev --search-attribute Name=Type`: the attribute is
 * listed and usable at start; a malformed one makes the command fail naming it. */
static void test_tools_server_search_attribute_flag(void **state) {
  (void)state;
  const char *bin = dbx_test_bin();
  char *dir = dbx_test_tmpdir("svc-tools-flag");
  int port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  char *const bad[] = {(char *)bin, "server", "start-dev", "--port", port_s, "--db-filename", dir,
                       "--search-attribute", "Broken=Sometimes", NULL};
  char *err = NULL;
  int rc = dbx_svct_proc_run(bad, NULL, 20000, NULL, &err);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(err, "--search-attribute Broken=Sometimes"));
  free(err);
  char *const good[] = {(char *)bin, "server", "start-dev", "--port", port_s, "--db-filename", dir,
                        "--log-level", "warn", "--search-attribute", "FlagKw=Keyword",
                        "--search-attribute=FlagInt=Int", "--headless", NULL};
  pid_t pid = dbx_svct_proc_spawn(good, NULL, NULL, NULL);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  ListSearchAttributesRequest lq = INIT(TEMPORAL__API__OPERATORSERVICE__V1__LIST_SEARCH_ATTRIBUTES_REQUEST);
  lq.namespace_ = "default";
  ListSearchAttributesResponse *lr = NULL;
  assert_int_equal(dbx_svct_call(ch, "/temporal.api.operatorservice.v1.OperatorService/ListSearchAttributes", &lq.base,
                                 &ListSearchAttributesResponse__D, 5000, (void **)&lr, NULL),
                   DBX_GRPC_OK);
  int kw = 0, in = 0;
  for (size_t i = 0; i < lr->n_custom_attributes; i++) {
    if (strcmp(lr->custom_attributes[i]->key, "FlagKw") == 0) kw = (int)lr->custom_attributes[i]->value;
    if (strcmp(lr->custom_attributes[i]->key, "FlagInt") == 0) in = (int)lr->custom_attributes[i]->value;
  }
  assert_int_equal(kw, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_KEYWORD);
  assert_int_equal(in, TEMPORAL__API__ENUMS__V1__INDEXED_VALUE_TYPE__INDEXED_VALUE_TYPE_INT);
  protobuf_c_message_free_unpacked(&lr->base, NULL);
  one_sa o;
  one_sa_init(&o, "FlagKw", "\"k\"");
  char *rid = NULL;
  assert_int_equal(start_sa(ch, "flag-sa", "tq-flag", &o, &rid, NULL), DBX_GRPC_OK);
  free(rid);
  assert_int_equal(count_query(ch, "FlagKw = 'k'"), 1);
  dbx_rpc_channel_destroy(ch);
  dbx_svct_proc_kill(pid, SIGKILL);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tools_describe_and_list_namespaces),
      cmocka_unit_test(test_tools_system_info_only_real_capabilities),
      cmocka_unit_test(test_tools_cluster_info),
      cmocka_unit_test(test_tools_health_check),
      cmocka_unit_test(test_tools_delete_workflow_execution),
      cmocka_unit_test(test_tools_describe_task_queue),
      cmocka_unit_test(test_tools_count_group_by_status),
      cmocka_unit_test(test_tools_activity_by_id),
      cmocka_unit_test(test_tools_cancel_closed_run_is_noop),
      cmocka_unit_test(test_tools_describe_cli_fields),
      cmocka_unit_test(test_tools_search_attributes),
      cmocka_unit_test(test_tools_search_attribute_flag_refused),
      cmocka_unit_test(test_tools_server_search_attribute_flag),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
