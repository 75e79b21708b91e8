/* worker/wstore: the worker's LMDB tables (see wstore.h).
 *
 * Keys are NUL-separated strings: "ns\0wid\0rid\0" followed by an 8-byte
 * big-endian event id (history, so a cursor walks one run in event order) or
 * by the activity id (journal). History values are packed HistoryEvent
 * protobufs; journal values are small JSON objects (cJSON) so they stay
 * readable with mdb_dump. Every write is one write function that keeps all
 * its effects inside the transaction, as store.h requires for map growth.
 *
 * Group commit: writes that arrive while a commit is under way (concurrent
 * activities journaling their starts and results) wait for it, and the next
 * commit takes all of them at once: one synced LMDB commit for the group,
 * each write in a child transaction of its own, so a write that fails is
 * dropped alone and its caller gets its error while the others commit. A
 * caller returns only after the synced commit that holds its write (or with
 * the commit's error): every promise still rests on a synced commit, the
 * group only shares the sync. A lone write runs as before, in the commit's
 * own transaction, with no wait added. */
#include "worker/wstore.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/util.h"
#include "store/store.h"

struct dbx_wstore {
  dbx_store *st;
  dbx_table history, runs, journal, kv[2];
  dbx_table amo, approvals, refusals; /* at_most_once identities (see wstore.h) */
  dbx_table touched;                  /* per run: wall ms last written or found open */
  /* group commit (see the top of this file) */
  pthread_mutex_t gmu;
  pthread_cond_t gcv;
  struct group_req *queue, **queue_tail; /* writes waiting for the next commit */
  int committing;                        /* a leader is inside dbx_store_write */
  uint64_t commits;                      /* LMDB write commits made (a group counts once) */
};

/* One write waiting for (or inside) a group commit; lives on its caller's stack. */
typedef struct group_req {
  dbx_store_write_fn fn;
  void *arg;
  int lazy; /* a copy of history the service holds durably (see history_put) */
  dbx_err rc;
  int done;
  struct group_req *next;
} group_req;

/* The write function of a group of two or more: each write in a child
 * transaction; a write that fails leaves the others standing. Runs again
 * whole when the map grows (each fn already allows that). */
static dbx_err group_fn(dbx_txn *t, void *arg) {
  for (group_req *r = arg; r; r = r->next) {
    dbx_txn *child = NULL;
    r->rc = dbx_store_txn_child_begin(t, &child);
    if (r->rc != DBX_OK) return r->rc; /* the parent is broken: the whole group fails */
    r->rc = r->fn(child, r->arg);
    if (r->rc == DBX_OK)
      r->rc = dbx_store_txn_child_commit(child);
    else
      dbx_store_txn_abort(child);
  }
  return DBX_OK;
}

/* Run the queued writes (led by the caller) as one commit; s->gmu held on
 * entry and exit, released while committing. */
static void group_lead(dbx_wstore *s) {
  group_req *batch = s->queue;
  s->queue = NULL;
  s->queue_tail = &s->queue;
  s->committing = 1;
  pthread_mutex_unlock(&s->gmu);
  int lazy = 1; /* the commit skips its meta sync only when every write in it may */
  for (group_req *r = batch; r; r = r->next) lazy &= r->lazy;
  dbx_err (*write)(dbx_store *, dbx_store_write_fn, void *) =
      lazy ? dbx_store_write_lazy_meta : dbx_store_write;
  dbx_err rc;
  if (!batch->next) {
    rc = batch->rc = write(s->st, batch->fn, batch->arg);
  } else {
    rc = write(s->st, group_fn, batch);
  }
  pthread_mutex_lock(&s->gmu);
  for (group_req *r = batch; r; r = r->next) {
    if (rc != DBX_OK) r->rc = rc; /* nothing of the group was committed */
    r->done = 1;
  }
  s->committing = 0;
  s->commits++;
  pthread_cond_broadcast(&s->gcv);
}

uint64_t dbx_wstore_commits(dbx_wstore *s) {
  if (!s) return 0;
  pthread_mutex_lock(&s->gmu);
  uint64_t n = s->commits;
  pthread_mutex_unlock(&s->gmu);
  return n;
}

/* Every durable write of the worker, between its two failpoints. */
static dbx_err commit_as(dbx_wstore *s, dbx_store_write_fn fn, void *arg, int lazy) {
  DBX_FAILPOINT("worker.store.commit.before");
  group_req me = {fn, arg, lazy, DBX_OK, 0, NULL};
  pthread_mutex_lock(&s->gmu);
  *s->queue_tail = &me;
  s->queue_tail = &me.next;
  while (!me.done) {
    if (!s->committing)
      group_lead(s); /* takes every queued write, this one among them */
    else
      pthread_cond_wait(&s->gcv, &s->gmu);
  }
  pthread_mutex_unlock(&s->gmu);
  dbx_err rc = me.rc;
  DBX_FAILPOINT("worker.store.commit.after");
  return rc;
}

static dbx_err commit(dbx_wstore *s, dbx_store_write_fn fn, void *arg) {
  return commit_as(s, fn, arg, 0);
}

static dbx_err adopt_untouched(dbx_wstore *s);

dbx_err dbx_wstore_open(const char *dir, int no_sync, dbx_wstore **out, char **errmsg) {
  if (errmsg) *errmsg = NULL;
  if (!dir || !out) return DBX_EINVAL;
  *out = NULL;
  dbx_wstore *s = dbx_calloc(1, sizeof *s);
  if (!s) return DBX_ENOMEM;
  pthread_mutex_init(&s->gmu, NULL);
  pthread_cond_init(&s->gcv, NULL);
  s->queue_tail = &s->queue;
  dbx_store_opts o = {0};
  o.path = dir;
  o.no_sync = no_sync;
  dbx_err rc = dbx_store_open(&o, &s->st);
  if (rc != DBX_OK) {
    if (errmsg) *errmsg = dbx_asprintf("worker store %s: %s", dir, dbx_store_open_errmsg());
    pthread_cond_destroy(&s->gcv);
    pthread_mutex_destroy(&s->gmu);
    free(s);
    return rc;
  }
  if ((rc = dbx_store_table(s->st, "w_history", &s->history)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_runs", &s->runs)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_journal", &s->journal)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_bindings", &s->kv[0])) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_checkpoints", &s->kv[1])) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_amo", &s->amo)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_approvals", &s->approvals)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_refusals", &s->refusals)) != DBX_OK ||
      (rc = dbx_store_table(s->st, "w_touched", &s->touched)) != DBX_OK) {
    if (errmsg) *errmsg = dbx_asprintf("worker store %s: %s", dir, dbx_store_errmsg(s->st));
    dbx_wstore_close(s);
    return rc;
  }
  if ((rc = adopt_untouched(s)) != DBX_OK) {
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
  pthread_cond_destroy(&s->gcv);
  pthread_mutex_destroy(&s->gmu);
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

static int64_t get_be64(const uint8_t *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | b[i];
  return (int64_t)v;
}

/* A run's touched time is rewritten only when it is this much older, so a
 * busy run's commits do not each dirty the touched table's pages; the sweep
 * may then ask about a run up to this much early, which costs one question. */
#define TOUCH_GRAIN_MS 1000

/* Record in t that the run (ns, wid, rid) was written at now_ms (wall);
 * force: write even within the grain. */
static dbx_err touch_at(dbx_txn *t, dbx_wstore *s, const char *ns, const char *wid,
                        const char *rid, int64_t now_ms, int force) {
  uint8_t key[512], val[8];
  size_t kl = make_key(key, ns, wid, rid, NULL, 0);
  if (!kl) return DBX_EINVAL;
  if (!force) {
    dbx_val have;
    dbx_err rc = dbx_store_get(t, s->touched, key, kl, &have);
    if (rc == DBX_OK && have.size == 8) {
      int64_t d = now_ms - get_be64(have.data);
      if (d < TOUCH_GRAIN_MS && d > -TOUCH_GRAIN_MS) return DBX_OK;
    } else if (rc != DBX_OK && rc != DBX_ENOTFOUND) {
      return rc;
    }
  }
  be64(val, now_ms);
  return dbx_store_put(t, s->touched, key, kl, val, sizeof val);
}

static dbx_err touch(dbx_txn *t, dbx_wstore *s, const char *ns, const char *wid, const char *rid) {
  return touch_at(t, s, ns, wid, rid, dbx_wall_ns() / 1000000, 0);
}

/* The length of the run prefix ("ns\0wid\0rid\0") of a per-run key, 0 when
 * the key has no three NUL-terminated parts. */
static size_t run_prefix_len(const uint8_t *key, size_t kl) {
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    const uint8_t *z = at < kl ? memchr(key + at, 0, kl - at) : NULL;
    if (!z) return 0;
    at = (size_t)(z - key) + 1;
  }
  return at;
}

static dbx_err adopt_fn(dbx_txn *t, void *arg) {
  dbx_wstore *s = arg;
  int64_t now = dbx_wall_ns() / 1000000;
  uint8_t val[8];
  be64(val, now);
  const dbx_table per_run[] = {s->history, s->journal, s->amo};
  for (size_t i = 0; i < sizeof per_run / sizeof *per_run; i++) {
    dbx_cursor *c = NULL;
    dbx_val k, v;
    dbx_err rc = dbx_store_cursor_open(t, per_run[i], &c);
    if (rc == DBX_OK) rc = dbx_store_cursor_seek(c, NULL, 0, &k, &v);
    for (; rc == DBX_OK; rc = dbx_store_cursor_next(c, &k, &v)) {
      size_t pl = run_prefix_len(k.data, k.size);
      if (pl) rc = dbx_store_put(t, s->touched, k.data, pl, val, sizeof val);
      if (rc != DBX_OK) break;
    }
    dbx_store_cursor_close(c);
    if (rc != DBX_ENOTFOUND) return rc;
  }
  return DBX_OK;
}

/* A store written before the touched table existed has runs the sweep would
 * never see: when that table is empty and the per-run tables are not, every
 * run found there is touched now (one commit, once), so the retention
 * counts from the upgrade. */
static dbx_err adopt_untouched(dbx_wstore *s) {
  dbx_txn *t = NULL;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  int need = 0;
  dbx_cursor *c = NULL;
  dbx_val k, v;
  if ((rc = dbx_store_cursor_open(t, s->touched, &c)) == DBX_OK &&
      dbx_store_cursor_seek(c, NULL, 0, &k, &v) == DBX_ENOTFOUND) {
    const dbx_table per_run[] = {s->history, s->journal, s->amo};
    for (size_t i = 0; !need && i < sizeof per_run / sizeof *per_run; i++) {
      dbx_cursor *pc = NULL;
      if (dbx_store_cursor_open(t, per_run[i], &pc) == DBX_OK)
        need = dbx_store_cursor_seek(pc, NULL, 0, &k, &v) == DBX_OK;
      dbx_store_cursor_close(pc);
    }
  }
  dbx_store_cursor_close(c);
  dbx_store_txn_abort(t);
  if (rc != DBX_OK || !need) return rc;
  return commit(s, adopt_fn, s);
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
    /* A run's events never change once recorded: the worker is handed the
     * whole history at every workflow task, so only new ids are written
     * (rewriting them all made each task O(history) in packing and pages). */
    dbx_val have;
    rc = dbx_store_get(t, h->s->history, key, kl, &have);
    if (rc == DBX_OK) continue;
    if (rc != DBX_ENOTFOUND) return rc;
    size_t len = 0;
    uint8_t *buf = dbx_pb_pack(&h->events[i]->base, &len);
    if (!buf) return DBX_ENOMEM;
    rc = dbx_store_put(t, h->s->history, key, kl, buf, len);
    free(buf);
    if (rc != DBX_OK) return rc;
  }
  if ((rc = touch(t, h->s, h->ns, h->wid, h->rid)) != DBX_OK) return rc;
  size_t kl = make_key(key, h->ns, h->wid, NULL, NULL, 0);
  if (!kl) return DBX_EINVAL;
  dbx_val cur;
  rc = dbx_store_get(t, h->s->runs, key, kl, &cur);
  if (rc == DBX_OK && cur.size == strlen(h->rid) && memcmp(cur.data, h->rid, cur.size) == 0)
    return DBX_OK;
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  return dbx_store_put(t, h->s->runs, key, kl, h->rid, strlen(h->rid));
}

dbx_err dbx_wstore_history_put(dbx_wstore *s, const char *ns, const char *workflow_id,
                               const char *run_id, HistoryEvent *const *events, size_t n) {
  if (!s || !ns || !workflow_id || !run_id || (n && !events)) return DBX_EINVAL;
  hist_put h = {s, ns, workflow_id, run_id, events, n};
  /* Not a promise of this worker: these events came in a workflow task, and
   * the service hands out only events it has committed durably, so the
   * service's history is the authoritative copy and this one is a cache for
   * offline replay (`durabox replay`) that nothing else reads. The data pages
   * are still synced (the store stays intact after a machine crash); only the
   * meta page is not waited for, so a machine crash may undo this commit,
   * which the next task (the service sends the run's whole history) or the
   * next synced commit (which writes a newer meta page) makes good. In a
   * group with any other write the commit is synced in full. */
  return commit_as(s, hist_put_fn, &h, 1);
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
    HistoryEvent *e = (HistoryEvent *)dbx_pb_unpack(&HistoryEvent__D, v.data, v.size);
    if (!e) {
      rc = DBX_ESTORE;
      goto out;
    }
    if (cnt == cap) {
      cap = cap ? cap * 2 : 64;
      void *np = dbx_realloc(evs, cap * sizeof *evs);
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

/* *out: a copy of the string member name, NULL when absent. Sets *oom
 * (never clears it) when the copy could not be allocated. */
static char *jstr(cJSON *o, const char *name, int *oom) {
  cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsString(x)) return NULL;
  char *s = dbx_strdup(x->valuestring);
  if (!s) *oom = 1;
  return s;
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
  out->attempt = cJSON_IsNumber(at) ? (int32_t)dbx_json_int(at->valuedouble, 0, INT32_MAX) : 0;
  if (cJSON_IsString(st) && strcmp(st->valuestring, "done") == 0) {
    out->state = DBX_JOURNAL_DONE;
    /* a member that could not be copied must not read as absent: a failure
     * without its failure_type would be reported as a success */
    int oom = 0;
    out->result.result_json = jstr(j, "result", &oom);
    out->result.failure_type = jstr(j, "failure_type", &oom);
    out->result.failure_message = jstr(j, "failure_message", &oom);
    out->result.non_retryable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "non_retryable"));
    if (oom) {
      cJSON_Delete(j);
      dbx_journal_entry_cleanup(out);
      return DBX_ENOMEM;
    }
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

typedef struct {
  dbx_wstore *s;
  const char *ns, *wid, *rid;
  put_one put;
} journal_put;

static dbx_err journal_put_fn(dbx_txn *t, void *arg) {
  journal_put *j = arg;
  dbx_err rc = touch(t, j->s, j->ns, j->wid, j->rid);
  return rc == DBX_OK ? put_one_fn(t, &j->put) : rc;
}

static dbx_err journal_write(dbx_wstore *s, const char *ns, const char *wid, const char *rid,
                             const char *aid, cJSON *j) {
  uint8_t key[512];
  size_t kl = make_key(key, ns, wid, rid, aid, strlen(aid));
  if (!kl) return DBX_EINVAL;
  char *txt = cJSON_PrintUnformatted(j);
  if (!txt) return DBX_ENOMEM;
  journal_put p = {s, ns, wid, rid, {s->journal, key, kl, txt}};
  dbx_err rc = commit(s, journal_put_fn, &p);
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

int dbx_journal_stale(const dbx_journal_entry *e, int32_t attempt) {
  /* a reported failure is followed by the next attempt as a matter of course;
   * a reported success ends the activity, so a success of another attempt was
   * never accepted */
  return e && e->state == DBX_JOURNAL_DONE && !e->result.failure_type && e->attempt != attempt;
}

dbx_journal_decision dbx_journal_decide(const dbx_journal_entry *e, dbx_retry_class rc,
                                        int32_t attempt) {
  if (!e || e->state == DBX_JOURNAL_NONE) return DBX_JOURNAL_RUN;
  if (e->state == DBX_JOURNAL_DONE) {
    if (e->attempt == attempt) return DBX_JOURNAL_REPORT; /* still this attempt's: report it */
    /* another attempt's: that attempt is closed (a failure being retried, or
     * a success that timed out before it was accepted): never report it */
    return rc == DBX_AT_MOST_ONCE ? DBX_JOURNAL_OUTCOME_UNKNOWN : DBX_JOURNAL_RUN;
  }
  return rc == DBX_AT_MOST_ONCE ? DBX_JOURNAL_OUTCOME_UNKNOWN : DBX_JOURNAL_RUN;
}

/* ---- at_most_once identities */

dbx_err dbx_wstore_input_hash(const char *input, size_t len, char out[DBX_INPUT_HASH_LEN + 1]) {
  cJSON *j = input ? cJSON_ParseWithLength(input, len) : NULL;
  char *canon = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  if (j && !canon) return DBX_ENOMEM;
  dbx_err rc = canon ? dbx_sha256_hex(canon, strlen(canon), out)
                     : dbx_sha256_hex(input, input ? len : 0, out);
  free(canon);
  return rc;
}

static size_t amo_key(uint8_t *key, const char *ns, const char *wid, const char *rid,
                      const char *type, const char *hash) {
  char tail[512];
  int tl = snprintf(tail, sizeof tail, "%s%c%s", type, '\0', hash);
  if (tl < 0 || (size_t)tl >= sizeof tail) return 0;
  return make_key(key, ns, wid, rid, tail, (size_t)tl);
}

typedef struct {
  dbx_wstore *s;
  const char *ns, *wid, *rid, *aid, *type, *hash;
  int32_t attempt;
  uint8_t key[512];
  size_t kl;
  char *earlier; /* out */
} amo_op;

static int json_int(cJSON *j, const char *name) {
  cJSON *x = cJSON_GetObjectItemCaseSensitive(j, name);
  return cJSON_IsNumber(x) ? (int)dbx_json_int(x->valuedouble, INT_MIN, INT_MAX) : 0;
}

static dbx_err put_json(dbx_txn *t, dbx_table tb, const uint8_t *key, size_t kl, cJSON *j) {
  char *txt = j ? cJSON_PrintUnformatted(j) : NULL;
  dbx_err rc = txt ? dbx_store_put(t, tb, key, kl, txt, strlen(txt)) : DBX_ENOMEM;
  free(txt);
  return rc;
}

static cJSON *get_json(dbx_txn *t, dbx_table tb, const uint8_t *key, size_t kl, dbx_err *rc) {
  dbx_val v;
  *rc = dbx_store_get(t, tb, key, kl, &v);
  if (*rc != DBX_OK) return NULL;
  cJSON *j = cJSON_ParseWithLength(v.data, v.size);
  if (!j) *rc = DBX_ESTORE;
  return j;
}

static dbx_err amo_begin_fn(dbx_txn *t, void *arg) {
  amo_op *o = arg;
  dbx_wstore *s = o->s;
  dbx_err rc;
  free(o->earlier); /* fn may run again after map growth */
  o->earlier = NULL;
  if ((rc = touch(t, s, o->ns, o->wid, o->rid)) != DBX_OK) return rc;
  cJSON *claim = get_json(t, s->amo, o->key, o->kl, &rc), *appr = NULL, *j = NULL;
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) goto out;
  cJSON *ca = claim ? cJSON_GetObjectItemCaseSensitive(claim, "activity_id") : NULL;
  int mine = !claim || (cJSON_IsString(ca) && strcmp(ca->valuestring, o->aid) == 0);
  if (!mine) {
    appr = get_json(t, s->approvals, o->key, o->kl, &rc);
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) goto out;
    int left = appr ? json_int(appr, "left") : 0;
    if (left <= 0) { /* refuse: record it for `durabox approval list` */
      o->earlier = dbx_strdup(cJSON_IsString(ca) ? ca->valuestring : "");
      j = cJSON_CreateObject();
      if (!o->earlier || !j || !cJSON_AddStringToObject(j, "namespace", o->ns) ||
          !cJSON_AddStringToObject(j, "workflow_id", o->wid) ||
          !cJSON_AddStringToObject(j, "run_id", o->rid) ||
          !cJSON_AddStringToObject(j, "activity_type", o->type) ||
          !cJSON_AddStringToObject(j, "input_hash", o->hash) ||
          !cJSON_AddStringToObject(j, "activity_id", o->aid) ||
          !cJSON_AddStringToObject(j, "earlier_activity_id", o->earlier)) {
        rc = DBX_ENOMEM;
        goto out;
      }
      rc = put_json(t, s->refusals, o->key, o->kl, j);
      goto out;
    }
    if (left == 1) {
      rc = dbx_store_del(t, s->approvals, o->key, o->kl);
    } else {
      cJSON_ReplaceItemInObjectCaseSensitive(appr, "left", cJSON_CreateNumber(left - 1));
      rc = put_json(t, s->approvals, o->key, o->kl, appr);
    }
    if (rc != DBX_OK) goto out;
    rc = dbx_store_del(t, s->refusals, o->key, o->kl);
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) goto out;
  }
  j = cJSON_CreateObject();
  if (!j || !cJSON_AddStringToObject(j, "activity_id", o->aid)) {
    rc = DBX_ENOMEM;
    goto out;
  }
  if ((rc = put_json(t, s->amo, o->key, o->kl, j)) != DBX_OK) goto out;
  cJSON_Delete(j);
  j = cJSON_CreateObject();
  if (!j || !cJSON_AddStringToObject(j, "state", "started") ||
      !cJSON_AddNumberToObject(j, "attempt", o->attempt)) {
    rc = DBX_ENOMEM;
    goto out;
  }
  uint8_t jk[512];
  size_t jl = make_key(jk, o->ns, o->wid, o->rid, o->aid, strlen(o->aid));
  rc = jl ? put_json(t, s->journal, jk, jl, j) : DBX_EINVAL;
out:
  cJSON_Delete(claim);
  cJSON_Delete(appr);
  cJSON_Delete(j);
  return rc;
}

dbx_err dbx_wstore_amo_begin(dbx_wstore *s, const char *ns, const char *workflow_id,
                             const char *run_id, const char *activity_id, int32_t attempt,
                             const char *activity_type, const char *input_hash, char **earlier) {
  if (earlier) *earlier = NULL;
  if (!s || !ns || !workflow_id || !run_id || !activity_id || !activity_type || !input_hash)
    return DBX_EINVAL;
  amo_op o = {.s = s, .ns = ns, .wid = workflow_id, .rid = run_id, .aid = activity_id,
              .type = activity_type, .hash = input_hash, .attempt = attempt};
  o.kl = amo_key(o.key, ns, workflow_id, run_id, activity_type, input_hash);
  if (!o.kl) return DBX_EINVAL;
  dbx_err rc = commit(s, amo_begin_fn, &o);
  if (rc == DBX_OK && o.earlier) { /* the refusal record committed */
    rc = DBX_EEXIST;
    if (earlier) {
      *earlier = o.earlier;
      o.earlier = NULL;
    }
  }
  free(o.earlier);
  return rc;
}

static dbx_err grant_fn(dbx_txn *t, void *arg) {
  amo_op *o = arg;
  dbx_err rc = touch(t, o->s, o->ns, o->wid, o->rid);
  if (rc != DBX_OK) return rc;
  cJSON *appr = get_json(t, o->s->approvals, o->key, o->kl, &rc);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  int left = appr ? json_int(appr, "left") : 0;
  cJSON_Delete(appr);
  cJSON *j = cJSON_CreateObject();
  if (!j || !cJSON_AddNumberToObject(j, "left", left + 1) ||
      !cJSON_AddNumberToObject(j, "granted_ms", (double)(dbx_wall_ns() / 1000000))) {
    cJSON_Delete(j);
    return DBX_ENOMEM;
  }
  rc = put_json(t, o->s->approvals, o->key, o->kl, j);
  cJSON_Delete(j);
  return rc;
}

dbx_err dbx_wstore_approval_grant(dbx_wstore *s, const char *ns, const char *workflow_id,
                                  const char *run_id, const char *activity_type,
                                  const char *input_hash) {
  if (!s || !ns || !workflow_id || !run_id || !activity_type || !input_hash) return DBX_EINVAL;
  amo_op o = {.s = s, .ns = ns, .wid = workflow_id, .rid = run_id};
  o.kl = amo_key(o.key, ns, workflow_id, run_id, activity_type, input_hash);
  if (!o.kl) return DBX_EINVAL;
  return commit(s, grant_fn, &o);
}

void dbx_wstore_refusals_free(dbx_wstore_refusal *r, size_t n) {
  for (size_t i = 0; r && i < n; i++) {
    free(r[i].ns);
    free(r[i].workflow_id);
    free(r[i].run_id);
    free(r[i].activity_type);
    free(r[i].input_hash);
    free(r[i].activity_id);
    free(r[i].earlier_activity_id);
  }
  free(r);
}

dbx_err dbx_wstore_refusals_list(dbx_wstore *s, dbx_wstore_refusal **out, size_t *n) {
  if (!s || !out || !n) return DBX_EINVAL;
  *out = NULL;
  *n = 0;
  dbx_txn *t = NULL;
  dbx_cursor *c = NULL;
  dbx_wstore_refusal *v = NULL;
  size_t cnt = 0, cap = 0;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  if ((rc = dbx_store_cursor_open(t, s->refusals, &c)) != DBX_OK) goto out;
  dbx_val k, val;
  for (rc = dbx_store_cursor_seek(c, NULL, 0, &k, &val); rc == DBX_OK;
       rc = dbx_store_cursor_next(c, &k, &val)) {
    cJSON *j = cJSON_ParseWithLength(val.data, val.size);
    if (!j) continue;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 8;
      dbx_wstore_refusal *nv = dbx_realloc(v, nc * sizeof *nv);
      if (!nv) {
        cJSON_Delete(j);
        rc = DBX_ENOMEM;
        goto out;
      }
      v = nv;
      cap = nc;
    }
    dbx_wstore_refusal *r = &v[cnt++];
    memset(r, 0, sizeof *r);
    int oom = 0;
    r->ns = jstr(j, "namespace", &oom);
    r->workflow_id = jstr(j, "workflow_id", &oom);
    r->run_id = jstr(j, "run_id", &oom);
    r->activity_type = jstr(j, "activity_type", &oom);
    r->input_hash = jstr(j, "input_hash", &oom);
    r->activity_id = jstr(j, "activity_id", &oom);
    r->earlier_activity_id = jstr(j, "earlier_activity_id", &oom);
    cJSON_Delete(j);
    if (oom) {
      rc = DBX_ENOMEM;
      goto out;
    }
    dbx_err arc;
    cJSON *appr = get_json(t, s->approvals, k.data, k.size, &arc);
    r->approvals_left = appr ? json_int(appr, "left") : 0;
    cJSON_Delete(appr);
  }
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
out:
  dbx_store_cursor_close(c);
  dbx_store_txn_abort(t);
  if (rc != DBX_OK) {
    dbx_wstore_refusals_free(v, cnt);
    return rc;
  }
  *out = v;
  *n = cnt;
  return DBX_OK;
}

/* ---- retention */

/* A run the sweep asks about: its touched key ("ns\0wid\0rid\0") and the answer. */
typedef struct {
  uint8_t *key;
  size_t kl;
  dbx_wstore_run_status st;
} sweep_run;

typedef struct {
  dbx_wstore *s;
  sweep_run *runs;
  size_t n;
  int64_t now_ms;
} sweep_op;

/* The three strings of a touched key; 0 when the key is not three
 * NUL-terminated strings ending exactly at its end. */
static int split_run_key(const uint8_t *key, size_t kl, const char **ns, const char **wid,
                         const char **rid) {
  if (!kl || run_prefix_len(key, kl) != kl) return 0;
  *ns = (const char *)key;
  *wid = *ns + strlen(*ns) + 1;
  *rid = *wid + strlen(*wid) + 1;
  return 1;
}

/* Delete every entry of tb whose key starts with prefix. */
static dbx_err del_prefix(dbx_txn *t, dbx_table tb, const uint8_t *prefix, size_t pl) {
  dbx_cursor *cur = NULL;
  dbx_val k, v;
  dbx_err rc = dbx_store_cursor_open(t, tb, &cur);
  if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, prefix, pl, &k, &v);
  while (rc == DBX_OK && k.size >= pl && memcmp(k.data, prefix, pl) == 0) {
    rc = dbx_store_cursor_del(cur);
    if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, prefix, pl, &k, &v);
  }
  dbx_store_cursor_close(cur);
  return rc == DBX_ENOTFOUND ? DBX_OK : rc;
}

/* Remove every entry of one closed run (its key is valid: checked when collected). */
static dbx_err purge_run(dbx_txn *t, dbx_wstore *s, const sweep_run *r) {
  const char *ns = NULL, *wid = NULL, *rid = NULL;
  split_run_key(r->key, r->kl, &ns, &wid, &rid);
  const dbx_table per_run[] = {s->history, s->journal, s->amo, s->approvals, s->refusals};
  dbx_err rc = DBX_OK;
  for (size_t i = 0; rc == DBX_OK && i < sizeof per_run / sizeof *per_run; i++)
    rc = del_prefix(t, per_run[i], r->key, r->kl);
  if (rc == DBX_OK) rc = dbx_store_del(t, s->touched, r->key, r->kl);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  /* the workflow's latest-run pointer ("ns\0wid\0"), when it names this run */
  size_t wl = (size_t)(rid - ns);
  dbx_val cur;
  rc = dbx_store_get(t, s->runs, r->key, wl, &cur);
  if (rc == DBX_OK && cur.size == strlen(rid) && memcmp(cur.data, rid, cur.size) == 0)
    return dbx_store_del(t, s->runs, r->key, wl);
  return rc == DBX_ENOTFOUND ? DBX_OK : rc;
}

static dbx_err sweep_fn(dbx_txn *t, void *arg) {
  sweep_op *o = arg;
  for (size_t i = 0; i < o->n; i++) {
    sweep_run *r = &o->runs[i];
    const char *ns = NULL, *wid = NULL, *rid = NULL;
    split_run_key(r->key, r->kl, &ns, &wid, &rid);
    dbx_err rc = DBX_OK;
    if (r->st == DBX_WSTORE_RUN_OPEN)
      rc = touch_at(t, o->s, ns, wid, rid, o->now_ms, 1);
    else if (r->st == DBX_WSTORE_RUN_CLOSED)
      rc = purge_run(t, o->s, r);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* The runs due to be asked about: touched at or before due_ms, in key order,
 * at most max of them. *runs: malloc'd, each key malloc'd. */
static dbx_err sweep_collect(dbx_wstore *s, int64_t due_ms, size_t max, sweep_run **runs,
                             size_t *n) {
  *runs = NULL;
  *n = 0;
  dbx_txn *t = NULL;
  dbx_cursor *c = NULL;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  sweep_run *v = NULL;
  size_t cnt = 0, cap = 0;
  dbx_val k, val;
  if ((rc = dbx_store_cursor_open(t, s->touched, &c)) == DBX_OK)
    rc = dbx_store_cursor_seek(c, NULL, 0, &k, &val);
  for (; rc == DBX_OK && cnt < max; rc = dbx_store_cursor_next(c, &k, &val)) {
    const char *ns = NULL, *wid = NULL, *rid = NULL;
    if (val.size != 8 || get_be64(val.data) > due_ms || !split_run_key(k.data, k.size, &ns, &wid, &rid))
      continue;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      sweep_run *nv = dbx_realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = DBX_ENOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
    sweep_run *r = &v[cnt];
    r->key = dbx_malloc(k.size);
    if (!r->key) {
      rc = DBX_ENOMEM;
      break;
    }
    memcpy(r->key, k.data, k.size);
    r->kl = k.size;
    r->st = DBX_WSTORE_RUN_UNKNOWN;
    cnt++;
  }
  dbx_store_cursor_close(c);
  dbx_store_txn_abort(t);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) {
    for (size_t i = 0; i < cnt; i++) free(v[i].key);
    free(v);
    return rc;
  }
  *runs = v;
  *n = cnt;
  return DBX_OK;
}

dbx_err dbx_wstore_release_pages(dbx_wstore *s) {
  if (!s) return DBX_EINVAL;
  return dbx_store_release_pages(s->st);
}

const char *dbx_wstore_release_errmsg(dbx_wstore *s) {
  return s ? dbx_store_errmsg(s->st) : "no worker store";
}

dbx_err dbx_wstore_sweep(dbx_wstore *s, int64_t retention_ms, int64_t now_ms, size_t max_runs,
                         dbx_wstore_status_fn status, void *arg, dbx_wstore_sweep_result *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!s || !status || retention_ms < 0) return DBX_EINVAL;
  sweep_run *runs = NULL;
  size_t n = 0;
  dbx_err rc = sweep_collect(s, now_ms - retention_ms, max_runs, &runs, &n);
  if (rc != DBX_OK) return rc;
  size_t closed = 0, answered = 0;
  dbx_wstore_run_ask *ask = n ? dbx_calloc(n, sizeof *ask) : NULL;
  if (n && !ask) rc = DBX_ENOMEM;
  for (size_t i = 0; ask && i < n; i++) {
    split_run_key(runs[i].key, runs[i].kl, &ask[i].ns, &ask[i].workflow_id, &ask[i].run_id);
    ask[i].status = DBX_WSTORE_RUN_UNKNOWN;
  }
  if (ask) status(arg, ask, n);
  for (size_t i = 0; ask && i < n; i++) {
    dbx_wstore_run_status st = ask[i].status;
    runs[i].st = st == DBX_WSTORE_RUN_OPEN || st == DBX_WSTORE_RUN_CLOSED ? st : DBX_WSTORE_RUN_UNKNOWN;
    closed += runs[i].st == DBX_WSTORE_RUN_CLOSED;
    answered += runs[i].st != DBX_WSTORE_RUN_UNKNOWN;
  }
  free(ask);
  if (rc == DBX_OK && answered) {
    sweep_op o = {s, runs, n, now_ms};
    rc = commit_as(s, sweep_fn, &o, 1);
  }
  if (out && rc == DBX_OK) {
    out->asked = n;
    out->removed = closed;
  }
  for (size_t i = 0; i < n; i++) free(runs[i].key);
  free(runs);
  return rc;
}

dbx_err dbx_wstore_touched(dbx_wstore *s, const char *ns, const char *workflow_id,
                           const char *run_id, int64_t *ms) {
  if (!s || !ns || !workflow_id || !run_id || !ms) return DBX_EINVAL;
  uint8_t key[512];
  size_t kl = make_key(key, ns, workflow_id, run_id, NULL, 0);
  if (!kl) return DBX_EINVAL;
  dbx_txn *t = NULL;
  dbx_err rc = dbx_store_read_begin(s->st, &t);
  if (rc != DBX_OK) return rc;
  dbx_val v;
  rc = dbx_store_get(t, s->touched, key, kl, &v);
  if (rc == DBX_OK) {
    if (v.size == 8)
      *ms = get_be64(v.data);
    else
      rc = DBX_ESTORE;
  }
  dbx_store_txn_abort(t);
  return rc;
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
