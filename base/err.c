/* Error names and messages, generated from DBX_ERR_MAP so they never drift. */
#include "base/err.h"

const char *dbx_strerror(dbx_err e) {
  switch (e) {
#define XX(name, msg)                                                          \
  case name:                                                                   \
    return msg;
    DBX_ERR_MAP(XX)
#undef XX
  default:
    return "unknown error";
  }
}

const char *dbx_err_name(dbx_err e) {
  switch (e) {
#define XX(name, msg)                                                          \
  case name:                                                                   \
    return #name;
    DBX_ERR_MAP(XX)
#undef XX
  default:
    return "DBX_E?";
  }
}
