/* Connection flags and environment (see conn.h). */
#include "cli/conn.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/codec.h"
#include "base/fs.h"
#include "base/util.h"
#include "cli/cli.h"
#include "cli/flags.h"

void dbx_cli_conn_init(dbx_cli_conn *c) {
  memset(c, 0, sizeof *c);
  c->address = getenv("TEMPORAL_ADDRESS");
  if (c->address && !*c->address) c->address = NULL;
  c->namespace_ = getenv("TEMPORAL_NAMESPACE");
  if (c->namespace_ == NULL || !*c->namespace_) c->namespace_ = "default";
  c->api_key = getenv("TEMPORAL_API_KEY");
  if (c->api_key && !*c->api_key) c->api_key = NULL;
  c->tls_ca = getenv("TEMPORAL_TLS_CA");
  c->tls_cert = getenv("TEMPORAL_TLS_CERT");
  c->tls_key = getenv("TEMPORAL_TLS_KEY");
}

int dbx_cli_nonempty(const char *cmd, const char *flag, const char *value) {
  if (value == NULL || *value) return 0;
  fprintf(stderr, "%s: %s is empty\n", cmd, flag);
  return -1;
}

/* p[0, n) as text that cannot steer a terminal: a control byte other than
 * newline and tab (ESC, CR, BEL, ...) in caret notation ("^[", "^M"), DEL
 * as "^?", a C1 control (U+0080..U+009F: 0x9b is CSI to some terminals) as
 * U+FFFD (cli.h). */
char *dbx_cli_term_safe(const char *p, size_t n) {
  char *o = dbx_malloc(n * 3 + 1), *q = o;
  if (o == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      *q++ = '^';
      *q++ = c == 0x7f ? '?' : (char)(c + 64);
    } else if (c == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] >= 0x80 && (unsigned char)p[i + 1] <= 0x9f) {
      memcpy(q, "\xef\xbf\xbd", 3);
      q += 3;
      i++;
    } else {
      *q++ = (char)c;
    }
  }
  *q = '\0';
  return o;
}

char *dbx_cli_cell(const char *s) {
  char *t = dbx_cli_term_safe(s ? s : "", s ? strlen(s) : 0);
  for (char *p = t; p && *p; p++)
    if (*p == '\n' || *p == '\t') *p = ' ';
  return t;
}

int dbx_cli_sandbox_driver(const char *cmd, const char *driver) {
  const char *env = getenv("DURABOX_SANDBOX");
  const char *v = driver ? driver : env && *env ? env : NULL;
  if (v == NULL || strcmp(v, "local") == 0 || strcmp(v, "daytona") == 0) return 0;
  char *safe = dbx_cli_cell(v);
  fprintf(stderr, "%s: %s '%.60s': use local or daytona\n", cmd,
          driver ? "--sandbox" : "DURABOX_SANDBOX", safe ? safe : "?");
  free(safe);
  return -1;
}

/* 1 when dir holds a workflow service's store (its service.lock). */
static int is_service_store(const char *dir) {
  struct stat sb;
  char *lock = dbx_asprintf("%s/service.lock", dir);
  int yes = lock && stat(lock, &sb) == 0;
  free(lock);
  return yes;
}

int dbx_cli_worker_store_check(const char *cmd, const char *dir) {
  struct stat sb;
  if (!dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "%s: no worker store at %s\n", cmd, dir ? dir : "?");
    return -1;
  }
  char *q = dbx_asprintf("%s/data.mdb", dir);
  int service = is_service_store(dir), data = q && stat(q, &sb) == 0 && S_ISREG(sb.st_mode);
  free(q);
  if (service)
    fprintf(stderr, "%s: %s is a workflow service's store, not a worker store (the worker's is --worker-db, "
                    "default $DURABOX_HOME/worker)\n", cmd, dir);
  else if (!data)
    fprintf(stderr, "%s: no worker store at %s (no data.mdb: a worker has not written there)\n", cmd, dir);
  return service || !data ? -1 : 0;
}

/* p made absolute (the working directory before a relative p), as text:
 * malloc'd, NULL when out of memory or the working directory is unknown. */
static char *path_absolute(const char *p) {
  char cwd[PATH_MAX];
  return p[0] == '/' ? dbx_strdup(p) : getcwd(cwd, sizeof cwd) ? dbx_asprintf("%s/%s", cwd, p) : NULL;
}

/* p as an absolute path without empty and "." parts, with every symbolic
 * link among its parts followed, a link whose target does not exist yet
 * included, and ".." taken after the link before it, as the kernel does:
 * so a folder that does not exist yet is named as it will be made.
 * Malloc'd; NULL when out of memory, the working directory is unknown, or
 * links loop (over 40). */
static char *path_resolved(const char *p) {
  char *pend = path_absolute(p);
  size_t cap = pend ? strlen(pend) + PATH_MAX + 2 : 0, ol = 0;
  char *out = pend ? dbx_malloc(cap) : NULL;
  int links = 0;
  const char *r = pend;
  while (out && *r) {
    while (*r == '/') r++;
    const char *e = strchr(r, '/');
    size_t n = e ? (size_t)(e - r) : strlen(r);
    if (n == 0 || (n == 1 && r[0] == '.')) {
      r += n;
      continue;
    }
    if (n == 2 && r[0] == '.' && r[1] == '.') { /* the parent of what is resolved so far */
      while (ol > 0 && out[ol - 1] != '/') ol--;
      if (ol > 0) ol--;
      r += n;
      continue;
    }
    if (ol + n + 2 > cap) {
      char *no = dbx_realloc(out, cap = ol + n + PATH_MAX + 2);
      if (!no) break;
      out = no;
    }
    out[ol] = '/';
    memcpy(out + ol + 1, r, n);
    out[ol + 1 + n] = '\0';
    r += n;
    struct stat st;
    char target[PATH_MAX];
    ssize_t tl = -1;
    if (lstat(out, &st) == 0 && S_ISLNK(st.st_mode)) tl = readlink(out, target, sizeof target - 1);
    if (tl <= 0) {
      ol += n + 1;
      continue;
    }
    target[tl] = '\0';
    /* go on with the target, then the rest */
    char *np = ++links > 40 ? NULL : dbx_asprintf("%s/%s", target, r);
    free(pend);
    pend = np;
    r = np;
    if (!np) break;
    if (target[0] == '/') ol = 0; /* else the target goes on from the link's folder */
  }
  if (out && r && *r == '\0') { /* finished */
    if (ol == 0) out[ol++] = '/';
    out[ol] = '\0';
  } else {
    free(out);
    out = NULL;
  }
  free(pend);
  return out;
}

/* 1 when a and b name the same folder: by device and inode when both exist,
 * else by path_resolved (not made yet: "D" and "D/" are one folder, and so
 * are "L/st" and "R/st" when L is a link to R). */
static int same_folder(const char *a, const char *b) {
  struct stat sa, sb;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  char *ta = path_resolved(a), *tb = path_resolved(b);
  int same = ta && tb ? strcmp(ta, tb) == 0 : strcmp(a, b) == 0;
  free(ta);
  free(tb);
  return same;
}

int dbx_cli_store_folders_check(const char *cmd, const char *service_db, const char *worker_db) {
  char *def = worker_db == NULL ? dbx_cli_worker_db_default() : NULL;
  const char *w = worker_db ? worker_db : def;
  int rc = 0;
  if (service_db && w && same_folder(service_db, w)) {
    const char *env = getenv("DURABOX_WORKER_DB");
    const char *from = worker_db ? "" : env && *env ? "$DURABOX_WORKER_DB, " : "the default, ";
    fprintf(stderr, "%s: the service's store (%s) and the worker's store (%s%s) must be different folders\n",
            cmd, service_db, from, w);
    rc = -1;
  } else if (w && is_service_store(w)) {
    fprintf(stderr, "%s: %s is a workflow service's store, not a worker store (give the worker another "
                    "folder)\n", cmd, w);
    rc = -1;
  }
  free(def);
  return rc;
}

int dbx_cli_conn_flag(dbx_cli_conn *c, int argc, char **argv, int *i) {
  const char *output = NULL;
  const dbx_cli_flag t[] = {
      {"--address", NULL, DBX_CLI_FLAG_STR, &c->address, 0, 0},
      {"--namespace", "-n", DBX_CLI_FLAG_STR, &c->namespace_, 0, 0},
      {"--api-key", NULL, DBX_CLI_FLAG_STR, &c->api_key, 0, 0},
      {"--tls-ca", NULL, DBX_CLI_FLAG_STR, &c->tls_ca, 0, 0},
      {"--tls-cert", NULL, DBX_CLI_FLAG_STR, &c->tls_cert, 0, 0},
      {"--tls-key", NULL, DBX_CLI_FLAG_STR, &c->tls_key, 0, 0},
      {"--tls", NULL, DBX_CLI_FLAG_BOOL, &c->tls, 0, 0},
      {"--output", "-o", DBX_CLI_FLAG_STR, &output, 0, 0},
  };
  int r = dbx_cli_flag_take("durabox", t, sizeof t / sizeof t[0], argc, argv, i);
  if (r > 0 && dbx_cli_nonempty("durabox", "--namespace", c->namespace_) != 0) return -1;
  if (r <= 0 || output == NULL) return r;
  if (strcmp(output, "json") != 0 && strcmp(output, "text") != 0) {
    fprintf(stderr, "durabox: --output %s: use text or json\n", output);
    return -1;
  }
  c->json = strcmp(output, "json") == 0;
  return 1;
}

char *dbx_cli_read_file(const char *path, size_t *len_out) {
  char *buf = NULL;
  if (strcmp(path, "-") == 0)
    dbx_fs_read_fd(STDIN_FILENO, &buf, len_out);
  else
    dbx_fs_read_all(path, &buf, len_out);
  return buf; /* NULL with errno set by base/fs */
}

int dbx_cli_address_check(const char *a) {
  static const char *const schemes[] = {"dns:///", "dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:"};
  const char *why = NULL;
  for (const char *p = a; *p && !why; p++)
    if ((unsigned char)*p <= 0x20 || *p == 0x7f) why = "has a space or a control character in it";
  for (size_t i = 0; i < sizeof schemes / sizeof *schemes && !why; i++)
    if (strncmp(a, schemes[i], strlen(schemes[i])) == 0) {
      if (a[strlen(schemes[i])] != '\0') return 0; /* gRPC's own target syntax */
      why = "names nothing after its scheme";
    }
  const char *colon = why ? NULL : strrchr(a, ':');
  if (why) {
  } else if (!colon || colon == a) {
    why = "is not HOST:PORT";
  } else if (a[0] == '[' ? colon[-1] != ']' || colon - a < 3 : memchr(a, ':', (size_t)(colon - a)) != NULL) {
    why = "is not HOST:PORT (an IPv6 host goes in brackets: [::1]:7233)";
  } else {
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || errno || port < 1 || port > 65535)
      why = "has no port from 1 to 65535 after its last ':'";
  }
  if (!why) return 0;
  fprintf(stderr, "durabox: the service address '%s' %s\n", a, why);
  return -1;
}

int dbx_cli_conn_load(dbx_cli_conn *c) {
  if (c->address && dbx_cli_address_check(c->address) != 0) return -1;
  struct { const char *path; char **out; } files[] = {
      {c->tls_ca, &c->ca_pem}, {c->tls_cert, &c->cert_pem}, {c->tls_key, &c->key_pem}};
  for (size_t i = 0; i < 3; i++) {
    if (files[i].path == NULL || !*files[i].path) continue;
    *files[i].out = dbx_cli_read_file(files[i].path, NULL);
    if (*files[i].out == NULL) {
      fprintf(stderr, "durabox: cannot read %s: %s\n", files[i].path, strerror(errno));
      return -1;
    }
  }
  if ((c->cert_pem == NULL) != (c->key_pem == NULL)) {
    fprintf(stderr, "durabox: --tls-cert and --tls-key go together\n");
    return -1;
  }
  return 0;
}

/* Set by dbx_cli_conn_client_opts for dbx_cli_report's hint: an API key
 * goes to the service without TLS (one thread, see conn.h). */
static int g_key_in_plaintext;

void dbx_cli_conn_client_opts(const dbx_cli_conn *c, dbx_client_opts *o) {
  memset(o, 0, sizeof *o);
  o->address = c->address;
  o->namespace_ = c->namespace_;
  o->api_key = c->api_key;
  o->tls_ca_pem = c->ca_pem;
  o->tls_cert_pem = c->cert_pem;
  o->tls_key_pem = c->key_pem;
  o->tls = c->tls || c->ca_pem || c->cert_pem;
  g_key_in_plaintext = c->api_key != NULL && !o->tls;
}

void dbx_cli_conn_cleanup(dbx_cli_conn *c) {
  free(c->ca_pem);
  free(c->cert_pem);
  free(c->key_pem);
  c->ca_pem = c->cert_pem = c->key_pem = NULL;
}

/* The service could not be reached (gRPC UNAVAILABLE: nothing listens, or
 * it is going away): told by the code, not by gRPC's words. */
static int is_connect_failure(dbx_err e) { return e == DBX_EUNAVAILABLE; }

void dbx_cli_report(const char *what, const char *address, dbx_err e, const char *errmsg) {
  fprintf(stderr, "durabox: %s: %s\n", what, errmsg ? errmsg : dbx_strerror(e));
  if (address && is_connect_failure(e))
    fprintf(stderr, "durabox: is a workflow service running at %s? `durabox dev` starts one\n", address);
  if (address && is_connect_failure(e) && g_key_in_plaintext)
    fprintf(stderr,
            "durabox: an API key was given without TLS; a service that takes API keys usually serves TLS only: "
            "add --tls (system roots) or --tls-ca FILE\n");
}

void dbx_cli_utf8_puts(const char *s) {
  char *r = dbx_utf8_repair(s, strlen(s), NULL);
  puts(r ? r : "");
  free(r);
}

void dbx_cli_json_print(const cJSON *j, int pretty) {
  char *t = pretty ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
  if (t) dbx_cli_utf8_puts(t);
  free(t);
}

void dbx_cli_json_error(const char *type, const char *message) {
  cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
  if (e) {
    cJSON_AddStringToObject(e, "message", message ? message : "");
    cJSON_AddStringToObject(e, "type", type ? type : "");
    dbx_cli_json_print(o, 0);
  }
  cJSON_Delete(o);
}
