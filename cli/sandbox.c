/* durabox sandbox list | rm ID... | gc: the sandboxes of a local sandbox
 * home, whose run owns each, and the collection of what no run needs.
 *
 * Local facts come from the driver (activities/local.h): ids, labels
 * (durabox.workflow_id, durabox.run_id, durabox.keep, durabox.resource: set
 * by sandbox.create, activities/sandbox.c), state, bytes on disk, and the
 * leftovers of interrupted deletes and creates. The owner run's state comes
 * from the workflow service (DescribeWorkflowExecution, --address and the
 * other connection flags of cli/conn.h). A sandbox's verdict:
 *   live      its owner run is open
 *   kept      labelled durabox.keep and its owner run is closed (or unknown);
 *             a session's sandbox (labelled durabox.session too) only while
 *             its session's newest completed turn names it in session_state
 *             (cli/session.h) or the service cannot tell; else held while a
 *             turn of the session is open, orphaned when none is
 *   orphaned  not kept, and its owner run is closed or unknown to the
 *             service, and no run of its workflow id is open (a reset run
 *             may go on with its predecessor's sandbox)
 *   held      like orphaned, but a run of its workflow id is open
 *   busy      like orphaned with an owner unknown to the service, but a
 *             command runs in it (its owner may be a run of another
 *             service, such as `durabox run`'s embedded one)
 *   unknown   no service answered, or the sandbox names no owner
 * gc removes orphaned sandboxes and every leftover; nothing else. Without a
 * service it removes leftovers only and says why. docs/sandbox.md "Tools".
 * --sandbox daytona (DURABOX_SANDBOX) lists Daytona's sandboxes instead,
 * through the same driver operations (opened by cli/kit as the worker opens
 * it); sizes on disk, busy and leftovers are local facts and are not known
 * there. One thread; exit 0 on success, 1 when something failed, 2 on
 * usage. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "activities/daytona.h"
#include "activities/local.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/flags.h"
#include "cli/kit.h"
#include "cli/session.h"
#include "protos/pb.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: durabox sandbox list|rm ID...|gc [flags]\n"
          "  list                  every sandbox: owner workflow and run, state, size on disk,\n"
          "                        live/kept/orphaned/held/busy/unknown, and leftovers of\n"
          "                        interrupted deletes and creates\n"
          "  rm ID...              remove these sandboxes (refused while their owner run is\n"
          "                        open, unless --force)\n"
          "  gc                    remove orphaned sandboxes and all leftovers (--dry-run:\n"
          "                        only say what would go)\n"
          "  --sandbox DRIVER      local (default) or daytona (DURABOX_SANDBOX; daytona reads\n"
          "                        DAYTONA_API_KEY, DAYTONA_API_URL, as `durabox worker`)\n"
          "  --sandbox-home DIR    the local sandboxes' home, as `durabox worker` takes it\n"
          "                        (--home too; DURABOX_HOME; default ~/.local/share/durabox)\n"
          "  --output json         one JSON object for scripts\n"
          "connection (the owner runs' state): --address HOST:PORT --namespace NS --api-key K\n"
          "  --tls --tls-ca F --tls-cert F --tls-key F (default 127.0.0.1:7233)\n");
}

typedef struct {
  char *id;
  const char *wf, *run, *resource; /* borrowed from labels, NULL when absent */
  dbx_drv_label *labels;
  size_t nlabels;
  int kept, stopped, session;
  int sized; /* bytes is known (local) */
  uint64_t bytes;
  char *path;              /* workspace path, NULL: none */
  char owner_state[32];    /* "running", "completed", ..., "not_found", "unknown" */
  const char *verdict;     /* live, kept, orphaned, held, busy, unknown */
  char open_run[64];       /* held: the open run of the workflow id */
} sbx_row;

typedef struct {
  dbx_local *local;  /* the local driver, or NULL (daytona: no local facts) */
  dbx_cli_kit kit;   /* --sandbox daytona: the driver, opened as the worker opens it */
  char where[300];   /* where the sandboxes are, for messages */
  dbx_driver *drv;
  dbx_client *client; /* NULL: no service to ask */
  int reachable;      /* the service answered (0 after an UNAVAILABLE) */
  const char *address;
  sbx_row *rows;
  size_t nrows;
  dbx_local_leftover *left;
  size_t nleft;
} sbx_ctx;

static const char *label_of(const dbx_drv_label *l, size_t n, const char *key) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(l[i].key, key) == 0) return l[i].value;
  return NULL;
}

/* Status of (wf, run) as lower-case text into out ("not_found" when the
 * service does not know it; "unknown" when it cannot be asked); *open = 1
 * for a running run, and with run NULL (the workflow's latest run) its run
 * id into open_run. */
static void owner_status(sbx_ctx *c, const char *wf, const char *run, char *out, size_t n,
                         int *open, char *open_run, size_t orn) {
  *open = 0;
  snprintf(out, n, "unknown");
  if (c->client == NULL || !c->reachable || wf == NULL) return;
  DescribeWorkflowExecutionResponse *r = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_describe(c->client, wf, run ? run : "", &r, &err);
  free(err);
  if (e == DBX_ENOTFOUND) {
    snprintf(out, n, "not_found");
  } else if (e == DBX_OK && r->workflow_execution_info) {
    WorkflowExecutionInfo *i = r->workflow_execution_info;
    const ProtobufCEnumValue *st = protobuf_c_enum_descriptor_get_value(
        &temporal__api__enums__v1__workflow_execution_status__descriptor, i->status);
    const char *nm = st ? st->name + strlen("WORKFLOW_EXECUTION_STATUS_") : "unspecified";
    size_t k = 0;
    for (; nm[k] && k + 1 < n; k++) out[k] = (char)tolower((unsigned char)nm[k]);
    out[k] = '\0';
    *open = i->status == WS(RUNNING);
    if (open_run && i->execution && i->execution->run_id)
      snprintf(open_run, orn, "%s", i->execution->run_id);
  } else if (e == DBX_EUNAVAILABLE) {
    c->reachable = 0;
  }
  dbx_client_msg_free(r);
}

static void judge(sbx_ctx *c, sbx_row *w) {
  int open = 0;
  owner_status(c, w->wf, w->run, w->owner_state, sizeof w->owner_state, &open, NULL, 0);
  int known = strcmp(w->owner_state, "unknown") != 0;
  if (open) {
    w->verdict = "live";
  } else if (w->kept && w->session && known && w->wf) { /* the session decides */
    char latest[32];
    int wf_open = 0;
    owner_status(c, w->wf, NULL, latest, sizeof latest, &wf_open, w->open_run, sizeof w->open_run);
    /* a service that does not know the sandbox's own run (another service
     * than the session's, even one with a workflow of the same id) cannot
     * tell either: the sandbox stays kept */
    int owns = c->reachable && !wf_open && strcmp(w->owner_state, "not_found") != 0
                   ? dbx_cli_session_owns(c->client, w->wf, w->id)
                   : -1;
    w->verdict = wf_open ? "held" : owns == 0 ? "orphaned" : "kept";
  } else if (w->kept) {
    w->verdict = "kept";
  } else if (!known || w->run == NULL) {
    w->verdict = "unknown";
  } else {
    char latest[32];
    int wf_open = 0;
    owner_status(c, w->wf, NULL, latest, sizeof latest, &wf_open, w->open_run, sizeof w->open_run);
    if (!c->reachable) w->verdict = "unknown";
    else if (wf_open) w->verdict = "held";
    else if (strcmp(w->owner_state, "not_found") == 0 && c->local &&
             dbx_local_sandbox_busy(c->local, w->id))
      w->verdict = "busy"; /* maybe a run of another service: its command is at work */
    else w->verdict = "orphaned";
  }
}

static void rows_free(sbx_ctx *c) {
  for (size_t i = 0; i < c->nrows; i++) {
    free(c->rows[i].id);
    free(c->rows[i].path);
    dbx_drv_labels_free(c->rows[i].labels, c->rows[i].nlabels);
  }
  free(c->rows);
  c->rows = NULL;
  c->nrows = 0;
  dbx_local_leftovers_free(c->left, c->nleft);
  c->left = NULL;
  c->nleft = 0;
}

/* Read every sandbox and leftover, and judge each. 0, or -1 printed. */
static int collect(sbx_ctx *c) {
  char **ids = NULL;
  size_t n = 0;
  dbx_drv_err e = c->drv->ops->list(c->drv->self, NULL, 0, &ids, &n);
  if (e != DBX_DRV_OK) {
    fprintf(stderr, "durabox sandbox: cannot list sandboxes: %s\n", c->drv->ops->errmsg(c->drv->self));
    return -1;
  }
  c->rows = calloc(n ? n : 1, sizeof *c->rows);
  if (c->rows == NULL) {
    dbx_drv_names_free(ids, n);
    fprintf(stderr, "durabox sandbox: out of memory\n");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    sbx_row *w = &c->rows[c->nrows];
    dbx_drv_state st = DBX_DRV_RUNNING;
    if (c->drv->ops->exists(c->drv->self, ids[i], &st) != DBX_DRV_OK) continue; /* gone meanwhile */
    w->id = ids[i];
    ids[i] = NULL;
    c->nrows++;
    w->stopped = st == DBX_DRV_STOPPED;
    if (c->drv->ops->labels(c->drv->self, w->id, &w->labels, &w->nlabels) != DBX_DRV_OK) {
      w->labels = NULL;
      w->nlabels = 0;
    }
    w->wf = label_of(w->labels, w->nlabels, "durabox.workflow_id");
    w->run = label_of(w->labels, w->nlabels, "durabox.run_id");
    w->resource = label_of(w->labels, w->nlabels, "durabox.resource");
    const char *k = label_of(w->labels, w->nlabels, "durabox.keep");
    w->kept = k && strcmp(k, "true") == 0;
    const char *ss = label_of(w->labels, w->nlabels, "durabox.session");
    w->session = ss && strcmp(ss, "true") == 0;
    w->sized = c->local && dbx_local_sandbox_disk_bytes(c->local, w->id, &w->bytes) == DBX_OK;
    w->path = c->drv->ops->workspace_path(c->drv->self, w->id);
    judge(c, w);
  }
  dbx_drv_names_free(ids, n);
  if (c->local && dbx_local_leftovers(c->local, &c->left, &c->nleft) != DBX_OK) {
    fprintf(stderr, "durabox sandbox: cannot read leftovers: %s\n", dbx_local_errmsg(c->local));
    return -1;
  }
  return 0;
}

static void human_bytes(uint64_t b, char *out, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(out, n, "%llu B", (unsigned long long)b);
  else snprintf(out, n, "%.1f %s", v, units[u]);
}

static const char *leftover_kind(const dbx_local_leftover *l) {
  return l->kind == DBX_LOCAL_LEFTOVER_TRASH ? "half-deleted" : "half-created";
}

static cJSON *row_json(const sbx_row *w) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", w->id);
  if (w->wf) cJSON_AddStringToObject(o, "workflow_id", w->wf);
  else cJSON_AddNullToObject(o, "workflow_id");
  if (w->run) cJSON_AddStringToObject(o, "run_id", w->run);
  else cJSON_AddNullToObject(o, "run_id");
  if (w->resource) cJSON_AddStringToObject(o, "resource", w->resource);
  cJSON_AddStringToObject(o, "state", w->stopped ? "stopped" : "running");
  if (w->sized) cJSON_AddNumberToObject(o, "bytes", (double)w->bytes);
  else cJSON_AddNullToObject(o, "bytes"); /* not known (Daytona) */
  if (w->path) cJSON_AddStringToObject(o, "path", w->path);
  cJSON_AddBoolToObject(o, "kept", w->kept);
  cJSON_AddStringToObject(o, "owner_state", w->owner_state);
  cJSON_AddBoolToObject(o, "orphaned", strcmp(w->verdict, "orphaned") == 0);
  cJSON_AddStringToObject(o, "verdict", w->verdict);
  if (strcmp(w->verdict, "held") == 0) cJSON_AddStringToObject(o, "open_run_id", w->open_run);
  return o;
}

static cJSON *leftover_json(const dbx_local_leftover *l) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "kind", leftover_kind(l));
  cJSON_AddStringToObject(o, "name", l->name);
  cJSON_AddStringToObject(o, "path", l->path);
  cJSON_AddNumberToObject(o, "bytes", (double)l->bytes);
  return o;
}

static void say_unreachable(const sbx_ctx *c, int json) {
  if (c->reachable || json) return;
  printf("owner state unknown: no workflow service answered at %s (--address); local facts only\n",
         c->address);
}

static int cmd_list(sbx_ctx *c, int json) {
  if (collect(c) != 0) return 1;
  if (json) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "sandboxes");
    for (size_t i = 0; i < c->nrows; i++) cJSON_AddItemToArray(a, row_json(&c->rows[i]));
    cJSON *l = cJSON_AddArrayToObject(o, "leftovers");
    for (size_t i = 0; i < c->nleft; i++) cJSON_AddItemToArray(l, leftover_json(&c->left[i]));
    cJSON *s = cJSON_AddObjectToObject(o, "service");
    cJSON_AddStringToObject(s, "address", c->address);
    cJSON_AddBoolToObject(s, "reachable", c->reachable);
    dbx_cli_json_print(o, 1);
    cJSON_Delete(o);
    return 0;
  }
  say_unreachable(c, json);
  /* columns as wide as their longest value (ids and workflow ids can be long) */
  int wid = 20, wwf = 24, wrun = 36;
  for (size_t i = 0; i < c->nrows; i++) {
    const sbx_row *w = &c->rows[i];
    char *ci = dbx_cli_cell(w->id), *cw = dbx_cli_cell(w->wf ? w->wf : "-"), *cr = dbx_cli_cell(w->run ? w->run : "-");
    int a = ci ? (int)strlen(ci) : 1, b = cw ? (int)strlen(cw) : 1, r = cr ? (int)strlen(cr) : 1;
    free(ci);
    free(cw);
    free(cr);
    wid = a > wid ? a : wid;
    wwf = b > wwf ? b : wwf;
    wrun = r > wrun ? r : wrun;
  }
  printf("%-*s %-*s %-*s %-7s %-10s %-10s %s\n", wid, "ID", wwf, "WORKFLOW ID", wrun, "RUN ID", "STATE", "SIZE",
         "OWNER", "STATUS");
  for (size_t i = 0; i < c->nrows; i++) {
    const sbx_row *w = &c->rows[i];
    char sz[32] = "-";
    if (w->sized) human_bytes(w->bytes, sz, sizeof sz);
    /* a workflow id is anyone's string: shown so that it cannot steer the terminal */
    char *ci = dbx_cli_cell(w->id), *cw = dbx_cli_cell(w->wf ? w->wf : "-"), *cr = dbx_cli_cell(w->run ? w->run : "-");
    printf("%-*s %-*s %-*s %-7s %-10s %-10s %s\n", wid, ci ? ci : "?", wwf, cw ? cw : "?", wrun, cr ? cr : "?",
           w->stopped ? "stopped" : "running", sz, w->owner_state, w->verdict);
    free(ci);
    free(cw);
    free(cr);
  }
  if (c->nrows == 0) printf("(no sandboxes)\n");
  for (size_t i = 0; i < c->nleft; i++) {
    char sz[32];
    human_bytes(c->left[i].bytes, sz, sizeof sz);
    printf("leftover %s %s (%s): `durabox sandbox gc` removes it\n", leftover_kind(&c->left[i]),
           c->left[i].path, sz);
  }
  return 0;
}

static int remove_one(sbx_ctx *c, const char *id) {
  dbx_drv_err e = c->drv->ops->del(c->drv->self, id);
  if (e == DBX_DRV_OK) return 0;
  fprintf(stderr, "durabox sandbox: cannot remove %s: %s\n", id, c->drv->ops->errmsg(c->drv->self));
  return -1;
}

static int cmd_rm(sbx_ctx *c, char **ids, int nids, int force, int json) {
  int rc = 0;
  cJSON *done = json ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < nids; i++) {
    dbx_drv_err e = dbx_drv_name_valid(ids[i]) ? c->drv->ops->exists(c->drv->self, ids[i], NULL)
                                                : DBX_DRV_INVALID;
    if (e != DBX_DRV_OK) {
      fprintf(stderr, "durabox sandbox rm: no sandbox '%s' in %s%s\n", ids[i], c->where,
              e == DBX_DRV_INVALID ? " (not a valid sandbox id)" : "");
      rc = 1;
      continue;
    }
    sbx_row w = {0};
    (void)c->drv->ops->labels(c->drv->self, ids[i], &w.labels, &w.nlabels);
    w.wf = label_of(w.labels, w.nlabels, "durabox.workflow_id");
    w.run = label_of(w.labels, w.nlabels, "durabox.run_id");
    int open = 0;
    if (w.run) owner_status(c, w.wf, w.run, w.owner_state, sizeof w.owner_state, &open, NULL, 0);
    const char *ss = label_of(w.labels, w.nlabels, "durabox.session");
    if (!open && ss && strcmp(ss, "true") == 0 && w.wf) /* a later turn of its session may use it */
      owner_status(c, w.wf, NULL, w.owner_state, sizeof w.owner_state, &open, NULL, 0);
    dbx_drv_labels_free(w.labels, w.nlabels);
    if (open && !force) {
      fprintf(stderr, "durabox sandbox rm: %s belongs to a running run (%s): not removed "
              "(--force removes it anyway)\n", ids[i], w.owner_state);
      rc = 1;
      continue;
    }
    if (remove_one(c, ids[i]) != 0) {
      rc = 1;
      continue;
    }
    if (json) cJSON_AddItemToArray(done, cJSON_CreateString(ids[i]));
    else printf("removed %s\n", ids[i]);
  }
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "removed", done);
    cJSON_AddBoolToObject(o, "ok", rc == 0);
    dbx_cli_json_print(o, 0);
    cJSON_Delete(o);
  }
  return rc;
}

static int cmd_gc(sbx_ctx *c, int dry, int json) {
  if (collect(c) != 0) return 1;
  int rc = 0;
  cJSON *out = json ? cJSON_CreateArray() : NULL;
  const char *verb = dry ? "would remove" : "removed";
  say_unreachable(c, json);
  if (!c->reachable && !json)
    printf("orphans are not collected without the service; leftovers are\n");
  cJSON *skipped = json ? cJSON_CreateArray() : NULL;
  for (size_t i = 0; i < c->nrows; i++) {
    const sbx_row *w = &c->rows[i];
    if (strcmp(w->verdict, "busy") == 0) { /* left alone, but not in silence */
      if (json) cJSON_AddItemToArray(skipped, row_json(w));
      else
        printf("kept busy sandbox %s: a command runs in it and this service does not know its workflow %s "
               "(a run of another service, such as durabox run's?); durabox sandbox rm --force %s removes it\n",
               w->id, w->wf ? w->wf : "?", w->id);
      continue;
    }
    if (strcmp(w->verdict, "orphaned") != 0) continue;
    if (!dry && remove_one(c, w->id) != 0) {
      rc = 1;
      continue;
    }
    if (json) {
      cJSON *o = row_json(w);
      cJSON_AddStringToObject(o, "kind", "orphaned");
      cJSON_AddItemToArray(out, o);
    } else {
      printf("%s orphaned sandbox %s (workflow %s, run %s, %s)\n", verb, w->id, w->wf, w->run,
             w->owner_state);
    }
  }
  for (size_t i = 0; i < c->nleft; i++) {
    const dbx_local_leftover *l = &c->left[i];
    if (!dry && dbx_local_leftover_remove(c->local, l) != DBX_OK) {
      fprintf(stderr, "durabox sandbox gc: %s: %s\n", l->path, dbx_local_errmsg(c->local));
      rc = 1;
      continue;
    }
    if (json) cJSON_AddItemToArray(out, leftover_json(l));
    else printf("%s %s tree %s\n", verb, leftover_kind(l), l->path);
  }
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, dry ? "would_remove" : "removed", out);
    cJSON_AddItemToObject(o, "kept_busy", skipped);
    cJSON_AddBoolToObject(o, "service_reachable", c->reachable);
    cJSON_AddBoolToObject(o, "ok", rc == 0);
    dbx_cli_json_print(o, 1);
    cJSON_Delete(o);
  }
  return rc;
}

int dbx_cli_sandbox(int argc, char **argv) {
  if (argc < 2 || dbx_cli_flag_is_help(argv[1])) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "list") != 0 && strcmp(sub, "rm") != 0 && strcmp(sub, "gc") != 0) {
    fprintf(stderr, "durabox sandbox: unknown verb '%s'\n", sub);
    usage(stderr);
    return 2;
  }
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const char *home = NULL, *sandbox = NULL;
  int dry = 0, force = 0, nids = 0;
  char **ids = calloc((size_t)argc, sizeof *ids);
  const dbx_cli_flag fl[] = {
      {"--sandbox-home", NULL, DBX_CLI_FLAG_STR, &home, 0, 0},
      {"--home", NULL, DBX_CLI_FLAG_STR, &home, 0, 0},
      {"--dry-run", NULL, DBX_CLI_FLAG_BOOL, &dry, 0, 0},
      {"--force", NULL, DBX_CLI_FLAG_BOOL, &force, 0, 0},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
  };
  int rc = 2;
  sbx_ctx c = {0};
  if (ids == NULL) goto out;
  for (int i = 2; i < argc; i++) {
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take("durabox sandbox", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) goto out;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      usage(stdout);
      rc = 0;
      goto out;
    }
    if (argv[i][0] != '-' && strcmp(sub, "rm") == 0) {
      ids[nids++] = argv[i];
      continue;
    }
    dbx_cli_flag_unknown("durabox sandbox", argv[i]);
    goto out;
  }
  if ((dry && strcmp(sub, "gc") != 0) || (force && strcmp(sub, "rm") != 0)) {
    fprintf(stderr, "durabox sandbox %s: %s is for %s\n", sub, dry ? "--dry-run" : "--force",
            dry ? "gc" : "rm");
    goto out;
  }
  if (strcmp(sub, "rm") == 0 && nids == 0) {
    fprintf(stderr, "durabox sandbox rm: name at least one sandbox id (`durabox sandbox list`)\n");
    goto out;
  }
  if (dbx_cli_sandbox_driver("durabox sandbox", sandbox) != 0) goto out;
  rc = 1;
  /* no commands run here: the home is opened without requiring bubblewrap
   * (and its note that commands would run unsandboxed is not shown) */
  dbx_log_set_level(DBX_LOG_WARN);
  if (sandbox) setenv("DURABOX_SANDBOX", sandbox, 1); /* the driver choice, read by cli/kit.c */
  const char *which = getenv("DURABOX_SANDBOX");
  if (which && *which && strcmp(which, "local") != 0) {
    char *err = NULL;
    if (dbx_cli_kit_open(NULL, &c.kit, &err) != DBX_OK) {
      fprintf(stderr, "durabox sandbox: %s\n", err ? err : "cannot open the sandbox driver");
      free(err);
      goto out;
    }
    c.drv = dbx_daytona_driver(c.kit.daytona);
    const char *url = getenv("DAYTONA_API_URL");
    snprintf(c.where, sizeof c.where, "Daytona (%s)", url && *url ? url : "https://app.daytona.io/api");
  } else {
    struct stat hs;
    if (home && (stat(home, &hs) != 0 || !S_ISDIR(hs.st_mode))) {
      /* opening would create it: a mistyped home would list nothing and leave folders behind */
      fprintf(stderr, "durabox sandbox: no sandbox home at %s (it is created by the first worker or run that "
                      "uses it)\n", home);
      rc = 2;
      goto out;
    }
    dbx_local_open_opts lo = {.unsandboxed = 1};
    if (dbx_local_open_with(home, &lo, &c.local) != DBX_OK) {
      fprintf(stderr, "durabox sandbox: cannot open the sandbox home %s: %s\n",
              home ? home : "(default)", dbx_local_errmsg(NULL));
      goto out;
    }
    c.drv = dbx_local_driver(c.local);
    snprintf(c.where, sizeof c.where, "%s/sandboxes", dbx_local_home(c.local));
  }
  c.address = conn.address ? conn.address : "127.0.0.1:7233";
  conn.address = c.address;
  if (dbx_cli_conn_load(&conn) != 0) {
    rc = 2; /* a bad address or TLS file: the command line's fault */
    goto out;
  }
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  if (dbx_client_create(&co, &c.client) != DBX_OK) c.client = NULL;
  c.reachable = c.client != NULL;
  if (strcmp(sub, "list") == 0) rc = cmd_list(&c, conn.json);
  else if (strcmp(sub, "rm") == 0) rc = cmd_rm(&c, ids, nids, force, conn.json);
  else rc = cmd_gc(&c, dry, conn.json);
out:
  rows_free(&c);
  dbx_client_destroy(c.client);
  dbx_local_close(c.local);
  dbx_cli_kit_close(&c.kit);
  dbx_cli_conn_cleanup(&conn);
  free(ids);
  return rc;
}
