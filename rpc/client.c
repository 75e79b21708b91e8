/* rpc client: a shared gRPC channel and blocking unary calls.
 *
 * The channel is thread-safe in gRPC core, so one dbx_rpc_channel serves any
 * number of threads. Each dbx_rpc_unary() makes its own pluck completion
 * queue, starts one batch (send metadata + message + close, receive metadata
 * + message + status) and plucks its tag; the calling thread drives the I/O
 * while it waits. Retries are off: the layer above decides what to repeat.
 *
 * Cancel tokens keep a mutex-protected list of in-flight calls (nodes live on
 * the callers' stacks). A call leaves the list under the mutex before it is
 * unref'd, so fire() only ever cancels live calls.
 * Also here: dbx_rpc_global_init/_shutdown (grpc_init/grpc_shutdown). */
#define _GNU_SOURCE 1 /* dlfcn.h: RTLD_DEFAULT */
#include "rpc/rpc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "base/alloc.h"
#include "base/util.h"

#ifndef DBX_VERSION
#define DBX_VERSION "0.0.0"
#endif

#define DEFAULT_MAX_MESSAGE ((size_t)128 << 20)
#define WFS_PREFIX "/temporal.api.workflowservice.v1.WorkflowService/"
#define DETAILS_KEY "grpc-status-details-bin"
/* gRPC's own reconnect backoff defaults to 1 s growing to 120 s: a service
 * back after a 120 s outage was reached 61 s later. Capped here, a channel
 * retries a lost connection every 100 ms .. 500 ms (+-20 % jitter, gRPC's),
 * so a call waiting for the channel (wait_for_ready) goes out within about
 * 0.6 s of the service accepting connections again; a refused connect costs
 * the client and the peer next to nothing. The connect timeout itself stays
 * gRPC's (20 s, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is not set). */
#define RECONNECT_INITIAL_MS 100
#define RECONNECT_MAX_MS 500

/* Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
 * detection on: every lock gRPC takes records an edge in a global lock graph
 * with a stack trace (GraphCycles, about 5% of the C worker's CPU under load).
 * Abseil's release builds have it off, as here; DBX_ABSL_DEADLOCK_DETECTION=1
 * leaves it on (to debug a lock-order problem in gRPC). The setter is C++
 * (absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore = 0)),
 * found by its mangled names, Debian's inline namespace first; an Abseil
 * without either is left as it is. */
static void absl_deadlock_detection_off(void) {
  const char *keep = getenv("DBX_ABSL_DEADLOCK_DETECTION");
  if (keep && strcmp(keep, "1") == 0) return;
  static const char *const names[] = {
      "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
      "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
  };
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *sym = dlsym(RTLD_DEFAULT, names[i]);
    if (!sym) continue;
    void (*set_mode)(int);
    memcpy(&set_mode, &sym, sizeof set_mode);
    set_mode(0);
    return;
  }
  DBX_DEBUG("rpc", "Abseil's SetMutexDeadlockDetectionMode not found: its deadlock detection "
                   "is left as built");
}

/* grpc_init() starts gRPC core's own threads, which inherit the caller's
 * signal mask: with every asynchronous signal blocked around it they never
 * take SIGINT/SIGTERM/SIGUSR1 meant for the program's own handling (a
 * process-directed signal goes to a thread that does not block it). */
void dbx_rpc_global_init(void) {
  absl_deadlock_detection_off();
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGBUS);
  sigdelset(&all, SIGFPE);
  sigdelset(&all, SIGILL);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  grpc_init();
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}
void dbx_rpc_global_shutdown(void) { grpc_shutdown(); }

/* ------------------------------------------------------------ channel */

static grpc_arg arg_int(const char *key, int v) {
  grpc_arg a;
  memset(&a, 0, sizeof a);
  a.type = GRPC_ARG_INTEGER;
  a.key = (char *)key;
  a.value.integer = v;
  return a;
}

static grpc_arg arg_str(const char *key, const char *v) {
  grpc_arg a;
  memset(&a, 0, sizeof a);
  a.type = GRPC_ARG_STRING;
  a.key = (char *)key;
  a.value.string = (char *)v;
  return a;
}

struct dbx_rpc_channel {
  grpc_channel *ch;
  char *bearer; /* "Bearer <key>" or NULL */
  char *namespace_;
  char *client_name;
  char *client_version;
};

void dbx_rpc_channel_destroy(dbx_rpc_channel *ch) {
  if (ch == NULL) return;
  if (ch->ch) grpc_channel_destroy(ch->ch);
  free(ch->bearer);
  free(ch->namespace_);
  free(ch->client_name);
  free(ch->client_version);
  free(ch);
}

dbx_err dbx_rpc_channel_create(const dbx_rpc_channel_opts *o, dbx_rpc_channel **out) {
  if (o == NULL || out == NULL || o->target == NULL || o->target[0] == '\0' ||
      (o->tls_cert_pem == NULL) != (o->tls_key_pem == NULL) || o->keepalive_ms < 0)
    return DBX_EINVAL;
  *out = NULL;
  dbx_rpc_channel *ch = dbx_calloc(1, sizeof *ch);
  if (ch == NULL) return DBX_ENOMEM;
  ch->client_name = dbx_strdup(o->client_name ? o->client_name : "durabox");
  ch->client_version = dbx_strdup(o->client_version ? o->client_version : DBX_VERSION);
  ch->namespace_ = dbx_strdup(o->namespace_);
  ch->bearer = o->api_key ? dbx_asprintf("Bearer %s", o->api_key) : NULL;
  if (ch->client_name == NULL || ch->client_version == NULL ||
      (o->namespace_ && ch->namespace_ == NULL) || (o->api_key && ch->bearer == NULL)) {
    dbx_rpc_channel_destroy(ch);
    return DBX_ENOMEM;
  }
  size_t max = o->max_message_bytes ? o->max_message_bytes : DEFAULT_MAX_MESSAGE;
  if (max > INT32_MAX) max = INT32_MAX;
  int ka = o->keepalive_ms ? o->keepalive_ms : 30000;
  int ka_timeout = o->keepalive_ms ? (ka / 2 > 1000 ? ka / 2 : 1000) : 15000;
  grpc_arg a[10];
  size_t n = 0;
  a[n++] = arg_int(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max);
  a[n++] = arg_int(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max);
  a[n++] = arg_int(GRPC_ARG_KEEPALIVE_TIME_MS, ka);
  a[n++] = arg_int(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ka_timeout);
  a[n++] = arg_int(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  a[n++] = arg_int(GRPC_ARG_ENABLE_RETRIES, 0);
  a[n++] = arg_int(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, RECONNECT_INITIAL_MS);
  a[n++] = arg_int(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, RECONNECT_MAX_MS);
  if (o->tls && o->tls_server_name)
    a[n++] = arg_str(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, o->tls_server_name);
  grpc_channel_args args = {n, a};

  grpc_channel_credentials *creds;
  if (o->tls) {
    grpc_ssl_pem_key_cert_pair kp = {o->tls_key_pem, o->tls_cert_pem};
    creds = grpc_ssl_credentials_create(o->tls_ca_pem, o->tls_cert_pem ? &kp : NULL, NULL, NULL);
  } else {
    creds = grpc_insecure_credentials_create();
  }
  if (creds == NULL) {
    dbx_rpc_channel_destroy(ch);
    return DBX_EINVAL;
  }
  ch->ch = grpc_channel_create(o->target, creds, &args);
  grpc_channel_credentials_release(creds);
  if (ch->ch == NULL) {
    dbx_rpc_channel_destroy(ch);
    return DBX_EINVAL;
  }
  *out = ch;
  return DBX_OK;
}

/* ------------------------------------------------------------ cancel tokens */

typedef struct inflight {
  grpc_call *call;
  struct inflight *prev, *next;
} inflight;

struct dbx_rpc_cancel {
  pthread_mutex_t mu;
  atomic_int fired;
  inflight *head;
};

dbx_err dbx_rpc_cancel_create(dbx_rpc_cancel **out) {
  if (out == NULL) return DBX_EINVAL;
  dbx_rpc_cancel *k = dbx_calloc(1, sizeof *k);
  if (k == NULL) return DBX_ENOMEM;
  pthread_mutex_init(&k->mu, NULL);
  atomic_init(&k->fired, 0);
  *out = k;
  return DBX_OK;
}

void dbx_rpc_cancel_fire(dbx_rpc_cancel *k) {
  if (k == NULL) return;
  pthread_mutex_lock(&k->mu);
  atomic_store(&k->fired, 1);
  for (inflight *f = k->head; f != NULL; f = f->next) grpc_call_cancel(f->call, NULL);
  pthread_mutex_unlock(&k->mu);
}

int dbx_rpc_cancel_fired(const dbx_rpc_cancel *k) {
  return k != NULL && atomic_load(&((dbx_rpc_cancel *)k)->fired);
}

void dbx_rpc_cancel_destroy(dbx_rpc_cancel *k) {
  if (k == NULL) return;
  pthread_mutex_destroy(&k->mu);
  free(k);
}

/* 0 = registered, -1 = token already fired. */
static int cancel_add(dbx_rpc_cancel *k, inflight *f) {
  pthread_mutex_lock(&k->mu);
  int fired = atomic_load(&k->fired);
  if (!fired) {
    f->prev = NULL;
    f->next = k->head;
    if (k->head) k->head->prev = f;
    k->head = f;
  }
  pthread_mutex_unlock(&k->mu);
  return fired ? -1 : 0;
}

static void cancel_remove(dbx_rpc_cancel *k, inflight *f) {
  pthread_mutex_lock(&k->mu);
  if (f->prev)
    f->prev->next = f->next;
  else
    k->head = f->next;
  if (f->next) f->next->prev = f->prev;
  pthread_mutex_unlock(&k->mu);
}

/* ------------------------------------------------------------ unary calls */

const char *dbx_rpc_status_name(int s) {
  static const char *names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return (s >= 0 && s <= 16) ? names[s] : "UNKNOWN";
}

/* gRPC core's own size check fails a call RESOURCE_EXHAUSTED with
 * "Sent message larger than max (SIZE vs. LIMIT)" or "Received message
 * larger than max (SIZE vs. LIMIT)", written by the sender's or the
 * receiver's gRPC core. This room owns gRPC, so it alone reads that text and
 * hands the rooms above a number. Returns LIMIT, or 0 when msg is not it. */
static size_t grpc_size_limit(int status, const grpc_slice *msg) {
  static const char mark[] = "message larger than max (";
  if (status != GRPC_STATUS_RESOURCE_EXHAUSTED) return 0;
  char buf[160];
  size_t n = GRPC_SLICE_LENGTH(*msg);
  if (n == 0 || n >= sizeof buf) return 0;
  memcpy(buf, GRPC_SLICE_START_PTR(*msg), n);
  buf[n] = '\0';
  const char *p = strstr(buf, mark);
  if (p == NULL) return 0;
  unsigned long long size = 0, limit = 0;
  char close = 0;
  if (sscanf(p + sizeof mark - 1, "%llu vs. %llu%c", &size, &limit, &close) != 3 || close != ')')
    return 0;
  return limit > 0 && limit <= SIZE_MAX ? (size_t)limit : 0;
}

void dbx_rpc_result_cleanup(dbx_rpc_result *r) {
  if (r == NULL) return;
  free(r->message);
  free(r->response);
  free(r->details);
  memset(r, 0, sizeof *r);
}

static uint8_t *slice_dup(grpc_slice s, size_t *len_out) {
  size_t n = GRPC_SLICE_LENGTH(s);
  uint8_t *p = dbx_malloc(n ? n : 1);
  if (p != NULL) memcpy(p, GRPC_SLICE_START_PTR(s), n);
  *len_out = n;
  return p;
}

dbx_err dbx_rpc_unary(dbx_rpc_channel *ch, const char *method, const void *req, size_t req_len,
                      int64_t timeout_ms, int wait_for_ready, dbx_rpc_cancel *cancel,
                      dbx_rpc_result *out) {
  if (ch == NULL || method == NULL || method[0] == '\0' || out == NULL ||
      (req == NULL && req_len > 0))
    return DBX_EINVAL;
  memset(out, 0, sizeof *out);
  if (cancel != NULL && dbx_rpc_cancel_fired(cancel)) return DBX_ECANCELED;

  dbx_err rc = DBX_OK;
  int tag = 0;
  char *path = method[0] == '/' ? dbx_strdup(method) : dbx_asprintf(WFS_PREFIX "%s", method);
  if (path == NULL) return DBX_ENOMEM;

  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec deadline =
      timeout_ms > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                    gpr_time_from_millis(timeout_ms, GPR_TIMESPAN))
                     : gpr_inf_future(GPR_CLOCK_MONOTONIC);
  grpc_slice path_slice = grpc_slice_from_copied_string(path);
  grpc_call *call = grpc_channel_create_call(ch->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path_slice,
                                             NULL, deadline, NULL);

  grpc_metadata md[4];
  memset(md, 0, sizeof md);
  size_t nmd = 0;
  md[nmd].key = grpc_slice_from_static_string("client-name");
  md[nmd++].value = grpc_slice_from_copied_string(ch->client_name);
  md[nmd].key = grpc_slice_from_static_string("client-version");
  md[nmd++].value = grpc_slice_from_copied_string(ch->client_version);
  if (ch->namespace_) {
    md[nmd].key = grpc_slice_from_static_string("temporal-namespace");
    md[nmd++].value = grpc_slice_from_copied_string(ch->namespace_);
  }
  if (ch->bearer) {
    md[nmd].key = grpc_slice_from_static_string("authorization");
    md[nmd++].value = grpc_slice_from_copied_string(ch->bearer);
  }

  grpc_slice req_slice = grpc_slice_from_copied_buffer((const char *)req, req_len);
  grpc_byte_buffer *req_bb = grpc_raw_byte_buffer_create(&req_slice, 1);
  grpc_slice_unref(req_slice);
  grpc_byte_buffer *resp_bb = NULL;
  grpc_metadata_array im, tm;
  grpc_metadata_array_init(&im);
  grpc_metadata_array_init(&tm);
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice status_msg = grpc_empty_slice();
  const char *errstr = NULL;

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[0].data.send_initial_metadata.count = nmd;
  ops[0].data.send_initial_metadata.metadata = md;
  ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET |
                 (wait_for_ready ? GRPC_INITIAL_METADATA_WAIT_FOR_READY : 0);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = req_bb;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &im;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &resp_bb;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &tm;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &status_msg;
  ops[5].data.recv_status_on_client.error_string = &errstr;

  inflight node = {call, NULL, NULL};
  int registered = 0;
  if (cancel != NULL) {
    if (cancel_add(cancel, &node) != 0) {
      rc = DBX_ECANCELED;
      goto out;
    }
    registered = 1;
  }
  grpc_call_error e = grpc_call_start_batch(call, ops, 6, &tag, NULL);
  if (e != GRPC_CALL_OK) {
    DBX_ERROR("rpc", "%s: grpc_call_start_batch: grpc_call_error %d", path, (int)e);
    rc = DBX_ERPC;
    goto out;
  }
  grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

  if (status == GRPC_STATUS_CANCELLED && cancel != NULL && dbx_rpc_cancel_fired(cancel)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  out->status = (int)status;
  out->message_limit_bytes = grpc_size_limit((int)status, &status_msg);
  if (GRPC_SLICE_LENGTH(status_msg) > 0) {
    out->message = dbx_strndup((const char *)GRPC_SLICE_START_PTR(status_msg),
                               GRPC_SLICE_LENGTH(status_msg));
    if (out->message == NULL) rc = DBX_ENOMEM;
  }
  if (resp_bb != NULL && rc == DBX_OK) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, resp_bb)) {
      out->status = GRPC_STATUS_INTERNAL;
    } else {
      grpc_slice all = grpc_byte_buffer_reader_readall(&r);
      grpc_byte_buffer_reader_destroy(&r);
      out->response = slice_dup(all, &out->response_len);
      grpc_slice_unref(all);
      if (out->response == NULL) rc = DBX_ENOMEM;
    }
  }
  for (size_t i = 0; i < tm.count && rc == DBX_OK; i++) {
    if (grpc_slice_str_cmp(tm.metadata[i].key, DETAILS_KEY) == 0) {
      free(out->details);
      out->details = slice_dup(tm.metadata[i].value, &out->details_len);
      if (out->details == NULL) rc = DBX_ENOMEM;
    }
  }
  if (rc != DBX_OK) dbx_rpc_result_cleanup(out);

out:
  if (registered) cancel_remove(cancel, &node);
  grpc_call_unref(call);
  grpc_slice_unref(path_slice);
  for (size_t i = 0; i < nmd; i++) grpc_slice_unref(md[i].value);
  grpc_slice_unref(status_msg);
  gpr_free((void *)errstr);
  grpc_metadata_array_destroy(&im);
  grpc_metadata_array_destroy(&tm);
  grpc_byte_buffer_destroy(req_bb);
  if (resp_bb) grpc_byte_buffer_destroy(resp_bb);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_pluck(cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  grpc_completion_queue_destroy(cq);
  free(path);
  return rc;
}
