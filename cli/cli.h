/* The durabox command's groups. Each returns the process exit status. */
#ifndef DBX_CLI_CLI_H
#define DBX_CLI_CLI_H

#include <stddef.h>
#include <stdint.h>

const char *dbx_cli_version(void);
/* durabox server start-dev [flags]: the embedded workflow service (Temporal CLI's flags). */
int dbx_cli_server(int argc, char **argv);
/* durabox workflow start|execute|show|describe|list|result|query|signal|cancel|terminate. */
int dbx_cli_workflow(int argc, char **argv);
/* durabox dev: embedded service + worker in one process. */
int dbx_cli_dev(int argc, char **argv);
/* durabox run FILE: start a workflow from FILE and follow it to its result. */
int dbx_cli_run(int argc, char **argv);

/* durabox worker [flags]: poll a Temporal-compatible service (cli/worker.c). */
int dbx_cli_worker(int argc, char **argv);
/* durabox replay --workflow-id ID [...]: offline replay from the worker store. */
int dbx_cli_replay(int argc, char **argv);
/* durabox sandbox list|rm|gc: the local sandboxes and their owner runs (cli/sandbox.c). */
int dbx_cli_sandbox(int argc, char **argv);
/* durabox approval list|grant: approvals of repeated at_most_once calls (cli/approval.c). */
int dbx_cli_approval(int argc, char **argv);
/* Default worker store directory (malloc'd, free()): $DURABOX_WORKER_DB, else
 * dbx_cli_home() + "/worker" ($DURABOX_HOME/worker, else
 * ~/.local/share/durabox/worker), the store `durabox run` and `durabox dev`
 * write, so worker, replay and approval find it. NULL on OOM. */
char *dbx_cli_worker_db_default(void);
/* 0 when value is non-empty; else prints "CMD: FLAG is empty" and returns
 * -1. For the names a service would refuse on every call (task queue,
 * namespace). */
int dbx_cli_nonempty(const char *cmd, const char *flag, const char *value);
/* 0 when driver (NULL: the flag was not given, so $DURABOX_SANDBOX, unset or
 * empty meaning local) is "local" or "daytona"; else prints "CMD: --sandbox
 * 'X': use local or daytona" (or "CMD: DURABOX_SANDBOX 'X': ...") and
 * returns -1. Checked with the
 * other flags, so a wrong driver is a usage error (exit 2) before anything
 * starts. */
int dbx_cli_sandbox_driver(const char *cmd, const char *driver);
/* 0 when dir holds a worker store that a worker wrote (its data.mdb exists)
 * and is not a workflow service's store (no service.lock); else prints
 * "CMD: no worker store at DIR ..." or "CMD: DIR is a workflow service's
 * store, not a worker store" and returns -1. For commands that read a worker
 * store (replay --db, approval --db): opening creates the worker's tables,
 * which must not land in an arbitrary directory or in a service's store. */
int dbx_cli_worker_store_check(const char *cmd, const char *dir);
/* The folders a command is about to open as stores, checked before anything
 * is created: 0, or a message ("CMD: ...") and -1 when service_db and
 * worker_db are the same folder, or worker_db is a workflow service's store
 * (it has service.lock); folders not made yet are compared as they will be
 * made, through symbolic links. service_db NULL: no service store is
 * opened; worker_db NULL: the default (dbx_cli_worker_db_default). Without
 * this check a worker's tables land in the service's store, and a service
 * made in the worker's folder makes replay and approval refuse it. */
int dbx_cli_store_folders_check(const char *cmd, const char *service_db, const char *worker_db);
/* p[0, n) as text that cannot steer a terminal: a control byte other than
 * newline and tab (ESC, CR, BEL, ...) in caret notation ("^[", "^M"), DEL as
 * "^?", a C1 control (U+0080..U+009F: 0x9b is CSI to some terminals) as
 * U+FFFD. Sandbox output, step names, ids and details a service or a file
 * gave are printed through it (--output json keeps them exact, JSON-escaped).
 * malloc'd, or NULL (OOM). */
char *dbx_cli_term_safe(const char *p, size_t n);
/* dbx_cli_term_safe of s (NULL = "") on one line, newlines and tabs as
 * spaces: for a table's cell. malloc'd; NULL only when out of memory. */
char *dbx_cli_cell(const char *s);
/* The worker's store_retention_ms for --store-retention-hours H (0 to 87600):
 * H < 0 (flag not given) = 0, the worker's default (24 h); H == 0 = -1, keep
 * every run; else H hours in ms, at least 1. */
int64_t dbx_cli_store_retention_ms(double hours);
/* The --store-retention-hours line of a command's usage text. */
#define DBX_CLI_RETENTION_USAGE \
  "  --store-retention-hours H  keep a closed run's history copy and journal in the\n" \
  "                        worker store for H hours after its last write (default 24;\n" \
  "                        0 keeps every run); the service is asked before removal\n"

#endif
