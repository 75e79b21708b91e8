/* UTF-8 validation and base64 (see codec.h). The UTF-8 check decodes each
 * sequence and rejects what RFC 3629 forbids. The base64 decoder is strict
 * (RFC 4648 section 3.5 allows it): bits under the padding must be zero, so
 * every byte string has exactly one accepted text. */
#include "base/codec.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

int dbx_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return 0; /* a continuation byte first, or 0xf8..0xff */
    }
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += len;
  }
  return 1;
}

/* Length of the well-formed sequence at s[0..n), or 0 with *bad set to the
 * length of its maximal ill-formed subpart (at least 1). */
static size_t utf8_seq(const uint8_t *s, size_t n, size_t *bad) {
  uint8_t c = s[0];
  size_t len;
  uint8_t lo = 0x80, hi = 0xbf; /* the allowed range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;       /* no overlong forms */
    else if (c == 0xed) hi = 0x9f;  /* no surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    else if (c == 0xf4) hi = 0x8f;  /* nothing past U+10FFFF */
  } else {
    *bad = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < len && k < n; k++) {
    uint8_t b = s[k];
    if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) break;
  }
  if (k == len) return len;
  *bad = k;
  return 0;
}

char *dbx_utf8_repair(const char *s, size_t n, size_t *out_len) {
  if (n > (SIZE_MAX - 1) / 3) return NULL;
  const uint8_t *p = (const uint8_t *)s;
  char *out = dbx_malloc(n * 3 + 1);
  if (out == NULL) return NULL;
  size_t o = 0, i = 0;
  while (i < n) {
    size_t bad = 0, len = utf8_seq(p + i, n - i, &bad);
    if (len > 0) {
      memcpy(out + o, p + i, len);
      o += len;
      i += len;
    } else {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i += bad;
    }
  }
  out[o] = '\0';
  if (out_len) *out_len = o;
  return out;
}

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *dbx_base64_encode(const uint8_t *p, size_t n) {
  if (n > (SIZE_MAX - 1) / 4 * 3 - 2) return NULL;
  char *out = dbx_malloc((n + 2) / 3 * 4 + 1);
  if (out == NULL) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n) v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n) v |= p[i + 2];
    out[o++] = alphabet[(v >> 18) & 63];
    out[o++] = alphabet[(v >> 12) & 63];
    out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

/* Value of c in the alphabet, or -1. */
static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

dbx_err dbx_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len_out) {
  if (out == NULL || len_out == NULL || (s == NULL && n > 0)) return DBX_EINVAL;
  *out = NULL;
  *len_out = 0;
  if (n % 4 != 0) return DBX_EINVAL;
  uint8_t *buf = dbx_malloc(n / 4 * 3 + 1);
  if (buf == NULL) return DBX_ENOMEM;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int last = i + 4 == n;
    int a = b64_value((unsigned char)s[i]), b = b64_value((unsigned char)s[i + 1]);
    int c = s[i + 2] == '=' && last ? -2 : b64_value((unsigned char)s[i + 2]);
    int d = s[i + 3] == '=' && last ? -2 : b64_value((unsigned char)s[i + 3]);
    /* "xy=z" is malformed; so are non-zero bits under the padding. */
    if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2) ||
        (c == -2 && (b & 0x0f) != 0) || (c >= 0 && d == -2 && (c & 0x03) != 0)) {
      dbx_free(buf);
      return DBX_EINVAL;
    }
    uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)(c < 0 ? 0 : c) << 6 |
                 (uint32_t)(d < 0 ? 0 : d);
    buf[o++] = (uint8_t)(v >> 16);
    if (c >= 0) buf[o++] = (uint8_t)(v >> 8);
    if (d >= 0) buf[o++] = (uint8_t)v;
  }
  buf[o] = '\0';
  *out = buf;
  *len_out = o;
  return DBX_OK;
}
