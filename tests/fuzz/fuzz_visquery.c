/* libFuzzer harness: the visibility query parser (service/visquery.h), the
 * text of ListWorkflowExecutions / CountWorkflowExecutions queries. Any
 * bytes (NUL-terminated at the first NUL, as the service passes the proto
 * string): DBX_OK with a query that then evaluates on records with every
 * value present and absent, or DBX_EINVAL with a message; never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "service/visquery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *q = malloc(size + 1);
  if (!q) return 0;
  memcpy(q, data, size);
  q[size] = '\0';
  char err[200];
  dbx_visq *v = NULL;
  dbx_err rc = dbx_visq_create(q, &v, err, sizeof err);
  if (rc == DBX_OK) {
    if (!v && q[strspn(q, " \t\r\n")] != '\0') { /* a real query compiles to an object */
      /* NULL is allowed only for "match everything"; dbx_visq_match(NULL) is 1 */
    }
    const dbx_visq_record recs[] = {
        {"order-1", "OrderWorkflow", "orders", "run-a", DBX_VISQ_STATUS_RUNNING,
         1704164645000000000LL, 0, 1704164645000000000LL},
        {"", "", "", "", DBX_VISQ_STATUS_COMPLETED, 1, 2, 3},
        {NULL, NULL, NULL, NULL, 0, 0, 0, 0},
        {"it's", "\xc3\xa9t\xc3\xa9", "q", "r", DBX_VISQ_STATUS_TIMED_OUT, INT64_MAX, INT64_MIN, -1},
    };
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++) {
      int m = dbx_visq_match(v, &recs[i]);
      if (m != 0 && m != 1) abort();
    }
    if (dbx_visq_match(v, NULL) != 0) abort();
    int d = dbx_visq_order_desc(v);
    if (d != 0 && d != 1) abort();
  } else if (rc == DBX_EINVAL) {
    if (v != NULL || err[0] == '\0') abort(); /* refused: no object, a message */
  } else if (rc != DBX_ENOMEM) {
    abort();
  }
  dbx_visq_destroy(v);
  free(q);
  return 0;
}
