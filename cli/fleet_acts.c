/* cli/fleet_acts: the activities of durabox.Fleet (cli/fleet.h).
 *
 * fleet.read_items names every line it will not have started: a line that is
 * not an item is {"bad_at": its first byte's offset, "error"}, and a line
 * whose key an earlier line of the file gave is {"bad_at", "error_type":
 * "DuplicateKey", "error", "dup_key"}. To tell duplicates it keeps a key index
 * of one file (path, device, inode, size, mtime): every key and the offset of
 * the first line that gave it, for the lines from byte 0 up to `scanned`. A
 * page at offset X first extends the index to X (once per worker and file:
 * pages come in order), then checks each line against it; a changed or other
 * file starts a new index. The answer depends on the file's bytes only, so a
 * retry or another worker answers the same. The index is behind a mutex (the
 * activities run on any worker thread). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/hash.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/fleet.h"
#include "cli/kit.h"
#include "protos/pb.h"
#include "workflows/fleet.h"

/* Keys of one items file from byte 0 up to scanned: open addressing. */
typedef struct {
  char *key;        /* owned; NULL: empty slot */
  long long first;  /* offset of the first line that gave it */
} key_slot;

typedef struct {
  char *path; /* owned, NULL: no index */
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  long long scanned;
  key_slot *slots;
  size_t cap, n;
} key_index;

struct dbx_cli_fleet_acts {
  dbx_client *client;
  dbx_activity_type read_items, lookup;
  pthread_mutex_t mu; /* guards idx */
  key_index idx;
};

static void index_cleanup(key_index *x) {
  for (size_t i = 0; i < x->cap; i++) free(x->slots[i].key);
  free(x->slots);
  free(x->path);
  memset(x, 0, sizeof *x);
}

static size_t slot_at(const key_slot *slots, size_t cap, const char *key) {
  size_t i = (size_t)dbx_fnv1a64(DBX_FNV1A64_OFFSET, key, strlen(key)) & (cap - 1);
  while (slots[i].key && strcmp(slots[i].key, key) != 0) i = (i + 1) & (cap - 1);
  return i;
}

/* The first offset of key, inserting it at `at` when absent. -1 on OOM. */
static long long index_put(key_index *x, const char *key, long long at) {
  if (2 * (x->n + 1) > x->cap) {
    size_t cap = x->cap ? 2 * x->cap : 1024;
    key_slot *s = calloc(cap, sizeof *s);
    if (s == NULL) return -1;
    for (size_t i = 0; i < x->cap; i++)
      if (x->slots[i].key) s[slot_at(s, cap, x->slots[i].key)] = x->slots[i];
    free(x->slots);
    x->slots = s;
    x->cap = cap;
  }
  size_t i = slot_at(x->slots, x->cap, key);
  if (x->slots[i].key) return x->slots[i].first;
  if ((x->slots[i].key = dbx_strdup(key)) == NULL) return -1;
  x->slots[i].first = at;
  x->n++;
  return at;
}

/* Make x the index of path (as st says it is now), empty when it was another
 * file or the file changed. 0, or -1 (OOM). */
static int index_for(key_index *x, const char *path, const struct stat *st) {
  if (x->path && strcmp(x->path, path) == 0 && x->dev == st->st_dev && x->ino == st->st_ino &&
      x->size == st->st_size && x->mtime.tv_sec == st->st_mtim.tv_sec &&
      x->mtime.tv_nsec == st->st_mtim.tv_nsec)
    return 0;
  index_cleanup(x);
  if ((x->path = dbx_strdup(path)) == NULL) return -1;
  x->dev = st->st_dev, x->ino = st->st_ino, x->size = st->st_size, x->mtime = st->st_mtim;
  return 0;
}

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

/* {"bad_at": at, "error_type"?: type, "error": why, "dup_key"?: key}. */
static cJSON *bad_line(long long at, const char *type, const char *why, const char *key) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddNumberToObject(b, "bad_at", (double)at);
  if (type) cJSON_AddStringToObject(b, "error_type", type);
  cJSON_AddStringToObject(b, "error", why);
  if (key) cJSON_AddStringToObject(b, "dup_key", key);
  return b;
}

/* One line (without its newline) starting at offset at: the item (*ok 1), or
 * a bad line (*ok 0, see bad_line). NULL on OOM. */
static cJSON *line_item(const char *s, size_t n, long long at, int *ok) {
  const char *end = NULL;
  const char *why = NULL;
  *ok = 0;
  cJSON *o = n > DBX_FLEET_MAX_LINE_BYTES ? NULL : cJSON_ParseWithLengthOpts(s, n, &end, 0);
  size_t pos = 0;
  char m[80];
  if (n > DBX_FLEET_MAX_LINE_BYTES) why = "the line is longer than 256 KiB";
  else if (o == NULL) why = "the line is not JSON";
  else if (dbx_json_text_check(s, n, (size_t)(end - s), &pos) != DBX_JSON_OK)
    why = "the line holds a NUL, a control character, bad UTF-8 or text after the JSON";
  else if (!cJSON_IsObject(o)) why = "the line is not a JSON object";
  else if (dbx_fleet_item_problem(o)) {
    snprintf(m, sizeof m, "the item %s", dbx_fleet_item_problem(o));
    why = m;
  }
  if (why == NULL) {
    *ok = 1;
    return o;
  }
  cJSON_Delete(o);
  return bad_line(at, NULL, why, NULL);
}

static int blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

/* The next line of fp into *buf: its length with the newline (0 at the end),
 * or -1 with *errnum set (a read error). */
static ssize_t next_line(FILE *fp, char **buf, size_t *cap, int *errnum) {
  errno = 0;
  ssize_t n = getline(buf, cap, fp);
  if (n >= 0) return n;
  if (!ferror(fp)) return 0;
  *errnum = errno ? errno : EIO;
  return -1;
}

/* Index the keys of the lines from x->scanned up to offset to (a line
 * boundary) of fp. 0, -1 (OOM), or an errno (read error). */
static int index_scan(key_index *x, FILE *fp, long long to) {
  if (x->scanned >= to) return 0;
  if (fseeko(fp, (off_t)x->scanned, SEEK_SET) != 0) return errno ? errno : EIO;
  char *buf = NULL;
  size_t cap = 0;
  long long at = x->scanned;
  int rc = 0;
  while (rc == 0 && at < to) {
    ssize_t n = next_line(fp, &buf, &cap, &rc);
    if (n <= 0) break;
    size_t l = (size_t)n;
    if (l && buf[l - 1] == '\n') l--;
    int ok = 0;
    cJSON *it = blank(buf, l) ? NULL : line_item(buf, l, at, &ok);
    const char *k = ok ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "key")) : NULL;
    if (k && index_put(x, k, at) < 0) rc = -1;
    cJSON_Delete(it);
    at += n;
  }
  if (rc == 0) x->scanned = at;
  free(buf);
  return rc;
}

/* A page item for the line at offset start (l bytes, no newline), checked
 * against the key index x. NULL on OOM. */
static cJSON *page_item(key_index *x, const char *s, size_t l, long long start) {
  int ok = 0;
  cJSON *it = line_item(s, l, start, &ok);
  if (it == NULL || !ok) return it;
  const char *k = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "key"));
  long long first = index_put(x, k, start);
  if (first < 0) {
    cJSON_Delete(it);
    return NULL;
  }
  if (first == start) return it;
  char *m = dbx_asprintf("key \"%.80s\" of the line at byte %lld was given already by the line "
                         "at byte %lld: not started", k, start, first);
  cJSON *b = m ? bad_line(start, "DuplicateKey", m, k) : NULL;
  free(m);
  cJSON_Delete(it);
  return b;
}

/* The read failed: fail the activity naming path, the offset and errnum.
 * Retried unless the file can never be read (a directory, say). */
static dbx_err read_failed(dbx_act_result *res, const char *path, long long at, int errnum) {
  char *m = dbx_asprintf("%s: %s (reading at byte %lld)", path, strerror(errnum), at);
  fail(res, errnum == EISDIR || errnum == EINVAL, "ItemsFileUnreadable", m ? m : "read error");
  free(m);
  return DBX_OK;
}

/* A page of lines from offset at into o (items, ends, eof), checked against
 * x. DBX_OK, DBX_ENOMEM, or DBX_EIO with *errnum and *err_at set. */
static dbx_err read_page(key_index *x, FILE *fp, long long at, int limit, cJSON *o, int *errnum,
                         long long *err_at) {
  cJSON *items = cJSON_AddArrayToObject(o, "items"), *ends = cJSON_AddArrayToObject(o, "ends");
  if (items == NULL || ends == NULL) return DBX_ENOMEM;
  long long from = at;
  char *buf = NULL;
  size_t cap = 0, bytes = 0;
  int eof = 0;
  dbx_err rc = DBX_OK;
  if (fseeko(fp, (off_t)at, SEEK_SET) != 0) eof = 1;
  while (!eof && cJSON_GetArraySize(items) < limit && bytes < DBX_FLEET_MAX_PAGE_BYTES) {
    ssize_t n = next_line(fp, &buf, &cap, errnum);
    if (n < 0) {
      *err_at = at;
      rc = DBX_EIO;
      break;
    }
    if (n == 0) {
      eof = 1;
      break;
    }
    long long start = at;
    at += n;
    size_t l = (size_t)n;
    if (l && buf[l - 1] == '\n') l--;
    if (blank(buf, l)) continue; /* skipped; a page ends after its last item */
    cJSON *it = page_item(x, buf, l, start);
    if (it == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    bytes += l;
    cJSON_AddItemToArray(items, it);
    cJSON_AddItemToArray(ends, cJSON_CreateNumber((double)at));
  }
  if (rc == DBX_OK && from <= x->scanned && at > x->scanned) x->scanned = at;
  if (rc == DBX_OK && !eof) { /* at the end already? then say so, saving one more page */
    int c = fgetc(fp);
    if (c == EOF && ferror(fp)) {
      *errnum = errno ? errno : EIO, *err_at = at;
      rc = DBX_EIO;
    } else if (c == EOF) {
      eof = 1;
    }
  }
  free(buf);
  if (rc == DBX_OK) cJSON_AddBoolToObject(o, "eof", eof);
  return rc;
}

static dbx_err run_read_items(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                              void *ud) {
  (void)a;
  dbx_cli_fleet_acts *fa = ud;
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
  struct stat st;
  if (fp == NULL || fstat(fileno(fp), &st) != 0) {
    int en = errno;
    char *m = dbx_asprintf("%s: %s", p->valuestring, strerror(en));
    fail(res, en != EINTR && en != EIO, "ItemsFileUnreadable", m ? m : "cannot open");
    free(m);
    if (fp) fclose(fp);
    cJSON_Delete(in);
    return DBX_OK;
  }
  long long at = (long long)dbx_json_int(off->valuedouble, 0, INT64_MAX);
  int limit = (int)dbx_json_int(lim->valuedouble, 1, DBX_FLEET_MAX_PAGE);
  dbx_err rc = DBX_OK;
  cJSON *o = cJSON_CreateObject();
  int errnum = 0;
  long long err_at = 0;
  pthread_mutex_lock(&fa->mu);
  int r = index_for(&fa->idx, p->valuestring, &st);
  if (r == 0) r = index_scan(&fa->idx, fp, at);
  if (r > 0) errnum = r, err_at = fa->idx.scanned, rc = DBX_EIO;
  else if (r < 0 || o == NULL) rc = DBX_ENOMEM;
  else rc = read_page(&fa->idx, fp, at, limit, o, &errnum, &err_at);
  if (rc != DBX_OK) index_cleanup(&fa->idx); /* a half-scanned index is not trusted */
  pthread_mutex_unlock(&fa->mu);
  fclose(fp);
  if (rc == DBX_EIO) read_failed(res, p->valuestring, err_at, errnum);
  cJSON_Delete(in);
  if (rc != DBX_OK) {
    cJSON_Delete(o);
    return rc == DBX_EIO ? DBX_OK : rc;
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
  pthread_mutex_init(&a->mu, NULL);
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
  index_cleanup(&a->idx);
  pthread_mutex_destroy(&a->mu);
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
