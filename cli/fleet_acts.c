/* cli/fleet_acts: the activities of durabox.Fleet (cli/fleet.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"
#include "cli/fleet.h"
#include "cli/kit.h"
#include "protos/pb.h"
#include "workflows/fleet.h"

struct dbx_cli_fleet_acts {
  dbx_client *client;
  dbx_activity_type read_items, lookup;
};

static dbx_err fail(dbx_act_result *res, int nonretry, const char *type, const char *msg) {
  res->failure_type = dbx_strdup(type);
  res->failure_message = dbx_strdup(msg);
  res->non_retryable = nonretry;
  return DBX_OK;
}

static dbx_err succeed(dbx_act_result *res, cJSON *o) {
  res->result_json = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return res->result_json ? DBX_OK : DBX_ENOMEM;
}

/* One line (without its newline) as a page item: the object, or
 * {"bad_at": offset, "error": why}. */
static cJSON *line_item(const char *s, size_t n, long long at) {
  const char *end = NULL;
  const char *why = NULL;
  cJSON *o = n > DBX_FLEET_MAX_LINE_BYTES ? NULL : cJSON_ParseWithLengthOpts(s, n, &end, 0);
  size_t pos = 0;
  if (n > DBX_FLEET_MAX_LINE_BYTES) why = "the line is longer than 256 KiB";
  else if (o == NULL) why = "the line is not JSON";
  else if (dbx_json_text_check(s, n, (size_t)(end - s), &pos) != DBX_JSON_OK)
    why = "the line holds a NUL, a control character, bad UTF-8 or text after the JSON";
  else if (!cJSON_IsObject(o)) why = "the line is not a JSON object";
  if (why == NULL) return o;
  cJSON_Delete(o);
  cJSON *b = cJSON_CreateObject();
  cJSON_AddNumberToObject(b, "bad_at", (double)at);
  cJSON_AddStringToObject(b, "error", why);
  return b;
}

static int blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

static dbx_err run_read_items(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                              void *ud) {
  (void)a, (void)ud;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "path");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(in, "offset");
  const cJSON *lim = cJSON_GetObjectItemCaseSensitive(in, "limit");
  if (!cJSON_IsString(p) || !cJSON_IsNumber(off) || off->valuedouble < 0 || !cJSON_IsNumber(lim) ||
      lim->valuedouble < 1 || lim->valuedouble > DBX_FLEET_MAX_PAGE) {
    cJSON_Delete(in);
    return fail(res, 1, "InvalidInput", "fleet.read_items: want {path, offset >= 0, limit 1..500}");
  }
  FILE *fp = fopen(p->valuestring, "rb");
  if (fp == NULL) {
    char *m = dbx_asprintf("%s: %s", p->valuestring, strerror(errno));
    fail(res, errno != EINTR && errno != EIO, "ItemsFileUnreadable", m ? m : "cannot open");
    free(m);
    cJSON_Delete(in);
    return DBX_OK;
  }
  long long at = (long long)dbx_json_int(off->valuedouble, 0, INT64_MAX);
  int limit = (int)dbx_json_int(lim->valuedouble, 1, DBX_FLEET_MAX_PAGE);
  dbx_err rc = DBX_OK;
  cJSON *o = cJSON_CreateObject(), *items = cJSON_AddArrayToObject(o, "items"),
        *ends = cJSON_AddArrayToObject(o, "ends");
  char *buf = NULL;
  size_t cap = 0, bytes = 0;
  int eof = 0;
  if (fseeko(fp, (off_t)at, SEEK_SET) != 0) eof = 1;
  while (!eof && cJSON_GetArraySize(items) < limit && bytes < DBX_FLEET_MAX_PAGE_BYTES) {
    ssize_t n = getline(&buf, &cap, fp);
    if (n < 0) {
      eof = 1;
      break;
    }
    long long start = at;
    at += n;
    size_t l = (size_t)n;
    if (l && buf[l - 1] == '\n') l--;
    if (blank(buf, l)) continue; /* skipped; a page ends after its last item */
    cJSON *it = line_item(buf, l, start);
    if (it == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    bytes += l;
    cJSON_AddItemToArray(items, it);
    cJSON_AddItemToArray(ends, cJSON_CreateNumber((double)at));
  }
  if (!eof) { /* at the end already? then say so, saving one more page */
    int c = fgetc(fp);
    if (c == EOF) eof = 1;
  }
  free(buf);
  fclose(fp);
  cJSON_Delete(in);
  cJSON_AddBoolToObject(o, "eof", eof);
  if (rc != DBX_OK) {
    cJSON_Delete(o);
    return rc;
  }
  return succeed(res, o);
}

/* Whether the latest run of wid completed successfully; *rid: its run id
 * (malloc'd) then. DBX_OK (answer in *ok), or the service's error. */
static dbx_err lookup_one(dbx_client *c, const char *wid, int *ok, char **rid, char **err) {
  *ok = 0;
  *rid = NULL;
  if (wid[0] == '\0') return DBX_OK;
  DescribeWorkflowExecutionResponse *r = NULL;
  dbx_err e = dbx_client_describe(c, wid, NULL, &r, err);
  if (e == DBX_ENOTFOUND) return DBX_OK;
  if (e != DBX_OK) return e;
  WorkflowExecutionInfo *i = r->workflow_execution_info;
  if (i && i->status == WS(COMPLETED) && i->execution && i->execution->run_id) {
    dbx_client_history h = {0};
    dbx_client_history_opts ho = {.close_event_only = 1};
    e = dbx_client_get_history(c, wid, i->execution->run_id, &ho, &h, err);
    if (e == DBX_OK && h.n > 0 &&
        h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
      char *res = dbx_payloads_to_json(
          h.events[h.n - 1]->workflow_execution_completed_event_attributes->result);
      *ok = dbx_fleet_result_ok(res ? res : "null", res ? strlen(res) : 4);
      free(res);
      if (*ok) *rid = dbx_strdup(i->execution->run_id);
    }
    dbx_client_history_cleanup(&h);
    if (e == DBX_ENOTFOUND) e = DBX_OK;
  }
  dbx_client_msg_free(r);
  return e;
}

static dbx_err run_lookup(dbx_act *a, const char *json, size_t len, dbx_act_result *res, void *ud) {
  const dbx_cli_fleet_acts *fa = ud;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(in, "workflow_ids");
  if (!cJSON_IsArray(ids)) {
    cJSON_Delete(in);
    return fail(res, 1, "InvalidInput", "fleet.lookup: want {workflow_ids: [...]}");
  }
  cJSON *o = cJSON_CreateObject(), *oks = cJSON_AddArrayToObject(o, "succeeded"),
        *rids = cJSON_AddArrayToObject(o, "run_ids");
  const cJSON *id;
  cJSON_ArrayForEach(id, ids) {
    if (dbx_act_heartbeat(a, NULL)) {
      cJSON_Delete(o);
      cJSON_Delete(in);
      return DBX_ECANCELED;
    }
    int ok = 0;
    char *rid = NULL, *err = NULL;
    dbx_err e = lookup_one(fa->client, cJSON_IsString(id) ? id->valuestring : "", &ok, &rid, &err);
    if (e != DBX_OK) {
      char *m = dbx_asprintf("fleet.lookup %s: %s", id->valuestring, err ? err : dbx_strerror(e));
      fail(res, 0, "LookupFailed", m ? m : "lookup failed");
      free(m);
      free(err);
      cJSON_Delete(o);
      cJSON_Delete(in);
      return DBX_OK;
    }
    free(err);
    cJSON_AddItemToArray(oks, cJSON_CreateBool(ok));
    cJSON_AddItemToArray(rids, rid ? cJSON_CreateString(rid) : cJSON_CreateNull());
    free(rid);
  }
  cJSON_Delete(in);
  return succeed(res, o);
}

dbx_err dbx_cli_fleet_acts_create(const dbx_client_opts *co, dbx_cli_fleet_acts **out) {
  *out = NULL;
  dbx_cli_fleet_acts *a = calloc(1, sizeof *a);
  if (a == NULL) return DBX_ENOMEM;
  dbx_err e = dbx_client_create(co, &a->client);
  if (e != DBX_OK) {
    free(a);
    return e;
  }
  a->read_items = (dbx_activity_type){"fleet.read_items", DBX_SAFE_TO_RETRY, run_read_items, a};
  a->lookup = (dbx_activity_type){"fleet.lookup", DBX_SAFE_TO_RETRY, run_lookup, a};
  *out = a;
  return DBX_OK;
}

dbx_err dbx_cli_fleet_acts_register(const dbx_cli_fleet_acts *a, dbx_worker *w) {
  dbx_err e = dbx_worker_register_activity(w, &a->read_items);
  return e == DBX_OK ? dbx_worker_register_activity(w, &a->lookup) : e;
}

void dbx_cli_fleet_acts_destroy(dbx_cli_fleet_acts *a) {
  if (a == NULL) return;
  dbx_client_destroy(a->client);
  free(a);
}

dbx_err dbx_cli_kit_register_fleet(dbx_cli_kit *k, dbx_worker *w, const dbx_worker_opts *wo) {
  dbx_client_opts co = {.address = wo->address, .namespace_ = wo->namespace_, .tls = wo->tls,
                        .tls_ca_pem = wo->tls_ca_pem, .tls_cert_pem = wo->tls_cert_pem,
                        .tls_key_pem = wo->tls_key_pem, .api_key = wo->api_key};
  dbx_err e = dbx_cli_fleet_acts_create(&co, &k->fleet);
  return e == DBX_OK ? dbx_cli_fleet_acts_register(k->fleet, w) : e;
}
