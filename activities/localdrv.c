/* The local driver behind the driver interface (driver.h): each op calls the
 * dbx_local_* function of local.h and turns its dbx_err into a dbx_drv_err.
 * Where the dbx_err alone does not tell (ENOTFOUND: sandbox or file? EINVAL:
 * a refused path or another fault?), local.c records the typed kind of the
 * failure next to its message (dbx_local_errkind), and that kind wins. No
 * message text is read. Stateless beyond the dbx_local handle; thread-safe as
 * local.h says. */
#include <stdlib.h>
#include <string.h>

#include "activities/driver.h"
#include "activities/local.h"

/* The generic translation, for codes without a recorded kind. */
static dbx_drv_err from_err(dbx_local *d, dbx_err e) {
  if (e == DBX_OK) return DBX_DRV_OK;
  /* the kind goes with the code it refines (a stale kind of an earlier
   * failure never pairs with a code returned without a message, ENOMEM) */
  dbx_drv_err k = dbx_local_errkind(d);
  if ((k == DBX_DRV_NO_SANDBOX || k == DBX_DRV_SOURCE_NOT_FOUND) && e == DBX_ENOTFOUND) return k;
  if (k == DBX_DRV_PATH_REFUSED && e == DBX_EINVAL) return k;
  if (k == DBX_DRV_SNAPSHOT_FAILED && e == DBX_EIO) return k;
  if ((k == DBX_DRV_REPO_NOT_FOUND || k == DBX_DRV_NOT_A_REPO || k == DBX_DRV_REF_NOT_FOUND ||
       k == DBX_DRV_DISK_FULL || k == DBX_DRV_AUTH) && e == DBX_EIO)
    return k;
  switch (e) {
  case DBX_ENOMEM: return DBX_DRV_NOMEM;
  case DBX_EINVAL: return DBX_DRV_INVALID;
  case DBX_ENOTFOUND: return DBX_DRV_NOT_FOUND;
  case DBX_EEXIST: return DBX_DRV_CONFLICT;
  case DBX_ESTATE: return DBX_DRV_STATE;
  case DBX_ECANCELED: return DBX_DRV_CANCELED;
  case DBX_EUNSUPPORTED: return DBX_DRV_UNSUPPORTED;
  case DBX_ETIMEDOUT:
  case DBX_EUNAVAILABLE: return DBX_DRV_TRANSIENT;
  default: return DBX_DRV_FAILED;
  }
}

static void ld_destroy(void *self) { dbx_local_close(self); }
static const char *ld_errmsg(void *self) { return dbx_local_errmsg(self); }

static dbx_drv_err ld_create(void *self, const char *name, const dbx_drv_create_opts *o,
                             int *adopted) {
  if (adopted) *adopted = 0;
  if (o == NULL) return DBX_DRV_INVALID;
  if (o->source.kind == DBX_DRV_SOURCE_IMAGE) return DBX_DRV_UNSUPPORTED;
  dbx_local_source src = {.location = o->source.location,
                          .ref = o->source.ref,
                          .cancelled = o->cancelled,
                          .cancelled_ud = o->cancelled_ud,
                          .labels = o->labels,
                          .nlabels = o->nlabels,
                          .network = o->network,
                          .host_fs = o->host_fs,
                          .env = o->env,
                          .memory_mib = (uint64_t)o->memory_gib * 1024,
                          .git_cred = o->git_cred};
  if (o->unenforced)
    *o->unenforced = (o->cpu ? DBX_DRV_UNENFORCED_CPU : 0) |
                     (o->disk_gib ? DBX_DRV_UNENFORCED_DISK : 0) |
                     (o->auto_stop_minutes ? DBX_DRV_UNENFORCED_AUTO_STOP : 0) |
                     (o->auto_archive_minutes ? DBX_DRV_UNENFORCED_AUTO_ARCHIVE : 0) |
                     (o->auto_delete_minutes ? DBX_DRV_UNENFORCED_AUTO_DELETE : 0);
  switch (o->source.kind) {
  case DBX_DRV_SOURCE_EMPTY: src.kind = DBX_LOCAL_SOURCE_EMPTY; break;
  case DBX_DRV_SOURCE_DIR: src.kind = DBX_LOCAL_SOURCE_DIR; break;
  case DBX_DRV_SOURCE_GIT: src.kind = DBX_LOCAL_SOURCE_GIT; break;
  case DBX_DRV_SOURCE_SNAPSHOT: src.kind = DBX_LOCAL_SOURCE_SNAPSHOT; break;
  default: return DBX_DRV_INVALID;
  }
  return from_err(self, dbx_local_sandbox_create(self, name, &src, adopted));
}

static char *ld_workspace_path(void *self, const char *name) {
  return dbx_local_sandbox_path(self, name);
}

static dbx_drv_err ld_exists(void *self, const char *name, dbx_drv_state *state) {
  int running = 0;
  dbx_err e = dbx_local_sandbox_exists(self, name, &running);
  if (e == DBX_ENOTFOUND) return DBX_DRV_NO_SANDBOX;
  if (e == DBX_OK && state) *state = running ? DBX_DRV_RUNNING : DBX_DRV_STOPPED;
  return from_err(self, e);
}

static dbx_drv_err ld_list(void *self, const dbx_drv_label *match, size_t nmatch, char ***names,
                           size_t *n) {
  return from_err(self, dbx_local_sandbox_list(self, match, nmatch, names, n));
}

static dbx_drv_err ld_labels(void *self, const char *name, dbx_drv_label **labels, size_t *n) {
  dbx_err e = dbx_local_sandbox_labels(self, name, labels, n);
  return e == DBX_ENOTFOUND ? DBX_DRV_NO_SANDBOX : from_err(self, e);
}

/* Lifecycle calls answer ENOTFOUND only for a missing sandbox. */
static dbx_drv_err life(void *self, dbx_err e) {
  return e == DBX_ENOTFOUND ? DBX_DRV_NO_SANDBOX : from_err(self, e);
}

static dbx_drv_err ld_start(void *self, const char *name) {
  return life(self, dbx_local_sandbox_start(self, name));
}
static dbx_drv_err ld_stop(void *self, const char *name) {
  return life(self, dbx_local_sandbox_stop(self, name));
}
static dbx_drv_err ld_del(void *self, const char *name) {
  return life(self, dbx_local_sandbox_delete(self, name));
}

static dbx_local_exec_opts exec_opts(const dbx_drv_exec_opts *o) {
  dbx_local_exec_opts l = {.command = o->command,
                           .cwd = o->cwd,
                           .env = o->env,
                           .timeout_ms = o->timeout_ms,
                           .stdout_cap_bytes = o->stdout_cap_bytes,
                           .stderr_cap_bytes = o->stderr_cap_bytes,
                           .attempt = o->attempt};
  return l;
}

static dbx_drv_err ld_exec_start(void *self, const char *name, const char *cmd_id,
                                 const dbx_drv_exec_opts *o, int *adopted) {
  if (o == NULL) return DBX_DRV_INVALID;
  dbx_local_exec_opts l = exec_opts(o);
  return from_err(self, dbx_local_exec_start(self, name, cmd_id, &l, adopted));
}

static dbx_drv_err ld_exec_poll(void *self, const char *name, const char *cmd_id,
                                dbx_drv_cmd_status *st) {
  dbx_local_cmd_status l;
  dbx_err e = dbx_local_exec_poll(self, name, cmd_id, &l);
  memset(st, 0, sizeof *st);
  if (e != DBX_OK) return from_err(self, e);
  static const dbx_drv_cmd_state states[] = {
      [DBX_LOCAL_CMD_PENDING] = DBX_DRV_CMD_PENDING, [DBX_LOCAL_CMD_RUNNING] = DBX_DRV_CMD_RUNNING,
      [DBX_LOCAL_CMD_FINISHED] = DBX_DRV_CMD_FINISHED, [DBX_LOCAL_CMD_LOST] = DBX_DRV_CMD_LOST};
  st->state = states[l.state];
  st->stdout_size = l.stdout_size;
  st->stderr_size = l.stderr_size;
  return DBX_DRV_OK;
}

static dbx_drv_err ld_exec_attach(void *self, const char *name, const char *cmd_id, int stream,
                                  uint64_t offset, void *buf, size_t cap, size_t *n) {
  return from_err(self, dbx_local_exec_read(self, name, cmd_id, stream, offset, buf, cap, n));
}

static dbx_drv_err ld_exec_result(void *self, const char *name, const char *cmd_id,
                                  dbx_drv_exec_result *res) {
  dbx_local_exec_result l;
  dbx_local_cmd_status st;
  memset(res, 0, sizeof *res);
  dbx_err e = dbx_local_exec_collect(self, name, cmd_id, &l);
  if (e != DBX_OK) return from_err(self, e);
  /* killed is only in the status file */
  if (dbx_local_exec_poll(self, name, cmd_id, &st) == DBX_OK) res->killed = st.killed;
  res->exit_code = l.exit_code;
  res->signal = l.signal;
  res->timed_out = l.timed_out;
  res->stdout_buf = l.stdout_buf;
  res->stdout_len = l.stdout_len;
  res->stdout_total = l.stdout_total;
  res->stdout_truncated = l.stdout_truncated;
  res->stdout_head_len = l.stdout_head_len;
  res->stderr_buf = l.stderr_buf;
  res->stderr_len = l.stderr_len;
  res->stderr_total = l.stderr_total;
  res->stderr_truncated = l.stderr_truncated;
  res->stderr_head_len = l.stderr_head_len;
  res->duration_ms = l.duration_ms;
  memcpy(res->not_started, l.not_started, sizeof res->not_started);
  return DBX_DRV_OK; /* the buffers now belong to res */
}

static dbx_drv_err ld_exec_cancel(void *self, const char *name, const char *cmd_id) {
  return from_err(self, dbx_local_exec_kill(self, name, cmd_id));
}

static dbx_drv_err ld_exec_wait_fd(void *self, const char *name, const char *cmd_id, int *fd) {
  return from_err(self, dbx_local_exec_wait_fd(self, name, cmd_id, fd));
}

static dbx_drv_err ld_exec_cancel_as(void *self, const char *name, const char *cmd_id,
                                     int32_t attempt, int *superseded) {
  return from_err(self, dbx_local_exec_kill_as(self, name, cmd_id, attempt, superseded));
}

static dbx_drv_err ld_exec_forget(void *self, const char *name, const char *cmd_id) {
  return from_err(self, dbx_local_exec_forget(self, name, cmd_id));
}

static dbx_drv_err ld_file_read(void *self, const char *name, const char *path,
                                size_t max_bytes, uint8_t **data, size_t *len) {
  return from_err(self, dbx_local_file_read(self, name, path, max_bytes, data, len));
}

static dbx_drv_err ld_file_write(void *self, const char *name, const char *path,
                                 const void *data, size_t len) {
  return from_err(self, dbx_local_file_write(self, name, path, data, len));
}

static dbx_drv_err ld_upload(void *self, const char *name, const char *host_path,
                             const char *path) {
  return from_err(self, dbx_local_file_upload(self, name, host_path, path));
}

static dbx_drv_err ld_download(void *self, const char *name, const char *path,
                               const char *host_path) {
  return from_err(self, dbx_local_file_download(self, name, path, host_path));
}

static dbx_drv_err ld_git_clone(void *self, const char *name, const char *url, const char *path,
                                const char *ref) {
  return from_err(self, dbx_local_git_clone(self, name, url, path, ref));
}

static dbx_drv_err ld_git_commit(void *self, const char *name, const char *repo_path,
                                 const char *message, const char *author, char **sha,
                                 int *nothing) {
  return from_err(self,
                  dbx_local_git_commit_at(self, name, repo_path, message, author, sha, nothing));
}

static dbx_drv_err ld_git_commit_paths(void *self, const char *name, const char *repo_path,
                                       const char *const *paths, size_t npaths,
                                       const char *message, const char *author, char **sha,
                                       int *nothing) {
  return from_err(self, dbx_local_git_commit_paths(self, name, repo_path, paths, npaths, message,
                                                   author, sha, nothing));
}

static dbx_drv_err ld_git_push(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch) {
  return from_err(self, dbx_local_git_push(self, name, repo_path, remote, branch));
}

static dbx_drv_err ld_git_clone_cred(void *self, const char *name, const char *url,
                                     const char *path, const char *ref,
                                     const dbx_drv_git_cred *cred) {
  return from_err(self, dbx_local_git_clone_cred(self, name, url, path, ref, cred));
}

static dbx_drv_err ld_git_push_cred(void *self, const char *name, const char *repo_path,
                                    const char *remote, const char *branch,
                                    const dbx_drv_git_cred *cred) {
  return from_err(self, dbx_local_git_push_cred(self, name, repo_path, remote, branch, cred));
}

static dbx_drv_err ld_git_pull(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch,
                               const dbx_drv_git_cred *cred) {
  return from_err(self, dbx_local_git_pull(self, name, repo_path, remote, branch, cred));
}

static dbx_drv_err ld_checkpoint(void *self, const char *name, const char *snap, char **ref) {
  dbx_err e = dbx_local_sandbox_checkpoint(self, name, snap, ref);
  return e == DBX_ENOTFOUND ? DBX_DRV_NO_SANDBOX : from_err(self, e);
}

static dbx_drv_err ld_restore(void *self, const char *name, const char *ref) {
  return from_err(self, dbx_local_sandbox_restore(self, name, ref));
}

static dbx_drv_err ld_snapshot_delete(void *self, const char *ref) {
  return from_err(self, dbx_local_snapshot_delete(self, ref));
}

const dbx_driver_ops dbx_local_driver_ops = {
    .destroy = ld_destroy,
    .errmsg = ld_errmsg,
    .create = ld_create,
    .workspace_path = ld_workspace_path,
    .exists = ld_exists,
    .list = ld_list,
    .labels = ld_labels,
    .start = ld_start,
    .stop = ld_stop,
    .del = ld_del,
    .exec_start = ld_exec_start,
    .exec_poll = ld_exec_poll,
    .exec_attach = ld_exec_attach,
    .exec_result = ld_exec_result,
    .exec_cancel = ld_exec_cancel,
    .exec_forget = ld_exec_forget,
    .exec_cancel_as = ld_exec_cancel_as,
    .exec_wait_fd = ld_exec_wait_fd,
    .file_read = ld_file_read,
    .file_write = ld_file_write,
    .upload = ld_upload,
    .download = ld_download,
    .git_clone = ld_git_clone,
    .git_commit = ld_git_commit,
    .git_commit_paths = ld_git_commit_paths,
    .git_push = ld_git_push,
    .git_clone_cred = ld_git_clone_cred,
    .git_push_cred = ld_git_push_cred,
    .git_pull = ld_git_pull,
    .checkpoint = ld_checkpoint,
    .restore = ld_restore,
    .snapshot_delete = ld_snapshot_delete,
};
