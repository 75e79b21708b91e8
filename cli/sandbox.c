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
#include <time.h>

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
          "usage: durabox sandbox list|rm ID...|gc|snapshots|rm-snapshot NAME... [flags]\n"
          "  list                  every sandbox: owner workflow and run, state, size on disk,\n"
          "                        live/kept/orphaned/held/busy/unknown, and leftovers of\n"
          "                        interrupted deletes, creates and checkpoints\n"
          "  rm ID...              remove these sandboxes (refused while their owner run is\n"
          "                        open, unless --force)\n"
          "  gc                    remove orphaned sandboxes and all leftovers (--dry-run:\n"
          "                        only say what would go)\n"
          "    --snapshots-older-than H  also the snapshots (checkpoints) made more than H\n"
          "                        hours ago whose run is closed (a fork from them then\n"
          "                        fails with ForkSnapshotMissing); local sandboxes only\n"
          "  snapshots             every snapshot (checkpoint): its run, when it was made,\n"
          "                        size on disk, the run's state; local sandboxes only\n"
          "  rm-snapshot NAME...   remove these snapshots (refused while their run is open,\n"
          "                        unless --force)\n"
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

/* A WorkflowExecutionStatus as lower-case text ("running", "completed"). */
static void status_text(int status, char *out, size_t n) {
  const ProtobufCEnumValue *st = protobuf_c_enum_descriptor_get_value(
      &temporal__api__enums__v1__workflow_execution_status__descriptor, status);
  const char *nm = st ? st->name + strlen("WORKFLOW_EXECUTION_STATUS_") : "unspecified";
  size_t k = 0;
  for (; nm[k] && k + 1 < n; k++) out[k] = (char)tolower((unsigned char)nm[k]);
  out[k] = '\0';
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
    status_text(i->status, out, n);
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
  return l->kind == DBX_LOCAL_LEFTOVER_TRASH            ? "half-deleted"
         : l->kind == DBX_LOCAL_LEFTOVER_SNAPSHOT_PART ? "half-made snapshot"
                                                        : "half-created";
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

/* rm's and rm-snapshot's --output json: {"removed": [...], "ok"}; takes done. */
static void print_removed(cJSON *done, int rc) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToObject(o, "removed", done);
  cJSON_AddBoolToObject(o, "ok", rc == 0);
  dbx_cli_json_print(o, 0);
  cJSON_Delete(o);
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
  if (json) print_removed(done, rc);
  return rc;
}

/* ---- snapshots (checkpoints) */

/* The run a checkpoint's snapshot was made for: its name is "ck-<run
 * id>-e<covered event>" (docs/worker.md "Checkpoints and forks"). 0 with
 * the run id in out; -1 for any other name (a sandbox.checkpoint "name"). */
static int snapshot_run(const char *name, char *out, size_t n) {
  const char *e = strrchr(name, '-');
  if (strncmp(name, "ck-", 3) != 0 || e == NULL || e <= name + 3 || e[1] != 'e' || !e[2]) return -1;
  for (const char *p = e + 2; *p; p++)
    if (!isdigit((unsigned char)*p)) return -1;
  size_t len = (size_t)(e - (name + 3));
  if (len + 1 > n) return -1;
  for (size_t i = 0; i < len; i++) /* a run id is put into a query: its characters are checked */
    if (!isalnum((unsigned char)name[3 + i]) && name[3 + i] != '-') return -1;
  memcpy(out, name + 3, len);
  out[len] = '\0';
  return 0;
}

/* The workflow and run a snapshot belongs to and that run's state: from
 * the labels of the sandbox it was made from (kept beside it), else, for a
 * checkpoint policy's "ck-<run>-e<N>", the run named in it
 * (ListWorkflowExecutions "RunId = '<run>'"). state: "running",
 * "completed", ..., "not_found" (the service has no such run), "unknown" (no
 * service answered), "-" (the snapshot names no run). *open = 1 while the
 * run is open, or for a session's sandbox while a later run of its workflow
 * is (a later turn may fork from it). */
static void snapshot_owner(sbx_ctx *c, const char *name, const dbx_drv_label *l, size_t nl,
                           char *state, size_t n, int *open, char *wf, size_t wn, char *run,
                           size_t rn) {
  *open = 0;
  wf[0] = run[0] = '\0';
  const char *lwf = label_of(l, nl, "durabox.workflow_id"), *lrun = label_of(l, nl, "durabox.run_id");
  if (lwf && lrun) {
    snprintf(wf, wn, "%s", lwf);
    snprintf(run, rn, "%s", lrun);
    owner_status(c, lwf, lrun, state, n, open, NULL, 0);
    const char *ss = label_of(l, nl, "durabox.session");
    if (!*open && ss && strcmp(ss, "true") == 0 && strcmp(state, "unknown") != 0) {
      char latest[32];
      owner_status(c, lwf, NULL, latest, sizeof latest, open, NULL, 0);
    }
    return;
  }
  if (snapshot_run(name, run, rn) != 0) {
    run[0] = '\0';
    snprintf(state, n, "-");
    return;
  }
  snprintf(state, n, "unknown");
  if (c->client == NULL || !c->reachable) return;
  char q[160];
  snprintf(q, sizeof q, "RunId = '%s'", run);
  ListWorkflowExecutionsResponse *r = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_list(c->client, q, 1, NULL, 0, &r, &err);
  free(err);
  if (e == DBX_OK && r->n_executions > 0) {
    WorkflowExecutionInfo *i = r->executions[0];
    status_text(i->status, state, n);
    *open = i->status == WS(RUNNING);
    if (i->execution && i->execution->workflow_id) snprintf(wf, wn, "%s", i->execution->workflow_id);
  } else if (e == DBX_OK) {
    snprintf(state, n, "not_found");
  } else if (e == DBX_EUNAVAILABLE) {
    c->reachable = 0;
  }
  dbx_client_msg_free(r);
}

/* "2026-12-07T07:30:00Z" */
static void utc_text(int64_t ms, char *out, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (gmtime_r(&t, &tm) == NULL || strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) snprintf(out, n, "?");
}

static int local_only(const sbx_ctx *c, const char *verb) {
  if (c->local) return 0;
  fprintf(stderr, "durabox sandbox %s: for local sandboxes only (Daytona lists its snapshots in its "
                  "dashboard and API: GET /snapshots)\n", verb);
  return -1;
}

static cJSON *snapshot_json(const dbx_local_snapshot *s, const char *wf, const char *run,
                            const char *state) {
  char made[40];
  utc_text(s->made_ms, made, sizeof made);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "name", s->name);
  if (*wf) cJSON_AddStringToObject(o, "workflow_id", wf);
  else cJSON_AddNullToObject(o, "workflow_id");
  if (*run) cJSON_AddStringToObject(o, "run_id", run);
  else cJSON_AddNullToObject(o, "run_id");
  cJSON_AddStringToObject(o, "made", made);
  cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
  cJSON_AddStringToObject(o, "owner_state", state);
  return o;
}

/* Snapshots by the time they were made, oldest first. */
static int by_made(const void *a, const void *b) {
  const dbx_local_snapshot *x = a, *y = b;
  return x->made_ms < y->made_ms ? -1 : x->made_ms > y->made_ms ? 1 : strcmp(x->name, y->name);
}

static int cmd_snapshots(sbx_ctx *c, int json) {
  if (local_only(c, "snapshots") != 0) return 2;
  dbx_local_snapshot *v = NULL;
  size_t n = 0;
  if (dbx_local_snapshots(c->local, &v, &n) != DBX_OK) {
    fprintf(stderr, "durabox sandbox snapshots: %s\n", dbx_local_errmsg(c->local));
    return 1;
  }
  if (n > 1) qsort(v, n, sizeof *v, by_made);
  cJSON *o = json ? cJSON_CreateObject() : NULL, *a = json ? cJSON_AddArrayToObject(o, "snapshots") : NULL;
  if (!json) printf("%-56s %-24s %-20s %-10s %s\n", "NAME", "WORKFLOW ID", "MADE (UTC)", "SIZE", "RUN STATE");
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    char state[32], wf[256], run[128], made[40], sz[32];
    int open = 0;
    snapshot_owner(c, v[i].name, v[i].labels, v[i].nlabels, state, sizeof state, &open, wf,
                   sizeof wf, run, sizeof run);
    total += v[i].bytes;
    if (json) {
      cJSON_AddItemToArray(a, snapshot_json(&v[i], wf, run, state));
      continue;
    }
    utc_text(v[i].made_ms, made, sizeof made);
    human_bytes(v[i].bytes, sz, sizeof sz);
    char *cw = dbx_cli_cell(*wf ? wf : "-");
    printf("%-56s %-24s %-20s %-10s %s\n", v[i].name, cw ? cw : "?", made, sz, state);
    free(cw);
  }
  if (json) {
    cJSON *sv = cJSON_AddObjectToObject(o, "service");
    cJSON_AddStringToObject(sv, "address", c->address);
    cJSON_AddBoolToObject(sv, "reachable", c->reachable);
    dbx_cli_json_print(o, 1);
    cJSON_Delete(o);
  } else {
    char sz[32];
    human_bytes(total, sz, sizeof sz);
    if (n == 0) printf("(no snapshots)\n");
    else printf("%zu snapshot%s, %s on disk in %s/snapshots\n", n, n == 1 ? "" : "s", sz,
                dbx_local_home(c->local));
    say_unreachable(c, json);
  }
  dbx_local_snapshots_free(v, n);
  return 0;
}

static int cmd_rm_snapshot(sbx_ctx *c, char **names, int nnames, int force, int json) {
  int rc = 0;
  dbx_local_snapshot *snaps = NULL;
  size_t nsnaps = 0;
  if (c->local && dbx_local_snapshots(c->local, &snaps, &nsnaps) != DBX_OK) {
    fprintf(stderr, "durabox sandbox rm-snapshot: %s\n", dbx_local_errmsg(c->local));
    return 1;
  }
  cJSON *done = json ? cJSON_CreateArray() : NULL;
  for (int i = 0; i < nnames; i++) {
    char state[32], wf[256], run[128];
    int open = 0;
    if (!dbx_drv_name_valid(names[i])) {
      fprintf(stderr, "durabox sandbox rm-snapshot: '%s' is not a valid snapshot name\n", names[i]);
      rc = 1;
      continue;
    }
    const dbx_local_snapshot *have = NULL;
    for (size_t k = 0; k < nsnaps && have == NULL; k++)
      if (strcmp(snaps[k].name, names[i]) == 0) have = &snaps[k];
    if (c->local && have == NULL) {
      fprintf(stderr, "durabox sandbox rm-snapshot: no snapshot '%s' in %s/snapshots "
              "(`durabox sandbox snapshots` lists them)\n", names[i], dbx_local_home(c->local));
      rc = 1;
      continue;
    }
    snapshot_owner(c, names[i], have ? have->labels : NULL, have ? have->nlabels : 0, state,
                   sizeof state, &open, wf, sizeof wf, run, sizeof run);
    if (open && !force) {
      fprintf(stderr, "durabox sandbox rm-snapshot: %s belongs to a running run (workflow %s, run %s): "
              "not removed (--force removes it anyway)\n", names[i], wf, run);
      rc = 1;
      continue;
    }
    if (c->drv->ops->snapshot_delete(c->drv->self, names[i]) != DBX_DRV_OK) {
      fprintf(stderr, "durabox sandbox rm-snapshot: cannot remove %s: %s\n", names[i],
              c->drv->ops->errmsg(c->drv->self));
      rc = 1;
      continue;
    }
    if (json) cJSON_AddItemToArray(done, cJSON_CreateString(names[i]));
    else if (c->local) printf("removed snapshot %s\n", names[i]);
    else printf("removed snapshot %s (Daytona answers the same for a name it does not have)\n", names[i]);
  }
  if (json) print_removed(done, rc);
  dbx_local_snapshots_free(snaps, nsnaps);
  return rc;
}

/* gc's part for snapshots: with older_h >= 0 the ones made more than
 * older_h hours ago whose run is not open (a snapshot naming no run goes by
 * age alone; one whose run's state is unknown stays); else only a line
 * saying how many there are. Adds to out (JSON) or prints. 0, or 1 when a
 * removal failed. */
static int gc_snapshots(sbx_ctx *c, double older_h, int dry, cJSON *out, cJSON *kept) {
  if (c->local == NULL) return 0;
  dbx_local_snapshot *v = NULL;
  size_t n = 0;
  if (dbx_local_snapshots(c->local, &v, &n) != DBX_OK) {
    fprintf(stderr, "durabox sandbox gc: snapshots: %s\n", dbx_local_errmsg(c->local));
    return 1;
  }
  if (n > 1) qsort(v, n, sizeof *v, by_made);
  int rc = 0;
  size_t left = 0;
  uint64_t left_bytes = 0;
  int64_t cut = dbx_wall_ns() / 1000000 - (int64_t)(older_h * 3600.0 * 1000.0);
  for (size_t i = 0; i < n; i++) {
    char state[32], wf[256], run[128];
    int open = 0;
    int old = older_h >= 0 && v[i].made_ms < cut;
    if (old)
      snapshot_owner(c, v[i].name, v[i].labels, v[i].nlabels, state, sizeof state, &open, wf,
                     sizeof wf, run, sizeof run);
    if (!old || open || strcmp(state, "unknown") == 0) {
      if (old && out == NULL)
        printf("kept snapshot %s: its run %s is %s\n", v[i].name, run,
               open ? "open" : "unknown to the service (none answered)");
      if (old && kept) cJSON_AddItemToArray(kept, snapshot_json(&v[i], wf, run, state));
      left++;
      left_bytes += v[i].bytes;
      continue;
    }
    if (!dry && dbx_local_snapshot_delete(c->local, v[i].name) != DBX_OK) {
      fprintf(stderr, "durabox sandbox gc: snapshot %s: %s\n", v[i].name, dbx_local_errmsg(c->local));
      rc = 1;
      continue;
    }
    if (out) {
      cJSON *o = snapshot_json(&v[i], wf, run, state);
      cJSON_AddStringToObject(o, "kind", "snapshot");
      cJSON_AddItemToArray(out, o);
    } else {
      char made[40], sz[32];
      utc_text(v[i].made_ms, made, sizeof made);
      human_bytes(v[i].bytes, sz, sizeof sz);
      printf("%s snapshot %s (made %s, %s, run %s)\n", dry ? "would remove" : "removed", v[i].name, made,
             sz, *run ? state : "-");
    }
  }
  if (out == NULL && left > 0 && older_h < 0) {
    char sz[32];
    human_bytes(left_bytes, sz, sizeof sz);
    printf("kept %zu snapshot%s (%s): `durabox sandbox snapshots` lists them, --snapshots-older-than H "
           "removes the old ones\n", left, left == 1 ? "" : "s", sz);
  }
  dbx_local_snapshots_free(v, n);
  return rc;
}

static int cmd_gc(sbx_ctx *c, int dry, double older_h, int json) {
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
  cJSON *kept_snaps = json && older_h >= 0 ? cJSON_CreateArray() : NULL;
  if (gc_snapshots(c, older_h, dry, out, kept_snaps) != 0) rc = 1;
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, dry ? "would_remove" : "removed", out);
    cJSON_AddItemToObject(o, "kept_busy", skipped);
    if (kept_snaps) cJSON_AddItemToObject(o, "kept_snapshots", kept_snaps);
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
  if (strcmp(sub, "list") != 0 && strcmp(sub, "rm") != 0 && strcmp(sub, "gc") != 0 &&
      strcmp(sub, "snapshots") != 0 && strcmp(sub, "rm-snapshot") != 0) {
    fprintf(stderr, "durabox sandbox: unknown verb '%s'\n", sub);
    usage(stderr);
    return 2;
  }
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const char *home = NULL, *sandbox = NULL;
  int dry = 0, force = 0, nids = 0;
  double older_h = -1; /* --snapshots-older-than: -1 not given */
  int rm_verb = strcmp(sub, "rm") == 0 || strcmp(sub, "rm-snapshot") == 0;
  char **ids = calloc((size_t)argc, sizeof *ids);
  const dbx_cli_flag fl[] = {
      {"--sandbox-home", NULL, DBX_CLI_FLAG_STR, &home, 0, 0},
      {"--home", NULL, DBX_CLI_FLAG_STR, &home, 0, 0},
      {"--dry-run", NULL, DBX_CLI_FLAG_BOOL, &dry, 0, 0},
      {"--force", NULL, DBX_CLI_FLAG_BOOL, &force, 0, 0},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
      {"--snapshots-older-than", NULL, DBX_CLI_FLAG_NUM, &older_h, 0, 87600},
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
    if (argv[i][0] != '-' && rm_verb) {
      ids[nids++] = argv[i];
      continue;
    }
    dbx_cli_flag_unknown("durabox sandbox", argv[i]);
    goto out;
  }
  if ((dry && strcmp(sub, "gc") != 0) || (force && !rm_verb) ||
      (older_h >= 0 && strcmp(sub, "gc") != 0)) {
    fprintf(stderr, "durabox sandbox %s: %s is for %s\n", sub,
            dry ? "--dry-run" : force ? "--force" : "--snapshots-older-than",
            dry || !force ? "gc" : "rm and rm-snapshot");
    goto out;
  }
  if (rm_verb && nids == 0) {
    if (strcmp(sub, "rm") == 0)
      fprintf(stderr, "durabox sandbox rm: name at least one sandbox id (`durabox sandbox list`)\n");
    else
      fprintf(stderr, "durabox sandbox rm-snapshot: name at least one snapshot (`durabox sandbox "
                      "snapshots`)\n");
    goto out;
  }
  for (int k = 0; k < nids; k++)
    if (!*ids[k]) {
      fprintf(stderr, "durabox sandbox %s: an empty %s\n", sub, strcmp(sub, "rm") == 0 ? "sandbox id" : "snapshot name");
      goto out;
    }
  if (dbx_cli_nonempty("durabox sandbox", "--sandbox-home", home) != 0) goto out;
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
  else if (strcmp(sub, "snapshots") == 0) rc = cmd_snapshots(&c, conn.json);
  else if (strcmp(sub, "rm-snapshot") == 0) rc = cmd_rm_snapshot(&c, ids, nids, force, conn.json);
  else rc = cmd_gc(&c, dry, older_h, conn.json);
out:
  rows_free(&c);
  dbx_client_destroy(c.client);
  dbx_local_close(c.local);
  dbx_cli_kit_close(&c.kit);
  dbx_cli_conn_cleanup(&conn);
  free(ids);
  return rc;
}
