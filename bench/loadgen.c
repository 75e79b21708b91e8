/* dbx-loadgen: load driver for a Temporal-compatible workflow service.
 *
 * Plays both the client and the worker of a trivial workflow: start it, its
 * first workflow task schedules ONE no-op activity, the activity completes at
 * once, the second workflow task completes the workflow. Three kinds of
 * threads share one gRPC channel: starters (StartWorkflowExecution), workflow
 * task pollers (poll -> RespondWorkflowTaskCompleted) and activity pollers
 * (poll -> RespondActivityTaskCompleted). Closed loop (--concurrency C): at
 * most C workflows in flight, as fast as they complete. Open loop (--rate R):
 * starts are scheduled at fixed times i/R whatever the service does.
 * Every RPC's latency is kept per thread (no locks on the hot path) and merged
 * at the end; the activity round trip is measured from just before the
 * RespondWorkflowTaskCompleted that schedules the activity to the OK of the
 * RespondActivityTaskCompleted, matched by the index in the workflow id.
 * --spawn starts `durabox server start-dev` itself on a free port with a fresh
 * LMDB directory, and reports the server's CPU time per thread. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "protos/pb.h"

enum { L_START, L_POLL_WFT, L_RESP_WFT, L_POLL_ACT, L_RESP_ACT, L_ACT_RTT, L_WF_E2E, L_COUNT };
static const char *const lat_names[L_COUNT] = {
    "StartWorkflowExecution",        "PollWorkflowTaskQueue",        "RespondWorkflowTaskCompleted",
    "PollActivityTaskQueue",         "RespondActivityTaskCompleted", "activity round trip",
    "workflow start->completed"};
static const char *const lat_keys[L_COUNT] = {"StartWorkflowExecution",
                                              "PollWorkflowTaskQueue",
                                              "RespondWorkflowTaskCompleted",
                                              "PollActivityTaskQueue",
                                              "RespondActivityTaskCompleted",
                                              "activity_round_trip",
                                              "workflow_end_to_end"};

typedef struct {
  int64_t *v;
  size_t n, cap;
} samples;

typedef struct {
  samples lat[L_COUNT];
  long errors;
  long empty_polls;
} tstats;

typedef struct {
  /* options */
  const char *address;
  const char *ns;
  char task_queue[80];
  char id_prefix[64];
  long workflows;
  long concurrency;
  double rate;
  int starters, wft_pollers, act_pollers;
  int json;
  int timeout_s;
  /* shared run state */
  dbx_rpc_channel *ch;
  dbx_rpc_cancel *stop;
  sem_t slots;                 /* closed loop: free in-flight slots */
  atomic_long next_index;      /* next workflow to start */
  atomic_long started, completed, activities_done, errors;
  _Atomic int64_t *sched_ns;   /* per workflow: when its activity was scheduled */
  _Atomic int64_t *start_ns;   /* per workflow: when its start was sent */
  int64_t t0_ns;               /* run start (monotonic) */
  _Atomic int64_t t_end_ns;    /* last workflow completed */
  pthread_mutex_t done_mu;
  pthread_cond_t done_cond;
} bench;

static void samples_add(samples *s, int64_t v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 4096;
    int64_t *nv = realloc(s->v, cap * sizeof *nv);
    if (nv == NULL) return; /* drop the sample rather than the run */
    s->v = nv;
    s->cap = cap;
  }
  s->v[s->n++] = v;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_ms(const samples *s, double q) {
  if (s->n == 0) return 0;
  size_t k = (size_t)ceil(q * (double)s->n);
  if (k == 0) k = 1;
  if (k > s->n) k = s->n;
  return (double)s->v[k - 1] / 1e6;
}

/* ------------------------------------------------------------ rpc helpers */

static int call(bench *b, tstats *ts, int kind, const char *method, const ProtobufCMessage *req,
                int64_t timeout_ms, dbx_rpc_result *res) {
  size_t n = 0;
  uint8_t *buf = dbx_pb_pack(req, &n);
  if (buf == NULL) return -1;
  memset(res, 0, sizeof *res);
  int64_t t = dbx_mono_ns();
  dbx_err rc = dbx_rpc_unary(b->ch, method, buf, n, timeout_ms, 1, b->stop, res);
  int64_t dt = dbx_mono_ns() - t;
  free(buf);
  if (rc != DBX_OK) return -1; /* cancelled at the end of the run, or no memory */
  if (res->status != DBX_GRPC_OK) {
    if (!dbx_rpc_cancel_fired(b->stop)) {
      ts->errors++;
      atomic_fetch_add(&b->errors, 1);
      if (ts->errors <= 3)
        fprintf(stderr, "dbx-loadgen: %s: status %d: %s\n", method, res->status,
                res->message ? res->message : "");
    }
    return -1;
  }
  if (kind >= 0) samples_add(&ts->lat[kind], dt);
  return 0;
}

/* Workflow index from "<prefix>-<index>"; -1 if it is not one of ours. */
static long wf_index(bench *b, const char *wfid) {
  size_t pl = strlen(b->id_prefix);
  if (wfid == NULL || strncmp(wfid, b->id_prefix, pl) != 0 || wfid[pl] != '-') return -1;
  char *end = NULL;
  long i = strtol(wfid + pl + 1, &end, 10);
  if (end == wfid + pl + 1 || *end != '\0' || i < 0 || i >= b->workflows) return -1;
  return i;
}

static void run_finished(bench *b) {
  atomic_store(&b->t_end_ns, dbx_mono_ns());
  pthread_mutex_lock(&b->done_mu);
  pthread_cond_broadcast(&b->done_cond);
  pthread_mutex_unlock(&b->done_mu);
}

/* ------------------------------------------------------------ threads */

typedef struct {
  bench *b;
  tstats st;
  pthread_t th;
} worker;

static void start_one(bench *b, tstats *ts, long i) {
  char wfid[96], reqid[96];
  snprintf(wfid, sizeof wfid, "%s-%ld", b->id_prefix, i);
  snprintf(reqid, sizeof reqid, "%s-req-%ld", b->id_prefix, i);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  wt.name = "bench.NoopActivity";
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = b->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  Duration wtt = INIT(GOOGLE__PROTOBUF__DURATION);
  wtt.seconds = 10;
  StartWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  q.namespace_ = (char *)b->ns;
  q.workflow_id = wfid;
  q.workflow_type = &wt;
  q.task_queue = &tq;
  q.workflow_task_timeout = &wtt;
  q.identity = "dbx-loadgen";
  q.request_id = reqid;
  dbx_rpc_result r;
  atomic_store(&b->start_ns[i], dbx_mono_ns());
  if (call(b, ts, L_START, "StartWorkflowExecution", &q.base, 30000, &r) == 0)
    atomic_fetch_add(&b->started, 1);
  dbx_rpc_result_cleanup(&r);
}

static void *starter_main(void *arg) {
  worker *w = arg;
  bench *b = w->b;
  for (;;) {
    if (dbx_rpc_cancel_fired(b->stop)) break;
    if (b->rate <= 0) {
      /* closed loop: wait for a free slot first so indices start in order */
      while (sem_wait(&b->slots) != 0 && errno == EINTR) {
      }
      if (dbx_rpc_cancel_fired(b->stop)) break;
    }
    long i = atomic_fetch_add(&b->next_index, 1);
    if (i >= b->workflows) break;
    if (b->rate > 0) {
      int64_t at = b->t0_ns + (int64_t)((double)i * 1e9 / b->rate);
      struct timespec ts = {.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
      }
    }
    start_one(b, &w->st, i);
  }
  return NULL;
}

static int history_has_completed_activity(const History *h) {
  for (size_t k = 0; h && k < h->n_events; k++)
    if (h->events[k]->event_type == ET(ACTIVITY_TASK_COMPLETED)) return 1;
  return 0;
}

static void *wft_poller_main(void *arg) {
  worker *w = arg;
  bench *b = w->b;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = b->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  while (!dbx_rpc_cancel_fired(b->stop)) {
    PollWorkflowTaskQueueRequest pq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_REQUEST);
    pq.namespace_ = (char *)b->ns;
    pq.task_queue = &tq;
    pq.identity = "dbx-loadgen";
    dbx_rpc_result r;
    int64_t t = dbx_mono_ns();
    if (call(b, &w->st, -1, "PollWorkflowTaskQueue", &pq.base, 70000, &r) != 0) {
      dbx_rpc_result_cleanup(&r);
      if (!dbx_rpc_cancel_fired(b->stop)) usleep(10000);
      continue;
    }
    PollWorkflowTaskQueueResponse *resp =
        (PollWorkflowTaskQueueResponse *)protobuf_c_message_unpack(&PollWorkflowTaskQueueResponse__D, NULL,
                                                                   r.response_len, r.response);
    dbx_rpc_result_cleanup(&r);
    if (resp == NULL || resp->task_token.len == 0) {
      w->st.empty_polls++;
      if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
      continue;
    }
    samples_add(&w->st.lat[L_POLL_WFT], dbx_mono_ns() - t);
    long idx = wf_index(b, resp->workflow_execution ? resp->workflow_execution->workflow_id : NULL);
    int second = history_has_completed_activity(resp->history);

    Command cmd = INIT(TEMPORAL__API__COMMAND__V1__COMMAND);
    Command *cmds[1] = {&cmd};
    ScheduleActivityTaskCommandAttributes sa =
        INIT(TEMPORAL__API__COMMAND__V1__SCHEDULE_ACTIVITY_TASK_COMMAND_ATTRIBUTES);
    CompleteWorkflowExecutionCommandAttributes ca =
        INIT(TEMPORAL__API__COMMAND__V1__COMPLETE_WORKFLOW_EXECUTION_COMMAND_ATTRIBUTES);
    ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
    Duration s2c = INIT(GOOGLE__PROTOBUF__DURATION);
    if (second) {
      cmd.command_type = CT(COMPLETE_WORKFLOW_EXECUTION);
      cmd.attributes_case = CMD(COMPLETE_WORKFLOW_EXECUTION);
      cmd.complete_workflow_execution_command_attributes = &ca;
    } else {
      at.name = "bench.noop";
      s2c.seconds = 30;
      sa.activity_id = "1";
      sa.activity_type = &at;
      sa.task_queue = &tq;
      sa.start_to_close_timeout = &s2c;
      cmd.command_type = CT(SCHEDULE_ACTIVITY_TASK);
      cmd.attributes_case = CMD(SCHEDULE_ACTIVITY_TASK);
      cmd.schedule_activity_task_command_attributes = &sa;
    }
    RespondWorkflowTaskCompletedRequest rq =
        INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_WORKFLOW_TASK_COMPLETED_REQUEST);
    rq.namespace_ = (char *)b->ns;
    rq.task_token = resp->task_token;
    rq.identity = "dbx-loadgen";
    rq.n_commands = 1;
    rq.commands = cmds;
    if (!second && idx >= 0) atomic_store(&b->sched_ns[idx], dbx_mono_ns());
    int ok = call(b, &w->st, L_RESP_WFT, "RespondWorkflowTaskCompleted", &rq.base, 30000, &r) == 0;
    dbx_rpc_result_cleanup(&r);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (ok && second && idx >= 0) {
      int64_t now = dbx_mono_ns();
      samples_add(&w->st.lat[L_WF_E2E], now - atomic_load(&b->start_ns[idx]));
      long done = atomic_fetch_add(&b->completed, 1) + 1;
      if (b->rate <= 0) sem_post(&b->slots);
      if (done == b->workflows) run_finished(b);
    }
  }
  return NULL;
}

static void *act_poller_main(void *arg) {
  worker *w = arg;
  bench *b = w->b;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = b->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  while (!dbx_rpc_cancel_fired(b->stop)) {
    PollActivityTaskQueueRequest pq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_REQUEST);
    pq.namespace_ = (char *)b->ns;
    pq.task_queue = &tq;
    pq.identity = "dbx-loadgen";
    dbx_rpc_result r;
    int64_t t = dbx_mono_ns();
    if (call(b, &w->st, -1, "PollActivityTaskQueue", &pq.base, 70000, &r) != 0) {
      dbx_rpc_result_cleanup(&r);
      if (!dbx_rpc_cancel_fired(b->stop)) usleep(10000);
      continue;
    }
    PollActivityTaskQueueResponse *resp =
        (PollActivityTaskQueueResponse *)protobuf_c_message_unpack(&PollActivityTaskQueueResponse__D, NULL,
                                                                   r.response_len, r.response);
    dbx_rpc_result_cleanup(&r);
    if (resp == NULL || resp->task_token.len == 0) {
      w->st.empty_polls++;
      if (resp) protobuf_c_message_free_unpacked(&resp->base, NULL);
      continue;
    }
    samples_add(&w->st.lat[L_POLL_ACT], dbx_mono_ns() - t);
    long idx = wf_index(b, resp->workflow_execution ? resp->workflow_execution->workflow_id : NULL);
    RespondActivityTaskCompletedRequest rq =
        INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESPOND_ACTIVITY_TASK_COMPLETED_REQUEST);
    rq.namespace_ = (char *)b->ns;
    rq.task_token = resp->task_token;
    rq.identity = "dbx-loadgen";
    int ok = call(b, &w->st, L_RESP_ACT, "RespondActivityTaskCompleted", &rq.base, 30000, &r) == 0;
    dbx_rpc_result_cleanup(&r);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (ok) {
      atomic_fetch_add(&b->activities_done, 1);
      if (idx >= 0) samples_add(&w->st.lat[L_ACT_RTT], dbx_mono_ns() - atomic_load(&b->sched_ns[idx]));
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ spawn */

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* CPU seconds (user+system) of one /proc stat file, and its comm. */
static double stat_cpu_s(const char *path, char *comm, size_t comm_cap) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *lp = strchr(buf, '('), *rp = strrchr(buf, ')');
  if (lp == NULL || rp == NULL) return -1;
  if (comm) snprintf(comm, comm_cap, "%.*s", (int)(rp - lp - 1), lp + 1);
  unsigned long ut = 0, st = 0;
  /* after ") " come fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  if (sscanf(rp + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

typedef struct {
  int tid;
  char comm[32];
  double cpu_s;
} thread_cpu;

static size_t server_threads(pid_t pid, thread_cpu *out, size_t cap) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < cap) {
    if (e->d_name[0] == '.') continue;
    char p[400];
    snprintf(p, sizeof p, "%s/%s/stat", dir, e->d_name);
    out[n].tid = atoi(e->d_name);
    out[n].cpu_s = stat_cpu_s(p, out[n].comm, sizeof out[n].comm);
    if (out[n].cpu_s >= 0) n++;
  }
  closedir(d);
  return n;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f) {
  fprintf(f,
          "usage: dbx-loadgen [options]\n"
          "  --address HOST:PORT   service to drive (default 127.0.0.1:7233)\n"
          "  --spawn               start `durabox server start-dev` on a free port with a fresh db dir\n"
          "  --no-sync             with --spawn: commits not synced (default: durable)\n"
          "  --durabox PATH        binary for --spawn (default: the one built with this tree)\n"
          "  --db-parent DIR       where --spawn makes its db dir (default $TMPDIR or /tmp)\n"
          "  --namespace NS        (default \"default\")\n"
          "  --workflows N         workflows to run (default 2000)\n"
          "  --concurrency C       closed loop: at most C workflows in flight (default 64)\n"
          "  --rate R              open loop: start R workflows per second instead\n"
          "  --starters N          starter threads (default: 16, or C if smaller; 8 with --rate)\n"
          "  --wft-pollers N       workflow task poller threads (default 16)\n"
          "  --act-pollers N       activity task poller threads (default 16)\n"
          "  --timeout S           give up after S seconds (default 600)\n"
          "  --json                one JSON object instead of the table\n");
}

static int arg_long(const char *s, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < 0) return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  b.address = "127.0.0.1:7233";
  b.ns = "default";
  b.workflows = 2000;
  b.concurrency = 64;
  b.starters = -1;
  b.wft_pollers = 16;
  b.act_pollers = 16;
  b.timeout_s = 600;
  int spawn = 0, no_sync = 0;
  const char *durabox = DBX_DEFAULT_BIN, *db_parent = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    long n = 0;
    /* --flag=value as well as --flag value */
    char name[64];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    int inline_v = eq != NULL && (size_t)(eq - a) < sizeof name;
    if (inline_v) {
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = '\0';
      a = name;
      v = eq + 1;
    }
#define NEED_V()                                              \
  do {                                                        \
    if (v == NULL) {                                          \
      fprintf(stderr, "dbx-loadgen: %s needs a value\n", a); \
      return 2;                                               \
    }                                                         \
    if (!inline_v) i++;                                       \
  } while (0)
#define NEED_N(lo, hi)                                                                          \
  do {                                                                                          \
    NEED_V();                                                                                   \
    if (arg_long(v, &n) != 0 || n < (lo) || n > (hi)) {                                         \
      fprintf(stderr, "dbx-loadgen: %s wants a whole number from %ld to %ld, not '%s'\n", a,  \
              (long)(lo), (long)(hi), v);                                                       \
      return 2;                                                                                 \
    }                                                                                           \
  } while (0)
#define NO_V()                                                       \
  do {                                                               \
    if (inline_v) {                                                  \
      fprintf(stderr, "dbx-loadgen: %s takes no value\n", a);      \
      return 2;                                                      \
    }                                                                \
  } while (0)
    if (strcmp(a, "--address") == 0) { NEED_V(); b.address = v; }
    else if (strcmp(a, "--spawn") == 0) { NO_V(); spawn = 1; }
    else if (strcmp(a, "--no-sync") == 0) { NO_V(); no_sync = 1; }
    else if (strcmp(a, "--durabox") == 0) { NEED_V(); durabox = v; }
    else if (strcmp(a, "--db-parent") == 0) { NEED_V(); db_parent = v; }
    else if (strcmp(a, "--namespace") == 0) { NEED_V(); b.ns = v; }
    else if (strcmp(a, "--workflows") == 0) { NEED_N(1, 100000000); b.workflows = n; }
    else if (strcmp(a, "--concurrency") == 0) { NEED_N(1, 1000000); b.concurrency = n; }
    else if (strcmp(a, "--rate") == 0) {
      NEED_V();
      char *end = NULL;
      b.rate = strtod(v, &end);
      if (end == v || *end || !(b.rate > 0) || b.rate > 1e7) {
        fprintf(stderr, "dbx-loadgen: --rate wants workflows per second, more than 0, not '%s'\n", v);
        return 2;
      }
    }
    else if (strcmp(a, "--starters") == 0) { NEED_N(1, 10000); b.starters = (int)n; }
    else if (strcmp(a, "--wft-pollers") == 0) { NEED_N(1, 10000); b.wft_pollers = (int)n; }
    else if (strcmp(a, "--act-pollers") == 0) { NEED_N(1, 10000); b.act_pollers = (int)n; }
    else if (strcmp(a, "--timeout") == 0) { NEED_N(1, 86400); b.timeout_s = (int)n; }
    else if (strcmp(a, "--json") == 0) { NO_V(); b.json = 1; }
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { usage(stdout); return 0; }
    else { fprintf(stderr, "dbx-loadgen: unknown option %s\n", a); usage(stderr); return 2; }
#undef NEED_V
#undef NEED_N
#undef NO_V
  }
  /* Each starter waits for its StartWorkflowExecution (a synced commit,
   * 1-2 ms): 2 starters held the closed loop near 1,100 wf/s with a
   * fraction of C in flight. */
  if (b.starters < 0) b.starters = b.rate > 0 ? 8 : (int)(b.concurrency < 16 ? b.concurrency : 16);
  snprintf(b.id_prefix, sizeof b.id_prefix, "bench-%d-%lld", (int)getpid(), (long long)(dbx_wall_ns() / 1000000));
  snprintf(b.task_queue, sizeof b.task_queue, "%s-tq", b.id_prefix);

  /* spawn the server */
  pid_t child = -1;
  char *db_dir = NULL, addr_buf[64];
  if (spawn) {
    int port = free_port();
    const char *tmp = db_parent ? db_parent : getenv("TMPDIR");
    db_dir = dbx_asprintf("%s/dbx-loadgen.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (port <= 0 || db_dir == NULL || mkdtemp(db_dir) == NULL) {
      fprintf(stderr, "dbx-loadgen: cannot pick a port or make the db dir: %s\n", strerror(errno));
      return 1;
    }
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(addr_buf, sizeof addr_buf, "127.0.0.1:%d", port);
    b.address = addr_buf;
    child = fork();
    if (child == 0) {
      const char *av[14];
      int k = 0;
      av[k++] = durabox;
      av[k++] = "server";
      av[k++] = "start-dev";
      av[k++] = "--headless";
      av[k++] = "--port";
      av[k++] = port_s;
      av[k++] = "--db-filename";
      av[k++] = db_dir;
      av[k++] = "--log-level";
      av[k++] = "warn";
      if (no_sync) av[k++] = "--no-sync";
      av[k] = NULL;
      execv(durabox, (char *const *)av);
      fprintf(stderr, "dbx-loadgen: cannot run %s: %s\n", durabox, strerror(errno));
      _exit(127);
    }
    if (child < 0) {
      fprintf(stderr, "dbx-loadgen: fork: %s\n", strerror(errno));
      return 1;
    }
  }

  dbx_rpc_global_init();
  int rc_exit = 1;
  worker *workers = NULL;
  int n_workers = 0;
  dbx_rpc_channel_opts co = {.target = b.address, .namespace_ = b.ns, .client_name = "dbx-loadgen"};
  if (dbx_rpc_channel_create(&co, &b.ch) != DBX_OK || dbx_rpc_cancel_create(&b.stop) != DBX_OK) {
    fprintf(stderr, "dbx-loadgen: cannot create the channel\n");
    goto out;
  }
  {
    /* wait for the service */
    GetSystemInfoRequest gq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
    uint8_t buf[16];
    size_t gl = protobuf_c_message_pack(&gq.base, buf);
    dbx_rpc_result r = {0};
    dbx_err e = dbx_rpc_unary(b.ch, "GetSystemInfo", buf, gl, 15000, 1, NULL, &r);
    int st = r.status;
    dbx_rpc_result_cleanup(&r);
    if (e != DBX_OK || st != DBX_GRPC_OK) {
      fprintf(stderr, "dbx-loadgen: service at %s not reachable (status %d)\n", b.address, st);
      goto out;
    }
  }
  b.sched_ns = calloc((size_t)b.workflows, sizeof *b.sched_ns);
  b.start_ns = calloc((size_t)b.workflows, sizeof *b.start_ns);
  n_workers = b.starters + b.wft_pollers + b.act_pollers;
  workers = calloc((size_t)n_workers, sizeof *workers);
  if (b.sched_ns == NULL || b.start_ns == NULL || workers == NULL) goto out;
  sem_init(&b.slots, 0, (unsigned)(b.concurrency < b.workflows ? b.concurrency : b.workflows));
  pthread_mutex_init(&b.done_mu, NULL);
  pthread_cond_init(&b.done_cond, NULL);

  thread_cpu srv0[256];
  size_t n_srv0 = child > 0 ? server_threads(child, srv0, 256) : 0;
  struct rusage ru0;
  getrusage(RUSAGE_SELF, &ru0);
  b.t0_ns = dbx_mono_ns();
  for (int k = 0; k < n_workers; k++) {
    workers[k].b = &b;
    void *(*fn)(void *) = k < b.starters ? starter_main
                          : k < b.starters + b.wft_pollers ? wft_poller_main
                                                           : act_poller_main;
    pthread_create(&workers[k].th, NULL, fn, &workers[k]);
  }
  pthread_mutex_lock(&b.done_mu);
  int64_t deadline = dbx_wall_ns() + (int64_t)b.timeout_s * 1000000000LL;
  struct timespec dl = {.tv_sec = deadline / 1000000000LL, .tv_nsec = deadline % 1000000000LL};
  while (atomic_load(&b.completed) < b.workflows) {
    if (pthread_cond_timedwait(&b.done_cond, &b.done_mu, &dl) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&b.done_mu);
  int64_t t_end = atomic_load(&b.completed) >= b.workflows ? atomic_load(&b.t_end_ns) : dbx_mono_ns();
  struct rusage ru1;
  getrusage(RUSAGE_SELF, &ru1);
  thread_cpu srv1[256];
  size_t n_srv1 = child > 0 ? server_threads(child, srv1, 256) : 0;
  dbx_rpc_cancel_fire(b.stop);
  for (int k = 0; k < b.starters + 1; k++) sem_post(&b.slots); /* release starters waiting for a slot */
  for (int k = 0; k < n_workers; k++) pthread_join(workers[k].th, NULL);

  /* merge and report */
  tstats all;
  memset(&all, 0, sizeof all);
  for (int k = 0; k < n_workers; k++) {
    for (int l = 0; l < L_COUNT; l++) {
      samples *s = &workers[k].st.lat[l];
      for (size_t m = 0; m < s->n; m++) samples_add(&all.lat[l], s->v[m]);
      free(s->v);
    }
    all.errors += workers[k].st.errors;
    all.empty_polls += workers[k].st.empty_polls;
  }
  for (int l = 0; l < L_COUNT; l++) qsort(all.lat[l].v, all.lat[l].n, sizeof(int64_t), cmp_i64);
  double wall_s = (double)(t_end - b.t0_ns) / 1e9;
  long done = atomic_load(&b.completed), acts = atomic_load(&b.activities_done);
  double cpu_self = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
  /* server threads: CPU used during the run */
  double srv_total = 0;
  for (size_t k = 0; k < n_srv1; k++) {
    for (size_t m = 0; m < n_srv0; m++)
      if (srv0[m].tid == srv1[k].tid) srv1[k].cpu_s -= srv0[m].cpu_s;
    srv_total += srv1[k].cpu_s;
  }
  const char *mode = b.rate > 0 ? "open" : "closed";
  /* Little's law: workflows in flight on average = completions/s x mean
   * start->completed time. Closed loop, well under C: the driver (its
   * starters or pollers), not the service, set the pace. */
  double e2e_sum = 0;
  for (size_t m = 0; m < all.lat[L_WF_E2E].n; m++) e2e_sum += (double)all.lat[L_WF_E2E].v[m] / 1e9;
  double in_flight = wall_s > 0 ? e2e_sum / wall_s : 0;
  if (b.json) {
    printf("{\"mode\":\"%s\",\"address\":\"%s\",\"spawned\":%s,\"no_sync\":%s,\"workflows\":%ld,"
           "\"concurrency\":%ld,\"rate\":%.3f,\"starters\":%d,\"wft_pollers\":%d,\"act_pollers\":%d,"
           "\"completed\":%ld,\"activities\":%ld,\"errors\":%ld,\"wall_s\":%.4f,\"workflows_per_s\":%.2f,"
           "\"activity_round_trips_per_s\":%.2f,\"loadgen_cpu_s\":%.3f,\"in_flight_mean\":%.1f",
           mode, b.address, spawn ? "true" : "false", no_sync ? "true" : "false", b.workflows, b.concurrency,
           b.rate, b.starters, b.wft_pollers, b.act_pollers, done, acts, all.errors, wall_s,
           wall_s > 0 ? (double)done / wall_s : 0, wall_s > 0 ? (double)acts / wall_s : 0, cpu_self, in_flight);
    if (child > 0) {
      printf(",\"server_cpu_s\":%.3f,\"server_threads\":[", srv_total);
      int first = 1;
      for (size_t k = 0; k < n_srv1; k++) {
        if (srv1[k].cpu_s < 0.005) continue;
        printf("%s{\"tid\":%d,\"comm\":\"%s\",\"cpu_s\":%.3f}", first ? "" : ",", srv1[k].tid, srv1[k].comm,
               srv1[k].cpu_s);
        first = 0;
      }
      printf("]");
    }
    printf(",\"latency_ms\":{");
    for (int l = 0; l < L_COUNT; l++) {
      const samples *s = &all.lat[l];
      printf("%s\"%s\":{\"n\":%zu,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f}", l ? "," : "", lat_keys[l],
             s->n, pct_ms(s, 0.5), pct_ms(s, 0.9), pct_ms(s, 0.99), s->n ? (double)s->v[s->n - 1] / 1e6 : 0);
    }
    printf("}}\n");
  } else {
    printf("dbx-loadgen: %s loop against %s%s%s\n", mode, b.address, spawn ? " (spawned" : "",
           spawn ? (no_sync ? ", --no-sync)" : ", durable commits)") : "");
    if (b.rate > 0)
      printf("  target rate %.1f wf/s, %ld workflows, %d starters, %d+%d pollers\n", b.rate, b.workflows,
             b.starters, b.wft_pollers, b.act_pollers);
    else
      printf("  concurrency %ld, %ld workflows, %d starter%s, %d+%d pollers\n", b.concurrency, b.workflows,
             b.starters, b.starters == 1 ? "" : "s", b.wft_pollers, b.act_pollers);
    printf("  completed %ld/%ld workflows, %ld activities, %ld errors in %.3f s\n", done, b.workflows, acts,
           all.errors, wall_s);
    printf("  workflows/s              %10.1f\n", wall_s > 0 ? (double)done / wall_s : 0);
    printf("  activity round trips/s   %10.1f\n", wall_s > 0 ? (double)acts / wall_s : 0);
    printf("  loadgen CPU              %10.2f s\n", cpu_self);
    if (b.rate <= 0) {
      /* at most min(C, N) can be in flight; a run of a few times C also
       * spends a share of its time filling and draining */
      long cap = b.concurrency < b.workflows ? b.concurrency : b.workflows;
      printf("  in flight on average     %10.1f of %ld%s\n", in_flight, cap,
             done == b.workflows && b.workflows >= 10 * cap && in_flight < 0.75 * (double)cap
                 ? "  (well under C: the starters, not the service, set the pace; raise --starters)"
                 : "");
    }
    if (done < b.workflows)
      printf("  timed out after %d s: %ld of %ld workflows completed\n", b.timeout_s, done, b.workflows);
    if (child > 0) {
      printf("  server CPU               %10.2f s  (", srv_total);
      int first = 1;
      for (size_t k = 0; k < n_srv1; k++) {
        if (srv1[k].cpu_s < 0.005) continue;
        printf("%s%s/%d %.2f", first ? "" : ", ", srv1[k].comm, srv1[k].tid, srv1[k].cpu_s);
        first = 0;
      }
      printf(")\n");
    }
    printf("  %-30s %8s %9s %9s %9s %9s\n", "latency (ms)", "n", "p50", "p90", "p99", "max");
    for (int l = 0; l < L_COUNT; l++) {
      const samples *s = &all.lat[l];
      printf("  %-30s %8zu %9.3f %9.3f %9.3f %9.3f\n", lat_names[l], s->n, pct_ms(s, 0.5), pct_ms(s, 0.9),
             pct_ms(s, 0.99), s->n ? (double)s->v[s->n - 1] / 1e6 : 0);
    }
    printf("  (poll latencies count only polls that returned a task)\n");
  }
  for (int l = 0; l < L_COUNT; l++) free(all.lat[l].v);
  rc_exit = done == b.workflows && all.errors == 0 ? 0 : 1;
  sem_destroy(&b.slots);
  pthread_mutex_destroy(&b.done_mu);
  pthread_cond_destroy(&b.done_cond);
out:
  free(workers);
  free((void *)b.sched_ns);
  free((void *)b.start_ns);
  dbx_rpc_cancel_destroy(b.stop);
  dbx_rpc_channel_destroy(b.ch);
  dbx_rpc_global_shutdown();
  if (child > 0) {
    kill(child, SIGTERM);
    int st = 0;
    waitpid(child, &st, 0);
  }
  if (db_dir) {
    char *cmd = dbx_asprintf("rm -rf '%s'", db_dir);
    if (cmd && system(cmd) != 0) fprintf(stderr, "dbx-loadgen: could not remove %s\n", db_dir);
    free(cmd);
    free(db_dir);
  }
  return rc_exit;
}
