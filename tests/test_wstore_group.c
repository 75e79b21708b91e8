/* Unit tests for worker/wstore's group commit: writes from concurrent threads
 * share synced commits, and every write is there, with its own value, after
 * its call returned and after the store is closed and opened again. Real
 * LMDB (synced commits) in a temporary directory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protos/pb.h"
#include "tests/testutil.h"
#include "worker/wstore.h"

enum { THREADS = 8, WRITES = 60 };

typedef struct {
  dbx_wstore *s;
  int id;
  int failed;  /* a call that did not return DBX_OK, or a value not read back */
} writer;

static void *write_loop(void *arg) {
  writer *w = arg;
  for (int i = 0; i < WRITES; i++) {
    char key[32], val[32];
    snprintf(key, sizeof key, "k-%d-%d", w->id, i);
    snprintf(val, sizeof val, "v-%d-%d", w->id, i * 7);
    if (dbx_wstore_kv_put(w->s, DBX_WSTORE_CHECKPOINTS, key, val) != DBX_OK) w->failed++;
    if (dbx_wstore_journal_started(w->s, "default", key, "run", "1", 1) != DBX_OK) w->failed++;
    /* returned: its commit is done, so another thread's reader sees it at once */
    char *got = NULL;
    if (dbx_wstore_kv_get(w->s, DBX_WSTORE_CHECKPOINTS, key, &got) != DBX_OK || strcmp(got, val) != 0)
      w->failed++;
    free(got);
  }
  return NULL;
}

static void check_all(dbx_wstore *s) {
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < WRITES; i++) {
      char key[32], val[32], *got = NULL;
      snprintf(key, sizeof key, "k-%d-%d", t, i);
      snprintf(val, sizeof val, "v-%d-%d", t, i * 7);
      assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_CHECKPOINTS, key, &got), DBX_OK);
      assert_string_equal(got, val);
      free(got);
      dbx_journal_entry e;
      assert_int_equal(dbx_wstore_journal_get(s, "default", key, "run", "1", &e), DBX_OK);
      assert_int_equal(e.state, DBX_JOURNAL_STARTED);
      assert_int_equal(e.attempt, 1);
      dbx_journal_entry_cleanup(&e);
    }
}

static void test_wstore_concurrent_writes_share_commits_and_all_persist(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("wgroup");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  assert_int_equal(dbx_wstore_commits(s), 0);
  /* a lone write is one commit of its own */
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_BINDINGS, "alone", "1"), DBX_OK);
  assert_int_equal(dbx_wstore_commits(s), 1);
  writer w[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (writer){s, t, 0};
    assert_int_equal(pthread_create(&th[t], NULL, write_loop, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(w[t].failed, 0);
  }
  uint64_t writes = 2 * THREADS * WRITES, commits = dbx_wstore_commits(s) - 1;
  printf("group commit: %llu writes in %llu commits\n", (unsigned long long)writes,
         (unsigned long long)commits);
  assert_true(commits >= 1);
  /* eight threads writing into synced commits overlap: groups formed */
  assert_true(commits < writes);
  check_all(s);
  dbx_wstore_close(s);
  /* durable: all there after reopening */
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  check_all(s);
  char *got = NULL;
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_BINDINGS, "alone", &got), DBX_OK);
  assert_string_equal(got, "1");
  free(got);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

/* A write refused before its commit (bad key) leaves the group's other writes alone. */
static void test_wstore_refused_write_does_not_touch_others(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("wgroup");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  char big[600];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_BINDINGS, big, "v"), DBX_EINVAL);
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_BINDINGS, "ok", "v"), DBX_OK);
  char *got = NULL;
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_BINDINGS, "ok", &got), DBX_OK);
  assert_string_equal(got, "v");
  free(got);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

static HistoryEvent *mk_event(int64_t id) {
  HistoryEvent e = INIT(TEMPORAL__API__HISTORY__V1__HISTORY_EVENT);
  e.event_id = id;
  e.event_type = ET(WORKFLOW_TASK_SCHEDULED);
  uint8_t buf[64];
  size_t len = protobuf_c_message_pack(&e.base, buf);
  return (HistoryEvent *)protobuf_c_message_unpack(&HistoryEvent__D, NULL, len, buf);
}

typedef struct {
  dbx_wstore *s;
  int id, failed;
  HistoryEvent **evs;
} hist_writer;

/* History copies (commits that skip the meta sync when alone) mixed with
 * journal entries (synced) in the same groups. */
static void *hist_loop(void *arg) {
  hist_writer *w = arg;
  char wid[32];
  snprintf(wid, sizeof wid, "wf-%d", w->id);
  for (int i = 1; i <= WRITES; i++) {
    if (dbx_wstore_history_put(w->s, "ns", wid, "run", w->evs, (size_t)i) != DBX_OK) w->failed++;
    char act[16];
    snprintf(act, sizeof act, "%d", i);
    if (dbx_wstore_journal_started(w->s, "ns", wid, "run", act, 1) != DBX_OK) w->failed++;
  }
  return NULL;
}

static void test_wstore_history_copies_and_journal_mixed_all_persist(void **st) {
  (void)st;
  char *dir = dbx_test_tmpdir("wgroup");
  dbx_wstore *s = NULL;
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  HistoryEvent *evs[WRITES];
  for (int i = 0; i < WRITES; i++) evs[i] = mk_event(i + 1);
  hist_writer w[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (hist_writer){s, t, 0, evs};
    assert_int_equal(pthread_create(&th[t], NULL, hist_loop, &w[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) {
    pthread_join(th[t], NULL);
    assert_int_equal(w[t].failed, 0);
  }
  for (int i = 0; i < WRITES; i++) protobuf_c_message_free_unpacked(&evs[i]->base, NULL);
  dbx_wstore_close(s);
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  for (int t = 0; t < THREADS; t++) {
    char wid[32];
    snprintf(wid, sizeof wid, "wf-%d", t);
    HistoryEvent **got = NULL;
    size_t n = 0;
    assert_int_equal(dbx_wstore_history_load(s, "ns", wid, "run", &got, &n, NULL), DBX_OK);
    assert_int_equal(n, WRITES);
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i]->event_id, (int64_t)i + 1);
    dbx_wstore_history_free(got, n);
    for (int i = 1; i <= WRITES; i++) {
      char act[16];
      snprintf(act, sizeof act, "%d", i);
      dbx_journal_entry e;
      assert_int_equal(dbx_wstore_journal_get(s, "ns", wid, "run", act, &e), DBX_OK);
      assert_int_equal(e.state, DBX_JOURNAL_STARTED);
      dbx_journal_entry_cleanup(&e);
    }
  }
  /* a synced write after the lazy ones still works and persists */
  assert_int_equal(dbx_wstore_kv_put(s, DBX_WSTORE_BINDINGS, "after", "x"), DBX_OK);
  dbx_wstore_close(s);
  assert_int_equal(dbx_wstore_open(dir, 0, &s, NULL), DBX_OK);
  char *v = NULL;
  assert_int_equal(dbx_wstore_kv_get(s, DBX_WSTORE_BINDINGS, "after", &v), DBX_OK);
  assert_string_equal(v, "x");
  free(v);
  dbx_wstore_close(s);
  dbx_test_rmrf(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wstore_concurrent_writes_share_commits_and_all_persist),
      cmocka_unit_test(test_wstore_refused_write_does_not_touch_others),
      cmocka_unit_test(test_wstore_history_copies_and_journal_mixed_all_persist),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
