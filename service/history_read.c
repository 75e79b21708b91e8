/* History reads: GetWorkflowExecutionHistory (pages, wait_new_event, close
 * event filter) and GetWorkflowExecutionHistoryReverse; the page tokens the
 * workflow task poll also hands out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/svc.h"


static int page_token_parse(ProtobufCBinaryData t, int64_t *from, int64_t *upto) {
  *from = 1;
  *upto = 0;
  if (t.len == 0) return 1;
  if (t.len != 16) return 0;
  uint64_t a = 0, b = 0;
  for (int i = 0; i < 8; i++) a = (a << 8) | t.data[i];
  for (int i = 8; i < 16; i++) b = (b << 8) | t.data[i];
  if (a < 1 || a > (uint64_t)INT64_MAX || b > (uint64_t)INT64_MAX) return 0;
  *from = (int64_t)a;
  *upto = (int64_t)b;
  return 1;
}

void svc_page_token_make(uint8_t out[16], int64_t from, int64_t upto) {
  for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)from >> (56 - 8 * i));
  for (int i = 0; i < 8; i++) out[8 + i] = (uint8_t)((uint64_t)upto >> (56 - 8 * i));
}

static void park_history(ectx *c, job *j, RunState *rs, const ProtobufCMessage *empty_reply) {
  svc_job_reply(j, empty_reply); /* what the caller gets if nothing happens before the deadline */
  j->park = PARK_HISTORY;
  j->park_key = svc_run_key(rs->namespace_, rs->workflow_id, rs->run_id, &j->park_key_len);
  j->park_deadline_ns = svc_long_poll_until(c, j);
}

dbx_err svc_h_get_history(ectx *c, job *j) {
  GetWorkflowExecutionHistoryRequest *q = svc_decode(j, &GetWorkflowExecutionHistoryRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  int64_t from, upto;
  if (!page_token_parse(q->next_page_token, &from, &upto)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "GetWorkflowExecutionHistory: next_page_token is malformed");
    goto out;
  }
  int running = rs->status == WS(RUNNING);
  GetWorkflowExecutionHistoryResponse r = INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_RESPONSE);
  History h = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
  r.history = &h;
  uint8_t tok[16];
  if (q->history_event_filter_type == TEMPORAL__API__ENUMS__V1__HISTORY_EVENT_FILTER_TYPE__HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT) {
    if (!running) {
      HistoryEvent *ev = NULL;
      rc = svc_event_load_one(c, rs->run_seq, rs->close_event_id, &ev);
      if (rc != DBX_OK) goto out;
      HistoryEvent *one[1] = {ev};
      h.events = one;
      h.n_events = 1;
      svc_job_reply(j, &r.base);
      svc_history_event_free(ev);
    } else if (q->wait_new_event) {
      svc_page_token_make(tok, rs->next_event_id, 0);
      r.next_page_token.data = tok;
      r.next_page_token.len = 16;
      park_history(c, j, rs, &r.base);
    } else {
      svc_job_reply(j, &r.base);
    }
    goto out;
  }
  if (from >= rs->next_event_id && q->wait_new_event && running) {
    svc_page_token_make(tok, from, upto);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
    park_history(c, j, rs, &r.base);
    goto out;
  }
  size_t max_events = q->maximum_page_size > 0 ? (size_t)q->maximum_page_size : 1000;
  int64_t last = upto > 0 ? upto : rs->next_event_id - 1;
  if ((int64_t)(from + (int64_t)max_events - 1) < last) last = from + (int64_t)max_events - 1;
  uint8_t *hist = NULL;
  size_t hist_len = 0;
  int64_t last_id = 0;
  rc = svc_history_encode(c, rs->run_seq, from, last, HISTORY_PAGE_BYTES, &hist, &hist_len, &last_id);
  if (rc != DBX_OK) goto out;
  int64_t end = upto > 0 ? upto : rs->next_event_id - 1;
  int64_t after = last_id + 1;
  if (after <= end || (q->wait_new_event && running && upto == 0)) {
    svc_page_token_make(tok, after, upto);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
  }
  r.history = NULL; /* spliced in from the stored bytes */
  svc_job_reply_field(j, &r.base, 1 /* history */, hist, hist_len);
  free(hist);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}

dbx_err svc_h_get_history_reverse(ectx *c, job *j) {
  GetWorkflowExecutionHistoryReverseRequest *q = svc_decode(j, &GetWorkflowExecutionHistoryReverseRequest__D);
  if (q == NULL) return DBX_OK;
  RunState *rs = NULL;
  dbx_err rc = DBX_OK;
  if (!svc_check_ns(c, j, q->namespace_)) goto out;
  rc = svc_load_execution(c, j, q->namespace_, q->execution, &rs);
  if (rc != DBX_OK || rs == NULL) goto out;
  int64_t top, unused;
  if (!page_token_parse(q->next_page_token, &top, &unused)) {
    svc_job_fail(j, DBX_GRPC_INVALID_ARGUMENT, "GetWorkflowExecutionHistoryReverse: next_page_token is malformed");
    goto out;
  }
  if (q->next_page_token.len == 0) top = rs->next_event_id - 1;
  int64_t size = q->maximum_page_size > 0 ? q->maximum_page_size : 250;
  int64_t bottom = top - size + 1 < 1 ? 1 : top - size + 1;
  HistoryEvent **evs = NULL;
  size_t n = 0;
  rc = svc_events_load(c, rs->run_seq, bottom, top + 1, &evs, &n, 0);
  if (rc != DBX_OK) goto out;
  for (size_t i = 0; i < n / 2; i++) {
    HistoryEvent *t = evs[i];
    evs[i] = evs[n - 1 - i];
    evs[n - 1 - i] = t;
  }
  GetWorkflowExecutionHistoryReverseResponse r =
      INIT(TEMPORAL__API__WORKFLOWSERVICE__V1__GET_WORKFLOW_EXECUTION_HISTORY_REVERSE_RESPONSE);
  History h = INIT(TEMPORAL__API__HISTORY__V1__HISTORY);
  h.events = evs;
  h.n_events = n;
  r.history = &h;
  uint8_t tok[16];
  if (bottom > 1) {
    svc_page_token_make(tok, bottom - 1, 0);
    r.next_page_token.data = tok;
    r.next_page_token.len = 16;
  }
  svc_job_reply(j, &r.base);
  svc_events_free(evs, n);
out:
  svc_runstate_free(rs);
  protobuf_c_message_free_unpacked(&q->base, NULL);
  return rc;
}
