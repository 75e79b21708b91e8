/* File helpers (see fs.h). read_fd grows one buffer by doubling and retries
 * EINTR; remove_tree walks depth-first by descriptor (openat/unlinkat), so
 * links are removed as entries, never followed into, and depth is not bounded
 * by PATH_MAX. */
#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/util.h"

dbx_err dbx_fs_read_fd(int fd, char **out, size_t *len_out) {
  if (out == NULL) return DBX_EINVAL;
  *out = NULL;
  if (len_out) *len_out = 0;
  struct stat sb;
  if (fstat(fd, &sb) != 0) return DBX_EIO;
  if (S_ISDIR(sb.st_mode)) {
    errno = EISDIR;
    return DBX_EINVAL;
  }
  /* A regular file's size is a good first guess (plus the NUL and one byte
   * so the read that sees EOF needs no growth); pipes start small. */
  size_t cap = S_ISREG(sb.st_mode) && sb.st_size > 0 && (uint64_t)sb.st_size < SIZE_MAX / 4
                   ? (size_t)sb.st_size + 2
                   : 4096;
  size_t n = 0;
  char *buf = dbx_malloc(cap);
  if (buf == NULL) {
    errno = ENOMEM;
    return DBX_ENOMEM;
  }
  for (;;) {
    if (n + 1 == cap) {
      char *nb = cap > SIZE_MAX / 2 ? NULL : dbx_realloc(buf, cap * 2);
      if (nb == NULL) {
        dbx_free(buf);
        errno = ENOMEM;
        return DBX_ENOMEM;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      dbx_free(buf);
      errno = e;
      return DBX_EIO;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  *out = buf;
  if (len_out) *len_out = n;
  return DBX_OK;
}

dbx_err dbx_fs_read_all(const char *path, char **out, size_t *len_out) {
  if (out) *out = NULL;
  if (len_out) *len_out = 0;
  if (path == NULL || path[0] == '\0' || out == NULL) {
    errno = EINVAL;
    return DBX_EINVAL;
  }
  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return errno == ENOENT ? DBX_ENOTFOUND : DBX_EIO;
  dbx_err rc = dbx_fs_read_fd(fd, out, len_out);
  int e = errno;
  close(fd);
  errno = e;
  return rc;
}

/* mkdir that accepts an existing directory. 0 or -1 (errno). */
static int mkdir_one(const char *p, mode_t mode) {
  if (mkdir(p, mode) == 0) return 0;
  int e = errno;
  struct stat sb;
  if (e == EEXIST && stat(p, &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) return 0;
    e = ENOTDIR;
  }
  errno = e;
  return -1;
}

dbx_err dbx_fs_mkdirs(const char *path, mode_t mode) {
  if (path == NULL || path[0] == '\0') {
    errno = EINVAL;
    return DBX_EINVAL;
  }
  char *p = dbx_strdup(path);
  if (p == NULL) {
    errno = ENOMEM;
    return DBX_ENOMEM;
  }
  dbx_err rc = DBX_OK;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/' || s[-1] == '/') continue;
    *s = '\0';
    int r = mkdir_one(p, mode);
    *s = '/';
    if (r != 0) {
      rc = DBX_EIO;
      goto out;
    }
  }
  if (mkdir_one(p, mode) != 0) rc = DBX_EIO;
out:
  {
    int e = errno;
    dbx_free(p);
    errno = e;
  }
  return rc;
}

/* Remove everything in the directory open at dfd (which it closes), walking
 * by descriptor: each entry is reached with openat/unlinkat relative to its
 * parent, so no path grows with the depth and a directory swapped for a link
 * during the walk is unlinked, never entered (O_NOFOLLOW). *first_errno: the
 * first failure's errno. Depth is bounded by the open-file limit (one
 * descriptor per level); past it the deeper part stays and EMFILE is kept. */
static void rm_children(int dfd, int *first_errno) {
  DIR *dir = fdopendir(dfd);
  if (dir == NULL) {
    if (*first_errno == 0) *first_errno = errno;
    close(dfd);
    return;
  }
  struct dirent *de;
  for (errno = 0; (de = readdir(dir)) != NULL; errno = 0) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) continue;
    if (unlinkat(dirfd(dir), n, 0) == 0 || errno == ENOENT) continue;
    if (errno == EISDIR || errno == EPERM) { /* a directory (Linux says EISDIR, POSIX EPERM) */
      int cfd = openat(dirfd(dir), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd >= 0) {
        rm_children(cfd, first_errno);
        if (unlinkat(dirfd(dir), n, AT_REMOVEDIR) == 0 || errno == ENOENT) continue;
      } else if ((errno == ENOTDIR || errno == ELOOP) && unlinkat(dirfd(dir), n, 0) == 0) {
        continue; /* it became a file or a link meanwhile */
      }
    }
    if (*first_errno == 0) *first_errno = errno;
  }
  if (errno != 0 && *first_errno == 0) *first_errno = errno;
  closedir(dir);
}

dbx_err dbx_fs_remove_tree(const char *path) {
  if (path == NULL || path[0] == '\0') {
    errno = EINVAL;
    return DBX_EINVAL;
  }
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? DBX_OK : DBX_EIO;
  int first_errno = 0;
  if (S_ISDIR(sb.st_mode)) {
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0) rm_children(dfd, &first_errno);
    else if (errno != ENOENT) first_errno = errno;
    if (rmdir(path) != 0 && errno != ENOENT && first_errno == 0) first_errno = errno;
  } else if (unlink(path) != 0 && errno != ENOENT) {
    first_errno = errno;
  }
  if (first_errno != 0) {
    errno = first_errno;
    return DBX_EIO;
  }
  return DBX_OK;
}
