/* libFuzzer harness: the JSON history importer (cli/pbjson.h,
 * dbx_pb_history_from_json), the file `durabox replay --history` reads.
 * Any bytes: DBX_OK with events (ids 1..n, the first WorkflowExecutionStarted,
 * attributes matching each type) that then replay through durabox.Script,
 * as the command does (a report, deterministic or not, or an error with a
 * message; never a crash), and whose export (dbx_pb_history_to_json, both
 * payload forms) imports again to the same number of events (or is refused
 * with a message: times beyond year 9999); or DBX_EINVAL
 * with a message naming the problem; DBX_ENOMEM. Seeds: tests/fuzz/corpus/
 * histjson (exports of real runs and hand-made Temporal CLI histories). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/pbjson.h"
#include "worker/replay.h"
#include "workflows/builtin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void reimport(HistoryEvent **evs, size_t n, int raw) {
  cJSON *doc = dbx_pb_history_to_json(evs, n, raw);
  char *txt = doc ? cJSON_PrintUnformatted(doc) : NULL;
  cJSON_Delete(doc);
  if (txt == NULL) return; /* OOM */
  HistoryEvent **again = NULL;
  size_t m = 0;
  char *err = NULL;
  dbx_err rc = dbx_pb_history_from_json(txt, strlen(txt), &again, &m, &err);
  /* a time outside years 0..9999 does not survive RFC 3339: refused then,
   * with a message; anything imported again has every event */
  if (rc == DBX_OK && m != n) abort();
  if (rc == DBX_EINVAL && (err == NULL || err[0] == '\0')) abort();
  dbx_pb_history_free(again, m);
  free(err);
  free(txt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HistoryEvent **evs = NULL;
  size_t n = 0;
  char *err = NULL;
  dbx_err rc = dbx_pb_history_from_json((const char *)data, size, &evs, &n, &err);
  if (rc == DBX_OK) {
    if (n == 0 || evs == NULL || err != NULL) abort();
    for (size_t i = 0; i < n; i++)
      if (evs[i]->event_id != (int64_t)i + 1) abort();
    dbx_replay_report rep;
    dbx_err e = dbx_replay_run(dbx_workflows_builtin_find("durabox.Script"), evs, n, &rep);
    if (e != DBX_OK && e != DBX_EINVAL && e != DBX_ENOMEM) abort();
    reimport(evs, n, 0);
    reimport(evs, n, 1);
  } else if (rc == DBX_EINVAL) {
    if (evs != NULL || err == NULL || err[0] == '\0') abort();
  } else if (rc != DBX_ENOMEM) {
    abort();
  }
  dbx_pb_history_free(evs, n);
  free(err);
  return 0;
}
