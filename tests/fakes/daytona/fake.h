/* Start and drive the fake Daytona server (fake_daytona.py, next to this
 * file) from a C test: a python3 subprocess on an ephemeral 127.0.0.1 port,
 * its state under a folder of the test's temporary directory, and a tiny
 * HTTP/1.0 client for its control endpoints (/_control/faults, /log,
 * /sandboxes). Header-only (static inline) so unit and integration tests can
 * use it without another library. A missing python3 or script fails the
 * start (the test fails, never skips). Single-threaded use from test
 * bodies; the control client may be called from any thread. */
#ifndef DBX_TESTS_FAKES_DAYTONA_FAKE_H
#define DBX_TESTS_FAKES_DAYTONA_FAKE_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DBX_FAKE_DAYTONA_KEY "dtn_fake_key"

typedef struct {
  pid_t pid;
  int port;
  char root[1024];
  char api_url[128];
  char why[1024]; /* why a start failed */
} dbx_fake_daytona;

/* The script's path: $DBX_SOURCE_DIR/tests/fakes/daytona, else next to this
 * header (__FILE__ is absolute in the CMake build). */
static inline void dbx_fake_daytona_script(char *out, size_t cap) {
  const char *src = getenv("DBX_SOURCE_DIR");
  if (src && *src) {
    snprintf(out, cap, "%s/tests/fakes/daytona/fake_daytona.py", src);
    return;
  }
  snprintf(out, cap, "%s", __FILE__);
  char *slash = strrchr(out, '/');
  if (slash) snprintf(slash + 1, cap - (size_t)(slash + 1 - out), "fake_daytona.py");
}

/* Start the fake with its state under dir/fake-daytona. 0, or -1 with f->why. */
static inline int dbx_fake_daytona_start(dbx_fake_daytona *f, const char *dir) {
  char script[600], portfile[600];
  memset(f, 0, sizeof *f);
  dbx_fake_daytona_script(script, sizeof script);
  if (access(script, R_OK) != 0) {
    snprintf(f->why, sizeof f->why, "the fake Daytona server %s is missing", script);
    return -1;
  }
  snprintf(f->root, sizeof f->root, "%s/fake-daytona", dir);
  snprintf(portfile, sizeof portfile, "%s/fake-daytona.port", dir);
  unlink(portfile);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(f->why, sizeof f->why, "fork: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) dup2(nul, 1);
    execlp("python3", "python3", script, "--root", f->root, "--port-file", portfile,
           "--api-key", DBX_FAKE_DAYTONA_KEY, (char *)NULL);
    _exit(127);
  }
  f->pid = pid;
  for (int i = 0; i < 1000; i++) { /* 20 s */
    FILE *p = fopen(portfile, "r");
    if (p) {
      int port = 0;
      int got = fscanf(p, "%d", &port);
      fclose(p);
      if (got == 1 && port > 0) {
        f->port = port;
        snprintf(f->api_url, sizeof f->api_url, "http://127.0.0.1:%d/api", port);
        return 0;
      }
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      f->pid = 0;
      snprintf(f->why, sizeof f->why, "the fake Daytona server exited (status %d%s)",
               WIFEXITED(st) ? WEXITSTATUS(st) : -1,
               WIFEXITED(st) && WEXITSTATUS(st) == 127 ? ": is python3 installed?" : "");
      return -1;
    }
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
  snprintf(f->why, sizeof f->why, "the fake Daytona server did not listen within 20 s");
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  f->pid = 0;
  return -1;
}

static inline void dbx_fake_daytona_stop(dbx_fake_daytona *f) {
  if (f->pid > 0) {
    kill(f->pid, SIGTERM);
    waitpid(f->pid, NULL, 0);
  }
  f->pid = 0;
}

/* One HTTP/1.0 exchange with the fake; returns the body (malloc'd, free())
 * or NULL. body may be NULL (GET). */
static inline char *dbx_fake_daytona_call(const dbx_fake_daytona *f, const char *method,
                                          const char *path, const char *body) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return NULL;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(s);
    return NULL;
  }
  size_t bl = body ? strlen(body) : 0;
  char head[512];
  int hl = snprintf(head, sizeof head,
                    "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    method, path, bl);
  if (write(s, head, (size_t)hl) != hl || (bl && write(s, body, bl) != (ssize_t)bl)) {
    close(s);
    return NULL;
  }
  size_t n = 0, cap = 65536;
  char *buf = malloc(cap);
  for (;;) {
    if (buf == NULL) break;
    if (n + 4096 > cap) {
      char *nb = realloc(buf, cap *= 2);
      if (nb == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
    ssize_t r = read(s, buf + n, cap - n - 1);
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(s);
  if (buf == NULL) return NULL;
  buf[n] = 0;
  char *b = strstr(buf, "\r\n\r\n");
  char *out = b ? strdup(b + 4) : NULL;
  free(buf);
  return out;
}

/* POST /_control/faults with json; 0 or -1. */
static inline int dbx_fake_daytona_faults(const dbx_fake_daytona *f, const char *json) {
  char *r = dbx_fake_daytona_call(f, "POST", "/_control/faults", json);
  int ok = r != NULL && r[0] == '{';
  free(r);
  return ok ? 0 : -1;
}

#endif
