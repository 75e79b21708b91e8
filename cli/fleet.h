/* cli/fleet: the `durabox fleet` command and the activities of durabox.Fleet
 * (workflows/fleet.h): fleet.read_items (a page of a JSONL items file on the
 * worker's host) and fleet.lookup (whether an item's child already
 * succeeded: the worker asks its service, through its own client).
 * One controlling thread creates and destroys; the activities run on any
 * worker thread (the client is thread-safe; fleet.read_items's key index of
 * the last items file read, which finds duplicate keys, is behind a mutex). */
#ifndef DBX_CLI_FLEET_H
#define DBX_CLI_FLEET_H

#include "base/err.h"
#include "worker/client.h"
#include "worker/worker.h"

typedef struct dbx_cli_fleet_acts dbx_cli_fleet_acts;

/* The two activity types, with a client made from co (strings copied; the
 * same service and namespace as the worker's). *out: free with
 * dbx_cli_fleet_acts_destroy after the worker that registered them is
 * destroyed. DBX_OK, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_cli_fleet_acts_create(const dbx_client_opts *co, dbx_cli_fleet_acts **out);
/* Register both with w (before dbx_worker_start). DBX_OK or the registry's error. */
dbx_err dbx_cli_fleet_acts_register(const dbx_cli_fleet_acts *a, dbx_worker *w);
/* Accepts NULL. */
void dbx_cli_fleet_acts_destroy(dbx_cli_fleet_acts *a);

/* Lines of a page of fleet.read_items: at most this many bytes per line and
 * per page (a longer line is a failed item). */
#define DBX_FLEET_MAX_LINE_BYTES (256 * 1024)
#define DBX_FLEET_MAX_PAGE_BYTES (1024 * 1024)

/* `durabox fleet run|status|cancel`: argv after "fleet". Exit status. */
int dbx_cli_fleet(int argc, char **argv);

#endif
