/* cli/agentview: see agentview.h. */
#include "cli/agentview.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/util.h"
#include "worker/client.h"

static const char *s_of(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(x) ? x->valuestring : "";
}
static int n_of(const cJSON *o, const char *k) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(x) ? (int)dbx_json_int(x->valuedouble, INT_MIN, INT_MAX) : 0;
}

char *dbx_cli_held_step_words(const cJSON *h) {
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(h, "step");
  if (cJSON_IsString(st)) return dbx_asprintf("step '%s'", st->valuestring);
  return dbx_asprintf("step %d", n_of(h, "step"));
}

char *dbx_cli_agent_held_words(const cJSON *h) {
  char *args = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(h, "arguments"));
  if (args && strlen(args) > 300) strcpy(args + 296, "...");
  const cJSON *dl = cJSON_GetObjectItemCaseSensitive(h, "deadline_ms");
  long long left = cJSON_IsNumber(dl) ? ((long long)dbx_json_int(dl->valuedouble, 0, INT64_MAX) - dbx_wall_ns() / 1000000) / 1000 : 0;
  const char *why = s_of(h, "reason");
  const cJSON *ap = cJSON_GetObjectItemCaseSensitive(h, "approvers");
  char *who = cJSON_IsArray(ap) ? cJSON_PrintUnformatted(ap) : NULL;
  char *step = dbx_cli_held_step_words(h);
  char *until = cJSON_IsNumber(dl) ? dbx_asprintf("times out in %lld s", left > 0 ? left : 0)
                                   : dbx_strdup("waits without a timeout");
  char *w = dbx_asprintf("%s %s %s (rule %s%s%s) arguments %s, %s%s%s", step ? step : "step ?",
                         s_of(h, "kind"), s_of(h, "target"), s_of(h, "rule"), *why ? ": " : "", why,
                         args ? args : "null", until ? until : "", who ? ", approvers " : "", who ? who : "");
  free(until);
  free(step);
  free(who);
  free(args);
  return w;
}

char *dbx_cli_agent_marker_line(const MarkerRecordedEventAttributes *m) {
  if (!m || !m->marker_name || strncmp(m->marker_name, "durabox.", 8) != 0) return NULL;
  int pol = strcmp(m->marker_name, "durabox.policy") == 0;
  int req = strcmp(m->marker_name, "durabox.approval_requested") == 0;
  int dec = strcmp(m->marker_name, "durabox.approval_decided") == 0;
  if (!pol && !req && !dec) return NULL;
  cJSON *j = NULL;
  for (size_t i = 0; i < m->n_details && !j; i++)
    if (m->details[i]->key && strcmp(m->details[i]->key, "data") == 0) {
      char *txt = dbx_payloads_to_json(m->details[i]->value);
      j = cJSON_Parse(txt ? txt : "null");
      free(txt);
    }
  char *line = NULL;
  if (pol) {
    const char *why = s_of(j, "reason");
    line = dbx_asprintf("policy: step %d %s %s -> %s (rule %s%s%s)", n_of(j, "step"), s_of(j, "kind"),
                        s_of(j, "target"), s_of(j, "decision"), s_of(j, "rule"), *why ? ": " : "", why);
  } else if (req) {
    char *w = dbx_cli_agent_held_words(j);
    line = dbx_asprintf("HELD %s; waiting for durabox approval grant|deny", w ? w : "");
    free(w);
  } else {
    line = dbx_asprintf("approval: step %d %s by %s (%s)", n_of(j, "step"), s_of(j, "decision"),
                        s_of(j, "by"), s_of(j, "reason"));
  }
  cJSON_Delete(j);
  return line;
}

cJSON *dbx_cli_agent_held(const WorkflowExecutionInfo *info) {
  const Memo *m = info ? info->memo : NULL;
  for (size_t i = 0; m && i < m->n_fields; i++) {
    if (strcmp(m->fields[i]->key, "durabox.approval") != 0 || !m->fields[i]->value) continue;
    const Payload *p = m->fields[i]->value;
    cJSON *j = cJSON_ParseWithLength((const char *)p->data.data, p->data.len);
    if (cJSON_IsObject(j)) return j;
    cJSON_Delete(j);
  }
  return NULL;
}

/* Text from history shown on a terminal: controls become '?', one line. */
static void safe_put(const char *s, size_t max) {
  s = s ? s : "";
  size_t n = strlen(s);
  if (n > max) { /* cut on a character's start */
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  }
  char *t = dbx_strndup(s, n);
  for (char *p = t; p && *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = *p == '\n' || *p == '\t' ? ' ' : '?';
  if (t) fputs(t, stdout);
  free(t);
}

void dbx_cli_agent_print_summary(const cJSON *r) {
  printf("\n%-4s %-9s %-12s %-17s %-4s %s\n", "STEP", "KIND", "TARGET", "DECISION", "OK", "SUMMARY");
  const cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(r, "steps")) {
    printf("%-4d %-9s ", n_of(s, "n"), s_of(s, "kind"));
    safe_put(s_of(s, "target"), 12);
    printf("%*s %-17s %-4s ", (int)(12 - (strlen(s_of(s, "target")) < 12 ? strlen(s_of(s, "target")) : 12)), "",
           s_of(s, "decision"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "ok")) ? "yes" : "NO");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "approval");
    if (ap) {
      printf("[%s by ", s_of(ap, "decision"));
      safe_put(s_of(ap, "by"), 60);
      printf("] ");
    }
    safe_put(s_of(s, "summary"), 160);
    printf("\n");
  }
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
  printf("\nstatus: %s; %d model calls, %d tool calls, %d tokens\n", s_of(r, "status"), n_of(r, "model_calls"),
         n_of(r, "tool_calls"), n_of(u, "total_tokens"));
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(r, "pull_request");
  if (cJSON_IsObject(pr)) {
    printf("pull request #%d ", n_of(pr, "number"));
    safe_put(s_of(pr, "url"), 300);
    printf("\n");
  }
  printf("answer: ");
  safe_put(s_of(r, "answer"), 4000);
  printf("\n");
}
