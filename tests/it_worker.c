/* Integration tests: the embedded service (in-process, temp LMDB, loopback)
 * and a dbx_worker with workflow and activity types defined here: activity
 * success, retry then success, heartbeat + cancel, timer, signal, query, the
 * Script workflow over fake sandbox.* activities and its retry policies,
 * at_most_once redelivery, non-retryable failures (flag, policy type, both),
 * heartbeats that do not extend start-to-close, and a service restart under a
 * running worker.
 * Results are read with long-polling GetWorkflowExecutionHistory (close-event
 * filter). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/worker.h"
#include "worker/wstore.h"
#include "workflows/script.h"

static char *g_svc_dir, *g_wrk_dir, *g_wrk_dir2;
static dbx_service *g_svc;
static int g_port;
static dbx_worker *g_w;
static dbx_client *g_c;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_echo_calls, g_flaky_calls, g_amo_calls, g_hb_running, g_fail_calls;
static int g_busy_end; /* t.busy: 0 running or not started, 1 ran out, 2 cancelled */
static int g_hb_end;   /* t.hb: 0 running or not started, 1 ran out, 2 cancelled */
/* fake sandbox.create from a url with "hang" (or sandbox.exec of the command
 * "hang-step"): 1 while it runs, 2 when it stopped on cancellation; create
 * from a url with "slow": runs until g_slow_release, ignoring cancellation,
 * then succeeds */
static int g_create_state, g_slow_release;
static char g_calls[64][48];
static char *g_call_inputs[64];
static int g_ncalls;

static void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ test workflow t.One */

typedef struct {
  cJSON *in;
  int scheduled, signals;
  int64_t seq;
} one;

static void one_schedule(one *s, dbx_wf *wf) {
  const cJSON *t = cJSON_GetObjectItem(s->in, "type");
  const cJSON *arg = cJSON_GetObjectItem(s->in, "arg");
  dbx_activity_opts o = {0};
  o.start_to_close_ms = 20000;
  o.initial_interval_ms = 100;
  o.maximum_attempts = 5;
  if (cJSON_IsTrue(cJSON_GetObjectItem(s->in, "amo"))) o.retry_class = DBX_AT_MOST_ONCE;
  const cJSON *hb = cJSON_GetObjectItem(s->in, "hb_ms");
  if (cJSON_IsNumber(hb)) o.heartbeat_ms = (int64_t)hb->valuedouble;
  const cJSON *stc = cJSON_GetObjectItem(s->in, "start_to_close_ms");
  if (cJSON_IsNumber(stc)) o.start_to_close_ms = (int64_t)stc->valuedouble;
  const cJSON *ma = cJSON_GetObjectItem(s->in, "maximum_attempts");
  if (cJSON_IsNumber(ma)) o.maximum_attempts = (int32_t)ma->valuedouble;
  /* "nr_types": the policy's non_retryable_error_types (at most 3) */
  static const char *nr[4];
  const cJSON *nrt = cJSON_GetObjectItem(s->in, "nr_types");
  if (cJSON_IsArray(nrt)) {
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, nrt) if (n < 3) nr[n++] = x->valuestring;
    nr[n] = NULL;
    o.non_retryable_error_types = nr;
  }
  cJSON *in = cJSON_CreateObject();
  cJSON_AddItemToObject(in, "arg", arg ? cJSON_Duplicate(arg, 1) : cJSON_CreateNull());
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  s->seq = dbx_wf_schedule_activity(wf, t->valuestring, txt, &o);
  s->scheduled = 1;
  free(txt);
}

static void *one_create(dbx_wf *wf, const char *json, size_t len) {
  one *s = calloc(1, sizeof *s);
  s->in = cJSON_ParseWithLength(json, len);
  if (!s->in || !cJSON_IsString(cJSON_GetObjectItem(s->in, "type"))) {
    cJSON_Delete(s->in);
    free(s);
    dbx_wf_fail(wf, "InvalidInput", "t.One needs {\"type\"}");
    return NULL;
  }
  if (!cJSON_IsTrue(cJSON_GetObjectItem(s->in, "wait_signal"))) one_schedule(s, wf);
  return s;
}

static void one_on_activity(void *st, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  one *s = st;
  assert_int_equal(seq, s->seq);
  static const char *names[] = {"", "completed", "failed", "timed_out", "canceled"};
  cJSON *out = cJSON_CreateObject();
  cJSON_AddStringToObject(out, "status", names[o->status]);
  cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  cJSON_AddItemToObject(out, "result", res ? res : cJSON_CreateNull());
  cJSON_AddStringToObject(out, "failure_type", o->failure_type ? o->failure_type : "");
  cJSON_AddStringToObject(out, "failure_message", o->failure_message ? o->failure_message : "");
  cJSON_AddBoolToObject(out, "non_retryable", o->non_retryable);
  cJSON_AddNumberToObject(out, "attempts", o->attempts);
  cJSON_AddNumberToObject(out, "signals", s->signals);
  char *txt = cJSON_PrintUnformatted(out);
  cJSON_Delete(out);
  dbx_wf_complete(wf, txt);
  free(txt);
}

static void one_on_signal(void *st, dbx_wf *wf, const char *name, const char *json, size_t len) {
  (void)json, (void)len;
  one *s = st;
  if (strcmp(name, "go") == 0 && !s->scheduled) one_schedule(s, wf);
  if (strcmp(name, "cancel") == 0) assert_int_equal(dbx_wf_cancel_activity(wf, s->seq), 0);
  if (strcmp(name, "poke") == 0) s->signals++;
}

static char *one_on_query(void *st, const char *name) {
  one *s = st;
  if (strcmp(name, "state") != 0) return NULL;
  return dbx_asprintf("{\"signals\":%d,\"scheduled\":%s}", s->signals,
                      s->scheduled ? "true" : "false");
}

static void one_destroy(void *st) {
  one *s = st;
  cJSON_Delete(s->in);
  free(s);
}

static const dbx_workflow_type wf_one = {"t.One", one_create, one_on_activity, NULL,
                                         one_on_signal, NULL, one_on_query, one_destroy};

/* ------------------------------------------------------------ test workflow t.Timer */

static void *tmr_create(dbx_wf *wf, const char *json, size_t len) {
  (void)json, (void)len;
  assert_int_equal(dbx_wf_start_timer(wf, 150), 1);
  return calloc(1, 1);
}
static void timer_fired(void *st, dbx_wf *wf, int64_t seq) {
  (void)st;
  char buf[64];
  snprintf(buf, sizeof buf, "{\"fired\":%lld}", (long long)seq);
  dbx_wf_complete(wf, buf);
}
static const dbx_workflow_type wf_timer = {"t.Timer", tmr_create, NULL, timer_fired,
                                           NULL, NULL, NULL, free};

/* ------------------------------------------------------------ activities */

static char *arg_of(const char *json, size_t len) {
  cJSON *j = cJSON_ParseWithLength(json, len);
  char *r = j ? cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "arg")) : NULL;
  cJSON_Delete(j);
  return r ? r : dbx_strdup("null");
}

static dbx_err act_echo(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a, (void)ud;
  pthread_mutex_lock(&g_mu);
  g_echo_calls++;
  pthread_mutex_unlock(&g_mu);
  res->result_json = arg_of(in, len);
  return DBX_OK;
}

static dbx_err act_flaky(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)in, (void)len, (void)ud;
  pthread_mutex_lock(&g_mu);
  g_flaky_calls++;
  pthread_mutex_unlock(&g_mu);
  if (dbx_act_attempt(a) < 3) {
    res->failure_type = dbx_strdup("Flaky");
    res->failure_message = dbx_asprintf("attempt %d fails", dbx_act_attempt(a));
    return DBX_OK;
  }
  res->result_json = dbx_asprintf("{\"attempt\":%d}", dbx_act_attempt(a));
  return DBX_OK;
}

static dbx_err act_hb(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)in, (void)len, (void)ud;
  pthread_mutex_lock(&g_mu);
  g_hb_running = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  for (int i = 0; i < 1000; i++) { /* the work: up to 10 s in 10 ms steps */
    char d[32];
    snprintf(d, sizeof d, "{\"step\":%d}", i);
    if (dbx_act_heartbeat(a, d)) {
      pthread_mutex_lock(&g_mu);
      g_hb_end = 2;
      pthread_mutex_unlock(&g_mu);
      return DBX_ECANCELED;
    }
    nap_ms(10);
  }
  pthread_mutex_lock(&g_mu);
  g_hb_end = 1;
  pthread_mutex_unlock(&g_mu);
  res->failure_type = dbx_strdup("NeverCancelled");
  res->failure_message = dbx_strdup("no cancellation arrived");
  return DBX_OK;
}

static dbx_err act_amo(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)a, (void)in, (void)len, (void)ud;
  pthread_mutex_lock(&g_mu);
  g_amo_calls++;
  pthread_mutex_unlock(&g_mu);
  res->result_json = dbx_strdup("{\"ran\":true}");
  return DBX_OK;
}

/* Fails every attempt with the input's {"arg": {"type", "non_retryable"}}. */
static dbx_err act_fail(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)ud;
  pthread_mutex_lock(&g_mu);
  g_fail_calls++;
  pthread_mutex_unlock(&g_mu);
  cJSON *j = cJSON_ParseWithLength(in, len);
  const cJSON *arg = cJSON_GetObjectItem(j, "arg");
  res->failure_type = dbx_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(arg, "type")));
  res->failure_message = dbx_asprintf("attempt %d fails", dbx_act_attempt(a));
  res->non_retryable = cJSON_IsTrue(cJSON_GetObjectItem(arg, "non_retryable"));
  cJSON_Delete(j);
  return DBX_OK;
}

/* Heartbeats every 50 ms for 10 s, then completes; records how it ended. */
static dbx_err act_busy(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  (void)in, (void)len, (void)ud;
  for (int i = 0; i < 200; i++) {
    if (dbx_act_heartbeat(a, "{}")) {
      pthread_mutex_lock(&g_mu);
      g_busy_end = 2;
      pthread_cond_broadcast(&g_cv);
      pthread_mutex_unlock(&g_mu);
      return DBX_ECANCELED;
    }
    nap_ms(50);
  }
  pthread_mutex_lock(&g_mu);
  g_busy_end = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  res->result_json = dbx_strdup("{\"finished\":true}");
  return DBX_OK;
}

static const dbx_activity_type at_fail = {"t.fail", DBX_SAFE_TO_RETRY, act_fail, NULL};
static const dbx_activity_type at_busy = {"t.busy", DBX_SAFE_TO_RETRY, act_busy, NULL};
static const dbx_activity_type at_echo = {"t.echo", DBX_SAFE_TO_RETRY, act_echo, NULL};
static const dbx_activity_type at_flaky = {"t.flaky", DBX_SAFE_TO_RETRY, act_flaky, NULL};
static const dbx_activity_type at_hb = {"t.hb", DBX_SAFE_TO_RETRY, act_hb, NULL};
static const dbx_activity_type at_amo = {"t.amo", DBX_AT_MOST_ONCE, act_amo, NULL};

/* Fake sandbox activities: record (type, input) in call order. */
static dbx_err fake_sandbox(dbx_act *a, const char *in, size_t len, dbx_act_result *res, void *ud) {
  const char *type = ud;
  pthread_mutex_lock(&g_mu);
  if (g_ncalls < 64) {
    snprintf(g_calls[g_ncalls], sizeof g_calls[0], "%s", type);
    g_call_inputs[g_ncalls] = dbx_strndup(in, len);
    g_ncalls++;
  }
  pthread_mutex_unlock(&g_mu);
  cJSON *j = cJSON_ParseWithLength(in, len);
  const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItem(j, "command"));
  const char *url = cJSON_GetStringValue(
      cJSON_GetObjectItem(cJSON_GetObjectItem(j, "source"), "url"));
  int hang_step = strcmp(type, "sandbox.exec") == 0 && cmd && strcmp(cmd, "hang-step") == 0;
  if (hang_step ||
      (strcmp(type, "sandbox.create") == 0 && url && (strstr(url, "hang") || strstr(url, "slow")))) {
    int hang = hang_step || strstr(url, "hang") != NULL, stop = 0;
    pthread_mutex_lock(&g_mu);
    g_create_state = 1;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < 3000 && !stop; i++) { /* at most 60 s */
      int cancelled = dbx_act_heartbeat(a, NULL);
      pthread_mutex_lock(&g_mu);
      stop = hang ? cancelled : g_slow_release;
      pthread_mutex_unlock(&g_mu);
      if (!stop) nap_ms(20);
    }
    pthread_mutex_lock(&g_mu);
    g_create_state = hang && stop ? 2 : 0;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    cJSON_Delete(j);
    if (hang) return DBX_ECANCELED;
    res->result_json = dbx_strdup("{\"sandbox_id\":\"sbx-slow\"}");
    return DBX_OK;
  }
  if (strcmp(type, "sandbox.create") == 0) {
    res->result_json = dbx_strdup("{\"sandbox_id\":\"sbx-42\"}");
  } else if (strcmp(type, "sandbox.exec") == 0 && cmd && strncmp(cmd, "flaky-until-", 12) == 0 &&
             dbx_act_attempt(a) < atoi(cmd + 12)) {
    /* "flaky-until-N": a retryable failure on attempts 1 .. N-1 */
    res->failure_type = dbx_strdup("Flaky");
    res->failure_message = dbx_asprintf("attempt %d fails", dbx_act_attempt(a));
  } else if (strcmp(type, "sandbox.exec") == 0 && cmd && strcmp(cmd, "noisy") == 0) {
    /* 3000 control characters per stream: six bytes each in JSON */
    char *o = malloc(3000 * 6 + 8);
    assert_non_null(o);
    for (int i = 0; i < 3000; i++) memcpy(o + 6 * i, "\\u0001", 6);
    memcpy(o + 3000 * 6, "END", 4);
    res->result_json = dbx_asprintf("{\"exit_code\":0,\"stdout\":\"%s\",\"stderr\":\"%s\","
                                    "\"stdout_bytes\":3003,\"stderr_bytes\":3003,"
                                    "\"timed_out\":false,\"duration_ms\":1}", o, o);
    free(o);
  } else if (strcmp(type, "sandbox.exec") == 0) {
    int code = cmd && strstr(cmd, "false") ? 2 : 0;
    res->result_json = dbx_asprintf(
        "{\"exit_code\":%d,\"stdout\":\"%s\",\"stderr\":\"%s\",\"timed_out\":false,\"duration_ms\":7}",
        code, code ? "" : "built\\n", code ? "boom\\n" : "");
  } else if (strcmp(type, "sandbox.read_file") == 0) {
    res->result_json = dbx_strdup("{\"content_b64\":\"aGk=\",\"duration_ms\":1}");
  } else {
    res->result_json = dbx_strdup("{\"ok\":true}");
  }
  cJSON_Delete(j);
  return DBX_OK;
}

#define FAKE(n) {n, DBX_SAFE_TO_RETRY, fake_sandbox, (void *)n}
static const dbx_activity_type fakes[] = {FAKE("sandbox.create"), FAKE("sandbox.exec"),
                                          FAKE("sandbox.write_file"), FAKE("sandbox.read_file"),
                                          FAKE("sandbox.checkpoint"), FAKE("sandbox.git_commit"),
                                          FAKE("sandbox.delete")};

/* ------------------------------------------------------------ helpers */

static void start_service(int port) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = g_svc_dir;
  o.port = port;
  o.no_sync = 1;
  char *err = NULL;
  dbx_err rc = dbx_service_start(&o, &g_svc, &err);
  if (rc != DBX_OK) fprintf(stderr, "service: %s\n", err ? err : "?");
  free(err);
  assert_int_equal(rc, DBX_OK);
  g_port = dbx_service_port(g_svc);
}

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  g_svc_dir = dbx_test_tmpdir("itw-svc");
  g_wrk_dir = dbx_test_tmpdir("itw-wrk");
  g_wrk_dir2 = dbx_test_tmpdir("itw-wrk2"); /* a second worker's store */
  start_service(0);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
  dbx_worker_opts o = {0};
  o.address = addr;
  o.task_queue = "itq";
  o.db_dir = g_wrk_dir;
  o.no_sync = 1;
  o.activity_slots = 4;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&o, &g_w, &err), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(g_w, &wf_one), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(g_w, &wf_timer), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(g_w, &dbx_script_workflow), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(g_w, &wf_timer), DBX_EEXIST);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_echo), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_flaky), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_hb), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_amo), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_fail), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_busy), DBX_OK);
  for (size_t i = 0; i < sizeof fakes / sizeof fakes[0]; i++)
    assert_int_equal(dbx_worker_register_activity(g_w, &fakes[i]), DBX_OK);
  assert_int_equal(dbx_worker_start(g_w), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(g_w, &at_echo), DBX_ESTATE);
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &g_c), DBX_OK);
  return 0;
}

static int group_teardown(void **st) {
  (void)st;
  dbx_worker_stop(g_w, 1000);
  dbx_worker_destroy(g_w);
  dbx_client_destroy(g_c);
  dbx_service_stop(g_svc);
  for (int i = 0; i < g_ncalls; i++) free(g_call_inputs[i]);
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  dbx_test_rmrf(g_wrk_dir2);
  free(g_svc_dir);
  free(g_wrk_dir);
  free(g_wrk_dir2);
  dbx_rpc_global_shutdown();
  return 0;
}

static char *start_on(const char *tq, const char *wid, const char *type, const char *input) {
  dbx_client_start_opts o = {0};
  o.workflow_id = wid;
  o.workflow_type = type;
  o.task_queue = tq;
  o.input_json = input;
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fprintf(stderr, "start %s: %s\n", wid, err ? err : "?");
  free(err);
  assert_int_equal(rc, DBX_OK);
  assert_non_null(rid);
  return rid;
}

static char *start(const char *wid, const char *type, const char *input) {
  return start_on("itq", wid, type, input);
}

/* Wait (long poll) for the run's close event. Returns the result JSON of a
 * completion, or "FAILED:<type>:<message>" / "CANCELED". */
static char *wait_close(const char *wid, const char *rid) {
  int64_t deadline = dbx_mono_ns() + 90LL * 1000000000LL;
  while (dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.close_event_only = 1;
    ho.timeout_ms = 10000;
    dbx_err rc = dbx_client_get_history(g_c, wid, rid, &ho, &h, NULL);
    if (rc == DBX_OK && h.n > 0) {
      HistoryEvent *e = h.events[h.n - 1];
      char *out = NULL;
      if (e->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
        out = dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result);
      } else if (e->event_type == ET(WORKFLOW_EXECUTION_FAILED)) {
        const Failure *f = e->workflow_execution_failed_event_attributes->failure;
        out = dbx_asprintf("FAILED:%s:%s",
                           f && f->application_failure_info ? f->application_failure_info->type : "",
                           f ? f->message : "");
      } else {
        out = dbx_asprintf("CLOSED:%d", e->event_type);
      }
      dbx_client_history_cleanup(&h);
      return out;
    }
    dbx_client_history_cleanup(&h);
    if (rc != DBX_OK) nap_ms(100); /* service away: retry */
  }
  fail_msg("workflow %s did not close", wid);
  return NULL;
}

/* Wait until history holds an event of type after event id `after`; returns its id. */
static int64_t wait_event(const char *wid, const char *rid, int type, int64_t after) {
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  int64_t found = 0;
  while (!found && dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {0};
    ho.wait_new_event = 1;
    ho.page_token = tok;
    ho.page_token_len = tok_len;
    ho.timeout_ms = 10000;
    dbx_err rc = dbx_client_get_history(g_c, wid, rid, &ho, &h, NULL);
    assert_int_equal(rc, DBX_OK);
    for (size_t i = 0; i < h.n; i++)
      if ((int)h.events[i]->event_type == type && h.events[i]->event_id > after)
        found = h.events[i]->event_id;
    free(tok);
    tok = h.next_page_token;
    tok_len = h.next_page_token_len;
    h.next_page_token = NULL;
    dbx_client_history_cleanup(&h);
  }
  free(tok);
  assert_true(found > 0);
  return found;
}

static cJSON *parse(const char *s) {
  cJSON *j = cJSON_Parse(s);
  if (!j) fail_msg("not JSON: %s", s);
  return j;
}

/* ------------------------------------------------------------ tests */

static void test_worker_activity_success(void **st) {
  (void)st;
  char *rid = start("w-echo", "t.One", "{\"type\":\"t.echo\",\"arg\":{\"x\":\"hello\"}}");
  char *res = wait_close("w-echo", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "x")), "hello");
  assert_int_equal((int)cJSON_GetObjectItem(j, "attempts")->valuedouble, 1);
  assert_int_equal(g_echo_calls, 1);
  cJSON_Delete(j);
  /* the worker recorded the run's history for offline replay, and it replays clean */
  HistoryEvent **evs = NULL;
  size_t n = 0;
  assert_int_equal(dbx_wstore_history_load(dbx_worker_wstore(g_w), "default", "w-echo", rid, &evs, &n, NULL), DBX_OK);
  assert_true(n >= 8);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&wf_one, evs, n, &rep), DBX_OK);
  assert_int_equal(rep.deterministic, 1);
  assert_int_equal(rep.commands_matched, 1); /* the activity; the completion was the last task */
  dbx_wstore_history_free(evs, n);
  free(res);
  free(rid);
}

static void test_worker_retry_then_success(void **st) {
  (void)st;
  char *rid = start("w-flaky", "t.One", "{\"type\":\"t.flaky\"}");
  char *res = wait_close("w-flaky", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "attempt")->valuedouble, 3);
  assert_int_equal((int)cJSON_GetObjectItem(j, "attempts")->valuedouble, 3);
  assert_int_equal(g_flaky_calls, 3);
  cJSON_Delete(j);
  free(res);
  free(rid);
}

static void test_worker_heartbeat_cancel(void **st) {
  (void)st;
  char *rid = start("w-hb", "t.One", "{\"type\":\"t.hb\",\"hb_ms\":1000}");
  pthread_mutex_lock(&g_mu);
  while (!g_hb_running) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  assert_int_equal(dbx_client_signal(g_c, "w-hb", rid, "cancel", NULL, NULL), DBX_OK);
  char *res = wait_close("w-hb", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "canceled");
  cJSON_Delete(j);
  free(res);
  free(rid);
}

static void test_worker_timer(void **st) {
  (void)st;
  char *rid = start("w-timer", "t.Timer", NULL);
  char *res = wait_close("w-timer", rid);
  assert_string_equal(res, "{\"fired\":1}");
  free(res);
  free(rid);
}

static void test_worker_signal_and_query(void **st) {
  (void)st;
  char *rid = start("w-sig", "t.One", "{\"type\":\"t.echo\",\"arg\":1,\"wait_signal\":true}");
  int64_t first = wait_event("w-sig", rid, ET(WORKFLOW_TASK_COMPLETED), 0);
  assert_int_equal(dbx_client_signal(g_c, "w-sig", rid, "poke", "{}", NULL), DBX_OK);
  int64_t sig = wait_event("w-sig", rid, ET(WORKFLOW_EXECUTION_SIGNALED), first);
  wait_event("w-sig", rid, ET(WORKFLOW_TASK_COMPLETED), sig);
  char *q = NULL, *err = NULL;
  dbx_err rc = dbx_client_query(g_c, "w-sig", rid, "state", NULL, &q, &err);
  if (rc != DBX_OK) fprintf(stderr, "query: %s\n", err ? err : "?");
  assert_int_equal(rc, DBX_OK);
  assert_string_equal(q, "{\"signals\":1,\"scheduled\":false}");
  free(q);
  free(err);
  err = NULL;
  assert_int_not_equal(dbx_client_query(g_c, "w-sig", rid, "nope", NULL, &q, &err), DBX_OK);
  assert_non_null(err);
  free(err);
  assert_int_equal(dbx_client_signal(g_c, "w-sig", rid, "go", NULL, NULL), DBX_OK);
  char *res = wait_close("w-sig", rid);
  cJSON *j = parse(res);
  assert_int_equal((int)cJSON_GetObjectItem(j, "result")->valuedouble, 1);
  assert_int_equal((int)cJSON_GetObjectItem(j, "signals")->valuedouble, 1);
  cJSON_Delete(j);
  free(res);
  free(rid);
}

/* The worker store's retention: with a short retention, a closed run's
 * entries leave the store once the service says it has closed (the sweeper
 * asks DescribeWorkflowExecution), an open run's stay however many passes
 * go by, and leave in their turn when it closes. */
static int in_store(dbx_wstore *ws, const char *wid, const char *rid) {
  HistoryEvent **evs = NULL;
  size_t n = 0;
  dbx_err rc = dbx_wstore_history_load(ws, "default", wid, rid, &evs, &n, NULL);
  dbx_wstore_history_free(evs, n);
  assert_true(rc == DBX_OK || rc == DBX_ENOTFOUND);
  return rc == DBX_OK;
}

/* Poll until the run's presence in the worker store is `want` (20 s). */
static void wait_in_store(dbx_wstore *ws, const char *wid, const char *rid, int want) {
  int64_t deadline = dbx_mono_ns() + 20LL * 1000000000LL;
  while (in_store(ws, wid, rid) != want && dbx_mono_ns() < deadline) nap_ms(20);
  if (in_store(ws, wid, rid) != want)
    fail_msg("run %s of %s: %s the worker store after 20 s", rid, wid, want ? "not in" : "still in");
}

/* A worker (not started) on the test service with a 200 ms retention (a
 * pass every 100 ms), its store in dir; ns NULL = "default". */
static dbx_worker *retention_worker(const char *dir, const char *ns, const char *tq) {
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
  dbx_worker_opts o = {0};
  o.address = addr;
  o.namespace_ = ns;
  o.task_queue = tq;
  o.db_dir = dir;
  o.no_sync = 1;
  o.store_retention_ms = 200;
  dbx_worker *w = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, NULL), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_one), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_echo), DBX_OK);
  return w;
}

/* Start n runs of t.One on tq, ids "<prefix>-<i>", and wait until each has
 * closed; rids[i]: their run ids (free each). */
static void run_closed(const char *tq, const char *prefix, int n, char **rids) {
  char wid[64];
  for (int i = 0; i < n; i++) {
    snprintf(wid, sizeof wid, "%s-%d", prefix, i);
    rids[i] = start_on(tq, wid, "t.One", "{\"type\":\"t.echo\",\"arg\":1}");
  }
  for (int i = 0; i < n; i++) {
    snprintf(wid, sizeof wid, "%s-%d", prefix, i);
    free(wait_close(wid, rids[i]));
  }
}

static void test_worker_store_retention_removes_closed_runs(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itw-ret");
  dbx_worker *w = retention_worker(dir, NULL, "itq-ret");
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  dbx_wstore *ws = dbx_worker_wstore(w);

  char *done = start_on("itq-ret", "ret-done", "t.One", "{\"type\":\"t.echo\",\"arg\":7}");
  char *res = wait_close("ret-done", done);
  cJSON *j = parse(res);
  assert_int_equal((int)cJSON_GetObjectItem(j, "result")->valuedouble, 7);
  cJSON_Delete(j);
  free(res);
  char *open = start_on("itq-ret", "ret-open", "t.One", "{\"type\":\"t.echo\",\"arg\":8,\"wait_signal\":true}");
  wait_event("ret-open", open, ET(WORKFLOW_TASK_COMPLETED), 0);
  assert_true(in_store(ws, "ret-open", open)); /* written before the task was answered */

  /* the closed run leaves; every trace of it */
  wait_in_store(ws, "ret-done", done, 0);
  int64_t ms = 0;
  assert_int_equal(dbx_wstore_touched(ws, "default", "ret-done", done, &ms), DBX_ENOTFOUND);
  dbx_worker_stats s0;
  dbx_worker_get_stats(w, &s0);
  assert_int_equal(s0.store_runs_removed, 1);
  /* the open one stays through passes that asked about it (each pass after
   * its retention asks, and it was last written over 200 ms before these) */
  int64_t deadline = dbx_mono_ns() + 20LL * 1000000000LL;
  dbx_worker_stats s1 = s0;
  while (s1.store_sweeps < s0.store_sweeps + 5 && dbx_mono_ns() < deadline) {
    nap_ms(50);
    dbx_worker_get_stats(w, &s1);
  }
  assert_true(s1.store_sweeps >= s0.store_sweeps + 5);
  assert_true(in_store(ws, "ret-open", open));
  assert_int_equal(dbx_wstore_touched(ws, "default", "ret-open", open, &ms), DBX_OK);
  assert_int_equal(s1.store_runs_removed, 1);

  /* 40 runs closing together are due in one pass, asked about by several
   * threads at once: all leave, the open one stays */
  enum { MANY = 40 };
  char *many[MANY], wid[32];
  run_closed("itq-ret", "ret-many", MANY, many);
  for (int i = 0; i < MANY; i++) {
    snprintf(wid, sizeof wid, "ret-many-%d", i);
    wait_in_store(ws, wid, many[i], 0);
    free(many[i]);
  }
  assert_true(in_store(ws, "ret-open", open));
  dbx_worker_get_stats(w, &s1);
  assert_int_equal(s1.store_runs_removed, 1 + MANY);

  /* closed, it leaves too */
  assert_int_equal(dbx_client_signal(g_c, "ret-open", open, "go", NULL, NULL), DBX_OK);
  res = wait_close("ret-open", open);
  j = parse(res);
  assert_int_equal((int)cJSON_GetObjectItem(j, "result")->valuedouble, 8);
  cJSON_Delete(j);
  free(res);
  wait_in_store(ws, "ret-open", open, 0);
  dbx_worker_get_stats(w, &s1);
  assert_int_equal(s1.store_runs_removed, 2 + MANY);
  dbx_worker_destroy(w);
  free(done);
  free(open);
  dbx_test_rmrf(dir);
  free(dir);
}

/* The worker's resident set does not grow with its store: pages of the
 * store read through its map (here by the test, reading back every run's
 * history copy) leave the process's resident set within a second, with no
 * retention set (no sweep pass runs), and the runs stay whole. */
static void test_worker_store_pages_released(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itw-pages");
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
  dbx_worker_opts o = {.address = addr, .task_queue = "itq-pages", .db_dir = dir, .no_sync = 1,
                       .store_retention_ms = -1}; /* keep every run: no sweep pass */
  dbx_worker *w = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, NULL), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_one), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_echo), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  dbx_wstore *ws = dbx_worker_wstore(w);
  enum { RUNS = 30 };
  char *runs[RUNS], wid[32];
  run_closed("itq-pages", "pages", RUNS, runs);
  for (int round = 0; round < 2; round++) { /* read back, then wait for the pages to go */
    for (int i = 0; i < RUNS; i++) {
      snprintf(wid, sizeof wid, "pages-%d", i);
      assert_true(in_store(ws, wid, runs[i])); /* kept whole: no retention */
    }
    int64_t deadline = dbx_mono_ns() + 5LL * 1000000000LL;
    while (dbx_test_store_rss_kib(dir) > 0 && dbx_mono_ns() < deadline) nap_ms(20);
    long kib = dbx_test_store_rss_kib(dir);
    if (kib > 0) fail_msg("%ld KiB of %s/data.mdb still resident 5 s after it was read", kib, dir);
  }
  dbx_worker_stats s;
  dbx_worker_get_stats(w, &s);
  assert_int_equal(s.store_sweeps, 0);
  dbx_worker_destroy(w);
  for (int i = 0; i < RUNS; i++) free(runs[i]);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Only a closed status removes a run: a worker whose namespace the service
 * lacks (every question answered NOT_FOUND) and a run of another namespace
 * keep their entries through many passes, asked again a retention later
 * (touched anew, so they never fill a pass), and nothing is removed. */
static void test_worker_store_retention_keeps_what_the_service_cannot_judge(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itw-ret2");
  dbx_worker *w = retention_worker(dir, "ghost", "itq-ghost"); /* not a namespace of this service */
  dbx_wstore *ws = dbx_worker_wstore(w);
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_id = 1;
  e.event_type = ET(WORKFLOW_EXECUTION_STARTED);
  HistoryEvent *evs[] = {&e};
  assert_int_equal(dbx_wstore_history_put(ws, "ghost", "wf-g", "r-g", evs, 1), DBX_OK);
  assert_int_equal(dbx_wstore_journal_started(ws, "other", "wf-o", "r-o", "1", 1), DBX_OK);
  int64_t t0 = 0, t1 = 0;
  assert_int_equal(dbx_wstore_touched(ws, "ghost", "wf-g", "r-g", &t0), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  /* passes every 100 ms; the runs are due 200 ms after their write, asked,
   * kept and touched anew: wait until the ghost run's touched time moved */
  int64_t deadline = dbx_mono_ns() + 20LL * 1000000000LL;
  while (dbx_mono_ns() < deadline) {
    assert_int_equal(dbx_wstore_touched(ws, "ghost", "wf-g", "r-g", &t1), DBX_OK);
    if (t1 > t0) break;
    nap_ms(20);
  }
  assert_true(t1 > t0);
  dbx_worker_stats s0, s1;
  dbx_worker_get_stats(w, &s0);
  s1 = s0;
  while (s1.store_sweeps < s0.store_sweeps + 5 && dbx_mono_ns() < deadline) {
    nap_ms(50);
    dbx_worker_get_stats(w, &s1);
  }
  assert_true(s1.store_sweeps >= s0.store_sweeps + 5);
  assert_int_equal(s1.store_runs_removed, 0);
  HistoryEvent **got = NULL;
  size_t n = 0;
  assert_int_equal(dbx_wstore_history_load(ws, "ghost", "wf-g", "r-g", &got, &n, NULL), DBX_OK);
  assert_int_equal(n, 1);
  dbx_wstore_history_free(got, n);
  dbx_journal_entry je;
  assert_int_equal(dbx_wstore_journal_get(ws, "other", "wf-o", "r-o", "1", &je), DBX_OK);
  assert_int_equal(je.state, DBX_JOURNAL_STARTED);
  dbx_journal_entry_cleanup(&je);
  assert_int_equal(dbx_wstore_touched(ws, "other", "wf-o", "r-o", &t1), DBX_OK);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

/* The Script's result is one payload too: when the steps' excerpts would
 * take it past 1.75 MiB, the earliest steps' excerpts are dropped (marked),
 * the latest kept, every step still listed. */
static void test_worker_script_summary_fits_payload(void **st) {
  (void)st;
  enum { N = 100 };
  size_t cap = 64 + N * 64;
  char *input = malloc(cap), *p = input;
  p += sprintf(p, "{\"steps\":[");
  for (int i = 0; i < N; i++)
    p += sprintf(p, "%s{\"name\":\"n%d\",\"kind\":\"exec\",\"command\":\"noisy\"}", i ? "," : "", i);
  sprintf(p, "]}");
  char *rid = start("w-script-fit", "durabox.Script", input);
  char *res = wait_close("w-script-fit", rid);
  assert_true(strncmp(res, "FAILED", 6) != 0);
  assert_true(strlen(res) <= (size_t)1792 * 1024);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *steps = cJSON_GetObjectItem(j, "steps");
  assert_int_equal(cJSON_GetArraySize(steps), N);
  cJSON *first = cJSON_GetArrayItem(steps, 0), *last = cJSON_GetArrayItem(steps, N - 1);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(first, "output_dropped")));
  assert_null(cJSON_GetObjectItem(first, "stdout"));
  assert_int_equal((int)cJSON_GetObjectItem(first, "stdout_bytes")->valuedouble, 3003);
  assert_null(cJSON_GetObjectItem(last, "output_dropped"));
  const char *out = cJSON_GetStringValue(cJSON_GetObjectItem(last, "stdout"));
  assert_non_null(out);
  assert_string_equal(out + strlen(out) - 3, "END");
  assert_non_null(strstr(out, " bytes cut \xe2\x80\xa6]\n"));
  cJSON_Delete(j);
  free(res);
  free(rid);
  free(input);
}

static void test_worker_script_with_fake_sandbox(void **st) {
  (void)st;
  pthread_mutex_lock(&g_mu);
  int base = g_ncalls;
  pthread_mutex_unlock(&g_mu);
  const char *input =
      "{\"sandbox\":{\"source\":{\"kind\":\"git\",\"url\":\"https://example.invalid/r.git\"},"
      "\"env\":{\"A\":\"1\"},\"network\":\"none\"},\"steps\":["
      "{\"name\":\"write\",\"kind\":\"write_file\",\"path\":\"a.txt\",\"content\":\"hi\"},"
      "{\"name\":\"build\",\"kind\":\"exec\",\"command\":\"make\",\"timeout_s\":30},"
      "{\"name\":\"nap\",\"kind\":\"sleep\",\"seconds\":0.1},"
      "{\"name\":\"read\",\"kind\":\"read_file\",\"path\":\"a.txt\"},"
      "{\"name\":\"lint\",\"kind\":\"exec\",\"command\":\"false\",\"continue_on_failure\":true},"
      "{\"name\":\"snap\",\"kind\":\"checkpoint\",\"retry_class\":\"at_most_once\"}]}";
  char *rid = start("w-script", "durabox.Script", input);
  char *res = wait_close("w-script", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "sandbox_id")), "sbx-42");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "failed_step")));
  cJSON *steps = cJSON_GetObjectItem(j, "steps");
  assert_int_equal(cJSON_GetArraySize(steps), 6);
  cJSON *build = cJSON_GetArrayItem(steps, 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(build, "name")), "build");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(build, "ok")));
  assert_int_equal((int)cJSON_GetObjectItem(build, "exit_code")->valuedouble, 0);
  assert_int_equal((int)cJSON_GetObjectItem(build, "duration_ms")->valuedouble, 7);
  assert_int_equal((int)cJSON_GetObjectItem(build, "attempts")->valuedouble, 1);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(build, "output_excerpt")), "built\n");
  cJSON *nap = cJSON_GetArrayItem(steps, 2);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(nap, "kind")), "sleep");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(nap, "ok")));
  cJSON *lint = cJSON_GetArrayItem(steps, 4);
  assert_true(cJSON_IsFalse(cJSON_GetObjectItem(lint, "ok")));
  assert_int_equal((int)cJSON_GetObjectItem(lint, "exit_code")->valuedouble, 2);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(lint, "output_excerpt")), "boom\n");
  cJSON_Delete(j);
  free(res);
  free(rid);

  static const char *want[] = {"sandbox.create", "sandbox.write_file", "sandbox.exec",
                               "sandbox.read_file", "sandbox.exec", "sandbox.checkpoint",
                               "sandbox.delete"};
  pthread_mutex_lock(&g_mu);
  assert_int_equal(g_ncalls - base, 7);
  for (int i = 0; i < 7; i++) assert_string_equal(g_calls[base + i], want[i]);
  cJSON *ci = parse(g_call_inputs[base]);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(ci, "resource")), "workspace");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ci, "source"), "url")),
                      "https://example.invalid/r.git");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(ci, "env"), "A")), "1");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(ci, "network")), "none");
  assert_null(cJSON_GetObjectItem(ci, "host_fs")); /* not given: the driver's default */
  cJSON_Delete(ci);
  cJSON *ei = parse(g_call_inputs[base + 2]);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(ei, "sandbox_id")), "sbx-42");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(ei, "command")), "make");
  assert_null(cJSON_GetObjectItem(ei, "name"));
  cJSON_Delete(ei);
  cJSON *di = parse(g_call_inputs[base + 6]);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(di, "sandbox_id")), "sbx-42");
  cJSON_Delete(di);
  base = g_ncalls;
  pthread_mutex_unlock(&g_mu);

  /* a failing step stops the script; the sandbox is still deleted */
  rid = start("w-script-fail", "durabox.Script",
              "{\"steps\":[{\"name\":\"t\",\"kind\":\"exec\",\"command\":\"false\"},"
              "{\"name\":\"never\",\"kind\":\"exec\",\"command\":\"make\"}]}");
  res = wait_close("w-script-fail", rid);
  j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failed_step")), "t");
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "steps")), 1);
  cJSON_Delete(j);
  free(res);
  free(rid);
  pthread_mutex_lock(&g_mu);
  assert_int_equal(g_ncalls - base, 3);
  assert_string_equal(g_calls[base + 2], "sandbox.delete");
  pthread_mutex_unlock(&g_mu);

  /* bad input fails the run with InvalidInput naming the problem */
  rid = start("w-script-bad", "durabox.Script", "{\"steps\":[{\"name\":\"x\",\"kind\":\"teleport\"}]}");
  res = wait_close("w-script-bad", rid);
  assert_string_equal(res, "FAILED:InvalidInput:step 'x': unknown kind 'teleport'");
  free(res);
  free(rid);
}

/* The last event of this type in h, or NULL. */
static const HistoryEvent *last_event(const dbx_client_history *h, int type) {
  for (size_t k = h->n; k > 0; k--)
    if ((int)h->events[k - 1]->event_type == type) return h->events[k - 1];
  return NULL;
}

/* A duration in ms, -1 when absent. */
static int64_t ms_of(const Duration *d) { return d ? dbx_pb_duration_ms(d) : -1; }

/* The ActivityTaskScheduled event of activity id `aid` asked for this retry
 * policy, schedule-to-close and heartbeat timeout (ms; -1 = absent). */
static void assert_scheduled_policy(const char *wid, const char *rid, const char *aid, int32_t max,
                                    int64_t initial_ms, int64_t max_interval_ms, int64_t s2c_ms,
                                    int64_t hb_ms) {
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, wid, rid, NULL, &h, NULL), DBX_OK);
  const ActivityTaskScheduledEventAttributes *a = NULL;
  for (size_t i = 0; i < h.n && !a; i++)
    if (h.events[i]->event_type == ET(ACTIVITY_TASK_SCHEDULED) &&
        strcmp(h.events[i]->activity_task_scheduled_event_attributes->activity_id, aid) == 0)
      a = h.events[i]->activity_task_scheduled_event_attributes;
  assert_non_null(a);
  assert_non_null(a->retry_policy);
  assert_int_equal(a->retry_policy->maximum_attempts, max);
  assert_int_equal(ms_of(a->retry_policy->initial_interval), initial_ms);
  assert_int_equal(ms_of(a->retry_policy->maximum_interval), max_interval_ms);
  assert_int_equal(ms_of(a->schedule_to_close_timeout), s2c_ms);
  assert_int_equal(ms_of(a->heartbeat_timeout), hb_ms);
  dbx_client_history_cleanup(&h);
}

static int step_attempts(const cJSON *out, int i) {
  const cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(out, "steps"), i);
  return st ? (int)cJSON_GetObjectItem(st, "attempts")->valuedouble : -1;
}

static void test_worker_script_retry_policy(void **st) {
  (void)st;
  /* The input's retry policy (unlimited attempts, bounded by time) carries a
   * step past the default 5 attempts; a step's own policy overrides it field
   * by field and ends the run when its 2 attempts are used up. */
  const char *input =
      "{\"retry\":{\"maximum_attempts\":0,\"initial_interval_s\":0.05,\"maximum_interval_s\":0.1},"
      "\"schedule_to_close_s\":60,\"sandbox\":{\"heartbeat_timeout_s\":5},\"steps\":["
      "{\"name\":\"eight\",\"kind\":\"exec\",\"command\":\"flaky-until-8\"},"
      "{\"name\":\"two\",\"kind\":\"exec\",\"command\":\"flaky-until-3\","
      "\"retry\":{\"maximum_attempts\":2},\"schedule_to_close_s\":30}]}";
  char *rid = start("w-script-retry", "durabox.Script", input);
  char *res = wait_close("w-script-retry", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failed_step")), "two");
  assert_int_equal(step_attempts(j, 0), 8);
  assert_int_equal(step_attempts(j, 1), 2);
  cJSON_Delete(j);
  free(res);
  /* what the service was asked for, as a Temporal server would see it:
   * 1 create (heartbeats while it copies or clones), 2 eight, 3 two, 4 delete */
  assert_scheduled_policy("w-script-retry", rid, "1", 0, 50, 100, 60000, 5000);
  assert_scheduled_policy("w-script-retry", rid, "2", 0, 50, 100, 60000, 30000);
  assert_scheduled_policy("w-script-retry", rid, "3", 2, 50, 100, 30000, 30000);
  assert_scheduled_policy("w-script-retry", rid, "4", 0, 50, 100, 60000, 0);
  free(rid);

  /* without a policy: 5 attempts, 1 s initial interval (the service fills in
   * the maximum interval, 100 x initial, as Temporal's does), schedule-to-close 0 (none) */
  rid = start("w-script-retry-def", "durabox.Script",
              "{\"steps\":[{\"name\":\"a\",\"kind\":\"exec\",\"command\":\"make\"}]}");
  free(wait_close("w-script-retry-def", rid));
  assert_scheduled_policy("w-script-retry-def", rid, "1", 5, 1000, 100000, 0, 30000);
  assert_scheduled_policy("w-script-retry-def", rid, "2", 5, 1000, 100000, 0, 30000);
  free(rid);

  static const struct {
    const char *input, *want;
  } bad[] = {
      {"{\"retry\":{\"maximum_attempts\":-1},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_attempts must be a whole number >= 0 (0 = unlimited)"},
      {"{\"retry\":{\"maximum_attempts\":2.5},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_attempts must be a whole number >= 0 (0 = unlimited)"},
      {"{\"retry\":{\"backoff_coefficient\":0.5},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.backoff_coefficient must be a finite number >= 1"},
      {"{\"retry\":{\"backoff_coefficient\":1e999},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.backoff_coefficient must be a finite number >= 1"},
      {"{\"retry\":{\"attempts\":3},\"steps\":[]}",
       "FAILED:InvalidInput:input: unknown field retry.attempts (maximum_attempts, initial_interval_s, "
       "backoff_coefficient, maximum_interval_s)"},
      {"{\"retry\":{\"initial_interval_s\":5,\"maximum_interval_s\":1},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_interval_s (1 s) is below the initial interval (5 s)"},
      /* below the default initial interval, and across input and step */
      {"{\"retry\":{\"maximum_interval_s\":0.5},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_interval_s (0.5 s) is below the initial interval (1 s)"},
      {"{\"retry\":{\"initial_interval_s\":10},\"steps\":[{\"name\":\"x\",\"kind\":\"exec\","
       "\"command\":\"c\",\"retry\":{\"maximum_interval_s\":2}}]}",
       "FAILED:InvalidInput:step 'x': retry.maximum_interval_s (2 s) is below the initial interval (10 s)"},
      /* misspelt or misplaced fields are named, not ignored */
      {"{\"retyr\":{},\"steps\":[]}",
       "FAILED:InvalidInput:input: unknown field \"retyr\" (sandbox, steps, retry, schedule_to_close_s)"},
      {"{\"sandbox\":{\"retry\":{\"maximum_attempts\":-4}},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox: unknown field \"retry\" (source, env, keep, timeout_s, "
       "heartbeat_timeout_s, network, host_fs)"},
      {"{\"sandbox\":{\"network\":\"lan\"},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.network must be \"host\" or \"none\""},
      {"{\"sandbox\":{\"host_fs\":true},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.host_fs must be \"host\" or \"system\""},
      {"{\"sandbox\":{\"source\":{\"kind\":\"git\",\"url\":\"u\",\"branch\":\"b\"}},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.source: unknown field \"branch\" (kind, path, url, ref)"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"timeout\":5}]}",
       "FAILED:InvalidInput:step 'x' (exec): unknown field \"timeout\""},
      {"{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"p\",\"content\":\"c\","
       "\"heartbeat_timeout_s\":5}]}",
       "FAILED:InvalidInput:step 'w' (write_file): unknown field \"heartbeat_timeout_s\""},
      {"{\"steps\":[{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":1,\"retry\":{}}]}",
       "FAILED:InvalidInput:step 'z' (sleep): unknown field \"retry\""},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"comand\":\"c\"}]}",
       "FAILED:InvalidInput:step 'x' (exec): unknown field \"comand\""},
      {"{\"steps\":[],\"steps\":5}", "FAILED:InvalidInput:input: field \"steps\" given twice"},
      /* values of the fields, as far as they can be told before the run */
      {"{\"sandbox\":{\"keep\":\"yes\"},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.keep must be true or false"},
      {"{\"sandbox\":{\"env\":\"X\"},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.env must map variable names to strings"},
      {"{\"sandbox\":{\"source\":{\"kind\":\"empty\",\"ref\":\"x\"}},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.source of kind empty takes no \"ref\""},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"continue_on_failure\":1}]}",
       "FAILED:InvalidInput:step 'x': continue_on_failure must be true or false"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"env\":\"A=1\"}]}",
       "FAILED:InvalidInput:step 'x' (exec): env must map variable names to strings or "
       "{\"secret\": NAME}"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"cwd\":5}]}",
       "FAILED:InvalidInput:step 'x' (exec): cwd must be a string"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"max_output_bytes\":-1}]}",
       "FAILED:InvalidInput:step 'x' (exec): max_output_bytes must be a whole number >= 1"},
      {"{\"steps\":[{\"name\":\"w\",\"kind\":\"write_file\",\"path\":\"p\",\"content\":\"c\","
       "\"content_b64\":\"Yw==\"}]}",
       "FAILED:InvalidInput:step 'w' (write_file): give content or content_b64, not both"},
      {"{\"steps\":[{\"name\":\"g\",\"kind\":\"git_commit\",\"message\":\"\"}]}",
       "FAILED:InvalidInput:step 'g' (git_commit): missing \"message\""},
      {"{\"steps\":[{\"name\":\"g\",\"kind\":\"git_commit\",\"message\":\"m\",\"author\":5}]}",
       "FAILED:InvalidInput:step 'g' (git_commit): author must be a string"},
      {"{\"schedule_to_close_s\":0,\"steps\":[]}",
       "FAILED:InvalidInput:input: schedule_to_close_s must be a number of seconds >= 0.001 "
       "(at most 10 years)"},
      {"{\"retry\":{\"initial_interval_s\":0.0004},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.initial_interval_s must be a number of seconds >= 0.001 "
       "(at most 10 years)"},
      {"{\"retry\":{\"maximum_attempts\":1e12},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_attempts must be a whole number >= 0 (0 = unlimited)"},
      {"{\"retry\":{\"maximum_interval_s\":1e300},\"steps\":[]}",
       "FAILED:InvalidInput:input: retry.maximum_interval_s must be a number of seconds >= 0.001 "
       "(at most 10 years)"},
      {"{\"steps\":[{\"name\":\"z\",\"kind\":\"sleep\",\"seconds\":1e300}]}",
       "FAILED:InvalidInput:step 'z' (sleep): seconds must be >= 0 (at most 10 years)"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"timeout_s\":1e300}]}",
       "FAILED:InvalidInput:step 'x': timeout_s must be a positive number of seconds (at most 10 years)"},
      {"{\"sandbox\":{\"heartbeat_timeout_s\":0.5},\"steps\":[]}",
       "FAILED:InvalidInput:sandbox.heartbeat_timeout_s must be a number of seconds >= 1 (at most 10 years)"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"heartbeat_timeout_s\":\"9\"}]}",
       "FAILED:InvalidInput:step 'x': heartbeat_timeout_s must be a number of seconds >= 1 "
       "(at most 10 years)"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\",\"retry\":7}]}",
       "FAILED:InvalidInput:step 'x': \"retry\" must be an object"},
      {"{\"steps\":[{\"name\":\"x\",\"kind\":\"exec\",\"command\":\"c\","
       "\"retry_class\":\"at_most_once\",\"retry\":{\"maximum_attempts\":3}}]}",
       "FAILED:InvalidInput:step 'x': an at_most_once step has exactly one attempt; it takes no \"retry\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char wid[32];
    snprintf(wid, sizeof wid, "w-script-retry-bad%zu", i);
    rid = start(wid, "durabox.Script", bad[i].input);
    res = wait_close(wid, rid);
    assert_string_equal(res, bad[i].want);
    free(res);
    free(rid);
  }
}

static void wait_create_running(void) {
  pthread_mutex_lock(&g_mu);
  while (g_create_state != 1) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
}

static int calls_of(const char *type, int from) {
  int n = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = from; i < g_ncalls; i++) n += strcmp(g_calls[i], type) == 0;
  pthread_mutex_unlock(&g_mu);
  return n;
}

static void test_worker_script_cancel_during_create_or_step(void **st) {
  (void)st;
  /* 1. A create that honours cancellation: the run asks it to stop, it
   * stops, and the run ends as canceled with nothing to delete. The 1 s
   * heartbeat timeout makes the worker ask the service every 0.8 s. */
  pthread_mutex_lock(&g_mu);
  int base = g_ncalls;
  pthread_mutex_unlock(&g_mu);
  char *rid = start("w-cancel-create", "durabox.Script",
                    "{\"sandbox\":{\"source\":{\"kind\":\"git\",\"url\":\"https://hang.invalid/r\"},"
                    "\"heartbeat_timeout_s\":1},\"steps\":[{\"name\":\"s\",\"kind\":\"exec\","
                    "\"command\":\"make\"}]}");
  wait_create_running();
  assert_int_equal(dbx_client_cancel(g_c, "w-cancel-create", rid, "test", NULL), DBX_OK);
  char *res = wait_close("w-cancel-create", rid);
  char want[32];
  snprintf(want, sizeof want, "CLOSED:%d", ET(WORKFLOW_EXECUTION_CANCELED));
  assert_string_equal(res, want);
  free(res);
  pthread_mutex_lock(&g_mu);
  assert_int_equal(g_create_state, 2); /* it stopped because it was asked to */
  g_create_state = 0;
  pthread_mutex_unlock(&g_mu);
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, "w-cancel-create", rid, NULL, &h, NULL), DBX_OK);
  assert_non_null(last_event(&h, ET(ACTIVITY_TASK_CANCEL_REQUESTED)));
  assert_non_null(last_event(&h, ET(ACTIVITY_TASK_CANCELED)));
  dbx_client_history_cleanup(&h);
  assert_int_equal(calls_of("sandbox.exec", base), 0);
  assert_int_equal(calls_of("sandbox.delete", base), 0);
  free(rid);

  /* 2. A create that finishes anyway after the cancel request: the sandbox it
   * made is deleted before the run ends as canceled. */
  pthread_mutex_lock(&g_mu);
  base = g_ncalls;
  g_slow_release = 0;
  pthread_mutex_unlock(&g_mu);
  rid = start("w-cancel-slow", "durabox.Script",
              "{\"sandbox\":{\"source\":{\"kind\":\"git\",\"url\":\"https://slow.invalid/r\"},"
              "\"heartbeat_timeout_s\":1},\"steps\":[{\"name\":\"s\",\"kind\":\"exec\","
              "\"command\":\"make\"}]}");
  wait_create_running();
  assert_int_equal(dbx_client_cancel(g_c, "w-cancel-slow", rid, "test", NULL), DBX_OK);
  wait_event("w-cancel-slow", rid, ET(ACTIVITY_TASK_CANCEL_REQUESTED), 0);
  pthread_mutex_lock(&g_mu);
  g_slow_release = 1;
  pthread_mutex_unlock(&g_mu);
  res = wait_close("w-cancel-slow", rid);
  assert_string_equal(res, want);
  free(res);
  assert_int_equal(calls_of("sandbox.exec", base), 0);
  assert_int_equal(calls_of("sandbox.delete", base), 1);
  pthread_mutex_lock(&g_mu);
  cJSON *di = NULL;
  for (int i = base; i < g_ncalls; i++)
    if (strcmp(g_calls[i], "sandbox.delete") == 0) di = parse(g_call_inputs[i]);
  pthread_mutex_unlock(&g_mu);
  assert_non_null(di);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(di, "sandbox_id")), "sbx-slow");
  cJSON_Delete(di);
  free(rid);

  /* 3. During a step, with keep: the step's activity is asked to stop (an
   * exec kills its command) and the run ends as canceled. */
  rid = start("w-cancel-step", "durabox.Script",
              "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"s\",\"kind\":\"exec\","
              "\"command\":\"hang-step\",\"heartbeat_timeout_s\":1}]}");
  wait_create_running();
  assert_int_equal(dbx_client_cancel(g_c, "w-cancel-step", rid, "test", NULL), DBX_OK);
  res = wait_close("w-cancel-step", rid);
  assert_string_equal(res, want);
  free(res);
  assert_int_equal(dbx_client_get_history(g_c, "w-cancel-step", rid, NULL, &h, NULL), DBX_OK);
  const HistoryEvent *cr = last_event(&h, ET(ACTIVITY_TASK_CANCEL_REQUESTED));
  assert_non_null(cr);
  /* the cancelled activity is the exec step */
  const HistoryEvent *sched = NULL;
  for (size_t k = 0; k < h.n; k++)
    if (h.events[k]->event_id == cr->activity_task_cancel_requested_event_attributes->scheduled_event_id)
      sched = h.events[k];
  assert_non_null(sched);
  assert_string_equal(sched->activity_task_scheduled_event_attributes->activity_type->name,
                      "sandbox.exec");
  dbx_client_history_cleanup(&h);
  pthread_mutex_lock(&g_mu);
  while (g_create_state == 1) pthread_cond_wait(&g_cv, &g_mu);
  assert_int_equal(g_create_state, 2); /* the step's code stopped on the cancellation */
  g_create_state = 0;
  pthread_mutex_unlock(&g_mu);
  free(rid);
}

static void test_worker_at_most_once_redelivery(void **st) {
  (void)st;
  /* The run waits for "go"; meanwhile its activity 1 is journaled as started,
   * as if a worker died inside it. Delivered, it must not run. */
  char *rid = start("w-amo", "t.One", "{\"type\":\"t.amo\",\"amo\":true,\"wait_signal\":true}");
  assert_int_equal(dbx_wstore_journal_started(dbx_worker_wstore(g_w), "default", "w-amo", rid, "1", 1), DBX_OK);
  assert_int_equal(dbx_client_signal(g_c, "w-amo", rid, "go", NULL, NULL), DBX_OK);
  char *res = wait_close("w-amo", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failure_type")), "OutcomeUnknown");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "non_retryable")));
  assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failure_message")),
                         "may already have happened"));
  cJSON_Delete(j);
  free(res);
  free(rid);
  /* A journaled result is reported instead of running again. */
  rid = start("w-amo2", "t.One", "{\"type\":\"t.amo\",\"amo\":true,\"wait_signal\":true}");
  dbx_act_result r = {.result_json = "{\"ran\":\"before\"}"};
  assert_int_equal(dbx_wstore_journal_result(dbx_worker_wstore(g_w), "default", "w-amo2", rid, "1", 1, &r), DBX_OK);
  assert_int_equal(dbx_client_signal(g_c, "w-amo2", rid, "go", NULL, NULL), DBX_OK);
  res = wait_close("w-amo2", rid);
  j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "result"), "ran")), "before");
  cJSON_Delete(j);
  free(res);
  free(rid);
  assert_int_equal(g_amo_calls, 0);
  /* A workflow may schedule a type that is safe_to_retry by default as
   * at_most_once (a Script exec step): the class travels in the task header,
   * so a started journal entry still stops it. */
  pthread_mutex_lock(&g_mu);
  int echo_before = g_echo_calls;
  pthread_mutex_unlock(&g_mu);
  rid = start("w-amo3", "t.One", "{\"type\":\"t.echo\",\"amo\":true,\"wait_signal\":true}");
  assert_int_equal(dbx_wstore_journal_started(dbx_worker_wstore(g_w), "default", "w-amo3", rid, "1", 1), DBX_OK);
  assert_int_equal(dbx_client_signal(g_c, "w-amo3", rid, "go", NULL, NULL), DBX_OK);
  res = wait_close("w-amo3", rid);
  j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failure_type")), "OutcomeUnknown");
  cJSON_Delete(j);
  free(res);
  free(rid);
  pthread_mutex_lock(&g_mu);
  assert_int_equal(g_echo_calls, echo_before);
  pthread_mutex_unlock(&g_mu);
}

static void test_worker_non_retryable_failures(void **st) {
  (void)st;
  /* A failure is non-retryable by its flag, by its type in the policy's
   * non_retryable_error_types, or both: one attempt, and the workflow sees it
   * at once. With neither, the policy's 5 attempts are all used. */
  static const struct {
    const char *input;
    int attempts, non_retryable;
  } cases[] = {
      {"{\"type\":\"t.fail\",\"arg\":{\"type\":\"Bad\",\"non_retryable\":true}}", 1, 1},
      {"{\"type\":\"t.fail\",\"arg\":{\"type\":\"Bad\"},\"nr_types\":[\"Other\",\"Bad\"]}", 1, 0},
      {"{\"type\":\"t.fail\",\"arg\":{\"type\":\"Bad\",\"non_retryable\":true},\"nr_types\":[\"Bad\"]}",
       1, 1},
      {"{\"type\":\"t.fail\",\"arg\":{\"type\":\"Bad\"},\"nr_types\":[\"Other\"]}", 5, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char wid[32];
    snprintf(wid, sizeof wid, "w-nonretry-%zu", i);
    pthread_mutex_lock(&g_mu);
    int before = g_fail_calls;
    pthread_mutex_unlock(&g_mu);
    char *rid = start(wid, "t.One", cases[i].input);
    char *res = wait_close(wid, rid);
    cJSON *j = parse(res);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "failed");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failure_type")), "Bad");
    assert_int_equal((int)cJSON_GetObjectItem(j, "attempts")->valuedouble, cases[i].attempts);
    /* the failure's own flag travels as it was sent */
    assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItem(j, "non_retryable")), cases[i].non_retryable);
    pthread_mutex_lock(&g_mu);
    assert_int_equal(g_fail_calls - before, cases[i].attempts);
    pthread_mutex_unlock(&g_mu);
    /* the service's verdict, as Temporal's: the retry state of the close */
    dbx_client_history h = {0};
    assert_int_equal(dbx_client_get_history(g_c, wid, rid, NULL, &h, NULL), DBX_OK);
    const HistoryEvent *fe = last_event(&h, ET(ACTIVITY_TASK_FAILED));
    assert_non_null(fe);
    assert_int_equal(fe->activity_task_failed_event_attributes->retry_state, cases[i].attempts == 1 ? RS(NON_RETRYABLE_FAILURE)
                                                             : RS(MAXIMUM_ATTEMPTS_REACHED));
    dbx_client_history_cleanup(&h);
    cJSON_Delete(j);
    free(res);
    free(rid);
  }
}

static void test_worker_heartbeats_do_not_extend_start_to_close(void **st) {
  (void)st;
  /* t.busy heartbeats every 50 ms (heartbeat timeout 500 ms) and would finish
   * after 10 s; its start-to-close of 1 s still ends it: the attempt times
   * out as StartToClose and the worker cancels the running code. */
  char *rid = start("w-busy", "t.One",
                    "{\"type\":\"t.busy\",\"hb_ms\":500,\"start_to_close_ms\":1000,"
                    "\"maximum_attempts\":1}");
  char *res = wait_close("w-busy", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "timed_out");
  cJSON_Delete(j);
  free(res);
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, "w-busy", rid, NULL, &h, NULL), DBX_OK);
  const HistoryEvent *te = last_event(&h, ET(ACTIVITY_TASK_TIMED_OUT));
  assert_non_null(te);
  const ActivityTaskTimedOutEventAttributes *ta = te->activity_task_timed_out_event_attributes;
  assert_non_null(ta->failure);
  assert_int_equal(ta->failure->failure_info_case, FI(TIMEOUT_FAILURE_INFO));
  assert_int_equal(ta->failure->timeout_failure_info->timeout_type, TT(START_TO_CLOSE));
  dbx_client_history_cleanup(&h);
  free(rid);
  /* the code itself was cancelled, not left running to its end */
  pthread_mutex_lock(&g_mu);
  while (g_busy_end == 0) pthread_cond_wait(&g_cv, &g_mu);
  assert_int_equal(g_busy_end, 2);
  pthread_mutex_unlock(&g_mu);
}

static void test_worker_stop_reaches_throttled_heartbeats(void **st) {
  (void)st;
  /* An activity with a long heartbeat timeout (60 s asked, held to the 20 s
   * start-to-close by the service) sends a heartbeat only every 16 s. When a
   * stopping worker cancels it after its grace period, the activity must
   * learn it at its next heartbeat call, not at the next send: t.hb returns
   * on the cancellation instead of running out its 10 s. */
  dbx_worker_opts o = {0};
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
  o.address = addr;
  o.task_queue = "itq-stop";
  o.db_dir = g_wrk_dir2;
  o.no_sync = 1;
  dbx_worker *w = NULL;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, &err), DBX_OK);
  assert_int_equal(dbx_worker_register_workflow(w, &wf_one), DBX_OK);
  assert_int_equal(dbx_worker_register_activity(w, &at_hb), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);
  pthread_mutex_lock(&g_mu);
  g_hb_running = 0;
  g_hb_end = 0;
  pthread_mutex_unlock(&g_mu);
  dbx_client_start_opts so = {.workflow_id = "w-stop", .workflow_type = "t.One",
                              .task_queue = "itq-stop",
                              .input_json = "{\"type\":\"t.hb\",\"hb_ms\":60000}"};
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(g_c, &so, &rid, &err), DBX_OK);
  pthread_mutex_lock(&g_mu);
  while (!g_hb_running) pthread_cond_wait(&g_cv, &g_mu);
  pthread_mutex_unlock(&g_mu);
  dbx_worker_stop(w, 200);
  pthread_mutex_lock(&g_mu);
  assert_int_equal(g_hb_end, 2); /* returned on the cancellation, not after 10 s */
  pthread_mutex_unlock(&g_mu);
  dbx_worker_destroy(w);
  assert_int_equal(dbx_client_terminate(g_c, "w-stop", rid, "test over", NULL, NULL), DBX_OK);
  free(rid);
}

static void test_worker_unknown_activity_type_is_retryable(void **st) {
  (void)st;
  /* t.nope is not registered: the failure is retryable, so the service retries
   * until maximum_attempts (5) and records the type. */
  char *rid = start("w-nope", "t.One", "{\"type\":\"t.nope\"}");
  char *res = wait_close("w-nope", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "failure_type")), "ActivityTypeNotRegistered");
  assert_true(cJSON_IsFalse(cJSON_GetObjectItem(j, "non_retryable")));
  assert_int_equal((int)cJSON_GetObjectItem(j, "attempts")->valuedouble, 5);
  cJSON_Delete(j);
  free(res);
  free(rid);
}

static void test_worker_survives_service_restart(void **st) {
  (void)st;
  char *rid = start("w-restart", "t.One", "{\"type\":\"t.echo\",\"arg\":\"after\",\"wait_signal\":true}");
  wait_event("w-restart", rid, ET(WORKFLOW_TASK_COMPLETED), 0);
  dbx_worker_stats before;
  dbx_worker_get_stats(g_w, &before);
  int port = g_port;
  dbx_service_stop(g_svc);
  g_svc = NULL;
  /* Let the pollers fail against the absent service (they back off, no crash). */
  for (int i = 0; i < 100; i++) {
    dbx_worker_stats now;
    dbx_worker_get_stats(g_w, &now);
    if (now.poll_errors >= before.poll_errors + 2) break;
    nap_ms(50);
  }
  start_service(port);
  assert_int_equal(g_port, port);
  dbx_err rc = DBX_ERPC;
  for (int i = 0; i < 100 && rc != DBX_OK; i++) {
    rc = dbx_client_signal(g_c, "w-restart", rid, "go", NULL, NULL);
    if (rc != DBX_OK) nap_ms(100); /* the test's own channel reconnecting */
  }
  assert_int_equal(rc, DBX_OK);
  char *res = wait_close("w-restart", rid);
  cJSON *j = parse(res);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "result")), "after");
  cJSON_Delete(j);
  dbx_worker_stats after;
  dbx_worker_get_stats(g_w, &after);
  assert_true(after.poll_errors > before.poll_errors);
  free(res);
  free(rid);
}

/* A count past its limit is refused by name, before any thread or store:
 * started, 2^31 - 1 pollers ran the host out of tasks (and their sum
 * overflowed int). */
static void test_worker_counts_over_limit_refused(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itw-limits");
  static const char *const names[] = {"workflow_pollers", "activity_pollers", "sticky_pollers",
                                      "activity_threads", "activity_slots",
                                      "workflow_task_threads"};
  for (int i = 0; i < 6; i++) {
    dbx_worker_opts o = {0};
    o.address = "127.0.0.1:1";
    o.task_queue = "tq-limits";
    o.db_dir = dir;
    int big = i == 4 ? 100001 : 1025;
    o.workflow_pollers = i == 0 ? big : 0;
    o.activity_pollers = i == 1 ? big : 0;
    o.sticky_pollers = i == 2 ? big : 0;
    o.activity_threads = i == 3 ? big : 0;
    o.activity_slots = i == 4 ? big : 0;
    o.workflow_task_threads = i == 5 ? big : 0;
    dbx_worker *w = (dbx_worker *)&o; /* must come back NULL */
    char *err = NULL;
    assert_int_equal(dbx_worker_create(&o, &w, &err), DBX_EINVAL);
    assert_null(w);
    char want[96];
    snprintf(want, sizeof want, "worker: %s %d is over the limit of %d", names[i], big,
             i == 4 ? 100000 : 1024);
    assert_string_equal(err, want);
    free(err);
  }
  /* at the limits it is made (nothing starts before dbx_worker_start) */
  dbx_worker_opts o = {0};
  o.address = "127.0.0.1:1";
  o.task_queue = "tq-limits";
  o.db_dir = dir;
  o.workflow_pollers = o.activity_pollers = o.sticky_pollers = o.activity_threads = 1024;
  o.workflow_task_threads = 1024;
  o.activity_slots = 100000;
  o.no_sync = 1;
  dbx_worker *w = NULL;
  char *err = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, &err), DBX_OK);
  assert_non_null(w);
  dbx_worker_destroy(w);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_worker_counts_over_limit_refused),
      cmocka_unit_test(test_worker_activity_success),
      cmocka_unit_test(test_worker_retry_then_success),
      cmocka_unit_test(test_worker_heartbeat_cancel),
      cmocka_unit_test(test_worker_timer),
      cmocka_unit_test(test_worker_signal_and_query),
      cmocka_unit_test(test_worker_store_retention_removes_closed_runs),
      cmocka_unit_test(test_worker_store_pages_released),
      cmocka_unit_test(test_worker_store_retention_keeps_what_the_service_cannot_judge),
      cmocka_unit_test(test_worker_script_with_fake_sandbox),
      cmocka_unit_test(test_worker_script_retry_policy),
      cmocka_unit_test(test_worker_script_cancel_during_create_or_step),
      cmocka_unit_test(test_worker_at_most_once_redelivery),
      cmocka_unit_test(test_worker_non_retryable_failures),
      cmocka_unit_test(test_worker_heartbeats_do_not_extend_start_to_close),
      cmocka_unit_test(test_worker_stop_reaches_throttled_heartbeats),
      cmocka_unit_test(test_worker_unknown_activity_type_is_retryable),
      cmocka_unit_test(test_worker_survives_service_restart),
      /* last: its 100 steps fill the fake's call log (64 entries) */
      cmocka_unit_test(test_worker_script_summary_fits_payload),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
