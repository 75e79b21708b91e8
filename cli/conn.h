/* Connection settings shared by the commands that talk to a workflow service:
 * flags first, then the environment variables Temporal's tools use
 * (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_CA,
 * TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY: the TLS ones are file paths).
 * One thread; strings are borrowed from argv/environ except the PEM texts,
 * which are read into malloc'd buffers freed by dbx_cli_conn_cleanup. */
#ifndef DBX_CLI_CONN_H
#define DBX_CLI_CONN_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "worker/client.h"

typedef struct {
  const char *address;     /* NULL when neither --address nor TEMPORAL_ADDRESS is set */
  const char *namespace_;  /* default "default" */
  const char *api_key;
  const char *tls_ca, *tls_cert, *tls_key; /* paths */
  char *ca_pem, *cert_pem, *key_pem;       /* loaded by dbx_cli_conn_load */
  int tls;                                 /* --tls: TLS with the system roots */
  int json;                                /* --output json */
} dbx_cli_conn;

/* Fill from the environment. */
void dbx_cli_conn_init(dbx_cli_conn *c);
/* If argv[*i] is a connection flag (--address, --namespace/-n, --api-key,
 * --tls, --tls-ca, --tls-cert, --tls-key, --output/-o; `--flag value` or
 * `--flag=value`, cli/flags.h), consume it (and its value) and return 1;
 * 0 if it is not one; -1 (message printed) if its value is missing or bad. */
int dbx_cli_conn_flag(dbx_cli_conn *c, int argc, char **argv, int *i);
/* A service address is HOST:PORT (HOST a name, an IPv4 address or an IPv6
 * one in brackets; PORT 1 to 65535), or a gRPC target with its scheme
 * (dns:, ipv4:, ipv6:, unix:, unix-abstract:), passed on as it is. 0, or -1
 * with a message on stderr naming the address and what is wrong with it. */
int dbx_cli_address_check(const char *address);
/* Check the address (HOST:PORT, or a gRPC target with its scheme) and read
 * the TLS files. Returns 0, or -1 with a message printed naming the bad
 * address or the file. */
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
 * runs at address and names `durabox dev`, and when the last
 * dbx_cli_conn_client_opts sent an API key without TLS, a third says that
 * such a service usually serves TLS only and names --tls. Strings borrowed. */
void dbx_cli_report(const char *what, const char *address, dbx_err e, const char *errmsg);

/* Text from the network is printed as valid UTF-8 (base/codec.h
 * dbx_utf8_repair: each ill-formed part becomes U+FFFD).
 * dbx_cli_utf8_puts: s repaired, then a newline, to stdout. */
void dbx_cli_utf8_puts(const char *s);
/* Print j (pretty or on one line) and a newline to stdout, repaired to valid
 * UTF-8. j borrowed. */
void dbx_cli_json_print(const cJSON *j, int pretty);
/* Print {"error": {"message": message, "type": type}} to stdout (one line,
 * valid UTF-8): --output json's form of a failure. Strings borrowed. */
void dbx_cli_json_error(const char *type, const char *message);

/* After starting a run (cli/pickup.c): Temporal reports no error for a
 * workflow type that no worker serves; the run just waits. Read the run's
 * history until a worker has completed its first workflow task (or the run
 * closed): 1. A workflow task failed on a worker (a type it does not serve)
 * or none started within timeout_s seconds: one line on stderr saying so
 * with task_queue and type ("no worker has picked up the workflow task on
 * task queue Q after N s: is a worker for type T running?"), with json also
 * {"error": ...} on stdout, and 0. A task started but still at work at the
 * deadline, or a failed history read (left to the caller's wait), is 1.
 * The embedded service implements no DescribeTaskQueue, so history is the
 * one portable way to tell. Strings borrowed. */
int dbx_cli_await_pickup(dbx_client *c, const char *workflow_id, const char *run_id, const char *type,
                         const char *task_queue, double timeout_s, int json);

#endif
