/* Connection settings shared by the commands that talk to a workflow service:
 * flags first, then the environment variables Temporal's tools use
 * (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_CA,
 * TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY: the TLS ones are file paths).
 * One thread; strings are borrowed from argv/environ except the PEM texts,
 * which are read into malloc'd buffers freed by dbx_cli_conn_cleanup. */
#ifndef DBX_CLI_CONN_H
#define DBX_CLI_CONN_H

#include "worker/client.h"

typedef struct {
  const char *address;     /* NULL when neither --address nor TEMPORAL_ADDRESS is set */
  const char *namespace_;  /* default "default" */
  const char *api_key;
  const char *tls_ca, *tls_cert, *tls_key; /* paths */
  char *ca_pem, *cert_pem, *key_pem;       /* loaded by dbx_cli_conn_load */
  int json;                                /* --output json */
} dbx_cli_conn;

/* Fill from the environment. */
void dbx_cli_conn_init(dbx_cli_conn *c);
/* If argv[*i] is a connection flag, consume it (and its value) and return 1;
 * 0 if it is not one; -1 (message printed) if its value is missing or bad. */
int dbx_cli_conn_flag(dbx_cli_conn *c, int argc, char **argv, int *i);
/* Read the TLS files. Returns 0, or -1 with a message printed naming the file. */
int dbx_cli_conn_load(dbx_cli_conn *c);
void dbx_cli_conn_client_opts(const dbx_cli_conn *c, dbx_client_opts *o);
void dbx_cli_conn_cleanup(dbx_cli_conn *c);
/* Read a whole file into a malloc'd NUL-terminated buffer ("-" = stdin), via
 * dbx_fs_read_all/dbx_fs_read_fd. NULL on error with errno set (ENOENT,
 * EISDIR for a directory, EIO, ENOMEM...). */
char *dbx_cli_read_file(const char *path, size_t *len_out);
/* Print one line to stderr for a failed call: "durabox: what: message"; when
 * the service could not be reached (e == DBX_EUNAVAILABLE, gRPC UNAVAILABLE)
 * and address is not NULL, a second line asks whether a workflow service
 * runs at address and names `durabox dev`. Strings borrowed. */
void dbx_cli_report(const char *what, const char *address, dbx_err e, const char *errmsg);

#endif
