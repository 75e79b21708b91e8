/* The durabox command's groups. Each returns the process exit status. */
#ifndef DBX_CLI_CLI_H
#define DBX_CLI_CLI_H

const char *dbx_cli_version(void);
/* durabox server start-dev [flags]: the embedded workflow service (Temporal CLI's flags). */
int dbx_cli_server(int argc, char **argv);

#endif
