/* The in-process stack for `durabox dev` and `durabox run`: the embedded
 * service and a worker with the built-in workflow types (durabox.Script) and
 * the sandbox activities on the local driver. One controlling thread. */
#ifndef DBX_CLI_EMBED_H
#define DBX_CLI_EMBED_H

#include "cli/kit.h"
#include "service/service.h"
#include "worker/worker.h"

typedef struct {
  dbx_service *svc;        /* NULL when an outside service is used */
  dbx_worker *worker;
  char address[64];
  char *worker_db;         /* owned */
  dbx_cli_kit kit;         /* the worker's types and sandbox driver (owned) */
} dbx_embed;

typedef struct {
  const char *ip;          /* NULL = 127.0.0.1 */
  int port;                /* 0 = any free port */
  const char *db_path;     /* service store; NULL = temporary */
  const char *worker_db;   /* NULL = dbx_cli_worker_db_default() */
  const char *task_queue;  /* required */
  const char *namespace_;  /* NULL = default */
  const char *address;     /* non-NULL: use this service instead of starting one */
  const char *api_key;
  int start_service;       /* 1 = start the embedded service */
  int start_worker;        /* 1 = start a worker */
  int64_t store_retention_ms; /* the worker's (dbx_worker_opts); 0 = its default */
} dbx_embed_opts;

/* $DURABOX_HOME, else ~/.local/share/durabox (malloc'd). */
char *dbx_cli_home(void);
/* Start what o asks for. Returns 0, or 1 with a message printed. */
int dbx_embed_start(const dbx_embed_opts *o, dbx_embed *e);
/* Stop the worker (grace_ms for running activities) and the service. */
void dbx_embed_stop(dbx_embed *e, int64_t grace_ms);

#endif
