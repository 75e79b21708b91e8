/* workflows/builtin: the list builtin.h declares. Add a type here and it is served
 * by every worker the durabox command starts and known to durabox replay. */
#include "workflows/builtin.h"

#include <string.h>

#include "workflows/agent.h"
#include "workflows/fleet.h"
#include "workflows/script.h"

const dbx_workflow_type *const dbx_workflows_builtin[] = {&dbx_script_workflow, &dbx_fleet_workflow,
                                                          &dbx_agent_workflow, NULL};

const dbx_workflow_type *dbx_workflows_builtin_find(const char *name) {
  if (name == NULL) return NULL;
  for (size_t i = 0; dbx_workflows_builtin[i]; i++)
    if (strcmp(dbx_workflows_builtin[i]->name, name) == 0) return dbx_workflows_builtin[i];
  return NULL;
}
