/* durabox error codes: one enum for every room, one message function.
 *
 * Foreign error spaces (LMDB codes, gRPC status, CURLcode) are translated at
 * the boundary of the room that owns them; detail of the last failure stays
 * on the handle that failed (dbx_store_errmsg, dbx_rpc_...), like sqlite3_errmsg.
 * Thread safety: everything here is pure and safe from any thread. */
#ifndef DBX_BASE_ERR_H
#define DBX_BASE_ERR_H

#define DBX_ERR_MAP(XX)                                                        \
  XX(DBX_OK, "success")                                                        \
  XX(DBX_ENOMEM, "out of memory")                                              \
  XX(DBX_EINVAL, "invalid argument")                                           \
  XX(DBX_ENOTFOUND, "not found")                                               \
  XX(DBX_EEXIST, "already exists")                                             \
  XX(DBX_ETIMEDOUT, "deadline exceeded")                                       \
  XX(DBX_ECANCELED, "canceled")                                                \
  XX(DBX_ESTORE, "storage error")                                              \
  XX(DBX_ESTOREFULL, "storage full")                                           \
  XX(DBX_ERPC, "rpc error")                                                    \
  XX(DBX_EUNAVAILABLE, "service unavailable")                                  \
  XX(DBX_EIO, "i/o error")                                                     \
  XX(DBX_ESTATE, "invalid state")                                              \
  XX(DBX_EUNSUPPORTED, "not supported")

typedef enum {
#define XX(name, msg) name,
  DBX_ERR_MAP(XX)
#undef XX
      DBX_ERR_COUNT_
} dbx_err; /* DBX_OK == 0 */

/* Static, human-readable text for e; never NULL (unknown codes say so). */
const char *dbx_strerror(dbx_err e);

/* The enum's own name ("DBX_ENOTFOUND"), for logs and tests; never NULL. */
const char *dbx_err_name(dbx_err e);

#endif
