/* workflows/fleet: durabox.Fleet (see fleet.h).
 *
 * State: the input (owned), the current page of items (owned array; inline
 * items are copied a page at a time, a file's come from fleet.read_items),
 * the page's skip flags from fleet.lookup, the running children (slots), the
 * counts and the per-item records. pump() is the one place that decides what
 * happens next; every callback ends in it, so replaying the same history
 * walks the same decisions and issues the same commands. */
#include "workflows/fleet.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/json.h"
#include "base/util.h"
#include "workflows/script.h"

typedef struct {
  char *key;          /* owned */
  char *wid;          /* owned: the child's workflow id */
  cJSON *item;        /* borrowed from the page */
  int64_t seq;        /* the child's seq; 0: free slot */
  int64_t started_ms; /* workflow time of the first start */
  char *run_id;       /* owned, NULL before STARTED */
  int attempts;
  int cancel_pending; /* cancellation asked before its start was recorded */
} slot;

typedef struct {
  char *fleet_id;     /* owned: the workflow id, as recorded by the marker "durabox.fleet_id" */
  cJSON *input;       /* owned */
  const cJSON *items; /* inline items (borrowed from input), or NULL */
  const char *file;   /* items_file (borrowed), or NULL */
  const cJSON *tmpl_input;
  const char *child_type, *child_tq;
  int conc, stop_after, retries, skip, page_size;
  int64_t timeout_ms, max_events;
  /* carried across runs */
  int64_t cursor; /* inline: index; file: byte offset of the next item not started */
  int64_t succeeded, failed, cancelled, skipped, seen, dropped, runs, t0;
  cJSON *records; /* owned array */
  /* this run */
  cJSON *page;    /* owned array, or NULL */
  int64_t *ends;  /* position after each page item (index or byte offset) */
  int *skipflag;  /* per page item: 1 skip (already succeeded) */
  char **prev_run;
  int npage, pos, eof;
  int64_t page_start;
  int64_t fetch_seq, lookup_seq; /* activities in flight, 0: none */
  slot *slots;
  int running;
  int draining, stopping, cancelling, done;
} fleet;

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double num_or(const cJSON *o, const char *k, double d) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? x->valuedouble : d;
}

int dbx_fleet_result_ok(const char *json, size_t len) {
  cJSON *r = cJSON_ParseWithLength(json, len);
  int ok = 1;
  const cJSON *st = cJSON_IsObject(r) ? cJSON_GetObjectItemCaseSensitive(r, "status") : NULL;
  if (cJSON_IsString(st) && strcmp(st->valuestring, "completed") != 0) ok = 0;
  cJSON_Delete(r);
  return ok;
}

/* A key: a string of 1..MAX bytes without control characters (the JSON
 * check already refused NULs and bad UTF-8 in the input). */
static const char *key_problem(const cJSON *item) {
  if (!cJSON_IsObject(item)) return "is not an object";
  const char *k = str_of(item, "key");
  if (k == NULL) return "has no string \"key\"";
  size_t n = strlen(k);
  if (n == 0 || n > DBX_FLEET_MAX_KEY_BYTES) return "has a key that is empty or longer than 200 bytes";
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f) return "has a key with a control character";
  return NULL;
}

const char *dbx_fleet_item_problem(const struct cJSON *item) { return key_problem(item); }

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *const TOP[] = {"items", "items_file", "template", "concurrency",
                                  "stop_after_failures", "item_timeout_s", "item_retries",
                                  "skip_succeeded", "max_events", "page_size", "state", NULL};

static int whole_in(const cJSON *v, double lo, double hi) {
  return cJSON_IsNumber(v) && dbx_json_whole(v->valuedouble, lo, hi);
}

static int check_items(const cJSON *items, char *err, size_t n) {
  int cnt = cJSON_GetArraySize(items);
  const char **keys = cnt ? calloc((size_t)cnt, sizeof *keys) : NULL;
  if (cnt && keys == NULL) return snprintf(err, n, "out of memory"), -1;
  int i = 0, rc = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, items) {
    const char *p = key_problem(it);
    if (p) {
      snprintf(err, n, "items[%d] %s", i, p);
      rc = -1;
      goto out;
    }
    keys[i++] = str_of(it, "key");
  }
  if (cnt > 1) qsort(keys, (size_t)cnt, sizeof *keys, cmp_str); /* qsort(NULL, 0) is undefined */
  for (i = 1; i < cnt; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      snprintf(err, n, "items: key \"%.80s\" given twice", keys[i]);
      rc = -1;
      goto out;
    }
out:
  free(keys);
  return rc;
}

static int check_tree(const cJSON *in, char *err, size_t n) {
  if (!cJSON_IsObject(in)) return snprintf(err, n, "the input must be a JSON object"), -1;
  for (const cJSON *f = in->child; f; f = f->next) {
    int ok = 0;
    for (int i = 0; TOP[i]; i++) ok |= strcmp(TOP[i], f->string) == 0;
    if (!ok) return snprintf(err, n, "unknown field \"%.80s\"", f->string), -1;
  }
  const cJSON *items = cJSON_GetObjectItemCaseSensitive(in, "items");
  const cJSON *file = cJSON_GetObjectItemCaseSensitive(in, "items_file");
  if ((items == NULL) == (file == NULL))
    return snprintf(err, n, "give exactly one of \"items\" and \"items_file\""), -1;
  if (items && !cJSON_IsArray(items)) return snprintf(err, n, "\"items\" must be an array"), -1;
  if (file && (!cJSON_IsString(file) || file->valuestring[0] != '/'))
    return snprintf(err, n, "\"items_file\" must be an absolute path"), -1;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(in, "template");
  if (!cJSON_IsObject(t)) return snprintf(err, n, "\"template\" must be an object"), -1;
  for (const cJSON *f = t->child; f; f = f->next)
    if (strcmp(f->string, "workflow_type") && strcmp(f->string, "task_queue") &&
        strcmp(f->string, "input"))
      return snprintf(err, n, "template: unknown field \"%.80s\" (workflow_type, task_queue, "
                              "input)", f->string), -1;
  const cJSON *wt = cJSON_GetObjectItemCaseSensitive(t, "workflow_type");
  const cJSON *tq = cJSON_GetObjectItemCaseSensitive(t, "task_queue");
  if ((wt && (!cJSON_IsString(wt) || !wt->valuestring[0])) ||
      (tq && (!cJSON_IsString(tq) || !tq->valuestring[0])))
    return snprintf(err, n, "template: workflow_type and task_queue must be non-empty strings"),
           -1;
  static const struct {
    const char *k;
    double lo, hi;
  } nums[] = {{"concurrency", 1, DBX_FLEET_MAX_CONCURRENCY},
              {"stop_after_failures", 0, 1e9},
              {"item_timeout_s", 0, 315360000},
              {"item_retries", 0, 10},
              {"max_events", 100, 1e7},
              {"page_size", 1, DBX_FLEET_MAX_PAGE}};
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, nums[i].k);
    if (v && !whole_in(v, nums[i].lo, nums[i].hi))
      return snprintf(err, n, "\"%s\" must be a whole number from %.0f to %.0f", nums[i].k,
                      nums[i].lo, nums[i].hi), -1;
  }
  const cJSON *sk = cJSON_GetObjectItemCaseSensitive(in, "skip_succeeded");
  if (sk && !cJSON_IsBool(sk)) return snprintf(err, n, "\"skip_succeeded\" must be a boolean"), -1;
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(in, "state");
  if (st && !cJSON_IsObject(st)) return snprintf(err, n, "\"state\" must be an object"), -1;
  if (items && !st) return check_items(items, err, n);
  return 0;
}

static cJSON *parse_checked(const char *json, size_t len, char *err, size_t n) {
  const char *end = NULL;
  cJSON *in = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (in == NULL) return snprintf(err, n, "the input is not JSON"), NULL;
  size_t at = 0;
  dbx_json_problem p = dbx_json_text_check(json, len, (size_t)(end - json), &at);
  if (p != DBX_JSON_OK) {
    snprintf(err, n, "the input %s", dbx_json_problem_str(p));
    cJSON_Delete(in);
    return NULL;
  }
  if (check_tree(in, err, n) != 0) {
    cJSON_Delete(in);
    return NULL;
  }
  return in;
}

int dbx_fleet_validate(const char *input_json, size_t len, char *err, size_t n) {
  cJSON *in = parse_checked(input_json, len, err, n);
  if (in == NULL) return -1;
  cJSON_Delete(in);
  return 0;
}

/* ------------------------------------------------------------ records */

static void add_record(fleet *f, const char *key, const char *status, const char *wid,
                       const char *rid, int64_t dur, int attempts, const char *error) {
  f->seen++;
  if (strcmp(status, "succeeded") == 0) f->succeeded++;
  else if (strcmp(status, "failed") == 0) f->failed++;
  else if (strcmp(status, "cancelled") == 0) f->cancelled++;
  else f->skipped++;
  if (cJSON_GetArraySize(f->records) >= DBX_FLEET_MAX_RECORDS) {
    f->dropped++;
    return;
  }
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "key", key);
  cJSON_AddStringToObject(r, "status", status);
  cJSON_AddStringToObject(r, "workflow_id", wid ? wid : "");
  cJSON_AddStringToObject(r, "run_id", rid ? rid : "");
  cJSON_AddNumberToObject(r, "duration_ms", (double)dur);
  cJSON_AddNumberToObject(r, "attempts", attempts);
  if (error) cJSON_AddStringToObject(r, "error", error);
  cJSON_AddItemToArray(f->records, r);
}

/* Items of the page not started (nor recorded) yet. */
static int64_t page_left(const fleet *f) { return f->page && f->pos < f->npage ? f->npage - f->pos : 0; }

/* The items of the input, or -1 while an items file is not read to its end. */
static int64_t total_known(const fleet *f) {
  if (f->items) return cJSON_GetArraySize(f->items);
  return f->eof && f->fetch_seq == 0 ? f->seen + f->running + page_left(f) : -1;
}

static void add_counts(const fleet *f, cJSON *o) {
  cJSON_AddNumberToObject(o, "succeeded", (double)f->succeeded);
  cJSON_AddNumberToObject(o, "failed", (double)f->failed);
  cJSON_AddNumberToObject(o, "cancelled", (double)f->cancelled);
  cJSON_AddNumberToObject(o, "skipped", (double)f->skipped);
  cJSON_AddNumberToObject(o, "runs", (double)f->runs);
}

/* ------------------------------------------------------------ pages */

static void page_free(fleet *f) {
  cJSON_Delete(f->page);
  free(f->ends);
  free(f->skipflag);
  for (int i = 0; f->prev_run && i < f->npage; i++) free(f->prev_run[i]);
  free(f->prev_run);
  f->page = NULL, f->ends = NULL, f->skipflag = NULL, f->prev_run = NULL;
  f->npage = f->pos = 0;
}

/* The page's items are set: allocate its side arrays. 0, or -1 (OOM). */
static int page_arrays(fleet *f) {
  f->npage = cJSON_GetArraySize(f->page);
  size_t n = (size_t)f->npage + 1;
  f->ends = calloc(n, sizeof *f->ends);
  f->skipflag = calloc(n, sizeof *f->skipflag);
  f->prev_run = calloc(n, sizeof *f->prev_run);
  return f->ends && f->skipflag && f->prev_run ? 0 : -1;
}

static char *child_wid(const fleet *f, dbx_wf *wf, const char *key) {
  (void)wf;
  return dbx_asprintf("%s/%s", f->fleet_id, key);
}

/* Ask fleet.lookup which of the page's items already succeeded. */
static int lookup_page(fleet *f, dbx_wf *wf) {
  cJSON *in = cJSON_CreateObject();
  cJSON *ids = cJSON_AddArrayToObject(in, "workflow_ids");
  const cJSON *it;
  cJSON_ArrayForEach(it, f->page) {
    const char *k = key_problem(it) ? "" : str_of(it, "key");
    char *w = child_wid(f, wf, k);
    cJSON_AddItemToArray(ids, cJSON_CreateString(w ? w : ""));
    free(w);
  }
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (txt == NULL) return -1;
  dbx_activity_opts o = {.start_to_close_ms = 60000, .retry_class = DBX_SAFE_TO_RETRY,
                         .maximum_attempts = 0, .maximum_interval_ms = 30000};
  f->lookup_seq = dbx_wf_schedule_activity(wf, "fleet.lookup", txt, &o);
  free(txt);
  return f->lookup_seq > 0 ? 0 : -1;
}

/* The next page: inline items are copied from the input; a file's come from
 * fleet.read_items. 0, or -1 (OOM). */
static int fetch_page(fleet *f, dbx_wf *wf) {
  page_free(f);
  f->page_start = f->cursor;
  if (f->items) {
    int total = cJSON_GetArraySize(f->items);
    if (!(f->page = cJSON_CreateArray())) return -1;
    int64_t i = f->cursor;
    for (; i < total && i < f->cursor + f->page_size; i++)
      cJSON_AddItemToArray(f->page, cJSON_Duplicate(cJSON_GetArrayItem(f->items, (int)i), 1));
    if (page_arrays(f) != 0) return -1;
    for (int j = 0; j < f->npage; j++) f->ends[j] = f->cursor + j + 1;
    f->eof = i >= total;
    return f->skip && f->npage ? lookup_page(f, wf) : 0;
  }
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "path", f->file);
  cJSON_AddNumberToObject(in, "offset", (double)f->cursor);
  cJSON_AddNumberToObject(in, "limit", f->page_size);
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (txt == NULL) return -1;
  dbx_activity_opts o = {.start_to_close_ms = 60000, .retry_class = DBX_SAFE_TO_RETRY,
                         .maximum_attempts = 5};
  f->fetch_seq = dbx_wf_schedule_activity(wf, "fleet.read_items", txt, &o);
  free(txt);
  return f->fetch_seq > 0 ? 0 : -1;
}

/* fleet.read_items answered: its page. */
static void page_read(fleet *f, dbx_wf *wf, const dbx_act_outcome *o) {
  f->fetch_seq = 0;
  if (o->status != DBX_ACT_COMPLETED) {
    char *m = dbx_asprintf("fleet.read_items %s: %s%s%s", f->file,
                           o->failure_type ? o->failure_type : "", o->failure_type && *o->failure_type ? ": " : "",
                           o->failure_message ? o->failure_message : "failed");
    f->done = 1;
    dbx_wf_fail(wf, "ItemsUnreadable", m ? m : "fleet.read_items failed");
    free(m);
    return;
  }
  cJSON *r = cJSON_ParseWithLength(o->result_json, o->result_len);
  cJSON *items = r ? cJSON_DetachItemFromObjectCaseSensitive(r, "items") : NULL;
  const cJSON *ends = r ? cJSON_GetObjectItemCaseSensitive(r, "ends") : NULL;
  if (!cJSON_IsArray(items) || !cJSON_IsArray(ends) ||
      cJSON_GetArraySize(items) != cJSON_GetArraySize(ends)) {
    cJSON_Delete(items);
    cJSON_Delete(r);
    f->done = 1;
    dbx_wf_fail(wf, "ItemsUnreadable", "fleet.read_items: result without items and ends");
    return;
  }
  f->page = items;
  if (page_arrays(f) != 0) {
    cJSON_Delete(r);
    dbx_wf_out_of_memory(wf);
    return;
  }
  int j = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, ends) f->ends[j++] = dbx_json_int(e->valuedouble, 0, INT64_MAX);
  f->eof = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "eof")) || f->npage == 0;
  cJSON_Delete(r);
  if (f->skip && f->npage && !f->cancelling && lookup_page(f, wf) != 0) dbx_wf_out_of_memory(wf);
}

static void lookup_done(fleet *f, dbx_wf *wf, const dbx_act_outcome *o) {
  f->lookup_seq = 0;
  if (o->status != DBX_ACT_COMPLETED) return; /* nothing known: every item runs */
  cJSON *r = cJSON_ParseWithLength(o->result_json, o->result_len);
  const cJSON *ok = cJSON_GetObjectItemCaseSensitive(r, "succeeded");
  const cJSON *rids = cJSON_GetObjectItemCaseSensitive(r, "run_ids");
  for (int i = 0; i < f->npage && cJSON_IsArray(ok); i++) {
    f->skipflag[i] = cJSON_IsTrue(cJSON_GetArrayItem(ok, i));
    const cJSON *rid = cJSON_GetArrayItem(rids, i);
    if (f->skipflag[i] && cJSON_IsString(rid)) f->prev_run[i] = dbx_strdup(rid->valuestring);
  }
  cJSON_Delete(r);
  (void)wf;
}

/* ------------------------------------------------------------ children */

/* Replace every "{{name}}" in s with the item's field. NULL with *bad set to
 * the unknown field (owned) or NULL on OOM. */
static char *subst(const char *s, const cJSON *item, char **bad) {
  size_t cap = strlen(s) + 64, n = 0;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  while (*s) {
    const char *open = strstr(s, "{{");
    const char *close = open ? strstr(open + 2, "}}") : NULL;
    size_t lit = open && close ? (size_t)(open - s) : strlen(s);
    const char *val = NULL;
    char num[64];
    char *name = NULL;
    if (open && close) {
      name = malloc((size_t)(close - open - 2) + 1);
      if (name == NULL) goto oom;
      memcpy(name, open + 2, (size_t)(close - open - 2));
      name[close - open - 2] = '\0';
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(item, name);
      if (cJSON_IsString(v)) val = v->valuestring;
      else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (dbx_json_whole(d, -9223372036854775808.0, 9223372036854775807.0))
          snprintf(num, sizeof num, "%lld", (long long)d);
        else
          snprintf(num, sizeof num, "%.17g", v->valuedouble);
        val = num;
      } else if (cJSON_IsBool(v)) val = cJSON_IsTrue(v) ? "true" : "false";
      if (val == NULL) {
        *bad = name;
        free(out);
        return NULL;
      }
      free(name);
    }
    size_t add = lit + (val ? strlen(val) : 0);
    if (n + add + 1 > cap) {
      cap = (n + add + 1) * 2;
      char *g = realloc(out, cap);
      if (g == NULL) goto oom;
      out = g;
    }
    memcpy(out + n, s, lit);
    n += lit;
    if (val) memcpy(out + n, val, strlen(val)), n += strlen(val);
    s += lit;
    if (open && close) s = close + 2;
    continue;
  oom:
    free(out);
    *bad = NULL;
    return NULL;
  }
  out[n] = '\0';
  return out;
}

/* Substitute into every string of t (in place). 0, 1 (unknown field: *bad),
 * -1 (OOM). */
static int subst_tree(cJSON *t, const cJSON *item, char **bad) {
  for (cJSON *c = t->child; c; c = c->next) {
    if (cJSON_IsString(c) && strstr(c->valuestring, "{{")) {
      char *v = subst(c->valuestring, item, bad);
      if (v == NULL) return *bad ? 1 : -1;
      if (cJSON_SetValuestring(c, v) == NULL) {
        free(v);
        return -1;
      }
      free(v);
    } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
      int r = subst_tree(c, item, bad);
      if (r) return r;
    }
  }
  return 0;
}

/* The child input for item, or NULL with *err set (malloc'd; NULL = OOM). */
static char *child_input(const fleet *f, const cJSON *item, char **err) {
  *err = NULL;
  cJSON *t = f->tmpl_input ? cJSON_Duplicate(f->tmpl_input, 1) : cJSON_CreateObject();
  if (t == NULL) return NULL;
  char *bad = NULL;
  int r = cJSON_IsObject(t) || cJSON_IsArray(t) ? subst_tree(t, item, &bad) : 0;
  if (r == 1) {
    *err = dbx_asprintf("TemplateError: the item has no string, number or boolean field "
                        "\"%.80s\"", bad);
    free(bad);
  }
  char *txt = r == 0 ? cJSON_PrintUnformatted(t) : NULL;
  cJSON_Delete(t);
  if (txt && strcmp(f->child_type, "durabox.Script") == 0) {
    char m[512];
    if (dbx_script_validate(txt, strlen(txt), m, sizeof m) != 0) {
      *err = dbx_asprintf("InvalidInput: %s", m);
      free(txt);
      return NULL;
    }
  }
  return txt;
}

static slot *slot_of(fleet *f, int64_t seq) {
  for (int i = 0; i < f->conc; i++)
    if (f->slots[i].seq == seq) return &f->slots[i];
  return NULL;
}

static void slot_clear(slot *s) {
  free(s->key);
  free(s->wid);
  free(s->run_id);
  memset(s, 0, sizeof *s);
}

/* Start (again) the child of slot s. 0, or -1: it could not start (failed
 * and recorded; the slot is free). */
static int child_start(fleet *f, dbx_wf *wf, slot *s) {
  char *err = NULL;
  char *in = child_input(f, s->item, &err);
  if (in == NULL) {
    if (err == NULL) {
      dbx_wf_out_of_memory(wf);
      return -1;
    }
    add_record(f, s->key, "failed", s->wid, "", 0, s->attempts, err);
    free(err);
    slot_clear(s);
    return -1;
  }
  dbx_child_opts o = {.workflow_id = s->wid, .task_queue = f->child_tq,
                      .execution_timeout_ms = f->timeout_ms,
                      .parent_close_policy = DBX_PARENT_CLOSE_REQUEST_CANCEL};
  s->attempts++;
  free(s->run_id);
  s->run_id = NULL;
  s->seq = dbx_wf_start_child(wf, f->child_type, in, &o);
  free(in);
  if (s->seq <= 0) {
    dbx_wf_out_of_memory(wf);
    return -1;
  }
  f->running++;
  return 0;
}

/* Start page item i (or record it skipped / failed). */
static void item_start(fleet *f, dbx_wf *wf, int i) {
  const cJSON *it = cJSON_GetArrayItem(f->page, i);
  const char *p = key_problem(it);
  f->cursor = f->ends[i];
  if (p) {
    /* a bad line of an items file: fleet.read_items gives {"bad_at", "error"} */
    const char *why = str_of(it, "error"), *type = str_of(it, "error_type");
    const char *dup = str_of(it, "dup_key");
    char key[48];
    /* (no bad_at: a history from before fleet.read_items named key problems) */
    snprintf(key, sizeof key, "at-byte-%lld", (long long)num_or(it, "bad_at", (double)f->seen));
    char *m = dbx_asprintf("%s: %s", type ? type : "InvalidItem", why ? why : p);
    add_record(f, dup ? dup : key, "failed", "", "", 0, 0, m ? m : "InvalidItem");
    free(m);
    return;
  }
  char *wid = child_wid(f, wf, str_of(it, "key"));
  if (wid == NULL) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  if (f->skipflag[i]) {
    add_record(f, str_of(it, "key"), "skipped", wid, f->prev_run[i], 0, 0, NULL);
    free(wid);
    return;
  }
  slot *s = slot_of(f, 0);
  s->key = dbx_strdup(str_of(it, "key"));
  s->wid = wid;
  s->item = (cJSON *)it;
  s->started_ms = dbx_wf_now_ms(wf);
  (void)child_start(f, wf, s);
}

/* Why child outcome o is a failure (malloc'd), or NULL for a success. */
static char *failure_of(const dbx_child_outcome *o) {
  switch (o->status) {
  case DBX_CHILD_COMPLETED: {
    if (dbx_fleet_result_ok(o->result_json, o->result_len)) return NULL;
    cJSON *r = cJSON_ParseWithLength(o->result_json, o->result_len);
    const char *step = str_of(r, "failed_step");
    const char *reason = NULL, *excerpt = NULL;
    const cJSON *st;
    cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(r, "steps")) {
      if (step && str_of(st, "name") && strcmp(str_of(st, "name"), step) == 0)
        reason = str_of(st, "reason"), excerpt = str_of(st, "output_excerpt");
    }
    /* the last line the step printed says why (a download's 404, a test) */
    const char *last = NULL;
    size_t ll = 0;
    for (const char *p = excerpt; p && *p;) {
      const char *e = strchr(p, '\n');
      size_t n = e ? (size_t)(e - p) : strlen(p);
      if (n > 0) last = p, ll = n;
      p = e ? e + 1 : NULL;
    }
    if (ll > 240) last += ll - 240, ll = 240;
    char *m = dbx_asprintf("status %s%s%s%s%s%s%.*s", str_of(r, "status"), step ? ", step " : "",
                           step ? step : "", reason ? ": " : "", reason ? reason : "",
                           last ? ": " : "", (int)ll, last ? last : "");
    cJSON_Delete(r);
    return m ? m : dbx_strdup("failed");
  }
  case DBX_CHILD_FAILED:
    return dbx_asprintf("%s%s%s", o->failure_type ? o->failure_type : "",
                        o->failure_type && *o->failure_type ? ": " : "",
                        o->failure_message ? o->failure_message : "");
  case DBX_CHILD_TIMED_OUT: return dbx_strdup("TimedOut: the item's timeout passed");
  case DBX_CHILD_TERMINATED: return dbx_strdup("Terminated");
  case DBX_CHILD_START_FAILED:
    return dbx_asprintf("StartFailed: %s", o->cause == 1 ? "a run with this workflow id is "
                                                           "already running"
                                                         : "the child could not start");
  default: return dbx_strdup("failed");
  }
}

/* ------------------------------------------------------------ the pump */

static cJSON *state_json(const fleet *f) {
  cJSON *st = cJSON_CreateObject();
  cJSON_AddNumberToObject(st, "cursor", (double)f->cursor);
  cJSON_AddNumberToObject(st, "succeeded", (double)f->succeeded);
  cJSON_AddNumberToObject(st, "failed", (double)f->failed);
  cJSON_AddNumberToObject(st, "cancelled", (double)f->cancelled);
  cJSON_AddNumberToObject(st, "skipped", (double)f->skipped);
  cJSON_AddNumberToObject(st, "seen", (double)f->seen);
  cJSON_AddNumberToObject(st, "dropped", (double)f->dropped);
  cJSON_AddNumberToObject(st, "runs", (double)f->runs);
  cJSON_AddNumberToObject(st, "t0", (double)f->t0);
  cJSON_AddItemToObject(st, "records", cJSON_Duplicate(f->records, 1));
  return st;
}

static void continue_as_new(fleet *f, dbx_wf *wf) {
  cJSON *in = cJSON_Duplicate(f->input, 1);
  cJSON_DeleteItemFromObjectCaseSensitive(in, "state");
  cJSON_AddItemToObject(in, "state", state_json(f));
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (txt == NULL) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  f->done = 1;
  dbx_wf_continue_as_new(wf, txt, NULL);
  free(txt);
}

static char *output_json(const fleet *f, const dbx_wf *wf, const char *status) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "fleet_id", f->fleet_id);
  cJSON_AddStringToObject(o, "status", status);
  int64_t total = total_known(f);
  if (total >= 0) cJSON_AddNumberToObject(o, "total", (double)total);
  else cJSON_AddNullToObject(o, "total");
  add_counts(f, o);
  cJSON_AddNumberToObject(o, "running", f->running);
  cJSON_AddNumberToObject(o, "done", (double)f->seen);
  if (strcmp(status, "running") != 0) {
    /* not started: known unless the items file was not read to its end (then
     * null: the lines after the cursor were never read, nobody counted them) */
    if (total >= 0) {
      int64_t ns = total - f->seen - f->running;
      cJSON_AddNumberToObject(o, "not_started", (double)(ns > 0 ? ns : 0));
    } else {
      cJSON_AddNullToObject(o, "not_started");
      cJSON_AddBoolToObject(o, "file_not_read_to_end", 1);
    }
    if (wf) cJSON_AddNumberToObject(o, "duration_ms", (double)(dbx_wf_now_ms(wf) - f->t0));
  }
  cJSON_AddItemToObject(o, "items", cJSON_Duplicate(f->records, 1));
  if (f->dropped) cJSON_AddNumberToObject(o, "items_dropped", (double)f->dropped);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

static void finish(fleet *f, dbx_wf *wf, const char *status) {
  char *out = output_json(f, wf, status);
  if (out == NULL) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  f->done = 1;
  dbx_wf_complete(wf, out);
  free(out);
}

static int can_due(const fleet *f, const dbx_wf *wf) {
  return dbx_wf_history_length(wf) >= f->max_events || dbx_wf_continue_as_new_suggested(wf);
}

static void pump(fleet *f, dbx_wf *wf) {
  if (f->done) return;
  if (f->stop_after > 0 && f->failed >= f->stop_after) f->stopping = 1;
  if (!f->stopping && !f->cancelling && !f->draining && can_due(f, wf)) f->draining = 1;
  int launch = !f->stopping && !f->cancelling && !f->draining;
  while (launch && f->running < f->conc && f->fetch_seq == 0 && f->lookup_seq == 0 && !f->done) {
    if (f->page && f->pos < f->npage) {
      item_start(f, wf, f->pos++);
      if (f->stop_after > 0 && f->failed >= f->stop_after) f->stopping = 1, launch = 0;
      continue;
    }
    if (f->page && f->eof) break;
    if (fetch_page(f, wf) != 0) {
      dbx_wf_out_of_memory(wf);
      return;
    }
  }
  if (f->done || f->running > 0 || f->fetch_seq || f->lookup_seq) return;
  if (f->cancelling) finish(f, wf, "cancelled");
  else if (f->stopping) finish(f, wf, "stopped");
  else if (f->page && f->eof && f->pos >= f->npage) finish(f, wf, "completed");
  else if (f->draining) continue_as_new(f, wf);
}

/* ------------------------------------------------------------ callbacks */

static void fleet_free(fleet *f) {
  if (f == NULL) return;
  for (int i = 0; f->slots && i < f->conc; i++) slot_clear(&f->slots[i]);
  free(f->slots);
  page_free(f);
  cJSON_Delete(f->records);
  cJSON_Delete(f->input);
  free(f->fleet_id);
  free(f);
}

/* The fleet's id, from which every child id derives: the workflow id,
 * recorded in a marker so that a replay without it (durabox replay, offline)
 * derives the same child ids. Malloc'd, NULL on OOM. */
static char *fleet_id_of(dbx_wf *wf) {
  cJSON *v = cJSON_CreateString(dbx_wf_workflow_id(wf));
  char *txt = v ? cJSON_PrintUnformatted(v) : NULL;
  cJSON_Delete(v);
  const char *rec = txt ? dbx_wf_marker_record(wf, "durabox.fleet_id", txt) : NULL;
  free(txt);
  cJSON *r = rec ? cJSON_Parse(rec) : NULL;
  char *id = cJSON_IsString(r) ? dbx_strdup(r->valuestring) : NULL;
  cJSON_Delete(r);
  return id;
}

static void carry_state(fleet *f, cJSON *st) {
  f->cursor = (int64_t)num_or(st, "cursor", 0);
  f->succeeded = (int64_t)num_or(st, "succeeded", 0);
  f->failed = (int64_t)num_or(st, "failed", 0);
  f->cancelled = (int64_t)num_or(st, "cancelled", 0);
  f->skipped = (int64_t)num_or(st, "skipped", 0);
  f->seen = (int64_t)num_or(st, "seen", 0);
  f->dropped = (int64_t)num_or(st, "dropped", 0);
  f->runs = (int64_t)num_or(st, "runs", 0);
  f->t0 = (int64_t)num_or(st, "t0", 0);
  cJSON *r = cJSON_DetachItemFromObjectCaseSensitive(st, "records");
  if (cJSON_IsArray(r)) {
    cJSON_Delete(f->records);
    f->records = r;
  } else {
    cJSON_Delete(r);
  }
}

static void *fleet_create(dbx_wf *wf, const char *json, size_t len) {
  char err[512];
  cJSON *in = parse_checked(json, len, err, sizeof err);
  if (in == NULL) {
    dbx_wf_fail(wf, "InvalidInput", err);
    return NULL;
  }
  fleet *f = calloc(1, sizeof *f);
  if (f == NULL) {
    cJSON_Delete(in);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  f->input = in;
  f->items = cJSON_GetObjectItemCaseSensitive(in, "items");
  f->file = str_of(in, "items_file");
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(in, "template");
  f->tmpl_input = cJSON_GetObjectItemCaseSensitive(t, "input");
  f->child_type = str_of(t, "workflow_type") ? str_of(t, "workflow_type") : "durabox.Script";
  f->child_tq = str_of(t, "task_queue");
  f->conc = (int)num_or(in, "concurrency", 4);
  f->stop_after = (int)num_or(in, "stop_after_failures", 0);
  f->retries = (int)num_or(in, "item_retries", 0);
  f->timeout_ms = (int64_t)(num_or(in, "item_timeout_s", 0) * 1000);
  f->max_events = (int64_t)num_or(in, "max_events", 10000);
  f->page_size = (int)num_or(in, "page_size", 100);
  f->skip = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(in, "skip_succeeded"));
  f->records = cJSON_CreateArray();
  f->slots = calloc((size_t)f->conc, sizeof *f->slots);
  f->fleet_id = fleet_id_of(wf);
  if (f->records == NULL || f->slots == NULL || f->fleet_id == NULL) {
    fleet_free(f);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  cJSON *st = cJSON_GetObjectItemCaseSensitive(in, "state");
  if (st) carry_state(f, st);
  else f->t0 = dbx_wf_now_ms(wf);
  f->runs++;
  pump(f, wf);
  return f;
}

static void fleet_on_activity(void *state, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  fleet *f = state;
  if (seq == f->fetch_seq) page_read(f, wf, o);
  else if (seq == f->lookup_seq) lookup_done(f, wf, o);
  pump(f, wf);
}

static void fleet_on_child(void *state, dbx_wf *wf, int64_t seq, const dbx_child_outcome *o) {
  fleet *f = state;
  slot *s = seq > 0 ? slot_of(f, seq) : NULL;
  if (s == NULL) return;
  if (o->status == DBX_CHILD_STARTED) {
    free(s->run_id);
    s->run_id = dbx_strdup(o->run_id);
    if (s->cancel_pending && dbx_wf_cancel_child(wf, seq) > 0) s->cancel_pending = 0;
    return;
  }
  f->running--;
  int64_t dur = dbx_wf_now_ms(wf) - s->started_ms;
  if (o->status == DBX_CHILD_CANCELED) {
    add_record(f, s->key, "cancelled", s->wid, s->run_id, dur, s->attempts, NULL);
    slot_clear(s);
    pump(f, wf);
    return;
  }
  char *why = failure_of(o);
  if (why && s->attempts <= f->retries && !f->cancelling) {
    free(why);
    s->seq = 0;
    if (child_start(f, wf, s) == 0) return;
    pump(f, wf);
    return;
  }
  add_record(f, s->key, why ? "failed" : "succeeded", s->wid, s->run_id, dur, s->attempts, why);
  free(why);
  slot_clear(s);
  pump(f, wf);
}

static void fleet_on_cancel(void *state, dbx_wf *wf) {
  fleet *f = state;
  if (f->done || f->cancelling) return;
  f->cancelling = 1;
  for (int i = 0; i < f->conc; i++) {
    slot *s = &f->slots[i];
    if (s->seq > 0 && dbx_wf_cancel_child(wf, s->seq) <= 0) s->cancel_pending = 1;
  }
  pump(f, wf);
}

static char *fleet_on_query(void *state, const char *name) {
  fleet *f = state;
  if (strcmp(name, "progress") != 0) return NULL;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status", f->cancelling ? "cancelling" : "running");
  int64_t total = total_known(f);
  if (total >= 0) cJSON_AddNumberToObject(o, "total", (double)total);
  else cJSON_AddNullToObject(o, "total");
  add_counts(f, o);
  cJSON_AddNumberToObject(o, "running", f->running);
  cJSON_AddNumberToObject(o, "done", (double)f->seen);
  cJSON_AddNumberToObject(o, "t0", (double)f->t0);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

static void fleet_destroy(void *state) { fleet_free(state); }

const dbx_workflow_type dbx_fleet_workflow = {
    .name = "durabox.Fleet",
    .create = fleet_create,
    .on_activity = fleet_on_activity,
    .on_cancel = fleet_on_cancel,
    .on_query = fleet_on_query,
    .destroy = fleet_destroy,
    .on_child = fleet_on_child,
};
