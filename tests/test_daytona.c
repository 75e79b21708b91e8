/* The Daytona driver (activities/daytona.h) against the fake Daytona server
 * (tests/fakes/daytona), started here on an ephemeral loopback port, under
 * the faults the reference names: a create whose reply is lost, a burst of
 * 429s with Retry-After, empty-body 502s, a sandbox deleted and made again
 * under one name; plus bytes through files (sha256), the headers every
 * request carries (and the key in none of the fake's records), a bad key,
 * the worker-wide quota, git against real repositories, and a checkpoint
 * restored by a create from it. The fake's request log (GET /_control/log)
 * is what the fault tests assert on. A missing python3 or fake fails the
 * group (never skips). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "activities/daytona.h"
#include "activities/driver.h"
#include "base/hash.h"
#include "base/util.h"
#include "tests/fakes/daytona/fake.h"
#include "tests/testutil.h"

static char *g_tmp;
static dbx_fake_daytona g_fake;
static dbx_daytona *g_dt;
static dbx_driver *g_drv;

#define OPS(op, ...) g_drv->ops->op(g_drv->self, __VA_ARGS__)

static dbx_daytona *open_driver(const char *key, int max_live, int64_t wait_ms) {
  dbx_daytona_opts o = {.api_url = g_fake.api_url, .api_key = key, .max_live = max_live,
                        .state_wait_ms = wait_ms, .snapshot_wait_ms = 3000};
  dbx_daytona *d = NULL;
  const char *why = NULL;
  assert_int_equal(dbx_daytona_open(&o, &d, &why), DBX_OK);
  return d;
}

static int setup(void **state) {
  (void)state;
  g_tmp = dbx_test_tmpdir("dbx-daytona");
  if (dbx_fake_daytona_start(&g_fake, g_tmp) != 0) {
    fprintf(stderr, "test_daytona: %s\n", g_fake.why);
    return -1;
  }
  if (dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}") != 0) return -1;
  dbx_daytona_opts o = {.api_url = g_fake.api_url, .api_key = DBX_FAKE_DAYTONA_KEY,
                        .state_wait_ms = 20000, .snapshot_wait_ms = 3000};
  const char *why = NULL;
  if (dbx_daytona_open(&o, &g_dt, &why) != DBX_OK) return -1;
  g_drv = dbx_daytona_driver(g_dt);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dbx_daytona_close(g_dt);
  g_dt = NULL;
  dbx_fake_daytona_stop(&g_fake);
  dbx_test_rmrf(g_tmp);
  free(g_tmp);
  return 0;
}

/* The fake's request log, parsed (cJSON_Delete). */
static cJSON *fake_log(void) {
  char *body = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
  assert_non_null(body);
  cJSON *j = cJSON_Parse(body);
  free(body);
  assert_non_null(j);
  return j;
}

static int count_named(const char *name) {
  char *body = dbx_fake_daytona_call(&g_fake, "GET", "/_control/sandboxes", NULL);
  assert_non_null(body);
  cJSON *j = cJSON_Parse(body);
  free(body);
  assert_non_null(j);
  int n = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "items")) {
    const cJSON *nm = cJSON_GetObjectItem(it, "name");
    n += cJSON_IsString(nm) && strcmp(nm->valuestring, name) == 0;
  }
  cJSON_Delete(j);
  return n;
}

static void reset_log(void) {
  char *r = dbx_fake_daytona_call(&g_fake, "POST", "/_control/reset", "{}");
  assert_non_null(r);
  free(r);
}

/* A create whose reply is lost after the fake made the sandbox: the driver
 * finds it by name and adopts it; exactly one sandbox exists afterwards. */
static void test_daytona_lost_create_reply_one_sandbox(void **state) {
  (void)state;
  reset_log();
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"drop_create_reply\":1}"), 0);
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "lost-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(count_named("lost-1"), 1);
  cJSON *log = fake_log();
  int posts = 0, dropped = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(log, "requests")) {
    if (strcmp(cJSON_GetObjectItem(e, "method")->valuestring, "POST") != 0 ||
        strcmp(cJSON_GetObjectItem(e, "path")->valuestring, "/api/sandbox") != 0)
      continue;
    posts++;
    dropped += cJSON_GetObjectItem(e, "status")->valueint == 0;
  }
  cJSON_Delete(log);
  assert_int_equal(dropped, 1); /* the fault happened */
  assert_true(posts >= 2);      /* and the driver asked again, by name */
  /* the sandbox works */
  assert_int_equal(OPS(file_write, "lost-1", "f", "x", 1), DBX_DRV_OK);
  assert_int_equal(OPS(del, "lost-1"), DBX_DRV_OK);
}

typedef struct {
  const char *name;
  dbx_drv_err rc;
} burst_arg;

static void *burst_create(void *p) {
  burst_arg *b = p;
  dbx_drv_create_opts o = {0};
  b->rc = OPS(create, b->name, &o, NULL);
  return NULL;
}

/* A burst of creates meets 429 with Retry-After: 1: every create finishes,
 * and the log shows each success at least a second after the first 429. */
static void test_daytona_429_burst_honours_retry_after(void **state) {
  (void)state;
  reset_log();
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"create_429\":3,\"retry_after\":1}"), 0);
  pthread_t t[3];
  burst_arg a[3] = {{"burst-0", -1}, {"burst-1", -1}, {"burst-2", -1}};
  for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&t[i], NULL, burst_create, &a[i]), 0);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(a[i].rc, DBX_DRV_OK);
    assert_int_equal(count_named(a[i].name), 1);
  }
  cJSON *log = fake_log();
  double first429 = 0;
  int n429 = 0, n200 = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(log, "requests")) {
    if (strcmp(cJSON_GetObjectItem(e, "path")->valuestring, "/api/sandbox") != 0 ||
        strcmp(cJSON_GetObjectItem(e, "method")->valuestring, "POST") != 0)
      continue;
    int st = cJSON_GetObjectItem(e, "status")->valueint;
    double t0 = cJSON_GetObjectItem(e, "t")->valuedouble;
    if (st == 429) {
      if (n429++ == 0) first429 = t0;
    } else if (st == 200) {
      n200++;
      assert_true(n429 > 0);
      assert_true(t0 - first429 >= 1.0); /* waited Retry-After */
    }
  }
  cJSON_Delete(log);
  assert_int_equal(n429, 3);
  assert_int_equal(n200, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(OPS(del, a[i].name), DBX_DRV_OK);
}

/* Empty-body 502s: a GET is tried again and succeeds; a POST that is not
 * safe to repeat (git commit) is not, and its message names the status,
 * the endpoint and the empty body. */
static void test_daytona_empty_502(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "e502", &o, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "e502", "f.txt", "hello", 5), DBX_DRV_OK);
  reset_log();
  assert_int_equal(
      dbx_fake_daytona_faults(&g_fake, "{\"empty_502\":{\"match\":\"/files/download\",\"count\":2}}"), 0);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "e502", "f.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 5);
  assert_memory_equal(data, "hello", 5);
  free(data);
  cJSON *log = fake_log();
  int n502 = 0, n200 = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(log, "requests")) {
    if (strstr(cJSON_GetObjectItem(e, "path")->valuestring, "/files/download") == NULL) continue;
    int st = cJSON_GetObjectItem(e, "status")->valueint;
    n502 += st == 502;
    n200 += st == 200;
  }
  cJSON_Delete(log);
  assert_int_equal(n502, 2);
  assert_int_equal(n200, 1);

  /* a repository, then a commit that meets one 502 */
  const char *git = "git init -q . && git -c user.name=t -c user.email=t@e commit -q --allow-empty -m i";
  dbx_drv_exec_opts eo = {.command = git};
  assert_int_equal(OPS(exec_start, "e502", "gitinit", &eo, NULL), DBX_DRV_OK);
  dbx_drv_cmd_status st;
  for (int i = 0; i < 2000; i++) {
    assert_int_equal(OPS(exec_poll, "e502", "gitinit", &st), DBX_DRV_OK);
    if (st.state == DBX_DRV_CMD_FINISHED) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(st.state, DBX_DRV_CMD_FINISHED);
  assert_int_equal(
      dbx_fake_daytona_faults(&g_fake, "{\"empty_502\":{\"match\":\"/git/commit\",\"count\":1}}"), 0);
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(OPS(git_commit, "e502", NULL, "m", "A <a@b>", &sha, &nothing), DBX_DRV_TRANSIENT);
  const char *m = g_drv->ops->errmsg(g_drv->self);
  assert_non_null(strstr(m, "HTTP 502"));
  assert_non_null(strstr(m, "/git/commit"));
  assert_non_null(strstr(m, "(empty body)"));
  assert_int_equal(OPS(git_commit, "e502", NULL, "m", "A <a@b>", &sha, &nothing), DBX_DRV_OK);
  assert_int_equal(nothing, 0);
  assert_int_equal(strlen(sha), 40);
  free(sha);
  assert_int_equal(OPS(del, "e502"), DBX_DRV_OK);
}

static void sha_hex(const void *p, size_t n, char out[DBX_SHA256_HEX_LEN + 1]) {
  assert_int_equal(dbx_sha256_hex(p, n, out), DBX_OK);
}

/* 1 MiB of every byte value and pseudo-random bytes, through file_write /
 * file_read and through upload / download: sha256 equal both ways. */
static void test_daytona_binary_round_trip_sha256(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "bin-1", &o, NULL), DBX_DRV_OK);
  size_t n = (size_t)1 << 20;
  uint8_t *b = malloc(n);
  assert_non_null(b);
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b[i] = i < 256 ? (uint8_t)i : (uint8_t)x;
  }
  char want[DBX_SHA256_HEX_LEN + 1], got[DBX_SHA256_HEX_LEN + 1];
  sha_hex(b, n, want);
  assert_int_equal(OPS(file_write, "bin-1", "data/blob.bin", b, n), DBX_DRV_OK);
  uint8_t *back = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "bin-1", "data/blob.bin", 0, &back, &len), DBX_DRV_OK);
  assert_int_equal(len, n);
  sha_hex(back, len, got);
  assert_string_equal(got, want);
  free(back);
  /* host file -> sandbox -> host file */
  char *up = dbx_asprintf("%s/up.bin", g_tmp), *down = dbx_asprintf("%s/down.bin", g_tmp);
  FILE *f = fopen(up, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
  assert_int_equal(OPS(upload, "bin-1", up, "in/up.bin"), DBX_DRV_OK);
  assert_int_equal(OPS(download, "bin-1", "in/up.bin", down), DBX_DRV_OK);
  f = fopen(down, "rb");
  assert_non_null(f);
  uint8_t *d2 = malloc(n + 16);
  assert_non_null(d2);
  size_t r = fread(d2, 1, n + 16, f);
  fclose(f);
  assert_int_equal(r, n);
  sha_hex(d2, r, got);
  assert_string_equal(got, want);
  free(d2);
  free(b);
  free(up);
  free(down);
  /* an empty file is a file */
  assert_int_equal(OPS(file_write, "bin-1", "empty", "", 0), DBX_DRV_OK);
  assert_int_equal(OPS(file_read, "bin-1", "empty", 0, &back, &len), DBX_DRV_OK);
  assert_int_equal(len, 0);
  free(back);
  assert_int_equal(OPS(del, "bin-1"), DBX_DRV_OK);
}

/* Every request carries the key as a Bearer token (the fake checks it), the
 * SDK-version header and the source; the key is in none of the fake's
 * records; a wrong key is the non-retryable AUTH (AuthFailed, not
 * InvalidInput) naming 401, the endpoint and DAYTONA_API_KEY, without the
 * key. */
static void test_daytona_headers_and_bad_key(void **state) {
  (void)state;
  reset_log();
  dbx_drv_state st;
  assert_int_equal(OPS(exists, "nobody", &st), DBX_DRV_NO_SANDBOX);
  dbx_daytona *bad = open_driver("dtn_wrong_key_123", 0, 2000);
  dbx_driver *bd = dbx_daytona_driver(bad);
  dbx_drv_create_opts o = {0};
  assert_int_equal(bd->ops->create(bd->self, "badkey", &o, NULL), DBX_DRV_AUTH);
  const char *m = bd->ops->errmsg(bd->self);
  assert_non_null(strstr(m, "HTTP 401"));
  assert_non_null(strstr(m, "DAYTONA_API_KEY"));
  assert_non_null(strstr(m, "/api/sandbox"));
  assert_null(strstr(m, "dtn_wrong_key_123"));
  dbx_daytona_close(bad);
  char *raw = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
  assert_non_null(raw);
  assert_null(strstr(raw, DBX_FAKE_DAYTONA_KEY));
  assert_null(strstr(raw, "dtn_wrong_key_123"));
  cJSON *log = cJSON_Parse(raw);
  free(raw);
  int good = 0, refused = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(log, "requests")) {
    assert_string_equal(cJSON_GetObjectItem(e, "sdk_version")->valuestring, DBX_DAYTONA_SDK_VERSION);
    assert_string_equal(cJSON_GetObjectItem(e, "source")->valuestring, "durabox");
    if (cJSON_IsTrue(cJSON_GetObjectItem(e, "auth"))) good++;
    else refused++;
  }
  cJSON_Delete(log);
  assert_true(good >= 1);
  assert_int_equal(refused, 1); /* 401 is not tried again */
  /* no key at all: the driver does not open */
  dbx_daytona *none = NULL;
  const char *why = NULL;
  unsetenv("DAYTONA_API_KEY");
  dbx_daytona_opts no = {.api_url = g_fake.api_url};
  assert_int_equal(dbx_daytona_open(&no, &none, &why), DBX_EINVAL);
  assert_non_null(strstr(why, "DAYTONA_API_KEY"));
}

/* The worker-wide quota of live sandboxes: a create over it waits, then
 * answers TRANSIENT; once one is deleted the next create goes through. */
static void test_daytona_quota_live_sandboxes(void **state) {
  (void)state;
  dbx_daytona *q = open_driver(DBX_FAKE_DAYTONA_KEY, 1, 1500);
  dbx_driver *qd = dbx_daytona_driver(q);
  dbx_drv_create_opts o = {0};
  assert_int_equal(qd->ops->create(qd->self, "quota-1", &o, NULL), DBX_DRV_OK);
  int64_t t0 = dbx_mono_ns();
  assert_int_equal(qd->ops->create(qd->self, "quota-2", &o, NULL), DBX_DRV_TRANSIENT);
  assert_true((dbx_mono_ns() - t0) / 1000000 >= 1400);
  assert_non_null(strstr(qd->ops->errmsg(qd->self), "quota"));
  assert_int_equal(count_named("quota-2"), 0);
  assert_int_equal(qd->ops->del(qd->self, "quota-1"), DBX_DRV_OK);
  assert_int_equal(qd->ops->create(qd->self, "quota-2", &o, NULL), DBX_DRV_OK);
  assert_int_equal(qd->ops->del(qd->self, "quota-2"), DBX_DRV_OK);
  dbx_daytona_close(q);

  /* creates per minute: the third of a limit of 2 waits, then gives up */
  dbx_daytona_opts ro = {.api_url = g_fake.api_url, .api_key = DBX_FAKE_DAYTONA_KEY,
                         .creates_per_min = 2, .state_wait_ms = 1500};
  dbx_daytona *r = NULL;
  assert_int_equal(dbx_daytona_open(&ro, &r, NULL), DBX_OK);
  dbx_driver *rd = dbx_daytona_driver(r);
  assert_int_equal(rd->ops->create(rd->self, "rate-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(rd->ops->create(rd->self, "rate-2", &o, NULL), DBX_DRV_OK);
  t0 = dbx_mono_ns();
  assert_int_equal(rd->ops->create(rd->self, "rate-3", &o, NULL), DBX_DRV_TRANSIENT);
  assert_true((dbx_mono_ns() - t0) / 1000000 >= 1400);
  assert_non_null(strstr(rd->ops->errmsg(rd->self), "creates per minute"));
  assert_int_equal(count_named("rate-3"), 0);
  /* an adoption is no create: it does not count */
  assert_int_equal(rd->ops->create(rd->self, "rate-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(rd->ops->del(rd->self, "rate-1"), DBX_DRV_OK);
  assert_int_equal(rd->ops->del(rd->self, "rate-2"), DBX_DRV_OK);
  dbx_daytona_close(r);
}

/* Deleted and made again under one name at once: the create meets 409
 * while the old one is destroyed, waits, and makes exactly one. */
static void test_daytona_recreate_while_destroying(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "again-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "again-1", "old.txt", "x", 1), DBX_DRV_OK);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":400}"), 0);
  assert_int_equal(OPS(del, "again-1"), DBX_DRV_OK);
  int adopted = -1;
  dbx_drv_err rc = OPS(create, "again-1", &o, &adopted);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}"), 0);
  assert_int_equal(rc, DBX_DRV_OK);
  assert_int_equal(adopted, 0);
  assert_int_equal(count_named("again-1"), 1);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "again-1", "old.txt", 0, &data, &len), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(del, "again-1"), DBX_DRV_OK);
}

static char *sh_out(const char *cmd) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[128] = "";
  char *r = fgets(line, sizeof line, p);
  pclose(p);
  if (r == NULL) return NULL;
  line[strcspn(line, "\n")] = 0;
  return dbx_strdup(line);
}

/* git clone (a stale target cleared first), commit, push to a bare
 * repository: the pushed sha is the commit's; a GIT source is cloned at
 * create. */
static void test_daytona_git_clone_commit_push(void **state) {
  (void)state;
  char *repo = dbx_asprintf("%s/repo", g_tmp), *bare = dbx_asprintf("%s/bare.git", g_tmp);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init && "
                           "git init -q --bare %s",
                           repo, repo, bare);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "git-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "git-1", "src/stale.txt", "x", 1), DBX_DRV_OK);
  assert_int_equal(OPS(git_clone, "git-1", repo, "src", NULL), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "git-1", "src/a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(data, "one\n", 4);
  free(data);
  assert_int_equal(OPS(file_read, "git-1", "src/stale.txt", 0, &data, &len), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(git_clone, "git-1", repo, "../out", NULL), DBX_DRV_PATH_REFUSED);
  char *nope = dbx_asprintf("%s/no-such-repo", g_tmp);
  assert_int_equal(OPS(git_clone, "git-1", nope, "other", NULL), DBX_DRV_FAILED);
  free(nope);
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(OPS(git_commit, "git-1", "src", "m", "A <a@b>", &sha, &nothing), DBX_DRV_OK);
  assert_int_equal(nothing, 1);
  assert_null(sha);
  assert_int_equal(OPS(file_write, "git-1", "src/a.txt", "two\n", 4), DBX_DRV_OK);
  assert_int_equal(OPS(git_commit, "git-1", "src", "change", "A <a@b>", &sha, &nothing), DBX_DRV_OK);
  assert_int_equal(nothing, 0);
  assert_int_equal(strlen(sha), 40);
  assert_int_equal(OPS(git_push, "git-1", "src", bare, NULL), DBX_DRV_OK);
  cmd = dbx_asprintf("git --git-dir=%s rev-parse refs/heads/main", bare);
  char *pushed = sh_out(cmd);
  free(cmd);
  assert_non_null(pushed);
  assert_string_equal(pushed, sha);
  free(pushed);
  free(sha);
  assert_int_equal(OPS(git_push, "git-1", "none", bare, NULL), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(del, "git-1"), DBX_DRV_OK);
  /* a GIT source */
  dbx_drv_create_opts g = {.source = {DBX_DRV_SOURCE_GIT, repo, NULL}};
  assert_int_equal(OPS(create, "git-2", &g, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_read, "git-2", "a.txt", 0, &data, &len), DBX_DRV_OK);
  assert_memory_equal(data, "one\n", 4);
  free(data);
  int adopted = 0;
  assert_int_equal(OPS(create, "git-2", &g, &adopted), DBX_DRV_OK);
  assert_int_equal(adopted, 1);
  assert_int_equal(OPS(del, "git-2"), DBX_DRV_OK);
  free(repo);
  free(bare);
}

/* A checkpoint is restored by a create from it (restore itself is
 * UNSUPPORTED); the snapshot delete counts a missing one as done. */
static void test_daytona_checkpoint_then_create_from_it(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "ck-src", &o, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "ck-src", "keep.txt", "v1", 2), DBX_DRV_OK);
  char *ref = NULL;
  assert_int_equal(OPS(checkpoint, "ck-src", "ck-src-1", &ref), DBX_DRV_OK);
  assert_string_equal(ref, "ck-src-1");
  assert_int_equal(OPS(restore, "ck-src", ref), DBX_DRV_UNSUPPORTED);
  dbx_drv_create_opts from = {.source = {DBX_DRV_SOURCE_SNAPSHOT, ref, NULL}};
  assert_int_equal(OPS(create, "ck-copy", &from, NULL), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "ck-copy", "keep.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 2);
  assert_memory_equal(data, "v1", 2);
  free(data);
  assert_int_equal(OPS(snapshot_delete, ref), DBX_DRV_OK);
  assert_int_equal(OPS(snapshot_delete, ref), DBX_DRV_OK);
  dbx_drv_create_opts gone = {.source = {DBX_DRV_SOURCE_SNAPSHOT, ref, NULL}};
  assert_int_equal(OPS(create, "ck-none", &gone, NULL), DBX_DRV_SOURCE_NOT_FOUND);
  free(ref);
  assert_int_equal(OPS(del, "ck-src"), DBX_DRV_OK);
  assert_int_equal(OPS(del, "ck-copy"), DBX_DRV_OK);
}

static void wait_cmd(const char *sb, const char *cmd) {
  dbx_drv_cmd_status st = {0};
  for (int i = 0; i < 2000; i++) {
    assert_int_equal(OPS(exec_poll, sb, cmd, &st), DBX_DRV_OK);
    if (st.state == DBX_DRV_CMD_FINISHED) return;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  fail_msg("command %s did not finish", cmd);
}

static int count_requests(const char *method, const char *path_part, int status) {
  cJSON *log = fake_log();
  int n = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItem(log, "requests")) {
    n += strcmp(cJSON_GetObjectItem(e, "method")->valuestring, method) == 0 &&
         strstr(cJSON_GetObjectItem(e, "path")->valuestring, path_part) != NULL &&
         (status < 0 || cJSON_GetObjectItem(e, "status")->valueint == status);
  }
  cJSON_Delete(log);
  return n;
}

/* A command start whose reply is lost after the daemon took it, or that
 * meets an empty-body 502 before it: the driver reads the session to learn
 * which, and the command runs exactly once either way. */
static void test_daytona_exec_start_outcome_checked(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "ex-once", &o, NULL), DBX_DRV_OK);
  dbx_drv_exec_opts eo = {.command = "echo x >> runs.txt"};
  reset_log();
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"drop_reply\":{\"match\":\"/exec\",\"count\":1}}"), 0);
  assert_int_equal(OPS(exec_start, "ex-once", "c-drop", &eo, NULL), DBX_DRV_OK);
  wait_cmd("ex-once", "c-drop");
  assert_int_equal(count_requests("POST", "/exec", -1), 1); /* not sent again */
  reset_log();
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"empty_502\":{\"match\":\"/exec\",\"count\":1}}"), 0);
  assert_int_equal(OPS(exec_start, "ex-once", "c-502", &eo, NULL), DBX_DRV_OK);
  wait_cmd("ex-once", "c-502");
  assert_int_equal(count_requests("POST", "/exec", 502), 1);
  assert_int_equal(count_requests("POST", "/exec", 202), 1); /* sent again: it had not run */
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "ex-once", "runs.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 4);
  assert_memory_equal(data, "x\nx\n", 4); /* once each */
  free(data);
  assert_int_equal(OPS(del, "ex-once"), DBX_DRV_OK);
}

/* 1 if a file named sandbox-HOME/.dbx/<name> exists in a sandbox of the
 * fake (<root>/sb/<id>/home). */
static int dbx_file_there(const char *name) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "ls %s/sb/*/home/.dbx/%s >/dev/null 2>&1", g_fake.root, name);
  return system(cmd) == 0;
}

/* The raw output copies the exec wrapper keeps in the sandbox are cleared
 * once the result is made: at once when the log alone gave it (a retry
 * gets the same from the log); when the result came from them (bytes that
 * are no UTF-8), they stay, marked read, for a retry until the next command
 * started in the sandbox, which removes them, so the result of a re-attach
 * is still byte-exact. */
static void test_daytona_raw_copies_cleared(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "raw-clr", &o, NULL), DBX_DRV_OK);
  dbx_drv_exec_opts text = {.command = "echo text-only"};
  assert_int_equal(OPS(exec_start, "raw-clr", "c-text", &text, NULL), DBX_DRV_OK);
  wait_cmd("raw-clr", "c-text");
  assert_true(dbx_file_there("c-text.raw.out")); /* the wrapper wrote them */
  dbx_drv_exec_result r;
  assert_int_equal(OPS(exec_result, "raw-clr", "c-text", &r), DBX_DRV_OK);
  assert_int_equal(r.stdout_len, 10);
  assert_memory_equal(r.stdout_buf, "text-only\n", 10);
  dbx_drv_exec_result_cleanup(&r);
  assert_false(dbx_file_there("c-text.raw.out"));
  assert_false(dbx_file_there("c-text.raw.err"));
  assert_false(dbx_file_there("c-text.read"));
  /* bytes that are no UTF-8: the result comes from the raw copy */
  dbx_drv_exec_opts bin = {.command = "printf 'a\\377b'"};
  assert_int_equal(OPS(exec_start, "raw-clr", "c-bin", &bin, NULL), DBX_DRV_OK);
  wait_cmd("raw-clr", "c-bin");
  for (int i = 0; i < 2; i++) { /* the first attempt, then a retry that re-attaches */
    assert_int_equal(OPS(exec_result, "raw-clr", "c-bin", &r), DBX_DRV_OK);
    assert_int_equal(r.stdout_len, 3);
    assert_memory_equal(r.stdout_buf, "a\377b", 3);
    dbx_drv_exec_result_cleanup(&r);
    assert_true(dbx_file_there("c-bin.raw.out"));
    assert_true(dbx_file_there("c-bin.read"));
  }
  /* the next command clears them */
  assert_int_equal(OPS(exec_start, "raw-clr", "c-next", &text, NULL), DBX_DRV_OK);
  wait_cmd("raw-clr", "c-next");
  assert_false(dbx_file_there("c-bin.raw.out"));
  assert_false(dbx_file_there("c-bin.raw.err"));
  assert_false(dbx_file_there("c-bin.read"));
  assert_true(dbx_file_there("c-next.raw.out")); /* its own, until its result */
  assert_int_equal(OPS(del, "raw-clr"), DBX_DRV_OK);
}

/* 409 "state change in progress" on stop: the driver waits for the state
 * to settle and decides again, until the stop goes through. */
static void test_daytona_409_during_transition(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "tr-409", &o, NULL), DBX_DRV_OK);
  reset_log();
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"lifecycle_409\":2}"), 0);
  assert_int_equal(OPS(stop, "tr-409"), DBX_DRV_OK);
  dbx_drv_state st = DBX_DRV_RUNNING;
  assert_int_equal(OPS(exists, "tr-409", &st), DBX_DRV_OK);
  assert_int_equal(st, DBX_DRV_STOPPED);
  assert_int_equal(count_requests("POST", "/stop", 409), 2);
  assert_int_equal(count_requests("POST", "/stop", 200), 1);
  assert_int_equal(OPS(del, "tr-409"), DBX_DRV_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_daytona_lost_create_reply_one_sandbox),
      cmocka_unit_test(test_daytona_429_burst_honours_retry_after),
      cmocka_unit_test(test_daytona_empty_502),
      cmocka_unit_test(test_daytona_binary_round_trip_sha256),
      cmocka_unit_test(test_daytona_headers_and_bad_key),
      cmocka_unit_test(test_daytona_quota_live_sandboxes),
      cmocka_unit_test(test_daytona_recreate_while_destroying),
      cmocka_unit_test(test_daytona_git_clone_commit_push),
      cmocka_unit_test(test_daytona_checkpoint_then_create_from_it),
      cmocka_unit_test(test_daytona_exec_start_outcome_checked),
      cmocka_unit_test(test_daytona_raw_copies_cleared),
      cmocka_unit_test(test_daytona_409_during_transition),
  };
  return cmocka_run_group_tests_name("daytona", tests, setup, teardown);
}
