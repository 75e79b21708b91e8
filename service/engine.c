/* The engine: one thread that executes every RPC of the service in batches.
 *
 * The rpc server thread hands each call to on_call(), which only queues it.
 * The engine thread takes everything queued, runs it as one batch inside one
 * write transaction (each call in a nested transaction, so a rejected call
 * leaves nothing), fires due durable timers in the same transaction, commits
 * (one fsync for the whole batch: group commit), and only then answers the
 * calls. Polls that find no task are parked in memory with their deadline and
 * re-run when a task for their queue is committed; history long polls likewise
 * per run. Parked calls are the only in-memory state besides running queries;
 * everything else is read back from the store, so a restart loses nothing
 * that was acknowledged.
 * Threading: on_call/on_cancel run on the rpc thread and touch only the
 * incoming queue under svc->mu; everything else is engine-thread only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "service/svc.h"

#include "base/failpoint.h"
#include "base/fs.h"

#define MAX_BATCH 256


/* ------------------------------------------------------------ notes */

note *svc_note_new(ectx *c, int kind) {
  note *n = dbx_calloc(1, sizeof *n);
  if (n == NULL) {
    svc_oom_mark(); /* a lost note would leave a poller asleep: the job fails */
    return NULL;
  }
  n->kind = kind;
  n->next = c->notes;
  c->notes = n;
  return n;
}

void svc_note_add(ectx *c, int kind, const char *key) {
  note *n = svc_note_new(c, kind);
  if (n && key) {
    n->key = dbx_strdup(key);
    if (n->key == NULL) svc_oom_mark();
  }
}

static void notes_free(note *n) {
  while (n) {
    note *next = n->next;
    free(n->key);
    free(n->bytes);
    free(n->message);
    if (n->q) {
      free(n->q->ns);
      free(n->q->workflow_id);
      free(n->q->run_id);
      free(n->q->task_queue);
      free(n->q->query);
      free(n->q);
    }
    free(n);
    n = next;
  }
}

/* ------------------------------------------------------------ job outputs */

void svc_job_reset(job *j) {
  free(j->message);
  free(j->details);
  free(j->reply);
  free(j->park_key);
  j->message = NULL;
  j->details = NULL;
  j->reply = NULL;
  j->park_key = NULL;
  j->park_key_len = 0;
  j->details_len = j->reply_len = 0;
  j->status = DBX_GRPC_OK;
  j->keep_writes = 0;
  j->park = PARK_NONE;
  j->park_deadline_ns = 0;
  j->query_id = 0;
  if (j->call) { /* an internal job keeps its hand-off: it is the job's input */
    free(j->handoff);
    j->handoff = NULL;
    j->handoff_len = 0;
  }
}

int svc_job_set_handoff(job *j, int kind, const RunState *rs, int64_t scheduled_event_id, int64_t started,
                        int32_t attempt) {
  TaskToken t = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
  t.kind = kind;
  t.namespace_ = rs->namespace_;
  t.workflow_id = rs->workflow_id;
  t.run_id = rs->run_id;
  t.scheduled_event_id = scheduled_event_id;
  t.started_event_id = started;
  t.attempt = attempt;
  free(j->handoff);
  j->handoff = dbx_pb_pack(&t.base, &j->handoff_len);
  if (j->handoff == NULL) {
    j->handoff_len = 0;
    svc_oom_mark();
    return -1;
  }
  return 0;
}

static void job_vfail(job *j, int status, const ProtobufCMessage *detail, const char *type_url,
                      const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  svc_job_reset(j);
  j->status = status;
  j->message = dbx_strdup(msg);
  if (detail) {
    Any any = INIT(GOOGLE__PROTOBUF__ANY);
    any.type_url = (char *)type_url;
    size_t n = protobuf_c_message_get_packed_size(detail);
    any.value.data = dbx_malloc(n ? n : 1);
    if (any.value.data == NULL) return;
    protobuf_c_message_pack(detail, any.value.data);
    any.value.len = n;
    Any *anys[1] = {&any};
    RpcStatus st = INIT(GOOGLE__RPC__STATUS);
    st.code = status;
    st.message = msg;
    st.n_details = 1;
    st.details = anys;
    size_t sn = google__rpc__status__get_packed_size(&st);
    j->details = dbx_malloc(sn ? sn : 1);
    if (j->details) {
      google__rpc__status__pack(&st, j->details);
      j->details_len = sn;
    }
    free(any.value.data);
  }
}

void svc_job_fail(job *j, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  job_vfail(j, status, NULL, NULL, fmt, ap);
  va_end(ap);
}

void svc_job_fail_detail(job *j, int status, const ProtobufCMessage *detail, const char *type_url,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  job_vfail(j, status, detail, type_url, fmt, ap);
  va_end(ap);
}

int svc_job_reply(job *j, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  free(j->reply);
  j->reply = dbx_malloc(n ? n : 1);
  if (j->reply == NULL) {
    j->reply_len = 0;
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory packing the reply");
    return -1;
  }
  protobuf_c_message_pack(m, j->reply);
  j->reply_len = n;
  j->status = DBX_GRPC_OK;
  return 0;
}

int svc_job_reply_field(job *j, const ProtobufCMessage *m, uint32_t field, const uint8_t *body, size_t body_len) {
  size_t n = protobuf_c_message_get_packed_size(m);
  free(j->reply);
  j->reply = dbx_malloc(n + 20 + body_len);
  if (j->reply == NULL) {
    j->reply_len = 0;
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory packing the reply");
    return -1;
  }
  protobuf_c_message_pack(m, j->reply);
  n += svc_pb_varint(j->reply + n, ((uint64_t)field << 3) | 2);
  n += svc_pb_varint(j->reply + n, body_len);
  if (body_len) memcpy(j->reply + n, body, body_len);
  j->reply_len = n + body_len;
  j->status = DBX_GRPC_OK;
  return 0;
}

typedef struct {
  dbx_service *svc;
  uint8_t *handoff;
  size_t len;
} undelivered_arg;

/* rpc thread: a reply that handed out a task was not delivered; queue the
 * internal job that gives the task back (svc_h_task_undelivered). */
static void on_delivered(void *arg, int delivered) {
  undelivered_arg *a = arg;
  job *j = delivered ? NULL : dbx_calloc(1, sizeof *j);
  if (j != NULL) {
    j->method = SVC_METHOD_TASK_UNDELIVERED;
    j->handoff = a->handoff;
    j->handoff_len = a->len;
    a->handoff = NULL;
    dbx_service *s = a->svc;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
      free(j->handoff);
      free(j);
    } else {
      if (s->incoming_tail)
        s->incoming_tail->next = j;
      else
        s->incoming = j;
      s->incoming_tail = j;
      pthread_cond_signal(&s->cond);
    }
    pthread_mutex_unlock(&s->mu);
  } else if (!delivered) {
    DBX_WARN("service", "a task was handed to a poll whose reply was not delivered; out of memory giving it back: "
                        "it waits for its timeout");
  }
  free(a->handoff);
  free(a);
}

static void job_answer(dbx_service *s, job *j) {
  if (j->call) {
    undelivered_arg *a = NULL;
    if (j->status == DBX_GRPC_OK && j->handoff && (a = dbx_calloc(1, sizeof *a)) != NULL) {
      a->svc = s;
      a->handoff = j->handoff;
      a->len = j->handoff_len;
      j->handoff = NULL;
      j->handoff_len = 0;
    }
    if (a)
      dbx_rpc_call_reply_tracked(j->call, j->reply, j->reply_len, on_delivered, a);
    else if (j->status == DBX_GRPC_OK)
      dbx_rpc_call_reply(j->call, j->reply, j->reply_len);
    else
      dbx_rpc_call_fail(j->call, j->status, j->message ? j->message : "error", j->details,
                        j->details_len);
    j->call = NULL;
  }
}

static void job_free(job *j) {
  if (j == NULL) return;
  svc_job_reset(j);
  free(j->handoff);
  free(j);
}

/* ------------------------------------------------------------ namespaces */

int svc_ns_known(dbx_service *s, const char *ns) { return svc_ns_id(s, ns) != NULL; }

const char *svc_ns_id(dbx_service *s, const char *ns) {
  for (size_t i = 0; ns && i < s->n_namespaces; i++)
    if (strcmp(s->namespaces[i].name, ns) == 0) return s->namespaces[i].id;
  return NULL;
}

/* A stable UUID-shaped id from the namespace name (FNV-1a), so a namespace
 * keeps its id across restarts without a registry. */
static char *ns_make_id(const char *name) {
  uint64_t h1 = 1469598103934665603ULL, h2 = 1099511628211ULL * 31;
  for (const char *p = name; *p; p++) {
    h1 = (h1 ^ (uint8_t)*p) * 1099511628211ULL;
    h2 = (h2 ^ (uint8_t)*p) * 0x100000001b3ULL + 7;
  }
  return dbx_asprintf("%08x-%04x-4%03x-8%03x-%012llx", (unsigned)(h1 >> 32), (unsigned)(h1 >> 16) & 0xffff,
                      (unsigned)h1 & 0xfff, (unsigned)(h2 >> 52) & 0xfff,
                      (unsigned long long)(h2 & 0xffffffffffffULL));
}

static int ns_add(dbx_service *s, const char *name) {
  if (svc_ns_known(s, name)) return 0;
  ns_entry *n = dbx_realloc(s->namespaces, (s->n_namespaces + 1) * sizeof *n);
  if (n == NULL) return -1;
  s->namespaces = n;
  n[s->n_namespaces].name = dbx_strdup(name);
  n[s->n_namespaces].id = ns_make_id(name);
  if (n[s->n_namespaces].name == NULL || n[s->n_namespaces].id == NULL) return -1;
  s->n_namespaces++;
  return 0;
}

#define LONG_POLL_TAIL_NS 1000000000LL

int64_t svc_long_poll_until(const ectx *c, const job *j) {
  int64_t now = dbx_mono_ns();
  int64_t until = now + c->svc->long_poll_ms * 1000000;
  int64_t dl = dbx_rpc_call_deadline_mono_ns(j->call);
  if (dl != INT64_MAX && dl - LONG_POLL_TAIL_NS < until) until = dl - LONG_POLL_TAIL_NS;
  return until < now ? now : until;
}

/* ------------------------------------------------------------ rpc callbacks */

static void on_call(dbx_rpc_call *call, void *ud) {
  dbx_service *s = ud;
  job *j = dbx_calloc(1, sizeof *j);
  if (j == NULL) {
    dbx_rpc_call_fail(call, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
    return;
  }
  j->call = call;
  j->method = dbx_rpc_call_method(call);
  pthread_mutex_lock(&s->mu);
  if (s->stopping) {
    pthread_mutex_unlock(&s->mu);
    dbx_rpc_call_fail(call, DBX_GRPC_UNAVAILABLE, "service is stopping", NULL, 0);
    free(j);
    return;
  }
  if (s->incoming_tail)
    s->incoming_tail->next = j;
  else
    s->incoming = j;
  s->incoming_tail = j;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
}

static void on_cancel(dbx_rpc_call *call, void *ud) {
  (void)call;
  dbx_service *s = ud;
  pthread_mutex_lock(&s->mu);
  s->wake = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ batches */

typedef struct {
  dbx_service *svc;
  job *jobs;          /* the batch, a list */
  int fire_timers;
  ectx ctx;
  int timers_fired;
  int64_t run_ns;     /* the calls and timers, before the commit (the last try) */
} batch;

static int wake_parked(dbx_service *s, int kind, const char *key, size_t klen, int max, job **ready);

/* Run one job in its own child transaction. Returns a store error that must
 * abort the whole batch, else DBX_OK (a rejected job leaves nothing). A job
 * that ran out of memory is rejected alone with RESOURCE_EXHAUSTED: its
 * child transaction and notes are dropped, the rest of the batch goes on. */
static dbx_err run_job(ectx *c, dbx_txn *txn, job *j) {
  svc_job_reset(j);
  dbx_txn *child = NULL;
  dbx_err rc = dbx_store_txn_child_begin(txn, &child);
  if (rc != DBX_OK) return rc;
  note *mark = c->notes;
  c->txn = child;
  svc_oom_take();
  rc = svc_handle_rpc(c, j);
  c->txn = txn;
  if (svc_oom_take() && (rc == DBX_OK || rc == DBX_ENOMEM)) rc = DBX_ENOMEM; /* something was left unfilled */
  if (rc == DBX_ENOMEM) {
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "%s: out of memory", j->method);
    rc = DBX_OK;
  }
  if (rc != DBX_OK) {
    dbx_store_txn_abort(child);
    return rc; /* storage trouble: the whole batch fails or reruns */
  }
  if (j->status != DBX_GRPC_OK && !j->keep_writes) {
    dbx_store_txn_abort(child); /* rejected: nothing it wrote stays */
    while (c->notes != mark) {
      note *n = c->notes;
      c->notes = n->next;
      n->next = NULL;
      notes_free(n);
    }
    return DBX_OK;
  }
  return dbx_store_txn_child_commit(child);
}

/* Parked polls and history waits that this batch's changes answer join the
 * batch: they run in the same transaction and are answered by the same
 * commit (one fsync instead of two per hand-off). */
static job *take_woken(ectx *c) {
  job *woken = NULL;
  for (note *n = c->notes; n; n = n->next) {
    if (n->consumed || n->key == NULL) continue;
    if (n->kind == NOTE_TASK) {
      /* Consumed only when a parked poller took it on: a poll of this very
       * batch that found the queue empty parks after the commit and must still
       * be woken then (apply_after_commit). */
      if (wake_parked(c->svc, PARK_POLL, n->key, n->len, 1, &woken) > 0) n->consumed = 1;
    } else if (n->kind == NOTE_RUN && !n->waiters_joined) {
      /* history waiters parked before this batch join it; the note stays for
       * the ones that park during it */
      wake_parked(c->svc, PARK_HISTORY, n->key, n->len, -1, &woken);
      n->waiters_joined = 1;
    }
  }
  return woken;
}

static dbx_err batch_fn_run(dbx_txn *txn, batch *b);

/* How many due timers one batch fires, and for how long at most: the calls
 * queued meanwhile wait for the batch, so a storm of timers (thousands of
 * activity timeouts of one run at once, each costing a load and save of the
 * run's state: about 1.3 ms with 2,000 pending, bench/timer_storm.c) is
 * fired in slices of 20 ms with the calls between them, not in 700 ms
 * batches of 512. */
#define TIMERS_PER_BATCH 512
#define TIMERS_BATCH_BUDGET_NS 20000000LL

static dbx_err batch_fn(dbx_txn *txn, void *arg) {
  batch *b = arg;
  int64_t t0 = dbx_mono_ns();
  dbx_err rc = batch_fn_run(txn, b);
  b->run_ns = dbx_mono_ns() - t0;
  return rc;
}

static dbx_err batch_fn_run(dbx_txn *txn, batch *b) {
  ectx *c = &b->ctx;
  notes_free(c->notes);
  memset(c, 0, sizeof *c);
  c->svc = b->svc;
  c->now_ns = dbx_wall_ns();
  c->epoch = ++b->svc->epoch;
  c->txn = txn;
  b->timers_fired = 0;
  job *tail = NULL;
  for (job *j = b->jobs; j; j = j->next) {
    dbx_err rc = run_job(c, txn, j);
    if (rc != DBX_OK) return rc;
    tail = j;
  }
  if (b->fire_timers) {
    dbx_err err = DBX_OK;
    svc_oom_take();
    int n = svc_fire_due_timers(c, TIMERS_PER_BATCH, TIMERS_BATCH_BUDGET_NS, &err);
    if (svc_oom_take() && n >= 0) {
      n = -1;
      err = DBX_ENOMEM;
    }
    if (n < 0) return err;
    b->timers_fired = n;
  }
  for (int round = 0; round < 16; round++) {
    job *woken = take_woken(c);
    if (woken == NULL) break;
    if (tail)
      tail->next = woken;
    else
      b->jobs = woken;
    for (job *j = woken; j; j = j->next) {
      dbx_err rc = run_job(c, txn, j);
      if (rc != DBX_OK) return rc;
      tail = j;
    }
  }
  return svc_seq_save(c);
}

/* Earliest durable timer (wall ns), INT64_MAX if none. */
static int64_t earliest_timer(dbx_service *s) {
  dbx_txn *t = NULL;
  int64_t when = INT64_MAX;
  if (dbx_store_read_begin(s->store, &t) != DBX_OK) return dbx_wall_ns() + 1000000000LL;
  dbx_cursor *cur = NULL;
  dbx_val k, v;
  if (dbx_store_cursor_open(t, s->t_timers, &cur) == DBX_OK &&
      dbx_store_cursor_seek(cur, NULL, 0, &k, &v) == DBX_OK && k.size == 16) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x = (x << 8) | ((const uint8_t *)k.data)[i];
    when = (int64_t)x;
  }
  dbx_store_cursor_close(cur);
  dbx_store_txn_abort(t);
  return when;
}

/* How long after a parked call's due time the rpc layer answers it itself
 * when the engine is still busy (a slow commit): within the 1 s tail room. */
#define FALLBACK_AFTER_NS 250000000LL

static void park(dbx_service *s, job *j) {
  j->next = s->parked;
  s->parked = j;
  /* polls, history and update waits answer with the reply they prepared
   * (empty) at their deadline, even while a batch holds the engine */
  if (j->park != PARK_QUERY && j->call)
    dbx_rpc_call_fallback(j->call, j->reply, j->reply_len, j->park_deadline_ns + FALLBACK_AFTER_NS);
}

/* Move parked jobs whose key matches into *ready (to run again now), at most
 * max of them (-1 = all). */
/* Move up to max (-1 = all) parked jobs of this kind and key into *ready.
 * Returns how many moved. */
static int wake_parked(dbx_service *s, int kind, const char *key, size_t klen, int max, job **ready) {
  int moved = 0;
  job **pp = &s->parked;
  while (*pp && max != 0) {
    job *j = *pp;
    /* a poll whose client went away must not take a task: expire_parked answers it */
    int match = j->park == kind && j->park_key && j->park_key_len == klen &&
                memcmp(j->park_key, key, klen) == 0 && !(j->call && dbx_rpc_call_cancelled(j->call)) &&
                !(j->call && dbx_rpc_call_fallback_sent(j->call)); /* answered already: nothing for it */
    if (match) {
      *pp = j->next;
      j->next = *ready;
      *ready = j;
      moved++;
      if (max > 0) max--;
    } else {
      pp = &j->next;
    }
  }
  return moved;
}

static query *query_by_id(dbx_service *s, uint64_t id) {
  for (query *q = s->queries; q; q = q->next)
    if (q->id == id) return q;
  return NULL;
}

static void query_unlink_free(dbx_service *s, query *q) {
  for (query **pp = &s->queries; *pp; pp = &(*pp)->next) {
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  }
  free(q->ns);
  free(q->workflow_id);
  free(q->run_id);
  free(q->task_queue);
  free(q->query);
  free(q);
}

static void apply_after_commit(dbx_service *s, batch *b, job **ready) {
  /* answer or park the jobs */
  job *j = b->jobs;
  while (j) {
    job *next = j->next;
    j->next = NULL;
    if (j->park != PARK_NONE && j->call && !dbx_rpc_call_cancelled(j->call)) {
      park(s, j);
    } else {
      job_answer(s, j);
      job_free(j);
    }
    j = next;
  }
  b->jobs = NULL;
  for (note *n = b->ctx.notes; n; n = n->next) {
    switch (n->kind) {
    case NOTE_TASK:
      /* one note per enqueued task: wake one poller for it, not every poller
       * of the queue (the others would only find nothing and park again) */
      if (n->key && !n->consumed) wake_parked(s, PARK_POLL, n->key, n->len, 1, ready);
      break;
    case NOTE_QUEUE:
      if (n->key) wake_parked(s, PARK_POLL, n->key, n->len, -1, ready);
      break;
    case NOTE_RUN:
      if (n->key) wake_parked(s, PARK_HISTORY, n->key, n->len, -1, ready);
      break;
    case NOTE_POLLER:
      if (n->key) svc_pollers_note(s, n->key, n->len, n->message ? n->message : "", dbx_wall_ns());
      break;
    case NOTE_QUERY_NEW:
      if (n->q) {
        n->q->next = s->queries;
        s->queries = n->q;
        size_t kl;
        char *k = svc_queue_key(n->q->ns, n->q->task_queue, TASK_WORKFLOW, &kl);
        n->q = NULL;
        if (k) wake_parked(s, PARK_POLL, k, kl, -1, ready);
        free(k);
      }
      break;
    case NOTE_QUERY_DISPATCHED: {
      query *q = query_by_id(s, n->query_id);
      if (q) q->dispatched = 1;
      break;
    }
    case NOTE_QUERY_ANSWER: {
      query *q = query_by_id(s, n->query_id);
      if (q && q->waiter) {
        job *w = q->waiter;
        for (job **pp = &s->parked; *pp; pp = &(*pp)->next) {
          if (*pp == w) {
            *pp = w->next;
            break;
          }
        }
        svc_job_reset(w);
        w->status = n->status;
        if (n->status == DBX_GRPC_OK) {
          w->reply = n->bytes;
          w->reply_len = n->len;
          n->bytes = NULL;
        } else {
          w->message = n->message;
          w->details = n->bytes;
          w->details_len = n->len;
          n->message = NULL;
          n->bytes = NULL;
        }
        job_answer(s, w);
        job_free(w);
        q->waiter = NULL;
      }
      if (q) query_unlink_free(s, q);
      break;
    }
    }
  }
  notes_free(b->ctx.notes);
  b->ctx.notes = NULL;
}

/* Answer parked calls that are cancelled or whose deadline passed; returns
 * the earliest remaining deadline (monotonic ns). */
static int64_t expire_parked(dbx_service *s, int64_t now_mono, int all) {
  int64_t next = INT64_MAX;
  job **pp = &s->parked;
  while (*pp) {
    job *j = *pp;
    int cancelled = j->call == NULL || dbx_rpc_call_cancelled(j->call) || dbx_rpc_call_fallback_sent(j->call);
    if (all || cancelled || j->park_deadline_ns <= now_mono) {
      *pp = j->next;
      if (j->park == PARK_QUERY) {
        query *q = query_by_id(s, j->query_id);
        if (q) query_unlink_free(s, q);
        svc_job_fail(j, DBX_GRPC_DEADLINE_EXCEEDED, "query timed out: no worker answered it before the deadline");
      } else if (j->status != DBX_GRPC_OK || all) {
        if (all) svc_job_fail(j, DBX_GRPC_UNAVAILABLE, "service is stopping");
      }
      /* poll and history waits answer with the reply they prepared (empty) */
      job_answer(s, j);
      job_free(j);
      continue;
    }
    if (j->park_deadline_ns < next) next = j->park_deadline_ns;
    pp = &j->next;
  }
  return next;
}

/* dbx_service_test_alloc_fail_at: arm the allocation hook around the next
 * batch that runs calls (the store write: the handlers, timers and commit;
 * not the answers sent after it). Engine thread. */
static long test_alloc_arm(dbx_service *s, const job *jobs) {
  if (jobs == NULL) return 0;
  pthread_mutex_lock(&s->mu);
  long n = s->test_alloc_fail_at;
  s->test_alloc_fail_at = 0;
  pthread_mutex_unlock(&s->mu);
  if (n > 0) dbx_alloc_fail_at(n);
  return n;
}

static void test_alloc_disarm(dbx_service *s, long n) {
  if (n <= 0) return;
  int failed = dbx_alloc_failed();
  dbx_alloc_fail_at(0);
  pthread_mutex_lock(&s->mu);
  s->test_alloc_failed = failed;
  s->test_alloc_done = 1;
  pthread_mutex_unlock(&s->mu);
}

/* A batch slower than this is logged: every parked long poll waits for it,
 * and one near its deadline needs the engine within the 1 s tail room. */
#define SLOW_BATCH_NS 500000000LL

/* Runs jobs (a list, owned: each is answered or parked) and, with
 * fire_timers, the due durable timers in one write. Returns the outcome of
 * the timers' change: DBX_OK when it committed or none was asked for, else
 * the store's error (the timers stay due). */
static dbx_err run_batch(dbx_service *s, job *jobs, int fire_timers, job **ready) {
  batch b = {.svc = s, .jobs = jobs, .fire_timers = fire_timers};
  DBX_FAILPOINT("service.commit.before");
  long armed = test_alloc_arm(s, jobs);
  int64_t t0 = dbx_mono_ns();
  dbx_err rc = dbx_store_write(s->store, batch_fn, &b);
  int64_t took = dbx_mono_ns() - t0;
  test_alloc_disarm(s, armed);
  if (took > SLOW_BATCH_NS) {
    int n = 0;
    for (job *j = b.jobs; j; j = j->next) n++;
    DBX_WARN("service", "a batch of %d calls (first %s) and %d timers took %lld ms (%lld ms to run, the rest to commit)",
             n, b.jobs && b.jobs->method ? b.jobs->method : "-", b.timers_fired, (long long)(took / 1000000),
             (long long)(b.run_ns / 1000000));
  }
  DBX_FAILPOINT("service.commit.after");
  if (rc == DBX_OK) {
    apply_after_commit(s, &b, ready);
    return DBX_OK;
  }
  notes_free(b.ctx.notes);
  b.ctx.notes = NULL;
  /* The batch failed as a whole. If it held several jobs, or a job and due
   * timers, run each alone and the timers alone, so that one change that
   * cannot be stored does not sink the others (a call is never failed for
   * a timer's change). */
  if (jobs && (jobs->next || fire_timers)) {
    job *j = jobs;
    while (j) {
      job *next = j->next;
      j->next = NULL;
      (void)run_batch(s, j, 0, ready);
      j = next;
    }
    return fire_timers ? run_batch(s, NULL, 1, ready) : DBX_OK;
  }
  const char *msg = dbx_store_errmsg(s->store);
  if (rc == DBX_ENOMEM)
    DBX_WARN("service", "out of memory running a batch");
  else if (rc != DBX_ESTOREFULL) {
    DBX_ERROR("service", "storage error: %s (%s)", dbx_strerror(rc), msg);
    pthread_mutex_lock(&s->mu);
    s->storage_errors++;
    pthread_mutex_unlock(&s->mu);
  } else {
    DBX_WARN("service", "%s", msg);
  }
  for (job *j = jobs; j;) {
    job *next = j->next;
    if (rc == DBX_ESTOREFULL)
      svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "storage full: %s", msg);
    else if (rc == DBX_ENOMEM)
      svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory");
    else
      svc_job_fail(j, DBX_GRPC_UNAVAILABLE, "storage error: %s: %s", dbx_strerror(rc), msg);
    job_answer(s, j);
    job_free(j);
    j = next;
  }
  return fire_timers ? rc : DBX_OK;
}

#define TIMERS_BACKOFF_MIN_NS 1000000000LL
#define TIMERS_BACKOFF_MAX_NS 10000000000LL

/* When the next timer batch may run (wall ns): the earliest timer, or later
 * while timers are held after a failure; INT64_MAX if none. */
static int64_t timers_due_at(const dbx_service *s) {
  int64_t t = s->next_timer_wall_ns;
  if (t != INT64_MAX && t < s->timers_held_until_wall_ns) t = s->timers_held_until_wall_ns;
  return t;
}

/* After a batch that fired timers: a failure holds every timer back for a
 * pause that doubles while they keep failing, so a change the store cannot
 * take (a full store) is retried, not spun on with an error logged each
 * time; a success ends the pause. */
static void timers_after_batch(dbx_service *s, dbx_err rc) {
  if (rc == DBX_OK) {
    s->timers_backoff_ns = 0;
    s->timers_held_until_wall_ns = 0;
    return;
  }
  int64_t b = s->timers_backoff_ns ? s->timers_backoff_ns * 2 : TIMERS_BACKOFF_MIN_NS;
  if (b > TIMERS_BACKOFF_MAX_NS) b = TIMERS_BACKOFF_MAX_NS;
  s->timers_backoff_ns = b;
  s->timers_held_until_wall_ns = dbx_wall_ns() + b;
}

static void *engine_main(void *arg) {
  dbx_service *s = arg;
  job *ready = NULL;
  s->next_timer_wall_ns = earliest_timer(s);
  for (;;) {
    pthread_mutex_lock(&s->mu);
    for (;;) {
      if (s->stopping || (!s->test_hold && (s->incoming || s->wake || ready))) break;
      int64_t now_mono = dbx_mono_ns();
      int64_t park_next = expire_parked(s, now_mono, 0);
      int64_t wait_ns = INT64_MAX;
      if (park_next != INT64_MAX) wait_ns = park_next - now_mono;
      int64_t due = timers_due_at(s);
      if (due != INT64_MAX) {
        int64_t t = due - dbx_wall_ns();
        if (t < wait_ns) wait_ns = t;
      }
      if (wait_ns <= 0) break;
      if (wait_ns > 1000000000LL) wait_ns = 1000000000LL; /* re-check clocks once a second */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      int64_t abs = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + wait_ns;
      ts.tv_sec = abs / 1000000000LL;
      ts.tv_nsec = abs % 1000000000LL;
      pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    }
    int stopping = s->stopping;
    job *in = s->incoming;
    s->incoming = s->incoming_tail = NULL;
    s->wake = 0;
    pthread_mutex_unlock(&s->mu);

    if (stopping) {
      expire_parked(s, dbx_mono_ns(), 1);
      job *all = ready;
      while (all) {
        job *n = all->next;
        svc_job_fail(all, DBX_GRPC_UNAVAILABLE, "service is stopping");
        job_answer(s, all);
        job_free(all);
        all = n;
      }
      while (in) {
        job *n = in->next;
        svc_job_fail(in, DBX_GRPC_UNAVAILABLE, "service is stopping");
        job_answer(s, in);
        job_free(in);
        in = n;
      }
      while (s->queries) query_unlink_free(s, s->queries);
      return NULL;
    }

    expire_parked(s, dbx_mono_ns(), 0);
    /* woken parked jobs first (they were waiting), then new calls */
    job *jobs = ready;
    ready = NULL;
    if (jobs) {
      job *t = jobs;
      while (t->next) t = t->next;
      t->next = in;
    } else {
      jobs = in;
    }
    int timers_due = timers_due_at(s) <= dbx_wall_ns();
    while (jobs || timers_due) {
      job *head = jobs, *tail = jobs;
      int n = 1;
      while (tail && tail->next && n < MAX_BATCH) {
        tail = tail->next;
        n++;
      }
      if (tail) {
        jobs = tail->next;
        tail->next = NULL;
      } else {
        head = NULL;
      }
      dbx_err trc = run_batch(s, head, timers_due, &ready);
      if (timers_due) timers_after_batch(s, trc);
      timers_due = 0;
      s->next_timer_wall_ns = earliest_timer(s);
    }
  }
}

/* ------------------------------------------------------------ start / stop */

void dbx_service_opts_init(dbx_service_opts *o) {
  memset(o, 0, sizeof *o);
  o->limits.count_warn = 10240;
  o->limits.count_suggest_can = 4096;
  o->limits.count_error = 51200;
  o->limits.size_warn_bytes = 10LL << 20;
  o->limits.size_suggest_can_bytes = 4LL << 20;
  o->limits.size_error_bytes = 50LL << 20;
  o->limits.blob_warn_bytes = 512LL << 10;
  o->limits.blob_error_bytes = 2LL << 20;
}

int dbx_service_opts_dynamic_config(dbx_service_opts *o, const char *key, const char *value) {
  static const struct { const char *key; size_t off; } keys[] = {
      {"limit.historyCount.warn", offsetof(dbx_history_limits, count_warn)},
      {"limit.historyCount.suggestContinueAsNew", offsetof(dbx_history_limits, count_suggest_can)},
      {"limit.historyCount.error", offsetof(dbx_history_limits, count_error)},
      {"limit.historySize.warn", offsetof(dbx_history_limits, size_warn_bytes)},
      {"limit.historySize.suggestContinueAsNew", offsetof(dbx_history_limits, size_suggest_can_bytes)},
      {"limit.historySize.error", offsetof(dbx_history_limits, size_error_bytes)},
      {"limit.blobSize.warn", offsetof(dbx_history_limits, blob_warn_bytes)},
      {"limit.blobSize.error", offsetof(dbx_history_limits, blob_error_bytes)},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (strcmp(key, keys[i].key) != 0) continue;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (errno || end == value || *end != '\0' || v < 0) return -1;
    *(int64_t *)((char *)&o->limits + keys[i].off) = v;
    return 1;
  }
  return 0;
}

/* A temporary store whose service was killed (Temporal's SDK test
 * environments end the dev server with SIGKILL) is never removed by its
 * owner. A service that makes a temporary store first removes those in the
 * same directory that belong to this user, carry the TMP_MARKER file only
 * temporary stores get (a store given by path never does, and loses it when
 * opened by path: it is kept from then on), whose service.lock nobody holds,
 * and that have not changed for ORPHAN_AGE_S (one being set up right now is
 * younger; a live one holds its lock). Best effort: errors are skipped. */
#define ORPHAN_AGE_S 60
#define TMP_MARKER "temporary-store"
static void sweep_orphan_stores(const char *tmpdir) {
  DIR *d = opendir(tmpdir);
  if (d == NULL) return;
  time_t now = time(NULL);
  for (const struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
    if (strncmp(e->d_name, "durabox-dev.", 12) != 0) continue;
    char *p = dbx_asprintf("%s/%s", tmpdir, e->d_name);
    char *lk = p ? dbx_asprintf("%s/service.lock", p) : NULL;
    char *mk = p ? dbx_asprintf("%s/" TMP_MARKER, p) : NULL;
    struct stat st, mst;
    int old = lk && mk && lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
              now - st.st_mtime >= ORPHAN_AGE_S && lstat(mk, &mst) == 0 && S_ISREG(mst.st_mode);
    free(mk);
    int fd = old ? open(lk, O_RDWR | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
      dbx_fs_remove_tree(p);
      DBX_INFO("service", "removed the temporary store %s left by a service that was killed", p);
    }
    if (fd >= 0) close(fd);
    free(lk);
    free(p);
  }
  closedir(d);
}

dbx_err dbx_service_start(const dbx_service_opts *o, dbx_service **out, char **errmsg) {
  *out = NULL;
  if (errmsg) *errmsg = NULL;
  dbx_service *s = dbx_calloc(1, sizeof *s);
  if (s == NULL) return DBX_ENOMEM;
  s->opts = *o;
  s->limits = o->limits;
  s->long_poll_ms = o->long_poll_ms > 0 ? o->long_poll_ms : 60000;
  s->next_timer_wall_ns = INT64_MAX;
  s->started_wall_ns = dbx_wall_ns();
  s->lock_fd = -1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  dbx_err rc = DBX_OK;
  char *msg = NULL;

  if (o->db_path) {
    s->db_path = dbx_strdup(o->db_path);
    /* a store opened by path is kept, even one that began as temporary */
    char *mk = s->db_path ? dbx_asprintf("%s/" TMP_MARKER, s->db_path) : NULL;
    if (mk) unlink(mk);
    free(mk);
  } else {
    const char *tmp = getenv("TMPDIR");
    if (tmp == NULL || *tmp == '\0') tmp = "/tmp";
    sweep_orphan_stores(tmp);
    s->db_path = dbx_asprintf("%s/durabox-dev.XXXXXX", tmp);
    if (s->db_path && mkdtemp(s->db_path) == NULL) {
      msg = dbx_asprintf("cannot create a temporary store directory: %s", strerror(errno));
      rc = DBX_ESTORE;
      goto fail;
    }
    s->tmp_db = 1;
    char *mk = dbx_asprintf("%s/" TMP_MARKER, s->db_path);
    int mfd = mk ? open(mk, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) : -1;
    if (mfd >= 0) close(mfd);
    free(mk);
  }
  if (s->db_path == NULL) {
    rc = DBX_ENOMEM;
    goto fail;
  }
  /* One service per store: a second one on the same directory would run a
   * second engine over the same runs and task queues. */
  mkdir(s->db_path, 0700);
  char *lock_path = dbx_asprintf("%s/service.lock", s->db_path);
  s->lock_fd = lock_path ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
  free(lock_path);
  if (s->lock_fd < 0) {
    msg = dbx_asprintf("cannot open the store at %s: %s", s->db_path, strerror(errno));
    rc = DBX_ESTORE;
    goto fail;
  }
  if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = "";
    ssize_t n = pread(s->lock_fd, pid, sizeof pid - 1, 0);
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    msg = dbx_asprintf("the store at %s is in use by another durabox service%s%s%s", s->db_path,
                       pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "");
    rc = DBX_ESTORE;
    goto fail;
  }
  if (ftruncate(s->lock_fd, 0) == 0) {
    char pid[32];
    int pl = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (pwrite(s->lock_fd, pid, (size_t)pl, 0) < 0) { /* informational only */ }
  }
  dbx_store_opts so = {.path = s->db_path,
                       .no_sync = o->no_sync,
                       .map_size_bytes = o->map_size_bytes,
                       .map_ceiling_bytes = o->map_ceiling_bytes,
                       .max_tables = 16};
  rc = dbx_store_open(&so, &s->store);
  if (rc != DBX_OK) {
    msg = dbx_asprintf("cannot open the store at %s: %s", s->db_path, dbx_store_open_errmsg());
    goto fail;
  }
  struct { const char *name; dbx_table *t; } tables[] = {
      {"runs", &s->t_runs},   {"execs", &s->t_execs}, {"history", &s->t_history},
      {"tasks", &s->t_tasks}, {"timers", &s->t_timers}, {"meta", &s->t_meta},
      {"requests", &s->t_requests}};
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    rc = dbx_store_table(s->store, tables[i].name, tables[i].t);
    if (rc != DBX_OK) {
      msg = dbx_asprintf("cannot open table %s: %s", tables[i].name, dbx_store_errmsg(s->store));
      goto fail;
    }
  }
  if (ns_add(s, "default") != 0) {
    rc = DBX_ENOMEM;
    goto fail;
  }
  for (size_t i = 0; i < o->n_namespaces; i++) {
    if (ns_add(s, o->namespaces[i]) != 0) {
      rc = DBX_ENOMEM;
      goto fail;
    }
  }
  rc = svc_sa_opts_parse(s, o, &msg);
  if (rc != DBX_OK) goto fail;
  if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
    msg = dbx_strdup("cannot start the engine thread");
    rc = DBX_ENOMEM;
    goto fail;
  }
  dbx_rpc_server_opts ro = {.host = o->ip ? o->ip : "127.0.0.1",
                            .port = o->port,
                            .max_message_bytes = o->max_message_bytes,
                            .tls_cert_pem = o->tls_cert_pem,
                            .tls_key_pem = o->tls_key_pem,
                            .api_key = o->api_key,
                            .on_call = on_call,
                            .on_cancel = on_cancel,
                            .ud = s};
  const char *rpc_err = NULL;
  rc = dbx_rpc_server_start(&ro, &s->rpc, &rpc_err);
  if (rc != DBX_OK) {
    msg = dbx_asprintf("cannot serve on %s:%d: %s", ro.host, o->port, rpc_err ? rpc_err : dbx_strerror(rc));
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    goto fail;
  }
  *out = s;
  return DBX_OK;
fail:
  if (errmsg) *errmsg = msg ? msg : dbx_strdup(dbx_strerror(rc));
  else free(msg);
  dbx_store_close(s->store);
  if (s->lock_fd >= 0) close(s->lock_fd);
  if (s->tmp_db && s->db_path) dbx_fs_remove_tree(s->db_path);
  free(s->db_path);
  for (size_t i = 0; i < s->n_namespaces; i++) {
    free(s->namespaces[i].name);
    free(s->namespaces[i].id);
  }
  free(s->namespaces);
  svc_pollers_free(s);
  svc_sa_opts_free(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cond);
  free(s);
  return rc;
}

void dbx_service_test_hold(dbx_service *s, int hold) {
  pthread_mutex_lock(&s->mu);
  s->test_hold = hold;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
}

void dbx_service_test_alloc_fail_at(dbx_service *s, long n) {
  pthread_mutex_lock(&s->mu);
  s->test_alloc_fail_at = n;
  s->test_alloc_failed = 0;
  s->test_alloc_done = 0;
  pthread_mutex_unlock(&s->mu);
}

int dbx_service_test_alloc_result(dbx_service *s) {
  pthread_mutex_lock(&s->mu);
  int r = !s->test_alloc_done ? -1 : s->test_alloc_failed;
  pthread_mutex_unlock(&s->mu);
  return r;
}

long dbx_service_test_storage_errors(dbx_service *s) {
  pthread_mutex_lock(&s->mu);
  long n = s->storage_errors;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int dbx_service_test_queued(dbx_service *s) {
  int n = 0;
  pthread_mutex_lock(&s->mu);
  for (job *j = s->incoming; j; j = j->next) n++;
  pthread_mutex_unlock(&s->mu);
  return n;
}

int dbx_service_test_queued_cancelled(dbx_service *s) {
  int n = 0;
  pthread_mutex_lock(&s->mu);
  for (job *j = s->incoming; j; j = j->next) n += j->call && dbx_rpc_call_cancelled(j->call);
  pthread_mutex_unlock(&s->mu);
  return n;
}

void dbx_service_call_local(dbx_service *s, struct dbx_rpc_call *call) { on_call(call, s); }

int dbx_service_port(const dbx_service *s) { return s ? dbx_rpc_server_port(s->rpc) : 0; }

void dbx_service_expect_client_stop(dbx_service *s) {
  if (s) dbx_rpc_server_expect_drops(s->rpc);
}

void dbx_service_stop(dbx_service *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  dbx_rpc_server_destroy(s->rpc); /* new calls meanwhile were refused by on_call */
  dbx_store_close(s->store);
  if (s->lock_fd >= 0) close(s->lock_fd);
  if (s->tmp_db) dbx_fs_remove_tree(s->db_path);
  free(s->db_path);
  for (size_t i = 0; i < s->n_namespaces; i++) {
    free(s->namespaces[i].name);
    free(s->namespaces[i].id);
  }
  free(s->namespaces);
  svc_pollers_free(s);
  svc_sa_opts_free(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* ------------------------------------------------------------ ids */

char *svc_new_uuid(void) {
  char b[DBX_UUID_LEN + 1];
  return dbx_uuid_v4(b) == DBX_OK ? dbx_strdup(b) : NULL;
}
