/* Unit tests of activities/local: real processes, real git, a temporary
 * DURABOX_HOME per test. The whole suite runs plainly and, when bwrap works
 * on this machine, a second time under bubblewrap. */
#include "tests/testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <linux/openat2.h>
#include <time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/sched.h>
#include <sys/mount.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "activities/local.h"
#include "base/fs.h"
#include "base/util.h"

static int g_bwrap; /* mode of the group being run */

typedef struct {
  char *home;
  dbx_local *d;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->home = dbx_test_tmpdir("dbx-local");
  /* the plain group opts out of bubblewrap explicitly, as a user must */
  dbx_local_open_opts oo = {.unsandboxed = !g_bwrap};
  assert_int_equal(dbx_local_open_with(f->home, &oo, &f->d), DBX_OK);
  assert_int_equal(dbx_local_bwrap_enabled(f->d), g_bwrap);
  assert_int_equal(dbx_local_bwrap_set(f->d, g_bwrap), DBX_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  dbx_local_close(f->d);
  dbx_test_rmrf(f->home);
  free(f->home);
  free(f);
  return 0;
}

static void run_sh(const char *fmt, const char *arg) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, fmt, arg, arg, arg);
  assert_int_equal(system(cmd), 0);
}

static void put(dbx_local *d, const char *id, const char *path, const char *text) {
  assert_int_equal(dbx_local_file_write(d, id, path, text, strlen(text)), DBX_OK);
}

static void expect_file(dbx_local *d, const char *id, const char *path, const char *text) {
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(d, id, path, 0, &data, &len), DBX_OK);
  assert_int_equal(len, strlen(text));
  assert_memory_equal(data, text, len);
  free(data);
}

static void make_empty(dbx_local *d, const char *id) {
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  assert_int_equal(dbx_local_sandbox_create(d, id, &src, NULL), DBX_OK);
}

/* Run cmd; assert success of the call; return the result. */
static dbx_local_exec_result sh(dbx_local *d, const char *id, const char *cmd) {
  dbx_local_exec_opts o = {.command = cmd, .timeout_ms = 60000};
  dbx_local_exec_result r;
  dbx_err rc = dbx_local_exec(d, id, &o, &r);
  if (rc != DBX_OK) fail_msg("exec '%s': %s", cmd, dbx_local_errmsg(d));
  return r;
}

static void test_local_create_from_dir_and_adopt(void **state) {
  fixture *f = *state;
  char *src = dbx_test_tmpdir("dbx-src");
  run_sh("mkdir -p %s/sub && printf hello > %s/a.txt && printf deep > %s/sub/b", src);
  dbx_local_source s = {.kind = DBX_LOCAL_SOURCE_DIR, .location = src};
  int adopted = -1;
  assert_int_equal(dbx_local_sandbox_create(f->d, "sb1", &s, &adopted), DBX_OK);
  assert_int_equal(adopted, 0);
  expect_file(f->d, "sb1", "a.txt", "hello");
  expect_file(f->d, "sb1", "sub/b", "deep");
  put(f->d, "sb1", "mine", "kept");
  /* Same name, same source: adopted, untouched. */
  assert_int_equal(dbx_local_sandbox_create(f->d, "sb1", &s, &adopted), DBX_OK);
  assert_int_equal(adopted, 1);
  expect_file(f->d, "sb1", "mine", "kept");
  /* Same name, another source: refused. */
  dbx_local_source e = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  assert_int_equal(dbx_local_sandbox_create(f->d, "sb1", &e, &adopted), DBX_EEXIST);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "sb1"));
  dbx_local_source missing = {.kind = DBX_LOCAL_SOURCE_DIR, .location = "/nonexistent/dbx"};
  assert_int_equal(dbx_local_sandbox_create(f->d, "sb2", &missing, NULL), DBX_ENOTFOUND);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "source directory '/nonexistent/dbx' not found"));
  /* a file where a directory was named: said so, not "not found" */
  char *file = dbx_asprintf("%s/a.txt", src);
  dbx_local_source notdir = {.kind = DBX_LOCAL_SOURCE_DIR, .location = file};
  assert_int_equal(dbx_local_sandbox_create(f->d, "sb3", &notdir, NULL), DBX_ENOTFOUND);
  char *want = dbx_asprintf("source directory '%s' is not a directory", file);
  if (!strstr(dbx_local_errmsg(f->d), want)) fail_msg("'%s' lacks '%s'", dbx_local_errmsg(f->d), want);
  free(want);
  free(file);
  assert_int_equal(dbx_local_sandbox_create(f->d, "../x", &e, NULL), DBX_EINVAL);
  assert_int_equal(dbx_local_sandbox_create(f->d, ".hidden", &e, NULL), DBX_EINVAL);
  dbx_test_rmrf(src);
  free(src);
}

static void test_local_create_from_git_and_commit(void **state) {
  fixture *f = *state;
  char *repo = dbx_test_tmpdir("dbx-repo");
  run_sh("cd %s && git init -q && printf v1 > f.txt && git add f.txt && "
         "git -c user.name=t -c user.email=t@x commit -q -m init", repo);
  /* A partial target from an interrupted create/clone is cleared first. */
  char *partial = dbx_asprintf("%s/sandboxes/g1/workspace.tmp", f->home);
  run_sh("mkdir -p %s && touch %s/junk", partial);
  dbx_local_source s = {.kind = DBX_LOCAL_SOURCE_GIT, .location = repo};
  int adopted = -1;
  assert_int_equal(dbx_local_sandbox_create(f->d, "g1", &s, &adopted), DBX_OK);
  assert_int_equal(adopted, 0);
  expect_file(f->d, "g1", "f.txt", "v1");
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "g1", "junk", 0, &data, &len), DBX_ENOTFOUND);
  assert_int_equal(access(partial, F_OK), -1);
  assert_int_equal(dbx_local_sandbox_create(f->d, "g1", &s, &adopted), DBX_OK);
  assert_int_equal(adopted, 1);

  put(f->d, "g1", "new.txt", "added");
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(dbx_local_git_commit(f->d, "g1", "add new", "Dur Abox <bot@durabox.dev>",
                                        &sha, &nothing), DBX_OK);
  assert_int_equal(nothing, 0);
  assert_non_null(sha);
  assert_int_equal(strlen(sha), 40);
  dbx_local_exec_result r = sh(f->d, "g1", "git log -1 --format='%H %an <%ae> %cn %s'");
  char *want = dbx_asprintf("%s Dur Abox <bot@durabox.dev> Dur Abox add new\n", sha);
  assert_string_equal((char *)r.stdout_buf, want);
  free(want);
  dbx_local_exec_result_cleanup(&r);
  free(sha);
  sha = (char *)1;
  assert_int_equal(dbx_local_git_commit(f->d, "g1", "again", "Dur Abox <bot@durabox.dev>", &sha,
                                        &nothing), DBX_OK);
  assert_int_equal(nothing, 1);
  assert_null(sha);

  dbx_local_source bad = {.kind = DBX_LOCAL_SOURCE_GIT, .location = "/nonexistent/repo"};
  assert_int_equal(dbx_local_sandbox_create(f->d, "g2", &bad, NULL), DBX_EIO);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "git clone"));
  /* a failed create leaves nothing behind, not even its meta folder */
  char *g2 = dbx_asprintf("%s/sandboxes/g2", f->home);
  assert_int_equal(access(g2, F_OK), -1);
  free(g2);
  free(partial);
  dbx_test_rmrf(repo);
  free(repo);
}

static void test_local_checkpoint_and_restore(void **state) {
  fixture *f = *state;
  make_empty(f->d, "c1");
  put(f->d, "c1", "dir/f", "v1");
  char *ref = NULL;
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "c1", "run1-ev5", &ref), DBX_OK);
  assert_string_equal(ref, "run1-ev5");
  put(f->d, "c1", "dir/f", "v2");
  put(f->d, "c1", "later", "x");
  dbx_local_source s = {.kind = DBX_LOCAL_SOURCE_SNAPSHOT, .location = ref};
  assert_int_equal(dbx_local_sandbox_create(f->d, "c2", &s, NULL), DBX_OK);
  expect_file(f->d, "c2", "dir/f", "v1");
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "c2", "later", 0, &data, &len), DBX_ENOTFOUND);
  expect_file(f->d, "c1", "dir/f", "v2");
  /* Same name again: the existing snapshot, unchanged. */
  char *ref2 = NULL;
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "c1", "run1-ev5", &ref2), DBX_OK);
  assert_string_equal(ref2, ref);
  dbx_local_source s3 = {.kind = DBX_LOCAL_SOURCE_SNAPSHOT, .location = ref2};
  assert_int_equal(dbx_local_sandbox_create(f->d, "c3", &s3, NULL), DBX_OK);
  expect_file(f->d, "c3", "dir/f", "v1");
  assert_int_equal(dbx_local_snapshot_delete(f->d, ref), DBX_OK);
  assert_int_equal(dbx_local_snapshot_delete(f->d, ref), DBX_OK);
  dbx_local_source gone = {.kind = DBX_LOCAL_SOURCE_SNAPSHOT, .location = ref};
  assert_int_equal(dbx_local_sandbox_create(f->d, "c4", &gone, NULL), DBX_ENOTFOUND);
  free(ref2);
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "nope", "x", &ref2), DBX_ENOTFOUND);
  assert_null(ref2);
  free(ref);
}

static void test_local_exec_exit_codes_and_streams(void **state) {
  fixture *f = *state;
  make_empty(f->d, "e1");
  dbx_local_exec_result r = sh(f->d, "e1", "echo out; echo err >&2; exit 3");
  assert_int_equal(r.exit_code, 3);
  assert_int_equal(r.signal, 0);
  assert_int_equal(r.timed_out, 0);
  assert_int_equal(r.stdout_len, 4);
  assert_memory_equal(r.stdout_buf, "out\n", 4);
  assert_int_equal(r.stderr_len, 4);
  assert_memory_equal(r.stderr_buf, "err\n", 4);
  assert_int_equal(r.stdout_total, 4);
  dbx_local_exec_result_cleanup(&r);
  r = sh(f->d, "e1", "true");
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(r.stdout_len, 0);
  dbx_local_exec_result_cleanup(&r);
  r = sh(f->d, "e1", "kill -9 $$");
  assert_int_equal(r.exit_code, 137);
  if (!g_bwrap) assert_int_equal(r.signal, 9);
  dbx_local_exec_result_cleanup(&r);
  /* stdin is /dev/null: cat ends at once. */
  r = sh(f->d, "e1", "cat; echo done");
  assert_string_equal((char *)r.stdout_buf, "done\n");
  dbx_local_exec_result_cleanup(&r);
}

static void test_local_exec_env_scrubbed(void **state) {
  fixture *f = *state;
  make_empty(f->d, "env");
  setenv("DBX_TEST_SECRET", "leak", 1);
  const char *env[] = {"MINE=yes", "TERM=xterm", NULL};
  dbx_local_exec_opts o = {
      .command = "echo \"[$DBX_TEST_SECRET][$MINE][$HOME][$LANG][$TERM]\"; pwd", .env = env};
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec(f->d, "env", &o, &r), DBX_OK);
  char *ws = dbx_local_sandbox_path(f->d, "env");
  char *home = dbx_asprintf("%s/sandboxes/env/home", f->home);
  char *want = dbx_asprintf("[][yes][%s][C.UTF-8][xterm]\n%s\n", home, ws);
  free(home);
  assert_string_equal((char *)r.stdout_buf, want);
  dbx_local_exec_result_cleanup(&r);
  const char *bad[] = {"NOEQUALS", NULL};
  o.env = bad;
  assert_int_equal(dbx_local_exec(f->d, "env", &o, &r), DBX_EINVAL);
  unsetenv("DBX_TEST_SECRET");
  free(want);
  free(ws);
}

/* 1 once pid has exited (waits up to 10 s on a pidfd: SIGKILL is delivered
 * asynchronously), 0 if it is still running then. */
static int dead(long pid) {
  int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (fd < 0 && errno == ENOSYS) { /* e.g. under valgrind: poll /proc for up to 10 s */
    for (int i = 0; i < 1000; i++) {
      char p[64], buf[512];
      snprintf(p, sizeof p, "/proc/%ld/stat", pid);
      FILE *fp = fopen(p, "r");
      if (fp == NULL) return 1;
      size_t n = fread(buf, 1, sizeof buf - 1, fp);
      fclose(fp);
      buf[n] = '\0';
      char *rp = strrchr(buf, ')');
      if (rp != NULL && (rp[2] == 'Z' || rp[2] == 'X')) return 1;
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
    return 0;
  }
  if (fd < 0) return errno == ESRCH;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r = poll(&p, 1, 10000);
  close(fd);
  return r == 1;
}

/* A pid that no process has (above any pid_max): dead() answers 1. */
#define NO_PID 0x3fffffffL

/* The host pid of a process that a command in sandbox id knows as nspid.
 * Plainly they are the same. Under bubblewrap the command has its own PID
 * namespace: the host process whose NSpid ends in nspid, one level down, and
 * whose cwd is in the sandbox's workspace (other sandboxes, of other tests
 * on this machine, reuse small pids); NO_PID when no such process lives. */
static long host_pid(dbx_local *d, const char *id, long nspid) {
  if (!g_bwrap) return nspid;
  char *ws = dbx_local_sandbox_path(d, id);
  long found = NO_PID;
  DIR *dir = opendir("/proc");
  assert_non_null(dir);
  struct dirent *e;
  while (found == NO_PID && (e = readdir(dir)) != NULL) {
    char *end = NULL, p[300], line[256], cwd[4096];
    long hp = strtol(e->d_name, &end, 10);
    if (hp <= 0 || *end != '\0') continue;
    snprintf(p, sizeof p, "/proc/%ld/cwd", hp);
    ssize_t cl = readlink(p, cwd, sizeof cwd - 1);
    if (cl < 0) continue;
    cwd[cl] = '\0';
    if (strncmp(cwd, ws, strlen(ws)) != 0) continue;
    snprintf(p, sizeof p, "/proc/%ld/status", hp);
    FILE *fp = fopen(p, "r");
    if (fp == NULL) continue;
    while (fgets(line, sizeof line, fp)) {
      long a = 0, b = 0;
      char extra;
      if (strncmp(line, "NSpid:", 6) == 0 &&
          sscanf(line + 6, "%ld %ld %c", &a, &b, &extra) == 2 && b == nspid)
        found = hp;
    }
    fclose(fp);
  }
  closedir(dir);
  free(ws);
  return found;
}

static long read_pid(dbx_local *d, const char *id, const char *path) {
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(d, id, path, 0, &data, &len), DBX_OK);
  long pid = strtol((char *)data, NULL, 10);
  free(data);
  assert_true(pid > 1);
  return host_pid(d, id, pid);
}

static void test_local_exec_timeout_kills_group(void **state) {
  fixture *f = *state;
  make_empty(f->d, "t1");
  dbx_local_exec_opts o = {.command = "echo begin; echo oops >&2; sleep 30 & echo $! > sl.pid; "
                                      "wait; echo never",
                           .timeout_ms = 300};
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec(f->d, "t1", &o, &r), DBX_OK);
  assert_int_equal(r.timed_out, 1);
  assert_string_equal((char *)r.stdout_buf, "begin\n");
  assert_string_equal((char *)r.stderr_buf, "oops\n");
  assert_int_not_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  assert_true(dead(read_pid(f->d, "t1", "sl.pid")));
}

/* Says "cancelled" from its third poll on (the first two let the command start). */
/* Cancels at the third poll, once the command has written the pid of its
 * background sleep (pidfile, when set): under load the shell may start
 * after the third poll, and then there is no process to check. */
typedef struct {
  int polls;
  const char *pidfile;
} cancel_after;

static int cancel_on_third_poll(void *ud) {
  cancel_after *c = ud;
  if (++c->polls < 3) return 0;
  struct stat sb;
  return c->pidfile == NULL || (stat(c->pidfile, &sb) == 0 && sb.st_size > 0);
}

static void test_local_exec_cancel_kills_group(void **state) {
  fixture *f = *state;
  make_empty(f->d, "k1");
  char *ws = dbx_local_sandbox_path(f->d, "k1");
  char *pidfile = dbx_asprintf("%s/sl.pid", ws);
  free(ws);
  assert_non_null(pidfile);
  cancel_after c = {.pidfile = pidfile};
  dbx_local_exec_opts o = {.command = "echo begin; sleep 30 & echo $! > sl.pid; wait; echo never",
                           .timeout_ms = 60000,
                           .cancelled = cancel_on_third_poll,
                           .cancelled_ud = &c};
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec(f->d, "k1", &o, &r), DBX_OK);
  assert_int_equal(r.cancelled, 1);
  assert_int_equal(r.timed_out, 0);
  assert_true(c.polls >= 3);
  assert_null(strstr((char *)r.stdout_buf, "never"));
  assert_int_not_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  assert_true(dead(read_pid(f->d, "k1", "sl.pid")));
  /* a hook that never fires changes nothing */
  free(pidfile);
  c = (cancel_after){.polls = -1000000};
  o.command = "echo ok";
  assert_int_equal(dbx_local_exec(f->d, "k1", &o, &r), DBX_OK);
  assert_int_equal(r.cancelled, 0);
  assert_int_equal(r.exit_code, 0);
  assert_string_equal((char *)r.stdout_buf, "ok\n");
  dbx_local_exec_result_cleanup(&r);
}

static void test_local_exec_caps_and_totals(void **state) {
  fixture *f = *state;
  make_empty(f->d, "cap");
  dbx_local_exec_opts o = {.command = "head -c 10000 /dev/zero; head -c 300 /dev/zero >&2",
                           .stdout_cap_bytes = 4096,
                           .stderr_cap_bytes = 1000};
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec(f->d, "cap", &o, &r), DBX_OK);
  assert_int_equal(r.stdout_len, 4096);
  assert_int_equal(r.stdout_total, 10000);
  assert_int_equal(r.stdout_truncated, 1);
  assert_int_equal(r.stderr_len, 300);
  assert_int_equal(r.stderr_total, 300);
  assert_int_equal(r.stderr_truncated, 0);
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  /* Big output past the default cap (1 MiB) with the shell still exiting. */
  r = sh(f->d, "cap", "head -c 3000000 /dev/zero");
  assert_int_equal(r.stdout_len, 1 << 20);
  assert_int_equal(r.stdout_total, 3000000);
  assert_int_equal(r.stdout_truncated, 1);
  dbx_local_exec_result_cleanup(&r);
}

static void test_local_exec_background_child_returns(void **state) {
  fixture *f = *state;
  make_empty(f->d, "bg");
  dbx_local_exec_result r = sh(f->d, "bg", "(sleep 300 & echo $! > bg.pid); echo started");
  assert_int_equal(r.exit_code, 0);
  assert_int_equal(r.timed_out, 0);
  assert_string_equal((char *)r.stdout_buf, "started\n");
  assert_int_equal(r.stdout_len, 8);
  dbx_local_exec_result_cleanup(&r);
  /* The documented rule: what is left of the group is killed. */
  assert_true(dead(read_pid(f->d, "bg", "bg.pid")));
}

static void test_local_exec_heredoc_and_cwd(void **state) {
  fixture *f = *state;
  make_empty(f->d, "hd");
  dbx_local_exec_result r = sh(f->d, "hd", "cat <<'EOF'\nline one\n$HOME \\n\nEOF\necho after");
  assert_string_equal((char *)r.stdout_buf, "line one\n$HOME \\n\nafter\n");
  dbx_local_exec_result_cleanup(&r);
  put(f->d, "hd", "sub/dir/x", "1");
  dbx_local_exec_opts o = {.command = "pwd; cat ../x", .cwd = "sub/dir"};
  put(f->d, "hd", "sub/x", "parent");
  assert_int_equal(dbx_local_exec(f->d, "hd", &o, &r), DBX_OK);
  char *ws = dbx_local_sandbox_path(f->d, "hd");
  char *want = dbx_asprintf("%s/sub/dir\nparent", ws);
  assert_string_equal((char *)r.stdout_buf, want);
  dbx_local_exec_result_cleanup(&r);
  o.cwd = "../";
  assert_int_equal(dbx_local_exec(f->d, "hd", &o, &r), DBX_EINVAL);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "'../'"));
  o.cwd = "/tmp";
  assert_int_equal(dbx_local_exec(f->d, "hd", &o, &r), DBX_EINVAL);
  o.cwd = "missing";
  assert_int_equal(dbx_local_exec(f->d, "hd", &o, &r), DBX_ENOTFOUND);
  free(ws);
  free(want);
}

static void test_local_exec_long_command(void **state) {
  fixture *f = *state;
  make_empty(f->d, "long");
  size_t n = 3000000;
  char *cmd = malloc(n + 64);
  strcpy(cmd, "x='");
  memset(cmd + 3, 'a', n);
  strcpy(cmd + 3 + n, "'; echo ${#x} $0");
  dbx_local_exec_result r = sh(f->d, "long", cmd);
  assert_int_equal(r.exit_code, 0);
  assert_memory_equal(r.stdout_buf, "3000000 ", 8);
  dbx_local_exec_result_cleanup(&r);
  free(cmd);
  /* The script file is gone afterwards. */
  char *meta = dbx_asprintf("%s/sandboxes/long/meta", f->home);
  char *ls = dbx_asprintf("test \"$(ls %s | tr '\\n' ' ')\" = 'source state '", meta);
  assert_int_equal(system(ls), 0);
  free(ls);
  free(meta);
}

static void test_local_file_escapes_refused(void **state) {
  fixture *f = *state;
  make_empty(f->d, "ws");
  char *ws = dbx_local_sandbox_path(f->d, "ws");
  /* A sibling whose name has the workspace's path as a prefix. */
  char *evil = dbx_asprintf("%s-evil", ws);
  run_sh("mkdir -p %s && printf secret > %s/x", evil);
  char *l1 = dbx_asprintf("ln -s '%s' '%s/evil' && ln -s / '%s/root' && mkdir '%s/in' && "
                    "printf ok > '%s/in/f' && ln -s in '%s/inlink'",
                    evil, ws, ws, ws, ws, ws);
  assert_int_equal(system(l1), 0);
  static const char *bad[] = {"../x", "/etc/passwd", "a/../../x", "evil/x", "root/etc/passwd",
                              "..", "ws-evil/../../x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint8_t *data = (uint8_t *)1;
    size_t len = 7;
    dbx_err rc = dbx_local_file_read(f->d, "ws", bad[i], 0, &data, &len);
    if (rc != DBX_EINVAL) fail_msg("read '%s' gave %s", bad[i], dbx_err_name(rc));
    assert_null(data);
    char *q = dbx_asprintf("'%s'", bad[i]);
    assert_non_null(strstr(dbx_local_errmsg(f->d), q));
    free(q);
    assert_int_equal(dbx_local_file_write(f->d, "ws", bad[i], "x", 1), DBX_EINVAL);
  }
  /* Writing through a symlink folder that leads out, or creating under it. */
  assert_int_equal(dbx_local_file_write(f->d, "ws", "root/tmp/dbx-should-not-exist", "x", 1),
                   DBX_EINVAL);
  assert_int_equal(dbx_local_file_write(f->d, "ws", "evil/new/y", "x", 1), DBX_EINVAL);
  char *tail = strrchr(evil, '/') + 1; /* "workspace-evil": not inside the workspace */
  char *rel = dbx_asprintf("%s/x", tail);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "ws", rel, 0, &data, &len), DBX_ENOTFOUND);
  assert_int_equal(access("/tmp/dbx-should-not-exist", F_OK), -1);
  free(rel);
  free(l1);
  dbx_test_rmrf(evil);
  free(evil);
  free(ws);
}

static int have_openat2(void) {
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC};
  int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

static void test_local_file_symlink_inside_allowed(void **state) {
  fixture *f = *state;
  make_empty(f->d, "ln");
  char *ws = dbx_local_sandbox_path(f->d, "ln");
  put(f->d, "ln", "in/f", "ok");
  run_sh("ln -s in '%s/inlink'", ws);
  if (have_openat2()) {
    expect_file(f->d, "ln", "inlink/f", "ok");
  } else { /* the documented fallback refuses every symlink */
    uint8_t *data = NULL;
    size_t len = 0;
    assert_int_equal(dbx_local_file_read(f->d, "ln", "inlink/f", 0, &data, &len), DBX_EINVAL);
  }
  /* Overwriting a symlink replaces the link, not its target. */
  run_sh("ln -s in/f '%s/flink'", ws);
  put(f->d, "ln", "flink", "new");
  expect_file(f->d, "ln", "in/f", "ok");
  expect_file(f->d, "ln", "flink", "new");
  assert_int_equal(dbx_local_file_write(f->d, "ln", "in", "x", 1), DBX_EINVAL);
  free(ws);
}

static void test_local_bytes_round_trip(void **state) {
  fixture *f = *state;
  make_empty(f->d, "b");
  uint8_t all[256];
  for (int i = 0; i < 256; i++) all[i] = (uint8_t)i;
  assert_int_equal(dbx_local_file_write(f->d, "b", "all.bin", all, sizeof all), DBX_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "b", "all.bin", 0, &data, &len), DBX_OK);
  assert_int_equal(len, 256);
  assert_memory_equal(data, all, 256);
  free(data);
  /* A 3-byte character across each read-size boundary, then invalid UTF-8. */
  size_t n = 70000;
  uint8_t *big = malloc(n);
  for (size_t i = 0; i < n; i++) big[i] = (uint8_t)('a' + i % 26);
  size_t cuts[] = {4095, 8191, 65535};
  for (int i = 0; i < 3; i++) memcpy(big + cuts[i] - 1, "\xe2\x82\xac", 3);
  memcpy(big + n - 5, "\xff\xfe\xc0\x80\xed", 5);
  assert_int_equal(dbx_local_file_write(f->d, "b", "big.bin", big, n), DBX_OK);
  dbx_local_exec_result r = sh(f->d, "b", "cat big.bin; cat big.bin all.bin >&2");
  assert_int_equal(r.stdout_len, n);
  assert_memory_equal(r.stdout_buf, big, n);
  assert_int_equal(r.stderr_len, n + 256);
  assert_memory_equal(r.stderr_buf, big, n);
  assert_memory_equal(r.stderr_buf + n, all, 256);
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_file_read(f->d, "b", "big.bin", 0, &data, &len), DBX_OK);
  assert_int_equal(len, n);
  assert_memory_equal(data, big, n);
  free(data);
  assert_int_equal(dbx_local_file_read(f->d, "b", "big.bin", 1000, &data, &len), DBX_EINVAL);
  /* Overwrite is whole-file. */
  put(f->d, "b", "big.bin", "short");
  expect_file(f->d, "b", "big.bin", "short");
  free(big);
}

static void test_local_stop_start_delete(void **state) {
  fixture *f = *state;
  make_empty(f->d, "s");
  assert_int_equal(dbx_local_sandbox_stop(f->d, "s"), DBX_OK);
  dbx_local_exec_opts o = {.command = "echo hi"};
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec(f->d, "s", &o, &r), DBX_ESTATE);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "stopped"));
  assert_non_null(strstr(dbx_local_errmsg(f->d), "'s'"));
  assert_int_equal(dbx_local_sandbox_start(f->d, "s"), DBX_OK);
  assert_int_equal(dbx_local_exec(f->d, "s", &o, &r), DBX_OK);
  assert_string_equal((char *)r.stdout_buf, "hi\n");
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_sandbox_stop(f->d, "missing"), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "s"), DBX_OK);
  assert_int_equal(dbx_local_exec(f->d, "s", &o, &r), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "s"), DBX_OK);
  char *ws = dbx_local_sandbox_path(f->d, "s");
  assert_int_equal(access(ws, F_OK), -1);
  free(ws);
  /* After delete the name can be created afresh. */
  make_empty(f->d, "s");
  assert_int_equal(dbx_local_sandbox_delete(f->d, "s"), DBX_OK);
}

/* Removing a sandbox removes the links in it, never what they point at: a
 * command may leave links to anywhere on the host (a directory, a file, a
 * link in a subfolder, a dangling one). Read-only files go too, and nothing
 * is left in trash/. The same removal serves snapshots and forgotten
 * commands. */
static void test_local_delete_leaves_link_targets(void **state) {
  fixture *f = *state;
  char *out = dbx_test_tmpdir("dbx-local-outside");
  char *keep = dbx_asprintf("%s/keep.txt", out);
  char *sub = dbx_asprintf("%s/sub", out);
  FILE *fp = fopen(keep, "w");
  assert_non_null(fp);
  fputs("still here\n", fp);
  fclose(fp);
  assert_int_equal(mkdir(sub, 0755), 0);
  make_empty(f->d, "s");
  char *cmd = dbx_asprintf("ln -s %s to_dir && ln -s %s to_file && mkdir -p a/b && "
                           "ln -s %s a/b/deep && ln -s /nonexistent/x dangling && "
                           "echo ro > ro.txt && chmod 400 ro.txt && ln -s %s a/sub_link",
                           out, keep, out, sub);
  dbx_local_exec_result r = sh(f->d, "s", cmd);
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  free(cmd);
  char *ref = NULL;
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "s", "snap-links", &ref), DBX_OK);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "s"), DBX_OK);
  assert_int_equal(dbx_local_snapshot_delete(f->d, ref), DBX_OK);
  free(ref);
  /* the targets are untouched */
  struct stat st;
  assert_int_equal(stat(keep, &st), 0);
  assert_int_equal(st.st_size, 11);
  assert_int_equal(stat(sub, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  /* the sandbox, the snapshot and the trash are empty */
  char *p = dbx_asprintf("%s/sandboxes/s", f->home);
  assert_int_equal(lstat(p, &st), -1);
  free(p);
  p = dbx_asprintf("%s/snapshots/snap-links", f->home);
  assert_int_equal(lstat(p, &st), -1);
  free(p);
  p = dbx_asprintf("ls -A %s/trash | wc -l", f->home);
  FILE *ls = popen(p, "r");
  assert_non_null(ls);
  int n = -1;
  assert_int_equal(fscanf(ls, "%d", &n), 1);
  pclose(ls);
  assert_int_equal(n, 0);
  free(p);
  dbx_test_rmrf(out);
  free(keep);
  free(sub);
  free(out);
}

/* A command can make a tree deeper than PATH_MAX (here 40 levels of 200
 * characters, built by moving 10-level chains into each other so no path
 * the shell handles is that long); deleting its sandbox removes it all. */
static void test_local_delete_deep_tree(void **state) {
  fixture *f = *state;
  make_empty(f->d, "s");
  dbx_local_exec_result r =
      sh(f->d, "s",
         "n=$(printf '%0200d' 0); l=$n/$n/$n/$n/$n/$n/$n/$n/$n/$n; "
         "mkdir -p c/$l && echo leaf > c/$l/leaf.txt || exit 8; "
         "for i in 1 2 3; do mkdir -p t/$l && mv c t/$l/ && mv t c || exit 9; done; echo ok");
  assert_int_equal(r.exit_code, 0);
  assert_string_equal((char *)r.stdout_buf, "ok\n");
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "s"), DBX_OK);
  struct stat st;
  char *p = dbx_asprintf("%s/sandboxes/s", f->home);
  assert_int_equal(lstat(p, &st), -1);
  free(p);
  p = dbx_asprintf("ls -A %s/trash | wc -l", f->home);
  FILE *ls = popen(p, "r");
  assert_non_null(ls);
  int n = -1;
  assert_int_equal(fscanf(ls, "%d", &n), 1);
  pclose(ls);
  assert_int_equal(n, 0);
  free(p);
}

typedef struct {
  dbx_local *d;
  int n;
  int ok;
} worker_arg;

static void *worker(void *p) {
  worker_arg *a = p;
  char id[32], cmd[64], want[32];
  snprintf(id, sizeof id, "thr%d", a->n);
  snprintf(cmd, sizeof cmd, "echo %d", a->n);
  snprintf(want, sizeof want, "%d\n", a->n);
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  a->ok = dbx_local_sandbox_create(a->d, id, &src, NULL) == DBX_OK;
  for (int i = 0; a->ok && i < 5; i++) {
    dbx_local_exec_opts o = {.command = cmd};
    dbx_local_exec_result r;
    a->ok = dbx_local_exec(a->d, id, &o, &r) == DBX_OK && strcmp((char *)r.stdout_buf, want) == 0;
    dbx_local_exec_result_cleanup(&r);
  }
  a->ok = a->ok && dbx_local_sandbox_delete(a->d, id) == DBX_OK;
  return NULL;
}

static void test_local_threads_distinct_sandboxes(void **state) {
  fixture *f = *state;
  pthread_t t[4];
  worker_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (worker_arg){.d = f->d, .n = i};
    assert_int_equal(pthread_create(&t[i], NULL, worker, &a[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    assert_true(a[i].ok);
  }
}


/* ---- detached commands ---- */

/* Poll cmd_id until it is no longer PENDING/RUNNING (bounded: 60 s). */
static dbx_local_cmd_status wait_cmd(dbx_local *d, const char *id, const char *cmd_id) {
  dbx_local_cmd_status st;
  for (int i = 0; i < 3000; i++) {
    assert_int_equal(dbx_local_exec_poll(d, id, cmd_id, &st), DBX_OK);
    if (st.state == DBX_LOCAL_CMD_FINISHED || st.state == DBX_LOCAL_CMD_LOST) return st;
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  fail_msg("command %s did not finish", cmd_id);
  return st;
}

static void test_local_detached_start_poll_read_collect(void **state) {
  fixture *f = *state;
  make_empty(f->d, "dt");
  dbx_local_cmd_status st;
  assert_int_equal(dbx_local_exec_poll(f->d, "dt", "c1", &st), DBX_ENOTFOUND);
  const char *env[] = {"GREETING=hi there", NULL};
  dbx_local_exec_opts o = {.command = "echo \"$GREETING\"; echo to-err >&2; "
                                      "head -c 10000 /dev/zero; exit 3",
                           .env = env,
                           .stdout_cap_bytes = 4096};
  int adopted = -1;
  assert_int_equal(dbx_local_exec_start(f->d, "dt", "c1", &o, &adopted), DBX_OK);
  assert_int_equal(adopted, 0);
  st = wait_cmd(f->d, "dt", "c1");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(st.exit_code, 3);
  assert_int_equal(st.signal, 0);
  assert_int_equal(st.timed_out, 0);
  assert_int_equal(st.killed, 0);
  assert_int_equal(st.stdout_total, 10009);
  assert_int_equal(st.stdout_size, 4096);
  assert_int_equal(st.stderr_total, 7);
  char buf[16];
  size_t n = 0;
  assert_int_equal(dbx_local_exec_read(f->d, "dt", "c1", 1, 3, buf, 6, &n), DBX_OK);
  assert_int_equal(n, 6);
  assert_memory_equal(buf, "there\n", 6);
  assert_int_equal(dbx_local_exec_read(f->d, "dt", "c1", 2, 0, buf, sizeof buf, &n), DBX_OK);
  assert_int_equal(n, 7);
  assert_memory_equal(buf, "to-err\n", 7);
  assert_int_equal(dbx_local_exec_read(f->d, "dt", "c1", 2, 7, buf, sizeof buf, &n), DBX_OK);
  assert_int_equal(n, 0);
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec_collect(f->d, "dt", "c1", &r), DBX_OK);
  assert_int_equal(r.exit_code, 3);
  assert_int_equal(r.stdout_len, 4096);
  assert_int_equal(r.stdout_total, 10009);
  assert_int_equal(r.stdout_truncated, 1);
  assert_memory_equal(r.stdout_buf, "hi there\n", 9);
  assert_string_equal((char *)r.stderr_buf, "to-err\n");
  assert_int_equal(r.stderr_truncated, 0);
  dbx_local_exec_result_cleanup(&r);
  /* Starting the same id again adopts the finished command. */
  assert_int_equal(dbx_local_exec_start(f->d, "dt", "c1", &o, &adopted), DBX_OK);
  assert_int_equal(adopted, 1);
  /* Bad ids and a missing sandbox. */
  assert_int_equal(dbx_local_exec_start(f->d, "dt", "../x", &o, NULL), DBX_EINVAL);
  assert_int_equal(dbx_local_exec_start(f->d, "nope", "c2", &o, NULL), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_exec_poll(f->d, "dt", "", &st), DBX_EINVAL);
  /* forget removes it; a new start runs again. */
  assert_int_equal(dbx_local_exec_forget(f->d, "dt", "c1"), DBX_OK);
  assert_int_equal(dbx_local_exec_poll(f->d, "dt", "c1", &st), DBX_ENOTFOUND);
}

/* A detached command's file keeps the head and a ring of the tail; collect
 * puts the ring back in order, for several wrap positions. */
static void test_local_detached_keeps_head_and_tail(void **state) {
  fixture *f = *state;
  make_empty(f->d, "ht");
  static const long lasts[] = {3000, 3001, 3017, 100000};
  for (size_t k = 0; k < sizeof lasts / sizeof lasts[0]; k++) {
    char cmd[64], cid[16];
    snprintf(cmd, sizeof cmd, "seq 1 %ld; echo done >&2", lasts[k]);
    snprintf(cid, sizeof cid, "r%zu", k);
    dbx_local_exec_opts o = {.command = cmd, .stdout_cap_bytes = 4096};
    assert_int_equal(dbx_local_exec_start(f->d, "ht", cid, &o, NULL), DBX_OK);
    dbx_local_cmd_status st = wait_cmd(f->d, "ht", cid);
    assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
    assert_int_equal(st.stdout_size, 4096); /* the file never grows past the cap */
    char *full = NULL;
    size_t cap = 0;
    FILE *mf = open_memstream(&full, &cap);
    for (long v = 1; v <= lasts[k]; v++) fprintf(mf, "%ld\n", v);
    fclose(mf);
    size_t n = strlen(full);
    dbx_local_exec_result r;
    assert_int_equal(dbx_local_exec_collect(f->d, "ht", cid, &r), DBX_OK);
    assert_int_equal(r.stdout_total, n);
    assert_int_equal(r.stdout_len, 4096);
    assert_int_equal(r.stdout_head_len, 2048);
    assert_int_equal(r.stdout_truncated, 1);
    assert_memory_equal(r.stdout_buf, full, 2048);
    assert_memory_equal(r.stdout_buf + 2048, full + n - 2048, 2048);
    assert_string_equal((char *)r.stderr_buf, "done\n");
    assert_int_equal(r.stderr_truncated, 0);
    assert_int_equal(r.stderr_head_len, 5);
    dbx_local_exec_result_cleanup(&r);
    free(full);
  }
}

static void test_local_detached_timeout_and_kill(void **state) {
  fixture *f = *state;
  make_empty(f->d, "dk");
  /* the shell must reach its `wait` before the timeout fires: 300 ms was not
   * always enough on a loaded machine (the test failed once at load 22) */
  dbx_local_exec_opts o = {.command = "echo begin; sleep 30 & echo $! > t.pid; wait",
                           .timeout_ms = 2000};
  assert_int_equal(dbx_local_exec_start(f->d, "dk", "t", &o, NULL), DBX_OK);
  dbx_local_cmd_status st = wait_cmd(f->d, "dk", "t");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(st.timed_out, 1);
  assert_int_not_equal(st.exit_code, 0);
  assert_int_equal(st.stdout_total, 6);
  assert_true(dead(read_pid(f->d, "dk", "t.pid")));

  o = (dbx_local_exec_opts){.command = "echo $$ > k.pid; sleep 30 & echo $! > kb.pid; wait"};
  assert_int_equal(dbx_local_exec_start(f->d, "dk", "k", &o, NULL), DBX_OK);
  for (int i = 0; i < 1000; i++) { /* until the shell has written both pids */
    uint8_t *data = NULL;
    size_t len = 0;
    if (dbx_local_file_read(f->d, "dk", "kb.pid", 0, &data, &len) == DBX_OK && len > 0) {
      free(data);
      break;
    }
    free(data);
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(dbx_local_exec_poll(f->d, "dk", "k", &st), DBX_OK);
  assert_int_equal(st.state, DBX_LOCAL_CMD_RUNNING);
  assert_int_equal(dbx_local_exec_forget(f->d, "dk", "k"), DBX_ESTATE);
  assert_int_equal(dbx_local_exec_kill(f->d, "dk", "k"), DBX_OK);
  st = wait_cmd(f->d, "dk", "k");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(st.killed, 1);
  assert_int_equal(st.timed_out, 0);
  assert_true(dead(read_pid(f->d, "dk", "kb.pid")));
  assert_int_equal(dbx_local_exec_kill(f->d, "dk", "missing"), DBX_OK);
}

/* Deleting a sandbox kills what still runs in it: nothing of a deleted
 * sandbox runs on (a cancelled workflow deletes its sandbox). */
static void test_local_delete_kills_running_commands(void **state) {
  fixture *f = *state;
  make_empty(f->d, "dr");
  dbx_local_exec_opts o = {.command = "sleep 30 & echo $! > bg.pid; wait"};
  assert_int_equal(dbx_local_exec_start(f->d, "dr", "c", &o, NULL), DBX_OK);
  long pid = 0;
  for (int i = 0; i < 1000 && pid == 0; i++) { /* until the shell wrote the pid */
    uint8_t *data = NULL;
    size_t len = 0;
    if (dbx_local_file_read(f->d, "dr", "bg.pid", 0, &data, &len) == DBX_OK && len > 0 &&
        data[len - 1] == '\n')
      pid = strtol((char *)data, NULL, 10);
    free(data);
    if (pid == 0) nanosleep(&(struct timespec){0, 10 * 1000000}, NULL);
  }
  assert_true(pid > 1);
  pid = host_pid(f->d, "dr", pid); /* while it lives */
  assert_true(pid != NO_PID);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "dr"), DBX_OK);
  assert_true(dead(pid));
  char *p = dbx_asprintf("%s/sandboxes/dr", f->home);
  assert_int_equal(access(p, F_OK), -1);
  free(p);
}

/* A child process starts the command and dies (_exit, then SIGKILL); the
 * command goes on, waits for a file this test writes after the starter is
 * gone, and finishes once; re-attaching by id sees its output and status. */
static void test_local_detached_survives_its_starter(void **state) {
  fixture *f = *state;
  make_empty(f->d, "sv");
  for (int mode = 0; mode < 2; mode++) {
    const char *cmd_id = mode == 0 ? "exit" : "sigkill";
    char go[32];
    snprintf(go, sizeof go, "go-%s", cmd_id);
    char command[256];
    snprintf(command, sizeof command,
             "echo ran >> count-%s; while [ ! -f %s ]; do sleep 0.02; done; "
             "echo finished; echo warn >&2; exit 7",
             cmd_id, go);
    dbx_local_exec_opts o = {.command = command, .timeout_ms = 60000};
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      int ok = dbx_local_exec_start(f->d, "sv", cmd_id, &o, NULL) == DBX_OK;
      if (!ok) _exit(1);
      if (mode == 1) raise(SIGKILL);
      _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (mode == 0)
      assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    else
      assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    dbx_local_cmd_status st;
    assert_int_equal(dbx_local_exec_poll(f->d, "sv", cmd_id, &st), DBX_OK);
    assert_int_equal(st.state, DBX_LOCAL_CMD_RUNNING);
    /* A retried start re-attaches instead of running it again. */
    int adopted = 0;
    assert_int_equal(dbx_local_exec_start(f->d, "sv", cmd_id, &o, &adopted), DBX_OK);
    assert_int_equal(adopted, 1);
    put(f->d, "sv", go, "");
    st = wait_cmd(f->d, "sv", cmd_id);
    assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
    assert_int_equal(st.exit_code, 7);
    dbx_local_exec_result r;
    assert_int_equal(dbx_local_exec_collect(f->d, "sv", cmd_id, &r), DBX_OK);
    assert_string_equal((char *)r.stdout_buf, "finished\n");
    assert_string_equal((char *)r.stderr_buf, "warn\n");
    dbx_local_exec_result_cleanup(&r);
    char count[32];
    snprintf(count, sizeof count, "count-%s", cmd_id);
    expect_file(f->d, "sv", count, "ran\n");
  }
}

/* A supervisor killed with SIGKILL leaves its command LOST, not RUNNING. */
static void test_local_detached_lost_supervisor(void **state) {
  fixture *f = *state;
  make_empty(f->d, "ls");
  dbx_local_exec_opts o = {.command = "echo $$ > l.pid; exec sleep 30"};
  assert_int_equal(dbx_local_exec_start(f->d, "ls", "l", &o, NULL), DBX_OK);
  dbx_local_cmd_status st;
  assert_int_equal(dbx_local_exec_poll(f->d, "ls", "l", &st), DBX_OK);
  assert_int_equal(st.state, DBX_LOCAL_CMD_RUNNING);
  char *p = dbx_asprintf("%s/sandboxes/ls/meta/cmds/l/supervisor", f->home);
  long sup = 0;
  for (int i = 0; i < 1000 && sup == 0; i++) { /* written by the supervisor as it starts */
    FILE *fp = fopen(p, "r");
    if (fp != NULL && fscanf(fp, "%ld", &sup) != 1) sup = 0;
    if (fp != NULL) fclose(fp);
    struct timespec ts = {0, 10 * 1000000};
    if (sup == 0) nanosleep(&ts, NULL);
  }
  free(p);
  assert_true(sup > 1);
  for (int i = 0; i < 1000; i++) { /* until the command itself runs */
    uint8_t *data = NULL;
    size_t len = 0;
    dbx_err rc = dbx_local_file_read(f->d, "ls", "l.pid", 0, &data, &len);
    free(data);
    if (rc == DBX_OK && len > 0) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(kill((pid_t)sup, SIGKILL), 0);
  st = wait_cmd(f->d, "ls", "l");
  assert_int_equal(st.state, DBX_LOCAL_CMD_LOST);
  int adopted = 0;
  assert_int_equal(dbx_local_exec_start(f->d, "ls", "l", &o, &adopted), DBX_OK);
  assert_int_equal(adopted, 1); /* start never runs a lost command again by itself */
  long cpid = read_pid(f->d, "ls", "l.pid");
  if (cpid > 1) kill((pid_t)cpid, SIGKILL); /* the orphaned sleep */
  assert_int_equal(dbx_local_exec_forget(f->d, "ls", "l"), DBX_OK);
}

/* The supervisor's child killed before exec (failpoint
 * local.supervise.child_killed_before_exec, armed through the environment
 * the supervisor inherits): the command FINISHED with exit 127 and
 * not_started naming why, and nothing of it ran. */
static void test_local_detached_child_killed_before_exec(void **state) {
  fixture *f = *state;
  make_empty(f->d, "nx");
  assert_int_equal(setenv("DURABOX_FAILPOINTS", "local.supervise.child_killed_before_exec=log", 1), 0);
  dbx_local_exec_opts o = {.command = "touch ran"};
  dbx_err rc = dbx_local_exec_start(f->d, "nx", "n", &o, NULL);
  unsetenv("DURABOX_FAILPOINTS");
  assert_int_equal(rc, DBX_OK);
  dbx_local_cmd_status st = wait_cmd(f->d, "nx", "n");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(st.exit_code, 127);
  if (strstr(st.not_started, "cannot start ") == NULL || strstr(st.not_started, "Broken pipe") == NULL)
    fail_msg("not_started is '%s'", st.not_started);
  dbx_local_exec_result r;
  assert_int_equal(dbx_local_exec_collect(f->d, "nx", "n", &r), DBX_OK);
  assert_string_equal(r.not_started, st.not_started);
  assert_int_equal(r.stdout_total + r.stderr_total, 0);
  dbx_local_exec_result_cleanup(&r);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "nx", "ran", 0, &data, &len), DBX_ENOTFOUND); /* it never ran */
  free(data);
  /* forgotten and started again without the failpoint, it runs */
  assert_int_equal(dbx_local_exec_forget(f->d, "nx", "n"), DBX_OK);
  assert_int_equal(dbx_local_exec_start(f->d, "nx", "n", &o, NULL), DBX_OK);
  st = wait_cmd(f->d, "nx", "n");
  assert_int_equal(st.exit_code, 0);
  assert_string_equal(st.not_started, "");
  assert_int_equal(dbx_local_file_read(f->d, "nx", "ran", 0, &data, &len), DBX_OK);
  free(data);
}

static void test_local_labels_list_exists(void **state) {
  fixture *f = *state;
  dbx_drv_label l[] = {{"durabox.resource", "workspace"}, {"durabox.workflow_id", "wf 1"}};
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY, .labels = l, .nlabels = 2};
  assert_int_equal(dbx_local_sandbox_create(f->d, "lb1", &src, NULL), DBX_OK);
  make_empty(f->d, "lb2"); /* no labels: no labels file */
  char *p = dbx_asprintf("%s/sandboxes/lb1/meta/labels", f->home);
  FILE *fp = fopen(p, "r");
  assert_non_null(fp);
  char text[256] = "";
  assert_true(fread(text, 1, sizeof text - 1, fp) > 0);
  fclose(fp);
  assert_string_equal(text, "durabox.resource=workspace\ndurabox.workflow_id=wf 1\n");
  free(p);
  p = dbx_asprintf("%s/sandboxes/lb2/meta/labels", f->home);
  assert_int_not_equal(access(p, F_OK), 0);
  free(p);
  dbx_drv_label *got = NULL;
  size_t n = 0;
  assert_int_equal(dbx_local_sandbox_labels(f->d, "lb1", &got, &n), DBX_OK);
  assert_int_equal(n, 2);
  assert_string_equal(got[1].value, "wf 1");
  dbx_drv_labels_free(got, n);
  assert_int_equal(dbx_local_sandbox_labels(f->d, "lb2", &got, &n), DBX_OK);
  assert_int_equal(n, 0);
  dbx_drv_labels_free(got, n);
  assert_int_equal(dbx_local_sandbox_labels(f->d, "nope", &got, &n), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_NO_SANDBOX);
  char **ids = NULL;
  assert_int_equal(dbx_local_sandbox_list(f->d, NULL, 0, &ids, &n), DBX_OK);
  assert_int_equal(n, 2);
  dbx_drv_names_free(ids, n);
  assert_int_equal(dbx_local_sandbox_list(f->d, &l[1], 1, &ids, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_string_equal(ids[0], "lb1");
  dbx_drv_names_free(ids, n);
  int running = -1;
  assert_int_equal(dbx_local_sandbox_exists(f->d, "lb1", &running), DBX_OK);
  assert_int_equal(running, 1);
  assert_int_equal(dbx_local_sandbox_stop(f->d, "lb1"), DBX_OK);
  assert_int_equal(dbx_local_sandbox_exists(f->d, "lb1", &running), DBX_OK);
  assert_int_equal(running, 0);
  assert_int_equal(dbx_local_sandbox_exists(f->d, "nope", NULL), DBX_ENOTFOUND);
  dbx_drv_label bad = {"k", "a\nb"};
  dbx_local_source bs = {.kind = DBX_LOCAL_SOURCE_EMPTY, .labels = &bad, .nlabels = 1};
  assert_int_equal(dbx_local_sandbox_create(f->d, "lb3", &bs, NULL), DBX_EINVAL);
}

static void test_local_restore_in_place(void **state) {
  fixture *f = *state;
  make_empty(f->d, "rs");
  put(f->d, "rs", "a/f", "v1");
  char *ref = NULL;
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "rs", "rs-1", &ref), DBX_OK);
  put(f->d, "rs", "a/f", "v2");
  put(f->d, "rs", "b", "later");
  assert_int_equal(dbx_local_sandbox_restore(f->d, "rs", ref), DBX_OK);
  expect_file(f->d, "rs", "a/f", "v1");
  dbx_local_exec_result r = sh(f->d, "rs", "cat a/f; ls");
  assert_string_equal((const char *)r.stdout_buf, "v1a\n"); /* "b" is gone */
  dbx_local_exec_result_cleanup(&r);
  char *tmp = dbx_asprintf("%s/sandboxes/rs/workspace.restore", f->home);
  assert_int_not_equal(access(tmp, F_OK), 0); /* the old workspace is removed */
  free(tmp);
  assert_int_equal(dbx_local_sandbox_restore(f->d, "rs", "none"), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_SOURCE_NOT_FOUND);
  assert_int_equal(dbx_local_sandbox_restore(f->d, "nope", ref), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_NO_SANDBOX);
  /* refused while a detached command runs */
  dbx_local_exec_opts o = {.command = "sleep 30"};
  assert_int_equal(dbx_local_exec_start(f->d, "rs", "long", &o, NULL), DBX_OK);
  assert_int_equal(dbx_local_sandbox_restore(f->d, "rs", ref), DBX_ESTATE);
  expect_file(f->d, "rs", "a/f", "v1");
  assert_int_equal(dbx_local_exec_kill(f->d, "rs", "long"), DBX_OK);
  dbx_local_cmd_status st = {0};
  for (int i = 0; i < 1000 && st.state != DBX_LOCAL_CMD_FINISHED; i++) {
    assert_int_equal(dbx_local_exec_poll(f->d, "rs", "long", &st), DBX_OK);
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(dbx_local_sandbox_restore(f->d, "rs", ref), DBX_OK); /* no longer refused */
  free(ref);
}

static void test_local_git_clone_commit_push(void **state) {
  fixture *f = *state;
  char *tmp = dbx_test_tmpdir("dbx-local-git");
  char *repo = dbx_asprintf("%s/repo", tmp), *bare = dbx_asprintf("%s/bare.git", tmp);
  char *cmd = dbx_asprintf("git init -q -b main %s && cd %s && echo one > a.txt && git add a.txt && "
                           "git -c user.name=t -c user.email=t@e commit -q -m init && "
                           "git init -q --bare %s",
                           repo, repo, bare);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  make_empty(f->d, "gc");
  put(f->d, "gc", "sub/repo/partial", "x"); /* a partial earlier target */
  assert_int_equal(dbx_local_git_clone(f->d, "gc", repo, "sub/repo", NULL), DBX_OK);
  expect_file(f->d, "gc", "sub/repo/a.txt", "one\n");
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "gc", "sub/repo/partial", 0, &data, &len),
                   DBX_ENOTFOUND);
  put(f->d, "gc", "sub/repo/a.txt", "two\n");
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(dbx_local_git_commit_at(f->d, "gc", "sub/repo", "second", "D <d@e>", &sha,
                                           &nothing),
                   DBX_OK);
  assert_int_equal(nothing, 0);
  assert_int_equal(strlen(sha), 40);
  assert_int_equal(dbx_local_git_push(f->d, "gc", "sub/repo", bare, "main"), DBX_OK);
  cmd = dbx_asprintf("test \"$(git --git-dir=%s rev-parse refs/heads/main)\" = %s", bare, sha);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  assert_int_equal(dbx_local_git_clone(f->d, "gc", repo, "../out", NULL), DBX_EINVAL);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_PATH_REFUSED);
  assert_int_equal(dbx_local_git_clone(f->d, "gc", "/nonexistent/repo", "x", NULL), DBX_EIO);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "git clone"));
  assert_int_equal(dbx_local_git_push(f->d, "gc", "sub/repo", "-x", NULL), DBX_EINVAL);
  free(sha);
  free(repo);
  free(bare);
  dbx_test_rmrf(tmp);
  free(tmp);
}

static void test_local_upload_download(void **state) {
  fixture *f = *state;
  make_empty(f->d, "ud");
  char *host = dbx_asprintf("%s/host.bin", f->home), *back = dbx_asprintf("%s/back.bin", f->home);
  FILE *fp = fopen(host, "wb");
  assert_non_null(fp);
  const uint8_t bytes[] = {0, 1, 2, 0xff, '\n', 0};
  assert_int_equal(fwrite(bytes, 1, sizeof bytes, fp), sizeof bytes);
  fclose(fp);
  assert_int_equal(dbx_local_file_upload(f->d, "ud", host, "in/h.bin"), DBX_OK);
  uint8_t *data = NULL;
  size_t len = 0;
  assert_int_equal(dbx_local_file_read(f->d, "ud", "in/h.bin", 0, &data, &len), DBX_OK);
  assert_int_equal(len, sizeof bytes);
  assert_memory_equal(data, bytes, len);
  free(data);
  assert_int_equal(dbx_local_file_download(f->d, "ud", "in/h.bin", back), DBX_OK);
  uint8_t got[16];
  fp = fopen(back, "rb");
  assert_non_null(fp);
  assert_int_equal(fread(got, 1, sizeof got, fp), sizeof bytes);
  fclose(fp);
  assert_memory_equal(got, bytes, sizeof bytes);
  assert_int_equal(dbx_local_file_upload(f->d, "ud", "/nonexistent/h", "x"), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_OK); /* a missing file, not a sandbox */
  assert_int_equal(dbx_local_file_upload(f->d, "ud", host, "/abs"), DBX_EINVAL);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_PATH_REFUSED);
  assert_int_equal(dbx_local_file_upload(f->d, "ud", f->home, "x"), DBX_EINVAL); /* a folder */
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_OK);
  assert_int_equal(dbx_local_file_download(f->d, "ud", "none", back), DBX_ENOTFOUND);
  assert_int_equal(dbx_local_file_download(f->d, "ud", "in/h.bin", "rel"), DBX_EINVAL);
  free(host);
  free(back);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* ---- keeping the host out ---- */

/* 1 when needle is in either stream (byte-wise: /proc/<pid>/environ holds NULs) */
static int mem_has(const uint8_t *buf, size_t len, const char *needle) {
  size_t nl = strlen(needle);
  for (size_t i = 0; buf != NULL && i + nl <= len; i++)
    if (memcmp(buf + i, needle, nl) == 0) return 1;
  return 0;
}

static int has(const dbx_local_exec_result *r, const char *needle) {
  return mem_has(r->stdout_buf, r->stdout_len, needle) ||
         mem_has(r->stderr_buf, r->stderr_len, needle);
}

/* 1 when stdout's last line is line (which ends in a newline): the whole
 * line, so "/proc/1 /proc/2" does not pass for "/proc/1 /proc/2 /proc/3". */
static int ends_with_line(const dbx_local_exec_result *r, const char *line) {
  size_t n = strlen(line);
  if (r->stdout_len < n || memcmp(r->stdout_buf + r->stdout_len - n, line, n) != 0) return 0;
  return r->stdout_len == n || r->stdout_buf[r->stdout_len - n - 1] == '\n' ||
         r->stdout_buf[r->stdout_len - n - 1] == '\0';
}

/* Under bubblewrap a command sees only its own processes: the test process
 * (the worker here) can be neither signalled nor read, and its environment
 * (a secret) never reaches the output; also for a detached command, whose
 * supervisor carries the caller's environment. */
static void test_local_pid_namespace_hides_host(void **state) {
  fixture *f = *state;
  if (!g_bwrap) skip();
  make_empty(f->d, "pid");
  setenv("DBX_TEST_API_KEY", "sk-very-secret-4711", 1);
  char *cmd = dbx_asprintf("kill -0 %ld && echo SIGNALLED; cat /proc/%ld/environ && echo READ; "
                           "cat /proc/[0-9]*/environ; echo /proc/[0-9]*",
                           (long)getpid(), (long)getpid());
  dbx_local_exec_result r = sh(f->d, "pid", cmd);
  assert_false(has(&r, "SIGNALLED"));
  assert_false(has(&r, "READ"));
  assert_false(has(&r, "sk-very-secret-4711"));
  /* the glob runs in the shell itself: bwrap's init (1) and the shell (2).
   * It is the last line of stdout; stderr names the host pid (cat's error),
   * which may itself start with any digit. */
  if (!ends_with_line(&r, "/proc/1 /proc/2\n"))
    fail_msg("/proc shows more than the sandbox: %.*s", (int)r.stdout_len,
             (const char *)r.stdout_buf);
  dbx_local_exec_result_cleanup(&r);
  /* the control: plainly run, the same host pid is signalable */
  char *probe = dbx_asprintf("kill -0 %ld", (long)getpid());
  assert_int_equal(system(probe), 0);
  free(probe);
  dbx_local_exec_opts o = {.command = cmd, .timeout_ms = 60000};
  assert_int_equal(dbx_local_exec_start(f->d, "pid", "c", &o, NULL), DBX_OK);
  dbx_local_cmd_status st = wait_cmd(f->d, "pid", "c");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_equal(dbx_local_exec_collect(f->d, "pid", "c", &r), DBX_OK);
  assert_false(has(&r, "SIGNALLED"));
  assert_false(has(&r, "READ"));
  assert_false(has(&r, "sk-very-secret-4711"));
  assert_true(ends_with_line(&r, "/proc/1 /proc/2\n"));
  dbx_local_exec_result_cleanup(&r);
  unsetenv("DBX_TEST_API_KEY");
  free(cmd);
}

/* HOME and the caches are outside the workspace and last between commands;
 * git_commit does not commit them. */
static void test_local_home_outside_workspace(void **state) {
  fixture *f = *state;
  make_empty(f->d, "hm");
  char *ws = dbx_local_sandbox_path(f->d, "hm");
  dbx_local_exec_result r = sh(f->d, "hm", "printf '%s\\n%s\\n%s\\n' \"$HOME\" "
                                           "\"$XDG_CACHE_HOME\" \"$XDG_CONFIG_HOME\"");
  char *home = dbx_asprintf("%s/sandboxes/hm/home", f->home);
  char *want = dbx_asprintf("%s\n%s/.cache\n%s/.config\n", home, home, home);
  assert_string_equal((char *)r.stdout_buf, want);
  assert_true(strncmp(home, ws, strlen(ws)) != 0);
  dbx_local_exec_result_cleanup(&r);
  r = sh(f->d, "hm", "git init -q . && echo one > a.txt");
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(dbx_local_git_commit(f->d, "hm", "first", "T <t@e>", &sha, &nothing), DBX_OK);
  assert_int_equal(nothing, 0);
  free(sha);
  sha = NULL;
  r = sh(f->d, "hm", "mkdir -p ~/.cache/pip \"$XDG_CONFIG_HOME\" && echo c > ~/.cache/pip/x && "
                     "printf '[user]\\n\\tname = m\\n' > ~/.gitconfig && echo k > ~/.config/k");
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_git_commit(f->d, "hm", "second", "T <t@e>", &sha, &nothing),
                   DBX_OK);
  assert_int_equal(nothing, 1);
  assert_null(sha);
  r = sh(f->d, "hm", "cat ~/.cache/pip/x; git ls-files; git status --porcelain");
  assert_string_equal((char *)r.stdout_buf, "c\na.txt\n");
  dbx_local_exec_result_cleanup(&r);
  free(want);
  free(home);
  free(ws);
}

/* A listening socket on the host's loopback; *port gets its port. */
static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(fd, 8), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* network "none" cuts the sandbox off, the host's loopback included; the
 * default reaches it. Without bubblewrap "none" is refused, not ignored. */
static void test_local_network_none(void **state) {
  fixture *f = *state;
  dbx_local_source none = {.kind = DBX_LOCAL_SOURCE_EMPTY, .network = DBX_DRV_NET_NONE};
  if (!g_bwrap) {
    assert_int_equal(dbx_local_sandbox_create(f->d, "nn", &none, NULL), DBX_EUNSUPPORTED);
    assert_non_null(strstr(dbx_local_errmsg(f->d), "network \"none\""));
    assert_int_equal(dbx_local_sandbox_exists(f->d, "nn", NULL), DBX_ENOTFOUND);
    return;
  }
  int port = 0, lfd = listen_loopback(&port);
  char *cmd = dbx_asprintf("bash -c 'echo hi > /dev/tcp/127.0.0.1/%d' && echo CONNECTED", port);
  make_empty(f->d, "nh");
  dbx_local_exec_result r = sh(f->d, "nh", cmd);
  assert_string_equal((char *)r.stdout_buf, "CONNECTED\n");
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_sandbox_create(f->d, "nn", &none, NULL), DBX_OK);
  r = sh(f->d, "nn", cmd);
  assert_int_not_equal(r.exit_code, 0);
  assert_false(has(&r, "CONNECTED"));
  dbx_local_exec_result_cleanup(&r);
  /* the setting is part of the identity: adopted only with the same network */
  int adopted = -1;
  assert_int_equal(dbx_local_sandbox_create(f->d, "nn", &none, &adopted), DBX_OK);
  assert_int_equal(adopted, 1);
  dbx_local_source host = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  assert_int_equal(dbx_local_sandbox_create(f->d, "nn", &host, NULL), DBX_EEXIST);
  /* detached commands too */
  dbx_local_exec_opts o = {.command = cmd, .timeout_ms = 60000};
  assert_int_equal(dbx_local_exec_start(f->d, "nn", "c", &o, NULL), DBX_OK);
  dbx_local_cmd_status st = wait_cmd(f->d, "nn", "c");
  assert_int_equal(st.state, DBX_LOCAL_CMD_FINISHED);
  assert_int_not_equal(st.exit_code, 0);
  close(lfd);
  free(cmd);
}

/* Without a usable bubblewrap open refuses, saying how to opt out; the
 * explicit opt-out (option or DURABOX_UNSANDBOXED=1) runs plainly. */
static void test_local_refuses_without_bwrap(void **state) {
  fixture *f = *state;
  char *home = dbx_asprintf("%s/other", f->home);
  const char *bad[] = {"/bin/false", "/nonexistent/bwrap"};
  for (int i = 0; i < 2; i++) {
    dbx_local *d = (dbx_local *)1;
    dbx_local_open_opts oo = {.bwrap_path = bad[i]};
    assert_int_equal(dbx_local_open_with(home, &oo, &d), DBX_EUNSUPPORTED);
    assert_null(d);
    const char *m = dbx_local_errmsg(NULL);
    assert_non_null(strstr(m, "bubblewrap is not usable here: "));
    assert_non_null(strstr(m, bad[i]));
    assert_non_null(strstr(m, "install bubblewrap"));
    assert_non_null(strstr(m, "set DURABOX_UNSANDBOXED=1 to run commands directly"));
    oo.unsandboxed = 1;
    assert_int_equal(dbx_local_open_with(home, &oo, &d), DBX_OK);
    assert_int_equal(dbx_local_bwrap_enabled(d), 0);
    assert_string_equal(dbx_local_errmsg(NULL), "");
    make_empty(d, "u");
    dbx_local_exec_result r = sh(d, "u", "echo plain");
    assert_string_equal((char *)r.stdout_buf, "plain\n");
    dbx_local_exec_result_cleanup(&r);
    assert_int_equal(dbx_local_bwrap_set(d, 1), DBX_EUNSUPPORTED);
    dbx_local_close(d);
    d = NULL;
    oo.unsandboxed = 0;
    setenv("DURABOX_UNSANDBOXED", "1", 1);
    assert_int_equal(dbx_local_open_with(home, &oo, &d), DBX_OK);
    unsetenv("DURABOX_UNSANDBOXED");
    assert_int_equal(dbx_local_bwrap_enabled(d), 0);
    dbx_local_close(d);
  }
  free(home);
}

/* git_commit with paths stages and commits those paths only, literally. */
static void test_local_git_commit_paths(void **state) {
  fixture *f = *state;
  make_empty(f->d, "gp");
  dbx_local_exec_result r = sh(f->d, "gp", "git init -q . && echo one > a.txt");
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  char *sha = NULL;
  int nothing = -1;
  assert_int_equal(dbx_local_git_commit(f->d, "gp", "first", "T <t@e>", &sha, &nothing), DBX_OK);
  free(sha);
  r = sh(f->d, "gp", "echo two > a.txt && echo b > b.txt && mkdir -p c && echo d > c/d.txt && "
                     "echo s > staged.txt && git add staged.txt && echo g > '*.txt'");
  assert_int_equal(r.exit_code, 0);
  dbx_local_exec_result_cleanup(&r);
  const char *paths[] = {"b.txt", "c"};
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, paths, 2, "some", "T <t@e>", &sha, &nothing),
      DBX_OK);
  assert_int_equal(nothing, 0);
  assert_int_equal(strlen(sha), 40);
  free(sha);
  sha = NULL;
  r = sh(f->d, "gp", "git show --name-only --format= HEAD; echo --; git status --porcelain");
  assert_string_equal((char *)r.stdout_buf, "b.txt\nc/d.txt\n--\n M a.txt\nA  staged.txt\n"
                                            "?? *.txt\n");
  dbx_local_exec_result_cleanup(&r);
  /* taken literally: "*.txt" is that one file, not a glob */
  const char *glob[] = {"*.txt"};
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, glob, 1, "glob", "T <t@e>", &sha, &nothing),
      DBX_OK);
  free(sha);
  sha = NULL;
  r = sh(f->d, "gp", "git show --name-only --format= HEAD");
  assert_string_equal((char *)r.stdout_buf, "*.txt\n");
  dbx_local_exec_result_cleanup(&r);
  /* nothing changed under the paths */
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, paths, 2, "again", "T <t@e>", &sha, &nothing),
      DBX_OK);
  assert_int_equal(nothing, 1);
  assert_null(sha);
  const char *out[] = {"../x"}, *abs[] = {"/etc/passwd"}, *missing[] = {"nope.txt"};
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, out, 1, "m", "T <t@e>", &sha, &nothing),
      DBX_EINVAL);
  assert_int_equal(dbx_local_errkind(f->d), DBX_DRV_PATH_REFUSED);
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, abs, 1, "m", "T <t@e>", &sha, &nothing),
      DBX_EINVAL);
  assert_int_equal(
      dbx_local_git_commit_paths(f->d, "gp", NULL, missing, 1, "m", "T <t@e>", &sha, &nothing),
      DBX_EIO);
  assert_non_null(strstr(dbx_local_errmsg(f->d), "nope.txt"));
  assert_null(sha);
}

/* host_fs "system" shows only the system folders of the host (the test's
 * own binary, under the build tree, disappears) while programs, the
 * workspace and HOME keep working; the default shows the whole root. */
static void test_local_host_fs_system(void **state) {
  fixture *f = *state;
  dbx_local_source sys = {.kind = DBX_LOCAL_SOURCE_EMPTY, .host_fs = DBX_DRV_FS_SYSTEM};
  if (!g_bwrap) {
    assert_int_equal(dbx_local_sandbox_create(f->d, "fs", &sys, NULL), DBX_EUNSUPPORTED);
    assert_non_null(strstr(dbx_local_errmsg(f->d), "host_fs \"system\""));
    return;
  }
  char exe[4096];
  ssize_t xl = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(xl > 0);
  exe[xl] = '\0';
  assert_true(strncmp(exe, "/usr/", 5) != 0 && strncmp(exe, "/opt/", 5) != 0);
  /* the probe: a host path outside the system directories, seen with the
   * whole host root and hidden with "system". This test's own binary, unless
   * the checkout is under /tmp, which every sandbox has private (then /var,
   * which every Debian host has and "system" does not bind). */
  const char *probe = strncmp(exe, "/tmp/", 5) == 0 ? "/var" : exe;
  char *cmd = dbx_asprintf("test -e '%s' && echo SEEN; git --version >/dev/null && echo GIT; "
                           "echo w > w.txt && echo h > ~/h && cat w.txt ~/h",
                           probe);
  make_empty(f->d, "fh");
  dbx_local_exec_result r = sh(f->d, "fh", cmd);
  assert_string_equal((char *)r.stdout_buf, "SEEN\nGIT\nw\nh\n");
  dbx_local_exec_result_cleanup(&r);
  assert_int_equal(dbx_local_sandbox_create(f->d, "fs", &sys, NULL), DBX_OK);
  r = sh(f->d, "fs", cmd);
  assert_string_equal((char *)r.stdout_buf, "GIT\nw\nh\n");
  dbx_local_exec_result_cleanup(&r);
  dbx_local_source host = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  assert_int_equal(dbx_local_sandbox_create(f->d, "fs", &host, NULL), DBX_EEXIST);
  int adopted = -1;
  assert_int_equal(dbx_local_sandbox_create(f->d, "fs", &sys, &adopted), DBX_OK);
  assert_int_equal(adopted, 1);
  free(cmd);
}

/* Issue 9: a write that finds the disk full is DISK_FULL (the activity's
 * non-retryable DiskFull), not an i/o error worth five retries. A child
 * process mounts a 256 KiB tmpfs in a mount namespace of its own (as root,
 * or in a user namespace) and opens a driver there; skipped when neither is
 * allowed. Exit codes of the child: 0 ok, 77 no namespace, else the check.
 * Both a write of the driver's own and a clone (git's words) are told. */
static int disk_full_child(const char *dir, const char *big_repo) {
  if (syscall(SYS_unshare, CLONE_NEWNS) != 0) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (syscall(SYS_unshare, CLONE_NEWUSER | CLONE_NEWNS) != 0) return 77;
    char map[64];
    int fd = open("/proc/self/setgroups", O_WRONLY);
    if (fd >= 0) {
      if (write(fd, "deny", 4) != 4) return 77;
      close(fd);
    }
    snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
    fd = open("/proc/self/uid_map", O_WRONLY);
    if (fd < 0 || write(fd, map, strlen(map)) < 0) return 77;
    close(fd);
    snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
    fd = open("/proc/self/gid_map", O_WRONLY);
    if (fd < 0 || write(fd, map, strlen(map)) < 0) return 77;
    close(fd);
  }
  if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0) return 77;
  if (mount("tmpfs", dir, "tmpfs", 0, "size=256k") != 0) return 77;
  char home[512];
  snprintf(home, sizeof home, "%s/home", dir);
  dbx_local_open_opts oo = {.unsandboxed = 1};
  dbx_local *d = NULL;
  if (dbx_local_open_with(home, &oo, &d) != DBX_OK) return 2;
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY};
  if (dbx_local_sandbox_create(d, "full-1", &src, NULL) != DBX_OK) return 3;
  size_t n = 1024 * 1024;
  char *big = calloc(1, n);
  if (big == NULL) return 4;
  int rc = 0;
  if (dbx_local_file_write(d, "full-1", "big.bin", big, n) != DBX_EIO) rc = 5;
  else if (dbx_local_errkind(d) != DBX_DRV_DISK_FULL) rc = 6;
  else if (strstr(dbx_local_errmsg(d), "No space left on device") == NULL) rc = 7;
  /* through the driver interface: the typed error itself */
  dbx_driver *drv = dbx_local_driver(d);
  if (rc == 0 && drv->ops->file_write(drv->self, "full-1", "big2.bin", big, n) != DBX_DRV_DISK_FULL)
    rc = 8;
  /* a small write still works once there is room (nothing was left behind) */
  if (rc == 0 && dbx_local_file_write(d, "full-1", "small.txt", "ok", 2) != DBX_OK) rc = 9;
  /* a clone that fills the disk: git's "No space left on device" */
  dbx_local_source gsrc = {.kind = DBX_LOCAL_SOURCE_GIT, .location = big_repo};
  if (rc == 0 && dbx_local_sandbox_create(d, "full-2", &gsrc, NULL) != DBX_EIO) rc = 10;
  else if (rc == 0 && dbx_local_errkind(d) != DBX_DRV_DISK_FULL) rc = 11;
  else if (rc == 0 && strstr(dbx_local_errmsg(d), "git clone failed") == NULL) rc = 12;
  if (rc != 0) fprintf(stderr, "disk full child: check %d: %s\n", rc, dbx_local_errmsg(d));
  free(big);
  dbx_local_close(d);
  return rc;
}

static void test_local_disk_full(void **state) {
  (void)state;
  char *dir = dbx_test_tmpdir("dbx-full"), *repo = dbx_test_tmpdir("dbx-full-repo");
  /* 1 MiB that does not compress: its clone cannot fit in 256 KiB */
  char *cmd = dbx_asprintf("cd %s && git init -q -b main . && head -c 1048576 /dev/urandom > big && "
                           "git add big && git -c user.name=t -c user.email=t@e commit -q -m big",
                           repo);
  assert_int_equal(system(cmd), 0);
  free(cmd);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int rc = disk_full_child(dir, repo);
    free(dir); /* the child's copies (valgrind follows the child) */
    free(repo);
    _exit(rc);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  dbx_test_rmrf(dir);
  dbx_test_rmrf(repo);
  free(dir);
  free(repo);
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) {
    printf("no mount namespace here: test_local_disk_full skipped\n");
    skip();
  }
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- leftovers: what interrupted deletes and creates leave (`durabox sandbox gc`) ---- */

static const dbx_local_leftover *find_leftover(const dbx_local_leftover *l, size_t n,
                                               dbx_local_leftover_kind kind, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (l[i].kind == kind && strcmp(l[i].name, name) == 0) return &l[i];
  return NULL;
}

/* The tombstone of a delete interrupted after its rename (trash/<id>.<hex>)
 * and a half-made sandbox (no meta/source) are found with their size and
 * removed; a half-made one whose create holds its lock, and complete
 * sandboxes, are not leftovers. */
static void test_local_leftovers_found_and_finished(void **state) {
  fixture *f = *state;
  make_empty(f->d, "live");
  char big[10000];
  memset(big, 'x', sizeof big);
  assert_int_equal(dbx_local_file_write(f->d, "live", "big", big, sizeof big), DBX_OK);
  uint64_t bytes = 0;
  assert_int_equal(dbx_local_sandbox_disk_bytes(f->d, "live", &bytes), DBX_OK);
  assert_true(bytes >= sizeof big);
  assert_int_equal(dbx_local_sandbox_disk_bytes(f->d, "nosuch", &bytes), DBX_ENOTFOUND);
  /* the state remove_tree leaves when killed between its rename and rm */
  make_empty(f->d, "gone");
  assert_int_equal(dbx_local_file_write(f->d, "gone", "a/b", big, sizeof big), DBX_OK);
  char *from = dbx_asprintf("%s/sandboxes/gone", f->home);
  char *tomb = dbx_asprintf("%s/trash/gone.1f2e", f->home);
  assert_int_equal(rename(from, tomb), 0);
  char *half = dbx_asprintf("%s/sandboxes/half/meta", f->home);
  char *busy = dbx_asprintf("%s/sandboxes/busy/meta", f->home);
  assert_int_equal(dbx_fs_mkdirs(half, 0755), DBX_OK);
  assert_int_equal(dbx_fs_mkdirs(busy, 0755), DBX_OK);
  char *lockp = dbx_asprintf("%s/locks/busy", f->home);
  int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  assert_true(lk >= 0);
  assert_int_equal(flock(lk, LOCK_EX), 0); /* a create of "busy" under way */
  dbx_local_leftover *l = NULL;
  size_t n = 0;
  assert_int_equal(dbx_local_leftovers(f->d, &l, &n), DBX_OK);
  assert_int_equal(n, 2);
  const dbx_local_leftover *t = find_leftover(l, n, DBX_LOCAL_LEFTOVER_TRASH, "gone.1f2e");
  const dbx_local_leftover *h = find_leftover(l, n, DBX_LOCAL_LEFTOVER_PARTIAL, "half");
  assert_non_null(t);
  assert_non_null(h);
  assert_string_equal(t->path, tomb);
  assert_true(t->bytes >= sizeof big);
  /* a delete of "gone" still at work holds its lock: not removed under it */
  char *glock = dbx_asprintf("%s/locks/gone", f->home);
  int gl = open(glock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  assert_true(gl >= 0);
  assert_int_equal(flock(gl, LOCK_EX), 0);
  assert_int_equal(dbx_local_leftover_remove(f->d, t), DBX_ESTATE);
  assert_int_equal(access(tomb, F_OK), 0);
  close(gl);
  assert_int_equal(dbx_local_leftover_remove(f->d, t), DBX_OK);
  assert_int_equal(dbx_local_leftover_remove(f->d, t), DBX_OK); /* gone already: done */
  assert_int_equal(dbx_local_leftover_remove(f->d, h), DBX_OK);
  assert_int_not_equal(access(tomb, F_OK), 0);
  char *halfdir = dbx_asprintf("%s/sandboxes/half", f->home);
  assert_int_not_equal(access(halfdir, F_OK), 0);
  /* the busy one is removed only once its create let go, and a complete
   * sandbox never through this door */
  dbx_local_leftover bl = {.kind = DBX_LOCAL_LEFTOVER_PARTIAL, .name = "busy"};
  assert_int_equal(dbx_local_leftover_remove(f->d, &bl), DBX_ESTATE);
  dbx_local_leftover lv = {.kind = DBX_LOCAL_LEFTOVER_PARTIAL, .name = "live"};
  assert_int_equal(dbx_local_leftover_remove(f->d, &lv), DBX_ESTATE);
  assert_int_equal(dbx_local_sandbox_exists(f->d, "live", NULL), DBX_OK);
  dbx_local_leftover bad = {.kind = DBX_LOCAL_LEFTOVER_TRASH, .name = "../x"};
  assert_int_equal(dbx_local_leftover_remove(f->d, &bad), DBX_EINVAL);
  close(lk);
  dbx_local_leftovers_free(l, n);
  assert_int_equal(dbx_local_leftovers(f->d, &l, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_string_equal(l[0].name, "busy");
  dbx_local_leftovers_free(l, n);
  free(from);
  free(tomb);
  free(half);
  free(busy);
  free(lockp);
  free(glock);
  free(halfdir);
}

/* Snapshots are listed with their size and when they were made (not the
 * workspace's own times, which cp -a carries over); a checkpoint's copy
 * that died before its rename is a leftover once no checkpoint holds it,
 * and removing it leaves the snapshots alone. */
static void test_local_snapshots_listed_and_parts_collected(void **state) {
  fixture *f = *state;
  dbx_local_snapshot *v = NULL;
  size_t n = 7;
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK); /* none yet (no folder) */
  assert_int_equal(n, 0);
  make_empty(f->d, "snapsrc");
  char body[9000];
  memset(body, 'y', sizeof body);
  assert_int_equal(dbx_local_file_write(f->d, "snapsrc", "f", body, sizeof body), DBX_OK);
  char *ws = dbx_local_sandbox_path(f->d, "snapsrc");
  struct timespec old[2] = {{.tv_sec = 946684800}, {.tv_sec = 946684800}}; /* 2000-01-01 */
  assert_int_equal(utimensat(AT_FDCWD, ws, old, 0), 0);
  int64_t before = dbx_wall_ns() / 1000000;
  char *ref = NULL;
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "snapsrc", "ck-r1-e5", &ref), DBX_OK);
  int64_t after = dbx_wall_ns() / 1000000;
  free(ref);
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_string_equal(v[0].name, "ck-r1-e5");
  assert_true(v[0].bytes >= sizeof body);
  /* the file system's clock is coarse (a tick behind the wall clock at most) */
  if (v[0].made_ms < before - 1000 || v[0].made_ms > after + 1000)
    fail_msg("made_ms %lld not within [%lld, %lld]", (long long)v[0].made_ms, (long long)before,
             (long long)after);
  dbx_local_snapshots_free(v, n);

  /* two copies a checkpoint left: one dead, one still held by its maker */
  char *dead = dbx_asprintf("%s/snapshots/.tmp-ck-r2-e7-1a2b", f->home);
  char *live = dbx_asprintf("%s/snapshots/.tmp-ck-r3-e9-3c4d", f->home);
  char *deadf = dbx_asprintf("%s/x", dead);
  assert_int_equal(dbx_fs_mkdirs(dead, 0755), DBX_OK);
  assert_int_equal(dbx_fs_mkdirs(live, 0755), DBX_OK);
  FILE *fp = fopen(deadf, "w");
  assert_non_null(fp);
  fwrite(body, 1, sizeof body, fp);
  fclose(fp);
  int hold = open(live, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  assert_true(hold >= 0);
  assert_int_equal(flock(hold, LOCK_EX), 0);
  dbx_local_leftover *l = NULL;
  size_t ln = 0;
  assert_int_equal(dbx_local_leftovers(f->d, &l, &ln), DBX_OK);
  const dbx_local_leftover *p = find_leftover(l, ln, DBX_LOCAL_LEFTOVER_SNAPSHOT_PART, ".tmp-ck-r2-e7-1a2b");
  assert_non_null(p);
  assert_string_equal(p->path, dead);
  assert_true(p->bytes >= sizeof body);
  assert_null(find_leftover(l, ln, DBX_LOCAL_LEFTOVER_SNAPSHOT_PART, ".tmp-ck-r3-e9-3c4d"));
  /* half-made copies are no snapshots */
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 1);
  dbx_local_snapshots_free(v, n);
  assert_int_equal(dbx_local_leftover_remove(f->d, p), DBX_OK);
  assert_int_not_equal(access(dead, F_OK), 0);
  /* the held one is refused while its maker holds it, removed after */
  dbx_local_leftover hl = {.kind = DBX_LOCAL_LEFTOVER_SNAPSHOT_PART, .name = ".tmp-ck-r3-e9-3c4d"};
  assert_int_equal(dbx_local_leftover_remove(f->d, &hl), DBX_ESTATE);
  assert_int_equal(access(live, F_OK), 0);
  close(hold);
  assert_int_equal(dbx_local_leftover_remove(f->d, &hl), DBX_OK);
  assert_int_not_equal(access(live, F_OK), 0);
  dbx_local_leftover bad = {.kind = DBX_LOCAL_LEFTOVER_SNAPSHOT_PART, .name = "ck-r1-e5"};
  assert_int_equal(dbx_local_leftover_remove(f->d, &bad), DBX_EINVAL); /* a snapshot: not this door */
  bad.name = ".tmp-../x";
  assert_int_equal(dbx_local_leftover_remove(f->d, &bad), DBX_EINVAL);
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 1);
  dbx_local_snapshots_free(v, n);
  dbx_local_leftovers_free(l, ln);
  assert_int_equal(dbx_local_snapshot_delete(f->d, "ck-r1-e5"), DBX_OK);
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 0);

  /* a snapshot keeps the labels of the sandbox it was made from (its owner
   * run), and its delete takes them with it */
  dbx_drv_label labels[] = {{"durabox.workflow_id", "wf-snap"}, {"durabox.run_id", "run-snap"}};
  dbx_local_source src = {.kind = DBX_LOCAL_SOURCE_EMPTY, .labels = labels, .nlabels = 2};
  assert_int_equal(dbx_local_sandbox_create(f->d, "snaplab", &src, NULL), DBX_OK);
  assert_int_equal(dbx_local_sandbox_checkpoint(f->d, "snaplab", "ckpt-1", &ref), DBX_OK);
  free(ref);
  char *owner = dbx_asprintf("%s/snapshots/.owner-ckpt-1", f->home);
  assert_int_equal(access(owner, F_OK), 0);
  assert_int_equal(dbx_local_sandbox_delete(f->d, "snaplab"), DBX_OK); /* the snapshot outlives it */
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_string_equal(v[0].name, "ckpt-1");
  assert_int_equal(v[0].nlabels, 2);
  assert_string_equal(v[0].labels[0].key, "durabox.workflow_id");
  assert_string_equal(v[0].labels[0].value, "wf-snap");
  assert_string_equal(v[0].labels[1].value, "run-snap");
  dbx_local_snapshots_free(v, n);
  assert_int_equal(dbx_local_snapshot_delete(f->d, "ckpt-1"), DBX_OK);
  assert_int_not_equal(access(owner, F_OK), 0);
  assert_int_equal(dbx_local_snapshots(f->d, &v, &n), DBX_OK);
  assert_int_equal(n, 0);
  free(owner);
  free(ws);
  free(dead);
  free(live);
  free(deadf);
}

int main(int argc, char **argv) {
  dbx_local_supervisor_main(argc, argv); /* this binary is re-executed as the supervisor */
  const struct CMUnitTest tests[] = {
      T(test_local_create_from_dir_and_adopt),   T(test_local_create_from_git_and_commit),
      T(test_local_checkpoint_and_restore),      T(test_local_exec_exit_codes_and_streams),
      T(test_local_exec_env_scrubbed),           T(test_local_exec_timeout_kills_group),
      T(test_local_exec_caps_and_totals),        T(test_local_exec_background_child_returns),
      T(test_local_exec_heredoc_and_cwd),        T(test_local_exec_long_command),
      T(test_local_file_escapes_refused),        T(test_local_file_symlink_inside_allowed),
      T(test_local_bytes_round_trip),            T(test_local_stop_start_delete),
      T(test_local_delete_kills_running_commands),
      T(test_local_delete_leaves_link_targets),
      T(test_local_delete_deep_tree),
      T(test_local_threads_distinct_sandboxes),
      T(test_local_detached_start_poll_read_collect),
      T(test_local_detached_keeps_head_and_tail),
      T(test_local_detached_timeout_and_kill),
      T(test_local_detached_survives_its_starter),
      T(test_local_detached_lost_supervisor),
      T(test_local_detached_child_killed_before_exec),
      T(test_local_exec_cancel_kills_group),
      T(test_local_labels_list_exists),
      T(test_local_restore_in_place),
      T(test_local_git_clone_commit_push),
      T(test_local_upload_download),
      T(test_local_pid_namespace_hides_host),
      T(test_local_home_outside_workspace),
      T(test_local_network_none),
      T(test_local_refuses_without_bwrap),
      T(test_local_git_commit_paths),
      T(test_local_host_fs_system),
      T(test_local_disk_full),
      T(test_local_leftovers_found_and_finished),
      T(test_local_snapshots_listed_and_parts_collected),
  };
  g_bwrap = 0;
  int failed = cmocka_run_group_tests_name("local_plain", tests, NULL, NULL);
  /* Probe: is bubblewrap usable on this machine? */
  char *home = dbx_test_tmpdir("dbx-probe");
  dbx_local *d = NULL;
  int usable = dbx_local_open(home, &d) == DBX_OK && dbx_local_bwrap_enabled(d);
  dbx_local_close(d);
  dbx_test_rmrf(home);
  free(home);
  if (usable) {
    g_bwrap = 1;
    failed += cmocka_run_group_tests_name("local_bwrap", tests, NULL, NULL);
  } else {
    printf("bwrap is not usable here: the bubblewrap group was skipped\n");
  }
  return failed;
}
