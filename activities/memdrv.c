/* The memory driver (memdrv.h): every op of driver.h over state in memory.
 *
 * State: sandboxes, snapshots and host sources, each with a file map (an
 * array of path -> bytes, paths normalised: no "." components, no trailing
 * or doubled '/'); a folder exists when some file lies under it. Commands
 * keep what the test's callback said and settle by the clock: a command is
 * RUNNING until start + duration (or its timeout, or a cancel). One mutex
 * (m->mu) guards everything; the exec callback runs with it released, after
 * the command is recorded (so a concurrent start adopts it). Messages are
 * per thread, like the local driver's. */
#define _GNU_SOURCE
#include "activities/memdrv.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/util.h"

#define DEFAULT_CAP ((size_t)1 << 20)
#define DEFAULT_READ_MAX ((size_t)64 << 20)

typedef struct {
  char *path;
  uint8_t *data;
  size_t len;
} mfile;

typedef struct {
  mfile *v;
  size_t n, cap;
} fmap;

typedef struct {
  char *id;
  int ready;           /* the callback has answered */
  int lost, killed, timed_out, finished;
  int not_started; /* dbx_memdrv_not_started_next: finished at once, never run */
  int exit_code, signal;
  uint8_t *out, *err;
  size_t out_len, err_len;
  size_t cap[2];
  int64_t start_ns, duration_ms, timeout_ms, end_ms;
} mcmd;

typedef struct {
  char *path; /* "" = the workspace root */
  char *url;
  char head[41];
  uint64_t tree;
} mrepo;

typedef struct {
  char *name;
  char *source;  /* "kind\nlocation\nref": adoption compares it */
  int stopped;
  dbx_drv_label *labels;
  size_t nlabels;
  fmap files;
  mcmd **cmds;
  size_t ncmds;
  mrepo *repos;
  size_t nrepos;
  char **env; /* the sandbox's own "NAME=value" entries, NULL-terminated, or NULL */
} msb;

typedef struct {
  char *name;
  fmap files;
} mnamed; /* a snapshot or a host source */

typedef struct {
  char *remote, *branch;
  char sha[41];
} mpush;

struct dbx_memdrv {
  pthread_mutex_t mu;
  dbx_driver drv;
  char *name;
  dbx_memdrv_exec_fn exec;
  void *exec_ud;
  msb **sbs;
  size_t nsbs;
  mnamed *snaps, *srcs;
  size_t nsnaps, nsrcs;
  mpush *pushes;
  size_t npushes;
  char fail_op[32]; /* "" = any */
  dbx_drv_err fail_err;
  int fail_count;
  int exec_count;
  int not_started_next;
};

/* ---- errors ---- */

static _Thread_local struct {
  const dbx_memdrv *owner;
  char msg[512];
} tl_err;

__attribute__((format(printf, 3, 4))) static dbx_drv_err fail(dbx_memdrv *m, dbx_drv_err e,
                                                              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_err.msg, sizeof tl_err.msg, fmt, ap);
  va_end(ap);
  tl_err.owner = m;
  return e;
}

static const char *md_errmsg(void *self) {
  return tl_err.owner == self ? tl_err.msg : "";
}

/* With m->mu held: the injected failure for op, or DBX_DRV_OK. */
static dbx_drv_err injected(dbx_memdrv *m, const char *op) {
  if (m->fail_count <= 0) return DBX_DRV_OK;
  if (m->fail_op[0] && strcmp(m->fail_op, op) != 0) return DBX_DRV_OK;
  m->fail_count--;
  return fail(m, m->fail_err, "injected %s (%s)", dbx_drv_strerror(m->fail_err), op);
}

/* ---- file maps ---- */

static void fmap_free(fmap *f) {
  for (size_t i = 0; i < f->n; i++) {
    free(f->v[i].path);
    free(f->v[i].data);
  }
  free(f->v);
  memset(f, 0, sizeof *f);
}

static mfile *fmap_get(fmap *f, const char *path) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->v[i].path, path) == 0) return &f->v[i];
  return NULL;
}

/* Copies path and data. Returns 0 or -1 (OOM). */
static int fmap_put(fmap *f, const char *path, const void *data, size_t len) {
  uint8_t *copy = dbx_malloc(len + 1);
  if (copy == NULL) return -1;
  if (len) memcpy(copy, data, len);
  copy[len] = 0;
  mfile *e = fmap_get(f, path);
  if (e) {
    free(e->data);
    e->data = copy;
    e->len = len;
    return 0;
  }
  if (f->n == f->cap) {
    size_t nc = f->cap ? f->cap * 2 : 16;
    mfile *nv = dbx_realloc(f->v, nc * sizeof *nv);
    if (nv == NULL) {
      free(copy);
      return -1;
    }
    f->v = nv;
    f->cap = nc;
  }
  f->v[f->n].path = dbx_strdup(path);
  if (f->v[f->n].path == NULL) {
    free(copy);
    return -1;
  }
  f->v[f->n].data = copy;
  f->v[f->n].len = len;
  f->n++;
  return 0;
}

/* 1 if path lies under folder dir ("" = the root). */
static int under(const char *path, const char *dir) {
  size_t n = strlen(dir);
  return n == 0 || (strncmp(path, dir, n) == 0 && path[n] == '/');
}

static int fmap_is_dir(const fmap *f, const char *dir) {
  if (dir[0] == '\0') return 1;
  for (size_t i = 0; i < f->n; i++)
    if (under(f->v[i].path, dir)) return 1;
  return 0;
}

/* Remove everything at or under dir. */
static void fmap_remove_tree(fmap *f, const char *dir) {
  size_t o = 0;
  for (size_t i = 0; i < f->n; i++) {
    if (strcmp(f->v[i].path, dir) == 0 || under(f->v[i].path, dir)) {
      free(f->v[i].path);
      free(f->v[i].data);
    } else {
      f->v[o++] = f->v[i];
    }
  }
  f->n = o;
}

/* dst = the files of src under from ("" = all), renamed under to. */
static int fmap_copy_into(fmap *dst, const fmap *src, const char *from, const char *to) {
  size_t fl = strlen(from);
  for (size_t i = 0; i < src->n; i++) {
    if (!under(src->v[i].path, from)) continue;
    const char *rel = src->v[i].path + (fl ? fl + 1 : 0);
    char *p = to[0] ? dbx_asprintf("%s/%s", to, rel) : dbx_strdup(rel);
    int bad = p == NULL || fmap_put(dst, p, src->v[i].data, src->v[i].len) != 0;
    free(p);
    if (bad) return -1;
  }
  return 0;
}

/* Normalise a workspace path into out (malloc'd). allow_root: "" and "."
 * mean the root. */
static dbx_drv_err norm_path(dbx_memdrv *m, const char *path, int allow_root, char **out) {
  *out = NULL;
  if (path == NULL || (path[0] == '\0' && !allow_root)) return fail(m, DBX_DRV_INVALID, "empty path");
  if (path[0] == '/')
    return fail(m, DBX_DRV_PATH_REFUSED, "path '%.200s' is absolute: paths are relative to the workspace", path);
  char *o = dbx_malloc(strlen(path) + 1);
  if (o == NULL) return DBX_DRV_NOMEM;
  size_t n = 0;
  for (const char *p = path; *p;) {
    const char *e = strchr(p, '/');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == 2 && p[0] == '.' && p[1] == '.') {
      free(o);
      return fail(m, DBX_DRV_PATH_REFUSED, "path '%.200s' contains '..': it would leave the workspace", path);
    }
    if (len > 0 && !(len == 1 && p[0] == '.')) {
      if (n) o[n++] = '/';
      memcpy(o + n, p, len);
      n += len;
    }
    p += len;
    if (*p == '/') p++;
  }
  o[n] = '\0';
  if (n == 0 && !allow_root) {
    free(o);
    return fail(m, DBX_DRV_INVALID, "path '%.200s' names no file", path);
  }
  *out = o;
  return DBX_DRV_OK;
}

/* ---- hashing (FNV-1a 64; the "sha" is 40 hex digits of three seeds) ---- */

#define fnv dbx_fnv1a64

static int cmp_path(const void *a, const void *b) {
  return strcmp((*(const mfile *const *)a)->path, (*(const mfile *const *)b)->path);
}

/* Hash of the files under dir, in path order. 0 on OOM: the fake's "sha"
 * would then be wrong without a word, so this array stays outside the
 * failure hook (plain malloc, base/alloc.h). */
static uint64_t tree_hash(const fmap *f, const char *dir) {
  const mfile **v = malloc((f->n + 1) * sizeof *v);
  size_t n = 0;
  uint64_t h = DBX_FNV1A64_OFFSET;
  if (v == NULL) return 0;
  for (size_t i = 0; i < f->n; i++)
    if (under(f->v[i].path, dir)) v[n++] = &f->v[i];
  qsort(v, n, sizeof *v, cmp_path);
  for (size_t i = 0; i < n; i++) {
    h = fnv(h, v[i]->path, strlen(v[i]->path) + 1);
    h = fnv(h, &v[i]->len, sizeof v[i]->len);
    h = fnv(h, v[i]->data, v[i]->len);
  }
  free(v);
  return h;
}

static void make_sha(char out[41], const char *parent, const char *message, uint64_t tree) {
  char t[48];
  int tl = snprintf(t, sizeof t, "%016llx", (unsigned long long)tree);
  uint64_t h[3];
  for (int i = 0; i < 3; i++) {
    uint64_t x = DBX_FNV1A64_OFFSET ^ (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL;
    x = fnv(x, parent, strlen(parent) + 1);
    x = fnv(x, message, strlen(message) + 1);
    h[i] = fnv(x, t, (size_t)tl);
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%016llx%016llx%016llx", (unsigned long long)h[0],
           (unsigned long long)h[1], (unsigned long long)h[2]);
  memcpy(out, buf, 40);
  out[40] = '\0';
}

/* ---- lookups (m->mu held) ---- */

static msb *sb_find(dbx_memdrv *m, const char *name) {
  for (size_t i = 0; i < m->nsbs; i++)
    if (strcmp(m->sbs[i]->name, name) == 0) return m->sbs[i];
  return NULL;
}

static mnamed *named_find(mnamed *v, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i].name, name) == 0) return &v[i];
  return NULL;
}

/* The sandbox name, checked; need_running: STATE when stopped. */
static dbx_drv_err sb_get(dbx_memdrv *m, const char *name, int need_running, msb **out) {
  *out = NULL;
  if (!dbx_drv_name_valid(name))
    return fail(m, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  msb *s = sb_find(m, name);
  if (s == NULL) return fail(m, DBX_DRV_NO_SANDBOX, "sandbox '%s' not found", name);
  if (need_running && s->stopped)
    return fail(m, DBX_DRV_STATE, "sandbox '%s' is stopped: start it first", name);
  *out = s;
  return DBX_DRV_OK;
}

static mrepo *repo_find(msb *s, const char *path) {
  for (size_t i = 0; i < s->nrepos; i++)
    if (strcmp(s->repos[i].path, path) == 0) return &s->repos[i];
  return NULL;
}

static void cmd_free(mcmd *c) {
  if (c == NULL) return;
  free(c->id);
  free(c->out);
  free(c->err);
  free(c);
}

static void sb_free(msb *s) {
  if (s == NULL) return;
  free(s->name);
  free(s->source);
  dbx_drv_labels_free(s->labels, s->nlabels);
  fmap_free(&s->files);
  for (size_t i = 0; i < s->ncmds; i++) cmd_free(s->cmds[i]);
  free(s->cmds);
  for (size_t i = 0; i < s->nrepos; i++) {
    free(s->repos[i].path);
    free(s->repos[i].url);
  }
  free(s->repos);
  for (size_t i = 0; s->env && s->env[i]; i++) free(s->env[i]);
  free(s->env);
  free(s);
}

/* Settle a command by the clock. */
static void cmd_settle(mcmd *c) {
  if (!c->ready || c->finished || c->lost) return;
  int64_t ran_ms = (dbx_mono_ns() - c->start_ns) / 1000000;
  if (c->killed) {
    c->exit_code = 137, c->signal = 9, c->finished = 1, c->end_ms = ran_ms;
  } else if (c->timeout_ms > 0 && c->duration_ms > c->timeout_ms && ran_ms >= c->timeout_ms) {
    c->timed_out = 1, c->exit_code = 143, c->signal = 15, c->finished = 1, c->end_ms = ran_ms;
  } else if (ran_ms >= c->duration_ms) {
    c->finished = 1, c->end_ms = ran_ms;
  }
}

static mcmd *cmd_find(msb *s, const char *id) {
  for (size_t i = 0; i < s->ncmds; i++)
    if (strcmp(s->cmds[i]->id, id) == 0) return s->cmds[i];
  return NULL;
}

static int any_running(msb *s) {
  for (size_t i = 0; i < s->ncmds; i++) {
    cmd_settle(s->cmds[i]);
    if (!s->cmds[i]->finished && !s->cmds[i]->lost) return 1;
  }
  return 0;
}

/* ---- lifecycle ---- */

static char *source_key(const dbx_drv_source *src) {
  return dbx_asprintf("%d\n%s\n%s", (int)src->kind,
                      src->kind == DBX_DRV_SOURCE_EMPTY || !src->location ? "" : src->location,
                      src->kind == DBX_DRV_SOURCE_GIT && src->ref ? src->ref : "");
}

static dbx_drv_err md_create(void *self, const char *name, const dbx_drv_create_opts *o,
                             int *adopted) {
  dbx_memdrv *m = self;
  dbx_drv_err rc = DBX_DRV_OK;
  msb *s = NULL;
  char *key = NULL;
  if (adopted) *adopted = 0;
  pthread_mutex_lock(&m->mu);
  if ((rc = injected(m, "create")) != DBX_DRV_OK) goto out;
  if (!dbx_drv_name_valid(name)) {
    rc = fail(m, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
    goto out;
  }
  const dbx_drv_source *src = &o->source;
  if (src->kind > DBX_DRV_SOURCE_IMAGE ||
      (src->kind != DBX_DRV_SOURCE_EMPTY && (src->location == NULL || !*src->location))) {
    rc = fail(m, DBX_DRV_INVALID, "sandbox '%s': source needs a location", name);
    goto out;
  }
  for (size_t i = 0; i < o->nlabels; i++)
    if (!dbx_drv_label_valid(&o->labels[i])) {
      rc = fail(m, DBX_DRV_INVALID, "sandbox '%s': label %zu is not a valid key and value", name, i);
      goto out;
    }
  if (o->cancelled && o->cancelled(o->cancelled_ud)) {
    rc = fail(m, DBX_DRV_CANCELED, "sandbox '%s': create cancelled", name);
    goto out;
  }
  key = source_key(src);
  if (key == NULL) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  msb *have = sb_find(m, name);
  if (have) {
    if (strcmp(have->source, key) == 0) {
      if (adopted) *adopted = 1;
    } else {
      rc = fail(m, DBX_DRV_CONFLICT, "sandbox '%s' exists with another source", name);
    }
    goto out;
  }
  const fmap *from = NULL;
  if (src->kind == DBX_DRV_SOURCE_DIR || src->kind == DBX_DRV_SOURCE_GIT) {
    mnamed *h = named_find(m->srcs, m->nsrcs, src->location);
    if (h == NULL && src->kind == DBX_DRV_SOURCE_GIT) { /* as the local driver's clone */
      rc = fail(m, DBX_DRV_REPO_NOT_FOUND, "git clone failed: repository '%s' does not exist",
                src->location);
      goto out;
    }
    if (h == NULL) {
      rc = fail(m, DBX_DRV_SOURCE_NOT_FOUND, "source '%s' not found", src->location);
      goto out;
    }
    from = &h->files;
  } else if (src->kind == DBX_DRV_SOURCE_SNAPSHOT) {
    mnamed *h = named_find(m->snaps, m->nsnaps, src->location);
    if (h == NULL) {
      rc = fail(m, DBX_DRV_SOURCE_NOT_FOUND, "snapshot '%s' not found", src->location);
      goto out;
    }
    from = &h->files;
  }
  s = dbx_calloc(1, sizeof *s);
  msb **nv = dbx_realloc(m->sbs, (m->nsbs + 1) * sizeof *nv);
  if (nv) m->sbs = nv;
  if (s == NULL || nv == NULL || (s->name = dbx_strdup(name)) == NULL) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  s->source = key;
  key = NULL;
  if (o->nlabels) {
    s->labels = dbx_calloc(o->nlabels, sizeof *s->labels);
    if (s->labels == NULL) {
      rc = DBX_DRV_NOMEM;
      goto out;
    }
    for (size_t i = 0; i < o->nlabels; i++, s->nlabels++) {
      s->labels[i].key = dbx_strdup(o->labels[i].key);
      s->labels[i].value = dbx_strdup(o->labels[i].value);
      if (!s->labels[i].key || !s->labels[i].value) {
        s->nlabels++;
        rc = DBX_DRV_NOMEM;
        goto out;
      }
    }
  }
  size_t nenv = 0;
  while (o->env && o->env[nenv]) nenv++;
  for (size_t i = 0; i < nenv; i++)
    if (o->env[i][0] == '=' || strchr(o->env[i], '=') == NULL) {
      rc = fail(m, DBX_DRV_INVALID, "environment entry '%.100s' is not NAME=value", o->env[i]);
      goto out;
    }
  if (nenv > 0) {
    if ((s->env = dbx_calloc(nenv + 1, sizeof *s->env)) == NULL) {
      rc = DBX_DRV_NOMEM;
      goto out;
    }
    for (size_t i = 0; i < nenv; i++)
      if ((s->env[i] = dbx_strdup(o->env[i])) == NULL) {
        rc = DBX_DRV_NOMEM;
        goto out;
      }
  }
  if (o->unenforced)
    *o->unenforced = (o->cpu ? DBX_DRV_UNENFORCED_CPU : 0) |
                     (o->memory_gib ? DBX_DRV_UNENFORCED_MEMORY : 0) |
                     (o->disk_gib ? DBX_DRV_UNENFORCED_DISK : 0) |
                     (o->auto_stop_minutes ? DBX_DRV_UNENFORCED_AUTO_STOP : 0) |
                     (o->auto_archive_minutes ? DBX_DRV_UNENFORCED_AUTO_ARCHIVE : 0) |
                     (o->auto_delete_minutes ? DBX_DRV_UNENFORCED_AUTO_DELETE : 0);
  if (from && fmap_copy_into(&s->files, from, "", "") != 0) {
    rc = DBX_DRV_NOMEM;
    goto out;
  }
  if (src->kind == DBX_DRV_SOURCE_GIT) {
    s->repos = dbx_calloc(1, sizeof *s->repos);
    if (s->repos == NULL || (s->repos[0].path = dbx_strdup("")) == NULL ||
        (s->repos[0].url = dbx_strdup(src->location)) == NULL) {
      if (s->repos) s->nrepos = 1;
      rc = DBX_DRV_NOMEM;
      goto out;
    }
    s->nrepos = 1;
    s->repos[0].tree = tree_hash(&s->files, "");
    make_sha(s->repos[0].head, "", src->location, s->repos[0].tree);
  }
  m->sbs[m->nsbs++] = s;
  s = NULL;
out:
  pthread_mutex_unlock(&m->mu);
  sb_free(s);
  free(key);
  return rc;
}

static char *md_workspace_path(void *self, const char *name) {
  (void)self;
  (void)name;
  return NULL; /* no host path */
}

static dbx_drv_err md_exists(void *self, const char *name, dbx_drv_state *state) {
  dbx_memdrv *m = self;
  msb *s;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "exists");
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  if (rc == DBX_DRV_OK && state) *state = s->stopped ? DBX_DRV_STOPPED : DBX_DRV_RUNNING;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static int has_label(const msb *s, const dbx_drv_label *l) {
  for (size_t i = 0; i < s->nlabels; i++)
    if (strcmp(s->labels[i].key, l->key) == 0 && strcmp(s->labels[i].value, l->value) == 0)
      return 1;
  return 0;
}

static dbx_drv_err md_list(void *self, const dbx_drv_label *match, size_t nmatch, char ***names,
                           size_t *n) {
  dbx_memdrv *m = self;
  *names = NULL;
  *n = 0;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "list");
  char **v = rc == DBX_DRV_OK ? dbx_calloc(m->nsbs + 1, sizeof *v) : NULL;
  size_t cnt = 0;
  if (rc == DBX_DRV_OK && v == NULL) rc = DBX_DRV_NOMEM;
  for (size_t i = 0; rc == DBX_DRV_OK && i < m->nsbs; i++) {
    int keep = 1;
    for (size_t j = 0; j < nmatch && keep; j++) keep = has_label(m->sbs[i], &match[j]);
    if (!keep) continue;
    if ((v[cnt] = dbx_strdup(m->sbs[i]->name)) == NULL)
      rc = DBX_DRV_NOMEM;
    else
      cnt++;
  }
  pthread_mutex_unlock(&m->mu);
  if (rc != DBX_DRV_OK) {
    dbx_drv_names_free(v, cnt);
    return rc;
  }
  *names = v;
  *n = cnt;
  return DBX_DRV_OK;
}

static dbx_drv_err md_labels(void *self, const char *name, dbx_drv_label **labels, size_t *n) {
  dbx_memdrv *m = self;
  msb *s;
  *labels = NULL;
  *n = 0;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "labels");
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  dbx_drv_label *v = NULL;
  size_t cnt = 0;
  if (rc == DBX_DRV_OK) {
    v = dbx_calloc(s->nlabels + 1, sizeof *v);
    if (v == NULL) rc = DBX_DRV_NOMEM;
    for (size_t i = 0; v && i < s->nlabels; i++, cnt++) {
      v[i].key = dbx_strdup(s->labels[i].key);
      v[i].value = dbx_strdup(s->labels[i].value);
      if (!v[i].key || !v[i].value) {
        cnt++;
        rc = DBX_DRV_NOMEM;
        break;
      }
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (rc != DBX_DRV_OK) {
    dbx_drv_labels_free(v, cnt);
    return rc;
  }
  *labels = v;
  *n = cnt;
  return DBX_DRV_OK;
}

static dbx_drv_err set_stopped(dbx_memdrv *m, const char *op, const char *name, int stopped) {
  msb *s;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, op);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  if (rc == DBX_DRV_OK) s->stopped = stopped;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static dbx_drv_err md_start(void *self, const char *name) {
  return set_stopped(self, "start", name, 0);
}
static dbx_drv_err md_stop(void *self, const char *name) {
  return set_stopped(self, "stop", name, 1);
}

static dbx_drv_err md_del(void *self, const char *name) {
  dbx_memdrv *m = self;
  msb *gone = NULL;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "del");
  if (rc == DBX_DRV_OK && !dbx_drv_name_valid(name))
    rc = fail(m, DBX_DRV_INVALID, "invalid sandbox id '%.140s'", name ? name : "(null)");
  for (size_t i = 0; rc == DBX_DRV_OK && i < m->nsbs; i++)
    if (strcmp(m->sbs[i]->name, name) == 0) {
      gone = m->sbs[i];
      m->sbs[i] = m->sbs[--m->nsbs];
      break;
    }
  pthread_mutex_unlock(&m->mu);
  sb_free(gone); /* its commands go with it */
  return rc;
}

/* ---- commands ---- */

static dbx_drv_err md_exec_start(void *self, const char *name, const char *cmd_id,
                                 const dbx_drv_exec_opts *o, int *adopted) {
  dbx_memdrv *m = self;
  msb *s;
  mcmd *c = NULL;
  char *cwd = NULL;
  size_t merged_own = 0;
  if (adopted) *adopted = 0;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "exec_start");
  if (rc == DBX_DRV_OK && (o == NULL || o->command == NULL))
    rc = fail(m, DBX_DRV_INVALID, "no command");
  if (rc == DBX_DRV_OK && !dbx_drv_name_valid(cmd_id))
    rc = fail(m, DBX_DRV_INVALID, "invalid command id '%.140s'", cmd_id ? cmd_id : "(null)");
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  if (rc == DBX_DRV_OK && cmd_find(s, cmd_id)) {
    if (adopted) *adopted = 1;
    pthread_mutex_unlock(&m->mu);
    return DBX_DRV_OK;
  }
  if (rc == DBX_DRV_OK) rc = norm_path(m, o->cwd ? o->cwd : "", 1, &cwd);
  if (rc == DBX_DRV_OK && !fmap_is_dir(&s->files, cwd))
    rc = fail(m, DBX_DRV_NOT_FOUND, "path '%.200s' not found", o->cwd);
  for (size_t i = 0; rc == DBX_DRV_OK && o->env && o->env[i]; i++)
    if (strchr(o->env[i], '=') == NULL || o->env[i][0] == '=')
      rc = fail(m, DBX_DRV_INVALID, "environment entry '%.100s' is not NAME=value", o->env[i]);
  /* the command sees the sandbox's env under its own (the command's wins) */
  const char **merged = NULL;
  if (rc == DBX_DRV_OK && s->env) {
    size_t ns = 0, nc = 0, k = 0;
    while (s->env[ns]) ns++;
    while (o->env && o->env[nc]) nc++;
    merged = dbx_calloc(ns + nc + 1, sizeof *merged);
    if (merged == NULL) rc = DBX_DRV_NOMEM;
    for (size_t i = 0; merged && i < ns; i++) {
      size_t kl = (size_t)(strchr(s->env[i], '=') - s->env[i]) + 1;
      int shadowed = 0;
      for (size_t j = 0; j < nc; j++)
        if (strncmp(o->env[j], s->env[i], kl) == 0) shadowed = 1;
      if (!shadowed && (merged[k] = dbx_strdup(s->env[i])) == NULL) rc = DBX_DRV_NOMEM;
      if (!shadowed) k++;
    }
    for (size_t j = 0; merged && j < nc; j++) merged[k++] = o->env[j]; /* borrowed */
    merged_own = k - nc;
  }
  if (rc == DBX_DRV_OK) {
    c = dbx_calloc(1, sizeof *c);
    mcmd **nv = dbx_realloc(s->cmds, (s->ncmds + 1) * sizeof *nv);
    if (nv) s->cmds = nv;
    if (c == NULL || nv == NULL || (c->id = dbx_strdup(cmd_id)) == NULL) {
      cmd_free(c);
      c = NULL;
      rc = DBX_DRV_NOMEM;
    } else {
      c->cap[0] = o->stdout_cap_bytes ? o->stdout_cap_bytes : DEFAULT_CAP;
      c->cap[1] = o->stderr_cap_bytes ? o->stderr_cap_bytes : DEFAULT_CAP;
      c->timeout_ms = o->timeout_ms;
      c->start_ns = dbx_mono_ns();
      s->cmds[s->ncmds++] = c;
      if (m->not_started_next > 0) { /* as a supervisor whose child died before exec */
        m->not_started_next--;
        c->not_started = 1;
        c->exit_code = 127;
        c->ready = 1;
      } else {
        m->exec_count++;
      }
    }
  }
  int never = rc == DBX_DRV_OK && c->not_started;
  pthread_mutex_unlock(&m->mu);
  free(cwd);
  if (never) {
    for (size_t i = 0; merged && i < merged_own; i++) free((char *)merged[i]);
    free(merged);
    return DBX_DRV_OK;
  }
  if (rc != DBX_DRV_OK) {
    for (size_t i = 0; merged && i < merged_own; i++) free((char *)merged[i]);
    free(merged);
    return rc;
  }
  dbx_drv_exec_opts eo = *o;
  if (merged) eo.env = merged;
  dbx_memdrv_exec_out out = {0};
  if (m->exec) m->exec(m->exec_ud, &m->drv, name, &eo, &out);
  for (size_t i = 0; merged && i < merged_own; i++) free((char *)merged[i]);
  free(merged);
  /* the sandbox may have been deleted meanwhile (and c with it) */
  pthread_mutex_lock(&m->mu);
  msb *again = sb_find(m, name);
  mcmd *c2 = again ? cmd_find(again, cmd_id) : NULL;
  if (c2 == c && c2 != NULL) {
    c->exit_code = out.exit_code;
    c->signal = out.exit_code > 128 ? out.exit_code - 128 : 0;
    c->out = out.stdout_buf, c->out_len = out.stdout_len;
    c->err = out.stderr_buf, c->err_len = out.stderr_len;
    c->duration_ms = out.duration_ms > 0 ? out.duration_ms : 0;
    c->start_ns = dbx_mono_ns();
    c->ready = 1;
    out.stdout_buf = out.stderr_buf = NULL;
  }
  pthread_mutex_unlock(&m->mu);
  free(out.stdout_buf);
  free(out.stderr_buf);
  return DBX_DRV_OK;
}

/* With m->mu held: the command, settled. */
static dbx_drv_err cmd_get(dbx_memdrv *m, const char *op, const char *name, const char *cmd_id,
                           msb **sb, mcmd **out) {
  msb *s;
  *out = NULL;
  dbx_drv_err rc = injected(m, op);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  if (rc != DBX_DRV_OK) return rc;
  mcmd *c = cmd_id ? cmd_find(s, cmd_id) : NULL;
  if (c == NULL)
    return fail(m, DBX_DRV_NOT_FOUND, "no command '%.140s' in sandbox '%s'", cmd_id ? cmd_id : "", name);
  cmd_settle(c);
  if (sb) *sb = s;
  *out = c;
  return DBX_DRV_OK;
}

static size_t kept(const mcmd *c, int i) {
  size_t len = i == 0 ? c->out_len : c->err_len;
  return len < c->cap[i] ? len : c->cap[i];
}

static dbx_drv_err md_exec_poll(void *self, const char *name, const char *cmd_id,
                                dbx_drv_cmd_status *st) {
  dbx_memdrv *m = self;
  mcmd *c;
  memset(st, 0, sizeof *st);
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = cmd_get(m, "exec_poll", name, cmd_id, NULL, &c);
  if (rc == DBX_DRV_OK) {
    st->state = c->lost       ? DBX_DRV_CMD_LOST
                : c->finished ? DBX_DRV_CMD_FINISHED
                              : DBX_DRV_CMD_RUNNING;
    if (c->finished) { /* output shows once the command is done */
      st->stdout_size = kept(c, 0);
      st->stderr_size = kept(c, 1);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static dbx_drv_err md_exec_attach(void *self, const char *name, const char *cmd_id, int stream,
                                  uint64_t offset, void *buf, size_t cap, size_t *n) {
  dbx_memdrv *m = self;
  mcmd *c;
  *n = 0;
  if (stream != 1 && stream != 2) return fail(m, DBX_DRV_INVALID, "stream must be 1 or 2");
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = cmd_get(m, "exec_attach", name, cmd_id, NULL, &c);
  if (rc == DBX_DRV_OK && c->finished) {
    size_t have = kept(c, stream - 1);
    const uint8_t *p = stream == 1 ? c->out : c->err;
    if (offset < have) {
      *n = have - (size_t)offset < cap ? have - (size_t)offset : cap;
      memcpy(buf, p + offset, *n);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
  uint8_t *b = dbx_malloc(n + 1);
  if (b == NULL) return NULL;
  if (n) memcpy(b, p, n);
  b[n] = 0;
  return b;
}

/* What a stream of len bytes keeps under cap (driver.h "Capture"): all of
 * it, or its head and its tail. *head_len: where the cut is. */
static uint8_t *head_and_tail(const uint8_t *p, size_t len, size_t cap, size_t *head_len) {
  if (len <= cap) {
    *head_len = len;
    return dup_bytes(p, len);
  }
  size_t tail = DBX_DRV_TAIL_BYTES(cap), head = cap - tail;
  uint8_t *b = dup_bytes(p, cap);
  if (b && tail) memcpy(b + head, p + len - tail, tail);
  *head_len = head;
  return b;
}

static dbx_drv_err md_exec_result(void *self, const char *name, const char *cmd_id,
                                  dbx_drv_exec_result *res) {
  dbx_memdrv *m = self;
  mcmd *c;
  memset(res, 0, sizeof *res);
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = cmd_get(m, "exec_result", name, cmd_id, NULL, &c);
  if (rc == DBX_DRV_OK && !c->finished)
    rc = fail(m, DBX_DRV_STATE, "command '%s' has not finished", cmd_id);
  if (rc == DBX_DRV_OK) {
    res->exit_code = c->exit_code;
    res->signal = c->signal;
    res->timed_out = c->timed_out;
    res->killed = c->killed;
    res->duration_ms = c->end_ms;
    if (c->not_started)
      snprintf(res->not_started, sizeof res->not_started, "cannot start /bin/sh: Broken pipe (memdrv)");
    res->stdout_len = kept(c, 0);
    res->stderr_len = kept(c, 1);
    res->stdout_total = c->out_len;
    res->stderr_total = c->err_len;
    res->stdout_truncated = c->out_len > res->stdout_len;
    res->stderr_truncated = c->err_len > res->stderr_len;
    res->stdout_buf = head_and_tail(c->out, c->out_len, c->cap[0], &res->stdout_head_len);
    res->stderr_buf = head_and_tail(c->err, c->err_len, c->cap[1], &res->stderr_head_len);
    if (!res->stdout_buf || !res->stderr_buf) rc = DBX_DRV_NOMEM;
  }
  pthread_mutex_unlock(&m->mu);
  if (rc != DBX_DRV_OK) dbx_drv_exec_result_cleanup(res);
  return rc;
}

static dbx_drv_err md_exec_cancel(void *self, const char *name, const char *cmd_id) {
  dbx_memdrv *m = self;
  mcmd *c;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = cmd_get(m, "exec_cancel", name, cmd_id, NULL, &c);
  if (rc == DBX_DRV_NOT_FOUND) rc = DBX_DRV_OK;
  else if (rc == DBX_DRV_OK && !c->finished && !c->lost) {
    c->killed = 1;
    c->ready = 1;
    cmd_settle(c);
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static dbx_drv_err md_exec_forget(void *self, const char *name, const char *cmd_id) {
  dbx_memdrv *m = self;
  mcmd *c;
  msb *s = NULL;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = cmd_get(m, "exec_forget", name, cmd_id, &s, &c);
  if (rc == DBX_DRV_NOT_FOUND) {
    rc = DBX_DRV_OK;
  } else if (rc == DBX_DRV_OK && !c->finished && !c->lost) {
    rc = fail(m, DBX_DRV_STATE, "command '%s' is still running", cmd_id);
  } else if (rc == DBX_DRV_OK) {
    for (size_t i = 0; i < s->ncmds; i++)
      if (s->cmds[i] == c) {
        s->cmds[i] = s->cmds[--s->ncmds];
        break;
      }
    cmd_free(c);
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

/* ---- files ---- */

static dbx_drv_err md_file_read(void *self, const char *name, const char *path,
                                size_t max_bytes, uint8_t **data, size_t *len) {
  dbx_memdrv *m = self;
  msb *s;
  char *p = NULL;
  *data = NULL;
  *len = 0;
  if (max_bytes == 0) max_bytes = DEFAULT_READ_MAX;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "file_read");
  if (rc == DBX_DRV_OK) rc = norm_path(m, path, 0, &p);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  if (rc == DBX_DRV_OK) {
    mfile *f = fmap_get(&s->files, p);
    if (f == NULL && fmap_is_dir(&s->files, p))
      rc = fail(m, DBX_DRV_INVALID, "path '%.200s' is not a regular file", path);
    else if (f == NULL)
      rc = fail(m, DBX_DRV_NOT_FOUND, "path '%.200s' not found", path);
    else if (f->len > max_bytes)
      rc = fail(m, DBX_DRV_INVALID, "file '%.200s' has %zu bytes, more than the limit %zu", path,
                f->len, max_bytes);
    else if ((*data = dup_bytes(f->data, f->len)) == NULL)
      rc = DBX_DRV_NOMEM;
    else
      *len = f->len;
  }
  pthread_mutex_unlock(&m->mu);
  free(p);
  return rc;
}

/* With m->mu held: write into a running sandbox's map. */
static dbx_drv_err put_file(dbx_memdrv *m, const char *name, const char *path, const void *data,
                            size_t len) {
  msb *s;
  char *p = NULL;
  dbx_drv_err rc = norm_path(m, path, 0, &p);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  if (rc == DBX_DRV_OK && fmap_is_dir(&s->files, p))
    rc = fail(m, DBX_DRV_INVALID, "path '%.200s' is a directory", path);
  /* a parent that is a file */
  for (char *q = p ? strchr(p, '/') : NULL; rc == DBX_DRV_OK && q; q = strchr(q + 1, '/')) {
    *q = '\0';
    if (fmap_get(&s->files, p))
      rc = fail(m, DBX_DRV_INVALID, "path '%.200s': a component is not a directory", path);
    *q = '/';
  }
  if (rc == DBX_DRV_OK && fmap_put(&s->files, p, data, len) != 0) rc = DBX_DRV_NOMEM;
  free(p);
  return rc;
}

static dbx_drv_err md_file_write(void *self, const char *name, const char *path,
                                 const void *data, size_t len) {
  dbx_memdrv *m = self;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "file_write");
  if (rc == DBX_DRV_OK) rc = put_file(m, name, path, data, len);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static dbx_drv_err md_upload(void *self, const char *name, const char *host_path,
                             const char *path) {
  dbx_memdrv *m = self;
  char why[512], *buf = NULL;
  size_t n = 0;
  dbx_drv_err rc = dbx_drv_host_read(host_path, &buf, &n, why, sizeof why);
  if (rc != DBX_DRV_OK) return why[0] ? fail(m, rc, "%s", why) : rc;
  pthread_mutex_lock(&m->mu);
  rc = injected(m, "upload");
  if (rc == DBX_DRV_OK) rc = put_file(m, name, path, buf, n);
  pthread_mutex_unlock(&m->mu);
  free(buf);
  return rc;
}

static dbx_drv_err md_download(void *self, const char *name, const char *path,
                               const char *host_path) {
  dbx_memdrv *m = self;
  char why[512] = ""; /* read below also when the file read failed */
  uint8_t *data = NULL;
  size_t len = 0;
  if (!dbx_drv_host_path_check(host_path, why, sizeof why)) return fail(m, DBX_DRV_INVALID, "%s", why);
  dbx_drv_err rc = md_file_read(self, name, path, (size_t)4 << 30, &data, &len);
  if (rc == DBX_DRV_OK) rc = dbx_drv_host_write(host_path, data, len, why, sizeof why);
  if (rc != DBX_DRV_OK && why[0]) rc = fail(m, rc, "%s", why);
  free(data);
  return rc;
}

/* ---- git ---- */

static dbx_drv_err md_git_clone(void *self, const char *name, const char *url, const char *path,
                                const char *ref) {
  dbx_memdrv *m = self;
  msb *s;
  char *p = NULL;
  (void)ref;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "git_clone");
  if (rc == DBX_DRV_OK && (url == NULL || *url == '\0'))
    rc = fail(m, DBX_DRV_INVALID, "git clone needs a repository path or URL");
  if (rc == DBX_DRV_OK) rc = norm_path(m, path, 0, &p);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  mnamed *src = rc == DBX_DRV_OK ? named_find(m->srcs, m->nsrcs, url) : NULL;
  if (rc == DBX_DRV_OK && src == NULL)
    rc = fail(m, DBX_DRV_REPO_NOT_FOUND,
              "git clone in sandbox '%s' failed: repository '%.200s' does not exist", name, url);
  if (rc == DBX_DRV_OK) {
    fmap_remove_tree(&s->files, p); /* a partial or earlier target */
    mrepo *r = repo_find(s, p);
    if (r == NULL) {
      mrepo *nv = dbx_realloc(s->repos, (s->nrepos + 1) * sizeof *nv);
      if (nv) {
        s->repos = nv;
        r = &s->repos[s->nrepos];
        memset(r, 0, sizeof *r);
        r->path = dbx_strdup(p);
        if (r->path) s->nrepos++;
        else r = NULL;
      }
    }
    char *u = dbx_strdup(url);
    if (r == NULL || u == NULL || fmap_copy_into(&s->files, &src->files, "", p) != 0) {
      free(u);
      rc = DBX_DRV_NOMEM;
    } else {
      free(r->url);
      r->url = u;
      r->tree = tree_hash(&s->files, p);
      make_sha(r->head, "", url, r->tree);
    }
  }
  pthread_mutex_unlock(&m->mu);
  free(p);
  return rc;
}

static dbx_drv_err md_git_commit(void *self, const char *name, const char *repo_path,
                                 const char *message, const char *author, char **sha,
                                 int *nothing) {
  dbx_memdrv *m = self;
  msb *s;
  char *p = NULL;
  *sha = NULL;
  *nothing = 0;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "git_commit");
  if (rc == DBX_DRV_OK && (message == NULL || author == NULL || *author == '\0'))
    rc = fail(m, DBX_DRV_INVALID, "git commit needs a message and an author");
  if (rc == DBX_DRV_OK) rc = norm_path(m, repo_path ? repo_path : "", 1, &p);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  if (rc == DBX_DRV_OK && !fmap_is_dir(&s->files, p))
    rc = fail(m, DBX_DRV_NOT_FOUND, "path '%.200s' not found", repo_path);
  mrepo *r = rc == DBX_DRV_OK ? repo_find(s, p) : NULL;
  if (rc == DBX_DRV_OK && r == NULL)
    rc = fail(m, DBX_DRV_NOT_A_REPO, "git commit in sandbox '%s' failed: '%s' is not a git repository",
              name, p[0] ? p : ".");
  if (rc == DBX_DRV_OK) {
    uint64_t t = tree_hash(&s->files, p);
    if (t == r->tree) {
      *nothing = 1;
    } else {
      char parent[41];
      memcpy(parent, r->head, sizeof parent);
      make_sha(r->head, parent, message, t);
      r->tree = t;
      if ((*sha = dbx_strdup(r->head)) == NULL) rc = DBX_DRV_NOMEM;
    }
  }
  pthread_mutex_unlock(&m->mu);
  free(p);
  return rc;
}

static dbx_drv_err md_git_push(void *self, const char *name, const char *repo_path,
                               const char *remote, const char *branch) {
  dbx_memdrv *m = self;
  msb *s;
  char *p = NULL;
  if (remote == NULL || *remote == '\0') remote = "origin";
  if (branch == NULL || *branch == '\0') branch = "HEAD";
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "git_push");
  if (rc == DBX_DRV_OK) rc = norm_path(m, repo_path ? repo_path : "", 1, &p);
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 1, &s);
  if (rc == DBX_DRV_OK && !fmap_is_dir(&s->files, p))
    rc = fail(m, DBX_DRV_NOT_FOUND, "path '%.200s' not found", repo_path);
  mrepo *r = rc == DBX_DRV_OK ? repo_find(s, p) : NULL;
  if (rc == DBX_DRV_OK && r == NULL)
    rc = fail(m, DBX_DRV_NOT_A_REPO, "git push in sandbox '%s' failed: '%s' is not a git repository",
              name, p[0] ? p : ".");
  if (rc == DBX_DRV_OK) {
    mpush *slot = NULL;
    for (size_t i = 0; i < m->npushes && !slot; i++)
      if (strcmp(m->pushes[i].remote, remote) == 0 && strcmp(m->pushes[i].branch, branch) == 0)
        slot = &m->pushes[i];
    if (slot == NULL) {
      mpush *nv = dbx_realloc(m->pushes, (m->npushes + 1) * sizeof *nv);
      if (nv) {
        m->pushes = nv;
        slot = &nv[m->npushes];
        slot->remote = dbx_strdup(remote);
        slot->branch = dbx_strdup(branch);
        if (slot->remote && slot->branch) {
          m->npushes++;
        } else {
          free(slot->remote);
          free(slot->branch);
          slot = NULL;
        }
      }
    }
    if (slot == NULL) rc = DBX_DRV_NOMEM;
    else memcpy(slot->sha, r->head, sizeof slot->sha);
  }
  pthread_mutex_unlock(&m->mu);
  free(p);
  return rc;
}

/* ---- checkpoints ---- */

static dbx_drv_err md_checkpoint(void *self, const char *name, const char *snap, char **ref) {
  dbx_memdrv *m = self;
  msb *s;
  *ref = NULL;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "checkpoint");
  if (rc == DBX_DRV_OK && !dbx_drv_name_valid(snap))
    rc = fail(m, DBX_DRV_INVALID, "invalid snapshot name '%.140s'", snap ? snap : "(null)");
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  if (rc == DBX_DRV_OK && named_find(m->snaps, m->nsnaps, snap) == NULL) {
    mnamed *nv = dbx_realloc(m->snaps, (m->nsnaps + 1) * sizeof *nv);
    if (nv == NULL) {
      rc = DBX_DRV_NOMEM;
    } else {
      m->snaps = nv;
      mnamed *n = &nv[m->nsnaps];
      memset(n, 0, sizeof *n);
      n->name = dbx_strdup(snap);
      if (n->name == NULL || fmap_copy_into(&n->files, &s->files, "", "") != 0) {
        free(n->name);
        fmap_free(&n->files);
        rc = DBX_DRV_NOMEM;
      } else {
        m->nsnaps++;
      }
    }
  }
  if (rc == DBX_DRV_OK && (*ref = dbx_strdup(snap)) == NULL) rc = DBX_DRV_NOMEM;
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static dbx_drv_err md_restore(void *self, const char *name, const char *ref) {
  dbx_memdrv *m = self;
  msb *s;
  fmap next = {0};
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "restore");
  if (rc == DBX_DRV_OK) rc = sb_get(m, name, 0, &s);
  mnamed *n = rc == DBX_DRV_OK && ref ? named_find(m->snaps, m->nsnaps, ref) : NULL;
  if (rc == DBX_DRV_OK && n == NULL)
    rc = fail(m, DBX_DRV_SOURCE_NOT_FOUND, "snapshot '%.140s' not found", ref ? ref : "");
  if (rc == DBX_DRV_OK && any_running(s))
    rc = fail(m, DBX_DRV_STATE, "sandbox '%s' has a running command: restore refused", name);
  if (rc == DBX_DRV_OK && fmap_copy_into(&next, &n->files, "", "") != 0) rc = DBX_DRV_NOMEM;
  if (rc == DBX_DRV_OK) { /* all or nothing */
    fmap_free(&s->files);
    s->files = next;
    memset(&next, 0, sizeof next);
  }
  pthread_mutex_unlock(&m->mu);
  fmap_free(&next);
  return rc;
}

static dbx_drv_err md_snapshot_delete(void *self, const char *ref) {
  dbx_memdrv *m = self;
  pthread_mutex_lock(&m->mu);
  dbx_drv_err rc = injected(m, "snapshot_delete");
  if (rc == DBX_DRV_OK && !dbx_drv_name_valid(ref))
    rc = fail(m, DBX_DRV_INVALID, "invalid snapshot ref '%.140s'", ref ? ref : "(null)");
  for (size_t i = 0; rc == DBX_DRV_OK && i < m->nsnaps; i++)
    if (strcmp(m->snaps[i].name, ref) == 0) {
      free(m->snaps[i].name);
      fmap_free(&m->snaps[i].files);
      m->snaps[i] = m->snaps[--m->nsnaps];
      break;
    }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static void md_destroy(void *self) { dbx_memdrv_destroy(self); }

static const dbx_driver_ops memdrv_ops = {
    .destroy = md_destroy,
    .errmsg = md_errmsg,
    .create = md_create,
    .workspace_path = md_workspace_path,
    .exists = md_exists,
    .list = md_list,
    .labels = md_labels,
    .start = md_start,
    .stop = md_stop,
    .del = md_del,
    .exec_start = md_exec_start,
    .exec_poll = md_exec_poll,
    .exec_attach = md_exec_attach,
    .exec_result = md_exec_result,
    .exec_cancel = md_exec_cancel,
    .exec_forget = md_exec_forget,
    .file_read = md_file_read,
    .file_write = md_file_write,
    .upload = md_upload,
    .download = md_download,
    .git_clone = md_git_clone,
    .git_commit = md_git_commit,
    .git_push = md_git_push,
    .checkpoint = md_checkpoint,
    .restore = md_restore,
    .snapshot_delete = md_snapshot_delete,
};

/* ---- the handle ---- */

dbx_err dbx_memdrv_create(const dbx_memdrv_opts *o, dbx_memdrv **out) {
  *out = NULL;
  dbx_memdrv *m = dbx_calloc(1, sizeof *m);
  if (m == NULL) return DBX_ENOMEM;
  m->name = dbx_strdup(o && o->name ? o->name : "memory");
  if (m->name == NULL || pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m->name);
    free(m);
    return DBX_ENOMEM;
  }
  if (o) m->exec = o->exec, m->exec_ud = o->exec_ud;
  m->drv = (dbx_driver){.ops = &memdrv_ops, .self = m, .name = m->name};
  *out = m;
  return DBX_OK;
}

static void named_free(mnamed *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(v[i].name);
    fmap_free(&v[i].files);
  }
  free(v);
}

void dbx_memdrv_destroy(dbx_memdrv *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->nsbs; i++) sb_free(m->sbs[i]);
  free(m->sbs);
  named_free(m->snaps, m->nsnaps);
  named_free(m->srcs, m->nsrcs);
  for (size_t i = 0; i < m->npushes; i++) {
    free(m->pushes[i].remote);
    free(m->pushes[i].branch);
  }
  free(m->pushes);
  if (tl_err.owner == m) tl_err.owner = NULL;
  pthread_mutex_destroy(&m->mu);
  free(m->name);
  free(m);
}

dbx_driver *dbx_memdrv_driver(dbx_memdrv *m) { return m ? &m->drv : NULL; }

dbx_err dbx_memdrv_source_put(dbx_memdrv *m, const char *location, const char *path,
                              const void *data, size_t len) {
  char *p = NULL;
  if (location == NULL || *location == '\0') return DBX_EINVAL;
  dbx_drv_err e = norm_path(m, path, 0, &p);
  if (e != DBX_DRV_OK) return e == DBX_DRV_NOMEM ? DBX_ENOMEM : DBX_EINVAL;
  dbx_err rc = DBX_OK;
  pthread_mutex_lock(&m->mu);
  mnamed *n = named_find(m->srcs, m->nsrcs, location);
  if (n == NULL) {
    mnamed *nv = dbx_realloc(m->srcs, (m->nsrcs + 1) * sizeof *nv);
    if (nv) {
      m->srcs = nv;
      n = &nv[m->nsrcs];
      memset(n, 0, sizeof *n);
      n->name = dbx_strdup(location);
      if (n->name) m->nsrcs++;
      else n = NULL;
    }
  }
  if (n == NULL || fmap_put(&n->files, p, data, len) != 0) rc = DBX_ENOMEM;
  pthread_mutex_unlock(&m->mu);
  free(p);
  return rc;
}

void dbx_memdrv_fail_next(dbx_memdrv *m, const char *op, dbx_drv_err e, int count) {
  pthread_mutex_lock(&m->mu);
  snprintf(m->fail_op, sizeof m->fail_op, "%s", op ? op : "");
  m->fail_err = e;
  m->fail_count = e == DBX_DRV_OK ? 0 : (count < 1 ? 1 : count);
  pthread_mutex_unlock(&m->mu);
}

dbx_err dbx_memdrv_cmd_lose(dbx_memdrv *m, const char *sandbox, const char *cmd_id) {
  dbx_err rc = DBX_ENOTFOUND;
  pthread_mutex_lock(&m->mu);
  msb *s = sandbox ? sb_find(m, sandbox) : NULL;
  mcmd *c = s && cmd_id ? cmd_find(s, cmd_id) : NULL;
  if (c) cmd_settle(c);
  if (c && !c->finished) {
    c->lost = 1;
    rc = DBX_OK;
  }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

dbx_err dbx_memdrv_pushed(dbx_memdrv *m, const char *remote, const char *branch, char **sha) {
  dbx_err rc = DBX_ENOTFOUND;
  *sha = NULL;
  if (branch == NULL) branch = "HEAD";
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; remote && i < m->npushes; i++)
    if (strcmp(m->pushes[i].remote, remote) == 0 && strcmp(m->pushes[i].branch, branch) == 0) {
      *sha = dbx_strdup(m->pushes[i].sha);
      rc = *sha ? DBX_OK : DBX_ENOMEM;
    }
  pthread_mutex_unlock(&m->mu);
  return rc;
}

void dbx_memdrv_not_started_next(dbx_memdrv *m, int count) {
  pthread_mutex_lock(&m->mu);
  m->not_started_next = count;
  pthread_mutex_unlock(&m->mu);
}

int dbx_memdrv_exec_count(dbx_memdrv *m) {
  pthread_mutex_lock(&m->mu);
  int n = m->exec_count;
  pthread_mutex_unlock(&m->mu);
  return n;
}
