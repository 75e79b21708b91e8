/* durabox worker / durabox replay.
 *
 * worker: a Temporal worker for the built-in workflow types and the sandbox
 * activities, against any Temporal-compatible service. Flags override the
 * environment (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
 * TEMPORAL_TLS_CA / _CERT / _KEY as file paths). SIGINT/SIGTERM are blocked
 * in every thread and taken with sigwait() by the main thread, which then
 * stops the worker with a 10 s grace period and exits 0.
 *
 * replay: replays one run recorded in the worker's LMDB (worker/wstore.h)
 * through its workflow type, offline, and reports determinism. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fs.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/embed.h"
#include "cli/flags.h"
#include "cli/kit.h"
#include "cli/pbjson.h"
#include "rpc/rpc.h"
#include "worker/replay.h"
#include "worker/worker.h"
#include "worker/wstore.h"
#include "workflows/builtin.h"


int64_t dbx_cli_store_retention_ms(double hours) {
  if (hours < 0) return 0;
  if (hours == 0) return -1;
  int64_t ms = (int64_t)(hours * 3600000.0);
  return ms > 0 ? ms : 1;
}

char *dbx_cli_worker_db_default(void) {
  const char *e = getenv("DURABOX_WORKER_DB");
  if (e && *e) return dbx_strdup(e);
  char *home = dbx_cli_home(); /* the same place `durabox run` and `durabox dev` write */
  char *db = home ? dbx_asprintf("%s/worker", home) : NULL;
  free(home);
  return db;
}

static void worker_usage(FILE *f) {
  fprintf(f,
          "usage: durabox worker [flags]\n"
          "  --address HOST:PORT   service address (TEMPORAL_ADDRESS; default 127.0.0.1:7233)\n"
          "  --namespace NS        (TEMPORAL_NAMESPACE; default 'default')\n"
          "  --task-queue TQ       task queue to poll (default 'durabox')\n"
          "  --tls-ca FILE --tls-cert FILE --tls-key FILE   TLS (TEMPORAL_TLS_CA/_CERT/_KEY)\n"
          "  --tls                 TLS with the system roots\n"
          "  --api-key KEY         (TEMPORAL_API_KEY)\n"
          "  --db DIR              worker store (DURABOX_WORKER_DB; default $DURABOX_HOME/worker,\n"
          "                        DURABOX_HOME defaulting to ~/.local/share/durabox)\n"
          "  --sandbox-home DIR    local sandboxes (DURABOX_HOME)\n"
          "  --sandbox DRIVER      local (default) or daytona (DURABOX_SANDBOX; daytona reads\n"
          "                        DAYTONA_API_KEY, DAYTONA_API_URL, DAYTONA_TARGET)\n"
          "  --activity-slots N    concurrent activity executions, running or waiting on a\n"
          "                        command (default 8)\n"
          "  --activity-threads N  threads that run activities (default: the larger of\n"
          "                        2 x CPUs + 4 and the slots up to 32); a sandbox.exec\n"
          "                        waiting on its command holds a slot but no thread\n"
          "  --workflow-task-threads N  threads that run workflow tasks, which the pollers\n"
          "                        hand over, 1-1024 (default 2 x CPUs + 4, at least the\n"
          "                        pollers: 2 for the task queue and 2 for the sticky queue)\n"
          DBX_CLI_RETENTION_USAGE
          "  --log-level LEVEL     debug|info|warn|error\n"
          "flags are written --flag value or --flag=value; a service that cannot be reached is\n"
          "said at level warn, and retried\n");
}

static const char *env_or(const char *name, const char *def) {
  const char *v = getenv(name);
  return v && *v ? v : def;
}

/* One GetSystemInfo call (5 s) to o's service: DBX_OK or why not. */
static dbx_err reach(dbx_client *probe, char **err) {
  GetSystemInfoRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_REQUEST);
  ProtobufCMessage *rs = NULL;
  free(*err);
  *err = NULL;
  dbx_err e = dbx_client_call(probe, "GetSystemInfo", &rq.base, &GetSystemInfoResponse__D, 5000, NULL, &rs, err);
  dbx_client_msg_free(rs);
  return e;
}

/* Wait for a stop signal; meanwhile, at start and whenever the worker's
 * polls have failed since the last look (every 5 s), ask the service for
 * its system info and say at level warn, once per outage, that it cannot
 * be reached (the worker's own poll errors are logged at debug only), and
 * at info when it answers again. Returns the signal. */
static int watch(dbx_worker *w, const dbx_worker_opts *wo, const sigset_t *set) {
  dbx_client_opts co = {.address = wo->address, .namespace_ = wo->namespace_, .tls = wo->tls,
                        .tls_ca_pem = wo->tls_ca_pem, .tls_cert_pem = wo->tls_cert_pem,
                        .tls_key_pem = wo->tls_key_pem, .api_key = wo->api_key};
  dbx_client *probe = NULL;
  if (dbx_client_create(&co, &probe) != DBX_OK) probe = NULL;
  uint64_t seen = UINT64_MAX; /* force a first look */
  int down = 0, sig = 0;
  char *err = NULL;
  for (;;) {
    dbx_worker_stats st;
    dbx_worker_get_stats(w, &st);
    if (probe && (st.poll_errors != seen || down)) {
      seen = st.poll_errors;
      dbx_err e = reach(probe, &err);
      if (e == DBX_EUNAVAILABLE && !down) {
        DBX_WARN("worker", "cannot reach the service at %s: %s; still trying (is it running? `durabox dev` "
                 "starts one)%s", wo->address, err ? err : dbx_strerror(e),
                 wo->api_key && !wo->tls ? "; an API key was given without TLS: does it need --tls?" : "");
        down = 1;
      } else if (e != DBX_EUNAVAILABLE && down) {
        DBX_INFO("worker", "the service at %s answers again", wo->address);
        down = 0;
      }
    }
    struct timespec t = {.tv_sec = 5, .tv_nsec = 0};
    sig = sigtimedwait(set, NULL, &t);
    if (sig > 0) break;
  }
  free(err);
  dbx_client_destroy(probe);
  return sig;
}

int dbx_cli_worker(int argc, char **argv) {
  const char *address = env_or("TEMPORAL_ADDRESS", "127.0.0.1:7233");
  const char *ns = env_or("TEMPORAL_NAMESPACE", "default");
  const char *api_key = env_or("TEMPORAL_API_KEY", NULL);
  const char *ca = env_or("TEMPORAL_TLS_CA", NULL), *cert = env_or("TEMPORAL_TLS_CERT", NULL),
             *key = env_or("TEMPORAL_TLS_KEY", NULL);
  const char *tq = "durabox", *db = NULL, *home = NULL, *sandbox = NULL;
  const char *level = NULL;
  int tls = 0, slots = 0, act_threads = 0, wft_threads = 0;
  double retention_h = -1; /* unset: the worker's default */
  const dbx_cli_flag fl[] = {
      {"--address", NULL, DBX_CLI_FLAG_STR, &address, 0, 0},
      {"--namespace", "-n", DBX_CLI_FLAG_STR, &ns, 0, 0},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &tq, 0, 0},
      {"--tls-ca", NULL, DBX_CLI_FLAG_STR, &ca, 0, 0},
      {"--tls-cert", NULL, DBX_CLI_FLAG_STR, &cert, 0, 0},
      {"--tls-key", NULL, DBX_CLI_FLAG_STR, &key, 0, 0},
      {"--api-key", NULL, DBX_CLI_FLAG_STR, &api_key, 0, 0},
      {"--db", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--sandbox-home", NULL, DBX_CLI_FLAG_STR, &home, 0, 0},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
      {"--activity-slots", NULL, DBX_CLI_FLAG_INT, &slots, 1, 100000},
      {"--activity-threads", NULL, DBX_CLI_FLAG_INT, &act_threads, 1, 1024},
      {"--workflow-task-threads", NULL, DBX_CLI_FLAG_INT, &wft_threads, 1, 1024},
      {"--store-retention-hours", NULL, DBX_CLI_FLAG_NUM, &retention_h, 0, 87600},
      {"--tls", NULL, DBX_CLI_FLAG_BOOL, &tls, 0, 0},
      {"--log-level", NULL, DBX_CLI_FLAG_STR, &level, 0, 0},
  };
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_flag_take("durabox worker", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      worker_usage(stdout);
      return 0;
    }
    dbx_cli_flag_unknown("durabox worker", argv[i]);
    worker_usage(stderr);
    return 2;
  }
  if (level) {
    dbx_log_level l;
    if (dbx_log_level_parse(level, &l) != 0) {
      fprintf(stderr, "durabox worker: unknown log level '%s'\n", level);
      return 2;
    }
    dbx_log_set_level(l);
  }
  if (dbx_cli_address_check(address) != 0) return 2;
  if (dbx_cli_nonempty("durabox worker", "--task-queue", tq) != 0 ||
      dbx_cli_nonempty("durabox worker", "--namespace", ns) != 0 ||
      dbx_cli_nonempty("durabox worker", "--db", db) != 0 ||
      dbx_cli_nonempty("durabox worker", "--sandbox-home", home) != 0 ||
      dbx_cli_store_folders_check("durabox worker", NULL, db) != 0 ||
      dbx_cli_sandbox_driver("durabox worker", sandbox) != 0)
    return 2; /* the service would refuse every poll, and the worker would idle */
  int rc = 1;
  char *ca_pem = NULL, *cert_pem = NULL, *key_pem = NULL, *dbdef = NULL, *err = NULL;
  dbx_worker *w = NULL;
  dbx_cli_kit kit = {0};
  const char *unread = (ca && !(ca_pem = dbx_cli_read_file(ca, NULL)))       ? ca
                       : (cert && !(cert_pem = dbx_cli_read_file(cert, NULL))) ? cert
                       : (key && !(key_pem = dbx_cli_read_file(key, NULL)))    ? key
                                                                                : NULL;
  if (unread) {
    fprintf(stderr, "durabox worker: cannot read the TLS file %s: %s\n", unread, strerror(errno));
    goto out;
  }
  if (!db) db = dbdef = dbx_cli_worker_db_default();
  if (!db || dbx_fs_mkdirs(db, 0700) != DBX_OK) {
    fprintf(stderr, "durabox worker: cannot create %s: %s\n", db ? db : "?", strerror(errno));
    goto out;
  }
  /* Block the stop signals before any thread exists; the main thread takes them. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  dbx_worker_opts o = {0};
  o.address = address;
  o.namespace_ = ns;
  o.task_queue = tq;
  o.tls = tls;
  o.tls_ca_pem = ca_pem;
  o.tls_cert_pem = cert_pem;
  o.tls_key_pem = key_pem;
  o.api_key = api_key;
  o.db_dir = db;
  o.activity_slots = slots;
  o.activity_threads = act_threads;
  o.workflow_task_threads = wft_threads;
  o.store_retention_ms = dbx_cli_store_retention_ms(retention_h);
  dbx_err e = dbx_worker_create(&o, &w, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", err ? err : dbx_strerror(e));
    goto out;
  }
  if (sandbox) setenv("DURABOX_SANDBOX", sandbox, 1); /* read by the kit */
  e = dbx_cli_kit_open(home, &kit, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", err ? err : dbx_strerror(e));
    goto out;
  }
  e = dbx_cli_kit_register(&kit, w);
  if (e == DBX_OK) e = dbx_cli_kit_register_fleet(&kit, w, &o);
  if (e == DBX_OK) e = dbx_worker_start(w);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", dbx_strerror(e));
    goto out;
  }
  int sig = watch(w, &o, &set);
  DBX_INFO("worker", "signal %d: stopping (grace 10 s)", sig);
  dbx_worker_stop(w, 10000);
  rc = 0;
out:
  dbx_worker_destroy(w); /* before the activity types and driver it borrows */
  dbx_cli_kit_close(&kit);
  free(ca_pem);
  free(cert_pem);
  free(key_pem);
  free(dbdef);
  free(err);
  return rc;
}

/* ------------------------------------------------------------ replay */

#define REPLAY_USAGE                                                                          \
  "usage: durabox replay --workflow-id ID [--run-id R] [--namespace NS] [--db DIR | --address A]\n" \
  "       durabox replay --history FILE.json\n"                                                   \
  "  replays a run against the workflow code built in (durabox.Script, ...) and checks that\n"    \
  "  it issues the same commands (exit 0 deterministic; 1 not, naming the first event that\n"    \
  "  differs; 2 usage or input errors). The run comes from FILE (Temporal's JSON history:\n"     \
  "  `durabox workflow show --output json`, `temporal workflow show --output json`), from the\n" \
  "  service at --address/TEMPORAL_ADDRESS (every page; --tls etc. as the workflow verbs), or\n" \
  "  with --db or no address from the worker store (default $DURABOX_HOME/worker)\n"

/* The events of the run: from the JSON file, the service or the store. */
static int replay_load(const char *file, const dbx_cli_conn *conn, const char *db, const char *wid, const char *rid,
                       HistoryEvent ***evs, size_t *n, char **run, int *from_store) {
  char *err = NULL;
  dbx_err e;
  *from_store = 0;
  if (file) {
    size_t len = 0;
    char *text = dbx_cli_read_file(file, &len);
    if (text == NULL) {
      fprintf(stderr, "durabox replay: cannot read %s: %s\n", file, strerror(errno));
      return 2;
    }
    e = dbx_pb_history_from_json(text, len, evs, n, &err);
    free(text);
    if (e != DBX_OK) {
      fprintf(stderr, "durabox replay: %s: %s\n", file, err ? err : dbx_strerror(e));
      free(err);
      return 2;
    }
    return 0;
  }
  if (conn->address) {
    dbx_client_opts co;
    dbx_cli_conn_client_opts(conn, &co);
    dbx_client *c = NULL;
    if (dbx_client_create(&co, &c) != DBX_OK) {
      fprintf(stderr, "durabox replay: cannot create a client for %s\n", conn->address);
      return 2;
    }
    dbx_client_history h = {0};
    e = dbx_client_get_history(c, wid, rid, NULL, &h, &err); /* every page */
    if (e == DBX_OK && h.n == 0) e = DBX_ENOTFOUND;
    if (e != DBX_OK) {
      dbx_cli_report("replay", conn->address, e, err);
      dbx_client_history_cleanup(&h);
      dbx_client_destroy(c);
      free(err);
      return 2;
    }
    /* own the events: pack and unpack each (the pages belong to h) */
    *evs = calloc(h.n, sizeof **evs);
    for (size_t i = 0; *evs && i < h.n; i++) {
      size_t sz = protobuf_c_message_get_packed_size(&h.events[i]->base);
      uint8_t *buf = malloc(sz ? sz : 1);
      if (buf) protobuf_c_message_pack(&h.events[i]->base, buf);
      (*evs)[i] = buf ? (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, sz, buf) : NULL;
      free(buf);
      if ((*evs)[i] == NULL) break;
      *n = i + 1;
    }
    int ok = *evs && *n == h.n;
    dbx_client_history_cleanup(&h);
    dbx_client_destroy(c);
    if (!ok) {
      fprintf(stderr, "durabox replay: out of memory\n");
      return 2;
    }
    *run = strdup(rid ? rid : "(latest)");
    return 0;
  }
  if (dbx_cli_worker_store_check("durabox replay", db) != 0) return 2;
  dbx_wstore *s = NULL;
  e = dbx_wstore_open(db, 0, &s, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox replay: %s\n", err ? err : dbx_strerror(e));
    free(err);
    return 2;
  }
  e = dbx_wstore_history_load(s, conn->namespace_, wid, rid, evs, n, run);
  dbx_wstore_close(s);
  if (e != DBX_OK) {
    fprintf(stderr,
            "durabox replay: no recorded history for %s%s%s in namespace %s (%s)%s\n", wid,
            rid ? " run " : "", rid ? rid : "", conn->namespace_, dbx_strerror(e),
            e == DBX_ENOTFOUND ? "; the worker store keeps a closed run only for its retention "
                                 "(24 h by default): --address reads the history from the service"
                               : "");
    return 2;
  }
  *from_store = 1;
  return 0;
}

int dbx_cli_replay(int argc, char **argv) {
  const char *wid = NULL, *rid = NULL, *db = NULL, *file = NULL;
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const dbx_cli_flag fl[] = {
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &wid, 0, 0},
      {"--run-id", "-r", DBX_CLI_FLAG_STR, &rid, 0, 0},
      {"--db", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--history", NULL, DBX_CLI_FLAG_STR, &file, 0, 0},
  };
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take("durabox replay", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      printf(REPLAY_USAGE);
      return 0;
    }
    dbx_cli_flag_unknown("durabox replay", argv[i]);
    fprintf(stderr, REPLAY_USAGE);
    return 2;
  }
  if ((wid == NULL) == (file == NULL)) {
    fprintf(stderr, REPLAY_USAGE);
    return 2;
  }
  if (dbx_cli_nonempty("durabox replay", "--workflow-id", wid) != 0 ||
      dbx_cli_nonempty("durabox replay", "--run-id", rid) != 0 ||
      dbx_cli_nonempty("durabox replay", "--history", file) != 0 ||
      dbx_cli_nonempty("durabox replay", "--db", db) != 0)
    return 2;
  if (db) conn.address = NULL; /* --db: the store, whatever TEMPORAL_ADDRESS says */
  if (!file && conn.address && dbx_cli_conn_load(&conn) != 0) {
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  char *dbdef = db ? NULL : dbx_cli_worker_db_default(), *run = NULL;
  if (!db) db = dbdef;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  int from_store = 0;
  int rc = replay_load(file, &conn, db, wid, rid, &evs, &n, &run, &from_store);
  if (rc != 0) goto out;
  rc = 2;
  const char *type = NULL;
  if (evs[0]->event_type == ET(WORKFLOW_EXECUTION_STARTED) &&
      evs[0]->workflow_execution_started_event_attributes &&
      evs[0]->workflow_execution_started_event_attributes->workflow_type)
    type = evs[0]->workflow_execution_started_event_attributes->workflow_type->name;
  const dbx_workflow_type *t = dbx_workflows_builtin_find(type);
  if (!t) {
    fprintf(stderr, "durabox replay: workflow type '%s' is not built in\n", type ? type : "?");
    goto out;
  }
  dbx_replay_report rep;
  dbx_err e = dbx_replay_run(t, evs, n, &rep);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox replay: %s%s%s\n", dbx_strerror(e), *rep.message ? ": " : "",
            rep.message);
    goto out;
  }
  if (rep.deterministic) {
    if (file)
      printf("deterministic: %zu events, %zu commands matched (%s)\n", rep.events, rep.commands_matched, file);
    else
      printf("deterministic: %zu events, %zu commands matched (%s run %s)\n", rep.events, rep.commands_matched, wid,
             run ? run : "");
    rc = 0;
  } else {
    printf("%s\n", rep.message);
    if (!strstr(rep.message, "event")) printf("first non-deterministic event: %lld\n", (long long)rep.event_id);
    rc = 1;
  }
out:
  if (from_store)
    dbx_wstore_history_free(evs, n);
  else
    dbx_pb_history_free(evs, n);
  free(run);
  free(dbdef);
  dbx_cli_conn_cleanup(&conn);
  return rc;
}
