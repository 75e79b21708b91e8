/* durabox run FILE: start the workflow described in FILE (a durabox.Script
 * input, or any workflow with --type) and follow it to its result with a live
 * view of its steps. With no address configured (--address or
 * TEMPORAL_ADDRESS) it runs the embedded service and a worker in this
 * process, so it works on a fresh machine with nothing else running; with an
 * address it only starts and follows the workflow there (a worker must poll
 * the task queue). Exit status: 0 when the workflow completed and the script
 * says "completed", 1 otherwise, 2 when FILE is unreadable or (for a
 * durabox.Script) not a valid Script input, before anything starts, 130
 * after SIGINT/SIGTERM: a watcher thread
 * (the signals are blocked everywhere else) fires the cancel token of the
 * follow calls; run then asks the service to cancel the workflow, waits up
 * to 30 s for it to close (durabox.Script deletes its sandbox), and stops
 * the embedded service and worker. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/alloc.h"
#include "base/json.h"
#include "base/util.h"
#include "cli/agentview.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/flags.h"
#include "cli/embed.h"
#include "cli/session.h"
#include "rpc/rpc.h"
#include "workflows/agent.h"
#include "workflows/builtin.h"
#include "workflows/script.h"

/* Input files are read whole; past this, far over any input's limit, they
 * are refused unread (docs/limits.md). */
#define RUN_MAX_FILE_BYTES (64u * 1024 * 1024)

typedef struct {
  int64_t sched_id;
  char *type;
  char *label;
  char *activity_id;
  int64_t started_ns;
} live_step;

/* The live status of the running step (issue 9: "while a step runs, durabox
 * run shows elapsed time and its latest output lines"): refreshed every
 * LIVE_REFRESH_MS from DescribeWorkflowExecution, whose pending activity
 * carries sandbox.exec's last heartbeat details (activities/sandbox.c: the
 * last lines of each stream). On a terminal a block of lines redrawn in
 * place; otherwise one plain line at most every LIVE_PLAIN_EVERY_NS, from
 * that long into the step. */
#define LIVE_REFRESH_MS 1000
#define LIVE_PLAIN_EVERY_NS (5 * 1000000000LL)
#define LIVE_LINES 3

typedef struct {
  live_step *steps;
  size_t n;
  int tty;
  int64_t running;        /* sched_id of the step in flight, 0 = none */
  int drawn;              /* lines of the status block on screen (tty) */
  int64_t last_plain_ns;  /* when the last plain status line was printed */
  uint64_t seen_off[2];   /* stream sizes at the last refresh */
  int recent;             /* the stream that grew last: 0 stdout, 1 stderr */
  int64_t wait_until_ns;  /* a retry_on_exit wait: when the next run is due */
  char *wait_step;        /* its step (malloc'd) */
} live_view;

static live_step *find_step(live_view *v, int64_t id) {
  for (size_t i = 0; i < v->n; i++)
    if (v->steps[i].sched_id == id) return &v->steps[i];
  return NULL;
}


/* term_safe of a whole string; "" for NULL or OOM (static, not to free). */
static char *term_safe_str(const cJSON *v) {
  static char empty[1];
  char *o = cJSON_IsString(v) ? dbx_cli_term_safe(v->valuestring, strlen(v->valuestring)) : NULL;
  return o ? o : empty;
}

static void term_safe_free(char *s) {
  if (s && s[0]) free(s);
}

/* s as one line of at most about max bytes (newlines and tabs as spaces,
 * other controls as term_safe shows them, "..." when cut): malloc'd or NULL. */
static char *one_line(const char *s, size_t max) {
  size_t n = strlen(s), keep = n > max ? (max > 3 ? max - 3 : max) : n;
  char *t = dbx_cli_term_safe(s, keep);
  if (t == NULL) return NULL;
  for (char *p = t; *p; p++)
    if (*p == '\n' || *p == '\t') *p = ' ';
  if (n <= max) return t;
  char *o = dbx_asprintf("%s...", t);
  free(t);
  return o;
}

/* A short label for an activity from its input. */
static char *label_for(const char *type, const char *input_json) {
  cJSON *j = cJSON_Parse(input_json ? input_json : "null");
  const char *keys[] = {"step", "command", "path", "message", "resource", "title", NULL};
  char *lbl = NULL;
  for (int i = 0; j && keys[i] && !lbl; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
    if (cJSON_IsString(v)) lbl = one_line(v->valuestring, 60);
  }
  if (lbl == NULL && type && strcmp(type, "sandbox.delete") == 0) lbl = dbx_strdup("cleanup");
  if (lbl == NULL && type && strcmp(type, "llm.chat") == 0) /* durabox.Agent's model call */
    lbl = dbx_asprintf("%d messages", cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "messages")));
  cJSON_Delete(j);
  return lbl ? lbl : dbx_strdup("");
}

/* Erase the status block (tty) so that event lines print in its place. */
static void live_clear(live_view *v) {
  if (v->tty && v->drawn > 0) printf("\033[%dA\r\033[J", v->drawn);
  v->drawn = 0;
}

/* m:ss, or h:mm:ss from an hour. */
static void elapsed_str(int64_t ns, char *out, size_t n) {
  long long s = ns > 0 ? ns / 1000000000LL : 0;
  if (s >= 3600) snprintf(out, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else snprintf(out, n, "%lld:%02lld", s / 60, s % 60);
}

/* The marker durabox.Script records before it runs an exec step again
 * (retry_on_exit): "attempt N of M exited with code C; next in X s". */
static void on_marker(live_view *v, const MarkerRecordedEventAttributes *m) {
  char *agent = dbx_cli_agent_marker_line(m); /* durabox.Agent (cli/agentview.h) */
  if (agent) {
    char *l = one_line(agent, 600);
    printf("  %s\n", l ? l : "");
    free(l);
    free(agent);
    return;
  }
  if (m == NULL || m->marker_name == NULL || strcmp(m->marker_name, "durabox.exec_retry") != 0)
    return;
  for (size_t i = 0; i < m->n_details; i++) {
    if (m->details[i]->key == NULL || strcmp(m->details[i]->key, "data") != 0) continue;
    char *txt = dbx_payloads_to_json(m->details[i]->value);
    cJSON *j = cJSON_Parse(txt ? txt : "null");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "step"),
                *at = cJSON_GetObjectItemCaseSensitive(j, "attempt"),
                *of = cJSON_GetObjectItemCaseSensitive(j, "of"),
                *ec = cJSON_GetObjectItemCaseSensitive(j, "exit_code"),
                *bo = cJSON_GetObjectItemCaseSensitive(j, "backoff_s");
    if (cJSON_IsString(st) && cJSON_IsNumber(at) && cJSON_IsNumber(of) && cJSON_IsNumber(ec)) {
      double b = cJSON_IsNumber(bo) ? bo->valuedouble : 0;
      printf("  RETRY %s: attempt %d of %d exited with code %d (retry_on_exit); next in %g s\n",
             st->valuestring, at->valueint, of->valueint, ec->valueint, b);
      free(v->wait_step);
      v->wait_step = dbx_strdup(st->valuestring);
      v->wait_until_ns = dbx_mono_ns() + (int64_t)(b * 1e9);
    }
    cJSON_Delete(j);
    free(txt);
  }
}

static void on_event(live_view *v, const HistoryEvent *e) {
  live_clear(v);
  switch (e->attributes_case) {
  case HEV(ACTIVITY_TASK_SCHEDULED): {
    const ActivityTaskScheduledEventAttributes *a = e->activity_task_scheduled_event_attributes;
    char *in = dbx_payloads_to_json(a->input);
    live_step *ns = realloc(v->steps, (v->n + 1) * sizeof *ns);
    if (ns == NULL) {
      free(in);
      return;
    }
    v->steps = ns;
    live_step *s = &v->steps[v->n++];
    s->sched_id = e->event_id;
    s->type = dbx_strdup(a->activity_type ? a->activity_type->name : "?");
    s->label = label_for(s->type, in);
    s->activity_id = dbx_strdup(a->activity_id ? a->activity_id : "");
    s->started_ns = dbx_mono_ns();
    v->running = e->event_id;
    v->last_plain_ns = s->started_ns;
    v->seen_off[0] = v->seen_off[1] = 0;
    v->recent = 0;
    v->wait_until_ns = 0;
    free(in);
    printf("  [%s] %-20s %s ...\n", a->activity_id, s->type, s->label);
    break;
  }
  case HEV(ACTIVITY_TASK_COMPLETED): {
    live_step *s = find_step(v, e->activity_task_completed_event_attributes->scheduled_event_id);
    if (s == NULL) break;
    if (v->running == s->sched_id) v->running = 0;
    char *r = dbx_payloads_to_json(e->activity_task_completed_event_attributes->result);
    cJSON *j = cJSON_Parse(r ? r : "null");
    const cJSON *ec = cJSON_GetObjectItemCaseSensitive(j, "exit_code");
    const cJSON *to = cJSON_GetObjectItemCaseSensitive(j, "timed_out");
    double secs = (double)(dbx_mono_ns() - s->started_ns) / 1e9;
    if (cJSON_IsNumber(ec))
      printf("  %s %-20s %s: exit %d%s (%.1f s)\n", ec->valueint == 0 ? "ok  " : "FAIL", s->type, s->label,
             ec->valueint, cJSON_IsTrue(to) ? ", timed out" : "", secs);
    else
      printf("  ok   %-20s %s (%.1f s)\n", s->type, s->label, secs);
    cJSON_Delete(j);
    free(r);
    break;
  }
  case HEV(ACTIVITY_TASK_FAILED):
  case HEV(ACTIVITY_TASK_TIMED_OUT): {
    int64_t sid = e->attributes_case == HEV(ACTIVITY_TASK_FAILED)
                      ? e->activity_task_failed_event_attributes->scheduled_event_id
                      : e->activity_task_timed_out_event_attributes->scheduled_event_id;
    const Failure *f = e->attributes_case == HEV(ACTIVITY_TASK_FAILED) ? e->activity_task_failed_event_attributes->failure
                                                                      : e->activity_task_timed_out_event_attributes->failure;
    live_step *s = find_step(v, sid);
    if (s && v->running == s->sched_id) v->running = 0;
    char *msg = one_line(f && f->message ? f->message : "failed", 400);
    printf("  FAIL %-20s %s: %s\n", s ? s->type : "?", s ? s->label : "", msg ? msg : "failed");
    free(msg);
    break;
  }
  case HEV(MARKER_RECORDED):
    on_marker(v, e->marker_recorded_event_attributes);
    break;
  case HEV(TIMER_STARTED):
    if (v->wait_until_ns) break; /* retry_on_exit's wait: the RETRY line said it */
    printf("  ...  sleeping %llds\n", (long long)(e->timer_started_event_attributes->start_to_fire_timeout
                                                      ? e->timer_started_event_attributes->start_to_fire_timeout->seconds
                                                      : 0));
    break;
  default:
    break;
  }
  fflush(stdout);
}

static void live_free(live_view *v) {
  for (size_t i = 0; i < v->n; i++) {
    free(v->steps[i].type);
    free(v->steps[i].label);
    free(v->steps[i].activity_id);
  }
  free(v->steps);
  free(v->wait_step);
}

/* The last n lines of text (no trailing newline) into lines[], each cut to
 * a screen's width; returns how many. Pointers into a copy the caller frees
 * (*buf). */
static int last_lines_of(const char *text, int n, char **buf, const char **lines) {
  *buf = dbx_strdup(text ? text : "");
  if (*buf == NULL) return 0;
  char *p = *buf;
  for (char *q = p; *q; q++)
    if (*q == '\t') *q = ' '; /* one column each: the block's height stays known */
  size_t len = strlen(p);
  while (len > 0 && p[len - 1] == '\n') p[--len] = '\0';
  int k = 0;
  char *end = p + len;
  while (k < n && end > p) {
    char *b = end;
    while (b > p && b[-1] != '\n') b--;
    lines[k++] = b;
    if (b > p) b[-1] = '\0';
    end = b > p ? b - 1 : p;
  }
  for (int i = 0; i < k / 2; i++) { /* oldest first */
    const char *t = lines[i];
    lines[i] = lines[k - 1 - i];
    lines[k - 1 - i] = t;
  }
  return k;
}

/* Bytes of s that fill at most cols columns (one per character; tabs as
 * one), ending at a character's start. */
static int fit_cols(const char *s, int cols) {
  int n = 0, used = 0;
  while (s[n] && used < cols) {
    n++;
    while (((unsigned char)s[n] & 0xC0) == 0x80) n++;
    used++;
  }
  return n;
}

/* Refresh the status of the running step (see live_view). */
static void live_refresh(live_view *v, dbx_client *c, const char *wfid, const char *run_id) {
  int64_t now = dbx_mono_ns();
  live_step *s = v->running ? find_step(v, v->running) : NULL;
  char head[512], el[32];
  char *tail = NULL, *buf = NULL, *why = NULL;
  const char *lines[LIVE_LINES];
  int nl = 0;
  if (s == NULL && v->wait_until_ns && v->wait_step) { /* retry_on_exit's wait */
    double left = (double)(v->wait_until_ns - now) / 1e9;
    snprintf(head, sizeof head, "  ...  %s: waiting to run again, next in %.0f s", v->wait_step,
             left > 0 ? left : 0);
  } else if (s != NULL) {
    DescribeWorkflowExecutionResponse *d = NULL;
    if (dbx_client_describe(c, wfid, run_id, &d, NULL) == DBX_OK && d) {
      for (size_t i = 0; i < d->n_pending_activities; i++) {
        const PendingActivityInfo *pa = d->pending_activities[i];
        if (pa->activity_id == NULL || strcmp(pa->activity_id, s->activity_id) != 0) continue;
        if (pa->attempt > 1) { /* the service retries it: say so, and why */
          char *last = pa->last_failure && pa->last_failure->message
                           ? one_line(pa->last_failure->message, 200) : NULL;
          why = dbx_asprintf(", attempt %d%s%d%s%s", pa->attempt,
                             pa->maximum_attempts > 0 ? " of " : "",
                             pa->maximum_attempts > 0 ? pa->maximum_attempts : 0,
                             last ? "; last: " : "", last ? last : "");
          free(last);
        }
        char *hb = pa->heartbeat_details ? dbx_payloads_to_json(pa->heartbeat_details) : NULL;
        cJSON *j = cJSON_Parse(hb ? hb : "null");
        static const char *const offs[2] = {"stdout_offset", "stderr_offset"};
        static const char *const tails[2] = {"stdout_tail", "stderr_tail"};
        for (int k = 0; k < 2; k++) {
          const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, offs[k]);
          uint64_t off = cJSON_IsNumber(o) ? (uint64_t)dbx_json_int(o->valuedouble, 0, INT64_MAX) : 0;
          if (off > v->seen_off[k]) v->recent = k, v->seen_off[k] = off;
        }
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, tails[v->recent]);
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(j, tails[!v->recent]);
        if (cJSON_IsString(t)) tail = dbx_cli_term_safe(t->valuestring, strlen(t->valuestring));
        cJSON_Delete(j);
        free(hb);
      }
    }
    dbx_client_msg_free(d);
    elapsed_str(now - s->started_ns, el, sizeof el);
    snprintf(head, sizeof head, "  ...  %s %s: running %s%s", s->type, s->label, el,
             why ? why : "");
    nl = last_lines_of(tail, LIVE_LINES, &buf, lines);
  } else {
    return;
  }
  if (v->tty) {
    live_clear(v);
    /* each line within the screen's width, so the block's height is its
     * line count (cut at a character's start) */
    struct winsize ws;
    int cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col - 1 : 79;
    printf("%.*s\n", fit_cols(head, cols), head);
    for (int i = 0; i < nl; i++) printf("       | %.*s\n", fit_cols(lines[i], cols - 9), lines[i]);
    v->drawn = 1 + nl;
  } else if (now - v->last_plain_ns >= LIVE_PLAIN_EVERY_NS) {
    v->last_plain_ns = now;
    char *one = nl > 0 ? one_line(lines[nl - 1], 200) : NULL;
    printf("%s%s%s\n", head, one ? "; last output: " : "", one ? one : "");
    free(one);
  }
  fflush(stdout);
  free(why);
  free(tail);
  free(buf);
}

/* Follow the run's history until it closes, printing steps. */
static void follow(dbx_client *c, const char *wfid, const char *run_id, const char *hint_address,
                   dbx_rpc_cancel *cancel) {
  live_view v = {0};
  v.tty = isatty(STDOUT_FILENO);
  int64_t refreshed_ns = dbx_mono_ns();
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  for (;;) {
    /* a short long-poll: between events, the running step's status */
    dbx_client_history_opts o = {.wait_new_event = 1, .page_token = tok, .page_token_len = tok_len,
                                 .cancel = cancel, .timeout_ms = LIVE_REFRESH_MS};
    dbx_client_history h = {0};
    char *err = NULL;
    dbx_err e = dbx_client_get_history(c, wfid, run_id, &o, &h, &err);
    int64_t now = dbx_mono_ns();
    if (now - refreshed_ns >= LIVE_REFRESH_MS * 900000LL && h.n == 0 &&
        !dbx_rpc_cancel_fired(cancel) && (e == DBX_OK || e == DBX_ETIMEDOUT)) {
      refreshed_ns = now;
      live_refresh(&v, c, wfid, run_id);
    }
    if (e == DBX_ETIMEDOUT && !dbx_rpc_cancel_fired(cancel)) {
      free(err);
      dbx_client_history_cleanup(&h);
      continue;
    }
    free(tok);
    tok = NULL;
    tok_len = 0;
    if (e != DBX_OK) {
      if (e == DBX_ECANCELED) { /* interrupted: the caller cancels the workflow */
        free(err);
        dbx_client_history_cleanup(&h);
        break;
      }
      dbx_cli_report("following the workflow", hint_address, e, err);
      free(err);
      dbx_client_history_cleanup(&h);
      break;
    }
    for (size_t i = 0; i < h.n; i++) on_event(&v, h.events[i]);
    if (h.next_page_token_len) {
      tok = malloc(h.next_page_token_len);
      if (tok) {
        memcpy(tok, h.next_page_token, h.next_page_token_len);
        tok_len = h.next_page_token_len;
      }
    }
    dbx_client_history_cleanup(&h);
    if (tok == NULL) break;
  }
  live_clear(&v);
  fflush(stdout);
  live_free(&v);
}

/* SIGINT/SIGTERM are blocked in every thread (before any starts) and taken
 * by this thread with sigwait: the first fires `interrupt` (the follow and
 * result calls use it); one that comes at least FORCE_AFTER_NS later fires
 * `force` (stop waiting for the cancelled workflow to close). Signals closer
 * to the first are the same interruption delivered twice (a terminal's
 * Ctrl-C reaching both `timeout` and its child, a double press) and must not
 * skip the cleanup. run() wakes it with SIGUSR1 to end it. */
#define FORCE_AFTER_NS (1000 * 1000 * 1000LL)
typedef struct {
  sigset_t set;
  dbx_rpc_cancel *interrupt, *force;
  volatile sig_atomic_t stopping; /* set by run() before its SIGUSR1 */
  int signo;                      /* the first stop signal, 0 = none */
} sig_watch;

static void *watch_signals(void *arg) {
  sig_watch *w = arg;
  int64_t first_ns = 0;
  for (;;) {
    int sig = 0;
    if (sigwait(&w->set, &sig) != 0 || w->stopping || sig == SIGUSR1) return NULL;
    if (first_ns == 0) {
      first_ns = dbx_mono_ns();
      w->signo = sig;
      dbx_rpc_cancel_fire(w->interrupt);
    } else if (dbx_mono_ns() - first_ns >= FORCE_AFTER_NS) {
      dbx_rpc_cancel_fire(w->force);
      return NULL;
    }
  }
}

/* Ask the service to cancel the run and wait up to 30 s (or a second
 * signal) for it to close: durabox.Script deletes its sandbox first. */
static void cancel_and_wait(dbx_client *c, const char *wfid, const char *run_id, dbx_rpc_cancel *force) {
  fprintf(stderr, "durabox run: interrupted: cancelling workflow %s (interrupt again to stop waiting)\n", wfid);
  char *err = NULL;
  dbx_err e = dbx_client_cancel(c, wfid, run_id, "interrupted (durabox run)", &err);
  if (e != DBX_OK) {
    fprintf(stderr, "durabox run: cannot cancel %s: %s\n", wfid, err ? err : dbx_strerror(e));
    free(err);
    return;
  }
  int64_t deadline_ns = dbx_mono_ns() + 30 * (int64_t)1000000000;
  for (;;) {
    int64_t left_ms = (deadline_ns - dbx_mono_ns()) / 1000000;
    if (left_ms <= 0) {
      fprintf(stderr, "durabox run: %s did not close within 30 s of the cancel request\n", wfid);
      return;
    }
    dbx_client_history_opts o = {.close_event_only = 1, .wait_new_event = 1, .timeout_ms = left_ms,
                                 .cancel = force};
    dbx_client_history h = {0};
    e = dbx_client_get_history(c, wfid, run_id, &o, &h, &err);
    if (e == DBX_OK && h.n > 0) {
      const HistoryEvent *ce = h.events[h.n - 1];
      fprintf(stderr, "durabox run: workflow %s %s\n", wfid,
              ce->event_type == ET(WORKFLOW_EXECUTION_CANCELED) ? "cancelled" : "closed");
      dbx_client_history_cleanup(&h);
      return;
    }
    dbx_client_history_cleanup(&h);
    if (e != DBX_OK && e != DBX_ETIMEDOUT) {
      if (e == DBX_ECANCELED)
        fprintf(stderr, "durabox run: stopped waiting for %s to close: its sandbox may be left behind\n", wfid);
      else
        fprintf(stderr, "durabox run: waiting for %s to close: %s\n", wfid, err ? err : dbx_strerror(e));
      free(err);
      return;
    }
    free(err);
    err = NULL;
  }
}

/* Print the Script summary; returns 1 if the script says it failed. */
static int print_summary(const char *result_json) {
  cJSON *j = cJSON_Parse(result_json ? result_json : "null");
  const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "steps");
  const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");
  int failed = cJSON_IsString(status) && strcmp(status->valuestring, "completed") != 0;
  if (cJSON_IsArray(steps) && cJSON_GetObjectItemCaseSensitive(j, "model_calls")) { /* durabox.Agent */
    dbx_cli_agent_print_summary(j);
    cJSON_Delete(j);
    return failed;
  }
  if (!cJSON_IsArray(steps)) {
    printf("%s\n", result_json ? result_json : "null");
    cJSON_Delete(j);
    return 0;
  }
  printf("\n%-24s %-12s %-6s %-6s %-10s %-9s %s\n", "STEP", "KIND", "OK", "EXIT", "SECONDS", "ATTEMPTS", "DETAIL");
  const cJSON *s;
  cJSON_ArrayForEach(s, steps) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "name"), *kind = cJSON_GetObjectItemCaseSensitive(s, "kind"),
                *ok = cJSON_GetObjectItemCaseSensitive(s, "ok"), *ec = cJSON_GetObjectItemCaseSensitive(s, "exit_code"),
                *dur = cJSON_GetObjectItemCaseSensitive(s, "duration_ms"),
                *att = cJSON_GetObjectItemCaseSensitive(s, "attempts"),
                *det = cJSON_GetObjectItemCaseSensitive(s, "detail"); /* git_commit sha, checkpoint ref */
    char exit_s[16] = "-", dur_s[32] = "-", runs_s[64] = "";
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(s, "runs"); /* retry_on_exit */
    if (cJSON_IsNumber(runs))
      snprintf(runs_s, sizeof runs_s, "ran %d times (retry_on_exit)", runs->valueint);
    if (cJSON_IsNumber(ec)) snprintf(exit_s, sizeof exit_s, "%d", ec->valueint);
    if (cJSON_IsNumber(dur)) snprintf(dur_s, sizeof dur_s, "%.1f", dur->valuedouble / 1000.0);
    char *name_t = dbx_cli_cell(cJSON_GetStringValue(name)), *det_t = cJSON_IsString(det) ? term_safe_str(det) : NULL;
    printf("%-24s %-12s %-6s %-6s %-10s %-9d %s\n", name_t ? name_t : "?", cJSON_IsString(kind) ? kind->valuestring : "",
           cJSON_IsTrue(ok) ? "yes" : "NO", exit_s, dur_s, cJSON_IsNumber(att) ? att->valueint : 0,
           det_t ? det_t : runs_s);
    free(name_t);
    term_safe_free(det_t);
  }
  /* the end of each exec step's output: a few lines when it passed, more when it failed */
  cJSON_ArrayForEach(s, steps) {
    const cJSON *ok = cJSON_GetObjectItemCaseSensitive(s, "ok"), *ex = cJSON_GetObjectItemCaseSensitive(s, "output_excerpt"),
                *name = cJSON_GetObjectItemCaseSensitive(s, "name");
    if (!cJSON_IsString(ex) || ex->valuestring[0] == '\0') continue;
    int want = cJSON_IsTrue(ok) ? 3 : 15;
    const char *txt = ex->valuestring;
    const char *p = txt + strlen(txt);
    while (p > txt && p[-1] == '\n') p--;
    const char *end = p;
    for (int lines = 0; p > txt; p--)
      if (p[-1] == '\n' && ++lines == want) break;
    char *name_t = term_safe_str(name), *out_t = dbx_cli_term_safe(p, (size_t)(end - p));
    printf("\n--- %s (%s): last lines of output ---\n%s\n", name_t, cJSON_IsTrue(ok) ? "passed" : "FAILED",
           out_t ? out_t : "(out of memory)");
    term_safe_free(name_t);
    free(out_t);
  }
  printf("\nscript %s\n", cJSON_IsString(status) ? status->valuestring : "?");
  const cJSON *sid = cJSON_GetObjectItemCaseSensitive(j, "sandbox_id"),
              *spath = cJSON_GetObjectItemCaseSensitive(j, "sandbox_path");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "sandbox_kept")) && cJSON_IsString(sid))
    printf("sandbox kept: %s (%s; `durabox sandbox rm %s` removes it)\n",
           cJSON_IsString(spath) ? spath->valuestring : sid->valuestring, sid->valuestring, sid->valuestring);
  cJSON_Delete(j);
  return failed;
}

/* A Script input that will take a session: checked with the field the CLI
 * adds (a first turn's), so the Script's session rules apply before start. */
static int run_validate_session_input(const char *input, char *bad, size_t n) {
  cJSON *in = cJSON_Parse(input);
  if (!cJSON_IsObject(in) || cJSON_HasObjectItem(in, "session")) {
    snprintf(bad, n, cJSON_IsObject(in) ? "the input has a \"session\" field of its own; --session adds it"
                                        : "input is not a JSON object");
    cJSON_Delete(in);
    return -1;
  }
  cJSON *se = cJSON_Parse("{\"id\":\"s\",\"turn\":1,\"previous_run_id\":null,\"state\":null}");
  char *txt = se && cJSON_AddItemToObject(in, "session", se) ? cJSON_PrintUnformatted(in) : NULL;
  if (txt == NULL && !cJSON_HasObjectItem(in, "session")) cJSON_Delete(se);
  cJSON_Delete(in);
  int rc = txt ? dbx_script_validate(txt, strlen(txt), bad, n) : (snprintf(bad, n, "out of memory"), -1);
  free(txt);
  return rc;
}

int dbx_cli_run(int argc, char **argv) {
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  const char *file = NULL, *wfid = NULL, *type = "durabox.Script", *tq = "durabox", *db = NULL, *wdb = NULL;
  const char *sandbox = NULL, *session = NULL;
  double pickup_s = 10, retention_h = -1; /* retention unset: the worker's default */
  const dbx_cli_flag fl[] = {
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &wfid, 0, 0},
      {"--type", NULL, DBX_CLI_FLAG_STR, &type, 0, 0},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &tq, 0, 0},
      {"--db-filename", NULL, DBX_CLI_FLAG_STR, &db, 0, 0},
      {"--worker-db", NULL, DBX_CLI_FLAG_STR, &wdb, 0, 0},
      {"--pickup-timeout", NULL, DBX_CLI_FLAG_NUM, &pickup_s, 0, 86400},
      {"--sandbox", NULL, DBX_CLI_FLAG_STR, &sandbox, 0, 0},
      {"--session", NULL, DBX_CLI_FLAG_STR, &session, 0, 0},
      {"--store-retention-hours", NULL, DBX_CLI_FLAG_NUM, &retention_h, 0, 87600},
  };
  for (int i = 1; i < argc; i++) {
    int r = dbx_cli_conn_flag(&conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take("durabox run", fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    const char *a = argv[i];
    if (dbx_cli_flag_is_help(a)) {
      printf("usage: durabox run FILE [--workflow-id ID] [--type T] [--task-queue Q] [--output json]\n"
             "       [--address HOST:PORT] [--tls | --tls-ca F] [--api-key K] [--pickup-timeout S] ...\n"
             "       [--sandbox local|daytona]   (the embedded worker's sandboxes: DURABOX_SANDBOX)\n"
             "       [--session S]   the next turn of session S (workflow id S; it re-opens the last\n"
             "                       completed turn's sandbox; embedded: needs --db-filename F)\n"
             "       [--store-retention-hours H]   the embedded worker's store retention (default 24;\n"
             "                       0 keeps every run; see durabox worker --help)\n"
             "       (no address: embedded service + worker in this process; --flag=value works too)\n");
      return 0;
    } else if (a[0] == '-' && a[1] != '\0') {
      return dbx_cli_flag_unknown("durabox run", a);
    } else if (file == NULL) {
      file = a;
    } else {
      fprintf(stderr, "durabox run: one FILE only ('%s')\n", a);
      return 2;
    }
  }
  if (sandbox) setenv("DURABOX_SANDBOX", sandbox, 1); /* the driver choice, read by cli/kit.c */
  if (conn.address == NULL && dbx_workflows_builtin_find(type) == NULL) {
    /* the embedded worker serves the built-in types only: no worker would ever take it */
    fprintf(stderr, "durabox run: --type %s: the embedded worker serves only the built-in types (", type);
    for (size_t k = 0; dbx_workflows_builtin[k]; k++)
      fprintf(stderr, "%s%s", k ? ", " : "", dbx_workflows_builtin[k]->name);
    fprintf(stderr, "); give --address for a service whose workers serve it\n");
    return 2;
  }
  if (file == NULL) {
    fprintf(stderr, "durabox run: FILE is required (a durabox.Script input, JSON)\n");
    return 2;
  }
  if (dbx_cli_nonempty("durabox run", "--task-queue", tq) != 0 ||
      dbx_cli_nonempty("durabox run", "--workflow-id", wfid) != 0 ||
      dbx_cli_nonempty("durabox run", "--session", session) != 0 ||
      (session && dbx_cli_session_check_id("run", session) != 0) ||
      dbx_cli_nonempty("durabox run", "--db-filename", db) != 0 ||
      dbx_cli_nonempty("durabox run", "--worker-db", wdb) != 0 ||
      dbx_cli_sandbox_driver("durabox run", sandbox) != 0)
    return 2;
  if (retention_h >= 0 && conn.address) {
    fprintf(stderr, "durabox run: --store-retention-hours is the embedded worker's; with --address no worker "
                    "runs here (durabox worker --store-retention-hours sets it there)\n");
    return 2;
  }
  if (session && wfid && strcmp(wfid, session) != 0) {
    fprintf(stderr, "durabox run: a session is a workflow id: give --session S or --workflow-id, not both\n");
    return 2;
  }
  if (session && conn.address == NULL && db == NULL) {
    fprintf(stderr, "durabox run: --session with the embedded service needs --db-filename F (the store that "
                    "keeps the session's turns), or --address of a running service\n");
    return 2;
  }
  if (session) wfid = session;
  size_t len = 0;
  int rc = 1;
  dbx_client *c = NULL;
  /* a file far over any input limit is refused unread (docs/limits.md);
   * the Script's own limits are checked below, naming the field */
  struct stat fst;
  if (strcmp(file, "-") != 0 && stat(file, &fst) == 0 && S_ISREG(fst.st_mode) &&
      (uintmax_t)fst.st_size > RUN_MAX_FILE_BYTES) {
    fprintf(stderr, "durabox run: %s is %ju bytes, over the limit of %u bytes for an input file\n",
            file, (uintmax_t)fst.st_size, RUN_MAX_FILE_BYTES);
    return 2;
  }
  char *input = dbx_cli_read_file(file, &len);
  if (input == NULL) {
    fprintf(stderr, "durabox run: cannot read %s: %s\n", file, strerror(errno));
    return 2;
  }
  const char *end = NULL;
  cJSON *probe = cJSON_ParseWithLengthOpts(input, len, &end, 0);
  if (probe == NULL) {
    fprintf(stderr, "durabox run: %s is not valid JSON (near byte %ld)\n", file,
            (long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - input : 0));
    free(input);
    return 2;
  }
  cJSON_Delete(probe);
  size_t at = (size_t)(end - input);
  while (at < len && (input[at] == ' ' || input[at] == '\t' || input[at] == '\r' ||
                      input[at] == '\n'))
    at++;
  const char *nul = memchr(input, '\0', len); /* the Script's check names its field */
  if (at < len || (nul != NULL && strcmp(type, "durabox.Script") != 0)) {
    fprintf(stderr, "durabox run: %s %s (at byte %zu)\n", file,
            at < len ? "has data after the JSON document" : "contains a NUL byte",
            at < len ? at : (size_t)(nul - input));
    free(input);
    return 2;
  }
  char bad[512];
  int script = strcmp(type, "durabox.Script") == 0;
  if ((script && (dbx_script_validate(input, len, bad, sizeof bad) != 0 ||
                  (session && run_validate_session_input(input, bad, sizeof bad) != 0))) ||
      (strcmp(type, "durabox.Agent") == 0 && dbx_agent_validate(input, len, bad, sizeof bad) != 0)) {
    fprintf(stderr, "durabox run: %s: %s\n", file, bad);
    free(input);
    return 2;
  }
  if (dbx_cli_conn_load(&conn) != 0) {
    free(input);
    return 2;
  }
  if (conn.address == NULL && dbx_cli_store_folders_check("durabox run", db, wdb) != 0) {
    free(input);
    dbx_cli_conn_cleanup(&conn);
    return 2;
  }
  /* Block the stop signals before any thread exists, so every thread
   * (gRPC's, the worker's) inherits the mask and only the watcher takes them. */
  sig_watch sw;
  memset(&sw, 0, sizeof sw);
  sigemptyset(&sw.set);
  sigaddset(&sw.set, SIGINT);
  sigaddset(&sw.set, SIGTERM);
  sigaddset(&sw.set, SIGUSR1);
  sigset_t old_mask;
  pthread_sigmask(SIG_BLOCK, &sw.set, &old_mask);
  pthread_t watcher;
  int watching = 0;
  if (dbx_rpc_cancel_create(&sw.interrupt) != DBX_OK || dbx_rpc_cancel_create(&sw.force) != DBX_OK ||
      pthread_create(&watcher, NULL, watch_signals, &sw) != 0) {
    fprintf(stderr, "durabox run: cannot set up signal handling\n");
    dbx_rpc_cancel_destroy(sw.interrupt);
    dbx_rpc_cancel_destroy(sw.force);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    free(input);
    dbx_cli_conn_cleanup(&conn);
    return 1;
  }
  watching = 1;
  int embedded = conn.address == NULL;
  if (embedded && getenv("DURABOX_LOG_LEVEL") == NULL) dbx_log_set_level(DBX_LOG_WARN); /* the live view speaks */
  dbx_embed e;
  dbx_embed_opts eo = {.task_queue = tq, .namespace_ = conn.namespace_, .db_path = db, .worker_db = wdb,
                       .address = conn.address, .api_key = conn.api_key, .start_service = embedded,
                       .start_worker = embedded, .store_retention_ms = dbx_cli_store_retention_ms(retention_h)};
  if (!embedded) {
    memset(&e, 0, sizeof e);
    snprintf(e.address, sizeof e.address, "%s", conn.address);
  } else if (dbx_embed_start(&eo, &e) != 0) {
    free(input);
    embedded = 0; /* nothing to stop */
    c = NULL;
    goto out_signals;
  }
  char *gen_id = NULL;
  if (wfid == NULL) {
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    gen_id = dbx_asprintf("run-%s-%lld", base, (long long)(dbx_wall_ns() / 1000000));
    wfid = gen_id;
  }
  const char *hint_address = embedded ? NULL : e.address; /* "is a service running there?" */
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  co.address = e.address;
  char *err = NULL, *run_id = NULL;
  if (dbx_client_create(&co, &c) != DBX_OK) {
    fprintf(stderr, "durabox run: cannot create a client\n");
    goto out;
  }
  dbx_client_start_opts so = {.workflow_id = wfid, .workflow_type = type, .task_queue = tq, .input_json = input};
  dbx_cli_session_turn turn = {0};
  int prepared = session ? dbx_cli_session_prepare(c, "run", hint_address, conn.json, session, input, &turn) : 0;
  if (prepared != 0) {
    rc = prepared; /* said: 1, or 2 for an input that cannot take a session */
    goto out;
  }
  dbx_err er = session ? dbx_cli_session_start(c, &so, session, &turn, &run_id, &err)
                       : dbx_client_start_workflow(c, &so, &run_id, &err);
  if (session && er == DBX_OK && !conn.json)
    printf("session %s: turn %d (%s%s)\n", session, turn.turn, turn.previous_run_id ? "after run " : "the first",
           turn.previous_run_id ? turn.previous_run_id : "");
  dbx_cli_session_turn_free(&turn);
  if (er != DBX_OK) {
    dbx_cli_report("starting the workflow", hint_address, er, err);
    if (conn.json) dbx_cli_json_error(dbx_strerror(er), err ? err : dbx_strerror(er));
    goto out;
  }
  if (!embedded && !dbx_cli_await_pickup(c, wfid, run_id, type, tq, pickup_s, conn.json))
    goto out; /* no worker takes it: said, exit 1 */
  if (!conn.json) {
    printf("workflow %s (run %s) on %s%s\n", wfid, run_id ? run_id : "", e.address, embedded ? " (embedded)" : "");
    fflush(stdout);
    follow(c, wfid, run_id, hint_address, sw.interrupt);
  }
  if (dbx_rpc_cancel_fired(sw.interrupt)) goto interrupted;
  /* the result */
  DescribeWorkflowExecutionResponse *d = NULL;
  dbx_client_history h = {0};
  dbx_client_history_opts ho = {.close_event_only = 1, .wait_new_event = 1, .cancel = sw.interrupt};
  char *e2 = NULL;
  for (;;) {
    memset(&h, 0, sizeof h);
    er = dbx_client_get_history(c, wfid, run_id, &ho, &h, &e2);
    if (er != DBX_OK || h.n > 0) break;
    dbx_client_history_cleanup(&h);
  }
  if (er == DBX_ECANCELED && dbx_rpc_cancel_fired(sw.interrupt)) {
    free(e2);
    dbx_client_history_cleanup(&h);
    goto interrupted;
  }
  if (er != DBX_OK) {
    dbx_cli_report("waiting for the result", hint_address, er, e2);
    if (conn.json) dbx_cli_json_error(dbx_strerror(er), e2 ? e2 : dbx_strerror(er));
    free(e2);
    dbx_client_history_cleanup(&h);
    goto out;
  }
  HistoryEvent *ce = h.events[h.n - 1];
  if (ce->event_type == ET(WORKFLOW_EXECUTION_COMPLETED)) {
    char *r = dbx_payloads_to_json(ce->workflow_execution_completed_event_attributes->result);
    if (conn.json) {
      dbx_cli_utf8_puts(r ? r : "null");
      cJSON *j = cJSON_Parse(r ? r : "null");
      const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
      rc = cJSON_IsString(st) && strcmp(st->valuestring, "completed") != 0 ? 1 : 0;
      cJSON_Delete(j);
    } else {
      rc = print_summary(r);
    }
    free(r);
  } else {
    const Failure *f = ce->event_type == ET(WORKFLOW_EXECUTION_FAILED) ? ce->workflow_execution_failed_event_attributes->failure : NULL;
    fprintf(stderr, "durabox run: workflow %s did not complete: %s%s%s\n", wfid,
            ce->event_type == ET(WORKFLOW_EXECUTION_FAILED) ? "failed" : "closed", f ? ": " : "", f ? f->message : "");
    if (conn.json) {
      int t = ce->event_type;
      const char *how = t == ET(WORKFLOW_EXECUTION_FAILED)        ? "WorkflowExecutionFailed"
                         : t == ET(WORKFLOW_EXECUTION_TERMINATED) ? "WorkflowExecutionTerminated"
                         : t == ET(WORKFLOW_EXECUTION_CANCELED)   ? "WorkflowExecutionCanceled"
                         : t == ET(WORKFLOW_EXECUTION_TIMED_OUT)  ? "WorkflowExecutionTimedOut"
                                                                  : "WorkflowExecutionClosed";
      dbx_cli_json_error(how, f ? f->message : "the workflow did not complete");
    }
    rc = 1;
  }
  dbx_client_history_cleanup(&h);
  dbx_client_msg_free(d);
  goto out;
interrupted:
  cancel_and_wait(c, wfid, run_id, sw.force);
  rc = 130;
out:
  if (rc != 130 && dbx_rpc_cancel_fired(sw.interrupt)) rc = 130; /* a signal during start */
  free(err);
  free(run_id);
  dbx_client_destroy(c);
  if (embedded) dbx_embed_stop(&e, 10000);
  free(gen_id);
  free(input);
out_signals:
  if (watching) {
    sw.stopping = 1;
    pthread_kill(watcher, SIGUSR1);
    pthread_join(watcher, NULL);
  }
  dbx_rpc_cancel_destroy(sw.interrupt);
  dbx_rpc_cancel_destroy(sw.force);
  pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
  dbx_cli_conn_cleanup(&conn);
  return rc;
}
