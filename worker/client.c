/* worker/client: typed calls of Temporal's WorkflowService over rpc/.
 *
 * Every operation builds its request on the stack (protobuf-c structs whose
 * strings are borrowed from the caller), packs it, makes one blocking unary
 * call through dbx_rpc_unary and unpacks the reply. gRPC status codes are
 * translated to dbx_err here, with "CODE: message" kept for the caller.
 * The client holds no mutable state after create, so any number of threads
 * may call it at once (the channel is thread-safe). */
#include "worker/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/util.h"
#include "protos/pb.h"

struct dbx_client {
  dbx_rpc_channel *ch;
  char *ns;
  char *identity;
};

static dbx_err status_to_err(int s) {
  switch (s) {
  case DBX_GRPC_OK: return DBX_OK;
  case DBX_GRPC_NOT_FOUND: return DBX_ENOTFOUND;
  case DBX_GRPC_ALREADY_EXISTS: return DBX_EEXIST;
  case DBX_GRPC_INVALID_ARGUMENT: return DBX_EINVAL;
  case DBX_GRPC_DEADLINE_EXCEEDED: return DBX_ETIMEDOUT;
  case DBX_GRPC_UNAVAILABLE: return DBX_EUNAVAILABLE;
  case DBX_GRPC_CANCELLED: return DBX_ECANCELED;
  default: return DBX_ERPC;
  }
}

static void set_msg(char **errmsg, char *m) {
  if (errmsg) *errmsg = m;
  else free(m);
}

dbx_err dbx_client_create(const dbx_client_opts *o, dbx_client **out) {
  if (!o || !o->address || !out) return DBX_EINVAL;
  *out = NULL;
  dbx_client *c = dbx_calloc(1, sizeof *c);
  if (!c) return DBX_ENOMEM;
  c->ns = dbx_strdup(o->namespace_ ? o->namespace_ : "default");
  if (o->identity) {
    c->identity = dbx_strdup(o->identity);
  } else {
    char host[128] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    c->identity = dbx_asprintf("durabox@%s:%d", host, (int)getpid());
  }
  if (!c->ns || !c->identity) {
    dbx_client_destroy(c);
    return DBX_ENOMEM;
  }
  dbx_rpc_channel_opts co = {0};
  co.target = o->address;
  co.tls = o->tls || o->tls_ca_pem || o->tls_cert_pem;
  co.tls_ca_pem = o->tls_ca_pem;
  co.tls_cert_pem = o->tls_cert_pem;
  co.tls_key_pem = o->tls_key_pem;
  co.tls_server_name = o->tls_server_name;
  co.api_key = o->api_key;
  co.namespace_ = c->ns;
  dbx_err rc = dbx_rpc_channel_create(&co, &c->ch);
  if (rc != DBX_OK) {
    dbx_client_destroy(c);
    return rc;
  }
  *out = c;
  return DBX_OK;
}

void dbx_client_destroy(dbx_client *c) {
  if (!c) return;
  dbx_rpc_channel_destroy(c->ch);
  free(c->ns);
  free(c->identity);
  free(c);
}

const char *dbx_client_namespace(const dbx_client *c) { return c->ns; }
const char *dbx_client_identity(const dbx_client *c) { return c->identity; }

void dbx_client_msg_free(void *msg) {
  if (msg) protobuf_c_message_free_unpacked((ProtobufCMessage *)msg, NULL);
}

static dbx_err call(dbx_client *c, const char *method, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms, int ready,
                   dbx_rpc_cancel *cancel, ProtobufCMessage **resp, dbx_client_status *st,
                   char **errmsg) {
  if (errmsg) *errmsg = NULL;
  if (resp) *resp = NULL;
  if (st) memset(st, 0, sizeof *st);
  size_t len = 0;
  uint8_t *buf = dbx_pb_pack(req, &len);
  if (!buf) return DBX_ENOMEM;
  dbx_rpc_result r = {0};
  dbx_err rc = dbx_rpc_unary(c->ch, method, buf, len, timeout_ms, ready, cancel, &r);
  free(buf);
  if (rc != DBX_OK) {
    set_msg(errmsg, dbx_asprintf("%s: %s", method, dbx_strerror(rc)));
    dbx_rpc_result_cleanup(&r);
    return rc;
  }
  if (st) {
    st->grpc_status = r.status;
    st->message_limit_bytes = r.message_limit_bytes;
  }
  if (r.status != DBX_GRPC_OK) {
    rc = status_to_err(r.status);
    set_msg(errmsg, dbx_asprintf("%s: %s", dbx_rpc_status_name(r.status), r.message ? r.message : ""));
    dbx_rpc_result_cleanup(&r);
    return rc;
  }
  if (resp && resp_desc) {
    *resp = dbx_pb_unpack(resp_desc, r.response, r.response_len);
    if (!*resp) {
      set_msg(errmsg, dbx_asprintf("%s: cannot decode the reply", method));
      rc = DBX_ERPC;
    }
  }
  dbx_rpc_result_cleanup(&r);
  return rc;
}

dbx_err dbx_client_call_status(dbx_client *c, const char *method, const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                               dbx_rpc_cancel *cancel, ProtobufCMessage **resp,
                               dbx_client_status *st, char **errmsg) {
  return call(c, method, req, resp_desc, timeout_ms, 0, cancel, resp, st, errmsg);
}

dbx_err dbx_client_call_ready(dbx_client *c, const char *method, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                              dbx_rpc_cancel *cancel, ProtobufCMessage **resp, char **errmsg) {
  return call(c, method, req, resp_desc, timeout_ms, 1, cancel, resp, NULL, errmsg);
}

dbx_err dbx_client_call_ready_status(dbx_client *c, const char *method, const ProtobufCMessage *req,
                                     const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                                     dbx_rpc_cancel *cancel, ProtobufCMessage **resp,
                                     dbx_client_status *st, char **errmsg) {
  return call(c, method, req, resp_desc, timeout_ms, 1, cancel, resp, st, errmsg);
}

dbx_err dbx_client_call(dbx_client *c, const char *method, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                        dbx_rpc_cancel *cancel, ProtobufCMessage **resp, char **errmsg) {
  return call(c, method, req, resp_desc, timeout_ms, 0, cancel, resp, NULL, errmsg);
}

/* ------------------------------------------------------------ payloads */

char *dbx_payloads_to_json(const Payloads *p) {
  if (!p || p->n_payloads == 0 || !p->payloads[0] || p->payloads[0]->data.len == 0)
    return dbx_strdup("null");
  return dbx_strndup((const char *)p->payloads[0]->data.data, p->payloads[0]->data.len);
}

Payloads *dbx_payloads_from_json(const char *json, size_t len) {
  if (!json || len == 0) {
    json = "null";
    len = 4;
  }
  Payloads *ps = dbx_malloc(sizeof *ps);
  Payload *p = dbx_malloc(sizeof *p);
  Temporal__Api__Common__V1__Payload__MetadataEntry *me = dbx_malloc(sizeof *me);
  Payload **arr = dbx_malloc(sizeof *arr);
  Temporal__Api__Common__V1__Payload__MetadataEntry **marr = dbx_malloc(sizeof *marr);
  char *key = dbx_strdup("encoding");
  uint8_t *val = (uint8_t *)dbx_strdup("json/plain");
  uint8_t *data = dbx_malloc(len);
  if (!ps || !p || !me || !arr || !marr || !key || !val || !data) {
    free(ps), free(p), free(me), free(arr), free(marr), free(key), free(val), free(data);
    return NULL;
  }
  *ps = (Payloads)INIT(TEMPORAL__API__COMMON__V1__PAYLOADS);
  *p = (Payload)INIT(TEMPORAL__API__COMMON__V1__PAYLOAD);
  *me = (Temporal__Api__Common__V1__Payload__MetadataEntry)INIT(
      TEMPORAL__API__COMMON__V1__PAYLOAD__METADATA_ENTRY);
  me->key = key;
  me->value.data = val;
  me->value.len = 10;
  memcpy(data, json, len);
  p->data.data = data;
  p->data.len = len;
  marr[0] = me;
  p->n_metadata = 1;
  p->metadata = marr;
  arr[0] = p;
  ps->n_payloads = 1;
  ps->payloads = arr;
  return ps;
}

void dbx_payloads_free(Payloads *p) { dbx_client_msg_free(p); }

static Payloads *payloads_opt(const char *json) {
  return json ? dbx_payloads_from_json(json, strlen(json)) : NULL;
}

#define EXEC(wid, rid)                                                                             \
  WorkflowExecution ex = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);                      \
  ex.workflow_id = (char *)(wid);                                                                  \
  ex.run_id = (char *)((rid) ? (rid) : "")

/* ------------------------------------------------------------ operations */

dbx_err dbx_client_start_workflow(dbx_client *c, const dbx_client_start_opts *o, char **run_id_out,
                                  char **errmsg) {
  if (run_id_out) *run_id_out = NULL;
  if (errmsg) *errmsg = NULL;
  if (!c || !o || !o->workflow_id || !o->workflow_type || !o->task_queue) return DBX_EINVAL;
  StartWorkflowExecutionRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_REQUEST);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  Duration d1 = INIT(GOOGLE__PROTOBUF__DURATION), d2 = INIT(GOOGLE__PROTOBUF__DURATION),
           d3 = INIT(GOOGLE__PROTOBUF__DURATION);
  char rid[DBX_UUID_LEN + 1] = "";
  if (!o->request_id) dbx_uuid_v4(rid); /* "" when the kernel has no randomness */
  rq.namespace_ = c->ns;
  rq.workflow_id = (char *)o->workflow_id;
  wt.name = (char *)o->workflow_type;
  rq.workflow_type = &wt;
  tq.name = (char *)o->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  rq.task_queue = &tq;
  rq.input = payloads_opt(o->input_json);
  if (o->execution_timeout_ms > 0) dbx_pb_duration_init_ms(&d1, o->execution_timeout_ms), rq.workflow_execution_timeout = &d1;
  if (o->run_timeout_ms > 0) dbx_pb_duration_init_ms(&d2, o->run_timeout_ms), rq.workflow_run_timeout = &d2;
  if (o->task_timeout_ms > 0) dbx_pb_duration_init_ms(&d3, o->task_timeout_ms), rq.workflow_task_timeout = &d3;
  rq.identity = c->identity;
  rq.request_id = (char *)(o->request_id ? o->request_id : rid);
  rq.workflow_id_reuse_policy = o->id_reuse_policy;
  StartWorkflowExecutionResponse *rs = NULL;
  dbx_err rc = dbx_client_call(c, "StartWorkflowExecution", &rq.base,
                               &StartWorkflowExecutionResponse__D, 30000, NULL,
                               (ProtobufCMessage **)&rs, errmsg);
  if (rc == DBX_OK && run_id_out) {
    *run_id_out = dbx_strdup(rs->run_id);
    if (!*run_id_out) rc = DBX_ENOMEM;
  }
  dbx_client_msg_free(rs);
  dbx_payloads_free(rq.input);
  return rc;
}

typedef struct {
  GetWorkflowExecutionHistoryResponse **pages;
  size_t n;
} hist_priv;

void dbx_client_history_cleanup(dbx_client_history *h) {
  if (!h) return;
  hist_priv *p = h->priv_;
  if (p) {
    for (size_t i = 0; i < p->n; i++) dbx_client_msg_free(p->pages[i]);
    free(p->pages);
    free(p);
  }
  free(h->events);
  free(h->next_page_token);
  memset(h, 0, sizeof *h);
}

dbx_err dbx_client_get_history(dbx_client *c, const char *workflow_id, const char *run_id,
                               const dbx_client_history_opts *o, dbx_client_history *out,
                               char **errmsg) {
  if (errmsg) *errmsg = NULL;
  if (!c || !workflow_id || !out) return DBX_EINVAL;
  dbx_client_history_opts def = {0};
  if (!o) o = &def;
  hist_priv *p = dbx_calloc(1, sizeof *p);
  if (!p) return DBX_ENOMEM;
  out->priv_ = p;
  EXEC(workflow_id, run_id);
  uint8_t *token = NULL;
  size_t token_len = 0;
  if (o->page_token && o->page_token_len) {
    token = dbx_malloc(o->page_token_len);
    if (!token) return DBX_ENOMEM;
    memcpy(token, o->page_token, o->page_token_len);
    token_len = o->page_token_len;
  }
  int64_t tmo = o->timeout_ms > 0 ? o->timeout_ms : (o->wait_new_event ? 70000 : 30000);
  dbx_err rc = DBX_OK;
  for (;;) {
    GetWorkflowExecutionHistoryRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REQUEST);
    rq.namespace_ = c->ns;
    rq.execution = &ex;
    rq.next_page_token.data = token;
    rq.next_page_token.len = token_len;
    rq.wait_new_event = o->wait_new_event ? 1 : 0;
    rq.history_event_filter_type =
        o->close_event_only
            ? TEMPORAL__API__ENUMS__V1__HISTORY_EVENT_FILTER_TYPE__HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT
            : TEMPORAL__API__ENUMS__V1__HISTORY_EVENT_FILTER_TYPE__HISTORY_EVENT_FILTER_TYPE_ALL_EVENT;
    GetWorkflowExecutionHistoryResponse *rs = NULL;
    rc = dbx_client_call(c, "GetWorkflowExecutionHistory", &rq.base,
                         &GetWorkflowExecutionHistoryResponse__D, tmo, o->cancel,
                         (ProtobufCMessage **)&rs, errmsg);
    if (rc == DBX_ETIMEDOUT && o->wait_new_event && (token_len || o->close_event_only) &&
        !(o->cancel && dbx_rpc_cancel_fired(o->cancel))) {
      /* the long poll's answer (nothing new) came too late: an empty page,
       * and the token sent continues from the same place */
      if (errmsg) {
        free(*errmsg);
        *errmsg = NULL;
      }
      out->next_page_token = token;
      out->next_page_token_len = token_len;
      return DBX_OK;
    }
    free(token);
    token = NULL;
    token_len = 0;
    if (rc != DBX_OK) break;
    void *np = dbx_realloc(p->pages, (p->n + 1) * sizeof *p->pages);
    if (!np) {
      dbx_client_msg_free(rs);
      rc = DBX_ENOMEM;
      break;
    }
    p->pages = np;
    p->pages[p->n++] = rs;
    size_t add = rs->history ? rs->history->n_events : 0;
    if (add) {
      np = dbx_realloc(out->events, (out->n + add) * sizeof *out->events);
      if (!np) {
        rc = DBX_ENOMEM;
        break;
      }
      out->events = np;
      memcpy(out->events + out->n, rs->history->events, add * sizeof *out->events);
      out->n += add;
    }
    if (rs->next_page_token.len == 0) break;
    token = dbx_malloc(rs->next_page_token.len);
    if (!token) {
      rc = DBX_ENOMEM;
      break;
    }
    memcpy(token, rs->next_page_token.data, rs->next_page_token.len);
    token_len = rs->next_page_token.len;
    if (o->wait_new_event) {
      out->next_page_token = token;
      out->next_page_token_len = token_len;
      token = NULL;
      break;
    }
  }
  free(token);
  return rc;
}

dbx_err dbx_client_describe(dbx_client *c, const char *workflow_id, const char *run_id,
                            DescribeWorkflowExecutionResponse **out, char **errmsg) {
  if (!c || !workflow_id || !out) return DBX_EINVAL;
  EXEC(workflow_id, run_id);
  DescribeWorkflowExecutionRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_REQUEST);
  rq.namespace_ = c->ns;
  rq.execution = &ex;
  return dbx_client_call(c, "DescribeWorkflowExecution", &rq.base,
                         &DescribeWorkflowExecutionResponse__D, 30000, NULL,
                         (ProtobufCMessage **)out, errmsg);
}

dbx_err dbx_client_list(dbx_client *c, const char *query, int32_t page_size,
                        const uint8_t *page_token, size_t page_token_len,
                        ListWorkflowExecutionsResponse **out, char **errmsg) {
  if (!c || !out) return DBX_EINVAL;
  ListWorkflowExecutionsRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_REQUEST);
  rq.namespace_ = c->ns;
  rq.page_size = page_size;
  rq.next_page_token.data = (uint8_t *)page_token;
  rq.next_page_token.len = page_token ? page_token_len : 0;
  rq.query = (char *)(query ? query : "");
  return dbx_client_call(c, "ListWorkflowExecutions", &rq.base, &ListWorkflowExecutionsResponse__D,
                         30000, NULL, (ProtobufCMessage **)out, errmsg);
}

dbx_err dbx_client_signal(dbx_client *c, const char *workflow_id, const char *run_id,
                          const char *signal_name, const char *input_json, char **errmsg) {
  if (!c || !workflow_id || !signal_name) return DBX_EINVAL;
  EXEC(workflow_id, run_id);
  SignalWorkflowExecutionRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WORKFLOW_EXECUTION_REQUEST);
  char rid[DBX_UUID_LEN + 1];
  dbx_uuid_v4(rid); /* "" when the kernel has no randomness */
  rq.namespace_ = c->ns;
  rq.workflow_execution = &ex;
  rq.signal_name = (char *)signal_name;
  rq.input = payloads_opt(input_json);
  rq.identity = c->identity;
  rq.request_id = rid;
  ProtobufCMessage *rs = NULL;
  dbx_err rc = dbx_client_call(c, "SignalWorkflowExecution", &rq.base,
                               &SignalWorkflowExecutionResponse__D, 30000, NULL, &rs, errmsg);
  dbx_client_msg_free(rs);
  dbx_payloads_free(rq.input);
  return rc;
}

dbx_err dbx_client_cancel(dbx_client *c, const char *workflow_id, const char *run_id,
                          const char *reason, char **errmsg) {
  if (!c || !workflow_id) return DBX_EINVAL;
  EXEC(workflow_id, run_id);
  RequestCancelWorkflowExecutionRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__REQUEST_CANCEL_WORKFLOW_EXECUTION_REQUEST);
  char rid[DBX_UUID_LEN + 1];
  dbx_uuid_v4(rid); /* "" when the kernel has no randomness */
  rq.namespace_ = c->ns;
  rq.workflow_execution = &ex;
  rq.identity = c->identity;
  rq.request_id = rid;
  rq.reason = (char *)(reason ? reason : "");
  ProtobufCMessage *rs = NULL;
  dbx_err rc = dbx_client_call(c, "RequestCancelWorkflowExecution", &rq.base,
                               &RequestCancelWorkflowExecutionResponse__D, 30000, NULL, &rs, errmsg);
  dbx_client_msg_free(rs);
  return rc;
}

dbx_err dbx_client_terminate(dbx_client *c, const char *workflow_id, const char *run_id,
                             const char *reason, const char *details_json, char **errmsg) {
  if (!c || !workflow_id) return DBX_EINVAL;
  EXEC(workflow_id, run_id);
  TerminateWorkflowExecutionRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__TERMINATE_WORKFLOW_EXECUTION_REQUEST);
  rq.namespace_ = c->ns;
  rq.workflow_execution = &ex;
  rq.reason = (char *)(reason ? reason : "");
  rq.details = payloads_opt(details_json);
  rq.identity = c->identity;
  ProtobufCMessage *rs = NULL;
  dbx_err rc = dbx_client_call(c, "TerminateWorkflowExecution", &rq.base,
                               &TerminateWorkflowExecutionResponse__D, 30000, NULL, &rs, errmsg);
  dbx_client_msg_free(rs);
  dbx_payloads_free(rq.details);
  return rc;
}

dbx_err dbx_client_query(dbx_client *c, const char *workflow_id, const char *run_id,
                         const char *query_type, const char *args_json, char **result_json,
                         char **errmsg) {
  if (result_json) *result_json = NULL;
  if (!c || !workflow_id || !query_type || !result_json) return DBX_EINVAL;
  EXEC(workflow_id, run_id);
  QueryWorkflowRequest rq = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_REQUEST);
  WorkflowQuery q = INIT(TEMPORAL__API__QUERY__V1__WORKFLOW_QUERY);
  q.query_type = (char *)query_type;
  q.query_args = payloads_opt(args_json);
  rq.namespace_ = c->ns;
  rq.execution = &ex;
  rq.query = &q;
  QueryWorkflowResponse *rs = NULL;
  dbx_err rc = dbx_client_call(c, "QueryWorkflow", &rq.base, &QueryWorkflowResponse__D, 30000,
                               NULL, (ProtobufCMessage **)&rs, errmsg);
  if (rc == DBX_OK) {
    if (rs->query_rejected) {
      rc = DBX_ESTATE;
      set_msg(errmsg, dbx_asprintf("query rejected: workflow status %d", rs->query_rejected->status));
    } else {
      *result_json = dbx_payloads_to_json(rs->query_result);
      if (!*result_json) rc = DBX_ENOMEM;
    }
  }
  dbx_client_msg_free(rs);
  dbx_payloads_free(q.query_args);
  return rc;
}
