/* See pbmut.h. Memory: the unpacked tree is freed with
 * protobuf_c_message_free_unpacked (the default allocator, malloc/free), so
 * every value put into it is malloc'd and every value replaced is freed. */
#include "tests/fuzz/pbmut.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t s;
} rng;

static uint32_t next(rng *r) {
  r->s ^= r->s << 13;
  r->s ^= r->s >> 7;
  r->s ^= r->s << 17;
  return (uint32_t)(r->s >> 16);
}

/* Values that mean something to the service and the worker. */
static const char *const words[] = {
    "default", "wf-1", "wf-2", "tq", "durabox", "durabox.Script", "it.Workflow", "it.Activity",
    "a1", "t1", "sig", "__stack_trace", "__temporal_workflow_metadata", "json/plain", "encoding",
    "binary/null", "WorkflowId = 'wf-1'", "ExecutionStatus = 'Running'", "", "\xff\xfe", "\xc3",
    "00000000-0000-0000-0000-000000000000", "{}", "null", "{\"steps\":[]}", "\"x\"", "1",
    "at_most_once", "nope",
};

typedef struct {
  ProtobufCMessage *m;
  const ProtobufCFieldDescriptor *f;
} site;

#define MAX_SITES 512

typedef struct {
  site s[MAX_SITES];
  size_t n;
} sites;

static void *member(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  return (char *)m + f->offset;
}

static uint32_t *quant(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  return (uint32_t *)((char *)m + f->quantifier_offset);
}

static int is_oneof(const ProtobufCFieldDescriptor *f) { return (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0; }

static size_t elem_size(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_SINT32: case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_ENUM: return 4;
  case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE: return 8;
  case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
  case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
  case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  }
  return 0;
}

static void collect(ProtobufCMessage *m, sites *out, int depth) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (out->n < MAX_SITES) out->s[out->n++] = (site){m, f};
    if (f->type != PROTOBUF_C_TYPE_MESSAGE || depth > 12) continue;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(size_t *)quant(m, f);
      ProtobufCMessage **a = *(ProtobufCMessage ***)member(m, f);
      for (size_t k = 0; k < n; k++)
        if (a[k]) collect(a[k], out, depth + 1);
    } else if (!is_oneof(f) || *quant(m, f) == f->id) {
      ProtobufCMessage *sub = *(ProtobufCMessage **)member(m, f);
      if (sub) collect(sub, out, depth + 1);
    }
  }
}

static void free_value(const ProtobufCFieldDescriptor *f, void *p) {
  if (f->type == PROTOBUF_C_TYPE_STRING) {
    char *s = *(char **)p;
    if (s && s != (char *)f->default_value && s != protobuf_c_empty_string) free(s);
    *(char **)p = (char *)protobuf_c_empty_string;
  } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
    free(((ProtobufCBinaryData *)p)->data);
    *(ProtobufCBinaryData *)p = (ProtobufCBinaryData){0};
  } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    ProtobufCMessage *sub = *(ProtobufCMessage **)p;
    if (sub) protobuf_c_message_free_unpacked(sub, NULL);
    *(ProtobufCMessage **)p = NULL;
  } else {
    memset(p, 0, elem_size(f));
  }
}

/* Make f the set member of its oneof: free the member that was set. */
static void oneof_take(ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
  uint32_t *c = quant(m, f);
  if (*c == f->id) return;
  const ProtobufCMessageDescriptor *d = m->descriptor;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *g = &d->fields[i];
    if (is_oneof(g) && g->quantifier_offset == f->quantifier_offset && g->id == *c) free_value(g, member(m, g));
  }
  memset(member(m, f), 0, elem_size(f));
  if (f->type == PROTOBUF_C_TYPE_STRING) *(char **)member(m, f) = (char *)protobuf_c_empty_string;
  *c = f->id;
}

static char *str_new(rng *r, const char *old) {
  uint32_t k = next(r) % 8;
  if (k < 5) return strdup(words[next(r) % (sizeof words / sizeof words[0])]);
  if (k == 5) { /* a long value: over the service's id limit */
    size_t n = 1 + next(r) % 3000;
    char *s = malloc(n + 1);
    if (s) memset(s, 'a' + (int)(next(r) % 26), n), s[n] = '\0';
    return s;
  }
  /* the old value with one byte changed, or cut */
  size_t n = old ? strlen(old) : 0;
  char *s = malloc(n + 2);
  if (!s) return NULL;
  memcpy(s, old ? old : "", n + 1);
  if (n && k == 6) s[next(r) % n] = (char)(1 + next(r) % 255);
  else if (n) s[next(r) % n] = '\0';
  else s[0] = (char)(1 + next(r) % 255), s[1] = '\0';
  return s;
}

static void scalar_new(rng *r, const ProtobufCFieldDescriptor *f, void *p) {
  static const int64_t edge[] = {0, 1, -1, 2, 3, 5, 10, 100, 1000, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                                 1000000000, 86400, 1700000000};
  int64_t v = next(r) % 4 ? edge[next(r) % (sizeof edge / sizeof edge[0])] : (int64_t)next(r) - 1000;
  switch (f->type) {
  case PROTOBUF_C_TYPE_BOOL: *(protobuf_c_boolean *)p = !*(protobuf_c_boolean *)p; break;
  case PROTOBUF_C_TYPE_FLOAT: *(float *)p = (float)v / 7; break;
  case PROTOBUF_C_TYPE_DOUBLE: *(double *)p = (double)v / 7; break;
  case PROTOBUF_C_TYPE_ENUM: {
    const ProtobufCEnumDescriptor *e = f->descriptor;
    if (e && e->n_values && next(r) % 4) v = e->values[next(r) % e->n_values].value;
    *(int32_t *)p = (int32_t)v;
    break;
  }
  default:
    if (elem_size(f) == 4) *(int32_t *)p = (int32_t)v;
    else *(int64_t *)p = v;
  }
}

static void value_new(rng *r, const ProtobufCFieldDescriptor *f, void *p) {
  if (f->type == PROTOBUF_C_TYPE_STRING) {
    char *s = str_new(r, *(char **)p);
    if (!s) return;
    free_value(f, p);
    *(char **)p = s;
  } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
    size_t n = next(r) % 24;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)next(r);
    free_value(f, p);
    *(ProtobufCBinaryData *)p = (ProtobufCBinaryData){n, b};
  } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
    if (*(ProtobufCMessage **)p) return; /* set already: its fields are sites of their own */
    const ProtobufCMessageDescriptor *sd = f->descriptor;
    ProtobufCMessage *sub = malloc(sd->sizeof_message);
    if (!sub) return;
    sd->message_init(sub);
    *(ProtobufCMessage **)p = sub;
  } else {
    scalar_new(r, f, p);
  }
}

static void mutate_site(rng *r, site *st) {
  ProtobufCMessage *m = st->m;
  const ProtobufCFieldDescriptor *f = st->f;
  void *p = member(m, f);
  if (f->label == PROTOBUF_C_LABEL_REPEATED) {
    size_t *n = (size_t *)quant(m, f);
    char **arr = (char **)p;
    size_t es = elem_size(f);
    if (*n && next(r) % 3 == 0) { /* drop the last element */
      free_value(f, *arr + (*n - 1) * es);
      if (--*n == 0) free(*arr), *arr = NULL;
      return;
    }
    if (*n && next(r) % 2) { /* change one */
      value_new(r, f, *arr + (next(r) % *n) * es);
      return;
    }
    char *grown = realloc(*arr, (*n + 1) * es);
    if (!grown) return;
    *arr = grown;
    memset(grown + *n * es, 0, es);
    if (f->type == PROTOBUF_C_TYPE_STRING) *(char **)(grown + *n * es) = (char *)protobuf_c_empty_string;
    value_new(r, f, grown + *n * es);
    if (f->type == PROTOBUF_C_TYPE_MESSAGE && *(void **)(grown + *n * es) == NULL) return;
    if (f->type == PROTOBUF_C_TYPE_STRING && *(char **)(grown + *n * es) == protobuf_c_empty_string) {
      *(char **)(grown + *n * es) = strdup("");
      if (*(char **)(grown + *n * es) == NULL) return;
    }
    (*n)++;
    return;
  }
  if (is_oneof(f)) oneof_take(m, f);
  else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
           f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
    *(protobuf_c_boolean *)quant(m, f) = 1;
  if (f->type == PROTOBUF_C_TYPE_MESSAGE && *(ProtobufCMessage **)p && next(r) % 4 == 0) {
    free_value(f, p); /* remove a submessage */
    if (is_oneof(f)) *quant(m, f) = 0;
    return;
  }
  value_new(r, f, p);
}

size_t dbx_fuzz_pb_mutate(const ProtobufCMessageDescriptor *d, uint8_t *data, size_t size, size_t max,
                          unsigned seed) {
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size, data);
  if (!m) return 0;
  rng r = {((uint64_t)seed << 1) | 1};
  static sites all;
  int rounds = 1 + (int)(next(&r) % 3);
  for (int k = 0; k < rounds; k++) {
    all.n = 0;
    collect(m, &all, 0);
    if (all.n) mutate_site(&r, &all.s[next(&r) % all.n]);
  }
  size_t out = protobuf_c_message_get_packed_size(m);
  if (out > max) {
    out = 0;
  } else {
    protobuf_c_message_pack(m, data);
  }
  protobuf_c_message_free_unpacked(m, NULL);
  return out;
}
