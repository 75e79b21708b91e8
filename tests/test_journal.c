/* Unit tests for worker/wstore: the activity journal's retry-class decisions,
 * persistence across close/reopen, recorded history and key/value tables,
 * on real LMDB files in a temporary directory. */
#include <stdlib.h>
#include <string.h>

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
  /* a success is never redone, whatever attempt is delivered */
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 2), DBX_JOURNAL_REPORT);
  assert_int_equal(dbx_journal_decide(&e, DBX_SAFE_TO_RETRY, 3), DBX_JOURNAL_REPORT);
  assert_int_equal(dbx_journal_decide(&e, DBX_AT_MOST_ONCE, 2), DBX_JOURNAL_REPORT);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_journal_started_then_redelivered_is_outcome_unknown),
      cmocka_unit_test(test_journal_result_redelivered_reports_it_and_persists),
      cmocka_unit_test(test_journal_history_and_bindings_persist),
      cmocka_unit_test(test_journal_history_put_appends_new_events_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
