/* Integration tests of workflow update handlers (worker/api.h
 * dbx_wf_update_def) on the real embedded service (in-process, temp LMDB,
 * loopback) with the real C worker, the client side driven over gRPC
 * (UpdateWorkflowExecution, wait stage COMPLETED; PollWorkflowExecutionUpdate):
 * an update accepted and completed with its result; a validator's
 * rejection (the caller gets the failure, history no event); an unknown
 * update name rejected; update-with-start handled in the run's first
 * workflow task; a long-running update completed after an activity,
 * where the worker process that accepted it is killed with SIGKILL while the
 * activity runs and a new worker (no cache: a full replay) completes it; the
 * resulting history replays deterministically offline.
 * The killed worker is this test binary run again as a worker
 * ("--worker <address> <db dir> <gate file>"). Waits poll for a condition up
 * to a deadline. */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/worker.h"

extern char **environ;

#define UPD_STAGE(x) TEMPORAL__API__ENUMS__V1__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE__UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_##x

static char *g_svc_dir, *g_wrk_dir, *g_gate;
static dbx_service *g_svc;
static dbx_worker *g_w;
static dbx_client *g_c;
static dbx_rpc_channel *g_ch;
static char g_addr[64];

/* ------------------------------------------------------------ the workflow */

/* t.Counter: a counter changed by updates; signal "finish" completes the run
 * with {"counter":N}.
 *  - update "add" (n): the validator rejects what is not a number and
 *    negative numbers; the handler adds n and completes with {"counter":N}.
 *  - update "slow" (x): schedules activity t.Gate with x; the update
 *    completes when it returns, with {"slow":<its result>,"counter":N}. */
typedef struct {
  int64_t counter;
  int64_t slow_update, slow_seq;
} counter;

static void *counter_create(dbx_wf *wf, const char *in, size_t len) {
  (void)wf, (void)in, (void)len;
  return calloc(1, sizeof(counter));
}

static void counter_free(void *st) { free(st); }

static char *add_validate(void *st, const char *json, size_t len) {
  (void)st;
  cJSON *j = cJSON_ParseWithLength(json, len);
  char *why = NULL;
  if (!cJSON_IsNumber(j))
    why = dbx_asprintf("add wants a number, got %.*s", (int)len, json);
  else if (j->valuedouble < 0)
    why = dbx_asprintf("add refuses a negative number: %.*s", (int)len, json);
  cJSON_Delete(j);
  return why;
}

static void add_run(void *st, dbx_wf *wf, int64_t update, const char *json, size_t len) {
  counter *c = st;
  cJSON *j = cJSON_ParseWithLength(json, len);
  c->counter += j ? (int64_t)j->valuedouble : 0;
  cJSON_Delete(j);
  char *r = dbx_asprintf("{\"counter\":%lld}", (long long)c->counter);
  if (dbx_wf_update_complete(wf, update, r) != 0) dbx_wf_fail(wf, "Test", "update_complete refused");
  /* a second answer to the same update is refused */
  if (dbx_wf_update_complete(wf, update, r) != -1) dbx_wf_fail(wf, "Test", "update completed twice");
  free(r);
}

static void slow_run(void *st, dbx_wf *wf, int64_t update, const char *json, size_t len) {
  counter *c = st;
  char *in = dbx_asprintf("%.*s", (int)len, json);
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 3000;
  o.initial_interval_ms = 200;
  c->slow_update = update;
  c->slow_seq = dbx_wf_schedule_activity(wf, "t.Gate", in, &o);
  free(in);
}

static void counter_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  counter *c = st;
  if (seq != c->slow_seq || c->slow_update == 0) return;
  if (o->status == DBX_ACT_COMPLETED) {
    char *r = dbx_asprintf("{\"slow\":%.*s,\"counter\":%lld}", (int)o->result_len, o->result_json,
                           (long long)c->counter);
    dbx_wf_update_complete(wf, c->slow_update, r);
    free(r);
  } else {
    dbx_wf_update_fail(wf, c->slow_update, "SlowFailed", "the gate activity did not complete");
  }
  c->slow_update = 0;
}

static void counter_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)json, (void)len;
  if (strcmp(name, "finish") != 0) return;
  char *r = dbx_asprintf("{\"counter\":%lld}", (long long)((counter *)st)->counter);
  dbx_wf_complete(wf, r);
  free(r);
}

static const dbx_wf_update_def counter_updates[] = {
    {"add", add_validate, add_run, "add a non-negative number"},
    {"slow", NULL, slow_run, "answer after the t.Gate activity"},
    {NULL, NULL, NULL, NULL}};

static const dbx_workflow_type wf_counter = {
    .name = "t.Counter",
    .create = counter_create,
    .on_activity = counter_on_activity,
    .on_signal = counter_on_signal,
    .destroy = counter_free,
    .updates = counter_updates,
};

/* t.Gate: creates "<gate>.started" (the attempt runs), waits until the gate
 * file (ud) exists, then returns {"gated":input}; a retryable failure when
 * its time runs out first. */
static dbx_err gate_run(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  struct stat sb;
  char *started = dbx_asprintf("%s.started", (const char *)ud);
  FILE *f = started ? fopen(started, "w") : NULL;
  if (f) fclose(f);
  free(started);
  while (stat((const char *)ud, &sb) != 0) {
    if (dbx_act_cancelled(a)) return DBX_ECANCELED;
    if (dbx_act_remaining_ms(a) < 200) {
      res->failure_type = dbx_strdup("GateClosed");
      res->failure_message = dbx_strdup("the gate stayed closed");
      return DBX_OK;
    }
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  res->result_json = dbx_asprintf("{\"gated\":%.*s}", (int)len, in);
  return DBX_OK;
}

static dbx_activity_type act_gate = {"t.Gate", DBX_SAFE_TO_RETRY, gate_run, NULL};

/* ------------------------------------------------------------ helpers */

static dbx_worker *worker_new(const char *addr, const char *dir, const char *gate) {
  dbx_worker_opts o = {0};
  o.address = addr;
  o.task_queue = "updq";
  o.db_dir = dir;
  o.no_sync = 1;
  dbx_worker *w = NULL;
  char *err = NULL;
  act_gate.ud = (void *)gate;
  if (dbx_worker_create(&o, &w, &err) != DBX_OK || dbx_worker_register_workflow(w, &wf_counter) != DBX_OK ||
      dbx_worker_register_activity(w, &act_gate) != DBX_OK || dbx_worker_start(w) != DBX_OK) {
    fprintf(stderr, "worker: %s\n", err ? err : "could not start");
    free(err);
    if (w) dbx_worker_destroy(w);
    return NULL;
  }
  return w;
}

/* This binary as a worker process (killed by the test). */
static int worker_main(const char *addr, const char *dir, const char *gate) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  if (!worker_new(addr, dir, gate)) return 1;
  for (;;) pause();
}

static pid_t worker_spawn(const char *dir) {
  char *argv[] = {"it_workflow_update", "--worker", g_addr, (char *)dir, g_gate, NULL};
  pid_t pid = 0;
  assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
  return pid;
}

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  g_svc_dir = dbx_test_tmpdir("itupd-svc");
  g_wrk_dir = dbx_test_tmpdir("itupd-wrk");
  g_gate = dbx_asprintf("%s/gate", g_wrk_dir);
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = g_svc_dir;
  so.port = 0;
  so.no_sync = 1;
  char *err = NULL;
  assert_int_equal(dbx_service_start(&so, &g_svc, &err), DBX_OK);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", dbx_service_port(g_svc));
  char *dir = dbx_asprintf("%s/w1", g_wrk_dir);
  g_w = worker_new(g_addr, dir, g_gate);
  free(dir);
  assert_non_null(g_w);
  dbx_client_opts co = {0};
  co.address = g_addr;
  assert_int_equal(dbx_client_create(&co, &g_c), DBX_OK);
  g_ch = dbx_svct_connect(dbx_service_port(g_svc));
  assert_non_null(g_ch);
  return 0;
}

static int group_teardown(void **st) {
  (void)st;
  if (g_w) {
    dbx_worker_stop(g_w, 1000);
    dbx_worker_destroy(g_w);
  }
  dbx_rpc_channel_destroy(g_ch);
  dbx_client_destroy(g_c);
  dbx_service_stop(g_svc);
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  free(g_svc_dir);
  free(g_wrk_dir);
  free(g_gate);
  dbx_rpc_global_shutdown();
  return 0;
}

static char *start(const char *wid) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = "t.Counter";
  o.task_queue = "updq";
  o.input_json = "{}";
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fprintf(stderr, "start %s: %s\n", wid, err ? err : "?");
  free(err);
  assert_int_equal(rc, DBX_OK);
  return rid;
}

/* UpdateWorkflowExecution name(arg) as update_id, waiting for stage `wait`
 * (the call is repeated, same update id, until that stage is reached or 60 s
 * passed). Returns the reply; the caller frees it. */
static UpdateWorkflowExecutionResponse *update(const char *wid, const char *update_id, const char *name,
                                               const char *arg, int wait) {
  UpdateWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Temporal__Api__Update__V1__WaitPolicy wp = INIT(TEMPORAL__API__UPDATE__V1__WAIT_POLICY);
  UpdateRequest req = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  Payloads *ps = dbx_payloads_from_json(arg, strlen(arg));
  assert_non_null(ps);
  we.workflow_id = (char *)wid;
  wp.lifecycle_stage = wait;
  meta.update_id = (char *)update_id;
  meta.identity = "it-client";
  in.name = (char *)name;
  in.args = ps;
  req.meta = &meta;
  req.input = &in;
  q.namespace_ = "default";
  q.workflow_execution = &we;
  q.wait_policy = &wp;
  q.request = &req;
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  UpdateWorkflowExecutionResponse *r = NULL;
  for (;;) {
    int stc = dbx_svct_call(g_ch, "UpdateWorkflowExecution", &q.base, &UpdateWorkflowExecutionResponse__D, 10000,
                            (void **)&r, NULL);
    assert_int_equal(stc, 0);
    if ((int)r->stage >= wait && (wait != UPD_STAGE(COMPLETED) || r->outcome)) break;
    if (dbx_mono_ns() > deadline) fail_msg("update %s of %s: stage %d, want %d", update_id, wid, (int)r->stage, wait);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    r = NULL;
  }
  dbx_payloads_free(ps);
  return r;
}

/* The outcome's success as JSON (malloc'd), or "FAILED:<type>:<message>". */
static char *outcome_text(const UpdateWorkflowExecutionResponse *r) {
  assert_non_null(r->outcome);
  if (r->outcome->value_case == TEMPORAL__API__UPDATE__V1__OUTCOME__VALUE_SUCCESS)
    return dbx_payloads_to_json(r->outcome->success);
  const Failure *f = r->outcome->failure;
  assert_non_null(f);
  return dbx_asprintf("FAILED:%s:%s",
                      f->failure_info_case == FI(APPLICATION_FAILURE_INFO) ? f->application_failure_info->type : "",
                      f->message);
}

static char *update_result(const char *wid, const char *update_id, const char *name, const char *arg) {
  UpdateWorkflowExecutionResponse *r = update(wid, update_id, name, arg, UPD_STAGE(COMPLETED));
  assert_int_equal(r->stage, UPD_STAGE(COMPLETED));
  char *s = outcome_text(r);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return s;
}

static void history(const char *wid, const char *rid, dbx_client_history *h) {
  memset(h, 0, sizeof *h);
  assert_int_equal(dbx_client_get_history(g_c, wid, rid, NULL, h, NULL), DBX_OK);
}

static size_t count(const dbx_client_history *h, int type) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++) n += (int)h->events[i]->event_type == type;
  return n;
}

/* Poll the history until it holds at least want events of type (up to 30 s). */
static void wait_count(const char *wid, const char *rid, int type, size_t want) {
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  for (;;) {
    dbx_client_history h;
    history(wid, rid, &h);
    size_t n = count(&h, type);
    dbx_client_history_cleanup(&h);
    if (n >= want) return;
    if (dbx_mono_ns() > deadline) fail_msg("%s: %zu events of type %d, want %zu", wid, n, type, want);
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Signal "finish" and wait for the completion; returns its result. */
static char *finish(const char *wid, const char *rid) {
  assert_int_equal(dbx_client_signal(g_c, wid, rid, "finish", NULL, NULL), DBX_OK);
  wait_count(wid, rid, ET(WORKFLOW_EXECUTION_COMPLETED), 1);
  dbx_client_history h;
  history(wid, rid, &h);
  HistoryEvent *e = h.events[h.n - 1];
  char *res = dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result);
  dbx_client_history_cleanup(&h);
  return res;
}

/* Offline replay of the run's history through t.Counter. */
static void assert_replays(const char *wid, const char *rid) {
  dbx_client_history h;
  history(wid, rid, &h);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&wf_counter, h.events, h.n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("replay of %s: %s", wid, rep.message);
  assert_int_equal(rep.events, h.n);
  assert_true(rep.commands_matched >= count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)) +
                                          count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)) + 1);
  dbx_client_history_cleanup(&h);
}

/* ------------------------------------------------------------ tests */

static void test_update_completed_with_result(void **st) {
  (void)st;
  char *rid = start("upd-add");
  char *a = update_result("upd-add", "u1", "add", "5");
  assert_string_equal(a, "{\"counter\":5}");
  char *b = update_result("upd-add", "u2", "add", "2");
  assert_string_equal(b, "{\"counter\":7}");
  /* the same update id again: its recorded outcome, not a second add */
  char *c = update_result("upd-add", "u2", "add", "2");
  assert_string_equal(c, "{\"counter\":7}");
  dbx_client_history h;
  history("upd-add", rid, &h);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 2);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 2);
  assert_int_equal(count(&h, ET(WORKFLOW_TASK_FAILED)), 0);
  for (size_t i = 0; i < h.n; i++) {
    const HistoryEvent *e = h.events[i];
    if (e->event_type != ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)) continue;
    const WorkflowExecutionUpdateAcceptedEventAttributes *x = e->workflow_execution_update_accepted_event_attributes;
    assert_non_null(x->accepted_request);
    assert_string_equal(x->accepted_request->input->name, "add");
  }
  dbx_client_history_cleanup(&h);
  char *res = finish("upd-add", rid);
  assert_string_equal(res, "{\"counter\":7}");
  assert_replays("upd-add", rid);
  free(res);
  free(a);
  free(b);
  free(c);
  free(rid);
}

static void test_update_rejected_by_validator(void **st) {
  (void)st;
  char *rid = start("upd-reject");
  char *a = update_result("upd-reject", "r1", "add", "-3");
  assert_string_equal(a, "FAILED:ValidationError:add refuses a negative number: -3");
  char *b = update_result("upd-reject", "r2", "add", "\"x\"");
  assert_string_equal(b, "FAILED:ValidationError:add wants a number, got \"x\"");
  /* a rejected update changed nothing: the next one sees counter 0 + 4 */
  char *c = update_result("upd-reject", "r3", "add", "4");
  assert_string_equal(c, "{\"counter\":4}");
  dbx_client_history h;
  history("upd-reject", rid, &h);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 1);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 1);
  for (size_t i = 0; i < h.n; i++) {
    const HistoryEvent *e = h.events[i];
    if (e->event_type == ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED))
      assert_string_equal(e->workflow_execution_update_accepted_event_attributes->protocol_instance_id, "r3");
  }
  dbx_client_history_cleanup(&h);
  char *res = finish("upd-reject", rid);
  assert_string_equal(res, "{\"counter\":4}");
  assert_replays("upd-reject", rid);
  free(res);
  free(a);
  free(b);
  free(c);
  free(rid);
}

static void test_update_unknown_name_rejected(void **st) {
  (void)st;
  char *rid = start("upd-unknown");
  char *a = update_result("upd-unknown", "n1", "nope", "1");
  assert_string_equal(a, "FAILED:UnknownUpdate:update 'nope' is not handled by workflow type 't.Counter'");
  dbx_client_history h;
  history("upd-unknown", rid, &h);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 0);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 0);
  dbx_client_history_cleanup(&h);
  char *res = finish("upd-unknown", rid);
  assert_string_equal(res, "{\"counter\":0}");
  free(res);
  free(a);
  free(rid);
}

/* Accepted by a worker process, which is killed (SIGKILL) while the update's
 * activity waits on the gate; the in-process worker, with no cached state,
 * replays the history (the handler runs again at its Accepted event: same
 * handle, same activity seq) and completes the update once the activity's
 * retry passes the gate. */
static void test_update_long_running_survives_worker_kill(void **st) {
  (void)st;
  dbx_worker_stop(g_w, 1000); /* only the process polls the queue until it is killed */
  dbx_worker_destroy(g_w);
  g_w = NULL;
  char *dir = dbx_asprintf("%s/w2", g_wrk_dir);
  pid_t pid = worker_spawn(dir);
  free(dir);
  char *rid = start("upd-slow");
  char *a = update_result("upd-slow", "k0", "add", "10");
  assert_string_equal(a, "{\"counter\":10}");
  UpdateWorkflowExecutionResponse *r = update("upd-slow", "k1", "slow", "{\"n\":1}", UPD_STAGE(ACCEPTED));
  assert_int_equal(r->stage, UPD_STAGE(ACCEPTED));
  assert_null(r->outcome);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* the attempt runs in the process (ActivityTaskStarted is written only
   * with the activity's outcome) */
  char *started = dbx_asprintf("%s.started", g_gate);
  struct stat sb;
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  while (stat(started, &sb) != 0) {
    if (dbx_mono_ns() > deadline) fail_msg("the t.Gate activity did not start");
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  free(started);
  kill(pid, SIGKILL);
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFSIGNALED(ws));
  dbx_client_history h;
  history("upd-slow", rid, &h);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 2);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 1);
  dbx_client_history_cleanup(&h);
  dir = dbx_asprintf("%s/w3", g_wrk_dir);
  g_w = worker_new(g_addr, dir, g_gate);
  free(dir);
  assert_non_null(g_w);
  FILE *f = fopen(g_gate, "w");
  assert_non_null(f);
  fclose(f);
  char *b = update_result("upd-slow", "k1", "slow", "{\"n\":1}");
  assert_string_equal(b, "{\"slow\":{\"gated\":{\"n\":1}},\"counter\":10}");
  history("upd-slow", rid, &h);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED)), 2);
  assert_int_equal(count(&h, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED)), 2);
  assert_int_equal(count(&h, ET(ACTIVITY_TASK_SCHEDULED)), 1);
  assert_int_equal(count(&h, ET(WORKFLOW_TASK_FAILED)), 0);
  dbx_client_history_cleanup(&h);
  char *res = finish("upd-slow", rid);
  assert_string_equal(res, "{\"counter\":10}");
  assert_replays("upd-slow", rid);
  free(res);
  free(a);
  free(b);
  free(rid);
}

/* Update-with-start (ExecuteMultiOperation): the run's first workflow task
 * carries the update; the handler runs right after create, in that task. */
static void test_update_with_start_in_first_task(void **st) {
  (void)st;
  StartWorkflowExecutionRequest sq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "t.Counter";
  tq.name = "updq";
  sq.workflow_id = "upd-ws";
  sq.workflow_type = &wt;
  sq.task_queue = &tq;
  sq.request_id = "upd-ws-req";
  sq.workflow_id_conflict_policy =
      TEMPORAL__API__ENUMS__V1__WORKFLOW_ID_CONFLICT_POLICY__WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING;
  UpdateWorkflowExecutionRequest uq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__UPDATE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  Temporal__Api__Update__V1__WaitPolicy wp = INIT(TEMPORAL__API__UPDATE__V1__WAIT_POLICY);
  UpdateRequest req = INIT(TEMPORAL__API__UPDATE__V1__REQUEST);
  Temporal__Api__Update__V1__Meta meta = INIT(TEMPORAL__API__UPDATE__V1__META);
  Temporal__Api__Update__V1__Input in = INIT(TEMPORAL__API__UPDATE__V1__INPUT);
  in.args = dbx_payloads_from_json("3", 1);
  assert_non_null(in.args);
  in.name = "add";
  meta.update_id = "w1";
  meta.identity = "it-client";
  req.meta = &meta;
  req.input = &in;
  we.workflow_id = "upd-ws";
  wp.lifecycle_stage = UPD_STAGE(ACCEPTED);
  uq.workflow_execution = &we;
  uq.wait_policy = &wp;
  uq.request = &req;
  ExecuteMultiOperationRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation o0 =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION);
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation o1 = o0;
  Temporal__Api__Workflowservice__V1__ExecuteMultiOperationRequest__Operation *ops[2] = {&o0, &o1};
  o0.operation_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION__OPERATION_START_WORKFLOW;
  o0.start_workflow = &sq;
  o1.operation_case = TEMPORAL__API__WORKFLOWSERVICE__V1__EXECUTE_MULTI_OPERATION_REQUEST__OPERATION__OPERATION_UPDATE_WORKFLOW;
  o1.update_workflow = &uq;
  q.namespace_ = "default";
  q.operations = ops;
  q.n_operations = 2;
  ExecuteMultiOperationResponse *r = NULL;
  assert_int_equal(dbx_svct_call(g_ch, "ExecuteMultiOperation", &q.base, &ExecuteMultiOperationResponse__D, 10000,
                                 (void **)&r, NULL),
                   0);
  assert_int_equal(r->n_responses, 2);
  assert_true(r->responses[0]->start_workflow->started);
  char *rid = strdup(r->responses[0]->start_workflow->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  dbx_payloads_free(in.args);
  char *a = update_result("upd-ws", "w1", "add", "3");
  assert_string_equal(a, "{\"counter\":3}");
  dbx_client_history h;
  history("upd-ws", rid, &h);
  /* started, task scheduled / started / completed, then the acceptance */
  assert_true(h.n > 5);
  assert_int_equal(h.events[3]->event_type, ET(WORKFLOW_TASK_COMPLETED));
  assert_int_equal(h.events[4]->event_type, ET(WORKFLOW_EXECUTION_UPDATE_ACCEPTED));
  assert_int_equal(h.events[5]->event_type, ET(WORKFLOW_EXECUTION_UPDATE_COMPLETED));
  dbx_client_history_cleanup(&h);
  char *res = finish("upd-ws", rid);
  assert_string_equal(res, "{\"counter\":3}");
  assert_replays("upd-ws", rid);
  free(res);
  free(a);
  free(rid);
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--worker") == 0) return worker_main(argv[2], argv[3], argv[4]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_update_completed_with_result),
      cmocka_unit_test(test_update_rejected_by_validator),
      cmocka_unit_test(test_update_unknown_name_rejected),
      cmocka_unit_test(test_update_with_start_in_first_task),
      cmocka_unit_test(test_update_long_running_survives_worker_kill),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
