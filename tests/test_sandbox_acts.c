/* Sandbox activities (activities/sandbox.h) driven through a fake dbx_act
 * (act_fake.h), run against two drivers:
 *   local   real processes, files and git in a temporary DURABOX_HOME
 *           (every test);
 *   memory  the in-memory driver (activities/memdrv.h) whose commands are
 *           interpreted by mini_sh below (the tests whose commands it
 *           understands), asserting the same results and failure types.
 * Then the driver interface itself: each op on both drivers, each typed
 * error mapped to its Temporal failure type, and two drivers over two homes
 * in one process at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "activities/daytona.h"
#include "activities/driver.h"
#include "activities/local.h"
#include "activities/memdrv.h"
#include "activities/sandbox.h"
#include "base/alloc.h"
#include "base/util.h"
#include "tests/act_fake.h"
#include "tests/fakes/daytona/fake.h"
#include "base/fs.h"
#include "tests/testutil.h"

static char *g_home;
static char *g_tmp; /* for host-side fixtures (a git repository) */

/* The driver of the group being run, and the activity types over it. */
static dbx_local *g_local;   /* the local group's driver, else NULL */
static dbx_memdrv *g_mem;    /* the memory group's driver, else NULL */
static dbx_daytona *g_dt;    /* the daytona group's driver (over the fake), else NULL */
static dbx_fake_daytona g_fake;
static dbx_driver *g_drv;
static dbx_sandbox_acts *g_acts;

#define T(x) dbx_sandbox_acts_type(g_acts, "sandbox." #x)

/* ---- mini_sh: the memory driver's commands ----
 * A few shell forms, enough for the shared tests, with the shell's results:
 * statements split on ';' (outside quotes); words with '...' and "..."
 * quoting and $NAME expansion (from the command's env); a trailing ">&2"
 * sends a statement's output to stderr, "> f" / ">> f" to a workspace file.
 * Statements: echo, printf (%s and \NNN, \n, \\ escapes), exit N, true,
 * touch F, sleep N (adds N s to the command's run time), exec CMD (as CMD).
 * Anything else writes "sh: CMD: not found" to stderr and exits 127. */

typedef struct {
  char *p;
  size_t n, cap;
} buf_t;

static void buf_add(buf_t *b, const void *p, size_t n) {
  if (b->n + n + 1 > b->cap) {
    b->cap = (b->n + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  b->p[b->n] = 0;
}

static const char *env_get(const dbx_drv_exec_opts *o, const char *name, size_t n) {
  for (size_t i = 0; o->env && o->env[i]; i++)
    if (strncmp(o->env[i], name, n) == 0 && o->env[i][n] == '=') return o->env[i] + n + 1;
  return "";
}

/* Split one statement into words (expanded); returns the count. */
static int sh_words(const dbx_drv_exec_opts *o, const char *s, size_t len, char **w, int max) {
  int nw = 0;
  size_t i = 0;
  while (i < len && nw < max) {
    while (i < len && s[i] == ' ') i++;
    if (i >= len) break;
    buf_t b = {0};
    buf_add(&b, "", 0);
    while (i < len && s[i] != ' ') {
      char q = s[i];
      if (q == '\'') {
        size_t e = i + 1;
        while (e < len && s[e] != '\'') e++;
        buf_add(&b, s + i + 1, e - i - 1);
        i = e + 1;
      } else if (q == '"' || q == '$') {
        size_t e = q == '"' ? i + 1 : i;
        size_t stop = len;
        if (q == '"') {
          stop = e;
          while (stop < len && s[stop] != '"') stop++;
        }
        while (e < stop && (q == '"' || e == i)) {
          if (s[e] == '$') {
            size_t v = e + 1;
            while (v < len && (s[v] == '_' || (s[v] >= 'A' && s[v] <= 'Z') ||
                               (s[v] >= 'a' && s[v] <= 'z') || (s[v] >= '0' && s[v] <= '9')))
              v++;
            const char *val = env_get(o, s + e + 1, v - e - 1);
            buf_add(&b, val, strlen(val));
            e = v;
            if (q == '$') break;
          } else {
            buf_add(&b, s + e, 1);
            e++;
          }
        }
        i = q == '"' ? stop + 1 : e;
      } else {
        buf_add(&b, s + i, 1);
        i++;
      }
    }
    w[nw++] = b.p;
  }
  return nw;
}

/* printf's format: %s takes the next argument, backslash escapes. */
static void sh_printf(buf_t *out, char **w, int nw) {
  const char *f = w[1];
  int arg = 2;
  for (size_t i = 0; f[i]; i++) {
    if (f[i] == '%' && f[i + 1] == 's') {
      const char *a = arg < nw ? w[arg++] : "";
      buf_add(out, a, strlen(a));
      i++;
    } else if (f[i] == '\\' && f[i + 1] >= '0' && f[i + 1] <= '7') {
      int v = 0, k = 0;
      while (k < 3 && f[i + 1] >= '0' && f[i + 1] <= '7') v = v * 8 + (f[++i] - '0'), k++;
      char c = (char)v;
      buf_add(out, &c, 1);
    } else if (f[i] == '\\' && f[i + 1] == 'n') {
      buf_add(out, "\n", 1);
      i++;
    } else if (f[i] == '\\' && f[i + 1] == '\\') {
      buf_add(out, "\\", 1);
      i++;
    } else {
      buf_add(out, f + i, 1);
    }
  }
}

static void mini_sh(void *ud, dbx_driver *drv, const char *sandbox, const dbx_drv_exec_opts *o,
                    dbx_memdrv_exec_out *res) {
  (void)ud;
  buf_t out = {0}, err = {0};
  buf_add(&out, "", 0);
  buf_add(&err, "", 0);
  const char *c = o->command;
  size_t n = strlen(c);
  for (size_t i = 0; i < n && res->exit_code == 0;) {
    size_t e = i;
    char q = 0;
    while (e < n && (q || c[e] != ';')) {
      if (q && c[e] == q) q = 0;
      else if (!q && (c[e] == '\'' || c[e] == '"')) q = c[e];
      e++;
    }
    char *w[32];
    int nw = sh_words(o, c + i, e - i, w, 32);
    i = e + 1;
    if (nw == 0) continue;
    int first = strcmp(w[0], "exec") == 0 && nw > 1 ? 1 : 0;
    buf_t line = {0};
    buf_add(&line, "", 0);
    const char *to_file = NULL;
    int append = 0, to_err = 0;
    if (nw >= 2 && strcmp(w[nw - 1], ">&2") == 0) to_err = 1, nw--;
    if (nw >= 3 && (strcmp(w[nw - 2], ">") == 0 || strcmp(w[nw - 2], ">>") == 0)) {
      to_file = w[nw - 1];
      append = w[nw - 2][1] == '>';
      nw -= 2;
    }
    const char *cmd = w[first];
    if (strcmp(cmd, "echo") == 0) {
      for (int k = first + 1; k < nw; k++) {
        if (k > first + 1) buf_add(&line, " ", 1);
        buf_add(&line, w[k], strlen(w[k]));
      }
      buf_add(&line, "\n", 1);
    } else if (strcmp(cmd, "printf") == 0 && nw > first + 1) {
      sh_printf(&line, w + first, nw - first);
    } else if (strcmp(cmd, "seq") == 0 && nw == first + 3) { /* seq FIRST LAST */
      char num[32];
      for (long v = atol(w[first + 1]), last = atol(w[first + 2]); v <= last; v++) {
        int nn = snprintf(num, sizeof num, "%ld\n", v);
        buf_add(&line, num, (size_t)nn);
      }
    } else if (strcmp(cmd, "exit") == 0) {
      res->exit_code = nw > first + 1 ? atoi(w[first + 1]) : 0;
    } else if (strcmp(cmd, "sleep") == 0 && nw > first + 1) {
      res->duration_ms += (int64_t)(atof(w[first + 1]) * 1000);
    } else if (strcmp(cmd, "touch") == 0 && nw > first + 1) {
      drv->ops->file_write(drv->self, sandbox, w[first + 1], "", 0);
    } else if (strcmp(cmd, "true") != 0) {
      buf_add(&err, "sh: ", 4);
      buf_add(&err, cmd, strlen(cmd));
      buf_add(&err, ": not found\n", 12);
      res->exit_code = 127;
    }
    if (to_file) {
      uint8_t *old = NULL;
      size_t ol = 0;
      buf_t f = {0};
      buf_add(&f, "", 0);
      if (append && drv->ops->file_read(drv->self, sandbox, to_file, 0, &old, &ol) == DBX_DRV_OK)
        buf_add(&f, old, ol);
      free(old);
      buf_add(&f, line.p, line.n);
      drv->ops->file_write(drv->self, sandbox, to_file, f.p, f.n);
      free(f.p);
    } else {
      buf_add(to_err ? &err : &out, line.p, line.n);
    }
    free(line.p);
    for (int k = 0; k < nw + (to_file ? 2 : 0) + to_err; k++) free(w[k]);
  }
  res->stdout_buf = (uint8_t *)out.p;
  res->stdout_len = out.n;
  res->stderr_buf = (uint8_t *)err.p;
  res->stderr_len = err.n;
}

/* ---- group fixtures ---- */

static int common_setup(void) {
  g_home = dbx_test_tmpdir("dbx-acts-home");
  g_tmp = dbx_test_tmpdir("dbx-acts-tmp");
  setenv("DURABOX_HOME", g_home, 1);
  return 0;
}

static int local_setup(void **state) {
  (void)state;
  common_setup();
  if (dbx_local_open(NULL, &g_local) != DBX_OK) return -1;
  g_drv = dbx_local_driver(g_local);
  return dbx_sandbox_acts_create(g_drv, &g_acts) == DBX_OK ? 0 : -1;
}

static int mem_setup(void **state) {
  (void)state;
  common_setup();
  dbx_memdrv_opts o = {.exec = mini_sh};
  if (dbx_memdrv_create(&o, &g_mem) != DBX_OK) return -1;
  g_drv = dbx_memdrv_driver(g_mem);
  return dbx_sandbox_acts_create(g_drv, &g_acts) == DBX_OK ? 0 : -1;
}

/* The Daytona driver against the fake server (tests/fakes/daytona), started
 * here as a subprocess on an ephemeral loopback port: a missing python3 or
 * fake fails the group's setup (every test of it fails; none is skipped). */
static int daytona_setup(void **state) {
  (void)state;
  common_setup();
  if (dbx_fake_daytona_start(&g_fake, g_tmp) != 0) {
    fprintf(stderr, "daytona group: %s\n", g_fake.why);
    return -1;
  }
  if (dbx_fake_daytona_faults(&g_fake, "{\"transition_ms\":60}") != 0) return -1;
  dbx_daytona_opts o = {.api_url = g_fake.api_url, .api_key = DBX_FAKE_DAYTONA_KEY,
                        .state_wait_ms = 20000, .snapshot_wait_ms = 3000};
  const char *why = NULL;
  if (dbx_daytona_open(&o, &g_dt, &why) != DBX_OK) {
    fprintf(stderr, "daytona group: %s\n", why ? why : "open failed");
    return -1;
  }
  g_drv = dbx_daytona_driver(g_dt);
  return dbx_sandbox_acts_create(g_drv, &g_acts) == DBX_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  dbx_sandbox_acts_destroy(g_acts);
  g_acts = NULL;
  dbx_daytona_close(g_dt);
  g_dt = NULL;
  dbx_fake_daytona_stop(&g_fake);
  dbx_local_close(g_local);
  dbx_memdrv_destroy(g_mem);
  g_local = NULL;
  g_mem = NULL;
  g_drv = NULL;
  dbx_test_rmrf(g_home);
  dbx_test_rmrf(g_tmp);
  free(g_home);
  free(g_tmp);
  return 0;
}

static struct dbx_act act_for(const char *wf) {
  struct dbx_act a = {0};
  a.workflow_id = wf;
  a.run_id = "run-1";
  a.activity_id = "1";
  a.attempt = 1;
  return a;
}

/* One run; *out: the parsed result (success) or NULL (failure kept in res). */
static dbx_err run(const dbx_activity_type *t, struct dbx_act *a, const char *json,
                   dbx_act_result *res, cJSON **out) {
  memset(res, 0, sizeof *res);
  /* The worker gives every scheduled activity its own id, and a repeated id
   * is a retry (an exec re-attaches to its command): so each exec here that
   * is not a deliberate retry (prev_details unset) gets a fresh id. */
  static int seq;
  char aid[64];
  const char *saved = a->activity_id;
  if (t == T(exec) && a->prev_details == NULL) {
    snprintf(aid, sizeof aid, "%s.%d", a->activity_id, ++seq);
    a->activity_id = aid;
  }
  dbx_err rc = t->run(a, json, strlen(json), res, t->ud);
  if (a->activity_id != saved) dbx_fake_act_cleanup(a); /* only retry tests read heartbeats */
  a->activity_id = saved;
  if (out) *out = res->result_json ? cJSON_Parse(res->result_json) : NULL;
  return rc;
}

static void res_cleanup(dbx_act_result *r) {
  free(r->result_json);
  free(r->failure_type);
  free(r->failure_message);
  memset(r, 0, sizeof *r);
}

/* Run expecting success; returns the parsed result (free with cJSON_Delete). */
static cJSON *ok(const dbx_activity_type *t, struct dbx_act *a, const char *json) {
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(t, a, json, &r, &o), DBX_OK);
  if (r.failure_type) fail_msg("%s failed: %s: %s", t->name, r.failure_type, r.failure_message);
  assert_non_null(o);
  res_cleanup(&r);
  return o;
}

/* Run expecting a failure of type; returns its message (free()). */
static char *failed(const dbx_activity_type *t, struct dbx_act *a, const char *json,
                    const char *type, int non_retryable) {
  dbx_act_result r;
  assert_int_equal(run(t, a, json, &r, NULL), DBX_OK);
  assert_null(r.result_json);
  assert_non_null(r.failure_type);
  assert_string_equal(r.failure_type, type);
  assert_int_equal(r.non_retryable, non_retryable);
  char *m = r.failure_message;
  r.failure_message = NULL;
  res_cleanup(&r);
  return m;
}

static void expect_message(char *m, const char *needle) {
  if (strstr(m, needle) == NULL) fail_msg("message '%s' lacks '%s'", m, needle);
  free(m);
}

static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsString(v));
  return v->valuestring;
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsNumber(v));
  return v->valuedouble;
}

static int boolean(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  assert_true(cJSON_IsBool(v));
  return cJSON_IsTrue(v);
}

/* Create a sandbox for workflow wf (resource "workspace"); returns its id (free()). */
static char *make_sandbox(const char *wf, const char *source_json) {
  struct dbx_act a = act_for(wf);
  char *in = dbx_asprintf("{\"resource\":\"workspace\",\"source\":%s}",
                          source_json ? source_json : "{\"kind\":\"empty\"}");
  cJSON *o = ok(T(create), &a, in);
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  free(in);
  return id;
}

static int b64v(char c) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const char *p = strchr(t, c);
  return (c && p) ? (int)(p - t) : 0;
}

/* Test-side decoder (independent of the one under test). */
static size_t b64dec(const char *s, uint8_t *out) {
  size_t n = strlen(s), o = 0;
  for (size_t i = 0; i + 3 < n; i += 4) {
    uint32_t v = (uint32_t)b64v(s[i]) << 18 | (uint32_t)b64v(s[i + 1]) << 12 |
                 (uint32_t)b64v(s[i + 2]) << 6 | (uint32_t)b64v(s[i + 3]);
    out[o++] = (uint8_t)(v >> 16);
    if (s[i + 2] != '=') out[o++] = (uint8_t)(v >> 8);
    if (s[i + 3] != '=') out[o++] = (uint8_t)v;
  }
  return o;
}

/* ------------------------------------------------------------------ tests */

static void test_sandbox_acts_register_all(void **state) {
  (void)state;
  struct dbx_worker w = {0};
  assert_int_equal(dbx_sandbox_register_all(&w, g_acts), DBX_OK);
  const char *want[] = {"sandbox.create",     "sandbox.exec",       "sandbox.write_file",
                        "sandbox.read_file",  "sandbox.checkpoint", "sandbox.git_commit",
                        "sandbox.stop",       "sandbox.start",      "sandbox.delete"};
  assert_int_equal(w.n, 9);
  for (int i = 0; i < 9; i++) {
    assert_string_equal(w.types[i]->name, want[i]);
    assert_int_equal(w.types[i]->retry_class, DBX_SAFE_TO_RETRY);
  }
}

static void test_sandbox_acts_create_adopts_derived_id(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-create");
  const char *in = "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"}}";
  cJSON *o1 = ok(T(create), &a, in);
  a.attempt = 2; /* a retry of the same activity */
  cJSON *o2 = ok(T(create), &a, in);
  /* FNV-1a 64 of "wf-create/workspace", computed here independently */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *s = "wf-create/workspace"; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  char want[32];
  snprintf(want, sizeof want, "dbx-%016llx", (unsigned long long)h);
  assert_string_equal(str(o1, "sandbox_id"), want);
  assert_string_equal(str(o2, "sandbox_id"), want);
  assert_false(boolean(o1, "adopted"));
  assert_true(boolean(o2, "adopted"));
  if (g_local) {
    struct stat st;
    assert_int_equal(stat(str(o1, "path"), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
  } else { /* no host path: no "path" */
    assert_null(cJSON_GetObjectItemCaseSensitive(o1, "path"));
  }
  /* another workflow, or another resource, gets another sandbox */
  struct dbx_act b = act_for("wf-create-2");
  cJSON *o3 = ok(T(create), &b, in);
  assert_string_not_equal(str(o3, "sandbox_id"), want);
  cJSON *o4 = ok(T(create), &a, "{\"resource\":\"other\"}");
  assert_string_not_equal(str(o4, "sandbox_id"), want);
  assert_false(boolean(o4, "adopted"));
  /* the same id with another source is a conflict, not an adoption */
  char *m = failed(T(create), &a,
                   "{\"resource\":\"workspace\",\"source\":{\"kind\":\"snapshot\",\"ref\":\"nope\"}}",
                   "SandboxConflict", 1);
  free(m);
  cJSON_Delete(o1);
  cJSON_Delete(o2);
  cJSON_Delete(o3);
  cJSON_Delete(o4);
}

/* Entries under $DURABOX_HOME/sandboxes. */
static int count_sandboxes(void) {
  char *cmd = dbx_asprintf("ls -A %s/sandboxes | wc -l", g_home);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  int n = -1;
  assert_int_equal(fscanf(p, "%d", &n), 1);
  pclose(p);
  free(cmd);
  return n;
}

/* A clone that never gets an answer (a listening socket nobody serves):
 * sandbox.create heartbeats while it waits, stops at the cancellation the
 * third heartbeat reports, leaves no git process behind, and the next
 * create of the same id starts clean. */
static void test_sandbox_acts_create_heartbeats_and_stops_on_cancel(void **state) {
  (void)state;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(ls >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(ls, 4), 0);
  socklen_t sl = sizeof sa;
  assert_int_equal(getsockname(ls, (struct sockaddr *)&sa, &sl), 0);
  int port = ntohs(sa.sin_port);

  struct dbx_act a = act_for("wf-hang");
  a.cancel_at_heartbeat = 3;
  alarm(120); /* without the cancellation the clone would wait forever: fail instead */
  char *in = dbx_asprintf("{\"resource\":\"workspace\",\"source\":{\"kind\":\"git\","
                          "\"url\":\"http://127.0.0.1:%d/hang.git\"}}", port);
  int before = count_sandboxes();
  dbx_act_result r;
  assert_int_equal(run(T(create), &a, in, &r, NULL), DBX_ECANCELED);
  assert_int_equal(count_sandboxes(), before); /* the cancelled create left nothing */
  alarm(0);
  assert_int_equal(a.heartbeats, 3);
  assert_null(r.result_json);
  res_cleanup(&r);
  dbx_fake_act_cleanup(&a);
  free(in);
  /* "han[g]" so the pattern does not match the shell running pgrep */
  char *pg = dbx_asprintf("pgrep -f '127.0.0.1:%d/han[g].git' >/dev/null", port);
  int st = system(pg);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 1); /* 1: no process matched */
  free(pg);
  close(ls);

  struct dbx_act b = act_for("wf-hang");
  cJSON *o = ok(T(create), &b,
                "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"}}");
  assert_false(boolean(o, "adopted"));
  char *tmp = dbx_asprintf("%s/sandboxes/%s/workspace.tmp", g_home, str(o, "sandbox_id"));
  assert_int_equal(access(tmp, F_OK), -1);
  assert_int_equal(access(str(o, "path"), F_OK), 0);
  free(tmp);
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&b);
}

static void test_sandbox_acts_exec_env_and_secret_redacted(void **state) {
  (void)state;
  const char *secret = "s3cr3t-Value-42";
  setenv("DBX_TEST_TOKEN", secret, 1);
  char *id = make_sandbox("wf-exec", NULL);
  struct dbx_act a = act_for("wf-exec");
  char *in = dbx_asprintf(
      "{\"sandbox_id\":\"%s\",\"command\":\"printf '%%s|%%s' \\\"$PLAIN\\\" \\\"$TOKEN\\\"; "
      "echo \\\"err:$TOKEN:$TOKEN\\\" >&2; exit 3\","
      "\"env\":{\"PLAIN\":\"hello\",\"TOKEN\":{\"secret\":\"DBX_TEST_TOKEN\"}}}",
      id);
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(T(exec), &a, in, &r, &o), DBX_OK);
  assert_null(r.failure_type); /* a non-zero exit is a result */
  assert_null(strstr(r.result_json, secret));
  assert_null(strstr(r.result_json, "s3cr3t"));
  assert_int_equal((int)num(o, "exit_code"), 3);
  assert_string_equal(str(o, "stdout"), "hello|[redacted:DBX_TEST_TOKEN]");
  assert_string_equal(str(o, "stderr"),
                      "err:[redacted:DBX_TEST_TOKEN]:[redacted:DBX_TEST_TOKEN]\n");
  assert_false(boolean(o, "timed_out"));
  assert_false(boolean(o, "stdout_truncated"));
  /* the redacted text's size, not the raw one (which would give the value's length) */
  assert_int_equal((int)num(o, "stdout_bytes"), (int)strlen("hello|[redacted:DBX_TEST_TOKEN]"));
  assert_int_equal((int)num(o, "stderr_bytes"),
                   (int)strlen("err:[redacted:DBX_TEST_TOKEN]:[redacted:DBX_TEST_TOKEN]\n"));
  assert_int_equal((int)num(o, "signal"), 0);
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);

  /* a value cut off at the output cap is still redacted */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf 'ab%%s' \\\"$T\\\"\","
                    "\"max_output_bytes\":9,\"env\":{\"T\":{\"secret\":\"DBX_TEST_TOKEN\"}}}",
                    id);
  assert_int_equal(run(T(exec), &a, in, &r, &o), DBX_OK);
  assert_null(strstr(r.result_json, "s3cr"));
  assert_string_equal(str(o, "stdout"), "ab[redacted:DBX_TEST_TOKEN]");
  assert_true(boolean(o, "stdout_truncated"));
  assert_int_equal((int)num(o, "stdout_bytes"), (int)strlen("ab[redacted:DBX_TEST_TOKEN]"));
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);

  /* an unset secret names the variable and runs nothing */
  unsetenv("DBX_TEST_MISSING");
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\","
                    "\"env\":{\"X\":{\"secret\":\"DBX_TEST_MISSING\"}}}", id);
  expect_message(failed(T(exec), &a, in, "SecretMissing", 1), "DBX_TEST_MISSING");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(T(read_file), &a, in, "FileNotFound", 1));
  free(in);
  free(id);
}

/* "redact": a secret an earlier step left in the sandbox (here written as a
 * file) is redacted from a later read_file and from an exec that never
 * asked for it; names are checked; an unset one is skipped. */
static void test_sandbox_acts_redact_names(void **state) {
  (void)state;
  const char *secret = "Leak-Me-Not-9137";
  setenv("DBX_TEST_LEFT", secret, 1);
  unsetenv("DBX_TEST_UNSET");
  char *id = make_sandbox("wf-redact", NULL);
  struct dbx_act a = act_for("wf-redact");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"left.txt\","
                          "\"content\":\"token=%s\\nend %s\\n\"}", id, secret, secret);
  cJSON *o = ok(T(write_file), &a, in);
  cJSON_Delete(o);
  free(in);

  /* without redact the file comes back as it is: what the fix is for */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"left.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_non_null(strstr(str(o, "content"), secret));
  cJSON_Delete(o);
  free(in);

  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"left.txt\","
                    "\"redact\":[\"DBX_TEST_UNSET\",\"DBX_TEST_LEFT\"]}", id);
  dbx_act_result r;
  assert_int_equal(run(T(read_file), &a, in, &r, &o), DBX_OK);
  assert_null(r.failure_type);
  assert_null(strstr(r.result_json, "Leak-Me"));
  const char *want = "token=[redacted:DBX_TEST_LEFT]\nend [redacted:DBX_TEST_LEFT]\n";
  assert_string_equal(str(o, "content"), want);
  assert_int_equal((int)num(o, "bytes"), (int)strlen(want)); /* not the raw size */
  assert_false(boolean(o, "truncated"));
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);

  /* an exec that did not ask for the secret, redacted by name (a shell
   * runs it: on the local and daytona drivers; the memory driver's exec is
   * this file's callback, which has none) */
  if (g_mem == NULL) {
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"cat left.txt; cat left.txt >&2\","
                      "\"redact\":[\"DBX_TEST_LEFT\"]}", id);
    assert_int_equal(run(T(exec), &a, in, &r, &o), DBX_OK);
    assert_null(r.failure_type);
    assert_null(strstr(r.result_json, "Leak-Me"));
    assert_string_equal(str(o, "stdout"), want);
    assert_string_equal(str(o, "stderr"), want);
    assert_int_equal((int)num(o, "stdout_bytes"), (int)strlen(want));
    /* the variable is not put into the command's environment */
    cJSON_Delete(o);
    res_cleanup(&r);
    free(in);
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '[%%s]' \\\"$DBX_TEST_LEFT\\\"\","
                      "\"redact\":[\"DBX_TEST_LEFT\"]}", id);
    o = ok(T(exec), &a, in);
    assert_string_equal(str(o, "stdout"), "[]");
    cJSON_Delete(o);
    free(in);

    /* a redact name that is also the step's own secret counts once */
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '%%s' \\\"$T\\\"\","
                      "\"env\":{\"T\":{\"secret\":\"DBX_TEST_LEFT\"}},"
                      "\"redact\":[\"DBX_TEST_LEFT\"]}", id);
    o = ok(T(exec), &a, in);
    assert_string_equal(str(o, "stdout"), "[redacted:DBX_TEST_LEFT]");
    cJSON_Delete(o);
    free(in);
  }

  /* malformed lists name the problem and read nothing */
  static const char *const bad[] = {"\"redact\":\"DBX_TEST_LEFT\"", "\"redact\":[\"A=B\"]",
                                    "\"redact\":[\"\"]", "\"redact\":[7]"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"left.txt\",%s}", id, bad[i]);
    expect_message(failed(T(read_file), &a, in, "InvalidInput", 1), "redact");
    free(in);
  }
  char many[DBX_SANDBOX_REDACT_MAX * 8 + 64];
  size_t k = (size_t)snprintf(many, sizeof many, "[");
  for (int i = 0; i <= DBX_SANDBOX_REDACT_MAX; i++)
    k += (size_t)snprintf(many + k, sizeof many - k, "%s\"V%d\"", i ? "," : "", i);
  snprintf(many + k, sizeof many - k, "]");
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\",\"redact\":%s}", id, many);
  expect_message(failed(T(exec), &a, in, "InvalidInput", 1), "at most 64");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(T(read_file), &a, in, "FileNotFound", 1));
  free(in);
  dbx_fake_act_cleanup(&a);
  free(id);
  unsetenv("DBX_TEST_LEFT");
}

static void test_sandbox_acts_exec_binary_output_base64(void **state) {
  (void)state;
  char *id = make_sandbox("wf-bin", NULL);
  struct dbx_act a = act_for("wf-bin");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '\\\\377\\\\376A\\\\000B'; "
                          "printf 'ok\\\\000' >&2\"}", id);
  cJSON *o = ok(T(exec), &a, in);
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "stdout"));
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "stderr"));
  uint8_t buf[64];
  size_t n = b64dec(str(o, "stdout_b64"), buf);
  const uint8_t want[] = {0xff, 0xfe, 'A', 0, 'B'};
  assert_int_equal(n, sizeof want);
  assert_memory_equal(buf, want, sizeof want);
  assert_int_equal((int)num(o, "stdout_bytes"), 5);
  n = b64dec(str(o, "stderr_b64"), buf); /* valid UTF-8 but with a NUL */
  assert_int_equal(n, 3);
  assert_memory_equal(buf, "ok\0", 3);
  cJSON_Delete(o);
  free(in);
  /* valid multi-byte UTF-8 stays text */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf 'h\\\\303\\\\251'\"}", id);
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "h\xc3\xa9");
  cJSON_Delete(o);
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_timeout(void **state) {
  (void)state;
  char *id = make_sandbox("wf-timeout", NULL);
  struct dbx_act a = act_for("wf-timeout");
  char *in = dbx_asprintf(
      "{\"sandbox_id\":\"%s\",\"command\":\"echo started; exec sleep 30\",\"timeout_s\":0.3}", id);
  cJSON *o = ok(T(exec), &a, in);
  assert_true(boolean(o, "timed_out"));
  assert_string_equal(str(o, "stdout"), "started\n");
  assert_int_not_equal((int)num(o, "exit_code"), 0);
  cJSON_Delete(o);
  free(in);
  free(id);
}

static void test_sandbox_acts_file_round_trip_all_bytes(void **state) {
  (void)state;
  char *id = make_sandbox("wf-files", NULL);
  struct dbx_act a = act_for("wf-files");
  /* all 256 byte values, base64 by a separate route: the exec of base64(1) */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"i=0; while [ $i -lt 256 ]; do "
                          "printf \\\"\\\\\\\\$(printf %%o $i)\\\"; i=$((i+1)); done | base64 -w0\"}",
                          id);
  cJSON *o = ok(T(exec), &a, in);
  char *b64 = dbx_strdup(str(o, "stdout"));
  assert_int_equal(strlen(b64), 344);
  uint8_t buf[300];
  assert_int_equal(b64dec(b64, buf), 256);
  for (int i = 0; i < 256; i++) assert_int_equal(buf[i], i);
  cJSON_Delete(o);
  free(in);

  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/e/bytes.bin\",\"content_b64\":\"%s\"}", id,
                    b64);
  o = ok(T(write_file), &a, in);
  assert_int_equal((int)num(o, "bytes"), 256);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/e/bytes.bin\"}", id);
  o = ok(T(read_file), &a, in);
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "content"));
  assert_string_equal(str(o, "content_b64"), b64);
  assert_int_equal((int)num(o, "bytes"), 256);
  cJSON_Delete(o);
  free(in);
  /* the bytes on disk, checked by the sandbox itself */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"base64 -w0 d/e/bytes.bin\"}", id);
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), b64);
  cJSON_Delete(o);
  free(in);

  /* text content comes back as text */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"t.txt\",\"content\":\"h\\u00e9llo\\n\"}", id);
  o = ok(T(write_file), &a, in);
  assert_int_equal((int)num(o, "bytes"), 7);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"t.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "h\xc3\xa9llo\n");
  cJSON_Delete(o);
  free(in);
  free(b64);
  free(id);
}

static void test_sandbox_acts_path_refused(void **state) {
  (void)state;
  char *id = make_sandbox("wf-paths", NULL);
  struct dbx_act a = act_for("wf-paths");
  const char *bad[] = {"../x", "a/../../x", "/etc/passwd", ".."};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"%s\",\"content\":\"x\"}", id, bad[i]);
    free(failed(T(write_file), &a, in, "PathRefused", 1));
    free(failed(T(read_file), &a, in, "PathRefused", 1));
    free(in);
  }
  /* nothing was written next to the workspace */
  char *p = dbx_asprintf("%s/sandboxes/%s/x", g_home, id);
  assert_int_not_equal(access(p, F_OK), 0);
  free(p);
  /* a symlink that leads out of the workspace: refused by the driver */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"ln -s /etc out\"}", id);
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal((int)num(o, "exit_code"), 0);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"out/passwd\"}", id);
  free(failed(T(read_file), &a, in, "PathRefused", 1));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\",\"cwd\":\"../..\"}", id);
  free(failed(T(exec), &a, in, "PathRefused", 1));
  free(in);
  free(id);
}

static void test_sandbox_acts_invalid_input_names_field(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-invalid");
  expect_message(failed(T(exec), &a, "not json", "InvalidInput", 1), "JSON object");
  expect_message(failed(T(exec), &a, "[1]", "InvalidInput", 1), "JSON object");
  expect_message(failed(T(exec), &a, "{\"command\":\"true\"}", "InvalidInput", 1),
                 "'sandbox_id'");
  expect_message(failed(T(exec), &a, "{\"sandbox_id\":\"s\",\"command\":7}",
                        "InvalidInput", 1),
                 "'command'");
  expect_message(failed(T(exec), &a,
                        "{\"sandbox_id\":\"s\",\"command\":\"true\",\"timeout_s\":\"5\"}",
                        "InvalidInput", 1),
                 "'timeout_s'");
  expect_message(failed(T(exec), &a,
                        "{\"sandbox_id\":\"s\",\"command\":\"true\",\"env\":{\"A\":1}}",
                        "InvalidInput", 1),
                 "'env.A'");
  expect_message(failed(T(exec), &a,
                        "{\"sandbox_id\":\"../s\",\"command\":\"true\"}", "InvalidInput", 1),
                 "'sandbox_id'");
  expect_message(failed(T(write_file), &a,
                        "{\"sandbox_id\":\"s\",\"path\":\"f\",\"content_b64\":\"a$==\"}",
                        "InvalidInput", 1),
                 "'content_b64'");
  expect_message(failed(T(write_file), &a, "{\"sandbox_id\":\"s\",\"path\":\"f\"}",
                        "InvalidInput", 1),
                 "'content'");
  expect_message(failed(T(create), &a, "{\"source\":{\"kind\":\"floppy\"}}",
                        "InvalidInput", 1),
                 "'source.kind'");
  expect_message(failed(T(create), &a, "{\"source\":{\"kind\":\"dir\"}}",
                        "InvalidInput", 1),
                 "'source.path'");
  expect_message(failed(T(git_commit), &a, "{\"sandbox_id\":\"s\"}",
                        "InvalidInput", 1),
                 "'message'");
  expect_message(failed(T(checkpoint), &a,
                        "{\"sandbox_id\":\"s\",\"name\":\"a/b\"}", "InvalidInput", 1),
                 "'name'");
}

/* Issue 9: a string cJSON would cut at a NUL, a raw control character,
 * invalid UTF-8, data after the document, or an input over one payload
 * (2 MiB) is refused as InvalidInput naming the field, before anything is
 * written; at the limit it is written whole. */
static void test_sandbox_acts_input_nul_and_sizes(void **state) {
  (void)state;
  char *id = make_sandbox("wf-input", NULL);
  struct dbx_act a = act_for("wf-input");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"a\\u0000b\"}", id);
  expect_message(failed(T(write_file), &a, in, "InvalidInput", 1),
                 "field 'content' contains a NUL character (\\u0000)");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\\u0000x\",\"content\":\"a\"}", id);
  expect_message(failed(T(write_file), &a, in, "InvalidInput", 1),
                 "field 'path' contains a NUL character");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"echo a\\u0000; touch g\"}", id);
  expect_message(failed(T(exec), &a, in, "InvalidInput", 1),
                 "field 'command' contains a NUL character");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\",\"env\":{\"A\\u0000B\":\"v\"}}", id);
  expect_message(failed(T(exec), &a, in, "InvalidInput", 1),
                 "a field name in field 'env' contains a NUL character");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\",\"env\":{\"A\":\"v\\u0000\"}}", id);
  expect_message(failed(T(exec), &a, in, "InvalidInput", 1),
                 "field 'env.A' contains a NUL character");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"\xff\"}", id);
  expect_message(failed(T(write_file), &a, in, "InvalidInput", 1),
                 "field 'content' is not valid UTF-8");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"a\"} {}", id);
  expect_message(failed(T(write_file), &a, in, "InvalidInput", 1),
                 "input has data after the JSON document");
  free(in);
  /* nothing of those was written; an escaped backslash before u0000 is text */
  static const char *const absent[] = {"f", "g"};
  for (size_t k = 0; k < 2; k++) {
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"%s\"}", id, absent[k]);
    free(failed(T(read_file), &a, in, "FileNotFound", 1));
    free(in);
  }
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"a\\\\u0000b\"} \n", id);
  cJSON *o = ok(T(write_file), &a, in);
  assert_int_equal((int)num(o, "bytes"), 8);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "a\\u0000b");
  cJSON_Delete(o);
  free(in);
  /* sizes: an input of exactly 2 MiB is written whole; one byte more is not */
  const size_t limit = 2u * 1024 * 1024;
  char *head = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"big\",\"content\":\"", id);
  size_t hl = strlen(head), fill = limit - hl - 2;
  char *big = malloc(limit + 2);
  assert_non_null(big);
  for (int extra = 0; extra <= 1; extra++) {
    memcpy(big, head, hl);
    memset(big + hl, 'x', fill + (size_t)extra);
    memcpy(big + hl + fill + (size_t)extra, "\"}", 3);
    assert_int_equal(strlen(big), limit + (size_t)extra);
    if (extra == 0) {
      o = ok(T(write_file), &a, big);
      assert_int_equal((size_t)num(o, "bytes"), fill);
      cJSON_Delete(o);
    } else {
      char want[128];
      snprintf(want, sizeof want, "input is %zu bytes, over the limit of %zu bytes per input",
               limit + 1, limit);
      expect_message(failed(T(write_file), &a, big, "InvalidInput", 1), want);
    }
  }
  /* a field over the limit is named with its size */
  char *huge = malloc(hl + limit + 8);
  assert_non_null(huge);
  memcpy(huge, head, hl);
  memset(huge + hl, 'y', limit + 1);
  memcpy(huge + hl + limit + 1, "\"}", 3);
  char want[128];
  snprintf(want, sizeof want, "field 'content' is %zu bytes, over the limit of %zu bytes per field",
           limit + 1, limit);
  expect_message(failed(T(write_file), &a, huge, "InvalidInput", 1), want);
  free(huge);
  free(big);
  free(head);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"big\"}", id);
  o = ok(T(read_file), &a, in);
  assert_int_equal((size_t)num(o, "bytes"), fill);
  cJSON_Delete(o);
  free(in);
  free(id);
}

static void test_sandbox_acts_not_found(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-missing");
  const char *in = "{\"sandbox_id\":\"dbx-nosuch\",\"command\":\"true\",\"path\":\"f\","
                   "\"content\":\"x\",\"message\":\"m\"}";
  const dbx_activity_type *types[] = {T(exec),       T(read_file),
                                      T(write_file), T(git_commit),
                                      T(checkpoint), T(stop),
                                      T(start)};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
    expect_message(failed(types[i], &a, in, "SandboxGone", 1), "dbx-nosuch");
  expect_message(failed(T(create), &a,
                        "{\"source\":{\"kind\":\"dir\",\"path\":\"/nonexistent/dbx/dir\"}}",
                        "SourceNotFound", 1),
                 "/nonexistent/dbx/dir");
}

/* A retry of a commit that landed before its attempt's result was recorded
 * (the worker died after git commit) reports that commit's sha instead of
 * "nothing to commit", and commits nothing more; another activity's commit
 * of the same change is not taken for it. */
static void test_sandbox_acts_git_commit_retry_finds_landed(void **state) {
  (void)state;
  char *repo = dbx_asprintf("%s/repo-retry", g_tmp);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init",
                           repo, repo);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  char *src = dbx_asprintf("{\"kind\":\"git\",\"path\":\"%s\"}", repo);
  char *id = make_sandbox("wf-git-retry", src);
  struct dbx_act a = act_for("wf-git-retry");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"a.txt\",\"content\":\"two\\n\"}", id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"message\":\"change a\\n\"}", id);
  a.activity_id = "7";
  cJSON *o = ok(T(git_commit), &a, in);
  char *sha = dbx_strdup(str(o, "sha"));
  assert_int_equal(strlen(sha), 40);
  cJSON_Delete(o);
  a.attempt = 2; /* the retry */
  o = ok(T(git_commit), &a, in);
  assert_false(boolean(o, "nothing_to_commit"));
  assert_string_equal(str(o, "sha"), sha);
  cJSON_Delete(o);
  /* HEAD is still that commit, one on top of init */
  char *q = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"git rev-list --count HEAD; "
                         "git rev-parse HEAD; git log -1 --format=%%s\"}", id);
  o = ok(T(exec), &a, q);
  char *want = dbx_asprintf("2\n%s\nchange a\n", sha);
  assert_string_equal(str(o, "stdout"), want);
  free(want);
  cJSON_Delete(o);
  /* a first attempt of another activity: nothing to commit, not that sha */
  a.activity_id = "8";
  a.attempt = 1;
  o = ok(T(git_commit), &a, in);
  assert_true(boolean(o, "nothing_to_commit"));
  cJSON_Delete(o);
  a.attempt = 3; /* nor does a retry of it find activity 7's commit */
  o = ok(T(git_commit), &a, in);
  assert_true(boolean(o, "nothing_to_commit"));
  cJSON_Delete(o);
  free(q);
  free(in);
  free(sha);
  free(id);
  free(src);
  free(repo);
}

static void test_sandbox_acts_git_commit_sha(void **state) {
  (void)state;
  char *repo = dbx_asprintf("%s/repo", g_tmp);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init",
                           repo, repo);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  char *src = dbx_asprintf("{\"kind\":\"git\",\"path\":\"%s\"}", repo);
  char *id = make_sandbox("wf-git", src);
  struct dbx_act a = act_for("wf-git");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"a.txt\",\"content\":\"two\\n\"}", id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"message\":\"change a\",\"author\":\"A U <a@u>\"}", id);
  cJSON *o = ok(T(git_commit), &a, in);
  assert_false(boolean(o, "nothing_to_commit"));
  char *sha = dbx_strdup(str(o, "sha"));
  assert_int_equal(strlen(sha), 40);
  cJSON_Delete(o);
  /* the sandbox's own git agrees on HEAD, message and author */
  char *q = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"git log -1 --format='%%H %%an %%s'\"}",
                         id);
  o = ok(T(exec), &a, q);
  char *want = dbx_asprintf("%s A U change a\n", sha);
  assert_string_equal(str(o, "stdout"), want);
  free(want);
  cJSON_Delete(o);
  free(q);
  /* nothing changed since: nothing to commit, sha null */
  o = ok(T(git_commit), &a, in);
  assert_true(boolean(o, "nothing_to_commit"));
  assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "sha")));
  cJSON_Delete(o);
  free(in);
  free(sha);
  free(id);
  free(src);
  free(repo);
}

static void test_sandbox_acts_checkpoint_stable_across_retries(void **state) {
  (void)state;
  char *id = make_sandbox("wf-ckpt", NULL);
  struct dbx_act a = act_for("wf-ckpt");
  a.activity_id = "7";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"v1\"}", id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\"}", id);
  cJSON *o1 = ok(T(checkpoint), &a, in);
  a.attempt = 2;
  cJSON *o2 = ok(T(checkpoint), &a, in);
  assert_string_equal(str(o1, "ref"), str(o2, "ref"));
  struct dbx_act b = a;
  b.activity_id = "8";
  cJSON *o3 = ok(T(checkpoint), &b, in);
  assert_string_not_equal(str(o1, "ref"), str(o3, "ref"));
  free(in);
  /* a named checkpoint keeps its name */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"name\":\"my-ckpt.1\"}", id);
  cJSON *o4 = ok(T(checkpoint), &a, in);
  assert_non_null(strstr(str(o4, "ref"), "my-ckpt.1"));
  free(in);
  /* the ref restores the workspace as it was */
  struct dbx_act c = act_for("wf-ckpt-restore");
  in = dbx_asprintf("{\"source\":{\"kind\":\"snapshot\",\"ref\":\"%s\"}}", str(o1, "ref"));
  cJSON *o5 = ok(T(create), &c, in);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\"}", str(o5, "sandbox_id"));
  cJSON *o6 = ok(T(read_file), &c, in);
  assert_string_equal(str(o6, "content"), "v1");
  free(in);
  cJSON_Delete(o1);
  cJSON_Delete(o2);
  cJSON_Delete(o3);
  cJSON_Delete(o4);
  cJSON_Delete(o5);
  cJSON_Delete(o6);
  free(id);
}

static void test_sandbox_acts_stop_start_delete(void **state) {
  (void)state;
  char *id = make_sandbox("wf-life", NULL);
  struct dbx_act a = act_for("wf-life");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"echo hi\"}", id);
  cJSON *o = ok(T(stop), &a, in);
  assert_int_equal(cJSON_GetArraySize(o), 0);
  cJSON_Delete(o);
  /* a stopped sandbox refuses exec: retryable (it may be started again) */
  free(failed(T(exec), &a, in, "SandboxError", 0));
  cJSON_Delete(ok(T(start), &a, in));
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "hi\n");
  cJSON_Delete(o);
  cJSON_Delete(ok(T(delete), &a, in));
  cJSON_Delete(ok(T(delete), &a, in)); /* not found counts as done */
  free(failed(T(exec), &a, in, "SandboxGone", 1));
  char *p = dbx_asprintf("%s/sandboxes/%s", g_home, id);
  assert_int_not_equal(access(p, F_OK), 0);
  free(p);
  assert_int_equal(g_drv->ops->exists(g_drv->self, id, NULL), DBX_DRV_NO_SANDBOX);
  free(in);
  free(id);
}

static void test_sandbox_acts_cancelled_runs_nothing(void **state) {
  (void)state;
  char *id = make_sandbox("wf-cancel", NULL);
  struct dbx_act a = act_for("wf-cancel");
  a.cancelled = 1;
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\"}", id);
  dbx_act_result r;
  assert_int_equal(run(T(exec), &a, in, &r, NULL), DBX_ECANCELED);
  assert_null(r.result_json);
  res_cleanup(&r);
  free(in);
  a.cancelled = 0;
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(T(read_file), &a, in, "FileNotFound", 1));
  free(in);
  free(id);
}

/* A worker dies mid-command (the child running attempt 1 is SIGKILLed once
 * the command has begun); attempt 2 with the same identity re-attaches and
 * reports the one run's output: the side-effect file has one line. */
static void test_sandbox_acts_exec_retry_reattaches(void **state) {
  (void)state;
  char *id = make_sandbox("wf-reattach", NULL);
  struct dbx_act a = act_for("wf-reattach");
  a.activity_id = "5";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":"
                          "\"echo x >> n.txt; sleep 1; echo done\",\"timeout_s\":60}", id);
  char *marker = dbx_asprintf("%s/sandboxes/%s/workspace/n.txt", g_home, id);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    dbx_act_result r = {0};
    a.prev_details = "{}"; /* a deliberate identity: no fresh id from run() */
    T(exec)->run(&a, in, strlen(in), &r, T(exec)->ud);
    _exit(0);
  }
  for (int i = 0; i < 3000 && access(marker, F_OK) != 0; i++) {
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(access(marker, F_OK), 0);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  a.attempt = 2;
  a.prev_details = "{}";
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal(num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "done\n");
  cJSON_Delete(o);
  assert_non_null(a.last_details);
  assert_non_null(strstr(a.last_details, "\"cmd_id\":\"x"));
  assert_non_null(strstr(a.last_details, "\"stdout_offset\":"));
  /* Attempt 3 with the details of attempt 2: the same finished command. */
  char *details = dbx_strdup(a.last_details);
  a.attempt = 3;
  a.prev_details = details;
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "done\n");
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"n.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "x\n");
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(details);
  free(marker);
  free(in);
  free(id);
}

/* A cancel seen at a heartbeat kills the running command's group. */
static void test_sandbox_acts_exec_cancel_kills_command(void **state) {
  (void)state;
  char *id = make_sandbox("wf-cancel-run", NULL);
  struct dbx_act a = act_for("wf-cancel-run");
  a.prev_details = "{}";
  a.cancel_at_heartbeat = 2;
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"sleep 30\"}", id);
  dbx_act_result r;
  assert_int_equal(run(T(exec), &a, in, &r, NULL), DBX_ECANCELED);
  assert_null(r.result_json);
  res_cleanup(&r);
  /* The retry re-attaches to the killed command and sees SIGKILL's status. */
  a.cancelled = 0;
  a.cancel_at_heartbeat = 0;
  a.attempt = 2;
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal(num(o, "exit_code"), 137);
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_worker_stop_leaves_command_running(void **state) {
  (void)state;
  char *id = make_sandbox("wf-stop-run", NULL);
  struct dbx_act a = act_for("wf-stop-run");
  a.prev_details = "{}";
  a.cancel_at_heartbeat = 2;
  a.worker_stopping = 1; /* the cancellation is the worker shutting down */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"sleep 1; echo done\"}", id);
  dbx_act_result r;
  assert_int_equal(run(T(exec), &a, in, &r, NULL), DBX_ECANCELED);
  res_cleanup(&r);
  /* the next worker's attempt re-attaches to the command, which finished normally */
  a.cancelled = 0;
  a.cancel_at_heartbeat = 0;
  a.worker_stopping = 0;
  a.attempt = 2;
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal(num(o, "exit_code"), 0);
  assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stdout")), "done\n");
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

/* ------------------------------------------------- both drivers, more */

#define OPS(op, ...) g_drv->ops->op(g_drv->self, __VA_ARGS__)

/* A missing cwd is FileNotFound, a folder read as a file InvalidInput. */
static void test_sandbox_acts_cwd_missing_and_folder_read(void **state) {
  (void)state;
  char *id = make_sandbox("wf-cwd", NULL);
  struct dbx_act a = act_for("wf-cwd");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\",\"cwd\":\"no/such\"}", id);
  expect_message(failed(T(exec), &a, in, "FileNotFound", 1), "no/such");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/f\",\"content\":\"x\"}", id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d\"}", id);
  expect_message(failed(T(read_file), &a, in, "InvalidInput", 1), "path 'd'");
  free(in);
  free(id);
}

/* The derived names, pinned to literal values (FNV-1a 64 computed outside
 * this code base): existing sandboxes, commands and checkpoints, and the
 * journals that name them, depend on these staying byte-identical.
 *   sandbox id  "dbx-" + FNV("wf-pin/workspace")
 *   command id  "x" + FNV("wf-pin" 0x1f "run-1" 0x1f "pin")
 *   checkpoint  "ckpt-" + FNV("dbx-cfea2f4c3ffade18/wf-pin/run-1/pin") */
static void test_sandbox_acts_derived_names_pinned(void **state) {
  (void)state;
  static const char sid[] = "dbx-cfea2f4c3ffade18";
  struct dbx_act a = act_for("wf-pin");
  a.activity_id = "pin";
  cJSON *o = ok(T(create), &a, "{}");
  assert_string_equal(str(o, "sandbox_id"), sid);
  cJSON_Delete(o);
  /* the exec straight through its run function: run() would vary the id */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"echo pinned\"}", sid);
  dbx_act_result r = {0};
  assert_int_equal(T(exec)->run(&a, in, strlen(in), &r, T(exec)->ud), DBX_OK);
  assert_null(r.failure_type);
  assert_non_null(r.result_json);
  res_cleanup(&r);
  dbx_fake_act_cleanup(&a);
  free(in);
  dbx_drv_cmd_status st;
  assert_int_equal(g_drv->ops->exec_poll(g_drv->self, sid, "xa3a71b854374a16a", &st), DBX_DRV_OK);
  assert_int_equal(st.state, DBX_DRV_CMD_FINISHED);
  assert_int_equal(st.stdout_size, 7);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\"}", sid);
  o = ok(T(checkpoint), &a, in);
  assert_non_null(strstr(str(o, "ref"), "ckpt-5943780eec8e102a"));
  cJSON_Delete(o);
  free(in);
}

/* content_b64 is decoded strictly (base/codec.h). The two texts with
 * non-zero bits under the padding ("QR==", "QUJ=") were accepted by the
 * decoder this folder had before; every malformed text is refused as
 * InvalidInput naming the field, and nothing is written. */
static void test_sandbox_acts_write_file_base64_strict(void **state) {
  (void)state;
  char *id = make_sandbox("wf-b64", NULL);
  struct dbx_act a = act_for("wf-b64");
  static const struct {
    const char *b64, *text;
  } good[] = {{"QQ==", "A"}, {"QUI=", "AB"}, {"QUJD", "ABC"}, {"", ""}, {"aMOp", "h\xc3\xa9"}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"g%zu\",\"content_b64\":\"%s\"}",
                            id, i, good[i].b64);
    cJSON *o = ok(T(write_file), &a, in);
    assert_int_equal((int)num(o, "bytes"), (int)strlen(good[i].text));
    cJSON_Delete(o);
    free(in);
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"g%zu\"}", id, i);
    o = ok(T(read_file), &a, in);
    assert_string_equal(str(o, "content"), good[i].text);
    cJSON_Delete(o);
    free(in);
  }
  static const char *const bad[] = {"QR==", "QUJ=", "QQ", "QQ=", "QQ=A", "Q===", "====",
                                    " QQ==", "QQ==\\n", "QQ==QQ==", "QQ-_", "Q\\u0000==",
                                    "\\u00e9Q=="};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"b%zu\",\"content_b64\":\"%s\"}",
                            id, i, bad[i]);
    expect_message(failed(T(write_file), &a, in, "InvalidInput", 1), "'content_b64'");
    free(in);
    in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"b%zu\"}", id, i);
    free(failed(T(read_file), &a, in, "FileNotFound", 1));
    free(in);
  }
  free(id);
}

/* Walk the allocation-failure hook (base/alloc.h) across one run of t: fail
 * the 1st, 2nd, ... allocation until a run completes untouched. A run whose
 * allocation failed must end cleanly: DBX_ENOMEM with nothing recorded (the
 * worker reports a retryable failure), or a retryable failure with its type
 * and message; never a result. ASan and valgrind see any leak. The untouched
 * run must succeed (want_type NULL: returns its result, cJSON_Delete) or
 * fail with want_type, non-retryable (returns NULL). */
static cJSON *sweep_allocations(const dbx_activity_type *t, const char *wf, const char *json,
                                const char *want_type) {
  for (long n = 1; n < 100000; n++) {
    struct dbx_act a = act_for(wf);
    dbx_act_result r;
    cJSON *o = NULL;
    dbx_alloc_fail_at(n);
    dbx_err rc = run(t, &a, json, &r, &o);
    int injected = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    dbx_fake_act_cleanup(&a);
    if (!injected) {
      if (n == 1) fail_msg("%s: no allocation reached the hook", t->name);
      assert_int_equal(rc, DBX_OK);
      if (want_type) {
        assert_null(o);
        assert_non_null(r.failure_type);
        assert_string_equal(r.failure_type, want_type);
        assert_non_null(r.failure_message);
        assert_true(r.non_retryable);
        res_cleanup(&r);
        return NULL;
      }
      if (r.failure_type) fail_msg("%s failed: %s: %s", t->name, r.failure_type, r.failure_message);
      assert_non_null(o);
      res_cleanup(&r);
      return o;
    }
    if (o != NULL || r.result_json != NULL)
      fail_msg("%s: allocation %ld failed, yet a result: %s", t->name, n, r.result_json);
    if (rc == DBX_OK) {
      if (r.failure_type == NULL || r.failure_message == NULL || r.non_retryable)
        fail_msg("%s: allocation %ld failed: type %s, message %s, non_retryable %d", t->name, n,
                 r.failure_type ? r.failure_type : "(none)",
                 r.failure_message ? r.failure_message : "(none)", r.non_retryable);
    } else {
      if (rc != DBX_ENOMEM) fail_msg("%s: allocation %ld failed: %s", t->name, n, dbx_strerror(rc));
      assert_null(r.failure_type);
      assert_null(r.failure_message);
    }
    res_cleanup(&r);
  }
  fail_msg("%s never completed", t->name);
  return NULL;
}

static void test_sandbox_acts_allocation_failures_clean(void **state) {
  (void)state;
  static const char sid[] = "dbx-665132613163b6cb"; /* "dbx-" + FNV("wf-sweep/workspace") */
  setenv("DBX_SWEEP_SECRET", "s3cret-value", 1);
  cJSON *o = sweep_allocations(T(create), "wf-sweep",
                               "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"},"
                               "\"env\":{\"A\":\"1\"}}",
                               NULL);
  assert_string_equal(str(o, "sandbox_id"), sid);
  (void)boolean(o, "adopted"); /* either: a failed run may have made it */
  cJSON_Delete(o);
  /* with the hook off afterwards: the sandbox is there, adopted */
  struct dbx_act a = act_for("wf-sweep");
  o = ok(T(create), &a, "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"}}");
  assert_string_equal(str(o, "sandbox_id"), sid);
  assert_true(boolean(o, "adopted"));
  cJSON_Delete(o);

  /* exec with plain and secret env, text stdout (redacted) and binary stderr */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"echo $A; echo $S; "
                          "printf '\\\\377' >&2\",\"env\":{\"A\":\"plain\","
                          "\"S\":{\"secret\":\"DBX_SWEEP_SECRET\"}}}",
                          sid);
  o = sweep_allocations(T(exec), "wf-sweep", in, NULL);
  assert_int_equal((int)num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "plain\n[redacted:DBX_SWEEP_SECRET]\n");
  assert_string_equal(str(o, "stderr_b64"), "/w==");
  cJSON_Delete(o);
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "plain\n[redacted:DBX_SWEEP_SECRET]\n");
  cJSON_Delete(o);
  free(in);

  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/hello.txt\",\"content_b64\":\"aGVsbG8=\"}",
                    sid);
  o = sweep_allocations(T(write_file), "wf-sweep", in, NULL);
  assert_int_equal((int)num(o, "bytes"), 5);
  cJSON_Delete(o);
  free(in);

  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"d/hello.txt\"}", sid);
  o = sweep_allocations(T(read_file), "wf-sweep", in, NULL);
  assert_string_equal(str(o, "content"), "hello");
  assert_int_equal((int)num(o, "bytes"), 5);
  cJSON_Delete(o);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "hello");
  cJSON_Delete(o);
  free(in);

  /* refusals allocate their failure record: out of memory there is a
   * retryable failure too, never an empty success nor half a record */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content_b64\":\"QR==\"}", sid);
  assert_null(sweep_allocations(T(write_file), "wf-sweep", in, "InvalidInput"));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"nope\"}", sid);
  assert_null(sweep_allocations(T(read_file), "wf-sweep", in, "FileNotFound"));
  free(in);
  assert_null(sweep_allocations(T(exec), "wf-sweep", "{\"command\":\"true\"}", "InvalidInput"));
  unsetenv("DBX_SWEEP_SECRET");
}

static void test_driver_lifecycle_labels_list(void **state) {
  (void)state;
  dbx_drv_label l1[] = {{"team", "a"}, {"run", "r1"}};
  dbx_drv_label l2[] = {{"team", "a"}, {"run", "r2"}};
  dbx_drv_create_opts o1 = {.labels = l1, .nlabels = 2}, o2 = {.labels = l2, .nlabels = 2};
  int adopted = -1;
  assert_int_equal(OPS(create, "lab-1", &o1, &adopted), DBX_DRV_OK);
  assert_int_equal(adopted, 0);
  assert_int_equal(OPS(create, "lab-2", &o2, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(create, "lab-1", &o1, &adopted), DBX_DRV_OK);
  assert_int_equal(adopted, 1);
  dbx_drv_create_opts snap = {.source = {DBX_DRV_SOURCE_SNAPSHOT, "nope", NULL}};
  assert_int_equal(OPS(create, "lab-1", &snap, NULL), DBX_DRV_CONFLICT);
  assert_int_equal(OPS(create, "lab-3", &snap, NULL), DBX_DRV_SOURCE_NOT_FOUND);
  dbx_drv_label bad = {"bad key", "v"};
  dbx_drv_create_opts ob = {.labels = &bad, .nlabels = 1};
  assert_int_equal(OPS(create, "lab-4", &ob, NULL), DBX_DRV_INVALID);
  assert_int_equal(OPS(create, "../x", &o1, NULL), DBX_DRV_INVALID);
  dbx_drv_create_opts img = {.source = {DBX_DRV_SOURCE_IMAGE, "debian:12", NULL}};
  dbx_drv_err ie = OPS(create, "lab-img", &img, NULL);
  assert_int_equal(ie, g_local ? DBX_DRV_UNSUPPORTED : DBX_DRV_OK);

  dbx_drv_label *got = NULL;
  size_t ng = 0;
  assert_int_equal(OPS(labels, "lab-1", &got, &ng), DBX_DRV_OK);
  assert_int_equal(ng, 2);
  assert_string_equal(got[0].key, "team");
  assert_string_equal(got[0].value, "a");
  assert_string_equal(got[1].key, "run");
  assert_string_equal(got[1].value, "r1");
  dbx_drv_labels_free(got, ng);
  assert_int_equal(OPS(labels, "lab-none", &got, &ng), DBX_DRV_NO_SANDBOX);

  char **names = NULL;
  size_t n = 0;
  dbx_drv_label team = {"team", "a"}, r2 = {"run", "r2"}, other = {"team", "b"};
  assert_int_equal(OPS(list, &team, 1, &names, &n), DBX_DRV_OK);
  assert_int_equal(n, 2);
  int seen1 = 0, seen2 = 0;
  for (size_t i = 0; i < n; i++) {
    seen1 += strcmp(names[i], "lab-1") == 0;
    seen2 += strcmp(names[i], "lab-2") == 0;
  }
  assert_int_equal(seen1 + seen2, 2);
  dbx_drv_names_free(names, n);
  dbx_drv_label both[] = {team, r2};
  assert_int_equal(OPS(list, both, 2, &names, &n), DBX_DRV_OK);
  assert_int_equal(n, 1);
  assert_string_equal(names[0], "lab-2");
  dbx_drv_names_free(names, n);
  assert_int_equal(OPS(list, &other, 1, &names, &n), DBX_DRV_OK);
  assert_int_equal(n, 0);
  dbx_drv_names_free(names, n);

  dbx_drv_state st = DBX_DRV_STOPPED;
  assert_int_equal(OPS(exists, "lab-1", &st), DBX_DRV_OK);
  assert_int_equal(st, DBX_DRV_RUNNING);
  assert_int_equal(OPS(stop, "lab-1"), DBX_DRV_OK);
  assert_int_equal(OPS(stop, "lab-1"), DBX_DRV_OK);
  assert_int_equal(OPS(exists, "lab-1", &st), DBX_DRV_OK);
  assert_int_equal(st, DBX_DRV_STOPPED);
  assert_int_equal(OPS(file_write, "lab-1", "f", "x", 1), DBX_DRV_STATE);
  dbx_drv_exec_opts eo = {.command = "true"};
  assert_int_equal(OPS(exec_start, "lab-1", "c1", &eo, NULL), DBX_DRV_STATE);
  assert_non_null(strstr(g_drv->ops->errmsg(g_drv->self), "lab-1")); /* names the sandbox */
  assert_int_equal(OPS(start, "lab-1"), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "lab-1", "f", "x", 1), DBX_DRV_OK);
  assert_int_equal(OPS(start, "lab-none"), DBX_DRV_NO_SANDBOX);
  assert_int_equal(OPS(del, "lab-1"), DBX_DRV_OK);
  assert_int_equal(OPS(del, "lab-1"), DBX_DRV_OK); /* missing counts as done */
  assert_int_equal(OPS(exists, "lab-1", NULL), DBX_DRV_NO_SANDBOX);
  assert_int_equal(OPS(del, "lab-2"), DBX_DRV_OK);
  assert_int_equal(OPS(del, "lab-img"), DBX_DRV_OK);
}

static void test_driver_files_upload_download(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "files-1", &o, NULL), DBX_DRV_OK);
  uint8_t bytes[256];
  for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i;
  assert_int_equal(OPS(file_write, "files-1", "a/b/c.bin", bytes, sizeof bytes), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "files-1", "a/b/c.bin", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 256);
  assert_memory_equal(data, bytes, 256);
  free(data);
  assert_int_equal(OPS(file_read, "files-1", "a/b/c.bin", 10, &data, &len), DBX_DRV_INVALID);
  assert_int_equal(OPS(file_read, "files-1", "a/none", 0, &data, &len), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(file_read, "files-1", "../x", 0, &data, &len), DBX_DRV_PATH_REFUSED);
  assert_int_equal(OPS(file_read, "files-1", "/etc/passwd", 0, &data, &len),
                   DBX_DRV_PATH_REFUSED);
  assert_int_equal(OPS(file_write, "files-1", "a/../../x", "x", 1), DBX_DRV_PATH_REFUSED);
  assert_int_equal(OPS(file_write, "files-1", "a/b", "x", 1), DBX_DRV_INVALID); /* a folder */
  assert_int_equal(OPS(file_read, "files-none", "f", 0, &data, &len), DBX_DRV_NO_SANDBOX);

  /* upload a host file, download it again under another name */
  char *up = dbx_asprintf("%s/up.bin", g_tmp), *down = dbx_asprintf("%s/down.bin", g_tmp);
  FILE *f = fopen(up, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, sizeof bytes, f), sizeof bytes);
  fclose(f);
  assert_int_equal(OPS(upload, "files-1", up, "in/up.bin"), DBX_DRV_OK);
  assert_int_equal(OPS(file_read, "files-1", "in/up.bin", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 256);
  assert_memory_equal(data, bytes, 256);
  free(data);
  assert_int_equal(OPS(download, "files-1", "in/up.bin", down), DBX_DRV_OK);
  uint8_t back[300];
  f = fopen(down, "rb");
  assert_non_null(f);
  assert_int_equal(fread(back, 1, sizeof back, f), 256);
  fclose(f);
  assert_memory_equal(back, bytes, 256);
  char *missing = dbx_asprintf("%s/none.bin", g_tmp);
  assert_int_equal(OPS(upload, "files-1", missing, "x"), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(upload, "files-1", up, "../x"), DBX_DRV_PATH_REFUSED);
  assert_int_equal(OPS(download, "files-1", "none", down), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(upload, "files-1", "relative.bin", "x"), DBX_DRV_INVALID);
  free(missing);
  free(up);
  free(down);
  assert_int_equal(OPS(del, "files-1"), DBX_DRV_OK);
}

/* Poll until the command finishes (deadline 20 s). */
static void wait_finished(const char *sb, const char *cmd, dbx_drv_cmd_status *st) {
  for (int i = 0; i < 2000; i++) {
    assert_int_equal(OPS(exec_poll, sb, cmd, st), DBX_DRV_OK);
    if (st->state == DBX_DRV_CMD_FINISHED) return;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  fail_msg("command %s did not finish", cmd);
}

static void test_driver_exec_ops(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "ex-1", &o, NULL), DBX_DRV_OK);
  const char *env[] = {"WHO=world", NULL};
  dbx_drv_exec_opts eo = {.command = "echo hello $WHO; echo oops >&2; exit 4", .env = env};
  int adopted = -1;
  assert_int_equal(OPS(exec_start, "ex-1", "c1", &eo, &adopted), DBX_DRV_OK);
  assert_int_equal(adopted, 0);
  assert_int_equal(OPS(exec_start, "ex-1", "c1", &eo, &adopted), DBX_DRV_OK);
  assert_int_equal(adopted, 1);
  dbx_drv_cmd_status st;
  wait_finished("ex-1", "c1", &st);
  assert_int_equal(st.stdout_size, 12);
  assert_int_equal(st.stderr_size, 5);
  char buf[64];
  size_t n = 0;
  assert_int_equal(OPS(exec_attach, "ex-1", "c1", 1, 6, buf, sizeof buf, &n), DBX_DRV_OK);
  assert_int_equal(n, 6);
  assert_memory_equal(buf, "world\n", 6);
  assert_int_equal(OPS(exec_attach, "ex-1", "c1", 2, 0, buf, sizeof buf, &n), DBX_DRV_OK);
  assert_int_equal(n, 5);
  assert_memory_equal(buf, "oops\n", 5);
  assert_int_equal(OPS(exec_attach, "ex-1", "c1", 1, 12, buf, sizeof buf, &n), DBX_DRV_OK);
  assert_int_equal(n, 0);
  dbx_drv_exec_result r;
  assert_int_equal(OPS(exec_result, "ex-1", "c1", &r), DBX_DRV_OK);
  assert_int_equal(r.exit_code, 4);
  assert_int_equal(r.killed, 0);
  assert_string_equal((char *)r.stdout_buf, "hello world\n");
  assert_int_equal(r.stdout_total, 12);
  dbx_drv_exec_result_cleanup(&r);
  assert_int_equal(OPS(exec_poll, "ex-1", "nope", &st), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(exec_result, "ex-1", "nope", &r), DBX_DRV_NOT_FOUND);

  /* a long one: running, cancelled, finished killed, forgotten */
  dbx_drv_exec_opts lo = {.command = "sleep 30"};
  assert_int_equal(OPS(exec_start, "ex-1", "c2", &lo, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(exec_poll, "ex-1", "c2", &st), DBX_DRV_OK);
  assert_int_equal(st.state, DBX_DRV_CMD_RUNNING);
  assert_int_equal(OPS(exec_result, "ex-1", "c2", &r), DBX_DRV_STATE);
  assert_int_equal(OPS(exec_forget, "ex-1", "c2"), DBX_DRV_STATE);
  assert_int_equal(OPS(exec_cancel, "ex-1", "c2"), DBX_DRV_OK);
  wait_finished("ex-1", "c2", &st);
  assert_int_equal(OPS(exec_result, "ex-1", "c2", &r), DBX_DRV_OK);
  assert_int_equal(r.killed, 1);
  assert_int_equal(r.exit_code, 137);
  dbx_drv_exec_result_cleanup(&r);
  assert_int_equal(OPS(exec_cancel, "ex-1", "c2"), DBX_DRV_OK); /* finished: left alone */
  assert_int_equal(OPS(exec_forget, "ex-1", "c2"), DBX_DRV_OK);
  assert_int_equal(OPS(exec_poll, "ex-1", "c2", &st), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(exec_forget, "ex-1", "c2"), DBX_DRV_OK);
  /* bad cwd, bad ids */
  dbx_drv_exec_opts bc = {.command = "true", .cwd = "nowhere"};
  assert_int_equal(OPS(exec_start, "ex-1", "c3", &bc, NULL), DBX_DRV_NOT_FOUND);
  bc.cwd = "../..";
  assert_int_equal(OPS(exec_start, "ex-1", "c3", &bc, NULL), DBX_DRV_PATH_REFUSED);
  assert_int_equal(OPS(exec_start, "ex-1", "../c", &eo, NULL), DBX_DRV_INVALID);
  assert_int_equal(OPS(exec_start, "ex-none", "c1", &eo, NULL), DBX_DRV_NO_SANDBOX);
  assert_int_equal(OPS(del, "ex-1"), DBX_DRV_OK);
}

static void test_driver_checkpoint_restore(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "ck-1", &o, NULL), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "ck-1", "keep.txt", "v1", 2), DBX_DRV_OK);
  char *ref = NULL, *ref2 = NULL;
  assert_int_equal(OPS(checkpoint, "ck-1", "ck-1-s1", &ref), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "ck-1", "keep.txt", "v2", 2), DBX_DRV_OK);
  assert_int_equal(OPS(file_write, "ck-1", "later.txt", "new", 3), DBX_DRV_OK);
  assert_int_equal(OPS(checkpoint, "ck-1", "ck-1-s1", &ref2), DBX_DRV_OK); /* unchanged */
  assert_string_equal(ref, ref2);
  free(ref2);
  assert_int_equal(OPS(restore, "ck-1", ref), DBX_DRV_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "ck-1", "keep.txt", 0, &data, &len), DBX_DRV_OK);
  assert_int_equal(len, 2);
  assert_memory_equal(data, "v1", 2);
  free(data);
  assert_int_equal(OPS(file_read, "ck-1", "later.txt", 0, &data, &len), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(restore, "ck-1", "ck-none"), DBX_DRV_SOURCE_NOT_FOUND);
  assert_int_equal(OPS(restore, "ck-none", ref), DBX_DRV_NO_SANDBOX);
  assert_int_equal(OPS(checkpoint, "ck-none", "x", &ref2), DBX_DRV_NO_SANDBOX);
  assert_int_equal(OPS(checkpoint, "ck-1", "a/b", &ref2), DBX_DRV_INVALID);
  /* a running command refuses a restore */
  dbx_drv_exec_opts lo = {.command = "sleep 30"};
  assert_int_equal(OPS(exec_start, "ck-1", "long", &lo, NULL), DBX_DRV_OK);
  dbx_drv_cmd_status st;
  for (int i = 0; i < 500; i++) { /* until its runner holds it */
    assert_int_equal(OPS(exec_poll, "ck-1", "long", &st), DBX_DRV_OK);
    if (st.state == DBX_DRV_CMD_RUNNING) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(st.state, DBX_DRV_CMD_RUNNING);
  assert_int_equal(OPS(restore, "ck-1", ref), DBX_DRV_STATE);
  assert_int_equal(OPS(exec_cancel, "ck-1", "long"), DBX_DRV_OK);
  wait_finished("ck-1", "long", &st);
  assert_int_equal(OPS(restore, "ck-1", ref), DBX_DRV_OK);
  assert_int_equal(OPS(snapshot_delete, ref), DBX_DRV_OK);
  assert_int_equal(OPS(snapshot_delete, ref), DBX_DRV_OK);
  assert_int_equal(OPS(restore, "ck-1", ref), DBX_DRV_SOURCE_NOT_FOUND);
  free(ref);
  assert_int_equal(OPS(del, "ck-1"), DBX_DRV_OK);
}

/* A repository with a.txt = "one\n": on the host (local) or as a memory
 * driver source; returns its location (free()). */
static char *make_repo(const char *name) {
  char *loc = dbx_asprintf("%s/%s", g_tmp, name);
  if (g_mem) {
    assert_int_equal(dbx_memdrv_source_put(g_mem, loc, "a.txt", "one\n", 4), DBX_OK);
    return loc;
  }
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init",
                           loc, loc);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  return loc;
}

static void test_driver_git_clone_commit_push(void **state) {
  (void)state;
  char *repo = make_repo("repo-g");
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "git-1", &o, NULL), DBX_DRV_OK);
  /* a stale target is cleared by the clone */
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
  /* issue 9: a missing repository is told apart from a failure worth a retry */
  assert_int_equal(OPS(git_clone, "git-1", nope, "other", NULL), DBX_DRV_REPO_NOT_FOUND);
  free(nope);

  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(OPS(git_commit, "git-1", "src", "m", "A <a@b>", &sha, &nothing), DBX_DRV_OK);
  assert_int_equal(nothing, 1); /* fresh clone: nothing to commit */
  assert_null(sha);
  assert_int_equal(OPS(file_write, "git-1", "src/a.txt", "two\n", 4), DBX_DRV_OK);
  assert_int_equal(OPS(git_commit, "git-1", "src", "change", "A <a@b>", &sha, &nothing),
                   DBX_DRV_OK);
  assert_int_equal(nothing, 0);
  assert_non_null(sha);
  assert_int_equal(strlen(sha), 40);
  char *sha2 = NULL;
  assert_int_equal(OPS(git_commit, "git-1", NULL, "m", "A <a@b>", &sha2, &nothing),
                   DBX_DRV_NOT_A_REPO); /* the root is no repository */
  assert_null(sha2);

  /* push to a bare repository (local) / a recorded remote (memory) */
  char *bare = dbx_asprintf("%s/bare-g.git", g_tmp);
  if (g_local) {
    char *cmd = dbx_asprintf("git init -q --bare %s", bare);
    assert_int_equal(system(cmd), 0);
    free(cmd);
  }
  assert_int_equal(OPS(git_push, "git-1", "src", bare, NULL), DBX_DRV_OK);
  char *pushed = NULL;
  if (g_local) {
    char *cmd = dbx_asprintf("git --git-dir=%s rev-parse refs/heads/main", bare);
    FILE *p = popen(cmd, "r");
    char line[64] = "";
    assert_non_null(p);
    assert_non_null(fgets(line, sizeof line, p));
    pclose(p);
    line[strcspn(line, "\n")] = 0;
    pushed = dbx_strdup(line);
    free(cmd);
  } else {
    assert_int_equal(dbx_memdrv_pushed(g_mem, bare, NULL, &pushed), DBX_OK);
  }
  assert_string_equal(pushed, sha);
  free(pushed);
  assert_int_equal(OPS(git_push, "git-1", "none", bare, NULL), DBX_DRV_NOT_FOUND);
  assert_int_equal(OPS(file_write, "git-1", "plain/f", "x", 1), DBX_DRV_OK);
  assert_int_equal(OPS(git_push, "git-1", "plain", bare, NULL), DBX_DRV_NOT_A_REPO); /* no repository */
  free(sha);
  free(bare);
  free(repo);
  assert_int_equal(OPS(del, "git-1"), DBX_DRV_OK);
}

/* Issue 9: while the command runs, its heartbeat details carry the last
 * lines of each stream (durabox run shows them), redacted like the result. */
static void test_sandbox_acts_exec_heartbeat_tail(void **state) {
  (void)state;
  setenv("DBX_TAIL_TOKEN", "tail-s3cret-77", 1);
  char *id = make_sandbox("wf-tail", NULL);
  struct dbx_act a = act_for("wf-tail");
  a.prev_details = "{}"; /* keep the heartbeats for reading (see run) */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf 'zero\\\\none\\\\ntwo\\\\n'; "
                          "echo \\\"tok=$TOK\\\"; printf 'four\\\\r'; echo err-line >&2; sleep 1\","
                          "\"env\":{\"TOK\":{\"secret\":\"DBX_TAIL_TOKEN\"}}}",
                          id);
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal((int)num(o, "exit_code"), 0);
  cJSON_Delete(o);
  assert_non_null(a.last_details);
  assert_null(strstr(a.last_details, "tail-s3cret"));
  cJSON *d = cJSON_Parse(a.last_details);
  assert_non_null(d);
  assert_string_equal(str(d, "stdout_tail"), "two\ntok=[redacted:DBX_TAIL_TOKEN]\nfour");
  assert_string_equal(str(d, "stderr_tail"), "err-line");
  assert_true(num(d, "stdout_offset") > 0);
  assert_non_null(cJSON_GetObjectItemCaseSensitive(d, "cmd_id"));
  cJSON_Delete(d);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
  unsetenv("DBX_TAIL_TOKEN");
}

/* Issue 9: failures no retry mends are non-retryable, typed, and name their
 * cause: a repository that does not exist, a source or workspace that is no
 * repository, a ref the repository lacks (the driver tells them apart, from
 * git's exit and words or the path it checks before cloning). */
static void test_sandbox_acts_unretryable_git_failures(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-unretry");
  char *nope = dbx_asprintf("{\"source\":{\"kind\":\"git\",\"path\":\"%s/no-such-repo\"}}", g_tmp);
  char *m = failed(T(create), &a, nope, "RepositoryNotFound", 1);
  expect_message(dbx_strdup(m), "no-such-repo");
  expect_message(m, "(repository not found)");
  free(nope);
  /* git_commit where the workspace is no repository */
  char *id = make_sandbox("wf-unretry-2", NULL);
  struct dbx_act b = act_for("wf-unretry-2");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"message\":\"m\"}", id);
  expect_message(failed(T(git_commit), &b, in, "NotAGitRepository", 1), "not a git repository");
  free(in);
  free(id);
  if (g_local) { /* host git: a plain folder as the source, and a ref that does not exist */
    char *plain = dbx_asprintf("%s/plain-src", g_tmp);
    assert_int_equal(mkdir(plain, 0755), 0);
    in = dbx_asprintf("{\"resource\":\"p\",\"source\":{\"kind\":\"git\",\"path\":\"%s\"}}", plain);
    expect_message(failed(T(create), &a, in, "NotAGitRepository", 1), "plain-src");
    free(in);
    char *repo = make_repo("repo-ref");
    in = dbx_asprintf("{\"resource\":\"r\",\"source\":{\"kind\":\"git\",\"path\":\"%s\","
                      "\"ref\":\"no-such-branch\"}}", repo);
    expect_message(failed(T(create), &a, in, "RefNotFound", 1), "no-such-branch");
    free(in);
    /* the same repository at a ref it has is fine */
    in = dbx_asprintf("{\"resource\":\"r2\",\"source\":{\"kind\":\"git\",\"path\":\"%s\","
                      "\"ref\":\"main\"}}", repo);
    cJSON_Delete(ok(T(create), &a, in));
    free(in);
    free(repo);
    free(plain);
  }
}

/* Every typed error a driver answers becomes its failure type by the table
 * (memory driver: the next op fails as told). */
static void test_sandbox_acts_failure_types_by_table(void **state) {
  (void)state;
  static const struct {
    dbx_drv_err e;
    const char *type;
    int non_retryable;
  } want[] = {
      {DBX_DRV_NO_SANDBOX, "SandboxGone", 1}, {DBX_DRV_PATH_REFUSED, "PathRefused", 1},
      {DBX_DRV_NOT_FOUND, "FileNotFound", 1},     {DBX_DRV_SOURCE_NOT_FOUND, "SourceNotFound", 1},
      {DBX_DRV_CONFLICT, "SandboxConflict", 1},   {DBX_DRV_SNAPSHOT_FAILED, "SnapshotFailed", 0},
      {DBX_DRV_OUTCOME_UNKNOWN, "OutcomeUnknown", 1}, {DBX_DRV_TRANSIENT, "SandboxError", 0},
      {DBX_DRV_INVALID, "InvalidInput", 1},       {DBX_DRV_STATE, "SandboxError", 0},
      {DBX_DRV_UNSUPPORTED, "Unsupported", 1},    {DBX_DRV_FAILED, "SandboxError", 0},
      {DBX_DRV_REPO_NOT_FOUND, "RepositoryNotFound", 1}, {DBX_DRV_NOT_A_REPO, "NotAGitRepository", 1},
      {DBX_DRV_REF_NOT_FOUND, "RefNotFound", 1},  {DBX_DRV_DISK_FULL, "DiskFull", 1},
      {DBX_DRV_AUTH, "AuthFailed", 1},
  };
  assert_int_equal(sizeof want / sizeof want[0], DBX_DRV_ERR_COUNT - 3); /* all but OK, CANCELED, NOMEM */
  char *id = make_sandbox("wf-table", NULL);
  struct dbx_act a = act_for("wf-table");
  char *rd = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\"}", id);
  char *ex = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\"}", id);
  char *ck = dbx_asprintf("{\"sandbox_id\":\"%s\"}", id);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int nr = -1;
    assert_string_equal(dbx_sandbox_failure_type(want[i].e, &nr), want[i].type);
    assert_int_equal(nr, want[i].non_retryable);
    /* through three activities and three ops */
    dbx_memdrv_fail_next(g_mem, "file_read", want[i].e, 1);
    free(failed(T(read_file), &a, rd, want[i].type, want[i].non_retryable));
    dbx_memdrv_fail_next(g_mem, "exec_start", want[i].e, 1);
    free(failed(T(exec), &a, ex, want[i].type, want[i].non_retryable));
    dbx_memdrv_fail_next(g_mem, "checkpoint", want[i].e, 1);
    free(failed(T(checkpoint), &a, ck, want[i].type, want[i].non_retryable));
    dbx_memdrv_fail_next(g_mem, "create", want[i].e, 1);
    free(failed(T(create), &a, "{}", want[i].type, want[i].non_retryable));
  }
  assert_null(dbx_sandbox_failure_type(DBX_DRV_OK, NULL));
  assert_null(dbx_sandbox_failure_type(DBX_DRV_CANCELED, NULL));
  assert_null(dbx_sandbox_failure_type(DBX_DRV_NOMEM, NULL));
  assert_null(dbx_sandbox_failure_type(DBX_DRV_ERR_COUNT, NULL));
  /* cancelled and out of memory are no failure: the run's return says it */
  dbx_act_result r;
  dbx_memdrv_fail_next(g_mem, "file_read", DBX_DRV_CANCELED, 1);
  assert_int_equal(run(T(read_file), &a, rd, &r, NULL), DBX_ECANCELED);
  assert_null(r.failure_type);
  res_cleanup(&r);
  dbx_memdrv_fail_next(g_mem, "file_read", DBX_DRV_NOMEM, 1);
  assert_int_equal(run(T(read_file), &a, rd, &r, NULL), DBX_ENOMEM);
  res_cleanup(&r);
  /* a delete answered NO_SANDBOX counts as done */
  dbx_memdrv_fail_next(g_mem, "del", DBX_DRV_NO_SANDBOX, 1);
  cJSON_Delete(ok(T(delete), &a, ck));
  /* the injection is spent: the op works again */
  cJSON_Delete(ok(T(checkpoint), &a, ck));
  free(rd);
  free(ex);
  free(ck);
  free(id);
}

/* A command whose runner vanished (LOST) is forgotten and started again
 * by the next attempt, which then runs it (seen by the driver's start count)
 * until a cancel ends the attempt. */
static void test_sandbox_acts_exec_lost_restarts_once(void **state) {
  (void)state;
  char *id = make_sandbox("wf-lost", NULL);
  struct dbx_act a = act_for("wf-lost");
  a.prev_details = "{}"; /* keep the activity id, so the command id is the derived one */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"sleep 30\"}", id);
  /* exec's command id, computed here independently: FNV-1a 64 of
   * workflow id, run id and activity id joined by 0x1f */
  uint64_t h = 0xcbf29ce484222325ULL;
  const char *parts[] = {"wf-lost", "\x1f", "run-1", "\x1f", "1"};
  for (size_t k = 0; k < 5; k++)
    for (const char *c = parts[k]; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
  char cmd_id[24];
  snprintf(cmd_id, sizeof cmd_id, "x%016llx", (unsigned long long)h);
  dbx_drv_exec_opts lo = {.command = "sleep 30"};
  assert_int_equal(OPS(exec_start, id, cmd_id, &lo, NULL), DBX_DRV_OK);
  assert_int_equal(dbx_memdrv_cmd_lose(g_mem, id, cmd_id), DBX_OK);
  dbx_drv_cmd_status st;
  assert_int_equal(OPS(exec_poll, id, cmd_id, &st), DBX_DRV_OK);
  assert_int_equal(st.state, DBX_DRV_CMD_LOST);
  int before = dbx_memdrv_exec_count(g_mem);
  a.cancel_at_heartbeat = 1;
  dbx_act_result r;
  assert_int_equal(run(T(exec), &a, in, &r, NULL), DBX_ECANCELED);
  res_cleanup(&r);
  assert_int_equal(dbx_memdrv_exec_count(g_mem), before + 1); /* started again, once */
  assert_non_null(strstr(a.last_details, cmd_id));             /* heartbeats name it */
  /* the cancel killed the restarted command */
  assert_int_equal(OPS(exec_poll, id, cmd_id, &st), DBX_DRV_OK);
  assert_int_equal(st.state, DBX_DRV_CMD_FINISHED);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

/* A command the driver says never started (its supervisor's child died
 * before exec; nothing of it ran) is started again once, whatever its retry
 * class: the step then succeeds with the command's own output. Twice is a
 * retryable CommandNotStarted naming why, never "exit code 127". */
static void test_sandbox_acts_exec_not_started_restarts_once(void **state) {
  (void)state;
  char *id = make_sandbox("wf-nostart", NULL);
  for (int amo = 0; amo < 2; amo++) {
    struct dbx_act a = act_for("wf-nostart");
    a.activity_id = amo ? "7" : "6";
    a.retry_class = amo ? DBX_AT_MOST_ONCE : DBX_SAFE_TO_RETRY;
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf ran\"}", id);
    int before = dbx_memdrv_exec_count(g_mem);
    dbx_memdrv_not_started_next(g_mem, 1);
    cJSON *o = ok(T(exec), &a, in);
    assert_int_equal(num(o, "exit_code"), 0);
    assert_string_equal(str(o, "stdout"), "ran");
    assert_int_equal(dbx_memdrv_exec_count(g_mem), before + 1); /* it ran once */
    cJSON_Delete(o);
    dbx_fake_act_cleanup(&a);
    free(in);
  }
  struct dbx_act a = act_for("wf-nostart");
  a.activity_id = "8";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf ran\"}", id);
  int before = dbx_memdrv_exec_count(g_mem);
  dbx_memdrv_not_started_next(g_mem, 2);
  char *m = failed(T(exec), &a, in, "CommandNotStarted", 0);
  assert_int_equal(dbx_memdrv_exec_count(g_mem), before); /* nothing ran */
  expect_message(m, "did not start, twice (nothing of it ran): cannot start /bin/sh: Broken pipe");
  dbx_memdrv_not_started_next(g_mem, 0);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}

/* Two local drivers over two homes and a memory driver in one process, at
 * once: the same workflow's sandbox exists in each, apart. */
static void test_driver_two_homes_one_process(void **state) {
  (void)state;
  char *h1 = dbx_test_tmpdir("dbx-two-1"), *h2 = dbx_test_tmpdir("dbx-two-2");
  dbx_local *l1 = NULL, *l2 = NULL;
  dbx_memdrv *m = NULL;
  assert_int_equal(dbx_local_open(h1, &l1), DBX_OK);
  assert_int_equal(dbx_local_open(h2, &l2), DBX_OK);
  dbx_memdrv_opts mo = {.exec = mini_sh};
  assert_int_equal(dbx_memdrv_create(&mo, &m), DBX_OK);
  dbx_driver *drv[3] = {dbx_local_driver(l1), dbx_local_driver(l2), dbx_memdrv_driver(m)};
  dbx_sandbox_acts *acts[3];
  for (int i = 0; i < 3; i++) assert_int_equal(dbx_sandbox_acts_create(drv[i], &acts[i]), DBX_OK);
  struct dbx_worker w[3];
  memset(w, 0, sizeof w);
  char *ids[3];
  for (int i = 0; i < 3; i++) {
    assert_int_equal(dbx_sandbox_register_all(&w[i], acts[i]), DBX_OK);
    assert_int_equal(w[i].n, DBX_SANDBOX_NTYPES);
    const dbx_activity_type *cr = dbx_sandbox_acts_type(acts[i], "sandbox.create");
    assert_ptr_equal(w[i].types[0], cr);
    struct dbx_act a = act_for("wf-two");
    dbx_act_result r = {0};
    assert_int_equal(cr->run(&a, "{}", 2, &r, cr->ud), DBX_OK);
    assert_non_null(r.result_json);
    cJSON *o = cJSON_Parse(r.result_json);
    ids[i] = dbx_strdup(str(o, "sandbox_id"));
    assert_false(boolean(o, "adopted")); /* each driver its own: not adopted across */
    cJSON_Delete(o);
    res_cleanup(&r);
    const dbx_activity_type *wr = dbx_sandbox_acts_at(acts[i], 2);
    assert_string_equal(wr->name, "sandbox.write_file");
    char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"who\",\"content\":\"d%d\"}",
                            ids[i], i);
    assert_int_equal(wr->run(&a, in, strlen(in), &r, wr->ud), DBX_OK);
    assert_null(r.failure_type);
    res_cleanup(&r);
    free(in);
  }
  assert_string_equal(ids[0], ids[1]); /* the same derived name */
  assert_string_equal(ids[1], ids[2]);
  for (int i = 0; i < 3; i++) {
    uint8_t *data = NULL;
    size_t len = 0;
    assert_int_equal(drv[i]->ops->file_read(drv[i]->self, ids[i], "who", 0, &data, &len),
                     DBX_DRV_OK);
    char want[8];
    snprintf(want, sizeof want, "d%d", i);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(data, want, len);
    free(data);
  }
  /* on disk: each home holds its own */
  for (int i = 0; i < 2; i++) {
    char *p = dbx_asprintf("%s/sandboxes/%s/workspace/who", i ? h2 : h1, ids[i]);
    assert_int_equal(access(p, F_OK), 0);
    free(p);
  }
  /* deleting in one leaves the others */
  assert_int_equal(drv[0]->ops->del(drv[0]->self, ids[0]), DBX_DRV_OK);
  assert_int_equal(drv[0]->ops->exists(drv[0]->self, ids[0], NULL), DBX_DRV_NO_SANDBOX);
  assert_int_equal(drv[1]->ops->exists(drv[1]->self, ids[1], NULL), DBX_DRV_OK);
  assert_int_equal(drv[2]->ops->exists(drv[2]->self, ids[2], NULL), DBX_DRV_OK);
  for (int i = 0; i < 3; i++) {
    dbx_sandbox_acts_destroy(acts[i]);
    free(ids[i]);
  }
  dbx_local_close(l1);
  dbx_local_close(l2);
  drv[2]->ops->destroy(drv[2]->self); /* the generic destructor */
  dbx_test_rmrf(h1);
  dbx_test_rmrf(h2);
  free(h1);
  free(h2);
}

/* Ops from several threads at once on one driver, each on its own sandbox,
 * plus all on one shared sandbox's files. */
typedef struct {
  int n;
  int bad; /* ops that did not answer as expected */
} par_arg;

static void *par_worker(void *p) {
  par_arg *a = p;
  char name[32], path[32], want[32];
  snprintf(name, sizeof name, "par-%d", a->n);
  dbx_drv_create_opts o = {0};
  if (OPS(create, name, &o, NULL) != DBX_DRV_OK) a->bad++;
  for (int k = 0; k < 20; k++) {
    snprintf(path, sizeof path, "f%d", k);
    snprintf(want, sizeof want, "%d/%d", a->n, k);
    if (OPS(file_write, name, path, want, strlen(want)) != DBX_DRV_OK) a->bad++;
    if (OPS(file_write, "par-shared", path, want, strlen(want)) != DBX_DRV_OK) a->bad++;
    uint8_t *data = NULL;
    size_t len = 0;
    if (OPS(file_read, name, path, 0, &data, &len) != DBX_DRV_OK || len != strlen(want) ||
        memcmp(data, want, len) != 0)
      a->bad++;
    free(data);
  }
  dbx_drv_exec_opts eo = {.command = "echo ok"};
  if (OPS(exec_start, name, "c", &eo, NULL) != DBX_DRV_OK) a->bad++;
  if (OPS(del, name) != DBX_DRV_OK) a->bad++; /* kills what still runs */
  return NULL;
}

static void test_driver_threads(void **state) {
  (void)state;
  dbx_drv_create_opts o = {0};
  assert_int_equal(OPS(create, "par-shared", &o, NULL), DBX_DRV_OK);
  pthread_t t[4];
  par_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (par_arg){.n = i};
    assert_int_equal(pthread_create(&t[i], NULL, par_worker, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(a[i].bad, 0);
  }
  /* the shared file holds one whole write of some thread */
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(OPS(file_read, "par-shared", "f19", 0, &data, &len), DBX_DRV_OK);
  assert_true(len == 4 && data[0] >= '0' && data[0] <= '3' && memcmp(data + 1, "/19", 3) == 0);
  free(data);
  char **names = NULL;
  size_t n = 0;
  assert_int_equal(OPS(list, NULL, 0, &names, &n), DBX_DRV_OK);
  int left = 0; /* every thread deleted its own sandbox */
  for (size_t i = 0; i < n; i++)
    left += strncmp(names[i], "par-", 4) == 0 && strcmp(names[i], "par-shared") != 0;
  assert_int_equal(left, 0);
  dbx_drv_names_free(names, n);
  assert_int_equal(OPS(del, "par-shared"), DBX_DRV_OK);
}

static void test_driver_strerror_and_names(void **state) {
  (void)state;
  assert_string_equal(dbx_drv_strerror(DBX_DRV_NO_SANDBOX), "no such sandbox");
  assert_string_equal(dbx_drv_strerror(DBX_DRV_TRANSIENT), "transient, retry");
  assert_string_equal(dbx_drv_strerror((dbx_drv_err)999), "unknown driver error");
  assert_true(dbx_drv_name_valid("dbx-0123.a_b"));
  assert_false(dbx_drv_name_valid(".x"));
  assert_false(dbx_drv_name_valid("a/b"));
  assert_false(dbx_drv_name_valid(""));
  dbx_drv_label ok_l = {"durabox.run/id", "x y"}, bad_v = {"k", "a\nb"}, bad_k = {"", "v"};
  assert_true(dbx_drv_label_valid(&ok_l));
  assert_false(dbx_drv_label_valid(&bad_v));
  assert_false(dbx_drv_label_valid(&bad_k));
}


/* ---- output: head and tail with a mark, payload limit ---- */

/* What the activity shows of full (n bytes) kept under cap per stream:
 * the head, the mark line, the tail (ASCII input: no UTF-8 shift). */
static char *head_tail_expected(const char *full, size_t n, size_t cap) {
  size_t tail = DBX_DRV_TAIL_BYTES(cap), head = cap - tail;
  if (n <= cap) return dbx_strndup(full, n);
  char num[40], d[24];
  int dn = snprintf(d, sizeof d, "%zu", n - cap), o = 0;
  for (int i = 0; i < dn; i++) {
    if (i > 0 && (dn - i) % 3 == 0) num[o++] = ',';
    num[o++] = d[i];
  }
  num[o] = 0;
  return dbx_asprintf("%.*s%s[\xe2\x80\xa6 %s bytes cut \xe2\x80\xa6]\n%s", (int)head, full,
                      full[head - 1] == '\n' ? "" : "\n", num, full + n - tail);
}

static void test_sandbox_acts_exec_keeps_head_and_tail(void **state) {
  (void)state;
  char *id = make_sandbox("wf-headtail", NULL);
  struct dbx_act a = act_for("wf-headtail");
  /* 3.4 MB then the summary line a test run ends with */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"seq 1 500000; echo SUMMARY: 7 "
                          "passed; echo to-err >&2\"}", id);
  cJSON *o = ok(T(exec), &a, in);
  size_t cap = 0, n = 0;
  char *full = NULL;
  FILE *mf = open_memstream(&full, &cap);
  for (long v = 1; v <= 500000; v++) fprintf(mf, "%ld\n", v);
  fprintf(mf, "SUMMARY: 7 passed\n");
  fclose(mf);
  n = strlen(full);
  char *want = head_tail_expected(full, n, DBX_SANDBOX_OUTPUT_DEFAULT_BYTES);
  const char *got = str(o, "stdout");
  assert_true(strlen(got) > 2 * 131072);
  assert_memory_equal(got, "1\n2\n3\n", 6);
  assert_non_null(strstr(got, "bytes cut"));
  assert_string_equal(got, want);
  assert_int_equal((size_t)num(o, "stdout_bytes"), n);
  assert_true(boolean(o, "stdout_truncated"));
  /* stderr apart, whole */
  assert_string_equal(str(o, "stderr"), "to-err\n");
  assert_int_equal((int)num(o, "stderr_bytes"), 7);
  assert_false(boolean(o, "stderr_truncated"));
  assert_false(boolean(o, "timed_out"));
  cJSON_Delete(o);
  free(in);
  free(want);
  free(full);

  /* a smaller cap of the step's own */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"seq 1 3000\",\"max_output_bytes\":4096}",
                    id);
  o = ok(T(exec), &a, in);
  mf = open_memstream(&full, &cap);
  for (long v = 1; v <= 3000; v++) fprintf(mf, "%ld\n", v);
  fclose(mf);
  want = head_tail_expected(full, strlen(full), 4096);
  assert_string_equal(str(o, "stdout"), want);
  assert_non_null(strstr(str(o, "stdout"), "\n2999\n3000\n"));
  cJSON_Delete(o);
  free(in);
  free(want);
  free(full);

  /* a cap over the limit is refused before anything runs */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"touch ran\",\"max_output_bytes\":%zu}",
                    id, DBX_SANDBOX_OUTPUT_MAX_BYTES + 1);
  expect_message(failed(T(exec), &a, in, "InvalidInput", 1), "max_output_bytes");
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"ran\"}", id);
  free(failed(T(read_file), &a, in, "FileNotFound", 1));
  free(in);
  free(id);
}

static void test_sandbox_acts_exec_secret_cut_at_tail_start(void **state) {
  (void)state;
  const char *secret = "s3cr3t-Value-42";
  setenv("DBX_TEST_TOKEN", secret, 1);
  char *id = make_sandbox("wf-tailsecret", NULL);
  struct dbx_act a = act_for("wf-tailsecret");
  char as[1501], bs[1011];
  memset(as, 'a', 1500), as[1500] = 0;
  memset(bs, 'b', 1010), bs[1010] = 0;
  /* 2525 bytes under a 2048 cap: the tail starts 14 bytes into the value */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '%s'; printf '%%s' "
                          "\\\"$T\\\"; printf '%s'\",\"max_output_bytes\":2048,"
                          "\"env\":{\"T\":{\"secret\":\"DBX_TEST_TOKEN\"}}}",
                          id, as, bs);
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(T(exec), &a, in, &r, &o), DBX_OK);
  assert_null(r.failure_type);
  assert_null(strstr(r.result_json, "3cr3t"));
  assert_null(strstr(r.result_json, "Value-42"));
  char *want = dbx_asprintf("%.1024s\n[\xe2\x80\xa6 bytes cut (count withheld) \xe2\x80\xa6]\n"
                            "[redacted:DBX_TEST_TOKEN]%s", as, bs);
  assert_string_equal(str(o, "stdout"), want);
  assert_int_equal((int)num(o, "stdout_bytes"),
                   (int)(1024 + strlen("[redacted:DBX_TEST_TOKEN]") + 1010));
  assert_true(boolean(o, "stdout_truncated"));
  free(want);
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);
  free(id);
}

static void test_sandbox_acts_read_file_capped_with_mark(void **state) {
  (void)state;
  char *id = make_sandbox("wf-readcap", NULL);
  struct dbx_act a = act_for("wf-readcap");
  size_t n = 1300000;
  char *full = dbx_malloc(n + 1);
  for (size_t i = 0; i < n; i++) full[i] = i < 700000 ? 'a' : 'b';
  memcpy(full + n - 4, "END.", 4);
  full[n] = 0;
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"big.txt\",\"content\":\"%s\"}", id,
                          full);
  cJSON *o = ok(T(write_file), &a, in);
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"big.txt\"}", id);
  dbx_act_result r;
  o = NULL;
  assert_int_equal(run(T(read_file), &a, in, &r, &o), DBX_OK);
  assert_true(strlen(r.result_json) <= DBX_SANDBOX_RESULT_MAX_BYTES);
  char *want = head_tail_expected(full, n, DBX_SANDBOX_READ_MAX_BYTES);
  assert_string_equal(str(o, "content"), want);
  assert_non_null(strstr(str(o, "content"), "[\xe2\x80\xa6 251,424 bytes cut \xe2\x80\xa6]"));
  assert_int_equal((size_t)num(o, "bytes"), n);
  assert_true(boolean(o, "truncated"));
  free(want);
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);
  /* a small file is whole */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"s.txt\",\"content\":\"hi\"}", id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"s.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "hi");
  assert_false(boolean(o, "truncated"));
  cJSON_Delete(o);
  free(in);
  free(full);
  free(id);
}

/* Escaping can make kept text six times larger in JSON: the result is cut
 * further to fit, with the mark, never sent over the limit. */
static void test_sandbox_acts_exec_result_fits_payload(void **state) {
  (void)state;
  char *id = make_sandbox("wf-fit", NULL);
  struct dbx_act a = act_for("wf-fit");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"head -c 900000 /dev/zero | "
                          "tr '\\\\000' '\\\\001'; head -c 900000 /dev/zero | tr '\\\\000' "
                          "'\\\\002' >&2; echo; echo LAST\",\"max_output_bytes\":%zu}",
                          id, DBX_SANDBOX_OUTPUT_MAX_BYTES);
  dbx_act_result r;
  cJSON *o = NULL;
  assert_int_equal(run(T(exec), &a, in, &r, &o), DBX_OK);
  assert_null(r.failure_type);
  assert_true(strlen(r.result_json) <= DBX_SANDBOX_RESULT_MAX_BYTES);
  assert_true(strlen(r.result_json) > DBX_SANDBOX_RESULT_MAX_BYTES / 2); /* not cut to nothing */
  const char *out = str(o, "stdout"), *err = str(o, "stderr");
  assert_int_equal(out[0], 1);
  assert_non_null(strstr(out, " bytes cut \xe2\x80\xa6]\n"));
  size_t ol = strlen(out);
  assert_string_equal(out + ol - 6, "\nLAST\n");
  assert_int_equal(err[0], 2);
  assert_non_null(strstr(err, " bytes cut \xe2\x80\xa6]\n"));
  assert_true(boolean(o, "stdout_truncated"));
  assert_true(boolean(o, "stderr_truncated"));
  assert_int_equal((int)num(o, "stdout_bytes"), 900006);
  assert_int_equal((int)num(o, "stderr_bytes"), 900000);
  cJSON_Delete(o);
  res_cleanup(&r);
  free(in);
  free(id);
}

/* ---- a sandbox per run (docs/sandbox.md "A sandbox per run") ---- */

/* FNV-1a 64 of text, computed here independently of the code under test. */
static void fnv_id(const char *text, char out[32]) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char *s = text; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
  snprintf(out, 32, "dbx-%016llx", (unsigned long long)h);
}

/* The value of label key of sandbox id, or NULL; *l, *n hold the labels
 * (those of an earlier call are freed first). */
static const char *label_value(const char *id, const char *key, dbx_drv_label **l, size_t *n) {
  dbx_drv_labels_free(*l, *n);
  *l = NULL;
  *n = 0;
  assert_int_equal(g_drv->ops->labels(g_drv->self, id, l, n), DBX_DRV_OK);
  for (size_t i = 0; i < *n; i++)
    if (strcmp((*l)[i].key, key) == 0) return (*l)[i].value;
  return NULL;
}

/* Two runs of one workflow id get two sandboxes; a retried create of the same
 * run adopts its own; the owner run and keep are labelled. */
static void test_sandbox_acts_create_per_run(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-runs");
  a.run_id = "run-A";
  const char *in_a = "{\"owner_run_id\":\"run-A\",\"keep\":true}";
  cJSON *o1 = ok(T(create), &a, in_a);
  a.attempt = 2; /* the same run's retried create */
  cJSON *o2 = ok(T(create), &a, in_a);
  struct dbx_act b = act_for("wf-runs");
  b.run_id = "run-B";
  cJSON *o3 = ok(T(create), &b, "{\"owner_run_id\":\"run-B\"}");
  char want_a[32], want_b[32], legacy[32];
  fnv_id("wf-runs/run-A/workspace", want_a);
  fnv_id("wf-runs/run-B/workspace", want_b);
  fnv_id("wf-runs/workspace", legacy);
  assert_string_equal(str(o1, "sandbox_id"), want_a);
  assert_string_equal(str(o2, "sandbox_id"), want_a);
  assert_string_equal(str(o3, "sandbox_id"), want_b);
  assert_string_not_equal(want_a, legacy);
  assert_false(boolean(o1, "adopted"));
  assert_true(boolean(o2, "adopted"));
  assert_false(boolean(o3, "adopted")); /* a new run never adopts the earlier run's */
  dbx_drv_label *l = NULL;
  size_t n = 0;
  assert_string_equal(label_value(want_a, "durabox.run_id", &l, &n), "run-A");
  assert_string_equal(label_value(want_a, "durabox.keep", &l, &n), "true");
  assert_string_equal(label_value(want_b, "durabox.run_id", &l, &n), "run-B");
  assert_null(label_value(want_b, "durabox.keep", &l, &n));
  assert_string_equal(label_value(want_b, "durabox.workflow_id", &l, &n), "wf-runs");
  /* without owner_run_id: the old id, the activity's run as owner label */
  struct dbx_act c = act_for("wf-runs");
  c.run_id = "run-C";
  cJSON *o4 = ok(T(create), &c, "{}");
  assert_string_equal(str(o4, "sandbox_id"), legacy);
  assert_string_equal(label_value(legacy, "durabox.run_id", &l, &n), "run-C");
  dbx_drv_labels_free(l, n);
  /* the owner run is part of the identity: a continued run naming the
   * first run's id reopens that run's sandbox */
  struct dbx_act cont = act_for("wf-runs");
  cont.run_id = "run-A2";
  cJSON *o5 = ok(T(create), &cont, in_a);
  assert_string_equal(str(o5, "sandbox_id"), want_a);
  assert_true(boolean(o5, "adopted"));
  cJSON_Delete(o1);
  cJSON_Delete(o2);
  cJSON_Delete(o3);
  cJSON_Delete(o4);
  cJSON_Delete(o5);
  expect_message(failed(T(create), &a, "{\"owner_run_id\":\"\"}", "InvalidInput", 1),
                 "owner_run_id");
  expect_message(failed(T(create), &a, "{\"owner_run_id\":7}", "InvalidInput", 1),
                 "owner_run_id");
  expect_message(failed(T(create), &a, "{\"owner_run_id\":\"a\\nb\"}", "InvalidInput", 1),
                 "owner_run_id");
  expect_message(failed(T(create), &a, "{\"keep\":\"yes\"}", "InvalidInput", 1), "keep");
  dbx_fake_act_cleanup(&a);
  dbx_fake_act_cleanup(&b);
  dbx_fake_act_cleanup(&c);
  dbx_fake_act_cleanup(&cont);
}

/* One run's cleanup never deletes another run's kept sandbox; the owner's
 * own delete (or a sandbox not kept) still goes. */
static void test_sandbox_acts_delete_leaves_other_runs_kept(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-keep");
  a.run_id = "run-A";
  cJSON *o = ok(T(create), &a, "{\"owner_run_id\":\"run-A\",\"keep\":true}");
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  o = ok(T(create), &a, "{\"owner_run_id\":\"run-A\",\"resource\":\"scratch\"}");
  char *loose = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  struct dbx_act b = act_for("wf-keep");
  b.run_id = "run-B";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\"}", id);
  o = ok(T(delete), &b, in);
  assert_false(boolean(o, "deleted"));
  assert_string_equal(str(o, "kept_by_run"), "run-A");
  cJSON_Delete(o);
  assert_int_equal(g_drv->ops->exists(g_drv->self, id, NULL), DBX_DRV_OK);
  /* a continued run of A naming its owner deletes it */
  char *in_owner = dbx_asprintf("{\"sandbox_id\":\"%s\",\"owner_run_id\":\"run-A\"}", id);
  cJSON_Delete(ok(T(delete), &b, in_owner));
  assert_int_equal(g_drv->ops->exists(g_drv->self, id, NULL), DBX_DRV_NO_SANDBOX);
  /* not kept: anyone's delete removes it, as before */
  char *in_loose = dbx_asprintf("{\"sandbox_id\":\"%s\"}", loose);
  o = ok(T(delete), &b, in_loose);
  assert_null(cJSON_GetObjectItemCaseSensitive(o, "deleted"));
  cJSON_Delete(o);
  assert_int_equal(g_drv->ops->exists(g_drv->self, loose, NULL), DBX_DRV_NO_SANDBOX);
  free(in);
  free(in_owner);
  free(in_loose);
  free(id);
  free(loose);
  dbx_fake_act_cleanup(&a);
  dbx_fake_act_cleanup(&b);
}

/* ------------------------------------------------- the daytona driver */

/* A checkpoint whose capture fails silently (no snapshot record, the
 * sandbox back to started: Daytona issue #4990) or that stays pending is
 * SnapshotFailed within the deadline (3 s here), never a success. */
static void test_daytona_checkpoint_failures_typed(void **state) {
  (void)state;
  char *id = make_sandbox("wf-dt-snap", NULL);
  struct dbx_act a = act_for("wf-dt-snap");
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"name\":\"dt-snap-silent\"}", id);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"snapshot_mode\":\"silent_fail\"}"), 0);
  int64_t t0 = dbx_mono_ns();
  expect_message(failed(T(checkpoint), &a, in, "SnapshotFailed", 0), "no snapshot exists");
  int64_t ms = (dbx_mono_ns() - t0) / 1000000;
  assert_true(ms < 3000 + 2000);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"name\":\"dt-snap-stuck\"}", id);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"snapshot_mode\":\"stuck\"}"), 0);
  t0 = dbx_mono_ns();
  expect_message(failed(T(checkpoint), &a, in, "SnapshotFailed", 0), "still pending");
  ms = (dbx_mono_ns() - t0) / 1000000;
  assert_true(ms >= 3000 && ms < 3000 + 3000);
  free(in);
  /* and when captures work: a ref, the same on a retry */
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, "{\"snapshot_mode\":\"ok\"}"), 0);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"name\":\"dt-snap-ok\"}", id);
  cJSON *o = ok(T(checkpoint), &a, in);
  assert_string_equal(str(o, "ref"), "dt-snap-ok");
  cJSON_Delete(o);
  o = ok(T(checkpoint), &a, in);
  assert_string_equal(str(o, "ref"), "dt-snap-ok");
  cJSON_Delete(o);
  free(in);
  free(id);
}

/* Multi-byte characters written in pieces (a 3-byte and a 4-byte one split
 * across writes, with pauses between) come back byte-exact. */
static void test_daytona_exec_split_utf8_exact(void **state) {
  (void)state;
  char *id = make_sandbox("wf-dt-utf8", NULL);
  struct dbx_act a = act_for("wf-dt-utf8");
  char *in = dbx_asprintf(
      "{\"sandbox_id\":\"%s\",\"command\":\"printf 'a\\\\342\\\\202'; sleep 0.3; "
      "printf '\\\\254b\\\\360\\\\237'; sleep 0.3; printf '\\\\230\\\\200\\\\n'; "
      "printf '\\\\303' >&2; sleep 0.2; printf '\\\\251' >&2\"}",
      id);
  cJSON *o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "a\xe2\x82\xac" "b\xf0\x9f\x98\x80\n");
  assert_string_equal(str(o, "stderr"), "\xc3\xa9");
  assert_int_equal((int)num(o, "stdout_bytes"), 10);
  cJSON_Delete(o);
  free(in);
  free(id);
}

/* A sandbox that disappears under a workflow is the non-retryable
 * SandboxGone, for every kind of step. */
static void test_daytona_sandbox_gone_typed(void **state) {
  (void)state;
  char *id = make_sandbox("wf-dt-gone", NULL);
  struct dbx_act a = act_for("wf-dt-gone");
  char *f = dbx_asprintf("{\"vanish\":\"%s\"}", id);
  assert_int_equal(dbx_fake_daytona_faults(&g_fake, f), 0);
  free(f);
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"true\"}", id);
  expect_message(failed(T(exec), &a, in, "SandboxGone", 1), id);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"f\",\"content\":\"x\"}", id);
  free(failed(T(write_file), &a, in, "SandboxGone", 1));
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\"}", id);
  free(failed(T(stop), &a, in, "SandboxGone", 1));
  cJSON_Delete(ok(T(delete), &a, in)); /* gone counts as deleted */
  free(in);
  free(id);
}

/* A worker killed mid-command (the child running attempt 1 is SIGKILLed
 * once the command began): attempt 2 re-attaches to the same session
 * command; the side effect happened once. */
static void test_daytona_exec_retry_reattaches(void **state) {
  (void)state;
  char *id = make_sandbox("wf-dt-reattach", NULL);
  struct dbx_act a = act_for("wf-dt-reattach");
  a.activity_id = "5";
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":"
                          "\"echo x >> n.txt; sleep 1; echo done\",\"timeout_s\":60}", id);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) { /* another worker: its own driver (and connections) */
    dbx_daytona_opts o = {.api_url = g_fake.api_url, .api_key = DBX_FAKE_DAYTONA_KEY,
                          .state_wait_ms = 20000};
    dbx_daytona *d2 = NULL;
    dbx_sandbox_acts *acts2 = NULL;
    if (dbx_daytona_open(&o, &d2, NULL) != DBX_OK ||
        dbx_sandbox_acts_create(dbx_daytona_driver(d2), &acts2) != DBX_OK)
      _exit(1);
    const dbx_activity_type *ex = dbx_sandbox_acts_type(acts2, "sandbox.exec");
    dbx_act_result r = {0};
    a.prev_details = "{}";
    ex->run(&a, in, strlen(in), &r, ex->ud);
    _exit(0);
  }
  uint8_t *data = NULL;
  size_t len = 0;
  for (int i = 0; i < 1000; i++) { /* until the command wrote its line */
    if (OPS(file_read, id, "n.txt", 0, &data, &len) == DBX_DRV_OK) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_non_null(data);
  free(data);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  a.attempt = 2;
  a.prev_details = "{}";
  cJSON *o = ok(T(exec), &a, in);
  assert_int_equal(num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "done\n");
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"n.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "x\n");
  cJSON_Delete(o);
  dbx_fake_act_cleanup(&a);
  free(in);
  free(id);
}


/* The sandbox's own env (sandbox.create "env") reaches every exec step,
 * under the step's env (which wins for a name both have). */
static void test_sandbox_acts_create_env_seen_by_step(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-sbenv");
  cJSON *o = ok(T(create), &a,
                "{\"resource\":\"workspace\",\"source\":{\"kind\":\"empty\"},"
                "\"env\":{\"SB_A\":\"one\",\"SB_B\":\"two\"}}");
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '%%s|%%s' "
                          "\\\"$SB_A\\\" \\\"$SB_B\\\"\",\"env\":{\"SB_B\":\"step\"}}", id);
  o = ok(T(exec), &a, in);
  assert_int_equal((int)num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "one|step");
  cJSON_Delete(o);
  free(in);
  /* a step without env of its own sees the sandbox's alone */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"printf '%%s' \\\"$SB_B\\\"\"}", id);
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "two");
  cJSON_Delete(o);
  free(in);
  /* a secret is a step's business: the sandbox's env takes strings only
   * (Daytona keeps a sandbox's env in the clear) and names no value */
  setenv("DBX_SBENV_SECRET", "sbenv-s3cret-9", 1);
  struct dbx_act b = act_for("wf-sbenv-2");
  char *m = failed(T(create), &b,
                   "{\"resource\":\"workspace\",\"env\":{\"T\":{\"secret\":\"DBX_SBENV_SECRET\"}}}",
                   "InvalidInput", 1);
  assert_null(strstr(m, "sbenv-s3cret-9"));
  expect_message(m, "field 'env.T' must be a string");
  expect_message(failed(T(create), &b, "{\"resource\":\"workspace\",\"env\":{\"A=B\":\"x\"}}",
                        "InvalidInput", 1),
                 "is not a variable name");
  unsetenv("DBX_SBENV_SECRET");
  free(id);
}

/* Sizes and intervals: validated, sent to the driver; what a driver takes
 * without enforcing is listed in the result ("unenforced"), never hidden. */
static void test_sandbox_acts_create_sizes(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-sizes");
  cJSON *o = ok(T(create), &a,
                "{\"resource\":\"workspace\",\"resources\":\"medium\","
                "\"auto_stop_minutes\":30,\"auto_archive_minutes\":60,\"auto_delete_minutes\":0}");
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "unenforced");
  char *us = u ? cJSON_PrintUnformatted(u) : dbx_strdup("[]");
  if (g_local)
    assert_string_equal(us, "[\"cpu\",\"disk_gib\",\"auto_stop_minutes\",\"auto_archive_minutes\","
                            "\"auto_delete_minutes\"]");
  else if (g_mem)
    assert_string_equal(us, "[\"cpu\",\"memory_gib\",\"disk_gib\",\"auto_stop_minutes\","
                            "\"auto_archive_minutes\",\"auto_delete_minutes\"]");
  else
    assert_string_equal(us, "[]"); /* the fake builds with the sizes asked */
  free(us);
  if (g_dt) { /* the create's body as Daytona's API names the fields */
    char *log = dbx_fake_daytona_call(&g_fake, "GET", "/_control/log", NULL);
    assert_non_null(log);
    char *want = dbx_asprintf("\\\"name\\\":\\\"%s\\\"", str(o, "sandbox_id"));
    const char *at = strstr(log, want);
    assert_non_null(at);
    const char *end = strstr(at, "}\"");
    assert_non_null(end);
    char *body = dbx_strndup(at, (size_t)(end - at));
    const char *fields[] = {"\\\"cpu\\\":2", "\\\"memory\\\":4", "\\\"disk\\\":8",
                            "\\\"autoStopInterval\\\":30", "\\\"autoArchiveInterval\\\":60",
                            "\\\"autoDeleteInterval\\\":0"};
    for (size_t i = 0; i < 6; i++)
      if (strstr(body, fields[i]) == NULL) fail_msg("create body '%s' lacks %s", body, fields[i]);
    free(body);
    free(want);
    free(log);
  }
  cJSON_Delete(o);
  struct dbx_act b = act_for("wf-sizes-bad");
  expect_message(failed(T(create), &b, "{\"resources\":\"huge\"}", "InvalidInput", 1),
                 "'huge' is not one of small, medium, large");
  expect_message(failed(T(create), &b, "{\"resources\":{\"cpu\":0}}", "InvalidInput", 1),
                 "field 'resources.cpu' must be a whole number from 1 to 1024");
  expect_message(failed(T(create), &b, "{\"resources\":{\"gpu\":1}}", "InvalidInput", 1),
                 "unknown field 'gpu'");
  expect_message(failed(T(create), &b, "{\"auto_stop_minutes\":-1}", "InvalidInput", 1),
                 "field 'auto_stop_minutes' must be a whole number of minutes");
}

/* Local: memory_gib is each exec process's address-space limit. */
static void test_sandbox_acts_local_memory_limit(void **state) {
  (void)state;
  struct dbx_act a = act_for("wf-memlimit");
  cJSON *o = ok(T(create), &a, "{\"resource\":\"workspace\",\"resources\":{\"memory_gib\":1}}");
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  /* 16 MiB fits; 1.5 GiB does not */
  char *in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"python3 -c 'x = bytearray(16 << 20); "
                          "print(len(x))'\"}", id);
  o = ok(T(exec), &a, in);
  assert_int_equal((int)num(o, "exit_code"), 0);
  assert_string_equal(str(o, "stdout"), "16777216\n");
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"python3 -c 'x = bytearray(1536 << 20); "
                    "print(len(x))'\"}", id);
  o = ok(T(exec), &a, in);
  assert_int_not_equal((int)num(o, "exit_code"), 0);
  assert_non_null(strstr(str(o, "stderr"), "MemoryError"));
  assert_string_equal(str(o, "stdout"), "");
  cJSON_Delete(o);
  free(in);
  /* the limit is set in the command's shell: ulimit -v shows it (KiB) */
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"command\":\"ulimit -v\"}", id);
  o = ok(T(exec), &a, in);
  assert_string_equal(str(o, "stdout"), "1048576\n");
  cJSON_Delete(o);
  free(in);
  free(id);
}


/* Files uploaded at create and downloaded by the delete, before the
 * sandbox goes; a failed download is reported and the delete still runs. */
static void test_sandbox_acts_upload_download_transfers(void **state) {
  (void)state;
  char *up = dbx_asprintf("%s/up-%d.txt", g_tmp, (int)getpid());
  FILE *f = fopen(up, "w");
  assert_non_null(f);
  fputs("hello upload\n", f);
  fclose(f);
  struct dbx_act a = act_for("wf-xfer");
  char *in = dbx_asprintf("{\"resource\":\"workspace\",\"upload\":[{\"from\":\"%s\","
                          "\"to\":\"in/data.txt\"}]}", up);
  cJSON *o = ok(T(create), &a, in);
  free(in);
  assert_int_equal((int)num(o, "uploaded"), 1);
  char *id = dbx_strdup(str(o, "sandbox_id"));
  cJSON_Delete(o);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"in/data.txt\"}", id);
  o = ok(T(read_file), &a, in);
  assert_string_equal(str(o, "content"), "hello upload\n");
  cJSON_Delete(o);
  free(in);
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"path\":\"out/report.txt\",\"content\":\"report ok\"}",
                    id);
  cJSON_Delete(ok(T(write_file), &a, in));
  free(in);
  char *dl = dbx_asprintf("%s/dl-%d/sub/report.txt", g_tmp, (int)getpid());
  char *dl2 = dbx_asprintf("%s/dl-%d/missing.txt", g_tmp, (int)getpid());
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"download\":[{\"from\":\"out/report.txt\",\"to\":\"%s\"},"
                    "{\"from\":\"missing.txt\",\"to\":\"%s\"}]}", id, dl, dl2);
  o = ok(T(delete), &a, in);
  free(in);
  const cJSON *got = cJSON_GetObjectItemCaseSensitive(o, "downloaded");
  assert_int_equal(cJSON_GetArraySize(got), 1);
  assert_string_equal(cJSON_GetArrayItem(got, 0)->valuestring, dl);
  const cJSON *bad = cJSON_GetObjectItemCaseSensitive(o, "download_failed");
  assert_int_equal(cJSON_GetArraySize(bad), 1);
  assert_string_equal(str(cJSON_GetArrayItem(bad, 0), "from"), "missing.txt");
  cJSON_Delete(o);
  char *text = NULL;
  assert_int_equal(dbx_fs_read_all(dl, &text, NULL), DBX_OK);
  assert_string_equal(text, "report ok");
  free(text);
  assert_int_equal(access(dl2, F_OK), -1);
  assert_int_equal(g_drv->ops->exists(g_drv->self, id, NULL), DBX_DRV_NO_SANDBOX);
  free(id);

  /* an upload that cannot be done fails the create and leaves no sandbox */
  struct dbx_act b = act_for("wf-xfer-missing");
  in = dbx_asprintf("{\"resource\":\"workspace\",\"upload\":[{\"from\":\"%s.nope\",\"to\":\"x\"}]}",
                    up);
  expect_message(failed(T(create), &b, in, "FileNotFound", 1), ".nope");
  free(in);
  char idm[32];
  o = NULL;
  { /* the id that create derived: the same input without the upload */
    struct dbx_act c = act_for("wf-xfer-missing");
    o = ok(T(create), &c, "{\"resource\":\"workspace\"}");
    assert_false(boolean(o, "adopted")); /* made afresh: the failed one was removed */
    snprintf(idm, sizeof idm, "%s", str(o, "sandbox_id"));
    cJSON_Delete(o);
  }
  /* bad shapes are refused before anything is made */
  expect_message(failed(T(create), &b, "{\"upload\":[{\"from\":\"/etc/hostname\",\"to\":\"../x\"}]}",
                        "PathRefused", 1), "leaves the workspace");
  expect_message(failed(T(create), &b, "{\"upload\":[{\"from\":\"rel\",\"to\":\"x\"}]}",
                        "InvalidInput", 1), "is not absolute");
  expect_message(failed(T(create), &b, "{\"upload\":[]}", "InvalidInput", 1),
                 "field 'upload' must be an array of 1 to 100");
  in = dbx_asprintf("{\"sandbox_id\":\"%s\",\"download\":[{\"from\":\"a\"}]}", idm);
  expect_message(failed(T(delete), &b, in, "InvalidInput", 1), "field 'download[0]' must be");
  free(in);
  unlink(up);
  free(up);
  free(dl);
  free(dl2);
}

int main(int argc, char **argv) {
  dbx_local_supervisor_main(argc, argv); /* this binary is re-executed as the supervisor */
  /* every case; the local driver runs them all */
  const struct CMUnitTest local_tests[] = {
      cmocka_unit_test(test_sandbox_acts_register_all),
      cmocka_unit_test(test_sandbox_acts_create_adopts_derived_id),
      cmocka_unit_test(test_sandbox_acts_create_heartbeats_and_stops_on_cancel),
      cmocka_unit_test(test_sandbox_acts_exec_env_and_secret_redacted),
      cmocka_unit_test(test_sandbox_acts_redact_names),
      cmocka_unit_test(test_sandbox_acts_exec_binary_output_base64),
      cmocka_unit_test(test_sandbox_acts_exec_timeout),
      cmocka_unit_test(test_sandbox_acts_file_round_trip_all_bytes),
      cmocka_unit_test(test_sandbox_acts_path_refused),
      cmocka_unit_test(test_sandbox_acts_invalid_input_names_field),
      cmocka_unit_test(test_sandbox_acts_not_found),
      cmocka_unit_test(test_sandbox_acts_git_commit_sha),
      cmocka_unit_test(test_sandbox_acts_git_commit_retry_finds_landed),
      cmocka_unit_test(test_sandbox_acts_checkpoint_stable_across_retries),
      cmocka_unit_test(test_sandbox_acts_stop_start_delete),
      cmocka_unit_test(test_sandbox_acts_cancelled_runs_nothing),
      cmocka_unit_test(test_sandbox_acts_exec_retry_reattaches),
      cmocka_unit_test(test_sandbox_acts_exec_cancel_kills_command),
      cmocka_unit_test(test_sandbox_acts_exec_worker_stop_leaves_command_running),
      cmocka_unit_test(test_sandbox_acts_cwd_missing_and_folder_read),
      cmocka_unit_test(test_driver_lifecycle_labels_list),
      cmocka_unit_test(test_driver_files_upload_download),
      cmocka_unit_test(test_driver_exec_ops),
      cmocka_unit_test(test_driver_checkpoint_restore),
      cmocka_unit_test(test_driver_git_clone_commit_push),
      cmocka_unit_test(test_sandbox_acts_unretryable_git_failures),
      cmocka_unit_test(test_sandbox_acts_exec_heartbeat_tail),
      cmocka_unit_test(test_driver_threads),
      cmocka_unit_test(test_sandbox_acts_derived_names_pinned),
      cmocka_unit_test(test_sandbox_acts_write_file_base64_strict),
      cmocka_unit_test(test_sandbox_acts_exec_keeps_head_and_tail),
      cmocka_unit_test(test_sandbox_acts_exec_secret_cut_at_tail_start),
      cmocka_unit_test(test_sandbox_acts_read_file_capped_with_mark),
      cmocka_unit_test(test_sandbox_acts_exec_result_fits_payload),
      cmocka_unit_test(test_sandbox_acts_input_nul_and_sizes),
      cmocka_unit_test(test_sandbox_acts_create_per_run),
      cmocka_unit_test(test_sandbox_acts_delete_leaves_other_runs_kept),
      cmocka_unit_test(test_sandbox_acts_create_env_seen_by_step),
      cmocka_unit_test(test_sandbox_acts_create_sizes),
      cmocka_unit_test(test_sandbox_acts_upload_download_transfers),
      cmocka_unit_test(test_sandbox_acts_local_memory_limit),
  };
  /* the same cases on the memory driver, except those that need real
   * processes, a real shell or host git (fork, symlinks, base64(1), git log) */
  const struct CMUnitTest memory_tests[] = {
      cmocka_unit_test(test_sandbox_acts_register_all),
      cmocka_unit_test(test_sandbox_acts_create_adopts_derived_id),
      cmocka_unit_test(test_sandbox_acts_exec_env_and_secret_redacted),
      cmocka_unit_test(test_sandbox_acts_redact_names),
      cmocka_unit_test(test_sandbox_acts_exec_binary_output_base64),
      cmocka_unit_test(test_sandbox_acts_exec_timeout),
      cmocka_unit_test(test_sandbox_acts_invalid_input_names_field),
      cmocka_unit_test(test_sandbox_acts_not_found),
      cmocka_unit_test(test_sandbox_acts_checkpoint_stable_across_retries),
      cmocka_unit_test(test_sandbox_acts_stop_start_delete),
      cmocka_unit_test(test_sandbox_acts_cancelled_runs_nothing),
      cmocka_unit_test(test_sandbox_acts_exec_cancel_kills_command),
      cmocka_unit_test(test_sandbox_acts_exec_worker_stop_leaves_command_running),
      cmocka_unit_test(test_sandbox_acts_cwd_missing_and_folder_read),
      cmocka_unit_test(test_driver_lifecycle_labels_list),
      cmocka_unit_test(test_driver_files_upload_download),
      cmocka_unit_test(test_driver_exec_ops),
      cmocka_unit_test(test_driver_checkpoint_restore),
      cmocka_unit_test(test_driver_git_clone_commit_push),
      cmocka_unit_test(test_sandbox_acts_unretryable_git_failures),
      cmocka_unit_test(test_sandbox_acts_failure_types_by_table),
      cmocka_unit_test(test_sandbox_acts_exec_lost_restarts_once),
      cmocka_unit_test(test_sandbox_acts_exec_not_started_restarts_once),
      cmocka_unit_test(test_driver_threads),
      cmocka_unit_test(test_sandbox_acts_derived_names_pinned),
      cmocka_unit_test(test_sandbox_acts_write_file_base64_strict),
      cmocka_unit_test(test_sandbox_acts_allocation_failures_clean),
      cmocka_unit_test(test_sandbox_acts_exec_keeps_head_and_tail),
      cmocka_unit_test(test_sandbox_acts_exec_secret_cut_at_tail_start),
      cmocka_unit_test(test_sandbox_acts_read_file_capped_with_mark),
      cmocka_unit_test(test_sandbox_acts_input_nul_and_sizes),
      cmocka_unit_test(test_sandbox_acts_create_per_run),
      cmocka_unit_test(test_sandbox_acts_delete_leaves_other_runs_kept),
      cmocka_unit_test(test_sandbox_acts_create_env_seen_by_step),
      cmocka_unit_test(test_sandbox_acts_create_sizes),
      cmocka_unit_test(test_sandbox_acts_upload_download_transfers),
  };
  const struct CMUnitTest process_tests[] = {
      cmocka_unit_test(test_driver_two_homes_one_process),
      cmocka_unit_test(test_driver_strerror_and_names),
  };
  /* the memory group's cases but those its driver alone can do (injected
   * failures, lost commands, the allocation walk), restore (Daytona restores
   * by a create from the snapshot: test_daytona.c), git against memory
   * sources (test_daytona.c has it with real repositories); plus the
   * daytona cases. Binary command output runs here too: Daytona's logs are
   * JSON text (bytes that are no UTF-8 arrive as U+FFFD), so the driver
   * reads the raw copies its wrapper keeps */
  const struct CMUnitTest daytona_tests[] = {
      cmocka_unit_test(test_sandbox_acts_register_all),
      cmocka_unit_test(test_sandbox_acts_create_adopts_derived_id),
      cmocka_unit_test(test_sandbox_acts_exec_env_and_secret_redacted),
      cmocka_unit_test(test_sandbox_acts_redact_names),
      cmocka_unit_test(test_sandbox_acts_exec_timeout),
      cmocka_unit_test(test_sandbox_acts_invalid_input_names_field),
      cmocka_unit_test(test_sandbox_acts_not_found),
      cmocka_unit_test(test_sandbox_acts_checkpoint_stable_across_retries),
      cmocka_unit_test(test_sandbox_acts_stop_start_delete),
      cmocka_unit_test(test_sandbox_acts_cancelled_runs_nothing),
      cmocka_unit_test(test_sandbox_acts_exec_cancel_kills_command),
      cmocka_unit_test(test_sandbox_acts_exec_worker_stop_leaves_command_running),
      cmocka_unit_test(test_sandbox_acts_cwd_missing_and_folder_read),
      cmocka_unit_test(test_driver_lifecycle_labels_list),
      cmocka_unit_test(test_driver_files_upload_download),
      cmocka_unit_test(test_driver_exec_ops),
      cmocka_unit_test(test_driver_threads),
      cmocka_unit_test(test_sandbox_acts_derived_names_pinned),
      cmocka_unit_test(test_sandbox_acts_write_file_base64_strict),
      cmocka_unit_test(test_sandbox_acts_exec_keeps_head_and_tail),
      cmocka_unit_test(test_sandbox_acts_exec_secret_cut_at_tail_start),
      cmocka_unit_test(test_sandbox_acts_read_file_capped_with_mark),
      cmocka_unit_test(test_sandbox_acts_exec_result_fits_payload),
      cmocka_unit_test(test_sandbox_acts_input_nul_and_sizes),
      cmocka_unit_test(test_sandbox_acts_create_per_run),
      cmocka_unit_test(test_sandbox_acts_delete_leaves_other_runs_kept),
      cmocka_unit_test(test_daytona_checkpoint_failures_typed),
      cmocka_unit_test(test_daytona_exec_split_utf8_exact),
      cmocka_unit_test(test_sandbox_acts_exec_binary_output_base64),
      cmocka_unit_test(test_daytona_sandbox_gone_typed),
      cmocka_unit_test(test_daytona_exec_retry_reattaches),
      cmocka_unit_test(test_sandbox_acts_create_env_seen_by_step),
      cmocka_unit_test(test_sandbox_acts_create_sizes),
      cmocka_unit_test(test_sandbox_acts_upload_download_transfers),
  };
  /* DBX_TEST_FILTER=pattern (cmocka's glob) runs only matching tests, while iterating */
  if (getenv("DBX_TEST_FILTER")) cmocka_set_test_filter(getenv("DBX_TEST_FILTER"));
  int failed_n = cmocka_run_group_tests_name("sandbox_acts_local", local_tests, local_setup,
                                             group_teardown);
  failed_n += cmocka_run_group_tests_name("sandbox_acts_memory", memory_tests, mem_setup,
                                          group_teardown);
  failed_n += cmocka_run_group_tests_name("sandbox_acts_daytona", daytona_tests, daytona_setup,
                                          group_teardown);
  failed_n += cmocka_run_group_tests_name("sandbox_drivers", process_tests, NULL, NULL);
  return failed_n;
}
