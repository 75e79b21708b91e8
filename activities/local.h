/* The local sandbox driver: sandboxes as directories and processes on this host.
 *
 * A driver handle (dbx_local) names a home directory ($DURABOX_HOME, default
 * ~/.local/share/durabox). Under it:
 *   sandboxes/<id>/workspace   the sandbox's files; commands run here
 *   sandboxes/<id>/meta        state ("running"/"stopped"), source, scripts
 *   snapshots/<name>           checkpoints (copies of a workspace)
 *   locks/<id>, trash/         per-sandbox create/delete locks, deletions
 * Sandbox ids and snapshot names are caller-chosen deterministic names:
 * 1..128 characters of [A-Za-z0-9._-], not starting with '.'.
 *
 * Commands run with /bin/sh -c in a new process group, stdin /dev/null, a
 * scrubbed environment, under bubblewrap (probed once at open; see
 * docs/sandbox.md): their own PID namespace and /proc (host processes are
 * neither visible nor signalable), a minimal /dev, / read-only (or only the
 * system folders: host_fs "system", a sandbox setting), /tmp private,
 * the durabox home hidden except the sandbox's workspace and home (both
 * read-write at their own paths), the network shared ("host") or absent
 * ("none": a sandbox setting). HOME is sandboxes/<id>/home, outside the
 * workspace, with XDG_CACHE_HOME=$HOME/.cache and XDG_CONFIG_HOME=$HOME/.config.
 * Where bubblewrap is missing or unusable (no user namespaces) open refuses,
 * unless the caller opts out explicitly (dbx_local_open_opts.unsandboxed or
 * DURABOX_UNSANDBOXED=1): then commands run directly on this host.
 *
 * Errors: every call returns a dbx_err; on failure a message naming the
 * sandbox/path is available from dbx_local_errmsg() on the same thread.
 *
 * Thread safety: after dbx_local_open (and dbx_local_bwrap_set, if used) the
 * handle is read-only, so any number of threads may call functions on one
 * handle at once, on distinct sandboxes. create/delete/checkpoint of the same
 * id are serialised by a file lock (also across processes); exec and file
 * calls on one sandbox may overlap, with no ordering between them; stop does
 * not interrupt an exec already running. dbx_local_errmsg() reports the
 * calling thread's last failure on that handle. */
#ifndef DBX_ACTIVITIES_LOCAL_H
#define DBX_ACTIVITIES_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "activities/driver.h"
#include "base/err.h"

typedef struct dbx_local dbx_local;

/* The exec supervisor's entry point. Every program that links this driver
 * and may start detached commands (dbx_local_exec_start: the durabox CLI,
 * test programs) calls it first thing in main(), before any other setup:
 *   int main(int argc, char **argv) {
 *     dbx_local_supervisor_main(argc, argv);
 *     ...
 * When argv is a supervisor invocation (argv[1] == "__dbx_local_supervise",
 * made by dbx_local_exec_start re-executing /proc/self/exe) it runs the
 * supervisor and never returns (it ends the process with _exit); otherwise
 * it returns -1 at once and does nothing. No library constructor is used. */
int dbx_local_supervisor_main(int argc, char **argv);

/* The driver interface (driver.h) over d: borrowed, valid until
 * dbx_local_close(d). Its ops map this module's errors to dbx_drv_err. */
dbx_driver *dbx_local_driver(dbx_local *d);
/* The typed kind of the calling thread's last failure on d when its dbx_err
 * alone does not tell (DBX_DRV_NO_SANDBOX, DBX_DRV_PATH_REFUSED,
 * DBX_DRV_SOURCE_NOT_FOUND, DBX_DRV_SNAPSHOT_FAILED; with DBX_EIO, the
 * failures no retry mends: DBX_DRV_REPO_NOT_FOUND, DBX_DRV_NOT_A_REPO,
 * DBX_DRV_REF_NOT_FOUND from git's exit and words or the path checked
 * before a clone, DBX_DRV_DISK_FULL from ENOSPC / EDQUOT), else DBX_DRV_OK. */
dbx_drv_err dbx_local_errkind(const dbx_local *d);

/* The environment variable of the explicit opt-out: "1" runs commands
 * directly on this host, without bubblewrap. */
#define DBX_LOCAL_UNSANDBOXED_ENV "DURABOX_UNSANDBOXED"

typedef struct {
  /* 1: run commands directly on this host, without bubblewrap, even where it
   * is usable (the explicit opt-out; DURABOX_UNSANDBOXED=1 does the same). */
  int unsandboxed;
  /* The bwrap program (borrowed, used during open only); NULL: the first of
   * /usr/bin/bwrap, /usr/local/bin/bwrap, /bin/bwrap that exists. */
  const char *bwrap_path;
} dbx_local_open_opts;

/* Open a driver over home (borrowed; NULL: $DURABOX_HOME, else
 * $HOME/.local/share/durabox) with options o (borrowed; NULL: defaults).
 * Creates the home's folders and probes bwrap (runs it once). *out: close
 * with dbx_local_close(). Returns DBX_OK, DBX_EINVAL (no home could be
 * determined), DBX_EIO (folders could not be made), DBX_EUNSUPPORTED
 * (bubblewrap missing or unusable and no opt-out: the message says why and
 * how to opt out), DBX_ENOMEM. On failure dbx_local_errmsg(NULL) tells why. */
dbx_err dbx_local_open_with(const char *home, const dbx_local_open_opts *o, dbx_local **out);
/* dbx_local_open_with(home, NULL, out). */
dbx_err dbx_local_open(const char *home, dbx_local **out);
/* Accepts NULL. */
void dbx_local_close(dbx_local *d);
/* Message of the calling thread's last failed call on d; "" if none. Valid
 * until that thread's next call into this module. Never NULL. d NULL: the
 * message of the calling thread's last failed open ("" if none). */
const char *dbx_local_errmsg(const dbx_local *d);
/* The home directory (absolute; borrowed, valid until dbx_local_close). */
const char *dbx_local_home(const dbx_local *d);
/* 1 if commands run under bubblewrap, else 0. */
int dbx_local_bwrap_enabled(const dbx_local *d);
/* Turn bubblewrap off (on = 0) or back on. Call before sharing the handle.
 * Returns DBX_EUNSUPPORTED when on = 1 and the probe found bwrap unusable. */
dbx_err dbx_local_bwrap_set(dbx_local *d, int on);

typedef enum {
  DBX_LOCAL_SOURCE_EMPTY = 0, /* an empty workspace */
  DBX_LOCAL_SOURCE_DIR,       /* location: a host directory, copied */
  DBX_LOCAL_SOURCE_GIT,       /* location: repository path or URL, cloned; ref: optional checkout */
  DBX_LOCAL_SOURCE_SNAPSHOT   /* location: a ref from dbx_local_sandbox_checkpoint */
} dbx_local_source_kind;

typedef struct {
  dbx_local_source_kind kind;
  const char *location; /* borrowed; unused for EMPTY */
  const char *ref;      /* GIT only: branch, tag or commit to check out; NULL: default */
  /* Optional (NULL: none): polled about every 50 ms while a copy or clone
   * runs, from the calling thread; nonzero kills that tool's process group
   * and create answers DBX_ECANCELED (the partial sandbox is cleared by the
   * next create of the id). sandbox.create heartbeats from here. */
  int (*cancelled)(void *ud);
  void *cancelled_ud;
  /* Labels of a fresh sandbox (borrowed; dbx_drv_label_valid each), stored
   * in its meta before the create completes. An adopted sandbox keeps its
   * own labels. */
  const dbx_drv_label *labels;
  size_t nlabels;
  /* The sandbox's network (kept in its meta; part of its identity, like the
   * source). DBX_DRV_NET_NONE needs bubblewrap: create answers
   * DBX_EUNSUPPORTED without it. */
  dbx_drv_network network;
  /* What its commands see of the host's files (kept likewise).
   * DBX_DRV_FS_SYSTEM needs bubblewrap: DBX_EUNSUPPORTED without it. */
  dbx_drv_host_fs host_fs;
  /* The sandbox's own environment (borrowed; NULL-terminated "NAME=value";
   * NULL: none), kept in its meta (meta/env) and given to every exec
   * command of the sandbox (dbx_local_exec, dbx_local_exec_start) under the
   * command's own env, which wins for a name both have. Not given to the git
   * steps. An adopted sandbox keeps its own. Not part of the identity. */
  const char *const *env;
  /* The address-space limit (RLIMIT_AS, set by `ulimit -v` in the shell
   * before the command runs) of each exec command's processes, in MiB; 0:
   * none. Per process, not a total; kept in meta/limits; an adopted
   * sandbox keeps its own. cpu count, disk size and Daytona's auto-stop /
   * archive / delete are not enforced here (docs/sandbox.md). */
  uint64_t memory_mib;
  /* GIT only (NULL: none): credentials for an http(s) location, given to
   * the host's git clone as dbx_local_git_clone_cred gives them (a helper
   * reading git's own environment, for that URL's host alone); not kept,
   * not part of the identity. DBX_EINVAL with a location that is no
   * http(s) URL. */
  const dbx_drv_git_cred *git_cred;
} dbx_local_source;

/* Create sandbox id from src (running). Idempotent: if id exists with the
 * same source and settings (network, host_fs), it is adopted (*adopted = 1,
 * nothing changes); a partial sandbox left by an interrupted create is
 * cleared and made again. adopted may be NULL. Returns DBX_OK, DBX_EINVAL
 * (bad id, source or setting), DBX_EEXIST (id exists with another source or
 * settings), DBX_ENOTFOUND (source dir or snapshot missing), DBX_EUNSUPPORTED
 * (network none or host_fs system without bubblewrap), DBX_EIO (copy or
 * clone failed; message has git's words), DBX_ECANCELED (src->cancelled said
 * so). */
dbx_err dbx_local_sandbox_create(dbx_local *d, const char *id, const dbx_local_source *src,
                                 int *adopted);
/* Remove the sandbox and its workspace. Commands still running in it are
 * killed first (waiting up to 5 s for their supervisors). A missing sandbox
 * counts as done. Returns DBX_OK, DBX_EINVAL, DBX_EIO. */
dbx_err dbx_local_sandbox_delete(dbx_local *d, const char *id);
/* Record the sandbox as stopped / running (exec and file calls on a stopped
 * sandbox answer DBX_ESTATE). Idempotent. Returns DBX_OK, DBX_ENOTFOUND,
 * DBX_EINVAL, DBX_EIO. */
dbx_err dbx_local_sandbox_stop(dbx_local *d, const char *id);
dbx_err dbx_local_sandbox_start(dbx_local *d, const char *id);
/* Absolute path of the sandbox's workspace (it need not exist). Free with
 * free(); NULL on a bad id or OOM. */
char *dbx_local_sandbox_path(const dbx_local *d, const char *id);
/* DBX_OK when id is a complete sandbox (*running = 1 running, 0 stopped;
 * running may be NULL), DBX_ENOTFOUND, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_local_sandbox_exists(dbx_local *d, const char *id, int *running);
/* The labels of sandbox id. *labels: free with dbx_drv_labels_free(*labels,
 * *n). DBX_OK, DBX_ENOTFOUND, DBX_EINVAL, DBX_EIO (unreadable), DBX_ENOMEM. */
dbx_err dbx_local_sandbox_labels(dbx_local *d, const char *id, dbx_drv_label **labels,
                                 size_t *n);
/* Complete sandboxes whose labels include every pair of match (all when
 * nmatch = 0). *ids: free with dbx_drv_names_free(*ids, *n). DBX_OK,
 * DBX_EIO, DBX_ENOMEM. */
dbx_err dbx_local_sandbox_list(dbx_local *d, const dbx_drv_label *match, size_t nmatch,
                               char ***ids, size_t *n);
/* Bytes the sandbox takes on disk (allocated blocks of its folder:
 * workspace, home, meta, command logs; unreadable parts count 0). DBX_OK,
 * DBX_ENOTFOUND, DBX_EINVAL, DBX_ENOMEM. */
dbx_err dbx_local_sandbox_disk_bytes(dbx_local *d, const char *id, uint64_t *bytes);

/* 1 when a detached command of sandbox id is running (its supervisor
 * says so), else 0 (also for no such sandbox). */
int dbx_local_sandbox_busy(dbx_local *d, const char *id);

/* Leftovers: what an interrupted delete or create leaves behind, found and
 * finished by `durabox sandbox gc`. A delete first renames the sandbox's
 * folder (or a snapshot) to trash/<name>.<hex> (its tombstone: the sandbox is
 * gone at once) and then removes that tree; an interrupt in between leaves the
 * tombstone. A create that was interrupted leaves sandboxes/<id> without
 * meta/source (the next create of the id clears it; one whose create holds
 * its lock is under way and not listed). A checkpoint that died leaves its
 * copy in snapshots/.tmp-<name>-<hex>. */
typedef enum {
  DBX_LOCAL_LEFTOVER_TRASH = 0,    /* trash/<name>: a half-deleted tree */
  DBX_LOCAL_LEFTOVER_PARTIAL,      /* sandboxes/<name>: a half-created sandbox */
  DBX_LOCAL_LEFTOVER_SNAPSHOT_PART /* snapshots/.tmp-*: a checkpoint's copy that
                                      died before it became the snapshot (a copy
                                      under way holds a flock on its folder and
                                      is not listed) */
} dbx_local_leftover_kind;

typedef struct {
  dbx_local_leftover_kind kind;
  char *name;     /* the entry's name (malloc'd) */
  char *path;     /* its absolute path (malloc'd) */
  uint64_t bytes; /* on disk */
} dbx_local_leftover;

/* Every leftover now. *out: free with dbx_local_leftovers_free(*out, *n).
 * DBX_OK, DBX_EIO (a folder unreadable), DBX_ENOMEM. */
dbx_err dbx_local_leftovers(dbx_local *d, dbx_local_leftover **out, size_t *n);
/* Accepts NULL. */
void dbx_local_leftovers_free(dbx_local_leftover *l, size_t n);
/* Remove one leftover (l borrowed; only kind and name are read). A tombstone
 * that is gone already counts as done. DBX_OK, DBX_EINVAL (bad name or
 * kind), DBX_ESTATE (a delete or create of it is under way right now, or the
 * partial sandbox completed meanwhile: nothing removed), DBX_EIO. */
dbx_err dbx_local_leftover_remove(dbx_local *d, const dbx_local_leftover *l);

/* Replace the workspace with snapshot ref: a verified copy is made next to
 * it and exchanged with it in one rename (renameat2 RENAME_EXCHANGE), so a
 * failure leaves the old workspace. Refuses while a detached command runs
 * (DBX_ESTATE). Returns DBX_OK, DBX_EINVAL, DBX_ENOTFOUND (no sandbox:
 * errkind NO_SANDBOX; no snapshot: SOURCE_NOT_FOUND), DBX_ESTATE, DBX_EIO. */
dbx_err dbx_local_sandbox_restore(dbx_local *d, const char *id, const char *ref);

/* Snapshot the workspace as `name` (a deterministic name, e.g. run + event
 * id). The copy uses reflinks where the file system has them, else plain
 * copies (never hard links: the workspace keeps changing). Success only once
 * the copy is complete and its tree matches the workspace (entries, types,
 * sizes). If `name` already exists it is returned unchanged (idempotent).
 * *ref_out: the snapshot ref for DBX_LOCAL_SOURCE_SNAPSHOT; free with free().
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOTFOUND (no sandbox), DBX_EIO. Do not
 * checkpoint while a command changes the workspace: verification would fail. */
dbx_err dbx_local_sandbox_checkpoint(dbx_local *d, const char *id, const char *name,
                                     char **ref_out);
/* Remove a snapshot; a missing one counts as done. DBX_OK, DBX_EINVAL, DBX_EIO. */
dbx_err dbx_local_snapshot_delete(dbx_local *d, const char *ref);

/* One snapshot of the home (snapshots/<name>). */
typedef struct {
  char *name;      /* its ref (malloc'd) */
  uint64_t bytes;  /* on disk */
  int64_t made_ms; /* when it was made, ms since the epoch (its folder's
                      mtime, set as the copy completes; for a snapshot made
                      before that was done, the workspace's last change) */
  dbx_drv_label *labels; /* the labels of the sandbox it was made from
                            (durabox.workflow_id, durabox.run_id, ...;
                            malloc'd); none for a snapshot made before
                            they were kept, or whose checkpoint died before
                            writing them */
  size_t nlabels;
} dbx_local_snapshot;
/* Every snapshot now, in no order (half-made copies are leftovers, not
 * listed). *out: free with dbx_local_snapshots_free(*out, *n). DBX_OK (none:
 * *n = 0), DBX_EIO (the folder unreadable), DBX_ENOMEM. Reads only. */
dbx_err dbx_local_snapshots(dbx_local *d, dbx_local_snapshot **out, size_t *n);
/* Accepts NULL. */
void dbx_local_snapshots_free(dbx_local_snapshot *s, size_t n);

typedef struct {
  const char *command;     /* run by /bin/sh -c; any length (long ones go through a script file) */
  const char *cwd;         /* relative to the workspace, checked like file paths; NULL: the root */
  const char *const *env;  /* NULL-terminated "NAME=value" list added to the scrubbed base
                            * (PATH, HOME, XDG_CACHE_HOME, XDG_CONFIG_HOME, LANG=C.UTF-8,
                            * TERM=dumb); may override it */
  int64_t timeout_ms;      /* 0: none. On expiry the group gets SIGTERM, then SIGKILL after 1 s */
  size_t stdout_cap_bytes; /* bytes kept per stream; 0: 1 MiB */
  size_t stderr_cap_bytes;
  /* Cancellation hook of dbx_local_exec (NULL: none; detached commands are
   * stopped with dbx_local_exec_kill instead): polled every 50 ms while the
   * command runs, on the calling thread; once it returns non-zero the group
   * is killed as on a timeout (SIGTERM, SIGKILL after 1 s) and the result
   * has cancelled = 1. */
  int (*cancelled)(void *ud);
  void *cancelled_ud;
  /* dbx_local_exec_start only: the attempt (>= 1) of the activity that
   * starts or re-attaches (fencing, see "detached commands"); 0: none. */
  int32_t attempt;
} dbx_local_exec_opts;

typedef struct {
  int exit_code;          /* the shell's exit status; 128 + signal when killed by one */
  int signal;             /* the signal that killed the shell, else 0 (always 0 under bwrap,
                           * which reports a killed child as exit 128 + signal) */
  int timed_out;          /* the timeout fired and the group was killed */
  int cancelled;          /* opts.cancelled said so and the group was killed */
  uint8_t *stdout_buf;    /* stdout_len kept bytes of stdout, byte-exact, plus a NUL not counted:
                           * dbx_local_exec keeps the first bytes; a detached command the
                           * head and the tail (driver.h "Capture") */
  size_t stdout_len;
  uint64_t stdout_total;  /* all bytes the command wrote to stdout */
  int stdout_truncated;   /* stdout_total > stdout_len */
  size_t stdout_head_len; /* truncated: bytes of stdout_buf before the cut (the rest is the
                           * tail); dbx_local_exec: stdout_len */
  uint8_t *stderr_buf;
  size_t stderr_len;
  uint64_t stderr_total;
  int stderr_truncated;
  size_t stderr_head_len;
  int64_t duration_ms;
  char not_started[256]; /* detached commands: as dbx_local_cmd_status.not_started */
} dbx_local_exec_result;

/* Run opts->command in sandbox id and wait for the shell to exit (or the
 * timeout). Process rule: when the shell exits, what its pipes hold is read
 * and every process left in its group (backgrounded children) is killed with
 * SIGKILL; a child that escaped the group with setsid is not tracked.
 * *res: filled on DBX_OK (also on a timeout, with timed_out = 1 and the output
 * produced so far); release with dbx_local_exec_result_cleanup().
 * Returns DBX_OK (whatever the command's exit status), DBX_EINVAL (bad id,
 * cwd or env entry), DBX_ENOTFOUND (no sandbox or cwd), DBX_ESTATE (stopped),
 * DBX_EIO (spawn failed), DBX_ENOMEM. */
dbx_err dbx_local_exec(dbx_local *d, const char *id, const dbx_local_exec_opts *opts,
                       dbx_local_exec_result *res);
/* Frees the buffers and zeroes *r; accepts a zeroed struct. */
void dbx_local_exec_result_cleanup(dbx_local_exec_result *r);

/* ---- detached commands (survive the caller) ----
 *
 * dbx_local_exec_start runs a command under a small supervisor process that
 * does not depend on the caller: the caller's own executable is re-executed
 * (/proc/self/exe) as "__dbx_local_supervise" (which its main() hands to
 * dbx_local_supervisor_main() first thing; a program that does not call it
 * cannot start detached commands: the start fails with DBX_EIO) in
 * a new session with stdin/stdout/stderr on /dev/null; it forks once more
 * and the first process exits, so the supervisor is reparented to init (or
 * the nearest subreaper) and the caller never has to reap it.
 * The supervisor runs the command like dbx_local_exec (same scrubbed env,
 * cwd, bwrap rules, process group, group kill at the shell's exit, timeout
 * SIGTERM then SIGKILL after 1 s) and writes, under the sandbox's meta dir,
 *   cmds/<cmd_id>/stdout, stderr   at most cap bytes of each stream: in order
 *                                  up to the cap; past it the head stays and
 *                                  the bytes after it are a ring of the last
 *                                  DBX_DRV_TAIL_BYTES(cap) (driver.h "Capture"),
 *                                  which collect puts back in order
 *   cmds/<cmd_id>/started          written once, before the command starts
 *   cmds/<cmd_id>/status           written last (temp + fsync + rename + fsync
 *                                  of the folder): exit code, signal,
 *                                  timed_out, killed, byte totals, duration
 *   cmds/<cmd_id>/lock             flock'ed by the supervisor and inherited by
 *                                  every process of the command (fd 4): free
 *                                  only once all of them have exited
 *   cmds/<cmd_id>/supervisor, pgid "pid starttime" of the supervisor and of
 *                                  the command's group leader; pgid is durable
 *                                  before the command runs
 *   cmds/.owner-<cmd_id>           the highest attempt that claimed it (fencing)
 * A supervisor killed while its command runs: the command's processes die
 * with it under bwrap; unsandboxed, a poll kills the orphaned group. Either
 * way the command is RUNNING while any of its processes lives and LOST only
 * once none does, so a LOST command can be started again without overlap.
 * Fencing: a start with opts.attempt = N claims the command for attempt N;
 * a start by an older attempt is then refused (DBX_ESTATE), a kill asked by
 * one (dbx_local_exec_kill_as) is ignored, and a command an older attempt had
 * killed is started again for attempt N once it has stopped (never adopted
 * with its killed status).
 * The environment (which may hold secrets) reaches the supervisor through a
 * pipe, never a file. cmd_id is caller-chosen (deterministic, e.g. from the
 * activity's identity), a name like sandbox ids. Command folders live until
 * the sandbox is deleted or dbx_local_exec_forget() removes them.
 * Thread safety as the rest of the driver. */

typedef enum {
  DBX_LOCAL_CMD_PENDING = 0, /* folder made, supervisor not (yet) running it */
  DBX_LOCAL_CMD_RUNNING,     /* the supervisor lives */
  DBX_LOCAL_CMD_FINISHED,    /* status written */
  DBX_LOCAL_CMD_LOST         /* started, no status, no supervisor (it was killed,
                              * or the host rebooted): the outcome is unknown */
} dbx_local_cmd_state;

typedef struct {
  dbx_local_cmd_state state;
  uint64_t stdout_size;  /* bytes now in the stdout file (<= its cap) */
  uint64_t stderr_size;
  /* FINISHED only: */
  int exit_code;         /* as dbx_local_exec_result */
  int signal;
  int timed_out;
  int killed;            /* stopped by dbx_local_exec_kill */
  uint64_t stdout_total; /* all bytes written to the stream */
  uint64_t stderr_total;
  int64_t duration_ms;
  /* the supervisor could not start the command, and nothing of it ran
   * (setup, fork or exec failed, or its child died before exec): why, e.g.
   * "cannot start /usr/bin/bwrap: Broken pipe", with exit_code 127; else "" */
  char not_started[256];
} dbx_local_cmd_status;

/* Start opts->command in sandbox id as detached command cmd_id, unless that
 * command already exists: then nothing starts and *adopted = 1 (it may be
 * running, finished or lost: see dbx_local_exec_poll). A folder left by a
 * start that never launched (PENDING) is launched now. Returns once the
 * supervisor holds its lock (the command is then running or about to).
 * opts as for dbx_local_exec (caps bound the files; timeout counted from the
 * start). adopted may be NULL. Returns DBX_OK, DBX_EINVAL (bad id, cmd_id,
 * cwd or env entry), DBX_ENOTFOUND (no sandbox or cwd), DBX_ESTATE (stopped),
 * DBX_EIO (the supervisor could not be started), DBX_ENOMEM. */
dbx_err dbx_local_exec_start(dbx_local *d, const char *id, const char *cmd_id,
                             const dbx_local_exec_opts *opts, int *adopted);
/* Current state and output sizes of cmd_id (never blocks on the command).
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOTFOUND (no such command), DBX_EIO
 * (unreadable status). */
dbx_err dbx_local_exec_poll(dbx_local *d, const char *id, const char *cmd_id,
                            dbx_local_cmd_status *st);
/* *fd: a pidfd of cmd_id's supervisor, readable once it exits (after it
 * wrote the command's status, or died), for waiting without a thread;
 * close() it. Thread-safe as exec_poll. DBX_OK, DBX_EINVAL, DBX_ENOTFOUND,
 * DBX_ESTATE (finished, or no live supervisor recorded yet), DBX_EIO
 * (pidfd_open failed: kernel older than 5.3). */
dbx_err dbx_local_exec_wait_fd(dbx_local *d, const char *id, const char *cmd_id, int *fd);
/* Read up to cap bytes of stream (1 = stdout, 2 = stderr) from offset into
 * buf (borrowed); *n: bytes read (0 at the end). DBX_OK, DBX_EINVAL,
 * DBX_ENOTFOUND, DBX_EIO. */
dbx_err dbx_local_exec_read(dbx_local *d, const char *id, const char *cmd_id, int stream,
                            uint64_t offset, void *buf, size_t cap, size_t *n);
/* Ask the supervisor to kill the command's process group (SIGKILL); it
 * notices within ~100 ms and writes a status with killed = 1. Asynchronous:
 * poll to see it finish. A finished or missing command is left alone
 * (DBX_OK). Returns DBX_OK, DBX_EINVAL, DBX_EIO. */
dbx_err dbx_local_exec_kill(dbx_local *d, const char *id, const char *cmd_id);
/* dbx_local_exec_kill on behalf of attempt (>= 1; 0: as exec_kill): nothing
 * happens (*superseded = 1; superseded may be NULL) when a newer attempt has
 * claimed the command. Atomic with the claims of dbx_local_exec_start. */
dbx_err dbx_local_exec_kill_as(dbx_local *d, const char *id, const char *cmd_id, int32_t attempt,
                               int *superseded);
/* Fill *res (as dbx_local_exec would have) from a FINISHED command's files.
 * Release with dbx_local_exec_result_cleanup(). DBX_OK, DBX_EINVAL,
 * DBX_ENOTFOUND, DBX_ESTATE (not finished), DBX_EIO, DBX_ENOMEM. */
dbx_err dbx_local_exec_collect(dbx_local *d, const char *id, const char *cmd_id,
                               dbx_local_exec_result *res);
/* Remove command cmd_id's folder (e.g. a LOST one before starting it again).
 * Refuses a RUNNING command (DBX_ESTATE). Missing counts as done. */
dbx_err dbx_local_exec_forget(dbx_local *d, const char *id, const char *cmd_id);

/* Read the regular file at path (relative to the workspace root). Paths that
 * are absolute, contain "..", or pass through a symlink that leads outside
 * the workspace are refused (DBX_EINVAL, message names the path).
 * max_bytes: 0 means 64 MiB; a larger file is DBX_EINVAL.
 * *data: malloc'd (plus a NUL not counted in *len); free with free().
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOTFOUND, DBX_ESTATE (stopped), DBX_EIO. */
dbx_err dbx_local_file_read(dbx_local *d, const char *id, const char *path, size_t max_bytes,
                            uint8_t **data, size_t *len);
/* Replace the file at path with len bytes (mode 0644): a temp file in the
 * same folder, fsync, rename over the target, fsync the folder. Missing
 * parent folders are created. Same path rules and errors as read. */
dbx_err dbx_local_file_write(dbx_local *d, const char *id, const char *path, const void *data,
                             size_t len);

/* git add -A and git commit in the workspace (a git repository), inside the
 * sandbox, hooks off, with author and committer both set to author
 * ("Name <email>", borrowed). What is staged: every change of the repository
 * (new, modified and deleted files; .gitignore is respected), and nothing
 * outside it: HOME and the caches are not in the workspace. *sha_out: the new commit's hex sha, free with
 * free(). When there is nothing to commit: DBX_OK, *nothing_to_commit = 1 and
 * *sha_out = NULL. Returns DBX_OK, DBX_EINVAL, DBX_ENOTFOUND, DBX_ESTATE,
 * DBX_EIO (git failed; message has its stderr). */
dbx_err dbx_local_git_commit(dbx_local *d, const char *id, const char *message,
                             const char *author, char **sha_out, int *nothing_to_commit);
/* dbx_local_git_commit in the repository at repo_path (relative, checked
 * like file paths; NULL or "": the workspace root). */
dbx_err dbx_local_git_commit_at(dbx_local *d, const char *id, const char *repo_path,
                                const char *message, const char *author, char **sha_out,
                                int *nothing_to_commit);
/* dbx_local_git_commit_at staging and committing only the npaths paths
 * (borrowed; relative to repo_path, checked like file paths, taken literally:
 * no globs or pathspec magic; a folder means all below it). npaths 0: all, as
 * git_commit_at. The commit holds only those paths even when the index had
 * more staged. A path git does not know: DBX_EIO with git's words. */
dbx_err dbx_local_git_commit_paths(dbx_local *d, const char *id, const char *repo_path,
                                   const char *const *paths, size_t npaths, const char *message,
                                   const char *author, char **sha_out, int *nothing_to_commit);
/* git clone url (repository path or URL) into path (relative, not the root),
 * inside the sandbox (hooks off, no hard links to the source); what was at
 * path is removed first, so a retry after a partial clone starts clean. ref:
 * optional checkout. A host path url is bound read-only into bubblewrap.
 * Returns DBX_OK, DBX_EINVAL (path refused: errkind PATH_REFUSED),
 * DBX_ENOTFOUND, DBX_ESTATE, DBX_EIO (git's stderr in the message). */
dbx_err dbx_local_git_clone(dbx_local *d, const char *id, const char *url, const char *path,
                            const char *ref);
/* git push, inside the sandbox, of branch (NULL: HEAD, the current branch)
 * of repo_path (NULL: the root) to remote (NULL: "origin"; a remote name, a
 * URL, or an absolute host path of a repository, which is then bound
 * read-write into bubblewrap for the push). Same errors as git_clone. */
dbx_err dbx_local_git_push(dbx_local *d, const char *id, const char *repo_path,
                           const char *remote, const char *branch);
/* dbx_local_git_clone / dbx_local_git_push with credentials for an http(s)
 * remote (driver.h dbx_drv_git_cred; NULL: as those). url / remote must
 * then be an http(s) URL (DBX_EINVAL otherwise): git gets the credentials
 * from a credential helper on its command line that reads them from git's
 * own process environment and answers only for that URL's host; nothing is
 * written into the workspace or the sandbox's HOME, and the copies are
 * wiped after the call. A refusal by the remote is DBX_EIO with errkind
 * DBX_DRV_AUTH. */
dbx_err dbx_local_git_clone_cred(dbx_local *d, const char *id, const char *url, const char *path,
                                 const char *ref, const dbx_drv_git_cred *cred);
dbx_err dbx_local_git_push_cred(dbx_local *d, const char *id, const char *repo_path,
                                const char *remote, const char *branch,
                                const dbx_drv_git_cred *cred);
/* driver.h git_pull: git pull --ff-only of branch (NULL: the current
 * branch's name) from remote (NULL: origin) into repo_path (NULL: the
 * root), credentials as dbx_local_git_push_cred gives them. Errors as
 * dbx_local_git_push_cred. Thread-safe as the other git calls. */
dbx_err dbx_local_git_pull(dbx_local *d, const char *id, const char *repo_path,
                           const char *remote, const char *branch, const dbx_drv_git_cred *cred);

/* Copy the host file host_path (absolute) into the sandbox at path (as
 * dbx_local_file_write). DBX_ENOTFOUND (no host file or sandbox),
 * DBX_EINVAL (not a regular file, path refused), DBX_ESTATE, DBX_EIO. */
dbx_err dbx_local_file_upload(dbx_local *d, const char *id, const char *host_path,
                              const char *path);
/* Copy the sandbox file at path (as dbx_local_file_read, up to 4 GiB) to
 * host_path (absolute; replaced atomically; its folder must exist). */
dbx_err dbx_local_file_download(dbx_local *d, const char *id, const char *path,
                                const char *host_path);

#endif
