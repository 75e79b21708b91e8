/* Temporal's Web UI as a child process of the dev server (see cli/ui.h). */
#define _GNU_SOURCE
#include "cli/ui.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/util.h"

#define UI_VERSION "v2.42.1"
#define UI_HOW_TO                                                                                  \
  "install it with scripts/setup.sh (tests/interop/ui-server.sh), or with `go install "         \
  "github.com/temporalio/ui-server/v2/cmd/server@" UI_VERSION "` and DURABOX_UI_SERVER=PATH; "    \
  "--headless runs without it and says nothing"

struct dbx_cli_ui {
  pid_t pid;
  char *dir; /* the generated root: DIR/config/development.yaml */
  char url[96];
};

static int executable(const char *path) {
  struct stat sb;
  return path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, X_OK) == 0;
}

/* The UI server's path (malloc'd), or NULL with *why set. */
static char *find_server(const char **why) {
  const char *env = getenv("DURABOX_UI_SERVER");
  if (env && *env) {
    if (executable(env)) return strdup(env);
    *why = "DURABOX_UI_SERVER does not name an executable file";
    return NULL;
  }
  const char *path = getenv("PATH");
  char buf[PATH_MAX];
  while (path && *path) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    if (n > 0 && n + sizeof "/temporal-ui-server" < sizeof buf) {
      memcpy(buf, path, n);
      strcpy(buf + n, "/temporal-ui-server");
      if (executable(buf)) return strdup(buf);
    }
    path = end ? end + 1 : NULL;
  }
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash && (size_t)(slash - buf) + sizeof "/../../.cache/ui-server/server" < sizeof buf) {
      strcpy(slash, "/../../.cache/ui-server/server");
      char real[PATH_MAX];
      if (realpath(buf, real) && executable(real)) return strdup(real);
    }
  }
  *why = "Temporal's UI server (" UI_VERSION ") is not installed: no DURABOX_UI_SERVER, no temporal-ui-server "
         "on PATH, no .cache/ui-server/server beside this build";
  return NULL;
}

/* A YAML single-quoted scalar of s into f. */
static void yaml_str(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('\'', f);
}

static int write_config(const char *dir, const char *grpc, const char *ui_ip, int ui_port, const char *ns) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/config", dir);
  if (mkdir(path, 0700) != 0) return -1;
  snprintf(path, sizeof path, "%s/config/development.yaml", dir);
  FILE *f = fopen(path, "w");
  if (f == NULL) return -1;
  fputs("temporalGrpcAddress: ", f);
  yaml_str(f, grpc);
  fputs("\nhost: ", f);
  yaml_str(f, ui_ip);
  fprintf(f, "\nport: %d\nenableUi: true\nhideLogs: true\nnotifyOnNewVersion: false\n", ui_port);
  fputs("defaultNamespace: ", f);
  yaml_str(f, ns);
  fputs("\n", f);
  return fclose(f) == 0 ? 0 : -1;
}

static int free_port(const char *ip) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t al = sizeof a;
  int port = -1;
  if (inet_pton(AF_INET, ip, &a.sin_addr) == 1 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &al) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* 1 when something listens on ip:port already: a bind with SO_REUSEADDR
 * (as the UI server's own listen) fails only then. A port that cannot be
 * judged (no socket) counts as free; the start then says what went wrong. */
static int port_taken(const char *ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  int taken = inet_pton(AF_INET, ip, &a.sin_addr) == 1 && bind(fd, (struct sockaddr *)&a, sizeof a) != 0 &&
              errno == EADDRINUSE;
  close(fd);
  return taken;
}

/* 1 when process pid itself listens on TCP port (IPv4 or IPv6): a LISTEN
 * socket of that port in /proc/net/tcp{,6} whose inode is one of pid's
 * file descriptors. A connect to the port would also succeed for another
 * process that took the port first, while the UI server died of it. */
static int pid_listens(pid_t pid, int port) {
  unsigned long inodes[16];
  int n = 0;
  static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  for (size_t t = 0; t < 2; t++) {
    FILE *f = fopen(tables[t], "r");
    if (f == NULL) continue;
    char line[512];
    while (fgets(line, sizeof line, f) != NULL && n < 16) {
      char local[64];
      unsigned st = 0, lport = 0;
      unsigned long inode = 0;
      /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
      if (sscanf(line, " %*d: %63s %*s %x %*s %*s %*s %*u %*d %lu", local, &st, &inode) != 3) continue;
      char *colon = strrchr(local, ':');
      if (colon == NULL || sscanf(colon + 1, "%x", &lport) != 1) continue;
      if (st == 0x0A && (int)lport == port && inode != 0) inodes[n++] = inode;
    }
    fclose(f);
  }
  if (n == 0) return 0;
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%ld/fd", (long)pid);
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d)) != NULL) {
    char path[320], target[64];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t k = readlink(path, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    unsigned long ino = 0;
    if (sscanf(target, "socket:[%lu]", &ino) != 1) continue;
    for (int i = 0; i < n; i++)
      if (inodes[i] == ino) found = 1;
  }
  closedir(d);
  return found;
}

/* The generated configuration lives in /tmp/durabox-ui-PID-XXXXXX, PID the
 * process that started the UI; a process that was killed (SIGKILL) never
 * removed its own, so each start removes those whose process is gone. */
#define UI_DIR_PREFIX "durabox-ui-"
static void remove_orphan_dirs(void) {
  DIR *d = opendir("/tmp");
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, UI_DIR_PREFIX, strlen(UI_DIR_PREFIX)) != 0) continue;
    char *end = NULL;
    long pid = strtol(e->d_name + strlen(UI_DIR_PREFIX), &end, 10);
    if (pid <= 0 || end == NULL || *end != '-') continue; /* not of this naming */
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "/tmp/%s", e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) dbx_fs_remove_tree(path);
  }
  closedir(d);
}

static void reap(pid_t pid, int grace_ms) {
  int st;
  for (int waited = 0; waited < grace_ms; waited += 50) {
    if (waitpid(pid, &st, WNOHANG) == pid) return;
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
}

dbx_cli_ui *dbx_cli_ui_start(const dbx_cli_ui_opts *o) {
  const char *who = o->who ? o->who : "durabox";
  const char *grpc_ip = o->grpc_ip ? o->grpc_ip : "127.0.0.1";
  const char *ui_ip = o->ui_ip ? o->ui_ip : grpc_ip;
  const char *ns = o->namespace_ ? o->namespace_ : "default";
  remove_orphan_dirs();
  int port = o->ui_port;
  if (port == 0) port = o->grpc_port + 1000 <= 65535 ? o->grpc_port + 1000 : free_port(ui_ip);
  if (port == o->grpc_port) { /* port_taken would call our own listener another process */
    fprintf(stderr, "%s: warning: running without the Web UI: --ui-port %d is the service's own gRPC port "
                    "(--ui-port N picks another port; --headless runs without the UI)\n", who, port);
    return NULL;
  }
  if (port > 0 && port_taken(ui_ip, port)) {
    fprintf(stderr, "%s: warning: running without the Web UI: %s:%d is in use by another process "
                    "(--ui-port N picks another port; --headless runs without the UI)\n", who, ui_ip, port);
    return NULL;
  }
  const char *why = NULL;
  char *server = find_server(&why);
  if (server == NULL) {
    fprintf(stderr, "%s: warning: running without the Web UI: %s; %s\n", who, why, UI_HOW_TO);
    return NULL;
  }
  dbx_cli_ui *ui = calloc(1, sizeof *ui);
  char tmpl[64];
  snprintf(tmpl, sizeof tmpl, "/tmp/" UI_DIR_PREFIX "%ld-XXXXXX", (long)getpid());
  char grpc[128];
  snprintf(grpc, sizeof grpc, "%s:%d", strcmp(grpc_ip, "0.0.0.0") == 0 ? "127.0.0.1" : grpc_ip, o->grpc_port);
  if (ui == NULL || port <= 0 || mkdtemp(tmpl) == NULL || (ui->dir = strdup(tmpl)) == NULL ||
      write_config(ui->dir, grpc, ui_ip, port, ns) != 0) {
    fprintf(stderr, "%s: warning: running without the Web UI: cannot prepare its configuration: %s\n", who,
            port <= 0 ? "no free port" : strerror(errno));
    goto fail;
  }
  char *argv[] = {server, "-r", ui->dir, "-e", "development", "start", NULL};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "%s: warning: running without the Web UI: fork: %s\n", who, strerror(errno));
    goto fail;
  }
  if (pid == 0) { /* only async-signal-safe calls until exec */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      if (!o->verbose) {
        dup2(nul, 1);
        dup2(nul, 2);
      } else {
        dup2(2, 1);
      }
    }
    execv(server, argv);
    _exit(127);
  }
  ui->pid = pid;
  snprintf(ui->url, sizeof ui->url, "http://%s:%d", ui_ip, port);
  for (int waited = 0; waited < 20000; waited += 100) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      ui->pid = 0;
      fprintf(stderr, "%s: warning: running without the Web UI: %s exited (%s %d) before serving %s%s\n", who,
              server, WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
              ui->url, o->verbose ? "" : " (--log-level debug shows its log)");
      goto fail;
    }
    if (pid_listens(pid, port)) { /* its own listener, not one that took the port first */
      free(server);
      return ui;
    }
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "%s: warning: the Web UI did not open %s within 20 s; it is left running\n", who, ui->url);
  free(server);
  return ui;
fail:
  free(server);
  dbx_cli_ui_stop(ui);
  return NULL;
}

const char *dbx_cli_ui_url(const dbx_cli_ui *ui) { return ui ? ui->url : NULL; }

void dbx_cli_ui_stop(dbx_cli_ui *ui) {
  if (ui == NULL) return;
  if (ui->pid > 0) {
    kill(ui->pid, SIGTERM);
    reap(ui->pid, 5000);
  }
  if (ui->dir) dbx_fs_remove_tree(ui->dir);
  free(ui->dir);
  free(ui);
}
