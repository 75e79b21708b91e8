/* workflows/builtin: the one list of built-in workflow types.
 *
 * Every command that runs a worker or replays a run (durabox worker, dev,
 * run, replay) takes its workflow types from here, so a new built-in type is
 * one line in builtin.c. The list and the types are static and read-only:
 * safe from any thread, nothing to free. */
#ifndef DBX_WORKFLOWS_BUILTIN_H
#define DBX_WORKFLOWS_BUILTIN_H

#include "worker/api.h"

/* The built-in types, ended by NULL. */
extern const dbx_workflow_type *const dbx_workflows_builtin[];

/* The built-in type named name (borrowed), or NULL when none has that name. */
const dbx_workflow_type *dbx_workflows_builtin_find(const char *name);

#endif
