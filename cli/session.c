/* Sessions: the turn before a turn, and the input a turn gets (session.h). */
#include "cli/session.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "cli/conn.h"
#include "protos/pb.h"

typedef struct {
  char *run_id;
  int status;       /* WorkflowExecutionStatus */
  int64_t start_ns; /* start time, for "newest" */
} run_row;

typedef struct {
  run_row *v;
  size_t n, cap;
} run_rows;

static void rows_free(run_rows *r) {
  for (size_t i = 0; i < r->n; i++) free(r->v[i].run_id);
  free(r->v);
  memset(r, 0, sizeof *r);
}

/* Add (or, for a run already there, update) the run of i. 0, or -1 on OOM. */
static int rows_put(run_rows *r, const WorkflowExecutionInfo *i) {
  if (i == NULL || i->execution == NULL || i->execution->run_id == NULL) return 0;
  int64_t st = i->start_time ? (int64_t)i->start_time->seconds * 1000000000 + i->start_time->nanos : 0;
  for (size_t k = 0; k < r->n; k++)
    if (strcmp(r->v[k].run_id, i->execution->run_id) == 0) {
      r->v[k].status = i->status; /* describe is the fresher word */
      return 0;
    }
  if (r->n == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 16;
    run_row *nv = realloc(r->v, nc * sizeof *nv);
    if (nv == NULL) return -1;
    r->v = nv;
    r->cap = nc;
  }
  char *id = dbx_strdup(i->execution->run_id);
  if (id == NULL) return -1;
  r->v[r->n++] = (run_row){.run_id = id, .status = i->status, .start_ns = st};
  return 0;
}

/* Every run of workflow id s: the listing's pages, then the latest run by
 * DescribeWorkflowExecution (a visibility store may lag behind a close or a
 * start). DBX_OK (none is no error), or the failed call's code and *err. */
static dbx_err list_runs(dbx_client *c, const char *s, run_rows *out, char **err) {
  char *q = dbx_asprintf("WorkflowId = '%s'", s);
  if (q == NULL) return DBX_ENOMEM;
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  dbx_err e = DBX_OK;
  do {
    ListWorkflowExecutionsResponse *r = NULL;
    e = dbx_client_list(c, q, 0, tok, tok_len, &r, err);
    free(tok);
    tok = NULL;
    tok_len = 0;
    if (e != DBX_OK) break;
    for (size_t k = 0; k < r->n_executions && e == DBX_OK; k++) {
      const WorkflowExecutionInfo *i = r->executions[k];
      if (i->execution && i->execution->workflow_id && strcmp(i->execution->workflow_id, s) == 0 &&
          rows_put(out, i) != 0)
        e = DBX_ENOMEM;
    }
    if (e == DBX_OK && r->next_page_token.len) {
      tok = malloc(r->next_page_token.len);
      if (tok == NULL) e = DBX_ENOMEM;
      else memcpy(tok, r->next_page_token.data, tok_len = r->next_page_token.len);
    }
    dbx_client_msg_free(r);
  } while (e == DBX_OK && tok != NULL);
  free(q);
  if (e != DBX_OK) return e;
  DescribeWorkflowExecutionResponse *d = NULL;
  e = dbx_client_describe(c, s, NULL, &d, err);
  if (e == DBX_ENOTFOUND) { /* no run of s at all */
    free(*err);
    *err = NULL;
    e = DBX_OK;
  } else if (e == DBX_OK && rows_put(out, d->workflow_execution_info) != 0) {
    e = DBX_ENOMEM;
  }
  dbx_client_msg_free(d);
  return e;
}

/* The newest completed run (NULL: none), how many completed runs started
 * before `before_ns` (INT64_MAX: all), and the open run (NULL: none). */
static const run_row *newest_completed(const run_rows *r, int64_t before_ns, int *count) {
  const run_row *best = NULL;
  *count = 0;
  for (size_t k = 0; k < r->n; k++) {
    if (r->v[k].status != WS(COMPLETED) || r->v[k].start_ns >= before_ns) continue;
    (*count)++;
    if (best == NULL || r->v[k].start_ns > best->start_ns) best = &r->v[k];
  }
  return best;
}

static const run_row *open_run(const run_rows *r) {
  for (size_t k = 0; k < r->n; k++)
    if (r->v[k].status == WS(RUNNING)) return &r->v[k];
  return NULL;
}

/* The result of completed run (s, run) as a JSON tree (NULL: none or not
 * JSON); DBX_OK or the failed call's code and *err. */
static dbx_err result_of(dbx_client *c, const char *s, const char *run, cJSON **out, char **err) {
  *out = NULL;
  dbx_client_history h = {0};
  dbx_client_history_opts o = {.close_event_only = 1};
  dbx_err e = dbx_client_get_history(c, s, run, &o, &h, err);
  if (e == DBX_OK && h.n > 0 && h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
    char *txt = dbx_payloads_to_json(h.events[h.n - 1]->workflow_execution_completed_event_attributes->result);
    if (txt == NULL) e = DBX_ENOMEM;
    else *out = cJSON_Parse(txt);
    free(txt);
  }
  dbx_client_history_cleanup(&h);
  return e;
}

static void say(const char *cmd, int json, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(const char *cmd, int json, const char *type, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "durabox %s: %s\n", cmd, msg);
  if (json) dbx_cli_json_error(type, msg);
}

/* A session id goes into a visibility query between single quotes. */
#define SESSION_ID_RULE "a session id is a workflow id without quotes, backslashes or control characters"

static int session_id_ok(const char *s) {
  if (s == NULL || !*s) return 0;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f || *p == '\'' || *p == '"' || *p == '\\') return 0;
  return 1;
}

/* The turn's input: input_json (NULL: {}) with "session" added. NULL with
 * *why set when input_json is no object or has a "session" of its own. */
static char *turn_input(const char *input_json, const char *s, int turn, const char *prev, cJSON *state,
                        const char **why) {
  cJSON *in = input_json ? cJSON_Parse(input_json) : cJSON_CreateObject();
  char *txt = NULL;
  *why = NULL;
  if (!cJSON_IsObject(in)) {
    *why = in ? "the input must be a JSON object to take a \"session\" field" : "out of memory";
    goto out;
  }
  if (cJSON_HasObjectItem(in, "session")) {
    *why = "the input has a \"session\" field of its own; --session adds it";
    goto out;
  }
  cJSON *se = cJSON_AddObjectToObject(in, "session");
  if (se == NULL || !cJSON_AddStringToObject(se, "id", s) || !cJSON_AddNumberToObject(se, "turn", turn) ||
      !(prev ? cJSON_AddStringToObject(se, "previous_run_id", prev) : cJSON_AddNullToObject(se, "previous_run_id"))) {
    *why = "out of memory";
    goto out;
  }
  cJSON *st = state ? cJSON_Duplicate(state, 1) : cJSON_CreateNull();
  if (st == NULL || !cJSON_AddItemToObject(se, "state", st)) {
    cJSON_Delete(st);
    *why = "out of memory";
    goto out;
  }
  txt = cJSON_PrintUnformatted(in);
  if (txt == NULL) *why = "out of memory";
out:
  cJSON_Delete(in);
  return txt;
}

int dbx_cli_session_check_id(const char *cmd, const char *session) {
  if (session_id_ok(session)) return 0;
  fprintf(stderr, "durabox %s: --session: %s\n", cmd, SESSION_ID_RULE);
  return 2;
}

int dbx_cli_session_prepare(dbx_client *c, const char *cmd, const char *address, int json,
                            const char *session, const char *input_json,
                            dbx_cli_session_turn *out) {
  memset(out, 0, sizeof *out);
  if (!session_id_ok(session)) {
    say(cmd, json, "InvalidArgument", "--session: %s", SESSION_ID_RULE);
    return 2;
  }
  run_rows rows = {0};
  char *err = NULL;
  cJSON *res = NULL;
  int rc = 1;
  dbx_err e = list_runs(c, session, &rows, &err);
  if (e != DBX_OK) {
    dbx_cli_report("session: listing the turns", address, e, err);
    if (json) dbx_cli_json_error(dbx_strerror(e), err ? err : dbx_strerror(e));
    goto out;
  }
  int count = 0;
  const run_row *open = open_run(&rows);
  if (open != NULL) {
    (void)newest_completed(&rows, open->start_ns, &count);
    say(cmd, json, "WorkflowExecutionAlreadyStarted", "session %s: turn %d (run %s) is still running",
        session, count + 1, open->run_id);
    goto out;
  }
  const run_row *prev = newest_completed(&rows, INT64_MAX, &count);
  if (prev != NULL && (e = result_of(c, session, prev->run_id, &res, &err)) != DBX_OK) {
    dbx_cli_report("session: reading the previous turn's result", address, e, err);
    if (json) dbx_cli_json_error(dbx_strerror(e), err ? err : dbx_strerror(e));
    goto out;
  }
  cJSON *state = cJSON_GetObjectItemCaseSensitive(res, "session_state");
  const char *why = NULL;
  out->turn = count + 1;
  out->input_json = turn_input(input_json, session, out->turn, prev ? prev->run_id : NULL, state, &why);
  out->previous_run_id = prev ? dbx_strdup(prev->run_id) : NULL;
  if (out->input_json == NULL || (prev && out->previous_run_id == NULL)) {
    say(cmd, json, "InvalidArgument", "--session %s: %s", session, why ? why : "out of memory");
    dbx_cli_session_turn_free(out);
    rc = why && strcmp(why, "out of memory") != 0 ? 2 : 1;
    goto out;
  }
  rc = 0;
out:
  cJSON_Delete(res);
  free(err);
  rows_free(&rows);
  return rc;
}

void dbx_cli_session_turn_free(dbx_cli_session_turn *t) {
  if (t == NULL) return;
  free(t->previous_run_id);
  free(t->input_json);
  memset(t, 0, sizeof *t);
}

dbx_err dbx_cli_session_start(dbx_client *c, const dbx_client_start_opts *so, const char *session,
                              const dbx_cli_session_turn *t, char **run_id_out, char **errmsg) {
  dbx_client_start_opts o = *so;
  o.workflow_id = session;
  o.input_json = t->input_json;
  o.id_reuse_policy = TEMPORAL__API__ENUMS__V1__WORKFLOW_ID_REUSE_POLICY__WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE;
  dbx_err e = dbx_client_start_workflow(c, &o, run_id_out, errmsg);
  if (e == DBX_EEXIST && errmsg) {
    char *m = dbx_asprintf("session %s: a turn is still running (started meanwhile)", session);
    if (m) {
      free(*errmsg);
      *errmsg = m;
    }
  }
  return e;
}

int dbx_cli_session_owns(dbx_client *c, const char *session, const char *sandbox_id) {
  run_rows rows = {0};
  char *err = NULL;
  cJSON *res = NULL;
  int rc = -1, count = 0;
  if (session == NULL || sandbox_id == NULL) return 0;
  if (!session_id_ok(session)) return -1; /* not to be asked: cannot tell */
  if (list_runs(c, session, &rows, &err) != DBX_OK) goto out;
  const run_row *prev = newest_completed(&rows, INT64_MAX, &count);
  if (prev == NULL) {
    rc = 0;
    goto out;
  }
  if (result_of(c, session, prev->run_id, &res, &err) != DBX_OK) goto out;
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, "session_state"), "sandbox");
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(sb, "id");
  rc = cJSON_IsString(id) && strcmp(id->valuestring, sandbox_id) == 0;
out:
  cJSON_Delete(res);
  free(err);
  rows_free(&rows);
  return rc;
}
