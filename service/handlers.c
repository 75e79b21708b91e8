/* RPC handlers of the embedded service (Temporal: WorkflowService).
 *
 * Each handler decodes its request, checks it (namespace, required fields,
 * UTF-8 of every string, task tokens), then reads and changes run state in the
 * batch transaction through state.c. A rejected request sets the job's gRPC
 * status and the engine drops everything it wrote. Semantics follow
 * Temporal's server as described in shared/reference/temporal-protocol.md
 * and docs/service.md: events written in Temporal's order, ActivityTaskStarted
 * written when the activity closes, retries with no events, buffered events
 * while a workflow task is started. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"
#include "service/visquery.h"


#define SERVER_VERSION "1.25.0"
#define NS_NOT_FOUND_URL "type.googleapis.com/temporal.api.errordetails.v1.NamespaceNotFoundFailure"
#define NOT_FOUND_URL "type.googleapis.com/temporal.api.errordetails.v1.NotFoundFailure"
#define ALREADY_STARTED_URL \
  "type.googleapis.com/temporal.api.errordetails.v1.WorkflowExecutionAlreadyStartedFailure"
#define QUERY_FAILED_URL "type.googleapis.com/temporal.api.errordetails.v1.QueryFailedFailure"
#define MAX_ID_BYTES 1000
#define HISTORY_PAGE_BYTES (4u << 20)

static void page_token_make(uint8_t out[16], int64_t from, int64_t upto);

/* ------------------------------------------------------------ validation */

static int utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (i + len > n) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

/* Walk every string field of m (recursively); on invalid UTF-8 write the
 * field's path into path and return 0. */
static int strings_valid(const ProtobufCMessage *m, char *path, size_t cap, size_t used, int depth) {
  if (m == NULL || depth > 40) return 1;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)m;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t cs = *(const uint32_t *)(base + f->quantifier_offset);
      if (cs != f->id) continue;
    }
    size_t count = 1;
    const void *ptr = base + f->offset;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      count = *(const size_t *)(base + f->quantifier_offset);
      ptr = *(void *const *)(base + f->offset);
      if (ptr == NULL) continue;
    }
    for (size_t k = 0; k < count; k++) {
      int bad = 0;
      if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *s = ((const char *const *)ptr)[k];
        if (s && !utf8_valid((const uint8_t *)s, strlen(s))) bad = 1;
      } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessage *sub = ((const ProtobufCMessage *const *)ptr)[k];
        size_t n = used;
        if (sub) {
          n += (size_t)snprintf(path + used, used < cap ? cap - used : 0, "%s%s", used ? "." : "", f->name);
          if (!strings_valid(sub, path, cap, n < cap ? n : cap - 1, depth + 1)) return 0;
          if (used < cap) path[used] = '\0';
        }
      }
      if (bad) {
        snprintf(path + used, used < cap ? cap - used : 0, "%s%s", used ? "." : "", f->name);
        return 0;
      }
    }
  }
  return 1;
}

/* Decode the request of method into *out; on failure set the job's status. */
static void *decode(job *j, const ProtobufCMessageDescriptor *d) {
  size_t len = 0;
  const uint8_t *b = dbx_rpc_call_request(j->call, &len);
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, b);
  if (m == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "malformed %s: cannot decode %zu bytes as %s", j->method, len,
             d->name);
    return NULL;
  }
  char path[256] = "";
  if (!strings_valid(m, path, sizeof path, 0, 0)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: field %s is not valid UTF-8", j->method, path);
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}

static int check_ns(ectx *c, job *j, const char *ns) {
  if (ns == NULL || ns[0] == '\0') {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: namespace is required", j->method);
    return 0;
  }
  if (!svc_ns_known(c->svc, ns)) {
    NamespaceNotFoundFailure d = INIT(TEMPORAL__API__ERRORDETAILS__V1__NAMESPACE_NOT_FOUND_FAILURE);
    d.namespace_ = (char *)ns;
    svc_job_fail_detail(j, DBX_GRPC_NOT_FOUND, &d.base, NS_NOT_FOUND_URL, "Namespace %s is not found.", ns);
    return 0;
  }
  return 1;
}

static int check_id(job *j, const char *what, const char *v) {
  if (v == NULL || v[0] == '\0') {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s is required", j->method, what);
    return 0;
  }
  if (strlen(v) > MAX_ID_BYTES) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s is longer than %d bytes", j->method, what, MAX_ID_BYTES);
    return 0;
  }
  return 1;
}

static void fail_not_found(job *j, const char *fmt, const char *a, const char *b) {
  NotFoundFailure d = INIT(TEMPORAL__API__ERRORDETAILS__V1__NOT_FOUND_FAILURE);
  svc_job_fail_detail(j, DBX_GRPC_NOT_FOUND, &d.base, NOT_FOUND_URL, fmt, a, b);
}

/* Resolve (ns, execution) to a loaded run; run_id "" = current run. */
static dbx_err load_execution(ectx *c, job *j, const char *ns, const WorkflowExecution *we, RunState **out) {
  *out = NULL;
  if (!check_id(j, "workflow_execution.workflow_id", we ? we->workflow_id : NULL)) return DBX_OK;
  char *rid = NULL;
  dbx_err rc;
  if (we->run_id && we->run_id[0]) {
    rid = dbx_strdup(we->run_id);
  } else {
    rc = svc_current_run_id(c, ns, we->workflow_id, &rid);
    if (rc == DBX_ENOTFOUND) {
      fail_not_found(j, "workflow execution not found: workflow id %s%s", we->workflow_id, "");
      return DBX_OK;
    }
    if (rc != DBX_OK) return rc;
  }
  if (rid == NULL) return DBX_ENOMEM;
  rc = svc_run_load(c, ns, we->workflow_id, rid, out);
  if (rc == DBX_ENOTFOUND) {
    fail_not_found(j, "workflow execution not found: workflow id %s, run id %s", we->workflow_id, rid);
    rc = DBX_OK;
  }
  free(rid);
  return rc;
}

/* ------------------------------------------------------------ task tokens */

static int token_pack(const TaskToken *t, ProtobufCBinaryData *out) {
  size_t n = protobuf_c_message_get_packed_size(&t->base);
  out->data = malloc(n ? n : 1);
  if (out->data == NULL) return -1;
  protobuf_c_message_pack(&t->base, out->data);
  out->len = n;
  return 0;
}

static TaskToken *token_decode(job *j, ProtobufCBinaryData tok, int kind) {
  TaskToken *t = tok.len ? (TaskToken *)protobuf_c_message_unpack(&TaskToken__D, NULL, tok.len, tok.data) : NULL;
  if (t == NULL || t->kind != kind || t->namespace_[0] == '\0' || t->workflow_id[0] == '\0' ||
      t->run_id[0] == '\0' || t->scheduled_event_id <= 0) {
    if (t) protobuf_c_message_free_unpacked(&t->base, NULL);
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: task_token is malformed (not a token this service issued)",
             j->method);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------------------ system, namespaces */

static dbx_err h_get_system_info(ectx *c, job *j) {
  (void)c;
  GetSystemInfoResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE);
  Temporal__Api__Workflowservice__V1__GetSystemInfoResponse__Capabilities cap =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_SYSTEM_INFO_RESPONSE__CAPABILITIES);
  cap.signal_and_query_header = 1;
  cap.internal_error_differentiation = 1;
  cap.activity_failure_include_heartbeat = 1;
  cap.supports_schedules = 1;
  cap.encoded_failure_attributes = 1;
  cap.build_id_based_versioning = 1;
  cap.upsert_memo = 1;
  cap.eager_workflow_start = 1;
  cap.sdk_metadata = 1;
  cap.count_group_by_execution_status = 1;
  r.server_version = SERVER_VERSION;
  r.capabilities = &cap;
  svc_job_reply(j, &r.base);
  return DBX_OK;
}

static void fill_ns_info(dbx_service *s, size_t i, NamespaceInfo *info, NamespaceConfig *cfg, Duration *ttl) {
  info->name = s->namespaces[i].name;
  info->id = s->namespaces[i].id;
  info->state = TEMPORAL__API__ENUMS__V1__NAMESPACE_STATE__NAMESPACE_STATE_REGISTERED;
  ttl->seconds = 24 * 3600;
  cfg->workflow_execution_retention_ttl = ttl;
}

static dbx_err h_describe_namespace(ectx *c, job *j) {
  DescribeNamespaceRequest *q = decode(j, &DescribeNamespaceRequest__D);
  if (q == NULL) return DBX_OK;
  size_t idx = SIZE_MAX;
  for (size_t i = 0; i < c->svc->n_namespaces; i++)
    if ((q->namespace_[0] && strcmp(c->svc->namespaces[i].name, q->namespace_) == 0) ||
        (q->namespace_[0] == '\0' && q->id[0] && strcmp(c->svc->namespaces[i].id, q->id) == 0))
      idx = i;
  if (idx == SIZE_MAX) {
    check_ns(c, j, q->namespace_[0] ? q->namespace_ : q->id);
  } else {
    DescribeNamespaceResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_RESPONSE);
    NamespaceInfo info = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_INFO);
    NamespaceConfig cfg = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_CONFIG);
    Duration ttl = INIT(GOOGLE__PROTOBUF__DURATION);
    fill_ns_info(c->svc, idx, &info, &cfg, &ttl);
    r.namespace_info = &info;
    r.config = &cfg;
    svc_job_reply(j, &r.base);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

static dbx_err h_list_namespaces(ectx *c, job *j) {
  ListNamespacesRequest *q = decode(j, &ListNamespacesRequest__D);
  if (q == NULL) return DBX_OK;
  size_t n = c->svc->n_namespaces;
  DescribeNamespaceResponse *items = calloc(n, sizeof *items);
  DescribeNamespaceResponse **ptrs = calloc(n, sizeof *ptrs);
  NamespaceInfo *infos = calloc(n, sizeof *infos);
  NamespaceConfig *cfgs = calloc(n, sizeof *cfgs);
  Duration *ttls = calloc(n, sizeof *ttls);
  if (items && ptrs && infos && cfgs && ttls) {
    for (size_t i = 0; i < n; i++) {
      DescribeNamespaceResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_NAMESPACE_RESPONSE);
      NamespaceInfo info = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_INFO);
      NamespaceConfig cfg = INIT(TEMPORAL__API__NAMESPACE__V1__NAMESPACE_CONFIG);
      Duration ttl = INIT(GOOGLE__PROTOBUF__DURATION);
      items[i] = r;
      infos[i] = info;
      cfgs[i] = cfg;
      ttls[i] = ttl;
      fill_ns_info(c->svc, i, &infos[i], &cfgs[i], &ttls[i]);
      items[i].namespace_info = &infos[i];
      items[i].config = &cfgs[i];
      ptrs[i] = &items[i];
    }
    ListNamespacesResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_NAMESPACES_RESPONSE);
    r.n_namespaces = n;
    r.namespaces = ptrs;
    svc_job_reply(j, &r.base);
  } else {
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "out of memory");
  }
  free(items);
  free(ptrs);
  free(infos);
  free(cfgs);
  free(ttls);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

static dbx_err h_empty(ectx *c, job *j, const ProtobufCMessageDescriptor *d) {
  (void)c;
  void *q = decode(j, d);
  if (q == NULL) return DBX_OK;
  protobuf_c_message_free_unpacked(q, NULL);
  j->status = DBX_GRPC_OK; /* an empty message: zero bytes */
  return DBX_OK;
}

/* ------------------------------------------------------------ start */

typedef struct {
  const char *ns, *workflow_id, *request_id, *identity;
  WorkflowType *type;
  TaskQueue *task_queue;
  Payloads *input;
  Duration *exec_timeout, *run_timeout, *task_timeout, *start_delay;
  int reuse_policy, conflict_policy;
  RetryPolicy *retry_policy;
  const char *cron;
  Memo *memo;
  SearchAttributes *search_attributes;
  Header *header;
  HistoryEvent *signal; /* signal-with-start */
} start_args;

/* Start a run or decide it exists. *run_id_out: malloc'd run id (new or
 * existing); *started: 1 if a new run was created. Sets the job status when
 * the start is refused. */
static dbx_err start_common(ectx *c, job *j, const start_args *a, char **run_id_out, int *started) {
  *run_id_out = NULL;
  *started = 0;
  if (!check_ns(c, j, a->ns) || !check_id(j, "workflow_id", a->workflow_id)) return DBX_OK;
  if (!check_id(j, "workflow_type.name", a->type ? a->type->name : NULL)) return DBX_OK;
  if (!check_id(j, "task_queue.name", a->task_queue ? a->task_queue->name : NULL)) return DBX_OK;
  if (a->request_id && strlen(a->request_id) > MAX_ID_BYTES) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: request_id is longer than %d bytes", j->method, MAX_ID_BYTES);
    return DBX_OK;
  }
  const Duration *ds[] = {a->exec_timeout, a->run_timeout, a->task_timeout, a->start_delay};
  const char *dn[] = {"workflow_execution_timeout", "workflow_run_timeout", "workflow_task_timeout",
                      "workflow_start_delay"};
  for (int i = 0; i < 4; i++) {
    if (ds[i] && svc_duration_ms(ds[i]) < 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s is negative", j->method, dn[i]);
      return DBX_OK;
    }
  }
  char *cur = NULL;
  RunState *old = NULL;
  dbx_err rc = svc_current_run_id(c, a->ns, a->workflow_id, &cur);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  if (cur) {
    rc = svc_run_load(c, a->ns, a->workflow_id, cur, &old);
    free(cur);
    if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  }
  if (old) {
    int running = old->status == WS(RUNNING);
    if (running) {
      /* a retried request with the same request id gets the same run */
      if (a->request_id && a->request_id[0] && strcmp(old->start_request_id, a->request_id) == 0) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      int conflict = a->conflict_policy;
      if (a->reuse_policy == 4 /* TERMINATE_IF_RUNNING */) conflict = 3;
      if (conflict == 2 /* USE_EXISTING */) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      if (conflict == 3 /* TERMINATE_EXISTING */) {
        if (svc_run_terminate(c, old, "terminated by a new start (id conflict policy)", a->identity) != 0) {
          svc_runstate_free(old);
          return DBX_ESTORE;
        }
      } else {
        WorkflowExecutionAlreadyStartedFailure d =
            INIT(TEMPORAL__API__ERRORDETAILS__V1__WORKFLOW_EXECUTION_ALREADY_STARTED_FAILURE);
        d.start_request_id = old->start_request_id;
        d.run_id = old->run_id;
        svc_job_fail_detail(j, DBX_GRPC_ALREADY_EXISTS, &d.base, ALREADY_STARTED_URL,
                        "Workflow execution is already running. WorkflowId: %s, RunId: %s.", old->workflow_id,
                        old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
    } else {
      int reuse = a->reuse_policy ? a->reuse_policy : 1;
      int failed = old->status == WS(FAILED) || old->status == WS(CANCELED) || old->status == WS(TERMINATED) ||
                   old->status == WS(TIMED_OUT);
      if (a->request_id && a->request_id[0] && strcmp(old->start_request_id, a->request_id) == 0) {
        *run_id_out = dbx_strdup(old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
      if (reuse == 3 || (reuse == 2 && !failed)) {
        WorkflowExecutionAlreadyStartedFailure d =
            INIT(TEMPORAL__API__ERRORDETAILS__V1__WORKFLOW_EXECUTION_ALREADY_STARTED_FAILURE);
        d.start_request_id = old->start_request_id;
        d.run_id = old->run_id;
        svc_job_fail_detail(j, DBX_GRPC_ALREADY_EXISTS, &d.base, ALREADY_STARTED_URL,
                        "Workflow execution already finished and its id reuse policy does not allow a new "
                        "run. WorkflowId: %s, RunId: %s.",
                        old->workflow_id, old->run_id);
        svc_runstate_free(old);
        return DBX_OK;
      }
    }
    svc_runstate_free(old);
  }
  char *run_id = svc_new_uuid();
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
  if (run_id == NULL || ev == NULL) {
    free(run_id);
    svc_history_event_free(ev);
    return DBX_ENOMEM;
  }
  WorkflowExecutionStartedEventAttributes *st = ev->workflow_execution_started_event_attributes;
  /* borrowed pointers in a stack-like attribute set; cleared before freeing */
  st->workflow_type = a->type;
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = a->task_queue->name;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  st->task_queue = &tq;
  st->input = a->input;
  st->workflow_execution_timeout = a->exec_timeout;
  st->workflow_run_timeout = a->run_timeout;
  st->workflow_task_timeout = a->task_timeout;
  st->first_workflow_task_backoff = a->start_delay;
  st->identity = (char *)(a->identity ? a->identity : "");
  st->retry_policy = a->retry_policy;
  st->cron_schedule = (char *)(a->cron ? a->cron : "");
  st->memo = a->memo;
  st->search_attributes = a->search_attributes;
  st->header = a->header;
  st->attempt = 1;
  run_start_args ra = {.ns = a->ns,
                       .workflow_id = a->workflow_id,
                       .run_id = run_id,
                       .request_id = a->request_id,
                       .started = st,
                       .after_started = a->signal};
  RunState *rs = NULL;
  rc = svc_run_start(c, &ra, &rs);
  memset(st, 0, sizeof *st); /* everything in it was borrowed */
  protobuf_c_message_init(&WorkflowExecutionStartedEventAttributes__D, st);
  svc_history_event_free(ev);
  svc_runstate_free(rs);
  if (rc != DBX_OK) {
    free(run_id);
    return rc;
  }
  *run_id_out = run_id;
  *started = 1;
  return DBX_OK;
}

static dbx_err h_start(ectx *c, job *j) {
  StartWorkflowExecutionRequest *q = decode(j, &StartWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  start_args a = {.ns = q->namespace_,
                  .workflow_id = q->workflow_id,
                  .request_id = q->request_id,
                  .identity = q->identity,
                  .type = q->workflow_type,
                  .task_queue = q->task_queue,
                  .input = q->input,
                  .exec_timeout = q->workflow_execution_timeout,
                  .run_timeout = q->workflow_run_timeout,
                  .task_timeout = q->workflow_task_timeout,
                  .start_delay = q->workflow_start_delay,
                  .reuse_policy = q->workflow_id_reuse_policy,
                  .conflict_policy = q->workflow_id_conflict_policy,
                  .retry_policy = q->retry_policy,
                  .cron = q->cron_schedule,
                  .memo = q->memo,
                  .search_attributes = q->search_attributes,
                  .header = q->header};
  char *run_id = NULL;
  int started = 0;
  dbx_err rc = start_common(c, j, &a, &run_id, &started);
  if (rc == DBX_OK && run_id) {
    StartWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__START_WORKFLOW_EXECUTION_RESPONSE);
    r.run_id = run_id;
    r.started = started;
    r.status = WS(RUNNING);
    svc_job_reply(j, &r.base);
  }
  free(run_id);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ polls */

static void park_poll(ectx *c, job *j, const char *ns, const char *tq, int kind) {
  svc_job_reset(j);
  j->park = PARK_POLL;
  j->park_key = svc_queue_key(ns, tq, kind, &j->park_key_len);
  int64_t now = dbx_mono_ns();
  int64_t until = now + c->svc->long_poll_ms * 1000000;
  int64_t dl = dbx_rpc_call_deadline_mono_ns(j->call);
  if (dl != INT64_MAX && dl - 500000000LL < until) until = dl - 500000000LL; /* answer before the client gives up */
  if (until < now) until = now;
  j->park_deadline_ns = until;
  /* the reply at the deadline is an empty message (no task) */
}

/* Take the first queued task of (ns, tq, kind), deleting it. *out NULL if none. */
static dbx_err take_task(ectx *c, const char *ns, const char *tq, int kind, TaskRecord **out) {
  *out = NULL;
  size_t pl;
  char *prefix = svc_queue_key(ns, tq, kind, &pl);
  if (prefix == NULL) return DBX_ENOMEM;
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_tasks, &cur);
  if (rc != DBX_OK) {
    free(prefix);
    return rc;
  }
  dbx_val k, v;
  rc = dbx_store_cursor_seek(cur, prefix, pl, &k, &v);
  if (rc == DBX_OK && k.size == pl + 9 && memcmp(k.data, prefix, pl) == 0 && ((const char *)k.data)[pl] == 0) {
    *out = (TaskRecord *)protobuf_c_message_unpack(&TaskRecord__D, NULL, v.size, v.data);
    rc = dbx_store_cursor_del(cur);
    if (rc == DBX_OK && *out == NULL) rc = DBX_ESTORE;
  } else if (rc == DBX_OK || rc == DBX_ENOTFOUND) {
    rc = DBX_OK;
  }
  dbx_store_cursor_close(cur);
  free(prefix);
  if (rc != DBX_OK && *out) {
    protobuf_c_message_free_unpacked(&(*out)->base, NULL);
    *out = NULL;
  }
  return rc;
}

static int64_t history_suggest_can(ectx *c, RunState *rs) {
  return (rs->next_event_id - 1 >= c->svc->limits.count_suggest_can) ||
         (rs->history_size_bytes >= c->svc->limits.size_suggest_can_bytes);
}

static dbx_err try_dispatch_query(ectx *c, job *j, const char *ns, const char *tq, int *done);

static dbx_err h_poll_workflow(ectx *c, job *j) {
  PollWorkflowTaskQueueRequest *q = decode(j, &PollWorkflowTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  if (!check_id(j, "task_queue.name", q->task_queue ? q->task_queue->name : NULL)) goto out;
  if (q->task_queue->kind == TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_STICKY) {
    /* stickiness is not used: the normal queue carries every task with full history */
    park_poll(c, j, q->namespace_, "\x01sticky", TASK_WORKFLOW);
    goto out;
  }
  int done = 0;
  rc = try_dispatch_query(c, j, q->namespace_, q->task_queue->name, &done);
  if (rc != DBX_OK || done) goto out;
  for (;;) {
    TaskRecord *tr = NULL;
    rc = take_task(c, q->namespace_, q->task_queue->name, TASK_WORKFLOW, &tr);
    if (rc != DBX_OK) goto out;
    if (tr == NULL) {
      park_poll(c, j, q->namespace_, q->task_queue->name, TASK_WORKFLOW);
      goto out;
    }
    RunState *rs = NULL;
    rc = svc_run_load(c, q->namespace_, tr->workflow_id, tr->run_id, &rs);
    int valid = rc == DBX_OK && rs->status == WS(RUNNING) && rs->wft_scheduled_event_id == tr->scheduled_event_id &&
                rs->wft_started_event_id == 0;
    protobuf_c_message_free_unpacked(&tr->base, NULL);
    if (rc == DBX_ENOTFOUND || (rc == DBX_OK && !valid)) {
      svc_runstate_free(rs);
      rc = DBX_OK;
      continue; /* stale task */
    }
    if (rc != DBX_OK) goto out;
    /* start the workflow task */
    HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_STARTED));
    char *req_id = svc_new_uuid();
    if (ev == NULL || req_id == NULL) {
      svc_history_event_free(ev);
      free(req_id);
      svc_runstate_free(rs);
      rc = DBX_ENOMEM;
      goto out;
    }
    WorkflowTaskStartedEventAttributes *a = ev->workflow_task_started_event_attributes;
    a->scheduled_event_id = rs->wft_scheduled_event_id;
    a->identity = svc_pb_strdup(q->identity);
    a->request_id = req_id;
    a->suggest_continue_as_new = (protobuf_c_boolean)history_suggest_can(c, rs);
    a->history_size_bytes = rs->history_size_bytes;
    rc = svc_event_append(c, rs, ev, 0);
    if (rc == DBX_OK) {
      rs->wft_started_event_id = ev->event_id;
      rs->wft_started_time_ns = c->now_ns;
      svc_pb_setstr(&rs->wft_request_id, req_id);
      svc_pb_setstr(&rs->wft_identity, q->identity);
      rc = svc_timer_add(c, c->now_ns + rs->task_timeout_ms * 1000000, TK_WFT_START_TO_CLOSE, rs,
                     rs->wft_scheduled_event_id, rs->wft_attempt, NULL);
    }
    svc_history_event_free(ev);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc != DBX_OK) {
      svc_runstate_free(rs);
      goto out;
    }
    /* the reply: the whole history (first page) */
    PollWorkflowTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
    TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
    tok.kind = TASK_WORKFLOW;
    tok.namespace_ = rs->namespace_;
    tok.workflow_id = rs->workflow_id;
    tok.run_id = rs->run_id;
    tok.scheduled_event_id = rs->wft_scheduled_event_id;
    tok.started_event_id = rs->wft_started_event_id;
    tok.attempt = rs->wft_attempt;
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = rs->workflow_id;
    we.run_id = rs->run_id;
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = rs->workflow_type;
    TaskQueue wtq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
    wtq.name = rs->task_queue;
    wtq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    uint8_t *hist = NULL;
    size_t hist_len = 0;
    int64_t last_id = 0;
    Timestamp *ts_sched = svc_timestamp_new_ns(rs->wft_scheduled_time_ns);
    Timestamp *ts_start = svc_timestamp_new_ns(c->now_ns);
    /* the history, first page, spliced in from the stored bytes */
    rc = svc_history_encode(c, rs->run_seq, 1, rs->wft_started_event_id, HISTORY_PAGE_BYTES, &hist, &hist_len, &last_id);
    uint8_t page_tok[16];
    if (rc == DBX_OK && token_pack(&tok, &r.task_token) == 0) {
      r.workflow_execution = &we;
      r.workflow_type = &wt;
      r.previous_started_event_id = rs->last_wft_started_event_id;
      r.started_event_id = rs->wft_started_event_id;
      r.attempt = rs->wft_attempt;
      r.workflow_execution_task_queue = &wtq;
      r.scheduled_time = ts_sched;
      r.started_time = ts_start;
      if (last_id < rs->wft_started_event_id) {
        /* page token: next event id + the last id of this task's history, for GetWorkflowExecutionHistory */
        page_token_make(page_tok, last_id + 1, rs->wft_started_event_id);
        r.next_page_token.data = page_tok;
        r.next_page_token.len = 16;
      }
      svc_job_reply_field(j, &r.base, 8 /* history */, hist, hist_len);
      free(r.task_token.data);
    } else if (rc == DBX_OK) {
      rc = DBX_ENOMEM;
    }
    free(hist);
    free(ts_sched);
    free(ts_start);
    svc_runstate_free(rs);
    goto out;
  }
out:
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_poll_activity(ectx *c, job *j) {
  PollActivityTaskQueueRequest *q = decode(j, &PollActivityTaskQueueRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  if (!check_id(j, "task_queue.name", q->task_queue ? q->task_queue->name : NULL)) goto out;
  for (;;) {
    TaskRecord *tr = NULL;
    rc = take_task(c, q->namespace_, q->task_queue->name, TASK_ACTIVITY, &tr);
    if (rc != DBX_OK) goto out;
    if (tr == NULL) {
      park_poll(c, j, q->namespace_, q->task_queue->name, TASK_ACTIVITY);
      goto out;
    }
    RunState *rs = NULL;
    rc = svc_run_load(c, q->namespace_, tr->workflow_id, tr->run_id, &rs);
    ActivityInfo *ai = rc == DBX_OK ? svc_activity_find(rs, tr->scheduled_event_id) : NULL;
    int valid = ai && rs->status == WS(RUNNING) && ai->attempt == tr->attempt && ai->started_time_ns == 0;
    protobuf_c_message_free_unpacked(&tr->base, NULL);
    if (rc == DBX_ENOTFOUND || (rc == DBX_OK && !valid)) {
      svc_runstate_free(rs);
      rc = DBX_OK;
      continue;
    }
    if (rc != DBX_OK) goto out;
    ai->started_time_ns = c->now_ns;
    ai->queued = 0;
    svc_pb_setstr(&ai->started_identity, q->identity);
    char *req = svc_new_uuid();
    if (req) {
      svc_pb_setstr(&ai->started_request_id, req);
      free(req);
    }
    if (ai->start_to_close_ms > 0)
      rc = svc_timer_add(c, c->now_ns + ai->start_to_close_ms * 1000000, TK_ACTIVITY_START_TO_CLOSE, rs,
                     ai->scheduled_event_id, ai->attempt, NULL);
    if (rc == DBX_OK && ai->heartbeat_ms > 0)
      rc = svc_timer_add(c, c->now_ns + ai->heartbeat_ms * 1000000, TK_ACTIVITY_HEARTBEAT, rs, ai->scheduled_event_id,
                     ai->attempt, NULL);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc != DBX_OK) {
      svc_runstate_free(rs);
      goto out;
    }
    /* the scheduled event holds input and header */
    HistoryEvent *sev = NULL;
    rc = svc_event_load_one(c, rs->run_seq, ai->scheduled_event_id, &sev);
    if (rc != DBX_OK) {
      svc_runstate_free(rs);
      goto out;
    }
    ActivityTaskScheduledEventAttributes *sa = sev->activity_task_scheduled_event_attributes;
    PollActivityTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_ACTIVITY_TASK_QUEUE_RESPONSE);
    TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
    tok.kind = TASK_ACTIVITY;
    tok.namespace_ = rs->namespace_;
    tok.workflow_id = rs->workflow_id;
    tok.run_id = rs->run_id;
    tok.scheduled_event_id = ai->scheduled_event_id;
    tok.attempt = ai->attempt;
    tok.activity_id = ai->activity_id;
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = rs->workflow_id;
    we.run_id = rs->run_id;
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = rs->workflow_type;
    ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
    at.name = ai->activity_type;
    Duration d1 = INIT(GOOGLE__PROTOBUF__DURATION), d2 = d1, d3 = d1;
    d1.seconds = ai->schedule_to_close_ms / 1000;
    d1.nanos = (int32_t)(ai->schedule_to_close_ms % 1000) * 1000000;
    d2.seconds = ai->start_to_close_ms / 1000;
    d2.nanos = (int32_t)(ai->start_to_close_ms % 1000) * 1000000;
    d3.seconds = ai->heartbeat_ms / 1000;
    d3.nanos = (int32_t)(ai->heartbeat_ms % 1000) * 1000000;
    Timestamp t1 = INIT(GOOGLE__PROTOBUF__TIMESTAMP), t2 = t1, t3 = t1;
    t1.seconds = ai->scheduled_time_ns / 1000000000;
    t1.nanos = (int32_t)(ai->scheduled_time_ns % 1000000000);
    t2.seconds = ai->attempt_scheduled_time_ns / 1000000000;
    t2.nanos = (int32_t)(ai->attempt_scheduled_time_ns % 1000000000);
    t3.seconds = c->now_ns / 1000000000;
    t3.nanos = (int32_t)(c->now_ns % 1000000000);
    if (token_pack(&tok, &r.task_token) != 0) {
      svc_history_event_free(sev);
      svc_runstate_free(rs);
      rc = DBX_ENOMEM;
      goto out;
    }
    r.workflow_namespace = rs->namespace_;
    r.workflow_type = &wt;
    r.workflow_execution = &we;
    r.activity_type = &at;
    r.activity_id = ai->activity_id;
    r.header = sa->header;
    r.input = sa->input;
    r.heartbeat_details = ai->heartbeat_details;
    r.scheduled_time = &t1;
    r.current_attempt_scheduled_time = &t2;
    r.started_time = &t3;
    r.attempt = ai->attempt;
    r.schedule_to_close_timeout = &d1;
    r.start_to_close_timeout = &d2;
    r.heartbeat_timeout = &d3;
    r.retry_policy = ai->retry_policy;
    svc_job_reply(j, &r.base);
    free(r.task_token.data);
    svc_history_event_free(sev);
    svc_runstate_free(rs);
    goto out;
  }
out:
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ workflow task completion */

/* Load the run a workflow task token names and check the task is current. */
static dbx_err load_wft(ectx *c, job *j, ProtobufCBinaryData token, RunState **out) {
  *out = NULL;
  TaskToken *t = token_decode(j, token, TASK_WORKFLOW);
  if (t == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(c, t->namespace_, t->workflow_id, t->run_id, &rs);
  if (rc == DBX_OK && (rs->status != WS(RUNNING) || rs->wft_scheduled_event_id != t->scheduled_event_id ||
                       rs->wft_started_event_id != t->started_event_id || rs->wft_attempt != t->attempt)) {
    svc_runstate_free(rs);
    rs = NULL;
    rc = DBX_ENOTFOUND;
  }
  if (rc == DBX_ENOTFOUND) {
    fail_not_found(j, "workflow task not found: it timed out, was completed, or the run closed (workflow id %s, run id %s)",
                   t->workflow_id, t->run_id);
    rc = DBX_OK;
  }
  protobuf_c_message_free_unpacked(&t->base, NULL);
  *out = rs;
  return rc;
}

static void fill_retry_policy(RetryPolicy *p) {
  if (p->initial_interval == NULL || svc_duration_ms(p->initial_interval) <= 0) {
    free(p->initial_interval);
    p->initial_interval = svc_duration_new_ms(1000);
  }
  if (p->backoff_coefficient < 1.0) p->backoff_coefficient = 2.0;
  if (p->maximum_interval == NULL || svc_duration_ms(p->maximum_interval) <= 0) {
    free(p->maximum_interval);
    p->maximum_interval = svc_duration_new_ms(100 * svc_duration_ms(p->initial_interval));
  }
}

static WorkflowExecution *we_new(const char *wfid, const char *run_id) {
  WorkflowExecution *we = svc_pb_new(&WorkflowExecution__D);
  if (we) {
    we->workflow_id = svc_pb_strdup(wfid);
    we->run_id = svc_pb_strdup(run_id);
  }
  return we;
}

/* Deliver a signal to a loaded run (buffered if its task is started). */
static dbx_err signal_run(ectx *c, RunState *rs, const char *name, const Payloads *input, const char *identity,
                          const Header *header, const char *request_id) {
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_SIGNALED));
  if (ev == NULL) return DBX_ENOMEM;
  WorkflowExecutionSignaledEventAttributes *a = ev->workflow_execution_signaled_event_attributes;
  a->signal_name = svc_pb_strdup(name);
  a->input = PB_CLONE(Payloads, input);
  a->identity = svc_pb_strdup(identity);
  a->header = PB_CLONE(Header, header);
  a->request_id = svc_pb_strdup(request_id);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  svc_history_event_free(ev);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

static dbx_err request_cancel_run(ectx *c, RunState *rs, const char *identity) {
  if (rs->cancel_requested) return DBX_OK;
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_CANCEL_REQUESTED));
  if (ev == NULL) return DBX_ENOMEM;
  ev->workflow_execution_cancel_requested_event_attributes->identity = svc_pb_strdup(identity);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  svc_history_event_free(ev);
  rs->cancel_requested = 1;
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  return rc;
}

dbx_err svc_child_request_cancel(ectx *c, const char *ns, const char *wfid) {
  char *cur = NULL;
  dbx_err rc = svc_current_run_id(c, ns, wfid, &cur);
  if (rc != DBX_OK) return rc == DBX_ENOTFOUND ? DBX_OK : rc;
  RunState *rs = NULL;
  rc = svc_run_load(c, ns, wfid, cur, &rs);
  free(cur);
  if (rc != DBX_OK) return rc == DBX_ENOTFOUND ? DBX_OK : rc;
  if (rs->status == WS(RUNNING)) {
    rc = request_cancel_run(c, rs, "durabox");
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  svc_runstate_free(rs);
  return rc;
}

/* Terminate a loaded running run (saves it). Returns 0 or -1. */
int svc_run_terminate(ectx *c, RunState *rs, const char *reason, const char *identity) {
  if (rs->status != WS(RUNNING)) return 0;
  dbx_err rc = DBX_OK;
  if (rs->wft_started_event_id > 0) {
    HistoryEvent *f = svc_event_new(ET(WORKFLOW_TASK_FAILED));
    if (f == NULL) return -1;
    f->workflow_task_failed_event_attributes->scheduled_event_id = rs->wft_scheduled_event_id;
    f->workflow_task_failed_event_attributes->started_event_id = rs->wft_started_event_id;
    f->workflow_task_failed_event_attributes->cause = WFC(FORCE_CLOSE_COMMAND);
    f->workflow_task_failed_event_attributes->identity = svc_pb_strdup(identity);
    rs->wft_started_event_id = 0;
    rc = svc_event_append(c, rs, f, 0);
    svc_history_event_free(f);
  }
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_EXECUTION_TERMINATED));
  if (ev == NULL) return -1;
  ev->workflow_execution_terminated_event_attributes->reason = svc_pb_strdup(reason);
  ev->workflow_execution_terminated_event_attributes->identity = svc_pb_strdup(identity);
  if (rc == DBX_OK) rc = svc_run_close(c, rs, ev, WS(TERMINATED));
  svc_history_event_free(ev);
  return rc == DBX_OK ? 0 : -1;
}

/* One command. *closed set when the run closed; *new_wft when the command led
 * to a non-command event (a new workflow task is needed). Sets the job status
 * on a bad command. */
static dbx_err apply_command(ectx *c, job *j, RunState *rs, Command *cmd, int64_t wft_completed_id,
                             const char *identity, int *closed, int *new_wft) {
  dbx_err rc = DBX_OK;
  HistoryEvent *ev = NULL;
  switch (cmd->attributes_case) {
  case CMD(SCHEDULE_ACTIVITY_TASK): {
    ScheduleActivityTaskCommandAttributes *a = cmd->schedule_activity_task_command_attributes;
    if (!check_id(j, "ScheduleActivityTask.activity_id", a->activity_id)) return DBX_OK;
    if (!check_id(j, "ScheduleActivityTask.activity_type.name", a->activity_type ? a->activity_type->name : NULL))
      return DBX_OK;
    for (size_t i = 0; i < rs->n_activities; i++)
      if (strcmp(rs->activities[i]->activity_id, a->activity_id) == 0) {
        svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ScheduleActivityTask: activity id %s is already pending", a->activity_id);
        return DBX_OK;
      }
    int64_t s2c = svc_duration_ms(a->schedule_to_close_timeout), s2s = svc_duration_ms(a->schedule_to_start_timeout),
            st2c = svc_duration_ms(a->start_to_close_timeout), hb = svc_duration_ms(a->heartbeat_timeout);
    if (s2c < 0 || s2s < 0 || st2c < 0 || hb < 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ScheduleActivityTask %s: a timeout is negative", a->activity_id);
      return DBX_OK;
    }
    if (s2c == 0 && st2c == 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
               "ScheduleActivityTask %s: either schedule_to_close_timeout or start_to_close_timeout is required",
               a->activity_id);
      return DBX_OK;
    }
    if (st2c == 0) st2c = s2c;
    if (s2c > 0 && st2c > s2c) st2c = s2c;
    if (s2s == 0 || (s2c > 0 && s2s > s2c)) s2s = s2c;
    if (hb > st2c) hb = st2c;
    ev = svc_event_new(ET(ACTIVITY_TASK_SCHEDULED));
    if (ev == NULL) return DBX_ENOMEM;
    ActivityTaskScheduledEventAttributes *e = ev->activity_task_scheduled_event_attributes;
    e->activity_id = svc_pb_strdup(a->activity_id);
    e->activity_type = PB_CLONE(ActivityType, a->activity_type);
    e->task_queue = svc_pb_new(&TaskQueue__D);
    if (e->task_queue) {
      e->task_queue->name = svc_pb_strdup(a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue);
      e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    }
    e->header = PB_CLONE(Header, a->header);
    e->input = PB_CLONE(Payloads, a->input);
    e->schedule_to_close_timeout = svc_duration_new_ms(s2c);
    e->schedule_to_start_timeout = svc_duration_new_ms(s2s);
    e->start_to_close_timeout = svc_duration_new_ms(st2c);
    e->heartbeat_timeout = svc_duration_new_ms(hb);
    e->workflow_task_completed_event_id = wft_completed_id;
    e->retry_policy = a->retry_policy ? PB_CLONE(RetryPolicy, a->retry_policy) : svc_pb_new(&RetryPolicy__D);
    if (e->retry_policy == NULL || e->task_queue == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    fill_retry_policy(e->retry_policy);
    rc = svc_event_append(c, rs, ev, 0);
    if (rc != DBX_OK) break;
    ActivityInfo *ai = svc_pb_new(&ActivityInfo__D);
    ActivityInfo **arr = realloc(rs->activities, (rs->n_activities + 1) * sizeof *arr);
    if (ai == NULL || arr == NULL) {
      free(ai);
      if (arr) rs->activities = arr;
      rc = DBX_ENOMEM;
      break;
    }
    rs->activities = arr;
    arr[rs->n_activities++] = ai;
    ai->scheduled_event_id = ev->event_id;
    ai->activity_id = svc_pb_strdup(a->activity_id);
    ai->activity_type = svc_pb_strdup(a->activity_type->name);
    ai->task_queue = svc_pb_strdup(e->task_queue->name);
    ai->attempt = 1;
    ai->scheduled_time_ns = c->now_ns;
    ai->attempt_scheduled_time_ns = c->now_ns;
    ai->schedule_to_close_ms = s2c;
    ai->schedule_to_start_ms = s2s;
    ai->start_to_close_ms = st2c;
    ai->heartbeat_ms = hb;
    ai->retry_policy = PB_CLONE(RetryPolicy, e->retry_policy);
    rc = svc_activity_queue_attempt(c, rs, ai);
    if (rc == DBX_OK && s2c > 0)
      rc = svc_timer_add(c, c->now_ns + s2c * 1000000, TK_ACTIVITY_SCHEDULE_TO_CLOSE, rs, ai->scheduled_event_id, 0, NULL);
    break;
  }
  case CMD(REQUEST_CANCEL_ACTIVITY_TASK): {
    int64_t sid = cmd->request_cancel_activity_task_command_attributes->scheduled_event_id;
    ActivityInfo *ai = svc_activity_find(rs, sid);
    if (ai == NULL) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RequestCancelActivityTask: no pending activity scheduled by event %lld",
               (long long)sid);
      return DBX_OK;
    }
    ev = svc_event_new(ET(ACTIVITY_TASK_CANCEL_REQUESTED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->activity_task_cancel_requested_event_attributes->scheduled_event_id = sid;
    ev->activity_task_cancel_requested_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    rc = svc_event_append(c, rs, ev, 0);
    if (rc != DBX_OK) break;
    if (ai->started_time_ns == 0) {
      HistoryEvent *cev = svc_event_new(ET(ACTIVITY_TASK_CANCELED));
      if (cev == NULL) return DBX_ENOMEM;
      cev->activity_task_canceled_event_attributes->scheduled_event_id = sid;
      cev->activity_task_canceled_event_attributes->latest_cancel_requested_event_id = ev->event_id;
      cev->activity_task_canceled_event_attributes->identity = svc_pb_strdup(identity);
      rc = svc_event_append(c, rs, cev, 0);
      svc_history_event_free(cev);
      svc_activity_remove(rs, sid);
      *new_wft = 1;
    } else {
      ai->cancel_requested = 1;
      ai->cancel_requested_event_id = ev->event_id;
    }
    break;
  }
  case CMD(START_TIMER): {
    StartTimerCommandAttributes *a = cmd->start_timer_command_attributes;
    if (!check_id(j, "StartTimer.timer_id", a->timer_id)) return DBX_OK;
    int64_t ms = svc_duration_ms(a->start_to_fire_timeout);
    if (ms <= 0) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartTimer %s: start_to_fire_timeout must be positive", a->timer_id);
      return DBX_OK;
    }
    if (svc_timer_find(rs, a->timer_id)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartTimer: timer id %s is already pending", a->timer_id);
      return DBX_OK;
    }
    ev = svc_event_new(ET(TIMER_STARTED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->timer_started_event_attributes->timer_id = svc_pb_strdup(a->timer_id);
    ev->timer_started_event_attributes->start_to_fire_timeout = svc_duration_new_ms(ms);
    ev->timer_started_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    rc = svc_event_append(c, rs, ev, 0);
    if (rc != DBX_OK) break;
    TimerInfo *ti = svc_pb_new(&TimerInfo__D);
    TimerInfo **arr = realloc(rs->timers, (rs->n_timers + 1) * sizeof *arr);
    if (ti == NULL || arr == NULL) {
      free(ti);
      if (arr) rs->timers = arr;
      rc = DBX_ENOMEM;
      break;
    }
    rs->timers = arr;
    arr[rs->n_timers++] = ti;
    ti->timer_id = svc_pb_strdup(a->timer_id);
    ti->started_event_id = ev->event_id;
    ti->fire_time_ns = c->now_ns + ms * 1000000;
    rc = svc_timer_add(c, ti->fire_time_ns, TK_USER_TIMER, rs, ev->event_id, 0, a->timer_id);
    break;
  }
  case CMD(CANCEL_TIMER): {
    const char *tid = cmd->cancel_timer_command_attributes->timer_id;
    TimerInfo *ti = svc_timer_find(rs, tid);
    if (ti == NULL) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "CancelTimer: no pending timer with id %s", tid);
      return DBX_OK;
    }
    ev = svc_event_new(ET(TIMER_CANCELED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->timer_canceled_event_attributes->timer_id = svc_pb_strdup(tid);
    ev->timer_canceled_event_attributes->started_event_id = ti->started_event_id;
    ev->timer_canceled_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    ev->timer_canceled_event_attributes->identity = svc_pb_strdup(identity);
    rc = svc_event_append(c, rs, ev, 0);
    svc_timer_remove(rs, tid);
    break;
  }
  case CMD(RECORD_MARKER): {
    RecordMarkerCommandAttributes *a = cmd->record_marker_command_attributes;
    if (!check_id(j, "RecordMarker.marker_name", a->marker_name)) return DBX_OK;
    ev = svc_event_new(ET(MARKER_RECORDED));
    if (ev == NULL) return DBX_ENOMEM;
    MarkerRecordedEventAttributes *e = ev->marker_recorded_event_attributes;
    /* same field numbers for name/details in both messages: copy via bytes */
    RecordMarkerCommandAttributes tmp = *a;
    size_t n = protobuf_c_message_get_packed_size(&tmp.base);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) return DBX_ENOMEM;
    protobuf_c_message_pack(&tmp.base, buf);
    MarkerRecordedEventAttributes *copy =
        (MarkerRecordedEventAttributes *)protobuf_c_message_unpack(&MarkerRecordedEventAttributes__D, NULL, n, buf);
    free(buf);
    if (copy == NULL) return DBX_ENOMEM;
    /* field 3 of the command is header, of the event workflow_task_completed_event_id: fix up */
    protobuf_c_message_free_unpacked(&e->base, NULL);
    ev->marker_recorded_event_attributes = copy;
    copy->workflow_task_completed_event_id = wft_completed_id;
    if (copy->header == NULL && a->header) copy->header = PB_CLONE(Header, a->header);
    if (copy->failure == NULL && a->failure) copy->failure = PB_CLONE(Failure, a->failure);
    rc = svc_event_append(c, rs, ev, 0);
    break;
  }
  case CMD(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES): {
    ev = svc_event_new(ET(UPSERT_WORKFLOW_SEARCH_ATTRIBUTES));
    if (ev == NULL) return DBX_ENOMEM;
    ev->upsert_workflow_search_attributes_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    ev->upsert_workflow_search_attributes_event_attributes->search_attributes =
        PB_CLONE(SearchAttributes, cmd->upsert_workflow_search_attributes_command_attributes->search_attributes);
    rc = svc_event_append(c, rs, ev, 0);
    break;
  }
  case CMD(MODIFY_WORKFLOW_PROPERTIES): {
    ev = svc_event_new(ET(WORKFLOW_PROPERTIES_MODIFIED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->workflow_properties_modified_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    ev->workflow_properties_modified_event_attributes->upserted_memo =
        PB_CLONE(Memo, cmd->modify_workflow_properties_command_attributes->upserted_memo);
    rc = svc_event_append(c, rs, ev, 0);
    break;
  }
  case CMD(COMPLETE_WORKFLOW_EXECUTION):
    ev = svc_event_new(ET(WORKFLOW_EXECUTION_COMPLETED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->workflow_execution_completed_event_attributes->result =
        PB_CLONE(Payloads, cmd->complete_workflow_execution_command_attributes->result);
    ev->workflow_execution_completed_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    rc = svc_run_close(c, rs, ev, WS(COMPLETED));
    *closed = 1;
    break;
  case CMD(FAIL_WORKFLOW_EXECUTION):
    ev = svc_event_new(ET(WORKFLOW_EXECUTION_FAILED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->workflow_execution_failed_event_attributes->failure =
        PB_CLONE(Failure, cmd->fail_workflow_execution_command_attributes->failure);
    ev->workflow_execution_failed_event_attributes->retry_state = RS(RETRY_POLICY_NOT_SET);
    ev->workflow_execution_failed_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    rc = svc_run_close(c, rs, ev, WS(FAILED));
    *closed = 1;
    break;
  case CMD(CANCEL_WORKFLOW_EXECUTION):
    ev = svc_event_new(ET(WORKFLOW_EXECUTION_CANCELED));
    if (ev == NULL) return DBX_ENOMEM;
    ev->workflow_execution_canceled_event_attributes->details =
        PB_CLONE(Payloads, cmd->cancel_workflow_execution_command_attributes->details);
    ev->workflow_execution_canceled_event_attributes->workflow_task_completed_event_id = wft_completed_id;
    rc = svc_run_close(c, rs, ev, WS(CANCELED));
    *closed = 1;
    break;
  case CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION): {
    ContinueAsNewWorkflowExecutionCommandAttributes *a = cmd->continue_as_new_workflow_execution_command_attributes;
    char *new_run = svc_new_uuid();
    ev = svc_event_new(ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
    HistoryEvent *sev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
    if (new_run == NULL || ev == NULL || sev == NULL) {
      free(new_run);
      svc_history_event_free(sev);
      rc = DBX_ENOMEM;
      break;
    }
    WorkflowExecutionContinuedAsNewEventAttributes *e = ev->workflow_execution_continued_as_new_event_attributes;
    e->new_execution_run_id = svc_pb_strdup(new_run);
    e->workflow_type = svc_pb_new(&WorkflowType__D);
    e->task_queue = svc_pb_new(&TaskQueue__D);
    if (e->workflow_type) e->workflow_type->name = svc_pb_strdup(a->workflow_type && a->workflow_type->name[0] ? a->workflow_type->name : rs->workflow_type);
    if (e->task_queue) {
      e->task_queue->name = svc_pb_strdup(a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue);
      e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    }
    e->input = PB_CLONE(Payloads, a->input);
    e->workflow_run_timeout = a->workflow_run_timeout ? PB_CLONE(Duration, a->workflow_run_timeout) : svc_duration_new_ms(rs->run_timeout_ms);
    e->workflow_task_timeout = a->workflow_task_timeout ? PB_CLONE(Duration, a->workflow_task_timeout) : svc_duration_new_ms(rs->task_timeout_ms);
    e->workflow_task_completed_event_id = wft_completed_id;
    e->backoff_start_interval = PB_CLONE(Duration, a->backoff_start_interval);
    e->initiator = a->initiator;
    e->header = PB_CLONE(Header, a->header);
    e->memo = PB_CLONE(Memo, a->memo);
    e->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
    e->last_completion_result = PB_CLONE(Payloads, a->last_completion_result);
    e->failure = PB_CLONE(Failure, a->failure);
    svc_pb_setstr(&rs->new_execution_run_id, new_run);
    rc = svc_run_close(c, rs, ev, WS(CONTINUED_AS_NEW));
    if (rc == DBX_OK) {
      WorkflowExecutionStartedEventAttributes *st = sev->workflow_execution_started_event_attributes;
      st->workflow_type = PB_CLONE(WorkflowType, e->workflow_type);
      st->task_queue = PB_CLONE(TaskQueue, e->task_queue);
      st->input = PB_CLONE(Payloads, a->input);
      st->workflow_run_timeout = rs->run_timeout_ms > 0 || a->workflow_run_timeout ? PB_CLONE(Duration, e->workflow_run_timeout) : NULL;
      st->workflow_task_timeout = PB_CLONE(Duration, e->workflow_task_timeout);
      st->workflow_execution_timeout = rs->execution_timeout_ms > 0 ? svc_duration_new_ms(rs->execution_timeout_ms) : NULL;
      st->continued_execution_run_id = svc_pb_strdup(rs->run_id);
      st->initiator = a->initiator;
      st->continued_failure = PB_CLONE(Failure, a->failure);
      st->last_completion_result = PB_CLONE(Payloads, a->last_completion_result);
      st->identity = svc_pb_strdup(identity);
      st->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
      st->attempt = 1;
      st->first_workflow_task_backoff = PB_CLONE(Duration, a->backoff_start_interval);
      st->memo = PB_CLONE(Memo, a->memo);
      st->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
      st->header = PB_CLONE(Header, a->header);
      if (rs->parent && rs->parent->workflow_id[0]) {
        st->parent_workflow_namespace = svc_pb_strdup(rs->parent->namespace_);
        st->parent_workflow_execution = we_new(rs->parent->workflow_id, rs->parent->run_id);
        st->parent_initiated_event_id = rs->parent->initiated_event_id;
      }
      run_start_args ra = {.ns = rs->namespace_,
                           .workflow_id = rs->workflow_id,
                           .run_id = new_run,
                           .request_id = "",
                           .started = st,
                           .parent = rs->parent,
                           .execution_expiration_ns = rs->execution_expiration_ns,
                           .first_run_id = rs->first_run_id};
      RunState *nrs = NULL;
      rc = svc_run_start(c, &ra, &nrs);
      svc_runstate_free(nrs);
    }
    svc_history_event_free(sev);
    free(new_run);
    *closed = 1;
    break;
  }
  case CMD(START_CHILD_WORKFLOW_EXECUTION): {
    StartChildWorkflowExecutionCommandAttributes *a = cmd->start_child_workflow_execution_command_attributes;
    const char *cns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
    if (!svc_ns_known(c->svc, cns)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "StartChildWorkflowExecution: namespace %s is not registered", cns);
      return DBX_OK;
    }
    if (!check_id(j, "StartChildWorkflowExecution.workflow_id", a->workflow_id)) return DBX_OK;
    if (!check_id(j, "StartChildWorkflowExecution.workflow_type.name", a->workflow_type ? a->workflow_type->name : NULL))
      return DBX_OK;
    const char *ctq = a->task_queue && a->task_queue->name[0] ? a->task_queue->name : rs->task_queue;
    ev = svc_event_new(ET(START_CHILD_WORKFLOW_EXECUTION_INITIATED));
    if (ev == NULL) return DBX_ENOMEM;
    StartChildWorkflowExecutionInitiatedEventAttributes *e = ev->start_child_workflow_execution_initiated_event_attributes;
    e->namespace_ = svc_pb_strdup(cns);
    e->workflow_id = svc_pb_strdup(a->workflow_id);
    e->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
    e->task_queue = svc_pb_new(&TaskQueue__D);
    if (e->task_queue) {
      e->task_queue->name = svc_pb_strdup(ctq);
      e->task_queue->kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    }
    e->input = PB_CLONE(Payloads, a->input);
    e->workflow_execution_timeout = PB_CLONE(Duration, a->workflow_execution_timeout);
    e->workflow_run_timeout = PB_CLONE(Duration, a->workflow_run_timeout);
    e->workflow_task_timeout = PB_CLONE(Duration, a->workflow_task_timeout);
    e->parent_close_policy = a->parent_close_policy;
    e->control = svc_pb_strdup(a->control);
    e->workflow_task_completed_event_id = wft_completed_id;
    e->workflow_id_reuse_policy = a->workflow_id_reuse_policy;
    e->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
    e->cron_schedule = svc_pb_strdup(a->cron_schedule);
    e->header = PB_CLONE(Header, a->header);
    e->memo = PB_CLONE(Memo, a->memo);
    e->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
    rc = svc_event_append(c, rs, ev, 0);
    if (rc != DBX_OK) break;
    int64_t initiated = ev->event_id;
    *new_wft = 1;
    /* start it now (Temporal does this right after the command) */
    char *cur = NULL;
    RunState *existing = NULL;
    rc = svc_current_run_id(c, cns, a->workflow_id, &cur);
    if (rc == DBX_OK) {
      rc = svc_run_load(c, cns, a->workflow_id, cur, &existing);
      free(cur);
      if (rc == DBX_ENOTFOUND) rc = DBX_OK;
    } else if (rc == DBX_ENOTFOUND) {
      rc = DBX_OK;
    }
    if (rc != DBX_OK) break;
    if (existing && (existing->status == WS(RUNNING) || strcmp(existing->workflow_id, rs->workflow_id) == 0)) {
      svc_runstate_free(existing);
      HistoryEvent *fev = svc_event_new(ET(START_CHILD_WORKFLOW_EXECUTION_FAILED));
      if (fev == NULL) return DBX_ENOMEM;
      StartChildWorkflowExecutionFailedEventAttributes *f = fev->start_child_workflow_execution_failed_event_attributes;
      f->namespace_ = svc_pb_strdup(cns);
      f->workflow_id = svc_pb_strdup(a->workflow_id);
      f->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
      f->cause = TEMPORAL__API__ENUMS__V1__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE__START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE_WORKFLOW_ALREADY_EXISTS;
      f->control = svc_pb_strdup(a->control);
      f->initiated_event_id = initiated;
      f->workflow_task_completed_event_id = wft_completed_id;
      rc = svc_event_append(c, rs, fev, 0);
      svc_history_event_free(fev);
      break;
    }
    svc_runstate_free(existing);
    char *child_run = svc_new_uuid();
    HistoryEvent *sev = svc_event_new(ET(WORKFLOW_EXECUTION_STARTED));
    if (child_run == NULL || sev == NULL) {
      free(child_run);
      svc_history_event_free(sev);
      rc = DBX_ENOMEM;
      break;
    }
    WorkflowExecutionStartedEventAttributes *st = sev->workflow_execution_started_event_attributes;
    st->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
    st->task_queue = PB_CLONE(TaskQueue, e->task_queue);
    st->input = PB_CLONE(Payloads, a->input);
    st->workflow_execution_timeout = PB_CLONE(Duration, a->workflow_execution_timeout);
    st->workflow_run_timeout = PB_CLONE(Duration, a->workflow_run_timeout);
    st->workflow_task_timeout = PB_CLONE(Duration, a->workflow_task_timeout);
    st->parent_workflow_namespace = svc_pb_strdup(rs->namespace_);
    st->parent_workflow_execution = we_new(rs->workflow_id, rs->run_id);
    st->parent_initiated_event_id = initiated;
    st->identity = svc_pb_strdup(identity);
    st->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
    st->attempt = 1;
    st->memo = PB_CLONE(Memo, a->memo);
    st->search_attributes = PB_CLONE(SearchAttributes, a->search_attributes);
    st->header = PB_CLONE(Header, a->header);
    ParentInfo pi = INIT(DURABOX__SERVICE__V1__PARENT_INFO);
    pi.namespace_ = rs->namespace_;
    pi.workflow_id = rs->workflow_id;
    pi.run_id = rs->run_id;
    pi.initiated_event_id = initiated;
    run_start_args ra = {.ns = cns, .workflow_id = a->workflow_id, .run_id = child_run, .request_id = "",
                         .started = st, .parent = &pi};
    RunState *crs = NULL;
    rc = svc_run_start(c, &ra, &crs);
    svc_runstate_free(crs);
    svc_history_event_free(sev);
    if (rc != DBX_OK) {
      free(child_run);
      break;
    }
    HistoryEvent *cev = svc_event_new(ET(CHILD_WORKFLOW_EXECUTION_STARTED));
    ChildInfo *ci = svc_pb_new(&ChildInfo__D);
    ChildInfo **arr = realloc(rs->children, (rs->n_children + 1) * sizeof *arr);
    if (cev == NULL || ci == NULL || arr == NULL) {
      svc_history_event_free(cev);
      free(ci);
      if (arr) rs->children = arr;
      free(child_run);
      rc = DBX_ENOMEM;
      break;
    }
    rs->children = arr;
    ChildWorkflowExecutionStartedEventAttributes *ce = cev->child_workflow_execution_started_event_attributes;
    ce->namespace_ = svc_pb_strdup(cns);
    ce->initiated_event_id = initiated;
    ce->workflow_execution = we_new(a->workflow_id, child_run);
    ce->workflow_type = PB_CLONE(WorkflowType, a->workflow_type);
    ce->header = PB_CLONE(Header, a->header);
    rc = svc_event_append(c, rs, cev, 0);
    ci->initiated_event_id = initiated;
    ci->started_event_id = cev->event_id;
    ci->namespace_ = svc_pb_strdup(cns);
    ci->workflow_id = svc_pb_strdup(a->workflow_id);
    ci->run_id = child_run;
    ci->workflow_type = svc_pb_strdup(a->workflow_type->name);
    ci->parent_close_policy = a->parent_close_policy;
    arr[rs->n_children++] = ci;
    svc_history_event_free(cev);
    break;
  }
  case CMD(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION):
  case CMD(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION): {
    int is_signal = cmd->attributes_case == CMD(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION);
    const char *tns, *twf, *trun, *control;
    if (is_signal) {
      SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
      tns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
      twf = a->execution ? a->execution->workflow_id : "";
      trun = a->execution ? a->execution->run_id : "";
      control = a->control;
    } else {
      RequestCancelExternalWorkflowExecutionCommandAttributes *a =
          cmd->request_cancel_external_workflow_execution_command_attributes;
      tns = a->namespace_[0] ? a->namespace_ : rs->namespace_;
      twf = a->workflow_id;
      trun = a->run_id;
      control = a->control;
    }
    if (!check_id(j, "workflow_id of the external workflow", twf)) return DBX_OK;
    ev = svc_event_new(is_signal ? ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
                             : ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED));
    if (ev == NULL) return DBX_ENOMEM;
    if (is_signal) {
      SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
      SignalExternalWorkflowExecutionInitiatedEventAttributes *e = ev->signal_external_workflow_execution_initiated_event_attributes;
      e->workflow_task_completed_event_id = wft_completed_id;
      e->namespace_ = svc_pb_strdup(tns);
      e->workflow_execution = we_new(twf, trun);
      e->signal_name = svc_pb_strdup(a->signal_name);
      e->input = PB_CLONE(Payloads, a->input);
      e->control = svc_pb_strdup(control);
      e->child_workflow_only = a->child_workflow_only;
      e->header = PB_CLONE(Header, a->header);
    } else {
      RequestCancelExternalWorkflowExecutionInitiatedEventAttributes *e =
          ev->request_cancel_external_workflow_execution_initiated_event_attributes;
      e->workflow_task_completed_event_id = wft_completed_id;
      e->namespace_ = svc_pb_strdup(tns);
      e->workflow_execution = we_new(twf, trun);
      e->control = svc_pb_strdup(control);
    }
    rc = svc_event_append(c, rs, ev, 0);
    if (rc != DBX_OK) break;
    int64_t initiated = ev->event_id;
    *new_wft = 1;
    /* deliver */
    RunState *target = NULL;
    int self = strcmp(tns, rs->namespace_) == 0 && strcmp(twf, rs->workflow_id) == 0 &&
               (trun[0] == '\0' || strcmp(trun, rs->run_id) == 0);
    char *cur = NULL;
    if (!self) {
      if (trun[0]) {
        rc = svc_run_load(c, tns, twf, trun, &target);
      } else {
        rc = svc_current_run_id(c, tns, twf, &cur);
        if (rc == DBX_OK) rc = svc_run_load(c, tns, twf, cur, &target);
        free(cur);
      }
      if (rc == DBX_ENOTFOUND) rc = DBX_OK;
      if (rc != DBX_OK) break;
    }
    RunState *t = self ? rs : target;
    int ok = t && t->status == WS(RUNNING);
    if (ok) {
      if (is_signal) {
        SignalExternalWorkflowExecutionCommandAttributes *a = cmd->signal_external_workflow_execution_command_attributes;
        rc = signal_run(c, t, a->signal_name, a->input, identity, a->header, "");
      } else {
        rc = request_cancel_run(c, t, identity);
      }
      if (rc == DBX_OK && !self) rc = svc_run_save(c, t);
    }
    svc_runstate_free(target);
    if (rc != DBX_OK) break;
    HistoryEvent *r = NULL;
    if (ok && is_signal) {
      r = svc_event_new(ET(EXTERNAL_WORKFLOW_EXECUTION_SIGNALED));
      if (r) {
        r->external_workflow_execution_signaled_event_attributes->initiated_event_id = initiated;
        r->external_workflow_execution_signaled_event_attributes->namespace_ = svc_pb_strdup(tns);
        r->external_workflow_execution_signaled_event_attributes->workflow_execution = we_new(twf, trun);
        r->external_workflow_execution_signaled_event_attributes->control = svc_pb_strdup(control);
      }
    } else if (ok) {
      r = svc_event_new(ET(EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED));
      if (r) {
        r->external_workflow_execution_cancel_requested_event_attributes->initiated_event_id = initiated;
        r->external_workflow_execution_cancel_requested_event_attributes->namespace_ = svc_pb_strdup(tns);
        r->external_workflow_execution_cancel_requested_event_attributes->workflow_execution = we_new(twf, trun);
      }
    } else if (is_signal) {
      r = svc_event_new(ET(SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED));
      if (r) {
        SignalExternalWorkflowExecutionFailedEventAttributes *f = r->signal_external_workflow_execution_failed_event_attributes;
        f->cause = TEMPORAL__API__ENUMS__V1__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE__SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND;
        f->workflow_task_completed_event_id = wft_completed_id;
        f->namespace_ = svc_pb_strdup(tns);
        f->workflow_execution = we_new(twf, trun);
        f->initiated_event_id = initiated;
        f->control = svc_pb_strdup(control);
      }
    } else {
      r = svc_event_new(ET(REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED));
      if (r) {
        RequestCancelExternalWorkflowExecutionFailedEventAttributes *f =
            r->request_cancel_external_workflow_execution_failed_event_attributes;
        f->cause = TEMPORAL__API__ENUMS__V1__CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE__CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND;
        f->workflow_task_completed_event_id = wft_completed_id;
        f->namespace_ = svc_pb_strdup(tns);
        f->workflow_execution = we_new(twf, trun);
        f->initiated_event_id = initiated;
        f->control = svc_pb_strdup(control);
      }
    }
    if (r == NULL) return DBX_ENOMEM;
    rc = svc_event_append(c, rs, r, 0);
    svc_history_event_free(r);
    break;
  }
  default:
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RespondWorkflowTaskCompleted: command type %d is not supported by this service",
             (int)cmd->command_type);
    return DBX_OK;
  }
  svc_history_event_free(ev);
  return rc;
}

static int is_close_command(const Command *cmd) {
  return cmd->attributes_case == CMD(COMPLETE_WORKFLOW_EXECUTION) || cmd->attributes_case == CMD(FAIL_WORKFLOW_EXECUTION) ||
         cmd->attributes_case == CMD(CANCEL_WORKFLOW_EXECUTION) ||
         cmd->attributes_case == CMD(CONTINUE_AS_NEW_WORKFLOW_EXECUTION);
}

/* Queries wait while their run has a started workflow task; when the task
 * ends, wake the queue's pollers so a waiting query goes out. */
static void wake_for_queries(ectx *c, RunState *rs) {
  for (query *qq = c->svc->queries; qq; qq = qq->next) {
    if (qq->dispatched || strcmp(qq->workflow_id, rs->workflow_id) != 0 || strcmp(qq->run_id, rs->run_id) != 0) continue;
    note *n = svc_note_new(c, NOTE_QUEUE);
    if (n) n->key = svc_queue_key(rs->namespace_, qq->task_queue, TASK_WORKFLOW, &n->len);
    return;
  }
}

/* End the started workflow task with a WorkflowTaskFailed event and schedule
 * the next attempt. */
static dbx_err wft_fail(ectx *c, RunState *rs, int cause, Failure *failure, const char *identity) {
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_FAILED));
  if (ev == NULL) return DBX_ENOMEM;
  WorkflowTaskFailedEventAttributes *a = ev->workflow_task_failed_event_attributes;
  a->scheduled_event_id = rs->wft_scheduled_event_id;
  a->started_event_id = rs->wft_started_event_id;
  a->cause = cause;
  a->failure = PB_CLONE(Failure, failure);
  a->identity = svc_pb_strdup(identity);
  rs->wft_started_event_id = 0;
  dbx_err rc = svc_event_append(c, rs, ev, 0);
  svc_history_event_free(ev);
  rs->wft_scheduled_event_id = 0;
  rs->wft_attempt++;
  int flushed = 0;
  if (rc == DBX_OK) rc = svc_events_flush_buffer(c, rs, &flushed);
  if (rc == DBX_OK) rc = svc_wft_schedule(c, rs);
  wake_for_queries(c, rs);
  return rc;
}

static dbx_err check_history_limits(ectx *c, RunState *rs) {
  if (rs->status != WS(RUNNING)) return DBX_OK;
  int64_t count = rs->next_event_id - 1;
  if (count >= c->svc->limits.count_error || rs->history_size_bytes >= c->svc->limits.size_error_bytes) {
    DBX_WARN("service", "workflow %s run %s: history of %lld events, %lld bytes exceeds the limit: terminating",
             rs->workflow_id, rs->run_id, (long long)count, (long long)rs->history_size_bytes);
    return svc_run_terminate(c, rs, "Workflow history size / count exceeds limit.", "durabox") == 0 ? DBX_OK : DBX_ESTORE;
  }
  if (count >= c->svc->limits.count_warn || rs->history_size_bytes >= c->svc->limits.size_warn_bytes)
    DBX_WARN("service", "workflow %s run %s: history of %lld events, %lld bytes passed the warning limit",
             rs->workflow_id, rs->run_id, (long long)count, (long long)rs->history_size_bytes);
  return DBX_OK;
}

static dbx_err h_wft_completed(ectx *c, job *j) {
  RespondWorkflowTaskCompletedRequest *q = decode(j, &RespondWorkflowTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = load_wft(c, j, q->task_token, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  int has_close = 0;
  for (size_t i = 0; i < q->n_commands; i++) has_close |= is_close_command(q->commands[i]);
  if (has_close && rs->n_buffered_events > 0) {
    /* new events arrived while the worker decided to close: it must see them */
    Failure f = INIT(TEMPORAL__API__FAILURE__V1__FAILURE);
    f.message = "UnhandledCommand: new events arrived during the workflow task";
    rc = wft_fail(c, rs, WFC(UNHANDLED_COMMAND), &f, q->identity);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) j->status = DBX_GRPC_OK;
    goto out;
  }
  HistoryEvent *ev = svc_event_new(ET(WORKFLOW_TASK_COMPLETED));
  if (ev == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowTaskCompletedEventAttributes *a = ev->workflow_task_completed_event_attributes;
  a->scheduled_event_id = rs->wft_scheduled_event_id;
  a->started_event_id = rs->wft_started_event_id;
  a->identity = svc_pb_strdup(q->identity);
  if (q->sdk_metadata) a->sdk_metadata = PB_CLONE(Temporal__Api__Sdk__V1__WorkflowTaskCompletedMetadata, q->sdk_metadata);
  int64_t started = rs->wft_started_event_id;
  rs->wft_started_event_id = 0; /* events from here on are written, not buffered */
  rc = svc_event_append(c, rs, ev, 0);
  int64_t completed_id = ev->event_id;
  svc_history_event_free(ev);
  if (rc != DBX_OK) goto out;
  rs->last_wft_started_event_id = started;
  rs->wft_scheduled_event_id = 0;
  rs->wft_attempt = 1;
  rs->wft_backoff_until_ns = 0;
  int closed = 0, new_wft = 0;
  for (size_t i = 0; i < q->n_commands && !closed; i++) {
    rc = apply_command(c, j, rs, q->commands[i], completed_id, q->identity, &closed, &new_wft);
    if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  }
  if (!closed) {
    int flushed = 0;
    rc = svc_events_flush_buffer(c, rs, &flushed);
    if (rc == DBX_OK && (flushed || new_wft || q->force_create_new_workflow_task)) rc = svc_wft_schedule(c, rs);
    if (rc == DBX_OK) rc = check_history_limits(c, rs);
    if (rc == DBX_OK && rs->status == WS(RUNNING)) rc = svc_run_save(c, rs);
  }
  if (rc == DBX_OK) wake_for_queries(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK; /* empty RespondWorkflowTaskCompletedResponse */
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_wft_failed(ectx *c, job *j) {
  RespondWorkflowTaskFailedRequest *q = decode(j, &RespondWorkflowTaskFailedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = load_wft(c, j, q->task_token, &rs);
  if (rc == DBX_OK && rs) {
    DBX_INFO("service", "workflow task failed: workflow %s run %s cause %d: %s", rs->workflow_id, rs->run_id,
             (int)q->cause, q->failure ? q->failure->message : "");
    rc = wft_fail(c, rs, q->cause, q->failure, q->identity);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ activities */

static dbx_err load_activity(ectx *c, job *j, ProtobufCBinaryData token, RunState **rs_out, ActivityInfo **ai_out) {
  *rs_out = NULL;
  *ai_out = NULL;
  TaskToken *t = token_decode(j, token, TASK_ACTIVITY);
  if (t == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = svc_run_load(c, t->namespace_, t->workflow_id, t->run_id, &rs);
  ActivityInfo *ai = rc == DBX_OK ? svc_activity_find(rs, t->scheduled_event_id) : NULL;
  if (rc == DBX_OK && (rs->status != WS(RUNNING) || ai == NULL || ai->attempt != t->attempt || ai->started_time_ns == 0))
    rc = DBX_ENOTFOUND;
  if (rc == DBX_ENOTFOUND) {
    fail_not_found(j,
                   "activity task not found: the attempt timed out, was completed, or the run closed "
                   "(workflow id %s, activity id %s)",
                   t->workflow_id, t->activity_id);
    svc_runstate_free(rs);
    rs = NULL;
    ai = NULL;
    rc = DBX_OK;
  }
  protobuf_c_message_free_unpacked(&t->base, NULL);
  *rs_out = rs;
  *ai_out = ai;
  return rc;
}

/* ActivityTaskStarted, written when the activity closes (Temporal's rule). */
static dbx_err write_activity_started(ectx *c, RunState *rs, ActivityInfo *ai, int64_t *started_id) {
  *started_id = 0;
  if (ai->started_time_ns == 0) return DBX_OK;
  HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_STARTED));
  if (ev == NULL) return DBX_ENOMEM;
  ActivityTaskStartedEventAttributes *a = ev->activity_task_started_event_attributes;
  a->scheduled_event_id = ai->scheduled_event_id;
  a->identity = svc_pb_strdup(ai->started_identity);
  a->request_id = svc_pb_strdup(ai->started_request_id);
  a->attempt = ai->attempt;
  a->last_failure = PB_CLONE(Failure, ai->last_failure);
  ev->event_time = svc_timestamp_new_ns(ai->started_time_ns);
  dbx_err rc = svc_event_append(c, rs, ev, 1);
  /* buffered events get their id when flushed; the close event refers to it
   * by position: the started event is always written just before */
  *started_id = rs->wft_started_event_id > 0 ? 0 : ev->event_id;
  svc_history_event_free(ev);
  return rc;
}

/* Close an activity: ActivityTaskStarted (if it started), then ev, whose
 * started_event_id field (*started_field) is filled here; the activity leaves
 * the run and a workflow task is scheduled. ev stays the caller's. */
static dbx_err activity_close(ectx *c, RunState *rs, ActivityInfo *ai, HistoryEvent *ev, int64_t *started_field) {
  int64_t sid = 0;
  dbx_err rc = write_activity_started(c, rs, ai, &sid);
  if (rc != DBX_OK) return rc;
  /* buffered: the started event gets (this event's id - 1) when flushed */
  *started_field = sid ? sid : (ai->started_time_ns ? -1 : 0);
  rc = svc_event_append(c, rs, ev, 1);
  if (rc != DBX_OK) return rc;
  svc_activity_remove(rs, ai->scheduled_event_id);
  return svc_wft_schedule(c, rs);
}

dbx_err svc_activity_queue_attempt(ectx *c, RunState *rs, ActivityInfo *ai) {
  ai->queued = 1;
  ai->started_time_ns = 0;
  dbx_err rc = svc_task_enqueue(c, rs->namespace_, ai->task_queue, TASK_ACTIVITY, rs->workflow_id, rs->run_id,
                            ai->scheduled_event_id, ai->attempt);
  if (rc == DBX_OK && ai->schedule_to_start_ms > 0 && ai->schedule_to_start_ms < ai->schedule_to_close_ms)
    rc = svc_timer_add(c, c->now_ns + ai->schedule_to_start_ms * 1000000, TK_ACTIVITY_SCHEDULE_TO_START, rs,
                   ai->scheduled_event_id, ai->attempt, NULL);
  return rc;
}

static int64_t retry_backoff_ms(const RetryPolicy *p, int attempt, const Failure *f) {
  if (f && f->failure_info_case == FI(APPLICATION_FAILURE_INFO) && f->application_failure_info->next_retry_delay) {
    int64_t d = svc_duration_ms(f->application_failure_info->next_retry_delay);
    if (d >= 0) return d;
  }
  double ms = (double)svc_duration_ms(p ? p->initial_interval : NULL);
  if (ms <= 0) ms = 1000;
  double coeff = p && p->backoff_coefficient >= 1.0 ? p->backoff_coefficient : 2.0;
  double maxi = (double)svc_duration_ms(p ? p->maximum_interval : NULL);
  if (maxi <= 0) maxi = ms * 100;
  for (int i = 1; i < attempt && ms < maxi; i++) ms *= coeff;
  return (int64_t)(ms > maxi ? maxi : ms);
}

static int type_listed(const RetryPolicy *p, const char *type) {
  for (size_t i = 0; p && type && i < p->n_non_retryable_error_types; i++)
    if (strcmp(p->non_retryable_error_types[i], type) == 0) return 1;
  return 0;
}

dbx_err svc_activity_attempt_failed(ectx *c, RunState *rs, ActivityInfo *ai, Failure *failure, int timeout_type,
                                Payloads *last_details) {
  int retry_state = RS(IN_PROGRESS);
  int retryable = 1;
  const char *timeout_names[] = {"", "StartToClose", "ScheduleToStart", "ScheduleToClose", "Heartbeat"};
  if (timeout_type) {
    char key[64];
    snprintf(key, sizeof key, "TemporalTimeout:%s", timeout_type <= 4 ? timeout_names[timeout_type] : "");
    if (timeout_type == TT(SCHEDULE_TO_START) || timeout_type == TT(SCHEDULE_TO_CLOSE) ||
        type_listed(ai->retry_policy, key)) {
      retryable = 0;
      retry_state = timeout_type == TT(SCHEDULE_TO_CLOSE) ? RS(TIMEOUT) : RS(NON_RETRYABLE_FAILURE);
    }
  } else if (failure && failure->failure_info_case == FI(APPLICATION_FAILURE_INFO)) {
    if (failure->application_failure_info->non_retryable || type_listed(ai->retry_policy, failure->application_failure_info->type)) {
      retryable = 0;
      retry_state = RS(NON_RETRYABLE_FAILURE);
    }
  } else if (failure && (failure->failure_info_case == FI(CANCELED_FAILURE_INFO) ||
                         failure->failure_info_case == FI(TERMINATED_FAILURE_INFO))) {
    retryable = 0;
    retry_state = RS(NON_RETRYABLE_FAILURE);
  }
  int32_t max = ai->retry_policy ? ai->retry_policy->maximum_attempts : 0;
  if (retryable && max > 0 && ai->attempt >= max) {
    retryable = 0;
    retry_state = RS(MAXIMUM_ATTEMPTS_REACHED);
  }
  int64_t backoff = retryable ? retry_backoff_ms(ai->retry_policy, ai->attempt, failure) : 0;
  if (retryable && ai->schedule_to_close_ms > 0 &&
      c->now_ns + backoff * 1000000 >= ai->scheduled_time_ns + ai->schedule_to_close_ms * 1000000) {
    retryable = 0;
    retry_state = RS(TIMEOUT);
  }
  if (last_details) {
    Payloads *d = PB_CLONE(Payloads, last_details);
    if (d) {
      if (ai->heartbeat_details) protobuf_c_message_free_unpacked(&ai->heartbeat_details->base, NULL);
      ai->heartbeat_details = d;
    }
  }
  if (retryable) {
    /* a retry in mutable state: no events */
    if (ai->last_failure) protobuf_c_message_free_unpacked(&ai->last_failure->base, NULL);
    ai->last_failure = PB_CLONE(Failure, failure);
    ai->attempt++;
    ai->started_time_ns = 0;
    ai->queued = 0;
    ai->attempt_scheduled_time_ns = c->now_ns + backoff * 1000000;
    if (backoff <= 0) return svc_activity_queue_attempt(c, rs, ai);
    return svc_timer_add(c, ai->attempt_scheduled_time_ns, TK_ACTIVITY_RETRY, rs, ai->scheduled_event_id, ai->attempt, NULL);
  }
  HistoryEvent *ev;
  int64_t *started_field;
  if (timeout_type) {
    ev = svc_event_new(ET(ACTIVITY_TASK_TIMED_OUT));
    if (ev == NULL) return DBX_ENOMEM;
    ActivityTaskTimedOutEventAttributes *a = ev->activity_task_timed_out_event_attributes;
    a->scheduled_event_id = ai->scheduled_event_id;
    a->retry_state = retry_state;
    a->failure = failure ? PB_CLONE(Failure, failure) : NULL;
    started_field = &a->started_event_id;
  } else {
    ev = svc_event_new(ET(ACTIVITY_TASK_FAILED));
    if (ev == NULL) return DBX_ENOMEM;
    ActivityTaskFailedEventAttributes *a = ev->activity_task_failed_event_attributes;
    a->scheduled_event_id = ai->scheduled_event_id;
    a->identity = svc_pb_strdup(ai->started_identity);
    a->retry_state = retry_state;
    a->failure = PB_CLONE(Failure, failure);
    started_field = &a->started_event_id;
  }
  dbx_err rc = activity_close(c, rs, ai, ev, started_field);
  svc_history_event_free(ev);
  return rc;
}

static dbx_err h_activity_completed(ectx *c, job *j) {
  RespondActivityTaskCompletedRequest *q = decode(j, &RespondActivityTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_COMPLETED));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
    } else {
      ActivityTaskCompletedEventAttributes *a = ev->activity_task_completed_event_attributes;
      a->result = PB_CLONE(Payloads, q->result);
      a->scheduled_event_id = ai->scheduled_event_id;
      a->identity = svc_pb_strdup(q->identity);
      rc = activity_close(c, rs, ai, ev, &a->started_event_id);
      svc_history_event_free(ev);
    }
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) j->status = DBX_GRPC_OK;
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_activity_failed(ectx *c, job *j) {
  RespondActivityTaskFailedRequest *q = decode(j, &RespondActivityTaskFailedRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    if (q->failure == NULL) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "RespondActivityTaskFailed: failure is required");
    } else {
      rc = svc_activity_attempt_failed(c, rs, ai, q->failure, 0, q->last_heartbeat_details);
      if (rc == DBX_OK) rc = svc_run_save(c, rs);
    }
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_activity_canceled(ectx *c, job *j) {
  RespondActivityTaskCanceledRequest *q = decode(j, &RespondActivityTaskCanceledRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    HistoryEvent *ev = svc_event_new(ET(ACTIVITY_TASK_CANCELED));
    if (ev == NULL) {
      rc = DBX_ENOMEM;
    } else {
      ActivityTaskCanceledEventAttributes *a = ev->activity_task_canceled_event_attributes;
      a->details = PB_CLONE(Payloads, q->details);
      a->latest_cancel_requested_event_id = ai->cancel_requested_event_id;
      a->scheduled_event_id = ai->scheduled_event_id;
      a->identity = svc_pb_strdup(q->identity);
      rc = activity_close(c, rs, ai, ev, &a->started_event_id);
      svc_history_event_free(ev);
    }
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_heartbeat(ectx *c, job *j) {
  RecordActivityTaskHeartbeatRequest *q = decode(j, &RecordActivityTaskHeartbeatRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  ActivityInfo *ai = NULL;
  dbx_err rc = load_activity(c, j, q->task_token, &rs, &ai);
  if (rc == DBX_OK && rs) {
    if (q->details) {
      Payloads *d = PB_CLONE(Payloads, q->details);
      if (d == NULL) {
        rc = DBX_ENOMEM;
      } else {
        if (ai->heartbeat_details) protobuf_c_message_free_unpacked(&ai->heartbeat_details->base, NULL);
        ai->heartbeat_details = d;
      }
    }
    ai->last_heartbeat_time_ns = c->now_ns;
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) {
      RecordActivityTaskHeartbeatResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RECORD_ACTIVITY_TASK_HEARTBEAT_RESPONSE);
      r.cancel_requested = ai->cancel_requested;
      svc_job_reply(j, &r.base);
    }
  }
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ history */

static int page_token_parse(ProtobufCBinaryData t, int64_t *from, int64_t *upto) {
  *from = 1;
  *upto = 0;
  if (t.len == 0) return 1;
  if (t.len != 16) return 0;
  uint64_t a = 0, b = 0;
  for (int i = 0; i < 8; i++) a = (a << 8) | t.data[i];
  for (int i = 8; i < 16; i++) b = (b << 8) | t.data[i];
  if (a < 1 || a > (uint64_t)INT64_MAX || b > (uint64_t)INT64_MAX) return 0;
  *from = (int64_t)a;
  *upto = (int64_t)b;
  return 1;
}

static void page_token_make(uint8_t out[16], int64_t from, int64_t upto) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)from >> (56 - 8 * i));
  for (int i = 0; i < 8; i++) out[8 + i] = (uint8_t)((uint64_t)upto >> (56 - 8 * i));
}

static void park_history(ectx *c, job *j, RunState *rs, const ProtobufCMessage *empty_reply) {
  svc_job_reply(j, empty_reply); /* what the caller gets if nothing happens before the deadline */
  j->park = PARK_HISTORY;
  j->park_key = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &j->park_key_len);
  int64_t now = dbx_mono_ns();
  int64_t until = now + c->svc->long_poll_ms * 1000000;
  int64_t dl = dbx_rpc_call_deadline_mono_ns(j->call);
  if (dl != INT64_MAX && dl - 500000000LL < until) until = dl - 500000000LL;
  j->park_deadline_ns = until < now ? now : until;
}

static dbx_err h_get_history(ectx *c, job *j) {
  GetWorkflowExecutionHistoryRequest *q = decode(j, &GetWorkflowExecutionHistoryRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  int64_t from, upto;
  if (!page_token_parse(q->next_page_token, &from, &upto)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "GetWorkflowExecutionHistory: next_page_token is malformed");
    goto out;
  }
  int running = rs->status == WS(RUNNING);
  GetWorkflowExecutionHistoryResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_RESPONSE);
  History h = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
  r.history = &h;
  uint8_t tok[16];
  if (q->history_event_filter_type == TEMPORAL__API__ENUMS__V1__HISTORY_EVENT_FILTER_TYPE__HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT) {
    if (!running) {
      HistoryEvent *ev = NULL;
      rc = svc_event_load_one(c, rs->run_seq, rs->close_event_id, &ev);
      if (rc != DBX_OK) goto out;
      HistoryEvent *one[1] = {ev};
      h.events = one;
      h.n_events = 1;
      svc_job_reply(j, &r.base);
      svc_history_event_free(ev);
    } else if (q->wait_new_event) {
      page_token_make(tok, rs->next_event_id, 0);
      r.next_page_token.data = tok;
      r.next_page_token.len = 16;
      park_history(c, j, rs, &r.base);
    } else {
      svc_job_reply(j, &r.base);
    }
    goto out;
  }
  if (from >= rs->next_event_id && q->wait_new_event && running) {
    page_token_make(tok, from, upto);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
    park_history(c, j, rs, &r.base);
    goto out;
  }
  size_t max_events = q->maximum_page_size > 0 ? (size_t)q->maximum_page_size : 1000;
  int64_t last = upto > 0 ? upto : rs->next_event_id - 1;
  if ((int64_t)(from + (int64_t)max_events - 1) < last) last = from + (int64_t)max_events - 1;
  uint8_t *hist = NULL;
  size_t hist_len = 0;
  int64_t last_id = 0;
  rc = svc_history_encode(c, rs->run_seq, from, last, HISTORY_PAGE_BYTES, &hist, &hist_len, &last_id);
  if (rc != DBX_OK) goto out;
  int64_t end = upto > 0 ? upto : rs->next_event_id - 1;
  int64_t after = last_id + 1;
  if (after <= end || (q->wait_new_event && running && upto == 0)) {
    page_token_make(tok, after, upto);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
  }
  r.history = NULL; /* spliced in from the stored bytes */
  svc_job_reply_field(j, &r.base, 1 /* history */, hist, hist_len);
  free(hist);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_get_history_reverse(ectx *c, job *j) {
  GetWorkflowExecutionHistoryReverseRequest *q = decode(j, &GetWorkflowExecutionHistoryReverseRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  int64_t top, unused;
  if (!page_token_parse(q->next_page_token, &top, &unused)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "GetWorkflowExecutionHistoryReverse: next_page_token is malformed");
    goto out;
  }
  if (q->next_page_token.len == 0) top = rs->next_event_id - 1;
  int64_t size = q->maximum_page_size > 0 ? q->maximum_page_size : 250;
  int64_t bottom = top - size + 1 < 1 ? 1 : top - size + 1;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  rc = svc_events_load(c, rs->run_seq, bottom, top + 1, &evs, &n, 0);
  if (rc != DBX_OK) goto out;
  for (size_t i = 0; i < n / 2; i++) {
    HistoryEvent *t = evs[i];
    evs[i] = evs[n - 1 - i];
    evs[n - 1 - i] = t;
  }
  GetWorkflowExecutionHistoryReverseResponse r =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REVERSE_RESPONSE);
  History h = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
  h.events = evs;
  h.n_events = n;
  r.history = &h;
  uint8_t tok[16];
  if (bottom > 1) {
    page_token_make(tok, bottom - 1, 0);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
  }
  svc_job_reply(j, &r.base);
  svc_events_free(evs, n);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ describe, list, count */

/* Fill info from a run (pointers borrow rs; timestamps go to ts[0..2]). */
static void fill_exec_info(RunState *rs, WorkflowExecutionInfo *info, WorkflowExecution *we, WorkflowType *wt,
                           Timestamp ts[3], Memo **memo, SearchAttributes **sa) {
  we->workflow_id = rs->workflow_id;
  we->run_id = rs->run_id;
  wt->name = rs->workflow_type;
  info->execution = we;
  info->type = wt;
  ts[0].seconds = rs->start_time_ns / 1000000000;
  ts[0].nanos = (int32_t)(rs->start_time_ns % 1000000000);
  info->start_time = &ts[0];
  if (rs->close_time_ns) {
    ts[1].seconds = rs->close_time_ns / 1000000000;
    ts[1].nanos = (int32_t)(rs->close_time_ns % 1000000000);
    info->close_time = &ts[1];
  }
  ts[2].seconds = rs->execution_time_ns / 1000000000;
  ts[2].nanos = (int32_t)(rs->execution_time_ns % 1000000000);
  info->execution_time = &ts[2];
  info->status = rs->status;
  info->history_length = rs->next_event_id - 1;
  info->history_size_bytes = rs->history_size_bytes;
  info->task_queue = rs->task_queue;
  info->first_run_id = rs->first_run_id;
  *memo = rs->memo.len ? (Memo *)protobuf_c_message_unpack(&Memo__D, NULL, rs->memo.len, rs->memo.data) : NULL;
  *sa = rs->search_attributes.len ? (SearchAttributes *)protobuf_c_message_unpack(
                                        &SearchAttributes__D, NULL, rs->search_attributes.len, rs->search_attributes.data)
                                  : NULL;
  info->memo = *memo;
  info->search_attributes = *sa;
}

static dbx_err h_describe_execution(ectx *c, job *j) {
  DescribeWorkflowExecutionRequest *q = decode(j, &DescribeWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  DescribeWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__DESCRIBE_WORKFLOW_EXECUTION_RESPONSE);
  WorkflowExecutionInfo info = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_INFO);
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  Timestamp ts[3] = {INIT(GOOGLE__PROTOBUF__TIMESTAMP), INIT(GOOGLE__PROTOBUF__TIMESTAMP), INIT(GOOGLE__PROTOBUF__TIMESTAMP)};
  Memo *memo = NULL;
  SearchAttributes *sa = NULL;
  fill_exec_info(rs, &info, &we, &wt, ts, &memo, &sa);
  WorkflowExecutionConfig cfg = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_CONFIG);
  TaskQueue tq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
  tq.name = rs->task_queue;
  tq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
  cfg.task_queue = &tq;
  Duration *d_exec = svc_duration_new_ms(rs->execution_timeout_ms), *d_run = svc_duration_new_ms(rs->run_timeout_ms),
           *d_task = svc_duration_new_ms(rs->task_timeout_ms);
  cfg.workflow_execution_timeout = d_exec;
  cfg.workflow_run_timeout = d_run;
  cfg.default_workflow_task_timeout = d_task;
  r.execution_config = &cfg;
  r.workflow_execution_info = &info;
  ParentInfo *pi = rs->parent;
  WorkflowExecution pwe = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  if (pi && pi->workflow_id[0]) {
    pwe.workflow_id = pi->workflow_id;
    pwe.run_id = pi->run_id;
    info.parent_execution = &pwe;
    info.parent_namespace_id = (char *)(svc_ns_id(c->svc, pi->namespace_) ? svc_ns_id(c->svc, pi->namespace_) : "");
  }
  size_t na = rs->n_activities, nc = rs->n_children;
  PendingActivityInfo *pa = calloc(na + 1, sizeof *pa);
  PendingActivityInfo **pap = calloc(na + 1, sizeof *pap);
  ActivityType *ats = calloc(na + 1, sizeof *ats);
  Timestamp *pts = calloc(3 * na + 1, sizeof *pts);
  PendingChildExecutionInfo *pc = calloc(nc + 1, sizeof *pc);
  PendingChildExecutionInfo **pcp = calloc(nc + 1, sizeof *pcp);
  if (!pa || !pap || !ats || !pts || !pc || !pcp) {
    rc = DBX_ENOMEM;
  } else {
    for (size_t i = 0; i < na; i++) {
      ActivityInfo *ai = rs->activities[i];
      PendingActivityInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_ACTIVITY_INFO);
      ActivityType at = INIT(TEMPORAL__API__COMMON__V1__ACTIVITY_TYPE);
      pa[i] = x;
      ats[i] = at;
      ats[i].name = ai->activity_type;
      pa[i].activity_id = ai->activity_id;
      pa[i].activity_type = &ats[i];
      pa[i].state = ai->cancel_requested ? TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_CANCEL_REQUESTED
                    : ai->started_time_ns ? TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_STARTED
                                          : TEMPORAL__API__ENUMS__V1__PENDING_ACTIVITY_STATE__PENDING_ACTIVITY_STATE_SCHEDULED;
      pa[i].heartbeat_details = ai->heartbeat_details;
      pa[i].attempt = ai->attempt;
      pa[i].maximum_attempts = ai->retry_policy ? ai->retry_policy->maximum_attempts : 0;
      pa[i].last_failure = ai->last_failure;
      pa[i].last_worker_identity = ai->started_identity;
      Timestamp t0 = INIT(GOOGLE__PROTOBUF__TIMESTAMP);
      pts[3 * i] = pts[3 * i + 1] = pts[3 * i + 2] = t0;
      pts[3 * i].seconds = ai->scheduled_time_ns / 1000000000;
      pa[i].scheduled_time = &pts[3 * i];
      if (ai->last_heartbeat_time_ns) {
        pts[3 * i + 1].seconds = ai->last_heartbeat_time_ns / 1000000000;
        pa[i].last_heartbeat_time = &pts[3 * i + 1];
      }
      if (ai->started_time_ns) {
        pts[3 * i + 2].seconds = ai->started_time_ns / 1000000000;
        pa[i].last_started_time = &pts[3 * i + 2];
      }
      pap[i] = &pa[i];
    }
    for (size_t i = 0; i < nc; i++) {
      ChildInfo *ci = rs->children[i];
      PendingChildExecutionInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_CHILD_EXECUTION_INFO);
      pc[i] = x;
      pc[i].workflow_id = ci->workflow_id;
      pc[i].run_id = ci->run_id;
      pc[i].workflow_type_name = ci->workflow_type;
      pc[i].initiated_id = ci->initiated_event_id;
      pc[i].parent_close_policy = ci->parent_close_policy;
      pcp[i] = &pc[i];
    }
    r.n_pending_activities = na;
    r.pending_activities = pap;
    r.n_pending_children = nc;
    r.pending_children = pcp;
    PendingWorkflowTaskInfo pw = INIT(TEMPORAL__API__WORKFLOW__V1__PENDING_WORKFLOW_TASK_INFO);
    Timestamp ws = INIT(GOOGLE__PROTOBUF__TIMESTAMP), wst = ws;
    if (rs->wft_scheduled_event_id) {
      pw.state = rs->wft_started_event_id ? TEMPORAL__API__ENUMS__V1__PENDING_WORKFLOW_TASK_STATE__PENDING_WORKFLOW_TASK_STATE_STARTED
                                          : TEMPORAL__API__ENUMS__V1__PENDING_WORKFLOW_TASK_STATE__PENDING_WORKFLOW_TASK_STATE_SCHEDULED;
      ws.seconds = rs->wft_scheduled_time_ns / 1000000000;
      pw.scheduled_time = &ws;
      if (rs->wft_started_event_id) {
        wst.seconds = rs->wft_started_time_ns / 1000000000;
        pw.started_time = &wst;
      }
      pw.attempt = rs->wft_attempt;
      r.pending_workflow_task = &pw;
    }
    svc_job_reply(j, &r.base);
  }
  free(pa);
  free(pap);
  free(ats);
  free(pts);
  free(pc);
  free(pcp);
  free(d_exec);
  free(d_run);
  free(d_task);
  if (memo) protobuf_c_message_free_unpacked(&memo->base, NULL);
  if (sa) protobuf_c_message_free_unpacked(&sa->base, NULL);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* Scan every run of a namespace matching query; calls fn for each (sorted by
 * start time as the query asks). */
typedef struct {
  RunState **runs;
  size_t n, cap;
  int desc;
} run_list;

static int cmp_start(const void *a, const void *b, void *desc) {
  const RunState *x = *(RunState *const *)a, *y = *(RunState *const *)b;
  int r = x->start_time_ns < y->start_time_ns ? -1 : x->start_time_ns > y->start_time_ns ? 1 : strcmp(x->run_id, y->run_id);
  return *(int *)desc ? -r : r;
}

static void run_list_free(run_list *l) {
  for (size_t i = 0; i < l->n; i++) svc_runstate_free(l->runs[i]);
  free(l->runs);
}

static int run_list_sort_desc;
static int cmp_start_qsort(const void *a, const void *b) { return cmp_start(a, b, &run_list_sort_desc); }

static dbx_err scan_runs(ectx *c, job *j, const char *ns, const char *qtext, run_list *out) {
  memset(out, 0, sizeof *out);
  char err[256];
  dbx_visq *vq = NULL;
  dbx_err vrc = dbx_visq_create(qtext, &vq, err, sizeof err);
  if (vrc == DBX_EINVAL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: %s", j->method, err);
    return DBX_OK;
  }
  if (vrc != DBX_OK) return vrc;
  out->desc = dbx_visq_order_desc(vq);
  size_t pl = strlen(ns) + 1;
  dbx_cursor *cur = NULL;
  dbx_err rc = dbx_store_cursor_open(c->txn, c->svc->t_runs, &cur);
  dbx_val k, v;
  if (rc == DBX_OK) rc = dbx_store_cursor_seek(cur, ns, pl, &k, &v);
  for (; rc == DBX_OK; rc = dbx_store_cursor_next(cur, &k, &v)) {
    if (k.size < pl || memcmp(k.data, ns, pl) != 0) break;
    RunState *rs = (RunState *)protobuf_c_message_unpack(&RunState__D, NULL, v.size, v.data);
    if (rs == NULL) continue;
    dbx_visq_record rec = {.workflow_id = rs->workflow_id, .workflow_type = rs->workflow_type,
                           .task_queue = rs->task_queue, .run_id = rs->run_id, .status = rs->status,
                           .start_time_ns = rs->start_time_ns, .close_time_ns = rs->close_time_ns,
                           .execution_time_ns = rs->execution_time_ns};
    if (!dbx_visq_match(vq, &rec)) {
      svc_runstate_free(rs);
      continue;
    }
    if (out->n == out->cap) {
      size_t nc = out->cap ? out->cap * 2 : 64;
      RunState **na = realloc(out->runs, nc * sizeof *na);
      if (na == NULL) {
        svc_runstate_free(rs);
        rc = DBX_ENOMEM;
        break;
      }
      out->runs = na;
      out->cap = nc;
    }
    out->runs[out->n++] = rs;
  }
  dbx_store_cursor_close(cur);
  dbx_visq_destroy(vq);
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  if (rc == DBX_OK && out->n > 1) { /* qsort(NULL, 0) is undefined */
    run_list_sort_desc = out->desc;
    qsort(out->runs, out->n, sizeof *out->runs, cmp_start_qsort);
  }
  return rc;
}

static dbx_err h_list(ectx *c, job *j) {
  ListWorkflowExecutionsRequest *q = decode(j, &ListWorkflowExecutionsRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  run_list l = {0};
  if (!check_ns(c, j, q->namespace_)) goto out;
  uint64_t offset = 0;
  if (q->next_page_token.len) {
    if (q->next_page_token.len != 8) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "ListWorkflowExecutions: next_page_token is malformed");
      goto out;
    }
    for (int i = 0; i < 8; i++) offset = (offset << 8) | q->next_page_token.data[i];
  }
  rc = scan_runs(c, j, q->namespace_, q->query, &l);
  if (rc != DBX_OK || j->status != DBX_GRPC_OK) goto out;
  size_t page = q->page_size > 0 ? (size_t)q->page_size : 1000;
  size_t start = offset < l.n ? (size_t)offset : l.n;
  size_t cnt = l.n - start < page ? l.n - start : page;
  WorkflowExecutionInfo *infos = calloc(cnt + 1, sizeof *infos);
  WorkflowExecutionInfo **ptrs = calloc(cnt + 1, sizeof *ptrs);
  WorkflowExecution *wes = calloc(cnt + 1, sizeof *wes);
  WorkflowType *wts = calloc(cnt + 1, sizeof *wts);
  Timestamp *tss = calloc(3 * cnt + 1, sizeof *tss);
  Memo **memos = calloc(cnt + 1, sizeof *memos);
  SearchAttributes **sas = calloc(cnt + 1, sizeof *sas);
  if (infos && ptrs && wes && wts && tss && memos && sas) {
    for (size_t i = 0; i < cnt; i++) {
      WorkflowExecutionInfo x = INIT(TEMPORAL__API__WORKFLOW__V1__WORKFLOW_EXECUTION_INFO);
      WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
      WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
      Timestamp t0 = INIT(GOOGLE__PROTOBUF__TIMESTAMP);
      infos[i] = x;
      wes[i] = we;
      wts[i] = wt;
      tss[3 * i] = tss[3 * i + 1] = tss[3 * i + 2] = t0;
      fill_exec_info(l.runs[start + i], &infos[i], &wes[i], &wts[i], &tss[3 * i], &memos[i], &sas[i]);
      ptrs[i] = &infos[i];
    }
    ListWorkflowExecutionsResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__LIST_WORKFLOW_EXECUTIONS_RESPONSE);
    r.n_executions = cnt;
    r.executions = ptrs;
    uint8_t tok[8];
    if (start + cnt < l.n) {
      uint64_t nx = start + cnt;
      for (int i = 7; i >= 0; i--) {
        tok[i] = (uint8_t)nx;
        nx >>= 8;
      }
      r.next_page_token.data = tok;
      r.next_page_token.len = 8;
    }
    svc_job_reply(j, &r.base);
  } else {
    rc = DBX_ENOMEM;
  }
  for (size_t i = 0; memos && sas && i < cnt; i++) {
    if (memos[i]) protobuf_c_message_free_unpacked(&memos[i]->base, NULL);
    if (sas[i]) protobuf_c_message_free_unpacked(&sas[i]->base, NULL);
  }
  free(infos);
  free(ptrs);
  free(wes);
  free(wts);
  free(tss);
  free(memos);
  free(sas);
out:
  run_list_free(&l);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_count(ectx *c, job *j) {
  CountWorkflowExecutionsRequest *q = decode(j, &CountWorkflowExecutionsRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  run_list l = {0};
  if (check_ns(c, j, q->namespace_)) {
    rc = scan_runs(c, j, q->namespace_, q->query, &l);
    if (rc == DBX_OK && j->status == DBX_GRPC_OK) {
      CountWorkflowExecutionsResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__COUNT_WORKFLOW_EXECUTIONS_RESPONSE);
      r.count = (int64_t)l.n;
      svc_job_reply(j, &r.base);
    }
  }
  run_list_free(&l);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ signals, cancel, terminate */

static int running_or_fail(job *j, RunState *rs) {
  if (rs->status == WS(RUNNING)) return 1;
  fail_not_found(j, "workflow execution already completed (workflow id %s, run id %s)", rs->workflow_id, rs->run_id);
  return 0;
}

static int seen_request(RunState *rs, const char *req) {
  for (size_t i = 0; req && req[0] && i < rs->n_signal_request_ids; i++)
    if (strcmp(rs->signal_request_ids[i], req) == 0) return 1;
  return 0;
}

static void remember_request(RunState *rs, const char *req) {
  if (req == NULL || req[0] == '\0') return;
  if (rs->n_signal_request_ids >= 64) { /* keep the newest 64 */
    free(rs->signal_request_ids[0]);
    memmove(rs->signal_request_ids, rs->signal_request_ids + 1, 63 * sizeof *rs->signal_request_ids);
    rs->n_signal_request_ids--;
  }
  char **arr = realloc(rs->signal_request_ids, (rs->n_signal_request_ids + 1) * sizeof *arr);
  if (arr == NULL) return;
  rs->signal_request_ids = arr;
  char *d = dbx_strdup(req);
  if (d) arr[rs->n_signal_request_ids++] = d;
}

static dbx_err h_signal(ectx *c, job *j) {
  SignalWorkflowExecutionRequest *q = decode(j, &SignalWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_) || !check_id(j, "signal_name", q->signal_name)) goto out;
  rc = load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL || !running_or_fail(j, rs)) goto out;
  if (!seen_request(rs, q->request_id)) {
    rc = signal_run(c, rs, q->signal_name, q->input, q->identity, q->header, q->request_id);
    remember_request(rs, q->request_id);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
  }
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_signal_with_start(ectx *c, job *j) {
  SignalWithStartWorkflowExecutionRequest *q = decode(j, &SignalWithStartWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  RunState *rs = NULL;
  char *cur = NULL;
  if (!check_ns(c, j, q->namespace_) || !check_id(j, "workflow_id", q->workflow_id) ||
      !check_id(j, "signal_name", q->signal_name))
    goto out;
  rc = svc_current_run_id(c, q->namespace_, q->workflow_id, &cur);
  if (rc == DBX_OK) rc = svc_run_load(c, q->namespace_, q->workflow_id, cur, &rs);
  if (rc == DBX_ENOTFOUND) rc = DBX_OK;
  if (rc != DBX_OK) goto out;
  SignalWithStartWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__SIGNAL_WITH_START_WORKFLOW_EXECUTION_RESPONSE);
  if (rs && rs->status == WS(RUNNING)) {
    rc = signal_run(c, rs, q->signal_name, q->signal_input, q->identity, q->header, q->request_id);
    if (rc == DBX_OK) rc = svc_run_save(c, rs);
    if (rc == DBX_OK) {
      r.run_id = rs->run_id;
      r.started = 0;
      svc_job_reply(j, &r.base);
    }
    goto out;
  }
  HistoryEvent *sig = svc_event_new(ET(WORKFLOW_EXECUTION_SIGNALED));
  if (sig == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  WorkflowExecutionSignaledEventAttributes *sa = sig->workflow_execution_signaled_event_attributes;
  sa->signal_name = svc_pb_strdup(q->signal_name);
  sa->input = PB_CLONE(Payloads, q->signal_input);
  sa->identity = svc_pb_strdup(q->identity);
  sa->header = PB_CLONE(Header, q->header);
  start_args a = {.ns = q->namespace_, .workflow_id = q->workflow_id, .request_id = q->request_id,
                  .identity = q->identity, .type = q->workflow_type, .task_queue = q->task_queue, .input = q->input,
                  .exec_timeout = q->workflow_execution_timeout, .run_timeout = q->workflow_run_timeout,
                  .task_timeout = q->workflow_task_timeout, .start_delay = q->workflow_start_delay,
                  .reuse_policy = q->workflow_id_reuse_policy, .conflict_policy = 0,
                  .retry_policy = q->retry_policy, .cron = q->cron_schedule, .memo = q->memo,
                  .search_attributes = q->search_attributes, .header = q->header, .signal = sig};
  char *run_id = NULL;
  int started = 0;
  rc = start_common(c, j, &a, &run_id, &started);
  svc_history_event_free(sig);
  if (rc == DBX_OK && run_id) {
    r.run_id = run_id;
    r.started = started;
    svc_job_reply(j, &r.base);
  }
  free(run_id);
out:
  free(cur);
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_request_cancel(ectx *c, job *j) {
  RequestCancelWorkflowExecutionRequest *q = decode(j, &RequestCancelWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL || !running_or_fail(j, rs)) goto out;
  rc = request_cancel_run(c, rs, q->identity);
  if (rc == DBX_OK) rc = svc_run_save(c, rs);
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

static dbx_err h_terminate(ectx *c, job *j) {
  TerminateWorkflowExecutionRequest *q = decode(j, &TerminateWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->workflow_execution, &rs);
  if (rc != DBX_OK || rs == NULL || !running_or_fail(j, rs)) goto out;
  if (svc_run_terminate(c, rs, q->reason, q->identity) != 0) rc = DBX_ESTORE;
  if (rc == DBX_OK) j->status = DBX_GRPC_OK;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ reset */

/* Rebuild pending activities and timers of rs from events (the copied prefix). */
static dbx_err rebuild_pending(ectx *c, RunState *rs, HistoryEvent **evs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *e = evs[i];
    int64_t t_ns = e->event_time ? e->event_time->seconds * 1000000000 + e->event_time->nanos : c->now_ns;
    switch (e->attributes_case) {
    case HEV(ACTIVITY_TASK_SCHEDULED): {
      ActivityTaskScheduledEventAttributes *a = e->activity_task_scheduled_event_attributes;
      ActivityInfo *ai = svc_pb_new(&ActivityInfo__D);
      ActivityInfo **arr = realloc(rs->activities, (rs->n_activities + 1) * sizeof *arr);
      if (ai == NULL || arr == NULL) {
        free(ai);
        if (arr) rs->activities = arr;
        return DBX_ENOMEM;
      }
      rs->activities = arr;
      arr[rs->n_activities++] = ai;
      ai->scheduled_event_id = e->event_id;
      ai->activity_id = svc_pb_strdup(a->activity_id);
      ai->activity_type = svc_pb_strdup(a->activity_type ? a->activity_type->name : "");
      ai->task_queue = svc_pb_strdup(a->task_queue ? a->task_queue->name : rs->task_queue);
      ai->attempt = 1;
      ai->scheduled_time_ns = c->now_ns;
      ai->attempt_scheduled_time_ns = c->now_ns;
      ai->schedule_to_close_ms = svc_duration_ms(a->schedule_to_close_timeout);
      ai->schedule_to_start_ms = svc_duration_ms(a->schedule_to_start_timeout);
      ai->start_to_close_ms = svc_duration_ms(a->start_to_close_timeout);
      ai->heartbeat_ms = svc_duration_ms(a->heartbeat_timeout);
      ai->retry_policy = PB_CLONE(RetryPolicy, a->retry_policy);
      break;
    }
    case HEV(ACTIVITY_TASK_COMPLETED):
      svc_activity_remove(rs, e->activity_task_completed_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_FAILED):
      svc_activity_remove(rs, e->activity_task_failed_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_TIMED_OUT):
      svc_activity_remove(rs, e->activity_task_timed_out_event_attributes->scheduled_event_id);
      break;
    case HEV(ACTIVITY_TASK_CANCELED):
      svc_activity_remove(rs, e->activity_task_canceled_event_attributes->scheduled_event_id);
      break;
    case HEV(TIMER_STARTED): {
      TimerInfo *ti = svc_pb_new(&TimerInfo__D);
      TimerInfo **arr = realloc(rs->timers, (rs->n_timers + 1) * sizeof *arr);
      if (ti == NULL || arr == NULL) {
        free(ti);
        if (arr) rs->timers = arr;
        return DBX_ENOMEM;
      }
      rs->timers = arr;
      arr[rs->n_timers++] = ti;
      ti->timer_id = svc_pb_strdup(e->timer_started_event_attributes->timer_id);
      ti->started_event_id = e->event_id;
      ti->fire_time_ns = t_ns + svc_duration_ms(e->timer_started_event_attributes->start_to_fire_timeout) * 1000000;
      break;
    }
    case HEV(TIMER_FIRED):
      svc_timer_remove(rs, e->timer_fired_event_attributes->timer_id);
      break;
    case HEV(TIMER_CANCELED):
      svc_timer_remove(rs, e->timer_canceled_event_attributes->timer_id);
      break;
    case HEV(WORKFLOW_EXECUTION_CANCEL_REQUESTED):
      rs->cancel_requested = 1;
      break;
    case HEV(WORKFLOW_TASK_COMPLETED):
      rs->last_wft_started_event_id = e->workflow_task_completed_event_attributes->started_event_id;
      break;
    default:
      break;
    }
  }
  return DBX_OK;
}

static dbx_err h_reset(ectx *c, job *j) {
  ResetWorkflowExecutionRequest *q = decode(j, &ResetWorkflowExecutionRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *base = NULL, *nrs = NULL;
  HistoryEvent **evs = NULL, **later = NULL;
  size_t n = 0, nl = 0;
  char *new_run = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  rc = load_execution(c, j, q->namespace_, q->workflow_execution, &base);
  if (rc != DBX_OK || base == NULL) goto out;
  int64_t e = q->workflow_task_finish_event_id;
  if (e <= 1 || e >= base->next_event_id) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
             "ResetWorkflowExecution: workflow_task_finish_event_id %lld is out of range (must be > 1 and < %lld)",
             (long long)e, (long long)base->next_event_id);
    goto out;
  }
  HistoryEvent *pe = NULL;
  rc = svc_event_load_one(c, base->run_seq, e, &pe);
  if (rc != DBX_OK) goto out;
  int et = pe->event_type;
  svc_history_event_free(pe);
  if (et != ET(WORKFLOW_TASK_COMPLETED) && et != ET(WORKFLOW_TASK_TIMED_OUT) && et != ET(WORKFLOW_TASK_FAILED) &&
      et != ET(WORKFLOW_TASK_STARTED)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
             "ResetWorkflowExecution: event %lld is not a workflow task completed, failed, timed out or started event",
             (long long)e);
    goto out;
  }
  /* the prefix [1, e) */
  rc = svc_events_load(c, base->run_seq, 1, e, &evs, &n, 0);
  if (rc != DBX_OK) goto out;
  rc = svc_events_load(c, base->run_seq, e, 0, &later, &nl, 0);
  if (rc != DBX_OK) goto out;
  new_run = svc_new_uuid();
  nrs = svc_runstate_new();
  if (new_run == NULL || nrs == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  svc_pb_setstr(&nrs->namespace_, base->namespace_);
  svc_pb_setstr(&nrs->workflow_id, base->workflow_id);
  svc_pb_setstr(&nrs->run_id, new_run);
  svc_pb_setstr(&nrs->first_run_id, base->first_run_id);
  svc_pb_setstr(&nrs->workflow_type, base->workflow_type);
  svc_pb_setstr(&nrs->task_queue, base->task_queue);
  svc_pb_setstr(&nrs->start_request_id, q->request_id);
  svc_pb_setstr(&nrs->reset_from_run_id, base->run_id);
  nrs->run_seq = svc_next_seq(c);
  nrs->status = WS(RUNNING);
  nrs->next_event_id = 1;
  nrs->start_time_ns = c->now_ns;
  nrs->execution_time_ns = c->now_ns;
  nrs->run_timeout_ms = base->run_timeout_ms;
  nrs->execution_timeout_ms = base->execution_timeout_ms;
  nrs->task_timeout_ms = base->task_timeout_ms;
  nrs->execution_expiration_ns = base->execution_expiration_ns;
  nrs->wft_attempt = 1;
  if (base->parent) nrs->parent = PB_CLONE(ParentInfo, base->parent);
  nrs->memo.data = base->memo.len ? malloc(base->memo.len) : NULL;
  if (nrs->memo.data) {
    memcpy(nrs->memo.data, base->memo.data, base->memo.len);
    nrs->memo.len = base->memo.len;
  }
  int64_t wft_sched = 0, wft_started = 0;
  for (size_t i = 0; i < n; i++) {
    HistoryEvent *ev = evs[i];
    if (ev->event_type == ET(WORKFLOW_TASK_SCHEDULED)) {
      wft_sched = ev->event_id;
      wft_started = 0;
    } else if (ev->event_type == ET(WORKFLOW_TASK_STARTED)) {
      wft_started = ev->event_id;
    } else if (ev->event_type == ET(WORKFLOW_TASK_COMPLETED) || ev->event_type == ET(WORKFLOW_TASK_FAILED) ||
               ev->event_type == ET(WORKFLOW_TASK_TIMED_OUT)) {
      wft_sched = wft_started = 0;
    }
    int64_t keep_time = 1;
    (void)keep_time;
    Timestamp *t = ev->event_time;
    ev->event_time = NULL;
    rc = svc_event_append(c, nrs, ev, 0); /* same ids, 1.. */
    if (ev->event_time) free(ev->event_time);
    ev->event_time = t;
    if (rc != DBX_OK) goto out;
  }
  rc = rebuild_pending(c, nrs, evs, n);
  if (rc != DBX_OK) goto out;
  if (wft_sched && !wft_started) {
    HistoryEvent *st = svc_event_new(ET(WORKFLOW_TASK_STARTED));
    if (st == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    st->workflow_task_started_event_attributes->scheduled_event_id = wft_sched;
    st->workflow_task_started_event_attributes->identity = svc_pb_strdup(q->identity);
    rc = svc_event_append(c, nrs, st, 0);
    wft_started = st->event_id;
    svc_history_event_free(st);
    if (rc != DBX_OK) goto out;
  }
  HistoryEvent *f = svc_event_new(ET(WORKFLOW_TASK_FAILED));
  Failure *fl = svc_pb_new(&Failure__D);
  if (f == NULL || fl == NULL) {
    svc_history_event_free(f);
    free(fl);
    rc = DBX_ENOMEM;
    goto out;
  }
  fl->message = svc_pb_strdup(q->reason);
  fl->failure_info_case = FI(RESET_WORKFLOW_FAILURE_INFO);
  fl->reset_workflow_failure_info = svc_pb_new(&ResetWorkflowFailureInfo__D);
  WorkflowTaskFailedEventAttributes *fa = f->workflow_task_failed_event_attributes;
  fa->scheduled_event_id = wft_sched;
  fa->started_event_id = wft_started;
  fa->cause = WFC(RESET_WORKFLOW);
  fa->failure = fl;
  fa->identity = svc_pb_strdup(q->identity);
  fa->base_run_id = svc_pb_strdup(base->run_id);
  fa->new_run_id = svc_pb_strdup(new_run);
  rc = svc_event_append(c, nrs, f, 0);
  svc_history_event_free(f);
  if (rc != DBX_OK) goto out;
  /* reapply signals recorded after the reset point */
  int skip_signals = q->reset_reapply_type == 2;
  for (size_t i = 0; i < q->n_reset_reapply_exclude_types; i++) skip_signals |= q->reset_reapply_exclude_types[i] == 1;
  for (size_t i = 0; i < nl && !skip_signals; i++) {
    if (later[i]->event_type != ET(WORKFLOW_EXECUTION_SIGNALED)) continue;
    later[i]->event_id = 0;
    free(later[i]->event_time);
    later[i]->event_time = NULL;
    rc = svc_event_append(c, nrs, later[i], 0);
    if (rc != DBX_OK) goto out;
  }
  /* pending activities run again; pending timers keep their fire time */
  for (size_t i = 0; i < nrs->n_activities; i++) {
    rc = svc_activity_queue_attempt(c, nrs, nrs->activities[i]);
    if (rc != DBX_OK) goto out;
  }
  for (size_t i = 0; i < nrs->n_timers; i++) {
    rc = svc_timer_add(c, nrs->timers[i]->fire_time_ns, TK_USER_TIMER, nrs, nrs->timers[i]->started_event_id, 0,
                   nrs->timers[i]->timer_id);
    if (rc != DBX_OK) goto out;
  }
  rc = svc_wft_schedule(c, nrs);
  if (rc != DBX_OK) goto out;
  if (base->status == WS(RUNNING)) {
    char *reason = dbx_asprintf("reset to a new run %s: %s", new_run, q->reason);
    int tr = svc_run_terminate(c, base, reason ? reason : "reset", q->identity);
    free(reason);
    if (tr != 0) {
      rc = DBX_ESTORE;
      goto out;
    }
  }
  size_t kl;
  char *k = svc_exec_key(nrs->namespace_, nrs->workflow_id, &kl);
  if (k == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  ExecutionRecord er = INIT(DURABOX__SERVICE__V1__EXECUTION_RECORD);
  er.current_run_id = new_run;
  uint8_t buf[256];
  size_t bl = protobuf_c_message_get_packed_size(&er.base);
  if (bl <= sizeof buf) {
    protobuf_c_message_pack(&er.base, buf);
    rc = dbx_store_put(c->txn, c->svc->t_execs, k, kl, buf, bl);
  } else {
    rc = DBX_EINVAL;
  }
  free(k);
  if (rc == DBX_OK) rc = svc_run_save(c, nrs);
  if (rc == DBX_OK) {
    ResetWorkflowExecutionResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_RESPONSE);
    r.run_id = new_run;
    svc_job_reply(j, &r.base);
  }
out:
  svc_events_free(evs, n);
  svc_events_free(later, nl);
  free(new_run);
  svc_runstate_free(nrs);
  svc_runstate_free(base);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ------------------------------------------------------------ queries */

static dbx_err h_query(ectx *c, job *j) {
  QueryWorkflowRequest *q = decode(j, &QueryWorkflowRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!check_ns(c, j, q->namespace_)) goto out;
  if (!check_id(j, "query.query_type", q->query ? q->query->query_type : NULL)) goto out;
  rc = load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  note *n = svc_note_new(c, NOTE_QUERY_NEW);
  query *qq = calloc(1, sizeof *qq);
  if (n == NULL || qq == NULL) {
    free(qq);
    rc = DBX_ENOMEM;
    goto out;
  }
  qq->id = ++c->svc->next_query_id;
  qq->ns = dbx_strdup(rs->namespace_);
  qq->workflow_id = dbx_strdup(rs->workflow_id);
  qq->run_id = dbx_strdup(rs->run_id);
  qq->task_queue = dbx_strdup(rs->task_queue);
  qq->query_len = protobuf_c_message_get_packed_size(&q->query->base);
  qq->query = malloc(qq->query_len ? qq->query_len : 1);
  if (qq->query) protobuf_c_message_pack(&q->query->base, qq->query);
  qq->waiter = j;
  n->q = qq;
  j->park = PARK_QUERY;
  j->query_id = qq->id;
  int64_t now = dbx_mono_ns();
  int64_t dl = dbx_rpc_call_deadline_mono_ns(j->call);
  j->park_deadline_ns = dl == INT64_MAX ? now + 60000000000LL : dl - 100000000LL;
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* A waiting query for this queue whose run has no started workflow task goes
 * out as a legacy query task (the poll reply's `query` field). */
static dbx_err try_dispatch_query(ectx *c, job *j, const char *ns, const char *tq, int *done) {
  *done = 0;
  for (query *qq = c->svc->queries; qq; qq = qq->next) {
    if (qq->dispatched || qq->claim_epoch == c->epoch || strcmp(qq->ns, ns) != 0 || strcmp(qq->task_queue, tq) != 0)
      continue;
    RunState *rs = NULL;
    dbx_err rc = svc_run_load(c, qq->ns, qq->workflow_id, qq->run_id, &rs);
    if (rc == DBX_ENOTFOUND) continue;
    if (rc != DBX_OK) return rc;
    if (rs->wft_started_event_id > 0) {
      svc_runstate_free(rs);
      continue;
    }
    WorkflowQuery *wq = (WorkflowQuery *)protobuf_c_message_unpack(&WorkflowQuery__D, NULL, qq->query_len, qq->query);
    PollWorkflowTaskQueueResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__POLL_WORKFLOW_TASK_QUEUE_RESPONSE);
    TaskToken tok = INIT(DURABOX__SERVICE__V1__TASK_TOKEN);
    tok.kind = TASK_QUERY;
    tok.namespace_ = rs->namespace_;
    tok.workflow_id = rs->workflow_id;
    tok.run_id = rs->run_id;
    tok.scheduled_event_id = (int64_t)qq->id;
    char qid[32];
    snprintf(qid, sizeof qid, "%llu", (unsigned long long)qq->id);
    tok.query_id = qid;
    WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
    we.workflow_id = rs->workflow_id;
    we.run_id = rs->run_id;
    WorkflowType wt = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
    wt.name = rs->workflow_type;
    uint8_t *hist = NULL;
    size_t hist_len = 0;
    int64_t last_id = 0;
    /* history up to the last completed workflow task's events, spliced in from the stored bytes */
    int64_t upto = rs->wft_scheduled_event_id > 0 ? rs->wft_scheduled_event_id - 1 : rs->next_event_id - 1;
    rc = svc_history_encode(c, rs->run_seq, 1, upto, 0, &hist, &hist_len, &last_id);
    TaskQueue wtq = INIT(TEMPORAL__API__TASKQUEUE__V1__TASK_QUEUE);
    wtq.name = rs->task_queue;
    wtq.kind = TEMPORAL__API__ENUMS__V1__TASK_QUEUE_KIND__TASK_QUEUE_KIND_NORMAL;
    Timestamp now_ts = INIT(GOOGLE__PROTOBUF__TIMESTAMP);
    now_ts.seconds = c->now_ns / 1000000000;
    now_ts.nanos = (int32_t)(c->now_ns % 1000000000);
    if (rc == DBX_OK && wq && token_pack(&tok, &r.task_token) == 0) {
      r.workflow_execution = &we;
      r.workflow_type = &wt;
      r.workflow_execution_task_queue = &wtq;
      r.scheduled_time = &now_ts;
      r.started_time = &now_ts;
      r.attempt = 1;
      r.previous_started_event_id = rs->last_wft_started_event_id;
      r.started_event_id = rs->last_wft_started_event_id;
      r.query = wq;
      svc_job_reply_field(j, &r.base, 8 /* history */, hist, hist_len);
      free(r.task_token.data);
      qq->claim_epoch = c->epoch;
      note *nn = svc_note_new(c, NOTE_QUERY_DISPATCHED);
      if (nn) nn->query_id = qq->id;
      *done = 1;
    }
    if (wq) protobuf_c_message_free_unpacked(&wq->base, NULL);
    free(hist);
    svc_runstate_free(rs);
    if (rc != DBX_OK || *done) return rc;
  }
  return DBX_OK;
}

static dbx_err h_respond_query(ectx *c, job *j) {
  RespondQueryTaskCompletedRequest *q = decode(j, &RespondQueryTaskCompletedRequest__D);
  if (q == NULL) return DBX_OK;
  TaskToken *t = token_decode(j, q->task_token, TASK_QUERY);
  if (t) {
    note *n = svc_note_new(c, NOTE_QUERY_ANSWER);
    if (n == NULL) {
      protobuf_c_message_free_unpacked(&t->base, NULL);
      protobuf_c_message_free_unpacked(&q->base, NULL);
      return DBX_ENOMEM;
    }
    n->query_id = (uint64_t)t->scheduled_event_id;
    if (q->completed_type == TEMPORAL__API__ENUMS__V1__QUERY_RESULT_TYPE__QUERY_RESULT_TYPE_ANSWERED) {
      QueryWorkflowResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__QUERY_WORKFLOW_RESPONSE);
      r.query_result = q->query_result;
      n->status = DBX_GRPC_OK;
      n->len = protobuf_c_message_get_packed_size(&r.base);
      n->bytes = malloc(n->len ? n->len : 1);
      if (n->bytes) protobuf_c_message_pack(&r.base, n->bytes);
    } else {
      /* Temporal answers a failed query with INVALID_ARGUMENT + QueryFailedFailure */
      job tmp = {0};
      QueryFailedFailure d = INIT(TEMPORAL__API__ERRORDETAILS__V1__QUERY_FAILED_FAILURE);
      d.failure = q->failure;
      svc_job_fail_detail(&tmp, DBX_GRPC_INVALID_ARGUMENT, &d.base, QUERY_FAILED_URL, "%s",
                      q->error_message[0] ? q->error_message : "query failed");
      n->status = DBX_GRPC_INVALID_ARGUMENT;
      n->message = tmp.message;
      n->bytes = tmp.details;
      n->len = tmp.details_len;
    }
    j->status = DBX_GRPC_OK;
    protobuf_c_message_free_unpacked(&t->base, NULL);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return DBX_OK;
}

/* ------------------------------------------------------------ dispatch */

typedef dbx_err (*handler_fn)(ectx *, job *);
static const struct {
  const char *method;
  handler_fn fn;
} handlers[] = {
    {"GetSystemInfo", h_get_system_info},
    {"DescribeNamespace", h_describe_namespace},
    {"ListNamespaces", h_list_namespaces},
    {"StartWorkflowExecution", h_start},
    {"PollWorkflowTaskQueue", h_poll_workflow},
    {"RespondWorkflowTaskCompleted", h_wft_completed},
    {"RespondWorkflowTaskFailed", h_wft_failed},
    {"PollActivityTaskQueue", h_poll_activity},
    {"RecordActivityTaskHeartbeat", h_heartbeat},
    {"RespondActivityTaskCompleted", h_activity_completed},
    {"RespondActivityTaskFailed", h_activity_failed},
    {"RespondActivityTaskCanceled", h_activity_canceled},
    {"GetWorkflowExecutionHistory", h_get_history},
    {"GetWorkflowExecutionHistoryReverse", h_get_history_reverse},
    {"DescribeWorkflowExecution", h_describe_execution},
    {"ListWorkflowExecutions", h_list},
    {"CountWorkflowExecutions", h_count},
    {"SignalWorkflowExecution", h_signal},
    {"SignalWithStartWorkflowExecution", h_signal_with_start},
    {"RequestCancelWorkflowExecution", h_request_cancel},
    {"TerminateWorkflowExecution", h_terminate},
    {"ResetWorkflowExecution", h_reset},
    {"QueryWorkflow", h_query},
    {"RespondQueryTaskCompleted", h_respond_query},
};

dbx_err svc_handle_rpc(ectx *c, job *j) {
  if (j->call == NULL) return DBX_OK;
  DBX_DEBUG("service", "rpc %s", j->method);
  if (dbx_rpc_call_is_workflow_service(j->call)) {
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
      if (strcmp(handlers[i].method, j->method) == 0) return handlers[i].fn(c, j);
    if (strcmp(j->method, "ShutdownWorker") == 0) return h_empty(c, j, &ShutdownWorkerRequest__D);
    if (strcmp(j->method, "ResetStickyTaskQueue") == 0) return h_empty(c, j, &ResetStickyTaskQueueRequest__D);
  }
  svc_job_fail(j, DBX_GRPC_UNIMPLEMENTED, "unknown method %s", j->method);
  return DBX_OK;
}
