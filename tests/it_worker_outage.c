/* Integration test: the worker against a service that goes away and comes
 * back, and a cancel that must reach a running command promptly.
 *
 * Real processes: `durabox server start-dev` on a fixed port with a
 * persistent --db-filename (SIGKILLed and started again on the same port and
 * store), and `durabox worker` (its own --db, DURABOX_HOME in a temporary
 * directory) running durabox.Script workflows.
 *
 * 1. Reconnect: after outages of 3 s and 10 s, the time from the restarted
 *    service accepting connections (its port polled every 5 ms) to the
 *    worker's first workflow task of a workflow started at that moment
 *    (WorkflowTaskStarted's time, which is when the worker's poll took it)
 *    is under 3 s. Before the fix: 6-10 s after 3 s, about 6 s late after
 *    10 s (poll backoff up to 5 s, gRPC's reconnect backoff 1 s .. 120 s).
 * 2. Result after an outage: an at_most_once exec step (heartbeat timeout
 *    5 s) finishes while the service is down for 6 s; the step ends ok with
 *    its output, in one attempt, reported within 3 s of the service being
 *    back (before: lost to a heartbeat timeout).
 * 3. Cancel: a running exec step with heartbeat timeout 100 s, its command
 *    writing a tick every 100 ms; a workflow cancel with a reason stops the
 *    ticks within 2 s (before: up to 80 s), and the reason is the cause of
 *    WorkflowExecutionCancelRequested. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/svc_client.h"
#include "worker/client.h"

#define TQ "outageq"
/* Outage lengths measured by the first test; a one-off build may pass
 * -DOUTAGES_S='{120}' (docs/reliability.md records such a run). */
#ifndef OUTAGES_S
#define OUTAGES_S {3, 10}
#endif

static char *g_svc_dir, *g_wrk_dir, *g_home, *g_env_home;
static int g_port;
static char g_addr[64];

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int setup(void **state) {
  (void)state;
  g_svc_dir = dbx_test_tmpdir("itout-svc");
  g_wrk_dir = dbx_test_tmpdir("itout-wrk");
  g_home = dbx_test_tmpdir("itout-home");
  size_t hn = strlen(g_home) + 16;
  g_env_home = malloc(hn);
  snprintf(g_env_home, hn, "DURABOX_HOME=%s", g_home);
  g_port = dbx_svct_free_port();
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dbx_svct_proc_kill_all();
  dbx_svct_server_kill_all();
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  dbx_test_rmrf(g_home);
  free(g_svc_dir);
  free(g_wrk_dir);
  free(g_home);
  free(g_env_home);
  return 0;
}

static pid_t spawn_worker(void) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", g_addr, "--task-queue", TQ,
                  "--db", g_wrk_dir, "--log-level", "error", NULL};
  char *env[] = {g_env_home, NULL};
  return dbx_svct_proc_spawn(argv, env, NULL, NULL);
}

/* 1 once 127.0.0.1:g_port accepts a TCP connection. */
static int port_accepts(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)g_port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return ok;
}

/* Start the service on g_port (same store) and return the wall time (ms) at
 * which its port first accepted a connection, polled every 5 ms. */
static int64_t service_up(pid_t *pid) {
  *pid = dbx_svct_server_spawn(g_svc_dir, g_port);
  for (int64_t end = mono_ms() + 30000; mono_ms() < end; pause_ms(5))
    if (port_accepts()) return wall_ms();
  fail_msg("the service did not accept connections within 30 s");
  return 0;
}

/* A fresh client (its channel connects at once) that starts a Script;
 * retries while the channel is still connecting. Returns the run id. */
static char *start_script(dbx_client **c, const char *wid, const char *input) {
  dbx_client_opts co = {0};
  co.address = g_addr;
  assert_int_equal(dbx_client_create(&co, c), DBX_OK);
  dbx_client_start_opts so = {0};
  so.workflow_id = wid;
  so.workflow_type = "durabox.Script";
  so.task_queue = TQ;
  so.input_json = input;
  char *rid = NULL;
  dbx_err rc = DBX_ERPC;
  for (int64_t end = mono_ms() + 20000; rc != DBX_OK && mono_ms() < end;) {
    rc = dbx_client_start_workflow(*c, &so, &rid, NULL);
    if (rc == DBX_EUNAVAILABLE) pause_ms(10);
    else break;
  }
  assert_int_equal(rc, DBX_OK);
  return rid;
}

/* The close event of the run (long polls up to timeout_ms); NULL if none. */
static HistoryEvent *await_close(dbx_client *c, const char *wid, const char *rid,
                                 int64_t timeout_ms, dbx_client_history *h) {
  for (int64_t end = mono_ms() + timeout_ms; mono_ms() < end;) {
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 10000};
    memset(h, 0, sizeof *h);
    if (dbx_client_get_history(c, wid, rid, &ho, h, NULL) == DBX_OK && h->n) return h->events[h->n - 1];
    dbx_client_history_cleanup(h);
    pause_ms(20);
  }
  return NULL;
}

static int64_t event_ms(const HistoryEvent *e) {
  return e->event_time ? e->event_time->seconds * 1000 + e->event_time->nanos / 1000000 : 0;
}

/* Wall time (ms) of the first event of type in the run's history; polls up
 * to timeout_ms. */
static int64_t await_event_ms(dbx_client *c, const char *wid, const char *rid, int type,
                              int64_t timeout_ms) {
  for (int64_t end = mono_ms() + timeout_ms; mono_ms() < end; pause_ms(20)) {
    dbx_client_history h = {0};
    int64_t t = 0;
    if (dbx_client_get_history(c, wid, rid, NULL, &h, NULL) == DBX_OK)
      for (size_t i = 0; i < h.n && !t; i++)
        if ((int)h.events[i]->event_type == type) t = event_ms(h.events[i]);
    dbx_client_history_cleanup(&h);
    if (t) return t;
  }
  fail_msg("%s: no event of type %d within %lld ms", wid, type, (long long)timeout_ms);
  return 0;
}

/* Path of name in the workspace of the (only) sandbox with that file, or NULL. */
static char *sandbox_file(const char *name) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/sandboxes", g_home);
  DIR *d = opendir(dir);
  if (d == NULL) return NULL;
  char *path = NULL;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && path == NULL) {
    if (e->d_name[0] == '.') continue;
    size_t n = strlen(dir) + strlen(e->d_name) + strlen(name) + 32;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s/workspace/%s", dir, e->d_name, name);
    if (access(p, F_OK) == 0)
      path = p;
    else
      free(p);
  }
  closedir(d);
  return path;
}

static char *await_sandbox_file(const char *name, int64_t timeout_ms) {
  for (int64_t end = mono_ms() + timeout_ms; mono_ms() < end; pause_ms(10)) {
    char *p = sandbox_file(name);
    if (p) return p;
  }
  fail_msg("no sandbox file %s within %lld ms", name, (long long)timeout_ms);
  return NULL;
}

static const char *EMPTY_SCRIPT = "{\"sandbox\":{\"keep\":false},\"steps\":[]}";

static void expect_completed(dbx_client *c, const char *wid, const char *rid) {
  dbx_client_history h;
  HistoryEvent *e = await_close(c, wid, rid, 60000, &h);
  assert_non_null(e);
  assert_int_equal(e->event_type, ET(WORKFLOW_EXECUTION_COMPLETED));
  dbx_client_history_cleanup(&h);
}

static void test_worker_polls_within_a_second_of_the_service_returning(void **state) {
  (void)state;
  pid_t svc = dbx_svct_server_spawn(g_svc_dir, g_port);
  dbx_client *c0 = NULL;
  spawn_worker();
  char *rid = start_script(&c0, "warm", EMPTY_SCRIPT);
  expect_completed(c0, "warm", rid);
  free(rid);
  dbx_client_destroy(c0);

  static const int outages_s[] = OUTAGES_S;
  for (size_t i = 0; i < sizeof outages_s / sizeof *outages_s; i++) {
    dbx_svct_server_kill(svc);
    pause_ms(outages_s[i] * 1000); /* the outage itself */
    int64_t up = service_up(&svc);
    dbx_client *c = NULL;
    char wid[32];
    snprintf(wid, sizeof wid, "after-%ds", outages_s[i]);
    rid = start_script(&c, wid, EMPTY_SCRIPT);
    int64_t started = wall_ms();
    int64_t taken = await_event_ms(c, wid, rid, ET(WORKFLOW_TASK_STARTED), 60000);
    print_message("outage %d s: workflow started %lld ms and its first task taken %lld ms after "
                  "the service accepted connections\n",
                  outages_s[i], (long long)(started - up), (long long)(taken - up));
    assert_true(taken - up < 3000);
    expect_completed(c, wid, rid);
    free(rid);
    dbx_client_destroy(c);
  }
}

static const char *AMO_SCRIPT =
    "{\"sandbox\":{\"keep\":false},\"steps\":[{\"name\":\"amo\",\"kind\":\"exec\","
    "\"retry_class\":\"at_most_once\",\"heartbeat_timeout_s\":5,\"timeout_s\":60,"
    "\"command\":\"echo go > started.txt; sleep 2; echo amo-result; echo x > finished.txt\"}]}";

static void test_worker_reports_a_result_finished_during_an_outage(void **state) {
  (void)state;
  pid_t svc = dbx_svct_server_spawn(g_svc_dir, g_port);
  spawn_worker();
  dbx_client *c = NULL;
  char *rid = start_script(&c, "amo-outage", AMO_SCRIPT);
  free(await_sandbox_file("started.txt", 30000));
  int64_t down = mono_ms();
  dbx_svct_server_kill(svc);
  /* the command finishes while the service is down */
  free(await_sandbox_file("finished.txt", 10000));
  assert_true(mono_ms() - down < 6000);
  pause_ms((int)(6000 - (mono_ms() - down)));
  int64_t up = service_up(&svc);

  dbx_client_history h;
  HistoryEvent *e = await_close(c, "amo-outage", rid, 60000, &h);
  assert_non_null(e);
  assert_int_equal(e->event_type, ET(WORKFLOW_EXECUTION_COMPLETED));
  char *res = dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result);
  dbx_client_history_cleanup(&h);
  cJSON *j = cJSON_Parse(res);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "steps"), 0);
  assert_non_null(s);
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s, "ok")));
  assert_int_equal((int)cJSON_GetObjectItem(s, "attempts")->valuedouble, 1);
  assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(s, "output_excerpt")), "amo-result"));
  cJSON_Delete(j);
  free(res);
  /* the step's activity (the second one: sandbox.create is the first) */
  dbx_client_history all = {0};
  assert_int_equal(dbx_client_get_history(c, "amo-outage", rid, NULL, &all, NULL), DBX_OK);
  int64_t reported = 0;
  int completed = 0, timed_out = 0;
  for (size_t i = 0; i < all.n; i++) {
    if (all.events[i]->event_type == ET(ACTIVITY_TASK_TIMED_OUT)) timed_out++;
    if (all.events[i]->event_type != ET(ACTIVITY_TASK_COMPLETED)) continue;
    if (++completed == 2) reported = event_ms(all.events[i]);
  }
  assert_int_equal(timed_out, 0);
  dbx_client_history_cleanup(&all);
  assert_true(reported > 0);
  print_message("at_most_once result reported %lld ms after the service accepted connections\n",
                (long long)(reported - up));
  assert_true(reported - up < 3000);
  free(rid);
  dbx_client_destroy(c);
}

/* Wall time (ms) of the last tick in the file text (one ns timestamp a line). */
static int64_t last_tick_ms(const char *text) {
  int64_t last = 0;
  for (const char *p = text; p && *p;) {
    long long v = atoll(p);
    if (v > 0) last = v / 1000000;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return last;
}

static const char *LONG_SCRIPT =
    "{\"sandbox\":{\"keep\":true},\"steps\":[{\"name\":\"long\",\"kind\":\"exec\","
    "\"heartbeat_timeout_s\":100,\"timeout_s\":700,"
    "\"command\":\"while true; do date +%s%N >> ticks.txt; sleep 0.1; done\"}]}";
#define REASON "it_worker_outage: stop the long step"

static void test_worker_cancel_reaches_a_running_command_within_a_second(void **state) {
  (void)state;
  dbx_svct_server_spawn(g_svc_dir, g_port);
  spawn_worker();
  dbx_client *c = NULL;
  char *rid = start_script(&c, "cancel-long", LONG_SCRIPT);
  char *ticks = await_sandbox_file("ticks.txt", 30000);
  /* running for a while: its first heartbeat has been sent */
  char *text = NULL;
  for (int64_t end = mono_ms() + 10000; mono_ms() < end; pause_ms(50)) {
    free(text);
    text = dbx_svct_file_read(ticks);
    if (text && last_tick_ms(text) - atoll(text) / 1000000 >= 1500) break;
  }
  assert_true(text && last_tick_ms(text) - atoll(text) / 1000000 >= 1500);
  free(text);
  text = NULL;

  int64_t cancel_at = wall_ms();
  char *err = NULL;
  assert_int_equal(dbx_client_cancel(c, "cancel-long", rid, REASON, &err), DBX_OK);
  /* stopped: no tick for 1.5 s (well over the 100 ms period) */
  int64_t last = 0;
  for (int64_t end = mono_ms() + 20000; mono_ms() < end; pause_ms(50)) {
    free(text);
    text = dbx_svct_file_read(ticks);
    last = last_tick_ms(text);
    if (last && wall_ms() - last > 1500) break;
  }
  free(text);
  print_message("cancel reached the command: last tick %lld ms after the cancel request\n",
                (long long)(last - cancel_at));
  assert_true(wall_ms() - last > 1500);
  assert_true(last - cancel_at < 2000);

  dbx_client_history h;
  HistoryEvent *e = await_close(c, "cancel-long", rid, 30000, &h);
  assert_non_null(e);
  assert_int_equal(e->event_type, ET(WORKFLOW_EXECUTION_CANCELED));
  dbx_client_history_cleanup(&h);
  dbx_client_history all = {0};
  assert_int_equal(dbx_client_get_history(c, "cancel-long", rid, NULL, &all, NULL), DBX_OK);
  int found = 0;
  for (size_t i = 0; i < all.n; i++)
    if (all.events[i]->event_type == ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED)) {
      assert_string_equal(all.events[i]->workflow_execution_cancel_requested_event_attributes->cause,
                          REASON);
      found++;
    }
  assert_int_equal(found, 1);
  dbx_client_history_cleanup(&all);
  free(ticks);
  free(rid);
  dbx_client_destroy(c);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_worker_polls_within_a_second_of_the_service_returning,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_reports_a_result_finished_during_an_outage,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_cancel_reaches_a_running_command_within_a_second,
                                      setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
