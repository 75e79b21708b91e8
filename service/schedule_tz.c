/* Time zones of schedule specs: UTC, fixed offsets, and IANA names read from
 * the system's time zone database (TZif files under $TZDIR or
 * /usr/share/zoneinfo, RFC 8536): the offset in effect at an instant, and
 * the next instant the offset changes. Past the file's last transition the
 * POSIX TZ rule of its footer applies (the "Mm.w.d" form; another form
 * keeps the last offset).
 *
 * Parsed zones are cached for the process (a few dozen at most; a name is
 * read once) behind a mutex: the engine threads of several services in one
 * process may ask at once. An entry lives until the process ends. */
#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "service/svc.h"

typedef struct {
  int month, week, wday; /* Mm.w.d: week 5 = the last */
  int32_t secs;          /* local time of day of the change */
} tz_rule;

typedef struct tz_zone tz_zone;
struct tz_zone {
  char *name;
  int64_t *at;       /* transition instants, ascending */
  int32_t *off;      /* offset from at[i] on */
  size_t n;
  int32_t first_off; /* before the first transition */
  int has_rule;      /* footer: std_off, and with dst, the two changes */
  int has_dst;
  int32_t std_off, dst_off;
  tz_rule start, end;
  tz_zone *next;
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static tz_zone *cache;

/* ------------------------------------------------------------ TZif */

static int64_t be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | p[i];
  if (n == 4) return (int32_t)(uint32_t)v;
  return (int64_t)v;
}

/* POSIX offset "[+-]hh[:mm[:ss]]" (west positive) at *p; seconds east. */
static int posix_offset(const char **p, int32_t *out) {
  int sign = -1;
  if (**p == '+' || **p == '-') {
    sign = **p == '-' ? 1 : -1;
    (*p)++;
  }
  if (!isdigit((unsigned char)**p)) return -1;
  int v[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) {
    while (isdigit((unsigned char)**p) && v[i] < 1000) v[i] = v[i] * 10 + (*(*p)++ - '0');
    if (i == 2 || **p != ':') break;
    (*p)++;
  }
  *out = sign * (v[0] * 3600 + v[1] * 60 + v[2]);
  return 0;
}

static void posix_name(const char **p) {
  if (**p == '<') {
    while (**p && **p != '>') (*p)++;
    if (**p) (*p)++;
    return;
  }
  while (isalpha((unsigned char)**p)) (*p)++;
}

static int posix_rule(const char **p, tz_rule *r) {
  if (**p != 'M') return -1;
  (*p)++;
  r->month = (int)strtol(*p, (char **)p, 10);
  if (**p != '.') return -1;
  (*p)++;
  r->week = (int)strtol(*p, (char **)p, 10);
  if (**p != '.') return -1;
  (*p)++;
  r->wday = (int)strtol(*p, (char **)p, 10);
  r->secs = 7200;
  if (**p == '/') {
    (*p)++;
    int32_t t = 0;
    if (posix_offset(p, &t) != 0) return -1;
    r->secs = -t; /* a time, not an offset: the sign as written */
  }
  return r->month >= 1 && r->month <= 12 && r->week >= 1 && r->week <= 5 && r->wday >= 0 && r->wday <= 6 ? 0 : -1;
}

static void parse_footer(tz_zone *z, const char *s) {
  const char *p = s;
  posix_name(&p);
  if (posix_offset(&p, &z->std_off) != 0) return;
  if (*p == '\0' || *p == '\n') {
    z->has_rule = 1;
    return;
  }
  posix_name(&p);
  z->dst_off = z->std_off + 3600;
  if (*p != ',' && posix_offset(&p, &z->dst_off) != 0) return;
  if (*p++ != ',' || posix_rule(&p, &z->start) != 0) return;
  if (*p++ != ',' || posix_rule(&p, &z->end) != 0) return;
  z->has_rule = z->has_dst = 1;
}

/* The version 2+ body (64-bit times) of a TZif file into z. 0 or -1. */
static int parse_tzif(tz_zone *z, const uint8_t *d, size_t len) {
  if (len < 44 || memcmp(d, "TZif", 4) != 0 || d[4] < '2') return -1;
  size_t c[6];
  for (int i = 0; i < 6; i++) c[i] = (size_t)(uint32_t)be(d + 20 + 4 * i, 4);
  size_t v1 = 44 + c[3] * 5 + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
  if (v1 + 44 > len) return -1;
  const uint8_t *h = d + v1;
  if (memcmp(h, "TZif", 4) != 0) return -1;
  for (int i = 0; i < 6; i++) c[i] = (size_t)(uint32_t)be(h + 20 + 4 * i, 4);
  size_t isut = c[0], isstd = c[1], leap = c[2], timecnt = c[3], typecnt = c[4], charcnt = c[5];
  if (typecnt == 0 || typecnt > 256 || timecnt > 100000) return -1;
  size_t body = timecnt * 9 + typecnt * 6 + charcnt + leap * 12 + isstd + isut;
  if (v1 + 44 + body > len) return -1;
  const uint8_t *t = h + 44, *idx = t + timecnt * 8, *types = idx + timecnt;
  z->at = dbx_calloc(timecnt + 1, sizeof *z->at);
  z->off = dbx_calloc(timecnt + 1, sizeof *z->off);
  if (z->at == NULL || z->off == NULL) return -1;
  for (size_t i = 0; i < timecnt; i++) {
    if (idx[i] >= typecnt) return -1;
    z->at[i] = be(t + 8 * i, 8);
    z->off[i] = (int32_t)be(types + 6 * idx[i], 4);
  }
  z->n = timecnt;
  z->first_off = (int32_t)be(types, 4);
  const uint8_t *foot = types + typecnt * 6 + charcnt + leap * 12 + isstd + isut;
  if (foot < d + len && *foot == '\n') {
    const uint8_t *e = memchr(foot + 1, '\n', (size_t)(d + len - foot - 1));
    if (e && e - foot - 1 < 128) {
      char buf[128];
      memcpy(buf, foot + 1, (size_t)(e - foot - 1));
      buf[e - foot - 1] = '\0';
      parse_footer(z, buf);
    }
  }
  return 0;
}

static int name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 200 || name[0] == '/' || strstr(name, "..")) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)name[i]) && !strchr("/_+-", name[i])) return 0;
  return 1;
}

static void zone_free(tz_zone *z) {
  if (z == NULL) return;
  free(z->name);
  free(z->at);
  free(z->off);
  free(z);
}

static tz_zone *zone_read(const char *name) {
  const char *dir = getenv("TZDIR");
  char *path = dbx_asprintf("%s/%s", dir && dir[0] ? dir : "/usr/share/zoneinfo", name);
  char *data = NULL;
  size_t len = 0;
  tz_zone *z = NULL;
  if (path && dbx_fs_read_all(path, &data, &len) == DBX_OK && len < (4u << 20)) {
    z = dbx_calloc(1, sizeof *z);
    if (z && (parse_tzif(z, (const uint8_t *)data, len) != 0 || (z->name = dbx_strdup(name)) == NULL)) {
      zone_free(z);
      z = NULL;
    }
  }
  free(path);
  free(data);
  return z;
}

/* The zone named name, read once; NULL when there is no such zone. */
static const tz_zone *zone_get(const char *name) {
  if (!name_ok(name)) return NULL;
  pthread_mutex_lock(&cache_mu);
  tz_zone *z = cache;
  while (z && strcmp(z->name, name) != 0) z = z->next;
  if (z == NULL) {
    z = zone_read(name);
    if (z) {
      z->next = cache;
      cache = z;
    }
  }
  pthread_mutex_unlock(&cache_mu);
  return z;
}

/* ------------------------------------------------------------ rules */

static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

static int64_t year_of(int64_t t) {
  int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
  int64_t y = 1970 + days / 366;
  while (days_from_civil(y + 1, 1, 1) <= days) y++;
  while (days_from_civil(y, 1, 1) > days) y--;
  return y;
}

/* UTC instant of rule r in year y, its local time read at offset off. */
static int64_t rule_at(const tz_rule *r, int64_t y, int32_t off) {
  int64_t first = days_from_civil(y, r->month, 1);
  int wd = (int)(((first % 7) + 11) % 7);
  int64_t day = first + (r->wday - wd + 7) % 7 + 7 * (r->week - 1);
  int64_t next_month = r->month == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, r->month + 1, 1);
  while (day >= next_month) day -= 7;
  return day * 86400 + r->secs - off;
}

static int32_t rule_offset(const tz_zone *z, int64_t t) {
  if (!z->has_dst) return z->std_off;
  int64_t y = year_of(t);
  int64_t s = rule_at(&z->start, y, z->std_off), e = rule_at(&z->end, y, z->dst_off);
  int in = s < e ? (t >= s && t < e) : !(t >= e && t < s); /* southern zones: DST spans the new year */
  return in ? z->dst_off : z->std_off;
}

static int64_t rule_next(const tz_zone *z, int64_t t) {
  if (!z->has_dst) return INT64_MAX;
  int64_t best = INT64_MAX;
  for (int64_t y = year_of(t); y <= year_of(t) + 1; y++) {
    int64_t s = rule_at(&z->start, y, z->std_off), e = rule_at(&z->end, y, z->dst_off);
    if (s > t && s < best) best = s;
    if (e > t && e < best) best = e;
  }
  return best;
}

/* ------------------------------------------------------------ interface */

int svc_sched_tz_known(const char *name) {
  return svc_sched_tz_offset(name) != 1 || zone_get(name) != NULL;
}

int32_t svc_sched_tz_offset_at(const char *name, int64_t t) {
  int fixed = svc_sched_tz_offset(name);
  if (fixed != 1) return fixed;
  const tz_zone *z = zone_get(name);
  if (z == NULL) return 0;
  if (z->n == 0 || t < z->at[0]) return z->n == 0 && z->has_rule ? rule_offset(z, t) : z->first_off;
  if (t >= z->at[z->n - 1] && z->has_rule) return rule_offset(z, t); /* past the file's transitions */
  size_t lo = 0, hi = z->n; /* the last at[i] <= t */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (z->at[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  return z->off[lo];
}

int64_t svc_sched_tz_next_change(const char *name, int64_t t) {
  if (svc_sched_tz_offset(name) != 1) return INT64_MAX;
  const tz_zone *z = zone_get(name);
  if (z == NULL) return INT64_MAX;
  if (z->n > 0 && t < z->at[z->n - 1]) {
    size_t lo = 0, hi = z->n - 1; /* the first at[i] > t */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (z->at[mid] > t)
        hi = mid;
      else
        lo = mid + 1;
    }
    return z->at[lo];
  }
  return z->has_rule ? rule_next(z, t) : INT64_MAX;
}
