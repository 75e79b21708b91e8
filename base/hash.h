/* base/hash: digests. SHA-256 comes from OpenSSL's libcrypto (already linked
 * through libcurl and gRPC; this file is its one home in our code), FNV-1a 64
 * is ours (a short stable hash for ids, not for security).
 * Thread safety: pure functions, any thread. */
#ifndef DBX_BASE_HASH_H
#define DBX_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DBX_SHA256_LEN 32
#define DBX_SHA256_HEX_LEN 64

/* SHA-256 (FIPS 180-4) of p[0..n) into out. p may be NULL when n is 0.
 * Returns DBX_OK, DBX_ENOMEM (libcrypto could not allocate its context). */
dbx_err dbx_sha256(const void *p, size_t n, uint8_t out[DBX_SHA256_LEN]);
/* The same as 64 lowercase hex digits and a NUL. */
dbx_err dbx_sha256_hex(const void *p, size_t n, char out[DBX_SHA256_HEX_LEN + 1]);

#define DBX_FNV1A64_OFFSET 0xcbf29ce484222325ULL
/* FNV-1a 64 of p[0..n), continuing from h (start with DBX_FNV1A64_OFFSET). */
uint64_t dbx_fnv1a64(uint64_t h, const void *p, size_t n);

#endif
