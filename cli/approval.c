/* durabox approval list|grant|deny: a person's decisions.
 *
 * Held agent steps (workflows/agent.h): a durabox.Agent run holding a step
 * for approval shows it in its memo "durabox.approval"; `list` prints those
 * of the open runs (from the service: --address, TEMPORAL_ADDRESS, else
 * 127.0.0.1:7233), and `grant|deny WORKFLOW_ID --by NAME [--reason TEXT]`
 * sends the signal "durabox.approval" {step, decision, by, reason} for the
 * step that is held now (refused when none is).
 *
 * Repeated at_most_once calls, kept in the worker's store (worker/wstore.h
 * "at_most_once identities"):
 *
 * `list` prints the refusals the worker recorded (one line each, with the
 * input hash a grant needs); `grant` writes one approval record, which lets
 * one more call with that (workflow, run, type, input hash) run. Without
 * --run-id, grant takes the run of the matching refusal (it must be unique).
 * The store may be open in a running worker at the same time (LMDB allows
 * several processes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "cli/agentview.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/flags.h"
#include "worker/client.h"
#include "worker/wstore.h"

#define USAGE                                                                            \
  "usage: durabox approval list [--address A] [--db DIR]\n"                              \
  "       durabox approval grant|deny WORKFLOW_ID --by NAME [--reason TEXT] [--run-id R]\n" \
  "         decide the step a durabox.Agent run, or a fork's at_most_once step, holds\n"  \
  "       durabox approval grant --workflow-id ID [--run-id R] --activity-type T\n"      \
  "                              --input-hash H [--namespace NS] [--db DIR]\n"      \
  "         let a refused repeat of an at_most_once call run once\n"                    \
  "  --db DIR: the worker store (default $DURABOX_HOME/worker); with --db alone, list\n" \
  "  shows only its refusals\n"

/* The worker store at db, or NULL with the reason said and *rc set: 2 when
 * db is no worker store (a usage error, as replay's), 1 when it would not open. */
static dbx_wstore *open_store(const char *db, const char *what, int *rc) {
  char cmd[48];
  snprintf(cmd, sizeof cmd, "durabox approval %s", what);
  *rc = 2;
  if (dbx_cli_worker_store_check(cmd, db) != 0) return NULL;
  *rc = 1;
  dbx_wstore *s = NULL;
  char *err = NULL;
  dbx_err e = dbx_wstore_open(db, 0, &s, &err);
  if (e != DBX_OK) fprintf(stderr, "durabox approval %s: %s\n", what, err ? err : dbx_strerror(e));
  free(err);
  return s;
}

static int cmd_list(dbx_wstore *s) {
  dbx_wstore_refusal *r = NULL;
  size_t n = 0;
  dbx_err e = dbx_wstore_refusals_list(s, &r, &n);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox approval list: %s\n", dbx_strerror(e));
    return 1;
  }
  if (n == 0) printf("no refused at_most_once calls\n");
  for (size_t i = 0; i < n; i++)
    printf("namespace=%s workflow_id=%s run_id=%s activity_type=%s input_hash=%s "
           "activity_id=%s earlier_activity_id=%s approvals_left=%d\n",
           r[i].ns ? r[i].ns : "", r[i].workflow_id ? r[i].workflow_id : "",
           r[i].run_id ? r[i].run_id : "", r[i].activity_type ? r[i].activity_type : "",
           r[i].input_hash ? r[i].input_hash : "", r[i].activity_id ? r[i].activity_id : "",
           r[i].earlier_activity_id ? r[i].earlier_activity_id : "", r[i].approvals_left);
  dbx_wstore_refusals_free(r, n);
  return 0;
}

static int cmd_grant(dbx_wstore *s, const char *ns, const char *wid, const char *rid,
                     const char *type, const char *hash) {
  size_t hl = strlen(hash);
  int hex = hl == DBX_INPUT_HASH_LEN;
  for (size_t i = 0; hex && i < hl; i++)
    hex = (hash[i] >= '0' && hash[i] <= '9') || (hash[i] >= 'a' && hash[i] <= 'f');
  if (!hex) {
    fprintf(stderr, "durabox approval grant: --input-hash must be %d lowercase hex digits\n",
            DBX_INPUT_HASH_LEN);
    return 2;
  }
  char *run = NULL;
  if (!rid) { /* the run of the matching refusal */
    dbx_wstore_refusal *r = NULL;
    size_t n = 0, found = 0;
    if (dbx_wstore_refusals_list(s, &r, &n) == DBX_OK) {
      for (size_t i = 0; i < n; i++) {
        if (!r[i].ns || strcmp(r[i].ns, ns) || !r[i].workflow_id || strcmp(r[i].workflow_id, wid) ||
            !r[i].activity_type || strcmp(r[i].activity_type, type) || !r[i].input_hash ||
            strcmp(r[i].input_hash, hash) || !r[i].run_id)
          continue;
        if (!run || strcmp(run, r[i].run_id) != 0) found++;
        free(run);
        run = strdup(r[i].run_id);
      }
      dbx_wstore_refusals_free(r, n);
    }
    if (found != 1) {
      fprintf(stderr, "durabox approval grant: %s; give --run-id\n",
              found ? "refusals in several runs match" : "no recorded refusal matches");
      free(run);
      return 1;
    }
    rid = run;
  }
  dbx_err e = dbx_wstore_approval_grant(s, ns, wid, rid, type, hash);
  if (e == DBX_OK)
    printf("approved one more %s with input %s in %s run %s\n", type, hash, wid, rid);
  else
    fprintf(stderr, "durabox approval grant: %s\n", dbx_strerror(e));
  free(run);
  return e == DBX_OK ? 0 : 1;
}

static void print_held(const WorkflowExecutionInfo *info, const cJSON *h) {
  char *w = dbx_cli_agent_held_words(h);
  char *line = dbx_asprintf("workflow_id=%s run_id=%s %s", info->execution->workflow_id,
                            info->execution->run_id, w ? w : "");
  if (line) dbx_cli_utf8_puts(line);
  free(line);
  free(w);
}

static int held_list(dbx_client *c, const char *address, int optional) {
  uint8_t *tok = NULL;
  size_t tl = 0;
  int shown = 0;
  for (;;) {
    ListWorkflowExecutionsResponse *r = NULL;
    char *err = NULL;
    dbx_err e = dbx_client_list(c, "ExecutionStatus = 'Running'", 100, tok, tl, &r, &err);
    free(tok);
    tok = NULL;
    if (e == DBX_EUNAVAILABLE && optional) { /* no address was given: the service is optional */
      fprintf(stderr, "durabox approval list: no workflow service at %s; held agent steps not "
                      "listed (give --address)\n", address);
      free(err);
      return 0;
    }
    if (e != DBX_OK) {
      dbx_cli_report("approval list", address, e, err);
      free(err);
      return 1;
    }
    for (size_t i = 0; i < r->n_executions; i++) {
      cJSON *h = dbx_cli_agent_held(r->executions[i]);
      if (h) print_held(r->executions[i], h), shown++;
      cJSON_Delete(h);
    }
    if (r->next_page_token.len && (tok = malloc(r->next_page_token.len))) {
      memcpy(tok, r->next_page_token.data, r->next_page_token.len);
      tl = r->next_page_token.len;
    }
    dbx_client_msg_free(r);
    if (!tok) break;
  }
  if (!shown) printf("no agent or fork step waits for approval\n");
  return 0;
}

/* A durabox.approval signal's input as JSON (NULL when it has none or is not
 * an object). */
static cJSON *signal_input(const HistoryEvent *e) {
  if (e->event_type != ET(WORKFLOW_EXECUTION_SIGNALED)) return NULL; /* the attributes are a oneof */
  const WorkflowExecutionSignaledEventAttributes *a = e->workflow_execution_signaled_event_attributes;
  if (!a || !a->signal_name || strcmp(a->signal_name, "durabox.approval") != 0) return NULL;
  char *txt = dbx_payloads_to_json(a->input);
  cJSON *j = txt ? cJSON_Parse(txt) : NULL;
  free(txt);
  if (cJSON_IsObject(j)) return j;
  cJSON_Delete(j);
  return NULL;
}

/* 1 when event e set memo "durabox.approval" to a held step equal to step:
 * the start of a hold (workflows/agent.c and workflows/script.c set it when a
 * step starts waiting, and clear it to null once decided). */
static int hold_starts(const HistoryEvent *e, const cJSON *step) {
  if (e->event_type != ET(WORKFLOW_PROPERTIES_MODIFIED)) return 0;
  const Temporal__Api__History__V1__WorkflowPropertiesModifiedEventAttributes *a =
      e->workflow_properties_modified_event_attributes;
  const Memo *m = a ? a->upserted_memo : NULL;
  for (size_t i = 0; m && i < m->n_fields; i++) {
    if (strcmp(m->fields[i]->key, "durabox.approval") != 0 || !m->fields[i]->value) continue;
    const Payload *p = m->fields[i]->value;
    cJSON *j = cJSON_ParseWithLength((const char *)p->data.data, p->data.len);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "step");
    int same = cJSON_IsObject(j) && (step == NULL || (js && cJSON_Compare(js, step, 1)));
    cJSON_Delete(j);
    return same;
  }
  return 0;
}

/* 1 when signal input j decides step (a step it names must be the same; the
 * decision one the workflows take; by among approvers when a list is given). */
static int decides(const cJSON *j, const cJSON *step, const cJSON *approvers) {
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(j, "step");
  if (js && step && !cJSON_Compare(js, step, 1)) return 0;
  static const char *const words[] = {"grant", "granted", "approve", "allow", "deny", "denied", "reject"};
  const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "decision"));
  int known = 0;
  for (size_t i = 0; d && i < sizeof words / sizeof *words; i++) known |= strcmp(d, words[i]) == 0;
  if (!known) return 0;
  if (!cJSON_IsArray(approvers)) return 1;
  const char *by = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "by"));
  const cJSON *a;
  cJSON_ArrayForEach(a, approvers) if (by && cJSON_IsString(a) && strcmp(a->valuestring, by) == 0) return 1;
  return 0;
}

/* Which decision the run took for the held step: the first deciding
 * durabox.approval signal after the hold began, in history order (signals
 * are ordered by the service; the workflows act on the first and ignore the
 * rest). Returns a copy of that signal's input (cJSON_Delete), or NULL when
 * the history could not be read or holds no such signal. */
static cJSON *first_decision(dbx_client *c, const char *wid, const char *run, const cJSON *step,
                             const cJSON *approvers) {
  dbx_client_history h = {0};
  char *err = NULL;
  cJSON *won = NULL;
  if (dbx_client_get_history(c, wid, run, NULL, &h, &err) == DBX_OK) {
    size_t from = 0;
    for (size_t i = 0; i < h.n; i++)
      if (hold_starts(h.events[i], step)) from = i + 1;
    for (size_t i = from; i < h.n && !won; i++) {
      cJSON *j = signal_input(h.events[i]);
      if (j && decides(j, step, approvers)) won = j;
      else cJSON_Delete(j);
    }
  }
  free(err);
  dbx_client_history_cleanup(&h);
  return won;
}

static int held_decide(dbx_client *c, const char *address, const char *sub, const char *wid,
                       const char *rid, const char *by, const char *reason) {
  DescribeWorkflowExecutionResponse *r = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_describe(c, wid, rid, &r, &err);
  if (e != DBX_OK) {
    dbx_cli_report("approval", address, e, err);
    free(err);
    return 1;
  }
  cJSON *h = dbx_cli_agent_held(r->workflow_execution_info);
  char *run = dbx_strdup(r->workflow_execution_info->execution->run_id);
  dbx_client_msg_free(r);
  if (!h) {
    fprintf(stderr, "durabox approval %s: no step of %s waits for approval\n", sub, wid);
    free(run);
    return 1;
  }
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(h, "step"); /* a number, or a name */
  char *sw = dbx_cli_held_step_words(h);
  const cJSON *ap = cJSON_GetObjectItemCaseSensitive(h, "approvers");
  int may = !cJSON_IsArray(ap);
  for (const cJSON *a = cJSON_IsArray(ap) ? ap->child : NULL; a; a = a->next)
    may |= cJSON_IsString(a) && strcmp(a->valuestring, by) == 0;
  if (!may) { /* the workflow would ignore it: say so instead */
    char *who = cJSON_PrintUnformatted(ap);
    fprintf(stderr, "durabox approval %s: %s is not among the approvers of %s of %s: %s\n", sub, by,
            sw ? sw : "the step", wid, who ? who : "");
    free(who);
    free(sw);
    free(run);
    cJSON_Delete(h);
    return 1;
  }
  /* request_id tells this decision from another sent at the same moment (the
   * workflows ignore fields they do not know) */
  char rq[DBX_UUID_LEN + 1] = "";
  cJSON *sig = cJSON_CreateObject();
  cJSON_AddItemToObject(sig, "step", step ? cJSON_Duplicate(step, 1) : cJSON_CreateNull());
  cJSON_AddStringToObject(sig, "decision", strcmp(sub, "grant") == 0 ? "grant" : "deny");
  cJSON_AddStringToObject(sig, "by", by);
  if (reason) cJSON_AddStringToObject(sig, "reason", reason);
  if (dbx_uuid_v4(rq) == DBX_OK) cJSON_AddStringToObject(sig, "request_id", rq);
  char *txt = cJSON_PrintUnformatted(sig);
  cJSON_Delete(sig);
  e = txt ? dbx_client_signal(c, wid, run, "durabox.approval", txt, &err) : DBX_ENOMEM;
  free(txt);
  int rc = e == DBX_OK ? 0 : 1;
  const char *target = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(h, "target"));
  /* The step was held when described, but another grant or deny may have
   * reached the run first: only the first counts, so say which one did. */
  cJSON *won = e == DBX_OK ? first_decision(c, wid, run, step, ap) : NULL;
  const char *won_rq = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(won, "request_id"));
  if (e != DBX_OK) {
    dbx_cli_report("approval", address, e, err);
  } else if (won && (!won_rq || strcmp(won_rq, rq) != 0)) {
    const char *d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(won, "decision"));
    const char *wby = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(won, "by"));
    int granted = d && (d[0] == 'g' || d[0] == 'a');
    fprintf(stderr,
            "durabox approval %s: %s (%s) of %s run %s was already %s by %s: a decision sent at the same "
            "time came first, and this %s is ignored\n",
            sub, sw ? sw : "the step", target ? target : "", wid, run, granted ? "granted" : "denied",
            wby ? wby : "someone", sub);
    rc = 1;
  } else {
    printf("%s %s (%s) of %s run %s, by %s\n", strcmp(sub, "grant") == 0 ? "granted" : "denied",
           sw ? sw : "the step", target ? target : "", wid, run, by);
    if (!won) /* sent, but the history could not be read back to confirm it */
      fprintf(stderr, "durabox approval %s: the decision was sent; whether it came before any other could not "
                      "be read from the run's history\n", sub);
  }
  cJSON_Delete(won);
  free(err);
  free(sw);
  free(run);
  cJSON_Delete(h);
  return rc;
}

/* The agent half of the command: list held steps, grant or deny one. */
static int agent_approval(const char *sub, dbx_cli_conn *conn, const char *wid, const char *rid,
                          const char *by, const char *reason) {
  int optional = conn->address == NULL;
  if (conn->address == NULL) conn->address = "127.0.0.1:7233";
  if (dbx_cli_conn_load(conn) != 0) return 2;
  dbx_client_opts co;
  dbx_cli_conn_client_opts(conn, &co);
  dbx_client *c = NULL;
  if (dbx_client_create(&co, &c) != DBX_OK) {
    fprintf(stderr, "durabox: cannot create a client for %s\n", conn->address);
    return 1;
  }
  int rc;
  if (strcmp(sub, "list") == 0) {
    rc = held_list(c, conn->address, optional);
  } else {
    rc = held_decide(c, conn->address, sub, wid, rid, by, reason);
  }
  dbx_client_destroy(c);
  return rc;
}

int dbx_cli_approval(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
  if (argc < 2 || (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "grant") != 0 &&
                   strcmp(argv[1], "deny") != 0)) {
    if (argc >= 2) fprintf(stderr, "durabox approval: unknown command '%s'\n", argv[1]);
    fputs(USAGE, stderr);
    return 2;
  }
  const char *sub = argv[1], *db = NULL, *wid = NULL, *rid = NULL, *type = NULL, *hash = NULL;
  const char *by = NULL, *reason = NULL;
  const char *ns = getenv("TEMPORAL_NAMESPACE");
  if (!ns || !*ns) ns = "default";
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  int address_flag = 0;
  const dbx_cli_flag fl[] = {
      {"--db", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &wid, 0, 0},
      {"--run-id", "-r", DBX_CLI_FLAG_STR, &rid, 0, 0},
      {"--activity-type", NULL, DBX_CLI_FLAG_STR, &type, 0, 0},
      {"--input-hash", NULL, DBX_CLI_FLAG_STR, &hash, 0, 0},
      {"--by", NULL, DBX_CLI_FLAG_STR, &by, 0, 0},
      {"--reason", NULL, DBX_CLI_FLAG_STR, &reason, 0, 0},
  };
  for (int i = 2; i < argc; i++) {
    if (strncmp(argv[i], "--address", 9) == 0) address_flag = 1;
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take("durabox approval", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) {
      dbx_cli_conn_cleanup(&conn);
      return 2;
    }
    if (r > 0) continue;
    if (argv[i][0] != '-' && !wid) {
      wid = argv[i];
      continue;
    }
    dbx_cli_flag_unknown("durabox approval", argv[i]);
    fputs(USAGE, stderr);
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  if (conn.json) { /* refused rather than ignored */
    fprintf(stderr, "durabox approval: --output json is not supported; its output is text\n");
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  if ((wid && !*wid) || dbx_cli_nonempty("durabox approval", "--db", db) != 0) {
    if (wid && !*wid) fprintf(stderr, "durabox approval %s: the workflow id is empty\n", sub);
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  ns = conn.namespace_ && *conn.namespace_ ? conn.namespace_ : ns;
  int amo = type || hash; /* the at_most_once form of grant */
  if (strcmp(sub, "list") != 0 && !amo) {
    int rc = 2;
    if (!wid || !by || !*by)
      fprintf(stderr, "durabox approval %s: give the workflow id and --by NAME\n", sub);
    else
      rc = agent_approval(sub, &conn, wid, rid, by, reason);
    dbx_cli_conn_cleanup(&conn);
    return rc;
  }
  if (strcmp(sub, "deny") == 0 || (strcmp(sub, "grant") == 0 && (!wid || !type || !hash))) {
    fputs(USAGE, stderr);
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  int rc = 0;
  if (strcmp(sub, "list") == 0 && (!db || address_flag || getenv("TEMPORAL_ADDRESS"))) {
    rc = agent_approval(sub, &conn, NULL, NULL, NULL, NULL);
    if (rc == 2) { /* a bad address or TLS file: nothing else is listed */
      dbx_cli_conn_cleanup(&conn);
      return rc;
    }
    if (!db) { /* the default store's refusals too, when there is one */
      char *dbdef = dbx_cli_worker_db_default();
      struct stat sb;
      if (dbdef && stat(dbdef, &sb) == 0) {
        int orc = 0; /* not one: said, and the service's list stands */
        dbx_wstore *s = open_store(dbdef, sub, &orc);
        if (s) rc |= cmd_list(s);
        dbx_wstore_close(s);
      }
      free(dbdef);
      dbx_cli_conn_cleanup(&conn);
      return rc;
    }
  }
  dbx_cli_conn_cleanup(&conn);
  char *dbdef = db ? NULL : dbx_cli_worker_db_default();
  int orc = 0;
  dbx_wstore *s = open_store(db ? db : dbdef, sub, &orc);
  if (s) rc |= strcmp(sub, "list") == 0 ? cmd_list(s) : cmd_grant(s, ns, wid, rid, type, hash);
  else rc = orc;
  dbx_wstore_close(s);
  free(dbdef);
  return rc;
}
