/* rpc server: gRPC core server with parked calls answered from any thread.
 *
 * One NEXT completion queue, drained by one thread this module owns. SLOTS
 * generic grpc_server_request_call()s stay armed so bursts are accepted. For
 * each new call the thread starts RECV_CLOSE_ON_SERVER (so a peer cancel or
 * deadline is seen while the call is parked) and RECV_MESSAGE; once the
 * message is in, on_call runs on this thread. The owner answers with one
 * send batch from any thread.
 *
 * Lifetime: a call context is reference counted under the server mutex.
 * References: one per pending batch (recv, close, send) plus the owner's, which
 * passes to the send batch when the answer starts. Whoever drops the last one
 * frees the context and unrefs the grpc_call, so answer-before-cancel,
 * cancel-before-answer and answers during shutdown all free exactly once.
 * Shutdown (gRPC's order): stop re-arming, shutdown_and_notify, cancel all
 * calls, wait for owners' answers (5 s) and the shutdown tag, destroy the
 * server, shut the queue down, join the thread, destroy the queue. */
#include "rpc/rpc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/util.h"

#define SLOTS 16
#define DEFAULT_MAX_MESSAGE ((size_t)128 << 20)
#define WFS_PREFIX "/temporal.api.workflowservice.v1.WorkflowService/"
#define DETAILS_KEY "grpc-status-details-bin"
#define OWNER_WAIT_NS ((int64_t)5000000000)
#define WARNED_PEERS 32
/* Keepalive policy (docs/service.md "Keepalive"): pings are accepted every
 * MIN_PING_MS or slower, with or without calls (Temporal's SDKs ping every
 * 30 s, 15 s timeout; Go clamps any client to 10 s at least); more than
 * PING_STRIKES pings closer together, while the server sends nothing, get
 * GOAWAY ENHANCE_YOUR_CALM "too_many_pings" from gRPC core and the
 * connection closes. */
#define MIN_PING_MS 5000
#define PING_STRIKES 2

enum tag_kind { TAG_NEW, TAG_RECV, TAG_CLOSE, TAG_SEND, TAG_SHUTDOWN };

typedef struct {
  enum tag_kind kind;
  void *obj;
} evtag;

typedef struct {
  evtag tag;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
} slot;

struct dbx_rpc_server {
  grpc_server *srv;
  grpc_completion_queue *cq;
  pthread_t thread;
  int thread_started;
  int port;
  dbx_rpc_handler_fn on_call;
  dbx_rpc_cancel_fn on_cancel;
  void *ud;
  char *bearer; /* "Bearer <key>" or NULL */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int shutting_down;
  int expect_drops; /* dbx_rpc_server_expect_drops */
  int shutdown_done; /* TAG_SHUTDOWN arrived */
  int live;          /* call contexts not yet freed */
  evtag sd_tag;
  slot slots[SLOTS];
  /* Peers (one per connection: the address includes the client's port)
   * already warned about a call that ended before its answer; under mu. */
  char *warned[WARNED_PEERS];
  size_t warned_next;
  /* Calls with an armed fallback answer (dbx_rpc_call_fallback), each
   * holding a reference; under mu. The fallback thread answers them. */
  struct dbx_rpc_call *fb_head;
  pthread_t fb_thread;
  int fb_started, fb_stop;
  int64_t fb_wake_at;   /* when the fallback thread wakes next (mono ns) */
  pthread_cond_t fb_cv; /* CLOCK_MONOTONIC */
};

struct dbx_rpc_call {
  dbx_rpc_server *s;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  evtag t_recv, t_close, t_send;
  /* Under s->mu. */
  int refs;
  int owned;    /* handed to on_call: owner must answer */
  int answered; /* an answer batch was started (or attempted) */
  int close_seen;
  atomic_int cancelled;
  /* Request, copied on the server thread before on_call. */
  char *method_full;
  const char *method; /* points into method_full */
  uint8_t *req;
  size_t req_len;
  int64_t deadline_mono_ns;
  size_t n_md;
  char **md_keys;
  char **md_vals;
  void *user;
  /* Batch buffers, alive until the batch completes. */
  grpc_byte_buffer *recv_bb;
  int close_cancelled;
  grpc_byte_buffer *send_bb;
  grpc_slice status_msg;
  grpc_metadata trailer;
  int has_trailer;
  /* A tracked answer (dbx_rpc_call_reply_tracked); under s->mu. */
  dbx_rpc_delivered_fn done_fn;
  void *done_arg;
  int send_done, send_ok, reported;
  /* An in-process call (dbx_rpc_call_local_new): no server, no gRPC call. */
  dbx_rpc_local_fn local_fn;
  void *local_arg;
  /* The fallback answer (dbx_rpc_call_fallback); under s->mu. */
  uint8_t *fb_msg;
  size_t fb_len;
  int64_t fb_at;
  int fb_armed;    /* in s->fb_head's list, holding a reference */
  atomic_int fb_answered; /* the fallback thread gave the answer (set under s->mu; read lock-free) */
  struct dbx_rpc_call *fb_prev, *fb_next;
};

/* The answer to an in-process call: to its callback, then freed. */
static void local_answer(dbx_rpc_call *c, int status, const char *message, const void *msg,
                         size_t msg_len, dbx_rpc_delivered_fn done_fn, void *done_arg) {
  c->local_fn(c->local_arg, status, message, msg, msg_len);
  if (done_fn) done_fn(done_arg, 1);
  free(c->method_full);
  free(c->req);
  free(c);
}

dbx_rpc_call *dbx_rpc_call_local_new(const char *method, const void *req, size_t len,
                                     int64_t deadline_mono_ns, dbx_rpc_local_fn fn, void *arg) {
  if (method == NULL || fn == NULL) return NULL;
  dbx_rpc_call *c = dbx_calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->method_full = dbx_asprintf("%s%s", WFS_PREFIX, method);
  c->req = dbx_malloc(len ? len : 1);
  if (c->method_full == NULL || c->req == NULL) {
    free(c->method_full);
    free(c->req);
    free(c);
    return NULL;
  }
  c->method = c->method_full + strlen(WFS_PREFIX);
  if (len) memcpy(c->req, req, len);
  c->req_len = len;
  c->deadline_mono_ns = deadline_mono_ns;
  c->owned = 1;
  c->local_fn = fn;
  c->local_arg = arg;
  return c;
}

/* ------------------------------------------------------------ call contexts */

static void call_free(dbx_rpc_call *c) {
  dbx_rpc_server *s = c->s;
  if (c->recv_bb) grpc_byte_buffer_destroy(c->recv_bb);
  if (c->send_bb) grpc_byte_buffer_destroy(c->send_bb);
  grpc_slice_unref(c->status_msg);
  if (c->has_trailer) {
    grpc_slice_unref(c->trailer.key);
    grpc_slice_unref(c->trailer.value);
  }
  grpc_call_unref(c->call);
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->md);
  for (size_t i = 0; i < c->n_md; i++) {
    free(c->md_keys[i]);
    free(c->md_vals[i]);
  }
  free(c->md_keys);
  free(c->md_vals);
  free(c->method_full);
  free(c->req);
  free(c);
  pthread_mutex_lock(&s->mu);
  s->live--;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void call_unref(dbx_rpc_call *c) {
  dbx_rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  int last = --c->refs == 0;
  pthread_mutex_unlock(&s->mu);
  if (last) call_free(c);
}

/* A tracked answer reports once both its send and the call's close are in
 * (either order). Called on the thread that saw the last of them, while it
 * still holds its reference. */
static void call_report(dbx_rpc_call *c) {
  dbx_rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  int now = c->done_fn != NULL && !c->reported && c->send_done && c->close_seen;
  if (now) c->reported = 1;
  int delivered = c->send_ok && !atomic_load(&c->cancelled);
  pthread_mutex_unlock(&s->mu);
  if (now) c->done_fn(c->done_arg, delivered);
}

static void on_send(dbx_rpc_call *c, int success) {
  dbx_rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  c->send_done = 1;
  c->send_ok = success;
  pthread_mutex_unlock(&s->mu);
  call_report(c);
  call_unref(c);
}

static void call_send(dbx_rpc_call *c, int status, const char *message, const void *msg, size_t msg_len,
                      int with_msg, const void *details, size_t details_len);

static void *fb_main(void *arg);

/* Unlinks c from the fallback list (under s->mu). */
static void fb_unlink(dbx_rpc_server *s, dbx_rpc_call *c) {
  if (c->fb_prev)
    c->fb_prev->fb_next = c->fb_next;
  else
    s->fb_head = c->fb_next;
  if (c->fb_next) c->fb_next->fb_prev = c->fb_prev;
  c->fb_prev = c->fb_next = NULL;
  c->fb_armed = 0;
}

/* Starts the one answer batch. The caller's reference passes to the batch;
 * if the batch cannot start, it is dropped here. */
static void call_answer(dbx_rpc_call *c, int status, const char *message, const void *msg,
                        size_t msg_len, int with_msg, const void *details, size_t details_len,
                        dbx_rpc_delivered_fn done_fn, void *done_arg) {
  if (c->local_fn) {
    local_answer(c, status, message, with_msg ? msg : NULL, with_msg ? msg_len : 0, done_fn,
                 done_arg);
    return;
  }
  dbx_rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  int again = c->answered, by_fallback = atomic_load(&c->fb_answered);
  c->answered = 1;
  if (!again) {
    c->done_fn = done_fn;
    c->done_arg = done_arg;
  }
  uint8_t *fb_msg = NULL;
  int fb_drop = !again && c->fb_armed;
  if (fb_drop) {
    fb_unlink(s, c);
    fb_msg = c->fb_msg;
    c->fb_msg = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  if (fb_drop) {
    free(fb_msg);
    call_unref(c); /* the fallback's reference; the owner's still holds it */
  }
  if (again) {
    if (by_fallback) { /* the fallback answered in time: this one only releases the call */
      if (done_fn) done_fn(done_arg, 0);
      call_unref(c);
      return;
    }
    DBX_ERROR("rpc", "call %s answered twice; second answer ignored", c->method_full);
    if (done_fn) done_fn(done_arg, 0);
    return;
  }
  call_send(c, status, message, msg, msg_len, with_msg, details, details_len);
}

/* Starts the answer batch (the caller's reference passes to it; dropped
 * here if the batch cannot start). */
static void call_send(dbx_rpc_call *c, int status, const char *message, const void *msg, size_t msg_len,
                      int with_msg, const void *details, size_t details_len) {
  dbx_rpc_server *s = c->s;
  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  n++;
  if (with_msg) {
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)msg, msg_len);
    c->send_bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->send_bb;
    n++;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)status;
  if (message != NULL && message[0] != '\0') {
    c->status_msg = grpc_slice_from_copied_string(message);
    ops[n].data.send_status_from_server.status_details = &c->status_msg;
  }
  if (details != NULL && details_len > 0) {
    c->trailer.key = grpc_slice_from_static_string(DETAILS_KEY);
    c->trailer.value = grpc_slice_from_copied_buffer((const char *)details, details_len);
    c->has_trailer = 1;
    ops[n].data.send_status_from_server.trailing_metadata_count = 1;
    ops[n].data.send_status_from_server.trailing_metadata = &c->trailer;
  }
  n++;
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->t_send, NULL);
  if (e != GRPC_CALL_OK) {
    DBX_WARN("rpc", "answer to %s not started: grpc_call_error %d", c->method_full, (int)e);
    pthread_mutex_lock(&s->mu);
    c->send_done = 1; /* send_ok 0: not delivered */
    pthread_mutex_unlock(&s->mu);
    call_report(c); /* the close batch still holds a reference, or was never started */
    call_unref(c);
  }
}

/* Answer that never reached the owner (auth failure, shutdown, lost request). */
static void call_answer_internal(dbx_rpc_call *c, int status, const char *message) {
  call_answer(c, status, message, NULL, 0, 0, NULL, 0, NULL, NULL);
}

static int64_t deadline_to_mono_ns(gpr_timespec d) {
  if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0) return INT64_MAX;
  gpr_timespec left = gpr_time_sub(d, gpr_now(d.clock_type));
  int64_t left_ns = (int64_t)left.tv_sec * 1000000000 + left.tv_nsec;
  return dbx_mono_ns() + left_ns;
}

/* Copies what the accessors need from a freshly accepted call. 0 or -1 (OOM). */
static int call_copy_request_info(dbx_rpc_call *c) {
  grpc_slice m = c->details.method;
  c->method_full = dbx_strndup((const char *)GRPC_SLICE_START_PTR(m), GRPC_SLICE_LENGTH(m));
  if (c->method_full == NULL) return -1;
  size_t plen = strlen(WFS_PREFIX);
  if (strncmp(c->method_full, WFS_PREFIX, plen) == 0 && c->method_full[plen] != '\0')
    c->method = c->method_full + plen;
  else
    c->method = c->method_full;
  c->deadline_mono_ns = deadline_to_mono_ns(c->details.deadline);
  size_t n = c->md.count;
  if (n > 0) {
    c->md_keys = dbx_calloc(n, sizeof *c->md_keys);
    c->md_vals = dbx_calloc(n, sizeof *c->md_vals);
    if (c->md_keys == NULL || c->md_vals == NULL) return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const grpc_metadata *e = &c->md.metadata[i];
    c->md_keys[i] =
        dbx_strndup((const char *)GRPC_SLICE_START_PTR(e->key), GRPC_SLICE_LENGTH(e->key));
    c->md_vals[i] =
        dbx_strndup((const char *)GRPC_SLICE_START_PTR(e->value), GRPC_SLICE_LENGTH(e->value));
    c->n_md = i + 1;
    if (c->md_keys[i] == NULL || c->md_vals[i] == NULL) return -1;
  }
  return 0;
}

static int call_authorized(const dbx_rpc_call *c) {
  if (c->s->bearer == NULL) return 1;
  const char *v = dbx_rpc_call_metadata(c, "authorization");
  return v != NULL && strcmp(v, c->s->bearer) == 0;
}

/* ------------------------------------------------------------ server thread */

static void slot_arm(dbx_rpc_server *s, slot *sl) {
  sl->call = NULL;
  grpc_call_details_init(&sl->details);
  grpc_metadata_array_init(&sl->md);
  grpc_call_error e =
      grpc_server_request_call(s->srv, &sl->call, &sl->details, &sl->md, s->cq, s->cq, &sl->tag);
  if (e != GRPC_CALL_OK) {
    DBX_ERROR("rpc", "grpc_server_request_call: grpc_call_error %d", (int)e);
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
    sl->tag.obj = NULL; /* not armed */
  }
}

static void on_new(dbx_rpc_server *s, slot *sl, int success) {
  if (!success || sl->call == NULL) {
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
    return; /* shutdown: not re-armed */
  }
  dbx_rpc_call *c = dbx_calloc(1, sizeof *c);
  if (c == NULL) {
    grpc_call_cancel_with_status(sl->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
    grpc_call_unref(sl->call);
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
  } else {
    c->s = s;
    c->call = sl->call;
    c->details = sl->details; /* ownership moves to the context */
    c->md = sl->md;
    c->status_msg = grpc_empty_slice();
    c->t_recv = (evtag){TAG_RECV, c};
    c->t_close = (evtag){TAG_CLOSE, c};
    c->t_send = (evtag){TAG_SEND, c};
    atomic_init(&c->cancelled, 0);
    pthread_mutex_lock(&s->mu);
    s->live++;
    int stopping = s->shutting_down;
    c->refs = 2; /* close batch + the answer to come */
    pthread_mutex_unlock(&s->mu);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) != GRPC_CALL_OK) {
      c->close_seen = 1;
      call_unref(c);
    }
    if (call_copy_request_info(c) != 0) {
      call_answer_internal(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else if (stopping) {
      call_answer_internal(c, GRPC_STATUS_UNAVAILABLE, "server shutting down");
    } else if (!call_authorized(c)) {
      call_answer_internal(c, GRPC_STATUS_UNAUTHENTICATED, "missing or invalid api key");
    } else {
      memset(&op, 0, sizeof op);
      op.op = GRPC_OP_RECV_MESSAGE;
      op.data.recv_message.recv_message = &c->recv_bb;
      pthread_mutex_lock(&s->mu);
      c->refs++;
      pthread_mutex_unlock(&s->mu);
      if (grpc_call_start_batch(c->call, &op, 1, &c->t_recv, NULL) != GRPC_CALL_OK) {
        call_unref(c);
        call_answer_internal(c, GRPC_STATUS_INTERNAL, "cannot read request");
      }
    }
  }
  pthread_mutex_lock(&s->mu);
  int stopping = s->shutting_down;
  pthread_mutex_unlock(&s->mu);
  if (!stopping) slot_arm(s, sl);
}

static void on_recv(dbx_rpc_call *c, int success) {
  dbx_rpc_server *s = c->s;
  int ok = success;
  if (ok && c->recv_bb != NULL) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, c->recv_bb)) {
      ok = 0;
    } else {
      grpc_slice all = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
      c->req_len = GRPC_SLICE_LENGTH(all);
      c->req = dbx_malloc(c->req_len ? c->req_len : 1);
      if (c->req != NULL) memcpy(c->req, GRPC_SLICE_START_PTR(all), c->req_len);
      grpc_slice_unref(all);
      if (c->req == NULL) ok = 0;
    }
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
  }
  pthread_mutex_lock(&s->mu);
  int lost = c->close_seen && atomic_load(&c->cancelled);
  if (ok && !lost) c->owned = 1;
  pthread_mutex_unlock(&s->mu);
  if (ok && !lost) {
    s->on_call(c, s->ud); /* the answer's reference now belongs to the owner */
  } else {
    call_answer_internal(c, GRPC_STATUS_CANCELLED, "request not received");
  }
  call_unref(c); /* the recv batch's reference */
}

/* A parked call ended before its answer and before its deadline: its client
 * cancelled it or its connection closed. gRPC core (1.51) tells neither
 * which, nor when it closed a connection itself for too many pings (GOAWAY
 * ENHANCE_YOUR_CALM "too_many_pings": it has no hook or log for the GOAWAY
 * it sends, short of its verbose "http" tracer), so this is what can be
 * observed: warned once per connection (peer address and port). */
static void warn_dropped(dbx_rpc_call *c) {
  dbx_rpc_server *s = c->s;
  if (c->deadline_mono_ns != INT64_MAX && dbx_mono_ns() >= c->deadline_mono_ns - 100000000) return; /* its deadline */
  char *peer = grpc_call_get_peer(c->call);
  if (peer == NULL) return;
  pthread_mutex_lock(&s->mu);
  int seen = 0;
  for (size_t i = 0; i < WARNED_PEERS && !seen; i++) seen = s->warned[i] && strcmp(s->warned[i], peer) == 0;
  char *copy = seen ? NULL : dbx_strdup(peer);
  if (copy) {
    free(s->warned[s->warned_next]);
    s->warned[s->warned_next] = copy;
    s->warned_next = (s->warned_next + 1) % WARNED_PEERS;
  }
  pthread_mutex_unlock(&s->mu);
  if (copy)
    DBX_WARN("rpc",
             "%s from %s ended before its answer: the client cancelled it or the connection closed (gRPC does "
             "not say which; a client that pings more often than every %d s while no data flows is sent GOAWAY "
             "too_many_pings after %d such pings); logged once per connection",
             c->method_full, peer, MIN_PING_MS / 1000, PING_STRIKES + 1);
  gpr_free(peer);
}

static void on_close(dbx_rpc_call *c) {
  dbx_rpc_server *s = c->s;
  pthread_mutex_lock(&s->mu);
  c->close_seen = 1;
  if (c->close_cancelled) atomic_store(&c->cancelled, 1);
  int notify = c->close_cancelled && c->owned && !c->answered && s->on_cancel != NULL;
  int dropped = c->close_cancelled && c->owned && !c->answered && !s->shutting_down && !s->expect_drops;
  pthread_mutex_unlock(&s->mu);
  if (dropped) warn_dropped(c);
  /* The close reference keeps c alive through on_cancel even if the owner
   * answers concurrently. */
  if (notify) s->on_cancel(c, s->ud);
  call_report(c);
  call_unref(c);
}

static void *server_main(void *arg) {
  dbx_rpc_server *s = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    evtag *t = ev.tag;
    switch (t->kind) {
    case TAG_NEW:
      on_new(s, t->obj, ev.success);
      break;
    case TAG_RECV:
      on_recv(t->obj, ev.success);
      break;
    case TAG_CLOSE:
      on_close(t->obj);
      break;
    case TAG_SEND:
      on_send(t->obj, ev.success);
      break;
    case TAG_SHUTDOWN:
      pthread_mutex_lock(&s->mu);
      s->shutdown_done = 1;
      pthread_cond_broadcast(&s->cv);
      pthread_mutex_unlock(&s->mu);
      break;
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ public API */

static void cq_drain_destroy(grpc_completion_queue *cq) {
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
}

/* 1 when something already listens on host:port (a plain bind probe, so the
 * caller can say why gRPC could not bind). */
static int port_in_use(const char *host, int port) {
  if (port <= 0) return 0;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL) return 0;
  int in_use = 0;
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    in_use = bind(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(res);
  return in_use;
}

dbx_err dbx_rpc_server_start(const dbx_rpc_server_opts *o, dbx_rpc_server **out,
                             const char **errmsg_out) {
  const char *dummy;
  if (errmsg_out == NULL) errmsg_out = &dummy;
  *errmsg_out = NULL;
  if (out == NULL || o == NULL || o->on_call == NULL || o->port < 0 || o->port > 65535 ||
      (o->tls_cert_pem == NULL) != (o->tls_key_pem == NULL)) {
    *errmsg_out = "invalid server options";
    return DBX_EINVAL;
  }
  *out = NULL;
  size_t max = o->max_message_bytes ? o->max_message_bytes : DEFAULT_MAX_MESSAGE;
  if (max > INT32_MAX) max = INT32_MAX;
  dbx_rpc_server *s = dbx_calloc(1, sizeof *s);
  if (s == NULL) return DBX_ENOMEM;
  s->on_call = o->on_call;
  s->on_cancel = o->on_cancel;
  s->ud = o->ud;
  if (o->api_key != NULL) {
    s->bearer = dbx_asprintf("Bearer %s", o->api_key);
    if (s->bearer == NULL) {
      free(s);
      return DBX_ENOMEM;
    }
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cv, &ca);
  pthread_cond_init(&s->fb_cv, &ca);
  pthread_condattr_destroy(&ca);
  s->sd_tag = (evtag){TAG_SHUTDOWN, s};

  grpc_arg a[] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = (int)max}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = (int)max}},
      /* the keepalive policy: see MIN_PING_MS */
      {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}},
      {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
       {.integer = MIN_PING_MS}},
      {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MAX_PING_STRIKES, {.integer = PING_STRIKES}},
      {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = 60000}},
      {GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = 20000}},
      /* gRPC sets SO_REUSEPORT by default: a second server on the same port would
       * silently take half the connections. Binding must fail instead. */
      {GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}},
  };
  grpc_channel_args args = {sizeof a / sizeof a[0], a};
  s->cq = grpc_completion_queue_create_for_next(NULL);
  s->srv = grpc_server_create(&args, NULL);
  grpc_server_register_completion_queue(s->srv, s->cq, NULL);

  grpc_server_credentials *creds;
  if (o->tls_cert_pem != NULL) {
    grpc_ssl_pem_key_cert_pair kp = {o->tls_key_pem, o->tls_cert_pem};
    creds = grpc_ssl_server_credentials_create(NULL, &kp, 1, 0, NULL);
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  const char *host = o->host ? o->host : "127.0.0.1";
  int v6 = strchr(host, ':') != NULL && host[0] != '[';
  char *addr = dbx_asprintf(v6 ? "[%s]:%d" : "%s:%d", host, o->port);
  s->port = (creds && addr) ? grpc_server_add_http2_port(s->srv, addr, creds) : 0;
  free(addr);
  if (creds) grpc_server_credentials_release(creds);
  if (s->port <= 0) {
    *errmsg_out = port_in_use(host, o->port) ? "address already in use (another server is listening there)"
                                              : "cannot bind the server address";
    grpc_server_destroy(s->srv);
    cq_drain_destroy(s->cq);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->fb_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->bearer);
    free(s);
    return DBX_EIO;
  }
  grpc_server_start(s->srv);
  for (int i = 0; i < SLOTS; i++) {
    s->slots[i].tag = (evtag){TAG_NEW, &s->slots[i]};
    slot_arm(s, &s->slots[i]);
  }
  if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
    *errmsg_out = "cannot start the server thread";
    /* Tear down on this thread instead: nothing has been handed out yet. */
    grpc_server_shutdown_and_notify(s->srv, s->cq, &s->sd_tag);
    grpc_server_cancel_all_calls(s->srv);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      evtag *t = ev.tag;
      if (t->kind == TAG_SHUTDOWN) break;
      if (t->kind == TAG_NEW) on_new(s, t->obj, 0);
    }
    grpc_server_destroy(s->srv);
    cq_drain_destroy(s->cq);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->fb_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->bearer);
    free(s);
    return DBX_EIO;
  }
  s->thread_started = 1;
  /* without it, parked polls are answered by their owner only */
  s->fb_started = pthread_create(&s->fb_thread, NULL, fb_main, s) == 0;
  if (!s->fb_started) DBX_WARN("rpc", "cannot start the fallback-answer thread");
  *out = s;
  return DBX_OK;
}

int dbx_rpc_server_port(const dbx_rpc_server *s) { return s ? s->port : 0; }

int dbx_rpc_server_live_calls(dbx_rpc_server *s) {
  if (s == NULL) return 0;
  pthread_mutex_lock(&s->mu);
  int n = s->live;
  pthread_mutex_unlock(&s->mu);
  return n;
}

void dbx_rpc_server_expect_drops(dbx_rpc_server *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  s->expect_drops = 1;
  pthread_mutex_unlock(&s->mu);
}

void dbx_rpc_server_destroy(dbx_rpc_server *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  s->shutting_down = 1;
  pthread_mutex_unlock(&s->mu);
  grpc_server_shutdown_and_notify(s->srv, s->cq, &s->sd_tag);
  grpc_server_cancel_all_calls(s->srv); /* parked calls: on_cancel, then owners answer */

  struct timespec until;
  int64_t end = dbx_mono_ns() + OWNER_WAIT_NS;
  until.tv_sec = end / 1000000000;
  until.tv_nsec = end % 1000000000;
  pthread_mutex_lock(&s->mu);
  while (s->live > 0) {
    if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) break;
  }
  int left = s->live;
  while (left == 0 && !s->shutdown_done) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  if (left > 0) {
    /* Owner contract broken: freeing now would let a late answer touch freed
     * memory, so the server is left running and leaked. */
    DBX_ERROR("rpc", "server destroy: %d call(s) never answered; server leaked", left);
    return;
  }
  if (s->fb_started) { /* no call is left, so none is armed */
    pthread_mutex_lock(&s->mu);
    s->fb_stop = 1;
    pthread_cond_signal(&s->fb_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->fb_thread, NULL);
  }
  grpc_server_destroy(s->srv);
  grpc_completion_queue_shutdown(s->cq);
  pthread_join(s->thread, NULL);
  grpc_completion_queue_destroy(s->cq);
  pthread_cond_destroy(&s->cv);
  pthread_cond_destroy(&s->fb_cv);
  pthread_mutex_destroy(&s->mu);
  for (size_t i = 0; i < WARNED_PEERS; i++) free(s->warned[i]);
  free(s->bearer);
  free(s);
}

const char *dbx_rpc_call_method(const dbx_rpc_call *c) { return c->method; }

int dbx_rpc_call_is_workflow_service(const dbx_rpc_call *c) {
  return c->method != c->method_full;
}

const uint8_t *dbx_rpc_call_request(const dbx_rpc_call *c, size_t *len_out) {
  if (len_out) *len_out = c->req_len;
  return c->req ? c->req : (const uint8_t *)"";
}

int64_t dbx_rpc_call_deadline_mono_ns(const dbx_rpc_call *c) { return c->deadline_mono_ns; }

const char *dbx_rpc_call_metadata(const dbx_rpc_call *c, const char *key) {
  if (key == NULL) return NULL;
  for (size_t i = 0; i < c->n_md; i++)
    if (strcmp(c->md_keys[i], key) == 0) return c->md_vals[i];
  return NULL;
}

int dbx_rpc_call_cancelled(const dbx_rpc_call *c) {
  return atomic_load(&((dbx_rpc_call *)c)->cancelled);
}

void dbx_rpc_call_set_user(dbx_rpc_call *c, void *user) { c->user = user; }
void *dbx_rpc_call_user(const dbx_rpc_call *c) { return c->user; }

void dbx_rpc_call_reply(dbx_rpc_call *c, const void *msg, size_t len) {
  if (c == NULL) return;
  call_answer(c, GRPC_STATUS_OK, NULL, msg, len, 1, NULL, 0, NULL, NULL);
}

void dbx_rpc_call_fallback(dbx_rpc_call *c, const void *msg, size_t len, int64_t at_mono_ns) {
  if (c == NULL || c->local_fn != NULL) return;
  uint8_t *copy = dbx_malloc(len ? len : 1);
  if (copy == NULL) return;
  if (len) memcpy(copy, msg, len);
  dbx_rpc_server *s = c->s;
  uint8_t *old = NULL;
  pthread_mutex_lock(&s->mu);
  if (c->answered || !s->fb_started) {
    pthread_mutex_unlock(&s->mu);
    free(copy);
    return;
  }
  if (c->fb_armed) {
    old = c->fb_msg;
  } else {
    c->refs++; /* the fallback's own: the call outlives its answer until the owner's */
    c->fb_armed = 1;
    c->fb_prev = NULL;
    c->fb_next = s->fb_head;
    if (s->fb_head) s->fb_head->fb_prev = c;
    s->fb_head = c;
  }
  c->fb_msg = copy;
  c->fb_len = len;
  c->fb_at = at_mono_ns;
  if (at_mono_ns < s->fb_wake_at) pthread_cond_signal(&s->fb_cv); /* else it wakes in time anyway */
  pthread_mutex_unlock(&s->mu);
  free(old);
}

int dbx_rpc_call_fallback_sent(const dbx_rpc_call *c) {
  /* lock-free: the engine asks for every parked call on each pass */
  return c != NULL && c->local_fn == NULL && atomic_load(&((dbx_rpc_call *)c)->fb_answered);
}

/* The fallback thread: answers each armed call whose owner is late, with its
 * fallback message and the fallback's reference. */
static void *fb_main(void *arg) {
  dbx_rpc_server *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->fb_stop) {
    int64_t now = dbx_mono_ns(), next = now + 1000000000LL;
    dbx_rpc_call *due = NULL;
    for (dbx_rpc_call *c = s->fb_head; c; c = c->fb_next) {
      if (c->fb_at <= now) {
        due = c;
        break;
      }
      if (c->fb_at < next) next = c->fb_at;
    }
    if (due) {
      fb_unlink(s, due);
      uint8_t *msg = due->fb_msg;
      size_t len = due->fb_len;
      due->fb_msg = NULL;
      int answer = !due->answered; /* always: an owner's answer unlinks first */
      if (answer) {
        due->answered = 1;
        atomic_store(&due->fb_answered, 1);
      }
      pthread_mutex_unlock(&s->mu);
      if (answer)
        call_send(due, GRPC_STATUS_OK, NULL, msg, len, 1, NULL, 0);
      else
        call_unref(due);
      free(msg);
      pthread_mutex_lock(&s->mu);
      continue;
    }
    struct timespec ts = {next / 1000000000LL, next % 1000000000LL};
    s->fb_wake_at = next;
    pthread_cond_timedwait(&s->fb_cv, &s->mu, &ts);
    s->fb_wake_at = 0; /* awake: it scans the list again before it sleeps, so no arm needs to signal */
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void dbx_rpc_call_reply_tracked(dbx_rpc_call *c, const void *msg, size_t len, dbx_rpc_delivered_fn fn,
                                void *arg) {
  if (c == NULL) {
    if (fn) fn(arg, 0);
    return;
  }
  call_answer(c, GRPC_STATUS_OK, NULL, msg, len, 1, NULL, 0, fn, arg);
}

void dbx_rpc_call_fail(dbx_rpc_call *c, int status, const char *message, const void *details,
                       size_t details_len) {
  if (c == NULL) return;
  if (status <= GRPC_STATUS_OK || status > GRPC_STATUS_UNAUTHENTICATED)
    status = GRPC_STATUS_UNKNOWN;
  call_answer(c, status, message, NULL, 0, 0, details, details_len, NULL, NULL);
}
