/* The sandbox driver interface: the table of operations every driver
 * implements (local.h: processes and folders on this host; memdrv.h: in
 * memory, for tests; Daytona's HTTP API next), and the typed errors they
 * answer. The sandbox activities (sandbox.h) are written once against it.
 *
 * A driver is a value {ops, self, name}: ops is a static table, self the
 * driver's instance, passed back as the first argument of every op. Nothing
 * here is process-wide: two drivers (two local homes, a local and a memory
 * driver) live in one process side by side.
 *
 * Names. Sandboxes, snapshots and commands are named by the caller with
 * deterministic names (so a retried activity finds what an earlier attempt
 * made): 1..128 characters of [A-Za-z0-9._-], not starting with '.'
 * (dbx_drv_name_valid). Daytona: a sandbox "name", a snapshot "name", a
 * session command's id. File paths are relative to the workspace root; an
 * absolute path, "..", or a symlink leading out is refused (PATH_REFUSED).
 *
 * Errors. Every op returns a dbx_drv_err; DBX_DRV_OK == 0. On any other code
 * the driver keeps a message naming the sandbox / path / cause, readable with
 * ops->errmsg(self) on the same thread until that thread's next call on the
 * driver. Callers decide by the code alone, never by the message.
 *
 * Ownership: every pointer argument is borrowed for the call unless stated;
 * every out-pointer that is malloc'd says how to free it.
 *
 * Thread safety: every op may be called from any number of threads at once
 * on one driver (the activities run on the worker's activity threads), on the
 * same or distinct sandboxes. Ops on one sandbox have no ordering between
 * them except that create/delete/checkpoint/restore of one name are
 * serialised by the driver. */
#ifndef DBX_ACTIVITIES_DRIVER_H
#define DBX_ACTIVITIES_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The typed errors. The activity layer maps each to a Temporal failure type
 * (sandbox.h "Failures") by a table; the column says which. The texts of
 * STATE and FAILED are those of DBX_ESTATE and DBX_EIO (base/err.h): failure
 * messages read "<what>: <detail> (i/o error)" as before the interface.
 * REPO_NOT_FOUND .. DISK_FULL are failures no retry can mend, told apart by
 * the driver at their source (git's exit status and words, the path checked
 * before a clone, ENOSPC / EDQUOT of a write): a repository that does not
 * exist, a folder or remote that is no git repository, a branch / tag /
 * commit the repository lacks, a full disk (or quota). AUTH, non-retryable
 * too: the backend or a git remote refused the credentials (Daytona's HTTP
 * 401 / 403: a bad or revoked API key, a key without the scope; git's
 * "Authentication failed"); its message names which credentials. */
#define DBX_DRV_ERR_MAP(XX)                                                                  \
  XX(DBX_DRV_OK, "success")                                                                  \
  XX(DBX_DRV_NO_SANDBOX, "no such sandbox")                  /* SandboxNotFound */           \
  XX(DBX_DRV_PATH_REFUSED, "path refused")                   /* PathRefused */               \
  XX(DBX_DRV_NOT_FOUND, "no such file, folder or command")   /* FileNotFound */              \
  XX(DBX_DRV_SOURCE_NOT_FOUND, "source not found")           /* SourceNotFound */            \
  XX(DBX_DRV_CONFLICT, "name taken by another sandbox")      /* SandboxConflict */           \
  XX(DBX_DRV_SNAPSHOT_FAILED, "snapshot failed")             /* SnapshotFailed (retryable) */\
  XX(DBX_DRV_OUTCOME_UNKNOWN, "outcome unknown")             /* OutcomeUnknown */            \
  XX(DBX_DRV_TRANSIENT, "transient, retry")                  /* SandboxError (retryable) */  \
  XX(DBX_DRV_INVALID, "invalid argument")                    /* InvalidInput */              \
  XX(DBX_DRV_STATE, "invalid state")                         /* SandboxError (retryable) */  \
  XX(DBX_DRV_CANCELED, "canceled")                           /* the activity is cancelled */ \
  XX(DBX_DRV_UNSUPPORTED, "not supported by this driver")    /* Unsupported */               \
  XX(DBX_DRV_NOMEM, "out of memory")                         /* DBX_ENOMEM */                \
  XX(DBX_DRV_FAILED, "i/o error")                            /* SandboxError (retryable) */\
  XX(DBX_DRV_REPO_NOT_FOUND, "repository not found")         /* RepositoryNotFound */        \
  XX(DBX_DRV_NOT_A_REPO, "not a git repository")             /* NotAGitRepository */         \
  XX(DBX_DRV_REF_NOT_FOUND, "no such branch, tag or commit") /* RefNotFound */               \
  XX(DBX_DRV_DISK_FULL, "no space left on device")           /* DiskFull */             \
  XX(DBX_DRV_AUTH, "credentials refused")                    /* AuthFailed */

typedef enum {
#define XX(name, msg) name,
  DBX_DRV_ERR_MAP(XX)
#undef XX
      DBX_DRV_ERR_COUNT
} dbx_drv_err;

/* Static text, never NULL (also for values out of range). */
const char *dbx_drv_strerror(dbx_drv_err e);
/* 1 if s is a valid sandbox / snapshot / command name (see above), else 0. */
int dbx_drv_name_valid(const char *s);

/* ---- argument types ---- */

typedef struct {
  const char *key;   /* 1..63 of [A-Za-z0-9._/-] */
  const char *value; /* 0..255 bytes, no NUL, no newline */
} dbx_drv_label;
/* 1 if l's key and value follow the rules above, else 0. */
int dbx_drv_label_valid(const dbx_drv_label *l);

typedef enum {
  DBX_DRV_SOURCE_EMPTY = 0, /* an empty workspace */
  DBX_DRV_SOURCE_DIR,       /* location: a host directory, copied (local driver only) */
  DBX_DRV_SOURCE_GIT,       /* location: repository path or URL; ref: optional checkout */
  DBX_DRV_SOURCE_SNAPSHOT,  /* location: a ref from ops->checkpoint */
  DBX_DRV_SOURCE_IMAGE      /* location: a container image (Daytona); local: UNSUPPORTED */
} dbx_drv_source_kind;

typedef struct {
  dbx_drv_source_kind kind;
  const char *location; /* unused for EMPTY */
  const char *ref;      /* GIT only; NULL: the default branch */
} dbx_drv_source;

/* Credentials for a git remote over HTTP(S) (a token as the password), held
 * by the worker: resolved from its environment (dbx_drv_git_cred_from_env),
 * never from activity input. A driver hands them to git only for the host
 * of the URL the operation names, never writes them into the workspace, the
 * sandbox's environment, a command text or a message, and keeps no copy
 * after the call (local: a credential helper given on git's command line
 * reads them from git's own process environment; Daytona: a Daytona secret
 * restricted to the remote's host, the sandbox seeing only its placeholder;
 * docs/sandbox.md "Git credentials").
 * Borrowed for the call. */
typedef struct {
  const char *username; /* NULL or "": "x-access-token" (what GitHub takes with a token) */
  const char *password; /* the token; required */
} dbx_drv_git_cred;

/* Fill *c from the worker's environment: the password from $token_var
 * (NULL: "GIT_TOKEN"), the username from $user_var (NULL: "GIT_USERNAME";
 * unset: the default above). The strings are getenv()'s (borrowed, valid
 * until the environment changes). DBX_OK; DBX_ENOTFOUND (the token variable
 * is unset or empty; *c zeroed). Thread-safe as getenv(). */
dbx_err dbx_drv_git_cred_from_env(const char *user_var, const char *token_var,
                                  dbx_drv_git_cred *c);

/* What a sandbox reaches of the network. */
typedef enum {
  DBX_DRV_NET_HOST = 0, /* the host's network (the default) */
  DBX_DRV_NET_NONE      /* none at all, not even the host's loopback (local: bubblewrap
                         * --unshare-net; a driver that cannot enforce it answers UNSUPPORTED) */
} dbx_drv_network;

/* What a sandbox sees of the host's files (besides its workspace and HOME). */
typedef enum {
  DBX_DRV_FS_HOST = 0, /* the host's root, read-only (the default) */
  DBX_DRV_FS_SYSTEM    /* only the system folders (/usr, /bin, /lib*, /sbin, /etc, /opt),
                        * read-only; a driver that cannot enforce it answers UNSUPPORTED */
} dbx_drv_host_fs;

typedef struct {
  dbx_drv_source source;
  dbx_drv_network network;     /* fixed at create; part of the identity an adopt compares */
  dbx_drv_host_fs host_fs;     /* likewise */
  const dbx_drv_label *labels; /* set on a fresh sandbox; an adopted one keeps its own */
  size_t nlabels;
  const char *const *env;      /* NULL-terminated "NAME=value", the sandbox's own
                                * environment: every exec command sees it, under its own
                                * exec env (which wins for a name both have). Daytona: the
                                * create's `env` (kept by Daytona in the clear: no secrets
                                * here); local: meta/env; memory: kept per sandbox. An
                                * adopted sandbox keeps its own. */
  /* Sizes; 0: the driver's default. cpu in cores, memory_gib and disk_gib
   * in GiB. Daytona: the create's `cpu`, `memory`, `disk` (honoured when it
   * builds from an image; a snapshot brings its own). Local: memory_gib is
   * each exec process's address-space limit (RLIMIT_AS); cpu and disk are
   * not enforced (DBX_DRV_UNENFORCED_*). An adopted sandbox keeps its own. */
  uint32_t cpu;
  uint32_t memory_gib;
  uint32_t disk_gib;
  /* Daytona's lifecycle intervals in minutes (borrowed; NULL: Daytona's
   * default): autoStopInterval (0: never), autoArchiveInterval (0: the
   * maximum), autoDeleteInterval (0: at stop; -1: never). The local and
   * memory drivers do not enforce them (DBX_DRV_UNENFORCED_*). */
  const int32_t *auto_stop_minutes;
  const int32_t *auto_archive_minutes;
  const int32_t *auto_delete_minutes;
  /* Optional (NULL: not asked): create sets *unenforced to the
   * DBX_DRV_UNENFORCED_* bits of the options above that were given and that
   * this driver takes without enforcing them (the activity reports them). */
  unsigned *unenforced;
  /* Optional: polled (about every 50 ms) from the calling thread while a
   * long create (copy, clone, image pull) runs; nonzero stops it and create
   * answers DBX_DRV_CANCELED, leaving no partial sandbox that a later create
   * would adopt. */
  int (*cancelled)(void *ud);
  void *cancelled_ud;
  /* GIT sources only (NULL: none): the worker's credentials for an http(s)
   * location (dbx_drv_git_cred above), used for the clone alone; not kept,
   * not part of the identity an adopt compares. INVALID with a location
   * that is no http(s) URL; AUTH when the remote refuses them. */
  const dbx_drv_git_cred *git_cred;
} dbx_drv_create_opts;

/* Bits of dbx_drv_create_opts.unenforced. */
#define DBX_DRV_UNENFORCED_CPU 0x01u
#define DBX_DRV_UNENFORCED_MEMORY 0x02u
#define DBX_DRV_UNENFORCED_DISK 0x04u
#define DBX_DRV_UNENFORCED_AUTO_STOP 0x08u
#define DBX_DRV_UNENFORCED_AUTO_ARCHIVE 0x10u
#define DBX_DRV_UNENFORCED_AUTO_DELETE 0x20u

typedef enum { DBX_DRV_RUNNING = 0, DBX_DRV_STOPPED } dbx_drv_state;

typedef struct {
  const char *command;     /* run by /bin/sh -c (Daytona: a session command) */
  const char *cwd;         /* relative to the workspace; NULL: its root */
  const char *const *env;  /* NULL-terminated "NAME=value", added to the driver's scrubbed base */
  int64_t timeout_ms;      /* 0: none; on expiry the command is killed, timed_out = 1 */
  size_t stdout_cap_bytes; /* bytes kept per stream; 0: 1 MiB (see "Capture" below) */
  size_t stderr_cap_bytes;
  int32_t attempt;         /* exec_start: the activity attempt (>= 1) that starts or
                            * re-attaches, for fencing (exec_cancel_as); 0: none */
} dbx_drv_exec_opts;

/* Capture. Of a stream longer than its cap, a driver keeps the head (the
 * first cap - DBX_DRV_TAIL_BYTES(cap) bytes) and the tail (the last
 * DBX_DRV_TAIL_BYTES(cap) bytes); a cap under 1 KiB keeps the head alone.
 * exec_result gives them as one buffer, head then tail, with *_head_len
 * saying where the cut is. While the command runs (exec_attach) the stream
 * reads in order until the cap; past it, the bytes after the head are a ring
 * (the local driver's file) and read out of order. */
#define DBX_DRV_TAIL_MIN_CAP ((size_t)1024)
#define DBX_DRV_TAIL_BYTES(cap) ((cap) >= DBX_DRV_TAIL_MIN_CAP ? (cap) / 2 : (size_t)0)

typedef enum {
  DBX_DRV_CMD_PENDING = 0, /* known, not (yet) running: start it again to launch it */
  DBX_DRV_CMD_RUNNING,
  DBX_DRV_CMD_FINISHED,    /* the exit status is known: ops->exec_result */
  DBX_DRV_CMD_LOST         /* started, no status, nothing runs it: outcome unknown */
} dbx_drv_cmd_state;

typedef struct {
  dbx_drv_cmd_state state;
  uint64_t stdout_size; /* bytes of each stream readable now (the log offset's end) */
  uint64_t stderr_size;
} dbx_drv_cmd_status;

typedef struct {
  int exit_code;         /* 128 + signal when killed by one */
  int signal;            /* the signal that killed the shell, or 0 when unknown */
  int timed_out;
  int killed;            /* stopped by ops->exec_cancel */
  uint8_t *stdout_buf;   /* malloc'd, stdout_len kept bytes plus a NUL not counted */
  size_t stdout_len;
  uint64_t stdout_total; /* all bytes written to stdout */
  int stdout_truncated;  /* stdout_total > stdout_len */
  size_t stdout_head_len; /* truncated: buf[0, head_len) is the head, the rest the
                           * tail; stdout_total - stdout_len bytes were cut between */
  uint8_t *stderr_buf;
  size_t stderr_len;
  uint64_t stderr_total;
  int stderr_truncated;
  size_t stderr_head_len;
  int64_t duration_ms;
  /* the command never started, and nothing of it ran (the driver knows it
   * for certain: its supervisor failed before or at exec): why; else "".
   * exit_code is then 127 and the streams empty. */
  char not_started[256];
} dbx_drv_exec_result;

/* Frees the buffers and zeroes *r; accepts a zeroed struct or NULL. */
void dbx_drv_exec_result_cleanup(dbx_drv_exec_result *r);
/* Frees n names of a list and the array; accepts NULL. */
void dbx_drv_names_free(char **names, size_t n);
/* Frees n labels (keys, values) and the array; accepts NULL. */
void dbx_drv_labels_free(dbx_drv_label *labels, size_t n);
/* Host files for upload and download, for drivers that move the bytes
 * themselves. dbx_drv_host_read: the whole of the absolute host_path into
 * *buf (malloc'd, free(); *n bytes). dbx_drv_host_write: data[0, len) into
 * the absolute host_path, atomically (a temporary beside it, then rename).
 * DBX_DRV_OK, or INVALID (not absolute, not a readable file), NOT_FOUND,
 * FAILED (errno's words), NOMEM; why[0, why_n) then says which path and why
 * (empty for NOMEM). dbx_drv_host_path_check: 1 when host_path is
 * absolute, else 0 with why set (the INVALID of the other two, to check
 * before moving any bytes). Thread-safe. */
int dbx_drv_host_path_check(const char *host_path, char *why, size_t why_n);
dbx_drv_err dbx_drv_host_read(const char *host_path, char **buf, size_t *n, char *why,
                              size_t why_n);
dbx_drv_err dbx_drv_host_write(const char *host_path, const void *data, size_t len, char *why,
                               size_t why_n);

/* ---- the operations ----
 * `self` is dbx_driver.self. "name" is a sandbox name. Unless an op says
 * otherwise it may answer DBX_DRV_INVALID (a bad name or argument),
 * DBX_DRV_NO_SANDBOX, DBX_DRV_NOMEM, DBX_DRV_TRANSIENT (try again) and
 * DBX_DRV_FAILED (any other failure; the message says what). */
typedef struct dbx_driver_ops {
  /* Free the instance. No op may be running. Accepts NULL. */
  void (*destroy)(void *self);
  /* The calling thread's last failure on self, "" if none; never NULL.
   * Valid until that thread's next call on self. */
  const char *(*errmsg)(void *self);

  /* -- lifecycle (Daytona: /sandbox) -- */

  /* Create sandbox `name` (running) from o->source, or adopt it when it
   * already exists with the same source (*adopted = 1, nothing changes).
   * A partial sandbox left by an interrupted create is cleared and made
   * again. adopted may be NULL. Also SOURCE_NOT_FOUND (source dir, repo or
   * snapshot missing; a GIT source: REPO_NOT_FOUND), NOT_A_REPO (a GIT
   * source that is no repository), REF_NOT_FOUND (its ref does not exist),
   * DISK_FULL, CONFLICT (name taken with another source),
   * UNSUPPORTED (source kind), CANCELED (o->cancelled said so). */
  dbx_drv_err (*create)(void *self, const char *name, const dbx_drv_create_opts *o,
                        int *adopted);
  /* Host path of the workspace, malloc'd (free()), or NULL when the driver
   * has no host path (remote sandboxes) or on OOM. Informational. */
  char *(*workspace_path)(void *self, const char *name);
  /* OK and *state, or NO_SANDBOX. state may be NULL. */
  dbx_drv_err (*exists)(void *self, const char *name, dbx_drv_state *state);
  /* Names of the sandboxes whose labels include every pair of match (all
   * sandboxes when nmatch = 0), in no order. *names: free with
   * dbx_drv_names_free(*names, *n). */
  dbx_drv_err (*list)(void *self, const dbx_drv_label *match, size_t nmatch, char ***names,
                      size_t *n);
  /* The labels of sandbox name. *labels: free with dbx_drv_labels_free. */
  dbx_drv_err (*labels)(void *self, const char *name, dbx_drv_label **labels, size_t *n);
  /* Idempotent. Exec and file ops on a stopped sandbox answer STATE. */
  dbx_drv_err (*start)(void *self, const char *name);
  dbx_drv_err (*stop)(void *self, const char *name);
  /* Remove the sandbox; its running commands are killed first. A missing
   * sandbox counts as done (OK). */
  dbx_drv_err (*del)(void *self, const char *name);

  /* -- long commands (Daytona: session exec runAsync + command/logs) -- */

  /* Start o->command as command cmd_id of the sandbox, detached from the
   * caller (it survives the caller's process; Daytona: a session named by
   * cmd_id with one runAsync command), unless cmd_id exists: then
   * nothing starts and *adopted = 1 (poll to see its state). adopted may be
   * NULL. Also NOT_FOUND (cwd), PATH_REFUSED (cwd), STATE (stopped),
   * OUTCOME_UNKNOWN (the driver cannot tell whether it started). */
  dbx_drv_err (*exec_start)(void *self, const char *name, const char *cmd_id,
                            const dbx_drv_exec_opts *o, int *adopted);
  /* State and readable output sizes; never blocks on the command.
   * NOT_FOUND: no such command. */
  dbx_drv_err (*exec_poll)(void *self, const char *name, const char *cmd_id,
                           dbx_drv_cmd_status *st);
  /* Read up to cap bytes of stream (1 stdout, 2 stderr) from offset into buf
   * (borrowed); *n = bytes read, 0 at the current end. NOT_FOUND. */
  dbx_drv_err (*exec_attach)(void *self, const char *name, const char *cmd_id, int stream,
                             uint64_t offset, void *buf, size_t cap, size_t *n);
  /* The result of a FINISHED command. *res: release with
   * dbx_drv_exec_result_cleanup. NOT_FOUND, STATE (not finished). */
  dbx_drv_err (*exec_result)(void *self, const char *name, const char *cmd_id,
                             dbx_drv_exec_result *res);
  /* Ask the command to be killed; asynchronous (poll until FINISHED with
   * killed = 1). A finished or missing command: OK. */
  dbx_drv_err (*exec_cancel)(void *self, const char *name, const char *cmd_id);
  /* Forget a command that does not run (a LOST one before starting it
   * again). Missing: OK. STATE: it is running. */
  dbx_drv_err (*exec_forget)(void *self, const char *name, const char *cmd_id);
  /* Fencing (optional: NULL where the driver keeps no owner; callers then use
   * exec_cancel). exec_cancel on behalf of attempt, unless a newer attempt
   * has claimed cmd_id (exec_start with a higher o->attempt): then nothing
   * happens and *superseded = 1. A claim and this check never interleave. An
   * exec_start by an older attempt than the owner answers STATE, and one by
   * a newer attempt starts anew a command an older attempt had killed. */
  dbx_drv_err (*exec_cancel_as)(void *self, const char *name, const char *cmd_id,
                                int32_t attempt, int *superseded);
  /* A file descriptor that becomes readable (or hangs up) when running
   * command cmd_id may have finished, for a caller that waits without a
   * thread (worker/api.h dbx_act_park); *fd: the caller's, close() it. A
   * hint only: after it fires, exec_poll says what happened, and a command
   * can end without it firing (poll on a timer too). Optional: NULL where
   * the driver has none (callers then poll on a timer). Local: a pidfd of
   * the command's supervisor. NOT_FOUND (no such command), STATE (not
   * running, or no supervisor recorded yet), FAILED. */
  dbx_drv_err (*exec_wait_fd)(void *self, const char *name, const char *cmd_id, int *fd);

  /* -- files (Daytona: /files) -- */

  /* Read a regular file; max_bytes 0: 64 MiB (larger: INVALID). *data:
   * malloc'd plus a NUL not counted in *len; free(). NOT_FOUND,
   * PATH_REFUSED, INVALID (not a regular file, too large), STATE. */
  dbx_drv_err (*file_read)(void *self, const char *name, const char *path, size_t max_bytes,
                           uint8_t **data, size_t *len);
  /* Replace the file with len bytes, atomically; parents are created.
   * PATH_REFUSED, INVALID (a directory there), STATE. */
  dbx_drv_err (*file_write)(void *self, const char *name, const char *path, const void *data,
                            size_t len);
  /* Copy the host file host_path (absolute) into the sandbox at path,
   * atomically. NOT_FOUND (no such host file), PATH_REFUSED, STATE. */
  dbx_drv_err (*upload)(void *self, const char *name, const char *host_path, const char *path);
  /* Copy the sandbox file at path to the host file host_path (absolute;
   * replaced atomically, its folder must exist). NOT_FOUND, PATH_REFUSED,
   * STATE, FAILED (the host file could not be written). */
  dbx_drv_err (*download)(void *self, const char *name, const char *path, const char *host_path);

  /* -- git, inside the sandbox (Daytona: /git) -- */

  /* Clone url (a repository path or URL) into path (relative, non-empty;
   * a partial or earlier target there is removed first), then check out ref
   * when given. SOURCE_NOT_FOUND is not used: a failed clone is
   * REPO_NOT_FOUND (no such repository), NOT_A_REPO (url is none),
   * REF_NOT_FOUND (no such ref), DISK_FULL, or FAILED with git's words
   * (unreachable, refused: worth a retry). PATH_REFUSED, STATE. */
  dbx_drv_err (*git_clone)(void *self, const char *name, const char *url, const char *path,
                           const char *ref);
  /* git add -A and commit in the repository at repo_path (relative; NULL:
   * the workspace root), author and committer "Name <email>". *sha: hex,
   * malloc'd (free()); NULL with *nothing = 1 when there was nothing to
   * commit. Idempotent by trailer: when message's last line is
   * "Durabox-Commit: <token> <attempt>" and a recent commit of HEAD carries
   * that token with a lower attempt, nothing is committed and *sha is that
   * commit's (a retried commit that had landed).
   * NOT_FOUND (no repo_path folder), NOT_A_REPO, DISK_FULL, FAILED (git's
   * words). */
  dbx_drv_err (*git_commit)(void *self, const char *name, const char *repo_path,
                            const char *message, const char *author, char **sha, int *nothing);
  /* git_commit staging and committing only the npaths paths (relative to
   * repo_path, literal, a folder meaning all below it; npaths 0: all, as
   * git_commit). Optional: NULL where the driver has no such choice (the
   * activity then refuses paths as UNSUPPORTED). PATH_REFUSED (a path leads
   * out), FAILED (a path git does not know: git's words). */
  dbx_drv_err (*git_commit_paths)(void *self, const char *name, const char *repo_path,
                                  const char *const *paths, size_t npaths, const char *message,
                                  const char *author, char **sha, int *nothing);
  /* git push the current branch (branch NULL) or branch of repo_path (NULL:
   * root) to remote (a remote name, repository path or URL; NULL: origin).
   * NOT_FOUND (no repo_path folder), NOT_A_REPO (repo_path or remote is
   * none), REPO_NOT_FOUND, REF_NOT_FOUND (no such branch), FAILED (rejected,
   * unreachable: git's words). */
  dbx_drv_err (*git_push)(void *self, const char *name, const char *repo_path, const char *remote,
                          const char *branch);
  /* git_clone and git_push with credentials for the remote (cred NULL: as
   * the ops above). Optional: NULL where the driver cannot keep them out of
   * the sandbox (memory); callers then refuse credentials as UNSUPPORTED.
   * AUTH: the remote refused them (or asked for them and got none). */
  dbx_drv_err (*git_clone_cred)(void *self, const char *name, const char *url, const char *path,
                                const char *ref, const dbx_drv_git_cred *cred);
  dbx_drv_err (*git_push_cred)(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch,
                               const dbx_drv_git_cred *cred);
  /* git pull, fast-forward only: fetch branch (NULL: the current branch's
   * name) from remote (NULL: origin; with cred: the remote's http(s) URL,
   * as git_push_cred) and fast-forward the current branch of repo_path
   * (NULL: the root) to it; cred NULL: none. Optional (NULL where the
   * driver has none: callers answer UNSUPPORTED). NOT_FOUND (no repo_path
   * folder), NOT_A_REPO, REPO_NOT_FOUND, REF_NOT_FOUND (no such branch
   * there), AUTH, FAILED (not a fast-forward, local changes in the way,
   * unreachable: git's words). */
  dbx_drv_err (*git_pull)(void *self, const char *name, const char *repo_path, const char *remote,
                          const char *branch, const dbx_drv_git_cred *cred);

  /* -- checkpoints (Daytona: POST /sandbox/{id}/snapshot + GET /snapshots) -- */

  /* Snapshot the workspace as snap (a deterministic name); success only
   * once the snapshot is verified usable; an existing snap is returned
   * unchanged (idempotent). *ref: malloc'd (free()), usable as a SNAPSHOT
   * source and by restore. SNAPSHOT_FAILED (copy or verification failed). */
  dbx_drv_err (*checkpoint)(void *self, const char *name, const char *snap, char **ref);
  /* Replace the sandbox's workspace with the snapshot ref, atomically (a
   * failure leaves the old workspace). SOURCE_NOT_FOUND (no such snapshot),
   * STATE (commands are running), UNSUPPORTED where the backend restores
   * only by creating a new sandbox from the snapshot (Daytona: create with
   * source SNAPSHOT instead). */
  dbx_drv_err (*restore)(void *self, const char *name, const char *ref);
  /* Remove a snapshot; a missing one counts as done. */
  dbx_drv_err (*snapshot_delete)(void *self, const char *ref);
} dbx_driver_ops;

typedef struct dbx_driver {
  const dbx_driver_ops *ops; /* static table */
  void *self;                /* the instance, owned by whoever made the driver */
  const char *name;          /* "local", "memory", "daytona" (static) */
} dbx_driver;

#endif
