/* activities/github: the activity "github.open_pr", a pull request opened
 * through GitHub's REST API from the worker (never from the sandbox).
 *
 *   github.open_pr {"repo": "OWNER/NAME", "head": BRANCH, "base": BRANCH,
 *                   "title": TEXT, "body"?: TEXT, "api_url"?: URL}
 *     -> {"number", "url" (html_url), "api_url", "state", "created": bool}
 *   POST <api>/repos/OWNER/NAME/pulls, api: the input's api_url, else
 *   $GITHUB_API_URL, else https://api.github.com. $GITHUB_TOKEN (read when
 *   the activity runs; never in input, result, error or log) is sent as
 *   "Authorization: Bearer TOKEN". When GitHub answers 422 because an open
 *   pull request of that head exists, that one is looked up (GET
 *   .../pulls?head=OWNER:BRANCH) and returned with "created": false: a
 *   later push to the same branch updates it, so a later turn reports the
 *   same pull request instead of failing.
 *
 * Failures (failure_type, all non-retryable; the type is at_most_once):
 *   InvalidInput        a field missing, or repo not OWNER/NAME
 *   SecretMissing       GITHUB_TOKEN unset in the worker's environment
 *   GitHubAuthFailed    401, 403
 *   GitHubRepoNotFound  404
 *   GitHubRejected      422 (GitHub's message quoted) and other 4xx
 *   GitHubServerError   5xx: GitHub says it did not finish; whether the pull
 *                       request exists is for a person to check
 *   GitHubUnavailable   no connection was made (nothing was sent)
 *   OutcomeUnknown      the request was sent and no reply came
 * Thread safety: any number at once (a handle per call). */
#ifndef DBX_ACTIVITIES_GITHUB_H
#define DBX_ACTIVITIES_GITHUB_H

#include "activities/driver.h"
#include "base/err.h"
#include "worker/api.h"

struct dbx_worker;

extern const dbx_activity_type dbx_github_open_pr_activity;

/* "github.find_pr" {"repo", "head", "api_url"?} -> {"found": false} or
 * {"found": true, "number", "url", "api_url", "state", "created": false}:
 * the open pull request of head (GET .../pulls?head=OWNER:BRANCH), a read,
 * safe_to_retry. durabox.Agent asks it when open_pr's outcome is unknown
 * (the worker died during the call), so it tells the model what exists.
 * A failed lookup (no reply, an error status) is {"found": false}. */
extern const dbx_activity_type dbx_github_find_pr_activity;

/* "git.push" {"sandbox_id", "remote": URL | host path, "branch",
 *             "repo_path"?} -> {"remote", "branch", "credentials": NAME | null}
 * git push of branch from the sandbox's repository (repo_path, default the
 * workspace root) to remote, with the worker's credentials for an http(s)
 * remote: GIT_TOKEN (user GIT_USERNAME, default x-access-token), else
 * GITHUB_TOKEN (user x-access-token), read when the activity runs; none set:
 * pushed without. The credentials reach git through the driver's
 * git_push_cred (driver.h: for the host of this URL alone, never written into
 * the sandbox, its environment, .git/config, a command line or a message);
 * "credentials" names the variable used, never its value. The remote is the
 * workflow's input (durabox.Agent: repository.remote), never a remote name
 * the sandbox's own config resolves; a URL with user:password@ is refused.
 * A retry pushes the same ref again (safe_to_retry).
 * Failures: InvalidInput (a field missing, remote or branch starting with
 * '-', credentials in the URL), Unsupported (credentials needed and the
 * driver cannot keep them out of the sandbox), and the driver's typed errors
 * as activities/sandbox.h maps them (AuthFailed: the remote refused the
 * credentials; SandboxError, retryable: rejected, unreachable), each message
 * with any credential value replaced by [redacted:NAME].
 * Thread safety: the set is immutable after create; any number at once. */
typedef struct dbx_git_push_acts dbx_git_push_acts;
/* drv borrowed: it must outlive the set and the workers it is registered
 * with. *out: free with dbx_git_push_acts_destroy after those workers.
 * DBX_OK, DBX_EINVAL (no driver), DBX_ENOMEM. */
dbx_err dbx_git_push_acts_create(dbx_driver *drv, dbx_git_push_acts **out);
/* Register git.push with w (which keeps the pointer). */
dbx_err dbx_git_push_acts_register(const dbx_git_push_acts *p, struct dbx_worker *w);
void dbx_git_push_acts_destroy(dbx_git_push_acts *p); /* accepts NULL */

#endif
