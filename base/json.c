/* base/json: problems in JSON text that cJSON lets through (see json.h).
 *
 * One pass over the text of a document already parsed: each string token is
 * delimited by its quotes (a backslash always takes the next byte with it, so
 * an escaped quote or backslash never ends or starts anything), and its raw
 * bytes are checked as they stand: escapes are ASCII, and cJSON itself
 * refuses \u escapes that are not scalar values, so the raw bytes decide. */
#include "base/json.h"

#include <stdint.h>
#include <string.h>

#include "base/codec.h"

static int ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Check the string whose text (between the quotes) is t[0..n). */
static dbx_json_problem check_string(const char *t, size_t n) {
  int nul = 0, ctrl = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)t[i];
    if (c == '\\') {
      if (i + 5 < n && t[i + 1] == 'u' && memcmp(t + i + 2, "0000", 4) == 0) nul = 1;
      i++;
    } else if (c == 0) {
      nul = 1;
    } else if (c < 0x20) {
      ctrl = 1;
    }
  }
  if (nul) return DBX_JSON_NUL;
  if (ctrl) return DBX_JSON_CTRL;
  return dbx_utf8_valid((const uint8_t *)t, n) ? DBX_JSON_OK : DBX_JSON_UTF8;
}

dbx_json_problem dbx_json_text_check(const char *s, size_t n, size_t end, size_t *at) {
  if (end > n) end = n;
  for (size_t i = end; i < n; i++)
    if (!ws(s[i])) return *at = i, DBX_JSON_TRAILING;
  size_t ord = 0;
  for (size_t i = 0; i < end; i++) {
    if (s[i] != '"') continue;
    size_t start = ++i;
    while (i < end && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
    if (i > end) i = end;
    dbx_json_problem p = check_string(s + start, i - start);
    if (p != DBX_JSON_OK) return *at = ord, p;
    ord++;
  }
  return DBX_JSON_OK;
}

const char *dbx_json_problem_str(dbx_json_problem p) {
  switch (p) {
  case DBX_JSON_OK: return "is fine";
  case DBX_JSON_TRAILING: return "has data after the JSON document";
  case DBX_JSON_NUL: return "contains a NUL character (\\u0000)";
  case DBX_JSON_CTRL: return "contains a raw control character (escape it, e.g. \\n or \\u0001)";
  case DBX_JSON_UTF8: return "is not valid UTF-8";
  }
  return "is not valid";
}

int64_t dbx_json_int(double d, int64_t lo, int64_t hi) {
  if (!(d >= (double)lo)) return lo; /* NaN too */
  if (d >= (double)hi) return hi;    /* (double)INT64_MAX rounds up to 2^63: the cast below stays in range */
  int64_t v = (int64_t)d;
  return v < lo ? lo : v > hi ? hi : v;
}

int dbx_json_whole(double d, double lo, double hi) {
  return d >= lo && d <= hi && d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
         d == (double)(int64_t)d;
}
