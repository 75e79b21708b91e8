/* durabox workflow start|execute|show|describe|list|result|query|signal|cancel|terminate:
 * Temporal's workflow commands against any Temporal-compatible service (the
 * embedded one or a Temporal cluster), human output by default, --output json
 * for scripts, exit status 1 when the workflow (or the call) failed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/agentview.h"
#include "cli/cli.h"
#include "cli/conn.h"
#include "cli/fork.h"
#include "cli/flags.h"
#include "cli/pbjson.h"
#include "cli/session.h"
#include "base/util.h"
#include "rpc/rpc.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: durabox workflow <command> [flags]\n"
          "  start     --type T --task-queue Q --workflow-id ID [--input JSON | --input-file F]\n"
          "            [--session S]: the next turn of session S (the workflow id S; refused while\n"
          "            a turn runs; the input gets \"session\": {id, turn, previous_run_id, state})\n"
          "  execute   like start, then wait for the result; when no worker has taken the first\n"
          "            workflow task within --pickup-timeout S (default 10), or a worker failed it\n"
          "            (e.g. a type it does not serve), says so and exits 1\n"
          "  show      --workflow-id ID [--run-id R] [--follow]   (--output json: Temporal's JSON history\n"
          "            {\"events\": [...]}, every page; --no-json-shorthand-payloads: payloads as\n"
          "            {metadata, data}; with --follow one event per line)\n"
          "  reset     --workflow-id ID [--run-id R] (--event-id E | --type FirstWorkflowTask|\n"
          "            LastWorkflowTask|LastContinuedAsNew) [--reason TEXT]: a new run from the point\n"
          "            (signals after it re-applied); prints the new run id\n"
          "  fork      --workflow-id ID [--run-id R] --at EVENT_ID [--workflow-id-new NEW]: a new\n"
          "            execution from that event (durabox.Script; fork-points: the covered events)\n"
          "  describe  --workflow-id ID [--run-id R]\n"
          "  list      [--query Q]   (--output json: one JSON array)\n"
          "  result    --workflow-id ID [--run-id R]   (waits for the run to close; exit 1 unless it\n"
          "            completed, or when a durabox.Script says \"status\": \"failed\"); an unreachable\n"
          "            service is retried for --retry-for S (default 60)\n"
          "  query     --workflow-id ID [--run-id R] --type NAME [--input JSON]   (durabox.Script: progress)\n"
          "  signal    --workflow-id ID --name N [--input JSON]\n"
          "  cancel    --workflow-id ID [--reason R]\n"
          "  terminate --workflow-id ID [--reason R]\n"
          "connection: --address HOST:PORT --namespace NS --api-key K --tls --tls-ca F --tls-cert F --tls-key F\n"
          "            (or TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*)\n"
          "output:     --output text|json (json: failures as {\"error\": {\"message\", \"type\"}})\n"
          "flags are written --flag value or --flag=value\n");
}

typedef struct {
  const char *workflow_id, *run_id, *type, *task_queue, *input, *input_file, *query, *name, *reason;
  const char *session; /* start, execute: --session S */
  const char *address; /* for dbx_cli_report's hint */
  int follow;
  int raw_payloads;      /* show: --no-json-shorthand-payloads */
  double event_id;       /* reset: --event-id (0: not given) */
  int json;              /* --output json */
  double pickup_timeout; /* execute: seconds for the first workflow task to be taken */
  double retry_for;      /* result: seconds to retry an unreachable service */
} wf_args;

/* A failed call: the stderr line(s) of dbx_cli_report, and with --output
 * json also {"error": {...}} on stdout. */
static void report(const wf_args *a, const char *what, dbx_err e, const char *err) {
  dbx_cli_report(what, a->address, e, err);
  if (a->json) dbx_cli_json_error(dbx_strerror(e), err ? err : dbx_strerror(e));
}

static const char *event_name(int type) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__event_type__descriptor, type);
  return v ? v->name + strlen("EVENT_TYPE_") : "?";
}

/* CamelCase of an EVENT_TYPE_FOO_BAR name, as Temporal's tools print it. */
static void event_title(int type, char *out, size_t cap) {
  const char *n = event_name(type);
  size_t k = 0;
  int up = 1;
  for (; *n && k + 1 < cap; n++) {
    if (*n == '_') {
      up = 1;
      continue;
    }
    out[k++] = up ? *n : (char)(*n >= 'A' && *n <= 'Z' ? *n + 32 : *n);
    up = 0;
  }
  out[k] = '\0';
}

/* One line of detail for the events people look at most. */
static void event_detail(const HistoryEvent *e, char *out, size_t cap) {
  out[0] = '\0';
  switch (e->attributes_case) {
  case HEV(ACTIVITY_TASK_SCHEDULED):
    snprintf(out, cap, "%s (activity %s)", e->activity_task_scheduled_event_attributes->activity_type->name,
             e->activity_task_scheduled_event_attributes->activity_id);
    break;
  case HEV(ACTIVITY_TASK_STARTED):
    snprintf(out, cap, "attempt %d", e->activity_task_started_event_attributes->attempt);
    break;
  case HEV(ACTIVITY_TASK_FAILED): {
    const Failure *f = e->activity_task_failed_event_attributes->failure;
    snprintf(out, cap, "%s", f ? f->message : "");
    break;
  }
  case HEV(TIMER_STARTED):
    snprintf(out, cap, "timer %s, %llds", e->timer_started_event_attributes->timer_id,
             (long long)(e->timer_started_event_attributes->start_to_fire_timeout
                             ? e->timer_started_event_attributes->start_to_fire_timeout->seconds
                             : 0));
    break;
  case HEV(WORKFLOW_EXECUTION_STARTED):
    snprintf(out, cap, "%s on %s", e->workflow_execution_started_event_attributes->workflow_type->name,
             e->workflow_execution_started_event_attributes->task_queue->name);
    break;
  case HEV(WORKFLOW_EXECUTION_FAILED): {
    const Failure *f = e->workflow_execution_failed_event_attributes->failure;
    snprintf(out, cap, "%s", f ? f->message : "");
    break;
  }
  case HEV(WORKFLOW_EXECUTION_SIGNALED):
    snprintf(out, cap, "%s", e->workflow_execution_signaled_event_attributes->signal_name);
    break;
  case HEV(WORKFLOW_EXECUTION_TERMINATED):
    snprintf(out, cap, "%s", e->workflow_execution_terminated_event_attributes->reason);
    break;
  case HEV(WORKFLOW_TASK_FAILED): {
    const Failure *f = e->workflow_task_failed_event_attributes->failure;
    snprintf(out, cap, "%s", f ? f->message : "");
    break;
  }
  case HEV(MARKER_RECORDED): { /* durabox.Agent's decisions and held steps (cli/agentview.h) */
    char *l = dbx_cli_agent_marker_line(e->marker_recorded_event_attributes);
    snprintf(out, cap, "%s", l ? l : e->marker_recorded_event_attributes->marker_name);
    free(l);
    break;
  }
  default:
    break;
  }
}

static void print_event(const HistoryEvent *e, int json) {
  if (json) {
    cJSON *j = dbx_pb_to_json(&e->base);
    if (j) dbx_cli_json_print(j, 0);
    cJSON_Delete(j);
    return;
  }
  char title[96], detail[512];
  event_title(e->event_type, title, sizeof title);
  event_detail(e, detail, sizeof detail);
  printf("%5lld  %-44s ", (long long)e->event_id, title);
  dbx_cli_utf8_puts(detail);
}

static int cmd_show(dbx_client *c, const wf_args *a, int json) {
  dbx_client_history h = {0};
  char *err = NULL;
  dbx_err e = dbx_client_get_history(c, a->workflow_id, a->run_id, NULL, &h, &err); /* every page */
  if (e != DBX_OK) {
    report(a, "show", e, err);
    free(err);
    dbx_client_history_cleanup(&h);
    return 1;
  }
  if (json && !a->follow) { /* Temporal's JSON history document */
    cJSON *doc = dbx_pb_history_to_json(h.events, h.n, a->raw_payloads);
    dbx_client_history_cleanup(&h);
    if (doc == NULL) return 1;
    dbx_cli_json_print(doc, 1);
    cJSON_Delete(doc);
    return 0;
  }
  for (size_t i = 0; i < h.n; i++) print_event(h.events[i], json);
  int64_t next = h.n ? h.events[h.n - 1]->event_id + 1 : 1;
  int closed = h.n && (h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_COMPLETED) ||
                       h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_FAILED) ||
                       h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_CANCELED) ||
                       h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_TERMINATED) ||
                       h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_TIMED_OUT) ||
                       h.events[h.n - 1]->event_type == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW));
  dbx_client_history_cleanup(&h);
  fflush(stdout);
  if (!a->follow || closed) return 0;
  /* follow: long-poll pages from the next event */
  uint8_t tok[16];
  for (int i = 0; i < 8; i++) tok[i] = (uint8_t)((uint64_t)next >> (56 - 8 * i));
  memset(tok + 8, 0, 8);
  uint8_t *cur = malloc(16);
  size_t cur_len = 16;
  if (cur == NULL) return 1;
  memcpy(cur, tok, 16);
  for (;;) {
    dbx_client_history_opts o = {.wait_new_event = 1, .page_token = cur, .page_token_len = cur_len};
    dbx_client_history p = {0};
    e = dbx_client_get_history(c, a->workflow_id, a->run_id, &o, &p, &err);
    if (e != DBX_OK) {
      report(a, "show --follow", e, err);
      free(err);
      dbx_client_history_cleanup(&p);
      free(cur);
      return 1;
    }
    for (size_t i = 0; i < p.n; i++) print_event(p.events[i], json);
    fflush(stdout);
    free(cur);
    cur = NULL;
    if (p.next_page_token_len == 0) {
      dbx_client_history_cleanup(&p);
      return 0;
    }
    cur = malloc(p.next_page_token_len);
    if (cur == NULL) {
      dbx_client_history_cleanup(&p);
      return 1;
    }
    memcpy(cur, p.next_page_token, p.next_page_token_len);
    cur_len = p.next_page_token_len;
    dbx_client_history_cleanup(&p);
  }
}

/* 1 when a completed run's result is a durabox.Script summary (an object
 * with a "steps" array) whose "status" is "failed", as `durabox run` exits. */
static int script_failed(const Payloads *result) {
  char *r = dbx_payloads_to_json(result);
  cJSON *j = r ? cJSON_Parse(r) : NULL;
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
  int failed = cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "steps")) && cJSON_IsString(st) &&
               strcmp(st->valuestring, "failed") == 0;
  cJSON_Delete(j);
  free(r);
  return failed;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms) {
  struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* The close event of (workflow_id, rid) by long-poll, into *h (its last
 * event). A service that cannot be reached (UNAVAILABLE: down, restarting)
 * is retried with backoff (0.25 s doubling to 5 s) for a->retry_for
 * seconds from the first failure in a row, saying so once on stderr. */
static dbx_err await_close(dbx_client *c, const wf_args *a, const char *rid, dbx_client_history *h, char **err) {
  dbx_client_history_opts o = {.wait_new_event = 1, .close_event_only = 1};
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  int64_t down_since = -1, backoff = 250;
  for (;;) {
    o.page_token = tok;
    o.page_token_len = tok_len;
    memset(h, 0, sizeof *h);
    free(*err);
    *err = NULL;
    dbx_err e = dbx_client_get_history(c, a->workflow_id, rid, &o, h, err);
    if (e == DBX_EUNAVAILABLE) {
      dbx_client_history_cleanup(h);
      if (down_since < 0) {
        down_since = now_ms();
        fprintf(stderr, "durabox: result: the service at %s is unavailable (%s); retrying for up to %.0f s\n",
                a->address, *err ? *err : "UNAVAILABLE", a->retry_for);
      }
      if (now_ms() - down_since >= (int64_t)(a->retry_for * 1000)) break;
      sleep_ms(backoff);
      backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
      continue; /* the same page again */
    }
    down_since = -1;
    backoff = 250;
    free(tok);
    tok = NULL;
    if (e != DBX_OK || h->n > 0) {
      free(tok);
      return e;
    }
    tok_len = h->next_page_token_len;
    tok = tok_len ? malloc(tok_len) : NULL;
    if (tok) memcpy(tok, h->next_page_token, tok_len);
    dbx_client_history_cleanup(h);
  }
  free(tok);
  return DBX_EUNAVAILABLE;
}

/* The failure of a close event other than completed, as {"error": ...}:
 * message from the failure or reason, type the event's name. */
static void json_close_error(const HistoryEvent *ev) {
  char title[96], detail[512];
  event_title(ev->event_type, title, sizeof title);
  event_detail(ev, detail, sizeof detail);
  if (detail[0] == '\0') snprintf(detail, sizeof detail, "workflow ended: %s", title);
  dbx_cli_json_error(title, detail);
}

/* execute --output json: one document, as Temporal's CLI prints it: the
 * start's fields in head (workflowId, runId, type, namespace, taskQueue,
 * and a session's turn), then durationMillis, status (COMPLETED, FAILED,
 * TIMEOUT, CANCELED, TERMINATED), closeEvent and, when completed, result. */
static void print_execute_json(cJSON *head, const HistoryEvent *close_ev, int64_t started_ms) {
  int t = (int)close_ev->event_type;
  const char *status = t == ET(WORKFLOW_EXECUTION_COMPLETED)   ? "COMPLETED"
                       : t == ET(WORKFLOW_EXECUTION_FAILED)    ? "FAILED"
                       : t == ET(WORKFLOW_EXECUTION_TIMED_OUT) ? "TIMEOUT"
                       : t == ET(WORKFLOW_EXECUTION_CANCELED)  ? "CANCELED"
                       : t == ET(WORKFLOW_EXECUTION_TERMINATED) ? "TERMINATED"
                                                                : "<unknown>";
  cJSON_AddNumberToObject(head, "durationMillis", (double)(now_ms() - started_ms));
  cJSON_AddStringToObject(head, "status", status);
  cJSON *ev = dbx_pb_to_json(&close_ev->base);
  cJSON_AddItemToObject(head, "closeEvent", ev ? ev : cJSON_CreateNull());
  if (t == ET(WORKFLOW_EXECUTION_COMPLETED)) {
    char *r = dbx_payloads_to_json(close_ev->workflow_execution_completed_event_attributes->result);
    cJSON *rj = r ? cJSON_Parse(r) : NULL;
    cJSON_AddItemToObject(head, "result", rj ? rj : cJSON_CreateNull());
    free(r);
  }
  dbx_cli_json_print(head, 0);
}

/* Wait for the run's close event, following continue-as-new; print the
 * result (with exec_head, execute's single JSON document, print_execute_json).
 * Returns the exit status: 0 completed, 1 otherwise. */
static int wait_result_as(dbx_client *c, const wf_args *a, const char *run_id, int json, cJSON *exec_head,
                          int64_t started_ms) {
  const char *workflow_id = a->workflow_id;
  char *rid = run_id ? strdup(run_id) : NULL;
  for (;;) {
    dbx_client_history h = {0};
    char *err = NULL;
    dbx_err e = await_close(c, a, rid, &h, &err);
    if (e != DBX_OK) {
      report(a, "result", e, err);
      free(err);
      dbx_client_history_cleanup(&h);
      free(rid);
      return 1;
    }
    free(err);
    HistoryEvent *close_ev = h.events[h.n - 1];
    if (close_ev->event_type == ET(WORKFLOW_EXECUTION_CONTINUED_AS_NEW)) {
      free(rid);
      rid = strdup(close_ev->workflow_execution_continued_as_new_event_attributes->new_execution_run_id);
      dbx_client_history_cleanup(&h);
      continue;
    }
    int completed = close_ev->event_type == ET(WORKFLOW_EXECUTION_COMPLETED);
    if (json && exec_head) {
      print_execute_json(exec_head, close_ev, started_ms);
    } else if (json && completed) {
      print_event(close_ev, 1);
    } else if (json) {
      json_close_error(close_ev);
    } else if (completed) {
      char *r = dbx_payloads_to_json(close_ev->workflow_execution_completed_event_attributes->result);
      dbx_cli_utf8_puts(r ? r : "null");
      free(r);
    } else {
      char title[96], detail[512];
      event_title(close_ev->event_type, title, sizeof title);
      event_detail(close_ev, detail, sizeof detail);
      fprintf(stderr, "durabox: workflow %s ended: %s %s\n", workflow_id, title, detail);
    }
    int rc = completed ? 0 : 1;
    if (rc == 0 && script_failed(close_ev->workflow_execution_completed_event_attributes->result)) rc = 1;
    dbx_client_history_cleanup(&h);
    free(rid);
    return rc;
  }
}

static int wait_result(dbx_client *c, const wf_args *a, const char *run_id, int json) {
  return wait_result_as(c, a, run_id, json, NULL, 0);
}

static int cmd_describe(dbx_client *c, const wf_args *a, int json) {
  DescribeWorkflowExecutionResponse *r = NULL;
  char *err = NULL;
  dbx_err e = dbx_client_describe(c, a->workflow_id, a->run_id, &r, &err);
  if (e != DBX_OK) {
    report(a, "describe", e, err);
    free(err);
    return 1;
  }
  if (json) {
    cJSON *j = dbx_pb_to_json(&r->base);
    if (j) dbx_cli_json_print(j, 1);
    cJSON_Delete(j);
  } else {
    WorkflowExecutionInfo *i = r->workflow_execution_info;
    const ProtobufCEnumValue *st =
        protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__workflow_execution_status__descriptor, i->status);
    printf("workflow id   %s\nrun id        %s\ntype          %s\nstatus        %s\ntask queue    %s\nhistory       %lld events, %lld bytes\n",
           i->execution->workflow_id, i->execution->run_id, i->type ? i->type->name : "",
           st ? st->name + strlen("WORKFLOW_EXECUTION_STATUS_") : "?", i->task_queue, (long long)i->history_length,
           (long long)i->history_size_bytes);
    for (size_t k = 0; k < r->n_pending_activities; k++) {
      PendingActivityInfo *p = r->pending_activities[k];
      printf("pending       activity %s %s attempt %d\n", p->activity_id, p->activity_type ? p->activity_type->name : "",
             p->attempt);
    }
    cJSON *held = dbx_cli_agent_held(i); /* a durabox.Agent step waiting for a person */
    char *hw = held ? dbx_cli_agent_held_words(held) : NULL;
    if (hw) {
      char *line = dbx_asprintf("awaiting      approval of %s", hw);
      if (line) dbx_cli_utf8_puts(line);
      free(line);
    }
    free(hw);
    cJSON_Delete(held);
  }
  dbx_client_msg_free(r);
  return 0;
}

/* text: the table header once the first page arrived (never on a failed
 * call); json: one array of WorkflowExecutionInfo objects ([] when none). */
static int cmd_list(dbx_client *c, const wf_args *a, int json) {
  uint8_t *tok = NULL;
  size_t tok_len = 0;
  int first = 1;
  cJSON *all = json ? cJSON_CreateArray() : NULL;
  if (json && all == NULL) return 1;
  do {
    ListWorkflowExecutionsResponse *r = NULL;
    char *err = NULL;
    dbx_err e = dbx_client_list(c, a->query, 0, tok, tok_len, &r, &err);
    free(tok);
    tok = NULL;
    if (e != DBX_OK) {
      report(a, "list", e, err);
      free(err);
      cJSON_Delete(all);
      return 1;
    }
    if (first && !json) printf("%-38s %-36s %-22s %s\n", "WORKFLOW ID", "RUN ID", "TYPE", "STATUS");
    first = 0;
    for (size_t k = 0; k < r->n_executions; k++) {
      WorkflowExecutionInfo *i = r->executions[k];
      if (json) {
        cJSON *j = dbx_pb_to_json(&i->base);
        if (j) cJSON_AddItemToArray(all, j);
      } else {
        const ProtobufCEnumValue *st = protobuf_c_enum_descriptor_get_value(
            &temporal__api__enums__v1__workflow_execution_status__descriptor, i->status);
        /* ids and types are anyone's strings: a control byte in one must not steer the terminal */
        char *cw = dbx_cli_cell(i->execution->workflow_id), *cr = dbx_cli_cell(i->execution->run_id),
             *ct = dbx_cli_cell(i->type ? i->type->name : "");
        printf("%-38s %-36s %-22s %s\n", cw ? cw : "?", cr ? cr : "?", ct ? ct : "?",
               st ? st->name + strlen("WORKFLOW_EXECUTION_STATUS_") : "?");
        free(cw);
        free(cr);
        free(ct);
      }
    }
    if (r->next_page_token.len) {
      tok = malloc(r->next_page_token.len);
      if (tok) {
        memcpy(tok, r->next_page_token.data, r->next_page_token.len);
        tok_len = r->next_page_token.len;
      }
    }
    dbx_client_msg_free(r);
  } while (tok);
  if (json) {
    dbx_cli_json_print(all, 1);
    cJSON_Delete(all);
  }
  return 0;
}

/* 1 when text is one JSON value; else 0 with "--input is not valid JSON
 * (near byte N)" printed (file names the --input-file path). */
static int json_ok(const char *sub, const char *flag, const char *file, const char *text, size_t len) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (j != NULL) {
    /* trailing text after the value (other than white space) is an error too */
    while (end && (size_t)(end - text) < len && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
      end++;
    cJSON_Delete(j);
    if (end == NULL || (size_t)(end - text) >= len) return 1;
  } else {
    end = cJSON_GetErrorPtr();
  }
  long pos = end && end >= text && (size_t)(end - text) <= len ? (long)(end - text) : 0;
  fprintf(stderr, "durabox workflow %s: %s%s%s is not valid JSON (near byte %ld)\n", sub, flag, file ? " " : "",
          file ? file : "", pos);
  return 0;
}

/* query: the JSON answer (text), {"result": answer} (json); a query the
 * workflow refuses (unknown type, ...) or cannot answer is exit 1. */
static int cmd_query(dbx_client *c, const wf_args *a, const char *in) {
  if (a->type == NULL || !*a->type) {
    fprintf(stderr, "durabox workflow query: --type is required (the query's name, e.g. progress)\n");
    return 2;
  }
  char *res = NULL, *err = NULL;
  dbx_err e = dbx_client_query(c, a->workflow_id, a->run_id, a->type, in, &res, &err);
  if (e != DBX_OK) {
    report(a, "query", e, err);
    free(err);
    return 1;
  }
  if (a->json) {
    cJSON *o = cJSON_CreateObject(), *v = res ? cJSON_Parse(res) : NULL;
    if (v == NULL) v = res ? cJSON_CreateString(res) : cJSON_CreateNull();
    if (o && v && cJSON_AddItemToObject(o, "result", v)) v = NULL;
    if (o) dbx_cli_json_print(o, 0);
    cJSON_Delete(v);
    cJSON_Delete(o);
  } else {
    dbx_cli_utf8_puts(res ? res : "null");
  }
  free(res);
  return 0;
}

/* The workflow task event a --type reset point names in events[0..n):
 * the first or last WorkflowTaskCompleted; with none, when started_ok, the
 * event after the first WorkflowTaskScheduled (its Started), as Temporal's
 * CLI does for FirstWorkflowTask and LastWorkflowTask; else 0. */
static int64_t reset_point(HistoryEvent *const *evs, size_t n, int last, int started_ok) {
  int64_t id = 0, sched = 0;
  for (size_t i = 0; i < n; i++) {
    if (evs[i]->event_type == ET(WORKFLOW_TASK_SCHEDULED) && sched == 0) sched = evs[i]->event_id;
    if (evs[i]->event_type != ET(WORKFLOW_TASK_COMPLETED)) continue;
    id = evs[i]->event_id;
    if (!last) break;
  }
  return id ? id : started_ok && sched ? sched + 1 : 0;
}

/* reset: ResetWorkflowExecution of (workflow id, run) at --event-id or at
 * the point --type names (LastContinuedAsNew: the last completed workflow
 * task of the run that continued as new into this one). */
static int cmd_reset(dbx_client *c, const wf_args *a) {
  int64_t ev = (int64_t)a->event_id;
  char *run = a->run_id && *a->run_id ? strdup(a->run_id) : NULL, *err = NULL;
  int rc = 1;
  if ((ev > 0) == (a->type != NULL)) {
    fprintf(stderr, "durabox workflow reset: give one of --event-id E or --type "
                    "FirstWorkflowTask|LastWorkflowTask|LastContinuedAsNew\n");
    free(run);
    return 2;
  }
  if (a->type) {
    int first = strcmp(a->type, "FirstWorkflowTask") == 0, last = strcmp(a->type, "LastWorkflowTask") == 0;
    int can = strcmp(a->type, "LastContinuedAsNew") == 0;
    if (!first && !last && !can) {
      fprintf(stderr, "durabox workflow reset: --type %s is not FirstWorkflowTask, LastWorkflowTask or "
                      "LastContinuedAsNew\n", a->type);
      free(run);
      return 2;
    }
    dbx_client_history h = {0};
    dbx_err e = dbx_client_get_history(c, a->workflow_id, run, NULL, &h, &err);
    if (e == DBX_OK && can) {
      const WorkflowExecutionStartedEventAttributes *st =
          h.n ? h.events[0]->workflow_execution_started_event_attributes : NULL;
      const char *prev = st ? st->continued_execution_run_id : NULL;
      if (prev == NULL || !*prev) {
        fprintf(stderr, "durabox workflow reset: run of %s did not start from a continue-as-new\n", a->workflow_id);
        dbx_client_history_cleanup(&h);
        free(run);
        return 1;
      }
      free(run);
      run = strdup(prev);
      dbx_client_history_cleanup(&h);
      memset(&h, 0, sizeof h);
      e = dbx_client_get_history(c, a->workflow_id, run, NULL, &h, &err);
    }
    if (e != DBX_OK) {
      report(a, "reset", e, err);
      dbx_client_history_cleanup(&h);
      goto out;
    }
    ev = reset_point(h.events, h.n, !first, !can);
    dbx_client_history_cleanup(&h);
    if (ev == 0) {
      fprintf(stderr, "durabox workflow reset: the run has no completed workflow task to reset to\n");
      goto out;
    }
  }
  char req_id[DBX_UUID_LEN + 1];
  if (dbx_uuid_v4(req_id) != DBX_OK) goto out;
  WorkflowExecution we = INIT(TEMPORAL__API__COMMON__V1__WORKFLOW_EXECUTION);
  we.workflow_id = (char *)a->workflow_id;
  we.run_id = run ? run : "";
  ResetWorkflowExecutionRequest q = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__RESET_WORKFLOW_EXECUTION_REQUEST);
  q.namespace_ = (char *)dbx_client_namespace(c);
  q.workflow_execution = &we;
  q.reason = (char *)(a->reason ? a->reason : "durabox workflow reset");
  q.workflow_task_finish_event_id = ev;
  q.request_id = req_id;
  ResetWorkflowExecutionResponse *r = NULL;
  dbx_err e = dbx_client_call(c, "ResetWorkflowExecution", &q.base, &ResetWorkflowExecutionResponse__D, 30000, NULL,
                              (ProtobufCMessage **)&r, &err);
  if (e != DBX_OK) {
    report(a, "reset", e, err);
    goto out;
  }
  if (a->json) {
    cJSON *o = cJSON_CreateObject();
    if (o && cJSON_AddStringToObject(o, "workflowId", a->workflow_id) &&
        cJSON_AddStringToObject(o, "runId", r->run_id ? r->run_id : "") &&
        cJSON_AddNumberToObject(o, "eventId", (double)ev))
      dbx_cli_json_print(o, 0);
    cJSON_Delete(o);
  } else {
    printf("reset workflow %s at event %lld: new run %s\n", a->workflow_id, (long long)ev, r->run_id ? r->run_id : "");
  }
  dbx_client_msg_free(r);
  rc = 0;
out:
  free(err);
  free(run);
  return rc;
}

static const char *const k_verbs[] = {"start", "execute", "show", "describe", "list", "result",
                                      "query", "signal", "cancel", "terminate", "reset"};

/* Flags into a and conn; 0, 2 (usage error, printed) or -1 (--help printed). */
static int parse_flags(const char *sub, int argc, char **argv, wf_args *a, dbx_cli_conn *conn) {
  const dbx_cli_flag fl[] = {
      {"--workflow-id", "-w", DBX_CLI_FLAG_STR, &a->workflow_id, 0, 0},
      {"--run-id", "-r", DBX_CLI_FLAG_STR, &a->run_id, 0, 0},
      {"--type", NULL, DBX_CLI_FLAG_STR, &a->type, 0, 0},
      {"--task-queue", "-t", DBX_CLI_FLAG_STR, &a->task_queue, 0, 0},
      {"--input", "-i", DBX_CLI_FLAG_STR, &a->input, 0, 0},
      {"--input-file", NULL, DBX_CLI_FLAG_STR, &a->input_file, 0, 0},
      {"--query", "-q", DBX_CLI_FLAG_STR, &a->query, 0, 0},
      {"--name", NULL, DBX_CLI_FLAG_STR, &a->name, 0, 0},
      {"--reason", NULL, DBX_CLI_FLAG_STR, &a->reason, 0, 0},
      {"--session", NULL, DBX_CLI_FLAG_STR, &a->session, 0, 0},
      {"--follow", "-f", DBX_CLI_FLAG_BOOL, &a->follow, 0, 0},
      {"--no-json-shorthand-payloads", NULL, DBX_CLI_FLAG_BOOL, &a->raw_payloads, 0, 0},
      {"--event-id", "-e", DBX_CLI_FLAG_NUM, &a->event_id, 1, 1e15},
      {"--pickup-timeout", NULL, DBX_CLI_FLAG_NUM, &a->pickup_timeout, 0, 86400},
      {"--retry-for", NULL, DBX_CLI_FLAG_NUM, &a->retry_for, 0, 86400},
  };
  char cmd[64];
  snprintf(cmd, sizeof cmd, "durabox workflow %s", sub);
  for (int i = 2; i < argc; i++) {
    int r = dbx_cli_conn_flag(conn, argc, argv, &i);
    if (r == 0) r = dbx_cli_flag_take(cmd, fl, sizeof fl / sizeof fl[0], argc, argv, &i);
    if (r < 0) return 2;
    if (r > 0) continue;
    if (dbx_cli_flag_is_help(argv[i])) {
      usage(stdout);
      return -1;
    }
    return dbx_cli_flag_unknown(cmd, argv[i]);
  }
  /* given but empty: the service would refuse it (exit 1); it is the command line's fault */
  if (dbx_cli_nonempty(cmd, "--type", a->type) != 0 || dbx_cli_nonempty(cmd, "--task-queue", a->task_queue) != 0 ||
      dbx_cli_nonempty(cmd, "--name", a->name) != 0 || dbx_cli_nonempty(cmd, "--workflow-id", a->workflow_id) != 0)
    return 2;
  a->json = conn->json;
  return 0;
}

/* What a successful cancel did: the service accepts a cancel of a closed run
 * as a no-op (as Temporal's does), so a closed run is named as such. */
/* The run's status by Temporal's name ("RUNNING", "CANCELED", ...) into
 * name; 1 when it is closed, 0 when running, -1 when it could not be told. */
static int run_closed(dbx_client *c, const wf_args *a, char name[32]) {
  DescribeWorkflowExecutionResponse *r = NULL;
  char *err = NULL;
  int closed = -1;
  snprintf(name, 32, "?");
  if (dbx_client_describe(c, a->workflow_id, a->run_id, &r, &err) == DBX_OK && r->workflow_execution_info) {
    int st = r->workflow_execution_info->status;
    closed = st != TEMPORAL__API__ENUMS__V1__WORKFLOW_EXECUTION_STATUS__WORKFLOW_EXECUTION_STATUS_RUNNING;
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&temporal__api__enums__v1__workflow_execution_status__descriptor, st);
    if (v) snprintf(name, 32, "%s", v->name + strlen("WORKFLOW_EXECUTION_STATUS_"));
  }
  dbx_client_msg_free(r);
  free(err);
  return closed;
}

/* What a cancel did, judged by the run's status before the request (was_closed,
 * from run_closed) and after it: a service answers a cancel of a closed run
 * with success (Temporal's no-op), and a run may close within milliseconds of
 * the request (a session's turn), so only the status before tells that there
 * was nothing to cancel. */
static void cancel_said(dbx_client *c, const wf_args *a, int was_closed, const char *before) {
  char now[32];
  if (was_closed == 1) {
    printf("%s had already closed (%s): nothing to cancel\n", a->workflow_id, before);
    return;
  }
  int closed = run_closed(c, a, now);
  if (closed == 1 && strcmp(now, "CANCELED") == 0)
    printf("%s cancelled\n", a->workflow_id);
  else if (closed == 1)
    printf("%s closed (%s) before the cancellation took effect\n", a->workflow_id, now);
  else /* the run's workflow code decides when it stops */
    printf("cancellation of %s requested; `durabox workflow result -w %s` waits for its end\n", a->workflow_id,
           a->workflow_id);
}

int dbx_cli_workflow(int argc, char **argv) {
  if (argc < 2 || dbx_cli_flag_is_help(argv[1])) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "fork") == 0 || strcmp(sub, "fork-points") == 0) return dbx_cli_fork(argc, argv);
  size_t v = 0;
  while (v < sizeof k_verbs / sizeof k_verbs[0] && strcmp(sub, k_verbs[v]) != 0) v++;
  if (v == sizeof k_verbs / sizeof k_verbs[0]) {
    fprintf(stderr, "durabox workflow: unknown command '%s'\n", sub);
    usage(stderr);
    return 2;
  }
  dbx_cli_conn conn;
  dbx_cli_conn_init(&conn);
  wf_args a = {.pickup_timeout = 10, .retry_for = 60};
  int pr = parse_flags(sub, argc, argv, &a, &conn);
  if (pr != 0) return pr < 0 ? 0 : pr;
  if (a.session && strcmp(sub, "start") != 0 && strcmp(sub, "execute") != 0) {
    fprintf(stderr, "durabox workflow %s: --session is for start and execute\n", sub);
    return 2;
  }
  char cmd[64];
  snprintf(cmd, sizeof cmd, "durabox workflow %s", sub);
  if (dbx_cli_nonempty(cmd, "--session", a.session) != 0 ||
      (a.session && dbx_cli_session_check_id(cmd + strlen("durabox "), a.session) != 0))
    return 2;
  if (a.session && a.workflow_id && strcmp(a.workflow_id, a.session) != 0) {
    fprintf(stderr, "durabox workflow %s: a session is a workflow id: give --session S or --workflow-id, "
                    "not both\n", sub);
    return 2;
  }
  if (a.session) a.workflow_id = a.session;
  int needs_id = strcmp(sub, "list") != 0;
  if (needs_id && (a.workflow_id == NULL || !*a.workflow_id)) {
    fprintf(stderr, "durabox workflow %s: --workflow-id is required\n", sub);
    return 2;
  }
  if (a.input && a.input_file) {
    fprintf(stderr, "durabox workflow %s: give --input JSON or --input-file F, not both\n", sub);
    return 2;
  }
  /* the input is read and checked before any call: bad JSON never reaches the service */
  char *input = NULL;
  if (a.input_file) {
    size_t len = 0;
    input = dbx_cli_read_file(a.input_file, &len);
    if (input == NULL) {
      fprintf(stderr, "durabox workflow %s: cannot read %s: %s\n", sub, a.input_file, strerror(errno));
      return 2;
    }
    if (!json_ok(sub, "--input-file", a.input_file, input, len)) {
      free(input);
      return 2;
    }
  } else if (a.input && !json_ok(sub, "--input", NULL, a.input, strlen(a.input))) {
    return 2;
  }
  if (conn.address == NULL) conn.address = "127.0.0.1:7233";
  a.address = conn.address;
  if (dbx_cli_conn_load(&conn) != 0) {
    free(input);
    return 2;
  }
  dbx_client_opts co;
  dbx_cli_conn_client_opts(&conn, &co);
  dbx_client *c = NULL;
  if (dbx_client_create(&co, &c) != DBX_OK) {
    fprintf(stderr, "durabox: cannot create a client for %s\n", conn.address);
    free(input);
    dbx_cli_conn_cleanup(&conn);
    return 1;
  }
  int rc = 2;
  char *err = NULL;
  const char *in = input ? input : a.input;
  dbx_cli_session_turn turn = {0};
  if (strcmp(sub, "start") == 0 || strcmp(sub, "execute") == 0) {
    if (a.type == NULL || a.task_queue == NULL) {
      fprintf(stderr, "durabox workflow %s: --type and --task-queue are required\n", sub);
      goto out;
    }
    dbx_client_start_opts so = {.workflow_id = a.workflow_id, .workflow_type = a.type, .task_queue = a.task_queue,
                                .input_json = in};
    char *run_id = NULL;
    int64_t started_ms = now_ms();
    if (a.session && (rc = dbx_cli_session_prepare(c, "workflow start", a.address, conn.json, a.session, in,
                                                   &turn)) != 0)
      goto out;
    dbx_err e = a.session ? dbx_cli_session_start(c, &so, a.session, &turn, &run_id, &err)
                          : dbx_client_start_workflow(c, &so, &run_id, &err);
    if (e != DBX_OK) {
      report(&a, "start", e, err);
      rc = 1;
      goto out;
    }
    int execute = strcmp(sub, "execute") == 0;
    cJSON *head = NULL;
    if (conn.json) {
      cJSON *o = cJSON_CreateObject();
      if (o && cJSON_AddStringToObject(o, "workflowId", a.workflow_id) &&
          cJSON_AddStringToObject(o, "runId", run_id ? run_id : "") &&
          (!execute || (cJSON_AddStringToObject(o, "type", a.type) &&
                        cJSON_AddStringToObject(o, "namespace", conn.namespace_ ? conn.namespace_ : "default") &&
                        cJSON_AddStringToObject(o, "taskQueue", a.task_queue))) &&
          (!a.session || (cJSON_AddNumberToObject(o, "turn", turn.turn) &&
                          (turn.previous_run_id ? cJSON_AddStringToObject(o, "previousRunId", turn.previous_run_id)
                                                : cJSON_AddNullToObject(o, "previousRunId"))))) {
        if (execute) /* one document at the end, as Temporal's CLI prints it */
          head = o, o = NULL;
        else
          dbx_cli_json_print(o, 0);
      }
      cJSON_Delete(o);
    } else {
      printf("started workflow %s run %s\n", a.workflow_id, run_id ? run_id : "");
      if (a.session)
        printf("session %s: turn %d (%s%s)\n", a.session, turn.turn,
               turn.previous_run_id ? "after run " : "the first", turn.previous_run_id ? turn.previous_run_id : "");
    }
    fflush(stdout);
    rc = 0;
    if (execute)
      rc = dbx_cli_await_pickup(c, a.workflow_id, run_id, a.type, a.task_queue, a.pickup_timeout, a.json)
               ? wait_result_as(c, &a, run_id, conn.json, head, started_ms)
               : 1;
    cJSON_Delete(head);
    free(run_id);
  } else if (strcmp(sub, "show") == 0) {
    rc = cmd_show(c, &a, conn.json);
  } else if (strcmp(sub, "reset") == 0) {
    rc = cmd_reset(c, &a);
  } else if (strcmp(sub, "describe") == 0) {
    rc = cmd_describe(c, &a, conn.json);
  } else if (strcmp(sub, "list") == 0) {
    rc = cmd_list(c, &a, conn.json);
  } else if (strcmp(sub, "result") == 0) {
    rc = wait_result(c, &a, a.run_id, conn.json);
  } else if (strcmp(sub, "query") == 0) {
    rc = cmd_query(c, &a, in);
  } else if (strcmp(sub, "signal") == 0) {
    if (a.name == NULL) {
      fprintf(stderr, "durabox workflow signal: --name is required\n");
      goto out;
    }
    dbx_err e = dbx_client_signal(c, a.workflow_id, a.run_id, a.name, in, &err);
    rc = e == DBX_OK ? 0 : 1;
    if (e != DBX_OK) report(&a, "signal", e, err);
    else if (!conn.json) printf("signal %s sent to %s\n", a.name, a.workflow_id);
  } else if (strcmp(sub, "cancel") == 0) {
    char before[32];
    int was_closed = conn.json ? -1 : run_closed(c, &a, before);
    dbx_err e = dbx_client_cancel(c, a.workflow_id, a.run_id, a.reason, &err);
    rc = e == DBX_OK ? 0 : 1;
    if (e != DBX_OK) report(&a, "cancel", e, err);
    else if (!conn.json) cancel_said(c, &a, was_closed, before);
  } else if (strcmp(sub, "terminate") == 0) {
    dbx_err e = dbx_client_terminate(c, a.workflow_id, a.run_id, a.reason, NULL, &err);
    rc = e == DBX_OK ? 0 : 1;
    if (e != DBX_OK) report(&a, "terminate", e, err);
    else if (!conn.json) printf("%s terminated\n", a.workflow_id);
  }
out:
  dbx_cli_session_turn_free(&turn);
  free(err);
  free(input);
  dbx_client_destroy(c);
  dbx_cli_conn_cleanup(&conn);
  return rc;
}
