/* Integration test: `kill -9` of the worker in the middle of a long step.
 *
 * A spawned `durabox server start-dev` and a spawned `durabox worker` (its own
 * --db, DURABOX_HOME in a temporary directory) run a durabox.Script whose
 * steps append to count.txt in the sandbox workspace:
 *   a  exec  echo a >> count.txt
 *   b  write_file x.txt
 *   c  exec  echo long-start >> count.txt; sleep 3; echo long-end >> count.txt
 *      (timeout_s 5, safe_to_retry)
 *   d  exec  echo d >> count.txt
 * When count.txt holds "long-start" the worker gets SIGKILL. The command
 * itself runs under its supervisor (activities/local.c), outside the worker's
 * process tree, so it goes on; a second worker with the same --db and
 * DURABOX_HOME gets the retry once the attempt's heartbeat timeout (3 s here)
 * passes, and re-attaches to the command by its id instead of starting it
 * again.
 *
 * Expected: the run completes with status "completed"; a and d ran once; c
 * ran once although its activity took two attempts (the killed one, then the
 * retry that re-attached); history event ids are 1..n; x.txt's write_file was
 * scheduled and completed exactly once. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/svc_client.h"
#include "worker/client.h"

#define WFID "crash-script"
#define TQ "crashq"

static char *g_svc_dir, *g_wrk_dir, *g_home, *g_env_home;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
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

static pid_t spawn_worker(const char *addr) {
  char *argv[] = {(char *)dbx_test_bin(), "worker", "--address", (char *)addr, "--task-queue", TQ,
                  "--db", g_wrk_dir, "--log-level", "error", NULL};
  char *env[] = {g_env_home, NULL};
  return dbx_svct_proc_spawn(argv, env, NULL, NULL);
}

/* Path of count.txt in the (only) sandbox's workspace, or NULL while there is none. */
static char *count_path(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/sandboxes", g_home);
  DIR *d = opendir(dir);
  if (d == NULL) return NULL;
  char *path = NULL;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && path == NULL)
    if (e->d_name[0] != '.') {
      size_t n = strlen(dir) + strlen(e->d_name) + 32;
      path = malloc(n);
      snprintf(path, n, "%s/%s/workspace/count.txt", dir, e->d_name);
    }
  closedir(d);
  return path;
}

/* Number of lines of text exactly equal to word. */
static int lines_equal(const char *text, const char *word) {
  int n = 0;
  size_t wl = strlen(word);
  for (const char *p = text; p && *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == wl && strncmp(p, word, wl) == 0) n++;
    p = e ? e + 1 : NULL;
  }
  return n;
}

static const char *INPUT =
    "{\"sandbox\":{\"keep\":true},\"steps\":["
    "{\"name\":\"a\",\"kind\":\"exec\",\"command\":\"echo a >> count.txt\"},"
    "{\"name\":\"b\",\"kind\":\"write_file\",\"path\":\"x.txt\",\"content\":\"x\"},"
    "{\"name\":\"c\",\"kind\":\"exec\",\"retry_class\":\"safe_to_retry\",\"timeout_s\":60,"
    "\"heartbeat_timeout_s\":3,"
    "\"command\":\"echo long-start >> count.txt; sleep 6; echo long-end >> count.txt\"},"
    "{\"name\":\"d\",\"kind\":\"exec\",\"command\":\"echo d >> count.txt\"}]}";

static void test_worker_crash_mid_step_resumes_without_rerunning_steps(void **state) {
  (void)state;
  int64_t t0 = mono_ms();
  g_svc_dir = dbx_test_tmpdir("itcrash-svc");
  g_wrk_dir = dbx_test_tmpdir("itcrash-wrk");
  g_home = dbx_test_tmpdir("itcrash-home");
  size_t hn = strlen(g_home) + 16;
  g_env_home = malloc(hn);
  snprintf(g_env_home, hn, "DURABOX_HOME=%s", g_home);

  int port = dbx_svct_free_port();
  dbx_svct_server_spawn(g_svc_dir, port);
  dbx_rpc_channel *ch = dbx_svct_connect(port);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  pid_t worker = spawn_worker(addr);

  dbx_client *c = NULL;
  dbx_client_opts co = {0};
  co.address = addr;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);
  dbx_client_start_opts so = {0};
  so.workflow_id = WFID;
  so.workflow_type = "durabox.Script";
  so.task_queue = TQ;
  so.input_json = INPUT;
  char *rid = NULL;
  assert_int_equal(dbx_client_start_workflow(c, &so, &rid, NULL), DBX_OK);

  /* the long step is running once its first line is in count.txt */
  char *cp = NULL, *text = NULL;
  for (int64_t end = mono_ms() + 30000; mono_ms() < end; pause_ms(20)) {
    if (cp == NULL) cp = count_path();
    free(text);
    text = cp ? dbx_svct_file_read(cp) : NULL;
    if (text && strstr(text, "long-start\n")) break;
  }
  if (text == NULL || strstr(text, "long-start\n") == NULL)
    fail_msg("the long step did not start within 30 s (count.txt: %s)", text ? text : "(none)");

  /* crash: the worker only; the command's supervisor lives on */
  dbx_svct_proc_kill(worker, SIGKILL);
  free(text);
  text = dbx_svct_file_read(cp);
  assert_non_null(text);
  assert_int_equal(lines_equal(text, "long-start"), 1);
  free(text);
  text = NULL;

  worker = spawn_worker(addr);

  /* the result: long-poll the close event (the retry waits for the killed
   * attempt's heartbeat timeout) */
  char *result = NULL;
  int closed_type = 0;
  for (int64_t end = mono_ms() + 180000; !closed_type && mono_ms() < end;) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 20000};
    dbx_err e = dbx_client_get_history(c, WFID, rid, &ho, &h, NULL);
    if (e == DBX_OK && h.n) {
      closed_type = h.events[h.n - 1]->event_type;
      if (closed_type == ET(WORKFLOW_EXECUTION_COMPLETED))
        result = dbx_payloads_to_json(h.events[h.n - 1]->workflow_execution_completed_event_attributes->result);
    }
    dbx_client_history_cleanup(&h);
  }
  assert_int_equal(closed_type, ET(WORKFLOW_EXECUTION_COMPLETED));
  assert_non_null(result);
  cJSON *j = cJSON_Parse(result);
  assert_non_null(j);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "status")), "completed");
  cJSON *steps = cJSON_GetObjectItem(j, "steps");
  assert_int_equal(cJSON_GetArraySize(steps), 4);
  static const int attempts[] = {1, 1, 2, 1};
  for (int i = 0; i < 4; i++) {
    cJSON *s = cJSON_GetArrayItem(steps, i);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s, "ok")));
    assert_int_equal((int)cJSON_GetObjectItem(s, "attempts")->valuedouble, attempts[i]);
  }
  cJSON_Delete(j);
  free(result);

  /* the side effects: completed steps did not run again */
  text = dbx_svct_file_read(cp);
  assert_non_null(text);
  assert_int_equal(lines_equal(text, "a"), 1);
  assert_int_equal(lines_equal(text, "d"), 1);
  assert_int_equal(lines_equal(text, "long-start"), 1); /* re-attached, not started again */
  assert_int_equal(lines_equal(text, "long-end"), 1);
  free(text);

  /* the history */
  dbx_svct_history h;
  dbx_svct_history_get(ch, WFID, rid, &h);
  assert_true(h.n > 0);
  int64_t write_sched = 0;
  int write_scheduled = 0, write_completed = 0, exec_scheduled = 0;
  for (size_t i = 0; i < h.n; i++) {
    const HistoryEvent *e = h.events[i];
    assert_int_equal(e->event_id, (int64_t)i + 1);
    if (e->event_type == ET(ACTIVITY_TASK_SCHEDULED)) {
      const char *type = e->activity_task_scheduled_event_attributes->activity_type->name;
      if (strcmp(type, "sandbox.write_file") == 0) {
        write_scheduled++;
        write_sched = e->event_id;
      }
      if (strcmp(type, "sandbox.exec") == 0) exec_scheduled++;
    }
  }
  for (size_t i = 0; i < h.n; i++)
    if (h.events[i]->event_type == ET(ACTIVITY_TASK_COMPLETED) &&
        h.events[i]->activity_task_completed_event_attributes->scheduled_event_id == write_sched)
      write_completed++;
  assert_int_equal(write_scheduled, 1);
  assert_int_equal(write_completed, 1);
  assert_int_equal(exec_scheduled, 3);
  assert_int_equal(dbx_svct_history_count(&h, ET(ACTIVITY_TASK_COMPLETED)), 5); /* create + 4 steps */
  assert_int_equal(dbx_svct_history_count(&h, ET(WORKFLOW_EXECUTION_COMPLETED)), 1);
  dbx_svct_history_cleanup(&h);

  kill(worker, SIGTERM);
  assert_int_equal(dbx_svct_proc_wait(worker, 30000), 0);
  free(cp);
  free(rid);
  dbx_client_destroy(c);
  dbx_rpc_channel_destroy(ch);
  print_message("worker crash test: %.1f s\n", (double)(mono_ms() - t0) / 1000.0);
}

int main(void) {
  dbx_rpc_global_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_worker_crash_mid_step_resumes_without_rerunning_steps, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  dbx_rpc_global_shutdown();
  return rc;
}
