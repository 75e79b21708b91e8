/* The Daytona driver (daytona.h): every op of driver.h over Daytona's HTTP
 * API. The one include of <curl/curl.h> in the code base.
 *
 * Layout: the HTTP exchange with the reference's retry rules (req), the
 * error messages (from either error body shape, or none), the sandbox DTO
 * and state waits, then the ops in driver.h's order. Each op opens its own
 * easy handle (cli_open) over the shared connection cache. */
#define _GNU_SOURCE
#include "activities/daytona.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "base/alloc.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/util.h"

#define MOD "daytona"
#define DEFAULT_CAP ((size_t)1 << 20)
#define DEFAULT_READ_MAX ((size_t)64 << 20)
#define SOURCE_LABEL "durabox.source"
#define MAX_RETRY_AFTER_S 60
#define MAX_TRIES 8

struct dbx_daytona {
  dbx_driver drv;
  char *api_url, *auth_hdr, *target;
  int max_live, creates_per_min;
  int64_t state_wait_ms, snapshot_wait_ms, req_timeout_ms;
  CURLSH *share;
  pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
  pthread_mutex_t mu; /* quotas */
  int live;
  int64_t *create_ms; /* ring of the last creates_per_min create times */
  size_t create_next;
};

/* ---- errors (per thread) ---- */

static _Thread_local struct {
  const dbx_daytona *owner;
  char msg[768];
} tl_err;

/* A git token this thread is sending to Daytona (secret_put, for the length
 * of its requests), or NULL: redacted like the API key, since a reply to
 * that request may echo its body. */
static _Thread_local const char *tl_token;
/* The same token as it appears inside a JSON string (cJSON escapes '"',
 * '\\' and control characters), when that differs; else NULL. */
static _Thread_local const char *tl_token_json;

/* Replace every copy of secret (at least min bytes) in buf (NUL-terminated,
 * cap bytes) with mark. What no longer fits is cut, at a place where no part
 * of a copy is left: before a copy, or inside a mark. */
static void redact(char *buf, size_t cap, const char *secret, size_t min, const char *mark) {
  size_t kn = secret ? strlen(secret) : 0, mn = strlen(mark);
  if (kn == 0 || kn < min || cap == 0 || strstr(buf, secret) == NULL) return;
  char *out = malloc(cap);
  if (out == NULL) { /* nothing of buf is kept rather than the secret */
    snprintf(buf, cap, "%s", mark);
    return;
  }
  size_t o = 0;
  for (const char *p = buf; *p;) {
    const char *at = strstr(p, secret);
    size_t plain = at ? (size_t)(at - p) : strlen(p), n = plain < cap - 1 - o ? plain : cap - 1 - o;
    memcpy(out + o, p, n);
    o += n;
    if (n < plain || at == NULL) break;
    n = mn < cap - 1 - o ? mn : cap - 1 - o;
    memcpy(out + o, mark, n);
    o += n;
    if (n < mn) break;
    p = at + kn;
  }
  out[o] = '\0';
  memcpy(buf, out, o + 1);
  free(out);
}

/* Replace every copy of d's API key, and of the git token in flight, in buf
 * (NUL-terminated, cap bytes) with a mark: a reply may echo the key (an
 * error body quoting the Authorization header it refused, found by
 * tests/fuzz/fuzz_http) or the body it refused, and what is quoted from
 * replies goes to messages, logs and history. */
static void redact_key(const dbx_daytona *d, char *buf, size_t cap) {
  static const char pre[] = "Authorization: Bearer ";
  if (d && d->auth_hdr && strncmp(d->auth_hdr, pre, sizeof pre - 1) == 0)
    redact(buf, cap, d->auth_hdr + sizeof pre - 1, 4, "[redacted:DAYTONA_API_KEY]");
  /* the token whatever its length: this is only ever a reply to its request */
  redact(buf, cap, tl_token, 1, "[redacted:git token]");
  redact(buf, cap, tl_token_json, 1, "[redacted:git token]");
}

/* The length of the longest secret redact_key looks for. */
static size_t secret_max(const dbx_daytona *d) {
  const char *all[] = {d ? d->auth_hdr : NULL, tl_token, tl_token_json};
  size_t m = 0;
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    if (all[i] && strlen(all[i]) > m) m = strlen(all[i]);
  return m;
}

/* The first lim bytes of s (n bytes) as a NUL-terminated copy, redacted
 * before it is cut, so a secret that straddles the cut is never half shown;
 * bytes outside printable ASCII become '.' after redaction. malloc'd; NULL
 * on out of memory. */
static char *redacted_cut(const dbx_daytona *d, const char *s, size_t n, size_t lim) {
  size_t take = n < lim + secret_max(d) ? n : lim + secret_max(d);
  size_t cap = take * 27 + 64; /* each mark (<= 26 bytes) replaces >= 1 */
  char *b = malloc(cap);
  if (b == NULL) return NULL;
  for (size_t i = 0; i < take; i++) b[i] = s[i] ? s[i] : '.';
  b[take] = '\0';
  redact_key(d, b, cap);
  size_t len = strlen(b);
  if (len > lim) b[len = lim] = '\0';
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)b[i] < 0x20 || (unsigned char)b[i] >= 0x7f) b[i] = '.';
  return b;
}

__attribute__((format(printf, 3, 4))) static dbx_drv_err fail(dbx_daytona *d, dbx_drv_err e,
                                                              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_err.msg, sizeof tl_err.msg, fmt, ap);
  va_end(ap);
  redact_key(d, tl_err.msg, sizeof tl_err.msg);
  tl_err.owner = d;
  return e;
}

static const char *dt_errmsg(void *self) { return tl_err.owner == self ? tl_err.msg : ""; }

static int64_t now_ms(void) { return dbx_mono_ns() / 1000000; }

/* The fuzz build (tests/fuzz/fuzz_http.c) does not wait: a retry or a poll
 * costs a request there, not time; every deadline still holds. */
static void sleep_ms(int64_t ms) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  ms = 0;
#endif
  if (ms <= 0) return;
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- the HTTP client ---- */

typedef struct {
  uint8_t *p;
  size_t n, cap, max; /* max: 0 = no limit */
  int over;
} buf_t;

typedef struct {
  long status;       /* 0: no reply */
  buf_t body;
  long retry_after_s; /* -1: none */
  int waited_429;    /* times a 429's Retry-After was waited for */
} resp_t;

typedef struct {
  dbx_daytona *d;
  CURL *h;
} cli_t;

static void resp_free(resp_t *r) {
  free(r->body.p);
  memset(r, 0, sizeof *r);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
  buf_t *b = ud;
  size_t n = sz * nm;
  if (b->max && b->n + n > b->max) {
    b->over = 1;
    return 0; /* stop the transfer: CURLE_WRITE_ERROR */
  }
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 4096;
    while (nc < b->n + n + 1) nc *= 2;
    uint8_t *np = dbx_realloc(b->p, nc);
    if (np == NULL) return 0;
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
  resp_t *r = ud;
  size_t n = sz * nm;
  /* Retry-After: N, or Retry-After-<throttler>: N (the reference: accept both) */
  if (n > 12 && strncasecmp(p, "retry-after", 11) == 0) {
    const char *c = memchr(p, ':', n);
    if (c) {
      long v = strtol(c + 1, NULL, 10);
      if (v >= 0 && (r->retry_after_s < 0 || v > r->retry_after_s)) r->retry_after_s = v;
    }
  }
  return n;
}

static int cli_open(dbx_daytona *d, cli_t *c) {
  c->d = d;
  c->h = curl_easy_init();
  return c->h != NULL;
}

static void cli_close(cli_t *c) {
  if (c->h) curl_easy_cleanup(c->h);
  c->h = NULL;
}

/* "METHOD /path" of url (no scheme, host or query) into out. */
static void endpoint(const char *method, const char *url, char *out, size_t cap) {
  const char *p = strstr(url, "://");
  p = p ? strchr(p + 3, '/') : url;
  if (p == NULL) p = "/";
  size_t n = strcspn(p, "?");
  if (n > 200) n = 200;
  snprintf(out, cap, "%s %.*s", method, (int)n, p);
}

static int transport_unsent(CURLcode cc) {
  return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
         cc == CURLE_COULDNT_RESOLVE_PROXY;
}

enum { UNSAFE = 0, SAFE = 1 };

static void reply_words(const dbx_daytona *d, const resp_t *r, char *out, size_t cap);

/* One exchange, tried again as the reference allows: connection failures
 * (nothing sent) for any call; 429 after Retry-After for any call; a reply
 * lost after sending, 502/503/504 (and 500 once) only when safe. Returns OK
 * with r->status (any status: the caller decides), OUTCOME_UNKNOWN (the
 * request may have been acted on, no reply), INVALID (the reply was over
 * max), TRANSIENT (could not connect), NOMEM. */
static dbx_drv_err req(cli_t *c, const char *method, const char *url, const char *ctype,
                       const void *body, size_t blen, int safe, size_t max, resp_t *r) {
  dbx_daytona *d = c->d;
  char ep[256];
  endpoint(method, url, ep, sizeof ep);
  memset(r, 0, sizeof *r);
  int fails500 = 0;
  int64_t backoff = 250;
  for (int attempt = 1;; attempt++) {
    free(r->body.p);
    memset(&r->body, 0, sizeof r->body);
    r->body.max = max ? max + 1 : 0;
    r->status = 0;
    r->retry_after_s = -1;
    CURL *h = c->h;
    curl_easy_reset(h);
    struct curl_slist *hd = NULL, *t;
    char ct[96];
    snprintf(ct, sizeof ct, "Content-Type: %s", ctype ? ctype : "application/json");
    if ((t = curl_slist_append(hd, d->auth_hdr)) == NULL) goto nomem;
    hd = t;
    if ((t = curl_slist_append(hd, "X-Daytona-Source: durabox")) == NULL) goto nomem;
    hd = t;
    if ((t = curl_slist_append(hd, "X-Daytona-SDK-Version: " DBX_DAYTONA_SDK_VERSION)) == NULL)
      goto nomem;
    hd = t;
    if ((t = curl_slist_append(hd, "Accept: application/json, application/octet-stream")) == NULL)
      goto nomem;
    hd = t;
    if (body && (t = curl_slist_append(hd, ct)) == NULL) goto nomem;
    if (body) hd = t;
    if ((t = curl_slist_append(hd, "Expect:")) == NULL) goto nomem;
    hd = t;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_SHARE, d->share);
    curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, 25L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)d->req_timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    /* libcurl resends a request that got nothing back on a reused connection
     * (a stale keep-alive): right for calls safe to repeat, wrong for an exec
     * start, so those go on a fresh connection */
    if (!safe) curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "GET") == 0) {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    } else if (body) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
    } else if (strcmp(method, "POST") == 0) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode cc = curl_easy_perform(h);
    curl_slist_free_all(hd);
    hd = NULL;
    if (cc == CURLE_WRITE_ERROR && r->body.over)
      return fail(d, DBX_DRV_INVALID, "%s: the reply is over %zu bytes", ep, max);
    if (cc == CURLE_WRITE_ERROR) return DBX_DRV_NOMEM;
    if (cc != CURLE_OK) {
      int again = attempt < MAX_TRIES && (transport_unsent(cc) || safe);
      DBX_WARN(MOD, "%s: %s (attempt %d%s)", ep, curl_easy_strerror(cc), attempt,
               again ? ", trying again" : "");
      if (!again)
        return transport_unsent(cc)
                   ? fail(d, DBX_DRV_TRANSIENT, "%s: cannot reach Daytona: %s", ep,
                          curl_easy_strerror(cc))
                   : fail(d, DBX_DRV_OUTCOME_UNKNOWN, "%s: no reply (%s): it may have been done",
                          ep, curl_easy_strerror(cc));
      sleep_ms(backoff);
      backoff = backoff * 2 > 4000 ? 4000 : backoff * 2;
      continue;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status == 429 && attempt < MAX_TRIES) {
      long s = r->retry_after_s >= 0 ? r->retry_after_s : 1;
      if (s > MAX_RETRY_AFTER_S) s = MAX_RETRY_AFTER_S;
      DBX_WARN(MOD, "%s: 429 rate limited, waiting %ld s (Retry-After)", ep, s);
      r->waited_429++;
      sleep_ms(s * 1000 + 50);
      continue;
    }
    int gateway = r->status == 502 || r->status == 503 || r->status == 504;
    if (safe && attempt < MAX_TRIES && (gateway || (r->status == 500 && fails500++ == 0))) {
      char words[256];
      reply_words(d, r, words, sizeof words);
      DBX_WARN(MOD, "%s: HTTP %ld %s (attempt %d), trying again", ep, r->status, words, attempt);
      sleep_ms(backoff);
      backoff = backoff * 2 > 4000 ? 4000 : backoff * 2;
      continue;
    }
    return DBX_DRV_OK;
  nomem:
    curl_slist_free_all(hd);
    return DBX_DRV_NOMEM;
  }
}

/* The reply's words: "message" (a string or NestJS's array) and "code" of
 * either error body shape; an empty or non-JSON body says so. */
static void reply_words(const dbx_daytona *d, const resp_t *r, char *out, size_t cap) {
  out[0] = '\0';
  if (r->body.n == 0) {
    snprintf(out, cap, "(empty body)");
    return;
  }
  cJSON *j = cJSON_ParseWithLength((const char *)r->body.p, r->body.n);
  const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, "message") : NULL;
  const cJSON *code = j ? cJSON_GetObjectItemCaseSensitive(j, "code") : NULL;
  if (cJSON_IsArray(m)) m = cJSON_GetArrayItem(m, 0);
  /* each part is redacted before it is cut to its length (and to cap) */
  if (cJSON_IsString(m)) {
    char *mw = redacted_cut(d, m->valuestring, strlen(m->valuestring), 400);
    char *cw = cJSON_IsString(code)
                   ? redacted_cut(d, code->valuestring, strlen(code->valuestring), 60)
                   : NULL;
    snprintf(out, cap, "%s%s%s%s", mw ? mw : "(out of memory)", cw ? " [" : "", cw ? cw : "",
             cw ? "]" : "");
    free(mw);
    free(cw);
  } else {
    char *bw = redacted_cut(d, (const char *)r->body.p, r->body.n, 120);
    snprintf(out, cap, "(non-JSON body: %s)", bw ? bw : "out of memory");
    free(bw);
  }
  cJSON_Delete(j);
}

/* The default type of a status (the reference's table); callers override
 * where the endpoint says more (404 of a sandbox: NO_SANDBOX). */
static dbx_drv_err status_err(long st) {
  switch (st) {
  case 401: case 403: return DBX_DRV_AUTH; /* bad key or scope: not retryable (fail_http) */
  case 404: case 410: return DBX_DRV_NOT_FOUND;
  case 408: return DBX_DRV_OUTCOME_UNKNOWN;   /* killed, output lost: never again */
  case 409: return DBX_DRV_STATE;
  case 422: return DBX_DRV_UNSUPPORTED;
  case 429: return DBX_DRV_TRANSIENT;
  default: return st >= 500 ? DBX_DRV_TRANSIENT : DBX_DRV_FAILED;
  }
}

/* Fail with e and "what: HTTP <st> from <endpoint>: <words>". A refusal of
 * credentials (401, or a 403 that is not the daemon's FILE_ACCESS_DENIED of
 * a path) is AUTH whatever e says, its message naming whose credentials:
 * the git remote's (a /git endpoint, or the daemon's GIT_AUTH_FAILED) or
 * the API key's. */
static dbx_drv_err fail_http(cli_t *c, dbx_drv_err e, const char *what, const char *method,
                             const char *url, const resp_t *r) {
  char ep[256], words[512];
  endpoint(method, url, ep, sizeof ep);
  reply_words(c->d, r, words, sizeof words);
  if (r->status == 401 || (r->status == 403 && !strstr(words, "FILE_ACCESS_DENIED"))) {
    int git = strstr(ep, "/git/") != NULL || strstr(words, "GIT_AUTH") != NULL;
    return fail(c->d, DBX_DRV_AUTH, "%s: HTTP %ld from %s: %s (%s)", what, r->status, ep, words,
                git ? "the git remote refused the credentials: check the worker's git token "
                      "(GIT_TOKEN, GIT_USERNAME or the names the step gives)"
                    : "Daytona refused the API key: check DAYTONA_API_KEY, that it is not "
                      "revoked or expired, and its scopes");
  }
  return fail(c->d, e, "%s: HTTP %ld from %s: %s", what, r->status, ep, words);
}

static cJSON *reply_json(const resp_t *r) {
  return r->body.n ? cJSON_ParseWithLength((const char *)r->body.p, r->body.n) : NULL;
}

/* ---- names, paths, quoting ---- */

static char *esc(cli_t *c, const char *s) {
  char *e = curl_easy_escape(c->h, s, 0);
  char *o = e ? dbx_strdup(e) : NULL;
  curl_free(e);
  return o;
}

/* A workspace-relative path: not absolute, no "..". allow_root: NULL, ""
 * and "." mean the work-dir ("."). */
static dbx_drv_err check_path(dbx_daytona *d, const char *path, int allow_root,
                              const char **out) {
  if (path == NULL || path[0] == '\0' || strcmp(path, ".") == 0) {
    if (!allow_root) return fail(d, DBX_DRV_INVALID, "empty path");
    *out = ".";
    return DBX_DRV_OK;
  }
  if (path[0] == '/')
    return fail(d, DBX_DRV_PATH_REFUSED,
                "path '%.200s' is absolute: paths are relative to the workspace", path);
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return fail(d, DBX_DRV_PATH_REFUSED,
                  "path '%.200s' contains '..': it would leave the workspace", path);
    p += n;
    if (*p == '/') p++;
  }
  *out = path;
  return DBX_DRV_OK;
}

/* s in single quotes for sh, malloc'd. */
static char *sq(const char *s) {
  size_t n = 2;
  for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
  char *o = dbx_malloc(n + 1), *w = o;
  if (o == NULL) return NULL;
  *w++ = '\'';
  for (const char *p = s; *p; p++) {
    if (*p == '\'') {
      memcpy(w, "'\\''", 4);
      w += 4;
    } else {
      *w++ = *p;
    }
  }
  *w++ = '\'';
  *w = '\0';
  return o;
}

static int env_name_ok(const char *e) {
  const char *eq = strchr(e, '=');
  if (eq == NULL || eq == e) return 0;
  for (const char *p = e; p < eq; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_') || (p == e && isdigit((unsigned char)*p)))
      return 0;
  return 1;
}

/* ---- sandboxes ---- */

typedef struct {
  char id[128];
  char state[40], desired[40];
  char *toolbox;  /* toolboxProxyUrl, malloc'd */
  char *reason;   /* errorReason or NULL */
  cJSON *dto;
} sbinfo;

static void sb_clear(sbinfo *s) {
  free(s->toolbox);
  free(s->reason);
  cJSON_Delete(s->dto);
  memset(s, 0, sizeof *s);
}

static int is_gone(const char *st) {
  return strcmp(st, "destroyed") == 0 || strcmp(st, "destroying") == 0;
}

static int is_settled(const sbinfo *s) {
  static const char *const rest[] = {"started", "stopped", "error", "build_failed",
                                     "archived", "paused", "destroyed", NULL};
  for (int i = 0; rest[i]; i++)
    if (strcmp(s->state, rest[i]) == 0)
      return s->desired[0] == '\0' || strcmp(s->state, s->desired) == 0 ||
             strcmp(s->state, "error") == 0 || strcmp(s->state, "build_failed") == 0;
  return 0;
}

static char *api(dbx_daytona *d, const char *fmt, const char *a) {
  char *tail = dbx_asprintf(fmt, a);
  char *u = tail ? dbx_asprintf("%s%s", d->api_url, tail) : NULL;
  free(tail);
  return u;
}

static dbx_drv_err sb_parse(cli_t *c, const char *name, const resp_t *r, sbinfo *s) {
  memset(s, 0, sizeof *s);
  s->dto = reply_json(r);
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(s->dto, "id");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(s->dto, "state");
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(s->dto, "desiredState");
  const cJSON *tb = cJSON_GetObjectItemCaseSensitive(s->dto, "toolboxProxyUrl");
  const cJSON *er = cJSON_GetObjectItemCaseSensitive(s->dto, "errorReason");
  if (!cJSON_IsString(id) || strlen(id->valuestring) >= sizeof s->id) {
    sb_clear(s);
    return fail(c->d, DBX_DRV_FAILED, "sandbox '%s': the reply is no Sandbox (no id)", name);
  }
  snprintf(s->id, sizeof s->id, "%s", id->valuestring);
  snprintf(s->state, sizeof s->state, "%s", cJSON_IsString(st) ? st->valuestring : "unknown");
  snprintf(s->desired, sizeof s->desired, "%s", cJSON_IsString(ds) ? ds->valuestring : "");
  if (cJSON_IsString(tb)) s->toolbox = dbx_strdup(tb->valuestring);
  if (cJSON_IsString(er)) s->reason = dbx_strdup(er->valuestring);
  return DBX_DRV_OK;
}

/* GET /sandbox/{name}. NO_SANDBOX when unknown or being destroyed. */
static dbx_drv_err sb_get(cli_t *c, const char *name, sbinfo *s) {
  memset(s, 0, sizeof *s);
  char *url = api(c->d, "/sandbox/%s", name);
  resp_t r;
  if (url == NULL) return DBX_DRV_NOMEM;
  dbx_drv_err rc = req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r);
  if (rc == DBX_DRV_OK) {
    if (r.status == 404)
      rc = fail(c->d, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found (gone from Daytona)", name);
    else if (r.status != 200)
      rc = fail_http(c, status_err(r.status), name, "GET", url, &r);
    else if ((rc = sb_parse(c, name, &r, s)) == DBX_DRV_OK && is_gone(s->state)) {
      sb_clear(s);
      rc = fail(c->d, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found (being deleted)", name);
    }
  }
  resp_free(&r);
  free(url);
  return rc;
}

/* Poll until the sandbox is in state want ("started", "stopped"; NULL: any
 * settled state), with the SDK's backoff, until deadline (monotonic ms).
 * s: the last DTO (overwritten: it must hold nothing on entry). */
static dbx_drv_err sb_wait(cli_t *c, const char *name, const char *want, int64_t deadline,
                           int (*cancelled)(void *), void *ud, sbinfo *s) {
  int64_t start = now_ms(), interval = 100;
  memset(s, 0, sizeof *s);
  for (;;) {
    sb_clear(s);
    dbx_drv_err rc = sb_get(c, name, s);
    if (rc != DBX_DRV_OK) return rc;
    if (strcmp(s->state, "error") == 0 || strcmp(s->state, "build_failed") == 0)
      return fail(c->d, DBX_DRV_FAILED, "sandbox '%s' is in state %s: %.300s", name, s->state,
                  s->reason ? s->reason : "(no reason given)");
    if (want ? strcmp(s->state, want) == 0 : is_settled(s)) return DBX_DRV_OK;
    if (cancelled && cancelled(ud)) return fail(c->d, DBX_DRV_CANCELED, "sandbox '%s': cancelled", name);
    if (now_ms() >= deadline)
      return fail(c->d, DBX_DRV_TRANSIENT, "sandbox '%s' still %s (wanted %s) after %lld ms", name,
                  s->state, want ? want : "a settled state", (long long)(now_ms() - start));
    sleep_ms(interval);
    if (now_ms() - start > 5000) interval = interval * 11 / 10 > 1000 ? 1000 : interval * 11 / 10;
  }
}

/* The sandbox, started (a transition to it is waited for). STATE when it
 * is stopped (or going there). */
static dbx_drv_err sb_running(cli_t *c, const char *name, sbinfo *s) {
  if (!dbx_drv_name_valid(name))
    return fail(c->d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  dbx_drv_err rc = sb_get(c, name, s);
  if (rc != DBX_DRV_OK) return rc;
  if (!is_settled(s) && strcmp(s->desired, "started") == 0) {
    sbinfo w = {0};
    rc = sb_wait(c, name, NULL, now_ms() + c->d->state_wait_ms, NULL, NULL, &w);
    sb_clear(s);
    *s = w;
    if (rc != DBX_DRV_OK) {
      sb_clear(s);
      return rc;
    }
  }
  if (strcmp(s->state, "started") != 0 || s->toolbox == NULL) {
    rc = fail(c->d, DBX_DRV_STATE, "sandbox '%s' is %s: start it first", name, s->state);
    sb_clear(s);
  }
  return rc;
}

static char *tb(const sbinfo *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *tb(const sbinfo *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *tail = NULL;
  if (vasprintf(&tail, fmt, ap) < 0) tail = NULL;
  va_end(ap);
  char *u = tail ? dbx_asprintf("%s/%s%s", s->toolbox, s->id, tail) : NULL;
  free(tail);
  return u;
}

/* A toolbox status that says the sandbox is not (or no longer) there. */
static dbx_drv_err tb_status_err(cli_t *c, const char *name, const char *what, const char *method,
                                 const char *url, const resp_t *r, dbx_drv_err dflt) {
  char words[512];
  reply_words(c->d, r, words, sizeof words);
  if (r->status == 400 && (strstr(words, "Is the Sandbox started") || strstr(words, "container IP"))) {
    sbinfo s;
    dbx_drv_err e = sb_get(c, name, &s);
    if (e == DBX_DRV_OK) {
      e = fail(c->d, strcmp(s.state, "started") == 0 ? DBX_DRV_TRANSIENT : DBX_DRV_STATE,
               "sandbox '%s' is %s: %s", name, s.state, words);
      sb_clear(&s);
    }
    return e;
  }
  if (r->status == 404 && strstr(words, "Sandbox with ID")) {
    return fail(c->d, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found (gone from Daytona)", name);
  }
  return fail_http(c, dflt, what, method, url, r);
}

/* ---- quotas ---- */

static dbx_drv_err quota_take(dbx_daytona *d, const char *name, const dbx_drv_create_opts *o) {
  int64_t deadline = now_ms() + d->state_wait_ms;
  int logged = 0;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    int64_t t = now_ms();
    int live_ok = d->max_live <= 0 || d->live < d->max_live;
    int rate_ok = 1;
    if (d->creates_per_min > 0) {
      int64_t oldest = d->create_ms[d->create_next];
      rate_ok = oldest == 0 || t - oldest >= 60000;
    }
    if (live_ok && rate_ok) {
      d->live++;
      if (d->creates_per_min > 0) {
        d->create_ms[d->create_next] = t;
        d->create_next = (d->create_next + 1) % (size_t)d->creates_per_min;
      }
      pthread_mutex_unlock(&d->mu);
      return DBX_DRV_OK;
    }
    pthread_mutex_unlock(&d->mu);
    if (!logged++)
      DBX_INFO(MOD, "sandbox '%s': waiting for the worker's quota (%s)", name,
               live_ok ? "creates per minute" : "live sandboxes");
    if (o->cancelled && o->cancelled(o->cancelled_ud))
      return fail(d, DBX_DRV_CANCELED, "sandbox '%s': create cancelled", name);
    if (now_ms() >= deadline)
      return fail(d, DBX_DRV_TRANSIENT, "sandbox '%s': the worker's quota of %s is used up", name,
                  live_ok ? "creates per minute" : "live sandboxes");
    sleep_ms(100);
  }
}

static void quota_release(dbx_daytona *d) {
  pthread_mutex_lock(&d->mu);
  if (d->live > 0) d->live--;
  pthread_mutex_unlock(&d->mu);
}

/* ---- lifecycle ---- */

static char *source_key(const dbx_drv_create_opts *o) {
  const dbx_drv_source *src = &o->source;
  char *k = dbx_asprintf("%d\n%s\n%s\n%d", (int)src->kind,
                         src->kind == DBX_DRV_SOURCE_EMPTY || !src->location ? "" : src->location,
                         src->kind == DBX_DRV_SOURCE_GIT && src->ref ? src->ref : "",
                         (int)o->network);
  if (k == NULL) return NULL;
  char *h = dbx_asprintf("%016llx", (unsigned long long)dbx_fnv1a64(DBX_FNV1A64_OFFSET, k, strlen(k)));
  free(k);
  return h;
}

static char *create_body(dbx_daytona *d, const char *name, const dbx_drv_create_opts *o,
                         const char *key) {
  cJSON *b = cJSON_CreateObject(), *labels = cJSON_AddObjectToObject(b, "labels");
  cJSON *env = cJSON_AddObjectToObject(b, "env");
  int ok = b && labels && env && cJSON_AddStringToObject(b, "name", name) &&
           cJSON_AddStringToObject(labels, SOURCE_LABEL, key);
  for (size_t i = 0; ok && i < o->nlabels; i++)
    ok = cJSON_AddStringToObject(labels, o->labels[i].key, o->labels[i].value) != NULL;
  for (size_t i = 0; ok && o->env && o->env[i]; i++) {
    const char *eq = strchr(o->env[i], '=');
    char *k = dbx_strndup(o->env[i], (size_t)(eq - o->env[i]));
    ok = k && cJSON_AddStringToObject(env, k, eq + 1);
    free(k);
  }
  if (ok && o->source.kind == DBX_DRV_SOURCE_SNAPSHOT)
    ok = cJSON_AddStringToObject(b, "snapshot", o->source.location) != NULL;
  if (ok && o->source.kind == DBX_DRV_SOURCE_IMAGE) {
    cJSON *bi = cJSON_AddObjectToObject(b, "buildInfo");
    char *df = dbx_asprintf("FROM %s\n", o->source.location);
    ok = bi && df && cJSON_AddStringToObject(bi, "dockerfileContent", df);
    free(df);
  }
  if (ok && o->network == DBX_DRV_NET_NONE) ok = cJSON_AddBoolToObject(b, "networkBlockAll", 1) != NULL;
  if (ok && d->target) ok = cJSON_AddStringToObject(b, "target", d->target) != NULL;
  /* sizes: cores and GB as Daytona counts them; intervals in minutes */
  if (ok && o->cpu) ok = cJSON_AddNumberToObject(b, "cpu", o->cpu) != NULL;
  if (ok && o->memory_gib) ok = cJSON_AddNumberToObject(b, "memory", o->memory_gib) != NULL;
  if (ok && o->disk_gib) ok = cJSON_AddNumberToObject(b, "disk", o->disk_gib) != NULL;
  if (ok && o->auto_stop_minutes)
    ok = cJSON_AddNumberToObject(b, "autoStopInterval", *o->auto_stop_minutes) != NULL;
  if (ok && o->auto_archive_minutes)
    ok = cJSON_AddNumberToObject(b, "autoArchiveInterval", *o->auto_archive_minutes) != NULL;
  if (ok && o->auto_delete_minutes)
    ok = cJSON_AddNumberToObject(b, "autoDeleteInterval", *o->auto_delete_minutes) != NULL;
  char *s = ok ? cJSON_PrintUnformatted(b) : NULL;
  cJSON_Delete(b);
  return s;
}

static dbx_drv_err dt_start_impl(cli_t *c, const char *name);

/* git clone of a GIT source into the fresh sandbox's work-dir. */
static dbx_drv_err clone_source(cli_t *c, const char *name, const dbx_drv_source *src,
                                const dbx_drv_git_cred *cred);
/* Upload the host folder of a DIR source into the fresh sandbox's work-dir. */
static dbx_drv_err upload_source(cli_t *c, const char *name, const char *dir);
static dbx_drv_err cred_check(dbx_daytona *d, const dbx_drv_git_cred *cred, const char *url);

static dbx_drv_err check_create(dbx_daytona *d, const char *name, const dbx_drv_create_opts *o) {
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  const dbx_drv_source *src = &o->source;
  if (src->kind > DBX_DRV_SOURCE_IMAGE ||
      (src->kind != DBX_DRV_SOURCE_EMPTY && (src->location == NULL || !*src->location)))
    return fail(d, DBX_DRV_INVALID, "sandbox '%s': source needs a location", name);
  struct stat st;
  if (src->kind == DBX_DRV_SOURCE_DIR && (src->location[0] != '/' || stat(src->location, &st) != 0 ||
                                          !S_ISDIR(st.st_mode)))
    return fail(d, DBX_DRV_SOURCE_NOT_FOUND, "sandbox '%s': source folder '%.200s' not found", name,
                src->location);
  for (size_t i = 0; i < o->nlabels; i++)
    if (!dbx_drv_label_valid(&o->labels[i]) || strcmp(o->labels[i].key, SOURCE_LABEL) == 0)
      return fail(d, DBX_DRV_INVALID, "sandbox '%s': label %zu is not a valid key and value", name, i);
  for (size_t i = 0; o->env && o->env[i]; i++)
    if (!env_name_ok(o->env[i]))
      return fail(d, DBX_DRV_INVALID, "environment entry %zu is not NAME=value", i);
  if (src->kind == DBX_DRV_SOURCE_GIT) return cred_check(d, o->git_cred, src->location);
  return DBX_DRV_OK;
}

/* The existing sandbox s of name: adopt it when it has our source. */
static dbx_drv_err adopt(cli_t *c, const char *name, const char *key, sbinfo *s,
                         const dbx_drv_create_opts *o, int *adopted) {
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(s->dto, "labels");
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(labels, SOURCE_LABEL);
  if (!cJSON_IsString(l) || strcmp(l->valuestring, key) != 0)
    return fail(c->d, DBX_DRV_CONFLICT, "sandbox '%s' exists with another source", name);
  dbx_drv_err rc = DBX_DRV_OK;
  if (strcmp(s->state, "started") != 0) rc = dt_start_impl(c, name);
  if (rc == DBX_DRV_OK && o->source.kind == DBX_DRV_SOURCE_GIT) {
    /* a crash between start and clone left no repository: clone now */
    sbinfo r;
    if ((rc = sb_running(c, name, &r)) == DBX_DRV_OK) {
      char *url = tb(&r, "/git/status?path=.");
      resp_t rs;
      rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &rs) : DBX_DRV_NOMEM;
      if (rc == DBX_DRV_OK && rs.status != 200) rc = clone_source(c, name, &o->source, o->git_cred);
      if (url) resp_free(&rs);
      free(url);
      sb_clear(&r);
    }
  }
  if (rc == DBX_DRV_OK && adopted) *adopted = 1;
  return rc;
}

/* Daytona honours sizes only when it builds from an image (a snapshot
 * brings its own): tell the caller of each size the started sandbox lacks. */
static void unenforced_sizes(const sbinfo *s, const dbx_drv_create_opts *o) {
  if (o->unenforced == NULL) return;
  const char *keys[] = {"cpu", "memory", "disk"};
  uint32_t want[] = {o->cpu, o->memory_gib, o->disk_gib};
  unsigned bits[] = {DBX_DRV_UNENFORCED_CPU, DBX_DRV_UNENFORCED_MEMORY, DBX_DRV_UNENFORCED_DISK};
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s->dto, keys[i]);
    if (want[i] && (!cJSON_IsNumber(v) || v->valuedouble < (double)want[i]))
      *o->unenforced |= bits[i];
  }
}

static dbx_drv_err dt_create(void *self, const char *name, const dbx_drv_create_opts *o,
                             int *adopted) {
  dbx_daytona *d = self;
  cli_t c = {0};
  char *key = NULL, *body = NULL, *url = NULL;
  sbinfo s = {0};
  resp_t r = {0};
  if (adopted) *adopted = 0;
  dbx_drv_err rc = check_create(d, name, o);
  if (rc != DBX_DRV_OK) return rc;
  if (o->unenforced) *o->unenforced = 0;
  if (o->cancelled && o->cancelled(o->cancelled_ud))
    return fail(d, DBX_DRV_CANCELED, "sandbox '%s': create cancelled", name);
  if (!cli_open(d, &c) || (key = source_key(o)) == NULL || (url = api(d, "%s", "/sandbox")) == NULL ||
      (body = create_body(d, name, o, key)) == NULL) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  int64_t deadline = now_ms() + d->state_wait_ms;
  for (int round = 0;; round++) {
    sb_clear(&s);
    rc = sb_get(&c, name, &s);
    if (rc == DBX_DRV_OK) {
      rc = adopt(&c, name, key, &s, o, adopted);
      goto out;
    }
    if (rc != DBX_DRV_NO_SANDBOX) goto out;
    if (round >= 20 || now_ms() >= deadline) {
      rc = fail(d, DBX_DRV_TRANSIENT, "sandbox '%s': create did not settle (name taken, then gone)",
                name);
      goto out;
    }
    if ((rc = quota_take(d, name, o)) != DBX_DRV_OK) goto out;
    resp_free(&r);
    /* safe: the name makes it idempotent (a repeat answers 409, then we GET) */
    rc = req(&c, "POST", url, "application/json", body, strlen(body), SAFE, 0, &r);
    if (rc == DBX_DRV_OUTCOME_UNKNOWN) { /* the reply was lost: look it up by name */
      quota_release(d);
      DBX_WARN(MOD, "sandbox '%s': create's reply lost; looking it up by name", name);
      continue;
    }
    if (rc != DBX_DRV_OK || r.status != 200) quota_release(d);
    if (rc != DBX_DRV_OK) goto out;
    if (r.status == 409) { /* name exists (ours from a lost reply, or being deleted) */
      sbinfo w = {0};
      dbx_drv_err we = sb_wait(&c, name, NULL, deadline, o->cancelled, o->cancelled_ud, &w);
      sb_clear(&w);
      if (we == DBX_DRV_CANCELED) {
        rc = we;
        goto out;
      }
      if (we == DBX_DRV_NO_SANDBOX) sleep_ms(100 * (round + 1)); /* still being destroyed */
      continue;
    }
    if (r.status == 404 && o->source.kind == DBX_DRV_SOURCE_SNAPSHOT) {
      rc = fail_http(&c, DBX_DRV_SOURCE_NOT_FOUND, name, "POST", url, &r);
      goto out;
    }
    if (r.status != 200) {
      rc = fail_http(&c, r.status == 400 ? DBX_DRV_INVALID : status_err(r.status), name, "POST",
                     url, &r);
      goto out;
    }
    break;
  }
  /* made: wait for it to start; a cancel or failure removes it (no partial
   * sandbox for a later create to adopt) */
  sb_clear(&s);
  rc = sb_wait(&c, name, "started", deadline, o->cancelled, o->cancelled_ud, &s);
  if (rc == DBX_DRV_OK) unenforced_sizes(&s, o);
  if (rc == DBX_DRV_OK && o->source.kind == DBX_DRV_SOURCE_GIT)
    rc = clone_source(&c, name, &o->source, o->git_cred);
  if (rc == DBX_DRV_OK && o->source.kind == DBX_DRV_SOURCE_DIR)
    rc = upload_source(&c, name, o->source.location);
  if (rc != DBX_DRV_OK && rc != DBX_DRV_TRANSIENT) {
    char saved[sizeof tl_err.msg];
    snprintf(saved, sizeof saved, "%s", tl_err.msg);
    d->drv.ops->del(d, name);
    fail(d, rc, "%s", saved);
  }
out:
  sb_clear(&s);
  resp_free(&r);
  cli_close(&c);
  free(key);
  free(body);
  free(url);
  return rc;
}

static char *dt_workspace_path(void *self, const char *name) {
  (void)self;
  (void)name;
  return NULL; /* remote: no host path */
}

static dbx_drv_err dt_exists(void *self, const char *name, dbx_drv_state *state) {
  dbx_daytona *d = self;
  cli_t c;
  sbinfo s;
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = sb_get(&c, name, &s);
  if (rc == DBX_DRV_OK && state) {
    int running = strcmp(s.state, "started") == 0 ||
                  (!is_settled(&s) && strcmp(s.desired, "started") == 0);
    *state = running ? DBX_DRV_RUNNING : DBX_DRV_STOPPED;
  }
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_list(void *self, const dbx_drv_label *match, size_t nmatch, char ***names,
                           size_t *n) {
  dbx_daytona *d = self;
  cli_t c;
  *names = NULL;
  *n = 0;
  for (size_t i = 0; i < nmatch; i++)
    if (!dbx_drv_label_valid(&match[i])) return fail(d, DBX_DRV_INVALID, "label %zu is not valid", i);
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  cJSON *want = cJSON_CreateObject();
  for (size_t i = 0; want && i < nmatch; i++)
    if (!cJSON_AddStringToObject(want, match[i].key, match[i].value)) {
      cJSON_Delete(want);
      want = NULL;
    }
  char *wj = want ? cJSON_PrintUnformatted(want) : NULL, *we = wj ? esc(&c, wj) : NULL;
  cJSON_Delete(want);
  char **v = NULL, *cursor = NULL;
  size_t cnt = 0, cap = 0;
  dbx_drv_err rc = we ? DBX_DRV_OK : DBX_DRV_NOMEM;
  for (int page = 0; rc == DBX_DRV_OK && page < 1000; page++) {
    char *ce = cursor ? esc(&c, cursor) : NULL;
    char *url = dbx_asprintf("%s/sandbox?limit=200&labels=%s%s%s", d->api_url, we,
                             ce ? "&cursor=" : "", ce ? ce : "");
    free(ce);
    resp_t r;
    rc = url ? req(&c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK && r.status != 200) rc = fail_http(&c, status_err(r.status), "list", "GET", url, &r);
    cJSON *j = rc == DBX_DRV_OK ? reply_json(&r) : NULL;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items"), *it;
    if (rc == DBX_DRV_OK && !cJSON_IsArray(items))
      rc = fail(d, DBX_DRV_FAILED, "list: the reply has no items");
    const cJSON *iter = rc == DBX_DRV_OK ? items : NULL;
    cJSON_ArrayForEach(it, iter) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "state");
      if (!cJSON_IsString(nm) || (cJSON_IsString(st) && is_gone(st->valuestring))) continue;
      if (cnt + 1 >= cap) {
        size_t nc = cap ? cap * 2 : 16;
        char **nv = dbx_realloc(v, nc * sizeof *nv);
        if (nv == NULL) {
          rc = DBX_DRV_NOMEM;
          break;
        }
        v = nv;
        cap = nc;
      }
      if ((v[cnt] = dbx_strdup(nm->valuestring)) == NULL) {
        rc = DBX_DRV_NOMEM;
        break;
      }
      cnt++;
    }
    const cJSON *nx = cJSON_GetObjectItemCaseSensitive(j, "nextCursor");
    free(cursor);
    cursor = rc == DBX_DRV_OK && cJSON_IsString(nx) && nx->valuestring[0] ? dbx_strdup(nx->valuestring) : NULL;
    cJSON_Delete(j);
    if (url) resp_free(&r);
    free(url);
    if (cursor == NULL) break;
  }
  free(cursor);
  free(wj);
  free(we);
  cli_close(&c);
  if (rc != DBX_DRV_OK) {
    dbx_drv_names_free(v, cnt);
    return rc;
  }
  if (v == NULL && (v = dbx_calloc(1, sizeof *v)) == NULL) return DBX_DRV_NOMEM;
  *names = v;
  *n = cnt;
  return DBX_DRV_OK;
}

static dbx_drv_err dt_labels(void *self, const char *name, dbx_drv_label **labels, size_t *n) {
  dbx_daytona *d = self;
  cli_t c;
  sbinfo s;
  *labels = NULL;
  *n = 0;
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = sb_get(&c, name, &s);
  dbx_drv_label *v = NULL;
  size_t cnt = 0;
  if (rc == DBX_DRV_OK) {
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(s.dto, "labels"), *l;
    v = dbx_calloc((size_t)cJSON_GetArraySize(ls) + 1, sizeof *v);
    if (v == NULL) rc = DBX_DRV_NOMEM;
    const cJSON *iter = v ? ls : NULL;
    cJSON_ArrayForEach(l, iter) {
      if (!cJSON_IsString(l) || strcmp(l->string, SOURCE_LABEL) == 0) continue;
      v[cnt].key = dbx_strdup(l->string);
      v[cnt].value = dbx_strdup(l->valuestring);
      cnt++;
      if (!v[cnt - 1].key || !v[cnt - 1].value) {
        rc = DBX_DRV_NOMEM;
        break;
      }
    }
  }
  sb_clear(&s);
  cli_close(&c);
  if (rc != DBX_DRV_OK) {
    dbx_drv_labels_free(v, cnt);
    return rc;
  }
  *labels = v;
  *n = cnt;
  return DBX_DRV_OK;
}

/* POST /sandbox/{id}/{op} deciding again after a 409 (a transition in
 * progress: wait for it to settle). want: the state that ends it. */
static dbx_drv_err lifecycle(cli_t *c, const char *name, const char *op, const char *want) {
  dbx_daytona *d = c->d;
  int64_t deadline = now_ms() + d->state_wait_ms;
  for (int round = 0; round < 10; round++) {
    sbinfo s;
    dbx_drv_err rc = sb_get(c, name, &s);
    if (rc != DBX_DRV_OK) return rc;
    if (!is_settled(&s)) {
      sb_clear(&s);
      if ((rc = sb_wait(c, name, NULL, deadline, NULL, NULL, &s)) != DBX_DRV_OK) {
        sb_clear(&s);
        return rc;
      }
    }
    int done = strcmp(s.state, want) == 0;
    char *url = done ? NULL : dbx_asprintf("%s/sandbox/%s/%s", d->api_url, s.id, op);
    sb_clear(&s);
    if (done) return DBX_DRV_OK;
    if (url == NULL) return DBX_DRV_NOMEM;
    resp_t r;
    rc = req(c, "POST", url, NULL, NULL, 0, SAFE, 0, &r); /* start/stop end in one state */
    long st = rc == DBX_DRV_OK ? r.status : 0;
    if (rc == DBX_DRV_OK && st == 404)
      rc = fail(d, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found (gone from Daytona)", name);
    else if (rc == DBX_DRV_OK && st != 200 && st != 409 && st != 400)
      rc = fail_http(c, status_err(st), name, "POST", url, &r);
    free(url);
    resp_free(&r);
    if (rc != DBX_DRV_OK) return rc;
    if (st == 409 || st == 400) continue; /* in transition / not stoppable: look again */
    rc = sb_wait(c, name, want, deadline, NULL, NULL, &s);
    if (rc == DBX_DRV_NO_SANDBOX && strcmp(want, "stopped") == 0) rc = DBX_DRV_OK; /* ephemeral */
    sb_clear(&s);
    return rc;
  }
  return fail(d, DBX_DRV_TRANSIENT, "sandbox '%s': %s kept meeting a transition", name, op);
}

static dbx_drv_err dt_start_impl(cli_t *c, const char *name) {
  return lifecycle(c, name, "start", "started");
}

static dbx_drv_err dt_life(void *self, const char *name, const char *op, const char *want) {
  dbx_daytona *d = self;
  cli_t c;
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = lifecycle(&c, name, op, want);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_start(void *self, const char *name) {
  return dt_life(self, name, "start", "started");
}
static dbx_drv_err dt_stop(void *self, const char *name) {
  return dt_life(self, name, "stop", "stopped");
}

/* A sandbox's git secret (see "git" below). */
typedef struct {
  char name[40];         /* dbx_git_<16 hex> */
  char id[128];          /* the secret's id, "" until made */
  char placeholder[256]; /* what the sandbox sees */
} git_secret;
static void git_secret_name(const char *sandbox, char *out, size_t cap);
static dbx_drv_err secret_delete(cli_t *c, git_secret *g);

static dbx_drv_err dt_del(void *self, const char *name) {
  dbx_daytona *d = self;
  cli_t c;
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  char *url = api(d, "/sandbox/%s", name);
  int64_t deadline = now_ms() + d->state_wait_ms;
  dbx_drv_err rc = url ? DBX_DRV_OK : DBX_DRV_NOMEM;
  while (rc == DBX_DRV_OK) {
    resp_t r;
    rc = req(&c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r);
    long st = rc == DBX_DRV_OK ? r.status : 0;
    if (rc == DBX_DRV_OK && st != 200 && st != 404 && st != 409)
      rc = fail_http(&c, status_err(st), name, "DELETE", url, &r);
    resp_free(&r);
    if (rc != DBX_DRV_OK || st == 404) break; /* missing counts as done */
    if (st == 200) {
      quota_release(d);
      break;
    }
    sbinfo s; /* 409: another transition first */
    rc = sb_wait(&c, name, NULL, deadline, NULL, NULL, &s);
    sb_clear(&s);
    if (rc == DBX_DRV_NO_SANDBOX) rc = DBX_DRV_OK; /* gone meanwhile */
    else if (rc == DBX_DRV_OK && now_ms() >= deadline)
      rc = fail(d, DBX_DRV_TRANSIENT, "sandbox '%s': delete kept meeting a transition", name);
    if (rc == DBX_DRV_OK && now_ms() < deadline) continue;
    break;
  }
  free(url);
  if (rc == DBX_DRV_OK) { /* git credentials a crash left behind (git_secret_close) */
    git_secret g = {0};
    git_secret_name(name, g.name, sizeof g.name);
    rc = secret_delete(&c, &g);
  }
  cli_close(&c);
  return rc;
}

/* ---- toolbox helpers ---- */

/* GET a toolbox endpoint answering {"dir": ...} (work-dir, user-home-dir). */
static dbx_drv_err tb_dir(cli_t *c, const char *name, const sbinfo *s, const char *ep, char **out) {
  *out = NULL;
  char *url = tb(s, "%s", ep);
  resp_t r;
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200)
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  if (rc == DBX_DRV_OK) {
    cJSON *j = reply_json(&r);
    const cJSON *dir = cJSON_GetObjectItemCaseSensitive(j, "dir");
    if (cJSON_IsString(dir)) *out = dbx_strdup(dir->valuestring);
    else rc = fail(c->d, DBX_DRV_FAILED, "sandbox '%s': %s gave no dir", name, ep);
    if (cJSON_IsString(dir) && *out == NULL) rc = DBX_DRV_NOMEM;
    cJSON_Delete(j);
  }
  if (url) resp_free(&r);
  free(url);
  return rc;
}

/* GET /files/info: *isdir (may be NULL) or NOT_FOUND. */
static dbx_drv_err tb_info(cli_t *c, const char *name, const sbinfo *s, const char *path,
                           int *isdir, uint64_t *size) {
  char *pe = esc(c, path), *url = pe ? tb(s, "/files/info?path=%s", pe) : NULL;
  resp_t r;
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status == 404)
    rc = fail(c->d, DBX_DRV_NOT_FOUND, "path '%.200s' not found in sandbox '%s'", path, name);
  else if (rc == DBX_DRV_OK && r.status != 200)
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  if (rc == DBX_DRV_OK) {
    cJSON *j = reply_json(&r);
    if (isdir) *isdir = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "isDir"));
    const cJSON *sz = cJSON_GetObjectItemCaseSensitive(j, "size");
    if (size) *size = cJSON_IsNumber(sz) ? (uint64_t)dbx_json_int(sz->valuedouble, 0, INT64_MAX) : 0;
    cJSON_Delete(j);
  }
  if (url) resp_free(&r);
  free(url);
  free(pe);
  return rc;
}

/* POST /files/upload-v2 (raw bytes; parents created; whole-file overwrite,
 * so safe to repeat). */
static dbx_drv_err tb_put(cli_t *c, const char *name, const sbinfo *s, const char *path,
                          const void *data, size_t len) {
  char *pe = esc(c, path), *url = pe ? tb(s, "/files/upload-v2?path=%s", pe) : NULL;
  resp_t r;
  dbx_drv_err rc = url ? req(c, "POST", url, "application/octet-stream", len ? data : "", len, SAFE,
                             0, &r)
                       : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200 && r.status != 201) {
    dbx_drv_err e = r.status == 400   ? DBX_DRV_INVALID
                    : r.status == 403 ? DBX_DRV_PATH_REFUSED
                                      : status_err(r.status);
    char what[256];
    snprintf(what, sizeof what, "write '%.200s' in sandbox '%s'", path, name);
    rc = tb_status_err(c, name, what, "POST", url, &r, e);
  }
  if (url) resp_free(&r);
  free(url);
  free(pe);
  return rc;
}

/* DELETE /files (recursive); a missing path is fine. */
static dbx_drv_err tb_rm(cli_t *c, const char *name, const sbinfo *s, const char *path) {
  char *pe = esc(c, path), *url = pe ? tb(s, "/files?path=%s&recursive=true", pe) : NULL;
  resp_t r;
  dbx_drv_err rc = url ? req(c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204 && r.status != 404)
    rc = tb_status_err(c, name, name, "DELETE", url, &r, status_err(r.status));
  if (url) resp_free(&r);
  free(url);
  free(pe);
  return rc;
}

/* ---- commands ---- */

typedef struct {
  int known;      /* the session exists */
  int has_cmd;    /* it holds the command */
  int finished;
  int exit_code;
  char cid[128];
  char *command;  /* the command text (our wrapper) */
} sess_t;

/* GET /process/session/{cmd_id}. */
static dbx_drv_err sess_get(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                            sess_t *out) {
  memset(out, 0, sizeof *out);
  char *url = tb(s, "/process/session/%s", cmd_id);
  resp_t r;
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status == 200) {
    out->known = 1;
    cJSON *j = reply_json(&r);
    const cJSON *cmds = cJSON_GetObjectItemCaseSensitive(j, "commands");
    const cJSON *c0 = cJSON_GetArrayItem(cmds, 0);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c0, "id");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(c0, "exitCode");
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(c0, "command");
    if (cJSON_IsString(id) && strlen(id->valuestring) < sizeof out->cid) {
      out->has_cmd = 1;
      snprintf(out->cid, sizeof out->cid, "%s", id->valuestring);
      out->finished = cJSON_IsNumber(ec);
      out->exit_code = cJSON_IsNumber(ec) ? ec->valueint : 0;
      if (cJSON_IsString(cm) && (out->command = dbx_strdup(cm->valuestring)) == NULL)
        rc = DBX_DRV_NOMEM;
    }
    cJSON_Delete(j);
  } else if (rc == DBX_DRV_OK && r.status != 404) {
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  }
  if (url) resp_free(&r);
  free(url);
  return rc;
}

/* The command's markers under the sandbox's HOME: $HOME/.dbx/<id>.<ext>. */
static dbx_drv_err marker(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                          const char *ext, char **path) {
  char *home = NULL;
  dbx_drv_err rc = tb_dir(c, name, s, "/user-home-dir", &home);
  *path = rc == DBX_DRV_OK ? dbx_asprintf("%s/.dbx/%s.%s", home, cmd_id, ext) : NULL;
  if (rc == DBX_DRV_OK && *path == NULL) rc = DBX_DRV_NOMEM;
  free(home);
  return rc;
}

/* 1 if the marker exists, 0 if not, -1 on error (message kept). */
static int marker_there(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                        const char *ext, dbx_drv_err *err) {
  char *p = NULL;
  *err = marker(c, name, s, cmd_id, ext, &p);
  if (*err != DBX_DRV_OK) return -1;
  *err = tb_info(c, name, s, p, NULL, NULL);
  free(p);
  if (*err == DBX_DRV_NOT_FOUND) {
    *err = DBX_DRV_OK;
    return 0;
  }
  return *err == DBX_DRV_OK ? 1 : -1;
}

/* 1 if a log body may have lost bytes: U+FFFD (raw or escaped), which is
 * what the daemon's JSON makes of bytes that are no UTF-8, or an escaped
 * NUL, which ends the C string. (A U+FFFD the command printed itself only
 * costs a needless read of the raw files.) */
static int logs_lossy(const resp_t *r) {
  const char *p = (const char *)r->body.p;
  size_t n = r->body.n;
  return p && (memmem(p, n, "\xef\xbf\xbd", 3) || memmem(p, n, "\\ufffd", 6) ||
               memmem(p, n, "\\uFFFD", 6) || memmem(p, n, "\\u0000", 6));
}

/* The logs of command cid: stdout and stderr as bytes (malloc'd); *lossy
 * (may be NULL): logs_lossy of the reply. */
static dbx_drv_err sess_logs_l(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                               const char *cid, char **out, size_t *olen, char **err,
                               size_t *elen, int *lossy) {
  *out = *err = NULL;
  *olen = *elen = 0;
  if (lossy) *lossy = 0;
  char *url = tb(s, "/process/session/%s/command/%s/logs", cmd_id, cid);
  resp_t r;
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200)
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  if (rc == DBX_DRV_OK) {
    if (lossy) *lossy = logs_lossy(&r);
    cJSON *j = reply_json(&r);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(j, "stdout");
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(j, "stderr");
    if (!cJSON_IsString(so) || !cJSON_IsString(se)) {
      rc = fail(c->d, DBX_DRV_FAILED, "sandbox '%s': command logs without stdout/stderr", name);
    } else {
      *olen = strlen(so->valuestring);
      *elen = strlen(se->valuestring);
      *out = dbx_strdup(so->valuestring);
      *err = dbx_strdup(se->valuestring);
      if (!*out || !*err) rc = DBX_DRV_NOMEM;
    }
    cJSON_Delete(j);
  }
  if (url) resp_free(&r);
  free(url);
  if (rc != DBX_DRV_OK) {
    free(*out);
    free(*err);
    *out = *err = NULL;
  }
  return rc;
}

static dbx_drv_err sess_logs(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                             const char *cid, char **out, size_t *olen, char **err, size_t *elen) {
  return sess_logs_l(c, name, s, cmd_id, cid, out, olen, err, elen, NULL);
}

/* Every wrapper starts with a tag recording what exec_result needs later
 * (the caps, whether a timeout applies): ": dbx-exec t=<ms> c=<out>,<err>;" */
#define EXEC_TAG ": dbx-exec"

static void tag_parse(const char *cmd, int64_t *timeout_ms, size_t *cap_out, size_t *cap_err) {
  long long t = 0;
  unsigned long long co = 0, ce = 0;
  *timeout_ms = 0;
  *cap_out = *cap_err = DEFAULT_CAP;
  if (cmd && strncmp(cmd, EXEC_TAG, strlen(EXEC_TAG)) == 0 &&
      sscanf(cmd + strlen(EXEC_TAG), " t=%lld c=%llu,%llu;", &t, &co, &ce) == 3) {
    *timeout_ms = t;
    if (co) *cap_out = (size_t)co;
    if (ce) *cap_err = (size_t)ce;
  }
}

/* The text the session runs: source and empty the env file, cd, and run
 * the command under sh (timeout(1) when it has one). Each stream goes
 * through a FIFO to tee(1), which copies it to Daytona's log as it comes
 * and, byte for byte, to a raw file beside the env file (ID.out, ID.err):
 * the log is JSON text, where bytes that are no UTF-8 arrive as U+FFFD and
 * a NUL ends the string, so exec_result reads the raw files when the log
 * shows either. The status is the command's ((exit $s)); without mkfifo the
 * command runs as before, log only. The wrapper's own names (_dbx_*) are
 * set after the env file is sourced, so they shadow no name of the step. */
static char *wrapper(const char *envfile, const char *rawbase, const char *workdir,
                     const char *cwd, const dbx_drv_exec_opts *o) {
  char *dir = strcmp(cwd, ".") == 0 ? dbx_strdup(workdir) : dbx_asprintf("%s/%s", workdir, cwd);
  char *qf = sq(envfile), *qr = sq(rawbase), *qd = dir ? sq(dir) : NULL, *qc = sq(o->command);
  char *w = NULL;
  if (qf && qr && qd && qc) {
    char t[96] = "";
    if (o->timeout_ms > 0)
      snprintf(t, sizeof t, "timeout --foreground -k 2 %lld.%03lld ", (long long)(o->timeout_ms / 1000),
               (long long)(o->timeout_ms % 1000));
    w = dbx_asprintf(EXEC_TAG " t=%lld c=%zu,%zu; F=%s; if [ -f \"$F\" ]; then . \"$F\"; : > \"$F\"; "
                     "fi; _dbx_r=%s; for _dbx_m in \"${_dbx_r%%/*}\"/*.read; do [ -f \"$_dbx_m\" ] && "
                     "rm -f \"${_dbx_m%%.read}.raw.out\" \"${_dbx_m%%.read}.raw.err\" \"$_dbx_m\"; "
                     "done; rm -f \"$_dbx_r.out\" \"$_dbx_r.err\" \"$_dbx_r.op\" "
                     "\"$_dbx_r.ep\"; cd %s && if mkfifo \"$_dbx_r.op\" \"$_dbx_r.ep\" 2>/dev/null; "
                     "then tee \"$_dbx_r.out\" <\"$_dbx_r.op\" & tee \"$_dbx_r.err\" <\"$_dbx_r.ep\" >&2 & "
                     "%ssh -c %s </dev/null >\"$_dbx_r.op\" 2>\"$_dbx_r.ep\"; _dbx_s=$?; wait; "
                     "rm -f \"$_dbx_r.op\" \"$_dbx_r.ep\"; (exit $_dbx_s); "
                     "else %ssh -c %s </dev/null; fi",
                     (long long)o->timeout_ms, o->stdout_cap_bytes ? o->stdout_cap_bytes : DEFAULT_CAP,
                     o->stderr_cap_bytes ? o->stderr_cap_bytes : DEFAULT_CAP, qf, qr, qd, t, qc, t,
                     qc);
  }
  free(dir);
  free(qf);
  free(qr);
  free(qd);
  free(qc);
  return w;
}

/* "export NAME='value'" lines of env (NULL-terminated). */
static char *env_text(const char *const *env) {
  buf_t b = {0};
  on_body((char *)"", 1, 0, &b);
  for (size_t i = 0; env && env[i]; i++) {
    const char *eq = strchr(env[i], '=');
    char *q = sq(eq + 1);
    char *line = q ? dbx_asprintf("export %.*s=%s\n", (int)(eq - env[i]), env[i], q) : NULL;
    free(q);
    if (line == NULL || on_body(line, 1, strlen(line), &b) != strlen(line)) {
      free(line);
      free(b.p);
      return NULL;
    }
    free(line);
  }
  if (b.p == NULL) return dbx_strdup("");
  return (char *)b.p;
}

static dbx_drv_err check_cmd(dbx_daytona *d, const char *cmd_id) {
  if (!dbx_drv_name_valid(cmd_id))
    return fail(d, DBX_DRV_INVALID, "invalid command id '%.140s'", cmd_id ? cmd_id : "(null)");
  return DBX_DRV_OK;
}

/* POST the session and its runAsync command; a lost reply is settled by
 * looking at the session (the daemon lists what it received). */
static dbx_drv_err launch(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                          const char *text, int session_known) {
  dbx_daytona *d = c->d;
  dbx_drv_err rc = DBX_DRV_OK;
  resp_t r = {0};
  char *url = NULL, *body = NULL;
  if (!session_known) {
    url = tb(s, "%s", "/process/session");
    body = dbx_asprintf("{\"sessionId\":\"%s\"}", cmd_id);
    rc = url && body ? req(c, "POST", url, "application/json", body, strlen(body), SAFE, 0, &r)
                     : DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK && r.status != 201 && r.status != 200 && r.status != 409)
      rc = tb_status_err(c, name, name, "POST", url, &r, status_err(r.status));
    resp_free(&r);
    free(url);
    free(body);
    url = body = NULL;
    if (rc != DBX_DRV_OK) return rc;
  }
  cJSON *b = cJSON_CreateObject();
  if (b && cJSON_AddStringToObject(b, "command", text) && cJSON_AddBoolToObject(b, "runAsync", 1))
    body = cJSON_PrintUnformatted(b);
  cJSON_Delete(b);
  url = tb(s, "/process/session/%s/exec", cmd_id);
  for (int tries = 0; rc == DBX_DRV_OK && tries < 2; tries++) {
    rc = url && body ? req(c, "POST", url, "application/json", body, strlen(body), UNSAFE, 0, &r)
                     : DBX_DRV_NOMEM;
    long st = rc == DBX_DRV_OK ? r.status : 0;
    if (rc == DBX_DRV_OK && (st == 200 || st == 202)) break;
    if (rc == DBX_DRV_OK && st < 500)
      rc = tb_status_err(c, name, name, "POST", url, &r, status_err(st));
    resp_free(&r);
    if (rc != DBX_DRV_OK && rc != DBX_DRV_OUTCOME_UNKNOWN) break;
    /* no reply, or a gateway error: did the daemon get it? */
    sess_t ss;
    dbx_drv_err ge = sess_get(c, name, s, cmd_id, &ss);
    free(ss.command);
    if (ge != DBX_DRV_OK) {
      rc = fail(d, DBX_DRV_OUTCOME_UNKNOWN,
                "sandbox '%s': command %s: no answer to its start, and its session cannot be read",
                name, cmd_id);
      break;
    }
    if (ss.has_cmd) {
      rc = DBX_DRV_OK;
      break;
    }
    rc = DBX_DRV_OK; /* provably not received: send it again (once) */
    if (tries == 1)
      rc = fail(d, DBX_DRV_TRANSIENT, "sandbox '%s': command %s could not be started", name, cmd_id);
  }
  resp_free(&r);
  free(url);
  free(body);
  return rc;
}

static dbx_drv_err dt_exec_start(void *self, const char *name, const char *cmd_id,
                                 const dbx_drv_exec_opts *o, int *adopted) {
  dbx_daytona *d = self;
  cli_t c = {0};
  sbinfo s = {0};
  sess_t ss = {0};
  char *work = NULL, *envp = NULL, *envt = NULL, *text = NULL, *rawb = NULL;
  const char *cwd;
  if (adopted) *adopted = 0;
  if (o == NULL || o->command == NULL) return fail(d, DBX_DRV_INVALID, "no command");
  dbx_drv_err rc = check_cmd(d, cmd_id);
  if (rc == DBX_DRV_OK) rc = check_path(d, o->cwd, 1, &cwd);
  for (size_t i = 0; rc == DBX_DRV_OK && o->env && o->env[i]; i++)
    if (!env_name_ok(o->env[i]))
      rc = fail(d, DBX_DRV_INVALID, "environment entry '%.60s' is not NAME=value", o->env[i]);
  if (rc != DBX_DRV_OK) return rc;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  if ((rc = sb_running(&c, name, &s)) != DBX_DRV_OK) goto out;
  if ((rc = sess_get(&c, name, &s, cmd_id, &ss)) != DBX_DRV_OK) goto out;
  if (ss.has_cmd) { /* a retried attempt: re-attach */
    if (adopted) *adopted = 1;
    goto out;
  }
  if (!ss.known) {
    int k = marker_there(&c, name, &s, cmd_id, "killed", &rc);
    if (k < 0) goto out;
    if (k == 1) { /* cancelled earlier: it stays the killed command */
      if (adopted) *adopted = 1;
      goto out;
    }
  }
  if (strcmp(cwd, ".") != 0) {
    int isdir = 0;
    if ((rc = tb_info(&c, name, &s, cwd, &isdir, NULL)) != DBX_DRV_OK) goto out;
    if (!isdir) {
      rc = fail(d, DBX_DRV_INVALID, "cwd '%.200s' is not a folder", cwd);
      goto out;
    }
  }
  if ((rc = tb_dir(&c, name, &s, "/work-dir", &work)) != DBX_DRV_OK) goto out;
  if ((rc = marker(&c, name, &s, cmd_id, "env", &envp)) != DBX_DRV_OK) goto out;
  if ((rc = marker(&c, name, &s, cmd_id, "raw", &rawb)) != DBX_DRV_OK) goto out;
  if ((envt = env_text(o->env)) == NULL || (text = wrapper(envp, rawb, work, cwd, o)) == NULL) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  /* the env file (also the mark that we started it) never enters the command text */
  if ((rc = tb_put(&c, name, &s, envp, envt, strlen(envt))) != DBX_DRV_OK) goto out;
  rc = launch(&c, name, &s, cmd_id, text, ss.known);
out:
  if (envt) memset(envt, 0, strlen(envt)); /* it may hold secrets */
  free(envt);
  free(envp);
  free(rawb);
  free(work);
  free(text);
  free(ss.command);
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

/* The command's session and state; *killed_gone: no session but the kill
 * marker (cancelled). NOT_FOUND / LOST settled here. */
typedef struct {
  sbinfo s;
  sess_t ss;
  int killed_gone;
  int lost;
} cmdview;

static void cv_clear(cmdview *v) {
  sb_clear(&v->s);
  free(v->ss.command);
  memset(v, 0, sizeof *v);
}

static dbx_drv_err cmd_view(cli_t *c, const char *name, const char *cmd_id, cmdview *v) {
  memset(v, 0, sizeof *v);
  dbx_drv_err rc = check_cmd(c->d, cmd_id);
  if (rc == DBX_DRV_OK) rc = sb_running(c, name, &v->s);
  if (rc == DBX_DRV_OK) rc = sess_get(c, name, &v->s, cmd_id, &v->ss);
  if (rc != DBX_DRV_OK || v->ss.known) return rc;
  int k = marker_there(c, name, &v->s, cmd_id, "killed", &rc);
  if (k < 0) return rc;
  if (k == 1) {
    v->killed_gone = 1;
    return DBX_DRV_OK;
  }
  int e = marker_there(c, name, &v->s, cmd_id, "env", &rc);
  if (e < 0) return rc;
  if (e == 1) {
    v->lost = 1; /* we started it; its session is gone (a restart, a daemon crash) */
    return DBX_DRV_OK;
  }
  return fail(c->d, DBX_DRV_NOT_FOUND, "no command '%.140s' in sandbox '%s'", cmd_id, name);
}

static dbx_drv_err dt_exec_poll(void *self, const char *name, const char *cmd_id,
                                dbx_drv_cmd_status *st) {
  dbx_daytona *d = self;
  cli_t c;
  cmdview v;
  memset(st, 0, sizeof *st);
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = cmd_view(&c, name, cmd_id, &v);
  if (rc == DBX_DRV_OK) {
    if (v.killed_gone) st->state = DBX_DRV_CMD_FINISHED;
    else if (v.lost) st->state = DBX_DRV_CMD_LOST;
    else if (!v.ss.has_cmd) st->state = DBX_DRV_CMD_PENDING;
    else {
      st->state = v.ss.finished ? DBX_DRV_CMD_FINISHED : DBX_DRV_CMD_RUNNING;
      char *o = NULL, *e = NULL;
      size_t ol = 0, el = 0;
      rc = sess_logs(&c, name, &v.s, cmd_id, v.ss.cid, &o, &ol, &e, &el);
      st->stdout_size = ol;
      st->stderr_size = el;
      free(o);
      free(e);
    }
  }
  cv_clear(&v);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_exec_attach(void *self, const char *name, const char *cmd_id, int stream,
                                  uint64_t offset, void *buf, size_t cap, size_t *n) {
  dbx_daytona *d = self;
  cli_t c;
  cmdview v;
  *n = 0;
  if (stream != 1 && stream != 2) return fail(d, DBX_DRV_INVALID, "stream must be 1 or 2");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = cmd_view(&c, name, cmd_id, &v);
  if (rc == DBX_DRV_OK && v.ss.has_cmd) {
    char *o = NULL, *e = NULL;
    size_t ol = 0, el = 0;
    rc = sess_logs(&c, name, &v.s, cmd_id, v.ss.cid, &o, &ol, &e, &el);
    const char *p = stream == 1 ? o : e;
    size_t have = stream == 1 ? ol : el;
    if (rc == DBX_DRV_OK && offset < have) {
      *n = have - (size_t)offset < cap ? have - (size_t)offset : cap;
      memcpy(buf, p + offset, *n);
    }
    free(o);
    free(e);
  }
  cv_clear(&v);
  cli_close(&c);
  return rc;
}

/* What a stream of len bytes keeps under cap (driver.h "Capture"). */
static uint8_t *head_and_tail(const char *p, size_t len, size_t cap, size_t *kept, size_t *head_len) {
  size_t k = len <= cap ? len : cap;
  uint8_t *b = dbx_malloc(k + 1);
  if (b == NULL) return NULL;
  if (len <= cap) {
    if (len) memcpy(b, p, len);
    *head_len = len;
  } else {
    size_t tail = DBX_DRV_TAIL_BYTES(cap), head = cap - tail;
    memcpy(b, p, head);
    if (tail) memcpy(b + head, p + len - tail, tail);
    *head_len = head;
  }
  b[k] = 0;
  *kept = k;
  return b;
}

/* GET an absolute sandbox path's bytes (malloc'd, NUL-terminated).
 * NOT_FOUND when absent. */
static dbx_drv_err raw_get(cli_t *c, const char *name, const sbinfo *s, const char *abs,
                           char **data, size_t *len) {
  char *pe = esc(c, abs), *url = pe ? tb(s, "/files/download?path=%s", pe) : NULL;
  resp_t r = {0};
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status == 404) rc = DBX_DRV_NOT_FOUND;
  else if (rc == DBX_DRV_OK && r.status != 200)
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  if (rc == DBX_DRV_OK) {
    *data = dbx_malloc(r.body.n + 1);
    if (*data == NULL) rc = DBX_DRV_NOMEM;
    else {
      if (r.body.n) memcpy(*data, r.body.p, r.body.n);
      (*data)[r.body.n] = '\0';
      *len = r.body.n;
    }
  }
  if (url) resp_free(&r);
  free(url);
  free(pe);
  return rc;
}

/* Replace the log text of both streams by the wrapper's raw copies (the
 * bytes as the command wrote them), when both are there; a command started
 * without them (no mkfifo, an older driver) keeps its log text. */
static dbx_drv_err raw_output(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id,
                              char **o, size_t *ol, char **e, size_t *el) {
  char *base = NULL, *po = NULL, *pe = NULL, *ro = NULL, *re = NULL;
  size_t rol = 0, rel = 0;
  dbx_drv_err rc = marker(c, name, s, cmd_id, "raw", &base);
  if (rc == DBX_DRV_OK) {
    po = dbx_asprintf("%s.out", base);
    pe = dbx_asprintf("%s.err", base);
    if (!po || !pe) rc = DBX_DRV_NOMEM;
  }
  if (rc == DBX_DRV_OK) rc = raw_get(c, name, s, po, &ro, &rol);
  if (rc == DBX_DRV_OK) rc = raw_get(c, name, s, pe, &re, &rel);
  if (rc == DBX_DRV_OK) {
    free(*o);
    free(*e);
    *o = ro, *ol = rol, *e = re, *el = rel;
    ro = re = NULL;
  } else if (rc == DBX_DRV_NOT_FOUND) {
    rc = DBX_DRV_OK;
  }
  free(ro);
  free(re);
  free(po);
  free(pe);
  free(base);
  return rc;
}

/* The raw copies once the result is made from them or needs them not:
 * lossy 0 (the log alone gave the result, as it would to a retry): they
 * are removed now; lossy 1 (the result came from them, and a retry after a
 * crash before the journal would need them again): a ".read" mark is left,
 * and the next command started in this sandbox removes them (a workflow
 * starts its next step only once this one's result is in its history),
 * as the sandbox's delete does. Failures only leave files behind. */
static void raw_done(cli_t *c, const char *name, const sbinfo *s, const char *cmd_id, int lossy) {
  char *base = NULL, *po = NULL, *pe = NULL, *mk = NULL;
  dbx_drv_err rc = marker(c, name, s, cmd_id, lossy ? "read" : "raw", lossy ? &mk : &base);
  if (rc == DBX_DRV_OK && lossy) {
    rc = tb_put(c, name, s, mk, "", 0);
  } else if (rc == DBX_DRV_OK) {
    po = dbx_asprintf("%s.out", base);
    pe = dbx_asprintf("%s.err", base);
    if (po && pe && (rc = tb_rm(c, name, s, po)) == DBX_DRV_OK) rc = tb_rm(c, name, s, pe);
  }
  if (rc != DBX_DRV_OK)
    DBX_DEBUG(MOD, "sandbox %s: command %s: raw output copies not cleared: %s", name, cmd_id,
              tl_err.msg);
  free(base);
  free(po);
  free(pe);
  free(mk);
}

static dbx_drv_err dt_exec_result(void *self, const char *name, const char *cmd_id,
                                  dbx_drv_exec_result *res) {
  dbx_daytona *d = self;
  cli_t c;
  cmdview v;
  memset(res, 0, sizeof *res);
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = cmd_view(&c, name, cmd_id, &v);
  char *o = NULL, *e = NULL;
  size_t ol = 0, el = 0;
  if (rc == DBX_DRV_OK && v.killed_gone) {
    res->exit_code = 137, res->signal = 9, res->killed = 1;
  } else if (rc == DBX_DRV_OK && (v.lost || !v.ss.finished)) {
    rc = fail(d, DBX_DRV_STATE, "command '%s' has not finished", cmd_id);
  } else if (rc == DBX_DRV_OK) {
    int lossy = 0;
    rc = sess_logs_l(&c, name, &v.s, cmd_id, v.ss.cid, &o, &ol, &e, &el, &lossy);
    if (rc == DBX_DRV_OK && lossy) rc = raw_output(&c, name, &v.s, cmd_id, &o, &ol, &e, &el);
    if (rc == DBX_DRV_OK) raw_done(&c, name, &v.s, cmd_id, lossy);
    res->exit_code = v.ss.exit_code;
    res->signal = v.ss.exit_code > 128 && v.ss.exit_code < 160 ? v.ss.exit_code - 128 : 0;
  }
  int64_t tmo = 0;
  size_t c1 = DEFAULT_CAP, c2 = DEFAULT_CAP;
  tag_parse(v.ss.command, &tmo, &c1, &c2);
  if (rc == DBX_DRV_OK && !v.killed_gone) res->timed_out = v.ss.exit_code == 124 && tmo > 0;
  if (rc == DBX_DRV_OK) {
    res->stdout_total = ol;
    res->stderr_total = el;
    res->stdout_buf = head_and_tail(o ? o : "", ol, c1, &res->stdout_len, &res->stdout_head_len);
    res->stderr_buf = head_and_tail(e ? e : "", el, c2, &res->stderr_len, &res->stderr_head_len);
    res->stdout_truncated = ol > res->stdout_len;
    res->stderr_truncated = el > res->stderr_len;
    if (!res->stdout_buf || !res->stderr_buf) rc = DBX_DRV_NOMEM;
  }
  free(o);
  free(e);
  cv_clear(&v);
  cli_close(&c);
  if (rc != DBX_DRV_OK) dbx_drv_exec_result_cleanup(res);
  return rc;
}

static dbx_drv_err dt_exec_cancel(void *self, const char *name, const char *cmd_id) {
  dbx_daytona *d = self;
  cli_t c;
  cmdview v;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = cmd_view(&c, name, cmd_id, &v);
  if (rc == DBX_DRV_NOT_FOUND) rc = DBX_DRV_OK;
  else if (rc == DBX_DRV_OK && v.ss.known && !(v.ss.has_cmd && v.ss.finished)) {
    char *km = NULL, *url = NULL;
    rc = marker(&c, name, &v.s, cmd_id, "killed", &km);
    if (rc == DBX_DRV_OK) rc = tb_put(&c, name, &v.s, km, "", 0);
    if (rc == DBX_DRV_OK && (url = tb(&v.s, "/process/session/%s", cmd_id)) == NULL) rc = DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK) {
      resp_t r;
      rc = req(&c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r);
      if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204 && r.status != 404)
        rc = tb_status_err(&c, name, name, "DELETE", url, &r, status_err(r.status));
      resp_free(&r);
    }
    free(km);
    free(url);
  }
  cv_clear(&v);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_exec_forget(void *self, const char *name, const char *cmd_id) {
  dbx_daytona *d = self;
  cli_t c;
  cmdview v;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = cmd_view(&c, name, cmd_id, &v);
  if (rc == DBX_DRV_NOT_FOUND) {
    rc = DBX_DRV_OK;
  } else if (rc == DBX_DRV_OK && v.ss.has_cmd && !v.ss.finished) {
    rc = fail(d, DBX_DRV_STATE, "command '%s' is still running", cmd_id);
  } else if (rc == DBX_DRV_OK) {
    char *url = tb(&v.s, "/process/session/%s", cmd_id), *km = NULL, *em = NULL;
    resp_t r = {0};
    rc = url ? req(&c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204 && r.status != 404)
      rc = tb_status_err(&c, name, name, "DELETE", url, &r, status_err(r.status));
    if (rc == DBX_DRV_OK) rc = marker(&c, name, &v.s, cmd_id, "killed", &km);
    if (rc == DBX_DRV_OK) rc = tb_rm(&c, name, &v.s, km);
    if (rc == DBX_DRV_OK) rc = marker(&c, name, &v.s, cmd_id, "env", &em);
    if (rc == DBX_DRV_OK) rc = tb_rm(&c, name, &v.s, em);
    free(em);
    em = NULL;
    if (rc == DBX_DRV_OK) rc = marker(&c, name, &v.s, cmd_id, "read", &em);
    if (rc == DBX_DRV_OK) rc = tb_rm(&c, name, &v.s, em);
    resp_free(&r);
    free(url);
    free(km);
    free(em);
  }
  cv_clear(&v);
  cli_close(&c);
  return rc;
}

/* ---- files ---- */

static dbx_drv_err read_bytes(cli_t *c, const char *name, const char *path, size_t max,
                              uint8_t **data, size_t *len) {
  sbinfo s;
  const char *p;
  dbx_drv_err rc = check_path(c->d, path, 0, &p);
  if (rc == DBX_DRV_OK) rc = sb_running(c, name, &s);
  if (rc != DBX_DRV_OK) return rc;
  char *pe = esc(c, p), *url = pe ? tb(&s, "/files/download?path=%s", pe) : NULL;
  resp_t r = {0};
  rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, max, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_INVALID)
    rc = fail(c->d, DBX_DRV_INVALID, "file '%.200s' has more than the limit of %zu bytes", path, max);
  else if (rc == DBX_DRV_OK && r.status == 404)
    rc = fail(c->d, DBX_DRV_NOT_FOUND, "path '%.200s' not found in sandbox '%s'", path, name);
  else if (rc == DBX_DRV_OK && r.status == 400) {
    int isdir = 0;
    rc = tb_info(c, name, &s, p, &isdir, NULL);
    if (rc == DBX_DRV_OK)
      rc = isdir ? fail(c->d, DBX_DRV_INVALID, "path '%.200s' is not a regular file", path)
                 : tb_status_err(c, name, name, "GET", url, &r, DBX_DRV_FAILED);
  } else if (rc == DBX_DRV_OK && r.status == 403) {
    rc = fail_http(c, DBX_DRV_PATH_REFUSED, name, "GET", url, &r);
  } else if (rc == DBX_DRV_OK && r.status != 200) {
    rc = tb_status_err(c, name, name, "GET", url, &r, status_err(r.status));
  }
  if (rc == DBX_DRV_OK) {
    if (r.body.p == NULL && (r.body.p = dbx_calloc(1, 1)) == NULL) rc = DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK) {
      *data = r.body.p;
      *len = r.body.n;
      r.body.p = NULL;
    }
  }
  resp_free(&r);
  free(url);
  free(pe);
  sb_clear(&s);
  return rc;
}

static dbx_drv_err dt_file_read(void *self, const char *name, const char *path, size_t max_bytes,
                                uint8_t **data, size_t *len) {
  dbx_daytona *d = self;
  cli_t c;
  *data = NULL;
  *len = 0;
  if (max_bytes == 0) max_bytes = DEFAULT_READ_MAX;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = read_bytes(&c, name, path, max_bytes, data, len);
  cli_close(&c);
  return rc;
}

static dbx_drv_err write_bytes(dbx_daytona *d, const char *name, const char *path,
                               const void *data, size_t len) {
  cli_t c;
  sbinfo s;
  const char *p;
  dbx_drv_err rc = check_path(d, path, 0, &p);
  if (rc != DBX_DRV_OK) return rc;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  rc = sb_running(&c, name, &s);
  if (rc == DBX_DRV_OK) rc = tb_put(&c, name, &s, p, data, len);
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_file_write(void *self, const char *name, const char *path,
                                 const void *data, size_t len) {
  return write_bytes(self, name, path, data, len);
}

static dbx_drv_err dt_upload(void *self, const char *name, const char *host_path,
                             const char *path) {
  dbx_daytona *d = self;
  char why[512], *buf = NULL;
  size_t n = 0;
  dbx_drv_err rc = dbx_drv_host_read(host_path, &buf, &n, why, sizeof why);
  if (rc != DBX_DRV_OK) return why[0] ? fail(d, rc, "%s", why) : rc;
  rc = write_bytes(d, name, path, buf, n);
  free(buf);
  return rc;
}

static dbx_drv_err dt_download(void *self, const char *name, const char *path,
                               const char *host_path) {
  dbx_daytona *d = self;
  char why[512] = ""; /* read below also when the file read failed */
  uint8_t *data = NULL;
  size_t len = 0;
  if (!dbx_drv_host_path_check(host_path, why, sizeof why)) return fail(d, DBX_DRV_INVALID, "%s", why);
  dbx_drv_err rc = dt_file_read(self, name, path, (size_t)4 << 30, &data, &len);
  if (rc == DBX_DRV_OK) rc = dbx_drv_host_write(host_path, data, len, why, sizeof why);
  if (rc != DBX_DRV_OK && why[0]) rc = fail(d, rc, "%s", why);
  free(data);
  return rc;
}

/* ---- git ---- */

/* Git credentials travel as a Daytona secret (reference section 5), never
 * as themselves: the driver stores the token as an organization secret
 * named after the sandbox (git_secret_name), restricted to the remote's
 * host, mounts it on the sandbox (PUT /sandbox/{id}/secrets) and sends the
 * secret's placeholder (dtn_secret_...) in the password field of /git/clone
 * or /git/push; Daytona's egress proxy swaps the value in on the way to that
 * host only. After the call the secret is unmounted and deleted (and a
 * sandbox delete deletes one a crash left). The token is in one request
 * body alone, POST or PATCH /secret, which is wiped before it is freed. */

/* The deterministic secret name of a sandbox: a retried call finds the one
 * it made (409 on POST: it is looked up and its value and hosts updated). */
static void git_secret_name(const char *sandbox, char *out, size_t cap) {
  uint64_t h = dbx_fnv1a64(DBX_FNV1A64_OFFSET, sandbox, strlen(sandbox));
  snprintf(out, cap, "dbx_git_%016llx", (unsigned long long)h);
}

/* The host of an http(s) URL (no userinfo, port or brackets), lower case,
 * or "". */
static void url_host(const char *url, char *out, size_t cap) {
  out[0] = '\0';
  const char *p = strstr(url, "://");
  if (p == NULL) return;
  p += 3;
  size_t n = strcspn(p, "/?#");
  const char *at = memchr(p, '@', n);
  if (at) n -= (size_t)(at + 1 - p), p = at + 1;
  size_t hl;
  if (n > 0 && p[0] == '[') {
    const char *rb = memchr(p, ']', n);
    if (rb == NULL) return;
    p++, hl = (size_t)(rb - p);
  } else {
    const char *colon = memchr(p, ':', n);
    hl = colon ? (size_t)(colon - p) : n;
  }
  if (hl == 0 || hl >= cap) return;
  for (size_t i = 0; i < hl; i++) out[i] = (char)tolower((unsigned char)p[i]);
  out[hl] = '\0';
}

/* The secret record's id and placeholder from a Secret DTO. */
static dbx_drv_err secret_parse(cli_t *c, const resp_t *r, git_secret *g) {
  cJSON *j = reply_json(r);
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(j, "placeholder");
  dbx_drv_err rc = DBX_DRV_OK;
  if (!cJSON_IsString(id) || !cJSON_IsString(ph) || strlen(id->valuestring) >= sizeof g->id ||
      strlen(ph->valuestring) >= sizeof g->placeholder || ph->valuestring[0] == '\0')
    rc = fail(c->d, DBX_DRV_FAILED, "secret '%s': the reply is no Secret (id, placeholder)",
              g->name);
  else {
    snprintf(g->id, sizeof g->id, "%s", id->valuestring);
    snprintf(g->placeholder, sizeof g->placeholder, "%s", ph->valuestring);
  }
  cJSON_Delete(j);
  return rc;
}

/* The id of the secret named g->name into g->id ("" when there is none). */
static dbx_drv_err secret_find(cli_t *c, git_secret *g) {
  char *ne = esc(c, g->name), *url = ne ? api(c->d, "/secret/paginated?name=%s", ne) : NULL;
  resp_t r = {0};
  g->id[0] = '\0';
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200)
    rc = fail_http(c, status_err(r.status), g->name, "GET", url, &r);
  if (rc == DBX_DRV_OK) {
    cJSON *j = reply_json(&r), *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "items")) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
      if (cJSON_IsString(nm) && strcmp(nm->valuestring, g->name) == 0 && cJSON_IsString(id) &&
          strlen(id->valuestring) < sizeof g->id)
        snprintf(g->id, sizeof g->id, "%s", id->valuestring);
    }
    cJSON_Delete(j);
  }
  if (url) resp_free(&r);
  free(url);
  free(ne);
  return rc;
}

/* POST /secret {name, value, hosts:[host]}; 409 (a retry, or a crash left
 * it): PATCH the existing one's value and hosts. The body is wiped. */
static dbx_drv_err secret_put(cli_t *c, git_secret *g, const char *host, const char *token) {
  cJSON *b = cJSON_CreateObject(), *hosts = cJSON_AddArrayToObject(b, "hosts");
  int ok = b && hosts && cJSON_AddItemToArray(hosts, cJSON_CreateString(host)) &&
           cJSON_AddStringToObject(b, "value", token) &&
           cJSON_AddStringToObject(b, "description", "durabox: git credentials of one sandbox");
  char *patch = ok ? cJSON_PrintUnformatted(b) : NULL;
  ok = patch && cJSON_AddStringToObject(b, "name", g->name);
  char *post = ok ? cJSON_PrintUnformatted(b) : NULL;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, "value");
  if (cJSON_IsString(v)) memset(v->valuestring, 0, strlen(v->valuestring));
  cJSON_Delete(b);
  char *url = api(c->d, "%s", "/secret"), *purl = NULL;
  resp_t r = {0};
  /* a reply may quote the body: the token is redacted from what it says,
   * as itself and as the body wrote it */
  cJSON *ts = cJSON_CreateString(token);
  char *tj = ts ? cJSON_PrintUnformatted(ts) : NULL;
  cJSON_Delete(ts);
  size_t tjn = tj ? strlen(tj) : 0;
  if (tjn >= 2) memmove(tj, tj + 1, tjn - 2), tj[tjn - 2] = '\0'; /* the quotes off */
  tl_token = token;
  tl_token_json = tj && strcmp(tj, token) != 0 ? tj : NULL;
  dbx_drv_err rc = post && url ? req(c, "POST", url, "application/json", post, strlen(post), SAFE,
                                     0, &r)
                               : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && (r.status == 200 || r.status == 201)) {
    rc = secret_parse(c, &r, g);
  } else if (rc == DBX_DRV_OK && r.status == 409) {
    resp_free(&r);
    rc = secret_find(c, g);
    if (rc == DBX_DRV_OK && g->id[0] == '\0')
      rc = fail(c->d, DBX_DRV_TRANSIENT, "secret '%s': 409 on create, yet not listed", g->name);
    if (rc == DBX_DRV_OK && (purl = api(c->d, "/secret/%s", g->id)) == NULL) rc = DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK)
      rc = req(c, "PATCH", purl, "application/json", patch, strlen(patch), SAFE, 0, &r);
    if (rc == DBX_DRV_OK && r.status != 200)
      rc = fail_http(c, status_err(r.status), g->name, "PATCH", purl, &r);
    if (rc == DBX_DRV_OK) rc = secret_parse(c, &r, g);
  } else if (rc == DBX_DRV_OK) {
    rc = fail_http(c, status_err(r.status), g->name, "POST", url, &r);
  }
  tl_token = tl_token_json = NULL;
  if (tj) memset(tj, 0, strlen(tj));
  free(tj);
  resp_free(&r);
  if (post) memset(post, 0, strlen(post));
  if (patch) memset(patch, 0, strlen(patch));
  free(post);
  free(patch);
  free(url);
  free(purl);
  return rc;
}

/* PUT /sandbox/{id}/secrets: the set is g alone (mount) or empty (g NULL). */
static dbx_drv_err secret_mount(cli_t *c, const char *name, const sbinfo *s, const git_secret *g) {
  char *url = api(c->d, "/sandbox/%s/secrets", s->id);
  char *body = g ? dbx_asprintf("{\"secrets\":[{\"DBX_GIT_TOKEN\":\"%s\"}]}", g->name)
                 : dbx_strdup("{\"secrets\":[]}");
  resp_t r = {0};
  dbx_drv_err rc = url && body ? req(c, "PUT", url, "application/json", body, strlen(body), SAFE,
                                     0, &r)
                               : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204)
    rc = fail_http(c, status_err(r.status), name, "PUT", url, &r);
  resp_free(&r);
  free(url);
  free(body);
  return rc;
}

/* DELETE /secret/{id} of g (looked up by name when g->id is ""); a missing
 * one counts as done. */
static dbx_drv_err secret_delete(cli_t *c, git_secret *g) {
  dbx_drv_err rc = g->id[0] ? DBX_DRV_OK : secret_find(c, g);
  if (rc != DBX_DRV_OK || g->id[0] == '\0') return rc;
  char *url = api(c->d, "/secret/%s", g->id);
  resp_t r = {0};
  rc = url ? req(c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204 && r.status != 404)
    rc = fail_http(c, status_err(r.status), g->name, "DELETE", url, &r);
  resp_free(&r);
  free(url);
  return rc;
}

/* Make and mount the sandbox's git secret for url's host (cred NULL:
 * nothing, g->placeholder ""). */
static dbx_drv_err git_secret_open(cli_t *c, const char *name, const sbinfo *s, const char *url,
                                   const dbx_drv_git_cred *cred, git_secret *g) {
  memset(g, 0, sizeof *g);
  if (cred == NULL) return DBX_DRV_OK;
  char host[256];
  url_host(url, host, sizeof host);
  if (host[0] == '\0')
    return fail(c->d, DBX_DRV_INVALID, "git credentials: no host in the URL '%.200s'", url);
  git_secret_name(name, g->name, sizeof g->name);
  dbx_drv_err rc = secret_put(c, g, host, cred->password);
  if (rc == DBX_DRV_OK) rc = secret_mount(c, name, s, g);
  return rc;
}

/* Unmount and delete what git_secret_open made; rc: the git call's result,
 * kept unless it succeeded and the clean-up did not (then the clean-up's
 * error, so the retried call cleans up). */
static dbx_drv_err git_secret_close(cli_t *c, const char *name, const sbinfo *s, git_secret *g,
                                    dbx_drv_err rc) {
  if (g->name[0] == '\0') return rc;
  char keep[sizeof tl_err.msg];
  snprintf(keep, sizeof keep, "%s", tl_err.msg);
  dbx_drv_err e = secret_mount(c, name, s, NULL);
  dbx_drv_err e2 = secret_delete(c, g);
  if (e == DBX_DRV_OK) e = e2;
  if (rc != DBX_DRV_OK) snprintf(tl_err.msg, sizeof tl_err.msg, "%s", keep);
  memset(g, 0, sizeof *g);
  return rc != DBX_DRV_OK ? rc : e;
}

/* Add the username and the secret's placeholder (never the token) to a
 * /git/clone or /git/push body; cred NULL: nothing. 0: out of memory. */
static int cred_add(cJSON *b, const dbx_drv_git_cred *cred, const git_secret *g) {
  if (cred == NULL) return 1;
  const char *u = cred->username && *cred->username ? cred->username : "x-access-token";
  return cJSON_AddStringToObject(b, "username", u) != NULL &&
         cJSON_AddStringToObject(b, "password", g->placeholder) != NULL;
}

/* Scrub any copy of the token from this thread's message. */
static void cred_wipe(const dbx_drv_git_cred *cred) {
  const char *p = cred ? cred->password : NULL;
  size_t n = p ? strlen(p) : 0;
  for (char *m = n ? strstr(tl_err.msg, p) : NULL; m; m = strstr(m, p)) memset(m, '*', n);
}

/* Credentials go only with an http(s) URL the operation names (driver.h
 * dbx_drv_git_cred), never with a remote name the sandbox's config resolves. */
static dbx_drv_err cred_check(dbx_daytona *d, const dbx_drv_git_cred *cred, const char *url) {
  if (cred == NULL) return DBX_DRV_OK;
  if (cred->password == NULL || *cred->password == '\0')
    return fail(d, DBX_DRV_INVALID, "git credentials without a password (token)");
  if (url == NULL || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0))
    return fail(d, DBX_DRV_INVALID, "git credentials need the remote's http(s) URL, not '%.200s'",
                url ? url : "origin");
  return DBX_DRV_OK;
}

/* POST a /git endpoint with a JSON body; 200 gives *reply (may be NULL).
 * The printed body is wiped before it is freed (it may hold a password). */
static dbx_drv_err git_post(cli_t *c, const char *name, const sbinfo *s, const char *ep,
                            cJSON *body, const char *what, cJSON **reply) {
  char *b = body ? cJSON_PrintUnformatted(body) : NULL;
  char *url = tb(s, "/git/%s", ep);
  resp_t r;
  if (reply) *reply = NULL;
  dbx_drv_err rc = b && url ? req(c, "POST", url, "application/json", b, strlen(b), UNSAFE, 0, &r)
                            : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status == 404) {
    char words[512];
    reply_words(c->d, &r, words, sizeof words);
    rc = strstr(words, "FILE_NOT_FOUND") || strstr(words, "path not found")
             ? fail(c->d, DBX_DRV_NOT_FOUND, "%s: %s", what, words)
             : fail_http(c, DBX_DRV_FAILED, what, "POST", url, &r);
  } else if (rc == DBX_DRV_OK && r.status != 200) {
    rc = tb_status_err(c, name, what, "POST", url, &r,
                       r.status >= 500 || r.status == 429 ? DBX_DRV_TRANSIENT : DBX_DRV_FAILED);
  }
  if (rc == DBX_DRV_OK && reply) *reply = reply_json(&r);
  if (b && url) resp_free(&r);
  if (b) memset(b, 0, strlen(b));
  free(b);
  free(url);
  return rc;
}

static dbx_drv_err clone_into(cli_t *c, const char *name, const sbinfo *s, const char *url,
                              const char *path, const char *ref, const dbx_drv_git_cred *cred) {
  git_secret g;
  dbx_drv_err rc = git_secret_open(c, name, s, url, cred, &g);
  cJSON *b = rc == DBX_DRV_OK ? cJSON_CreateObject() : NULL;
  if (rc == DBX_DRV_OK &&
      (!b || !cJSON_AddStringToObject(b, "url", url) || !cJSON_AddStringToObject(b, "path", path) ||
       (ref && *ref && !cJSON_AddStringToObject(b, "branch", ref)) || !cred_add(b, cred, &g)))
    rc = DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK) {
    char what[300];
    snprintf(what, sizeof what, "git clone in sandbox '%s' failed", name);
    rc = git_post(c, name, s, "clone", b, what, NULL);
    if (rc == DBX_DRV_NOT_FOUND) rc = DBX_DRV_FAILED; /* the message says what */
  }
  cJSON_Delete(b);
  rc = git_secret_close(c, name, s, &g, rc);
  cred_wipe(cred);
  return rc;
}

static dbx_drv_err clone_source(cli_t *c, const char *name, const dbx_drv_source *src,
                                const dbx_drv_git_cred *cred) {
  sbinfo s;
  dbx_drv_err rc = sb_running(c, name, &s);
  if (rc == DBX_DRV_OK) rc = clone_into(c, name, &s, src->location, ".", src->ref, cred);
  if (rc == DBX_DRV_AUTH) { /* the message says whose */
    sb_clear(&s);
    return rc;
  }
  if (rc == DBX_DRV_FAILED) rc = DBX_DRV_SOURCE_NOT_FOUND; /* the message says what */
  sb_clear(&s);
  return rc;
}

/* Every regular file under host folder dir (symbolic links are not
 * followed) to the same relative path under rel ("" = the work-dir). */
static dbx_drv_err upload_tree(cli_t *c, const char *name, const sbinfo *s, const char *dir,
                               const char *rel, int depth) {
  if (depth > 64) return fail(c->d, DBX_DRV_INVALID, "source folder '%.200s' is too deep", dir);
  DIR *dh = opendir(dir);
  if (dh == NULL) return fail(c->d, DBX_DRV_SOURCE_NOT_FOUND, "source folder '%.200s': %s", dir, strerror(errno));
  dbx_drv_err rc = DBX_DRV_OK;
  struct dirent *e;
  while (rc == DBX_DRV_OK && (e = readdir(dh)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *hp = dbx_asprintf("%s/%s", dir, e->d_name);
    char *rp = rel[0] ? dbx_asprintf("%s/%s", rel, e->d_name) : dbx_strdup(e->d_name);
    struct stat st;
    if (hp == NULL || rp == NULL) rc = DBX_DRV_NOMEM;
    else if (lstat(hp, &st) != 0) rc = fail(c->d, DBX_DRV_FAILED, "'%.200s': %s", hp, strerror(errno));
    else if (S_ISDIR(st.st_mode)) rc = upload_tree(c, name, s, hp, rp, depth + 1);
    else if (S_ISREG(st.st_mode)) {
      char *data = NULL;
      size_t n = 0;
      dbx_err fe = dbx_fs_read_all(hp, &data, &n);
      if (fe == DBX_ENOMEM) rc = DBX_DRV_NOMEM;
      else if (fe != DBX_OK) rc = fail(c->d, DBX_DRV_FAILED, "cannot read '%.200s': %s", hp, strerror(errno));
      else rc = tb_put(c, name, s, rp, data, n);
      free(data);
    }
    free(hp);
    free(rp);
  }
  closedir(dh);
  return rc;
}

static dbx_drv_err upload_source(cli_t *c, const char *name, const char *dir) {
  sbinfo s;
  dbx_drv_err rc = sb_running(c, name, &s);
  if (rc == DBX_DRV_OK) rc = upload_tree(c, name, &s, dir, "", 0);
  sb_clear(&s);
  return rc;
}

static dbx_drv_err dt_git_clone_cred(void *self, const char *name, const char *url,
                                     const char *path, const char *ref,
                                     const dbx_drv_git_cred *cred) {
  dbx_daytona *d = self;
  cli_t c;
  sbinfo s;
  const char *p;
  if (url == NULL || *url == '\0') return fail(d, DBX_DRV_INVALID, "git clone needs a repository path or URL");
  dbx_drv_err rc = cred_check(d, cred, url);
  if (rc == DBX_DRV_OK) rc = check_path(d, path, 0, &p);
  if (rc != DBX_DRV_OK) return rc;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  rc = sb_running(&c, name, &s);
  if (rc == DBX_DRV_OK) rc = tb_rm(&c, name, &s, p); /* a partial or earlier target */
  if (rc == DBX_DRV_OK) rc = clone_into(&c, name, &s, url, p, ref, cred);
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_git_clone(void *self, const char *name, const char *url, const char *path,
                                const char *ref) {
  return dt_git_clone_cred(self, name, url, path, ref, NULL);
}

/* "Name <email>" -> name, email (malloc'd). */
static int split_author(const char *a, char **nm, char **em) {
  const char *lt = strchr(a, '<'), *gt = lt ? strchr(lt, '>') : NULL;
  if (lt && gt) {
    size_t n = (size_t)(lt - a);
    while (n > 0 && a[n - 1] == ' ') n--;
    *nm = dbx_strndup(a, n);
    *em = dbx_strndup(lt + 1, (size_t)(gt - lt - 1));
  } else {
    *nm = dbx_strdup(a);
    *em = dbx_strdup("");
  }
  return *nm && *em;
}

static dbx_drv_err commit_impl(dbx_daytona *d, const char *name, const char *repo_path,
                               const char *const *paths, size_t npaths, const char *message,
                               const char *author, char **sha, int *nothing) {
  cli_t c;
  sbinfo s = {0};
  const char *p;
  char *an = NULL, *ae = NULL;
  *sha = NULL;
  *nothing = 0;
  if (message == NULL || author == NULL || *author == '\0')
    return fail(d, DBX_DRV_INVALID, "git commit needs a message and an author");
  dbx_drv_err rc = check_path(d, repo_path, 1, &p);
  for (size_t i = 0; rc == DBX_DRV_OK && i < npaths; i++) {
    const char *ip;
    rc = check_path(d, paths[i], 0, &ip);
  }
  if (rc != DBX_DRV_OK) return rc;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  if ((rc = sb_running(&c, name, &s)) != DBX_DRV_OK) goto out;
  if (strcmp(p, ".") != 0) {
    int isdir = 0;
    if ((rc = tb_info(&c, name, &s, p, &isdir, NULL)) != DBX_DRV_OK) goto out;
  }
  char *pe = esc(&c, p), *url = pe ? tb(&s, "/git/status?path=%s", pe) : NULL;
  resp_t r = {0};
  rc = url ? req(&c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  char what[300];
  snprintf(what, sizeof what, "git commit in sandbox '%s' failed", name);
  if (rc == DBX_DRV_OK && r.status != 200)
    rc = tb_status_err(&c, name, what, "GET", url, &r, r.status >= 500 ? DBX_DRV_TRANSIENT : DBX_DRV_FAILED);
  cJSON *j = rc == DBX_DRV_OK ? reply_json(&r) : NULL;
  int changes = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "fileStatus"));
  cJSON_Delete(j);
  resp_free(&r);
  free(url);
  free(pe);
  if (rc != DBX_DRV_OK) goto out;
  if (changes == 0) {
    *nothing = 1;
    goto out;
  }
  cJSON *add = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(add, "files");
  int ok = add && files && cJSON_AddStringToObject(add, "path", p);
  for (size_t i = 0; ok && i < (npaths ? npaths : 1); i++)
    ok = cJSON_AddItemToArray(files, cJSON_CreateString(npaths ? paths[i] : "."));
  rc = ok ? git_post(&c, name, &s, "add", add, what, NULL) : DBX_DRV_NOMEM;
  cJSON_Delete(add);
  if (rc != DBX_DRV_OK) goto out;
  if (!split_author(author, &an, &ae)) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  cJSON *cm = cJSON_CreateObject(), *reply = NULL;
  ok = cm && cJSON_AddStringToObject(cm, "path", p) && cJSON_AddStringToObject(cm, "message", message) &&
       cJSON_AddStringToObject(cm, "author", an) && cJSON_AddStringToObject(cm, "email", ae);
  rc = ok ? git_post(&c, name, &s, "commit", cm, what, &reply) : DBX_DRV_NOMEM;
  cJSON_Delete(cm);
  if (rc == DBX_DRV_FAILED && npaths && strstr(tl_err.msg, "nothing")) {
    rc = DBX_DRV_OK; /* the given paths had no change */
    *nothing = 1;
  } else if (rc == DBX_DRV_OK) {
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(reply, "hash");
    if (!cJSON_IsString(h)) rc = fail(d, DBX_DRV_FAILED, "%s: the reply has no hash", what);
    else if ((*sha = dbx_strdup(h->valuestring)) == NULL) rc = DBX_DRV_NOMEM;
  }
  cJSON_Delete(reply);
out:
  free(an);
  free(ae);
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_git_commit(void *self, const char *name, const char *repo_path,
                                 const char *message, const char *author, char **sha,
                                 int *nothing) {
  return commit_impl(self, name, repo_path, NULL, 0, message, author, sha, nothing);
}

static dbx_drv_err dt_git_commit_paths(void *self, const char *name, const char *repo_path,
                                       const char *const *paths, size_t npaths,
                                       const char *message, const char *author, char **sha,
                                       int *nothing) {
  return commit_impl(self, name, repo_path, paths, npaths, message, author, sha, nothing);
}

/* POST /git/push or /git/pull (ep) {path, remote?, branch?} of repo_path,
 * with credentials through the sandbox's git secret. */
static dbx_drv_err git_remote_call(dbx_daytona *d, const char *ep, const char *name,
                                   const char *repo_path, const char *remote, const char *branch,
                                   const dbx_drv_git_cred *cred) {
  cli_t c;
  sbinfo s;
  const char *p;
  dbx_drv_err rc = cred_check(d, cred, remote);
  if (rc == DBX_DRV_OK) rc = check_path(d, repo_path, 1, &p);
  if (rc != DBX_DRV_OK) return rc;
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  rc = sb_running(&c, name, &s);
  if (rc == DBX_DRV_OK && strcmp(p, ".") != 0) rc = tb_info(&c, name, &s, p, NULL, NULL);
  if (rc == DBX_DRV_OK) {
    git_secret g;
    rc = git_secret_open(&c, name, &s, remote, cred, &g);
    cJSON *b = rc == DBX_DRV_OK ? cJSON_CreateObject() : NULL;
    int ok = b && cJSON_AddStringToObject(b, "path", p) &&
             (!remote || !*remote || cJSON_AddStringToObject(b, "remote", remote)) &&
             (!branch || !*branch || cJSON_AddStringToObject(b, "branch", branch)) &&
             cred_add(b, cred, &g);
    char what[300];
    snprintf(what, sizeof what, "git %s in sandbox '%s' failed", ep, name);
    if (rc == DBX_DRV_OK) rc = ok ? git_post(&c, name, &s, ep, b, what, NULL) : DBX_DRV_NOMEM;
    if (rc == DBX_DRV_FAILED && strstr(tl_err.msg, "GIT_BRANCH_NOT_FOUND")) rc = DBX_DRV_REF_NOT_FOUND;
    cJSON_Delete(b);
    rc = git_secret_close(&c, name, &s, &g, rc);
    cred_wipe(cred);
  }
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_git_push_cred(void *self, const char *name, const char *repo_path,
                                    const char *remote, const char *branch,
                                    const dbx_drv_git_cred *cred) {
  return git_remote_call(self, "push", name, repo_path, remote, branch, cred);
}

static dbx_drv_err dt_git_pull(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch,
                               const dbx_drv_git_cred *cred) {
  return git_remote_call(self, "pull", name, repo_path, remote, branch, cred);
}

static dbx_drv_err dt_git_push(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch) {
  return dt_git_push_cred(self, name, repo_path, remote, branch, NULL);
}

/* ---- checkpoints ---- */

/* GET /snapshots/{snap}: *state ("" when there is none). */
static dbx_drv_err snap_state(cli_t *c, const char *snap, char *state, size_t cap, char *id,
                              size_t idcap) {
  state[0] = '\0';
  if (id) id[0] = '\0';
  char *url = api(c->d, "/snapshots/%s", snap);
  resp_t r;
  dbx_drv_err rc = url ? req(c, "GET", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK && r.status == 200) {
    cJSON *j = reply_json(&r);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *sid = cJSON_GetObjectItemCaseSensitive(j, "id");
    snprintf(state, cap, "%s", cJSON_IsString(st) ? st->valuestring : "unknown");
    if (id && cJSON_IsString(sid)) snprintf(id, idcap, "%s", sid->valuestring);
    cJSON_Delete(j);
  } else if (rc == DBX_DRV_OK && r.status != 404) {
    rc = fail_http(c, status_err(r.status), snap, "GET", url, &r);
  }
  if (url) resp_free(&r);
  free(url);
  return rc;
}

static dbx_drv_err dt_checkpoint(void *self, const char *name, const char *snap, char **ref) {
  dbx_daytona *d = self;
  cli_t c;
  sbinfo s = {0};
  char st[40];
  *ref = NULL;
  if (!dbx_drv_name_valid(snap))
    return fail(d, DBX_DRV_INVALID, "invalid snapshot name '%.140s'", snap ? snap : "(null)");
  if (!dbx_drv_name_valid(name))
    return fail(d, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  int64_t t0 = now_ms(), deadline = t0 + d->snapshot_wait_ms;
  dbx_drv_err rc = sb_get(&c, name, &s);
  if (rc == DBX_DRV_OK) rc = snap_state(&c, snap, st, sizeof st, NULL, 0);
  for (int round = 0; rc == DBX_DRV_OK && st[0] == '\0' && round < 10; round++) {
    if (!is_settled(&s)) { /* the capture needs started or stopped, not pending */
      sb_clear(&s);
      if ((rc = sb_wait(&c, name, NULL, deadline, NULL, NULL, &s)) != DBX_DRV_OK) break;
    }
    char *url = dbx_asprintf("%s/sandbox/%s/snapshot", d->api_url, s.id);
    char *body = dbx_asprintf("{\"name\":\"%s\"}", snap);
    resp_t r;
    rc = url && body ? req(&c, "POST", url, "application/json", body, strlen(body), SAFE, 0, &r)
                     : DBX_DRV_NOMEM;
    long code = rc == DBX_DRV_OK ? r.status : 0;
    if (rc == DBX_DRV_OK && code == 404)
      rc = fail(d, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found (gone from Daytona)", name);
    else if (rc == DBX_DRV_OK && code != 200 && code != 409)
      rc = fail_http(&c, code >= 500 ? DBX_DRV_TRANSIENT : DBX_DRV_SNAPSHOT_FAILED, name, "POST", url, &r);
    if (url && body) resp_free(&r);
    free(url);
    free(body);
    if (rc != DBX_DRV_OK) break;
    if (code == 200) break;
    sb_clear(&s); /* 409: a transition, or the name exists: look again */
    if ((rc = sb_get(&c, name, &s)) == DBX_DRV_OK) rc = snap_state(&c, snap, st, sizeof st, NULL, 0);
  }
  /* confirm: the snapshot must become active (a failed capture is silent) */
  int64_t interval = 100, absent_since = 0;
  while (rc == DBX_DRV_OK) {
    rc = snap_state(&c, snap, st, sizeof st, NULL, 0);
    if (rc != DBX_DRV_OK) break;
    if (strcmp(st, "active") == 0) break;
    if (strcmp(st, "error") == 0 || strcmp(st, "build_failed") == 0) {
      rc = fail(d, DBX_DRV_SNAPSHOT_FAILED, "snapshot '%s' of sandbox '%s' is %s", snap, name, st);
      break;
    }
    if (st[0] == '\0') { /* no record: failed silently once the sandbox left snapshotting */
      sbinfo w;
      rc = sb_get(&c, name, &w);
      int left = rc == DBX_DRV_OK && strcmp(w.state, "snapshotting") != 0;
      sb_clear(&w);
      if (rc == DBX_DRV_NO_SANDBOX) break;
      if (left && absent_since == 0) absent_since = now_ms();
      if (!left) absent_since = 0;
      if (left && now_ms() - absent_since >= 1000) {
        rc = fail(d, DBX_DRV_SNAPSHOT_FAILED,
                  "snapshot '%s' of sandbox '%s' failed: the sandbox left 'snapshotting' and no "
                  "snapshot exists",
                  snap, name);
        break;
      }
    }
    if (now_ms() >= deadline) {
      rc = fail(d, DBX_DRV_SNAPSHOT_FAILED, "snapshot '%s' of sandbox '%s' still %s after %lld ms",
                snap, name, st[0] ? st : "absent", (long long)(now_ms() - t0));
      break;
    }
    sleep_ms(interval);
    interval = interval * 3 / 2 > 2000 ? 2000 : interval * 3 / 2;
  }
  if (rc == DBX_DRV_OK && (*ref = dbx_strdup(snap)) == NULL) rc = DBX_DRV_NOMEM;
  sb_clear(&s);
  cli_close(&c);
  return rc;
}

static dbx_drv_err dt_restore(void *self, const char *name, const char *ref) {
  (void)ref;
  return fail(self, DBX_DRV_UNSUPPORTED,
              "sandbox '%s': Daytona restores only by creating a sandbox from the snapshot",
              name ? name : "");
}

static dbx_drv_err dt_snapshot_delete(void *self, const char *ref) {
  dbx_daytona *d = self;
  cli_t c;
  char st[40], id[128];
  if (!dbx_drv_name_valid(ref))
    return fail(d, DBX_DRV_INVALID, "invalid snapshot ref '%.140s'", ref ? ref : "(null)");
  if (!cli_open(d, &c)) return DBX_DRV_NOMEM;
  dbx_drv_err rc = snap_state(&c, ref, st, sizeof st, id, sizeof id);
  if (rc == DBX_DRV_OK && st[0]) {
    char *url = api(d, "/snapshots/%s", id[0] ? id : ref);
    resp_t r;
    rc = url ? req(&c, "DELETE", url, NULL, NULL, 0, SAFE, 0, &r) : DBX_DRV_NOMEM;
    if (rc == DBX_DRV_OK && r.status != 200 && r.status != 204 && r.status != 404)
      rc = fail_http(&c, status_err(r.status), ref, "DELETE", url, &r);
    if (url) resp_free(&r);
    free(url);
  }
  cli_close(&c);
  return rc;
}

static void dt_destroy(void *self) { dbx_daytona_close(self); }

static const dbx_driver_ops daytona_ops = {
    .destroy = dt_destroy,
    .errmsg = dt_errmsg,
    .create = dt_create,
    .workspace_path = dt_workspace_path,
    .exists = dt_exists,
    .list = dt_list,
    .labels = dt_labels,
    .start = dt_start,
    .stop = dt_stop,
    .del = dt_del,
    .exec_start = dt_exec_start,
    .exec_poll = dt_exec_poll,
    .exec_attach = dt_exec_attach,
    .exec_result = dt_exec_result,
    .exec_cancel = dt_exec_cancel,
    .exec_forget = dt_exec_forget,
    .file_read = dt_file_read,
    .file_write = dt_file_write,
    .upload = dt_upload,
    .download = dt_download,
    .git_clone = dt_git_clone,
    .git_commit = dt_git_commit,
    .git_commit_paths = dt_git_commit_paths,
    .git_push = dt_git_push,
    .git_clone_cred = dt_git_clone_cred,
    .git_push_cred = dt_git_push_cred,
    .git_pull = dt_git_pull,
    .checkpoint = dt_checkpoint,
    .restore = dt_restore,
    .snapshot_delete = dt_snapshot_delete,
};

/* ---- the handle ---- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access a, void *ud) {
  (void)h;
  (void)a;
  dbx_daytona *d = ud;
  pthread_mutex_lock(&d->share_mu[data < CURL_LOCK_DATA_LAST ? data : 0]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud) {
  (void)h;
  dbx_daytona *d = ud;
  pthread_mutex_unlock(&d->share_mu[data < CURL_LOCK_DATA_LAST ? data : 0]);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_ALL); }

static int env_int(const char *name) {
  const char *v = getenv(name);
  long n = v && *v ? strtol(v, NULL, 10) : 0;
  return n > 0 && n < 1000000 ? (int)n : 0;
}

dbx_err dbx_daytona_open(const dbx_daytona_opts *o, dbx_daytona **out, const char **why) {
  static const dbx_daytona_opts none = {0};
  if (o == NULL) o = &none;
  *out = NULL;
  if (why) *why = "";
  const char *url = o->api_url ? o->api_url : getenv("DAYTONA_API_URL");
  const char *key = o->api_key ? o->api_key : getenv("DAYTONA_API_KEY");
  const char *target = o->target ? o->target : getenv("DAYTONA_TARGET");
  if (url == NULL || *url == '\0') url = DBX_DAYTONA_DEFAULT_API_URL;
  if (key == NULL || *key == '\0') {
    if (why) *why = "DAYTONA_API_KEY is not set";
    return DBX_EINVAL;
  }
  if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
    if (why) *why = "DAYTONA_API_URL is not an http:// or https:// URL";
    return DBX_EINVAL;
  }
  for (const char *p = key; *p; p++)
    if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
      if (why) *why = "DAYTONA_API_KEY holds a character no header can carry";
      return DBX_EINVAL;
    }
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) {
    if (why) *why = "libcurl could not be initialised";
    return DBX_EIO;
  }
  dbx_daytona *d = dbx_calloc(1, sizeof *d);
  if (d == NULL) return DBX_ENOMEM;
  size_t ul = strlen(url);
  while (ul > 0 && url[ul - 1] == '/') ul--;
  d->api_url = dbx_strndup(url, ul);
  d->auth_hdr = dbx_asprintf("Authorization: Bearer %s", key);
  d->target = target && *target ? dbx_strdup(target) : NULL;
  d->max_live = o->max_live > 0 ? o->max_live : env_int("DURABOX_DAYTONA_MAX_SANDBOXES");
  d->creates_per_min = o->creates_per_min > 0 ? o->creates_per_min
                                              : env_int("DURABOX_DAYTONA_CREATES_PER_MIN");
  d->state_wait_ms = o->state_wait_ms > 0 ? o->state_wait_ms : 60000;
  d->snapshot_wait_ms = o->snapshot_wait_ms > 0 ? o->snapshot_wait_ms : 15 * 60000;
  d->req_timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 60000;
  if (d->creates_per_min > 0) d->create_ms = dbx_calloc((size_t)d->creates_per_min, sizeof *d->create_ms);
  d->share = curl_share_init();
  if (!d->api_url || !d->auth_hdr || (target && *target && !d->target) || !d->share ||
      (d->creates_per_min > 0 && !d->create_ms)) {
    if (d->share) curl_share_cleanup(d->share);
    free(d->api_url);
    free(d->auth_hdr);
    free(d->target);
    free(d->create_ms);
    free(d);
    return DBX_ENOMEM;
  }
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&d->share_mu[i], NULL);
  pthread_mutex_init(&d->mu, NULL);
  curl_share_setopt(d->share, CURLSHOPT_LOCKFUNC, share_lock);
  curl_share_setopt(d->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
  curl_share_setopt(d->share, CURLSHOPT_USERDATA, d);
  curl_share_setopt(d->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
  curl_share_setopt(d->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  curl_share_setopt(d->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  d->drv = (dbx_driver){.ops = &daytona_ops, .self = d, .name = "daytona"};
  *out = d;
  return DBX_OK;
}

void dbx_daytona_close(dbx_daytona *d) {
  if (d == NULL) return;
  curl_share_cleanup(d->share);
  for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_destroy(&d->share_mu[i]);
  pthread_mutex_destroy(&d->mu);
  if (d->auth_hdr) memset(d->auth_hdr, 0, strlen(d->auth_hdr)); /* the key */
  free(d->auth_hdr);
  free(d->api_url);
  free(d->target);
  free(d->create_ms);
  if (tl_err.owner == d) tl_err.owner = NULL;
  free(d);
}

dbx_driver *dbx_daytona_driver(dbx_daytona *d) { return d ? &d->drv : NULL; }
