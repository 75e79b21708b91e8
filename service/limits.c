/* Payload blob limits (Temporal's dynamic config limit.blobSize.error and
 * limit.blobSize.warn): the one size check every request and command
 * payload goes through. The callers decide how a refusal looks (service.h). */
#include <stdint.h>

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
    DBX_WARN("service", "workflow %s: %s is %lld bytes, over the blob size limit of %lld: refused", wfid, what,
             (long long)size, (long long)err);
    return 1;
  }
  if (size > warn)
    DBX_WARN("service", "workflow %s: %s is %lld bytes, over the blob size warning limit of %lld", wfid, what,
             (long long)size, (long long)warn);
  return 0;
}
