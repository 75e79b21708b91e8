/* Integration tests of the embedded service under LMDB faults, with real
 * LMDB files and real processes (docs/architecture.md "Promises and
 * where they live"):
 * - a tiny map that fills mid-workflow: it grows while workflows complete;
 *   past the ceiling a write is RESOURCE_EXHAUSTED "storage full" and reads
 *   (Describe, GetHistory, List) still answer with everything written;
 * - 200 processes SIGKILLed while holding read transactions on the
 *   service's store: a live service keeps committing (the store clears the
 *   dead readers when the map fills instead of growing to its ceiling), and
 *   so does a restarted one (cleared at open);
 * - the disk filling up (a 2 MiB tmpfs): writes fail with a retryable
 *   status that says the storage is full, reads go on, and after space is
 *   freed new writes succeed and every acknowledged event is intact.
 * - a durable timer due while the store cannot take its change: held back
 *   and retried after a pause that doubles, then fired once.
 * Stale readers are this binary (argv[0]) run again as `it_lmdb_faults --stale-reader
 * DIR MAP_BYTES read|hold` (a fresh process that opens the store through
 * store/, never a handle inherited across fork). */
#define _GNU_SOURCE
#include "tests/svc_client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/util.h"
#include "service/service.h"
#include "store/store.h"

extern char **environ;

#define NS "default"
#define CALL_MS 10000
#define N_READERS 200

static char g_self[4096]; /* this test binary (argv[0], resolved): /proc/self/exe is valgrind's under valgrind */

/* ------------------------------------------------------------ helpers */

static dbx_service *svc_start(const char *db, size_t map, size_t ceiling, int no_sync) {
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.db_path = db;
  o.map_size_bytes = map;
  o.map_ceiling_bytes = ceiling;
  o.no_sync = no_sync;
  o.long_poll_ms = 2000;
  dbx_service *s = NULL;
  char *err = NULL;
  if (dbx_service_start(&o, &s, &err) != DBX_OK) fail_msg("dbx_service_start: %s", err ? err : "?");
  return s;
}

/* StartWorkflowExecution with a JSON string input of about input_bytes.
 * Returns the status; *run_id (malloc'd) on OK; *msg (malloc'd) otherwise. */
static int start_wf(dbx_rpc_channel *ch, const char *wid, const char *tq_name, size_t input_bytes,
                    char **run_id, char **msg) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Temporal__Api__Common__V1__Payload__MetadataEntry enc =
      INIT(TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY);
  Temporal__Api__Common__V1__Payload__MetadataEntry *md[1] = {&enc};
  Payload *pl[1] = {&p};
  enc.key = "encoding";
  enc.value.data = (uint8_t *)"json/plain";
  enc.value.len = 10;
  char *data = malloc(input_bytes + 2);
  assert_non_null(data);
  memset(data, 'x', input_bytes + 2);
  data[0] = data[input_bytes + 1] = '"';
  p.metadata = md;
  p.n_metadata = 1;
  p.data.data = (uint8_t *)data;
  p.data.len = input_bytes + 2;
  ps.payloads = pl;
  ps.n_payloads = 1;
  wt.name = "it.Workflow";
  tq.name = (char *)tq_name;
  q.namespace_ = NS;
  q.workflow_id = (char *)wid;
  q.workflow_type = &wt;
  q.task_queue = &tq;
  q.input = &ps;
  q.identity = "it";
  q.request_id = (char *)wid;
  StartWorkflowExecutionResponse *r = NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D, CALL_MS,
                         (void **)&r, &raw);
  free(data);
  *run_id = NULL;
  *msg = NULL;
  if (st == DBX_GRPC_OK) {
    *run_id = strdup(r->run_id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else {
    *msg = strdup(raw.message ? raw.message : "");
  }
  dbx_rpc_result_cleanup(&raw);
  return st;
}

/* Poll one workflow task of tq (one must come) and complete the workflow.
 * Returns the first non-OK status (its message in *msg, malloc'd). */
static int poll_and_complete(dbx_rpc_channel *ch, const char *tq_name, char **msg) {
  *msg = NULL;
  PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)tq_name;
  q.namespace_ = NS;
  q.task_queue = &tq;
  q.identity = "it-worker";
  PollWorkflowTaskQueueResponse *t = NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "PollWorkflowTaskQueue", &q.base, &PollWorkflowTaskQueueResponse__D, CALL_MS,
                         (void **)&t, &raw);
  if (st != DBX_GRPC_OK) {
    *msg = strdup(raw.message ? raw.message : "");
    dbx_rpc_result_cleanup(&raw);
    return st;
  }
  dbx_rpc_result_cleanup(&raw);
  if (t->task_token.len == 0) fail_msg("no workflow task on %s", tq_name);
  RespondWorkflowTaskCompletedRequest c =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  cmd.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  cmd.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  cmd.complete_workflow_execution_command_attributes = &a;
  Command *cmds[1] = {&cmd};
  c.namespace_ = NS;
  c.task_token = t->task_token;
  c.commands = cmds;
  c.n_commands = 1;
  c.identity = "it-worker";
  memset(&raw, 0, sizeof raw);
  st = dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &c.base, NULL, CALL_MS, NULL, &raw);
  if (st != DBX_GRPC_OK) *msg = strdup(raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  return st;
}

/* The whole history of a run as the concatenation of its packed events
 * (expects OK). malloc'd; length in *len. */
static uint8_t *history_blob(dbx_rpc_channel *ch, const char *wid, const char *rid, size_t *len) {
  dbx_svct_history h;
  dbx_svct_history_get(ch, wid, rid, &h);
  size_t n = 0;
  for (size_t i = 0; i < h.n; i++) n += protobuf_c_message_get_packed_size(&h.events[i]->base);
  uint8_t *b = malloc(n + 1);
  assert_non_null(b);
  size_t off = 0;
  for (size_t i = 0; i < h.n; i++) off += protobuf_c_message_pack(&h.events[i]->base, b + off);
  assert_true(h.n >= 2);
  dbx_svct_history_cleanup(&h);
  *len = n;
  return b;
}

/* ListWorkflowExecutions (empty query); expects OK; returns how many. */
static size_t list_count(dbx_rpc_channel *ch) {
  ListWorkflowExecutionsRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_REQUEST);
  q.namespace_ = NS;
  q.page_size = 1000;
  ListWorkflowExecutionsResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "ListWorkflowExecutions", &q.base, &ListWorkflowExecutionsResponse__D,
                                 CALL_MS, (void **)&r, NULL),
                   DBX_GRPC_OK);
  size_t n = r->n_executions;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return n;
}

/* One acknowledged workflow and its history as read right after. */
typedef struct {
  char wid[64];
  char *rid;
  uint8_t *blob;
  size_t len;
  int completed;
} acked;

static void acked_check_all(dbx_rpc_channel *ch, acked *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int st = dbx_svct_workflow_status(ch, a[i].wid, a[i].rid);
    assert_int_equal(st, a[i].completed ? WS(COMPLETED) : WS(RUNNING));
    size_t len = 0;
    uint8_t *b = history_blob(ch, a[i].wid, a[i].rid, &len);
    if (len != a[i].len || memcmp(b, a[i].blob, len) != 0)
      fail_msg("history of %s changed: %zu bytes, was %zu", a[i].wid, len, a[i].len);
    free(b);
  }
}

static void acked_free(acked *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(a[i].rid);
    free(a[i].blob);
  }
}

/* The service's own store handle (dbx_store_open shares it by path). */
static dbx_store *shared_store(const char *db) {
  dbx_store_opts o = {.path = db};
  dbx_store *s = NULL;
  assert_int_equal(dbx_store_open(&o, &s), DBX_OK);
  return s;
}

/* ------------------------------------------------------------ stale readers */

/* Child mode: open the store, begin a read transaction (mode "read") or
 * not ("hold"), say 'R' on stdout, wait to be killed. */
static int stale_reader_main(const char *dir, const char *map, const char *mode) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dbx_store_opts o = {.path = dir, .map_size_bytes = strtoull(map, NULL, 10)};
  dbx_store *s = NULL;
  dbx_txn *t = NULL;
  if (dbx_store_open(&o, &s) != DBX_OK) return 11;
  if (strcmp(mode, "read") == 0 && dbx_store_read_begin(s, &t) != DBX_OK) return 12;
  if (write(1, "R", 1) != 1) return 13;
  for (;;) pause();
}

/* Spawn n children of `mode` on db; returns once each has said 'R'. */
static void readers_spawn(const char *db, size_t map, const char *mode, pid_t *pids, int n) {
  int pfd[2];
  assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
  char mapstr[32];
  snprintf(mapstr, sizeof mapstr, "%zu", map);
  char *argv[] = {"it_lmdb_faults", "--stale-reader", (char *)db, mapstr, (char *)mode, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  for (int i = 0; i < n; i++) {
    int rc = posix_spawn(&pids[i], g_self, &fa, NULL, argv, environ);
    if (rc != 0) fail_msg("posix_spawn: %s", strerror(rc));
  }
  posix_spawn_file_actions_destroy(&fa);
  close(pfd[1]);
  int got = 0;
  while (got < n) {
    struct pollfd p = {.fd = pfd[0], .events = POLLIN};
    if (poll(&p, 1, 30000) <= 0) fail_msg("only %d of %d stale readers started", got, n);
    char buf[256];
    ssize_t r = read(pfd[0], buf, sizeof buf);
    if (r <= 0) fail_msg("stale readers: pipe closed after %d of %d (one failed to open)", got, n);
    got += (int)r;
  }
  close(pfd[0]);
}

static void readers_kill(pid_t *pids, int n) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(kill(pids[i], SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
  }
}

/* ------------------------------------------------------------ tests */

#define TINY_MAP (256u << 10)
#define TINY_CEILING (1u << 20)

static void test_lmdb_faults_tiny_map_grows_then_full(void **state) {
  (void)state;
  char *db = dbx_test_tmpdir("dbx-lmdbf");
  dbx_service *svc = svc_start(db, TINY_MAP, TINY_CEILING, 1);
  dbx_store *st = shared_store(db);
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(svc));
  assert_int_equal(dbx_store_map_size(st), TINY_MAP);
  acked a[128];
  size_t n = 0;
  int full_status = DBX_GRPC_OK, completed_grown = 0;
  char *full_msg = NULL;
  for (int i = 0; i < 128 && full_status == DBX_GRPC_OK; i++) {
    snprintf(a[n].wid, sizeof a[n].wid, "tiny-%03d", i);
    char *rid = NULL;
    full_status = start_wf(ch, a[n].wid, "tiny", 24 << 10, &rid, &full_msg);
    if (full_status != DBX_GRPC_OK) break;
    a[n].rid = rid;
    a[n].completed = 0;
    a[n].blob = NULL;
    full_status = poll_and_complete(ch, "tiny", &full_msg);
    a[n].completed = full_status == DBX_GRPC_OK;
    if (a[n].completed && dbx_store_map_size(st) > TINY_MAP) completed_grown++;
    a[n].blob = history_blob(ch, a[n].wid, a[n].rid, &a[n].len);
    n++;
  }
  if (full_status != DBX_GRPC_RESOURCE_EXHAUSTED)
    fail_msg("after %zu workflows: status %d (%s), want RESOURCE_EXHAUSTED", n, full_status,
             full_msg ? full_msg : "never failed");
  assert_non_null(strstr(full_msg, "storage full"));
  assert_true(completed_grown > 0);                      /* grew, and kept completing */
  assert_int_equal(dbx_store_map_size(st), TINY_CEILING); /* then stopped at the ceiling */
  assert_true(n >= 2);
  /* reads keep answering with everything acknowledged before */
  acked_check_all(ch, a, n);
  assert_int_equal(list_count(ch), n);
  free(full_msg);
  acked_free(a, n);
  dbx_rpc_channel_destroy(ch);
  dbx_store_close(st);
  dbx_service_stop(svc);
  dbx_test_rmrf(db);
  free(db);
}

/* Start and complete workflows "<prefix>-NNN" on tq, expecting OK. */
static void run_workflows(dbx_rpc_channel *ch, const char *prefix, int n, size_t input_bytes) {
  for (int i = 0; i < n; i++) {
    char wid[64], *rid = NULL, *msg = NULL;
    snprintf(wid, sizeof wid, "%s-%03d", prefix, i);
    int s = start_wf(ch, wid, prefix, input_bytes, &rid, &msg);
    if (s != DBX_GRPC_OK) fail_msg("start %s: status %d %s", wid, s, msg);
    s = poll_and_complete(ch, prefix, &msg);
    if (s != DBX_GRPC_OK) fail_msg("complete %s: status %d %s", wid, s, msg);
    assert_int_equal(dbx_svct_workflow_status(ch, wid, rid), WS(COMPLETED));
    free(rid);
  }
}

#define LIVE_MAP (512u << 10)
#define LIVE_CEILING (2u << 20)

/* Readers killed while the service runs pin every page freed after their
 * snapshot; the churn below (about 300 commits) needs far more than the
 * 2 MiB ceiling unless those pages are reused, while its live data is a few
 * hundred KiB. */
static void test_lmdb_faults_dead_readers_live_service(void **state) {
  (void)state;
  char *db = dbx_test_tmpdir("dbx-lmdbf");
  dbx_service *svc = svc_start(db, LIVE_MAP, LIVE_CEILING, 1);
  dbx_store *st = shared_store(db);
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(svc));
  run_workflows(ch, "before", 2, 64);
  assert_int_equal(dbx_store_readers_cleared(st), 0);
  pid_t pids[N_READERS];
  readers_spawn(db, LIVE_MAP, "read", pids, N_READERS);
  readers_kill(pids, N_READERS);
  run_workflows(ch, "live", 100, 64);
  assert_int_equal(dbx_store_readers_cleared(st), N_READERS);
  assert_int_equal(list_count(ch), 102);
  dbx_rpc_channel_destroy(ch);
  dbx_store_close(st);
  dbx_service_stop(svc);
  dbx_test_rmrf(db);
  free(db);
}

/* The same readers, then a restart: the new service clears them at open
 * (a holder process keeps the environment open across the restart, as a
 * CLI or second reader would; without one LMDB resets the whole table). */
static void test_lmdb_faults_dead_readers_restarted_service(void **state) {
  (void)state;
  char *db = dbx_test_tmpdir("dbx-lmdbf");
  dbx_service *svc = svc_start(db, LIVE_MAP, LIVE_CEILING, 0);
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(svc));
  run_workflows(ch, "before", 2, 64);
  pid_t holder;
  readers_spawn(db, LIVE_MAP, "hold", &holder, 1);
  pid_t pids[N_READERS];
  readers_spawn(db, LIVE_MAP, "read", pids, N_READERS);
  readers_kill(pids, N_READERS);
  dbx_rpc_channel_destroy(ch);
  dbx_service_stop(svc);

  svc = svc_start(db, LIVE_MAP, LIVE_CEILING, 0);
  dbx_store *st = shared_store(db);
  assert_int_equal(dbx_store_readers_cleared(st), N_READERS);
  ch = dbx_svct_connect(dbx_service_port(svc));
  run_workflows(ch, "after", 3, 64);
  assert_int_equal(list_count(ch), 5);
  readers_kill(&holder, 1);
  dbx_rpc_channel_destroy(ch);
  dbx_store_close(st);
  dbx_service_stop(svc);
  dbx_test_rmrf(db);
  free(db);
}

static void write_filler(const char *path, size_t bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  char buf[4096];
  memset(buf, 'f', sizeof buf);
  for (size_t off = 0; off < bytes; off += sizeof buf)
    assert_int_equal(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
  close(fd);
}

static char *g_mnt; /* the tmpfs mount point, unmounted by the group teardown too */

static void unmount_tmpfs(void) {
  if (g_mnt == NULL) return;
  if (umount(g_mnt) != 0) umount2(g_mnt, MNT_DETACH);
  dbx_test_rmrf(g_mnt);
  free(g_mnt);
  g_mnt = NULL;
}

static void test_lmdb_faults_disk_full(void **state) {
  (void)state;
  char *mnt = dbx_test_tmpdir("dbx-lmdbf-mnt");
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=2m") != 0) {
    int e = errno;
    dbx_test_rmrf(mnt);
    free(mnt);
    fprintf(stderr, "mount tmpfs: %s: cannot fill a disk here\n", strerror(e));
    skip();
  }
  g_mnt = mnt;
  char db[4200], filler[4200];
  snprintf(db, sizeof db, "%s/db", mnt);
  snprintf(filler, sizeof filler, "%s/filler", mnt);
  write_filler(filler, 512u << 10);
  dbx_service *svc = svc_start(db, 16u << 20, 0, 0);
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(svc));
  acked a[64];
  size_t n = 0;
  int full_status = DBX_GRPC_OK;
  char *full_msg = NULL;
  for (int i = 0; i < 64; i++) {
    snprintf(a[n].wid, sizeof a[n].wid, "disk-%03d", i);
    full_status = start_wf(ch, a[n].wid, "disk", 48 << 10, &a[n].rid, &full_msg);
    if (full_status != DBX_GRPC_OK) break;
    a[n].completed = 0;
    a[n].blob = history_blob(ch, a[n].wid, a[n].rid, &a[n].len);
    n++;
  }
  if (full_status != DBX_GRPC_RESOURCE_EXHAUSTED && full_status != DBX_GRPC_UNAVAILABLE)
    fail_msg("after %zu workflows: status %d (%s), want RESOURCE_EXHAUSTED or UNAVAILABLE", n, full_status,
             full_msg ? full_msg : "never failed");
  if (strstr(full_msg, "storage full") == NULL && strstr(full_msg, "No space") == NULL)
    fail_msg("message does not say the storage is full: %s", full_msg);
  assert_true(n >= 2);
  /* the service stays up and serves reads */
  acked_check_all(ch, a, n);
  assert_int_equal(list_count(ch), n);
  /* free space in the same file system: writes succeed again */
  assert_int_equal(unlink(filler), 0);
  char *rid = NULL, *msg = NULL;
  int s = start_wf(ch, "disk-after", "disk-after", 48 << 10, &rid, &msg);
  if (s != DBX_GRPC_OK) fail_msg("start after freeing space: status %d %s", s, msg);
  s = poll_and_complete(ch, "disk-after", &msg);
  if (s != DBX_GRPC_OK) fail_msg("complete after freeing space: status %d %s", s, msg);
  assert_int_equal(dbx_svct_workflow_status(ch, "disk-after", rid), WS(COMPLETED));
  acked_check_all(ch, a, n);
  /* and after a restart on the same files */
  dbx_rpc_channel_destroy(ch);
  dbx_service_stop(svc);
  svc = svc_start(db, 16u << 20, 0, 0);
  ch = dbx_svct_connect(dbx_service_port(svc));
  acked_check_all(ch, a, n);
  assert_int_equal(list_count(ch), n + 1);
  free(rid);
  free(full_msg);
  acked_free(a, n);
  dbx_rpc_channel_destroy(ch);
  dbx_service_stop(svc);
  unmount_tmpfs();
}

static int64_t event_ms(const HistoryEvent *e) {
  return e->event_time ? (int64_t)e->event_time->seconds * 1000 + e->event_time->nanos / 1000000 : 0;
}

/* A durable timer that comes due while its change cannot be stored (the
 * store at its ceiling: each of the next two writes finds the map full) is
 * held back and retried after a pause that doubles (1 s, then 2 s), not
 * retried at once in a loop that logs an error each time; when the store
 * takes the change again the timer fires, once. The engine's writes are
 * counted at the failpoint service.commit.before (probability 0: counted,
 * never fired); the test makes no call while the timer is held, so every
 * write counted then is a timer batch. */
static void test_lmdb_faults_timer_due_in_a_full_store_is_retried_after_a_pause(void **state) {
  (void)state;
  assert_int_equal(dbx_failpoint_configure("service.commit.before=log@0", 1, NULL, NULL), DBX_OK);
  char *db = dbx_test_tmpdir("dbx-lmdbf");
  dbx_service *svc = svc_start(db, TINY_CEILING, TINY_CEILING, 1); /* no room to grow */
  dbx_rpc_channel *ch = dbx_svct_connect(dbx_service_port(svc));
  char *rid = dbx_svct_workflow_start(ch, "timer-held", "timer-held");
  PollWorkflowTaskQueueResponse *t = dbx_svct_wft_poll(ch, "timer-held", CALL_MS);
  assert_true(t->task_token.len > 0);
  dbx_svct_wft_start_timer(ch, t->task_token, "t1", 2);
  protobuf_c_message_free_unpacked(&t->base, NULL);
  uint64_t before = dbx_failpoint_hits("service.commit.before");
  dbx_store_test_inject_map_full(2);
  /* the attempts: at the due time (fails), 1 s later (fails), 2 s after
   * that (commits); without the pause all three within milliseconds */
  int64_t deadline = dbx_mono_ns() + 20 * 1000000000LL;
  while (dbx_failpoint_hits("service.commit.before") - before < 3 && dbx_mono_ns() < deadline)
    usleep(20000);
  assert_int_equal(dbx_failpoint_hits("service.commit.before") - before, 3);
  assert_true(dbx_svct_history_wait_for(ch, "timer-held", rid, ET(TIMER_FIRED), CALL_MS));
  dbx_svct_history h;
  dbx_svct_history_get(ch, "timer-held", rid, &h);
  assert_int_equal(dbx_svct_history_count(&h, ET(TIMER_FIRED)), 1);
  int64_t started_ms = 0, fired_ms = 0;
  for (size_t i = 0; i < h.n; i++) {
    if (h.events[i]->event_type == ET(TIMER_STARTED)) started_ms = event_ms(h.events[i]);
    if (h.events[i]->event_type == ET(TIMER_FIRED)) fired_ms = event_ms(h.events[i]);
  }
  dbx_svct_history_cleanup(&h);
  /* due 2 s after it started, then held 1 s and 2 s */
  if (fired_ms - started_ms < 5000)
    fail_msg("the timer fired %lld ms after it started; want at least 5000 (2 s, then pauses of 1 and 2 s)",
             (long long)(fired_ms - started_ms));
  dbx_failpoint_reset();
  free(rid);
  dbx_rpc_channel_destroy(ch);
  dbx_service_stop(svc);
  dbx_test_rmrf(db);
  free(db);
}

static int group_setup(void **state) {
  (void)state;
  dbx_rpc_global_init();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  unmount_tmpfs(); /* after a failed assertion (the service is left running then) */
  dbx_rpc_global_shutdown();
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--stale-reader") == 0)
    return stale_reader_main(argv[2], argv[3], argv[4]);
  if (realpath(argv[0], g_self) == NULL) snprintf(g_self, sizeof g_self, "/proc/self/exe");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lmdb_faults_tiny_map_grows_then_full),
      cmocka_unit_test(test_lmdb_faults_dead_readers_live_service),
      cmocka_unit_test(test_lmdb_faults_dead_readers_restarted_service),
      cmocka_unit_test(test_lmdb_faults_disk_full),
      cmocka_unit_test(test_lmdb_faults_timer_due_in_a_full_store_is_retried_after_a_pause),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
