/* Payload blob limits (Temporal's dynamic config limit.blobSize.error and
 * limit.blobSize.warn): the one size check every request and command
 * payload goes through. The callers decide how a refusal looks (service.h). */
#include <stdint.h>
#include <string.h>

#include "service/svc.h"

#define BLOB_ERROR_DEFAULT (2LL << 20)
#define BLOB_WARN_DEFAULT (512LL << 10)

int svc_blob_over(ectx *c, const ProtobufCMessage *m, const char *what, const char *wfid) {
  return m != NULL && svc_blob_size_over(c, (int64_t)protobuf_c_message_get_packed_size(m), what, wfid);
}

int svc_blob_size_over(ectx *c, int64_t size, const char *what, const char *wfid) {
  int64_t err = c->svc->limits.blob_error_bytes > 0 ? c->svc->limits.blob_error_bytes : BLOB_ERROR_DEFAULT;
  int64_t warn = c->svc->limits.blob_warn_bytes > 0 ? c->svc->limits.blob_warn_bytes : BLOB_WARN_DEFAULT;
  /* as Temporal's check: the error limit applies only past the warning one */
  if (size > warn && size > err) {
    DBX_WARN("service", "workflow %s: %s: %lld bytes, over the blob size limit of %lld", wfid, what,
             (long long)size, (long long)err);
    return 1;
  }
  if (size > warn)
    DBX_WARN("service", "workflow %s: %s: %lld bytes, over the blob size warning limit of %lld", wfid, what,
             (long long)size, (long long)warn);
  return 0;
}

/* ---- oversized worker responses (Temporal v1.31's frontend rules) ---- */

int64_t svc_blob_warn_bytes(ectx *c) {
  return c->svc->limits.blob_warn_bytes > 0 ? c->svc->limits.blob_warn_bytes : BLOB_WARN_DEFAULT;
}

Failure *svc_server_failure_new(const char *message, const Failure *cause, int64_t cause_budget) {
  Failure *f = svc_pb_new(&Failure__D);
  ServerFailureInfo *si = svc_pb_new(&ServerFailureInfo__D);
  if (f == NULL || si == NULL) {
    if (f) protobuf_c_message_free_unpacked(&f->base, NULL);
    if (si) protobuf_c_message_free_unpacked(&si->base, NULL);
    return NULL;
  }
  f->message = svc_pb_strdup(message);
  f->source = svc_pb_strdup("Server");
  si->non_retryable = 1;
  f->failure_info_case = FI(SERVER_FAILURE_INFO);
  f->server_failure_info = si;
  if (cause) f->cause = svc_failure_truncated(cause, cause_budget);
  return f;
}

/* Cut a malloc'd string to at most max bytes at a UTF-8 character boundary
 * (in place). Returns the bytes kept. */
static size_t cut_utf8(char *s, size_t max) {
  if (s == NULL) return 0;
  size_t n = strlen(s);
  if (n <= max) return n;
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80) max--;
  s[max] = '\0';
  return max;
}

Failure *svc_failure_truncated(const Failure *f, int64_t budget) {
  Failure *t = PB_CLONE(Failure, f);
  if (t == NULL) return NULL;
  if (t->cause) {
    protobuf_c_message_free_unpacked(&t->cause->base, NULL);
    t->cause = NULL;
  }
  if (t->encoded_attributes) {
    protobuf_c_message_free_unpacked(&t->encoded_attributes->base, NULL);
    t->encoded_attributes = NULL;
  }
  if (t->failure_info_case == FI(APPLICATION_FAILURE_INFO) && t->application_failure_info &&
      t->application_failure_info->details) {
    protobuf_c_message_free_unpacked(&t->application_failure_info->details->base, NULL);
    t->application_failure_info->details = NULL;
  }
  /* what is left to spend goes to source, message and stack trace, in that order */
  size_t reserve = budget / 4 < 1024 ? (size_t)(budget / 4) : 1024; /* room for the fields kept whole */
  size_t left = budget > 0 ? (size_t)budget - reserve : 0;
  left -= cut_utf8(t->source, left);
  left -= cut_utf8(t->message, left);
  cut_utf8(t->stack_trace, left);
  return t;
}
