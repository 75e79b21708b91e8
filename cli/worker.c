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
#include "cli/kit.h"
#include "rpc/rpc.h"
#include "worker/replay.h"
#include "worker/worker.h"
#include "worker/wstore.h"
#include "workflows/builtin.h"


char *dbx_cli_worker_db_default(void) {
  const char *e = getenv("DURABOX_WORKER_DB");
  if (e && *e) return dbx_strdup(e);
  char *home = dbx_cli_home(); /* the same place `durabox run` and `durabox dev` write */
  char *db = home ? dbx_asprintf("%s/worker", home) : NULL;
  free(home);
  return db;
}

/* --name value or --name=value; returns the value and advances *i, else NULL. */
static const char *flag(int argc, char **argv, int *i, const char *name) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] == 0 && *i + 1 < argc) return argv[++*i];
  return NULL;
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
          "  --activity-slots N    concurrent activities (default 8)\n"
          "  --log-level LEVEL     debug|info|warn|error\n");
}

static const char *env_or(const char *name, const char *def) {
  const char *v = getenv(name);
  return v && *v ? v : def;
}

int dbx_cli_worker(int argc, char **argv) {
  const char *address = env_or("TEMPORAL_ADDRESS", "127.0.0.1:7233");
  const char *ns = env_or("TEMPORAL_NAMESPACE", "default");
  const char *api_key = env_or("TEMPORAL_API_KEY", NULL);
  const char *ca = env_or("TEMPORAL_TLS_CA", NULL), *cert = env_or("TEMPORAL_TLS_CERT", NULL),
             *key = env_or("TEMPORAL_TLS_KEY", NULL);
  const char *tq = "durabox", *db = NULL, *home = NULL;
  int tls = 0, slots = 0;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if ((v = flag(argc, argv, &i, "--address"))) address = v;
    else if ((v = flag(argc, argv, &i, "--namespace"))) ns = v;
    else if ((v = flag(argc, argv, &i, "--task-queue"))) tq = v;
    else if ((v = flag(argc, argv, &i, "--tls-ca"))) ca = v;
    else if ((v = flag(argc, argv, &i, "--tls-cert"))) cert = v;
    else if ((v = flag(argc, argv, &i, "--tls-key"))) key = v;
    else if ((v = flag(argc, argv, &i, "--api-key"))) api_key = v;
    else if ((v = flag(argc, argv, &i, "--db"))) db = v;
    else if ((v = flag(argc, argv, &i, "--sandbox-home"))) home = v;
    else if ((v = flag(argc, argv, &i, "--activity-slots"))) slots = atoi(v);
    else if (strcmp(argv[i], "--tls") == 0) tls = 1;
    else if ((v = flag(argc, argv, &i, "--log-level"))) {
      dbx_log_level l;
      if (dbx_log_level_parse(v, &l) != 0) {
        fprintf(stderr, "durabox worker: unknown log level '%s'\n", v);
        return 2;
      }
      dbx_log_set_level(l);
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      worker_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "durabox worker: unknown or incomplete flag '%s'\n", argv[i]);
      worker_usage(stderr);
      return 2;
    }
  }
  int rc = 1;
  char *ca_pem = NULL, *cert_pem = NULL, *key_pem = NULL, *dbdef = NULL, *err = NULL;
  dbx_worker *w = NULL;
  dbx_cli_kit kit = {0};
  if ((ca && !(ca_pem = dbx_cli_read_file(ca, NULL))) || (cert && !(cert_pem = dbx_cli_read_file(cert, NULL))) ||
      (key && !(key_pem = dbx_cli_read_file(key, NULL)))) {
    fprintf(stderr, "durabox worker: cannot read a TLS file (%s)\n", strerror(errno));
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
  dbx_err e = dbx_worker_create(&o, &w, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", err ? err : dbx_strerror(e));
    goto out;
  }
  e = dbx_cli_kit_open(home, &kit, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", err ? err : dbx_strerror(e));
    goto out;
  }
  e = dbx_cli_kit_register(&kit, w);
  if (e == DBX_OK) e = dbx_worker_start(w);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox worker: %s\n", dbx_strerror(e));
    goto out;
  }
  int sig = 0;
  sigwait(&set, &sig);
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
  "usage: durabox replay --workflow-id ID [--run-id R] [--namespace NS] [--db DIR]\n"            \
  "  replays a run recorded in the worker store (default $DURABOX_HOME/worker) and checks\n"     \
  "  that the workflow code issues the same commands (exit 0 deterministic, 1 not)\n"

int dbx_cli_replay(int argc, char **argv) {
  const char *wid = NULL, *rid = NULL, *ns = env_or("TEMPORAL_NAMESPACE", "default"), *db = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if ((v = flag(argc, argv, &i, "--workflow-id"))) wid = v;
    else if ((v = flag(argc, argv, &i, "--run-id"))) rid = v;
    else if ((v = flag(argc, argv, &i, "--namespace"))) ns = v;
    else if ((v = flag(argc, argv, &i, "--db"))) db = v;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf(REPLAY_USAGE);
      return 0;
    } else {
      fprintf(stderr, REPLAY_USAGE);
      return 2;
    }
  }
  if (!wid) {
    fprintf(stderr, REPLAY_USAGE);
    return 2;
  }
  char *dbdef = db ? NULL : dbx_cli_worker_db_default(), *err = NULL, *run = NULL;
  if (!db) db = dbdef;
  dbx_wstore *s = NULL;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  int rc = 2;
  struct stat sb;
  if (!db || stat(db, &sb) != 0) {
    fprintf(stderr, "durabox replay: no worker store at %s\n", db ? db : "?");
    goto out;
  }
  dbx_err e = dbx_wstore_open(db, 0, &s, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox replay: %s\n", err ? err : dbx_strerror(e));
    goto out;
  }
  e = dbx_wstore_history_load(s, ns, wid, rid, &evs, &n, &run);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox replay: no recorded history for %s%s%s in namespace %s (%s)\n", wid,
            rid ? " run " : "", rid ? rid : "", ns, dbx_strerror(e));
    goto out;
  }
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
  e = dbx_replay_run(t, evs, n, &rep);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox replay: %s%s%s\n", dbx_strerror(e), *rep.message ? ": " : "",
            rep.message);
    goto out;
  }
  if (rep.deterministic) {
    printf("deterministic: %zu events, %zu commands matched (%s run %s)\n", rep.events,
           rep.commands_matched, wid, run);
    rc = 0;
  } else {
    printf("%s\n", rep.message);
    rc = 1;
  }
out:
  dbx_wstore_history_free(evs, n);
  dbx_wstore_close(s);
  free(run);
  free(err);
  free(dbdef);
  return rc;
}
