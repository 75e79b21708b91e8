/* workflows/script: durabox.Script (see script.h).
 *
 * A small state machine over the parsed input: CREATING (sandbox.create in
 * flight) -> STEPS (one activity or timer per step, cur = its index) ->
 * DELETING (sandbox.delete in flight) -> DONE. Every transition is driven by
 * an outcome callback, so replaying the same history walks the same states
 * and issues the same commands. The input is validated whole in create()
 * before anything is scheduled. */
#include "workflows/script.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/codec.h"
#include "base/hash.h"
#include "base/json.h"
#include "base/util.h"

/* CANCEL_CREATE: cancellation asked for while sandbox.create ran; waiting
 * for its outcome (a sandbox it made is deleted before the run ends). */
/* FORK_LOADING: a fork's durabox.fork_load in flight (before sandbox.create). */
enum { CREATING, STEPS, DELETING, CANCELLING, CANCEL_CREATE, DONE, FORK_LOADING };

typedef struct {
  cJSON *input;  /* owned */
  cJSON *steps;  /* borrowed from input */
  int nsteps, cur, phase, keep, failed;
  int64_t create_seq; /* sandbox.create's sequence number */
  int64_t step_seq;   /* the running step's activity, 0 for none (or a sleep) */
  int64_t delete_seq; /* sandbox.delete's sequence number, 0 before */
  char *sandbox_id;
  char *sandbox_path; /* the workspace's host path from sandbox.create, NULL: none */
  char *sandbox_driver; /* the driver's name from sandbox.create (sessions), NULL: none */
  char *sandbox_owner;  /* a session's: the owner_run_id given to sandbox.create, NULL: none */
  cJSON *downloads;   /* {"downloaded", "download_failed"} from sandbox.delete, or NULL */
  const char *failed_step; /* borrowed from input */
  cJSON *out_steps;        /* owned */
  /* retry_on_exit of the running exec step: runs that ended with an exit
   * code it retries (their codes in exit_codes, owned), the timer before
   * the next run (0: none), when that timer fires (workflow time) */
  int runs;
  cJSON *exit_codes;
  int64_t retry_timer_seq;
  int64_t retry_at_ms;
  /* checkpoints (sandbox.checkpoint policy; 0/0: off): steps that changed
   * the workspace since the last checkpoint and since create, the running
   * checkpoint's activity (0: none) and what comes after it (CK_THEN_*),
   * the summary of those made (owned) */
  int ck_on, ck_every, ck_on_completion, ck_changes, ck_total;
  int64_t ck_seq, ck_at;
  int ck_then;
  const char *ck_reason; /* static */
  char ck_name[128];
  cJSON *checkpoints;
  /* a fork (input "fork_of"): durabox.fork_load's activity and its result
   * (owned), sandbox.create's input and options kept until then, the
   * occurrences of each step identity issued (key -> n, owned), how many
   * steps the record satisfied, 1 while one is being satisfied, and the
   * approval wait of an at_most_once step (0: none; approved: the step
   * index granted, -1: none) */
  int64_t fork_seq;
  cJSON *fork_plan;
  char *create_txt;
  dbx_activity_opts create_opts;
  cJSON *fork_seen;
  int satisfied, from_record;
  int64_t approval_seq;
  int approved;
  int approval_memo; /* 1 while memo "durabox.approval" names the held step */
  cJSON *redact;     /* secret_names() of the input (owned) */
} script;

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : NULL;
}

/* Durations in seconds are at most 10 years, so every conversion to
 * milliseconds fits an int64. secs_ok: a number in [lo, MAX_SECONDS], or in
 * (lo, MAX_SECONDS] when open. */
#define MAX_SECONDS 315360000.0
static int secs_ok(const cJSON *v, double lo, int open) {
  return cJSON_IsNumber(v) && (open ? v->valuedouble > lo : v->valuedouble >= lo) &&
         v->valuedouble <= MAX_SECONDS;
}

/* A "retry" object (Temporal: RetryPolicy, in seconds) and its sibling
 * "schedule_to_close_s", as the input's default or on one step. `where` names
 * the place for the error ("input", "step 'build'"). */
static int validate_retry(const cJSON *holder, const char *where, char *err, size_t n) {
  const cJSON *s2c = cJSON_GetObjectItemCaseSensitive(holder, "schedule_to_close_s");
  /* from 1 ms: what becomes 0 ms would mean "none" */
  if (s2c && !secs_ok(s2c, 0.001, 0))
    return snprintf(err, n, "%s: schedule_to_close_s must be a number of seconds >= 0.001 "
                            "(at most 10 years)", where), -1;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(holder, "retry");
  if (!r) return 0;
  if (!cJSON_IsObject(r)) return snprintf(err, n, "%s: \"retry\" must be an object", where), -1;
  const cJSON *f;
  cJSON_ArrayForEach(f, r) {
    const char *k = f->string;
    double v = f->valuedouble;
    if (strcmp(k, "maximum_attempts") == 0) {
      if (!cJSON_IsNumber(f) || v < 0 || v > INT32_MAX || v != (double)(int32_t)v)
        return snprintf(err, n,
                        "%s: retry.maximum_attempts must be a whole number >= 0 (0 = unlimited)",
                        where), -1;
    } else if (strcmp(k, "initial_interval_s") == 0 || strcmp(k, "maximum_interval_s") == 0) {
      if (!secs_ok(f, 0.001, 0))
        return snprintf(err, n,
                        "%s: retry.%s must be a number of seconds >= 0.001 (at most 10 years)",
                        where, k), -1;
    } else if (strcmp(k, "backoff_coefficient") == 0) {
      if (!cJSON_IsNumber(f) || v < 1 || !isfinite(v))
        return snprintf(err, n, "%s: retry.backoff_coefficient must be a finite number >= 1", where),
               -1;
    } else {
      return snprintf(err, n, "%s: unknown field retry.%s (maximum_attempts, initial_interval_s, "
                              "backoff_coefficient, maximum_interval_s)", where, k), -1;
    }
  }
  return 0;
}

static double num_or(const cJSON *o, const char *k, double dflt) {
  const cJSON *x = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
  return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* The maximum interval a safe activity ends up with (step's "retry" over
 * the input's, default 100 x initial) must not be below its initial
 * interval (default 1 s): Temporal's servers refuse such a policy. */
static int check_intervals(const cJSON *dr, const cJSON *sr, const char *where, char *err,
                           size_t n) {
  double init = num_or(sr, "initial_interval_s", num_or(dr, "initial_interval_s", 1));
  double max = num_or(sr, "maximum_interval_s", num_or(dr, "maximum_interval_s", 0));
  if (max > 0 && max < init)
    return snprintf(err, n, "%s: retry.maximum_interval_s (%g s) is below the initial interval "
                            "(%g s)", where, max, init), -1;
  return 0;
}

/* Fields each part of the input may have; anything else is a mistake
 * (a misspelt field would otherwise be ignored in silence). */
static const char *const TOP_FIELDS[] = {"sandbox", "steps", "retry", "schedule_to_close_s",
                                         "fork_of", "session", NULL};
static const char *const SANDBOX_FIELDS[] = {"source",  "env",     "keep", "timeout_s",
                                             "heartbeat_timeout_s", "network", "host_fs",
                                             "resources", "auto_stop_minutes",
                                             "auto_archive_minutes", "auto_delete_minutes",
                                             "upload", "download", "checkpoint", NULL};
/* The list an unknown field's message names: the fields before sizes and
 * transfers existed (tests/it_worker.c pins this text; docs/sandbox.md and
 * the Script docs list them all). */
#define SANDBOX_FIELD_LIST "source, env, keep, timeout_s, heartbeat_timeout_s, network, host_fs"
static const char *const SOURCE_FIELDS[] = {"kind", "path", "url", "ref", "token_env",
                                            "username_env", NULL};
static const char *const STEP_COMMON[] = {"name", "kind", "retry_class", "continue_on_failure",
                                          "retry", "schedule_to_close_s", NULL};
static const struct {
  const char *kind;
  const char *const fields[8];
} STEP_FIELDS[] = {
    {"exec", {"command", "env", "cwd", "timeout_s", "max_output_bytes", "heartbeat_timeout_s",
              "retry_on_exit"}},
    {"write_file", {"path", "content", "content_b64"}},
    {"read_file", {"path"}},
    {"checkpoint", {NULL}},
    {"git_commit", {"message", "author"}},
    {"sleep", {"seconds"}},
};

static int listed(const char *const *l, const char *k) {
  for (size_t i = 0; l && l[i]; i++)
    if (strcmp(l[i], k) == 0) return 1;
  return 0;
}

/* The first field of o listed in neither a nor b, or given twice (*dup = 1;
 * JSON parsers disagree on which copy wins), or NULL. */
static const char *bad_field(const cJSON *o, const char *const *a, const char *const *b, int *dup) {
  *dup = 0;
  for (const cJSON *f = o->child; f != NULL; f = f->next) {
    if (!listed(a, f->string) && !listed(b, f->string)) return f->string;
    for (const cJSON *g = o->child; g != f; g = g->next)
      if (strcmp(g->string, f->string) == 0) return *dup = 1, f->string;
  }
  return NULL;
}

/* "where: unknown field "x" (list)" or "where: field "x" given twice". */
static int field_error(char *err, size_t n, const char *where, const char *field, int dup,
                       const char *list) {
  if (dup) return snprintf(err, n, "%s: field \"%.80s\" given twice", where, field), -1;
  return snprintf(err, n, "%s: unknown field \"%.80s\"%s%s%s", where, field, list ? " (" : "",
                  list ? list : "", list ? ")" : ""), -1;
}

static int is_bool(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return v == NULL || cJSON_IsBool(v);
}

/* Absent, or a string equal to a or b. */
static int one_of(const cJSON *o, const char *key, const char *a, const char *b) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if (v == NULL) return 1;
  return cJSON_IsString(v) && (strcmp(v->valuestring, a) == 0 || strcmp(v->valuestring, b) == 0);
}

/* An "env" object: variable names to strings, or (secrets) to {"secret": NAME}. */
static int env_ok(const cJSON *env, int secrets) {
  if (env == NULL) return 1;
  if (!cJSON_IsObject(env)) return 0;
  for (const cJSON *e = env->child; e != NULL; e = e->next) {
    if (!e->string[0] || strchr(e->string, '=')) return 0;
    if (cJSON_IsString(e)) continue;
    const cJSON *sn = secrets && cJSON_IsObject(e) && cJSON_GetArraySize(e) == 1
                          ? cJSON_GetObjectItemCaseSensitive(e, "secret")
                          : NULL;
    if (!cJSON_IsString(sn) || !sn->valuestring[0]) return 0;
  }
  return 1;
}

/* The values of a step's kind fields, as far as they can be told before the
 * run (paths and base64 are checked by the activity, in the sandbox). */
/* The largest max_output_bytes: DBX_SANDBOX_OUTPUT_MAX_BYTES of
 * activities/sandbox.h (workflows/ may not include it; tests/it_script_output
 * checks that the two agree), so that a step's result fits one payload. */
#define MAX_OUTPUT_BYTES ((size_t)768 * 1024)
/* The most secret names a step's "redact" takes: DBX_SANDBOX_REDACT_MAX of
 * activities/sandbox.h (tests/it_script_output checks that the two agree). */
#define MAX_SECRET_NAMES 64

/* An exec step's "retry_on_exit": {"codes": [1, 2] | "any", "max_attempts":
 * N, "backoff_s": S}: run the command again, after S seconds, while it exits
 * with one of codes (any non-zero one for "any"), up to N runs in all. */
#define RETRY_EXIT_MAX_ATTEMPTS 100
#define RETRY_EXIT_MAX_BACKOFF_S 3600.0
static int check_retry_on_exit(const cJSON *s, const char *name, char *err, size_t n) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "retry_on_exit");
  if (r == NULL) return 0;
  if (!cJSON_IsObject(r))
    return snprintf(err, n, "step '%s' (exec): retry_on_exit must be an object {\"codes\", "
                            "\"max_attempts\", \"backoff_s\"}", name), -1;
  static const char *const fields[] = {"codes", "max_attempts", "backoff_s", NULL};
  int dup = 0;
  const char *unk = bad_field(r, fields, NULL, &dup);
  char where[160];
  snprintf(where, sizeof where, "step '%s' (exec): retry_on_exit", name);
  if (unk) return field_error(err, n, where, unk, dup, "codes, max_attempts, backoff_s");
  const char *rc = str_of(s, "retry_class");
  if (rc && strcmp(rc, "at_most_once") == 0)
    return snprintf(err, n, "step '%s': retry_on_exit runs the command again, which an "
                            "at_most_once step must never do; drop one of them", name), -1;
  const cJSON *codes = cJSON_GetObjectItemCaseSensitive(r, "codes");
  if (cJSON_IsString(codes) && strcmp(codes->valuestring, "any") == 0) {
    /* any non-zero exit */
  } else if (cJSON_IsArray(codes) && cJSON_GetArraySize(codes) > 0 &&
             cJSON_GetArraySize(codes) <= 255) {
    const cJSON *c;
    cJSON_ArrayForEach(c, codes) {
      if (!cJSON_IsNumber(c) || c->valuedouble < 1 || c->valuedouble > 255 ||
          c->valuedouble != (double)(int)c->valuedouble)
        return snprintf(err, n, "%s.codes: each code must be a whole number from 1 to 255", where),
               -1;
    }
  } else {
    return snprintf(err, n, "%s.codes is required: a list of exit codes (1..255) or \"any\"",
                    where), -1;
  }
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(r, "max_attempts");
  if (!cJSON_IsNumber(ma) || ma->valuedouble < 2 || ma->valuedouble > RETRY_EXIT_MAX_ATTEMPTS ||
      ma->valuedouble != (double)(int)ma->valuedouble)
    return snprintf(err, n, "%s.max_attempts is required: a whole number of runs in all, from 2 "
                            "to %d", where, RETRY_EXIT_MAX_ATTEMPTS), -1;
  const cJSON *bo = cJSON_GetObjectItemCaseSensitive(r, "backoff_s");
  if (bo && (!cJSON_IsNumber(bo) || !(bo->valuedouble >= 0) ||
             bo->valuedouble > RETRY_EXIT_MAX_BACKOFF_S))
    return snprintf(err, n, "%s.backoff_s must be a number of seconds from 0 to %.0f", where,
                    RETRY_EXIT_MAX_BACKOFF_S), -1;
  return 0;
}

/* A whole number in [lo, hi]. */
static int whole_in(const cJSON *v, double lo, double hi) {
  return cJSON_IsNumber(v) && dbx_json_whole(v->valuedouble, lo, hi);
}

/* sandbox.upload / sandbox.download: 1..100 {"from", "to"}; the host side
 * absolute, the sandbox side relative without "..". */
static int check_transfers(const cJSON *sb, const char *field, int upload, char *err, size_t n) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, field);
  if (v == NULL) return 0;
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1 || cJSON_GetArraySize(v) > 100)
    return snprintf(err, n, "sandbox.%s must be a list of 1 to 100 {\"from\": %s path, "
                            "\"to\": %s path}", field, upload ? "host" : "sandbox",
                    upload ? "sandbox" : "host"), -1;
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    const char *from = str_of(e, "from"), *to = str_of(e, "to");
    if (!cJSON_IsObject(e) || cJSON_GetArraySize(e) != 2 || !from || !to || !*from || !*to)
      return snprintf(err, n, "sandbox.%s[%d] must be {\"from\": path, \"to\": path}", field, i),
             -1;
    const char *host = upload ? from : to, *inside = upload ? to : from;
    if (host[0] != '/')
      return snprintf(err, n, "sandbox.%s[%d].%s: the host path '%.100s' must be absolute",
                      field, i, upload ? "from" : "to", host), -1;
    int esc = inside[0] == '/' || strcmp(inside, "..") == 0 || strncmp(inside, "../", 3) == 0 ||
              strstr(inside, "/../") != NULL ||
              (strlen(inside) >= 3 && strcmp(inside + strlen(inside) - 3, "/..") == 0);
    if (esc)
      return snprintf(err, n, "sandbox.%s[%d].%s: the sandbox path '%.100s' must stay in the "
                              "workspace (relative, no \"..\")", field, i,
                      upload ? "to" : "from", inside), -1;
    i++;
  }
  return 0;
}

/* sandbox.resources (small | medium | large | {cpu, memory_gib, disk_gib}),
 * the auto_*_minutes, upload and download. */
static int check_sizes(const cJSON *sb, char *err, size_t n) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(sb, "resources");
  if (cJSON_IsString(r)) {
    const char *c = r->valuestring;
    if (strcmp(c, "small") != 0 && strcmp(c, "medium") != 0 && strcmp(c, "large") != 0)
      return snprintf(err, n, "sandbox.resources must be \"small\", \"medium\", \"large\" "
                              "or {\"cpu\", \"memory_gib\", \"disk_gib\"}"), -1;
  } else if (cJSON_IsObject(r)) {
    static const char *const rf[] = {"cpu", "memory_gib", "disk_gib", NULL};
    int dup = 0;
    const char *unk = bad_field(r, rf, NULL, &dup);
    if (unk) return field_error(err, n, "sandbox.resources", unk, dup, "cpu, memory_gib, disk_gib");
    for (const cJSON *f = r->child; f; f = f->next)
      if (!whole_in(f, 1, 1024))
        return snprintf(err, n, "sandbox.resources.%s must be a whole number from 1 to 1024 (%s)",
                        f->string, strcmp(f->string, "cpu") == 0 ? "cores" : "GiB"), -1;
  } else if (r != NULL) {
    return snprintf(err, n, "sandbox.resources must be \"small\", \"medium\", \"large\" or "
                            "{\"cpu\", \"memory_gib\", \"disk_gib\"}"), -1;
  }
  static const char *const autos[] = {"auto_stop_minutes", "auto_archive_minutes",
                                      "auto_delete_minutes"};
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, autos[i]);
    if (v && !whole_in(v, 0, 60 * 24 * 365))
      return snprintf(err, n, "sandbox.%s must be a whole number of minutes from 0 to %d",
                      autos[i], 60 * 24 * 365), -1;
  }
  if (check_transfers(sb, "upload", 1, err, n) != 0 ||
      check_transfers(sb, "download", 0, err, n) != 0)
    return -1;
  if (cJSON_GetObjectItemCaseSensitive(sb, "download") &&
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sb, "keep")))
    return snprintf(err, n, "sandbox.download happens when the sandbox is deleted at the end, "
                            "and a kept sandbox (keep: true) is not: drop one of them"), -1;
  return 0;
}

/* sandbox.checkpoint: {"every_steps": 1..10000, "on_completion": bool}. */
static int check_policy(const cJSON *sb, char *err, size_t n) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(sb, "checkpoint");
  if (p == NULL) return 0;
  if (!cJSON_IsObject(p))
    return snprintf(err, n, "sandbox.checkpoint must be {\"every_steps\": N, \"on_completion\": "
                            "true|false}"), -1;
  static const char *const pf[] = {"every_steps", "on_completion", NULL};
  int dup = 0;
  const char *unk = bad_field(p, pf, NULL, &dup);
  if (unk) return field_error(err, n, "sandbox.checkpoint", unk, dup, "every_steps, on_completion");
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(p, "every_steps");
  if (ev && !whole_in(ev, 1, 10000))
    return snprintf(err, n, "sandbox.checkpoint.every_steps must be a whole number from 1 to "
                            "10000"), -1;
  if (!is_bool(p, "on_completion"))
    return snprintf(err, n, "sandbox.checkpoint.on_completion must be true or false"), -1;
  return 0;
}

/* "fork_of": {"workflow_id", "run_id", "event_id"}, set by `durabox workflow fork`. */
static int check_fork_of(const cJSON *in, char *err, size_t n) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(in, "fork_of");
  if (f == NULL) return 0;
  static const char *const ff[] = {"workflow_id", "run_id", "event_id", NULL};
  int dup = 0;
  const char *unk = cJSON_IsObject(f) ? bad_field(f, ff, NULL, &dup) : NULL;
  if (unk) return field_error(err, n, "fork_of", unk, dup, "workflow_id, run_id, event_id");
  const char *w = str_of(f, "workflow_id"), *r = str_of(f, "run_id");
  if (!cJSON_IsObject(f) || !w || !*w || !r || !*r ||
      !whole_in(cJSON_GetObjectItemCaseSensitive(f, "event_id"), 1, 1e15))
    return snprintf(err, n, "fork_of must be {\"workflow_id\", \"run_id\": non-empty strings, "
                            "\"event_id\": a whole number >= 1}"), -1;
  return 0;
}

static int check_step_values(const cJSON *s, const char *name, const char *kind, char *err,
                             size_t n) {
  if (!is_bool(s, "continue_on_failure"))
    return snprintf(err, n, "step '%s': continue_on_failure must be true or false", name), -1;
  if (strcmp(kind, "exec") == 0) {
    if (!env_ok(cJSON_GetObjectItemCaseSensitive(s, "env"), 1))
      return snprintf(err, n, "step '%s' (exec): env must map variable names to strings or "
                              "{\"secret\": NAME}", name), -1;
    const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(s, "cwd");
    if (cwd && !cJSON_IsString(cwd))
      return snprintf(err, n, "step '%s' (exec): cwd must be a string", name), -1;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(s, "max_output_bytes");
    if (mo && (!cJSON_IsNumber(mo) || mo->valuedouble < 1 || mo->valuedouble > 1e15 ||
               mo->valuedouble != (double)(int64_t)mo->valuedouble))
      return snprintf(err, n, "step '%s' (exec): max_output_bytes must be a whole number >= 1",
                      name), -1;
    if (mo && mo->valuedouble > (double)MAX_OUTPUT_BYTES)
      return snprintf(err, n, "step '%s' (exec): max_output_bytes is over the limit of %zu "
                              "bytes per stream", name, MAX_OUTPUT_BYTES), -1;
    if (check_retry_on_exit(s, name, err, n) != 0) return -1;
  } else if (strcmp(kind, "write_file") == 0) {
    if (str_of(s, "content") && str_of(s, "content_b64"))
      return snprintf(err, n, "step '%s' (write_file): give content or content_b64, not both",
                      name), -1;
  } else if (strcmp(kind, "git_commit") == 0) {
    const cJSON *au = cJSON_GetObjectItemCaseSensitive(s, "author");
    if (au && !cJSON_IsString(au))
      return snprintf(err, n, "step '%s' (git_commit): author must be a string", name), -1;
  }
  return 0;
}

/* ---- sessions (docs/worker.md "Sessions") ----
 * The CLI's "session": {"id", "turn", "previous_run_id", "state"} (cli/session.c).
 * Of "state" (the previous completed turn's session_state) Script reads only
 * "sandbox": {"id", "driver"?, "owner_run_id"?}; other members (another
 * workflow type's) are not its business. */
static const char *const SESSION_FIELDS[] = {"id", "turn", "previous_run_id", "state", NULL};

static const cJSON *session_sandbox(const cJSON *in) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(in, "session"), "state");
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(st, "sandbox");
  return cJSON_IsObject(sb) ? sb : NULL;
}

static int validate_session(const cJSON *in, char *err, size_t n) {
  const cJSON *se = cJSON_GetObjectItemCaseSensitive(in, "session");
  if (se == NULL) return 0;
  if (!cJSON_IsObject(se)) return snprintf(err, n, "\"session\" must be an object"), -1;
  int dup = 0;
  const char *unk = bad_field(se, SESSION_FIELDS, NULL, &dup);
  if (unk) return field_error(err, n, "session", unk, dup, "id, turn, previous_run_id, state");
  const char *id = str_of(se, "id");
  const cJSON *turn = cJSON_GetObjectItemCaseSensitive(se, "turn"),
              *prev = cJSON_GetObjectItemCaseSensitive(se, "previous_run_id"),
              *st = cJSON_GetObjectItemCaseSensitive(se, "state");
  if (id == NULL || !*id) return snprintf(err, n, "session.id must be a non-empty string"), -1;
  if (!cJSON_IsNumber(turn) || turn->valuedouble < 1 || turn->valuedouble > 1e9 ||
      turn->valuedouble != (double)(int)turn->valuedouble)
    return snprintf(err, n, "session.turn must be a whole number >= 1"), -1;
  if (prev && !cJSON_IsNull(prev) && !(cJSON_IsString(prev) && prev->valuestring[0]))
    return snprintf(err, n, "session.previous_run_id must be a run id or null"), -1;
  if (st && !cJSON_IsNull(st) && !cJSON_IsObject(st))
    return snprintf(err, n, "session.state must be an object or null"), -1;
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(st, "sandbox");
  if (sb && !cJSON_IsNull(sb)) {
    const cJSON *f;
    if (!cJSON_IsObject(sb) || !str_of(sb, "id") || !str_of(sb, "id")[0])
      return snprintf(err, n, "session.state.sandbox must be {\"id\", \"driver\", \"owner_run_id\"}"), -1;
    cJSON_ArrayForEach(f, sb)
      if ((strcmp(f->string, "driver") == 0 || strcmp(f->string, "owner_run_id") == 0) &&
          !(cJSON_IsString(f) && f->valuestring[0]))
        return snprintf(err, n, "session.state.sandbox.%s must be a non-empty string", f->string), -1;
  }
  if (cJSON_HasObjectItem(cJSON_GetObjectItemCaseSensitive(in, "sandbox"), "download"))
    return snprintf(err, n, "sandbox.download happens when the sandbox is deleted at the end, and "
                            "a session keeps its sandbox for the next turn: drop one of them"), -1;
  return 0;
}

/* sandbox.create's input for a session: the turn's sandbox is kept; with
 * the previous turn's sandbox in session.state it is re-opened ("adopt")
 * under the run that made it (owner_run_id), else this run makes it. */
static void session_create_input(script *s, dbx_wf *wf, cJSON *ci) {
  const cJSON *sb = session_sandbox(s->input);
  const char *owner = sb ? str_of(sb, "owner_run_id") : NULL;
  s->sandbox_owner = dbx_strdup(owner ? owner : dbx_wf_run_id(wf));
  cJSON_DeleteItemFromObjectCaseSensitive(ci, "owner_run_id");
  cJSON_AddStringToObject(ci, "owner_run_id", s->sandbox_owner ? s->sandbox_owner : "");
  if (!cJSON_HasObjectItem(ci, "keep")) cJSON_AddTrueToObject(ci, "keep");
  cJSON_AddTrueToObject(ci, "session"); /* labelled: gc asks the session (cli/session.h) */
  if (sb == NULL) return;
  cJSON *ad = cJSON_AddObjectToObject(ci, "adopt");
  cJSON_AddStringToObject(ad, "sandbox_id", str_of(sb, "id"));
  if (str_of(sb, "driver")) cJSON_AddStringToObject(ad, "driver", str_of(sb, "driver"));
}

/* The result's "session" {"id", "turn", "previous_run_id"} and
 * "session_state" {"sandbox": {"id", "driver", "owner_run_id"}}: what the
 * next turn needs to re-open the sandbox (no secrets: ids and names only). */
static void session_result(const script *s, cJSON *o) {
  const cJSON *se = cJSON_GetObjectItemCaseSensitive(s->input, "session");
  if (se == NULL) return;
  cJSON *echo = cJSON_AddObjectToObject(o, "session");
  static const char *const keys[] = {"id", "turn", "previous_run_id"};
  for (int i = 0; echo && i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(se, keys[i]);
    cJSON_AddItemToObject(echo, keys[i], v ? cJSON_Duplicate(v, 0) : cJSON_CreateNull());
  }
  cJSON *st = cJSON_AddObjectToObject(o, "session_state");
  if (st == NULL || s->sandbox_id == NULL) return;
  cJSON *sb = cJSON_AddObjectToObject(st, "sandbox");
  cJSON_AddStringToObject(sb, "id", s->sandbox_id);
  if (s->sandbox_driver) cJSON_AddStringToObject(sb, "driver", s->sandbox_driver);
  if (s->sandbox_owner) cJSON_AddStringToObject(sb, "owner_run_id", s->sandbox_owner);
}

/* The distinct names of the secrets a Script's input uses (its exec steps'
 * {"secret": NAME} and its git source's token_env), as a JSON array (owned),
 * or NULL (OOM). A step that reads a file or runs a command passes them as
 * "redact", so a secret an earlier step left in the sandbox does not come
 * back into history through a later one. Only names: values never leave
 * the worker's environment. */
static int add_name(cJSON *names, const char *nm) {
  const cJSON *x;
  cJSON_ArrayForEach(x, names) if (strcmp(x->valuestring, nm) == 0) return 0;
  cJSON *v = cJSON_CreateString(nm);
  return v && cJSON_AddItemToArray(names, v) ? 0 : (cJSON_Delete(v), -1);
}

static cJSON *secret_names(const cJSON *in) {
  cJSON *names = cJSON_CreateArray();
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(in, "sandbox");
  const char *tok = str_of(sb ? cJSON_GetObjectItemCaseSensitive(sb, "source") : NULL, "token_env");
  int bad = names == NULL || (tok && add_name(names, tok) != 0);
  const cJSON *st;
  cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(in, "steps")) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(st, "env")) {
      const char *nm = cJSON_IsObject(e) ? str_of(e, "secret") : NULL;
      if (!bad && nm) bad = add_name(names, nm) != 0;
    }
  }
  if (bad) {
    cJSON_Delete(names);
    return NULL;
  }
  return names;
}

static int validate(const cJSON *in, char *err, size_t n) {
  if (!cJSON_IsObject(in)) return snprintf(err, n, "input is not a JSON object"), -1;
  if (validate_session(in, err, n) != 0) return -1;
  int dup = 0;
  const char *unk = bad_field(in, TOP_FIELDS, NULL, &dup);
  if (unk)
    return field_error(err, n, "input", unk, dup, "sandbox, steps, retry, schedule_to_close_s");
  if (validate_retry(in, "input", err, n) != 0) return -1;
  const cJSON *dr = cJSON_GetObjectItemCaseSensitive(in, "retry");
  if (check_intervals(dr, NULL, "input", err, n) != 0) return -1;
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(in, "sandbox");
  if (sb && !cJSON_IsObject(sb)) return snprintf(err, n, "\"sandbox\" must be an object"), -1;
  unk = sb ? bad_field(sb, SANDBOX_FIELDS, NULL, &dup) : NULL;
  if (unk)
    return field_error(err, n, "sandbox", unk, dup, SANDBOX_FIELD_LIST);
  if (sb && !is_bool(sb, "keep")) return snprintf(err, n, "sandbox.keep must be true or false"), -1;
  if (sb && !one_of(sb, "network", "host", "none"))
    return snprintf(err, n, "sandbox.network must be \"host\" or \"none\""), -1;
  if (sb && !one_of(sb, "host_fs", "host", "system"))
    return snprintf(err, n, "sandbox.host_fs must be \"host\" or \"system\""), -1;
  if (sb && !env_ok(cJSON_GetObjectItemCaseSensitive(sb, "env"), 0))
    return snprintf(err, n, "sandbox.env must map variable names to strings"), -1;
  if (sb && check_sizes(sb, err, n) != 0) return -1;
  if ((sb && check_policy(sb, err, n) != 0) || check_fork_of(in, err, n) != 0) return -1;
  const cJSON *src = sb ? cJSON_GetObjectItemCaseSensitive(sb, "source") : NULL;
  if (src && !cJSON_IsObject(src))
    return snprintf(err, n, "sandbox.source must be an object"), -1;
  unk = src ? bad_field(src, SOURCE_FIELDS, NULL, &dup) : NULL;
  if (unk) return field_error(err, n, "sandbox.source", unk, dup, "kind, path, url, ref");
  if (src) {
    const char *k = str_of(src, "kind");
    static const char *const kinds[] = {"empty", "dir", "git", "snapshot"};
    static const char *const need[] = {NULL, "path", "url", "ref"};
    int found = -1;
    for (int i = 0; k && i < 4; i++)
      if (strcmp(k, kinds[i]) == 0) found = i;
    if (found < 0)
      return snprintf(err, n, "sandbox.source.kind must be empty, dir, git or snapshot"), -1;
    /* a git source is a URL or a local repository path, as sandbox.create takes it */
    int has = need[found] == NULL || str_of(src, need[found]) || (found == 2 && str_of(src, "path"));
    if (!has)
      return snprintf(err, n, "sandbox.source of kind %s needs \"%s\"%s", k, need[found],
                      found == 2 ? " or \"path\"" : ""), -1;
    /* and nothing another kind takes */
    static const char *const takes[][7] = {{"kind", NULL},
                                          {"kind", "path", NULL},
                                          {"kind", "url", "path", "ref", "token_env", "username_env"},
                                          {"kind", "ref", NULL}};
    unk = bad_field(src, takes[found], NULL, &dup);
    if (unk)
      return snprintf(err, n, "sandbox.source of kind %s takes no \"%.80s\"", k, unk), -1;
    if (found == 2 && str_of(src, "url") && str_of(src, "path"))
      return snprintf(err, n, "sandbox.source of kind git: give url or path, not both"), -1;
    for (const cJSON *f = src->child; f != NULL; f = f->next)
      if (!cJSON_IsString(f) || !f->valuestring[0])
        return snprintf(err, n, "sandbox.source.%.80s must be a non-empty string", f->string), -1;
  }
  static const char *const secs[] = {"timeout_s", "heartbeat_timeout_s"};
  for (size_t k = 0; sb && k < 2; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, secs[k]);
    if (v && !secs_ok(v, 1, 0))
      return snprintf(err, n, "sandbox.%s must be a number of seconds >= 1 (at most 10 years)",
                      secs[k]), -1;
  }
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(in, "steps");
  if (!cJSON_IsArray(steps)) return snprintf(err, n, "\"steps\" must be an array"), -1;
  if (cJSON_GetArraySize(steps) > DBX_SCRIPT_MAX_STEPS)
    return snprintf(err, n, "input has %d steps, over the limit of %d steps per input",
                    cJSON_GetArraySize(steps), DBX_SCRIPT_MAX_STEPS), -1;
  int i = 0;
  const cJSON *s;
  cJSON_ArrayForEach(s, steps) {
    const char *name = str_of(s, "name"), *kind = str_of(s, "kind");
    if (!cJSON_IsObject(s) || !name || !*name)
      return snprintf(err, n, "step %d: missing \"name\"", i), -1;
    if (strlen(name) > DBX_SCRIPT_MAX_NAME_BYTES)
      return snprintf(err, n, "step %d: name is %zu bytes, over the limit of %d bytes per step name",
                      i, strlen(name), DBX_SCRIPT_MAX_NAME_BYTES), -1;
    for (const cJSON *p = steps->child; p != s; p = p->next)
      if (strcmp(str_of(p, "name"), name) == 0)
        return snprintf(err, n, "step %d: name '%s' is given to an earlier step too (step names "
                                "must be distinct)", i, name), -1;
    if (!kind) return snprintf(err, n, "step '%s': missing \"kind\"", name), -1;
    char kwhere[160];
    snprintf(kwhere, sizeof kwhere, "step '%s' (%s)", name, kind);
    for (size_t k = 0; k < sizeof STEP_FIELDS / sizeof *STEP_FIELDS; k++) {
      if (strcmp(STEP_FIELDS[k].kind, kind) != 0) continue;
      /* a sleep is a timer: no attempts, no retry class */
      unk = bad_field(s, strcmp(kind, "sleep") == 0 ? (const char *const[]){"name", "kind", NULL}
                                                      : STEP_COMMON,
                      STEP_FIELDS[k].fields, &dup);
      if (unk) return field_error(err, n, kwhere, unk, dup, NULL);
    }
    const char *missing = NULL;
    if (strcmp(kind, "exec") == 0) {
      if (!str_of(s, "command")) missing = "command";
    } else if (strcmp(kind, "write_file") == 0) {
      if (!str_of(s, "path")) missing = "path";
      else if (!str_of(s, "content") && !str_of(s, "content_b64")) missing = "content";
    } else if (strcmp(kind, "read_file") == 0) {
      if (!str_of(s, "path")) missing = "path";
    } else if (strcmp(kind, "sleep") == 0) {
      const cJSON *sec = cJSON_GetObjectItemCaseSensitive(s, "seconds");
      if (!cJSON_IsNumber(sec)) missing = "seconds";
      else if (!secs_ok(sec, 0, 0))
        return snprintf(err, n, "step '%s' (sleep): seconds must be >= 0 (at most 10 years)", name),
               -1;
    } else if (strcmp(kind, "git_commit") == 0) {
      if (!str_of(s, "message") || !str_of(s, "message")[0]) missing = "message";
    } else if (strcmp(kind, "checkpoint") != 0) {
      return snprintf(err, n, "step '%s': unknown kind '%s'", name, kind), -1;
    }
    if (missing) return snprintf(err, n, "step '%s' (%s): missing \"%s\"", name, kind, missing), -1;
    if (check_step_values(s, name, kind, err, n) != 0) return -1;
    const char *rc = str_of(s, "retry_class");
    if (cJSON_GetObjectItemCaseSensitive(s, "retry_class") &&
        (!rc || (strcmp(rc, "safe_to_retry") != 0 && strcmp(rc, "at_most_once") != 0)))
      return snprintf(err, n, "step '%s': retry_class must be safe_to_retry or at_most_once", name), -1;
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(s, "timeout_s");
    if (to && !secs_ok(to, 0, 1))
      return snprintf(err, n, "step '%s': timeout_s must be a positive number of seconds "
                              "(at most 10 years)", name), -1;
    const cJSON *hbt = cJSON_GetObjectItemCaseSensitive(s, "heartbeat_timeout_s");
    if (hbt && !secs_ok(hbt, 1, 0))
      return snprintf(err, n, "step '%s': heartbeat_timeout_s must be a number of seconds >= 1 "
                              "(at most 10 years)", name), -1;
    char where[160];
    snprintf(where, sizeof where, "step '%s'", name);
    if (validate_retry(s, where, err, n) != 0) return -1;
    if (check_intervals(dr, cJSON_GetObjectItemCaseSensitive(s, "retry"), where, err, n) != 0)
      return -1;
    if (rc && strcmp(rc, "at_most_once") == 0 && cJSON_GetObjectItemCaseSensitive(s, "retry"))
      return snprintf(err, n,
                      "step '%s': an at_most_once step has exactly one attempt; it takes no \"retry\"",
                      name), -1;
    i++;
  }
  cJSON *names = secret_names(in);
  int nnames = names ? cJSON_GetArraySize(names) : 0;
  cJSON_Delete(names);
  if (nnames > MAX_SECRET_NAMES)
    return snprintf(err, n, "input uses %d distinct secrets, over the limit of %d per input",
                    nnames, MAX_SECRET_NAMES), -1;
  return 0;
}

static void script_free(script *s) {
  if (!s) return;
  cJSON_Delete(s->input);
  cJSON_Delete(s->redact);
  cJSON_Delete(s->out_steps);
  cJSON_Delete(s->exit_codes);
  free(s->sandbox_id);
  free(s->sandbox_path);
  free(s->sandbox_driver);
  free(s->sandbox_owner);
  cJSON_Delete(s->downloads);
  cJSON_Delete(s->checkpoints);
  cJSON_Delete(s->fork_plan);
  cJSON_Delete(s->fork_seen);
  free(s->create_txt);
  free(s);
}

/* While a step runs: {"name", "kind", "index"} of it for the
 * progress query, with "run" and "max_runs" for an exec step with
 * retry_on_exit, and "retry": {"attempt" (the run that failed), "of",
 * "exit_code", "next_at_ms" (workflow time, ms since the epoch),
 * "backoff_s"} while it waits to run again. NULL when no step runs. */
static cJSON *current_json(const script *s) {
  if (s->phase != STEPS || s->cur >= s->nsteps) return NULL;
  const cJSON *st = cJSON_GetArrayItem(s->steps, s->cur);
  cJSON *c = cJSON_CreateObject();
  if (!c) return NULL;
  cJSON_AddStringToObject(c, "name", str_of(st, "name"));
  cJSON_AddStringToObject(c, "kind", str_of(st, "kind"));
  cJSON_AddNumberToObject(c, "index", s->cur);
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "retry_on_exit");
  if (r) {
    int of = (int)num_or(r, "max_attempts", 2);
    cJSON_AddNumberToObject(c, "run", s->runs + 1);
    cJSON_AddNumberToObject(c, "max_runs", of);
    if (s->retry_timer_seq > 0) {
      cJSON *w = cJSON_AddObjectToObject(c, "retry");
      const cJSON *last = cJSON_GetArrayItem(s->exit_codes, cJSON_GetArraySize(s->exit_codes) - 1);
      if (w) {
        cJSON_AddNumberToObject(w, "attempt", s->runs);
        cJSON_AddNumberToObject(w, "of", of);
        cJSON_AddNumberToObject(w, "exit_code", last ? last->valuedouble : 0);
        cJSON_AddNumberToObject(w, "next_at_ms", (double)s->retry_at_ms);
        cJSON_AddNumberToObject(w, "backoff_s", num_or(r, "backoff_s", 1));
      }
    }
  }
  return c;
}

static char *output_json(const script *s) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  if (s->sandbox_id) cJSON_AddStringToObject(o, "sandbox_id", s->sandbox_id);
  else cJSON_AddNullToObject(o, "sandbox_id");
  if (s->sandbox_id && s->keep) { /* where a kept sandbox stays (`durabox run` prints it) */
    cJSON_AddTrueToObject(o, "sandbox_kept");
    if (s->sandbox_path) cJSON_AddStringToObject(o, "sandbox_path", s->sandbox_path);
  }
  cJSON_AddStringToObject(o, "status", s->phase == DONE || s->phase == DELETING
                                           ? (s->failed ? "failed" : "completed")
                                           : "running");
  if (s->failed_step) cJSON_AddStringToObject(o, "failed_step", s->failed_step);
  else cJSON_AddNullToObject(o, "failed_step");
  cJSON_AddItemToObject(o, "steps", cJSON_Duplicate(s->out_steps, 1));
  if (s->downloads) {
    cJSON_AddItemToObject(o, "downloaded",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(s->downloads, "downloaded"), 1));
    cJSON_AddItemToObject(o, "download_failed",
                          cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(s->downloads,
                                                                           "download_failed"), 1));
  }
  cJSON *cur = current_json(s);
  if (cur) cJSON_AddItemToObject(o, "current", cur);
  if (s->checkpoints) cJSON_AddItemToObject(o, "checkpoints", cJSON_Duplicate(s->checkpoints, 1));
  if (s->fork_plan) {
    cJSON *f = cJSON_AddObjectToObject(o, "fork");
    static const char *const keep[] = {"source", "event_id", "checkpoint", "covered",
                                       "uncovered_steps"};
    for (size_t i = 0; f && i < sizeof keep / sizeof *keep; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(s->fork_plan, keep[i]);
      if (v) cJSON_AddItemToObject(f, keep[i], cJSON_Duplicate(v, 1));
    }
    if (f) cJSON_AddNumberToObject(f, "satisfied_steps", s->satisfied);
  }
  if (s->approval_seq > 0 && s->cur < s->nsteps)
    cJSON_AddStringToObject(o, "awaiting_approval",
                            str_of(cJSON_GetArrayItem(s->steps, s->cur), "name"));
  session_result(s, o);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

/* The Script's result is one payload too: past SUMMARY_MAX_BYTES, drop the
 * output excerpts of the earliest steps (those that succeeded first), each
 * marked "output_dropped", until it fits. A pure function of the summary,
 * so replay agrees. */
#define SUMMARY_MAX_BYTES ((size_t)1792 * 1024)
static void fit_summary(script *s) {
  static const char *const keys[] = {"stdout", "stderr", "output_excerpt", "content"};
  char *all = cJSON_PrintUnformatted(s->out_steps);
  size_t total = all ? strlen(all) : 0;
  free(all);
  for (int pass = 0; pass < 2 && total > SUMMARY_MAX_BYTES; pass++) {
    cJSON *st;
    cJSON_ArrayForEach(st, s->out_steps) {
      if (total <= SUMMARY_MAX_BYTES) break;
      if (pass == 0 && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "ok"))) continue;
      for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(st, keys[k]);
        if (!v) continue;
        char *t = cJSON_PrintUnformatted(v);
        size_t vl = t ? strlen(t) + strlen(keys[k]) + 4 : 0; /* "key":value, */
        total = total > vl ? total - vl : 0;
        free(t);
        cJSON_Delete(v);
        if (!cJSON_HasObjectItem(st, "output_dropped")) cJSON_AddTrueToObject(st, "output_dropped");
      }
    }
  }
}

static void finish(script *s, dbx_wf *wf) {
  s->phase = DONE;
  fit_summary(s);
  char *out = output_json(s);
  if (out) dbx_wf_complete(wf, out);
  else dbx_wf_out_of_memory(wf); /* the task fails and is retried from history */
  free(out);
}

/* Retry policy of a safe_to_retry activity: 5 attempts, 1 s initial backoff,
 * unless the input's "retry" says otherwise, then the step's own "retry"
 * field by field; "schedule_to_close_s" likewise (0 = none). step may be
 * NULL (sandbox.create, sandbox.delete). Validated before. */
static void safe_retry(const script *s, const cJSON *step, dbx_activity_opts *o) {
  const cJSON *dr = cJSON_GetObjectItemCaseSensitive(s->input, "retry");
  const cJSON *sr = step ? cJSON_GetObjectItemCaseSensitive(step, "retry") : NULL;
  o->retry_class = DBX_SAFE_TO_RETRY;
#define FIELD(k, dflt) num_or(sr, k, num_or(dr, k, dflt))
  o->maximum_attempts = (int32_t)FIELD("maximum_attempts", 5);
  o->initial_interval_ms = (int64_t)(1000 * FIELD("initial_interval_s", 1));
  o->backoff_coefficient = FIELD("backoff_coefficient", 2);
  o->maximum_interval_ms = (int64_t)(1000 * FIELD("maximum_interval_s", 0));
#undef FIELD
  double s2c = num_or(step, "schedule_to_close_s", num_or(s->input, "schedule_to_close_s", 0));
  o->schedule_to_close_ms = (int64_t)(1000 * s2c);
}

/* Delete the sandbox; phase: DELETING (then finish) or CANCELLING (then end
 * as canceled). */
static void schedule_delete(script *s, dbx_wf *wf, int phase) {
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  /* results downloaded before the sandbox goes (not when cancelled) */
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(s->input, "sandbox");
  const cJSON *dl = sb ? cJSON_GetObjectItemCaseSensitive(sb, "download") : NULL;
  if (dl && phase == DELETING) cJSON_AddItemToObject(in, "download", cJSON_Duplicate(dl, 1));
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  dbx_activity_opts o = {.start_to_close_ms = dl && phase == DELETING ? 600000 : 60000};
  safe_retry(s, NULL, &o);
  s->phase = phase;
  s->delete_seq = dbx_wf_schedule_activity(wf, "sandbox.delete", txt ? txt : "{}", &o);
  free(txt);
}

static void schedule_delete_or_finish(script *s, dbx_wf *wf) {
  if (s->keep || !s->sandbox_id) {
    finish(s, wf);
    return;
  }
  schedule_delete(s, wf, DELETING);
}

/* ------------------------------------------ checkpoints and forks
 * (docs/worker.md "Checkpoints and forks"). A checkpoint is the activity
 * durabox.checkpoint {"sandbox_id", "name", "covered_event_id", "reason"}
 * with a name made of the run id and the covered event (the
 * WorkflowTaskStarted event of the task that schedules it: every step
 * outcome before it is in the workspace, none after), so a retried
 * checkpoint names the same snapshot. Nothing runs while it does. */

static void run_step(script *s, dbx_wf *wf);
static void step_done(script *s, dbx_wf *wf, const dbx_act_outcome *o);

/* What follows a checkpoint: the first step, the next one, the end. */
enum { CK_THEN_STEPS = 1, CK_THEN_NEXT, CK_THEN_END };

/* Steps that change the workspace (reads and checkpoints do not). */
static int changes_workspace(const char *kind) {
  return kind && (strcmp(kind, "exec") == 0 || strcmp(kind, "write_file") == 0 ||
                  strcmp(kind, "git_commit") == 0);
}

static int cmp_member(const void *x, const void *y) {
  return strcmp((*(cJSON *const *)x)->string, (*(cJSON *const *)y)->string);
}

/* Sort every object's members by key, in place. 0, or -1 on OOM. */
static int sort_members(cJSON *j) {
  for (cJSON *c = j ? j->child : NULL; c; c = c->next)
    if (sort_members(c) != 0) return -1;
  if (!cJSON_IsObject(j) || !j->child) return 0;
  size_t n = 0;
  for (cJSON *c = j->child; c; c = c->next) n++;
  cJSON **a = malloc(n * sizeof *a);
  if (!a) return -1;
  n = 0;
  for (cJSON *c = j->child; c; c = c->next) a[n++] = c;
  qsort(a, n, sizeof *a, cmp_member);
  for (size_t i = 0; i < n; i++) {
    a[i]->prev = i ? a[i - 1] : a[n - 1]; /* cJSON: the first's prev is the last */
    a[i]->next = i + 1 < n ? a[i + 1] : NULL;
  }
  j->child = a[0];
  free(a);
  return 0;
}

int dbx_script_step_key(const char *type, const char *input_json, size_t len,
                        char out[DBX_SCRIPT_STEP_KEY_LEN + 1]) {
  cJSON *in = input_json ? cJSON_ParseWithLength(input_json, len) : NULL;
  char *t = NULL, *all = NULL;
  int rc = -1;
  if (!in || !type) goto out;
  if (cJSON_IsObject(in)) {
    cJSON_DeleteItemFromObjectCaseSensitive(in, "sandbox_id");
    cJSON_DeleteItemFromObjectCaseSensitive(in, "redact"); /* derived from the input */
  }
  if (sort_members(in) != 0 || !(t = cJSON_PrintUnformatted(in)) ||
      !(all = dbx_asprintf("%s\n%s", type, t)))
    goto out;
  rc = dbx_sha256_hex(all, strlen(all), out) == DBX_OK ? 0 : -1;
out:
  free(all);
  free(t);
  cJSON_Delete(in);
  return rc;
}

static void schedule_checkpoint(script *s, dbx_wf *wf, const char *reason, int then) {
  const char *r = dbx_wf_run_id(wf);
  char run[96];
  size_t k = 0;
  for (; r && *r && k < 80; r++) /* a name of [A-Za-z0-9._-] */
    run[k++] = (*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') ||
                       *r == '-' || *r == '_'
                   ? *r
                   : '_';
  run[k] = '\0';
  s->ck_at = dbx_wf_history_length(wf);
  snprintf(s->ck_name, sizeof s->ck_name, "ck-%s-e%lld", run, (long long)s->ck_at);
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  cJSON_AddStringToObject(in, "name", s->ck_name);
  cJSON_AddNumberToObject(in, "covered_event_id", (double)s->ck_at);
  cJSON_AddStringToObject(in, "reason", reason);
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (!txt) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  /* a Daytona snapshot may take minutes; a failed one is tried 3 times */
  dbx_activity_opts o = {.start_to_close_ms = 900000, .retry_class = DBX_SAFE_TO_RETRY,
                         .maximum_attempts = 3, .initial_interval_ms = 1000,
                         .backoff_coefficient = 2};
  s->ck_reason = reason;
  s->ck_then = then;
  s->ck_changes = 0;
  s->ck_seq = dbx_wf_schedule_activity(wf, "durabox.checkpoint", txt, &o);
  free(txt);
}

/* The end of the steps: the completion checkpoint when the policy asks for
 * it and something changed since the last one, then delete or finish. */
static void steps_end(script *s, dbx_wf *wf) {
  if (s->ck_on_completion && s->sandbox_id && s->ck_changes > 0) {
    schedule_checkpoint(s, wf, "completion", CK_THEN_END);
    return;
  }
  schedule_delete_or_finish(s, wf);
}

/* A checkpoint's outcome goes into the summary ("checkpoints"); a failed
 * one is recorded as failed and the run goes on. */
static void checkpoint_done(script *s, dbx_wf *wf, const dbx_act_outcome *o) {
  s->ck_seq = 0;
  if (!s->checkpoints && !(s->checkpoints = cJSON_CreateArray())) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  const char *ref = str_of(res, "ref"), *name = str_of(res, "name");
  cJSON *c = cJSON_CreateObject();
  /* the name the checkpoint was taken under, as its result records it: in a
   * reset run the result is the base run's, whose id named it (s->ck_name is
   * made from this run's id) */
  cJSON_AddStringToObject(c, "name", name ? name : s->ck_name);
  cJSON_AddStringToObject(c, "reason", s->ck_reason ? s->ck_reason : "");
  cJSON_AddNumberToObject(c, "covered_event_id", (double)s->ck_at);
  cJSON_AddBoolToObject(c, "ok", ref != NULL);
  cJSON_AddNumberToObject(c, "attempts", o->attempts);
  if (ref) {
    cJSON_AddStringToObject(c, "ref", ref);
  } else {
    char *e = dbx_asprintf("%s%s%s", o->failure_type ? o->failure_type : "failed",
                           o->failure_message && *o->failure_message ? ": " : "",
                           o->failure_message ? o->failure_message : "");
    cJSON_AddStringToObject(c, "error", e ? e : "failed");
    free(e);
  }
  cJSON_AddItemToArray(s->checkpoints, c);
  cJSON_Delete(res);
  switch (s->ck_then) {
  case CK_THEN_NEXT: s->cur++; /* fall through */
  case CK_THEN_STEPS: run_step(s, wf); return;
  default: schedule_delete_or_finish(s, wf); return;
  }
}

static void schedule_fork_load(script *s, dbx_wf *wf) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(s->input, "fork_of");
  char *txt = cJSON_PrintUnformatted(f);
  if (!txt) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  dbx_activity_opts o = {.start_to_close_ms = 120000, .retry_class = DBX_SAFE_TO_RETRY,
                         .maximum_attempts = 5, .initial_interval_ms = 1000,
                         .backoff_coefficient = 2};
  s->phase = FORK_LOADING;
  s->fork_seq = dbx_wf_schedule_activity(wf, "durabox.fork_load", txt, &o);
  free(txt);
}

/* durabox.fork_load's result (the plan, cli/fork.h): create the sandbox
 * from its checkpoint, else from the input's source. */
static void fork_loaded(script *s, dbx_wf *wf, const dbx_act_outcome *o) {
  s->fork_seq = 0;
  cJSON *plan = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  if (!cJSON_IsObject(plan) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(plan, "steps"))) {
    char *m = dbx_asprintf("fork: loading the source's recorded steps failed: %s%s%s",
                           o->failure_type ? o->failure_type : "",
                           o->failure_type && *o->failure_type ? ": " : "",
                           o->failure_message ? o->failure_message : "the result is no plan");
    cJSON_Delete(plan);
    s->phase = DONE;
    dbx_wf_fail(wf, "ForkLoadFailed", m ? m : "fork: loading the source failed");
    free(m);
    return;
  }
  s->fork_plan = plan;
  const char *ref = str_of(cJSON_GetObjectItemCaseSensitive(plan, "checkpoint"), "ref");
  char *txt = NULL;
  if (ref) {
    cJSON *ci = cJSON_Parse(s->create_txt), *src = cJSON_CreateObject();
    cJSON_AddStringToObject(src, "kind", "snapshot");
    cJSON_AddStringToObject(src, "ref", ref);
    cJSON_DeleteItemFromObjectCaseSensitive(ci, "source");
    cJSON_AddItemToObject(ci, "source", src);
    txt = cJSON_PrintUnformatted(ci);
    cJSON_Delete(ci);
    if (!txt) {
      dbx_wf_out_of_memory(wf);
      return;
    }
  }
  s->phase = CREATING;
  s->create_seq = dbx_wf_schedule_activity(wf, "sandbox.create", txt ? txt : s->create_txt,
                                           &s->create_opts);
  free(txt);
}

/* A fork's create from its checkpoint failed: fail naming the snapshot
 * (ForkSnapshotMissing when the driver has no such snapshot). 1 when done. */
static int fork_restore_failed(script *s, dbx_wf *wf, const dbx_act_outcome *o, const char *m) {
  const cJSON *ck = s->fork_plan ? cJSON_GetObjectItemCaseSensitive(s->fork_plan, "checkpoint") : NULL;
  const char *ref = str_of(ck, "ref");
  if (!ref) return 0;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(s->fork_plan, "source");
  int missing = o->failure_type && strcmp(o->failure_type, "SourceNotFound") == 0;
  char *t = dbx_asprintf("fork: the checkpoint snapshot '%s' (covering event %lld of workflow %s "
                         "run %s) %s: %s", ref, (long long)num_or(ck, "covered_event_id", 0),
                         str_of(src, "workflow_id") ? str_of(src, "workflow_id") : "?",
                         str_of(src, "run_id") ? str_of(src, "run_id") : "?",
                         missing ? "is missing" : "could not be restored", m ? m : "failed");
  dbx_wf_fail(wf, missing ? "ForkSnapshotMissing" : "SandboxCreateFailed",
              t ? t : "fork: the checkpoint snapshot could not be restored");
  free(t);
  return 1;
}

/* In a fork: a step whose identity (type, canonical input without the
 * sandbox id, occurrence) matches a recorded step of the plan is satisfied
 * from the record: a marker "durabox.fork_step" holds the recorded outcome
 * and the step is not run. 1 when satisfied (or the run is out of memory). */
static int fork_satisfy(script *s, dbx_wf *wf, const char *type, const char *txt) {
  char key[DBX_SCRIPT_STEP_KEY_LEN + 1];
  if ((!s->fork_seen && !(s->fork_seen = cJSON_CreateObject())) ||
      dbx_script_step_key(type, txt, strlen(txt), key) != 0) {
    dbx_wf_out_of_memory(wf); /* never run a recorded step for want of memory */
    return 1;
  }
  cJSON *cnt = cJSON_GetObjectItemCaseSensitive(s->fork_seen, key);
  int occ = cnt ? (int)dbx_json_int(cnt->valuedouble, 0, INT_MAX - 1) : 0;
  if (cnt) cJSON_SetNumberValue(cnt, occ + 1);
  else cJSON_AddNumberToObject(s->fork_seen, key, 1);
  const cJSON *e, *hit = NULL;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(s->fork_plan, "steps")) {
    const char *k = str_of(e, "key");
    if (k && strcmp(k, key) == 0 && (int)num_or(e, "occurrence", -1) == occ) hit = e;
    if (hit) break;
  }
  if (!hit) return 0;
  char *val = cJSON_PrintUnformatted(hit);
  const char *rec = val ? dbx_wf_marker_record(wf, "durabox.fork_step", val) : NULL;
  cJSON *m = rec ? cJSON_Parse(rec) : NULL;
  free(val);
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(m, "result");
  char *rj = res ? cJSON_PrintUnformatted(res) : NULL;
  if (!m || (res && !rj)) {
    cJSON_Delete(m);
    dbx_wf_out_of_memory(wf);
    return 1;
  }
  const char *st = str_of(m, "status");
  dbx_act_outcome o = {
      .status = !st || strcmp(st, "completed") == 0 ? DBX_ACT_COMPLETED
                : strcmp(st, "timed_out") == 0      ? DBX_ACT_TIMED_OUT
                : strcmp(st, "canceled") == 0       ? DBX_ACT_CANCELED
                                                    : DBX_ACT_FAILED,
      .result_json = rj ? rj : "null",
      .result_len = rj ? strlen(rj) : 4,
      .failure_type = str_of(m, "failure_type") ? str_of(m, "failure_type") : "",
      .failure_message = str_of(m, "failure_message") ? str_of(m, "failure_message") : "",
      .non_retryable = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "non_retryable")),
      .attempts = (int)num_or(m, "attempts", 1)};
  s->satisfied++;
  int was = s->from_record;
  s->from_record = 1;
  s->step_seq = 0;
  step_done(s, wf, &o);
  s->from_record = was;
  free(rj);
  cJSON_Delete(m);
  return 1;
}

/* While a fork's at_most_once step waits, memo "durabox.approval" names it
 * ({"step": its name, "kind": "at_most_once", "target": activity type,
 * "arguments": the step, a file's content as content_bytes (its length),
 * "rule", "reason"}),
 * the shape a held agent step has
 * (workflows/agent.h), so that `durabox approval list|grant|deny` find it; a
 * decision clears it (null). Runs whose history has no marker of the version
 * "durabox.fork-approval-memo" (recorded before the memo existed) replay
 * without it. */
static void approval_memo(script *s, dbx_wf *wf, int open) {
  if (open == s->approval_memo) return;
  if (dbx_wf_get_version(wf, "durabox.fork-approval-memo", DBX_WF_DEFAULT_VERSION, 1) < 1) return;
  const char *key = "durabox.approval";
  char *txt = NULL;
  if (open) {
    const cJSON *st = cJSON_GetArrayItem(s->steps, s->cur);
    char type[64];
    snprintf(type, sizeof type, "sandbox.%s", str_of(st, "kind"));
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "step", str_of(st, "name"));
    cJSON_AddStringToObject(m, "kind", "at_most_once");
    cJSON_AddStringToObject(m, "target", type);
    cJSON *args = cJSON_Duplicate(st, 1);
    static const char *const bulky[] = {"content", "content_b64"}; /* a file's bytes: their size only */
    for (size_t i = 0; args && i < 2; i++) {
      const char *v = str_of(args, bulky[i]);
      if (!v) continue;
      char bkey[32];
      snprintf(bkey, sizeof bkey, "%s_bytes", bulky[i]);
      cJSON_AddNumberToObject(args, bkey, (double)strlen(v));
      cJSON_DeleteItemFromObjectCaseSensitive(args, bulky[i]);
    }
    cJSON_AddItemToObject(m, "arguments", args);
    cJSON_AddStringToObject(m, "rule", "fork");
    cJSON_AddStringToObject(m, "reason", "a fork runs an at_most_once step live only with approval");
    txt = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!txt) {
      dbx_wf_out_of_memory(wf);
      return;
    }
  }
  const char *val = txt ? txt : "null";
  if (dbx_wf_upsert_memo(wf, &key, &val, 1) == 0) s->approval_memo = open;
  free(txt);
}

/* A fork's at_most_once step waits for the signal "durabox.approval"
 * {"step": its name, "decision": "grant" | "deny", "by"?, "reason"?}. */
static void await_approval(script *s, dbx_wf *wf) {
  s->step_seq = 0;
  approval_memo(s, wf, 1);
  s->approval_seq = dbx_wf_await_signal(wf, "durabox.approval", 0);
}

static void script_on_signal_wait(void *state, dbx_wf *wf, int64_t seq, const char *json,
                                  size_t len, int timed_out) {
  script *s = state;
  (void)timed_out; /* the wait has no timeout */
  if (s->phase != STEPS || seq != s->approval_seq || s->cur >= s->nsteps) return;
  s->approval_seq = 0;
  const char *name = str_of(cJSON_GetArrayItem(s->steps, s->cur), "name");
  cJSON *j = cJSON_ParseWithLength(json, len);
  const char *step = str_of(j, "step"), *dec = str_of(j, "decision");
  if (step && dec && strcmp(step, name) == 0 &&
      (strcmp(dec, "grant") == 0 || strcmp(dec, "approve") == 0 || strcmp(dec, "allow") == 0)) {
    s->approved = s->cur;
    approval_memo(s, wf, 0);
    run_step(s, wf);
  } else if (step && dec && strcmp(step, name) == 0 && strcmp(dec, "deny") == 0) {
    approval_memo(s, wf, 0);
    char *m = dbx_asprintf("denied by %s%s%s", str_of(j, "by") ? str_of(j, "by") : "someone",
                           str_of(j, "reason") ? ": " : "",
                           str_of(j, "reason") ? str_of(j, "reason") : "");
    dbx_act_outcome o = {.status = DBX_ACT_FAILED, .result_json = "null", .result_len = 4,
                         .failure_type = "ApprovalDenied", .failure_message = m ? m : "denied",
                         .non_retryable = 1};
    step_done(s, wf, &o);
    free(m);
  } else {
    await_approval(s, wf); /* another step's, or no decision: wait on */
  }
  cJSON_Delete(j);
}

static void run_step(script *s, dbx_wf *wf) {
  while (s->cur < s->nsteps) {
    const cJSON *st = cJSON_GetArrayItem(s->steps, s->cur);
    const char *kind = str_of(st, "kind");
    if (strcmp(kind, "sleep") == 0) {
      double sec = cJSON_GetObjectItemCaseSensitive(st, "seconds")->valuedouble;
      s->step_seq = 0;
      dbx_wf_start_timer(wf, (int64_t)(sec * 1000.0));
      return;
    }
    cJSON *in = cJSON_Duplicate(st, 1);
    if (!in) {
      dbx_wf_out_of_memory(wf);
      return;
    }
    static const char *const drop[] = {"name", "kind", "retry_class", "continue_on_failure",
                                       "heartbeat_timeout_s", "retry", "schedule_to_close_s",
                                       "retry_on_exit"};
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
      cJSON_DeleteItemFromObjectCaseSensitive(in, drop[i]);
    cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id ? s->sandbox_id : "");
    /* every secret of the input is redacted from what a step brings back
     * (runs recorded before "redact" existed replay without it) */
    if ((strcmp(kind, "exec") == 0 || strcmp(kind, "read_file") == 0) &&
        cJSON_GetArraySize(s->redact) > 0 &&
        dbx_wf_get_version(wf, "durabox.redact-secrets", DBX_WF_DEFAULT_VERSION, 1) >= 1)
      cJSON_AddItemToObject(in, "redact", cJSON_Duplicate(s->redact, 1));
    /* the step's name travels along for people reading history (activities ignore it) */
    cJSON_AddStringToObject(in, "step", str_of(st, "name"));
    char *txt = cJSON_PrintUnformatted(in);
    cJSON_Delete(in);
    char type[64];
    snprintf(type, sizeof type, "sandbox.%s", kind);
    dbx_activity_opts o = {0};
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(st, "timeout_s");
    int64_t timeout_s = cJSON_IsNumber(to) ? dbx_json_int(to->valuedouble, 0, (int64_t)MAX_SECONDS) : 600;
    o.start_to_close_ms = strcmp(kind, "exec") == 0 ? (timeout_s + 60) * 1000 : 60000;
    if (strcmp(kind, "exec") == 0) {
      /* sandbox.exec heartbeats every ~200 ms while its detached command runs:
       * a dead worker is noticed after this long and the retry re-attaches.
       * A step may set heartbeat_timeout_s (default 30). */
      const cJSON *hb = cJSON_GetObjectItemCaseSensitive(st, "heartbeat_timeout_s");
      double hb_s = cJSON_IsNumber(hb) && hb->valuedouble >= 1 ? hb->valuedouble : 30;
      o.heartbeat_ms = (int64_t)(hb_s * 1000);
    }
    const char *rc = str_of(st, "retry_class");
    if (rc && strcmp(rc, "at_most_once") == 0) {
      o.retry_class = DBX_AT_MOST_ONCE;
      o.maximum_attempts = 1;
      o.schedule_to_close_ms = (int64_t)(1000 * num_or(st, "schedule_to_close_s", 0));
    } else {
      safe_retry(s, st, &o);
    }
    if (txt && s->fork_plan && fork_satisfy(s, wf, type, txt)) {
      free(txt);
      return;
    }
    if (s->fork_plan && o.retry_class == DBX_AT_MOST_ONCE && s->approved != s->cur) {
      free(txt); /* a fork runs no at_most_once step without an approval */
      await_approval(s, wf);
      return;
    }
    s->step_seq = dbx_wf_schedule_activity(wf, type, txt ? txt : "{}", &o);
    free(txt);
    return;
  }
  steps_end(s, wf);
}

/* --------------------------------------------------------- input text */

/* Every string of the input, key or value, in document order (the order
 * dbx_json_text_check counts them), with the path that names it
 * ("steps[0].content"; a key is named by its object and is_key). */
typedef struct {
  size_t want;    /* the ordinal to name, or SIZE_MAX */
  size_t seen;    /* strings visited so far */
  int found, is_key;
  size_t len;     /* the too long string's length */
  char path[160]; /* of the string found */
} str_walk;

static void walk_visit(str_walk *w, const char *path, int is_key, const char *str) {
  if (w->found) return;
  size_t len = strlen(str);
  if (w->seen++ == w->want || (w->want == SIZE_MAX && len > DBX_SCRIPT_MAX_FIELD_BYTES)) {
    w->found = 1, w->is_key = is_key, w->len = len;
    snprintf(w->path, sizeof w->path, "%s", path[0] ? path : "the input");
  }
}

static void walk_strings(const cJSON *node, char *path, size_t plen, size_t cap, str_walk *w) {
  if (cJSON_IsString(node)) walk_visit(w, path, 0, node->valuestring);
  if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return;
  size_t i = 0;
  for (const cJSON *c = node->child; c != NULL && !w->found; c = c->next, i++) {
    if (cJSON_IsObject(node)) walk_visit(w, path, 1, c->string);
    if (w->found) return;
    if (cJSON_IsObject(node))
      snprintf(path + plen, cap - plen, "%s%.60s", plen ? "." : "", c->string);
    else
      snprintf(path + plen, cap - plen, "[%zu]", i);
    size_t l = strlen(path);
    walk_strings(c, path, l, cap, w);
    path[plen] = '\0';
  }
}

/* Parse and check the text of an input: one JSON document, its strings free
 * of NUL, raw control characters and invalid UTF-8, none too long, the whole
 * within its limit. Returns the tree (the caller owns it) or NULL with the
 * reason in err. */
static cJSON *parse_input(const char *json, size_t len, char *err, size_t n) {
  const char *end = NULL;
  cJSON *in = json ? cJSON_ParseWithLengthOpts(json, len, &end, 0) : NULL;
  if (!in) return snprintf(err, n, "input is not valid JSON"), NULL;
  size_t at = 0;
  dbx_json_problem p = dbx_json_text_check(json, len, (size_t)(end - json), &at);
  char path[160] = "";
  str_walk w = {.want = p == DBX_JSON_OK ? SIZE_MAX : at};
  if (p == DBX_JSON_TRAILING) {
    snprintf(err, n, "input has data after the JSON document (at byte %zu)", at);
    goto bad;
  }
  walk_strings(in, path, 0, sizeof path, &w);
  if (p != DBX_JSON_OK) {
    snprintf(err, n, "input: %s%s %s", w.is_key ? "a field name in " : "",
             w.found ? w.path : "a string", dbx_json_problem_str(p));
    goto bad;
  }
  if (w.found) {
    snprintf(err, n, "input: %s%s is %zu bytes, over the limit of %u bytes per field",
             w.is_key ? "a field name in " : "", w.path, w.len, DBX_SCRIPT_MAX_FIELD_BYTES);
    goto bad;
  }
  if (len > DBX_SCRIPT_MAX_INPUT_BYTES) {
    snprintf(err, n, "input is %zu bytes, over the limit of %u bytes per input", len,
             DBX_SCRIPT_MAX_INPUT_BYTES);
    goto bad;
  }
  return in;
bad:
  cJSON_Delete(in);
  return NULL;
}

int dbx_script_validate(const char *input_json, size_t len, char *err, size_t n) {
  cJSON *in = parse_input(input_json, len, err, n);
  if (!in) return -1;
  int rc = validate(in, err, n);
  cJSON_Delete(in);
  return rc;
}

static void *script_create(dbx_wf *wf, const char *input_json, size_t len) {
  char err[256];
  cJSON *in = parse_input(input_json, len, err, sizeof err);
  if (!in) {
    dbx_wf_fail(wf, "InvalidInput", err);
    return NULL;
  }
  if (validate(in, err, sizeof err) != 0) {
    cJSON_Delete(in);
    dbx_wf_fail(wf, "InvalidInput", err);
    return NULL;
  }
  script *s = calloc(1, sizeof *s);
  if (!s || !(s->out_steps = cJSON_CreateArray())) {
    free(s);
    cJSON_Delete(in);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  s->input = in;
  if (!(s->redact = secret_names(in))) {
    script_free(s);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  s->steps = cJSON_GetObjectItemCaseSensitive(in, "steps");
  s->nsteps = cJSON_GetArraySize(s->steps);
  const cJSON *sb = cJSON_GetObjectItemCaseSensitive(in, "sandbox");
  s->keep = sb ? cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sb, "keep")) : 0;
  int session = cJSON_HasObjectItem(in, "session");
  if (session) s->keep = 1; /* the next turn re-opens it */
  cJSON *ci = cJSON_CreateObject();
  cJSON_AddStringToObject(ci, "resource", "workspace");
  /* a sandbox per run: this run owns it (docs/sandbox.md "A sandbox per run") */
  cJSON_AddStringToObject(ci, "owner_run_id", dbx_wf_run_id(wf));
  if (s->keep) cJSON_AddTrueToObject(ci, "keep");
  const cJSON *src = sb ? cJSON_GetObjectItemCaseSensitive(sb, "source") : NULL;
  if (src) cJSON_AddItemToObject(ci, "source", cJSON_Duplicate(src, 1));
  else cJSON_AddItemToObject(ci, "source", cJSON_Parse("{\"kind\":\"empty\"}"));
  const cJSON *env = sb ? cJSON_GetObjectItemCaseSensitive(sb, "env") : NULL;
  if (env) cJSON_AddItemToObject(ci, "env", cJSON_Duplicate(env, 1));
  for (int i = 0; sb && i < 2; i++) { /* passed on as sandbox.create takes them */
    const char *k = i == 0 ? "network" : "host_fs";
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, k);
    if (cJSON_IsString(v)) cJSON_AddStringToObject(ci, k, v->valuestring);
  }
  static const char *const create_opts[] = {"resources", "auto_stop_minutes",
                                            "auto_archive_minutes", "auto_delete_minutes",
                                            "upload"};
  for (size_t i = 0; sb && i < sizeof create_opts / sizeof *create_opts; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, create_opts[i]);
    if (v) cJSON_AddItemToObject(ci, create_opts[i], cJSON_Duplicate(v, 1));
  }
  if (session) session_create_input(s, wf, ci);
  char *txt = cJSON_PrintUnformatted(ci);
  cJSON_Delete(ci);
  /* a clone may take long: 600 s unless the input says; it heartbeats while
   * it copies or clones, so a dead worker is noticed after
   * sandbox.heartbeat_timeout_s (default 30) */
  const cJSON *cto = sb ? cJSON_GetObjectItemCaseSensitive(sb, "timeout_s") : NULL;
  int64_t create_s = cJSON_IsNumber(cto) && cto->valuedouble >= 1 ? dbx_json_int(cto->valuedouble, 1, (int64_t)MAX_SECONDS) : 600;
  const cJSON *chb = sb ? cJSON_GetObjectItemCaseSensitive(sb, "heartbeat_timeout_s") : NULL;
  double chb_s = cJSON_IsNumber(chb) && chb->valuedouble >= 1 ? chb->valuedouble : 30;
  dbx_activity_opts o = {.start_to_close_ms = create_s * 1000,
                         .heartbeat_ms = (int64_t)(chb_s * 1000)};
  safe_retry(s, NULL, &o);
  const cJSON *pol = sb ? cJSON_GetObjectItemCaseSensitive(sb, "checkpoint") : NULL;
  s->ck_on = pol != NULL;
  s->ck_every = (int)num_or(pol, "every_steps", 0);
  s->ck_on_completion = pol && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pol, "on_completion"));
  s->approved = -1;
  if (cJSON_GetObjectItemCaseSensitive(in, "fork_of") && txt) {
    /* a fork: its first activity loads the source's record; create follows */
    s->create_txt = txt;
    s->create_opts = o;
    schedule_fork_load(s, wf);
    return s;
  }
  s->phase = CREATING;
  s->create_seq = dbx_wf_schedule_activity(wf, "sandbox.create", txt ? txt : "{}", &o);
  free(txt);
  return s;
}

/* ---- the step summary ----
 * What a step result shows people: each stream apart, as text (bytes that
 * are not UTF-8, or NUL, become U+FFFD, never dropped), its last
 * STREAM_EXCERPT_BYTES with a mark of what was cut, and why a step failed;
 * output_excerpt, both streams' last EXCERPT_BYTES. */
#define EXCERPT_BYTES 2048
#define STREAM_EXCERPT_BYTES 1024

/* p[0, n) as UTF-8 text, each byte of a broken sequence (and NUL) as U+FFFD.
 * malloc'd, NUL-ended; NULL on OOM. */
static char *lossy_text(const uint8_t *p, size_t n) {
  char *t = malloc(n * 3 + 1);
  size_t o = 0;
  if (!t) return NULL;
  for (size_t i = 0; i < n;) {
    uint8_t c = p[i];
    size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (l > 0 && c != 0 && i + l <= n && dbx_utf8_valid(p + i, l)) {
      memcpy(t + o, p + i, l);
      o += l, i += l;
    } else {
      memcpy(t + o, "\xef\xbf\xbd", 3);
      o += 3, i++;
    }
  }
  t[o] = 0;
  return t;
}

/* The text of field name (text) or name_b64 (bytes, shown lossily) of res;
 * "" when neither. malloc'd; NULL on OOM. */
static char *field_text(const cJSON *res, const char *name) {
  const char *txt = str_of(res, name);
  if (txt) return dbx_strdup(txt);
  char key[48];
  snprintf(key, sizeof key, "%s_b64", name);
  const char *b64 = str_of(res, key);
  uint8_t *raw = NULL;
  size_t n = 0;
  if (!b64 || dbx_base64_decode(b64, strlen(b64), &raw, &n) != DBX_OK) return dbx_strdup("");
  char *t = lossy_text(raw, n);
  free(raw);
  return t;
}

/* The last STREAM_EXCERPT_BYTES of text, from a character's start, after a mark
 * "[… N bytes cut …]" line when text is longer (N: bytes of this text left
 * out). In place; returns text. */
static char *excerpt_of(char *text) {
  size_t n = strlen(text), from = n > STREAM_EXCERPT_BYTES ? n - STREAM_EXCERPT_BYTES : 0;
  if (from == 0) return text;
  while (from < n && ((unsigned char)text[from] & 0xC0) == 0x80) from++;
  char d[24], num[40];
  int dn = snprintf(d, sizeof d, "%zu", from), k = 0;
  for (int i = 0; i < dn; i++) {
    if (i > 0 && (dn - i) % 3 == 0) num[k++] = ',';
    num[k++] = d[i];
  }
  num[k] = 0;
  char mark[64];
  int ml = snprintf(mark, sizeof mark, "[\xe2\x80\xa6 %s bytes cut \xe2\x80\xa6]\n", num);
  memmove(text + ml, text + from, n - from + 1); /* ml < STREAM_EXCERPT_BYTES < from */
  memcpy(text, mark, (size_t)ml);
  return text;
}

/* Add the excerpt of res's stream name under key; output_excerpt is both
 * streams' last EXCERPT_BYTES (stdout's then stderr's, each starting on a
 * line of its own), kept for existing readers. Returns 0 or -1 (OOM). */
static int add_streams(cJSON *sum, const cJSON *res, const char *const *names,
                       const char *const *keys, size_t nn, int with_joined) {
  char *t[2] = {NULL, NULL};
  int rc = 0;
  for (size_t i = 0; i < nn && i < 2; i++) {
    t[i] = field_text(res, names[i]);
    if (!t[i]) rc = -1;
  }
  if (rc == 0 && with_joined && nn == 2) {
    size_t ol = strlen(t[0]);
    const char *sep = ol > 0 && t[0][ol - 1] != '\n' && t[1][0] ? "\n" : "";
    char *all = dbx_asprintf("%s%s%s", t[0], sep, t[1]);
    size_t n = all ? strlen(all) : 0, from = n > EXCERPT_BYTES ? n - EXCERPT_BYTES : 0;
    while (all && from < n && ((unsigned char)all[from] & 0xC0) == 0x80) from++;
    if (!all || !cJSON_AddStringToObject(sum, "output_excerpt", all + from)) rc = -1;
    free(all);
  }
  for (size_t i = 0; rc == 0 && i < nn && i < 2; i++)
    if (!cJSON_AddStringToObject(sum, keys[i], excerpt_of(t[i]))) rc = -1;
  free(t[0]);
  free(t[1]);
  return rc;
}

/* Copy res's number or bool fields named in keys into sum, when present. */
static void copy_fields(cJSON *sum, const cJSON *res, const char *const *keys, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(res, keys[i]);
    if (cJSON_IsNumber(v) || cJSON_IsBool(v))
      cJSON_AddItemToObject(sum, keys[i], cJSON_Duplicate(v, 0));
  }
}

/* Why an exec that ran did not succeed, in words; NULL when it did. */
static char *exec_reason(const cJSON *res) {
  const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
  const cJSON *sg = cJSON_GetObjectItemCaseSensitive(res, "signal");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "timed_out")))
    return dbx_asprintf("timed out (the command was killed)");
  if (!cJSON_IsNumber(ec)) return dbx_asprintf("the result has no exit code");
  if (ec->valuedouble == 0) return NULL;
  if (cJSON_IsNumber(sg) && sg->valuedouble > 0)
    return dbx_asprintf("killed by signal %d", (int)dbx_json_int(sg->valuedouble, 0, INT_MAX));
  return dbx_asprintf("exit code %d", (int)dbx_json_int(ec->valuedouble, INT_MIN, INT_MAX));
}

static void record_step(script *s, const cJSON *st, const dbx_act_outcome *o, int *ok_out) {
  const char *kind = str_of(st, "kind");
  cJSON *sum = cJSON_CreateObject();
  cJSON *res = o && o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  int ok = o ? o->status == DBX_ACT_COMPLETED : 1;
  char *reason = NULL;
  cJSON_AddStringToObject(sum, "name", str_of(st, "name"));
  cJSON_AddStringToObject(sum, "kind", kind);
  const cJSON *dur = res ? cJSON_GetObjectItemCaseSensitive(res, "duration_ms") : NULL;
  if (strcmp(kind, "exec") == 0 && res) {
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
    reason = exec_reason(res);
    if (reason) ok = 0;
    if (cJSON_IsNumber(ec)) cJSON_AddNumberToObject(sum, "exit_code", ec->valuedouble);
    else cJSON_AddNullToObject(sum, "exit_code");
  }
  cJSON_AddBoolToObject(sum, "ok", ok);
  cJSON_AddNumberToObject(sum, "attempts", o ? o->attempts : 0);
  if (cJSON_IsNumber(dur)) cJSON_AddNumberToObject(sum, "duration_ms", dur->valuedouble);
  /* what the step produced, for people: git_commit's sha, checkpoint's ref */
  const char *detail = !res ? NULL
                       : strcmp(kind, "git_commit") == 0 ? str_of(res, "sha")
                       : strcmp(kind, "checkpoint") == 0 ? str_of(res, "ref")
                                                         : NULL;
  if (detail) cJSON_AddStringToObject(sum, "detail", detail);
  if (strcmp(kind, "exec") == 0 && res) {
    static const char *const f[] = {"timed_out", "signal", "stdout_bytes", "stderr_bytes",
                                    "stdout_truncated", "stderr_truncated"};
    copy_fields(sum, res, f, sizeof f / sizeof f[0]);
    static const char *const names[] = {"stdout", "stderr"};
    add_streams(sum, res, names, names, 2, 1);
  }
  if (strcmp(kind, "read_file") == 0 && res) {
    static const char *const f[] = {"bytes", "truncated"};
    copy_fields(sum, res, f, 2);
    static const char *const names[] = {"content"};
    add_streams(sum, res, names, names, 1, 0);
  }
  const char *rcl = str_of(st, "retry_class");
  if (o && o->status == DBX_ACT_TIMED_OUT && o->attempts > 0 && rcl &&
      strcmp(rcl, "at_most_once") == 0) {
    /* its only attempt started and then went silent (worker killed, paused
     * or cut off): whether the effect happened is unknown, not a timeout */
    char *e = dbx_asprintf("OutcomeUnknown: the step's only attempt started and timed out "
                           "(%s), so the command may have run; an at_most_once step is not "
                           "started again",
                           o->failure_message && *o->failure_message ? o->failure_message
                                                                      : "timeout");
    cJSON_AddStringToObject(sum, "error", e ? e : "OutcomeUnknown");
    free(reason);
    reason = e;
  } else if (o && o->status != DBX_ACT_COMPLETED) {
    char *e = dbx_asprintf("%s%s%s", o->failure_type ? o->failure_type : "",
                           o->failure_type && *o->failure_type ? ": " : "",
                           o->failure_message ? o->failure_message : "");
    cJSON_AddStringToObject(sum, "error", e ? e : "");
    free(reason);
    reason = e;
  }
  if (!ok) cJSON_AddStringToObject(sum, "reason", reason ? reason : "failed");
  free(reason);
  cJSON_AddItemToArray(s->out_steps, sum);
  cJSON_Delete(res);
  *ok_out = ok;
}

/* 1 when the exec step st with "retry_on_exit" is to run again after its
 * outcome o (a completed run whose exit code it lists, not a timeout, runs
 * left); *code: that exit code. */
static int exit_retry_due(const script *s, const cJSON *st, const dbx_act_outcome *o, int *code) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "retry_on_exit");
  if (!r || !o || o->status != DBX_ACT_COMPLETED) return 0;
  if (s->runs + 1 >= (int)num_or(r, "max_attempts", 2)) return 0;
  cJSON *res = cJSON_Parse(o->result_json);
  const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
  int due = cJSON_IsNumber(ec) && ec->valuedouble != 0 &&
            !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "timed_out"));
  *code = due ? (int)dbx_json_int(ec->valuedouble, INT_MIN, INT_MAX) : 0;
  const cJSON *codes = cJSON_GetObjectItemCaseSensitive(r, "codes");
  if (due && cJSON_IsArray(codes)) {
    int listed_code = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, codes) if (cJSON_IsNumber(c) && c->valuedouble == (double)*code) listed_code = 1;
    due = listed_code;
  }
  cJSON_Delete(res);
  return due;
}

/* Run the exec step again after its backoff: a marker
 * "durabox.exec_retry" {"step", "attempt", "of", "exit_code", "backoff_s"}
 * says so in history (durabox run shows it), then a durable timer (none for
 * a backoff of 0). Deterministic: everything comes from history. */
static void exit_retry(script *s, dbx_wf *wf, const cJSON *st, int code) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(st, "retry_on_exit");
  double backoff = num_or(r, "backoff_s", 1);
  if (!s->exit_codes && !(s->exit_codes = cJSON_CreateArray())) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  cJSON_AddItemToArray(s->exit_codes, cJSON_CreateNumber(code));
  s->runs++;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "step", str_of(st, "name"));
  cJSON_AddNumberToObject(m, "attempt", s->runs);
  cJSON_AddNumberToObject(m, "of", (int)num_or(r, "max_attempts", 2));
  cJSON_AddNumberToObject(m, "exit_code", code);
  cJSON_AddNumberToObject(m, "backoff_s", backoff);
  char *txt = cJSON_PrintUnformatted(m);
  cJSON_Delete(m);
  if (!txt) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  (void)dbx_wf_marker_record(wf, "durabox.exec_retry", txt);
  free(txt);
  s->step_seq = 0;
  int64_t ms = s->from_record ? 0 : (int64_t)(backoff * 1000.0); /* a recorded run waits no more */
  if (ms <= 0) {
    run_step(s, wf);
    return;
  }
  s->retry_at_ms = dbx_wf_now_ms(wf) + ms;
  s->retry_timer_seq = dbx_wf_start_timer(wf, ms);
}

static void step_done(script *s, dbx_wf *wf, const dbx_act_outcome *o) {
  const cJSON *st = cJSON_GetArrayItem(s->steps, s->cur);
  int ok = 0, code = 0;
  if (exit_retry_due(s, st, o, &code)) {
    exit_retry(s, wf, st, code);
    return;
  }
  record_step(s, st, o, &ok);
  if (s->runs > 0) { /* the runs before the last, for the summary */
    cJSON *sum = cJSON_GetArrayItem(s->out_steps, cJSON_GetArraySize(s->out_steps) - 1);
    cJSON_AddNumberToObject(sum, "runs", s->runs + 1);
    cJSON_AddItemToObject(sum, "retried_exit_codes", s->exit_codes);
    s->exit_codes = NULL;
    s->runs = 0;
  }
  if (s->from_record) {
    cJSON *sum = cJSON_GetArrayItem(s->out_steps, cJSON_GetArraySize(s->out_steps) - 1);
    cJSON_AddTrueToObject(sum, "from_record");
  }
  int stop = !ok && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "continue_on_failure"));
  if (stop) {
    s->failed = 1;
    s->failed_step = str_of(st, "name");
  }
  if (!s->from_record && changes_workspace(str_of(st, "kind"))) {
    s->ck_changes++;
    if (s->ck_every > 0 && ++s->ck_total % s->ck_every == 0 && s->sandbox_id) {
      schedule_checkpoint(s, wf, "every_steps", stop ? CK_THEN_END : CK_THEN_NEXT);
      return;
    }
  }
  if (stop) {
    steps_end(s, wf);
    return;
  }
  s->cur++;
  run_step(s, wf);
}

/* The driver's message often starts with "sandbox.create: " already and
 * carries a tool's stderr with newlines: drop the repeated prefix and fold
 * each run of white space that holds a newline into one space, in place. */
static void one_line_message(char *m) {
  static const char prefix[] = "sandbox.create: ";
  size_t pl = sizeof prefix - 1;
  if (m == NULL) return;
  while (strncmp(m + pl, prefix, pl) == 0) memmove(m + pl, m + 2 * pl, strlen(m + 2 * pl) + 1);
  char *w = m;
  for (const char *r = m; *r;) {
    if (*r == ' ' || *r == '\t' || *r == '\n' || *r == '\r') {
      const char *e = r;
      int nl = 0;
      while (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r') nl |= *e == '\n' || *e == '\r', e++;
      if (!nl) {
        while (r < e) *w++ = *r++;
        continue;
      }
      if (w > m && *e) *w++ = ' ';
      r = e;
      continue;
    }
    *w++ = *r++;
  }
  *w = '\0';
}

static void script_on_activity(void *state, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  script *s = state;
  /* while cancelling, only the delete's outcome matters (a step may still end) */
  if ((s->phase == DELETING || s->phase == CANCELLING) && seq != s->delete_seq) return;
  if (s->phase == FORK_LOADING) {
    if (seq == s->fork_seq) fork_loaded(s, wf, o);
    return;
  }
  if (s->ck_seq > 0 && seq == s->ck_seq) {
    checkpoint_done(s, wf, o);
    return;
  }
  switch (s->phase) {
  case CREATING: {
    cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
    const char *id = res ? str_of(res, "sandbox_id") : NULL;
    if (!id || !*id) {
      char *m = dbx_asprintf("sandbox.create: %s", o->status == DBX_ACT_COMPLETED
                                                       ? "result has no \"sandbox_id\""
                                                       : (o->failure_message ? o->failure_message : "failed"));
      one_line_message(m);
      cJSON_Delete(res);
      s->phase = DONE;
      if (fork_restore_failed(s, wf, o, m)) {
        free(m);
        return;
      }
      dbx_wf_fail(wf, "SandboxCreateFailed", m ? m : "sandbox.create failed");
      free(m);
      return;
    }
    s->sandbox_id = dbx_strdup(id);
    const char *path = str_of(res, "path"), *drv = str_of(res, "driver");
    if (path) s->sandbox_path = dbx_strdup(path);
    if (drv) s->sandbox_driver = dbx_strdup(drv);
    cJSON_Delete(res);
    s->phase = STEPS;
    if (s->ck_on) { /* the baseline, before any step */
      schedule_checkpoint(s, wf, "baseline", CK_THEN_STEPS);
      return;
    }
    run_step(s, wf);
    return;
  }
  case STEPS: step_done(s, wf, o); return;
  case DELETING: {
    /* what the delete downloaded (and failed to) goes into the result */
    cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
    static const char *const keys[] = {"downloaded", "download_failed"};
    for (int i = 0; res && i < 2; i++) {
      cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(res, keys[i]);
      if (v == NULL) continue;
      if (s->downloads == NULL) s->downloads = cJSON_CreateObject();
      if (s->downloads == NULL || !cJSON_AddItemToObject(s->downloads, keys[i], v)) cJSON_Delete(v);
    }
    cJSON_Delete(res);
    finish(s, wf);
    return;
  }
  case CANCELLING: s->phase = DONE; dbx_wf_cancel_done(wf); return;
  case CANCEL_CREATE: {
    if (seq != s->create_seq) return;
    cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
    const char *id = res ? str_of(res, "sandbox_id") : NULL;
    if (id && *id && !s->keep) {
      s->sandbox_id = dbx_strdup(id);
      schedule_delete(s, wf, CANCELLING);
    } else {
      if (id && *id) s->sandbox_id = dbx_strdup(id);
      s->phase = DONE;
      dbx_wf_cancel_done(wf);
    }
    cJSON_Delete(res);
    return;
  }
  default: return;
  }
}

static void script_on_timer(void *state, dbx_wf *wf, int64_t seq) {
  script *s = state;
  if (s->phase != STEPS) return;
  if (s->retry_timer_seq > 0 && seq == s->retry_timer_seq) { /* retry_on_exit's wait */
    s->retry_timer_seq = 0;
    run_step(s, wf);
    return;
  }
  step_done(s, wf, NULL);
}

static void script_on_cancel(void *state, dbx_wf *wf) {
  script *s = state;
  if (s->phase == DONE || s->phase == CANCELLING || s->phase == CANCEL_CREATE) return;
  /* A create still running (a clone may take minutes) is asked to stop; its
   * outcome, which always comes, decides whether there is a sandbox to
   * delete. No cancel is sent when that outcome is already in history or the
   * create was scheduled in this same task (it then runs to its end). */
  if (s->phase == CREATING) {
    (void)dbx_wf_cancel_activity(wf, s->create_seq);
    s->phase = CANCEL_CREATE;
    return;
  }
  /* the running step is asked to stop too (an exec kills its command); its
   * outcome no longer matters. Deleting the sandbox stops what still runs. */
  if (s->phase == STEPS && s->step_seq > 0) (void)dbx_wf_cancel_activity(wf, s->step_seq);
  if (s->phase == STEPS && s->retry_timer_seq > 0) { /* no run comes after the wait */
    (void)dbx_wf_cancel_timer(wf, s->retry_timer_seq);
    s->retry_timer_seq = 0;
  }
  if (s->sandbox_id && !s->keep && s->phase != DELETING) {
    schedule_delete(s, wf, CANCELLING);
    return;
  }
  if (s->phase == DELETING) {
    s->phase = CANCELLING;
    return;
  }
  s->phase = DONE;
  dbx_wf_cancel_done(wf);
}

/* The "progress" query: the output so far (listed in the run's
 * __temporal_workflow_metadata, so Temporal's Web UI offers it). */
static char *script_query_progress(void *state, const char *args_json, size_t len) {
  (void)args_json;
  (void)len;
  return output_json(state);
}

static const dbx_wf_query_def script_queries[] = {
    {"progress", script_query_progress, "the steps so far: each step's summary, as the result will list them"},
    {NULL, NULL, NULL},
};

static void script_destroy(void *state) { script_free(state); }

const dbx_workflow_type dbx_script_workflow = {
    .name = "durabox.Script",
    .create = script_create,
    .on_activity = script_on_activity,
    .on_timer = script_on_timer,
    .on_signal = NULL,
    .on_cancel = script_on_cancel,
    .queries = script_queries,
    .destroy = script_destroy,
    .on_signal_wait = script_on_signal_wait,
};
