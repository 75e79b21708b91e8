/* Schedule specs (Temporal: schedule.v1.ScheduleSpec): compiling what a
 * client sends (calendar text, cron strings, structured calendars,
 * intervals) into the stored form (structured calendars and intervals only,
 * as Temporal's Describe shows them), and the matching times of a compiled
 * spec: the first nominal time after a given second.
 *
 * Time is whole seconds since the Unix epoch, as Temporal truncates specs to
 * seconds. Calendars are read in the spec's time zone: UTC, a fixed offset or
 * a zone of the system's database (schedule_tz.c). No store, no clock; any
 * thread (the zone cache has its own lock). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "service/svc.h"

/* ------------------------------------------------------------ civil time */

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_of(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

typedef struct {
  int64_t year;
  int month, day, hour, minute, second, wday; /* wday 0 = Sunday */
} civil;

static void civil_of(int64_t t, civil *c) {
  int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
  int64_t secs = t - days * 86400;
  c->hour = (int)(secs / 3600);
  c->minute = (int)(secs / 60 % 60);
  c->second = (int)(secs % 60);
  c->wday = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  c->day = (int)(doy - (153 * mp + 2) / 5 + 1);
  c->month = (int)(mp < 10 ? mp + 3 : mp - 9);
  c->year = yoe + era * 400 + (c->month <= 2);
}

void svc_sched_rfc3339(int64_t t_s, char out[32]) {
  civil c;
  civil_of(t_s, &c);
  snprintf(out, 32, "%04lld-%02d-%02dT%02d:%02d:%02dZ", (long long)c.year, c.month, c.day, c.hour, c.minute,
           c.second);
}

/* ------------------------------------------------------------ time zones */

/* Offset east of UTC in seconds for name, or 1 (never a whole-minute
 * offset) when the zone is not one this service knows. */
int svc_sched_tz_offset(const char *name) {
  if (name == NULL || name[0] == '\0') return 0;
  static const char *utc[] = {"UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z", "Zulu", "Etc/Zulu", "UCT", "Etc/UCT",
                              "Universal", "Etc/Universal", "Etc/Greenwich", "Greenwich"};
  for (size_t i = 0; i < sizeof utc / sizeof utc[0]; i++)
    if (strcmp(name, utc[i]) == 0) return 0;
  const char *p = name;
  int posix = 0; /* Etc/GMT+5 is five hours west */
  if (strncmp(p, "Etc/GMT", 7) == 0) {
    p += 7;
    posix = 1;
  } else if (strncmp(p, "UTC", 3) == 0 || strncmp(p, "GMT", 3) == 0) {
    p += 3;
  }
  if (*p != '+' && *p != '-') return 1;
  int sign = *p == '+' ? 1 : -1;
  p++;
  if (!isdigit((unsigned char)p[0])) return 1;
  int h = 0, m = 0, nd = 0;
  while (isdigit((unsigned char)*p) && nd < 2) h = h * 10 + (*p++ - '0'), nd++;
  if (*p == ':') p++;
  if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1])) {
    if (posix) return 1;
    m = (p[0] - '0') * 10 + (p[1] - '0');
    p += 2;
  }
  if (*p != '\0' || h > 14 || m > 59) return 1;
  int off = sign * (h * 3600 + m * 60);
  return posix ? -off : off;
}

/* ------------------------------------------------------------ calendar text */

typedef struct {
  const char *name;
  int lo, hi;
  const char *dflt;
} field_def;

static const field_def fields[7] = {
    {"second", 0, 59, "0"},      {"minute", 0, 59, "0"}, {"hour", 0, 23, "0"},    {"day_of_month", 1, 31, "*"},
    {"month", 1, 12, "*"},       {"year", 1970, 2999, "*"}, {"day_of_week", 0, 7, "*"},
};
enum { F_SEC, F_MIN, F_HOUR, F_DOM, F_MON, F_YEAR, F_DOW };
/* Bounds on one spec, so matching stays cheap whatever a client sends. */
#define MAX_RANGES 1000 /* ranges of one calendar field */
#define MAX_SPECS 100   /* calendars (with cron strings), intervals, exclusions */

static int name_value(int field, const char *s, size_t n) {
  static const char *months[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                 "jul", "aug", "sep", "oct", "nov", "dec"};
  static const char *days[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
  static const char *long_days[] = {"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"};
  static const char *long_months[] = {"january", "february", "march",     "april",   "may",      "june",
                                      "july",    "august",   "september", "october", "november", "december"};
  for (int i = 0; field == F_MON && i < 12; i++)
    if ((n == 3 && strncasecmp(s, months[i], 3) == 0) ||
        (n == strlen(long_months[i]) && strncasecmp(s, long_months[i], n) == 0))
      return i + 1;
  for (int i = 0; field == F_DOW && i < 7; i++)
    if ((n == 3 && strncasecmp(s, days[i], 3) == 0) ||
        (n == strlen(long_days[i]) && strncasecmp(s, long_days[i], n) == 0))
      return i;
  return -1;
}

/* One value of field: a decimal number or a name. -1 when bad. */
static int parse_value(int field, const char *s, size_t n) {
  if (n == 0) return -1;
  if (isdigit((unsigned char)s[0])) {
    int v = 0;
    for (size_t i = 0; i < n; i++) {
      if (!isdigit((unsigned char)s[i]) || v > 100000) return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  }
  return name_value(field, s, n);
}

static int range_add(StructuredCalendarSpec *sc, int field, int start, int end, int step) {
  Range ***arr = NULL;
  size_t *n = NULL;
  switch (field) {
  case F_SEC: arr = &sc->second, n = &sc->n_second; break;
  case F_MIN: arr = &sc->minute, n = &sc->n_minute; break;
  case F_HOUR: arr = &sc->hour, n = &sc->n_hour; break;
  case F_DOM: arr = &sc->day_of_month, n = &sc->n_day_of_month; break;
  case F_MON: arr = &sc->month, n = &sc->n_month; break;
  case F_YEAR: arr = &sc->year, n = &sc->n_year; break;
  default: arr = &sc->day_of_week, n = &sc->n_day_of_week; break;
  }
  if (*n >= MAX_RANGES) return -1;
  Range **na = dbx_realloc(*arr, (*n + 1) * sizeof *na);
  if (na == NULL) return -1;
  *arr = na;
  Range *r = svc_pb_new(&Range__D);
  if (r == NULL) return -1;
  r->start = start;
  r->end = end;
  r->step = step;
  na[(*n)++] = r;
  return 0;
}

static size_t range_count(const StructuredCalendarSpec *sc, int field) {
  size_t n[7] = {sc->n_second, sc->n_minute, sc->n_hour, sc->n_day_of_month, sc->n_month, sc->n_year,
                 sc->n_day_of_week};
  return n[field];
}

/* One comma-separated item: *, x, x-z, with an optional /step. */
static int parse_item(StructuredCalendarSpec *sc, int field, const char *s, size_t n, char **err) {
  const field_def *fd = &fields[field];
  const char *slash = memchr(s, '/', n);
  size_t body = slash ? (size_t)(slash - s) : n;
  int step = 1;
  if (slash) {
    step = parse_value(F_SEC, slash + 1, n - body - 1);
    if (step <= 0) goto bad;
  }
  int lo, hi;
  if (body == 1 && s[0] == '*') {
    lo = fd->lo;
    hi = field == F_DOW ? 6 : fd->hi;
  } else {
    const char *dash = memchr(s, '-', body);
    size_t a = dash ? (size_t)(dash - s) : body;
    lo = parse_value(field, s, a);
    hi = dash ? parse_value(field, dash + 1, body - a - 1) : (slash ? fd->hi : lo);
    if (slash && !dash && field == F_DOW) hi = 6;
    if (lo < 0 || hi < 0) goto bad;
  }
  if (lo < fd->lo || hi > fd->hi || hi < lo) goto bad;
  if (range_count(sc, field) >= MAX_RANGES) {
    *err = dbx_asprintf("more than %d values for %s", MAX_RANGES, fd->name);
    return -1;
  }
  if (range_add(sc, field, lo, hi, step) != 0) {
    svc_oom_mark();
    return -1;
  }
  return 0;
bad:
  *err = dbx_asprintf("invalid %s value \"%.*s\"", fd->name, (int)n, s);
  return -1;
}

static int parse_field(StructuredCalendarSpec *sc, int field, const char *text, char **err) {
  if (text == NULL || text[0] == '\0') text = fields[field].dflt;
  if (field == F_YEAR && strcmp(text, "*") == 0) return 0; /* no ranges: any year */
  const char *p = text;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    if (parse_item(sc, field, p, n, err) != 0) return -1;
    if (comma == NULL) return 0;
    p = comma + 1;
  }
}

/* CalendarSpec (text fields) to a new StructuredCalendarSpec. */
static StructuredCalendarSpec *calendar_compile(const CalendarSpec *cs, char **err) {
  StructuredCalendarSpec *sc = svc_pb_new(&StructuredCalendarSpec__D);
  if (sc == NULL) return NULL;
  const char *t[7] = {cs->second, cs->minute, cs->hour, cs->day_of_month, cs->month, cs->year, cs->day_of_week};
  for (int f = 0; f < 7; f++) {
    if (parse_field(sc, f, t[f], err) != 0) {
      protobuf_c_message_free_unpacked(&sc->base, NULL);
      return NULL;
    }
  }
  sc->comment = svc_pb_strdup(cs->comment);
  return sc;
}

/* ------------------------------------------------------------ cron strings */

static int add_interval(ScheduleSpec *s, int64_t every_s, int64_t phase_s) {
  IntervalSpec **na = dbx_realloc(s->interval, (s->n_interval + 1) * sizeof *na);
  if (na == NULL) return -1;
  s->interval = na;
  IntervalSpec *iv = svc_pb_new(&IntervalSpec__D);
  if (iv == NULL) return -1;
  iv->interval = svc_duration_new_ms(every_s * 1000);
  iv->phase = svc_duration_new_ms(phase_s * 1000);
  na[s->n_interval++] = iv;
  return iv->interval && iv->phase ? 0 : -1;
}

static int add_calendar(ScheduleSpec *s, StructuredCalendarSpec *sc) {
  StructuredCalendarSpec **na = dbx_realloc(s->structured_calendar, (s->n_structured_calendar + 1) * sizeof *na);
  if (na == NULL) return -1;
  s->structured_calendar = na;
  na[s->n_structured_calendar++] = sc;
  return 0;
}

/* "30s", "5m", "2h", "1d" (several terms: "1h30m"): seconds, or -1. */
static int64_t parse_every(const char *s, size_t n) {
  int64_t total = 0;
  size_t i = 0;
  if (n == 0) return -1;
  while (i < n) {
    int64_t v = 0;
    size_t d0 = i;
    while (i < n && isdigit((unsigned char)s[i]) && v < 1000000000LL) v = v * 10 + (s[i++] - '0');
    if (i == d0 || i == n) return -1;
    int64_t unit = s[i] == 's' ? 1 : s[i] == 'm' ? 60 : s[i] == 'h' ? 3600 : s[i] == 'd' ? 86400 : 0;
    if (unit == 0) return -1;
    i++;
    total += v * unit;
  }
  return total;
}

static const struct {
  const char *name, *fields;
} shorthands[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@hourly", "0 * * * *"},
};

static int cron_fields(ScheduleSpec *s, char *body, char **err) {
  char *f[8];
  int n = 0;
  for (char *save = NULL, *tok = strtok_r(body, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
    if (n == 8) break;
    f[n++] = tok;
  }
  if (n < 5 || n > 7) {
    *err = dbx_asprintf("cron string needs 5, 6 or 7 fields, has %d", n);
    return -1;
  }
  CalendarSpec cs = INIT(TEMPORAL__API__SCHEDULE__V1__CALENDAR_SPEC);
  int o = n == 7 ? 1 : 0;
  cs.second = n == 7 ? f[0] : "0";
  cs.minute = f[o];
  cs.hour = f[o + 1];
  cs.day_of_month = f[o + 2];
  cs.month = f[o + 3];
  cs.day_of_week = f[o + 4];
  cs.year = n >= 6 ? f[o + 5] : "*";
  StructuredCalendarSpec *sc = calendar_compile(&cs, err);
  if (sc == NULL) return -1;
  if (add_calendar(s, sc) != 0) {
    protobuf_c_message_free_unpacked(&sc->base, NULL);
    svc_oom_mark();
    return -1;
  }
  return 0;
}

/* One cron string into s (calendar or interval; TZ= sets the time zone). */
static int cron_compile(ScheduleSpec *s, const char *text, char **err) {
  char *buf = dbx_strdup(text);
  if (buf == NULL) return -1;
  int rc = -1;
  char *hash = strchr(buf, '#');
  if (hash) *hash = '\0';
  char *p = buf;
  while (isspace((unsigned char)*p)) p++;
  if (strncmp(p, "TZ=", 3) == 0 || strncmp(p, "CRON_TZ=", 8) == 0) {
    p = strchr(p, '=') + 1;
    char *end = p;
    while (*end && !isspace((unsigned char)*end)) end++;
    char save = *end;
    *end = '\0';
    if (s->timezone_name == NULL || s->timezone_name[0] == '\0' || s->timezone_name == protobuf_c_empty_string)
      svc_pb_setstr(&s->timezone_name, p);
    *end = save;
    p = end;
    while (isspace((unsigned char)*p)) p++;
  }
  if (strncmp(p, "@every", 6) == 0 && isspace((unsigned char)p[6])) {
    p += 6;
    while (isspace((unsigned char)*p)) p++;
    size_t n = strcspn(p, " \t");
    char *slash = memchr(p, '/', n);
    int64_t every = parse_every(p, slash ? (size_t)(slash - p) : n);
    int64_t phase = slash ? parse_every(slash + 1, n - (size_t)(slash - p) - 1) : 0;
    if (every <= 0 || phase < 0) {
      *err = dbx_asprintf("invalid @every in cron string \"%s\"", text);
    } else if (add_interval(s, every, phase) != 0) {
      svc_oom_mark();
    } else {
      rc = 0;
    }
    goto out;
  }
  for (size_t i = 0; i < sizeof shorthands / sizeof shorthands[0]; i++) {
    size_t ln = strlen(shorthands[i].name);
    if (strncmp(p, shorthands[i].name, ln) == 0 && (p[ln] == '\0' || isspace((unsigned char)p[ln]))) {
      char tmp[32];
      snprintf(tmp, sizeof tmp, "%s", shorthands[i].fields);
      rc = cron_fields(s, tmp, err);
      goto out;
    }
  }
  rc = cron_fields(s, p, err);
out:
  free(buf);
  return rc;
}

/* ------------------------------------------------------------ compile */

static int check_ranges(Range *const *r, size_t n, int field, char **err) {
  const field_def *fd = &fields[field];
  for (size_t i = 0; i < n; i++) {
    int hi = r[i]->end < r[i]->start ? r[i]->start : r[i]->end;
    if (r[i]->start < fd->lo || hi > fd->hi || r[i]->step < 0) {
      *err = dbx_asprintf("%s range %d-%d is out of bounds", fd->name, r[i]->start, r[i]->end);
      return -1;
    }
  }
  return 0;
}

static int check_structured(const StructuredCalendarSpec *sc, char **err) {
  size_t counts[7] = {sc->n_second, sc->n_minute, sc->n_hour, sc->n_day_of_month, sc->n_month, sc->n_year,
                      sc->n_day_of_week};
  for (int f = 0; f < 7; f++)
    if (counts[f] > MAX_RANGES) {
      *err = dbx_asprintf("more than %d ranges for %s", MAX_RANGES, fields[f].name);
      return -1;
    }
  return check_ranges(sc->second, sc->n_second, F_SEC, err) || check_ranges(sc->minute, sc->n_minute, F_MIN, err) ||
                 check_ranges(sc->hour, sc->n_hour, F_HOUR, err) ||
                 check_ranges(sc->day_of_month, sc->n_day_of_month, F_DOM, err) ||
                 check_ranges(sc->month, sc->n_month, F_MON, err) || check_ranges(sc->year, sc->n_year, F_YEAR, err) ||
                 check_ranges(sc->day_of_week, sc->n_day_of_week, F_DOW, err)
             ? -1
             : 0;
}

static void free_calendars(CalendarSpec **c, size_t n) {
  for (size_t i = 0; i < n; i++) protobuf_c_message_free_unpacked(&c[i]->base, NULL);
  free(c);
}

/* The calendar, cron and exclude_calendar entries of s become structured
 * ones; then everything is checked. 0, or -1 with *err (bad input) or the
 * out-of-memory mark. */
static int compile_into(ScheduleSpec *s, char **err) {
  if (s->n_calendar + s->n_structured_calendar + s->n_cron_string > MAX_SPECS || s->n_interval > MAX_SPECS ||
      s->n_exclude_calendar + s->n_exclude_structured_calendar > MAX_SPECS) {
    *err = dbx_asprintf("more than %d calendars, intervals or exclusions", MAX_SPECS);
    return -1;
  }
  for (size_t i = 0; i < s->n_calendar; i++) {
    StructuredCalendarSpec *sc = calendar_compile(s->calendar[i], err);
    if (sc == NULL || add_calendar(s, sc) != 0) return -1;
  }
  for (size_t i = 0; i < s->n_exclude_calendar; i++) {
    StructuredCalendarSpec *sc = calendar_compile(s->exclude_calendar[i], err);
    if (sc == NULL) return -1;
    StructuredCalendarSpec **na =
        dbx_realloc(s->exclude_structured_calendar, (s->n_exclude_structured_calendar + 1) * sizeof *na);
    if (na == NULL) {
      protobuf_c_message_free_unpacked(&sc->base, NULL);
      return -1;
    }
    s->exclude_structured_calendar = na;
    na[s->n_exclude_structured_calendar++] = sc;
  }
  for (size_t i = 0; i < s->n_cron_string; i++)
    if (cron_compile(s, s->cron_string[i], err) != 0) return -1;
  free_calendars(s->calendar, s->n_calendar);
  free_calendars(s->exclude_calendar, s->n_exclude_calendar);
  for (size_t i = 0; i < s->n_cron_string; i++) free(s->cron_string[i]);
  free(s->cron_string);
  s->calendar = s->exclude_calendar = NULL;
  s->cron_string = NULL;
  s->n_calendar = s->n_exclude_calendar = s->n_cron_string = 0;
  for (size_t i = 0; i < s->n_interval; i++) {
    int64_t every = dbx_pb_duration_ms(s->interval[i]->interval) / 1000;
    int64_t phase = dbx_pb_duration_ms(s->interval[i]->phase) / 1000;
    if (every <= 0 || phase < 0 || every > MAX_TIMEOUT_MS / 1000) {
      *err = dbx_asprintf("interval must be at least one second and phase not negative");
      return -1;
    }
  }
  for (size_t i = 0; i < s->n_structured_calendar; i++)
    if (check_structured(s->structured_calendar[i], err) != 0) return -1;
  for (size_t i = 0; i < s->n_exclude_structured_calendar; i++)
    if (check_structured(s->exclude_structured_calendar[i], err) != 0) return -1;
  if (!svc_sched_tz_known(s->timezone_name)) {
    *err = dbx_asprintf("unknown time zone \"%s\" (not a fixed offset, not in the system's time zone database)",
                        s->timezone_name);
    return -1;
  }
  int64_t jitter_ms = dbx_pb_duration_ms(s->jitter);
  if (jitter_ms < 0 || jitter_ms > 366LL * 24 * 3600 * 1000) {
    *err = dbx_asprintf("jitter must be between 0 and 366 days");
    return -1;
  }
  return 0;
}

dbx_err svc_sched_spec_compile(const ScheduleSpec *in, ScheduleSpec **out, char **err) {
  *out = NULL;
  *err = NULL;
  ScheduleSpec *s = in ? PB_CLONE(ScheduleSpec, in) : svc_pb_new(&ScheduleSpec__D);
  if (s == NULL) return DBX_ENOMEM;
  if (compile_into(s, err) != 0) {
    protobuf_c_message_free_unpacked(&s->base, NULL);
    if (*err) return DBX_EINVAL;
    svc_oom_take();
    return DBX_ENOMEM;
  }
  *out = s;
  return DBX_OK;
}

/* ------------------------------------------------------------ matching */

static int in_ranges(Range *const *r, size_t n, int v, int dflt_all, int dflt) {
  if (n == 0) return dflt_all || v == dflt;
  for (size_t i = 0; i < n; i++) {
    int lo = r[i]->start, hi = r[i]->end < r[i]->start ? r[i]->start : r[i]->end;
    int step = r[i]->step > 0 ? r[i]->step : 1;
    if (v >= lo && v <= hi && (v - lo) % step == 0) return 1;
  }
  return 0;
}

static int dow_match(const StructuredCalendarSpec *sc, int wday) {
  return in_ranges(sc->day_of_week, sc->n_day_of_week, wday, 1, 0) ||
         (wday == 0 && sc->n_day_of_week > 0 && in_ranges(sc->day_of_week, sc->n_day_of_week, 7, 0, 0));
}

static int days_in_month(int64_t y, int m) {
  static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : d[m - 1];
}

/* The first local second >= t (local = UTC + offset) that sc matches, or
 * INT64_MAX when none comes before year 3000. */
static int64_t calendar_next_local(const StructuredCalendarSpec *sc, int64_t t) {
  for (int guard = 0; guard < 200000; guard++) {
    civil c;
    civil_of(t, &c);
    if (c.year > 2999) return INT64_MAX;
    if (!in_ranges(sc->year, sc->n_year, (int)c.year, 1, 0)) {
      t = days_of(c.year + 1, 1, 1) * 86400;
      continue;
    }
    if (!in_ranges(sc->month, sc->n_month, c.month, 1, 0)) {
      t = (c.month == 12 ? days_of(c.year + 1, 1, 1) : days_of(c.year, c.month + 1, 1)) * 86400;
      continue;
    }
    if (c.day > days_in_month(c.year, c.month) || !in_ranges(sc->day_of_month, sc->n_day_of_month, c.day, 1, 0) ||
        !dow_match(sc, c.wday)) {
      t = (days_of(c.year, c.month, c.day) + 1) * 86400;
      continue;
    }
    int64_t day0 = days_of(c.year, c.month, c.day) * 86400;
    if (!in_ranges(sc->hour, sc->n_hour, c.hour, 0, 0)) {
      t = day0 + (int64_t)(c.hour + 1) * 3600;
      continue;
    }
    if (!in_ranges(sc->minute, sc->n_minute, c.minute, 0, 0)) {
      t = day0 + (int64_t)c.hour * 3600 + (int64_t)(c.minute + 1) * 60;
      continue;
    }
    if (!in_ranges(sc->second, sc->n_second, c.second, 0, 0)) {
      t++;
      continue;
    }
    return t;
  }
  return INT64_MAX;
}

static int calendar_matches(const StructuredCalendarSpec *sc, int64_t local) {
  return calendar_next_local(sc, local) == local;
}

/* The first UTC second > after whose local clock time (in zone tz) sc
 * matches: a clock time a zone skips never matches, one it repeats matches
 * twice, as Temporal reads calendars. */
static int64_t calendar_next_utc(const StructuredCalendarSpec *sc, const char *tz, int64_t after) {
  int64_t t = after + 1;
  for (int guard = 0; guard < 2000; guard++) {
    int32_t off = svc_sched_tz_offset_at(tz, t);
    int64_t local = calendar_next_local(sc, t + off);
    if (local == INT64_MAX) return INT64_MAX;
    int64_t change = svc_sched_tz_next_change(tz, t);
    if (local - off < change) return local - off; /* the offset holds from t to there */
    t = change;
  }
  return INT64_MAX;
}

static int64_t interval_next(const IntervalSpec *iv, int64_t after) {
  int64_t every = dbx_pb_duration_ms(iv->interval) / 1000;
  int64_t phase = dbx_pb_duration_ms(iv->phase) / 1000;
  if (every <= 0) return INT64_MAX;
  phase %= every;
  int64_t d = after - phase;
  int64_t n = d >= 0 ? d / every : -((-d + every - 1) / every);
  return (n + 1) * every + phase;
}

/* The earliest time > after from every interval and calendar, exclusions
 * not applied. */
static int64_t any_next(const ScheduleSpec *s, int64_t after) {
  int64_t best = INT64_MAX;
  for (size_t i = 0; i < s->n_interval; i++) {
    int64_t t = interval_next(s->interval[i], after);
    if (t < best) best = t;
  }
  for (size_t i = 0; i < s->n_structured_calendar; i++) {
    int64_t t = calendar_next_utc(s->structured_calendar[i], s->timezone_name, after);
    if (t < best) best = t;
  }
  return best;
}

/* Later than this (2255) a time no longer fits int64 nanoseconds: none. */
#define LAST_TIME_S 9000000000LL

int64_t svc_sched_spec_next(const ScheduleSpec *s, int64_t after) {
  if (!svc_sched_tz_known(s->timezone_name)) return INT64_MAX;
  int64_t start = s->start_time ? dbx_pb_timestamp_ns(s->start_time) / 1000000000 : INT64_MIN;
  int64_t end = s->end_time ? dbx_pb_timestamp_ns(s->end_time) / 1000000000 : INT64_MAX;
  if (start != INT64_MIN && after < start - 1) after = start - 1;
  for (int guard = 0; guard < 10000; guard++) {
    int64_t t = any_next(s, after);
    if (t == INT64_MAX || t > end || t > LAST_TIME_S) return INT64_MAX;
    int excluded = 0;
    for (size_t i = 0; !excluded && i < s->n_exclude_structured_calendar; i++)
      excluded = calendar_matches(s->exclude_structured_calendar[i], t + svc_sched_tz_offset_at(s->timezone_name, t));
    if (!excluded) return t;
    after = t;
  }
  return INT64_MAX;
}
