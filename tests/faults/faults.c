/* dbx-faults: the kill -9 fault harness (project issue 4; docs/reliability.md).
 *
 * It runs the real binaries: `durabox server start-dev` on store S and
 * `durabox worker` on store W, and keeps up to --inflight durabox.Script
 * workflows running. Each Script has four steps: create (empty sandbox),
 * "safe" (safe_to_retry exec), "amo" (at_most_once exec) and "result" (an
 * exec whose output is a product the driver knows). The two side-effecting
 * steps report to a TCP counter inside this driver (bash /dev/tcp from the
 * sandbox; bubblewrap makes the file system read-only, not the network), so
 * executions are counted outside durabox's own records.
 *
 * Round r arms one process (alternately service and worker) with one random
 * failpoint: DURABOX_FAILPOINTS=NAME=kill:after=K. The target, if running,
 * is first killed with SIGKILL from outside (a kill at a random moment) and
 * restarted armed. The round ends when the target dies at its failpoint (the
 * failpoint log names it) or after --round-s (then it is killed from
 * outside). After every death: mdb_stat -a and mdb_dump -a on its store, and
 * a walk of every table through store/ (key order; worker history values
 * decode as HistoryEvent, journal values as JSON); the process is restarted
 * unarmed. All the time every open workflow's history is read and compared
 * with what was read before: every event once read (acknowledged to a
 * client) must come back byte-identical after any restart. After the rounds
 * both processes run unarmed until every workflow closes (--drain-s).
 *
 * Verdicts per workflow: completed with the right product (ok); Script
 * "failed" at step "amo" (OutcomeUnknown or a timed-out at_most_once
 * attempt: a correct outcome, counted apart); anything else is a lost
 * result. amo executions per workflow must be <= 1 (and == 1 when the step
 * reports ok). Exit 0 only when duplicates, lost results, lost events,
 * consistency failures and unexpected deaths are all zero.
 * Single-threaded except the counter thread (which only appends under mu). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "rpc/rpc.h"
#include "store/store.h"
#include "worker/client.h"

#define TQ "faults"
#define MAX_WF 100000

static const char *const SVC_FPS[] = {"service.commit.before", "service.commit.after"};
static const char *const WRK_FPS[] = {
    "worker.journal.before_started", "worker.journal.after_started",
    "worker.activity.after_effect",  "worker.journal.after_result",
    "worker.report.before",          "worker.report.after",
    "worker.wft.report.before",      "worker.store.commit.before",
    "worker.store.commit.after",     "activity.sandbox_create.before",
    "activity.sandbox_create.after"};
#define N_SVC_FPS (sizeof SVC_FPS / sizeof SVC_FPS[0])
#define N_WRK_FPS (sizeof WRK_FPS / sizeof WRK_FPS[0])

/* ------------------------------------------------------------ options, rng */

enum { K_SERVICE, K_WORKER, K_SUPERVISOR, K_PAUSE, K_COUNT };
static const char *const KIND_NAMES[K_COUNT] = {"service", "worker", "supervisor", "pause"};

static struct {
  const char *bin, *dir;
  int rounds, inflight, round_s, drain_s, max_after;
  uint64_t seed;
  int verbose;
  int kinds[K_COUNT]; /* --kinds: the faults the rounds take in turn */
  int n_kinds;
  const char *retention_h; /* --worker-retention-hours: the worker's --store-retention-hours */
} opt = {NULL, NULL, 10, 12, 15, 240, 6, 1, 0, {K_SERVICE, K_WORKER, K_SUPERVISOR, K_PAUSE}, K_COUNT, NULL};

/* --kinds service,worker,supervisor,pause (any subset, in the order the
 * rounds take them). 0, or -1 naming nothing known. */
static int kinds_parse(const char *v) {
  opt.n_kinds = 0;
  const char *p = v;
  while (*p) {
    size_t n = strcspn(p, ",");
    int k = -1;
    for (int i = 0; i < K_COUNT; i++)
      if (strlen(KIND_NAMES[i]) == n && strncmp(p, KIND_NAMES[i], n) == 0) k = i;
    if (k < 0 || opt.n_kinds == K_COUNT) {
      fprintf(stderr, "dbx-faults: --kinds: '%.*s' is not service, worker, supervisor or pause\n", (int)n, p);
      return -1;
    }
    opt.kinds[opt.n_kinds++] = k;
    p += n;
    if (*p == ',') p++;
  }
  return opt.n_kinds > 0 ? 0 : -1;
}

/* SIGINT/SIGTERM: the first ends the rounds early (then drain and summary
 * as usual), the second ends the drain too. */
static volatile sig_atomic_t stop_requests;
static void on_stop(int sig) {
  (void)sig;
  stop_requests++;
}

static uint64_t rng = 1;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ counters */

typedef struct {
  char *wid, *run_id;
  int a, b;             /* result step prints a*b */
  int closed;           /* 0 open, 1 closed */
  int verdict;          /* V_* */
  int amo_ok;           /* the amo step reported ok */
  int safe_count, amo_count;
  uint8_t **ev;         /* packed events seen so far */
  size_t *ev_len, n_ev;
  int reverify;         /* closed: re-read after the next service restart */
} wf;

enum { V_NONE = 0, V_OK, V_AMO_UNKNOWN, V_LOST };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static wf wfs[MAX_WF];
static int n_wfs;
static FILE *effects_log;

static struct {
  int rounds;
  int kills_fp[2], kills_ext[2], deaths_unexpected, not_reached[2];
  int fp_kills[N_SVC_FPS + N_WRK_FPS];
  int fsck_runs, fsck_fail;
  int lost_events, dup_amo, amo_missing, lost_results, amo_unknown, ok, unfinished;
  long amo_execs, safe_execs, history_reads;
  int sup_kills, sup_none, pauses, overlaps;
} st;

static int fp_index(const char *name) {
  for (size_t i = 0; i < N_SVC_FPS; i++)
    if (strcmp(SVC_FPS[i], name) == 0) return (int)i;
  for (size_t i = 0; i < N_WRK_FPS; i++)
    if (strcmp(WRK_FPS[i], name) == 0) return (int)(N_SVC_FPS + i);
  return -1;
}

static wf *wf_find(const char *wid) {
  int i = -1;
  /* not bounded by n_wfs: a start whose reply was lost may already run */
  if (sscanf(wid, "f%d", &i) != 1 || i < 0 || i >= MAX_WF) return NULL;
  return &wfs[i];
}

/* The side-effect counter: one line per connection, "safe WID" or "amo WID". */
static void *counter_thread(void *arg) {
  int ls = *(int *)arg;
  for (;;) {
    int c = accept(ls, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    char buf[256];
    size_t n = 0;
    for (;;) {
      ssize_t r = read(c, buf + n, sizeof buf - 1 - n);
      if (r <= 0) break;
      n += (size_t)r;
      if (memchr(buf, '\n', n) || n == sizeof buf - 1) break;
    }
    close(c);
    buf[n] = '\0';
    char kind[16], wid[128];
    if (sscanf(buf, "%15s %127s", kind, wid) != 2) continue;
    pthread_mutex_lock(&mu);
    fprintf(effects_log, "%s %s\n", kind, wid);
    fflush(effects_log);
    wf *w = wf_find(wid);
    if (w && strcmp(kind, "amo") == 0) w->amo_count++, st.amo_execs++;
    if (w && strcmp(kind, "safe") == 0) w->safe_count++, st.safe_execs++;
    if (strcmp(kind, "overlap") == 0) { /* a safe copy found the last one's lock held */
      st.overlaps++;
      fprintf(stderr, "CONCURRENT DUPLICATE %s: a safe_to_retry command ran beside itself\n", wid);
    }
    pthread_mutex_unlock(&mu);
  }
}

/* ------------------------------------------------------------ processes */

typedef struct {
  const char *name;  /* "service" / "worker" */
  pid_t pid;
  int armed;         /* started with a failpoint */
  char fp[96];
  char *store;       /* its LMDB directory */
} proc;

#define N_PROCS 3 /* the service and two workers on one task queue */
static proc procs[N_PROCS];
static int port, counter_port;
static char *fp_log;
static long fp_log_off;

static void proc_start(proc *p, const char *fp_spec) {
  char portbuf[16], addr[64];
  snprintf(portbuf, sizeof portbuf, "%d", port);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  char *logp = dbx_asprintf("%s/%s.log", opt.dir, p->name);
  char *home = dbx_asprintf("%s/home", opt.dir);
  char seed[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)(rnd() | 1));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(logp, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    if (fp_spec) {
      setenv("DURABOX_FAILPOINTS", fp_spec, 1);
      setenv("DURABOX_FAILPOINT_SEED", seed, 1);
      setenv("DURABOX_FAILPOINT_LOG", fp_log, 1);
    } else {
      unsetenv("DURABOX_FAILPOINTS");
    }
    setenv("DURABOX_HOME", home, 1);
    if (strcmp(p->name, "service") == 0)
      execl(opt.bin, opt.bin, "server", "start-dev", "--port", portbuf, "--db-filename", p->store,
            "--log-level", "warn", "--headless", (char *)NULL);
    else if (opt.retention_h)
      execl(opt.bin, opt.bin, "worker", "--address", addr, "--task-queue", TQ, "--db", p->store,
            "--sandbox-home", home, "--log-level", "warn", "--store-retention-hours",
            opt.retention_h, (char *)NULL);
    else
      execl(opt.bin, opt.bin, "worker", "--address", addr, "--task-queue", TQ, "--db", p->store,
            "--sandbox-home", home, "--log-level", "warn", (char *)NULL);
    _exit(127);
  }
  p->pid = pid;
  p->armed = fp_spec != NULL;
  snprintf(p->fp, sizeof p->fp, "%s", fp_spec ? fp_spec : "");
  free(logp);
  free(home);
}

/* New failpoint log lines since the last call: counted; returns the last name. */
static void fp_log_read(char *last, size_t cap) {
  last[0] = '\0';
  FILE *f = fopen(fp_log, "r");
  if (!f) return;
  fseek(f, fp_log_off, SEEK_SET);
  char line[256];
  while (fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    if (n == 0 || line[n - 1] != '\n') break; /* partial: read it next time */
    fp_log_off += (long)n;
    line[n - 1] = '\0';
    int i = fp_index(line);
    if (i >= 0) st.fp_kills[i]++;
    snprintf(last, cap, "%s", line);
  }
  fclose(f);
}

/* ------------------------------------------------------------ consistency */

static int run_quiet(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* mdb_stat -ae on dir: the named tables (up to 32), the main database's
 * entry count (one entry per named table) and the last committed
 * transaction's id. 0, or -1 when the tool fails. */
static int lmdb_stat(const char *dir, char names[32][64], int *nn, long *main_entries, long *last_txn) {
  *nn = 0;
  *main_entries = -1;
  *last_txn = -1;
  char *cmd = dbx_asprintf("mdb_stat -ae '%s' 2>/dev/null", dir);
  FILE *pf = cmd ? popen(cmd, "r") : NULL;
  free(cmd);
  if (pf == NULL) return -1;
  char line[512];
  int in_main = 0;
  while (fgets(line, sizeof line, pf)) {
    if (strncmp(line, "Status of ", 10) == 0) {
      in_main = strncmp(line, "Status of Main DB", 17) == 0;
      if (in_main || *nn >= 32) continue;
      line[strcspn(line, "\n")] = '\0';
      size_t l = strlen(line + 10);
      if (l >= sizeof names[0]) continue;
      memcpy(names[(*nn)++], line + 10, l + 1);
    } else if (*last_txn < 0 && sscanf(line, " Last transaction ID: %ld", last_txn) == 1) {
      continue;
    } else if (in_main && *main_entries < 0 && sscanf(line, " Entries: %ld", main_entries) == 1) {
      in_main = 0;
    }
  }
  int rc = pclose(pf);
  return WIFEXITED(rc) && WEXITSTATUS(rc) == 0 && *main_entries >= 0 && *last_txn >= 0 ? 0 : -1;
}

/* LMDB's own tools, then a store/ walk of every named table. 0 = consistent.
 * Two states of a store whose service was killed before its first commit are
 * not damage, and the service opens both (LMDB initialises them):
 *  - no data.mdb at all (killed before LMDB created it), or one of zero
 *    bytes (killed between creating the file and LMDB writing its first
 *    pages): mdb_stat cannot open it read-only;
 *  - an environment where no transaction was ever committed (mdb_stat -e's
 *    "Last transaction ID: 0") and so the main database is empty ("Entries:
 *    0": no named table): mdb_dump -a refuses it ("does not contain multiple
 *    databases", exit 1), so it is not run then. That was run 6's failed
 *    check (docs/reliability.md). Both numbers come from mdb_stat's report,
 *    not from mdb_dump's error text; an empty main database after a commit
 *    still fails. */
static int fsck(const char *dir, int is_worker) {
  st.fsck_runs++;
  char *data = dbx_asprintf("%s/data.mdb", dir);
  struct stat sb;
  int never_written = data && stat(data, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0;
  /* killed before LMDB even created data.mdb (a slow start, e.g. under ASan) */
  if (data && stat(data, &sb) != 0 && errno == ENOENT) never_written = 1;
  free(data);
  if (never_written) return 0;
  char names[32][64];
  int nn = 0;
  long main_entries = -1, last_txn = -1;
  int bad = lmdb_stat(dir, names, &nn, &main_entries, &last_txn) != 0;
  int never_committed = !bad && main_entries == 0 && last_txn == 0;
  if (!bad && !never_committed) {
    char *cmd = dbx_asprintf("mdb_dump -a '%s' >/dev/null 2>&1", dir);
    bad = cmd == NULL || run_quiet(cmd) != 0;
    free(cmd);
  }
  if (bad) {
    /* say why, and keep the store as it was for a look afterwards */
    fprintf(stderr, "fsck %s: mdb_stat/mdb_dump failed; kept as %s.fsck-fail-%d\n", dir, dir,
            st.fsck_fail + 1);
    char *cmd = dbx_asprintf("for t in mdb_stat mdb_dump; do $t -a '%s' 2>&1 >/dev/null | tail -3 | "
                             "sed \"s/^/  $t: /\"; done >&2; cp -a '%s' '%s.fsck-fail-%d'",
                             dir, dir, dir, st.fsck_fail + 1);
    if (cmd) run_quiet(cmd);
    free(cmd);
    return -1;
  }
  dbx_store_opts so = {.path = dir};
  dbx_store *s = NULL;
  if (dbx_store_open(&so, &s) != DBX_OK) {
    fprintf(stderr, "fsck %s: store open: %s\n", dir, dbx_store_open_errmsg());
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < nn && rc == 0; i++) {
    dbx_table t;
    if (dbx_store_table(s, names[i], &t) != DBX_OK) {
      fprintf(stderr, "fsck %s: table %s: %s\n", dir, names[i], dbx_store_errmsg(s));
      rc = -1;
      break;
    }
    dbx_txn *tx = NULL;
    dbx_cursor *c = NULL;
    if (dbx_store_read_begin(s, &tx) != DBX_OK || dbx_store_cursor_open(tx, t, &c) != DBX_OK) {
      rc = -1;
    } else {
      dbx_val k, v;
      uint8_t prev[512];
      size_t prev_len = 0;
      int first = 1;
      dbx_err e = dbx_store_cursor_seek(c, NULL, 0, &k, &v);
      while (e == DBX_OK) {
        size_t m = k.size < prev_len ? k.size : prev_len;
        int cmp = first ? 1 : memcmp(k.data, prev, m);
        if (!first && (cmp < 0 || (cmp == 0 && k.size <= prev_len))) {
          fprintf(stderr, "fsck %s: table %s: keys out of order\n", dir, names[i]);
          rc = -1;
          break;
        }
        if (is_worker && strcmp(names[i], "w_history") == 0) {
          HistoryEvent *ev =
              (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, v.size, v.data);
          if (!ev) {
            fprintf(stderr, "fsck %s: w_history: a value is not a HistoryEvent\n", dir);
            rc = -1;
            break;
          }
          protobuf_c_message_free_unpacked(&ev->base, NULL);
        }
        if (is_worker && strcmp(names[i], "w_journal") == 0) {
          cJSON *j = cJSON_ParseWithLength(v.data, v.size);
          if (!j) {
            fprintf(stderr, "fsck %s: w_journal: a value is not JSON\n", dir);
            rc = -1;
            break;
          }
          cJSON_Delete(j);
        }
        memcpy(prev, k.data, k.size <= 512 ? k.size : 512);
        prev_len = k.size <= 512 ? k.size : 512;
        first = 0;
        e = dbx_store_cursor_next(c, &k, &v);
      }
      if (rc == 0 && e != DBX_ENOTFOUND) rc = -1;
    }
    dbx_store_cursor_close(c);
    dbx_store_txn_abort(tx);
  }
  dbx_store_close(s);
  return rc;
}

/* ------------------------------------------------------------ workflows */

static dbx_client *cl;

static void wf_start_one(void) {
  if (n_wfs >= MAX_WF) return;
  wf *w = &wfs[n_wfs];
  char wid[32];
  snprintf(wid, sizeof wid, "f%d", n_wfs);
  /* from the index alone: a retried start (EEXIST) must expect what the
   * first, maybe successful, attempt asked for */
  int a = 100 + (int)(((unsigned)n_wfs * 7919u) % 900u), b = 100 + (int)(((unsigned)n_wfs * 104729u + 17u) % 900u);
  /* Every kill of the worker costs the attempts it was running, so the safe
   * steps are bounded by time (10 min each), not by a count of attempts that
   * a long enough kill storm always uses up (run 4 lost one result so). */
  char *in = dbx_asprintf(
      "{\"sandbox\":{\"source\":{\"kind\":\"empty\"},\"keep\":true,\"timeout_s\":10},"
      "\"retry\":{\"maximum_attempts\":0,\"maximum_interval_s\":4},\"schedule_to_close_s\":600,"
      "\"steps\":["
      "{\"name\":\"safe\",\"kind\":\"exec\",\"timeout_s\":2,\"heartbeat_timeout_s\":3,\"command\":"
      "\"exec 9>>safe.lock; flock -n 9 || bash -c 'echo overlap %s >/dev/tcp/127.0.0.1/%d'; "
      "bash -c 'echo safe %s >/dev/tcp/127.0.0.1/%d'; sleep 0.4\"},"
      "{\"name\":\"amo\",\"kind\":\"exec\",\"timeout_s\":2,\"heartbeat_timeout_s\":3,\"retry_class\":\"at_most_once\","
      "\"command\":\"bash -c 'echo amo %s >/dev/tcp/127.0.0.1/%d'; sleep 0.4\"},"
      "{\"name\":\"result\",\"kind\":\"exec\",\"timeout_s\":2,\"heartbeat_timeout_s\":3,\"command\":\"echo R=$((%d*%d))\"}]}",
      wid, counter_port, wid, counter_port, wid, counter_port, a, b);
  /* One run per workflow id, however often the start is retried: a fixed
   * request id (the service answers a retry with the run it started, also
   * after that run closed) and REJECT_DUPLICATE (3). Without them a start
   * whose reply was lost, retried after its run had closed, started a second
   * run of the same id, whose at_most_once step the counter (which knows
   * only the id) took for a duplicate. */
  char req_id[48];
  snprintf(req_id, sizeof req_id, "dbx-faults-%s", wid);
  dbx_client_start_opts so = {.workflow_id = wid, .workflow_type = "durabox.Script",
                              .task_queue = TQ, .input_json = in, .request_id = req_id,
                              .id_reuse_policy = 3};
  char *run_id = NULL, *err = NULL;
  dbx_err rc = dbx_client_start_workflow(cl, &so, &run_id, &err);
  free(in);
  free(err);
  /* A start whose reply was lost may still have happened: the next attempt
   * with the same id answers EEXIST; the run id then comes from history. */
  if (rc != DBX_OK && rc != DBX_EEXIST) {
    free(run_id);
    return;
  }
  pthread_mutex_lock(&mu);
  w->wid = dbx_strdup(wid);
  w->run_id = run_id;
  w->a = a, w->b = b;
  n_wfs++;
  pthread_mutex_unlock(&mu);
}

/* Judge a closed workflow from its close event. */
static void judge(wf *w, const HistoryEvent *e) {
  if (e->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
    const WorkflowExecutionCompletedEventAttributes *ca =
        e->workflow_execution_completed_event_attributes;
    char *res = ca ? dbx_payloads_to_json(ca->result) : NULL;
    cJSON *j = res ? cJSON_Parse(res) : NULL;
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
    char want[64];
    snprintf(want, sizeof want, "R=%d", w->a * w->b);
    int result_ok = 0, amo_failed = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, steps) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(s, "name");
      const cJSON *ok = cJSON_GetObjectItemCaseSensitive(s, "ok");
      const cJSON *out = cJSON_GetObjectItemCaseSensitive(s, "output_excerpt");
      if (!cJSON_IsString(nm)) continue;
      if (strcmp(nm->valuestring, "amo") == 0) {
        if (cJSON_IsTrue(ok)) w->amo_ok = 1;
        else amo_failed = 1;
      }
      if (strcmp(nm->valuestring, "result") == 0 && cJSON_IsTrue(ok) && cJSON_IsString(out) &&
          strstr(out->valuestring, want))
        result_ok = 1;
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(j, "failed_step");
    if (cJSON_IsString(status) && strcmp(status->valuestring, "completed") == 0 && result_ok)
      w->verdict = V_OK;
    else if (amo_failed && cJSON_IsString(fs) && strcmp(fs->valuestring, "amo") == 0)
      w->verdict = V_AMO_UNKNOWN;
    else
      w->verdict = V_LOST;
    if (w->verdict == V_LOST) fprintf(stderr, "LOST RESULT %s: %s\n", w->wid, res ? res : "?");
    cJSON_Delete(j);
    free(res);
  } else {
    w->verdict = V_LOST;
    fprintf(stderr, "LOST RESULT %s: closed with event type %d\n", w->wid, (int)e->event_type);
  }
}

static int is_close_event(int t) {
  return t == ET(WORKFLOW_EXECUTION_COMPLETED) || t == ET(WORKFLOW_EXECUTION_FAILED) ||
         t == ET(WORKFLOW_EXECUTION_TIMED_OUT) || t == ET(WORKFLOW_EXECUTION_TERMINATED) ||
         t == ET(WORKFLOW_EXECUTION_CANCELED) || t == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW);
}

/* Read a workflow's history; every event seen before must be there unchanged. */
static void wf_check(wf *w) {
  dbx_client_history h = {0};
  char *err = NULL;
  dbx_err rc = dbx_client_get_history(cl, w->wid, w->run_id, NULL, &h, &err);
  free(err);
  if (rc != DBX_OK) {
    dbx_client_history_cleanup(&h);
    return; /* the service is down or restarting: try again later */
  }
  st.history_reads++;
  if (h.n < w->n_ev) {
    fprintf(stderr, "LOST EVENTS %s: had %zu acknowledged events, now %zu\n", w->wid, w->n_ev,
            h.n);
    st.lost_events += (int)(w->n_ev - h.n);
  }
  for (size_t i = 0; i < h.n; i++) {
    size_t len = protobuf_c_message_get_packed_size(&h.events[i]->base);
    uint8_t *buf = malloc(len ? len : 1);
    protobuf_c_message_pack(&h.events[i]->base, buf);
    if (i < w->n_ev) {
      if (w->ev_len[i] != len || memcmp(w->ev[i], buf, len) != 0) {
        fprintf(stderr, "CHANGED EVENT %s: event %zu differs from what a client read before\n",
                w->wid, i + 1);
        st.lost_events++;
      }
      free(buf);
    } else {
      w->ev = realloc(w->ev, (i + 1) * sizeof *w->ev);
      w->ev_len = realloc(w->ev_len, (i + 1) * sizeof *w->ev_len);
      w->ev[i] = buf;
      w->ev_len[i] = len;
      w->n_ev = i + 1;
    }
  }
  if (!w->closed && h.n > 0 && is_close_event((int)h.events[h.n - 1]->event_type)) {
    w->closed = 1;
    judge(w, h.events[h.n - 1]);
  }
  w->reverify = 0;
  dbx_client_history_cleanup(&h);
}

static int open_count(void) {
  int n = 0;
  for (int i = 0; i < n_wfs; i++) n += !wfs[i].closed;
  return n;
}

/* One tick of the workload: read every open history, some closed ones that
 * a service restart has not re-read yet, and top up the in-flight set. */
static void tick(int start_new) {
  /* a slice of the open ones per tick (round robin), so the reads do not
   * starve the service on a small machine */
  static int next_open;
  int budget = 8, open_budget = 6;
  for (int k = 0; k < n_wfs && open_budget > 0; k++) {
    int i = (next_open + k) % n_wfs;
    if (!wfs[i].closed) {
      wf_check(&wfs[i]);
      open_budget--;
      next_open = i + 1;
    }
  }
  for (int i = 0; i < n_wfs; i++)
    if (wfs[i].closed && wfs[i].reverify && budget-- > 0) wf_check(&wfs[i]);
  if (start_new && procs[0].pid > 0)
    for (int k = open_count(); k < opt.inflight; k++) wf_start_one();
}

/* ------------------------------------------------------------ the rounds */

/* Reap a dead child; classify and check its store; returns 1 when pid died. */
static int reap(proc *p, int *by_fp, char *fp_name, size_t cap) {
  int status = 0;
  pid_t r = waitpid(p->pid, &status, WNOHANG);
  if (r != p->pid) return 0;
  int idx = p == &procs[0] ? 0 : 1;
  fp_log_read(fp_name, cap);
  *by_fp = fp_name[0] != '\0';
  if (*by_fp) {
    st.kills_fp[idx]++;
  } else if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
    st.deaths_unexpected++;
    fprintf(stderr, "UNEXPECTED DEATH of the %s: status 0x%x\n", p->name, status);
  }
  p->pid = 0;
  if (fsck(p->store, idx == 1) != 0) st.fsck_fail++;
  if (idx == 0)
    for (int i = 0; i < n_wfs; i++) wfs[i].reverify = wfs[i].closed;
  return 1;
}

static void kill_ext(proc *p) {
  if (p->pid <= 0) return;
  kill(p->pid, SIGKILL);
  int status;
  waitpid(p->pid, &status, 0);
  char name[128];
  fp_log_read(name, sizeof name); /* it may have fired just before */
  int idx = p == &procs[0] ? 0 : 1;
  if (name[0]) st.kills_fp[idx]++;
  else st.kills_ext[idx]++;
  p->pid = 0;
  if (fsck(p->store, idx == 1) != 0) st.fsck_fail++;
  if (idx == 0)
    for (int i = 0; i < n_wfs; i++) wfs[i].reverify = wfs[i].closed;
}

static void keep_alive(void) {
  for (int i = 0; i < N_PROCS; i++) {
    char name[128];
    int by_fp = 0;
    if (procs[i].pid > 0) reap(&procs[i], &by_fp, name, sizeof name);
    if (procs[i].pid <= 0) proc_start(&procs[i], NULL);
  }
}

/* Reap (and restart unarmed) every process but skip that died meanwhile. */
static void reap_others(const proc *skip) {
  for (int i = 0; i < N_PROCS; i++) {
    proc *o = &procs[i];
    char oname[128];
    int o_fp = 0;
    if (o != skip && o->pid > 0 && reap(o, &o_fp, oname, sizeof oname)) proc_start(o, NULL);
  }
}

/* Field 22 of /proc/PID/stat (the start time in clock ticks), 0 when the
 * process is gone or a zombie. */
static unsigned long long proc_start_ticks(long pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  const char *p = n ? strrchr(buf, ')') : NULL; /* the name may hold ')' */
  if (p == NULL || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X') return 0;
  p += 2;
  for (int field = 3; field < 22 && p; field++)
    if ((p = strchr(p, ' ')) != NULL) p++;
  return p ? strtoull(p, NULL, 10) : 0;
}

/* A live exec supervisor of a command still running (no status), or 0:
 * its pid and start time from the command's "supervisor" file ("pid
 * starttime"), both checked against the process, so that a reused pid is
 * never signalled. The pid alone, with argv[0], was not enough: pids wrap
 * at 32,768 here, and a supervisor's own child, forked and not yet exec'd,
 * is also "durabox-supervise"; run 15 killed such a child of another
 * command (whose supervisor then said "cannot start ...: Broken pipe"). */
static pid_t find_supervisor(void) {
  char *pat = dbx_asprintf("%s/home/sandboxes/*/meta/cmds/*/supervisor", opt.dir);
  glob_t g;
  pid_t found = 0;
  if (glob(pat, 0, NULL, &g) == 0) {
    size_t start = g.gl_pathc ? (size_t)(rnd() % g.gl_pathc) : 0;
    for (size_t k = 0; k < g.gl_pathc && !found; k++) {
      const char *f = g.gl_pathv[(start + k) % g.gl_pathc];
      char *status = dbx_asprintf("%.*s/status", (int)(strrchr(f, '/') - f), f);
      int done = access(status, F_OK) == 0;
      free(status);
      FILE *fp = done ? NULL : fopen(f, "r");
      long pid = 0;
      unsigned long long ticks = 0;
      if (fp && fscanf(fp, "%ld %llu", &pid, &ticks) != 2) pid = 0;
      if (fp) fclose(fp);
      if (pid <= 1 || ticks == 0 || proc_start_ticks(pid) != ticks) continue;
      char cpath[64], argv0[64] = "";
      snprintf(cpath, sizeof cpath, "/proc/%ld/cmdline", pid);
      FILE *cf = fopen(cpath, "r");
      if (cf && fgets(argv0, sizeof argv0, cf) && strcmp(argv0, "durabox-supervise") == 0)
        found = (pid_t)pid;
      if (cf) fclose(cf);
    }
  }
  globfree(&g);
  free(pat);
  return found;
}

/* Kill one running command's supervisor (SIGKILL) as soon as one runs
 * (within --round-s), then let the workload go on for a second. */
static void round_supervisor(int r) {
  double deadline = now_s() + opt.round_s;
  pid_t sup = 0;
  while (!(sup = find_supervisor()) && now_s() < deadline) {
    reap_others(NULL);
    tick(1);
    sleep_ms(20);
  }
  if (sup && kill(sup, SIGKILL) == 0) st.sup_kills++;
  else st.sup_none++;
  if (opt.verbose) fprintf(stderr, "round %d: supervisor %d %s\n", r, (int)sup, sup ? "killed" : "none");
  for (double end = now_s() + 1; now_s() < end;) {
    reap_others(NULL);
    tick(1);
    sleep_ms(100);
  }
}

/* Pause one worker (SIGSTOP) past the exec steps' heartbeat timeout (3 s),
 * so that the service gives its attempts to the other worker, then resume
 * it: its stale attempts must leave the commands alone. */
static void round_pause(int r) {
  proc *p = &procs[1 + (int)(rnd() % 2)];
  if (p->pid <= 0) proc_start(p, NULL);
  sleep_ms((int)(rnd() % 500));
  if (kill(p->pid, SIGSTOP) != 0) return;
  st.pauses++;
  if (opt.verbose) fprintf(stderr, "round %d: %s paused\n", r, p->name);
  for (double end = now_s() + 4.5; now_s() < end;) {
    reap_others(p);
    tick(1);
    sleep_ms(100);
  }
  kill(p->pid, SIGCONT);
  for (double end = now_s() + 1; now_s() < end;) {
    reap_others(NULL);
    tick(1);
    sleep_ms(100);
  }
}

/* Round r takes the next fault of --kinds (by default all four in turn):
 * the service, or a worker (the two in turn), killed and restarted armed
 * with a failpoint; an exec supervisor killed; a worker paused past its
 * heartbeat timeout. */
static void round_run(int r) {
  static int worker_rounds;
  int kind = opt.kinds[r % opt.n_kinds];
  if (kind == K_SUPERVISOR || kind == K_PAUSE) {
    if (kind == K_SUPERVISOR) round_supervisor(r);
    else round_pause(r);
    st.rounds++;
    return;
  }
  int idx = kind == K_SERVICE ? 0 : 1; /* stats */
  proc *p = idx == 0 ? &procs[0] : &procs[1 + (worker_rounds++) % 2];
  const char *fp = idx == 0 ? SVC_FPS[rnd() % N_SVC_FPS] : WRK_FPS[rnd() % N_WRK_FPS];
  char spec[160];
  snprintf(spec, sizeof spec, "%s=kill:after=%d", fp, (int)(rnd() % (uint64_t)(opt.max_after + 1)));
  /* the target dies at a random moment first, then comes back armed */
  sleep_ms((int)(rnd() % 200));
  kill_ext(p);
  proc_start(p, spec);
  double deadline = now_s() + opt.round_s;
  for (;;) {
    char name[128];
    int by_fp = 0;
    if (reap(p, &by_fp, name, sizeof name)) {
      if (opt.verbose) fprintf(stderr, "round %d: %s died at %s\n", r, p->name, name);
      break;
    }
    if (now_s() > deadline) {
      st.not_reached[idx]++;
      if (opt.verbose) fprintf(stderr, "round %d: %s not reached\n", r, spec);
      kill_ext(p);
      break;
    }
    reap_others(p);
    tick(1);
    sleep_ms(100);
  }
  proc_start(p, NULL);
  st.rounds++;
}

static int listen_any(int *port_out) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 || listen(s, 128) != 0 ||
      getsockname(s, (struct sockaddr *)&a, &al) != 0)
    return -1;
  *port_out = ntohs(a.sin_port);
  return s;
}

static void usage(void) {
  fprintf(stderr,
          "usage: dbx-faults --bin DURABOX --dir DIR [--rounds N] [--inflight N] [--round-s S]\n"
          "                  [--drain-s S] [--max-after N] [--seed N] [--verbose]\n"
          "                  [--kinds service,worker,supervisor,pause]\n"
          "                  [--worker-retention-hours H]  (the worker's --store-retention-hours:\n"
          "                  a short one has its sweeper remove closed runs during the storm)\n");
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--verbose") == 0) opt.verbose = 1;
    else if (!v) return usage(), 2;
    else if (strcmp(a, "--bin") == 0) opt.bin = v, i++;
    else if (strcmp(a, "--dir") == 0) opt.dir = v, i++;
    else if (strcmp(a, "--rounds") == 0) opt.rounds = atoi(v), i++;
    else if (strcmp(a, "--inflight") == 0) opt.inflight = atoi(v), i++;
    else if (strcmp(a, "--round-s") == 0) opt.round_s = atoi(v), i++;
    else if (strcmp(a, "--drain-s") == 0) opt.drain_s = atoi(v), i++;
    else if (strcmp(a, "--max-after") == 0) opt.max_after = atoi(v), i++;
    else if (strcmp(a, "--seed") == 0) opt.seed = strtoull(v, NULL, 10), i++;
    else if (strcmp(a, "--worker-retention-hours") == 0) opt.retention_h = v, i++;
    else if (strcmp(a, "--kinds") == 0) {
      if (kinds_parse(v) != 0) return usage(), 2;
      i++;
    } else return usage(), 2;
  }
  if (!opt.bin || !opt.dir) return usage(), 2;
  rng = opt.seed ? opt.seed * 2654435761ULL + 1 : 1;
  mkdir(opt.dir, 0755);
  fp_log = dbx_asprintf("%s/failpoints.log", opt.dir);
  char *eff = dbx_asprintf("%s/effects.log", opt.dir);
  effects_log = fopen(eff, "a");
  free(eff);
  if (!effects_log) return perror("effects.log"), 2;
  int ls = listen_any(&counter_port);
  if (ls < 0) return perror("counter socket"), 2;
  int ps = listen_any(&port); /* a free port for the service, released now */
  close(ps);
  pthread_t th;
  pthread_create(&th, NULL, counter_thread, &ls);
  signal(SIGPIPE, SIG_IGN);

  procs[0] = (proc){.name = "service", .store = dbx_asprintf("%s/service-db", opt.dir)};
  procs[1] = (proc){.name = "worker", .store = dbx_asprintf("%s/worker-db", opt.dir)};
  procs[2] = (proc){.name = "worker2", .store = dbx_asprintf("%s/worker2-db", opt.dir)};
  dbx_rpc_global_init();
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  dbx_client_opts co = {.address = addr, .identity = "dbx-faults"};
  if (dbx_client_create(&co, &cl) != DBX_OK) return fprintf(stderr, "client\n"), 2;
  for (int i = 0; i < N_PROCS; i++) proc_start(&procs[i], NULL);
  double t0 = now_s();
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  for (int r = 0; r < opt.rounds && !stop_requests; r++) {
    round_run(r);
    if (opt.verbose || (r + 1) % 25 == 0)
      fprintf(stderr, "[%.0f s] round %d/%d: kills service %d+%d worker %d+%d, workflows %d (%d open)\n",
              now_s() - t0, r + 1, opt.rounds, st.kills_fp[0], st.kills_ext[0], st.kills_fp[1],
              st.kills_ext[1], n_wfs, open_count());
    if (opt.verbose || (r + 1) % 25 == 0)
      fprintf(stderr, "    so far: lost events %d, store failures %d, unexpected deaths %d\n",
              st.lost_events, st.fsck_fail, st.deaths_unexpected);
  }
  /* drain: no failpoints, no new workflows, until every workflow closed */
  double drain_end = now_s() + opt.drain_s;
  if (stop_requests) fprintf(stderr, "stopping after %d rounds; draining\n", st.rounds);
  while (open_count() > 0 && now_s() < drain_end && stop_requests < 2) {
    keep_alive();
    tick(0);
    sleep_ms(200);
  }
  for (int i = 0; i < n_wfs; i++) wfs[i].reverify = 1;
  for (int i = 0; i < n_wfs; i++) wf_check(&wfs[i]); /* every history once more */
  double secs = now_s() - t0;
  for (int i = 0; i < N_PROCS; i++)
    if (procs[i].pid > 0) {
      kill(procs[i].pid, SIGCONT);
      kill(procs[i].pid, SIGKILL);
      waitpid(procs[i].pid, NULL, 0);
      procs[i].pid = 0;
      if (fsck(procs[i].store, i != 0) != 0) st.fsck_fail++;
    }
  sleep_ms(300); /* late counter connections from killed sandboxes */
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_WF; i++) {
    wf *w = &wfs[i];
    if (i >= n_wfs) {
      if (w->amo_count > 1) st.dup_amo++; /* started, never registered */
      continue;
    }
    if (w->amo_count > 1) {
      st.dup_amo++;
      fprintf(stderr, "DUPLICATE at_most_once %s: %d executions\n", w->wid, w->amo_count);
    }
    if (w->amo_ok && w->amo_count != 1) {
      st.amo_missing++;
      fprintf(stderr, "AMO REPORTED OK WITHOUT ITS EFFECT %s\n", w->wid);
    }
    if (!w->closed) st.unfinished++;
    else if (w->verdict == V_OK) st.ok++;
    else if (w->verdict == V_AMO_UNKNOWN) st.amo_unknown++;
    else st.lost_results++;
  }
  printf("dbx-faults: seed %llu, %.0f s\n", (unsigned long long)opt.seed, secs);
  printf("  rounds                          %d\n", st.rounds);
  printf("  kills        (failpoint+outside) service %d+%d, worker %d+%d\n", st.kills_fp[0],
         st.kills_ext[0], st.kills_fp[1], st.kills_ext[1]);
  printf("  armed failpoint not reached     service %d, worker %d\n", st.not_reached[0],
         st.not_reached[1]);
  printf("  exec supervisors killed         %d (no running command found in a round: %d)\n",
         st.sup_kills, st.sup_none);
  printf("  workers paused past heartbeat   %d\n", st.pauses);
  for (size_t i = 0; i < N_SVC_FPS + N_WRK_FPS; i++)
    printf("    %-34s %d\n", i < N_SVC_FPS ? SVC_FPS[i] : WRK_FPS[i - N_SVC_FPS], st.fp_kills[i]);
  printf("  workflows                       %d\n", n_wfs);
  printf("    completed right               %d\n", st.ok);
  printf("    at_most_once outcome unknown  %d\n", st.amo_unknown);
  printf("    lost results                  %d\n", st.lost_results);
  printf("    unfinished after drain        %d\n", st.unfinished);
  printf("  at_most_once executions         %ld\n", st.amo_execs);
  printf("  at_most_once duplicates         %d\n", st.dup_amo);
  printf("  at_most_once ok without effect  %d\n", st.amo_missing);
  printf("  safe_to_retry executions        %ld\n", st.safe_execs);
  printf("  concurrent duplicates (safe)    %d\n", st.overlaps);
  printf("  history reads                   %ld\n", st.history_reads);
  printf("  lost acknowledged events        %d\n", st.lost_events);
  printf("  store checks (failures)         %d (%d)\n", st.fsck_runs, st.fsck_fail);
  printf("  unexpected deaths               %d\n", st.deaths_unexpected);
  pthread_mutex_unlock(&mu);
  int bad = st.dup_amo || st.amo_missing || st.lost_results || st.unfinished || st.lost_events ||
            st.fsck_fail || st.deaths_unexpected || st.overlaps;
  printf("verdict: %s\n", bad ? "FAIL" : "PASS");
  fflush(stdout);
  _exit(bad ? 1 : 0); /* the counter thread is blocked in accept */
}
