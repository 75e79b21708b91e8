/* Unit tests for worker/wstore: the activity journal's retry-class decisions,
 * persistence across close/reopen, recorded history and key/value tables,
 * on real LMDB files in a temporary directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "store/store.h"
#include "tests/testutil.h"
#include "worker/client.h"
#include "worker/wstore.h"

static void test_journal_started_then_redelivered_is_outcome_unknown(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  dbx_journal_entry e;
  assert_int_equal(dbx_wstore_journal_get(s, "default", "wf", "run", "3", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_NONE);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 1), DBX_JOURNAL_RUN);
  assert_int_equal(dbx_wstore_journal_started(s, "default", "wf", "run", "3", 1), DBX_OK);
  assert_int_equal(dbx_wstore_journal_get(s, "default", "wf", "run", "3", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_STARTED);
  assert_int_equal(e.attempt, 1);
  /* redelivered (same or later attempt): at_most_once must not run again */
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 1), DBX_JOURNAL_OUTCOME_UNKNOWN);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 2), DBX_JOURNAL_OUTCOME_UNKNOWN);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 2), DBX_JOURNAL_RUN);
  dbx_journal_entry_cleanup(&e);
  /* other keys are independent */
  assert_int_equal(dbx_wstore_journal_get(s, "default", "wf", "run2", "3", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_NONE);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_journal_result_redelivered_reports_it_and_persists(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  dbx_act_result ok = {.result_json = "{\"exit_code\":0}"};
  assert_int_equal(dbx_wstore_journal_result(s, "ns", "wf", "run", "1", 2, &ok), DBX_OK);
  dbx_act_result bad = {.failure_type = "ExecFailed", .failure_message = "exit 3"};
  assert_int_equal(dbx_wstore_journal_result(s, "ns", "wf", "run", "2", 1, &bad), DBX_OK);
  dbx_wstore_close(s);

  s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  dbx_journal_entry e;
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "1", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_DONE);
  assert_int_equal(e.attempt, 2);
  assert_string_equal(e.result.result_json, "{\"exit_code\":0}");
  assert_null(e.result.failure_type);
  /* the attempt that journaled it is still open: report, do not redo */
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 2), DBX_JOURNAL_REPORT);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 2), DBX_JOURNAL_REPORT);
  assert_int_equal(dbx_journal_stale(&e, 2), 0);
  dbx_journal_entry_cleanup(&e);
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "2", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_DONE);
  assert_string_equal(e.result.failure_type, "ExecFailed");
  assert_string_equal(e.result.failure_message, "exit 3");
  /* the same attempt's failure is reported; a retry of a safe activity runs again */
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 1), DBX_JOURNAL_REPORT);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 2), DBX_JOURNAL_RUN);
  dbx_journal_entry_cleanup(&e);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A result journaled by attempt 1 whose attempt timed out before it was
 * reported; attempt 2 is delivered: the result is stale and never reported
 * (safe_to_retry runs again, at_most_once answers OutcomeUnknown), also
 * after the worker restarted (reopened journal). */
static void test_journal_stale_result_of_timed_out_attempt_discarded(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  dbx_act_result late = {.result_json = "{\"late\":true}"};
  assert_int_equal(dbx_wstore_journal_result(s, "ns", "wf", "run", "7", 1, &late), DBX_OK);
  dbx_act_result late_fail = {.failure_type = "ExecFailed", .failure_message = "exit 1"};
  assert_int_equal(dbx_wstore_journal_result(s, "ns", "wf", "run", "8", 1, &late_fail), DBX_OK);
  dbx_wstore_close(s);
  s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  dbx_journal_entry e;
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "7", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_DONE);
  assert_int_equal(e.attempt, 1);
  assert_int_equal(dbx_journal_stale(&e, 1), 0);
  assert_int_equal(dbx_journal_stale(&e, 2), 1);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 2), DBX_JOURNAL_RUN);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 2), DBX_JOURNAL_OUTCOME_UNKNOWN);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 1), DBX_JOURNAL_REPORT);
  dbx_journal_entry_cleanup(&e);
  /* a failure of attempt 1 then attempt 3: the ordinary retry, no warning */
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "8", &e), DBX_OK);
  assert_int_equal(dbx_journal_stale(&e, 3), 0);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 3), DBX_JOURNAL_RUN);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 3), DBX_JOURNAL_OUTCOME_UNKNOWN);
  dbx_journal_entry_cleanup(&e);
  /* nothing journaled, or only "started": never stale */
  dbx_journal_entry none = {0};
  assert_int_equal(dbx_journal_stale(&none, 2), 0);
  assert_int_equal(dbx_wstore_journal_started(s, "ns", "wf", "run", "9", 1), DBX_OK);
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "9", &e), DBX_OK);
  assert_int_equal(dbx_journal_stale(&e, 2), 0);
  dbx_journal_entry_cleanup(&e);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static HistoryEvent *mk_event(int64_t id, int type) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_id = id;
  e.event_type = type;
  uint8_t buf[64];
  size_t len = protobuf_c_message_pack(&e.base, buf);
  return (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, len, buf);
}

static void test_journal_history_and_bindings_persist(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  HistoryEvent *evs[300];
  for (int i = 0; i < 300; i++) evs[i] = mk_event(i + 1, ET(WORKFLOW_TASK_SCHEDULED));
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf", "r1", evs, 3), DBX_OK);
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf", "r2", evs, 300), DBX_OK);
  for (int i = 0; i < 300; i++) protobuf_c_message_free_unpacked(&evs[i]->base, NULL);
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_BINDINGS, "wf/workspace", "sbx-1"), DBX_OK);
  dbx_wstore_close(s);

  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  HistoryEvent **got = NULL;
  size_t n = 0;
  char *rid = NULL;
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf", NULL, &got, &n, &rid), DBX_OK);
  assert_string_equal(rid, "r2");
  assert_int_equal(n, 300);
  for (size_t i = 0; i < n; i++) assert_int_equal(got[i]->event_id, (int64_t)i + 1);
  dbx_wstore_history_free(got, n);
  free(rid);
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf", "r1", &got, &n, NULL), DBX_OK);
  assert_int_equal(n, 3);
  dbx_wstore_history_free(got, n);
  assert_int_equal(dbx_wstore_history_load(s, "ns", "other", NULL, &got, &n, NULL), DBX_ENOTFOUND);
  char *v = NULL;
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_BINDINGS, "wf/workspace", &v), DBX_OK);
  assert_string_equal(v, "sbx-1");
  free(v);
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_CHECKPOINTS, "wf/workspace", &v), DBX_ENOTFOUND);
  assert_int_equal(dbx_wstore_kv_del(s, DBX_WSTORE_BINDINGS, "wf/workspace"), DBX_OK);
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_BINDINGS, "wf/workspace", &v), DBX_ENOTFOUND);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A history handed over again (as at every workflow task) keeps the recorded
 * events and adds only the new ids. */
static void test_journal_history_put_appends_new_events_only(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 1, &s, NULL), DBX_OK);
  HistoryEvent *a[3], *b[5];
  for (int i = 0; i < 3; i++) a[i] = mk_event(i + 1, ET(WORKFLOW_TASK_SCHEDULED));
  for (int i = 0; i < 5; i++) b[i] = mk_event(i + 1, ET(ACTIVITY_TASK_STARTED));
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf", "r1", a, 3), DBX_OK);
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf", "r1", b, 5), DBX_OK);
  HistoryEvent **got = NULL;
  size_t n = 0;
  char *rid = NULL;
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf", NULL, &got, &n, &rid), DBX_OK);
  assert_string_equal(rid, "r1");
  assert_int_equal(n, 5);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(got[i]->event_id, (int64_t)i + 1);
    assert_int_equal(got[i]->event_type,
                     i < 3 ? ET(WORKFLOW_TASK_SCHEDULED) : ET(ACTIVITY_TASK_STARTED));
  }
  dbx_wstore_history_free(got, n);
  free(rid);
  for (int i = 0; i < 3; i++) protobuf_c_message_free_unpacked(&a[i]->base, NULL);
  for (int i = 0; i < 5; i++) protobuf_c_message_free_unpacked(&b[i]->base, NULL);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static void test_journal_input_hash_canonical_sha256(void **st) {
  (void)st;
  char h[DBX_INPUT_HASH_LEN + 1], h2[DBX_INPUT_HASH_LEN + 1];
  /* SHA-256("abc"): not JSON, so the raw bytes are hashed */
  assert_int_equal(dbx_wstore_input_hash("abc", 3, h), DBX_OK);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  /* 56 bytes: the padding takes a second block */
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  assert_int_equal(dbx_wstore_input_hash(m, strlen(m), h), DBX_OK);
  assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* whitespace does not matter; values do */
  const char *spaced = "{\"a\": 1, \"b\": [1, 2]}", *tight = "{\"a\":1,\"b\":[1,2]}",
             *other = "{\"a\":2,\"b\":[1,2]}";
  assert_int_equal(dbx_wstore_input_hash(spaced, strlen(spaced), h), DBX_OK);
  assert_int_equal(dbx_wstore_input_hash(tight, strlen(tight), h2), DBX_OK);
  assert_string_equal(h, h2);
  assert_int_equal(dbx_wstore_input_hash(other, strlen(other), h2), DBX_OK);
  assert_string_not_equal(h, h2);
}

static void test_journal_duplicate_at_most_once_refused_until_approved(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  const char *H = "1111111111111111111111111111111111111111111111111111111111111111";
  const char *H2 = "2222222222222222222222222222222222222222222222222222222222222222";
  char *earlier = NULL;
  /* the first call claims the identity and journals "started" in one commit */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "1", 1, "github.open_pr", H, &earlier),
                   DBX_OK);
  assert_null(earlier);
  dbx_journal_entry e;
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "1", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_STARTED);
  dbx_journal_entry_cleanup(&e);
  /* the same activity id again (a redelivery) is the journal's business, not a duplicate */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "1", 2, "github.open_pr", H, NULL),
                   DBX_OK);
  /* a new activity id with the same type and input: refused, nothing journaled */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "4", 1, "github.open_pr", H, &earlier),
                   DBX_EEXIST);
  assert_string_equal(earlier, "1");
  free(earlier);
  earlier = NULL;
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "4", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_NONE);
  /* a different input, type or run is not refused */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "5", 1, "github.open_pr", H2, NULL),
                   DBX_OK);
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "6", 1, "other.type", H, NULL),
                   DBX_OK);
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run2", "4", 1, "github.open_pr", H, NULL),
                   DBX_OK);
  /* the refusal is listed, with its hash and the earlier id */
  dbx_wstore_refusal *r = NULL;
  size_t n = 0;
  assert_int_equal(dbx_wstore_refusals_list(s, &r, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_string_equal(r[0].workflow_id, "wf");
  assert_string_equal(r[0].run_id, "run");
  assert_string_equal(r[0].activity_type, "github.open_pr");
  assert_string_equal(r[0].input_hash, H);
  assert_string_equal(r[0].activity_id, "4");
  assert_string_equal(r[0].earlier_activity_id, "1");
  assert_int_equal(r[0].approvals_left, 0);
  dbx_wstore_refusals_free(r, n);
  /* an approval (persisted across reopen) lifts the refusal for one execution */
  assert_int_equal(dbx_wstore_approval_grant(s, "ns", "wf", "run", "github.open_pr", H), DBX_OK);
  dbx_wstore_close(s);
  s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  assert_int_equal(dbx_wstore_refusals_list(s, &r, &n), DBX_OK);
  assert_int_equal(n, 1);
  assert_int_equal(r[0].approvals_left, 1);
  dbx_wstore_refusals_free(r, n);
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "7", 1, "github.open_pr", H, NULL),
                   DBX_OK);
  assert_int_equal(dbx_wstore_journal_get(s, "ns", "wf", "run", "7", &e), DBX_OK);
  assert_int_equal(e.state, DBX_JOURNAL_STARTED);
  dbx_journal_entry_cleanup(&e);
  assert_int_equal(dbx_wstore_refusals_list(s, &r, &n), DBX_OK);
  assert_int_equal(n, 0);
  dbx_wstore_refusals_free(r, n);
  /* ...once: the next one is refused again, naming the approved run's id */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf", "run", "8", 1, "github.open_pr", H, &earlier),
                   DBX_EEXIST);
  assert_string_equal(earlier, "7");
  free(earlier);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* The retention sweep's status callback: answers by run id, counts the calls. */
typedef struct {
  int asked;
  char last[32];
} sweep_probe;

static dbx_wstore_run_status probe_one(sweep_probe *p, const char *ns, const char *rid) {
  p->asked++;
  snprintf(p->last, sizeof p->last, "%s", rid);
  if (strcmp(ns, "ns") != 0) return DBX_WSTORE_RUN_UNKNOWN;
  if (strcmp(rid, "r1") == 0 || strcmp(rid, "rx") == 0) return DBX_WSTORE_RUN_CLOSED;
  if (strcmp(rid, "r2") == 0) return DBX_WSTORE_RUN_OPEN;
  return DBX_WSTORE_RUN_UNKNOWN;
}

static void probe_status(void *arg, dbx_wstore_run_ask *runs, size_t n) {
  assert_true(n >= 1);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(runs[i].status, DBX_WSTORE_RUN_UNKNOWN);
    runs[i].status = probe_one(arg, runs[i].ns, runs[i].run_id);
  }
}

static int journal_state(dbx_wstore *s, const char *wid, const char *rid, const char *aid) {
  dbx_journal_entry e;
  assert_int_equal(dbx_wstore_journal_get(s, "ns", wid, rid, aid, &e), DBX_OK);
  int st = e.state;
  dbx_journal_entry_cleanup(&e);
  return st;
}

/* A sweep removes every entry of a run the service calls closed (history,
 * journal, at_most_once claim, approval, refusal, the latest-run pointer
 * when it names the run) and nothing of the others; an open run is asked
 * again only a retention later; an unknown one stays as it was. */
static void test_journal_retention_sweep_removes_closed_runs_only(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  const char *H = "1111111111111111111111111111111111111111111111111111111111111111";
  HistoryEvent *ev[3];
  for (int i = 0; i < 3; i++) ev[i] = mk_event(i + 1, ET(WORKFLOW_TASK_SCHEDULED));
  /* wf-c: r1 (closed) then r2 (open, the latest); wf-x: rx (closed, the latest);
   * wf-u: ru, journal only (an activity-only worker), the service cannot tell */
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf-c", "r1", ev, 3), DBX_OK);
  assert_int_equal(dbx_wstore_journal_started(s, "ns", "wf-c", "r1", "1", 1), DBX_OK);
  char *earlier = NULL;
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf-c", "r1", "2", 1, "t", H, &earlier), DBX_OK);
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf-c", "r1", "3", 1, "t", H, &earlier), DBX_EEXIST);
  free(earlier);
  assert_int_equal(dbx_wstore_approval_grant(s, "ns", "wf-c", "r1", "t", H), DBX_OK);
  assert_int_equal(dbx_wstore_approval_grant(s, "ns", "wf-c", "r1", "t", H), DBX_OK);
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf-c", "r2", ev, 2), DBX_OK);
  assert_int_equal(dbx_wstore_journal_started(s, "ns", "wf-c", "r2", "1", 1), DBX_OK);
  assert_int_equal(dbx_wstore_history_put(s, "ns", "wf-x", "rx", ev, 3), DBX_OK);
  assert_int_equal(dbx_wstore_journal_started(s, "ns", "wf-u", "ru", "1", 1), DBX_OK);
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_CHECKPOINTS, "wf-c/r1/ck", "snap-1"), DBX_OK);
  dbx_wstore_refusal *rf = NULL;
  size_t nrf = 0;
  assert_int_equal(dbx_wstore_refusals_list(s, &rf, &nrf), DBX_OK);
  assert_int_equal(nrf, 1);
  dbx_wstore_refusals_free(rf, nrf);
  int64_t t_ru = 0, t_r2 = 0;
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-u", "ru", &t_ru), DBX_OK);
  int64_t wall = dbx_wall_ns() / 1000000;
  assert_true(t_ru <= wall && t_ru > wall - 60000);

  /* nothing is due yet: a day's retention */
  sweep_probe p = {0};
  dbx_wstore_sweep_result r;
  assert_int_equal(dbx_wstore_sweep(s, 86400000, wall, 100, probe_status, &p, &r), DBX_OK);
  assert_int_equal(p.asked, 0);
  assert_int_equal(r.asked, 0);
  /* at most max_runs are asked, in key order */
  int64_t now = wall + 1;
  assert_int_equal(dbx_wstore_sweep(s, 0, now, 1, probe_status, &p, &r), DBX_OK);
  assert_int_equal(r.asked, 1);
  assert_string_equal(p.last, "r1");
  assert_int_equal(r.removed, 1);
  p.asked = 0;
  assert_int_equal(dbx_wstore_sweep(s, 0, now, 100, probe_status, &p, &r), DBX_OK);
  assert_int_equal(p.asked, 3); /* r2, rx, ru: r1 is gone */
  assert_int_equal(r.asked, 3);
  assert_int_equal(r.removed, 1);
  assert_int_equal(dbx_wstore_sweep(s, -1, now, 100, probe_status, &p, &r), DBX_EINVAL);
  assert_int_equal(dbx_wstore_sweep(s, 0, now, 100, NULL, &p, &r), DBX_EINVAL);

  /* reopened: the removals were committed */
  dbx_wstore_close(s);
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  HistoryEvent **got = NULL;
  size_t n = 0;
  char *rid = NULL;
  /* closed runs: every entry gone */
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf-c", "r1", &got, &n, NULL), DBX_ENOTFOUND);
  assert_int_equal(journal_state(s, "wf-c", "r1", "1"), DBX_JOURNAL_NONE);
  assert_int_equal(journal_state(s, "wf-c", "r1", "2"), DBX_JOURNAL_NONE);
  assert_int_equal(dbx_wstore_refusals_list(s, &rf, &nrf), DBX_OK);
  assert_int_equal(nrf, 0);
  dbx_wstore_refusals_free(rf, nrf);
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf-x", NULL, &got, &n, &rid), DBX_ENOTFOUND);
  int64_t t = 0;
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-c", "r1", &t), DBX_ENOTFOUND);
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-x", "rx", &t), DBX_ENOTFOUND);
  /* the open run: whole, still the workflow's latest, touched at the pass */
  assert_int_equal(dbx_wstore_history_load(s, "ns", "wf-c", NULL, &got, &n, &rid), DBX_OK);
  assert_string_equal(rid, "r2");
  assert_int_equal(n, 2);
  dbx_wstore_history_free(got, n);
  free(rid);
  assert_int_equal(journal_state(s, "wf-c", "r2", "1"), DBX_JOURNAL_STARTED);
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-c", "r2", &t_r2), DBX_OK);
  assert_int_equal(t_r2, now);
  /* the unknown one: as it was */
  assert_int_equal(journal_state(s, "wf-u", "ru", "1"), DBX_JOURNAL_STARTED);
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-u", "ru", &t), DBX_OK);
  assert_int_equal(t, t_ru);
  /* checkpoints are keyed by sandbox, not by run: they stay */
  char *v = NULL;
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_CHECKPOINTS, "wf-c/r1/ck", &v), DBX_OK);
  assert_string_equal(v, "snap-1");
  free(v);

  /* less than a retention after the open run's pass: only the unknown run is due */
  p.asked = 0;
  assert_int_equal(dbx_wstore_sweep(s, 1000, now + 999, 100, probe_status, &p, &r), DBX_OK);
  assert_int_equal(p.asked, 1);
  assert_string_equal(p.last, "ru");
  assert_int_equal(r.removed, 0);
  /* the claim and the approvals went with it: a new claim by "3" is a first claim
   * and leaves no refusal, where the old claim by "2" would have refused it */
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf-c", "r1", "3", 1, "t", H, &earlier), DBX_OK);
  assert_null(earlier);
  assert_int_equal(dbx_wstore_amo_begin(s, "ns", "wf-c", "r1", "4", 1, "t", H, &earlier), DBX_EEXIST);
  assert_string_equal(earlier, "3"); /* refused: no approval was left behind */
  free(earlier);
  for (int i = 0; i < 3; i++) protobuf_c_message_free_unpacked(&ev[i]->base, NULL);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A store written before the touched table existed: its runs are touched
 * when it is first opened, so the sweep sees them. */
static dbx_err put_old_history(dbx_txn *t, void *arg) {
  dbx_table *tb = arg;
  static const uint8_t key[] = "ns\0wf-old\0r-old\0\0\0\0\0\0\0\0\1";
  return dbx_store_put(t, *tb, key, sizeof key - 1, "x", 1);
}

static void test_journal_retention_adopts_runs_of_an_older_store(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("journal");
  dbx_store_opts so = {0};
  so.path = dir;
  dbx_store *old = NULL;
  dbx_table tb;
  assert_int_equal(dbx_store_open(&so, &old), DBX_OK);
  assert_int_equal(dbx_store_table(old, "w_history", &tb), DBX_OK);
  assert_int_equal(dbx_store_write(old, put_old_history, &tb), DBX_OK);
  dbx_store_close(old);
  int64_t before = dbx_wall_ns() / 1000000;
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  int64_t t = 0;
  assert_int_equal(dbx_wstore_touched(s, "ns", "wf-old", "r-old", &t), DBX_OK);
  assert_true(t >= before && t <= dbx_wall_ns() / 1000000);
  sweep_probe p = {0};
  dbx_wstore_sweep_result r;
  assert_int_equal(dbx_wstore_sweep(s, 0, t, 100, probe_status, &p, &r), DBX_OK);
  assert_int_equal(p.asked, 1);
  assert_string_equal(p.last, "r-old");
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_journal_input_hash_canonical_sha256),
      cmocka_unit_test(test_journal_duplicate_at_most_once_refused_until_approved),
      cmocka_unit_test(test_journal_started_then_redelivered_is_outcome_unknown),
      cmocka_unit_test(test_journal_result_redelivered_reports_it_and_persists),
      cmocka_unit_test(test_journal_stale_result_of_timed_out_attempt_discarded),
      cmocka_unit_test(test_journal_history_and_bindings_persist),
      cmocka_unit_test(test_journal_history_put_appends_new_events_only),
      cmocka_unit_test(test_journal_retention_sweep_removes_closed_runs_only),
      cmocka_unit_test(test_journal_retention_adopts_runs_of_an_older_store),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
