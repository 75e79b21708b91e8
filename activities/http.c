/* activities/http: see http.h. */
#include "activities/http.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "base/alloc.h"
#include "base/util.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_ALL); }

typedef struct {
  char *p;
  size_t n, cap;
  int over, oom;
} buf_t;

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
  buf_t *b = ud;
  size_t n = sz * nm;
  if (b->n + n > DBX_HTTP_MAX_BODY) {
    b->over = 1;
    return 0;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *q = dbx_realloc(b->p, cap);
    if (!q) {
      b->oom = 1;
      return 0;
    }
    b->p = q, b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
  return n;
}

typedef struct {
  int (*beat)(void *);
  void *ud;
  int64_t next_ns;
  int stopped;
} beat_t;

static int on_progress(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt, (void)dn, (void)ut, (void)un;
  beat_t *b = p;
  int64_t now = dbx_mono_ns();
  if (now < b->next_ns) return 0;
  b->next_ns = now + 1000000000LL;
  if (b->beat(b->ud)) b->stopped = 1;
  return b->stopped;
}

dbx_err dbx_http_json(const char *method, const char *url, const char *body,
                      const char *const *headers, int64_t timeout_ms, dbx_http_reply *r) {
  return dbx_http_json_beat(method, url, body, headers, timeout_ms, r, NULL, NULL);
}

dbx_err dbx_http_json_beat(const char *method, const char *url, const char *body,
                           const char *const *headers, int64_t timeout_ms, dbx_http_reply *r,
                           int (*beat)(void *ud), void *ud) {
  beat_t bt = {beat, ud, 0, 0};
  memset(r, 0, sizeof *r);
  if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
    snprintf(r->error, sizeof r->error, "not an http:// or https:// URL");
    return DBX_EINVAL;
  }
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK) {
    snprintf(r->error, sizeof r->error, "libcurl could not be initialised");
    return DBX_EIO;
  }
  CURL *h = curl_easy_init();
  if (!h) return DBX_ENOMEM;
  struct curl_slist *hd = NULL, *t;
  dbx_err rc = DBX_OK;
  buf_t b = {0};
  static const char *const base[] = {"Content-Type: application/json",
                                     "Accept: application/json", "Expect:", NULL};
  for (int k = 0; k < 2; k++) {
    const char *const *l = k == 0 ? base : headers;
    for (size_t i = 0; l && l[i]; i++) {
      if ((t = curl_slist_append(hd, l[i])) == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      hd = t;
    }
  }
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 60000));
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  if (beat) {
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &bt);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  }
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
  } else if (strcmp(method, "GET") == 0) {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
  }
  CURLcode cc = curl_easy_perform(h);
  if (b.oom) {
    rc = DBX_ENOMEM;
    goto out;
  }
  if (b.over) {
    snprintf(r->error, sizeof r->error, "the reply is over %zu bytes", (size_t)DBX_HTTP_MAX_BODY);
    rc = DBX_EUNSUPPORTED;
    goto out;
  }
  if (bt.stopped) {
    snprintf(r->error, sizeof r->error, "stopped: the activity was cancelled");
    rc = DBX_ECANCELED;
    goto out;
  }
  if (cc != CURLE_OK) {
    snprintf(r->error, sizeof r->error, "%s", curl_easy_strerror(cc));
    rc = DBX_EIO;
    goto out;
  }
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  if (!b.p && !(b.p = dbx_strdup(""))) {
    rc = DBX_ENOMEM;
    goto out;
  }
  r->body = b.p, r->body_len = b.n;
  b.p = NULL;
out:
  free(b.p);
  curl_slist_free_all(hd);
  curl_easy_cleanup(h);
  return rc;
}

void dbx_http_reply_cleanup(dbx_http_reply *r) {
  if (!r) return;
  free(r->body);
  r->body = NULL;
  r->body_len = 0;
}

char *dbx_http_redact(char *text, const char *secret, const char *name) {
  if (!text || !secret || strlen(secret) < 4) return text;
  size_t sl = strlen(secret), count = 0;
  for (const char *p = strstr(text, secret); p; p = strstr(p + sl, secret)) count++;
  if (count == 0) return text;
  char mark[80];
  snprintf(mark, sizeof mark, "[redacted:%s]", name ? name : "secret");
  size_t ml = strlen(mark), tl = strlen(text);
  char *out = dbx_malloc(tl + count * (ml > sl ? ml - sl : 0) + 1);
  if (!out) {
    free(text);
    return NULL;
  }
  char *w = out;
  for (const char *p = text;;) {
    const char *q = strstr(p, secret);
    if (!q) {
      strcpy(w, p);
      break;
    }
    memcpy(w, p, (size_t)(q - p));
    w += q - p;
    memcpy(w, mark, ml);
    w += ml;
    p = q + sl;
  }
  free(text);
  return out;
}

void dbx_http_secret_free(char *s) {
  if (s == NULL) return;
  volatile char *v = s; /* a plain memset before free may be optimised away */
  for (size_t i = 0; v[i]; i++) v[i] = 0;
  free(s);
}
