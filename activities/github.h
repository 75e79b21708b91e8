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

#include "worker/api.h"

extern const dbx_activity_type dbx_github_open_pr_activity;

/* "github.find_pr" {"repo", "head", "api_url"?} -> {"found": false} or
 * {"found": true, "number", "url", "api_url", "state", "created": false}:
 * the open pull request of head (GET .../pulls?head=OWNER:BRANCH), a read,
 * safe_to_retry. durabox.Agent asks it when open_pr's outcome is unknown
 * (the worker died during the call), so it tells the model what exists.
 * A failed lookup (no reply, an error status) is {"found": false}. */
extern const dbx_activity_type dbx_github_find_pr_activity;

#endif
