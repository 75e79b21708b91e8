/* base/failpoint: the configuration and slow path behind DBX_FAILPOINT.
 *
 * The configuration is a small array of entries parsed once; the global
 * flag dbx_failpoints_on is set only after the array is complete, so the
 * fast path never sees a half-built table. A hit scans the entries in order
 * (a handful; fnmatch per entry), counts the hit, and draws its probability
 * from one xorshift64* generator under a mutex (hits are rare outside the
 * harness and the mutex keeps the draw sequence reproducible per seed in a
 * single-threaded test). A firing entry first appends "NAME\n" to the log
 * file and fsyncs it, then SIGKILLs the process (kill action) so no atexit
 * handler, buffered write or destructor runs: the same as `kill -9` from
 * outside, but at an exact point. Nothing here allocates on the hit path. */
#include "base/failpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/util.h"

volatile int dbx_failpoints_on = 0;

enum { ACT_KILL = 1, ACT_LOG = 2, ACT_STALL = 3 };

typedef struct {
  char *pattern;
  int action;
  double probability;
  uint64_t after, count; /* count 0 = unlimited */
  uint64_t ms;           /* ACT_STALL: how long */
  uint64_t hits, fired;
} fp_entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fp_entry *entries;
static size_t n_entries;
static char *log_path;
static uint64_t rng_state = 1;

static uint64_t rng_next(void) {
  uint64_t x = rng_state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  rng_state = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static void free_config(void) {
  for (size_t i = 0; i < n_entries; i++) free(entries[i].pattern);
  free(entries);
  free(log_path);
  entries = NULL;
  n_entries = 0;
  log_path = NULL;
}

void dbx_failpoint_reset(void) {
  pthread_mutex_lock(&mu);
  dbx_failpoints_on = 0;
  free_config();
  pthread_mutex_unlock(&mu);
}

static int parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 20) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1; /* overflow */
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* One entry in [s, s+n). Returns 0 or -1 with *err set. */
static int parse_entry(const char *s, size_t n, fp_entry *e, char **err) {
  char *txt = dbx_strndup(s, n);
  if (!txt) return -1;
  int rc = -1;
  char *eq = strchr(txt, '=');
  if (!eq || eq == txt) {
    *err = dbx_asprintf("failpoint entry '%s': expected NAME=ACTION", txt);
    goto out;
  }
  *eq = '\0';
  char *act = eq + 1;
  char *opts = strchr(act, ':');
  if (opts) *opts++ = '\0';
  char *at = strchr(act, '@');
  e->probability = 1.0;
  if (at) {
    *at++ = '\0';
    char *end = NULL;
    errno = 0;
    double p = strtod(at, &end);
    if (errno || end == at || *end != '\0' || !(p >= 0.0 && p <= 1.0)) {
      *err = dbx_asprintf("failpoint '%s': probability '%s' is not a number in [0, 1]", txt, at);
      goto out;
    }
    e->probability = p;
  }
  if (strcmp(act, "kill") == 0) {
    e->action = ACT_KILL;
  } else if (strcmp(act, "log") == 0) {
    e->action = ACT_LOG;
  } else if (strncmp(act, "stall", 5) == 0 && (act[5] == '\0' || act[5] == '=')) {
    e->action = ACT_STALL;
    e->ms = 1000;
    if (act[5] == '=' && (parse_u64(act + 6, strlen(act + 6), &e->ms) != 0 || e->ms > 600000)) {
      *err = dbx_asprintf("failpoint '%s': stall=MS takes 0 to 600000 ms", txt);
      goto out;
    }
  } else {
    *err = dbx_asprintf("failpoint '%s': unknown action '%s' (kill, log or stall=MS)", txt, act);
    goto out;
  }
  while (opts && *opts) {
    char *next = strchr(opts, ':');
    if (next) *next++ = '\0';
    uint64_t *dst = NULL;
    const char *val = NULL;
    if (strncmp(opts, "after=", 6) == 0) dst = &e->after, val = opts + 6;
    else if (strncmp(opts, "count=", 6) == 0) dst = &e->count, val = opts + 6;
    if (!dst || parse_u64(val, strlen(val), dst) != 0) {
      *err = dbx_asprintf("failpoint '%s': bad option '%s' (after=N or count=N)", txt, opts);
      goto out;
    }
    opts = next;
  }
  e->pattern = dbx_strdup(txt);
  rc = e->pattern ? 0 : -1;
out:
  free(txt);
  return rc;
}

dbx_err dbx_failpoint_configure(const char *spec, uint64_t seed, const char *log,
                                char **errmsg) {
  if (errmsg) *errmsg = NULL;
  dbx_failpoint_reset();
  if (!spec || !*spec) return DBX_OK;
  size_t cap = 1;
  for (const char *p = spec; *p; p++) cap += *p == ',';
  fp_entry *es = dbx_calloc(cap, sizeof *es);
  if (!es) return DBX_ENOMEM;
  size_t n = 0;
  char *err = NULL;
  dbx_err rc = DBX_OK;
  const char *p = spec;
  while (*p) {
    const char *c = strchr(p, ',');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    if (len) {
      if (parse_entry(p, len, &es[n], &err) != 0) {
        rc = err ? DBX_EINVAL : DBX_ENOMEM;
        break;
      }
      n++;
    }
    p += len + (c ? 1 : 0);
  }
  char *lp = NULL;
  if (rc == DBX_OK && log && *log && !(lp = dbx_strdup(log))) rc = DBX_ENOMEM;
  if (rc != DBX_OK) {
    for (size_t i = 0; i < n; i++) free(es[i].pattern);
    free(es);
    if (errmsg) *errmsg = err;
    else free(err);
    return rc;
  }
  if (seed == 0) seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ULL;
  pthread_mutex_lock(&mu);
  entries = es;
  n_entries = n;
  log_path = lp;
  rng_state = seed ? seed : 1;
  dbx_failpoints_on = n > 0;
  pthread_mutex_unlock(&mu);
  return DBX_OK;
}

dbx_err dbx_failpoint_init_from_env(char **errmsg) {
  if (errmsg) *errmsg = NULL;
  const char *spec = getenv("DURABOX_FAILPOINTS");
  if (!spec || !*spec) return DBX_OK;
  const char *s = getenv("DURABOX_FAILPOINT_SEED");
  uint64_t seed = 0;
  if (s && *s && parse_u64(s, strlen(s), &seed) != 0) {
    if (errmsg) *errmsg = dbx_asprintf("DURABOX_FAILPOINT_SEED '%s' is not a decimal number", s);
    return DBX_EINVAL;
  }
  return dbx_failpoint_configure(spec, seed, getenv("DURABOX_FAILPOINT_LOG"), errmsg);
}

/* Append "name\n" to the log and make it durable; best effort. */
static void log_hit(const char *path, const char *name) {
  if (!path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[256];
  size_t n = strlen(name);
  if (n > sizeof line - 1) n = sizeof line - 1;
  memcpy(line, name, n);
  line[n++] = '\n';
  ssize_t w = write(fd, line, n);
  (void)w;
  fsync(fd);
  close(fd);
}

int dbx_failpoint_hit(const char *name) {
  if (!name) return 0;
  pthread_mutex_lock(&mu);
  fp_entry *e = NULL;
  for (size_t i = 0; i < n_entries; i++) {
    if (fnmatch(entries[i].pattern, name, 0) == 0) {
      e = &entries[i];
      break;
    }
  }
  int fire = 0;
  if (e) {
    e->hits++;
    if (e->hits > e->after && (e->count == 0 || e->fired < e->count)) {
      if (e->probability >= 1.0) fire = 1;
      else if (e->probability > 0.0)
        fire = (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0) < e->probability;
    }
    if (fire) e->fired++;
  }
  int action = e ? e->action : 0;
  uint64_t ms = e ? e->ms : 0;
  if (fire) log_hit(log_path, name);
  if (fire && action == ACT_KILL) {
    /* the mutex stays held: no other thread gets past a failpoint meanwhile */
    kill(getpid(), SIGKILL);
    for (;;) pause();
  }
  pthread_mutex_unlock(&mu);
  if (fire && action == ACT_STALL) { /* this thread only, as a slow disk would hold it */
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  return fire;
}

uint64_t dbx_failpoint_hits(const char *pattern) {
  uint64_t h = 0;
  if (!pattern) return 0;
  pthread_mutex_lock(&mu);
  for (size_t i = 0; i < n_entries; i++)
    if (strcmp(entries[i].pattern, pattern) == 0) h = entries[i].hits;
  pthread_mutex_unlock(&mu);
  return h;
}
