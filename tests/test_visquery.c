/* Unit tests of service/visquery: parsing and evaluation of visibility
 * queries against three fixed records, exact error messages, input bounds,
 * and a fixed-seed fuzz run over mutated queries (ASan build finds memory
 * faults and leaks). */
#include "tests/testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/visquery.h"

#define S(sec) ((int64_t)(sec) * 1000000000)

/* 2024-01-02T03:04:05Z = 1704164645 s; 2024-01-05T00:00:00Z = 1704412800 s;
 * 2023-12-31T23:00:00Z = 1704063600 s; 2024-01-01T00:00:00Z = 1704067200 s. */
static const dbx_visq_record R[3] = {
    {"order-1", "OrderWorkflow", "orders", "run-a", DBX_VISQ_STATUS_RUNNING, S(1704164645), 0,
     S(1704164645)},
    {"invoice-7", "InvoiceWorkflow", "billing", "run-b", DBX_VISQ_STATUS_COMPLETED, S(1704412800),
     S(1704416400), S(1704412800)},
    {"order-2", "OrderWorkflow", "billing", "run-c", DBX_VISQ_STATUS_FAILED, S(1704063600),
     S(1704067200), 0},
};
#define R0 1u
#define R1 2u
#define R2 4u
#define ALL 7u

/* Bit i set when R[i] matches q; fails the test if q does not compile. */
static unsigned matches(const char *q) {
  char err[256];
  dbx_visq *v = NULL;
  dbx_err rc = dbx_visq_create(q, &v, err, sizeof err);
  if (rc != DBX_OK) fail_msg("query <%s> refused: %s", q ? q : "(null)", err);
  assert_string_equal(err, "");
  unsigned m = 0;
  for (unsigned i = 0; i < 3; i++)
    if (dbx_visq_match(v, &R[i])) m |= 1u << i;
  dbx_visq_destroy(v);
  return m;
}

static void expect_error(const char *q, const char *msg) {
  char err[256];
  dbx_visq *v = (dbx_visq *)&err; /* must be reset to NULL */
  assert_int_equal(dbx_visq_create(q, &v, err, sizeof err), DBX_EINVAL);
  assert_null(v);
  assert_string_equal(err, msg);
}

static int order_desc(const char *q) {
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create(q, &v, NULL, 0), DBX_OK);
  int d = dbx_visq_order_desc(v);
  dbx_visq_destroy(v);
  return d;
}

static void test_visquery_empty_matches_all(void **state) {
  (void)state;
  assert_int_equal(matches(""), ALL);
  assert_int_equal(matches(NULL), ALL);
  assert_int_equal(matches(" \t\n "), ALL);
  assert_int_equal(order_desc(""), 1);
  assert_int_equal(dbx_visq_match(NULL, &R[0]), 1);
  assert_int_equal(dbx_visq_match(NULL, NULL), 0);
  dbx_visq_destroy(NULL);
}

static void test_visquery_string_comparisons(void **state) {
  (void)state;
  assert_int_equal(matches("WorkflowId = 'order-1'"), R0);
  assert_int_equal(matches("WorkflowId != 'order-1'"), R1 | R2);
  assert_int_equal(matches("WorkflowId > 'order-1'"), R2);
  assert_int_equal(matches("WorkflowId >= 'order-1'"), R0 | R2);
  assert_int_equal(matches("WorkflowId < 'order-1'"), R1);
  assert_int_equal(matches("WorkflowId <= 'order-1'"), R0 | R1);
  assert_int_equal(matches("WorkflowId < 'order'"), R1); /* a prefix sorts first */
  assert_int_equal(matches("WorkflowType = \"OrderWorkflow\""), R0 | R2);
  assert_int_equal(matches("TaskQueue='billing'"), R1 | R2);
  assert_int_equal(matches("RunId = 'run-c'"), R2);
  assert_int_equal(matches("RunId = 'RUN-C'"), 0); /* values are case-sensitive */
}

static void test_visquery_string_escapes(void **state) {
  (void)state;
  dbx_visq_record r = R[0];
  const char *ids[] = {"it's", "say \"hi\"", "back\\slash", "tab\there"};
  const char *qs[] = {"WorkflowId = 'it\\'s'", "WorkflowId = \"say \\\"hi\\\"\"",
                      "WorkflowId = 'back\\\\slash'", "WorkflowId = 'tab\\there'"};
  for (int i = 0; i < 4; i++) {
    dbx_visq *v = NULL;
    assert_int_equal(dbx_visq_create(qs[i], &v, NULL, 0), DBX_OK);
    for (int j = 0; j < 4; j++) {
      r.workflow_id = ids[j];
      assert_int_equal(dbx_visq_match(v, &r), i == j);
    }
    dbx_visq_destroy(v);
  }
  /* the other quote kind needs no escape */
  r.workflow_id = "it's";
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create("WorkflowId = \"it's\"", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  dbx_visq_destroy(v);
}

static void test_visquery_status_names(void **state) {
  (void)state;
  static const char *names[] = {"Running",    "Completed",      "Failed",  "Canceled",
                                "Terminated", "ContinuedAsNew", "TimedOut"};
  static const char *other_case[] = {"running",    "COMPLETED",      "fAiLeD",  "canceled",
                                     "TERMINATED", "continuedasnew", "timedOut"};
  for (int i = 0; i < 7; i++) {
    char q[80];
    dbx_visq *v = NULL;
    dbx_visq_record r = R[0];
    snprintf(q, sizeof q, "ExecutionStatus = '%s'", i % 2 ? names[i] : other_case[i]);
    assert_int_equal(dbx_visq_create(q, &v, NULL, 0), DBX_OK);
    for (int s = 0; s <= 8; s++) {
      r.status = s;
      assert_int_equal(dbx_visq_match(v, &r), s == i + 1);
    }
    dbx_visq_destroy(v);
  }
  assert_int_equal(matches("ExecutionStatus = 'Running'"), R0);
  assert_int_equal(matches("ExecutionStatus != 'Running'"), R1 | R2);
  assert_int_equal(matches("ExecutionStatus > 'Running'"), R1 | R2); /* by number */
  assert_int_equal(matches("ExecutionStatus <= 'Completed'"), R0 | R1);
  assert_int_equal(matches("ExecutionStatus IN ('Failed', 'completed')"), R1 | R2);
  /* UNSPECIFIED (0) is absent: != is false, IS NULL is true */
  dbx_visq_record r = R[0];
  r.status = 0;
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create("ExecutionStatus != 'Running'", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 0);
  dbx_visq_destroy(v);
  assert_int_equal(dbx_visq_create("ExecutionStatus IS NULL", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  assert_int_equal(dbx_visq_match(v, &R[0]), 0);
  dbx_visq_destroy(v);
}

static void test_visquery_in_and_starts_with(void **state) {
  (void)state;
  assert_int_equal(matches("WorkflowType IN ('InvoiceWorkflow', \"Other\")"), R1);
  assert_int_equal(matches("WorkflowId in ('order-2')"), R2);
  assert_int_equal(matches("RunId IN ('run-a','run-c','nope')"), R0 | R2);
  assert_int_equal(matches("TaskQueue IN ('x', 'y')"), 0);
  assert_int_equal(matches("WorkflowId STARTS_WITH 'order-'"), R0 | R2);
  assert_int_equal(matches("WorkflowId starts_with 'order-1'"), R0);
  assert_int_equal(matches("WorkflowId STARTS_WITH 'order-10'"), 0);
  assert_int_equal(matches("WorkflowId STARTS_WITH ''"), ALL);
  assert_int_equal(matches("TaskQueue STARTS_WITH 'bill'"), R1 | R2);
  /* an absent string matches nothing but IS NULL */
  dbx_visq_record r = R[0];
  r.task_queue = NULL;
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create("TaskQueue STARTS_WITH ''", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 0);
  dbx_visq_destroy(v);
  assert_int_equal(dbx_visq_create("TaskQueue IS NULL", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  dbx_visq_destroy(v);
}

static void test_visquery_time_comparisons(void **state) {
  (void)state;
  assert_int_equal(matches("StartTime = '2024-01-02T03:04:05Z'"), R0);
  assert_int_equal(matches("StartTime > '2024-01-02T03:04:05Z'"), R1);
  assert_int_equal(matches("StartTime >= '2024-01-02T03:04:05Z'"), R0 | R1);
  assert_int_equal(matches("StartTime < '2024-01-02T03:04:05Z'"), R2);
  assert_int_equal(matches("StartTime <= '2024-01-02T03:04:05Z'"), R0 | R2);
  assert_int_equal(matches("StartTime != '2024-01-02T03:04:05Z'"), R1 | R2);
  /* the same instant written with offsets */
  assert_int_equal(matches("StartTime = '2024-01-02T05:04:05+02:00'"), R0);
  assert_int_equal(matches("StartTime = '2024-01-01T22:34:05-04:30'"), R0);
  assert_int_equal(matches("StartTime = '2024-01-02t03:04:05z'"), R0);
  assert_int_equal(matches("StartTime = '2024-01-02 03:04:05Z'"), R0);
  /* fractional seconds, down to the nanosecond */
  assert_int_equal(matches("StartTime < '2024-01-02T03:04:05.000000001Z'"), R0 | R2);
  assert_int_equal(matches("StartTime > '2024-01-02T03:04:04.999Z'"), R0 | R1);
  assert_int_equal(matches("StartTime = '2024-01-02T03:04:05.0Z'"), R0);
  assert_int_equal(matches("ExecutionTime >= '2024-01-05T00:00:00Z'"), R1);
  /* leap day and pre-epoch dates */
  dbx_visq_record r = R[0];
  r.start_time_ns = S(1709164800); /* 2024-02-29T00:00:00Z */
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create("StartTime = '2024-02-29T00:00:00Z'", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  dbx_visq_destroy(v);
  r.start_time_ns = -S(1) + 500000000; /* 1969-12-31T23:59:59.5Z */
  assert_int_equal(dbx_visq_create("StartTime = '1969-12-31T23:59:59.5Z'", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  dbx_visq_destroy(v);
  r.start_time_ns = INT64_MAX;
  assert_int_equal(
      dbx_visq_create("StartTime = '2262-04-11T23:47:16.854775807Z'", &v, NULL, 0), DBX_OK);
  assert_int_equal(dbx_visq_match(v, &r), 1);
  dbx_visq_destroy(v);
}

static void test_visquery_between(void **state) {
  (void)state;
  assert_int_equal(matches("StartTime BETWEEN '2024-01-01T00:00:00Z' AND '2024-01-02T03:04:05Z'"),
                   R0); /* both ends inclusive */
  assert_int_equal(matches("StartTime between '2023-12-31T23:00:00Z' and '2024-01-01T00:00:00Z'"),
                   R2);
  assert_int_equal(
      matches("CloseTime BETWEEN '2024-01-01T00:00:00+00:00' AND '2024-01-06T00:00:00Z'"),
      R1 | R2);
  assert_int_equal(matches("StartTime BETWEEN '2025-01-01T00:00:00Z' AND '2024-01-01T00:00:00Z'"),
                   0);
  /* BETWEEN's AND does not end the predicate's chain */
  assert_int_equal(matches("StartTime BETWEEN '2023-01-01T00:00:00Z' AND '2025-01-01T00:00:00Z' "
                           "AND TaskQueue = 'orders'"),
                   R0);
}

static void test_visquery_close_time_of_running_workflow(void **state) {
  (void)state;
  assert_int_equal(matches("CloseTime > '2000-01-01T00:00:00Z'"), R1 | R2);
  assert_int_equal(matches("CloseTime < '2100-01-01T00:00:00Z'"), R1 | R2);
  assert_int_equal(matches("CloseTime != '2024-01-01T00:00:00Z'"), R1);
  assert_int_equal(matches("CloseTime IS NULL"), R0);
  assert_int_equal(matches("CloseTime is not null"), R1 | R2);
  assert_int_equal(matches("ExecutionTime IS NULL"), R2);
}

static void test_visquery_precedence_and_parentheses(void **state) {
  (void)state;
  /* A OR B AND C = A OR (B AND C): R0 by A alone; R2 by B and C */
  const char *a = "ExecutionStatus = 'Running'", *b = "WorkflowId = 'order-2'",
             *c = "TaskQueue = 'billing'";
  char q[256];
  snprintf(q, sizeof q, "%s OR %s AND %s", a, b, c);
  assert_int_equal(matches(q), R0 | R2);
  snprintf(q, sizeof q, "%s AND %s OR %s", b, c, a);
  assert_int_equal(matches(q), R0 | R2);
  snprintf(q, sizeof q, "(%s OR %s) AND %s", a, b, c);
  assert_int_equal(matches(q), R2);
  snprintf(q, sizeof q, "%s and (%s or %s)", c, b, a);
  assert_int_equal(matches(q), R2);
  snprintf(q, sizeof q, "((%s)) Or ((%s))", a, c);
  assert_int_equal(matches(q), ALL);
  assert_int_equal(matches("WorkflowId = 'x' OR WorkflowId = 'y' OR RunId = 'run-b' OR "
                           "RunId = 'z'"),
                   R1);
  assert_int_equal(matches("WorkflowType = 'OrderWorkflow' AND TaskQueue = 'billing' AND "
                           "ExecutionStatus = 'Failed'"),
                   R2);
  /* 32 nested parentheses are allowed */
  char deep[256] = "";
  for (int i = 0; i < 32; i++) strcat(deep, "(");
  strcat(deep, "RunId = 'run-a'");
  for (int i = 0; i < 32; i++) strcat(deep, ")");
  assert_int_equal(matches(deep), R0);
}

static void test_visquery_order_by(void **state) {
  (void)state;
  assert_int_equal(order_desc("WorkflowId = 'a'"), 1);
  assert_int_equal(order_desc("WorkflowId = 'a' ORDER BY StartTime DESC"), 1);
  assert_int_equal(order_desc("WorkflowId = 'a' order by StartTime asc"), 0);
  assert_int_equal(order_desc("ORDER BY StartTime"), 0);
  assert_int_equal(order_desc("Order By StartTime Desc"), 1);
  assert_int_equal(matches("ORDER BY StartTime ASC"), ALL);
  assert_int_equal(matches("TaskQueue = 'orders' ORDER BY StartTime DESC"), R0);
}

static void test_visquery_error_messages(void **state) {
  (void)state;
  expect_error("WorkflowId = 'abc", "invalid query at 14: unterminated string");
  expect_error("WorkflowId = \"ab\\\"", "invalid query at 14: unterminated string");
  expect_error("WorkflowId = 'a' AND Foo = 'b'", "invalid query at 22: unknown attribute 'Foo'");
  expect_error("workflowid = 'a'", "invalid query at 1: unknown attribute 'workflowid'");
  expect_error("WorkflowId =", "invalid query at 13: expected a quoted value, found end of query");
  expect_error("WorkflowId = 'a' AND",
               "invalid query at 21: expected an attribute name, found end of query");
  expect_error("= 'a'", "invalid query at 1: expected an attribute name, found '='");
  expect_error("WorkflowId 'a'",
               "invalid query at 12: expected an operator after 'WorkflowId', found 'a'");
  expect_error("WorkflowId = 'a' garbage",
               "invalid query at 18: expected AND, OR or ORDER BY, found 'garbage'");
  expect_error("WorkflowId = 'a')", "invalid query at 17: expected AND, OR or ORDER BY, found ')'");
  expect_error("(WorkflowId = 'a'", "invalid query at 18: expected ')', found end of query");
  expect_error("()", "invalid query at 2: expected an attribute name, found ')'");
  expect_error("WorkflowId = 42", "invalid query at 14: expected a quoted value, found '42'");
  expect_error("WorkflowId # 'a'", "invalid query at 12: unexpected character '#'");
  expect_error("WorkflowId ! 'a'", "invalid query at 12: unexpected character '!'");
  expect_error("WorkflowId = 'a' AND \x01", "invalid query at 22: unexpected byte 0x01");
  expect_error("StartTime STARTS_WITH '2024'",
               "invalid query at 11: STARTS_WITH needs a string attribute, not 'StartTime'");
  expect_error("WorkflowId BETWEEN 'a' AND 'b'",
               "invalid query at 12: BETWEEN needs a time attribute, not 'WorkflowId'");
  expect_error("StartTime IN ('2024-01-01T00:00:00Z')",
               "invalid query at 11: IN needs a string attribute or ExecutionStatus, not "
               "'StartTime'");
  expect_error("StartTime BETWEEN '2024-01-01T00:00:00Z' OR '2024-01-02T00:00:00Z'",
               "invalid query at 42: expected AND in BETWEEN, found 'OR'");
  expect_error("RunId IN 'a'", "invalid query at 10: expected '(' after IN, found 'a'");
  expect_error("RunId IN ('a' 'b')",
               "invalid query at 15: expected ',' or ')' in IN list, found 'b'");
  expect_error("RunId IN ()", "invalid query at 11: expected a quoted value, found ')'");
  expect_error("RunId IS 'a'", "invalid query at 10: expected NULL after IS, found 'a'");
  expect_error("ExecutionStatus = 'Sleeping'",
               "invalid query at 19: unknown execution status 'Sleeping'");
  expect_error("StartTime > '2024-13-01T00:00:00Z'",
               "invalid query at 13: invalid time '2024-13-01T00:00:00Z', expected RFC3339 such "
               "as '2024-01-02T03:04:05Z'");
  expect_error("ORDER BY CloseTime",
               "invalid query at 10: ORDER BY supports only StartTime, found 'CloseTime'");
  expect_error("ORDER StartTime", "invalid query at 7: expected BY after ORDER, found 'StartTime'");
  expect_error("ORDER BY StartTime DESC LIMIT",
               "invalid query at 25: expected end of query after ORDER BY, found 'LIMIT'");
  expect_error("WorkflowId = 'a' AND AND", "invalid query at 22: expected an attribute name, "
                                           "found 'AND'");
  /* long tokens are shortened in messages */
  expect_error("WorkflowId = 'a' Abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz",
               "invalid query at 18: expected AND, OR or ORDER BY, found "
               "'Abcdefghijklmnopqrstuvwxyzabcdefghijklmn...'");
}

static void test_visquery_invalid_times(void **state) {
  (void)state;
  static const char *bad[] = {
      "2024-02-30T00:00:00Z",           "2023-02-29T00:00:00Z",   "2024-01-02T03:04:05",
      "2024-01-02T24:00:00Z",           "2024-01-02T03:60:00Z",   "2024-01-02T03:04:60Z",
      "2024-01-02T03:04:05.Z",          "2024-01-02T03:04:05.1234567890Z",
      "2024-01-02T03:04:05+2:00",       "2024-01-02T03:04:05+02:60", "2024-01-02",
      "2024-1-02T03:04:05Z",            "2024-01-02T03:04:05Z ",  "x024-01-02T03:04:05Z",
      "2024-00-02T03:04:05Z",           "2024-01-00T03:04:05Z",   "",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char q[128], msg[256];
    snprintf(q, sizeof q, "CloseTime = '%s'", bad[i]);
    snprintf(msg, sizeof msg,
             "invalid query at 13: invalid time '%s', expected RFC3339 such as "
             "'2024-01-02T03:04:05Z'",
             bad[i]);
    expect_error(q, msg);
  }
  expect_error("StartTime > '2262-04-11T23:47:16.854775808Z'",
               "invalid query at 13: time '2262-04-11T23:47:16.854775808Z' out of range");
  expect_error("StartTime > '1600-01-01T00:00:00Z'",
               "invalid query at 13: time '1600-01-01T00:00:00Z' out of range");
  expect_error("StartTime > '9999-12-31T23:59:59+23:59'",
               "invalid query at 13: time '9999-12-31T23:59:59+23:59' out of range");
}

static void test_visquery_bounds(void **state) {
  (void)state;
  char *q = malloc(DBX_VISQ_MAX_QUERY_BYTES + 2);
  assert_non_null(q);
  memset(q, ' ', DBX_VISQ_MAX_QUERY_BYTES);
  q[DBX_VISQ_MAX_QUERY_BYTES] = '\0';
  assert_int_equal(matches(q), ALL); /* exactly at the limit */
  q[DBX_VISQ_MAX_QUERY_BYTES] = ' ';
  q[DBX_VISQ_MAX_QUERY_BYTES + 1] = '\0';
  expect_error(q, "invalid query: longer than 4096 bytes");
  free(q);

  char deep[256] = "";
  for (int i = 0; i < 33; i++) strcat(deep, "(");
  strcat(deep, "RunId = 'run-a'");
  for (int i = 0; i < 33; i++) strcat(deep, ")");
  expect_error(deep, "invalid query at 33: parentheses nested deeper than 32");
  /* depth counts nesting, not the number of groups */
  char wide[2048] = "";
  for (int i = 0; i < 40; i++) strcat(wide, i ? " OR (RunId = 'run-b')" : "(RunId = 'run-b')");
  assert_int_equal(matches(wide), R1);
  /* 4000 opening parentheses: refused by the depth limit, no deep recursion */
  char *open = malloc(4001);
  assert_non_null(open);
  memset(open, '(', 4000);
  open[4000] = '\0';
  expect_error(open, "invalid query at 33: parentheses nested deeper than 32");
  free(open);
}

static void test_visquery_api_misuse(void **state) {
  (void)state;
  char err[64];
  assert_int_equal(dbx_visq_create("", NULL, err, sizeof err), DBX_EINVAL);
  assert_string_equal(err, "invalid query: no output pointer");
  /* a short buffer gets a truncated, terminated message */
  char small[12];
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create("Foo = 'a'", &v, small, sizeof small), DBX_EINVAL);
  assert_string_equal(small, "invalid que");
  assert_null(v);
  assert_int_equal(dbx_visq_create("Foo = 'a'", &v, NULL, 0), DBX_EINVAL);
  assert_int_equal(dbx_visq_order_desc(NULL), 1);
}

/* Every line of the Examples block in docs/visibility-queries.md compiles. */
static void test_visquery_doc_examples_compile(void **state) {
  (void)state;
  const char *dir = getenv("DBX_SOURCE_DIR");
  if (dir == NULL) skip(); /* set by ctest */
  char path[1024], line[512], err[256];
  snprintf(path, sizeof path, "%s/docs/visibility-queries.md", dir);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  int section = 0, inside = 0, n = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "## ", 3) == 0) section = strcmp(line, "## Examples") == 0;
    if (!section) continue;
    if (strncmp(line, "```", 3) == 0) {
      if (inside) break;
      inside = 1;
      continue;
    }
    if (!inside) continue;
    dbx_visq *v = NULL;
    if (dbx_visq_create(line, &v, err, sizeof err) != DBX_OK)
      fail_msg("doc example <%s> refused: %s", line, err);
    dbx_visq_destroy(v);
    n++;
  }
  fclose(f);
  assert_true(n >= 5);
}

/* xorshift64*: deterministic across platforms. */
static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  rnd_state ^= rnd_state >> 12;
  rnd_state ^= rnd_state << 25;
  rnd_state ^= rnd_state >> 27;
  return (uint32_t)((rnd_state * 2685821657736338717ull) >> 32);
}

static void test_visquery_fuzz_never_crashes(void **state) {
  (void)state;
  static const char *seeds[] = {
      "WorkflowId = 'order-1' AND (ExecutionStatus = 'Running' OR TaskQueue != \"billing\")",
      "StartTime BETWEEN '2024-01-01T00:00:00Z' AND '2024-01-02T03:04:05.123+02:00' ORDER BY "
      "StartTime ASC",
      "WorkflowType IN ('a', 'b\\'c', \"d\") OR RunId STARTS_WITH 'run-'",
      "CloseTime IS NOT NULL AND ExecutionTime <= '2030-06-01T00:00:00-07:00'",
      "((WorkflowId >= 'a') AND (WorkflowId < 'z')) OR CloseTime IS NULL",
  };
  static const char *pieces[] = {
      " AND ", " OR ", "(", ")", "'", "\"", "\\", ",", " IN ", " BETWEEN ", " STARTS_WITH ",
      " IS ", " NOT ", " NULL ", "ORDER BY ", " DESC", "=", "!=", ">=", "<", "WorkflowId",
      "StartTime", "ExecutionStatus", "'Running'", "'2024-01-02T03:04:05Z'", "\xff", "123", "",
  };
  const size_t np = sizeof pieces / sizeof *pieces;
  char buf[1024], err[128];
  int ok = 0, invalid = 0;
  for (int it = 0; it < 20000; it++) {
    size_t len;
    if (it % 4 == 3) { /* a random token soup */
      len = 0;
      buf[0] = '\0';
      for (int k = rnd() % 24; k > 0; k--) {
        const char *s = pieces[rnd() % np];
        size_t n = strlen(s);
        if (len + n >= 512) break;
        memcpy(buf + len, s, n + 1);
        len += n;
      }
    } else { /* a mutated seed */
      snprintf(buf, sizeof buf, "%s", seeds[rnd() % (sizeof seeds / sizeof *seeds)]);
      len = strlen(buf);
      for (int k = 1 + rnd() % 4; k > 0; k--) {
        unsigned what = rnd() % 4;
        size_t at = len ? rnd() % len : 0;
        if (what == 0 && len) { /* random byte, never NUL */
          buf[at] = (char)(1 + rnd() % 255);
        } else if (what == 1 && len) { /* delete a run */
          size_t n = 1 + rnd() % 8;
          if (at + n > len) n = len - at;
          memmove(buf + at, buf + at + n, len - at - n + 1);
          len -= n;
        } else if (what == 2) { /* insert a piece */
          const char *s = pieces[rnd() % np];
          size_t n = strlen(s);
          if (len + n < sizeof buf - 1) {
            memmove(buf + at + n, buf + at, len - at + 1);
            memcpy(buf + at, s, n);
            len += n;
          }
        } else { /* truncate */
          buf[at] = '\0';
          len = at;
        }
      }
    }
    dbx_visq *v = NULL;
    dbx_err rc = dbx_visq_create(buf, &v, err, sizeof err);
    if (rc == DBX_OK) {
      ok++;
      assert_non_null(v);
      for (int i = 0; i < 3; i++) {
        int m = dbx_visq_match(v, &R[i]);
        assert_true(m == 0 || m == 1);
      }
      dbx_visq_destroy(v);
    } else {
      invalid++;
      assert_int_equal(rc, DBX_EINVAL);
      assert_null(v);
      assert_memory_equal(err, "invalid query", 13);
    }
  }
  print_message("fuzz: %d ok, %d invalid\n", ok, invalid);
  /* the mutations exercise both outcomes */
  assert_true(ok > 400);
  assert_true(invalid > 10000);
}

/* Custom search attributes (dbx_visq_create_sa): typed values from the
 * records' JSON, lists, null, an undefined name, and values that are not
 * JSON of the type (no match, no crash). */
static const dbx_visq_sa_def SA_DEFS[] = {
    {"Kw", DBX_VISQ_SA_KEYWORD}, {"N", DBX_VISQ_SA_INT},       {"D", DBX_VISQ_SA_DOUBLE},
    {"B", DBX_VISQ_SA_BOOL},     {"T", DBX_VISQ_SA_DATETIME}, {"L", DBX_VISQ_SA_KEYWORD_LIST},
};

static unsigned sa_matches(const char *q, const dbx_visq_record *recs, size_t n) {
  char err[256];
  dbx_visq *v = NULL;
  dbx_err rc = dbx_visq_create_sa(q, SA_DEFS, sizeof SA_DEFS / sizeof *SA_DEFS, &v, err, sizeof err);
  if (rc != DBX_OK) fail_msg("query <%s> refused: %s", q, err);
  unsigned m = 0;
  for (unsigned i = 0; i < n; i++)
    if (dbx_visq_match(v, &recs[i])) m |= 1u << i;
  dbx_visq_destroy(v);
  return m;
}

#define SAV(name, json) {name, json, sizeof(json) - 1}

static void test_visquery_custom_search_attributes(void **state) {
  (void)state;
  static const dbx_visq_sa_value a[] = {SAV("Kw", "\"order-1\""), SAV("N", "12"), SAV("D", "1.5"),
                                        SAV("B", "true"), SAV("T", "\"2024-01-02T03:04:05Z\""),
                                        SAV("L", "[\"x\", \"y\"]")};
  static const dbx_visq_sa_value b[] = {SAV("Kw", "[\"order-2\"]"), SAV("N", "-3"), SAV("B", "false"),
                                        SAV("L", "[]"), SAV("D", "null")};
  static const dbx_visq_sa_value c[] = {SAV("Kw", "12"), SAV("N", "\"twelve\""), SAV("T", "\"yesterday\""),
                                        SAV("L", "[\"x\""), SAV("B", "[tru")};
  dbx_visq_record r[3] = {R[0], R[1], R[2]};
  r[0].sa = a;
  r[0].n_sa = sizeof a / sizeof *a;
  r[1].sa = b;
  r[1].n_sa = sizeof b / sizeof *b;
  r[2].sa = c;
  r[2].n_sa = sizeof c / sizeof *c;
  assert_int_equal(sa_matches("Kw = 'order-1'", r, 3), R0);
  assert_int_equal(sa_matches("Kw = 'order-2'", r, 3), R1); /* a one-element list */
  assert_int_equal(sa_matches("Kw STARTS_WITH 'order-'", r, 3), R0 | R1);
  assert_int_equal(sa_matches("Kw IN ('order-2', 'zz')", r, 3), R1);
  assert_int_equal(sa_matches("N > 0", r, 3), R0);
  assert_int_equal(sa_matches("N <= 12", r, 3), R0 | R1);
  assert_int_equal(sa_matches("N = '12'", r, 3), R0);
  assert_int_equal(sa_matches("N IN (1, -3)", r, 3), R1);
  assert_int_equal(sa_matches("D >= 1.25", r, 3), R0);
  assert_int_equal(sa_matches("D IS NULL", r, 3), R1 | R2); /* null, and absent */
  assert_int_equal(sa_matches("B = true", r, 3), R0);
  assert_int_equal(sa_matches("B = 'false'", r, 3), R1);
  assert_int_equal(sa_matches("T > '2024-01-01T00:00:00Z'", r, 3), R0);
  assert_int_equal(sa_matches("T BETWEEN '2024-01-02T00:00:00Z' AND '2024-01-03T00:00:00Z'", r, 3), R0);
  assert_int_equal(sa_matches("L = 'y'", r, 3), R0);
  assert_int_equal(sa_matches("L != 'x'", r, 3), 0); /* R1's empty list is absent */
  assert_int_equal(sa_matches("L != 'z'", r, 3), R0);
  assert_int_equal(sa_matches("L IS NOT NULL", r, 3), R0 | R2);
  assert_int_equal(sa_matches("Kw = 'order-1' AND WorkflowId = 'order-1'", r, 3), R0);
  char err[256];
  dbx_visq *v = NULL;
  assert_int_equal(dbx_visq_create_sa("Nope = 'x'", SA_DEFS, 6, &v, err, sizeof err), DBX_EINVAL);
  assert_string_equal(err, "invalid query at 1: search attribute Nope is not defined");
  assert_int_equal(dbx_visq_create_sa("N = 'many'", SA_DEFS, 6, &v, err, sizeof err), DBX_EINVAL);
  assert_string_equal(err, "invalid query at 5: expected a number, found 'many'");
  assert_int_equal(dbx_visq_create_sa("B = maybe", SA_DEFS, 6, &v, err, sizeof err), DBX_EINVAL);
  assert_string_equal(err, "invalid query at 5: expected true or false, found 'maybe'");
  assert_null(v);
  /* arbitrary bytes as a record's JSON: evaluation never crashes */
  static const char *qs[] = {"Kw = 'a'", "N > 1", "D < 2", "B = true", "T IS NULL", "L != 'q'", "L IN ('a')"};
  char js[64];
  for (int it = 0; it < 20000; it++) {
    size_t n = rnd() % sizeof js;
    for (size_t i = 0; i < n; i++) js[i] = "[]\",\\ 0123456789.-etruefalsnul"[rnd() % 30];
    dbx_visq_sa_value one[6];
    for (int k = 0; k < 6; k++) one[k] = (dbx_visq_sa_value){SA_DEFS[k].name, js, n};
    dbx_visq_record x = R[0];
    x.sa = one;
    x.n_sa = 6;
    assert_int_equal(dbx_visq_create_sa(qs[it % 7], SA_DEFS, 6, &v, NULL, 0), DBX_OK);
    int m = dbx_visq_match(v, &x);
    assert_true(m == 0 || m == 1);
    dbx_visq_destroy(v);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_visquery_empty_matches_all),
      cmocka_unit_test(test_visquery_string_comparisons),
      cmocka_unit_test(test_visquery_string_escapes),
      cmocka_unit_test(test_visquery_status_names),
      cmocka_unit_test(test_visquery_in_and_starts_with),
      cmocka_unit_test(test_visquery_time_comparisons),
      cmocka_unit_test(test_visquery_between),
      cmocka_unit_test(test_visquery_close_time_of_running_workflow),
      cmocka_unit_test(test_visquery_precedence_and_parentheses),
      cmocka_unit_test(test_visquery_order_by),
      cmocka_unit_test(test_visquery_error_messages),
      cmocka_unit_test(test_visquery_invalid_times),
      cmocka_unit_test(test_visquery_bounds),
      cmocka_unit_test(test_visquery_api_misuse),
      cmocka_unit_test(test_visquery_doc_examples_compile),
      cmocka_unit_test(test_visquery_fuzz_never_crashes),
      cmocka_unit_test(test_visquery_custom_search_attributes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
