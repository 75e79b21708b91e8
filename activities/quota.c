/* activities/quota: see quota.h. */
#include "activities/quota.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"

#define WINDOW_MS 60000

struct dbx_quota {
  dbx_driver drv;   /* this driver: ops below, self = the quota */
  dbx_driver *in;   /* the inner driver (borrowed) */
  dbx_quota_opts o;
  pthread_mutex_t mu;
  char **names;     /* the live sandboxes known, owned */
  size_t n, cap;
  int64_t *stamps;  /* ring of the last creates_per_minute create starts (ms) */
  size_t ns, head;
  int peak;
  int64_t waited;
};

static int64_t mono_ms(void) { return dbx_mono_ns() / 1000000; }

static ssize_t find(const dbx_quota *q, const char *name) {
  for (size_t i = 0; i < q->n; i++)
    if (strcmp(q->names[i], name) == 0) return (ssize_t)i;
  return -1;
}

static int add_name(dbx_quota *q, const char *name) {
  if (q->n == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 16;
    char **g = realloc(q->names, cap * sizeof *g);
    if (g == NULL) return -1;
    q->names = g, q->cap = cap;
  }
  if ((q->names[q->n] = dbx_strdup(name)) == NULL) return -1;
  q->n++;
  if ((int)q->n > q->peak) q->peak = (int)q->n;
  return 0;
}

static void drop_name(dbx_quota *q, const char *name) {
  ssize_t i = find(q, name);
  if (i < 0) return;
  free(q->names[i]);
  q->names[i] = q->names[--q->n];
}

/* Room for one more create now (under mu). */
static int room(const dbx_quota *q, int64_t now) {
  if (q->o.max_live > 0 && (int)q->n >= q->o.max_live) return 0;
  if (q->o.creates_per_minute > 0 && q->ns == (size_t)q->o.creates_per_minute &&
      now - q->stamps[q->head] < (q->o.window_ms > 0 ? q->o.window_ms : WINDOW_MS))
    return 0;
  return 1;
}

static void stamp(dbx_quota *q, int64_t now) {
  if (q->o.creates_per_minute <= 0) return;
  size_t cap = (size_t)q->o.creates_per_minute;
  if (q->ns < cap) {
    q->stamps[(q->head + q->ns++) % cap] = now;
    return;
  }
  q->stamps[q->head] = now; /* the oldest is replaced */
  q->head = (q->head + 1) % cap;
}

static dbx_drv_err q_create(void *self, const char *name, const dbx_drv_create_opts *o,
                            int *adopted) {
  dbx_quota *q = self;
  if (q->in->ops->exists(q->in->self, name, NULL) == DBX_DRV_OK)
    return q->in->ops->create(q->in->self, name, o, adopted); /* an adoption */
  int waited = 0;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    int64_t now = mono_ms();
    int known = find(q, name) >= 0;
    if (known || room(q, now)) {
      int oom = 0;
      if (!known) {
        stamp(q, now);
        oom = add_name(q, name) != 0;
      }
      if (waited) q->waited++;
      pthread_mutex_unlock(&q->mu);
      if (oom) return DBX_DRV_NOMEM;
      break;
    }
    pthread_mutex_unlock(&q->mu);
    if (o && o->cancelled && o->cancelled(o->cancelled_ud)) return DBX_DRV_CANCELED;
    waited = 1;
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
  dbx_drv_err e = q->in->ops->create(q->in->self, name, o, adopted);
  if (e != DBX_DRV_OK && q->in->ops->exists(q->in->self, name, NULL) != DBX_DRV_OK) {
    pthread_mutex_lock(&q->mu);
    drop_name(q, name);
    pthread_mutex_unlock(&q->mu);
  }
  return e;
}

static dbx_drv_err q_del(void *self, const char *name) {
  dbx_quota *q = self;
  dbx_drv_err e = q->in->ops->del(q->in->self, name);
  if (e == DBX_DRV_OK) {
    pthread_mutex_lock(&q->mu);
    drop_name(q, name);
    pthread_mutex_unlock(&q->mu);
  }
  return e;
}

static void q_destroy(void *self) { dbx_quota_close(self); }

static const char *q_errmsg(void *self) {
  dbx_quota *q = self;
  return q->in->ops->errmsg(q->in->self);
}

static char *q_workspace_path(void *self, const char *name) {
  dbx_quota *q = self;
  return q->in->ops->workspace_path(q->in->self, name);
}

/* The rest go to the inner driver as they are. */
#define ARGS(...) __VA_ARGS__
#define FWD(op, params, args)                        \
  static dbx_drv_err q_##op(void *self, ARGS params) { \
    dbx_quota *q = self;                             \
    return q->in->ops->op(q->in->self, ARGS args);   \
  }
FWD(exists, (const char *name, dbx_drv_state *state), (name, state))
FWD(list, (const dbx_drv_label *match, size_t nmatch, char ***names, size_t *n),
    (match, nmatch, names, n))
FWD(labels, (const char *name, dbx_drv_label **labels, size_t *n), (name, labels, n))
FWD(start, (const char *name), (name))
FWD(stop, (const char *name), (name))
FWD(exec_start, (const char *name, const char *cmd_id, const dbx_drv_exec_opts *o, int *adopted),
    (name, cmd_id, o, adopted))
FWD(exec_poll, (const char *name, const char *cmd_id, dbx_drv_cmd_status *st), (name, cmd_id, st))
FWD(exec_attach, (const char *name, const char *cmd_id, int stream, uint64_t offset, void *buf,
                  size_t cap, size_t *n),
    (name, cmd_id, stream, offset, buf, cap, n))
FWD(exec_result, (const char *name, const char *cmd_id, dbx_drv_exec_result *res),
    (name, cmd_id, res))
FWD(exec_cancel, (const char *name, const char *cmd_id), (name, cmd_id))
FWD(exec_forget, (const char *name, const char *cmd_id), (name, cmd_id))
FWD(exec_cancel_as, (const char *name, const char *cmd_id, int32_t attempt, int *superseded),
    (name, cmd_id, attempt, superseded))
/* optional in the inner driver: UNSUPPORTED when it has none (callers then
 * poll on a timer) */
static dbx_drv_err q_exec_wait_fd(void *self, const char *name, const char *cmd_id, int *fd) {
  dbx_quota *q = self;
  if (q->in->ops->exec_wait_fd == NULL) return DBX_DRV_UNSUPPORTED;
  return q->in->ops->exec_wait_fd(q->in->self, name, cmd_id, fd);
}
FWD(file_read, (const char *name, const char *path, size_t max_bytes, uint8_t **data, size_t *len),
    (name, path, max_bytes, data, len))
FWD(file_write, (const char *name, const char *path, const void *data, size_t len),
    (name, path, data, len))
FWD(upload, (const char *name, const char *host_path, const char *path), (name, host_path, path))
FWD(download, (const char *name, const char *path, const char *host_path), (name, path, host_path))
FWD(git_clone, (const char *name, const char *url, const char *path, const char *ref),
    (name, url, path, ref))
FWD(git_commit, (const char *name, const char *repo_path, const char *message, const char *author,
                 char **sha, int *nothing),
    (name, repo_path, message, author, sha, nothing))
FWD(git_commit_paths, (const char *name, const char *repo_path, const char *const *paths,
                       size_t npaths, const char *message, const char *author, char **sha,
                       int *nothing),
    (name, repo_path, paths, npaths, message, author, sha, nothing))
FWD(git_push, (const char *name, const char *repo_path, const char *remote, const char *branch),
    (name, repo_path, remote, branch))
/* Optional ops: UNSUPPORTED where the inner driver has none. */
#define FWD_OPT(op, params, args)                                          \
  static dbx_drv_err q_##op(void *self, ARGS params) {                     \
    dbx_quota *q = self;                                                   \
    if (q->in->ops->op == NULL) return DBX_DRV_UNSUPPORTED;                \
    return q->in->ops->op(q->in->self, ARGS args);                         \
  }
FWD_OPT(git_pull, (const char *name, const char *repo_path, const char *remote,
                   const char *branch, const dbx_drv_git_cred *cred),
        (name, repo_path, remote, branch, cred))
FWD(checkpoint, (const char *name, const char *snap, char **ref), (name, snap, ref))

/* Optional ops (driver.h): UNSUPPORTED where the inner driver has none. */
static dbx_drv_err q_git_clone_cred(void *self, const char *name, const char *url, const char *path,
                                    const char *ref, const dbx_drv_git_cred *cred) {
  dbx_quota *q = self;
  if (!q->in->ops->git_clone_cred) return DBX_DRV_UNSUPPORTED;
  return q->in->ops->git_clone_cred(q->in->self, name, url, path, ref, cred);
}
static dbx_drv_err q_git_push_cred(void *self, const char *name, const char *repo_path,
                                   const char *remote, const char *branch,
                                   const dbx_drv_git_cred *cred) {
  dbx_quota *q = self;
  if (!q->in->ops->git_push_cred) return DBX_DRV_UNSUPPORTED;
  return q->in->ops->git_push_cred(q->in->self, name, repo_path, remote, branch, cred);
}
FWD(restore, (const char *name, const char *ref), (name, ref))
FWD(snapshot_delete, (const char *ref), (ref))

static const dbx_driver_ops QUOTA_OPS = {
    .destroy = q_destroy,
    .errmsg = q_errmsg,
    .create = q_create,
    .workspace_path = q_workspace_path,
    .exists = q_exists,
    .list = q_list,
    .labels = q_labels,
    .start = q_start,
    .stop = q_stop,
    .del = q_del,
    .exec_start = q_exec_start,
    .exec_poll = q_exec_poll,
    .exec_attach = q_exec_attach,
    .exec_result = q_exec_result,
    .exec_cancel = q_exec_cancel,
    .exec_forget = q_exec_forget,
    .exec_cancel_as = q_exec_cancel_as,
    .exec_wait_fd = q_exec_wait_fd,
    .file_read = q_file_read,
    .file_write = q_file_write,
    .upload = q_upload,
    .download = q_download,
    .git_clone = q_git_clone,
    .git_commit = q_git_commit,
    .git_commit_paths = q_git_commit_paths,
    .git_push = q_git_push,
    .git_clone_cred = q_git_clone_cred,
    .git_push_cred = q_git_push_cred,
    .git_pull = q_git_pull,
    .checkpoint = q_checkpoint,
    .restore = q_restore,
    .snapshot_delete = q_snapshot_delete,
};

dbx_err dbx_quota_open(dbx_driver *inner, const dbx_quota_opts *o, dbx_quota **out) {
  *out = NULL;
  if (inner == NULL || o == NULL || o->max_live < 0 || o->creates_per_minute < 0) return DBX_EINVAL;
  dbx_quota *q = calloc(1, sizeof *q);
  if (q == NULL) return DBX_ENOMEM;
  q->in = inner;
  q->o = *o;
  q->drv = (dbx_driver){&QUOTA_OPS, q, inner->name};
  pthread_mutex_init(&q->mu, NULL);
  if (o->creates_per_minute > 0 &&
      !(q->stamps = calloc((size_t)o->creates_per_minute, sizeof *q->stamps))) {
    dbx_quota_close(q);
    return DBX_ENOMEM;
  }
  char **names = NULL;
  size_t n = 0;
  if (inner->ops->list(inner->self, NULL, 0, &names, &n) != DBX_DRV_OK) {
    dbx_quota_close(q);
    return DBX_EIO;
  }
  for (size_t i = 0; i < n; i++)
    if (add_name(q, names[i]) != 0) {
      dbx_drv_names_free(names, n);
      dbx_quota_close(q);
      return DBX_ENOMEM;
    }
  dbx_drv_names_free(names, n);
  *out = q;
  return DBX_OK;
}

void dbx_quota_close(dbx_quota *q) {
  if (q == NULL) return;
  for (size_t i = 0; i < q->n; i++) free(q->names[i]);
  free(q->names);
  free(q->stamps);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

dbx_driver *dbx_quota_driver(dbx_quota *q) { return &q->drv; }

void dbx_quota_stats(dbx_quota *q, int *peak_live, int64_t *waited) {
  pthread_mutex_lock(&q->mu);
  if (peak_live) *peak_live = q->peak;
  if (waited) *waited = q->waited;
  pthread_mutex_unlock(&q->mu);
}

static int env_count(const char *name, int *out) {
  const char *v = getenv(name);
  *out = 0;
  if (v == NULL || *v == '\0') return 0;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > 1000000) return -1;
  *out = (int)x;
  return 0;
}

int dbx_quota_opts_from_env(dbx_quota_opts *o) {
  if (env_count("DURABOX_MAX_SANDBOXES", &o->max_live) != 0) return -1;
  return env_count("DURABOX_SANDBOX_CREATES_PER_MINUTE", &o->creates_per_minute);
}
