/* base/json: what a lenient JSON parser lets through, found in the text.
 *
 * cJSON accepts a document followed by anything, decodes "\u0000" into a C
 * string that silently ends there, passes raw control characters and bytes
 * that are not UTF-8 through. dbx_json_text_check finds each of these in the
 * text itself, so a caller can refuse the input and name the string.
 * Thread safety: pure function, any thread. */
#ifndef DBX_BASE_JSON_H
#define DBX_BASE_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  DBX_JSON_OK = 0,
  DBX_JSON_TRAILING, /* something other than white space after the document */
  DBX_JSON_NUL,      /* a string holds a NUL: a raw 0 byte or a \u0000 escape */
  DBX_JSON_CTRL,     /* a string holds a raw control character (< 0x20; RFC 8259 forbids it) */
  DBX_JSON_UTF8,     /* a string's bytes are not well-formed UTF-8 */
} dbx_json_problem;

/* s[0..n): JSON text that a parser accepted; end: the offset where its
 * document ended (cJSON's return_parse_end - s), end <= n. Returns the first
 * problem, DBX_JSON_TRAILING before the others. *at: for TRAILING the offset
 * of the first stray byte; otherwise the ordinal (from 0) of the offending
 * string among all strings of the document, keys and values, in document
 * order (as a cJSON tree lists them: a key before its value). "\\u0000" is a
 * backslash and "u0000", not a NUL. s may be NULL when n is 0. */
dbx_json_problem dbx_json_text_check(const char *s, size_t n, size_t end, size_t *at);

/* A short description of a problem ("contains a NUL character (\\u0000)");
 * a static string, never NULL. */
const char *dbx_json_problem_str(dbx_json_problem p);

/* A JSON number (cJSON keeps every number as a double) as an integer in
 * [lo, hi]: truncated toward zero, then clamped; NaN gives lo. A plain cast
 * of a double outside the target type's range is undefined behaviour, and
 * numbers from a file, a reply or history can be anything ("1e300"). */
int64_t dbx_json_int(double d, int64_t lo, int64_t hi);

/* 1 when d is a whole number in [lo, hi] that int64 holds, else 0 (NaN
 * too); the range is tested before the one cast, so never undefined. */
int dbx_json_whole(double d, double lo, double hi);

#endif
