/* Request checks shared by the RPC handlers: decoding with UTF-8 checks of
 * every string field, namespace and id checks, task tokens, and resolving a
 * WorkflowExecution to a loaded run. Each sets the job's gRPC status when the
 * request is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"

#include "base/codec.h"

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
        if (s && !dbx_utf8_valid((const uint8_t *)s, strlen(s))) bad = 1;
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

/* Replace every string field of m (recursively) that is not UTF-8 by its
 * repaired copy (dbx_utf8_repair). Returns how many were repaired, or -1 on
 * OOM (m stays consistent: a field is swapped only once its copy exists). */
static int strings_repair(ProtobufCMessage *m, int depth) {
  if (m == NULL || depth > 40) return 0;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  int fixed = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    char *base = (char *)m;
    if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t cs = *(const uint32_t *)(base + f->quantifier_offset);
      if (cs != f->id) continue;
    }
    size_t count = 1;
    void **ptr = (void **)(base + f->offset);
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      count = *(const size_t *)(base + f->quantifier_offset);
      ptr = *(void ***)(base + f->offset);
      if (ptr == NULL) continue;
    }
    for (size_t k = 0; k < count; k++) {
      if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        int n = strings_repair(ptr[k], depth + 1);
        if (n < 0) return -1;
        fixed += n;
        continue;
      }
      char *str = ptr[k];
      size_t len = str ? strlen(str) : 0;
      if (str == NULL || dbx_utf8_valid((const uint8_t *)str, len)) continue;
      char *rep = dbx_utf8_repair(str, len, NULL);
      if (rep == NULL) return -1;
      free(str); /* an unpacked string is its own allocation (valid text is never the shared default) */
      ptr[k] = rep;
      fixed++;
    }
  }
  return fixed;
}

/* Requests a worker sends about its tasks: their strings (failure messages,
 * stack traces, identities, command attributes) are repaired, not refused,
 * so a worker that produced a bad byte still ends its task (docs/service.md
 * "Bad input"). Every other request is refused, as Temporal's server does. */
static int worker_report(const char *method) {
  return strncmp(method, "Respond", 7) == 0 || strcmp(method, "RecordActivityTaskHeartbeat") == 0;
}

/* Decode the request of method into *out; on failure set the job's status. */
void *svc_decode(job *j, const ProtobufCMessageDescriptor *d) {
  size_t len = 0;
  const uint8_t *b = dbx_rpc_call_request(j->call, &len);
  ProtobufCMessage *m = NULL;
  if (svc_pb_unpack(d, b, len, (void **)&m) == DBX_ENOMEM) {
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "%s: out of memory decoding the request", j->method);
    return NULL;
  }
  if (m == NULL) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "malformed %s: cannot decode %zu bytes as %s", j->method, len,
                 d->name);
    return NULL;
  }
  char path[256] = "";
  if (worker_report(j->method)) {
    int fixed = strings_repair(m, 0);
    if (fixed < 0) {
      svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "%s: out of memory repairing the request", j->method);
      protobuf_c_message_free_unpacked(m, NULL);
      return NULL;
    }
    if (fixed > 0)
      DBX_INFO("service", "%s: %d string field(s) were not valid UTF-8 and were repaired (U+FFFD)", j->method,
               fixed);
  }
  if (!strings_valid(m, path, sizeof path, 0, 0)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: field %s is not valid UTF-8", j->method, path);
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}

int svc_check_ns(ectx *c, job *j, const char *ns) {
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

int svc_check_id(job *j, const char *what, const char *v) {
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

int svc_keyed_fits(const char *ns, const char *name, size_t extra) {
  return strlen(ns ? ns : "") + strlen(name ? name : "") + extra <= MAX_KEYED_BYTES;
}

int svc_check_keyed(job *j, const char *what, const char *ns, const char *v, size_t extra) {
  if (!svc_check_id(j, what, v)) return 0;
  if (!svc_keyed_fits(ns, v, extra)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT,
                 "%s: %s (%zu bytes) and the namespace (%zu bytes) are together over the %d bytes this "
                 "service's store keys hold",
                 j->method, what, strlen(v), strlen(ns ? ns : ""), MAX_KEYED_BYTES - (int)extra);
    return 0;
  }
  return 1;
}

void svc_fail_not_found(job *j, const char *fmt, const char *a, const char *b) {
  NotFoundFailure d = INIT(TEMPORAL__API__ERRORDETAILS__V1__NOT_FOUND_FAILURE);
  svc_job_fail_detail(j, DBX_GRPC_NOT_FOUND, &d.base, NOT_FOUND_URL, fmt, a, b);
}

/* Resolve (ns, execution) to a loaded run; run_id "" = current run. */
dbx_err svc_load_execution(ectx *c, job *j, const char *ns, const WorkflowExecution *we, RunState **out) {
  *out = NULL;
  if (!svc_check_id(j, "workflow_execution.workflow_id", we ? we->workflow_id : NULL)) return DBX_OK;
  char *rid = NULL;
  dbx_err rc;
  if (we->run_id && we->run_id[0]) {
    rid = dbx_strdup(we->run_id);
  } else {
    rc = svc_current_run_id(c, ns, we->workflow_id, &rid);
    if (rc == DBX_ENOTFOUND) {
      svc_fail_not_found(j, "workflow execution not found: workflow id %s%s", we->workflow_id, "");
      return DBX_OK;
    }
    if (rc != DBX_OK) return rc;
  }
  if (rid == NULL) return DBX_ENOMEM;
  rc = svc_run_load(c, ns, we->workflow_id, rid, out);
  if (rc == DBX_ENOTFOUND) {
    svc_fail_not_found(j, "workflow execution not found: workflow id %s, run id %s", we->workflow_id, rid);
    rc = DBX_OK;
  }
  free(rid);
  return rc;
}

TaskToken *svc_token_decode(job *j, ProtobufCBinaryData tok, int kind) {
  TaskToken *t = NULL;
  if (tok.len && svc_pb_unpack(&TaskToken__D, tok.data, tok.len, (void **)&t) == DBX_ENOMEM) {
    svc_job_fail(j, DBX_GRPC_RESOURCE_EXHAUSTED, "%s: out of memory decoding the task token", j->method);
    return NULL;
  }
  if (t == NULL || t->kind != kind || t->namespace_[0] == '\0' || t->workflow_id[0] == '\0' ||
      t->run_id[0] == '\0' || t->scheduled_event_id <= 0) {
    if (t) protobuf_c_message_free_unpacked(&t->base, NULL);
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "%s: task_token is malformed (not a token this service issued)",
                 j->method);
    return NULL;
  }
  return t;
}
