/* The Daytona driver: the driver interface (driver.h) over Daytona's HTTP
 * API (shared/reference/daytona-api.md): the control plane at the API URL
 * (sandboxes, snapshots) and each sandbox's toolbox, reached through the
 * sandbox's toolboxProxyUrl (commands, files, git). libcurl + cJSON.
 *
 * Mapping (driver.h op -> Daytona):
 *   create       GET /sandbox/{name}; absent: POST /sandbox {name, labels, env,
 *                snapshot | buildInfo (image), networkBlockAll, target}, then
 *                wait for "started" (a GIT source is cloned into the work-dir
 *                after start). Idempotent by name: a create whose reply was
 *                lost, or a 409 "name exists", finds the sandbox by name and
 *                adopts it when its source matches (the label
 *                durabox.source, hidden from ops->labels), else CONFLICT.
 *   exists/start/stop/del  GET / POST start / POST stop / DELETE, each
 *                waiting for the state with backoff (100 ms, x1.1 after 5 s,
 *                up to 1 s) under a deadline; a 409 during a transition waits
 *                for it to settle and decides again; stop of a stopped
 *                sandbox and delete of a missing one are success.
 *   exec_*       one session per command id (sessionId = cmd_id) holding one
 *                runAsync command; poll = GET session + command logs (stdout
 *                and stderr apart: the SDK-version header is sent). The env
 *                goes in a file under the sandbox's HOME ($HOME/.dbx/ID.env),
 *                sourced and emptied by the command, never in the command
 *                text (Daytona keeps command strings). Timeouts use
 *                timeout(1) in the sandbox (timed_out: exit 124). Cancel
 *                leaves a marker ($HOME/.dbx/ID.killed) and deletes the
 *                session, so a retried attempt sees the killed command
 *                (exit 137) instead of running it again; a session lost with
 *                its marker left (the sandbox restarted) is LOST. Output is
 *                byte-exact: the wrapper tees each stream to a raw file
 *                ($HOME/.dbx/ID.raw.out / .raw.err), which exec_result reads
 *                when the log's JSON text shows U+FFFD or a NUL; cleared
 *                once the result is made (left marked ".read" when the
 *                result came from them, for a retry, and removed by the
 *                next command started in the sandbox).
 *   files        GET /files/download (bytes), POST /files/upload-v2 (raw
 *                octet-stream body), GET /files/info.
 *   git_*        /git/clone (the target removed first), /git/status +
 *                /git/add + /git/commit, /git/push, /git/pull
 *                (git_pull); git_clone_cred / git_pull /
 *                git_push_cred store the token as a Daytona secret
 *                (POST /secret, hosts: the remote's host), mount it (PUT
 *                /sandbox/{id}/secrets) and send only its placeholder in
 *                the endpoints' password field; after the call the secret
 *                is unmounted and deleted (del deletes one a crash left).
 *   checkpoint   POST /sandbox/{id}/snapshot {name}, then GET
 *                /snapshots/{name} until "active": a capture that leaves no
 *                record once the sandbox left "snapshotting", or one still
 *                pending at the deadline, is SNAPSHOT_FAILED (never a false
 *                success). restore: UNSUPPORTED (create from the snapshot).
 *   list/labels  GET /sandbox?labels=<JSON>&cursor=... (every page).
 *
 * Errors, by the reference's table: 429 waits Retry-After (or
 * Retry-After-<throttler>) and tries again, any method; 502/503/504 and a
 * connection that failed or closed before any reply are tried again only
 * for calls safe to repeat (GET, DELETE, create by name, whole-file upload,
 * session create); an exec whose start cannot be confirmed is
 * OUTCOME_UNKNOWN; 500 is tried once more on safe calls; 408 never; 401/403
 * are AUTH (non-retryable AuthFailed: a bad key or scope, or git
 * credentials the remote refused; the message says which); a sandbox gone (404) is
 * NO_SANDBOX (SandboxNotFound, non-retryable). An empty or non-JSON error
 * body still gives a message naming the status and the endpoint. Messages
 * never hold the API key (it is sent only as the Authorization header).
 *
 * Connections: every op uses its own easy handle (so each activity execution
 * has its own client); connections are shared through one CURLSH cache and
 * dropped once idle for 25 s (CURLOPT_MAXAGE_CONN, under the proxy's 30 s).
 *
 * Quotas (worker-wide, per driver instance): at most max_live sandboxes made
 * by this driver and not yet deleted, and at most creates_per_min creates in
 * any 60 s; a create over either waits (heartbeating through the create's
 * cancelled callback) up to the state deadline, then answers TRANSIENT.
 *
 * Thread safety: every op from any number of threads (driver.h). Error
 * messages are per thread. Not across fork(): the connection cache holds
 * sockets, so a child process opens its own driver. */
#ifndef DBX_ACTIVITIES_DAYTONA_H
#define DBX_ACTIVITIES_DAYTONA_H

#include <stdint.h>

#include "activities/driver.h"
#include "base/err.h"

/* Daytona's cloud API (the SDKs' default). */
#define DBX_DAYTONA_DEFAULT_API_URL "https://app.daytona.io/api"
/* The SDK version sent; >= 0.167.0 makes the toolbox split stdout/stderr. */
#define DBX_DAYTONA_SDK_VERSION "0.205.1"

typedef struct dbx_daytona dbx_daytona;

typedef struct {
  const char *api_url;      /* NULL: $DAYTONA_API_URL, else the default above */
  const char *api_key;      /* NULL: $DAYTONA_API_KEY (required either way) */
  const char *target;       /* NULL: $DAYTONA_TARGET (may stay unset) */
  int max_live;             /* 0: $DURABOX_DAYTONA_MAX_SANDBOXES, else no limit */
  int creates_per_min;      /* 0: $DURABOX_DAYTONA_CREATES_PER_MIN, else no limit */
  int64_t state_wait_ms;    /* a state change's deadline; 0: 60 s */
  int64_t snapshot_wait_ms; /* a checkpoint's deadline; 0: 15 min */
  int64_t request_timeout_ms; /* one HTTP request; 0: 60 s */
} dbx_daytona_opts;

/* o may be NULL (all from the environment). Copies every string. *out: close
 * with dbx_daytona_close. DBX_OK; DBX_EINVAL (no API key, or a URL that is
 * not http(s)://: *why, when not NULL, gets a static message); DBX_ENOMEM;
 * DBX_EIO (libcurl could not start). */
dbx_err dbx_daytona_open(const dbx_daytona_opts *o, dbx_daytona **out, const char **why);
/* Accepts NULL. No op may be running. */
void dbx_daytona_close(dbx_daytona *d);
/* The driver interface over d: borrowed, valid until dbx_daytona_close. */
dbx_driver *dbx_daytona_driver(dbx_daytona *d);

#endif
