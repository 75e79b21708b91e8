/* cli/kit: the workflow and activity types of the durabox command's workers
 * (see kit.h). Owns the sandbox driver and the activity set; the worker only
 * borrows them, so they are closed after it. */
#include "cli/kit.h"

#include <stdlib.h>

#include "activities/local.h"
#include "activities/sandbox.h"
#include "base/util.h"
#include "workflows/builtin.h"

dbx_err dbx_cli_kit_open(const char *home, dbx_cli_kit *k, char **errmsg) {
  k->local = NULL;
  k->acts = NULL;
  if (errmsg) *errmsg = NULL;
  /* DURABOX_UNSANDBOXED=1 (the opt-out from bubblewrap) is read by the driver */
  dbx_err e = dbx_local_open(home, &k->local);
  const char *why = e != DBX_OK ? dbx_local_errmsg(NULL) : "";
  if (e == DBX_OK) e = dbx_sandbox_acts_create(dbx_local_driver(k->local), &k->acts);
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
  return dbx_sandbox_register_all(w, k->acts);
}

void dbx_cli_kit_close(dbx_cli_kit *k) {
  dbx_sandbox_acts_destroy(k->acts);
  dbx_local_close(k->local);
  k->acts = NULL;
  k->local = NULL;
}
