/* workflows/fleet: the built-in "durabox.Fleet" workflow type: one parent run
 * over N items, each item a child workflow (usually durabox.Script) with a
 * deterministic workflow id, at most C of them running at once.
 *
 * Input (JSON):
 *   {"items": [{"key": "cjson", ...fields}, ...]  |  "items_file": "/abs/items.jsonl",
 *    "template": {"workflow_type": "durabox.Script" (default), "task_queue": Q (default
 *                 the fleet's), "input": {... "{{field}}" in any string ...}},
 *    "concurrency": C (1..1000, default 4),
 *    "stop_after_failures": K (0 = continue whatever fails, the default),
 *    "item_timeout_s": T (each child's execution timeout; 0 = none),
 *    "item_retries": R (a failed item runs again up to R more times; 0..10),
 *    "skip_succeeded": true (default: an item whose child already succeeded,
 *                      in an earlier fleet with the same id, is skipped),
 *    "max_events": E (continue as new once the history reaches E events,
 *                  or earlier when the service suggests it; default 10000),
 *    "page_size": P (items read / looked up at once, 1..500, default 100)}
 * plus "state" on the runs the fleet continues into (cursor and counts; not
 * for users). Each item is an object with a string "key" (1..200 bytes, no
 * control characters; unique among inline items); the child's workflow id is
 * "<fleet workflow id>/<key>" (the fleet's id recorded by a marker
 * "durabox.fleet_id" at the start of each run, so an offline replay, which
 * does not know the workflow id, derives the same child ids). The template's input is copied per item with
 * every "{{name}}" in its strings replaced by the item's field name (a
 * string as is, a number or boolean as its JSON text); an unknown field fails
 * that item (TemplateError), never the fleet. A durabox.Script input is
 * checked per item (dbx_script_validate) before its child starts.
 * An items file holds one JSON object per line (blank lines skipped); it is
 * read a page at a time by the activity fleet.read_items; a line that is not
 * an item (not a JSON object, or its key is missing or bad) becomes a failed
 * item named "at-byte-<offset of the line's first byte>"; a line whose key
 * an earlier line gave already is a failed item (DuplicateKey, named by its
 * key, never started).
 *
 * Activities (cli/fleet_acts.c): fleet.read_items {"path", "offset",
 * "limit"} -> {"items": [...], "ends": [byte offset after each], "eof"},
 * where a line that is not to be started is {"bad_at": offset, "error",
 * "error_type"?, "dup_key"?} (error_type default InvalidItem);
 * fleet.lookup {"workflow_ids": [...]} -> {"succeeded": [bool...],
 * "run_ids": [...]}: whether the latest run of each id completed with a
 * successful result (dbx_fleet_result_ok). Both safe_to_retry.
 *
 * An item succeeded when its child completed and its result is not an
 * object whose "status" is a string other than "completed" (a Script whose
 * step failed completes with status "failed": that item failed). Children
 * run with parent close policy REQUEST_CANCEL.
 * Continue-as-new: once the history reaches max_events (or the service
 * suggests it) no new child starts; when the running ones have ended the run
 * continues as new with the cursor (the next item not started), the counts
 * and the per-item records. Every item is thus started in exactly one run.
 * Cancellation: no new child starts, every running child is asked to cancel
 * (a Script deletes its sandbox), and once all have ended the run completes
 * with status "cancelled".
 * Output: {"fleet_id", "status": "completed"|"stopped"|"cancelled", "total",
 * "succeeded", "failed", "cancelled", "skipped", "not_started", "runs",
 * "duration_ms", "items": [{"key", "status": "succeeded"|"failed"|"cancelled"|
 * "skipped", "workflow_id", "run_id", "duration_ms", "attempts", "error"?}],
 * "items_dropped"?}: at most DBX_FLEET_MAX_RECORDS records are kept (the rest
 * are counted in items_dropped). "total" is the items of the input, null
 * (and "not_started" null, "file_not_read_to_end" true) when the fleet ended
 * before its items file was read to the end.
 * Query "progress": {"status": "running", the counts, "running", "done",
 * "total" (null while an items file is not read to its end), "runs"}.
 * Bad input fails the run with type "InvalidInput"; an unreadable items file
 * with "ItemsUnreadable". Deterministic: its only inputs are the input JSON
 * and the outcomes in history. */
#ifndef DBX_WORKFLOWS_FLEET_H
#define DBX_WORKFLOWS_FLEET_H

#include <stddef.h>

#include "worker/api.h"

extern const dbx_workflow_type dbx_fleet_workflow;

#define DBX_FLEET_MAX_CONCURRENCY 1000
#define DBX_FLEET_MAX_KEY_BYTES 200
#define DBX_FLEET_MAX_PAGE 500
/* Per-item records carried and returned; ~200 bytes each keeps the carried
 * input and the result well under one payload (2 MiB). */
#define DBX_FLEET_MAX_RECORDS 5000

/* 1 when a child's result JSON (len bytes) counts as a success (see above).
 * Pure; thread-safe. */
int dbx_fleet_result_ok(const char *json, size_t len);

/* Why item (a parsed items-file line or inline item) is not an item: "has
 * no string \"key\"", ...; NULL when it is one. A static string. Pure;
 * thread-safe. fleet.read_items names such a line by its byte offset. */
struct cJSON;
const char *dbx_fleet_item_problem(const struct cJSON *item);

/* Check a Fleet input as the workflow will (InvalidInput cases). Returns 0,
 * or -1 with a message in err (n bytes). Pure; thread-safe. */
int dbx_fleet_validate(const char *input_json, size_t len, char *err, size_t n);

#endif
