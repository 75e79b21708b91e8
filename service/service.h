/* service: the embedded single-node workflow service.
 *
 * Speaks the subset of Temporal's gRPC WorkflowService listed in
 * docs/service.md (Temporal: temporal.api.workflowservice.v1) over rpc/, and
 * keeps all state in one LMDB environment through store/. A reply is sent only
 * after the changes it acknowledges are committed (durably, unless
 * opts.no_sync). After a crash, queued tasks, timers and activity timeouts
 * are rebuilt from the store.
 *
 * Threading: dbx_service_start() starts the rpc server thread and one engine
 * thread; every call is executed by the engine thread in batches that share
 * one write transaction (group commit). The handle itself is used by one
 * thread (start/port/stop). */
#ifndef DBX_SERVICE_SERVICE_H
#define DBX_SERVICE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct dbx_service dbx_service;

/* History and payload limits (Temporal's dynamic config defaults). A
 * payload blob (one Payloads, Failure or Memo field of a request or command)
 * over blob_error_bytes is refused as Temporal's server refuses it:
 * INVALID_ARGUMENT "Blob data size exceeds limit." for a start or signal,
 * WorkflowTaskFailed with the command's BAD_*_ATTRIBUTES cause and the run
 * terminated for a command, a non-retryable failure of the activity for its
 * result; over blob_warn_bytes it is logged (as in Temporal, the error limit
 * applies only past the warning one). */
typedef struct {
  int64_t count_warn;           /* limit.historyCount.warn: 10240 */
  int64_t count_suggest_can;    /* limit.historyCount.suggestContinueAsNew: 4096 */
  int64_t count_error;          /* limit.historyCount.error: 51200 */
  int64_t size_warn_bytes;      /* limit.historySize.warn: 10 MiB */
  int64_t size_suggest_can_bytes; /* limit.historySize.suggestContinueAsNew: 4 MiB */
  int64_t size_error_bytes;     /* limit.historySize.error: 50 MiB */
  int64_t blob_warn_bytes;      /* limit.blobSize.warn: 512 KiB (0 = that default) */
  int64_t blob_error_bytes;     /* limit.blobSize.error: 2 MiB (0 = that default) */
} dbx_history_limits;

typedef struct {
  const char *ip;               /* bind address; NULL = 127.0.0.1 */
  int port;                     /* 0 = any free port */
  const char *db_path;          /* LMDB directory; NULL = a temporary one, removed at stop */
  const char *const *namespaces;/* extra namespaces to register; "default" always exists */
  size_t n_namespaces;
  size_t max_message_bytes;     /* 0 = 128 MiB */
  size_t map_ceiling_bytes;     /* 0 = store default */
  size_t map_size_bytes;        /* initial map; 0 = store default */
  int no_sync;                  /* 1 = commits not synced (benchmarks only) */
  int64_t long_poll_ms;         /* empty poll reply after this; 0 = 60000 */
  const char *api_key;          /* require "authorization: Bearer <key>"; NULL = open */
  const char *tls_cert_pem;     /* PEM text; NULL = plaintext */
  const char *tls_key_pem;
  dbx_history_limits limits;    /* zeros = defaults */
  /* Custom search attributes every namespace has while the service runs, as
   * Temporal's `--search-attribute Name=Type` (Type: Text, Keyword, Int,
   * Double, Bool, Datetime, KeywordList, case-insensitive); borrowed for
   * dbx_service_start. A malformed one fails the start with DBX_EINVAL. */
  const char *const *search_attributes;
  size_t n_search_attributes;
} dbx_service_opts;

/* Fill opts with defaults (limits included). */
void dbx_service_opts_init(dbx_service_opts *o);

/* Set a limit from a Temporal dynamic-config key ("limit.historyCount.error",
 * "limit.blobSize.error", ...).
 * Returns 1 if the key is one the service knows, 0 otherwise (caller logs it),
 * -1 if the value is not a non-negative integer. */
int dbx_service_opts_dynamic_config(dbx_service_opts *o, const char *key, const char *value);

/* Open the store, recover, bind and serve. *out: free with dbx_service_stop.
 * Returns DBX_OK, DBX_ESTORE (store cannot open), DBX_EIO (cannot bind),
 * DBX_EINVAL; errmsg (when not NULL) receives a malloc'd message to free(). */
dbx_err dbx_service_start(const dbx_service_opts *o, dbx_service **out, char **errmsg);
int dbx_service_port(const dbx_service *s);
/* The process is about to stop its own clients of this service (an embedded
 * worker) before dbx_service_stop: their polls ending unanswered are not
 * warned about. Thread-safe; accepts NULL. */
void dbx_service_expect_client_stop(dbx_service *s);
/* Test hooks, for tests that need calls in one batch in a known order:
 * hold != 0 keeps the engine from taking queued calls until released with 0;
 * dbx_service_test_queued counts the calls waiting for the engine, and
 * dbx_service_test_queued_cancelled those of them whose client cancelled or
 * whose deadline passed (as gRPC reported it to the server). Any thread. */
void dbx_service_test_hold(dbx_service *s, int hold);
/* Hand the service an in-process call (rpc/rpc.h dbx_rpc_call_local_new) as
 * its rpc server hands it a gRPC call: queued for the engine thread, which
 * decodes, checks, runs and answers it through the call (once). For the
 * fuzzer of tests/fuzz/fuzz_service.c, which skips gRPC for speed. Takes
 * ownership of call. Any thread. */
struct dbx_rpc_call;
void dbx_service_call_local(dbx_service *s, struct dbx_rpc_call *call);
int dbx_service_test_queued(dbx_service *s);
int dbx_service_test_queued_cancelled(dbx_service *s);
/* Allocation-failure tests (base/alloc.h): n > 0 makes the next batch that
 * runs calls arm dbx_alloc_fail_at(n) on the engine thread for the length of
 * its store write (handlers, due timers, commit; not the answers sent after
 * it) and disarm it then. The hook is process-wide: the caller keeps other
 * threads from allocating meanwhile (one call in flight, waiting for its
 * answer). dbx_service_test_alloc_result: -1 while that batch has not run,
 * else 1 when the armed allocation failed in it, 0 when it did not. Any
 * thread. */
void dbx_service_test_alloc_fail_at(dbx_service *s, long n);
int dbx_service_test_alloc_result(dbx_service *s);
/* How many store writes (batches of calls, due timers or both) the store
 * refused with a storage error since the start: a change the engine made
 * that the store cannot hold (neither a full store nor out of memory). 0 in
 * a healthy service; the fuzzer checks it. Any thread. */
long dbx_service_test_storage_errors(dbx_service *s);

/* Stop serving, answer parked polls, close the store, free. Accepts NULL. */
void dbx_service_stop(dbx_service *s);

#endif
