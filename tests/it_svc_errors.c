/* Integration tests of the embedded service's error answers, in process
 * (dbx_service_start on 127.0.0.1:0, a temporary store, max_message_bytes =
 * 64 KiB) with a real gRPC client:
 * - bad input gets a status whose message names the field or the limit, and
 *   nothing is written (execution count or history length unchanged);
 * - stale and late activity completions are NOT_FOUND with a typed detail
 *   and add no event;
 * - an empty long poll is answered OK before the client's deadline, and
 *   dbx_client_get_history turns a long poll whose answer comes too late
 *   (the engine held) into an empty page that continues from the same token;
 * - an unknown method is UNIMPLEMENTED "unknown method".
 * The test plays both the client and the workers. */
#include "tests/svc_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/service.h"
#include "worker/client.h"

#define NS_DEFAULT "default"
#define MAX_MSG (64 * 1024)

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.port = 0;
  o.max_message_bytes = MAX_MSG;
  o.no_sync = 1; /* durability is it_svc_crash's subject; this file checks answers */
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

/* A StartWorkflowExecution that must be refused with status and a message
 * containing each of needles; the execution count must not change. */
static void expect_start_refused(fixture *f, const StartWorkflowExecutionRequest *q, int status,
                                 const char *const *needles, size_t n_needles, dbx_rpc_result *raw) {
  int64_t before = dbx_svct_workflow_count(f->ch);
  int st = dbx_svct_call(f->ch, "StartWorkflowExecution", &q->base, NULL, 10000, NULL, raw);
  if (st != status)
    fail_msg("workflow id \"%s\": status %d (%s), want %d", q->workflow_id, st, raw->message ? raw->message : "",
             status);
  assert_non_null(raw->message);
  for (size_t i = 0; i < n_needles; i++)
    if (strstr(raw->message, needles[i]) == NULL)
      fail_msg("message \"%s\" lacks \"%s\"", raw->message, needles[i]);
  assert_int_equal(dbx_svct_workflow_count(f->ch), before);
}

static void start_request(StartWorkflowExecutionRequest *q, WorkflowType *wt, TaskQueue *tq, const char *wfid) {
  StartWorkflowExecutionRequest q0 = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt0 = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq0 = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  *q = q0;
  *wt = wt0;
  *tq = tq0;
  wt->name = "it.Workflow";
  tq->name = "it-errors";
  q->namespace_ = NS_DEFAULT;
  q->workflow_id = (char *)wfid;
  q->workflow_type = wt;
  q->task_queue = tq;
}

static void test_svc_errors_undecodable_request(void **state) {
  fixture *f = *state;
  int64_t before = dbx_svct_workflow_count(f->ch);
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_rpc_unary(f->ch, "StartWorkflowExecution", "\xff\xff\xff", 3, 10000, 0, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(r.message);
  assert_non_null(strstr(r.message, "StartWorkflowExecutionRequest"));
  assert_non_null(strstr(r.message, "3 bytes"));
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(dbx_svct_workflow_count(f->ch), before);
}

static void test_svc_errors_invalid_utf8_workflow_id(void **state) {
  fixture *f = *state;
  StartWorkflowExecutionRequest q;
  WorkflowType wt;
  TaskQueue tq;
  start_request(&q, &wt, &tq, "wf-\xc3\x28-bad"); /* 0xc3 needs a continuation byte */
  const char *needles[] = {"workflow_id", "UTF-8"};
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, needles, 2, &r);
  dbx_rpc_result_cleanup(&r);
  /* a surrogate code point encoded in UTF-8 form is refused as well */
  start_request(&q, &wt, &tq, "wf-\xed\xa0\x80");
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, needles, 2, &r);
  dbx_rpc_result_cleanup(&r);
}

static void test_svc_errors_missing_fields(void **state) {
  fixture *f = *state;
  StartWorkflowExecutionRequest q;
  WorkflowType wt;
  TaskQueue tq;
  dbx_rpc_result r;

  start_request(&q, &wt, &tq, "");
  const char *n1[] = {"workflow_id", "required"};
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, n1, 2, &r);
  dbx_rpc_result_cleanup(&r);

  start_request(&q, &wt, &tq, "wf-no-queue");
  tq.name = "";
  const char *n2[] = {"task_queue.name", "required"};
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, n2, 2, &r);
  dbx_rpc_result_cleanup(&r);

  /* an absent sub-message is as missing as an empty name */
  start_request(&q, &wt, &tq, "wf-no-queue");
  q.task_queue = NULL;
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, n2, 2, &r);
  dbx_rpc_result_cleanup(&r);

  start_request(&q, &wt, &tq, "wf-no-type");
  q.workflow_type = NULL;
  const char *n3[] = {"workflow_type.name", "required"};
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_INVALID_ARGUMENT, n3, 2, &r);
  dbx_rpc_result_cleanup(&r);

  PollActivityTaskQueueRequest pq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
  pq.namespace_ = NS_DEFAULT;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_svct_call(f->ch, "PollActivityTaskQueue", &pq.base, NULL, 3000, NULL, &r),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(r.message, "task_queue.name"));
  dbx_rpc_result_cleanup(&r);

  DescribeWorkflowExecutionRequest dq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  dq.namespace_ = NS_DEFAULT;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &dq.base, NULL, 3000, NULL, &r),
                   DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(strstr(r.message, "workflow_execution.workflow_id"));
  dbx_rpc_result_cleanup(&r);
}

static void test_svc_errors_unknown_namespace(void **state) {
  fixture *f = *state;
  StartWorkflowExecutionRequest q;
  WorkflowType wt;
  TaskQueue tq;
  start_request(&q, &wt, &tq, "wf-ns");
  q.namespace_ = "no-such-namespace";
  const char *needles[] = {"no-such-namespace"};
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_NOT_FOUND, needles, 1, &r);
  char *url = dbx_svct_detail_type_url(&r);
  assert_non_null(url);
  assert_true(dbx_svct_ends_with(url, "/temporal.api.errordetails.v1.NamespaceNotFoundFailure"));
  free(url);
  /* the Any's value is the typed failure naming the namespace */
  RpcStatus *st = (RpcStatus *)protobuf_c_message_unpack(&RpcStatus__D, NULL, r.details_len, r.details);
  assert_non_null(st);
  assert_int_equal(st->code, DBX_GRPC_NOT_FOUND);
  assert_int_equal(st->n_details, 1);
  NamespaceNotFoundFailure *d = (NamespaceNotFoundFailure *)protobuf_c_message_unpack(
      &NamespaceNotFoundFailure__D, NULL, st->details[0]->value.len, st->details[0]->value.data);
  assert_non_null(d);
  assert_string_equal(d->namespace_, "no-such-namespace");
  protobuf_c_message_free_unpacked(&d->base, NULL);
  protobuf_c_message_free_unpacked(&st->base, NULL);
  dbx_rpc_result_cleanup(&r);
}

static void test_svc_errors_message_over_limit(void **state) {
  fixture *f = *state;
  StartWorkflowExecutionRequest q;
  WorkflowType wt;
  TaskQueue tq;
  start_request(&q, &wt, &tq, "wf-too-big");
  size_t big = 100 * 1024;
  uint8_t *data = malloc(big);
  assert_non_null(data);
  memset(data, 'x', big);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Payload *pl[1] = {&p};
  p.data.data = data;
  p.data.len = big;
  ps.payloads = pl;
  ps.n_payloads = 1;
  q.input = &ps;
  const char *needles[] = {"65536"}; /* gRPC names the limit */
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  expect_start_refused(f, &q, DBX_GRPC_RESOURCE_EXHAUSTED, needles, 1, &r);
  dbx_rpc_result_cleanup(&r);
  free(data);
  /* the workflow id was not taken */
  DescribeWorkflowExecutionRequest dq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = "wf-too-big";
  dq.namespace_ = NS_DEFAULT;
  dq.execution = &we;
  assert_int_equal(dbx_svct_call(f->ch, "DescribeWorkflowExecution", &dq.base, NULL, 10000, NULL, NULL),
                   DBX_GRPC_NOT_FOUND);
}

/* Start a workflow, answer its first workflow task with one activity on
 * act_tq, and poll that activity task. Returns the poll reply. */
static PollActivityTaskQueueResponse *started_activity(fixture *f, const char *wfid, const char *wf_tq,
                                                       const char *act_tq, int64_t start_to_close_s,
                                                       int max_attempts, char **run_id) {
  *run_id = dbx_svct_workflow_start(f->ch, wfid, wf_tq);
  PollWorkflowTaskQueueResponse *w = dbx_svct_wft_poll(f->ch, wf_tq, 5000);
  assert_true(w->task_token.len > 0);
  assert_string_equal(w->workflow_execution->workflow_id, wfid);
  dbx_svct_wft_schedule_activity(f->ch, w->task_token, "1", act_tq, start_to_close_s, max_attempts);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  PollActivityTaskQueueResponse *a = dbx_svct_activity_poll(f->ch, act_tq, 5000);
  assert_true(a->task_token.len > 0);
  assert_string_equal(a->activity_id, "1");
  assert_string_equal(a->workflow_execution->workflow_id, wfid);
  return a;
}

static size_t history_len(fixture *f, const char *wfid, const char *run_id) {
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, wfid, run_id, &h);
  size_t n = h.n;
  dbx_svct_history_cleanup(&h);
  return n;
}

static void test_svc_errors_forged_and_stale_task_token(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  PollActivityTaskQueueResponse *a = started_activity(f, "wf-tokens", "it-tokens", "it-tokens-act", 60, 0, &run_id);
  size_t n0 = history_len(f, "wf-tokens", run_id);

  /* forged: fixed pseudo-random bytes (reproducible) */
  uint8_t forged[48];
  uint32_t x = 0x9e3779b9u;
  for (size_t i = 0; i < sizeof forged; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    forged[i] = (uint8_t)x;
  }
  ProtobufCBinaryData ft = {sizeof forged, forged};
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_svct_activity_complete(f->ch, ft, &r), DBX_GRPC_INVALID_ARGUMENT);
  assert_non_null(r.message);
  assert_non_null(strstr(r.message, "task_token"));
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(history_len(f, "wf-tokens", run_id), n0);

  /* the real token completes once... */
  assert_int_equal(dbx_svct_activity_complete(f->ch, a->task_token, NULL), DBX_GRPC_OK);
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "wf-tokens", run_id, &h);
  size_t n1 = h.n;
  assert_true(n1 > n0);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 1);
  dbx_svct_history_cleanup(&h);

  /* ...and is stale the second time */
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_svct_activity_complete(f->ch, a->task_token, &r), DBX_GRPC_NOT_FOUND);
  char *url = dbx_svct_detail_type_url(&r);
  assert_non_null(url);
  assert_true(dbx_svct_ends_with(url, "/temporal.api.errordetails.v1.NotFoundFailure"));
  free(url);
  dbx_rpc_result_cleanup(&r);
  dbx_svct_history_get(f->ch, "wf-tokens", run_id, &h);
  assert_int_equal(h.n, n1);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 1);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_STARTED)), 1);
  dbx_svct_history_cleanup(&h);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  free(run_id);
}

static void test_svc_errors_completion_after_timeout(void **state) {
  fixture *f = *state;
  char *run_id = NULL;
  /* start_to_close 1 s, one attempt: the attempt times out while we hold it */
  PollActivityTaskQueueResponse *a = started_activity(f, "wf-late", "it-late", "it-late-act", 1, 1, &run_id);
  assert_int_equal(a->attempt, 1);
  assert_int_equal(a->start_to_close_timeout->seconds, 1);
  assert_int_equal(dbx_svct_history_wait_for(f->ch, "wf-late", run_id, ET(ACTIVITY_TASK_TIMED_OUT), 15000), 1);
  size_t n0 = history_len(f, "wf-late", run_id);

  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_svct_activity_complete(f->ch, a->task_token, &r), DBX_GRPC_NOT_FOUND);
  char *url = dbx_svct_detail_type_url(&r);
  assert_non_null(url);
  assert_true(dbx_svct_ends_with(url, "/temporal.api.errordetails.v1.NotFoundFailure"));
  free(url);
  dbx_rpc_result_cleanup(&r);

  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "wf-late", run_id, &h);
  assert_int_equal(h.n, n0);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_TIMED_OUT)), 1);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 0);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_STARTED)), 1);
  for (size_t i = 0; i < h.n; i++) {
    if ((int)h.events[i]->event_type != ET(ACTIVITY_TASK_TIMED_OUT)) continue;
    ActivityTaskTimedOutEventAttributes *t = h.events[i]->activity_task_timed_out_event_attributes;
    assert_non_null(t);
    assert_int_equal(t->retry_state, RS(MAXIMUM_ATTEMPTS_REACHED));
    assert_non_null(t->failure);
    assert_int_equal(t->failure->failure_info_case, FI(TIMEOUT_FAILURE_INFO));
    assert_int_equal(t->failure->timeout_failure_info->timeout_type, TT(START_TO_CLOSE));
  }
  dbx_svct_history_cleanup(&h);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  free(run_id);
}

static void test_svc_errors_empty_long_poll_answers_ok(void **state) {
  fixture *f = *state;
  PollActivityTaskQueueResponse *r = NULL;
  PollActivityTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = "it-nobody-schedules-here";
  q.namespace_ = NS_DEFAULT;
  q.task_queue = &tq;
  int st = dbx_svct_call(f->ch, "PollActivityTaskQueue", &q.base, &PollActivityTaskQueueResponse__D, 3000,
                         (void **)&r, NULL);
  assert_int_equal(st, DBX_GRPC_OK); /* not DEADLINE_EXCEEDED */
  assert_non_null(r);
  assert_int_equal(r->task_token.len, 0);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_svc_errors_late_history_long_poll_is_an_empty_page(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "wf-late-poll", "tq-late-poll");
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_service_port(f->svc));
  dbx_client_opts co = {.address = addr};
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  /* answered in time: the close event of a running run is an empty page */
  dbx_client_history h = {0};
  dbx_client_history_opts o = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 2500};
  char *err = NULL;
  assert_int_equal(dbx_client_get_history(c, "wf-late-poll", run_id, &o, &h, &err), DBX_OK);
  assert_null(err);
  assert_int_equal(h.n, 0);
  dbx_client_history_cleanup(&h);
  /* the engine held: no answer by the deadline, still an empty page */
  uint8_t tok[16] = {0};
  tok[7] = 3; /* from event 3: our service's token is (from, upto), big-endian */
  dbx_service_test_hold(f->svc, 1);
  dbx_client_history h2 = {0};
  dbx_client_history_opts o2 = {.wait_new_event = 1, .page_token = tok, .page_token_len = sizeof tok,
                                .timeout_ms = 800};
  dbx_err rc = dbx_client_get_history(c, "wf-late-poll", run_id, &o2, &h2, &err);
  dbx_service_test_hold(f->svc, 0);
  assert_int_equal(rc, DBX_OK);
  assert_null(err);
  assert_int_equal(h2.n, 0);
  assert_int_equal(h2.next_page_token_len, sizeof tok);
  assert_memory_equal(h2.next_page_token, tok, sizeof tok);
  dbx_client_history_cleanup(&h2);
  /* without a token or the close filter a late answer stays an error */
  dbx_service_test_hold(f->svc, 1);
  dbx_client_history h3 = {0};
  dbx_client_history_opts o3 = {.wait_new_event = 1, .timeout_ms = 800};
  rc = dbx_client_get_history(c, "wf-late-poll", run_id, &o3, &h3, &err);
  dbx_service_test_hold(f->svc, 0);
  assert_int_equal(rc, DBX_ETIMEDOUT);
  free(err);
  dbx_client_history_cleanup(&h3);
  dbx_client_destroy(c);
  free(run_id);
}

static void test_svc_errors_unknown_method(void **state) {
  fixture *f = *state;
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_rpc_unary(f->ch, "/temporal.api.workflowservice.v1.WorkflowService/UpdateNamespace", "", 0,
                                 10000, 0, NULL, &r),
                   DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_UNIMPLEMENTED);
  assert_non_null(r.message);
  assert_non_null(strstr(r.message, "unknown method"));
  dbx_rpc_result_cleanup(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_errors_undecodable_request),
      cmocka_unit_test(test_svc_errors_invalid_utf8_workflow_id),
      cmocka_unit_test(test_svc_errors_missing_fields),
      cmocka_unit_test(test_svc_errors_unknown_namespace),
      cmocka_unit_test(test_svc_errors_message_over_limit),
      cmocka_unit_test(test_svc_errors_forged_and_stale_task_token),
      cmocka_unit_test(test_svc_errors_completion_after_timeout),
      cmocka_unit_test(test_svc_errors_empty_long_poll_answers_ok),
      cmocka_unit_test(test_svc_errors_late_history_long_poll_is_an_empty_page),
      cmocka_unit_test(test_svc_errors_unknown_method),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
