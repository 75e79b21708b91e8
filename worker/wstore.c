/* worker/wstore: the worker's LMDB tables (see wstore.h).
 *
 * Keys are NUL-separated strings: "ns\0wid\0rid\0" followed by an 8-byte
 * big-endian event id (history, so a cursor walks one run in event order) or
 * by the activity id (journal). History values are packed HistoryEvent
 * protobufs; journal values are small JSON objects (cJSON) so they stay
 * readable with mdb_dump. Every write is one dbx_store_write() call, which
 * commits durably; the write functions keep all their effects inside the
 * transaction, as store.h requires for map growth. */
#include "worker/wstore.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/failpoint.h"
#include "base/util.h"
#include "store/store.h"

struct dbx_wstore {
  dbx_store *st;
  dbx_table history, runs, journal, kv[2];
};

/* Every durable write of the worker, between its two failpoints. */
static dbx_err commit(dbx_wstore *s, dbx_store_write_fn fn, void *arg) {
  DBX_FAILPOINT("worker.store.commit.before");
  dbx_err rc = dbx_store_write(s->st, fn, arg);
  DBX_FAILPOINT("worker.store.commit.after");
  return rc;
}

dbx_err dbx_wstore_open(const char *dir, int no_sync, dbx_wstore **out, char **errmsg) {
  if (errmsg) *errmsg = NULL;
  if (!dir || !out) return DBX_EINVAL;
  *out = NULL;
  dbx_wstore *s = calloc(1, sizeof *s);
  if (!s) return DBX_ENOMEM;
  dbx_store_opts o = {0};
  o.path = dir;
  o.no_sync = no_sync;
  dbx_err rc = dbx_store_open(&o, &s->st);
  if (rc != DBX_OK) {
    if (errmsg) *errmsg = dbx_asprintf("worker store %s: %s", dir, dbx_store_open_errmsg());
    free(s);
    return rc;
  }
  if ((rc = dbx_store_table(s->st, "w_history", &s->history)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_runs", &s->runs)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_journal", &s->journal)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_bindings", &s->kv[0])) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_checkpoints", &s->kv[1])) != DBX_OK) {
    if (errmsg) *errmsg = dbx_asprintf("worker store %s: %s", dir, dbx_store_errmsg(s->st));
    dbx_wstore_close(s);
    return rc;
  }
  *out = s;
  return DBX_OK;
}

void dbx_wstore_close(dbx_wstore *s) {
  if (!s) return;
  dbx_store_close(s->st);
  free(s);
}

/* "a\0b\0c\0" + tail; returns length or 0 when it does not fit in 511 bytes. */
static size_t make_key(uint8_t *buf, const char *a, const char *b, const char *c,
                       const void *tail, size_t tail_len) {
  const char *parts[3] = {a, b, c};
  size_t n = 0;
  for (int i = 0; i < 3; i++) {
    if (!parts[i]) continue;
    size_t l = strlen(parts[i]);
    if (n + l + 1 > 511) return 0;
    memcpy(buf + n, parts[i], l);
    n += l;
    buf[n++] = 0;
  }
  if (n + tail_len > 511) return 0;
  if (tail_len) memcpy(buf + n, tail, tail_len);
  return n + tail_len;
}

static void be64(uint8_t *b, int64_t v) {
  for (int i = 7; i >= 0; i--, v >>= 8) b[i] = (uint8_t)(v & 0xff);
}

/* ---- history */

typedef struct {
  dbx_wstore *s;
  const char *ns, *wid, *rid;
  HistoryEvent *const *events;
  size_t n;
} hist_put;

static dbx_err hist_put_fn(dbx_txn *t, void *arg) {
  hist_put *h = arg;
  uint8_t key[512];
  dbx_err rc;
  for (size_t i = 0; i < h->n; i++) {
    uint8_t id[8];
    be64(id, h->events[i]->event_id);
    size_t kl = make_key(key, h->ns, h->wid, h->rid, id, 8);
    if (!kl) return DBX_EINVAL;
    size_t len = protobuf_c_message_get_packed_size(&h->events[i]->base);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return DBX_ENOMEM;
    protobuf_c_message_pack(&h->events[i]->base, buf);
    rc = dbx_store_put(t, h->s->history, key, kl, buf, len);
    free(buf);
    if (rc != DBX_OK) return rc;
  }
  size_t kl = make_key(key, h->ns, h->wid, NULL, NULL, 0);
  if (!kl) return DBX_EINVAL;
  return dbx_store_put(t, h->s->runs, key, kl, h->rid, strlen(h->rid));
}

dbx_err dbx_wstore_history_put(dbx_wstore *s, const char *ns, const char *workflow_id,
                               const char *run_id, HistoryEvent *const *events, size_t n) {
  if (!s || !ns || !workflow_id || !run_id || (n && !events)) return DBX_EINVAL;
  hist_put h = {s, ns, workflow_id, run_id, events, n};
  return commit(s, hist_put_fn, &h);
}

void dbx_wstore_history_free(HistoryEvent **events, size_t n) {
  if (!events) return;
  for (size_t i = 0; i < n; i++)
    if (events[i]) protobuf_c_message_free_unpacked(&events[i]->base, NULL);
  free(events);
}

dbx_err dbx_wstore_history_load(dbx_wstore *s, const char *ns, const char *workflow_id,
                                const char *run_id, HistoryEvent ***events, size_t *n,
                                char **run_id_out) {
  if (!s || !ns || !workflow_id || !events || !n) return DBX_EINVAL;
  *events = NULL;
  *n = 0;
  if (run_id_out) *run_id_out = NULL;
  dbx_txn *t = NULL;
  dbx_cursor *cur = NULL;
  char *rid = NULL;
  HistoryEvent **evs = NULL;
  size_t cnt = 0, cap = 0;
  uint8_t key[512];
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  if (run_id && *run_id) {
    rid = dbx_strdup(run_id);
  } else {
    size_t kl = make_key(key, ns, workflow_id, NULL, NULL, 0);
    dbx_val v;
    if (!kl) {
      rc = DBX_EINVAL;
      goto out;
    }
    rc = dbx_store_get(t, s->runs, key, kl, &v);
    if (rc != DBX_OK) goto out;
    rid = dbx_strndup(v.data, v.size);
  }
  if (!rid) {
    rc = DBX_ENOMEM;
    goto out;
  }
  size_t pl = make_key(key, ns, workflow_id, rid, NULL, 0);
  if (!pl) {
    rc = DBX_EINVAL;
    goto out;
  }
  rc = dbx_store_cursor_open(t, s->history, &cur);
  if (rc != DBX_OK) goto out;
  dbx_val k, v;
  rc = dbx_store_cursor_seek(cur, key, pl, &k, &v);
  while (rc == DBX_OK && k.size == pl + 8 && memcmp(k.data, key, pl) == 0) {
    HistoryEvent *e = (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, v.size,
                                                                v.data);
    if (!e) {
      rc = DBX_ESTORE;
      goto out;
    }
    if (cnt == cap) {
      cap = cap ? cap * 2 : 64;
      void *np = realloc(evs, cap * sizeof *evs);
      if (!np) {
        protobuf_c_message_free_unpacked(&e->base, NULL);
        rc = DBX_ENOMEM;
        goto out;
      }
      evs = np;
    }
    evs[cnt++] = e;
    rc = dbx_store_cursor_next(cur, &k, &v);
  }
  if (rc == DBX_ENOTFOUND || rc == DBX_OK) rc = cnt ? DBX_OK : DBX_ENOTFOUND;
out:
  dbx_store_cursor_close(cur);
  dbx_store_txn_abort(t);
  if (rc == DBX_OK) {
    *events = evs;
    *n = cnt;
    if (run_id_out) *run_id_out = rid;
    else free(rid);
  } else {
    dbx_wstore_history_free(evs, cnt);
    free(rid);
  }
  return rc;
}

/* ---- journal */

void dbx_journal_entry_cleanup(dbx_journal_entry *e) {
  if (!e) return;
  free(e->result.result_json);
  free(e->result.failure_type);
  free(e->result.failure_message);
  memset(e, 0, sizeof *e);
}

static char *jstr(cJSON *o, const char *name) {
  cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(x) ? dbx_strdup(x->valuestring) : NULL;
}

dbx_err dbx_wstore_journal_get(dbx_wstore *s, const char *ns, const char *workflow_id,
                               const char *run_id, const char *activity_id,
                               dbx_journal_entry *out) {
  if (!s || !ns || !workflow_id || !run_id || !activity_id || !out) return DBX_EINVAL;
  memset(out, 0, sizeof *out);
  uint8_t key[512];
  size_t kl = make_key(key, ns, workflow_id, run_id, activity_id, strlen(activity_id));
  if (!kl) return DBX_EINVAL;
  dbx_txn *t = NULL;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  dbx_val v;
  rc = dbx_store_get(t, s->journal, key, kl, &v);
  cJSON *j = NULL;
  if (rc == DBX_OK) j = cJSON_ParseWithLength(v.data, v.size);
  dbx_store_txn_abort(t);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  if (!j) return DBX_ESTORE;
  cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "state");
  cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "attempt");
  out->attempt = cJSON_IsNumber(at) ? (int32_t)at->valuedouble : 0;
  if (cJSON_IsString(st) && strcmp(st->valuestring, "done") == 0) {
    out->state = DBX_JOURNAL_DONE;
    out->result.result_json = jstr(j, "result");
    out->result.failure_type = jstr(j, "failure_type");
    out->result.failure_message = jstr(j, "failure_message");
    out->result.non_retryable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "non_retryable"));
  } else {
    out->state = DBX_JOURNAL_STARTED;
  }
  cJSON_Delete(j);
  return DBX_OK;
}

typedef struct {
  dbx_table tb;
  const uint8_t *key;
  size_t kl;
  const char *val;
} put_one;

static dbx_err put_one_fn(dbx_txn *t, void *arg) {
  put_one *p = arg;
  return dbx_store_put(t, p->tb, p->key, p->kl, p->val, strlen(p->val));
}

static dbx_err journal_write(dbx_wstore *s, const char *ns, const char *wid, const char *rid,
                             const char *aid, cJSON *j) {
  uint8_t key[512];
  size_t kl = make_key(key, ns, wid, rid, aid, strlen(aid));
  if (!kl) return DBX_EINVAL;
  char *txt = cJSON_PrintUnformatted(j);
  if (!txt) return DBX_ENOMEM;
  put_one p = {s->journal, key, kl, txt};
  dbx_err rc = commit(s, put_one_fn, &p);
  free(txt);
  return rc;
}

dbx_err dbx_wstore_journal_started(dbx_wstore *s, const char *ns, const char *workflow_id,
                                   const char *run_id, const char *activity_id, int32_t attempt) {
  if (!s || !ns || !workflow_id || !run_id || !activity_id) return DBX_EINVAL;
  cJSON *j = cJSON_CreateObject();
  if (!j || !cJSON_AddStringToObject(j, "state", "started") ||
      !cJSON_AddNumberToObject(j, "attempt", attempt)) {
    cJSON_Delete(j);
    return DBX_ENOMEM;
  }
  dbx_err rc = journal_write(s, ns, workflow_id, run_id, activity_id, j);
  cJSON_Delete(j);
  return rc;
}

dbx_err dbx_wstore_journal_result(dbx_wstore *s, const char *ns, const char *workflow_id,
                                  const char *run_id, const char *activity_id, int32_t attempt,
                                  const dbx_act_result *res) {
  if (!s || !ns || !workflow_id || !run_id || !activity_id || !res) return DBX_EINVAL;
  cJSON *j = cJSON_CreateObject();
  int ok = j && cJSON_AddStringToObject(j, "state", "done") &&
           cJSON_AddNumberToObject(j, "attempt", attempt) &&
           cJSON_AddBoolToObject(j, "non_retryable", res->non_retryable);
  if (ok && res->result_json) ok = cJSON_AddStringToObject(j, "result", res->result_json) != NULL;
  if (ok && res->failure_type)
    ok = cJSON_AddStringToObject(j, "failure_type", res->failure_type) != NULL;
  if (ok && res->failure_message)
    ok = cJSON_AddStringToObject(j, "failure_message", res->failure_message) != NULL;
  if (!ok) {
    cJSON_Delete(j);
    return DBX_ENOMEM;
  }
  dbx_err rc = journal_write(s, ns, workflow_id, run_id, activity_id, j);
  cJSON_Delete(j);
  return rc;
}

dbx_journal_decision dbx_journal_decide(const dbx_journal_entry *e, dbx_retry_class rc,
                                        int32_t attempt) {
  if (!e || e->state == DBX_JOURNAL_NONE) return DBX_JOURNAL_RUN;
  if (e->state == DBX_JOURNAL_DONE) {
    if (!e->result.failure_type) return DBX_JOURNAL_REPORT;          /* a success: never redo */
    if (e->attempt == attempt) return DBX_JOURNAL_REPORT;            /* same attempt's failure */
    return rc == DBX_AT_MOST_ONCE ? DBX_JOURNAL_REPORT : DBX_JOURNAL_RUN;
  }
  return rc == DBX_AT_MOST_ONCE ? DBX_JOURNAL_OUTCOME_UNKNOWN : DBX_JOURNAL_RUN;
}

/* ---- key -> value strings */

dbx_err dbx_wstore_kv_put(dbx_wstore *s, dbx_wstore_kv kind, const char *key, const char *value) {
  if (!s || !key || !*key || !value || (kind != 0 && kind != 1) || strlen(key) > 511)
    return DBX_EINVAL;
  put_one p = {s->kv[kind], (const uint8_t *)key, strlen(key), value};
  return commit(s, put_one_fn, &p);
}

dbx_err dbx_wstore_kv_get(dbx_wstore *s, dbx_wstore_kv kind, const char *key, char **value) {
  if (!s || !key || !*key || !value || (kind != 0 && kind != 1) || strlen(key) > 511)
    return DBX_EINVAL;
  *value = NULL;
  dbx_txn *t = NULL;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  dbx_val v;
  rc = dbx_store_get(t, s->kv[kind], key, strlen(key), &v);
  if (rc == DBX_OK) {
    *value = dbx_strndup(v.data, v.size);
    if (!*value) rc = DBX_ENOMEM;
  }
  dbx_store_txn_abort(t);
  return rc;
}

typedef struct {
  dbx_table tb;
  const char *key;
} del_one;

static dbx_err del_one_fn(dbx_txn *t, void *arg) {
  del_one *d = arg;
  return dbx_store_del(t, d->tb, d->key, strlen(d->key));
}

dbx_err dbx_wstore_kv_del(dbx_wstore *s, dbx_wstore_kv kind, const char *key) {
  if (!s || !key || !*key || (kind != 0 && kind != 1) || strlen(key) > 511) return DBX_EINVAL;
  del_one d = {s->kv[kind], key};
  return commit(s, del_one_fn, &d);
}
