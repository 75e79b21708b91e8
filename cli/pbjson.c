/* Generic protobuf-c -> JSON by walking message descriptors (see pbjson.h). */
#include "cli/pbjson.h"

#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/codec.h"
#include "base/json.h"

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

/* Export options: raw payloads (no shorthand) and maps as JSON objects. */
typedef struct {
  int history; /* 1: Temporal's JSON history form (maps as objects) */
  int raw;     /* 1: payloads always {metadata, data} */
} exp_opts;

static cJSON *to_json(const ProtobufCMessage *m, const exp_opts *o);

static cJSON *scalar(const ProtobufCFieldDescriptor *f, const void *p, const exp_opts *o) {
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
    return to_json(*(const ProtobufCMessage *const *)p, o);
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
static cJSON *special(const ProtobufCMessage *m, const exp_opts *o) {
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
  if (!o->raw && strcmp(n, "temporal.api.common.v1.Payload") == 0) {
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
        if (data->len) memcpy(txt, data->data, data->len); /* empty data: data->data may be NULL */
        txt[data->len] = '\0';
        cJSON *v = cJSON_Parse(txt);
        free(txt);
        if (v) return v;
      }
    }
  }
  return NULL;
}

static int is_map_entry(const ProtobufCMessageDescriptor *d);

static cJSON *to_json(const ProtobufCMessage *m, const exp_opts *o) {
  if (m == NULL) return cJSON_CreateNull();
  cJSON *s = special(m, o);
  if (s) return s;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  cJSON *o_ = cJSON_CreateObject();
  if (o_ == NULL) return NULL;
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
      if (o->history && f->type == PROTOBUF_C_TYPE_MESSAGE && is_map_entry(f->descriptor)) {
        const ProtobufCMessageDescriptor *ed = f->descriptor;
        cJSON *mo = cJSON_CreateObject();
        for (size_t k = 0; mo && k < cnt; k++) {
          const char *e = ((char *const *)arr)[k];
          const char *key = *(char *const *)(e + ed->fields[0].offset);
          cJSON_AddItemToObject(mo, key ? key : "", scalar(&ed->fields[1], e + ed->fields[1].offset, o));
        }
        cJSON_AddItemToObject(o_, name, mo);
        continue;
      }
      cJSON *a = cJSON_CreateArray();
      for (size_t k = 0; a && k < cnt; k++) cJSON_AddItemToArray(a, scalar(f, arr + k * field_size(f), o));
      cJSON_AddItemToObject(o_, name, a);
      continue;
    }
    const void *p = base + f->offset;
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && is_default(f, p)) continue;
    cJSON_AddItemToObject(o_, name, scalar(f, p, o));
  }
  return o_;
}

cJSON *dbx_pb_to_json(const ProtobufCMessage *m) {
  exp_opts o = {0, 0};
  return to_json(m, &o);
}

/* ------------------------------------------------------------ import */

/* The error of an import: the JSON path of the value and what is wrong. */
typedef struct {
  char path[256];
  char msg[384];
  int depth;
} imp;

static int imp_fail(imp *x, const char *what) {
  if (x->msg[0] == '\0') snprintf(x->msg, sizeof x->msg, "%s: %s", x->path[0] ? x->path : "(top)", what);
  return -1;
}

/* Lowercase letters and digits of s: "EVENT_TYPE_X" and "EventTypeX" match. */
static void fold(const char *s, char *out, size_t cap) {
  size_t k = 0;
  for (; *s && k + 1 < cap; s++)
    if (*s != '_' && *s != '-') out[k++] = (char)(*s >= 'A' && *s <= 'Z' ? *s + 32 : *s);
  out[k] = '\0';
}

static int enum_from(const ProtobufCEnumDescriptor *ed, const cJSON *j, int *out) {
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (!(d >= INT32_MIN && d <= INT32_MAX)) return -1; /* before the cast: NaN, huge */
    *out = (int)d;
    return d == (double)*out ? 0 : -1;
  }
  if (!cJSON_IsString(j)) return -1;
  char want[128], have[128];
  fold(j->valuestring, want, sizeof want);
  size_t plen = 0; /* the values' common prefix: "EVENT_TYPE_" of EVENT_TYPE_UNSPECIFIED */
  if (ed->n_values && strlen(ed->values[0].name) > 11 &&
      strcmp(ed->values[0].name + strlen(ed->values[0].name) - 11, "UNSPECIFIED") == 0)
    plen = strlen(ed->values[0].name) - 11;
  for (unsigned i = 0; i < ed->n_values; i++) {
    fold(ed->values[i].name, have, sizeof have);
    if (strcmp(have, want) == 0) {
      *out = ed->values[i].value;
      return 0;
    }
    if (strlen(ed->values[i].name) > plen) {
      fold(ed->values[i].name + plen, have, sizeof have);
      if (strcmp(have, want) == 0) {
        *out = ed->values[i].value;
        return 0;
      }
    }
  }
  return -1;
}

static int digits_from(const char *s, int is_signed, uint64_t *out);

/* A 64-bit integer: a JSON string of digits (protobuf's mapping) or a number. */
static int int64_from(const cJSON *j, int is_signed, uint64_t *out) {
  if (cJSON_IsNumber(j)) {
    /* range first (a cast of a double outside the type's range, or NaN, is
     * undefined), then whole: -2^63 <= d < 2^63 signed, 0 <= d < 2^64 not */
    double d = j->valuedouble;
    if (is_signed) {
      if (!dbx_json_whole(d, -9223372036854775808.0, 9223372036854775807.0)) return -1;
      *out = (uint64_t)(int64_t)d;
    } else {
      if (!(d >= 0 && d < 18446744073709551616.0) || d != (double)(uint64_t)d) return -1;
      *out = (uint64_t)d;
    }
    return 0;
  }
  if (!cJSON_IsString(j)) return -1;
  return digits_from(j->valuestring, is_signed, out);
}

/* A string of decimal digits with an optional '-' (protobuf's JSON form of
 * an integer in a string): nothing else, not empty, within 64 bits. */
static int digits_from(const char *s, int is_signed, uint64_t *out) {
  int neg = *s == '-';
  if (neg && !is_signed) return -1;
  if (neg) s++;
  if (*s == '\0') return -1; /* "" or a lone "-" */
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  if (is_signed && v > (uint64_t)INT64_MAX + (uint64_t)neg) return -1;
  *out = neg ? (uint64_t)(-(int64_t)(v - 1) - 1) : v;
  return 0;
}

static int int32_from(const cJSON *j, int is_signed, uint32_t *out) {
  double d;
  if (cJSON_IsNumber(j)) {
    d = j->valuedouble;
  } else if (cJSON_IsString(j)) {
    uint64_t v;
    if (digits_from(j->valuestring, is_signed, &v) != 0) return -1; /* "0x10", " 5", "1e2": refused */
    if (is_signed ? ((int64_t)v < INT32_MIN || (int64_t)v > INT32_MAX) : v > UINT32_MAX) return -1;
    *out = is_signed ? (uint32_t)(int32_t)(int64_t)v : (uint32_t)v;
    return 0;
  } else {
    return -1;
  }
  /* range first, so that NaN and huge values never reach a cast */
  if (!(is_signed ? (d >= INT32_MIN && d <= INT32_MAX) : (d >= 0 && d <= UINT32_MAX))) return -1;
  if (d != (double)(int64_t)d) return -1;
  *out = is_signed ? (uint32_t)(int32_t)d : (uint32_t)d;
  return 0;
}

/* "2024-01-02T03:04:05.123456789Z" or with +hh:mm, into seconds and nanos. */
static int rfc3339(const char *s, int64_t *secs, int32_t *nanos) {
  int y, mo, d, h, mi, se, n = 0;
  if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &se, &n) != 6 || n != 19) return -1;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60 || y < 0) return -1;
  const char *p = s + n;
  int32_t ns = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      if (digits < 9) ns = ns * 10 + (*p - '0');
    if (digits == 0) return -1;
    for (; digits < 9; digits++) ns *= 10;
  }
  int off = 0;
  if (*p == 'Z' || *p == 'z') {
    p++;
  } else if (*p == '+' || *p == '-') {
    int oh, om, k = 0;
    if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5 || oh > 23 || om > 59) return -1;
    off = (oh * 60 + om) * 60 * (*p == '-' ? -1 : 1);
    p += 6;
  } else {
    return -1;
  }
  if (*p) return -1;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi, .tm_sec = se};
  *secs = (int64_t)timegm(&tm) - off;
  *nanos = ns;
  return 0;
}

/* "1.5s", "-3s", "0.000001s". */
static int duration(const char *s, int64_t *secs, int32_t *nanos) {
  size_t n = strlen(s);
  if (n < 2 || s[n - 1] != 's') return -1;
  const char *p = s;
  int neg = *p == '-';
  if (neg) p++;
  int64_t v = 0;
  int any = 0;
  for (; *p >= '0' && *p <= '9'; p++, any = 1) {
    if (v > (INT64_MAX - 9) / 10) return -1;
    v = v * 10 + (*p - '0');
  }
  int32_t ns = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      if (digits < 9) ns = ns * 10 + (*p - '0');
    if (digits == 0) return -1;
    for (; digits < 9; digits++) ns *= 10;
    any = 1;
  }
  if (!any || p != s + n - 1) return -1;
  *secs = neg ? -v : v;
  *nanos = neg ? -ns : ns;
  return 0;
}

static ProtobufCMessage *msg_from(const ProtobufCMessageDescriptor *d, const cJSON *j, imp *x);

static ProtobufCMessage *msg_new(const ProtobufCMessageDescriptor *d) {
  ProtobufCMessage *m = calloc(1, d->sizeof_message);
  if (m) d->message_init(m);
  return m;
}

static int is_map_entry(const ProtobufCMessageDescriptor *d) {
  size_t n = strlen(d->name);
  return d->n_fields == 2 && n > 5 && strcmp(d->name + n - 5, "Entry") == 0 && strcmp(d->fields[0].name, "key") == 0 &&
         strcmp(d->fields[1].name, "value") == 0;
}

/* One value of field f (a single element of a repeated one) into p. */
static int value_from(const ProtobufCFieldDescriptor *f, const cJSON *j, void *p, imp *x) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return int32_from(j, 1, p) == 0 ? 0 : imp_fail(x, "expected a 32-bit integer");
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return int32_from(j, 0, p) == 0 ? 0 : imp_fail(x, "expected an unsigned 32-bit integer");
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return int64_from(j, 1, p) == 0 ? 0 : imp_fail(x, "expected a 64-bit integer (a string of digits)");
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return int64_from(j, 0, p) == 0 ? 0 : imp_fail(x, "expected an unsigned 64-bit integer");
  case PROTOBUF_C_TYPE_FLOAT:
    if (!cJSON_IsNumber(j)) return imp_fail(x, "expected a number");
    /* beyond FLT_MAX plus half its ulp (2^103) the conversion overflows;
     * below, it rounds to FLT_MAX ("3.4028235e38", as Go writes it) */
    if (j->valuedouble >= (double)FLT_MAX + 0x1p103 || j->valuedouble <= -((double)FLT_MAX + 0x1p103))
      return imp_fail(x, "number out of range for a float");
    *(float *)p = (float)j->valuedouble;
    return 0;
  case PROTOBUF_C_TYPE_DOUBLE:
    if (!cJSON_IsNumber(j)) return imp_fail(x, "expected a number");
    *(double *)p = j->valuedouble;
    return 0;
  case PROTOBUF_C_TYPE_BOOL:
    if (!cJSON_IsBool(j)) return imp_fail(x, "expected true or false");
    *(protobuf_c_boolean *)p = cJSON_IsTrue(j);
    return 0;
  case PROTOBUF_C_TYPE_ENUM:
    return enum_from(f->descriptor, j, p) == 0 ? 0 : imp_fail(x, "not a value of the enum");
  case PROTOBUF_C_TYPE_STRING: {
    if (!cJSON_IsString(j)) return imp_fail(x, "expected a string");
    char *s = strdup(j->valuestring);
    if (s == NULL) return imp_fail(x, "out of memory");
    *(char **)p = s;
    return 0;
  }
  case PROTOBUF_C_TYPE_BYTES: {
    if (!cJSON_IsString(j)) return imp_fail(x, "expected a base64 string");
    ProtobufCBinaryData *b = p;
    uint8_t *out = NULL;
    size_t len = 0;
    if (dbx_base64_decode(j->valuestring, strlen(j->valuestring), &out, &len) != DBX_OK)
      return imp_fail(x, "not valid base64");
    b->data = out;
    b->len = len;
    return 0;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *m = msg_from(f->descriptor, j, x);
    if (m == NULL) return -1;
    *(ProtobufCMessage **)p = m;
    return 0;
  }
  }
  return imp_fail(x, "unsupported field type");
}

/* A repeated field from a JSON array (or a map field from a JSON object). */
static int repeated_from(const ProtobufCFieldDescriptor *f, const cJSON *j, char *base, imp *x) {
  const ProtobufCMessageDescriptor *md = f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
  int map = md && is_map_entry(md);
  if (map ? !cJSON_IsObject(j) : !cJSON_IsArray(j)) return imp_fail(x, map ? "expected an object" : "expected an array");
  size_t cnt = (size_t)cJSON_GetArraySize(j), sz = field_size(f);
  char *arr = cnt ? calloc(cnt, sz) : NULL;
  if (cnt && arr == NULL) return imp_fail(x, "out of memory");
  *(char **)(base + f->offset) = arr;
  size_t *q = (size_t *)(base + f->quantifier_offset);
  *q = 0;
  size_t plen = strlen(x->path);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    if (map) {
      snprintf(x->path + plen, sizeof x->path - plen, ".%s", it->string ? it->string : "");
      ProtobufCMessage *e = msg_new(md);
      if (e == NULL) return imp_fail(x, "out of memory");
      ((ProtobufCMessage **)arr)[(*q)++] = e;
      char *eb = (char *)e;
      char *k = strdup(it->string ? it->string : "");
      if (k == NULL) return imp_fail(x, "out of memory");
      *(char **)(eb + md->fields[0].offset) = k;
      if (value_from(&md->fields[1], it, eb + md->fields[1].offset, x) != 0) return -1;
    } else {
      snprintf(x->path + plen, sizeof x->path - plen, "[%zu]", *q);
      if (value_from(f, it, arr + *q * sz, x) != 0) return -1;
      (*q)++;
    }
  }
  x->path[plen] = '\0';
  return 0;
}

/* Payload in its shorthand form (any JSON value that is not an object of
 * metadata/data): json/plain of the value, as Temporal's CLI prints it. */
static ProtobufCMessage *payload_shorthand(const ProtobufCMessageDescriptor *d, const cJSON *j, imp *x) {
  const ProtobufCFieldDescriptor *md = protobuf_c_message_descriptor_get_field_by_name(d, "metadata");
  const ProtobufCFieldDescriptor *dd = protobuf_c_message_descriptor_get_field_by_name(d, "data");
  ProtobufCMessage *m = msg_new(d);
  char *txt = cJSON_PrintUnformatted(j);
  ProtobufCMessage *e = md ? msg_new(md->descriptor) : NULL;
  ProtobufCMessage **ents = malloc(sizeof *ents);
  char *key = strdup("encoding");
  uint8_t *val = malloc(10);
  if (!m || !txt || !e || !ents || !key || !val || !dd) {
    free(m), free(txt), free(e), free(ents), free(key), free(val);
    imp_fail(x, "out of memory");
    return NULL;
  }
  memcpy(val, "json/plain", 10);
  const ProtobufCMessageDescriptor *ed = md->descriptor;
  *(char **)((char *)e + ed->fields[0].offset) = key;
  ProtobufCBinaryData *v = (ProtobufCBinaryData *)((char *)e + ed->fields[1].offset);
  v->data = val;
  v->len = 10;
  ents[0] = e;
  *(ProtobufCMessage ***)((char *)m + md->offset) = ents;
  *(size_t *)((char *)m + md->quantifier_offset) = 1;
  ProtobufCBinaryData *data = (ProtobufCBinaryData *)((char *)m + dd->offset);
  data->data = (uint8_t *)txt;
  data->len = strlen(txt);
  return m;
}

static const ProtobufCFieldDescriptor *field_named(const ProtobufCMessageDescriptor *d, const char *key) {
  for (unsigned i = 0; i < d->n_fields; i++) {
    char name[128];
    camel(d->fields[i].name, name, sizeof name);
    if (strcmp(name, key) == 0 || strcmp(d->fields[i].name, key) == 0) return &d->fields[i];
  }
  return NULL;
}

static int special_from(const ProtobufCMessageDescriptor *d, const cJSON *j, ProtobufCMessage *m, imp *x) {
  int64_t secs;
  int32_t nanos;
  int ts = strcmp(d->name, "google.protobuf.Timestamp") == 0;
  if (!cJSON_IsString(j)) return imp_fail(x, ts ? "expected an RFC 3339 time string" : "expected a duration string");
  if ((ts ? rfc3339(j->valuestring, &secs, &nanos) : duration(j->valuestring, &secs, &nanos)) != 0)
    return imp_fail(x, ts ? "not an RFC 3339 time (2024-01-02T03:04:05Z)" : "not a duration (\"1.5s\")");
  *(int64_t *)((char *)m + d->fields[0].offset) = secs;
  *(int32_t *)((char *)m + d->fields[1].offset) = nanos;
  return 0;
}

static int fields_from(const ProtobufCMessageDescriptor *d, const cJSON *j, ProtobufCMessage *m, imp *x) {
  char *base = (char *)m;
  size_t plen = strlen(x->path);
  const cJSON *it;
  cJSON_ArrayForEach(it, j) {
    const ProtobufCFieldDescriptor *f = it->string ? field_named(d, it->string) : NULL;
    if (f == NULL || cJSON_IsNull(it)) continue; /* fields of newer versions, and null, are left out */
    snprintf(x->path + plen, sizeof x->path - plen, "%s%s", plen ? "." : "", it->string);
    int rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (*(void **)(base + f->offset) != NULL) return imp_fail(x, "given twice");
      rc = repeated_from(f, it, base, x);
    } else {
      if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        uint32_t *cs = (uint32_t *)(base + f->quantifier_offset);
        if (*cs != 0) return imp_fail(x, "a second member of a oneof");
        *cs = f->id;
      } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
                 f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING) {
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
      }
      void *p = base + f->offset;
      int owned = f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE;
      if (owned && *(void **)p != NULL && *(void **)p != f->default_value && *(void **)p != (void *)protobuf_c_empty_string)
        return imp_fail(x, "given twice");
      if (f->type == PROTOBUF_C_TYPE_BYTES && ((ProtobufCBinaryData *)p)->data) return imp_fail(x, "given twice");
      rc = value_from(f, it, p, x);
    }
    if (rc != 0) return -1;
    x->path[plen] = '\0';
  }
  return 0;
}

static ProtobufCMessage *msg_from(const ProtobufCMessageDescriptor *d, const cJSON *j, imp *x) {
  if (++x->depth > 48) {
    imp_fail(x, "nested too deeply");
    x->depth--;
    return NULL;
  }
  int payload = strcmp(d->name, "temporal.api.common.v1.Payload") == 0;
  if (payload && !(cJSON_IsObject(j) && (cJSON_GetObjectItemCaseSensitive(j, "metadata") ||
                                         cJSON_GetObjectItemCaseSensitive(j, "data")))) {
    x->depth--;
    return payload_shorthand(d, j, x);
  }
  ProtobufCMessage *m = msg_new(d);
  if (m == NULL) {
    imp_fail(x, "out of memory");
    x->depth--;
    return NULL;
  }
  int rc;
  if (strcmp(d->name, "google.protobuf.Timestamp") == 0 || strcmp(d->name, "google.protobuf.Duration") == 0)
    rc = special_from(d, j, m, x);
  else if (!cJSON_IsObject(j))
    rc = imp_fail(x, "expected an object");
  else
    rc = fields_from(d, j, m, x);
  x->depth--;
  if (rc != 0) {
    protobuf_c_message_free_unpacked(m, NULL);
    return NULL;
  }
  return m;
}

ProtobufCMessage *dbx_pb_from_json(const ProtobufCMessageDescriptor *d, const cJSON *j, char *err, size_t cap) {
  imp x = {{0}, {0}, 0};
  ProtobufCMessage *m = msg_from(d, j, &x);
  if (m == NULL && err && cap) snprintf(err, cap, "%s", x.msg[0] ? x.msg : "out of memory");
  return m;
}

/* ------------------------------------------------------------ histories */

cJSON *dbx_pb_history_to_json(HistoryEvent *const *events, size_t n, int raw_payloads) {
  exp_opts o = {1, raw_payloads};
  cJSON *doc = cJSON_CreateObject(), *arr = cJSON_CreateArray();
  if (doc == NULL || arr == NULL || !cJSON_AddItemToObject(doc, "events", arr)) {
    cJSON_Delete(doc);
    cJSON_Delete(arr);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    cJSON *e = to_json(&events[i]->base, &o);
    if (e == NULL || !cJSON_AddItemToArray(arr, e)) {
      cJSON_Delete(e);
      cJSON_Delete(doc);
      return NULL;
    }
  }
  return doc;
}

/* 1 when the event's attributes are the ones its type names
 * (EVENT_TYPE_TIMER_STARTED: timer_started_event_attributes). */
static int attributes_match(const HistoryEvent *e) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__event_type__descriptor,
                                                                     (int)e->event_type);
  if (v == NULL || e->attributes_case == 0 || strlen(v->name) <= 11) return 0;
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&temporal__api__history__v1__history_event__descriptor,
                                              (unsigned)e->attributes_case);
  if (f == NULL) return 0;
  char want[160];
  size_t k = 0;
  for (const char *p = v->name + 11; *p && k + 1 < sizeof want; p++)
    want[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
  want[k] = '\0';
  strncat(want, "_event_attributes", sizeof want - strlen(want) - 1);
  return strcmp(f->name, want) == 0;
}

dbx_err dbx_pb_history_from_json(const char *text, size_t len, HistoryEvent ***out, size_t *n_out, char **err) {
  char msg[512] = "";
  *out = NULL;
  *n_out = 0;
  *err = NULL;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  History *h = NULL;
  dbx_err rc = DBX_EINVAL;
  if (j == NULL) {
    const char *at = cJSON_GetErrorPtr();
    long pos = at && at >= text && (size_t)(at - text) <= len ? (long)(at - text) : 0;
    snprintf(msg, sizeof msg, "not valid JSON (near byte %ld)", pos);
    goto out;
  }
  if (!cJSON_IsObject(j) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "events"))) {
    snprintf(msg, sizeof msg, "not a Temporal JSON history: expected an object {\"events\": [...]}");
    goto out;
  }
  if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "events")) == 0) {
    snprintf(msg, sizeof msg, "the history has no events");
    goto out;
  }
  h = (History *)dbx_pb_from_json(&History__D, j, msg, sizeof msg);
  if (h == NULL) goto out;
  for (size_t i = 0; i < h->n_events; i++) {
    HistoryEvent *e = h->events[i];
    if (e->event_id != (int64_t)i + 1) {
      snprintf(msg, sizeof msg, "events[%zu]: eventId is %lld, expected %zu (ids run 1, 2, 3, ...)", i,
               (long long)e->event_id, i + 1);
      goto out;
    }
    if (!attributes_match(e)) {
      snprintf(msg, sizeof msg, "events[%zu] (event %lld): its attributes are missing or not those of its eventType", i,
               (long long)e->event_id);
      goto out;
    }
  }
  if (h->events[0]->event_type != ET(WORKFLOW_EXECUTION_STARTED)) {
    snprintf(msg, sizeof msg, "events[0]: the first event is not WorkflowExecutionStarted");
    goto out;
  }
  *out = h->events;
  *n_out = h->n_events;
  h->events = NULL;
  h->n_events = 0;
  rc = DBX_OK;
out:
  if (h) protobuf_c_message_free_unpacked(&h->base, NULL);
  cJSON_Delete(j);
  if (rc != DBX_OK) {
    *err = strdup(msg[0] ? msg : "out of memory");
    if (msg[0] == '\0' || strstr(msg, "out of memory")) rc = DBX_ENOMEM;
  }
  return rc;
}

void dbx_pb_history_free(HistoryEvent **events, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (events[i]) protobuf_c_message_free_unpacked(&events[i]->base, NULL);
  free(events);
}
