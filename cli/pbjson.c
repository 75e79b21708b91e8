/* Generic protobuf-c -> JSON by walking message descriptors (see pbjson.h). */
#include "cli/pbjson.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/codec.h"

static void camel(const char *name, char *out, size_t cap) {
  size_t k = 0;
  int up = 0;
  for (const char *p = name; *p && k + 1 < cap; p++) {
    if (*p == '_') {
      up = 1;
      continue;
    }
    out[k++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 32) : *p;
    up = 0;
  }
  if (k && out[k - 1] == '_') k--; /* namespace_ -> namespace */
  out[k] = '\0';
}

static cJSON *scalar(const ProtobufCFieldDescriptor *f, const void *p) {
  char buf[64];
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return cJSON_CreateNumber(*(const int32_t *)p);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return cJSON_CreateNumber(*(const uint32_t *)p);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    snprintf(buf, sizeof buf, "%" PRId64, *(const int64_t *)p);
    return cJSON_CreateString(buf);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)p);
    return cJSON_CreateString(buf);
  case PROTOBUF_C_TYPE_FLOAT:
    return cJSON_CreateNumber(*(const float *)p);
  case PROTOBUF_C_TYPE_DOUBLE:
    return cJSON_CreateNumber(*(const double *)p);
  case PROTOBUF_C_TYPE_BOOL:
    return cJSON_CreateBool(*(const protobuf_c_boolean *)p);
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value((const ProtobufCEnumDescriptor *)f->descriptor, *(const int *)p);
    return v ? cJSON_CreateString(v->name) : cJSON_CreateNumber(*(const int *)p);
  }
  case PROTOBUF_C_TYPE_STRING:
    return cJSON_CreateString(*(char *const *)p ? *(char *const *)p : "");
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    char *s = dbx_base64_encode(b->data, b->len);
    cJSON *j = cJSON_CreateString(s ? s : "");
    free(s);
    return j;
  }
  case PROTOBUF_C_TYPE_MESSAGE:
    return dbx_pb_to_json(*(const ProtobufCMessage *const *)p);
  }
  return cJSON_CreateNull();
}

static int is_default(const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_STRING: return *(char *const *)p == NULL || **(char *const *)p == '\0';
  case PROTOBUF_C_TYPE_BYTES: return ((const ProtobufCBinaryData *)p)->len == 0;
  case PROTOBUF_C_TYPE_MESSAGE: return *(void *const *)p == NULL;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: return *(const uint64_t *)p == 0;
  case PROTOBUF_C_TYPE_DOUBLE: return *(const double *)p == 0;
  case PROTOBUF_C_TYPE_FLOAT: return *(const float *)p == 0;
  case PROTOBUF_C_TYPE_BOOL: return *(const protobuf_c_boolean *)p == 0;
  default: return *(const int32_t *)p == 0;
  }
}

static size_t field_size(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE: return 8;
  case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  default: return 4;
  }
}

/* Well-known and Temporal types with a friendlier JSON form. */
static cJSON *special(const ProtobufCMessage *m) {
  const char *n = m->descriptor->name;
  if (strcmp(n, "google.protobuf.Timestamp") == 0) {
    const int64_t *secs = (const int64_t *)((const char *)m + m->descriptor->fields[0].offset);
    const int32_t *nanos = (const int32_t *)((const char *)m + m->descriptor->fields[1].offset);
    time_t t = (time_t)*secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, *nanos / 1000000);
    return cJSON_CreateString(buf);
  }
  if (strcmp(n, "google.protobuf.Duration") == 0) {
    const int64_t *secs = (const int64_t *)((const char *)m + m->descriptor->fields[0].offset);
    const int32_t *nanos = (const int32_t *)((const char *)m + m->descriptor->fields[1].offset);
    char buf[64];
    if (*nanos)
      snprintf(buf, sizeof buf, "%" PRId64 ".%03ds", *secs, *nanos / 1000000);
    else
      snprintf(buf, sizeof buf, "%" PRId64 "s", *secs);
    return cJSON_CreateString(buf);
  }
  if (strcmp(n, "temporal.api.common.v1.Payload") == 0) {
    /* fields: metadata (map entries), data */
    const ProtobufCFieldDescriptor *md = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "metadata");
    const ProtobufCFieldDescriptor *dd = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "data");
    if (md && dd) {
      size_t cnt = *(const size_t *)((const char *)m + md->quantifier_offset);
      ProtobufCMessage **ents = *(ProtobufCMessage **const *)((const char *)m + md->offset);
      int json = 0;
      for (size_t i = 0; i < cnt; i++) {
        const ProtobufCMessageDescriptor *ed = ents[i]->descriptor;
        const char *key = *(char *const *)((const char *)ents[i] + ed->fields[0].offset);
        const ProtobufCBinaryData *val = (const ProtobufCBinaryData *)((const char *)ents[i] + ed->fields[1].offset);
        if (strcmp(key, "encoding") == 0 && val->len == 10 && memcmp(val->data, "json/plain", 10) == 0) json = 1;
      }
      const ProtobufCBinaryData *data = (const ProtobufCBinaryData *)((const char *)m + dd->offset);
      if (json) {
        char *txt = malloc(data->len + 1);
        if (txt == NULL) return NULL;
        memcpy(txt, data->data, data->len);
        txt[data->len] = '\0';
        cJSON *v = cJSON_Parse(txt);
        free(txt);
        if (v) return v;
      }
    }
  }
  return NULL;
}

cJSON *dbx_pb_to_json(const ProtobufCMessage *m) {
  if (m == NULL) return cJSON_CreateNull();
  cJSON *s = special(m);
  if (s) return s;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  cJSON *o = cJSON_CreateObject();
  if (o == NULL) return NULL;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const char *base = (const char *)m;
    char name[128];
    camel(f->name, name, sizeof name);
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (*(const uint32_t *)(base + f->quantifier_offset) != f->id) continue;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t cnt = *(const size_t *)(base + f->quantifier_offset);
      if (cnt == 0) continue;
      const char *arr = *(char *const *)(base + f->offset);
      cJSON *a = cJSON_CreateArray();
      for (size_t k = 0; a && k < cnt; k++) cJSON_AddItemToArray(a, scalar(f, arr + k * field_size(f)));
      cJSON_AddItemToObject(o, name, a);
      continue;
    }
    const void *p = base + f->offset;
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && is_default(f, p)) continue;
    cJSON_AddItemToObject(o, name, scalar(f, p));
  }
  return o;
}
