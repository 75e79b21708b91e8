/* activities/http: one JSON-over-HTTP exchange for the activities that call
 * outside services from the worker (llm.c: chat completions, github.c: pull
 * requests). Each call opens its own libcurl easy handle (no client state is
 * shared between concurrent activities) and closes it before returning.
 *
 * Secrets: the caller passes the Authorization header value; it is sent and
 * never logged or copied into errors. Thread safety: any thread, any number
 * at once (libcurl's global init is done once, under pthread_once). */
#ifndef DBX_ACTIVITIES_HTTP_H
#define DBX_ACTIVITIES_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The largest reply body kept; a longer one is an error (DBX_EUNSUPPORTED). */
#define DBX_HTTP_MAX_BODY ((size_t)8 << 20)

typedef struct {
  long status;       /* HTTP status, 0 when no reply came */
  char *body;        /* malloc'd, NUL-terminated (may hold NULs before it), or NULL */
  size_t body_len;
  char error[256];   /* transport failure in words (no URL query, no header values) */
} dbx_http_reply;

/* method ("POST", "GET") url with body (JSON text, may be NULL for none),
 * headers extra "Name: value" lines (NULL-terminated array, may be NULL; an
 * Authorization line among them is sent and never logged), within
 * timeout_ms (<= 0: 60 s). Returns DBX_OK when a reply of any status came
 * (*r filled; free with dbx_http_reply_cleanup), DBX_EIO when none did
 * (r->error says why: cannot connect, timed out), DBX_EUNSUPPORTED when the body
 * was over DBX_HTTP_MAX_BODY, DBX_ENOMEM, DBX_EINVAL (not an http(s) URL). */
dbx_err dbx_http_json(const char *method, const char *url, const char *body,
                      const char *const *headers, int64_t timeout_ms, dbx_http_reply *r);
/* The same, calling beat(ud) about every second while the exchange runs
 * (an activity heartbeats there); beat returning non-zero stops it
 * (DBX_ECANCELED). beat may be NULL. */
dbx_err dbx_http_json_beat(const char *method, const char *url, const char *body,
                           const char *const *headers, int64_t timeout_ms, dbx_http_reply *r,
                           int (*beat)(void *ud), void *ud);
void dbx_http_reply_cleanup(dbx_http_reply *r);

/* In text (NUL-terminated, malloc'd, owned by the call), replace every occurrence of secret
 * (shorter than 4 bytes is left alone) with "[redacted:name]".
 * Returns a malloc'd copy (text freed) when one was found,
 * else text itself; NULL on OOM (text freed). */
char *dbx_http_redact(char *text, const char *secret, const char *name);

/* Overwrite a malloc'd NUL-terminated secret (a built Authorization header)
 * with zeros, then free it. NULL is a no-op. */
void dbx_http_secret_free(char *s);

#endif
