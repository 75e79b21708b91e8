/* Unit tests of protos/: the protobuf-c code generated from durabox's subset
 * of Temporal's API. The expected byte vectors were produced by running
 * `protoc --encode` against the upstream temporal/api .proto files, so a
 * wrong field number or type in our subset makes these tests fail. */
#include "tests/testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "temporal/api/history/v1/message.pb-c.h"
#include "temporal/api/workflowservice/v1/request_response.pb-c.h"

/* PollWorkflowTaskQueueRequest{namespace:"default",
 *   task_queue{name:"tq", kind:TASK_QUEUE_KIND_NORMAL}, identity:"w"} */
static const uint8_t POLL_WFT_BYTES[] = {0x0a, 0x07, 0x64, 0x65, 0x66, 0x61, 0x75,
                                         0x6c, 0x74, 0x12, 0x06, 0x0a, 0x02, 0x74,
                                         0x71, 0x10, 0x01, 0x1a, 0x01, 0x77};

/* HistoryEvent{event_id:5, event_time{1700000000s, 5ns},
 *   event_type:EVENT_TYPE_TIMER_STARTED, task_id:1048576,
 *   timer_started_event_attributes{timer_id:"t1", start_to_fire_timeout{10s},
 *   workflow_task_completed_event_id:4}} */
static const uint8_t TIMER_STARTED_BYTES[] = {
    0x08, 0x05, 0x12, 0x08, 0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06, 0x10,
    0x05, 0x18, 0x11, 0x28, 0x80, 0x80, 0x40, 0xa2, 0x01, 0x0a, 0x0a,
    0x02, 0x74, 0x31, 0x12, 0x02, 0x08, 0x0a, 0x18, 0x04};

typedef Temporal__Api__Workflowservice__V1__PollWorkflowTaskQueueRequest poll_req;
typedef Temporal__Api__History__V1__HistoryEvent history_event;
#define TQ_NORMAL TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL
#define ET_TIMER_STARTED TEMPORAL__API__ENUMS__V1__EVENT_TYPE__EVENT_TYPE_TIMER_STARTED
#define ET_ACTIVITY_SCHEDULED \
  TEMPORAL__API__ENUMS__V1__EVENT_TYPE__EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
#define CASE_TIMER_STARTED \
  TEMPORAL__API__HISTORY__V1__HISTORY_EVENT__ATTRIBUTES_TIMER_STARTED_EVENT_ATTRIBUTES
#define CASE_ACTIVITY_SCHEDULED \
  TEMPORAL__API__HISTORY__V1__HISTORY_EVENT__ATTRIBUTES_ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES

/* Pack into a fresh heap buffer; caller frees. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len) {
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(*len ? *len : 1);
  assert_non_null(buf);
  assert_int_equal(protobuf_c_message_pack(m, buf), *len);
  return buf;
}

static void test_protos_poll_request_bytes_match_upstream(void **state) {
  (void)state;
  poll_req req = TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST__INIT;
  Temporal__Api__Taskqueue__V1__TaskQueue tq = TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE__INIT;
  tq.name = "tq";
  tq.kind = TQ_NORMAL;
  req.namespace_ = "default";
  req.task_queue = &tq;
  req.identity = "w";
  size_t len = 0;
  uint8_t *buf = pack(&req.base, &len);
  assert_int_equal(len, sizeof POLL_WFT_BYTES);
  assert_memory_equal(buf, POLL_WFT_BYTES, sizeof POLL_WFT_BYTES);
  free(buf);
}

static void test_protos_timer_started_event_round_trip(void **state) {
  (void)state;
  history_event ev = TEMPORAL__API__HISTORY__V1__HISTORY_EVENT__INIT;
  Google__Protobuf__Timestamp t = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
  Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
  Temporal__Api__History__V1__TimerStartedEventAttributes a =
      TEMPORAL__API__HISTORY__V1__TIMER_STARTED_EVENT_ATTRIBUTES__INIT;
  t.seconds = 1700000000;
  t.nanos = 5;
  d.seconds = 10;
  a.timer_id = "t1";
  a.start_to_fire_timeout = &d;
  a.workflow_task_completed_event_id = 4;
  ev.event_id = 5;
  ev.event_time = &t;
  ev.event_type = ET_TIMER_STARTED;
  ev.task_id = 1048576;
  ev.attributes_case = CASE_TIMER_STARTED;
  ev.timer_started_event_attributes = &a;

  size_t len = 0;
  uint8_t *buf = pack(&ev.base, &len);
  assert_int_equal(len, sizeof TIMER_STARTED_BYTES);
  assert_memory_equal(buf, TIMER_STARTED_BYTES, sizeof TIMER_STARTED_BYTES);

  history_event *got = temporal__api__history__v1__history_event__unpack(NULL, len, buf);
  free(buf);
  assert_non_null(got);
  assert_int_equal(got->event_id, 5);
  assert_int_equal(got->event_type, ET_TIMER_STARTED);
  assert_int_equal(got->task_id, 1048576);
  assert_non_null(got->event_time);
  assert_int_equal(got->event_time->seconds, 1700000000);
  assert_int_equal(got->event_time->nanos, 5);
  assert_int_equal(got->attributes_case, CASE_TIMER_STARTED);
  assert_non_null(got->timer_started_event_attributes);
  assert_string_equal(got->timer_started_event_attributes->timer_id, "t1");
  assert_non_null(got->timer_started_event_attributes->start_to_fire_timeout);
  assert_int_equal(got->timer_started_event_attributes->start_to_fire_timeout->seconds, 10);
  assert_int_equal(got->timer_started_event_attributes->workflow_task_completed_event_id, 4);
  temporal__api__history__v1__history_event__free_unpacked(got, NULL);
}

static void test_protos_activity_scheduled_event_round_trip(void **state) {
  (void)state;
  history_event ev = TEMPORAL__API__HISTORY__V1__HISTORY_EVENT__INIT;
  Temporal__Api__History__V1__ActivityTaskScheduledEventAttributes a =
      TEMPORAL__API__HISTORY__V1__ACTIVITY_TASK_SCHEDULED_EVENT_ATTRIBUTES__INIT;
  Temporal__Api__Common__V1__ActivityType at = TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE__INIT;
  Temporal__Api__Taskqueue__V1__TaskQueue tq = TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE__INIT;
  Temporal__Api__Common__V1__Payload p = TEMPORAL__API__COMMON__V1__PAYLOAD__INIT;
  Temporal__Api__Common__V1__Payload *pp[1] = {&p};
  Temporal__Api__Common__V1__Payloads in = TEMPORAL__API__COMMON__V1__PAYLOADS__INIT;
  Temporal__Api__Common__V1__Payload__MetadataEntry me =
      TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY__INIT;
  Temporal__Api__Common__V1__Payload__MetadataEntry *mep[1] = {&me};
  Temporal__Api__Common__V1__RetryPolicy rp = TEMPORAL__API__COMMON__V1__RETRY_POLICY__INIT;
  Google__Protobuf__Duration s2c = GOOGLE__PROTOBUF__DURATION__INIT;
  static uint8_t json[] = "\"hi\"";

  me.key = "encoding";
  me.value.data = (uint8_t *)"json/plain";
  me.value.len = 10;
  p.n_metadata = 1;
  p.metadata = mep;
  p.data.data = json;
  p.data.len = 4;
  in.n_payloads = 1;
  in.payloads = pp;
  at.name = "Greet";
  tq.name = "tq";
  tq.kind = TQ_NORMAL;
  rp.maximum_attempts = 3;
  rp.backoff_coefficient = 2.0;
  s2c.seconds = 60;
  a.activity_id = "1";
  a.activity_type = &at;
  a.task_queue = &tq;
  a.input = &in;
  a.schedule_to_close_timeout = &s2c;
  a.workflow_task_completed_event_id = 4;
  a.retry_policy = &rp;
  ev.event_id = 5;
  ev.event_type = ET_ACTIVITY_SCHEDULED;
  ev.attributes_case = CASE_ACTIVITY_SCHEDULED;
  ev.activity_task_scheduled_event_attributes = &a;

  size_t len = 0;
  uint8_t *buf = pack(&ev.base, &len);
  history_event *got = temporal__api__history__v1__history_event__unpack(NULL, len, buf);
  free(buf);
  assert_non_null(got);
  assert_int_equal(got->event_type, ET_ACTIVITY_SCHEDULED);
  assert_int_equal(got->attributes_case, CASE_ACTIVITY_SCHEDULED);
  const Temporal__Api__History__V1__ActivityTaskScheduledEventAttributes *g =
      got->activity_task_scheduled_event_attributes;
  assert_non_null(g);
  assert_string_equal(g->activity_id, "1");
  assert_string_equal(g->activity_type->name, "Greet");
  assert_string_equal(g->task_queue->name, "tq");
  assert_int_equal(g->task_queue->kind, TQ_NORMAL);
  assert_int_equal(g->schedule_to_close_timeout->seconds, 60);
  assert_null(g->start_to_close_timeout);
  assert_int_equal(g->workflow_task_completed_event_id, 4);
  assert_int_equal(g->retry_policy->maximum_attempts, 3);
  assert_true(g->retry_policy->backoff_coefficient == 2.0);
  assert_int_equal(g->input->n_payloads, 1);
  assert_int_equal(g->input->payloads[0]->data.len, 4);
  assert_memory_equal(g->input->payloads[0]->data.data, "\"hi\"", 4);
  assert_int_equal(g->input->payloads[0]->n_metadata, 1);
  assert_string_equal(g->input->payloads[0]->metadata[0]->key, "encoding");
  assert_int_equal(g->input->payloads[0]->metadata[0]->value.len, 10);
  assert_memory_equal(g->input->payloads[0]->metadata[0]->value.data, "json/plain", 10);
  temporal__api__history__v1__history_event__free_unpacked(got, NULL);
}

static void test_protos_unknown_fields_skipped_and_kept(void **state) {
  (void)state;
  /* The poll request plus deployment_options{deployment_name:"d"} (field 6
   * upstream, omitted in our subset; bytes from upstream protoc --encode) and
   * a varint field 999 = 5 that no version of the API defines. */
  uint8_t in[sizeof POLL_WFT_BYTES + 5 + 3];
  memcpy(in, POLL_WFT_BYTES, sizeof POLL_WFT_BYTES);
  const uint8_t extra[] = {0x32, 0x03, 0x0a, 0x01, 0x64, 0xb8, 0x3e, 0x05};
  memcpy(in + sizeof POLL_WFT_BYTES, extra, sizeof extra);

  poll_req *got = temporal__api__workflowservice__v1__poll_workflow_task_queue_request__unpack(
      NULL, sizeof in, in);
  assert_non_null(got);
  assert_string_equal(got->namespace_, "default");
  assert_string_equal(got->identity, "w");
  assert_non_null(got->task_queue);
  assert_string_equal(got->task_queue->name, "tq");
  assert_int_equal(got->task_queue->kind, TQ_NORMAL);
  /* protobuf-c keeps both unknown fields and writes them back on pack, so
   * bytes we do not model pass through unchanged. */
  assert_int_equal(got->base.n_unknown_fields, 2);
  size_t len = 0;
  uint8_t *buf = pack(&got->base, &len);
  assert_int_equal(len, sizeof in);
  assert_memory_equal(buf, in, sizeof in);
  free(buf);
  temporal__api__workflowservice__v1__poll_workflow_task_queue_request__free_unpacked(got, NULL);
}

static void test_protos_garbage_unpacks_to_null(void **state) {
  (void)state;
  /* length prefix far beyond the buffer */
  const uint8_t overlong[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x41};
  /* truncated varint */
  const uint8_t trunc_varint[] = {0x08, 0xff, 0xff};
  /* field number 0 is never valid */
  const uint8_t field_zero[] = {0x00, 0x01};
  /* wire type 7 does not exist */
  const uint8_t bad_wire[] = {0x0f, 0x01};
  /* the valid poll request cut inside its task_queue */
  const struct {
    const uint8_t *p;
    size_t n;
  } cases[] = {{overlong, sizeof overlong},   {trunc_varint, sizeof trunc_varint},
               {field_zero, sizeof field_zero}, {bad_wire, sizeof bad_wire},
               {POLL_WFT_BYTES, 13}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_null(temporal__api__workflowservice__v1__poll_workflow_task_queue_request__unpack(
        NULL, cases[i].n, cases[i].p));
    assert_null(temporal__api__history__v1__history_event__unpack(NULL, cases[i].n, cases[i].p));
  }
  /* a wrong wire type for a known field (event_id as length-delimited) */
  const uint8_t wrong_type[] = {0x0a, 0x01, 0x00};
  assert_null(
      temporal__api__history__v1__history_event__unpack(NULL, sizeof wrong_type, wrong_type));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_protos_poll_request_bytes_match_upstream),
      cmocka_unit_test(test_protos_timer_started_event_round_trip),
      cmocka_unit_test(test_protos_activity_scheduled_event_round_trip),
      cmocka_unit_test(test_protos_unknown_fields_skipped_and_kept),
      cmocka_unit_test(test_protos_garbage_unpacks_to_null),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
