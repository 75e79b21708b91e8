/* Integration tests of durabox.Fleet (workflows/fleet.h) on the real embedded
 * service (in-process, temp LMDB, loopback) and the real C worker serving
 * the built-in types, the sandbox activities over the memory driver and the
 * fleet activities (cli/fleet.h). Each item's child is a durabox.Script whose
 * one exec step is "work KEY MS EXIT": the driver's exec callback counts the
 * runs per key, measures the sandboxes that exist at that moment, and "runs"
 * MS milliseconds with exit status EXIT. A sampler thread lists the
 * sandboxes every 2 ms as well.
 * Covers: concurrency never exceeds C (sandboxes at once, both measures) and
 * reaches it; the output (counts, per-item status, duration, child run); a
 * failed item does not stop the fleet; continue-as-new keeps every item
 * exactly once across runs; cancel leaves no sandbox; a re-run with the same
 * id skips the items that succeeded and runs the failed one again; an items
 * file with a bad line; template errors fail only their item. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "activities/memdrv.h"
#include "activities/quota.h"
#include "activities/sandbox.h"
#include "base/util.h"
#include "cli/fleet.h"
#include "rpc/rpc.h"
#include "service/service.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/replay.h"
#include "worker/worker.h"
#include "workflows/builtin.h"
#include "workflows/fleet.h"

#define TQ "fleetq"
#define MAXKEYS 256

static char *g_svc_dir, *g_wrk_dir;
static dbx_service *g_svc;
static dbx_worker *g_w;
static dbx_client *g_c;
static dbx_memdrv *g_mem;
static dbx_sandbox_acts *g_acts;
static dbx_cli_fleet_acts *g_facts;
static char g_addr[64];

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_keys[MAXKEYS][64];
static int g_runs[MAXKEYS];
static int g_nkeys, g_max_at_exec, g_max_sampled;
static volatile int g_sampling;

static int live_in(dbx_driver *d) {
  char **names = NULL;
  size_t n = 0;
  if (d->ops->list(d->self, NULL, 0, &names, &n) != DBX_DRV_OK) return -1;
  dbx_drv_names_free(names, n);
  return (int)n;
}

static int live_sandboxes(void) { return live_in(dbx_memdrv_driver(g_mem)); }

static int runs_of(const char *key) {
  pthread_mutex_lock(&g_mu);
  int r = 0;
  for (int i = 0; i < g_nkeys; i++)
    if (strcmp(g_keys[i], key) == 0) r = g_runs[i];
  pthread_mutex_unlock(&g_mu);
  return r;
}

static void counters_reset(void) {
  pthread_mutex_lock(&g_mu);
  g_nkeys = 0;
  g_max_at_exec = g_max_sampled = 0;
  pthread_mutex_unlock(&g_mu);
}

static void on_exec(void *ud, dbx_driver *drv, const char *sandbox, const dbx_drv_exec_opts *o,
                    dbx_memdrv_exec_out *out) {
  (void)ud, (void)sandbox;
  char key[64] = "";
  int ms = 0, code = 0;
  if (sscanf(o->command, "work %63s %d %d", key, &ms, &code) != 3) return;
  int live = live_in(drv);
  pthread_mutex_lock(&g_mu);
  int i = 0;
  while (i < g_nkeys && strcmp(g_keys[i], key) != 0) i++;
  if (i == g_nkeys && g_nkeys < MAXKEYS) {
    snprintf(g_keys[g_nkeys], sizeof g_keys[0], "%s", key);
    g_runs[g_nkeys++] = 0;
  }
  if (i < MAXKEYS) g_runs[i]++;
  if (live > g_max_at_exec) g_max_at_exec = live;
  pthread_mutex_unlock(&g_mu);
  out->duration_ms = ms;
  out->exit_code = code;
}

static void *sampler(void *arg) {
  (void)arg;
  while (g_sampling) {
    int n = live_sandboxes();
    pthread_mutex_lock(&g_mu);
    if (n > g_max_sampled) g_max_sampled = n;
    pthread_mutex_unlock(&g_mu);
    struct timespec ts = {0, 2 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static int group_setup(void **st) {
  (void)st;
  dbx_rpc_global_init();
  dbx_log_set_level(DBX_LOG_ERROR);
  g_svc_dir = dbx_test_tmpdir("itfleet-svc");
  g_wrk_dir = dbx_test_tmpdir("itfleet-wrk");
  dbx_service_opts so;
  dbx_service_opts_init(&so);
  so.db_path = g_svc_dir;
  so.port = 0;
  so.no_sync = 1;
  char *err = NULL;
  assert_int_equal(dbx_service_start(&so, &g_svc, &err), DBX_OK);
  snprintf(g_addr, sizeof g_addr, "127.0.0.1:%d", dbx_service_port(g_svc));
  dbx_memdrv_opts mo = {.exec = on_exec};
  assert_int_equal(dbx_memdrv_create(&mo, &g_mem), DBX_OK);
  assert_int_equal(dbx_sandbox_acts_create(dbx_memdrv_driver(g_mem), &g_acts), DBX_OK);
  dbx_client_opts co = {.address = g_addr};
  assert_int_equal(dbx_cli_fleet_acts_create(&co, &g_facts), DBX_OK);
  dbx_worker_opts o = {0};
  o.address = g_addr;
  o.task_queue = TQ;
  o.db_dir = g_wrk_dir;
  o.no_sync = 1;
  o.activity_slots = 16;
  assert_int_equal(dbx_worker_create(&o, &g_w, &err), DBX_OK);
  for (size_t i = 0; dbx_workflows_builtin[i]; i++)
    assert_int_equal(dbx_worker_register_workflow(g_w, dbx_workflows_builtin[i]), DBX_OK);
  assert_int_equal(dbx_sandbox_register_all(g_w, g_acts), DBX_OK);
  assert_int_equal(dbx_cli_fleet_acts_register(g_facts, g_w), DBX_OK);
  assert_int_equal(dbx_worker_start(g_w), DBX_OK);
  assert_int_equal(dbx_client_create(&co, &g_c), DBX_OK);
  return 0;
}

static int group_teardown(void **st) {
  (void)st;
  dbx_worker_stop(g_w, 1000);
  dbx_worker_destroy(g_w);
  dbx_cli_fleet_acts_destroy(g_facts);
  dbx_sandbox_acts_destroy(g_acts);
  dbx_memdrv_destroy(g_mem);
  dbx_client_destroy(g_c);
  dbx_service_stop(g_svc);
  dbx_test_rmrf(g_svc_dir);
  dbx_test_rmrf(g_wrk_dir);
  free(g_svc_dir);
  free(g_wrk_dir);
  dbx_rpc_global_shutdown();
  return 0;
}

/* ------------------------------------------------------------ helpers */

static void start(const char *wid, const char *input) {
  dbx_client_start_opts o = {.workflow_id = wid, .workflow_type = "durabox.Fleet",
                             .task_queue = TQ, .input_json = input};
  char *rid = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(g_c, &o, &rid, &err);
  if (rc != DBX_OK) fail_msg("start %s: %s", wid, err ? err : dbx_strerror(rc));
  free(rid);
  free(err);
}

/* The result of the fleet's last run (following continue-as-new), parsed;
 * *nruns: the runs the chain took. Up to 120 s. */
static cJSON *wait_result(const char *wid) {
  int64_t deadline = dbx_mono_ns() + 120LL * 1000000000LL;
  while (dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 5000};
    dbx_err rc = dbx_client_get_history(g_c, wid, NULL, &ho, &h, NULL);
    if (rc == DBX_OK && h.n > 0) {
      HistoryEvent *e = h.events[h.n - 1];
      if (e->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
        char *out = dbx_payloads_to_json(e->workflow_execution_completed_event_attributes->result);
        dbx_client_history_cleanup(&h);
        cJSON *j = cJSON_Parse(out);
        free(out);
        assert_non_null(j);
        return j;
      }
      if (e->event_type != ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW))
        fail_msg("fleet %s closed with event type %d", wid, (int)e->event_type);
    }
    dbx_client_history_cleanup(&h);
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  fail_msg("fleet %s did not complete", wid);
  return NULL;
}

/* The latest run's whole history replays through durabox.Fleet issuing the
 * same commands (worker/replay.h). */
static void assert_replays(const char *wid) {
  dbx_client_history h = {0};
  assert_int_equal(dbx_client_get_history(g_c, wid, NULL, NULL, &h, NULL), DBX_OK);
  dbx_replay_report rep;
  assert_int_equal(dbx_replay_run(&dbx_fleet_workflow, h.events, h.n, &rep), DBX_OK);
  if (!rep.deterministic) fail_msg("%s does not replay: %s", wid, rep.message);
  assert_true(rep.commands_matched > 0);
  dbx_client_history_cleanup(&h);
}

static int num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(v)) fail_msg("no number \"%s\"", k);
  return (int)v->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
  const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
  if (s == NULL) fail_msg("no string \"%s\"", k);
  return s;
}

static const cJSON *record_of(const cJSON *res, const char *key) {
  const cJSON *r;
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(res, "items"))
    if (strcmp(str(r, "key"), key) == 0) return r;
  fail_msg("no record of item %s", key);
  return NULL;
}

#define TEMPLATE                                                                              \
  "\"template\":{\"input\":{\"sandbox\":{},\"steps\":[{\"name\":\"work\",\"kind\":\"exec\","  \
  "\"command\":\"work {{key}} {{ms}} {{exit}}\",\"retry\":{\"maximum_attempts\":1}}]}}"

/* Inline items k0..k<n-1> running ms each, item `bad` (or -1) exiting 3. */
static char *items_json(const char *prefix, int n, int ms, int bad) {
  size_t cap = (size_t)n * 80 + 16, len = 0;
  char *s = malloc(cap);
  len += (size_t)snprintf(s + len, cap - len, "[");
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(s + len, cap - len, "%s{\"key\":\"%s%d\",\"ms\":%d,\"exit\":%d}",
                            i ? "," : "", prefix, i, ms, i == bad ? 3 : 0);
  snprintf(s + len, cap - len, "]");
  return s;
}

/* ------------------------------------------------------------ tests */

static void test_fleet_concurrency_bounded_and_output(void **st) {
  (void)st;
  counters_reset();
  char *items = items_json("c", 8, 1500, 5);
  char *in = dbx_asprintf("{\"items\":%s,\"concurrency\":3," TEMPLATE "}", items);
  pthread_t th;
  g_sampling = 1;
  assert_int_equal(pthread_create(&th, NULL, sampler, NULL), 0);
  start("fleet-c", in);
  cJSON *res = wait_result("fleet-c");
  g_sampling = 0;
  pthread_join(th, NULL);
  assert_string_equal(str(res, "status"), "completed");
  assert_string_equal(str(res, "fleet_id"), "fleet-c");
  assert_int_equal(num(res, "total"), 8);
  assert_int_equal(num(res, "succeeded"), 7);
  assert_int_equal(num(res, "failed"), 1);
  assert_int_equal(num(res, "cancelled"), 0);
  assert_int_equal(num(res, "skipped"), 0);
  assert_int_equal(num(res, "not_started"), 0);
  assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(res, "items")), 8);
  /* never more than C sandboxes at once, and C reached (8 items of 1.5 s) */
  assert_in_range(g_max_at_exec, 2, 3);
  assert_in_range(g_max_sampled, 3, 3);
  for (int i = 0; i < 8; i++) {
    char key[16], wid[32];
    snprintf(key, sizeof key, "c%d", i);
    snprintf(wid, sizeof wid, "fleet-c/c%d", i);
    const cJSON *r = record_of(res, key);
    assert_string_equal(str(r, "status"), i == 5 ? "failed" : "succeeded");
    assert_string_equal(str(r, "workflow_id"), wid);
    assert_true(strlen(str(r, "run_id")) > 10);
    assert_true(num(r, "duration_ms") >= 1500);
    assert_int_equal(num(r, "attempts"), 1);
    assert_int_equal(runs_of(key), 1);
    if (i == 5) assert_non_null(strstr(str(r, "error"), "step work"));
  }
  assert_int_equal(live_sandboxes(), 0);
  assert_replays("fleet-c");
  cJSON_Delete(res);
  free(in);
  free(items);
}

static void test_fleet_continue_as_new_keeps_each_item_once(void **st) {
  (void)st;
  counters_reset();
  char *items = items_json("n", 40, 10, -1);
  /* ~9 events per item: a run holds a dozen items or so before 100 events */
  char *in = dbx_asprintf("{\"items\":%s,\"concurrency\":4,\"max_events\":100,\"page_size\":7,"
                          TEMPLATE "}", items);
  start("fleet-n", in);
  cJSON *res = wait_result("fleet-n");
  assert_string_equal(str(res, "status"), "completed");
  assert_int_equal(num(res, "total"), 40);
  assert_int_equal(num(res, "succeeded"), 40);
  assert_int_equal(num(res, "failed"), 0);
  if (num(res, "runs") < 3) fail_msg("runs %d", num(res, "runs"));
  const cJSON *recs = cJSON_GetObjectItem(res, "items");
  assert_int_equal(cJSON_GetArraySize(recs), 40);
  for (int i = 0; i < 40; i++) {
    char key[16];
    snprintf(key, sizeof key, "n%d", i);
    assert_string_equal(str(record_of(res, key), "status"), "succeeded");
    assert_int_equal(runs_of(key), 1); /* started in exactly one run of the chain */
  }
  assert_replays("fleet-n");
  cJSON_Delete(res);
  free(in);
  free(items);
}

static void test_fleet_cancel_leaves_no_sandbox(void **st) {
  (void)st;
  counters_reset();
  char *items = items_json("x", 6, 60000, -1);
  char *in = dbx_asprintf("{\"items\":%s,\"concurrency\":2," TEMPLATE "}", items);
  start("fleet-x", in);
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  while ((runs_of("x0") == 0 || runs_of("x1") == 0) && dbx_mono_ns() < deadline) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(live_sandboxes(), 2);
  char *err = NULL;
  assert_int_equal(dbx_client_cancel(g_c, "fleet-x", NULL, "test", &err), DBX_OK);
  cJSON *res = wait_result("fleet-x");
  assert_string_equal(str(res, "status"), "cancelled");
  assert_int_equal(num(res, "cancelled"), 2);
  assert_int_equal(num(res, "succeeded"), 0);
  assert_int_equal(num(res, "not_started"), 4);
  assert_string_equal(str(record_of(res, "x0"), "status"), "cancelled");
  assert_int_equal(live_sandboxes(), 0);
  assert_int_equal(runs_of("x2"), 0);
  assert_replays("fleet-x");
  cJSON_Delete(res);
  free(in);
  free(items);
}

static void test_fleet_rerun_skips_succeeded(void **st) {
  (void)st;
  counters_reset();
  char *items = items_json("r", 5, 10, 2);
  char *in = dbx_asprintf("{\"items\":%s,\"concurrency\":2," TEMPLATE "}", items);
  start("fleet-r", in);
  cJSON *res = wait_result("fleet-r");
  assert_int_equal(num(res, "succeeded"), 4);
  assert_int_equal(num(res, "failed"), 1);
  const char *rid0 = str(record_of(res, "r0"), "run_id");
  char *first_r0 = dbx_strdup(rid0);
  cJSON_Delete(res);
  start("fleet-r", in); /* the same id again */
  res = wait_result("fleet-r");
  assert_string_equal(str(res, "status"), "completed");
  assert_int_equal(num(res, "skipped"), 4);
  assert_int_equal(num(res, "failed"), 1);
  assert_int_equal(num(res, "succeeded"), 0);
  const cJSON *r0 = record_of(res, "r0");
  assert_string_equal(str(r0, "status"), "skipped");
  assert_string_equal(str(r0, "run_id"), first_r0); /* points at the run that succeeded */
  assert_string_equal(str(record_of(res, "r2"), "status"), "failed");
  assert_int_equal(runs_of("r0"), 1);
  assert_int_equal(runs_of("r2"), 2); /* the failed item ran again */
  assert_replays("fleet-r");
  cJSON_Delete(res);
  free(first_r0);
  free(in);
  free(items);
}

static void test_fleet_items_file_and_bad_items(void **st) {
  (void)st;
  counters_reset();
  char *dir = dbx_test_tmpdir("itfleet-items");
  char *path = dbx_asprintf("%s/items.jsonl", dir);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs("{\"key\":\"f0\",\"ms\":5,\"exit\":0}\n\n{\"key\":\"f1\",\"ms\":5,\"exit\":0}\n"
        "not json\n{\"key\":\"f2\",\"ms\":5}\n{\"key\":\"f3\",\"ms\":5,\"exit\":0}\n", fp);
  fclose(fp);
  char *in = dbx_asprintf("{\"items_file\":\"%s\",\"concurrency\":2,\"page_size\":2," TEMPLATE "}",
                          path);
  start("fleet-f", in);
  cJSON *res = wait_result("fleet-f");
  assert_string_equal(str(res, "status"), "completed");
  assert_int_equal(num(res, "total"), 5);
  assert_int_equal(num(res, "succeeded"), 3);
  assert_int_equal(num(res, "failed"), 2);
  assert_non_null(strstr(str(record_of(res, "f2"), "error"), "TemplateError"));
  const cJSON *r;
  int bad = 0;
  cJSON_ArrayForEach(r, cJSON_GetObjectItem(res, "items")) if (strncmp(str(r, "key"), "at-byte-", 8) == 0) {
    bad++;
    assert_non_null(strstr(str(r, "error"), "not JSON"));
  }
  assert_int_equal(bad, 1);
  assert_int_equal(runs_of("f2"), 0);
  assert_int_equal(runs_of("f3"), 1);
  cJSON_Delete(res);
  free(in);
  dbx_test_rmrf(dir);
  free(path);
  free(dir);
}

/* Writes lines (each with its newline) to path; starts[i]: the byte offset
 * of line i's first byte. */
static void write_lines(const char *path, const char *const *lines, int n, long long *starts) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  long long at = 0;
  for (int i = 0; i < n; i++) {
    starts[i] = at;
    fputs(lines[i], fp);
    fputc('\n', fp);
    at += (long long)strlen(lines[i]) + 1;
  }
  assert_int_equal(fclose(fp), 0);
}

/* The record named key has error text containing want. */
static void assert_error_has(const cJSON *res, const char *key, const char *want) {
  const char *e = str(record_of(res, key), "error");
  if (strstr(e, want) == NULL) fail_msg("item %s: error \"%s\" lacks \"%s\"", key, e, want);
}

/* Items whose key is empty, missing, a number or holds a control character
 * are named at-byte-<offset of their line's first byte>, the same on every
 * run, also after a line over 256 KiB that ends a page; a key given twice is
 * a DuplicateKey failure of the second line, named by its key and both
 * offsets, never started. */
static void test_fleet_items_file_offsets_and_duplicates(void **st) {
  (void)st;
  counters_reset();
  char *dir = dbx_test_tmpdir("itfleet-offsets");
  char *path = dbx_asprintf("%s/items.jsonl", dir);
  size_t big_n = 3u * 1024 * 1024;
  char *big = malloc(big_n + 1);
  assert_non_null(big);
  memset(big, 'x', big_n);
  big[0] = '"', big[big_n - 1] = '"', big[big_n] = '\0';
  const char *lines[] = {
      "{\"key\":\"d0\",\"ms\":5,\"exit\":0}",   "",
      "{\"key\":\"\",\"ms\":5,\"exit\":0}",     "{\"nokey\":1}",
      "{\"key\":5,\"ms\":5,\"exit\":0}",        "{\"key\":\"a\\u0001b\",\"ms\":5,\"exit\":0}",
      "{\"key\":\"d1\",\"ms\":5,\"exit\":0}",   "{\"key\":\"d0\",\"ms\":5,\"exit\":0}",
      big,                                      "{\"key\":\"\"}",
      "{\"key\":\"d1\",\"ms\":5,\"exit\":0}",
  };
  enum { N = sizeof lines / sizeof lines[0] };
  long long at[N];
  write_lines(path, lines, N, at);
  free(big);
  char *in = dbx_asprintf("{\"items_file\":\"%s\",\"concurrency\":2,\"page_size\":3," TEMPLATE "}",
                          path);
  const char *ids[] = {"fleet-o1", "fleet-o2"}; /* two fleets: the same names */
  for (int run = 0; run < 2; run++) {
    start(ids[run], in);
    cJSON *res = wait_result(ids[run]);
    assert_string_equal(str(res, "status"), "completed");
    assert_int_equal(num(res, "total"), 10);
    assert_int_equal(num(res, "succeeded"), 2);
    assert_int_equal(num(res, "failed"), 8);
    const int bad[] = {2, 3, 4, 5, 8, 9};
    const char *why[] = {"empty", "no string \"key\"", "no string \"key\"", "control character",
                         "longer than 256 KiB", "empty"};
    for (int i = 0; i < 6; i++) {
      char name[48];
      snprintf(name, sizeof name, "at-byte-%lld", at[bad[i]]);
      assert_string_equal(str(record_of(res, name), "status"), "failed");
      assert_error_has(res, name, why[i]);
    }
    int d0 = 0, d1 = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(res, "items")) {
      const char *k = str(r, "key"), *e = cJSON_GetStringValue(cJSON_GetObjectItem(r, "error"));
      int is0 = strcmp(k, "d0") == 0, is1 = strcmp(k, "d1") == 0;
      d0 += is0, d1 += is1;
      if (!(is0 || is1) || strcmp(str(r, "status"), "failed") != 0) continue;
      char want[160];
      snprintf(want, sizeof want, "DuplicateKey: key \"%s\" of the line at byte %lld was given "
               "already by the line at byte %lld", k, is0 ? at[7] : at[10], is0 ? at[0] : at[6]);
      if (e == NULL || strstr(e, want) == NULL) fail_msg("%s: error %s, want %s", k, e, want);
      assert_string_equal(str(r, "workflow_id"), "");
    }
    assert_int_equal(d0, 2);
    assert_int_equal(d1, 2);
    assert_int_equal(runs_of("d0"), run + 1); /* started once per fleet, never for the duplicate */
    assert_int_equal(runs_of("d1"), run + 1);
    assert_replays(ids[run]);
    cJSON_Delete(res);
  }
  free(in);
  dbx_test_rmrf(dir);
  free(path);
  free(dir);
}

/* An items_file that is a directory fails the fleet as a missing one does:
 * ItemsUnreadable naming the path and "Is a directory", no item. */
static void test_fleet_items_file_directory_fails(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("itfleet-dir");
  char *in = dbx_asprintf("{\"items_file\":\"%s\"," TEMPLATE "}", dir);
  start("fleet-dir", in);
  int64_t deadline = dbx_mono_ns() + 60LL * 1000000000LL;
  char *msg = NULL;
  while (msg == NULL && dbx_mono_ns() < deadline) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 5000};
    if (dbx_client_get_history(g_c, "fleet-dir", NULL, &ho, &h, NULL) == DBX_OK && h.n > 0) {
      HistoryEvent *e = h.events[h.n - 1];
      if (e->event_type != ET(WORKFLOW_EXECUTION_FAILED))
        fail_msg("fleet-dir closed with event type %d, want Failed", (int)e->event_type);
      const Failure *f = e->workflow_execution_failed_event_attributes->failure;
      assert_string_equal(f->application_failure_info->type, "ItemsUnreadable");
      msg = dbx_strdup(f->message);
    }
    dbx_client_history_cleanup(&h);
  }
  if (msg == NULL) fail_msg("fleet-dir did not close");
  char *want = dbx_asprintf("%s: Is a directory", dir);
  if (strstr(msg, want) == NULL) fail_msg("message \"%s\" lacks \"%s\"", msg, want);
  free(want);
  free(msg);
  free(in);
  dbx_test_rmrf(dir);
  free(dir);
}

/* Cancelled before its items file was read to the end, a fleet does not
 * count the unread lines as started: total and not_started are null, and
 * file_not_read_to_end says why. */
static void test_fleet_cancel_unread_file_not_counted(void **st) {
  (void)st;
  counters_reset();
  char *dir = dbx_test_tmpdir("itfleet-unread");
  char *path = dbx_asprintf("%s/items.jsonl", dir);
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  for (int i = 0; i < 50; i++) fprintf(fp, "{\"key\":\"u%d\",\"ms\":60000,\"exit\":0}\n", i);
  assert_int_equal(fclose(fp), 0);
  char *in = dbx_asprintf("{\"items_file\":\"%s\",\"concurrency\":2,\"page_size\":5," TEMPLATE "}",
                          path);
  start("fleet-u", in);
  int64_t deadline = dbx_mono_ns() + 30LL * 1000000000LL;
  while ((runs_of("u0") == 0 || runs_of("u1") == 0) && dbx_mono_ns() < deadline) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(runs_of("u1"), 1);
  assert_int_equal(dbx_client_cancel(g_c, "fleet-u", NULL, "test", NULL), DBX_OK);
  cJSON *res = wait_result("fleet-u");
  assert_string_equal(str(res, "status"), "cancelled");
  assert_int_equal(num(res, "cancelled"), 2);
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(res, "total")));
  assert_true(cJSON_IsNull(cJSON_GetObjectItem(res, "not_started")));
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(res, "file_not_read_to_end")));
  assert_int_equal(live_sandboxes(), 0);
  cJSON_Delete(res);
  free(in);
  dbx_test_rmrf(dir);
  free(path);
  free(dir);
}

/* A second worker whose sandbox activities go through quotas (2 live, 4
 * creates per 1.5 s): a fleet at concurrency 5 is throttled to them, and no
 * item fails for it. */
static void test_fleet_throttled_by_quotas(void **st) {
  (void)st;
  counters_reset();
  dbx_memdrv *mem = NULL;
  dbx_memdrv_opts mo = {.exec = on_exec};
  assert_int_equal(dbx_memdrv_create(&mo, &mem), DBX_OK);
  dbx_quota *q = NULL;
  dbx_quota_opts qo = {.max_live = 2, .creates_per_minute = 4, .window_ms = 1500};
  assert_int_equal(dbx_quota_open(dbx_memdrv_driver(mem), &qo, &q), DBX_OK);
  dbx_sandbox_acts *acts = NULL;
  assert_int_equal(dbx_sandbox_acts_create(dbx_quota_driver(q), &acts), DBX_OK);
  char *wdir = dbx_test_tmpdir("itfleet-wrk2"), *err = NULL;
  dbx_worker_opts o = {.address = g_addr, .task_queue = "fleetq2", .db_dir = wdir, .no_sync = 1,
                       .activity_slots = 16};
  dbx_worker *w = NULL;
  assert_int_equal(dbx_worker_create(&o, &w, &err), DBX_OK);
  for (size_t i = 0; dbx_workflows_builtin[i]; i++)
    assert_int_equal(dbx_worker_register_workflow(w, dbx_workflows_builtin[i]), DBX_OK);
  assert_int_equal(dbx_sandbox_register_all(w, acts), DBX_OK);
  assert_int_equal(dbx_cli_fleet_acts_register(g_facts, w), DBX_OK);
  assert_int_equal(dbx_worker_start(w), DBX_OK);

  char *items = items_json("q", 8, 600, -1);
  char *in = dbx_asprintf("{\"items\":%s,\"concurrency\":5,\"template\":{\"input\":{\"sandbox\":{},"
                          "\"steps\":[{\"name\":\"work\",\"kind\":\"exec\",\"command\":"
                          "\"work {{key}} {{ms}} {{exit}}\"}]}}}", items);
  dbx_client_start_opts so = {.workflow_id = "fleet-q", .workflow_type = "durabox.Fleet",
                              .task_queue = "fleetq2", .input_json = in};
  assert_int_equal(dbx_client_start_workflow(g_c, &so, NULL, NULL), DBX_OK);
  cJSON *res = wait_result("fleet-q");
  assert_string_equal(str(res, "status"), "completed");
  assert_int_equal(num(res, "succeeded"), 8);
  assert_int_equal(num(res, "failed"), 0);
  assert_in_range(g_max_at_exec, 1, 2); /* 5 children, 2 sandboxes at most */
  int peak = 0;
  int64_t waited = 0;
  dbx_quota_stats(q, &peak, &waited);
  assert_int_equal(peak, 2);
  assert_true(waited > 0);
  /* 8 creates at 4 per 1.5 s: the last starts 1.5 s after the first */
  assert_true(num(res, "duration_ms") >= 1500);
  assert_int_equal(live_in(dbx_memdrv_driver(mem)), 0);
  cJSON_Delete(res);
  free(in);
  free(items);
  dbx_worker_stop(w, 1000);
  dbx_worker_destroy(w);
  dbx_sandbox_acts_destroy(acts);
  dbx_quota_close(q);
  dbx_memdrv_destroy(mem);
  dbx_test_rmrf(wdir);
  free(wdir);
}

static void test_fleet_bad_input_fails(void **st) {
  (void)st;
  char err[256];
  assert_int_equal(dbx_fleet_validate("{\"template\":{}}", 15, err, sizeof err), -1);
  assert_non_null(strstr(err, "exactly one of"));
  const char *dup = "{\"items\":[{\"key\":\"a\"},{\"key\":\"a\"}],\"template\":{}}";
  assert_int_equal(dbx_fleet_validate(dup, strlen(dup), err, sizeof err), -1);
  assert_non_null(strstr(err, "given twice"));
  const char *conc = "{\"items\":[],\"template\":{},\"concurrency\":0}";
  assert_int_equal(dbx_fleet_validate(conc, strlen(conc), err, sizeof err), -1);
  assert_non_null(strstr(err, "concurrency"));
  const char *ok = "{\"items\":[{\"key\":\"a\"}],\"template\":{\"input\":{}}}";
  assert_int_equal(dbx_fleet_validate(ok, strlen(ok), err, sizeof err), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fleet_bad_input_fails),
      cmocka_unit_test(test_fleet_concurrency_bounded_and_output),
      cmocka_unit_test(test_fleet_continue_as_new_keeps_each_item_once),
      cmocka_unit_test(test_fleet_cancel_leaves_no_sandbox),
      cmocka_unit_test(test_fleet_rerun_skips_succeeded),
      cmocka_unit_test(test_fleet_items_file_and_bad_items),
      cmocka_unit_test(test_fleet_items_file_offsets_and_duplicates),
      cmocka_unit_test(test_fleet_items_file_directory_fails),
      cmocka_unit_test(test_fleet_cancel_unread_file_not_counted),
      cmocka_unit_test(test_fleet_throttled_by_quotas),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
