/* libFuzzer harness: the Script input check (workflows/script.h,
 * dbx_script_validate), the function `durabox run` and the workflow's create
 * use on a Script input file. Any bytes: a verdict (0, or -1 with a
 * NUL-terminated message that names the problem; on success err is not
 * written), never a crash. The same
 * input is also checked with a tiny error buffer (truncation). fuzz_fleet.c
 * builds this file with DBX_FUZZ_FLEET for the Fleet input check. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef DBX_FUZZ_FLEET /* fuzz_fleet.c */
#include "workflows/fleet.h"
#define VALIDATE dbx_fleet_validate
#else
#include "workflows/script.h"
#define VALIDATE dbx_script_validate
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size copy, so a read past the input's end is ASan's to see */
  char *in = malloc(size ? size : 1);
  if (!in) return 0;
  if (size) memcpy(in, data, size);
  char err[256];
  memset(err, 'x', sizeof err);
  int rc = VALIDATE(in, size, err, sizeof err);
  if (rc != 0 && rc != -1) abort();
  /* a refusal names its problem in a terminated message */
  if (rc == -1 && (memchr(err, '\0', sizeof err) == NULL || err[0] == '\0')) abort();
  char small[8];
  int rc2 = VALIDATE(in, size, small, sizeof small);
  if (rc2 != rc || (rc2 == -1 && memchr(small, '\0', sizeof small) == NULL)) abort(); /* same verdict */
  free(in);
  return 0;
}
