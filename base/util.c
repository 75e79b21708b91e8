/* Clocks, allocation helpers and the line logger (see util.h).
 * The log threshold is a plain int read without locks: it is set once in
 * main() before any thread starts, as util.h requires. */
#include "base/util.h"

#include <errno.h>
#include <sys/random.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"

static int log_level = DBX_LOG_INFO;
static int log_json = 0;

int64_t dbx_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dbx_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

char *dbx_strdup(const char *s) {
  return s ? dbx_strndup(s, strlen(s)) : NULL;
}

char *dbx_strndup(const char *s, size_t n) {
  char *p = n < SIZE_MAX ? dbx_malloc(n + 1) : NULL;
  if (p == NULL) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *dbx_asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *p = dbx_malloc((size_t)n + 1);
  if (p == NULL) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

dbx_err dbx_uuid_v4(char out[DBX_UUID_LEN + 1]) {
  static const char hex[] = "0123456789abcdef";
  uint8_t b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = getrandom(b + got, sizeof b - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      out[0] = '\0';
      return DBX_EIO;
    }
    got += (size_t)r;
  }
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 10 */
  size_t o = 0;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[o++] = '-';
    out[o++] = hex[b[i] >> 4];
    out[o++] = hex[b[i] & 15];
  }
  out[o] = '\0';
  return DBX_OK;
}

int dbx_log_level_parse(const char *s, dbx_log_level *out) {
  static const struct { const char *name; dbx_log_level l; } t[] = {
      {"debug", DBX_LOG_DEBUG}, {"info", DBX_LOG_INFO},   {"warn", DBX_LOG_WARN},
      {"warning", DBX_LOG_WARN}, {"error", DBX_LOG_ERROR}, {"fatal", DBX_LOG_ERROR},
      {"off", DBX_LOG_OFF}, {"never", DBX_LOG_OFF}};
  for (size_t i = 0; s && i < sizeof t / sizeof t[0]; i++) {
    if (strcasecmp(s, t[i].name) == 0) {
      *out = t[i].l;
      return 0;
    }
  }
  return -1;
}

void dbx_log_set_level(dbx_log_level l) { log_level = (int)l; }
void dbx_log_set_json(int json) { log_json = json; }
int dbx_log_enabled(dbx_log_level l) { return (int)l >= log_level && l != DBX_LOG_OFF; }

/* Append s to buf as a JSON string body (no quotes); returns new length. */
static size_t json_escape(char *buf, size_t len, size_t cap, const char *s) {
  for (; *s && len + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[len++] = '\\';
      buf[len++] = (char)c;
    } else if (c < 0x20) {
      len += (size_t)snprintf(buf + len, cap - len, "\\u%04x", c);
    } else {
      buf[len++] = (char)c;
    }
  }
  return len;
}

void dbx_log(dbx_log_level l, const char *module, const char *fmt, ...) {
  static const char *names[] = {"debug", "info", "warn", "error"};
  if (!dbx_log_enabled(l)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char tbuf[64];
  snprintf(tbuf, sizeof tbuf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(ts.tv_nsec / 1000000) % 1000);
  char line[4096];
  size_t n;
  if (log_json) {
    n = (size_t)snprintf(line, sizeof line, "{\"time\":\"%s\",\"level\":\"%s\",\"module\":\"%s\",\"msg\":\"",
                         tbuf, names[l], module);
    if (n >= sizeof line) n = sizeof line - 1;
    n = json_escape(line, n, sizeof line - 4, msg);
    n += (size_t)snprintf(line + n, sizeof line - n, "\"}\n");
  } else {
    n = (size_t)snprintf(line, sizeof line, "%s %-5s [%s] %s\n", tbuf, names[l], module, msg);
  }
  if (n >= sizeof line) n = sizeof line - 1;
  ssize_t w = write(STDERR_FILENO, line, n);
  (void)w;
}
