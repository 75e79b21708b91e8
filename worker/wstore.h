/* worker/wstore: the worker's own LMDB environment (through store/).
 *
 * Tables:
 *  - history: every history event of every run the worker processed, keyed
 *    by (namespace, workflow id, run id, event id), so a run can be replayed
 *    offline (durabox replay); plus the latest run id seen per workflow id;
 *  - journal: the activity journal keyed by (namespace, workflow id, run id,
 *    activity id): "started" before an at_most_once activity runs, the result
 *    (or failure) before any activity's outcome is reported (docs/architecture.md,
 *    "Promises and where they live");
 *  - bindings and checkpoints: key -> value strings for sandbox activities;
 *  - touched: per run (namespace, workflow id, run id), the wall time in ms
 *    its entries were last written or last found open: what the retention
 *    sweep (dbx_wstore_sweep) walks.
 * Every write is one durable (synced, unless opened with no_sync) commit.
 * Thread safety: a dbx_wstore may be used from any number of threads.
 * Errors: DBX_OK, DBX_ENOTFOUND, DBX_EINVAL (a key over LMDB's 511 bytes),
 * DBX_ENOMEM, DBX_ESTORE/DBX_ESTOREFULL. */
#ifndef DBX_WORKER_WSTORE_H
#define DBX_WORKER_WSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "protos/pb.h"
#include "worker/api.h"

typedef struct dbx_wstore dbx_wstore;

/* Open (creating) the environment in dir. *out: free with dbx_wstore_close.
 * errmsg (may be NULL): malloc'd on failure. */
dbx_err dbx_wstore_open(const char *dir, int no_sync, dbx_wstore **out, char **errmsg);
void dbx_wstore_close(dbx_wstore *s); /* accepts NULL */

/* ---- history */
/* Record events (borrowed) of one run; event ids already recorded for the
 * run are kept as they are (a run's history is append-only), only new ones
 * are written.
 * Also records run_id as the workflow's latest run. */
dbx_err dbx_wstore_history_put(dbx_wstore *s, const char *ns, const char *workflow_id,
                               const char *run_id, HistoryEvent *const *events, size_t n);
/* Load a run's events, oldest first. run_id NULL/"" = the latest recorded run
 * (its id in *run_id_out, malloc'd, when run_id_out is not NULL).
 * *events: free with dbx_wstore_history_free. DBX_ENOTFOUND when none. */
dbx_err dbx_wstore_history_load(dbx_wstore *s, const char *ns, const char *workflow_id,
                                const char *run_id, HistoryEvent ***events, size_t *n,
                                char **run_id_out);
void dbx_wstore_history_free(HistoryEvent **events, size_t n);

/* ---- activity journal */
typedef enum { DBX_JOURNAL_NONE = 0, DBX_JOURNAL_STARTED = 1, DBX_JOURNAL_DONE = 2 } dbx_journal_state;

typedef struct {
  dbx_journal_state state;
  int32_t attempt;        /* the attempt that wrote the entry */
  dbx_act_result result;  /* DONE: the recorded result (members malloc'd) */
} dbx_journal_entry;

/* DBX_OK with *out filled (state NONE when absent). Release with _entry_cleanup. */
dbx_err dbx_wstore_journal_get(dbx_wstore *s, const char *ns, const char *workflow_id,
                               const char *run_id, const char *activity_id,
                               dbx_journal_entry *out);
/* Write "started" for attempt (durable before it returns). */
dbx_err dbx_wstore_journal_started(dbx_wstore *s, const char *ns, const char *workflow_id,
                                   const char *run_id, const char *activity_id, int32_t attempt);
/* Write the result of attempt (res borrowed; durable before it returns). */
dbx_err dbx_wstore_journal_result(dbx_wstore *s, const char *ns, const char *workflow_id,
                                  const char *run_id, const char *activity_id, int32_t attempt,
                                  const dbx_act_result *res);
void dbx_journal_entry_cleanup(dbx_journal_entry *e);

/* What to do with a delivered attempt, given the journal (pure). The retry classes:
 * a journaled result is reported only while its attempt is still open.
 * RUN: invoke the activity (nothing journaled; a safe_to_retry start; or a
 * stale result, see below); REPORT: report e->result without invoking (the
 * result, success or failure, was journaled by this same attempt);
 * OUTCOME_UNKNOWN: at_most_once, started and never finished, or finished by
 * another attempt: do not invoke, answer a non-retryable "OutcomeUnknown". */
typedef enum { DBX_JOURNAL_RUN = 0, DBX_JOURNAL_REPORT, DBX_JOURNAL_OUTCOME_UNKNOWN } dbx_journal_decision;
dbx_journal_decision dbx_journal_decide(const dbx_journal_entry *e, dbx_retry_class rc,
                                        int32_t attempt);
/* 1 when e holds a success journaled by another attempt than the delivered
 * one: that attempt closed (timed out) before its success was accepted, so
 * the result is discarded (the caller logs one warning). A failure of an
 * earlier attempt is the ordinary retry and not stale. Pure. */
int dbx_journal_stale(const dbx_journal_entry *e, int32_t attempt);

/* ---- at_most_once identities (docs/architecture.md "Promises", docs/worker.md)
 *
 * An at_most_once call is also known by (namespace, workflow id, run id,
 * activity type, input hash): a later activity id of the same run with the
 * same type and input is refused until a person approves one more execution.
 * The input hash is SHA-256 (lowercase hex) of the canonical input: the JSON
 * parsed and printed compactly (whitespace dropped, key order kept), or the
 * raw bytes when they are not JSON. */
#define DBX_INPUT_HASH_LEN 64
/* out: DBX_INPUT_HASH_LEN hex digits plus NUL. Returns DBX_OK or DBX_ENOMEM. */
dbx_err dbx_wstore_input_hash(const char *input, size_t len, char out[DBX_INPUT_HASH_LEN + 1]);

/* In ONE durable commit: claim the identity for activity_id and journal
 * "started" for attempt (as dbx_wstore_journal_started). Allowed when the
 * identity is unclaimed, already claimed by activity_id, or an approval for
 * it is left (one approval is used up). Otherwise nothing is journaled, a
 * refusal record is written (see _refusals_list), *earlier gets the claiming
 * activity id (malloc'd) and DBX_EEXIST is returned.
 * Returns DBX_OK, DBX_EEXIST, DBX_EINVAL, DBX_ENOMEM, DBX_ESTORE(FULL). */
dbx_err dbx_wstore_amo_begin(dbx_wstore *s, const char *ns, const char *workflow_id,
                             const char *run_id, const char *activity_id, int32_t attempt,
                             const char *activity_type, const char *input_hash, char **earlier);

/* Approve one more execution of (ns, workflow_id, run_id, type, input_hash).
 * Approvals add up. DBX_OK, DBX_EINVAL, DBX_ENOMEM, DBX_ESTORE(FULL). */
dbx_err dbx_wstore_approval_grant(dbx_wstore *s, const char *ns, const char *workflow_id,
                                  const char *run_id, const char *activity_type,
                                  const char *input_hash);

typedef struct {
  char *ns, *workflow_id, *run_id, *activity_type, *input_hash;
  char *activity_id; /* the refused one */
  char *earlier_activity_id;
  int approvals_left; /* approvals granted and not yet used */
} dbx_wstore_refusal;
/* Every refusal recorded by dbx_wstore_amo_begin whose identity has not run
 * since (a refusal is removed when an approval lets a call run), in key
 * order. *out: free with dbx_wstore_refusals_free. */
dbx_err dbx_wstore_refusals_list(dbx_wstore *s, dbx_wstore_refusal **out, size_t *n);
void dbx_wstore_refusals_free(dbx_wstore_refusal *r, size_t n);

/* ---- bindings and checkpoints: key -> value strings */
typedef enum { DBX_WSTORE_BINDINGS = 0, DBX_WSTORE_CHECKPOINTS = 1 } dbx_wstore_kv;
dbx_err dbx_wstore_kv_put(dbx_wstore *s, dbx_wstore_kv kind, const char *key, const char *value);
/* *value: malloc'd copy; DBX_ENOTFOUND when absent. */
dbx_err dbx_wstore_kv_get(dbx_wstore *s, dbx_wstore_kv kind, const char *key, char **value);
dbx_err dbx_wstore_kv_del(dbx_wstore *s, dbx_wstore_kv kind, const char *key);

/* ---- retention (Temporal's namespace retention, applied to this worker's
 * own tables): a closed run's history copy, journal entries, at_most_once
 * identities, approvals and refusals are removed once the service says it
 * has closed; bindings and checkpoints (keyed by sandbox, not by run) stay.
 * The service is the judge, not a clock: an open run keeps its journal
 * however long it runs, since an attempt of it may still be delivered. */
typedef enum {
  DBX_WSTORE_RUN_OPEN = 0,    /* running, or not for this service to judge: keep, ask
                                 again a retention later */
  DBX_WSTORE_RUN_CLOSED = 1,  /* the service says it has closed: remove */
  DBX_WSTORE_RUN_UNKNOWN = 2  /* could not tell (service unreachable): keep, ask next pass */
} dbx_wstore_run_status;
/* One run the sweep asks about: the strings are borrowed for the call;
 * status starts DBX_WSTORE_RUN_UNKNOWN and is the callback's answer. */
typedef struct {
  const char *ns, *workflow_id, *run_id;
  dbx_wstore_run_status status;
} dbx_wstore_run_ask;
/* Called by the sweep once per pass, outside any transaction and lock, with
 * every run it asks about (n >= 1): it sets each one's status, in any order
 * and from any threads it likes (the worker asks the service about several
 * at once). */
typedef void (*dbx_wstore_status_fn)(void *arg, dbx_wstore_run_ask *runs, size_t n);
typedef struct {
  size_t asked;   /* runs passed to status */
  size_t removed; /* runs whose entries were removed */
} dbx_wstore_sweep_result;
/* One pass: every run whose touched time is at least retention_ms before
 * now_ms (wall ms), at most max_runs of them in key order, is passed to
 * status (in one call). CLOSED runs lose every entry listed above; OPEN runs get now_ms as
 * their touched time (asked again one retention later); UNKNOWN ones stay
 * as they are. All the removals and touches of a pass are one commit (a
 * cache and moot journal entries, not promises: its meta page is not waited
 * for, like the history copy's, and a pass undone by a machine crash is
 * redone by the next). Runs written before the touched table existed are
 * touched when such a store is first opened (dbx_wstore_open), so their
 * retention counts from then. out (may be NULL): what the pass did.
 * Returns DBX_OK, DBX_EINVAL, DBX_ENOMEM, DBX_ESTORE(FULL); on an error
 * nothing of the pass is removed. Thread safety: as the other calls; status
 * may block (it is called with no lock held). */
dbx_err dbx_wstore_sweep(dbx_wstore *s, int64_t retention_ms, int64_t now_ms, size_t max_runs,
                         dbx_wstore_status_fn status, void *arg, dbx_wstore_sweep_result *out);
/* The touched time of a run (wall ms): DBX_OK, DBX_ENOTFOUND, DBX_EINVAL. For tests. */
dbx_err dbx_wstore_touched(dbx_wstore *s, const char *ns, const char *workflow_id,
                           const char *run_id, int64_t *ms);

/* Unmap the store's pages this process has read (dbx_store_release_pages):
 * they stay in the page cache and come back on the next read. The worker
 * calls it every 250 ms, so its resident set holds the pages of the last
 * quarter second's reads, not the whole store. Returns DBX_OK, DBX_EINVAL,
 * DBX_ESTORE (why: dbx_wstore_release_errmsg in the same thread). Any
 * thread, at any time. */
dbx_err dbx_wstore_release_pages(dbx_wstore *s);
/* The reason of this thread's last failed dbx_wstore_release_pages on s;
 * never NULL. */
const char *dbx_wstore_release_errmsg(dbx_wstore *s);

/* ---- group commit: writes of concurrent callers share one synced commit
 * (see wstore.c); each call still returns only after the commit that holds
 * its write. The number of write commits made since open, a group counting
 * once (tests and benchmarks; any thread). */
uint64_t dbx_wstore_commits(dbx_wstore *s);

#endif
