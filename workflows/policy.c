/* workflows/policy: see policy.h. */
#include "workflows/policy.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct {
  char *name;
  cJSON *equals;  /* owned copies, NULL = not given */
  char *contains;
  cJSON *one_of;
  regex_t re;
  int has_re;
} arg_match;

typedef struct {
  char *id;
  char *step_kind;   /* NULL = any */
  char *target;      /* NULL = any */
  char **targets;    /* NULL = any; ntargets globs */
  size_t ntargets;
  arg_match *args;
  size_t nargs;
  dbx_policy_decision decision;
  char *reason;
  int64_t timeout_ms;
  cJSON *approvers; /* owned array of names, or NULL (anyone) */
} rule;

struct dbx_policy {
  int permissive;
  dbx_policy_decision dflt;
  char *dflt_reason;
  rule *rules;
  size_t nrules;
};

const char *dbx_policy_decision_str(dbx_policy_decision d) {
  return d == DBX_POLICY_ALLOW ? "allow" : d == DBX_POLICY_DENY ? "deny" : "require_approval";
}

static int decision_of(const cJSON *v, dbx_policy_decision *d) {
  if (!cJSON_IsString(v)) return -1;
  if (strcmp(v->valuestring, "allow") == 0) *d = DBX_POLICY_ALLOW;
  else if (strcmp(v->valuestring, "deny") == 0) *d = DBX_POLICY_DENY;
  else if (strcmp(v->valuestring, "require_approval") == 0) *d = DBX_POLICY_APPROVAL;
  else return -1;
  return 0;
}

static int only_keys(const cJSON *o, const char *const *keys, const char **bad) {
  for (const cJSON *c = o->child; c; c = c->next) {
    int ok = 0;
    for (size_t i = 0; keys[i]; i++) ok |= strcmp(c->string, keys[i]) == 0;
    for (const cJSON *d = o->child; d != c; d = d->next)
      if (strcmp(d->string, c->string) == 0) ok = 0;
    if (!ok) return *bad = c->string, -1;
  }
  return 0;
}

static void rule_free(rule *r) {
  free(r->id);
  free(r->step_kind);
  free(r->target);
  for (size_t i = 0; i < r->ntargets; i++) free(r->targets[i]);
  free(r->targets);
  for (size_t i = 0; i < r->nargs; i++) {
    arg_match *a = &r->args[i];
    free(a->name);
    cJSON_Delete(a->equals);
    free(a->contains);
    cJSON_Delete(a->one_of);
    if (a->has_re) regfree(&a->re);
  }
  free(r->args);
  free(r->reason);
  cJSON_Delete(r->approvers);
}

void dbx_policy_free(dbx_policy *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nrules; i++) rule_free(&p->rules[i]);
  free(p->rules);
  free(p->dflt_reason);
  free(p);
}

#define BAD(...) (snprintf(err, n, __VA_ARGS__), -1)

/* What a regular expression may not hold, so that compiling and matching it
 * stay cheap in a workflow task: over 512 bytes, a repetition count over
 * 100 ({n}, {n,m}), or a back-reference (\\1, which makes matching
 * exponential). NULL when it is fine. */
/* Refuse what makes glibc's regcomp build huge trees (the fuzzer found
 * "a+++...+" taking gigabytes): back-references, stacked quantifiers
 * ("a++", "a*{2}"), more than 32 quantifiers, and counted repetitions whose
 * counts add up to more than 100. Bracket expressions are skipped whole. */
static const char *regex_refused(const char *re) {
  if (strlen(re) > 512) return "longer than 512 bytes";
  int prev_quant = 0, nquant = 0;
  long counts = 0;
  for (const char *p = re; *p; p++) {
    if (*p == '\\' && p[1] >= '1' && p[1] <= '9') return "back-references are not accepted";
    if (*p == '\\' && p[1]) {
      p++;
      prev_quant = 0;
      continue;
    }
    if (*p == '[') { /* to the closing ']' ("[]...]" and "[^]...]" hold a ']') */
      const char *q = p + 1;
      if (*q == '^') q++;
      if (*q == ']') q++;
      while (*q && *q != ']') q++;
      if (*q == '\0') return NULL; /* unbalanced: regcomp says so */
      p = q;
      prev_quant = 0;
      continue;
    }
    if (*p != '*' && *p != '+' && *p != '?' && *p != '{') {
      prev_quant = 0;
      continue;
    }
    if (prev_quant) return "a quantifier right after another (such as \"a++\") is not accepted";
    if (++nquant > 32) return "more than 32 repetition operators are not accepted";
    prev_quant = 1;
    if (*p != '{') continue;
    const char *q = p + 1;
    for (; *q && *q != '}'; q++) {
      if (*q < '0' || *q > '9') continue;
      long v = strtol(q, (char **)&q, 10);
      if (v > 100) return "repetition counts over 100 are not accepted";
      counts += v;
      q--;
    }
    if (counts > 100) return "counted repetitions adding up to over 100 are not accepted";
    if (*q == '\0') return NULL;
    p = q;
  }
  return NULL;
}

static int compile_arg(rule *r, const cJSON *m, arg_match *a, char *err, size_t n) {
  static const char *const keys[] = {"equals", "contains", "one_of", "regex", NULL};
  const char *bad = NULL;
  if (!(a->name = dbx_strdup(m->string))) return BAD("%s", "");
  if (!cJSON_IsObject(m) || !m->child)
    return BAD("policy: rule '%s': arguments.%s must be a non-empty object of matchers "
               "(equals, contains, one_of, regex)", r->id, m->string);
  if (only_keys(m, keys, &bad) != 0)
    return BAD("policy: rule '%s': arguments.%s: unknown or repeated key \"%s\" (equals, "
               "contains, one_of, regex)", r->id, m->string, bad);
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(m, "equals")) && !(a->equals = cJSON_Duplicate(v, 1)))
    return BAD("%s", "");
  if ((v = cJSON_GetObjectItemCaseSensitive(m, "contains"))) {
    if (!cJSON_IsString(v))
      return BAD("policy: rule '%s': arguments.%s.contains must be text", r->id, m->string);
    if (!(a->contains = dbx_strdup(v->valuestring))) return BAD("%s", "");
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(m, "one_of"))) {
    if (!cJSON_IsArray(v) || !v->child)
      return BAD("policy: rule '%s': arguments.%s.one_of must be a non-empty list", r->id, m->string);
    if (!(a->one_of = cJSON_Duplicate(v, 1))) return BAD("%s", "");
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(m, "regex"))) {
    if (!cJSON_IsString(v))
      return BAD("policy: rule '%s': arguments.%s.regex must be text", r->id, m->string);
    const char *why_not = regex_refused(v->valuestring);
    if (why_not)
      return BAD("policy: rule '%s': arguments.%s.regex: %s", r->id, m->string, why_not);
    int rc = regcomp(&a->re, v->valuestring, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char why[160];
      regerror(rc, &a->re, why, sizeof why);
      return BAD("policy: rule '%s': arguments.%s.regex '%.80s': %s", r->id, m->string,
                 v->valuestring, why);
    }
    a->has_re = 1;
  }
  return 0;
}

static int compile_when(rule *r, const cJSON *w, char *err, size_t n) {
  static const char *const keys[] = {"step_kind", "target", "targets", "arguments", NULL};
  const char *bad = NULL;
  if (!w) return 0;
  if (!cJSON_IsObject(w)) return BAD("policy: rule '%s': \"when\" must be an object", r->id);
  if (only_keys(w, keys, &bad) != 0)
    return BAD("policy: rule '%s': when: unknown or repeated key \"%s\" (step_kind, target, "
               "targets, arguments)", r->id, bad);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(w, "step_kind");
  if (v) {
    if (!cJSON_IsString(v) ||
        (strcmp(v->valuestring, "llm_call") != 0 && strcmp(v->valuestring, "tool_call") != 0))
      return BAD("policy: rule '%s': when.step_kind must be \"llm_call\" or \"tool_call\"", r->id);
    if (!(r->step_kind = dbx_strdup(v->valuestring))) return BAD("%s", "");
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(w, "target"))) {
    if (!cJSON_IsString(v) || !v->valuestring[0])
      return BAD("policy: rule '%s': when.target must be a glob (text)", r->id);
    if (!(r->target = dbx_strdup(v->valuestring))) return BAD("%s", "");
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(w, "targets"))) {
    int k = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 0;
    if (k == 0) return BAD("policy: rule '%s': when.targets must be a non-empty list of globs", r->id);
    if (!(r->targets = calloc((size_t)k, sizeof *r->targets))) return BAD("%s", "");
    for (const cJSON *t = v->child; t; t = t->next) {
      if (!cJSON_IsString(t) || !t->valuestring[0])
        return BAD("policy: rule '%s': when.targets must be a non-empty list of globs", r->id);
      if (!(r->targets[r->ntargets++] = dbx_strdup(t->valuestring))) return BAD("%s", "");
    }
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(w, "arguments"))) {
    int k = cJSON_IsObject(v) ? cJSON_GetArraySize(v) : 0;
    if (k == 0) return BAD("policy: rule '%s': when.arguments must be a non-empty object", r->id);
    if (!(r->args = calloc((size_t)k, sizeof *r->args))) return BAD("%s", "");
    for (const cJSON *m = v->child; m; m = m->next)
      if (compile_arg(r, m, &r->args[r->nargs++], err, n) != 0) return -1;
  }
  return 0;
}

static int compile_then(rule *r, const cJSON *t, char *err, size_t n) {
  static const char *const keys[] = {"decision", "reason", "approval_timeout_s", "approvers", NULL};
  const char *bad = NULL;
  if (!cJSON_IsObject(t)) return BAD("policy: rule '%s': \"then\" must be an object", r->id);
  if (only_keys(t, keys, &bad) != 0)
    return BAD("policy: rule '%s': then: unknown or repeated key \"%s\" (decision, reason, "
               "approval_timeout_s, approvers)", r->id, bad);
  if (decision_of(cJSON_GetObjectItemCaseSensitive(t, "decision"), &r->decision) != 0)
    return BAD("policy: rule '%s': then.decision must be allow, deny or require_approval", r->id);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "reason");
  if (v && !cJSON_IsString(v)) return BAD("policy: rule '%s': then.reason must be text", r->id);
  if (!(r->reason = dbx_strdup(v ? v->valuestring : ""))) return BAD("%s", "");
  v = cJSON_GetObjectItemCaseSensitive(t, "approval_timeout_s");
  if (v && (!cJSON_IsNumber(v) || v->valuedouble < 0.001 || v->valuedouble > 315360000.0))
    return BAD("policy: rule '%s': then.approval_timeout_s must be a number of seconds >= 0.001",
               r->id);
  r->timeout_ms = (int64_t)(1000.0 * (v ? v->valuedouble : DBX_POLICY_DEFAULT_APPROVAL_S));
  if ((v = cJSON_GetObjectItemCaseSensitive(t, "approvers"))) {
    int ok = cJSON_IsArray(v) && v->child;
    for (const cJSON *a = ok ? v->child : NULL; a; a = a->next) ok &= cJSON_IsString(a) && a->valuestring[0];
    if (!ok) return BAD("policy: rule '%s': then.approvers must be a non-empty list of names", r->id);
    if (!(r->approvers = cJSON_Duplicate(v, 1))) return BAD("%s", "");
  }
  return 0;
}

static int compile_rules(dbx_policy *p, const cJSON *rules, char *err, size_t n) {
  int k = cJSON_IsArray(rules) ? cJSON_GetArraySize(rules) : -1;
  if (!rules) return 0;
  if (k < 0) return BAD("policy: \"rules\" must be a list");
  if (k && !(p->rules = calloc((size_t)k, sizeof *p->rules))) return BAD("%s", "");
  int i = 0;
  for (const cJSON *o = rules->child; o; o = o->next, i++) {
    static const char *const keys[] = {"id", "when", "then", NULL};
    const char *bad = NULL;
    const cJSON *id = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "id") : NULL;
    if (!cJSON_IsString(id) || !id->valuestring[0])
      return BAD("policy: rules[%d] has no \"id\" (text)", i);
    rule *r = &p->rules[p->nrules++];
    if (!(r->id = dbx_strdup(id->valuestring))) return BAD("%s", "");
    for (size_t j = 0; j + 1 < p->nrules; j++)
      if (strcmp(p->rules[j].id, r->id) == 0) return BAD("policy: rule id '%s' is used twice", r->id);
    if (only_keys(o, keys, &bad) != 0)
      return BAD("policy: rule '%s': unknown or repeated key \"%s\" (id, when, then)", r->id, bad);
    if (compile_when(r, cJSON_GetObjectItemCaseSensitive(o, "when"), err, n) != 0) return -1;
    if (compile_then(r, cJSON_GetObjectItemCaseSensitive(o, "then"), err, n) != 0) return -1;
  }
  return 0;
}

dbx_policy *dbx_policy_compile(const cJSON *tree, char *err, size_t n) {
  if (n) err[0] = '\0';
  dbx_policy *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->dflt = DBX_POLICY_DENY;
  if (!tree || cJSON_IsNull(tree)) {
    p->permissive = 1;
    p->dflt = DBX_POLICY_ALLOW;
    if (!(p->dflt_reason = dbx_strdup(""))) goto bad;
    return p;
  }
  static const char *const keys[] = {"default_action", "default_reason", "rules", "version", NULL};
  const char *badk = NULL;
  if (!cJSON_IsObject(tree)) {
    (void)BAD("policy: must be an object with default_action and rules");
    goto bad;
  }
  if (only_keys(tree, keys, &badk) != 0) {
    (void)BAD("policy: unknown or repeated key \"%s\" (default_action, default_reason, rules)", badk);
    goto bad;
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(tree, "default_action");
  if (d && decision_of(d, &p->dflt) != 0) {
    (void)BAD("policy: default_action must be allow, deny or require_approval");
    goto bad;
  }
  const cJSON *dr = cJSON_GetObjectItemCaseSensitive(tree, "default_reason");
  if (dr && !cJSON_IsString(dr)) {
    (void)BAD("policy: default_reason must be text");
    goto bad;
  }
  if (!(p->dflt_reason = dbx_strdup(dr ? dr->valuestring : ""))) goto bad;
  if (compile_rules(p, cJSON_GetObjectItemCaseSensitive(tree, "rules"), err, n) != 0) goto bad;
  return p;
bad:
  dbx_policy_free(p);
  return NULL;
}

/* An argument's text: a string as itself, anything else as JSON. */
static char *arg_text(const cJSON *v) {
  return cJSON_IsString(v) ? dbx_strdup(v->valuestring) : cJSON_PrintUnformatted(v);
}

static int value_equals(const cJSON *want, const cJSON *got, const char *text) {
  if (cJSON_IsString(want)) return text && strcmp(want->valuestring, text) == 0;
  return cJSON_Compare(want, got, 1);
}

static int arg_matches(const arg_match *a, const cJSON *args) {
  const cJSON *v = cJSON_IsObject(args) ? cJSON_GetObjectItemCaseSensitive(args, a->name) : NULL;
  if (!v) return 0;
  char *text = arg_text(v);
  int ok = text != NULL;
  if (ok && a->equals) ok = value_equals(a->equals, v, text);
  if (ok && a->contains) ok = strstr(text, a->contains) != NULL;
  if (ok && a->one_of) {
    int any = 0;
    for (const cJSON *c = a->one_of->child; c && !any; c = c->next) any = value_equals(c, v, text);
    ok = any;
  }
  if (ok && a->has_re) ok = regexec(&a->re, text, 0, NULL, 0) == 0;
  free(text);
  return ok;
}

static int rule_matches(const rule *r, const char *kind, const char *target, const cJSON *args) {
  if (r->step_kind && strcmp(r->step_kind, kind) != 0) return 0;
  if (r->target && fnmatch(r->target, target, 0) != 0) return 0;
  if (r->targets) {
    int any = 0;
    for (size_t i = 0; i < r->ntargets && !any; i++) any = fnmatch(r->targets[i], target, 0) == 0;
    if (!any) return 0;
  }
  for (size_t i = 0; i < r->nargs; i++)
    if (!arg_matches(&r->args[i], args)) return 0;
  return 1;
}

void dbx_policy_eval(const dbx_policy *p, const char *kind, const char *target, const cJSON *args,
                     dbx_policy_verdict *v) {
  v->decision = p->dflt;
  v->rule_id = p->permissive ? "permissive" : "default";
  v->reason = p->dflt_reason;
  v->approval_timeout_ms = (int64_t)DBX_POLICY_DEFAULT_APPROVAL_S * 1000;
  v->approvers = NULL;
  for (size_t i = 0; i < p->nrules; i++) {
    const rule *r = &p->rules[i];
    if (!rule_matches(r, kind, target ? target : "", args)) continue;
    v->decision = r->decision;
    v->rule_id = r->id;
    v->reason = r->reason;
    v->approval_timeout_ms = r->timeout_ms;
    v->approvers = r->approvers;
    return;
  }
}

/* ---- text: JSON, else YAML ---- */

#include <yaml.h>

static cJSON *yaml_scalar(const yaml_node_t *nd) {
  const char *s = (const char *)nd->data.scalar.value;
  if (nd->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "yes")) return cJSON_CreateTrue();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "no")) return cJSON_CreateFalse();
    if (!strcmp(s, "null") || !strcmp(s, "~") || !*s) return cJSON_CreateNull();
    char *end = NULL;
    double d = strtod(s, &end);
    if (end && end != s && *end == '\0' && strspn(s, "+-0123456789.eE") == strlen(s))
      return cJSON_CreateNumber(d);
  }
  return cJSON_CreateString(s);
}

/* Aliases share nodes, so a small text could expand without bound: the
 * converted nodes are counted (*budget) and capped. */
#define YAML_MAX_NODES 20000
static cJSON *yaml_node_json(yaml_document_t *doc, yaml_node_t *nd, int depth, int *budget,
                             char *err, size_t n) {
  if (!nd || depth > 64) return snprintf(err, n, "policy: YAML nested too deep"), NULL;
  if (++*budget > YAML_MAX_NODES)
    return snprintf(err, n, "policy: the YAML expands to over %d nodes (aliases?)", YAML_MAX_NODES), NULL;
  if (nd->tag && strncmp((const char *)nd->tag, "tag:yaml.org,2002:", 18) != 0)
    return snprintf(err, n, "policy: YAML tags are not accepted (%.60s)", nd->tag), NULL;
  cJSON *o = NULL;
  switch (nd->type) {
  case YAML_SCALAR_NODE: return yaml_scalar(nd);
  case YAML_SEQUENCE_NODE:
    o = cJSON_CreateArray();
    for (yaml_node_item_t *it = nd->data.sequence.items.start; o && it < nd->data.sequence.items.top; it++) {
      cJSON *c = yaml_node_json(doc, yaml_document_get_node(doc, *it), depth + 1, budget, err, n);
      if (!c) return cJSON_Delete(o), NULL;
      cJSON_AddItemToArray(o, c);
    }
    return o;
  case YAML_MAPPING_NODE:
    o = cJSON_CreateObject();
    for (yaml_node_pair_t *pr = nd->data.mapping.pairs.start; o && pr < nd->data.mapping.pairs.top; pr++) {
      yaml_node_t *k = yaml_document_get_node(doc, pr->key);
      if (!k || k->type != YAML_SCALAR_NODE) {
        snprintf(err, n, "policy: a YAML mapping key is not text");
        return cJSON_Delete(o), NULL;
      }
      const char *key = (const char *)k->data.scalar.value;
      if (cJSON_GetObjectItemCaseSensitive(o, key)) {
        snprintf(err, n, "policy: key \"%.60s\" given twice", key);
        return cJSON_Delete(o), NULL;
      }
      cJSON *c = yaml_node_json(doc, yaml_document_get_node(doc, pr->value), depth + 1, budget, err, n);
      if (!c) return cJSON_Delete(o), NULL;
      cJSON_AddItemToObject(o, key, c);
    }
    return o;
  default: return snprintf(err, n, "policy: an empty YAML node"), NULL;
  }
}

cJSON *dbx_policy_parse_text(const char *text, size_t len, char *err, size_t n) {
  if (n) err[0] = '\0';
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (j) return j;
  yaml_parser_t ps;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&ps)) return NULL;
  yaml_parser_set_input_string(&ps, (const unsigned char *)text, len);
  cJSON *out = NULL;
  if (!yaml_parser_load(&ps, &doc)) {
    snprintf(err, n, "policy: neither JSON nor YAML: %s at line %zu", ps.problem ? ps.problem : "?",
             (size_t)ps.problem_mark.line + 1);
    yaml_parser_delete(&ps);
    return NULL;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root) snprintf(err, n, "policy: the text is empty");
  else {
    int budget = 0;
    out = yaml_node_json(&doc, root, 0, &budget, err, n);
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&ps);
  return out;
}
