/* rpc: the only room that touches gRPC core (libgrpc 1.51, grpc/grpc.h).
 *
 * Server: one completion queue drained by one thread that this module owns.
 * Each inbound call is read whole (its one request message) and handed to the
 * owner's handler on that thread; the handler must not block. It takes
 * ownership of the call and answers it exactly once, from any thread, with
 * dbx_rpc_call_reply() or dbx_rpc_call_fail(); until then the call is parked
 * (long polls cost no thread). If the peer cancels or the deadline passes
 * first, on_cancel runs on the server thread; the owner must still answer
 * (the answer is then dropped) to release the call.
 *
 * Client: a channel that many threads share; each unary call blocks its own
 * thread on its own completion queue until the reply, the deadline or a
 * cancel through a dbx_rpc_cancel token. A channel whose connection is lost
 * tries to reconnect every 100 ms .. 500 ms (gRPC's reconnect backoff,
 * capped; gRPC's default grows to 120 s), so a wait_for_ready call starts
 * within about 0.6 s of the peer accepting connections again.
 *
 * Messages are opaque bytes here (protobuf-c packs and unpacks in the rooms
 * above). grpc_init()/grpc_shutdown() are called by dbx_rpc_global_init/
 * _shutdown, once per process, in main() and test setup, before the
 * program's own threads start; the threads gRPC starts there block every
 * asynchronous signal, so signals reach the program's threads only.
 * dbx_rpc_global_init also turns off Abseil's mutex deadlock detection (on in
 * Debian's build, off in Abseil's release builds; a cost on every lock gRPC
 * takes) unless the environment has DBX_ABSL_DEADLOCK_DETECTION=1. */
#ifndef DBX_RPC_RPC_H
#define DBX_RPC_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* gRPC status codes (same numbers as grpc_status_code). */
enum {
  DBX_GRPC_OK = 0,
  DBX_GRPC_CANCELLED = 1,
  DBX_GRPC_UNKNOWN = 2,
  DBX_GRPC_INVALID_ARGUMENT = 3,
  DBX_GRPC_DEADLINE_EXCEEDED = 4,
  DBX_GRPC_NOT_FOUND = 5,
  DBX_GRPC_ALREADY_EXISTS = 6,
  DBX_GRPC_PERMISSION_DENIED = 7,
  DBX_GRPC_RESOURCE_EXHAUSTED = 8,
  DBX_GRPC_FAILED_PRECONDITION = 9,
  DBX_GRPC_ABORTED = 10,
  DBX_GRPC_OUT_OF_RANGE = 11,
  DBX_GRPC_UNIMPLEMENTED = 12,
  DBX_GRPC_INTERNAL = 13,
  DBX_GRPC_UNAVAILABLE = 14,
  DBX_GRPC_DATA_LOSS = 15,
  DBX_GRPC_UNAUTHENTICATED = 16
};

void dbx_rpc_global_init(void);
void dbx_rpc_global_shutdown(void);

/* ---------------------------------------------------------------- server */

typedef struct dbx_rpc_server dbx_rpc_server;
typedef struct dbx_rpc_call dbx_rpc_call;

/* Runs on the server thread for each new call, with its request read. */
typedef void (*dbx_rpc_handler_fn)(dbx_rpc_call *call, void *ud);
/* Runs on the server thread when a call not yet answered is cancelled by the
 * peer, its deadline passes, or dbx_rpc_server_destroy cancels it. The call
 * stays valid for the duration of the callback even if another thread answers
 * it concurrently; the owner must still answer it once (answering right here
 * is allowed). At most once per call. */
typedef void (*dbx_rpc_cancel_fn)(dbx_rpc_call *call, void *ud);

typedef struct {
  const char *host;                 /* "127.0.0.1" (default when NULL) */
  int port;                         /* 0 = pick a free port */
  size_t max_message_bytes;         /* receive and send limit; 0 = 128 MiB */
  const char *tls_cert_pem;         /* PEM text, or NULL for plaintext. Borrowed for create. */
  const char *tls_key_pem;
  const char *api_key;              /* if set, calls need "authorization: Bearer <key>",
                                       else UNAUTHENTICATED. Copied. */
  dbx_rpc_handler_fn on_call;
  dbx_rpc_cancel_fn on_cancel;      /* may be NULL */
  void *ud;
} dbx_rpc_server_opts;

/* Bind and start serving. *out: free with dbx_rpc_server_destroy.
 * on_call never sees calls that fail the api key check (answered
 * UNAUTHENTICATED "missing or invalid api key"), calls whose request exceeds
 * max_message_bytes (gRPC answers RESOURCE_EXHAUSTED naming the limit), calls
 * cancelled before their request arrived, or calls arriving during destroy.
 * Returns DBX_OK, DBX_EINVAL, DBX_EIO (bind failed; message via *errmsg_out,
 * a static string, when errmsg_out is not NULL). */
dbx_err dbx_rpc_server_start(const dbx_rpc_server_opts *o, dbx_rpc_server **out,
                             const char **errmsg_out);
int dbx_rpc_server_port(const dbx_rpc_server *s); /* the bound port */
/* Calls accepted and not yet released (parked, being answered, or waiting for
 * gRPC to finish them). For diagnostics and leak tests. Any thread. */
int dbx_rpc_server_live_calls(dbx_rpc_server *s);
/* Stop accepting, cancel calls still parked (the owner's answers to them are
 * dropped; the owner must have answered or must answer before destroy returns
 * -- destroy waits at most 5 s for them), shut down in gRPC's order, free. Accepts NULL.
 * on_cancel runs (on the server thread) for each parked call while destroy
 * waits. Never call from on_call/on_cancel. If answers are still missing after
 * 5 s the error is logged and the server is leaked rather than freed. */
void dbx_rpc_server_destroy(dbx_rpc_server *s);
/* From now on a parked call that ends before its answer is expected (the
 * process stops its own clients first, as `durabox run` and `durabox dev`
 * do): it is not warned about (warn_dropped). Thread-safe; accepts NULL. */
void dbx_rpc_server_expect_drops(dbx_rpc_server *s);

/* Call accessors: valid until the call is answered. */
/* Short method name ("PollWorkflowTaskQueue") when the path is
 * "/temporal.api.workflowservice.v1.WorkflowService/<name>", else the full path. */
const char *dbx_rpc_call_method(const dbx_rpc_call *c);
/* 1 when the path belongs to temporal.api.workflowservice.v1.WorkflowService. */
int dbx_rpc_call_is_workflow_service(const dbx_rpc_call *c);
const uint8_t *dbx_rpc_call_request(const dbx_rpc_call *c, size_t *len_out);
/* Client deadline as CLOCK_MONOTONIC ns; INT64_MAX when the client set none. */
int64_t dbx_rpc_call_deadline_mono_ns(const dbx_rpc_call *c);
/* Value of request metadata key (lowercase), NUL-terminated copy owned by the call; NULL if absent. */
const char *dbx_rpc_call_metadata(const dbx_rpc_call *c, const char *key);
/* 1 once the peer cancelled or the deadline passed. Any thread. */
int dbx_rpc_call_cancelled(const dbx_rpc_call *c);
/* Owner's tag: any pointer, kept for the owner (e.g. its parked-poll record). */
void dbx_rpc_call_set_user(dbx_rpc_call *c, void *user);
void *dbx_rpc_call_user(const dbx_rpc_call *c);

/* Answer OK with a message (bytes copied; len may be 0 for an empty message).
 * Any thread; exactly once per call; frees the call. */
void dbx_rpc_call_reply(dbx_rpc_call *c, const void *msg, size_t len);
/* The answer of a parked long poll when its owner is late: if the owner has
 * not answered by at_mono_ns (CLOCK_MONOTONIC ns), the server answers OK
 * with msg (copied; len may be 0) on a thread of its own. The owner must
 * still answer once to release the call; that answer is then dropped
 * quietly (a tracked one reports delivered 0). Calling it again replaces the
 * fallback. For an engine whose slow commit would otherwise make a poll miss
 * its client's deadline. Owner's thread, before its answer; ignored for
 * in-process calls and when out of memory (the owner's answer still comes). */
void dbx_rpc_call_fallback(dbx_rpc_call *c, const void *msg, size_t len, int64_t at_mono_ns);
/* 1 once the fallback answer was sent: the owner's answer will be dropped,
 * so it should hand the call nothing (and answer it to release it). Any
 * thread. */
int dbx_rpc_call_fallback_sent(const dbx_rpc_call *c);
/* Runs once per tracked answer (dbx_rpc_call_reply_tracked), when gRPC has
 * finished both sending it and closing the call: delivered 1 when the call
 * closed without being cancelled (the reply went out to the peer's stream),
 * 0 when the answer could not reach the peer (the peer cancelled, its
 * deadline passed, or its connection dropped, before or while the answer was
 * sent). delivered 1 is no proof the peer read it (a connection that dies
 * after the bytes left looks the same). Runs on the server thread (or on
 * the answering thread when the send cannot start); it must not block. */
typedef void (*dbx_rpc_delivered_fn)(void *arg, int delivered);
/* dbx_rpc_call_reply, then fn(arg, delivered) exactly once, including during
 * dbx_rpc_server_destroy (cancelled calls report 0). fn may be NULL (plain
 * reply). */
void dbx_rpc_call_reply_tracked(dbx_rpc_call *c, const void *msg, size_t len, dbx_rpc_delivered_fn fn,
                                void *arg);
/* Answer with a non-OK status (OK or out-of-range codes are sent as
 * UNKNOWN). message: UTF-8, copied. details: serialized google.rpc.Status
 * sent as "grpc-status-details-bin" (may be NULL). Any thread; exactly once
 * per call; frees the call. */
void dbx_rpc_call_fail(dbx_rpc_call *c, int status, const char *message, const void *details,
                       size_t details_len);

/* An in-process call, for tests and fuzzers that hand a request straight
 * to a server's owner (its on_call; the service: dbx_service_call_local)
 * without gRPC: method is the WorkflowService method's short name
 * ("StartWorkflowExecution"; dbx_rpc_call_is_workflow_service is 1), req
 * copied, deadline as dbx_rpc_call_deadline_mono_ns (INT64_MAX: none); no
 * metadata; never cancelled. The one answer (reply, reply_tracked with
 * delivered 1, or fail) calls fn(arg, status, message (NULL when none),
 * reply bytes (NULL unless OK), length) on the answering thread, then
 * frees the call. NULL on out of memory or a NULL method / fn. */
typedef void (*dbx_rpc_local_fn)(void *arg, int status, const char *message, const void *reply,
                                 size_t len);
dbx_rpc_call *dbx_rpc_call_local_new(const char *method, const void *req, size_t len,
                                     int64_t deadline_mono_ns, dbx_rpc_local_fn fn, void *arg);

/* ---------------------------------------------------------------- client */

typedef struct dbx_rpc_channel dbx_rpc_channel;
typedef struct dbx_rpc_cancel dbx_rpc_cancel;

typedef struct {
  const char *target;              /* "host:port" */
  const char *tls_ca_pem;          /* PEM text; with tls = 1 and NULL: system roots */
  const char *tls_cert_pem;        /* client certificate (mTLS), or NULL */
  const char *tls_key_pem;
  const char *tls_server_name;     /* override for the TLS name check, or NULL */
  int tls;                         /* 1 = TLS */
  const char *api_key;             /* sent as "authorization: Bearer <key>", or NULL */
  const char *namespace_;          /* sent as "temporal-namespace", or NULL */
  const char *client_name;         /* "client-name" header; NULL = "durabox" */
  const char *client_version;      /* "client-version" header; NULL = DBX version */
  size_t max_message_bytes;        /* 0 = 128 MiB */
  int keepalive_ms;                /* 0 = 30000 (timeout 15000) */
} dbx_rpc_channel_opts;

/* Strings in o are copied. *out: free with dbx_rpc_channel_destroy.
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOMEM. Creating does not connect. */
dbx_err dbx_rpc_channel_create(const dbx_rpc_channel_opts *o, dbx_rpc_channel **out);
/* All calls on it must have returned. Accepts NULL. */
void dbx_rpc_channel_destroy(dbx_rpc_channel *ch);

/* A cancel token: dbx_rpc_cancel_fire() aborts every call currently using it
 * and every later call made with it (they return DBX_ECANCELED at once).
 * Thread-safe. Free with dbx_rpc_cancel_destroy after those calls return. */
dbx_err dbx_rpc_cancel_create(dbx_rpc_cancel **out);
void dbx_rpc_cancel_fire(dbx_rpc_cancel *k);
int dbx_rpc_cancel_fired(const dbx_rpc_cancel *k);
void dbx_rpc_cancel_destroy(dbx_rpc_cancel *k);

typedef struct {
  int status;            /* gRPC status code; DBX_GRPC_OK on success */
  char *message;         /* status message (malloc'd, may be NULL): for people, not for code */
  uint8_t *response;     /* reply message bytes (malloc'd; NULL when none) */
  size_t response_len;
  uint8_t *details;      /* grpc-status-details-bin (serialized google.rpc.Status) or NULL */
  size_t details_len;
  /* With status RESOURCE_EXHAUSTED raised by gRPC's own message size check
   * (this side's send limit or the peer's receive limit): that limit in
   * bytes. 0 for every other outcome, including a RESOURCE_EXHAUSTED that
   * the peer's handler sent (e.g. the service's "storage full"). */
  size_t message_limit_bytes;
} dbx_rpc_result;

/* "RESOURCE_EXHAUSTED" for DBX_GRPC_RESOURCE_EXHAUSTED etc.: gRPC's names of
 * its status codes; "UNKNOWN" for numbers outside 0..16. Static, any thread. */
const char *dbx_rpc_status_name(int status);

void dbx_rpc_result_cleanup(dbx_rpc_result *r); /* frees the members, leaves zeros */

/* One unary call of method ("PollWorkflowTaskQueue": the WorkflowService is
 * implied; a path starting with '/' is used as is). timeout_ms: deadline from
 * now; <= 0 means no deadline. wait_for_ready: 1 = wait for the channel to
 * connect within the deadline instead of failing fast with UNAVAILABLE.
 * cancel may be NULL. Returns DBX_OK when a status arrived (any status:
 * inspect out->status; an unreachable server is UNAVAILABLE, an expired
 * deadline DEADLINE_EXCEEDED), DBX_ECANCELED when the token fired (out stays
 * zeroed), DBX_ENOMEM, DBX_EINVAL, DBX_ERPC (gRPC refused to start the call).
 * out must be zero-initialised; release with dbx_rpc_result_cleanup. Any thread. */
dbx_err dbx_rpc_unary(dbx_rpc_channel *ch, const char *method, const void *req, size_t req_len,
                      int64_t timeout_ms, int wait_for_ready, dbx_rpc_cancel *cancel,
                      dbx_rpc_result *out);

#endif
