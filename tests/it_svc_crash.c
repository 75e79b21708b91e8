/* Integration test of the service's durability across kill -9: the real
 * `durabox server start-dev` binary in a child process on a fresh store.
 * Fifty workflows each get one activity scheduled while no activity worker
 * polls, and one workflow starts a 2 s timer; then the process is killed
 * with SIGKILL and started again on the same store. Every activity task must
 * be delivered exactly once after the restart, every workflow must finish
 * with a well-formed history, and the timer must fire.
 * The test plays the workflow and activity workers. Spawned servers are
 * killed and reaped by the group teardown, also after a failed assertion. */
#include "tests/svc_client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define N_WF 50
#define WF_TQ "it-crash"
#define ACT_TQ "it-crash-act"
#define TIMER_TQ "it-crash-timer"
#define TIMER_WF "crash-timer"

typedef struct {
  char *db_dir;
} fixture;

static int group_setup(void **state) {
  dbx_rpc_global_init();
  fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  f->db_dir = dbx_test_tmpdir("dbx-it-crash");
  *state = f;
  return 0;
}

static int group_teardown(void **state) {
  fixture *f = *state;
  dbx_svct_server_kill_all();
  if (f) {
    dbx_test_rmrf(f->db_dir);
    free(f->db_dir);
    free(f);
  }
  dbx_rpc_global_shutdown();
  return 0;
}

static int wf_index(const char *workflow_id) {
  int i = -1;
  if (sscanf(workflow_id, "crash-%d", &i) != 1 || i < 0 || i >= N_WF) return -1;
  char want[32];
  snprintf(want, sizeof want, "crash-%02d", i);
  return strcmp(want, workflow_id) == 0 ? i : -1;
}

static void test_svc_crash_kill9_loses_nothing(void **state) {
  fixture *f = *state;
  char *run_ids[N_WF] = {0};
  int seen[N_WF] = {0};

  /* ---- before the crash: schedule, nobody polls the activity queue */
  int port = dbx_svct_free_port();
  pid_t pid = dbx_svct_server_spawn(f->db_dir, port);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  for (int i = 0; i < N_WF; i++) {
    char wfid[32];
    snprintf(wfid, sizeof wfid, "crash-%02d", i);
    run_ids[i] = dbx_svct_workflow_start(ch, wfid, WF_TQ);
  }
  for (int k = 0; k < N_WF; k++) {
    PollWorkflowTaskQueueResponse *w = dbx_svct_wft_poll(ch, WF_TQ, 5000);
    assert_true(w->task_token.len > 0);
    int i = wf_index(w->workflow_execution->workflow_id);
    assert_true(i >= 0);
    assert_int_equal(seen[i], 0);
    seen[i] = 1;
    dbx_svct_wft_schedule_activity(ch, w->task_token, "1", ACT_TQ, 60, 0);
    protobuf_c_message_free_unpacked(&w->base, NULL);
  }
  char *timer_run = dbx_svct_workflow_start(ch, TIMER_WF, TIMER_TQ);
  PollWorkflowTaskQueueResponse *w = dbx_svct_wft_poll(ch, TIMER_TQ, 5000);
  assert_true(w->task_token.len > 0);
  dbx_svct_wft_start_timer(ch, w->task_token, "t1", 2);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  dbx_rpc_channel_destroy(ch);

  /* ---- the crash */
  int wst = dbx_svct_server_kill(pid);
  assert_true(WIFSIGNALED(wst));
  assert_int_equal(WTERMSIG(wst), SIGKILL);

  /* ---- after: same store, new process */
  port = dbx_svct_free_port(); /* a fresh port: the old one may linger in TIME_WAIT */
  pid = dbx_svct_server_spawn(f->db_dir, port);
  ch = dbx_svct_connect(port);
  memset(seen, 0, sizeof seen);
  for (int k = 0; k < N_WF; k++) {
    PollActivityTaskQueueResponse *a = dbx_svct_activity_poll(ch, ACT_TQ, 5000);
    if (a->task_token.len == 0) fail_msg("only %d of %d activity tasks were delivered after the restart", k, N_WF);
    int i = wf_index(a->workflow_execution->workflow_id);
    assert_true(i >= 0);
    if (seen[i]) fail_msg("activity of %s delivered twice", a->workflow_execution->workflow_id);
    seen[i] = 1;
    assert_string_equal(a->workflow_execution->run_id, run_ids[i]);
    assert_string_equal(a->activity_id, "1");
    assert_string_equal(a->activity_type->name, "it.Activity");
    assert_int_equal(a->attempt, 1); /* no attempt was lost to a timeout */
    assert_int_equal(dbx_svct_activity_complete(ch, a->task_token, NULL), DBX_GRPC_OK);
    protobuf_c_message_free_unpacked(&a->base, NULL);
  }
  /* nothing more: the service answers this empty poll before our deadline */
  PollActivityTaskQueueResponse *extra = dbx_svct_activity_poll(ch, ACT_TQ, 2000);
  assert_int_equal(extra->task_token.len, 0);
  protobuf_c_message_free_unpacked(&extra->base, NULL);

  /* every workflow gets its next workflow task and completes */
  memset(seen, 0, sizeof seen);
  for (int k = 0; k < N_WF; k++) {
    w = dbx_svct_wft_poll(ch, WF_TQ, 5000);
    if (w->task_token.len == 0) fail_msg("only %d of %d second workflow tasks came", k, N_WF);
    int i = wf_index(w->workflow_execution->workflow_id);
    assert_true(i >= 0);
    assert_int_equal(seen[i], 0);
    seen[i] = 1;
    dbx_svct_wft_complete_workflow(ch, w->task_token);
    protobuf_c_message_free_unpacked(&w->base, NULL);
  }
  for (int i = 0; i < N_WF; i++) {
    char wfid[32];
    snprintf(wfid, sizeof wfid, "crash-%02d", i);
    dbx_svct_history h;
    dbx_svct_history_get(ch, wfid, run_ids[i], &h);
    for (size_t e = 0; e < h.n; e++)
      if (h.events[e]->event_id != (int64_t)e + 1)
        fail_msg("%s: event %zu has id %lld", wfid, e, (long long)h.events[e]->event_id);
    assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_SCHEDULED)), 1);
    assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_STARTED)), 1);
    assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 1);
    assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_TIMED_OUT)), 0);
    assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_COMPLETED)), 1);
    assert_int_equal((int)h.events[h.n - 1]->event_type, ET(WORKFLOW_EXECUTION_COMPLETED));
    dbx_svct_history_cleanup(&h);
    assert_int_equal(dbx_svct_workflow_status(ch, wfid, run_ids[i]), WS(COMPLETED));
    free(run_ids[i]);
  }

  /* the durable timer fires after the restart */
  assert_int_equal(dbx_svct_history_wait_for(ch, TIMER_WF, timer_run, ET(TIMER_FIRED), 15000), 1);
  w = dbx_svct_wft_poll(ch, TIMER_TQ, 5000);
  assert_true(w->task_token.len > 0);
  assert_string_equal(w->workflow_execution->workflow_id, TIMER_WF);
  dbx_svct_wft_complete_workflow(ch, w->task_token);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  dbx_svct_history h;
  dbx_svct_history_get(ch, TIMER_WF, timer_run, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(TIMER_STARTED)), 1);
  assert_int_equal(dbx_svct_history_count(&h, ET(TIMER_FIRED)), 1);
  dbx_svct_history_cleanup(&h);
  assert_int_equal(dbx_svct_workflow_status(ch, TIMER_WF, timer_run), WS(COMPLETED));
  free(timer_run);

  dbx_rpc_channel_destroy(ch);
  wst = dbx_svct_server_kill(pid);
  assert_true(WIFSIGNALED(wst)); /* it was still serving */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_svc_crash_kill9_loses_nothing),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
