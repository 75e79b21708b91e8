/* Unit tests of rpc/: a real server and client in one process over
 * 127.0.0.1 (port 0). The handler dispatches on the short method name:
 * "Echo" replies with the request reversed, "Park" parks the call for the
 * test to answer, "Details" fails with status details, "Full" fails
 * RESOURCE_EXHAUSTED as a handler would ("storage full"), anything else is
 * answered UNIMPLEMENTED "unknown method". */
#include "tests/testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/util.h"
#include "rpc/rpc.h"
#include "worker/client.h"

#define MAX_PARKED 64

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dbx_rpc_call *parked[MAX_PARKED];
  int n_parked;
  int n_calls;   /* on_call invocations */
  int n_cancels; /* on_cancel invocations */
  int answer_on_cancel;
  char seen_ns[64];
  char seen_client[64];
  char seen_method[128];
  int seen_wfs;
  int64_t seen_deadline_ns;
  dbx_rpc_server *srv;
  dbx_rpc_channel *ch;
} fixture;

static const uint8_t k_details[] = {0x08, 0x09, 0x12, 0x00, 0xff, 0x0a, 0x80, 0x00, 'x', 0x7f};

/* Self-signed test certificate for "dbx.test" (P-256, 100 years), made with
 * openssl req -x509 for these tests only. */
static const char k_cert_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkjCCATigAwIBAgIUHg7f0/jSg55ERGRQz6UY+1yLGAowCgYIKoZIzj0EAwIw\n"
    "EzERMA8GA1UEAwwIZGJ4LnRlc3QwIBcNMjYxMTI5MDczMTU4WhgPMjEyNjExMDUw\n"
    "NzMxNThaMBMxETAPBgNVBAMMCGRieC50ZXN0MFkwEwYHKoZIzj0CAQYIKoZIzj0D\n"
    "AQcDQgAEukGxQoJwLQRYCjn7BcJqT5kiJs7HLxAULQtFsp8rU1V9AFHNn7RLa4b3\n"
    "gcTa5I78X47Ev2lPiNLxrBV3UM8QGKNoMGYwHQYDVR0OBBYEFBj1NDLwpw35e0Zg\n"
    "gBROl8Lsu8r/MB8GA1UdIwQYMBaAFBj1NDLwpw35e0ZggBROl8Lsu8r/MA8GA1Ud\n"
    "EwEB/wQFMAMBAf8wEwYDVR0RBAwwCoIIZGJ4LnRlc3QwCgYIKoZIzj0EAwIDSAAw\n"
    "RQIhAPpCLZ412fE4CtOeCaiwxvazLarLs4h14KAtP76ghOMlAiBUW9Jh/7Liy4al\n"
    "il/uaYketK/i1HK4LyXWd4FFog0N5A==\n"
    "-----END CERTIFICATE-----\n";
static const char k_key_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgD+nke6oayTM19xeb\n"
    "KicPqs70Tc/LyQhIWjjNx9w7XlqhRANCAAS6QbFCgnAtBFgKOfsFwmpPmSImzscv\n"
    "EBQtC0WynytTVX0AUc2ftEtrhveBxNrkjvxfjsS/aU+I0vGsFXdQzxAY\n"
    "-----END PRIVATE KEY-----\n";

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src ? src : "(null)");
}

static void on_call(dbx_rpc_call *c, void *ud) {
  fixture *f = ud;
  const char *m = dbx_rpc_call_method(c);
  pthread_mutex_lock(&f->mu);
  f->n_calls++;
  copy_str(f->seen_method, sizeof f->seen_method, m);
  copy_str(f->seen_ns, sizeof f->seen_ns, dbx_rpc_call_metadata(c, "temporal-namespace"));
  copy_str(f->seen_client, sizeof f->seen_client, dbx_rpc_call_metadata(c, "client-name"));
  f->seen_wfs = dbx_rpc_call_is_workflow_service(c);
  f->seen_deadline_ns = dbx_rpc_call_deadline_mono_ns(c);
  pthread_mutex_unlock(&f->mu);
  if (strcmp(m, "Echo") == 0) {
    size_t n = 0;
    const uint8_t *req = dbx_rpc_call_request(c, &n);
    uint8_t *rev = malloc(n + 1);
    for (size_t i = 0; i < n; i++) rev[i] = req[n - 1 - i];
    dbx_rpc_call_reply(c, rev, n);
    free(rev);
  } else if (strcmp(m, "Park") == 0) {
    pthread_mutex_lock(&f->mu);
    assert_true(f->n_parked < MAX_PARKED);
    f->parked[f->n_parked++] = c;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
  } else if (strcmp(m, "Full") == 0) {
    dbx_rpc_call_fail(c, DBX_GRPC_RESOURCE_EXHAUSTED, "storage full: 4096 vs. 1024", NULL, 0);
  } else if (strcmp(m, "Details") == 0) {
    dbx_rpc_call_fail(c, DBX_GRPC_FAILED_PRECONDITION, "with details", k_details,
                      sizeof k_details);
  } else {
    dbx_rpc_call_fail(c, DBX_GRPC_UNIMPLEMENTED, "unknown method", NULL, 0);
  }
}

static void on_cancel(dbx_rpc_call *c, void *ud) {
  fixture *f = ud;
  pthread_mutex_lock(&f->mu);
  f->n_cancels++;
  int answer = f->answer_on_cancel;
  if (answer) {
    for (int i = 0; i < f->n_parked; i++)
      if (f->parked[i] == c) f->parked[i] = NULL; /* answered here */
  }
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  if (answer) dbx_rpc_call_fail(c, DBX_GRPC_CANCELLED, "cancelled", NULL, 0);
}

/* Waits (at most 20 s, a hang guard) until *counter >= want. */
static void wait_count(fixture *f, const int *counter, int want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 20;
  pthread_mutex_lock(&f->mu);
  int rc = 0;
  while (*counter < want && rc == 0) rc = pthread_cond_timedwait(&f->cv, &f->mu, &until);
  int got = *counter;
  pthread_mutex_unlock(&f->mu);
  assert_true(got >= want);
}

/* Waits (at most 20 s, a hang guard) until the server has released every
 * call: the module offers no event for that, so this polls. */
static void wait_no_live_calls(dbx_rpc_server *s) {
  for (int i = 0; i < 2000 && dbx_rpc_server_live_calls(s) > 0; i++) {
    struct timespec d = {0, 10 * 1000000};
    nanosleep(&d, NULL);
  }
  assert_int_equal(dbx_rpc_server_live_calls(s), 0);
}

static void start_server(fixture *f, size_t max_msg, const char *api_key) {
  dbx_rpc_server_opts o = {0};
  o.max_message_bytes = max_msg;
  o.api_key = api_key;
  o.on_call = on_call;
  o.on_cancel = on_cancel;
  o.ud = f;
  const char *err = NULL;
  assert_int_equal(dbx_rpc_server_start(&o, &f->srv, &err), DBX_OK);
  assert_true(dbx_rpc_server_port(f->srv) > 0);
}

static dbx_rpc_channel *open_channel(int port, const char *api_key) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  dbx_rpc_channel_opts o = {0};
  o.target = target;
  o.api_key = api_key;
  o.namespace_ = "ns-test";
  o.client_name = "rpc-tester";
  dbx_rpc_channel *ch = NULL;
  assert_int_equal(dbx_rpc_channel_create(&o, &ch), DBX_OK);
  return ch;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  dbx_rpc_channel_destroy(f->ch);
  dbx_rpc_server_destroy(f->srv);
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  free(f);
  return 0;
}

static void unary_ok(dbx_rpc_channel *ch, const char *method, const void *req, size_t len,
                     dbx_rpc_result *r) {
  assert_int_equal(dbx_rpc_unary(ch, method, req, len, 10000, 0, NULL, r), DBX_OK);
}

/* ------------------------------------------------------------ tests */

static void test_rpc_echo_round_trip_and_metadata(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Echo", "hello", 5, &r);
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_int_equal(r.response_len, 5);
  assert_memory_equal(r.response, "olleh", 5);
  assert_null(r.details);
  dbx_rpc_result_cleanup(&r);
  assert_null(r.response);
  assert_string_equal(f->seen_method, "Echo");
  assert_int_equal(f->seen_wfs, 1);
  assert_string_equal(f->seen_ns, "ns-test");
  assert_string_equal(f->seen_client, "rpc-tester");

  /* An empty request message reaches the handler as zero bytes. */
  unary_ok(f->ch, "Echo", NULL, 0, &r);
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_int_equal(r.response_len, 0);
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(f->n_calls, 2);
}

static void test_rpc_unknown_method_unimplemented(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "NoSuchMethod", "x", 1, &r);
  assert_int_equal(r.status, DBX_GRPC_UNIMPLEMENTED);
  assert_string_equal(r.message, "unknown method");
  assert_null(r.response);
  dbx_rpc_result_cleanup(&r);
  /* A path outside the WorkflowService keeps its full name. */
  unary_ok(f->ch, "/other.v1.Svc/Echo", "x", 1, &r);
  assert_int_equal(r.status, DBX_GRPC_UNIMPLEMENTED);
  assert_string_equal(f->seen_method, "/other.v1.Svc/Echo");
  assert_int_equal(f->seen_wfs, 0);
  dbx_rpc_result_cleanup(&r);
}

typedef struct {
  dbx_rpc_channel *ch;
  const char *method;
  int64_t timeout_ms;
  dbx_rpc_cancel *cancel;
  dbx_err rc;
  dbx_rpc_result r;
} client_job;

static void *client_thread(void *arg) {
  client_job *j = arg;
  j->rc = dbx_rpc_unary(j->ch, j->method, "req", 3, j->timeout_ms, 0, j->cancel, &j->r);
  return NULL;
}

typedef struct {
  dbx_rpc_call *call;
} answer_job;

static void *answer_later(void *arg) {
  answer_job *a = arg;
  struct timespec d = {0, 100 * 1000000}; /* the scenario: an answer 100 ms later */
  nanosleep(&d, NULL);
  dbx_rpc_call_reply(a->call, "late", 4);
  return NULL;
}

static void test_rpc_parked_call_answered_from_other_thread(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  client_job j = {f->ch, "Park", 10000, NULL, DBX_EINVAL, {0}};
  int64_t before = dbx_mono_ns();
  pthread_t ct, at;
  assert_int_equal(pthread_create(&ct, NULL, client_thread, &j), 0);
  wait_count(f, &f->n_parked, 1);
  /* The client's 10 s deadline is visible to the owner on our clock. */
  assert_true(f->seen_deadline_ns > before);
  /* The server re-derives it from the grpc-timeout header (rounded up, counted
   * from arrival), so allow it to land up to a second later than sent. */
  assert_true(f->seen_deadline_ns <= dbx_mono_ns() + (int64_t)11000 * 1000000);
  size_t n = 0;
  assert_memory_equal(dbx_rpc_call_request(f->parked[0], &n), "req", 3);
  assert_int_equal(n, 3);
  assert_int_equal(dbx_rpc_call_cancelled(f->parked[0]), 0);
  answer_job a = {f->parked[0]};
  assert_int_equal(pthread_create(&at, NULL, answer_later, &a), 0);
  pthread_join(ct, NULL);
  pthread_join(at, NULL);
  assert_int_equal(j.rc, DBX_OK);
  assert_int_equal(j.r.status, DBX_GRPC_OK);
  assert_int_equal(j.r.response_len, 4);
  assert_memory_equal(j.r.response, "late", 4);
  dbx_rpc_result_cleanup(&j.r);
  assert_int_equal(f->n_cancels, 0);
  wait_no_live_calls(f->srv);
}

static void test_rpc_status_details_round_trip(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Details", NULL, 0, &r);
  assert_int_equal(r.status, DBX_GRPC_FAILED_PRECONDITION);
  assert_string_equal(r.message, "with details");
  assert_int_equal(r.details_len, sizeof k_details);
  assert_memory_equal(r.details, k_details, sizeof k_details);
  dbx_rpc_result_cleanup(&r);
}

static void test_rpc_deadline_expiry_cancels_parked_call(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  dbx_rpc_result r = {0};
  assert_int_equal(dbx_rpc_unary(f->ch, "Park", "p", 1, 200, 0, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_DEADLINE_EXCEEDED);
  dbx_rpc_result_cleanup(&r);
  wait_count(f, &f->n_cancels, 1);
  assert_int_equal(f->n_parked, 1);
  assert_int_equal(dbx_rpc_call_cancelled(f->parked[0]), 1);
  /* The owner still answers; the answer is dropped and the call freed
   * (ASan/valgrind and the server's destroy prove nothing is left). */
  assert_int_equal(dbx_rpc_server_live_calls(f->srv), 1);
  dbx_rpc_call_reply(f->parked[0], "too late", 8);
  f->parked[0] = NULL;
  wait_no_live_calls(f->srv);
  /* The server keeps serving. */
  unary_ok(f->ch, "Echo", "ab", 2, &r);
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_memory_equal(r.response, "ba", 2);
  dbx_rpc_result_cleanup(&r);
}

typedef struct {
  fixture *f;
  int reports;   /* times on_tracked ran */
  int delivered; /* its last verdict */
} tracked;

static void on_tracked(void *arg, int delivered) {
  tracked *t = arg;
  pthread_mutex_lock(&t->f->mu);
  t->reports++;
  t->delivered = delivered;
  pthread_cond_broadcast(&t->f->cv);
  pthread_mutex_unlock(&t->f->mu);
}

/* A tracked reply reports once whether it reached the peer: 1 for a call
 * answered while its client waits, 0 for one whose client cancelled (here:
 * its deadline passed) before the answer, and 0 for one whose client
 * cancelled through a cancel token. */
static void test_rpc_tracked_reply_reports_delivery(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  /* answered while the client waits */
  client_job j = {f->ch, "Park", 10000, NULL, DBX_EINVAL, {0}};
  pthread_t ct;
  assert_int_equal(pthread_create(&ct, NULL, client_thread, &j), 0);
  wait_count(f, &f->n_parked, 1);
  tracked t1 = {f, 0, -1};
  dbx_rpc_call_reply_tracked(f->parked[0], "ok", 2, on_tracked, &t1);
  f->parked[0] = NULL;
  pthread_join(ct, NULL);
  assert_int_equal(j.rc, DBX_OK);
  assert_int_equal(j.r.status, DBX_GRPC_OK);
  dbx_rpc_result_cleanup(&j.r);
  wait_count(f, &t1.reports, 1);
  assert_int_equal(t1.delivered, 1);

  /* the client's deadline passed first */
  dbx_rpc_result r = {0};
  assert_int_equal(dbx_rpc_unary(f->ch, "Park", "p", 1, 200, 0, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_DEADLINE_EXCEEDED);
  dbx_rpc_result_cleanup(&r);
  wait_count(f, &f->n_cancels, 1);
  tracked t2 = {f, 0, -1};
  dbx_rpc_call_reply_tracked(f->parked[1], "late", 4, on_tracked, &t2);
  f->parked[1] = NULL;
  wait_count(f, &t2.reports, 1);
  assert_int_equal(t2.delivered, 0);

  /* the client cancelled through its token */
  dbx_rpc_cancel *k = NULL;
  assert_int_equal(dbx_rpc_cancel_create(&k), DBX_OK);
  client_job j3 = {f->ch, "Park", 10000, k, DBX_EINVAL, {0}};
  assert_int_equal(pthread_create(&ct, NULL, client_thread, &j3), 0);
  wait_count(f, &f->n_parked, 3);
  dbx_rpc_cancel_fire(k);
  pthread_join(ct, NULL);
  assert_int_equal(j3.rc, DBX_ECANCELED);
  dbx_rpc_result_cleanup(&j3.r);
  wait_count(f, &f->n_cancels, 2);
  tracked t3 = {f, 0, -1};
  dbx_rpc_call_reply_tracked(f->parked[2], "late", 4, on_tracked, &t3);
  f->parked[2] = NULL;
  wait_count(f, &t3.reports, 1);
  assert_int_equal(t3.delivered, 0);
  dbx_rpc_cancel_destroy(k);
  wait_no_live_calls(f->srv);
  assert_int_equal(t1.reports + t2.reports + t3.reports, 3); /* once each */
}

static void test_rpc_cancel_token_aborts_blocked_call(void **state) {
  fixture *f = *state;
  f->answer_on_cancel = 1;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  dbx_rpc_cancel *k = NULL;
  assert_int_equal(dbx_rpc_cancel_create(&k), DBX_OK);
  assert_int_equal(dbx_rpc_cancel_fired(k), 0);
  client_job j = {f->ch, "Park", 30000, k, DBX_EINVAL, {0}};
  pthread_t ct;
  assert_int_equal(pthread_create(&ct, NULL, client_thread, &j), 0);
  wait_count(f, &f->n_parked, 1);
  dbx_rpc_cancel_fire(k);
  pthread_join(ct, NULL);
  assert_int_equal(j.rc, DBX_ECANCELED);
  assert_int_equal(j.r.status, 0);
  assert_null(j.r.response);
  assert_int_equal(dbx_rpc_cancel_fired(k), 1);
  /* A later call with the fired token never leaves the process. */
  dbx_rpc_result r = {0};
  assert_int_equal(dbx_rpc_unary(f->ch, "Echo", "x", 1, 10000, 0, k, &r), DBX_ECANCELED);
  wait_count(f, &f->n_cancels, 1); /* the server saw the cancel and answered it */
  assert_int_equal(f->n_calls, 1);
  wait_no_live_calls(f->srv);
  dbx_rpc_cancel_destroy(k);
}

static void test_rpc_message_over_limit_resource_exhausted(void **state) {
  fixture *f = *state;
  start_server(f, 1024, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  uint8_t big[4096];
  memset(big, 'a', sizeof big);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Echo", big, sizeof big, &r);
  assert_int_equal(r.status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_non_null(r.message);
  assert_non_null(strstr(r.message, "1024"));
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(f->n_calls, 0);
  unary_ok(f->ch, "Echo", big, 512, &r); /* under the limit: served */
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_int_equal(r.response_len, 512);
  dbx_rpc_result_cleanup(&r);
}

static void test_rpc_api_key_enforced(void **state) {
  fixture *f = *state;
  start_server(f, 0, "s3cret");
  int port = dbx_rpc_server_port(f->srv);
  const char *keys[] = {"wrong", NULL};
  for (int i = 0; i < 2; i++) {
    dbx_rpc_channel *ch = open_channel(port, keys[i]);
    dbx_rpc_result r = {0};
    unary_ok(ch, "Echo", "x", 1, &r);
    assert_int_equal(r.status, DBX_GRPC_UNAUTHENTICATED);
    assert_string_equal(r.message, "missing or invalid api key");
    dbx_rpc_result_cleanup(&r);
    dbx_rpc_channel_destroy(ch);
  }
  assert_int_equal(f->n_calls, 0);
  wait_no_live_calls(f->srv); /* rejected calls are released too */
  f->ch = open_channel(port, "s3cret");
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Echo", "key", 3, &r);
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_memory_equal(r.response, "yek", 3);
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(f->n_calls, 1);
}

static void test_rpc_server_not_running(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  int port = dbx_rpc_server_port(f->srv);
  dbx_rpc_server_destroy(f->srv);
  f->srv = NULL;
  f->ch = open_channel(port, NULL);
  dbx_rpc_result r = {0};
  assert_int_equal(dbx_rpc_unary(f->ch, "Echo", "x", 1, 10000, 0, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_UNAVAILABLE);
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(dbx_rpc_unary(f->ch, "Echo", "x", 1, 300, 1, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_DEADLINE_EXCEEDED);
  dbx_rpc_result_cleanup(&r);
}

#define N_THREADS 8
#define N_CALLS 200

typedef struct {
  dbx_rpc_channel *ch;
  int id;
  int ok;
} burst_job;

static void *burst_thread(void *arg) {
  burst_job *b = arg;
  for (int i = 0; i < N_CALLS; i++) {
    char req[64], want[64];
    int n = snprintf(req, sizeof req, "thread-%d-call-%d", b->id, i);
    for (int k = 0; k < n; k++) want[k] = req[n - 1 - k];
    dbx_rpc_result r = {0};
    dbx_err rc = dbx_rpc_unary(b->ch, "Echo", req, (size_t)n, 20000, 0, NULL, &r);
    if (rc == DBX_OK && r.status == DBX_GRPC_OK && r.response_len == (size_t)n &&
        memcmp(r.response, want, (size_t)n) == 0)
      b->ok++;
    dbx_rpc_result_cleanup(&r);
  }
  return NULL;
}

static void test_rpc_concurrent_calls(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  pthread_t t[N_THREADS];
  burst_job b[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    b[i] = (burst_job){f->ch, i, 0};
    assert_int_equal(pthread_create(&t[i], NULL, burst_thread, &b[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < N_THREADS; i++) assert_int_equal(b[i].ok, N_CALLS);
  assert_int_equal(f->n_calls, N_THREADS * N_CALLS);
  wait_no_live_calls(f->srv);
}

static void test_rpc_destroy_with_parked_calls(void **state) {
  fixture *f = *state;
  f->answer_on_cancel = 1; /* the owner answers each cancelled call */
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  enum { N = 4 };
  client_job j[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    j[i] = (client_job){f->ch, "Park", 30000, NULL, DBX_EINVAL, {0}};
    assert_int_equal(pthread_create(&t[i], NULL, client_thread, &j[i]), 0);
  }
  wait_count(f, &f->n_parked, N);
  dbx_rpc_server_destroy(f->srv);
  f->srv = NULL;
  assert_int_equal(f->n_cancels, N);
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    assert_int_equal(j[i].rc, DBX_OK);
    assert_int_not_equal(j[i].r.status, DBX_GRPC_OK);
    dbx_rpc_result_cleanup(&j[i].r);
  }
}

static void test_rpc_tls_round_trip(void **state) {
  fixture *f = *state;
  dbx_rpc_server_opts o = {0};
  o.tls_cert_pem = k_cert_pem;
  o.tls_key_pem = k_key_pem;
  o.on_call = on_call;
  o.ud = f;
  assert_int_equal(dbx_rpc_server_start(&o, &f->srv, NULL), DBX_OK);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_rpc_server_port(f->srv));
  dbx_rpc_channel_opts co = {0};
  co.target = target;
  co.tls = 1;
  co.tls_ca_pem = k_cert_pem;
  co.tls_server_name = "dbx.test"; /* the certificate's name, not the address */
  assert_int_equal(dbx_rpc_channel_create(&co, &f->ch), DBX_OK);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Echo", "tls", 3, &r);
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_memory_equal(r.response, "slt", 3);
  dbx_rpc_result_cleanup(&r);
  /* A plaintext client cannot talk to the TLS port. */
  dbx_rpc_channel *plain = open_channel(dbx_rpc_server_port(f->srv), NULL);
  assert_int_equal(dbx_rpc_unary(plain, "Echo", "x", 1, 10000, 0, NULL, &r), DBX_OK);
  assert_int_equal(r.status, DBX_GRPC_UNAVAILABLE);
  dbx_rpc_result_cleanup(&r);
  dbx_rpc_channel_destroy(plain);
  assert_int_equal(f->n_calls, 1);
}

/* gRPC's own size check is told apart by code and number, with no text
 * parsing above rpc/: the server's receive limit, the client's send limit,
 * and a handler's RESOURCE_EXHAUSTED that is not about size. */
static void test_rpc_size_limit_reported_as_a_number(void **state) {
  fixture *f = *state;
  start_server(f, 1024, NULL);
  int port = dbx_rpc_server_port(f->srv);
  f->ch = open_channel(port, NULL);
  uint8_t big[4096];
  memset(big, 'a', sizeof big);
  dbx_rpc_result r = {0};
  unary_ok(f->ch, "Echo", big, sizeof big, &r); /* over the server's limit */
  assert_int_equal(r.status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_int_equal(r.message_limit_bytes, 1024);
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(r.message_limit_bytes, 0);

  unary_ok(f->ch, "Full", "x", 1, &r); /* the handler's own RESOURCE_EXHAUSTED */
  assert_int_equal(r.status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_string_equal(r.message, "storage full: 4096 vs. 1024");
  assert_int_equal(r.message_limit_bytes, 0);
  dbx_rpc_result_cleanup(&r);

  unary_ok(f->ch, "Echo", big, 100, &r); /* served: no limit reported */
  assert_int_equal(r.status, DBX_GRPC_OK);
  assert_int_equal(r.message_limit_bytes, 0);
  dbx_rpc_result_cleanup(&r);

  /* this side's send limit: refused before it leaves the process */
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  dbx_rpc_channel_opts o = {0};
  o.target = target;
  o.max_message_bytes = 2000;
  dbx_rpc_channel *small = NULL;
  assert_int_equal(dbx_rpc_channel_create(&o, &small), DBX_OK);
  int calls = f->n_calls;
  unary_ok(small, "Echo", big, 3000, &r);
  assert_int_equal(r.status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_int_equal(r.message_limit_bytes, 2000);
  dbx_rpc_result_cleanup(&r);
  assert_int_equal(f->n_calls, calls);
  dbx_rpc_channel_destroy(small);

  assert_string_equal(dbx_rpc_status_name(DBX_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  assert_string_equal(dbx_rpc_status_name(DBX_GRPC_OK), "OK");
  assert_string_equal(dbx_rpc_status_name(DBX_GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
  assert_string_equal(dbx_rpc_status_name(17), "UNKNOWN");
  assert_string_equal(dbx_rpc_status_name(-1), "UNKNOWN");
}

/* worker/client passes the status code and the size limit up (what the
 * worker uses to fail an oversized workflow task without reading text). */
static void test_rpc_client_call_status_carries_the_code(void **state) {
  fixture *f = *state;
  start_server(f, 1024, NULL);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", dbx_rpc_server_port(f->srv));
  dbx_client_opts co = {0};
  co.address = addr;
  dbx_client *c = NULL;
  assert_int_equal(dbx_client_create(&co, &c), DBX_OK);

  WorkflowType small = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  small.name = "t";
  dbx_client_status st = {99, 99};
  char *err = NULL;
  assert_int_equal(dbx_client_call_status(c, "Full", &small.base, NULL, 10000, NULL, NULL, &st, &err),
                   DBX_ERPC);
  assert_int_equal(st.grpc_status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_int_equal(st.message_limit_bytes, 0);
  assert_string_equal(err, "RESOURCE_EXHAUSTED: storage full: 4096 vs. 1024");
  free(err);

  char name[3000];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  WorkflowType big = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_TYPE);
  big.name = name;
  assert_int_equal(dbx_client_call_status(c, "Echo", &big.base, NULL, 10000, NULL, NULL, &st, NULL),
                   DBX_ERPC);
  assert_int_equal(st.grpc_status, DBX_GRPC_RESOURCE_EXHAUSTED);
  assert_int_equal(st.message_limit_bytes, 1024);

  assert_int_equal(dbx_client_call_status(c, "Echo", &small.base, NULL, 10000, NULL, NULL, &st, NULL),
                   DBX_OK);
  assert_int_equal(st.grpc_status, DBX_GRPC_OK);
  assert_int_equal(st.message_limit_bytes, 0);

  assert_int_equal(dbx_client_call_status(c, "Nope", &small.base, NULL, 10000, NULL, NULL, &st, NULL),
                   DBX_ERPC);
  assert_int_equal(st.grpc_status, DBX_GRPC_UNIMPLEMENTED);
  dbx_client_destroy(c);
}

/* Each allocation of ours on a call's path (the client's, and the server's
 * in this same process) failing in turn: the call fails cleanly, as
 * DBX_ENOMEM on the client side or as a status the server sent, nothing
 * leaks (ASan, valgrind) and the server releases every call. */
static void test_rpc_each_allocation_failure_is_clean(void **state) {
  fixture *f = *state;
  start_server(f, 0, NULL);
  f->ch = open_channel(dbx_rpc_server_port(f->srv), NULL);
  int clean_run = 0;
  long n = 1;
  for (; n < 200 && !clean_run; n++) {
    dbx_rpc_result r = {0};
    dbx_alloc_fail_at(n);
    dbx_err rc = dbx_rpc_unary(f->ch, "Echo", "hello", 5, 10000, 0, NULL, &r);
    int failed = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!failed) {
      assert_int_equal(rc, DBX_OK);
      assert_int_equal(r.status, DBX_GRPC_OK);
      assert_memory_equal(r.response, "olleh", 5);
      clean_run = 1;
    } else if (rc == DBX_OK) {
      assert_int_not_equal(r.status, DBX_GRPC_OK); /* the server answered its own OOM */
    } else {
      assert_int_equal(rc, DBX_ENOMEM);
      assert_null(r.response);
    }
    dbx_rpc_result_cleanup(&r);
    wait_no_live_calls(f->srv);
  }
  assert_true(clean_run);
  /* client: path, reply copy; server: call, method, metadata keys and
   * values, request copy: well over ten allocations reached the hook */
  assert_true(n > 10);
  dbx_rpc_channel *ch = NULL;
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", dbx_rpc_server_port(f->srv));
  dbx_rpc_channel_opts o = {0};
  o.target = target;
  o.api_key = "k";
  o.namespace_ = "ns";
  for (long k = 1;; k++) {
    dbx_alloc_fail_at(k);
    dbx_err rc = dbx_rpc_channel_create(&o, &ch);
    int failed = dbx_alloc_failed();
    dbx_alloc_fail_at(0);
    if (!failed) {
      assert_int_equal(rc, DBX_OK);
      break;
    }
    assert_int_equal(rc, DBX_ENOMEM);
    assert_null(ch);
  }
  dbx_rpc_channel_destroy(ch);
}

static void test_rpc_bad_options_rejected(void **state) {
  (void)state;
  dbx_rpc_server_opts o = {0}; /* no handler */
  dbx_rpc_server *s = NULL;
  const char *err = NULL;
  assert_int_equal(dbx_rpc_server_start(&o, &s, &err), DBX_EINVAL);
  assert_non_null(err);
  assert_null(s);
  dbx_rpc_channel_opts co = {0}; /* no target */
  dbx_rpc_channel *ch = NULL;
  assert_int_equal(dbx_rpc_channel_create(&co, &ch), DBX_EINVAL);
  assert_null(ch);
}

static int group_setup(void **state) {
  (void)state;
  dbx_log_set_level(DBX_LOG_WARN);
  dbx_rpc_global_init();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  dbx_rpc_global_shutdown();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_rpc_echo_round_trip_and_metadata, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_unknown_method_unimplemented, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_parked_call_answered_from_other_thread, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rpc_status_details_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_deadline_expiry_cancels_parked_call, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rpc_cancel_token_aborts_blocked_call, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_tracked_reply_reports_delivery, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_message_over_limit_resource_exhausted, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rpc_api_key_enforced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_server_not_running, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_concurrent_calls, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_destroy_with_parked_calls, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_tls_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_size_limit_reported_as_a_number, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rpc_client_call_status_carries_the_code, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rpc_each_allocation_failure_is_clean, setup, teardown),
      cmocka_unit_test(test_rpc_bad_options_rejected),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
