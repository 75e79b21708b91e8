/* Service test client (see svc_client.h).
 *
 * Thin typed wrappers over dbx_rpc_unary: requests are built on the stack
 * with the INIT() initialisers of protos/pb.h, packed into a malloc'd
 * buffer, and replies unpacked with protobuf-c's default allocator. Spawned
 * servers are kept in a small static registry so a group teardown can kill
 * and reap them even after a failed assertion longjmp'd out of a test body. */
#define _GNU_SOURCE
#include "tests/svc_client.h"

#include "base/fs.h"
#include "worker/client.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NS "default"
#define CALL_TIMEOUT_MS 10000

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ calls */

int dbx_svct_call(dbx_rpc_channel *ch, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_d, int64_t timeout_ms, void **resp,
                  dbx_rpc_result *raw) {
  if (resp) *resp = NULL;
  size_t n = 0;
  uint8_t *buf = dbx_pb_pack(req, &n);
  assert_non_null(buf);
  dbx_rpc_result local;
  memset(&local, 0, sizeof local);
  dbx_rpc_result *r = raw ? raw : &local;
  dbx_err rc = dbx_rpc_unary(ch, method, buf, n, timeout_ms, 0, NULL, r);
  free(buf);
  if (rc != DBX_OK) fail_msg("%s: dbx_rpc_unary returned %s", method, dbx_strerror(rc));
  int status = r->status;
  if (status == DBX_GRPC_OK && resp && resp_d) {
    *resp = protobuf_c_message_unpack(resp_d, NULL, r->response_len, r->response);
    if (*resp == NULL) fail_msg("%s: reply does not decode as %s", method, resp_d->name);
  }
  if (raw == NULL) dbx_rpc_result_cleanup(&local);
  return status;
}

dbx_rpc_channel *dbx_svct_connect(int port) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  dbx_rpc_channel_opts o;
  memset(&o, 0, sizeof o);
  o.target = target;
  o.namespace_ = NS;
  dbx_rpc_channel *ch = NULL;
  assert_int_equal(dbx_rpc_channel_create(&o, &ch), DBX_OK);
  GetSystemInfoRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
  uint8_t buf[16];
  size_t n = protobuf_c_message_pack(&q.base, buf);
  dbx_rpc_result r;
  memset(&r, 0, sizeof r);
  assert_int_equal(dbx_rpc_unary(ch, "GetSystemInfo", buf, n, 15000, 1, NULL, &r), DBX_OK);
  if (r.status != DBX_GRPC_OK)
    fail_msg("GetSystemInfo on %s: status %d %s", target, r.status, r.message ? r.message : "");
  dbx_rpc_result_cleanup(&r);
  return ch;
}

char *dbx_svct_detail_type_url(const dbx_rpc_result *r) {
  if (r->details == NULL || r->details_len == 0) return NULL;
  RpcStatus *st = (RpcStatus *)protobuf_c_message_unpack(&RpcStatus__D, NULL, r->details_len, r->details);
  if (st == NULL) return NULL;
  char *url = NULL;
  if (st->n_details > 0 && st->details[0]->type_url) url = strdup(st->details[0]->type_url);
  protobuf_c_message_free_unpacked(&st->base, NULL);
  return url;
}

int dbx_svct_ends_with(const char *s, const char *suffix) {
  if (s == NULL || suffix == NULL) return 0;
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ------------------------------------------------------------ workflows */

char *dbx_svct_workflow_start(dbx_rpc_channel *ch, const char *workflow_id, const char *task_queue) {
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  wt.name = "it.Workflow";
  tq.name = (char *)task_queue;
  q.namespace_ = NS;
  q.workflow_id = (char *)workflow_id;
  q.workflow_type = &wt;
  q.task_queue = &tq;
  q.identity = "it";
  StartWorkflowExecutionResponse *r = NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "StartWorkflowExecution", &q.base, &StartWorkflowExecutionResponse__D,
                         CALL_TIMEOUT_MS, (void **)&r, &raw);
  if (st != DBX_GRPC_OK) fail_msg("start %s: status %d %s", workflow_id, st, raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
  assert_true(r->run_id[0] != '\0');
  char *run_id = strdup(r->run_id);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return run_id;
}

int64_t dbx_svct_workflow_count(dbx_rpc_channel *ch) {
  CountWorkflowExecutionsRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_REQUEST);
  q.namespace_ = NS;
  CountWorkflowExecutionsResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "CountWorkflowExecutions", &q.base, &CountWorkflowExecutionsResponse__D,
                                 CALL_TIMEOUT_MS, (void **)&r, NULL),
                   DBX_GRPC_OK);
  int64_t n = r->count;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return n;
}

int dbx_svct_workflow_status(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id) {
  DescribeWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)workflow_id;
  we.run_id = (char *)(run_id ? run_id : "");
  q.namespace_ = NS;
  q.execution = &we;
  DescribeWorkflowExecutionResponse *r = NULL;
  assert_int_equal(dbx_svct_call(ch, "DescribeWorkflowExecution", &q.base, &DescribeWorkflowExecutionResponse__D,
                                 CALL_TIMEOUT_MS, (void **)&r, NULL),
                   DBX_GRPC_OK);
  assert_non_null(r->workflow_execution_info);
  int status = (int)r->workflow_execution_info->status;
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return status;
}

/* ------------------------------------------------------------ worker moves */

PollWorkflowTaskQueueResponse *dbx_svct_wft_poll(dbx_rpc_channel *ch, const char *task_queue,
                                                 int64_t timeout_ms) {
  PollWorkflowTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)task_queue;
  q.namespace_ = NS;
  q.task_queue = &tq;
  q.identity = "it-workflow-worker";
  PollWorkflowTaskQueueResponse *r = NULL;
  int st = dbx_svct_call(ch, "PollWorkflowTaskQueue", &q.base, &PollWorkflowTaskQueueResponse__D, timeout_ms,
                         (void **)&r, NULL);
  if (st != DBX_GRPC_OK) fail_msg("PollWorkflowTaskQueue %s: status %d", task_queue, st);
  return r;
}

PollActivityTaskQueueResponse *dbx_svct_activity_poll(dbx_rpc_channel *ch, const char *task_queue,
                                                      int64_t timeout_ms) {
  PollActivityTaskQueueRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = (char *)task_queue;
  q.namespace_ = NS;
  q.task_queue = &tq;
  q.identity = "it-activity-worker";
  PollActivityTaskQueueResponse *r = NULL;
  int st = dbx_svct_call(ch, "PollActivityTaskQueue", &q.base, &PollActivityTaskQueueResponse__D, timeout_ms,
                         (void **)&r, NULL);
  if (st != DBX_GRPC_OK) fail_msg("PollActivityTaskQueue %s: status %d", task_queue, st);
  return r;
}

static void wft_respond(dbx_rpc_channel *ch, ProtobufCBinaryData token, Command *cmd) {
  RespondWorkflowTaskCompletedRequest q =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
  Command *cmds[1] = {cmd};
  q.namespace_ = NS;
  q.task_token = token;
  q.commands = cmds;
  q.n_commands = 1;
  q.identity = "it-workflow-worker";
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "RespondWorkflowTaskCompleted", &q.base, NULL, CALL_TIMEOUT_MS, NULL, &raw);
  if (st != DBX_GRPC_OK)
    fail_msg("RespondWorkflowTaskCompleted: status %d %s", st, raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
}

void dbx_svct_wft_schedule_activity(dbx_rpc_channel *ch, ProtobufCBinaryData token,
                                    const char *activity_id, const char *task_queue,
                                    int64_t start_to_close_s, int max_attempts) {
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  ScheduleActivityTaskCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
  ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration st2c = INIT(GOOGLE__PROTOBUF__DURATION);
  RetryPolicy rp = INIT(TEMPORAL__API__COMMON__V1__RETRY_POLICY);
  at.name = "it.Activity";
  tq.name = (char *)task_queue;
  st2c.seconds = start_to_close_s;
  rp.maximum_attempts = max_attempts;
  a.activity_id = (char *)activity_id;
  a.activity_type = &at;
  a.task_queue = &tq;
  a.start_to_close_timeout = &st2c;
  if (max_attempts > 0) a.retry_policy = &rp;
  cmd.command_type = CT(SCHEDULE_ACTIVITY_TASK);
  cmd.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
  cmd.schedule_activity_task_command_attributes = &a;
  wft_respond(ch, token, &cmd);
}

void dbx_svct_wft_start_timer(dbx_rpc_channel *ch, ProtobufCBinaryData token, const char *timer_id,
                              int64_t seconds) {
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  StartTimerCommandAttributes a = INIT(TEMPORAL__API__COMMAND__V1__START_TIMER_COMMAND_ATTRIBUTES);
  Duration d = INIT(GOOGLE__PROTOBUF__DURATION);
  d.seconds = seconds;
  a.timer_id = (char *)timer_id;
  a.start_to_fire_timeout = &d;
  cmd.command_type = CT(START_TIMER);
  cmd.attributes_case = CMD(START_TIMER);
  cmd.start_timer_command_attributes = &a;
  wft_respond(ch, token, &cmd);
}

void dbx_svct_wft_complete_workflow(dbx_rpc_channel *ch, ProtobufCBinaryData token) {
  Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
  CompleteWorkflowExecutionCommandAttributes a =
      INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
  cmd.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
  cmd.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
  cmd.complete_workflow_execution_command_attributes = &a;
  wft_respond(ch, token, &cmd);
}

int dbx_svct_activity_complete(dbx_rpc_channel *ch, ProtobufCBinaryData token, dbx_rpc_result *raw) {
  RespondActivityTaskCompletedRequest q =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_REQUEST);
  Payloads ps = INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  Payload p = INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  Temporal__Api__Common__V1__Payload__MetadataEntry enc =
      INIT(TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY);
  Temporal__Api__Common__V1__Payload__MetadataEntry *md[1] = {&enc};
  Payload *pl[1] = {&p};
  enc.key = "encoding";
  enc.value.data = (uint8_t *)"json/plain";
  enc.value.len = 10;
  p.metadata = md;
  p.n_metadata = 1;
  p.data.data = (uint8_t *)"\"done\"";
  p.data.len = 6;
  ps.payloads = pl;
  ps.n_payloads = 1;
  q.namespace_ = NS;
  q.task_token = token;
  q.result = &ps;
  q.identity = "it-activity-worker";
  return dbx_svct_call(ch, "RespondActivityTaskCompleted", &q.base, NULL, CALL_TIMEOUT_MS, NULL, raw);
}

/* ------------------------------------------------------------ history */

/* One page; expects OK. */
static GetWorkflowExecutionHistoryResponse *history_page(dbx_rpc_channel *ch, const char *workflow_id,
                                                         const char *run_id, ProtobufCBinaryData token,
                                                         int wait, int64_t timeout_ms) {
  GetWorkflowExecutionHistoryRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)workflow_id;
  we.run_id = (char *)(run_id ? run_id : "");
  q.namespace_ = NS;
  q.execution = &we;
  q.next_page_token = token;
  q.wait_new_event = wait;
  GetWorkflowExecutionHistoryResponse *r = NULL;
  dbx_rpc_result raw;
  memset(&raw, 0, sizeof raw);
  int st = dbx_svct_call(ch, "GetWorkflowExecutionHistory", &q.base, &GetWorkflowExecutionHistoryResponse__D,
                         timeout_ms, (void **)&r, &raw);
  if (st != DBX_GRPC_OK)
    fail_msg("GetWorkflowExecutionHistory %s: status %d %s", workflow_id, st, raw.message ? raw.message : "");
  dbx_rpc_result_cleanup(&raw);
  return r;
}

void dbx_svct_history_get(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id,
                          dbx_svct_history *h) {
  memset(h, 0, sizeof *h);
  ProtobufCBinaryData token = {0, NULL};
  for (;;) {
    GetWorkflowExecutionHistoryResponse *r = history_page(ch, workflow_id, run_id, token, 0, CALL_TIMEOUT_MS);
    GetWorkflowExecutionHistoryResponse **pages = realloc(h->pages, (h->n_pages + 1) * sizeof *pages);
    assert_non_null(pages);
    h->pages = pages;
    h->pages[h->n_pages++] = r;
    size_t add = r->history ? r->history->n_events : 0;
    HistoryEvent **evs = realloc(h->events, (h->n + add + 1) * sizeof *evs);
    assert_non_null(evs);
    h->events = evs;
    for (size_t i = 0; i < add; i++) h->events[h->n++] = r->history->events[i];
    if (r->next_page_token.len == 0) break;
    token = r->next_page_token;
    assert_true(h->n_pages < 1000);
  }
}

void dbx_svct_history_cleanup(dbx_svct_history *h) {
  for (size_t i = 0; i < h->n_pages; i++) protobuf_c_message_free_unpacked(&h->pages[i]->base, NULL);
  free(h->pages);
  free(h->events);
  memset(h, 0, sizeof *h);
}

size_t dbx_svct_history_count(const dbx_svct_history *h, int event_type) {
  size_t n = 0;
  for (size_t i = 0; i < h->n; i++)
    if ((int)h->events[i]->event_type == event_type) n++;
  return n;
}

int dbx_svct_history_wait_for(dbx_rpc_channel *ch, const char *workflow_id, const char *run_id,
                              int event_type, int64_t timeout_ms) {
  int64_t until = now_ms() + timeout_ms;
  uint8_t tok_buf[64];
  ProtobufCBinaryData token = {0, NULL};
  for (;;) {
    int64_t left = until - now_ms();
    if (left <= 0) return 0;
    /* the service answers a parked history poll 0.5 s before our deadline */
    GetWorkflowExecutionHistoryResponse *r =
        history_page(ch, workflow_id, run_id, token, 1, left < 1000 ? 1000 : (left > 5000 ? 5000 : left));
    int found = 0;
    for (size_t i = 0; r->history && i < r->history->n_events; i++)
      if ((int)r->history->events[i]->event_type == event_type) found = 1;
    int more = r->next_page_token.len > 0 && r->next_page_token.len <= sizeof tok_buf;
    if (more) {
      memcpy(tok_buf, r->next_page_token.data, r->next_page_token.len);
      token.data = tok_buf;
      token.len = r->next_page_token.len;
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (found) return 1;
    if (!more) return 0; /* the run closed without it */
  }
}

/* ------------------------------------------------------------ processes */

#define MAX_SERVERS 8
static pid_t g_servers[MAX_SERVERS];

int dbx_svct_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* ------------------------------------------------------------ children's sanitizer reports */

/* A spawned durabox of a sanitizer build writes its ASan/UBSan reports
 * (log_path) to files in one directory of this test process, not to a stderr
 * that is often /dev/null: the kill_all calls print them and fail the test,
 * so a child's heap error, leak or undefined behaviour is never lost. The
 * options are ignored by binaries built without sanitizers. */
static char g_san_dir[768];
static char g_san_asan[1024], g_san_ubsan[1024];

static int san_reports(void);

static void san_remove_dir(void) {
  if (san_reports() == 0) rmdir(g_san_dir); /* a report at exit stays, printed */
}

static void san_init(void) {
  if (g_san_dir[0]) return;
  char *d = dbx_test_tmpdir("svct-san");
  atexit(san_remove_dir);
  snprintf(g_san_dir, sizeof g_san_dir, "%s", d);
  free(d);
  const char *a = getenv("ASAN_OPTIONS"), *u = getenv("UBSAN_OPTIONS");
  snprintf(g_san_asan, sizeof g_san_asan, "ASAN_OPTIONS=%s%slog_path=%s/asan", a ? a : "",
           a && *a ? ":" : "", g_san_dir);
  snprintf(g_san_ubsan, sizeof g_san_ubsan, "UBSAN_OPTIONS=%s%slog_path=%s/ubsan", u ? u : "",
           u && *u ? ":" : "", g_san_dir);
}

/* Prints every report a child left (then removes it); returns how many. */
static int san_reports(void) {
  if (!g_san_dir[0]) return 0;
  DIR *d = opendir(g_san_dir);
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", g_san_dir, e->d_name);
    char *text = dbx_svct_file_read(p);
    fprintf(stderr, "---- sanitizer report of a spawned process (%s) ----\n%s\n---- end of report ----\n",
            e->d_name, text ? text : "(unreadable)");
    free(text);
    unlink(p);
    n++;
  }
  closedir(d);
  return n;
}

static void san_check(void) {
  int n = san_reports();
  if (n > 0) fail_msg("%d spawned process(es) reported a sanitizer error (printed above)", n);
}

static int env_key_matches(const char *entry, const char *spec) {
  size_t k = strcspn(spec, "=");
  return strncmp(entry, spec, k) == 0 && entry[k] == '=';
}

/* This process's environment with env's overrides ("K=V" sets, bare "K"
 * removes) and the sanitizer log paths, built before fork (no allocation in
 * the child). The array is calloc'd; its strings are borrowed. */
static char **child_env(char *const env[]) {
  san_init();
  extern char **environ;
  char *san[2] = {g_san_asan, g_san_ubsan};
  size_t n = 0, ne = 0;
  while (environ[n]) n++;
  while (env && env[ne]) ne++;
  char **envp = calloc(n + ne + 3, sizeof *envp);
  assert_non_null(envp);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int overridden = env_key_matches(environ[i], san[0]) || env_key_matches(environ[i], san[1]);
    for (size_t j = 0; j < ne && !overridden; j++) overridden = env_key_matches(environ[i], env[j]);
    if (!overridden) envp[k++] = environ[i];
  }
  for (size_t s = 0; s < 2; s++) {
    int overridden = 0;
    for (size_t j = 0; j < ne && !overridden; j++) overridden = env_key_matches(san[s], env[j]);
    if (!overridden) envp[k++] = san[s];
  }
  for (size_t j = 0; j < ne; j++)
    if (strchr(env[j], '=')) envp[k++] = env[j];
  envp[k] = NULL;
  return envp;
}

pid_t dbx_svct_server_spawn(const char *db_dir, int port) {
  const char *bin = dbx_test_bin();
  int slot = -1;
  for (int i = 0; i < MAX_SERVERS; i++)
    if (g_servers[i] == 0) {
      slot = i;
      break;
    }
  assert_true(slot >= 0);
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  char *argv[] = {(char *)bin, "server", "start-dev", "--port", port_s, "--db-filename", (char *)db_dir,
                  "--log-level", "warn", "--headless", NULL};
  char **envp = child_env(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      if (getenv("DBX_IT_SERVER_STDERR") == NULL) dup2(devnull, 2);
      close(devnull);
    }
    execve(bin, argv, envp);
    _exit(127);
  }
  free(envp);
  g_servers[slot] = pid;
  return pid;
}

int dbx_svct_server_kill(pid_t pid) {
  int status = 0;
  for (int i = 0; i < MAX_SERVERS; i++)
    if (g_servers[i] == pid) g_servers[i] = 0;
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) break;
  }
  return status;
}

void dbx_svct_server_kill_all(void) {
  for (int i = 0; i < MAX_SERVERS; i++)
    if (g_servers[i] > 0) dbx_svct_server_kill(g_servers[i]);
  san_check();
}

#define MAX_PROCS 16
static pid_t g_procs[MAX_PROCS];

static void proc_forget(pid_t pid) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_procs[i] == pid) g_procs[i] = 0;
}

static void child_redirect(int fd, const char *path) {
  int f = open(path ? path : "/dev/null", path ? O_WRONLY | O_CREAT | O_TRUNC : O_RDWR, 0600);
  if (f < 0) _exit(127);
  dup2(f, fd);
  close(f);
}

pid_t dbx_svct_proc_spawn(char *const argv[], char *const env[], const char *out_path,
                          const char *err_path) {
  int slot = -1;
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_procs[i] == 0) {
      slot = i;
      break;
    }
  assert_true(slot >= 0);
  char **envp = child_env(env);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    child_redirect(0, NULL);
    child_redirect(1, out_path);
    child_redirect(2, err_path);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  free(envp);
  assert_true(pid > 0);
  g_procs[slot] = pid;
  return pid;
}

static int decode_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

int dbx_svct_proc_wait(pid_t pid, int64_t timeout_ms) {
  int64_t end = now_ms() + timeout_ms;
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      proc_forget(pid);
      san_check();
      return decode_status(st);
    }
    if (r < 0 && errno != EINTR) fail_msg("waitpid(%d): %s", (int)pid, strerror(errno));
    if (now_ms() >= end) {
      dbx_svct_proc_kill(pid, SIGKILL);
      fail_msg("process %d did not exit within %lld ms", (int)pid, (long long)timeout_ms);
    }
    struct timespec ts = {0, 20 * 1000000}; /* polling a child's exit: no fd to wait on */
    nanosleep(&ts, NULL);
  }
}

int dbx_svct_proc_kill(pid_t pid, int sig) {
  kill(pid, sig);
  if (sig != SIGKILL) return 0;
  proc_forget(pid);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) break;
  }
  return status;
}

void dbx_svct_proc_kill_all(void) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_procs[i] > 0) dbx_svct_proc_kill(g_procs[i], SIGKILL);
  san_check();
}

char *dbx_svct_file_read(const char *path) {
  char *buf = NULL;
  dbx_fs_read_all(path, &buf, NULL);
  return buf;
}

void dbx_svct_file_write(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

int dbx_svct_proc_run(char *const argv[], char *const env[], int64_t timeout_ms, char **out,
                      char **err) {
  char *dir = dbx_test_tmpdir("svct-run");
  char op[512], ep[512];
  snprintf(op, sizeof op, "%s/out", dir);
  snprintf(ep, sizeof ep, "%s/err", dir);
  pid_t pid = dbx_svct_proc_spawn(argv, env, op, ep);
  int rc = dbx_svct_proc_wait(pid, timeout_ms);
  if (out) *out = dbx_svct_file_read(op);
  if (err) *err = dbx_svct_file_read(ep);
  dbx_test_rmrf(dir);
  free(dir);
  if (out) assert_non_null(*out);
  if (err) assert_non_null(*err);
  return rc;
}

char *dbx_svct_await_result(struct dbx_client *c, const char *workflow_id, const char *run_id, int polls) {
  char *result = NULL;
  for (int i = 0; i < polls && !result; i++) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.wait_new_event = 1, .close_event_only = 1, .timeout_ms = 10000};
    char *err = NULL;
    dbx_err rc = dbx_client_get_history(c, workflow_id, run_id, &ho, &h, &err);
    if (rc != DBX_OK) /* the service answers an empty page before the deadline: not this */
      fail_msg("waiting for %s to close: GetWorkflowExecutionHistory: %s: %s", workflow_id, dbx_strerror(rc),
               err ? err : "");
    if (h.n) {
      assert_int_equal(h.events[0]->event_type, ET(WORKFLOW_EXECUTION_COMPLETED));
      result = dbx_payloads_to_json(h.events[0]->workflow_execution_completed_event_attributes->result);
    }
    dbx_client_history_cleanup(&h);
  }
  if (result == NULL) fail_msg("workflow %s did not close within %d polls", workflow_id, polls);
  return result;
}

/* ------------------------------------------------------------ in-process service */

int dbx_svct_fixture_start(const dbx_service_opts *o, dbx_svct_fixture **out) {
  *out = NULL;
  dbx_rpc_global_init();
  dbx_svct_fixture *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  char *err = NULL;
  if (dbx_service_start(o, &f->svc, &err) != DBX_OK) {
    fprintf(stderr, "dbx_service_start: %s\n", err ? err : "?");
    free(err);
    free(f);
    return -1;
  }
  f->ch = dbx_svct_connect(dbx_service_port(f->svc));
  *out = f;
  return 0;
}

void dbx_svct_fixture_stop(dbx_svct_fixture *f) {
  if (f) {
    dbx_rpc_channel_destroy(f->ch);
    dbx_service_stop(f->svc);
    free(f);
  }
  dbx_rpc_global_shutdown();
}
