/* Custom search attributes (Temporal: OperatorService AddSearchAttributes /
 * ListSearchAttributes): the registry per namespace, the check that a start
 * or an upsert names only registered attributes, and the definitions the
 * visibility queries compile against.
 *
 * The registry of a namespace is one row of the meta table (key
 * "search-attributes" \0 namespace) holding a packed
 * AddSearchAttributesRequest (its map name -> IndexedValueType). Every
 * namespace also has the custom attributes Temporal's dev server predefines
 * (CustomKeywordField, ...). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "service/svc.h"

typedef Temporal__Api__Operatorservice__V1__AddSearchAttributesRequest__SearchAttributesEntry sa_entry;

static const dbx_visq_sa_def predefined[] = {
    {"CustomKeywordField", 2}, {"CustomStringField", 1}, {"CustomTextField", 1}, {"CustomIntField", 3},
    {"CustomDatetimeField", 6}, {"CustomDoubleField", 4}, {"CustomBoolField", 5},
};
#define N_PREDEFINED (sizeof predefined / sizeof predefined[0])

/* The built-in attributes of visibility (ListSearchAttributes' system_attributes). */
static const dbx_visq_sa_def system_attrs[] = {
    {"WorkflowId", 2},    {"WorkflowType", 2}, {"TaskQueue", 2},     {"RunId", 2},
    {"ExecutionStatus", 2}, {"StartTime", 6},  {"CloseTime", 6},     {"ExecutionTime", 6},
    {"HistoryLength", 3}, {"TemporalChangeVersion", 7}, {"BinaryChecksums", 7}, {"BuildIds", 7},
    {"TemporalScheduledStartTime", 6}, {"TemporalScheduledById", 2},
};
#define N_SYSTEM (sizeof system_attrs / sizeof system_attrs[0])

/* The system attributes Temporal lets a workflow set: the SDKs upsert
 * TemporalChangeVersion from workflow.patched / GetVersion; the scheduler
 * (schedule.c) starts its workflows with TemporalScheduled*. */
static int sa_upsertable(const char *name) {
  return strcmp(name, "TemporalChangeVersion") == 0 || strcmp(name, "BinaryChecksums") == 0 ||
         strcmp(name, "BuildIds") == 0 || strcmp(name, "TemporalScheduledStartTime") == 0 ||
         strcmp(name, "TemporalScheduledById") == 0;
}

static char *registry_key(const char *ns, size_t *len) {
  static const char pfx[] = "search-attributes";
  size_t n = strlen(ns);
  char *k = dbx_malloc(sizeof pfx + n);
  if (k == NULL) return NULL;
  memcpy(k, pfx, sizeof pfx); /* with its NUL */
  memcpy(k + sizeof pfx, ns, n);
  *len = sizeof pfx + n;
  return k;
}

/* The stored registry (custom attributes added), or NULL when none. */
static dbx_err registry_load(ectx *c, const char *ns, AddSearchAttributesRequest **out) {
  *out = NULL;
  size_t kl;
  char *k = registry_key(ns, &kl);
  if (k == NULL) return DBX_ENOMEM;
  dbx_val v;
  dbx_err rc = dbx_store_get(c->txn, c->svc->t_meta, k, kl, &v);
  free(k);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  rc = svc_pb_unpack(&AddSearchAttributesRequest__D, v.data, v.size, (void **)out);
  return rc == DBX_EINVAL ? DBX_OK : rc; /* a damaged row: as if none were added */
}

static const dbx_visq_sa_def *find_def(const dbx_visq_sa_def *defs, size_t n, const char *name);

void svc_sa_defs_free(svc_sa_defs *d) {
  if (d == NULL) return;
  free(d->defs);
  if (d->stored) protobuf_c_message_free_unpacked(&d->stored->base, NULL);
  memset(d, 0, sizeof *d);
}

dbx_err svc_sa_defs_load(ectx *c, const char *ns, svc_sa_defs *out) {
  memset(out, 0, sizeof *out);
  dbx_err rc = registry_load(c, ns, &out->stored);
  if (rc != DBX_OK) return rc;
  size_t n = N_PREDEFINED + (out->stored ? out->stored->n_search_attributes : 0);
  n += c->svc->n_start_sa;
  out->defs = dbx_calloc(n + 1, sizeof *out->defs);
  if (out->defs == NULL) {
    svc_sa_defs_free(out);
    return DBX_ENOMEM;
  }
  for (size_t i = 0; i < N_PREDEFINED; i++) out->defs[out->n++] = predefined[i];
  for (size_t i = 0; i < c->svc->n_start_sa; i++)
    if (find_def(out->defs, out->n, c->svc->start_sa[i].name) == NULL) out->defs[out->n++] = c->svc->start_sa[i];
  for (size_t i = 0; out->stored && i < out->stored->n_search_attributes; i++) {
    if (find_def(out->defs, out->n, out->stored->search_attributes[i]->key)) continue; /* also a start flag */
    out->defs[out->n].name = out->stored->search_attributes[i]->key;
    out->defs[out->n++].type = (int)out->stored->search_attributes[i]->value;
  }
  return DBX_OK;
}

static const dbx_visq_sa_def *find_def(const dbx_visq_sa_def *defs, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(defs[i].name, name) == 0) return &defs[i];
  return NULL;
}

int svc_sa_check(ectx *c, job *j, const char *ns, const SearchAttributes *sa, dbx_err *rc) {
  *rc = DBX_OK;
  if (sa == NULL || sa->n_indexed_fields == 0) return 1;
  svc_sa_defs d;
  *rc = svc_sa_defs_load(c, ns, &d);
  if (*rc != DBX_OK) return 0;
  int ok = 1;
  for (size_t i = 0; ok && i < sa->n_indexed_fields; i++) {
    const char *name = sa->indexed_fields[i]->key;
    if (find_def(d.defs, d.n, name) == NULL && !sa_upsertable(name)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "search attribute %s is not defined", name);
      ok = 0;
    }
  }
  svc_sa_defs_free(&d);
  return ok;
}

/* ---- OperatorService ---- */

static int valid_type(int t) { return t >= DBX_VISQ_SA_TEXT && t <= DBX_VISQ_SA_KEYWORD_LIST; }

static dbx_err add_checked(ectx *c, job *j, AddSearchAttributesRequest *q, svc_sa_defs *d) {
  size_t n_new = 0;
  for (size_t i = 0; i < q->n_search_attributes; i++) {
    const char *name = q->search_attributes[i]->key;
    int ty = (int)q->search_attributes[i]->value;
    const dbx_visq_sa_def *have = find_def(d->defs, d->n, name);
    if (!valid_type(ty)) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "unknown search attribute type %d for %s", ty, name);
      return DBX_OK;
    }
    if (find_def(system_attrs, N_SYSTEM, name) || name[0] == '\0') {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "search attribute %s is reserved by system", name);
      return DBX_OK;
    }
    if (have && have->type != ty) {
      svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "search attribute %s already exists with another type", name);
      return DBX_OK;
    }
    if (!have) n_new++;
  }
  if (n_new == 0) return DBX_OK; /* all known with these types: nothing to do, as Temporal */
  size_t n_old = d->stored ? d->stored->n_search_attributes : 0;
  sa_entry **all = dbx_calloc(n_old + n_new + 1, sizeof *all);
  if (all == NULL) return DBX_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < n_old; i++) all[n++] = d->stored->search_attributes[i];
  for (size_t i = 0; i < q->n_search_attributes; i++) {
    int dup = find_def(d->defs, d->n, q->search_attributes[i]->key) != NULL;
    for (size_t k = 0; k < i; k++) dup |= strcmp(q->search_attributes[k]->key, q->search_attributes[i]->key) == 0;
    if (!dup) all[n++] = q->search_attributes[i];
  }
  AddSearchAttributesRequest reg = INIT(TEMPORAL__API__OPERATORSERVICE__V1__ADD_SEARCH_ATTRIBUTES_REQUEST);
  reg.n_search_attributes = n;
  reg.search_attributes = all;
  size_t kl = 0, len = protobuf_c_message_get_packed_size(&reg.base);
  char *k = registry_key(q->namespace_, &kl);
  uint8_t *buf = dbx_malloc(len ? len : 1);
  dbx_err rc = DBX_ENOMEM;
  if (k && buf) {
    protobuf_c_message_pack(&reg.base, buf);
    rc = dbx_store_put(c->txn, c->svc->t_meta, k, kl, buf, len);
  }
  free(k);
  free(buf);
  free(all);
  return rc;
}

dbx_err svc_h_add_search_attributes(ectx *c, job *j) {
  AddSearchAttributesRequest *q = svc_decode(j, &AddSearchAttributesRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (q->n_search_attributes == 0) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "AddSearchAttributes: search_attributes is empty");
  } else if (svc_check_ns(c, j, q->namespace_)) {
    svc_sa_defs d;
    rc = svc_sa_defs_load(c, q->namespace_, &d);
    if (rc == DBX_OK) rc = add_checked(c, j, q, &d);
    svc_sa_defs_free(&d);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

typedef Temporal__Api__Operatorservice__V1__ListSearchAttributesResponse__CustomAttributesEntry list_entry;

static list_entry *entries_of(const dbx_visq_sa_def *defs, size_t n, list_entry ***ptrs) {
  list_entry *e = dbx_calloc(n + 1, sizeof *e);
  *ptrs = dbx_calloc(n + 1, sizeof **ptrs);
  if (e == NULL || *ptrs == NULL) {
    free(e);
    free(*ptrs);
    *ptrs = NULL;
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    list_entry x = INIT(TEMPORAL__API__OPERATORSERVICE__V1__LIST_SEARCH_ATTRIBUTES_RESPONSE__CUSTOM_ATTRIBUTES_ENTRY);
    e[i] = x;
    e[i].key = (char *)defs[i].name;
    e[i].value = (Temporal__Api__Enums__V1__IndexedValueType)defs[i].type;
    (*ptrs)[i] = &e[i];
  }
  return e;
}

dbx_err svc_h_list_search_attributes(ectx *c, job *j) {
  ListSearchAttributesRequest *q = svc_decode(j, &ListSearchAttributesRequest__D);
  if (q == NULL) return DBX_OK;
  dbx_err rc = DBX_OK;
  if (svc_check_ns(c, j, q->namespace_)) {
    svc_sa_defs d;
    rc = svc_sa_defs_load(c, q->namespace_, &d);
    list_entry **cp = NULL, **sp = NULL;
    list_entry *ce = rc == DBX_OK ? entries_of(d.defs, d.n, &cp) : NULL;
    list_entry *se = rc == DBX_OK ? entries_of(system_attrs, N_SYSTEM, &sp) : NULL;
    if (rc == DBX_OK && (ce == NULL || se == NULL)) rc = DBX_ENOMEM;
    if (rc == DBX_OK) {
      ListSearchAttributesResponse r = INIT(TEMPORAL__API__OPERATORSERVICE__V1__LIST_SEARCH_ATTRIBUTES_RESPONSE);
      r.n_custom_attributes = d.n;
      r.custom_attributes = cp;
      r.n_system_attributes = N_SYSTEM;
      /* the two map entry types have the same layout (string -> enum) */
      r.system_attributes = (Temporal__Api__Operatorservice__V1__ListSearchAttributesResponse__SystemAttributesEntry **)sp;
      svc_job_reply(j, &r.base);
    }
    free(ce);
    free(cp);
    free(se);
    free(sp);
    svc_sa_defs_free(&d);
  }
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

/* ---- --search-attribute Name=Type ---- */

static const char *const type_names[] = {NULL, "Text", "Keyword", "Int", "Double", "Bool", "Datetime", "KeywordList"};

dbx_err svc_sa_opts_parse(dbx_service *s, const dbx_service_opts *o, char **msg) {
  *msg = NULL;
  if (o->n_search_attributes == 0) return DBX_OK;
  s->start_sa = dbx_calloc(o->n_search_attributes, sizeof *s->start_sa);
  if (s->start_sa == NULL) return DBX_ENOMEM;
  for (size_t i = 0; i < o->n_search_attributes; i++) {
    const char *spec = o->search_attributes[i] ? o->search_attributes[i] : "";
    const char *eq = strchr(spec, '=');
    int ty = 0;
    for (int k = 1; eq && k <= DBX_VISQ_SA_KEYWORD_LIST; k++)
      if (strcasecmp(eq + 1, type_names[k]) == 0) ty = k;
    if (eq == NULL || eq == spec || ty == 0) {
      *msg = dbx_asprintf("--search-attribute %s: expected Name=Type, Type one of Text, Keyword, Int, Double, Bool, "
                          "Datetime, KeywordList",
                          spec);
      return DBX_EINVAL;
    }
    char *name = dbx_malloc((size_t)(eq - spec) + 1);
    if (name == NULL) return DBX_ENOMEM;
    memcpy(name, spec, (size_t)(eq - spec));
    name[eq - spec] = '\0';
    const dbx_visq_sa_def *have = find_def(predefined, N_PREDEFINED, name);
    if (have == NULL) have = find_def(s->start_sa, s->n_start_sa, name);
    if (find_def(system_attrs, N_SYSTEM, name) || (have && have->type != ty)) {
      *msg = dbx_asprintf("--search-attribute %s: %s", spec,
                          have ? "the name is defined with another type" : "the name is reserved by system");
      free(name);
      return DBX_EINVAL;
    }
    s->start_sa[s->n_start_sa].name = name;
    s->start_sa[s->n_start_sa++].type = ty;
  }
  return DBX_OK;
}

void svc_sa_opts_free(dbx_service *s) {
  for (size_t i = 0; i < s->n_start_sa; i++) free((char *)s->start_sa[i].name);
  free(s->start_sa);
  s->start_sa = NULL;
  s->n_start_sa = 0;
}
