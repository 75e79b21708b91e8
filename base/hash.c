/* Digests (see hash.h). SHA-256 is one EVP_Digest call: libcrypto picks the
 * CPU's SHA extensions when present, and we keep no crypto code of our own. */
#include "base/hash.h"

#include <openssl/evp.h>

dbx_err dbx_sha256(const void *p, size_t n, uint8_t out[DBX_SHA256_LEN]) {
  static const uint8_t empty[1] = {0};
  unsigned int len = 0;
  if (EVP_Digest(p ? p : empty, n, out, &len, EVP_sha256(), NULL) != 1 || len != DBX_SHA256_LEN)
    return DBX_ENOMEM;
  return DBX_OK;
}

dbx_err dbx_sha256_hex(const void *p, size_t n, char out[DBX_SHA256_HEX_LEN + 1]) {
  static const char hex[] = "0123456789abcdef";
  uint8_t d[DBX_SHA256_LEN];
  dbx_err rc = dbx_sha256(p, n, d);
  if (rc != DBX_OK) {
    out[0] = '\0';
    return rc;
  }
  for (int i = 0; i < DBX_SHA256_LEN; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[DBX_SHA256_HEX_LEN] = '\0';
  return DBX_OK;
}

uint64_t dbx_fnv1a64(uint64_t h, const void *p, size_t n) {
  const uint8_t *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  return h;
}
