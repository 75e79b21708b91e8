/* durabox server start-dev: the embedded workflow service in the foreground.
 *
 * Accepts the flags of Temporal's CLI dev server, so SDK test environments
 * (e.g. @temporalio/testing's createLocal with an existing-path executable)
 * can start it in place of Temporal's: --ip, --port, --namespace (repeatable),
 * --db-filename (an LMDB directory here), --headless, --log-format,
 * --log-level, --dynamic-config-value K=V, --search-attribute Name=Type, --ui-port,
 * --ui-ip, --http-port, --metrics-port. Flags may be written --flag value or
 * --flag=value. Unless --headless, Temporal's Web UI is started beside it on
 * --ui-port (default: the gRPC port + 1000), as Temporal's dev server does
 * (cli/ui.h). Stops on SIGINT/SIGTERM after answering parked polls. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/flags.h"
#include "cli/ui.h"
#include "rpc/rpc.h"
#include "service/service.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: durabox server start-dev [flags]\n"
          "  --ip ADDR                     bind address (default 127.0.0.1)\n"
          "  --port, -p N                  gRPC port (default 7233; 0 = any free port)\n"
          "  --namespace, -n NAME          register a namespace (repeatable; 'default' always exists)\n"
          "  --db-filename PATH            keep state in this LMDB directory (default: temporary)\n"
          "  --log-level LEVEL             debug|info|warn|error (default info)\n"
          "  --log-format FORMAT           pretty|json\n"
          "  --dynamic-config-value K=V    limit.historyCount.error=N, limit.blobSize.error=N and friends; other keys are logged\n"
          "  --api-key KEY                 require 'authorization: Bearer KEY'\n"
          "  --tls-cert FILE --tls-key FILE serve TLS\n"
          "  --no-sync                     do not sync commits (benchmarks only: loses data on a crash)\n"
          "  --search-attribute NAME=TYPE  a custom search attribute (Text, Keyword, Int, Double, Bool,\n"
          "                                Datetime, KeywordList) in every namespace\n"
          "  --ui-port N                   Temporal's Web UI port (default: the gRPC port + 1000)\n"
          "  --ui-ip ADDR                  the Web UI's bind address (default: --ip)\n"
          "  --headless                    do not start the Web UI\n"
          "  --http-port, --metrics-port: accepted, unused\n");
}

int dbx_cli_server(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "start-dev") != 0) {
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
      usage(stdout);
      return 0;
    }
    if (argc >= 2)
      fprintf(stderr, "durabox server: unknown command '%s' (expected 'start-dev')\n", argv[1]);
    else
      fprintf(stderr, "durabox server: expected 'start-dev'\n");
    usage(stderr);
    return 2;
  }
  dbx_service_opts o;
  dbx_service_opts_init(&o);
  o.port = 7233;
  const char **namespaces = calloc((size_t)argc, sizeof *namespaces);
  const char **search_attrs = calloc((size_t)argc, sizeof *search_attrs);
  size_t n_ns = 0, n_sa = 0;
  const char *tls_cert = NULL, *tls_key = NULL, *ui_ip = NULL;
  int rc = 2, headless = 0, ui_port = 0, verbose = 0;
  char *cert_pem = NULL, *key_pem = NULL;
  if (namespaces == NULL || search_attrs == NULL) {
    free(namespaces);
    free(search_attrs);
    return 1;
  }
  for (int i = 2; i < argc; i++) {
    char *arg = argv[i];
    char *val = NULL;
    char name[64];
    if (strncmp(arg, "--", 2) == 0 && strchr(arg, '=')) {
      size_t len = (size_t)(strchr(arg, '=') - arg);
      if (len >= sizeof name) len = sizeof name - 1;
      memcpy(name, arg, len);
      name[len] = '\0';
      val = strchr(arg, '=') + 1;
      arg = name;
    }
#define NEED_VALUE()                                                                                         \
  do {                                                                                                       \
    if (val == NULL) {                                                                                       \
      if (i + 1 >= argc) {                                                                                   \
        fprintf(stderr, "durabox server start-dev: %s needs a value\n", arg);                               \
        goto out;                                                                                            \
      }                                                                                                      \
      val = argv[++i];                                                                                       \
    }                                                                                                        \
  } while (0)
    if (strcmp(arg, "--headless") == 0) {
      headless = 1;
    } else if (strcmp(arg, "--no-sync") == 0) {
      o.no_sync = 1;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      rc = 0;
      goto out;
    } else if (strcmp(arg, "--ip") == 0) {
      NEED_VALUE();
      o.ip = val;
    } else if (strcmp(arg, "--port") == 0 || strcmp(arg, "-p") == 0) {
      NEED_VALUE();
      double p = 0;
      if (dbx_cli_flag_number("durabox server start-dev", "--port", val, 1, 0, 65535, &p) != 0) goto out;
      o.port = (int)p;
    } else if (strcmp(arg, "--namespace") == 0 || strcmp(arg, "-n") == 0) {
      NEED_VALUE();
      namespaces[n_ns++] = val;
    } else if (strcmp(arg, "--db-filename") == 0 || strcmp(arg, "-f") == 0) {
      NEED_VALUE();
      if (dbx_cli_nonempty("durabox server start-dev", "--db-filename", val) != 0) goto out;
      o.db_path = val;
    } else if (strcmp(arg, "--log-level") == 0) {
      NEED_VALUE();
      dbx_log_level l;
      if (dbx_log_level_parse(val, &l) != 0) {
        fprintf(stderr, "durabox server start-dev: --log-level %s: use debug, info, warn or error\n", val);
        goto out;
      }
      dbx_log_set_level(l);
      verbose = l == DBX_LOG_DEBUG;
    } else if (strcmp(arg, "--log-format") == 0) {
      NEED_VALUE();
      dbx_log_set_json(strcmp(val, "json") == 0);
    } else if (strcmp(arg, "--dynamic-config-value") == 0) {
      NEED_VALUE();
      char *eq = strchr(val, '=');
      if (eq == NULL) {
        fprintf(stderr, "durabox server start-dev: --dynamic-config-value %s: expected KEY=VALUE\n", val);
        goto out;
      }
      *eq = '\0';
      int known = dbx_service_opts_dynamic_config(&o, val, eq + 1);
      if (known < 0) {
        fprintf(stderr, "durabox server start-dev: --dynamic-config-value %s=%s: value must be a non-negative integer\n",
                val, eq + 1);
        goto out;
      }
      if (known == 0) DBX_INFO("server", "dynamic config key %s is not used by durabox; ignored", val);
      *eq = '=';
    } else if (strcmp(arg, "--api-key") == 0) {
      NEED_VALUE();
      o.api_key = val;
    } else if (strcmp(arg, "--tls-cert") == 0) {
      NEED_VALUE();
      tls_cert = val;
    } else if (strcmp(arg, "--tls-key") == 0) {
      NEED_VALUE();
      tls_key = val;
    } else if (strcmp(arg, "--search-attribute") == 0) {
      NEED_VALUE();
      search_attrs[n_sa++] = val;
    } else if (strcmp(arg, "--ui-port") == 0) {
      NEED_VALUE();
      double p = 0;
      if (dbx_cli_flag_number("durabox server start-dev", "--ui-port", val, 1, 0, 65535, &p) != 0) goto out;
      ui_port = (int)p;
    } else if (strcmp(arg, "--ui-ip") == 0) {
      NEED_VALUE();
      ui_ip = val;
    } else if (strcmp(arg, "--http-port") == 0 || strcmp(arg, "--metrics-port") == 0 ||
               strcmp(arg, "--ui-public-path") == 0 || strcmp(arg, "--sqlite-pragma") == 0) {
      NEED_VALUE();
      DBX_DEBUG("server", "flag %s %s accepted and not used", arg, val);
    } else {
      fprintf(stderr, "durabox server start-dev: unknown flag '%s'\n", argv[i]);
      usage(stderr);
      goto out;
    }
#undef NEED_VALUE
  }
  if ((tls_cert == NULL) != (tls_key == NULL)) {
    fprintf(stderr, "durabox server start-dev: --tls-cert and --tls-key go together\n");
    goto out;
  }
  if (tls_cert) {
    cert_pem = dbx_cli_read_file(tls_cert, NULL);
    key_pem = dbx_cli_read_file(tls_key, NULL);
    if (cert_pem == NULL || key_pem == NULL) {
      fprintf(stderr, "durabox server start-dev: cannot read %s: %s\n", cert_pem ? tls_key : tls_cert, strerror(errno));
      rc = 1;
      goto out;
    }
    o.tls_cert_pem = cert_pem;
    o.tls_key_pem = key_pem;
  }
  o.namespaces = namespaces;
  o.n_namespaces = n_ns;
  o.search_attributes = search_attrs;
  o.n_search_attributes = n_sa;

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  dbx_service *svc = NULL;
  char *err = NULL;
  dbx_err e = dbx_service_start(&o, &svc, &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox server start-dev: %s\n", err ? err : dbx_strerror(e));
    free(err);
    rc = 1;
    goto out;
  }
  DBX_INFO("server", "durabox %s serving Temporal's WorkflowService on %s:%d (store: %s)", dbx_cli_version(),
           o.ip ? o.ip : "127.0.0.1", dbx_service_port(svc), o.db_path ? o.db_path : "temporary");
  dbx_cli_ui *ui = NULL;
  if (!headless && (o.api_key || tls_cert)) {
    fprintf(stderr, "durabox server start-dev: warning: the Web UI is not started with %s (it would need the "
                    "credentials); --headless says nothing\n", o.api_key ? "--api-key" : "TLS");
  } else if (!headless) {
    dbx_cli_ui_opts uo = {.grpc_ip = o.ip, .grpc_port = dbx_service_port(svc), .ui_ip = ui_ip, .ui_port = ui_port,
                          .namespace_ = NULL, .who = "durabox server start-dev",
                          .verbose = verbose};
    ui = dbx_cli_ui_start(&uo);
    if (ui) DBX_INFO("server", "Temporal's Web UI on %s", dbx_cli_ui_url(ui));
  }
  while (!stop_requested) pause();
  DBX_INFO("server", "stopping");
  dbx_cli_ui_stop(ui);
  dbx_service_stop(svc);
  rc = 0;
out:
  free(namespaces);
  free(search_attrs);
  free(cert_pem);
  free(key_pem);
  return rc;
}
