/* Visibility queries: the subset of Temporal's list filter language that the
 * embedded service answers in ListWorkflowExecutions and
 * CountWorkflowExecutions (Temporal: ListWorkflowExecutionsRequest.query,
 * CountWorkflowExecutionsRequest.query). docs/visibility-queries.md lists the
 * grammar, the value formats and every error message.
 *
 * A query is compiled once (dbx_visq_create) into an immutable dbx_visq, then
 * evaluated against plain records; nothing here touches storage or the wire.
 * Thread safety: create/destroy of one object on one thread; once created, a
 * dbx_visq is read-only and dbx_visq_match / dbx_visq_order_desc may run on it
 * from any number of threads at once. */
#ifndef DBX_SERVICE_VISQUERY_H
#define DBX_SERVICE_VISQUERY_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DBX_VISQ_MAX_QUERY_BYTES 4096 /* longer queries are refused */
#define DBX_VISQ_MAX_DEPTH 32         /* parentheses nested deeper are refused */

/* Temporal: enums.v1.WorkflowExecutionStatus. */
enum {
  DBX_VISQ_STATUS_UNSPECIFIED = 0,
  DBX_VISQ_STATUS_RUNNING = 1,
  DBX_VISQ_STATUS_COMPLETED = 2,
  DBX_VISQ_STATUS_FAILED = 3,
  DBX_VISQ_STATUS_CANCELED = 4,
  DBX_VISQ_STATUS_TERMINATED = 5,
  DBX_VISQ_STATUS_CONTINUED_AS_NEW = 6,
  DBX_VISQ_STATUS_TIMED_OUT = 7,
};

/* Custom search attribute types: Temporal's enums.v1.IndexedValueType. */
enum {
  DBX_VISQ_SA_TEXT = 1,
  DBX_VISQ_SA_KEYWORD = 2,
  DBX_VISQ_SA_INT = 3,
  DBX_VISQ_SA_DOUBLE = 4,
  DBX_VISQ_SA_BOOL = 5,
  DBX_VISQ_SA_DATETIME = 6,
  DBX_VISQ_SA_KEYWORD_LIST = 7,
};

/* A registered custom search attribute (name and DBX_VISQ_SA_* type). */
typedef struct {
  const char *name;
  int type;
} dbx_visq_sa_def;

/* A run's value of a custom search attribute: the JSON text of its payload
 * (json/plain, as the SDKs encode them: "text", 12, 1.5, true,
 * "2024-01-02T03:04:05Z", or a list of those). */
typedef struct {
  const char *name;
  const char *json;
  size_t json_len;
} dbx_visq_sa_value;

/* One workflow execution as visibility sees it; all pointers borrowed for the
 * call. Absent values: a NULL string, status 0 (UNSPECIFIED), a time of 0
 * (e.g. close_time_ns of a running workflow). Every comparison with an absent
 * value is false (also !=); only IS NULL matches it. Times: ns since the epoch. */
typedef struct {
  const char *workflow_id;
  const char *workflow_type;
  const char *task_queue;
  const char *run_id;
  int status; /* WorkflowExecutionStatus number, DBX_VISQ_STATUS_* */
  int64_t start_time_ns;
  int64_t close_time_ns;
  int64_t execution_time_ns;
  const dbx_visq_sa_value *sa; /* custom search attributes, n_sa of them (may be NULL) */
  size_t n_sa;
} dbx_visq_record;

/* A compiled query. Immutable; free with dbx_visq_destroy(). */
typedef struct dbx_visq dbx_visq;

/* Compile query (NUL-terminated; NULL or only blanks = match everything).
 * query is borrowed for the call; *out receives a new object to free with
 * dbx_visq_destroy(). errbuf (may be NULL when errlen is 0) receives "" on
 * success, else a NUL-terminated message truncated to errlen, such as
 * "invalid query at 17: unknown attribute 'Foo'" (1-based byte position).
 * Returns DBX_OK; DBX_EINVAL (query refused, or out == NULL; *out = NULL);
 * DBX_ENOMEM (*out = NULL). */
dbx_err dbx_visq_create(const char *query, dbx_visq **out, char *errbuf, size_t errlen);
/* dbx_visq_create that also knows the custom search attributes defs[0..n)
 * (borrowed for the call; names are copied). A value of an Int or Double
 * attribute is a number (quoted or not), of a Bool one true/false, of a
 * Datetime one an RFC 3339 string; Keyword, Text and KeywordList take
 * strings (a KeywordList matches when any element does). A name neither
 * built in nor in defs is refused: "search attribute X is not defined". */
dbx_err dbx_visq_create_sa(const char *query, const dbx_visq_sa_def *defs, size_t n, dbx_visq **out, char *errbuf,
                           size_t errlen);

/* 1 when record r satisfies q, else 0. q == NULL matches every record;
 * r == NULL matches nothing. */
int dbx_visq_match(const dbx_visq *q, const dbx_visq_record *r);

/* Listing order: 1 = newest StartTime first (the default, as Temporal lists,
 * and ORDER BY StartTime DESC), 0 = oldest first (ORDER BY StartTime [ASC]). */
int dbx_visq_order_desc(const dbx_visq *q);

/* Free q; accepts NULL. */
void dbx_visq_destroy(dbx_visq *q);

/* Temporal's name of a workflow execution status (WorkflowExecutionStatus
 * number 1..7: "Running", "Completed", ...), as ExecutionStatus values are
 * written in queries and in CountWorkflowExecutions groups; NULL for any
 * other number. The string is static. */
const char *dbx_visq_status_name(int status);

/* Split a trailing "GROUP BY <attribute>" off query (CountWorkflowExecutions
 * only; keywords case-insensitive, blanks around). Returns 0 when there is
 * none; else 1, with *cut the length of the query before the clause and
 * *attr / *attr_len the attribute name inside query (borrowed). A GROUP BY
 * inside a quoted string is not a clause. */
int dbx_visq_split_group_by(const char *query, size_t *cut, const char **attr, size_t *attr_len);

#endif
