/* Git credentials from the worker (driver.h dbx_drv_git_cred, ops
 * git_clone_cred / git_push_cred) on the local driver (plain and, where
 * usable, under bubblewrap) against a real git smart-HTTP server with Basic
 * authentication on loopback (tests/fakes/git/git_http.py: git
 * http-backend), and on the Daytona driver against the fake Daytona server,
 * which checks the endpoints' username / password fields, refuses wrong
 * ones with 401 GIT_AUTH_FAILED, and hands right ones to git against the
 * same HTTP server. Each case asserts the clone and push happened (files
 * read back, the pushed sha in the bare repository), that refusals are the
 * non-retryable AUTH (AuthFailed), and that the token appears in no file of
 * the workspace / driver home / fake's state, no error message and no log.
 * The same for a GIT source at create (dbx_drv_create_opts.git_cred). Also: Daytona's 401 / 403 of its API are AUTH naming the API key. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/daytona.h"
#include "activities/driver.h"
#include "activities/local.h"
#include "base/fs.h"
#include "base/util.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/testutil.h"

#define USER "dbx-bot"

static char *g_tmp;
static char g_token[64];
static pid_t g_http_pid;
static int g_http_port;
static char g_http_log[1100];
static char *g_url;  /* http://127.0.0.1:PORT/r.git */
static char *g_bare; /* its folder */
static char g_seed[64]; /* the seed commit */

static void sh(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char cmd[4096];
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  assert_int_equal(system(cmd), 0);
}

/* First line of a command's output (malloc'd) or NULL. */
static char *sh_out(const char *cmd) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[256] = "";
  char *r = fgets(line, sizeof line, p);
  pclose(p);
  if (r == NULL) return NULL;
  line[strcspn(line, "\n")] = 0;
  return dbx_strdup(line);
}

/* 1 if the token is in any file under dir (grep -r, binary files too). */
static int token_under(const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "grep -r -a -q -F -e '%s' '%s' 2>/dev/null", g_token, dir);
  return system(cmd) == 0;
}

static int start_http(void) {
  char script[1200], portfile[1100], root[1100];
  const char *src = getenv("DBX_SOURCE_DIR");
  if (src && *src) {
    snprintf(script, sizeof script, "%s/tests/fakes/git/git_http.py", src);
  } else {
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    snprintf(slash + 1, sizeof script - (size_t)(slash + 1 - script), "fakes/git/git_http.py");
  }
  snprintf(root, sizeof root, "%s/http", g_tmp);
  snprintf(portfile, sizeof portfile, "%s/http.port", g_tmp);
  snprintf(g_http_log, sizeof g_http_log, "%s/http.log", g_tmp);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) dup2(nul, 1);
    execlp("python3", "python3", script, "--root", root, "--user", USER, "--password", g_token,
           "--log", g_http_log, "--port-file", portfile, (char *)NULL);
    _exit(127);
  }
  g_http_pid = pid;
  for (int i = 0; i < 1000; i++) { /* up to 20 s */
    FILE *p = fopen(portfile, "r");
    if (p) {
      int got = fscanf(p, "%d", &g_http_port);
      fclose(p);
      if (got == 1 && g_http_port > 0) return 0;
    }
    if (waitpid(pid, NULL, WNOHANG) == pid) {
      g_http_pid = 0;
      return -1;
    }
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

static int setup(void **state) {
  (void)state;
  g_tmp = dbx_test_tmpdir("dbx-gitcred");
  char id[40];
  dbx_uuid_v4(id);
  snprintf(g_token, sizeof g_token, "tok-%s", id);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "set -e; mkdir -p %s/http; git init -q --bare -b main %s/http/r.git; "
           "git init -q -b main %s/seed; cd %s/seed; echo one > a.txt; git add a.txt; "
           "git -c user.name=t -c user.email=t@e commit -q -m init; "
           "git push -q %s/http/r.git main",
           g_tmp, g_tmp, g_tmp, g_tmp, g_tmp);
  if (system(cmd) != 0) return -1;
  if (start_http() != 0) {
    fprintf(stderr, "test_git_cred: the git HTTP server did not start (python3?)\n");
    return -1;
  }
  g_url = dbx_asprintf("http://127.0.0.1:%d/r.git", g_http_port);
  g_bare = dbx_asprintf("%s/http/r.git", g_tmp);
  snprintf(cmd, sizeof cmd, "git --git-dir=%s rev-parse refs/heads/main", g_bare);
  char *seed = sh_out(cmd);
  if (seed == NULL) return -1;
  snprintf(g_seed, sizeof g_seed, "%s", seed);
  free(seed);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (g_http_pid > 0) {
    kill(g_http_pid, SIGTERM);
    waitpid(g_http_pid, NULL, 0);
  }
  dbx_test_rmrf(g_tmp);
  free(g_tmp);
  free(g_url);
  free(g_bare);
  return 0;
}

/* The bare repository's main. */
static char *bare_main(void) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "git --git-dir=%s rev-parse refs/heads/main", g_bare);
  return sh_out(cmd);
}

/* Clone with the right, a wrong and no credentials; commit; push with the
 * right and a wrong token and to a remote name: through drv's ops. */
static void clone_push_cases(dbx_driver *drv, const char *sb, const char *search_dir) {
  const dbx_driver_ops *o = drv->ops;
  sh("git --git-dir=%s update-ref refs/heads/main %s", g_bare, g_seed); /* each case from the seed */
  assert_non_null(o->git_clone_cred);
  assert_non_null(o->git_push_cred);
  dbx_drv_git_cred good = {USER, g_token};
  char wrong_tok[80];
  snprintf(wrong_tok, sizeof wrong_tok, "%s-wrong", g_token);
  dbx_drv_git_cred bad = {USER, wrong_tok};
  /* wrong token: AUTH, the token in no message */
  assert_int_equal(o->git_clone_cred(drv->self, sb, g_url, "w1", NULL, &bad), DBX_DRV_AUTH);
  assert_null(strstr(o->errmsg(drv->self), wrong_tok));
  /* none: the remote asks, nothing answers, AUTH (never a prompt that hangs) */
  assert_int_equal(o->git_clone(drv->self, sb, g_url, "w0", NULL), DBX_DRV_AUTH);
  /* credentials with no URL to bind them to: refused before git runs */
  assert_int_equal(o->git_clone_cred(drv->self, sb, g_bare, "w2", NULL, &good), DBX_DRV_INVALID);
  dbx_drv_git_cred empty = {USER, ""};
  assert_int_equal(o->git_clone_cred(drv->self, sb, g_url, "w2", NULL, &empty), DBX_DRV_INVALID);
  /* right: cloned */
  assert_int_equal(o->git_clone_cred(drv->self, sb, g_url, "w", NULL, &good), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(o->file_read(drv->self, sb, "w/a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(data, "one\n", 4);
  free(data);
  /* a second clone, to pull into later */
  assert_int_equal(o->git_clone_cred(drv->self, sb, g_url, "wp", NULL, &good), DBX_DRV_OK);
  /* commit and push */
  assert_int_equal(o->file_write(drv->self, sb, "w/a.txt", "two\n", 4), DBX_DRV_OK);
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(o->git_commit(drv->self, sb, "w", "change", "A <a@b>", &sha, &nothing),
                   DBX_DRV_OK);
  assert_int_equal(nothing, 0);
  assert_non_null(sha);
  char *before = bare_main();
  assert_non_null(before);
  assert_string_not_equal(before, sha);
  assert_int_equal(o->git_push_cred(drv->self, sb, "w", g_url, "main", &bad), DBX_DRV_AUTH);
  assert_null(strstr(o->errmsg(drv->self), wrong_tok));
  char *still = bare_main();
  assert_string_equal(still, before); /* nothing pushed */
  free(still);
  /* a remote name resolves through the repository's own config: refused */
  assert_int_equal(o->git_push_cred(drv->self, sb, "w", "origin", "main", &good), DBX_DRV_INVALID);
  assert_int_equal(o->git_push_cred(drv->self, sb, "w", g_url, "main", &good), DBX_DRV_OK);
  char *after = bare_main();
  assert_non_null(after);
  assert_string_equal(after, sha);
  free(after);
  /* pull (fetch + fast-forward) into the second clone: refused without or
   * with a wrong token, and with a remote name; a missing branch is
   * REF_NOT_FOUND; then it fast-forwards to the pushed commit */
  assert_non_null(o->git_pull);
  assert_int_equal(o->git_pull(drv->self, sb, "wp", g_url, "main", NULL), DBX_DRV_AUTH);
  assert_int_equal(o->git_pull(drv->self, sb, "wp", g_url, "main", &bad), DBX_DRV_AUTH);
  assert_null(strstr(o->errmsg(drv->self), wrong_tok));
  assert_int_equal(o->git_pull(drv->self, sb, "wp", "origin", NULL, &good), DBX_DRV_INVALID);
  assert_int_equal(o->git_pull(drv->self, sb, "wp", g_url, "no-such-branch", &good),
                   DBX_DRV_REF_NOT_FOUND);
  assert_int_equal(o->file_read(drv->self, sb, "wp/a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_memory_equal(data, "one\n", 4); /* nothing pulled yet */
  free(data);
  assert_int_equal(o->git_pull(drv->self, sb, "wp", g_url, "main", &good), DBX_DRV_OK);
  assert_int_equal(o->file_read(drv->self, sb, "wp/a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(data, "two\n", 4);
  free(data);
  assert_int_equal(o->git_pull(drv->self, sb, "wp", g_url, NULL, &good), DBX_DRV_OK); /* up to date */
  free(before);
  free(sha);
  /* the token is nowhere: not in the workspace (.git/config included), not
   * in the driver's or fake's files, not in the HTTP server's log */
  assert_false(token_under(search_dir));
  char *lg = NULL;
  size_t ln = 0;
  assert_int_equal(dbx_fs_read_all(g_http_log, &lg, &ln), DBX_OK);
  assert_null(strstr(lg, g_token));
  /* the server saw refused and accepted requests */
  assert_non_null(strstr(lg, "\"auth\": \"bad\""));
  assert_non_null(strstr(lg, "\"auth\": \"ok\""));
  assert_non_null(strstr(lg, "git-receive-pack\", \"auth\": \"ok\", \"status\": 200"));
  free(lg);
}

/* A GIT source at create with credentials: refused ones (and none) fail
 * the create with AUTH and leave no sandbox; right ones clone; the token is
 * nowhere under search_dir. */
static void create_cases(dbx_driver *drv, const char *sb, const char *search_dir) {
  const dbx_driver_ops *o = drv->ops;
  sh("git --git-dir=%s update-ref refs/heads/main %s", g_bare, g_seed);
  dbx_drv_git_cred good = {USER, g_token}, bad = {USER, "not-the-token"};
  dbx_drv_create_opts g = {.source = {DBX_DRV_SOURCE_GIT, g_url, NULL}, .git_cred = &bad};
  dbx_drv_state st;
  assert_int_equal(o->create(drv->self, sb, &g, NULL), DBX_DRV_AUTH);
  assert_int_equal(o->exists(drv->self, sb, &st), DBX_DRV_NO_SANDBOX);
  g.git_cred = NULL;
  assert_int_equal(o->create(drv->self, sb, &g, NULL), DBX_DRV_AUTH);
  g.git_cred = &good;
  g.source.location = g_bare; /* credentials need an http(s) URL */
  assert_int_equal(o->create(drv->self, sb, &g, NULL), DBX_DRV_INVALID);
  g.source.location = g_url;
  assert_int_equal(o->create(drv->self, sb, &g, NULL), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(o->file_read(drv->self, sb, "a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(data, "one\n", 4);
  free(data);
  assert_false(token_under(search_dir));
  assert_int_equal(o->del(drv->self, sb), DBX_DRV_OK);
}

static void local_case(int bwrap) {
  char *home = dbx_asprintf("%s/home-%d", g_tmp, bwrap);
  dbx_local_open_opts oo = {.unsandboxed = !bwrap};
  dbx_local *d = NULL;
  assert_int_equal(dbx_local_open_with(home, &oo, &d), DBX_OK);
  if (bwrap && !dbx_local_bwrap_enabled(d)) {
    dbx_local_close(d);
    free(home);
    skip();
  }
  dbx_driver *drv = dbx_local_driver(d);
  dbx_drv_create_opts co = {0};
  int adopted = 0;
  assert_int_equal(drv->ops->create(drv->self, "gc-1", &co, &adopted), DBX_DRV_OK);
  clone_push_cases(drv, "gc-1", home);
  assert_int_equal(drv->ops->del(drv->self, "gc-1"), DBX_DRV_OK);
  create_cases(drv, "gc-src", home);
  dbx_local_close(d);
  free(home);
}

static void test_git_cred_local_plain(void **state) {
  (void)state;
  local_case(0);
}

static void test_git_cred_local_bwrap(void **state) {
  (void)state;
  local_case(1);
}

static dbx_daytona *open_dt(const dbx_fake_daytona *f, const char *key) {
  dbx_daytona_opts o = {.api_url = f->api_url, .api_key = key, .state_wait_ms = 20000,
                        .snapshot_wait_ms = 3000};
  dbx_daytona *d = NULL;
  const char *why = NULL;
  assert_int_equal(dbx_daytona_open(&o, &d, &why), DBX_OK);
  return d;
}

/* The fake's request log: the token is in the body of POST /api/secret
 * (or PATCH /api/secret/{id}) requests alone, each restricting the secret
 * to 127.0.0.1, and in no path or query; with git_bodies, the /git/clone
 * and /git/push bodies carry the username and a dtn_secret_ placeholder. */
static void log_only_in_secrets(const dbx_fake_daytona *f, int git_bodies) {
  char *log = dbx_fake_daytona_call(f, "GET", "/_control/log", NULL);
  assert_non_null(log);
  cJSON *j = cJSON_Parse(log);
  assert_non_null(j);
  int secret_posts = 0, git_placeholders = 0, mounts = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "requests")) {
    const char *m = cJSON_GetObjectItemCaseSensitive(e, "method")->valuestring;
    const char *p = cJSON_GetObjectItemCaseSensitive(e, "path")->valuestring;
    const char *q = cJSON_GetObjectItemCaseSensitive(e, "query")->valuestring;
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "body");
    const char *body = cJSON_IsString(b) ? b->valuestring : "";
    assert_null(strstr(p, g_token));
    assert_null(strstr(q, g_token));
    int secret_write = (strcmp(m, "POST") == 0 && strcmp(p, "/api/secret") == 0) ||
                       (strcmp(m, "PATCH") == 0 && strncmp(p, "/api/secret/", 12) == 0);
    if (strstr(body, g_token)) {
      if (!secret_write) fail_msg("the token is in the body of %s %s", m, p);
      assert_non_null(strstr(body, "\"hosts\":[\"127.0.0.1\"]"));
      secret_posts++;
    }
    if (strstr(p, "/git/clone") || strstr(p, "/git/push"))
      if (strstr(body, "\"password\":\"dtn_secret_") && strstr(body, "\"username\":\"" USER "\""))
        git_placeholders++;
    if (strcmp(m, "PUT") == 0 && strstr(p, "/secrets") && strstr(body, "DBX_GIT_TOKEN")) mounts++;
  }
  cJSON_Delete(j);
  free(log);
  assert_true(secret_posts > 0);
  assert_true(mounts > 0);
  if (git_bodies) assert_true(git_placeholders > 0);
  char *rs = dbx_fake_daytona_call(f, "POST", "/_control/reset", "{}");
  assert_non_null(rs);
  free(rs);
}

/* Every secret durabox made is gone (deleted after each call). */
static void no_secret_left(const dbx_fake_daytona *f) {
  char *r = dbx_fake_daytona_call(f, "GET", "/_control/secrets", NULL);
  assert_non_null(r);
  if (strstr(r, "dbx_git_")) fail_msg("secrets left: %s", r);
  free(r);
}

static void test_git_cred_daytona(void **state) {
  (void)state;
  dbx_fake_daytona f;
  if (dbx_fake_daytona_start(&f, g_tmp) != 0) fail_msg("fake: %s", f.why);
  char faults[512];
  snprintf(faults, sizeof faults,
           "{\"transition_ms\":60,\"git_auth\":{\"username\":\"%s\",\"password\":\"%s\"}}", USER,
           g_token);
  assert_int_equal(dbx_fake_daytona_faults(&f, faults), 0);
  dbx_daytona *d = open_dt(&f, DBX_FAKE_DAYTONA_KEY);
  dbx_driver *drv = dbx_daytona_driver(d);
  dbx_drv_create_opts co = {0};
  assert_int_equal(drv->ops->create(drv->self, "gc-dt", &co, NULL), DBX_DRV_OK);
  clone_push_cases(drv, "gc-dt", f.root);
  /* the git refusals name the git credentials, not the API key */
  dbx_drv_git_cred bad = {USER, "nope"};
  assert_int_equal(drv->ops->git_push_cred(drv->self, "gc-dt", "w", g_url, "main", &bad),
                   DBX_DRV_AUTH);
  assert_non_null(strstr(drv->ops->errmsg(drv->self), "git remote refused the credentials"));
  /* the token went to Daytona once per call, as a secret's value (POST or
   * PATCH /secret, restricted to the remote's host); the git endpoints got
   * the username and the secret's placeholder, never the token */
  log_only_in_secrets(&f, 1);
  no_secret_left(&f);
  assert_int_equal(drv->ops->del(drv->self, "gc-dt"), DBX_DRV_OK);
  create_cases(drv, "gc-dt-src", f.root);
  log_only_in_secrets(&f, 0);
  no_secret_left(&f);
  dbx_daytona_close(d);
  dbx_fake_daytona_stop(&f);
}

/* Requests of method whose path has part and whose status is st (-1: any). */
static int log_count(const dbx_fake_daytona *f, const char *method, const char *part, int st) {
  char *log = dbx_fake_daytona_call(f, "GET", "/_control/log", NULL);
  assert_non_null(log);
  cJSON *j = cJSON_Parse(log);
  free(log);
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "requests")) {
    n += strcmp(cJSON_GetObjectItemCaseSensitive(e, "method")->valuestring, method) == 0 &&
         strstr(cJSON_GetObjectItemCaseSensitive(e, "path")->valuestring, part) != NULL &&
         (st < 0 || cJSON_GetObjectItemCaseSensitive(e, "status")->valueint == st);
  }
  cJSON_Delete(j);
  return n;
}

/* A fake Daytona in *f, the driver on it in *d, a sandbox name made on it,
 * and the remote's main back at the seed commit. */
static dbx_driver *dt_sandbox(dbx_fake_daytona *f, dbx_daytona **d, const char *name) {
  if (dbx_fake_daytona_start(f, g_tmp) != 0) fail_msg("fake: %s", f->why);
  assert_int_equal(dbx_fake_daytona_faults(f, "{\"transition_ms\":60}"), 0);
  *d = open_dt(f, DBX_FAKE_DAYTONA_KEY);
  dbx_driver *drv = dbx_daytona_driver(*d);
  dbx_drv_create_opts co = {0};
  assert_int_equal(drv->ops->create(drv->self, name, &co, NULL), DBX_DRV_OK);
  sh("git --git-dir=%s update-ref refs/heads/main %s", g_bare, g_seed);
  return drv;
}

/* The secret's idempotency and clean-up under faults: a POST /secret whose
 * reply is lost is sent again, meets 409 (the name is deterministic), and
 * the existing secret is found and updated: one secret, the clone works,
 * and it is deleted after. A delete of the secret that fails after the
 * clone fails the call (retryable), and the secret it left is deleted with
 * the sandbox. */
static void test_git_cred_daytona_secret_faults(void **state) {
  (void)state;
  dbx_fake_daytona f;
  dbx_daytona *d = NULL;
  dbx_driver *drv = dt_sandbox(&f, &d, "gc-sf");
  const dbx_driver_ops *o = drv->ops;
  dbx_drv_git_cred good = {USER, g_token};
  char *rs = dbx_fake_daytona_call(&f, "POST", "/_control/reset", "{}");
  free(rs);
  assert_int_equal(
      dbx_fake_daytona_faults(&f, "{\"drop_reply\":{\"match\":\"/api/secret\",\"count\":1}}"), 0);
  assert_int_equal(o->git_clone_cred(drv->self, "gc-sf", g_url, "w", NULL, &good), DBX_DRV_OK);
  assert_int_equal(log_count(&f, "POST", "/api/secret", 0), 1);   /* made, reply lost */
  assert_int_equal(log_count(&f, "POST", "/api/secret", 409), 1); /* sent again: exists */
  assert_int_equal(log_count(&f, "PATCH", "/api/secret/", 200), 1);
  assert_int_equal(log_count(&f, "POST", "/git/clone", 200), 1);
  assert_int_equal(log_count(&f, "DELETE", "/api/secret/", 204), 1);
  no_secret_left(&f);
  /* the secret's delete fails (twice: a 500 is tried once more) */
  assert_int_equal(dbx_fake_daytona_faults(
                       &f, "{\"http_error\":{\"match\":\"/api/secret/\",\"status\":500,\"count\":2}}"),
                   0);
  assert_int_not_equal(o->git_clone_cred(drv->self, "gc-sf", g_url, "w2", NULL, &good), DBX_DRV_OK);
  assert_null(strstr(o->errmsg(drv->self), g_token));
  char *left = dbx_fake_daytona_call(&f, "GET", "/_control/secrets", NULL);
  assert_non_null(left);
  assert_non_null(strstr(left, "dbx_git_")); /* left behind */
  free(left);
  assert_int_equal(o->del(drv->self, "gc-sf"), DBX_DRV_OK);
  no_secret_left(&f); /* deleted with the sandbox */
  dbx_daytona_close(d);
  dbx_fake_daytona_stop(&f);
}

/* A reply to POST /secret that quotes the request's body (a validating
 * proxy's 400, a gateway's 502) carries the token: into the driver's
 * message (an activity's failure: history) and into its retry warning (the
 * log; before the fix the warning of each 502 held it). The driver redacts
 * it from both. The 502s are tried again and the clone then works; the 400
 * fails the call. stderr (the log) goes to a file for each call. Each round
 * pads the quote so the token straddles where the driver cuts the reply's
 * words (400 bytes in a message, 256 in a warning): it is redacted before
 * the cut, never half shown. Round 2's token holds a quote, which the
 * echoed body escapes: that form is redacted too. Round 3's token is 3
 * bytes long (it is still redacted; git then refuses it). */
static void test_git_cred_daytona_echoed_token(void **state) {
  (void)state;
  dbx_fake_daytona f;
  dbx_daytona *d = NULL;
  dbx_driver *drv = dt_sandbox(&f, &d, "gc-echo");
  const dbx_driver_ops *o = drv->ops;
  dbx_drv_git_cred good = {USER, g_token};
  char *logf = dbx_asprintf("%s/echo.log", g_tmp);
  dbx_log_set_level(DBX_LOG_WARN);
  /* the token starts 51 bytes into the quote, after the pad */
  const char *faults[] = {
      "{\"echo_body\":{\"match\":\"/api/secret\",\"status\":400,\"count\":1,\"pad\":330}}",
      "{\"echo_body\":{\"match\":\"/api/secret\",\"status\":502,\"count\":2,\"pad\":190}}",
      "{\"echo_body\":{\"match\":\"/api/secret\",\"status\":400,\"count\":1}}",
      "{\"echo_body\":{\"match\":\"/api/secret\",\"status\":502,\"count\":1}}"};
  dbx_drv_git_cred quoted = {USER, "tok\"quoted-tail-7d1e"}, tiny = {USER, "Zq9"};
  for (int round = 0; round < 4; round++) {
    assert_int_equal(dbx_fake_daytona_faults(&f, faults[round]), 0);
    fflush(stderr);
    int saved = dup(2), fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
    char dir[16];
    snprintf(dir, sizeof dir, "e%d", round);
    dbx_drv_err rc =
        o->git_clone_cred(drv->self, "gc-echo", g_url, dir, NULL,
                          round == 2 ? &quoted : round == 3 ? &tiny : &good);
    char *msg = dbx_strdup(o->errmsg(drv->self));
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    char *lg = NULL;
    size_t ln = 0;
    assert_int_equal(dbx_fs_read_all(logf, &lg, &ln), DBX_OK);
    if (memmem(lg, ln, g_token, strlen(g_token))) fail_msg("the token is in the log: %s", lg);
    assert_null(strstr(msg, g_token));
    /* nor a piece of it, cut at the end of the words */
    if (memmem(lg, ln, g_token, 8)) fail_msg("part of the token is in the log: %s", lg);
    if (strstr(msg, "tok-")) fail_msg("part of the token is in the message: %s", msg);
    if (strstr(msg, "quoted-tail")) fail_msg("the quoted token is in the message: %s", msg);
    /* a 3-byte token is redacted too */
    if (memmem(lg, ln, "Zq9", 3) || strstr(msg, "Zq9")) fail_msg("Zq9 in %s / %s", lg, msg);
    if (round == 3) {
      /* the 502's warning marked it; then git refuses the token */
      assert_int_equal(rc, DBX_DRV_AUTH);
      assert_non_null(strstr(lg, "HTTP 502"));
      assert_non_null(strstr(lg, "[redacted:git token]"));
    } else if (round != 1) {
      /* refused: the message quotes the reply, the token marked */
      assert_int_not_equal(rc, DBX_DRV_OK);
      assert_non_null(strstr(msg, "HTTP 400"));
      assert_non_null(strstr(msg, "fault: refused body"));
      assert_non_null(strstr(msg, "[redacted:git")); /* the mark itself may be cut */
    } else {
      /* tried again after each 502, whose warning quotes the reply */
      if (rc != DBX_DRV_OK) fail_msg("clone after two 502s: %d %s", rc, msg);
      assert_non_null(strstr(lg, "HTTP 502"));
      assert_non_null(strstr(lg, "[redacted:git"));
      assert_int_equal(log_count(&f, "POST", "/api/secret", 502), 2);
      assert_int_equal(log_count(&f, "POST", "/git/clone", 200), 1);
    }
    free(lg);
    free(msg);
  }
  dbx_log_set_level(DBX_LOG_INFO);
  free(logf);
  no_secret_left(&f);
  assert_int_equal(o->del(drv->self, "gc-echo"), DBX_DRV_OK);
  dbx_daytona_close(d);
  dbx_fake_daytona_stop(&f);
}

/* 401 (a wrong key) and 403 (a key without the scope) from Daytona's API
 * are the non-retryable AUTH, naming the API key; never InvalidInput. */
static void test_daytona_api_auth_typed(void **state) {
  (void)state;
  dbx_fake_daytona f;
  if (dbx_fake_daytona_start(&f, g_tmp) != 0) fail_msg("fake: %s", f.why);
  assert_int_equal(dbx_fake_daytona_faults(&f, "{\"transition_ms\":60}"), 0);
  dbx_daytona *bad = open_dt(&f, "dtn_wrong_key");
  dbx_driver *bd = dbx_daytona_driver(bad);
  dbx_drv_create_opts co = {0};
  assert_int_equal(bd->ops->create(bd->self, "auth-1", &co, NULL), DBX_DRV_AUTH);
  const char *m = bd->ops->errmsg(bd->self);
  assert_non_null(strstr(m, "HTTP 401"));
  assert_non_null(strstr(m, "DAYTONA_API_KEY"));
  assert_null(strstr(m, "dtn_wrong_key"));
  dbx_drv_state st;
  assert_int_equal(bd->ops->exists(bd->self, "auth-1", &st), DBX_DRV_AUTH);
  dbx_daytona_close(bad);
  dbx_daytona *d = open_dt(&f, DBX_FAKE_DAYTONA_KEY);
  dbx_driver *drv = dbx_daytona_driver(d);
  assert_int_equal(drv->ops->create(drv->self, "auth-2", &co, NULL), DBX_DRV_OK);
  /* a 403 of the toolbox that is no FILE_ACCESS_DENIED (a proxy refusing
   * the key's scope), and one of the API */
  assert_int_equal(
      dbx_fake_daytona_faults(&f, "{\"http_error\":{\"match\":\"/files\",\"status\":403,\"count\":1}}"),
      0);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(drv->ops->file_read(drv->self, "auth-2", "x.txt", 0, &data, &len),
                   DBX_DRV_AUTH);
  assert_non_null(strstr(drv->ops->errmsg(drv->self), "HTTP 403"));
  assert_int_equal(
      dbx_fake_daytona_faults(&f, "{\"http_error\":{\"match\":\"/api/sandbox\",\"status\":403,\"count\":1}}"),
      0);
  assert_int_equal(drv->ops->stop(drv->self, "auth-2"), DBX_DRV_AUTH);
  assert_non_null(strstr(drv->ops->errmsg(drv->self), "API key"));
  /* a path outside the workspace stays PathRefused (the daemon's 403) */
  assert_int_equal(drv->ops->file_read(drv->self, "auth-2", "../../etc/passwd", 0, &data, &len),
                   DBX_DRV_PATH_REFUSED);
  assert_int_equal(drv->ops->del(drv->self, "auth-2"), DBX_DRV_OK);
  dbx_daytona_close(d);
  dbx_fake_daytona_stop(&f);
}

/* dbx_drv_git_cred_from_env: the default names, given names, unset. */
static void test_git_cred_from_env(void **state) {
  (void)state;
  dbx_drv_git_cred c;
  unsetenv("DBX_T_TOK");
  assert_int_equal(dbx_drv_git_cred_from_env(NULL, "DBX_T_TOK", &c), DBX_ENOTFOUND);
  assert_null(c.password);
  setenv("DBX_T_TOK", "", 1);
  assert_int_equal(dbx_drv_git_cred_from_env(NULL, "DBX_T_TOK", &c), DBX_ENOTFOUND);
  setenv("DBX_T_TOK", "abc", 1);
  unsetenv("DBX_T_USER");
  assert_int_equal(dbx_drv_git_cred_from_env("DBX_T_USER", "DBX_T_TOK", &c), DBX_OK);
  assert_string_equal(c.password, "abc");
  assert_string_equal(c.username, "x-access-token");
  setenv("DBX_T_USER", "me", 1);
  assert_int_equal(dbx_drv_git_cred_from_env("DBX_T_USER", "DBX_T_TOK", &c), DBX_OK);
  assert_string_equal(c.username, "me");
  setenv("GIT_TOKEN", "t2", 1);
  setenv("GIT_USERNAME", "u2", 1);
  assert_int_equal(dbx_drv_git_cred_from_env(NULL, NULL, &c), DBX_OK);
  assert_string_equal(c.password, "t2");
  assert_string_equal(c.username, "u2");
  unsetenv("GIT_TOKEN");
  unsetenv("GIT_USERNAME");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_git_cred_from_env),
      cmocka_unit_test(test_git_cred_local_plain),
      cmocka_unit_test(test_git_cred_local_bwrap),
      cmocka_unit_test(test_git_cred_daytona),
      cmocka_unit_test(test_git_cred_daytona_secret_faults),
      cmocka_unit_test(test_git_cred_daytona_echoed_token),
      cmocka_unit_test(test_daytona_api_auth_typed),
  };
  return cmocka_run_group_tests_name("git_cred", tests, setup, teardown);
}
