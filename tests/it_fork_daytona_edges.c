/* Fork edge cases over Daytona (issue 12, "Fork"): `durabox dev --sandbox
 * daytona` against the fake Daytona server (tests/fakes/daytona), as in
 * it_fork_daytona.c (the local driver's are in it_fork.c):
 *  - a run that timed out forks with a fresh timeout measured from the
 *    fork's start (never an instant time-out), and the fork gets to work;
 *  - a snapshot gone from Daytona (the fake's /_control/snapshots/forget)
 *    fails the fork with ForkSnapshotMissing naming it and the source;
 *  - a point in the run's open last workflow task snaps to the last
 *    completed one (the CLI says so) and the fork, on the queue the Daytona
 *    worker serves (--task-queue), runs to completion. */
#define FDX_PREFIX "itfe"
#include "tests/fork_daytona_fixture.h"

static int64_t ms_of(const HistoryEvent *e) {
  return e->event_time ? (int64_t)e->event_time->seconds * 1000 + e->event_time->nanos / 1000000 : 0;
}

/* The id of the first event of type whose activity (scheduled event) is act. */
static int64_t activity_event(dbx_svct_history *h, int type, const char *act) {
  for (size_t i = 0; i < h->n; i++) {
    const HistoryEvent *e = h->events[i];
    if ((int)e->event_type != type || type != ET(ACTIVITY_TASK_COMPLETED)) continue;
    int64_t sid = e->activity_task_completed_event_attributes->scheduled_event_id;
    const HistoryEvent *s = sid >= 1 && (size_t)sid <= h->n ? h->events[sid - 1] : NULL;
    if (s && s->activity_task_scheduled_event_attributes &&
        strcmp(s->activity_task_scheduled_event_attributes->activity_type->name, act) == 0)
      return e->event_id;
  }
  return 0;
}

#define DT_RUN_TIMEOUT_MS 8000

static void test_daytona_fork_of_timed_out_run_gets_a_fresh_timeout(void **state) {
  (void)state;
  dbx_client_opts co = {.address = g_addr};
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  const char *in = "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                   "{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":600}]}";
  dbx_client_start_opts so = {.workflow_id = "dt-to", .workflow_type = "durabox.Script", .task_queue = "durabox",
                              .input_json = in, .run_timeout_ms = DT_RUN_TIMEOUT_MS};
  char *run = NULL, *err = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &so, &run, &err), DBX_OK);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "dt-to", run, ET(WORKFLOW_EXECUTION_TIMED_OUT), 60000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-to", run, &h);
  long long at = activity_event(&h, ET(ACTIVITY_TASK_COMPLETED), "sandbox.write_file");
  dbx_svct_history_cleanup(&h);
  assert_true(at > 0);
  char *e = NULL, *out = fork_of("dt-to", "dt-to-fork", at, NULL, &e);
  assert_true(dbx_svct_history_wait_for(ch, "dt-to-fork", NULL, ET(WORKFLOW_EXECUTION_TIMED_OUT), 60000));
  dbx_svct_history_get(ch, "dt-to-fork", NULL, &h);
  const WorkflowExecutionStartedEventAttributes *sa = h.events[0]->workflow_execution_started_event_attributes;
  assert_int_equal(dbx_pb_duration_ms(sa->workflow_run_timeout), DT_RUN_TIMEOUT_MS);
  int64_t lived = ms_of(h.events[h.n - 1]) - ms_of(h.events[0]);
  assert_true(lived >= DT_RUN_TIMEOUT_MS - 500); /* measured from the fork's start */
  assert_int_equal(count_of(&h, ET(MARKER_RECORDED), "durabox.fork_step"), 1); /* it got to work first */
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.write_file"), 0);
  assert_true(count_of(&h, ET(TIMER_STARTED), NULL) > 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  free(run);
  free(err);
  dbx_client_destroy(c);
}

static void test_daytona_fork_with_a_missing_snapshot_fails_naming_it(void **state) {
  (void)state;
  start_script("dt-miss", "{\"sandbox\":{\"checkpoint\":{\"every_steps\":1}},\"steps\":["
                          "{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a\",\"content\":\"x\"},"
                          "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"b\",\"content\":\"y\"}]}");
  cJSON *res = result_of("dt-miss");
  const cJSON *ck = ckpt_at(res, 1);
  const char *ref = ref_of(ck);
  assert_non_null(ref);
  char *free_dir = snapshot_dir(ref); /* it is there, active */
  free(free_dir);
  char *body = dbx_asprintf("{\"name\":\"%s\"}", ref);
  char *r = dbx_fake_daytona_call(&g_fake, "POST", "/_control/snapshots/forget", body);
  assert_non_null(r);
  assert_non_null(strstr(r, ref));
  free(r);
  free(body);
  char *e = NULL, *out = fork_of("dt-miss", "dt-miss-fork", covered_of(ck), NULL, &e);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  assert_true(dbx_svct_history_wait_for(ch, "dt-miss-fork", NULL, ET(WORKFLOW_EXECUTION_FAILED), 60000));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-miss-fork", NULL, &h);
  const Failure *fl = h.events[h.n - 1]->workflow_execution_failed_event_attributes->failure;
  assert_non_null(fl);
  assert_non_null(strstr(fl->message, ref));
  assert_non_null(strstr(fl->message, "is missing"));
  assert_non_null(strstr(fl->message, "dt-miss"));
  assert_string_equal(fl->application_failure_info->type, "ForkSnapshotMissing");
  /* nothing after the point ran: b was to run live on the restored sandbox */
  assert_int_equal(count_of(&h, ET(ACTIVITY_TASK_SCHEDULED), "sandbox.write_file"), 0);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(e);
  cJSON_Delete(res);
}

static void test_daytona_fork_at_an_open_task_snaps(void **state) {
  (void)state;
  /* a run whose one completed task started a timer, then a signal's task is
   * left open (no worker polls "dt-open") */
  char *f = dbx_asprintf("%s/dt-open.json", g_dir), *out = NULL, *err = NULL;
  dbx_svct_file_write(f, "{\"steps\":[{\"name\":\"a\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"one\"},"
                         "{\"name\":\"r\",\"kind\":\"read_file\",\"path\":\"a.txt\"}]}");
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=dt-open", "--workflow-id",
                   "dt-open", "--input-file", f, NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_rpc_channel *ch = dbx_svct_connect(g_port);
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, "dt-open", 10000);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_start_timer(ch, t->task_token, "1", 3600);
  dbx_client_msg_free(t);
  rc = durabox(&out, &err, "workflow", "signal", "-w", "dt-open", "--name", "poke", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  dbx_svct_history h;
  dbx_svct_history_get(ch, "dt-open", NULL, &h);
  long long last = (long long)h.n, wtc = 0;
  for (size_t i = 0; i < h.n; i++)
    if (h.events[i]->event_type == ET(WORKFLOW_TASK_COMPLETED)) wtc = h.events[i]->event_id;
  assert_int_equal(h.events[h.n - 1]->event_type, ET(WORKFLOW_TASK_SCHEDULED));
  assert_true(wtc > 0 && wtc < last);
  dbx_svct_history_cleanup(&h);
  /* the fork, on the queue the Daytona worker serves */
  err = NULL;
  out = fork_of("dt-open", "dt-open-fork", last, "durabox", &err);
  char *want = dbx_asprintf("forking at event %lld, the last completed workflow task", wtc);
  assert_non_null(strstr(err, "open workflow task"));
  assert_non_null(strstr(err, want));
  free(want);
  cJSON *res = result_of("dt-open-fork");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(res, "status")), "completed");
  assert_false(from_record(res, 0)); /* nothing was recorded up to the point */
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(step_at(res, 1), "content")), "one");
  dbx_svct_history_get(ch, "dt-open-fork", NULL, &h);
  const WorkflowExecutionStartedEventAttributes *sa = h.events[0]->workflow_execution_started_event_attributes;
  assert_string_equal(sa->task_queue->name, "durabox");
  char *in = dbx_payloads_to_json(sa->input);
  cJSON *inj = cJSON_Parse(in);
  cJSON *fo = cJSON_GetObjectItem(inj, "fork_of");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(fo, "workflow_id")), "dt-open");
  assert_int_equal((long long)cJSON_GetNumberValue(cJSON_GetObjectItem(fo, "event_id")), wtc);
  cJSON_Delete(inj);
  free(in);
  dbx_svct_history_cleanup(&h);
  dbx_rpc_channel_destroy(ch);
  free(out);
  free(err);
  out = err = NULL;
  rc = durabox(&out, &err, "workflow", "terminate", "-w", "dt-open", NULL);
  assert_int_equal(rc, 0);
  free(out);
  free(err);
  free(f);
  cJSON_Delete(res);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_fork_of_timed_out_run_gets_a_fresh_timeout),
      cmocka_unit_test(test_daytona_fork_with_a_missing_snapshot_fails_naming_it),
      cmocka_unit_test(test_daytona_fork_at_an_open_task_snaps),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  dbx_rpc_global_shutdown();
  return rc;
}
