/* base/fs: the file and directory helpers every room needs once: read a whole
 * file, make a directory path, remove a tree.
 *
 * Errors: dbx_err codes, and errno is left as the failing system call set it
 * (callers that print "cannot read X: <strerror>" keep doing so).
 * Thread safety: any thread; two calls on the same path race as the
 * underlying system calls do. */
#ifndef DBX_BASE_FS_H
#define DBX_BASE_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "base/err.h"

/* Read all of path. *out: malloc'd (dbx_malloc family; free with free()),
 * NUL-terminated, so text files can be used as C strings; *len_out (may be
 * NULL) is the length without that NUL. On failure *out is NULL.
 * Returns DBX_OK; DBX_ENOTFOUND (ENOENT); DBX_EINVAL (path NULL/empty, or a
 * directory: errno EISDIR); DBX_ENOMEM; DBX_EIO (any other open/read
 * failure). */
dbx_err dbx_fs_read_all(const char *path, char **out, size_t *len_out);

/* The same for an open descriptor read to its end (stdin for "-"). fd is
 * borrowed: not closed. Returns DBX_OK, DBX_EINVAL (a directory), DBX_ENOMEM,
 * DBX_EIO. */
dbx_err dbx_fs_read_fd(int fd, char **out, size_t *len_out);

/* mkdir -p: create path and each missing parent with mode (0700 for private
 * state). An existing directory is success. Returns DBX_OK, DBX_EINVAL (NULL
 * or empty path), DBX_ENOMEM, DBX_EIO (a component could not be made or is
 * not a directory; errno says why). */
dbx_err dbx_fs_mkdirs(const char *path, mode_t mode);

/* rm -rf: remove path and, if it is a directory, everything under it.
 * Symbolic links are removed, never followed, also when an entry is swapped
 * for a link during the walk (each entry is reached by descriptor from its
 * parent). No PATH_MAX bound; depth is bounded by the open-file limit (one
 * descriptor per level). A missing path is success.
 * Keeps going past an entry it cannot remove and then returns DBX_EIO (errno
 * of the first failure). Returns DBX_OK, DBX_EINVAL (NULL/empty), DBX_EIO. */
dbx_err dbx_fs_remove_tree(const char *path);

#endif
