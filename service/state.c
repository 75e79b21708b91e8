/* Run state, history events, task queues and durable timers, on top of the
 * store's tables. Used by handlers.c and timers.c inside a batch transaction.
 *
 * Tables (keys; values are packed protobuf):
 *   runs     ns \0 workflow id \0 run id       -> RunState
 *   execs    ns \0 workflow id                 -> ExecutionRecord (current run)
 *   history  be64 run_seq, be64 event id       -> HistoryEvent
 *   tasks    ns \0 queue \0 kind, be64 seq     -> TaskRecord
 *   timers   be64 fire time (wall ns), be64 seq -> TimerRecord
 *   meta     "seq"                             -> be64 next sequence number
 *   requests ns \0 request id                  -> run id (start dedupe)
 * Invariants: event ids of a run are contiguous from 1; while a workflow task
 * is started, new events are buffered in the RunState and written after the
 * task's own events (Temporal's order); queued tasks and timers may go stale
 * and are checked against the RunState when they are taken or fire. */
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

/* ------------------------------------------------------------ protobuf helpers */

/* The sticky out-of-memory mark (svc.h): per thread, so the engine thread's
 * jobs and a test's direct calls never see each other's. */
static _Thread_local int oom_mark;

void svc_oom_mark(void) { oom_mark = 1; }

int svc_oom_peek(void) { return oom_mark; }

int svc_oom_take(void) {
  int m = oom_mark;
  oom_mark = 0;
  return m;
}

void *svc_pb_new(const ProtobufCMessageDescriptor *d) {
  void *m = dbx_calloc(1, d->sizeof_message);
  if (m == NULL) {
    svc_oom_mark();
    return NULL;
  }
  d->message_init((ProtobufCMessage *)m);
  return m;
}

ProtobufCMessage *svc_pb_clone(const ProtobufCMessage *m) {
  ProtobufCMessage *c = dbx_pb_clone(m);
  if (c == NULL && m != NULL) svc_oom_mark();
  return c;
}

/* protobuf-c's allocator through dbx_malloc that remembers a failed
 * allocation, so a NULL from unpack tells OOM from malformed bytes. */
static void *unpack_alloc(void *ud, size_t n) {
  void *p = dbx_malloc(n ? n : 1);
  if (p == NULL) *(int *)ud = 1;
  return p;
}

static void unpack_free(void *ud, void *p) {
  (void)ud;
  dbx_free(p);
}

dbx_err svc_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n, void **out) {
  int oom = 0;
  ProtobufCAllocator a = {unpack_alloc, unpack_free, &oom};
  *out = protobuf_c_message_unpack(d, &a, n, p);
  if (*out) return DBX_OK;
  if (oom) svc_oom_mark();
  return oom ? DBX_ENOMEM : DBX_EINVAL;
}

/* DBX_ESTORE for stored bytes that do not decode, DBX_ENOMEM on OOM. */
static dbx_err unpack_stored(const ProtobufCMessageDescriptor *d, const dbx_val *v, void **out) {
  dbx_err rc = svc_pb_unpack(d, v->data, v->size, out);
  return rc == DBX_EINVAL ? DBX_ESTORE : rc;
}

char *svc_pb_strdup(const char *s) {
  char *d = dbx_strdup(s ? s : "");
  if (d == NULL) svc_oom_mark();
  return d;
}

void svc_pb_setstr(char **field, const char *v) {
  char *n = svc_pb_strdup(v);
  if (n == NULL) return; /* keep the old value on OOM */
  if (*field && *field != (char *)protobuf_c_empty_string) free(*field);
  *field = n;
}

Duration *svc_duration_new_ms(int64_t ms) {
  Duration *d = svc_pb_new(&Duration__D);
  if (d) dbx_pb_duration_init_ms(d, ms);
  return d;
}

Timestamp *svc_timestamp_new_ns(int64_t ns) {
  Timestamp *t = svc_pb_new(&Timestamp__D);
  if (t) dbx_pb_timestamp_init_ns(t, ns);
  return t;
}

/* EventType -> the HistoryEvent oneof member carrying its attributes,
 * found by name: EVENT_TYPE_FOO_BAR -> foo_bar_event_attributes. Filled on
 * first use; only the engine thread (and single-threaded tests) call it. */
static const ProtobufCFieldDescriptor *attr_field_for(int type) {
  static const ProtobufCFieldDescriptor *cache[128];
  static int filled[128];
  if (type <= 0 || type >= 128) return NULL;
  if (!filled[type]) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__event_type__descriptor, type);
    if (v) {
      char name[160];
      const char *n = v->name;
      if (strncmp(n, "EVENT_TYPE_", 11) == 0) n += 11;
      size_t i = 0;
      for (; n[i] && i < sizeof name - 20; i++) name[i] = (char)(n[i] >= 'A' && n[i] <= 'Z' ? n[i] + 32 : n[i]);
      strcpy(name + i, "_event_attributes");
      cache[type] = protobuf_c_message_descriptor_get_field_by_name(&HistoryEvent__D, name);
    }
    filled[type] = 1;
  }
  return cache[type];
}

HistoryEvent *svc_event_new(int type) {
  HistoryEvent *ev = svc_pb_new(&HistoryEvent__D);
  if (ev == NULL) return NULL;
  ev->event_type = type;
  const ProtobufCFieldDescriptor *f = attr_field_for(type);
  if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
    void *attrs = svc_pb_new((const ProtobufCMessageDescriptor *)f->descriptor);
    if (attrs == NULL) {
      free(ev);
      return NULL;
    }
    *(void **)((char *)ev + f->offset) = attrs;
    *(uint32_t *)((char *)ev + f->quantifier_offset) = f->id;
  }
  return ev;
}

void svc_history_event_free(HistoryEvent *ev) {
  if (ev) protobuf_c_message_free_unpacked(&ev->base, NULL);
}

void svc_runstate_free(RunState *rs) {
  if (rs) protobuf_c_message_free_unpacked(&rs->base, NULL);
}

RunState *svc_runstate_new(void) { return svc_pb_new(&RunState__D); }

size_t svc_pb_varint(uint8_t *out, uint64_t v) {
  size_t n = 0;
  do {
    uint8_t b = (uint8_t)(v & 0x7f);
    v >>= 7;
    out[n++] = v ? (uint8_t)(b | 0x80) : b;
  } while (v);
  return n;
}

/* ------------------------------------------------------------ keys */

static char *join_key(size_t *len, int n, const char **parts) {
  size_t total = 0;
  for (int i = 0; i < n; i++) total += strlen(parts[i]) + (i ? 1 : 0);
  char *k = dbx_malloc(total + 1);
  if (k == NULL) return NULL;
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    if (i) k[off++] = '\0';
    size_t l = strlen(parts[i]);
    memcpy(k + off, parts[i], l);
    off += l;
  }
  *len = off;
  return k;
}

char *svc_run_key(const char *ns, const char *wfid, const char *run_id, size_t *len) {
  const char *p[3] = {ns, wfid, run_id};
  return join_key(len, 3, p);
}

char *svc_exec_key(const char *ns, const char *wfid, size_t *len) {
  const char *p[2] = {ns, wfid};
  return join_key(len, 2, p);
}

char *svc_queue_key(const char *ns, const char *tq, int kind, size_t *len) {
  const char *kinds = kind == TASK_WORKFLOW ? "W" : "A";
  const char *p[3] = {ns, tq, kinds};
  return join_key(len, 3, p);
}

static void be64(uint8_t *p, uint64_t v) {
  for (int i = 7; i >= 0; i--) {
    p[i] = (uint8_t)v;
    v >>= 8;
  }
}

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return v;
}

uint64_t svc_next_seq(ectx *c) {
  if (!c->seq_loaded) {
    dbx_val v;
    c->seq_next = 1;
    if (dbx_store_get(c->txn, c->svc->t_meta, "seq", 3, &v) == DBX_OK && v.size == 8)
      c->seq_next = rd64(v.data);
    c->seq_loaded = 1;
  }
  return c->seq_next++;
}

dbx_err svc_seq_save(ectx *c) {
  if (!c->seq_loaded) return DBX_OK;
  uint8_t b[8];
  be64(b, c->seq_next);
  return dbx_store_put(c->txn, c->svc->t_meta, "seq", 3, b, 8);
}

/* ------------------------------------------------------------ runs */

static dbx_err put_msg(ectx *c, dbx_table t, const void *k, size_t kl, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t stackbuf[1024];
  uint8_t *buf = n <= sizeof stackbuf ? stackbuf : dbx_malloc(n);
  if (buf == NULL) return DBX_ENOMEM;
  protobuf_c_message_pack(m, buf);
  dbx_err rc = dbx_store_put(c->txn, t, k, kl, buf, n);
  if (buf != stackbuf) free(buf);
  return rc;
}

dbx_err svc_run_load(ectx *c, const char *ns, const char *wfid, const char *run_id, RunState **out) {
  *out = NULL;
  size_t kl;
  char *k = svc_run_key(ns, wfid, run_id, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_val v;
  dbx_err rc = dbx_store_get(c->txn, c->svc->t_runs, k, kl, &v);
  free(k);
  if (rc != DBX_OK) return rc;
  return unpack_stored(&RunState__D, &v, (void **)out);
}

dbx_err svc_current_run_id(ectx *c, const char *ns, const char *wfid, char **out) {
  *out = NULL;
  size_t kl;
  char *k = svc_exec_key(ns, wfid, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_val v;
  dbx_err rc = dbx_store_get(c->txn, c->svc->t_execs, k, kl, &v);
  free(k);
  if (rc != DBX_OK) return rc;
  ExecutionRecord *er = NULL;
  rc = unpack_stored(&ExecutionRecord__D, &v, (void **)&er);
  if (rc != DBX_OK) return rc;
  *out = dbx_strdup(er->current_run_id);
  protobuf_c_message_free_unpacked(&er->base, NULL);
  return *out ? DBX_OK : DBX_ENOMEM;
}

dbx_err svc_run_save(ectx *c, RunState *rs) {
  if (svc_oom_peek()) return DBX_ENOMEM; /* rs may miss a field: never stored */
  rs->state_transition_count++;
  size_t kl;
  char *k = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_err rc = put_msg(c, c->svc->t_runs, k, kl, &rs->base);
  free(k);
  return rc;
}

static dbx_err exec_set_current(ectx *c, const char *ns, const char *wfid, const char *run_id) {
  ExecutionRecord er = INIT(DURABOX__SERVICE__V1__EXECUTION_RECORD);
  er.current_run_id = (char *)run_id;
  size_t kl;
  char *k = svc_exec_key(ns, wfid, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_err rc = put_msg(c, c->svc->t_execs, k, kl, &er.base);
  free(k);
  return rc;
}

/* ------------------------------------------------------------ events */

static dbx_err event_write(ectx *c, RunState *rs, HistoryEvent *ev) {
  ev->event_id = rs->next_event_id++;
  if (ev->event_time == NULL) {
    ev->event_time = svc_timestamp_new_ns(c->now_ns);
    if (ev->event_time == NULL) return DBX_ENOMEM;
  }
  if (ev->task_id == 0) ev->task_id = ev->event_id;
  uint8_t k[16];
  be64(k, rs->run_seq);
  be64(k + 8, (uint64_t)ev->event_id);
  size_t n = protobuf_c_message_get_packed_size(&ev->base);
  rs->history_size_bytes += (int64_t)n;
  dbx_err rc = put_msg(c, c->svc->t_history, k, sizeof k, &ev->base);
  return rc;
}

/* Write ev (assigning id and time) and note the run for its waiters; the
 * state is not touched beyond the event counters. */
static dbx_err event_store(ectx *c, RunState *rs, HistoryEvent *ev) {
  dbx_err rc = event_write(c, rs, ev);
  if (rc == DBX_OK) {
    size_t kl;
    char *k = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &kl);
    note *n = k ? svc_note_new(c, NOTE_RUN) : NULL;
    if (n == NULL) { /* the run's history waiters would sleep through this event */
      free(k);
      return DBX_ENOMEM;
    }
    n->key = k;
    n->len = kl;
  }
  return rc;
}

dbx_err svc_event_copy(ectx *c, RunState *rs, HistoryEvent *ev) {
  return svc_oom_peek() ? DBX_ENOMEM : event_store(c, rs, ev);
}

dbx_err svc_event_append(ectx *c, RunState *rs, HistoryEvent *ev, int buffer) {
  if (svc_oom_peek()) return DBX_ENOMEM; /* ev may miss a field: never written nor applied */
  if (buffer && rs->wft_started_event_id > 0) {
    /* the state changes now; the event is written when the task ends */
    dbx_err arc = svc_state_apply_event(rs, ev);
    if (arc != DBX_OK) return arc;
    size_t n = protobuf_c_message_get_packed_size(&ev->base);
    uint8_t *buf = dbx_malloc(n ? n : 1);
    ProtobufCBinaryData *arr = dbx_realloc(rs->buffered_events, (rs->n_buffered_events + 1) * sizeof *arr);
    if (buf == NULL || arr == NULL) {
      free(buf);
      if (arr) rs->buffered_events = arr;
      return DBX_ENOMEM;
    }
    protobuf_c_message_pack(&ev->base, buf);
    rs->buffered_events = arr;
    arr[rs->n_buffered_events].data = buf;
    arr[rs->n_buffered_events].len = n;
    rs->n_buffered_events++;
    return DBX_OK;
  }
  dbx_err rc = event_store(c, rs, ev);
  if (rc == DBX_OK) rc = svc_state_apply_event(rs, ev);
  return rc;
}

dbx_err svc_events_flush_buffer(ectx *c, RunState *rs, int *flushed) {
  *flushed = 0;
  size_t n = rs->n_buffered_events;
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *ev = NULL;
    dbx_val bv = {.data = rs->buffered_events[i].data, .size = rs->buffered_events[i].len};
    dbx_err urc = unpack_stored(&HistoryEvent__D, &bv, (void **)&ev);
    if (urc != DBX_OK) return urc;
    ev->event_id = 0;
    /* an activity's close event refers to its started event, written just before */
    int64_t *sid = NULL;
    switch (ev->attributes_case) {
    case HEV(ACTIVITY_TASK_COMPLETED): sid = &ev->activity_task_completed_event_attributes->started_event_id; break;
    case HEV(ACTIVITY_TASK_FAILED): sid = &ev->activity_task_failed_event_attributes->started_event_id; break;
    case HEV(ACTIVITY_TASK_TIMED_OUT): sid = &ev->activity_task_timed_out_event_attributes->started_event_id; break;
    case HEV(ACTIVITY_TASK_CANCELED): sid = &ev->activity_task_canceled_event_attributes->started_event_id; break;
    default: break;
    }
    if (sid && *sid == -1) *sid = rs->next_event_id - 1;
    dbx_err rc = event_store(c, rs, ev); /* applied to the state when it was buffered */
    svc_history_event_free(ev);
    if (rc != DBX_OK) return rc;
  }
  for (size_t i = 0; i < n; i++) free(rs->buffered_events[i].data);
  free(rs->buffered_events);
  rs->buffered_events = NULL;
  rs->n_buffered_events = 0;
  *flushed = (int)n;
  return DBX_OK;
}

/* A walk over the stored events of one run (key: run seq, event id), from
 * event `from` on. hist_next gives each event's id and packed bytes (valid
 * until the next call) and DBX_ENOTFOUND past the run's last event. */
typedef struct {
  dbx_cursor *cur;
  uint8_t k[16];
  int started;
} hist_iter;

static dbx_err hist_open(ectx *c, uint64_t run_seq, int64_t from, hist_iter *it) {
  memset(it, 0, sizeof *it);
  be64(it->k, run_seq);
  be64(it->k + 8, (uint64_t)(from < 1 ? 1 : from));
  return dbx_store_cursor_open(c->txn, c->svc->t_history, &it->cur);
}

static dbx_err hist_next(hist_iter *it, int64_t *id, dbx_val *ev) {
  dbx_val kv;
  dbx_err rc = it->started ? dbx_store_cursor_next(it->cur, &kv, ev)
                           : dbx_store_cursor_seek(it->cur, it->k, sizeof it->k, &kv, ev);
  it->started = 1;
  if (rc != DBX_OK) return rc;
  if (kv.size != 16 || memcmp(kv.data, it->k, 8) != 0) return DBX_ENOTFOUND;
  *id = (int64_t)rd64((const uint8_t *)kv.data + 8);
  return DBX_OK;
}

dbx_err svc_events_load(ectx *c, uint64_t run_seq, int64_t from, int64_t to, HistoryEvent ***out,
                        size_t *n, size_t max_bytes) {
  *out = NULL;
  *n = 0;
  hist_iter it;
  dbx_err rc = hist_open(c, run_seq, from, &it);
  if (rc != DBX_OK) return rc;
  dbx_val vv;
  int64_t id;
  size_t cap = 0, bytes = 0;
  HistoryEvent **arr = NULL;
  for (rc = hist_next(&it, &id, &vv); rc == DBX_OK; rc = hist_next(&it, &id, &vv)) {
    if (to > 0 && id >= to) break;
    if (max_bytes && *n > 0 && bytes + vv.size > max_bytes) break;
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      HistoryEvent **na = dbx_realloc(arr, nc * sizeof *na);
      if (na == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      arr = na;
      cap = nc;
    }
    HistoryEvent *ev = NULL;
    rc = unpack_stored(&HistoryEvent__D, &vv, (void **)&ev);
    if (rc != DBX_OK) goto out;
    arr[(*n)++] = ev;
    bytes += vv.size;
  }
  rc = DBX_OK;
out:
  dbx_store_cursor_close(it.cur);
  if (rc != DBX_OK) {
    svc_events_free(arr, *n);
    arr = NULL;
    *n = 0;
  }
  *out = arr;
  return rc;
}

void svc_events_free(HistoryEvent **evs, size_t n) {
  for (size_t i = 0; i < n; i++) svc_history_event_free(evs[i]);
  free(evs);
}

dbx_err svc_event_load_one(ectx *c, uint64_t run_seq, int64_t id, HistoryEvent **out) {
  uint8_t k[16];
  be64(k, run_seq);
  be64(k + 8, (uint64_t)id);
  dbx_val v;
  *out = NULL;
  dbx_err rc = dbx_store_get(c->txn, c->svc->t_history, k, sizeof k, &v);
  if (rc != DBX_OK) return rc;
  return unpack_stored(&HistoryEvent__D, &v, (void **)out);
}

/* ------------------------------------------------------------ tasks and timers */

dbx_err svc_task_enqueue(ectx *c, const char *ns, const char *tq, int kind, const char *wfid,
                         const char *run_id, int64_t scheduled_event_id, int32_t attempt) {
  size_t pl;
  char *prefix = svc_queue_key(ns, tq, kind, &pl);
  if (prefix == NULL) return DBX_ENOMEM;
  char *k = dbx_malloc(pl + 9);
  if (k == NULL) {
    free(prefix);
    return DBX_ENOMEM;
  }
  memcpy(k, prefix, pl);
  k[pl] = '\0';
  be64((uint8_t *)k + pl + 1, svc_next_seq(c));
  TaskRecord tr = INIT(DURABOX__SERVICE__V1__TASK_RECORD);
  tr.kind = kind;
  tr.workflow_id = (char *)wfid;
  tr.run_id = (char *)run_id;
  tr.scheduled_event_id = scheduled_event_id;
  tr.attempt = attempt;
  dbx_err rc = put_msg(c, c->svc->t_tasks, k, pl + 9, &tr.base);
  free(k);
  if (rc == DBX_OK) {
    note *n = svc_note_new(c, NOTE_TASK);
    if (n) {
      n->key = prefix;
      n->len = pl;
      prefix = NULL;
    }
  }
  free(prefix);
  return rc;
}

dbx_err svc_timer_add(ectx *c, int64_t fire_ns, int kind, RunState *rs, int64_t event_id, int32_t attempt,
                      const char *timer_id) {
  uint8_t k[16];
  be64(k, (uint64_t)(fire_ns < 0 ? 0 : fire_ns));
  be64(k + 8, svc_next_seq(c));
  TimerRecord tr = INIT(DURABOX__SERVICE__V1__TIMER_RECORD);
  tr.kind = kind;
  tr.namespace_ = rs->namespace_;
  tr.workflow_id = rs->workflow_id;
  tr.run_id = rs->run_id;
  tr.event_id = event_id;
  tr.attempt = attempt;
  tr.timer_id = (char *)(timer_id ? timer_id : "");
  /* the engine re-reads the earliest timer after every commit */
  return put_msg(c, c->svc->t_timers, k, sizeof k, &tr.base);
}

/* ------------------------------------------------------------ lookups */

ActivityInfo *svc_activity_find(RunState *rs, int64_t id) {
  for (size_t i = 0; i < rs->n_activities; i++)
    if (rs->activities[i]->scheduled_event_id == id) return rs->activities[i];
  return NULL;
}

void svc_activity_remove(RunState *rs, int64_t id) {
  for (size_t i = 0; i < rs->n_activities; i++) {
    if (rs->activities[i]->scheduled_event_id == id) {
      protobuf_c_message_free_unpacked(&rs->activities[i]->base, NULL);
      memmove(rs->activities + i, rs->activities + i + 1, (rs->n_activities - i - 1) * sizeof *rs->activities);
      rs->n_activities--;
      return;
    }
  }
}

TimerInfo *svc_timer_find(RunState *rs, const char *id) {
  for (size_t i = 0; i < rs->n_timers; i++)
    if (strcmp(rs->timers[i]->timer_id, id) == 0) return rs->timers[i];
  return NULL;
}

void svc_timer_remove(RunState *rs, const char *id) {
  for (size_t i = 0; i < rs->n_timers; i++) {
    if (strcmp(rs->timers[i]->timer_id, id) == 0) {
      protobuf_c_message_free_unpacked(&rs->timers[i]->base, NULL);
      memmove(rs->timers + i, rs->timers + i + 1, (rs->n_timers - i - 1) * sizeof *rs->timers);
      rs->n_timers--;
      return;
    }
  }
}

ChildInfo *svc_child_find(RunState *rs, int64_t id) {
  for (size_t i = 0; i < rs->n_children; i++)
    if (rs->children[i]->initiated_event_id == id) return rs->children[i];
  return NULL;
}

void svc_child_remove(RunState *rs, int64_t id) {
  for (size_t i = 0; i < rs->n_children; i++) {
    if (rs->children[i]->initiated_event_id == id) {
      protobuf_c_message_free_unpacked(&rs->children[i]->base, NULL);
      memmove(rs->children + i, rs->children + i + 1, (rs->n_children - i - 1) * sizeof *rs->children);
      rs->n_children--;
      return;
    }
  }
}

/* ------------------------------------------------------------ workflow tasks */

static int64_t wft_backoff_ms(int attempt) {
  /* attempts 1 and 2 go at once; then 1 s, 2 s, 4 s ... up to 60 s, so a
   * workflow whose code keeps failing does not spin a worker. */
  if (attempt <= 2) return 0;
  int64_t ms = 1000;
  for (int i = 3; i < attempt && ms < 60000; i++) ms *= 2;
  return ms > 60000 ? 60000 : ms;
}

dbx_err svc_wft_schedule(ectx *c, RunState *rs) {
  if (rs->status != WS(RUNNING)) return DBX_OK;
  if (rs->wft_scheduled_event_id != 0) return DBX_OK; /* pending: it will see the new events */
  if (rs->wft_attempt < 1) rs->wft_attempt = 1;
  int64_t backoff = wft_backoff_ms(rs->wft_attempt);
  if (backoff > 0 && rs->wft_backoff_until_ns == 0) {
    rs->wft_backoff_until_ns = c->now_ns + backoff * 1000000;
    return svc_timer_add(c, rs->wft_backoff_until_ns, TK_WFT_RETRY, rs, 0, rs->wft_attempt, NULL);
  }
  if (rs->wft_backoff_until_ns > c->now_ns) return DBX_OK; /* the retry timer will schedule it */
  rs->wft_backoff_until_ns = 0;
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_SCHEDULED));
  if (ev == NULL) return DBX_ENOMEM;
  WorkflowTaskScheduledEventAttributes *a = ev->workflow_task_scheduled_event_attributes;
  a->task_queue = svc_pb_new(&TaskQueue__D);
  a->start_to_close_timeout = svc_duration_new_ms(rs->task_timeout_ms);
  a->attempt = rs->wft_attempt;
  dbx_err rc = DBX_ENOMEM;
  /* sticky execution: the task goes to the queue of the worker that holds
   * the run, while that worker polls (matching.c) */
  rs->wft_sticky = rs->sticky_task_queue[0] && svc_sticky_available(c, rs->namespace_, rs->sticky_task_queue);
  const char *tq = rs->wft_sticky ? rs->sticky_task_queue : rs->task_queue;
  if (a->task_queue && a->start_to_close_timeout) {
    a->task_queue->name = svc_pb_strdup(tq);
    a->task_queue->kind = rs->wft_sticky ? TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY
                                         : TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    if (rs->wft_sticky) a->task_queue->normal_name = svc_pb_strdup(rs->task_queue);
    rc = svc_event_append(c, rs, ev, 0);
  }
  if (rc == DBX_OK)
    rc = svc_task_enqueue(c, rs->namespace_, tq, TASK_WORKFLOW, rs->workflow_id, rs->run_id, ev->event_id,
                          rs->wft_attempt);
  if (rc == DBX_OK && rs->wft_sticky)
    rc = svc_timer_add(c, c->now_ns + rs->sticky_s2s_timeout_ms * 1000000, TK_WFT_STICKY_SCHEDULE_TO_START, rs,
                       ev->event_id, rs->wft_attempt, NULL);
  svc_history_event_free(ev);
  return rc;
}

/* ------------------------------------------------------------ run start */

/* The root of rs's parent chain: its parent's root (the parent itself when
 * that is a root, or was stored without one), else rs itself. */
static dbx_err root_set(ectx *c, RunState *rs) {
  if (rs->parent == NULL || rs->parent->workflow_id[0] == '\0') {
    svc_pb_setstr(&rs->root_workflow_id, rs->workflow_id);
    svc_pb_setstr(&rs->root_run_id, rs->run_id);
    return svc_oom_peek() ? DBX_ENOMEM : DBX_OK;
  }
  RunState *p = NULL;
  dbx_err rc = svc_run_load(c, rs->parent->namespace_, rs->parent->workflow_id, rs->parent->run_id, &p);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  int has_root = p && p->root_workflow_id[0];
  svc_pb_setstr(&rs->root_workflow_id, has_root ? p->root_workflow_id : rs->parent->workflow_id);
  svc_pb_setstr(&rs->root_run_id, has_root ? p->root_run_id : rs->parent->run_id);
  svc_runstate_free(p);
  return svc_oom_peek() ? DBX_ENOMEM : DBX_OK;
}

/* A run's timeout or backoff in ms, at most MAX_TIMEOUT_MS: the start
 * request is checked (lifecycle.c), but continue-as-new and child commands
 * carry their own durations, and every one is added to a ns clock below. */
static int64_t run_timeout_ms(const Duration *d) {
  int64_t ms = dbx_pb_duration_ms(d);
  return ms > MAX_TIMEOUT_MS ? MAX_TIMEOUT_MS : ms;
}

dbx_err svc_run_start(ectx *c, const run_start_args *a, RunState **out) {
  *out = NULL;
  WorkflowExecutionStartedEventAttributes *st = a->started;
  RunState *rs = svc_runstate_new();
  if (rs == NULL) return DBX_ENOMEM;
  dbx_err rc = DBX_ENOMEM;
  svc_pb_setstr(&rs->namespace_, a->ns);
  svc_pb_setstr(&rs->workflow_id, a->workflow_id);
  svc_pb_setstr(&rs->run_id, a->run_id);
  svc_pb_setstr(&rs->first_run_id, a->first_run_id ? a->first_run_id : a->run_id);
  svc_pb_setstr(&rs->workflow_type, st->workflow_type ? st->workflow_type->name : "");
  svc_pb_setstr(&rs->task_queue, st->task_queue ? st->task_queue->name : "");
  svc_pb_setstr(&rs->start_request_id, a->request_id ? a->request_id : "");
  rs->run_seq = svc_next_seq(c);
  rs->status = WS(RUNNING);
  rs->next_event_id = 1;
  rs->start_time_ns = c->now_ns;
  int64_t backoff_ms = run_timeout_ms(st->first_workflow_task_backoff);
  rs->execution_time_ns = c->now_ns + (backoff_ms > 0 ? backoff_ms * 1000000 : 0);
  rs->run_timeout_ms = run_timeout_ms(st->workflow_run_timeout);
  rs->execution_timeout_ms = run_timeout_ms(st->workflow_execution_timeout);
  rs->task_timeout_ms = run_timeout_ms(st->workflow_task_timeout);
  if (rs->task_timeout_ms <= 0) rs->task_timeout_ms = 10000;
  rs->wft_attempt = 1;
  if (a->execution_expiration_ns > 0)
    rs->execution_expiration_ns = a->execution_expiration_ns;
  else if (rs->execution_timeout_ms > 0)
    rs->execution_expiration_ns = c->now_ns + rs->execution_timeout_ms * 1000000;
  if (a->parent) {
    rs->parent = PB_CLONE(ParentInfo, a->parent);
    if (rs->parent == NULL) goto out;
  }
  rc = root_set(c, rs);
  if (rc != DBX_OK) goto out;
  rc = DBX_ENOMEM;
  if (st->memo) {
    size_t n = protobuf_c_message_get_packed_size(&st->memo->base);
    rs->memo.data = dbx_malloc(n ? n : 1);
    if (rs->memo.data == NULL) goto out;
    protobuf_c_message_pack(&st->memo->base, rs->memo.data);
    rs->memo.len = n;
  }
  if (st->search_attributes) {
    size_t n = protobuf_c_message_get_packed_size(&st->search_attributes->base);
    rs->search_attributes.data = dbx_malloc(n ? n : 1);
    if (rs->search_attributes.data == NULL) goto out;
    protobuf_c_message_pack(&st->search_attributes->base, rs->search_attributes.data);
    rs->search_attributes.len = n;
  }
  if (rs->workflow_id[0] == '\0' || rs->run_id[0] == '\0' || rs->namespace_[0] == '\0') goto out;

  /* WorkflowExecutionStarted, from a copy of the caller's attributes */
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
  if (ev == NULL) goto out;
  protobuf_c_message_free_unpacked(&ev->workflow_execution_started_event_attributes->base, NULL);
  ev->workflow_execution_started_event_attributes = PB_CLONE(WorkflowExecutionStartedEventAttributes, st);
  if (ev->workflow_execution_started_event_attributes == NULL) {
    ev->attributes_case = 0;
    svc_history_event_free(ev);
    goto out;
  }
  WorkflowExecutionStartedEventAttributes *sa = ev->workflow_execution_started_event_attributes;
  svc_pb_setstr(&sa->original_execution_run_id, a->run_id);
  svc_pb_setstr(&sa->first_execution_run_id, rs->first_run_id);
  svc_pb_setstr(&sa->workflow_id, a->workflow_id);
  if (sa->attempt < 1) sa->attempt = 1;
  if (sa->workflow_task_timeout == NULL) sa->workflow_task_timeout = svc_duration_new_ms(rs->task_timeout_ms);
  if (rs->execution_expiration_ns > 0 && sa->workflow_execution_expiration_time == NULL)
    sa->workflow_execution_expiration_time = svc_timestamp_new_ns(rs->execution_expiration_ns);
  rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev);
  if (rc != DBX_OK) goto out;
  if (a->after_started) {
    rc = svc_event_append(c, rs, a->after_started, 0);
    if (rc != DBX_OK) goto out;
  }
  if (rs->run_timeout_ms > 0) {
    rc = svc_timer_add(c, c->now_ns + rs->run_timeout_ms * 1000000, TK_WORKFLOW_RUN_TIMEOUT, rs, 0, 0, NULL);
    if (rc != DBX_OK) goto out;
  }
  if (rs->execution_expiration_ns > 0) {
    rc = svc_timer_add(c, rs->execution_expiration_ns, TK_WORKFLOW_EXECUTION_TIMEOUT, rs, 0, 0, NULL);
    if (rc != DBX_OK) goto out;
  }
  if (!a->skip_first_wft) {
    if (backoff_ms > 0) {
      rs->wft_backoff_until_ns = rs->execution_time_ns;
      rc = svc_timer_add(c, rs->execution_time_ns, TK_WFT_RETRY, rs, 0, 1, NULL);
    } else {
      rc = svc_wft_schedule(c, rs);
    }
    if (rc != DBX_OK) goto out;
  }
  rc = exec_set_current(c, a->ns, a->workflow_id, a->run_id);
  if (rc != DBX_OK) goto out;
  rc = svc_run_save(c, rs);
out:
  if (rc != DBX_OK) {
    svc_runstate_free(rs);
    return rc;
  }
  *out = rs;
  return DBX_OK;
}

/* ------------------------------------------------------------ run close */


static dbx_err notify_parent(ectx *c, RunState *rs, HistoryEvent *close_ev) {
  if (rs->parent == NULL || rs->parent->workflow_id[0] == '\0') return DBX_OK;
  RunState *p = NULL;
  dbx_err rc = svc_run_load(c, rs->parent->namespace_, rs->parent->workflow_id, rs->parent->run_id, &p);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  ChildInfo *ci = svc_child_find(p, rs->parent->initiated_event_id);
  if (p->status != WS(RUNNING) || ci == NULL) {
    svc_runstate_free(p);
    return DBX_OK;
  }
  int type = 0;
  switch (close_ev->event_type) {
  case ET(WORKFLOW_EXECUTION_COMPLETED): type = ET(CHILD_WORKFLOW_EXECUTION_COMPLETED); break;
  case ET(WORKFLOW_EXECUTION_FAILED): type = ET(CHILD_WORKFLOW_EXECUTION_FAILED); break;
  case ET(WORKFLOW_EXECUTION_CANCELED): type = ET(CHILD_WORKFLOW_EXECUTION_CANCELED); break;
  case ET(WORKFLOW_EXECUTION_TIMED_OUT): type = ET(CHILD_WORKFLOW_EXECUTION_TIMED_OUT); break;
  default: type = ET(CHILD_WORKFLOW_EXECUTION_TERMINATED); break;
  }
  HistoryEvent *ev = svc_event_new(type);
  rc = DBX_ENOMEM;
  if (ev == NULL) goto out;
  WorkflowExecution *we = svc_pb_new(&WorkflowExecution__D);
  WorkflowType *wt = svc_pb_new(&WorkflowType__D);
  if (we == NULL || wt == NULL) {
    free(we);
    free(wt);
    goto out;
  }
  we->workflow_id = svc_pb_strdup(rs->workflow_id);
  we->run_id = svc_pb_strdup(rs->run_id);
  wt->name = svc_pb_strdup(rs->workflow_type);
  switch (type) {
#define FILL(field)                                                                                \
  ev->field->namespace_ = svc_pb_strdup(rs->namespace_);                                               \
  ev->field->workflow_execution = we;                                                              \
  ev->field->workflow_type = wt;                                                                   \
  ev->field->initiated_event_id = ci->initiated_event_id;                                          \
  ev->field->started_event_id = ci->started_event_id;
  case ET(CHILD_WORKFLOW_EXECUTION_COMPLETED):
    FILL(child_workflow_execution_completed_event_attributes);
    ev->child_workflow_execution_completed_event_attributes->result =
        PB_CLONE(Payloads, close_ev->workflow_execution_completed_event_attributes->result);
    break;
  case ET(CHILD_WORKFLOW_EXECUTION_FAILED):
    FILL(child_workflow_execution_failed_event_attributes);
    ev->child_workflow_execution_failed_event_attributes->failure =
        PB_CLONE(Failure, close_ev->workflow_execution_failed_event_attributes->failure);
    ev->child_workflow_execution_failed_event_attributes->retry_state =
        close_ev->workflow_execution_failed_event_attributes->retry_state;
    break;
  case ET(CHILD_WORKFLOW_EXECUTION_CANCELED):
    FILL(child_workflow_execution_canceled_event_attributes);
    ev->child_workflow_execution_canceled_event_attributes->details =
        PB_CLONE(Payloads, close_ev->workflow_execution_canceled_event_attributes->details);
    break;
  case ET(CHILD_WORKFLOW_EXECUTION_TIMED_OUT):
    FILL(child_workflow_execution_timed_out_event_attributes);
    ev->child_workflow_execution_timed_out_event_attributes->retry_state = RS(TIMEOUT);
    break;
  default:
    FILL(child_workflow_execution_terminated_event_attributes);
    break;
#undef FILL
  }
  rc = svc_event_append(c, p, ev, 1); /* the child leaves p's pending children */
  if (rc == DBX_OK) rc = svc_wft_schedule(c, p);
  if (rc == DBX_OK) rc = svc_run_save(c, p);
out:
  svc_history_event_free(ev);
  svc_runstate_free(p);
  return rc;
}

dbx_err svc_run_close(ectx *c, RunState *rs, HistoryEvent *ev, int status) {
  /* A started workflow task ends with the run; buffered events are dropped as
   * Temporal drops them for a closed run, except that they stay readable: we
   * write them before the close event so nothing acknowledged is lost. */
  int flushed = 0;
  dbx_err rc = DBX_OK;
  if (rs->wft_started_event_id == 0) {
    rc = svc_events_flush_buffer(c, rs, &flushed);
    if (rc != DBX_OK) return rc;
  }
  /* the close event ends everything pending but children (mutable.c) */
  rc = svc_event_append(c, rs, ev, 0);
  if (rc != DBX_OK) return rc;
  rs->status = status;
  for (size_t i = 0; i < rs->n_buffered_events; i++) free(rs->buffered_events[i].data);
  free(rs->buffered_events);
  rs->buffered_events = NULL;
  rs->n_buffered_events = 0;
  rc = svc_run_save(c, rs);
  if (rc != DBX_OK) return rc;
  if (status != WS(CONTINUED_AS_NEW)) {
    rc = notify_parent(c, rs, ev);
    if (rc != DBX_OK) return rc;
  }
  /* Parent close policy: TERMINATE (default), REQUEST_CANCEL, ABANDON. */
  for (size_t i = 0; i < rs->n_children; i++) {
    ChildInfo *ci = rs->children[i];
    if (ci->started_event_id == 0) continue;
    if (ci->parent_close_policy == 2) continue; /* ABANDON */
    char *cur = NULL;
    if (svc_current_run_id(c, ci->namespace_, ci->workflow_id, &cur) != DBX_OK) continue;
    RunState *ch = NULL;
    rc = svc_run_load(c, ci->namespace_, ci->workflow_id, cur, &ch);
    free(cur);
    if (rc == DBX_ENOTFOUND) continue;
    if (rc != DBX_OK) return rc;
    if (ch->status == WS(RUNNING)) {
      if (ci->parent_close_policy == 3)
        rc = svc_child_request_cancel(c, ci->namespace_, ci->workflow_id);
      else
        rc = svc_run_terminate(c, ch, "by parent close policy", "durabox");
    }
    svc_runstate_free(ch);
    if (rc != DBX_OK) return rc;
  }
  return DBX_OK;
}

/* The body of a History message (repeated HistoryEvent events = 1) for events
 * [from, upto] (upto 0 = to the end), built from the stored packed events
 * without decoding them: each is "0x0a, varint length, bytes". Stops before
 * max_bytes (0 = no limit) but always includes at least one event. *last_id:
 * the last event included (from - 1 when none). *out: malloc'd (NULL when
 * empty); free(). */
dbx_err svc_history_encode(ectx *c, uint64_t run_seq, int64_t from, int64_t upto, size_t max_bytes, uint8_t **out,
                           size_t *len, int64_t *last_id) {
  *out = NULL;
  *len = 0;
  *last_id = from - 1;
  hist_iter it;
  dbx_err rc = hist_open(c, run_seq, from, &it);
  if (rc != DBX_OK) return rc;
  size_t cap = 0, n = 0;
  uint8_t *buf = NULL;
  dbx_val vv;
  int64_t id;
  for (rc = hist_next(&it, &id, &vv); rc == DBX_OK; rc = hist_next(&it, &id, &vv)) {
    if (upto > 0 && id > upto) break;
    size_t need = 1 + 10 + vv.size;
    if (max_bytes && n > 0 && n + need > max_bytes) break;
    if (n + need > cap) {
      size_t nc = cap ? cap * 2 : 4096;
      while (nc < n + need) nc *= 2;
      uint8_t *nb = dbx_realloc(buf, nc);
      if (nb == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      buf = nb;
      cap = nc;
    }
    buf[n++] = 0x0a; /* field 1, length-delimited */
    n += svc_pb_varint(buf + n, vv.size);
    memcpy(buf + n, vv.data, vv.size);
    n += vv.size;
    *last_id = id;
  }
  rc = DBX_OK;
out:
  dbx_store_cursor_close(it.cur);
  if (rc != DBX_OK) {
    free(buf);
    *last_id = from - 1;
    return rc;
  }
  *out = buf;
  *len = n;
  return DBX_OK;
}

/* ------------------------------------------------------------ run delete */

dbx_err svc_run_delete(ectx *c, RunState *rs) {
  uint8_t prefix[8];
  be64(prefix, rs->run_seq);
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_history, &cur);
  dbx_val k, v;
  if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, prefix, sizeof prefix, &k, &v);
  while (rc == DBX_OK && k.size >= sizeof prefix && memcmp(k.data, prefix, sizeof prefix) == 0) {
    rc = dbx_store_cursor_del(cur);
    if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, prefix, sizeof prefix, &k, &v);
  }
  dbx_store_cursor_close(cur);
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  size_t kl = 0;
  char *key = NULL;
  if (rc == DBX_OK) {
    key = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &kl);
    rc = key ? dbx_store_del(c->txn, c->svc->t_runs, key, kl) : DBX_ENOMEM;
    free(key);
  }
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  char *cur_id = NULL;
  dbx_err crc = rc == DBX_OK ? svc_current_run_id(c, rs->namespace_, rs->workflow_id, &cur_id) : DBX_ENOTFOUND;
  if (crc == DBX_OK && strcmp(cur_id, rs->run_id) == 0) {
    key = svc_exec_key(rs->namespace_, rs->workflow_id, &kl);
    rc = key ? dbx_store_del(c->txn, c->svc->t_execs, key, kl) : DBX_ENOMEM;
    free(key);
  } else if (crc != DBX_OK && crc != DBX_ENOTFOUND) {
    rc = crc;
  }
  free(cur_id);
  return rc;
}
