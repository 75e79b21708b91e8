/* Helpers shared by every sandbox driver and their callers (driver.h):
 * the text of the typed errors, the name rule, and the destructors of the
 * values ops hand out. Stateless; thread-safe. */
#include "activities/driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/util.h"

const char *dbx_drv_strerror(dbx_drv_err e) {
  static const char *const text[] = {
#define XX(name, msg) msg,
      DBX_DRV_ERR_MAP(XX)
#undef XX
  };
  if ((int)e < 0 || (size_t)e >= sizeof text / sizeof text[0]) return "unknown driver error";
  return text[e];
}

int dbx_drv_name_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > 128 || s[0] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

void dbx_drv_exec_result_cleanup(dbx_drv_exec_result *r) {
  if (r == NULL) return;
  free(r->stdout_buf);
  free(r->stderr_buf);
  memset(r, 0, sizeof *r);
}

void dbx_drv_names_free(char **names, size_t n) {
  if (names == NULL) return;
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

void dbx_drv_labels_free(dbx_drv_label *labels, size_t n) {
  if (labels == NULL) return;
  for (size_t i = 0; i < n; i++) {
    free((char *)labels[i].key);
    free((char *)labels[i].value);
  }
  free(labels);
}

int dbx_drv_label_valid(const dbx_drv_label *l) {
  if (l == NULL || l->key == NULL || l->value == NULL) return 0;
  size_t n = strlen(l->key);
  if (n == 0 || n > 63) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = l->key[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '/' || c == '-'))
      return 0;
  }
  size_t m = strlen(l->value);
  if (m > 255) return 0;
  for (size_t i = 0; i < m; i++)
    if ((unsigned char)l->value[i] < 0x20) return 0;
  return 1;
}

int dbx_drv_host_path_check(const char *host_path, char *why, size_t why_n) {
  if (host_path != NULL && host_path[0] == '/') return 1;
  snprintf(why, why_n, "host path '%.200s' is not absolute", host_path ? host_path : "");
  return 0;
}

dbx_drv_err dbx_drv_host_read(const char *host_path, char **buf, size_t *n, char *why,
                              size_t why_n) {
  why[0] = '\0';
  if (!dbx_drv_host_path_check(host_path, why, why_n)) return DBX_DRV_INVALID;
  switch (dbx_fs_read_all(host_path, buf, n)) {
  case DBX_OK: return DBX_DRV_OK;
  case DBX_ENOMEM: return DBX_DRV_NOMEM;
  case DBX_ENOTFOUND:
    snprintf(why, why_n, "host file '%.200s': %s", host_path, strerror(errno));
    return DBX_DRV_NOT_FOUND;
  case DBX_EINVAL:
    snprintf(why, why_n, "host path '%.200s' is not a readable file", host_path);
    return DBX_DRV_INVALID;
  default:
    snprintf(why, why_n, "host file '%.200s': %s", host_path, strerror(errno));
    return DBX_DRV_FAILED;
  }
}

dbx_drv_err dbx_drv_host_write(const char *host_path, const void *data, size_t len, char *why,
                               size_t why_n) {
  why[0] = '\0';
  if (!dbx_drv_host_path_check(host_path, why, why_n)) return DBX_DRV_INVALID;
  char *tmp = dbx_asprintf("%s.dbx-tmp-%ld", host_path, (long)getpid());
  if (tmp == NULL) return DBX_DRV_NOMEM;
  FILE *f = fopen(tmp, "wbe");
  int ok = f != NULL && fwrite(data, 1, len, f) == len;
  if (f && fclose(f) != 0) ok = 0;
  if (ok && rename(tmp, host_path) != 0) ok = 0;
  if (!ok) {
    snprintf(why, why_n, "cannot write host file '%.200s': %s", host_path, strerror(errno));
    unlink(tmp);
  }
  free(tmp);
  return ok ? DBX_DRV_OK : DBX_DRV_FAILED;
}

dbx_err dbx_drv_git_cred_from_env(const char *user_var, const char *token_var,
                                  dbx_drv_git_cred *c) {
  const char *tok = getenv(token_var ? token_var : "GIT_TOKEN");
  const char *user = getenv(user_var ? user_var : "GIT_USERNAME");
  memset(c, 0, sizeof *c);
  if (tok == NULL || *tok == '\0') return DBX_ENOTFOUND;
  c->password = tok;
  c->username = user && *user ? user : "x-access-token";
  return DBX_OK;
}
