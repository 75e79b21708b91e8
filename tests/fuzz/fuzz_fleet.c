/* libFuzzer harness: the Fleet input check (workflows/fleet.h,
 * dbx_fleet_validate), what `durabox fleet` and the Fleet workflow check
 * before any child starts: the items, their keys, the template (a Script
 * input). Any bytes: a verdict (0, or -1 with a NUL-terminated message that
 * names the problem; on success err is not written), never a crash. The same
 * input is also checked with a tiny error buffer (truncation). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "workflows/fleet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size copy, so a read past the input's end is ASan's to see */
  char *in = malloc(size ? size : 1);
  if (!in) return 0;
  if (size) memcpy(in, data, size);
  char err[256];
  memset(err, 'x', sizeof err);
  int rc = dbx_fleet_validate(in, size, err, sizeof err);
  if (rc != 0 && rc != -1) abort();
  /* a refusal names its problem in a terminated message */
  if (rc == -1 && (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')) abort();
  char small[8];
  int rc2 = dbx_fleet_validate(in, size, small, sizeof small);
  if (rc2 != rc || (rc2 == -1 && memchr(small, '\0', sizeof small) == NULL)) abort(); /* same verdict */
  free(in);
  return 0;
}
