/* The durabox command's groups. Each returns the process exit status. */
#ifndef DBX_CLI_CLI_H
#define DBX_CLI_CLI_H

const char *dbx_cli_version(void);
/* durabox server start-dev [flags]: the embedded workflow service (Temporal CLI's flags). */
int dbx_cli_server(int argc, char **argv);
/* durabox workflow start|execute|show|describe|list|result|signal|cancel|terminate. */
int dbx_cli_workflow(int argc, char **argv);
/* durabox dev: embedded service + worker in one process. */
int dbx_cli_dev(int argc, char **argv);
/* durabox run FILE: start a workflow from FILE and follow it to its result. */
int dbx_cli_run(int argc, char **argv);

#endif
