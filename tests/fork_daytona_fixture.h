/* The fixture of it_fork_daytona and it_fork_daytona_edges (included by
 * both, no other user; FDX_PREFIX, defined before the include, names their
 * temporary directories): a spawned `durabox dev --sandbox daytona` against
 * the fake Daytona server (tests/fakes/daytona), the durabox CLI run as a
 * child, and the readers of a Script's result and of the fake's snapshots. */
#ifndef DBX_TESTS_FORK_DAYTONA_FIXTURE_H
#define DBX_TESTS_FORK_DAYTONA_FIXTURE_H
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/svc_client.h"
#include "tests/testutil.h"
#include "worker/client.h"

#ifndef FDX_PREFIX
#error "define FDX_PREFIX (the temporary directories' prefix) before including this file"
#endif

static char *g_dir, *g_sdb, *g_wdb, *g_env_url, *g_env_key;
static char g_addr[64];
static int g_port;
static pid_t g_dev;
static dbx_fake_daytona g_fake;

static __attribute__((unused)) int durabox(char **out, char **err, ...) {
  char *argv[40];
  int k = 0;
  argv[k++] = (char *)dbx_test_bin();
  va_list ap;
  va_start(ap, err);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && k < 37) argv[k++] = (char *)a;
  va_end(ap);
  argv[k++] = "--address";
  argv[k++] = g_addr;
  argv[k] = NULL;
  char *env[] = {"TEMPORAL_ADDRESS", NULL};
  return dbx_svct_proc_run(argv, env, 150000, out, err);
}

static __attribute__((unused)) int setup(void **state) {
  (void)state;
  g_dir = dbx_test_tmpdir(FDX_PREFIX "-files");
  g_sdb = dbx_test_tmpdir(FDX_PREFIX "-svc");
  g_wdb = dbx_test_tmpdir(FDX_PREFIX "-wrk");
  if (dbx_fake_daytona_start(&g_fake, g_dir) != 0) {
    fprintf(stderr, "fake daytona: %s\n", g_fake.why);
    return -1;
  }
  if (dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":20}") != 0) return -1;
  g_env_url = dbx_asprintf("DAYTONA_API_URL=%s", g_fake.api_url);
  g_env_key = dbx_asprintf("DAYTONA_API_KEY=%s", DBX_FAKE_DAYTONA_KEY);
  g_port = dbx_svct_free_port();
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", g_port);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", g_port);
  char *home = dbx_asprintf("DURABOX_HOME=%s", g_dir);
  char *dargv[] = {(char *)dbx_test_bin(), "dev", "--headless", "--port", port_s, "--db-filename", g_sdb, "--worker-db",
                   g_wdb, "--sandbox", "daytona", "--log-level", "warn", NULL};
  char *denv[] = {g_env_url, g_env_key, home, NULL};
  g_dev = dbx_svct_proc_spawn(dargv, denv, NULL, NULL);
  dbx_rpc_channel_destroy(dbx_svct_connect(g_port));
  free(home);
  return 0;
}

static __attribute__((unused)) int teardown(void **state) {
  (void)state;
  kill(g_dev, SIGTERM);
  dbx_svct_proc_wait(g_dev, 30000);
  dbx_svct_proc_kill_all();
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(g_dir);
  dbx_test_rmrf(g_sdb);
  dbx_test_rmrf(g_wdb);
  free(g_dir);
  free(g_sdb);
  free(g_wdb);
  free(g_env_url);
  free(g_env_key);
  return 0;
}

static __attribute__((unused)) void start_script(const char *wid, const char *input) {
  char *f = dbx_asprintf("%s/%s.json", g_dir, wid), *out = NULL, *err = NULL;
  dbx_svct_file_write(f, input);
  int rc = durabox(&out, &err, "workflow", "start", "--type=durabox.Script", "--task-queue=durabox",
                   "--workflow-id", wid, "--input-file", f, NULL);
  if (rc != 0) fail_msg("start %s exited %d\n%s\n%s", wid, rc, out, err);
  free(out);
  free(err);
  free(f);
}

static __attribute__((unused)) cJSON *result_of(const char *wid) {
  char *out = NULL, *err = NULL;
  int rc = durabox(&out, &err, "workflow", "result", "-w", wid, "--output", "json", NULL);
  cJSON *ev = cJSON_Parse(out);
  cJSON *p = cJSON_GetArrayItem(
      cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "workflowExecutionCompletedEventAttributes"),
                                              "result"),
                          "payloads"),
      0);
  if (!p) fail_msg("%s did not complete (exit %d): %.3000s %s", wid, rc, out, err);
  cJSON *r = cJSON_Duplicate(p, 1);
  cJSON_Delete(ev);
  free(out);
  free(err);
  return r;
}

static __attribute__((unused)) const cJSON *ckpt_at(const cJSON *res, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(res, "checkpoints"), i);
}

static __attribute__((unused)) const cJSON *step_at(const cJSON *res, int i) {
  return cJSON_GetArrayItem(cJSON_GetObjectItem(res, "steps"), i);
}

/* ------------------------------------------------------------ fork rules */

static __attribute__((unused)) char *fork_of(const char *wid, const char *new_id, long long at, const char *queue, char **err) {
  char at_s[32], *out = NULL;
  snprintf(at_s, sizeof at_s, "%lld", at);
  int rc = queue ? durabox(&out, err, "workflow", "fork", "-w", wid, "--at", at_s, "--workflow-id-new", new_id,
                           "--task-queue", queue, NULL)
                 : durabox(&out, err, "workflow", "fork", "-w", wid, "--at", at_s, "--workflow-id-new", new_id, NULL);
  if (rc != 0) fail_msg("fork %s at %lld exited %d\n%s\n%s", wid, at, rc, out, *err);
  return out;
}

static __attribute__((unused)) long long covered_of(const cJSON *ck) {
  return (long long)cJSON_GetNumberValue(cJSON_GetObjectItem(ck, "covered_event_id"));
}

static __attribute__((unused)) const char *ref_of(const cJSON *ck) { return cJSON_GetStringValue(cJSON_GetObjectItem(ck, "ref")); }

static __attribute__((unused)) int from_record(const cJSON *res, int i) {
  return cJSON_IsTrue(cJSON_GetObjectItem(step_at(res, i), "from_record"));
}

/* The folder of the fake's snapshot named ref (GET /_control/snapshots);
 * malloc'd. The test fails when there is none or it is not active. */
static __attribute__((unused)) char *snapshot_dir(const char *ref) {
  char *body = dbx_fake_daytona_call(&g_fake, "GET", "/_control/snapshots", NULL);
  cJSON *j = body ? cJSON_Parse(body) : NULL, *it;
  char *dir = NULL;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "items")) {
    if (ref && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")), ref) == 0 &&
        strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "state")), "active") == 0)
      dir = dbx_strdup(cJSON_GetStringValue(cJSON_GetObjectItem(it, "dir")));
  }
  if (!dir) fail_msg("no active snapshot %s on the fake: %.2000s", ref ? ref : "(null)", body ? body : "(no reply)");
  cJSON_Delete(j);
  free(body);
  return dir;
}

static __attribute__((unused)) size_t count_of(dbx_svct_history *h, int type, const char *name) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++) {
    const HistoryEvent *e = h->events[i];
    if ((int)e->event_type != type) continue;
    const char *nm = type == ET(MARKER_RECORDED) ? e->marker_recorded_event_attributes->marker_name
                     : type == ET(ACTIVITY_TASK_SCHEDULED)
                         ? e->activity_task_scheduled_event_attributes->activity_type->name
                         : NULL;
    if (!name || (nm && strcmp(nm, name) == 0)) n++;
  }
  return n;
}

#endif
