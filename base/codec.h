/* base/codec: byte-level encodings shared by every room: a strict UTF-8
 * check and lossy repair, and standard base64 (RFC 4648 section 4, with padding).
 * Thread safety: pure functions, any thread. */
#ifndef DBX_BASE_CODEC_H
#define DBX_BASE_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* 1 when s[0..n) is well-formed UTF-8 (RFC 3629): no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing past U+10FFFF, no truncated sequence.
 * NUL bytes are valid UTF-8; callers that need C strings check for them.
 * s may be NULL when n is 0. */
int dbx_utf8_valid(const uint8_t *s, size_t n);

/* A well-formed UTF-8 copy of s[0..n): every ill-formed part is replaced by
 * U+FFFD (EF BF BD), one per maximal ill-formed subpart (Unicode's "best
 * practice": a truncated sequence is one replacement, each stray or
 * impossible byte one each); well-formed text is copied unchanged. NUL bytes
 * are copied. Returns malloc'd text (free with free()), NUL-terminated,
 * length in *out_len (may be NULL); NULL on OOM only. s may be NULL when n is
 * 0. */
char *dbx_utf8_repair(const char *s, size_t n, size_t *out_len);

/* Base64 text of p[0..n) with '=' padding, NUL-terminated. malloc'd (free
 * with free()); NULL on OOM only. p may be NULL when n is 0 (gives ""). */
char *dbx_base64_encode(const uint8_t *p, size_t n);

/* Decode s[0..n) (strict: standard alphabet, length a multiple of 4, padding
 * only at the end, no whitespace). *out: malloc'd (free with free(); one
 * spare byte so it may be NUL-terminated by the caller at [*len_out]),
 * *len_out the decoded length. Returns DBX_OK, DBX_EINVAL (malformed text;
 * *out NULL), DBX_ENOMEM. */
dbx_err dbx_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len_out);

#endif
