/* The local sandbox driver (see local.h for the contract and layout).
 *
 * Design: a sandbox is a folder; its lifecycle state is two small files in
 * meta/ written atomically (temp + fsync + rename), and `meta/source` is
 * written last, so its presence marks a complete create. Lifecycle changes of
 * one id hold an flock on locks/<id>. Child processes are started with
 * posix_spawn (no code of ours runs between fork and exec, so gRPC threads in
 * the caller are harmless), each in its own process group; the parent polls
 * both pipes and a pidfd, notices the shell's exit with waitid(WNOWAIT) (so
 * the group id cannot be reused), kills what is left of the group, drains the
 * pipes and only then reaps. File paths are resolved with openat2
 * RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS from the workspace root, so the
 * kernel refuses escapes at open time (no check-then-use gap); where openat2
 * is missing, a component walk with O_NOFOLLOW refuses every symlink.
 * Detached commands (dbx_local_exec_start) run under a supervisor: this same
 * executable re-executed with a marker argument that main() hands to
 * dbx_local_supervisor_main() first thing; its state lives in files (see
 * "detached commands" below). No library constructor runs anything.
 * Threading: the handle is immutable after setup; error text is kept per
 * thread (see dbx_local_errmsg). */
#define _GNU_SOURCE
#include "activities/local.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "activities/driver.h"
#include "base/alloc.h"
#include "base/failpoint.h"
#include "base/fs.h"
#include "base/util.h"

#define DEFAULT_CAP_BYTES ((size_t)1 << 20)
#define DEFAULT_READ_MAX ((size_t)64 << 20)
#define KILL_GRACE_MS 1000
#define ARGV_INLINE_MAX 65536 /* longer commands go through a script file */
#define SAFE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct dbx_local {
  char *home;
  char *bwrap; /* path of a usable bwrap, or NULL */
  char *self_exe; /* this executable's path (re-executed as the supervisor), or NULL */
  int use_bwrap;
  int net_ok; /* bwrap can also --unshare-net (network "none") */
  dbx_driver drv; /* dbx_local_driver(): {dbx_local_driver_ops, this, "local"} */
};

/* localdrv.c: the driver interface over this module's public functions. */
extern const dbx_driver_ops dbx_local_driver_ops;

dbx_driver *dbx_local_driver(dbx_local *d) { return d ? &d->drv : NULL; }

static _Thread_local struct {
  const dbx_local *owner;
  dbx_drv_err kind; /* the typed kind when the dbx_err alone does not tell */
  char msg[1024];
} tl_err;

static void vfail(const dbx_local *d, dbx_drv_err kind, const char *fmt, va_list ap) {
  vsnprintf(tl_err.msg, sizeof tl_err.msg, fmt, ap);
  tl_err.owner = d;
  tl_err.kind = kind;
}

/* A full disk (or quota) is told by the errno of the call that failed: every
 * site that reports a failed call ends its message with strerror(errno) (or
 * of the errno it saved), so an i/o failure whose message ends with the text
 * of ENOSPC or EDQUOT is DISK_FULL. */
static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), t = strlen(tail);
  return n >= t && strcmp(s + n - t, tail) == 0;
}

__attribute__((format(printf, 3, 4))) static dbx_err fail(const dbx_local *d, dbx_err e,
                                                          const char *fmt, ...) {
  int en = errno;
  va_list ap;
  va_start(ap, fmt);
  vfail(d, DBX_DRV_OK, fmt, ap);
  va_end(ap);
  if (e == DBX_EIO &&
      (ends_with(tl_err.msg, strerror(ENOSPC)) || ends_with(tl_err.msg, strerror(EDQUOT))))
    tl_err.kind = DBX_DRV_DISK_FULL;
  errno = en; /* callers may still read it */
  return e;
}

/* fail() with a typed kind for dbx_local_errkind(). */
__attribute__((format(printf, 4, 5))) static dbx_err failk(const dbx_local *d, dbx_err e,
                                                           dbx_drv_err kind, const char *fmt,
                                                           ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(d, kind, fmt, ap);
  va_end(ap);
  return e;
}

/* The message of the calling thread's last failed open. */
static _Thread_local char tl_open_msg[1024];

const char *dbx_local_errmsg(const dbx_local *d) {
  if (d == NULL) return tl_open_msg;
  return tl_err.owner == d ? tl_err.msg : "";
}

dbx_drv_err dbx_local_errkind(const dbx_local *d) {
  return (d != NULL && tl_err.owner == d) ? tl_err.kind : DBX_DRV_OK;
}

/* ---- small helpers ---- */

/* Sandbox, snapshot and command names: the driver interface's rule. */
static int valid_name(const char *s) { return dbx_drv_name_valid(s); }

/* mkdir -p with the sandbox tree's mode; 0 or -1 (errno set). */
static int mkdir_p(const char *path) { return dbx_fs_mkdirs(path, 0755) == DBX_OK ? 0 : -1; }

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static unsigned long long unique_suffix(void) {
  static _Atomic unsigned long long counter;
  return ((unsigned long long)dbx_mono_ns() << 12) ^ (unsigned long long)getpid() ^
         (++counter * 0x9E3779B97F4A7C15ull);
}

/* Write data to dirfd/name atomically: temp file, fsync, rename, fsync dir. */
static int write_atomic(int dirfd, const char *name, const void *data, size_t len) {
  char tmp[NAME_MAX + 1];
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 8; tries++) {
    snprintf(tmp, sizeof tmp, ".dbx-tmp-%llx", unique_suffix());
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 && errno != EEXIST) return -1;
  }
  if (fd < 0) return -1;
  const char *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) goto bad;
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) goto bad;
  if (close(fd) != 0) {
    fd = -1;
    goto bad;
  }
  fd = -1;
  if (renameat(dirfd, tmp, dirfd, name) != 0) goto bad;
  fsync(dirfd);
  return 0;
bad:;
  int saved = errno;
  if (fd >= 0) close(fd);
  unlinkat(dirfd, tmp, 0);
  errno = saved;
  return -1;
}

/* Read a small metadata file (NUL-terminated; free with free()).
 * Returns DBX_OK, DBX_ENOTFOUND (absent: *out NULL, no errmsg), DBX_ENOMEM,
 * or DBX_EIO with errmsg set. Callers tell absence from a failure: an
 * unreadable meta/source is no reason to start a sandbox over. */
static dbx_err read_meta(const dbx_local *d, const char *path, char **out) {
  dbx_err rc = dbx_fs_read_all(path, out, NULL);
  if (rc == DBX_OK || rc == DBX_ENOTFOUND || rc == DBX_ENOMEM) return rc;
  return fail(d, DBX_EIO, "cannot read '%s': %s", path, strerror(errno));
}

static int write_small(const char *dir, const char *name, const char *text) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  int rc = write_atomic(dfd, name, text, strlen(text));
  close(dfd);
  return rc;
}

/* ---- process runner ---- */

typedef struct {
  uint8_t *buf;
  size_t len, cap;
  uint64_t total;
} capture;

static int capture_read(int fd, capture *c) {
  /* Returns 1 while open, 0 at EOF. Reads until EAGAIN. */
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN ? 1 : 0;
    if (n == 0) return 0;
    c->total += (uint64_t)n;
    size_t keep = c->cap > c->len ? c->cap - c->len : 0;
    if (keep > (size_t)n) keep = (size_t)n;
    if (keep > 0) {
      memcpy(c->buf + c->len, chunk, keep);
      c->len += keep;
    }
  }
}

typedef struct {
  char *const *argv; /* argv[0] searched in the parent's PATH */
  char *const *envp;
  int cwd_fd; /* -1: inherit */
  int64_t timeout_ms;
  size_t cap[2];
  int (*cancelled)(void *ud); /* NULL: none */
  void *cancelled_ud;
} run_spec;

static void set_sigdefaults(posix_spawnattr_t *attr) {
  sigset_t all, none;
  sigemptyset(&none);
  sigemptyset(&all);
  for (int s = 1; s < 32; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaddset(&all, s);
  posix_spawnattr_setsigmask(attr, &none);
  posix_spawnattr_setsigdefault(attr, &all);
  posix_spawnattr_setpgroup(attr, 0);
  posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                     POSIX_SPAWN_SETSIGDEF);
}

static dbx_err run_proc(const dbx_local *d, const run_spec *s, dbx_local_exec_result *r) {
  dbx_err rc = DBX_OK;
  int outp[2] = {-1, -1}, errp[2] = {-1, -1}, pidfd = -1;
  capture cap[2] = {{0}, {0}};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  int fa_ok = 0, attr_ok = 0;
  pid_t pid = -1;
  int64_t start = dbx_mono_ns();

  memset(r, 0, sizeof *r);
  for (int i = 0; i < 2; i++) {
    cap[i].cap = s->cap[i];
    cap[i].buf = dbx_malloc(s->cap[i] + 1);
    if (cap[i].buf == NULL) {
      rc = fail(d, DBX_ENOMEM, "out of memory for output buffers");
      goto out;
    }
  }
  if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
    rc = fail(d, DBX_EIO, "pipe: %s", strerror(errno));
    goto out;
  }
  if (posix_spawn_file_actions_init(&fa) != 0) {
    rc = fail(d, DBX_ENOMEM, "posix_spawn_file_actions_init failed");
    goto out;
  }
  fa_ok = 1;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
  posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
  if (s->cwd_fd >= 0) posix_spawn_file_actions_addfchdir_np(&fa, s->cwd_fd);
  if (posix_spawnattr_init(&attr) != 0) {
    rc = fail(d, DBX_ENOMEM, "posix_spawnattr_init failed");
    goto out;
  }
  attr_ok = 1;
  set_sigdefaults(&attr);
  int e = posix_spawnp(&pid, s->argv[0], &fa, &attr, s->argv, s->envp);
  if (e != 0) {
    pid = -1;
    rc = fail(d, DBX_EIO, "cannot start %s: %s", s->argv[0], strerror(e));
    goto out;
  }
  close(outp[1]);
  close(errp[1]);
  outp[1] = errp[1] = -1;
  fcntl(outp[0], F_SETFL, O_NONBLOCK);
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

  int open_[2] = {1, 1};
  int fds[2] = {outp[0], errp[0]};
  int phase = 0; /* 0 running, 1 SIGTERM sent, 2 SIGKILL sent */
  int64_t deadline = s->timeout_ms > 0 ? start + s->timeout_ms * 1000000 : 0;
  int64_t kill_at = 0;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
      break; /* the shell is a zombie: its pid (= group id) stays reserved */
    int64_t now = dbx_mono_ns();
    if (deadline && phase == 0 && now >= deadline) {
      killpg(pid, SIGTERM);
      r->timed_out = 1;
      phase = 1;
      kill_at = now + (int64_t)KILL_GRACE_MS * 1000000;
    }
    if (s->cancelled && phase == 0 && s->cancelled(s->cancelled_ud)) {
      killpg(pid, SIGTERM);
      r->cancelled = 1;
      phase = 1;
      kill_at = now + (int64_t)KILL_GRACE_MS * 1000000;
    }
    if (phase == 1 && now >= kill_at) {
      killpg(pid, SIGKILL);
      phase = 2;
    }
    int64_t wait_ns = -1;
    if (phase == 0 && deadline) wait_ns = deadline - now;
    if (phase == 1) wait_ns = kill_at - now;
    if ((pidfd < 0 || (s->cancelled && phase == 0)) && (wait_ns < 0 || wait_ns > 50000000))
      wait_ns = 50000000; /* also the cancellation poll interval */
    int timeout = wait_ns < 0 ? -1 : (int)(wait_ns / 1000000) + 1;
    struct pollfd pf[3];
    int n = 0, idx[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
      if (open_[i]) {
        idx[i] = n;
        pf[n++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
      }
    if (pidfd >= 0) {
      pf[n++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
    }
    int pr = poll(pf, (nfds_t)n, timeout);
    if (pr < 0 && errno != EINTR) {
      rc = fail(d, DBX_EIO, "poll: %s", strerror(errno));
      killpg(pid, SIGKILL);
      break;
    }
    for (int i = 0; pr > 0 && i < 2; i++)
      if (idx[i] >= 0 && (pf[idx[i]].revents & (POLLIN | POLLHUP | POLLERR)))
        open_[i] = capture_read(fds[i], &cap[i]);
  }
  /* The shell has exited: stop the rest of its group, take what the pipes
   * hold, then reap. */
  killpg(pid, SIGKILL);
  for (int i = 0; i < 2; i++)
    if (open_[i]) capture_read(fds[i], &cap[i]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pid = -1;
  if (rc != DBX_OK) goto out;
  if (WIFEXITED(status)) {
    r->exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r->signal = WTERMSIG(status);
    r->exit_code = 128 + r->signal;
  }
  r->duration_ms = (dbx_mono_ns() - start) / 1000000;
  for (int i = 0; i < 2; i++) cap[i].buf[cap[i].len] = '\0';
  r->stdout_buf = cap[0].buf;
  r->stdout_len = cap[0].len;
  r->stdout_total = cap[0].total;
  r->stdout_truncated = cap[0].total > cap[0].len;
  r->stdout_head_len = cap[0].len;
  r->stderr_buf = cap[1].buf;
  r->stderr_len = cap[1].len;
  r->stderr_total = cap[1].total;
  r->stderr_truncated = cap[1].total > cap[1].len;
  r->stderr_head_len = cap[1].len;
  cap[0].buf = cap[1].buf = NULL;
out:
  if (pid > 0) { /* only on an internal failure after spawn */
    killpg(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  for (int i = 0; i < 2; i++) {
    if (outp[i] >= 0) close(outp[i]);
    if (errp[i] >= 0) close(errp[i]);
    free(cap[i].buf);
  }
  if (pidfd >= 0) close(pidfd);
  if (fa_ok) posix_spawn_file_actions_destroy(&fa);
  if (attr_ok) posix_spawnattr_destroy(&attr);
  return rc;
}

void dbx_local_exec_result_cleanup(dbx_local_exec_result *r) {
  if (r == NULL) return;
  free(r->stdout_buf);
  free(r->stderr_buf);
  memset(r, 0, sizeof *r);
}

/* The typed kind of a failed git (or cp, rm) from what it wrote to stderr,
 * for the failures no retry mends; DBX_DRV_OK for the others (unreachable,
 * refused, killed: worth a retry). git 2.x's words, in the C locale the
 * tools run in. */
static dbx_drv_err tool_kind(const char *err) {
  if (err == NULL) return DBX_DRV_OK;
  if (strstr(err, "No space left on device") || strstr(err, "Disk quota exceeded"))
    return DBX_DRV_DISK_FULL;
  if (strstr(err, "not a git repository") || strstr(err, "does not appear to be a git repository"))
    return DBX_DRV_NOT_A_REPO;
  if (strstr(err, "Repository not found") ||
      (strstr(err, "repository '") && (strstr(err, "' does not exist") || strstr(err, "' not found"))))
    return DBX_DRV_REPO_NOT_FOUND;
  if (strstr(err, "Authentication failed") || strstr(err, "could not read Username") ||
      strstr(err, "could not read Password") || strstr(err, "returned error: 401") ||
      strstr(err, "returned error: 403"))
    return DBX_DRV_AUTH;
  if (strstr(err, "invalid reference: ") || strstr(err, "did not match any file(s) known to git") ||
      strstr(err, "not found in upstream") || strstr(err, "unknown revision") ||
      strstr(err, "couldn't find remote ref") ||
      (strstr(err, "src refspec") && strstr(err, "does not match any")))
    return DBX_DRV_REF_NOT_FOUND;
  return DBX_DRV_OK;
}

/* Before cloning loc: a local repository (an absolute path or file:// URL)
 * that does not exist is REPO_NOT_FOUND, a folder that is no repository
 * NOT_A_REPO (git itself says "does not exist" of both); DBX_DRV_OK for
 * repositories and for what is not local (git answers for those). */
static dbx_drv_err local_repo_kind(const char *loc) {
  if (strncmp(loc, "file://", 7) == 0) loc += 7;
  if (loc[0] != '/') return DBX_DRV_OK;
  struct stat st;
  if (stat(loc, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? DBX_DRV_REPO_NOT_FOUND
                                                                        : DBX_DRV_OK;
  if (!S_ISDIR(st.st_mode)) return DBX_DRV_OK; /* a bundle file: git decides */
  char *dotgit = dbx_asprintf("%s/.git", loc), *head = dbx_asprintf("%s/HEAD", loc),
       *objs = dbx_asprintf("%s/objects", loc);
  int repo = !dotgit || !head || !objs || access(dotgit, F_OK) == 0 ||
             (access(head, F_OK) == 0 && stat(objs, &st) == 0 && S_ISDIR(st.st_mode));
  free(dotgit);
  free(head);
  free(objs);
  return repo ? DBX_DRV_OK : DBX_DRV_NOT_A_REPO;
}

/* A failed clone's precheck (local_repo_kind's kind k) as a failure. */
static dbx_err fail_repo(const dbx_local *d, dbx_drv_err k, const char *what, const char *loc) {
  if (k == DBX_DRV_REPO_NOT_FOUND)
    return failk(d, DBX_EIO, k, "%s failed: repository '%s' does not exist", what, loc);
  return failk(d, DBX_EIO, k, "%s failed: '%s' is not a git repository", what, loc);
}

/* Run a host tool (cp, git clone, rm) outside the sandbox with a fixed small
 * environment (no caller secrets, no git prompts); stderr goes to errmsg.
 * src (may be NULL) lends its cancellation poll. */
/* The environment of git inside a sandbox: no system or global config, no
 * prompts (a missing credential fails instead of hanging). */
static const char *const git_env[] = {"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
                                      "GIT_TERMINAL_PROMPT=0", NULL};
#define GIT_SAFE "git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"

/* Credentials (driver.h dbx_drv_git_cred) reach git through a credential
 * helper given on its command line: the first -c empties the helper list
 * (so no helper of the repository's own config, which sandbox code may have
 * written, ever sees them), the second is a shell function that answers a
 * "get" with the username and password from git's own process environment
 * (DBX_GIT_USERNAME / DBX_GIT_PASSWORD) and only when git asks for the host
 * of the URL the operation named (DBX_GIT_HOST: a url.insteadOf rewrite
 * elsewhere gets nothing). core.askPass is emptied so no program the
 * repository names runs with that environment. Nothing is written to the
 * workspace or HOME; the argv holds no secret; the environment strings are
 * wiped after the call. */
#define GIT_CRED_ARGS                                                                           \
  "-c", "credential.helper=", "-c",                                                             \
      "credential.helper=!f() { test \"$1\" = get || exit 0; h=; while IFS= read -r l; do "    \
      "case \"$l\" in host=*) h=${l#host=};; esac; done; "                                      \
      "[ -n \"$DBX_GIT_HOST\" ] && [ \"$h\" = \"$DBX_GIT_HOST\" ] || exit 0; "                  \
      "printf 'username=%s\\npassword=%s\\n' \"$DBX_GIT_USERNAME\" \"$DBX_GIT_PASSWORD\"; }; f", \
      "-c", "core.askPass=", "-c", "credential.interactive=false"

typedef struct {
  char *v[12]; /* the base environment, then the three credential entries; NULL-terminated */
  int n, base;
} git_envv;

/* The host[:port] of an http(s) URL into host (cap bytes); 0 if url is no
 * http(s) URL or has no host. */
static int url_host(const char *url, char *host, size_t cap) {
  const char *p = strncmp(url, "https://", 8) == 0 ? url + 8
                  : strncmp(url, "http://", 7) == 0 ? url + 7 : NULL;
  if (p == NULL) return 0;
  size_t n = strcspn(p, "/?#");
  const char *at = memchr(p, '@', n);
  if (at) n -= (size_t)(at + 1 - p), p = at + 1;
  if (n == 0 || n >= cap) return 0;
  memcpy(host, p, n);
  host[n] = '\0';
  return 1;
}

/* The environment of a git step: git_env, and with cred the helper's three
 * entries for the host of url. DBX_EINVAL when cred is given but url is no
 * http(s) URL (credentials go to a host the operation names, never to a
 * remote name the repository's config resolves). */
static dbx_err git_envv_make_on(const dbx_local *d, const char *const *base,
                                const dbx_drv_git_cred *cred, const char *url, git_envv *e) {
  memset(e, 0, sizeof *e);
  for (; base[e->n]; e->n++) e->v[e->n] = (char *)base[e->n];
  e->base = e->n;
  if (cred == NULL) return DBX_OK;
  char host[256];
  if (cred->password == NULL || *cred->password == '\0')
    return fail(d, DBX_EINVAL, "git credentials without a password (token)");
  if (!url_host(url, host, sizeof host))
    return fail(d, DBX_EINVAL, "git credentials need the remote's http(s) URL, not '%.200s'", url);
  const char *u = cred->username && *cred->username ? cred->username : "x-access-token";
  e->v[e->n++] = dbx_asprintf("DBX_GIT_HOST=%s", host);
  e->v[e->n++] = dbx_asprintf("DBX_GIT_USERNAME=%s", u);
  e->v[e->n++] = dbx_asprintf("DBX_GIT_PASSWORD=%s", cred->password);
  for (int i = e->base; i < e->n; i++)
    if (e->v[i] == NULL) return DBX_ENOMEM;
  return DBX_OK;
}

/* Wipe and free the credential entries of e, and scrub the password from
 * this thread's message (git does not print it; this makes sure). */
static void git_envv_clear(git_envv *e, const dbx_drv_git_cred *cred) {
  for (int i = e->base; i < e->n; i++)
    if (e->v[i]) {
      memset(e->v[i], 0, strlen(e->v[i]));
      free(e->v[i]);
    }
  const char *p = cred ? cred->password : NULL;
  size_t n = p ? strlen(p) : 0;
  for (char *m = n ? strstr(tl_err.msg, p) : NULL; m; m = strstr(m, p)) memset(m, '*', n);
  memset(e, 0, sizeof *e);
}

static dbx_err git_envv_make(dbx_local *d, const dbx_drv_git_cred *cred, const char *url,
                             git_envv *e) {
  return git_envv_make_on(d, git_env, cred, url, e);
}

/* The environment of a tool run on the host for a create (copy, clone). */
static const char *const host_env[] = {"PATH=" SAFE_PATH, "LANG=C.UTF-8", "GIT_TERMINAL_PROMPT=0",
                                       "GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent", NULL};

/* run_host_src with envp (NULL: host_env). */
static dbx_err run_host_env(const dbx_local *d, char *const *argv, const char *what,
                            const dbx_local_source *src, char *const *envp);

static dbx_err run_host_src(const dbx_local *d, char *const *argv, const char *what,
                            const dbx_local_source *src) {
  return run_host_env(d, argv, what, src, NULL);
}

static dbx_err run_host_env(const dbx_local *d, char *const *argv, const char *what,
                            const dbx_local_source *src, char *const *envp) {
  run_spec s = {.argv = argv, .envp = envp ? envp : (char *const *)host_env, .cwd_fd = -1,
                .cap = {4096, 4096}};
  if (src) s.cancelled = src->cancelled, s.cancelled_ud = src->cancelled_ud;
  dbx_local_exec_result r;
  dbx_err rc = run_proc(d, &s, &r);
  if (rc != DBX_OK) return rc;
  if (r.cancelled)
    rc = fail(d, DBX_ECANCELED, "%s: cancelled", what);
  else if (r.exit_code != 0)
    rc = failk(d, DBX_EIO, tool_kind((const char *)r.stderr_buf), "%s failed (exit %d): %.600s",
               what, r.exit_code, (const char *)r.stderr_buf);
  dbx_local_exec_result_cleanup(&r);
  return rc;
}

static dbx_err run_host(const dbx_local *d, char *const *argv, const char *what) {
  return run_host_src(d, argv, what, NULL);
}

/* Remove a sandbox tree with rm -rf, not dbx_fs_remove_tree (base/fs.h).
 * The trees are written by sandboxed commands, which may outlive their exec
 * and keep changing them while we remove. Both walk by descriptor, so a
 * directory swapped for a link mid-walk cannot lead out of the tree; but the
 * base helper holds one descriptor per level, so a command that nests
 * directories deeper than the open-file limit could make its sandbox
 * undeletable, while rm's walk has no depth bound. errmsg is written only on
 * failure. */
static dbx_err rmrf(const dbx_local *d, const char *path) {
  char *argv[] = {"rm", "-rf", "--", (char *)path, NULL};
  return run_host(d, argv, "rm -rf");
}

/* ---- open / close ---- */

static char *bwrap_find(void) {
  static const char *cands[] = {"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"};
  for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++)
    if (access(cands[i], X_OK) == 0) return dbx_strdup(cands[i]);
  return NULL;
}

/* Run bwrap once with the kinds of namespaces and mounts exec uses (with_net:
 * also --unshare-net). 1 when /bin/true ran; else 0 with bwrap's words (or
 * the spawn failure) in why. */
static int bwrap_probe(dbx_local *d, int with_net, char *why, size_t whylen) {
  char *argv[20];
  size_t n = 0;
  argv[n++] = d->bwrap;
  argv[n++] = "--die-with-parent";
  argv[n++] = "--unshare-pid";
  if (with_net) argv[n++] = "--unshare-net";
  char *rest[] = {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                  "--tmpfs", d->home, "--", "/bin/true", NULL};
  memcpy(&argv[n], rest, sizeof rest);
  static char *const envp[] = {"PATH=" SAFE_PATH, NULL};
  run_spec sp = {.argv = argv, .envp = envp, .cwd_fd = -1, .timeout_ms = 10000,
                 .cap = {1024, 1024}};
  dbx_local_exec_result r;
  int ok = 0;
  if (run_proc(d, &sp, &r) != DBX_OK) {
    snprintf(why, whylen, "%.200s cannot be run: %.200s", d->bwrap, dbx_local_errmsg(d));
    dbx_local_exec_result_cleanup(&r);
    return 0;
  }
  if (r.exit_code == 0 && !r.timed_out) {
    ok = 1;
  } else {
    size_t el = r.stderr_len;
    while (el > 0 && (r.stderr_buf[el - 1] == '\n' || r.stderr_buf[el - 1] == '\r')) el--;
    snprintf(why, whylen, "%.150s exits %d%s%.*s", d->bwrap, r.exit_code, el ? ": " : "",
             (int)(el > 300 ? 300 : el), r.stderr_buf ? (const char *)r.stderr_buf : "");
  }
  dbx_local_exec_result_cleanup(&r);
  return ok;
}

/* Find and probe bwrap; without a usable one, refuse unless unsandboxed. */
static dbx_err bwrap_setup(dbx_local *d, const char *path, int unsandboxed) {
  char why[512] = "";
  d->bwrap = path && *path ? (access(path, X_OK) == 0 ? dbx_strdup(path) : NULL) : bwrap_find();
  if (d->bwrap == NULL)
    snprintf(why, sizeof why, "%s not found", path && *path ? path : "no bwrap program");
  if (d->bwrap != NULL && bwrap_probe(d, 1, why, sizeof why)) {
    d->net_ok = 1;
  } else if (d->bwrap == NULL || !bwrap_probe(d, 0, why, sizeof why)) {
    free(d->bwrap);
    d->bwrap = NULL;
  }
  d->use_bwrap = d->bwrap != NULL && !unsandboxed;
  if (d->bwrap == NULL && !unsandboxed)
    return fail(NULL, DBX_EUNSUPPORTED,
                "bubblewrap is not usable here: %s; install bubblewrap (and allow user "
                "namespaces), or set " DBX_LOCAL_UNSANDBOXED_ENV "=1 to run commands directly "
                "on this host", why);
  if (!d->use_bwrap)
    DBX_INFO("local", "commands run directly on this host, unsandboxed (%s)",
             d->bwrap ? "opted out" : why);
  return DBX_OK;
}

dbx_err dbx_local_open(const char *home, dbx_local **out) {
  return dbx_local_open_with(home, NULL, out);
}

dbx_err dbx_local_open_with(const char *home, const dbx_local_open_opts *o, dbx_local **out) {
  dbx_err rc = DBX_OK;
  dbx_local *d = NULL;
  *out = NULL;
  tl_open_msg[0] = '\0';
  tl_err.owner = NULL;
  tl_err.msg[0] = '\0';
  d = dbx_calloc(1, sizeof *d);
  if (d == NULL) return DBX_ENOMEM;
  if (home == NULL || *home == '\0') home = getenv("DURABOX_HOME");
  if (home != NULL && *home != '\0') {
    d->home = dbx_strdup(home);
  } else {
    const char *h = getenv("HOME");
    if (h == NULL || *h != '/') {
      rc = fail(NULL, DBX_EINVAL, "no DURABOX_HOME and no HOME");
      goto out;
    }
    d->home = dbx_asprintf("%s/.local/share/durabox", h);
  }
  if (d->home == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  if (d->home[0] != '/') { /* bind mounts and HOME need an absolute path */
    char *abs = realpath(d->home, NULL);
    if (abs == NULL && mkdir_p(d->home) == 0) abs = realpath(d->home, NULL);
    if (abs == NULL) {
      rc = fail(NULL, DBX_EIO, "cannot resolve home '%s': %s", d->home, strerror(errno));
      goto out;
    }
    free(d->home);
    d->home = abs;
  }
  static const char *subs[] = {"", "/sandboxes", "/snapshots", "/locks", "/trash"};
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    char *p = dbx_asprintf("%s%s", d->home, subs[i]);
    int ok = p != NULL && mkdir_p(p) == 0;
    free(p);
    if (!ok) {
      rc = fail(NULL, DBX_EIO, "cannot create '%s%s': %s", d->home, subs[i], strerror(errno));
      goto out;
    }
  }
  char exe[PATH_MAX];
  ssize_t xl = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (xl > 0) {
    exe[xl] = '\0';
    d->self_exe = dbx_strdup(exe);
  }
  const char *env_opt = getenv(DBX_LOCAL_UNSANDBOXED_ENV);
  int unsandboxed = (o && o->unsandboxed) || (env_opt && strcmp(env_opt, "1") == 0);
  if ((rc = bwrap_setup(d, o ? o->bwrap_path : NULL, unsandboxed)) != DBX_OK) goto out;
  d->drv = (dbx_driver){.ops = &dbx_local_driver_ops, .self = d, .name = "local"};
  tl_err.owner = NULL;
out:
  if (rc != DBX_OK) {
    snprintf(tl_open_msg, sizeof tl_open_msg, "%s",
             tl_err.owner == NULL && tl_err.msg[0] ? tl_err.msg : dbx_strerror(rc));
    dbx_local_close(d);
    return rc;
  }
  *out = d;
  return DBX_OK;
}

void dbx_local_close(dbx_local *d) {
  if (d == NULL) return;
  if (tl_err.owner == d) tl_err.owner = NULL;
  free(d->home);
  free(d->bwrap);
  free(d->self_exe);
  free(d);
}

int dbx_local_bwrap_enabled(const dbx_local *d) { return d->use_bwrap; }

const char *dbx_local_home(const dbx_local *d) { return d->home; }

dbx_err dbx_local_bwrap_set(dbx_local *d, int on) {
  if (on && d->bwrap == NULL) return fail(d, DBX_EUNSUPPORTED, "bwrap is not usable here");
  d->use_bwrap = on ? 1 : 0;
  return DBX_OK;
}

/* ---- sandbox lifecycle ---- */

static char *sb_dir(const dbx_local *d, const char *id) {
  return dbx_asprintf("%s/sandboxes/%s", d->home, id);
}

char *dbx_local_sandbox_path(const dbx_local *d, const char *id) {
  return valid_name(id) ? dbx_asprintf("%s/sandboxes/%s/workspace", d->home, id) : NULL;
}

/* flock on locks/<id>; returns the fd (close to unlock) or -1. */
static int lock_id(const dbx_local *d, const char *id) {
  char *p = dbx_asprintf("%s/locks/%s", d->home, id);
  if (p == NULL) return -1;
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(p);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

/* meta/source: kind, location, ref lines, then one line per setting that
 * is not the default ("network none", "host_fs system"), so sandboxes made
 * before the settings existed compare equal to ones made with the defaults. */
static char *source_text(const dbx_local_source *src) {
  static const char *kinds[] = {"empty", "dir", "git", "snapshot"};
  return dbx_asprintf("%s\n%s\n%s\n%s%s", kinds[src->kind],
                      src->kind == DBX_LOCAL_SOURCE_EMPTY ? "" : src->location,
                      src->kind == DBX_LOCAL_SOURCE_GIT && src->ref ? src->ref : "",
                      src->network == DBX_DRV_NET_NONE ? "network none\n" : "",
                      src->host_fs == DBX_DRV_FS_SYSTEM ? "host_fs system\n" : "");
}

typedef struct {
  int net_none;  /* network "none" */
  int fs_system; /* host_fs "system" */
} sb_settings;

/* The settings of sandbox id from its meta (read per command): the lines
 * after the first three. Unreadable: the defaults. */
static sb_settings sb_settings_read(const dbx_local *d, const char *id) {
  char *p = dbx_asprintf("%s/sandboxes/%s/meta/source", d->home, id), *text = NULL;
  sb_settings st = {0};
  if (p != NULL && read_meta(d, p, &text) == DBX_OK) {
    char *line = text;
    for (int i = 0; i < 3 && line; i++) {
      line = strchr(line, '\n');
      if (line) line++;
    }
    while (line && *line) {
      char *nl = strchr(line, '\n');
      size_t n = nl ? (size_t)(nl - line) : strlen(line);
      if (n == 12 && strncmp(line, "network none", n) == 0) st.net_none = 1;
      if (n == 14 && strncmp(line, "host_fs system", n) == 0) st.fs_system = 1;
      line = nl ? nl + 1 : NULL;
    }
  }
  free(p);
  free(text);
  return st;
}

/* meta/labels: one "key=value" line per label (keys hold no '=', values no
 * control characters: dbx_drv_label_valid). */
static char *labels_text(const dbx_local_source *src) {
  size_t len = 1;
  for (size_t i = 0; i < src->nlabels; i++)
    len += strlen(src->labels[i].key) + strlen(src->labels[i].value) + 2;
  char *t = dbx_malloc(len), *p = t;
  if (t == NULL) return NULL;
  for (size_t i = 0; i < src->nlabels; i++)
    p += sprintf(p, "%s=%s\n", src->labels[i].key, src->labels[i].value);
  *p = '\0';
  return t;
}

/* meta/env: the entries, each ended by a NUL; meta/limits: "memory_mib N\n".
 * Each only when there is something to keep. 0 or -1 (errno). */
static int write_env_limits(const char *meta, const dbx_local_source *src) {
  size_t len = 0;
  for (size_t i = 0; src->env && src->env[i]; i++) len += strlen(src->env[i]) + 1;
  if (len > 0) {
    char *buf = dbx_malloc(len), *p = buf;
    if (buf == NULL) return -1;
    for (size_t i = 0; src->env[i]; i++) {
      size_t l = strlen(src->env[i]) + 1;
      memcpy(p, src->env[i], l);
      p += l;
    }
    int dfd = open(meta, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd >= 0 ? write_atomic(dfd, "env", buf, len) : -1;
    if (dfd >= 0) close(dfd);
    free(buf);
    if (rc != 0) return -1;
  }
  if (src->memory_mib > 0) {
    char t[64];
    snprintf(t, sizeof t, "memory_mib %llu\n", (unsigned long long)src->memory_mib);
    if (write_small(meta, "limits", t) != 0) return -1;
  }
  return 0;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

dbx_err dbx_local_sandbox_create(dbx_local *d, const char *id, const dbx_local_source *src,
                                 int *adopted) {
  dbx_err rc = DBX_OK;
  int lockfd = -1, fresh = 0;
  char *dir = NULL, *meta = NULL, *srcfile = NULL, *want = NULL, *have = NULL, *tmp = NULL,
       *ws = NULL, *from = NULL, *labels = NULL;
  if (adopted) *adopted = 0;
  if (!valid_name(id)) return fail(d, DBX_EINVAL, "invalid sandbox id '%s'", id ? id : "(null)");
  if (src == NULL || src->kind > DBX_LOCAL_SOURCE_SNAPSHOT ||
      (src->kind != DBX_LOCAL_SOURCE_EMPTY && (src->location == NULL || !*src->location)))
    return fail(d, DBX_EINVAL, "sandbox '%s': source needs a location", id);
  if (src->kind == DBX_LOCAL_SOURCE_SNAPSHOT && !valid_name(src->location))
    return fail(d, DBX_EINVAL, "invalid snapshot ref '%s'", src->location);
  for (size_t i = 0; i < src->nlabels; i++)
    if (!dbx_drv_label_valid(&src->labels[i]))
      return fail(d, DBX_EINVAL, "sandbox '%s': label %zu is not a valid key and value", id, i);
  for (size_t i = 0; src->env && src->env[i]; i++)
    if (src->env[i][0] == '=' || strchr(src->env[i], '=') == NULL)
      return fail(d, DBX_EINVAL, "sandbox '%s': environment entry %zu is not NAME=value", id, i);
  if (src->network != DBX_DRV_NET_HOST && src->network != DBX_DRV_NET_NONE)
    return fail(d, DBX_EINVAL, "sandbox '%s': unknown network setting %d", id, (int)src->network);
  if (src->host_fs != DBX_DRV_FS_HOST && src->host_fs != DBX_DRV_FS_SYSTEM)
    return fail(d, DBX_EINVAL, "sandbox '%s': unknown host_fs setting %d", id, (int)src->host_fs);
  if (src->host_fs == DBX_DRV_FS_SYSTEM && !d->use_bwrap)
    return fail(d, DBX_EUNSUPPORTED,
                "sandbox '%s': host_fs \"system\" needs bubblewrap, and commands here run "
                "unsandboxed", id);
  if (src->network == DBX_DRV_NET_NONE && !(d->use_bwrap && d->net_ok))
    return fail(d, DBX_EUNSUPPORTED,
                "sandbox '%s': network \"none\" needs bubblewrap with network namespaces, "
                "and commands here run %s", id,
                d->use_bwrap ? "under a bubblewrap that cannot unshare the network"
                             : "unsandboxed");
  dir = sb_dir(d, id);
  meta = dbx_asprintf("%s/sandboxes/%s/meta", d->home, id);
  srcfile = dbx_asprintf("%s/sandboxes/%s/meta/source", d->home, id);
  want = source_text(src);
  tmp = dbx_asprintf("%s/sandboxes/%s/workspace.tmp", d->home, id);
  ws = dbx_local_sandbox_path(d, id);
  if (!dir || !meta || !srcfile || !want || !tmp || !ws) {
    rc = fail(d, DBX_ENOMEM, "out of memory");
    goto out;
  }
  lockfd = lock_id(d, id);
  if (lockfd < 0) {
    rc = fail(d, DBX_EIO, "cannot lock sandbox '%s': %s", id, strerror(errno));
    goto out;
  }
  rc = read_meta(d, srcfile, &have);
  if (rc == DBX_ENOTFOUND) {
    rc = DBX_OK;
  } else if (rc != DBX_OK) {
    goto out;
  } else {
    if (strcmp(have, want) == 0) {
      if (adopted) *adopted = 1;
    } else {
      rc = fail(d, DBX_EEXIST, "sandbox '%s' exists with another source or settings (network, host_fs)", id);
    }
    goto out;
  }
  /* Nothing, or a partial create: start over. */
  if (access(dir, F_OK) == 0) {
    rc = rmrf(d, dir);
    if (rc != DBX_OK) goto out;
  }
  fresh = 1; /* from here a failure removes what this call made */
  if (mkdir_p(meta) != 0) {
    rc = fail(d, DBX_EIO, "cannot create '%s': %s", meta, strerror(errno));
    goto out;
  }
  switch (src->kind) {
  case DBX_LOCAL_SOURCE_EMPTY:
    if (mkdir(tmp, 0755) != 0) rc = fail(d, DBX_EIO, "mkdir '%s': %s", tmp, strerror(errno));
    break;
  case DBX_LOCAL_SOURCE_DIR:
  case DBX_LOCAL_SOURCE_SNAPSHOT:
    from = src->kind == DBX_LOCAL_SOURCE_DIR
               ? dbx_asprintf("%s/.", src->location)
               : dbx_asprintf("%s/snapshots/%s/.", d->home, src->location);
    if (from == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    if (!is_dir(from)) {
      struct stat sst;
      int there = src->kind == DBX_LOCAL_SOURCE_DIR && stat(src->location, &sst) == 0;
      rc = failk(d, DBX_ENOTFOUND, DBX_DRV_SOURCE_NOT_FOUND, "%s '%s' %s",
                 src->kind == DBX_LOCAL_SOURCE_DIR ? "source directory" : "snapshot", src->location,
                 there ? "is not a directory" : "not found");
      break;
    }
    if (mkdir(tmp, 0755) != 0) {
      rc = fail(d, DBX_EIO, "mkdir '%s': %s", tmp, strerror(errno));
      break;
    }
    {
      char *argv[] = {"cp", "-a", "--reflink=auto", "--", from, tmp, NULL};
      rc = run_host_src(d, argv, "copying the source", src);
    }
    break;
  case DBX_LOCAL_SOURCE_GIT: {
    /* workspace.tmp is fresh (the sandbox dir was cleared above). */
    dbx_drv_err rk = local_repo_kind(src->location);
    if (rk != DBX_DRV_OK) {
      rc = fail_repo(d, rk, "git clone", src->location);
      break;
    }
    char *argv[] = {"git", "clone", "-q", "--", (char *)src->location, tmp, NULL};
    char *argv_c[] = {"git", GIT_CRED_ARGS, "clone", "-q", "--", (char *)src->location, tmp, NULL};
    git_envv ge;
    rc = git_envv_make_on(d, host_env, src->git_cred, src->location, &ge);
    if (rc == DBX_OK)
      rc = run_host_env(d, src->git_cred ? argv_c : argv, "git clone", src, ge.v);
    git_envv_clear(&ge, src->git_cred);
    if (rc == DBX_OK && src->ref && *src->ref) {
      char *co[] = {"git", "-C", tmp, "-c", "advice.detachedHead=false", "checkout", "-q",
                    (char *)src->ref, "--", NULL};
      rc = run_host_src(d, co, "git checkout", src);
    }
    break;
  }
  }
  if (rc != DBX_OK) goto out;
  if (rename(tmp, ws) != 0) {
    rc = fail(d, DBX_EIO, "rename '%s': %s", tmp, strerror(errno));
    goto out;
  }
  labels = labels_text(src);
  if (labels == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  /* meta/labels only when there are labels (its absence means none); the
   * same for meta/env and meta/limits */
  if ((src->nlabels > 0 && write_small(meta, "labels", labels) != 0) ||
      write_env_limits(meta, src) != 0 ||
      write_small(meta, "state", "running\n") != 0 ||
      write_small(meta, "source", want) != 0) {
    rc = fail(d, DBX_EIO, "cannot write metadata of '%s': %s", id, strerror(errno));
    goto out;
  }
  fsync_path(dir);
out:
  /* a failed or cancelled create leaves nothing (errmsg keeps the cause:
   * rmrf only writes it when it fails itself) */
  if (rc != DBX_OK && fresh) rmrf(d, dir);
  if (lockfd >= 0) close(lockfd);
  free(dir);
  free(meta);
  free(srcfile);
  free(want);
  free(have);
  free(tmp);
  free(ws);
  free(from);
  free(labels);
  return rc;
}

/* Check that id names a complete sandbox; with need_running, that it runs. */
static dbx_err sb_check(const dbx_local *d, const char *id, int need_running) {
  if (!valid_name(id)) return fail(d, DBX_EINVAL, "invalid sandbox id '%s'", id ? id : "(null)");
  char *p = dbx_asprintf("%s/sandboxes/%s/meta/source", d->home, id);
  char *st = dbx_asprintf("%s/sandboxes/%s/meta/state", d->home, id);
  dbx_err rc = DBX_OK;
  char *state = NULL;
  if (p == NULL || st == NULL) {
    rc = DBX_ENOMEM;
  } else if (access(p, F_OK) != 0) {
    rc = failk(d, DBX_ENOTFOUND, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found", id);
  } else if (need_running) {
    rc = read_meta(d, st, &state);
    if (rc == DBX_ENOTFOUND || (rc == DBX_OK && strcmp(state, "running\n") != 0))
      rc = fail(d, DBX_ESTATE, "sandbox '%s' is stopped: start it first", id);
  }
  free(p);
  free(st);
  free(state);
  return rc;
}

static dbx_err set_state(dbx_local *d, const char *id, const char *state) {
  dbx_err rc = sb_check(d, id, 0);
  if (rc != DBX_OK) return rc;
  char *meta = dbx_asprintf("%s/sandboxes/%s/meta", d->home, id);
  if (meta == NULL) return DBX_ENOMEM;
  if (write_small(meta, "state", state) != 0)
    rc = fail(d, DBX_EIO, "cannot write state of '%s': %s", id, strerror(errno));
  free(meta);
  return rc;
}

dbx_err dbx_local_sandbox_stop(dbx_local *d, const char *id) {
  return set_state(d, id, "stopped\n");
}

dbx_err dbx_local_sandbox_start(dbx_local *d, const char *id) {
  return set_state(d, id, "running\n");
}

/* Move path to trash/ (atomic disappearance) and remove it there. */
static dbx_err remove_tree(dbx_local *d, const char *path, const char *what) {
  if (access(path, F_OK) != 0) return DBX_OK;
  char *t = dbx_asprintf("%s/trash/%s.%llx", d->home, what, unique_suffix());
  if (t == NULL) return DBX_ENOMEM;
  dbx_err rc = DBX_OK;
  if (rename(path, t) != 0) {
    if (errno != ENOENT) rc = fail(d, DBX_EIO, "cannot remove '%s': %s", path, strerror(errno));
  } else {
    /* an interrupt from here leaves trash/<what>.<hex>: the tombstone that
     * dbx_local_leftovers finds and dbx_local_leftover_remove finishes */
    DBX_FAILPOINT("local.delete.after_rename");
    rc = rmrf(d, t);
  }
  free(t);
  return rc;
}

static void stop_commands(dbx_local *d, const char *sbdir);

dbx_err dbx_local_sandbox_delete(dbx_local *d, const char *id) {
  if (!valid_name(id)) return fail(d, DBX_EINVAL, "invalid sandbox id '%s'", id ? id : "(null)");
  int lockfd = lock_id(d, id);
  if (lockfd < 0) return fail(d, DBX_EIO, "cannot lock sandbox '%s': %s", id, strerror(errno));
  char *dir = sb_dir(d, id);
  if (dir) stop_commands(d, dir); /* nothing of a deleted sandbox runs on */
  dbx_err rc = dir ? remove_tree(d, dir, id) : DBX_ENOMEM;
  free(dir);
  close(lockfd);
  return rc;
}

dbx_err dbx_local_snapshot_delete(dbx_local *d, const char *ref) {
  if (!valid_name(ref)) return fail(d, DBX_EINVAL, "invalid snapshot ref '%s'", ref ? ref : "(null)");
  char *dir = dbx_asprintf("%s/snapshots/%s", d->home, ref);
  char *owner = dbx_asprintf("%s/snapshots/.owner-%s", d->home, ref);
  dbx_err rc = dir && owner ? DBX_OK : DBX_ENOMEM;
  /* the owner first: a delete that dies between leaves a snapshot with no
   * owner (listed as such), never an owner with no snapshot */
  if (rc == DBX_OK && unlink(owner) != 0 && errno != ENOENT)
    rc = fail(d, DBX_EIO, "cannot remove '%s': %s", owner, strerror(errno));
  if (rc == DBX_OK) rc = remove_tree(d, dir, ref);
  free(dir);
  free(owner);
  return rc;
}

/* Tree shape for checkpoint verification: entries by type, bytes of files. */
static _Thread_local struct {
  uint64_t files, dirs, links, other, bytes;
} tl_shape;

static int shape_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)p;
  (void)f;
  if (flag == FTW_D || flag == FTW_DP) {
    tl_shape.dirs++;
  } else if (flag == FTW_SL || flag == FTW_SLN) {
    tl_shape.links++;
    tl_shape.bytes += (uint64_t)st->st_size;
  } else if (flag == FTW_F && S_ISREG(st->st_mode)) {
    tl_shape.files++;
    tl_shape.bytes += (uint64_t)st->st_size;
  } else if (flag == FTW_F) {
    tl_shape.other++;
  } else {
    return 1; /* unreadable: fail the walk */
  }
  return 0;
}

static int tree_shape(const char *path, uint64_t out[5]) {
  memset(&tl_shape, 0, sizeof tl_shape);
  if (nftw(path, shape_one, 32, FTW_PHYS) != 0) return -1;
  out[0] = tl_shape.files;
  out[1] = tl_shape.dirs;
  out[2] = tl_shape.links;
  out[3] = tl_shape.other;
  out[4] = tl_shape.bytes;
  return 0;
}

/* snapshots/.owner-<name>: the labels of the sandbox a snapshot was made
 * from (its meta/labels text), so that `durabox sandbox snapshots` names the
 * workflow and run it belongs to. Written after the snapshot's rename; a
 * checkpoint that dies first leaves a snapshot with no owner, which lists as
 * such. Best effort: the snapshot is whole without it. */
static void save_owner(dbx_local *d, const char *id, const char *name) {
  char *lp = dbx_asprintf("%s/sandboxes/%s/meta/labels", d->home, id);
  char *dir = dbx_asprintf("%s/snapshots", d->home);
  char *file = dbx_asprintf(".owner-%s", name);
  char *text = NULL;
  if (lp && dir && file && dbx_fs_read_all(lp, &text, NULL) == DBX_OK)
    (void)write_small(dir, file, text);
  free(text);
  free(lp);
  free(dir);
  free(file);
}

dbx_err dbx_local_sandbox_checkpoint(dbx_local *d, const char *id, const char *name,
                                     char **ref_out) {
  dbx_err rc = DBX_OK;
  char *snap = NULL, *tmp = NULL, *ws = NULL, *from = NULL;
  int lockfd = -1, tmpfd = -1;
  *ref_out = NULL;
  if (!valid_name(name)) return fail(d, DBX_EINVAL, "invalid snapshot name '%s'", name ? name : "(null)");
  rc = sb_check(d, id, 0);
  if (rc != DBX_OK) return rc;
  snap = dbx_asprintf("%s/snapshots/%s", d->home, name);
  tmp = dbx_asprintf("%s/snapshots/.tmp-%s-%llx", d->home, name, unique_suffix());
  ws = dbx_local_sandbox_path(d, id);
  from = dbx_asprintf("%s/.", ws ? ws : "");
  if (!snap || !tmp || !ws || !from) {
    rc = DBX_ENOMEM;
    goto out;
  }
  lockfd = lock_id(d, id);
  if (lockfd < 0) {
    rc = fail(d, DBX_EIO, "cannot lock sandbox '%s': %s", id, strerror(errno));
    goto out;
  }
  if (!is_dir(snap)) {
    if (mkdir(tmp, 0755) != 0) {
      rc = fail(d, DBX_EIO, "mkdir '%s': %s", tmp, strerror(errno));
      goto out;
    }
    /* held while the copy is made: a copy nobody holds is a leftover of a
     * checkpoint that died (dbx_local_leftovers, `durabox sandbox gc`) */
    tmpfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tmpfd < 0 || flock(tmpfd, LOCK_EX) != 0) {
      rc = fail(d, DBX_EIO, "cannot lock '%s': %s", tmp, strerror(errno));
      goto out;
    }
    char *argv[] = {"cp", "-a", "--reflink=auto", "--", from, tmp, NULL};
    rc = run_host(d, argv, "copying the workspace");
    if (rc == DBX_EIO) tl_err.kind = DBX_DRV_SNAPSHOT_FAILED;
    if (rc != DBX_OK) goto out;
    uint64_t a[5], b[5];
    if (tree_shape(ws, a) != 0 || tree_shape(tmp, b) != 0 || memcmp(a, b, sizeof a) != 0) {
      rc = failk(d, DBX_EIO, DBX_DRV_SNAPSHOT_FAILED,
                 "checkpoint '%s' of sandbox '%s' does not match the workspace "
                 "(changed during the copy?)", name, id);
      goto out;
    }
    /* cp -a gave the folder the workspace's times: it is made now
     * (dbx_local_snapshots reads this as the snapshot's age) */
    (void)futimens(tmpfd, NULL);
    if (rename(tmp, snap) != 0) {
      if (!is_dir(snap)) { /* else another process made it first */
        rc = fail(d, DBX_EIO, "rename '%s': %s", tmp, strerror(errno));
        goto out;
      }
    } else
      save_owner(d, id, name); /* the snapshot is made: who made it is a label on it */
    char *sd = dbx_asprintf("%s/snapshots", d->home);
    if (sd) fsync_path(sd);
    free(sd);
  }
  *ref_out = dbx_strdup(name);
  if (*ref_out == NULL) rc = DBX_ENOMEM;
out:
  if (tmp && access(tmp, F_OK) == 0) rmrf(d, tmp);
  if (tmpfd >= 0) close(tmpfd);
  if (lockfd >= 0) close(lockfd);
  free(snap);
  free(tmp);
  free(ws);
  free(from);
  return rc;
}

/* ---- paths inside the workspace ---- */

/* Refuse what can be refused by looking at the text. */
static dbx_err path_check(const dbx_local *d, const char *path, int allow_empty) {
  if (path == NULL || (*path == '\0' && !allow_empty))
    return fail(d, DBX_EINVAL, "empty path");
  if (path[0] == '/')
    return failk(d, DBX_EINVAL, DBX_DRV_PATH_REFUSED,
                 "path '%s' is absolute: paths are relative to the workspace", path);
  for (const char *p = path; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return failk(d, DBX_EINVAL, DBX_DRV_PATH_REFUSED,
                   "path '%s' contains '..': it would leave the workspace", path);
    p += n;
    if (*p == '/') p++;
  }
  return DBX_OK;
}

/* Without openat2 (old kernels, valgrind, seccomp): walk the path one
 * component at a time with O_NOFOLLOW, refusing every symlink (stricter). */
static int walk_nofollow(int dirfd, const char *path, int flags, mode_t mode) {
  char *copy = dbx_strdup(path);
  if (copy == NULL) {
    errno = ENOMEM;
    return -1;
  }
  int cur = dup(dirfd), fd = -1;
  char *save = NULL, *comp = strtok_r(copy, "/", &save);
  while (cur >= 0) {
    while (comp != NULL && strcmp(comp, ".") == 0) comp = strtok_r(NULL, "/", &save);
    if (comp == NULL) { /* path was the root itself */
      fd = openat(cur, ".", (flags & ~O_CREAT) | O_CLOEXEC);
      break;
    }
    char *next = strtok_r(NULL, "/", &save);
    while (next != NULL && strcmp(next, ".") == 0) next = strtok_r(NULL, "/", &save);
    struct stat st;
    if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      errno = ELOOP;
      break;
    }
    if (next == NULL) {
      fd = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
      break;
    }
    int nfd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0) break;
    close(cur);
    cur = nfd;
    comp = next;
  }
  int saved = errno;
  if (cur >= 0) close(cur);
  free(copy);
  errno = saved;
  return fd;
}

static _Atomic int no_openat2;

static int openat2_beneath(int dirfd, const char *path, int flags, mode_t mode) {
  if (no_openat2) return walk_nofollow(dirfd, path, flags, mode);
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd;
  do {
    fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  } while (fd < 0 && errno == EAGAIN);
  if (fd < 0 && errno == ENOSYS) {
    no_openat2 = 1;
    return walk_nofollow(dirfd, path, flags, mode);
  }
  return (int)fd;
}

static dbx_err open_err(const dbx_local *d, const char *path, int err) {
  if (err == EXDEV || err == ELOOP)
    return failk(d, DBX_EINVAL, DBX_DRV_PATH_REFUSED,
                 "path '%s' leads outside the workspace (symlink)", path);
  if (err == ENOENT) return fail(d, DBX_ENOTFOUND, "path '%s' not found", path);
  if (err == ENOTDIR) return fail(d, DBX_EINVAL, "path '%s': a component is not a directory", path);
  return fail(d, DBX_EIO, "path '%s': %s", path, strerror(err));
}

/* Open the workspace root of a running sandbox. */
static dbx_err open_root(const dbx_local *d, const char *id, int need_running, int *fd) {
  dbx_err rc = sb_check(d, id, need_running);
  if (rc != DBX_OK) return rc;
  char *ws = dbx_local_sandbox_path(d, id);
  if (ws == NULL) return DBX_ENOMEM;
  *fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) rc = fail(d, DBX_EIO, "cannot open workspace of '%s': %s", id, strerror(errno));
  free(ws);
  return rc;
}

dbx_err dbx_local_file_read(dbx_local *d, const char *id, const char *path, size_t max_bytes,
                            uint8_t **data, size_t *len) {
  dbx_err rc;
  int root = -1, fd = -1;
  uint8_t *buf = NULL;
  *data = NULL;
  *len = 0;
  if (max_bytes == 0) max_bytes = DEFAULT_READ_MAX;
  if ((rc = path_check(d, path, 0)) != DBX_OK) return rc;
  if ((rc = open_root(d, id, 1, &root)) != DBX_OK) return rc;
  fd = openat2_beneath(root, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
  if (fd < 0) {
    rc = open_err(d, path, errno);
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = fail(d, DBX_EINVAL, "path '%s' is not a regular file", path);
    goto out;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    rc = fail(d, DBX_EINVAL, "file '%s' has %lld bytes, more than the limit %zu", path,
              (long long)st.st_size, max_bytes);
    goto out;
  }
  size_t cap = (size_t)st.st_size + 1, n = 0;
  buf = dbx_malloc(cap + 1);
  if (buf == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  for (;;) { /* the file may grow while we read: read to EOF within the limit */
    if (n == cap) {
      if (cap > max_bytes) {
        rc = fail(d, DBX_EINVAL, "file '%s' grew past the limit %zu", path, max_bytes);
        goto out;
      }
      size_t ncap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
      uint8_t *nb = dbx_realloc(buf, ncap + 1);
      if (nb == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = fail(d, DBX_EIO, "read '%s': %s", path, strerror(errno));
      goto out;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  buf = NULL;
out:
  free(buf);
  if (fd >= 0) close(fd);
  if (root >= 0) close(root);
  return rc;
}

dbx_err dbx_local_file_write(dbx_local *d, const char *id, const char *path, const void *data,
                             size_t len) {
  dbx_err rc;
  int root = -1, dfd = -1;
  char *copy = NULL;
  if ((rc = path_check(d, path, 0)) != DBX_OK) return rc;
  if ((rc = open_root(d, id, 1, &root)) != DBX_OK) return rc;
  copy = dbx_strdup(path);
  if (copy == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  size_t n = strlen(copy);
  while (n > 0 && copy[n - 1] == '/') copy[--n] = '\0';
  char *slash = strrchr(copy, '/');
  const char *base = slash ? slash + 1 : copy;
  if (*base == '\0' || strcmp(base, ".") == 0) {
    rc = fail(d, DBX_EINVAL, "path '%s' names no file", path);
    goto out;
  }
  if (slash) {
    *slash = '\0';
    /* Create missing parents one level at a time, each opened beneath the
     * root, so a symlinked parent cannot redirect the mkdir outside. */
    for (char *s = copy;; s++) {
      if (*s != '/' && *s != '\0') continue;
      char c = *s;
      *s = '\0';
      int fd = openat2_beneath(root, copy, O_RDONLY | O_DIRECTORY, 0);
      if (fd < 0 && errno == ENOENT) {
        char *ls = strrchr(copy, '/');
        int pfd = ls ? (*ls = '\0', openat2_beneath(root, copy, O_RDONLY | O_DIRECTORY, 0))
                     : dup(root);
        if (ls) *ls = '/';
        if (pfd < 0) {
          rc = open_err(d, path, errno);
          goto out;
        }
        if (mkdirat(pfd, ls ? ls + 1 : copy, 0755) != 0 && errno != EEXIST) {
          int e = errno;
          close(pfd);
          rc = fail(d, DBX_EIO, "cannot create folder for '%s': %s", path, strerror(e));
          goto out;
        }
        close(pfd);
        fd = openat2_beneath(root, copy, O_RDONLY | O_DIRECTORY, 0);
      }
      if (fd < 0) {
        rc = open_err(d, path, errno);
        goto out;
      }
      *s = c;
      if (c == '\0') {
        dfd = fd;
        break;
      }
      close(fd);
    }
  } else {
    dfd = dup(root);
  }
  if (dfd < 0) {
    rc = fail(d, DBX_EIO, "path '%s': %s", path, strerror(errno));
    goto out;
  }
  struct stat st;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
    rc = fail(d, DBX_EINVAL, "path '%s' is a directory", path);
    goto out;
  }
  /* rename replaces a symlink itself, never its target. */
  if (write_atomic(dfd, base, data, len) != 0)
    rc = fail(d, DBX_EIO, "cannot write '%s': %s", path, strerror(errno));
out:
  if (dfd >= 0) close(dfd);
  if (root >= 0) close(root);
  free(copy);
  return rc;
}

/* ---- exec ---- */

typedef struct {
  char **v;
  size_t n, cap;
} strvec;

static int sv_push(strvec *s, char *x) { /* takes x */
  if (x == NULL) return -1;
  if (s->n + 2 > s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 32;
    char **nv = dbx_realloc(s->v, nc * sizeof *nv);
    if (nv == NULL) {
      free(x);
      return -1;
    }
    s->v = nv;
    s->cap = nc;
  }
  s->v[s->n++] = x;
  s->v[s->n] = NULL;
  return 0;
}

static void sv_free(strvec *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

static int sv_pushs(strvec *s, const char *x) { return sv_push(s, dbx_strdup(x)); }

/* Set entry ("NAME=value") in env, replacing an entry of the same name. */
static dbx_err env_set(const dbx_local *d, strvec *env, const char *entry) {
  const char *eq = strchr(entry, '=');
  if (eq == NULL || eq == entry)
    return fail(d, DBX_EINVAL, "environment entry '%.100s' is not NAME=value", entry);
  size_t kl = (size_t)(eq - entry) + 1;
  for (size_t j = 0; j < env->n; j++) {
    if (strncmp(env->v[j], entry, kl) != 0) continue;
    char *x = dbx_strdup(entry);
    if (x == NULL) return DBX_ENOMEM;
    free(env->v[j]);
    env->v[j] = x;
    return DBX_OK;
  }
  return sv_pushs(env, entry) ? DBX_ENOMEM : DBX_OK;
}

/* Build the environment: base, then the sandbox's own entries (sbenv:
 * sbenv_len bytes of NUL-ended entries, meta/env), then the declared ones,
 * each replacing same names. home: the sandbox's HOME (outside its
 * workspace). */
static dbx_err build_env(const dbx_local *d, const char *home, const char *sbenv,
                         size_t sbenv_len, const char *const *decl, strvec *env) {
  if (sv_pushs(env, "PATH=" SAFE_PATH) || sv_push(env, dbx_asprintf("HOME=%s", home)) ||
      sv_push(env, dbx_asprintf("XDG_CACHE_HOME=%s/.cache", home)) ||
      sv_push(env, dbx_asprintf("XDG_CONFIG_HOME=%s/.config", home)) ||
      sv_pushs(env, "LANG=C.UTF-8") || sv_pushs(env, "TERM=dumb"))
    return DBX_ENOMEM;
  dbx_err rc;
  for (size_t at = 0; sbenv && at < sbenv_len; at += strlen(sbenv + at) + 1)
    if (sbenv[at] && (rc = env_set(d, env, sbenv + at)) != DBX_OK) return rc;
  for (size_t i = 0; decl && decl[i]; i++)
    if ((rc = env_set(d, env, decl[i])) != DBX_OK) return rc;
  return DBX_OK;
}

/* An exec command's share of the sandbox's meta: its environment (meta/env,
 * *env malloc'd with *len bytes, NULL when none) and its memory limit in
 * MiB (meta/limits, 0 when none). DBX_OK, DBX_ENOMEM, DBX_EIO. */
static dbx_err step_meta(const dbx_local *d, const char *id, char **env, size_t *len,
                         uint64_t *memory_mib) {
  *env = NULL, *len = 0, *memory_mib = 0;
  char *pe = dbx_asprintf("%s/sandboxes/%s/meta/env", d->home, id);
  char *pl = dbx_asprintf("%s/sandboxes/%s/meta/limits", d->home, id), *lim = NULL;
  dbx_err rc = pe && pl ? DBX_OK : DBX_ENOMEM;
  if (rc == DBX_OK) {
    rc = dbx_fs_read_all(pe, env, len);
    if (rc == DBX_ENOTFOUND) rc = DBX_OK;
    else if (rc != DBX_OK && rc != DBX_ENOMEM)
      rc = fail(d, DBX_EIO, "cannot read '%s': %s", pe, strerror(errno));
  }
  if (rc == DBX_OK) {
    rc = read_meta(d, pl, &lim);
    if (rc == DBX_ENOTFOUND) rc = DBX_OK;
    unsigned long long v = 0;
    if (rc == DBX_OK && lim && sscanf(lim, "memory_mib %llu", &v) == 1) *memory_mib = v;
  }
  if (rc != DBX_OK) {
    free(*env);
    *env = NULL, *len = 0;
  }
  free(pe);
  free(pl);
  free(lim);
  return rc;
}

/* bwrap arguments of what a command sees of the host's files: the whole
 * root read-only, or (system) only the system folders read-only, symlinks
 * among them (a merged /usr's /bin -> usr/bin) kept as symlinks. */
static int push_host_root(strvec *argv, int system) {
  static const char *const dirs[] = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                                     "/libx32", "/etc", "/opt",
                                     "/run/systemd/resolve", /* /etc/resolv.conf's target */
                                     NULL};
  if (!system) return sv_pushs(argv, "--ro-bind") || sv_pushs(argv, "/") || sv_pushs(argv, "/");
  for (size_t i = 0; dirs[i]; i++) {
    struct stat st;
    char target[PATH_MAX];
    if (lstat(dirs[i], &st) != 0) continue;
    ssize_t tl = S_ISLNK(st.st_mode) ? readlink(dirs[i], target, sizeof target - 1) : -1;
    if (tl > 0) {
      target[tl] = '\0';
      if (sv_pushs(argv, "--symlink") || sv_pushs(argv, target) || sv_pushs(argv, dirs[i]))
        return -1;
    } else if (S_ISDIR(st.st_mode)) {
      if (sv_pushs(argv, "--ro-bind") || sv_pushs(argv, dirs[i]) || sv_pushs(argv, dirs[i]))
        return -1;
    }
  }
  return 0;
}

/* Build what running cmd in sandbox id takes: argv (bwrap prefix when
 * enabled), env, and an fd of the cwd (checked beneath the workspace).
 * On DBX_OK the caller owns argv, env (sv_free) and *cwdfd_out (close). */
static dbx_err sandbox_prepare(dbx_local *d, const char *id, char *const *cmd,
                               const char *script, const char *bind, int bind_rw,
                               const char *cwd, const char *const *decl_env, int step,
                               strvec *argv_out, strvec *env_out, int *cwdfd_out) {
  dbx_err rc;
  int root = -1, cwdfd = -1;
  char *ws = NULL, *abscwd = NULL, *home = NULL, *sbenv = NULL;
  size_t sbenv_len = 0;
  uint64_t memory_mib = 0;
  strvec env = {0}, argv = {0};
  *cwdfd_out = -1;
  if (cwd && *cwd && (rc = path_check(d, cwd, 0)) != DBX_OK) return rc;
  if ((rc = open_root(d, id, 1, &root)) != DBX_OK) return rc;
  sb_settings set = sb_settings_read(d, id);
  if ((set.net_none && !(d->use_bwrap && d->net_ok)) || (set.fs_system && !d->use_bwrap)) {
    rc = fail(d, DBX_EUNSUPPORTED,
              "sandbox '%s' has %s, which needs bubblewrap%s: refused rather than run "
              "without it", id, set.net_none ? "network \"none\"" : "host_fs \"system\"",
              set.net_none ? " with network namespaces" : "");
    goto out;
  }
  ws = dbx_local_sandbox_path(d, id);
  home = dbx_asprintf("%s/sandboxes/%s/home", d->home, id);
  if (ws == NULL || home == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  /* HOME, made on first use (sandboxes made before it existed get it too) */
  if (mkdir(home, 0700) != 0 && errno != EEXIST) {
    rc = fail(d, DBX_EIO, "cannot create the home of sandbox '%s': %s", id, strerror(errno));
    goto out;
  }
  if (cwd && *cwd) {
    cwdfd = openat2_beneath(root, cwd, O_RDONLY | O_DIRECTORY, 0);
    if (cwdfd < 0) {
      rc = open_err(d, cwd, errno);
      goto out;
    }
    abscwd = dbx_asprintf("%s/%s", ws, cwd);
  } else {
    cwdfd = dup(root);
    abscwd = dbx_strdup(ws);
  }
  if (abscwd == NULL || cwdfd < 0) {
    rc = DBX_ENOMEM;
    goto out;
  }
  /* an exec command (step) gets the sandbox's env and memory limit */
  if (step && (rc = step_meta(d, id, &sbenv, &sbenv_len, &memory_mib)) != DBX_OK) goto out;
  if ((rc = build_env(d, home, sbenv, sbenv_len, decl_env, &env)) != DBX_OK) goto out;
  if (d->use_bwrap) {
    /* Own PID namespace and /proc: host processes (the worker, its
     * environment) are invisible. The durabox home is hidden but for this
     * sandbox's workspace and home. bwrap runs under its caller (the worker
     * or the detached command's supervisor) and dies with it. */
    if (sv_pushs(&argv, d->bwrap) || sv_pushs(&argv, "--die-with-parent") ||
        sv_pushs(&argv, "--unshare-pid") || push_host_root(&argv, set.fs_system))
      goto oom;
    const char *pre[] = {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                         "--tmpfs", d->home, "--bind", ws, ws, "--bind", home, home};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
      if (sv_pushs(&argv, pre[i])) goto oom;
    if (set.net_none && sv_pushs(&argv, "--unshare-net")) goto oom;
    if (script && (sv_pushs(&argv, "--ro-bind") || sv_pushs(&argv, script) ||
                   sv_pushs(&argv, script)))
      goto oom;
    if (bind && (sv_pushs(&argv, bind_rw ? "--bind" : "--ro-bind") || sv_pushs(&argv, bind) ||
                 sv_pushs(&argv, bind)))
      goto oom;
    if (sv_pushs(&argv, "--chdir") || sv_pushs(&argv, abscwd) || sv_pushs(&argv, "--"))
      goto oom;
  }
  if (memory_mib > 0) {
    /* RLIMIT_AS of the command's shell and all it starts (bwrap itself is
     * not limited); a shell that cannot set it runs nothing (exit 125) */
    char lim[160];
    snprintf(lim, sizeof lim,
             "ulimit -v %llu || { echo 'durabox: cannot set the memory limit' >&2; exit 125; }; "
             "exec \"$@\"", (unsigned long long)memory_mib * 1024);
    if (sv_pushs(&argv, "/bin/sh") || sv_pushs(&argv, "-c") || sv_pushs(&argv, lim) ||
        sv_pushs(&argv, "durabox-limit"))
      goto oom;
  }
  for (size_t i = 0; cmd[i]; i++)
    if (sv_pushs(&argv, cmd[i])) goto oom;
  *argv_out = argv;
  *env_out = env;
  *cwdfd_out = cwdfd;
  memset(&argv, 0, sizeof argv);
  memset(&env, 0, sizeof env);
  cwdfd = -1;
  rc = DBX_OK;
  goto out;
oom:
  rc = fail(d, DBX_ENOMEM, "out of memory");
out:
  sv_free(&env);
  sv_free(&argv);
  if (cwdfd >= 0) close(cwdfd);
  if (root >= 0) close(root);
  free(ws);
  free(home);
  free(abscwd);
  if (sbenv) memset(sbenv, 0, sbenv_len);
  free(sbenv);
  return rc;
}

/* sandbox_run with one more host path bound into bubblewrap (bind_rw: writable). */
static dbx_err sandbox_run_bind(dbx_local *d, const char *id, char *const *cmd,
                                const char *script, const char *bind, int bind_rw,
                                const char *cwd, const char *const *decl_env, int step,
                                int64_t timeout_ms, size_t cap_out, size_t cap_err,
                                int (*cancelled)(void *), void *cancelled_ud,
                                dbx_local_exec_result *res) {
  strvec env = {0}, argv = {0};
  int cwdfd = -1;
  memset(res, 0, sizeof *res);
  dbx_err rc = sandbox_prepare(d, id, cmd, script, bind, bind_rw, cwd, decl_env, step, &argv,
                               &env, &cwdfd);
  if (rc != DBX_OK) return rc;
  run_spec s = {.argv = argv.v, .envp = env.v, .cwd_fd = cwdfd, .timeout_ms = timeout_ms,
                .cap = {cap_out ? cap_out : DEFAULT_CAP_BYTES, cap_err ? cap_err : DEFAULT_CAP_BYTES},
                .cancelled = cancelled, .cancelled_ud = cancelled_ud};
  rc = run_proc(d, &s, res);
  sv_free(&env);
  sv_free(&argv);
  close(cwdfd);
  return rc;
}

/* Run argv in sandbox id (bwrap or plain), cwd relative (checked), env built. */
static dbx_err sandbox_run(dbx_local *d, const char *id, char *const *cmd, const char *script,
                           const char *cwd, const char *const *decl_env, int step,
                           int64_t timeout_ms, size_t cap_out, size_t cap_err,
                           int (*cancelled)(void *), void *cancelled_ud,
                           dbx_local_exec_result *res) {
  return sandbox_run_bind(d, id, cmd, script, NULL, 0, cwd, decl_env, step, timeout_ms, cap_out,
                          cap_err, cancelled, cancelled_ud, res);
}

dbx_err dbx_local_exec(dbx_local *d, const char *id, const dbx_local_exec_opts *opts,
                       dbx_local_exec_result *res) {
  dbx_err rc;
  char *script = NULL;
  memset(res, 0, sizeof *res);
  if (opts == NULL || opts->command == NULL) return fail(d, DBX_EINVAL, "no command");
  if ((rc = sb_check(d, id, 1)) != DBX_OK) return rc;
  size_t clen = strlen(opts->command);
  char *cmd[] = {"/bin/sh", "-c", (char *)opts->command, NULL};
  if (clen > ARGV_INLINE_MAX) {
    /* Too long for argv (the kernel caps one argument at 128 KiB): a script
     * file in the sandbox's metadata folder. */
    char *meta = dbx_asprintf("%s/sandboxes/%s/meta", d->home, id);
    char name[64];
    snprintf(name, sizeof name, "cmd-%llx.sh", unique_suffix());
    int mfd = meta ? open(meta, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    int ok = mfd >= 0 && write_atomic(mfd, name, opts->command, clen) == 0;
    if (mfd >= 0) close(mfd);
    if (ok) script = dbx_asprintf("%s/%s", meta, name);
    free(meta);
    if (!ok || script == NULL) return fail(d, DBX_EIO, "cannot write the command script of '%s'", id);
    cmd[1] = script;
    cmd[2] = NULL;
  }
  rc = sandbox_run(d, id, cmd, script, opts->cwd, opts->env, 1, opts->timeout_ms,
                   opts->stdout_cap_bytes, opts->stderr_cap_bytes, opts->cancelled,
                   opts->cancelled_ud, res);
  if (script) {
    unlink(script);
    free(script);
  }
  return rc;
}

/* ---- detached commands ----
 *
 * Process tree: caller --posix_spawn(/proc/self/exe, setsid)--> S1 --fork-->
 * S2 (the supervisor) --posix_spawn--> the command's group. S1 takes the
 * folder's lock (flock, shared by S2 through the inherited open file), checks
 * that the command never started, reads the spec from its stdin (a socket
 * from the caller), writes `started`, forks S2 and exits; the caller reaps
 * S1, so S2 belongs to init from then on. S2 runs the command like run_proc,
 * copying the pipes into the stream files, and writes `status` before it
 * reaps the shell (so the group id stays reserved while it kills the group).
 * Crash behaviour: the caller dying changes nothing for S2; S2 dying (killed,
 * reboot) leaves `started` without `status` and the lock free: LOST. */

#define SUPERVISE_ARG "__dbx_local_supervise"
#define SPEC_MAGIC "dbx-cmd-spec-1"
#define SPEC_MAX_BYTES ((size_t)64 << 20)
#define SUPERVISE_TICK_MS 100

extern char **environ;

static char *cmd_dir(const dbx_local *d, const char *id, const char *cmd_id) {
  return dbx_asprintf("%s/sandboxes/%s/meta/cmds/%s", d->home, id, cmd_id);
}

typedef struct {
  char *p;
  size_t len, cap;
} sbuf;

static int sb_add(sbuf *b, const char *s) { /* appends s and its NUL */
  size_t n = strlen(s) + 1;
  if (b->len + n > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 4096;
    while (nc < b->len + n) nc *= 2;
    char *np = dbx_realloc(b->p, nc);
    if (np == NULL) return -1;
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return 0;
}

static int sb_addnum(sbuf *b, long long v) {
  char t[32];
  snprintf(t, sizeof t, "%lld", v);
  return sb_add(b, t);
}

/* Parsed spec (pointers into the read buffer). */
typedef struct {
  int64_t timeout_ms;
  size_t cap[2];
  char **argv, **envp;
} cmd_spec;

static int spec_parse(char *buf, size_t len, cmd_spec *sp) {
  char *p = buf, *end = buf + len;
  char *f[6];
  if (len == 0 || buf[len - 1] != '\0') return -1;
  for (int i = 0; i < 5; i++) {
    if (p >= end) return -1;
    f[i] = p;
    p += strlen(p) + 1;
  }
  if (strcmp(f[0], SPEC_MAGIC) != 0) return -1;
  sp->timeout_ms = strtoll(f[1], NULL, 10);
  sp->cap[0] = (size_t)strtoull(f[2], NULL, 10);
  sp->cap[1] = (size_t)strtoull(f[3], NULL, 10);
  long argc = strtol(f[4], NULL, 10);
  if (argc < 1 || argc > 100000) return -1;
  sp->argv = dbx_calloc((size_t)argc + 1, sizeof *sp->argv);
  if (sp->argv == NULL) return -1;
  for (long i = 0; i < argc; i++) {
    if (p >= end) return -1;
    sp->argv[i] = p;
    p += strlen(p) + 1;
  }
  if (p >= end) return -1;
  f[5] = p;
  p += strlen(p) + 1;
  long envc = strtol(f[5], NULL, 10);
  if (envc < 0 || envc > 100000) return -1;
  sp->envp = dbx_calloc((size_t)envc + 1, sizeof *sp->envp);
  if (sp->envp == NULL) return -1;
  for (long i = 0; i < envc; i++) {
    if (p >= end) return -1;
    sp->envp[i] = p;
    p += strlen(p) + 1;
  }
  return 0;
}

typedef struct {
  int in;      /* pipe read end, -1 when at EOF */
  int file;    /* the stream file */
  size_t cap;
  uint64_t total;
} sup_stream;

static void pwrite_all(int fd, const char *p, size_t len, uint64_t off) {
  while (len > 0) {
    ssize_t w = pwrite(fd, p, len, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w, len -= (size_t)w, off += (uint64_t)w;
  }
}

/* Stream bytes p[0, n) at stream offset pos into the file (driver.h
 * "Capture"): the head at its own offsets, the rest into the ring after it
 * at head + (pos - head) % tail. Best effort: a failed write leaves a hole. */
static void sup_keep(sup_stream *s, const char *p, size_t n, uint64_t pos) {
  size_t tail = DBX_DRV_TAIL_BYTES(s->cap), head = s->cap - tail;
  if (pos < head) {
    size_t k = (uint64_t)n < head - pos ? n : (size_t)(head - pos);
    pwrite_all(s->file, p, k, pos);
    p += k, n -= k, pos += k;
  }
  if (tail == 0 || n == 0) return;
  if (n > tail) { /* only the last tail bytes of this chunk can survive */
    p += n - tail, pos += n - tail;
    n = tail;
  }
  while (n > 0) {
    size_t at = (size_t)((pos - head) % tail), k = tail - at < n ? tail - at : n;
    pwrite_all(s->file, p, k, head + at);
    p += k, n -= k, pos += k;
  }
}

static void sup_drain(sup_stream *s) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(s->in, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      close(s->in);
      s->in = -1;
      return;
    }
    sup_keep(s, chunk, (size_t)n, s->total);
    s->total += (uint64_t)n;
  }
}

/* Start time of process pid (field 22 of /proc/<pid>/stat, clock ticks since
 * boot), or 0 when it does not exist (or is a zombie: nothing of it runs).
 * Together with the pid it names one process: a reused pid has another. */
static unsigned long long proc_starttime(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  if (p == NULL || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X') return 0;
  p += 2;
  for (int field = 3; field < 22; field++) { /* p is at field 3 (the state) */
    p = strchr(p, ' ');
    if (p == NULL) return 0;
    p++;
  }
  return strtoull(p, NULL, 10);
}

/* Read "pid starttime" from file name of dfd; 1 when the process it names
 * is alive (and *pid set), 0 when it is gone, -1 when there is no record. */
static int recorded_alive(int dfd, const char *name, pid_t *pid) {
  int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[64];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  long long p = 0;
  unsigned long long t = 0;
  if (sscanf(text, "%lld %llu", &p, &t) != 2 || p <= 1) return -1;
  *pid = (pid_t)p;
  return t != 0 && proc_starttime((pid_t)p) == t;
}

/* The command's folder was removed from outside (the sandbox deleted under
 * it, not through the driver): nothing can read its status, so the
 * supervisor stops the command rather than leave it running unseen. */
static int cmd_vanished(int dfd) {
  struct stat sb;
  return fstat(dfd, &sb) == 0 && sb.st_nlink == 0;
}

/* S2: start the command in a process group of its own and record it durably
 * in "pgid" ("pid starttime") BEFORE it runs: the child is forked (S2 is
 * single-threaded), makes its group and waits on a pipe until the record is
 * on disk; a supervisor killed before that leaves a child that reads EOF and
 * exits without running anything. The child inherits the command folder's
 * lock as fd 4 (open file description shared with S2), and so does every
 * process the command starts: the lock is free only once all of them have
 * exited, whatever killed the supervisor (poll_at: LOST means nothing of the
 * command runs). Returns 0 (*out = the command's pid) or an errno. */
#define CMD_LOCK_FD 4
static int spawn_recorded(int dfd, int lfd, const cmd_spec *sp, int out_w, int err_w,
                          pid_t *out) {
  int go[2] = {-1, -1}, ep[2] = {-1, -1}, e = 0;
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(ep, O_CLOEXEC) != 0) {
    e = errno;
    goto out;
  }
  pid_t pid = fork();
  if (pid < 0) {
    e = errno;
    goto out;
  }
  if (pid == 0) { /* the child: only async-signal-safe calls until exec */
    close(go[1]); /* else a supervisor killed now would leave us waiting forever */
    close(ep[0]);
    setpgid(0, 0);
    char c;
    ssize_t r;
    do {
      r = read(go[0], &c, 1);
    } while (r < 0 && errno == EINTR);
    if (r != 1) _exit(127);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < 32; s++)
      if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int a = fcntl(out_w, F_DUPFD_CLOEXEC, 10), b = fcntl(err_w, F_DUPFD_CLOEXEC, 10),
        l = fcntl(lfd, F_DUPFD_CLOEXEC, 10), nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int bad = a < 0 || b < 0 || l < 0 || nul < 0 || fchdir(3) != 0 || dup2(nul, 0) < 0 ||
              dup2(a, 1) < 0 || dup2(b, 2) < 0 || dup2(l, CMD_LOCK_FD) < 0;
    if (!bad) execvpe(sp->argv[0], sp->argv, sp->envp);
    int err = errno ? errno : EIO;
    ssize_t w = write(ep[1], &err, sizeof err);
    (void)w;
    _exit(127);
  }
  setpgid(pid, pid); /* also here: the group exists before S2 ever signals it */
  close(go[0]);
  go[0] = -1;
  close(ep[1]);
  ep[1] = -1;
  char rec[64];
  int rl = snprintf(rec, sizeof rec, "%lld %llu\n", (long long)pid, proc_starttime(pid));
  int wr = write_atomic(dfd, "pgid", rec, (size_t)rl);
  /* Failpoint: a 'log' hit plays an outside SIGKILL of the child before it is
   * told to go (before exec): the child is dead, not reaped, when "g" is
   * written, which then fails with EPIPE as it did when run 15's fault
   * driver killed such a child by a reused pid. */
  if (wr == 0 && dbx_failpoints_on && dbx_failpoint_hit("local.supervise.child_killed_before_exec") == 1) {
    kill(pid, SIGKILL);
    siginfo_t dead;
    while (waitid(P_PID, (id_t)pid, &dead, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
  }
  if (wr != 0 || write(go[1], "g", 1) != 1) {
    e = errno ? errno : EIO;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    goto out;
  }
  int child_err = 0;
  ssize_t r;
  do {
    r = read(ep[0], &child_err, sizeof child_err);
  } while (r < 0 && errno == EINTR);
  if (r == (ssize_t)sizeof child_err) { /* exec failed; the child exits 127 */
    e = child_err;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    goto out;
  }
  *out = pid;
out:
  for (int i = 0; i < 2; i++) {
    if (go[i] >= 0) close(go[i]);
    if (ep[i] >= 0) close(ep[i]);
  }
  return e;
}

/* S2: run the command, write status. Returns the process exit code. */
static int supervise_run(int dfd, int lfd, const cmd_spec *sp) {
  int rc = 0, outp[2] = {-1, -1}, errp[2] = {-1, -1}, pidfd = -1;
  sup_stream st[2] = {{.in = -1, .file = -1}, {.in = -1, .file = -1}};
  int exit_code = 0, sig = 0, timed_out = 0, killed = 0;
  char err[512] = "";
  int64_t start = dbx_mono_ns();
  pid_t pid = -1;
  static const char *names[2] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    st[i].cap = sp->cap[i] ? sp->cap[i] : DEFAULT_CAP_BYTES;
    st[i].file = openat(dfd, names[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (st[0].file < 0 || st[1].file < 0 || pipe2(outp, O_CLOEXEC) != 0 ||
      pipe2(errp, O_CLOEXEC) != 0) {
    snprintf(err, sizeof err, "supervisor setup: %s", strerror(errno));
    exit_code = 127;
    goto status;
  }
  int e = spawn_recorded(dfd, lfd, sp, outp[1], errp[1], &pid);
  close(outp[1]);
  close(errp[1]);
  if (e != 0) {
    pid = -1;
    snprintf(err, sizeof err, "cannot start %s: %s", sp->argv[0], strerror(e));
    exit_code = 127;
    close(outp[0]);
    close(errp[0]);
    goto status;
  }
  start = dbx_mono_ns(); /* the timeout counts from the command's start, not the record's fsync */
  st[0].in = outp[0];
  st[1].in = errp[0];
  fcntl(outp[0], F_SETFL, O_NONBLOCK);
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  int phase = 0; /* 0 running, 1 SIGTERM sent, 2 SIGKILL sent */
  int64_t deadline = sp->timeout_ms > 0 ? start + sp->timeout_ms * 1000000 : 0, kill_at = 0;
  siginfo_t si;
  for (;;) {
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
      break;
    int64_t now = dbx_mono_ns();
    if (!killed && phase < 2 && (faccessat(dfd, "kill", F_OK, 0) == 0 || cmd_vanished(dfd))) {
      killpg(pid, SIGKILL);
      killed = 1;
      phase = 2;
    }
    if (deadline && phase == 0 && now >= deadline) {
      killpg(pid, SIGTERM);
      timed_out = 1;
      phase = 1;
      kill_at = now + (int64_t)KILL_GRACE_MS * 1000000;
    }
    if (phase == 1 && now >= kill_at) {
      killpg(pid, SIGKILL);
      phase = 2;
    }
    int64_t wait_ns = (int64_t)SUPERVISE_TICK_MS * 1000000;
    if (phase == 0 && deadline && deadline - now < wait_ns) wait_ns = deadline - now;
    if (phase == 1 && kill_at - now < wait_ns) wait_ns = kill_at - now;
    if (wait_ns < 0) wait_ns = 0;
    struct pollfd pf[3];
    int n = 0, idx[2] = {-1, -1};
    for (int i = 0; i < 2; i++)
      if (st[i].in >= 0) {
        idx[i] = n;
        pf[n++] = (struct pollfd){.fd = st[i].in, .events = POLLIN};
      }
    if (pidfd >= 0) pf[n++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
    int pr = poll(pf, (nfds_t)n, (int)(wait_ns / 1000000) + 1);
    for (int i = 0; pr > 0 && i < 2; i++)
      if (idx[i] >= 0 && (pf[idx[i]].revents & (POLLIN | POLLHUP | POLLERR))) sup_drain(&st[i]);
  }
  if (si.si_code == CLD_EXITED) {
    exit_code = si.si_status;
  } else {
    sig = si.si_status;
    exit_code = 128 + sig;
  }
  killpg(pid, SIGKILL); /* what is left of the group; its id is still reserved */
  for (int i = 0; i < 2; i++)
    if (st[i].in >= 0) sup_drain(&st[i]);
status:;
  for (int i = 0; i < 2; i++)
    if (st[i].file >= 0) fsync(st[i].file);
  char text[1024];
  int tl = snprintf(text, sizeof text,
                    "exit_code=%d\nsignal=%d\ntimed_out=%d\nkilled=%d\nstdout_total=%llu\n"
                    "stderr_total=%llu\nduration_ms=%lld\nerror=%s\n",
                    exit_code, sig, timed_out, killed, (unsigned long long)st[0].total,
                    (unsigned long long)st[1].total,
                    (long long)((dbx_mono_ns() - start) / 1000000), err);
  if (write_atomic(dfd, "status", text, (size_t)tl) != 0) rc = 2;
  if (pid > 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  for (int i = 0; i < 2; i++) {
    if (st[i].in >= 0) close(st[i].in);
    if (st[i].file >= 0) close(st[i].file);
  }
  if (pidfd >= 0) close(pidfd);
  return rc;
}

/* S1 (and, after its fork, S2). Exit codes: 0 started, 3 already started
 * or busy, 2 failure. */
static int supervise_main(const char *dir) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return 2;
  int lfd = openat(dfd, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) return 2;
  if (flock(lfd, LOCK_EX | LOCK_NB) != 0) return 3;
  if (faccessat(dfd, "started", F_OK, 0) == 0 || faccessat(dfd, "status", F_OK, 0) == 0)
    return 3;
  sbuf b = {0};
  char chunk[65536];
  for (;;) {
    ssize_t n = read(0, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return 2;
    if (n == 0) break;
    if (b.len + (size_t)n > SPEC_MAX_BYTES) return 2;
    if (b.len + (size_t)n > b.cap) {
      size_t nc = b.cap ? b.cap * 2 : 65536;
      while (nc < b.len + (size_t)n) nc *= 2;
      char *np = dbx_realloc(b.p, nc);
      if (np == NULL) return 2;
      b.p = np;
      b.cap = nc;
    }
    memcpy(b.p + b.len, chunk, (size_t)n);
    b.len += (size_t)n;
  }
  cmd_spec sp = {0};
  if (spec_parse(b.p, b.len, &sp) != 0) return 2;
  char started[64];
  int sl = snprintf(started, sizeof started, "%lld\n", (long long)getpid());
  if (write_atomic(dfd, "started", started, (size_t)sl) != 0) return 2;
  pid_t p = fork();
  if (p < 0) return 2;
  if (p > 0) return 0; /* S1: the caller reaps us; S2 keeps the lock */
  int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nul >= 0) {
    dup2(nul, 0);
    close(nul);
  }
  fcntl(3, F_SETFD, FD_CLOEXEC); /* the cwd; the command gets it by fchdir only */
  char me[64];
  int ml = snprintf(me, sizeof me, "%lld %llu\n", (long long)getpid(),
                    proc_starttime(getpid()));
  write_atomic(dfd, "supervisor", me, (size_t)ml); /* who supervises: poll_at's orphan check */
  int rc = supervise_run(dfd, lfd, &sp);
  free(sp.argv);
  free(sp.envp);
  free(b.p);
  return rc;
}

int dbx_local_supervisor_main(int argc, char **argv) {
  if (argc != 3 || argv == NULL || argv[1] == NULL || argv[2] == NULL ||
      strcmp(argv[1], SUPERVISE_ARG) != 0)
    return -1;
  /* the fault harness's points in the supervisor (DURABOX_FAILPOINTS, as
   * its worker has it; one thread) */
  (void)dbx_failpoint_init_from_env(NULL);
  /* a write to a command's pipe that is gone is an error to report, never
   * the supervisor's death (its child resets every signal before exec) */
  signal(SIGPIPE, SIG_IGN);
  /* _exit: no atexit handler, stdio flush or leak check of the caller's
   * program runs in a supervisor (S1 returns while S2 holds its buffers) */
  _exit(supervise_main(argv[2]));
}

static int read_status(int dfd, dbx_local_cmd_status *st) { /* 1 read, 0 absent, -1 bad */
  int fd = openat(dfd, "status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : -1;
  char text[1024];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  unsigned long long ot = 0, et = 0;
  long long dur = 0;
  if (sscanf(text,
             "exit_code=%d\nsignal=%d\ntimed_out=%d\nkilled=%d\nstdout_total=%llu\n"
             "stderr_total=%llu\nduration_ms=%lld\n",
             &st->exit_code, &st->signal, &st->timed_out, &st->killed, &ot, &et, &dur) != 7)
    return -1;
  st->stdout_total = ot;
  st->stderr_total = et;
  st->duration_ms = dur;
  const char *e = strstr(text, "\nerror="); /* set only when the command never started */
  if (e) {
    e += strlen("\nerror=");
    size_t el = strcspn(e, "\n");
    if (el >= sizeof st->not_started) el = sizeof st->not_started - 1;
    memcpy(st->not_started, e, el);
    st->not_started[el] = '\0';
  }
  return 1;
}

static uint64_t file_size_at(int dfd, const char *name) {
  struct stat sb;
  return fstatat(dfd, name, &sb, 0) == 0 ? (uint64_t)sb.st_size : 0;
}

static dbx_err cmd_open(dbx_local *d, const char *id, const char *cmd_id, int *dfd) {
  *dfd = -1;
  if (!valid_name(id)) return fail(d, DBX_EINVAL, "invalid sandbox id '%s'", id ? id : "(null)");
  if (!valid_name(cmd_id))
    return fail(d, DBX_EINVAL, "invalid command id '%s'", cmd_id ? cmd_id : "(null)");
  char *dir = cmd_dir(d, id, cmd_id);
  if (dir == NULL) return DBX_ENOMEM;
  *dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int e = errno;
  free(dir);
  if (*dfd >= 0) return DBX_OK;
  if (e == ENOENT) return fail(d, DBX_ENOTFOUND, "no command '%s' in sandbox '%s'", cmd_id, id);
  return fail(d, DBX_EIO, "command '%s' of sandbox '%s': %s", cmd_id, id, strerror(e));
}

/* A supervisor killed (SIGKILL, OOM killer) leaves the lock held by its
 * command's processes, now unsupervised (no timeout, no capture, no status
 * will come). Kill their group, so that the command reads LOST once they are
 * all gone, never while one of them runs. Under bwrap the kernel has done it
 * already (--die-with-parent, then the PID namespace's end). The group is
 * signalled only when its leader is the recorded process or no process has
 * that pid (the id is then still reserved by the group's other members);
 * another process with that pid means the group is empty and the pid reused. */
static void reap_orphan(int dfd) {
  pid_t sup = 0, cmd = 0;
  if (faccessat(dfd, "status", F_OK, 0) == 0) return;
  if (recorded_alive(dfd, "supervisor", &sup) != 0) return; /* alive, or not yet recorded */
  int r = recorded_alive(dfd, "pgid", &cmd);
  if (r == 1 || (r == 0 && proc_starttime(cmd) == 0)) kill(-cmd, SIGKILL);
}

/* ---- fencing: which attempt owns a command ----
 * cmds/.owner-<cmd_id> holds the highest attempt that claimed the command
 * (dbx_local_exec_opts.attempt). It is read and written under an flock of
 * itself, and a kill asked by an attempt (dbx_local_exec_kill_as) takes the
 * same lock, so a claim and a fenced kill never interleave. It is outside the
 * command's folder, so it outlives dbx_local_exec_forget. */
static int owner_open(const char *cmd_path) {
  const char *slash = strrchr(cmd_path, '/');
  if (slash == NULL) return -1;
  char *p = dbx_asprintf("%.*s/.owner-%s", (int)(slash - cmd_path), cmd_path, slash + 1);
  if (p == NULL) return -1;
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  free(p);
  if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int32_t owner_read(int fd) {
  char t[32] = "";
  ssize_t n = pread(fd, t, sizeof t - 1, 0);
  if (n <= 0) return 0;
  t[n] = '\0';
  long v = strtol(t, NULL, 10);
  return v > 0 && v < INT32_MAX ? (int32_t)v : 0;
}

static int owner_write(int fd, int32_t attempt) {
  char t[32];
  int n = snprintf(t, sizeof t, "%d\n", (int)attempt);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, t, (size_t)n, 0) != n) return -1;
  return fsync(fd);
}

/* The attempt that asked for the kill of this command ("kill N"), 0 when
 * none did or the kill was not an attempt's (sandbox delete). */
static int32_t kill_asker(int dfd) {
  int fd = openat(dfd, "kill", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char t[32] = "";
  ssize_t n = read(fd, t, sizeof t - 1);
  close(fd);
  if (n <= 0) return 0;
  t[n] = '\0';
  long v = 0;
  return sscanf(t, "kill %ld", &v) == 1 && v > 0 && v < INT32_MAX ? (int32_t)v : 0;
}

static dbx_err poll_at(dbx_local *d, int dfd, const char *cmd_id, dbx_local_cmd_status *st) {
  memset(st, 0, sizeof *st);
  st->stdout_size = file_size_at(dfd, "stdout");
  st->stderr_size = file_size_at(dfd, "stderr");
  int r = read_status(dfd, st);
  if (r < 0) return fail(d, DBX_EIO, "unreadable status of command '%s'", cmd_id);
  if (r == 1) {
    st->state = DBX_LOCAL_CMD_FINISHED;
    return DBX_OK;
  }
  int lfd = openat(dfd, "lock", O_RDONLY | O_CLOEXEC);
  if (lfd >= 0 && flock(lfd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    close(lfd);
    reap_orphan(dfd);
    st->state = DBX_LOCAL_CMD_RUNNING;
    return DBX_OK;
  }
  if (lfd >= 0) close(lfd); /* releases our shared lock */
  r = read_status(dfd, st);   /* it may have finished meanwhile */
  if (r < 0) return fail(d, DBX_EIO, "unreadable status of command '%s'", cmd_id);
  if (r == 1)
    st->state = DBX_LOCAL_CMD_FINISHED;
  else
    st->state = faccessat(dfd, "started", F_OK, 0) == 0 ? DBX_LOCAL_CMD_LOST
                                                        : DBX_LOCAL_CMD_PENDING;
  return DBX_OK;
}

/* Ask every running command of a sandbox to stop (its supervisor kills the
 * process group at once) and wait up to STOP_WAIT_MS in all for their
 * statuses, so that a deleted sandbox leaves no process behind. Best effort:
 * a command still running after that is logged. */
#define STOP_WAIT_MS 5000
static void stop_commands(dbx_local *d, const char *sbdir) {
  char *cmds = dbx_asprintf("%s/meta/cmds", sbdir);
  DIR *dp = cmds ? opendir(cmds) : NULL;
  int64_t until = dbx_mono_ns() + (int64_t)STOP_WAIT_MS * 1000000;
  for (const struct dirent *e = dp ? readdir(dp) : NULL; e != NULL; e = readdir(dp)) {
    if (e->d_name[0] == '.') continue;
    int dfd = openat(dirfd(dp), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;
    dbx_local_cmd_status st;
    if (poll_at(d, dfd, e->d_name, &st) == DBX_OK && st.state == DBX_LOCAL_CMD_RUNNING &&
        write_atomic(dfd, "kill", "kill\n", 5) == 0) {
      while (dbx_mono_ns() < until && poll_at(d, dfd, e->d_name, &st) == DBX_OK &&
             st.state == DBX_LOCAL_CMD_RUNNING)
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
      if (st.state == DBX_LOCAL_CMD_RUNNING)
        DBX_WARN("local", "command %s of %s did not stop within %d ms", e->d_name, sbdir,
                 STOP_WAIT_MS);
    }
    close(dfd);
  }
  if (dp) closedir(dp);
  free(cmds);
}

dbx_err dbx_local_exec_poll(dbx_local *d, const char *id, const char *cmd_id,
                            dbx_local_cmd_status *st) {
  int dfd;
  memset(st, 0, sizeof *st);
  dbx_err rc = cmd_open(d, id, cmd_id, &dfd);
  if (rc != DBX_OK) return rc;
  rc = poll_at(d, dfd, cmd_id, st);
  close(dfd);
  return rc;
}

dbx_err dbx_local_exec_wait_fd(dbx_local *d, const char *id, const char *cmd_id, int *fd) {
  int dfd;
  pid_t sup = 0;
  *fd = -1;
  dbx_err rc = cmd_open(d, id, cmd_id, &dfd);
  if (rc != DBX_OK) return rc;
  if (faccessat(dfd, "status", F_OK, 0) == 0 || recorded_alive(dfd, "supervisor", &sup) != 1) {
    close(dfd);
    return fail(d, DBX_ESTATE, "command '%s' has no running supervisor", cmd_id);
  }
  int pfd = (int)syscall(SYS_pidfd_open, sup, 0);
  int e = errno;
  /* the pid may have been reused between the check and the open: check again */
  if (pfd >= 0 && recorded_alive(dfd, "supervisor", &sup) != 1) {
    close(pfd);
    pfd = -1;
    e = ESRCH;
  }
  close(dfd);
  if (pfd < 0)
    return fail(d, e == ESRCH ? DBX_ESTATE : DBX_EIO, "command '%s': pidfd_open: %s", cmd_id,
                strerror(e));
  fcntl(pfd, F_SETFD, FD_CLOEXEC);
  *fd = pfd;
  return DBX_OK;
}

/* Claim command dir (of cmd_id) for attempt: refused (DBX_ESTATE) when a
 * newer attempt owns it. *ofd: the owner file, locked until closed. */
static dbx_err owner_claim(dbx_local *d, const char *dir, const char *cmd_id, int32_t attempt,
                           int *ofd) {
  *ofd = owner_open(dir);
  if (*ofd < 0) return fail(d, DBX_EIO, "cannot lock the owner of command '%s': %s", cmd_id,
                            strerror(errno));
  int32_t owner = owner_read(*ofd);
  if (owner > attempt)
    return fail(d, DBX_ESTATE, "command '%s' belongs to attempt %d; attempt %d is superseded",
                cmd_id, (int)owner, (int)attempt);
  if (owner < attempt && owner_write(*ofd, attempt) != 0)
    return fail(d, DBX_EIO, "cannot record the owner of command '%s': %s", cmd_id,
                strerror(errno));
  return DBX_OK;
}

#define CLEAR_WAIT_MS 1000
/* Wait (up to CLEAR_WAIT_MS) until nothing of command dir runs, then remove
 * its files so that it can start again; *dfd is reopened on the new folder
 * and *st polled (PENDING). */
static dbx_err clear_killed(dbx_local *d, int *dfd, const char *dir, const char *cmd_id,
                            dbx_local_cmd_status *st) {
  /* short: the caller cannot heartbeat meanwhile; a kill takes ~100 ms */
  int64_t until = dbx_mono_ns() + (int64_t)CLEAR_WAIT_MS * 1000000;
  dbx_err rc;
  while ((rc = poll_at(d, *dfd, cmd_id, st)) == DBX_OK && st->state == DBX_LOCAL_CMD_RUNNING &&
         dbx_mono_ns() < until)
    nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
  if (rc != DBX_OK) return rc;
  if (st->state == DBX_LOCAL_CMD_RUNNING)
    return fail(d, DBX_ESTATE, "command '%s' is still stopping", cmd_id);
  DBX_INFO("local", "command %s: killed for a superseded attempt; starting it again", cmd_id);
  close(*dfd);
  *dfd = -1;
  if ((rc = rmrf(d, dir)) != DBX_OK) return rc;
  if (mkdir_p(dir) != 0 || (*dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return fail(d, DBX_EIO, "cannot create '%s': %s", dir, strerror(errno));
  return poll_at(d, *dfd, cmd_id, st);
}

dbx_err dbx_local_exec_start(dbx_local *d, const char *id, const char *cmd_id,
                             const dbx_local_exec_opts *opts, int *adopted) {
  dbx_err rc;
  char *dir = NULL, *script = NULL;
  strvec env = {0}, argv = {0};
  int cwdfd = -1, dfd = -1, sv[2] = {-1, -1}, ofd = -1;
  sbuf spec = {0};
  pid_t pid = -1;
  int fa_ok = 0, attr_ok = 0;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  if (adopted) *adopted = 0;
  if (opts == NULL || opts->command == NULL) return fail(d, DBX_EINVAL, "no command");
  if (!valid_name(cmd_id))
    return fail(d, DBX_EINVAL, "invalid command id '%s'", cmd_id ? cmd_id : "(null)");
  if ((rc = sb_check(d, id, 1)) != DBX_OK) return rc;
  dir = cmd_dir(d, id, cmd_id);
  if (dir == NULL) return DBX_ENOMEM;
  if (mkdir_p(dir) != 0) {
    rc = fail(d, DBX_EIO, "cannot create '%s': %s", dir, strerror(errno));
    goto out;
  }
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    rc = fail(d, DBX_EIO, "cannot open '%s': %s", dir, strerror(errno));
    goto out;
  }
  if (opts->attempt > 0 && (rc = owner_claim(d, dir, cmd_id, opts->attempt, &ofd)) != DBX_OK)
    goto out;
  dbx_local_cmd_status st;
  if ((rc = poll_at(d, dfd, cmd_id, &st)) != DBX_OK) goto out;
  if (st.state != DBX_LOCAL_CMD_PENDING && opts->attempt > 0 && kill_asker(dfd) > 0 &&
      kill_asker(dfd) < opts->attempt) {
    /* killed at the request of a superseded attempt (its worker paused past
     * its heartbeat timeout, say): not this attempt's doing, so run it anew
     * once nothing of the old run is left (a later attempt exists only for
     * a safe_to_retry activity) */
    rc = clear_killed(d, &dfd, dir, cmd_id, &st);
    if (rc != DBX_OK) goto out;
  }
  if (st.state != DBX_LOCAL_CMD_PENDING) {
    if (adopted) *adopted = 1;
    goto out;
  }
  size_t clen = strlen(opts->command);
  char *cmd[] = {"/bin/sh", "-c", (char *)opts->command, NULL};
  if (clen > ARGV_INLINE_MAX) {
    script = dbx_asprintf("%s/cmd.sh", dir);
    if (script == NULL || write_atomic(dfd, "cmd.sh", opts->command, clen) != 0) {
      rc = fail(d, DBX_EIO, "cannot write the command script of '%s'", id);
      goto out;
    }
    cmd[1] = script;
    cmd[2] = NULL;
  }
  rc = sandbox_prepare(d, id, cmd, script, NULL, 0, opts->cwd, opts->env, 1, &argv, &env,
                       &cwdfd);
  if (rc != DBX_OK) goto out;
  if (sb_add(&spec, SPEC_MAGIC) || sb_addnum(&spec, opts->timeout_ms) ||
      sb_addnum(&spec, (long long)opts->stdout_cap_bytes) ||
      sb_addnum(&spec, (long long)opts->stderr_cap_bytes) || sb_addnum(&spec, (long long)argv.n)) {
    rc = DBX_ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < argv.n; i++)
    if (sb_add(&spec, argv.v[i])) rc = DBX_ENOMEM;
  if (sb_addnum(&spec, (long long)env.n)) rc = DBX_ENOMEM;
  for (size_t i = 0; i < env.n; i++)
    if (sb_add(&spec, env.v[i])) rc = DBX_ENOMEM;
  if (rc != DBX_OK) goto out;
  /* A socket, not a pipe: send(MSG_NOSIGNAL) cannot raise SIGPIPE in the
   * caller when the supervisor exits early. */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    rc = fail(d, DBX_EIO, "socketpair: %s", strerror(errno));
    goto out;
  }
  if (posix_spawn_file_actions_init(&fa) != 0 || posix_spawnattr_init(&attr) != 0) {
    rc = DBX_ENOMEM;
    goto out;
  }
  fa_ok = attr_ok = 1;
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, cwdfd, 3);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK);
  char *sargv[] = {"durabox-supervise", SUPERVISE_ARG, dir, NULL};
  /* The path read at open (valgrind reports its client there); the magic
   * link when that file is gone (e.g. replaced by an upgrade). */
  const char *exe = d->self_exe && access(d->self_exe, X_OK) == 0 ? d->self_exe : "/proc/self/exe";
  int e = posix_spawn(&pid, exe, &fa, &attr, sargv, environ);
  if (e != 0) {
    pid = -1;
    rc = fail(d, DBX_EIO, "cannot start the supervisor: %s", strerror(e));
    goto out;
  }
  close(sv[1]);
  sv[1] = -1;
  for (size_t off = 0; off < spec.len;) {
    ssize_t w = send(sv[0], spec.p + off, spec.len - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break; /* it exited early; its exit code says why */
    off += (size_t)w;
  }
  close(sv[0]);
  sv[0] = -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pid = -1;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 3) {
    if (adopted) *adopted = 1;
  } else if (code != 0) {
    rc = fail(d, DBX_EIO, "the supervisor of command '%s' failed (status %d)", cmd_id, status);
  }
out:
  if (pid > 0) waitpid(pid, NULL, 0);
  if (fa_ok) posix_spawn_file_actions_destroy(&fa);
  if (attr_ok) posix_spawnattr_destroy(&attr);
  for (int i = 0; i < 2; i++)
    if (sv[i] >= 0) close(sv[i]);
  if (spec.p) {
    memset(spec.p, 0, spec.len); /* it holds the environment, secrets included */
    free(spec.p);
  }
  sv_free(&env);
  sv_free(&argv);
  if (cwdfd >= 0) close(cwdfd);
  if (dfd >= 0) close(dfd);
  if (ofd >= 0) close(ofd); /* releases the owner lock, after the start */
  free(script);
  free(dir);
  return rc;
}

dbx_err dbx_local_exec_read(dbx_local *d, const char *id, const char *cmd_id, int stream,
                            uint64_t offset, void *buf, size_t cap, size_t *n) {
  int dfd;
  *n = 0;
  if (stream != 1 && stream != 2) return fail(d, DBX_EINVAL, "stream must be 1 or 2");
  dbx_err rc = cmd_open(d, id, cmd_id, &dfd);
  if (rc != DBX_OK) return rc;
  int fd = openat(dfd, stream == 1 ? "stdout" : "stderr", O_RDONLY | O_CLOEXEC);
  close(dfd);
  if (fd < 0) return errno == ENOENT ? DBX_OK : fail(d, DBX_EIO, "%s", strerror(errno));
  ssize_t r;
  do {
    r = pread(fd, buf, cap, (off_t)offset);
  } while (r < 0 && errno == EINTR);
  int e = errno;
  close(fd);
  if (r < 0) return fail(d, DBX_EIO, "read output of '%s': %s", cmd_id, strerror(e));
  *n = (size_t)r;
  return DBX_OK;
}

dbx_err dbx_local_exec_kill(dbx_local *d, const char *id, const char *cmd_id) {
  return dbx_local_exec_kill_as(d, id, cmd_id, 0, NULL);
}

dbx_err dbx_local_exec_kill_as(dbx_local *d, const char *id, const char *cmd_id, int32_t attempt,
                               int *superseded) {
  int dfd, ofd = -1;
  if (superseded) *superseded = 0;
  dbx_err rc = cmd_open(d, id, cmd_id, &dfd);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  char text[32];
  int tl = snprintf(text, sizeof text, attempt > 0 ? "kill %d\n" : "kill\n", (int)attempt);
  if (attempt > 0) {
    char *dir = cmd_dir(d, id, cmd_id);
    ofd = dir ? owner_open(dir) : -1;
    free(dir);
    if (ofd < 0) {
      rc = fail(d, DBX_EIO, "cannot lock the owner of command '%s'", cmd_id);
      goto out;
    }
    int32_t owner = owner_read(ofd);
    if (owner > attempt) { /* a newer attempt re-attached: not ours to kill */
      DBX_INFO("local", "command %s belongs to attempt %d: not killed for attempt %d", cmd_id,
               (int)owner, (int)attempt);
      if (superseded) *superseded = 1;
      goto out;
    }
  }
  if (write_atomic(dfd, "kill", text, (size_t)tl) != 0)
    rc = fail(d, DBX_EIO, "cannot ask command '%s' to stop: %s", cmd_id, strerror(errno));
out:
  if (ofd >= 0) close(ofd);
  close(dfd);
  return rc;
}

/* A finished stream file of len bytes for a stream of total bytes: when
 * total > len the file is full (len is its cap) and the bytes after the head
 * are the ring sup_keep wrote; rotate them into order, in place. Returns the
 * head's length (len when nothing was cut). */
static size_t ring_in_order(uint8_t *buf, size_t len, uint64_t total) {
  size_t tail = DBX_DRV_TAIL_BYTES(len), head = len - tail;
  if (total <= len || tail == 0) return total <= len ? len : head;
  size_t start = (size_t)((total - head) % tail); /* the oldest byte of the ring */
  if (start == 0) return head;
  uint8_t *t = dbx_malloc(start);
  if (t == NULL) return head; /* out of order, but nothing lost or overrun */
  memcpy(t, buf + head, start);
  memmove(buf + head, buf + head + start, tail - start);
  memcpy(buf + head + tail - start, t, start);
  free(t);
  return head;
}

dbx_err dbx_local_exec_collect(dbx_local *d, const char *id, const char *cmd_id,
                               dbx_local_exec_result *res) {
  int dfd;
  dbx_local_cmd_status st;
  memset(res, 0, sizeof *res);
  dbx_err rc = cmd_open(d, id, cmd_id, &dfd);
  if (rc != DBX_OK) return rc;
  if ((rc = poll_at(d, dfd, cmd_id, &st)) != DBX_OK) goto out;
  if (st.state != DBX_LOCAL_CMD_FINISHED) {
    rc = fail(d, DBX_ESTATE, "command '%s' has not finished", cmd_id);
    goto out;
  }
  res->exit_code = st.exit_code;
  res->signal = st.signal;
  res->timed_out = st.timed_out;
  res->duration_ms = st.duration_ms;
  memcpy(res->not_started, st.not_started, sizeof res->not_started);
  static const char *names[2] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    uint64_t size = i == 0 ? st.stdout_size : st.stderr_size;
    uint8_t *buf = dbx_malloc((size_t)size + 1);
    if (buf == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    size_t got = 0;
    int fd = openat(dfd, names[i], O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && got < size) {
      ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (fd >= 0) close(fd);
    buf[got] = '\0';
    uint64_t total = i == 0 ? st.stdout_total : st.stderr_total;
    size_t head_len = ring_in_order(buf, got, total);
    if (i == 0) {
      res->stdout_buf = buf;
      res->stdout_len = got;
      res->stdout_total = total;
      res->stdout_truncated = total > got;
      res->stdout_head_len = head_len;
    } else {
      res->stderr_buf = buf;
      res->stderr_len = got;
      res->stderr_total = total;
      res->stderr_truncated = total > got;
      res->stderr_head_len = head_len;
    }
  }
out:
  close(dfd);
  if (rc != DBX_OK) dbx_local_exec_result_cleanup(res);
  return rc;
}

dbx_err dbx_local_exec_forget(dbx_local *d, const char *id, const char *cmd_id) {
  dbx_local_cmd_status st;
  dbx_err rc = dbx_local_exec_poll(d, id, cmd_id, &st);
  if (rc == DBX_ENOTFOUND) return DBX_OK;
  if (rc != DBX_OK) return rc;
  if (st.state == DBX_LOCAL_CMD_RUNNING)
    return fail(d, DBX_ESTATE, "command '%s' is still running", cmd_id);
  char *dir = cmd_dir(d, id, cmd_id);
  if (dir == NULL) return DBX_ENOMEM;
  rc = rmrf(d, dir);
  free(dir);
  return rc;
}

/* ---- git ---- */

dbx_err dbx_local_git_commit(dbx_local *d, const char *id, const char *message,
                             const char *author, char **sha_out, int *nothing_to_commit) {
  return dbx_local_git_commit_at(d, id, NULL, message, author, sha_out, nothing_to_commit);
}

dbx_err dbx_local_git_commit_at(dbx_local *d, const char *id, const char *repo_path,
                                const char *message, const char *author, char **sha_out,
                                int *nothing_to_commit) {
  return dbx_local_git_commit_paths(d, id, repo_path, NULL, 0, message, author, sha_out,
                                    nothing_to_commit);
}

/* argv of one git_commit step: the safe prefix, the verb's words, then (with
 * paths) "--" and the paths. */
static dbx_err git_commit_argv(const char *const *verb, const char *const *paths,
                               size_t npaths, strvec *argv) {
  static const char *const pre[] = {"git", "--literal-pathspecs", "-c", "core.hooksPath=/dev/null",
                                    "-c", "core.fsmonitor=false", "-c", "commit.gpgsign=false",
                                    NULL};
  for (size_t i = 0; pre[i]; i++)
    if (sv_pushs(argv, pre[i])) return DBX_ENOMEM;
  for (size_t i = 0; verb[i]; i++)
    if (sv_pushs(argv, verb[i])) return DBX_ENOMEM;
  if (npaths > 0 && sv_pushs(argv, "--")) return DBX_ENOMEM;
  for (size_t i = 0; i < npaths; i++)
    if (sv_pushs(argv, paths[i])) return DBX_ENOMEM;
  return DBX_OK;
}

/* Idempotent commits: a message whose last line is a trailer
 * "Durabox-Commit: <token> <attempt>" (sandbox.git_commit adds one naming
 * its activity and attempt) is a retry of every commit whose message has
 * the same token with a lower attempt. When one of the last
 * COMMIT_LANDED_DEPTH commits of HEAD is such a commit (it landed before
 * its attempt's result was recorded), *sha_out is its sha and nothing is
 * committed. A repository without commits has none. */
#define COMMIT_TRAILER "Durabox-Commit: "
#define COMMIT_LANDED_DEPTH "200"
static const char *landed_in(const char *body, size_t len, const char *key, size_t klen,
                             long attempt) {
  for (const char *l = body; l && l < body + len; l = memchr(l, '\n', (size_t)(body + len - l))) {
    if (*l == '\n') l++;
    if ((size_t)(body + len - l) > klen && memcmp(l, key, klen) == 0) {
      long k = strtol(l + klen, NULL, 10);
      if (k > 0 && k < attempt) return l;
    }
  }
  return NULL;
}

static dbx_err commit_landed(dbx_local *d, const char *id, const char *repo_path,
                             const char *message, const char *const *env, char **sha_out) {
  const char *t = strstr(message, "\n" COMMIT_TRAILER), *next;
  while (t && (next = strstr(t + 1, "\n" COMMIT_TRAILER)) != NULL) t = next;
  if (t == NULL || strchr(t + 1, '\n') != NULL) return DBX_OK;
  const char *sp = strrchr(t + 1, ' ');
  long attempt = sp ? strtol(sp + 1, NULL, 10) : 0;
  if (attempt <= 1) return DBX_OK; /* a first attempt retries nothing */
  size_t klen = (size_t)(sp + 1 - (t + 1)); /* "Durabox-Commit: <token> " */
  char *argv[] = {"git", "log", "-n", COMMIT_LANDED_DEPTH, "--format=%H%x00%B%x00", "HEAD", "--",
                  NULL};
  dbx_local_exec_result r = {0};
  dbx_err rc = sandbox_run(d, id, argv, NULL, repo_path && *repo_path ? repo_path : NULL, env, 0,
                           0, (size_t)4 << 20, 4096, NULL, NULL, &r);
  if (rc != DBX_OK || r.exit_code != 0) { /* exit 128: no HEAD yet */
    dbx_local_exec_result_cleanup(&r);
    return rc;
  }
  const char *p = (const char *)r.stdout_buf, *end = p + r.stdout_len;
  while (p < end && *sha_out == NULL) {
    while (p < end && (*p == '\n' || *p == '\0')) p++;
    const char *sha = p, *z = memchr(p, '\0', (size_t)(end - p));
    if (z == NULL) break;
    const char *body = z + 1, *bz = memchr(body, '\0', (size_t)(end - body));
    if (bz == NULL) break;
    if (landed_in(body, (size_t)(bz - body), t + 1, klen, attempt)) {
      *sha_out = dbx_strndup(sha, (size_t)(z - sha));
      if (*sha_out == NULL) rc = DBX_ENOMEM;
      else DBX_INFO("local", "sandbox %s: commit %s already landed (%s)", id, *sha_out, t + 1);
    }
    p = bz + 1;
  }
  dbx_local_exec_result_cleanup(&r);
  return rc;
}

dbx_err dbx_local_git_commit_paths(dbx_local *d, const char *id, const char *repo_path,
                                   const char *const *paths, size_t npaths, const char *message,
                                   const char *author, char **sha_out, int *nothing_to_commit) {
  dbx_err rc = DBX_OK;
  char *name = NULL, *email = NULL, *e_an = NULL, *e_ae = NULL, *e_cn = NULL, *e_ce = NULL;
  dbx_local_exec_result r = {0};
  strvec argv = {0};
  *sha_out = NULL;
  *nothing_to_commit = 0;
  if (message == NULL || author == NULL || *author == '\0')
    return fail(d, DBX_EINVAL, "git commit needs a message and an author");
  for (size_t i = 0; i < npaths; i++) /* relative to the repository, never out of it */
    if (paths == NULL || paths[i] == NULL || (rc = path_check(d, paths[i], 0)) != DBX_OK)
      return paths && paths[i] ? rc : fail(d, DBX_EINVAL, "git commit: path %zu is missing", i);
  const char *lt = strchr(author, '<'), *gt = lt ? strchr(lt, '>') : NULL;
  if (lt && gt) {
    const char *ne = lt;
    while (ne > author && ne[-1] == ' ') ne--;
    name = dbx_strndup(author, (size_t)(ne - author));
    email = dbx_strndup(lt + 1, (size_t)(gt - lt - 1));
  } else {
    name = dbx_strdup(author);
    email = dbx_strdup("");
  }
  e_an = dbx_asprintf("GIT_AUTHOR_NAME=%s", name ? name : "");
  e_ae = dbx_asprintf("GIT_AUTHOR_EMAIL=%s", email ? email : "");
  e_cn = dbx_asprintf("GIT_COMMITTER_NAME=%s", name ? name : "");
  e_ce = dbx_asprintf("GIT_COMMITTER_EMAIL=%s", email ? email : "");
  if (!name || !email || !e_an || !e_ae || !e_cn || !e_ce) {
    rc = DBX_ENOMEM;
    goto out;
  }
  const char *env[] = {e_an, e_ae, e_cn, e_ce, "GIT_CONFIG_NOSYSTEM=1",
                       "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", NULL};
  /* Staged: every change (new, modified, deleted; .gitignore respected) of
   * the repository, or of the given paths only; the commit holds just those
   * (with paths: git commit --only), whatever else the index had. */
  if ((rc = commit_landed(d, id, repo_path, message, env, sha_out)) != DBX_OK || *sha_out)
    goto out;
  static const char *const add[] = {"add", "-A", NULL};
  static const char *const diff[] = {"diff", "--cached", "--quiet", NULL};
  const char *const commit[] = {"commit", "-q", "--no-verify", "-m", message, NULL};
  static const char *const head[] = {"rev-parse", "HEAD", NULL};
  const char *const *steps[] = {add, diff, commit, head};
  for (int i = 0; i < 4; i++) {
    sv_free(&argv);
    if ((rc = git_commit_argv(steps[i], paths, i < 3 ? npaths : 0, &argv)) != DBX_OK) goto out;
    rc = sandbox_run(d, id, argv.v, NULL, repo_path && *repo_path ? repo_path : NULL, env, 0,
                     0, 4096, 4096, NULL, NULL, &r);
    if (rc != DBX_OK) goto out;
    if (i == 1 && r.exit_code == 0) {
      *nothing_to_commit = 1;
      goto out;
    }
    if (r.exit_code != 0 && !(i == 1 && r.exit_code == 1)) {
      rc = failk(d, DBX_EIO, tool_kind((const char *)r.stderr_buf),
                 "git %s in sandbox '%s' failed (exit %d): %.600s", steps[i][0], id,
                 r.exit_code, (const char *)r.stderr_buf);
      goto out;
    }
    if (i == 3) {
      size_t n = r.stdout_len;
      while (n > 0 && (r.stdout_buf[n - 1] == '\n' || r.stdout_buf[n - 1] == '\r')) n--;
      *sha_out = dbx_strndup((const char *)r.stdout_buf, n);
      if (*sha_out == NULL) rc = DBX_ENOMEM;
    }
    dbx_local_exec_result_cleanup(&r);
  }
out:
  dbx_local_exec_result_cleanup(&r);
  sv_free(&argv);
  free(name);
  free(email);
  free(e_an);
  free(e_ae);
  free(e_cn);
  free(e_ce);
  return rc;
}

/* Run one git step in the sandbox; a non-zero exit is DBX_EIO with git's words.
 * env: NULL for git_env. */
static dbx_err git_step_env(dbx_local *d, const char *id, char *const *argv, const char *what,
                            const char *bind, int bind_rw, const char *cwd,
                            const char *const *env) {
  dbx_local_exec_result r = {0};
  dbx_err rc = sandbox_run_bind(d, id, argv, NULL, bind, bind_rw, cwd, env ? env : git_env, 0, 0,
                                4096, 8192, NULL, NULL, &r);
  if (rc == DBX_OK && r.exit_code != 0)
    rc = failk(d, DBX_EIO, tool_kind((const char *)r.stderr_buf),
               "%s in sandbox '%s' failed (exit %d): %.600s", what, id, r.exit_code,
               (const char *)r.stderr_buf);
  dbx_local_exec_result_cleanup(&r);
  return rc;
}

static dbx_err git_step(dbx_local *d, const char *id, char *const *argv, const char *what,
                        const char *bind, int bind_rw, const char *cwd) {
  return git_step_env(d, id, argv, what, bind, bind_rw, cwd, NULL);
}

/* A host path to bind for git: an existing absolute folder, else NULL. */
static const char *git_host_path(const dbx_local *d, const char *loc) {
  return d->use_bwrap && loc && loc[0] == '/' && is_dir(loc) ? loc : NULL;
}

dbx_err dbx_local_git_clone(dbx_local *d, const char *id, const char *url, const char *path,
                            const char *ref) {
  return dbx_local_git_clone_cred(d, id, url, path, ref, NULL);
}

dbx_err dbx_local_git_clone_cred(dbx_local *d, const char *id, const char *url, const char *path,
                                 const char *ref, const dbx_drv_git_cred *cred) {
  dbx_err rc;
  char *copy = NULL;
  git_envv ge = {0};
  if (url == NULL || *url == '\0' || url[0] == '-')
    return fail(d, DBX_EINVAL, "git clone needs a repository path or URL");
  if ((rc = path_check(d, path, 0)) != DBX_OK) return rc;
  if ((rc = sb_check(d, id, 1)) != DBX_OK) return rc;
  if ((rc = git_envv_make(d, cred, url, &ge)) != DBX_OK) goto out;
  copy = dbx_strdup(path);
  if (copy == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  size_t n = strlen(copy);
  while (n > 0 && copy[n - 1] == '/') copy[--n] = '\0';
  char *slash = strrchr(copy, '/');
  const char *base = slash ? slash + 1 : copy;
  if (*base == '\0' || strcmp(base, ".") == 0) {
    rc = fail(d, DBX_EINVAL, "git clone: path '%s' names no folder", path);
    goto out;
  }
  const char *parent = NULL;
  if (slash) {
    *slash = '\0';
    parent = copy;
    char *mk[] = {"mkdir", "-p", "--", copy, NULL}; /* inside the sandbox */
    if ((rc = git_step(d, id, mk, "mkdir", NULL, 0, NULL)) != DBX_OK) goto out;
  }
  /* cwd = the parent, checked beneath the workspace; base has no '/' */
  char *rm[] = {"rm", "-rf", "--", (char *)base, NULL};
  if ((rc = git_step(d, id, rm, "clearing the clone target", NULL, 0, parent)) != DBX_OK)
    goto out;
  dbx_drv_err rk = local_repo_kind(url);
  if (rk != DBX_DRV_OK) {
    rc = fail_repo(d, rk, "git clone", url);
    goto out;
  }
  char *clone[] = {GIT_SAFE, "clone", "-q", "--no-hardlinks", "--", (char *)url, (char *)base,
                   NULL};
  char *clone_c[] = {GIT_SAFE, GIT_CRED_ARGS, "clone", "-q", "--no-hardlinks", "--", (char *)url,
                     (char *)base, NULL};
  rc = git_step_env(d, id, cred ? clone_c : clone, "git clone", git_host_path(d, url), 0, parent,
                    (const char *const *)ge.v);
  if (rc == DBX_OK && ref && *ref) {
    char *co[] = {GIT_SAFE, "-C", (char *)base, "-c", "advice.detachedHead=false", "checkout",
                  "-q", (char *)ref, "--", NULL};
    rc = git_step(d, id, co, "git checkout", NULL, 0, parent);
  }
out:
  git_envv_clear(&ge, cred);
  free(copy);
  return rc;
}

dbx_err dbx_local_git_push(dbx_local *d, const char *id, const char *repo_path,
                           const char *remote, const char *branch) {
  return dbx_local_git_push_cred(d, id, repo_path, remote, branch, NULL);
}

dbx_err dbx_local_git_push_cred(dbx_local *d, const char *id, const char *repo_path,
                                const char *remote, const char *branch,
                                const dbx_drv_git_cred *cred) {
  dbx_err rc;
  git_envv ge = {0};
  if (remote == NULL || *remote == '\0') remote = "origin";
  if (remote[0] == '-' || (branch && branch[0] == '-'))
    return fail(d, DBX_EINVAL, "git push: remote and branch may not start with '-'");
  if (repo_path && *repo_path && (rc = path_check(d, repo_path, 0)) != DBX_OK) return rc;
  if ((rc = sb_check(d, id, 1)) != DBX_OK) return rc;
  if ((rc = git_envv_make(d, cred, remote, &ge)) != DBX_OK) goto out;
  const char *ref = branch && *branch ? branch : "HEAD";
  char *push[] = {GIT_SAFE, "push", "-q", "--no-verify", "--", (char *)remote, (char *)ref, NULL};
  char *push_c[] = {GIT_SAFE, GIT_CRED_ARGS, "push", "-q", "--no-verify", "--", (char *)remote,
                    (char *)ref, NULL};
  rc = git_step_env(d, id, cred ? push_c : push, "git push", git_host_path(d, remote), 1,
                    repo_path && *repo_path ? repo_path : NULL, (const char *const *)ge.v);
out:
  git_envv_clear(&ge, cred);
  return rc;
}

dbx_err dbx_local_git_pull(dbx_local *d, const char *id, const char *repo_path,
                           const char *remote, const char *branch, const dbx_drv_git_cred *cred) {
  dbx_err rc;
  git_envv ge = {0};
  if (remote == NULL || *remote == '\0') remote = "origin";
  if (remote[0] == '-' || (branch && branch[0] == '-'))
    return fail(d, DBX_EINVAL, "git pull: remote and branch may not start with '-'");
  if (repo_path && *repo_path && (rc = path_check(d, repo_path, 0)) != DBX_OK) return rc;
  if ((rc = sb_check(d, id, 1)) != DBX_OK) return rc;
  if ((rc = git_envv_make(d, cred, remote, &ge)) != DBX_OK) goto out;
  char *br = branch && *branch ? (char *)branch : NULL;
  char *pull[] = {GIT_SAFE, "pull", "-q", "--ff-only", "--no-rebase", "--", (char *)remote, br, NULL};
  char *pull_c[] = {GIT_SAFE, GIT_CRED_ARGS, "pull", "-q", "--ff-only", "--no-rebase", "--",
                    (char *)remote, br, NULL};
  rc = git_step_env(d, id, cred ? pull_c : pull, "git pull", git_host_path(d, remote), 0,
                    repo_path && *repo_path ? repo_path : NULL, (const char *const *)ge.v);
out:
  git_envv_clear(&ge, cred);
  return rc;
}

/* ---- existence, labels, list ---- */

dbx_err dbx_local_sandbox_exists(dbx_local *d, const char *id, int *running) {
  dbx_err rc = sb_check(d, id, 0);
  if (rc != DBX_OK) return rc;
  if (running) {
    char *st = dbx_asprintf("%s/sandboxes/%s/meta/state", d->home, id);
    char *state = NULL;
    rc = st ? read_meta(d, st, &state) : DBX_ENOMEM;
    *running = rc == DBX_OK && strcmp(state, "running\n") == 0;
    free(st);
    free(state);
    if (rc == DBX_ENOMEM) return rc; /* absent or unreadable: not running */
  }
  return DBX_OK;
}

/* Parse meta/labels text into a malloc'd array. */
static dbx_err labels_parse(const char *text, dbx_drv_label **out, size_t *n) {
  size_t cap = 0, cnt = 0;
  dbx_drv_label *v = NULL;
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
    if (nl == NULL || eq == NULL || eq > nl) break; /* a torn line: ignore the rest */
    if (cnt == cap) {
      cap = cap ? cap * 2 : 8;
      dbx_drv_label *nv = dbx_realloc(v, cap * sizeof *nv);
      if (nv == NULL) goto oom;
      v = nv;
    }
    v[cnt].key = dbx_strndup(p, (size_t)(eq - p));
    v[cnt].value = dbx_strndup(eq + 1, (size_t)(nl - eq - 1));
    cnt++;
    if (v[cnt - 1].key == NULL || v[cnt - 1].value == NULL) goto oom;
    p = nl + 1;
  }
  *out = v;
  *n = cnt;
  return DBX_OK;
oom:
  dbx_drv_labels_free(v, cnt);
  return DBX_ENOMEM;
}

dbx_err dbx_local_sandbox_labels(dbx_local *d, const char *id, dbx_drv_label **labels,
                                 size_t *n) {
  *labels = NULL;
  *n = 0;
  dbx_err rc = sb_check(d, id, 0);
  if (rc != DBX_OK) return rc;
  char *p = dbx_asprintf("%s/sandboxes/%s/meta/labels", d->home, id);
  if (p == NULL) return DBX_ENOMEM;
  char *text = NULL;
  rc = read_meta(d, p, &text); /* absent: a sandbox made before labels existed, none */
  free(p);
  if (rc != DBX_OK && rc != DBX_ENOTFOUND) return rc;
  rc = labels_parse(text ? text : "", labels, n);
  free(text);
  return rc;
}

static int labels_match(const dbx_drv_label *have, size_t nh, const dbx_drv_label *want,
                        size_t nw) {
  for (size_t i = 0; i < nw; i++) {
    int found = 0;
    for (size_t j = 0; j < nh && !found; j++)
      found = strcmp(have[j].key, want[i].key) == 0 && strcmp(have[j].value, want[i].value) == 0;
    if (!found) return 0;
  }
  return 1;
}

dbx_err dbx_local_sandbox_list(dbx_local *d, const dbx_drv_label *match, size_t nmatch,
                               char ***ids, size_t *n) {
  dbx_err rc = DBX_OK;
  char **v = NULL;
  size_t cnt = 0, cap = 0;
  *ids = NULL;
  *n = 0;
  char *dir = dbx_asprintf("%s/sandboxes", d->home);
  DIR *dp = dir ? opendir(dir) : NULL;
  if (dp == NULL) {
    rc = dir ? fail(d, DBX_EIO, "cannot list '%s': %s", dir, strerror(errno)) : DBX_ENOMEM;
    goto out;
  }
  for (const struct dirent *e = readdir(dp); e != NULL; e = readdir(dp)) {
    if (!valid_name(e->d_name) || sb_check(d, e->d_name, 0) != DBX_OK) continue;
    dbx_drv_label *l = NULL;
    size_t nl = 0;
    if (dbx_local_sandbox_labels(d, e->d_name, &l, &nl) != DBX_OK) continue; /* deleted meanwhile */
    int keep = labels_match(l, nl, match, nmatch);
    dbx_drv_labels_free(l, nl);
    if (!keep) continue;
    if (cnt == cap) {
      cap = cap ? cap * 2 : 16;
      char **nv = dbx_realloc(v, cap * sizeof *nv);
      if (nv == NULL) {
        rc = DBX_ENOMEM;
        goto out;
      }
      v = nv;
    }
    if ((v[cnt] = dbx_strdup(e->d_name)) == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    cnt++;
  }
out:
  if (dp) closedir(dp);
  free(dir);
  if (rc != DBX_OK) {
    dbx_drv_names_free(v, cnt);
    return rc;
  }
  *ids = v;
  *n = cnt;
  return DBX_OK;
}

/* ---- disk use and leftovers (`durabox sandbox list / gc`) ---- */

static int any_command_running(dbx_local *d, const char *sbdir);

int dbx_local_sandbox_busy(dbx_local *d, const char *id) {
  if (sb_check(d, id, 0) != DBX_OK) return 0;
  char *dir = sb_dir(d, id);
  int busy = dir ? any_command_running(d, dir) : 0;
  free(dir);
  return busy;
}

static _Thread_local uint64_t tl_disk_bytes;

static int disk_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)p;
  (void)f;
  if (flag != FTW_NS) tl_disk_bytes += (uint64_t)st->st_blocks * 512;
  return 0;
}

/* Bytes on disk (allocated blocks) of the tree at path; unreadable parts
 * count as 0. */
static uint64_t tree_disk_bytes(const char *path) {
  tl_disk_bytes = 0;
  (void)nftw(path, disk_one, 32, FTW_PHYS);
  return tl_disk_bytes;
}

dbx_err dbx_local_sandbox_disk_bytes(dbx_local *d, const char *id, uint64_t *bytes) {
  *bytes = 0;
  dbx_err rc = sb_check(d, id, 0);
  if (rc != DBX_OK) return rc;
  char *dir = sb_dir(d, id);
  if (dir == NULL) return DBX_ENOMEM;
  *bytes = tree_disk_bytes(dir);
  free(dir);
  return DBX_OK;
}

void dbx_local_leftovers_free(dbx_local_leftover *l, size_t n) {
  for (size_t i = 0; l && i < n; i++) {
    free(l[i].name);
    free(l[i].path);
  }
  free(l);
}

/* flock locks/<id> without waiting: the fd (close to unlock), -1 when
 * another holds it (busy) or it cannot be taken, -2 when id has no lock file
 * and create is 0 (nobody ever locked it). */
static int lock_id_try(const dbx_local *d, const char *id, int create) {
  char *p = dbx_asprintf("%s/locks/%s", d->home, id);
  if (p == NULL) return -1;
  int fd = open(p, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
  free(p);
  if (fd < 0) return errno == ENOENT && !create ? -2 : -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Appends one leftover (takes name and path). -1 on OOM (both freed). */
static int leftover_push(dbx_local_leftover **v, size_t *n, size_t *cap,
                         dbx_local_leftover_kind kind, char *name, char *path) {
  if (name == NULL || path == NULL) goto bad;
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    dbx_local_leftover *nv = dbx_realloc(*v, nc * sizeof *nv);
    if (nv == NULL) goto bad;
    *v = nv;
    *cap = nc;
  }
  (*v)[*n] = (dbx_local_leftover){.kind = kind, .name = name, .path = path,
                                  .bytes = tree_disk_bytes(path)};
  (*n)++;
  return 0;
bad:
  free(name);
  free(path);
  return -1;
}

/* Open home/sub for listing: DBX_OK with *dir (malloc'd) and *dp, or with
 * *dp NULL when it does not exist (nothing to list); DBX_ENOMEM, DBX_EIO. */
static dbx_err open_sub(dbx_local *d, const char *sub, char **dir, DIR **dp) {
  *dir = dbx_asprintf("%s/%s", d->home, sub);
  *dp = *dir ? opendir(*dir) : NULL;
  if (*dp != NULL) return DBX_OK;
  dbx_err rc = *dir == NULL ? DBX_ENOMEM
               : errno == ENOENT ? DBX_OK
                                 : fail(d, DBX_EIO, "cannot list '%s': %s", *dir, strerror(errno));
  free(*dir);
  *dir = NULL;
  return rc;
}

/* The leftovers of kind among the entries of home/sub. */
static dbx_err leftovers_in(dbx_local *d, const char *sub, dbx_local_leftover_kind kind,
                            dbx_local_leftover **v, size_t *n, size_t *cap) {
  char *dir;
  DIR *dp;
  dbx_err rc = open_sub(d, sub, &dir, &dp);
  if (dp == NULL) return rc;
  for (const struct dirent *e = readdir(dp); e != NULL; e = readdir(dp)) {
    if (e->d_name[0] == '.') continue;
    if (kind == DBX_LOCAL_LEFTOVER_PARTIAL) {
      /* a sandbox folder without meta/source: an interrupted create; one
       * whose create is under way holds its lock and is no leftover */
      if (!valid_name(e->d_name) || sb_check(d, e->d_name, 0) != DBX_ENOTFOUND) continue;
      int fd = lock_id_try(d, e->d_name, 0);
      if (fd == -1) continue;
      if (fd >= 0) close(fd);
    }
    if (leftover_push(v, n, cap, kind, dbx_strdup(e->d_name),
                      dbx_asprintf("%s/%s", dir, e->d_name)) != 0) {
      rc = DBX_ENOMEM;
      break;
    }
  }
  closedir(dp);
  free(dir);
  return rc;
}

void dbx_local_snapshots_free(dbx_local_snapshot *s, size_t n) {
  for (size_t i = 0; s && i < n; i++) {
    free(s[i].name);
    dbx_drv_labels_free(s[i].labels, s[i].nlabels);
  }
  free(s);
}

dbx_err dbx_local_snapshots(dbx_local *d, dbx_local_snapshot **out, size_t *n) {
  *out = NULL;
  *n = 0;
  char *dir;
  DIR *dp;
  dbx_err rc = open_sub(d, "snapshots", &dir, &dp);
  if (dp == NULL) return rc;
  dbx_local_snapshot *v = NULL;
  size_t cnt = 0, cap = 0;
  for (const struct dirent *e = readdir(dp); e != NULL; e = readdir(dp)) {
    if (!valid_name(e->d_name)) continue; /* ".tmp-*": half-made, a leftover */
    char *path = dbx_asprintf("%s/%s", dir, e->d_name);
    struct stat sb;
    if (path == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) { /* removed meanwhile, or not ours */
      free(path);
      continue;
    }
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      dbx_local_snapshot *nv = dbx_realloc(v, nc * sizeof *nv);
      if (nv == NULL) {
        free(path);
        rc = DBX_ENOMEM;
        break;
      }
      v = nv;
      cap = nc;
    }
    v[cnt] = (dbx_local_snapshot){.name = dbx_strdup(e->d_name),
                                  .bytes = tree_disk_bytes(path),
                                  .made_ms = (int64_t)sb.st_mtim.tv_sec * 1000 +
                                             sb.st_mtim.tv_nsec / 1000000};
    free(path);
    if (v[cnt].name == NULL) {
      rc = DBX_ENOMEM;
      break;
    }
    char *op = dbx_asprintf("%s/.owner-%s", dir, e->d_name), *text = NULL;
    dbx_err orc = op ? dbx_fs_read_all(op, &text, NULL) : DBX_ENOMEM;
    free(op);
    if (orc == DBX_OK && labels_parse(text, &v[cnt].labels, &v[cnt].nlabels) != DBX_OK)
      v[cnt].nlabels = 0; /* unreadable: listed with no owner */
    free(text);
    cnt++; /* counted before a failure below, so that free sees its labels */
    if (orc == DBX_ENOMEM) {
      rc = DBX_ENOMEM;
      break;
    }
  }
  closedir(dp);
  free(dir);
  if (rc != DBX_OK) {
    dbx_local_snapshots_free(v, cnt);
    return rc;
  }
  *out = v;
  *n = cnt;
  return DBX_OK;
}

/* A half-made snapshot's name: ".tmp-" then more, no '/'. */
static int snapshot_part_name(const char *name) {
  return name && strncmp(name, ".tmp-", 5) == 0 && name[5] && !strchr(name, '/') &&
         strcmp(name, ".") != 0 && strstr(name, "..") == NULL;
}

/* flock the half-made snapshot at path without waiting: the fd (close to
 * unlock), or -1 while a checkpoint still copies into it (or on error). */
static int snapshot_part_lock(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* snapshots/.tmp-*: copies of checkpoints that died before their rename
 * (a copy under way holds its flock and is no leftover). */
static dbx_err snapshot_parts(dbx_local *d, dbx_local_leftover **v, size_t *n, size_t *cap) {
  char *dir;
  DIR *dp;
  dbx_err rc = open_sub(d, "snapshots", &dir, &dp);
  if (dp == NULL) return rc;
  for (const struct dirent *e = readdir(dp); e != NULL; e = readdir(dp)) {
    if (!snapshot_part_name(e->d_name)) continue;
    char *path = dbx_asprintf("%s/%s", dir, e->d_name);
    int fd = path ? snapshot_part_lock(path) : -1;
    if (fd < 0) {
      free(path);
      if (path == NULL) {
        rc = DBX_ENOMEM;
        break;
      }
      continue;
    }
    close(fd);
    if (leftover_push(v, n, cap, DBX_LOCAL_LEFTOVER_SNAPSHOT_PART, dbx_strdup(e->d_name), path) != 0) {
      rc = DBX_ENOMEM;
      break;
    }
  }
  closedir(dp);
  free(dir);
  return rc;
}

dbx_err dbx_local_leftovers(dbx_local *d, dbx_local_leftover **out, size_t *n) {
  dbx_local_leftover *v = NULL;
  size_t cnt = 0, cap = 0;
  *out = NULL;
  *n = 0;
  dbx_err rc = leftovers_in(d, "trash", DBX_LOCAL_LEFTOVER_TRASH, &v, &cnt, &cap);
  if (rc == DBX_OK) rc = leftovers_in(d, "sandboxes", DBX_LOCAL_LEFTOVER_PARTIAL, &v, &cnt, &cap);
  if (rc == DBX_OK) rc = snapshot_parts(d, &v, &cnt, &cap);
  if (rc != DBX_OK) {
    dbx_local_leftovers_free(v, cnt);
    return rc;
  }
  *out = v;
  *n = cnt;
  return DBX_OK;
}

dbx_err dbx_local_leftover_remove(dbx_local *d, const dbx_local_leftover *l) {
  if (l != NULL && l->kind == DBX_LOCAL_LEFTOVER_SNAPSHOT_PART) {
    if (!snapshot_part_name(l->name)) return fail(d, DBX_EINVAL, "invalid leftover");
    char *path = dbx_asprintf("%s/snapshots/%s", d->home, l->name);
    if (path == NULL) return DBX_ENOMEM;
    dbx_err rc = DBX_OK;
    int fd = access(path, F_OK) == 0 ? snapshot_part_lock(path) : -2;
    if (fd == -1)
      rc = fail(d, DBX_ESTATE, "snapshot copy '%s' is being made right now", l->name);
    else if (fd >= 0)
      rc = rmrf(d, path);
    if (fd >= 0) close(fd);
    free(path);
    return rc;
  }
  if (l == NULL || l->name == NULL || strchr(l->name, '/') != NULL || l->name[0] == '.' ||
      (l->kind != DBX_LOCAL_LEFTOVER_TRASH && l->kind != DBX_LOCAL_LEFTOVER_PARTIAL))
    return fail(d, DBX_EINVAL, "invalid leftover");
  dbx_err rc = DBX_OK;
  char *path = NULL, *id = NULL;
  int fd = -2;
  if (l->kind == DBX_LOCAL_LEFTOVER_TRASH) {
    /* trash/<id>.<hex>: a delete still removing it holds the lock of <id> */
    id = dbx_strdup(l->name);
    char *dot = id ? strrchr(id, '.') : NULL;
    if (dot) *dot = '\0';
    path = dbx_asprintf("%s/trash/%s", d->home, l->name);
    if (id == NULL || path == NULL) {
      rc = DBX_ENOMEM;
      goto out;
    }
    if (valid_name(id) && (fd = lock_id_try(d, id, 0)) == -1) {
      rc = fail(d, DBX_ESTATE, "'%s' is being removed right now", l->name);
      goto out;
    }
    rc = access(path, F_OK) == 0 ? rmrf(d, path) : DBX_OK;
  } else {
    if (!valid_name(l->name)) {
      rc = fail(d, DBX_EINVAL, "invalid sandbox id '%s'", l->name);
      goto out;
    }
    if ((fd = lock_id_try(d, l->name, 1)) < 0) {
      rc = fail(d, DBX_ESTATE, "sandbox '%s' is being created right now", l->name);
      goto out;
    }
    rc = sb_check(d, l->name, 0);
    if (rc == DBX_OK) { /* completed meanwhile: a sandbox, no leftover */
      rc = fail(d, DBX_ESTATE, "sandbox '%s' is complete now: not removed", l->name);
      goto out;
    }
    if (rc != DBX_ENOTFOUND) goto out;
    path = sb_dir(d, l->name);
    rc = path ? remove_tree(d, path, l->name) : DBX_ENOMEM;
  }
out:
  if (fd >= 0) close(fd);
  free(path);
  free(id);
  return rc;
}

/* ---- restore ---- */

/* 1 if a detached command of the sandbox is running. */
static int any_command_running(dbx_local *d, const char *sbdir) {
  char *cmds = dbx_asprintf("%s/meta/cmds", sbdir);
  DIR *dp = cmds ? opendir(cmds) : NULL;
  int running = 0;
  for (const struct dirent *e = dp ? readdir(dp) : NULL; e && !running; e = readdir(dp)) {
    if (e->d_name[0] == '.') continue;
    int dfd = openat(dirfd(dp), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) continue;
    dbx_local_cmd_status st;
    running = poll_at(d, dfd, e->d_name, &st) == DBX_OK && st.state == DBX_LOCAL_CMD_RUNNING;
    close(dfd);
  }
  if (dp) closedir(dp);
  free(cmds);
  return running;
}

dbx_err dbx_local_sandbox_restore(dbx_local *d, const char *id, const char *ref) {
  dbx_err rc;
  int lockfd = -1;
  char *sbdir = NULL, *snap = NULL, *from = NULL, *tmp = NULL, *ws = NULL;
  if (!valid_name(ref)) return fail(d, DBX_EINVAL, "invalid snapshot ref '%s'", ref ? ref : "(null)");
  if ((rc = sb_check(d, id, 0)) != DBX_OK) return rc;
  sbdir = sb_dir(d, id);
  snap = dbx_asprintf("%s/snapshots/%s", d->home, ref);
  from = dbx_asprintf("%s/snapshots/%s/.", d->home, ref);
  tmp = dbx_asprintf("%s/sandboxes/%s/workspace.restore", d->home, id);
  ws = dbx_local_sandbox_path(d, id);
  if (!sbdir || !snap || !from || !tmp || !ws) {
    rc = DBX_ENOMEM;
    goto out;
  }
  lockfd = lock_id(d, id);
  if (lockfd < 0) {
    rc = fail(d, DBX_EIO, "cannot lock sandbox '%s': %s", id, strerror(errno));
    goto out;
  }
  if ((rc = sb_check(d, id, 0)) != DBX_OK) goto out; /* deleted while we waited */
  if (!is_dir(snap)) {
    rc = failk(d, DBX_ENOTFOUND, DBX_DRV_SOURCE_NOT_FOUND, "snapshot '%s' not found", ref);
    goto out;
  }
  if (any_command_running(d, sbdir)) {
    rc = fail(d, DBX_ESTATE, "sandbox '%s' has a running command: restore refused", id);
    goto out;
  }
  if (access(tmp, F_OK) == 0 && (rc = rmrf(d, tmp)) != DBX_OK) goto out;
  if (mkdir(tmp, 0755) != 0) {
    rc = fail(d, DBX_EIO, "mkdir '%s': %s", tmp, strerror(errno));
    goto out;
  }
  char *argv[] = {"cp", "-a", "--reflink=auto", "--", from, tmp, NULL};
  if ((rc = run_host(d, argv, "copying the snapshot")) != DBX_OK) goto out;
  uint64_t a[5], b[5];
  if (tree_shape(snap, a) != 0 || tree_shape(tmp, b) != 0 || memcmp(a, b, sizeof a) != 0) {
    rc = fail(d, DBX_EIO, "the copy of snapshot '%s' does not match it", ref);
    goto out;
  }
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, ws, RENAME_EXCHANGE) != 0) {
    rc = fail(d, DBX_EIO, "cannot exchange the workspace of '%s': %s", id, strerror(errno));
    goto out;
  }
  fsync_path(sbdir);
  /* tmp now holds the old workspace */
out:
  if (tmp && access(tmp, F_OK) == 0) {
    dbx_err keep = rc;
    char saved[sizeof tl_err.msg];
    memcpy(saved, tl_err.msg, sizeof saved);
    if (rmrf(d, tmp) != DBX_OK && keep == DBX_OK)
      DBX_WARN("local", "restore of %s: old workspace left at %s", id, tmp);
    memcpy(tl_err.msg, saved, sizeof saved);
  }
  if (lockfd >= 0) close(lockfd);
  free(sbdir);
  free(snap);
  free(from);
  free(tmp);
  free(ws);
  return rc;
}

/* ---- upload, download ---- */

/* Read a whole host file (regular) into a malloc'd buffer. */
static dbx_err host_read(dbx_local *d, const char *host_path, uint8_t **data, size_t *len) {
  *data = NULL;
  *len = 0;
  if (host_path == NULL || host_path[0] != '/')
    return fail(d, DBX_EINVAL, "host path '%s' is not absolute", host_path ? host_path : "");
  int fd = open(host_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return fail(d, DBX_ENOTFOUND, "host file '%s' not found", host_path);
    return fail(d, DBX_EIO, "host file '%s': %s", host_path, strerror(errno));
  }
  dbx_err rc = DBX_OK;
  struct stat st;
  uint8_t *buf = NULL;
  size_t n = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = fail(d, DBX_EINVAL, "host path '%s' is not a regular file", host_path);
    goto out;
  }
  buf = dbx_malloc((size_t)st.st_size + 1);
  if (buf == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  while (n < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = fail(d, DBX_EIO, "read '%s': %s", host_path, strerror(errno));
      goto out;
    }
    if (r == 0) break; /* shrank meanwhile: what is there */
    n += (size_t)r;
  }
  *data = buf;
  *len = n;
  buf = NULL;
out:
  free(buf);
  close(fd);
  return rc;
}

dbx_err dbx_local_file_upload(dbx_local *d, const char *id, const char *host_path,
                              const char *path) {
  uint8_t *data = NULL;
  size_t len = 0;
  dbx_err rc = path_check(d, path, 0);
  if (rc == DBX_OK) rc = sb_check(d, id, 1);
  if (rc == DBX_OK) rc = host_read(d, host_path, &data, &len);
  if (rc == DBX_OK) rc = dbx_local_file_write(d, id, path, data, len);
  free(data);
  return rc;
}

dbx_err dbx_local_file_download(dbx_local *d, const char *id, const char *path,
                                const char *host_path) {
  uint8_t *data = NULL;
  size_t len = 0;
  char *dir = NULL;
  int dfd = -1;
  if (host_path == NULL || host_path[0] != '/')
    return fail(d, DBX_EINVAL, "host path '%s' is not absolute", host_path ? host_path : "");
  const char *base = strrchr(host_path, '/') + 1;
  if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return fail(d, DBX_EINVAL, "host path '%s' names no file", host_path);
  dbx_err rc = dbx_local_file_read(d, id, path, (size_t)4 << 30, &data, &len);
  if (rc != DBX_OK) return rc;
  dir = base == host_path + 1 ? dbx_strdup("/") : dbx_strndup(host_path, (size_t)(base - host_path - 1));
  if (dir == NULL) {
    rc = DBX_ENOMEM;
    goto out;
  }
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || write_atomic(dfd, base, data, len) != 0)
    rc = fail(d, DBX_EIO, "cannot write host file '%s': %s", host_path, strerror(errno));
out:
  if (dfd >= 0) close(dfd);
  free(dir);
  free(data);
  return rc;
}
