/* durabox approval grant|list: a person's approvals of repeated at_most_once
 * calls, kept in the worker's store (worker/wstore.h "at_most_once
 * identities").
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

#include "cli/cli.h"
#include "cli/flags.h"
#include "worker/wstore.h"

#define USAGE                                                                            \
  "usage: durabox approval list [--db DIR]\n"                                            \
  "       durabox approval grant --workflow-id ID [--run-id R] --activity-type T\n"      \
  "                              --input-hash H [--namespace NS] [--db DIR]\n"      \
  "  --db DIR: the worker store (default $DURABOX_HOME/worker)\n"

static dbx_wstore *open_store(const char *db, const char *what) {
  struct stat sb;
  if (!db || stat(db, &sb) != 0) {
    fprintf(stderr, "durabox approval %s: no worker store at %s\n", what, db ? db : "?");
    return NULL;
  }
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

int dbx_cli_approval(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(USAGE, stdout);
      return 0;
    }
  if (argc < 2 || (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "grant") != 0)) {
    if (argc >= 2) fprintf(stderr, "durabox approval: unknown command '%s'\n", argv[1]);
    fputs(USAGE, stderr);
    return 2;
  }
  const char *sub = argv[1], *db = NULL, *wid = NULL, *rid = NULL, *type = NULL, *hash = NULL;
  const char *ns = getenv("TEMPORAL_NAMESPACE");
  if (!ns || !*ns) ns = "default";
  const dbx_cli_flag fl[] = {
      {"--db", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &wid, 0, 0},
      {"--run-id", "-r", DBX_CLI_FLAG_STR, &rid, 0, 0},
      {"--activity-type", NULL, DBX_CLI_FLAG_STR, &type, 0, 0},
      {"--input-hash", NULL, DBX_CLI_FLAG_STR, &hash, 0, 0},
      {"--namespace", "-n", DBX_CLI_FLAG_STR, &ns, 0, 0},
  };
  for (int i = 2; i < argc; i++) {
    int r = dbx_cli_flag_take("durabox approval", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    dbx_cli_flag_unknown("durabox approval", argv[i]);
    fputs(USAGE, stderr);
    return 2;
  }
  if (strcmp(sub, "grant") == 0 && (!wid || !type || !hash)) {
    fputs(USAGE, stderr);
    return 2;
  }
  char *dbdef = db ? NULL : dbx_cli_worker_db_default();
  dbx_wstore *s = open_store(db ? db : dbdef, sub);
  int rc = 1;
  if (s) rc = strcmp(sub, "list") == 0 ? cmd_list(s) : cmd_grant(s, ns, wid, rid, type, hash);
  dbx_wstore_close(s);
  free(dbdef);
  return rc;
}
