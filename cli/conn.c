/* Connection flags and environment (see conn.h). */
#include "cli/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"

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

int dbx_cli_conn_flag(dbx_cli_conn *c, int argc, char **argv, int *i) {
  static const struct { const char *flag; size_t off; } flags[] = {
      {"--address", offsetof(dbx_cli_conn, address)},   {"--namespace", offsetof(dbx_cli_conn, namespace_)},
      {"--api-key", offsetof(dbx_cli_conn, api_key)},   {"--tls-ca", offsetof(dbx_cli_conn, tls_ca)},
      {"--tls-cert", offsetof(dbx_cli_conn, tls_cert)}, {"--tls-key", offsetof(dbx_cli_conn, tls_key)},
  };
  const char *a = argv[*i];
  if (strcmp(a, "--output") == 0 || strcmp(a, "-o") == 0) {
    if (*i + 1 >= argc) {
      fprintf(stderr, "durabox: %s needs a value (text or json)\n", a);
      return -1;
    }
    const char *v = argv[++*i];
    if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0) {
      fprintf(stderr, "durabox: --output %s: use text or json\n", v);
      return -1;
    }
    c->json = strcmp(v, "json") == 0;
    return 1;
  }
  for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
    if (strcmp(a, flags[k].flag) != 0 && !(strcmp(flags[k].flag, "--namespace") == 0 && strcmp(a, "-n") == 0))
      continue;
    if (*i + 1 >= argc) {
      fprintf(stderr, "durabox: %s needs a value\n", a);
      return -1;
    }
    *(const char **)((char *)c + flags[k].off) = argv[++*i];
    return 1;
  }
  return 0;
}

char *dbx_cli_read_file(const char *path, size_t *len_out) {
  char *buf = NULL;
  if (strcmp(path, "-") == 0)
    dbx_fs_read_fd(STDIN_FILENO, &buf, len_out);
  else
    dbx_fs_read_all(path, &buf, len_out);
  return buf; /* NULL with errno set by base/fs */
}

int dbx_cli_conn_load(dbx_cli_conn *c) {
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

void dbx_cli_conn_client_opts(const dbx_cli_conn *c, dbx_client_opts *o) {
  memset(o, 0, sizeof *o);
  o->address = c->address;
  o->namespace_ = c->namespace_;
  o->api_key = c->api_key;
  o->tls_ca_pem = c->ca_pem;
  o->tls_cert_pem = c->cert_pem;
  o->tls_key_pem = c->key_pem;
  o->tls = c->ca_pem || c->cert_pem;
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
}
