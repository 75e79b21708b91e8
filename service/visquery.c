/* Visibility query compiler and evaluator (see visquery.h and
 * docs/visibility-queries.md).
 *
 * Design: a hand-written lexer (one token of lookahead) feeds a recursive
 * descent parser for  query := [or] [ORDER BY StartTime [ASC|DESC]].
 * AND and OR become n-ary nodes whose children are a linked list, so a long
 * chain "a OR b OR c ..." is one node and recursion depth (parse, evaluate)
 * grows only with parentheses, which are capped at DBX_VISQ_MAX_DEPTH; the
 * input is capped at DBX_VISQ_MAX_QUERY_BYTES. Values are checked and
 * converted while parsing (times to ns, status names to numbers), so
 * evaluation never fails and never allocates.
 * Memory: every allocation of one query is a block chained on the query, so
 * an error anywhere in the parse frees everything with one walk.
 * Threading: parsing touches only its own parser state; the finished tree is
 * never written again, so concurrent dbx_visq_match calls are safe. */
#include "service/visquery.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"

/* ---- the compiled tree ---- */

typedef enum { A_STR, A_STATUS, A_TIME, A_NUM, A_BOOL } atype;

typedef enum {
  AT_WORKFLOW_ID,
  AT_WORKFLOW_TYPE,
  AT_TASK_QUEUE,
  AT_RUN_ID,
  AT_STATUS,
  AT_START_TIME,
  AT_CLOSE_TIME,
  AT_EXECUTION_TIME,
  AT_CUSTOM, /* a custom search attribute: node's sa_name, values from the record's sa */
} attr_id;

static const struct {
  const char *name;
  attr_id id;
  atype type;
} attrs[] = {
    {"WorkflowId", AT_WORKFLOW_ID, A_STR},     {"WorkflowType", AT_WORKFLOW_TYPE, A_STR},
    {"TaskQueue", AT_TASK_QUEUE, A_STR},       {"RunId", AT_RUN_ID, A_STR},
    {"ExecutionStatus", AT_STATUS, A_STATUS},  {"StartTime", AT_START_TIME, A_TIME},
    {"CloseTime", AT_CLOSE_TIME, A_TIME},      {"ExecutionTime", AT_EXECUTION_TIME, A_TIME},
};

/* Temporal's status spellings, matched case-insensitively; index = number. */
static const char *const status_names[] = {
    NULL,         "Running",    "Completed",      "Failed",
    "Canceled",   "Terminated", "ContinuedAsNew", "TimedOut",
};

typedef enum {
  OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE, /* comparisons, in token order */
  OP_IN, OP_PREFIX, OP_BETWEEN, OP_NULL, OP_NOTNULL,
} op_id;

typedef struct value {
  const char *s; /* A_STR: decoded text, NUL-terminated */
  size_t len;
  int64_t n; /* A_STATUS: status number; A_TIME: ns since the epoch; A_BOOL: 0/1 */
  double d;  /* A_NUM */
  struct value *next; /* IN lists */
} value;

typedef enum { N_AND, N_OR, N_PRED } node_kind;

typedef struct node {
  node_kind kind;
  struct node *kids; /* N_AND, N_OR: first child */
  struct node *next; /* sibling in the parent's list */
  attr_id attr;      /* N_PRED */
  atype type;
  op_id op;
  value *vals; /* one value; IN: a list; BETWEEN: low then high */
  const char *sa_name; /* AT_CUSTOM */
  int sa_list;         /* AT_CUSTOM of a KeywordList: any element matches */
} node;

typedef struct block {
  struct block *next;
  max_align_t data[];
} block;

struct dbx_visq {
  node *root; /* NULL = match all */
  int order_desc;
  block *blocks;
};

static void *qalloc(dbx_visq *q, size_t size) {
  block *b = dbx_malloc(sizeof(block) + size);
  if (b == NULL) return NULL;
  b->next = q->blocks;
  q->blocks = b;
  memset(b->data, 0, size);
  return b->data;
}

/* ---- lexer ---- */

typedef enum { T_EOF, T_IDENT, T_STRING, T_NUMBER, T_OP, T_LPAREN, T_RPAREN, T_COMMA } tkind;

typedef struct {
  tkind kind;
  size_t pos; /* byte offset of the first character */
  size_t len; /* raw length in the source */
  op_id op;   /* T_OP */
} token;

typedef struct {
  const char *src;
  size_t len;
  size_t pos; /* lexer position */
  token tok;  /* current token */
  int failed;
  int oom; /* the failure is an allocation failure */
  int depth;
  char *errbuf;
  size_t errlen;
  dbx_visq *q;
  const dbx_visq_sa_def *defs;
  size_t n_defs;
} parser;

static void fail(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(parser *p, size_t pos, const char *fmt, ...) {
  if (p->failed) return;
  p->failed = 1;
  if (p->errbuf == NULL || p->errlen == 0) return;
  int n = snprintf(p->errbuf, p->errlen, "invalid query at %zu: ", pos + 1);
  if (n < 0 || (size_t)n >= p->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->errbuf + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

static void fail_oom(parser *p, size_t pos) {
  if (!p->failed) p->oom = 1;
  fail(p, pos, "out of memory");
}

/* A printable rendering of source bytes [pos, pos+len): at most 40 bytes,
 * control characters as '?', a longer text ends with "...". */
static const char *show(const parser *p, size_t pos, size_t len, char buf[48]) {
  size_t n = len > 40 ? 40 : len, i;
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p->src[pos + i];
    buf[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
  }
  if (len > n) {
    memcpy(buf + i, "...", 3);
    i += 3;
  }
  buf[i] = '\0';
  return buf;
}

/* "end of query", or the token's text in quotes (a string token shows its
 * own quotes). */
static const char *describe(const parser *p, const token *t, char buf[56]) {
  char raw[48];
  if (t->kind == T_EOF) return "end of query";
  show(p, t->pos, t->len, raw);
  if (t->kind == T_STRING)
    snprintf(buf, 56, "%s", raw);
  else
    snprintf(buf, 56, "'%s'", raw);
  return buf;
}

static int is_ident_start(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
static int is_digit(char c) {
  return c >= '0' && c <= '9';
}
static int is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void next(parser *p) {
  if (p->failed) return;
  while (p->pos < p->len && is_blank(p->src[p->pos])) p->pos++;
  token *t = &p->tok;
  t->pos = p->pos;
  t->len = 0;
  if (p->pos >= p->len) {
    t->kind = T_EOF;
    return;
  }
  const char *s = p->src;
  size_t i = p->pos;
  char c = s[i];
  if (is_ident_start(c)) {
    while (i < p->len && (is_ident_start(s[i]) || is_digit(s[i]))) i++;
    t->kind = T_IDENT;
  } else if (is_digit(c) || (c == '-' && i + 1 < p->len && is_digit(s[i + 1]))) {
    i++;
    while (i < p->len && (is_digit(s[i]) || s[i] == '.')) i++;
    t->kind = T_NUMBER;
  } else if (c == '\'' || c == '"') {
    i++;
    while (i < p->len && s[i] != c) i += (s[i] == '\\') ? 2 : 1;
    if (i >= p->len) {
      fail(p, t->pos, "unterminated string");
      return;
    }
    i++;
    t->kind = T_STRING;
  } else if (c == '(' || c == ')' || c == ',') {
    i++;
    t->kind = c == '(' ? T_LPAREN : c == ')' ? T_RPAREN : T_COMMA;
  } else if (c == '=' || c == '!' || c == '<' || c == '>') {
    char d = i + 1 < p->len ? s[i + 1] : '\0';
    t->kind = T_OP;
    if (c == '=') {
      t->op = OP_EQ;
      i++;
    } else if (c == '!' && d == '=') {
      t->op = OP_NE;
      i += 2;
    } else if (c == '<') {
      t->op = d == '=' ? OP_LE : OP_LT;
      i += d == '=' ? 2 : 1;
    } else if (c == '>') {
      t->op = d == '=' ? OP_GE : OP_GT;
      i += d == '=' ? 2 : 1;
    } else {
      fail(p, t->pos, "unexpected character '!'");
      return;
    }
  } else {
    unsigned char u = (unsigned char)c;
    if (u > 0x20 && u < 0x7f)
      fail(p, t->pos, "unexpected character '%c'", c);
    else
      fail(p, t->pos, "unexpected byte 0x%02X", u);
    return;
  }
  t->len = i - t->pos;
  p->pos = i;
}

/* Is the current token the keyword kw (case-insensitive, whole word)? */
static int is_kw(const parser *p, const char *kw) {
  if (p->failed || p->tok.kind != T_IDENT) return 0;
  size_t n = strlen(kw);
  if (p->tok.len != n) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = p->src[p->tok.pos + i];
    if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
    if (c != kw[i]) return 0;
  }
  return 1;
}

/* Text of the string token t without quotes, escapes decoded: \n \t \r, and
 * a backslash before any other character keeps that character. */
static value *string_value(parser *p, const token *t) {
  value *v = qalloc(p->q, sizeof(value));
  char *out = v ? qalloc(p->q, t->len) : NULL;
  if (out == NULL) {
    fail_oom(p, t->pos);
    return NULL;
  }
  size_t n = 0;
  for (size_t i = t->pos + 1; i < t->pos + t->len - 1; i++) {
    char c = p->src[i];
    if (c == '\\') {
      c = p->src[++i];
      c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
    }
    out[n++] = c;
  }
  out[n] = '\0';
  v->s = out;
  v->len = n;
  return v;
}

/* ---- RFC 3339 times ---- */

/* Days since 1970-01-01 of a proleptic Gregorian date (civil calendar with
 * the year starting in March, so the leap day is the last day of a year). */
static int64_t days_from_civil(int64_t y, int m, int d) {
  if (m <= 2) y--;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t mp = m > 2 ? m - 3 : m + 9;
  int64_t doy = (153 * mp + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int digits(const char *s, size_t n, int *out) {
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(s[i])) return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM); 'T' may be 't' or a
 * space, 'Z' may be 'z', the fraction has 1 to 9 digits.
 * Returns 0 and *ns, -1 (malformed), -2 (outside the int64 ns range). */
static int parse_time(const char *s, size_t n, int64_t *ns) {
  int y, mo, d, h, mi, sec, frac = 0, off = 0;
  static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (n < 20) return -1;
  if (digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) || s[7] != '-' ||
      digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &mi) || s[16] != ':' ||
      digits(s + 17, 2, &sec))
    return -1;
  size_t i = 19;
  if (s[i] == '.') {
    size_t k = 0;
    i++;
    while (i < n && is_digit(s[i]) && k < 10) {
      if (k < 9) frac = frac * 10 + (s[i] - '0'); /* a 10th digit is refused below, not added */
      i++;
      k++;
    }
    if (k == 0 || k > 9) return -1;
    for (; k < 9; k++) frac *= 10;
  }
  if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
    i++;
  } else if (i < n && (s[i] == '+' || s[i] == '-')) {
    int oh, om;
    if (n - i != 6 || digits(s + i + 1, 2, &oh) || s[i + 3] != ':' || digits(s + i + 4, 2, &om) ||
        oh > 23 || om > 59)
      return -1;
    off = (oh * 60 + om) * 60 * (s[i] == '-' ? -1 : 1);
    i += 6;
  } else {
    return -1;
  }
  if (i != n) return -1;
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (mo == 2 && leap) || h > 23 || mi > 59 ||
      sec > 59)
    return -1;
  int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
  /* int64 ns spans 1677-09-21T00:12:43.145224192Z .. 2262-04-11T23:47:16.854775807Z;
   * the first 0.85 s of that span are refused too, to keep the check simple. */
  const int64_t lim = INT64_MAX / 1000000000;
  if (secs > lim || secs < -lim) return -2;
  int64_t base = secs * 1000000000;
  if (base > INT64_MAX - frac) return -2;
  *ns = base + frac;
  return 0;
}

/* ---- parser ---- */

static node *parse_or(parser *p);

/* v->s as a number (A_NUM) or true/false (A_BOOL); 0 after failing. */
static int scalar_value(parser *p, const token *t, atype ty, value *v) {
  char b[56];
  if (ty == A_BOOL) {
    if (v->len == 4 && strncasecmp(v->s, "true", 4) == 0) v->n = 1;
    else if (v->len == 5 && strncasecmp(v->s, "false", 5) == 0) v->n = 0;
    else {
      fail(p, t->pos, "expected true or false, found %s", describe(p, t, b));
      return 0;
    }
    return 1;
  }
  char *end = NULL;
  v->d = strtod(v->s, &end);
  if (v->len == 0 || end != v->s + v->len) {
    fail(p, t->pos, "expected a number, found %s", describe(p, t, b));
    return 0;
  }
  return 1;
}

/* A value for an attribute of type ty at the current token; advances. */
static value *parse_value(parser *p, atype ty) {
  char b[56];
  token t = p->tok;
  if (p->failed) return NULL;
  if ((ty == A_NUM && t.kind == T_NUMBER) || (ty == A_BOOL && t.kind == T_IDENT)) {
    value *v = qalloc(p->q, sizeof(value));
    char *txt = v ? qalloc(p->q, t.len + 1) : NULL;
    if (txt == NULL) {
      fail_oom(p, t.pos);
      return NULL;
    }
    memcpy(txt, p->src + t.pos, t.len);
    v->s = txt;
    v->len = t.len;
    if (!scalar_value(p, &t, ty, v)) return NULL;
    next(p);
    return v;
  }
  if (t.kind != T_STRING) {
    fail(p, t.pos, "expected a quoted value, found %s", describe(p, &t, b));
    return NULL;
  }
  value *v = string_value(p, &t);
  if (v == NULL) return NULL;
  if ((ty == A_NUM || ty == A_BOOL) && !scalar_value(p, &t, ty, v)) return NULL;
  if (ty == A_STATUS) {
    size_t k;
    for (k = 1; k < sizeof status_names / sizeof *status_names; k++)
      if (strlen(status_names[k]) == v->len && strncasecmp(status_names[k], v->s, v->len) == 0)
        break;
    if (k == sizeof status_names / sizeof *status_names) {
      fail(p, t.pos, "unknown execution status %s", describe(p, &t, b));
      return NULL;
    }
    v->n = (int64_t)k;
  } else if (ty == A_TIME) {
    int rc = parse_time(v->s, v->len, &v->n);
    if (rc == -1) {
      fail(p, t.pos, "invalid time %s, expected RFC3339 such as '2024-01-02T03:04:05Z'",
           describe(p, &t, b));
      return NULL;
    }
    if (rc == -2) {
      fail(p, t.pos, "time %s out of range", describe(p, &t, b));
      return NULL;
    }
  }
  next(p);
  return v;
}

static node *parse_pred(parser *p) {
  char b[56];
  token at = p->tok;
  if (at.kind != T_IDENT || is_kw(p, "AND") || is_kw(p, "OR") || is_kw(p, "ORDER")) {
    fail(p, at.pos, "expected an attribute name, found %s", describe(p, &at, b));
    return NULL;
  }
  size_t k;
  for (k = 0; k < sizeof attrs / sizeof *attrs; k++)
    if (strlen(attrs[k].name) == at.len && memcmp(attrs[k].name, p->src + at.pos, at.len) == 0)
      break;
  size_t ci = SIZE_MAX;
  for (size_t i = 0; k == sizeof attrs / sizeof *attrs && i < p->n_defs; i++)
    if (strlen(p->defs[i].name) == at.len && memcmp(p->defs[i].name, p->src + at.pos, at.len) == 0) ci = i;
  if (k == sizeof attrs / sizeof *attrs && ci == SIZE_MAX) {
    if (p->defs) {
      char raw[48];
      fail(p, at.pos, "search attribute %s is not defined", show(p, at.pos, at.len, raw));
    } else {
      fail(p, at.pos, "unknown attribute %s", describe(p, &at, b));
    }
    return NULL;
  }
  node *n = qalloc(p->q, sizeof(node));
  if (n == NULL) {
    fail_oom(p, at.pos);
    return NULL;
  }
  n->kind = N_PRED;
  const char *aname;
  if (ci != SIZE_MAX) {
    int ty = p->defs[ci].type;
    char *nm = qalloc(p->q, at.len + 1);
    if (nm == NULL) {
      fail_oom(p, at.pos);
      return NULL;
    }
    memcpy(nm, p->src + at.pos, at.len);
    n->attr = AT_CUSTOM;
    n->sa_name = nm;
    n->sa_list = ty == DBX_VISQ_SA_KEYWORD_LIST;
    n->type = ty == DBX_VISQ_SA_INT || ty == DBX_VISQ_SA_DOUBLE ? A_NUM
              : ty == DBX_VISQ_SA_BOOL                          ? A_BOOL
              : ty == DBX_VISQ_SA_DATETIME                      ? A_TIME
                                                                : A_STR;
    aname = nm;
  } else {
    n->attr = attrs[k].id;
    n->type = attrs[k].type;
    aname = attrs[k].name;
  }
  next(p);
  token ot = p->tok;
  if (p->failed) return NULL;
  if (ot.kind == T_OP) {
    n->op = ot.op;
    next(p);
    n->vals = parse_value(p, n->type);
  } else if (is_kw(p, "IN")) {
    if (n->type == A_TIME) {
      fail(p, ot.pos, "IN needs a string attribute or ExecutionStatus, not '%s'", aname);
      return NULL;
    }
    n->op = OP_IN;
    next(p);
    if (!p->failed && p->tok.kind != T_LPAREN) {
      fail(p, p->tok.pos, "expected '(' after IN, found %s", describe(p, &p->tok, b));
      return NULL;
    }
    value **tail = &n->vals;
    do {
      next(p);
      *tail = parse_value(p, n->type);
      if (*tail == NULL) return NULL;
      tail = &(*tail)->next;
    } while (!p->failed && p->tok.kind == T_COMMA);
    if (!p->failed && p->tok.kind != T_RPAREN) {
      fail(p, p->tok.pos, "expected ',' or ')' in IN list, found %s", describe(p, &p->tok, b));
      return NULL;
    }
    next(p);
  } else if (is_kw(p, "STARTS_WITH")) {
    if (n->type != A_STR) {
      fail(p, ot.pos, "STARTS_WITH needs a string attribute, not '%s'", aname);
      return NULL;
    }
    n->op = OP_PREFIX;
    next(p);
    n->vals = parse_value(p, n->type);
  } else if (is_kw(p, "BETWEEN")) {
    if (n->type != A_TIME) {
      fail(p, ot.pos, "BETWEEN needs a time attribute, not '%s'", aname);
      return NULL;
    }
    n->op = OP_BETWEEN;
    next(p);
    n->vals = parse_value(p, n->type);
    if (n->vals == NULL) return NULL;
    if (!is_kw(p, "AND")) {
      fail(p, p->tok.pos, "expected AND in BETWEEN, found %s", describe(p, &p->tok, b));
      return NULL;
    }
    next(p);
    n->vals->next = parse_value(p, n->type);
  } else if (is_kw(p, "IS")) {
    next(p);
    n->op = OP_NULL;
    if (is_kw(p, "NOT")) {
      n->op = OP_NOTNULL;
      next(p);
    }
    if (!is_kw(p, "NULL")) {
      if (!p->failed)
        fail(p, p->tok.pos, "expected NULL after IS, found %s", describe(p, &p->tok, b));
      return NULL;
    }
    next(p);
  } else {
    fail(p, ot.pos, "expected an operator after '%s', found %s", aname, describe(p, &ot, b));
    return NULL;
  }
  return p->failed ? NULL : n;
}

static node *parse_primary(parser *p) {
  char b[56];
  if (p->failed) return NULL;
  if (p->tok.kind != T_LPAREN) return parse_pred(p);
  if (p->depth >= DBX_VISQ_MAX_DEPTH) {
    fail(p, p->tok.pos, "parentheses nested deeper than %d", DBX_VISQ_MAX_DEPTH);
    return NULL;
  }
  p->depth++;
  next(p);
  node *n = parse_or(p);
  if (n == NULL) return NULL;
  if (p->tok.kind != T_RPAREN) {
    fail(p, p->tok.pos, "expected ')', found %s", describe(p, &p->tok, b));
    return NULL;
  }
  p->depth--;
  next(p);
  return p->failed ? NULL : n;
}

/* sub (KW sub)* as one n-ary node of kind k (or sub itself when alone). */
static node *parse_chain(parser *p, node_kind k, const char *kw, node *(*sub)(parser *)) {
  node *first = sub(p);
  if (first == NULL || !is_kw(p, kw)) return first;
  node *n = qalloc(p->q, sizeof(node));
  if (n == NULL) {
    fail_oom(p, p->tok.pos);
    return NULL;
  }
  n->kind = k;
  n->kids = first;
  node *last = first;
  while (is_kw(p, kw)) {
    next(p);
    node *c = sub(p);
    if (c == NULL) return NULL;
    last->next = c;
    last = c;
  }
  return p->failed ? NULL : n;
}

static node *parse_and(parser *p) {
  return parse_chain(p, N_AND, "AND", parse_primary);
}
static node *parse_or(parser *p) {
  return parse_chain(p, N_OR, "OR", parse_and);
}

/* query := [or] [ORDER BY StartTime [ASC|DESC]] end */
static void parse_query(parser *p) {
  char b[56];
  next(p);
  if (!p->failed && p->tok.kind != T_EOF && !is_kw(p, "ORDER")) {
    p->q->root = parse_or(p);
    if (p->failed) return;
    if (p->tok.kind != T_EOF && !is_kw(p, "ORDER")) {
      fail(p, p->tok.pos, "expected AND, OR or ORDER BY, found %s", describe(p, &p->tok, b));
      return;
    }
  }
  if (is_kw(p, "ORDER")) {
    next(p);
    if (!is_kw(p, "BY")) {
      if (!p->failed)
        fail(p, p->tok.pos, "expected BY after ORDER, found %s", describe(p, &p->tok, b));
      return;
    }
    next(p);
    if (p->failed) return;
    if (p->tok.kind != T_IDENT || p->tok.len != 9 || memcmp(p->src + p->tok.pos, "StartTime", 9)) {
      fail(p, p->tok.pos, "ORDER BY supports only StartTime, found %s", describe(p, &p->tok, b));
      return;
    }
    next(p);
    p->q->order_desc = 0; /* SQL's default direction is ascending */
    if (is_kw(p, "DESC")) {
      p->q->order_desc = 1;
      next(p);
    } else if (is_kw(p, "ASC")) {
      next(p);
    }
    if (!p->failed && p->tok.kind != T_EOF)
      fail(p, p->tok.pos, "expected end of query after ORDER BY, found %s",
           describe(p, &p->tok, b));
  }
}

dbx_err dbx_visq_create(const char *query, dbx_visq **out, char *errbuf, size_t errlen) {
  return dbx_visq_create_sa(query, NULL, 0, out, errbuf, errlen);
}

dbx_err dbx_visq_create_sa(const char *query, const dbx_visq_sa_def *defs, size_t n_defs, dbx_visq **out,
                           char *errbuf, size_t errlen) {
  if (errbuf != NULL && errlen > 0) errbuf[0] = '\0';
  if (out == NULL) {
    if (errbuf != NULL && errlen > 0) snprintf(errbuf, errlen, "invalid query: no output pointer");
    return DBX_EINVAL;
  }
  *out = NULL;
  if (query == NULL) query = "";
  size_t len = strnlen(query, DBX_VISQ_MAX_QUERY_BYTES + 1);
  if (len > DBX_VISQ_MAX_QUERY_BYTES) {
    if (errbuf != NULL && errlen > 0)
      snprintf(errbuf, errlen, "invalid query: longer than %d bytes", DBX_VISQ_MAX_QUERY_BYTES);
    return DBX_EINVAL;
  }
  dbx_visq *q = dbx_calloc(1, sizeof *q);
  if (q == NULL) {
    if (errbuf != NULL && errlen > 0) snprintf(errbuf, errlen, "out of memory");
    return DBX_ENOMEM;
  }
  q->order_desc = 1;
  parser p = {.src = query, .len = len, .errbuf = errbuf, .errlen = errlen, .q = q, .defs = defs, .n_defs = n_defs};
  parse_query(&p);
  if (p.failed) {
    dbx_visq_destroy(q);
    return p.oom ? DBX_ENOMEM : DBX_EINVAL;
  }
  *out = q;
  return DBX_OK;
}

/* ---- evaluation ---- */

static int cmp_result(int c, op_id op) {
  switch (op) {
  case OP_EQ: return c == 0;
  case OP_NE: return c != 0;
  case OP_GT: return c > 0;
  case OP_GE: return c >= 0;
  case OP_LT: return c < 0;
  case OP_LE: return c <= 0;
  default: return 0;
  }
}

static int cmp_str(const char *s, const value *v) {
  size_t n = strlen(s);
  int c = memcmp(s, v->s, n < v->len ? n : v->len);
  if (c != 0) return c;
  return n < v->len ? -1 : n > v->len;
}

static int cmp_num(int64_t a, int64_t b) {
  return a < b ? -1 : a > b;
}

/* ---- custom search attribute values (JSON text) ---- */

/* One JSON scalar at js[*i..n): a string (decoded into buf, at most cap-1
 * bytes; longer ones are cut), a number, true/false or null. Sets *kind
 * 's', 'n', 'b', 'z' and advances *i; 0 when it is not a scalar. */
static int json_scalar(const char *js, size_t n, size_t *i, char *buf, size_t cap, size_t *blen, double *num,
                       int *kind) {
  while (*i < n && is_blank(js[*i])) (*i)++;
  if (*i >= n) return 0;
  if (js[*i] == '"') {
    size_t o = 0;
    for ((*i)++; *i < n && js[*i] != '"'; (*i)++) {
      char c = js[*i];
      if (c == '\\' && *i + 1 < n) {
        c = js[++(*i)];
        c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
      }
      if (o + 1 < cap) buf[o++] = c;
    }
    if (*i >= n) return 0;
    (*i)++;
    buf[o] = '\0';
    *blen = o;
    *kind = 's';
    return 1;
  }
  if (n - *i >= 4 && memcmp(js + *i, "true", 4) == 0) {
    *i += 4;
    *num = 1;
    *kind = 'b';
    return 1;
  }
  if (n - *i >= 5 && memcmp(js + *i, "false", 5) == 0) {
    *i += 5;
    *num = 0;
    *kind = 'b';
    return 1;
  }
  if (n - *i >= 4 && memcmp(js + *i, "null", 4) == 0) {
    *i += 4;
    *kind = 'z';
    return 1;
  }
  char tmp[64];
  size_t k = 0;
  while (*i < n && k + 1 < sizeof tmp && (is_digit(js[*i]) || strchr("+-.eE", js[*i]))) tmp[k++] = js[(*i)++];
  tmp[k] = '\0';
  char *end = NULL;
  *num = strtod(tmp, &end);
  if (k == 0 || end != tmp + k) return 0;
  *kind = 'n';
  return 1;
}

/* Does one scalar of a custom attribute satisfy n? */
static int eval_custom_scalar(const node *n, const char *s, size_t slen, double num, int kind) {
  value sv = {.s = s, .len = slen};
  int64_t t = 0;
  if (n->type == A_STR && kind != 's') return 0;
  if (n->type == A_NUM && kind != 'n') return 0;
  if (n->type == A_BOOL && kind != 'b') return 0;
  if (n->type == A_TIME && (kind != 's' || parse_time(s, slen, &t) != 0)) return 0;
  switch (n->op) {
  case OP_IN:
    for (const value *v = n->vals; v != NULL; v = v->next) {
      if (n->type == A_STR ? cmp_str(s, v) == 0 && strlen(s) == slen
          : n->type == A_NUM ? num == v->d
          : n->type == A_BOOL ? (int64_t)num == v->n
                              : t == v->n)
        return 1;
    }
    return 0;
  case OP_PREFIX: return n->type == A_STR && strncmp(s, n->vals->s, n->vals->len) == 0;
  case OP_BETWEEN: return t >= n->vals->n && t <= n->vals->next->n;
  default: break;
  }
  int c = n->type == A_STR    ? -cmp_str(n->vals->s, &sv)
          : n->type == A_NUM  ? (num < n->vals->d ? -1 : num > n->vals->d)
          : n->type == A_BOOL ? cmp_num((int64_t)num, n->vals->n)
                              : cmp_num(t, n->vals->n);
  return cmp_result(c, n->op);
}

static int eval_custom(const node *n, const dbx_visq_record *r) {
  const dbx_visq_sa_value *sv = NULL;
  for (size_t i = 0; r->sa && i < r->n_sa; i++)
    if (strcmp(r->sa[i].name, n->sa_name) == 0) sv = &r->sa[i];
  const char *js = sv ? sv->json : NULL;
  size_t len = sv ? sv->json_len : 0, i = 0;
  while (i < len && is_blank(js[i])) i++;
  int present = sv && i < len && !(len - i >= 4 && memcmp(js + i, "null", 4) == 0) &&
                !(len - i >= 2 && js[i] == '[' && js[i + 1] == ']');
  if (n->op == OP_NULL) return !present;
  if (n->op == OP_NOTNULL) return present;
  if (!present) return 0;
  char buf[1024];
  size_t blen = 0;
  double num = 0;
  int kind = 0;
  if (js[i] != '[') return json_scalar(js, len, &i, buf, sizeof buf, &blen, &num, &kind) &&
                           eval_custom_scalar(n, buf, blen, num, kind);
  /* a list: any element (KeywordList, and SDKs that send one-element lists) */
  i++;
  for (;;) {
    if (!json_scalar(js, len, &i, buf, sizeof buf, &blen, &num, &kind)) return 0;
    int m = eval_custom_scalar(n, buf, blen, num, kind);
    if (n->op == OP_NE ? !m : m) return n->op != OP_NE;
    while (i < len && is_blank(js[i])) i++;
    if (i < len && js[i] == ']') return n->op == OP_NE; /* every element differed */
    if (i >= len || js[i] != ',') return 0;             /* not a list: matches nothing */
    i++;
  }
}

static int eval_pred(const node *n, const dbx_visq_record *r) {
  if (n->attr == AT_CUSTOM) return eval_custom(n, r);
  const char *s = NULL;
  int64_t x = 0;
  int present;
  switch (n->attr) {
  case AT_WORKFLOW_ID: s = r->workflow_id; break;
  case AT_WORKFLOW_TYPE: s = r->workflow_type; break;
  case AT_TASK_QUEUE: s = r->task_queue; break;
  case AT_RUN_ID: s = r->run_id; break;
  case AT_STATUS: x = r->status; break;
  case AT_START_TIME: x = r->start_time_ns; break;
  case AT_CLOSE_TIME: x = r->close_time_ns; break;
  case AT_EXECUTION_TIME: x = r->execution_time_ns; break;
  case AT_CUSTOM: break;
  }
  present = n->type == A_STR ? s != NULL : x != 0;
  if (n->op == OP_NULL) return !present;
  if (n->op == OP_NOTNULL) return present;
  if (!present) return 0;
  switch (n->op) {
  case OP_IN:
    for (const value *v = n->vals; v != NULL; v = v->next)
      if (n->type == A_STR ? cmp_str(s, v) == 0 : x == v->n) return 1;
    return 0;
  case OP_PREFIX: return strncmp(s, n->vals->s, n->vals->len) == 0;
  case OP_BETWEEN: return x >= n->vals->n && x <= n->vals->next->n;
  default:
    return cmp_result(n->type == A_STR ? cmp_str(s, n->vals) : cmp_num(x, n->vals->n), n->op);
  }
}

static int eval(const node *n, const dbx_visq_record *r) {
  switch (n->kind) {
  case N_AND:
    for (const node *c = n->kids; c != NULL; c = c->next)
      if (!eval(c, r)) return 0;
    return 1;
  case N_OR:
    for (const node *c = n->kids; c != NULL; c = c->next)
      if (eval(c, r)) return 1;
    return 0;
  case N_PRED: return eval_pred(n, r);
  }
  return 0;
}

int dbx_visq_match(const dbx_visq *q, const dbx_visq_record *r) {
  if (r == NULL) return 0;
  if (q == NULL || q->root == NULL) return 1;
  return eval(q->root, r);
}

int dbx_visq_order_desc(const dbx_visq *q) {
  return q == NULL ? 1 : q->order_desc;
}

void dbx_visq_destroy(dbx_visq *q) {
  if (q == NULL) return;
  block *b = q->blocks;
  while (b != NULL) {
    block *nb = b->next;
    free(b);
    b = nb;
  }
  free(q);
}

const char *dbx_visq_status_name(int status) {
  if (status <= 0 || (size_t)status >= sizeof status_names / sizeof *status_names) return NULL;
  return status_names[status];
}

static int is_word_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

int dbx_visq_split_group_by(const char *query, size_t *cut, const char **attr, size_t *attr_len) {
  if (query == NULL) return 0;
  /* the last "group" outside quotes that starts a word */
  const char *found = NULL;
  char quote = 0;
  for (const char *p = query; *p; p++) {
    if (quote) {
      if (*p == '\\' && p[1]) p++;
      else if (*p == quote) quote = 0;
    } else if (*p == '\'' || *p == '"' || *p == '`') {
      quote = *p;
    } else if (strncasecmp(p, "group", 5) == 0 && (p == query || !is_word_char(p[-1])) && !is_word_char(p[5])) {
      found = p;
    }
  }
  if (found == NULL) return 0;
  const char *p = found + 5;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (strncasecmp(p, "by", 2) != 0 || is_word_char(p[2])) return 0;
  p += 2;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  const char *a = p;
  while (is_word_char(*p)) p++;
  size_t al = (size_t)(p - a);
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  if (al == 0 || *p != '\0') return 0; /* not a clause the parser should skip: left for it to refuse */
  *cut = (size_t)(found - query);
  *attr = a;
  *attr_len = al;
  return 1;
}
