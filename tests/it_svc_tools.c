/* Integration tests of the embedded service's answers to Temporal's own tools
 * (its CLI `temporal` and its Web UI), in process over real gRPC:
 * - DescribeNamespace / ListNamespaces carry replication_config (the one
 *   cluster "active"), archival states (disabled) and the retention;
 * - GetSystemInfo advertises only what the service does;
 * - GetClusterInfo (the Web UI's first call) names the cluster, version,
 *   stores and supported clients;
 * - grpc.health.v1.Health/Check answers SERVING (`operator cluster health`). */
#include "tests/svc_client.h"

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
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
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
  /* not implemented here, so not advertised */
  assert_false(r->capabilities->supports_schedules);
  assert_false(r->capabilities->eager_workflow_start);
  assert_false(r->capabilities->build_id_based_versioning);
  assert_false(r->capabilities->count_group_by_execution_status);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tools_describe_and_list_namespaces),
      cmocka_unit_test(test_tools_system_info_only_real_capabilities),
      cmocka_unit_test(test_tools_cluster_info),
      cmocka_unit_test(test_tools_health_check),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
