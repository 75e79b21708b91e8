/* Integration tests of what the embedded service accepts from workers and
 * how it hands tasks out, in process with a real gRPC client playing the
 * worker:
 * - strings a worker reports that are not valid UTF-8 (a Latin-1 byte in a
 *   failure message, an identity) are stored repaired (U+FFFD) and the run
 *   goes on to its end, instead of the report being refused forever;
 * - a poll that ends without delivering its task (its deadline passed, its
 *   connection dropped) gives the task back at once: the next poller gets
 *   it with the same attempt number, well before the task's timeout. */
#include "tests/svc_client.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "service/service.h"

#define FFFD "\xef\xbf\xbd"

typedef dbx_svct_fixture fixture;

static int group_setup(void **state) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  return dbx_svct_fixture_start(&o, (dbx_svct_fixture **)state);
}

static int group_teardown(void **state) {
  dbx_svct_fixture_stop(*state);
  return 0;
}

static const HistoryEvent *last_of(const dbx_svct_history *h, int type) {
  for (size_t i = h->n; i > 0; i--)
    if ((int)h->events[i - 1]->event_type == type) return h->events[i - 1];
  return NULL;
}

/* RespondWorkflowTaskFailed and RespondActivityTaskFailed with a Latin-1
 * byte (0xE9, "é" in ISO 8859-1) in the failure message and the identity are
 * accepted; history holds the repaired text; the run completes. */
static void test_svc_worker_strings_are_repaired_not_refused(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "utf8-repair", "tq-utf8");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-utf8", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->attempt, 1);

  RespondWorkflowTaskFailedRequest wq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_FAILED_REQUEST);
  Failure fl = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  fl.message = "caf\xe9 failed";
  fl.stack_trace = "at caf\xe9.js:1";
  wq.namespace_ = "default";
  wq.task_token = t->task_token;
  wq.identity = "worker-\xe9";
  wq.failure = &fl;
  wq.cause = TEMPORAL__API__ENUMS__V1__WORKFLOW_TASK_FAILED_CAUSE__WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE;
  assert_int_equal(dbx_svct_call(f->ch, "RespondWorkflowTaskFailed", &wq.base, &RespondWorkflowTaskFailedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&t->base, NULL);

  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "utf8-repair", run_id, &h);
  const HistoryEvent *ev = last_of(&h, ET(WORKFLOW_TASK_FAILED));
  assert_non_null(ev);
  const WorkflowTaskFailedEventAttributes *wa = ev->workflow_task_failed_event_attributes;
  assert_non_null(wa->failure);
  assert_string_equal(wa->failure->message, "caf" FFFD " failed");
  assert_string_equal(wa->failure->stack_trace, "at caf" FFFD ".js:1");
  assert_string_equal(wa->identity, "worker-" FFFD);
  dbx_svct_history_cleanup(&h);

  /* the next attempt schedules an activity with one attempt only */
  t = dbx_svct_wft_poll(f->ch, "tq-utf8", 5000);
  assert_true(t->task_token.len > 0);
  assert_int_equal(t->attempt, 2);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "a1", "tq-utf8-act", 30, 1);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  PollActivityTaskQueueResponse *at = dbx_svct_activity_poll(f->ch, "tq-utf8-act", 5000);
  assert_true(at->task_token.len > 0);
  RespondActivityTaskFailedRequest aq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_FAILED_REQUEST);
  Failure af = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
  af.message = "r\xe9sum\xe9 \xff\xfe";
  aq.namespace_ = "default";
  aq.task_token = at->task_token;
  aq.identity = "act-\xe9";
  aq.failure = &af;
  assert_int_equal(dbx_svct_call(f->ch, "RespondActivityTaskFailed", &aq.base, &RespondActivityTaskFailedResponse__D,
                                 5000, NULL, NULL),
                   DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&at->base, NULL);

  t = dbx_svct_wft_poll(f->ch, "tq-utf8", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "utf8-repair", run_id), WS(COMPLETED));

  dbx_svct_history_get(f->ch, "utf8-repair", run_id, &h);
  ev = last_of(&h, ET(ACTIVITY_TASK_FAILED));
  assert_non_null(ev);
  assert_non_null(ev->activity_task_failed_event_attributes->failure);
  assert_string_equal(ev->activity_task_failed_event_attributes->failure->message,
                      "r" FFFD "sum" FFFD " " FFFD FFFD);
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

/* ------------------------------------------------------------ lost tasks */

typedef struct {
  dbx_rpc_channel *ch;
  const char *method, *tq;
  int64_t timeout_ms;
  int status;
  int64_t done_ns; /* monotonic, when the answer came */
  void *resp;      /* PollWorkflowTaskQueueResponse or PollActivityTaskQueueResponse */
} poll_arg;

static void *poll_thread(void *arg) {
  poll_arg *a = arg;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)a->tq;
  if (strcmp(a->method, "PollWorkflowTaskQueue") == 0) {
    PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
    q.namespace_ = "default";
    q.task_queue = &tq;
    q.identity = "it-poller";
    a->status = dbx_svct_call(a->ch, a->method, &q.base, &PollWorkflowTaskQueueResponse__D, a->timeout_ms,
                              &a->resp, NULL);
  } else {
    PollActivityTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
    q.namespace_ = "default";
    q.task_queue = &tq;
    q.identity = "it-poller";
    a->status = dbx_svct_call(a->ch, a->method, &q.base, &PollActivityTaskQueueResponse__D, a->timeout_ms,
                              &a->resp, NULL);
  }
  a->done_ns = dbx_mono_ns();
  return NULL;
}

/* Up to 10 s for cond() of the service to reach n. */
static void wait_count(dbx_service *svc, int (*cond)(dbx_service *), int n) {
  for (int i = 0; i < 10000 && cond(svc) < n; i++) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(cond(svc), n);
}

/* The race of the issue, made certain: the task is queued; poll A (a short
 * client deadline) reaches the engine, which is held, and its deadline
 * passes there; poll B follows. Released, one batch runs A, which takes the
 * task, and B, which finds nothing and parks. A's reply cannot be delivered:
 * the task must reach B at once, not after its timeout (10 s). */
static void race(fixture *f, const char *method, const char *tq, poll_arg *b, int64_t *released_ns) {
  dbx_service_test_hold(f->svc, 1);
  poll_arg a = {.ch = f->ch, .method = method, .tq = tq, .timeout_ms = 300};
  pthread_t at, bt;
  assert_int_equal(pthread_create(&at, NULL, poll_thread, &a), 0);
  wait_count(f->svc, dbx_service_test_queued, 1);
  *b = (poll_arg){.ch = f->ch, .method = method, .tq = tq, .timeout_ms = 4000};
  assert_int_equal(pthread_create(&bt, NULL, poll_thread, b), 0);
  wait_count(f->svc, dbx_service_test_queued, 2);
  pthread_join(at, NULL);
  assert_int_equal(a.status, DBX_GRPC_DEADLINE_EXCEEDED);
  wait_count(f->svc, dbx_service_test_queued_cancelled, 1); /* the server saw A end */
  *released_ns = dbx_mono_ns();
  dbx_service_test_hold(f->svc, 0);
  pthread_join(bt, NULL);
  assert_int_equal(b->status, DBX_GRPC_OK);
}

static void test_svc_undelivered_workflow_task_goes_to_the_next_poller(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "lost-wft", "tq-lost-wft"); /* task queued, 10 s timeout */
  poll_arg b;
  int64_t released = 0;
  race(f, "PollWorkflowTaskQueue", "tq-lost-wft", &b, &released);
  PollWorkflowTaskQueueResponse *t = b.resp;
  assert_true(t->task_token.len > 0);
  assert_true(b.done_ns - released < 1000000000LL); /* within a second, not the 10 s timeout */
  /* A's attempt timed out at once, as its timer would have: B has attempt 2 */
  assert_int_equal(t->attempt, 2);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "lost-wft", run_id), WS(COMPLETED));
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lost-wft", run_id, &h);
  int want[] = {ET(WORKFLOW_EXECUTION_STARTED),  ET(WORKFLOW_TASK_SCHEDULED), ET(WORKFLOW_TASK_STARTED),
                ET(WORKFLOW_TASK_TIMED_OUT),     ET(WORKFLOW_TASK_SCHEDULED), ET(WORKFLOW_TASK_STARTED),
                ET(WORKFLOW_TASK_COMPLETED),     ET(WORKFLOW_EXECUTION_COMPLETED)};
  assert_int_equal(h.n, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < h.n; i++) {
    assert_int_equal(h.events[i]->event_id, (int64_t)i + 1);
    assert_int_equal(h.events[i]->event_type, want[i]);
  }
  assert_int_equal(h.events[4]->workflow_task_scheduled_event_attributes->attempt, 2);
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

static void test_svc_undelivered_activity_task_goes_to_the_next_poller(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "lost-act", "tq-lost-act");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(f->ch, "tq-lost-act", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_schedule_activity(f->ch, t->task_token, "a1", "tq-lost-act-a", 30, 0);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  poll_arg b;
  int64_t released = 0;
  race(f, "PollActivityTaskQueue", "tq-lost-act-a", &b, &released);
  PollActivityTaskQueueResponse *at = b.resp;
  assert_true(at->task_token.len > 0);
  assert_true(b.done_ns - released < 1000000000LL);
  assert_int_equal(at->attempt, 1); /* the worker never saw the first hand-off: the same attempt */
  assert_int_equal(dbx_svct_activity_complete(f->ch, at->task_token, NULL), DBX_GRPC_OK);
  protobuf_c_message_free_unpacked(&at->base, NULL);

  t = dbx_svct_wft_poll(f->ch, "tq-lost-act", 5000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "lost-act", run_id), WS(COMPLETED));
  dbx_svct_history h;
  dbx_svct_history_get(f->ch, "lost-act", run_id, &h);
  const HistoryEvent *st = last_of(&h, ET(ACTIVITY_TASK_STARTED));
  assert_non_null(st);
  assert_int_equal(st->activity_task_started_event_attributes->attempt, 1);
  assert_string_equal(st->activity_task_started_event_attributes->identity, "it-poller");
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 1);
  dbx_svct_history_cleanup(&h);
  free(run_id);
}

/* Child mode (--poll-child host:port task_queue): one PollWorkflowTaskQueue
 * with a 30 s deadline; the test kills this process while the poll waits
 * for the engine, so its connection drops. */
static int poll_child(const char *target, const char *task_queue) {
  dbx_rpc_global_init();
  dbx_rpc_channel_opts o = {0};
  o.target = target;
  o.namespace_ = "default";
  dbx_rpc_channel *ch = NULL;
  if (dbx_rpc_channel_create(&o, &ch) != DBX_OK) return 2;
  PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)task_queue;
  q.namespace_ = "default";
  q.task_queue = &tq;
  q.identity = "it-child";
  uint8_t buf[256];
  size_t n = protobuf_c_message_pack(&q.base, buf);
  dbx_rpc_result r = {0};
  dbx_rpc_unary(ch, "PollWorkflowTaskQueue", buf, n, 30000, 1, NULL, &r);
  dbx_rpc_result_cleanup(&r);
  dbx_rpc_channel_destroy(ch);
  dbx_rpc_global_shutdown();
  return 0;
}

/* The same race when the poller's connection drops: the poll waits for the
 * engine, its process is killed (SIGKILL: the kernel closes the socket),
 * and poll B follows. */
static void test_svc_task_of_a_dropped_connection_goes_to_the_next_poller(void **state) {
  fixture *f = *state;
  char *run_id = dbx_svct_workflow_start(f->ch, "lost-conn", "tq-lost-conn");
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  assert_true(sl > 0);
  self[sl] = '\0';
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_service_port(f->svc));
  dbx_service_test_hold(f->svc, 1);
  char *argv[] = {self, "--poll-child", target, "tq-lost-conn", NULL};
  pid_t child = dbx_svct_proc_spawn(argv, NULL, NULL, NULL);
  wait_count(f->svc, dbx_service_test_queued, 1);
  dbx_svct_proc_kill(child, SIGKILL);
  wait_count(f->svc, dbx_service_test_queued_cancelled, 1); /* the server saw the connection go */
  poll_arg b = {.ch = f->ch, .method = "PollWorkflowTaskQueue", .tq = "tq-lost-conn", .timeout_ms = 4000};
  pthread_t bt;
  assert_int_equal(pthread_create(&bt, NULL, poll_thread, &b), 0);
  wait_count(f->svc, dbx_service_test_queued, 2);
  int64_t released = dbx_mono_ns();
  dbx_service_test_hold(f->svc, 0);
  pthread_join(bt, NULL);
  assert_int_equal(b.status, DBX_GRPC_OK);
  PollWorkflowTaskQueueResponse *t = b.resp;
  assert_true(t->task_token.len > 0);
  assert_true(b.done_ns - released < 1000000000LL);
  assert_int_equal(t->attempt, 2);
  dbx_svct_wft_complete_workflow(f->ch, t->task_token);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  assert_int_equal(dbx_svct_workflow_status(f->ch, "lost-conn", run_id), WS(COMPLETED));
  free(run_id);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--poll-child") == 0) return poll_child(argv[2], argv[3]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_worker_strings_are_repaired_not_refused),
      cmocka_unit_test(test_svc_undelivered_workflow_task_goes_to_the_next_poller),
      cmocka_unit_test(test_svc_undelivered_activity_task_goes_to_the_next_poller),
      cmocka_unit_test(test_svc_task_of_a_dropped_connection_goes_to_the_next_poller),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
