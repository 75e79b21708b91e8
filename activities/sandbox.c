/* Sandbox activities: JSON in, driver call, JSON out (see sandbox.h).
 *
 * Every run function follows one shape: parse the input (cJSON), check each
 * field's presence and type (a fault becomes a non-retryable InvalidInput
 * naming the field), call the driver its registration carries (driver.h),
 * and turn the driver's typed error into a typed failure by one table
 * (failure_of below; no message text is read, no driver folder looked at).
 * Nothing is kept between calls:
 * idempotency comes from names derived from the activity's identity (the
 * sandbox id from workflow id + resource, the checkpoint name from sandbox,
 * workflow, run and activity ids), which the driver adopts when they exist.
 *
 * Secrets: sandbox.exec resolves {"secret": NAME} from getenv() at run time,
 * keeps the values only on its stack-owned list, and rewrites the output
 * bytes (redaction) of the head and the tail apart, before the mark, UTF-8
 * checking or base64, so no form of the value reaches the result. The list is wiped and freed before returning.
 *
 * sandbox.exec runs its command detached (driver.h exec_start) under an id
 * derived from workflow, run and activity ids, heartbeating
 * {cmd_id, stdout_offset, stderr_offset, stdout_tail, stderr_tail} (the
 * tails: the last lines, redacted, for people watching); a retried attempt
 * re-attaches to the running or finished command instead of starting it
 * again.
 *
 * Threading: a dbx_sandbox_acts is immutable after create; each type's ud
 * points at its slot {driver, op}; drivers are thread-safe (driver.h). */
#include "activities/sandbox.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "activities/driver.h"
#include "base/alloc.h"
#include "base/codec.h"
#include "base/failpoint.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/util.h"

/* Declared here so this folder needs worker/api.h alone (the worker library,
 * or tests/act_fake.c, provides it). */
dbx_err dbx_worker_register_activity(struct dbx_worker *w, const dbx_activity_type *t);

#define MOD "sandbox"

/* What each activity type's ud points at. */
typedef dbx_err (*run_fn)(dbx_act *, const char *, size_t, dbx_act_result *, void *);

typedef struct {
  dbx_driver *drv; /* borrowed from dbx_sandbox_acts_create's caller */
  int op;          /* enum life_op for stop/start/delete */
  run_fn run;      /* the type's run function (run_checked calls it) */
} act_ctx;

#define DRV(ud) (((const act_ctx *)(ud))->drv)
#define CALL(drv, op, ...) ((drv)->ops->op((drv)->self, __VA_ARGS__))

/* ------------------------------------------------------------- results */

static dbx_err fail(dbx_act_result *res, int non_retryable, const char *type, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));

static dbx_err fail(dbx_act_result *res, int non_retryable, const char *type, const char *fmt,
                    ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  free(res->failure_type);
  free(res->failure_message);
  res->failure_type = dbx_strdup(type);
  res->failure_message = dbx_strdup(buf);
  res->non_retryable = non_retryable;
  if (res->failure_type == NULL || res->failure_message == NULL) {
    /* half a failure would be reported as it stands (a non-retryable type
     * without its message): record none, the caller's ENOMEM is the failure */
    free(res->failure_type);
    free(res->failure_message);
    res->failure_type = res->failure_message = NULL;
    res->non_retryable = 0;
    return DBX_ENOMEM;
  }
  return DBX_OK;
}

/* Takes ownership of obj. */
static dbx_err succeed(dbx_act_result *res, cJSON *obj) {
  if (obj == NULL) return DBX_ENOMEM;
  res->result_json = cJSON_PrintUnformatted(obj);
  cJSON_Delete(obj);
  return res->result_json ? DBX_OK : DBX_ENOMEM;
}

/* The one map from a driver's typed error to a Temporal failure
 * (ApplicationFailureInfo.type and non_retryable), and how its message reads:
 *   MSG_DRIVER   the driver's message (it names the path, source or name)
 *   MSG_SANDBOX  "sandbox '<id>' does not exist"
 *   MSG_WHAT     "<what>: <driver's message>"
 *   MSG_WHAT_RC  "<what>: <driver's message> (<code's text>)" */
enum { MSG_DRIVER, MSG_SANDBOX, MSG_WHAT, MSG_WHAT_RC };
static const struct {
  const char *type;
  int non_retryable;
  int msg;
} failure_of[DBX_DRV_ERR_COUNT] = {
    /* a step's sandbox no longer exists (Daytona's contract names it
     * SandboxGone); a create that re-opens a missing one says
     * SandboxNotFound instead (create_adopt) */
    [DBX_DRV_NO_SANDBOX] = {"SandboxGone", 1, MSG_SANDBOX},
    [DBX_DRV_PATH_REFUSED] = {"PathRefused", 1, MSG_DRIVER},
    [DBX_DRV_NOT_FOUND] = {"FileNotFound", 1, MSG_DRIVER},
    [DBX_DRV_SOURCE_NOT_FOUND] = {"SourceNotFound", 1, MSG_DRIVER},
    [DBX_DRV_CONFLICT] = {"SandboxConflict", 1, MSG_DRIVER},
    [DBX_DRV_SNAPSHOT_FAILED] = {"SnapshotFailed", 0, MSG_WHAT},
    [DBX_DRV_OUTCOME_UNKNOWN] = {"OutcomeUnknown", 1, MSG_WHAT},
    [DBX_DRV_TRANSIENT] = {"SandboxError", 0, MSG_WHAT_RC},
    [DBX_DRV_INVALID] = {"InvalidInput", 1, MSG_WHAT},
    [DBX_DRV_STATE] = {"SandboxError", 0, MSG_WHAT_RC},
    [DBX_DRV_UNSUPPORTED] = {"Unsupported", 1, MSG_WHAT},
    [DBX_DRV_FAILED] = {"SandboxError", 0, MSG_WHAT_RC},
    /* no retry mends these: the driver says which at the source */
    [DBX_DRV_REPO_NOT_FOUND] = {"RepositoryNotFound", 1, MSG_WHAT_RC},
    [DBX_DRV_NOT_A_REPO] = {"NotAGitRepository", 1, MSG_WHAT_RC},
    [DBX_DRV_REF_NOT_FOUND] = {"RefNotFound", 1, MSG_WHAT_RC},
    [DBX_DRV_DISK_FULL] = {"DiskFull", 1, MSG_WHAT_RC},
    [DBX_DRV_AUTH] = {"AuthFailed", 1, MSG_WHAT_RC},
};

const char *dbx_sandbox_failure_type(dbx_drv_err e, int *non_retryable) {
  if ((int)e <= 0 || e >= DBX_DRV_ERR_COUNT || failure_of[e].type == NULL) {
    if (non_retryable) *non_retryable = 0;
    return NULL;
  }
  if (non_retryable) *non_retryable = failure_of[e].non_retryable;
  return failure_of[e].type;
}

/* Record driver failure e of an activity on sandbox id (may be NULL).
 * what: the activity, or the field the fault is about. CANCELED and NOMEM
 * are no failure: they come back as DBX_ECANCELED / DBX_ENOMEM. */
static dbx_err fail_drv(dbx_act_result *res, const dbx_driver *drv, dbx_drv_err e,
                        const char *what, const char *id) {
  if (e == DBX_DRV_CANCELED) return DBX_ECANCELED;
  if (e == DBX_DRV_NOMEM) return DBX_ENOMEM;
  if ((int)e <= 0 || e >= DBX_DRV_ERR_COUNT || failure_of[e].type == NULL) e = DBX_DRV_FAILED;
  const char *m = drv->ops->errmsg(drv->self);
  const char *type = failure_of[e].type;
  int nr = failure_of[e].non_retryable;
  switch (failure_of[e].msg) {
  case MSG_SANDBOX: return fail(res, nr, type, "sandbox '%s' does not exist", id ? id : "");
  case MSG_DRIVER: return fail(res, nr, type, "%s", m[0] ? m : dbx_drv_strerror(e));
  case MSG_WHAT: return fail(res, nr, type, "%s: %s", what, m[0] ? m : dbx_drv_strerror(e));
  default: return fail(res, nr, type, "%s: %s (%s)", what, m, dbx_drv_strerror(e));
  }
}

/* dbx_drv_create_opts.cancelled for sandbox.create: a heartbeat (the worker
 * throttles what it sends) that reports cancellation. */
static int create_heartbeat(void *a) { return dbx_act_heartbeat(a, NULL); }

/* ---------------------------------------------------------------- input */

/* An activity input is one payload: Temporal's default limit
 * (limit.blobSize.error). No string in it, key or value, is longer. */
#define MAX_INPUT_BYTES (2u * 1024 * 1024)

/* The string numbered want (dbx_json_text_check's ordinals), or with want ==
 * SIZE_MAX the first longer than MAX_INPUT_BYTES: its field's name in
 * path ("env.HOME"), *is_key when the string is a field name there. */
typedef struct {
  size_t want, seen, len;
  int found, is_key;
  char path[128];
} str_find;

static void find_string(const cJSON *node, const char *path, str_find *f) {
  size_t i = 0;
  for (const cJSON *c = node->child; c != NULL && !f->found; c = c->next, i++) {
    char sub[128];
    if (cJSON_IsObject(node)) {
      snprintf(sub, sizeof sub, "%s%s%.60s", path, path[0] ? "." : "", c->string);
      size_t l = strlen(c->string);
      if (f->seen++ == f->want || (f->want == SIZE_MAX && l > MAX_INPUT_BYTES))
        f->found = 1, f->is_key = 1, f->len = l, snprintf(f->path, sizeof f->path, "%s", path);
    } else {
      snprintf(sub, sizeof sub, "%s[%zu]", path, i);
    }
    if (f->found) return;
    if (cJSON_IsString(c)) {
      size_t l = strlen(c->valuestring);
      if (f->seen++ == f->want || (f->want == SIZE_MAX && l > MAX_INPUT_BYTES))
        f->found = 1, f->len = l, snprintf(f->path, sizeof f->path, "%s", sub);
    } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
      find_string(c, sub, f);
    }
  }
}

/* Parse input as a JSON object, one document, no string in it holding a NUL
 * (cJSON would cut it there), a raw control character or invalid UTF-8, or
 * over the size limit; on failure records InvalidInput and returns NULL. */
static cJSON *parse_input(const char *json, size_t len, dbx_act_result *res) {
  const char *end = NULL;
  cJSON *in = json ? cJSON_ParseWithLengthOpts(json, len, &end, 0) : NULL;
  if (in == NULL || !cJSON_IsObject(in)) {
    cJSON_Delete(in);
    fail(res, 1, "InvalidInput", "input is not a JSON object");
    return NULL;
  }
  size_t at = 0;
  dbx_json_problem p = dbx_json_text_check(json, len, (size_t)(end - json), &at);
  str_find f = {.want = p == DBX_JSON_OK ? SIZE_MAX : at};
  if (p != DBX_JSON_TRAILING) find_string(in, "", &f);
  char what[160];
  if (!f.found) snprintf(what, sizeof what, "a string");
  else if (!f.is_key) snprintf(what, sizeof what, "field '%s'", f.path);
  else if (f.path[0]) snprintf(what, sizeof what, "a field name in field '%s'", f.path);
  else snprintf(what, sizeof what, "a field name");
  if (p == DBX_JSON_TRAILING)
    fail(res, 1, "InvalidInput", "input has data after the JSON document (at byte %zu)", at);
  else if (p != DBX_JSON_OK)
    fail(res, 1, "InvalidInput", "%s %s", what, dbx_json_problem_str(p));
  else if (f.found)
    fail(res, 1, "InvalidInput", "%s is %zu bytes, over the limit of %u bytes per field", what,
         f.len, MAX_INPUT_BYTES);
  else if (len > MAX_INPUT_BYTES)
    fail(res, 1, "InvalidInput", "input is %zu bytes, over the limit of %u bytes per input", len,
         MAX_INPUT_BYTES);
  else
    return in;
  cJSON_Delete(in);
  return NULL;
}

/* *out = the string field name (borrowed from in), or NULL when absent and
 * optional. Returns 0, or -1 with InvalidInput recorded. */
static int get_str(const cJSON *in, const char *name, int required, const char **out,
                   dbx_act_result *res) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, name);
  *out = NULL;
  if (v == NULL || cJSON_IsNull(v)) {
    if (!required) return 0;
    fail(res, 1, "InvalidInput", "field '%s' is required (a string)", name);
    return -1;
  }
  if (!cJSON_IsString(v)) {
    fail(res, 1, "InvalidInput", "field '%s' must be a string", name);
    return -1;
  }
  *out = v->valuestring;
  return 0;
}

/* A number field >= 0; *out unchanged when absent. */
static int get_num(const cJSON *in, const char *name, double *out, dbx_act_result *res) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, name);
  if (v == NULL || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) {
    fail(res, 1, "InvalidInput", "field '%s' must be a number >= 0", name);
    return -1;
  }
  *out = v->valuedouble;
  return 0;
}

#define valid_name dbx_drv_name_valid

/* sandbox_id: required, a valid driver name, and the sandbox must exist. */
static int get_sandbox(const cJSON *in, const char **id, dbx_act_result *res) {
  if (get_str(in, "sandbox_id", 1, id, res) != 0) return -1;
  if (!valid_name(*id)) {
    fail(res, 1, "InvalidInput", "field 'sandbox_id': '%.140s' is not a sandbox id", *id);
    return -1;
  }
  return 0;
}


/* Paths the driver would refuse for their shape alone. */
static int path_escapes(const char *p) {
  if (p[0] == '/') return 1;
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.') return 1;
    if (e == NULL) break;
    s = e + 1;
  }
  return 0;
}

static int get_path(const cJSON *in, const char *name, int required, const char **out,
                    dbx_act_result *res) {
  if (get_str(in, name, required, out, res) != 0) return -1;
  if (*out == NULL) return 0;
  if ((*out)[0] == '\0') {
    fail(res, 1, "InvalidInput", "field '%s' is empty", name);
    return -1;
  }
  if (path_escapes(*out)) {
    fail(res, 1, "PathRefused", "field '%s': path '%.200s' leaves the workspace", name, *out);
    return -1;
  }
  return 0;
}

/* A driver failure of a call on a path ("path 'p'" heads an InvalidInput). */
static dbx_err fail_path(dbx_act_result *res, const dbx_driver *drv, dbx_drv_err e,
                         const char *what, const char *id, const char *path) {
  if (e != DBX_DRV_INVALID) return fail_drv(res, drv, e, what, id);
  char head[240];
  snprintf(head, sizeof head, "path '%.200s'", path);
  return fail_drv(res, drv, e, head, id);
}

/* -------------------------------------------------------------- helpers */

/* FNV-1a 64 over a C string's bytes (none for NULL): the sandbox id, the
 * command id and the checkpoint name are made of it, and existing sandboxes,
 * commands and journals depend on them staying byte-identical. */
static uint64_t fnv1a(uint64_t h, const char *s) {
  return s ? dbx_fnv1a64(h, s, strlen(s)) : h;
}
#define FNV_OFFSET DBX_FNV1A64_OFFSET

/* Strict UTF-8 (base/codec.h) and no NUL, so the bytes survive a JSON string
 * and a C string unchanged. */
static int text_ok(const uint8_t *p, size_t n) {
  return dbx_utf8_valid(p, n) && (n == 0 || memchr(p, 0, n) == NULL);
}

/* Add name (text) or name_b64 (other bytes) to obj. Returns 0 or -1 (OOM). */
static int add_bytes(cJSON *obj, const char *name, const uint8_t *p, size_t n) {
  if (text_ok(p, n)) {
    char *s = dbx_strndup((const char *)p, n);
    if (s == NULL) return -1;
    cJSON *v = cJSON_AddStringToObject(obj, name, s);
    free(s);
    return v ? 0 : -1;
  }
  char key[64];
  snprintf(key, sizeof key, "%s_b64", name);
  char *s = dbx_base64_encode(p, n);
  if (s == NULL) return -1;
  cJSON *v = cJSON_AddStringToObject(obj, key, s);
  free(s);
  return v ? 0 : -1;
}

/* -------------------------------------------------------------- secrets */

typedef struct {
  char *name;  /* variable name */
  char *value; /* resolved value (wiped before free) */
  char *entry; /* "KEY=value" for the driver (wiped before free) */
} secret_env;

static void wipe_free(char *s) {
  if (s == NULL) return;
  volatile char *v = s;
  while (*v) *v++ = 0;
  free(s);
}

/* Free n entries of sec and sec itself; values and entries wiped. */
static void secrets_free(secret_env *sec, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(sec[i].name);
    wipe_free(sec[i].value);
    wipe_free(sec[i].entry);
  }
  free(sec);
}

/* Replace every occurrence of each secret value in *buf (len *n) by
 * "[redacted:NAME]". truncated: the bytes were cut after *buf's end, so an
 * end that is the start of a value is redacted too; cut_before: cut before
 * its start (a stream's tail), so a start that is the end of a value is.
 * Returns the number of replacements, or -1 (OOM). */
static int redact(uint8_t **buf, size_t *n, const secret_env *s, size_t ns, int truncated,
                  int cut_before) {
  int hits = 0;
  for (size_t k = 0; k < ns; k++) {
    size_t vl = strlen(s[k].value);
    if (vl == 0) continue;
    char mark[200];
    int ml = snprintf(mark, sizeof mark, "[redacted:%.180s]", s[k].name);
    size_t cap = *n + 1, o = 0;
    uint8_t *out = dbx_malloc(cap);
    if (out == NULL) return -1;
    size_t i = 0;
    /* the end of a value cut off at the very start (its longest such end) */
    for (size_t l = vl - 1; cut_before && l > 0 && l >= (vl < 4 ? vl : 4); l--) {
      if (l > *n || memcmp(*buf, s[k].value + vl - l, l) != 0) continue;
      if ((size_t)ml + 1 > cap) {
        uint8_t *t = dbx_realloc(out, (size_t)ml + 1);
        if (t == NULL) {
          free(out);
          return -1;
        }
        out = t;
        cap = (size_t)ml + 1;
      }
      memcpy(out, mark, (size_t)ml);
      o = (size_t)ml;
      i = l;
      hits++;
      break;
    }
    while (i < *n) {
      size_t rest = *n - i;
      int hit = rest >= vl && memcmp(*buf + i, s[k].value, vl) == 0;
      /* a cut-off value at the very end of a truncated stream */
      if (!hit && truncated && rest < vl && rest >= (vl < 4 ? vl : 4) &&
          memcmp(*buf + i, s[k].value, rest) == 0)
        hit = 1;
      if (hit) {
        if (o + (size_t)ml + 1 > cap) {
          cap = (o + (size_t)ml + 1) * 2;
          uint8_t *t = dbx_realloc(out, cap);
          if (t == NULL) {
            free(out);
            return -1;
          }
          out = t;
        }
        memcpy(out + o, mark, (size_t)ml);
        o += (size_t)ml;
        i += rest < vl ? rest : vl;
        hits++;
        continue;
      }
      if (o + 2 > cap) {
        cap = (o + 2) * 2;
        uint8_t *t = dbx_realloc(out, cap);
        if (t == NULL) {
          free(out);
          return -1;
        }
        out = t;
      }
      out[o++] = (*buf)[i++];
    }
    out[o] = 0;
    memset(*buf, 0, *n);
    free(*buf);
    *buf = out;
    *n = o;
  }
  return hits;
}

/* Append the input's "redact" (["NAME", ..]: names of the worker's variables
 * whose values are redacted from what the activity returns, as a secret of
 * the step's own env is) to *sec, skipping names already there and names
 * that are unset (no value, nothing to redact). *sec grows by realloc; its
 * entries own name and value, entry stays NULL (nothing goes into the
 * command's environment). Returns 0; -1 with the failure set in res (a
 * malformed list: InvalidInput naming it); -2 on OOM. */
static int add_redact(const cJSON *in, secret_env **sec, size_t *nsec, dbx_act_result *res) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(in, "redact");
  if (r == NULL || cJSON_IsNull(r)) return 0;
  if (!cJSON_IsArray(r) || cJSON_GetArraySize(r) > DBX_SANDBOX_REDACT_MAX) {
    fail(res, 1, "InvalidInput", "field 'redact' must be a list of at most %d variable names",
         DBX_SANDBOX_REDACT_MAX);
    return -1;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, r) {
    if (!cJSON_IsString(e) || e->valuestring[0] == '\0' || strchr(e->valuestring, '=') != NULL) {
      fail(res, 1, "InvalidInput", "field 'redact': every item must be a variable name%s%.100s%s",
           cJSON_IsString(e) ? " ('" : "", cJSON_IsString(e) ? e->valuestring : "",
           cJSON_IsString(e) ? "' is not)" : "");
      return -1;
    }
  }
  cJSON_ArrayForEach(e, r) {
    const char *val = getenv(e->valuestring);
    int known = val == NULL || val[0] == '\0';
    for (size_t k = 0; !known && k < *nsec; k++)
      known = strcmp((*sec)[k].name, e->valuestring) == 0;
    if (known) continue;
    secret_env *t = dbx_realloc(*sec, (*nsec + 2) * sizeof *t);
    if (t == NULL) return -2;
    *sec = t;
    secret_env *se = &t[*nsec];
    memset(se, 0, 2 * sizeof *se);
    se->name = dbx_strdup(e->valuestring);
    se->value = dbx_strdup(val);
    (*nsec)++;
    if (se->name == NULL || se->value == NULL) return -2;
  }
  return 0;
}

/* --------------------------------------------------------------- output */

/* What is kept of one stream (sandbox.h "Output"): its head h, then cut
 * bytes left out, then its tail t. Both buffers are malloc'd, NUL-ended. */
typedef struct {
  uint8_t *h, *t;
  size_t hl, tl;
  uint64_t cut;
  int count_known; /* 0: a secret was redacted, the mark gives no count */
  int marked;      /* show the mark (a head-only cut under 1 KiB is unmarked) */
  int truncated;
} kept_out;

static void kept_free(kept_out *k) {
  if (k->h) memset(k->h, 0, k->hl);
  if (k->t) memset(k->t, 0, k->tl);
  free(k->h);
  free(k->t);
  memset(k, 0, sizeof *k);
}

/* From len bytes of p whose first head_len are the head (the rest the tail,
 * total - len bytes cut between them when total > len). 0 or -1 (OOM). */
static int kept_init(kept_out *k, const uint8_t *p, size_t len, size_t head_len,
                     uint64_t total) {
  memset(k, 0, sizeof *k);
  if (head_len > len) head_len = len;
  k->hl = head_len, k->tl = len - head_len;
  k->h = dbx_malloc(k->hl + 1);
  k->t = dbx_malloc(k->tl + 1);
  if (k->h == NULL || k->t == NULL) {
    kept_free(k);
    return -1;
  }
  if (k->hl) memcpy(k->h, p, k->hl);
  if (k->tl) memcpy(k->t, p + head_len, k->tl);
  k->h[k->hl] = k->t[k->tl] = 0;
  k->truncated = total > len;
  k->cut = k->truncated ? total - len : 0;
  k->count_known = 1;
  k->marked = k->truncated && k->tl > 0;
  return 0;
}

/* Keep at most keep bytes: half from the head's start, the rest from the
 * tail's end (an uncut stream's tail is taken from its own end). 0 or -1. */
static int kept_shrink(kept_out *k, size_t keep) {
  if (k->hl + k->tl <= keep) return 0;
  size_t nh, nt;
  if (k->tl == 0) {
    nh = keep / 2, nt = keep - nh;
    uint8_t *t = dbx_malloc(nt + 1);
    if (t == NULL) return -1;
    memcpy(t, k->h + k->hl - nt, nt);
    t[nt] = 0;
    free(k->t);
    k->t = t;
    k->cut += k->hl - nh - nt;
  } else {
    nh = k->hl < keep / 2 ? k->hl : keep / 2;
    nt = k->tl < keep - nh ? k->tl : keep - nh;
    if (nh + nt < keep) nh = k->hl < keep - nt ? k->hl : keep - nt;
    memmove(k->t, k->t + k->tl - nt, nt);
    k->t[nt] = 0;
    k->cut += (k->hl - nh) + (k->tl - nt);
  }
  if (k->h) memset(k->h + nh, 0, k->hl - nh);
  k->hl = nh, k->tl = nt;
  k->h[nh] = 0;
  k->truncated = k->marked = 1;
  return 0;
}

/* "198,000,000" */
static void fmt_count(uint64_t v, char out[40]) {
  char d[24];
  int n = snprintf(d, sizeof d, "%llu", (unsigned long long)v), o = 0;
  for (int i = 0; i < n; i++) {
    if (i > 0 && (n - i) % 3 == 0) out[o++] = ',';
    out[o++] = d[i];
  }
  out[o] = 0;
}

/* The kept text: head, mark line, tail, the cut moved to UTF-8 character
 * boundaries (a split character's bytes count as cut). *out malloc'd. */
static int kept_text(const kept_out *k, uint8_t **out, size_t *n) {
  size_t hl = k->hl, skip = 0;
  uint64_t cut = k->cut;
  char mark[96] = "";
  if (k->marked) {
    /* an incomplete sequence ending the head, continuation bytes opening the tail */
    for (size_t back = 1; back <= 4 && back <= hl; back++) {
      uint8_t c = k->h[hl - back];
      if ((c & 0xC0) == 0x80) continue;
      size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (need > back) hl -= back;
      break;
    }
    while (skip < k->tl && skip < 3 && (k->t[skip] & 0xC0) == 0x80) skip++;
    cut += (k->hl - hl) + skip;
    char num[40];
    fmt_count(cut, num);
    const char *sep = hl > 0 && k->h[hl - 1] != '\n' ? "\n" : "";
    if (k->count_known)
      snprintf(mark, sizeof mark, "%s[\xe2\x80\xa6 %s bytes cut \xe2\x80\xa6]\n", sep, num);
    else
      snprintf(mark, sizeof mark, "%s[\xe2\x80\xa6 bytes cut (count withheld) \xe2\x80\xa6]\n",
               sep);
  }
  size_t ml = strlen(mark), tl = k->tl - skip;
  uint8_t *b = dbx_malloc(hl + ml + tl + 1);
  if (b == NULL) return -1;
  if (hl) memcpy(b, k->h, hl);
  memcpy(b + hl, mark, ml);
  if (tl) memcpy(b + hl + ml, k->t + skip, tl);
  b[hl + ml + tl] = 0;
  *out = b;
  *n = hl + ml + tl;
  return 0;
}

/* Print base plus, for each kept stream i, names[i] (text or _b64) and the
 * bool trunc_names[i]; cut the streams further until the JSON fits
 * DBX_SANDBOX_RESULT_MAX_BYTES. Takes ownership of base. */
static dbx_err succeed_fitted(dbx_act_result *res, cJSON *base, kept_out *k,
                              const char *const *names, const char *const *trunc_names,
                              size_t nk) {
  if (base == NULL) return DBX_ENOMEM;
  for (int round = 0;; round++) {
    cJSON *o = cJSON_Duplicate(base, 1);
    int bad = o == NULL;
    for (size_t i = 0; !bad && i < nk; i++) {
      uint8_t *txt = NULL;
      size_t tn = 0;
      bad = kept_text(&k[i], &txt, &tn) != 0 || add_bytes(o, names[i], txt, tn) != 0 ||
            !cJSON_AddBoolToObject(o, trunc_names[i], k[i].truncated);
      if (txt) memset(txt, 0, tn);
      free(txt);
    }
    char *json = bad ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (json == NULL) {
      cJSON_Delete(base);
      return DBX_ENOMEM;
    }
    size_t jl = strlen(json);
    if (jl <= DBX_SANDBOX_RESULT_MAX_BYTES || round >= 16) {
      cJSON_Delete(base);
      res->result_json = json;
      return DBX_OK;
    }
    free(json);
    /* shrink every stream by the overshoot, with a margin for the marks */
    double f = (double)DBX_SANDBOX_RESULT_MAX_BYTES / (double)jl * 0.9;
    for (size_t i = 0; i < nk; i++) {
      size_t have = k[i].hl + k[i].tl, keep = (size_t)((double)have * f);
      if (keep >= have && have > 0) keep = have - 1;
      if (kept_shrink(&k[i], keep) != 0) {
        cJSON_Delete(base);
        return DBX_ENOMEM;
      }
    }
  }
}


/* ------------------------------------------------------- transfers */

/* "upload" of sandbox.create ({"from": host path, "to": sandbox path}) and
 * "download" of sandbox.delete ({"from": sandbox path, "to": host path}):
 * 1..TRANSFERS_MAX pairs; a host path is absolute, a sandbox path relative
 * to the workspace (not leaving it). */
#define TRANSFERS_MAX 100
typedef struct {
  const char *from, *to; /* borrowed from the input */
} transfer;

static int get_transfers(const cJSON *in, const char *field, int upload, transfer **out,
                         size_t *n, dbx_act_result *res) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, field);
  *out = NULL;
  *n = 0;
  if (v == NULL || cJSON_IsNull(v)) return 0;
  int cnt = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (cnt < 1 || cnt > TRANSFERS_MAX) {
    fail(res, 1, "InvalidInput", "field '%s' must be an array of 1 to %d {\"from\", \"to\"}",
         field, TRANSFERS_MAX);
    return -1;
  }
  transfer *t = dbx_calloc((size_t)cnt, sizeof *t);
  if (t == NULL) {
    fail(res, 0, "SandboxError", "out of memory");
    return -1;
  }
  const cJSON *e;
  size_t i = 0;
  cJSON_ArrayForEach(e, v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "from");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(e, "to");
    const char *host = NULL, *sb = NULL;
    if (!cJSON_IsObject(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(f) ||
        !cJSON_IsString(to) || !f->valuestring[0] || !to->valuestring[0]) {
      fail(res, 1, "InvalidInput", "field '%s[%zu]' must be {\"from\": path, \"to\": path}",
           field, i);
      goto bad;
    }
    host = upload ? f->valuestring : to->valuestring;
    sb = upload ? to->valuestring : f->valuestring;
    if (host[0] != '/') {
      fail(res, 1, "InvalidInput", "field '%s[%zu].%s': host path '%.200s' is not absolute",
           field, i, upload ? "from" : "to", host);
      goto bad;
    }
    if (path_escapes(sb)) {
      fail(res, 1, "PathRefused", "field '%s[%zu].%s': path '%.200s' leaves the workspace",
           field, i, upload ? "to" : "from", sb);
      goto bad;
    }
    t[i].from = f->valuestring;
    t[i].to = to->valuestring;
    i++;
  }
  *out = t;
  *n = i;
  return 0;
bad:
  free(t);
  return -1;
}

/* ------------------------------------------------------------ identity */

/* A sandbox per run (docs/sandbox.md "A sandbox per run"). The input field
 * naming the run that owns the sandbox: the run that created the work
 * (durabox.Script passes its own run id; a workflow that continues as new
 * passes the first run's id on, so its continuations reopen its sandbox). */
#define OWNER_FIELD "owner_run_id"

/* *owner = the input's owner_run_id, else the activity's run id (borrowed).
 * Returns 0, or -1 with InvalidInput recorded (not a string, empty, or no
 * valid label value). */
static int owner_of(dbx_act *a, const cJSON *in, const char **owner, dbx_act_result *res) {
  if (get_str(in, OWNER_FIELD, 0, owner, res) != 0) return -1;
  if (*owner == NULL) {
    *owner = dbx_act_run_id(a);
    if (*owner == NULL) *owner = "";
    return 0;
  }
  dbx_drv_label l = {"durabox.run_id", *owner};
  if ((*owner)[0] == '\0' || !dbx_drv_label_valid(&l)) {
    fail(res, 1, "InvalidInput", "field '" OWNER_FIELD "' must be 1..255 bytes of text");
    return -1;
  }
  return 0;
}

/* The optional boolean "keep" (the sandbox outlives its run: labelled
 * durabox.keep, so no other run's cleanup removes it). 0 or -1 recorded. */
static int get_keep(const cJSON *in, int *keep, dbx_act_result *res) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, "keep");
  *keep = cJSON_IsTrue(v);
  if (v == NULL || cJSON_IsNull(v) || cJSON_IsBool(v)) return 0;
  fail(res, 1, "InvalidInput", "field 'keep' must be true or false");
  return -1;
}

/* The sandbox id: "dbx-" + 16 hex digits of FNV-1a 64 over workflow id "/"
 * owner run "/" resource, so two runs never share one and a retried create
 * of the same run finds its own; owner NULL (an input without
 * owner_run_id): over workflow id "/" resource, the id from before runs
 * were part of it, kept so existing sandboxes and journals keep their
 * names. */
static void sandbox_id_of(const char *wf, const char *owner, const char *resource, char id[21]) {
  uint64_t h = fnv1a(fnv1a(FNV_OFFSET, wf ? wf : ""), "/");
  if (owner != NULL) h = fnv1a(fnv1a(h, owner), "/");
  h = fnv1a(h, resource);
  snprintf(id, 21, "dbx-%016llx", (unsigned long long)h);
}

/* A delete's guard: *other = 1 (and *by, borrowed from *labels) when
 * sandbox id is marked kept (durabox.keep) by a run other than the
 * deleting one (input owner_run_id, else the activity's run), so one run's
 * cleanup never removes another run's kept sandbox. Unreadable labels
 * (missing sandbox, driver error) guard nothing: the delete decides.
 * Returns DBX_OK or DBX_ENOMEM; *labels: free with dbx_drv_labels_free. */
static dbx_err kept_by_other(dbx_act *a, dbx_driver *drv, const cJSON *in, const char *id,
                             dbx_drv_label **labels, size_t *n, const char **by, int *other) {
  *other = 0;
  *labels = NULL;
  *n = 0;
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(in, OWNER_FIELD);
  const char *me = cJSON_IsString(o) ? o->valuestring : dbx_act_run_id(a);
  dbx_drv_err e = drv->ops->labels(drv->self, id, labels, n);
  if (e == DBX_DRV_NOMEM) return DBX_ENOMEM;
  if (e != DBX_DRV_OK) return DBX_OK;
  int kept = 0;
  *by = NULL;
  for (size_t i = 0; i < *n; i++) {
    if (strcmp((*labels)[i].key, "durabox.keep") == 0) kept = strcmp((*labels)[i].value, "true") == 0;
    if (strcmp((*labels)[i].key, "durabox.run_id") == 0) *by = (*labels)[i].value;
  }
  *other = kept && *by != NULL && strcmp(*by, me ? me : "") != 0;
  return DBX_OK;
}

/* ------------------------------------------------------------ create */

/* The create's sizes and Daytona's intervals (docs/sandbox.md "Sizes"). */
typedef struct {
  uint32_t cpu, memory_gib, disk_gib;
  int32_t autos[3];
  int has[3];
} create_sizes;

/* "resources": "small" | "medium" | "large" | {"cpu", "memory_gib",
 * "disk_gib"} (whole numbers >= 1, each optional). */
static const struct {
  const char *name;
  uint32_t cpu, memory_gib, disk_gib;
} size_classes[] = {{"small", 1, 1, 3}, {"medium", 2, 4, 8}, {"large", 4, 8, 10}};
#define SIZE_MAX_UNITS 1024
#define AUTO_MAX_MINUTES (60 * 24 * 365)
static const char *const auto_fields[3] = {"auto_stop_minutes", "auto_archive_minutes",
                                           "auto_delete_minutes"};

static int get_sizes(const cJSON *in, create_sizes *sz, dbx_act_result *res) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(in, "resources");
  if (cJSON_IsString(r)) {
    size_t i = 0;
    while (i < 3 && strcmp(size_classes[i].name, r->valuestring) != 0) i++;
    if (i == 3) {
      fail(res, 1, "InvalidInput",
           "field 'resources': '%.60s' is not one of small, medium, large", r->valuestring);
      return -1;
    }
    sz->cpu = size_classes[i].cpu;
    sz->memory_gib = size_classes[i].memory_gib;
    sz->disk_gib = size_classes[i].disk_gib;
  } else if (cJSON_IsObject(r)) {
    static const char *const k[3] = {"cpu", "memory_gib", "disk_gib"};
    uint32_t *dst[3] = {&sz->cpu, &sz->memory_gib, &sz->disk_gib};
    for (const cJSON *f = r->child; f; f = f->next) {
      int i = 0;
      while (i < 3 && strcmp(f->string, k[i]) != 0) i++;
      if (i == 3 || !cJSON_IsNumber(f) || f->valuedouble < 1 ||
          f->valuedouble > SIZE_MAX_UNITS || f->valuedouble != (double)(int)f->valuedouble) {
        fail(res, 1, "InvalidInput",
             i == 3 ? "field 'resources': unknown field '%.60s' (cpu, memory_gib, disk_gib)"
                    : "field 'resources.%.60s' must be a whole number from 1 to 1024",
             f->string);
        return -1;
      }
      *dst[i] = (uint32_t)f->valuedouble;
    }
  } else if (r != NULL && !cJSON_IsNull(r)) {
    fail(res, 1, "InvalidInput",
         "field 'resources' must be small, medium, large or {cpu, memory_gib, disk_gib}");
    return -1;
  }
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, auto_fields[i]);
    if (v == NULL || cJSON_IsNull(v)) continue;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > AUTO_MAX_MINUTES ||
        v->valuedouble != (double)(int)v->valuedouble) {
      fail(res, 1, "InvalidInput", "field '%s' must be a whole number of minutes from 0 to %d",
           auto_fields[i], AUTO_MAX_MINUTES);
      return -1;
    }
    sz->autos[i] = (int32_t)v->valuedouble;
    sz->has[i] = 1;
  }
  return 0;
}

/* {"unenforced": [...]} of the create's result: the options given that the
 * driver took without enforcing them. 0 or -1 (OOM). */
static int add_unenforced(cJSON *o, unsigned bits) {
  static const struct {
    unsigned bit;
    const char *name;
  } names[] = {{DBX_DRV_UNENFORCED_CPU, "cpu"},
               {DBX_DRV_UNENFORCED_MEMORY, "memory_gib"},
               {DBX_DRV_UNENFORCED_DISK, "disk_gib"},
               {DBX_DRV_UNENFORCED_AUTO_STOP, "auto_stop_minutes"},
               {DBX_DRV_UNENFORCED_AUTO_ARCHIVE, "auto_archive_minutes"},
               {DBX_DRV_UNENFORCED_AUTO_DELETE, "auto_delete_minutes"}};
  if (bits == 0) return 0;
  cJSON *arr = cJSON_AddArrayToObject(o, "unenforced");
  if (arr == NULL) return -1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!(bits & names[i].bit)) continue;
    cJSON *v = cJSON_CreateString(names[i].name);
    if (v == NULL || !cJSON_AddItemToArray(arr, v)) {
      cJSON_Delete(v);
      return -1;
    }
  }
  return 0;
}

/* "adopt": {"sandbox_id": ID, "driver"?: NAME}: re-open an existing
 * sandbox instead of making one (a session's next turn, docs/worker.md
 * "Sessions"). The sandbox must exist on this driver and, when it carries a
 * durabox.workflow_id label, belong to the activity's workflow id; a stopped
 * one is started. Nothing is created, so a retry does the same again.
 * Returns 0 with id (borrowed from in) set, -1 with the failure recorded:
 * InvalidInput (the field), SandboxNotFound (missing, or made by another
 * driver: the message names it), SandboxConflict (another workflow's). */
static int adopt_of(dbx_act *a, dbx_driver *drv, const cJSON *in, const char **id,
                    dbx_act_result *res, dbx_err *rc) {
  const cJSON *ad = cJSON_GetObjectItemCaseSensitive(in, "adopt");
  const char *want_drv = NULL;
  *id = NULL;
  if (!cJSON_IsObject(ad)) {
    *rc = fail(res, 1, "InvalidInput", "field 'adopt' must be {\"sandbox_id\": ID, \"driver\"?: NAME}");
    return -1;
  }
  if (get_str(ad, "sandbox_id", 1, id, res) != 0 || get_str(ad, "driver", 0, &want_drv, res) != 0)
    return -1;
  if (!valid_name(*id)) {
    *rc = fail(res, 1, "InvalidInput", "field 'adopt.sandbox_id' is not a valid sandbox id");
    return -1;
  }
  if (want_drv && strcmp(want_drv, drv->name) != 0) {
    *rc = fail(res, 1, "SandboxNotFound",
               "sandbox.create: adopt: sandbox '%s' was made by the %.40s driver; this worker's is %s",
               *id, want_drv, drv->name);
    return -1;
  }
  dbx_drv_state st = DBX_DRV_RUNNING;
  dbx_drv_err e = CALL(drv, exists, *id, &st);
  if (e == DBX_DRV_NO_SANDBOX) {
    *rc = fail(res, 1, "SandboxNotFound",
               "sandbox.create: adopt: sandbox '%s' does not exist (removed since the turn that "
               "used it?)", *id);
    return -1;
  }
  dbx_drv_label *labels = NULL;
  size_t n = 0;
  if (e == DBX_DRV_OK) e = CALL(drv, labels, *id, &labels, &n);
  if (e != DBX_DRV_OK) {
    *rc = fail_drv(res, drv, e, "sandbox.create: adopt", *id);
    return -1;
  }
  const char *wf = dbx_act_workflow_id(a), *owner_wf = NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(labels[i].key, "durabox.workflow_id") == 0) owner_wf = labels[i].value;
  int other = owner_wf && wf && strcmp(owner_wf, wf) != 0;
  if (other)
    *rc = fail(res, 1, "SandboxConflict",
               "sandbox.create: adopt: sandbox '%s' belongs to workflow '%.200s', not '%.200s'", *id,
               owner_wf, wf);
  dbx_drv_labels_free(labels, n);
  if (other) return -1;
  if (st == DBX_DRV_STOPPED && (e = CALL(drv, start, *id)) != DBX_DRV_OK) {
    *rc = fail_drv(res, drv, e, "sandbox.create: adopt: start", *id);
    return -1;
  }
  return 0;
}

/* A git source's credentials: "token_env" (and optionally "username_env")
 * name variables of the worker's environment, read now (driver.h
 * dbx_drv_git_cred); the input never holds the values. *out NULL when the
 * source names none. 0, or -1 with res failed (InvalidInput, SecretMissing). */
static int git_cred_of(const cJSON *src, dbx_drv_git_cred *c, const dbx_drv_git_cred **out,
                       dbx_act_result *res) {
  const char *tv = NULL, *uv = NULL, *url = NULL;
  *out = NULL;
  /* a password in the URL would be in the input, hence the history */
  if (get_str(src, "url", 0, &url, res) != 0) return -1;
  const char *auth = url && (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0)
                         ? strstr(url, "://") + 3
                         : NULL;
  size_t alen = auth ? strcspn(auth, "/?#") : 0;
  const char *at = auth ? memchr(auth, '@', alen) : NULL;
  if (at && memchr(auth, ':', (size_t)(at - auth))) {
    fail(res, 1, "InvalidInput",
         "field 'source.url' holds a password: put the token in the worker's environment and "
         "name its variable in 'source.token_env'");
    return -1;
  }
  if (get_str(src, "token_env", 0, &tv, res) != 0 || get_str(src, "username_env", 0, &uv, res) != 0)
    return -1;
  if (tv == NULL && uv == NULL) return 0;
  const char *bad = tv == NULL ? "token_env" : NULL;
  for (int i = 0; bad == NULL && i < 2; i++) {
    const char *v = i ? uv : tv;
    for (const char *p = v; v && *p && bad == NULL; p++)
      if (!(isalnum((unsigned char)*p) || *p == '_') || (p == v && isdigit((unsigned char)*p)))
        bad = i ? "username_env" : "token_env";
    if (v && *v == '\0') bad = i ? "username_env" : "token_env";
  }
  if (bad) {
    fail(res, 1, "InvalidInput",
         "field 'source.%s' must name a variable of the worker's environment (the token "
         "itself never goes in the input)", bad);
    return -1;
  }
  if (dbx_drv_git_cred_from_env(uv, tv, c) != DBX_OK) {
    fail(res, 1, "SecretMissing", "git credentials: '%.100s' is not set in the worker's environment",
         tv);
    return -1;
  }
  *out = c;
  return 0;
}

static dbx_err run_create(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                          void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  char *path = NULL;
  char **envv = NULL;
  size_t nenv = 0, nups = 0;
  transfer *ups = NULL;
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  const char *resource = NULL;
  if (get_str(in, "resource", 0, &resource, res) != 0) goto out;
  if (resource == NULL) resource = "workspace";
  if (resource[0] == '\0') {
    rc = fail(res, 1, "InvalidInput", "field 'resource' is empty");
    goto out;
  }
  dbx_drv_source src = {.kind = DBX_DRV_SOURCE_EMPTY};
  dbx_drv_git_cred gcred = {0};
  const dbx_drv_git_cred *gc = NULL;
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(in, "source");
  if (s != NULL && !cJSON_IsNull(s)) {
    if (!cJSON_IsObject(s)) {
      rc = fail(res, 1, "InvalidInput", "field 'source' must be an object");
      goto out;
    }
    const char *kind = NULL;
    if (get_str(s, "kind", 1, &kind, res) != 0) goto out;
    const char *loc_field = NULL;
    if (strcmp(kind, "empty") == 0) {
      src.kind = DBX_DRV_SOURCE_EMPTY;
    } else if (strcmp(kind, "dir") == 0) {
      src.kind = DBX_DRV_SOURCE_DIR, loc_field = "path";
    } else if (strcmp(kind, "git") == 0) {
      src.kind = DBX_DRV_SOURCE_GIT;
      if (get_str(s, "url", 0, &src.location, res) != 0) goto out;
      if (src.location == NULL) loc_field = "path";
      if (get_str(s, "ref", 0, &src.ref, res) != 0) goto out;
      if (git_cred_of(s, &gcred, &gc, res) != 0) goto out;
    } else if (strcmp(kind, "snapshot") == 0) {
      src.kind = DBX_DRV_SOURCE_SNAPSHOT, loc_field = "ref";
    } else {
      rc = fail(res, 1, "InvalidInput",
                "field 'source.kind': '%.60s' is not one of empty, dir, git, snapshot", kind);
      goto out;
    }
    if (loc_field != NULL) {
      if (get_str(s, loc_field, 0, &src.location, res) != 0) goto out;
      if (src.location == NULL || src.location[0] == '\0') {
        rc = fail(res, 1, "InvalidInput", "field 'source.%s' is required for kind '%s'%s",
                  loc_field, kind, src.kind == DBX_DRV_SOURCE_GIT ? " (or 'url')" : "");
        goto out;
      }
    }
  }
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(in, "env");
  if (env != NULL && !cJSON_IsNull(env)) {
    if (!cJSON_IsObject(env)) {
      rc = fail(res, 1, "InvalidInput", "field 'env' must be an object");
      goto out;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, env) {
      if (!cJSON_IsString(e)) {
        rc = fail(res, 1, "InvalidInput", "field 'env.%.100s' must be a string", e->string);
        goto out;
      }
      if (e->string[0] == '\0' || strchr(e->string, '=') != NULL) {
        rc = fail(res, 1, "InvalidInput", "field 'env': '%.100s' is not a variable name",
                  e->string);
        goto out;
      }
    }
    /* the sandbox's own environment, for every exec step (driver.h) */
    int n = cJSON_GetArraySize(env);
    envv = dbx_calloc((size_t)n + 1, sizeof *envv);
    if (envv == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    cJSON_ArrayForEach(e, env) {
      if ((envv[nenv] = dbx_asprintf("%s=%s", e->string, e->valuestring)) == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      nenv++;
    }
  }
  create_sizes sz = {0};
  if (get_sizes(in, &sz, res) != 0) goto out;
  if (get_transfers(in, "upload", 1, &ups, &nups, res) != 0) goto out;

  /* "network": "host" (default) or "none"; see docs/sandbox.md */
  const char *network = NULL;
  if (get_str(in, "network", 0, &network, res) != 0) goto out;
  if (network && strcmp(network, "host") != 0 && strcmp(network, "none") != 0) {
    rc = fail(res, 1, "InvalidInput", "field 'network': '%.60s' is not one of host, none",
              network);
    goto out;
  }
  /* "host_fs": "host" (default: the host root read-only) or "system" */
  const char *host_fs = NULL;
  if (get_str(in, "host_fs", 0, &host_fs, res) != 0) goto out;
  if (host_fs && strcmp(host_fs, "host") != 0 && strcmp(host_fs, "system") != 0) {
    rc = fail(res, 1, "InvalidInput", "field 'host_fs': '%.60s' is not one of host, system",
              host_fs);
    goto out;
  }

  const char *wf = dbx_act_workflow_id(a), *owner = NULL;
  int keep = 0;
  if (owner_of(a, in, &owner, res) != 0 || get_keep(in, &keep, res) != 0) goto out;
  const cJSON *sess = cJSON_GetObjectItemCaseSensitive(in, "session");
  if (sess != NULL && !cJSON_IsBool(sess) && !cJSON_IsNull(sess)) {
    rc = fail(res, 1, "InvalidInput", "field 'session' must be true or false");
    goto out;
  }
  char id[129]; /* a derived id (20) or an adopted one (dbx_drv_name_valid: <= 128) */
  sandbox_id_of(wf, cJSON_HasObjectItem(in, OWNER_FIELD) ? owner : NULL, resource, id);
  int adopted = 0, reopen = cJSON_HasObjectItem(in, "adopt");
  if (reopen) { /* a session's next turn: the previous turn's sandbox */
    const char *aid = NULL;
    if (adopt_of(a, drv, in, &aid, res, &rc) != 0) goto out;
    snprintf(id, sizeof id, "%s", aid);
  }
  /* labels say whose sandbox it is (`durabox sandbox list` reads them; list
   * by labels finds a run's sandboxes); a value that is no valid label value
   * is left out */
  dbx_drv_label labels[5] = {{"durabox.resource", resource},
                             {"durabox.workflow_id", wf ? wf : ""},
                             {"durabox.run_id", owner},
                             {"durabox.keep", keep ? "true" : ""},
                             {"durabox.session", cJSON_IsTrue(sess) ? "true" : ""}};
  size_t nlabels = 0;
  for (size_t i = 0; i < 5; i++)
    if (dbx_drv_label_valid(&labels[i]) && labels[i].value[0]) labels[nlabels++] = labels[i];
  dbx_drv_create_opts co = {.source = src, .labels = labels, .nlabels = nlabels};
  unsigned unenforced = 0;
  co.env = (const char *const *)envv;
  co.cpu = sz.cpu, co.memory_gib = sz.memory_gib, co.disk_gib = sz.disk_gib;
  co.auto_stop_minutes = sz.has[0] ? &sz.autos[0] : NULL;
  co.auto_archive_minutes = sz.has[1] ? &sz.autos[1] : NULL;
  co.auto_delete_minutes = sz.has[2] ? &sz.autos[2] : NULL;
  co.unenforced = &unenforced;
  co.network = network && strcmp(network, "none") == 0 ? DBX_DRV_NET_NONE : DBX_DRV_NET_HOST;
  co.host_fs = host_fs && strcmp(host_fs, "system") == 0 ? DBX_DRV_FS_SYSTEM : DBX_DRV_FS_HOST;
  /* a copy or clone may take minutes: heartbeat while it runs, so a dead
   * worker is noticed after the heartbeat timeout, and stop on cancellation */
  co.cancelled = create_heartbeat;
  co.cancelled_ud = a;
  co.git_cred = gc;
  if (gc && drv->ops->git_clone_cred == NULL) {
    rc = fail(res, 1, "Unsupported", "sandbox.create: the %s driver takes no git credentials",
              drv->name);
    goto out;
  }
  DBX_FAILPOINT("activity.sandbox_create.before");
  dbx_drv_err drc = reopen ? DBX_DRV_OK : CALL(drv, create, id, &co, &adopted);
  if (reopen) adopted = 1;
  DBX_FAILPOINT("activity.sandbox_create.after");
  if (drc != DBX_DRV_OK) {
    rc = fail_drv(res, drv, drc, drc == DBX_DRV_INVALID ? "field 'source'" : "sandbox.create", id);
    goto out;
  }
  /* files uploaded at create: again on an adopted sandbox too (each
   * upload replaces its file whole, so a repeat is harmless) */
  for (size_t i = 0; i < nups; i++) {
    if (dbx_act_cancelled(a)) {
      rc = DBX_ECANCELED;
      goto out;
    }
    drc = CALL(drv, upload, id, ups[i].from, ups[i].to);
    if (drc != DBX_DRV_OK) {
      char what[300];
      snprintf(what, sizeof what, "sandbox.create: upload '%.120s' to '%.120s'", ups[i].from,
               ups[i].to);
      rc = fail_drv(res, drv, drc, what, id);
      /* no retry mends it: remove the sandbox, which nobody will use (a
       * retryable failure leaves it for the retry to adopt) */
      if (res->non_retryable && !reopen && CALL(drv, del, id) != DBX_DRV_OK)
        DBX_WARN(MOD, "sandbox %s: not removed after its failed upload", id);
      goto out;
    }
  }
  path = drv->ops->workspace_path(drv->self, id); /* NULL: the driver has no host path */
  cJSON *o = cJSON_CreateObject();
  if (o == NULL || !cJSON_AddStringToObject(o, "sandbox_id", id) ||
      !cJSON_AddBoolToObject(o, "adopted", adopted) ||
      !cJSON_AddStringToObject(o, "driver", drv->name) ||
      (path != NULL && !cJSON_AddStringToObject(o, "path", path)) ||
      add_unenforced(o, unenforced) != 0 ||
      (nups > 0 && !cJSON_AddNumberToObject(o, "uploaded", (double)nups))) {
    cJSON_Delete(o);
    rc = DBX_ENOMEM;
    goto out;
  }
  if (unenforced)
    DBX_WARN(MOD, "sandbox %s: the %s driver does not enforce some of its sizes or intervals "
             "(see the create's \"unenforced\")", id, drv->name);
  rc = succeed(res, o);
out:
  for (size_t i = 0; i < nenv; i++) free(envv[i]);
  free(envv);
  free(ups);
  free(path);
  cJSON_Delete(in);
  return rc;
}

/* ------------------------------------------------------------ exec */

#define EXEC_POLL_MS 200   /* between looks without a wait fd */
#define EXEC_WATCH_MS 1000 /* between looks with one (the worker wakes it sooner to heartbeat) */
#define EXEC_START_TRIES 20

/* The command id of this activity: the same for every attempt, so a retry
 * finds the command an earlier attempt started. The previous attempt's
 * heartbeat details name it too (they win when valid). */
static void exec_cmd_id(dbx_act *a, char out[24]) {
  const char *prev = dbx_act_heartbeat_details(a);
  cJSON *d = prev ? cJSON_Parse(prev) : NULL;
  const cJSON *c = d ? cJSON_GetObjectItemCaseSensitive(d, "cmd_id") : NULL;
  if (cJSON_IsString(c) && valid_name(c->valuestring) && strlen(c->valuestring) < 24) {
    snprintf(out, 24, "%s", c->valuestring);
  } else {
    uint64_t h = fnv1a(FNV_OFFSET, dbx_act_workflow_id(a));
    h = fnv1a(h, "\x1f");
    h = fnv1a(h, dbx_act_run_id(a));
    h = fnv1a(h, "\x1f");
    h = fnv1a(h, dbx_act_activity_id(a));
    snprintf(out, 24, "x%016llx", (unsigned long long)h);
  }
  cJSON_Delete(d);
}

/* The live tail of a running command, for its heartbeat details (the
 * service shows them in DescribeWorkflowExecution's pending activities;
 * durabox run prints them while the step runs): the last EXEC_TAIL_LINES
 * lines of each stream's last EXEC_TAIL_BYTES, secrets redacted as in the
 * result, CR as a line break, other control bytes and NUL as spaces, as
 * valid UTF-8. A stream is read only while under its cap (in order,
 * driver.h "Capture"): past it the newest bytes' place in the ring is not
 * known here, and its tail stays the last one read. Best effort: out of
 * memory or a failed read leaves a tail out, never fails the exec. */
#define EXEC_TAIL_BYTES 600
#define EXEC_TAIL_LINES 3
typedef struct {
  const secret_env *sec;
  size_t nsec;
  size_t cap;       /* the streams' cap */
  uint64_t seen[2]; /* the sizes the tails were read at */
  char *tail[2];    /* malloc'd or NULL */
} live_tail;

static void live_tail_free(live_tail *lt) {
  for (int i = 0; i < 2; i++) wipe_free(lt->tail[i]), lt->tail[i] = NULL;
}

/* The last lines of p[0, n) (cut: bytes came before p), cleaned as above:
 * malloc'd text or NULL (OOM). */
static char *last_lines(uint8_t *p, size_t n, int cut) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '\r') p[i] = '\n';
    else if ((p[i] < 0x20 && p[i] != '\n' && p[i] != '\t') || p[i] == 0x7f) p[i] = ' ';
  }
  size_t end = n;
  while (end > 0 && p[end - 1] == '\n') end--;
  size_t from = end;
  int lines = 0;
  while (from > 0 && !(p[from - 1] == '\n' && ++lines == EXEC_TAIL_LINES)) from--;
  if (from == 0 && cut) { /* the first line is only its end: drop it unless alone */
    size_t nl = 0;
    while (nl < end && p[nl] != '\n') nl++;
    if (nl < end) from = nl + 1;
  }
  return dbx_utf8_repair((const char *)p + from, end - from, NULL);
}

static void tail_read(dbx_driver *drv, const char *id, const char *cmd_id, live_tail *lt, int i,
                      uint64_t size) {
  if (size == lt->seen[i] || (size >= lt->cap && DBX_DRV_TAIL_BYTES(lt->cap) > 0)) return;
  uint64_t off = size > EXEC_TAIL_BYTES ? size - EXEC_TAIL_BYTES : 0;
  size_t want = (size_t)(size - off), n = 0;
  uint8_t *buf = dbx_malloc(EXEC_TAIL_BYTES + 1);
  if (buf == NULL) return;
  if (CALL(drv, exec_attach, id, cmd_id, i + 1, off, buf, want, &n) != DBX_DRV_OK ||
      redact(&buf, &n, lt->sec, lt->nsec, 1, off > 0) < 0) {
    free(buf);
    return;
  }
  char *t = last_lines(buf, n, off > 0);
  memset(buf, 0, n);
  free(buf);
  if (t == NULL) return;
  wipe_free(lt->tail[i]);
  lt->tail[i] = t;
  lt->seen[i] = size;
}

/* {cmd_id, stdout_offset, stderr_offset, stdout_tail?, stderr_tail?}:
 * malloc'd, or NULL (OOM: the caller sends the details without tails). */
static char *live_details(dbx_driver *drv, const char *id, const char *cmd_id,
                          const dbx_drv_cmd_status *st, live_tail *lt) {
  tail_read(drv, id, cmd_id, lt, 0, st->stdout_size);
  tail_read(drv, id, cmd_id, lt, 1, st->stderr_size);
  cJSON *o = cJSON_CreateObject();
  int okb = o && cJSON_AddStringToObject(o, "cmd_id", cmd_id) &&
            cJSON_AddNumberToObject(o, "stdout_offset", (double)st->stdout_size) &&
            cJSON_AddNumberToObject(o, "stderr_offset", (double)st->stderr_size) &&
            (!lt->tail[0] || cJSON_AddStringToObject(o, "stdout_tail", lt->tail[0])) &&
            (!lt->tail[1] || cJSON_AddStringToObject(o, "stderr_tail", lt->tail[1]));
  char *txt = okb ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return txt;
}

/* One exec attempt, kept between the steps of a parked activity (the worker
 * resumes exec_wait on any pool thread; api.h dbx_act_park). Owns in, sec,
 * envv and wait_fd; id and cwd are borrowed from in. */
typedef struct {
  dbx_driver *drv;
  cJSON *in;
  const char *id, *cwd;
  secret_env *sec;
  size_t nsec;
  char **envv; /* plain entries ours, secret ones borrowed from sec */
  size_t nenv;
  dbx_drv_exec_opts opts;
  live_tail lt;
  char cmd_id[24];
  int restarts, starts, amo, lost;
  char not_started[256]; /* why the command did not start, twice (then reported) */
  int wait_fd; /* the driver's exec_wait_fd; -1: none yet; -2: none (it misled) */
} exec_job;

static void exec_job_free(exec_job *j) {
  if (j == NULL) return;
  live_tail_free(&j->lt);
  if (j->wait_fd >= 0) close(j->wait_fd);
  for (size_t i = 0; i < j->nenv; i++) {
    int borrowed = 0;
    for (size_t k = 0; k < j->nsec; k++)
      if (j->envv[i] == j->sec[k].entry) borrowed = 1;
    if (!borrowed) free(j->envv[i]);
  }
  secrets_free(j->sec, j->nsec);
  free(j->envv);
  cJSON_Delete(j->in);
  free(j);
}

static int fd_fired(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Ask the driver for an fd that fires when the command may have finished
 * (optional op exec_wait_fd), once it runs; without one the attempt wakes
 * every EXEC_POLL_MS. */
static void exec_watch(exec_job *j) {
  if (j->wait_fd != -1 || j->drv->ops->exec_wait_fd == NULL) return;
  int fd = -1;
  if (CALL(j->drv, exec_wait_fd, j->id, j->cmd_id, &fd) == DBX_DRV_OK) j->wait_fd = fd;
}

/* Start the command detached (or re-attach to it), claimed for this attempt
 * (opts.attempt; driver.h exec_cancel_as). */
static dbx_drv_err exec_begin(dbx_act *a, exec_job *j) {
  exec_cmd_id(a, j->cmd_id);
  int adopted = 0;
  j->amo = dbx_act_retry_class(a) == DBX_AT_MOST_ONCE;
  dbx_drv_err rc = CALL(j->drv, exec_start, j->id, j->cmd_id, &j->opts, &adopted);
  if (rc == DBX_DRV_OK && adopted)
    DBX_INFO(MOD, "sandbox %s: re-attached to command %s", j->id, j->cmd_id);
  return rc;
}

/* One look at the command: *done = 1 with its end (er filled when OK), or
 * *done = 0 after a heartbeat {cmd_id, stdout_offset, stderr_offset} and the
 * live tail (live_details): wait, then look again. An attempt that learns
 * it is out of date (dbx_act_superseded) asks for the kill on its own
 * behalf, which the driver ignores once a newer attempt has re-attached. A
 * cancel request kills the command's group (CANCELED). A command whose
 * supervisor vanished (LOST: the driver says so only once nothing of it
 * runs) is, for a safe_to_retry attempt, started again once; vanishing twice
 * (or never launching) is FAILED with lost = 1. For an at_most_once attempt
 * a LOST command is never started again: OUTCOME_UNKNOWN with lost = 2. A
 * command that FINISHED without ever starting (er.not_started: its
 * supervisor's setup, fork or exec failed, or its child was killed before
 * exec; nothing of it ran, whatever its retry class) is started again once;
 * twice is FAILED with j->not_started set. A command whose sandbox vanished
 * (its folder removed under it) is NO_SANDBOX. Other errors are the
 * driver's. */
/* Forget j's command (nothing of it runs) and start it anew; *done = 0 so
 * that the caller looks again at once. */
static dbx_drv_err exec_restart(exec_job *j, int *done) {
  if (j->wait_fd >= 0) close(j->wait_fd);
  j->wait_fd = -1;
  dbx_drv_err rc = CALL(j->drv, exec_forget, j->id, j->cmd_id);
  if (rc == DBX_DRV_OK) rc = CALL(j->drv, exec_start, j->id, j->cmd_id, &j->opts, NULL);
  if (rc == DBX_DRV_OK) *done = 0;
  return rc;
}

static dbx_drv_err exec_look(dbx_act *a, exec_job *j, dbx_drv_exec_result *er, int *done) {
  dbx_driver *drv = j->drv;
  const char *id = j->id, *cmd_id = j->cmd_id;
  dbx_drv_cmd_status st;
  *done = 1;
  dbx_drv_err rc = CALL(drv, exec_poll, id, cmd_id, &st);
  if (rc == DBX_DRV_NOT_FOUND && CALL(drv, exists, id, NULL) == DBX_DRV_NO_SANDBOX)
    return DBX_DRV_NO_SANDBOX;
  if (rc != DBX_DRV_OK) return rc;
  if (st.state == DBX_DRV_CMD_FINISHED) {
    rc = CALL(drv, exec_result, id, cmd_id, er);
    if (rc != DBX_DRV_OK || !er->not_started[0]) return rc;
    if (j->restarts++ > 0) {
      snprintf(j->not_started, sizeof j->not_started, "%s", er->not_started);
      return DBX_DRV_FAILED;
    }
    DBX_WARN(MOD, "sandbox %s: command %s did not start (%s); nothing of it ran: starting it again", id,
             cmd_id, er->not_started);
    dbx_drv_exec_result_cleanup(er);
    return exec_restart(j, done);
  }
  if (st.state == DBX_DRV_CMD_LOST && j->amo) {
    DBX_WARN(MOD, "sandbox %s: at_most_once command %s lost its supervisor; not run again", id,
             cmd_id);
    j->lost = 2;
    return DBX_DRV_OUTCOME_UNKNOWN;
  }
  if (st.state == DBX_DRV_CMD_LOST) {
    if (j->restarts++ > 0) {
      j->lost = 1;
      return DBX_DRV_FAILED;
    }
    DBX_WARN(MOD, "sandbox %s: command %s lost its supervisor; starting it again", id, cmd_id);
    return exec_restart(j, done);
  }
  if (st.state == DBX_DRV_CMD_PENDING) { /* a start raced with a poller: launch it */
    if (j->starts++ >= EXEC_START_TRIES) {
      j->lost = 1;
      return DBX_DRV_FAILED;
    }
    if ((rc = CALL(drv, exec_start, id, cmd_id, &j->opts, NULL)) != DBX_DRV_OK) return rc;
  } else if (j->wait_fd >= 0 && fd_fired(j->wait_fd)) {
    /* it fired but the command still runs (a wait fd is a hint): poll */
    close(j->wait_fd);
    j->wait_fd = -2;
  } else {
    exec_watch(j);
  }
  char details[160];
  snprintf(details, sizeof details,
           "{\"cmd_id\":\"%s\",\"stdout_offset\":%llu,\"stderr_offset\":%llu}", cmd_id,
           (unsigned long long)st.stdout_size, (unsigned long long)st.stderr_size);
  char *live = live_details(drv, id, cmd_id, &st, &j->lt);
  int stop = dbx_act_heartbeat(a, live ? live : details);
  if (live) wipe_free(live);
  if (stop) {
    /* the worker stopping is no reason to lose the command: it runs on
     * under its supervisor and the next attempt re-attaches to it */
    if (dbx_act_worker_stopping(a)) return DBX_DRV_CANCELED;
    /* a cancel request reaches the live attempt only: kill outright; an
     * out-of-date attempt kills only what no newer attempt has claimed */
    int superseded = 0;
    if (dbx_act_superseded(a) && drv->ops->exec_cancel_as)
      CALL(drv, exec_cancel_as, id, cmd_id, j->opts.attempt, &superseded);
    else
      CALL(drv, exec_cancel, id, cmd_id);
    if (superseded)
      DBX_INFO(MOD, "sandbox %s: command %s belongs to a newer attempt; left running", id,
               cmd_id);
    return DBX_DRV_CANCELED;
  }
  *done = 0;
  return DBX_DRV_OK;
}

static dbx_err exec_end(exec_job *j, dbx_drv_err drc, dbx_drv_exec_result *er,
                        dbx_act_result *res);

/* The wait of sandbox.exec, and its resume: look at the command until it
 * ends, parked between looks (woken by the driver's wait fd, after
 * EXEC_POLL_MS without one, at the next heartbeat, or on cancellation); a
 * runner that cannot park (tests/act_fake.c) waits here. Takes ownership of
 * ctx (an exec_job). */
static dbx_err exec_wait(dbx_act *a, dbx_act_result *res, void *ctx) {
  exec_job *j = ctx;
  for (;;) {
    dbx_drv_exec_result er = {0};
    int done = 0;
    dbx_drv_err drc = exec_look(a, j, &er, &done);
    if (done) return exec_end(j, drc, &er, res);
    int fd = j->wait_fd >= 0 ? j->wait_fd : -1;
    if (dbx_act_park(a, fd, fd >= 0 ? EXEC_WATCH_MS : EXEC_POLL_MS, exec_wait, j) == DBX_OK)
      return DBX_OK;
    struct timespec ts = {0, (long)EXEC_POLL_MS * 1000000};
    nanosleep(&ts, NULL);
  }
}

/* The end of an exec attempt: its result (drc, er) into res; frees j and er. */
static dbx_err exec_end(exec_job *j, dbx_drv_err drc, dbx_drv_exec_result *er,
                        dbx_act_result *res) {
  dbx_driver *drv = j->drv;
  dbx_err rc = DBX_OK;
  kept_out ko[2] = {{0}, {0}};
  const char *id = j->id;
  if (drc == DBX_DRV_CANCELED) {
    rc = DBX_ECANCELED;
    goto out;
  }
  if (j->lost == 2) {
    rc = fail(res, 1, "OutcomeUnknown",
              "sandbox.exec: the command's supervisor died while it ran, so the command may "
              "have run; an at_most_once step is not started again");
    goto out;
  }
  if (j->not_started[0]) { /* certain that nothing ran: a retry may start it */
    rc = fail(res, 0, "CommandNotStarted", "sandbox.exec: the command did not start, twice (nothing of it ran): %s",
              j->not_started);
    goto out;
  }
  if (j->lost) { /* the supervisor vanished twice: report, let retries decide */
    rc = fail(res, 0, "CommandLost", "sandbox.exec: the command's supervisor vanished");
    goto out;
  }
  if (drc != DBX_DRV_OK) {
    rc = fail_path(res, drv, drc, "sandbox.exec", id, j->cwd ? j->cwd : "");
    goto out;
  }
  uint64_t totals[2] = {er->stdout_total, er->stderr_total};
  if (kept_init(&ko[0], er->stdout_buf, er->stdout_len, er->stdout_head_len, er->stdout_total) ||
      kept_init(&ko[1], er->stderr_buf, er->stderr_len, er->stderr_head_len, er->stderr_total)) {
    rc = DBX_ENOMEM;
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    /* head: cut after it when truncated; tail: cut before it when it has bytes */
    int hh = redact(&ko[i].h, &ko[i].hl, j->sec, j->nsec, ko[i].truncated, 0);
    int th = hh < 0 ? -1 : redact(&ko[i].t, &ko[i].tl, j->sec, j->nsec, 0, ko[i].tl > 0);
    if (th < 0) {
      rc = DBX_ENOMEM;
      goto out;
    }
    /* A stream with a redacted value counts the redacted text it kept: the
     * raw count would tell the value's length (or, past the cap, its rest). */
    if (hh + th > 0) {
      totals[i] = ko[i].hl + ko[i].tl;
      ko[i].count_known = 0;
    }
  }
  cJSON *o = cJSON_CreateObject();
  if (o == NULL || !cJSON_AddNumberToObject(o, "exit_code", er->exit_code) ||
      !cJSON_AddNumberToObject(o, "signal", er->signal) ||
      !cJSON_AddBoolToObject(o, "timed_out", er->timed_out) ||
      !cJSON_AddNumberToObject(o, "stdout_bytes", (double)totals[0]) ||
      !cJSON_AddNumberToObject(o, "stderr_bytes", (double)totals[1]) ||
      !cJSON_AddNumberToObject(o, "duration_ms", (double)er->duration_ms)) {
    cJSON_Delete(o);
    rc = DBX_ENOMEM;
    goto out;
  }
  static const char *const names[2] = {"stdout", "stderr"};
  static const char *const tnames[2] = {"stdout_truncated", "stderr_truncated"};
  rc = succeed_fitted(res, o, ko, names, tnames, 2);
out:
  kept_free(&ko[0]);
  kept_free(&ko[1]);
  if (er->stdout_buf) memset(er->stdout_buf, 0, er->stdout_len);
  if (er->stderr_buf) memset(er->stderr_buf, 0, er->stderr_len);
  dbx_drv_exec_result_cleanup(er);
  exec_job_free(j);
  return rc;
}

static dbx_err run_exec(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                        void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  exec_job *j = dbx_calloc(1, sizeof *j);
  if (j == NULL) return DBX_ENOMEM;
  j->drv = drv;
  j->wait_fd = -1;
  j->in = parse_input(json, len, res);
  if (j->in == NULL) {
    exec_job_free(j);
    return DBX_OK;
  }
  cJSON *in = j->in;
  const char *command;
  double timeout_s = 0, max_out = (double)DBX_SANDBOX_OUTPUT_DEFAULT_BYTES;
  if (get_sandbox(in, &j->id, res) != 0 || get_str(in, "command", 1, &command, res) != 0 ||
      get_path(in, "cwd", 0, &j->cwd, res) != 0 || get_num(in, "timeout_s", &timeout_s, res) != 0 ||
      get_num(in, "max_output_bytes", &max_out, res) != 0)
    goto out;
  if (max_out > (double)DBX_SANDBOX_OUTPUT_MAX_BYTES) {
    rc = fail(res, 1, "InvalidInput",
              "field 'max_output_bytes': %.0f is over the limit of %zu bytes per stream "
              "(a step's result must fit one payload)",
              max_out, DBX_SANDBOX_OUTPUT_MAX_BYTES);
    goto out;
  }

  const cJSON *env = cJSON_GetObjectItemCaseSensitive(in, "env");
  if (env != NULL && !cJSON_IsNull(env)) {
    if (!cJSON_IsObject(env)) {
      rc = fail(res, 1, "InvalidInput", "field 'env' must be an object");
      goto out;
    }
    int n = cJSON_GetArraySize(env);
    j->envv = dbx_calloc((size_t)n + 1, sizeof *j->envv);
    j->sec = dbx_calloc((size_t)n + 1, sizeof *j->sec);
    if (j->envv == NULL || j->sec == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, env) {
      const char *k = e->string;
      if (k == NULL || k[0] == '\0' || strchr(k, '=') != NULL) {
        rc = fail(res, 1, "InvalidInput", "field 'env': '%.100s' is not a variable name",
                  k ? k : "");
        goto out;
      }
      if (cJSON_IsString(e)) {
        j->envv[j->nenv] = dbx_asprintf("%s=%s", k, e->valuestring);
        if (j->envv[j->nenv] == NULL) {
          rc = DBX_ENOMEM;
          goto out;
        }
        j->nenv++;
        continue;
      }
      const cJSON *sn = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "secret") : NULL;
      if (!cJSON_IsString(sn) || sn->valuestring[0] == '\0') {
        rc = fail(res, 1, "InvalidInput",
                  "field 'env.%.100s' must be a string or {\"secret\": \"NAME\"}", k);
        goto out;
      }
      const char *val = getenv(sn->valuestring);
      if (val == NULL) {
        rc = fail(res, 1, "SecretMissing",
                  "secret '%.100s' (for env '%.100s') is not set in the worker's environment",
                  sn->valuestring, k);
        goto out;
      }
      secret_env *se = &j->sec[j->nsec];
      se->name = dbx_strdup(sn->valuestring);
      se->value = dbx_strdup(val);
      se->entry = dbx_asprintf("%s=%s", k, val);
      j->nsec++;
      if (!se->name || !se->value || !se->entry) {
        rc = DBX_ENOMEM;
        goto out;
      }
      j->envv[j->nenv++] = se->entry; /* borrowed from sec */
    }
  }
  int ar = add_redact(in, &j->sec, &j->nsec, res);
  if (ar != 0) {
    rc = ar == -2 ? DBX_ENOMEM : DBX_OK;
    goto out;
  }
  dbx_drv_err ex = CALL(drv, exists, j->id, NULL);
  if (ex != DBX_DRV_OK) {
    rc = fail_drv(res, drv, ex, "sandbox.exec", j->id);
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }

  dbx_drv_exec_opts opts = {0};
  opts.command = command;
  opts.cwd = j->cwd;
  opts.env = (const char *const *)j->envv;
  int64_t tmo = (int64_t)(timeout_s * 1000.0);
  if (timeout_s > 0 && tmo == 0) tmo = 1;
  int64_t remaining = dbx_act_remaining_ms(a);
  if (remaining > 0 && remaining != INT64_MAX && (tmo == 0 || remaining < tmo)) tmo = remaining;
  opts.timeout_ms = tmo;
  size_t cap = max_out >= 1 ? (size_t)max_out : DBX_SANDBOX_OUTPUT_DEFAULT_BYTES;
  opts.stdout_cap_bytes = cap;
  opts.stderr_cap_bytes = cap;
  opts.attempt = dbx_act_attempt(a) > 0 ? dbx_act_attempt(a) : 0;
  j->opts = opts;
  j->lt = (live_tail){.sec = j->sec, .nsec = j->nsec, .cap = cap};
  dbx_drv_err drc = exec_begin(a, j);
  if (drc != DBX_DRV_OK) {
    dbx_drv_exec_result er = {0};
    return exec_end(j, drc, &er, res);
  }
  return exec_wait(a, res, j);
out:
  exec_job_free(j);
  return rc;
}

/* ------------------------------------------------------------ files */

static dbx_err run_write_file(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                              void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  uint8_t *data = NULL;
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  const char *id, *path, *content, *b64;
  if (get_sandbox(in, &id, res) != 0 || get_path(in, "path", 1, &path, res) != 0 ||
      get_str(in, "content", 0, &content, res) != 0 ||
      get_str(in, "content_b64", 0, &b64, res) != 0)
    goto out;
  if ((content == NULL) == (b64 == NULL)) {
    rc = fail(res, 1, "InvalidInput", "exactly one of 'content' and 'content_b64' is required");
    goto out;
  }
  size_t n;
  const void *bytes;
  if (b64 != NULL) {
    dbx_err d = dbx_base64_decode(b64, strlen(b64), &data, &n);
    if (d == DBX_ENOMEM) {
      rc = DBX_ENOMEM;
      goto out;
    }
    if (d != DBX_OK) {
      rc = fail(res, 1, "InvalidInput", "field 'content_b64' is not valid base64");
      goto out;
    }
    bytes = data;
  } else {
    bytes = content;
    n = strlen(content);
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  dbx_drv_err drc = CALL(drv, file_write, id, path, bytes, n);
  if (drc != DBX_DRV_OK) {
    rc = fail_path(res, drv, drc, "sandbox.write_file", id, path);
  } else {
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddNumberToObject(o, "bytes", (double)n)) {
      cJSON_Delete(o);
      o = NULL;
    }
    rc = succeed(res, o);
  }
out:
  free(data);
  cJSON_Delete(in);
  return rc;
}

static dbx_err run_read_file(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                             void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  kept_out k = {0};
  uint8_t *data = NULL;
  size_t n = 0;
  secret_env *sec = NULL;
  size_t nsec = 0;
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  const char *id, *path;
  if (get_sandbox(in, &id, res) != 0 || get_path(in, "path", 1, &path, res) != 0) goto out;
  int ar = add_redact(in, &sec, &nsec, res);
  if (ar != 0) {
    rc = ar == -2 ? DBX_ENOMEM : DBX_OK;
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  dbx_drv_err drc = CALL(drv, file_read, id, path, 0, &data, &n);
  if (drc != DBX_DRV_OK) {
    rc = fail_path(res, drv, drc, "sandbox.read_file", id, path);
  } else {
    /* the head and the tail of a large file (sandbox.h "Output") */
    size_t cap = DBX_SANDBOX_READ_MAX_BYTES, tail = DBX_DRV_TAIL_BYTES(cap);
    int cut = n > cap;
    if (cut) memmove(data + cap - tail, data + n - tail, tail);
    if (kept_init(&k, data, cut ? cap : n, cut ? cap - tail : n, n) != 0) {
      rc = DBX_ENOMEM;
      goto out;
    }
    memset(data, 0, n);
    /* as exec's streams: a file with a redacted value gives the size of
     * the redacted text kept, so no value's length shows */
    int hh = redact(&k.h, &k.hl, sec, nsec, k.truncated, 0);
    int th = hh < 0 ? -1 : redact(&k.t, &k.tl, sec, nsec, 0, k.tl > 0);
    if (th < 0) {
      rc = DBX_ENOMEM;
      goto out;
    }
    uint64_t size = n;
    if (hh + th > 0) {
      size = k.hl + k.tl;
      k.count_known = 0;
    }
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddNumberToObject(o, "bytes", (double)size)) {
      cJSON_Delete(o);
      o = NULL;
    }
    static const char *const names[1] = {"content"}, *const tnames[1] = {"truncated"};
    rc = succeed_fitted(res, o, &k, names, tnames, 1);
  }
out:
  kept_free(&k);
  free(data);
  secrets_free(sec, nsec);
  cJSON_Delete(in);
  return rc;
}

/* ------------------------------------------------------- checkpoint, git */

static dbx_err run_checkpoint(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                              void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  char *ref = NULL;
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  const char *id, *name;
  if (get_sandbox(in, &id, res) != 0 || get_str(in, "name", 0, &name, res) != 0) goto out;
  char derived[32];
  if (name == NULL) {
    const char *parts[] = {dbx_act_workflow_id(a), dbx_act_run_id(a), dbx_act_activity_id(a)};
    uint64_t h = fnv1a(FNV_OFFSET, id);
    for (size_t i = 0; i < 3; i++) h = fnv1a(fnv1a(h, "/"), parts[i] ? parts[i] : "");
    snprintf(derived, sizeof derived, "ckpt-%016llx", (unsigned long long)h);
    name = derived;
  } else if (!valid_name(name)) {
    rc = fail(res, 1, "InvalidInput",
              "field 'name': '%.140s' is not 1-128 of [A-Za-z0-9._-] (not starting with '.')",
              name);
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  dbx_drv_err drc = CALL(drv, checkpoint, id, name, &ref);
  if (drc != DBX_DRV_OK) {
    rc = fail_drv(res, drv, drc, "sandbox.checkpoint", id);
  } else {
    cJSON *o = cJSON_CreateObject();
    if (o && !cJSON_AddStringToObject(o, "ref", ref)) {
      cJSON_Delete(o);
      o = NULL;
    }
    rc = succeed(res, o);
  }
out:
  free(ref);
  cJSON_Delete(in);
  return rc;
}

#define GIT_COMMIT_PATHS_MAX 1000

/* git_commit's optional "paths": an array of 1..GIT_COMMIT_PATHS_MAX
 * non-empty strings. *out: malloc'd array of borrowed strings (free()), NULL
 * with *n = 0 when absent. Returns 0, or -1 with InvalidInput recorded. */
static int get_paths(const cJSON *in, const char ***out, size_t *n, dbx_act_result *res) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, "paths");
  *out = NULL;
  *n = 0;
  if (v == NULL || cJSON_IsNull(v)) return 0;
  int cnt = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (cnt < 1 || cnt > GIT_COMMIT_PATHS_MAX) {
    fail(res, 1, "InvalidInput", "field 'paths' must be an array of 1 to %d paths",
         GIT_COMMIT_PATHS_MAX);
    return -1;
  }
  const char **p = dbx_calloc((size_t)cnt, sizeof *p);
  if (p == NULL) {
    fail(res, 0, "SandboxError", "out of memory");
    return -1;
  }
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
      free(p);
      fail(res, 1, "InvalidInput", "field 'paths[%zu]' must be a non-empty string", *n);
      *n = 0;
      return -1;
    }
    p[(*n)++] = e->valuestring;
  }
  *out = p;
  return 0;
}

/* Stages every change of the repository (or of "paths" only) and commits it;
 * HOME and caches are outside the workspace, so they are never staged. */
static dbx_err run_git_commit(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                              void *ud) {
  dbx_driver *drv = DRV(ud);
  dbx_err rc = DBX_OK;
  char *sha = NULL, *msg = NULL;
  const char **paths = NULL;
  size_t npaths = 0;
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  const char *id, *message, *author;
  if (get_sandbox(in, &id, res) != 0 || get_str(in, "message", 1, &message, res) != 0 ||
      get_str(in, "author", 0, &author, res) != 0 || get_paths(in, &paths, &npaths, res) != 0)
    goto out;
  if (npaths > 0 && drv->ops->git_commit_paths == NULL) {
    rc = fail(res, 1, "Unsupported", "sandbox.git_commit: the %s driver takes no 'paths'",
              drv->name);
    goto out;
  }
  if (message[0] == '\0') {
    rc = fail(res, 1, "InvalidInput", "field 'message' is empty");
    goto out;
  }
  if (author == NULL) author = "durabox <durabox@localhost>";
  if (strchr(author, '<') == NULL || strchr(author, '>') == NULL) {
    rc = fail(res, 1, "InvalidInput", "field 'author' must look like 'Name <email>'");
    goto out;
  }
  dbx_drv_err ex = CALL(drv, exists, id, NULL);
  if (ex != DBX_DRV_OK) {
    rc = fail_drv(res, drv, ex, "sandbox.git_commit", id);
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  /* The trailer names this activity and attempt: a later attempt (a retry
   * of a commit that landed before its result was recorded) finds it in
   * HEAD's history and reports its sha (driver.h git_commit) instead of
   * "nothing to commit". */
  uint64_t h = fnv1a(FNV_OFFSET, dbx_act_workflow_id(a));
  h = fnv1a(fnv1a(h, "\x1f"), dbx_act_run_id(a));
  h = fnv1a(fnv1a(h, "\x1f"), dbx_act_activity_id(a));
  size_t ml = strlen(message);
  while (ml > 0 && (message[ml - 1] == '\n' || message[ml - 1] == ' ')) ml--;
  msg = dbx_asprintf("%.*s\n\nDurabox-Commit: c%016llx %d", (int)ml, message,
                     (unsigned long long)h, (int)dbx_act_attempt(a));
  if (msg == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  int nothing = 0;
  dbx_drv_err drc = npaths > 0 ? CALL(drv, git_commit_paths, id, NULL, paths, npaths, msg,
                                      author, &sha, &nothing)
                               : CALL(drv, git_commit, id, NULL, msg, author, &sha, &nothing);
  if (drc != DBX_DRV_OK) {
    rc = fail_drv(res, drv, drc, "sandbox.git_commit", id);
  } else {
    cJSON *o = cJSON_CreateObject();
    cJSON *s = sha ? cJSON_CreateString(sha) : cJSON_CreateNull();
    if (o == NULL || s == NULL || !cJSON_AddItemToObject(o, "sha", s)) {
      cJSON_Delete(s);
      cJSON_Delete(o);
      o = NULL;
    } else if (!cJSON_AddBoolToObject(o, "nothing_to_commit", nothing)) {
      cJSON_Delete(o);
      o = NULL;
    }
    rc = succeed(res, o);
  }
out:
  free(sha);
  free(msg);
  free(paths);
  cJSON_Delete(in);
  return rc;
}

/* ------------------------------------------------------ stop/start/delete */

enum life_op { OP_STOP, OP_START, OP_DELETE };

/* sandbox.delete's "download": each file copied to the host before the
 * sandbox goes. One that fails (no such file, host folder unwritable) is
 * reported, not fatal: the delete still happens, so no sandbox is left
 * behind for a missing report. A sandbox already gone (a retried delete
 * after it went) downloads nothing. *out: {"downloaded": [to...],
 * "download_failed": [{"from", "to", "error"}]} or NULL when n = 0.
 * DBX_OK, DBX_ENOMEM, DBX_ECANCELED. */
static dbx_err download_all(dbx_act *a, dbx_driver *drv, const char *id, const transfer *t,
                            size_t n, cJSON **out) {
  *out = NULL;
  if (n == 0) return DBX_OK;
  cJSON *o = cJSON_CreateObject();
  cJSON *ok = o ? cJSON_AddArrayToObject(o, "downloaded") : NULL;
  cJSON *bad = o ? cJSON_AddArrayToObject(o, "download_failed") : NULL;
  if (ok == NULL || bad == NULL) {
    cJSON_Delete(o);
    return DBX_ENOMEM;
  }
  int gone = CALL(drv, exists, id, NULL) == DBX_DRV_NO_SANDBOX;
  for (size_t i = 0; i < n; i++) {
    if (dbx_act_cancelled(a)) {
      cJSON_Delete(o);
      return DBX_ECANCELED;
    }
    dbx_drv_err e = DBX_DRV_NO_SANDBOX;
    if (!gone) {
      /* the host folder is made when missing */
      char *dir = dbx_strdup(t[i].to), *slash = dir ? strrchr(dir, '/') : NULL;
      if (slash && slash != dir) {
        *slash = '\0';
        (void)dbx_fs_mkdirs(dir, 0755);
      }
      free(dir);
      e = CALL(drv, download, id, t[i].from, t[i].to);
    }
    if (e == DBX_DRV_NOMEM) {
      cJSON_Delete(o);
      return DBX_ENOMEM;
    }
    int added;
    if (e == DBX_DRV_OK) {
      added = cJSON_AddItemToArray(ok, cJSON_CreateString(t[i].to));
    } else {
      cJSON *f = cJSON_CreateObject();
      const char *m = gone ? "the sandbox no longer exists" : drv->ops->errmsg(drv->self);
      added = f && cJSON_AddStringToObject(f, "from", t[i].from) &&
              cJSON_AddStringToObject(f, "to", t[i].to) &&
              cJSON_AddStringToObject(f, "error", m[0] ? m : dbx_drv_strerror(e)) &&
              cJSON_AddItemToArray(bad, f);
      if (!added) cJSON_Delete(f);
      DBX_WARN(MOD, "sandbox %s: download of '%s' failed: %s", id, t[i].from,
               m[0] ? m : dbx_drv_strerror(e));
    }
    if (!added) {
      cJSON_Delete(o);
      return DBX_ENOMEM;
    }
  }
  *out = o;
  return DBX_OK;
}

static dbx_err run_life(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                        void *ud) {
  dbx_driver *drv = DRV(ud);
  enum life_op op = (enum life_op)((const act_ctx *)ud)->op;
  dbx_err rc = DBX_OK;
  transfer *downs = NULL;
  size_t ndowns = 0;
  cJSON *dl = NULL; /* the delete's result with what was downloaded */
  cJSON *in = parse_input(json, len, res);
  if (in == NULL) return DBX_OK;
  const char *id;
  if (get_sandbox(in, &id, res) != 0) goto out;
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  if (op == OP_DELETE) {
    dbx_drv_label *lb = NULL;
    size_t nl = 0;
    const char *by = NULL;
    int other = 0;
    rc = kept_by_other(a, drv, in, id, &lb, &nl, &by, &other);
    if (rc == DBX_OK && other) {
      DBX_INFO(MOD, "sandbox %s: kept by run %s, not deleted", id, by);
      cJSON *r = cJSON_CreateObject();
      if (r == NULL || !cJSON_AddFalseToObject(r, "deleted") ||
          !cJSON_AddStringToObject(r, "kept_by_run", by)) {
        cJSON_Delete(r);
        rc = DBX_ENOMEM;
      } else {
        rc = succeed(res, r);
      }
    }
    dbx_drv_labels_free(lb, nl);
    if (rc != DBX_OK || other) goto out;
    if (get_transfers(in, "download", 0, &downs, &ndowns, res) != 0) goto out;
    if ((rc = download_all(a, drv, id, downs, ndowns, &dl)) != DBX_OK) goto out;
  }
  dbx_drv_err drc = op == OP_STOP    ? CALL(drv, stop, id)
                    : op == OP_START ? CALL(drv, start, id)
                                     : CALL(drv, del, id);
  static const char *const names[] = {"sandbox.stop", "sandbox.start", "sandbox.delete"};
  if (drc == DBX_DRV_NO_SANDBOX && op == OP_DELETE) drc = DBX_DRV_OK; /* counts as done */
  if (drc != DBX_DRV_OK) {
    rc = fail_drv(res, drv, drc, names[op], id);
  } else {
    cJSON *r = dl ? dl : cJSON_CreateObject();
    dl = NULL;
    rc = succeed(res, r);
  }
out:
  cJSON_Delete(dl);
  free(downs);
  cJSON_Delete(in);
  return rc;
}

/* ------------------------------------------------------------ types */

/* Every type's run goes through here: a run that returns DBX_OK must have
 * recorded a result or a failure. The input checks record their
 * InvalidInput and return DBX_OK; when that record could not be allocated
 * (fail() left res empty), the run ran out of memory: DBX_ENOMEM, which the
 * worker reports as a retryable failure, never as an empty success. */
static dbx_err run_checked(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                           void *ud) {
  dbx_err rc = ((const act_ctx *)ud)->run(a, json, len, res, ud);
  if (rc == DBX_OK && res->result_json == NULL && res->failure_type == NULL) rc = DBX_ENOMEM;
  return rc;
}

static const struct {
  const char *name;
  run_fn run;
  int op;
} type_table[DBX_SANDBOX_NTYPES] = {
    {"sandbox.create", run_create, 0},         {"sandbox.exec", run_exec, 0},
    {"sandbox.write_file", run_write_file, 0}, {"sandbox.read_file", run_read_file, 0},
    {"sandbox.checkpoint", run_checkpoint, 0}, {"sandbox.git_commit", run_git_commit, 0},
    {"sandbox.stop", run_life, OP_STOP},       {"sandbox.start", run_life, OP_START},
    {"sandbox.delete", run_life, OP_DELETE},
};

struct dbx_sandbox_acts {
  dbx_activity_type types[DBX_SANDBOX_NTYPES];
  act_ctx ctx[DBX_SANDBOX_NTYPES];
};

dbx_err dbx_sandbox_acts_create(dbx_driver *drv, dbx_sandbox_acts **out) {
  *out = NULL;
  if (drv == NULL || drv->ops == NULL) return DBX_EINVAL;
  dbx_sandbox_acts *s = dbx_calloc(1, sizeof *s);
  if (s == NULL) return DBX_ENOMEM;
  for (size_t i = 0; i < DBX_SANDBOX_NTYPES; i++) {
    s->ctx[i] = (act_ctx){.drv = drv, .op = type_table[i].op, .run = type_table[i].run};
    s->types[i] = (dbx_activity_type){.name = type_table[i].name,
                                      .retry_class = DBX_SAFE_TO_RETRY,
                                      .run = run_checked,
                                      .ud = &s->ctx[i]};
  }
  *out = s;
  return DBX_OK;
}

void dbx_sandbox_acts_destroy(dbx_sandbox_acts *s) { free(s); }

const dbx_activity_type *dbx_sandbox_acts_type(const dbx_sandbox_acts *s, const char *name) {
  for (size_t i = 0; s && name && i < DBX_SANDBOX_NTYPES; i++)
    if (strcmp(s->types[i].name, name) == 0) return &s->types[i];
  return NULL;
}

const dbx_activity_type *dbx_sandbox_acts_at(const dbx_sandbox_acts *s, size_t i) {
  return s && i < DBX_SANDBOX_NTYPES ? &s->types[i] : NULL;
}

dbx_err dbx_sandbox_register_all(struct dbx_worker *w, const dbx_sandbox_acts *s) {
  dbx_err first = DBX_OK;
  for (size_t i = 0; i < DBX_SANDBOX_NTYPES; i++) {
    dbx_err rc = dbx_worker_register_activity(w, &s->types[i]);
    if (rc != DBX_OK) {
      DBX_ERROR(MOD, "register %s: %s", s->types[i].name, dbx_strerror(rc));
      if (first == DBX_OK) first = rc;
    }
  }
  return first;
}
