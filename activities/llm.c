/* activities/llm: llm.chat (see llm.h). */
#include "activities/llm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "activities/github.h"
#include "activities/http.h"
#include "base/util.h"

dbx_err dbx_worker_register_activity(struct dbx_worker *w, const dbx_activity_type *t);

__attribute__((format(printf, 4, 5))) static dbx_err fail(dbx_act_result *res, int non_retryable,
                                                          const char *type, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  res->failure_type = dbx_strdup(type);
  res->failure_message = dbx_http_redact(dbx_strdup(msg), getenv("LLM_API_KEY"), "LLM_API_KEY");
  res->non_retryable = non_retryable;
  if (!res->failure_type || !res->failure_message) {
    free(res->failure_type);
    free(res->failure_message);
    res->failure_type = res->failure_message = NULL;
    return DBX_ENOMEM;
  }
  return DBX_OK;
}

/* The reply's error.message (OpenAI's error shape), or its first bytes. */
static void reply_words(const dbx_http_reply *r, char *out, size_t cap) {
  cJSON *j = r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
  const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
  const cJSON *m = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "message") : e;
  if (cJSON_IsString(m)) snprintf(out, cap, "%.300s", m->valuestring);
  else snprintf(out, cap, "%.200s", r->body ? r->body : "");
  for (char *p = out; *p; p++)
    if ((unsigned char)*p < 0x20) *p = ' ';
  cJSON_Delete(j);
}

/* Build the result from a 2xx body; a failure naming the field otherwise. */
static dbx_err parse_reply(const dbx_http_reply *r, dbx_act_result *res) {
  const char *T = "LlmMalformedResponse";
  cJSON *j = cJSON_ParseWithLength(r->body, r->body_len), *out = NULL;
  dbx_err rc = DBX_OK;
  if (!cJSON_IsObject(j)) {
    rc = fail(res, 1, T, "llm.chat: the reply (HTTP %ld, %zu bytes) is not a JSON object",
              r->status, r->body_len);
    goto done;
  }
  const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "choices");
  const cJSON *c0 = cJSON_IsArray(ch) ? cJSON_GetArrayItem(ch, 0) : NULL;
  const cJSON *msg = cJSON_IsObject(c0) ? cJSON_GetObjectItemCaseSensitive(c0, "message") : NULL;
  if (!cJSON_IsObject(msg)) {
    rc = fail(res, 1, T, "llm.chat: the reply has no %s",
              !cJSON_IsArray(ch) ? "\"choices\" array" : !c0 ? "choices[0]" : "choices[0].message object");
    goto done;
  }
  const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
  if (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) {
    rc = fail(res, 1, T, "llm.chat: choices[0].message.content is neither text nor null");
    goto done;
  }
  out = cJSON_CreateObject();
  cJSON *calls = cJSON_AddArrayToObject(out, "tool_calls");
  if (!out || !calls) goto nomem;
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
  if (tc && !cJSON_IsArray(tc) && !cJSON_IsNull(tc)) {
    rc = fail(res, 1, T, "llm.chat: choices[0].message.tool_calls is not an array");
    goto done;
  }
  int i = 0;
  for (const cJSON *c = cJSON_IsArray(tc) ? tc->child : NULL; c; c = c->next, i++) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
    const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *ar = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
    const char *what = !cJSON_IsString(id) || !id->valuestring[0] ? "id"
                       : !cJSON_IsObject(fn)                       ? "function"
                       : !cJSON_IsString(nm) || !nm->valuestring[0] ? "function.name"
                       : !cJSON_IsString(ar)                        ? "function.arguments (text)"
                                                                    : NULL;
    if (what) {
      rc = fail(res, 1, T, "llm.chat: choices[0].message.tool_calls[%d] has no %s", i, what);
      goto done;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(calls, o)) {
      cJSON_Delete(o);
      goto nomem;
    }
    if (!cJSON_AddStringToObject(o, "id", id->valuestring) ||
        !cJSON_AddStringToObject(o, "name", nm->valuestring) ||
        !cJSON_AddStringToObject(o, "arguments", ar->valuestring))
      goto nomem;
  }
  if (cJSON_IsString(content) ? !cJSON_AddStringToObject(out, "content", content->valuestring)
                              : !cJSON_AddNullToObject(out, "content"))
    goto nomem;
  const cJSON *fr = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
  if (cJSON_IsString(fr) ? !cJSON_AddStringToObject(out, "finish_reason", fr->valuestring)
                         : !cJSON_AddNullToObject(out, "finish_reason"))
    goto nomem;
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(j, "model");
  if (!cJSON_AddStringToObject(out, "model", cJSON_IsString(md) ? md->valuestring : "")) goto nomem;
  const cJSON *us = cJSON_GetObjectItemCaseSensitive(j, "usage");
  cJSON *u = cJSON_AddObjectToObject(out, "usage");
  if (!u) goto nomem;
  static const char *const keys[] = {"prompt_tokens", "completion_tokens", "total_tokens"};
  double v[3] = {0, 0, 0};
  for (int k = 0; k < 3; k++) {
    const cJSON *x = cJSON_IsObject(us) ? cJSON_GetObjectItemCaseSensitive(us, keys[k]) : NULL;
    if (x && (!cJSON_IsNumber(x) || x->valuedouble < 0)) {
      rc = fail(res, 1, T, "llm.chat: usage.%s is not a count", keys[k]);
      goto done;
    }
    v[k] = x ? x->valuedouble : k == 2 ? v[0] + v[1] : 0;
    if (!cJSON_AddNumberToObject(u, keys[k], v[k])) goto nomem;
  }
  char *txt = cJSON_PrintUnformatted(out);
  if (!txt) goto nomem;
  res->result_json = dbx_http_redact(txt, getenv("LLM_API_KEY"), "LLM_API_KEY");
  if (!res->result_json) goto nomem;
  goto done;
nomem:
  rc = DBX_ENOMEM;
done:
  cJSON_Delete(out);
  cJSON_Delete(j);
  return rc;
}

/* The request body: the input's messages and tools, and the model. */
static char *request_body(const cJSON *in, const char *model) {
  cJSON *b = cJSON_CreateObject();
  char *txt = NULL;
  if (!b || !cJSON_AddStringToObject(b, "model", model)) goto out;
  static const char *const pass[] = {"messages", "tools", "max_tokens", "temperature"};
  for (size_t i = 0; i < sizeof pass / sizeof *pass; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(in, pass[i]);
    if (!v) continue;
    cJSON *d = cJSON_Duplicate(v, 1);
    if (!d || !cJSON_AddItemToObject(b, pass[i], d)) {
      cJSON_Delete(d);
      goto out;
    }
  }
  txt = cJSON_PrintUnformatted(b);
out:
  cJSON_Delete(b);
  return txt;
}

/* While the model answers: a heartbeat (so a worker that dies is noticed
 * after the heartbeat timeout, not the whole start-to-close), and a stop
 * when the activity is cancelled. */
static int chat_beat(void *a) { return dbx_act_heartbeat(a, NULL); }

static dbx_err run_chat(dbx_act *a, const char *json, size_t len, dbx_act_result *res, void *ud) {
  (void)ud;
  cJSON *in = cJSON_ParseWithLength(json, len);
  char *body = NULL, *url = NULL, *auth = NULL;
  dbx_http_reply r = {0};
  dbx_err rc = DBX_OK;
  const cJSON *msgs = cJSON_IsObject(in) ? cJSON_GetObjectItemCaseSensitive(in, "messages") : NULL;
  if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
    rc = fail(res, 1, "InvalidInput", "llm.chat: \"messages\" must be a non-empty array");
    goto out;
  }
  const cJSON *bu = cJSON_GetObjectItemCaseSensitive(in, "base_url");
  const cJSON *mo = cJSON_GetObjectItemCaseSensitive(in, "model");
  const char *base = cJSON_IsString(bu) && bu->valuestring[0] ? bu->valuestring : getenv("LLM_BASE_URL");
  const char *model = cJSON_IsString(mo) && mo->valuestring[0] ? mo->valuestring : getenv("LLM_MODEL");
  if (!base || !*base || !model || !*model) {
    rc = fail(res, 1, "LlmNotConfigured", "llm.chat: no %s (set %s in the worker's environment "
              "or give it in the input)", !base || !*base ? "base URL" : "model",
              !base || !*base ? "LLM_BASE_URL" : "LLM_MODEL");
    goto out;
  }
  size_t bl = strlen(base);
  while (bl > 0 && base[bl - 1] == '/') bl--;
  url = dbx_asprintf("%.*s/chat/completions", (int)bl, base);
  body = request_body(in, model);
  const char *key = getenv("LLM_API_KEY");
  if (key && *key) auth = dbx_asprintf("Authorization: Bearer %s", key);
  if (!url || !body || (key && *key && !auth)) {
    rc = DBX_ENOMEM;
    goto out;
  }
  const char *hdrs[] = {auth, NULL};
  int64_t left = dbx_act_remaining_ms(a);
  dbx_err he = dbx_http_json_beat("POST", url, body, auth ? hdrs : NULL,
                                  left > 0 && left < 600000 ? left : 600000, &r, chat_beat, a);
  if (he == DBX_ECANCELED) {
    rc = DBX_ECANCELED;
  } else if (he == DBX_ENOMEM) {
    rc = DBX_ENOMEM;
  } else if (he == DBX_EINVAL) {
    rc = fail(res, 1, "LlmNotConfigured", "llm.chat: the base URL is %s", r.error);
  } else if (he != DBX_OK) {
    rc = fail(res, he == DBX_EUNSUPPORTED, he == DBX_EUNSUPPORTED ? "LlmMalformedResponse" : "LlmUnavailable",
              "llm.chat: POST %s: %s", url, r.error);
  } else if (r.status == 429 || r.status == 408 || r.status >= 500) {
    char w[400];
    reply_words(&r, w, sizeof w);
    rc = fail(res, 0, r.status == 429 ? "LlmRateLimited" : "LlmServerError",
              "llm.chat: HTTP %ld from %s: %s", r.status, url, w);
  } else if (r.status < 200 || r.status > 299) {
    char w[400];
    reply_words(&r, w, sizeof w);
    rc = fail(res, 1, "LlmRequestRejected", "llm.chat: HTTP %ld from %s: %s", r.status, url, w);
  } else {
    rc = parse_reply(&r, res);
  }
out:
  dbx_http_reply_cleanup(&r);
  dbx_http_secret_free(auth);
  free(body);
  free(url);
  cJSON_Delete(in);
  return rc;
}

const dbx_activity_type dbx_llm_chat_activity = {"llm.chat", DBX_SAFE_TO_RETRY, run_chat, NULL};

dbx_err dbx_agent_acts_register(struct dbx_worker *w) {
  dbx_err e = dbx_worker_register_activity(w, &dbx_llm_chat_activity);
  if (e == DBX_OK) e = dbx_worker_register_activity(w, &dbx_github_open_pr_activity);
  if (e == DBX_OK) e = dbx_worker_register_activity(w, &dbx_github_find_pr_activity);
  return e;
}
