/* activities/github: github.open_pr (see github.h). */
#include "activities/github.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "activities/http.h"
#include "activities/sandbox.h"
#include "base/util.h"

__attribute__((format(printf, 3, 4))) static dbx_err fail(dbx_act_result *res, const char *type,
                                                          const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  res->failure_type = dbx_strdup(type);
  res->failure_message = dbx_http_redact(dbx_strdup(msg), getenv("GITHUB_TOKEN"), "GITHUB_TOKEN");
  res->non_retryable = 1;
  if (!res->failure_type || !res->failure_message) {
    free(res->failure_type);
    free(res->failure_message);
    res->failure_type = res->failure_message = NULL;
    return DBX_ENOMEM;
  }
  return DBX_OK;
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) && x->valuestring[0] ? x->valuestring : NULL;
}

/* GitHub's "message" and its first errors[].message, one line. */
static void reply_words(const dbx_http_reply *r, char *out, size_t cap) {
  cJSON *j = r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL;
  const char *m = j ? str_of(j, "message") : NULL;
  const cJSON *es = j ? cJSON_GetObjectItemCaseSensitive(j, "errors") : NULL;
  const char *e0 = cJSON_IsArray(es) ? str_of(cJSON_GetArrayItem(es, 0), "message") : NULL;
  snprintf(out, cap, "%.200s%s%.200s", m ? m : "(no message)", e0 ? ": " : "", e0 ? e0 : "");
  for (char *p = out; *p; p++)
    if ((unsigned char)*p < 0x20) *p = ' ';
  cJSON_Delete(j);
}

static dbx_err succeed(dbx_act_result *res, const cJSON *pr, int created) {
  const cJSON *num = cJSON_GetObjectItemCaseSensitive(pr, "number");
  if (!cJSON_IsNumber(num))
    return fail(res, "GitHubRejected", "github.open_pr: the reply has no pull request number");
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "number", num->valuedouble);
  cJSON_AddStringToObject(o, "url", str_of(pr, "html_url") ? str_of(pr, "html_url") : "");
  cJSON_AddStringToObject(o, "api_url", str_of(pr, "url") ? str_of(pr, "url") : "");
  cJSON_AddStringToObject(o, "state", str_of(pr, "state") ? str_of(pr, "state") : "open");
  cJSON_AddBoolToObject(o, "created", created);
  char *txt = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  res->result_json = txt ? dbx_http_redact(txt, getenv("GITHUB_TOKEN"), "GITHUB_TOKEN") : NULL;
  return res->result_json ? DBX_OK : DBX_ENOMEM;
}

/* After a 422 "already exists": the open pull request of head. */
static dbx_err find_existing(const char *api, const char *repo, const char *head,
                             const char *const *hdrs, dbx_act_result *res, int *found) {
  *found = 0;
  char owner[128];
  snprintf(owner, sizeof owner, "%.*s", (int)strcspn(repo, "/"), repo);
  char *url = dbx_asprintf("%s/repos/%s/pulls?state=open&head=%s:%s", api, repo, owner, head);
  if (!url) return DBX_ENOMEM;
  dbx_http_reply r = {0};
  dbx_err e = dbx_http_json("GET", url, NULL, hdrs, 30000, &r);
  free(url);
  cJSON *j = e == DBX_OK && r.status == 200 ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
  dbx_http_reply_cleanup(&r);
  dbx_err rc = e == DBX_ENOMEM ? DBX_ENOMEM : DBX_OK;
  if (cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0) {
    *found = 1;
    rc = succeed(res, cJSON_GetArrayItem(j, 0), 0);
  }
  cJSON_Delete(j);
  return rc;
}

static int repo_ok(const char *r) {
  const char *s = strchr(r, '/');
  if (!s || s == r || !s[1] || strchr(s + 1, '/')) return 0;
  for (const char *p = r; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_' || *p == '.' || *p == '/'))
      return 0;
  return 1;
}

static dbx_err run_open_pr(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                           void *ud) {
  (void)a;
  (void)ud;
  cJSON *in = cJSON_ParseWithLength(json, len), *body = NULL;
  char *url = NULL, *auth = NULL, *txt = NULL, *api = NULL;
  dbx_http_reply r = {0};
  dbx_err rc = DBX_OK;
  const char *repo = str_of(in, "repo"), *head = str_of(in, "head"), *base = str_of(in, "base");
  const char *title = str_of(in, "title");
  if (!cJSON_IsObject(in) || !repo || !repo_ok(repo) || !head || !base || !title) {
    rc = fail(res, "InvalidInput", "github.open_pr: %s",
              !cJSON_IsObject(in) ? "the input is not a JSON object"
              : !repo || !repo_ok(repo) ? "\"repo\" must be OWNER/NAME"
              : !head ? "\"head\" (the branch) is missing"
              : !base ? "\"base\" (the target branch) is missing" : "\"title\" is missing");
    goto out;
  }
  const char *tok = getenv("GITHUB_TOKEN");
  if (!tok || !*tok) {
    rc = fail(res, "SecretMissing", "github.open_pr: GITHUB_TOKEN is not set in the worker's "
              "environment");
    goto out;
  }
  const char *au = str_of(in, "api_url") ? str_of(in, "api_url") : getenv("GITHUB_API_URL");
  if (!au || !*au) au = "https://api.github.com";
  size_t al = strlen(au);
  while (al > 0 && au[al - 1] == '/') al--;
  api = dbx_strndup(au, al);
  url = api ? dbx_asprintf("%s/repos/%s/pulls", api, repo) : NULL;
  auth = dbx_asprintf("Authorization: Bearer %s", tok);
  body = cJSON_CreateObject();
  if (body) {
    cJSON_AddStringToObject(body, "title", title);
    cJSON_AddStringToObject(body, "head", head);
    cJSON_AddStringToObject(body, "base", base);
    if (str_of(in, "body")) cJSON_AddStringToObject(body, "body", str_of(in, "body"));
    txt = cJSON_PrintUnformatted(body);
  }
  if (!url || !auth || !txt) {
    rc = DBX_ENOMEM;
    goto out;
  }
  const char *hdrs[] = {auth, "Accept: application/vnd.github+json",
                        "X-GitHub-Api-Version: 2022-11-28", "User-Agent: durabox", NULL};
  dbx_err he = dbx_http_json("POST", url, txt, hdrs, 30000, &r); /* < the step's 45 s */
  char w[420];
  if (he == DBX_ENOMEM) {
    rc = DBX_ENOMEM;
  } else if (he == DBX_EINVAL) {
    rc = fail(res, "InvalidInput", "github.open_pr: the API URL is %s", r.error);
  } else if (he != DBX_OK) {
    int unsent = strstr(r.error, "connect") || strstr(r.error, "resolve");
    rc = fail(res, unsent ? "GitHubUnavailable" : "OutcomeUnknown",
              "github.open_pr: POST %s: %s%s", url, r.error,
              unsent ? "" : " (the pull request may exist: check before opening it again)");
  } else if (r.status == 201 || r.status == 200) {
    cJSON *pr = cJSON_ParseWithLength(r.body, r.body_len);
    rc = succeed(res, pr, 1);
    cJSON_Delete(pr);
  } else {
    reply_words(&r, w, sizeof w);
    int found = 0;
    if (r.status == 422 && strstr(w, "already exists")) {
      rc = find_existing(api, repo, head, hdrs, res, &found);
      if (rc != DBX_OK || found) goto out;
    }
    const char *type = r.status == 401 || r.status == 403 ? "GitHubAuthFailed"
                       : r.status == 404                  ? "GitHubRepoNotFound"
                       : r.status >= 500                  ? "GitHubServerError"
                                                          : "GitHubRejected";
    rc = fail(res, type, "github.open_pr: HTTP %ld from POST %s: %s", r.status, url, w);
  }
out:
  dbx_http_reply_cleanup(&r);
  dbx_http_secret_free(auth);
  cJSON_Delete(body);
  cJSON_Delete(in);
  free(txt);
  free(url);
  free(api);
  return rc;
}

const dbx_activity_type dbx_github_open_pr_activity = {"github.open_pr", DBX_AT_MOST_ONCE,
                                                       run_open_pr, NULL};

static dbx_err run_find_pr(dbx_act *a, const char *json, size_t len, dbx_act_result *res,
                           void *ud) {
  (void)a;
  (void)ud;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const char *repo = str_of(in, "repo"), *head = str_of(in, "head");
  const char *tok = getenv("GITHUB_TOKEN");
  char *auth = NULL, *api = NULL;
  dbx_err rc = DBX_OK;
  if (!repo || !repo_ok(repo) || !head) {
    rc = fail(res, "InvalidInput", "github.find_pr: \"repo\" (OWNER/NAME) and \"head\" are required");
    goto out;
  }
  if (!tok || !*tok) {
    rc = fail(res, "SecretMissing", "github.find_pr: GITHUB_TOKEN is not set in the worker's environment");
    goto out;
  }
  const char *au = str_of(in, "api_url") ? str_of(in, "api_url") : getenv("GITHUB_API_URL");
  if (!au || !*au) au = "https://api.github.com";
  size_t al = strlen(au);
  while (al > 0 && au[al - 1] == '/') al--;
  api = dbx_strndup(au, al);
  auth = dbx_asprintf("Authorization: Bearer %s", tok);
  if (!api || !auth) {
    rc = DBX_ENOMEM;
    goto out;
  }
  const char *hdrs[] = {auth, "Accept: application/vnd.github+json",
                        "X-GitHub-Api-Version: 2022-11-28", "User-Agent: durabox", NULL};
  int found = 0;
  rc = find_existing(api, repo, head, hdrs, res, &found);
  if (rc == DBX_OK && !found && !res->result_json)
    res->result_json = dbx_strdup("{\"found\":false}");
  if (rc == DBX_OK && found && res->result_json) { /* {"number", ...} + "found": true */
    cJSON *r = cJSON_Parse(res->result_json);
    if (r && cJSON_AddTrueToObject(r, "found")) {
      char *t = cJSON_PrintUnformatted(r);
      if (t) free(res->result_json), res->result_json = t;
    }
    cJSON_Delete(r);
  }
  if (rc == DBX_OK && !res->result_json) rc = DBX_ENOMEM;
out:
  dbx_http_secret_free(auth);
  free(api);
  cJSON_Delete(in);
  return rc;
}

const dbx_activity_type dbx_github_find_pr_activity = {"github.find_pr", DBX_SAFE_TO_RETRY,
                                                       run_find_pr, NULL};

/* ------------------------------------------------------------ git.push */

dbx_err dbx_worker_register_activity(struct dbx_worker *w, const dbx_activity_type *t);

struct dbx_git_push_acts {
  dbx_driver *drv;
  dbx_activity_type type;
};

/* The worker's credentials for an http(s) remote: GIT_TOKEN (GIT_USERNAME),
 * else GITHUB_TOKEN; *var names the one used, NULL when none is set. */
static int push_cred(dbx_drv_git_cred *c, const char **var) {
  *var = NULL;
  if (dbx_drv_git_cred_from_env(NULL, NULL, c) == DBX_OK) return *var = "GIT_TOKEN", 1;
  const char *gh = getenv("GITHUB_TOKEN");
  if (gh == NULL || *gh == '\0') return 0;
  c->username = "x-access-token"; /* what GitHub takes with a token */
  c->password = gh;
  return *var = "GITHUB_TOKEN", 1;
}

static int is_http(const char *u) { return strncmp(u, "https://", 8) == 0 || strncmp(u, "http://", 7) == 0; }

/* 1 when an http(s) URL carries user info (user[:password]@host). */
static int has_userinfo(const char *u) {
  const char *p = u + (strncmp(u, "https://", 8) == 0 ? 8 : 7);
  size_t n = strcspn(p, "/?#");
  return memchr(p, '@', n) != NULL;
}

/* msg with every credential value of the worker replaced (malloc'd). */
static char *push_redact(char *msg) {
  msg = dbx_http_redact(msg, getenv("GIT_TOKEN"), "GIT_TOKEN");
  return dbx_http_redact(msg, getenv("GITHUB_TOKEN"), "GITHUB_TOKEN");
}

static dbx_err push_fail(dbx_act_result *res, int nr, const char *type, char *msg) {
  res->failure_type = dbx_strdup(type);
  res->failure_message = msg ? push_redact(msg) : NULL;
  res->non_retryable = nr;
  if (!res->failure_type || !res->failure_message) {
    free(res->failure_type);
    free(res->failure_message);
    res->failure_type = res->failure_message = NULL;
    return DBX_ENOMEM;
  }
  return DBX_OK;
}

static dbx_err run_push(dbx_act *a, const char *json, size_t len, dbx_act_result *res, void *ud) {
  const dbx_git_push_acts *p = ud;
  const dbx_driver *drv = p->drv;
  cJSON *in = cJSON_ParseWithLength(json, len);
  const char *id = str_of(in, "sandbox_id"), *remote = str_of(in, "remote");
  const char *branch = str_of(in, "branch"), *rp = str_of(in, "repo_path");
  dbx_err rc = DBX_OK;
  if (!id || !remote || !branch) {
    rc = push_fail(res, 1, "InvalidInput",
                   dbx_strdup("git.push: \"sandbox_id\", \"remote\" and \"branch\" are required"));
    goto out;
  }
  if (remote[0] == '-' || branch[0] == '-' || (is_http(remote) && has_userinfo(remote))) {
    rc = push_fail(res, 1, "InvalidInput",
                   dbx_strdup(remote[0] == '-' || branch[0] == '-'
                                  ? "git.push: remote and branch may not start with '-'"
                                  : "git.push: the remote URL may not carry credentials "
                                    "(user:password@); the worker's GIT_TOKEN / GITHUB_TOKEN are used"));
    goto out;
  }
  if (dbx_act_cancelled(a)) {
    rc = DBX_ECANCELED;
    goto out;
  }
  dbx_drv_git_cred cred;
  const char *var = NULL;
  int with = is_http(remote) && push_cred(&cred, &var);
  dbx_drv_err d;
  if (with && !drv->ops->git_push_cred) {
    rc = push_fail(res, 1, "Unsupported",
                   dbx_asprintf("git.push: the %s driver cannot keep credentials out of the "
                                "sandbox", drv->name));
    goto out;
  }
  d = with ? drv->ops->git_push_cred(drv->self, id, rp, remote, branch, &cred)
           : drv->ops->git_push(drv->self, id, rp, remote, branch);
  if (d == DBX_DRV_CANCELED || d == DBX_DRV_NOMEM) {
    rc = d == DBX_DRV_CANCELED ? DBX_ECANCELED : DBX_ENOMEM;
    goto out;
  }
  if (d != DBX_DRV_OK) {
    int nr = 0;
    const char *type = dbx_sandbox_failure_type(d, &nr);
    const char *why = drv->ops->errmsg(drv->self);
    rc = push_fail(res, nr, type ? type : "SandboxError",
                   dbx_asprintf("git.push: %s to %s%s%s: %s", branch, remote,
                                with ? " with " : "", with ? var : "",
                                why && *why ? why : dbx_drv_strerror(d)));
    goto out;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "remote", remote);
  cJSON_AddStringToObject(o, "branch", branch);
  if (var) cJSON_AddStringToObject(o, "credentials", var);
  else cJSON_AddNullToObject(o, "credentials");
  char *t = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  res->result_json = t ? push_redact(t) : NULL;
  if (!res->result_json) rc = DBX_ENOMEM;
out:
  cJSON_Delete(in);
  return rc;
}

dbx_err dbx_git_push_acts_create(dbx_driver *drv, dbx_git_push_acts **out) {
  *out = NULL;
  if (!drv) return DBX_EINVAL;
  dbx_git_push_acts *p = calloc(1, sizeof *p);
  if (!p) return DBX_ENOMEM;
  p->drv = drv;
  p->type = (dbx_activity_type){"git.push", DBX_SAFE_TO_RETRY, run_push, p};
  *out = p;
  return DBX_OK;
}

dbx_err dbx_git_push_acts_register(const dbx_git_push_acts *p, struct dbx_worker *w) {
  if (!p || !w) return DBX_EINVAL;
  return dbx_worker_register_activity(w, &p->type);
}

void dbx_git_push_acts_destroy(dbx_git_push_acts *p) { free(p); }
