/* cli/forkacts: the fork plan of a source history and the two activity
 * types of checkpoints and forks (see fork.h).
 *
 * A history is scanned once into recorded steps (the outcomes of the Script's
 * step activities and the "durabox.fork_step" markers of a fork, in event
 * order, each with its identity key and occurrence) and checkpoints (the
 * completed durabox.checkpoint activities with the event they cover). The
 * plan and the covered intervals are both read off that scan. */
#include "cli/fork.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "activities/sandbox.h"
#include "base/hash.h"
#include "base/util.h"
#include "worker/api.h"
#include "worker/client.h"
#include "worker/wstore.h"
#include "workflows/script.h"

/* The largest plan (its steps' results make it up): under one payload. */
#define PLAN_MAX_BYTES ((size_t)1536 * 1024)

static const char *const STEP_TYPES[] = {"sandbox.exec", "sandbox.write_file", "sandbox.read_file",
                                         "sandbox.git_commit", "sandbox.checkpoint", NULL};

static int is_step_type(const char *t) {
  for (size_t i = 0; t && STEP_TYPES[i]; i++)
    if (strcmp(STEP_TYPES[i], t) == 0) return 1;
  return 0;
}

static int type_changes(const char *t) {
  return t && (strcmp(t, "sandbox.exec") == 0 || strcmp(t, "sandbox.write_file") == 0 ||
               strcmp(t, "sandbox.git_commit") == 0);
}

typedef struct {
  cJSON *steps;  /* [{entry fields..., "changes": bool}] in event order */
  cJSON *ckpts;  /* [{"name", "ref", "covered_event_id"}] in covered order */
  int64_t last, last_wtc;
  int64_t open_wt; /* the WorkflowTaskScheduled of the run's open last task, or 0 */
  const char *type;
} scan;

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k, double d) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : d;
}

/* A step's outcome event: its fields into entry. 0, or -1 on OOM. */
static int add_outcome(cJSON *entry, const HistoryEvent *e) {
  const Failure *f = NULL;
  const char *status = "completed";
  if (e->event_type == ET(ACTIVITY_TASK_COMPLETED)) {
    char *r = dbx_payloads_to_json(e->activity_task_completed_event_attributes->result);
    cJSON *rj = r ? cJSON_Parse(r) : NULL;
    free(r);
    if (!rj) return -1;
    cJSON_AddItemToObject(entry, "result", rj);
  } else if (e->event_type == ET(ACTIVITY_TASK_FAILED)) {
    status = "failed";
    f = e->activity_task_failed_event_attributes->failure;
  } else if (e->event_type == ET(ACTIVITY_TASK_TIMED_OUT)) {
    status = "timed_out";
    f = e->activity_task_timed_out_event_attributes->failure;
  } else {
    status = "canceled";
  }
  cJSON_AddStringToObject(entry, "status", status);
  if (f) {
    const char *ft = f->application_failure_info ? f->application_failure_info->type : NULL;
    cJSON_AddStringToObject(entry, "failure_type", ft ? ft : "");
    cJSON_AddStringToObject(entry, "failure_message", f->message ? f->message : "");
    if (f->application_failure_info && f->application_failure_info->non_retryable)
      cJSON_AddTrueToObject(entry, "non_retryable");
  }
  return 0;
}

static int64_t sched_of(const HistoryEvent *e) {
  switch (e->attributes_case) {
  case HEV(ACTIVITY_TASK_COMPLETED): return e->activity_task_completed_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_FAILED): return e->activity_task_failed_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_TIMED_OUT): return e->activity_task_timed_out_event_attributes->scheduled_event_id;
  case HEV(ACTIVITY_TASK_CANCELED): return e->activity_task_canceled_event_attributes->scheduled_event_id;
  default: return 0;
  }
}

/* data of a marker named name, parsed; NULL when it is none. */
static cJSON *marker_data(const HistoryEvent *e, const char *name) {
  const MarkerRecordedEventAttributes *m = e->marker_recorded_event_attributes;
  if (e->attributes_case != HEV(MARKER_RECORDED) || !m || !m->marker_name ||
      strcmp(m->marker_name, name) != 0)
    return NULL;
  for (size_t i = 0; i < m->n_details; i++)
    if (m->details[i] && m->details[i]->key && strcmp(m->details[i]->key, "data") == 0) {
      char *v = dbx_payloads_to_json(m->details[i]->value);
      cJSON *j = v ? cJSON_Parse(v) : NULL;
      free(v);
      return j;
    }
  return NULL;
}

/* Occurrences seen per identity key: an open-addressing table of at least
 * twice as many slots as keys (a history has fewer steps than events). */
typedef struct {
  const char *key; /* borrowed from the entry that first had it */
  int count;
} occ_slot;

typedef struct {
  occ_slot *s;
  size_t cap; /* a power of two */
} occ_map;

static int occ_init(occ_map *m, size_t n) {
  for (m->cap = 64; m->cap < 2 * n + 2; m->cap *= 2) {}
  m->s = calloc(m->cap, sizeof *m->s);
  return m->s ? 0 : -1;
}

/* Give entry its occurrence among the keys seen. */
static void number_occurrence(occ_map *m, cJSON *entry) {
  const char *k = jstr(entry, "key");
  int occ = 0;
  if (k) {
    size_t i = (size_t)dbx_fnv1a64(DBX_FNV1A64_OFFSET, k, strlen(k)) & (m->cap - 1);
    while (m->s[i].key && strcmp(m->s[i].key, k) != 0) i = (i + 1) & (m->cap - 1);
    if (!m->s[i].key) m->s[i].key = k;
    occ = m->s[i].count++;
  }
  cJSON_DeleteItemFromObjectCaseSensitive(entry, "occurrence");
  cJSON_AddNumberToObject(entry, "occurrence", occ);
}

/* A step activity's outcome e, scheduled by s: a recorded step. */
static cJSON *step_entry(const HistoryEvent *e, const HistoryEvent *s) {
  const ActivityTaskScheduledEventAttributes *a = s->activity_task_scheduled_event_attributes;
  const char *type = a->activity_type ? a->activity_type->name : NULL;
  if (!is_step_type(type)) return NULL;
  char *in = dbx_payloads_to_json(a->input);
  cJSON *inj = in ? cJSON_Parse(in) : NULL, *entry = cJSON_CreateObject();
  char key[DBX_SCRIPT_STEP_KEY_LEN + 1];
  int ok = in && entry && dbx_script_step_key(type, in, strlen(in), key) == 0;
  if (ok) {
    cJSON_AddStringToObject(entry, "type", type);
    cJSON_AddStringToObject(entry, "key", key);
    cJSON_AddStringToObject(entry, "step", jstr(inj, "step") ? jstr(inj, "step") : "");
    cJSON_AddNumberToObject(entry, "event_id", (double)e->event_id);
    cJSON_AddNumberToObject(entry, "attempts", 1);
    ok = add_outcome(entry, e) == 0;
    cJSON_AddBoolToObject(entry, "changes", type_changes(type));
  }
  free(in);
  cJSON_Delete(inj);
  if (!ok) cJSON_Delete(entry);
  return ok ? entry : NULL;
}

/* A completed durabox.checkpoint: {"name", "ref", "covered_event_id"}. */
static cJSON *ckpt_entry(const HistoryEvent *e, const HistoryEvent *s) {
  const ActivityTaskScheduledEventAttributes *a = s->activity_task_scheduled_event_attributes;
  if (e->event_type != ET(ACTIVITY_TASK_COMPLETED) || !a->activity_type ||
      strcmp(a->activity_type->name, "durabox.checkpoint") != 0)
    return NULL;
  char *in = dbx_payloads_to_json(a->input), *out =
      dbx_payloads_to_json(e->activity_task_completed_event_attributes->result);
  cJSON *ij = in ? cJSON_Parse(in) : NULL, *oj = out ? cJSON_Parse(out) : NULL, *c = NULL;
  if (jstr(oj, "ref") && jnum(ij, "covered_event_id", 0) > 0 && (c = cJSON_CreateObject())) {
    cJSON_AddStringToObject(c, "name", jstr(ij, "name") ? jstr(ij, "name") : jstr(oj, "ref"));
    cJSON_AddStringToObject(c, "ref", jstr(oj, "ref"));
    cJSON_AddNumberToObject(c, "covered_event_id", jnum(ij, "covered_event_id", 0));
  }
  free(in);
  free(out);
  cJSON_Delete(ij);
  cJSON_Delete(oj);
  return c;
}

static int is_wt_event(int t) {
  return t == ET(WORKFLOW_TASK_SCHEDULED) || t == ET(WORKFLOW_TASK_STARTED);
}

static void scan_free(scan *sc) {
  cJSON_Delete(sc->steps);
  cJSON_Delete(sc->ckpts);
}

/* 0, or -1 on OOM. */
static int scan_history(HistoryEvent *const *evs, size_t n, scan *sc) {
  memset(sc, 0, sizeof *sc);
  sc->steps = cJSON_CreateArray();
  sc->ckpts = cJSON_CreateArray();
  occ_map seen = {0};
  const HistoryEvent **by_id = calloc(n + 1, sizeof *by_id);
  int rc = sc->steps && sc->ckpts && by_id && occ_init(&seen, n) == 0 ? 0 : -1;
  if (n && evs[0]->workflow_execution_started_event_attributes &&
      evs[0]->workflow_execution_started_event_attributes->workflow_type)
    sc->type = evs[0]->workflow_execution_started_event_attributes->workflow_type->name;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    const HistoryEvent *e = evs[i];
    if (e->event_id > sc->last) sc->last = e->event_id;
    if (e->event_type == ET(WORKFLOW_TASK_COMPLETED)) sc->last_wtc = e->event_id;
    if (e->event_id >= 1 && (size_t)e->event_id <= n) by_id[e->event_id] = e;
    int64_t sid = sched_of(e);
    const HistoryEvent *s = sid >= 1 && (size_t)sid <= n ? by_id[sid] : NULL;
    cJSON *entry = NULL;
    if (s && s->attributes_case == HEV(ACTIVITY_TASK_SCHEDULED)) {
      cJSON *ck = ckpt_entry(e, s);
      if (ck) cJSON_AddItemToArray(sc->ckpts, ck);
      entry = step_entry(e, s);
    } else if ((entry = marker_data(e, "durabox.fork_step")) != NULL) {
      /* a step a fork satisfied from its source's record */
      int restored = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(entry, "restored"));
      static const char *const drop[] = {"event_id", "changes", "restored", "restored_mark"};
      for (size_t k = 0; k < 4; k++) cJSON_DeleteItemFromObjectCaseSensitive(entry, drop[k]);
      cJSON_AddNumberToObject(entry, "event_id", (double)e->event_id);
      cJSON_AddBoolToObject(entry, "changes", type_changes(jstr(entry, "type")));
      cJSON_AddBoolToObject(entry, "restored_mark", restored);
    }
    if (entry) {
      number_occurrence(&seen, entry);
      cJSON_AddItemToArray(sc->steps, entry);
    }
  }
  /* an open last task: its Scheduled (and Started) end the history */
  for (size_t i = n; i > 0 && is_wt_event(evs[i - 1]->event_type); i--)
    if (evs[i - 1]->event_type == ET(WORKFLOW_TASK_SCHEDULED)) {
      sc->open_wt = evs[i - 1]->event_id;
      break;
    }
  free(by_id);
  free(seen.s);
  return rc;
}

/* A change of step e that a sandbox restored from ck (NULL: a fresh one)
 * lacks at a fork point after it: a workspace change after ck's covered
 * event, not one the checkpointed run had restored itself. */
static int lacks(const cJSON *e, const cJSON *ck) {
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "changes"))) return 0;
  if (!ck) return 1;
  return jnum(e, "event_id", 0) > jnum(ck, "covered_event_id", 0) &&
         !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "restored_mark"));
}

static cJSON *pick_checkpoint(const scan *sc, int64_t at) {
  const cJSON *c, *best = NULL;
  cJSON_ArrayForEach(c, sc->ckpts) {
    double cov = jnum(c, "covered_event_id", 0);
    if (cov <= (double)at && (!best || cov >= jnum(best, "covered_event_id", 0))) best = c;
  }
  return best ? cJSON_Duplicate(best, 1) : NULL;
}

static cJSON *refuse(char **why, const char *fmt, long long a, long long b) {
  *why = dbx_asprintf(fmt, a, b);
  return NULL;
}

cJSON *dbx_fork_plan(HistoryEvent *const *evs, size_t n, int64_t at, const char *workflow_id,
                     const char *run_id, char **why) {
  *why = NULL;
  scan sc;
  if (scan_history(evs, n, &sc) != 0) {
    scan_free(&sc);
    return NULL;
  }
  cJSON *plan = NULL;
  int64_t req = at;
  if (!sc.type || strcmp(sc.type, "durabox.Script") != 0) {
    *why = dbx_asprintf("only durabox.Script runs can be forked (this run is %.100s)",
                        sc.type ? sc.type : "of no known type");
    goto out;
  }
  if (at < 1 || at > sc.last) {
    refuse(why, "event %lld is not in the run (its events are 1-%lld)", (long long)at,
           (long long)sc.last);
    goto out;
  }
  if (sc.last_wtc == 0) {
    *why = dbx_asprintf("the run has no completed workflow task (%lld events): there is nothing "
                        "to fork from", (long long)sc.last);
    goto out;
  }
  int snapped = sc.open_wt > sc.last_wtc && at >= sc.open_wt;
  if (snapped) at = sc.last_wtc; /* the open task recorded nothing yet */
  cJSON *ck = pick_checkpoint(&sc, at);
  plan = cJSON_CreateObject();
  cJSON *src = cJSON_AddObjectToObject(plan, "source");
  cJSON_AddStringToObject(src, "workflow_id", workflow_id ? workflow_id : "");
  cJSON_AddStringToObject(src, "run_id", run_id ? run_id : "");
  cJSON_AddNumberToObject(plan, "event_id", (double)at);
  cJSON_AddNumberToObject(plan, "requested_event_id", (double)req);
  cJSON_AddBoolToObject(plan, "snapped", snapped);
  cJSON_AddNumberToObject(plan, "last_event_id", (double)sc.last);
  cJSON *steps = cJSON_AddArrayToObject(plan, "steps"), *unc = cJSON_CreateArray();
  size_t size = 0;
  int left_out = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, sc.steps) {
    if (jnum(e, "event_id", 0) > (double)at) break;
    int lack = lacks(e, ck);
    if (lack) {
      cJSON *u = cJSON_CreateObject();
      cJSON_AddStringToObject(u, "step", jstr(e, "step") ? jstr(e, "step") : "");
      cJSON_AddStringToObject(u, "type", jstr(e, "type") ? jstr(e, "type") : "");
      cJSON_AddNumberToObject(u, "event_id", jnum(e, "event_id", 0));
      cJSON_AddItemToArray(unc, u);
    }
    cJSON *d = cJSON_Duplicate(e, 1);
    cJSON_DeleteItemFromObjectCaseSensitive(d, "changes");
    cJSON_DeleteItemFromObjectCaseSensitive(d, "restored_mark");
    cJSON_AddBoolToObject(d, "restored", ck != NULL && !lack);
    char *t = cJSON_PrintUnformatted(d);
    size += t ? strlen(t) : 0;
    free(t);
    if (size > PLAN_MAX_BYTES) {
      cJSON_Delete(d);
      left_out++;
      continue;
    }
    cJSON_AddItemToArray(steps, d);
  }
  cJSON_AddNumberToObject(plan, "steps_left_out", left_out);
  if (ck) cJSON_AddItemToObject(plan, "checkpoint", ck);
  else cJSON_AddNullToObject(plan, "checkpoint");
  cJSON_AddBoolToObject(plan, "covered", cJSON_GetArraySize(unc) == 0);
  cJSON_AddItemToObject(plan, "uncovered_steps", unc);
out:
  scan_free(&sc);
  return plan;
}

cJSON *dbx_fork_points(HistoryEvent *const *evs, size_t n) {
  scan sc;
  cJSON *o = NULL;
  if (scan_history(evs, n, &sc) == 0 && (o = cJSON_CreateObject())) {
    cJSON_AddNumberToObject(o, "last_event_id", (double)sc.last);
    cJSON *iv = cJSON_AddArrayToObject(o, "intervals"), *c;
    cJSON_ArrayForEach(c, sc.ckpts) {
      double from = jnum(c, "covered_event_id", 0), to = (double)sc.last;
      const cJSON *e;
      cJSON_ArrayForEach(e, sc.steps) {
        if (lacks(e, c)) {
          to = jnum(e, "event_id", 0) - 1;
          break;
        }
      }
      cJSON *i = cJSON_CreateObject();
      cJSON_AddNumberToObject(i, "from", from);
      cJSON_AddNumberToObject(i, "to", to);
      cJSON_AddStringToObject(i, "checkpoint", jstr(c, "name"));
      cJSON_AddStringToObject(i, "ref", jstr(c, "ref"));
      cJSON_AddItemToArray(iv, i);
    }
  }
  scan_free(&sc);
  return o;
}

/* ------------------------------------------------------------ activities */

struct dbx_fork_acts {
  dbx_driver *drv;
  dbx_worker *w;
  dbx_activity_type types[2];
};

static dbx_err act_fail(dbx_act_result *res, int nr, const char *type, char *msg) {
  res->failure_type = dbx_strdup(type);
  res->failure_message = msg;
  res->non_retryable = nr;
  return res->failure_type && msg ? DBX_OK : DBX_ENOMEM;
}

static dbx_err put_index(dbx_fork_acts *fa, dbx_act *a, const char *id, const char *name,
                         const char *ref, double covered) {
  const char *wid = dbx_act_workflow_id(a), *rid = dbx_act_run_id(a);
  char *key = dbx_asprintf("%s/%s/%020lld", wid ? wid : "", rid ? rid : "", (long long)covered);
  cJSON *v = cJSON_CreateObject();
  cJSON_AddStringToObject(v, "name", name);
  cJSON_AddStringToObject(v, "ref", ref);
  cJSON_AddNumberToObject(v, "covered_event_id", covered);
  cJSON_AddStringToObject(v, "sandbox_id", id);
  cJSON_AddStringToObject(v, "driver", fa->drv->name ? fa->drv->name : "");
  cJSON_AddStringToObject(v, "workflow_id", wid ? wid : "");
  cJSON_AddStringToObject(v, "run_id", rid ? rid : "");
  char *txt = cJSON_PrintUnformatted(v);
  cJSON_Delete(v);
  dbx_err e = key && txt ? dbx_wstore_kv_put(dbx_worker_wstore(fa->w), DBX_WSTORE_CHECKPOINTS, key, txt)
                         : DBX_ENOMEM;
  free(key);
  free(txt);
  return e;
}

static dbx_err run_ckpt(dbx_act *a, const char *json, size_t len, dbx_act_result *res, void *ud) {
  dbx_fork_acts *fa = ud;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const char *id = jstr(in, "sandbox_id"), *name = jstr(in, "name");
  double covered = jnum(in, "covered_event_id", 0);
  char *ref = NULL;
  dbx_err rc = DBX_OK;
  if (!id || !*id || !name || !*name || covered < 1) {
    rc = act_fail(res, 1, "InvalidInput", dbx_asprintf("durabox.checkpoint needs \"sandbox_id\", "
                                                       "\"name\" and \"covered_event_id\""));
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  dbx_drv_err d = fa->drv->ops->checkpoint(fa->drv->self, id, name, &ref);
  if (d == DBX_DRV_CANCELED || d == DBX_DRV_NOMEM) {
    rc = d == DBX_DRV_CANCELED ? DBX_ECANCELED : DBX_ENOMEM;
    goto out;
  }
  if (d != DBX_DRV_OK) {
    int nr = 0;
    const char *type = dbx_sandbox_failure_type(d, &nr);
    const char *why = fa->drv->ops->errmsg(fa->drv->self);
    rc = act_fail(res, nr, type ? type : "SandboxError",
                  dbx_asprintf("durabox.checkpoint: checkpoint '%s' of sandbox '%s': %s", name, id,
                               why && *why ? why : "failed"));
    goto out;
  }
  dbx_err ie = put_index(fa, a, id, name, ref, covered);
  if (ie != DBX_OK) {
    rc = ie == DBX_ENOMEM ? ie
                          : act_fail(res, 0, "IndexWriteFailed",
                                     dbx_asprintf("durabox.checkpoint: the checkpoint index of "
                                                  "this worker could not be written: %s",
                                                  dbx_strerror(ie)));
    goto out;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ref", ref);
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddNumberToObject(o, "covered_event_id", covered);
  res->result_json = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!res->result_json) rc = DBX_ENOMEM;
out:
  free(ref);
  cJSON_Delete(in);
  return rc;
}

static dbx_err run_fork_load(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                             void *ud) {
  dbx_fork_acts *fa = ud;
  (void)a;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const char *wid = jstr(in, "workflow_id"), *rid = jstr(in, "run_id");
  double at = jnum(in, "event_id", 0);
  dbx_client_history h = {0};
  char *err = NULL, *why = NULL;
  dbx_err rc = DBX_OK;
  if (!wid || !*wid || !rid || at < 1) {
    rc = act_fail(res, 1, "InvalidInput", dbx_asprintf("durabox.fork_load needs \"workflow_id\", "
                                                       "\"run_id\" and \"event_id\""));
    goto out;
  }
  dbx_err e = dbx_client_get_history(dbx_worker_client(fa->w), wid, rid, NULL, &h, &err);
  if (e != DBX_OK) {
    rc = e == DBX_ENOMEM ? e
         : act_fail(res, e == DBX_ENOTFOUND, e == DBX_ENOTFOUND ? "ForkSourceNotFound" : "ServiceError",
                    dbx_asprintf("fork: reading the history of workflow %s run %s: %s", wid, rid,
                                 err ? err : dbx_strerror(e)));
    goto out;
  }
  cJSON *plan = dbx_fork_plan(h.events, h.n, (int64_t)at, wid, rid, &why);
  if (!plan) {
    rc = why ? act_fail(res, 1, "ForkRefused", dbx_asprintf("fork: %s", why)) : DBX_ENOMEM;
    goto out;
  }
  res->result_json = cJSON_PrintUnformatted(plan);
  cJSON_Delete(plan);
  if (!res->result_json) rc = DBX_ENOMEM;
out:
  free(err);
  free(why);
  dbx_client_history_cleanup(&h);
  cJSON_Delete(in);
  return rc;
}

dbx_err dbx_fork_acts_create(dbx_driver *drv, dbx_fork_acts **out) {
  *out = NULL;
  if (!drv) return DBX_EINVAL;
  dbx_fork_acts *fa = calloc(1, sizeof *fa);
  if (!fa) return DBX_ENOMEM;
  fa->drv = drv;
  fa->types[0] = (dbx_activity_type){"durabox.checkpoint", DBX_SAFE_TO_RETRY, run_ckpt, fa};
  fa->types[1] = (dbx_activity_type){"durabox.fork_load", DBX_SAFE_TO_RETRY, run_fork_load, fa};
  *out = fa;
  return DBX_OK;
}

dbx_err dbx_fork_acts_register(dbx_fork_acts *a, dbx_worker *w) {
  if (!a || !w) return DBX_EINVAL;
  a->w = w;
  for (size_t i = 0; i < 2; i++) {
    dbx_err e = dbx_worker_register_activity(w, &a->types[i]);
    if (e != DBX_OK) return e;
  }
  return DBX_OK;
}

void dbx_fork_acts_destroy(dbx_fork_acts *a) { free(a); }
