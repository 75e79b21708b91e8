/* workflows/agent: durabox.Agent (see agent.h).
 *
 * A state machine driven by outcomes: OPENING (sandbox.create or .start) ->
 * BRANCHING (git checkout -B) -> CHATTING (llm.chat) -> TOOLING (one tool
 * activity; ci = the tool call's index) -> ... -> DELETING -> DONE. A held
 * step is HOLDING (sandbox.stop in flight and/or waiting for the signal)
 * then RESUMING (sandbox.start) before the held call runs or is refused.
 * Every transition comes from the input, an activity outcome, a signal or a
 * timer, so a replay walks the same states and issues the same commands. */
#include "workflows/agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/util.h"
#include "workflows/policy.h"

enum { OPENING, BRANCHING, CHATTING, TOOLING, HOLDING, RESUMING, DELETING, DONE, CHECKING_PR,
       CHECKPOINTING, CANCEL_OPEN, CANCELLING };
/* What follows a checkpoint: the first model call, the next tool call, the end. */
enum { CK_THEN_CHAT = 1, CK_THEN_NEXT_TOOL, CK_THEN_FINISH };
enum { UNDECIDED = 0, GRANTED, DENIED };

typedef struct {
  cJSON *input;       /* owned */
  dbx_policy *policy; /* owned */
  cJSON *messages;    /* owned: the conversation */
  cJSON *steps;       /* owned: output steps */
  cJSON *calls;       /* owned: tool calls of the newest answer, or NULL */
  cJSON *pr;          /* owned {"number", "url"}, or NULL */
  int ncalls, ci, phase, keep, adopted;
  int64_t seq;        /* the activity in flight (main line) */
  char *sandbox_id, *owner_run, *branch, *answer, *status, *model;
  char *fail_type, *fail_msg;
  double ptok, ctok, max_tokens;
  int model_calls, tool_calls, nstep, max_steps;
  int pr_retry; /* 1 while open_pr runs again after a lookup found none */
  size_t out_cap;
  /* the held step */
  int held_kind_llm; /* 1: a model call is held, 0: tool call ci */
  int held_step, decided, stop_pending;
  int64_t stop_seq, wait_seq, deadline_ms, timeout_ms;
  cJSON *held_args;  /* owned */
  cJSON *approvers;  /* owned: who may decide the held step, NULL = anyone */
  char *held_target, *held_rule, *held_reason, *by, *why;
  char *driver; /* the sandbox's driver (sandbox.create's result), NULL: unknown */
  /* checkpoints (sandbox.checkpoint, issue 12's rules; off by default):
   * workspace-changing tool calls since the last checkpoint and in all, the
   * checkpoint's covered event, name, reason (static) and what follows it */
  int ck_on, ck_every, ck_on_completion, ck_changes, ck_total, ck_then;
  int64_t ck_at;
  char ck_name[128];
  const char *ck_reason;
  cJSON *checkpoints; /* owned: the outcomes, for the result; NULL before the first */
  /* continue-as-new: model calls of this run, the bounds, 1 in a continued run */
  int run_model_calls, continued;
  double can_calls, can_bytes;
} agent;

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *x = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
  return cJSON_IsString(x) ? x->valuestring : NULL;
}
static double num_or(const cJSON *o, const char *k, double d) {
  const cJSON *x = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
  return cJSON_IsNumber(x) ? x->valuedouble : d;
}
static const cJSON *obj_of(const cJSON *o, const char *k) {
  const cJSON *x = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
  return cJSON_IsObject(x) ? x : NULL;
}

static void agent_free(agent *s) {
  if (!s) return;
  cJSON_Delete(s->input);
  dbx_policy_free(s->policy);
  cJSON_Delete(s->messages);
  cJSON_Delete(s->steps);
  cJSON_Delete(s->calls);
  cJSON_Delete(s->pr);
  cJSON_Delete(s->held_args);
  cJSON_Delete(s->approvers);
  cJSON_Delete(s->checkpoints);
  free(s->driver);
  free(s->sandbox_id), free(s->owner_run), free(s->branch), free(s->answer), free(s->status);
  free(s->model), free(s->fail_type), free(s->fail_msg), free(s->held_target);
  free(s->held_rule), free(s->held_reason), free(s->by), free(s->why);
  free(s);
}

static const char TOOLS_JSON[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"shell\",\"description\":\"Run a shell "
    "command (bash -c) in the repository's working tree in the sandbox. Returns the exit code "
    "and output.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
    "\"string\"},\"timeout_s\":{\"type\":\"number\"}},\"required\":[\"command\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"description\":\"Read a file "
    "of the working tree (path relative to its root).\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"path\":{\"type\":\"string\"}},\"required\":[\"path\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"description\":\"Write a "
    "whole file of the working tree.\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}},\"required\":[\"path\","
    "\"content\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"push\",\"description\":\"Push the "
    "sandbox's branch (commit first) to the repository's remote, with the worker's credentials "
    "(the sandbox has none).\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"open_pr\",\"description\":\"Open a pull "
    "request from the sandbox's branch (commit and push it first).\",\"parameters\":{\"type\":"
    "\"object\",\"properties\":{\"title\":{\"type\":\"string\"},\"body\":{\"type\":\"string\"}},"
    "\"required\":[\"title\"]}}}]";

static const char DEFAULT_SYSTEM[] =
    "You are a coding agent working in a sandbox on a git repository. Use the tools to read "
    "and change files and to run commands. Some steps may be refused or need a person's "
    "approval; read the reason you are given. When the task is done, answer with a short "
    "summary and no tool calls.";

/* ---------------------------------------------------------------- input */

static int only(const cJSON *o, const char *const *keys, const char *where, char *err, size_t n) {
  for (const cJSON *c = o->child; c; c = c->next) {
    int ok = 0;
    for (size_t i = 0; keys[i]; i++) ok |= strcmp(keys[i], c->string) == 0;
    if (!ok) return snprintf(err, n, "%s: unknown field \"%.60s\"", where, c->string), -1;
  }
  return 0;
}

/* repository.remote: where `push` sends the branch; a URL carrying
 * credentials is refused (they would be in history: the worker's
 * GIT_TOKEN / GITHUB_TOKEN are used instead). */
static int check_remote(const cJSON *r, char *err, size_t n) {
  const cJSON *v = r ? cJSON_GetObjectItemCaseSensitive(r, "remote") : NULL;
  if (!v) return 0;
  if (!cJSON_IsString(v) || !v->valuestring[0] || v->valuestring[0] == '-')
    return snprintf(err, n, "repository.remote must be a URL or a repository path"), -1;
  const char *u = v->valuestring;
  const char *p = strncmp(u, "https://", 8) == 0 ? u + 8 : strncmp(u, "http://", 7) == 0 ? u + 7 : NULL;
  if (p && memchr(p, '@', strcspn(p, "/?#")))
    return snprintf(err, n, "repository.remote must not carry credentials (user:password@): the "
                            "worker's GIT_TOKEN or GITHUB_TOKEN are used for the push"), -1;
  return 0;
}

/* sandbox.checkpoint: {"every_steps": 1..10000, "on_completion": bool}, as
 * durabox.Script takes it. */
static int check_checkpoint(const cJSON *sb, char *err, size_t n) {
  const cJSON *p = sb ? cJSON_GetObjectItemCaseSensitive(sb, "checkpoint") : NULL;
  static const char *const keys[] = {"every_steps", "on_completion", NULL};
  if (!p) return 0;
  if (!cJSON_IsObject(p))
    return snprintf(err, n, "sandbox.checkpoint must be {\"every_steps\": N, \"on_completion\": "
                            "true|false}"), -1;
  if (only(p, keys, "sandbox.checkpoint", err, n)) return -1;
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(p, "every_steps");
  if (ev && (!cJSON_IsNumber(ev) || !(ev->valuedouble >= 1 && ev->valuedouble <= 10000) ||
             ev->valuedouble != (double)(int)ev->valuedouble))
    return snprintf(err, n, "sandbox.checkpoint.every_steps must be a whole number from 1 to 10000"), -1;
  const cJSON *oc = cJSON_GetObjectItemCaseSensitive(p, "on_completion");
  if (oc && !cJSON_IsBool(oc))
    return snprintf(err, n, "sandbox.checkpoint.on_completion must be true or false"), -1;
  return 0;
}

/* model.timeout_s and model.retry's numbers, in ranges that convert to
 * milliseconds and attempts without overflow. */
static int check_model_numbers(const cJSON *m, char *err, size_t n) {
  static const char *const rk[] = {"maximum_attempts", "initial_interval_s", "maximum_interval_s",
                                   "backoff_coefficient", NULL};
  static const double lo[] = {1, 0.001, 0.001, 1}, hi[] = {1000, 86400, 86400, 100};
  double t = num_or(m, "timeout_s", 300);
  if (!(t >= 1 && t <= 86400)) return snprintf(err, n, "model.timeout_s must be from 1 to 86400"), -1;
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "retry");
  if (!r) return 0;
  if (!cJSON_IsObject(r)) return snprintf(err, n, "model.retry must be an object"), -1;
  if (only(r, rk, "model.retry", err, n)) return -1;
  for (size_t i = 0; rk[i]; i++) {
    double v = num_or(r, rk[i], lo[i]);
    if (!(v >= lo[i] && v <= hi[i]))
      return snprintf(err, n, "model.retry.%s must be from %g to %g", rk[i], lo[i], hi[i]), -1;
  }
  return 0;
}

static int validate_tree(const cJSON *in, cJSON **policy_tree, char *err, size_t n) {
  static const char *const top[] = {"task", "sandbox", "repository", "model", "policy", "budget",
                                    "system_prompt", "tool_output_max_bytes", "session",
                                    "continue_as_new", "continued", NULL};
  static const char *const can[] = {"after_model_calls", "after_history_bytes", NULL};
  static const char *const model[] = {"name", "base_url", "max_tokens", "temperature",
                                      "timeout_s", "retry", NULL};
  static const char *const repo[] = {"github", "base", "branch", "api_url", "remote", NULL};
  static const char *const budget[] = {"max_steps", "max_tokens", NULL};
  *policy_tree = NULL;
  if (!cJSON_IsObject(in)) return snprintf(err, n, "input must be a JSON object"), -1;
  if (only(in, top, "input", err, n)) return -1;
  const char *task = str_of(in, "task");
  if (!task || !*task) return snprintf(err, n, "input: \"task\" (text) is required"), -1;
  static const char *const objs[] = {"sandbox", "repository", "model", "budget", "session",
                                     "continue_as_new", "continued"};
  for (size_t i = 0; i < 7; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, objs[i]);
    if (v && !cJSON_IsObject(v)) return snprintf(err, n, "input: \"%s\" must be an object", objs[i]), -1;
  }
  const cJSON *m = obj_of(in, "model"), *r = obj_of(in, "repository"), *b = obj_of(in, "budget");
  if (m && only(m, model, "model", err, n)) return -1;
  if (m && check_model_numbers(m, err, n) != 0) return -1;
  if (r && only(r, repo, "repository", err, n)) return -1;
  if (b && only(b, budget, "budget", err, n)) return -1;
  const cJSON *cn = obj_of(in, "continue_as_new");
  if (cn && only(cn, can, "continue_as_new", err, n)) return -1;
  if (cn && (num_or(cn, "after_model_calls", 1) < 1 || num_or(cn, "after_model_calls", 1) > 100000 ||
             num_or(cn, "after_history_bytes", 65536) < 65536 ||
             num_or(cn, "after_history_bytes", 65536) > 40e6))
    return snprintf(err, n, "continue_as_new: after_model_calls must be from 1 to 100000, "
                            "after_history_bytes from 65536 to 40000000"), -1;
  const cJSON *co = obj_of(in, "continued");
  if (co && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(co, "conversation")))
    return snprintf(err, n, "continued.conversation must be an array (the field is written by "
                            "the run that continued as new)"), -1;
  if (check_remote(r, err, n) != 0 || check_checkpoint(obj_of(in, "sandbox"), err, n) != 0)
    return -1;
  if (b && (num_or(b, "max_steps", 50) < 1 || num_or(b, "max_steps", 50) > 100000))
    return snprintf(err, n, "budget.max_steps must be a number from 1 to 100000"), -1;
  double cap = num_or(in, "tool_output_max_bytes", 16384);
  if (cap < 256 || cap > 1048576)
    return snprintf(err, n, "tool_output_max_bytes must be from 256 to 1048576"), -1;
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(in, "policy");
  if (cJSON_IsString(p)) {
    *policy_tree = dbx_policy_parse_text(p->valuestring, strlen(p->valuestring), err, n);
    if (!*policy_tree) return err[0] ? -1 : (snprintf(err, n, "policy: out of memory"), -1);
  } else if (p && !cJSON_IsNull(p)) {
    *policy_tree = cJSON_Duplicate(p, 1);
  }
  return 0;
}

static int check_input(const char *json, size_t len, cJSON **in, dbx_policy **pol, char *err,
                       size_t n) {
  *in = json ? cJSON_ParseWithLength(json, len) : NULL;
  *pol = NULL;
  if (!*in) return snprintf(err, n, "input is not valid JSON"), -1;
  cJSON *tree = NULL;
  if (validate_tree(*in, &tree, err, n) != 0) return -1;
  *pol = dbx_policy_compile(tree, err, n);
  cJSON_Delete(tree);
  if (!*pol && !err[0]) snprintf(err, n, "policy: out of memory");
  return *pol ? 0 : -1;
}

int dbx_agent_validate(const char *input_json, size_t len, char *err, size_t n) {
  cJSON *in = NULL;
  dbx_policy *p = NULL;
  int rc = check_input(input_json, len, &in, &p, err, n);
  cJSON_Delete(in);
  dbx_policy_free(p);
  return rc;
}

/* --------------------------------------------------------------- output */

static cJSON *pr_copy(const agent *s) { return s->pr ? cJSON_Duplicate(s->pr, 1) : cJSON_CreateNull(); }

static char *output_json(const agent *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status", s->status ? s->status : "running");
  if (s->answer) cJSON_AddStringToObject(o, "answer", s->answer);
  else cJSON_AddNullToObject(o, "answer");
  cJSON_AddItemToObject(o, "steps", cJSON_Duplicate(s->steps, 1));
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", s->ptok);
  cJSON_AddNumberToObject(u, "completion_tokens", s->ctok);
  cJSON_AddNumberToObject(u, "total_tokens", s->ptok + s->ctok);
  cJSON_AddNumberToObject(o, "model_calls", s->model_calls);
  cJSON_AddNumberToObject(o, "tool_calls", s->tool_calls);
  cJSON_AddItemToObject(o, "pull_request", pr_copy(s));
  if (s->sandbox_id) cJSON_AddStringToObject(o, "sandbox_id", s->sandbox_id);
  if (s->branch) cJSON_AddStringToObject(o, "branch", s->branch);
  if (s->checkpoints) cJSON_AddItemToObject(o, "checkpoints", cJSON_Duplicate(s->checkpoints, 1));
  cJSON *st = cJSON_AddObjectToObject(o, "session_state");
  cJSON_AddItemToObject(st, "conversation", cJSON_Duplicate(s->messages, 1));
  if (s->sandbox_id && s->keep) {
    cJSON *sb = cJSON_AddObjectToObject(st, "sandbox");
    cJSON_AddStringToObject(sb, "id", s->sandbox_id);
    if (s->owner_run) cJSON_AddStringToObject(sb, "owner_run_id", s->owner_run);
    if (s->driver) cJSON_AddStringToObject(sb, "driver", s->driver);
  } else {
    cJSON_AddNullToObject(st, "sandbox");
  }
  if (s->branch) cJSON_AddStringToObject(st, "branch", s->branch);
  cJSON_AddItemToObject(st, "pull_request", pr_copy(s));
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return txt;
}

static void complete(agent *s, dbx_wf *wf) {
  s->phase = DONE;
  if (s->fail_type) {
    dbx_wf_fail(wf, s->fail_type, s->fail_msg ? s->fail_msg : "");
    return;
  }
  char *out = output_json(s);
  if (out) dbx_wf_complete(wf, out);
  else dbx_wf_out_of_memory(wf);
  free(out);
}

static void safe_opts(dbx_activity_opts *o, int64_t s2c_ms, int attempts) {
  o->start_to_close_ms = s2c_ms;
  o->retry_class = DBX_SAFE_TO_RETRY;
  o->maximum_attempts = attempts;
  o->initial_interval_ms = 1000;
  o->backoff_coefficient = 2.0;
}

static int64_t sched(dbx_wf *wf, const char *type, cJSON *in, const dbx_activity_opts *o) {
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (!txt) {
    dbx_wf_out_of_memory(wf);
    return -1;
  }
  int64_t seq = dbx_wf_schedule_activity(wf, type, txt, o);
  free(txt);
  return seq;
}

static void schedule_checkpoint(agent *s, dbx_wf *wf, const char *reason, int then);

static void finish(agent *s, dbx_wf *wf, const char *status) {
  if (!s->status) s->status = dbx_strdup(status);
  if (s->ck_on_completion && s->ck_changes > 0 && s->sandbox_id) {
    schedule_checkpoint(s, wf, "completion", CK_THEN_FINISH);
    return;
  }
  if (s->keep || !s->sandbox_id) {
    complete(s, wf);
    return;
  }
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  if (s->owner_run) cJSON_AddStringToObject(in, "owner_run_id", s->owner_run);
  dbx_activity_opts o = {0};
  safe_opts(&o, 60000, 5);
  s->phase = DELETING;
  s->seq = sched(wf, "sandbox.delete", in, &o);
}

static void fail_run(agent *s, dbx_wf *wf, const char *type, const char *msg) {
  free(s->fail_type);
  free(s->fail_msg);
  s->fail_type = dbx_strdup(type && *type ? type : "AgentFailed");
  s->fail_msg = dbx_strdup(msg ? msg : "");
  finish(s, wf, "failed");
}

/* ---------------------------------------------------------------- steps */

static cJSON *add_step(agent *s, const char *kind, const char *target, const dbx_policy_verdict *v) {
  cJSON *st = cJSON_CreateObject();
  cJSON_AddNumberToObject(st, "n", ++s->nstep);
  cJSON_AddStringToObject(st, "kind", kind);
  cJSON_AddStringToObject(st, "target", target);
  cJSON_AddStringToObject(st, "decision", dbx_policy_decision_str(v->decision));
  cJSON_AddStringToObject(st, "rule", v->rule_id);
  cJSON_AddItemToArray(s->steps, st);
  return st;
}

static void step_result(agent *s, int ok, const char *summary) {
  cJSON *st = cJSON_GetArrayItem(s->steps, cJSON_GetArraySize(s->steps) - 1);
  if (!st) return;
  cJSON_DeleteItemFromObjectCaseSensitive(st, "ok");
  cJSON_DeleteItemFromObjectCaseSensitive(st, "summary");
  cJSON_AddBoolToObject(st, "ok", ok);
  char buf[240];
  snprintf(buf, sizeof buf, "%s", summary ? summary : "");
  size_t l = strlen(buf); /* cut on a character boundary */
  while (l > 0 && ((unsigned char)buf[l - 1] & 0xC0) == 0x80) l--;
  if (l > 0 && (unsigned char)buf[l - 1] >= 0xC0) l--;
  if (strlen(summary ? summary : "") >= sizeof buf - 1) buf[l] = '\0';
  for (char *p = buf; *p; p++)
    if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
  cJSON_AddStringToObject(st, "summary", buf);
}

static void policy_marker(agent *s, dbx_wf *wf, const char *kind, const char *target,
                          const dbx_policy_verdict *v) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddNumberToObject(m, "step", s->nstep);
  cJSON_AddStringToObject(m, "kind", kind);
  cJSON_AddStringToObject(m, "target", target);
  cJSON_AddStringToObject(m, "decision", dbx_policy_decision_str(v->decision));
  cJSON_AddStringToObject(m, "rule", v->rule_id);
  cJSON_AddStringToObject(m, "reason", v->reason);
  char *t = cJSON_PrintUnformatted(m);
  cJSON_Delete(m);
  if (t) (void)dbx_wf_marker_record(wf, "durabox.policy", t);
  free(t);
}

/* Keep the head and tail of text within cap bytes, the cut marked. malloc'd. */
static char *cap_text(const char *text, size_t cap) {
  size_t n = strlen(text);
  if (n <= cap) return dbx_strdup(text);
  size_t head = cap / 2, tail = cap - head;
  while (head > 0 && ((unsigned char)text[head] & 0xC0) == 0x80) head--;
  size_t from = n - tail;
  while (from < n && ((unsigned char)text[from] & 0xC0) == 0x80) from++;
  return dbx_asprintf("%.*s\n[\xe2\x80\xa6 %zu bytes cut: tool output given to the model is "
                      "capped at %zu bytes \xe2\x80\xa6]\n%s",
                      (int)head, text, from - head, cap, text + from);
}

static void tool_message(agent *s, const char *id, const char *text) {
  char *c = cap_text(text ? text : "", s->out_cap);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "tool");
  cJSON_AddStringToObject(m, "tool_call_id", id ? id : "");
  cJSON_AddStringToObject(m, "content", c ? c : "");
  cJSON_AddItemToArray(s->messages, m);
  free(c);
}

static void next_tool(agent *s, dbx_wf *wf);
static void chat(agent *s, dbx_wf *wf);

/* The model call itself (the policy already allowed it). */
static void schedule_chat(agent *s, dbx_wf *wf) {
  const cJSON *m = obj_of(s->input, "model");
  cJSON *in = cJSON_CreateObject();
  cJSON_AddItemToObject(in, "messages", cJSON_Duplicate(s->messages, 1));
  cJSON_AddItemToObject(in, "tools", cJSON_Parse(TOOLS_JSON));
  static const char *const pass[] = {"max_tokens", "temperature", "base_url"};
  for (size_t i = 0; i < 3; i++) {
    const cJSON *v = m ? cJSON_GetObjectItemCaseSensitive(m, pass[i]) : NULL;
    if (v) cJSON_AddItemToObject(in, pass[i], cJSON_Duplicate(v, 1));
  }
  if (s->model) cJSON_AddStringToObject(in, "model", s->model);
  const cJSON *r = obj_of(m, "retry");
  dbx_activity_opts o = {0};
  safe_opts(&o, (int64_t)(1000 * num_or(m, "timeout_s", 300)), (int32_t)num_or(r, "maximum_attempts", 6));
  o.initial_interval_ms = (int64_t)(1000 * num_or(r, "initial_interval_s", 2));
  o.backoff_coefficient = num_or(r, "backoff_coefficient", 2);
  o.maximum_interval_ms = (int64_t)(1000 * num_or(r, "maximum_interval_s", 60));
  if (o.maximum_interval_ms < o.initial_interval_ms) o.maximum_interval_ms = o.initial_interval_ms;
  o.heartbeat_ms = 20000; /* llm.chat beats while the model answers */
  s->phase = CHATTING;
  s->model_calls++;
  s->run_model_calls++;
  s->seq = sched(wf, "llm.chat", in, &o);
}

static void hold(agent *s, dbx_wf *wf, int llm, const char *target, const cJSON *args,
                 const dbx_policy_verdict *v);

/* ------------------------------------------------- continue-as-new
 * Every llm.chat input holds the whole conversation, so a run's history
 * grows with the square of its length. Before a model call, once this run
 * made continue_as_new.after_model_calls of them, or its history reached
 * after_history_bytes (default 4 MiB), or the service suggests it, the run
 * continues as new: the same input plus "continued" {conversation, steps,
 * counters, sandbox, branch, pull_request, checkpoints}, and the new run
 * re-opens the sandbox (sandbox.create's adopt) and goes on with the model
 * call. Nothing is asked twice: the conversation is carried, not replayed. */

static int should_continue(const agent *s, const dbx_wf *wf) {
  if (s->run_model_calls == 0) return 0;
  if (s->can_calls > 0 && s->run_model_calls >= s->can_calls) return 1;
  return dbx_wf_history_size_bytes(wf) >= (int64_t)s->can_bytes ||
         dbx_wf_continue_as_new_suggested(wf);
}

static void continue_run(agent *s, dbx_wf *wf) {
  cJSON *in = cJSON_Duplicate(s->input, 1);
  cJSON_DeleteItemFromObjectCaseSensitive(in, "continued");
  cJSON *c = cJSON_AddObjectToObject(in, "continued");
  cJSON_AddItemToObject(c, "conversation", cJSON_Duplicate(s->messages, 1));
  cJSON_AddItemToObject(c, "steps", cJSON_Duplicate(s->steps, 1));
  cJSON_AddNumberToObject(c, "nstep", s->nstep);
  cJSON_AddNumberToObject(c, "model_calls", s->model_calls);
  cJSON_AddNumberToObject(c, "tool_calls", s->tool_calls);
  cJSON_AddNumberToObject(c, "prompt_tokens", s->ptok);
  cJSON_AddNumberToObject(c, "completion_tokens", s->ctok);
  cJSON_AddNumberToObject(c, "ck_total", s->ck_total);
  cJSON_AddNumberToObject(c, "ck_changes", s->ck_changes);
  cJSON_AddNumberToObject(c, "runs", num_or(obj_of(s->input, "continued"), "runs", 1) + 1);
  if (s->checkpoints) cJSON_AddItemToObject(c, "checkpoints", cJSON_Duplicate(s->checkpoints, 1));
  cJSON *sb = cJSON_AddObjectToObject(c, "sandbox");
  cJSON_AddStringToObject(sb, "id", s->sandbox_id ? s->sandbox_id : "");
  if (s->owner_run) cJSON_AddStringToObject(sb, "owner_run_id", s->owner_run);
  if (s->driver) cJSON_AddStringToObject(sb, "driver", s->driver);
  if (s->branch) cJSON_AddStringToObject(c, "branch", s->branch);
  cJSON_AddItemToObject(c, "pull_request", pr_copy(s));
  char *txt = cJSON_PrintUnformatted(in);
  cJSON_Delete(in);
  if (!txt) {
    dbx_wf_out_of_memory(wf);
    return;
  }
  s->phase = DONE;
  dbx_wf_continue_as_new(wf, txt, NULL);
  free(txt);
}

static void chat(agent *s, dbx_wf *wf) {
  if (s->nstep >= s->max_steps || (s->max_tokens > 0 && s->ptok + s->ctok >= s->max_tokens)) {
    finish(s, wf, "budget_exhausted");
    return;
  }
  if (should_continue(s, wf)) {
    continue_run(s, wf);
    return;
  }
  const char *target = s->model ? s->model : "default";
  dbx_policy_verdict v;
  dbx_policy_eval(s->policy, "llm_call", target, NULL, &v);
  add_step(s, "llm_call", target, &v);
  policy_marker(s, wf, "llm_call", target, &v);
  if (v.decision == DBX_POLICY_DENY) {
    step_result(s, 0, v.reason);
    if (!s->answer) s->answer = dbx_asprintf("model call not allowed. reason: %s", v.reason);
    finish(s, wf, "denied");
  } else if (v.decision == DBX_POLICY_APPROVAL) {
    hold(s, wf, 1, target, NULL, &v);
  } else {
    schedule_chat(s, wf);
  }
}

static const cJSON *cur_call(const agent *s) { return cJSON_GetArrayItem(s->calls, s->ci); }

/* Where `push` sends the branch: repository.remote, else the git source's
 * url or path (the input's, never a remote the sandbox's config names). */
static const char *push_remote(const agent *s) {
  const char *r = str_of(obj_of(s->input, "repository"), "remote");
  const cJSON *src = obj_of(obj_of(s->input, "sandbox"), "source");
  if (r && *r) return r;
  if (!str_of(src, "kind") || strcmp(str_of(src, "kind"), "git") != 0) return NULL;
  r = str_of(src, "url") ? str_of(src, "url") : str_of(src, "path");
  return r && *r ? r : NULL;
}

/* Schedule the tool for call ci with args; 0, or -1 when it was answered
 * at once (unknown tool, bad arguments: the model gets the error). */
static int run_tool(agent *s, dbx_wf *wf, const cJSON *args) {
  const cJSON *c = cur_call(s);
  const char *name = str_of(c, "name"), *id = str_of(c, "id");
  cJSON *in = cJSON_CreateObject();
  dbx_activity_opts o = {0};
  const char *type = NULL, *missing = NULL;
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id ? s->sandbox_id : "");
  if (strcmp(name, "shell") == 0) {
    const char *cmd = str_of(args, "command");
    double to = num_or(args, "timeout_s", 300);
    if (to < 1 || to > 3600) to = 300;
    if (!cmd) missing = "command";
    cJSON_AddStringToObject(in, "command", cmd ? cmd : "");
    cJSON_AddNumberToObject(in, "timeout_s", to);
    safe_opts(&o, (int64_t)(to + 60) * 1000, 3);
    o.heartbeat_ms = 30000;
    type = "sandbox.exec";
  } else if (strcmp(name, "read_file") == 0 || strcmp(name, "write_file") == 0) {
    const char *path = str_of(args, "path"), *content = str_of(args, "content");
    int w = name[0] == 'w';
    if (!path) missing = "path";
    else if (w && !content) missing = "content";
    cJSON_AddStringToObject(in, "path", path ? path : "");
    if (w) cJSON_AddStringToObject(in, "content", content ? content : "");
    safe_opts(&o, 30000, 3);
    type = w ? "sandbox.write_file" : "sandbox.read_file";
  } else if (strcmp(name, "push") == 0) {
    const char *remote = push_remote(s);
    if (!remote) missing = "a remote (repository.remote, or a git source with a url or path, in the workflow input)";
    cJSON_AddStringToObject(in, "remote", remote ? remote : "");
    cJSON_AddStringToObject(in, "branch", s->branch ? s->branch : "");
    safe_opts(&o, 300000, 3);
    type = "git.push";
  } else if (strcmp(name, "open_pr") == 0) {
    const cJSON *repo = obj_of(s->input, "repository");
    const char *title = str_of(args, "title"), *gh = str_of(repo, "github");
    if (!gh) missing = "repository.github (the workflow input names no GitHub repository)";
    else if (!title) missing = "title";
    cJSON_Delete(in);
    in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "repo", gh ? gh : "");
    cJSON_AddStringToObject(in, "head", s->branch ? s->branch : "");
    cJSON_AddStringToObject(in, "base", str_of(repo, "base") ? str_of(repo, "base") : "main");
    cJSON_AddStringToObject(in, "title", title ? title : "");
    if (str_of(args, "body")) cJSON_AddStringToObject(in, "body", str_of(args, "body"));
    if (str_of(repo, "api_url")) cJSON_AddStringToObject(in, "api_url", str_of(repo, "api_url"));
    /* a second call after an unknown outcome differs from the first (the
     * worker refuses a repeat of an identical at_most_once call) */
    if (s->pr_retry) cJSON_AddTrueToObject(in, "after_unknown_outcome");
    o.start_to_close_ms = 45000; /* the call itself gives up after 30 s */
    o.retry_class = DBX_AT_MOST_ONCE;
    o.maximum_attempts = 1;
    type = "github.open_pr";
  }
  if (!type || missing) {
    cJSON_Delete(in);
    char *e = !type ? dbx_asprintf("error: unknown tool \"%s\" (shell, read_file, write_file, push, open_pr)", name)
                    : dbx_asprintf("error: %s needs \"%s\"", name, missing);
    tool_message(s, id, e);
    step_result(s, 0, e);
    free(e);
    return -1;
  }
  s->phase = TOOLING;
  s->tool_calls++;
  s->seq = sched(wf, type, in, &o);
  return 0;
}

static void refuse(agent *s, const char *name, const char *reason, const char *by) {
  char *t = dbx_asprintf("`%s` not allowed. reason: %s%s%s", name, reason && *reason ? reason : "denied by policy",
                         by ? " (decided by " : "", by ? by : "");
  char *t2 = by ? dbx_asprintf("%s)", t ? t : "") : NULL;
  tool_message(s, str_of(cur_call(s), "id"), t2 ? t2 : t);
  step_result(s, 0, t2 ? t2 : t);
  free(t);
  free(t2);
}

static void next_tool(agent *s, dbx_wf *wf) {
  for (; s->ci < s->ncalls; s->ci++) {
    const cJSON *c = cur_call(s);
    const char *name = str_of(c, "name"), *argtxt = str_of(c, "arguments");
    cJSON *args = argtxt ? cJSON_Parse(argtxt) : NULL;
    dbx_policy_verdict v;
    if (s->nstep >= s->max_steps) {
      dbx_policy_eval(s->policy, "tool_call", name, args, &v);
      tool_message(s, str_of(c, "id"), "not run: the step budget is spent");
      cJSON_Delete(args);
      continue;
    }
    if (!cJSON_IsObject(args)) {
      dbx_policy_verdict none = {DBX_POLICY_DENY, "bad_arguments", "", 0};
      add_step(s, "tool_call", name, &none);
      tool_message(s, str_of(c, "id"), "error: the arguments are not a JSON object");
      step_result(s, 0, "the arguments are not a JSON object");
      cJSON_Delete(args);
      continue;
    }
    dbx_policy_eval(s->policy, "tool_call", name, args, &v);
    cJSON *st = add_step(s, "tool_call", name, &v);
    cJSON_AddItemToObject(st, "arguments", cJSON_Duplicate(args, 1));
    policy_marker(s, wf, "tool_call", name, &v);
    if (v.decision == DBX_POLICY_DENY) {
      refuse(s, name, v.reason, NULL);
    } else if (v.decision == DBX_POLICY_APPROVAL) {
      hold(s, wf, 0, name, args, &v);
      cJSON_Delete(args);
      return;
    } else if (run_tool(s, wf, args) == 0) {
      cJSON_Delete(args);
      return;
    }
    cJSON_Delete(args);
  }
  cJSON_Delete(s->calls);
  s->calls = NULL;
  s->ncalls = s->ci = 0;
  if (s->nstep >= s->max_steps) {
    finish(s, wf, "budget_exhausted");
    return;
  }
  chat(s, wf);
}

/* --------------------------------------------------------- approvals */

static void memo_approval(agent *s, dbx_wf *wf, int open) {
  const char *key = "durabox.approval";
  char *txt = NULL;
  if (open) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "step", s->held_step);
    cJSON_AddStringToObject(m, "kind", s->held_kind_llm ? "llm_call" : "tool_call");
    cJSON_AddStringToObject(m, "target", s->held_target);
    cJSON_AddItemToObject(m, "arguments", s->held_args ? cJSON_Duplicate(s->held_args, 1) : cJSON_CreateNull());
    cJSON_AddStringToObject(m, "rule", s->held_rule);
    cJSON_AddStringToObject(m, "reason", s->held_reason);
    cJSON_AddItemToObject(m, "approvers", s->approvers ? cJSON_Duplicate(s->approvers, 1) : cJSON_CreateNull());
    cJSON_AddNumberToObject(m, "timeout_s", (double)s->timeout_ms / 1000.0);
    cJSON_AddNumberToObject(m, "deadline_ms", (double)s->deadline_ms);
    txt = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
  }
  const char *val = txt ? txt : "null";
  (void)dbx_wf_upsert_memo(wf, &key, &val, 1);
  if (open) (void)dbx_wf_marker_record(wf, "durabox.approval_requested", val);
  free(txt);
}

static void hold(agent *s, dbx_wf *wf, int llm, const char *target, const cJSON *args,
                 const dbx_policy_verdict *v) {
  s->phase = HOLDING;
  s->held_kind_llm = llm;
  s->held_step = s->nstep;
  s->decided = UNDECIDED;
  cJSON_Delete(s->held_args);
  s->held_args = args ? cJSON_Duplicate(args, 1) : NULL;
  free(s->held_target), free(s->held_rule), free(s->held_reason), free(s->by), free(s->why);
  s->by = s->why = NULL;
  s->held_target = dbx_strdup(target);
  s->held_rule = dbx_strdup(v->rule_id);
  s->held_reason = dbx_strdup(v->reason);
  s->timeout_ms = v->approval_timeout_ms;
  cJSON_Delete(s->approvers);
  s->approvers = v->approvers ? cJSON_Duplicate(v->approvers, 1) : NULL;
  s->deadline_ms = dbx_wf_now_ms(wf) + v->approval_timeout_ms;
  s->stop_pending = 0;
  if (s->sandbox_id) { /* nothing runs in the sandbox while a person decides */
    cJSON *in = cJSON_CreateObject();
    cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
    dbx_activity_opts o = {0};
    safe_opts(&o, 30000, 5);
    s->stop_pending = 1;
    s->stop_seq = sched(wf, "sandbox.stop", in, &o);
  }
  memo_approval(s, wf, 1);
  s->wait_seq = dbx_wf_await_signal(wf, "durabox.approval", s->timeout_ms);
}

static void resume(agent *s, dbx_wf *wf) {
  if (!s->sandbox_id) {
    s->phase = RESUMING;
    s->seq = 0;
    return;
  }
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  dbx_activity_opts o = {0};
  safe_opts(&o, 30000, 5);
  s->phase = RESUMING;
  s->seq = sched(wf, "sandbox.start", in, &o);
}

static void after_resume(agent *s, dbx_wf *wf) {
  cJSON *st = cJSON_GetArrayItem(s->steps, s->held_step - 1);
  cJSON *ap = cJSON_CreateObject();
  cJSON_AddStringToObject(ap, "decision", s->decided == GRANTED ? "granted" : "denied");
  cJSON_AddStringToObject(ap, "by", s->by ? s->by : "");
  cJSON_AddStringToObject(ap, "reason", s->why ? s->why : "");
  if (st) cJSON_AddItemToObject(st, "approval", ap);
  else cJSON_Delete(ap);
  if (s->held_kind_llm) {
    if (s->decided == GRANTED) {
      schedule_chat(s, wf);
    } else {
      step_result(s, 0, s->why);
      s->answer = dbx_asprintf("model call not allowed. reason: %s", s->why ? s->why : "denied");
      finish(s, wf, "denied");
    }
    return;
  }
  if (s->decided == GRANTED) {
    if (run_tool(s, wf, s->held_args) == 0) return;
  } else {
    refuse(s, s->held_target, s->why, s->by);
  }
  s->ci++;
  next_tool(s, wf);
}

static void decide(agent *s, dbx_wf *wf, int d, const char *by, const char *why) {
  s->decided = d;
  s->by = dbx_strdup(by ? by : "");
  s->why = dbx_strdup(why && *why ? why : d == GRANTED ? "approved" : "approval denied");
  memo_approval(s, wf, 0);
  cJSON *m = cJSON_CreateObject();
  cJSON_AddNumberToObject(m, "step", s->held_step);
  cJSON_AddStringToObject(m, "decision", d == GRANTED ? "granted" : "denied");
  cJSON_AddStringToObject(m, "by", s->by ? s->by : "");
  cJSON_AddStringToObject(m, "reason", s->why ? s->why : "");
  char *t = cJSON_PrintUnformatted(m);
  cJSON_Delete(m);
  if (t) (void)dbx_wf_marker_record(wf, "durabox.approval_decided", t);
  free(t);
  if (!s->stop_pending) resume(s, wf);
}

static void agent_on_signal(void *state, dbx_wf *wf, const char *name, const char *json, size_t len) {
  agent *s = state;
  if (strcmp(name, "durabox.approval") != 0 || s->phase != HOLDING || s->decided) return;
  cJSON *j = cJSON_ParseWithLength(json, len);
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
  const char *d = str_of(j, "decision");
  int dec = !d ? 0
            : !strcmp(d, "grant") || !strcmp(d, "granted") || !strcmp(d, "approve") ? GRANTED
            : !strcmp(d, "deny") || !strcmp(d, "denied") || !strcmp(d, "reject")   ? DENIED
                                                                                    : 0;
  const char *by = str_of(j, "by");
  int may = s->approvers == NULL; /* a name the rule lists, when it lists any */
  for (const cJSON *a = s->approvers ? s->approvers->child : NULL; a && by; a = a->next)
    may |= cJSON_IsString(a) && strcmp(a->valuestring, by) == 0;
  if (dec && may && (!step || (cJSON_IsNumber(step) && step->valuedouble == (double)s->held_step)))
    decide(s, wf, dec, by, str_of(j, "reason"));
  cJSON_Delete(j);
}

static void agent_on_signal_wait(void *state, dbx_wf *wf, int64_t seq, const char *json,
                                 size_t len, int timed_out) {
  agent *s = state;
  (void)json;
  (void)len;
  if (seq != s->wait_seq || s->phase != HOLDING || s->decided) return;
  int64_t left = s->deadline_ms - dbx_wf_now_ms(wf);
  if (timed_out || left <= 0) {
    char why[96];
    snprintf(why, sizeof why, "approval timed out after %lld s", (long long)(s->timeout_ms / 1000));
    decide(s, wf, DENIED, "timeout", why);
    return;
  }
  /* a signal for another step ended the wait: wait on for the rest */
  s->wait_seq = dbx_wf_await_signal(wf, "durabox.approval", left);
}

/* ------------------------------------------------------------ outcomes */

static char *failure_text(const dbx_act_outcome *o) {
  if (o->status == DBX_ACT_TIMED_OUT) return dbx_asprintf("error: the step timed out");
  if (o->status == DBX_ACT_CANCELED) return dbx_asprintf("error: the step was cancelled");
  return dbx_asprintf("error: %s%s%s", o->failure_type ? o->failure_type : "",
                      o->failure_type && *o->failure_type ? ": " : "",
                      o->failure_message ? o->failure_message : "");
}

/* What the model reads for a completed tool. */
static char *tool_text(agent *s, const char *name, const cJSON *r, int *ok) {
  *ok = 1;
  if (strcmp(name, "shell") == 0) {
    const char *out = str_of(r, "stdout"), *err = str_of(r, "stderr");
    int code = (int)num_or(r, "exit_code", -1);
    *ok = code == 0;
    int to = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "timed_out"));
    return dbx_asprintf("exit code %d%s\n%s%s%s%s", code, to ? " (timed out)" : "",
                        out ? out : str_of(r, "stdout_b64") ? "(binary output)" : "",
                        err && *err ? "\n[stderr]\n" : "", err ? err : "",
                        !err && str_of(r, "stderr_b64") ? "\n[stderr: binary output]" : "");
  }
  if (strcmp(name, "read_file") == 0) {
    const char *c = str_of(r, "content");
    if (c) return dbx_strdup(c);
    return dbx_asprintf("(a binary file of %.0f bytes)", num_or(r, "bytes", 0));
  }
  if (strcmp(name, "write_file") == 0) return dbx_asprintf("wrote %.0f bytes", num_or(r, "bytes", 0));
  if (strcmp(name, "push") == 0)
    return dbx_asprintf("pushed %s to %s%s%s", str_of(r, "branch") ? str_of(r, "branch") : "the branch",
                        str_of(r, "remote") ? str_of(r, "remote") : "the remote",
                        str_of(r, "credentials") ? " with the worker's " : "",
                        str_of(r, "credentials") ? str_of(r, "credentials") : "");
  /* open_pr */
  cJSON_Delete(s->pr);
  s->pr = cJSON_CreateObject();
  cJSON_AddNumberToObject(s->pr, "number", num_or(r, "number", 0));
  cJSON_AddStringToObject(s->pr, "url", str_of(r, "url") ? str_of(r, "url") : "");
  return dbx_asprintf("pull request #%.0f %s: %s", num_or(r, "number", 0),
                      cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "created")) ? "was already open (updated by the push)" : "opened",
                      str_of(r, "url") ? str_of(r, "url") : "");
}

/* open_pr's only attempt started and its outcome is unknown (the worker
 * died during the call): look the pull request up before telling the model. */
static int open_pr_unknown(const char *name, const dbx_act_outcome *o) {
  if (strcmp(name, "open_pr") != 0) return 0;
  if (o->status == DBX_ACT_TIMED_OUT) return o->attempts > 0;
  return o->status == DBX_ACT_FAILED && o->failure_type && strcmp(o->failure_type, "OutcomeUnknown") == 0;
}

static void check_pr(agent *s, dbx_wf *wf) {
  const cJSON *repo = obj_of(s->input, "repository");
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "repo", str_of(repo, "github") ? str_of(repo, "github") : "");
  cJSON_AddStringToObject(in, "head", s->branch ? s->branch : "");
  if (str_of(repo, "api_url")) cJSON_AddStringToObject(in, "api_url", str_of(repo, "api_url"));
  dbx_activity_opts o = {0};
  safe_opts(&o, 60000, 5);
  s->phase = CHECKING_PR;
  s->seq = sched(wf, "github.find_pr", in, &o);
}

static void checked_pr(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  const cJSON *c = cur_call(s);
  cJSON *r = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  char *text = NULL;
  int ok = 0;
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "found"))) {
    text = tool_text(s, "open_pr", r, &ok);
  } else if (o->status == DBX_ACT_COMPLETED && !s->pr_retry) {
    /* GitHub has none: the call never reached it, so it is made once more
     * (GitHub itself refuses a second open pull request of one head) */
    cJSON *args = cJSON_Parse(str_of(c, "arguments") ? str_of(c, "arguments") : "{}");
    cJSON_Delete(r);
    s->pr_retry = 1;
    s->tool_calls--; /* the same tool call, made again */
    int rc = run_tool(s, wf, args);
    cJSON_Delete(args);
    if (rc == 0) return;
    s->pr_retry = 0;
    s->phase = TOOLING;
    s->ci++;
    next_tool(s, wf);
    return;
  } else {
    text = dbx_asprintf("error: the outcome of open_pr is unknown (the worker stopped during the "
                        "call) and no open pull request of %s was found; it was not opened",
                        s->branch ? s->branch : "the branch");
  }
  cJSON_Delete(r);
  s->phase = TOOLING;
  s->pr_retry = 0;
  tool_message(s, str_of(c, "id"), text ? text : "");
  step_result(s, ok, text);
  free(text);
  s->ci++;
  next_tool(s, wf);
}

/* ------------------------------------------------------- checkpoints
 * As durabox.Script takes them (docs/worker.md "Checkpoints and forks"):
 * the activity durabox.checkpoint {"sandbox_id", "name", "covered_event_id",
 * "reason"}, named by the run and the covered event (the WorkflowTaskStarted
 * of the task that schedules it), so a retry names the same snapshot. A
 * baseline once the sandbox is open, one after every Nth tool call that
 * changes the workspace (shell, write_file; failed ones count; read_file,
 * push, open_pr and model calls do not), one at the end when something
 * changed since the last. A failed checkpoint is recorded as failed and the
 * run goes on. Nothing runs while one is taken. */

static void schedule_checkpoint(agent *s, dbx_wf *wf, const char *reason, int then) {
  const char *r = dbx_wf_run_id(wf);
  char run[96];
  size_t k = 0;
  for (; r && *r && k < 80; r++) /* a name of [A-Za-z0-9._-] */
    run[k++] = (*r >= 'a' && *r <= 'z') || (*r >= 'A' && *r <= 'Z') || (*r >= '0' && *r <= '9') ||
                       *r == '-' || *r == '_' ? *r : '_';
  run[k] = '\0';
  s->ck_at = dbx_wf_history_length(wf);
  snprintf(s->ck_name, sizeof s->ck_name, "ck-%s-e%lld", run, (long long)s->ck_at);
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  cJSON_AddStringToObject(in, "name", s->ck_name);
  cJSON_AddNumberToObject(in, "covered_event_id", (double)s->ck_at);
  cJSON_AddStringToObject(in, "reason", reason);
  /* a Daytona snapshot may take minutes; a failed one is tried 3 times */
  dbx_activity_opts o = {0};
  safe_opts(&o, 900000, 3);
  s->ck_reason = reason;
  s->ck_then = then;
  s->ck_changes = 0;
  s->phase = CHECKPOINTING;
  s->seq = sched(wf, "durabox.checkpoint", in, &o);
}

static void checkpoint_done(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  if (!s->checkpoints) s->checkpoints = cJSON_CreateArray();
  cJSON *res = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  const char *ref = str_of(res, "ref");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "name", s->ck_name);
  cJSON_AddStringToObject(c, "reason", s->ck_reason ? s->ck_reason : "");
  cJSON_AddNumberToObject(c, "covered_event_id", (double)s->ck_at);
  cJSON_AddNumberToObject(c, "after_step", s->nstep);
  cJSON_AddBoolToObject(c, "ok", ref != NULL);
  if (ref) {
    cJSON_AddStringToObject(c, "ref", ref);
  } else {
    char *e = failure_text(o);
    cJSON_AddStringToObject(c, "error", e ? e : "failed");
    free(e);
  }
  cJSON_AddItemToArray(s->checkpoints, c);
  cJSON_Delete(res);
  switch (s->ck_then) {
  case CK_THEN_CHAT: chat(s, wf); return;
  case CK_THEN_NEXT_TOOL:
    s->phase = TOOLING;
    s->ci++;
    next_tool(s, wf);
    return;
  default: finish(s, wf, s->status ? s->status : "completed"); return;
  }
}

/* A workspace-changing tool call ended (completed or failed): 1 when it
 * made an every_steps checkpoint due (scheduled; the next tool follows it). */
static int count_change(agent *s, dbx_wf *wf, const char *name) {
  if (!s->ck_on || !name || (strcmp(name, "shell") != 0 && strcmp(name, "write_file") != 0))
    return 0;
  s->ck_changes++;
  if (s->ck_every > 0 && ++s->ck_total % s->ck_every == 0 && s->sandbox_id) {
    schedule_checkpoint(s, wf, "every_steps", CK_THEN_NEXT_TOOL);
    return 1;
  }
  return 0;
}

static void tool_done(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  const cJSON *c = cur_call(s);
  const char *name = str_of(c, "name");
  char *text = NULL;
  int ok = 0;
  if (open_pr_unknown(name, o)) {
    check_pr(s, wf);
    return;
  }
  s->pr_retry = 0;
  if (o->status == DBX_ACT_COMPLETED) {
    cJSON *r = cJSON_Parse(o->result_json);
    text = tool_text(s, name, r, &ok);
    cJSON_Delete(r);
  } else {
    text = failure_text(o);
  }
  tool_message(s, str_of(c, "id"), text ? text : "");
  step_result(s, ok, text);
  free(text);
  if (count_change(s, wf, name)) return;
  s->ci++;
  next_tool(s, wf);
}

/* The sandbox is open (and on its branch): the baseline checkpoint when the
 * policy asks for them, then the first model call. */
static void ready(agent *s, dbx_wf *wf) {
  if (s->ck_on && s->sandbox_id && !s->continued) {
    schedule_checkpoint(s, wf, "baseline", CK_THEN_CHAT);
    return;
  }
  chat(s, wf);
}

static void chat_done(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  if (o->status != DBX_ACT_COMPLETED) {
    char *t = failure_text(o);
    step_result(s, 0, t);
    free(t);
    fail_run(s, wf, o->status == DBX_ACT_FAILED ? o->failure_type : "LlmCallFailed",
             o->failure_message && *o->failure_message ? o->failure_message
             : o->status == DBX_ACT_TIMED_OUT ? "llm.chat timed out" : "llm.chat did not complete");
    return;
  }
  cJSON *r = cJSON_Parse(o->result_json);
  const cJSON *u = obj_of(r, "usage");
  s->ptok += num_or(u, "prompt_tokens", 0);
  s->ctok += num_or(u, "completion_tokens", 0);
  const char *content = str_of(r, "content");
  cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(r, "tool_calls");
  int n = cJSON_IsArray(calls) ? cJSON_GetArraySize(calls) : 0;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "role", "assistant");
  if (content) cJSON_AddStringToObject(m, "content", content);
  else cJSON_AddNullToObject(m, "content");
  if (n > 0) {
    cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
    for (const cJSON *c = calls->child; c; c = c->next) {
      cJSON *x = cJSON_CreateObject();
      cJSON_AddStringToObject(x, "id", str_of(c, "id") ? str_of(c, "id") : "");
      cJSON_AddStringToObject(x, "type", "function");
      cJSON *f = cJSON_AddObjectToObject(x, "function");
      cJSON_AddStringToObject(f, "name", str_of(c, "name") ? str_of(c, "name") : "");
      cJSON_AddStringToObject(f, "arguments", str_of(c, "arguments") ? str_of(c, "arguments") : "{}");
      cJSON_AddItemToArray(tc, x);
    }
  }
  cJSON_AddItemToArray(s->messages, m);
  char sum[160];
  snprintf(sum, sizeof sum, "%d tool call%s, %.0f+%.0f tokens", n, n == 1 ? "" : "s",
           num_or(u, "prompt_tokens", 0), num_or(u, "completion_tokens", 0));
  step_result(s, 1, n ? sum : content ? content : "answered");
  if (n == 0) {
    cJSON_Delete(calls);
    free(s->answer);
    s->answer = dbx_strdup(content ? content : "");
    cJSON_Delete(r);
    finish(s, wf, "completed");
    return;
  }
  cJSON_Delete(r);
  cJSON_Delete(s->calls);
  s->calls = calls;
  s->ncalls = n;
  s->ci = 0;
  next_tool(s, wf);
}

/* The branch name: repository.branch, else durabox/<workflow id> with
 * anything but [A-Za-z0-9._/-] as '-'. */
static char *branch_name(const cJSON *in, const char *wfid) {
  const char *b = str_of(obj_of(in, "repository"), "branch");
  char *n = b && *b ? dbx_strdup(b) : dbx_asprintf("durabox/%s", wfid);
  for (char *p = n; p && *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '.' || *p == '_' || *p == '/' || *p == '-'))
      *p = '-';
  return n;
}

static void opened(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  if (o->status != DBX_ACT_COMPLETED) {
    s->keep = 1; /* nothing of ours to delete */
    char *t = failure_text(o);
    fail_run(s, wf, "SandboxCreateFailed", t);
    free(t);
    return;
  }
  cJSON *r = cJSON_Parse(o->result_json);
  const char *id = str_of(r, "sandbox_id"), *drv = str_of(r, "driver");
  if (id && *id) free(s->sandbox_id), s->sandbox_id = dbx_strdup(id);
  if (!s->sandbox_id) s->sandbox_id = dbx_strdup("");
  if (drv && *drv) free(s->driver), s->driver = dbx_strdup(drv);
  cJSON_Delete(r);
  if (!s->adopted) {
    const cJSON *src = obj_of(obj_of(s->input, "sandbox"), "source");
    if (str_of(src, "kind") && strcmp(str_of(src, "kind"), "git") == 0) {
      /* a branch of this sandbox's own; a later turn keeps it */
      /* and an author for the model's commits, unless the repository has one */
      char *cmd = dbx_asprintf("git checkout -q -B '%s' && { git config user.name >/dev/null || "
                               "git config user.name 'durabox agent'; } && { git config "
                               "user.email >/dev/null || git config user.email "
                               "agent@durabox.invalid; }", s->branch);
      cJSON *in = cJSON_CreateObject();
      cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
      cJSON_AddStringToObject(in, "command", cmd ? cmd : "true");
      free(cmd);
      dbx_activity_opts op = {0};
      safe_opts(&op, 120000, 3);
      op.heartbeat_ms = 30000;
      s->phase = BRANCHING;
      s->seq = sched(wf, "sandbox.exec", in, &op);
      return;
    }
  }
  ready(s, wf);
}

static void cancel_opened(agent *s, dbx_wf *wf, const dbx_act_outcome *o);

static void agent_on_activity(void *state, dbx_wf *wf, int64_t seq, const dbx_act_outcome *o) {
  agent *s = state;
  if (s->phase == CANCEL_OPEN || s->phase == CANCELLING) { /* only the cleanup's outcome matters */
    if (seq != s->seq) return;
    if (s->phase == CANCEL_OPEN) {
      cancel_opened(s, wf, o);
      return;
    }
    s->phase = DONE;
    dbx_wf_cancel_done(wf);
    return;
  }
  if (s->phase == HOLDING && seq == s->stop_seq) {
    s->stop_pending = 0;
    if (s->decided) resume(s, wf);
    return;
  }
  if (seq != s->seq) return;
  switch (s->phase) {
  case OPENING: opened(s, wf, o); return;
  case BRANCHING: ready(s, wf); return; /* without a branch, pushes fail visibly later */
  case CHECKPOINTING: checkpoint_done(s, wf, o); return;
  case CHATTING: chat_done(s, wf, o); return;
  case TOOLING: tool_done(s, wf, o); return;
  case CHECKING_PR: checked_pr(s, wf, o); return;
  case RESUMING: after_resume(s, wf); return;
  case DELETING: complete(s, wf); return;
  default: return;
  }
}

/* ------------------------------------------------------------- cancel
 * As durabox.Script does: the running step is asked to stop (an exec kills
 * its command), a create still running is waited for, then the sandbox is
 * deleted, or, when it is kept (a session's, sandbox.keep), stopped, so
 * nothing of the run goes on running; then the run ends cancelled. */

static void cancel_cleanup(agent *s, dbx_wf *wf) {
  if (!s->sandbox_id || !*s->sandbox_id) {
    s->phase = DONE;
    dbx_wf_cancel_done(wf);
    return;
  }
  cJSON *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "sandbox_id", s->sandbox_id);
  if (!s->keep && s->owner_run) cJSON_AddStringToObject(in, "owner_run_id", s->owner_run);
  dbx_activity_opts o = {0};
  safe_opts(&o, 60000, 5);
  s->phase = CANCELLING;
  s->seq = sched(wf, s->keep ? "sandbox.stop" : "sandbox.delete", in, &o);
}

/* The outcome of the create that ran when the cancellation came. */
static void cancel_opened(agent *s, dbx_wf *wf, const dbx_act_outcome *o) {
  cJSON *r = o->status == DBX_ACT_COMPLETED ? cJSON_Parse(o->result_json) : NULL;
  const char *id = str_of(r, "sandbox_id");
  if (id && *id) {
    free(s->sandbox_id);
    s->sandbox_id = dbx_strdup(id);
  } else if (!s->adopted) { /* nothing was made */
    free(s->sandbox_id);
    s->sandbox_id = NULL;
  }
  cJSON_Delete(r);
  cancel_cleanup(s, wf);
}

static void agent_on_cancel(void *state, dbx_wf *wf) {
  agent *s = state;
  if (s->phase == DONE || s->phase == CANCEL_OPEN || s->phase == CANCELLING) return;
  if (s->phase == OPENING) { /* its outcome says whether there is a sandbox */
    (void)dbx_wf_cancel_activity(wf, s->seq);
    s->phase = CANCEL_OPEN;
    return;
  }
  if (s->phase == DELETING) { /* the delete in flight ends the run */
    s->phase = CANCELLING;
    return;
  }
  if (s->phase != HOLDING && s->seq > 0) (void)dbx_wf_cancel_activity(wf, s->seq);
  cancel_cleanup(s, wf);
}

/* ------------------------------------------------------------- create */

/* A whole number of o's k clamped to 0..10^9 (a hand-written "continued"
 * cannot make a cast overflow). */
static int count_of(const cJSON *o, const char *k) {
  double v = num_or(o, k, 0);
  return v >= 0 && v <= 1e9 ? (int)v : 0;
}

/* A continued run's counters, steps and checkpoints, from "continued". */
static void restore_continued(agent *s, const cJSON *c) {
  s->continued = 1;
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "steps");
  if (cJSON_IsArray(st)) {
    cJSON_Delete(s->steps);
    s->steps = cJSON_Duplicate(st, 1);
  }
  const cJSON *ck = cJSON_GetObjectItemCaseSensitive(c, "checkpoints");
  if (cJSON_IsArray(ck)) s->checkpoints = cJSON_Duplicate(ck, 1);
  s->nstep = count_of(c, "nstep");
  s->model_calls = count_of(c, "model_calls");
  s->tool_calls = count_of(c, "tool_calls");
  s->ptok = num_or(c, "prompt_tokens", 0);
  s->ctok = num_or(c, "completion_tokens", 0);
  s->ck_total = count_of(c, "ck_total");
  s->ck_changes = count_of(c, "ck_changes");
}

static int start_conversation(agent *s, const cJSON *state) {
  const cJSON *conv = state ? cJSON_GetObjectItemCaseSensitive(state, "conversation") : NULL;
  s->messages = cJSON_IsArray(conv) && cJSON_GetArraySize(conv) > 0 ? cJSON_Duplicate(conv, 1)
                                                                     : cJSON_CreateArray();
  if (!s->messages) return -1;
  if (s->continued && cJSON_GetArraySize(s->messages) > 0) return 0; /* goes on as it was */
  if (cJSON_GetArraySize(s->messages) == 0) {
    const char *sys = str_of(s->input, "system_prompt");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "system");
    cJSON_AddStringToObject(m, "content", sys ? sys : DEFAULT_SYSTEM);
    cJSON_AddItemToArray(s->messages, m);
  }
  cJSON *u = cJSON_CreateObject();
  cJSON_AddStringToObject(u, "role", "user");
  cJSON_AddStringToObject(u, "content", str_of(s->input, "task"));
  cJSON_AddItemToArray(s->messages, u);
  return 0;
}

static void *agent_create(dbx_wf *wf, const char *input_json, size_t len) {
  char err[512];
  cJSON *in = NULL;
  dbx_policy *pol = NULL;
  if (check_input(input_json, len, &in, &pol, err, sizeof err) != 0) {
    cJSON_Delete(in);
    dbx_wf_fail(wf, "InvalidInput", err);
    return NULL;
  }
  agent *s = calloc(1, sizeof *s);
  if (!s || !(s->steps = cJSON_CreateArray())) {
    free(s);
    cJSON_Delete(in);
    dbx_policy_free(pol);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  s->input = in;
  s->policy = pol;
  const cJSON *budget = obj_of(in, "budget"), *sess = obj_of(in, "session");
  const cJSON *state = obj_of(sess, "state"), *cont = obj_of(in, "continued");
  if (cont) { /* a run continued as new: its predecessor's state */
    state = cont;
    restore_continued(s, cont);
  }
  s->max_steps = (int)num_or(budget, "max_steps", 50);
  s->max_tokens = num_or(budget, "max_tokens", 0);
  s->out_cap = (size_t)num_or(in, "tool_output_max_bytes", 16384);
  const cJSON *can = obj_of(in, "continue_as_new");
  s->can_calls = num_or(can, "after_model_calls", 0);
  s->can_bytes = num_or(can, "after_history_bytes", 4.0 * 1024 * 1024);
  const char *mn = str_of(obj_of(in, "model"), "name");
  s->model = mn && *mn ? dbx_strdup(mn) : NULL;
  const cJSON *sb = obj_of(in, "sandbox");
  s->keep = sess != NULL || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sb, "keep"));
  const char *sbr = str_of(state, "branch");
  s->branch = sbr && *sbr ? dbx_strdup(sbr) : branch_name(in, dbx_wf_workflow_id(wf));
  const cJSON *spr = obj_of(state, "pull_request");
  if (spr) s->pr = cJSON_Duplicate(spr, 1);
  if (start_conversation(s, state) != 0) {
    agent_free(s);
    dbx_wf_out_of_memory(wf);
    return NULL;
  }
  const cJSON *ssb = obj_of(state, "sandbox");
  const char *sid = str_of(ssb, "id");
  cJSON *ci = cJSON_CreateObject();
  dbx_activity_opts o = {0};
  s->phase = OPENING;
  const cJSON *ckp = obj_of(sb, "checkpoint");
  s->ck_on = ckp != NULL;
  s->ck_every = (int)num_or(ckp, "every_steps", 0);
  s->ck_on_completion = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ckp, "on_completion"));
  if (sid && *sid) { /* a later turn or a continued run: the same sandbox, re-opened (adopt) */
    s->adopted = 1;
    s->sandbox_id = dbx_strdup(sid);
    const char *own = str_of(ssb, "owner_run_id"), *drv = str_of(ssb, "driver");
    s->owner_run = dbx_strdup(own && *own ? own : dbx_wf_run_id(wf));
    cJSON_AddStringToObject(ci, "resource", "workspace");
    cJSON_AddStringToObject(ci, "owner_run_id", s->owner_run ? s->owner_run : "");
    if (s->keep) cJSON_AddTrueToObject(ci, "keep");
    if (sess) cJSON_AddTrueToObject(ci, "session");
    cJSON *ad = cJSON_AddObjectToObject(ci, "adopt");
    cJSON_AddStringToObject(ad, "sandbox_id", sid);
    if (drv && *drv) cJSON_AddStringToObject(ad, "driver", drv);
    safe_opts(&o, 120000, 5);
    s->seq = sched(wf, "sandbox.create", ci, &o);
    return s;
  }
  s->owner_run = dbx_strdup(dbx_wf_run_id(wf));
  cJSON_AddStringToObject(ci, "resource", "workspace");
  cJSON_AddStringToObject(ci, "owner_run_id", dbx_wf_run_id(wf));
  if (s->keep) cJSON_AddTrueToObject(ci, "keep");
  if (sess) cJSON_AddTrueToObject(ci, "session"); /* labelled: gc asks the session */
  const cJSON *src = obj_of(sb, "source");
  cJSON_AddItemToObject(ci, "source", src ? cJSON_Duplicate(src, 1) : cJSON_Parse("{\"kind\":\"empty\"}"));
  static const char *const pass[] = {"env", "network", "host_fs", "resources"};
  for (size_t i = 0; sb && i < 4; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sb, pass[i]);
    if (v) cJSON_AddItemToObject(ci, pass[i], cJSON_Duplicate(v, 1));
  }
  safe_opts(&o, 600000, 5);
  o.heartbeat_ms = 30000;
  s->seq = sched(wf, "sandbox.create", ci, &o);
  return s;
}

static char *agent_on_query(void *state, const char *name) {
  agent *s = state;
  if (strcmp(name, "progress") == 0) return output_json(s);
  if (strcmp(name, "approval") != 0) return NULL;
  if (s->phase != HOLDING || s->decided) return dbx_strdup("null");
  cJSON *m = cJSON_CreateObject();
  cJSON_AddNumberToObject(m, "step", s->held_step);
  cJSON_AddStringToObject(m, "target", s->held_target);
  cJSON_AddItemToObject(m, "arguments", s->held_args ? cJSON_Duplicate(s->held_args, 1) : cJSON_CreateNull());
  cJSON_AddStringToObject(m, "rule", s->held_rule);
  cJSON_AddStringToObject(m, "reason", s->held_reason);
  cJSON_AddNumberToObject(m, "deadline_ms", (double)s->deadline_ms);
  char *t = cJSON_PrintUnformatted(m);
  cJSON_Delete(m);
  return t;
}

static void agent_destroy(void *state) { agent_free(state); }

const dbx_workflow_type dbx_agent_workflow = {
    .name = "durabox.Agent",
    .create = agent_create,
    .on_activity = agent_on_activity,
    .on_signal = agent_on_signal,
    .on_cancel = agent_on_cancel,
    .on_query = agent_on_query,
    .destroy = agent_destroy,
    .on_signal_wait = agent_on_signal_wait,
};
