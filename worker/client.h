/* worker/client: a small typed Temporal client over rpc/ (Temporal:
 * temporal.api.workflowservice.v1.WorkflowService).
 *
 * One dbx_client owns one gRPC channel (TLS, API key, namespace header) and
 * may be used by many threads at once. Every call blocks its thread until the
 * reply, its timeout or its cancel token (NULL = none).
 *
 * Errors: DBX_OK; DBX_ENOTFOUND (gRPC NOT_FOUND), DBX_EEXIST (ALREADY_EXISTS),
 * DBX_EINVAL (INVALID_ARGUMENT or bad arguments here), DBX_ETIMEDOUT
 * (DEADLINE_EXCEEDED), DBX_EUNAVAILABLE (UNAVAILABLE), DBX_ECANCELED (the
 * token fired), DBX_ENOMEM, DBX_ERPC (any other status). When errmsg is not
 * NULL it receives a malloc'd message on failure ("NOT_FOUND: workflow
 * execution not found"; free()), NULL on success.
 *
 * Payloads: JSON text is sent as one Temporal payload with metadata
 * encoding = "json/plain". Messages returned as protobuf-c structs are owned
 * by the caller: free with dbx_client_msg_free(). */
#ifndef DBX_WORKER_CLIENT_H
#define DBX_WORKER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "rpc/rpc.h"
#include "protos/pb.h"

typedef struct dbx_client dbx_client;

typedef struct {
  const char *address;      /* "host:port" (required) */
  const char *namespace_;   /* NULL = "default" */
  int tls;                  /* 1 = TLS (implied when any PEM below is set) */
  const char *tls_ca_pem;   /* PEM text (not a path); NULL with tls = system roots */
  const char *tls_cert_pem; /* client certificate for mTLS, or NULL */
  const char *tls_key_pem;
  const char *tls_server_name; /* NULL = from address */
  const char *api_key;      /* "authorization: Bearer <key>", or NULL */
  const char *identity;     /* NULL = "durabox@<hostname>:<pid>" */
} dbx_client_opts;

/* Strings in o are copied. Does not connect. *out: free with dbx_client_destroy.
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_client_create(const dbx_client_opts *o, dbx_client **out);
/* All calls must have returned. Accepts NULL. */
void dbx_client_destroy(dbx_client *c);
const char *dbx_client_namespace(const dbx_client *c); /* borrowed, client's life */
const char *dbx_client_identity(const dbx_client *c);  /* borrowed, client's life */

/* Free any protobuf-c message returned by this module. Accepts NULL. */
void dbx_client_msg_free(void *msg);

/* Generic unary call: pack req, call method ("PollWorkflowTaskQueue"), unpack
 * the reply with resp_desc into *resp (free with dbx_client_msg_free).
 * timeout_ms <= 0: no deadline. Any thread. */
dbx_err dbx_client_call(dbx_client *c, const char *method, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                        dbx_rpc_cancel *cancel, ProtobufCMessage **resp, char **errmsg);

/* What a caller may need to tell apart about a failed call, as codes: the
 * errmsg text is for people and is never parsed. */
typedef struct {
  int grpc_status;            /* the call's gRPC status (DBX_GRPC_*); DBX_GRPC_OK when
                                 the call failed before a status arrived (DBX_ECANCELED,
                                 DBX_ENOMEM, ...) or succeeded */
  size_t message_limit_bytes; /* with DBX_GRPC_RESOURCE_EXHAUSTED from gRPC's own
                                 message size check: the limit it enforced (ours
                                 or the service's); else 0 (see dbx_rpc_result) */
} dbx_client_status;

/* dbx_client_call that also fills *st (may be NULL; zeroed first). */
dbx_err dbx_client_call_status(dbx_client *c, const char *method, const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                               dbx_rpc_cancel *cancel, ProtobufCMessage **resp,
                               dbx_client_status *st, char **errmsg);

/* dbx_client_call that waits for the channel (gRPC wait_for_ready): while
 * the service is unreachable the call is held until the channel connects
 * (it retries every 100 .. 500 ms, rpc/rpc.h) or timeout_ms passes
 * (DBX_ETIMEDOUT), instead of failing at once with DBX_EUNAVAILABLE. For
 * long polls and reports, which should go out the moment the service is
 * back. A connection lost while the call is in flight is still
 * DBX_EUNAVAILABLE. */
dbx_err dbx_client_call_ready(dbx_client *c, const char *method, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                              dbx_rpc_cancel *cancel, ProtobufCMessage **resp, char **errmsg);
/* dbx_client_call_ready that also fills *st (may be NULL; zeroed first). */
dbx_err dbx_client_call_ready_status(dbx_client *c, const char *method, const ProtobufCMessage *req,
                                     const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                                     dbx_rpc_cancel *cancel, ProtobufCMessage **resp,
                                     dbx_client_status *st, char **errmsg);

/* ------------------------------------------------------------ payloads */

/* JSON text of the first payload (malloc'd, NUL-terminated; "null" when p is
 * NULL or empty). Returns NULL only on OOM. */
char *dbx_payloads_to_json(const Payloads *p);
/* A Payloads with one json/plain payload holding a copy of json (NULL or "" =
 * "null"). Free with dbx_payloads_free. NULL on OOM. */
Payloads *dbx_payloads_from_json(const char *json, size_t len);
void dbx_payloads_free(Payloads *p); /* accepts NULL */

/* ------------------------------------------------------------ operations */

typedef struct {
  const char *workflow_id;       /* required */
  const char *workflow_type;     /* required */
  const char *task_queue;        /* required */
  const char *input_json;        /* NULL = no input */
  const char *request_id;        /* NULL = random uuid */
  int64_t execution_timeout_ms;  /* 0 = unlimited */
  int64_t run_timeout_ms;        /* 0 = unlimited */
  int64_t task_timeout_ms;       /* 0 = service default (10 s) */
  int id_reuse_policy;           /* Temporal WorkflowIdReusePolicy value; 0 = unspecified */
} dbx_client_start_opts;

/* Temporal: StartWorkflowExecution. *run_id_out: malloc'd run id (may be NULL).
 * DBX_EEXIST when a run with that id is already running. */
dbx_err dbx_client_start_workflow(dbx_client *c, const dbx_client_start_opts *o, char **run_id_out,
                                  char **errmsg);

/* History events of one run, oldest first. */
typedef struct {
  HistoryEvent **events; /* owned by the struct */
  size_t n;
  uint8_t *next_page_token; /* non-NULL only after a single-page (wait_new_event) call */
  size_t next_page_token_len;
  void *priv_;            /* internal: the unpacked pages */
} dbx_client_history;

typedef struct {
  int wait_new_event;          /* 1: one long-poll page from page_token (follow mode) */
  int close_event_only;        /* 1: HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT */
  const uint8_t *page_token;   /* continue from here (borrowed), or NULL */
  size_t page_token_len;
  int64_t timeout_ms;          /* per page; 0 = 70 s with wait_new_event, else 30 s */
  dbx_rpc_cancel *cancel;      /* may be NULL */
} dbx_client_history_opts;

/* Temporal: GetWorkflowExecutionHistory. run_id NULL/"" = the latest run.
 * o NULL = all pages, no filter. Without wait_new_event every page is fetched
 * and next_page_token stays NULL. With wait_new_event, a long poll whose
 * answer does not arrive by timeout_ms (from page_token, or for the close
 * event) is an empty page, DBX_OK, whose next_page_token is page_token again:
 * the caller polls again. out must be zeroed; release with
 * dbx_client_history_cleanup (also after a failure). */
dbx_err dbx_client_get_history(dbx_client *c, const char *workflow_id, const char *run_id,
                               const dbx_client_history_opts *o, dbx_client_history *out,
                               char **errmsg);
void dbx_client_history_cleanup(dbx_client_history *h);

/* Temporal: DescribeWorkflowExecution. *out: free with dbx_client_msg_free. */
dbx_err dbx_client_describe(dbx_client *c, const char *workflow_id, const char *run_id,
                            DescribeWorkflowExecutionResponse **out, char **errmsg);

/* Temporal: ListWorkflowExecutions. query may be NULL (all); page_size 0 =
 * service default; page_token may be NULL. *out: free with dbx_client_msg_free
 * (its next_page_token continues the listing). */
dbx_err dbx_client_list(dbx_client *c, const char *query, int32_t page_size,
                        const uint8_t *page_token, size_t page_token_len,
                        ListWorkflowExecutionsResponse **out, char **errmsg);

/* Temporal: SignalWorkflowExecution. input_json NULL = no input. */
dbx_err dbx_client_signal(dbx_client *c, const char *workflow_id, const char *run_id,
                          const char *signal_name, const char *input_json, char **errmsg);
/* Temporal: RequestCancelWorkflowExecution. reason may be NULL. */
dbx_err dbx_client_cancel(dbx_client *c, const char *workflow_id, const char *run_id,
                          const char *reason, char **errmsg);
/* Temporal: TerminateWorkflowExecution. reason, details_json may be NULL. */
dbx_err dbx_client_terminate(dbx_client *c, const char *workflow_id, const char *run_id,
                             const char *reason, const char *details_json, char **errmsg);
/* Temporal: QueryWorkflow. *result_json: malloc'd JSON of the answer.
 * A failed query is the service status (DBX_EINVAL etc.) with its message;
 * a query rejected by the workflow status is DBX_ESTATE. */
dbx_err dbx_client_query(dbx_client *c, const char *workflow_id, const char *run_id,
                         const char *query_type, const char *args_json, char **result_json,
                         char **errmsg);

#endif
