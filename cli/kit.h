/* cli/kit: what a worker started by the durabox command serves.
 *
 * One place decides which workflow types and activity types a durabox worker
 * process registers (`durabox worker`, `durabox dev`, `durabox run`): every
 * built-in workflow type (workflows/builtin.h) and the sandbox activities
 * (activities/sandbox.h) over one sandbox driver. A new driver choice (for
 * example a remote sandbox service) is made here, not in each command.
 * One controlling thread; the kit must outlive the worker it registers with. */
#ifndef DBX_CLI_KIT_H
#define DBX_CLI_KIT_H

#include "base/err.h"
#include "worker/worker.h"

struct dbx_local;
struct dbx_daytona;
struct dbx_sandbox_acts;
struct dbx_fork_acts;
struct dbx_cli_fleet_acts;
struct dbx_quota;
struct dbx_git_push_acts;

typedef struct {
  struct dbx_local *local;       /* the local sandbox driver (owned), or NULL */
  struct dbx_daytona *daytona;   /* the Daytona driver (owned), or NULL */
  struct dbx_sandbox_acts *acts; /* the sandbox activity types over it (owned) */
  struct dbx_fork_acts *fork;    /* durabox.checkpoint, durabox.fork_load over it (owned) */
  struct dbx_cli_fleet_acts *fleet; /* durabox.Fleet's activities (owned), or NULL */
  struct dbx_quota *quota;       /* the sandbox quotas in front of the driver (owned), or NULL */
  struct dbx_git_push_acts *push; /* git.push over it, durabox.Agent's (owned) */
} dbx_cli_kit;

/* Open the sandbox driver chosen by $DURABOX_SANDBOX ("local", the default,
 * or "daytona"; the commands' --sandbox flag sets it) and the activity types
 * on it. local: over home (borrowed; NULL: $DURABOX_HOME, else
 * ~/.local/share/durabox). daytona: Daytona's API from DAYTONA_API_KEY,
 * DAYTONA_API_URL, DAYTONA_TARGET (activities/daytona.h); home is unused.
 * DURABOX_MAX_SANDBOXES / DURABOX_SANDBOX_CREATES_PER_MINUTE set: the
 * activities reach the driver through the quotas (activities/quota.h); a
 * value that is not a whole number >= 0 is DBX_EINVAL.
 * An unknown driver name is DBX_EINVAL. *k is zeroed first.
 * errmsg (may be NULL): on failure a malloc'd message naming home and the
 * driver's reason, free with free(). Returns DBX_OK, or the driver's error
 * (DBX_EINVAL, DBX_EIO, DBX_EUNSUPPORTED: no usable bubblewrap and no
 * DURABOX_UNSANDBOXED=1, DBX_ENOMEM) with *k left empty. Undo with dbx_cli_kit_close(). */
dbx_err dbx_cli_kit_open(const char *home, dbx_cli_kit *k, char **errmsg);
/* Register every built-in workflow type and every sandbox activity with w
 * (before dbx_worker_start). Returns DBX_OK or the first registration's
 * error (DBX_EEXIST, DBX_ESTATE, DBX_ENOMEM). */
dbx_err dbx_cli_kit_register(const dbx_cli_kit *k, dbx_worker *w);
/* Register durabox.Fleet's activities (cli/fleet.h) with w, their client
 * made from wo (the worker's own service, namespace, TLS and API key; the
 * strings are copied); k owns them. Defined in cli/fleet_acts.c.
 * DBX_OK, DBX_EINVAL, DBX_ENOMEM, DBX_EEXIST. */
dbx_err dbx_cli_kit_register_fleet(dbx_cli_kit *k, dbx_worker *w, const dbx_worker_opts *wo);
/* After the worker is destroyed. Accepts a zeroed kit; leaves it zeroed. */
void dbx_cli_kit_close(dbx_cli_kit *k);

#endif
