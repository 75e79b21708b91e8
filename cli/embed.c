/* In-process service + worker (see embed.h). */
#include "cli/embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/util.h"
#include "cli/cli.h"
#include "rpc/rpc.h"

char *dbx_cli_home(void) {
  const char *h = getenv("DURABOX_HOME");
  if (h && *h) return dbx_strdup(h);
  const char *home = getenv("HOME");
  return dbx_asprintf("%s/.local/share/durabox", home && *home ? home : "/tmp");
}

int dbx_embed_start(const dbx_embed_opts *o, dbx_embed *e) {
  memset(e, 0, sizeof *e);
  char *home = dbx_cli_home();
  if (home == NULL || dbx_fs_mkdirs(home, 0700) != DBX_OK) {
    fprintf(stderr, "durabox: cannot create %s\n", home ? home : "the durabox home");
    free(home);
    return 1;
  }
  if (o->start_service) {
    dbx_service_opts so;
    dbx_service_opts_init(&so);
    so.ip = o->ip;
    so.port = o->port;
    so.db_path = o->db_path;
    const char *ns[1] = {o->namespace_};
    if (o->namespace_ && strcmp(o->namespace_, "default") != 0) {
      so.namespaces = ns;
      so.n_namespaces = 1;
    }
    char *err = NULL;
    dbx_err rc = dbx_service_start(&so, &e->svc, &err);
    if (rc != DBX_OK) {
      fprintf(stderr, "durabox: cannot start the embedded service: %s\n", err ? err : dbx_strerror(rc));
      free(err);
      free(home);
      return 1;
    }
    snprintf(e->address, sizeof e->address, "%s:%d", o->ip ? o->ip : "127.0.0.1", dbx_service_port(e->svc));
  } else {
    snprintf(e->address, sizeof e->address, "%s", o->address ? o->address : "127.0.0.1:7233");
  }
  if (o->start_worker) {
    char *kerr = NULL;
    if (dbx_cli_kit_open(home, &e->kit, &kerr) != DBX_OK) {
      fprintf(stderr, "durabox: %s\n", kerr ? kerr : "cannot open the sandbox home");
      free(kerr);
      goto fail;
    }
    e->worker_db = o->worker_db ? dbx_strdup(o->worker_db) : dbx_cli_worker_db_default();
    if (e->worker_db == NULL || dbx_fs_mkdirs(e->worker_db, 0700) != DBX_OK) {
      fprintf(stderr, "durabox: cannot create the worker store directory\n");
      goto fail;
    }
    dbx_worker_opts wo = {.address = e->address, .namespace_ = o->namespace_, .task_queue = o->task_queue,
                          .api_key = o->api_key, .db_dir = e->worker_db,
                          .store_retention_ms = o->store_retention_ms};
    char *err = NULL;
    dbx_err rc = dbx_worker_create(&wo, &e->worker, &err);
    if (rc != DBX_OK) {
      fprintf(stderr, "durabox: cannot create the worker: %s\n", err ? err : dbx_strerror(rc));
      free(err);
      goto fail;
    }
    if (dbx_cli_kit_register(&e->kit, e->worker) != DBX_OK ||
        dbx_cli_kit_register_fleet(&e->kit, e->worker, &wo) != DBX_OK ||
        dbx_worker_start(e->worker) != DBX_OK) {
      fprintf(stderr, "durabox: cannot start the worker\n");
      goto fail;
    }
  }
  free(home);
  return 0;
fail:
  free(home);
  dbx_embed_stop(e, 0);
  return 1;
}

void dbx_embed_stop(dbx_embed *e, int64_t grace_ms) {
  dbx_service_expect_client_stop(e->svc); /* the worker's polls end unanswered now */
  if (e->worker) {
    dbx_worker_stop(e->worker, grace_ms);
    dbx_worker_destroy(e->worker);
    e->worker = NULL;
  }
  dbx_cli_kit_close(&e->kit); /* after the worker that borrowed it */
  if (e->svc) {
    dbx_service_stop(e->svc);
    e->svc = NULL;
  }
  free(e->worker_db);
  e->worker_db = NULL;
}
