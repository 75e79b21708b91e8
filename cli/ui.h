/* Temporal's Web UI beside the embedded service, as Temporal's CLI dev server
 * runs it: `durabox server start-dev` and `durabox dev` start Temporal's UI
 * server (github.com/temporalio/ui-server, cmd/server, v2.42.1: the version
 * Temporal's CLI v1.5.1 embeds) as a child process pointed at the service's
 * gRPC address, unless --headless.
 *
 * The UI server binary is looked up in order: $DURABOX_UI_SERVER; a
 * `temporal-ui-server` on PATH; `.cache/ui-server/server` of the checkout
 * the durabox binary was built in (build/cli/durabox -> ../../.cache), where
 * scripts/setup.sh puts it (tests/interop/ui-server.sh). Where none is
 * found, or it does not start, a warning says how to get it and the service
 * runs without it: the UI is never a reason for the service not to start.
 *
 * One controlling thread; not thread-safe. */
#ifndef DBX_CLI_UI_H
#define DBX_CLI_UI_H

typedef struct dbx_cli_ui dbx_cli_ui;

typedef struct {
  const char *grpc_ip;    /* the service's address (NULL = 127.0.0.1) */
  int grpc_port;          /* the port it listens on (bound, not 0) */
  const char *ui_ip;      /* NULL = grpc_ip */
  int ui_port;            /* 0 = grpc_port + 1000 as Temporal's CLI does (a free port when that is over 65535) */
  const char *namespace_; /* the UI's default namespace (NULL = "default") */
  const char *who;        /* the command, for messages ("durabox dev") */
  int verbose;            /* 1: the UI server's own log goes to stderr, else to /dev/null */
} dbx_cli_ui_opts;

/* Start the UI server and wait (up to 20 s) until it accepts connections on
 * its port. Returns the running UI (stop with dbx_cli_ui_stop), or NULL when
 * its port is in use by another process, it is not installed or it did not
 * start, after printing a warning to stderr naming the problem. The child
 * gets SIGTERM if this process dies. Its generated configuration is a
 * directory /tmp/durabox-ui-PID-XXXXXX; each start removes those of
 * processes that are gone (killed before they could stop their UI). */
dbx_cli_ui *dbx_cli_ui_start(const dbx_cli_ui_opts *o);

/* The UI's URL ("http://127.0.0.1:8233"), owned by ui; NULL for a NULL ui. */
const char *dbx_cli_ui_url(const dbx_cli_ui *ui);

/* Stop the UI server (SIGTERM, SIGKILL after 5 s), remove its generated
 * configuration and free ui. Accepts NULL. */
void dbx_cli_ui_stop(dbx_cli_ui *ui);

#endif
