/* cli/kit: the workflow and activity types of the durabox command's workers
 * (see kit.h). Owns the sandbox driver and the activity set; the worker only
 * borrows them, so they are closed after it. */
#include "cli/kit.h"

#include <stdlib.h>
#include <string.h>

#include "activities/daytona.h"
#include "activities/github.h"
#include "activities/llm.h"
#include "activities/local.h"
#include "activities/quota.h"
#include "activities/sandbox.h"
#include "cli/fleet.h"
#include "base/util.h"
#include "cli/fork.h"
#include "workflows/builtin.h"

/* The sandbox activities and the checkpoint/fork ones over drv, through the
 * quotas when the environment sets any (activities/quota.h). */
static dbx_err kit_acts(dbx_cli_kit *k, dbx_driver *drv) {
  dbx_quota_opts qo = {0};
  if (dbx_quota_opts_from_env(&qo) != 0) return DBX_EINVAL;
  if (qo.max_live > 0 || qo.creates_per_minute > 0) {
    dbx_err e = dbx_quota_open(drv, &qo, &k->quota);
    if (e != DBX_OK) return e;
    drv = dbx_quota_driver(k->quota);
  }
  dbx_err e = dbx_sandbox_acts_create(drv, &k->acts);
  if (e == DBX_OK) e = dbx_git_push_acts_create(drv, &k->push);
  return e == DBX_OK ? dbx_fork_acts_create(drv, &k->fork) : e;
}

/* --sandbox daytona (DURABOX_SANDBOX=daytona): the Daytona driver. */
static dbx_err kit_open_daytona(dbx_cli_kit *k, char **errmsg) {
  const char *why = NULL;
  dbx_err e = dbx_daytona_open(NULL, &k->daytona, &why);
  if (e == DBX_OK) e = kit_acts(k, dbx_daytona_driver(k->daytona));
  if (e != DBX_OK) {
    if (errmsg)
      *errmsg = dbx_asprintf("cannot use Daytona sandboxes: %s",
                             why && *why ? why : dbx_strerror(e));
    dbx_cli_kit_close(k);
  }
  return e;
}

dbx_err dbx_cli_kit_open(const char *home, dbx_cli_kit *k, char **errmsg) {
  k->local = NULL;
  k->daytona = NULL;
  k->acts = NULL;
  k->fork = NULL;
  k->quota = NULL;
  k->fleet = NULL;
  k->push = NULL;
  if (errmsg) *errmsg = NULL;
  const char *which = getenv("DURABOX_SANDBOX");
  if (which && *which && strcmp(which, "local") != 0) {
    if (strcmp(which, "daytona") == 0) return kit_open_daytona(k, errmsg);
    if (errmsg)
      *errmsg = dbx_asprintf("unknown sandbox driver '%.60s' (local or daytona)", which);
    return DBX_EINVAL;
  }
  /* DURABOX_UNSANDBOXED=1 (the opt-out from bubblewrap) is read by the driver */
  dbx_err e = dbx_local_open(home, &k->local);
  const char *why = e != DBX_OK ? dbx_local_errmsg(NULL) : "";
  if (e == DBX_OK) e = kit_acts(k, dbx_local_driver(k->local));
  if (e != DBX_OK) {
    if (errmsg)
      *errmsg = dbx_asprintf("cannot open the sandbox home %s: %s", home ? home : "(default)",
                             *why ? why : dbx_strerror(e));
    dbx_cli_kit_close(k);
  }
  return e;
}

dbx_err dbx_cli_kit_register(const dbx_cli_kit *k, dbx_worker *w) {
  for (size_t i = 0; dbx_workflows_builtin[i]; i++) {
    dbx_err e = dbx_worker_register_workflow(w, dbx_workflows_builtin[i]);
    if (e != DBX_OK) return e;
  }
  dbx_err e = dbx_sandbox_register_all(w, k->acts);
  if (e == DBX_OK) e = dbx_fork_acts_register(k->fork, w);
  if (e == DBX_OK) e = dbx_git_push_acts_register(k->push, w);
  /* the agent's model and pull-request activities (durabox.Agent) */
  return e == DBX_OK ? dbx_agent_acts_register(w) : e;
}

void dbx_cli_kit_close(dbx_cli_kit *k) {
  dbx_fork_acts_destroy(k->fork);
  k->fork = NULL;
  dbx_sandbox_acts_destroy(k->acts);
  dbx_git_push_acts_destroy(k->push);
  k->push = NULL;
  dbx_cli_fleet_acts_destroy(k->fleet);
  k->fleet = NULL;
  dbx_quota_close(k->quota); /* before the driver behind it */
  k->quota = NULL;
  dbx_local_close(k->local);
  dbx_daytona_close(k->daytona);
  k->acts = NULL;
  k->local = NULL;
  k->daytona = NULL;
}
