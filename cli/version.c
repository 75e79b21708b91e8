/* The version string, from the CMake project version. */
#include "cli/cli.h"

const char *dbx_cli_version(void) { return DBX_VERSION; }
