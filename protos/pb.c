/* Wire-format helpers shared by every room (declared at the end of pb.h):
 * protobuf-c's allocator through base/alloc.h, pack into a fresh buffer,
 * and the conversions of google.protobuf.Duration and Timestamp.
 * Stateless; any thread. */
#include "protos/pb.h"

#include "base/alloc.h"

static void *pb_alloc(void *ud, size_t n) {
  (void)ud;
  return dbx_malloc(n ? n : 1);
}

static void pb_free(void *ud, void *p) {
  (void)ud;
  dbx_free(p);
}

static ProtobufCAllocator allocator = {pb_alloc, pb_free, NULL};

ProtobufCAllocator *dbx_pb_allocator(void) { return &allocator; }

uint8_t *dbx_pb_pack(const ProtobufCMessage *m, size_t *len_out) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = dbx_malloc(n ? n : 1);
  if (buf == NULL) return NULL;
  size_t w = protobuf_c_message_pack(m, buf);
  if (len_out) *len_out = w;
  return buf;
}

ProtobufCMessage *dbx_pb_unpack(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t n) {
  return protobuf_c_message_unpack(d, &allocator, n, p);
}

ProtobufCMessage *dbx_pb_clone(const ProtobufCMessage *m) {
  if (m == NULL) return NULL;
  size_t n = 0;
  uint8_t *buf = dbx_pb_pack(m, &n);
  if (buf == NULL) return NULL;
  ProtobufCMessage *c = dbx_pb_unpack(m->descriptor, buf, n);
  dbx_free(buf);
  return c;
}

void dbx_pb_duration_init_ms(Duration *d, int64_t ms) {
  google__protobuf__duration__init(d);
  d->seconds = ms / 1000;
  d->nanos = (int32_t)((ms % 1000) * 1000000);
}

void dbx_pb_timestamp_init_ns(Timestamp *t, int64_t ns) {
  google__protobuf__timestamp__init(t);
  t->seconds = ns / 1000000000;
  t->nanos = (int32_t)(ns % 1000000000);
}

#define SAT (INT64_MAX / 2)

int64_t dbx_pb_duration_ms(const Duration *d) {
  if (d == NULL) return 0;
  if (d->seconds < 0 || d->nanos < 0) return -1;
  if (d->seconds >= SAT / 1000) return SAT;
  return d->seconds * 1000 + d->nanos / 1000000;
}

int64_t dbx_pb_duration_ns(const Duration *d) {
  if (d == NULL) return 0;
  if (d->seconds < 0 || d->nanos < 0) return -1;
  if (d->seconds >= SAT / 1000000000) return SAT;
  return d->seconds * 1000000000 + d->nanos;
}

int64_t dbx_pb_timestamp_ns(const Timestamp *t) {
  if (t == NULL) return 0;
  if (t->seconds >= SAT / 1000000000) return SAT;
  if (t->seconds <= -(SAT / 1000000000)) return -SAT;
  return t->seconds * 1000000000 + t->nanos;
}
