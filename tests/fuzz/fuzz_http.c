/* libFuzzer harness: the replies of the HTTP services durabox calls, as the
 * code that reads them gets them: the Daytona driver (activities/daytona.h:
 * Daytona's REST API and its toolbox), llm.chat (activities/llm.h: an
 * OpenAI-compatible chat completions reply) and github.open_pr / find_pr
 * (activities/github.h). The input's first byte picks one operation (its low six
 * bits modulo the 17 operations; bits 6 and 7 pick a variant); the rest
 * is the list of HTTP replies a loopback server in this process (on
 * 127.0.0.1:8000) sends, one per request, in order:
 *
 *   reply := status(2, big-endian; 100 + value % 500) flags(1) length(2) body
 *   flags: bit 0  a Retry-After header of (flags >> 1) & 3 seconds
 *          bit 3  close the connection without a reply (a transport error)
 *          bit 4  a Content-Length 16 bytes longer than the body, then close
 *                 (a reply cut short)
 *
 * A request after the last reply is answered 400 {"message":"no more replies"},
 * so every operation ends. The process runs in a network namespace of its own
 * (loopback only): a reply naming another host (a toolboxProxyUrl, a
 * redirect) cannot reach anything and fails at once instead of waiting out a
 * connect timeout. That needs root or user namespaces; without them the
 * harness stops with a message, never runs half-checked.
 *
 * Checked for every input: no crash, leak or sanitizer report (the fuzz build's
 * ASan + UBSan); the driver answers one of its error kinds, with a message
 * when it is not OK; an activity answers a JSON result or a failure with a
 * type and a message; and no answer, message or result holds the API key or
 * token the requests carried, even when a reply echoes them.
 *
 * The fuzz build (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, CMakeLists.txt)
 * skips the driver's waits between retries and polls, so a 429 or a sandbox
 * that never settles costs requests, not seconds; its deadlines still hold. */
#define _GNU_SOURCE
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "activities/daytona.h"
#include "activities/driver.h"
#include "activities/github.h"
#include "activities/llm.h"
#include "base/util.h"
#include "tests/act_fake.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "dbx-fuzz-key-7f3a9c"
/* The namespace is this process's own, so a fixed port is always free, and
 * seeds can name the toolbox: http://127.0.0.1:8000/toolbox */
#define PORT 8000

static int g_port;
static dbx_daytona *g_dt;
static dbx_driver *g_drv;

/* the current input's replies, read by the server thread */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static const uint8_t *g_rp;
static size_t g_rn;

static void die(const char *what) {
  fprintf(stderr, "fuzz_http: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Bring the namespace's loopback up (it starts down). */
static void loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  if (s < 0) die("socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) die("SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) die("SIOCSIFFLAGS lo");
  close(s);
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Read one request: its head, then a Content-Length body or a chunked one
 * (to its last chunk). Gives up quietly on a short read or at 16 MiB. */
static void read_request(int fd) {
  size_t cap = 65536, n = 0;
  char *b = malloc(cap + 1);
  if (!b) return;
  char *end = NULL;
  for (;;) {
    if (n == cap) {
      if (cap >= ((size_t)16 << 20)) break;
      char *nb = realloc(b, cap * 2 + 1);
      if (!nb) break;
      b = nb;
      cap *= 2;
    }
    ssize_t r = recv(fd, b + n, cap - n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    b[n] = '\0';
    if (!end) end = strstr(b, "\r\n\r\n");
    if (!end) continue;
    size_t head = (size_t)(end - b) + 4;
    const char *cl = strcasestr(b, "\r\ncontent-length:");
    if (cl && cl < end) {
      size_t want = strtoull(cl + 17, NULL, 10);
      if (n - head >= want) break;
    } else if (strcasestr(b, "\r\ntransfer-encoding: chunked") != NULL) {
      if (n >= 5 && memcmp(b + n - 5, "0\r\n\r\n", 5) == 0) break;
    } else {
      break;
    }
  }
  free(b);
}

static void *server(void *arg) {
  int ls = *(int *)arg;
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) continue;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    read_request(fd);
    pthread_mutex_lock(&g_mu);
    unsigned st = 400, flags = 0;
    const uint8_t *body = (const uint8_t *)"{\"message\":\"no more replies\"}";
    size_t blen = strlen((const char *)body);
    if (g_rn >= 5) {
      st = 100 + (((unsigned)g_rp[0] << 8 | g_rp[1]) % 500);
      flags = g_rp[2];
      blen = (size_t)g_rp[3] << 8 | g_rp[4];
      if (blen > g_rn - 5) blen = g_rn - 5;
      body = g_rp + 5;
      g_rp += 5 + blen;
      g_rn -= 5 + blen;
    } else {
      g_rn = 0;
    }
    char *copy = malloc(blen ? blen : 1);
    if (copy) memcpy(copy, body, blen);
    pthread_mutex_unlock(&g_mu);
    if (copy && !(flags & 0x08)) {
      char ra[32] = "", head[256];
      if (flags & 0x01) snprintf(ra, sizeof ra, "Retry-After: %u\r\n", (flags >> 1) & 3);
      int hn = snprintf(head, sizeof head,
                        "HTTP/1.1 %u Fuzz\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                        st, blen + ((flags & 0x10) ? 16 : 0), ra);
      if (write_all(fd, head, (size_t)hn) == 0) (void)write_all(fd, copy, blen);
    }
    free(copy);
    shutdown(fd, SHUT_RDWR);
    close(fd);
  }
  return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  if (unshare(CLONE_NEWNET) != 0) die("unshare(CLONE_NEWNET) (run as root)");
  loopback_up();
  /* nothing of the environment may send the requests elsewhere */
  const char *proxies[] = {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                           "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"};
  for (size_t i = 0; i < sizeof proxies / sizeof *proxies; i++) unsetenv(proxies[i]);
  static int ls;
  ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT),
                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 64) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &al) != 0)
    die("listen on loopback");
  g_port = ntohs(a.sin_port);
  pthread_t t;
  if (pthread_create(&t, NULL, server, &ls) != 0) die("pthread_create");
  pthread_detach(t);

  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%d/api", g_port);
  /* the driver warns of every retry: thousands of lines a second here */
  dbx_log_set_level(DBX_LOG_ERROR);
  setenv("LLM_API_KEY", KEY, 1);
  setenv("GITHUB_TOKEN", KEY, 1);
  dbx_daytona_opts o = {.api_url = url, .api_key = KEY, .state_wait_ms = 1500,
                        .snapshot_wait_ms = 1500, .request_timeout_ms = 3000};
  const char *why = NULL;
  if (dbx_daytona_open(&o, &g_dt, &why) != DBX_OK) {
    fprintf(stderr, "fuzz_http: dbx_daytona_open: %s\n", why ? why : "failed");
    exit(1);
  }
  g_drv = dbx_daytona_driver(g_dt);
  return 0;
}

static void no_key(const char *what, const char *s, size_t n) {
  if (s && memmem(s, n, KEY, strlen(KEY)) != NULL) {
    fprintf(stderr, "fuzz_http: the key is in %s: %.*s\n", what, (int)(n > 400 ? 400 : n), s);
    abort();
  }
}

/* A driver answer: one of the kinds; not OK has a message; no key anywhere. */
static void drv_check(dbx_drv_err e) {
  if ((int)e < (int)DBX_DRV_OK || (int)e >= (int)DBX_DRV_ERR_COUNT) abort();
  const char *m = g_drv->ops->errmsg(g_drv->self);
  if (m == NULL) abort();
  if (e != DBX_DRV_OK && e != DBX_DRV_NOMEM && m[0] == '\0') {
    fprintf(stderr, "fuzz_http: driver error %d without a message\n", (int)e);
    abort();
  }
  no_key("a driver message", m, strlen(m));
}

static void act_check(dbx_err rc, dbx_act_result *res) {
  if (rc == DBX_OK) {
    if (res->failure_type) {
      if (res->failure_type[0] == '\0' || !res->failure_message || !res->failure_message[0]) {
        fprintf(stderr, "fuzz_http: a failure without type or message\n");
        abort();
      }
      no_key("a failure message", res->failure_message, strlen(res->failure_message));
    } else if (res->result_json) {
      cJSON *j = cJSON_Parse(res->result_json);
      if (!j) {
        fprintf(stderr, "fuzz_http: a result that is not JSON: %.300s\n", res->result_json);
        abort();
      }
      cJSON_Delete(j);
      no_key("a result", res->result_json, strlen(res->result_json));
    }
  } else if (rc != DBX_ENOMEM) {
    fprintf(stderr, "fuzz_http: an activity returned %d\n", (int)rc);
    abort();
  }
  free(res->result_json);
  free(res->failure_type);
  free(res->failure_message);
}

static void run_act(const dbx_activity_type *t, const char *fmt) {
  char in[512];
  snprintf(in, sizeof in, fmt, g_port);
  struct dbx_act a = {.workflow_id = "fz-wf", .run_id = "fz-run", .activity_id = "1",
                      .attempt = 1};
  dbx_act_result res = {0};
  dbx_err rc = t->run(&a, in, strlen(in), &res, t->ud);
  act_check(rc, &res);
  dbx_fake_act_cleanup(&a);
}

enum { OPS = 17 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  pthread_mutex_lock(&g_mu);
  g_rp = data + 1;
  g_rn = size - 1;
  pthread_mutex_unlock(&g_mu);
  const dbx_driver_ops *o = g_drv->ops;
  void *s = g_drv->self;
  const char *sb = "fz-sb";
  switch ((data[0] & 0x3f) % OPS) { /* bits 6 and 7: variants */
  case 0: {
    dbx_drv_label l[] = {{"durabox.task", "fz"}};
    dbx_drv_create_opts co = {.source = {.kind = DBX_DRV_SOURCE_EMPTY}, .labels = l,
                              .nlabels = 1};
    int adopted = 0;
    drv_check(o->create(s, sb, &co, &adopted));
    break;
  }
  case 1: {
    dbx_drv_create_opts co = {
        .source = {.kind = DBX_DRV_SOURCE_GIT, .location = "https://example.invalid/r.git"}};
    int adopted = 0;
    drv_check(o->create(s, sb, &co, &adopted));
    break;
  }
  case 2: {
    dbx_drv_state st;
    drv_check(o->exists(s, sb, &st));
    break;
  }
  case 3: {
    dbx_drv_label m[] = {{"durabox.task", "fz"}};
    char **names = NULL;
    size_t n = 0;
    dbx_drv_err e = o->list(s, m, 1, &names, &n);
    drv_check(e);
    if (e == DBX_DRV_OK) dbx_drv_names_free(names, n);
    break;
  }
  case 4: {
    dbx_drv_label *l = NULL;
    size_t n = 0;
    dbx_drv_err e = o->labels(s, sb, &l, &n);
    drv_check(e);
    if (e == DBX_DRV_OK) dbx_drv_labels_free(l, n);
    break;
  }
  case 5: drv_check(o->start(s, sb)); break;
  case 6: drv_check(o->stop(s, sb)); break;
  case 7: drv_check(o->del(s, sb)); break;
  case 8: {
    const char *env[] = {"A=1", NULL};
    dbx_drv_exec_opts eo = {.command = "make check", .env = env, .timeout_ms = 60000,
                            .attempt = 1};
    int adopted = 0;
    drv_check(o->exec_start(s, sb, "fz-cmd-1", &eo, &adopted));
    break;
  }
  case 9: {
    dbx_drv_cmd_status st;
    drv_check(o->exec_poll(s, sb, "fz-cmd-1", &st));
    break;
  }
  case 10: {
    char buf[4096];
    size_t n = 0;
    dbx_drv_err e = o->exec_attach(s, sb, "fz-cmd-1", data[0] & 0x40 ? 2 : 1, 0, buf,
                                   sizeof buf, &n);
    drv_check(e);
    if (e == DBX_DRV_OK && n > sizeof buf) abort();
    break;
  }
  case 11: {
    dbx_drv_exec_result r;
    memset(&r, 0, sizeof r);
    dbx_drv_err e = o->exec_result(s, sb, "fz-cmd-1", &r);
    drv_check(e);
    if (e == DBX_DRV_OK) {
      if (r.stdout_len && !r.stdout_buf) abort();
      dbx_drv_exec_result_cleanup(&r);
    }
    break;
  }
  case 12: {
    uint8_t *d = NULL;
    size_t n = 0;
    dbx_drv_err e = o->file_read(s, sb, "src/main.c", 1 << 20, &d, &n);
    drv_check(e);
    if (e == DBX_DRV_OK) {
      if (n > (1u << 20)) abort();
      free(d);
    }
    break;
  }
  case 13: drv_check(o->file_write(s, sb, "notes.txt", "hello\n", 6)); break;
  case 14: {
    char *ref = NULL;
    dbx_drv_err e = o->checkpoint(s, sb, "fz-snap", &ref);
    drv_check(e);
    if (e == DBX_DRV_OK) {
      if (!ref) abort();
      no_key("a checkpoint ref", ref, strlen(ref));
      free(ref);
    }
    break;
  }
  case 15:
    run_act(&dbx_llm_chat_activity,
            "{\"messages\":[{\"role\":\"user\",\"content\":\"fix it\"}],"
            "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"exec\"}}],"
            "\"model\":\"m\",\"base_url\":\"http://127.0.0.1:%d/v1\"}");
    break;
  default:
    if (data[0] & 0x80)
      run_act(&dbx_github_find_pr_activity,
              "{\"repo\":\"o/r\",\"head\":\"fix\",\"api_url\":\"http://127.0.0.1:%d\"}");
    else
      run_act(&dbx_github_open_pr_activity,
              "{\"repo\":\"o/r\",\"head\":\"fix\",\"base\":\"main\",\"title\":\"t\","
              "\"api_url\":\"http://127.0.0.1:%d\"}");
    break;
  }
  pthread_mutex_lock(&g_mu);
  g_rp = NULL;
  g_rn = 0;
  pthread_mutex_unlock(&g_mu);
  return 0;
}
